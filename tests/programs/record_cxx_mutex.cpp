// C++ std::mutex under contention: std::mutex calls pthread_mutex_lock/unlock.
#include <cstdio>
#include <mutex>
#include <thread>
#include <vector>

static std::mutex counter_mutex;
static long counter;

int main(int argc, char **argv) {
    int threads = 4, iterations = 2000;
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; t++)
        workers.emplace_back([&] {
            for (int i = 0; i < iterations; i++) {
                std::lock_guard<std::mutex> guard(counter_mutex);
                counter++;
            }
        });
    for (auto &w : workers) w.join();
    std::printf("mutex %p\ncounter %ld\n", (void *)&counter_mutex, counter);
    return counter == (long)threads * iterations ? 0 : 1;
}
