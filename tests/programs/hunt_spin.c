// A correct program that is hard on a scheduler that holds threads: one thread
// spins on pthread_mutex_trylock, one spins on a plain atomic flag (no pthread call
// while it waits), and two hand a token back and forth with a condition variable.
// Under PCT or a random walk every thread must still get to run: it exits 0 when
// all of them finished.
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t turn_changed = PTHREAD_COND_INITIALIZER;
static int turn;
static long counter;
static atomic_int flag;

static void *trylock_spinner(void *arg) {
    (void)arg;
    for (int i = 0; i < 200; i++) {
        while (pthread_mutex_trylock(&m) != 0) {
        }
        counter++;
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

static void *flag_spinner(void *arg) {
    (void)arg;
    while (!atomic_load(&flag)) {
    }
    pthread_mutex_lock(&m);
    counter++;
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *ping_pong(void *arg) {
    int me = (int)(long)arg;
    for (int i = 0; i < 50; i++) {
        pthread_mutex_lock(&m);
        while (turn != me)
            pthread_cond_wait(&turn_changed, &m);
        turn = 1 - me;
        counter++;
        pthread_cond_broadcast(&turn_changed);
        pthread_mutex_unlock(&m);
    }
    return NULL;
}

int main(void) {
    pthread_t t[4];
    pthread_create(&t[0], NULL, trylock_spinner, NULL);
    pthread_create(&t[1], NULL, flag_spinner, NULL);
    pthread_create(&t[2], NULL, ping_pong, (void *)0L);
    pthread_create(&t[3], NULL, ping_pong, (void *)1L);
    pthread_mutex_lock(&m);
    counter++;
    pthread_mutex_unlock(&m);
    atomic_store(&flag, 1);
    for (int i = 0; i < 4; i++)
        pthread_join(t[i], NULL);
    if (counter != 200 + 1 + 100 + 1) {
        fprintf(stderr, "counter %ld\n", counter);
        return 1;
    }
    printf("counter %ld\n", counter);
    return 0;
}
