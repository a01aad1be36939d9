// Test program for the in-process recording path's process lifecycle: a program
// killed by SIGKILL, one that forks, one that execs. Each mode locks a mutex a known
// number of times and prints its address.
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t kept = PTHREAD_MUTEX_INITIALIZER;
static long counter;

static void lock_n(int n) {
    for (int i = 0; i < n; i++) {
        pthread_mutex_lock(&lock);
        counter++;
        pthread_mutex_unlock(&lock);
    }
}

static void *worker(void *arg) {
    lock_n((int)(long)arg);
    return NULL;
}

// `kept` locked and unlocked N times, then locked once more at the same call
// site and left held (a site the recording knows by then, so the lock's record
// is a short unit, the kind a lock and its release fold from).
static void lock_n_keep_last(int n) {
    for (int i = 0;; i++) {
        pthread_mutex_lock(&kept);
        if (i == n)
            break;
        counter++;
        pthread_mutex_unlock(&kept);
    }
}

// N locks of each, then the thread exits holding `kept`.
static void *worker_keeping(void *arg) {
    lock_n((int)(long)arg);
    lock_n_keep_last((int)(long)arg);
    return NULL;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    printf("lock %p\n", (void *)&lock);
    fflush(stdout);
    if (strcmp(mode, "kill") == 0) {
        // N locks in a thread and in main, then SIGKILL: no exit path runs.
        int n = argc > 2 ? atoi(argv[2]) : 1000;
        pthread_t t;
        pthread_create(&t, NULL, worker, (void *)(long)n);
        pthread_join(t, NULL);
        lock_n(n);
        kill(getpid(), SIGKILL);
        return 1;
    }
    if (strcmp(mode, "kill-holding") == 0) {
        // N locks in a thread and in main, then main locks `kept` N + 1 times,
        // unlocks it N times and the process is SIGKILLed holding it.
        int n = argc > 2 ? atoi(argv[2]) : 1000;
        printf("kept %p\n", (void *)&kept);
        fflush(stdout);
        pthread_t t;
        pthread_create(&t, NULL, worker, (void *)(long)n);
        pthread_join(t, NULL);
        lock_n(n);
        lock_n_keep_last(n);
        kill(getpid(), SIGKILL);
        return 1;
    }
    if (strcmp(mode, "exit-holding") == 0) {
        // A thread makes N locks, N + 1 of `kept`, and exits holding it; a while later
        // (the recorder has seen it exit) another thread makes N locks; main
        // makes N. The program then ends normally.
        int n = argc > 2 ? atoi(argv[2]) : 1000;
        printf("kept %p\n", (void *)&kept);
        fflush(stdout);
        pthread_t t;
        pthread_create(&t, NULL, worker_keeping, (void *)(long)n);
        pthread_join(t, NULL);
        usleep(300 * 1000);
        pthread_create(&t, NULL, worker, (void *)(long)n);
        pthread_join(t, NULL);
        lock_n(n);
        return 0;
    }
    if (strcmp(mode, "fork") == 0) {
        // The child locks 10 times; the parent 5 times, after the child exited.
        pid_t child = fork();
        if (child == 0) {
            lock_n(10);
            _exit(0);
        }
        waitpid(child, NULL, 0);
        lock_n(5);
        return 0;
    }
    if (strcmp(mode, "exec") == 0) {
        // 3 locks, then the program replaces itself.
        lock_n(3);
        execl("/proc/self/exe", argv[0], "after-exec", (char *)NULL);
        perror("execl");
        return 1;
    }
    if (strcmp(mode, "after-exec") == 0) {
        // The new image: 7 locks; says whether ordo's agent left traces in it.
        lock_n(7);
        const char *fd = getenv("ORDO_RECORD_FD");
        const char *preload = getenv("LD_PRELOAD");
        printf("after-exec fd=%s preload=%s\n", fd ? fd : "-", preload ? preload : "-");
        return 0;
    }
    fprintf(stderr, "usage: record_lifecycle kill N | kill-holding N | exit-holding N | fork | exec\n");
    return 2;
}
