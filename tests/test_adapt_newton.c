/* The scaled Newton polar factor of Adapt Rotation stage 1 (>>adapt_solve, private: this program
   compiles its own copy of the implementation, QUAROT_STATIC so it cannot clash with libqx's).

   - quarot__sinv, the blocked Gauss-Jordan inverse with partial pivoting: A * inv(A) - I computed in
     double from the float A and the float result, for random Gaussian A (several panel layouts: n =
     1, 5, 130, 300) and for A = U diag(s) V^T with cond(A) = 1e5; a singular A (a zero column, A = 0)
     -> QUAROT_ERR_NOT_CONVERGED, also from a panel factored ahead on a thread (the last column zero,
     2 threads), and cond 1e10 -> the same error from the Newton driver; the same bits and permutation
     with 1, 2 and 3 threads (1 thread runs the plain panel loop, 2 and 3 the look-ahead).
   - the Newton polar path of quarot__adapt_polar against the f64 Newton-Schulz polar factor
     (quarot_polar_newton_schulz_f64) of the same regularized C, for cond(C) = 1e1 .. 1e5, beside the
     float Newton-Schulz path (the same function without the inverse's workspace); both must be
     orthogonal to tol and within a bound of the reference that grows with the condition number
     (a float C defines its polar factor only to about cond * 2^-24 in its small singular directions).
   - the deflation warm-started from the previous step's vectors gives the cold start's k, top value
     and deflated C (to 1e-6 of max|C|), also through its second pass; a second level deflates what
     the first level's accuracy test (relative to sigma_1) cannot vouch for, keeping the polar factor.
   - the power estimate of sigma_min(X) from X^-1 that scales the Newton steps: from above, within 2%
     cold, closer warm, the same bits with 2 threads.
   - quarot_adapt_desc.polar_method: names, and an unknown value -> QUAROT_ERR_INVALID_ARGUMENT.
   - quarot__adapt_dgram (R^T R of the final double re-orthogonalization: upper tiles, then mirrored)
     equals the full quarot_dgemm product bit for bit, serially and with 2 threads. */
#define QUAROT_STATIC
#define QUAROT_IMPLEMENTATION
#include "quarot.h"
#include "qt.h"
#include "support/qx_threads.h"

/* max|A X - I| in double, X = inv(A) read from the quarot__sinv result through perm */
static double inv_residual(int64_t n, const float* a, const float* res, const int64_t* perm) {
    double worst = 0.0;
    int64_t i, j, k;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) s += (double)a[i * n + k] * (double)res[k * n + perm[j]];
            s -= i == j ? 1.0 : 0.0;
            if (!(fabs(s) <= worst)) worst = fabs(s);
        }
    return worst;
}

/* A [n][n] = U diag(s) V^T with Haar U, V and s log-spaced from 1 to 1/cond (float, rounded once) */
static void make_conditioned(int64_t n, double cond, uint64_t seed, float* a) {
    double* u = (double*)malloc((size_t)(n * n) * sizeof(double));
    double* v = (double*)malloc((size_t)(n * n) * sizeof(double));
    int64_t i, j, k;
    QT_OK(quarot_random_orthogonal_f64(n, seed, u, n, NULL));
    QT_OK(quarot_random_orthogonal_f64(n, seed + 1000, v, n, NULL));
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) s += u[i * n + k] * pow(cond, -(double)k / (double)(n > 1 ? n - 1 : 1)) * v[j * n + k];
            a[i * n + j] = (float)s;
        }
    free(u);
    free(v);
}

static void test_sinv(void) {
    const int64_t sizes[] = {1, 5, 130, 300};
    int s, ns = qt_quick() ? 3 : 4;
    for (s = 0; s < ns + 1; ++s) {
        int ill = s == ns;                          /* last: cond 1e5 */
        int64_t n = ill ? (qt_quick() ? 130 : 300) : sizes[s], i;
        float* a = (float*)malloc((size_t)(n * n) * sizeof(float));
        float* r = (float*)malloc((size_t)(n * n) * sizeof(float));
        float* r2 = (float*)malloc((size_t)(n * n) * sizeof(float));
        float* w = (float*)malloc(quarot__sinv_floats(n) * sizeof(float));
        int64_t* perm = (int64_t*)malloc((size_t)(2 * n) * sizeof(int64_t));
        int64_t* perm2 = (int64_t*)malloc((size_t)(2 * n) * sizeof(int64_t));
        /* bounds: 1e-3 for the random matrices (cond ~ n); cond 1e5: n cond 2^-24, the first-order bound
           n eps ||A|| ||inv(A)|| on the residual of an inverse by elimination with small growth */
        double e, bound = ill ? (double)n * 1e5 / 16777216.0 : 1e-3;
        int t;
        if (ill) make_conditioned(n, 1e5, 7, a);
        else {
            qt_seed((unsigned long long)(40 + s));
            for (i = 0; i < n * n; ++i) a[i] = (float)qt_normal();
        }
        memcpy(r, a, (size_t)(n * n) * sizeof(float));
        QT_OK(quarot__sinv(n, r, perm, w, NULL));
        e = inv_residual(n, a, r, perm);
        /* measured: 1.3e-7 (n = 5), 6.3e-6 (130), 4.7e-5 (300); cond 1e5: 0.44 (130, bound 0.77),
           0.17 (300, bound 1.8) */
        QT_CHECKF(e <= bound, "n = %lld%s: max|A inv(A) - I| = %.3g > %.0e", (long long)n, ill ? " (cond 1e5)" : "", e, bound);
        printf("    n = %lld%s: max|A inv(A) - I| = %.2e\n", (long long)n, ill ? ", cond 1e5" : "", e);
        for (t = 2; t <= 3; ++t) {                  /* the same bits for any thread count */
            qx_pool* pool = qx_pool_create(t);
            quarot_env env;
            qx_pool_env(pool, &env);
            memcpy(r2, a, (size_t)(n * n) * sizeof(float));
            QT_OK(quarot__sinv(n, r2, perm2, w, &env));
            QT_CHECKF(memcmp(r, r2, (size_t)(n * n) * sizeof(float)) == 0 && memcmp(perm, perm2, (size_t)n * sizeof(int64_t)) == 0,
                      "n = %lld: %d threads differ from one", (long long)n, t);
            qx_pool_destroy(pool);
        }
        if (n >= 5) {
            /* exactly singular: column 3 zero, then A = 0 */
            float* g = (float*)malloc((size_t)(n * n) * sizeof(float));
            float* y = (float*)malloc((size_t)(n * n) * sizeof(float));
            double part[8];
            int steps;
            memcpy(r2, a, (size_t)(n * n) * sizeof(float));
            for (i = 0; i < n; ++i) r2[i * n + 3] = 0.0f;
            QT_CHECK(quarot__sinv(n, r2, perm2, w, NULL) == QUAROT_ERR_NOT_CONVERGED);
            memset(r2, 0, (size_t)(n * n) * sizeof(float));
            QT_CHECK(quarot__sinv(n, r2, perm2, w, NULL) == QUAROT_ERR_NOT_CONVERGED);
            if (n > 128) {
                /* the last column zero: its panel's LU runs as a look-ahead task beside the previous
                   panel's update when there are threads; its zero pivot must come back from there */
                qx_pool* pool = qx_pool_create(2);
                quarot_env env;
                qx_pool_env(pool, &env);
                memcpy(r2, a, (size_t)(n * n) * sizeof(float));
                for (i = 0; i < n; ++i) r2[i * n + n - 1] = 0.0f;
                QT_CHECK(quarot__sinv(n, r2, perm2, w, &env) == QUAROT_ERR_NOT_CONVERGED);
                qx_pool_destroy(pool);
            }
            /* cond 1e10 (I with one diagonal entry 1e-10: no zero pivot): the Newton driver refuses it,
               cond(X) >= ||X||_F ||X^-1||_F / n > 2^24. (Singular only up to rounding, e.g. two equal
               rows, is not recognized: the pivot ends near 1e-7 and ||X||_F ||X^-1||_F / n was 3e5 at n =
               300, within the range of regular cond-1e5 matrices; the inverse is then large and inaccurate,
               as with any float inversion. Stage 1's lambda keeps cond(X) near 1e5.) */
            memset(r2, 0, (size_t)(n * n) * sizeof(float));
            for (i = 0; i < n; ++i) r2[i * n + i] = i == 2 ? 1e-10f : 1.0f;
            QT_CHECK(quarot__newton_polar(n, r2, y, g, perm2, w, part, NULL, 0, 1.0, 0.0, 1e-5, &steps, NULL) == QUAROT_ERR_NOT_CONVERGED);
            free(g);
            free(y);
        }
        free(a); free(r); free(r2); free(w); free(perm); free(perm2);
    }
}

/* polar(C + lambda I) by the Newton path and by the Newton-Schulz path of quarot__adapt_polar, against
   quarot_polar_newton_schulz_f64 of the same C + lambda I in double */
static void test_newton_polar(void) {
    int64_t n = qt_quick() ? 128 : 256, nn = n * n, i, j, k;
    float *c = (float*)malloc((size_t)nn * sizeof(float)), *c0 = (float*)malloc((size_t)nn * sizeof(float));
    float *x = (float*)malloc((size_t)nn * sizeof(float)), *y = (float*)malloc((size_t)nn * sizeof(float));
    float *g = (float*)malloc((size_t)nn * sizeof(float)), *h = (float*)malloc((size_t)nn * sizeof(float));
    float* iw = (float*)malloc(quarot__sinv_floats(n) * sizeof(float));
    int64_t* perm = (int64_t*)malloc((size_t)(2 * n) * sizeof(int64_t));
    double *v = (double*)malloc((size_t)(4 * n) * sizeof(double)), *cd = (double*)malloc((size_t)nn * sizeof(double));
    double *ud = (double*)malloc((size_t)nn * sizeof(double)), *ud2 = (double*)malloc((size_t)nn * sizeof(double));
    const double reg = 1e-5, tol = 1e-5;
    int ci;
    for (ci = 1; ci <= 5; ++ci) {
        double cond = pow(10.0, ci), sig, lam, err[2] = {0, 0}, orth[2] = {0, 0}, sens = 0.0;
        int m, its[2] = {0, 0};
        quarot_polar_desc pd;
        make_conditioned(n, cond, (uint64_t)(100 + ci), c0);
        memcpy(c, c0, (size_t)nn * sizeof(float));
        sig = quarot__adapt_sigma_max(n, c, v, v + n, NULL);          /* the lambda the solver will use */
        lam = reg * sig;
        for (i = 0; i < nn; ++i) cd[i] = (double)c0[i];
        for (i = 0; i < n; ++i) cd[i * n + i] += lam;
        memset(&pd, 0, sizeof pd);
        pd.tol = 1e-12;
        pd.max_iter = 200;
        QT_OK(quarot_polar_newton_schulz_f64(n, cd, n, ud, n, &pd, NULL, NULL));
        /* what the last bit of C means: the f64 polar factor of C with every entry moved by up to half
           an ulp of float (relative 2^-24, random sign) */
        qt_seed((unsigned long long)(200 + ci));
        for (i = 0; i < nn; ++i) cd[i] = (double)c0[i] * (1.0 + (qt_normal() > 0.0 ? 1.0 : -1.0) / 16777216.0);
        for (i = 0; i < n; ++i) cd[i * n + i] += lam;
        QT_OK(quarot_polar_newton_schulz_f64(n, cd, n, ud2, n, &pd, NULL, NULL));
        for (i = 0; i < nn; ++i)
            if (!(fabs(ud2[i] - ud[i]) <= sens)) sens = fabs(ud2[i] - ud[i]);
        for (m = 0; m < 2; ++m) {                   /* 0: Newton, 1: Newton-Schulz */
            quarot__adapt_polar_out po;
            float* u = NULL;
            memcpy(c, c0, (size_t)nn * sizeof(float));
            QT_OK(quarot__adapt_polar(n, c, NULL, x, y, g, h, v, NULL, perm, m == 0 ? iw : NULL, reg, 0, 0, tol, 100, &u, &po, NULL));
            its[m] = po.iterations;
            QT_CHECK(m == 0 ? po.inverses >= 3 : po.inverses == 0);
            for (i = 0; u && i < nn; ++i)
                if (!(fabs((double)u[i] - ud[i]) <= err[m])) err[m] = fabs((double)u[i] - ud[i]);
            for (i = 0; u && i < n; ++i)            /* max|U^T U - I| in double */
                for (j = i; j < n; ++j) {
                    double s = 0.0;
                    for (k = 0; k < n; ++k) s += (double)u[k * n + i] * (double)u[k * n + j];
                    s -= i == j ? 1.0 : 0.0;
                    if (!(fabs(s) <= orth[m])) orth[m] = fabs(s);
                }
        }
        printf("    cond %.0e: max|U - U_f64|: Newton %.2e (%d iterations), Newton-Schulz %.2e (%d); max|U^T U - I| %.1e, %.1e; "
               "U_f64 moves %.1e for C's last bit\n", cond, err[0], its[0], err[1], its[1], orth[0], orth[1], sens);
        /* measured at n = 256, cond 1e1 .. 1e5: Newton 1.9e-6, 2.4e-6, 9.8e-6, 2.3e-4, 4.1e-3; Newton-Schulz
           7.8e-6, 5.0e-6, 2.7e-6, 1.1e-5, 8.0e-5; the reference itself moves by 2.1e-8 .. 2.1e-5 when C's
           entries move by half a float ulp. Newton's error grows like cond * 2^-24: it comes from the
           float inverse of the first step (with that one inverse done in double, a trial gave 9.2e-6 at
           cond 1e5), in the directions of C's smallest singular values, which carry the least
           activation energy (stage 1's losses agree with the Newton-Schulz path's to ~1e-4: docs/algorithms.md §5).
           The bound: 2e-5 + 2 cond 2^-24 */
        QT_CHECKF(err[0] <= 2e-5 + 2.0 * cond / 16777216.0, "cond %.0e: Newton polar factor %.3g from the f64 reference", cond, err[0]);
        QT_CHECKF(orth[0] <= 2.0 * tol && orth[1] <= 2.0 * tol, "cond %.0e: not orthogonal (%.3g, %.3g)", cond, orth[0], orth[1]);
    }
    free(c); free(c0); free(x); free(y); free(g); free(h); free(iw); free(perm); free(v); free(cd); free(ud); free(ud2);
}

/* The deflation started from the previous step's Ritz vectors (k_warm > 0) against a cold start
   (random vectors, 3 + 8 iterations) on the same C, the next step's C (C plus a small change): the
   same k, the same top value and the same deflated C to the float rounding (both pass the same
   accuracy test, which bounds the deflated values' error by 1e-8 sigma_{k+1}); also when k_warm asks
   for more values than pass (p - 2), which runs the second, longer warm pass. */
static void test_deflate_warm(void) {
    const int64_t n = 96, nn = n * n;
    const int p = 32;
    float* c0 = (float*)malloc((size_t)nn * sizeof(float));
    float* c1 = (float*)malloc((size_t)nn * sizeof(float));
    float* cc = (float*)malloc((size_t)nn * sizeof(float));
    float* cw = (float*)malloc((size_t)nn * sizeof(float));
    double* defl = (double*)malloc(quarot__adapt_defl_doubles(n) * sizeof(double));
    double* vsave = (double*)malloc((size_t)(n * p) * sizeof(double));
    double* u = (double*)malloc((size_t)nn * sizeof(double));
    double* v = (double*)malloc((size_t)nn * sizeof(double));
    double sig, lam, top, topc, topw, cmax = 0.0, diff = 0.0;
    int64_t i, j, k;
    int k0, kc, kw, kc0, kw0, kk, trial;
    QT_OK(quarot_random_orthogonal_f64(n, 5, u, n, NULL));
    QT_OK(quarot_random_orthogonal_f64(n, 6, v, n, NULL));
    qt_seed(9);
    for (i = 0; i < n; ++i)                       /* 6 outlier values 1e4 .. 1e3 above a spread 1 .. 1e-3 */
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) {
                double sk = k < 6 ? 1e4 / (1.0 + 1.8 * (double)k) : pow(1e-3, (double)(k - 6) / (double)(n - 7));
                s += u[i * n + k] * sk * v[j * n + k];
            }
            c0[i * n + j] = (float)s;
            c1[i * n + j] = (float)(s * (1.0 + 1e-3 * qt_normal()));   /* the next step's C */
        }
    QT_OK(quarot__adapt_deflate(n, c0, NULL, defl, defl + nn, defl + nn + n * p, defl + nn + 2 * n * p, 1e-5, 0, &sig, &lam,
                                &top, &kk, &k0, NULL));
    QT_CHECKF(k0 >= 6 && kk >= k0, "cold start deflated %d values (%d by the first level), 6 outliers planted", kk, k0);
    memcpy(vsave, defl + nn, (size_t)(n * p) * sizeof(double));
    memcpy(cc, c1, (size_t)nn * sizeof(float));
    QT_OK(quarot__adapt_deflate(n, cc, NULL, defl, defl + nn, defl + nn + n * p, defl + nn + 2 * n * p, 1e-5, 0, &sig, &lam,
                                &topc, &kc, &kc0, NULL));
    for (i = 0; i < nn; ++i) if (fabs(cc[i]) > cmax) cmax = fabs(cc[i]);
    for (trial = 0; trial < 2; ++trial) {
        const int kwarm = trial ? p - 2 : k0;
        memcpy(defl + nn, vsave, (size_t)(n * p) * sizeof(double));
        memcpy(cw, c1, (size_t)nn * sizeof(float));
        QT_OK(quarot__adapt_deflate(n, cw, NULL, defl, defl + nn, defl + nn + n * p, defl + nn + 2 * n * p, 1e-5, kwarm, &sig,
                                    &lam, &topw, &kw, &kw0, NULL));
        diff = 0.0;
        for (i = 0; i < nn; ++i) if (fabs(cw[i] - cc[i]) > diff) diff = fabs(cw[i] - cc[i]);
        printf("    k_warm %d: k = %d (cold %d), top %.9g (cold %.9g), max|C_warm - C_cold| = %.2e max|C|\n", kwarm, kw, kc, topw,
               topc, diff / cmax);
        QT_CHECKF(kw == kc && kw0 == kc0, "k_warm %d: deflated %d values (%d first), the cold start %d (%d)", kwarm, kw, kw0, kc, kc0);
        QT_CHECKF(fabs(topw - topc) <= 1e-6 * topc, "k_warm %d: top %.9g, cold %.9g", kwarm, topw, topc);
        QT_CHECKF(diff <= 1e-6 * cmax, "k_warm %d: max|C_warm - C_cold| = %.3g max|C|", kwarm, diff / cmax);
    }
    free(c0); free(c1); free(cc); free(cw); free(defl); free(vsave); free(u); free(v);
}

/* Deflation in levels: 4 singular values near 1e6 and 8 near 1e3 above a bulk 1 .. 1e-2 (plus lambda =
   1e-5 sigma_1 = 10). The first level's accuracy test, relative to sigma_1, cannot vouch for the 8 (their
   Ritz residuals sit at the double rounding of sigma_1^2, 1e-4, against a gap of 2.5e5, times
   sigma_1/sigma_13 = 1e5): it deflates the 4; the second, relative to the deflated top (1e3), takes all 12.
   The deflated C keeps C + lambda I's polar factor (f64 references of both, to the float rounding of the
   result), and ||C'||_F <= sqrt(n) top: no singular value above the bulk is left. */
static void test_deflate_levels(void) {
    const int64_t n = 96, nn = n * n;
    const int p = 32;
    float* c = (float*)malloc((size_t)nn * sizeof(float));
    float* c0 = (float*)malloc((size_t)nn * sizeof(float));
    double* defl = (double*)malloc(quarot__adapt_defl_doubles(n) * sizeof(double));
    double* u = (double*)malloc((size_t)nn * sizeof(double));
    double* v = (double*)malloc((size_t)nn * sizeof(double));
    double* cd = (double*)malloc((size_t)nn * sizeof(double));
    double* ua = (double*)malloc((size_t)nn * sizeof(double));
    double* ub = (double*)malloc((size_t)nn * sizeof(double));
    double sig, lam, top, fro = 0.0, diff = 0.0;
    int64_t i, j, k;
    int kk, k0;
    quarot_polar_desc pd;
    QT_OK(quarot_random_orthogonal_f64(n, 15, u, n, NULL));
    QT_OK(quarot_random_orthogonal_f64(n, 16, v, n, NULL));
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) {
                double sk = k < 4 ? 1e6 * (1.0 - 0.1 * (double)k) : k < 12 ? 1e3 * (1.0 - 0.06 * (double)(k - 4))
                                                                        : pow(1e-2, (double)(k - 12) / (double)(n - 13));
                s += u[i * n + k] * sk * v[j * n + k];
            }
            c0[i * n + j] = (float)s;
        }
    memcpy(c, c0, (size_t)nn * sizeof(float));
    QT_OK(quarot__adapt_deflate(n, c, NULL, defl, defl + nn, defl + nn + n * p, defl + nn + 2 * n * p, 1e-5, 0, &sig, &lam, &top,
                                &kk, &k0, NULL));
    for (i = 0; i < nn; ++i) fro += (double)c[i] * (double)c[i];
    fro = sqrt(fro);
    memset(&pd, 0, sizeof pd);
    pd.tol = 1e-12;
    pd.max_iter = 200;
    for (i = 0; i < nn; ++i) cd[i] = (double)c0[i];
    for (i = 0; i < n; ++i) cd[i * n + i] += lam;
    QT_OK(quarot_polar_newton_schulz_f64(n, cd, n, ua, n, &pd, NULL, NULL));
    for (i = 0; i < nn; ++i) cd[i] = (double)c[i];
    QT_OK(quarot_polar_newton_schulz_f64(n, cd, n, ub, n, &pd, NULL, NULL));
    for (i = 0; i < nn; ++i) if (!(fabs(ua[i] - ub[i]) <= diff)) diff = fabs(ua[i] - ub[i]);
    printf("    deflated %d values (%d by the first level), top %.6g, ||C'||_F / sqrt(n) %.6g; polar factors %.2e apart\n", kk,
           k0, top, fro / sqrt((double)n), diff);
    QT_CHECKF(k0 == 4 && kk == 12, "deflated %d values, %d by the first level (expected 12 and 4)", kk, k0);
    QT_CHECKF(top < 20.0 && fro <= sqrt((double)n) * top * (1.0 + 1e-6), "top %.6g (the bulk's is about lambda + 1), ||C'||_F %.6g",
              top, fro);
    QT_CHECKF(diff <= 1e-5, "the deflated C's polar factor is %.3g from C + lambda I's", diff);
    free(c); free(c0); free(defl); free(u); free(v); free(cd); free(ua); free(ub);
}

/* The power estimate of sigma_min(X) from X^-1 (quarot__newton_smin) on X = U diag(s) V^T, s log-spaced
   1 .. 1e-3: from above (it is 1/sqrt(||y y^T u||) for a unit u), within 2% of 1e-3 cold and closer warm,
   the same bits with 2 threads. */
static void test_newton_smin(void) {
    const int64_t n = qt_quick() ? 130 : 200, nn = n * n;
    float* a = (float*)malloc((size_t)nn * sizeof(float));
    float* g = (float*)malloc((size_t)nn * sizeof(float));
    float* w = (float*)malloc(quarot__sinv_floats(n) * sizeof(float));
    int64_t* perm = (int64_t*)malloc((size_t)(2 * n) * sizeof(int64_t));
    double *pv = (double*)malloc((size_t)(2 * n) * sizeof(double)), *pv2 = (double*)malloc((size_t)(2 * n) * sizeof(double));
    double part[8], cold, warm, cold2;
    qx_pool* pool = qx_pool_create(2);
    quarot_env env;
    qx_pool_env(pool, &env);
    make_conditioned(n, 1e3, 21, a);
    QT_OK(quarot__sinv(n, a, perm, w, NULL));
    quarot__newton_pass(0, n, NULL, a, g, NULL, 1.0, part, NULL);   /* g = y^T */
    cold = quarot__newton_smin(n, a, g, pv, pv + n, 0, NULL);
    warm = quarot__newton_smin(n, a, g, pv, pv + n, 1, NULL);
    cold2 = quarot__newton_smin(n, a, g, pv2, pv2 + n, 0, &env);
    printf("    sigma_min 1e-3: cold %.6g, then warm %.6g\n", cold, warm);
    QT_CHECKF(cold >= 1e-3 * (1.0 - 1e-4) && cold <= 1.02e-3, "cold estimate %.9g of 1e-3", cold);
    QT_CHECKF(warm >= 1e-3 * (1.0 - 1e-4) && warm <= cold, "warm estimate %.9g (cold %.9g) of 1e-3", warm, cold);
    QT_CHECKF(cold2 == cold, "2 threads: %.17g, 1 thread %.17g", cold2, cold);
    qx_pool_destroy(pool);
    free(a); free(g); free(w); free(perm); free(pv); free(pv2);
}

static void test_polar_method_names(void) {
    quarot_adapt_capture cap;
    quarot_adapt_context ctx;
    quarot_adapt_desc d;
    float row[64];
    int i;
    QT_CHECK(strcmp(quarot_adapt_polar_method_name(QUAROT_ADAPT_POLAR_DEFAULT), "default") == 0);
    QT_CHECK(strcmp(quarot_adapt_polar_method_name(QUAROT_ADAPT_POLAR_NEWTON), "newton") == 0);
    QT_CHECK(strcmp(quarot_adapt_polar_method_name(QUAROT_ADAPT_POLAR_NEWTON_SCHULZ), "newton-schulz") == 0);
    QT_CHECK(quarot_adapt_polar_method_name(3) == NULL && quarot_adapt_polar_method_name(-1) == NULL);
    for (i = 0; i < 64; ++i) row[i] = (float)(i % 7) - 3.0f;
    memset(&d, 0, sizeof d);
    QT_OK(quarot_adapt_capture_init(&cap, 64, &d, NULL));
    QT_OK(quarot_adapt_capture_add(&cap, "layers.0.up_proj", row, 1, 64));
    quarot_adapt_context_init(&ctx, NULL);
    d.polar_method = 3;
    QT_CHECK(quarot_adapt_stage1(&cap, &d, &ctx, NULL) == QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECK(strstr(ctx.error, "polar_method") != NULL);
    quarot_adapt_context_free(&ctx);
    quarot_adapt_capture_free(&cap);
}

static void test_dgram(void) {
    const int64_t sizes[] = {1, 7, 130, 300};
    qx_pool* pool = qx_pool_create(2);
    quarot_env env;
    int s, t;
    memset(&env, 0, sizeof env);
    qx_pool_env(pool, &env);
    for (s = 0; s < 4; ++s) {
        int64_t n = sizes[s], i;
        double* r = (double*)malloc((size_t)(n * n) * sizeof(double));
        double* full = (double*)malloc((size_t)(n * n) * sizeof(double));
        double* e = (double*)malloc((size_t)(n * n) * sizeof(double));
        for (i = 0; i < n * n; ++i) r[i] = qt_normal();
        QT_OK(quarot_dgemm(1, 0, n, n, n, 1.0, r, n, r, n, 0.0, full, n, NULL));
        for (t = 0; t < 2; ++t) {
            for (i = 0; i < n * n; ++i) e[i] = (double)NAN;
            QT_OK(quarot__adapt_dgram(n, r, e, t ? &env : NULL));
            QT_CHECKF(memcmp(e, full, (size_t)(n * n) * sizeof(double)) == 0, "dgram n=%lld threads=%d differs from the full product",
                      (long long)n, t + 1);
        }
        free(r); free(full); free(e);
    }
    qx_pool_destroy(pool);
}

int main(void) {
    QT_RUN(test_sinv);
    QT_RUN(test_dgram);
    QT_RUN(test_newton_polar);
    QT_RUN(test_deflate_warm);
    QT_RUN(test_deflate_levels);
    QT_RUN(test_newton_smin);
    QT_RUN(test_polar_method_names);
    return qt_finish("test_adapt_newton");
}
