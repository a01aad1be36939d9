// A correct C++ handoff with std::condition_variable::wait(lock, predicate) and
// notify_one after the lock is released. `ordo analyze` must predict no lost
// wakeup (the predicate overload re-checks before it waits).
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

static std::mutex box_mutex;
static std::condition_variable box_changed;
static int box_value;
static bool box_full;

int main() {
    long sum = 0;
    std::thread producer([] {
        for (int i = 1; i <= 300; i++) {
            {
                std::unique_lock<std::mutex> lock(box_mutex);
                box_changed.wait(lock, [] { return !box_full; });
                box_value = i;
                box_full = true;
            }
            box_changed.notify_one();
        }
    });
    for (int i = 1; i <= 300; i++) {
        {
            std::unique_lock<std::mutex> lock(box_mutex);
            box_changed.wait(lock, [] { return box_full; });
            sum += box_value;
            box_full = false;
        }
        box_changed.notify_one();
    }
    producer.join();
    std::printf("sum %ld\n", sum);
    return sum == 300L * 301 / 2 ? 0 : 1;
}
