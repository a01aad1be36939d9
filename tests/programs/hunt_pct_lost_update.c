// A lost update with no sleep to hide it: each of two workers reads a counter in
// one critical section and writes back its increment in a second one. Run freely,
// the first worker is done long before the second starts (main computes for
// 5 ms in between, far longer than four lock calls take), so the bug almost
// never shows; a scheduler that delays the first worker between its two sections
// (PCT's priority change points, a random walk) exposes it. No sleep: a sleeping
// thread is not enabled, so a strategy would let the worker run meanwhile. Exits 1
// when an increment was lost.
#include <pthread.h>
#include <stdio.h>
#include <time.h>

static long counter;
static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;

static void *increment(void *arg) {
    (void)arg;
    pthread_mutex_lock(&counter_lock);
    long seen = counter;                 // read
    pthread_mutex_unlock(&counter_lock);
    pthread_mutex_lock(&counter_lock);
    counter = seen + 1;                  // write back, from a possibly stale read
    pthread_mutex_unlock(&counter_lock);
    return NULL;
}

// Busy for `ns` nanoseconds (running, not sleeping).
static void compute(long ns) {
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    do {
        clock_gettime(CLOCK_MONOTONIC, &now);
    } while ((now.tv_sec - start.tv_sec) * 1000000000L + (now.tv_nsec - start.tv_nsec) < ns);
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, increment, NULL);
    compute(5000000);
    pthread_create(&b, NULL, increment, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (counter != 2) {
        fprintf(stderr, "lost update: counter %ld, expected 2\n", counter);
        return 1;
    }
    printf("counter %ld\n", counter);
    return 0;
}
