// Bug: check-then-act across two critical sections of one thread. The buyer checks
// the stock in one section, prices the order outside the lock, and takes the item
// in a second section trusting the old check. The auditor takes three read-only
// looks at the stock and then sells the last item itself.
// Shape: the auditor's 4th section (its mutation) must fall between the buyer's two
// sections; in a natural run it is several sections away from them, so moving one
// section across its neighbour does not show the bug.
// Fails: abort() when the stock goes negative.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int stock = 1;
static long audits;
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
        stock -= 1;   // acts on the stale check
        if (stock < 0) {
            fprintf(stderr, "buyer: sold an item that was not in stock (price %ld)\n", price);
            abort();
        }
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
    if (stock > 0) stock -= 1;   // correct: checks and acts in one section
    pthread_mutex_unlock(&stock_lock);
    return NULL;
}

int main(void) {
    pthread_t b, a;
    pthread_create(&b, NULL, buyer, NULL);
    pthread_create(&a, NULL, auditor, NULL);
    pthread_join(b, NULL);
    pthread_join(a, NULL);
    printf("stock %d after %ld audits\n", stock, audits);
    return 0;
}
