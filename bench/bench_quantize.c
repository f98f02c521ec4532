/* bench_quantize - GPTQ and RTN time for one decoder layer of a given shape (default Llama-2-7B:
   hidden 4096, intermediate 11008; q, k, v, o [4096][4096], gate, up [11008][4096], down
   [4096][11008]), 4-bit symmetric per output channel, the >>quantize defaults (percdamp 0.01,
   block 128).

   Hessians come from random activations (normal, a few channels 10x larger): one [hidden][hidden]
   H shared by q/k/v/o/gate/up (GPTQ factors it for every linear, as QuaRot's gptq_fwrd does) and one
   [intermediate][intermediate] for down_proj. QuaRot's calibration is 128 sequences of 2048 tokens
   (262144 rows); accumulating that many rows costs rows*n^2/2 multiply-adds per Hessian, so this
   accumulates -r ROWS (default 2048) and reports the time per row, from which the full calibration's
   accumulation time is extrapolated (it is linear in the rows). GPTQ itself does not depend on the
   row count (H is damped to be positive definite).

   Printed per linear: GPTQ seconds (quarot_gptq_f32: Cholesky + inverse + column updates), wall
   clock and process CPU time (on a shared machine the CPU time is the one to read), and RTN
   seconds (quarot_fake_quant_f32; with -c also with QuaRot's clip search, 80 candidate scales scored
   by sum |err|^2.4, a pow() per element and candidate: slow), then the layer totals.

   usage: bench_quantize [-H hidden] [-I intermediate] [-r rows] [-t threads] [-c]
   (wall-clock times: run on a quiet machine). */
#include "quarot.h"
#include "support/qx_threads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"



static unsigned long long lcg = 88172645463325252ULL;
static double unif(void) {
    lcg = lcg * 6364136223846793005ULL + 1442695040888963407ULL;
    return (double)(lcg >> 11) * (1.0 / 9007199254740992.0);
}
static float gauss(void) {
    double u = unif(), v = unif();
    if (u < 1e-300) u = 1e-300;
    return (float)(sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v));
}

/* H [n][n] from `rows` random rows (built and accumulated 256 rows at a time). Returns seconds. */
static double hessian(double* h, int64_t n, int64_t rows, const quarot_env* env) {
    float* x = (float*)malloc((size_t)(256 * n) * sizeof(float));
    int64_t r, i, k;
    double t0, t = 0.0;
    (void)env;
    memset(h, 0, (size_t)(n * n) * sizeof(double));
    for (r = 0; r < rows; r += 256) {
        int64_t nr = rows - r < 256 ? rows - r : 256;
        for (k = 0; k < nr; ++k)
            for (i = 0; i < n; ++i) x[k * n + i] = gauss() * (i % 97 == 0 ? 10.0f : 1.0f);
        t0 = bench_now_s();
        if (quarot_hessian_accumulate_f64(h, n, x, nr, n) != QUAROT_OK) { fprintf(stderr, "hessian failed\n"); exit(1); }
        t += bench_now_s() - t0;
    }
    free(x);
    return t;
}

int main(int argc, char** argv) {
    int64_t hidden = 4096, inter = 11008, rows = 2048, threads = 1;
    int clip = 0;
    const char* names[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
    int64_t outs[7], ins[7], i, k, maxw;
    double *h1, *h2, th1, th2, gsum = 0, rsum = 0, csum = 0, rcsum = 0, c0;
    float *w, *w0;
    qx_pool* pool;
    quarot_env env;
    for (i = 1; i < argc; ++i) {
        if (i + 1 < argc && strcmp(argv[i], "-H") == 0) hidden = atoll(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "-I") == 0) inter = atoll(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "-r") == 0) rows = atoll(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "-t") == 0) threads = atoll(argv[++i]);
        else if (strcmp(argv[i], "-c") == 0) clip = 1;
        else { fprintf(stderr, "usage: bench_quantize [-H hidden] [-I intermediate] [-r rows] [-t threads] [-c]\n"); return 1; }
    }
    if (hidden <= 0 || inter <= 0 || rows <= 0 || threads <= 0) { fprintf(stderr, "bad sizes\n"); return 1; }
    pool = threads > 1 ? qx_pool_create((int)threads) : NULL;
    qx_pool_env(pool, &env);
    for (k = 0; k < 7; ++k) {
        outs[k] = k < 4 ? hidden : (k < 6 ? inter : hidden);
        ins[k] = k == 6 ? inter : hidden;
    }
    maxw = hidden * inter > hidden * hidden ? hidden * inter : hidden * hidden;
    h1 = (double*)malloc((size_t)(hidden * hidden) * sizeof(double));
    h2 = (double*)malloc((size_t)(inter * inter) * sizeof(double));
    w = (float*)malloc((size_t)maxw * sizeof(float));
    w0 = (float*)malloc((size_t)maxw * sizeof(float));
    if (!h1 || !h2 || !w || !w0) { fprintf(stderr, "out of memory\n"); return 1; }
    printf("bench_quantize: layer hidden %lld, intermediate %lld; %s; %lld thread(s)\n", (long long)hidden, (long long)inter,
           quarot_simd_name(), (long long)threads);
    th1 = hessian(h1, hidden, rows, &env);
    th2 = hessian(h2, inter, rows, &env);
    printf("Hessians from %lld random rows: [%lld]^2 %.2f s, [%lld]^2 %.2f s (%.3f ms + %.3f ms per row;\n"
           "  QuaRot's 128 x 2048 = 262144 rows would take about %.0f s + %.0f s, linear in rows; 4 accumulations per layer: %.0f s)\n",
           (long long)rows, (long long)hidden, th1, (long long)inter, th2, 1e3 * th1 / (double)rows, 1e3 * th2 / (double)rows,
           th1 / (double)rows * 262144.0, th2 / (double)rows * 262144.0, (3.0 * th1 + th2) / (double)rows * 262144.0);
    printf("%-10s %12s %10s %10s %10s %10s %14s\n", "linear", "[out][in]", "GPTQ s", "GPTQ cpu", "RTN s", "RTN cpu",
           "RTN+clip s");
    for (k = 0; k < 7; ++k) {
        int64_t n = outs[k] * ins[k], j;
        quarot_gptq_desc gd;
        quarot_quant_desc qd;
        quarot_gptq_info gi;
        double t0, tg, tr, tc, cg, cr, c1;
        char shape[32];
        for (j = 0; j < n; ++j) w0[j] = gauss() * 0.02f;
        memcpy(w, w0, (size_t)n * sizeof(float));
        memset(&gd, 0, sizeof gd);
        c0 = bench_cpu_s();
        t0 = bench_now_s();
        if (quarot_gptq_f32(w, outs[k], ins[k], ins[k], k == 6 ? h2 : h1, ins[k], &gd, NULL, NULL, NULL, &gi, &env) != QUAROT_OK) {
            fprintf(stderr, "gptq failed\n");
            return 1;
        }
        tg = bench_now_s() - t0;
        cg = bench_cpu_s() - c0;
        csum += cg;
        memcpy(w, w0, (size_t)n * sizeof(float));
        memset(&qd, 0, sizeof qd);
        c1 = bench_cpu_s();
        t0 = bench_now_s();
        quarot_fake_quant_f32(w, outs[k], ins[k], ins[k], &qd);
        tr = bench_now_s() - t0;
        cr = bench_cpu_s() - c1;
        rcsum += cr;
        tc = NAN;
        if (clip) {
            memcpy(w, w0, (size_t)n * sizeof(float));
            qd.clip_search = QUAROT_CLIP_SEARCH_LP;
            t0 = bench_now_s();
            quarot_fake_quant_f32(w, outs[k], ins[k], ins[k], &qd);
            tc = bench_now_s() - t0;
        }
        snprintf(shape, sizeof shape, "%lldx%lld", (long long)outs[k], (long long)ins[k]);
        printf("%-10s %12s %10.2f %10.2f %10.3f %10.3f %14.2f\n", names[k], shape, tg, cg, tr, cr, tc);
        fflush(stdout);
        gsum += tg;
        rsum += tr;
    }
    printf("layer: GPTQ %.1f s (CPU %.1f s), RTN %.2f s (CPU %.2f s); GPTQ / RTN = %.0fx (CPU %.0fx)\n", gsum, csum, rsum,
           rcsum, gsum / (rsum > 0 ? rsum : 1e-9), csum / (rcsum > 0 ? rcsum : 1e-9));
    free(h1);
    free(h2);
    free(w);
    free(w0);
    qx_pool_destroy(pool);
    return 0;
}
