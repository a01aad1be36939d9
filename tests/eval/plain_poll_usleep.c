// Bug: a consumer polling with usleep for a flag the producer sets before the data
// it announces (the producer's stores in the wrong order).
// Shape: the consumer's read of `ready` and of `item` between the producer's two
// stores (a reader seeing the first of two stores but not the second).
// Fails: abort() when the consumer takes the item before it was written.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile int ready;
static volatile long item;

static void *producer(void *arg) {
    (void)arg;
    for (volatile int work = 0; work < 100000; work++) {}   // make the item
    ready = 1;           // announced first...
    item = 4242;         // ...written after
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    while (!ready) usleep(200);
    if (item != 4242) {
        fprintf(stderr, "consumer: took the item before it was written\n");
        abort();
    }
    return NULL;
}

int main(void) {
    pthread_t p, c;
    pthread_create(&c, NULL, consumer, NULL);
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    return 0;
}
