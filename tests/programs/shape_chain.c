// A two-slot ring polled by a consumer: the consumer gives up on the ring only
// when it finds it empty on both of its polls, which takes the chain consumer,
// producer, consumer, producer. A plain run produces both items first (the
// consumer starts late); no single swap of two critical sections makes it fail.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static int ring[2];
static int head, count;

static void *producer(void *arg) {
    (void)arg;
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&ring_lock);
        ring[(head + count) % 2] = i + 1;
        count++;
        pthread_mutex_unlock(&ring_lock);
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    int empty_polls = 0;
    usleep(10000);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&ring_lock);
        if (count == 0) {
            empty_polls++;
        } else {
            head = (head + 1) % 2;
            count--;
        }
        pthread_mutex_unlock(&ring_lock);
    }
    if (empty_polls == 2) {
        fprintf(stderr, "consumer starved: the ring was empty at every poll\n");
        exit(1);
    }
    return NULL;
}

int main(void) {
    pthread_t p, c;
    pthread_create(&p, NULL, producer, NULL);
    pthread_create(&c, NULL, consumer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    return 0;
}
