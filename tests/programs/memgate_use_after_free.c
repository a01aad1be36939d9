// Use after free across threads: a session thread checks the shared connection
// pointer, logs, and then uses the connection through the pointer again; a closer
// thread, 100 ms later, unpublishes the connection and frees it. When the close falls
// between the check and the use, the use reads a NULL (or freed) pointer and the
// program dies. With SAFE defined both sides hold the connection lock.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct conn {
    int fd;
    int requests;
};

static struct conn *current;
#ifdef SAFE
static pthread_mutex_t conn_lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&conn_lock)
#define UNLOCK() pthread_mutex_unlock(&conn_lock)
#else
#define LOCK()
#define UNLOCK()
#endif

static volatile int logged;
// Opaque to the compiler: `current` must be loaded again after it.
__attribute__((noipa)) static void log_use(void) { logged++; }

static void *session(void *arg) {
    (void)arg;
    LOCK();
    if (current != NULL) {
        log_use();
        current->requests++;
    }
    UNLOCK();
    return NULL;
}

static void *closer(void *arg) {
    (void)arg;
    usleep(100000);
    LOCK();
    struct conn *c = current;
    current = NULL;
    UNLOCK();
    c->fd = -1;
    free(c);
    return NULL;
}

int main(void) {
    current = calloc(1, sizeof *current);
    current->fd = 3;
    pthread_t s, c;
    pthread_create(&s, NULL, session, NULL);
    pthread_create(&c, NULL, closer, NULL);
    pthread_join(s, NULL);
    pthread_join(c, NULL);
    return 0;
}
