// The C++ twin of quarot_impl_test.c: the same program compiled as C++11 (-fno-exceptions -fno-rtti).
#include "quarot_impl_test.c"
