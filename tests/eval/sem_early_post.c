// Bug: sem_post ordered before the critical section it announces. The worker posts
// "done" and only then publishes its total under the stats lock; main waits for
// "done" and reads the total. The worker is already running, so it nearly always
// wins the race to the lock.
// Shape: another object against a lock: main's section after its sem_wait must come
// before the worker's section after its sem_post.
// Fails: abort() in main when the total is not published.
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>

static sem_t done;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static long total;
static int total_set;

static void *worker(void *arg) {
    (void)arg;
    long sum = 0;
    for (volatile int i = 0; i < 10000; i++) sum += i % 13;
    sem_post(&done);   // announced before it is published
    pthread_mutex_lock(&stats_lock);
    total = sum;
    total_set = 1;
    pthread_mutex_unlock(&stats_lock);
    return NULL;
}

int main(void) {
    sem_init(&done, 0, 0);
    pthread_t w;
    pthread_create(&w, NULL, worker, NULL);
    sem_wait(&done);
    pthread_mutex_lock(&stats_lock);
    if (!total_set) {
        fprintf(stderr, "main: total read before the worker published it\n");
        abort();
    }
    printf("total %ld\n", total);
    pthread_mutex_unlock(&stats_lock);
    pthread_join(w, NULL);
    sem_destroy(&done);
    return 0;
}
