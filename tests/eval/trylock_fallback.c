// Bug: a trylock fast path whose fallback loses data. Each reporter adds its count
// to the total if it gets the lock at once; when the lock is busy it "defers" the
// count to a local buffer that is never merged.
// Shape: a failed trylock: one reporter's trylock must fall inside the other's
// critical section (mutex_lock_failed ordered against a lock and an unlock).
// Fails: abort() in main when the total misses a report.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long total;
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;

static void *reporter(void *arg) {
    long n = (long)arg;
    long deferred = 0;
    if (pthread_mutex_trylock(&total_lock) == 0) {
        total += n;
        pthread_mutex_unlock(&total_lock);
    } else {
        deferred += n;   // meant to be merged later; never is
    }
    return (void *)deferred;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, reporter, (void *)10L);
    pthread_create(&b, NULL, reporter, (void *)20L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (total != 30) {
        fprintf(stderr, "total %ld, expected 30: a deferred report was lost\n", total);
        abort();
    }
    printf("total %ld\n", total);
    return 0;
}
