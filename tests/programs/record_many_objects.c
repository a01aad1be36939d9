// Locks and unlocks N distinct mutexes once each, then the first again: more
// objects than the kernel side's sequence table holds (262 144) evicts counters,
// and the first mutex's is by then the least recently used.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 1000;
    pthread_mutex_t *locks = calloc((size_t)n, sizeof *locks);
    if (!locks)
        return 1;
    for (long i = 0; i < n; i++) {
        pthread_mutex_lock(&locks[i]);
        pthread_mutex_unlock(&locks[i]);
    }
    pthread_mutex_lock(&locks[0]);
    pthread_mutex_unlock(&locks[0]);
    printf("locked %ld mutexes\n", n);
    free(locks);
    return 0;
}
