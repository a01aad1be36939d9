// Two files each with a `static int counter` (this one and watch_dup_b.c), and
// C11 atomics: `--watch=counter` is ambiguous, `watch_dup_a.c:counter` is not;
// `_Atomic` and `atomic_int` variables are atomic, a plain struct's `_Atomic`
// field too.
#include <stdatomic.h>
#include <stdio.h>

static volatile int counter;
_Atomic long c11_total;
atomic_int c11_flag;
struct stats {
    int plain;
    _Atomic int live;
    struct {
        short lo, hi;
    } range;
    int history[5];
} stats;
struct stats *stats_ptr = &stats;

int bump_b(void);

__attribute__((noinline)) void bump_a(void) { counter++; }

int main(void) {
    bump_a();
    atomic_fetch_add(&c11_total, 2);
    atomic_store(&c11_flag, 1);
    stats.live = 3;
    stats.history[3] = stats_ptr->range.hi;
    printf("%d %d %ld\n", counter, bump_b(), (long)c11_total);
    return 0;
}
