// Ends the way its arguments say, after a worker thread has run, so `ordo replay`'s
// oracle can be checked against every kind of ending:
//   exit N         exit with status N
//   signal N       kill itself with signal N
//   stderr TEXT    print TEXT on stderr, exit 0
//   deadlock       lock a mutex it already holds (hangs forever)
//   ctor-abort     abort in a constructor, before main
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;
static int work_done;

__attribute__((constructor)) static void before_main(void) {
    const char *mode = getenv("VERDICT_OUTCOMES_CTOR_ABORT");
    if (mode != NULL) abort();
}

static void *worker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&work_lock);
    work_done++;
    pthread_mutex_unlock(&work_lock);
    return NULL;
}

int main(int argc, char **argv) {
    pthread_t t;
    pthread_create(&t, NULL, worker, NULL);
    pthread_join(t, NULL);
    if (argc < 2) return 0;
    if (strcmp(argv[1], "exit") == 0 && argc > 2) return atoi(argv[2]);
    if (strcmp(argv[1], "signal") == 0 && argc > 2) raise(atoi(argv[2]));
    if (strcmp(argv[1], "stderr") == 0 && argc > 2) fprintf(stderr, "%s\n", argv[2]);
    if (strcmp(argv[1], "deadlock") == 0) {
        pthread_mutex_lock(&work_lock);
        pthread_mutex_lock(&work_lock);
    }
    return 0;
}
