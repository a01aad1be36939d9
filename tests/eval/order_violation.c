// Bug: order violation. The logger thread is created first and opens the log
// buffer under log_lock; the worker, created right after it, appends to the log
// assuming it is open. The lock makes each step atomic, not ordered.
// Shape: one ordering across threads (the worker's first section before the
// logger's first section).
// Fails: abort() in the worker when the log is not open yet.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *log_buf;
static size_t log_len;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void *open_log(void *arg) {
    (void)arg;
    pthread_mutex_lock(&log_lock);
    log_buf = calloc(1, 4096);
    log_len = 0;
    pthread_mutex_unlock(&log_lock);
    return NULL;
}

static void *worker(void *arg) {
    (void)arg;
    const char *msg = "worker started\n";
    pthread_mutex_lock(&log_lock);
    if (log_buf == NULL) {
        fprintf(stderr, "worker: log used before it was opened\n");
        abort();
    }
    memcpy(log_buf + log_len, msg, strlen(msg));
    log_len += strlen(msg);
    pthread_mutex_unlock(&log_lock);
    return NULL;
}

int main(void) {
    pthread_t logger, work;
    pthread_create(&logger, NULL, open_log, NULL);
    pthread_create(&work, NULL, worker, NULL);
    pthread_join(logger, NULL);
    pthread_join(work, NULL);
    printf("%.*s", (int)log_len, log_buf);
    free(log_buf);
    return 0;
}
