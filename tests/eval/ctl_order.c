// Control (correct): the order_violation program fixed. The worker waits on a
// condition variable, in a loop, until the logger has opened the log.
// Shape: same threads and locks as order_violation, plus a condvar handshake.
// Never fails: every schedule either runs the logger first or is infeasible.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *log_buf;
static size_t log_len;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t log_open = PTHREAD_COND_INITIALIZER;

static void *open_log(void *arg) {
    (void)arg;
    pthread_mutex_lock(&log_lock);
    log_buf = calloc(1, 4096);
    log_len = 0;
    pthread_cond_broadcast(&log_open);
    pthread_mutex_unlock(&log_lock);
    return NULL;
}

static void *worker(void *arg) {
    (void)arg;
    const char *msg = "worker started\n";
    pthread_mutex_lock(&log_lock);
    while (log_buf == NULL) pthread_cond_wait(&log_open, &log_lock);
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
