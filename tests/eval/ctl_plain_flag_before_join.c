// Control for plain_flag_before_join: main joins the worker before it reads the
// flag and the result.
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
    for (volatile int work = 0; work < 2000000; work++) {}
    pthread_join(w, NULL);
    if (!done) {
        fprintf(stderr, "result missing\n");
        return 3;
    }
    printf("checksum %ld\n", checksum);
    return 0;
}
