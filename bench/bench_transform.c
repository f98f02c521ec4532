/* bench_transform - nanoseconds per row of the normalized Hadamard transform x <- x*H/sqrt(n).

   For each n (powers of two 64 .. 32768 and the LLM sizes 11008 = 172*2^6, 14336 = 28*2^9,
   18944 = 148*2^7) it times quarot_hadamard_apply_f32 with every compiled ISA (ref = the scalar
   specification), beside two baselines written here:
     textbook  the usual in-place triple-loop butterfly (for n = K*2^m: on each 2^m sub-row, then the
               plain K x K mixing loop over the +-1 bytes of H_K), then the 1/sqrt(n) multiply;
     dense     y = x * (H/sqrt(n)) as a matrix-vector product ("-" when H would exceed 256 MiB).
   The last columns are textbook / ours and dense / ours, ours = the default (best) ISA. Rows are
   batched (about 1 MiB of data per call) and each time is the best of several repetitions. */
#include "quarot.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench/bench_util.h"


/* The textbook FWHT of one row of length n (power of two), unnormalized. */

typedef struct bench_case {
    const quarot_hadamard_plan* plan;
    float* x;           /* [rows][n] */
    float* tmp;         /* [n] */
    float* dense;       /* [n][n] normalized, or NULL */
    void* work;
    size_t work_size;
    int64_t n, rows;
} bench_case;

/* method: 0..QUAROT_ISA_COUNT_-1 = apply with that ISA, 100 = textbook, 101 = dense. */
static void run_method(const bench_case* c, int method) {
    const float s = (float)(1.0 / sqrt((double)c->n));
    int64_t r, i, j, k;
    if (method < 100) {
        quarot_hadamard_apply_desc d;
        memset(&d, 0, sizeof d);
        d.isa = (quarot_isa)method;
        if (quarot_hadamard_apply_f32(c->plan, &d, c->x, c->rows, c->n, c->work, c->work_size) != QUAROT_OK) {
            fprintf(stderr, "apply failed\n");
            exit(1);
        }
        return;
    }
    for (r = 0; r < c->rows; ++r) {
        float* x = c->x + r * c->n;
        if (method == 100) {
            const int64_t K = c->plan->K, M = c->n / K;
            for (k = 0; k < K; ++k) bench_textbook_fwht(x + k * M, M);
            if (K > 1) {   /* y[i][:] = sum_k H[k][i] * z[k][:], rows streamed in order */
                const int8_t* h = c->plan->had_k;
                memcpy(c->tmp, x, sizeof(float) * (size_t)c->n);
                memset(x, 0, sizeof(float) * (size_t)c->n);
                for (i = 0; i < K; ++i)
                    for (k = 0; k < K; ++k) {
                        const float hk = (float)h[k * K + i];
                        for (j = 0; j < M; ++j) x[i * M + j] += hk * c->tmp[k * M + j];
                    }
            }
            for (i = 0; i < c->n; ++i) x[i] *= s;
        } else {   /* y = x * D: y += x[i] * D[i][:], then copy back */
            memset(c->tmp, 0, sizeof(float) * (size_t)c->n);
            for (i = 0; i < c->n; ++i) {
                const float xi = x[i];
                const float* row = c->dense + i * c->n;
                for (j = 0; j < c->n; ++j) c->tmp[j] += xi * row[j];
            }
            memcpy(x, c->tmp, sizeof(float) * (size_t)c->n);
        }
    }
}

/* Best time per row over repetitions lasting at least ~budget seconds (at least 3 repetitions). */
static double time_method(const bench_case* c, int method, double budget) {
    double best = 1e30, spent = 0.0;
    int rep = 0;
    run_method(c, method);   /* warm-up */
    while (rep < 3 || (spent < budget && rep < 1000)) {
        const double t0 = bench_now_s();
        double dt;
        run_method(c, method);
        dt = bench_now_s() - t0;
        spent += dt;
        if (dt < best) best = dt;
        ++rep;
    }
    return best / (double)c->rows * 1e9;
}

int main(void) {
    static const int64_t sizes[] = {64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 11008, 14336, 18944};
    static const quarot_isa isas[] = {QUAROT_ISA_REF, QUAROT_ISA_SSE2, QUAROT_ISA_AVX2, QUAROT_ISA_AVX512, QUAROT_ISA_NEON};
    const int n_sizes = (int)(sizeof sizes / sizeof sizes[0]);
    const double t_start = bench_now_s();
    int si, k;
    printf("quarot.h %s, compiled ISAs: %s (default %s)\n", quarot_version_string(), quarot_simd_name(),
           quarot_isa_name(quarot_isa_best()));
    printf("ns per row of x <- x*H/sqrt(n); textbook = scalar triple-loop butterfly (+ plain K x K mixing),\n"
           "dense = matrix-vector product with H/sqrt(n); ratios are baseline / ours (%s)\n\n",
           quarot_isa_name(quarot_isa_best()));
    printf("%6s %-16s", "n", "H_K x 2^m");
    for (k = 0; k < 5; ++k) if (quarot_isa_compiled(isas[k])) printf(" %10s", quarot_isa_name(isas[k]));
    printf(" %10s %12s %9s %9s\n", "textbook", "dense", "text/ours", "dense/ours");
    for (si = 0; si < n_sizes; ++si) {
        const int64_t n = sizes[si];
        quarot_hadamard_plan plan;
        bench_case c;
        double t_ours = 0.0, t_text, t_dense = -1.0;
        char label[32];
        int64_t i;
        if (quarot_hadamard_plan_init(&plan, n, NULL) != QUAROT_OK) {
            printf("%6lld  (no Hadamard matrix)\n", (long long)n);
            continue;
        }
        memset(&c, 0, sizeof c);
        c.plan = &plan;
        c.n = n;
        c.rows = n >= 262144 ? 1 : 262144 / n;
        c.x = (float*)malloc(sizeof(float) * (size_t)(c.rows * n));
        c.tmp = (float*)malloc(sizeof(float) * (size_t)n);
        c.work_size = quarot_hadamard_workspace_size(&plan);
        c.work = c.work_size ? malloc(c.work_size) : NULL;
        if (!c.x || !c.tmp || (c.work_size && !c.work)) { fprintf(stderr, "out of memory\n"); return 1; }
        srand(1);
        for (i = 0; i < c.rows * n; ++i) c.x[i] = (float)rand() / (float)RAND_MAX - 0.5f;
        if ((double)n * (double)n * sizeof(float) <= 256.0 * 1024 * 1024) {
            c.dense = (float*)malloc(sizeof(float) * (size_t)(n * n));
            if (c.dense && quarot_hadamard_build_f32(n, 1, c.dense, NULL) != QUAROT_OK) { free(c.dense); c.dense = NULL; }
        }
        snprintf(label, sizeof label, "%lld x 2^%d", (long long)plan.K, plan.m);
        printf("%6lld %-16s", (long long)n, label);
        fflush(stdout);
        for (k = 0; k < 5; ++k) {
            double t;
            if (!quarot_isa_compiled(isas[k])) continue;
            t = time_method(&c, (int)isas[k], isas[k] == QUAROT_ISA_REF ? 0.05 : 0.1);
            if (isas[k] == quarot_isa_best()) t_ours = t;
            printf(" %10.1f", t);
            fflush(stdout);
        }
        t_text = time_method(&c, 100, 0.1);
        if (c.dense) {
            const int64_t keep = c.rows;
            c.rows = 1;   /* the matrix streams from memory: one row at a time is the honest number */
            t_dense = time_method(&c, 101, 0.2);
            c.rows = keep;
        }
        printf(" %10.1f", t_text);
        if (t_dense >= 0.0) printf(" %12.1f", t_dense);
        else printf(" %12s", "-");
        printf(" %9.1f", t_text / t_ours);
        if (t_dense >= 0.0) printf(" %9.1f\n", t_dense / t_ours);
        else printf(" %9s\n", "-");
        free(c.x); free(c.tmp); free(c.work); free(c.dense);
        quarot_hadamard_plan_free(&plan);
    }
    printf("\n(%.1f s)\n", bench_now_s() - t_start);
    return 0;
}
