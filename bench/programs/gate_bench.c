// Memory-access gate micro-benchmark for `cargo xtask bench gate`: the main thread
// writes `level` once, then a worker reads it ITERS times in a loop (one read
// instruction) and prints the loop's span:
//
//   span_ns N      CLOCK_MONOTONIC around the worker's loop
//   reads N        reads of `level` in it
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int level;
static long iters;

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((noipa)) static long use(int v) { return v; }

static void *worker(void *arg) {
    (void)arg;
    long sum = 0;
    long long start = now_ns();
    for (long i = 0; i < iters; i++)
        sum += use(level);
    long long span = now_ns() - start;
    printf("span_ns %lld\nreads %ld\n", span, iters);
    return (void *)sum;
}

int main(int argc, char **argv) {
    iters = argc > 1 ? atol(argv[1]) : 100000;
    level = 1;
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    return 0;
}
