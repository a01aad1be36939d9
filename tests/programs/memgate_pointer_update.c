// Lost update through a pointer: each worker is handed the address of the shared
// total and adds its weight through that pointer (read, compute, write), so no
// instruction names the variable: only a hardware watchpoint sees the accesses,
// and the replay gates the store at the instruction the recording saw. The second
// worker normally starts 100 ms later. With SAFE defined the update holds a lock.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long total;
#ifdef SAFE
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;
#endif

__attribute__((noipa)) static long weight(long item) { return item * 10; }

__attribute__((noipa)) static void add(long *acc, long item) {
#ifdef SAFE
    pthread_mutex_lock(&total_lock);
#endif
    long t = *acc;
    t += weight(item);
    *acc = t;
#ifdef SAFE
    pthread_mutex_unlock(&total_lock);
#endif
}

static void *first(void *arg) {
    add(arg, 1);
    return NULL;
}

static void *second(void *arg) {
    usleep(100000);
    add(arg, 2);
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, first, &total);
    pthread_create(&b, NULL, second, &total);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (total != 30) {
        fprintf(stderr, "total is %ld, expected 30: an update was lost\n", total);
        abort();
    }
    return 0;
}
