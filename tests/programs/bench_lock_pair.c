// Micro-benchmark of one probe site: N uncontended lock/unlock pairs (or trylock/unlock,
// rdlock/unlock, sem_wait/post) on one thread; prints nanoseconds per pair (thread
// CPU time and wall time). Compare, on one quiet machine:
//   ./bench lock 100000                                   (native)
//   target/debug/examples/empty_probes 8c3c7,8dd55 -- ./bench lock 100000
//                                    (empty probes at the sites --list-probes prints)
//   ordo record -- ./bench lock 100000                    (recorded)
#define _GNU_SOURCE
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// Wall time, and the thread's CPU time (user + kernel: a probe's trap and its eBPF
// program are charged to the thread; time descheduled on a busy machine is not).
static double now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv) {
    const char *what = argc > 1 ? argv[1] : "lock";
    long n = argc > 2 ? atol(argv[2]) : 100000;
    static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
    static sem_t s;
    sem_init(&s, 0, 1);
    double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
    for (long i = 0; i < n; i++) {
        if (!strcmp(what, "lock")) { pthread_mutex_lock(&m); pthread_mutex_unlock(&m); }
        else if (!strcmp(what, "trylock")) { pthread_mutex_trylock(&m); pthread_mutex_unlock(&m); }
        else if (!strcmp(what, "rdlock")) { pthread_rwlock_rdlock(&rw); pthread_rwlock_unlock(&rw); }
        else if (!strcmp(what, "wrlock")) { pthread_rwlock_wrlock(&rw); pthread_rwlock_unlock(&rw); }
        else if (!strcmp(what, "sem")) { sem_wait(&s); sem_post(&s); }
    }
    double cpu = (now(CLOCK_THREAD_CPUTIME_ID) - c0) / n, wall = (now(CLOCK_MONOTONIC) - t0) / n;
    printf("%s %.0f ns/pair cpu %.0f ns/pair wall\n", what, cpu, wall);
    return 0;
}
