/* The backward passes of quarot.h >>train against central finite differences.

   Each op has a plain double-precision forward written here (independent of the library's float
   code). For a random upstream gradient dy, the scalar L(x) = <dy, f(x)> is differentiated by central
   differences in double, dL/dx_i ~ (L(x + h e_i) - L(x - h e_i)) / 2h with h = 1e-6 (truncation
   ~h^2 ~ 1e-12, rounding ~1e-16/h = 1e-10, both far below float's 6e-8), and compared with the
   library's float backward at the same point: max |analytic - fd| <= 1e-6 * max |fd| for every
   input of every op (RMSNorm with and without a gain, RoPE in both layouts, the gated activation for
   SiLU / GELU / ReLU, causal attention with grouped KV heads, cross-entropy, KL divergence). The library's forward
   is checked against the double forward too (2e-6 relative), so both sides differentiate the same
   function. The Stiefel step: orthogonality kept to 1e-6 over many steps, descent on a Procrustes
   objective, agreement with the exact Cayley transform, momentum, bad arguments. */
#include "quarot.h"
#include "qt.h"

#define FD_H 1e-6
#define FD_TOL 1e-6

static void fill(double* x, int64_t n, double scale) {
    int64_t i;
    for (i = 0; i < n; ++i) x[i] = scale * qt_normal();
}

static void to_f32(const double* x, float* y, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) y[i] = (float)x[i];
}

static double dot(const double* a, const double* b, int64_t n) {
    double s = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) s += a[i] * b[i];
    return s;
}

/* The FD gradient of L(x) = <dy, f(x)> for a double forward f(ctx, x, y), at every stride-th entry
   (the others are set to 0 and left out of grad_err_every). */
typedef void (*fwd64_fn)(const void* ctx, const double* x, double* y);
static void fd_grad_every(fwd64_fn f, const void* ctx, double* x, int64_t nx, const double* dy, int64_t ny, double* g,
                          int64_t stride) {
    double* y = (double*)malloc((size_t)ny * sizeof(double));
    int64_t i;
    for (i = 0; i < nx; ++i) {
        double keep = x[i], lp, lm;
        g[i] = 0.0;
        if (i % stride != 0) continue;
        x[i] = keep + FD_H;
        f(ctx, x, y);
        lp = dot(dy, y, ny);
        x[i] = keep - FD_H;
        f(ctx, x, y);
        lm = dot(dy, y, ny);
        x[i] = keep;
        g[i] = (lp - lm) / (2.0 * FD_H);
    }
    free(y);
}

static void fd_grad(fwd64_fn f, const void* ctx, double* x, int64_t nx, const double* dy, int64_t ny, double* g) {
    fd_grad_every(f, ctx, x, nx, dy, ny, g, 1);
}

/* max |a - fd| / max |fd| over the entries fd_grad_every computed (i0 = the offset of a's first entry in x) */
static double grad_err_every(const float* a, const double* fd, int64_t n, int64_t i0, int64_t stride) {
    double mx = 0.0, md = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) {
        if ((i0 + i) % stride != 0) continue;
        if (fabs(fd[i]) > mx) mx = fabs(fd[i]);
        if (fabs((double)a[i] - fd[i]) > md) md = fabs((double)a[i] - fd[i]);
    }
    return mx > 0.0 ? md / mx : md;
}

/* max |a - fd| / max |fd| (a float analytic gradient against a double FD one) */
static double grad_err(const float* a, const double* fd, int64_t n) { return grad_err_every(a, fd, n, 0, 1); }

/* ---- RMSNorm ------------------------------------------------------------------------------ */

typedef struct norm_ctx { int64_t rows, n; const double* g; double eps; } norm_ctx;

static void norm64(const void* c, const double* x, double* y) {
    const norm_ctx* k = (const norm_ctx*)c;
    int64_t r, i;
    for (r = 0; r < k->rows; ++r) {
        double ss = 0.0, inv;
        for (i = 0; i < k->n; ++i) ss += x[r * k->n + i] * x[r * k->n + i];
        inv = 1.0 / sqrt(ss / (double)k->n + k->eps);
        for (i = 0; i < k->n; ++i) y[r * k->n + i] = x[r * k->n + i] * inv * (k->g ? k->g[i] : 1.0);
    }
}

static void test_rmsnorm(void) {
    enum { R = 3, N = 17 };
    double x[R * N], dy[R * N], g[N], fd[R * N], y64[R * N];
    float xf[R * N], dyf[R * N], gf[N], yf[R * N], dx[R * N], rs[R], yff[R * N];
    int with_gain;
    qt_seed(11);
    fill(x, R * N, 1.5);
    fill(dy, R * N, 1.0);
    fill(g, N, 0.5);
    for (with_gain = 0; with_gain < 2; ++with_gain) {
        norm_ctx c;
        int64_t i;
        c.rows = R; c.n = N; c.g = with_gain ? g : NULL; c.eps = 1e-5;
        to_f32(x, xf, R * N); to_f32(dy, dyf, R * N); to_f32(g, gf, N);
        for (i = 0; i < R * N; ++i) x[i] = (double)xf[i];   /* both sides at the same (float) point */
        for (i = 0; i < R * N; ++i) dy[i] = (double)dyf[i];
        for (i = 0; i < N; ++i) g[i] = (double)gf[i];
        quarot_train_rmsnorm_f32(xf, R, N, with_gain ? gf : NULL, 1e-5f, yf, rs);
        norm64(&c, x, y64);
        to_f32(y64, yff, R * N);
        QT_CHECKF(qt_rel_diff(yf, yff, R * N) < 2e-6, "forward %.3g", qt_rel_diff(yf, yff, R * N));
        quarot_train_rmsnorm_backward_f32(xf, rs, R, N, with_gain ? gf : NULL, dyf, dx, 0);
        fd_grad(norm64, &c, x, R * N, dy, R * N, fd);
        QT_CHECKF(grad_err(dx, fd, R * N) < FD_TOL, "gain %d: dx error %.3g", with_gain, grad_err(dx, fd, R * N));
        /* accumulate adds */
        {
            float acc[R * N];
            for (i = 0; i < R * N; ++i) acc[i] = 1.0f;
            quarot_train_rmsnorm_backward_f32(xf, rs, R, N, with_gain ? gf : NULL, dyf, acc, 1);
            for (i = 0; i < R * N; ++i) QT_CHECK(acc[i] == 1.0f + dx[i]);
        }
    }
}

/* ---- RoPE --------------------------------------------------------------------------------- */

typedef struct rope_ctx { int64_t T, heads, hd; double theta; int il; } rope_ctx;

static void rope64(const void* c, const double* x, double* y) {
    const rope_ctx* k = (const rope_ctx*)c;
    int64_t t, h, i, half = k->hd / 2;
    for (t = 0; t < k->T; ++t)
        for (h = 0; h < k->heads; ++h) {
            const double* v = x + (t * k->heads + h) * k->hd;
            double* o = y + (t * k->heads + h) * k->hd;
            for (i = 0; i < half; ++i) {
                int64_t i0 = k->il ? 2 * i : i, i1 = k->il ? 2 * i + 1 : i + half;
                double ang = (double)(t + 3) * pow(k->theta, -(double)(2 * i) / (double)k->hd);
                o[i0] = v[i0] * cos(ang) - v[i1] * sin(ang);
                o[i1] = v[i0] * sin(ang) + v[i1] * cos(ang);
            }
        }
}

static void test_rope(void) {
    enum { T = 5, H = 3, HD = 8, NX = T * H * HD };
    double x[NX], dy[NX], fd[NX], y64[NX];
    float xf[NX], dyf[NX], yf[NX], cs[T * HD], back[NX];
    int il;
    int64_t i;
    qt_seed(12);
    fill(x, NX, 1.0);
    fill(dy, NX, 1.0);
    to_f32(x, xf, NX); to_f32(dy, dyf, NX);
    for (i = 0; i < NX; ++i) { x[i] = (double)xf[i]; dy[i] = (double)dyf[i]; }
    quarot_train_rope_table(T, 3, HD, 10000.0f, cs);
    for (il = 0; il < 2; ++il) {
        rope_ctx c;
        float yff[NX];
        c.T = T; c.heads = H; c.hd = HD; c.theta = 10000.0; c.il = il;
        memcpy(yf, xf, sizeof yf);
        quarot_train_rope_f32(yf, T, H, HD, cs, il, 0);
        rope64(&c, x, y64);
        to_f32(y64, yff, NX);
        QT_CHECKF(qt_rel_diff(yf, yff, NX) < 2e-6, "forward %.3g", qt_rel_diff(yf, yff, NX));
        /* the backward is the inverse rotation of dy */
        memcpy(back, dyf, sizeof back);
        quarot_train_rope_f32(back, T, H, HD, cs, il, 1);
        fd_grad(rope64, &c, x, NX, dy, NX, fd);
        QT_CHECKF(grad_err(back, fd, NX) < FD_TOL, "layout %d: dx error %.3g", il, grad_err(back, fd, NX));
        /* inverse undoes forward */
        quarot_train_rope_f32(yf, T, H, HD, cs, il, 1);
        QT_CHECK(qt_rel_diff(yf, xf, NX) < 1e-6);
    }
}

/* ---- gated activation --------------------------------------------------------------------- */

typedef struct glu_ctx { int64_t n; quarot_act_kind act; } glu_ctx;

static double act64(double x, quarot_act_kind k) {
    if (k == QUAROT_ACT_RELU) return x > 0 ? x : 0;
    if (k == QUAROT_ACT_GELU) return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
    return x / (1.0 + exp(-x));
}

/* x = [g | u] */
static void glu64(const void* c, const double* x, double* y) {
    const glu_ctx* k = (const glu_ctx*)c;
    int64_t i;
    for (i = 0; i < k->n; ++i) y[i] = act64(x[i], k->act) * x[k->n + i];
}

static void test_glu(void) {
    enum { N = 40 };
    double x[2 * N], dy[N], fd[2 * N], y64[N];
    float g[N], u[N], dyf[N], h[N], dg[N], du[N], an[2 * N], hf[N];
    quarot_act_kind acts[3] = {QUAROT_ACT_SILU, QUAROT_ACT_GELU, QUAROT_ACT_RELU};
    int a;
    int64_t i;
    qt_seed(13);
    fill(x, 2 * N, 2.0);
    for (i = 0; i < N; ++i) if (fabs(x[i]) < 0.05) x[i] = 0.3;   /* ReLU's kink stays out of the FD */
    fill(dy, N, 1.0);
    to_f32(x, g, N); to_f32(x + N, u, N); to_f32(dy, dyf, N);
    for (i = 0; i < N; ++i) { x[i] = (double)g[i]; x[N + i] = (double)u[i]; dy[i] = (double)dyf[i]; }
    for (a = 0; a < 3; ++a) {
        glu_ctx c;
        c.n = N; c.act = acts[a];
        quarot_train_glu_f32(g, u, N, acts[a], h);
        glu64(&c, x, y64);
        to_f32(y64, hf, N);
        QT_CHECKF(qt_rel_diff(h, hf, N) < 2e-6, "act %d forward %.3g", a, qt_rel_diff(h, hf, N));
        quarot_train_glu_backward_f32(g, u, dyf, N, acts[a], dg, du);
        memcpy(an, dg, sizeof dg);
        memcpy(an + N, du, sizeof du);
        fd_grad(glu64, &c, x, 2 * N, dy, N, fd);
        QT_CHECKF(grad_err(an, fd, 2 * N) < FD_TOL, "act %d: error %.3g", a, grad_err(an, fd, 2 * N));
    }
}

/* ---- attention ---------------------------------------------------------------------------- */

typedef struct attn_ctx { int64_t T, nh, nkv, hd; } attn_ctx;

/* x = [q | k | v]: q [T][nh*hd], k, v [T][nkv*hd]; y = out [T][nh*hd]; naive causal softmax per head */
static void attn64(const void* c, const double* x, double* y) {
    const attn_ctx* k = (const attn_ctx*)c;
    int64_t T = k->T, qd = k->nh * k->hd, kvd = k->nkv * k->hd, grp = k->nh / k->nkv, h, t, s, d;
    const double *q = x, *kk = x + T * qd, *v = kk + T * kvd;
    double* sc = (double*)malloc((size_t)T * sizeof(double));
    for (h = 0; h < k->nh; ++h) {
        int64_t g = h / grp;
        for (t = 0; t < T; ++t) {
            double mx = -1e300, sum = 0.0;
            for (s = 0; s <= t; ++s) {
                double a = 0.0;
                for (d = 0; d < k->hd; ++d) a += q[t * qd + h * k->hd + d] * kk[s * kvd + g * k->hd + d];
                sc[s] = a / sqrt((double)k->hd);
                if (sc[s] > mx) mx = sc[s];
            }
            for (s = 0; s <= t; ++s) { sc[s] = exp(sc[s] - mx); sum += sc[s]; }
            for (d = 0; d < k->hd; ++d) {
                double o = 0.0;
                for (s = 0; s <= t; ++s) o += sc[s] / sum * v[s * kvd + g * k->hd + d];
                y[t * qd + h * k->hd + d] = o;
            }
        }
    }
    free(sc);
}

/* One geometry: the forward against attn64, dq / dk / dv against central differences at every
   stride-th input. T above the library's 64-query block checks the blocks' key ranges. */
static void attn_case(int64_t T, int64_t NH, int64_t NKV, int64_t HD, int64_t stride, unsigned seed) {
    int64_t QD = NH * HD, KVD = NKV * HD, NX = T * (QD + 2 * KVD), NY = T * QD, i;
    double *x = (double*)malloc((size_t)NX * sizeof(double)), *dy = (double*)malloc((size_t)NY * sizeof(double));
    double *fd = (double*)malloc((size_t)NX * sizeof(double)), *y64 = (double*)malloc((size_t)NY * sizeof(double));
    float *xf = (float*)malloc((size_t)NX * sizeof(float)), *dyf = (float*)malloc((size_t)NY * sizeof(float));
    float *out = (float*)malloc((size_t)NY * sizeof(float)), *an = (float*)malloc((size_t)NX * sizeof(float));
    float *work = (float*)malloc((size_t)(2 * T * T) * sizeof(float)), *yff = (float*)malloc((size_t)NY * sizeof(float));
    attn_ctx c;
    double e;
    qt_seed(seed);
    fill(x, NX, 1.0);
    fill(dy, NY, 1.0);
    to_f32(x, xf, NX); to_f32(dy, dyf, NY);
    for (i = 0; i < NX; ++i) x[i] = (double)xf[i];
    for (i = 0; i < NY; ++i) dy[i] = (double)dyf[i];
    c.T = T; c.nh = NH; c.nkv = NKV; c.hd = HD;
    QT_CHECK(quarot_train_attention_work(T) == 2 * T * T);
    QT_OK(quarot_train_attention_f32(xf, QD, xf + NY, KVD, xf + NY + T * KVD, KVD, T, NH, NKV, HD, out, QD, work, NULL));
    attn64(&c, x, y64);
    to_f32(y64, yff, NY);
    QT_CHECKF(qt_rel_diff(out, yff, NY) < 2e-6, "T %d forward %.3g", (int)T, qt_rel_diff(out, yff, NY));
    QT_OK(quarot_train_attention_backward_f32(xf, QD, xf + NY, KVD, xf + NY + T * KVD, KVD, dyf, QD, T, NH, NKV, HD, an,
                                              an + NY, an + NY + T * KVD, work, NULL));
    fd_grad_every(attn64, &c, x, NX, dy, NY, fd, stride);
    e = grad_err_every(an, fd, NY, 0, stride);
    QT_CHECKF(e < FD_TOL, "T %d dq error %.3g", (int)T, e);
    e = grad_err_every(an + NY, fd + NY, T * KVD, NY, stride);
    QT_CHECKF(e < FD_TOL, "T %d dk error %.3g", (int)T, e);
    e = grad_err_every(an + NY + T * KVD, fd + NY + T * KVD, T * KVD, NY + T * KVD, stride);
    QT_CHECKF(e < FD_TOL, "T %d dv error %.3g", (int)T, e);
    free(x); free(dy); free(fd); free(y64); free(xf); free(dyf); free(out); free(an); free(work); free(yff);
}

static void test_attention(void) {
    enum { T = 7, NH = 4, NKV = 2, HD = 4, QD = NH * HD, KVD = NKV * HD };
    float xf[T * (QD + 2 * KVD)], out[T * QD];
    memset(xf, 0, sizeof xf);
    attn_case(T, NH, NKV, HD, 1, 14);
    /* three query blocks (64, 64, 17): every key range and the blocks' diagonal squares */
    attn_case(145, 2, 1, 4, qt_quick() ? 23 : 5, 15);
    /* bad geometry */
    QT_ERR(quarot_train_attention_f32(xf, QD, xf, KVD, xf, KVD, T, 3, 2, HD, out, QD, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_train_attention_f32(xf, QD - 1, xf, KVD, xf, KVD, T, NH, NKV, HD, out, QD, NULL, NULL), QUAROT_ERR_INVALID_ARGUMENT);
}

/* ---- the softmax's exponential: every ISA the same bits as the scalar kernel, exp to 3e-7 --------- */

static void test_exp_sum(void) {
    enum { N = 1000 };
    static float x[N], a[N], b[N];
    static const int ns[] = { 1, 7, 15, 16, 17, 31, 64, 255, 1000 };
    double worst = 0.0;
    int i, c, k;
    for (i = 0; i < N; ++i) x[i] = -90.0f + 180.0f * (float)i / (float)(N - 1);
    x[3] = -87.0f; x[4] = -86.99f; x[5] = 88.0f; x[6] = 0.0f; x[7] = -0.0f;
    for (c = 0; c < (int)(sizeof ns / sizeof ns[0]); ++c) {
        double sa, sb;
        memcpy(a, x, sizeof x);
        memcpy(b, x, sizeof x);
        sa = quarot_train_exp_sum_f32(a, ns[c], 0.5f, QUAROT_ISA_REF);
        sb = quarot_train_exp_sum_f32(b, ns[c], 0.5f, QUAROT_ISA_DEFAULT);
        QT_CHECKF(memcmp(a, b, (size_t)ns[c] * sizeof(float)) == 0 && sa == sb, "n %d: ISA %s differs from ref", ns[c],
                  quarot_isa_name(quarot_isa_best()));
        QT_CHECK(memcmp(a + ns[c], x + ns[c], (size_t)(N - ns[c]) * sizeof(float)) == 0);   /* nothing past n */
    }
    for (i = 0; i < N; ++i) {
        double v = (double)(x[i] - 0.5f), want = exp(v > 88.0 ? 88.0 : v);
        if (v < -87.0) {
            QT_CHECK(a[i] == 0.0f);
            continue;
        }
        if (fabs((double)a[i] - want) / want > worst) worst = fabs((double)a[i] - want) / want;
    }
    QT_CHECKF(worst < 3e-7, "relative error %.3g", worst);
    /* the sum: lanes i mod 16 in float, then the 16 in double */
    {
        float part[16] = { 0 };
        double s = 0.0;
        memcpy(a, x, sizeof x);
        for (k = 0; k < N; ++k) {
            memcpy(b, x + k, sizeof(float));
            quarot_train_exp_sum_f32(b, 1, 0.5f, QUAROT_ISA_REF);
            part[k & 15] += b[0];
        }
        for (k = 0; k < 16; ++k) s += (double)part[k];
        QT_CHECK(quarot_train_exp_sum_f32(a, N, 0.5f, QUAROT_ISA_DEFAULT) == s);
    }
    QT_CHECK(quarot_train_exp_sum_f32(NULL, 4, 0.0f, QUAROT_ISA_DEFAULT) == 0.0);
}

/* ---- cross-entropy ------------------------------------------------------------------------ */

typedef struct ce_ctx { int64_t rows, V; const int32_t* tg; } ce_ctx;

static void ce64(const void* c, const double* x, double* y) {
    const ce_ctx* k = (const ce_ctx*)c;
    int64_t r, j;
    y[0] = 0.0;
    for (r = 0; r < k->rows; ++r) {
        double mx = -1e300, s = 0.0;
        if (k->tg[r] < 0) continue;
        for (j = 0; j < k->V; ++j) if (x[r * k->V + j] > mx) mx = x[r * k->V + j];
        for (j = 0; j < k->V; ++j) s += exp(x[r * k->V + j] - mx);
        y[0] += mx + log(s) - x[r * k->V + k->tg[r]];
    }
}

static void test_cross_entropy(void) {
    enum { R = 4, V = 11 };
    double x[R * V], fd[R * V], one = 0.25, l64;
    float xf[R * V], dl[R * V];
    int32_t tg[R] = {3, -1, 10, 0};
    ce_ctx c;
    int64_t i;
    double l;
    qt_seed(15);
    fill(x, R * V, 2.0);
    to_f32(x, xf, R * V);
    for (i = 0; i < R * V; ++i) x[i] = (double)xf[i];
    c.rows = R; c.V = V; c.tg = tg;
    l = quarot_train_cross_entropy_f32(xf, R, V, tg, 0.25f, dl);
    ce64(&c, x, &l64);
    QT_NEAR(l, l64, 1e-12 * fabs(l64));
    fd_grad(ce64, &c, x, R * V, &one, 1, fd);
    QT_CHECKF(grad_err(dl, fd, R * V) < FD_TOL, "error %.3g", grad_err(dl, fd, R * V));
    for (i = 0; i < V; ++i) QT_CHECK(dl[V + i] == 0.0f);   /* ignored row */
    QT_NEAR(quarot_train_cross_entropy_f32(xf, R, V, tg, 1.0f, NULL), l, 0.0);
}

typedef struct kl_ctx { int64_t rows, V; const int32_t* mask; const double* p; } kl_ctx;

static void kl64(const void* c, const double* x, double* y) {
    const kl_ctx* k = (const kl_ctx*)c;
    int64_t r, j;
    y[0] = 0.0;
    for (r = 0; r < k->rows; ++r) {
        double mx = -1e300, s = 0.0, lse;
        if (k->mask[r] < 0) continue;
        for (j = 0; j < k->V; ++j) if (x[r * k->V + j] > mx) mx = x[r * k->V + j];
        for (j = 0; j < k->V; ++j) s += exp(x[r * k->V + j] - mx);
        lse = mx + log(s);
        for (j = 0; j < k->V; ++j) y[0] += k->p[r * k->V + j] * (log(k->p[r * k->V + j]) - (x[r * k->V + j] - lse));
    }
}

static void test_kl_div(void) {
    enum { R = 3, V = 9 };
    double x[R * V], p[R * V], fd[R * V], one = 0.5, l64;
    float xf[R * V], pf[R * V], dl[R * V];
    int32_t mask[R] = {0, 0, -1};
    kl_ctx c;
    int64_t i, j;
    double l;
    qt_seed(17);
    fill(x, R * V, 1.5);
    to_f32(x, xf, R * V);
    for (i = 0; i < R; ++i) {   /* a reference distribution per row */
        double s = 0.0;
        for (j = 0; j < V; ++j) s += (p[i * V + j] = exp(qt_normal()));
        for (j = 0; j < V; ++j) pf[i * V + j] = (float)(p[i * V + j] / s);
    }
    for (i = 0; i < R * V; ++i) { x[i] = (double)xf[i]; p[i] = (double)pf[i]; }
    c.rows = R; c.V = V; c.mask = mask; c.p = p;
    l = quarot_train_kl_div_f32(xf, R, V, pf, mask, 0.5f, dl);
    kl64(&c, x, &l64);
    QT_NEAR(l, l64, 1e-12 * fabs(l64) + 1e-15);
    QT_CHECK(l > 0.0);
    fd_grad(kl64, &c, x, R * V, &one, 1, fd);
    QT_CHECKF(grad_err(dl, fd, R * V) < FD_TOL, "error %.3g", grad_err(dl, fd, R * V));
    /* zero at p = softmax(logits) */
    for (i = 0; i < R; ++i) {
        double mx = x[i * V], s = 0.0;
        for (j = 0; j < V; ++j) s += exp(x[i * V + j] - mx);
        for (j = 0; j < V; ++j) pf[i * V + j] = (float)(exp(x[i * V + j] - mx) / s);
    }
    QT_CHECK(quarot_train_kl_div_f32(xf, R, V, pf, NULL, 1.0f, NULL) < 1e-6);
}

/* ---- the Stiefel step --------------------------------------------------------------------- */

static double orth_err(const double* r, int64_t n) {
    double w = 0.0;
    int64_t i, j, k;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) s += r[k * n + i] * r[k * n + j];
            s -= i == j ? 1.0 : 0.0;
            if (fabs(s) > w) w = fabs(s);
        }
    return w;
}

/* Procrustes: L(R) = ||A R - B||^2 / 2, G = A^T (A R - B) */
static double procrustes(const double* a, const double* b, const double* r, int64_t m, int64_t n, double* g) {
    double* e = (double*)malloc((size_t)(m * n) * sizeof(double));
    double l = 0.0;
    int64_t i, j, k;
    for (i = 0; i < m; ++i)
        for (j = 0; j < n; ++j) {
            double s = -b[i * n + j];
            for (k = 0; k < n; ++k) s += a[i * n + k] * r[k * n + j];
            e[i * n + j] = s;
            l += 0.5 * s * s;
        }
    if (g)
        for (i = 0; i < n; ++i)
            for (j = 0; j < n; ++j) {
                double s = 0.0;
                for (k = 0; k < m; ++k) s += a[k * n + i] * e[k * n + j];
                g[i * n + j] = s;
            }
    free(e);
    return l;
}

static void test_stiefel(void) {
    enum { N = 24, M = 60 };
    double a[M * N], b[M * N], q[N * N], r[N * N], g[N * N], mom[N * N], l0, l, worst = 0.0;
    quarot_stiefel_desc d;
    quarot_stiefel_info info;
    int step, k, reorth = 0;
    int64_t i;
    qt_seed(16);
    fill(a, M * N, 1.0);
    QT_OK(quarot_random_orthogonal_f64(N, 7, q, N, NULL));
    /* B = A Q + noise: the minimizer is near Q */
    for (i = 0; i < M; ++i) {
        int64_t j;
        for (j = 0; j < N; ++j) {
            double s = 0.0;
            for (k = 0; k < N; ++k) s += a[i * N + k] * q[k * N + j];
            b[i * N + j] = s + 0.01 * qt_normal();
        }
    }
    for (i = 0; i < N * N; ++i) r[i] = (i / N == i % N) ? 1.0 : 0.0;
    memset(mom, 0, sizeof mom);
    memset(&d, 0, sizeof d);
    d.lr = 0.01;
    l0 = procrustes(a, b, r, M, N, g);
    for (step = 0; step < 300; ++step) {
        procrustes(a, b, r, M, N, g);
        QT_OK(quarot_stiefel_step_f64(N, r, g, mom, &d, &info, NULL));
        if (orth_err(r, N) > worst) worst = orth_err(r, N);   /* after any re-orthogonalization */
        reorth += info.reorthogonalized;
    }
    l = procrustes(a, b, r, M, N, NULL);
    QT_CHECKF(l < 0.01 * l0, "loss %.4g -> %.4g", l0, l);
    QT_CHECKF(orth_err(r, N) <= 1e-6, "orthogonality %.3g", orth_err(r, N));
    QT_CHECKF(worst <= 1e-6, "largest orthogonality error after a step %.3g", worst);
    QT_CHECKF(reorth < 300, "every step needed re-orthogonalization");
    /* with momentum: also descends and stays orthogonal */
    for (i = 0; i < N * N; ++i) r[i] = (i / N == i % N) ? 1.0 : 0.0;
    memset(mom, 0, sizeof mom);
    d.momentum = 0.9;
    d.lr = 0.002;
    for (step = 0; step < 300; ++step) {
        procrustes(a, b, r, M, N, g);
        QT_OK(quarot_stiefel_step_f64(N, r, g, mom, &d, &info, NULL));
    }
    l = procrustes(a, b, r, M, N, NULL);
    QT_CHECKF(l < 0.01 * l0, "momentum: loss %.4g -> %.4g", l0, l);
    QT_CHECKF(orth_err(r, N) <= 1e-6, "momentum: orthogonality %.3g", orth_err(r, N));
    /* enough fixed-point iterations give the exact Cayley transform R (I - aW/2)(I + aW/2)^-1 of the
       step: check R_new (I + aW/2) = R (I - aW/2) with W rebuilt from G */
    {
        double r0[N * N], w[N * N], m0[N * N], lhs, rhs, worst2 = 0.0, alpha;
        int64_t j;
        for (i = 0; i < N * N; ++i) r0[i] = q[i];
        memcpy(r, r0, sizeof r);
        procrustes(a, b, r, M, N, g);
        for (i = 0; i < N * N; ++i) g[i] *= 30.0;   /* a big step: alpha ||W|| near 1 */
        memset(mom, 0, sizeof mom);
        d.momentum = 0.0;
        d.lr = 1.0;
        d.cayley_iters = 80;
        QT_OK(quarot_stiefel_step_f64(N, r, g, mom, &d, &info, NULL));
        QT_CHECK(!info.reorthogonalized);
        QT_CHECKF(info.orth_error <= 1e-13, "exact Cayley orthogonality %.3g", info.orth_error);
        alpha = info.alpha;
        /* M = -G^T; W = (M R - R^T R M R / 2) - (.)^T */
        for (i = 0; i < N; ++i) for (j = 0; j < N; ++j) m0[i * N + j] = -g[j * N + i];
        {
            double mr[N * N], rmr[N * N], wh[N * N];
            for (i = 0; i < N; ++i) for (j = 0; j < N; ++j) { double s = 0; for (k = 0; k < N; ++k) s += m0[i * N + k] * r0[k * N + j]; mr[i * N + j] = s; }
            for (i = 0; i < N; ++i) for (j = 0; j < N; ++j) { double s = 0; for (k = 0; k < N; ++k) s += r0[i * N + k] * mr[k * N + j]; rmr[i * N + j] = s; }
            for (i = 0; i < N; ++i) for (j = 0; j < N; ++j) { double s = 0; for (k = 0; k < N; ++k) s += r0[k * N + i] * rmr[k * N + j]; wh[i * N + j] = mr[i * N + j] - 0.5 * s; }
            for (i = 0; i < N; ++i) for (j = 0; j < N; ++j) w[i * N + j] = wh[i * N + j] - wh[j * N + i];
        }
        for (i = 0; i < N; ++i)
            for (j = 0; j < N; ++j) {
                lhs = r[i * N + j];
                rhs = r0[i * N + j];
                for (k = 0; k < N; ++k) {
                    lhs += 0.5 * alpha * r[i * N + k] * w[k * N + j];
                    rhs -= 0.5 * alpha * r0[i * N + k] * w[k * N + j];
                }
                if (fabs(lhs - rhs) > worst2) worst2 = fabs(lhs - rhs);
            }
        QT_CHECKF(worst2 < 1e-12, "Cayley identity off by %.3g", worst2);
        QT_CHECKF(alpha <= 1.0 && alpha > 0.0, "alpha %.3g", alpha);
    }
    /* a drifted start is put back on the manifold */
    {
        double r1[N * N];
        memcpy(r1, q, sizeof r1);
        r1[5] += 1e-3;
        memset(g, 0, sizeof g);
        memset(mom, 0, sizeof mom);
        d.cayley_iters = 0;
        QT_OK(quarot_stiefel_step_f64(N, r1, g, mom, &d, &info, NULL));
        QT_CHECK(info.reorthogonalized == 1);
        QT_CHECKF(orth_err(r1, N) <= 1e-12, "after re-orthogonalization %.3g", orth_err(r1, N));
    }
    /* errors */
    d.lr = 0.0;
    QT_ERR(quarot_stiefel_step_f64(N, r, g, mom, &d, &info, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d.lr = 0.1;
    d.momentum = 1.0;
    QT_ERR(quarot_stiefel_step_f64(N, r, g, mom, &d, &info, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d.momentum = 0.0;
    QT_ERR(quarot_stiefel_step_f64(0, r, g, mom, &d, &info, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_ERR(quarot_stiefel_step_f64(N, r, g, mom, NULL, &info, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    memcpy(a, r, sizeof r);
    g[3] = (double)NAN;
    QT_ERR(quarot_stiefel_step_f64(N, r, g, mom, &d, &info, NULL), QUAROT_ERR_NONFINITE);
    QT_CHECK(memcmp(a, r, sizeof r) == 0);
}

int main(void) {
    QT_RUN(test_rmsnorm);
    QT_RUN(test_rope);
    QT_RUN(test_glu);
    QT_RUN(test_exp_sum);
    QT_RUN(test_attention);
    QT_RUN(test_cross_entropy);
    QT_RUN(test_kl_div);
    QT_RUN(test_stiefel);
    return qt_finish("test_train_ops");
}
