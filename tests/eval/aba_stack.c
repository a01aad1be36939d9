// Bug: ABA on a free list. The optimistic allocator reads the top node and its
// successor in one critical section and, in a second one, pops only if the top is
// still the same node. When one client pops that node, a second client pops the
// next one, and the first pushes its node back, the top "is the same" and the
// allocator installs a successor that is in use.
// Shape: needs three threads: both clients' sections (pop, pop, push back) between
// the allocator's two sections, a chain of four orderings.
// Fails: abort() in main when a node on the free list is in use.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

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
        if (top == old) {   // "unchanged" (but it may have left and come back)
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
    int free_nodes = 0;
    for (struct node *n = top; n != NULL; n = n->next) {
        if (n->in_use || ++free_nodes > 3) {
            fprintf(stderr, "free list corrupt: node %ld is in use\n", (long)(n - nodes));
            abort();
        }
    }
    printf("%d free nodes\n", free_nodes);
    return 0;
}
