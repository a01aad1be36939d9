// Every form of ring unit, in a run whose order does not depend on timing: the
// threads run one after another (each joined before the next starts, a pause
// between so the drain frees a ring and the next thread takes it over with its
// encoding state), each repeating lock/unlock pairs at 300 call sites (more than
// a ring's site cache holds) on 64 mutexes, a trylock that fails (a result), a
// timed condvar wait (a second object), semaphore posts and waits, and a pause
// longer than a short unit's time difference.
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#define MUTEXES 64
static pthread_mutex_t m[MUTEXES];
static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static sem_t sem;

#define PAIR(n)                                                                \
    case n:                                                                    \
        pthread_mutex_lock(&m[(n) % MUTEXES]);                                 \
        pthread_mutex_unlock(&m[(n) % MUTEXES]);                               \
        break;
#define TEN(n)                                                                 \
    PAIR(n##0) PAIR(n##1) PAIR(n##2) PAIR(n##3) PAIR(n##4) PAIR(n##5)          \
    PAIR(n##6) PAIR(n##7) PAIR(n##8) PAIR(n##9)

static void site(int n) {
    switch (n) {
        PAIR(0) PAIR(1) PAIR(2) PAIR(3) PAIR(4) PAIR(5) PAIR(6) PAIR(7) PAIR(8)
        PAIR(9)
        TEN(1) TEN(2) TEN(3) TEN(4) TEN(5) TEN(6) TEN(7) TEN(8) TEN(9) TEN(10)
        TEN(11) TEN(12) TEN(13) TEN(14) TEN(15) TEN(16) TEN(17) TEN(18) TEN(19)
        TEN(20) TEN(21) TEN(22) TEN(23) TEN(24) TEN(25) TEN(26) TEN(27) TEN(28)
        TEN(29)
    }
}

static void *worker(void *arg) {
    long id = (long)arg;
    for (int k = 0; k < 6000; k++) {
        // Mostly a few hot sites, now and then one of all 300.
        site(k % 7 == 0 ? (k * 37 + (int)id) % 300 : k % 5);
        if (k % 1000 == 999) {
            pthread_mutex_lock(&m[0]);
            if (pthread_mutex_trylock(&m[0]) != EBUSY)
                fprintf(stderr, "trylock of a held mutex did not fail\n");
            pthread_mutex_unlock(&m[0]);
            sem_post(&sem);
            sem_wait(&sem);
        }
    }
    pthread_mutex_lock(&cm);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&cv, &cm, &until);
    pthread_mutex_unlock(&cm);
    if (id == 2) {
        // Longer than a short unit's time difference (2^30 ticks or ns).
        usleep(1200000);
        site(3);
        site(3);
    }
    return NULL;
}

int main(void) {
    for (int i = 0; i < MUTEXES; i++)
        pthread_mutex_init(&m[i], NULL);
    sem_init(&sem, 0, 0);
    for (long t = 0; t < 5; t++) {
        pthread_t th;
        pthread_create(&th, NULL, worker, (void *)t);
        pthread_join(th, NULL);
        // Long enough for the drain (a pass every 5-20 ms) to free the ring.
        usleep(60000);
    }
    return 0;
}
