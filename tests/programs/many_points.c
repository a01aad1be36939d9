// Six plain stores in one thread and six plain loads in another, one statement
// each: a schedule alternating them names six program points in each thread, more
// than x86's four debug registers (the agent gates the rest by software
// breakpoints). Exits with how many of the stores the reader saw: 6 in a plain run
// (the writer is long done when the reader starts).
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

static volatile int a, b, c, d, e, f;
static volatile int seen;

static void *writer(void *arg) {
    (void)arg;
    a = 1;
    b = 1;
    c = 1;
    d = 1;
    e = 1;
    f = 1;
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    usleep(20000);
    int s = a;
    s += b;
    s += c;
    s += d;
    s += e;
    s += f;
    seen = s;
    return NULL;
}

int main(void) {
    pthread_t w, r;
    pthread_create(&w, NULL, writer, NULL);
    pthread_create(&r, NULL, reader, NULL);
    pthread_join(w, NULL);
    pthread_join(r, NULL);
    return seen;
}
