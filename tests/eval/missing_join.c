// Bug: missing join. main starts a checksum worker, detaches it ("it is quick"),
// does its own start-up work and then reads the checksum without joining.
// Shape: thread lifetime: main's section after pthread_create must come before the
// worker's only section (the worker delayed past main's check).
// Fails: abort() in main when the checksum is not there yet.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static unsigned char data[256];
static unsigned checksum;
static int checksum_ready;
static pthread_mutex_t result_lock = PTHREAD_MUTEX_INITIALIZER;

static void *compute_checksum(void *arg) {
    (void)arg;
    unsigned sum = 0;
    for (int i = 0; i < 256; i++) sum = sum * 31 + data[i];
    pthread_mutex_lock(&result_lock);
    checksum = sum;
    checksum_ready = 1;
    pthread_mutex_unlock(&result_lock);
    return NULL;
}

int main(void) {
    for (int i = 0; i < 256; i++) data[i] = (unsigned char)(i * 7);
    pthread_t w;
    pthread_create(&w, NULL, compute_checksum, NULL);
    pthread_detach(w);
    // main's own start-up work, "surely longer than the checksum": some
    // computation and a short wait for I/O (a config read, modelled as 1 ms)
    unsigned long acc = 0;
    for (volatile int i = 0; i < 20000; i++) acc += (unsigned long)i * i;
    usleep(1000);
    pthread_mutex_lock(&result_lock);
    if (!checksum_ready) {
        fprintf(stderr, "main: read the checksum before the worker computed it\n");
        abort();
    }
    printf("checksum %08x (%lu)\n", checksum, acc % 10);
    pthread_mutex_unlock(&result_lock);
    return 0;
}
