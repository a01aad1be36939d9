// Bug: lock-order deadlock across two threads. A transfer locks the source account
// and then the destination; two transfers in opposite directions take the same two
// locks in opposite orders.
// Shape: AB-BA cycle (each thread's first lock before the other's second).
// Fails: deadlock (the program hangs).
#include <pthread.h>
#include <stdio.h>

struct account {
    pthread_mutex_t lock;
    long balance;
};

static struct account acct_a = {PTHREAD_MUTEX_INITIALIZER, 100};
static struct account acct_b = {PTHREAD_MUTEX_INITIALIZER, 100};

struct transfer {
    struct account *from, *to;
    long amount;
};

static void *do_transfer(void *arg) {
    struct transfer *t = arg;
    pthread_mutex_lock(&t->from->lock);
    pthread_mutex_lock(&t->to->lock);
    t->from->balance -= t->amount;
    t->to->balance += t->amount;
    pthread_mutex_unlock(&t->to->lock);
    pthread_mutex_unlock(&t->from->lock);
    return NULL;
}

int main(void) {
    struct transfer ab = {&acct_a, &acct_b, 10}, ba = {&acct_b, &acct_a, 20};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, do_transfer, &ab);
    pthread_create(&t2, NULL, do_transfer, &ba);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    printf("a %ld, b %ld\n", acct_a.balance, acct_b.balance);
    return 0;
}
