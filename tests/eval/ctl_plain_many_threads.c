// Control for plain_many_threads: the flag and the queue share one lock, so a
// client that saw the queue accepting enqueues before it can close.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define CLIENTS 60

static int accepting = 1;
static int closed;
static long queued;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *client(void *arg) {
    (void)arg;
    pthread_mutex_lock(&lock);
    if (accepting) {
        if (closed) {
            fprintf(stderr, "client: request sent to a closed queue\n");
            abort();
        }
        queued++;
    }
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void *shutdown_thread(void *arg) {
    (void)arg;
    for (volatile int work = 0; work < 3000000; work++) {}
    pthread_mutex_lock(&lock);
    accepting = 0;
    closed = 1;
    pthread_mutex_unlock(&lock);
    return NULL;
}

int main(void) {
    pthread_t s, c[CLIENTS];
    pthread_create(&s, NULL, shutdown_thread, NULL);
    for (int i = 0; i < CLIENTS; i++) pthread_create(&c[i], NULL, client, NULL);
    for (int i = 0; i < CLIENTS; i++) pthread_join(c[i], NULL);
    pthread_join(s, NULL);
    return 0;
}
