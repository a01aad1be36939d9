// Bug: lost wakeup. The waiter waits for "start" without a predicate; when the
// starter signals before the waiter is waiting, the signal is lost.
// Shape: the starter's signal section before the waiter's wait (cond_signal
// ordered before cond_wait_begin).
// Fails: hang (the waiter waits forever, main waits in join).
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t start_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t start_cond = PTHREAD_COND_INITIALIZER;
static int jobs_done;

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&start_lock);
    pthread_cond_wait(&start_cond, &start_lock);   // no predicate
    jobs_done++;
    pthread_mutex_unlock(&start_lock);
    return NULL;
}

static void *starter(void *arg) {
    (void)arg;
    long setup = 0;
    for (volatile int i = 0; i < 5000; i++) setup += i;
    pthread_mutex_lock(&start_lock);
    pthread_cond_signal(&start_cond);
    pthread_mutex_unlock(&start_lock);
    return (void *)setup;
}

int main(void) {
    pthread_t w, s;
    pthread_create(&w, NULL, waiter, NULL);
    pthread_create(&s, NULL, starter, NULL);
    pthread_join(s, NULL);
    pthread_join(w, NULL);
    printf("%d job done\n", jobs_done);
    return 0;
}
