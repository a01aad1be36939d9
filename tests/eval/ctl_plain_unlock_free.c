// Control for plain_unlock_free: the reader reads the buffer while it still holds
// the lock, and the swapper frees the old buffer only after taking the lock again
// (no reader can be inside by then).
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
    if (*(volatile long *)&b->magic != LIVE) {
        fprintf(stderr, "reader: buffer used after it was freed\n");
        abort();
    }
    pthread_mutex_unlock(&lock);
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
    *(volatile long *)&old->magic = DEAD;
    free(old);
    pthread_mutex_unlock(&lock);
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
