/* bench_engine - the inference engine (examples/engine/) on a 7B-shaped synthetic decoder: hidden 4096,
   intermediate 11008, 32 heads (head_dim 128), a few layers (default 2; the weights of one LLaMA-2-7B
   layer, random, generated in-process), vocab 512 so that the decoder layers dominate as in a 32-layer
   model. Configurations in the same engine: FP32; W8A8KV8; W4A4KV4 without and with QuaRot's online
   hooks (down_proj input 11008 = 172 x 64, across the 32 heads before o_proj, per head on q and k after
   RoPE). For each, 1 and 2 threads: prefill tokens/s (one block of 64 tokens, and one of 512), decode
   tokens/s (16 tokens after the 64), the share of a decode step spent in the online hooks and in activation
   quantization, and the decoder weights' memory. Then the machine's int8 dot-product peak (a
   register-only loop of the widest u8 x s8 dot instruction compiled in, one thread) and the integer
   kernels' share of it on a 4096 x 4096 W4A4 product (prefill: 64 tokens; decode: 1 token).

   Usage: bench_engine [--quick] [--layers N] [--kernels] [--long] [--save DIR]   (--quick: 1 layer, 32
   prefill / 8 decode tokens; --kernels: only the peak, the integer kernels and the streaming read; --long:
   only W4A4KV4 prefill of 512 and of 4096 tokens and their cost per token, BENCH_THREADS threads (2);
   --save: write
   the synthetic model to DIR (safetensors + config.json) and stop, for tools/bench_vs_llamacpp.sh).
   The weights are synthetic: speed does not depend on their values. Times are wall clock, best of 2;
   BENCH_CLOCK=cpu times the one-thread rows, the peak and the kernels with the thread's CPU time. */
#include "quarot.h"
#include "engine/qx_engine.h"
#include "model/qx_synth.h"
#include "formats/qx_safetensors.h"
#include "support/qx_threads.h"
#include "support/qx_arena.h"
#include "bench/bench_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__AVX512F__) || defined(__AVX2__)
#include <immintrin.h>
#endif
#if defined(__ARM_NEON)
#include <arm_neon.h>
#endif

/* BENCH_CLOCK=cpu: one-thread timings (and the engine's profile timers) use this thread's CPU time,
   close to what a quiet machine shows when other jobs share the cores; two-thread rows stay wall clock. */
static int cpu_clock = 0;
static double now_s(void) { return cpu_clock ? bench_thread_cpu_s() : bench_now_s(); }

/* ---- int8 dot-product peak: independent accumulator chains in registers ----
   Each chain starts from its own value, so the compiler cannot merge identical chains into one (an
   earlier version of this loop started every chain at zero: gcc kept ONE vpdpbusd per iteration and
   the "peak" was ten times one chain's latency-bound rate). On x86 the loop is inline assembly: 16
   chains (more than latency x throughput of any current core) and nothing else in the loop. */
static volatile int32_t sink;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__GNUC__)
#define PEAK_CHAINS 16
static double peak_loop(long iters) {
    double t0 = now_s();
    __asm__ volatile(
        "vpternlogd $0xff, %%zmm30, %%zmm30, %%zmm30\n\t"
        "vpabsb %%zmm30, %%zmm31\n\t"
        "1:\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm0\n\t"  "vpdpbusd %%zmm30, %%zmm31, %%zmm1\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm2\n\t"  "vpdpbusd %%zmm30, %%zmm31, %%zmm3\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm4\n\t"  "vpdpbusd %%zmm30, %%zmm31, %%zmm5\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm6\n\t"  "vpdpbusd %%zmm30, %%zmm31, %%zmm7\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm8\n\t"  "vpdpbusd %%zmm30, %%zmm31, %%zmm9\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm10\n\t" "vpdpbusd %%zmm30, %%zmm31, %%zmm11\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm12\n\t" "vpdpbusd %%zmm30, %%zmm31, %%zmm13\n\t"
        "vpdpbusd %%zmm30, %%zmm31, %%zmm14\n\t" "vpdpbusd %%zmm30, %%zmm31, %%zmm15\n\t"
        "dec %0\n\t"
        "jnz 1b\n\t"
        : "+r"(iters)
        :
        : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11",
          "xmm12", "xmm13", "xmm14", "xmm15", "xmm30", "xmm31", "cc");
    return now_s() - t0;
}
#endif
static double int8_peak(const char** what) {
    const long iters = 10000000;
    long i;
    double t0, t;
#if defined(PEAK_CHAINS)
    *what = "AVX512-VNNI vpdpbusd zmm (64 MACs), 16 chains";
    (void)i; (void)t0;
    t = peak_loop(iters);
    t0 = peak_loop(iters);   /* best of two */
    if (t0 < t) t = t0;
    return (double)iters * PEAK_CHAINS * 64.0 / t;
#elif defined(__AVX2__)
    __m256i a0 = _mm256_set1_epi32(0), a1 = _mm256_set1_epi32(1), a2 = _mm256_set1_epi32(2), a3 = _mm256_set1_epi32(3);
    __m256i a4 = _mm256_set1_epi32(4), a5 = _mm256_set1_epi32(5), a6 = _mm256_set1_epi32(6), a7 = _mm256_set1_epi32(7);
    __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
    *what = "AVX2 vpmaddubsw + vpmaddwd ymm (32 MACs), 8 chains";
    t0 = now_s();
    for (i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+x"(u), "+x"(s));
#define PK(a) a = _mm256_add_epi32(a, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), one))
        PK(a0); PK(a1); PK(a2); PK(a3); PK(a4); PK(a5); PK(a6); PK(a7);
#undef PK
    }
    t = now_s() - t0;
    a0 = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                          _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    sink = _mm_cvtsi128_si32(_mm256_castsi256_si128(a0));
    return (double)iters * 8.0 * 32.0 / t;
#elif defined(__ARM_FEATURE_DOTPROD)
    int32x4_t a0 = vdupq_n_s32(0), a1 = vdupq_n_s32(1), a2 = vdupq_n_s32(2), a3 = vdupq_n_s32(3);
    int32x4_t a4 = vdupq_n_s32(4), a5 = vdupq_n_s32(5), a6 = vdupq_n_s32(6), a7 = vdupq_n_s32(7);
    int8x16_t u = vdupq_n_s8(3), s = vdupq_n_s8(-2);
    *what = "NEON sdot (16 MACs), 8 chains";
    t0 = now_s();
    for (i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+w"(u), "+w"(s));
        a0 = vdotq_s32(a0, u, s); a1 = vdotq_s32(a1, u, s); a2 = vdotq_s32(a2, u, s); a3 = vdotq_s32(a3, u, s);
        a4 = vdotq_s32(a4, u, s); a5 = vdotq_s32(a5, u, s); a6 = vdotq_s32(a6, u, s); a7 = vdotq_s32(a7, u, s);
    }
    t = now_s() - t0;
    sink = vaddvq_s32(vaddq_s32(vaddq_s32(vaddq_s32(a0, a1), vaddq_s32(a2, a3)), vaddq_s32(vaddq_s32(a4, a5), vaddq_s32(a6, a7))));
    return (double)iters * 8.0 * 16.0 / t;
#else
    (void)i; (void)t0; (void)t; (void)iters;
    *what = "none (no int8 dot instruction compiled in)";
    return 0.0;
#endif
}

/* ---- AMX-INT8 peak: TDPBUSD (16 x 16 x 64 = 16384 MACs) on four independent C tiles from two
   loaded tiles, nothing else in the loop; needs quarot_amx_request() granted. ---- */
#if defined(__AMX_INT8__) && defined(__AMX_TILE__) && defined(__x86_64__)
#define BENCH_AMX 1
static double amx_peak(void) {
    static unsigned char cfg[64], a[1024] __attribute__((aligned(64))), b[1024] __attribute__((aligned(64)));
    const long iters = 2000000;
    long i;
    double t0, t;
    memset(cfg, 0, sizeof cfg);
    cfg[0] = 1;
    for (i = 0; i < 6; ++i) { cfg[16 + 2 * i] = 64; cfg[48 + i] = 16; }
    memset(a, 3, sizeof a);
    memset(b, 1, sizeof b);
    _tile_loadconfig(cfg);
    _tile_zero(0); _tile_zero(1); _tile_zero(2); _tile_zero(3);
    _tile_loadd(4, a, 64);
    _tile_loadd(5, b, 64);
    t0 = now_s();
    for (i = 0; i < iters; ++i) {
        _tile_dpbusd(0, 4, 5); _tile_dpbusd(1, 4, 5); _tile_dpbusd(2, 4, 5); _tile_dpbusd(3, 4, 5);
    }
    t = now_s() - t0;
    _tile_stored(0, a, 64);
    _tile_release();
    sink = a[0];
    return (double)iters * 4.0 * 16384.0 / t;
}
#endif

/* the engine's own block allocator (huge pages for large blocks), so that the kernels and the
   streaming read below see memory as the engine's weights do */
static void* alloc64(size_t n) { return qx_aligned_alloc(n); }

/* ---- integer kernel throughput: W[out][in] (bits) x T tokens, 64-byte aligned rows as the engine
   allocates them. nmat > 1 cycles through that many weight matrices so that decode reads its weights
   from DRAM, not from the last-level cache. Returns MAC/s (best of reps). ---- */
static double kernel_rate_isa(int bits, int64_t out, int64_t in, int64_t T, int reps, int nmat, int amx);
static double kernel_rate(int bits, int64_t out, int64_t in, int64_t T, int reps, int nmat) {
    return kernel_rate_isa(bits, out, in, T, reps, nmat, 0);
}
/* amx: through quarot_qgemm_amx (tile state granted), else quarot_qgemm. */
static double kernel_rate_isa(int bits, int64_t out, int64_t in, int64_t T, int reps, int nmat, int amx) {
    size_t rb = quarot_qmat_row_bytes(bits, in, 0);
    uint8_t* wd = (uint8_t*)alloc64(rb * (size_t)out * (size_t)nmat);
    float* ws = (float*)alloc64((size_t)out * sizeof(float));
    int8_t* xq = (int8_t*)alloc64((size_t)(T * in));
    float* xs = (float*)alloc64((size_t)T * sizeof(float));
    int32_t* xsum = (int32_t*)alloc64((size_t)T * sizeof(int32_t));
    float* y = (float*)alloc64((size_t)(T * out) * sizeof(float));
    size_t wsz = quarot_qgemm_amx_workspace_size(T, in);
    void* work = alloc64(wsz);
    quarot_qmat m;
    double best = 1e30;
    int64_t i;
    int r, k;
    if (!wd || !ws || !xq || !xs || !xsum || !y) { printf("kernel_rate: out of memory\n"); exit(1); }
    for (i = 0; i < (int64_t)(rb * (size_t)out * (size_t)nmat); ++i) wd[i] = (uint8_t)(i * 37 + 11);
    for (i = 0; i < out; ++i) ws[i] = 0.01f;
    for (i = 0; i < T * in; ++i) xq[i] = (int8_t)((i * 13) % 15 - 7);
    for (i = 0; i < T; ++i) xs[i] = 0.1f;
    quarot_qact_sums(xq, T, in, in, 0, xsum);
    m.bits = bits; m.rows = out; m.cols = in; m.group = 0; m.scales = ws;
    for (r = 0; r < reps; ++r) {
        double t0 = now_s();
        for (k = 0; k < nmat; ++k) {
            m.data = wd + (size_t)k * rb * (size_t)out;
            if (amx) quarot_qgemm_amx(&m, xq, in, xs, xsum, T, y, out, work, wsz, NULL);
            else quarot_qgemm(&m, xq, in, xs, xsum, T, y, out, QUAROT_ISA_DEFAULT, NULL);
        }
        t0 = (now_s() - t0) / nmat;
        if (t0 < best) best = t0;
    }
    free(wd); free(ws); free(xq); free(xs); free(xsum); free(y); free(work);
    return (double)(T * out * in) / best;
}

/* ---- streaming read of n bytes (the memory floor of decode): bytes/s, best of reps, alternating
   64-byte and 32-byte loads (the faster of the two is the floor) ---- */
static double read_rate(size_t n, int reps) {
    uint64_t* b = (uint64_t*)alloc64(n);
    size_t i, w = n / 8;
    double best = 1e30;
    int r;
    if (!b) { printf("read_rate: out of memory\n"); exit(1); }
    for (i = 0; i < w; ++i) b[i] = i;
    for (r = 0; r < reps; ++r) {
        uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        double t0 = now_s();
#if defined(__AVX512F__)
        if (r % 2 == 0) {   /* 64-byte loads, as the kernels make them */
            __m512i v0 = _mm512_setzero_si512(), v1 = v0;
            for (i = 0; i + 16 <= w; i += 16) {
                v0 = _mm512_add_epi64(v0, _mm512_load_si512((const void*)(b + i)));
                v1 = _mm512_add_epi64(v1, _mm512_load_si512((const void*)(b + i + 8)));
            }
            s0 = (uint64_t)_mm512_reduce_add_epi64(_mm512_add_epi64(v0, v1));
        } else {   /* 32-byte loads: on Zen 4 (512-bit ops as two halves) these stream faster */
            __m256i v0 = _mm256_setzero_si256(), v1 = v0, v2 = v0, v3 = v0;
            for (i = 0; i + 16 <= w; i += 16) {
                v0 = _mm256_add_epi64(v0, _mm256_load_si256((const __m256i*)(const void*)(b + i)));
                v1 = _mm256_add_epi64(v1, _mm256_load_si256((const __m256i*)(const void*)(b + i + 4)));
                v2 = _mm256_add_epi64(v2, _mm256_load_si256((const __m256i*)(const void*)(b + i + 8)));
                v3 = _mm256_add_epi64(v3, _mm256_load_si256((const __m256i*)(const void*)(b + i + 12)));
            }
            v0 = _mm256_add_epi64(_mm256_add_epi64(v0, v1), _mm256_add_epi64(v2, v3));
            s0 = (uint64_t)_mm256_extract_epi64(v0, 0) + (uint64_t)_mm256_extract_epi64(v0, 1) +
                 (uint64_t)_mm256_extract_epi64(v0, 2) + (uint64_t)_mm256_extract_epi64(v0, 3);
        }
#else
        for (i = 0; i + 4 <= w; i += 4) { s0 += b[i]; s1 += b[i + 1]; s2 += b[i + 2]; s3 += b[i + 3]; }
#endif
        t0 = now_s() - t0;
        sink = (int32_t)(s0 + s1 + s2 + s3);
        if (t0 < best) best = t0;
    }
    free(b);
    return (double)n / best;
}

/* The same streaming read split over the threads of a pool (half the buffer each on 2 threads):
   what a memory-bound decode can gain from a second thread. */
typedef struct rd_job { const uint64_t* b; size_t words, per; uint64_t sum[8]; } rd_job;
static void rd_task(void* arg, int64_t t) {
    rd_job* j = (rd_job*)arg;
    size_t i = (size_t)t * j->per, e = i + j->per < j->words ? i + j->per : j->words;
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    for (; i + 4 <= e; i += 4) { s0 += j->b[i]; s1 += j->b[i + 1]; s2 += j->b[i + 2]; s3 += j->b[i + 3]; }
    j->sum[t & 7] = s0 + s1 + s2 + s3;
}
static double read_rate_threads(size_t n, int threads, int reps) {
    uint64_t* b = (uint64_t*)alloc64(n);
    qx_pool* pool = qx_pool_create(threads);
    quarot_env env;
    rd_job j;
    double best = 1e30;
    size_t i;
    int r;
    if (!b || !pool) { printf("read_rate_threads: out of memory\n"); exit(1); }
    qx_pool_env(pool, &env);
    for (i = 0; i < n / 8; ++i) b[i] = i;
    memset(&j, 0, sizeof j);
    j.b = b; j.words = n / 8; j.per = (j.words + (size_t)threads - 1) / (size_t)threads;
    for (r = 0; r < reps; ++r) {
        double t0 = now_s();
        quarot_env_parallel_for(&env, rd_task, &j, threads);
        t0 = now_s() - t0;
        sink = (int32_t)(j.sum[0] + j.sum[1]);
        if (t0 < best) best = t0;
    }
    qx_pool_destroy(pool);
    free(b);
    return (double)n / best;
}

/* The peak, the integer kernels against it, decode against a streaming read; prints the table and
   returns the prefill 4096 x 4096 kernel's fraction of the peak. */
/* One kernel measurement between two peak measurements: on a shared machine (the other vCPU may be
   a sibling hyperthread running someone else's vector code) the reachable peak moves during a run, so
   each kernel is compared with the higher of the peaks measured right before and right after it. */
typedef struct kmeas { double rate, peak; } kmeas;
static kmeas kernel_vs_peak(int bits, int64_t out, int64_t in, int64_t T, int reps, int nmat) {
    const char* what;
    kmeas m;
    double p0 = int8_peak(&what), p1;
    m.rate = kernel_rate(bits, out, in, T, reps, nmat);
    p1 = int8_peak(&what);
    m.peak = p0 > p1 ? p0 : p1;
    return m;
}
static double pct(kmeas m) { return m.peak > 0 ? 100.0 * m.rate / m.peak : 0.0; }

/* The peak, the integer kernels against it, decode against a streaming read; prints the table and
   returns the prefill 4096 x 4096 kernel's fraction of the peak. */
static double kernel_report(void) {
    const char* peak_what;
    double peak = int8_peak(&peak_what), rd;
    kmeas k_pre = kernel_vs_peak(4, 4096, 4096, 64, 5, 1), k_gate = kernel_vs_peak(4, 11008, 4096, 64, 3, 1);
    kmeas k_down = kernel_vs_peak(4, 4096, 11008, 64, 3, 1), k_w8 = kernel_vs_peak(8, 4096, 4096, 64, 3, 1);
    kmeas k_dec = kernel_vs_peak(4, 4096, 4096, 1, 1, 8);          /* 8 matrices: 64 MiB of packed weights */
    int round;
    /* decode and the streaming read take turns (memory bandwidth on a shared machine moves within a
       run): the best of 8 rounds of each */
    rd = read_rate((size_t)64 << 20, 2);
    for (round = 1; round < 8; ++round) {
        double k = kernel_rate(4, 4096, 4096, 1, 1, 8), r = read_rate((size_t)64 << 20, 2);
        if (k > k_dec.rate) k_dec.rate = k;
        if (r > rd) rd = r;
    }
    printf("\nint8 dot peak (one thread, %s): %.1f GMAC/s at the start; each kernel below against the higher of\n"
           "the peaks measured right before and right after it\n", peak_what, peak * 1e-9);
    printf("qgemm one thread, 64 tokens (prefill), 64-byte aligned rows:\n");
    printf("| product | GMAC/s | peak GMAC/s | of peak |\n|---|---|---|---|\n");
    printf("| W4A4 4096 x 4096 (q/k/v/o) | %.1f | %.1f | %.0f%% |\n", k_pre.rate * 1e-9, k_pre.peak * 1e-9, pct(k_pre));
    printf("| W4A4 11008 x 4096 (gate/up) | %.1f | %.1f | %.0f%% |\n", k_gate.rate * 1e-9, k_gate.peak * 1e-9, pct(k_gate));
    printf("| W4A4 4096 x 11008 (down) | %.1f | %.1f | %.0f%% |\n", k_down.rate * 1e-9, k_down.peak * 1e-9, pct(k_down));
    printf("| W8A8 4096 x 4096 | %.1f | %.1f | %.0f%% |\n", k_w8.rate * 1e-9, k_w8.peak * 1e-9, pct(k_w8));
#if defined(BENCH_AMX)
    if (quarot_amx_request() == QUAROT_OK) {
        double a0 = amx_peak(), ka = kernel_rate_isa(4, 4096, 4096, 64, 5, 1, 1), kg = kernel_rate_isa(4, 11008, 4096, 64, 3, 1, 1);
        double kd = kernel_rate_isa(4, 4096, 11008, 64, 3, 1, 1), k8 = kernel_rate_isa(8, 4096, 4096, 64, 3, 1, 1);
        double a1 = amx_peak();
        if (a1 > a0) a0 = a1;
        printf("AMX-INT8 peak (one thread, TDPBUSD on 4 tiles): %.1f GMAC/s, the higher of before and after the kernels\n", a0 * 1e-9);
        printf("| product (AMX, 64 tokens) | GMAC/s | of AMX peak | vs VNNI kernel |\n|---|---|---|---|\n");
        printf("| W4A4 4096 x 4096 | %.1f | %.0f%% | %.2fx |\n", ka * 1e-9, 100 * ka / a0, ka / k_pre.rate);
        printf("| W4A4 11008 x 4096 | %.1f | %.0f%% | %.2fx |\n", kg * 1e-9, 100 * kg / a0, kg / k_gate.rate);
        printf("| W4A4 4096 x 11008 | %.1f | %.0f%% | %.2fx |\n", kd * 1e-9, 100 * kd / a0, kd / k_down.rate);
        printf("| W8A8 4096 x 4096 | %.1f | %.0f%% | %.2fx |\n", k8 * 1e-9, 100 * k8 / a0, k8 / k_w8.rate);
    } else {
        printf("AMX-INT8: compiled in, but the CPU lacks it or Linux refused tile state: VNNI only\n");
    }
#else
    printf("AMX-INT8: not compiled in (needs -mamx-int8 -mamx-tile, e.g. -march=native on a CPU with AMX)\n");
#endif
    printf("qgemm W4A4 4096x4096, 1 token (decode), weights from DRAM (8 matrices, 64 MiB): %.1f GMAC/s = %.0f%% of the peak;\n"
           "  %.1f GB/s of packed weights = %.0f%% of a streaming read of 64 MiB (the faster of 64- and 32-byte loads, %.1f GB/s) in the same run\n",
           k_dec.rate * 1e-9, pct(k_dec), k_dec.rate * 0.5e-9, 100 * k_dec.rate * 0.5 / rd, rd * 1e-9);
    {   /* scalar 8-byte loads on both sides: only the ratio is reported */
        double r1 = read_rate_threads((size_t)128 << 20, 1, 6), r2 = read_rate_threads((size_t)128 << 20, 2, 6);
        printf("streaming read of 128 MiB, 8-byte loads: %.1f GB/s on 1 thread, %.1f GB/s on 2 (%.2fx): the most a second\n"
               "  thread can add to a decode bound by memory\n", r1 * 1e-9, r2 * 1e-9, r2 / r1);
    }
    return pct(k_pre) / 100.0;
}

typedef struct cfg { const char* name; int w, a, kv, hooks; } cfg;

/* --long: W4A4KV4 prefill of 512 tokens (one block) and of 4096 tokens (8 blocks of 512, as
   `quarot generate` feeds a long prompt; attention over the quantized KV cache included), one run,
   best of reps; returns 0, or 1 on an engine error. */
static int long_report(const qx_store* s, int64_t layers, int threads, int reps) {
    enum { NL = 4096, NS = 512 };
    static int32_t toks[NL];
    qx_pool* pool = qx_pool_create(threads);
    quarot_env env;
    qx_engine en;
    qx_engine_opts o;
    qx_err e;
    double b_s = 1e30, b_l = 1e30, t0;
    int64_t i, t;
    int rep;
    for (i = 0; i < NL; ++i) toks[i] = (int32_t)((i * 31 + 7) % 512);
    qx_pool_env(pool, &env);
    memset(&o, 0, sizeof o);
    o.w_bits = 4; o.a_bits = 4; o.kv_bits = 4;
    o.context = NL;
    o.max_tokens = NS;
    o.env = &env;
    if (qx_engine_init(&en, s, &o, &e) != QUAROT_OK) { printf("W4A4KV4: %s\n", e.msg); return 1; }
    for (rep = 0; rep < reps; ++rep) {
        qx_engine_reset(&en);
        t0 = now_s();
        if (qx_engine_forward(&en, toks, NS, NULL, 0, &e) != QUAROT_OK) { printf("%s\n", e.msg); return 1; }
        t0 = now_s() - t0;
        if (t0 < b_s) b_s = t0;
        qx_engine_reset(&en);
        t0 = now_s();
        for (t = 0; t < NL; t += NS)
            if (qx_engine_forward(&en, toks + t, NS, NULL, 0, &e) != QUAROT_OK) { printf("%s\n", e.msg); return 1; }
        t0 = now_s() - t0;
        if (t0 < b_l) b_l = t0;
    }
    qx_engine_free(&en);
    qx_pool_destroy(pool);
    printf("\n| W4A4KV4, %lld layer%s, %d thread%s | prefill %d tok/s | prefill %d tok/s (blocks of %d) | cost per token %d / %d (target <= 2) |\n",
           (long long)layers, layers > 1 ? "s" : "", threads, threads > 1 ? "s" : "", NS, NL, NS, NL, NS);
    printf("|---|---|---|---|\n| %s | %.1f | %.1f | %.2fx |\n", cpu_clock ? "thread CPU time" : "wall clock", NS / b_s, NL / b_l,
           (b_l / NL) / (b_s / NS));
    return 0;
}

int main(int argc, char** argv) {
    int quick = 0, kernels_only = 0, long_only = 0, i, c, th;
    const char* save = NULL;
    int64_t layers = 2, P, D, l;
    qx_synth_desc sd;
    qx_store s;
    qx_err e;
    quarot_online_list hooks;
    static const cfg cfgs[] = {
        {"FP32", 16, 16, 16, 0}, {"W8A8KV8", 8, 8, 8, 0}, {"W4A4KV4", 4, 4, 4, 0}, {"W4A4KV4 + hooks", 4, 4, 4, 1},
    };
    double dec[4][2], pre[4][2], pre2[4][2], hook_share[4], actq_share[4];
    size_t wmem[4];
    int32_t toks[512];
    int64_t P2;
    double kfrac;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc) layers = atoi(argv[++i]);
        else if (strcmp(argv[i], "--kernels") == 0) kernels_only = 1;
        else if (strcmp(argv[i], "--long") == 0) long_only = 1;
        else if (strcmp(argv[i], "--save") == 0 && i + 1 < argc) save = argv[++i];
    }
    if (quick) layers = 1;
    cpu_clock = getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0;
    if (kernels_only) {
        printf("bench_engine --kernels: one thread, %s\n", cpu_clock ? "thread CPU time" : "wall clock");
        kernel_report();
        return 0;
    }
    P = quick ? 32 : 64;
    P2 = quick ? 128 : 512;
    D = quick ? 8 : 16;
    memset(&sd, 0, sizeof sd);
    sd.arch = "llama";
    sd.hidden = 4096; sd.intermediate = 11008; sd.n_layers = layers; sd.n_heads = 32; sd.n_kv_heads = 32; sd.head_dim = 128;
    sd.vocab = 512; sd.max_seq = 1024; sd.n_outliers = -1;
    printf("bench_engine: 7B-shaped decoder (hidden 4096, intermediate 11008, 32 heads x 128), %lld layers, vocab 512; ISA %s\n",
           (long long)layers, quarot_isa_name(quarot_isa_best()));
    fflush(stdout);
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { printf("synth: %s\n", e.msg); return 1; }
    if (save) {   /* the same layers as a model directory, for `quarot quantize` and other engines */
        qx_st_save_opts so;
        memset(&so, 0, sizeof so);
        so.force = 1;
        if (qx_st_save(&s, save, &so, &e) != QUAROT_OK) { printf("save: %s\n", e.msg); return 1; }
        printf("saved to %s\n", save);
        qx_store_free(&s);
        return 0;
    }
    if (long_only) {
        int rc = long_report(&s, layers, getenv("BENCH_THREADS") ? atoi(getenv("BENCH_THREADS")) : 2, 2);
        qx_store_free(&s);
        return rc;
    }
    quarot_online_list_init(&hooks, NULL);
    for (l = 0; l < layers; ++l) {
        if (quarot_online_list_add(&hooks, l, QUAROT_SITE_DOWN_INPUT, 11008, 1, 11008, 1, NULL) != QUAROT_OK ||
            quarot_online_list_add(&hooks, l, QUAROT_SITE_O_INPUT, 4096, 1, 32, 128, NULL) != QUAROT_OK ||
            quarot_online_list_add(&hooks, l, QUAROT_SITE_Q_ROPE, 4096, 32, 128, 1, NULL) != QUAROT_OK ||
            quarot_online_list_add(&hooks, l, QUAROT_SITE_K_ROPE, 4096, 32, 128, 1, NULL) != QUAROT_OK) {
            printf("hooks: cannot build\n");
            return 1;
        }
    }
    for (i = 0; i < 512; ++i) toks[i] = (int32_t)((i * 31 + 7) % 512);
    for (c = 0; c < 4; ++c) {
        for (th = 1; th <= 2; ++th) {
            qx_pool* pool = qx_pool_create(th);
            quarot_env env;
            qx_engine en;
            qx_engine_opts o;
            double bp = 1e30, bp2 = 1e30, bd = 1e30, hk = 0, aq = 0;
            int rep;
            int use_cpu = getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0;
            cpu_clock = use_cpu && th == 1;
            qx_pool_env(pool, &env);
            memset(&o, 0, sizeof o);
            o.w_bits = cfgs[c].w; o.a_bits = cfgs[c].a; o.kv_bits = cfgs[c].kv;
            o.hooks = cfgs[c].hooks ? &hooks : NULL;
            o.context = 1024;
            o.max_tokens = 512;
            o.env = &env;
            o.profile = cpu_clock && th == 1 ? 2 : 1;
            if (qx_engine_init(&en, &s, &o, &e) != QUAROT_OK) { printf("%s: %s\n", cfgs[c].name, e.msg); return 1; }
            wmem[c] = en.weight_bytes;
            if (c == 2 && th == 1)
                printf("  integer prefill products: %s\n", en.amx ? "AMX-INT8 tiles (tile state granted)"
                                                               : "VNNI / the best ISA (AMX not compiled in, absent or refused)");
            for (rep = 0; rep < 2; ++rep) {
                double t0;
                int64_t k;
                int32_t tk = 5;
                qx_engine_reset(&en);
                t0 = now_s();
                if (qx_engine_forward(&en, toks, P2, NULL, 0, &e) != QUAROT_OK) { printf("%s\n", e.msg); return 1; }
                t0 = now_s() - t0;
                if (t0 < bp2) bp2 = t0;
                qx_engine_reset(&en);
                t0 = now_s();
                if (qx_engine_forward(&en, toks, P, NULL, 0, &e) != QUAROT_OK) { printf("%s\n", e.msg); return 1; }
                t0 = now_s() - t0;
                if (t0 < bp) bp = t0;
                en.t_hooks = en.t_actq = 0.0;
                t0 = now_s();
                for (k = 0; k < D; ++k)
                    if (qx_engine_forward(&en, &tk, 1, NULL, 0, &e) != QUAROT_OK) { printf("%s\n", e.msg); return 1; }
                t0 = now_s() - t0;
                if (t0 < bd) { bd = t0; hk = en.t_hooks / t0; aq = en.t_actq / t0; }
            }
            pre[c][th - 1] = (double)P / bp;
            pre2[c][th - 1] = (double)P2 / bp2;
            dec[c][th - 1] = (double)D / bd;
            if (th == 1) { hook_share[c] = hk; actq_share[c] = aq; }
            qx_engine_free(&en);
            qx_pool_destroy(pool);
            printf("  %-16s %d thread%s: prefill %lld %8.1f tok/s, prefill %lld %8.1f tok/s, decode %7.2f tok/s (hooks %.1f%%, act quant %.1f%% of decode)\n",
                   cfgs[c].name, th, th > 1 ? "s" : " ", (long long)P, pre[c][th - 1], (long long)P2, pre2[c][th - 1],
                   dec[c][th - 1], 100 * hk, 100 * aq);
            fflush(stdout);
        }
    }
    cpu_clock = getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0;
    kfrac = kernel_report();
    printf("\nclock: %s\n", getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0 ? "thread CPU time for 1 thread, wall for 2" : "wall");
    printf("\n| config | weight bytes / decode token (decoder linears) | prefill %lld tok/s 1T | 2T | prefill %lld tok/s 1T | 2T | decode tok/s 1T | 2T | decode vs FP32 (1T) | hooks / decode step | act quant / decode step |\n",
           (long long)P, (long long)P2);
    printf("|---|---|---|---|---|---|---|---|---|---|---|\n");
    for (c = 0; c < 4; ++c)
        printf("| %s | %.1f MiB | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2fx | %.1f%% | %.1f%% |\n", cfgs[c].name,
               (double)wmem[c] / 1048576.0, pre[c][0], pre[c][1], pre2[c][0], pre2[c][1], dec[c][0], dec[c][1],
               dec[c][0] / dec[0][0], 100 * hook_share[c], 100 * actq_share[c]);
    printf("targets: W4A4 decode >= 3x FP32: %.2fx (no hooks), %.2fx (hooks); hooks <= 10%% of decode: %.1f%%; kernels >= 60%% of peak: %.0f%% (prefill, 4096 x 4096)\n",
           dec[2][0] / dec[0][0], dec[3][0] / dec[0][0], 100 * hook_share[3], 100 * kfrac);
    quarot_online_list_free(&hooks);
    qx_store_free(&s);
    return 0;
}
