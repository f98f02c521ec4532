/* Adapt Rotation (msModelSlim): activation capture, the stage-1 optimizer, the stage-1 context and
   its serialization, the ADAPT rotation kind and stage 2 through the processor.

   Independent truth used here:
   - the loss of R_best is recomputed in double with this file's own quantizer (round half to even,
     symmetric per row) from X, the dense Hadamard and R_best;
   - one optimizer step is checked to be the orthogonal Procrustes solution: U^T C must be symmetric
     positive semidefinite (C = A^T B recomputed here), and a slightly rotated U must fail that test;
   - the ADAPT rotation is compared with (dense Hadamard) x R computed by plain loops, and with R = I
     with the HADAMARD rotation bit for bit; stage 2 with R = I with plain QuaRot bit for bit;
   - stage 2 with a learned R keeps the FP32 logits of the original model (within 1e-4 of their scale)
     with the online hooks run by the reference forward pass;
   - kept rows of the capture are identified by the row index written into the data. */
#include "quarot.h"
#include "qt.h"
#include "fwd_util.h"
#include "model/qx_forward.h"
#include "model/qx_model.h"
#include "model/qx_online.h"
#include "model/qx_synth.h"
#include "support/qx_threads.h"

/* ---------- helpers ---------- */

/* Synthetic activations [n][h]: 0.3 * (16 correlated factors) + unit noise, and 4 outlier channels
   20, 30, 40, 50 times larger (as LLM activations after norm fusion). */
static float* make_acts(int64_t n, int64_t h, unsigned long long seed) {
    float* x = (float*)malloc((size_t)(n * h) * sizeof(float));
    double* w = (double*)malloc((size_t)(16 * h) * sizeof(double));
    int64_t t, j, k;
    qt_seed(seed);
    for (k = 0; k < 16 * h; ++k) w[k] = qt_normal();
    for (t = 0; t < n; ++t) {
        double z[16];
        for (k = 0; k < 16; ++k) z[k] = qt_normal() * (k < 4 ? 2.0 : 0.5);
        for (j = 0; j < h; ++j) {
            double s = 0;
            for (k = 0; k < 16; ++k) s += z[k] * w[k * h + j];
            x[t * h + j] = (float)(0.3 * s + qt_normal());
        }
        for (k = 0; k < 4; ++k) x[t * h + (k * 37 + 5) % h] *= (float)(20 + 10 * k);
    }
    free(w);
    return x;
}

/* Round half to even, independent of the library. */
static double rne(double v) {
    double f = floor(v), d = v - f;
    if (d > 0.5) return f + 1;
    if (d < 0.5) return f;
    return fmod(f, 2.0) == 0.0 ? f : f + 1;
}

/* Per-row symmetric fake quantization of a [rows][cols] double matrix into q (scale rounded to float,
   as ALGORITHMS.md section 4 and the library). */
static void ref_quant(const double* a, double* q, int64_t rows, int64_t cols, int bits) {
    double qmax = (double)((1 << (bits - 1)) - 1);
    int64_t r, j;
    for (r = 0; r < rows; ++r) {
        double m = 0, s;
        for (j = 0; j < cols; ++j) if (fabs(a[r * cols + j]) > m) m = fabs(a[r * cols + j]);
        s = (double)(float)(m / qmax);
        if (s == 0) s = 1;
        for (j = 0; j < cols; ++j) {
            double v = rne(a[r * cols + j] / s);
            if (v > qmax) v = qmax;
            if (v < -qmax - 1) v = -qmax - 1;
            q[r * cols + j] = v * s;
        }
    }
}

/* max |M^T M - I| for M [n][n], plain loops. */
static double orth_err(const double* m, int64_t n) {
    double worst = 0;
    int64_t i, j, k;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0;
            for (k = 0; k < n; ++k) s += m[k * n + i] * m[k * n + j];
            s -= i == j ? 1 : 0;
            if (fabs(s) > worst) worst = fabs(s);
        }
    return worst;
}

/* Dense matrix [n][n] of the random Hadamard QuaRot uses: HADAMARD rotation of size n, block hb. */
static double* dense_hadamard(int64_t n, int64_t hb, uint64_t seed) {
    quarot_rotation r;
    quarot_rotation_desc d;
    double* q = (double*)malloc((size_t)(n * n) * sizeof(double));
    memset(&d, 0, sizeof d);
    d.n = n;
    d.block_size = hb;
    d.seed = seed;
    d.fallback = QUAROT_FALLBACK_ERROR;
    if (quarot_rotation_init(&r, &d, NULL) != QUAROT_OK || quarot_rotation_to_dense_f64(&r, q) != QUAROT_OK) { free(q); q = NULL; }
    quarot_rotation_free(&r);
    return q;
}

/* Q = H * blockdiag(R, ..., R) for H [n][n] and R [b][b]. */
static double* times_blockdiag(const double* h, int64_t n, const double* r, int64_t b) {
    double* q = (double*)calloc((size_t)(n * n), sizeof(double));
    int64_t i, j, k;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            int64_t blk = j / b;
            double s = 0;
            for (k = blk * b; k < blk * b + b; ++k) s += h[i * n + k] * r[(k - blk * b) * b + (j - blk * b)];
            q[i * n + j] = s;
        }
    return q;
}

/* The loss L = ||A - Q(A)||_F / numel of X*Q cut into rows of b, in double. */
static double ref_loss(const float* x, int64_t rows, int64_t h, const double* q, int64_t b, int bits) {
    double* a = (double*)malloc((size_t)(rows * h) * sizeof(double));
    double* qa = (double*)malloc((size_t)(rows * h) * sizeof(double));
    double s = 0;
    int64_t t, i, j;
    for (t = 0; t < rows; ++t)
        for (j = 0; j < h; ++j) {
            double v = 0;
            for (i = 0; i < h; ++i) v += (double)x[t * h + i] * q[i * h + j];
            a[t * h + j] = v;
        }
    ref_quant(a, qa, rows * h / b, b, bits);
    for (i = 0; i < rows * h; ++i) s += (a[i] - qa[i]) * (a[i] - qa[i]);
    free(a);
    free(qa);
    return sqrt(s) / (double)(rows * h);
}

typedef struct trace {
    int n;
    int steps[64];
    double loss[64], best[64];
    int iters[64];
} trace;

static void on_progress(void* user, int step, double loss, double best, int iters) {
    trace* t = (trace*)user;
    if (t->n < 64) { t->steps[t->n] = step; t->loss[t->n] = loss; t->best[t->n] = best; t->iters[t->n] = iters; t->n++; }
}

/* Capture n rows of x [n][h] for one linear and run stage 1. */
static quarot_result run_stage1(const float* x, int64_t n, int64_t h, quarot_adapt_desc* d, quarot_adapt_context* ctx) {
    quarot_adapt_capture cap;
    quarot_result r = quarot_adapt_capture_init(&cap, h, d, NULL);
    if (r == QUAROT_OK) r = quarot_adapt_capture_add(&cap, "model.layers.0.mlp.up_proj.weight", x, n, h);
    if (r == QUAROT_OK) r = quarot_adapt_stage1(&cap, d, ctx, NULL);
    quarot_adapt_capture_free(&cap);
    return r;
}

/* ---------- stage 1 ---------- */

static void check_stage1_result(const char* what, const float* x, int64_t n, int64_t h, const quarot_adapt_context* ctx,
                                const trace* tr, int bits, double margin) {
    int k;
    double *hd, *q, lref, e;
    QT_CHECKF(ctx->matrix != NULL && ctx->steps_run >= 1, "%s: no result", what);
    if (!ctx->matrix) return;
    /* the kept loss never increases, and the reported losses are the context's */
    QT_CHECKF(tr->n == ctx->steps_run + 1 && tr->steps[0] == 0 && tr->loss[0] == ctx->start_loss, "%s: progress trace", what);
    for (k = 1; k < tr->n; ++k) {
        QT_CHECKF(tr->best[k] <= tr->best[k - 1], "%s: kept loss rose at step %d", what, k);
        QT_CHECKF(tr->loss[k] == ctx->losses[k - 1] && tr->iters[k] == ctx->polar_iterations[k - 1], "%s: step %d", what, k);
        QT_CHECKF(tr->best[k] == (tr->loss[k] < tr->best[k - 1] ? tr->loss[k] : tr->best[k - 1]), "%s: best at step %d", what, k);
    }
    QT_CHECKF(ctx->best_loss <= (1.0 - margin) * ctx->start_loss, "%s: best loss %.6g not %.0f%% below the Hadamard's %.6g",
              what, ctx->best_loss, 100 * margin, ctx->start_loss);
    /* R_best orthogonal as promised (max|R^T R - I| <= 1e-9, whether the last double step was checked or
       certified by its bound), and H*R_best */
    e = orth_err(ctx->matrix, ctx->block);
    QT_CHECKF(e <= 1e-9, "%s: R_best not orthogonal to 1e-9 (%.3g)", what, e);
    hd = dense_hadamard(h, ctx->hadamard_block, ctx->seed);
    QT_CHECK(hd != NULL);
    if (!hd) return;
    q = times_blockdiag(hd, h, ctx->matrix, ctx->block);
    e = orth_err(q, h);
    QT_CHECKF(e <= 1e-5, "%s: H*R_best not orthogonal (%.3g)", what, e);
    /* the recorded losses are the losses of X*H (start) and X*H*R_best (best), recomputed in double */
    lref = ref_loss(x, n, h, hd, ctx->block, bits);
    QT_CHECKF(fabs(lref - ctx->start_loss) <= 1e-3 * lref, "%s: start loss %.8g, recomputed %.8g", what, ctx->start_loss, lref);
    lref = ref_loss(x, n, h, q, ctx->block, bits);
    QT_CHECKF(fabs(lref - ctx->best_loss) <= 1e-3 * lref, "%s: best loss %.8g, recomputed %.8g", what, ctx->best_loss, lref);
    free(hd);
    free(q);
}

static void test_stage1_int4_full(void) {
    int64_t h = qt_quick() ? 64 : 128, n = qt_quick() ? 256 : 1024;
    float* x = make_acts(n, h, 11);
    quarot_adapt_desc d;
    quarot_adapt_context ctx;
    trace tr;
    int k;
    memset(&d, 0, sizeof d);
    memset(&tr, 0, sizeof tr);
    d.seed = 42;
    d.progress = on_progress;
    d.user_data = &tr;
    quarot_adapt_context_init(&ctx, NULL);
    QT_OK(run_stage1(x, n, h, &d, &ctx));
    QT_EQ_INT(ctx.block, h);
    QT_EQ_INT(ctx.hadamard_block, h);
    QT_EQ_INT(ctx.bits, 4);
    QT_EQ_INT(ctx.steps, 20);
    QT_EQ_INT(ctx.rows, n);
    check_stage1_result("int4", x, n, h, &ctx, &tr, 4, 0.10);
    printf("    int4 h=%lld rows=%lld: loss %.4e ->", (long long)h, (long long)n, ctx.start_loss);
    for (k = 0; k < ctx.steps_run; ++k) if (k % 4 == 3 || k == ctx.steps_run - 1) printf(" %.4e", ctx.losses[k]);
    printf(" (best %.1f%% lower, step %d; polar iterations %d..%d)\n", 100 * (1 - ctx.best_loss / ctx.start_loss),
           ctx.best_step, ctx.polar_iterations[0], ctx.polar_iterations[ctx.steps_run - 1]);
    quarot_adapt_context_free(&ctx);
    free(x);
}

static void test_stage1_int8_and_patterns(void) {
    /* int8, two linears matched by two patterns (rows stacked), a third linear ignored */
    int64_t h = 64, n = 300;
    float* x = make_acts(2 * n, h, 12);
    const char* pats[2] = {"up_proj", "gate_proj"};
    quarot_adapt_desc d;
    quarot_adapt_capture cap;
    quarot_adapt_context ctx;
    trace tr;
    float* xs;
    memset(&d, 0, sizeof d);
    memset(&tr, 0, sizeof tr);
    d.quant_dtype = "int8";
    d.layer_type = pats;
    d.n_layer_type = 2;
    d.seed = 7;
    d.steps = 12;
    d.progress = on_progress;
    d.user_data = &tr;
    quarot_adapt_context_init(&ctx, NULL);
    QT_OK(quarot_adapt_capture_init(&cap, h, &d, NULL));
    QT_CHECK(quarot_adapt_capture_matches(&cap, "model.layers.1.mlp.gate_proj.weight"));
    QT_CHECK(!quarot_adapt_capture_matches(&cap, "model.layers.1.mlp.down_proj.weight"));
    QT_OK(quarot_adapt_capture_add(&cap, "model.layers.0.mlp.gate_proj.weight", x, n, h));
    QT_OK(quarot_adapt_capture_add(&cap, "model.layers.0.mlp.down_proj.weight", x, n, h));
    QT_OK(quarot_adapt_capture_add(&cap, "model.layers.0.mlp.up_proj.weight", x + n * h, n, h));
    QT_EQ_INT(cap.n_linears, 2);
    QT_EQ_INT(cap.n_names, 3);
    QT_OK(quarot_adapt_stage1(&cap, &d, &ctx, NULL));
    QT_EQ_INT(ctx.bits, 8);
    QT_EQ_INT(ctx.rows, 2 * n);
    xs = x;   /* stacking order: gate (first seen), then up = rows 0..2n of x */
    check_stage1_result("int8", xs, 2 * n, h, &ctx, &tr, 8, 0.08);
    printf("    int8 h=%lld rows=%lld: loss %.4e -> %.4e (%.1f%% lower, best step %d of %d)\n", (long long)h, (long long)(2 * n),
           ctx.start_loss, ctx.best_loss, 100 * (1 - ctx.best_loss / ctx.start_loss), ctx.best_step, ctx.steps_run);
    quarot_adapt_capture_free(&cap);
    quarot_adapt_context_free(&ctx);
    free(x);
}

static void test_stage1_block(void) {
    int64_t h = 128, n = qt_quick() ? 128 : 512, b = 32, i, j;
    float* x = make_acts(n, h, 13);
    quarot_adapt_desc d;
    quarot_adapt_context ctx;
    quarot_rotation rot;
    trace tr;
    double* q = (double*)malloc((size_t)(h * h) * sizeof(double));
    int off_block_zero = 1;
    memset(&d, 0, sizeof d);
    memset(&tr, 0, sizeof tr);
    d.block_size = b;
    d.seed = 3;
    d.progress = on_progress;
    d.user_data = &tr;
    quarot_adapt_context_init(&ctx, NULL);
    QT_OK(run_stage1(x, n, h, &d, &ctx));
    QT_EQ_INT(ctx.block, b);
    QT_EQ_INT(ctx.hadamard_block, b);
    QT_EQ_INT(ctx.rows, n * h / b);
    check_stage1_result("block 32", x, n, h, &ctx, &tr, 4, 0.025);
    /* H*R_best is block-diagonal: exact zeros outside the 32 x 32 diagonal blocks */
    QT_OK(quarot_adapt_context_rotation(&ctx, &rot, NULL));
    QT_OK(quarot_rotation_to_dense_f64(&rot, q));
    for (i = 0; i < h; ++i)
        for (j = 0; j < h; ++j)
            if (i / b != j / b && q[i * h + j] != 0.0) off_block_zero = 0;
    QT_CHECK(off_block_zero);
    QT_CHECK(orth_err(q, h) <= 1e-5);
    printf("    block %lld: loss %.4e -> %.4e (%.1f%% lower)\n", (long long)b, ctx.start_loss, ctx.best_loss,
           100 * (1 - ctx.best_loss / ctx.start_loss));
    quarot_rotation_free(&rot);
    quarot_adapt_context_free(&ctx);
    free(q);
    free(x);
}

/* One step is the orthogonal Procrustes solution: U = polar(C), so U^T C = P is symmetric PSD. */
static void test_step_is_procrustes(void) {
    int64_t h = 64, n = 512, i, j, k;
    float* x = make_acts(n, h, 14);
    quarot_adapt_desc d;
    quarot_adapt_context ctx;
    double *hd, *a, *bq, *c, *p, *u2;
    double asym, pmax, th = 0.05;
    memset(&d, 0, sizeof d);
    d.steps = 1;
    d.seed = 9;
    quarot_adapt_context_init(&ctx, NULL);
    QT_OK(run_stage1(x, n, h, &d, &ctx));
    QT_EQ_INT(ctx.best_step, 1);                  /* one step already improves */
    if (ctx.best_step != 1) { quarot_adapt_context_free(&ctx); free(x); return; }
    hd = dense_hadamard(h, h, 9);
    a = (double*)malloc((size_t)(n * h) * sizeof(double));
    bq = (double*)malloc((size_t)(n * h) * sizeof(double));
    c = (double*)calloc((size_t)(h * h), sizeof(double));
    p = (double*)malloc((size_t)(h * h) * sizeof(double));
    u2 = (double*)malloc((size_t)(h * h) * sizeof(double));
    for (i = 0; i < n; ++i)                       /* A = X*H, B = Q(A), C = A^T B */
        for (j = 0; j < h; ++j) {
            double s = 0;
            for (k = 0; k < h; ++k) s += (double)x[i * h + k] * hd[k * h + j];
            a[i * h + j] = s;
        }
    ref_quant(a, bq, n, h, 4);
    for (k = 0; k < n; ++k)
        for (i = 0; i < h; ++i)
            for (j = 0; j < h; ++j) c[i * h + j] += a[k * h + i] * bq[k * h + j];
    for (k = 0; k < 2; ++k) {
        /* k = 0: U = R_best; k = 1: U rotated by 0.05 rad in the plane (0, 1), which must fail */
        const double* u = ctx.matrix;
        if (k == 1) {
            memcpy(u2, ctx.matrix, (size_t)(h * h) * sizeof(double));
            for (i = 0; i < h; ++i) {
                double v0 = u2[i * h + 0], v1 = u2[i * h + 1];
                u2[i * h + 0] = cos(th) * v0 - sin(th) * v1;
                u2[i * h + 1] = sin(th) * v0 + cos(th) * v1;
            }
            u = u2;
        }
        pmax = 0;
        asym = 0;
        for (i = 0; i < h; ++i)
            for (j = 0; j < h; ++j) {
                double s = 0;
                int64_t m;
                for (m = 0; m < h; ++m) s += u[m * h + i] * c[m * h + j];
                p[i * h + j] = s;
                if (fabs(s) > pmax) pmax = fabs(s);
            }
        for (i = 0; i < h; ++i)
            for (j = 0; j < h; ++j)
                if (fabs(p[i * h + j] - p[j * h + i]) > asym) asym = fabs(p[i * h + j] - p[j * h + i]);
        if (k == 0) {
            /* PSD: Cholesky of the symmetric part + 1e-3*max|P|*I succeeds */
            int ok = 1;
            int64_t m;
            for (i = 0; i < h; ++i)
                for (j = 0; j < h; ++j) u2[i * h + j] = 0.5 * (p[i * h + j] + p[j * h + i]) + (i == j ? 1e-3 * pmax : 0);
            for (j = 0; j < h && ok; ++j) {
                double s = u2[j * h + j];
                for (m = 0; m < j; ++m) s -= u2[j * h + m] * u2[j * h + m];
                if (!(s > 0)) { ok = 0; break; }
                u2[j * h + j] = sqrt(s);
                for (i = j + 1; i < h; ++i) {
                    double t = u2[i * h + j];
                    for (m = 0; m < j; ++m) t -= u2[i * h + m] * u2[j * h + m];
                    u2[i * h + j] = t / u2[j * h + j];
                }
            }
            QT_CHECKF(asym <= 2e-4 * pmax, "U^T C not symmetric: %.3g of max|P|", asym / pmax);
            QT_CHECKF(ok, "U^T C not positive semidefinite");
            printf("    Procrustes step: max|P - P^T| / max|P| = %.2e", asym / pmax);
        } else {
            QT_CHECKF(asym > 1e-2 * pmax, "a rotated U passes the symmetry test (%.3g)", asym / pmax);
            printf(" (%.2e for U rotated by %.2f rad)\n", asym / pmax, th);
        }
    }
    free(hd); free(a); free(bq); free(c); free(p); free(u2);
    quarot_adapt_context_free(&ctx);
    free(x);
}

/* Stage 1 gives the same bits with 1, 2 and 3 threads (the GEMMs split over panels of the output, the
   symmetric passes over tile rows, the inverse's pivot search is serial, and no sum is split), with
   and without deflation, with either polar method. h = 320 gives the inverse panels of 128, 128, 64. */
static void test_stage1_threads(void) {
    /* QT_QUICK (qemu): h = 224 still has a partial 128-wide Gauss-Jordan panel and products well above
       the GEMM's parallel threshold (64^3), at a third of the flops, 2 threads only, and each polar
       method once (Newton with the deflation, Newton-Schulz without) */
    const int64_t h = qt_quick() ? 224 : 320, n = qt_quick() ? 256 : 384;
    int64_t i;
    float* x = make_acts(n, h, 23);
    int nd, t;
    for (nd = 0; nd < 4; ++nd) {
        quarot_adapt_context ref;
        quarot_adapt_desc d;
        if (qt_quick() && (nd == 1 || nd == 2)) continue;
        memset(&d, 0, sizeof d);
        d.steps = 3;
        d.seed = 5;
        d.no_deflation = nd & 1;
        d.polar_method = nd < 2 ? QUAROT_ADAPT_POLAR_NEWTON : QUAROT_ADAPT_POLAR_NEWTON_SCHULZ;
        quarot_adapt_context_init(&ref, NULL);
        QT_OK(run_stage1(x, n, h, &d, &ref));
        for (t = 2; t <= (qt_quick() ? 2 : 3) && ref.matrix; ++t) {
            qx_pool* pool = qx_pool_create(t);
            quarot_env env;
            quarot_adapt_capture cap;
            quarot_adapt_context c;
            int same;
            qx_pool_env(pool, &env);
            quarot_adapt_context_init(&c, &env);
            QT_OK(quarot_adapt_capture_init(&cap, h, &d, &env));
            QT_OK(quarot_adapt_capture_add(&cap, "model.layers.0.mlp.up_proj.weight", x, n, h));
            QT_OK(quarot_adapt_stage1(&cap, &d, &c, &env));
            same = c.matrix && c.steps_run == ref.steps_run && c.best_step == ref.best_step &&
                   memcmp(c.matrix, ref.matrix, (size_t)(h * h) * sizeof(double)) == 0;
            for (i = 0; same && i < c.steps_run; ++i)
                same = c.losses[i] == ref.losses[i] && c.polar_iterations[i] == ref.polar_iterations[i];
            QT_CHECKF(same, "%d threads (deflation %s, %s): stage 1 differs from one thread", t, (nd & 1) ? "off" : "on",
                      quarot_adapt_polar_method_name(d.polar_method));
            quarot_adapt_capture_free(&cap);
            quarot_adapt_context_free(&c);
            qx_pool_destroy(pool);
        }
        quarot_adapt_context_free(&ref);
    }
    free(x);
}

/* Deflating the outliers' singular values before the polar iteration keeps the polar factor: one step
   gives the same R as without deflation to float precision, in fewer iterations, with either polar
   method (Newton-Schulz: at least 3 fewer; scaled Newton, whose count grows only like
   log log cond: not more). (Measured against a double-precision polar factor, the deflated float
   Newton-Schulz result is the more accurate one: 3e-6 vs 5e-5. Over several steps the two runs drift
   apart like any two float runs do, since rounding to the int4 grid is discontinuous, so only one step
   is compared.) */
static void test_deflation_same_result(void) {
    int64_t h = 128, n = 512, i;
    float* x = make_acts(n, h, 17);
    int method;
    for (method = QUAROT_ADAPT_POLAR_NEWTON; method <= QUAROT_ADAPT_POLAR_NEWTON_SCHULZ; ++method) {
        quarot_adapt_desc d;
        quarot_adapt_context c1, c2;
        double dr = 0, dl = 0;
        int it1 = 0, it2 = 0, k;
        memset(&d, 0, sizeof d);
        d.steps = 1;
        d.seed = 2;
        d.polar_method = method;
        quarot_adapt_context_init(&c1, NULL);
        quarot_adapt_context_init(&c2, NULL);
        QT_OK(run_stage1(x, n, h, &d, &c1));
        d.no_deflation = 1;
        QT_OK(run_stage1(x, n, h, &d, &c2));
        QT_CHECK(c1.matrix && c2.matrix && c1.steps_run == c2.steps_run && c1.best_step == c2.best_step);
        if (!c1.matrix || !c2.matrix || c1.steps_run != c2.steps_run) { quarot_adapt_context_free(&c1); quarot_adapt_context_free(&c2); break; }
        for (i = 0; i < h * h; ++i) if (fabs(c1.matrix[i] - c2.matrix[i]) > dr) dr = fabs(c1.matrix[i] - c2.matrix[i]);
        for (k = 0; k < c1.steps_run; ++k) {
            double e = fabs(c1.losses[k] - c2.losses[k]) / c2.losses[k];
            if (e > dl) dl = e;
            it1 += c1.polar_iterations[k];
            it2 += c2.polar_iterations[k];
        }
        QT_CHECKF(dr <= 2e-4, "%s: R_best with and without deflation differ by %.3g", quarot_adapt_polar_method_name(method), dr);
        QT_CHECKF(dl <= 1e-5, "%s: losses with and without deflation differ by %.3g (relative)", quarot_adapt_polar_method_name(method), dl);
        if (method == QUAROT_ADAPT_POLAR_NEWTON_SCHULZ) QT_CHECKF(it1 + 3 <= it2, "deflation saved no Newton-Schulz iterations (%d vs %d)", it1, it2);
        else QT_CHECKF(it1 <= it2, "deflation cost Newton iterations (%d vs %d)", it1, it2);
        printf("    %s, %d steps: %d iterations with deflation, %d without; max|dR| %.1e, losses %.1e apart\n",
               quarot_adapt_polar_method_name(method), c1.steps_run, it1, it2, dr, dl);
        quarot_adapt_context_free(&c1);
        quarot_adapt_context_free(&c2);
    }
    free(x);
}

/* ---------- capture: even sampling ---------- */

static void test_even_sampling(void) {
    const int64_t h = 8, total = 10000, max = 100;
    quarot_adapt_desc d;
    quarot_adapt_capture cap;
    float* x = (float*)malloc((size_t)(total * h) * sizeof(float));
    int64_t sizes[6] = {1, 3, 7, 13, 101, 333}, r = 0, k = 0, i, j, step;
    int ok = 1;
    for (i = 0; i < total; ++i)
        for (j = 0; j < h; ++j) x[i * h + j] = (float)(i * 10 + j);    /* row index in the data */
    memset(&d, 0, sizeof d);
    d.max_samples = max;
    QT_OK(quarot_adapt_capture_init(&cap, h, &d, NULL));
    while (r < total) {                           /* odd chunk sizes; stride 8, plus an ignored linear */
        int64_t c = sizes[k++ % 6];
        if (c > total - r) c = total - r;
        QT_OK(quarot_adapt_capture_add(&cap, "layers.0.up_proj", x + r * h, c, h));
        QT_OK(quarot_adapt_capture_add(&cap, "layers.0.down_proj", x + r * h, c, h));
        r += c;
    }
    QT_EQ_INT(cap.n_linears, 1);
    QT_EQ_INT(cap.linears[0].seen, total);
    step = cap.linears[0].step;
    QT_CHECKF(cap.linears[0].count <= max && cap.linears[0].count > max / 2, "kept %lld rows", (long long)cap.linears[0].count);
    /* kept rows are rows 0, step, 2*step, ..., every multiple of step below total, in order */
    QT_EQ_INT(cap.linears[0].count, (total + step - 1) / step);
    for (i = 0; i < cap.linears[0].count; ++i)
        for (j = 0; j < h; ++j)
            if (cap.linears[0].rows[i * h + j] != (float)(i * step * 10 + j)) ok = 0;
    QT_CHECK(ok);
    printf("    10000 rows in chunks of 1..333: kept %lld rows, every %lld-th (rows 0..%lld)\n",
           (long long)cap.linears[0].count, (long long)step, (long long)((cap.linears[0].count - 1) * step));
    quarot_adapt_capture_free(&cap);
    /* fewer rows than max_samples: all kept; strided input */
    d.max_samples = 0;
    QT_OK(quarot_adapt_capture_init(&cap, 4, &d, NULL));
    QT_EQ_INT(cap.max_samples, 2048);
    QT_OK(quarot_adapt_capture_add(&cap, "mlp.up_proj.weight", x, 50, 8));
    QT_EQ_INT(cap.linears[0].count, 50);
    QT_EQ_INT(cap.linears[0].step, 1);
    QT_CHECK(cap.linears[0].rows[49 * 4 + 3] == x[49 * 8 + 3]);
    quarot_adapt_capture_free(&cap);
    /* max_samples 1: row 0 only */
    d.max_samples = 1;
    QT_OK(quarot_adapt_capture_init(&cap, h, &d, NULL));
    QT_OK(quarot_adapt_capture_add(&cap, "up_proj", x, 37, h));
    QT_EQ_INT(cap.linears[0].count, 1);
    QT_CHECK(cap.linears[0].rows[0] == 0.0f && cap.linears[0].rows[1] == 1.0f);
    quarot_adapt_capture_free(&cap);
    free(x);
}

/* ---------- the ADAPT rotation kind ---------- */

static void test_rotation_kind(void) {
    const int64_t n = 96, b = 48;                 /* 48 = 12 * 4: Paley I core, block-diagonal */
    quarot_rotation rot, had;
    quarot_rotation_desc d;
    double *r, *hd, *want, *got, *x64, *y64;
    float *x32, *y32;
    int64_t i, j, rows = 5;
    double worst = 0;
    int same = 1;
    /* R: a random orthogonal block from the library's linear algebra */
    r = (double*)malloc((size_t)(b * b) * sizeof(double));
    QT_OK(quarot_random_orthogonal_f64(b, 77, r, b, NULL));
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_ADAPT;
    d.n = n;
    d.block_size = b;
    d.seed = 5;
    d.matrix = r;
    QT_OK(quarot_rotation_init(&rot, &d, NULL));
    QT_EQ_INT(rot.kind, QUAROT_ROTATION_ADAPT);
    QT_EQ_INT(rot.plan.n, b);
    hd = dense_hadamard(n, b, 5);
    want = times_blockdiag(hd, n, r, b);
    got = (double*)malloc((size_t)(n * n) * sizeof(double));
    QT_OK(quarot_rotation_to_dense_f64(&rot, got));
    for (i = 0; i < n * n; ++i) if (fabs(got[i] - want[i]) > worst) worst = fabs(got[i] - want[i]);
    QT_CHECKF(worst <= 1e-12, "ADAPT dense differs from H*R by %.3g", worst);
    /* apply f32 and f64 on rows with a stride, then the transpose undoes it */
    x64 = (double*)malloc((size_t)(rows * (n + 3)) * sizeof(double));
    y64 = (double*)malloc((size_t)(rows * (n + 3)) * sizeof(double));
    x32 = (float*)malloc((size_t)(rows * (n + 3)) * sizeof(float));
    y32 = (float*)malloc((size_t)(rows * (n + 3)) * sizeof(float));
    qt_seed(3);
    for (i = 0; i < rows * (n + 3); ++i) { x64[i] = qt_normal(); x32[i] = (float)x64[i]; }
    memcpy(y64, x64, (size_t)(rows * (n + 3)) * sizeof(double));
    memcpy(y32, x32, (size_t)(rows * (n + 3)) * sizeof(float));
    QT_OK(quarot_rotation_apply_f64(&rot, y64, rows, n + 3, 0, NULL, 0));
    QT_OK(quarot_rotation_apply_f32(&rot, y32, rows, n + 3, 0, NULL, 0));
    worst = 0;
    for (i = 0; i < rows; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0;
            int64_t k;
            for (k = 0; k < n; ++k) s += x64[i * (n + 3) + k] * want[k * n + j];
            if (fabs(s - y64[i * (n + 3) + j]) > worst) worst = fabs(s - y64[i * (n + 3) + j]);
            if (fabs(s - (double)y32[i * (n + 3) + j]) > 1e-4) same = 0;
        }
    QT_CHECKF(worst <= 1e-12, "f64 apply differs by %.3g", worst);
    QT_CHECK(same);
    QT_CHECK(y64[n] == x64[n] && y32[n + 2] == x32[n + 2]);   /* padding untouched */
    QT_OK(quarot_rotation_apply_f64(&rot, y64, rows, n + 3, 1, NULL, 0));
    worst = 0;
    for (i = 0; i < rows * (n + 3); ++i) if (fabs(y64[i] - x64[i]) > worst) worst = fabs(y64[i] - x64[i]);
    QT_CHECKF(worst <= 1e-12, "transpose does not invert (%.3g)", worst);
    {   /* caller workspace */
        size_t ws = quarot_rotation_workspace_size(&rot);
        void* w = malloc(ws);
        QT_CHECK(ws >= (size_t)(b * 8));
        QT_ERR(quarot_rotation_apply_f64(&rot, y64, rows, n + 3, 0, w, ws - 1), QUAROT_ERR_WORKSPACE);
        QT_OK(quarot_rotation_apply_f64(&rot, y64, rows, n + 3, 0, w, ws));
        free(w);
    }
    quarot_rotation_free(&rot);
    /* R = I: exactly the HADAMARD rotation (f32 and f64, both directions) */
    for (i = 0; i < b * b; ++i) r[i] = (i / b == i % b) ? 1.0 : 0.0;
    QT_OK(quarot_rotation_init(&rot, &d, NULL));
    QT_CHECK(rot.dense == NULL);
    memset(&d, 0, sizeof d);
    d.n = n; d.block_size = b; d.seed = 5;
    QT_OK(quarot_rotation_init(&had, &d, NULL));
    for (j = 0; j < 2; ++j) {
        memcpy(y64, x64, (size_t)(rows * (n + 3)) * sizeof(double));
        memcpy(got, x64, (size_t)(rows * (n + 3)) * sizeof(double));
        memcpy(y32, x32, (size_t)(rows * (n + 3)) * sizeof(float));
        QT_OK(quarot_rotation_apply_f64(&rot, y64, rows, n + 3, (int)j, NULL, 0));
        QT_OK(quarot_rotation_apply_f64(&had, got, rows, n + 3, (int)j, NULL, 0));
        QT_CHECK(memcmp(y64, got, (size_t)(rows * (n + 3)) * sizeof(double)) == 0);
        QT_OK(quarot_rotation_apply_f32(&rot, y32, rows, n + 3, (int)j, NULL, 0));
        {
            float* z = (float*)malloc((size_t)(rows * (n + 3)) * sizeof(float));
            memcpy(z, x32, (size_t)(rows * (n + 3)) * sizeof(float));
            QT_OK(quarot_rotation_apply_f32(&had, z, rows, n + 3, (int)j, NULL, 0));
            QT_CHECK(memcmp(y32, z, (size_t)(rows * (n + 3)) * sizeof(float)) == 0);
            free(z);
        }
    }
    quarot_rotation_free(&had);
    quarot_rotation_free(&rot);
    /* errors: not orthogonal, NaN, missing matrix, no Hadamard order with fallback ERROR */
    memset(&d, 0, sizeof d);
    d.kind = QUAROT_ROTATION_ADAPT; d.n = n; d.block_size = b; d.matrix = r;
    r[1] = 0.01;
    QT_ERR(quarot_rotation_init(&rot, &d, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    r[1] = NAN;
    QT_ERR(quarot_rotation_init(&rot, &d, NULL), QUAROT_ERR_NONFINITE);
    d.matrix = NULL;
    QT_ERR(quarot_rotation_init(&rot, &d, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    {
        double* i6 = (double*)calloc(36, sizeof(double));
        for (i = 0; i < 6; ++i) i6[i * 7] = 1.0;
        d.n = 12; d.block_size = 6; d.matrix = i6;   /* 6 has no Hadamard matrix: blocks of 2 */
        QT_OK(quarot_rotation_init(&rot, &d, NULL));
        QT_EQ_INT(rot.plan.n, 2);
        quarot_rotation_free(&rot);
        d.fallback = QUAROT_FALLBACK_ERROR;
        QT_ERR(quarot_rotation_init(&rot, &d, NULL), QUAROT_ERR_UNSUPPORTED_SIZE);
        free(i6);
    }
    free(r); free(hd); free(want); free(got); free(x64); free(y64); free(x32); free(y32);
}

/* ---------- stage 2 through the processor ---------- */

#define N_TOK 12
static const int32_t tokens[N_TOK] = {1, 17, 5, 42, 9, 100, 3, 77, 28, 64, 11, 5};

/* Logits of model s on `tokens`, with hooks when list != NULL. Returns a malloc'd [N_TOK][vocab]. */
static float* run_logits(const qx_store* s, const quarot_online_list* list) { return run_window_hooks(s, list, tokens, N_TOK); }

/* Clone orig into out and rotate it with desc (hooks into list, initialized here). */
static quarot_result rotate_clone(const qx_store* orig, qx_store* out, quarot_rotate_desc* desc, quarot_online_list* list,
                                  char* err, size_t err_size) {
    quarot_model m;
    qx_binding b;
    quarot_result r;
    qx_store_clone(orig, out);
    quarot_online_list_init(list, NULL);
    desc->online_out = list;
    qx_model_bind(&m, &b, out);
    r = quarot_rotate_model(&m, desc);
    if (err) snprintf(err, err_size, "%s", m.error);
    if (r == QUAROT_OK) qx_model_sync(&m, out);
    return r;
}

/* Text of a hook list (for comparing lists). */
static char* hooks_text(const quarot_online_list* l) {
    size_t need = 0;
    char* t;
    quarot_online_write(l, NULL, 0, &need);
    t = (char*)malloc(need + 1);
    if (quarot_online_write(l, t, need + 1, &need) != QUAROT_OK) t[0] = 0;
    return t;
}

static void test_stage2_identity_bitexact(void) {
    static const char* archs[2] = {"llama", "qwen2"};
    int a, v;
    for (a = 0; a < 2; ++a) {
        qx_store s;
        if (!synth_model(&s, archs[a], 21 + (uint64_t)a)) { QT_CHECK(0); continue; }
        for (v = 0; v < 3; ++v) {
            quarot_adapt_context ctx;
            quarot_rotate_desc dq, da;
            qx_store sq, sa;
            quarot_online_list lq, la;
            char err[256];
            int64_t h = s.config.hidden, b = v == 1 ? 16 : h, i;
            double* eye = (double*)calloc((size_t)(b * b), sizeof(double));
            char *tq, *ta;
            for (i = 0; i < b; ++i) eye[i * b + i] = 1.0;
            quarot_adapt_context_init(&ctx, NULL);
            QT_OK(quarot_adapt_context_set(&ctx, h, v == 1 ? b : -1, 4242 + (uint64_t)v, eye));
            memset(&dq, 0, sizeof dq);
            dq.seed = 4242 + (uint64_t)v;             /* plain QuaRot, the same seed */
            dq.block_size = v == 1 ? b : -1;
            dq.online = v == 2;
            da = dq;
            da.rotation = QUAROT_ROTATION_ADAPT;
            da.context = &ctx;
            /* R1's signs come from the context's seed; R2 still uses desc.seed (the same here) */
            QT_OK(rotate_clone(&s, &sq, &dq, &lq, err, sizeof err));
            QT_OK(rotate_clone(&s, &sa, &da, &la, err, sizeof err));
            QT_CHECKF(stores_same_bytes(&sq, &sa), "%s variant %d: ADAPT with R = I differs from QuaRot", archs[a], v);
            tq = hooks_text(&lq);
            ta = hooks_text(&la);
            QT_CHECK(strcmp(tq, ta) == 0);
            free(tq); free(ta);
            quarot_online_list_free(&lq); quarot_online_list_free(&la);
            qx_store_free(&sq); qx_store_free(&sa);
            quarot_adapt_context_free(&ctx);
            free(eye);
        }
        qx_store_free(&s);
    }
}

/* Capture hook of the forward pass feeding the Adapt Rotation capture. */
static void capture_hook(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    (void)layer;
    quarot_adapt_capture_add((quarot_adapt_capture*)user, name, x, rows, n);
}

/* Stage 1 the way the product runs it: fuse the norms, run calibration tokens with the capture hook. */
static quarot_result calibrate(const qx_store* s, quarot_adapt_desc* d, quarot_adapt_context* ctx, quarot_adapt_capture* cap) {
    qx_store fused;
    quarot_rotate_desc fd;
    quarot_online_list l;
    qx_forward f;
    qx_forward_opts o;
    qx_err e;
    int32_t calib[64];
    int i;
    quarot_result r;
    memset(&fd, 0, sizeof fd);
    fd.rotation = QUAROT_ROTATION_IDENTITY;      /* norm fusion only */
    fd.no_r2 = 1;
    r = rotate_clone(s, &fused, &fd, &l, NULL, 0);
    quarot_online_list_free(&l);
    if (r != QUAROT_OK) { qx_store_free(&fused); return r; }
    r = quarot_adapt_capture_init(cap, s->config.hidden, d, NULL);
    memset(&o, 0, sizeof o);
    o.capture = capture_hook;
    o.capture_user = cap;
    qt_seed(5);
    for (i = 0; i < 64; ++i) calib[i] = (int32_t)(qt_uniform() * (double)s->config.vocab);
    if (r == QUAROT_OK) r = qx_forward_init(&f, &fused, &o, &e);
    if (r == QUAROT_OK) {
        r = qx_forward_window(&f, calib, 64, NULL, &e);
        qx_forward_free(&f);
    }
    if (r == QUAROT_OK) r = quarot_adapt_stage1(cap, d, ctx, NULL);
    qx_store_free(&fused);
    return r;
}

static void test_stage2_learned_and_serialized(void) {
    qx_store s, s1, s2, sq;
    quarot_adapt_desc d;
    quarot_adapt_capture cap;
    quarot_adapt_context ctx, back;
    quarot_rotate_desc rd;
    quarot_online_list l1, l2, lq;
    float *ref, *got;
    unsigned char* buf;
    size_t size = 0;
    char err[256];
    double diff;
    if (!synth_model(&s, "llama", 31)) { QT_CHECK(0); return; }
    memset(&d, 0, sizeof d);
    d.seed = 77;
    d.steps = qt_quick() ? 4 : 10;
    quarot_adapt_context_init(&ctx, NULL);
    QT_OK(calibrate(&s, &d, &ctx, &cap));
    QT_EQ_INT(cap.n_linears, s.config.n_layers);  /* every layer's up_proj, 64 tokens each */
    QT_EQ_INT(ctx.rows, 64 * s.config.n_layers);
    QT_CHECK(ctx.best_loss < ctx.start_loss);
    printf("    calibrated llama (hidden %lld, %lld up_proj rows): loss %.4e -> %.4e\n", (long long)s.config.hidden,
           (long long)ctx.rows, ctx.start_loss, ctx.best_loss);
    quarot_adapt_capture_free(&cap);
    ref = run_logits(&s, NULL);
    /* stage 2 with the learned R and online rotations: the same function */
    memset(&rd, 0, sizeof rd);
    rd.rotation = QUAROT_ROTATION_ADAPT;
    rd.context = &ctx;
    rd.seed = 77;
    rd.online = 1;
    QT_OK(rotate_clone(&s, &s1, &rd, &l1, err, sizeof err));
    got = run_logits(&s1, &l1);
    diff = got && ref ? qt_rel_diff(got, ref, N_TOK * s.config.vocab) : 1e9;
    QT_CHECKF(diff < 1e-4, "learned adapt rotation: logits differ by %.3g of their scale", diff);
    printf("    stage 2 (online): max|dlogit|/max|logit| = %.2e\n", diff);
    free(got);
    /* ...and not plain QuaRot (R was really used) */
    memset(&rd, 0, sizeof rd);
    rd.seed = 77;
    rd.online = 1;
    QT_OK(rotate_clone(&s, &sq, &rd, &lq, err, sizeof err));
    QT_CHECK(!stores_same_bytes(&s1, &sq));
    /* serialized and read back as another process would: the same rotated model, byte for byte */
    QT_OK(quarot_adapt_context_write(&ctx, NULL, 0, &size));
    buf = (unsigned char*)malloc(size);
    QT_ERR(quarot_adapt_context_write(&ctx, buf, size - 1, &size), QUAROT_ERR_WORKSPACE);
    QT_OK(quarot_adapt_context_write(&ctx, buf, size, &size));
    quarot_adapt_context_init(&back, NULL);
    QT_OK(quarot_adapt_context_read(&back, buf, size));
    QT_CHECK(back.hidden == ctx.hidden && back.block == ctx.block && back.seed == ctx.seed && back.steps_run == ctx.steps_run &&
             back.best_step == ctx.best_step && back.rows == ctx.rows && back.bits == ctx.bits);
    QT_CHECK(memcmp(back.matrix, ctx.matrix, (size_t)(ctx.block * ctx.block) * sizeof(double)) == 0);
    QT_CHECK(memcmp(&back.start_loss, &ctx.start_loss, 8) == 0 && memcmp(&back.best_loss, &ctx.best_loss, 8) == 0);
    QT_CHECK(memcmp(back.losses, ctx.losses, (size_t)ctx.steps_run * 8) == 0);
    memset(&rd, 0, sizeof rd);
    rd.rotation = QUAROT_ROTATION_ADAPT;
    rd.context = &back;
    rd.seed = 77;
    rd.online = 1;
    QT_OK(rotate_clone(&s, &s2, &rd, &l2, err, sizeof err));
    QT_CHECK(stores_same_bytes(&s1, &s2));
    /* block size disagreeing with the context */
    {
        qx_store s3;
        quarot_online_list l3;
        rd.block_size = 16;
        QT_ERR(rotate_clone(&s, &s3, &rd, &l3, err, sizeof err), QUAROT_ERR_SHAPE_MISMATCH);
        QT_CHECKF(strstr(err, "block") != NULL, "message: %s", err);
        quarot_online_list_free(&l3);
        qx_store_free(&s3);
    }
    /* a block-diagonal adaptation (block 32) with tensor-parallel online rotations and down_proj
       online in layer 0 only: still the same function */
    {
        qx_store s4;
        quarot_online_list l4;
        quarot_adapt_context cb;
        static const int64_t only0[1] = {0};
        quarot_adapt_context_init(&cb, NULL);
        d.block_size = 32;
        QT_OK(calibrate(&s, &d, &cb, &cap));
        quarot_adapt_capture_free(&cap);
        QT_EQ_INT(cb.block, 32);
        QT_CHECK(cb.best_loss < cb.start_loss);
        memset(&rd, 0, sizeof rd);
        rd.rotation = QUAROT_ROTATION_ADAPT;
        rd.context = &cb;
        rd.seed = 77;
        rd.online = 1;
        rd.max_tp_size = 2;
        rd.down_proj_online = QUAROT_LAYERS_LIST;
        rd.down_proj_online_layers = only0;
        rd.n_down_proj_online_layers = 1;
        QT_OK(rotate_clone(&s, &s4, &rd, &l4, err, sizeof err));
        got = run_logits(&s4, &l4);
        diff = got && ref ? qt_rel_diff(got, ref, N_TOK * s.config.vocab) : 1e9;
        QT_CHECKF(diff < 1e-4, "block-32 adaptation, tp 2: logits differ by %.3g of their scale", diff);
        printf("    stage 2 (block 32, max_tp_size 2, down_proj online in layer 0): %.2e; loss %.4e -> %.4e\n", diff,
               cb.start_loss, cb.best_loss);
        free(got);
        quarot_online_list_free(&l4);
        qx_store_free(&s4);
        quarot_adapt_context_free(&cb);
    }
    free(buf);
    free(ref);
    quarot_online_list_free(&l1); quarot_online_list_free(&l2); quarot_online_list_free(&lq);
    qx_store_free(&s1); qx_store_free(&s2); qx_store_free(&sq);
    quarot_adapt_context_free(&back);
    quarot_adapt_context_free(&ctx);
    qx_store_free(&s);
}

/* ---------- serialization: hostile input ---------- */

static uint64_t fnv1a(const unsigned char* p, size_t n) {
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t i;
    for (i = 0; i < n; ++i) { h ^= p[i]; h *= 0x100000001b3ULL; }
    return h;
}
static void fix_checksum(unsigned char* p, size_t n) {
    uint64_t h = fnv1a(p, n - 8);
    int i;
    for (i = 0; i < 8; ++i) p[n - 8 + i] = (unsigned char)(h >> (8 * i));
}

static void test_serialization_rejects(void) {
    int64_t h = 32, n = 128;
    float* x = make_acts(n, h, 15);
    quarot_adapt_desc d;
    quarot_adapt_context ctx, back;
    unsigned char *buf, *bad;
    size_t size = 0, len, r_off;
    int all_truncations = 1;
    double nan = NAN;
    memset(&d, 0, sizeof d);
    d.steps = 3;
    quarot_adapt_context_init(&ctx, NULL);
    quarot_adapt_context_init(&back, NULL);
    QT_OK(run_stage1(x, n, h, &d, &ctx));
    QT_OK(quarot_adapt_context_write(&ctx, NULL, 0, &size));
    QT_EQ_INT(size, 104 + 12 * ctx.steps_run + 8 * h * h + 8);
    buf = (unsigned char*)malloc(size + 1);
    bad = (unsigned char*)malloc(size + 1);
    QT_OK(quarot_adapt_context_write(&ctx, buf, size + 1, &size));
    QT_OK(quarot_adapt_context_read(&back, buf, size));
    for (len = 0; len < size; ++len)
        if (quarot_adapt_context_read(&back, buf, len) != QUAROT_ERR_PARSE) all_truncations = 0;
    QT_CHECK(all_truncations);
    QT_CHECK(back.matrix != NULL && back.hidden == h);   /* failures leave the last good context */
    buf[size] = 0;
    QT_ERR(quarot_adapt_context_read(&back, buf, size + 1), QUAROT_ERR_PARSE);   /* trailing byte */
    memcpy(bad, buf, size);
    bad[0] = 'X';
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_PARSE);
    QT_CHECKF(strstr(back.error, "magic") != NULL, "%s", back.error);
    memcpy(bad, buf, size);
    bad[8] = 2;                                   /* version 2 */
    fix_checksum(bad, size);
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_PARSE);
    QT_CHECKF(strstr(back.error, "version") != NULL, "%s", back.error);
    r_off = 104 + 12 * (size_t)ctx.steps_run;
    memcpy(bad, buf, size);
    bad[r_off + 8 * 5 + 6] ^= 0x10;               /* a flipped byte in R: the checksum catches it... */
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_PARSE);
    QT_CHECKF(strstr(back.error, "checksum") != NULL, "%s", back.error);
    fix_checksum(bad, size);                      /* ...and with a valid checksum, orthogonality does */
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(back.error, "orthogonal") != NULL, "%s", back.error);
    memcpy(bad, buf, size);
    memcpy(bad + r_off + 8 * 7, &nan, 8);         /* NaN in R (little-endian hosts) */
    fix_checksum(bad, size);
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_NONFINITE);
    memcpy(bad, buf, size);
    memcpy(bad + 104, &nan, 8);                   /* NaN loss */
    fix_checksum(bad, size);
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_PARSE);
    memcpy(bad, buf, size);
    bad[24] = 31;                                 /* block 31: sizes disagree */
    fix_checksum(bad, size);
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_PARSE);
    memcpy(bad, buf, size);
    bad[32] = 16;                                 /* hadamard_block 16 for block 32 */
    fix_checksum(bad, size);
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_PARSE);
    memcpy(bad, buf, size);
    bad[60] = (unsigned char)(ctx.best_step == 1 ? 2 : 1);   /* best_step pointing at another loss */
    fix_checksum(bad, size);
    QT_ERR(quarot_adapt_context_read(&back, bad, size), QUAROT_ERR_PARSE);
    /* the last good context is still usable and equal to the original */
    QT_CHECK(memcmp(back.matrix, ctx.matrix, (size_t)(h * h) * sizeof(double)) == 0);
    QT_ERR(quarot_adapt_context_read(&back, NULL, size), QUAROT_ERR_PARSE);
    free(buf);
    free(bad);
    quarot_adapt_context_free(&back);
    quarot_adapt_context_free(&ctx);
    free(x);
}

/* ---------- the product's FAQ errors ---------- */

static void test_faq_errors(void) {
    int64_t h = 32, n = 64;
    float* x = make_acts(n, h, 16);
    const char* pats[1] = {"gate_up"};
    quarot_adapt_desc d;
    quarot_adapt_capture cap;
    quarot_adapt_context ctx;
    quarot_result r;
    memset(&d, 0, sizeof d);
    quarot_adapt_context_init(&ctx, NULL);
    /* a layer_type matching no linear: the message names the pattern and lists the linears */
    d.layer_type = pats;
    d.n_layer_type = 1;
    QT_OK(quarot_adapt_capture_init(&cap, h, &d, NULL));
    QT_OK(quarot_adapt_capture_add(&cap, "model.layers.0.mlp.up_proj.weight", x, n, h));
    QT_OK(quarot_adapt_capture_add(&cap, "model.layers.1.mlp.up_proj.weight", x, n, h));
    QT_OK(quarot_adapt_capture_add(&cap, "model.layers.0.self_attn.q_proj.weight", x, n, h));
    r = quarot_adapt_stage1(&cap, &d, &ctx, NULL);
    QT_ERR(r, QUAROT_ERR_NOT_FOUND);
    QT_CHECKF(strstr(ctx.error, "'gate_up'") && strstr(ctx.error, "model.layers.{i}.mlp.up_proj.weight") &&
              strstr(ctx.error, "model.layers.{i}.self_attn.q_proj.weight"), "message: %s", ctx.error);
    printf("    %s\n", ctx.error);
    QT_CHECK(ctx.matrix == NULL);
    quarot_adapt_capture_free(&cap);
    /* quant_dtype fp8 */
    d.layer_type = NULL;
    d.quant_dtype = "fp8";
    QT_OK(quarot_adapt_capture_init(&cap, h, &d, NULL));
    QT_OK(quarot_adapt_capture_add(&cap, "model.layers.0.mlp.up_proj.weight", x, n, h));
    QT_ERR(quarot_adapt_stage1(&cap, &d, &ctx, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(ctx.error, "fp8") && strstr(ctx.error, "int4"), "message: %s", ctx.error);
    printf("    %s\n", ctx.error);
    d.quant_dtype = NULL;
    d.block_size = 12;                            /* does not divide 32 */
    QT_ERR(quarot_adapt_stage1(&cap, &d, &ctx, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d.block_size = 0;
    d.reg = 2.0;
    QT_ERR(quarot_adapt_stage1(&cap, &d, &ctx, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d.reg = 0;
    /* NaN in captured rows: refused by add, and stage 1 refuses too */
    x[5 * h + 3] = NAN;
    QT_ERR(quarot_adapt_capture_add(&cap, "model.layers.1.mlp.up_proj.weight", x, n, h), QUAROT_ERR_NONFINITE);
    QT_ERR(quarot_adapt_stage1(&cap, &d, &ctx, NULL), QUAROT_ERR_NONFINITE);
    QT_CHECKF(strstr(ctx.error, "layers.1.mlp.up_proj") && strstr(ctx.error, "row 5"), "message: %s", ctx.error);
    QT_CHECK(ctx.matrix == NULL);
    quarot_adapt_capture_free(&cap);
    /* bad arguments */
    QT_ERR(quarot_adapt_capture_init(&cap, 0, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(quarot_adapt_capture_init(&cap, h, NULL, NULL));
    QT_ERR(quarot_adapt_capture_add(&cap, "up_proj", x, n, h - 1), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_adapt_capture_add(&cap, NULL, x, n, h), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_adapt_stage1(&cap, NULL, &ctx, NULL), QUAROT_ERR_NOT_FOUND);   /* nothing fed */
    QT_CHECKF(strstr(ctx.error, "'up_proj'") && strstr(ctx.error, "none"), "message: %s", ctx.error);
    quarot_adapt_capture_free(&cap);
    QT_ERR(quarot_adapt_stage1(NULL, NULL, &ctx, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    {
        size_t need = 1;
        QT_ERR(quarot_adapt_context_write(&ctx, NULL, 0, &need), QUAROT_ERR_STATE);   /* no matrix yet */
        QT_EQ_INT(need, 0);
    }
    /* stage 2 without a context, or with one stage 1 never filled */
    {
        qx_store s, o;
        quarot_rotate_desc rd;
        quarot_online_list l;
        char err[256];
        if (synth_model(&s, "llama", 41)) {
            int k;
            for (k = 0; k < 2; ++k) {
                memset(&rd, 0, sizeof rd);
                rd.rotation = QUAROT_ROTATION_ADAPT;
                rd.context = k ? &ctx : NULL;
                QT_ERR(rotate_clone(&s, &o, &rd, &l, err, sizeof err), QUAROT_ERR_STATE);
                QT_CHECKF(strstr(err, "stage 1") != NULL, "message: %s", err);
                QT_CHECK(stores_same_bytes(&s, &o));
                if (k == 0) printf("    %s\n", err);
                quarot_online_list_free(&l);
                qx_store_free(&o);
            }
            {   /* a context for another hidden size */
                double eye[16 * 16];
                int64_t i;
                memset(eye, 0, sizeof eye);
                for (i = 0; i < 16; ++i) eye[i * 17] = 1.0;
                QT_OK(quarot_adapt_context_set(&ctx, 16, 16, 1, eye));
                rd.context = &ctx;
                QT_ERR(rotate_clone(&s, &o, &rd, &l, err, sizeof err), QUAROT_ERR_SHAPE_MISMATCH);
                quarot_online_list_free(&l);
                qx_store_free(&o);
                eye[1] = 0.5;
                QT_ERR(quarot_adapt_context_set(&ctx, 16, 16, 1, eye), QUAROT_ERR_INVALID_ARGUMENT);
                QT_CHECK(ctx.matrix != NULL && ctx.matrix[1] == 0.0);   /* unchanged on failure */
            }
            qx_store_free(&s);
        } else {
            QT_CHECK(0);
        }
    }
    quarot_adapt_context_free(&ctx);
    free(x);
}

int main(void) {
    QT_RUN(test_even_sampling);
    QT_RUN(test_rotation_kind);
    QT_RUN(test_stage1_int4_full);
    QT_RUN(test_stage1_int8_and_patterns);
    QT_RUN(test_stage1_block);
    QT_RUN(test_step_is_procrustes);
    QT_RUN(test_deflation_same_result);
    QT_RUN(test_stage1_threads);
    QT_RUN(test_serialization_rejects);
    QT_RUN(test_faq_errors);
    QT_RUN(test_stage2_identity_bitexact);
    QT_RUN(test_stage2_learned_and_serialized);
    return qt_finish("test_adapt");
}
