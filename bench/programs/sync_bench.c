// Synchronization micro-benchmarks for `cargo xtask bench record`.
//
// Each mode does a fixed amount of work and prints, on stdout, the span it timed
// itself (CLOCK_MONOTONIC from just before the first pthread_create to just after the
// last pthread_join, or around the loop for the single-thread mode), so a recorder's
// own start-up and shut-down never count as the program's slowdown:
//
//   span_ns N      the timed span
//   ops N          operations done in it (lock/unlock pairs, round trips, rwlock ops)
//   start_ns N     CLOCK_MONOTONIC at the start of main
//   end_ns N       CLOCK_MONOTONIC just before main returns
//
// Modes:
//   lock THREADS ITERS            THREADS threads x ITERS lock/increment/unlock of one mutex
//   pair ITERS                    one thread, ITERS uncontended lock/unlock pairs
//   pingpong ROUNDS               two threads hand a token back and forth (mutex + condvar)
//   rwlock THREADS ITERS WRITE%   THREADS threads x ITERS rwlock ops, WRITE% of them writes
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile long counter;
static long iterations;
static int write_percent;

static void *lock_worker(void *arg) {
    (void)arg;
    for (long i = 0; i < iterations; i++) {
        pthread_mutex_lock(&counter_lock);
        counter++;
        pthread_mutex_unlock(&counter_lock);
    }
    return NULL;
}

static pthread_mutex_t token_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t token_moved = PTHREAD_COND_INITIALIZER;
static int token_holder;

static void *pingpong_worker(void *arg) {
    int me = (int)(long)arg;
    for (long i = 0; i < iterations; i++) {
        pthread_mutex_lock(&token_lock);
        while (token_holder != me) pthread_cond_wait(&token_moved, &token_lock);
        token_holder = 1 - me;
        pthread_cond_signal(&token_moved);
        pthread_mutex_unlock(&token_lock);
    }
    return NULL;
}

static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static long table[16];

static void *rwlock_worker(void *arg) {
    // A fixed interleaving of reads and writes per thread (no PRNG in the hot loop).
    long seed = (long)arg, sum = 0;
    for (long i = 0; i < iterations; i++) {
        if ((i * 37 + seed) % 100 < write_percent) {
            pthread_rwlock_wrlock(&table_lock);
            table[i % 16]++;
        } else {
            pthread_rwlock_rdlock(&table_lock);
            for (int j = 0; j < 16; j++) sum += table[j];
        }
        pthread_rwlock_unlock(&table_lock);
    }
    return (void *)sum;
}

static long long run_threads(int n, void *(*fn)(void *)) {
    pthread_t t[64];
    long long begin = now_ns();
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, fn, (void *)(long)i);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    return now_ns() - begin;
}

static int usage(void) {
    fprintf(stderr, "usage: sync_bench lock THREADS ITERS | pair ITERS | pingpong ROUNDS | rwlock THREADS ITERS WRITE%%\n");
    return 2;
}

int main(int argc, char **argv) {
    long long start = now_ns(), span;
    long ops;
    if (argc < 3) return usage();
    const char *mode = argv[1];
    if (!strcmp(mode, "lock") && argc == 4) {
        int threads = atoi(argv[2]);
        if (threads < 1 || threads > 64) return usage();
        iterations = atol(argv[3]);
        span = run_threads(threads, lock_worker);
        ops = threads * iterations;
        if (counter != ops) {
            fprintf(stderr, "sync_bench: counter %ld, expected %ld\n", counter, ops);
            return 1;
        }
    } else if (!strcmp(mode, "pair") && argc == 3) {
        iterations = atol(argv[2]);
        long long begin = now_ns();
        for (long i = 0; i < iterations; i++) {
            pthread_mutex_lock(&counter_lock);
            counter++;
            pthread_mutex_unlock(&counter_lock);
        }
        span = now_ns() - begin;
        ops = iterations;
    } else if (!strcmp(mode, "pingpong") && argc == 3) {
        iterations = atol(argv[2]);
        span = run_threads(2, pingpong_worker);
        ops = iterations;
    } else if (!strcmp(mode, "rwlock") && argc == 5) {
        int threads = atoi(argv[2]);
        if (threads < 1 || threads > 64) return usage();
        iterations = atol(argv[3]);
        write_percent = atoi(argv[4]);
        span = run_threads(threads, rwlock_worker);
        ops = threads * iterations;
    } else {
        return usage();
    }
    printf("span_ns %lld\nops %ld\nstart_ns %lld\nend_ns %lld\n", span, ops, start, now_ns());
    return 0;
}
