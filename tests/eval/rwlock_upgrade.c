// Bug: a read-then-write "upgrade" on a reader-writer lock. Each registrar looks
// its key up under the read lock and, when missing, inserts it under the write
// lock; between the two another registrar inserts the same key.
// Shape: check-then-act on an rwlock (rdlock section, then wrlock section), the
// other thread's read section between them.
// Fails: abort() in main when the key is registered twice.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static int keys[8];
static int nkeys;
static pthread_rwlock_t map_lock = PTHREAD_RWLOCK_INITIALIZER;

static int lookup(int key) {
    for (int i = 0; i < nkeys; i++)
        if (keys[i] == key) return 1;
    return 0;
}

static void *registrar(void *arg) {
    int key = (int)(long)arg;
    pthread_rwlock_rdlock(&map_lock);
    int found = lookup(key);
    pthread_rwlock_unlock(&map_lock);
    if (!found) {
        pthread_rwlock_wrlock(&map_lock);
        keys[nkeys++] = key;   // no second lookup
        pthread_rwlock_unlock(&map_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, registrar, (void *)7L);
    pthread_create(&b, NULL, registrar, (void *)7L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    if (nkeys != 1) {
        fprintf(stderr, "key 7 registered %d times\n", nkeys);
        abort();
    }
    printf("1 key\n");
    return 0;
}
