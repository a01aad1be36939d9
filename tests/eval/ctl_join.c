// Control (correct): join_wrong_thread and missing_barrier fixed together. main
// joins the indexer it depends on, and a barrier sized for all three threads
// separates filling the slots from merging them.
// Never fails.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int slots[2];
static int index_size = -1;
static pthread_mutex_t slots_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t filled;

static void *fill_first(void *arg) {
    (void)arg;
    int v = 0;
    for (volatile int i = 0; i < 3000; i++) v += i % 3;
    pthread_mutex_lock(&slots_lock);
    slots[0] = v + 1;
    pthread_mutex_unlock(&slots_lock);
    pthread_barrier_wait(&filled);
    return NULL;
}

static void *fill_second(void *arg) {
    (void)arg;
    pthread_mutex_lock(&slots_lock);
    slots[1] = 42;
    index_size = 2;
    pthread_mutex_unlock(&slots_lock);
    pthread_barrier_wait(&filled);
    return NULL;
}

int main(void) {
    pthread_barrier_init(&filled, NULL, 3);
    pthread_t a, b;
    pthread_create(&b, NULL, fill_second, NULL);
    pthread_create(&a, NULL, fill_first, NULL);
    pthread_barrier_wait(&filled);
    pthread_join(b, NULL);
    pthread_mutex_lock(&slots_lock);
    if (slots[0] == 0 || slots[1] == 0 || index_size != 2) abort();
    printf("merged %d\n", slots[0] + slots[1]);
    pthread_mutex_unlock(&slots_lock);
    pthread_join(a, NULL);
    pthread_barrier_destroy(&filled);
    return 0;
}
