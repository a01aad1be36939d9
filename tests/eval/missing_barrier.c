// Bug: missing barrier. Two workers fill their slots of a table, then main merges
// the table after a barrier. The barrier was sized for main and the first worker;
// the second worker, added later, never arrives at it.
// Shape: another object against a lock: main's section after the barrier must
// overtake worker 2's section (its missing arrival).
// Fails: abort() in main when a slot is still empty at the merge.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int slots[2];
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
    pthread_mutex_unlock(&slots_lock);
    return NULL;   // no pthread_barrier_wait: the barrier counts only 2
}

int main(void) {
    pthread_barrier_init(&filled, NULL, 2);
    pthread_t a, b;
    pthread_create(&b, NULL, fill_second, NULL);
    pthread_create(&a, NULL, fill_first, NULL);
    pthread_barrier_wait(&filled);
    pthread_mutex_lock(&slots_lock);
    if (slots[0] == 0 || slots[1] == 0) {
        fprintf(stderr, "main: merged before slot %d was filled\n", slots[0] == 0 ? 0 : 1);
        abort();
    }
    printf("merged %d\n", slots[0] + slots[1]);
    pthread_mutex_unlock(&slots_lock);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_barrier_destroy(&filled);
    return 0;
}
