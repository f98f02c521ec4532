/* bench_engine - the inference engine (examples/engine/) on a 7B-shaped synthetic decoder: hidden 4096,
   intermediate 11008, 32 heads (head_dim 128), a few layers (default 2; the weights of one LLaMA-2-7B
   layer, random, generated in-process), vocab 512 so that the decoder layers dominate as in a 32-layer
   model. Configurations in the same engine: FP32; W8A8KV8; W4A4KV4 without and with QuaRot's online
   hooks (down_proj input 11008 = 172 x 64, across the 32 heads before o_proj, per head on q and k after
   RoPE). For each, 1 and 2 threads: prefill tokens/s (one block of 64 tokens), decode tokens/s (16
   tokens after it), the share of a decode step spent in the online hooks and in activation
   quantization, and the decoder weights' memory. Then the machine's int8 dot-product peak (a
   register-only loop of the widest u8 x s8 dot instruction compiled in, one thread) and the integer
   kernels' share of it on a 4096 x 4096 W4A4 product (prefill: 64 tokens; decode: 1 token).

   Usage: bench_engine [--quick] [--layers N]   (--quick: 1 layer, 32 prefill / 8 decode tokens).
   The weights are synthetic: speed does not depend on their values. Times are wall clock, best of 2;
   BENCH_CLOCK=cpu times the one-thread rows, the peak and the kernels with the thread's CPU time. */
#include "quarot.h"
#include "qx_engine.h"
#include "qx_synth.h"
#include "qx_threads.h"

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
static double now_s(void) {
    struct timespec t;
    clock_gettime(cpu_clock ? CLOCK_THREAD_CPUTIME_ID : CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- int8 dot-product peak: independent accumulator chains in registers ---- */
static volatile int32_t sink;
static double int8_peak(const char** what) {
    const long iters = 20000000;
    long i;
    double t0, t;
#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
    __m512i a0 = _mm512_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0, a8 = a0, a9 = a0;
    __m512i u = _mm512_set1_epi8(3), s = _mm512_set1_epi8(-2);
    *what = "AVX512-VNNI vpdpbusd zmm (64 MACs)";
    t0 = now_s();
    for (i = 0; i < iters; ++i) {
        __asm__ volatile("" : "+v"(u), "+v"(s));
        a0 = _mm512_dpbusd_epi32(a0, u, s); a1 = _mm512_dpbusd_epi32(a1, u, s); a2 = _mm512_dpbusd_epi32(a2, u, s);
        a3 = _mm512_dpbusd_epi32(a3, u, s); a4 = _mm512_dpbusd_epi32(a4, u, s); a5 = _mm512_dpbusd_epi32(a5, u, s);
        a6 = _mm512_dpbusd_epi32(a6, u, s); a7 = _mm512_dpbusd_epi32(a7, u, s); a8 = _mm512_dpbusd_epi32(a8, u, s);
        a9 = _mm512_dpbusd_epi32(a9, u, s);
    }
    t = now_s() - t0;
    a0 = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                          _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(_mm512_add_epi32(a6, a7), _mm512_add_epi32(a8, a9))));
    sink = _mm_cvtsi128_si32(_mm512_castsi512_si128(a0));
    return (double)iters * 10.0 * 64.0 / t;
#elif defined(__AVX2__)
    __m256i a0 = _mm256_set1_epi32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    __m256i u = _mm256_set1_epi8(3), s = _mm256_set1_epi8(-2), one = _mm256_set1_epi16(1);
    *what = "AVX2 vpmaddubsw + vpmaddwd ymm (32 MACs)";
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
    int32x4_t a0 = vdupq_n_s32(0), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    int8x16_t u = vdupq_n_s8(3), s = vdupq_n_s8(-2);
    *what = "NEON sdot (16 MACs)";
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

/* ---- integer kernel throughput on a 4096 x 4096 W4 x A4 product ---- */
static double kernel_rate(int64_t T, int reps) {
    int64_t n = 4096, i;
    size_t rb = quarot_qmat_row_bytes(4, n, 0);
    uint8_t* wd = (uint8_t*)malloc(rb * (size_t)n);
    float* ws = (float*)malloc((size_t)n * sizeof(float));
    int8_t* xq = (int8_t*)malloc((size_t)(T * n));
    float* xs = (float*)malloc((size_t)T * sizeof(float));
    int32_t* xsum = (int32_t*)malloc((size_t)T * sizeof(int32_t));
    float* y = (float*)malloc((size_t)(T * n) * sizeof(float));
    quarot_qmat m;
    double best = 1e30;
    int r;
    for (i = 0; i < (int64_t)rb * n; ++i) wd[i] = (uint8_t)(i * 37 + 11);
    for (i = 0; i < n; ++i) ws[i] = 0.01f;
    for (i = 0; i < T * n; ++i) xq[i] = (int8_t)((i * 13) % 15 - 7);
    for (i = 0; i < T; ++i) xs[i] = 0.1f;
    quarot_qact_sums(xq, T, n, n, 0, xsum);
    m.bits = 4; m.rows = n; m.cols = n; m.group = 0; m.data = wd; m.scales = ws;
    for (r = 0; r < reps; ++r) {
        double t0 = now_s();
        quarot_qgemm(&m, xq, n, xs, xsum, T, y, n, QUAROT_ISA_DEFAULT, NULL);
        t0 = now_s() - t0;
        if (t0 < best) best = t0;
    }
    free(wd); free(ws); free(xq); free(xs); free(xsum); free(y);
    return (double)(T * n * n) / best;
}

typedef struct cfg { const char* name; int w, a, kv, hooks; } cfg;

int main(int argc, char** argv) {
    int quick = 0, i, c, th;
    int64_t layers = 2, P, D, l;
    qx_synth_desc sd;
    qx_store s;
    qx_err e;
    quarot_online_list hooks;
    static const cfg cfgs[] = {
        {"FP32", 16, 16, 16, 0}, {"W8A8KV8", 8, 8, 8, 0}, {"W4A4KV4", 4, 4, 4, 0}, {"W4A4KV4 + hooks", 4, 4, 4, 1},
    };
    double dec[4][2], pre[4][2], hook_share[4], actq_share[4];
    size_t wmem[4];
    int32_t toks[64];
    const char* peak_what;
    double peak, k_pre, k_dec;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "--layers") == 0 && i + 1 < argc) layers = atoi(argv[++i]);
    }
    if (quick) layers = 1;
    cpu_clock = getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0;
    P = quick ? 32 : 64;
    D = quick ? 8 : 16;
    memset(&sd, 0, sizeof sd);
    sd.arch = "llama";
    sd.hidden = 4096; sd.intermediate = 11008; sd.n_layers = layers; sd.n_heads = 32; sd.n_kv_heads = 32; sd.head_dim = 128;
    sd.vocab = 512; sd.max_seq = 256; sd.n_outliers = -1;
    printf("bench_engine: 7B-shaped decoder (hidden 4096, intermediate 11008, 32 heads x 128), %lld layers, vocab 512; ISA %s\n",
           (long long)layers, quarot_isa_name(quarot_isa_best()));
    fflush(stdout);
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { printf("synth: %s\n", e.msg); return 1; }
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
    for (i = 0; i < 64; ++i) toks[i] = (int32_t)((i * 31 + 7) % 512);
    for (c = 0; c < 4; ++c) {
        for (th = 1; th <= 2; ++th) {
            qx_pool* pool = qx_pool_create(th);
            quarot_env env;
            qx_engine en;
            qx_engine_opts o;
            double bp = 1e30, bd = 1e30, hk = 0, aq = 0;
            int rep;
            int use_cpu = getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0;
            cpu_clock = use_cpu && th == 1;
            qx_pool_env(pool, &env);
            memset(&o, 0, sizeof o);
            o.w_bits = cfgs[c].w; o.a_bits = cfgs[c].a; o.kv_bits = cfgs[c].kv;
            o.hooks = cfgs[c].hooks ? &hooks : NULL;
            o.context = 256;
            o.max_tokens = 64;
            o.env = &env;
            o.profile = cpu_clock && th == 1 ? 2 : 1;
            if (qx_engine_init(&en, &s, &o, &e) != QUAROT_OK) { printf("%s: %s\n", cfgs[c].name, e.msg); return 1; }
            wmem[c] = en.weight_bytes;
            for (rep = 0; rep < 2; ++rep) {
                double t0;
                int64_t k;
                int32_t tk = 5;
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
            dec[c][th - 1] = (double)D / bd;
            if (th == 1) { hook_share[c] = hk; actq_share[c] = aq; }
            qx_engine_free(&en);
            qx_pool_destroy(pool);
            printf("  %-16s %d thread%s: prefill %8.1f tok/s, decode %7.2f tok/s (hooks %.1f%%, act quant %.1f%% of decode)\n",
                   cfgs[c].name, th, th > 1 ? "s" : " ", pre[c][th - 1], dec[c][th - 1], 100 * hk, 100 * aq);
            fflush(stdout);
        }
    }
    cpu_clock = getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0;
    peak = int8_peak(&peak_what);
    k_pre = kernel_rate(64, 3);
    k_dec = kernel_rate(1, 20);
    printf("\nclock: %s\n", getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0 ? "thread CPU time for 1 thread, wall for 2" : "wall");
    printf("\n| config | weights (decoder linears) | prefill tok/s 1T | 2T | decode tok/s 1T | 2T | decode vs FP32 (1T) | hooks / decode step | act quant / decode step |\n");
    printf("|---|---|---|---|---|---|---|---|---|\n");
    for (c = 0; c < 4; ++c)
        printf("| %s | %.1f MiB | %.1f | %.1f | %.2f | %.2f | %.2fx | %.1f%% | %.1f%% |\n", cfgs[c].name, (double)wmem[c] / 1048576.0,
               pre[c][0], pre[c][1], dec[c][0], dec[c][1], dec[c][0] / dec[0][0], 100 * hook_share[c], 100 * actq_share[c]);
    printf("\nint8 dot peak (one thread, %s): %.1f GMAC/s\n", peak_what, peak * 1e-9);
    printf("qgemm W4A4 4096x4096, 64 tokens (prefill), one thread: %.1f GMAC/s = %.0f%% of the peak\n", k_pre * 1e-9,
           peak > 0 ? 100 * k_pre / peak : 0.0);
    printf("qgemm W4A4 4096x4096, 1 token (decode), one thread: %.1f GMAC/s = %.0f%% of the peak (%.1f GB/s of packed weights)\n",
           k_dec * 1e-9, peak > 0 ? 100 * k_dec / peak : 0.0, k_dec * 0.5e-9 + 0.0);
    printf("targets: W4A4 decode >= 3x FP32: %.2fx (no hooks), %.2fx (hooks); hooks <= 10%% of decode: %.1f%%; kernels >= 60%% of peak: %.0f%%\n",
           dec[2][0] / dec[0][0], dec[3][0] / dec[0][0], 100 * hook_share[3], peak > 0 ? 100 * k_pre / peak : 0.0);
    quarot_online_list_free(&hooks);
    qx_store_free(&s);
    return 0;
}
