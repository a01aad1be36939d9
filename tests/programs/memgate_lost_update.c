// Lost update on a plain counter: two threads each add a computed weight to a shared
// total without synchronization (read, compute, write). The second normally starts
// 100 ms later; when both read before either writes, one addition is lost. With SAFE
// defined the update holds a lock.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long total;
#ifdef SAFE
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

__attribute__((noipa)) static long weight(long item) { return item * 10; }

static void add(long item) {
#ifdef SAFE
    pthread_mutex_lock(&total_lock);
#endif
    long t = total;
    t += weight(item);
    total = t;
#ifdef SAFE
    pthread_mutex_unlock(&total_lock);
#endif
}

static void *first(void *arg) {
    (void)arg;
    add(1);
    return NULL;
}

static void *second(void *arg) {
    (void)arg;
    usleep(100000);
    add(2);
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, first, NULL);
    pthread_create(&b, NULL, second, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (total != 30) {
        fprintf(stderr, "total is %ld, expected 30: an update was lost\n", total);
        abort();
    }
    return 0;
}
