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
    fprintf(stderr, "usage: record_lifecycle kill N | fork | exec\n");
    return 2;
}
