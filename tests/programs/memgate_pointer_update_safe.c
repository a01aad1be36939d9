#define SAFE
#include "memgate_pointer_update.c"
