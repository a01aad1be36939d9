// ABA on a free list (issue 10's multi_split shape). The optimistic allocator reads
// the top node and its successor in one critical section and pops in a second one
// only if the top is still the same node. A client that pops the top node and
// pushes it back, and a second client that pops the next one in between, make the
// top "the same" again: the allocator installs a successor that is in use. A plain
// run allocates first (the clients start late), and no order of two threads alone
// fails: all three clients' sections must fall between the allocator's two, in
// the order borrow, take, return.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct node {
    struct node *next;
    int in_use;
};

static struct node nodes[3];
static struct node *top;
static pthread_mutex_t free_lock = PTHREAD_MUTEX_INITIALIZER;

static void *optimistic_alloc(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&free_lock);
        struct node *old = top;
        struct node *next = old ? old->next : NULL;
        pthread_mutex_unlock(&free_lock);
        if (old == NULL) return NULL;
        pthread_mutex_lock(&free_lock);
        if (top == old) {
            top = next;
            old->in_use = 1;
            pthread_mutex_unlock(&free_lock);
            return old;
        }
        pthread_mutex_unlock(&free_lock);
    }
}

static void *borrow_and_return(void *arg) {
    (void)arg;
    usleep(10000);
    pthread_mutex_lock(&free_lock);
    struct node *n = top;
    if (n) {
        top = n->next;
        n->in_use = 1;
    }
    pthread_mutex_unlock(&free_lock);
    if (n == NULL) return NULL;
    pthread_mutex_lock(&free_lock);
    n->in_use = 0;
    n->next = top;
    top = n;
    pthread_mutex_unlock(&free_lock);
    return NULL;
}

static void *take(void *arg) {
    (void)arg;
    usleep(20000);
    pthread_mutex_lock(&free_lock);
    struct node *n = top;
    if (n) {
        top = n->next;
        n->in_use = 1;
    }
    pthread_mutex_unlock(&free_lock);
    return n;
}

int main(void) {
    nodes[0].next = &nodes[1];
    nodes[1].next = &nodes[2];
    top = &nodes[0];
    pthread_t a, b, c;
    pthread_create(&a, NULL, optimistic_alloc, NULL);
    pthread_create(&b, NULL, borrow_and_return, NULL);
    pthread_create(&c, NULL, take, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_join(c, NULL);
    for (struct node *n = top; n != NULL; n = n->next) {
        if (n->in_use) {
            fprintf(stderr, "free list corrupt: node %ld is in use\n", (long)(n - nodes));
            abort();
        }
    }
    return 0;
}
