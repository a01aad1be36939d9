// Unlock, then a NULL store through a stale pointer (use after free): the worker
// looks its session up under the lock, unlocks, then clears the session's pending
// request with a plain store. A reaper whose whole critical section falls between
// the worker's unlock and that store takes the session out of the table, frees it
// and allocates the next session, which gets the same memory: the worker's store
// then clears the new session's handler, and main's call through it dies
// (SIGSEGV). An ASan build reports the store as a heap-use-after-free WRITE.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct session {
    void (*handler)(int);
    long pending;
};

static struct session *table;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static void greet(int n) { printf("handled %d\n", n); }

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&table_lock);
    struct session *s = table;
    pthread_mutex_unlock(&table_lock);
    s->handler = NULL; // the stale store, outside the lock
    return NULL;
}

static void *reaper(void *arg) {
    (void)arg;
    usleep(100000);
    pthread_mutex_lock(&table_lock);
    struct session *old = table;
    free(old);
    struct session *fresh = malloc(sizeof *fresh);
    fresh->handler = greet;
    fresh->pending = 0;
    table = fresh;
    pthread_mutex_unlock(&table_lock);
    return NULL;
}

int main(void) {
    table = malloc(sizeof *table);
    table->handler = greet;
    table->pending = 1;
    pthread_t w, r;
    pthread_create(&w, NULL, worker, NULL);
    pthread_create(&r, NULL, reaper, NULL);
    pthread_join(w, NULL);
    pthread_join(r, NULL);
    table->handler(7);
    free(table);
    return 0;
}
