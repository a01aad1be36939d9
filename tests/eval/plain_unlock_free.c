// Bug: use after an unlock that another thread frees. The reader copies the
// current buffer pointer under the lock and reads through it after unlocking; the
// swapper installs a new buffer under the lock and, after unlocking, poisons and
// frees the old one (no reference counting).
// Shape: the swapper's store of the new pointer, and its free before it exits,
// between the reader's load of the old pointer and its use (a stale use).
// Fails: abort() when the reader finds the poison.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE 0x5afe
#define DEAD 0xdead

struct buffer { long reserved[2]; long magic; char data[48]; };

static struct buffer *current;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *reader(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    struct buffer *b = current;
    pthread_mutex_unlock(&lock);
    if (*(volatile long *)&b->magic != LIVE) {
        fprintf(stderr, "reader: buffer used after it was freed\n");
        abort();
    }
    return NULL;
}

static void *swapper(void *arg) {
    (void)arg;
    for (volatile int work = 0; work < 200000; work++) {}
    struct buffer *fresh = calloc(1, sizeof *fresh);
    fresh->magic = LIVE;
    pthread_mutex_lock(&lock);
    struct buffer *old = current;
    current = fresh;
    pthread_mutex_unlock(&lock);
    *(volatile long *)&old->magic = DEAD;
    free(old);
    return NULL;
}

int main(void) {
    current = calloc(1, sizeof *current);
    current->magic = LIVE;
    pthread_t r, s;
    pthread_create(&r, NULL, reader, NULL);
    pthread_create(&s, NULL, swapper, NULL);
    pthread_join(r, NULL);
    pthread_join(s, NULL);
    free(current);
    return 0;
}
