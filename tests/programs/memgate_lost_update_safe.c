#define SAFE
#include "memgate_lost_update.c"
