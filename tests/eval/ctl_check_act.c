// Control (correct): the check_then_act program fixed. The buyer prices the order
// from a first look at the stock but re-checks the stock in the section that takes
// the item. Same two sections per buyer, same auditor.
// Never fails under any order of the sections.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int stock = 1;
static long audits, sold;
static pthread_mutex_t stock_lock = PTHREAD_MUTEX_INITIALIZER;

static long price_of(int n) {
    long p = 0;
    for (volatile int i = 0; i < 2000; i++) p += (n * 31 + i) % 7;
    return p;
}

static void *buyer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&stock_lock);
    int seen = stock;
    pthread_mutex_unlock(&stock_lock);
    if (seen > 0) {
        long price = price_of(seen);
        pthread_mutex_lock(&stock_lock);
        if (stock > 0) {   // re-checked where it acts
            stock -= 1;
            sold += price > 0;
        }
        if (stock < 0) abort();
        pthread_mutex_unlock(&stock_lock);
    }
    return NULL;
}

static void *auditor(void *arg) {
    (void)arg;
    for (int round = 0; round < 3; round++) {
        pthread_mutex_lock(&stock_lock);
        audits += stock;
        pthread_mutex_unlock(&stock_lock);
    }
    pthread_mutex_lock(&stock_lock);
    if (stock > 0) stock -= 1;
    pthread_mutex_unlock(&stock_lock);
    return NULL;
}

int main(void) {
    pthread_t b, a;
    pthread_create(&b, NULL, buyer, NULL);
    pthread_create(&a, NULL, auditor, NULL);
    pthread_join(b, NULL);
    pthread_join(a, NULL);
    printf("stock %d, sold %ld after %ld audits\n", stock, sold, audits);
    return 0;
}
