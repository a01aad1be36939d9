// Memory-access instructions of many forms, in two threads, each run more times
// than a discovered site's trap budget: `ordo record --discover` runs every one of
// them out of line (its software breakpoint, then its budget spent and removed),
// and the program must compute exactly what it computes without it.
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

struct node { struct node *next; int32_t key; int16_t tag; uint8_t flag; double weight; };

static struct node nodes[64];
static volatile int64_t table[256];
static uint8_t bytes[512];
static double weights[32];
static atomic_long shared_count;
static long plain_count;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static uint64_t walk(struct node *n, int rounds) {
    uint64_t sum = 0;
    for (int r = 0; r < rounds; r++)
        for (struct node *p = n; p; p = p->next) {
            sum += (uint64_t)p->key * 3 + (uint64_t)(uint16_t)p->tag + p->flag;
            p->flag ^= 1;                      // byte read-modify-write
            sum += (uint64_t)(p->weight * 2.0);  // SSE load through a pointer
        }
    return sum;
}

__attribute__((noinline)) static uint64_t mix(int seed, int rounds) {
    uint64_t h = (uint64_t)seed;
    for (int i = 0; i < rounds; i++) {
        int j = (int)(h % 256);
        table[j] += (int64_t)h;                // indexed read-modify-write, RIP-relative base
        h = h * 6364136223846793005ULL + (uint64_t)table[(j + 7) & 255];
        bytes[i & 511] = (uint8_t)(bytes[(i * 3) & 511] + (uint8_t)h);
        weights[i & 31] += 0.5;                // SSE read-modify-write on a global
        int64_t old = table[j & 15];
        if (old > 0)
            table[j & 15] = old - 1;           // a conditional store
        atomic_fetch_add(&shared_count, 1);   // lock xadd
        long expected = atomic_load(&shared_count);
        atomic_compare_exchange_strong(&shared_count, &expected, expected); // lock cmpxchg
    }
    return h;
}

static void *worker(void *arg) {
    int id = (int)(intptr_t)arg;
    uint64_t h = mix(id + 1, 3000);
    pthread_mutex_lock(&lock);
    plain_count += (long)(h & 0xff);
    pthread_mutex_unlock(&lock);
    return (void *)(uintptr_t)walk(&nodes[id], 40);
}

int main(void) {
    for (int i = 0; i < 64; i++) {
        nodes[i].next = (i % 32 == 31) ? NULL : &nodes[i + 1];
        nodes[i].key = i * 7;
        nodes[i].tag = (int16_t)(i - 20);
        nodes[i].flag = (uint8_t)(i & 1);
        nodes[i].weight = i / 4.0;
    }
    memset(bytes, 3, sizeof bytes);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(intptr_t)(i * 32));
    uint64_t sum = 0;
    for (int i = 0; i < 2; i++) {
        void *r;
        pthread_join(t[i], &r);
        sum += (uint64_t)(uintptr_t)r;
    }
    uint64_t check = 0;
    for (int i = 0; i < 256; i++) check = check * 31 + (uint64_t)table[i];
    for (int i = 0; i < 512; i++) check = check * 31 + bytes[i];
    for (int i = 0; i < 32; i++) check += (uint64_t)weights[i];
    // Both threads' table updates interleave: only what is independent of their
    // order is printed (their walks, the per-index byte pattern of thread-local
    // parts, the atomic count); the rest must at least be computed.
    printf("walk %llu count %ld check-computed %d\n", (unsigned long long)sum,
           (long)atomic_load(&shared_count), check != 1);
    return 0;
}
