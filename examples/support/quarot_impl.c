/* The one translation unit that compiles quarot.h's implementation for the examples, tests and
   benchmarks. Engines do the same in one of their own .c files. */
#define QUAROT_IMPLEMENTATION
#include "quarot.h"
