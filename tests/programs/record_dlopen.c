/* Locks in a library loaded after the recording started: record_dlopen LIB.
 * Keeps every CPU busy (one spinning thread more than there are CPUs, so the
 * recorder defers converting until the end and only its drain sees the events
 * while the program runs), then dlopens LIB, calls its plugin_work, and unloads
 * it only after 400 ms (the recorder reads the modules again at most every
 * 200 ms). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static atomic_int stop;

static void *spin(void *arg) {
    (void)arg;
    while (!atomic_load_explicit(&stop, memory_order_relaxed))
        ;
    return NULL;
}

static void pause_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000 * 1000};
    nanosleep(&t, NULL);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: record_dlopen LIB\n");
        return 2;
    }
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus < 1 || cpus > 256)
        cpus = 256;
    pthread_t spinners[257];
    for (long i = 0; i <= cpus; i++)
        pthread_create(&spinners[i], NULL, spin, NULL);
    pause_ms(300);
    void *lib = dlopen(argv[1], RTLD_NOW);
    if (!lib) {
        fprintf(stderr, "dlopen: %s\n", dlerror());
        return 1;
    }
    void (*work)(int) = (void (*)(int))dlsym(lib, "plugin_work");
    if (!work) {
        fprintf(stderr, "dlsym: %s\n", dlerror());
        return 1;
    }
    work(1000);
    pause_ms(400);
    dlclose(lib);
    atomic_store(&stop, 1);
    for (long i = 0; i <= cpus; i++)
        pthread_join(spinners[i], NULL);
    return 0;
}
