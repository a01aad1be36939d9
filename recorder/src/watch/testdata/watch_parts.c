// Parts of variables for `Resolver::part_name`: nested structs, arrays, an
// anonymous union, a mutex member, padding.
#include <pthread.h>

struct inner { char tag; /* 3 bytes of padding */ int count; };
struct conn {
    long id;
    char *buf;
    struct inner in;
    int slots[4];
    union { long as_long; int as_int; };
    pthread_mutex_t lock;
};
struct conn conns[2];
long plain;

int main(void) { return (int)(conns[1].in.count + plain); }
