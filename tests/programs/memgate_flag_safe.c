#define SAFE
#include "memgate_flag.c"
