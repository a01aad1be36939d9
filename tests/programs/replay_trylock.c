// Thread 1 holds `m` and tries it again (EBUSY: a failed trylock, as some
// libraries' debug paths do), releases it, then spins on trylock for its second
// acquisition. Thread 2 takes `m` once. Exits 1 when thread 2's section did not
// come between thread 1's two (the order the bundled schedule asks for).
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static int step;
static int order_ok = 1;

static void *first(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    if (pthread_mutex_trylock(&m) != EBUSY) order_ok = 0;
    step = 1;
    pthread_mutex_unlock(&m);
    while (pthread_mutex_trylock(&m) != 0) sched_yield();
    if (step != 2) order_ok = 0;
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *second(void *arg) {
    (void)arg;
    pthread_mutex_lock(&m);
    if (step == 1) step = 2;
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, first, NULL);
    pthread_create(&b, NULL, second, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("step %d, order %s\n", step, order_ok ? "as scheduled" : "NOT as scheduled");
    return order_ok ? 0 : 1;
}
