// Bug: cond_signal ordered before the critical section it announces. The worker
// sets `finished` and signals under the state lock, then stores its result under
// the result lock in a second step. main waits correctly for `finished` (a while
// loop) but then reads a result that may not be stored yet.
// Shape: another object against a lock: main's result section (after its wait
// returns) must come before the worker's result section (after its signal).
// Fails: abort() in main when the result is missing.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t state_cond = PTHREAD_COND_INITIALIZER;
static int finished;
static pthread_mutex_t result_lock = PTHREAD_MUTEX_INITIALIZER;
static const char *result;

static void *worker(void *arg) {
    (void)arg;
    long v = 0;
    for (volatile int i = 0; i < 10000; i++) v += i & 7;
    pthread_mutex_lock(&state_lock);
    finished = 1;
    pthread_cond_signal(&state_cond);
    pthread_mutex_unlock(&state_lock);
    pthread_mutex_lock(&result_lock);   // published after the announcement
    result = v > 0 ? "ok" : "empty";
    pthread_mutex_unlock(&result_lock);
    return NULL;
}

int main(void) {
    pthread_t w;
    pthread_create(&w, NULL, worker, NULL);
    pthread_mutex_lock(&state_lock);
    while (!finished) pthread_cond_wait(&state_cond, &state_lock);
    pthread_mutex_unlock(&state_lock);
    long header = 0;   // formats the report header and logs it (I/O: ~100 us)
    for (volatile int i = 0; i < 5000; i++) header += i & 3;
    usleep(100);
    pthread_mutex_lock(&result_lock);
    if (result == NULL) {
        fprintf(stderr, "main: read the result before the worker stored it\n");
        abort();
    }
    printf("result %s (%ld)\n", result, header);
    pthread_mutex_unlock(&result_lock);
    pthread_join(w, NULL);
    return 0;
}
