/* The reference forward pass (examples/model/qx_forward.c) against independent truth:
   - a separate, deliberately naive double-precision forward written here (per token, per head, trig
     computed on the spot, no GEMM, no KV cache) for every family: logits within 2e-5 of the logit
     scale (the forward runs in float);
   - window (all tokens at once) vs incremental decoding with the KV cache: within 1e-5 relative;
   - RoPE facts on captured q/k: norms preserved, pair (i0, i1) of position p is pair of position 0
     rotated by p * theta^(-2i/d) in the configured layout, q_t . k_s depends only on t - s;
   - GQA: 4 query heads on 2 KV heads == the same model with the K/V heads duplicated (4 KV heads);
   - OPT positions: position p reads row p + 2 of embed_positions (rows 0, 1 never);
   - qk-norm: scaling q_proj/k_proj does not change a qwen3 model, does change a llama model;
   - hooks: call counts, shapes and names; online rotations with orthogonal Q and the matching weights
     rotated offline (W_down Q, W_o Q, q Q / k Q) leave the logits unchanged;
   - fake quantization: 8 bits everywhere stays close to FP, 4 bits is clearly worse; capture sees
     activations before quantization;
   - f16 / bf16 stores, errors for bad inputs;
   - stories260K (../shared, skipped when absent): greedy text, FP and W4A4 perplexity. */
#include "quarot.h"
#include "support/qx_store.h"
#include "model/qx_forward.h"
#include "model/qx_synth.h"
#include "support/qx_threads.h"
#include "eval/qx_eval.h"
#include "formats/qx_llama2c.h"
#include "tokenizer/qx_tokenizer.h"
#include "qt.h"
#include "fwd_util.h"

/* ------------------------------------------------------------------------------------------------
   Helpers */

static int64_t V_of(const qx_store* s) { return s->config.vocab; }

static void make_tokens(int32_t* t, int64_t n, int64_t vocab, unsigned long long seed) {
    int64_t i;
    qt_seed(seed);
    for (i = 0; i < n; ++i) t[i] = (int32_t)(qt_uniform() * (double)vocab);
}

static float* tensor_f32(qx_store* s, const char* name) {
    quarot_tensor* t = qx_store_find(s, name);
    return t && t->dtype == QUAROT_DTYPE_F32 ? (float*)t->data : NULL;
}

/* ------------------------------------------------------------------------------------------------
   The naive double-precision reference forward. Reads the store by name, recomputes everything. */

typedef struct ref_model {
    const qx_store* s;
    int opt;
    int64_t h, I, nh, nkv, hd, V, L;
} ref_model;

static double* ref_tensor(const qx_store* s, const char* name) {
    const quarot_tensor* t = qx_store_find(s, name);
    int64_t r, rows, cols;
    double* d;
    if (!t) return NULL;
    rows = quarot_tensor_nrows(t);
    cols = t->ne[0];
    d = (double*)malloc((size_t)(rows * cols) * sizeof(double));
    for (r = 0; r < rows; ++r) quarot_tensor_get_row_f64(t, r, d + r * cols);
    return d;
}

static double* ref_layer_tensor(const ref_model* m, int64_t l, const char* suffix) {
    char name[256];
    snprintf(name, sizeof name, "%s%lld.%s", m->opt ? "model.decoder.layers." : "model.layers.", (long long)l, suffix);
    return ref_tensor(m->s, name);
}

/* y[out] = W[out][in] x + b */
static void ref_matvec(const double* w, const double* b, const double* x, int64_t out, int64_t in, double* y) {
    int64_t i, j;
    for (i = 0; i < out; ++i) {
        double s = b ? b[i] : 0.0;
        for (j = 0; j < in; ++j) s += w[i * in + j] * x[j];
        y[i] = s;
    }
}

static void ref_norm(const double* x, double* y, int64_t n, const double* g, const double* b, int layer, double eps) {
    double mean = 0.0, var = 0.0;
    int64_t i;
    if (layer) {
        for (i = 0; i < n; ++i) mean += x[i];
        mean /= (double)n;
    }
    for (i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
    var /= (double)n;
    for (i = 0; i < n; ++i) y[i] = (x[i] - mean) / sqrt(var + eps) * g[i] + (b ? b[i] : 0.0);
}

static void ref_forward(const qx_store* s, const int32_t* toks, int64_t T, double* logits) {
    const quarot_model_config* c = &s->config;
    ref_model m;
    int64_t t, l, i, j, hh, p;
    double *x, *a, *q, *k, *v, *att, *tmp, *gt, *up, *sc;
    double eps = c->norm_eps > 0.0f ? (double)c->norm_eps : 1e-5;
    double theta = c->rope_theta > 0.0f ? (double)c->rope_theta : 10000.0;
    int layer_norm = c->norm == QUAROT_NORM_LAYER;
    double *E, *P = NULL, *fw, *fb, *lm;
    m.s = s;
    m.opt = strcmp(c->arch, "opt") == 0;
    m.h = c->hidden; m.I = c->intermediate; m.nh = c->n_heads;
    m.nkv = c->n_kv_heads ? c->n_kv_heads : c->n_heads;
    m.hd = c->head_dim ? c->head_dim : c->hidden / c->n_heads;
    m.V = c->vocab; m.L = c->n_layers;
    x = (double*)calloc((size_t)(T * m.h), sizeof(double));
    a = (double*)calloc((size_t)(T * m.h), sizeof(double));
    q = (double*)calloc((size_t)(T * m.nh * m.hd), sizeof(double));
    k = (double*)calloc((size_t)(T * m.nkv * m.hd), sizeof(double));
    v = (double*)calloc((size_t)(T * m.nkv * m.hd), sizeof(double));
    att = (double*)calloc((size_t)(T * m.nh * m.hd), sizeof(double));
    tmp = (double*)calloc((size_t)(m.h > m.I ? m.h : m.I), sizeof(double));
    gt = (double*)calloc((size_t)(T * m.I), sizeof(double));
    up = (double*)calloc((size_t)(T * m.I), sizeof(double));
    sc = (double*)calloc((size_t)T, sizeof(double));
    E = ref_tensor(s, m.opt ? "model.decoder.embed_tokens.weight" : "model.embed_tokens.weight");
    if (m.opt) P = ref_tensor(s, "model.decoder.embed_positions.weight");
    fw = ref_tensor(s, m.opt ? "model.decoder.final_layer_norm.weight" : "model.norm.weight");
    fb = ref_tensor(s, m.opt ? "model.decoder.final_layer_norm.bias" : "model.norm.bias");
    lm = ref_tensor(s, "lm_head.weight");
    /* embeddings; OPT adds learned position t from row t + 2 */
    for (t = 0; t < T; ++t)
        for (i = 0; i < m.h; ++i) x[t * m.h + i] = E[toks[t] * m.h + i] + (P ? P[(t + 2) * m.h + i] : 0.0);
    for (l = 0; l < m.L; ++l) {
        double *n1w = ref_layer_tensor(&m, l, m.opt ? "self_attn_layer_norm.weight" : "input_layernorm.weight");
        double *n1b = ref_layer_tensor(&m, l, m.opt ? "self_attn_layer_norm.bias" : "input_layernorm.bias");
        double *n2w = ref_layer_tensor(&m, l, m.opt ? "final_layer_norm.weight" : "post_attention_layernorm.weight");
        double *n2b = ref_layer_tensor(&m, l, m.opt ? "final_layer_norm.bias" : "post_attention_layernorm.bias");
        double *wq = ref_layer_tensor(&m, l, "self_attn.q_proj.weight"), *bq = ref_layer_tensor(&m, l, "self_attn.q_proj.bias");
        double *wk = ref_layer_tensor(&m, l, "self_attn.k_proj.weight"), *bk = ref_layer_tensor(&m, l, "self_attn.k_proj.bias");
        double *wv = ref_layer_tensor(&m, l, "self_attn.v_proj.weight"), *bv = ref_layer_tensor(&m, l, "self_attn.v_proj.bias");
        double *wo = ref_layer_tensor(&m, l, m.opt ? "self_attn.out_proj.weight" : "self_attn.o_proj.weight");
        double *bo = ref_layer_tensor(&m, l, m.opt ? "self_attn.out_proj.bias" : "self_attn.o_proj.bias");
        double *qn = ref_layer_tensor(&m, l, "self_attn.q_norm.weight"), *kn = ref_layer_tensor(&m, l, "self_attn.k_norm.weight");
        double *wg = ref_layer_tensor(&m, l, "mlp.gate_proj.weight"), *bg = ref_layer_tensor(&m, l, "mlp.gate_proj.bias");
        double *wu = ref_layer_tensor(&m, l, m.opt ? "fc1.weight" : "mlp.up_proj.weight");
        double *bu = ref_layer_tensor(&m, l, m.opt ? "fc1.bias" : "mlp.up_proj.bias");
        double *wd = ref_layer_tensor(&m, l, m.opt ? "fc2.weight" : "mlp.down_proj.weight");
        double *bd = ref_layer_tensor(&m, l, m.opt ? "fc2.bias" : "mlp.down_proj.bias");
        for (t = 0; t < T; ++t) {
            ref_norm(x + t * m.h, a + t * m.h, m.h, n1w, n1b, layer_norm, eps);
            ref_matvec(wq, bq, a + t * m.h, m.nh * m.hd, m.h, q + t * m.nh * m.hd);
            ref_matvec(wk, bk, a + t * m.h, m.nkv * m.hd, m.h, k + t * m.nkv * m.hd);
            ref_matvec(wv, bv, a + t * m.h, m.nkv * m.hd, m.h, v + t * m.nkv * m.hd);
            for (hh = 0; hh < m.nh + m.nkv; ++hh) {   /* per-head norm, then RoPE at position t */
                double* vec = hh < m.nh ? q + (t * m.nh + hh) * m.hd : k + (t * m.nkv + hh - m.nh) * m.hd;
                if (c->qk_norm) ref_norm(vec, vec, m.hd, hh < m.nh ? qn : kn, NULL, 0, eps);
                if (m.opt) continue;
                for (i = 0; i < m.hd / 2; ++i) {
                    double ang = (double)t * pow(theta, -2.0 * (double)i / (double)m.hd);
                    int64_t i0 = c->rope_interleaved ? 2 * i : i, i1 = c->rope_interleaved ? 2 * i + 1 : i + m.hd / 2;
                    double x0 = vec[i0], x1 = vec[i1];
                    vec[i0] = x0 * cos(ang) - x1 * sin(ang);
                    vec[i1] = x0 * sin(ang) + x1 * cos(ang);
                }
            }
        }
        /* causal attention, query head hh reads KV head hh / (nh/nkv); softmax in double */
        for (t = 0; t < T; ++t) {
            for (hh = 0; hh < m.nh; ++hh) {
                const double* qv = q + (t * m.nh + hh) * m.hd;
                int64_t g = hh / (m.nh / m.nkv);
                double mx = -1e300, sum = 0.0;
                for (p = 0; p <= t; ++p) {
                    const double* kv = k + (p * m.nkv + g) * m.hd;
                    double d = 0.0;
                    for (i = 0; i < m.hd; ++i) d += qv[i] * kv[i];
                    sc[p] = d / sqrt((double)m.hd);
                    if (sc[p] > mx) mx = sc[p];
                }
                for (p = 0; p <= t; ++p) { sc[p] = exp(sc[p] - mx); sum += sc[p]; }
                for (i = 0; i < m.hd; ++i) {
                    double o = 0.0;
                    for (p = 0; p <= t; ++p) o += sc[p] / sum * v[(p * m.nkv + g) * m.hd + i];
                    att[(t * m.nh + hh) * m.hd + i] = o;
                }
            }
        }
        /* residual add of o_proj, then the MLP (gated SiLU, or ReLU for the plain OPT MLP) */
        for (t = 0; t < T; ++t) {
            ref_matvec(wo, bo, att + t * m.nh * m.hd, m.h, m.nh * m.hd, tmp);
            for (i = 0; i < m.h; ++i) x[t * m.h + i] += tmp[i];
            ref_norm(x + t * m.h, a + t * m.h, m.h, n2w, n2b, layer_norm, eps);
            ref_matvec(wu, bu, a + t * m.h, m.I, m.h, up + t * m.I);
            if (wg) {
                ref_matvec(wg, bg, a + t * m.h, m.I, m.h, gt + t * m.I);
                for (j = 0; j < m.I; ++j) up[t * m.I + j] *= gt[t * m.I + j] / (1.0 + exp(-gt[t * m.I + j]));
            } else {
                for (j = 0; j < m.I; ++j) up[t * m.I + j] = up[t * m.I + j] > 0.0 ? up[t * m.I + j] : 0.0;
            }
            ref_matvec(wd, bd, up + t * m.I, m.h, m.I, tmp);
            for (i = 0; i < m.h; ++i) x[t * m.h + i] += tmp[i];
        }
        free(n1w); free(n1b); free(n2w); free(n2b); free(wq); free(bq); free(wk); free(bk); free(wv); free(bv);
        free(wo); free(bo); free(qn); free(kn); free(wg); free(bg); free(wu); free(bu); free(wd); free(bd);
    }
    for (t = 0; t < T; ++t) {
        ref_norm(x + t * m.h, a + t * m.h, m.h, fw, fb, layer_norm, eps);
        ref_matvec(lm ? lm : E, NULL, a + t * m.h, m.V, m.h, logits + t * m.V);
    }
    free(x); free(a); free(q); free(k); free(v); free(att); free(tmp); free(gt); free(up); free(sc);
    free(E); free(P); free(fw); free(fb); free(lm);
}

/* ------------------------------------------------------------------------------------------------ */

static void synth(qx_store* s, const char* arch, uint64_t seed) {
    qx_synth_desc d;
    qx_err e;
    memset(&d, 0, sizeof d);
    d.arch = arch;
    d.seed = seed;
    QT_OK(qx_synth_model(s, &d, &e));
}

/* Every family, both RoPE layouts: float forward vs the double reference above, 12 random tokens.
   Tolerance 2e-5 of max|logit|: float rounding through a few layers stays near 1e-6 relative. */
static void test_against_reference(void) {
    int fi;
    for (fi = 0; qx_synth_family(fi); ++fi) {
        int il;
        for (il = 0; il < 2; ++il) {
            const char* arch = qx_synth_family(fi);
            qx_synth_desc d;
            qx_store s;
            qx_err e;
            int32_t toks[12];
            int64_t T = 12, V, n, i;
            float* lg;
            double *ref, mx = 0.0, md = 0.0;
            if (il && strcmp(arch, "opt") == 0) continue;
            memset(&d, 0, sizeof d);
            d.arch = arch;
            d.seed = 7;
            d.rope_interleaved = il;
            QT_OK(qx_synth_model(&s, &d, &e));
            V = V_of(&s);
            n = T * V;
            make_tokens(toks, T, V, 11);
            lg = run_window(&s, NULL, toks, T);
            ref = (double*)malloc((size_t)n * sizeof(double));
            ref_forward(&s, toks, T, ref);
            QT_CHECK(lg != NULL);
            for (i = 0; lg && i < n; ++i) {
                if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
                if (fabs(ref[i] - lg[i]) > md) md = fabs(ref[i] - lg[i]);
            }
            printf("    %-6s rope %s: max|logit| %.3g, max|float - double reference| %.3g (rel %.2g)\n", arch,
                   strcmp(arch, "opt") == 0 ? "none  " : (il ? "pairs " : "halves"), mx, md, md / mx);
            QT_CHECKF(md <= 2e-5 * mx, "%s: rel diff %.3g", arch, md / mx);
            QT_CHECK(mx > 0.5);
            free(lg);
            free(ref);
            qx_store_free(&s);
        }
    }
}

/* The same tokens as one window, as KV-cache steps, and as a prefill of 5 plus steps: 1e-5 relative
   (FP). Under W4A4KV4 a reassociated sum can flip one rounding, hence the looser 2e-2. */
static void test_window_vs_incremental(void) {
    int fi;
    for (fi = 0; qx_synth_family(fi); ++fi) {
        const char* arch = qx_synth_family(fi);
        qx_store s;
        qx_forward f;
        qx_err e;
        int32_t toks[40];
        int64_t T = qt_quick() ? 16 : 40, V, t;
        float *win, *inc;
        synth(&s, arch, 3);
        V = V_of(&s);
        make_tokens(toks, T, V, 5);
        win = (float*)malloc((size_t)(T * V) * sizeof(float));
        inc = (float*)malloc((size_t)(T * V) * sizeof(float));
        QT_OK(qx_forward_init(&f, &s, NULL, &e));
        QT_OK(qx_forward_window(&f, toks, T, win, &e));
        qx_forward_reset(&f);
        for (t = 0; t < T; ++t) QT_OK(qx_forward_step(&f, toks[t], inc + t * V, &e));
        QT_EQ_INT(f.pos, T);
        printf("    %-6s window vs KV-cache steps: rel %.3g\n", arch, qt_rel_diff(inc, win, T * V));
        QT_CHECK(qt_rel_diff(inc, win, T * V) <= 1e-5);
        /* a prefill of 5 then steps, and the same under 8-bit fake quantization incl. the KV cache */
        qx_forward_reset(&f);
        QT_OK(qx_forward_tokens(&f, toks, 5, inc, &e));
        for (t = 5; t < T; ++t) QT_OK(qx_forward_step(&f, toks[t], inc + t * V, &e));
        QT_CHECK(qt_rel_diff(inc, win, T * V) <= 1e-5);
        qx_forward_free(&f);
        {
            qx_forward_opts o;
            memset(&o, 0, sizeof o);
            o.quant.w_bits = 4; o.quant.a_bits = 4; o.quant.k_bits = 4; o.quant.v_bits = 4;
            QT_OK(qx_forward_init(&f, &s, &o, &e));
            QT_OK(qx_forward_window(&f, toks, T, win, &e));
            qx_forward_reset(&f);
            for (t = 0; t < T; ++t) QT_OK(qx_forward_step(&f, toks[t], inc + t * V, &e));
            /* quantization rounds, so a reassociation can flip a rounding: compare loosely */
            printf("    %-6s W4A4KV4 window vs steps: rel %.3g\n", arch, qt_rel_diff(inc, win, T * V));
            QT_CHECK(qt_rel_diff(inc, win, T * V) <= 2e-2);
            qx_forward_free(&f);
        }
        free(win);
        free(inc);
        qx_store_free(&s);
    }
}

/* The forward pass with 2 and 3 threads (GEMMs, row chunks, groups of heads) gives the same bits as
   with one, for every family, in FP32 and under W4A4KV4 fake quantization, as a window and as a
   prefill plus steps. Sizes large enough that every row-parallel step splits (rows * cols >= 32768). */
static void test_threads_bitexact(void) {
    int fi;
    for (fi = 0; qx_synth_family(fi); ++fi) {
        const char* arch = qx_synth_family(fi);
        qx_synth_desc d;
        qx_store s;
        qx_err e;
        int32_t toks[160];
        int64_t T = 160, V, t;
        int qz, th;
        /* under QT_QUICK (qemu) 2 threads and the families test_stream_weights_bitexact skips there
           (qwen2, opt): the split over threads is the same code on every ISA */
        if (qt_quick() && fi % 2 == 0) continue;
        memset(&d, 0, sizeof d);
        d.arch = arch;
        d.seed = 8;
        d.hidden = 256;
        d.intermediate = 320;
        d.n_layers = 2;
        d.n_heads = 8;
        d.n_kv_heads = strcmp(arch, "opt") == 0 ? 8 : 4;
        d.head_dim = 32;
        d.vocab = 300;
        d.max_seq = 256;
        QT_OK(qx_synth_model(&s, &d, &e));
        V = V_of(&s);
        make_tokens(toks, T, V, 9);
        for (qz = 0; qz < 2; ++qz) {
            float *ref = (float*)malloc((size_t)(T * V) * sizeof(float)), *got = (float*)malloc((size_t)(T * V) * sizeof(float));
            qx_forward_opts o;
            qx_forward f;
            memset(&o, 0, sizeof o);
            if (qz) { o.quant.w_bits = 4; o.quant.a_bits = 4; o.quant.k_bits = 4; o.quant.v_bits = 4; }
            QT_OK(qx_forward_init(&f, &s, &o, &e));
            QT_OK(qx_forward_window(&f, toks, T, ref, &e));
            qx_forward_free(&f);
            for (th = 2; th <= (qt_quick() ? 2 : 3); ++th) {
                qx_pool* pool = qx_pool_create(th);
                quarot_env env;
                qx_pool_env(pool, &env);
                o.env = &env;
                QT_OK(qx_forward_init(&f, &s, &o, &e));
                memset(got, 0, (size_t)(T * V) * sizeof(float));
                QT_OK(qx_forward_window(&f, toks, T, got, &e));
                QT_CHECKF(memcmp(ref, got, (size_t)(T * V) * sizeof(float)) == 0, "%s %s: %d threads differ from 1 (window)",
                          arch, qz ? "W4A4KV4" : "fp32", th);
                qx_forward_reset(&f);                  /* prefill 100, then 60 steps: same cache contents */
                QT_OK(qx_forward_tokens(&f, toks, 100, got, &e));
                for (t = 100; t < T; ++t) QT_OK(qx_forward_step(&f, toks[t], got + t * V, &e));
                QT_CHECK(f.pos == T);
                qx_forward_free(&f);
                qx_pool_destroy(pool);
                o.env = NULL;
            }
            free(ref);
            free(got);
        }
        qx_store_free(&s);
    }
}

/* Layer-wise weights (opts.stream_weights): for every family, f32 / f16 / bf16 storage, FP32 and
   W4A4KV4 (per channel, and groups of 32 with the clip search), 1 and 2 threads, the logits are the
   same bits as the copy-at-init path, as a window and as prefill plus steps; layer_done sees every
   layer and then -1 once per call; f32 tensors are read in place (no layer buffer for them in FP);
   a missing tensor is the same error at init in both modes. */
typedef struct done_log { int64_t calls, finals, last; int order_ok; } done_log;

static void on_layer_done(void* user, int64_t layer) {
    done_log* d = (done_log*)user;
    if (layer >= 0 && layer != d->last && layer != d->last + 1) d->order_ok = 0;
    d->last = layer;
    d->calls++;
    if (layer < 0) d->finals++;
}

static void test_stream_weights_bitexact(void) {
    int fi;
    for (fi = 0; qx_synth_family(fi); ++fi) {
        const char* arch = qx_synth_family(fi);
        qx_synth_desc d;
        qx_err e;
        int32_t toks[48];
        int64_t T = 48, V, t;
        int dk, qz, th;
        quarot_dtype dts[3] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
        memset(&d, 0, sizeof d);
        d.arch = arch;
        d.seed = 12;
        d.hidden = 128;
        d.intermediate = 192;
        d.n_layers = 3;
        d.n_heads = 4;
        d.n_kv_heads = strcmp(arch, "opt") == 0 ? 4 : 2;
        d.head_dim = 32;
        d.vocab = 200;
        d.max_seq = 128;
        if (qt_quick() && fi % 2 != 0) continue;   /* under qemu: every other family, f16 storage only */
        for (dk = 0; dk < 3; ++dk) {
            qx_store s;
            if (qt_quick() && dk != 1) continue;
            QT_OK(qx_synth_model(&s, &d, &e));
            if (dts[dk] != QUAROT_DTYPE_F32) QT_OK(qx_store_convert(&s, dts[dk]));
            V = V_of(&s);
            make_tokens(toks, T, V, 5);
            for (qz = 0; qz < 3; ++qz) {
                float *ref, *got;
                qx_forward_opts o;
                qx_forward f;
                /* the clip search (qz 2: 51 trial roundings of every weight group) is most of this
                   test's time: f16 storage only, the dtype being converted before any quantization;
                   under QT_QUICK (qemu: about 20 s a search, floats being emulated) the first family
                   only, and there the layer-wise window with 2 threads is compared with the copy
                   path's once */
                const int one_clip_pass = qt_quick() && qz == 2;
                if (qz == 2 && (dk != 1 || (qt_quick() && fi != 0))) continue;
                ref = (float*)malloc((size_t)(T * V) * sizeof(float));
                got = (float*)malloc((size_t)(T * V) * sizeof(float));
                memset(&o, 0, sizeof o);
                if (qz) { o.quant.w_bits = 4; o.quant.a_bits = 4; o.quant.k_bits = 4; o.quant.v_bits = 4; }
                if (qz == 2) { o.quant.w_group = 32; o.quant.w_clip_search = 1; }
                QT_OK(qx_forward_init(&f, &s, &o, &e));
                QT_OK(qx_forward_window(&f, toks, T, ref, &e));
                qx_forward_free(&f);
                for (th = 1; th <= 2; ++th) {
                    qx_pool* pool;
                    quarot_env env;
                    done_log dl;
                    if (one_clip_pass && th == 1) continue;
                    pool = th > 1 ? qx_pool_create(th) : NULL;
                    qx_pool_env(pool, &env);
                    o.env = th > 1 ? &env : NULL;
                    o.stream_weights = 1;
                    o.layer_done = on_layer_done;
                    o.layer_done_user = &dl;
                    memset(&dl, 0, sizeof dl);
                    dl.last = -1;
                    dl.order_ok = 1;
                    QT_OK(qx_forward_init(&f, &s, &o, &e));
                    if (dk == 0 && qz == 0) QT_CHECKF(f.layer_floats > 0 && f.arena.n_blocks <= 4, "%s: %lld blocks", arch, (long long)f.arena.n_blocks);
                    memset(got, 0, (size_t)(T * V) * sizeof(float));
                    QT_OK(qx_forward_window(&f, toks, T, got, &e));
                    QT_CHECKF(memcmp(ref, got, (size_t)(T * V) * sizeof(float)) == 0, "%s dtype %d quant %d, %d threads: layer-wise differs (window)",
                              arch, dk, qz, th);
                    /* after each linear (>= 5) and each layer, plus one per converted tensor when not in place */
                    QT_CHECK(dk == 0 && qz == 0 ? dl.calls == (d.n_layers * (strcmp(arch, "opt") == 0 ? 7 : 8)) + 1
                                                : dl.calls > 6 * d.n_layers + 1);
                    QT_CHECK(dl.finals == 1 && dl.order_ok);
                    qx_forward_reset(&f);
                    QT_OK(qx_forward_tokens(&f, toks, 30, got, &e));
                    for (t = 30; t < T; ++t) QT_OK(qx_forward_step(&f, toks[t], got + t * V, &e));
                    QT_CHECK(dl.finals == 1 + 1 + (T - 30));
                    qx_forward_free(&f);
                    qx_pool_destroy(pool);
                }
                if (!one_clip_pass) {   /* prefill + steps in the copy path, for the second comparison */
                    memset(&o, 0, sizeof o);
                    if (qz) { o.quant.w_bits = 4; o.quant.a_bits = 4; o.quant.k_bits = 4; o.quant.v_bits = 4; }
                    if (qz == 2) { o.quant.w_group = 32; o.quant.w_clip_search = 1; }
                    QT_OK(qx_forward_init(&f, &s, &o, &e));
                    QT_OK(qx_forward_tokens(&f, toks, 30, ref, &e));
                    for (t = 30; t < T; ++t) QT_OK(qx_forward_step(&f, toks[t], ref + t * V, &e));
                    qx_forward_free(&f);
                    QT_CHECKF(memcmp(ref, got, (size_t)(T * V) * sizeof(float)) == 0, "%s dtype %d quant %d: layer-wise differs (steps)", arch, dk, qz);
                }
                free(ref);
                free(got);
            }
            if (dk == 0) {   /* the same first error at init in both modes */
                qx_forward_opts o;
                qx_forward f;
                qx_err e2;
                char name[128];
                quarot_result r1, r2;
                snprintf(name, sizeof name, "%s2.%s", strcmp(arch, "opt") == 0 ? "model.decoder.layers." : "model.layers.",
                         strcmp(arch, "opt") == 0 ? "fc2.weight" : "mlp.down_proj.weight");
                QT_CHECK(qx_store_remove(&s, name) == 1);
                memset(&o, 0, sizeof o);
                r1 = qx_forward_init(&f, &s, &o, &e);
                o.stream_weights = 1;
                r2 = qx_forward_init(&f, &s, &o, &e2);
                QT_CHECK(r1 == QUAROT_ERR_NOT_FOUND && r2 == r1 && strcmp(e.msg, e2.msg) == 0);
            }
            qx_store_free(&s);
        }
    }
}

/* ---- RoPE on captured q/k ---- */
typedef struct rope_cap {
    float* q;   /* [T][n_heads][hd] after RoPE */
    float* k;
    int64_t layer;
} rope_cap;

static void rope_hook(void* user, int64_t layer, qx_site site, float* x, int64_t rows, int64_t n) {
    rope_cap* c = (rope_cap*)user;
    if (layer != c->layer) return;
    if (site == QX_SITE_Q_ROPE) memcpy(c->q, x, (size_t)(rows * n) * sizeof(float));
    if (site == QX_SITE_K_ROPE) memcpy(c->k, x, (size_t)(rows * n) * sizeof(float));
}

/* One llama layer, the same token at 16 positions: the captured q (after RoPE) at position t must be
   position 0's q rotated pairwise by t * theta^(-2i/d) in the configured layout; norms equal; and
   q_t . k_s == q_{t+3} . k_{s+3}. Tolerances are float rounding (1e-5 .. 1e-4). */
static void test_rope_properties(void) {
    int il;
    for (il = 0; il < 2; ++il) {
        qx_synth_desc d;
        qx_store s;
        qx_forward f;
        qx_forward_opts o;
        qx_err e;
        rope_cap cap;
        int32_t toks[16];
        int64_t T = 16, hd, nh, nkv, t, i, hh;
        double theta, worst_norm = 0.0, worst_rot = 0.0, worst_rel = 0.0;
        memset(&d, 0, sizeof d);
        d.arch = "llama";
        d.n_layers = 1;
        d.seed = 21;
        d.rope_interleaved = il;
        QT_OK(qx_synth_model(&s, &d, &e));
        hd = s.config.head_dim; nh = s.config.n_heads; nkv = s.config.n_kv_heads;
        theta = s.config.rope_theta;
        cap.layer = 0;
        cap.q = (float*)malloc((size_t)(T * nh * hd) * sizeof(float));
        cap.k = (float*)malloc((size_t)(T * nkv * hd) * sizeof(float));
        memset(&o, 0, sizeof o);
        o.online = rope_hook;
        o.online_user = &cap;
        for (t = 0; t < T; ++t) toks[t] = 42;   /* same token everywhere: pre-RoPE q, k are identical */
        QT_OK(qx_forward_init(&f, &s, &o, &e));
        QT_OK(qx_forward_window(&f, toks, T, NULL, &e));
        qx_forward_free(&f);
        for (t = 1; t < T; ++t) {
            for (hh = 0; hh < nh; ++hh) {
                const float* q0 = cap.q + hh * hd;             /* position 0: RoPE is the identity */
                const float* qt_ = cap.q + (t * nh + hh) * hd;
                double n0 = 0.0, nt = 0.0;
                for (i = 0; i < hd; ++i) { n0 += (double)q0[i] * q0[i]; nt += (double)qt_[i] * qt_[i]; }
                if (fabs(sqrt(nt) - sqrt(n0)) / sqrt(n0) > worst_norm) worst_norm = fabs(sqrt(nt) - sqrt(n0)) / sqrt(n0);
                for (i = 0; i < hd / 2; ++i) {   /* the pair is position 0's pair rotated by t * freq_i */
                    int64_t i0 = il ? 2 * i : i, i1 = il ? 2 * i + 1 : i + hd / 2;
                    double ang = (double)t * pow(theta, -2.0 * (double)i / (double)hd);
                    double e0 = q0[i0] * cos(ang) - q0[i1] * sin(ang), e1 = q0[i0] * sin(ang) + q0[i1] * cos(ang);
                    double err = fabs(e0 - qt_[i0]) + fabs(e1 - qt_[i1]);
                    if (err > worst_rot) worst_rot = err;
                }
            }
        }
        /* q_t . k_s depends only on t - s: compare (t, s) with (t + 3, s + 3) for every head */
        for (t = 0; t + 3 < T; ++t) {
            int64_t s_ = t / 2;
            for (hh = 0; hh < nh; ++hh) {
                int64_t g = hh / (nh / nkv);
                double d1 = 0.0, d2 = 0.0;
                for (i = 0; i < hd; ++i) {
                    d1 += (double)cap.q[(t * nh + hh) * hd + i] * cap.k[(s_ * nkv + g) * hd + i];
                    d2 += (double)cap.q[((t + 3) * nh + hh) * hd + i] * cap.k[((s_ + 3) * nkv + g) * hd + i];
                }
                if (fabs(d1 - d2) / (fabs(d1) + 1.0) > worst_rel) worst_rel = fabs(d1 - d2) / (fabs(d1) + 1.0);
            }
        }
        printf("    rope %s: norm change %.2g, rotation error %.2g, relative-position error %.2g\n",
               il ? "pairs " : "halves", worst_norm, worst_rot, worst_rel);
        QT_CHECK(worst_norm < 1e-5);
        QT_CHECK(worst_rot < 1e-4);
        QT_CHECK(worst_rel < 1e-4);
        free(cap.q);
        free(cap.k);
        qx_store_free(&s);
    }
}

/* 4 query heads on 2 KV heads == 4 KV heads where KV head h copies KV head h/2 */
static void test_gqa_sharing(void) {
    qx_synth_desc d;
    qx_store s, s2;
    qx_err e;
    int32_t toks[10];
    int64_t T = 10, l, hd, h, L;
    float *a, *b;
    memset(&d, 0, sizeof d);
    d.arch = "llama";
    d.n_heads = 4; d.n_kv_heads = 2; d.head_dim = 16; d.hidden = 64; d.intermediate = 96; d.seed = 9;
    QT_OK(qx_synth_model(&s, &d, &e));
    QT_OK(qx_store_clone(&s, &s2));
    hd = 16;
    L = s.config.n_layers;
    s2.config.n_kv_heads = 4;
    for (l = 0; l < L; ++l) {
        const char* which[2] = {"k_proj", "v_proj"};
        int w;
        for (w = 0; w < 2; ++w) {
            char name[128];
            float *src, *dst;
            int64_t ne[2];
            snprintf(name, sizeof name, "model.layers.%lld.self_attn.%s.weight", (long long)l, which[w]);
            src = tensor_f32(&s, name);
            ne[0] = 64; ne[1] = 4 * hd;
            qx_store_remove(&s2, name);
            QT_OK(qx_store_add(&s2, name, QUAROT_DTYPE_F32, 2, ne, NULL, NULL));
            dst = tensor_f32(&s2, name);
            for (h = 0; h < 4; ++h) memcpy(dst + h * hd * 64, src + (h / 2) * hd * 64, (size_t)(hd * 64) * sizeof(float));
        }
    }
    make_tokens(toks, T, 256, 1);
    a = run_window(&s, NULL, toks, T);
    b = run_window(&s2, NULL, toks, T);
    QT_CHECK(a && b);
    if (a && b) {
        printf("    GQA 4q/2kv vs duplicated 4kv: rel %.3g\n", qt_rel_diff(a, b, T * 256));
        QT_CHECK(qt_rel_diff(a, b, T * 256) <= 1e-6);
    }
    free(a);
    free(b);
    qx_store_free(&s);
    qx_store_free(&s2);
}

/* OPT: position p reads row p + 2 of embed_positions */
static void test_opt_position_offset(void) {
    qx_store s;
    int32_t toks[4] = {5, 6, 7, 8};
    int64_t V = 256, h, T = 4, t;
    float *base, *x, *pe;
    synth(&s, "opt", 4);
    h = s.config.hidden;
    base = run_window(&s, NULL, toks, T);
    pe = tensor_f32(&s, "model.decoder.embed_positions.weight");
    /* (perturbations alternate in sign: a constant shift would vanish in the LayerNorms) */
    for (t = 0; t < 2 * h; ++t) pe[t] += (t % 2) ? 3.0f : -3.0f;   /* rows 0 and 1: never read */
    x = run_window(&s, NULL, toks, T);
    QT_CHECK(base && x && qt_rel_diff(x, base, T * V) == 0.0);
    free(x);
    for (t = 3 * h; t < 4 * h; ++t) pe[t] += (t % 2) ? 1.0f : -1.0f;   /* row 3: position 1 */
    x = run_window(&s, NULL, toks, T);
    if (base && x) {
        QT_CHECK(qt_rel_diff(x, base, V) == 0.0);                     /* position 0 untouched */
        QT_CHECK(qt_rel_diff(x + V, base + V, V) > 1e-3);             /* position 1 moved */
    }
    free(base);
    free(x);
    qx_store_free(&s);
}

/* qk-norm makes attention invariant to the scale of q_proj / k_proj (qwen3 has no q/k biases) */
static void test_qk_norm(void) {
    const char* archs[2] = {"qwen3", "llama"};
    int a;
    for (a = 0; a < 2; ++a) {
        qx_store s;
        int32_t toks[8];
        int64_t T = 8, l, i, V = 256;
        float *base, *x;
        double rd;
        synth(&s, archs[a], 12);
        make_tokens(toks, T, V, 3);
        base = run_window(&s, NULL, toks, T);
        for (l = 0; l < s.config.n_layers; ++l) {
            char name[128];
            quarot_tensor* t;
            snprintf(name, sizeof name, "model.layers.%lld.self_attn.q_proj.weight", (long long)l);
            t = qx_store_find(&s, name);
            for (i = 0; i < quarot_tensor_nelements(t); ++i) ((float*)t->data)[i] *= 3.0f;
            snprintf(name, sizeof name, "model.layers.%lld.self_attn.k_proj.weight", (long long)l);
            t = qx_store_find(&s, name);
            for (i = 0; i < quarot_tensor_nelements(t); ++i) ((float*)t->data)[i] *= 0.5f;
        }
        x = run_window(&s, NULL, toks, T);
        rd = base && x ? qt_rel_diff(x, base, T * V) : 1.0;
        printf("    %s: q_proj*3, k_proj/2 changes logits by rel %.3g\n", archs[a], rd);
        if (a == 0) QT_CHECK(rd < 1e-4);
        else QT_CHECK(rd > 1e-2);
        free(base);
        free(x);
        qx_store_free(&s);
    }
}

/* ---- hooks ---- */
typedef struct hook_log {
    int64_t online_calls[QX_SITE_COUNT];
    int64_t online_rows[QX_SITE_COUNT], online_n[QX_SITE_COUNT];
    int64_t capture_calls, bad_capture;
    int64_t layers_seen;
    const quarot_model_config* cfg;
    int opt;
    int64_t T;
} hook_log;

static void log_online(void* user, int64_t layer, qx_site site, float* x, int64_t rows, int64_t n) {
    hook_log* h = (hook_log*)user;
    (void)x;
    if ((int)site >= 0 && site < QX_SITE_COUNT) {
        h->online_calls[site]++;
        h->online_rows[site] = rows;
        h->online_n[site] = n;
    }
    if (layer + 1 > h->layers_seen) h->layers_seen = layer + 1;
}

static void log_capture(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    hook_log* h = (hook_log*)user;
    const quarot_model_config* c = h->cfg;
    char prefix[64];
    const char* tail;
    int64_t want = -1;
    (void)x;
    h->capture_calls++;
    snprintf(prefix, sizeof prefix, "%s%lld.", h->opt ? "model.decoder.layers." : "model.layers.", (long long)layer);
    if (strncmp(name, prefix, strlen(prefix)) != 0) { h->bad_capture++; return; }
    tail = name + strlen(prefix);
    if (!strcmp(tail, "self_attn.q_proj.weight") || !strcmp(tail, "self_attn.k_proj.weight") ||
        !strcmp(tail, "self_attn.v_proj.weight") || !strcmp(tail, "mlp.gate_proj.weight") ||
        !strcmp(tail, "mlp.up_proj.weight") || !strcmp(tail, "fc1.weight"))
        want = c->hidden;
    else if (!strcmp(tail, "self_attn.o_proj.weight") || !strcmp(tail, "self_attn.out_proj.weight"))
        want = c->n_heads * c->head_dim;
    else if (!strcmp(tail, "mlp.down_proj.weight") || !strcmp(tail, "fc2.weight"))
        want = c->intermediate;
    if (want != n || rows != h->T) h->bad_capture++;
}

/* One window of 6 tokens: each online site once per layer with its documented shape; capture once
   per linear (7 per llama-type layer, 6 per OPT layer) with a full HF weight name and input width. */
static void test_hook_calls(void) {
    int fi;
    for (fi = 0; qx_synth_family(fi); ++fi) {
        const char* arch = qx_synth_family(fi);
        qx_store s;
        qx_forward f;
        qx_forward_opts o;
        qx_err e;
        hook_log h;
        int32_t toks[6] = {1, 2, 3, 4, 5, 6};
        int64_t L, per_layer;
        const quarot_model_config* c;
        synth(&s, arch, 2);
        c = &s.config;
        L = c->n_layers;
        memset(&h, 0, sizeof h);
        h.cfg = c;
        h.opt = strcmp(arch, "opt") == 0;
        h.T = 6;
        memset(&o, 0, sizeof o);
        o.online = log_online; o.online_user = &h;
        o.capture = log_capture; o.capture_user = &h;
        QT_OK(qx_forward_init(&f, &s, &o, &e));
        QT_OK(qx_forward_window(&f, toks, 6, NULL, &e));
        qx_forward_free(&f);
        QT_EQ_INT(h.layers_seen, L);
        QT_EQ_INT(h.online_calls[QX_SITE_DOWN_INPUT], L);
        QT_EQ_INT(h.online_calls[QX_SITE_O_INPUT], L);
        QT_EQ_INT(h.online_calls[QX_SITE_Q_ROPE], L);
        QT_EQ_INT(h.online_calls[QX_SITE_K_ROPE], L);
        QT_EQ_INT(h.online_rows[QX_SITE_DOWN_INPUT], 6);
        QT_EQ_INT(h.online_n[QX_SITE_DOWN_INPUT], c->intermediate);
        QT_EQ_INT(h.online_rows[QX_SITE_O_INPUT], 6);
        QT_EQ_INT(h.online_n[QX_SITE_O_INPUT], c->n_heads * c->head_dim);
        QT_EQ_INT(h.online_rows[QX_SITE_Q_ROPE], 6 * c->n_heads);
        QT_EQ_INT(h.online_rows[QX_SITE_K_ROPE], 6 * c->n_kv_heads);
        QT_EQ_INT(h.online_n[QX_SITE_K_ROPE], c->head_dim);
        per_layer = h.opt ? 6 : 7;   /* q, k, v, o, (gate,) up, down */
        QT_EQ_INT(h.capture_calls, per_layer * L);
        QT_EQ_INT(h.bad_capture, 0);
        qx_store_free(&s);
    }
}

/* Online rotations with orthogonal matrices (fwd_util.h), weights rotated to match: logits unchanged. */
typedef struct rot_hooks {
    const double* q[QX_SITE_COUNT];   /* NULL = site not rotated */
    int64_t n[QX_SITE_COUNT];
} rot_hooks;

static void rot_online(void* user, int64_t layer, qx_site site, float* x, int64_t rows, int64_t n) {
    rot_hooks* r = (rot_hooks*)user;
    (void)layer;
    if (r->q[site] && r->n[site] == n) rows_times(x, rows, n, r->q[site]);
}

/* Random orthogonal Q per site (intermediate, n_heads*head_dim, head_dim), applied online by the hook
   with the matching offline weight change: logits equal within 1e-4 relative. Dropping the q hook
   while keeping the k hook must break the equivalence (the hook really runs). */
static void test_online_rotation_equivalence(void) {
    int fi;
    for (fi = 0; qx_synth_family(fi); ++fi) {
        const char* arch = qx_synth_family(fi);
        qx_store s;
        qx_forward_opts o;
        rot_hooks rh;
        int32_t toks[10];
        int64_t T = 10, V, l, I, qd, hd;
        int opt = strcmp(arch, "opt") == 0;
        double *qd_m, *qi_m, *qh_m;
        float *base, *rot;
        synth(&s, arch, 31);
        V = V_of(&s);
        I = s.config.intermediate;
        hd = s.config.head_dim;
        qd = s.config.n_heads * hd;
        make_tokens(toks, T, V, 8);
        base = run_window(&s, NULL, toks, T);
        qi_m = random_orthogonal(I, 1);
        qd_m = random_orthogonal(qd, 2);
        qh_m = random_orthogonal(hd, 3);
        for (l = 0; l < s.config.n_layers; ++l) {   /* W_down <- W_down Q_I, W_o <- W_o Q_qd */
            char name[128];
            snprintf(name, sizeof name, "%s%lld.%s", opt ? "model.decoder.layers." : "model.layers.", (long long)l,
                     opt ? "fc2.weight" : "mlp.down_proj.weight");
            rows_times(tensor_f32(&s, name), s.config.hidden, I, qi_m);
            snprintf(name, sizeof name, "%s%lld.%s", opt ? "model.decoder.layers." : "model.layers.", (long long)l,
                     opt ? "self_attn.out_proj.weight" : "self_attn.o_proj.weight");
            rows_times(tensor_f32(&s, name), s.config.hidden, qd, qd_m);
        }
        memset(&rh, 0, sizeof rh);
        rh.q[QX_SITE_DOWN_INPUT] = qi_m; rh.n[QX_SITE_DOWN_INPUT] = I;
        rh.q[QX_SITE_O_INPUT] = qd_m; rh.n[QX_SITE_O_INPUT] = qd;
        rh.q[QX_SITE_Q_ROPE] = qh_m; rh.n[QX_SITE_Q_ROPE] = hd;
        rh.q[QX_SITE_K_ROPE] = qh_m; rh.n[QX_SITE_K_ROPE] = hd;
        memset(&o, 0, sizeof o);
        o.online = rot_online;
        o.online_user = &rh;
        rot = run_window(&s, &o, toks, T);
        QT_CHECK(base && rot);
        if (base && rot) {
            printf("    %-6s online rotations (down, o, q/k) + rotated weights: rel %.3g\n", arch, qt_rel_diff(rot, base, T * V));
            QT_CHECK(qt_rel_diff(rot, base, T * V) <= 1e-4);
        }
        /* only the K hook: no longer equivalent (guards against a hook that is never applied) */
        rh.q[QX_SITE_Q_ROPE] = NULL;
        free(rot);
        rot = run_window(&s, &o, toks, T);
        if (base && rot) QT_CHECK(qt_rel_diff(rot, base, T * V) > 1e-3);
        free(base);
        free(rot);
        free(qi_m);
        free(qd_m);
        free(qh_m);
        qx_store_free(&s);
    }
}

/* ---- fake quantization ---- */
typedef struct first_capture {
    float* x;
    int64_t n;
    int done;
} first_capture;

static void cap_first(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    first_capture* c = (first_capture*)user;
    if (c->done || layer != 1 || !strstr(name, "down_proj")) return;
    c->x = (float*)malloc((size_t)(rows * n) * sizeof(float));
    memcpy(c->x, x, (size_t)(rows * n) * sizeof(float));
    c->n = rows * n;
    c->done = 1;
}

/* Outlier-free synthetic models: W8A8KV8 within 5% (rms, relative) of FP, W4A4KV4 more than 3x as
   far, KV4 alone in between. */
static void test_fake_quant(void) {
    int fi;
    for (fi = 0; qx_synth_family(fi); ++fi) {
        const char* arch = qx_synth_family(fi);
        qx_store s;
        qx_forward_opts o;
        int32_t toks[16];
        int64_t T = 16, V;
        float *fp, *q8, *q4, *kv4;
        double e8, e4, ekv;
        qx_synth_desc d;
        qx_err e;
        memset(&d, 0, sizeof d);   /* without outlier channels: 8 bits then behaves like ~8 bits */
        d.arch = arch;
        d.seed = 17;
        d.n_outliers = -1;
        QT_OK(qx_synth_model(&s, &d, &e));
        V = V_of(&s);
        make_tokens(toks, T, V, 4);
        fp = run_window(&s, NULL, toks, T);
        memset(&o, 0, sizeof o);
        o.quant.w_bits = 8; o.quant.a_bits = 8; o.quant.k_bits = 8; o.quant.v_bits = 8;
        q8 = run_window(&s, &o, toks, T);
        o.quant.w_bits = 4; o.quant.a_bits = 4; o.quant.k_bits = 4; o.quant.v_bits = 4;
        q4 = run_window(&s, &o, toks, T);
        memset(&o, 0, sizeof o);
        o.quant.k_bits = 4; o.quant.v_bits = 4;
        kv4 = run_window(&s, &o, toks, T);
        QT_CHECK(fp && q8 && q4 && kv4);
        if (fp && q8 && q4 && kv4) {
            e8 = rms_rel(q8, fp, T * V);
            e4 = rms_rel(q4, fp, T * V);
            ekv = rms_rel(kv4, fp, T * V);
            printf("    %-6s logits rms rel error: W8A8KV8 %.4f, W4A4KV4 %.4f, KV4 only %.4f\n", arch, e8, e4, ekv);
            QT_CHECK(e8 < 0.05);
            QT_CHECK(e4 > 3.0 * e8);
            QT_CHECK(ekv > 0.0 && ekv < e4);
        }
        free(fp); free(q8); free(q4); free(kv4);
        qx_store_free(&s);
    }
}

/* Integer products (model/qx_qlinear.h): W4A4 / W8A8 logits of the integer path are close to the
   float product of the same fake-quantized values (float_linears) but not equal to it (another
   summation order); layer-wise streaming gives the same bits; a store whose weights were replaced by
   their RTN values with the grids recorded (what the packed reader makes) runs with w_bits 0 bit for
   bit as RTN at load; a weight moved off its grid is refused, naming it; asymmetric activations take
   the float product. */
static void test_integer_linears(void) {
    qx_store s, g;
    qx_forward_opts o;
    qx_forward f;
    qx_err e;
    int32_t toks[24];
    int64_t T = 24, V, l;
    float *q_int, *q_flt, *q_str, *q_grid, *q_asym, *q_asym_f;
    static const char* const lin[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                       "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"};
    {
        qx_synth_desc d;
        memset(&d, 0, sizeof d);   /* without outlier channels: 8 bits then behaves like ~8 bits */
        d.arch = "llama";
        d.seed = 23;
        d.n_outliers = -1;
        QT_OK(qx_synth_model(&s, &d, &e));
    }
    V = V_of(&s);
    make_tokens(toks, T, V, 5);
    memset(&o, 0, sizeof o);
    o.quant.w_bits = 8; o.quant.a_bits = 8;
    q_int = run_window(&s, &o, toks, T);
    o.quant.float_linears = 1;
    q_flt = run_window(&s, &o, toks, T);
    QT_CHECK(q_int && q_flt);
    if (q_int && q_flt) {
        double d = rms_rel(q_int, q_flt, T * V);
        QT_CHECKF(d > 0.0 && d < 1e-3, "W8A8 integer vs float sums: rms rel %.3g", d);
    }
    free(q_int);
    free(q_flt);
    memset(&o, 0, sizeof o);
    o.quant.w_bits = 4; o.quant.a_bits = 4; o.quant.k_bits = 4; o.quant.v_bits = 4;
    q_int = run_window(&s, &o, toks, T);
    o.stream_weights = 1;
    q_str = run_window(&s, &o, toks, T);
    o.stream_weights = 0;
    o.quant.float_linears = 1;
    q_flt = run_window(&s, &o, toks, T);
    QT_CHECK(q_int && q_flt && q_str && memcmp(q_int, q_flt, (size_t)(T * V) * sizeof(float)) != 0);
    QT_CHECK(q_int && q_str && memcmp(q_int, q_str, (size_t)(T * V) * sizeof(float)) == 0);
    /* the same weights on recorded grids, w_bits 0 */
    QT_OK(qx_store_clone(&s, &g));
    for (l = 0; l < g.config.n_layers; ++l) {
        int k;
        for (k = 0; k < 7; ++k) {
            char name[128];
            quarot_tensor* t;
            quarot_quant_desc d;
            int8_t* q;
            float* sc;
            int64_t rows, cols;
            snprintf(name, sizeof name, "model.layers.%lld.%s.weight", (long long)l, lin[k]);
            t = qx_store_find(&g, name);
            QT_CHECK(t != NULL && t->dtype == QUAROT_DTYPE_F32);
            if (!t) continue;
            rows = t->ne[1];
            cols = t->ne[0];
            memset(&d, 0, sizeof d);
            d.bits = 4;
            q = (int8_t*)malloc((size_t)(rows * cols));
            sc = (float*)malloc((size_t)rows * sizeof(float));
            QT_OK(quarot_quantize_f32((const float*)t->data, rows, cols, cols, &d, q, sc, NULL));
            QT_OK(quarot_dequantize_f32(q, sc, NULL, rows, cols, &d, (float*)t->data, cols));
            QT_OK(qx_store_set_grid(&g, name, 4, rows, cols, cols, sc));
            free(q);
            free(sc);
        }
    }
    memset(&o, 0, sizeof o);
    o.quant.a_bits = 4; o.quant.k_bits = 4; o.quant.v_bits = 4;
    q_grid = run_window(&g, &o, toks, T);
    QT_CHECK(q_grid && q_int && memcmp(q_grid, q_int, (size_t)(T * V) * sizeof(float)) == 0);
    {   /* off the grid */
        quarot_tensor* t = qx_store_find(&g, "model.layers.1.mlp.up_proj.weight");
        ((float*)t->data)[7] *= 1.0001f;
        QT_ERR(qx_forward_init(&f, &g, &o, &e), QUAROT_ERR_INVALID_ARGUMENT);
        QT_CHECKF(strstr(e.msg, "model.layers.1.mlp.up_proj.weight") && strstr(e.msg, "off the 4-bit grid"), "%s", e.msg);
        o.stream_weights = 1;   /* layer-wise: the same refusal when layer 1 runs */
        QT_OK(qx_forward_init(&f, &g, &o, &e));
        QT_CHECK(qx_forward_window(&f, toks, T, NULL, &e) != QUAROT_OK);
        qx_forward_free(&f);
        o.stream_weights = 0;
        qx_store_remove_grid(&g, "model.layers.1.mlp.up_proj.weight");   /* no grid: the float product */
        QT_OK(qx_forward_init(&f, &g, &o, &e));
        qx_forward_free(&f);
    }
    /* asymmetric activations: no integer kernel, the float product either way */
    memset(&o, 0, sizeof o);
    o.quant.w_bits = 4; o.quant.a_bits = 4; o.quant.a_asym = 1;
    q_asym = run_window(&s, &o, toks, T);
    o.quant.float_linears = 1;
    q_asym_f = run_window(&s, &o, toks, T);
    QT_CHECK(q_asym && q_asym_f && memcmp(q_asym, q_asym_f, (size_t)(T * V) * sizeof(float)) == 0);
    free(q_int); free(q_flt); free(q_str); free(q_grid); free(q_asym); free(q_asym_f);
    qx_store_free(&g);
    qx_store_free(&s);
}

/* Capture sees activations before quantization: with A3 activations (weights FP) the first capture
   (layer 0, q_proj input: nothing quantized upstream) is bit-identical to FP, while layer 1's
   down_proj input, downstream of quantized linears, differs. */
static void cap_l0(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    first_capture* c = (first_capture*)user;
    (void)name;
    if (c->done || layer != 0) return;
    c->x = (float*)malloc((size_t)(rows * n) * sizeof(float));
    memcpy(c->x, x, (size_t)(rows * n) * sizeof(float));
    c->n = rows * n;
    c->done = 1;
}

static void test_capture_before_quant(void) {
    qx_store s;
    qx_forward_opts o;
    first_capture c1, c2, d1, d2;
    int32_t toks[8] = {3, 1, 4, 1, 5, 9, 2, 6};
    float* lg;
    synth(&s, "llama", 5);
    memset(&c1, 0, sizeof c1); memset(&c2, 0, sizeof c2);
    memset(&d1, 0, sizeof d1); memset(&d2, 0, sizeof d2);
    memset(&o, 0, sizeof o);
    o.capture = cap_l0; o.capture_user = &c1;
    free(run_window(&s, &o, toks, 8));
    o.capture = cap_first; o.capture_user = &d1;
    free(run_window(&s, &o, toks, 8));
    o.quant.a_bits = 3;
    o.capture = cap_l0; o.capture_user = &c2;
    free(run_window(&s, &o, toks, 8));
    o.capture = cap_first; o.capture_user = &d2;
    lg = run_window(&s, &o, toks, 8);
    QT_CHECK(lg != NULL);
    free(lg);
    QT_CHECK(c1.done && c2.done && c1.n == c2.n && d1.done && d2.done);
    if (c1.done && c2.done) QT_CHECK(memcmp(c1.x, c2.x, (size_t)c1.n * sizeof(float)) == 0);   /* pre-quant */
    if (d1.done && d2.done) QT_CHECK(rms_rel(d2.x, d1.x, d1.n) > 1e-3);                  /* upstream quant acted */
    free(c1.x); free(c2.x); free(d1.x); free(d2.x);
    qx_store_free(&s);
}

/* f16 / bf16 stores: identical to the f32 store holding the same (rounded) values */
static void test_dtypes(void) {
    quarot_dtype dts[2] = {QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    int k;
    for (k = 0; k < 2; ++k) {
        qx_store s, h;
        int32_t toks[6] = {9, 8, 7, 6, 5, 4};
        float *a, *b;
        synth(&s, "qwen2", 6);
        QT_OK(qx_store_clone(&s, &h));
        QT_OK(qx_store_convert(&h, dts[k]));
        QT_OK(qx_store_convert(&s, dts[k]));
        QT_OK(qx_store_convert(&s, QUAROT_DTYPE_F32));   /* s: f32 holding the rounded values */
        a = run_window(&s, NULL, toks, 6);
        b = run_window(&h, NULL, toks, 6);
        QT_CHECK(a && b && memcmp(a, b, (size_t)(6 * V_of(&s)) * sizeof(float)) == 0);
        free(a);
        free(b);
        qx_store_free(&s);
        qx_store_free(&h);
    }
}

/* Bad options, tokens, missing / misshapen tensors, missing lm_head when untied, indivisible heads,
   OPT positions beyond the table: each an error code (and a message naming the culprit). */
static void test_errors(void) {
    qx_store s;
    qx_forward f;
    qx_forward_opts o;
    qx_err e;
    int32_t bad[2] = {1, 100000};
    int64_t ne[2] = {3, 3};
    float lg[256];
    synth(&s, "llama", 1);
    memset(&o, 0, sizeof o);
    o.quant.w_bits = 9;
    QT_ERR(qx_forward_init(&f, &s, &o, &e), QUAROT_ERR_INVALID_ARGUMENT);
    o.quant.w_bits = 4; o.quant.w_group = 7;
    QT_ERR(qx_forward_init(&f, &s, &o, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(qx_forward_init(&f, &s, NULL, &e));
    QT_ERR(qx_forward_window(&f, bad, 2, NULL, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECK(strstr(e.msg, "vocabulary") != NULL);
    QT_ERR(qx_forward_window(&f, bad, 0, NULL, &e), QUAROT_ERR_INVALID_ARGUMENT);
    QT_OK(qx_forward_step(&f, 3, lg, &e));
    qx_forward_free(&f);
    qx_store_remove(&s, "model.layers.1.mlp.up_proj.weight");
    QT_ERR(qx_forward_init(&f, &s, NULL, &e), QUAROT_ERR_NOT_FOUND);
    QT_CHECK(strstr(e.msg, "model.layers.1.mlp.up_proj.weight") != NULL);
    QT_OK(qx_store_add(&s, "model.layers.1.mlp.up_proj.weight", QUAROT_DTYPE_F32, 2, ne, NULL, NULL));
    QT_ERR(qx_forward_init(&f, &s, NULL, &e), QUAROT_ERR_SHAPE_MISMATCH);
    qx_store_free(&s);
    synth(&s, "llama", 1);
    qx_store_remove(&s, "lm_head.weight");
    QT_ERR(qx_forward_init(&f, &s, NULL, &e), QUAROT_ERR_NOT_FOUND);
    s.config.tied_embeddings = 1;
    QT_OK(qx_forward_init(&f, &s, NULL, &e));
    qx_forward_free(&f);
    s.config.n_kv_heads = 3;
    QT_ERR(qx_forward_init(&f, &s, NULL, &e), QUAROT_ERR_INVALID_ARGUMENT);
    qx_store_free(&s);
    synth(&s, "opt", 1);   /* 128 learned positions */
    QT_OK(qx_forward_init(&f, &s, NULL, &e));
    {
        int32_t many[127];
        int i;
        for (i = 0; i < 127; ++i) many[i] = i;
        QT_OK(qx_forward_tokens(&f, many, 127, NULL, &e));
    }
    QT_OK(qx_forward_step(&f, 3, lg, &e));
    QT_ERR(qx_forward_step(&f, 3, lg, &e), QUAROT_ERR_INVALID_ARGUMENT);
    qx_forward_free(&f);
    qx_store_free(&s);
    QT_ERR(qx_forward_init(&f, NULL, NULL, &e), QUAROT_ERR_INVALID_ARGUMENT);
}

/* ---- stories260K (../shared) ---- */
static int load_stories(qx_store* s, qx_tokenizer* tok) {
    char model[4096], tokp[4096];
    const char* p = qt_shared_path("models/stories260K/stories260K.bin");
    qx_err e;
    if (!p) return 0;
    snprintf(model, sizeof model, "%s", p);
    p = qt_shared_path("models/stories260K/tok512.bin");
    if (!p) return 0;
    snprintf(tokp, sizeof tokp, "%s", p);
    QT_OK(qx_l2c_read_file(model, NULL, s, &e));
    QT_OK(qx_tokenizer_load(tok, tokp, (int32_t)s->config.vocab, &e));
    return 1;
}

static void test_stories_generation(void) {
    qx_store s;
    qx_tokenizer tok;
    qx_forward f;
    qx_err e;
    int32_t out[40];
    char text[1024];
    size_t len = 0;
    int32_t prev = QX_TOK_BOS;
    int i;
    const char* want = "Once upon a time, there was a little girl named Lily. She loved to play outside in the park.";
    memset(&tok, 0, sizeof tok);
    if (!load_stories(&s, &tok)) {
        QT_SKIP("../shared/models/stories260K not found");
        return;
    }
    QT_OK(qx_forward_init(&f, &s, NULL, &e));
    QT_OK(qx_eval_generate(&f, QX_TOK_BOS, 40, out, &e));
    for (i = 0; i < 40; ++i) {
        size_t n = 0;
        const char* piece = qx_tokenizer_decode(&tok, prev, out[i], &n);
        if (piece && len + n < sizeof text) {
            memcpy(text + len, piece, n);
            len += n;
        }
        prev = out[i];
    }
    text[len] = '\0';
    printf("    greedy from BOS: \"%.*s\"\n", (int)(len < 160 ? len : 160), text);
    QT_CHECK(strncmp(text, want, strlen(want)) == 0);
    qx_forward_free(&f);
    qx_tokenizer_free(&tok);
    qx_store_free(&s);
}

/* FP32 and W4A4 (RTN per-output-channel symmetric weights, per-token symmetric activations, clip
   1.0, no rotation, KV FP) perplexity on the first 30 windows of 256 tokens (4 under QT_QUICK). */
static void test_stories_perplexity(void) {
    qx_store s;
    qx_tokenizer tok;
    qx_forward f;
    qx_forward_opts o;
    qx_ppl_opts po;
    qx_ppl_result fp, q;
    qx_err e;
    int32_t* toks = NULL;
    int64_t n = 0;
    const char* data;
    char path[4096];
    memset(&tok, 0, sizeof tok);
    if (!load_stories(&s, &tok) || !(data = qt_shared_path("data/tinystories_eval.txt"))) {
        if (tok.pieces) { qx_tokenizer_free(&tok); qx_store_free(&s); }
        QT_SKIP("../shared stories260K model or eval text not found");
    }
    snprintf(path, sizeof path, "%s", data);
    QT_OK(qx_tokenize_file(&tok, path, 0, 0, &toks, &n, &e));
    memset(&po, 0, sizeof po);
    po.seq_len = 256;
    po.max_windows = qt_quick() ? 4 : 30;
    QT_OK(qx_forward_init(&f, &s, NULL, &e));
    QT_OK(qx_eval_perplexity(&f, toks, n, &po, &fp, &e));
    qx_forward_free(&f);
    memset(&o, 0, sizeof o);
    o.quant.w_bits = 4;
    o.quant.a_bits = 4;
    QT_OK(qx_forward_init(&f, &s, &o, &e));
    QT_OK(qx_eval_perplexity(&f, toks, n, &po, &q, &e));
    qx_forward_free(&f);
    printf("    tinystories_eval.txt: %lld tokens; %lld windows of 256 ([BOS] + 255 text tokens), %lld predictions\n",
           (long long)n, (long long)fp.n_windows, (long long)fp.n_predicted);
    printf("    stories260K perplexity: FP32 %.4f, W4A4 RTN (no rotation) %.4f\n", fp.ppl, q.ppl);
    QT_EQ_INT(fp.n_windows, po.max_windows);
    if (!qt_quick()) {
        /* 4.5939: llama2.c's own run.c forward on exactly these tokens and windows gives 4.5939 too
           (checked once by hand; logits agree within 1.1e-4). An outside measurement quoted 3.85 /
           6.72: its windowing differs (BOS + one paragraph per window, first 30 paragraphs, gives
           3.904 / 6.737 here). */
        QT_NEAR(fp.ppl, 4.5939, 0.002);
        QT_NEAR(q.ppl, 8.06, 0.3);
    }
    QT_CHECK(q.ppl > fp.ppl * 1.2);
    free(toks);
    qx_tokenizer_free(&tok);
    qx_store_free(&s);
}

int main(void) {
    QT_RUN(test_against_reference);
    QT_RUN(test_window_vs_incremental);
    QT_RUN(test_threads_bitexact);
    QT_RUN(test_stream_weights_bitexact);
    QT_RUN(test_rope_properties);
    QT_RUN(test_gqa_sharing);
    QT_RUN(test_opt_position_offset);
    QT_RUN(test_qk_norm);
    QT_RUN(test_hook_calls);
    QT_RUN(test_online_rotation_equivalence);
    QT_RUN(test_fake_quant);
    QT_RUN(test_integer_linears);
    QT_RUN(test_capture_before_quant);
    QT_RUN(test_dtypes);
    QT_RUN(test_errors);
    QT_RUN(test_stories_generation);
    QT_RUN(test_stories_perplexity);
    return qt_finish("test_forward");
}
