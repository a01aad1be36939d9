// Unsynchronized flag check (check before set): the main thread starts a loader,
// does 100 ms of other work, and then trusts a plain flag the loader sets after
// filling in the data. It almost always runs late enough; when the check comes
// before the set, it aborts. With SAFE defined the main thread waits for the flag
// under a mutex and condition variable: correct under every order.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int data;
static int ready;
#ifdef SAFE
static pthread_mutex_t ready_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cond = PTHREAD_COND_INITIALIZER;
#endif

static void *loader(void *arg) {
    (void)arg;
    data = 42;
#ifdef SAFE
    pthread_mutex_lock(&ready_lock);
    ready = 1;
    pthread_cond_signal(&ready_cond);
    pthread_mutex_unlock(&ready_lock);
#else
    ready = 1;
#endif
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, loader, NULL);
    usleep(100000);
#ifdef SAFE
    pthread_mutex_lock(&ready_lock);
    while (!ready)
        pthread_cond_wait(&ready_cond, &ready_lock);
    pthread_mutex_unlock(&ready_lock);
#else
    if (!ready) {
        fprintf(stderr, "main: the data is not ready (checked before the loader set the flag)\n");
        abort();
    }
#endif
    if (data != 42) {
        fprintf(stderr, "main: ready but the data is %d\n", data);
        abort();
    }
    pthread_join(t, NULL);
    return 0;
}
