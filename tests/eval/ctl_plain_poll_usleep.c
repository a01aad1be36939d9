// Control for plain_poll_usleep: the producer writes the item before it sets the
// flag (x86 keeps the two stores in that order for the polling consumer).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static volatile int ready;
static volatile long item;

static void *producer(void *arg) {
    (void)arg;
    for (volatile int work = 0; work < 100000; work++) {}   // make the item
    item = 4242;         // written first...
    ready = 1;           // ...announced after
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
