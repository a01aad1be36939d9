// Bug: a pointer checked, then used, while another thread clears it under a lock
// the checker never takes (the shape of many use-after-close CVEs: a connection's
// handler tests `s->conn`, then calls through it).
// Shape: the closer's clearing store between the handler's load for the check and
// its load for the use (read, write, read on one location).
// Fails: SIGSEGV (a NULL pointer dereference).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct conn { int fd; long bytes; };
struct session { struct conn *conn; pthread_mutex_t lock; };

static struct session sess = { NULL, PTHREAD_MUTEX_INITIALIZER };
static volatile long log_lines;

// Out of line and opaque to the optimizer, like a call into a logging library:
// the pointer is loaded again after it.
__attribute__((noinline)) static void log_event(const char *what) {
    __asm__ volatile("" : : "r"(what) : "memory");
    log_lines++;
}

static void *handler(void *arg) {
    (void)arg;
    for (int i = 0; i < 3; i++) {
        if (sess.conn != NULL) {          // the check
            log_event("request");
            sess.conn->bytes += 64;       // the use: a fresh load of sess.conn
        }
    }
    return NULL;
}

static void *closer(void *arg) {
    (void)arg;
    for (volatile int spin = 0; spin < 200000; spin++) {}   // the idle timeout
    pthread_mutex_lock(&sess.lock);
    sess.conn = NULL;
    pthread_mutex_unlock(&sess.lock);
    return NULL;
}

int main(void) {
    static struct conn c = { 3, 0 };
    sess.conn = &c;
    pthread_t h, k;
    pthread_create(&h, NULL, handler, NULL);
    pthread_create(&k, NULL, closer, NULL);
    pthread_join(h, NULL);
    pthread_join(k, NULL);
    printf("%ld bytes, %ld log lines\n", c.bytes, log_lines);
    return 0;
}
