// ordo's demo: a bank account with a check-then-act bug.
//
// Two tellers each withdraw from one shared account. A teller checks the balance in
// one critical section and debits it in another, so when the other teller's whole
// withdrawal falls between the two, one debit is lost (or the account is
// overdrawn). The window is tiny: plain runs almost always pass.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t account_lock = PTHREAD_MUTEX_INITIALIZER;
static long balance = 100;
static long withdrawn;

static void *teller(void *arg) {
    long amount = (long)arg;
    pthread_mutex_lock(&account_lock);
    long seen = balance; // check …
    pthread_mutex_unlock(&account_lock);
    if (seen >= amount) {
        pthread_mutex_lock(&account_lock);
        balance = seen - amount; // … then act on a stale value
        withdrawn += amount;
        pthread_mutex_unlock(&account_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, teller, (void *)60L);
    pthread_create(&b, NULL, teller, (void *)30L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("balance %ld, withdrawn %ld\n", balance, withdrawn);
    if (balance + withdrawn != 100) {
        fprintf(stderr, "BUG: money was created or lost (balance %ld + withdrawn %ld != 100)\n", balance, withdrawn);
        return 1;
    }
    return 0;
}
