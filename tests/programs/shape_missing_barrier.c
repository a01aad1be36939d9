// A missing barrier: two workers publish partial results, meet at a barrier, and
// the barrier's serial thread computes the total; the reporter should wait at the
// same barrier (count 3) but does not (count 2), so its critical section can
// overtake a worker's arrival and report before the total exists. A plain run
// passes: the reporter starts late.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t results_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t phase_done;
static int partial[2];
static int total = -1;

static void *reporter(void *arg) {
    (void)arg;
    usleep(200000);
    pthread_mutex_lock(&results_lock);
    int t = total;
    pthread_mutex_unlock(&results_lock);
    if (t != 3) {
        fprintf(stderr, "reported total %d before the workers were done\n", t);
        exit(1);
    }
    return NULL;
}

static void *worker(void *arg) {
    int i = (int)(long)arg;
    pthread_mutex_lock(&results_lock);
    partial[i] = i + 1;
    pthread_mutex_unlock(&results_lock);
    if (pthread_barrier_wait(&phase_done) == PTHREAD_BARRIER_SERIAL_THREAD) {
        pthread_mutex_lock(&results_lock);
        total = partial[0] + partial[1];
        pthread_mutex_unlock(&results_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t r, w[2];
    pthread_barrier_init(&phase_done, NULL, 2);
    pthread_create(&r, NULL, reporter, NULL);
    for (long i = 0; i < 2; i++)
        pthread_create(&w[i], NULL, worker, (void *)i);
    pthread_join(r, NULL);
    pthread_join(w[0], NULL);
    pthread_join(w[1], NULL);
    return 0;
}
