// Test program for `ordo record`: each mode exercises one kind of synchronization a
// known number of times and prints what the test needs to check the trace
// (object addresses, and the order the program itself observed).
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t counter_lock = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static int *order_log; // thread index of each acquisition, in acquisition order
static int iterations;

static void *contend(void *arg) {
    int me = (int)(long)arg;
    for (int i = 0; i < iterations; i++) {
        pthread_mutex_lock(&counter_lock);
        order_log[counter++] = me;
        pthread_mutex_unlock(&counter_lock);
    }
    return NULL;
}

// Heavy contention: N threads x M increments; prints the acquisition order.
static int mode_contention(int threads, int m) {
    iterations = m;
    order_log = calloc((size_t)threads * m, sizeof(int));
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, contend, (void *)(long)(i + 1));
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("lock %p\n", (void *)&counter_lock);
    printf("order");
    for (long i = 0; i < counter; i++) printf(" %d", order_log[i]);
    printf("\n");
    return counter == (long)threads * m ? 0 : 1;
}

static volatile int stop_flag;
static void *contend_until_stopped(void *arg) {
    while (!stop_flag) {
        pthread_mutex_lock(&counter_lock);
        counter++;
        pthread_mutex_unlock(&counter_lock);
    }
    return NULL;
}

// N threads contend until MILLIS milliseconds have passed (for attaching to).
static int mode_timed(int threads, int millis) {
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, contend_until_stopped, NULL);
    usleep((useconds_t)millis * 1000);
    stop_flag = 1;
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("lock %p\n", (void *)&counter_lock);
    return 0;
}

static pthread_mutex_t pp_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pp_cond = PTHREAD_COND_INITIALIZER;
static int turn, rounds;

static void *pong(void *arg) {
    int me = (int)(long)arg;
    for (int i = 0; i < rounds; i++) {
        pthread_mutex_lock(&pp_lock);
        while (turn != me) pthread_cond_wait(&pp_cond, &pp_lock);
        turn = 1 - me;
        pthread_cond_signal(&pp_cond);
        pthread_mutex_unlock(&pp_lock);
    }
    return NULL;
}

// Condvar ping-pong between two threads for R rounds.
static int mode_pingpong(int r) {
    rounds = r;
    pthread_t a, b;
    pthread_create(&a, NULL, pong, (void *)0L);
    pthread_create(&b, NULL, pong, (void *)1L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("lock %p\ncond %p\n", (void *)&pp_lock, (void *)&pp_cond);
    return 0;
}

static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static int table[16];

static void *reader(void *arg) {
    long sum = 0;
    for (int i = 0; i < iterations; i++) {
        pthread_rwlock_rdlock(&table_lock);
        for (int j = 0; j < 16; j++) sum += table[j];
        pthread_rwlock_unlock(&table_lock);
    }
    return (void *)sum;
}

static void *writer(void *arg) {
    for (int i = 0; i < iterations; i++) {
        pthread_rwlock_wrlock(&table_lock);
        table[i % 16]++;
        pthread_rwlock_unlock(&table_lock);
    }
    return NULL;
}

// R readers and W writers, M operations each.
static int mode_rwlock(int readers, int writers, int m) {
    iterations = m;
    pthread_t t[64];
    int n = 0;
    for (int i = 0; i < readers; i++) pthread_create(&t[n++], NULL, reader, NULL);
    for (int i = 0; i < writers; i++) pthread_create(&t[n++], NULL, writer, NULL);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    printf("rwlock %p\n", (void *)&table_lock);
    return 0;
}

static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static sem_t step_a, step_b;

static void *try_thread(void *arg) {
    // The main thread holds held_lock now: trylock and timedlock must fail.
    int r1 = pthread_mutex_trylock(&held_lock);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 20 * 1000 * 1000;
    if (ts.tv_nsec >= 1000000000) { ts.tv_sec++; ts.tv_nsec -= 1000000000; }
    int r2 = pthread_mutex_timedlock(&held_lock, &ts);
    sem_post(&step_a);
    sem_wait(&step_b);
    // Released now: trylock succeeds.
    int r3 = pthread_mutex_trylock(&held_lock);
    if (r3 == 0) pthread_mutex_unlock(&held_lock);
    printf("results %d %d %d\n", r1, r2, r3);
    return NULL;
}

// Trylock failing (EBUSY), timedlock timing out (ETIMEDOUT), then trylock succeeding.
static int mode_trylock(void) {
    sem_init(&step_a, 0, 0);
    sem_init(&step_b, 0, 0);
    pthread_mutex_lock(&held_lock);
    pthread_t t;
    pthread_create(&t, NULL, try_thread, NULL);
    sem_wait(&step_a);
    pthread_mutex_unlock(&held_lock);
    sem_post(&step_b);
    pthread_join(t, NULL);
    printf("lock %p\nsem_a %p\nsem_b %p\n", (void *)&held_lock, (void *)&step_a, (void *)&step_b);
    return 0;
}

// A recursive mutex taken three levels deep, twice.
static int mode_recursive(void) {
    static pthread_mutex_t rec;
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_init(&rec, &attr);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&rec);
        pthread_mutex_lock(&rec);
        pthread_mutex_lock(&rec);
        pthread_mutex_unlock(&rec);
        pthread_mutex_unlock(&rec);
        pthread_mutex_unlock(&rec);
    }
    printf("lock %p\n", (void *)&rec);
    return 0;
}

static pthread_barrier_t barrier;
static void *at_barrier(void *arg) {
    for (int i = 0; i < 3; i++) pthread_barrier_wait(&barrier);
    return NULL;
}

// N threads (plus main) meet at a barrier three times.
static int mode_barrier(int threads) {
    pthread_barrier_init(&barrier, NULL, threads + 1);
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, at_barrier, NULL);
    at_barrier(NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("barrier %p\n", (void *)&barrier);
    return 0;
}

static void *spawner(void *arg) {
    int depth = (int)(long)arg;
    if (depth > 0) {
        pthread_t a, b;
        pthread_create(&a, NULL, spawner, (void *)(long)(depth - 1));
        pthread_create(&b, NULL, spawner, (void *)(long)(depth - 1));
        pthread_join(a, NULL);
        pthread_join(b, NULL);
    }
    return NULL;
}

// The lock held for MS milliseconds of computation (nothing in between that the
// recorder sees: the clock is read through the vDSO), then released.
static int mode_hold(int ms) {
    struct timespec t0, t;
    pthread_mutex_lock(&counter_lock);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ms * 1000000L);
    pthread_mutex_unlock(&counter_lock);
    printf("lock %p\n", (void *)&counter_lock);
    return 0;
}

// Every CPU kept busy for MS milliseconds (one thread more than there are CPUs),
// each thread locking and unlocking a mutex of its own between short
// computations. Prints the pairs made.
static long busy_ms;
static void *busy(void *arg) {
    long *pairs = arg;
    pthread_mutex_t mine = PTHREAD_MUTEX_INITIALIZER;
    struct timespec t0, t;
    volatile unsigned x = 1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do {
        for (int i = 0; i < 64; i++) {
            pthread_mutex_lock(&mine);
            for (int k = 0; k < 2000; k++) x = x * 1664525u + 1013904223u;
            pthread_mutex_unlock(&mine);
        }
        *pairs += 64;
        clock_gettime(CLOCK_MONOTONIC, &t);
    } while ((t.tv_sec - t0.tv_sec) * 1000L + (t.tv_nsec - t0.tv_nsec) / 1000000L < busy_ms);
    return NULL;
}
static int mode_busy(int ms) {
    int n = (int)sysconf(_SC_NPROCESSORS_ONLN) + 1;
    pthread_t t[257];
    long pairs[257] = {0}, total = 0;
    if (n > 257) n = 257;
    busy_ms = ms;
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, busy, &pairs[i]);
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        total += pairs[i];
    }
    printf("pairs %ld\n", total);
    return 0;
}

// A binary tree of threads of the given depth.
static int mode_tree(int depth) {
    spawner((void *)(long)depth);
    return 0;
}

// One address holding, round after round, a mutex made anew in each way a program
// may make one (pthread_mutex_init, zeroed memory, a robust mutex, an init over a
// used mutex without destroy), a condition variable and a semaphore; N threads
// contend on each mutex M times. Prints the slot and the acquisition order.
static union {
    pthread_mutex_t m;
    pthread_cond_t c;
    sem_t s;
} reused;
static pthread_barrier_t rounds_barrier;
static int reuse_rounds;

static int is_mutex_round(int r) { return r % 6 != 2 && r % 6 != 4; }

static void *contend_in_rounds(void *arg) {
    int me = (int)(long)arg;
    for (int r = 0; r < reuse_rounds; r++) {
        pthread_barrier_wait(&rounds_barrier);
        if (is_mutex_round(r)) {
            for (int i = 0; i < iterations; i++) {
                pthread_mutex_lock(&reused.m);
                order_log[counter++] = me;
                pthread_mutex_unlock(&reused.m);
            }
        }
        pthread_barrier_wait(&rounds_barrier);
    }
    return NULL;
}

static int mode_reuse(int rounds, int threads, int m) {
    reuse_rounds = rounds;
    iterations = m;
    order_log = calloc((size_t)rounds * threads * m, sizeof(int));
    pthread_barrier_init(&rounds_barrier, NULL, threads + 1);
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, contend_in_rounds, (void *)(long)(i + 1));
    for (int r = 0; r < rounds; r++) {
        pthread_mutexattr_t robust;
        switch (r % 6) {
        case 0: pthread_mutex_init(&reused.m, NULL); break;
        case 1: memset(&reused, 0, sizeof reused); break;
        case 2:
            pthread_cond_init(&reused.c, NULL);
            for (int i = 0; i < 5; i++) pthread_cond_signal(&reused.c);
            pthread_cond_destroy(&reused.c);
            break;
        case 3:
            pthread_mutexattr_init(&robust);
            pthread_mutexattr_setrobust(&robust, PTHREAD_MUTEX_ROBUST);
            pthread_mutex_init(&reused.m, &robust);
            break;
        case 4:
            sem_init(&reused.s, 0, 0);
            for (int i = 0; i < 3; i++) sem_post(&reused.s);
            for (int i = 0; i < 3; i++) sem_wait(&reused.s);
            sem_destroy(&reused.s);
            break;
        case 5: pthread_mutex_init(&reused.m, NULL); break; // over the robust one
        }
        pthread_barrier_wait(&rounds_barrier);
        pthread_barrier_wait(&rounds_barrier);
        if (is_mutex_round(r) && r % 6 != 0 && r % 6 != 3) pthread_mutex_destroy(&reused.m);
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("lock %p\n", (void *)&reused);
    printf("order");
    for (long i = 0; i < counter; i++) printf(" %d", order_log[i]);
    printf("\n");
    return 0;
}

// errno: every interposed lock, trylock and unlock leaves the thread's errno as
// the program set it, from a thread's first event (which claims its ring) on.
static int errno_broken;
static void *keep_errno(void *arg) {
    long n = (long)arg;
    for (long i = 0; i < n; i++) {
        int mark = 1000 + (int)(i % 1000);
        errno = mark;
        pthread_mutex_lock(&counter_lock);
        if (errno != mark) errno_broken = 1;
        counter++;
        pthread_mutex_unlock(&counter_lock);
        if (errno != mark) errno_broken = 1;
        if (pthread_mutex_trylock(&counter_lock) == 0) {
            if (errno != mark) errno_broken = 1;
            pthread_mutex_unlock(&counter_lock);
        }
        if (errno != mark) errno_broken = 1;
    }
    return NULL;
}
static int mode_errno(int threads, int n) {
    pthread_t t[16];
    for (int i = 0; i < threads && i < 16; i++) pthread_create(&t[i], NULL, keep_errno, (void *)(long)n);
    for (int i = 0; i < threads && i < 16; i++) pthread_join(t[i], NULL);
    printf("errno %s\n", errno_broken ? "changed" : "kept");
    return errno_broken ? 3 : 0;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s contention|pingpong|rwlock|trylock|recursive|barrier|tree|timed|hold|busy|reuse|errno ...\n", argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    int a = argc > 2 ? atoi(argv[2]) : 0, b = argc > 3 ? atoi(argv[3]) : 0, c = argc > 4 ? atoi(argv[4]) : 0;
    int rc;
    if (!strcmp(mode, "contention")) rc = mode_contention(a, b);
    else if (!strcmp(mode, "pingpong")) rc = mode_pingpong(a);
    else if (!strcmp(mode, "rwlock")) rc = mode_rwlock(a, b, c);
    else if (!strcmp(mode, "trylock")) rc = mode_trylock();
    else if (!strcmp(mode, "recursive")) rc = mode_recursive();
    else if (!strcmp(mode, "barrier")) rc = mode_barrier(a);
    else if (!strcmp(mode, "tree")) rc = mode_tree(a);
    else if (!strcmp(mode, "exit")) rc = a;
    else if (!strcmp(mode, "timed")) rc = mode_timed(a, b);
    else if (!strcmp(mode, "hold")) rc = mode_hold(a);
    else if (!strcmp(mode, "busy")) rc = mode_busy(a);
    else if (!strcmp(mode, "reuse")) rc = mode_reuse(a, b, c);
    else if (!strcmp(mode, "errno")) rc = mode_errno(a, b);
    else { fprintf(stderr, "unknown mode %s\n", mode); return 2; }
    fflush(stdout);
    return rc;
}
