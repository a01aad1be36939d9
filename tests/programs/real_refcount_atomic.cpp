// A correct reference-counted object using std::atomic: each worker takes a
// reference, counts its visit under a mutex, reads the payload, and drops its
// reference with an acq_rel fetch_sub; the thread that drops the last one deletes
// the object. Every order of the workers is correct: no race, no use after free.
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>
#include <vector>

struct Object {
    std::atomic<int> refs{1};
    long payload = 42;
};

static Object *object;
static std::atomic<int> *refs_of_object;
static std::mutex visits_lock;
static long visits;

static void drop(Object *o) {
    if (o->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete o;
}

int main() {
    object = new Object;
    refs_of_object = &object->refs;
    std::vector<std::thread> workers;
    for (int i = 0; i < 3; i++) {
        object->refs.fetch_add(1, std::memory_order_relaxed);
        Object *mine = object;
        workers.emplace_back([mine] {
            {
                std::lock_guard<std::mutex> guard(visits_lock);
                visits++;
            }
            if (mine->payload != 42) std::abort();
            drop(mine);
        });
    }
    drop(object);
    for (auto &w : workers) w.join();
    std::printf("visits %ld\n", visits);
    return 0;
}
