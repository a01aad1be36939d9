// AB-BA deadlock: the transfer thread takes the accounts' locks in the order
// (from, to) and the audit thread in the opposite order. They only overlap when the
// audit starts while a transfer is between its two lock calls, which a normal run
// almost never sees. Hangs (deadlock) when the bug shows.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static long account_a = 100, account_b = 100;

static void *transfer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock_a);
    pthread_mutex_lock(&lock_b);
    account_a -= 10;
    account_b += 10;
    pthread_mutex_unlock(&lock_b);
    pthread_mutex_unlock(&lock_a);
    return NULL;
}

static void *audit(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock_b);
    pthread_mutex_lock(&lock_a);
    long total = account_a + account_b;
    pthread_mutex_unlock(&lock_a);
    pthread_mutex_unlock(&lock_b);
    return (void *)total;
}

int main(void) {
    pthread_t t, u;
    pthread_create(&t, NULL, transfer, NULL);
    usleep(20000);
    pthread_create(&u, NULL, audit, NULL);
    void *total;
    pthread_join(t, NULL);
    pthread_join(u, &total);
    printf("total %ld\n", (long)total);
    return (long)total == 200 ? 0 : 1;
}
