// Bug: lock-order deadlock across three threads. Three stations each move a token
// from their own bin to the next one's, locking their bin first: bins 0->1, 1->2,
// 2->0 form a cycle no pair of threads shows.
// Shape: a 3-cycle (each thread's first lock before the previous thread's second).
// Fails: deadlock (the program hangs).
#include <pthread.h>
#include <stdio.h>

#define STATIONS 3

static pthread_mutex_t bin_lock[STATIONS] = {
    PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
static int tokens[STATIONS] = {5, 5, 5};

static void *station(void *arg) {
    long me = (long)arg, next = (me + 1) % STATIONS;
    pthread_mutex_lock(&bin_lock[me]);
    pthread_mutex_lock(&bin_lock[next]);
    tokens[me] -= 1;
    tokens[next] += 1;
    pthread_mutex_unlock(&bin_lock[next]);
    pthread_mutex_unlock(&bin_lock[me]);
    return NULL;
}

int main(void) {
    pthread_t t[STATIONS];
    for (long i = 0; i < STATIONS; i++) pthread_create(&t[i], NULL, station, (void *)i);
    for (int i = 0; i < STATIONS; i++) pthread_join(t[i], NULL);
    printf("tokens %d %d %d\n", tokens[0], tokens[1], tokens[2]);
    return 0;
}
