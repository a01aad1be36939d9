// Variables named the way `nm -C` prints them, for `--watch` and `--watch-hw`:
// an anonymous namespace, a template instance's static member, a static inside
// an operator, a static inside a template function (`tally<int>()::count`, no
// return type in front, as `nm -C` prints it), struct fields (`cfg.inner.count`, `cfg.slots[2]`) and a field
// reached through a global pointer that moves between two objects
// (`current->users`). Each thread does ROUNDS rounds under one mutex (or, with
// `unlocked`, without it: every watched variable races).
// Usage: watch_names [THREADS] [ROUNDS] [unlocked]   (defaults 2 and 100)
#include <pthread.h>
#include <cstdio>
#include <cstdlib>

namespace {
volatile long hits;
}

namespace ns {
template <typename T, int N>
struct holder {
    static volatile T value;
};
template <typename T, int N>
volatile T holder<T, N>::value;
template struct holder<int, 3>;

struct V {
    int x;
};
__attribute__((noinline)) V operator+(V a, V b) {
    static volatile int calls;
    calls = calls + 1;
    return V{a.x + b.x};
}
}  // namespace ns

template <typename T>
__attribute__((noinline)) void tally() {
    static volatile T count;
    count = count + 1;
}

struct Config {
    int flags;
    struct {
        long total;
        volatile int count;
    } inner;
    volatile int slots[4];
};
Config cfg;

struct Node {
    long id;
    volatile int users;
};
Node first_node = {1, 0}, second_node = {2, 0};
Node *volatile current = &first_node;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int rounds = 100;
static bool unlocked;

__attribute__((noinline)) void use_current() { current->users = current->users + 1; }

static void *worker(void *) {
    for (int i = 0; i < rounds; i++) {
        if (!unlocked) pthread_mutex_lock(&lock);
        hits = hits + 1;
        tally<int>();
        ns::holder<int, 3>::value = ns::holder<int, 3>::value + 1;
        ns::V sum = ns::V{i} + ns::V{1};
        cfg.inner.count = cfg.inner.count + sum.x - i;
        cfg.slots[2] = cfg.slots[2] + 1;
        use_current();
        // Halfway through, the pointer moves to the other node.
        if (i == rounds / 2 - 1 && current == &first_node) current = &second_node;
        if (!unlocked) pthread_mutex_unlock(&lock);
    }
    return nullptr;
}

int main(int argc, char **argv) {
    int nthreads = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2) rounds = atoi(argv[2]);
    unlocked = argc > 3 && argv[3][0] == 'u';
    if (nthreads < 1 || nthreads > 16) nthreads = 2;
    pthread_t threads[16];
    for (int t = 0; t < nthreads; t++) pthread_create(&threads[t], nullptr, worker, nullptr);
    for (int t = 0; t < nthreads; t++) pthread_join(threads[t], nullptr);
    std::printf("hits %ld value %d count %d slot %d users %d %d\n", hits, ns::holder<int, 3>::value,
                cfg.inner.count, cfg.slots[2], first_node.users, second_node.users);
    std::printf("first_node_addr %p second_node_addr %p\n", (void *)&first_node, (void *)&second_node);
    return 0;
}
