// Bug: use after free across threads. The reader looks the cache entry up under
// the cache lock but keeps using it after releasing that lock without taking a
// reference; the evictor unlinks the entry, poisons and frees it in between.
// Shape: the evictor's cache section between the reader's cache section and its
// stats section, and the evictor's free (followed by its stats section) before the
// reader's stats section.
// Fails: abort() when the reader finds the poison canary in the entry.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LIVE 0x11feca5e
#define DEAD 0xdeadbeef

struct entry {
    long reserved[2];   // malloc's free list reuses the first 16 bytes of a chunk
    unsigned magic;
    char value[32];
};

static struct entry *cache_slot;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t stats_lock = PTHREAD_MUTEX_INITIALIZER;
static long lookups, evictions;

static void *reader(void *arg) {
    (void)arg;
    pthread_mutex_lock(&cache_lock);
    struct entry *e = cache_slot;
    pthread_mutex_unlock(&cache_lock);
    if (e == NULL) return NULL;
    pthread_mutex_lock(&stats_lock);
    if (e->magic != LIVE) {
        fprintf(stderr, "reader: cache entry used after it was freed\n");
        abort();
    }
    lookups += strlen(e->value);
    pthread_mutex_unlock(&stats_lock);
    return NULL;
}

static void *evictor(void *arg) {
    (void)arg;
    pthread_mutex_lock(&cache_lock);
    struct entry *e = cache_slot;
    cache_slot = NULL;
    pthread_mutex_unlock(&cache_lock);
    if (e != NULL) {
        *(volatile unsigned *)&e->magic = DEAD;   // poison (volatile: a store right before free() is otherwise dropped)
        free(e);
    }
    pthread_mutex_lock(&stats_lock);
    evictions++;
    pthread_mutex_unlock(&stats_lock);
    return NULL;
}

int main(void) {
    struct entry *e = calloc(1, sizeof *e);
    e->magic = LIVE;
    strcpy(e->value, "cached value");
    cache_slot = e;
    pthread_t r, k;
    pthread_create(&r, NULL, reader, NULL);
    pthread_create(&k, NULL, evictor, NULL);
    pthread_join(r, NULL);
    pthread_join(k, NULL);
    printf("%ld lookups, %ld evictions\n", lookups, evictions);
    return 0;
}
