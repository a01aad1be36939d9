// A failed trylock that loses data, by itself on the program's first run only: the
// first run (no marker file yet) creates the marker and makes reporter 1 hold the
// lock long enough for reporter 2's trylock to fail; later runs almost never
// overlap. `ordo hunt` must pin the failed try inside reporter 1's section (its
// time stamp says which section, not its place among the lock's events).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static long total;
static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;
static int first_run;

static void *reporter(void *arg) {
    long n = (long)arg;
    if (pthread_mutex_trylock(&total_lock) == 0) {
        total += n;
        if (first_run && n == 10)
            usleep(50000);
        pthread_mutex_unlock(&total_lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MARKER\n", argv[0]);
        return 2;
    }
    if (access(argv[1], F_OK) != 0) {
        FILE *f = fopen(argv[1], "w");
        if (f)
            fclose(f);
        first_run = 1;
    }
    pthread_t a, b;
    pthread_create(&a, NULL, reporter, (void *)10L);
    if (first_run)
        usleep(10000);
    pthread_create(&b, NULL, reporter, (void *)20L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (total != 30) {
        fprintf(stderr, "total %ld, expected 30\n", total);
        abort();
    }
    return 0;
}
