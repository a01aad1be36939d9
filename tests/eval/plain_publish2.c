// Bug: two-pointer publication. The loader publishes a configuration as two
// pointers, name first; the worker waits for the name and then uses the value,
// which is not published yet when it falls between the two stores.
// Shape: the worker's read of `cfg.name` and of `cfg.value` between the loader's
// two stores (a reader seeing the first of two stores but not the second).
// Fails: SIGSEGV (the value pointer is still NULL).
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>

struct value { long limit; };
struct config { const char *volatile name; struct value *volatile value; };

static struct config cfg;
static struct value defaults = { 42 };

static void *loader(void *arg) {
    (void)arg;
    char buf[64];
    snprintf(buf, sizeof buf, "%s-%d", "pool", 7);   // parse the file
    static char name[64];
    strcpy(name, buf);
    cfg.name = name;          // published first...
    cfg.value = &defaults;    // ...the value after it
    return NULL;
}

static void *worker(void *arg) {
    (void)arg;
    while (cfg.name == NULL) sched_yield();
    long limit = cfg.value->limit;
    printf("%s limit %ld\n", cfg.name, limit);
    return NULL;
}

int main(void) {
    pthread_t l, w;
    pthread_create(&w, NULL, worker, NULL);
    pthread_create(&l, NULL, loader, NULL);
    pthread_join(l, NULL);
    pthread_join(w, NULL);
    return 0;
}
