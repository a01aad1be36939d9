// Bug: join of the wrong thread. main starts a loader (slow) and an indexer (fast)
// and needs the index, but joins the loader; the index is almost always built by
// then, so nobody noticed.
// Shape: thread lifetime / join against a critical section: main's section after
// joining thread 1 must come before thread 2's section.
// Fails: abort() in main when the index is not built.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int records[64];
static int index_size = -1;
static pthread_mutex_t index_lock = PTHREAD_MUTEX_INITIALIZER;

static void *loader(void *arg) {
    (void)arg;
    usleep(2000);   // reads the records from disk (modelled as 2 ms of I/O)
    for (int round = 0; round < 50; round++)
        for (volatile int i = 0; i < 64; i++) records[i] = (records[i] + i * round) % 1000;
    return NULL;
}

static void *indexer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&index_lock);
    index_size = 64;
    pthread_mutex_unlock(&index_lock);
    return NULL;
}

int main(void) {
    pthread_t load, idx;
    pthread_create(&load, NULL, loader, NULL);
    pthread_create(&idx, NULL, indexer, NULL);
    pthread_join(load, NULL);   // should be idx
    pthread_mutex_lock(&index_lock);
    if (index_size < 0) {
        fprintf(stderr, "main: used the index before it was built\n");
        abort();
    }
    printf("index of %d records\n", index_size);
    pthread_mutex_unlock(&index_lock);
    pthread_join(idx, NULL);
    return 0;
}
