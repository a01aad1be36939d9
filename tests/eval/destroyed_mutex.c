// Bug: use of a destroyed mutex. The session's flusher is started first and
// "always finishes at once", so shutdown joins only the two workers before it
// destroys the session lock. A flusher that runs late locks a destroyed mutex
// (glibc then returns EINVAL).
// Shape: main's section after the destroy (its log_lock section) must come before
// the flusher's only section: the flusher delayed past main's shutdown.
// Fails: abort() in the flusher when pthread_mutex_lock fails.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct session {
    pthread_mutex_t lock;
    long bytes;
    long flushed;
};

static struct session sess;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_lines;

static void *flusher(void *arg) {
    (void)arg;
    int rc = pthread_mutex_lock(&sess.lock);
    if (rc != 0) {
        fprintf(stderr, "flusher: session lock unusable (%s): used after destroy\n", strerror(rc));
        abort();
    }
    sess.flushed = sess.bytes;
    pthread_mutex_unlock(&sess.lock);
    return NULL;
}

static void *writer(void *arg) {
    long n = (long)arg;
    pthread_mutex_lock(&sess.lock);
    sess.bytes += n;
    pthread_mutex_unlock(&sess.lock);
    return NULL;
}

int main(void) {
    pthread_mutex_init(&sess.lock, NULL);
    pthread_t f, w1, w2;
    pthread_create(&f, NULL, flusher, NULL);
    pthread_create(&w1, NULL, writer, (void *)100L);
    pthread_create(&w2, NULL, writer, (void *)200L);
    pthread_join(w1, NULL);
    pthread_join(w2, NULL);
    pthread_mutex_destroy(&sess.lock);   // the flusher is not joined yet
    pthread_mutex_lock(&log_lock);
    log_lines++;
    printf("session closed after %ld bytes\n", sess.bytes);
    pthread_mutex_unlock(&log_lock);
    pthread_join(f, NULL);
    return 0;
}
