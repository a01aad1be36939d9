// Control (correct): the cond_if program fixed: consumers re-check the queue in a
// `while` loop after every wake-up, so a broadcast that wakes both for one item is
// harmless. Same producer, same broadcasts.
// Never fails.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int queue[4];
static int count;
static long consumed;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;

static void *producer(void *arg) {
    (void)arg;
    for (int item = 1; item <= 2; item++) {
        pthread_mutex_lock(&queue_lock);
        queue[count++] = item;
        pthread_cond_broadcast(&not_empty);
        pthread_mutex_unlock(&queue_lock);
    }
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&queue_lock);
    while (count == 0) pthread_cond_wait(&not_empty, &queue_lock);
    consumed += queue[--count];
    pthread_mutex_unlock(&queue_lock);
    return NULL;
}

int main(void) {
    pthread_t p, c1, c2;
    pthread_create(&p, NULL, producer, NULL);
    pthread_create(&c1, NULL, consumer, NULL);
    pthread_create(&c2, NULL, consumer, NULL);
    pthread_join(p, NULL);
    pthread_join(c1, NULL);
    pthread_join(c2, NULL);
    if (consumed != 3) abort();
    printf("consumed %ld\n", consumed);
    return 0;
}
