// A race on fields of a 48-byte struct: the reader reads `conn.id` and `conn.buf`
// without the lock the writer holds while it changes them. Recorded with
// `--watch conn.buf` / `--watch-hw conn.id`, the analyzer's race schedules name
// the fields as recordings name them (`conn+8`, `conn`), and `ordo replay` takes
// those names as they are, as well as `conn.buf` and `conn+8:8`.
#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

struct conn {
    long id;
    char *buf;
    int state;
    char pad[28];
};

static struct conn conn = { 1, "hello", 0, { 0 } };
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *writer(void *arg) {
    (void)arg;
    usleep(5000);
    pthread_mutex_lock(&lock);
    conn.id = 2;
    conn.buf = "bye";
    pthread_mutex_unlock(&lock);
    return NULL;
}

static void *reader(void *arg) {
    (void)arg;
    long id = *(volatile long *)&conn.id;
    char *buf = *(char *volatile *)&conn.buf;
    printf("%ld %s\n", id, buf);
    return NULL;
}

int main(void) {
    pthread_t w, r;
    pthread_create(&w, NULL, writer, NULL);
    pthread_create(&r, NULL, reader, NULL);
    pthread_join(w, NULL);
    pthread_join(r, NULL);
    return 0;
}
