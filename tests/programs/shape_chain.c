// A two-slot ring polled by a consumer that, after finding the ring empty, takes
// the next batch of two at once (the producer is assumed to refill it whole). That
// is wrong only when the consumer polls between the producer's two puts after an
// empty poll: the chain consumer, producer, consumer, producer. A plain run
// produces both items first (the consumer starts late), and no single swap of two
// critical sections, nor moving one past several, makes it fail.
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
    int expect_batch = 0;
    usleep(10000);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&ring_lock);
        if (count == 0) {
            expect_batch = 1;
        } else if (expect_batch) {
            head = (head + 2) % 2;
            count -= 2;
            if (count < 0) {
                fprintf(stderr, "ring underflow: took a batch of two from %d\n", count + 2);
                exit(1);
            }
        } else {
            head = (head + 1) % 2;
            count--;
        }
        pthread_mutex_unlock(&ring_lock);
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
