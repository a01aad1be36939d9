// File-local and function-local statics, which have no global symbol: a watch
// finds them by their source names (`hidden_state`, `calls`, `count_call::calls`).
// Also a thread-local variable, which cannot be watched.
// Usage: watch_static [ROUNDS]   (default 3)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static volatile int hidden_state;
static __thread int per_thread_calls;
static int rounds = 3;

__attribute__((noinline)) int count_call(void) {
    static volatile int calls;
    per_thread_calls++;
    return ++calls;
}

__attribute__((noinline)) void set_state(int v) { hidden_state = v; }
__attribute__((noinline)) int get_state(void) { return hidden_state; }

static void *worker(void *arg) {
    int id = (int)(long)arg;
    for (int i = 0; i < rounds; i++) {
        count_call();
        set_state(id);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    pthread_t threads[2];
    for (long t = 0; t < 2; t++) pthread_create(&threads[t], NULL, worker, (void *)(t + 1));
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    printf("state %d calls %d\n", get_state(), count_call());
    return 0;
}
