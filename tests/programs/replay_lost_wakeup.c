// Lost wakeup: the consumer checks the flag under the lock, releases the lock, and
// then waits without checking again. A producer that sets the flag and signals in
// between wakes nobody. The wait gives up after 0.5 s and the program exits 1.
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static int ready;
static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;

static void *consumer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&ready_lock);
    int seen = ready;
    pthread_mutex_unlock(&ready_lock);
    if (!seen) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_nsec += 500 * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) { deadline.tv_sec += 1; deadline.tv_nsec -= 1000000000L; }
        pthread_mutex_lock(&ready_lock);
        int rc = pthread_cond_timedwait(&ready_cond, &ready_lock, &deadline);   // no re-check
        pthread_mutex_unlock(&ready_lock);
        if (rc == ETIMEDOUT) return (void *)1;
    }
    return (void *)0;
}

static void *producer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&ready_lock);
    ready = 1;
    pthread_cond_signal(&ready_cond);
    pthread_mutex_unlock(&ready_lock);
    return NULL;
}

int main(void) {
    pthread_t c, p;
    pthread_create(&c, NULL, consumer, NULL);
    usleep(20000);
    pthread_create(&p, NULL, producer, NULL);
    void *lost;
    pthread_join(c, &lost);
    pthread_join(p, NULL);
    if (lost) {
        fprintf(stderr, "lost wakeup: the consumer never saw the signal\n");
        return 1;
    }
    printf("consumed\n");
    return 0;
}
