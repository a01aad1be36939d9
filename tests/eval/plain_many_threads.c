// Bug: one thread's window against 60 others. The shutdown thread clears the
// `accepting` flag and then closes the queue; each of 60 clients checks the flag
// and then enqueues, without a lock. A client whose check falls before the flag
// is cleared and whose enqueue falls after the queue is closed loses its request.
// Shape: one of 60 clients' check before the shutdown's store, its enqueue after
// the shutdown's close (a stale use of the flag).
// Fails: abort() when a request arrives at a closed queue.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define CLIENTS 60

static volatile int accepting = 1;
static volatile int closed;
static volatile long queued;

__attribute__((noinline)) static void enqueue(void) {
    if (closed) {
        fprintf(stderr, "client: request sent to a closed queue\n");
        abort();
    }
    queued++;
}

static void *client(void *arg) {
    (void)arg;
    if (accepting) {
        for (volatile int work = 0; work < 50; work++) {}   // build the request
        enqueue();
    }
    return NULL;
}

static void *shutdown_thread(void *arg) {
    (void)arg;
    for (volatile int work = 0; work < 3000000; work++) {}   // serve a while
    accepting = 0;
    closed = 1;
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
