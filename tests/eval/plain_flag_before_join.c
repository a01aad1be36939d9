// Bug: main reads the workers' result with a plain read before it joins them.
// The workers store their checksum and set `done`; main polls nothing, it just
// finishes its own (longer) work first and trusts the flag.
// Shape: main's read of `done` before the worker's store to it (a race whose
// other order the run never took: hold the worker until main has read).
// Fails: exit status 3 (main reports the result missing).
#include <pthread.h>
#include <stdio.h>

static volatile int done;
static volatile long checksum;

static void *worker(void *arg) {
    (void)arg;
    long sum = 0;
    for (int i = 0; i < 1000; i++) sum += i * 7;
    checksum = sum;
    done = 1;
    return NULL;
}

int main(void) {
    pthread_t w;
    pthread_create(&w, NULL, worker, NULL);
    for (volatile int work = 0; work < 2000000; work++) {}   // main's own share
    if (!done) {
        fprintf(stderr, "result missing\n");
        return 3;
    }
    printf("checksum %ld\n", checksum);
    pthread_join(w, NULL);
    return 0;
}
