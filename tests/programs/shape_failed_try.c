// Shape `failed_try`: each reporter adds its count to the total when its trylock
// succeeds and drops it when the lock is busy (the fallback is wrong). Plain runs
// pass: the second reporter is created after the first is done. The candidate:
// the second reporter's trylock inside the first's section, failing:
// `1:mutex_lock(total_lock)#1 -> 2:mutex_lock_failed(total_lock)#1` and
// `2:mutex_lock_failed(total_lock)#1 -> 1:mutex_unlock(total_lock)#1`.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long total;
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;

static void *reporter(void *arg) {
    if (pthread_mutex_trylock(&total_lock) == 0) {
        total += (long)arg;
        pthread_mutex_unlock(&total_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, reporter, (void *)10L);
    usleep(20000);
    pthread_create(&b, NULL, reporter, (void *)20L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (total != 30) {
        fprintf(stderr, "total %ld, expected 30\n", total);
        abort();
    }
    return 0;
}
