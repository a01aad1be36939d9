/* A correct striped hash table: each insert locks its key's stripe; a resize
 * locks every stripe in index order (and only then), so no two threads can wait
 * for each other in a cycle. `ordo analyze` must predict no deadlock. */
#include <pthread.h>
#include <stdio.h>

#define STRIPES 64
#define THREADS 3

static pthread_mutex_t stripe[STRIPES];
static int count[STRIPES];
static int resizes;

static void resize(void) {
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_lock(&stripe[i]);
    resizes++;
    for (int i = STRIPES - 1; i >= 0; i--)
        pthread_mutex_unlock(&stripe[i]);
}

static void *inserter(void *arg) {
    unsigned seed = (unsigned)(long)arg * 2654435761u;
    for (int i = 0; i < 300; i++) {
        seed = seed * 1103515245u + 12345u;
        int s = (seed >> 8) % STRIPES;
        pthread_mutex_lock(&stripe[s]);
        count[s]++;
        pthread_mutex_unlock(&stripe[s]);
        if (i % 100 == 99)
            resize();
    }
    return NULL;
}

int main(void) {
    for (int i = 0; i < STRIPES; i++)
        pthread_mutex_init(&stripe[i], NULL);
    pthread_t t[THREADS];
    for (long i = 0; i < THREADS; i++)
        pthread_create(&t[i], NULL, inserter, (void *)(i + 1));
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    int total = 0;
    for (int i = 0; i < STRIPES; i++)
        total += count[i];
    printf("total %d resizes %d\n", total, resizes);
    return total == THREADS * 300 ? 0 : 1;
}
