/* quarot.h's >>quantize stage (and the >>quant clip search it uses), on real activations.

   - GPTQ beats RTN on the layer output: for every linear of stories260K rotated with QuaRot's recipe
     (R1 + R2 + online hooks), calibrated on ../shared/data/tinystories_calib.txt through the stage
     driven by the reference forward (eval/qx_wquant), the exact layer-output error
     ||X W^T - X W^^T||^2 = tr(D H D^T)/2 on the calibration rows is below RTN's for the same
     quantizer (4-bit symmetric per channel; and asymmetric with the clip search). Skips without
     ../shared.
   - Sequential mode: each quantized linear equals quarot_quantize_linear on its original weights
     with the Hessian of its input in the QUANTIZED model (earlier layers and earlier steps of the same
     layer quantized, online hooks applied), bit for bit, and differs from the one the FP model gives
     for some later-layer linear.
   - The clip search never increases its objective: for the squared error and QuaRot's
     sum |Q(w)-w|^2.4, the chosen scale scores at most what clip 1.0 and other grid ratios score.
   - Bad input: calibration too short for nsamples, a group size that divides no row (the tensor is
     named), bits outside 2..8, GPTQ on an all-zero Hessian, NaN in a Hessian or in input rows; and a
     Cholesky failure that more damping repairs (one retry), or does not (an error naming the column). */
#include "quarot.h"
#include "qt.h"
#include "stories_util.h"
#include "eval/qx_calib.h"
#include "formats/qx_llama2c.h"
#include "model/qx_model.h"
#include "eval/qx_wquant.h"

/* ---- clip search ---- */

static double lp_obj(const float* x, const float* y, int64_t n, int lp) {
    double e = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) {
        double d = fabs((double)x[i] - (double)y[i]);
        e += lp ? pow(d, 2.4) : d * d;
    }
    return e;
}

static void test_clip_search_objective(void) {
    enum { ROWS = 40, COLS = 96 };
    static float w[ROWS * COLS], a[ROWS * COLS], b[ROWS * COLS];
    int r, mode, asym, k, improved = 0;
    for (r = 0; r < ROWS * COLS; ++r) {
        double u = qt_uniform() - 0.5;
        w[r] = (float)(u * (r % 17 == 0 ? 8.0 : 1.0));   /* a few outliers, so clipping pays */
    }
    for (mode = 1; mode <= 2; ++mode)
        for (asym = 0; asym <= 1; ++asym) {
            quarot_quant_desc d;
            memset(&d, 0, sizeof d);
            d.bits = 3;
            d.asymmetric = asym;
            memcpy(a, w, sizeof w);
            d.clip_search = mode;
            QT_OK(quarot_fake_quant_f32(a, ROWS, COLS, COLS, &d));
            for (k = 0; k <= 60; k += 20) {    /* fixed ratios 1.0, 0.8, 0.6, 0.4 */
                memcpy(b, w, sizeof w);
                d.clip_search = 0;
                d.clip_ratio = (float)((100 - k) / 100.0);
                QT_OK(quarot_fake_quant_f32(b, ROWS, COLS, COLS, &d));
                for (r = 0; r < ROWS; ++r) {
                    double ea = lp_obj(w + r * COLS, a + r * COLS, COLS, mode == 2);
                    double eb = lp_obj(w + r * COLS, b + r * COLS, COLS, mode == 2);
                    if (mode == 1 && k > 50) continue;   /* the MSE grid stops at 0.5 */
                    /* the grid's ratios are doubles, the fixed ones floats: equal within 1e-6 */
                    QT_CHECKF(ea <= eb * (1.0 + 1e-6), "mode %d asym %d row %d: searched %.6g > ratio %.2f %.6g", mode, asym, r, ea,
                              d.clip_ratio, eb);
                    if (k == 0 && ea < eb * 0.999) improved++;
                }
            }
        }
    QT_CHECK(improved > 0);   /* the search does something on outlier rows */
    {   /* clip_search 3 is refused */
        quarot_quant_desc d;
        memset(&d, 0, sizeof d);
        d.clip_search = 3;
        QT_ERR(quarot_fake_quant_f32(a, 1, COLS, COLS, &d), QUAROT_ERR_INVALID_ARGUMENT);
    }
}

/* ---- quarot_quantize_linear on synthetic data: errors, retries ---- */

static void test_linear_bad_inputs(void) {
    enum { OUT = 8, IN = 16 };
    float w[OUT * IN], x[32 * IN];
    double h[IN * IN];
    quarot_quantize_desc d;
    quarot_qlinear_report rep;
    char err[200];
    int i;
    for (i = 0; i < OUT * IN; ++i) w[i] = (float)(qt_uniform() - 0.5);
    for (i = 0; i < 32 * IN; ++i) x[i] = (float)(qt_uniform() - 0.5);
    memset(&d, 0, sizeof d);
    d.method = QUAROT_WQUANT_GPTQ;
    memset(h, 0, sizeof h);
    /* all-zero Hessian: a dead input */
    QT_ERR(quarot_quantize_linear(w, OUT, IN, IN, h, 100, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(err, "dead input") != NULL, "%s", err);
    /* no Hessian at all */
    QT_ERR(quarot_quantize_linear(w, OUT, IN, IN, NULL, 0, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    /* NaN in H */
    QT_OK(quarot_hessian_accumulate_f64(h, IN, x, 32, IN));
    h[3 * IN + 5] = NAN;
    QT_ERR(quarot_quantize_linear(w, OUT, IN, IN, h, 32, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL), QUAROT_ERR_NONFINITE);
    QT_CHECKF(strstr(err, "NaN") != NULL, "%s", err);
    /* bits outside 2..8, group not dividing the row */
    memset(h, 0, sizeof h);
    QT_OK(quarot_hessian_accumulate_f64(h, IN, x, 32, IN));
    d.weight.bits = 9;
    QT_ERR(quarot_quantize_linear(w, OUT, IN, IN, h, 32, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d.weight.bits = 1;
    QT_ERR(quarot_quantize_linear(w, OUT, IN, IN, h, 32, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    d.weight.bits = 4;
    d.weight.group_size = 5;
    QT_ERR(quarot_quantize_linear(w, OUT, IN, IN, h, 32, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(err, "group size 5") != NULL, "%s", err);
    d.weight.group_size = 0;
    /* a good call reports consistent numbers: GPTQ below RTN on its own Hessian */
    QT_OK(quarot_quantize_linear(w, OUT, IN, IN, h, 32, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL));
    QT_CHECK(rep.err < rep.err_rtn && rep.err > 0.0 && rep.ref > rep.err);
    QT_EQ_INT(rep.retries, 0);
    /* dead_fallback: an all-zero Hessian gives RTN's weights (bit for bit), reported as a fallback */
    {
        float wr[OUT * IN], wf[OUT * IN];
        for (i = 0; i < OUT * IN; ++i) w[i] = wr[i] = wf[i] = (float)(qt_uniform() - 0.5);
        QT_OK(quarot_fake_quant_f32(wr, OUT, IN, IN, &d.weight));
        memset(h, 0, sizeof h);
        d.dead_fallback = 1;
        QT_OK(quarot_quantize_linear(wf, OUT, IN, IN, h, 100, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL));
        QT_CHECK(rep.fallback == 1 && rep.method == QUAROT_WQUANT_RTN && memcmp(wf, wr, sizeof wr) == 0);
        QT_OK(quarot_quantize_linear(w, OUT, IN, IN, NULL, 0, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL));   /* no rows */
        QT_CHECK(rep.fallback == 1 && memcmp(w, wr, sizeof wr) == 0);
    }
}

static void test_linear_damping_retry(void) {
    enum { IN = 2 };
    float w[2 * IN] = {0.3f, -0.7f, 0.1f, 0.25f};
    double h[IN * IN] = {1.0, 0.0, 0.0, -0.006};   /* not positive definite until damped by ~0.05 */
    quarot_quantize_desc d;
    quarot_qlinear_report rep;
    char err[200];
    memset(&d, 0, sizeof d);
    d.method = QUAROT_WQUANT_GPTQ;
    QT_OK(quarot_quantize_linear(w, 2, IN, IN, h, 10, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL));
    QT_EQ_INT(rep.retries, 1);
    h[3] = -0.9;                                   /* no damping up to 1.0 of the mean repairs this */
    QT_ERR(quarot_quantize_linear(w, 2, IN, IN, h, 10, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL), QUAROT_ERR_NOT_CONVERGED);
    QT_CHECKF(strstr(err, "Cholesky") != NULL && strstr(err, "column 1") != NULL, "%s", err);
    d.damp_retries = -1;                           /* no retries: the first case fails */
    h[3] = -0.006;
    QT_ERR(quarot_quantize_linear(w, 2, IN, IN, h, 10, &d, NULL, NULL, NULL, &rep, err, sizeof err, NULL), QUAROT_ERR_NOT_CONVERGED);
}

/* ---- stories260K ---- */

static struct {
    int ok;
    qx_store orig, rot;
    quarot_online_list hooks;
    qx_windows calib;
} S;

static int setup(void) {
    char calib_path[4096];
    qx_tokenizer tk;
    qx_calib_text ct;
    qx_err e;
    quarot_rotate_desc d;
    quarot_model m;
    qx_binding b;
    int r;
    if (S.ok) return S.ok;
    S.ok = -1;
    if ((r = stories_model(&S.orig)) <= 0) return S.ok = r;
    if (!qt_shared_path("models/stories260K/tok512.bin")) return -1;
    if (!qt_shared_path("data/tinystories_calib.txt")) return S.ok = 0;
    strcpy(calib_path, qt_shared_path("data/tinystories_calib.txt"));
    if (stories_tokenizer(&tk) <= 0) return -1;
    if (qx_calib_text_load(calib_path, &ct, &e) != QUAROT_OK) { printf("    %s\n", e.msg); return -1; }
    /* 16 windows of 64 tokens (QT_QUICK: 6 of 32): a small but real calibration set */
    if (qx_calib_windows(&ct, &tk, QX_WINDOWING_STREAM, qt_quick() ? 32 : 64, qt_quick() ? 6 : 16, &S.calib, &e) != QUAROT_OK) {
        printf("    %s\n", e.msg);
        return -1;
    }
    qx_calib_text_free(&ct);
    qx_tokenizer_free(&tk);
    if (qx_store_clone(&S.orig, &S.rot) != QUAROT_OK) return -1;
    quarot_online_list_init(&S.hooks, NULL);
    memset(&d, 0, sizeof d);
    d.online = 1;
    d.online_out = &S.hooks;
    qx_model_bind(&m, &b, &S.rot);
    if (quarot_rotate_model(&m, &d) != QUAROT_OK) { printf("    rotate: %s\n", m.error); return -1; }
    qx_model_sync(&m, &S.rot);
    return S.ok = 1;
}

typedef struct rep_log {
    int n, worse;
    char names[64][QUAROT_NAME_MAX];
    double err[64], err_rtn[64];
} rep_log;

static quarot_result log_linear(void* user, const quarot_qlinear_report* r) {
    rep_log* L = (rep_log*)user;
    if (L->n < 64) {
        snprintf(L->names[L->n], QUAROT_NAME_MAX, "%s", r->name);
        L->err[L->n] = r->err;
        L->err_rtn[L->n] = r->err_rtn;
        L->n++;
    }
    if (!(r->err < r->err_rtn)) L->worse++;
    return QUAROT_OK;
}

static void test_gptq_beats_rtn_on_stories(void) {
    int cfg, i;
    if (setup() <= 0) { QT_SKIP("../shared/models/stories260K or the calibration text not found"); return; }
    for (cfg = 0; cfg < 2; ++cfg) {
        qx_store q;
        qx_wq_opts o;
        qx_err e;
        rep_log L;
        memset(&L, 0, sizeof L);
        memset(&o, 0, sizeof o);
        o.desc.method = QUAROT_WQUANT_GPTQ;
        o.desc.weight.bits = 4;
        if (cfg == 1) {                 /* asymmetric, QuaRot's clip search, act-order */
            o.desc.weight.asymmetric = 1;
            o.desc.weight.clip_search = QUAROT_CLIP_SEARCH_LP;
            o.desc.act_order = 1;
        }
        o.desc.nsamples = S.calib.n;
        o.desc.on_linear = log_linear;
        o.desc.user_data = &L;
        o.hooks = &S.hooks;
        o.calib = &S.calib;
        QT_OK(qx_store_clone(&S.rot, &q));
        QT_OK(qx_wq_quantize(&q, &o, NULL, &e));
        QT_EQ_INT(L.n, 35);             /* 5 layers x 7 linears */
        for (i = 0; i < L.n; ++i)
            QT_CHECKF(L.err[i] < L.err_rtn[i] && L.err[i] > 0.0, "cfg %d %s: GPTQ %.6g, RTN %.6g", cfg, L.names[i], L.err[i], L.err_rtn[i]);
        qx_store_free(&q);
    }
}

/* The Hessian of every linear's input, running `s` (with hooks) over the calibration windows. */
typedef struct hcap {
    const char* want;
    double* h;
    int64_t n, rows;
} hcap;

static void cap_fn(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    hcap* c = (hcap*)user;
    (void)layer;
    if (strcmp(name, c->want) != 0) return;
    c->n = n;
    if (quarot_hessian_accumulate_f64(c->h, n, x, rows, n) == QUAROT_OK) c->rows += rows;
}

static int64_t hessian_of(const qx_store* s, const char* name, double* h, int64_t cap_n) {
    qx_ek_forward ef;
    hcap c;
    qx_err e;
    int64_t w;
    memset(&c, 0, sizeof c);
    c.want = name;
    c.h = h;
    memset(h, 0, (size_t)(cap_n * cap_n) * sizeof(double));
    if (qx_ek_forward_init(&ef, s, &S.hooks, NULL, cap_fn, &c, &e) != QUAROT_OK) return -1;
    for (w = 0; w < S.calib.n; ++w) {
        int64_t a = S.calib.offset[w];
        if (qx_forward_window(&ef.f, S.calib.tokens + a, S.calib.offset[w + 1] - a, NULL, &e) != QUAROT_OK) break;
    }
    qx_ek_forward_free(&ef);
    return c.rows;
}

static void test_sequential_mode(void) {
    static const char* const sfx[7] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                       "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                       "mlp.down_proj.weight"};
    static double h[172 * 172];
    static float w[172 * 172];
    qx_store q;
    qx_wq_opts o;
    qx_err e;
    int l, k, differs = 0, checked = 0;
    if (setup() <= 0) { QT_SKIP("../shared/models/stories260K or the calibration text not found"); return; }
    memset(&o, 0, sizeof o);
    o.desc.method = QUAROT_WQUANT_GPTQ;
    o.desc.nsamples = S.calib.n;
    o.hooks = &S.hooks;
    o.calib = &S.calib;
    QT_OK(qx_store_clone(&S.rot, &q));
    QT_OK(qx_wq_quantize(&q, &o, NULL, &e));
    for (l = 0; l < 5; l += (qt_quick() ? 4 : 1))
        for (k = 0; k < 7; ++k) {
            char name[128];
            const quarot_tensor *t0, *tq;
            quarot_quantize_desc d;
            int64_t rows, out, in, r, same = 1, j;
            snprintf(name, sizeof name, "model.layers.%d.%s", l, sfx[k]);
            t0 = qx_store_find(&S.rot, name);
            tq = qx_store_find(&q, name);
            if (!t0 || !tq) { QT_CHECKF(0, "%s missing", name); continue; }
            in = t0->ne[0];
            out = t0->ne[1];
            memset(&d, 0, sizeof d);
            d.method = QUAROT_WQUANT_GPTQ;
            /* the quantized model's Hessian reproduces the stage's weights exactly */
            rows = hessian_of(&q, name, h, in);
            QT_CHECK(rows > 0);
            for (r = 0; r < out; ++r) QT_OK(quarot_tensor_get_row_f32(t0, r, w + r * in));
            QT_OK(quarot_quantize_linear(w, out, in, in, h, rows, &d, NULL, NULL, NULL, NULL, NULL, 0, NULL));
            for (r = 0; r < out && same; ++r) {
                const float* qr = (const float*)tq->data + r * in;
                for (j = 0; j < in; ++j) if (w[r * in + j] != qr[j]) { same = 0; break; }
            }
            QT_CHECKF(same, "%s: not what GPTQ gives on the quantized model's Hessian", name);
            checked++;
            /* the FP model's Hessian gives other weights for linears after the first step */
            if (l > 0 || k > 2) {
                rows = hessian_of(&S.rot, name, h, in);
                for (r = 0; r < out; ++r) QT_OK(quarot_tensor_get_row_f32(t0, r, w + r * in));
                QT_OK(quarot_quantize_linear(w, out, in, in, h, rows, &d, NULL, NULL, NULL, NULL, NULL, 0, NULL));
                for (r = 0, same = 1; r < out && same; ++r)
                    for (j = 0; j < in; ++j) if (w[r * in + j] != ((const float*)tq->data)[r * in + j]) { same = 0; break; }
                differs += !same;
            }
        }
    QT_CHECK(checked >= 14);
    QT_CHECK(differs > 0);
    qx_store_free(&q);
}

/* Scale migration: on the real Hessian of layer 0's q/k/v input, the chosen alpha (in [-1, 1])
   never raises the RTN layer-output error, s is normalized (geometric mean 1), step 0 is alpha 0
   with s = 1 and the search equals its pieces (the chosen step's scales, its errors summed); through the
   stage (RTN + migrate) the norm gains change where alpha > 0, and the product of the migrated FP32
   pieces (x diag(s)) (W diag(1/s))^T equals x W^T to float rounding. */
/* migrate_alpha reported per layer for q_proj ([0]) and gate_proj ([1]) */
static double g_mig_alpha[5][2];
static quarot_result on_mig_report(void* u, const quarot_qlinear_report* r) {
    (void)u;
    if (r->layer >= 0 && r->layer < 5 && (strstr(r->name, "q_proj") || strstr(r->name, "gate_proj")))
        g_mig_alpha[r->layer][strstr(r->name, "gate_proj") ? 1 : 0] = r->migrate_alpha;
    return QUAROT_OK;
}

static void test_scale_migration(void) {
    static double h[64 * 64];
    static float wq[64 * 64], wk[32 * 64], wv[32 * 64];
    float s[64];
    float* ws[3];
    int64_t outs[3] = {64, 32, 32}, r, j;
    const char* nm[3] = {"model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.k_proj.weight",
                         "model.layers.0.self_attn.v_proj.weight"};
    float* bufs[3];
    quarot_quant_desc q;
    double alpha = -1.0, before = 0.0, after = 0.0, lg = 0.0;
    int k;
    if (setup() <= 0) { QT_SKIP("../shared/models/stories260K or the calibration text not found"); return; }
    bufs[0] = wq; bufs[1] = wk; bufs[2] = wv;
    QT_CHECK(hessian_of(&S.rot, nm[0], h, 64) > 0);
    for (k = 0; k < 3; ++k) {
        const quarot_tensor* t = qx_store_find(&S.rot, nm[k]);
        QT_CHECK(t != NULL);
        if (!t) return;
        for (r = 0; r < outs[k]; ++r) QT_OK(quarot_tensor_get_row_f32(t, r, bufs[k] + r * 64));
        ws[k] = bufs[k];
    }
    memset(&q, 0, sizeof q);
    q.bits = 4;
    QT_OK(quarot_scale_migration_search(h, 64, ws, outs, 3, &q, s, &alpha, &before, &after, NULL));
    QT_CHECKF(after <= before && alpha >= -1.0 && alpha <= 1.0, "alpha %.2f: %.6g -> %.6g", alpha, before, after);
    {   /* the search is its two pieces: step 0 is s = 1, and the chosen step's summed errors are `after` */
        static double d[64];
        float sk[64];
        double ak = 9.0, sum = 0.0, ek;
        int found = 0;
        for (j = 0; j < 64; ++j) d[j] = h[j * 64 + j];
        QT_OK(quarot_scale_migration_scales(d, 64, 0, sk, &ak));
        for (j = 0; j < 64; ++j) found += sk[j] == 1.0f;
        QT_CHECK(ak == 0.0 && found == 64);
        for (k = 0, found = 0; k < QUAROT_MIGRATION_STEPS; ++k) {
            QT_OK(quarot_scale_migration_scales(d, 64, k, sk, &ak));
            if (ak != alpha) continue;
            found++;
            QT_CHECK(memcmp(sk, s, sizeof sk) == 0);
            for (r = 0; r < 3; ++r) {
                QT_OK(quarot_scale_migration_error(h, 64, ws[r], outs[r], &q, sk, &ek, NULL));
                sum += ek;
            }
        }
        QT_CHECKF(found == 1 && sum == after, "alpha %.1f: %d steps, errors %.9g vs %.9g", alpha, found, sum, after);
        QT_CHECK(quarot_scale_migration_scales(d, 64, QUAROT_MIGRATION_STEPS, sk, NULL) == QUAROT_ERR_INVALID_ARGUMENT);
    }
    for (j = 0; j < 64; ++j) { QT_CHECK(s[j] > 0.0f); lg += log((double)s[j]); }
    QT_NEAR(lg / 64.0, 0.0, 1e-5);
    printf("    layer 0 q/k/v: alpha %.1f, RTN output error %.4e -> %.4e\n", alpha, before, after);
    {   /* (x s)(W / s)^T == x W^T in FP32 up to rounding */
        float x[64], xs[64];
        double y0 = 0.0, y1 = 0.0, mag = 0.0;
        for (j = 0; j < 64; ++j) { x[j] = (float)(qt_uniform() - 0.5); xs[j] = x[j] * s[j]; }
        for (j = 0; j < 64; ++j) {
            y0 += (double)x[j] * (double)wq[j];
            y1 += (double)xs[j] * (double)(wq[j] / s[j]);
            mag += fabs((double)x[j] * (double)wq[j]);
        }
        QT_NEAR(y0, y1, 1e-6 * mag);
    }
    {   /* through the stage (RTN with migration; rotated model: gains 1): a norm's gains change
           exactly where its readers report alpha != 0, either sign */
        qx_store m;
        qx_wq_opts o;
        qx_err e;
        int l, st, nonzero = 0, negative = 0;
        memset(&o, 0, sizeof o);
        memset(g_mig_alpha, 0, sizeof g_mig_alpha);
        o.desc.migrate = 1;
        o.desc.nsamples = S.calib.n;
        o.desc.on_linear = on_mig_report;
        o.hooks = &S.hooks;
        o.calib = &S.calib;
        QT_OK(qx_store_clone(&S.rot, &m));
        QT_OK(qx_wq_quantize(&m, &o, NULL, &e));
        for (l = 0; l < 5; ++l)
            for (st = 0; st < 2; ++st) {
                char nm2[96];
                const quarot_tensor* g;
                float gv[64];
                int changed = 0;
                snprintf(nm2, sizeof nm2, "model.layers.%d.%s.weight", l, st ? "post_attention_layernorm" : "input_layernorm");
                g = qx_store_find(&m, nm2);
                QT_CHECK(g != NULL);
                if (!g) continue;
                QT_OK(quarot_tensor_get_row_f32(g, 0, gv));
                for (j = 0; j < 64; ++j) changed += gv[j] != 1.0f;
                QT_CHECKF((g_mig_alpha[l][st] != 0.0) == (changed > 0), "%s: alpha %.1f, %d gains changed", nm2,
                          g_mig_alpha[l][st], changed);
                nonzero += g_mig_alpha[l][st] != 0.0;
                negative += g_mig_alpha[l][st] < 0.0;
            }
        QT_CHECK(negative > 0);
        printf("    the stage: alpha != 0 at %d of 10 norms (%d of them < 0), each where the gains changed\n", nonzero, negative);
        qx_store_free(&m);
    }
}

static void test_stage_bad_inputs(void) {
    quarot_model m;
    qx_binding b;
    quarot_quantizer qz;
    quarot_quantize_desc d;
    qx_store q;
    qx_wq_opts o;
    qx_err e;
    float nan_rows[2 * 64];
    int i;
    if (setup() <= 0) { QT_SKIP("../shared/models/stories260K or the calibration text not found"); return; }
    QT_OK(qx_store_clone(&S.rot, &q));
    qx_model_bind(&m, &b, &q);
    memset(&d, 0, sizeof d);
    d.weight.group_size = 32;                /* divides hidden 64, not intermediate 172 */
    QT_ERR(quarot_quantizer_init(&qz, &m, &d), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(qz.error, "model.layers.0.mlp.down_proj.weight") != NULL, "%s", qz.error);
    d.weight.group_size = 43;                /* divides 172, not 64 */
    QT_ERR(quarot_quantizer_init(&qz, &m, &d), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(qz.error, "q_proj.weight") != NULL, "%s", qz.error);
    /* keep_indivisible: down_proj (172 columns) is left as it is, the others quantized by groups of 32,
       and its step wants no calibration rows */
    {
        quarot_tensor dn;
        float before[256], after[256];   /* a row of 172 */
        d.weight.group_size = 32;
        d.keep_indivisible = 1;
        d.method = QUAROT_WQUANT_GPTQ;       /* no rows fed: RTN by dead_fallback, but steps 0-2 ask for rows */
        d.dead_fallback = 1;
        QT_OK(quarot_quantizer_init(&qz, &m, &d));
        QT_OK(m.get_tensor(m.user_data, "model.layers.0.mlp.down_proj.weight", &dn));
        QT_OK(quarot_tensor_get_row_f32(&dn, 0, before));
        QT_OK(quarot_quantizer_begin_layer(&qz, 0));
        while (quarot_quantizer_pending(&qz)) {
            QT_CHECK(quarot_quantizer_wants_data(&qz) == (qz.step < 3));
            QT_OK(quarot_quantizer_step(&qz));
        }
        QT_OK(quarot_quantizer_end_layer(&qz));
        QT_EQ_INT(qz.linears_done, 6);
        QT_OK(m.get_tensor(m.user_data, "model.layers.0.mlp.down_proj.weight", &dn));
        QT_OK(quarot_tensor_get_row_f32(&dn, 0, after));
        QT_CHECK(dn.ne[0] == 172 && memcmp(before, after, 172 * sizeof(float)) == 0);
        quarot_quantizer_free(&qz);
        d.keep_indivisible = d.dead_fallback = 0;
        d.method = QUAROT_WQUANT_RTN;
    }
    d.weight.group_size = 0;
    d.weight.bits = 9;
    QT_ERR(quarot_quantizer_init(&qz, &m, &d), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(qz.error, "2..8") != NULL, "%s", qz.error);
    d.weight.bits = 4;
    d.act.a_bits = 1;
    QT_ERR(quarot_quantizer_init(&qz, &m, &d), QUAROT_ERR_INVALID_ARGUMENT);
    d.act.a_bits = 4;
    /* NaN in a linear's input rows: named, nothing accumulated */
    d.method = QUAROT_WQUANT_GPTQ;
    QT_OK(quarot_quantizer_init(&qz, &m, &d));
    QT_OK(quarot_quantizer_begin_layer(&qz, 0));
    QT_CHECK(quarot_quantizer_wants(&qz, "model.layers.0.self_attn.q_proj.weight"));
    QT_CHECK(!quarot_quantizer_wants(&qz, "model.layers.0.self_attn.k_proj.weight"));   /* same input as q */
    QT_CHECK(!quarot_quantizer_wants(&qz, "model.layers.0.mlp.down_proj.weight"));      /* a later step */
    for (i = 0; i < 2 * 64; ++i) nan_rows[i] = (float)i;
    nan_rows[70] = NAN;
    QT_ERR(quarot_quantizer_add(&qz, "model.layers.0.self_attn.q_proj.weight", nan_rows, 2, 64), QUAROT_ERR_NONFINITE);
    QT_CHECKF(strstr(qz.error, "q_proj") != NULL, "%s", qz.error);
    /* no rows at all: GPTQ refuses the dead input, naming the linear */
    QT_ERR(quarot_quantizer_step(&qz), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(qz.error, "model.layers.0.self_attn.q_proj.weight") != NULL && strstr(qz.error, "dead input") != NULL, "%s", qz.error);
    quarot_quantizer_free(&qz);
    /* calibration shorter than nsamples */
    memset(&o, 0, sizeof o);
    o.desc.method = QUAROT_WQUANT_GPTQ;
    o.desc.nsamples = S.calib.n + 1;
    o.hooks = &S.hooks;
    o.calib = &S.calib;
    QT_ERR(qx_wq_quantize(&q, &o, NULL, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(e.msg, "too short") != NULL, "%s", e.msg);
    qx_store_free(&q);
}

int main(void) {
    QT_RUN(test_clip_search_objective);
    QT_RUN(test_linear_bad_inputs);
    QT_RUN(test_linear_damping_retry);
    QT_RUN(test_gptq_beats_rtn_on_stories);
    QT_RUN(test_sequential_mode);
    QT_RUN(test_scale_migration);
    QT_RUN(test_stage_bad_inputs);
    if (S.ok > 0) {
        qx_store_free(&S.orig);
        qx_store_free(&S.rot);
        quarot_online_list_free(&S.hooks);
        qx_windows_free(&S.calib);
    }
    return qt_finish("test_quantize");
}
