// Join of the wrong thread: main joins only the slow worker, then checks the
// total without a lock. A plain run passes because
// the fast worker finished long before; it fails when main ends before the fast
// worker's critical section.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t total_lock = PTHREAD_MUTEX_INITIALIZER;
static int total;

static void *work(void *arg) {
    usleep((int)(long)arg);
    pthread_mutex_lock(&total_lock);
    total++;
    pthread_mutex_unlock(&total_lock);
    return NULL;
}

int main(void) {
    pthread_t slow, fast;
    pthread_create(&slow, NULL, work, (void *)20000L);
    pthread_create(&fast, NULL, work, (void *)0L);
    pthread_join(slow, NULL);
    if (total != 2) {
        fprintf(stderr, "total %d, expected 2\n", total);
        return 1;
    }
    return 0;
}
