// Fails on its first run only: when the file named by HUNT_FAILS_ONCE_MARKER does
// not exist yet, it is created and the program aborts after its two threads took
// turns on a lock. No order of those turns brings the failure back, so a hunt
// must not report it as reproduced.
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long total;

static void *worker(void *arg) {
    for (int i = 0; i < 3; i++) {
        pthread_mutex_lock(&lock);
        total += (long)arg;
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, worker, (void *)1);
    pthread_create(&b, NULL, worker, (void *)2);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    const char *marker = getenv("HUNT_FAILS_ONCE_MARKER");
    if (marker && open(marker, O_CREAT | O_EXCL | O_WRONLY, 0600) >= 0) {
        fprintf(stderr, "first run: failing once\n");
        abort();
    }
    printf("total %ld\n", total);
    return 0;
}
