/* Fast Hadamard transforms (quarot.h >>transform, >>transform_simd).

   Truth is independent of the fast code: for powers of two the Sylvester entry (-1)^popcount(i&j)
   summed in double (every entry for n <= 1024, random output columns above); for n = K*2^m the dense
   matrix of quarot_hadamard_build_f64 times x in double. Tolerance 1e-5 relative to max|y| (float
   butterflies lose about log2(n) * 2^-24). Every compiled SIMD path must equal _ref bit for bit
   (memcmp) for the FWHT and for the whole plan apply (K mixing, signs, transpose, scaling), on odd
   row counts, strides > n and unaligned row starts. The inverse (apply, then apply with transpose)
   gives x back within 1e-6 relative (2-norm). The column form (quarot_hadamard_apply_cols_f32) equals the
   REF row apply on the transposed columns bit for bit. QT_QUICK=1 (qemu, sanitizers) shrinks sizes. */
#include "quarot.h"
#include "qt.h"

#include <stdint.h>

static const quarot_isa all_isas[] = {QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON};
#define N_ISAS ((int)(sizeof all_isas / sizeof all_isas[0]))

static void fill_uniform(float* x, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) x[i] = (float)(2.0 * qt_uniform() - 1.0);
}

/* Mostly signed zeros, some +-1: exact cancellations everywhere, so results and partial sums are
   often +0 or -0 and any change in operation order or in the first term of a sum shows in memcmp. */
static void fill_zeros(float* x, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) {
        const double u = qt_uniform();
        x[i] = u < 0.4 ? 0.0f : u < 0.8 ? -0.0f : u < 0.9 ? 1.0f : -1.0f;
    }
}

/* Test data of kind 0 (uniform) or 1 (mostly signed zeros). */
static void fill_kind(float* x, int64_t n, int kind) {
    if (kind == 0) fill_uniform(x, n);
    else fill_zeros(x, n);
}

static void fill_signs(float* s, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) s[i] = qt_uniform() < 0.5 ? -1.0f : 1.0f;
}

/* The desc of option set `variant` (0..7): bit 0 signs sg, bit 1 transpose, bit 2 unnormalized; REF. */
static void variant_desc(quarot_hadamard_apply_desc* d, int variant, const float* sg) {
    memset(d, 0, sizeof *d);
    d->signs = (variant & 1) ? sg : NULL;
    d->transpose = (variant >> 1) & 1;
    d->unnormalized = (variant >> 2) & 1;
    d->isa = QUAROT_ISA_REF;
}

static int popcount64(uint64_t v) {
    int c = 0;
    while (v) { v &= v - 1; ++c; }
    return c;
}

/* max |a - b| / max |b| over n entries (b in double). */
static double rel_err(const float* a, const double* b, int64_t n) {
    double num = 0.0, den = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) {
        const double d = fabs((double)a[i] - b[i]);
        if (d > num) num = d;
        if (fabs(b[i]) > den) den = fabs(b[i]);
    }
    return den > 0.0 ? num / den : num;
}

/* ---- powers of two against the Sylvester formula ------------------------------------------ */

static void test_fwht_vs_sylvester(void) {
    const int mmax = qt_quick() ? 11 : 15;
    int m;
    qt_seed(1);
    for (m = 0; m <= mmax; ++m) {
        const int64_t n = (int64_t)1 << m;
        const int64_t ncols = n <= 1024 ? n : 64;     /* output columns checked */
        float* x = (float*)malloc(sizeof(float) * (size_t)n);
        float* y = (float*)malloc(sizeof(float) * (size_t)n);
        double* t = (double*)malloc(sizeof(double) * (size_t)ncols);
        float* yc = (float*)malloc(sizeof(float) * (size_t)ncols);
        int64_t c, i;
        fill_uniform(x, n);
        memcpy(y, x, sizeof(float) * (size_t)n);
        QT_OK(quarot_fwht_f32(y, n, 1, n, QUAROT_ISA_DEFAULT));
        for (c = 0; c < ncols; ++c) {
            const int64_t j = n <= 1024 ? c : (int64_t)(qt_uniform() * (double)n);
            double s = 0.0;
            for (i = 0; i < n; ++i) s += (popcount64((uint64_t)(i & j)) & 1) ? -(double)x[i] : (double)x[i];
            t[c] = s;
            yc[c] = y[j];
        }
        QT_CHECKF(rel_err(yc, t, ncols) <= 1e-5, "n = %lld: relative error %.3g", (long long)n, rel_err(yc, t, ncols));
        free(x); free(y); free(t); free(yc);
    }
}

/* ---- plan apply against the dense matrix of the hadamard module ----------------------------- */

/* y = x * Q for one row: forward Q = D*H/sqrt(n) (signs may be NULL), transpose Q^T = H^T*D/sqrt(n). */
static void dense_apply(const double* h, int64_t n, const float* x, const float* signs, int transpose,
                        int normalized, double* y) {
    const double s = normalized ? 1.0 / sqrt((double)n) : 1.0;
    int64_t i, j;
    for (j = 0; j < n; ++j) {
        double acc = 0.0;
        for (i = 0; i < n; ++i) {
            if (!transpose) acc += (double)x[i] * (signs ? (double)signs[i] : 1.0) * h[i * n + j];
            else acc += (double)x[i] * h[j * n + i];
        }
        if (transpose && signs) acc *= (double)signs[j];
        y[j] = acc * s;
    }
}

/* Checks apply_f32 on 3 rows of order n against the dense matrix: forward and transpose, with and
   without signs, normalized; and that transpose undoes forward. Returns 0 if n is unavailable. */
static int check_plan_dense(int64_t n) {
    quarot_hadamard_plan p;
    quarot_hadamard_apply_desc d;
    const int64_t rows = 3, stride = n + 5;
    double* h;
    double* t;
    float *x, *y, *s;
    void* work;
    size_t ws;
    int variant;
    int64_t r;
    if (quarot_hadamard_plan_init(&p, n, NULL) != QUAROT_OK) return 0;
    h = (double*)malloc(sizeof(double) * (size_t)(n * n));
    t = (double*)malloc(sizeof(double) * (size_t)n);
    x = (float*)malloc(sizeof(float) * (size_t)(rows * stride));
    y = (float*)malloc(sizeof(float) * (size_t)(rows * stride));
    s = (float*)malloc(sizeof(float) * (size_t)n);
    ws = quarot_hadamard_workspace_size(&p);
    work = malloc(ws + 1);
    QT_OK(quarot_hadamard_build_f64(n, 0, h, NULL));
    fill_uniform(x, rows * stride);
    fill_signs(s, n);
    for (variant = 0; variant < 4; ++variant) {
        memset(&d, 0, sizeof d);
        d.signs = (variant & 1) ? s : NULL;
        d.transpose = (variant & 2) ? 1 : 0;
        memcpy(y, x, sizeof(float) * (size_t)(rows * stride));
        QT_OK(quarot_hadamard_apply_f32(&p, &d, y, rows, stride, work, ws));
        for (r = 0; r < rows; ++r) {
            double e;
            dense_apply(h, n, x + r * stride, d.signs, d.transpose, 1, t);
            e = rel_err(y + r * stride, t, n);
            QT_CHECKF(e <= 1e-5, "n = %lld (%s) signs %d transpose %d row %lld: relative error %.3g",
                      (long long)n, p.info.text, variant & 1, d.transpose, (long long)r, e);
        }
    }
    /* inverse: forward with signs, then transpose with the same signs, gives x back */
    memset(&d, 0, sizeof d);
    d.signs = s;
    memcpy(y, x, sizeof(float) * (size_t)(rows * stride));
    QT_OK(quarot_hadamard_apply_f32(&p, &d, y, rows, stride, work, ws));
    d.transpose = 1;
    QT_OK(quarot_hadamard_apply_f32(&p, &d, y, rows, stride, work, ws));
    for (r = 0; r < rows; ++r) {   /* ||y - x|| / ||x|| <= 1e-6 (a few float roundings per entry) */
        double e = 0.0, nx = 0.0;
        int64_t i;
        for (i = 0; i < n; ++i) {
            const double di = (double)y[r * stride + i] - (double)x[r * stride + i];
            e += di * di;
            nx += (double)x[r * stride + i] * (double)x[r * stride + i];
        }
        QT_CHECKF(sqrt(e) <= 1e-6 * sqrt(nx), "n = %lld: Q^T Q x != x (relative error %.3g)", (long long)n, sqrt(e / nx));
    }
    free(h); free(t); free(x); free(y); free(s); free(work);
    quarot_hadamard_plan_free(&p);
    return 1;
}

static void test_plan_pow2_dense(void) {
    int m, mmax = qt_quick() ? 8 : 11;
    qt_seed(2);
    for (m = 0; m <= mmax; ++m) QT_CHECK(check_plan_dense((int64_t)1 << m));
}

static void test_plan_kronecker_dense(void) {
    /* every available core K <= 256 that is not a power of two, with a couple of m each */
    int64_t K;
    int tested = 0;
    qt_seed(3);
    for (K = 3; K <= 256; ++K) {
        int m, mtop;
        if ((K & (K - 1)) == 0 || !quarot_hadamard_available(K)) continue;
        mtop = qt_quick() ? (K <= 64 ? 2 : 0) : (K <= 64 ? 5 : K <= 128 ? 4 : 3);
        for (m = 0; m <= mtop; m += (m == 0 ? 1 : 2)) {
            const int64_t n = K << m;
            QT_CHECKF(check_plan_dense(n), "n = %lld = %lld * 2^%d should be available", (long long)n, (long long)K, m);
            ++tested;
        }
    }
    QT_CHECK(tested >= 100 || (qt_quick() && tested >= 50));
    printf("    %d orders K*2^m checked against the dense matrix\n", tested);
}

/* Paley II cores with 2^m >= 16 mix in halves (declaration notes, step 3'): 36 = 2(17+1), 52 =
   2(25+1) over GF(25), 76 = 2(37+1), 148 = 2(73+1), with 2^m = 16 (one vector of AVX-512 per half
   row) and 32, against the dense matrix, which stays the one the hadamard module builds. */
static void test_plan_paley2_split_dense(void) {
    const int64_t sizes[] = {36 * 16, 52 * 16, 76 * 16, 148 * 16, 36 * 32};
    const int count = qt_quick() ? 3 : (int)(sizeof sizes / sizeof sizes[0]);
    int s;
    qt_seed(13);
    for (s = 0; s < count; ++s) {
        quarot_hadamard_plan p;
        QT_OK(quarot_hadamard_plan_init(&p, sizes[s], NULL));
        QT_CHECKF(p.mix_half != NULL && p.info.construction == QUAROT_HADAMARD_PALEY2,
                  "n = %lld (%s): split mixing expected", (long long)sizes[s], p.info.text);
        quarot_hadamard_plan_free(&p);
        QT_CHECK(check_plan_dense(sizes[s]));
    }
}

/* Unnormalized apply is x*D*H (no scale); f32 fwht equals the unnormalized plan for powers of two. */
static void test_unnormalized(void) {
    const int64_t sizes[] = {1, 8, 64, 1024, 12, 28 * 8, 172};
    int k;
    qt_seed(4);
    for (k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); ++k) {
        const int64_t n = sizes[k];
        quarot_hadamard_plan p;
        quarot_hadamard_apply_desc d;
        double* h = (double*)malloc(sizeof(double) * (size_t)(n * n));
        double* t = (double*)malloc(sizeof(double) * (size_t)n);
        float* x = (float*)malloc(sizeof(float) * (size_t)n);
        float* y = (float*)malloc(sizeof(float) * (size_t)n);
        float* s = (float*)malloc(sizeof(float) * (size_t)n);
        size_t ws;
        void* work;
        QT_OK(quarot_hadamard_plan_init(&p, n, NULL));
        ws = quarot_hadamard_workspace_size(&p);
        work = ws ? malloc(ws) : NULL;
        QT_OK(quarot_hadamard_build_f64(n, 0, h, NULL));
        fill_uniform(x, n);
        fill_signs(s, n);
        memset(&d, 0, sizeof d);
        d.unnormalized = 1;
        d.signs = s;
        memcpy(y, x, sizeof(float) * (size_t)n);
        QT_OK(quarot_hadamard_apply_f32(&p, &d, y, 1, n, work, ws));
        dense_apply(h, n, x, s, 0, 0, t);
        QT_CHECKF(rel_err(y, t, n) <= 1e-5, "unnormalized n = %lld: %.3g", (long long)n, rel_err(y, t, n));
        if ((n & (n - 1)) == 0) {
            float* z = (float*)malloc(sizeof(float) * (size_t)n);
            int64_t i;
            d.signs = NULL;
            memcpy(y, x, sizeof(float) * (size_t)n);
            memcpy(z, x, sizeof(float) * (size_t)n);
            QT_OK(quarot_hadamard_apply_f32(&p, &d, y, 1, n, work, ws));
            QT_OK(quarot_fwht_f32(z, n, 1, n, QUAROT_ISA_DEFAULT));
            QT_CHECK(memcmp(y, z, sizeof(float) * (size_t)n) == 0);
            /* normalized = unnormalized times (float)(1/sqrt(n)), as a separate multiply */
            d.unnormalized = 0;
            memcpy(y, x, sizeof(float) * (size_t)n);
            QT_OK(quarot_hadamard_apply_f32(&p, &d, y, 1, n, work, ws));
            for (i = 0; i < n; ++i) z[i] = z[i] * (float)(1.0 / sqrt((double)n));
            QT_CHECK(memcmp(y, z, sizeof(float) * (size_t)n) == 0);
            free(z);
        }
        free(h); free(t); free(x); free(y); free(s); free(work);
        quarot_hadamard_plan_free(&p);
    }
}

/* ---- f64 path ------------------------------------------------------------------------------- */

static void test_f64_dense(void) {
    const int64_t sizes[] = {1, 2, 16, 256, 12, 20 * 4, 172, 28 * 16, 36 * 16};
    int k;
    qt_seed(5);
    for (k = 0; k < (int)(sizeof sizes / sizeof sizes[0]); ++k) {
        const int64_t n = sizes[k], rows = 2, stride = n + 1;
        quarot_hadamard_plan p;
        quarot_hadamard_apply_desc d;
        double* h = (double*)malloc(sizeof(double) * (size_t)(n * n));
        double* x = (double*)malloc(sizeof(double) * (size_t)(rows * stride));
        double* y = (double*)malloc(sizeof(double) * (size_t)(rows * stride));
        double* sd = (double*)malloc(sizeof(double) * (size_t)n);
        float* sf = (float*)malloc(sizeof(float) * (size_t)n);
        size_t ws;
        void* work;
        int variant;
        int64_t i, j, r;
        QT_OK(quarot_hadamard_plan_init(&p, n, NULL));
        ws = quarot_hadamard_workspace_size(&p);
        work = ws ? malloc(ws) : NULL;
        QT_OK(quarot_hadamard_build_f64(n, 1, h, NULL));
        for (i = 0; i < rows * stride; ++i) x[i] = qt_normal();
        fill_signs(sf, n);
        for (i = 0; i < n; ++i) sd[i] = (double)sf[i];
        for (variant = 0; variant < 6; ++variant) {
            double err = 0.0, big = 0.0;
            memset(&d, 0, sizeof d);
            d.transpose = variant & 1;
            if (variant >= 2) d.signs_f64 = sd;
            if (variant >= 4) { d.signs_f64 = NULL; d.signs = sf; }   /* f64 falls back to the float signs */
            memcpy(y, x, sizeof(double) * (size_t)(rows * stride));
            QT_OK(quarot_hadamard_apply_f64(&p, &d, y, rows, stride, work, ws));
            for (r = 0; r < rows; ++r) {
                for (j = 0; j < n; ++j) {
                    double acc = 0.0;
                    for (i = 0; i < n; ++i) {
                        const double xi = x[r * stride + i];
                        acc += d.transpose ? xi * h[j * n + i] : xi * (variant >= 2 ? sd[i] : 1.0) * h[i * n + j];
                    }
                    if (d.transpose && variant >= 2) acc *= sd[j];
                    if (fabs(acc - y[r * stride + j]) > err) err = fabs(acc - y[r * stride + j]);
                    if (fabs(acc) > big) big = fabs(acc);
                }
            }
            QT_CHECKF(err <= 1e-12 * big, "f64 n = %lld variant %d: error %.3g of %.3g", (long long)n, variant, err, big);
        }
        if ((n & (n - 1)) == 0) {   /* quarot_fwht_f64 is the unnormalized transform */
            double* z = (double*)malloc(sizeof(double) * (size_t)n);
            double err = 0.0;
            memcpy(z, x, sizeof(double) * (size_t)n);
            QT_OK(quarot_fwht_f64(z, n, 1, n));
            for (j = 0; j < n; ++j) {
                double acc = 0.0;
                for (i = 0; i < n; ++i) acc += (popcount64((uint64_t)(i & j)) & 1) ? -x[i] : x[i];
                if (fabs(acc - z[j]) > err) err = fabs(acc - z[j]);
            }
            QT_CHECKF(err <= 1e-12 * sqrt((double)n) * 4.0, "fwht_f64 n = %lld: error %.3g", (long long)n, err);
            free(z);
        }
        free(h); free(x); free(y); free(sd); free(sf); free(work);
        quarot_hadamard_plan_free(&p);
    }
}

/* ---- SIMD == _ref, bit for bit -------------------------------------------------------------- */

/* rows of length n at x + offset, stride elements apart; the isa result must memcmp-equal _ref. */
static void test_fwht_simd_exact(void) {
    const int mmax = qt_quick() ? 11 : 15;
    int m, k, compiled = 0;
    qt_seed(6);
    for (k = 0; k < N_ISAS; ++k) {
        const quarot_isa isa = all_isas[k];
        if (!quarot_isa_compiled(isa)) continue;
        ++compiled;
        for (m = 0; m <= mmax; ++m) {
            const int64_t n = (int64_t)1 << m;
            const int64_t rows = m <= 10 ? 5 : 1, stride = n + (m % 3), off = m & 1;
            const size_t total = (size_t)(off + rows * stride);
            float* a = (float*)malloc(sizeof(float) * total);
            float* b = (float*)malloc(sizeof(float) * total);
            int kind;
            for (kind = 0; kind < 2; ++kind) {
                fill_kind(a, (int64_t)total, kind);
                memcpy(b, a, sizeof(float) * total);
                QT_OK(quarot_fwht_f32(a + off, n, rows, stride, QUAROT_ISA_REF));
                QT_OK(quarot_fwht_f32(b + off, n, rows, stride, isa));
                QT_CHECKF(memcmp(a, b, sizeof(float) * total) == 0, "%s fwht n = %lld data %d differs from ref",
                          quarot_isa_name(isa), (long long)n, kind);
            }
            free(a); free(b);
        }
    }
    printf("    %d SIMD paths compared (%s)\n", compiled, quarot_simd_name());
}

static void test_apply_simd_exact(void) {
    /* powers of two, and K*2^m with 2^m below, at and above every vector width (1, 2, 4, 8, 16, 32, ..) */
    const int64_t full[] = {2, 4, 16, 32, 256, 512, 4096, 8192, 12, 20, 28, 44, 92, 172, 12 * 2, 12 * 4, 20 * 8,
                            28 * 16, 36 * 32, 52 * 64, 60 * 128, 172 * 64, 28 * 512, 108 * 128, 236 * 4, 428 * 2,
                            924 * 32, 148 * 128, 36 * 16, 76 * 64, 52 * 256, 28 * 1024};
    const int64_t quick[] = {4, 16, 256, 4096, 12, 28, 172, 12 * 2, 20 * 4, 28 * 8, 36 * 16, 52 * 32, 172 * 64,
                             76 * 64, 28 * 32, 148 * 16};
    const int64_t* sizes = qt_quick() ? quick : full;
    const int count = qt_quick() ? (int)(sizeof quick / sizeof quick[0]) : (int)(sizeof full / sizeof full[0]);
    int k, s, variant, kind;
    qt_seed(7);
    for (kind = 0; kind < 2; ++kind)
    for (s = 0; s < count; ++s) {
        const int64_t n = sizes[s], rows = n > 8192 ? 1 : 3, stride = n + 3, off = 1;
        const size_t total = (size_t)(off + rows * stride);
        quarot_hadamard_plan p;
        float *x, *a, *b, *sg;
        size_t ws;
        void* work;
        if (quarot_hadamard_plan_init(&p, n, NULL) != QUAROT_OK) {
            QT_CHECKF(0, "plan for n = %lld", (long long)n);
            continue;
        }
        ws = quarot_hadamard_workspace_size(&p);
        work = ws ? malloc(ws) : NULL;
        x = (float*)malloc(sizeof(float) * total);
        a = (float*)malloc(sizeof(float) * total);
        b = (float*)malloc(sizeof(float) * total);
        sg = (float*)malloc(sizeof(float) * (size_t)n);
        fill_kind(x, (int64_t)total, kind);
        fill_signs(sg, n);
        for (variant = 0; variant < 8; ++variant) {
            quarot_hadamard_apply_desc d;
            variant_desc(&d, variant, sg);
            memcpy(a, x, sizeof(float) * total);
            QT_OK(quarot_hadamard_apply_f32(&p, &d, a + off, rows, stride, work, ws));
            for (k = 0; k < N_ISAS; ++k) {
                if (!quarot_isa_compiled(all_isas[k])) continue;
                d.isa = all_isas[k];
                memcpy(b, x, sizeof(float) * total);
                QT_OK(quarot_hadamard_apply_f32(&p, &d, b + off, rows, stride, work, ws));
                QT_CHECKF(memcmp(a, b, sizeof(float) * total) == 0, "%s apply n = %lld (%s) variant %d data %d differs from ref",
                          quarot_isa_name(d.isa), (long long)n, p.info.text, variant, kind);
            }
        }
        free(x); free(a); free(b); free(sg); free(work);
        quarot_hadamard_plan_free(&p);
    }
}

/* The column form: quarot_hadamard_apply_cols_f32 on every column of x [n][ld] gives exactly the
   bits of the REF row apply on the transposed columns, for REF and every compiled ISA, with the
   workspace and without it (every pass in x), every desc variant, data with signed zeros, 37 columns
   (a whole 32-column block, then a remainder of 5 the scalar code takes) and 21 (a 16-column block:
   the SIMD kernels on a narrower block), ld > cols, unaligned rows; the columns beyond cols are not
   touched. Sizes from 1 to 8192: one pass, two, and three or four (the skewed buffer). */
static void test_apply_cols_exact(void) {
    const int64_t full[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192};
    const int64_t quick[] = {1, 2, 16, 64, 512, 4096};
    const int64_t* sizes = qt_quick() ? quick : full;
    const int count = qt_quick() ? (int)(sizeof quick / sizeof quick[0]) : (int)(sizeof full / sizeof full[0]);
    const int64_t col_counts[2] = {37, 21};
    int s, variant, kind, k, c2, uw;
    qt_seed(11);
    for (s = 0; s < count; ++s)
    for (c2 = 0; c2 < 2; ++c2) {
        const int64_t n = sizes[s], cols = col_counts[c2], ld = cols + 11, off = 1;
        const size_t total = (size_t)(off + n * ld);
        quarot_hadamard_plan p;
        float *x, *ref, *t, *b, *sg;
        size_t ws;
        void* work;
        int64_t i, c, bad;
        if (quarot_hadamard_plan_init(&p, n, NULL) != QUAROT_OK) { QT_CHECKF(0, "plan for n = %lld", (long long)n); continue; }
        ws = quarot_hadamard_cols_workspace_size(&p);
        QT_CHECK(ws >= (size_t)n * 32 * sizeof(float));
        work = malloc(ws);
        x = (float*)malloc(sizeof(float) * total);
        ref = (float*)malloc(sizeof(float) * total);
        b = (float*)malloc(sizeof(float) * total);
        t = (float*)malloc(sizeof(float) * (size_t)(n * cols));
        sg = (float*)malloc(sizeof(float) * (size_t)n);
        for (kind = 0; kind < 2; ++kind) {
            fill_kind(x, (int64_t)total, kind);
            fill_signs(sg, n);
            for (variant = 0; variant < 8; ++variant) {
                quarot_hadamard_apply_desc d;
                variant_desc(&d, variant, sg);
                /* the truth: REF rows of the transpose, put back as columns */
                for (c = 0; c < cols; ++c)
                    for (i = 0; i < n; ++i) t[c * n + i] = x[off + i * ld + c];
                QT_OK(quarot_hadamard_apply_f32(&p, &d, t, cols, n, NULL, 0));
                memcpy(ref, x, sizeof(float) * total);
                for (c = 0; c < cols; ++c)
                    for (i = 0; i < n; ++i) ref[off + i * ld + c] = t[c * n + i];
                for (k = -1; k < N_ISAS; ++k) {
                    if (k >= 0 && !quarot_isa_compiled(all_isas[k])) continue;
                    d.isa = k < 0 ? QUAROT_ISA_REF : all_isas[k];
                    for (uw = 0; uw < 2; ++uw) {
                        memcpy(b, x, sizeof(float) * total);
                        QT_OK(quarot_hadamard_apply_cols_f32(&p, &d, b + off, cols, ld, uw ? work : NULL, uw ? ws : 0));
                        for (i = 0, bad = 0; i < (int64_t)total; ++i) bad += memcmp(&b[i], &ref[i], sizeof(float)) != 0;
                        QT_CHECKF(bad == 0, "%s cols n = %lld cols %lld variant %d data %d work %d: %lld values differ",
                                  quarot_isa_name(d.isa), (long long)n, (long long)cols, variant, kind, uw, (long long)bad);
                    }
                }
            }
        }
        free(x); free(ref); free(b); free(t); free(sg); free(work);
        quarot_hadamard_plan_free(&p);
    }
}

/* Bad arguments of the column form: a plan that is not a power of two, ld < cols, a short workspace,
   f64 signs alone, NULL; cols == 0 is a no-op. */
static void test_apply_cols_bad(void) {
    quarot_hadamard_plan p, pk;
    quarot_hadamard_apply_desc d;
    float x[16 * 4], before[16 * 4];
    double s64[16];
    size_t ws;
    void* work;
    int i;
    for (i = 0; i < 64; ++i) x[i] = (float)i;
    memcpy(before, x, sizeof x);
    memset(&d, 0, sizeof d);
    QT_OK(quarot_hadamard_plan_init(&p, 16, NULL));
    QT_OK(quarot_hadamard_plan_init(&pk, 12, NULL));
    ws = quarot_hadamard_cols_workspace_size(&p);
    work = malloc(ws);
    QT_EQ_INT(quarot_hadamard_cols_workspace_size(&pk), 0);
    QT_EQ_INT(quarot_hadamard_cols_workspace_size(NULL), 0);
    QT_EQ_INT(quarot_hadamard_apply_cols_f32(&pk, &d, x, 4, 4, NULL, 0), QUAROT_ERR_UNSUPPORTED_SIZE);
    QT_EQ_INT(quarot_hadamard_apply_cols_f32(&p, &d, x, 4, 3, NULL, 0), QUAROT_ERR_INVALID_ARGUMENT);
    QT_EQ_INT(quarot_hadamard_apply_cols_f32(&p, &d, x, -1, 4, NULL, 0), QUAROT_ERR_INVALID_ARGUMENT);
    QT_EQ_INT(quarot_hadamard_apply_cols_f32(&p, &d, NULL, 4, 4, NULL, 0), QUAROT_ERR_INVALID_ARGUMENT);
    QT_EQ_INT(quarot_hadamard_apply_cols_f32(NULL, &d, x, 4, 4, NULL, 0), QUAROT_ERR_INVALID_ARGUMENT);
    QT_EQ_INT(quarot_hadamard_apply_cols_f32(&p, &d, x, 4, 4, work, ws - 1), QUAROT_ERR_WORKSPACE);
    d.signs_f64 = s64;
    QT_EQ_INT(quarot_hadamard_apply_cols_f32(&p, &d, x, 4, 4, NULL, 0), QUAROT_ERR_INVALID_ARGUMENT);
    d.signs_f64 = NULL;
    QT_CHECK(memcmp(x, before, sizeof x) == 0);   /* nothing written by a refused call */
    QT_OK(quarot_hadamard_apply_cols_f32(&p, &d, x, 0, 4, NULL, 0));
    QT_CHECK(memcmp(x, before, sizeof x) == 0);
    free(work);
    quarot_hadamard_plan_free(&p);
    quarot_hadamard_plan_free(&pk);
}

/* The f64 path (weight rotation): every compiled ISA (the f64 SIMD kernels) equals QUAROT_ISA_REF
   (the scalar specification) bit for bit, for powers of two and K*2^m, f64 and f32 signs, transpose
   and unnormalized; quarot_fwht_f64 (SIMD) equals the unnormalized REF apply of a 2^m plan. */
static void test_apply_f64_simd_exact(void) {
    const int64_t full[] = {2, 4, 8, 16, 32, 64, 1024, 4096, 8192, 16384, 12, 20, 28, 172, 12 * 2, 12 * 4, 20 * 8,
                            28 * 16, 36 * 32, 172 * 64, 28 * 512, 108 * 128, 44 * 256, 148 * 128, 36 * 16, 76 * 64};
    const int64_t quick[] = {4, 16, 32, 4096, 12, 172, 12 * 4, 28 * 16, 172 * 64, 36 * 16, 76 * 64};
    const int64_t* sizes = qt_quick() ? quick : full;
    const int count = qt_quick() ? (int)(sizeof quick / sizeof quick[0]) : (int)(sizeof full / sizeof full[0]);
    int k, s, variant, kind;
    qt_seed(17);
    for (kind = 0; kind < 2; ++kind)
    for (s = 0; s < count; ++s) {
        const int64_t n = sizes[s], rows = n > 8192 ? 1 : 3, stride = n + 3, off = 1;
        const size_t total = (size_t)(off + rows * stride);
        quarot_hadamard_plan p;
        double *x, *a, *b, *sd;
        float *xf, *sg;
        size_t ws, i;
        void* work;
        if (quarot_hadamard_plan_init(&p, n, NULL) != QUAROT_OK) { QT_CHECKF(0, "plan for n = %lld", (long long)n); continue; }
        ws = quarot_hadamard_workspace_size(&p);
        work = ws ? malloc(ws) : NULL;
        x = (double*)malloc(sizeof(double) * total);
        a = (double*)malloc(sizeof(double) * total);
        b = (double*)malloc(sizeof(double) * total);
        sd = (double*)malloc(sizeof(double) * (size_t)n);
        xf = (float*)malloc(sizeof(float) * total);
        sg = (float*)malloc(sizeof(float) * (size_t)n);
        fill_kind(xf, (int64_t)total, kind);
        for (i = 0; i < total; ++i) x[i] = (double)xf[i] * (1.0 + 0x1p-30 * (double)(i % 7));   /* not f32-exact */
        fill_signs(sg, n);
        for (i = 0; i < (size_t)n; ++i) sd[i] = (double)sg[(size_t)n - 1 - i];
        for (variant = 0; variant < 12; ++variant) {
            quarot_hadamard_apply_desc d;
            memset(&d, 0, sizeof d);
            d.signs = (variant % 3) == 1 ? sg : NULL;
            d.signs_f64 = (variant % 3) == 2 ? sd : NULL;
            if (d.signs_f64) d.signs = sg;
            d.transpose = (variant / 3) & 1;
            d.unnormalized = (variant / 6) & 1;
            d.isa = QUAROT_ISA_REF;
            memcpy(a, x, sizeof(double) * total);
            QT_OK(quarot_hadamard_apply_f64(&p, &d, a + off, rows, stride, work, ws));
            for (k = -1; k < N_ISAS; ++k) {
                d.isa = k < 0 ? QUAROT_ISA_DEFAULT : all_isas[k];
                if (k >= 0 && !quarot_isa_compiled(d.isa)) continue;
                memcpy(b, x, sizeof(double) * total);
                QT_OK(quarot_hadamard_apply_f64(&p, &d, b + off, rows, stride, work, ws));
                QT_CHECKF(memcmp(a, b, sizeof(double) * total) == 0, "f64 %s apply n = %lld (%s) variant %d data %d differs from ref",
                          quarot_isa_name(d.isa), (long long)n, p.info.text, variant, kind);
            }
        }
        if (p.K == 1) {
            quarot_hadamard_apply_desc d;
            memset(&d, 0, sizeof d);
            d.unnormalized = 1;
            d.isa = QUAROT_ISA_REF;
            memcpy(a, x, sizeof(double) * total);
            memcpy(b, x, sizeof(double) * total);
            QT_OK(quarot_hadamard_apply_f64(&p, &d, a + off, rows, stride, work, ws));
            QT_OK(quarot_fwht_f64(b + off, n, rows, stride));
            QT_CHECKF(memcmp(a, b, sizeof(double) * total) == 0, "quarot_fwht_f64 n = %lld data %d differs from ref", (long long)n, kind);
        }
        free(x); free(a); free(b); free(sd); free(xf); free(sg); free(work);
        quarot_hadamard_plan_free(&p);
    }
}

/* The documented first term of the mixing sum: acc = c(0,i) * z[0][j], not 0 + c(0,i) * z[0][j].
   Sub-row k of x all -0 (when c(k,i) = +1) or all +0 (when c(k,i) = -1) makes z[k][0] that zero and
   every term c(k,i) * z[k][0] equal to -0, so y[i][0] must be -0 (times the positive scale) on every
   ISA; a sum started from +0 would give +0. */
static void test_mix_signed_zero(void) {
    const int64_t sizes[] = {12, 28, 172, 20 * 2, 44 * 8, 60 * 32, 108 * 64, 28 * 16, 28 * 512};
    int s, k, transpose;
    for (s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); ++s) {
        quarot_hadamard_plan p;
        quarot_hadamard_apply_desc d;
        float* x;
        void* work;
        size_t ws;
        int64_t M, K, i, kk, j, target;
        if (quarot_hadamard_plan_init(&p, sizes[s], NULL) != QUAROT_OK) { QT_CHECK(0); continue; }
        K = p.K;
        M = (int64_t)1 << p.m;
        QT_CHECK(K > 1);
        ws = quarot_hadamard_workspace_size(&p);
        work = malloc(ws);
        x = (float*)malloc(sizeof(float) * (size_t)p.n);
        for (transpose = 0; transpose < 2; ++transpose) {
            for (target = 0; target < K; target += K / 3 + 1) {
                for (k = -1; k < N_ISAS; ++k) {
                    memset(&d, 0, sizeof d);
                    d.transpose = transpose;
                    d.isa = k < 0 ? QUAROT_ISA_REF : all_isas[k];
                    if (!quarot_isa_compiled(d.isa)) continue;
                    for (kk = 0; kk < K; ++kk) {
                        const int c = p.had_k[transpose ? target * K + kk : kk * K + target];
                        for (j = 0; j < M; ++j) x[kk * M + j] = c > 0 ? -0.0f : 0.0f;
                    }
                    QT_OK(quarot_hadamard_apply_f32(&p, &d, x, 1, p.n, work, ws));
                    i = target * M;
                    QT_CHECKF(x[i] == 0.0f && signbit(x[i]), "%s n = %lld transpose %d: y[%lld] = %g, expected -0",
                              quarot_isa_name(d.isa), (long long)p.n, transpose, (long long)i, (double)x[i]);
                }
            }
        }
        free(x); free(work);
        quarot_hadamard_plan_free(&p);
    }
}

/* ---- batched rows: the bytes between n and stride are never touched ------------------------- */

static void test_stride_untouched(void) {
    const int64_t sizes[] = {16, 1024, 172, 28 * 64};
    int s, isa_i;
    qt_seed(8);
    for (s = 0; s < 4; ++s) {
        const int64_t n = sizes[s], rows = 4, stride = n + 7;
        quarot_hadamard_plan p;
        quarot_hadamard_apply_desc d;
        float* x = (float*)malloc(sizeof(float) * (size_t)(rows * stride));
        size_t ws;
        unsigned char* work;
        int64_t r, i;
        QT_OK(quarot_hadamard_plan_init(&p, n, NULL));
        ws = quarot_hadamard_workspace_size(&p);
        work = (unsigned char*)malloc(ws + 1);
        for (isa_i = -1; isa_i < N_ISAS; ++isa_i) {
            memset(&d, 0, sizeof d);
            d.isa = isa_i < 0 ? QUAROT_ISA_REF : all_isas[isa_i];
            if (!quarot_isa_compiled(d.isa)) continue;
            fill_uniform(x, rows * stride);
            for (r = 0; r < rows; ++r)
                for (i = n; i < stride; ++i) x[r * stride + i] = (float)(1000 + i);
            work[ws] = 0xA5;
            QT_OK(quarot_hadamard_apply_f32(&p, &d, x, rows, stride, work, ws));
            if ((n & (n - 1)) == 0) QT_OK(quarot_fwht_f32(x, n, rows, stride, d.isa));
            for (r = 0; r < rows; ++r)
                for (i = n; i < stride; ++i) QT_CHECK(x[r * stride + i] == (float)(1000 + i));
            QT_CHECK(work[ws] == 0xA5);   /* the workspace is used only up to its size */
        }
        free(x); free(work);
        quarot_hadamard_plan_free(&p);
    }
}

/* ---- arguments and plans -------------------------------------------------------------------- */

static long test_allocs;
static void* count_alloc(size_t n, void* u) { (void)u; ++test_allocs; return malloc(n); }
static void count_free(void* p, void* u) { (void)u; if (p) --test_allocs; free(p); }

/* The documented layout of the blocked mixing's pattern words (declaration notes of the plan): for
   both orientations, output i and block blk, the b bits at (blk % E) * b of word blk / E (E =
   floor(64/b)) hold the sign pattern of c_o(k, i) over the block relative to its first coefficient
   g, and bit b-1 is set when g = -1; rows from the order on, up to K8 + 8, are zero. c_o comes from
   H_K, or from A = H_K[2r][2c] for the split mixing. */
static int check_mix_tables(const quarot_hadamard_plan* p) {
    const int64_t Km = p->mix_half ? p->K / 2 : p->K, b = p->mix_block, nb = (Km + b - 1) / b;
    const int64_t K8 = (Km + 7) / 8 * 8, E = 64 / b, nw = (nb + E - 1) / E;
    const int8_t* h = p->mix_half ? p->mix_half : p->had_k;
    int64_t o, i, blk, t, bad = 0;
    if (b < 2 || b > 5 || !p->mix_pat) return 0;
    for (o = 0; o < 2; ++o) {
        for (i = 0; i < K8 + 8; ++i) {
            for (blk = 0; blk < nb; ++blk) {
                const int64_t k0 = blk * b;
                const uint64_t got = p->mix_pat[(o * (K8 + 8) + i) * nw + blk / E] >> ((blk % E) * b) &
                                     (((uint64_t)1 << b) - 1);
                uint64_t want = 0;
                if (i < Km) {
                    const int8_t g = o ? h[i * Km + k0] : h[k0 * Km + i];
                    if (g < 0) want |= (uint64_t)1 << (b - 1);
                    for (t = 1; t < b && k0 + t < Km; ++t)
                        if ((o ? h[i * Km + k0 + t] : h[(k0 + t) * Km + i]) != g) want |= (uint64_t)1 << (t - 1);
                }
                if (got != want) ++bad;
            }
            if (nb % E && (p->mix_pat[(o * (K8 + 8) + i) * nw + nw - 1] >> ((nb % E) * b)) != 0) ++bad;
        }
    }
    return bad == 0;
}

/* The fixed register mixing kernels (quarot.h, plan.mix_fixed): the plan takes one only where its
   compiled-in term lists equal the plan's own patterns in both orientations, so this fails when the
   lists (printed by tools/gen_mixr.c, make regen) went stale; test_apply_simd_exact then checks their bits. */
static void test_plan_mix_fixed(void) {
    const int64_t sizes[][2] = {{28 * 16, 1}, {28 * 512, 1}, {28 * 1024, 1}, {76 * 16, 2}, {76 * 64, 2},
                                {148 * 16, 3}, {148 * 128, 3}, {28 * 8, 0}, {172 * 64, 0}, {36 * 16, 0},
                                {108 * 128, 0}, {20 * 64, 0}, {16384, 0}};
    int s;
    for (s = 0; s < (int)(sizeof sizes / sizeof sizes[0]); ++s) {
        quarot_hadamard_plan p;
        if (quarot_hadamard_plan_init(&p, sizes[s][0], NULL) != QUAROT_OK) { QT_CHECK(0); continue; }
        QT_CHECKF(p.mix_fixed == (int)sizes[s][1], "n = %lld (%s): mix_fixed %d, expected %d", (long long)sizes[s][0],
                  p.info.text, p.mix_fixed, (int)sizes[s][1]);
        quarot_hadamard_plan_free(&p);
    }
}

static void test_plan_info(void) {
    quarot_hadamard_plan p;
    quarot_env env;
    memset(&env, 0, sizeof env);
    env.allocator.alloc = count_alloc;
    env.allocator.free = count_free;
    QT_OK(quarot_hadamard_plan_init(&p, 4096, &env));
    QT_EQ_INT(p.K, 1);
    QT_EQ_INT(p.m, 12);
    QT_CHECK(p.had_k == NULL && p.mix_f32 == NULL);
    QT_EQ_INT(quarot_hadamard_workspace_size(&p), 0);
    quarot_hadamard_plan_free(&p);
    QT_OK(quarot_hadamard_plan_init(&p, 11008, &env));   /* Llama-2-7B intermediate: 172 * 2^6 */
    QT_EQ_INT(p.K, 172);
    QT_EQ_INT(p.m, 6);
    QT_CHECK(p.mix_block >= 2 && p.mix_block <= 5);    /* 64 columns: blocked mixing */
    QT_CHECK(p.had_k != NULL && p.mix_pat != NULL && p.mix_f32 == NULL);
    QT_CHECK(check_mix_tables(&p));
    QT_CHECK(quarot_hadamard_workspace_size(&p) >= 11008 * sizeof(double));
    QT_CHECK(test_allocs > 0);
    quarot_hadamard_plan_free(&p);
    QT_EQ_INT(test_allocs, 0);
    QT_OK(quarot_hadamard_plan_init(&p, 172 * 8, &env));   /* 8 columns: plain k order, float panels */
    QT_EQ_INT(p.mix_block, 1);
    QT_CHECK(p.mix_f32 != NULL && p.mix_pat == NULL && p.mix_half == NULL);
    quarot_hadamard_plan_free(&p);
    QT_OK(quarot_hadamard_plan_init(&p, 4864, &env));   /* 76 * 2^6, Paley II: split mixing on A = H_76[2r][2c] */
    QT_EQ_INT(p.K, 76);
    QT_CHECK(p.mix_half != NULL && p.mix_pat != NULL && p.mix_block >= 2 && p.mix_block <= 5);
    QT_CHECK(check_mix_tables(&p));
    QT_CHECK(p.mix_half != NULL && p.mix_half[0] == p.had_k[0] && p.mix_half[5 * 38 + 7] == p.had_k[10 * 76 + 14]);
    QT_CHECK(quarot_hadamard_workspace_size(&p) >= 2 * 4864 * sizeof(double));
    quarot_hadamard_plan_free(&p);
    QT_OK(quarot_hadamard_plan_init(&p, 924 * 32, &env));   /* K = 924: the add count alone would pick b = 7 */
    QT_EQ_INT(p.mix_block, 5);
    QT_CHECK(check_mix_tables(&p));
    quarot_hadamard_plan_free(&p);
    QT_OK(quarot_hadamard_plan_init(&p, 76 * 8, &env));   /* 8 columns: not split */
    QT_CHECK(p.mix_half == NULL);
    quarot_hadamard_plan_free(&p);
    QT_EQ_INT(test_allocs, 0);
    quarot_hadamard_plan_free(&p);   /* twice: harmless */
    quarot_hadamard_plan_free(NULL);
}

static void test_bad_arguments(void) {
    float x[64];
    double xd[64];
    float sg[12];
    double sgd[12];
    quarot_hadamard_plan p, zero;
    quarot_hadamard_apply_desc d;
    unsigned char work[12 * 8 + 64];
    const size_t ws_needed = 12 * 8 + 64;
    quarot_isa missing = quarot_isa_compiled(QUAROT_ISA_NEON) ? QUAROT_ISA_AVX2 : QUAROT_ISA_NEON;
    memset(x, 0, sizeof x);
    memset(xd, 0, sizeof xd);
    memset(&d, 0, sizeof d);
    memset(&zero, 0, sizeof zero);
    fill_signs(sg, 12);
    memset(sgd, 0, sizeof sgd);
    /* quarot_fwht_f32 / _f64 */
    QT_ERR(quarot_fwht_f32(NULL, 16, 1, 16, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fwht_f32(x, 0, 1, 16, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fwht_f32(x, -16, 1, 16, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fwht_f32(x, 12, 1, 12, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fwht_f32(x, 16, -1, 16, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fwht_f32(x, 16, 1, 15, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fwht_f32(x, 16, INT64_MAX / 8, INT64_MAX / 8, QUAROT_ISA_DEFAULT), QUAROT_ERR_OVERFLOW);
    QT_ERR(quarot_fwht_f32(x, 16, 1, 16, missing), QUAROT_ERR_UNSUPPORTED);
    QT_ERR(quarot_fwht_f32(x, 16, 1, 16, (quarot_isa)99), QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(quarot_fwht_f32(x, 16, 0, 16, QUAROT_ISA_DEFAULT));   /* no rows: nothing to do */
    QT_ERR(quarot_fwht_f64(NULL, 16, 1, 16), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fwht_f64(xd, 24, 1, 24), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_fwht_f64(xd, 16, 2, 8), QUAROT_ERR_INVALID_ARGUMENT);
    /* plan_init */
    QT_ERR(quarot_hadamard_plan_init(NULL, 16, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hadamard_plan_init(&p, 0, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hadamard_plan_init(&p, -8, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hadamard_plan_init(&p, 6, NULL), QUAROT_ERR_UNSUPPORTED_SIZE);     /* not 1, 2 or 4k */
    QT_ERR(quarot_hadamard_plan_init(&p, 324, NULL), QUAROT_ERR_UNSUPPORTED_SIZE);   /* no known construction */
    QT_CHECK(p.had_k == NULL && p.n == 0);
    /* apply */
    QT_OK(quarot_hadamard_plan_init(&p, 12, NULL));
    QT_EQ_INT(quarot_hadamard_workspace_size(&p), ws_needed);
    QT_ERR(quarot_hadamard_apply_f32(NULL, &d, x, 1, 12, work, ws_needed), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hadamard_apply_f32(&zero, &d, x, 1, 12, work, ws_needed), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hadamard_apply_f32(&p, &d, NULL, 1, 12, work, ws_needed), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hadamard_apply_f32(&p, &d, x, -1, 12, work, ws_needed), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hadamard_apply_f32(&p, &d, x, 1, 11, work, ws_needed), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_hadamard_apply_f32(&p, &d, x, 1, 12, NULL, ws_needed), QUAROT_ERR_WORKSPACE);
    QT_ERR(quarot_hadamard_apply_f32(&p, &d, x, 1, 12, work, ws_needed - 1), QUAROT_ERR_WORKSPACE);
    QT_ERR(quarot_hadamard_apply_f64(&p, &d, xd, 1, 12, work, 8), QUAROT_ERR_WORKSPACE);
    QT_ERR(quarot_hadamard_apply_f64(&p, &d, NULL, 1, 12, work, ws_needed), QUAROT_ERR_INVALID_ARGUMENT);
    d.isa = missing;
    QT_ERR(quarot_hadamard_apply_f32(&p, &d, x, 1, 12, work, ws_needed), QUAROT_ERR_UNSUPPORTED);
    d.isa = QUAROT_ISA_DEFAULT;
    d.signs_f64 = sgd;   /* f64 signs only: the f32 entry point cannot use them */
    QT_ERR(quarot_hadamard_apply_f32(&p, &d, x, 1, 12, work, ws_needed), QUAROT_ERR_INVALID_ARGUMENT);
    d.signs_f64 = NULL;
    QT_OK(quarot_hadamard_apply_f32(&p, &d, x, 0, 12, work, ws_needed));    /* no rows: nothing to do */
    QT_ERR(quarot_hadamard_apply_f32(&p, &d, x, 0, 12, NULL, 0), QUAROT_ERR_WORKSPACE);   /* checked first */
    QT_OK(quarot_hadamard_apply_f32(&p, NULL, x, 1, 12, work, ws_needed));   /* NULL desc = defaults */
    QT_OK(quarot_hadamard_apply_f64(&p, NULL, xd, 1, 12, work, ws_needed));
    quarot_hadamard_plan_free(&p);
    QT_OK(quarot_hadamard_plan_init(&p, 16, NULL));
    QT_OK(quarot_hadamard_apply_f32(&p, NULL, x, 1, 16, NULL, 0));           /* powers of two: no workspace */
    QT_OK(quarot_hadamard_apply_f64(&p, NULL, xd, 4, 16, NULL, 0));
    quarot_hadamard_plan_free(&p);
}

int main(void) {
    QT_RUN(test_fwht_vs_sylvester);
    QT_RUN(test_plan_pow2_dense);
    QT_RUN(test_plan_kronecker_dense);
    QT_RUN(test_plan_paley2_split_dense);
    QT_RUN(test_unnormalized);
    QT_RUN(test_f64_dense);
    QT_RUN(test_fwht_simd_exact);
    QT_RUN(test_apply_simd_exact);
    QT_RUN(test_apply_cols_exact);
    QT_RUN(test_apply_cols_bad);
    QT_RUN(test_apply_f64_simd_exact);
    QT_RUN(test_mix_signed_zero);
    QT_RUN(test_stride_untouched);
    QT_RUN(test_plan_mix_fixed);
    QT_RUN(test_plan_info);
    QT_RUN(test_bad_arguments);
    return qt_finish("test_transform");
}
