// A worker that blocks every signal as it starts, as the workers of servers
// that leave signals to one dedicated thread do. It computes for about
// a second with no call the agent sees while main waits in pthread_join: in a
// sanitizer build its mask is the one the sanitizer's own background thread
// has, and it must still count as a program thread that is running.
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <time.h>

static volatile unsigned long result;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void *work(void *arg) {
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    double start = now();
    unsigned long x = 1;
    while (now() - start < 1.0)
        for (int i = 0; i < 100000; i++)
            x = x * 6364136223846793005UL + 1442695040888963407UL;
    result = x | 1;
    return NULL;
}

int main(void) {
    pthread_t t;
    if (pthread_create(&t, NULL, work, NULL) != 0)
        return 2;
    pthread_join(t, NULL);
    printf("worker done: %d\n", result != 0);
    return result != 0 ? 0 : 1;
}
