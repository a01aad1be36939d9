// The other `static int counter` (see watch_dup_a.c).
static volatile int counter;

__attribute__((noinline)) int bump_b(void) { return ++counter; }
