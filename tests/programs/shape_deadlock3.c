// A lock-order cycle across three threads (a -> b, b -> c, c -> a) that a plain
// run survives: the threads start far apart. The candidate must pin every lock of
// the cycle (each thread's first lock before any thread's second) to deadlock.
#include <pthread.h>
#include <unistd.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_c = PTHREAD_MUTEX_INITIALIZER;
static int moved;

static void transfer(pthread_mutex_t *from, pthread_mutex_t *to) {
    pthread_mutex_lock(from);
    pthread_mutex_lock(to);
    moved++;
    pthread_mutex_unlock(to);
    pthread_mutex_unlock(from);
}

static void *ab(void *arg) { (void)arg; transfer(&lock_a, &lock_b); return NULL; }
static void *bc(void *arg) { (void)arg; usleep(5000); transfer(&lock_b, &lock_c); return NULL; }
static void *ca(void *arg) { (void)arg; usleep(10000); transfer(&lock_c, &lock_a); return NULL; }

int main(void) {
    pthread_t t[3];
    pthread_create(&t[0], NULL, ab, NULL);
    pthread_create(&t[1], NULL, bc, NULL);
    pthread_create(&t[2], NULL, ca, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    return 0;
}
