// Test program for `ordo record --pid` in process: a server-like process to attach
// to while it runs. Two workers take and release `work_lock` in a loop; a waiter
// sits in pthread_cond_wait on `go` the whole time; a holder takes `held_lock`
// before anyone attaches and releases it when told. Commands on stdin:
//   release   the holder releases `held_lock` (it took it at start-up)
//   block     a new thread takes and releases `own_lock`, prints "blocker TID",
//             then waits for `held_lock` (until `release`) and releases it
//   keep      a new thread locks and unlocks `keep_lock` 100 times at one call
//             site, locks it once more there, prints "keeper TID" and holds it
//             (sleeping, no pthread call) until `end`
//   end       everyone stops; prints "counter N" and exits 0 once all joined
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static pthread_mutex_t work_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t go_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t go = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t release_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t release_cond = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t own_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t keep_lock = PTHREAD_MUTEX_INITIALIZER;
static volatile int let_go;
static int stop, released;
static long counter, blocker_count;

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&work_lock);
        counter++;
        int done = stop;
        pthread_mutex_unlock(&work_lock);
        if (done) return NULL;
        usleep(50);
    }
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_mutex_lock(&go_lock);
    while (!stop) pthread_cond_wait(&go, &go_lock);
    pthread_mutex_unlock(&go_lock);
    return NULL;
}

static void *holder(void *arg) {
    (void)arg;
    pthread_mutex_lock(&held_lock);
    pthread_mutex_lock(&release_lock);
    while (!released) pthread_cond_wait(&release_cond, &release_lock);
    pthread_mutex_unlock(&release_lock);
    pthread_mutex_unlock(&held_lock);
    return NULL;
}

static void *blocker(void *arg) {
    (void)arg;
    pthread_mutex_lock(&own_lock);
    blocker_count++;
    pthread_mutex_unlock(&own_lock);
    printf("blocker %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    pthread_mutex_lock(&held_lock);
    blocker_count++;
    pthread_mutex_unlock(&held_lock);
    return NULL;
}

static void *keeper(void *arg) {
    (void)arg;
    for (int i = 0;; i++) {
        pthread_mutex_lock(&keep_lock);
        if (i == 100) break;
        pthread_mutex_unlock(&keep_lock);
    }
    printf("keeper %ld\n", (long)syscall(SYS_gettid));
    fflush(stdout);
    while (!let_go) usleep(1000);
    pthread_mutex_unlock(&keep_lock);
    return NULL;
}

int main(void) {
    pthread_t t[4], b, k;
    int blocking = 0, keeping = 0;
    pthread_create(&t[0], NULL, worker, NULL);
    pthread_create(&t[1], NULL, worker, NULL);
    pthread_create(&t[2], NULL, waiter, NULL);
    pthread_create(&t[3], NULL, holder, NULL);
    printf("ready\n");
    fflush(stdout);
    char line[64];
    while (fgets(line, sizeof line, stdin)) {
        if (strncmp(line, "release", 7) == 0) {
            pthread_mutex_lock(&release_lock);
            released = 1;
            pthread_cond_signal(&release_cond);
            pthread_mutex_unlock(&release_lock);
        } else if (strncmp(line, "block", 5) == 0 && !blocking) {
            blocking = 1;
            pthread_create(&b, NULL, blocker, NULL);
        } else if (strncmp(line, "keep", 4) == 0 && !keeping) {
            keeping = 1;
            pthread_create(&k, NULL, keeper, NULL);
        } else if (strncmp(line, "end", 3) == 0) {
            break;
        }
    }
    pthread_mutex_lock(&work_lock);
    stop = 1;
    pthread_mutex_unlock(&work_lock);
    pthread_mutex_lock(&go_lock);
    pthread_cond_broadcast(&go);
    pthread_mutex_unlock(&go_lock);
    pthread_mutex_lock(&release_lock);
    released = 1;
    pthread_cond_signal(&release_cond);
    pthread_mutex_unlock(&release_lock);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    if (blocking) pthread_join(b, NULL);
    let_go = 1;
    if (keeping) pthread_join(k, NULL);
    printf("counter %ld\n", counter);
    return 0;
}
