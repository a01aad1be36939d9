/* Correct reader/writer use: four readers take the read lock to sum a table, one
 * writer takes the write lock to update it; every access is under the rwlock.
 * `ordo analyze` must predict no bug. */
#include <pthread.h>
#include <stdio.h>

static pthread_rwlock_t table_lock = PTHREAD_RWLOCK_INITIALIZER;
static int table[16];

static void *reader(void *arg) {
    (void)arg;
    long seen = 0;
    for (int i = 0; i < 300; i++) {
        pthread_rwlock_rdlock(&table_lock);
        for (int j = 0; j < 16; j++)
            seen += table[j];
        pthread_rwlock_unlock(&table_lock);
    }
    return (void *)seen;
}

static void *writer(void *arg) {
    (void)arg;
    for (int i = 0; i < 100; i++) {
        pthread_rwlock_wrlock(&table_lock);
        table[i % 16]++;
        pthread_rwlock_unlock(&table_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t r[4], w;
    for (int i = 0; i < 4; i++)
        pthread_create(&r[i], NULL, reader, NULL);
    pthread_create(&w, NULL, writer, NULL);
    for (int i = 0; i < 4; i++)
        pthread_join(r[i], NULL);
    pthread_join(w, NULL);
    int total = 0;
    for (int j = 0; j < 16; j++)
        total += table[j];
    printf("total %d\n", total);
    return total == 100 ? 0 : 1;
}
