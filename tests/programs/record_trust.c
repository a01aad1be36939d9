// Test program for tests/record_trust.rs.
//   paced THREADS MILLIS: each thread takes a mutex 50 times a millisecond until
//     MILLIS have passed (a steady ~100k events a second per thread, so a trace
//     grows at a known pace whichever path records it); prints `lock ADDR`.
//   churn N: creates and joins N threads one after the other, each taking a mutex
//     once (with a low pid_max the kernel hands their tids out again); prints
//     `lock ADDR` and `tids DISTINCT` (how many different tids the threads had).
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long counter;
static volatile int stop_flag;

static void *paced(void *arg) {
    (void)arg;
    while (!stop_flag) {
        for (int i = 0; i < 50; i++) {
            pthread_mutex_lock(&lock);
            counter++;
            pthread_mutex_unlock(&lock);
        }
        usleep(1000);
    }
    return NULL;
}

static int mode_paced(int threads, int millis) {
    pthread_t t[64];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, paced, NULL);
    usleep((useconds_t)millis * 1000);
    stop_flag = 1;
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("lock %p\n", (void *)&lock);
    return 0;
}

static void *once(void *arg) {
    pthread_mutex_lock(&lock);
    counter++;
    pthread_mutex_unlock(&lock);
    *(pid_t *)arg = (pid_t)syscall(SYS_gettid);
    return NULL;
}

static int cmp_pid(const void *a, const void *b) {
    pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
    return (x > y) - (x < y);
}

static int mode_churn(int n) {
    pid_t *tids = calloc((size_t)n, sizeof(pid_t));
    for (int i = 0; i < n; i++) {
        pthread_t t;
        if (pthread_create(&t, NULL, once, &tids[i]) != 0) {
            fprintf(stderr, "pthread_create failed at %d\n", i);
            return 1;
        }
        pthread_join(t, NULL);
    }
    qsort(tids, (size_t)n, sizeof(pid_t), cmp_pid);
    int distinct = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || tids[i] != tids[i - 1]) distinct++;
    printf("lock %p\n", (void *)&lock);
    printf("tids %d\n", distinct);
    return counter == n ? 0 : 1;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s paced THREADS MILLIS | churn N\n", argv[0]);
        return 2;
    }
    int rc;
    if (!strcmp(argv[1], "paced") && argc > 3) rc = mode_paced(atoi(argv[2]), atoi(argv[3]));
    else if (!strcmp(argv[1], "churn")) rc = mode_churn(atoi(argv[2]));
    else { fprintf(stderr, "unknown mode %s\n", argv[1]); return 2; }
    fflush(stdout);
    return rc;
}
