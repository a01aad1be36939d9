// A singleton published through std::atomic, used after it was freed: `get()`
// creates the instance under a mutex and returns it; `reset()` swaps it out under
// the same mutex and deletes it. A user that calls `get()` and then uses the
// instance after `get()` unlocked races with a reset whose whole critical section
// falls in between: the virtual call goes through a freed object (SIGSEGV: the
// allocator overwrote its vtable pointer). An ASan build reports a
// heap-use-after-free READ.
#include <atomic>
#include <cstdio>
#include <mutex>
#include <thread>
#include <unistd.h>

struct Config {
    virtual ~Config() = default;
    virtual int value() const { return 42; }
};

static std::atomic<Config *> instance{nullptr};
static std::mutex instance_lock;

__attribute__((noinline)) Config *get() {
    std::lock_guard<std::mutex> guard(instance_lock);
    Config *c = instance.load(std::memory_order_acquire);
    if (c == nullptr) {
        c = new Config;
        instance.store(c, std::memory_order_release);
    }
    return c;
}

__attribute__((noinline)) void reset() {
    std::lock_guard<std::mutex> guard(instance_lock);
    delete instance.exchange(nullptr, std::memory_order_acq_rel);
}

int main() {
    std::thread user([] {
        Config *c = get();
        std::printf("value %d\n", c->value()); // the use, after get() unlocked
    });
    std::thread resetter([] {
        usleep(100000);
        reset();
    });
    user.join();
    resetter.join();
    return 0;
}
