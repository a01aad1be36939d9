// Shape `late_join`: main joins the flusher only at the very end, after it has
// destroyed the cache lock and logged the shutdown under its own log lock. A
// flusher that runs late (after main's log section) locks a destroyed mutex.
// Plain runs pass: the flusher, created first, is long done by then.
// The candidate: main's last section before the join ahead of the flusher's
// section: `0:mutex_unlock(log_lock)#1 -> 1:mutex_lock(cache_lock)#1`.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t cache_lock;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static long cached, logged;

static void *flusher(void *arg) {
    (void)arg;
    int rc = pthread_mutex_lock(&cache_lock);
    if (rc != 0) {
        fprintf(stderr, "flusher: cache lock destroyed (%s)\n", strerror(rc));
        abort();
    }
    cached = 0;
    pthread_mutex_unlock(&cache_lock);
    return NULL;
}

static void *filler(void *arg) {
    pthread_mutex_lock(&cache_lock);
    cached += (long)arg;
    pthread_mutex_unlock(&cache_lock);
    return NULL;
}

int main(void) {
    pthread_mutex_init(&cache_lock, NULL);
    pthread_t f, a, b;
    pthread_create(&f, NULL, flusher, NULL);
    usleep(20000); // the flusher "always" finishes first
    pthread_create(&a, NULL, filler, (void *)1L);
    pthread_create(&b, NULL, filler, (void *)2L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_mutex_destroy(&cache_lock);
    pthread_mutex_lock(&log_lock);
    logged++;
    pthread_mutex_unlock(&log_lock);
    pthread_join(f, NULL);
    printf("cached %ld, logged %ld\n", cached, logged);
    return 0;
}
