// Control for plain_singleton: the reloader frees the old instance only after
// the readers are done with it (it joins them: the grace period readers need).
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE 0x1234
#define DEAD 0xdead

struct settings { long reserved[2]; long magic; long timeout_ms; };

static _Atomic(struct settings *) instance;
static pthread_t reader_thread;

static struct settings *make(long timeout) {
    struct settings *s = calloc(1, sizeof *s);
    s->magic = LIVE;
    s->timeout_ms = timeout;
    return s;
}

static void *reader(void *arg) {
    (void)arg;
    struct settings *s = atomic_load(&instance);
    if (*(volatile long *)&s->magic != LIVE) {
        fprintf(stderr, "reader: settings used after they were freed\n");
        abort();
    }
    return NULL;
}

static void *reloader(void *arg) {
    (void)arg;
    for (volatile int work = 0; work < 200000; work++) {}
    struct settings *old = atomic_exchange(&instance, make(250));
    pthread_join(reader_thread, NULL);   // the grace period
    *(volatile long *)&old->magic = DEAD;
    free(old);
    return NULL;
}

int main(void) {
    atomic_store(&instance, make(100));
    pthread_t l;
    pthread_create(&reader_thread, NULL, reader, NULL);
    pthread_create(&l, NULL, reloader, NULL);
    pthread_join(l, NULL);
    free(atomic_load(&instance));
    return 0;
}
