// Control for plain_publish2: the value is published before the name the worker
// waits for (x86 keeps the stores in order), so seeing the name implies the value.
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
    cfg.value = &defaults;    // the value first...
    cfg.name = name;          // ...then the name the worker waits for
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
