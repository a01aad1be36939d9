// Calls pthread functions with rbp = 0, as code built without frame pointers may
// (memcached's logger thread did): an agent that read the call site through rbp
// without having set up its own frame would fault here.
#include <pthread.h>
#include <stdio.h>
#include <time.h>

/* call_with_rbp_zero(f, arg): f(arg) with rbp cleared for the call. */
int call_with_rbp_zero(void *f, void *arg);
__asm__(".text\n"
        ".globl call_with_rbp_zero\n"
        ".type call_with_rbp_zero, @function\n"
        "call_with_rbp_zero:\n"
        "  push %rbp\n"
        "  mov %rdi, %rax\n"
        "  mov %rsi, %rdi\n"
        "  xor %ebp, %ebp\n"
        "  call *%rax\n"
        "  pop %rbp\n"
        "  ret\n");

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cond = PTHREAD_COND_INITIALIZER;

static int timed_wait(void *unused) {
    (void)unused;
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_nsec += 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec += 1;
        until.tv_nsec -= 1000000000;
    }
    return pthread_cond_timedwait(&cond, &lock, &until);
}

int main(void) {
    int calls = 0;
    calls += call_with_rbp_zero((void *)pthread_mutex_lock, &lock) == 0;
    calls += call_with_rbp_zero((void *)pthread_cond_signal, &cond) == 0;
    calls += call_with_rbp_zero((void *)pthread_mutex_unlock, &lock) == 0;
    pthread_mutex_lock(&lock);
    /* pthread_cond_timedwait itself is called with rbp = 0 from timed_wait's frame
       only if the compiler keeps rbp free; the direct calls above always are. */
    call_with_rbp_zero((void *)timed_wait, NULL);
    pthread_mutex_unlock(&lock);
    printf("calls %d\n", calls);
    return calls == 3 ? 0 : 1;
}
