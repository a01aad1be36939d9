// The main thread creates a worker, then publishes a setting under a lock. The
// worker reads the setting under the same lock. Exits 1 when the worker saw the
// setting (it started after the publication), 0 when it did not.
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t setting_lock = PTHREAD_MUTEX_INITIALIZER;
static int setting, seen;

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&setting_lock);
    seen = setting;
    pthread_mutex_unlock(&setting_lock);
    return NULL;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_mutex_lock(&setting_lock);
    setting = 42;
    pthread_mutex_unlock(&setting_lock);
    pthread_join(t, NULL);
    printf("worker saw %d\n", seen);
    return seen == 42 ? 1 : 0;
}
