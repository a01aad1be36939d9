// A lock-order deadlock that happens by itself the first time the program runs and
// rarely after: the first run (no marker file yet) creates the marker and widens
// the window between each transfer's two locks, so both threads hold their first
// lock when they ask for the second. Later runs take the locks back to back.
// `ordo hunt` must turn that first failing run into a schedule that deadlocks the
// fast runs too: each thread's first lock before the other's blocked second one.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static int first_run;

static void *transfer(void *arg) {
    int ab = arg != NULL;
    pthread_mutex_t *first = ab ? &lock_a : &lock_b, *second = ab ? &lock_b : &lock_a;
    pthread_mutex_lock(first);
    if (first_run)
        usleep(50000);
    pthread_mutex_lock(second);
    pthread_mutex_unlock(second);
    pthread_mutex_unlock(first);
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
    pthread_t t1, t2;
    pthread_create(&t1, NULL, transfer, (void *)1);
    pthread_create(&t2, NULL, transfer, NULL);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    puts("done");
    return 0;
}
