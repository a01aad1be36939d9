// Paths through glibc's acquisition functions that the probe placement must record
// exactly once each: every mutex type's success and failure, trylocks, rwlock and
// semaphore try variants, and a real deadlock (threads blocked in the lock-wait call).
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t errorcheck, recursive, adaptive, robust, pi;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
static sem_t sem;

static void init(pthread_mutex_t *m, int type, int robust_, int protocol) {
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    pthread_mutexattr_settype(&attr, type);
    if (robust_) pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST);
    if (protocol) pthread_mutexattr_setprotocol(&attr, protocol);
    pthread_mutex_init(m, &attr);
}

// One thread, every result printed in call order: "results r1 r2 ...".
static int mode_types(void) {
    init(&errorcheck, PTHREAD_MUTEX_ERRORCHECK, 0, 0);
    init(&recursive, PTHREAD_MUTEX_RECURSIVE, 0, 0);
    init(&adaptive, PTHREAD_MUTEX_ADAPTIVE_NP, 0, 0);
    init(&robust, PTHREAD_MUTEX_NORMAL, 1, 0);
    init(&pi, PTHREAD_MUTEX_NORMAL, 0, PTHREAD_PRIO_INHERIT);
    sem_init(&sem, 0, 1);
    int r[20], n = 0;
    r[n++] = pthread_mutex_lock(&errorcheck);    // 0
    r[n++] = pthread_mutex_lock(&errorcheck);    // EDEADLK: failed, not acquired
    r[n++] = pthread_mutex_trylock(&errorcheck); // EBUSY
    pthread_mutex_unlock(&errorcheck);
    r[n++] = pthread_mutex_lock(&recursive);     // 0
    r[n++] = pthread_mutex_trylock(&recursive);  // 0 (count 2)
    pthread_mutex_unlock(&recursive);
    pthread_mutex_unlock(&recursive);
    r[n++] = pthread_mutex_lock(&adaptive);      // 0
    pthread_mutex_unlock(&adaptive);
    r[n++] = pthread_mutex_lock(&robust);        // 0, through the robust path
    pthread_mutex_unlock(&robust);
    r[n++] = pthread_mutex_lock(&pi);            // 0, through the PI path
    pthread_mutex_unlock(&pi);
    r[n++] = pthread_rwlock_wrlock(&rw);         // 0
    r[n++] = pthread_rwlock_trywrlock(&rw);      // EBUSY
    r[n++] = pthread_rwlock_rdlock(&rw);         // EDEADLK
    pthread_rwlock_unlock(&rw);
    r[n++] = pthread_rwlock_trywrlock(&rw);      // 0
    pthread_rwlock_unlock(&rw);
    r[n++] = sem_trywait(&sem);                  // 0
    r[n++] = sem_trywait(&sem);                  // -1 (EAGAIN)
    sem_post(&sem);
    r[n++] = sem_wait(&sem);                     // 0
    printf("results");
    for (int i = 0; i < n; i++) printf(" %d", r[i]);
    printf("\nerrorcheck %p\nrecursive %p\nadaptive %p\nrobust %p\npi %p\nrwlock %p\nsem %p\n",
           (void *)&errorcheck, (void *)&recursive, (void *)&adaptive, (void *)&robust,
           (void *)&pi, (void *)&rw, (void *)&sem);
    return 0;
}

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER, lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold;

static void *take(void *arg) {
    int first_a = arg != NULL;
    pthread_mutex_lock(first_a ? &lock_a : &lock_b);
    pthread_barrier_wait(&both_hold);
    pthread_mutex_lock(first_a ? &lock_b : &lock_a); // never returns
    return NULL;
}

// Two threads each hold one lock and wait for the other's: a real deadlock.
static int mode_deadlock(void) {
    pthread_barrier_init(&both_hold, NULL, 2);
    printf("a %p\nb %p\n", (void *)&lock_a, (void *)&lock_b);
    fflush(stdout);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, take, (void *)1);
    pthread_create(&t2, NULL, take, NULL);
    pthread_join(t1, NULL);
    return 1;
}

int main(int argc, char **argv) {
    // One event, then a pause: the recorder reads the process's mappings when the
    // first event arrives, and a program this short could otherwise exit first.
    static pthread_mutex_t warmup = PTHREAD_MUTEX_INITIALIZER;
    pthread_mutex_lock(&warmup);
    pthread_mutex_unlock(&warmup);
    usleep(300 * 1000);
    if (argc < 2) {
        fprintf(stderr, "usage: %s types|deadlock\n", argv[0]);
        return 2;
    }
    int rc;
    if (!strcmp(argv[1], "types")) rc = mode_types();
    else if (!strcmp(argv[1], "deadlock")) rc = mode_deadlock();
    else { fprintf(stderr, "unknown mode %s\n", argv[1]); return 2; }
    fflush(stdout);
    return rc;
}
