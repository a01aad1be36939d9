#define SAFE
#include "memgate_double_checked.c"
