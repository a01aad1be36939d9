// A lost-wakeup bug: the notifier sets `ready` and signals without taking the
// mutex. In this run the waiter is already waiting (the notifier sleeps first), so
// nothing is lost; but the signal could come between the waiter's check and its
// wait. The waiter uses a timed wait so the program ends even then.
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;
volatile int ready;

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&ready_lock);
    if (!ready) {
        struct timespec deadline;
        clock_gettime(CLOCK_REALTIME, &deadline);
        deadline.tv_sec += 2;
        pthread_cond_timedwait(&ready_cond, &ready_lock, &deadline);
    }
    pthread_mutex_unlock(&ready_lock);
    return NULL;
}

static void *notifier(void *arg) {
    (void)arg;
    usleep(100 * 1000);
    ready = 1;
    pthread_cond_signal(&ready_cond);
    return NULL;
}

int main(void) {
    pthread_t w, n;
    pthread_create(&w, NULL, waiter, NULL);
    pthread_create(&n, NULL, notifier, NULL);
    pthread_join(w, NULL);
    pthread_join(n, NULL);
    printf("ready=%d\n", ready);
    return 0;
}
