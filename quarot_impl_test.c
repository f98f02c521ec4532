/* quarot_impl_test.c - compiles quarot.h's implementation under one configuration and checks that
   it links and runs. tests/matrix.sh builds it across {gcc, clang} x {C99, C++11 (quarot_impl_test.cpp)}
   x {QUAROT_NO_SIMD, -mavx2, -march=native} x {extern, QUAROT_STATIC, allocator override}, with
   STYLE.md's warnings as errors, plus QUAROT_USE_CBLAS, an aarch64 (NEON) cross build and the
   header reached by other paths (IMPL_TEST_HEADER: "tests/../quarot.h" without -I, a renamed copy in
   another folder).

   IMPL_TEST_ALLOCATOR routes QUAROT_MALLOC/QUAROT_FREE through counting wrappers and checks that
   every allocation is freed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(IMPL_TEST_ALLOCATOR)
static long impl_test_live;
static void* impl_test_malloc(size_t n) { ++impl_test_live; return malloc(n); }
static void impl_test_free(void* p) { if (p) --impl_test_live; free(p); }
#define QUAROT_MALLOC(sz) impl_test_malloc(sz)
#define QUAROT_FREE(p) impl_test_free(p)
#endif

#define QUAROT_IMPLEMENTATION
#if defined(IMPL_TEST_HEADER)
/* The header by another path: a relative one with no -I, or a renamed copy elsewhere (with
   QUAROT_HEADER_FILE). The implementation includes itself again by name, and must find itself. */
#include IMPL_TEST_HEADER
#include IMPL_TEST_HEADER
#else
#include "quarot.h"
#include "quarot.h" /* a second include must be harmless */
#endif

#if !defined(QUAROT_IMPLEMENTATION_INCLUDED)
#error "quarot.h: the implementation guard did not take"
#endif

static int impl_test_fail(const char* what) {
    printf("impl_test: FAIL %s\n", what);
    return 1;
}

/* A little of every module, so that each build of the matrix links and runs all of them (and, with
   IMPL_TEST_ALLOCATOR, frees everything it allocates). */
static int impl_test_modules(void) {
    int bad = 0, i, j;
    int8_t h[12 * 12];
    float x[2 * 24], y[16 * 16], a[4 * 4], u[4 * 4];
    quarot_rotation rot;
    quarot_rotation_desc rd;
    quarot_quant_desc qd;
    quarot_online_list list;
    quarot_plan plan;
    quarot_model_config cfg;
    char text[4096];
    size_t need;
    /* Hadamard 12 (Paley I): H H^T = 12 I */
    if (quarot_hadamard_build_i8(12, h, NULL) != QUAROT_OK) bad |= impl_test_fail("hadamard build");
    for (i = 0; i < 12; ++i)
        for (j = 0; j < 12; ++j) {
            int k, s = 0;
            for (k = 0; k < 12; ++k) s += h[i * 12 + k] * h[j * 12 + k];
            if (s != (i == j ? 12 : 0)) { bad |= impl_test_fail("hadamard orthogonality"); i = j = 12; }
        }
    /* a rotation of 24 = 12 x 2^1 applied and undone */
    memset(&rd, 0, sizeof rd);
    rd.n = 24;
    rd.seed = 3;
    for (i = 0; i < 48; ++i) x[i] = (float)(i % 7) - 3.0f;
    if (quarot_rotation_init(&rot, &rd, NULL) != QUAROT_OK ||
        quarot_rotation_apply_f32(&rot, x, 2, 24, 0, NULL, 0) != QUAROT_OK ||
        quarot_rotation_apply_f32(&rot, x, 2, 24, 1, NULL, 0) != QUAROT_OK)
        bad |= impl_test_fail("rotation");
    for (i = 0; i < 48; ++i)
        if (x[i] - ((float)(i % 7) - 3.0f) > 1e-5f || x[i] - ((float)(i % 7) - 3.0f) < -1e-5f) { bad |= impl_test_fail("rotation inverse"); break; }
    quarot_rotation_free(&rot);
    /* GEMM and the polar factor of a diagonal matrix (U = I) */
    for (i = 0; i < 16; ++i) a[i] = (i % 5 == 0) ? (float)(1 + i) : 0.0f;
    if (quarot_sgemm(0, 1, 4, 4, 4, 1.0f, a, 4, a, 4, 0.0f, y, 4, NULL) != QUAROT_OK || y[0] != 1.0f) bad |= impl_test_fail("sgemm");
    if (quarot_polar_newton_schulz_f32(4, a, 4, u, 4, NULL, NULL, NULL) != QUAROT_OK || u[0] < 0.999f || u[1] != 0.0f)
        bad |= impl_test_fail("polar");
    /* quantizers */
    memset(&qd, 0, sizeof qd);
    for (i = 0; i < 16; ++i) y[i] = (float)i;
    if (quarot_fake_quant_f32(y, 1, 16, 16, &qd) != QUAROT_OK || y[0] != 0.0f) bad |= impl_test_fail("fake quant");
    /* integer GEMM: a 4-bit row of 3 times a code row of 2 -> 6 * 0.5 * 0.25 */
    {
        int8_t wq[16], xq[16];
        uint8_t wp[8];
        float ws = 0.5f, xs = 0.25f, yq = 0.0f;
        int32_t xsum = 0;
        quarot_qmat qm;
        for (i = 0; i < 16; ++i) { wq[i] = 3; xq[i] = 2; }
        qm.bits = 4; qm.rows = 1; qm.cols = 16; qm.group = 0; qm.data = wp; qm.scales = &ws;
        if (quarot_qmat_pack(4, wq, 1, 16, 0, wp) != QUAROT_OK || quarot_qact_sums(xq, 1, 16, 16, 0, &xsum) != QUAROT_OK ||
            quarot_qgemm(&qm, xq, 16, &xs, &xsum, 1, &yq, 1, QUAROT_ISA_DEFAULT, NULL) != QUAROT_OK || yq != 12.0f)
            bad |= impl_test_fail("qgemm");
    }
    /* attention: a row of 20 equal scores (a 16-lane block and a tail) softmaxes to f32(1/20) each */
    {
        float sm[20];
        for (i = 0; i < 20; ++i) sm[i] = -3.0f;
        if (quarot_attention_softmax_f32(sm, 20, QUAROT_ISA_DEFAULT) != QUAROT_OK || sm[0] != (float)(1.0 / 20.0) ||
            sm[19] != sm[0] || quarot_attention_exp1(0.0f) != 1.0f)
            bad |= impl_test_fail("attention softmax");
    }
    /* online hooks: add, text round trip */
    quarot_online_list_init(&list, NULL);
    if (quarot_online_list_add(&list, 0, QUAROT_SITE_DOWN_INPUT, 24, 1, 24, 1, NULL) != QUAROT_OK ||
        quarot_online_write(&list, text, sizeof text, &need) != QUAROT_OK)
        bad |= impl_test_fail("online write");
    quarot_online_list_free(&list);
    quarot_online_list_init(&list, NULL);
    if (quarot_online_read(&list, text, strlen(text), NULL, 0) != QUAROT_OK || list.count != 1) bad |= impl_test_fail("online read");
    quarot_online_list_free(&list);
    /* an adapter plan for a small LLaMA */
    memset(&cfg, 0, sizeof cfg);
    strcpy(cfg.arch, "llama");
    cfg.hidden = 64; cfg.intermediate = 172; cfg.n_layers = 2; cfg.n_heads = 4; cfg.n_kv_heads = 2; cfg.head_dim = 16; cfg.vocab = 32;
    quarot_plan_init(&plan, NULL);
    if (!quarot_adapter_find("llama") || quarot_adapter_find("llama")->build(quarot_adapter_find("llama"), &cfg, -1, &plan) != QUAROT_OK ||
        plan.n_rotations != 2 + 2 * 9)   /* embed, lm_head; per layer 7 R1 + 2 R2 */
        bad |= impl_test_fail("adapter plan");
    quarot_plan_free(&plan);
    return bad;
}

int main(void) {
    quarot_rng rng;
    int bad = 0;
    if (quarot_result_string(QUAROT_ERR_OUT_OF_MEMORY)[0] == '\0') bad |= impl_test_fail("result string");
    quarot_rng_seed(&rng, 1);
    if (quarot_rng_u64(&rng) == 0) bad |= impl_test_fail("rng");
    if (!quarot_isa_compiled(quarot_isa_best())) bad |= impl_test_fail("isa");
    bad |= impl_test_modules();
#if defined(IMPL_TEST_ALLOCATOR)
    if (impl_test_live != 0) bad |= impl_test_fail("allocations not freed");
#endif
    printf("impl_test: %s [%s] %s\n", quarot_version_string(), quarot_simd_name(), bad ? "FAILED" : "ok");
    return bad;
}
