// Two threads write and read one watched global a known number of times, under a
// lock, and log every value. The global is written in exactly 3 places (set_value,
// reset_value, mark_done) and read in exactly 2 (get_value, is_done): the watch
// planner's tests check that it finds those 5 instructions and no others.
// Usage: watch_globals [ROUNDS]   (default 3)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

// volatile: every access in the source is one instruction in the binary.
volatile int shared_value;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int rounds = 3;

__attribute__((noinline)) void set_value(int v) { shared_value = v; }    // write (register)
__attribute__((noinline)) void reset_value(void) { shared_value = 0; }   // write (immediate)
__attribute__((noinline)) void mark_done(void) { shared_value = 4242; }  // write (immediate)
__attribute__((noinline)) int get_value(void) { return shared_value; }   // read
__attribute__((noinline)) int is_done(void) { return shared_value == 4242; }  // read (compare)

static void *worker(void *arg) {
    int id = (int)(long)arg;
    for (int i = 0; i < rounds; i++) {
        pthread_mutex_lock(&lock);
        set_value(id * 100 + i);
        int seen = get_value();
        printf("thread %d wrote %d read %d\n", id, id * 100 + i, seen);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    reset_value();
    pthread_t threads[2];
    for (long t = 0; t < 2; t++) pthread_create(&threads[t], NULL, worker, (void *)(t + 1));
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    mark_done();
    printf("done %d\n", is_done());
    return 0;
}
