// Bug: waiting on a condition variable while holding another lock. The waiter
// takes the config lock, then waits for `ready` under the ready lock; the
// publisher needs the config lock before it can set `ready`. It is normally done
// long before the waiter starts.
// Shape: the waiter's config section (its 1st lock) before the publisher's; a
// deadlock through a condvar wait, not a lock cycle.
// Fails: deadlock (the program hangs).
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t cfg_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;
static int ready, cfg_version;

static void *publisher(void *arg) {
    (void)arg;
    pthread_mutex_lock(&cfg_lock);
    cfg_version++;
    pthread_mutex_unlock(&cfg_lock);
    pthread_mutex_lock(&ready_lock);
    ready = 1;
    pthread_cond_broadcast(&ready_cond);
    pthread_mutex_unlock(&ready_lock);
    return NULL;
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&cfg_lock);
    pthread_mutex_lock(&ready_lock);
    while (!ready) pthread_cond_wait(&ready_cond, &ready_lock);   // still holds cfg_lock
    pthread_mutex_unlock(&ready_lock);
    int v = cfg_version;
    pthread_mutex_unlock(&cfg_lock);
    return (void *)(long)v;
}

int main(void) {
    pthread_t p, w;
    pthread_create(&p, NULL, publisher, NULL);
    pthread_create(&w, NULL, waiter, NULL);
    pthread_join(p, NULL);
    void *v;
    pthread_join(w, &v);
    printf("config version %ld\n", (long)v);
    return 0;
}
