// A NULL check, then a dereference, with no lock: the reader checks the shared
// pointer, logs, and reads through the pointer again; the closer, 100 ms later,
// sets the pointer to NULL. When the store falls between the check and the
// dereference, the reader dereferences NULL (SIGSEGV; an ASan build reports a SEGV
// on address 0x000000000008).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct stats {
    long requests;
    long bytes;
};

static struct stats *shared;
static volatile int logged;
// Opaque to the compiler: `shared` must be loaded again after it.
__attribute__((noipa)) static void log_hit(void) { logged++; }

static void *reader(void *arg) {
    (void)arg;
    if (shared != NULL) {
        log_hit();
        printf("bytes %ld\n", shared->bytes);
    }
    return NULL;
}

static void *closer(void *arg) {
    (void)arg;
    usleep(100000);
    shared = NULL;
    return NULL;
}

int main(void) {
    static struct stats s = {1, 512};
    shared = &s;
    pthread_t r, c;
    pthread_create(&r, NULL, reader, NULL);
    pthread_create(&c, NULL, closer, NULL);
    pthread_join(r, NULL);
    pthread_join(c, NULL);
    return 0;
}
