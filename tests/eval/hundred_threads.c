// Bug: a lazily created table. Each of 99 workers creates the shared table on
// first use; the monitor thread, started last, assumes some worker already did.
// Shape: needs 100 threads: the monitor's section must come before each of the 99
// workers' sections (one thread before every other thread's first lock).
// Fails: abort() in the monitor when the table does not exist yet.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define WORKERS 99

struct table {
    long hits[WORKERS];
};

static struct table *table;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;
static long monitored;

static void *worker(void *arg) {
    long id = (long)arg;
    pthread_mutex_lock(&table_lock);
    if (table == NULL) table = calloc(1, sizeof *table);
    table->hits[id]++;
    pthread_mutex_unlock(&table_lock);
    return NULL;
}

static void *monitor(void *arg) {
    (void)arg;
    pthread_mutex_lock(&table_lock);
    if (table == NULL) {
        fprintf(stderr, "monitor: table read before any worker created it\n");
        abort();
    }
    for (int i = 0; i < WORKERS; i++) monitored += table->hits[i];
    pthread_mutex_unlock(&table_lock);
    return NULL;
}

int main(void) {
    pthread_t t[WORKERS + 1];
    for (long i = 0; i < WORKERS; i++) pthread_create(&t[i], NULL, worker, (void *)i);
    pthread_create(&t[WORKERS], NULL, monitor, NULL);
    for (int i = 0; i <= WORKERS; i++) pthread_join(t[i], NULL);
    printf("monitor saw %ld hits\n", monitored);
    free(table);
    return 0;
}
