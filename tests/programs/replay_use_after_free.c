// Use after free: the reader looks the connection up under the table lock but uses
// it after releasing that lock, without holding a reference; the closer unlinks the
// connection, destroys its lock and frees it in between. Aborts when the reader finds
// a dead connection.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define ALIVE 0x600dc0de
#define DEAD 0xdeadbeef

struct conn {
    long reserved[2];   // malloc's free list reuses the first 16 bytes of a chunk
    unsigned magic;
    pthread_mutex_t lock;
    long bytes;
};

static struct conn *table_entry;
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

static void *reader(void *arg) {
    (void)arg;
    pthread_mutex_lock(&table_lock);
    struct conn *c = table_entry;
    pthread_mutex_unlock(&table_lock);
    if (c == NULL) return NULL;
    pthread_mutex_lock(&c->lock);
    if (c->magic != ALIVE) {
        fprintf(stderr, "reader: connection used after it was freed\n");
        abort();
    }
    c->bytes += 100;
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

static void *closer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&table_lock);
    struct conn *c = table_entry;
    table_entry = NULL;
    pthread_mutex_unlock(&table_lock);
    pthread_mutex_lock(&c->lock);
    c->magic = DEAD;
    pthread_mutex_unlock(&c->lock);
    pthread_mutex_destroy(&c->lock);
    free(c);
    return NULL;
}

int main(void) {
    struct conn *c = calloc(1, sizeof *c);
    c->magic = ALIVE;
    pthread_mutex_init(&c->lock, NULL);
    table_entry = c;
    pthread_t r, k;
    pthread_create(&r, NULL, reader, NULL);
    usleep(20000);
    pthread_create(&k, NULL, closer, NULL);
    pthread_join(r, NULL);
    pthread_join(k, NULL);
    printf("closed\n");
    return 0;
}
