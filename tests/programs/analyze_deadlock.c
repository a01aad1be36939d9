// Two threads take lock_a and lock_b in opposite orders. A sleep keeps them apart,
// so the run never deadlocks, but another schedule would: `ordo analyze` must
// predict it from this run.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
int balance_a, balance_b;

static void *transfer_a_to_b(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock_a);
    pthread_mutex_lock(&lock_b);
    balance_a -= 10;
    balance_b += 10;
    pthread_mutex_unlock(&lock_b);
    pthread_mutex_unlock(&lock_a);
    return NULL;
}

static void *transfer_b_to_a(void *arg) {
    (void)arg;
    usleep(100 * 1000);
    pthread_mutex_lock(&lock_b);
    pthread_mutex_lock(&lock_a);
    balance_b -= 5;
    balance_a += 5;
    pthread_mutex_unlock(&lock_a);
    pthread_mutex_unlock(&lock_b);
    return NULL;
}

int main(void) {
    pthread_t t1, t2;
    pthread_create(&t1, NULL, transfer_a_to_b, NULL);
    pthread_create(&t2, NULL, transfer_b_to_a, NULL);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    printf("%d %d\n", balance_a, balance_b);
    return 0;
}
