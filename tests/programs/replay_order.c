// Order violation: the worker uses the configuration the init thread sets up,
// assuming init "obviously" ran first because it was started first. Both take the
// lock, but the lock gives atomicity, not order. Exits via abort() when the worker
// runs first and finds no configuration.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct config {
    int threads;
    int verbose;
};

static struct config *cfg;
static pthread_mutex_t cfg_lock = PTHREAD_MUTEX_INITIALIZER;

static void *init_config(void *arg) {
    (void)arg;
    pthread_mutex_lock(&cfg_lock);
    struct config *c = malloc(sizeof *c);
    c->threads = 4;
    c->verbose = 0;
    cfg = c;
    pthread_mutex_unlock(&cfg_lock);
    return NULL;
}

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&cfg_lock);
    if (cfg == NULL) {
        fprintf(stderr, "worker: configuration used before initialization\n");
        abort();
    }
    int n = cfg->threads;
    pthread_mutex_unlock(&cfg_lock);
    return (void *)(long)n;
}

int main(void) {
    pthread_t init, work;
    pthread_create(&init, NULL, init_config, NULL);
    // Some unrelated start-up work (20 ms) before the worker starts: plenty for the
    // init thread, almost always.
    usleep(20000);
    pthread_create(&work, NULL, worker, NULL);
    void *n;
    pthread_join(init, NULL);
    pthread_join(work, &n);
    printf("worker saw %ld threads\n", (long)n);
    free(cfg);
    return 0;
}
