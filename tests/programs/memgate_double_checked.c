// Double-checked initialization that publishes its flag before the data: the first
// caller sets `initialized`, then fills in `config`; a later caller that sees the
// flag takes the fast path and reads `config` without the lock. A caller that comes
// between the two stores sees an empty configuration and aborts. With SAFE defined
// every call takes the lock.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct config {
    int threads;
    int verbose;
};

static int initialized;
static struct config config;
static pthread_mutex_t init_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noipa)) static int default_threads(void) { return 4; }

static int configured_threads(void) {
#ifdef SAFE
    pthread_mutex_lock(&init_lock);
    if (!initialized) {
        config.threads = default_threads();
        initialized = 1;
    }
    int n = config.threads;
    pthread_mutex_unlock(&init_lock);
    return n;
#else
    if (!initialized) {
        pthread_mutex_lock(&init_lock);
        if (!initialized) {
            initialized = 1;
            config.threads = default_threads();
        }
        pthread_mutex_unlock(&init_lock);
    }
    return config.threads;
#endif
}

static void *early(void *arg) {
    (void)arg;
    return (void *)(long)configured_threads();
}

static void *late(void *arg) {
    (void)arg;
    usleep(100000);
    int n = configured_threads();
    if (n != 4) {
        fprintf(stderr, "late: configuration has %d threads (read before it was filled in)\n", n);
        abort();
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, early, NULL);
    pthread_create(&b, NULL, late, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
