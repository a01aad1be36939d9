// A global struct whose fields are updated by two threads, and a global array
// indexed at run time. Watching `stats+8:4` (hits) must find only the accesses to
// that field; watching `slots+8:4` (slots[2]) must find the indexed accesses, which
// the compiler makes through a register loaded with the array's address.
// Usage: watch_field [ROUNDS]   (default 3)
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct stats {
    long total;   // offset 0
    int hits;     // offset 8
    int misses;   // offset 12
    long last;    // offset 16
};

struct stats stats;
int slots[8];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int rounds = 3;

__attribute__((noinline)) void record_hit(long v) {
    stats.total += v;   // total: read-modify-write
    stats.hits++;       // hits: read-modify-write
    stats.last = v;     // last: write
}

__attribute__((noinline)) void record_miss(void) { stats.misses++; }

__attribute__((noinline)) int hit_count(void) { return stats.hits; }

__attribute__((noinline)) void bump_slot(int i) { slots[i & 7]++; }

__attribute__((noinline)) int read_slot(int i) { return slots[i & 7]; }

// Takes a pointer: accesses through it are not statically reachable.
__attribute__((noinline)) void clear_stats(struct stats *s) { s->hits = 0; s->misses = 0; }

static void *worker(void *arg) {
    int id = (int)(long)arg;
    for (int i = 0; i < rounds; i++) {
        pthread_mutex_lock(&lock);
        if ((i + id) % 2) record_hit(id * 10 + i); else record_miss();
        bump_slot(id + i);
        pthread_mutex_unlock(&lock);
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) rounds = atoi(argv[1]);
    clear_stats(&stats);
    pthread_t threads[2];
    for (long t = 0; t < 2; t++) pthread_create(&threads[t], NULL, worker, (void *)(t + 1));
    for (int t = 0; t < 2; t++) pthread_join(threads[t], NULL);
    printf("hits %d misses %d total %ld last %ld slot2 %d\n", hit_count(), stats.misses, stats.total, stats.last,
           read_slot(2));
    return 0;
}
