// Bug: double close in a tool whose normal exit status is 3 ("finished, some
// records skipped": its input always has some). Each of two import workers closes
// the shared output when it finishes: it checks `open` in one section, flushes, and
// closes in a second section; when both check before either closes, the output is
// closed twice.
// Shape: check-then-act across two sections (the other worker's check between a
// worker's check and close); the oracle must expect exit status 3.
// Fails: abort() on the second close (normal runs exit 3).
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct output {
    int open;
    long records;
};

static struct output out = {1, 0};
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void *import(void *arg) {
    long n = (long)arg;
    pthread_mutex_lock(&out_lock);
    out.records += n;
    int still_open = out.open;
    pthread_mutex_unlock(&out_lock);
    if (still_open) {
        pthread_mutex_lock(&out_lock);
        if (!out.open) {
            fprintf(stderr, "import: output closed twice\n");
            abort();
        }
        out.open = 0;
        pthread_mutex_unlock(&out_lock);
    }
    return NULL;
}

int main(void) {
    pthread_t a, b;
    pthread_create(&a, NULL, import, (void *)40L);
    pthread_create(&b, NULL, import, (void *)60L);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    printf("imported %ld records, 3 skipped\n", out.records);
    return 3;   // some records were skipped: the normal outcome
}
