// Test program for variable watches: known numbers of reads and writes of globals.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t hits_lock = PTHREAD_MUTEX_INITIALIZER;
volatile long hits;                        // read then written under the lock
struct config { volatile int a; volatile int b; } cfg;  // field b watched alone
long total;                                // atomic counter
volatile int racy_count;                   // incremented without (or with) a lock
static int rounds, use_lock;

static void *plain(void *arg) {
    for (int i = 0; i < rounds; i++) {
        pthread_mutex_lock(&hits_lock);
        long v = hits;
        hits = v + 1;
        pthread_mutex_unlock(&hits_lock);
    }
    return NULL;
}

static void *field(void *arg) {
    for (int i = 0; i < rounds; i++) {
        cfg.a = i;
        cfg.b = 1000 + i;
    }
    return NULL;
}

static void *atomic(void *arg) {
    for (int i = 0; i < rounds; i++) __atomic_fetch_add(&total, 1, __ATOMIC_SEQ_CST);
    return NULL;
}

static void *racy(void *arg) {
    for (int i = 0; i < rounds; i++) {
        if (use_lock) pthread_mutex_lock(&hits_lock);
        int v = racy_count;
        racy_count = v + 1;
        if (use_lock) pthread_mutex_unlock(&hits_lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: %s plain|field|atomic|racy|locked THREADS ROUNDS\n", argv[0]);
        return 2;
    }
    int threads = atoi(argv[2]);
    rounds = atoi(argv[3]);
    void *(*body)(void *) = NULL;
    if (!strcmp(argv[1], "plain")) body = plain;
    else if (!strcmp(argv[1], "field")) body = field;
    else if (!strcmp(argv[1], "atomic")) body = atomic;
    else if (!strcmp(argv[1], "racy")) body = racy;
    else if (!strcmp(argv[1], "locked")) { body = racy; use_lock = 1; }
    else return 2;
    pthread_t t[16];
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, body, NULL);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    printf("hits %ld\ncfg %d %d\ntotal %ld\nracy %d\n", hits, cfg.a, cfg.b, total, racy_count);
    printf("hits_addr %p\ncfg_addr %p\ntotal_addr %p\nracy_addr %p\n", (void *)&hits, (void *)&cfg, (void *)&total, (void *)&racy_count);
    return 0;
}
