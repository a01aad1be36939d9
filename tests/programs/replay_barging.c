// A consumer (thread 1) waits with `if` instead of `while`; a producer (thread 2)
// adds an item and signals; a third thread (3) takes an item if there is one. When
// thread 3 gets the mutex between the signal and the consumer's reacquisition, the
// consumer takes from an empty store: exits 1. The third thread comes late (it
// sleeps first), so on its own the consumer always reacquires first.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t c = PTHREAD_COND_INITIALIZER;
static int items;
static int broken;

static void *consumer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    if (items == 0) pthread_cond_wait(&c, &m);
    if (items == 0) broken = 1;
    else items--;
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *producer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    items++;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *barger(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_mutex_lock(&m);
    if (items > 0) items--;
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(void) {
    pthread_t t[3];
    pthread_create(&t[0], NULL, consumer, NULL);
    pthread_create(&t[1], NULL, producer, NULL);
    pthread_create(&t[2], NULL, barger, NULL);
    for (int i = 0; i < 3; i++) pthread_join(t[i], NULL);
    if (broken) {
        fprintf(stderr, "consumer woke to an empty store\n");
        return 1;
    }
    return 0;
}
