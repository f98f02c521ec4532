/* Integer matrix products (>>qgemm): packing layout, the _ref kernel against an independent
   formulation (codes unpacked by hand, int64 dot products, the documented float scale order), and
   every compiled ISA against _ref bit for bit on random and edge inputs (all -8/+7 or -128/+127
   codes, zero scales, odd lengths and groups, every token-tile remainder, the int32 limits). */
#include "quarot.h"
#include "qt.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const quarot_isa all_isas[] = {QUAROT_ISA_REF, QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON};

static int rnd_int(int lo, int hi) { return lo + (int)(qt_uniform() * (double)(hi - lo + 1)); }

/* The expected packed byte of a 4-bit group written out from the declaration's rule. */
static void test_pack_layout(void) {
    int8_t q[5] = {-8, -1, 0, 7, 3}, back[5];
    uint8_t p[5];   /* 4 bits: 3 bytes; 8 bits: 5 */
    int8_t big[2 * 300];
    uint8_t pb[2 * 300];
    int i;
    /* one group of 5 codes: h = 3; byte j = code j | code j+3 << 4; the missing code 5 is u = 8 */
    QT_EQ_INT((int)quarot_qmat_row_bytes(4, 5, 0), 3);
    QT_OK(quarot_qmat_pack(4, q, 1, 5, 0, p));
    QT_EQ_INT(p[0], (-8 + 8) | ((7 + 8) << 4));
    QT_EQ_INT(p[1], (-1 + 8) | ((3 + 8) << 4));
    QT_EQ_INT(p[2], (0 + 8) | (8 << 4));
    QT_OK(quarot_qmat_unpack(4, p, 1, 5, 0, back));
    QT_CHECK(memcmp(q, back, 5) == 0);
    /* 8 bits: offset binary */
    QT_OK(quarot_qmat_pack(8, q, 1, 5, 0, p));
    QT_EQ_INT(p[0], 120);
    /* groups of 150 (a full 128-code block then 22): code 130 sits in group 0's tail block, at byte
       64 + (130 - 128) = 66 low; code 128 + 11 + 3 = 142 is its high partner of byte 66 + ... */
    qt_seed(5);
    for (i = 0; i < 600; ++i) big[i] = (int8_t)rnd_int(-8, 7);
    QT_EQ_INT((int)quarot_qmat_row_bytes(4, 300, 150), 150);
    QT_OK(quarot_qmat_pack(4, big, 2, 300, 150, pb));
    QT_EQ_INT(pb[5] & 15, big[5] + 8);             /* block 0: byte 5 low = code 5 */
    QT_EQ_INT(pb[5] >> 4, big[5 + 64] + 8);        /* high = code 69 */
    QT_EQ_INT(pb[64 + 2] & 15, big[130] + 8);      /* tail block L = 22, h = 11: byte 2 low = code 130 */
    QT_EQ_INT(pb[64 + 2] >> 4, big[141] + 8);      /* high = code 128 + 2 + 11 */
    QT_EQ_INT(pb[75] & 15, big[150] + 8);          /* group 1 starts at byte 75 */
    QT_EQ_INT(pb[150 + 75 + 1] >> 4, big[300 + 150 + 65] + 8);   /* row 1, group 1, byte 1 high = code 65 */
    memset(back, 0, sizeof back);
    {
        int8_t bb[600];
        QT_OK(quarot_qmat_unpack(4, pb, 2, 300, 150, bb));
        QT_CHECK(memcmp(bb, big, 600) == 0);
    }
    /* out-of-range codes are refused */
    q[0] = 8;
    QT_ERR(quarot_qmat_pack(4, q, 1, 5, 0, p), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECK(quarot_qmat_row_bytes(4, 10, 3) == 0);
    QT_CHECK(quarot_qmat_row_bytes(5, 10, 0) == 0);
}

/* One rounding per operation below: clang contracts f + a*b into an FMA by default (gcc does not in
   ISO C mode), which made every ISA "differ" from expect() under clang; the library itself already
   turns contraction off. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
/* Independent expected output: unpacked codes, int64 dot products, the documented float order. */
static void expect(const int8_t* wq, const float* ws, int64_t out, int64_t cols, int64_t G, const int8_t* xq,
                   const float* xs, int64_t T, float* y) {
    int64_t t, o, g, k, ng = cols / G;
    for (t = 0; t < T; ++t)
        for (o = 0; o < out; ++o) {
            float f = 0.0f;
            for (g = 0; g < ng; ++g) {
                int64_t s = 0;
                for (k = g * G; k < (g + 1) * G; ++k) s += (int64_t)wq[o * cols + k] * xq[t * cols + k];
                f += (float)(int32_t)s * ws[o * ng + g];
            }
            y[t * out + o] = f * xs[t];
        }
}

/* fill: 0 random, 1 all minimum codes, 2 all maximum, 3 mixed extremes */
static void run_case(int bits, int64_t out, int64_t cols, int64_t group, int64_t T, int fill, int zero_scales) {
    int64_t G = group ? group : cols, ng = cols / G, i;
    int wlo = bits == 4 ? -8 : -128, whi = bits == 4 ? 7 : 127;
    size_t rb = quarot_qmat_row_bytes(bits, cols, group);
    int8_t* wq = (int8_t*)malloc((size_t)(out * cols));
    uint8_t* wp = (uint8_t*)malloc(rb * (size_t)out);
    float* ws = (float*)malloc((size_t)(out * ng) * sizeof(float));
    int8_t* xq = (int8_t*)malloc((size_t)(T * cols));
    float* xs = (float*)malloc((size_t)T * sizeof(float));
    int32_t* xsum = (int32_t*)malloc((size_t)(T * ng) * sizeof(int32_t));
    float* y0 = (float*)malloc((size_t)(T * out) * sizeof(float));
    float* y1 = (float*)malloc((size_t)(T * out) * sizeof(float));
    quarot_qmat m;
    size_t a;
    for (i = 0; i < out * cols; ++i)
        wq[i] = (int8_t)(fill == 0 ? rnd_int(wlo, whi) : fill == 1 ? wlo : fill == 2 ? whi : (i % 3 ? wlo : whi));
    for (i = 0; i < T * cols; ++i)
        xq[i] = (int8_t)(fill == 0 ? rnd_int(-128, 127) : fill == 1 ? -128 : fill == 2 ? 127 : (i % 2 ? -128 : 127));
    for (i = 0; i < out * ng; ++i) ws[i] = zero_scales && i % 2 ? 0.0f : (float)(qt_uniform() * 0.02 + 1e-4);
    for (i = 0; i < T; ++i) xs[i] = zero_scales && i % 3 == 1 ? 0.0f : (float)(qt_uniform() * 0.1 + 1e-3);
    QT_OK(quarot_qmat_pack(bits, wq, out, cols, group, wp));
    QT_OK(quarot_qact_sums(xq, T, cols, cols, group, xsum));
    m.bits = bits; m.rows = out; m.cols = cols; m.group = group; m.data = wp; m.scales = ws;
    expect(wq, ws, out, cols, G, xq, xs, T, y0);
    for (a = 0; a < sizeof all_isas / sizeof all_isas[0]; ++a) {
        quarot_result r;
        if (!quarot_isa_compiled(all_isas[a])) continue;
        memset(y1, 0xff, (size_t)(T * out) * sizeof(float));
        r = quarot_qgemm(&m, xq, cols, xs, xsum, T, y1, out, all_isas[a], NULL);
        QT_OK(r);
        QT_CHECKF(memcmp(y0, y1, (size_t)(T * out) * sizeof(float)) == 0, "bits %d out %lld cols %lld group %lld T %lld fill %d: %s differs",
                  bits, (long long)out, (long long)cols, (long long)group, (long long)T, fill, quarot_isa_name(all_isas[a]));
    }
    free(wq); free(wp); free(ws); free(xq); free(xs); free(xsum); free(y0); free(y1);
}

static void test_random_and_edges(void) {
    static const int64_t cols_list[] = {1, 7, 63, 64, 65, 127, 128, 129, 255, 256, 389, 640};
    static const int64_t T_list[] = {1, 2, 3, 4, 5, 9};
    size_t c, t;
    int bits, fill;
    qt_seed(11);
    for (bits = 4; bits <= 8; bits += 4)
        for (c = 0; c < sizeof cols_list / sizeof cols_list[0]; ++c) {
            int64_t cols = cols_list[c];
            for (t = 0; t < sizeof T_list / sizeof T_list[0]; ++t) {
                run_case(bits, 19, cols, 0, T_list[t], 0, 0);
                if (cols % 2 == 0 && cols > 2) run_case(bits, 17, cols, cols / 2, T_list[t], 0, t % 2);
            }
            for (fill = 1; fill <= 3; ++fill) run_case(bits, 5, cols, 0, 5, fill, 0);
            run_case(bits, 33, cols, 0, 4, 0, 1);
        }
    /* groups that are not multiples of the block: 150 = 128 + 22, 96, 192 + 5 */
    run_case(4, 20, 300, 150, 7, 0, 0);
    run_case(4, 20, 384, 96, 6, 3, 0);
    run_case(8, 20, 394, 197, 6, 0, 0);
}

/* The int32 limits: the largest allowed groups with the most negative products. */
static void test_limits(void) {
    if (qt_quick()) {
        run_case(8, 2, 65536, 0, 2, 3, 0);
    } else {
        run_case(8, 2, 65536, 0, 2, 1, 0);
        run_case(8, 2, 65536, 0, 2, 3, 0);
        run_case(4, 1, 1 << 20, 0, 2, 1, 0);
        run_case(4, 1, 1 << 20, 0, 1, 3, 0);
    }
}

/* Thread independence: tasks run in reverse order give the same bits. */
static void rev_run(void* user, quarot_task_fn fn, void* arg, int64_t n) {
    int64_t i;
    (void)user;
    for (i = n - 1; i >= 0; --i) fn(arg, i);
}

static void test_errors_and_threads(void) {
    int8_t wq[64 * 40], xq[3 * 40];
    uint8_t wp[64 * 40];
    float ws[64], xs[3] = {0.5f, 0.25f, 1.0f}, y0[3 * 64], y1[3 * 64];
    int32_t xsum[3];
    quarot_qmat m;
    quarot_env env;
    int i;
    qt_seed(3);
    for (i = 0; i < 64 * 40; ++i) wq[i] = (int8_t)rnd_int(-8, 7);
    for (i = 0; i < 3 * 40; ++i) xq[i] = (int8_t)rnd_int(-8, 7);
    for (i = 0; i < 64; ++i) ws[i] = (float)qt_uniform();
    QT_OK(quarot_qmat_pack(4, wq, 64, 40, 0, wp));
    QT_OK(quarot_qact_sums(xq, 3, 40, 40, 0, xsum));
    m.bits = 4; m.rows = 64; m.cols = 40; m.group = 0; m.data = wp; m.scales = ws;
    QT_OK(quarot_qgemm(&m, xq, 40, xs, xsum, 3, y0, 64, QUAROT_ISA_DEFAULT, NULL));
    memset(&env, 0, sizeof env);
    env.parallel.run = rev_run;
    env.parallel.n_threads = 2;
    QT_OK(quarot_qgemm(&m, xq, 40, xs, xsum, 3, y1, 64, QUAROT_ISA_DEFAULT, &env));
    QT_CHECK(memcmp(y0, y1, sizeof y0) == 0);
    QT_ERR(quarot_qgemm(&m, xq, 39, xs, xsum, 3, y1, 64, QUAROT_ISA_DEFAULT, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_qgemm(&m, xq, 40, xs, xsum, 3, y1, 63, QUAROT_ISA_DEFAULT, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_qgemm(&m, xq, 40, NULL, xsum, 3, y1, 64, QUAROT_ISA_DEFAULT, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    m.group = 7;
    QT_ERR(quarot_qgemm(&m, xq, 40, xs, xsum, 3, y1, 64, QUAROT_ISA_DEFAULT, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    m.group = 0;
    m.bits = 3;
    QT_ERR(quarot_qgemm(&m, xq, 40, xs, xsum, 3, y1, 64, QUAROT_ISA_DEFAULT, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    m.bits = 4;
    for (i = 0; i < (int)(sizeof all_isas / sizeof all_isas[0]); ++i)
        if (!quarot_isa_compiled(all_isas[i]))
            QT_ERR(quarot_qgemm(&m, xq, 40, xs, xsum, 3, y1, 64, all_isas[i], NULL), QUAROT_ERR_UNSUPPORTED);
    QT_OK(quarot_qgemm(&m, xq, 40, xs, xsum, 0, y1, 64, QUAROT_ISA_DEFAULT, NULL));
}

/* Row strides and misaligned buffers on the whole-row path (one group per row, whole blocks: the
   AVX-512 kernel finishes those in registers): every ISA equals the independent result, the gaps of
   y past each row's outputs are left alone, and a reversed two-thread run gives the same bits. */
static void test_strides_alignment(void) {
    const int64_t out = 21, cols = 384, T = 7, ldx = cols + 5, ldy = out + 2;
    int bits;
    qt_seed(5);
    for (bits = 4; bits <= 8; bits += 4) {
        int lo = bits == 4 ? -8 : -128, hi = bits == 4 ? 7 : 127;
        size_t rb = quarot_qmat_row_bytes(bits, cols, 0), a;
        int8_t* wq = (int8_t*)malloc((size_t)(out * cols));
        int8_t* xd = (int8_t*)malloc((size_t)(T * cols));
        uint8_t* wbuf = (uint8_t*)malloc(rb * (size_t)out + 1);
        int8_t* xbuf = (int8_t*)malloc((size_t)(T * ldx) + 3);
        float* ws = (float*)malloc((size_t)out * sizeof(float));
        float xs[7], *y0 = (float*)malloc((size_t)(T * out) * sizeof(float));
        float* y1 = (float*)malloc((size_t)(T * ldy) * sizeof(float));
        float* y2 = (float*)malloc((size_t)(T * ldy) * sizeof(float));
        int32_t xsum[7];
        uint8_t* wp = wbuf + 1;
        int8_t* xq = xbuf + 3;
        quarot_qmat m;
        quarot_env env;
        int64_t i, t, o;
        for (i = 0; i < out * cols; ++i) wq[i] = (int8_t)rnd_int(lo, hi);
        for (i = 0; i < T * cols; ++i) xd[i] = (int8_t)rnd_int(-128, 127);
        for (t = 0; t < T; ++t) memcpy(xq + t * ldx, xd + t * cols, (size_t)cols);
        for (i = 0; i < out; ++i) ws[i] = (float)(qt_uniform() * 0.02 + 1e-4);
        for (t = 0; t < T; ++t) xs[t] = (float)(qt_uniform() * 0.1 + 1e-3);
        QT_OK(quarot_qmat_pack(bits, wq, out, cols, 0, wp));
        QT_OK(quarot_qact_sums(xq, T, cols, ldx, 0, xsum));
        m.bits = bits; m.rows = out; m.cols = cols; m.group = 0; m.data = wp; m.scales = ws;
        expect(wq, ws, out, cols, cols, xd, xs, T, y0);
        for (a = 0; a < sizeof all_isas / sizeof all_isas[0]; ++a) {
            int same = 1, gap = 1;
            if (!quarot_isa_compiled(all_isas[a])) continue;
            memset(y1, 0x7f, (size_t)(T * ldy) * sizeof(float));
            QT_OK(quarot_qgemm(&m, xq, ldx, xs, xsum, T, y1, ldy, all_isas[a], NULL));
            for (t = 0; t < T; ++t) {
                same &= memcmp(y0 + t * out, y1 + t * ldy, (size_t)out * sizeof(float)) == 0;
                for (o = out; o < ldy; ++o) {
                    uint32_t u;
                    memcpy(&u, y1 + t * ldy + o, 4);
                    gap &= u == 0x7f7f7f7fu;
                }
            }
            QT_CHECKF(same, "bits %d: %s differs with strides / misaligned rows", bits, quarot_isa_name(all_isas[a]));
            QT_CHECKF(gap, "bits %d: %s wrote past a row's outputs", bits, quarot_isa_name(all_isas[a]));
        }
        memset(&env, 0, sizeof env);
        env.parallel.run = rev_run;
        env.parallel.n_threads = 2;
        memset(y1, 0x7f, (size_t)(T * ldy) * sizeof(float));
        memset(y2, 0x7f, (size_t)(T * ldy) * sizeof(float));
        QT_OK(quarot_qgemm(&m, xq, ldx, xs, xsum, T, y1, ldy, QUAROT_ISA_DEFAULT, NULL));
        QT_OK(quarot_qgemm(&m, xq, ldx, xs, xsum, T, y2, ldy, QUAROT_ISA_DEFAULT, &env));
        QT_CHECK(memcmp(y1, y2, (size_t)(T * ldy) * sizeof(float)) == 0);
        free(wq); free(xd); free(wbuf); free(xbuf); free(ws); free(y0); free(y1); free(y2);
    }
}

/* The AMX-INT8 path (>>qgemm_amx) equals quarot_qgemm's REF kernel bit for bit: 4 and 8 bits, whole-row
   and grouped scales, partial row blocks and token tiles, more than 64 tokens, a misaligned workspace,
   a reversed two-thread run, and shapes the tiles do not cover (group 64 at 4 bits: the VNNI fallback);
   16384 columns make a task run its rows over several token spans (the span whose re-laid
   activations fit L2 is 64 tokens there). Skipped with a message where the build, the CPU or the OS
   gives no tile state. */
static void test_amx(void) {
    static const int64_t Ts[] = {1, 5, 16, 17, 70, 100};
    static const int64_t groups[] = {0, 128, 256, 64};
    const int64_t out = 37;
    int bits, wide;
    size_t gi, ti;
    if (quarot_amx_request() != QUAROT_OK) {
        printf("test_qgemm: AMX-INT8 skipped (not compiled in, not on this CPU, or tile state refused)\n");
        return;
    }
    qt_seed(9);
    for (wide = 0; wide <= 1; ++wide)
        for (bits = 4; bits <= 8; bits += 4)
            for (gi = 0; gi < sizeof groups / sizeof groups[0]; ++gi)
                for (ti = 0; ti < sizeof Ts / sizeof Ts[0]; ++ti) {
                    int64_t T = Ts[ti], cols = wide ? 16384 : 512, G = groups[gi] ? groups[gi] : cols, ng = cols / G, i;
                    if (wide && T < 70) continue;   // the spans need more tokens than one
                    int lo = bits == 4 ? -8 : -128, hi = bits == 4 ? 7 : 127;
                    size_t rb = quarot_qmat_row_bytes(bits, cols, groups[gi]);
                    size_t wsz = quarot_qgemm_amx_workspace_size(T, cols);
                    int8_t* wq = (int8_t*)malloc((size_t)(out * cols));
                    uint8_t* wp = (uint8_t*)malloc(rb * (size_t)out);
                    int8_t* xq = (int8_t*)malloc((size_t)(T * cols));
                    float* ws = (float*)malloc((size_t)(out * ng) * sizeof(float));
                    float* xs = (float*)malloc((size_t)T * sizeof(float));
                    int32_t* xsum = (int32_t*)malloc((size_t)(T * ng) * sizeof(int32_t));
                    float* y0 = (float*)malloc((size_t)(T * out) * sizeof(float));
                    float* y1 = (float*)malloc((size_t)(T * out) * sizeof(float));
                    uint8_t* work = (uint8_t*)malloc(wsz + 1);
                    quarot_qmat m;
                    quarot_env env;
                    for (i = 0; i < out * cols; ++i) wq[i] = (int8_t)(i % 11 == 0 ? (i % 2 ? lo : hi) : rnd_int(lo, hi));
                    for (i = 0; i < T * cols; ++i) xq[i] = (int8_t)(i % 13 == 0 ? -128 : rnd_int(-128, 127));
                    for (i = 0; i < out * ng; ++i) ws[i] = (float)(qt_uniform() * 0.02 + 1e-4);
                    for (i = 0; i < T; ++i) xs[i] = (float)(qt_uniform() * 0.1 + 1e-3);
                    QT_OK(quarot_qmat_pack(bits, wq, out, cols, groups[gi], wp));
                    QT_OK(quarot_qact_sums(xq, T, cols, cols, groups[gi], xsum));
                    m.bits = bits; m.rows = out; m.cols = cols; m.group = groups[gi]; m.data = wp; m.scales = ws;
                    QT_OK(quarot_qgemm(&m, xq, cols, xs, xsum, T, y0, out, QUAROT_ISA_REF, NULL));
                    memset(y1, 0x7f, (size_t)(T * out) * sizeof(float));
                    QT_OK(quarot_qgemm_amx(&m, xq, cols, xs, xsum, T, y1, out, work + 1, wsz, NULL));
                    QT_CHECKF(memcmp(y0, y1, (size_t)(T * out) * sizeof(float)) == 0,
                              "AMX bits %d group %lld T %lld differs from REF", bits, (long long)groups[gi], (long long)T);
                    memset(&env, 0, sizeof env);
                    env.parallel.run = rev_run;
                    env.parallel.n_threads = 2;
                    memset(y1, 0x7f, (size_t)(T * out) * sizeof(float));
                    QT_OK(quarot_qgemm_amx(&m, xq, cols, xs, xsum, T, y1, out, work, wsz, &env));
                    QT_CHECKF(memcmp(y0, y1, (size_t)(T * out) * sizeof(float)) == 0,
                              "AMX bits %d group %lld T %lld differs from REF on two threads", bits,
                              (long long)groups[gi], (long long)T);
                    QT_ERR(quarot_qgemm_amx(&m, xq, cols, xs, xsum, T, y1, out, work, wsz - 1, NULL),
                           QUAROT_ERR_INVALID_ARGUMENT);
                    free(wq); free(wp); free(xq); free(ws); free(xs); free(xsum); free(y0); free(y1); free(work);
                }
}

int main(void) {
    QT_RUN(test_pack_layout);
    QT_RUN(test_random_and_edges);
    QT_RUN(test_limits);
    QT_RUN(test_errors_and_threads);
    QT_RUN(test_strides_alignment);
    QT_RUN(test_amx);
    return qt_finish("test_qgemm");
}
