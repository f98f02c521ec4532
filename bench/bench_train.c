/* bench_train - SpinQuant's trainer (quarot.h >>train_model): one optimizer step on a 7B-shaped layer,
   as a fraction of the GEMM peak measured in the same run, and stories260K's whole learning time.

   1. The SGEMM rate of this machine and thread count on the step's biggest shape (2048 x 4096 x
      11008; quarot_sgemm through qx_threads' pool), and the DGEMM rate at 4096^3 (the Stiefel step of
      R1 runs in double).
   2. A one-layer synthetic LLaMA shaped like Llama-2-7B's layers (hidden 4096, intermediate 11008, 32
      heads of 128, vocabulary 256 so that the layer dominates), one window of 2048 tokens, 4-bit
      asymmetric activations (SpinQuant's training setting), online hooks: the forward pass alone
      (quarot_trainer_loss without gradients) and one optimizer step (quarot_trainer_step: forward,
      backward, the chain rule into dL/dR1 / dL/dR2 and the Cayley steps). The float work counted
      (2mnk per GEMM): a forward pass = W_eff (2 P h: P the layer's weights, h hidden) + the linears
      (2 T P) + attention (4 A d heads, A the query-key pairs its causal blocks of 64 queries compute,
      about T^2 / 2); a step = that forward + the backward (2 x the linears, attention 10 A d heads: S
      recomputed, then dV, dP, dQ, dK) + the chain rule (2 P h)
      (the last layer's W_eff is not formed again) and, in double, the Cayley step of R1
      ((5 iterations + 5) x 2 h^3). Printed: times, step / forward, the counted GFLOP/s and their
      fraction of the measured SGEMM peak.
   3. stories260K (../shared, skipped when absent): calibrate's defaults (100 steps of 8 windows of
      256 tokens from tinystories_calib.txt, A4 asymmetric, clip 0.9, online hooks): the whole run.

   usage: bench_train [-t THREADS] [--hidden H] [--inter I] [--tokens T] [--no-7b] [--no-stories]
   (defaults: every core, 4096, 11008, 2048). Memory at the default shape: about 4 GB (the layer's
   frozen, effective and gradient weights, 0.8 GB each, the store's copy, the tape and the R1
   optimizer's 5 x 4096^2 doubles). */
#include "quarot.h"
#include "bench_util.h"
#include "support/qx_threads.h"
#include "support/qx_store.h"
#include "model/qx_model.h"
#include "model/qx_synth.h"
#include "eval/qx_calib.h"
#include "formats/qx_load.h"
#include "tokenizer/qx_tok_load.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double gemm_rate(int64_t m, int64_t n, int64_t k, int dbl, const quarot_env* env) {
    void *a = malloc((size_t)(m * k) * 8), *b = malloc((size_t)(k * n) * 8), *c = malloc((size_t)(m * n) * 8);
    double t0, best = 1e30;
    int rep;
    int64_t i;
    for (i = 0; i < m * k; ++i) dbl ? (((double*)a)[i] = 0.001 * (double)(i % 97)) : (((float*)a)[i] = 0.001f * (float)(i % 97));
    for (i = 0; i < k * n; ++i) dbl ? (((double*)b)[i] = 0.001 * (double)(i % 89)) : (((float*)b)[i] = 0.001f * (float)(i % 89));
    for (rep = 0; rep < 3; ++rep) {
        t0 = bench_now_s();
        if (dbl) quarot_dgemm(0, 0, m, n, k, 1.0, (double*)a, k, (double*)b, n, 0.0, (double*)c, n, env);
        else quarot_sgemm(0, 0, m, n, k, 1.0f, (float*)a, k, (float*)b, n, 0.0f, (float*)c, n, env);
        t0 = bench_now_s() - t0;
        if (t0 < best) best = t0;
    }
    free(a); free(b); free(c);
    return 2.0 * (double)m * (double)n * (double)k / best / 1e9;
}

/* The query-key pairs the trainer's attention computes: queries in blocks of 64, each block against
   the keys up to its last query. */
static double attn_pairs(int64_t T) {
    double a = 0.0;
    int64_t t0;
    for (t0 = 0; t0 < T; t0 += 64) {
        int64_t t1 = t0 + 64 < T ? t0 + 64 : T;
        a += (double)(t1 - t0) * (double)t1;
    }
    return a;
}

static void bench_layer(int64_t h, int64_t inter, int64_t T, const quarot_env* env, double speak) {
    qx_store s;
    qx_synth_desc sd;
    qx_err e;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    quarot_train_step_info in;
    int32_t* tok;
    int64_t i, nh = h / 128 > 0 ? h / 128 : 1, hd = h / nh, P;
    double t0, tf, ts, loss, ff, fs, dflops;
    memset(&sd, 0, sizeof sd);
    sd.arch = "llama";
    sd.hidden = h;
    sd.intermediate = inter;
    sd.n_layers = 1;
    sd.n_heads = nh;
    sd.n_kv_heads = nh;
    sd.head_dim = hd;
    sd.vocab = 256;
    sd.max_seq = T;
    sd.n_outliers = -1;
    t0 = bench_now_s();
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { printf("synth: %s\n", e.msg); return; }
    printf("layer: hidden %lld, intermediate %lld, %lld heads of %lld, %lld tokens (synthetic model built in %.1f s)\n", (long long)h,
           (long long)inter, (long long)nh, (long long)hd, (long long)T, bench_now_s() - t0);
    tok = (int32_t*)malloc((size_t)T * sizeof(int32_t));
    for (i = 0; i < T; ++i) tok[i] = (int32_t)((i * 37 + 11) % 256);
    qx_model_bind(&m, &b, &s);
    m.env = *env;
    memset(&td, 0, sizeof td);
    td.online = 1;
    td.act.a_bits = 4;
    td.act.a_asym = 1;
    td.steps = 1;
    t0 = bench_now_s();
    if (quarot_trainer_init(&t, &m, &td) != QUAROT_OK) { printf("trainer: %s\n", t.error); qx_store_free(&s); free(tok); return; }
    printf("  trainer init (reads and checks the layer, builds QuaRot's R1 / R2): %.2f s\n", bench_now_s() - t0);
    t0 = bench_now_s();
    if (quarot_trainer_loss(&t, tok, 1, T, 0, &loss) != QUAROT_OK) printf("  loss: %s\n", t.error);
    tf = bench_now_s() - t0;
    t0 = bench_now_s();
    if (quarot_trainer_step(&t, tok, 1, T, 1, 1, &in) != QUAROT_OK) printf("  step: %s\n", t.error);
    ts = bench_now_s() - t0;
    P = 4 * h * h + 3 * h * inter;   /* q, k, v, o (MHA) and gate, up, down */
    ff = 2.0 * (double)P * (double)h + 2.0 * (double)T * (double)P + 4.0 * attn_pairs(T) * (double)hd * (double)nh;
    fs = ff + 4.0 * (double)T * (double)P + 10.0 * attn_pairs(T) * (double)hd * (double)nh + 2.0 * (double)P * (double)h;
    dflops = 10.0 * 2.0 * (double)h * (double)h * (double)h;
    printf("  forward pass   %8.2f s  %8.1f GFLOP  %7.1f GFLOP/s  %5.1f%% of the SGEMM peak\n", tf, ff / 1e9, ff / tf / 1e9,
           100.0 * ff / tf / 1e9 / speak);
    printf("  optimizer step %8.2f s  %8.1f GFLOP (+%.1f in double)  %7.1f GFLOP/s  %5.1f%% of the SGEMM peak (counting the double work as float)\n",
           ts, fs / 1e9, dflops / 1e9, (fs + dflops) / ts / 1e9, 100.0 * (fs + dflops) / ts / 1e9 / speak);
    printf("  step / forward %.2f (the counted work: %.2f); loss %.4f, orthogonality after the step %.1e\n", ts / tf, (fs + dflops) / ff,
           in.loss, in.orth_error);
    quarot_trainer_free(&t);
    qx_store_free(&s);
    free(tok);
}

static void on_step(void* u, const quarot_train_step_info* in) {
    (void)u;
    if (in->step == 1 || in->step % 25 == 0) printf("    step %3d: batch loss %.4f\n", in->step, in->loss);
}

static void bench_stories(const quarot_env* env) {
    const char* root = getenv("QUAROT_SHARED");
    char mp[1024], cp[1024];
    qx_store model;
    qx_tokenizer tok;
    qx_calib_text ct;
    qx_windows w;
    qx_err e;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    int32_t* toks;
    int64_t i, n = 0;
    double t0;
    if (!root || !root[0]) root = "../shared";
    snprintf(mp, sizeof mp, "%s/models/stories260K/stories260K.bin", root);
    snprintf(cp, sizeof cp, "%s/data/tinystories_calib.txt", root);
    if (qx_load_model(mp, NULL, &model, &e) != QUAROT_OK) { printf("stories260K: skipped (%s)\n", e.msg); return; }
    if (qx_tokenizer_for_model(&tok, mp, NULL, model.config.vocab, NULL, 0, &e) != QUAROT_OK || qx_calib_text_load(cp, &ct, &e) != QUAROT_OK ||
        qx_calib_windows(&ct, &tok, QX_WINDOWING_STREAM, 256, 128, &w, &e) != QUAROT_OK) {
        printf("stories260K: skipped (%s)\n", e.msg);
        qx_store_free(&model);
        return;
    }
    toks = (int32_t*)malloc((size_t)(w.n * 256) * sizeof(int32_t));
    for (i = 0; i < w.n; ++i)
        if (w.offset[i + 1] - w.offset[i] == 256) memcpy(toks + 256 * n++, w.tokens + w.offset[i], 256 * sizeof(int32_t));
    qx_model_bind(&m, &b, &model);
    m.env = *env;
    memset(&td, 0, sizeof td);
    td.online = 1;
    td.act.a_bits = 4;
    td.act.a_asym = 1;
    td.act.a_clip = 0.9f;
    td.batch = 8;
    td.progress = on_step;
    printf("stories260K: 100 steps of 8 windows of 256 tokens from %lld windows (calibrate --method spinquant's defaults, A4 asym, clip 0.9)\n",
           (long long)n);
    t0 = bench_now_s();
    if (quarot_trainer_init(&t, &m, &td) != QUAROT_OK || quarot_trainer_run(&t, toks, n, 256) != QUAROT_OK) printf("  %s\n", t.error);
    printf("  whole learning time %.2f s (%.3f s a step)\n", bench_now_s() - t0, (bench_now_s() - t0) / 100.0);
    quarot_trainer_free(&t);
    free(toks);
    qx_windows_free(&w);
    qx_calib_text_free(&ct);
    qx_tokenizer_free(&tok);
    qx_store_free(&model);
}

int main(int argc, char** argv) {
    int threads = qx_cpu_count(), i, do7 = 1, dos = 1;
    int64_t h = 4096, inter = 11008, T = 2048;
    qx_pool* pool;
    quarot_env env;
    double sp, dp;
    for (i = 1; i < argc; ++i) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--hidden") && i + 1 < argc) h = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--inter") && i + 1 < argc) inter = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--tokens") && i + 1 < argc) T = atoll(argv[++i]);
        else if (!strcmp(argv[i], "--no-7b")) do7 = 0;
        else if (!strcmp(argv[i], "--no-stories")) dos = 0;
        else { fprintf(stderr, "usage: bench_train [-t THREADS] [--hidden H] [--inter I] [--tokens T] [--no-7b] [--no-stories]\n"); return 2; }
    }
    pool = qx_pool_create(threads);
    qx_pool_env(pool, &env);
    printf("bench_train: %d thread%s, %s\n", qx_pool_threads(pool), qx_pool_threads(pool) > 1 ? "s" : "", quarot_simd_name());
    sp = gemm_rate(T, inter, h, 0, &env);
    dp = gemm_rate(h, h, h, 1, &env);
    printf("peak: SGEMM %lld x %lld x %lld %.1f GFLOP/s, DGEMM %lld^3 %.1f GFLOP/s\n", (long long)T, (long long)inter, (long long)h, sp,
           (long long)h, dp);
    if (do7) bench_layer(h, inter, T, &env, sp);
    if (dos) bench_stories(&env);
    qx_pool_destroy(pool);
    return 0;
}
