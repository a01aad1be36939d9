/* A correct thread pool: a task queue under one mutex, workers that wait on a
 * condition variable in a predicate loop, a shutdown flag set and broadcast under
 * the mutex, and every worker joined. `ordo analyze` must predict no bug. */
#include <pthread.h>
#include <stdio.h>

#define WORKERS 4
#define TASKS 400

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t pool_work = PTHREAD_COND_INITIALIZER;
static int queued, done, shutting_down;
static long total;

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&pool_lock);
        while (queued == 0 && !shutting_down)
            pthread_cond_wait(&pool_work, &pool_lock);
        if (queued == 0 && shutting_down) {
            pthread_mutex_unlock(&pool_lock);
            return NULL;
        }
        int task = queued--;
        pthread_mutex_unlock(&pool_lock);
        long result = (long)task * task; /* the work, outside the lock */
        pthread_mutex_lock(&pool_lock);
        total += result;
        done++;
        pthread_mutex_unlock(&pool_lock);
    }
}

int main(void) {
    pthread_t workers[WORKERS];
    for (int i = 0; i < WORKERS; i++)
        pthread_create(&workers[i], NULL, worker, NULL);
    for (int i = 0; i < TASKS; i++) {
        pthread_mutex_lock(&pool_lock);
        queued++;
        pthread_cond_signal(&pool_work);
        pthread_mutex_unlock(&pool_lock);
    }
    pthread_mutex_lock(&pool_lock);
    shutting_down = 1;
    pthread_cond_broadcast(&pool_work);
    pthread_mutex_unlock(&pool_lock);
    for (int i = 0; i < WORKERS; i++)
        pthread_join(workers[i], NULL);
    printf("done %d\n", done);
    return done == TASKS ? 0 : 1;
}
