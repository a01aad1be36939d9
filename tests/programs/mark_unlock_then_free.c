// Unlock, then a plain statement: the owner takes the buffer out of the shared
// slot under the lock but clears the slot only after unlocking, then frees the
// buffer. A cleaner whose whole critical section falls between the owner's unlock
// and its clearing store frees the same buffer: a double free (glibc aborts). No
// synchronization call sits in that window, so only a gate at the clearing
// statement (`--mark`, `at(...)`) can hold the owner there.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static char *slot;
static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;

static void *owner(void *arg) {
    (void)arg;
    pthread_mutex_lock(&slot_lock);
    char *buf = slot;
    pthread_mutex_unlock(&slot_lock);
    slot = NULL; // MARK: the clearing store, outside the lock
    free(buf);
    return NULL;
}

static void *cleaner(void *arg) {
    (void)arg;
    usleep(100000);
    pthread_mutex_lock(&slot_lock);
    if (slot != NULL) {
        free(slot);
        slot = NULL;
    }
    pthread_mutex_unlock(&slot_lock);
    return NULL;
}

int main(void) {
    slot = malloc(64);
    pthread_t a, b;
    pthread_create(&a, NULL, owner, NULL);
    pthread_create(&b, NULL, cleaner, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    return 0;
}
