// One thread against many: a job is lost only when every worker sees the stop
// flag before taking one. main sets `stopping` after its own setup; each of 8
// workers checks the flag once and, while it is clear, takes a job. Ordering
// main's store before one worker's check is not the bug; before all 8 is.
// Fails: abort() when no job was taken.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WORKERS 8
static volatile int stopping;
static volatile int taken;

static void *worker(void *arg) {
    (void)arg;
    if (!stopping)
        __atomic_add_fetch(&taken, 1, __ATOMIC_RELAXED);
    return NULL;
}

int main(void) {
    pthread_t t[WORKERS];
    for (int i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, worker, NULL);
    usleep(20000);   // main's own setup: the workers have long checked by now
    stopping = 1;
    for (int i = 0; i < WORKERS; i++) pthread_join(t[i], NULL);
    if (taken == 0) { fprintf(stderr, "no job taken\n"); abort(); }
    printf("taken %d\n", taken);
    return 0;
}
