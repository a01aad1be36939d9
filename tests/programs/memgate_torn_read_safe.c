#define SAFE
#include "memgate_torn_read.c"
