/* bench_fwht - the fast Walsh-Hadamard transform against the machine's add-pipe peak.

   1. Peak: a register-only loop of independent vector adds (12 accumulators, no loads or stores) at
      the widest compiled vector width (AVX-512 16 floats, AVX2 8, SSE2 / NEON 4), in float adds per
      nanosecond. An FWHT of n = 2^m floats is n*m adds and subtracts, so its fraction of the peak is
      n*m / time / peak: 100% would keep the add pipes busy on every cycle.
   2. quarot_fwht_f32 (unnormalized, no scaling pass) for n = 256 .. 32768, rows batched to about
      256 KiB (in L2), every compiled ISA, beside the textbook triple-loop butterfly (compiled here
      with the same flags, so the compiler may vectorize it), as fractions of the peak.
   3. The K*2^m sizes of LLMs (4864 = 76*2^6, 11008 = 172*2^6, 14336 = 28*2^9, 18944 = 148*2^7,
      28672 = 28*2^10)
      through quarot_hadamard_apply_f32 (normalized), as the ratio of their time per row to the
      normalized 2^m transform of the next power of two. Split into its two phases: the K rows of
      2^m butterflies (timed alone through quarot_fwht_f32) and the K-point mixing (the rest). The
      blocked mixing is table lookups: each output adds one table entry per block of b inputs, a
      vector load at an address read from the pattern words. So it is set against a second peak,
      the lookup peak: a register loop whose adds each take a vector loaded from an L1-resident
      16-entry table at such an address (8 chains, no stores). Where the plan has a fixed register
      kernel (plan.mix_fixed: 28, and the split 76 and 148; AVX-512, or AVX2 up to 512 mixing
      columns) the tables stay in registers and there are no lookups: the "kernel" column says
      "registers" and the lookup share is "-".
   4. Rows in DRAM: 256 MiB of n = 4096 rows transformed in place (normalized) against a streaming
      copy of the same bytes (read + write, memcpy) in the same run: the memory floor.
   5. Columns in DRAM: down_proj's [4096][11008] f32 matrix transformed down every column (a writer's
      W <- Q^T W) by quarot_hadamard_apply_cols_f32, 64 columns a call, against the same columns
      gathered into rows, transformed by quarot_hadamard_apply_f32 and put back (scalar loops), and
      against copying the matrix's rows (half of them onto the other half: 90 MB read + 90 MB
      written, so "cols / copy" compares equal byte counts).
   Rows start on 64-byte boundaries (as an engine's tensors do); one more column repeats the best ISA
   on rows 16 bytes past a boundary (where plain malloc puts a large block), so every vector load
   and store there straddles two cache lines.
   Times are the minimum over repetitions of a monotonic clock (the machine may be shared: the
   minimum is the run least disturbed by other processes). Not thread CPU time: in a virtual machine
   reading it is a system call (about 1.3 us here, against 7 us for a whole 256 KiB batch at n = 256),
   while CLOCK_MONOTONIC is read in user space (tens of ns). */
#include "quarot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"

#if defined(__AVX512F__) || defined(__AVX2__) || defined(__SSE2__)
#include <immintrin.h>
#elif defined(__ARM_NEON)
#include <arm_neon.h>
#endif

/* Monotonic wall clock; a run that the scheduler preempts is dropped by the minimum over repetitions. */

/* ---- 1. the add-pipe peak --------------------------------------------------------------------- */

#define PEAK_ITERS 200000L
#if defined(__AVX512F__)
#define VW 16
typedef __m512 vf;
#define VSET(x) _mm512_set1_ps(x)
#define VADD(a, b) _mm512_add_ps(a, b)
static float vsum(vf v) { return _mm512_reduce_add_ps(v); }
#elif defined(__AVX2__)
#define VW 8
typedef __m256 vf;
#define VSET(x) _mm256_set1_ps(x)
#define VADD(a, b) _mm256_add_ps(a, b)
static float vsum(vf v) { float t[8]; _mm256_storeu_ps(t, v); return t[0] + t[7]; }
#elif defined(__SSE2__)
#define VW 4
typedef __m128 vf;
#define VSET(x) _mm_set1_ps(x)
#define VADD(a, b) _mm_add_ps(a, b)
static float vsum(vf v) { float t[4]; _mm_storeu_ps(t, v); return t[0] + t[3]; }
#elif defined(__ARM_NEON)
#define VW 4
typedef float32x4_t vf;
#define VSET(x) vdupq_n_f32(x)
#define VADD(a, b) vaddq_f32(a, b)
static float vsum(vf v) { return vgetq_lane_f32(v, 0) + vgetq_lane_f32(v, 3); }
#endif

/* The compiler must not merge or fold the chains: each accumulator passes through an empty asm
   statement that it cannot see into (no instruction is emitted). */
#if defined(VW) && (defined(__GNUC__) || defined(__clang__))
#if defined(__ARM_NEON)
#define OPAQUE(v) __asm__("" : "+w"(v))
#else
#define OPAQUE(v) __asm__("" : "+v"(v))
#endif
#else
#define OPAQUE(v) (void)0
#endif

#if defined(VW)
/* The best rate over reps runs of rep_fn, which runs PEAK_ITERS iterations of `adds` float adds
   each and returns its seconds: float adds per ns. */
static double best_rate(double (*rep_fn)(void), double adds, int reps) {
    double best = 0.0;
    int rep;
    for (rep = 0; rep < reps; ++rep) {
        const double rate = adds * (double)PEAK_ITERS / rep_fn() / 1e9;
        if (rate > best) best = rate;
    }
    return best;
}

/* 12 independent chains cover latency 4 x 3 pipes or latency 3 x 4 */
static double add_rep(void) {
    vf a0 = VSET(0.f), a1 = VSET(1.f), a2 = VSET(2.f), a3 = VSET(3.f), a4 = VSET(4.f), a5 = VSET(5.f);
    vf a6 = VSET(6.f), a7 = VSET(7.f), a8 = VSET(8.f), a9 = VSET(9.f), a10 = VSET(10.f), a11 = VSET(11.f);
    const vf d = VSET(1e-7f);
    long i;
    double t0 = bench_now_s(), dt;
    volatile float sink;
    for (i = 0; i < PEAK_ITERS; ++i) {
        a0 = VADD(a0, d); a1 = VADD(a1, d); a2 = VADD(a2, d); a3 = VADD(a3, d);
        a4 = VADD(a4, d); a5 = VADD(a5, d); a6 = VADD(a6, d); a7 = VADD(a7, d);
        a8 = VADD(a8, d); a9 = VADD(a9, d); a10 = VADD(a10, d); a11 = VADD(a11, d);
        OPAQUE(a0); OPAQUE(a1); OPAQUE(a2); OPAQUE(a3); OPAQUE(a4); OPAQUE(a5);
        OPAQUE(a6); OPAQUE(a7); OPAQUE(a8); OPAQUE(a9); OPAQUE(a10); OPAQUE(a11);
    }
    dt = bench_now_s() - t0;
    sink = vsum(VADD(VADD(VADD(a0, a1), VADD(a2, a3)), VADD(VADD(a4, a5), VADD(a6, a7)))) +
           vsum(VADD(VADD(a8, a9), VADD(a10, a11)));
    (void)sink;
    return dt;
}

/* The lookup loop: adds whose operand is a vector loaded from a 16-entry table of 4-vector entries
   (4 KiB with 16-float vectors, in L1) at an address taken from the low bits of a rotating word, two
   entries (8 loads, 8 chains) per iteration: the mixing's inner step without its table building and
   stores. */
#if defined(__AVX512F__)
#define VLD(p) _mm512_loadu_ps(p)
#elif defined(__AVX2__)
#define VLD(p) _mm256_loadu_ps(p)
#elif defined(__SSE2__)
#define VLD(p) _mm_loadu_ps(p)
#elif defined(__ARM_NEON)
#define VLD(p) vld1q_f32(p)
#endif
static float lookup_tab[16 * 4 * VW];
static double lookup_rep(void) {
    vf a0 = VSET(0.f), a1 = VSET(1.f), a2 = VSET(2.f), a3 = VSET(3.f);
    vf a4 = VSET(4.f), a5 = VSET(5.f), a6 = VSET(6.f), a7 = VSET(7.f);
    unsigned long long w = 0x9E3779B97F4A7C15ull;
    long i;
    double t0 = bench_now_s(), dt;
    volatile float sink;
    for (i = 0; i < PEAK_ITERS; ++i) {
        const float* p = lookup_tab + (w & 15) * 4 * VW;
        const float* q = lookup_tab + ((w >> 4) & 15) * 4 * VW;
        w = (w >> 8) | (w << 56);
        a0 = VADD(a0, VLD(p)); a1 = VADD(a1, VLD(p + VW)); a2 = VADD(a2, VLD(p + 2 * VW)); a3 = VADD(a3, VLD(p + 3 * VW));
        a4 = VADD(a4, VLD(q)); a5 = VADD(a5, VLD(q + VW)); a6 = VADD(a6, VLD(q + 2 * VW)); a7 = VADD(a7, VLD(q + 3 * VW));
        OPAQUE(a0); OPAQUE(a1); OPAQUE(a2); OPAQUE(a3); OPAQUE(a4); OPAQUE(a5); OPAQUE(a6); OPAQUE(a7);
    }
    dt = bench_now_s() - t0;
    sink = vsum(VADD(VADD(VADD(a0, a1), VADD(a2, a3)), VADD(VADD(a4, a5), VADD(a6, a7))));
    (void)sink;
    return dt;
}
#endif

/* float adds per ns of the register-only loop */
static double add_peak(void) {
#if defined(VW)
    return best_rate(add_rep, 12.0 * VW, 200);
#else
    return 0.0;
#endif
}

/* float adds per ns of the lookup loop */
static double lookup_peak(void) {
#if defined(VW)
    int i;
    for (i = 0; i < 16 * 4 * VW; ++i) lookup_tab[i] = 1e-9f * (float)i;
    return best_rate(lookup_rep, 8.0 * VW, 50);
#else
    return 0.0;
#endif
}

/* ---- 2. the transform ------------------------------------------------------------------------- */


/* Minimum seconds of fn over repetitions lasting about `budget` seconds (at least 5). The data is
   transformed over and over (values grow by sqrt(n) per call: refilled before they could overflow). */
typedef struct job {
    int kind;            /* 0 quarot_fwht_f32(isa), 1 textbook, 2 hadamard_apply_f32 (normalized), 3 memcpy */
    quarot_isa isa;
    const quarot_hadamard_plan* plan;
    float* x;
    float* y;            /* copy destination */
    float* fill;         /* original values */
    int64_t n, rows;
    void* work;
    size_t ws;
} job;

static void run_job(const job* j) {
    int64_t r;
    if (j->kind == 0) {
        if (quarot_fwht_f32(j->x, j->n, j->rows, j->n, j->isa) != QUAROT_OK) { fprintf(stderr, "fwht failed\n"); exit(1); }
    } else if (j->kind == 1) {
        for (r = 0; r < j->rows; ++r) bench_textbook_fwht(j->x + r * j->n, j->n);
    } else if (j->kind == 2) {
        quarot_hadamard_apply_desc d;
        memset(&d, 0, sizeof d);
        d.isa = j->isa;
        if (quarot_hadamard_apply_f32(j->plan, &d, j->x, j->rows, j->n, j->work, j->ws) != QUAROT_OK) {
            fprintf(stderr, "apply failed\n");
            exit(1);
        }
    } else {
        memcpy(j->y, j->x, sizeof(float) * (size_t)(j->n * j->rows));
    }
}

static double time_job(const job* j, double budget) {
    double best = 1e30, spent = 0.0;
    int rep = 0, since_fill = 0;
    const int refill_every = j->kind <= 1 ? (j->n >= 4096 ? 3 : 6) : 1000000;   /* unnormalized growth */
    const size_t bytes = sizeof(float) * (size_t)(j->n * j->rows);
    run_job(j);
    memcpy(j->x, j->fill, bytes);
    while (rep < 5 || (spent < budget && rep < 2000)) {
        double t0, dt;
        if (++since_fill >= refill_every) { memcpy(j->x, j->fill, bytes); since_fill = 0; }
        t0 = bench_now_s();
        run_job(j);
        dt = bench_now_s() - t0;
        spent += dt;
        if (dt < best) best = dt;
        ++rep;
    }
    return best;
}

/* n floats starting `skew` bytes past a 64-byte boundary (0 or 16); free with free_skewed. */
static float* alloc_skewed(int64_t n, int skew) {
    void* p = NULL;
    if (posix_memalign(&p, 64, sizeof(float) * (size_t)n + 64) != 0 || !p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return (float*)(void*)((char*)p + skew);
}
static void free_skewed(float* x, int skew) { if (x) free((char*)x - skew); }

static void fill_rand(float* x, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
}

/* ns per row of the normalized apply at n, with the best ISA. When bfly and lookups are given (both
   or neither) and K > 1, also the ns of its K rows of 2^m butterflies alone (*bfly, else 0) and the
   table lookups of its blocked mixing in floats per row (*lookups: Km * ceil(Km / b) * columns,
   Km = K or K/2 for the split Paley II mixing over 2^(m+1) columns; 0 without blocked mixing or
   with the fixed register kernels, which *regs then tells). */
static double apply_ns(int64_t n, int64_t rows, double budget, char* label, size_t label_size, double* bfly,
                       double* lookups, int* regs) {
    quarot_hadamard_plan plan;
    job j;
    double t;
    if (bfly) { *bfly = *lookups = 0.0; *regs = 0; }
    memset(&j, 0, sizeof j);
    if (quarot_hadamard_plan_init(&plan, n, NULL) != QUAROT_OK) return -1.0;
    snprintf(label, label_size, "%lld x 2^%d", (long long)plan.K, plan.m);
    j.kind = 2;
    j.isa = QUAROT_ISA_DEFAULT;
    j.plan = &plan;
    j.n = n;
    j.rows = rows;
    j.x = alloc_skewed(n * rows, 0);
    j.fill = alloc_skewed(n * rows, 0);
    j.ws = quarot_hadamard_workspace_size(&plan);
    j.work = j.ws ? malloc(j.ws) : NULL;
    if (j.ws && !j.work) { fprintf(stderr, "out of memory\n"); exit(1); }
    fill_rand(j.fill, n * rows);
    memcpy(j.x, j.fill, sizeof(float) * (size_t)(n * rows));
    t = time_job(&j, budget) / (double)rows * 1e9;
    if (bfly && plan.K > 1) {   /* the butterflies alone: K * rows rows of 2^m, the same ISA */
        job u = j;
        const int64_t M = (int64_t)1 << plan.m, Km = plan.mix_half ? plan.K / 2 : plan.K;
        u.kind = 0;
        u.n = M;
        u.rows = plan.K * rows;
        *bfly = time_job(&u, budget) / (double)rows * 1e9;
        /* quarot.h's quarot__mixr_select: AVX-512, or AVX2 up to 512 mixing columns */
        *regs = plan.mix_fixed != 0 && (quarot_isa_best() == QUAROT_ISA_AVX512 ||
                                        (quarot_isa_best() == QUAROT_ISA_AVX2 && (plan.mix_half ? 2 * M : M) <= 512));
        if (plan.mix_block > 1 && !*regs)
            *lookups = (double)Km * (double)((Km + plan.mix_block - 1) / plan.mix_block) * (double)(plan.mix_half ? 2 * M : M);
    }
    free_skewed(j.x, 0); free_skewed(j.fill, 0); free(j.work);
    quarot_hadamard_plan_free(&plan);
    return t;
}

int main(void) {
    static const quarot_isa isas[] = {QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON};
    static const int64_t ksizes[][2] = {{4864, 8192}, {11008, 16384}, {14336, 16384}, {18944, 32768}, {28672, 32768}};
    const double t_start = bench_now_s();
    const double peak = add_peak();
    const double lpeak = lookup_peak();
    int k, m;
    srand(1);
    printf("quarot.h %s, compiled ISAs: %s (default %s)\n", quarot_version_string(), quarot_simd_name(),
           quarot_isa_name(quarot_isa_best()));
#if defined(VW)
    printf("add-pipe peak (register-only loop, %d-float vectors, 12 chains): %.1f float adds/ns\n", VW, peak);
    printf("lookup peak (adds of vectors loaded from an L1 table at data-dependent addresses, 8 chains): %.1f float adds/ns (%.2f of the add peak)\n\n",
           lpeak, lpeak / peak);
#else
    printf("add-pipe peak: no vector ISA compiled; fractions are not shown\n\n");
#endif
    printf("quarot_fwht_f32 (unnormalized), rows batched to 256 KiB: %% of the add peak (n*log2(n) adds / time)\n");
    printf("%6s", "n");
    for (k = 0; k < 4; ++k) if (quarot_isa_compiled(isas[k])) printf(" %8s", quarot_isa_name(isas[k]));
    printf(" %8s %9s %9s %12s\n", "best+16B", "textbook", "ns/row", "best/textbk");
    for (m = 8; m <= 15; ++m) {
        const int64_t n = (int64_t)1 << m, rows = n >= 65536 ? 1 : 65536 / n;
        job j;
        double t_best = 0.0, t_text;
        memset(&j, 0, sizeof j);
        j.n = n;
        j.rows = rows;
        j.x = alloc_skewed(n * rows, 0);
        j.fill = alloc_skewed(n * rows, 0);
        fill_rand(j.fill, n * rows);
        printf("%6lld", (long long)n);
        for (k = 0; k < 4; ++k) {
            double t;
            if (!quarot_isa_compiled(isas[k])) continue;
            j.kind = 0;
            j.isa = isas[k];
            t = time_job(&j, 0.15);
            if (isas[k] == quarot_isa_best()) t_best = t;
            printf(" %7.0f%%", 100.0 * (double)(n * m * rows) / (t * 1e9) / peak);
            fflush(stdout);
        }
        {   /* the best ISA again on rows 16 bytes past a cache-line boundary */
            job u = j;
            double t;
            u.kind = 0;
            u.isa = quarot_isa_best();
            u.x = alloc_skewed(n * rows, 16);
            t = time_job(&u, 0.15);
            printf(" %7.0f%%", 100.0 * (double)(n * m * rows) / (t * 1e9) / peak);
            free_skewed(u.x, 16);
        }
        j.kind = 1;
        t_text = time_job(&j, 0.15);
        printf(" %8.0f%% %9.1f %12.2f\n", 100.0 * (double)(n * m * rows) / (t_text * 1e9) / peak,
               t_best / (double)rows * 1e9, t_text / t_best);
        free_skewed(j.x, 0); free_skewed(j.fill, 0);
    }

    printf("\nK*2^m sizes, normalized quarot_hadamard_apply_f32 (%s), ns per row, vs the next power of two\n",
           quarot_isa_name(quarot_isa_best()));
    printf("%6s %-14s %10s %6s %10s %7s %12s %10s %10s %13s\n", "n", "H_K x 2^m", "ns/row", "2^k", "ns/row",
           "ratio", "butterflies", "mixing", "kernel", "mix/lookup");
    for (k = 0; k < (int)(sizeof ksizes / sizeof ksizes[0]); ++k) {
        char la[32], lb[32];
        const int64_t rows = 16;
        double bf, lk;
        int regs;
        const double ta = apply_ns(ksizes[k][0], rows, 0.2, la, sizeof la, &bf, &lk, &regs);
        const double tb = apply_ns(ksizes[k][1], rows, 0.2, lb, sizeof lb, NULL, NULL, NULL);
        printf("%6lld %-14s %10.0f %6lld %10.0f %7.2f %12.0f %10.0f %10s", (long long)ksizes[k][0], la, ta,
               (long long)ksizes[k][1], tb, ta / tb, bf, ta - bf, regs ? "registers" : "tables");
        if (lk > 0.0 && ta > bf && lpeak > 0.0) printf(" %12.0f%%\n", 100.0 * lk / (ta - bf) / lpeak);
        else printf(" %13s\n", "-");
    }

    {   /* 4. DRAM */
        const int64_t n = 4096, rows = ((int64_t)256 << 20) / (n * 4);
        quarot_hadamard_plan plan;
        job j, c;
        double t_apply, t_copy;
        memset(&j, 0, sizeof j);
        if (quarot_hadamard_plan_init(&plan, n, NULL) != QUAROT_OK) return 1;
        j.kind = 2;
        j.isa = QUAROT_ISA_DEFAULT;
        j.plan = &plan;
        j.n = n;
        j.rows = rows;
        j.x = (float*)malloc(sizeof(float) * (size_t)(n * rows));
        j.fill = (float*)malloc(sizeof(float) * (size_t)(n * rows));
        if (!j.x || !j.fill) { fprintf(stderr, "out of memory\n"); return 1; }
        fill_rand(j.fill, n * rows);
        memcpy(j.x, j.fill, sizeof(float) * (size_t)(n * rows));
        c = j;
        c.kind = 3;
        c.y = j.fill;   /* the copy overwrites the fill values: timed after the transform */
        t_apply = time_job(&j, 1.0);
        t_copy = time_job(&c, 1.0);
        printf("\nrows in DRAM: 256 MiB of n = 4096 rows, normalized apply in place %.2f GB/s (read + write), "
               "streaming copy %.2f GB/s; apply / copy time %.2f\n",
               2.0 * 256.0 * 1048576.0 / t_apply / 1e9, 2.0 * 256.0 * 1048576.0 / t_copy / 1e9, t_apply / t_copy);
        free(j.x); free(j.fill);
        quarot_hadamard_plan_free(&plan);
    }
    {   /* 5. columns in DRAM: down_proj's [4096][11008] f32 (180 MB), its columns transformed */
        const int64_t n = 4096, C = 11008, chunk = 64;
        quarot_hadamard_plan plan;
        quarot_hadamard_apply_desc d;
        float *x, *tb;
        size_t ws;
        void* work;
        double t_cols = 1e30, t_tr = 1e30, t_copy = 1e30, t0;
        int64_t c0, i, c;
        int rep;
        memset(&d, 0, sizeof d);
        if (quarot_hadamard_plan_init(&plan, n, NULL) != QUAROT_OK) return 1;
        ws = quarot_hadamard_cols_workspace_size(&plan);
        work = malloc(ws);
        x = (float*)malloc(sizeof(float) * (size_t)(n * C));
        tb = (float*)malloc(sizeof(float) * (size_t)(n * chunk));
        if (!work || !x || !tb) { fprintf(stderr, "out of memory\n"); return 1; }
        fill_rand(x, n * C);
        for (rep = 0; rep < 3; ++rep) {
            t0 = bench_now_s();   /* the column kernels, 64 columns a call (what a rotate task takes) */
            for (c0 = 0; c0 < C; c0 += chunk)
                if (quarot_hadamard_apply_cols_f32(&plan, &d, x + c0, chunk, C, work, ws) != QUAROT_OK) return 1;
            t0 = bench_now_s() - t0;
            if (t0 < t_cols) t_cols = t0;
            t0 = bench_now_s();   /* the same columns gathered into rows, transformed, put back */
            for (c0 = 0; c0 < C; c0 += chunk) {
                for (i = 0; i < n; ++i)
                    for (c = 0; c < chunk; ++c) tb[c * n + i] = x[i * C + c0 + c];
                if (quarot_hadamard_apply_f32(&plan, &d, tb, chunk, n, NULL, 0) != QUAROT_OK) return 1;
                for (i = 0; i < n; ++i)
                    for (c = 0; c < chunk; ++c) x[i * C + c0 + c] = tb[c * n + i];
            }
            t0 = bench_now_s() - t0;
            if (t0 < t_tr) t_tr = t0;
            t0 = bench_now_s();   /* the memory floor: the matrix copied row by row onto itself's shape */
            for (i = 0; i + 1 < n; i += 2) memcpy(x + i * C, x + (i + 1) * C, sizeof(float) * (size_t)C);
            t0 = bench_now_s() - t0;
            if (t0 < t_copy) t_copy = t0;
        }
        printf("\ncolumns in DRAM: [4096][11008] f32 (180 MB), every column transformed (normalized), 64 columns a call:\n"
               "  quarot_hadamard_apply_cols_f32 %.2f GB/s (read + write), gathered into rows + apply_f32 + put back "
               "%.2f GB/s (%.2fx the time), streaming copy %.2f GB/s (cols / copy time %.2f)\n",
               2.0 * 4.0 * (double)(n * C) / t_cols / 1e9, 2.0 * 4.0 * (double)(n * C) / t_tr / 1e9, t_tr / t_cols,
               4.0 * (double)(n * C) / t_copy / 1e9, t_cols / (2.0 * t_copy));
        free(x); free(tb); free(work);
        quarot_hadamard_plan_free(&plan);
    }
    printf("(%.1f s)\n", bench_now_s() - t_start);
    return 0;
}
