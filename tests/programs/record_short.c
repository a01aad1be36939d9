/* A program that is over within milliseconds: one mutex, two threads, one lock
 * each. Its trace must still name the mutex and every call site, however early the
 * program ends (record_symbols.rs records it hundreds of times). */
#include <pthread.h>

pthread_mutex_t short_lock = PTHREAD_MUTEX_INITIALIZER;
int short_counter;

static void *bump(void *arg) {
    pthread_mutex_lock(&short_lock);
    short_counter++;
    pthread_mutex_unlock(&short_lock);
    return arg;
}

int main(void) {
    pthread_t worker;
    pthread_create(&worker, 0, bump, 0);
    bump(0);
    pthread_join(worker, 0);
    return short_counter == 2 ? 0 : 1;
}
