// Bug: a flag checked, then a shared object used after the last other user freed
// it. Each user drops its reference with an atomic decrement; the last one clears
// the `alive` flag and frees the object. The auditor reads the flag without taking
// a reference, then reads the object.
// Shape: the last user's clearing store (and its free, before it exits) between
// the auditor's read of the flag and its read of the object (a stale use).
// Fails: abort() when the auditor finds the poison the last user left.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE 0x600d
#define DEAD 0xdead

struct object { long reserved[2]; long magic; long hits; };

static struct object *obj;
static volatile int alive = 1;
static int refs = 2;

static void *user(void *arg) {
    (void)arg;
    for (volatile int work = 0; work < 20000; work++) {}
    if (__atomic_sub_fetch(&refs, 1, __ATOMIC_ACQ_REL) == 0) {
        alive = 0;
        *(volatile long *)&obj->magic = DEAD;
        free(obj);
    }
    return NULL;
}

static void *auditor(void *arg) {
    (void)arg;
    if (alive) {
        if (*(volatile long *)&obj->magic != LIVE) {
            fprintf(stderr, "auditor: object used after it was freed\n");
            abort();
        }
    }
    return NULL;
}

int main(void) {
    obj = calloc(1, sizeof *obj);
    obj->magic = LIVE;
    pthread_t u1, u2, a;
    pthread_create(&a, NULL, auditor, NULL);
    pthread_create(&u1, NULL, user, NULL);
    pthread_create(&u2, NULL, user, NULL);
    pthread_join(a, NULL);
    pthread_join(u1, NULL);
    pthread_join(u2, NULL);
    return 0;
}
