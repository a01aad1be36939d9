// A read of a partially written two-field struct: a writer moves a range with two
// plain stores (low bound, then high bound); a reader 100 ms later reads both bounds
// and checks the range's width. A read between the two stores sees the new low and
// the old high bound. With SAFE defined both sides hold a lock.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static struct {
    int lo;
    int hi;
} range = {0, 10};
#ifdef SAFE
static pthread_mutex_t range_lock = PTHREAD_MUTEX_INITIALIZER;
#define LOCK() pthread_mutex_lock(&range_lock)
#define UNLOCK() pthread_mutex_unlock(&range_lock)
#else
#define LOCK()
#define UNLOCK()
#endif

// Opaque to the compiler: keeps the two stores (and the two loads) separate.
__attribute__((noipa)) static int shift(int v) { return v + 10; }

static void *writer(void *arg) {
    (void)arg;
    LOCK();
    range.lo = shift(range.lo);
    range.hi = shift(range.hi);
    UNLOCK();
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    usleep(100000);
    LOCK();
    int lo = shift(range.lo);
    int hi = shift(range.hi);
    int width = hi - lo;
    UNLOCK();
    if (width != 10) {
        fprintf(stderr, "reader: torn range (low bound moved, high bound not yet): width %d\n", width);
        abort();
    }
    return NULL;
}

int main(void) {
    pthread_t w, r;
    pthread_create(&w, NULL, writer, NULL);
    pthread_create(&r, NULL, reader, NULL);
    pthread_join(w, NULL);
    pthread_join(r, NULL);
    return 0;
}
