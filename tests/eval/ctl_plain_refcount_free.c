// Control for plain_refcount_free: the auditor holds a reference of its own while
// it reads the object, so the last user to drop one is never before its read.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define LIVE 0x600d
#define DEAD 0xdead

struct object { long reserved[2]; long magic; long hits; };

static struct object *obj;
static int refs = 3;

static void put(void) {
    if (__atomic_sub_fetch(&refs, 1, __ATOMIC_ACQ_REL) == 0) {
        *(volatile long *)&obj->magic = DEAD;
        free(obj);
    }
}

static void *user(void *arg) {
    (void)arg;
    for (volatile int work = 0; work < 20000; work++) {}
    put();
    return NULL;
}

static void *auditor(void *arg) {
    (void)arg;
    if (*(volatile long *)&obj->magic != LIVE) {
        fprintf(stderr, "auditor: object used after it was freed\n");
        abort();
    }
    put();
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
