// A correct producer/consumer: locks always nest in the same order, the flag is
// set and signalled under the mutex, and the consumer re-checks it in a loop.
// `ordo analyze` must report no deadlock, lost wakeup, barging or atomicity bug.
#include <pthread.h>
#include <stdio.h>

pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
int items, consumed, produced_total;

static void *producer(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&queue_lock);
        items++;
        pthread_mutex_lock(&stats_lock);
        produced_total++;
        pthread_mutex_unlock(&stats_lock);
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&queue_lock);
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&queue_lock);
        while (items == 0)
            pthread_cond_wait(&not_empty, &queue_lock);
        items--;
        consumed++;
        pthread_mutex_unlock(&queue_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t p, c;
    pthread_create(&c, NULL, consumer, NULL);
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    printf("%d %d\n", consumed, produced_total);
    return 0;
}
