/* Householder QR, random orthogonal matrices and the Newton-Schulz polar factor.

   Independent truths: Q^T Q = I and Q*R = A recomputed here in long double; E[Q_00] = 0 over many seeds
   (a missing sign fix biases it to about -0.5); a golden hash of the bits of one seed's matrix (the
   QR is specified as platform-independent: the same value under -O0/-O2, QUAROT_NO_SIMD, clang and
   aarch64); the polar factor against U*V^T from a one-sided Jacobi SVD written below in double, and
   its orthogonality measured here in long double. */
#include "quarot.h"
#include "qt.h"
#include "support/qx_threads.h"

/* ---------------------------------------------------------------- helpers */
static double* dalloc(int64_t n) { return (double*)malloc((size_t)n * sizeof(double)); }

/* max |X^T X - I| of X [m][n] (stride ld), in long double */
static double orth_err_d(int64_t m, int64_t n, const double* x, int64_t ld) {
    int64_t i, j, p;
    double worst = 0.0;
    for (i = 0; i < n; ++i)
        for (j = i; j < n; ++j) {
            long double s = 0.0L;
            for (p = 0; p < m; ++p) s += (long double)x[p * ld + i] * x[p * ld + j];
            if (i == j) s -= 1.0L;
            if (fabs((double)s) > worst) worst = fabs((double)s);
        }
    return worst;
}
static double orth_err_f(int64_t n, const float* x, int64_t ld) {
    int64_t i, j, p;
    double worst = 0.0;
    for (i = 0; i < n; ++i)
        for (j = i; j < n; ++j) {
            long double s = 0.0L;
            for (p = 0; p < n; ++p) s += (long double)x[p * ld + i] * x[p * ld + j];
            if (i == j) s -= 1.0L;
            if (fabs((double)s) > worst) worst = fabs((double)s);
        }
    return worst;
}

/* 64-bit FNV-1a over the IEEE bit patterns (independent of byte order) */
static unsigned long long hash_bits(const double* x, int64_t n) {
    unsigned long long h = 1469598103934665603ULL, b;
    int64_t i;
    int k;
    for (i = 0; i < n; ++i) {
        memcpy(&b, &x[i], sizeof b);
        for (k = 0; k < 8; ++k) { h ^= (b >> (8 * k)) & 255u; h *= 1099511628211ULL; }
    }
    return h;
}

/* ---------------------------------------------------------------- QR */
static void check_qr(int64_t m, int64_t n, int kind) {
    int64_t lda = n + 2, ldq = n + 1, i, j, p;
    double *a = dalloc(m * lda), *a0 = dalloc(m * lda), *q = dalloc(m * ldq), *r2 = dalloc(m * lda);
    double anorm = 0.0, err = 0.0;
    for (i = 0; i < m * lda; ++i) a[i] = qt_normal();
    if (kind == 1) for (i = 0; i < m; ++i) a[i * lda + n / 2] = 0.0;                      /* a zero column */
    if (kind == 2) for (i = 0; i < m; ++i) a[i * lda + n - 1] = a[i * lda];                /* dependent column */
    if (kind == 3) for (i = 0; i < m; ++i) for (j = 0; j < n; ++j) a[i * lda + j] *= 1e200; /* huge entries */
    for (i = 0; i < m * ldq; ++i) q[i] = 99.0;
    memcpy(a0, a, (size_t)(m * lda) * sizeof(double));
    QT_OK(quarot_qr_f64(m, n, a, lda, q, ldq, NULL));
    /* R: upper triangular with diag >= 0, zeros below; padding columns untouched */
    for (i = 0; i < m; ++i) {
        for (j = 0; j < n; ++j) {
            if (i > j) QT_CHECKF(a[i * lda + j] == 0.0, "R[%lld][%lld] = %g below the diagonal", (long long)i, (long long)j, a[i * lda + j]);
            if (i == j) QT_CHECKF(a[i * lda + j] >= 0.0, "R[%lld][%lld] = %g < 0", (long long)i, (long long)i, a[i * lda + j]);
            anorm = fmax(anorm, fabs(a0[i * lda + j]));
        }
        QT_CHECK(a[i * lda + n] == a0[i * lda + n] && a[i * lda + n + 1] == a0[i * lda + n + 1]);
        QT_CHECK(q[i * ldq + n] == 99.0);
    }
    /* Q^T Q = I (n = rank-deficient too: Householder Q stays orthogonal) and Q R = A */
    QT_CHECKF(orth_err_d(m, n, q, ldq) < 1e-13 * (double)(m + 10), "QR %lldx%lld kind %d: |Q^T Q - I| = %.3g",
              (long long)m, (long long)n, kind, orth_err_d(m, n, q, ldq));
    for (i = 0; i < m; ++i)
        for (j = 0; j < n; ++j) {
            long double s = 0.0L;
            for (p = 0; p <= j; ++p) s += (long double)q[i * ldq + p] * a[p * lda + j];
            err = fmax(err, fabs((double)(s - (long double)a0[i * lda + j])));
        }
    QT_CHECKF(err <= 1e-14 * (double)(m + 10) * anorm, "QR %lldx%lld kind %d: |QR - A| = %.3g (|A| %.3g)",
              (long long)m, (long long)n, kind, err, anorm);
    /* without q: the same R, bit for bit */
    memcpy(r2, a0, (size_t)(m * lda) * sizeof(double));
    QT_OK(quarot_qr_f64(m, n, r2, lda, NULL, 0, NULL));
    QT_CHECK(memcmp(r2, a, (size_t)(m * lda) * sizeof(double)) == 0);
    free(a); free(a0); free(q); free(r2);
}

static void test_qr(void) {
    int quick = qt_quick();
    qt_seed(21);
    check_qr(1, 1, 0);
    check_qr(7, 1, 0);
    check_qr(5, 5, 0);
    check_qr(31, 31, 0);
    check_qr(33, 32, 0);       /* one full block of reflectors plus one row */
    check_qr(70, 33, 0);       /* a block and a 1-column panel */
    check_qr(97, 65, 1);
    check_qr(64, 64, 2);
    check_qr(40, 20, 3);
    if (!quick) { check_qr(300, 130, 0); check_qr(200, 200, 0); check_qr(600, 70, 2); }
}

static void test_qr_errors(void) {
    double a[16], q[16];
    int i;
    for (i = 0; i < 16; ++i) a[i] = (double)(i * i % 7) - 3.0;
    QT_ERR(quarot_qr_f64(3, 4, a, 4, q, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);   /* m < n */
    QT_ERR(quarot_qr_f64(4, 0, a, 4, q, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_qr_f64(4, 4, a, 3, q, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_qr_f64(4, 4, a, 4, q, 3, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_qr_f64(4, 4, NULL, 4, q, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_qr_f64(4, 4, a, INT64_MAX / 4, q, 4, NULL), QUAROT_ERR_OVERFLOW);
    a[5] = NAN;
    QT_ERR(quarot_qr_f64(4, 4, a, 4, q, 4, NULL), QUAROT_ERR_NONFINITE);
    a[5] = INFINITY;
    QT_ERR(quarot_qr_f64(4, 4, a, 4, NULL, 0, NULL), QUAROT_ERR_NONFINITE);
    QT_ERR(quarot_random_orthogonal_f64(0, 1, q, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_random_orthogonal_f64(4, 1, q, 3, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_random_orthogonal_f64(4, 1, NULL, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
}

/* ---------------------------------------------------------------- random orthogonal */
static void test_random_orthogonal(void) {
    const int64_t sizes[] = { 1, 2, 3, 17, 64, 100, 257 };
    int s, ns = qt_quick() ? 5 : 7;
    for (s = 0; s < ns; ++s) {
        int64_t n = sizes[s], ld = n + 3, i, j;
        double *q1 = dalloc(n * ld), *q2 = dalloc(n * ld), *q3 = dalloc(n * ld);
        for (i = 0; i < n * ld; ++i) q1[i] = q2[i] = q3[i] = -5.0;
        QT_OK(quarot_random_orthogonal_f64(n, 1234, q1, ld, NULL));
        QT_OK(quarot_random_orthogonal_f64(n, 1234, q2, ld, NULL));
        QT_OK(quarot_random_orthogonal_f64(n, 1235, q3, ld, NULL));
        QT_CHECKF(orth_err_d(n, n, q1, ld) < 1e-13 * (double)(n + 10), "n=%lld |Q^T Q - I| = %.3g", (long long)n, orth_err_d(n, n, q1, ld));
        QT_CHECK(memcmp(q1, q2, (size_t)(n * ld) * sizeof(double)) == 0);    /* same seed, same bits */
        if (n > 1) QT_CHECK(memcmp(q1, q3, (size_t)(n * ld) * sizeof(double)) != 0);
        for (i = 0; i < n; ++i)
            for (j = n; j < ld; ++j) QT_CHECK(q1[i * ld + j] == -5.0);       /* padding untouched */
        if (n == 1) QT_CHECK(q1[0] == 1.0 || q1[0] == -1.0);
        free(q1); free(q2); free(q3);
    }
}

/* Golden value: the bits of seed 42's 8x8 and 40x40 matrices. Any change of the RNG, the QR's
   operation order or the exact DGEMM's k-blocking shows here (and must then be deliberate: it changes
   every random rotation users have made). Verified identical with gcc and clang at -O0/-O2/-O3, with
   -march=native (AVX-512), -mavx2 -mfma, SSE2 only and QUAROT_NO_SIMD, as C++, and for aarch64 (NEON
   and QUAROT_NO_SIMD) under qemu; also the 300 x 300 matrix of seed 7 (block updates through every
   exact DGEMM kernel). Not with clang -ffp-contract=fast, which overrides the FP_CONTRACT pragma. */
static void test_random_orthogonal_golden(void) {
    double q[40 * 40];
    QT_OK(quarot_random_orthogonal_f64(8, 42, q, 8, NULL));
    printf("    seed 42 n=8: hash %016llx, Q[0][0] = %.17g\n", hash_bits(q, 64), q[0]);
    QT_CHECK(hash_bits(q, 64) == 0xecf1d9be5dc212d2ULL);
    QT_OK(quarot_random_orthogonal_f64(40, 42, q, 40, NULL));
    printf("    seed 42 n=40: hash %016llx\n", hash_bits(q, 1600));
    QT_CHECK(hash_bits(q, 1600) == 0x956e656af6aefb72ULL);
}

/* Haar: E[Q_00] = 0, E[Q_00^2] = 1/n; a QR without the sign fix gives E[Q_00] = -E|g|/||g|| ~ -0.4. */
static void test_random_orthogonal_haar(void) {
    int64_t n = 4, trials = qt_quick() ? 400 : 2000, t;
    double q[16], m1 = 0.0, m2 = 0.0, tr = 0.0;
    for (t = 0; t < trials; ++t) {
        QT_OK(quarot_random_orthogonal_f64(n, (uint64_t)(t * 7919 + 1), q, n, NULL));
        m1 += q[0]; m2 += q[0] * q[0]; tr += q[0] + q[5] + q[10] + q[15];
    }
    m1 /= (double)trials; m2 /= (double)trials; tr /= (double)trials;
    /* std of Q_00 is 1/2: 5 sigma of the mean over `trials` */
    QT_NEAR(m1, 0.0, 2.5 / sqrt((double)trials));
    QT_NEAR(m2, 0.25, 0.05);
    QT_NEAR(tr, 0.0, 5.0 / sqrt((double)trials));   /* E[tr Q] = 0, var 1 */
}

/* ---------------------------------------------------------------- polar factor */
/* One-sided Jacobi SVD (Hestenes) of C [n][n]: rotate column pairs of W = C until orthogonal, V
   accumulates the rotations; then U_polar = W diag(1/||w_j||) V^T. Double precision, C full rank. */
static void svd_polar(int64_t n, const double* c, double* up) {
    double *w = dalloc(n * n), *v = dalloc(n * n), *nrm = dalloc(n);
    int64_t i, j, k, p;
    int sweep;
    memcpy(w, c, (size_t)(n * n) * sizeof(double));
    for (i = 0; i < n * n; ++i) v[i] = 0.0;
    for (i = 0; i < n; ++i) v[i * n + i] = 1.0;
    for (sweep = 0; sweep < 60; ++sweep) {
        double off = 0.0;
        for (j = 0; j < n - 1; ++j)
            for (k = j + 1; k < n; ++k) {
                double alpha = 0.0, beta = 0.0, gamma = 0.0, zeta, t, cs, sn;
                for (p = 0; p < n; ++p) {
                    alpha += w[p * n + j] * w[p * n + j];
                    beta += w[p * n + k] * w[p * n + k];
                    gamma += w[p * n + j] * w[p * n + k];
                }
                if (gamma == 0.0) continue;
                off = fmax(off, fabs(gamma) / sqrt(alpha * beta));
                zeta = (beta - alpha) / (2.0 * gamma);
                t = (zeta >= 0.0 ? 1.0 : -1.0) / (fabs(zeta) + sqrt(1.0 + zeta * zeta));
                cs = 1.0 / sqrt(1.0 + t * t);
                sn = cs * t;
                for (p = 0; p < n; ++p) {
                    double x = w[p * n + j], y = w[p * n + k];
                    w[p * n + j] = cs * x - sn * y; w[p * n + k] = sn * x + cs * y;
                    x = v[p * n + j]; y = v[p * n + k];
                    v[p * n + j] = cs * x - sn * y; v[p * n + k] = sn * x + cs * y;
                }
            }
        if (off < 1e-15) break;
    }
    for (j = 0; j < n; ++j) {
        double s = 0.0;
        for (p = 0; p < n; ++p) s += w[p * n + j] * w[p * n + j];
        nrm[j] = sqrt(s);
    }
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) s += w[i * n + k] / nrm[k] * v[j * n + k];
            up[i * n + j] = s;
        }
    free(w); free(v); free(nrm);
}

/* Test matrices C [n][n]: 0 Gaussian, 1 cond = 1e3 (Q1 diag(logspace(0, -3)) Q2^T), 2 nearly symmetric
   positive A^T A / rows + 1e-3 noise (the Adapt Rotation case), 3 rank n-1. */
static void make_c(int kind, int64_t n, double* c) {
    int64_t i, j, k;
    if (kind == 0) { for (i = 0; i < n * n; ++i) c[i] = qt_normal(); return; }
    if (kind == 1) {
        double *q1 = dalloc(n * n), *q2 = dalloc(n * n);
        quarot_random_orthogonal_f64(n, 5, q1, n, NULL);
        quarot_random_orthogonal_f64(n, 6, q2, n, NULL);
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j) {
                double s = 0.0;
                for (k = 0; k < n; ++k) s += q1[i * n + k] * pow(10.0, -3.0 * (double)k / (double)(n - 1)) * q2[j * n + k];
                c[i * n + j] = s;
            }
        free(q1); free(q2);
        return;
    }
    if (kind == 2) {
        int64_t rows = 2 * n;
        double* a = dalloc(rows * n);
        for (i = 0; i < rows * n; ++i) a[i] = qt_normal();
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j) {
                double s = 0.0;
                for (k = 0; k < rows; ++k) s += a[k * n + i] * a[k * n + j];
                c[i * n + j] = s / (double)rows + 1e-3 * qt_normal();
            }
        free(a);
        return;
    }
    /* rank n-1: C = G (I - e e^T) */
    {
        double* e = dalloc(n);
        double s = 0.0;
        for (i = 0; i < n * n; ++i) c[i] = qt_normal();
        for (i = 0; i < n; ++i) { e[i] = qt_normal(); s += e[i] * e[i]; }
        for (i = 0; i < n; ++i) e[i] /= sqrt(s);
        for (i = 0; i < n; ++i) {
            double d = 0.0;
            for (k = 0; k < n; ++k) d += c[i * n + k] * e[k];
            for (j = 0; j < n; ++j) c[i * n + j] -= d * e[j];
        }
        free(e);
    }
}

static void check_polar(int kind, int64_t n) {
    int64_t ld = n + 2, i, j;
    double *c = dalloc(n * n), *cd = dalloc(n * ld), *ud = dalloc(n * ld), *ref = dalloc(n * n);
    float *cf = (float*)malloc((size_t)(n * ld) * sizeof(float)), *uf = (float*)malloc((size_t)(n * ld) * sizeof(float));
    double dmax = 0.0, fmaxd = 0.0, e;
    quarot_polar_desc desc;
    quarot_polar_info info;
    static const char* names[] = { "gaussian", "cond 1e3", "A^T A + noise" };
    make_c(kind, n, c);
    svd_polar(n, c, ref);
    for (i = 0; i < n * ld; ++i) { cd[i] = 3.0; ud[i] = -3.0; cf[i] = 3.0f; uf[i] = -3.0f; }
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) { cd[i * ld + j] = c[i * n + j]; cf[i * ld + j] = (float)c[i * n + j]; }
    /* f64 with a tight tolerance */
    memset(&desc, 0, sizeof desc);
    desc.tol = 1e-12;
    QT_OK(quarot_polar_newton_schulz_f64(n, cd, ld, ud, ld, &desc, &info, NULL));
    QT_CHECK(info.iterations > 0 && info.iterations <= 75);
    QT_CHECK(info.residual <= 1e-12);
    e = orth_err_d(n, n, ud, ld);
    QT_CHECKF(e < 1e-11, "f64 %s n=%lld: |U^T U - I| = %.3g", names[kind], (long long)n, e);
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) dmax = fmax(dmax, fabs(ud[i * ld + j] - ref[i * n + j]));
    QT_CHECKF(dmax < (kind == 1 ? 1e-9 : 1e-10), "f64 %s n=%lld: |U - U_svd| = %.3g", names[kind], (long long)n, dmax);
    printf("    f64 %-14s n=%3lld: %2d iterations, residual %.2g, |U-U_svd| %.2g", names[kind], (long long)n, info.iterations, info.residual, dmax);
    {   /* the textbook iteration reaches the same factor, in more steps */
        quarot_polar_info info2;
        double *u2 = dalloc(n * ld), dd = 0.0;
        desc.plain = 1;
        QT_OK(quarot_polar_newton_schulz_f64(n, cd, ld, u2, ld, &desc, &info2, NULL));
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j) dd = fmax(dd, fabs(u2[i * ld + j] - ud[i * ld + j]));
        QT_CHECKF(dd < 1e-10, "plain vs fast: %.3g", dd);
        QT_CHECK(info2.iterations >= info.iterations);
        printf(" (plain: %d)\n", info2.iterations);
        desc.plain = 0;
        free(u2);
    }
    /* f32 with the default tolerance 2e-6 */
    QT_OK(quarot_polar_newton_schulz_f32(n, cf, ld, uf, ld, NULL, &info, NULL));
    QT_CHECK(info.residual <= 2e-6 && info.iterations > 0 && info.iterations <= 36);
    e = orth_err_f(n, uf, ld);
    QT_CHECKF(e < 1e-5, "f32 %s n=%lld: |U^T U - I| = %.3g", names[kind], (long long)n, e);
    QT_CHECKF(fabs(e - info.residual) < 5e-7, "f32 %s: reported residual %.3g, measured %.3g", names[kind], info.residual, e);
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) fmaxd = fmax(fmaxd, fabs((double)uf[i * ld + j] - ref[i * n + j]));
    QT_CHECKF(fmaxd < 1e-4, "f32 %s n=%lld: |U - U_svd| = %.3g", names[kind], (long long)n, fmaxd);
    printf("    f32 %-14s n=%3lld: %2d iterations, residual %.2g, |U-U_svd| %.2g\n", names[kind], (long long)n, info.iterations, info.residual, fmaxd);
    /* strides: the padding of U is untouched */
    for (i = 0; i < n; ++i) QT_CHECK(ud[i * ld + n] == -3.0 && uf[i * ld + n + 1] == -3.0f);
    free(c); free(cd); free(ud); free(ref); free(cf); free(uf);
}

static void test_polar_vs_svd(void) {
    int64_t n = qt_quick() ? 24 : 96;
    qt_seed(31);
    check_polar(0, n);
    check_polar(1, n);
    check_polar(2, n);
    if (!qt_quick()) { check_polar(0, 17); check_polar(2, 200); }
}

/* Larger than one Gram panel (the upper triangle is computed by panels and mirrored): U orthogonal
   and P = U^T C symmetric with a positive diagonal (the polar decomposition's defining properties). */
static void check_polar_props(int64_t n, const double* c, const double* ud, const float* uf) {
    int64_t i, j, k;
    double* p = dalloc(n * n);
    double asym = 0.0, pmax = 0.0, dmin = 1e300;
    int which;
    for (which = 0; which < 2; ++which) {
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j) {
                long double s = 0.0L;
                for (k = 0; k < n; ++k) s += (long double)(which ? (double)uf[k * n + i] : ud[k * n + i]) * c[k * n + j];
                p[i * n + j] = (double)s;
            }
        asym = 0.0; pmax = 0.0; dmin = 1e300;
        for (i = 0; i < n; ++i) {
            dmin = fmin(dmin, p[i * n + i]);
            for (j = 0; j < n; ++j) { asym = fmax(asym, fabs(p[i * n + j] - p[j * n + i])); pmax = fmax(pmax, fabs(p[i * n + j])); }
        }
        QT_CHECKF(asym <= (which ? 2e-5 : 1e-12) * pmax, "%s n=%lld: |P - P^T| = %.3g (|P| %.3g)", which ? "f32" : "f64", (long long)n, asym, pmax);
        QT_CHECK(dmin > 0.0);
    }
    QT_CHECKF(orth_err_d(n, n, ud, n) < 1e-11, "f64 n=%lld: |U^T U - I| = %.3g", (long long)n, orth_err_d(n, n, ud, n));
    QT_CHECKF(orth_err_f(n, uf, n) < 1e-5, "f32 n=%lld: |U^T U - I| = %.3g", (long long)n, orth_err_f(n, uf, n));
    free(p);
}

static void test_polar_large(void) {
    int64_t n = qt_quick() ? 100 : 520, i;
    double *c = dalloc(n * n), *u = dalloc(n * n);
    float *cf = (float*)malloc((size_t)(n * n) * sizeof(float)), *uf = (float*)malloc((size_t)(n * n) * sizeof(float));
    quarot_polar_desc desc;
    quarot_polar_info info;
    qt_seed(35);
    make_c(2, n, c);
    for (i = 0; i < n * n; ++i) cf[i] = (float)c[i];
    memset(&desc, 0, sizeof desc);
    desc.tol = 1e-12;
    QT_OK(quarot_polar_newton_schulz_f64(n, c, n, u, n, &desc, &info, NULL));
    QT_OK(quarot_polar_newton_schulz_f32(n, cf, n, uf, n, NULL, &info, NULL));
    check_polar_props(n, c, u, uf);
    free(c); free(u); free(cf); free(uf);
}

/* U may alias C (same pointer and stride): same bits as a separate output. */
static void test_polar_alias(void) {
    int64_t n = 45, i;
    double *c = dalloc(n * n), *u = dalloc(n * n);
    float *cf = (float*)malloc((size_t)(n * n) * sizeof(float)), *uf = (float*)malloc((size_t)(n * n) * sizeof(float));
    qt_seed(32);
    make_c(0, n, c);
    for (i = 0; i < n * n; ++i) cf[i] = (float)c[i];
    QT_OK(quarot_polar_newton_schulz_f64(n, c, n, u, n, NULL, NULL, NULL));
    QT_OK(quarot_polar_newton_schulz_f64(n, c, n, c, n, NULL, NULL, NULL));
    QT_CHECK(memcmp(c, u, (size_t)(n * n) * sizeof(double)) == 0);
    QT_OK(quarot_polar_newton_schulz_f32(n, cf, n, uf, n, NULL, NULL, NULL));
    QT_OK(quarot_polar_newton_schulz_f32(n, cf, n, cf, n, NULL, NULL, NULL));
    QT_CHECK(memcmp(cf, uf, (size_t)(n * n) * sizeof(float)) == 0);
    free(c); free(u); free(cf); free(uf);
}

/* An orthogonal C is its own polar factor: no update needed (the refined scale makes X0 = C). */
static void test_polar_orthogonal_input(void) {
    int64_t n = 33, i;
    double *q = dalloc(n * n), *u = dalloc(n * n), d = 0.0;
    quarot_polar_info info;
    QT_OK(quarot_random_orthogonal_f64(n, 9, q, n, NULL));
    for (i = 0; i < n * n; ++i) q[i] *= 7.5;
    QT_OK(quarot_polar_newton_schulz_f64(n, q, n, u, n, NULL, &info, NULL));
    QT_CHECK(info.iterations <= 1);
    QT_NEAR(info.scale, 7.5, 1e-12);
    for (i = 0; i < n * n; ++i) d = fmax(d, fabs(u[i] - q[i] / 7.5));
    QT_CHECK(d < 1e-14);
    free(q); free(u);
}

static void test_polar_errors(void) {
    int64_t n = qt_quick() ? 20 : 40, i;
    double *c = dalloc(n * n), *u = dalloc(n * n);
    float *cf = (float*)malloc((size_t)(n * n) * sizeof(float)), *uf = (float*)malloc((size_t)(n * n) * sizeof(float));
    quarot_polar_desc desc;
    quarot_polar_info info;
    qt_seed(33);
    /* rank-deficient: NOT_CONVERGED (detected before the step limit), U = last iterate; with the fast
       start and with plain steps. Without the detection the rounding noise in the null direction grows
       into a singular value: f32 "converges" after ~32 fast / ~50 plain steps, f64 after ~59 / ~100. */
    make_c(3, n, c);
    for (i = 0; i < n * n; ++i) cf[i] = (float)c[i];
    memset(&desc, 0, sizeof desc);
    for (i = 0; i < 2; ++i) {
        desc.plain = (int)i;
        QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n, &desc, &info, NULL), QUAROT_ERR_NOT_CONVERGED);
        QT_CHECK(info.iterations > 20 && info.iterations < 75 && info.residual > 1e-6);
        QT_ERR(quarot_polar_newton_schulz_f32(n, cf, n, uf, n, &desc, &info, NULL), QUAROT_ERR_NOT_CONVERGED);
        QT_CHECK(info.iterations > 10 && info.iterations < 36 && info.residual > 2e-6);
        desc.max_iter = 200;                 /* the detection does not depend on the step limit */
        QT_ERR(quarot_polar_newton_schulz_f32(n, cf, n, uf, n, &desc, &info, NULL), QUAROT_ERR_NOT_CONVERGED);
        QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n, &desc, &info, NULL), QUAROT_ERR_NOT_CONVERGED);
        desc.max_iter = 0;
    }
    /* nearly singular but above the threshold (sigma_min / sigma_max = 1e-4 in f64): converges */
    {
        double *q1 = dalloc(n * n), *q2 = dalloc(n * n);
        int64_t j, k;
        quarot_random_orthogonal_f64(n, 11, q1, n, NULL);
        quarot_random_orthogonal_f64(n, 12, q2, n, NULL);
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j) {
                double s = 0.0;
                for (k = 0; k < n; ++k) s += q1[i * n + k] * (k == 0 ? 1e-4 : 1.0) * q2[j * n + k];
                c[i * n + j] = s;
            }
        QT_OK(quarot_polar_newton_schulz_f64(n, c, n, u, n, NULL, &info, NULL));
        QT_CHECK(orth_err_d(n, n, u, n) < 1e-6);
        free(q1); free(q2);
    }
    /* a step limit that is too small */
    make_c(0, n, c);
    memset(&desc, 0, sizeof desc);
    desc.max_iter = 2;
    QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n, &desc, &info, NULL), QUAROT_ERR_NOT_CONVERGED);
    QT_EQ_INT(info.iterations, 2);
    /* a scale that puts singular values past sqrt(3): divergence is caught early */
    desc.max_iter = 0;
    desc.scale = 0.05 * sqrt((double)n) * sqrt((double)n);   /* ~ sigma_max / 20 */
    QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n, &desc, &info, NULL), QUAROT_ERR_NOT_CONVERGED);
    QT_CHECK(info.iterations < 75);
    /* an explicit good scale is used as given */
    desc.scale = 4.0 * (double)n;
    QT_OK(quarot_polar_newton_schulz_f64(n, c, n, u, n, &desc, &info, NULL));
    QT_CHECK(info.scale == 4.0 * (double)n);
    /* NaN / Inf / zero / bad arguments */
    c[7] = NAN;
    QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n, NULL, &info, NULL), QUAROT_ERR_NONFINITE);
    cf[3] = INFINITY;
    QT_ERR(quarot_polar_newton_schulz_f32(n, cf, n, uf, n, NULL, &info, NULL), QUAROT_ERR_NONFINITE);
    for (i = 0; i < n * n; ++i) { c[i] = 0.0; cf[i] = 0.0f; }
    QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n, NULL, &info, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_polar_newton_schulz_f32(n, cf, n, uf, n, NULL, &info, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    c[0] = 1.0;
    QT_ERR(quarot_polar_newton_schulz_f64(0, c, n, u, n, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_polar_newton_schulz_f64(n, c, n - 1, u, n, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n - 1, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_polar_newton_schulz_f64(n, NULL, n, u, n, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_polar_newton_schulz_f32(n, cf, n, NULL, n, NULL, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    memset(&desc, 0, sizeof desc);
    desc.tol = -1.0;
    QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n, &desc, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    desc.tol = 0.0; desc.max_iter = -3;
    QT_ERR(quarot_polar_newton_schulz_f64(n, c, n, u, n, &desc, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    desc.max_iter = 0; desc.scale = NAN;
    QT_ERR(quarot_polar_newton_schulz_f32(n, cf, n, uf, n, &desc, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    /* 1 x 1: the sign */
    c[0] = -2.5;
    QT_OK(quarot_polar_newton_schulz_f64(1, c, 1, u, 1, NULL, &info, NULL));
    QT_CHECK(u[0] == -1.0 && info.iterations == 0);
    free(c); free(u); free(cf); free(uf);
}

/* ---------------------------------------------------------------- parallel hooks: same bits */
static void run_reverse(void* user, quarot_task_fn fn, void* arg, int64_t n) {
    int64_t i;
    (void)user;
    for (i = n - 1; i >= 0; --i) fn(arg, i);
}

static void test_parallel_same_bits(void) {
    int64_t n = qt_quick() ? 70 : 500, i;
    double *c = dalloc(n * n), *u1 = dalloc(n * n), *u2 = dalloc(n * n), *q1 = dalloc(n * n), *q2 = dalloc(n * n);
    float *cf = (float*)malloc((size_t)(n * n) * sizeof(float)), *f1 = (float*)malloc((size_t)(n * n) * sizeof(float)),
          *f2 = (float*)malloc((size_t)(n * n) * sizeof(float));
    quarot_env env, pool_env;
    qx_pool* pool = qx_pool_create(2);
    int h;
    qx_pool_env(pool, &pool_env);
    QT_CHECKF(pool_env.parallel.run != NULL, "no 2-thread pool");
    qt_seed(34);
    make_c(2, n, c);
    for (i = 0; i < n * n; ++i) cf[i] = (float)c[i];
    QT_OK(quarot_polar_newton_schulz_f64(n, c, n, u1, n, NULL, NULL, NULL));
    QT_OK(quarot_polar_newton_schulz_f32(n, cf, n, f1, n, NULL, NULL, NULL));
    QT_OK(quarot_random_orthogonal_f64(n, 77, q1, n, NULL));
    for (h = 0; h < 2; ++h) {
        memset(&env, 0, sizeof env);
        if (h) env = pool_env;   /* 2 threads pulling tasks from a shared counter */
        else { env.parallel.run = run_reverse; env.parallel.n_threads = 4; }
        if (!env.parallel.run) continue;
        QT_OK(quarot_polar_newton_schulz_f64(n, c, n, u2, n, NULL, NULL, &env));
        QT_OK(quarot_polar_newton_schulz_f32(n, cf, n, f2, n, NULL, NULL, &env));
        QT_OK(quarot_random_orthogonal_f64(n, 77, q2, n, &env));
        QT_CHECK(memcmp(u1, u2, (size_t)(n * n) * sizeof(double)) == 0);
        QT_CHECK(memcmp(f1, f2, (size_t)(n * n) * sizeof(float)) == 0);
        QT_CHECK(memcmp(q1, q2, (size_t)(n * n) * sizeof(double)) == 0);
    }
    free(c); free(u1); free(u2); free(q1); free(q2); free(cf); free(f1); free(f2);
    qx_pool_destroy(pool);
}

/* A failing allocator: OUT_OF_MEMORY, nothing leaked. */
static long live;
static void* cnt_alloc(size_t n, void* u) { (void)u; ++live; return malloc(n); }
static void cnt_free(void* p, void* u) { (void)u; if (p) --live; free(p); }
static void* no_alloc(size_t n, void* u) { (void)n; (void)u; return NULL; }
static void test_linalg_allocator(void) {
    quarot_env env;
    double c[36], u[36];
    int i;
    for (i = 0; i < 36; ++i) c[i] = (double)((i * 7) % 11) - 5.0 + (i % 7 == 0 ? 10.0 : 0.0);
    memset(&env, 0, sizeof env);
    env.allocator.alloc = cnt_alloc;
    env.allocator.free = cnt_free;
    QT_OK(quarot_polar_newton_schulz_f64(6, c, 6, u, 6, NULL, NULL, &env));
    QT_OK(quarot_random_orthogonal_f64(6, 1, u, 6, &env));
    QT_EQ_INT(live, 0);
    env.allocator.alloc = no_alloc;
    QT_ERR(quarot_polar_newton_schulz_f64(6, c, 6, u, 6, NULL, NULL, &env), QUAROT_ERR_OUT_OF_MEMORY);
    QT_ERR(quarot_random_orthogonal_f64(6, 1, u, 6, &env), QUAROT_ERR_OUT_OF_MEMORY);
    QT_ERR(quarot_qr_f64(6, 6, c, 6, u, 6, &env), QUAROT_ERR_OUT_OF_MEMORY);
}

int main(void) {
    QT_RUN(test_qr);
    QT_RUN(test_qr_errors);
    QT_RUN(test_random_orthogonal);
    QT_RUN(test_random_orthogonal_golden);
    QT_RUN(test_random_orthogonal_haar);
    QT_RUN(test_polar_vs_svd);
    QT_RUN(test_polar_large);
    QT_RUN(test_polar_alias);
    QT_RUN(test_polar_orthogonal_input);
    QT_RUN(test_polar_errors);
    QT_RUN(test_parallel_same_bits);
    QT_RUN(test_linalg_allocator);
    return qt_finish("test_linalg");
}
