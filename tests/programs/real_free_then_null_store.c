// Unlock, free, then the NULL store (use after free): the closer takes the
// session under the lock, unlocks, frees it, and only then clears the shared
// pointer. A caller whose whole critical section falls between the free and the
// NULL store calls through the freed session (SIGSEGV: the allocator overwrote the
// handler; an ASan build reports a heap-use-after-free READ). Holding the closer
// right after its unlock does not show it (the session is still alive then): the
// window is bounded by the NULL store, which `ordo record --mark` names.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct session {
    void (*handler)(int);
    long pending;
};

static struct session *current;
static pthread_mutex_t current_lock = PTHREAD_MUTEX_INITIALIZER;

static void greet(int n) { printf("handled %d\n", n); }

static void *closer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&current_lock);
    struct session *s = current;
    pthread_mutex_unlock(&current_lock);
    free(s);
    current = NULL; // MARK: the NULL store, after the free, outside the lock
    return NULL;
}

static void *caller(void *arg) {
    (void)arg;
    usleep(100000);
    pthread_mutex_lock(&current_lock);
    if (current != NULL)
        current->handler(1);
    pthread_mutex_unlock(&current_lock);
    return NULL;
}

int main(void) {
    current = malloc(sizeof *current);
    current->handler = greet;
    current->pending = 0;
    pthread_t c, u;
    pthread_create(&c, NULL, closer, NULL);
    pthread_create(&u, NULL, caller, NULL);
    pthread_join(c, NULL);
    pthread_join(u, NULL);
    return 0;
}
