// One thread before each of 99 others: 99 workers each add their share under the
// lock; the closer, created last, checks that some work was done before it closes.
// It fails only when the closer's critical section comes before every worker's.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define WORKERS 99

static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;
static int done_work, closed;

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&work_lock);
    if (!closed)
        done_work++;
    pthread_mutex_unlock(&work_lock);
    return NULL;
}

static void *closer(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_mutex_lock(&work_lock);
    if (done_work == 0) {
        fprintf(stderr, "closed before any work was done\n");
        exit(1);
    }
    closed = 1;
    pthread_mutex_unlock(&work_lock);
    return NULL;
}

int main(void) {
    pthread_t w[WORKERS], c;
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&w[i], NULL, worker, NULL);
    pthread_create(&c, NULL, closer, NULL);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(w[i], NULL);
    pthread_join(c, NULL);
    return 0;
}
