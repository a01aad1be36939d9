// A thread that reads one variable at five different instructions (and writes it at
// one): gating its reads needs five debug registers, one more than x86 has, so
// `ordo replay` gates them by software breakpoints (and refuses five points that
// are not memory accesses, its `call`s, before the run).
#include <pthread.h>
#include <stdio.h>

static int level;

__attribute__((noipa)) static int use(int v) { return v + 1; }

static void *reader(void *arg) {
    (void)arg;
    int sum = use(level);
    sum += use(level);
    sum += use(level);
    sum += use(level);
    sum += use(level);
    return (void *)(long)sum;
}

int main(void) {
    pthread_t t;
    pthread_create(&t, NULL, reader, NULL);
    level = 2;
    pthread_join(t, NULL);
    printf("level %d\n", level);
    return 0;
}
