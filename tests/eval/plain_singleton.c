// Bug: a singleton published and freed through an atomic pointer (C11 atomics,
// as std::atomic<T*> compiles). Readers load the instance and use it; the
// reloader swaps in a new instance with an atomic exchange and frees the old one
// at once, with no grace period for readers that loaded it.
// Shape: the reloader's exchange, and its free before it exits, between a
// reader's load of the instance and its use (a stale use).
// Fails: abort() when the reader finds the poison.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE 0x1234
#define DEAD 0xdead

struct settings { long reserved[2]; long magic; long timeout_ms; };

static _Atomic(struct settings *) instance;

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
    for (volatile int work = 0; work < 200000; work++) {}   // read the new file
    struct settings *old = atomic_exchange(&instance, make(250));
    *(volatile long *)&old->magic = DEAD;
    free(old);
    return NULL;
}

int main(void) {
    atomic_store(&instance, make(100));
    pthread_t r, l;
    pthread_create(&r, NULL, reader, NULL);
    pthread_create(&l, NULL, reloader, NULL);
    pthread_join(r, NULL);
    pthread_join(l, NULL);
    free(atomic_load(&instance));
    return 0;
}
