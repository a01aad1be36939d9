// Atomicity violation: a withdrawal checks the balance in one critical section and
// updates it in another, from the value it read. Two withdrawals that interleave
// between the check and the update lose one update. Exits 1 when the final balance
// does not match the withdrawals that succeeded.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long balance = 100;
static pthread_mutex_t account_lock = PTHREAD_MUTEX_INITIALIZER;

static void *withdraw(void *arg) {
    long amount = (long)arg;
    pthread_mutex_lock(&account_lock);
    long seen = balance;                 // check
    pthread_mutex_unlock(&account_lock);
    if (seen < amount) return (void *)0;
    pthread_mutex_lock(&account_lock);
    balance = seen - amount;             // act, on a possibly stale value
    pthread_mutex_unlock(&account_lock);
    return (void *)amount;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, withdraw, (void *)60);
    usleep(20000);                       // the second customer arrives a bit later
    pthread_create(&b, NULL, withdraw, (void *)30);
    void *ra, *rb;
    pthread_join(a, &ra);
    pthread_join(b, &rb);
    long expected = 100 - (long)ra - (long)rb;
    if (balance != expected) {
        fprintf(stderr, "lost update: balance %ld, expected %ld\n", balance, expected);
        return 1;
    }
    printf("balance %ld\n", balance);
    return 0;
}
