// Atomics as synchronization. Modes:
//   refcount THREADS: a correct reference-counted object. Each thread reads the
//     payload, then drops its reference with an atomic fetch_sub (lock xadd); the
//     thread that drops the last one "frees" it (writes the payload). The
//     release/acquire order of the count makes that write race-free.
//   counter THREADS ROUNDS: threads bump one std::atomic<int> (lock add / xadd):
//     atomic read-modify-writes, never a race with each other.
//   mixed ROUNDS: one thread bumps a plain `long` with atomic builtins (lock add),
//     another overwrites it with a plain store: a race between an atomic and a
//     plain access. (A plain store into a std::atomic through a cast would count
//     as atomic: every access to a variable of atomic type does, because x86
//     release stores are plain moves too.)
//   publish: a flag published with a release store (a plain mov on x86) and read
//     with acquire loads: the payload written before it is read race-free.
#include <pthread.h>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct Object {
    std::atomic<int> refs;
    long payload;
};
Object object;
std::atomic<int> counter;
std::atomic<bool> ready;
long message;
long mixed_total;
static int rounds = 1000;

__attribute__((noinline)) void release() {
    if (object.refs.fetch_sub(1, std::memory_order_acq_rel) == 1) object.payload = -1;
}

static void *user(void *) {
    long seen = object.payload;
    if (seen != 42) std::printf("bad payload %ld\n", seen);
    release();
    return nullptr;
}

static void *bump(void *) {
    for (int i = 0; i < rounds; i++) counter.fetch_add(1);
    return nullptr;
}

static void *bump_mixed(void *) {
    for (int i = 0; i < rounds; i++) __atomic_fetch_add(&mixed_total, 1, __ATOMIC_SEQ_CST);
    return nullptr;
}

static void *clobber(void *) {
    for (int i = 0; i < rounds; i++) *(volatile long *)&mixed_total = 0;
    return nullptr;
}

static void *consume(void *) {
    while (!ready.load(std::memory_order_acquire)) {
    }
    std::printf("message %ld\n", message);
    return nullptr;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "refcount";
    int nthreads = argc > 2 ? atoi(argv[2]) : 3;
    if (argc > 3) rounds = atoi(argv[3]);
    if (nthreads < 1 || nthreads > 16) nthreads = 3;
    pthread_t threads[16];
    if (!strcmp(mode, "refcount")) {
        object.payload = 42;
        object.refs.store(nthreads);
        for (int t = 0; t < nthreads; t++) pthread_create(&threads[t], nullptr, user, nullptr);
        for (int t = 0; t < nthreads; t++) pthread_join(threads[t], nullptr);
        std::printf("refs %d payload %ld\n", object.refs.load(), object.payload);
    } else if (!strcmp(mode, "counter")) {
        for (int t = 0; t < nthreads; t++) pthread_create(&threads[t], nullptr, bump, nullptr);
        for (int t = 0; t < nthreads; t++) pthread_join(threads[t], nullptr);
        std::printf("counter %d\n", counter.load());
    } else if (!strcmp(mode, "mixed")) {
        pthread_create(&threads[0], nullptr, bump_mixed, nullptr);
        pthread_create(&threads[1], nullptr, clobber, nullptr);
        pthread_join(threads[0], nullptr);
        pthread_join(threads[1], nullptr);
        std::printf("mixed %ld\n", mixed_total);
    } else {
        pthread_create(&threads[0], nullptr, consume, nullptr);
        message = 7;
        ready.store(true, std::memory_order_release);
        pthread_join(threads[0], nullptr);
    }
    return 0;
}
