/* A library the test program `dlopen`s after the recording started (built with
 * -shared -fPIC): its locks' call sites lie in a module the first read of the
 * program's modules did not see. */
#include <pthread.h>

static pthread_mutex_t plugin_lock = PTHREAD_MUTEX_INITIALIZER;
static long plugin_count;

void plugin_work(int rounds) {
    for (int i = 0; i < rounds; i++) {
        pthread_mutex_lock(&plugin_lock);
        plugin_count++;
        pthread_mutex_unlock(&plugin_lock);
    }
}
