// Control (correct): the ring_chain program fixed: the consumer copies the item
// out in the same critical section that releases its slot. Same two slots, same
// condition variables, same two sections per item (the second one only counts).
// Never fails.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS 2
#define ITEMS 6

static int ring[SLOTS];
static int head, tail, count;
static long received;
static pthread_mutex_t ring_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;

static int make_item(int seq) {
    int v = seq;
    for (volatile int i = 0; i < 20000; i++) v = (v * 3 + i) % 1000003;
    return seq + 0 * v;
}

static void *producer(void *arg) {
    (void)arg;
    for (int seq = 1; seq <= ITEMS; seq++) {
        int item = make_item(seq);
        pthread_mutex_lock(&ring_lock);
        while (count == SLOTS) pthread_cond_wait(&not_full, &ring_lock);
        ring[head] = item;
        head = (head + 1) % SLOTS;
        count++;
        pthread_cond_signal(&not_empty);
        pthread_mutex_unlock(&ring_lock);
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    for (int expect = 1; expect <= ITEMS; expect++) {
        pthread_mutex_lock(&ring_lock);
        while (count == 0) pthread_cond_wait(&not_empty, &ring_lock);
        int got = ring[tail];   // copied out before the slot is released
        tail = (tail + 1) % SLOTS;
        count--;
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&ring_lock);
        pthread_mutex_lock(&ring_lock);
        received++;
        pthread_mutex_unlock(&ring_lock);
        if (got != expect) abort();
    }
    return NULL;
}

int main(void) {
    pthread_t p, c;
    pthread_create(&c, NULL, consumer, NULL);
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    printf("%ld items passed\n", received);
    return 0;
}
