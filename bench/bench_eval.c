/* bench_eval - tokens/s of the eval / calibrate forward pass (model/qx_forward.c: one GEMM per linear
   over a window, attention over groups of heads, row-wise steps in chunks, all through the parallel
   hook of qx_threads), in FP32 and under W4A4KV4 fake quantization (quarot_fake_quant_f32 on every
   decoder-linear input and on K/V).

     stories260K   ../shared/models/stories260K/stories260K.bin (skipped when absent): 8 windows of
                   256 tokens (random ids: the speed does not depend on the text)
     7B-shaped     a stack generated in-process with qx_synth: Llama-2-7B layer shapes (hidden 4096,
                   intermediate 11008, 32 heads, head_dim 128, vocab 32000, tied embeddings), 2 decoder
                   layers, stored as f16 and converted to f32 by qx_forward_init; one window of 256
                   tokens (a whole 32-layer model would take ~16x the layer time)

   Each case runs with 1 thread and with every core; the logits of both are compared bit for bit.
   usage: bench_eval [--quick] [-t THREADS]   (--quick: 1 layer, 128-token window for the 7B shape) */
#include "quarot.h"
#include "cli/qx_cli.h"
#include "model/qx_forward.h"
#include "model/qx_synth.h"
#include "support/qx_threads.h"
#include "formats/qx_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"



/* Runs `windows` windows of T tokens with `threads` threads; logits of the last window into out
   (T*vocab floats). Returns the wall seconds (negative on error). */
static double run(const qx_store* s, const qx_fake_quant_opts* q, int threads, const int32_t* toks, int64_t T,
                  int windows, float* out, double* cpu) {
    qx_pool* pool = threads > 1 ? qx_pool_create(threads) : NULL;
    quarot_env env;
    qx_forward_opts o;
    qx_forward f;
    qx_err e;
    double t0, c0, dt;
    int w;
    qx_pool_env(pool, &env);
    memset(&o, 0, sizeof o);
    if (q) o.quant = *q;
    o.env = &env;
    if (qx_forward_init(&f, s, &o, &e) != QUAROT_OK) {
        printf("  forward init failed: %s\n", e.msg);
        qx_pool_destroy(pool);
        return -1.0;
    }
    t0 = bench_now_s();
    c0 = bench_cpu_s();
    for (w = 0; w < windows; ++w) {
        if (qx_forward_window(&f, toks + (int64_t)w * T, T, out, &e) != QUAROT_OK) {
            printf("  forward failed: %s\n", e.msg);
            qx_forward_free(&f);
            qx_pool_destroy(pool);
            return -1.0;
        }
    }
    dt = bench_now_s() - t0;
    *cpu = bench_cpu_s() - c0;
    qx_forward_free(&f);
    qx_pool_destroy(pool);
    return dt;
}

static void bench_case(const char* name, const qx_store* s, int64_t T, int windows, int max_threads, double gflop_per_token) {
    int64_t V = s->config.vocab, i;
    int32_t* toks = (int32_t*)malloc((size_t)(T * windows) * sizeof(int32_t));
    float *ref = (float*)malloc((size_t)(T * V) * sizeof(float)), *got = (float*)malloc((size_t)(T * V) * sizeof(float));
    quarot_rng rng;
    int qz;
    if (!toks || !ref || !got) { printf("  %s: out of memory\n", name); free(toks); free(ref); free(got); return; }
    quarot_rng_seed(&rng, 7);
    for (i = 0; i < T * windows; ++i) toks[i] = (int32_t)(quarot_rng_u64(&rng) % (uint64_t)V);
    for (qz = 0; qz < 2; ++qz) {
        qx_fake_quant_opts q;
        double c1 = 0, cn = 0, t1, tn = 0;
        memset(&q, 0, sizeof q);
        if (qz) { q.w_bits = 4; q.a_bits = 4; q.k_bits = 4; q.v_bits = 4; }
        t1 = run(s, &q, 1, toks, T, windows, ref, &c1);
        if (t1 < 0) break;
        if (max_threads > 1) {
            tn = run(s, &q, max_threads, toks, T, windows, got, &cn);
            if (tn < 0) break;
        }
        printf("  %-12s %-8s %5lld x %-4d %10.1f %10.1f %8d %8.2f %10.1f %10s  %.1f GFLOP/s\n", name, qz ? "W4A4KV4" : "FP32", (long long)T,
               windows, (double)(T * windows) / t1, max_threads > 1 ? (double)(T * windows) / tn : 0.0, max_threads,
               max_threads > 1 ? t1 / tn : 1.0, (double)(T * windows) / c1,
               max_threads > 1 ? (memcmp(ref, got, (size_t)(T * V) * sizeof(float)) == 0 ? "identical" : "DIFFER") : "-",
               gflop_per_token * (double)(T * windows) / (max_threads > 1 ? tn : t1));
        fflush(stdout);
    }
    free(toks);
    free(ref);
    free(got);
}

int main(int argc, char** argv) {
    int quick = 0, threads = qx_cpu_count(), i;
    const char* stories = "../shared/models/stories260K/stories260K.bin";
    qx_store s;
    qx_err e;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "--quick") == 0) quick = 1;
        else if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) threads = atoi(argv[++i]);
    }
    printf("bench_eval: forward pass tokens/s (qx_forward, window at once), SIMD %s, %d core(s)\n", quarot_simd_name(), qx_cpu_count());
    printf("  %-12s %-8s %12s %10s %10s %8s %8s %10s %10s\n", "model", "quant", "T x windows", "tok/s 1t", "tok/s Nt", "threads", "speedup",
           "tok/cpu-s", "logits");
    {
        FILE* fp = fopen(stories, "rb");
        if (fp) {
            qx_load_opts lo;
            fclose(fp);
            memset(&lo, 0, sizeof lo);
            if (qx_load_model(stories, &lo, &s, &e) == QUAROT_OK) {
                const quarot_model_config* c = &s.config;
                double per_tok = 2e-9 * (double)c->n_layers *
                                 (double)(c->hidden * (2 * c->hidden + 2 * (c->hidden / c->n_heads) * c->n_kv_heads) + 3 * c->hidden * c->intermediate) +
                                 2e-9 * (double)(c->hidden * c->vocab);
                bench_case("stories260K", &s, 256, 8, threads, per_tok);
                qx_store_free(&s);
            } else {
                printf("  stories260K: %s\n", e.msg);
            }
        } else {
            printf("  stories260K: %s not found, skipped\n", stories);
        }
    }
    {
        qx_synth_desc d;
        double t0 = bench_now_s(), per_tok;
        memset(&d, 0, sizeof d);
        d.arch = "llama";
        d.seed = 1;
        d.hidden = 4096;
        d.intermediate = 11008;
        d.n_heads = 32;
        d.n_kv_heads = 32;
        d.head_dim = 128;
        d.vocab = 32000;
        d.n_layers = quick ? 1 : 2;
        d.max_seq = 512;
        d.tied = 1;
        d.dtype = QUAROT_DTYPE_F16;
        if (qx_synth_model(&s, &d, &e) != QUAROT_OK) {
            printf("  7B-shaped: %s\n", e.msg);
            return 1;
        }
        printf("  (7B-shaped stack: %lld layers generated in %.1f s)\n", (long long)d.n_layers, bench_now_s() - t0);
        per_tok = 2e-9 * (double)d.n_layers * (double)(4 * 4096 * 4096 + 3 * 4096 * 11008) + 2e-9 * 4096.0 * 32000.0;
        bench_case("7B-shaped", &s, quick ? 128 : 256, 1, threads, per_tok);
        qx_store_free(&s);
    }
    printf("  (tok/s: tokens of the windows / wall seconds; tok/cpu-s: the same per CPU second of the 1-thread run,\n"
           "   which a busy machine affects less; GFLOP/s: the linears' and lm_head's 2*params flops per\n"
           "   token, attention not counted, at the larger thread count; logits: N threads vs 1, bit for bit)\n");
    return 0;
}
