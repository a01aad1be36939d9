/* A correct producer/consumer that signals after unlocking (a common, correct
 * idiom): the consumer re-checks its predicate in a loop, so a signal that comes
 * before it waits is never lost. `ordo analyze` must predict no lost wakeup. */
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t slot_filled = PTHREAD_COND_INITIALIZER;
static pthread_cond_t slot_emptied = PTHREAD_COND_INITIALIZER;
static int slot_full, slot_value;

static void *producer(void *arg) {
    (void)arg;
    for (int i = 1; i <= 300; i++) {
        pthread_mutex_lock(&slot_lock);
        while (slot_full)
            pthread_cond_wait(&slot_emptied, &slot_lock);
        slot_value = i;
        slot_full = 1;
        pthread_mutex_unlock(&slot_lock);
        pthread_cond_signal(&slot_filled);
    }
    return NULL;
}

int main(void) {
    pthread_t p;
    pthread_create(&p, NULL, producer, NULL);
    long sum = 0;
    for (int i = 1; i <= 300; i++) {
        pthread_mutex_lock(&slot_lock);
        while (!slot_full)
            pthread_cond_wait(&slot_filled, &slot_lock);
        sum += slot_value;
        slot_full = 0;
        pthread_mutex_unlock(&slot_lock);
        pthread_cond_signal(&slot_emptied);
    }
    pthread_join(p, NULL);
    printf("sum %ld\n", sum);
    return sum == 300L * 301 / 2 ? 0 : 1;
}
