// Check-then-act: each withdrawal checks the balance in one critical section and
// debits it in another, so a concurrent withdrawal can slip in between and the
// balance can go negative. The sleep keeps this run correct.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

pthread_mutex_t account_lock = PTHREAD_MUTEX_INITIALIZER;
int balance = 100;

static int can_withdraw(int amount) {
    pthread_mutex_lock(&account_lock);
    int ok = balance >= amount;
    pthread_mutex_unlock(&account_lock);
    return ok;
}

static void debit(int amount) {
    pthread_mutex_lock(&account_lock);
    balance -= amount;
    pthread_mutex_unlock(&account_lock);
}

static void *withdraw(void *arg) {
    int amount = *(int *)arg;
    if (can_withdraw(amount))
        debit(amount);
    return NULL;
}

int main(void) {
    pthread_t t1, t2;
    int first = 80, second = 50;
    pthread_create(&t1, NULL, withdraw, &first);
    usleep(100 * 1000);
    pthread_create(&t2, NULL, withdraw, &second);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    printf("balance=%d\n", balance);
    return 0;
}
