/* bench_gemm - single-thread SGEMM / DGEMM throughput of quarot.h's built-in GEMM, beside OpenBLAS
   (when built with -DBENCH_HAVE_CBLAS, forced to one thread), the machine's FMA peak (a register-only
   FMA loop), and the Newton-Schulz polar factor times.

   Usage: bench_gemm [--quick]  (--quick: smaller sizes). BENCH_FULL=1 runs the n = 4096 polar factors
   to convergence instead of estimating them from one- and two-step runs (keeps the default run near
   two minutes).
   OpenBLAS picks its kernels when it is loaded; the program re-runs itself with
   OPENBLAS_CORETYPE=SkylakeX (its AVX-512 kernels) to show both. Every time is the best of a few runs:
   the machine may be shared (BENCH_CLOCK=cpu measures thread CPU time instead of wall time). */
#include "quarot.h"
#include "bench/bench_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(BENCH_HAVE_CBLAS)
#include <cblas.h>
#endif

/* BENCH_CLOCK=cpu times with this thread's CPU time instead of the wall clock: on a machine shared with
   other jobs that is close to what a quiet machine shows (every timed call runs on this one thread). */
static int use_cpu_clock = -1;
static double now_s(void) {
    if (use_cpu_clock < 0) use_cpu_clock = getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0;
    return use_cpu_clock ? bench_thread_cpu_s() : bench_now_s();
}

static unsigned long long lcg = 88172645463325252ULL;
static double urand(void) {   /* [-1, 1) */
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg >> 11) * (2.0 / 9007199254740992.0) - 1.0;
}

/* ---- peak: independent FMA chains in registers, no memory traffic ---- */
#define CH20(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15) X(16) X(17) X(18) X(19)
static double peak_avx512(void) {
#if defined(__AVX512F__)
    double best = 0.0;
    int rep;
    for (rep = 0; rep < 3; ++rep) {
        long it, iters = 20000000;
        double t0, t;
        float out[16];
        __m512 m = _mm512_set1_ps(0.999999f), d = _mm512_set1_ps(1e-7f), s;
#define D5(i) __m512 z##i = _mm512_set1_ps((float)(i) * 1e-3f);
#define F5(i) z##i = _mm512_fmadd_ps(z##i, m, d);
#define S5(i) s = _mm512_add_ps(s, z##i);
        CH20(D5)
        t0 = now_s();
        for (it = 0; it < iters; ++it) { CH20(F5) __asm__ volatile("" ::: "memory"); }
        t = now_s() - t0;
        s = _mm512_setzero_ps();
        CH20(S5)
        _mm512_storeu_ps(out, s);
        if (out[0] == 12345.0f) printf("!");
        if (20.0 * 32.0 * (double)iters / t * 1e-9 > best) best = 20.0 * 32.0 * (double)iters / t * 1e-9;
    }
    return best;
#else
    return 0.0;
#endif
}

static double peak_avx2(void) {
#if defined(__AVX2__) && defined(__FMA__)
    double best = 0.0;
    int rep;
    for (rep = 0; rep < 3; ++rep) {
        long it, iters = 20000000;
        double t0, t;
        float out[8];
        __m256 m = _mm256_set1_ps(0.999999f), d = _mm256_set1_ps(1e-7f), s;
#define D2(i) __m256 y##i = _mm256_set1_ps((float)(i) * 1e-3f);
#define F2(i) y##i = _mm256_fmadd_ps(y##i, m, d);
#define S2(i) s = _mm256_add_ps(s, y##i);
        CH20(D2)
        t0 = now_s();
        for (it = 0; it < iters; ++it) { CH20(F2) __asm__ volatile("" ::: "memory"); }
        t = now_s() - t0;
        s = _mm256_setzero_ps();
        CH20(S2)
        _mm256_storeu_ps(out, s);
        if (out[0] == 12345.0f) printf("!");
        if (20.0 * 16.0 * (double)iters / t * 1e-9 > best) best = 20.0 * 16.0 * (double)iters / t * 1e-9;
    }
    return best;
#else
    return 0.0;
#endif
}

/* ---- GEMM timings ---- */
enum { IMPL_BUILTIN, IMPL_AVX2, IMPL_BLAS };
static int reps_for(int64_t n) { return n <= 2048 ? 3 : 2; }

static double time_sgemm(int impl, int64_t n, float* a, float* b, float* c) {
    double best = 1e30, t0, t;
    int r;
    for (r = 0; r < reps_for(n); ++r) {
        t0 = now_s();
        if (impl == IMPL_BUILTIN) quarot_sgemm_builtin(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, NULL, QUAROT_ISA_DEFAULT);
        else if (impl == IMPL_AVX2) quarot_sgemm_builtin(0, 0, n, n, n, 1.0f, a, n, b, n, 0.0f, c, n, NULL, QUAROT_ISA_AVX2);
#if defined(BENCH_HAVE_CBLAS)
        else cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0f, a, (int)n, b, (int)n, 0.0f, c, (int)n);
#endif
        t = now_s() - t0;
        if (t < best) best = t;
    }
    return 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
}

static double time_dgemm(int impl, int64_t n, double* a, double* b, double* c) {
    double best = 1e30, t0, t;
    int r;
    for (r = 0; r < 3; ++r) {
        t0 = now_s();
        if (impl == IMPL_BUILTIN) quarot_dgemm_builtin(0, 0, n, n, n, 1.0, a, n, b, n, 0.0, c, n, NULL, QUAROT_ISA_DEFAULT);
#if defined(BENCH_HAVE_CBLAS)
        else cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, (int)n, (int)n, 1.0, a, (int)n, b, (int)n, 0.0, c, (int)n);
#endif
        t = now_s() - t0;
        if (t < best) best = t;
    }
    return 2.0 * (double)n * (double)n * (double)n / best * 1e-9;
}

static const int64_t sgemm_sizes[] = { 1024, 1536, 2048, 3072, 4096 };
#define N_SIZES 5

/* Child mode: OpenBLAS SGEMM only, one line of numbers. */
static int openblas_only(int n_sizes) {
#if defined(BENCH_HAVE_CBLAS)
    int i;
    int64_t nmax = sgemm_sizes[n_sizes - 1];
    float* a = (float*)malloc((size_t)(nmax * nmax) * sizeof(float));
    float* b = (float*)malloc((size_t)(nmax * nmax) * sizeof(float));
    float* c = (float*)malloc((size_t)(nmax * nmax) * sizeof(float));
    openblas_set_num_threads(1);
    for (i = 0; i < nmax * nmax; ++i) { a[i] = (float)urand(); b[i] = (float)urand(); }
    printf("%s", openblas_get_corename());
    for (i = 0; i < n_sizes; ++i) printf(" %.1f", time_sgemm(IMPL_BLAS, sgemm_sizes[i], a, b, c));
    printf("\n");
    free(a); free(b); free(c);
#else
    (void)n_sizes;
#endif
    return 0;
}

/* ---- polar factor: C = 3I + G/sqrt(n) (singular values ~[1, 5]) and C = A^T A / (2n) + 1e-3 noise
   with A [2n][n] Gaussian (nearly symmetric positive, the Adapt Rotation case, cond ~ 35) ---- */
static void make_polar_c(int kind, int64_t n, double* c) {
    int64_t i, rows = 2 * n;
    if (kind == 0) {
        for (i = 0; i < n * n; ++i) c[i] = 1.7320508 * urand() / sqrt((double)n);   /* unit variance */
        for (i = 0; i < n; ++i) c[i * n + i] += 3.0;
        return;
    }
    {
        float* a = (float*)malloc((size_t)(rows * n) * sizeof(float));
        float* g = (float*)malloc((size_t)(n * n) * sizeof(float));
        for (i = 0; i < rows * n; ++i) a[i] = (float)(1.7320508 * urand());
        quarot_sgemm(1, 0, n, n, rows, 1.0f / (float)rows, a, n, a, n, 0.0f, g, n, NULL);
        for (i = 0; i < n * n; ++i) c[i] = (double)g[i] + 1e-3 * urand();
        free(a); free(g);
    }
}

static void bench_polar(int quick) {
    const int64_t sizes[3] = { 1024, 2048, 4096 };
    const char* kinds[2] = { "3I + G/sqrt(n)", "A^T A + noise" };
    int full = getenv("BENCH_FULL") && atoi(getenv("BENCH_FULL")) > 0;
    int ns = quick ? 1 : 3, kind, si, prec, iters_seen[2][2] = { { 0, 0 }, { 0, 0 } };
    printf("\nNewton-Schulz polar factor, one thread (default tolerances: f32 2e-6, f64 1e-6)\n");
    printf("%-16s %6s %5s %6s %10s %10s %12s\n", "C", "n", "prec", "iters", "time s", "s/iter", "GFLOP/s eff");
    for (kind = 0; kind < 2; ++kind)
        for (si = 0; si < ns; ++si) {
            int64_t n = sizes[si], i;
            double* c = (double*)malloc((size_t)(n * n) * sizeof(double));
            double* u = (double*)malloc((size_t)(n * n) * sizeof(double));
            float* cf = (float*)malloc((size_t)(n * n) * sizeof(float));
            float* uf = (float*)malloc((size_t)(n * n) * sizeof(float));
            make_polar_c(kind, n, c);
            for (i = 0; i < n * n; ++i) cf[i] = (float)c[i];
            for (prec = 0; prec < 2; ++prec) {
                quarot_polar_desc d;
                quarot_polar_info info;
                int estimate = n > 2048 && !full, pass;
                double t0, t = 0.0, t1 = 0.0, per;
                quarot_result r = QUAROT_OK;
                memset(&d, 0, sizeof d);
                /* estimate: time one and two steps; a step costs t2 - t1, a run of k steps t2 + (k-2) (t2 - t1),
                   with k the steps that n = 2048 needed */
                for (pass = estimate ? 1 : 0; pass <= (estimate ? 2 : 0); ++pass) {
                    d.max_iter = pass;
                    t0 = now_s();
                    r = prec == 0 ? quarot_polar_newton_schulz_f32(n, cf, n, uf, n, &d, &info, NULL)
                                  : quarot_polar_newton_schulz_f64(n, c, n, u, n, &d, &info, NULL);
                    t1 = t;
                    t = now_s() - t0;
                }
                per = estimate ? t - t1 : t / (info.iterations > 0 ? info.iterations : 1);
                if (estimate) {
                    int k = iters_seen[kind][prec];
                    printf("%-16s %6lld %5s %5d* %9.1f* %10.2f %12.1f\n", kinds[kind], (long long)n, prec ? "f64" : "f32",
                           k, t + (double)(k - 2) * per, per, 3.0 * (double)n * (double)n * (double)n / per * 1e-9);
                } else {
                    iters_seen[kind][prec] = info.iterations;
                    printf("%-16s %6lld %5s %6d %10.2f %10.2f %12.1f%s\n", kinds[kind], (long long)n, prec ? "f64" : "f32",
                           info.iterations, t, per, 3.0 * (double)n * (double)n * (double)n / per * 1e-9,
                           r == QUAROT_OK ? "" : "  (not converged)");
                }
            }
            free(c); free(u); free(cf); free(uf);
        }
    if (!quick && !full) printf("* n = 4096 estimated from one- and two-step runs and the steps n = 2048 needed (BENCH_FULL=1 runs them out)\n");
    printf("(GFLOP/s eff: 3 n^3 flops per step, X^T X counted as n^3 since only its upper half is computed)\n");
}

int main(int argc, char** argv) {
    int quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    int n_sizes = quick ? 2 : N_SIZES, i;
    int64_t nmax;
    float *a, *b, *c;
    double *da, *db, *dc;
    double p512, p256, g_best[N_SIZES], g_avx2[N_SIZES], g_blas[N_SIZES];
    char sk_line[512] = "";
    if (argc > 1 && strcmp(argv[1], "--openblas-only") == 0) return openblas_only(argc > 2 ? atoi(argv[2]) : N_SIZES);
    nmax = sgemm_sizes[n_sizes - 1];
    now_s();
    printf("quarot.h GEMM benchmark (one thread, %s time); compiled ISAs: %s\n", use_cpu_clock ? "thread CPU" : "wall", quarot_simd_name());
    p512 = peak_avx512();
    p256 = peak_avx2();
    if (p512 > 0.0) printf("FMA peak, register-only loop: AVX-512 %.1f GFLOP/s, AVX2 %.1f GFLOP/s (float)\n", p512, p256);
    else if (p256 > 0.0) printf("FMA peak, register-only loop: AVX2 %.1f GFLOP/s (float)\n", p256);

#if defined(BENCH_HAVE_CBLAS)
    {   /* OpenBLAS's AVX-512 kernels forced, in a child process (the choice is made at load time) */
        char cmd[1024];
        FILE* f;
        snprintf(cmd, sizeof cmd, "OPENBLAS_CORETYPE=SkylakeX '%s' --openblas-only %d", argv[0], n_sizes);
        f = popen(cmd, "r");
        if (f) {
            if (!fgets(sk_line, sizeof sk_line, f)) sk_line[0] = 0;
            pclose(f);
        }
        openblas_set_num_threads(1);
    }
#endif
    a = (float*)malloc((size_t)(nmax * nmax) * sizeof(float));
    b = (float*)malloc((size_t)(nmax * nmax) * sizeof(float));
    c = (float*)malloc((size_t)(nmax * nmax) * sizeof(float));
    for (i = 0; i < nmax * nmax; ++i) { a[i] = (float)urand(); b[i] = (float)urand(); }
    for (i = 0; i < n_sizes; ++i) {
        g_best[i] = time_sgemm(IMPL_BUILTIN, sgemm_sizes[i], a, b, c);
        g_avx2[i] = quarot_isa_compiled(QUAROT_ISA_AVX2) && quarot_isa_best() != QUAROT_ISA_AVX2 ? time_sgemm(IMPL_AVX2, sgemm_sizes[i], a, b, c) : 0.0;
#if defined(BENCH_HAVE_CBLAS)
        g_blas[i] = time_sgemm(IMPL_BLAS, sgemm_sizes[i], a, b, c);
#else
        g_blas[i] = 0.0;
#endif
    }
    printf("\nSGEMM GFLOP/s, C = A*B square n x n, one thread\n");
    printf("%6s %12s %10s", "n", quarot_isa_name(quarot_isa_best()), "avx2");
#if defined(BENCH_HAVE_CBLAS)
    printf(" %10s %10s %8s", "openblas", "ob-SkylakeX", "ratio");
#endif
    printf("\n");
    for (i = 0; i < n_sizes; ++i) {
        printf("%6lld %12.1f %10.1f", (long long)sgemm_sizes[i], g_best[i], g_avx2[i]);
#if defined(BENCH_HAVE_CBLAS)
        {
            double sk = 0.0;
            const char* p = sk_line;
            int f;
            while (*p && *p != ' ') ++p;                 /* skip the core name */
            for (f = 0; f <= i && *p; ++f) sk = strtod(p, (char**)&p);
            printf(" %10.1f %10.1f %8.2f", g_blas[i], sk, g_best[i] / (g_blas[i] > sk ? g_blas[i] : sk));
        }
#endif
        printf("\n");
    }
#if defined(BENCH_HAVE_CBLAS)
    printf("(openblas: core %s as loaded; ob-SkylakeX: OPENBLAS_CORETYPE=SkylakeX; ratio: built-in / best OpenBLAS)\n",
           openblas_get_corename());
#endif
#if !defined(BENCH_HAVE_CBLAS)
    (void)sk_line; (void)g_blas;   /* built without OpenBLAS: no comparison column */
#endif
    if (p512 > 0.0) printf("built-in at n = %lld: %.0f%% of the AVX-512 FMA peak\n", (long long)sgemm_sizes[n_sizes - 1], 100.0 * g_best[n_sizes - 1] / p512);
    free(a); free(b); free(c);

    /* DGEMM */
    {
        const int64_t dn[2] = { 1024, 2048 };
        int nd = quick ? 1 : 2;
        da = (double*)malloc((size_t)(dn[nd - 1] * dn[nd - 1]) * sizeof(double));
        db = (double*)malloc((size_t)(dn[nd - 1] * dn[nd - 1]) * sizeof(double));
        dc = (double*)malloc((size_t)(dn[nd - 1] * dn[nd - 1]) * sizeof(double));
        for (i = 0; i < dn[nd - 1] * dn[nd - 1]; ++i) { da[i] = urand(); db[i] = urand(); }
        printf("\nDGEMM GFLOP/s, one thread\n%6s %12s", "n", quarot_isa_name(quarot_isa_best()));
#if defined(BENCH_HAVE_CBLAS)
        printf(" %10s", "openblas");
#endif
        printf("\n");
        for (i = 0; i < nd; ++i) {
            printf("%6lld %12.1f", (long long)dn[i], time_dgemm(IMPL_BUILTIN, dn[i], da, db, dc));
#if defined(BENCH_HAVE_CBLAS)
            printf(" %10.1f", time_dgemm(IMPL_BLAS, dn[i], da, db, dc));
#endif
            printf("\n");
        }
        free(da); free(db); free(dc);
    }
    bench_polar(quick);
    return 0;
}
