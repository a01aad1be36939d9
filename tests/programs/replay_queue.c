// A correct bounded queue, for replays that must pass: thread 1 produces and also
// starts a helper producer (thread 1.1) of its own; thread 2 consumes. Every wait
// re-checks its condition in a loop. Exits 1 only if items were lost or duplicated.
#include <pthread.h>
#include <stdio.h>

#define CAPACITY 2
#define PER_PRODUCER 4

static int items[CAPACITY];
static int count, head;
static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
static pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;

static void put(int item) {
    pthread_mutex_lock(&queue_lock);
    while (count == CAPACITY) pthread_cond_wait(&not_full, &queue_lock);
    items[(head + count) % CAPACITY] = item;
    count++;
    pthread_cond_signal(&not_empty);
    pthread_mutex_unlock(&queue_lock);
}

static int take(void) {
    pthread_mutex_lock(&queue_lock);
    while (count == 0) pthread_cond_wait(&not_empty, &queue_lock);
    int item = items[head];
    head = (head + 1) % CAPACITY;
    count--;
    pthread_cond_signal(&not_full);
    pthread_mutex_unlock(&queue_lock);
    return item;
}

static void *helper(void *arg) {
    (void)arg;
    for (int i = 0; i < PER_PRODUCER; i++) put(100 + i);
    return NULL;
}

static void *producer(void *arg) {
    (void)arg;
    pthread_t h;
    pthread_create(&h, NULL, helper, NULL);
    for (int i = 0; i < PER_PRODUCER; i++) put(i);
    pthread_join(h, NULL);
    return NULL;
}

static void *consumer(void *arg) {
    (void)arg;
    long sum = 0;
    for (int i = 0; i < 2 * PER_PRODUCER; i++) sum += take();
    return (void *)sum;
}

int main(void) {
    pthread_t p, c;
    pthread_create(&p, NULL, producer, NULL);
    pthread_create(&c, NULL, consumer, NULL);
    void *sum;
    pthread_join(p, NULL);
    pthread_join(c, &sum);
    long expected = 0;
    for (int i = 0; i < PER_PRODUCER; i++) expected += i + 100 + i;
    if ((long)sum != expected) {
        fprintf(stderr, "queue lost items: sum %ld, expected %ld\n", (long)sum, expected);
        return 1;
    }
    printf("sum %ld\n", (long)sum);
    return 0;
}
