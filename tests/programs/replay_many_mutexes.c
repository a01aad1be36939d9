// Two threads each lock 400 heap mutexes in turn (a per-bucket lock table) and
// record which thread reached each bucket first. Exits 1 when thread 2 reached
// bucket 300 before thread 1: what `2:mutex_unlock(@300)#1 -> 1:mutex_lock(@300)#1`
// asks for. Heap mutexes have no symbol, so schedules name them `@K`: the thread's
// K-th distinct mutex, far past the first 32 (the agent's table of them grows
// twice on the way).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define BUCKETS 400

static pthread_mutex_t *locks;
static int first[BUCKETS];

static void *visit(void *arg) {
    int me = (int)(long)arg;
    for (int i = 0; i < BUCKETS; i++) {
        pthread_mutex_lock(&locks[i]);
        if (first[i] == 0)
            first[i] = me;
        pthread_mutex_unlock(&locks[i]);
    }
    return NULL;
}

int main(void) {
    locks = malloc(sizeof *locks * BUCKETS);
    for (int i = 0; i < BUCKETS; i++)
        pthread_mutex_init(&locks[i], NULL);
    pthread_t t1, t2;
    pthread_create(&t1, NULL, visit, (void *)1L);
    pthread_create(&t2, NULL, visit, (void *)2L);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    printf("bucket 300 first reached by thread %d\n", first[299]);
    return first[299] == 2 ? 1 : 0;
}
