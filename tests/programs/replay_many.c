// N threads (argv[1], default 1024) each take one lock once and note their place
// in line. Exits 1 when the last thread created was the first to take the lock
// (what a schedule ordering it before every other thread forces), 0 otherwise.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static pthread_mutex_t line_lock = PTHREAD_MUTEX_INITIALIZER;
static int first = -1;

static void *worker(void *arg) {
    int id = (int)(long)arg;
    pthread_mutex_lock(&line_lock);
    if (first < 0) first = id;
    pthread_mutex_unlock(&line_lock);
    return NULL;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 1024;
    pthread_t *threads = calloc((size_t)n, sizeof *threads);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    for (int i = 0; i < n; i++) {
        if (pthread_create(&threads[i], &attr, worker, (void *)(long)(i + 1)) != 0) {
            fprintf(stderr, "pthread_create %d failed\n", i + 1);
            return 2;
        }
    }
    for (int i = 0; i < n; i++) pthread_join(threads[i], NULL);
    printf("first in line: thread %d of %d\n", first, n);
    return first == n ? 1 : 0;
}
