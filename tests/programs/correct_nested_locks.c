/* Correct nested locking: three threads take up to three locks, always in the
 * same global order (a, then b, then c), in different combinations. No lock-order
 * cycle exists, so `ordo analyze` must predict no deadlock. */
#include <pthread.h>
#include <stdio.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_c = PTHREAD_MUTEX_INITIALIZER;
static long in_a, in_b, in_c;

static void *all_three(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&lock_a);
        pthread_mutex_lock(&lock_b);
        pthread_mutex_lock(&lock_c);
        in_a++, in_b++, in_c++;
        pthread_mutex_unlock(&lock_c);
        pthread_mutex_unlock(&lock_b);
        pthread_mutex_unlock(&lock_a);
    }
    return NULL;
}

static void *a_then_c(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&lock_a);
        pthread_mutex_lock(&lock_c);
        in_a++, in_c++;
        pthread_mutex_unlock(&lock_c);
        pthread_mutex_unlock(&lock_a);
    }
    return NULL;
}

static void *b_then_c(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        pthread_mutex_lock(&lock_b);
        pthread_mutex_lock(&lock_c);
        in_b++, in_c++;
        pthread_mutex_unlock(&lock_c);
        pthread_mutex_unlock(&lock_b);
    }
    return NULL;
}

int main(void) {
    pthread_t t[3];
    pthread_create(&t[0], NULL, all_three, NULL);
    pthread_create(&t[1], NULL, a_then_c, NULL);
    pthread_create(&t[2], NULL, b_then_c, NULL);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    printf("%ld %ld %ld\n", in_a, in_b, in_c);
    return in_c == 600 ? 0 : 1;
}
