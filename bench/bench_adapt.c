/* bench_adapt - Adapt Rotation stage 1 (quarot_adapt_stage1) on synthetic activations.

   For each hidden size (default 1024, 2048, 4096) it builds 2048 activation rows with planted
   outliers (16 correlated factors plus noise, 4 channels 20..50x larger), captures them as one
   up_proj, and runs stage 1 with the product's defaults (int4, 20 steps, patience 5, full-size R)
   with 1 and with 2 threads (through qx_threads' pool, the parallel hook the quarot tool uses: its
   workers start once; the library never creates threads). It prints the wall time, the CPU time of
   all threads, the time per step, the Newton-Schulz iterations per step, the flops the run did (counted by the library: quarot_adapt_context.flops) and the loss trajectory.

   Beside it, at the first size only: stage 1 without the spectral deflation (desc.no_deflation), and
   one regularized polar factor of the first step's C with the library's plain Newton-Schulz
   (quarot_polar_newton_schulz_f32: Frobenius scale, no acceleration), for the ratios of iterations
   and time.

   usage: bench_adapt [hidden ...] [-t THREADS] [-n ROWS] [-s STEPS] [--no-compare]
                      [--polar newton|newton-schulz] [--no-deflation]
   (-t runs only that thread count; --no-compare skips the no-deflation and plain Newton-Schulz runs;
   --polar picks desc.polar_method (default: the library's, scaled Newton from b = 512, Newton-Schulz
   below); --no-deflation sets
   desc.no_deflation for every run; the machine should be quiet: the times are wall-clock). The
   "NS it" column is the polar iterations per step (Newton steps plus Newton-Schulz updates); the
   losses are printed to 9 digits with the best loss and the iterations of every step. */
#include "quarot.h"
#include "support/qx_threads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"


/* CPU seconds of the whole process (all threads): on a shared machine, cpu/wall shows how much of
   the machine the run actually had. */

/* ---- data ---- */
static float* make_acts(int64_t n, int64_t h, uint64_t seed) {
    quarot_rng rng;
    float* x = (float*)malloc((size_t)(n * h) * sizeof(float));
    float* w = (float*)malloc((size_t)(16 * h) * sizeof(float));
    int64_t t, j, k;
    quarot_rng_seed(&rng, seed);
    for (k = 0; k < 16 * h; ++k) w[k] = (float)quarot_rng_normal(&rng);
    for (t = 0; t < n; ++t) {
        double z[16];
        for (k = 0; k < 16; ++k) z[k] = quarot_rng_normal(&rng) * (k < 4 ? 2.0 : 0.5);
        for (j = 0; j < h; ++j) {
            double s = 0;
            for (k = 0; k < 16; ++k) s += z[k] * (double)w[k * h + j];
            x[t * h + j] = (float)(0.3 * s + quarot_rng_normal(&rng));
        }
        for (k = 0; k < 4; ++k) x[t * h + (k * 37 + 5) % h] *= (float)(20 + 10 * k);
    }
    free(w);
    return x;
}

typedef struct run_log {
    int steps;
    double t_start, t_step[64];
    int iters[64];
} run_log;

static void on_progress(void* user, int step, double loss, double best, int iters) {
    run_log* l = (run_log*)user;
    (void)loss;
    (void)best;
    if (step == 0) { l->t_start = bench_now_s(); return; }
    if (step <= 64) { l->t_step[step - 1] = bench_now_s(); l->iters[step - 1] = iters; l->steps = step; }
}

/* The library's plain Newton-Schulz on the first step's regularized C, for comparison. */
static void compare_plain_ns(const float* x, int64_t n, int64_t h, const quarot_env* env) {
    quarot_rotation had;
    quarot_rotation_desc hd;
    quarot_quant_desc qd;
    quarot_polar_desc pd;
    quarot_polar_info info;
    float *a = (float*)malloc((size_t)(n * h) * sizeof(float)), *b = (float*)malloc((size_t)(n * h) * sizeof(float));
    float *c = (float*)malloc((size_t)(h * h) * sizeof(float)), *u = (float*)malloc((size_t)(h * h) * sizeof(float));
    double fro = 0, t0;
    int64_t i;
    quarot_result r;
    memset(&hd, 0, sizeof hd);
    hd.n = h;
    hd.seed = 1;
    quarot_rotation_init(&had, &hd, env);
    memcpy(a, x, (size_t)(n * h) * sizeof(float));
    quarot_rotation_apply_f32(&had, a, n, h, 0, NULL, 0);
    memcpy(b, a, (size_t)(n * h) * sizeof(float));
    memset(&qd, 0, sizeof qd);
    quarot_fake_quant_f32(b, n, h, h, &qd);
    quarot_sgemm(1, 0, h, h, n, 1.0f, a, h, b, h, 0.0f, c, h, env);
    for (i = 0; i < h * h; ++i) fro += (double)c[i] * (double)c[i];
    fro = sqrt(fro);
    for (i = 0; i < h; ++i) c[i * h + i] += (float)(1e-5 * fro);   /* lambda ~ 1e-5 of the scale, as stage 1 */
    memset(&pd, 0, sizeof pd);
    pd.max_iter = 200;
    pd.tol = 1e-5;
    t0 = bench_now_s();
    r = quarot_polar_newton_schulz_f32(h, c, h, u, h, &pd, &info, env);
    printf("  plain Newton-Schulz (linalg, Frobenius scale) on the same kind of C at %lld: %d iterations, %.2f s, "
           "residual %.1e (%s)\n", (long long)h, info.iterations, bench_now_s() - t0, info.residual, quarot_result_string(r));
    quarot_rotation_free(&had);
    free(a); free(b); free(c); free(u);
}

/* FNV-1a of R_best's bytes: two builds or thread counts gave the same rotation iff these agree */
static uint64_t fnv1a(const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;
    for (i = 0; i < n; ++i) { h ^= b[i]; h *= 0x100000001b3ULL; }
    return h;
}

int main(int argc, char** argv) {
    int64_t sizes[16], n_sizes = 0, rows = 2048, k;
    int thread_list[2] = {1, 2}, n_thread_list = 2, steps = 20, ti, i, compare = 1, method = 0, no_defl = 0;
    for (i = 1; i < argc; ++i) {
        if (strcmp(argv[i], "-t") == 0 && i + 1 < argc) { thread_list[0] = atoi(argv[++i]); n_thread_list = 1; }
        else if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) rows = atoll(argv[++i]);
        else if (strcmp(argv[i], "-s") == 0 && i + 1 < argc) steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--no-compare") == 0) compare = 0;
        else if (strcmp(argv[i], "--no-deflation") == 0) no_defl = 1;
        else if (strcmp(argv[i], "--polar") == 0 && i + 1 < argc) {
            ++i;
            for (method = 1; quarot_adapt_polar_method_name(method) && strcmp(quarot_adapt_polar_method_name(method), argv[i]) != 0; ++method) {}
            if (!quarot_adapt_polar_method_name(method)) { fprintf(stderr, "bench_adapt: --polar newton|newton-schulz\n"); return 2; }
        }
        else if (n_sizes < 16) sizes[n_sizes++] = atoll(argv[i]);
    }
    if (n_sizes == 0) { sizes[0] = 1024; sizes[1] = 2048; sizes[2] = 4096; n_sizes = 3; }
    printf("bench_adapt: stage 1, %lld rows, %d steps, int4, polar factor: %s, SIMD %s\n", (long long)rows, steps,
           quarot_adapt_polar_method_name(method), quarot_simd_name());
    printf("  %6s %7s %9s %9s %9s %7s %9s %8s  %s\n", "hidden", "threads", "wall s", "cpu s", "s/step", "NS it", "GFLOP",
           "GFLOP/s", "loss: start -> best (step)");
    for (k = 0; k < n_sizes; ++k) {
        int64_t h = sizes[k];
        float* x = make_acts(rows, h, 1234);
        for (ti = 0; ti < n_thread_list + (k == 0 && compare); ++ti) {
            int threads = thread_list[ti < n_thread_list ? ti : n_thread_list - 1], plain = ti == n_thread_list;
            quarot_env env;
            quarot_adapt_desc d;
            quarot_adapt_capture cap;
            quarot_adapt_context ctx;
            run_log log;
            double t0, t1, c0, c1, flops = 0, its = 0;
            quarot_result r;
            qx_pool* pool = threads > 1 ? qx_pool_create(threads) : NULL;
            qx_pool_env(pool, &env);
            memset(&d, 0, sizeof d);
            memset(&log, 0, sizeof log);
            d.steps = steps;
            d.seed = 1;
            d.no_deflation = plain || no_defl;
            d.polar_method = method;
            d.progress = on_progress;
            d.user_data = &log;
            quarot_adapt_context_init(&ctx, &env);
            quarot_adapt_capture_init(&cap, h, &d, &env);
            quarot_adapt_capture_add(&cap, "model.layers.0.mlp.up_proj.weight", x, rows, h);
            t0 = bench_now_s();
            c0 = bench_cpu_s();
            r = quarot_adapt_stage1(&cap, &d, &ctx, &env);
            t1 = bench_now_s();
            c1 = bench_cpu_s();
            if (r != QUAROT_OK) { printf("  stage 1 failed: %s: %s\n", quarot_result_string(r), ctx.error); return 1; }
            /* the library counts its GEMMs: per step XH^T B and A = XH*R (2*M*b^2 each), per
               Newton step one inverse (2 b^3), per Newton-Schulz iteration the upper halves of X^T X
               and G^2 (1.06 b^3 each) and X*T (2 b^3), except that the last, cubic, step needs no
               G^2 and no X^T X after it */
            flops = ctx.flops;
            for (i = 0; i < ctx.steps_run; ++i) its += ctx.polar_iterations[i];
            printf("  %6lld %7d %9.2f %9.2f %9.2f %7.1f %9.0f %8.1f  %.4e -> %.4e (%d of %d, -%.1f%%)%s\n", (long long)h, threads, t1 - t0, c1 - c0,
                   ctx.steps_run ? (log.t_step[ctx.steps_run - 1] - log.t_start) / ctx.steps_run : 0.0,
                   ctx.steps_run ? its / ctx.steps_run : 0.0, flops * 1e-9, flops * 1e-9 / (t1 - t0), ctx.start_loss,
                   ctx.best_loss, ctx.best_step, ctx.steps_run, 100.0 * (1.0 - ctx.best_loss / ctx.start_loss),
                   plain ? "  [no deflation]" : "");
            if (ti == n_thread_list - 1) {
                printf("         losses:");
                for (i = 0; i < ctx.steps_run; ++i) printf(" %.8e", ctx.losses[i]);
                printf("\n         best %.8e (step %d); iterations:", ctx.best_loss, ctx.best_step);
                for (i = 0; i < ctx.steps_run; ++i) printf(" %d", ctx.polar_iterations[i]);
                printf("\n         R_best fnv1a %016llx\n", (unsigned long long)fnv1a(ctx.matrix, ctx.matrix ? (size_t)(ctx.block * ctx.block) * sizeof(double) : 0));
            }
            fflush(stdout);
            if (plain) compare_plain_ns(x, rows, h, &env);
            quarot_adapt_capture_free(&cap);
            quarot_adapt_context_free(&ctx);
            qx_pool_destroy(pool);
        }
        free(x);
    }
    return 0;
}
