// Whether the consumer (thread 1) waits in pthread_cond_wait depends on timing:
// with argument "wait" the producer (thread 2) comes late and the consumer waits;
// with "nowait" the consumer comes late and finds the flag set. Either way the
// consumer then takes the lock a second time and reads `stage`. Exits 1 when that
// second section saw the producer's second one (stage 2).
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ready_cv = PTHREAD_COND_INITIALIZER;
static int ready, stage, seen;
static int consumer_late;

static void *consumer(void *arg) {
    (void)arg;
    if (consumer_late) usleep(20000);
    pthread_mutex_lock(&m);
    while (!ready) pthread_cond_wait(&ready_cv, &m);
    pthread_mutex_unlock(&m);
    pthread_mutex_lock(&m);
    seen = stage;
    pthread_mutex_unlock(&m);
    return NULL;
}

static void *producer(void *arg) {
    (void)arg;
    if (!consumer_late) usleep(20000);
    pthread_mutex_lock(&m);
    ready = 1;
    stage = 1;
    pthread_cond_signal(&ready_cv);
    pthread_mutex_unlock(&m);
    // Let a waiting consumer reacquire the mutex before the second section.
    usleep(10000);
    pthread_mutex_lock(&m);
    stage = 2;
    pthread_mutex_unlock(&m);
    return NULL;
}

int main(int argc, char **argv) {
    consumer_late = argc > 1 && strcmp(argv[1], "nowait") == 0;
    pthread_t c, p;
    pthread_create(&c, NULL, consumer, NULL);
    pthread_create(&p, NULL, producer, NULL);
    pthread_join(c, NULL);
    pthread_join(p, NULL);
    printf("consumer saw stage %d\n", seen);
    return seen == 2 ? 1 : 0;
}
