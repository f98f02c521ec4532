/* Quantizers (RTN fake / integer quantization, error metrics) and GPTQ.

   Truth comes from a straightforward double-precision implementation written here from the formulas
   of ALGORITHMS.md section 4 (rounding with nearbyint in the default round-to-nearest-even mode,
   not the library's truncation trick), from hand-computed values for ties and edge cases, and for
   GPTQ from an independent formulation: the explicit inverse H^-1 downdated after every column
   (Optimal Brain Surgeon form) instead of the library's Cholesky factor. */
#include "quarot.h"
#include "qt.h"

#include <stdint.h>

/* ---------------------------------------------------------------- reference quantizer, double */

typedef struct ref_cfg { int bits, asym, search; double clip; } ref_cfg;

static uint32_t f2u(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }

/* Scale and zero point of one group (the ALGORITHMS.md formulas, scales rounded once to float). */
static float ref_params(const ref_cfg* c, double clip, const float* x, int n, double* z) {
    double mx = 0.0, mn = 0.0, s;
    float sf;
    int j;
    for (j = 0; j < n; ++j) {
        if ((double)x[j] > mx) mx = (double)x[j];
        if ((double)x[j] < mn) mn = (double)x[j];
    }
    if (!c->asym) {
        double m = mx > -mn ? mx : -mn;
        s = clip * m / (double)((1 << (c->bits - 1)) - 1);
        sf = (float)s;
        if (sf == 0.0f) sf = 1.0f;
        *z = 0.0;
    } else {
        double hi = clip * mx, lo = clip * mn, qm = (double)((1 << c->bits) - 1);
        sf = (float)((hi - lo) / qm);
        if (sf == 0.0f) sf = 1.0f;
        *z = nearbyint(-lo / (double)sf);
        if (*z < 0.0) *z = 0.0;
        if (*z > qm) *z = qm;
    }
    return sf;
}

/* x^ for one value; *code (if not NULL) is the stored int8 code. */
static float ref_q1(const ref_cfg* c, double x, float s, double z, int* code) {
    double q;
    if (!c->asym) {
        double lo = -(double)(1 << (c->bits - 1)), hi = (double)((1 << (c->bits - 1)) - 1);
        q = nearbyint(x / (double)s);
        if (q < lo) q = lo;
        if (q > hi) q = hi;
        if (q == 0.0) q = 0.0;   /* codes are integers: x^ is +0, never -0 */
        if (code) *code = (int)q;
        return (float)(q * (double)s);
    }
    q = nearbyint(x / (double)s) + z;
    if (q < 0.0) q = 0.0;
    if (q > (double)((1 << c->bits) - 1)) q = (double)((1 << c->bits) - 1);
    if (code) *code = (int)q - (1 << (c->bits - 1));
    return (float)((q - z) * (double)s);
}

static double ref_group_err(const ref_cfg* c, const float* x, int n, float s, double z) {
    double e = 0.0, d;
    int j;
    for (j = 0; j < n; ++j) { d = (double)ref_q1(c, (double)x[j], s, z, NULL) - (double)x[j]; e += d * d; }
    return e;
}

/* Parameters with the optional clip search over c*(100-k)/100, k = 0..50. */
static float ref_fit(const ref_cfg* c, const float* x, int n, double* z) {
    double zb, zk, eb, ek;
    float sb = ref_params(c, c->clip, x, n, &zb), sk;
    int k;
    if (c->search) {
        eb = ref_group_err(c, x, n, sb, zb);
        for (k = 1; k <= 50; ++k) {
            sk = ref_params(c, c->clip * (double)(100 - k) / 100.0, x, n, &zk);
            ek = ref_group_err(c, x, n, sk, zk);
            if (ek < eb) { eb = ek; sb = sk; zb = zk; }
        }
    }
    *z = zb;
    return sb;
}

static void ref_fake(const ref_cfg* c, const float* x, float* y, int n, int gs) {
    int g, j;
    double z;
    float s;
    if (gs == 0) gs = n;
    for (g = 0; g < n; g += gs) {
        s = ref_fit(c, x + g, gs, &z);
        for (j = g; j < g + gs; ++j) y[j] = ref_q1(c, (double)x[j], s, z, NULL);
    }
}

static quarot_quant_desc mkdesc(int bits, int asym, int64_t gs, float clip, int search) {
    quarot_quant_desc d;
    memset(&d, 0, sizeof d);
    d.bits = bits; d.asymmetric = asym; d.group_size = gs; d.clip_ratio = clip; d.clip_search = search;
    return d;
}

static void fill_normal(float* x, int64_t n, double scale) {
    int64_t i;
    for (i = 0; i < n; ++i) x[i] = (float)(scale * qt_normal());
}

/* Bitwise comparison of float arrays: number of differing elements. */
static int64_t bitdiff(const float* a, const float* b, int64_t n) {
    int64_t i, k = 0;
    for (i = 0; i < n; ++i) k += f2u(a[i]) != f2u(b[i]);
    return k;
}

/* src [rows][cols] fake-quantized with d into a, and with d on REF into b: the elements that differ. */
static int64_t diff_vs_ref(const quarot_quant_desc* d, const float* src, float* a, float* b, int64_t rows, int64_t cols) {
    quarot_quant_desc dr = *d;
    dr.isa = QUAROT_ISA_REF;
    memcpy(a, src, (size_t)(rows * cols) * sizeof(float));
    memcpy(b, src, (size_t)(rows * cols) * sizeof(float));
    QT_OK(quarot_fake_quant_f32(a, rows, cols, cols, d));
    QT_OK(quarot_fake_quant_f32(b, rows, cols, cols, &dr));
    return bitdiff(a, b, rows * cols);
}

/* ---------------------------------------------------------------- RTN tests */

static void test_formulas_vs_reference(void) {
    static const int bitsv[] = {2, 3, 4, 5, 8};
    static const int gsv[] = {0, 16, 48};
    static const float clipv[] = {1.0f, 0.9f, 0.625f};
    const int rows = 5, cols = 96;
    float x[5 * 96], y[5 * 96], want[5 * 96];
    int bi, asym, gi, ci, search, r, cases = 0;
    qt_seed(11);
    for (bi = 0; bi < 5; ++bi)
        for (asym = 0; asym < 2; ++asym)
            for (gi = 0; gi < 3; ++gi)
                for (ci = 0; ci < 3; ++ci)
                    for (search = 0; search < 2; ++search) {
                        quarot_quant_desc d = mkdesc(bitsv[bi], asym, gsv[gi], clipv[ci], search);
                        ref_cfg c;
                        c.bits = bitsv[bi]; c.asym = asym; c.search = search; c.clip = (double)clipv[ci];
                        /* rows of different character: Gaussian, shifted (asymmetric), heavy tailed */
                        for (r = 0; r < rows; ++r) {
                            int j;
                            for (j = 0; j < cols; ++j) {
                                double v = qt_normal();
                                if (r == 1) v = v + 2.0;
                                if (r == 2) v = v * v * v;
                                if (r == 3) v = -fabs(v) * 1e-3;
                                x[r * cols + j] = (float)(r == 4 ? 100.0 * v : v);
                            }
                        }
                        memcpy(y, x, sizeof x);
                        QT_OK(quarot_fake_quant_f32(y, rows, cols, cols, &d));
                        for (r = 0; r < rows; ++r) ref_fake(&c, x + r * cols, want + r * cols, cols, gsv[gi]);
                        QT_CHECKF(bitdiff(y, want, rows * cols) == 0, "bits %d asym %d gs %d clip %g search %d: %lld values differ",
                                  bitsv[bi], asym, gsv[gi], (double)clipv[ci], search, (long long)bitdiff(y, want, rows * cols));
                        ++cases;
                    }
    QT_EQ_INT(cases, 180);
}

/* Ties: with s = 1 exactly, x/s = k + 0.5 rounds to the even neighbour. Hand-computed values. */
static void test_ties_round_to_even(void) {
    /* symmetric 4-bit: max|x| = 7 gives s = 7/7 = 1; range [-8, 7] */
    float x[12] = {7.0f, 2.5f, 3.5f, -2.5f, -3.5f, 0.5f, -0.5f, 1.5f, -1.5f, 6.5f, 5.5f, 4.5f};
    const float want[12] = {7.0f, 2.0f, 4.0f, -2.0f, -4.0f, 0.0f, 0.0f, 2.0f, -2.0f, 6.0f, 6.0f, 4.0f};
    /* asymmetric 4-bit: lo = -5, hi = 10 -> s = 15/15 = 1, z = 5; codes 0..15 cover [-5, 10] */
    float a[8] = {-5.0f, 10.0f, 2.5f, -2.5f, 3.5f, -0.5f, 9.5f, -4.5f};
    const float awant[8] = {-5.0f, 10.0f, 2.0f, -2.0f, 4.0f, 0.0f, 10.0f, -4.0f};
    /* 2-bit symmetric: s = max|x| = 1, levels {-2,-1,0,1}; 8-bit: s = 127/127 = 1 */
    float b2[6] = {1.0f, -1.0f, 0.4f, -0.6f, 0.5f, -0.5f};
    const float b2want[6] = {1.0f, -1.0f, 0.0f, -1.0f, 0.0f, 0.0f};
    float b8[5] = {127.0f, 100.5f, 101.5f, -126.5f, -0.5f};
    const float b8want[5] = {127.0f, 100.0f, 102.0f, -126.0f, 0.0f};
    quarot_quant_desc d = mkdesc(4, 0, 0, 1.0f, 0);
    int i;
    QT_OK(quarot_fake_quant_f32(x, 1, 12, 12, &d));
    for (i = 0; i < 12; ++i) QT_CHECKF(f2u(x[i]) == f2u(want[i]), "sym tie %d: %g != %g", i, (double)x[i], (double)want[i]);
    d.asymmetric = 1;
    QT_OK(quarot_fake_quant_f32(a, 1, 8, 8, &d));
    for (i = 0; i < 8; ++i) QT_CHECKF(f2u(a[i]) == f2u(awant[i]), "asym tie %d: %g != %g", i, (double)a[i], (double)awant[i]);
    d = mkdesc(2, 0, 0, 1.0f, 0);
    QT_OK(quarot_fake_quant_f32(b2, 1, 6, 6, &d));
    for (i = 0; i < 6; ++i) QT_CHECKF(f2u(b2[i]) == f2u(b2want[i]), "2-bit %d: %g != %g", i, (double)b2[i], (double)b2want[i]);
    d = mkdesc(8, 0, 0, 1.0f, 0);
    QT_OK(quarot_fake_quant_f32(b8, 1, 5, 5, &d));
    for (i = 0; i < 5; ++i) QT_CHECKF(f2u(b8[i]) == f2u(b8want[i]), "8-bit %d: %g != %g", i, (double)b8[i], (double)b8want[i]);
}

static void test_edge_rows(void) {
    quarot_quant_desc d;
    float z[2 * 9], x[40], y[40];
    int i, asym, bits;
    /* all-zero rows (with -0.0) stay exactly +0 */
    for (asym = 0; asym < 2; ++asym) {
        for (i = 0; i < 18; ++i) z[i] = (i & 1) ? -0.0f : 0.0f;
        d = mkdesc(4, asym, 3, 1.0f, 1);
        QT_OK(quarot_fake_quant_f32(z, 2, 9, 9, &d));
        for (i = 0; i < 18; ++i) QT_CHECK(f2u(z[i]) == 0u);
    }
    /* one huge value among small ones: the huge one survives (7*s ~ 1e6), the small ones go to 0 */
    for (i = 0; i < 40; ++i) x[i] = (float)(1e-3 * (i - 20));
    x[13] = 1.0e6f;
    d = mkdesc(4, 0, 0, 1.0f, 0);
    memcpy(y, x, sizeof x);
    QT_OK(quarot_fake_quant_f32(y, 1, 40, 40, &d));
    QT_NEAR(y[13], 1.0e6, 1.0e6 * 2.4e-7);
    for (i = 0; i < 40; ++i) if (i != 13) QT_CHECK(y[i] == 0.0f);
    /* negative-only rows */
    for (bits = 2; bits <= 8; bits += 2) {
        double s;
        for (i = 0; i < 40; ++i) x[i] = (float)(-1.0 - 4.0 * (double)i / 39.0);   /* [-5, -1] */
        d = mkdesc(bits, 0, 0, 1.0f, 0);
        memcpy(y, x, sizeof x);
        QT_OK(quarot_fake_quant_f32(y, 1, 40, 40, &d));
        s = 5.0 / (double)((1 << (bits - 1)) - 1);
        for (i = 0; i < 40; ++i) {
            QT_CHECK(y[i] <= 0.0f);
            QT_CHECKF(fabs((double)y[i] - (double)x[i]) <= s / 2 * (1 + 1e-6), "sym bits %d elem %d", bits, i);
        }
        d.asymmetric = 1;   /* asym: range [-5, 0], z = 2^b-1, step 5/(2^b-1) */
        memcpy(y, x, sizeof x);
        QT_OK(quarot_fake_quant_f32(y, 1, 40, 40, &d));
        s = 5.0 / (double)((1 << bits) - 1);
        for (i = 0; i < 40; ++i) {
            QT_CHECK(y[i] <= 0.0f);
            QT_CHECKF(fabs((double)y[i] - (double)x[i]) <= s / 2 * (1 + 1e-6), "asym bits %d elem %d", bits, i);
        }
        QT_NEAR(y[39], -5.0, 5.0 * 1.2e-7);   /* the minimum is a code: z*s = 5 up to the rounding of s */
    }
    /* asymmetric with 0 inside a negative-heavy range: 0 stays exactly 0 */
    {
        float v[6] = {-3.0f, -2.2f, 0.0f, -1.1f, 0.7f, -0.0f};
        d = mkdesc(3, 1, 0, 1.0f, 0);
        QT_OK(quarot_fake_quant_f32(v, 1, 6, 6, &d));
        QT_CHECK(f2u(v[2]) == 0u && f2u(v[5]) == 0u);
        QT_NEAR(v[0], -3.0, 3.7 / 7 / 2);   /* z = rne(3/s) moves the ends by at most s/2 */
        QT_NEAR(v[4], 0.7, 3.7 / 7 / 2);
    }
    /* constant rows and rows of length 1: x^ = qmax * f32(c/qmax), within one rounding of c */
    for (asym = 0; asym < 2; ++asym)
        for (bits = 2; bits <= 8; ++bits) {
            float c[4] = {3.7f, 3.7f, 3.7f, 3.7f}, one = -0.3f;
            ref_cfg rc;
            float want;
            double zz;
            d = mkdesc(bits, asym, 0, 1.0f, 0);
            QT_OK(quarot_fake_quant_f32(c, 1, 4, 4, &d));
            for (i = 0; i < 4; ++i) QT_NEAR(c[i], 3.7, 3.7 * 2.5e-7);
            QT_OK(quarot_fake_quant_f32(&one, 1, 1, 1, &d));
            rc.bits = bits; rc.asym = asym; rc.search = 0; rc.clip = 1.0;
            { float orig = -0.3f; float s = ref_params(&rc, 1.0, &orig, 1, &zz); want = ref_q1(&rc, (double)orig, s, zz, NULL); }
            QT_CHECK(f2u(one) == f2u(want));
            QT_NEAR(one, -0.3, 0.3 * 2.5e-7);
        }
    /* subnormal magnitudes: still the reference formula; the tiniest row underflows s -> 1 -> zeros */
    for (asym = 0; asym < 2; ++asym) {
        ref_cfg rc;
        float want[40];
        rc.bits = 4; rc.asym = asym; rc.search = 0; rc.clip = 1.0;
        for (i = 0; i < 40; ++i) x[i] = (float)((double)(i - 17) * 3e-41);
        d = mkdesc(4, asym, 8, 1.0f, 0);
        memcpy(y, x, sizeof x);
        QT_OK(quarot_fake_quant_f32(y, 1, 40, 40, &d));
        ref_fake(&rc, x, want, 40, 8);
        QT_EQ_INT(bitdiff(y, want, 40), 0);
        for (i = 0; i < 40; ++i) QT_CHECK(isfinite(y[i]) && fabs((double)y[i] - (double)x[i]) <= 2e-40);
        for (i = 0; i < 40; ++i) x[i] = (i & 1) ? 1.4e-45f : -1.4e-45f;   /* the smallest subnormal */
        QT_OK(quarot_fake_quant_f32(x, 1, 40, 40, &d));
        for (i = 0; i < 40; ++i) QT_CHECK(x[i] == 0.0f || fabs((double)x[i]) == (double)1.4e-45f);
    }
    /* magnitudes near FLT_MAX never dequantize to Inf (s is capped) */
    for (asym = 0; asym < 2; ++asym)
        for (bits = 2; bits <= 8; ++bits) {
            float h[4] = {3.4028235e38f, -3.4028235e38f, 1.0e38f, 0.0f};
            quarot_quant_desc dh = mkdesc(bits, asym, 0, 0.999f, 0);
            QT_OK(quarot_fake_quant_f32(h, 1, 4, 4, &dh));
            for (i = 0; i < 4; ++i) QT_CHECKF(isfinite(h[i]), "bits %d asym %d elem %d not finite", bits, asym, i);
            QT_CHECK(h[0] > 1.0e38f && h[1] < -1.0e38f);
        }
}

static void test_error_decreases_with_bits(void) {
    const int rows = 32, cols = 256;
    float* x = (float*)malloc(sizeof(float) * (size_t)(rows * cols));
    float* y = (float*)malloc(sizeof(float) * (size_t)(rows * cols));
    static const int bitsv[] = {2, 3, 4, 8};
    double mse[4];
    int asym, gi, i;
    qt_seed(5);
    fill_normal(x, rows * cols, 1.0);
    for (asym = 0; asym < 2; ++asym)
        for (gi = 0; gi < 2; ++gi) {
            for (i = 0; i < 4; ++i) {
                quarot_quant_desc d = mkdesc(bitsv[i], asym, gi ? 32 : 0, 1.0f, 0);
                memcpy(y, x, sizeof(float) * (size_t)(rows * cols));
                QT_OK(quarot_fake_quant_f32(y, rows, cols, cols, &d));
                mse[i] = quarot_mse_f32(x, y, rows * cols);
            }
            /* each extra bit roughly quarters the error; ask for a clear factor 2 per step */
            QT_CHECKF(mse[0] > 2 * mse[1] && mse[1] > 2 * mse[2] && mse[2] > 16 * mse[3],
                      "asym %d groups %d: mse %g %g %g %g", asym, gi, mse[0], mse[1], mse[2], mse[3]);
        }
    free(x);
    free(y);
}

static void test_clip_search_never_worse(void) {
    const int rows = 16, cols = 128, gs = 32;
    float x[16 * 128], a[16 * 128], b[16 * 128];
    int asym, bits, r, g, better = 0;
    qt_seed(9);
    for (r = 0; r < rows * cols; ++r) { double v = qt_normal(); x[r] = (float)(v * v * v); }   /* heavy tails */
    for (asym = 0; asym < 2; ++asym)
        for (bits = 2; bits <= 8; bits += 3) {
            quarot_quant_desc d0 = mkdesc(bits, asym, gs, 1.0f, 0), d1 = mkdesc(bits, asym, gs, 1.0f, 1);
            memcpy(a, x, sizeof x);
            memcpy(b, x, sizeof x);
            QT_OK(quarot_fake_quant_f32(a, rows, cols, cols, &d0));
            QT_OK(quarot_fake_quant_f32(b, rows, cols, cols, &d1));
            for (r = 0; r < rows; ++r)
                for (g = 0; g < cols; g += gs) {
                    int o = r * cols + g;
                    double e0 = quarot_mse_f32(x + o, a + o, gs), e1 = quarot_mse_f32(x + o, b + o, gs);
                    QT_CHECKF(e1 <= e0, "row %d group %d: search %g > plain %g", r, g, e1, e0);
                    better += e1 < e0;
                }
        }
    QT_CHECK(better > 50);   /* on heavy-tailed data the search helps in most groups */
}

static void test_integer_roundtrip(void) {
    const int rows = 7, cols = 64, stride = 70;
    float x[7 * 70], fq[7 * 70], dq[7 * 70];
    int8_t q[7 * 64];
    float sc[7 * 64], zr[7 * 64];
    static const int gsv[] = {0, 8, 32};
    int bits, asym, gi, search, i, r;
    qt_seed(21);
    fill_normal(x, rows * stride, 1.0);
    for (i = 0; i < cols; ++i) x[2 * stride + i] = (float)fabs((double)x[2 * stride + i]);    /* positive row */
    for (i = 0; i < cols; ++i) x[3 * stride + i] = -(float)fabs((double)x[3 * stride + i]);   /* negative row */
    for (i = 0; i < cols; ++i) x[4 * stride + i] = 0.0f;                                       /* zero row */
    for (bits = 2; bits <= 8; ++bits)
        for (asym = 0; asym < 2; ++asym)
            for (gi = 0; gi < 3; ++gi)
                for (search = 0; search < 2; ++search) {
                    quarot_quant_desc d = mkdesc(bits, asym, gsv[gi], 0.95f, search);
                    int groups = gsv[gi] ? cols / gsv[gi] : 1, lo = -(1 << (bits - 1)), hi = (1 << (bits - 1)) - 1, bad = 0;
                    memcpy(fq, x, sizeof x);
                    for (i = 0; i < rows * stride; ++i) dq[i] = 12345.0f;
                    QT_OK(quarot_fake_quant_f32(fq, rows, cols, stride, &d));
                    QT_OK(quarot_quantize_f32(x, rows, cols, stride, &d, q, sc, zr));
                    QT_OK(quarot_dequantize_f32(q, sc, asym ? zr : NULL, rows, cols, &d, dq, stride));
                    for (r = 0; r < rows; ++r) {
                        bad += (int)bitdiff(fq + r * stride, dq + r * stride, cols);
                        for (i = cols; i < stride; ++i) QT_CHECK(dq[r * stride + i] == 12345.0f);   /* padding untouched */
                    }
                    QT_CHECKF(bad == 0, "bits %d asym %d gs %d search %d: %d values differ", bits, asym, gsv[gi], search, bad);
                    for (i = 0; i < rows * cols; ++i) QT_CHECK(q[i] >= lo && q[i] <= hi);
                    for (i = 0; i < rows * groups; ++i) {
                        QT_CHECK(sc[i] > 0.0f);
                        QT_CHECK(zr[i] == floorf(zr[i]) && zr[i] >= (float)lo && zr[i] <= (float)hi);
                        if (!asym) QT_CHECK(zr[i] == 0.0f);
                    }
                }
}

static void test_simd_matches_ref(void) {
    static const quarot_isa isas[] = {QUAROT_ISA_DEFAULT, QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON};
    const int cols = 203;   /* odd: vector bodies and scalar tails */
    float x[4 * 203], a[4 * 203], b[4 * 203];
    static float w[2 * 600], wa[2 * 600], wb[2 * 600];
    int k, i, asym, bits, tested = 0;
    qt_seed(33);
    fill_normal(x, 4 * cols, 3.0);
    for (i = 0; i < cols; i += 7) x[i] = -0.0f;
    for (i = 1; i < cols; i += 11) x[cols + i] = 1e-41f * (float)(i % 5);    /* subnormals */
    for (i = 0; i < cols; ++i) x[2 * cols + i] = (float)(i % 16) - 7.5f;       /* ties with s = 1 */
    x[2 * cols] = -8.0f;
    x[2 * cols + 1] = 7.0f;
    for (k = 0; k < 5; ++k) {
        if (!quarot_isa_compiled(isas[k])) {
            quarot_quant_desc d = mkdesc(4, 0, 0, 1.0f, 0);
            d.isa = isas[k];
            QT_ERR(quarot_fake_quant_f32(a, 1, cols, cols, &d), QUAROT_ERR_UNSUPPORTED);
            continue;
        }
        for (asym = 0; asym < 2; ++asym)
            for (bits = 2; bits <= 8; bits += 2) {
                quarot_quant_desc d = mkdesc(bits, asym, 0, 0.9f, 0);
                int64_t nd;
                d.isa = isas[k];
                nd = diff_vs_ref(&d, x, a, b, 4, cols);
                QT_CHECKF(nd == 0, "isa %s bits %d asym %d: %lld differ", quarot_isa_name(isas[k]), bits, asym, (long long)nd);
                d.group_size = 29;
                QT_EQ_INT(diff_vs_ref(&d, x, a, b, 4, cols), 0);
                ++tested;
            }
    }
    /* the clip search (both objectives) rounds its candidates with the ISA's kernel, 256 elements at a
       time: every ISA chooses the scales REF chooses, per row (203, and 600 = 256 + 256 + 88) and in
       groups of 29 */
    fill_normal(w, 2 * 600, 1.0);
    for (i = 0; i < 2 * 600; i += 37) w[i] *= 25.0f;   /* outliers, so the search moves the clip */
    for (k = 0; k < 5; ++k) {
        int search;
        if (!quarot_isa_compiled(isas[k])) continue;
        for (search = 1; search <= 2; ++search)
            for (asym = 0; asym < 2; ++asym) {
                quarot_quant_desc d = mkdesc(4, asym, 0, 1.0f, search);
                int64_t nd;
                d.isa = isas[k];
                nd = diff_vs_ref(&d, x, a, b, 4, cols);
                QT_CHECKF(nd == 0, "clip search %d, isa %s asym %d: %lld differ", search, quarot_isa_name(isas[k]), asym,
                          (long long)nd);
                nd = diff_vs_ref(&d, w, wa, wb, 2, 600);
                QT_CHECKF(nd == 0, "clip search %d, isa %s asym %d, rows of 600: %lld differ", search,
                          quarot_isa_name(isas[k]), asym, (long long)nd);
                if (search == 1) {   /* and REF is the independent reference (ref_fit's plain loop) */
                    ref_cfg c;
                    c.bits = 4; c.asym = asym; c.search = 1; c.clip = 1.0;
                    ref_fake(&c, w, wa, 600, 0);
                    ref_fake(&c, w + 600, wa + 600, 600, 0);
                    QT_EQ_INT(bitdiff(wa, wb, 2 * 600), 0);
                }
                d.group_size = 29;
                QT_EQ_INT(diff_vs_ref(&d, x, a, b, 4, cols), 0);
                ++tested;
            }
    }
    /* exact ties through every kernel: s = 1 (symmetric: max 7; asymmetric: range [-5, 10]) */
    for (k = 0; k < 5; ++k) {
        float t[2][40], want[2][40];
        if (!quarot_isa_compiled(isas[k])) continue;
        for (asym = 0; asym < 2; ++asym) {
            quarot_quant_desc d = mkdesc(4, asym, 0, 1.0f, 0);
            d.isa = isas[k];
            for (i = 0; i < 40; ++i) {   /* every k and k + 1/2 of the range */
                double v = asym ? -5.0 + 0.5 * (double)(i % 31) : -7.0 + 0.5 * (double)(i % 28);
                t[asym][i] = (float)v;
                want[asym][i] = (float)(nearbyint(v) + 0.0);   /* ties to even; +0.0 turns -0 into +0 */
            }
            t[asym][3] = want[asym][3] = asym ? 10.0f : 7.0f;   /* sets the range */
            QT_OK(quarot_fake_quant_f32(t[asym], 1, 40, 40, &d));
            for (i = 0; i < 40; ++i)
                QT_CHECKF(f2u(t[asym][i]) == f2u(want[asym][i]), "%s asym %d elem %d: %g != %g", quarot_isa_name(isas[k]), asym, i,
                          (double)t[asym][i], (double)want[asym][i]);
        }
    }
    printf("    isa paths compared with ref: %d (compiled: %s)\n", tested, quarot_simd_name());
    {
        quarot_quant_desc d = mkdesc(4, 0, 0, 1.0f, 0);
        d.isa = (quarot_isa)99;
        QT_ERR(quarot_fake_quant_f32(a, 1, cols, cols, &d), QUAROT_ERR_INVALID_ARGUMENT);
    }
}

static void test_bad_arguments(void) {
    float x[3 * 8], keep[3 * 8], sc[24], zr[24];
    int8_t q[24];
    quarot_quant_desc d = mkdesc(4, 0, 0, 0.0f, 0);
    int i;
    qt_seed(2);
    fill_normal(x, 24, 1.0);
    QT_ERR(quarot_fake_quant_f32(NULL, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fake_quant_f32(x, -1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fake_quant_f32(x, 1, -8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fake_quant_f32(x, 2, 8, 7, &d), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fake_quant_f32(x, 3, 8, INT64_MAX / 2, &d), QUAROT_ERR_OVERFLOW);
    QT_OK(quarot_fake_quant_f32(x, 0, 8, 8, &d));
    QT_OK(quarot_fake_quant_f32(x, 3, 0, 8, &d));
    QT_OK(quarot_fake_quant_f32(x, 1, 8, 8, NULL));   /* NULL desc = defaults */
    d.bits = 1;  QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d.bits = 9;  QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d.bits = -4; QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 0, 3, 1.0f, 0);  QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 0, -2, 1.0f, 0); QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 0, 16, 1.0f, 0); QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 0, 0, 1.5f, 0);  QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 0, 0, -0.1f, 0); QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 0, 0, NAN, 0);   QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 2, 0, 1.0f, 0);  QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 0, 0, 1.0f, 3);  QT_ERR(quarot_fake_quant_f32(x, 1, 8, 8, &d), QUAROT_ERR_INVALID_ARGUMENT);
    /* NaN / Inf: earlier rows processed, the bad row and the later ones untouched */
    d = mkdesc(4, 0, 4, 1.0f, 0);
    fill_normal(x, 24, 1.0);
    x[8 + 6] = NAN;
    memcpy(keep, x, sizeof x);
    QT_ERR(quarot_fake_quant_f32(x, 3, 8, 8, &d), QUAROT_ERR_NONFINITE);
    QT_CHECK(bitdiff(x, keep, 8) > 0);              /* row 0 quantized */
    QT_EQ_INT(bitdiff(x + 8, keep + 8, 16), 0);     /* rows 1, 2 untouched (NaN is in group 1 of row 1) */
    x[14] = 1.0f; x[20] = -INFINITY;
    memcpy(keep, x, sizeof x);
    QT_ERR(quarot_fake_quant_f32(x + 8, 2, 8, 8, &d), QUAROT_ERR_NONFINITE);
    QT_EQ_INT(bitdiff(x + 16, keep + 16, 8), 0);
    QT_ERR(quarot_quantize_f32(x + 16, 1, 8, 8, &d, q, sc, zr), QUAROT_ERR_NONFINITE);
    /* integer form */
    fill_normal(x, 24, 1.0);
    d = mkdesc(4, 1, 0, 1.0f, 0);
    QT_ERR(quarot_quantize_f32(x, 3, 8, 8, &d, q, sc, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_quantize_f32(x, 3, 8, 8, &d, NULL, sc, zr), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_quantize_f32(x, 3, 8, 8, &d, q, NULL, zr), QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(quarot_quantize_f32(x, 3, 8, 8, &d, q, sc, zr));
    QT_ERR(quarot_dequantize_f32(q, sc, NULL, 3, 8, &d, x, 8), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_dequantize_f32(q, sc, zr, 3, 8, &d, x, 7), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_dequantize_f32(NULL, sc, zr, 3, 8, &d, x, 8), QUAROT_ERR_INVALID_ARGUMENT);
    d.bits = 10;
    QT_ERR(quarot_dequantize_f32(q, sc, zr, 3, 8, &d, x, 8), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkdesc(4, 0, 0, 1.0f, 0);
    QT_OK(quarot_quantize_f32(x, 3, 8, 8, &d, q, sc, NULL));   /* symmetric: zeros optional */
    QT_OK(quarot_dequantize_f32(q, sc, NULL, 3, 8, &d, x, 8));
    for (i = 0; i < 24; ++i) QT_CHECK(isfinite(x[i]));
}

static void test_metrics(void) {
    float a[4] = {1.0f, 2.0f, 3.0f, 4.0f}, b[4] = {1.0f, 2.5f, 2.0f, 4.0f};
    QT_NEAR(quarot_mse_f32(a, b, 4), (0.25 + 1.0) / 4.0, 1e-15);
    QT_NEAR(quarot_max_abs_diff_f32(a, b, 4), 1.0, 0.0);
    QT_CHECK(quarot_mse_f32(a, b, 0) == 0.0 && quarot_max_abs_diff_f32(a, b, -1) == 0.0);
    QT_CHECK(isnan(quarot_mse_f32(NULL, b, 4)) && isnan(quarot_max_abs_diff_f32(a, NULL, 4)));
    b[2] = NAN;
    QT_CHECK(isnan(quarot_mse_f32(a, b, 4)) && isnan(quarot_max_abs_diff_f32(a, b, 4)));
}

/* ---------------------------------------------------------------- Hessian and GPTQ */

/* The documented order of quarot_hessian_accumulate_f64, written out: chunks of 8 rows, each chunk's
   sum first (left to right), then the rows % 8 left one at a time; upper triangle, then mirrored. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif
static void ref_hessian(double* h, int in, const float* x, int rows, int stride) {
    int r, i, j, q;
    for (r = 0; r + 8 <= rows; r += 8)
        for (i = 0; i < in; ++i)
            for (j = i; j < in; ++j) {
                double s = 2.0 * (double)x[r * stride + i] * (double)x[r * stride + j];
                for (q = 1; q < 8; ++q) s = s + 2.0 * (double)x[(r + q) * stride + i] * (double)x[(r + q) * stride + j];
                h[i * in + j] = h[i * in + j] + s;
            }
    for (r = rows / 8 * 8; r < rows; ++r)
        for (i = 0; i < in; ++i)
            for (j = i; j < in; ++j) h[i * in + j] += 2.0 * (double)x[r * stride + i] * (double)x[r * stride + j];
    for (i = 0; i < in; ++i)
        for (j = i + 1; j < in; ++j) h[j * in + i] = h[i * in + j];
}

/* The blocked kernels (tiles of 32 rows of h, segments of 64 rows of x, groups of 3 vectors of
   columns, then single vectors and scalars) give the bits of the documented order: sizes that leave
   every kind of remainder, in two calls (h accumulates). */
static void test_hessian_blocked_bits(void) {
    static const int sizes[][3] = {{77, 150, 80}, {100, 203, 100}, {33, 9, 41}};
    int c;
    for (c = 0; c < 3; ++c) {
        const int in = sizes[c][0], rows = sizes[c][1], stride = sizes[c][2];
        float* x = (float*)malloc(sizeof(float) * (size_t)(rows * stride));
        double* h = (double*)calloc((size_t)(in * in), sizeof(double));
        double* hr = (double*)calloc((size_t)(in * in), sizeof(double));
        qt_seed(11 + c);
        fill_normal(x, rows * stride, 1.0);
        QT_OK(quarot_hessian_accumulate_f64(h, in, x, rows, stride));
        QT_OK(quarot_hessian_accumulate_f64(h, in, x, rows - 1, stride));
        ref_hessian(hr, in, x, rows, stride);
        ref_hessian(hr, in, x, rows - 1, stride);
        QT_CHECKF(memcmp(h, hr, sizeof(double) * (size_t)(in * in)) == 0, "in %d rows %d", in, rows);
        free(x);
        free(h);
        free(hr);
    }
}

static void test_hessian_accumulate(void) {
    const int in = 19, rows = 21, stride = 23;
    float x[21 * 23];
    double h[19 * 19], h2[19 * 19], want;
    int i, j, r;
    qt_seed(4);
    fill_normal(x, rows * stride, 1.0);
    memset(h, 0, sizeof h);
    memset(h2, 0, sizeof h2);
    QT_OK(quarot_hessian_accumulate_f64(h, in, x, rows, stride));
    QT_OK(quarot_hessian_accumulate_f64(h2, in, x, 5, stride));            /* the same rows in 3 calls */
    QT_OK(quarot_hessian_accumulate_f64(h2, in, x + 5 * stride, 9, stride));
    QT_OK(quarot_hessian_accumulate_f64(h2, in, x + 14 * stride, 7, stride));
    for (i = 0; i < in; ++i)
        for (j = 0; j < in; ++j) {
            want = 0.0;
            for (r = 0; r < rows; ++r) want += 2.0 * (double)x[r * stride + i] * (double)x[r * stride + j];
            QT_NEAR(h[i * in + j], want, 1e-12 * (fabs(want) + 10.0));
            QT_NEAR(h2[i * in + j], want, 1e-12 * (fabs(want) + 10.0));
            QT_CHECK(h[i * in + j] == h[j * in + i]);
        }
    memcpy(h2, h, sizeof h);
    x[3 * stride + 4] = INFINITY;
    QT_ERR(quarot_hessian_accumulate_f64(h, in, x, rows, stride), QUAROT_ERR_NONFINITE);
    QT_CHECK(memcmp(h, h2, sizeof h) == 0);
    QT_ERR(quarot_hessian_accumulate_f64(NULL, in, x, rows, stride), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hessian_accumulate_f64(h, in, x, rows, in - 1), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hessian_accumulate_f64(h, -1, x, rows, stride), QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(quarot_hessian_accumulate_f64(h, in, x, 0, stride));
}

/* Calibration data with correlated features: X = Z*A + noise, Z [n][k] Gaussian, k << in, plus
   feature scales that vary (so that act-order has something to sort). */
static void make_calib(float* x, int n, int in, int k, double noise) {
    double* a = (double*)malloc(sizeof(double) * (size_t)(k * in));
    int r, i, j;
    double* z = (double*)malloc(sizeof(double) * (size_t)k);
    for (i = 0; i < k * in; ++i) a[i] = qt_normal();
    for (r = 0; r < n; ++r) {
        for (j = 0; j < k; ++j) z[j] = qt_normal();
        for (i = 0; i < in; ++i) {
            double v = noise * qt_normal();
            for (j = 0; j < k; ++j) v += z[j] * a[j * in + i];
            x[r * in + i] = (float)(v * (0.3 + 2.0 * (double)((i * 7) % 11) / 10.0));
        }
    }
    free(a);
    free(z);
}

/* sum over rows of ||X (w - w^)||^2, in double */
static double out_err(const float* x, int n, int in, const float* w, const float* wq, int out) {
    double e = 0.0, t;
    int r, o, i;
    for (o = 0; o < out; ++o)
        for (r = 0; r < n; ++r) {
            t = 0.0;
            for (i = 0; i < in; ++i) t += (double)x[r * in + i] * ((double)w[o * in + i] - (double)wq[o * in + i]);
            e += t * t;
        }
    return e;
}

/* Gauss-Jordan inverse with partial pivoting, [n][n] in place; 0 if singular. */
static int ref_inverse(double* a, int n) {
    double* b = (double*)calloc((size_t)(n * n), sizeof(double));
    int i, j, k, p;
    for (i = 0; i < n; ++i) b[i * n + i] = 1.0;
    for (k = 0; k < n; ++k) {
        double piv, t;
        p = k;
        for (i = k + 1; i < n; ++i) if (fabs(a[i * n + k]) > fabs(a[p * n + k])) p = i;
        if (a[p * n + k] == 0.0) { free(b); return 0; }
        for (j = 0; j < n; ++j) {
            t = a[k * n + j]; a[k * n + j] = a[p * n + j]; a[p * n + j] = t;
            t = b[k * n + j]; b[k * n + j] = b[p * n + j]; b[p * n + j] = t;
        }
        piv = a[k * n + k];
        for (j = 0; j < n; ++j) { a[k * n + j] /= piv; b[k * n + j] /= piv; }
        for (i = 0; i < n; ++i)
            if (i != k && a[i * n + k] != 0.0) {
                t = a[i * n + k];
                for (j = 0; j < n; ++j) { a[i * n + j] -= t * a[k * n + j]; b[i * n + j] -= t * b[k * n + j]; }
            }
    }
    memcpy(a, b, sizeof(double) * (size_t)(n * n));
    free(b);
    return 1;
}

/* GPTQ by the explicit downdated inverse (OBS form): for column p in order, w_j -= e*Hi[p][j] with
   e = (w_p - q_p)/Hi[p][p], then Hi <- Hi - Hi[:,p] Hi[p,:] / Hi[p][p]. wq gets the fake-quantized
   weights, codes the int8 codes (natural layout). */
static void ref_gptq(const float* w, int out, int in, const double* h, double damp_ratio, const ref_cfg* c,
                     int gs, int act_order, float* wq, int* codes) {
    double* hd = (double*)malloc(sizeof(double) * (size_t)(in * in));
    double* ww = (double*)malloc(sizeof(double) * (size_t)(out * in));
    float* sc = (float*)malloc(sizeof(float) * (size_t)(out * in));
    double* zr = (double*)malloc(sizeof(double) * (size_t)(out * in));
    float* buf = (float*)malloc(sizeof(float) * (size_t)in);
    int* perm = (int*)malloc(sizeof(int) * (size_t)in);
    int* dead = (int*)malloc(sizeof(int) * (size_t)in);
    double mean = 0.0;
    int i, j, k, o, groups, dyn;
    if (gs == 0) gs = in;
    groups = in / gs;
    dyn = gs < in && !act_order;
    for (i = 0; i < in; ++i) {
        dead[i] = h[i * in + i] == 0.0;
        mean += dead[i] ? 1.0 : h[i * in + i];
        perm[i] = i;
    }
    mean /= in;
    if (act_order)   /* insertion sort: descending diagonal, ties by index */
        for (i = 1; i < in; ++i) {
            int t = perm[i];
            double dt = dead[t] ? 1.0 : h[t * in + t];
            for (j = i; j > 0; --j) {
                int u = perm[j - 1];
                double du = dead[u] ? 1.0 : h[u * in + u];
                if (du > dt || (du == dt && u < t)) break;
                perm[j] = u;
            }
            perm[j] = t;
        }
    for (i = 0; i < in; ++i)
        for (j = 0; j < in; ++j) {
            hd[i * in + j] = h[perm[i] * in + perm[j]];
            if (i == j) hd[i * in + j] = (dead[perm[i]] ? 1.0 : hd[i * in + j]) + damp_ratio * mean;
        }
    QT_CHECK(ref_inverse(hd, in));
    for (o = 0; o < out; ++o)
        for (i = 0; i < in; ++i) ww[o * in + i] = dead[perm[i]] ? 0.0 : (double)w[o * in + perm[i]];
    if (!dyn)
        for (o = 0; o < out; ++o) {
            for (i = 0; i < in; ++i) buf[i] = dead[i] ? 0.0f : w[o * in + i];
            for (k = 0; k < groups; ++k) sc[o * groups + k] = ref_fit(c, buf + k * gs, gs, &zr[o * groups + k]);
        }
    for (i = 0; i < in; ++i) {
        int col = perm[i], g = col / gs;
        double d = hd[i * in + i];
        if (dyn && i % gs == 0)
            for (o = 0; o < out; ++o) {
                for (k = 0; k < gs; ++k) buf[k] = (float)ww[o * in + i + k];
                sc[o * groups + g] = ref_fit(c, buf, gs, &zr[o * groups + g]);
            }
        for (o = 0; o < out; ++o) {
            int code;
            float v = ref_q1(c, ww[o * in + i], sc[o * groups + g], zr[o * groups + g], &code);
            double e = (ww[o * in + i] - (double)v) / d;
            wq[o * in + col] = v;
            codes[o * in + col] = code;
            for (j = i + 1; j < in; ++j) ww[o * in + j] -= e * hd[i * in + j];
        }
        for (j = i + 1; j < in; ++j)
            for (k = i + 1; k < in; ++k) hd[j * in + k] -= hd[j * in + i] * hd[i * in + k] / d;
    }
    free(hd); free(ww); free(sc); free(zr); free(buf); free(perm); free(dead);
}

typedef struct gptq_case { int out, in, n; float* x; float* w; double* h; } gptq_case;

static void gptq_case_init(gptq_case* g, int out, int in, int n, unsigned long long seed) {
    g->out = out; g->in = in; g->n = n;
    g->x = (float*)malloc(sizeof(float) * (size_t)(n * in));
    g->w = (float*)malloc(sizeof(float) * (size_t)(out * in));
    g->h = (double*)calloc((size_t)(in * in), sizeof(double));
    qt_seed(seed);
    make_calib(g->x, n, in, in / 4, 0.05);
    fill_normal(g->w, out * in, 0.1);
    QT_OK(quarot_hessian_accumulate_f64(g->h, in, g->x, n, in));
}

static void gptq_case_free(gptq_case* g) { free(g->x); free(g->w); free(g->h); }

static quarot_gptq_desc mkgptq(int bits, int asym, int64_t gs, int act_order) {
    quarot_gptq_desc d;
    memset(&d, 0, sizeof d);
    d.quant = mkdesc(bits, asym, gs, 1.0f, 0);
    d.act_order = act_order;
    return d;
}

static void test_gptq_beats_rtn(void) {
    gptq_case g;
    const int out = 24, in = qt_quick() ? 48 : 96, n = 4 * in;
    float* wq = (float*)malloc(sizeof(float) * (size_t)(out * in));
    float* wr = (float*)malloc(sizeof(float) * (size_t)(out * in));
    int asym, gi, act;
    gptq_case_init(&g, out, in, n, 77);
    for (asym = 0; asym < 2; ++asym)
        for (gi = 0; gi < 2; ++gi)
            for (act = 0; act < 2; ++act) {
                quarot_gptq_desc d = mkgptq(4, asym, gi ? 16 : 0, act);
                quarot_gptq_info info;
                double eg, er;
                memcpy(wq, g.w, sizeof(float) * (size_t)(out * in));
                memcpy(wr, g.w, sizeof(float) * (size_t)(out * in));
                QT_OK(quarot_gptq_f32(wq, out, in, in, g.h, in, &d, NULL, NULL, NULL, &info, NULL));
                QT_OK(quarot_fake_quant_f32(wr, out, in, in, &d.quant));
                eg = out_err(g.x, n, in, g.w, wq, out);
                er = out_err(g.x, n, in, g.w, wr, out);
                printf("    asym %d groups %d act_order %d: ||X dW^T||^2 gptq %.4g rtn %.4g (ratio %.3f)\n",
                       asym, gi, act, eg, er, eg / er);
                /* correlated features: GPTQ must cut the output error at least in half */
                QT_CHECKF(eg < 0.5 * er, "gptq %g vs rtn %g", eg, er);
                QT_CHECK(info.bad_column == -1 && info.dead_columns == 0 && info.damp > 0.0);
            }
    gptq_case_free(&g);
    free(wq);
    free(wr);
}

static void test_gptq_matches_reference(void) {
    gptq_case g;
    const int out = 16, in = 136, n = 544;   /* 136 = 2*64 + 8: three blocks of the factorization */
    float* wq = (float*)malloc(sizeof(float) * (size_t)(out * in));
    float* wref = (float*)malloc(sizeof(float) * (size_t)(out * in));
    int8_t* q = (int8_t*)malloc((size_t)(out * in));
    int* qref = (int*)malloc(sizeof(int) * (size_t)(out * in));
    int asym, gi, act, i;
    gptq_case_init(&g, out, in, n, 99);
    for (asym = 0; asym < 2; ++asym)
        for (gi = 0; gi < 2; ++gi)
            for (act = 0; act < 2; ++act) {
                quarot_gptq_desc d = mkgptq(3, asym, gi ? 8 : 0, act);
                ref_cfg c;
                float* sc = (float*)malloc(sizeof(float) * (size_t)(out * in));
                float* zr = (float*)malloc(sizeof(float) * (size_t)(out * in));
                float* dq = (float*)malloc(sizeof(float) * (size_t)(out * in));
                int same = 0;
                double eg, er;
                d.quant.clip_search = gi;   /* exercise the search in the grouped cases */
                d.block_size = 20;          /* lazy updates across blocks (24 with groups of 8) */
                c.bits = 3; c.asym = asym; c.search = gi; c.clip = 1.0;
                memcpy(wq, g.w, sizeof(float) * (size_t)(out * in));
                QT_OK(quarot_gptq_f32(wq, out, in, in, g.h, in, &d, q, sc, zr, NULL, NULL));
                ref_gptq(g.w, out, in, g.h, 0.01, &c, gi ? 8 : 0, act, wref, qref);
                for (i = 0; i < out * in; ++i) same += q[i] == qref[i];
                eg = out_err(g.x, n, in, g.w, wq, out);
                er = out_err(g.x, n, in, g.w, wref, out);
                /* the two formulations differ only by rounding: codes may flip at near-ties */
                printf("    asym %d groups %d act_order %d: %d/%d codes equal to the reference, error %.5g vs %.5g\n",
                       asym, gi, act, same, out * in, eg, er);
                QT_CHECKF(same >= out * in * 99 / 100, "asym %d gs %d act %d: %d of %d codes agree", asym, gi, act, same, out * in);
                QT_CHECKF(fabs(eg - er) <= 0.02 * er, "asym %d gs %d act %d: error %g vs reference %g", asym, gi, act, eg, er);
                /* codes and scales reproduce the written weights exactly */
                QT_OK(quarot_dequantize_f32(q, sc, zr, out, in, &d.quant, dq, in));
                QT_EQ_INT(bitdiff(dq, wq, out * in), 0);
                free(sc); free(zr); free(dq);
            }
    gptq_case_free(&g);
    free(wq); free(wref); free(q); free(qref);
}

static void test_gptq_identity_is_rtn(void) {
    const int out = 10, in = 40;
    double* h = (double*)calloc((size_t)(in * in), sizeof(double));
    float w[10 * 40], a[10 * 40], b[10 * 40];
    int i, asym, gi, act;
    for (i = 0; i < in; ++i) h[i * in + i] = 1.0;
    qt_seed(3);
    fill_normal(w, out * in, 1.0);
    for (asym = 0; asym < 2; ++asym)
        for (gi = 0; gi < 2; ++gi)
            for (act = 0; act < 2; ++act) {
                quarot_gptq_desc d = mkgptq(4, asym, gi ? 8 : 0, act);
                d.quant.clip_search = asym;
                memcpy(a, w, sizeof w);
                memcpy(b, w, sizeof w);
                QT_OK(quarot_gptq_f32(a, out, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL));
                QT_OK(quarot_fake_quant_f32(b, out, in, in, &d.quant));
                QT_CHECKF(bitdiff(a, b, out * in) == 0, "asym %d groups %d act %d", asym, gi, act);
            }
    free(h);
}

static void test_gptq_loss_and_invariance(void) {
    gptq_case g;
    const int out = 40, in = 150, n = 600;   /* out > 32: two row tiles; in: three factorization blocks */
    float *w1 = (float*)malloc(sizeof(float) * (size_t)(out * in)), *w2 = (float*)malloc(sizeof(float) * (size_t)(out * in));
    quarot_gptq_desc d = mkgptq(4, 0, 0, 0);
    quarot_gptq_info info;
    double e;
    int bs, gi;
    static const int64_t bsv[] = {1, 7, 200};
    gptq_case_init(&g, out, in, n, 5);
    /* without damping, GPTQ's accumulated loss is exactly ||X (W - W^)^T||^2 (up to rounding) */
    d.damp_ratio = -1.0;
    memcpy(w1, g.w, sizeof(float) * (size_t)(out * in));
    QT_OK(quarot_gptq_f32(w1, out, in, in, g.h, in, &d, NULL, NULL, NULL, &info, NULL));
    e = out_err(g.x, n, in, g.w, w1, out);
    QT_NEAR(info.loss, e, 1e-6 * e);
    QT_CHECK(info.damp == 0.0);
    /* the block size only changes speed: bit-identical outputs, with groups as well */
    for (gi = 0; gi < 2; ++gi) {
        d = mkgptq(4, gi, gi ? 10 : 0, 0);
        memcpy(w1, g.w, sizeof(float) * (size_t)(out * in));
        d.block_size = 128;   /* one lazy update at column 128 */
        QT_OK(quarot_gptq_f32(w1, out, in, in, g.h, in, &d, NULL, NULL, NULL, NULL, NULL));
        for (bs = 0; bs < 2; ++bs) {
            memcpy(w2, g.w, sizeof(float) * (size_t)(out * in));
            d.block_size = bsv[bs];
            QT_OK(quarot_gptq_f32(w2, out, in, in, g.h, in, &d, NULL, NULL, NULL, NULL, NULL));
            QT_CHECKF(bitdiff(w1, w2, out * in) == 0, "groups %d block %lld", gi, (long long)bsv[bs]);
        }
    }
    gptq_case_free(&g);
    free(w1);
    free(w2);
}

/* A parallel hook that runs tasks in reverse order, counting them. */
static int64_t par_tasks;
static void par_run(void* user, quarot_task_fn fn, void* arg, int64_t n) {
    int64_t i;
    (void)user;
    for (i = n - 1; i >= 0; --i) { fn(arg, i); ++par_tasks; }
}
static long live_allocs;
static int fail_alloc;
static void* count_alloc(size_t n, void* u) { (void)u; if (fail_alloc) return NULL; ++live_allocs; return malloc(n); }
static void count_free(void* p, void* u) { (void)u; if (p) --live_allocs; free(p); }

static void test_gptq_env_and_strides(void) {
    gptq_case g;
    const int out = 70, in = 32, n = 128, stride = 37;
    float *w1 = (float*)malloc(sizeof(float) * (size_t)(out * in)), *w2 = (float*)malloc(sizeof(float) * (size_t)(out * stride));
    quarot_gptq_desc d = mkgptq(4, 1, 8, 0);
    quarot_env env;
    int r, i;
    gptq_case_init(&g, out, in, n, 8);
    memcpy(w1, g.w, sizeof(float) * (size_t)(out * in));
    QT_OK(quarot_gptq_f32(w1, out, in, in, g.h, in, &d, NULL, NULL, NULL, NULL, NULL));
    memset(&env, 0, sizeof env);
    env.allocator.alloc = count_alloc;
    env.allocator.free = count_free;
    env.parallel.run = par_run;
    env.parallel.n_threads = 2;
    for (r = 0; r < out; ++r)
        for (i = 0; i < stride; ++i) w2[r * stride + i] = i < in ? g.w[r * in + i] : -7.0f;
    par_tasks = 0;
    QT_OK(quarot_gptq_f32(w2, out, in, stride, g.h, in, &d, NULL, NULL, NULL, NULL, &env));
    QT_EQ_INT(par_tasks, 2);
    QT_EQ_INT(live_allocs, 0);
    for (r = 0; r < out; ++r) {
        QT_EQ_INT(bitdiff(w2 + r * stride, w1 + r * in, in), 0);
        for (i = in; i < stride; ++i) QT_CHECK(w2[r * stride + i] == -7.0f);
    }
    fail_alloc = 1;
    QT_ERR(quarot_gptq_f32(w2, out, in, stride, g.h, in, &d, NULL, NULL, NULL, NULL, &env), QUAROT_ERR_OUT_OF_MEMORY);
    fail_alloc = 0;
    QT_EQ_INT(live_allocs, 0);
    gptq_case_free(&g);
    free(w1);
    free(w2);
}

/* The SIMD helpers of the factorization and the updates give the bits of the scalar ones, and a
   parallel hook (factorization chunks and row tiles) gives the bits of a serial run. */
static void test_gptq_isa_and_threads(void) {
    gptq_case g;
    const int out = 40, in = qt_quick() ? 136 : 600, n = in + in / 2;   /* 600: two column chunks */
    float *wr = (float*)malloc(sizeof(float) * (size_t)(out * in)), *wd = (float*)malloc(sizeof(float) * (size_t)(out * in));
    static const quarot_isa isas[] = {QUAROT_ISA_DEFAULT, QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON};
    quarot_gptq_desc d = mkgptq(4, 1, 8, 1);
    quarot_gptq_info ir, id;
    int k;
    quarot_env env;
    double* hr = (double*)calloc((size_t)(in * in), sizeof(double));
    gptq_case_init(&g, out, in, n, 41);
    memset(&env, 0, sizeof env);
    env.parallel.run = par_run;
    env.parallel.n_threads = 3;
    d.quant.isa = QUAROT_ISA_REF;
    memcpy(wr, g.w, sizeof(float) * (size_t)(out * in));
    QT_OK(quarot_gptq_f32(wr, out, in, in, g.h, in, &d, NULL, NULL, NULL, &ir, NULL));
    for (k = 0; k < 5; ++k) {
        if (!quarot_isa_compiled(isas[k])) continue;
        d.quant.isa = isas[k];
        memcpy(wd, g.w, sizeof(float) * (size_t)(out * in));
        par_tasks = 0;
        QT_OK(quarot_gptq_f32(wd, out, in, in, g.h, in, &d, NULL, NULL, NULL, &id, &env));
        QT_CHECK(par_tasks > 2);
        QT_CHECKF(bitdiff(wr, wd, out * in) == 0, "%s: %lld differ", quarot_isa_name(isas[k]), (long long)bitdiff(wr, wd, out * in));
        /* the loss sums every rounding error e of every column: equal bits say every update was equal */
        QT_CHECKF(memcmp(&ir.loss, &id.loss, sizeof(double)) == 0, "%s: loss %.17g vs %.17g", quarot_isa_name(isas[k]), ir.loss, id.loss);
    }
    /* the Hessian of the same rows in chunks of 8 from one call, and row by row in many calls */
    {
        int r, i;
        double md = 0.0, mh = 0.0;
        for (r = 0; r < 24; ++r) QT_OK(quarot_hessian_accumulate_f64(hr, in, g.x + r * in, 1, in));
        memset(g.h, 0, sizeof(double) * (size_t)(in * in));
        QT_OK(quarot_hessian_accumulate_f64(g.h, in, g.x, 24, in));
        for (i = 0; i < in * in; ++i) {
            if (fabs(hr[i] - g.h[i]) > md) md = fabs(hr[i] - g.h[i]);
            if (fabs(g.h[i]) > mh) mh = fabs(g.h[i]);
        }
        QT_CHECKF(md <= 1e-13 * mh, "max diff %g, max |h| %g", md, mh);   /* sums of 24 terms, regrouped */
    }
    free(hr);
    gptq_case_free(&g);
    free(wr);
    free(wd);
}

static void test_gptq_dead_columns(void) {
    const int out = 8, in = 24, n = 96;
    float x[96 * 24], w[8 * 24], wq[8 * 24];
    double h[24 * 24];
    quarot_gptq_desc d = mkgptq(4, 0, 0, 1);
    quarot_gptq_info info;
    int r, i;
    qt_seed(12);
    make_calib(x, n, in, 8, 0.1);
    for (r = 0; r < n; ++r) { x[r * in + 5] = 0.0f; x[r * in + 17] = 0.0f; }   /* two features never fire */
    memset(h, 0, sizeof h);
    QT_OK(quarot_hessian_accumulate_f64(h, in, x, n, in));
    fill_normal(w, out * in, 1.0);
    memcpy(wq, w, sizeof w);
    QT_OK(quarot_gptq_f32(wq, out, in, in, h, in, &d, NULL, NULL, NULL, &info, NULL));
    QT_EQ_INT(info.dead_columns, 2);
    for (r = 0; r < out; ++r) QT_CHECK(f2u(wq[r * in + 5]) == 0u && f2u(wq[r * in + 17]) == 0u);
    for (r = 0; r < out; ++r)
        for (i = 0; i < in; ++i) QT_CHECK(isfinite(wq[r * in + i]));
}

static void test_gptq_errors(void) {
    const int out = 6, in = 16;
    double h[16 * 16], hbad[16 * 16];
    float w[6 * 16], keep[6 * 16], x[64 * 16];
    int8_t q[6 * 16];
    float sc[6 * 16];
    quarot_gptq_desc d = mkgptq(4, 0, 0, 0);
    quarot_gptq_info info;
    int i, r;
    qt_seed(31);
    make_calib(x, 64, in, 8, 0.1);
    memset(h, 0, sizeof h);
    QT_OK(quarot_hessian_accumulate_f64(h, in, x, 64, in));
    fill_normal(w, out * in, 1.0);
    memcpy(keep, w, sizeof w);
    QT_ERR(quarot_gptq_f32(NULL, out, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_gptq_f32(w, out, in, in, NULL, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_gptq_f32(w, out, in, in, h, in - 1, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_SHAPE_MISMATCH);
    QT_ERR(quarot_gptq_f32(w, out, in, in - 1, h, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_gptq_f32(w, -1, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(quarot_gptq_f32(w, 0, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL));
    d.quant.group_size = 5;   QT_ERR(quarot_gptq_f32(w, out, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkgptq(4, 0, 0, 2);   QT_ERR(quarot_gptq_f32(w, out, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkgptq(4, 0, 0, 0); d.block_size = -1;
    QT_ERR(quarot_gptq_f32(w, out, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkgptq(4, 0, 0, 0); d.damp_ratio = NAN;
    QT_ERR(quarot_gptq_f32(w, out, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d = mkgptq(4, 1, 0, 0);
    QT_ERR(quarot_gptq_f32(w, out, in, in, h, in, &d, q, sc, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_EQ_INT(bitdiff(w, keep, out * in), 0);
    /* NaN in W or H */
    d = mkgptq(4, 0, 0, 0);
    w[3 * in + 2] = NAN;
    QT_ERR(quarot_gptq_f32(w, out, in, in, h, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_NONFINITE);
    w[3 * in + 2] = keep[3 * in + 2];
    memcpy(hbad, h, sizeof h);
    hbad[2 * in + 9] = INFINITY;
    QT_ERR(quarot_gptq_f32(w, out, in, in, hbad, in, &d, NULL, NULL, NULL, NULL, NULL), QUAROT_ERR_NONFINITE);
    /* indefinite H: a negative eigenvalue that 1% damping cannot lift */
    memcpy(hbad, h, sizeof h);
    for (i = 0; i < in; ++i)
        for (r = 0; r < in; ++r) hbad[i * in + r] -= 3.0 * h[4 * in + 4] * (i == 4) * (r == 4);
    QT_ERR(quarot_gptq_f32(w, out, in, in, hbad, in, &d, NULL, NULL, NULL, &info, NULL), QUAROT_ERR_NOT_CONVERGED);
    QT_CHECK(info.bad_column >= 0 && info.bad_column < in);
    QT_EQ_INT(bitdiff(w, keep, out * in), 0);
    /* singular H (feature 9 duplicates feature 3, no damping): numerically not positive definite */
    for (r = 0; r < 64; ++r) x[r * in + 9] = x[r * in + 3];
    memset(hbad, 0, sizeof hbad);
    QT_OK(quarot_hessian_accumulate_f64(hbad, in, x, 64, in));
    d.damp_ratio = -1.0;
    QT_OK(quarot_gptq_f32(w, out, in, in, h, in, &d, NULL, NULL, NULL, &info, NULL));   /* full rank: fine */
    memcpy(w, keep, sizeof w);
    QT_ERR(quarot_gptq_f32(w, out, in, in, hbad, in, &d, NULL, NULL, NULL, &info, NULL), QUAROT_ERR_NOT_CONVERGED);
    QT_CHECK(info.bad_column == 3 || info.bad_column == 9);
    QT_EQ_INT(bitdiff(w, keep, out * in), 0);
    /* ...which the default damping repairs */
    d.damp_ratio = 0.0;
    QT_OK(quarot_gptq_f32(w, out, in, in, hbad, in, &d, NULL, NULL, NULL, &info, NULL));
    QT_CHECK(info.bad_column == -1);
}

int main(void) {
    QT_RUN(test_formulas_vs_reference);
    QT_RUN(test_ties_round_to_even);
    QT_RUN(test_edge_rows);
    QT_RUN(test_error_decreases_with_bits);
    QT_RUN(test_clip_search_never_worse);
    QT_RUN(test_integer_roundtrip);
    QT_RUN(test_simd_matches_ref);
    QT_RUN(test_bad_arguments);
    QT_RUN(test_metrics);
    QT_RUN(test_hessian_accumulate);
    QT_RUN(test_hessian_blocked_bits);
    QT_RUN(test_gptq_beats_rtn);
    QT_RUN(test_gptq_matches_reference);
    QT_RUN(test_gptq_identity_is_rtn);
    QT_RUN(test_gptq_loss_and_invariance);
    QT_RUN(test_gptq_env_and_strides);
    QT_RUN(test_gptq_isa_and_threads);
    QT_RUN(test_gptq_dead_columns);
    QT_RUN(test_gptq_errors);
    return qt_finish("test_quant");
}
