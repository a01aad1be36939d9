// Control (correct): the deadlock_2 program fixed. A transfer locks the two
// accounts in a global order (by account number), whichever direction it goes.
// Never deadlocks.
#include <pthread.h>
#include <stdio.h>

struct account {
    int number;
    pthread_mutex_t lock;
    long balance;
};

static struct account acct_a = {1, PTHREAD_MUTEX_INITIALIZER, 100};
static struct account acct_b = {2, PTHREAD_MUTEX_INITIALIZER, 100};

struct transfer {
    struct account *from, *to;
    long amount;
};

static void *do_transfer(void *arg) {
    struct transfer *t = arg;
    struct account *first = t->from->number < t->to->number ? t->from : t->to;
    struct account *second = first == t->from ? t->to : t->from;
    pthread_mutex_lock(&first->lock);
    pthread_mutex_lock(&second->lock);
    t->from->balance -= t->amount;
    t->to->balance += t->amount;
    pthread_mutex_unlock(&second->lock);
    pthread_mutex_unlock(&first->lock);
    return NULL;
}

int main(void) {
    struct transfer ab = {&acct_a, &acct_b, 10}, ba = {&acct_b, &acct_a, 20};
    pthread_t t1, t2;
    pthread_create(&t1, NULL, do_transfer, &ab);
    pthread_create(&t2, NULL, do_transfer, &ba);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    if (acct_a.balance + acct_b.balance != 200) return 1;
    printf("a %ld, b %ld\n", acct_a.balance, acct_b.balance);
    return 0;
}
