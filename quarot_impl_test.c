/* quarot_impl_test.c - compiles quarot.h's implementation under one configuration and checks that
   it links and runs. tests/matrix.sh builds it across {gcc, clang} x {C99, C++11 (quarot_impl_test.cpp)}
   x {QUAROT_NO_SIMD, -mavx2, -march=native} x {extern, QUAROT_STATIC, allocator override}, with
   STYLE.md's warnings as errors, plus QUAROT_USE_CBLAS and an aarch64 (NEON) cross build.

   IMPL_TEST_ALLOCATOR routes QUAROT_MALLOC/QUAROT_FREE through counting wrappers and checks that
   every allocation is freed. */
#include <stdio.h>
#include <stdlib.h>

#if defined(IMPL_TEST_ALLOCATOR)
static long impl_test_live;
static void* impl_test_malloc(size_t n) { ++impl_test_live; return malloc(n); }
static void impl_test_free(void* p) { if (p) --impl_test_live; free(p); }
#define QUAROT_MALLOC(sz) impl_test_malloc(sz)
#define QUAROT_FREE(p) impl_test_free(p)
#endif

#define QUAROT_IMPLEMENTATION
#include "quarot.h"
#include "quarot.h" /* a second include must be harmless */

#if !defined(QUAROT_IMPLEMENTATION_INCLUDED)
#error "quarot.h: the implementation guard did not take"
#endif

static int impl_test_fail(const char* what) {
    printf("impl_test: FAIL %s\n", what);
    return 1;
}

int main(void) {
    quarot_rng rng;
    int bad = 0;
    if (quarot_result_string(QUAROT_ERR_OUT_OF_MEMORY)[0] == '\0') bad |= impl_test_fail("result string");
    quarot_rng_seed(&rng, 1);
    if (quarot_rng_u64(&rng) == 0) bad |= impl_test_fail("rng");
    if (!quarot_isa_compiled(quarot_isa_best())) bad |= impl_test_fail("isa");
#if defined(IMPL_TEST_ALLOCATOR)
    if (impl_test_live != 0) bad |= impl_test_fail("allocations not freed");
#endif
    printf("impl_test: %s [%s] %s\n", quarot_version_string(), quarot_simd_name(), bad ? "FAILED" : "ok");
    return bad;
}
