// Threads bump an atomic counter and a plain (racy) counter. Watching
// `atomic_total` must classify the increments as atomic read-modify-writes;
// `plain_total++` is a read-modify-write that is not atomic.
// Usage: watch_atomic [THREADS] [ROUNDS]   (defaults 3 and 1000)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

long atomic_total;
long plain_total;
// Bumped back to back in a loop: the kernel cannot put a uprobe on a lock-prefixed
// instruction, and the first of these is also the loop's jump target.
long pair_a, pair_b;
static int rounds = 1000;

__attribute__((noinline)) void add_atomic(void) { __atomic_fetch_add(&atomic_total, 1, __ATOMIC_SEQ_CST); }
__attribute__((noinline)) long add_atomic_fetch(long n) { return __atomic_fetch_add(&atomic_total, n, __ATOMIC_SEQ_CST); }
__attribute__((noinline)) long load_atomic(void) { return __atomic_load_n(&atomic_total, __ATOMIC_ACQUIRE); }
__attribute__((noinline)) long swap_atomic(long v) { return __atomic_exchange_n(&atomic_total, v, __ATOMIC_SEQ_CST); }
__attribute__((noinline)) void add_plain(void) { plain_total++; }
__attribute__((noinline)) void add_pair(int n) {
    for (int i = 0; i < n; i++) {
        __atomic_fetch_add(&pair_a, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&pair_b, 1, __ATOMIC_RELAXED);
    }
}

static void *worker(void *arg) {
    (void)arg;
    for (int i = 0; i < rounds; i++) {
        add_atomic();
        add_plain();
    }
    return NULL;
}

int main(int argc, char **argv) {
    int nthreads = argc > 1 ? atoi(argv[1]) : 3;
    if (argc > 2) rounds = atoi(argv[2]);
    if (nthreads < 1 || nthreads > 16) nthreads = 3;
    pthread_t threads[16];
    for (int t = 0; t < nthreads; t++) pthread_create(&threads[t], NULL, worker, NULL);
    for (int t = 0; t < nthreads; t++) pthread_join(threads[t], NULL);
    add_pair(rounds);
    long before = add_atomic_fetch(0);
    long swapped = swap_atomic(before);
    printf("atomic %ld plain %ld (expected %ld) swapped %ld pair %ld %ld\n", load_atomic(), plain_total,
           (long)nthreads * rounds, swapped, pair_a, pair_b);
    return 0;
}
