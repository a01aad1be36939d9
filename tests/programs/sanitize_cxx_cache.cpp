// C++ use after free for sanitizer builds: the reader looks a cache entry up under
// the cache mutex and uses it after releasing that mutex, without a reference; the
// evictor unlinks and deletes the entry in between. Naturally the evictor starts
// late and nothing goes wrong; with the evictor's section and exit between the
// reader's two sections, AddressSanitizer reports a heap-use-after-free.
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>

struct Entry {
    long reserved[2];  // allocators keep free-list data in a freed chunk's first bytes
    std::mutex m;
    int hits = 0;
};

std::mutex cache_mutex;
Entry *cache_entry;

static void reader() {
    Entry *e;
    {
        std::lock_guard<std::mutex> l(cache_mutex);
        e = cache_entry;
    }
    if (e == nullptr) return;
    std::lock_guard<std::mutex> g(e->m);
    e->hits++;
}

static void evictor() {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Entry *e;
    {
        std::lock_guard<std::mutex> l(cache_mutex);
        e = cache_entry;
        cache_entry = nullptr;
    }
    delete e;
}

int main() {
    cache_entry = new Entry;
    std::thread r(reader);
    std::thread v(evictor);
    r.join();
    v.join();
    std::puts("evicted");
    return 0;
}
