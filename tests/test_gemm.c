/* SGEMM / DGEMM against a naive long-double reference: many shapes (blocking boundaries of every
   kernel, odd and tall/skinny sizes, k = 0), all four transpose combinations, alpha/beta cases, leading
   dimensions larger than the rows, sub-matrix views whose surroundings must stay untouched, NaN in C
   with beta = 0, every compiled-in ISA plus the dispatching entry points, the parallel path (reverse
   order hook and a 2-thread qx_pool) bit for bit against the serial one, and argument errors.

   Tolerance for an element: 2 * (k + 2) * eps * (|alpha| * sum_p |a_ip * b_pj| + |beta * c_ij|) + tiny,
   eps = 2^-24 (float) or 2^-53 (double): a plain k-term sum commits at most k roundings of relative
   size eps on partial sums bounded by that absolute sum (the factor 2 covers the epilogue). */
#include "quarot.h"
#include "qt.h"
#include "support/qx_threads.h"

static const quarot_isa all_isas[] = { QUAROT_ISA_REF, QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON };
#define N_ISAS ((int)(sizeof all_isas / sizeof all_isas[0]))
#define GUARD 7.25   /* value of every element outside the views: must survive untouched */

/* Element (i, p) of op(X) for X stored row-major with row stride ld. */
static double op_at_f(const float* x, int64_t ld, int t, int64_t i, int64_t p) { return t ? x[p * ld + i] : x[i * ld + p]; }
static long double op_at_d(const double* x, int64_t ld, int t, int64_t i, int64_t p) { return t ? x[p * ld + i] : x[i * ld + p]; }

typedef struct gemm_case {
    int64_t m, n, k;
} gemm_case;

/* One float case: random A, B, C with padded leading dimensions; run `isa` (or the dispatching entry
   when use_entry); check every element against the reference and the padding against GUARD. */
static int check_sgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, float alpha, float beta,
                       int nan_c, int use_entry, quarot_isa isa, const quarot_env* env) {
    int64_t lda = (ta ? m : k) + 3, ldb = (tb ? k : n) + 5, ldc = n + 2;
    int64_t ra = ta ? k : m, rb = tb ? n : k, i, j, p;
    size_t na = (size_t)(ra * lda + 1), nb = (size_t)(rb * ldb + 1), nc = (size_t)((m + 2) * ldc + 1);
    float* a = (float*)malloc(na * sizeof(float));
    float* b = (float*)malloc(nb * sizeof(float));
    float* c = (float*)malloc(nc * sizeof(float));
    float* c0 = (float*)malloc(nc * sizeof(float));
    float* cv = c + ldc + 1;   /* the view starts one row and one column in */
    int bad = 0;
    quarot_result r;
    for (i = 0; i < (int64_t)na; ++i) a[i] = (float)(qt_uniform() * 2.0 - 1.0);
    for (i = 0; i < (int64_t)nb; ++i) b[i] = (float)(qt_uniform() * 2.0 - 1.0);
    for (i = 0; i < (int64_t)nc; ++i) c[i] = (float)GUARD;
    for (i = 0; i < m; ++i)
        for (j = 0; j < n; ++j) cv[i * ldc + j] = nan_c ? (float)NAN : (float)(qt_uniform() * 2.0 - 1.0);
    memcpy(c0, c, nc * sizeof(float));
    if (use_entry) r = quarot_sgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cv, ldc, env);
    else r = quarot_sgemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cv, ldc, env, isa);
    if (r != QUAROT_OK) { QT_CHECKF(0, "sgemm returned %d", (int)r); bad = 1; }
    for (i = 0; i < m + 2 && !bad; ++i)
        for (j = -1; j < ldc - 1 && !bad; ++j) {
            float* got = cv + i * ldc + j;
            if (i < m && j >= 0 && j < n) {
                double ref = 0.0, mag = 0.0, tol, cold = beta == 0.0f ? 0.0 : (double)c0[(got - c)];
                for (p = 0; p < k; ++p) {
                    double t = op_at_f(a, lda, ta, i, p) * op_at_f(b, ldb, tb, p, j);
                    ref += t; mag += fabs(t);
                }
                ref = (double)alpha * ref + (double)beta * cold;
                tol = 2.0 * (double)(k + 2) * 5.960464477539063e-08 * (fabs((double)alpha) * mag + fabs((double)beta * cold)) + 1e-30;
                if (!(fabs((double)*got - ref) <= tol)) {
                    QT_CHECKF(0, "sgemm isa=%s ta=%d tb=%d %lldx%lldx%lld alpha=%g beta=%g: C[%lld][%lld] = %.9g, ref %.9g (tol %.3g)",
                              use_entry ? "entry" : quarot_isa_name(isa), ta, tb, (long long)m, (long long)n, (long long)k,
                              (double)alpha, (double)beta, (long long)i, (long long)j, (double)*got, ref, tol);
                    bad = 1;
                }
            } else if (got >= c && got < c + nc && *got != (float)GUARD) {
                QT_CHECKF(0, "sgemm isa=%s %lldx%lldx%lld touched C outside the view at (%lld, %lld)",
                          quarot_isa_name(isa), (long long)m, (long long)n, (long long)k, (long long)i, (long long)j);
                bad = 1;
            }
        }
    for (i = 0; i < ldc + 1 && !bad; ++i) if (c[i] != (float)GUARD) { QT_CHECKF(0, "sgemm wrote before the view"); bad = 1; }
    free(a); free(b); free(c); free(c0);
    return bad;
}

static int check_dgemm(int ta, int tb, int64_t m, int64_t n, int64_t k, double alpha, double beta,
                       int nan_c, int use_entry, quarot_isa isa, const quarot_env* env) {
    int64_t lda = (ta ? m : k) + 2, ldb = (tb ? k : n) + 1, ldc = n + 3;
    int64_t ra = ta ? k : m, rb = tb ? n : k, i, j, p;
    size_t na = (size_t)(ra * lda + 1), nb = (size_t)(rb * ldb + 1), nc = (size_t)((m + 2) * ldc + 1);
    double* a = (double*)malloc(na * sizeof(double));
    double* b = (double*)malloc(nb * sizeof(double));
    double* c = (double*)malloc(nc * sizeof(double));
    double* c0 = (double*)malloc(nc * sizeof(double));
    double* cv = c + ldc + 1;
    int bad = 0;
    quarot_result r;
    for (i = 0; i < (int64_t)na; ++i) a[i] = qt_uniform() * 2.0 - 1.0;
    for (i = 0; i < (int64_t)nb; ++i) b[i] = qt_uniform() * 2.0 - 1.0;
    for (i = 0; i < (int64_t)nc; ++i) c[i] = GUARD;
    for (i = 0; i < m; ++i)
        for (j = 0; j < n; ++j) cv[i * ldc + j] = nan_c ? (double)NAN : qt_uniform() * 2.0 - 1.0;
    memcpy(c0, c, nc * sizeof(double));
    if (use_entry) r = quarot_dgemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cv, ldc, env);
    else r = quarot_dgemm_builtin(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, cv, ldc, env, isa);
    if (r != QUAROT_OK) { QT_CHECKF(0, "dgemm returned %d", (int)r); bad = 1; }
    for (i = 0; i < m + 2 && !bad; ++i)
        for (j = -1; j < ldc - 1 && !bad; ++j) {
            double* got = cv + i * ldc + j;
            if (i < m && j >= 0 && j < n) {
                long double ref = 0.0L, mag = 0.0L, cold = beta == 0.0 ? 0.0L : (long double)c0[(got - c)];
                double tol;
                for (p = 0; p < k; ++p) {
                    long double t = op_at_d(a, lda, ta, i, p) * op_at_d(b, ldb, tb, p, j);
                    ref += t; mag += fabsl(t);
                }
                ref = (long double)alpha * ref + (long double)beta * cold;
                tol = 2.0 * (double)(k + 2) * 1.1102230246251565e-16 * (double)(fabsl((long double)alpha) * mag + fabsl((long double)beta * cold)) + 1e-300;
                if (!(fabs(*got - (double)ref) <= tol)) {
                    QT_CHECKF(0, "dgemm isa=%s ta=%d tb=%d %lldx%lldx%lld alpha=%g beta=%g: C[%lld][%lld] = %.17g, ref %.17g (tol %.3g)",
                              use_entry ? "entry" : quarot_isa_name(isa), ta, tb, (long long)m, (long long)n, (long long)k,
                              alpha, beta, (long long)i, (long long)j, *got, (double)ref, tol);
                    bad = 1;
                }
            } else if (got >= c && got < c + nc && *got != GUARD) {
                QT_CHECKF(0, "dgemm isa=%s %lldx%lldx%lld touched C outside the view at (%lld, %lld)",
                          quarot_isa_name(isa), (long long)m, (long long)n, (long long)k, (long long)i, (long long)j);
                bad = 1;
            }
        }
    for (i = 0; i < ldc + 1 && !bad; ++i) if (c[i] != GUARD) { QT_CHECKF(0, "dgemm wrote before the view"); bad = 1; }
    free(a); free(b); free(c); free(c0);
    return bad;
}

/* Shapes: tiny, odd, around the micro-tile sizes of every kernel (4, 6, 8, 12 rows; 4, 8, 12, 16, 32
   columns), around the k blocks (256, 384, 512) and the A blocks (mr * 8 rows: 32, 48, 64, 96),
   past the column blocks (2048 ref, 3072 NEON, 4096 x86), tall/skinny ones, and k = 0. */
static const gemm_case shapes_full[] = {
    {1, 1, 1}, {7, 13, 5}, {2, 3, 1}, {5, 1, 9}, {1, 17, 3},
    {13, 31, 7}, {14, 32, 16}, {15, 33, 17}, {29, 65, 3}, {28, 64, 2}, {6, 16, 4}, {12, 24, 11},
    {8, 12, 6}, {9, 13, 10}, {4, 8, 3}, {3, 7, 2}, {17, 9, 127}, {5, 7, 128}, {6, 9, 129},
    {3, 5, 255}, {15, 17, 256}, {7, 33, 257}, {4, 6, 511}, {5, 3, 512}, {9, 11, 513},
    {5, 3, 383}, {4, 5, 384}, {3, 2, 385}, {95, 5, 9}, {96, 3, 4}, {97, 34, 6}, {111, 5, 9},
    {49, 48, 50}, {47, 97, 31}, {300, 257, 129},
    {32, 5, 3}, {33, 7, 2}, {63, 4, 5}, {65, 3, 4}, {1000, 3, 17}, {2, 500, 300}, {3, 2049, 2},
    {2, 3073, 3}, {1, 4100, 1}, {9, 9, 0}, {64, 64, 64}
};
static const gemm_case shapes_quick[] = {
    {1, 1, 1}, {7, 13, 5}, {15, 33, 17}, {6, 16, 4}, {9, 13, 10}, {5, 7, 128}, {7, 33, 257},
    {113, 34, 6}, {47, 97, 31}, {120, 70, 60}, {2, 200, 90}, {3, 2049, 2}, {9, 9, 0}
};

static void get_shapes(const gemm_case** s, int* n) {
    if (qt_quick()) { *s = shapes_quick; *n = (int)(sizeof shapes_quick / sizeof shapes_quick[0]); }
    else { *s = shapes_full; *n = (int)(sizeof shapes_full / sizeof shapes_full[0]); }
}

/* alpha/beta pairs: plain product, general, accumulate, alpha = 0 (C scaled only). */
static const double ab_cases[][2] = { {1.0, 0.0}, {-0.75, 1.5}, {2.0, 1.0}, {0.0, -2.0} };

static void test_sgemm_shapes(void) {
    const gemm_case* sh;
    int ns, s, t, ii, abi, fails = 0;
    get_shapes(&sh, &ns);
    qt_seed(11);
    for (ii = 0; ii < N_ISAS; ++ii) {
        if (!quarot_isa_compiled(all_isas[ii])) continue;
        for (s = 0; s < ns && fails < 3; ++s)
            for (t = 0; t < 4; ++t) {
                abi = (s + t) % 4;   /* rotate the alpha/beta cases over the shapes */
                fails += check_sgemm(t & 1, t >> 1, sh[s].m, sh[s].n, sh[s].k, (float)ab_cases[abi][0],
                                     (float)ab_cases[abi][1], 0, 0, all_isas[ii], NULL);
            }
    }
    /* The dispatching entry point (CBLAS when compiled with QUAROT_USE_CBLAS) and DEFAULT. */
    for (s = 0; s < ns && fails < 3; ++s)
        for (t = 0; t < 4; ++t) {
            fails += check_sgemm(t & 1, t >> 1, sh[s].m, sh[s].n, sh[s].k, -1.25f, 0.5f, 0, 1, QUAROT_ISA_DEFAULT, NULL);
            fails += check_sgemm(t & 1, t >> 1, sh[s].m, sh[s].n, sh[s].k, 1.0f, 0.0f, 0, 0, QUAROT_ISA_DEFAULT, NULL);
        }
}

static void test_dgemm_shapes(void) {
    const gemm_case* sh;
    int ns, s, t, ii, abi, fails = 0;
    get_shapes(&sh, &ns);
    qt_seed(12);
    for (ii = 0; ii < N_ISAS; ++ii) {
        if (!quarot_isa_compiled(all_isas[ii])) continue;
        for (s = 0; s < ns && fails < 3; ++s)
            for (t = 0; t < 4; ++t) {
                abi = (s + t + 1) % 4;
                fails += check_dgemm(t & 1, t >> 1, sh[s].m, sh[s].n, sh[s].k, ab_cases[abi][0],
                                     ab_cases[abi][1], 0, 0, all_isas[ii], NULL);
            }
    }
    for (s = 0; s < ns && fails < 3; ++s)
        for (t = 0; t < 4; ++t)
            fails += check_dgemm(t & 1, t >> 1, sh[s].m, sh[s].n, sh[s].k, 0.5, -1.0, 0, 1, QUAROT_ISA_DEFAULT, NULL);
}

/* beta == 0 must ignore NaN in C (BLAS semantics), on every ISA, full and edge tiles, and k == 0. */
static void test_beta_zero_ignores_nan(void) {
    int ii;
    qt_seed(13);
    for (ii = 0; ii < N_ISAS; ++ii) {
        if (!quarot_isa_compiled(all_isas[ii])) continue;
        check_sgemm(0, 0, 31, 45, 19, 1.0f, 0.0f, 1, 0, all_isas[ii], NULL);
        check_sgemm(1, 1, 17, 70, 300, -2.0f, 0.0f, 1, 0, all_isas[ii], NULL);
        check_dgemm(0, 1, 29, 33, 21, 1.0, 0.0, 1, 0, all_isas[ii], NULL);
        check_dgemm(1, 0, 15, 17, 0, 1.0, 0.0, 1, 0, all_isas[ii], NULL);
    }
    check_sgemm(0, 0, 5, 6, 0, 1.0f, 0.0f, 1, 1, QUAROT_ISA_DEFAULT, NULL);
    check_dgemm(0, 0, 40, 41, 42, 1.0, 0.0, 1, 1, QUAROT_ISA_DEFAULT, NULL);
}

/* ---- parallel hooks: reverse order (serial) and a 2-thread qx_pool (tasks from a shared counter) ---- */
static int64_t hook_calls;
static void run_reverse(void* user, quarot_task_fn fn, void* arg, int64_t n) {
    int64_t i;
    (void)user;
    ++hook_calls;
    for (i = n - 1; i >= 0; --i) fn(arg, i);
}
static quarot_env pool_env;
static void run_pool(void* user, quarot_task_fn fn, void* arg, int64_t n) {
    (void)user;
    ++hook_calls;
    pool_env.parallel.run(pool_env.parallel.user_data, fn, arg, n);
}


static void test_parallel_bit_identical(void) {
    const int64_t shapes[][3] = { {300, 257, 129}, {97, 1100, 70}, {513, 40, 300}, {64, 64, 64} };
    int s, t, ii, h;
    quarot_env env;
    qx_pool* pool = qx_pool_create(2);
    qx_pool_env(pool, &pool_env);
    QT_CHECKF(pool_env.parallel.run != NULL, "no 2-thread pool");
    if (!pool_env.parallel.run) { qx_pool_destroy(pool); return; }
    for (h = 0; h < 2; ++h) {
        memset(&env, 0, sizeof env);
        env.parallel.run = h == 0 ? run_reverse : run_pool;
        env.parallel.n_threads = h == 0 ? 3 : 2;
        for (ii = 0; ii < N_ISAS; ++ii) {
            if (!quarot_isa_compiled(all_isas[ii])) continue;
            for (s = 0; s < 4; ++s)
                for (t = 0; t < 4; ++t) {
                    int64_t m = shapes[s][0], n = shapes[s][1], k = shapes[s][2], i;
                    int64_t lda = t & 1 ? m : k, ldb = t & 2 ? k : n;
                    float* a = (float*)malloc((size_t)(m * k) * sizeof(float));
                    float* b = (float*)malloc((size_t)(k * n) * sizeof(float));
                    float* c1 = (float*)malloc((size_t)(m * n) * sizeof(float));
                    float* c2 = (float*)malloc((size_t)(m * n) * sizeof(float));
                    double* da = (double*)malloc((size_t)(m * k) * sizeof(double));
                    double* db = (double*)malloc((size_t)(k * n) * sizeof(double));
                    double* d1 = (double*)malloc((size_t)(m * n) * sizeof(double));
                    double* d2 = (double*)malloc((size_t)(m * n) * sizeof(double));
                    int64_t before = hook_calls;
                    if (qt_quick() && s != 3) { free(a); free(b); free(c1); free(c2); free(da); free(db); free(d1); free(d2); continue; }
                    for (i = 0; i < m * k; ++i) { da[i] = qt_normal(); a[i] = (float)da[i]; }
                    for (i = 0; i < k * n; ++i) { db[i] = qt_normal(); b[i] = (float)db[i]; }
                    for (i = 0; i < m * n; ++i) { d1[i] = d2[i] = qt_normal(); c1[i] = c2[i] = (float)d1[i]; }
                    QT_OK(quarot_sgemm_builtin(t & 1, t >> 1, m, n, k, 0.5f, a, lda, b, ldb, -1.0f, c1, n, NULL, all_isas[ii]));
                    QT_OK(quarot_sgemm_builtin(t & 1, t >> 1, m, n, k, 0.5f, a, lda, b, ldb, -1.0f, c2, n, &env, all_isas[ii]));
                    QT_OK(quarot_dgemm_builtin(t & 1, t >> 1, m, n, k, 1.0, da, lda, db, ldb, 0.0, d1, n, NULL, all_isas[ii]));
                    QT_OK(quarot_dgemm_builtin(t & 1, t >> 1, m, n, k, 1.0, da, lda, db, ldb, 0.0, d2, n, &env, all_isas[ii]));
                    /* at least once per product (a narrow DGEMM also calls it for its edges) */
                    QT_CHECKF(hook_calls >= before + 2, "the parallel hook was not used for %lldx%lldx%lld", (long long)m, (long long)n, (long long)k);
                    QT_CHECKF(memcmp(c1, c2, (size_t)(m * n) * sizeof(float)) == 0, "sgemm %s parallel != serial (%lldx%lldx%lld, t=%d)",
                              quarot_isa_name(all_isas[ii]), (long long)m, (long long)n, (long long)k, t);
                    QT_CHECKF(memcmp(d1, d2, (size_t)(m * n) * sizeof(double)) == 0, "dgemm %s parallel != serial (%lldx%lldx%lld, t=%d)",
                              quarot_isa_name(all_isas[ii]), (long long)m, (long long)n, (long long)k, t);
                    free(a); free(b); free(c1); free(c2); free(da); free(db); free(d1); free(d2);
                }
        }
    }
    qx_pool_destroy(pool);
}

/* Narrow DGEMMs (B not transposed, 1 to 3 narrow tiles: 32, 64 or 96 columns on AVX-512) read A in
   place instead of packing it, A row-major or transposed. Every element must still be the loop
   nest's chain: the first n columns of a 160-column product (packed path) equal, bit for bit, the
   n-column product (narrow path, its last m % 6 rows through the loop nest; other n: the loop nest),
   serial and on the 2-thread pool, with beta 0 (C holds NaN, never read) and beta != 0, for m and k
   around the 6-row tiles and the 256-wide k blocks, op(A) = A and A^T. */
static void test_narrow_same_bits(void) {
    const int64_t ms[] = { 5, 6, 13, 103 }, ns[] = { 31, 32, 33, 64, 95, 96, 128 }, ks[] = { 1, 255, 257, 520 };
    const int64_t W = 160;
    int ii, mi, ni, ki, e, ta, bad = 0;
    qx_pool* pool = qx_pool_create(2);
    quarot_env env;
    memset(&env, 0, sizeof env);
    qx_pool_env(pool, &env);
    qt_seed(17);
    for (ii = 0; ii < N_ISAS; ++ii) {
        if (!quarot_isa_compiled(all_isas[ii])) continue;
        for (mi = 0; mi < 4; ++mi)
            for (ni = qt_quick() ? 3 : 0; ni < 7; ni += qt_quick() ? 2 : 1)
                for (ki = 0; ki < 4; ++ki)
                    for (e = 0; e < 4 && !bad; ++e) {
                        int64_t m = ms[mi], n = ns[ni], k = ks[ki], i, j;
                        const int64_t lda = (ta = e >> 1) ? m : k;   /* A stored [k][m] when transposed */
                        double beta = e & 1 ? -0.75 : 0.0;
                        double* a = (double*)malloc((size_t)(m * k) * sizeof(double));
                        double* b = (double*)malloc((size_t)(k * W) * sizeof(double));
                        double* c1 = (double*)malloc((size_t)(m * n) * sizeof(double));
                        double* c2 = (double*)malloc((size_t)(m * W) * sizeof(double));
                        for (i = 0; i < m * k; ++i) a[i] = qt_normal();
                        for (i = 0; i < k * W; ++i) b[i] = qt_normal();
                        for (i = 0; i < m; ++i)
                            for (j = 0; j < W; ++j) {
                                c2[i * W + j] = e & 1 ? qt_normal() : (double)NAN;
                                if (j < n) c1[i * n + j] = c2[i * W + j];
                            }
                        QT_OK(quarot_dgemm_builtin(ta, 0, m, n, k, 1.25, a, lda, b, W, beta, c1, n, (mi + ki) % 2 ? &env : NULL,
                                                   all_isas[ii]));
                        QT_OK(quarot_dgemm_builtin(ta, 0, m, W, k, 1.25, a, lda, b, W, beta, c2, W, NULL, all_isas[ii]));
                        for (i = 0; i < m && !bad; ++i)
                            for (j = 0; j < n && !bad; ++j)
                                if (memcmp(&c1[i * n + j], &c2[i * W + j], sizeof(double)) != 0) {
                                    QT_CHECKF(0, "dgemm %s ta=%d %lldx%lldx%lld beta=%g: C[%lld][%lld] = %.17g, wide product %.17g",
                                              quarot_isa_name(all_isas[ii]), ta, (long long)m, (long long)n, (long long)k, beta,
                                              (long long)i, (long long)j, c1[i * n + j], c2[i * W + j]);
                                    bad = 1;
                                }
                        free(a); free(b); free(c1); free(c2);
                    }
    }
    qx_pool_destroy(pool);
}

/* ---- allocator hooks: balanced allocations, and a failing allocator gives OUT_OF_MEMORY ---- */
static long live_allocs;
static void* count_alloc(size_t n, void* u) { (void)u; ++live_allocs; return malloc(n); }
static void count_free(void* p, void* u) { (void)u; if (p) --live_allocs; free(p); }
static void* fail_alloc(size_t n, void* u) { (void)n; (void)u; return NULL; }

static void test_allocator(void) {
    quarot_env env;
    float a[12 * 10], b[10 * 9], c[12 * 9];
    int i;
    for (i = 0; i < 120; ++i) a[i] = (float)i * 0.01f;
    for (i = 0; i < 90; ++i) b[i] = (float)i * 0.02f;
    memset(&env, 0, sizeof env);
    env.allocator.alloc = count_alloc;
    env.allocator.free = count_free;
    QT_OK(quarot_sgemm(0, 0, 12, 9, 10, 1.0f, a, 10, b, 9, 0.0f, c, 9, &env));
    QT_EQ_INT(live_allocs, 0);
    env.allocator.alloc = fail_alloc;
    QT_ERR(quarot_sgemm_builtin(0, 0, 12, 9, 10, 1.0f, a, 10, b, 9, 0.0f, c, 9, &env, QUAROT_ISA_DEFAULT), QUAROT_ERR_OUT_OF_MEMORY);
    /* k == 0 and alpha == 0 need no workspace */
    QT_OK(quarot_sgemm_builtin(0, 0, 12, 9, 0, 1.0f, a, 1, b, 9, 2.0f, c, 9, &env, QUAROT_ISA_DEFAULT));
    QT_OK(quarot_sgemm_builtin(0, 0, 12, 9, 10, 0.0f, NULL, 10, NULL, 9, 2.0f, c, 9, &env, QUAROT_ISA_DEFAULT));
}

static void test_bad_arguments(void) {
    float a[64], b[64], c[64];
    double da[64], db[64], dc[64];
    memset(a, 0, sizeof a); memset(b, 0, sizeof b); memset(c, 0, sizeof c);
    memset(da, 0, sizeof da); memset(db, 0, sizeof db); memset(dc, 0, sizeof dc);
    QT_OK(quarot_sgemm(0, 0, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4, NULL));
    QT_ERR(quarot_sgemm(0, 0, -1, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_sgemm(0, 0, 4, -1, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_sgemm(0, 0, 4, 4, -2, 1.0f, a, 4, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_sgemm(0, 0, 4, 4, 5, 1.0f, a, 4, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);  /* lda < k */
    QT_ERR(quarot_sgemm(1, 0, 5, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);  /* A^T: lda < m */
    QT_ERR(quarot_sgemm(0, 0, 4, 5, 4, 1.0f, a, 4, b, 4, 0.0f, c, 5, NULL), QUAROT_ERR_INVALID_ARGUMENT);  /* ldb < n */
    QT_ERR(quarot_sgemm(0, 1, 4, 4, 5, 1.0f, a, 5, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);  /* B^T: ldb < k */
    QT_ERR(quarot_sgemm(0, 0, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 3, NULL), QUAROT_ERR_INVALID_ARGUMENT);  /* ldc < n */
    QT_ERR(quarot_sgemm(0, 0, 0, 0, 0, 1.0f, a, 0, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);  /* ld 0 */
    QT_ERR(quarot_sgemm(0, 0, 4, 4, 4, 1.0f, NULL, 4, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_sgemm(0, 0, 4, 4, 4, 1.0f, a, 4, NULL, 4, 0.0f, c, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_sgemm(0, 0, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, NULL, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_dgemm(0, 0, 4, 4, 4, 1.0, da, 4, db, 4, 0.0, NULL, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_dgemm(0, 1, 4, 4, 4, 1.0, da, 4, db, 3, 0.0, dc, 4, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_dgemm_builtin(0, 0, -4, 4, 4, 1.0, da, 4, db, 4, 0.0, dc, 4, NULL, QUAROT_ISA_DEFAULT), QUAROT_ERR_INVALID_ARGUMENT);
    /* empty products: nothing read or written, NULL is fine where nothing is touched */
    QT_OK(quarot_sgemm(0, 0, 0, 4, 4, 1.0f, NULL, 4, NULL, 4, 0.0f, NULL, 4, NULL));
    QT_OK(quarot_dgemm(0, 0, 4, 0, 4, 1.0, NULL, 4, NULL, 1, 0.0, NULL, 1, NULL));
    /* extents that cannot be addressed */
    QT_ERR(quarot_sgemm(0, 0, 4, 4, 4, 1.0f, a, INT64_MAX / 2, b, 4, 0.0f, c, 4, NULL), QUAROT_ERR_OVERFLOW);
    QT_ERR(quarot_dgemm(0, 0, (int64_t)1 << 40, 4, 4, 1.0, da, 4, db, 4, 0.0, dc, (int64_t)1 << 30, NULL), QUAROT_ERR_OVERFLOW);
    /* ISA selection */
    QT_ERR(quarot_sgemm_builtin(0, 0, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4, NULL, (quarot_isa)99), QUAROT_ERR_INVALID_ARGUMENT);
    {
        int ii;
        for (ii = 0; ii < N_ISAS; ++ii)
            if (!quarot_isa_compiled(all_isas[ii])) {
                QT_ERR(quarot_sgemm_builtin(0, 0, 4, 4, 4, 1.0f, a, 4, b, 4, 0.0f, c, 4, NULL, all_isas[ii]), QUAROT_ERR_UNSUPPORTED);
                QT_ERR(quarot_dgemm_builtin(0, 0, 4, 4, 4, 1.0, da, 4, db, 4, 0.0, dc, 4, NULL, all_isas[ii]), QUAROT_ERR_UNSUPPORTED);
            }
    }
}

/* Exact small case with known answer (no rounding: small integers), including the transposes. */
static void test_exact_small(void) {
    /* A [2][3], B [3][2] */
    const float a[6] = { 1, 2, 3, 4, 5, 6 }, at[6] = { 1, 4, 2, 5, 3, 6 };
    const float b[6] = { 7, 8, 9, 10, 11, 12 }, bt[6] = { 7, 9, 11, 8, 10, 12 };
    const float want[4] = { 58, 64, 139, 154 };
    float c[4];
    int t, i;
    for (t = 0; t < 4; ++t) {
        for (i = 0; i < 4; ++i) c[i] = 1.0f;
        QT_OK(quarot_sgemm(t & 1, t >> 1, 2, 2, 3, 1.0f, t & 1 ? at : a, t & 1 ? 2 : 3, t & 2 ? bt : b, t & 2 ? 3 : 2, 0.0f, c, 2, NULL));
        for (i = 0; i < 4; ++i) QT_EQ_INT((int)c[i], (int)want[i]);
        for (i = 0; i < 4; ++i) c[i] = 1.0f;
        QT_OK(quarot_sgemm_builtin(t & 1, t >> 1, 2, 2, 3, 2.0f, t & 1 ? at : a, t & 1 ? 2 : 3, t & 2 ? bt : b, t & 2 ? 3 : 2, -3.0f, c, 2, NULL, QUAROT_ISA_REF));
        for (i = 0; i < 4; ++i) QT_EQ_INT((int)c[i], 2 * (int)want[i] - 3);
    }
}

/* quarot_sgemv: every compiled-in ISA against the long-double reference with the GEMM tolerance (k
   around its blocks of 8, 32 and 64, 1 and 2 rows, strides larger than the rows), the same bits
   serial, in reverse order and on the 2-thread pool, its _ref kernel bit for bit against its stated
   order (8 partial sums, a tree, the tail in order), rows past n untouched, and argument errors. */
static void test_sgemv(void) {
    const int64_t ks[] = { 1, 7, 8, 31, 33, 63, 64, 65, 130, 1000 }, ns[] = { 1, 63, 64, 65, 200 };
    int ii, ki, ni, rows, h;
    quarot_env env;
    qx_pool* pool = qx_pool_create(2);
    qx_pool_env(pool, &pool_env);
    for (ii = 0; ii < N_ISAS; ++ii) {
        if (!quarot_isa_compiled(all_isas[ii])) {
            float x = 1.0f, w = 1.0f, y = 0.0f;
            QT_CHECK(quarot_sgemv(1, 1, 1, &x, 1, &w, 1, &y, 1, NULL, all_isas[ii]) == QUAROT_ERR_UNSUPPORTED);
            continue;
        }
        for (ki = 0; ki < 10; ++ki)
            for (ni = 0; ni < 5; ++ni)
                for (rows = 1; rows <= 2; ++rows) {
                    int64_t k = ks[ki], n = ns[ni], ldx = k + 3, ldw = k + 1, ldy = n + 2, i, o, p;
                    float* x = (float*)malloc((size_t)(rows * ldx) * sizeof(float));
                    float* w = (float*)malloc((size_t)(n * ldw) * sizeof(float));
                    float* y = (float*)malloc((size_t)(rows * ldy) * sizeof(float));
                    float* y2 = (float*)malloc((size_t)(rows * ldy) * sizeof(float));
                    for (i = 0; i < rows * ldx; ++i) x[i] = (float)(qt_uniform() * 2.0 - 1.0);
                    for (i = 0; i < n * ldw; ++i) w[i] = (float)(qt_uniform() * 2.0 - 1.0);
                    for (i = 0; i < rows * ldy; ++i) y[i] = y2[i] = (float)GUARD;
                    QT_OK(quarot_sgemv(rows, n, k, x, ldx, w, ldw, y, ldy, NULL, all_isas[ii]));
                    for (i = 0; i < rows; ++i)
                        for (o = 0; o < ldy; ++o) {
                            float got = y[i * ldy + o];
                            if (o >= n) { QT_CHECKF(got == (float)GUARD, "sgemv wrote past n (%lld)", (long long)o); continue; }
                            {
                                long double ref = 0.0L;
                                double mag = 0.0, tol;
                                for (p = 0; p < k; ++p) {
                                    ref += (long double)x[i * ldx + p] * (long double)w[o * ldw + p];
                                    mag += fabs((double)x[i * ldx + p] * (double)w[o * ldw + p]);
                                }
                                tol = 2.0 * (double)(k + 2) * 5.960464477539063e-08 * mag + 1e-30;
                                QT_CHECKF(fabs((double)got - (double)ref) <= tol, "sgemv %s k=%lld n=%lld: %g vs %g",
                                          quarot_isa_name(all_isas[ii]), (long long)k, (long long)n, (double)got, (double)ref);
                            }
                            if (all_isas[ii] == QUAROT_ISA_REF && o < n) {   /* the stated order */
                                float part[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sum;
                                int j;
                                for (p = 0; p + 8 <= k; p += 8)
                                    for (j = 0; j < 8; ++j) part[j] += x[i * ldx + p + j] * w[o * ldw + p + j];
                                sum = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
                                for (; p < k; ++p) sum += x[i * ldx + p] * w[o * ldw + p];
                                QT_CHECKF(memcmp(&sum, &got, sizeof sum) == 0, "sgemv ref k=%lld: not the stated order", (long long)k);
                            }
                        }
                    for (h = 0; h < 2 && pool_env.parallel.run; ++h) {
                        memset(&env, 0, sizeof env);
                        env.parallel.run = h == 0 ? run_reverse : run_pool;
                        env.parallel.n_threads = h == 0 ? 3 : 2;
                        QT_OK(quarot_sgemv(rows, n, k, x, ldx, w, ldw, y2, ldy, &env, all_isas[ii]));
                        QT_CHECKF(memcmp(y, y2, (size_t)(rows * ldy) * sizeof(float)) == 0, "sgemv %s k=%lld n=%lld: threads change bits",
                                  quarot_isa_name(all_isas[ii]), (long long)k, (long long)n);
                    }
                    free(x); free(w); free(y); free(y2);
                }
    }
    {
        float x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 1, 1}, y[2] = {0, 0};
        QT_CHECK(quarot_sgemv(-1, 1, 4, x, 4, w, 4, y, 1, NULL, QUAROT_ISA_DEFAULT) == QUAROT_ERR_INVALID_ARGUMENT);
        QT_CHECK(quarot_sgemv(1, 1, 4, x, 3, w, 4, y, 1, NULL, QUAROT_ISA_DEFAULT) == QUAROT_ERR_INVALID_ARGUMENT);
        QT_CHECK(quarot_sgemv(1, 2, 4, x, 4, w, 4, y, 1, NULL, QUAROT_ISA_DEFAULT) == QUAROT_ERR_INVALID_ARGUMENT);
        QT_CHECK(quarot_sgemv(1, 1, 4, NULL, 4, w, 4, y, 1, NULL, QUAROT_ISA_DEFAULT) == QUAROT_ERR_INVALID_ARGUMENT);
        QT_OK(quarot_sgemv(0, 1, 4, NULL, 4, NULL, 4, NULL, 1, NULL, QUAROT_ISA_DEFAULT));
        QT_OK(quarot_sgemv(1, 1, 4, x, 4, w, 4, y, 1, NULL, QUAROT_ISA_DEFAULT));
        QT_CHECK(y[0] == 10.0f);
    }
    qx_pool_destroy(pool);
}

int main(void) {
    QT_RUN(test_exact_small);
    QT_RUN(test_sgemm_shapes);
    QT_RUN(test_dgemm_shapes);
    QT_RUN(test_beta_zero_ignores_nan);
    QT_RUN(test_parallel_bit_identical);
    QT_RUN(test_narrow_same_bits);
    QT_RUN(test_allocator);
    QT_RUN(test_bad_arguments);
    QT_RUN(test_sgemv);
    return qt_finish("test_gemm");
}
