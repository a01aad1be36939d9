// Check-then-act split by a mutation that was never adjacent to it: thread 1
// checks `item` in one critical section and uses it in a later one; thread 3 lets
// thread 2 go (a semaphore) and takes the lock twice for bookkeeping; thread 2
// then clears `item`. In a plain run thread 2's mutation comes long after both of
// thread 1's sections, with thread 3's in between; a candidate must place it
// between thread 1's two — and never before thread 3's post, which it waits for.
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static sem_t bookkeeping_started;
static int value = 42;
static int *item = &value;
static int bookkeeping;

static void *checker(void *arg) {
    (void)arg;
    int present;
    pthread_mutex_lock(&lock);
    present = item != NULL;
    pthread_mutex_unlock(&lock);
    if (present) {
        pthread_mutex_lock(&lock);
        if (item == NULL) {
            fprintf(stderr, "checked item was gone when used\n");
            exit(1);
        }
        *item += 1;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static void *bookkeeper(void *arg) {
    (void)arg;
    usleep(5000);
    sem_post(&bookkeeping_started);
    for (int i = 0; i < 2; i++) {
        pthread_mutex_lock(&lock);
        bookkeeping++;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

static void *clearer(void *arg) {
    (void)arg;
    sem_wait(&bookkeeping_started);
    usleep(10000);
    pthread_mutex_lock(&lock);
    item = NULL;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void) {
    pthread_t t1, t2, t3;
    sem_init(&bookkeeping_started, 0, 0);
    pthread_create(&t1, NULL, checker, NULL);
    pthread_create(&t2, NULL, clearer, NULL);
    pthread_create(&t3, NULL, bookkeeper, NULL);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    pthread_join(t3, NULL);
    return 0;
}
