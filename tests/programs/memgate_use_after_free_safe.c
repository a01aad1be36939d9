#define SAFE
#include "memgate_use_after_free.c"
