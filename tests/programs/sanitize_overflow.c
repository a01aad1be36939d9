// Order-dependent signed overflow (for UndefinedBehaviorSanitizer builds): the
// resizer doubles the capacity, which is safe while it is small; the loader sets it
// to a large value. Run naturally the resizer goes first (the loader starts late);
// with the loader's section first the doubling overflows `int`. UBSan reports it
// and the program goes on and exits 0: only the report shows the bug.
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

static pthread_mutex_t capacity_lock = PTHREAD_MUTEX_INITIALIZER;
static int capacity = 1000;

static void *resizer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&capacity_lock);
    int c = capacity;
    capacity = c * 2;
    pthread_mutex_unlock(&capacity_lock);
    return NULL;
}

static void *loader(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_mutex_lock(&capacity_lock);
    capacity = INT_MAX / 2 + 1;
    pthread_mutex_unlock(&capacity_lock);
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, resizer, NULL);
    pthread_create(&b, NULL, loader, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("capacity %d\n", capacity);
    return 0;
}
