// C++ statics by qualified source name: a namespaced global, a static data member,
// and two variables of the same short name in different namespaces.
#include <cstdio>

namespace app {
struct Pool {
    static int live;
};
int Pool::live;
namespace cfg {
volatile long level;
}
}  // namespace app

namespace a { volatile int count; }
namespace b { volatile int count; }

__attribute__((noinline)) void grow() { app::Pool::live++; }
__attribute__((noinline)) void set_level(long v) { app::cfg::level = v; }

int main() {
    grow();
    set_level(3);
    a::count = 1;
    b::count = 2;
    std::printf("%d %ld %d %d\n", app::Pool::live, app::cfg::level, a::count, b::count);
    return 0;
}
