// Bug: a ring buffer whose consumer releases a slot (advances tail, count--) in
// one critical section and copies the item out in a second one. The producer may
// reuse the slot in between, but only after wrapping around the ring: with two
// slots it must push twice between the consumer's two sections.
// Shape: a chain of orderings (producer, consumer, producer, producer, consumer):
// push 1 before the consumer's release, the release before push 2, push 3 before
// the consumer's copy. Both threads wait on condition variables.
// Fails: abort() when the consumer copies out an item other than the one it took.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SLOTS 2
#define ITEMS 6

static int ring[SLOTS];
static int head, tail, count;
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
        int slot = tail;
        tail = (tail + 1) % SLOTS;
        count--;   // the slot is released before its item is copied out
        pthread_cond_signal(&not_full);
        pthread_mutex_unlock(&ring_lock);
        pthread_mutex_lock(&ring_lock);
        int got = ring[slot];
        pthread_mutex_unlock(&ring_lock);
        if (got != expect) {
            fprintf(stderr, "consumer: expected item %d, copied out %d\n", expect, got);
            abort();
        }
    }
    return NULL;
}

int main(void) {
    pthread_t p, c;
    pthread_create(&c, NULL, consumer, NULL);
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    printf("%d items passed\n", ITEMS);
    return 0;
}
