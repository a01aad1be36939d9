// Bug: lost update. Each worker reads the hit counter under the lock, increments it
// outside, and writes it back in a second section: the classic
// locked-read, unlocked-gap, locked-write pattern.
// Shape: the second worker's read section between the first worker's read and
// write sections (two orderings).
// Fails: abort() in main when the final count is not 2.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static long hits;
static char last_hit[32];
static pthread_mutex_t hits_lock = PTHREAD_MUTEX_INITIALIZER;

static void *count_hit(void *arg) {
    long id = (long)arg;
    char text[32];
    snprintf(text, sizeof text, "hit by %ld", id);
    pthread_mutex_lock(&hits_lock);
    long v = hits;
    pthread_mutex_unlock(&hits_lock);
    v += 1;
    pthread_mutex_lock(&hits_lock);
    hits = v;
    snprintf(last_hit, sizeof last_hit, "%s", text);
    pthread_mutex_unlock(&hits_lock);
    return NULL;
}

int main(void) {
    pthread_t t[2];
    for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, count_hit, (void *)i);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    if (hits != 2) {
        fprintf(stderr, "lost update: %ld hits counted, 2 made\n", hits);
        abort();
    }
    printf("%ld hits, last: %s\n", hits, last_hit);
    return 0;
}
