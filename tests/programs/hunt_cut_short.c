// main trusts a flag its worker sets, without joining first: nearly every run,
// main reads it and returns before the worker has run at all, so the recording
// holds nothing of the worker to order against main's read. `ordo hunt` records
// again holding main's exit until the worker has run, and pins main's read
// before the worker's store.
// Fails: exit status 3.
#include <pthread.h>
#include <stdio.h>

static volatile int done;

static void *worker(void *arg) {
    (void)arg;
    done = 1;
    return NULL;
}

int main(void) {
    pthread_t w;
    pthread_create(&w, NULL, worker, NULL);
    if (!done) {
        fprintf(stderr, "worker not done\n");
        return 3;
    }
    pthread_join(w, NULL);
    return 0;
}
