/* test_moe_quant.c - the weight-quantization stage (eval/qx_wquant.h) on mixture-of-experts models:
   synthetic Mixtral, Qwen2-MoE (shared expert) and Qwen3-MoE (tests/moe_util.h), experts as one
   tensor each (Hugging Face) or as 3-D tensors [n_experts][out][in] (GGUF).
   - GPTQ builds each expert's Hessian from the calibration rows routed to it: for every expert that
     gets tokens, GPTQ's layer-output error on those rows (the stage's report, exact from the
     Hessian) is at most RTN's, and summed over the experts clearly lower; the model's logits on the
     calibration windows are closer to FP32 than with RTN.
   - The router gives experts 1, 2, 3 the same row, so ties (to the lower index) never pick expert 3:
     checked on the FP forward's routes, then expert 3 of every MoE layer is RTN (reported as a
     fallback, counted per layer in the stats' note) and its weights are exactly RTN's of the
     original; the router and the shared-expert gate are not changed.
   - 3-D experts: the same model with stacked experts gives the same quantized weights, bit for bit,
     at each expert's rows of the 3-D tensor; 2 threads give the same bits as 1.
   - quarot.h's stage refuses a MoE layer by name unless moe_mlp_by_caller, and then holds its
     attention linears only.
   - --w-clip (the clip search) and --int8-down-proj run per expert; scale migration at a MoE
     layer's MLP norm (check_migration) keeps the FP function and the routing.
   - `quarot quantize` of a qwen2moe / qwen3moe GGUF to Q4_0 (with and without rotation): the file's
     perplexity equals the fake-quantized eval of its source (groups of 32) within 0.1%; the 3-D
     expert tensors are ggml's ne = [in, out, n_expert], Q4_0, expert e's rows at e * out, and an
     independent Q4_0 decode of them equals the fake quantization of the source expert's rows (to
     the f16 rounding of the block scale); the router stays F32, bit for bit. A Hugging Face Mixtral
     to the packed W4A4 format: per-expert linears packed, its eval equals the fake-quantized one
     within 0.1%.
   - `quarot quantize` of a GGUF MoE (3-D experts) to the packed format, the three families (RTN;
     qwen2_moe GPTQ too): each expert its own packed linear, codes and scales byte for byte those of
     the same model saved as safetensors, `eval --engine int` the same perplexity; the rotation's
     experts one at a time into the Q4_0 / packed output give the same bytes as whole 3-D tensors. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "formats/qx_gguf.h"
#include "formats/qx_packed.h"
#include "eval/qx_wquant.h"
#include "model/qx_windows.h"
#include "support/qx_threads.h"

#include "moe_util.h"
#include "moe_store.h"

static const char* const FAMS[3] = {"mixtral", "qwen2_moe", "qwen3_moe"};


/* experts 2 and 3 take expert 1's router row: top 2 with ties to the lower index never picks 3 */
static void tie_router(mt_model* m) {
    char n[QUAROT_NAME_MAX];
    int l;
    for (l = 0; l < (int)m->cfg.n_layers; ++l) {
        float* w;
        if (!quarot_config_layer_is_moe(&m->cfg, l)) continue;
        nm(n, m->router, l);
        w = mt_get(m, n);
        memcpy(w + 2 * 32, w + 32, 32 * sizeof(float));
        memcpy(w + 3 * 32, w + 32, 32 * sizeof(float));
    }
}

/* the per-expert model m as stacked 3-D experts (the same numbers) */
static void stack_copy(const mt_model* m, mt_model* st) {
    char n[QUAROT_NAME_MAX];
    int i, l, e, p;
    memset(st, 0, sizeof *st);
    st->cfg = m->cfg;
    st->cfg.experts_stacked = 1;
    st->router = m->router;
    st->eg = m->eg; st->eu = m->eu; st->ed = m->ed;
    st->stg = m->stg; st->stu = m->stu; st->std_ = m->std_;
    for (i = 0; i < m->count; ++i) {
        const quarot_tensor* t = &m->items[i].t;
        if (strstr(m->items[i].name, ".experts.")) continue;
        memcpy(mt_new(st, m->items[i].name, t->ne[0], t->ne[1], 1), t->data, (size_t)(t->ne[0] * t->ne[1]) * 4);
    }
    for (l = 0; l < (int)m->cfg.n_layers; ++l) {
        const char* per[3] = {m->eg, m->eu, m->ed};
        const char* stk[3] = {m->stg, m->stu, m->std_};
        if (!quarot_config_layer_is_moe(&m->cfg, l)) continue;
        for (p = 0; p < 3; ++p) {
            float* d;
            nm(n, stk[p], l);
            d = mt_new(st, n, p == 2 ? 16 : 32, p == 2 ? 32 : 16, 4);
            for (e = 0; e < 4; ++e) {
                nme(n, per[p], l, e);
                memcpy(d + e * 512, mt_get((mt_model*)m, n), 512 * sizeof(float));
            }
        }
    }
}

typedef struct reps {
    int64_t experts, fallback, worse, shared, attn;
    double err, err_rtn;
} reps;

static quarot_result on_lin(void* u, const quarot_qlinear_report* r) {
    reps* x = (reps*)u;
    if (strstr(r->name, ".shared_expert.")) x->shared++;
    else if (strstr(r->name, ".experts.")) {
        x->experts++;
        if (r->fallback) { x->fallback++; return QUAROT_OK; }
        if (r->method == QUAROT_WQUANT_GPTQ) {
            x->err += r->err / r->ref;
            x->err_rtn += r->err_rtn / r->ref;
            x->worse += r->err > r->err_rtn * (1.0 + 1e-9);
        }
    } else x->attn++;
    return QUAROT_OK;
}

static qx_windows g_win;
static int32_t g_tok[16 * 24];

static void make_windows(int nwin, int len) {
    int i;
    unsigned s = 12345u;
    for (i = 0; i < nwin * len; ++i) { s = s * 1103515245u + 12345u; g_tok[i] = (int32_t)((s >> 16) % 48u); }
    memset(&g_win, 0, sizeof g_win);
    g_win.tokens = g_tok;
    g_win.offset = (int64_t*)malloc((size_t)(nwin + 1) * sizeof(int64_t));
    for (i = 0; i <= nwin; ++i) g_win.offset[i] = (int64_t)i * len;
    g_win.n = nwin;
    g_win.max_len = len;
    g_win.n_predicted = (int64_t)nwin * (len - 1);
}

/* expert use of the FP forward over the windows: cnt[layer][expert] */
static int64_t g_cnt[4][4];
static void on_route(void* u, int64_t layer, const int32_t* experts, int64_t T, int64_t k) {
    int64_t i;
    (void)u;
    for (i = 0; i < T * k; ++i) g_cnt[layer][experts[i]]++;
}

/* sum of squared logit differences from ref over the windows (ref NULL: fills out) */
static double logits_err(const qx_store* s, float* out, const float* ref, int route) {
    qx_forward f;
    qx_forward_opts o;
    qx_err e;
    double se = 0;
    int64_t w, i, off = 0;
    memset(&o, 0, sizeof o);
    if (route) { o.route = on_route; memset(g_cnt, 0, sizeof g_cnt); }
    if (qx_forward_init(&f, s, &o, &e) != QUAROT_OK) { printf("    init: %s\n", e.msg); return -1; }
    for (w = 0; w < g_win.n; ++w) {
        int64_t T = g_win.offset[w + 1] - g_win.offset[w];
        if (qx_forward_window(&f, g_win.tokens + g_win.offset[w], T, out + off, &e) != QUAROT_OK) { se = -1; break; }
        if (ref) for (i = 0; i < T * 48; ++i) se += ((double)out[off + i] - ref[off + i]) * ((double)out[off + i] - ref[off + i]);
        off += T * 48;
    }
    qx_forward_free(&f);
    return se;
}

static quarot_result run_stage(qx_store* s, int gptq, int clip, int int8, const quarot_env* env, reps* rp, qx_wq_stats* st,
                               qx_err* e) {
    qx_wq_opts o;
    memset(&o, 0, sizeof o);
    memset(rp, 0, sizeof *rp);
    o.desc.method = gptq ? QUAROT_WQUANT_GPTQ : QUAROT_WQUANT_RTN;
    o.desc.weight.bits = 4;
    o.desc.weight.clip_search = clip ? QUAROT_CLIP_SEARCH_LP : 0;
    o.desc.int8_down_proj = int8;
    o.desc.nsamples = g_win.n;
    o.desc.dead_fallback = 1;
    o.desc.on_linear = on_lin;
    o.desc.user_data = rp;
    o.calib = &g_win;
    o.env = env;
    return qx_wq_quantize(s, &o, st, e);
}

static int same_tensor(const qx_store* a, const qx_store* b, const char* name, int64_t row0, int64_t rows) {
    const quarot_tensor* x = qx_store_find(a, name);
    const quarot_tensor* y = qx_store_find(b, name);
    if (!x || !y) return 0;
    return memcmp((const char*)x->data + row0 * x->nb[1], (const char*)y->data + row0 * y->nb[1], (size_t)(rows * x->ne[0]) * 4) == 0;
}

/* the alpha reported for every expert's (and the shared expert's) gate and up, per layer; 9: none
   yet, 8: two linears of a layer disagree */
static double g_alpha[4];
static quarot_result on_alpha(void* u, const quarot_qlinear_report* r) {
    (void)u;
    if ((strstr(r->name, ".experts.") || strstr(r->name, ".shared_expert.")) && !strstr(r->name, "down_proj") &&
        !strstr(r->name, ".w2.")) {
        double* a = &g_alpha[r->layer];
        if (*a == 9.0) *a = r->migrate_alpha;
        else if (*a != r->migrate_alpha) *a = 8.0;
    }
    return QUAROT_OK;
}

static quarot_result run_migrate(qx_store* s) {
    qx_wq_opts o;
    qx_err e;
    quarot_result r;
    int l;
    for (l = 0; l < 4; ++l) g_alpha[l] = 9.0;
    memset(&o, 0, sizeof o);
    o.desc.weight.bits = 4;
    o.desc.migrate = 1;
    o.desc.nsamples = g_win.n;
    o.desc.dead_fallback = 1;
    o.desc.on_linear = on_alpha;
    o.calib = &g_win;
    r = qx_wq_quantize(s, &o, NULL, &e);
    if (r != QUAROT_OK) printf("    migrate: %s\n", e.msg);
    return r;
}

/* Scale migration at a MoE layer's MLP norm (RTN + migrate; lfp: the FP model's logits). Per MoE
   layer, s = the norm gain after / before: every expert's gate and up report the same alpha, and
   alpha != 0 exactly where the gain changed (on at least one layer); s has geometric mean 1; the
   router and the shared-expert gate, never quantized, are W diag(1/s) (to 1e-6). The FP model
   with the migrated gain and readers W diag(1/s) gives the original logits (rms 1e-5 of theirs)
   and the same expert counts; each expert's gate and up are RTN of W diag(1/s) (all but 1% of
   entries to 1e-6 of the row's largest: s from the gains is the search's to an ulp, which can
   move a scale or a code); the same model with 3-D experts gives the same bits. */
static void check_migration(const mt_model* m0, family fam, const float* lfp) {
    static mt_model mf, ms;
    static float lx[16 * 24 * 48];
    const char* per[2] = {m0->eg, m0->eu};
    const int64_t H = 32;
    qx_store sc, sf, sst;
    char n[QUAROT_NAME_MAX];
    int64_t cnt[4][4], l, j, r, i, moved = 0, total = 0, n_alpha = 0, bad = 0;
    double se, ref = 0.0;
    memcpy(cnt, g_cnt, sizeof cnt);
    QT_CHECK(mt_store(m0, &sc) == QUAROT_OK);
    QT_OK(run_migrate(&sc));
    mt_build(&mf, fam, 0, 70u + (unsigned)fam);   /* the same model, made FP-migrated below */
    tie_router(&mf);
    for (l = 0; l < m0->cfg.n_layers; ++l) {
        float s[32], *g0;
        const quarot_tensor* g1;
        double lg = 0.0;
        int changed = 0, e2, p;
        if (!quarot_config_layer_is_moe(&m0->cfg, l)) continue;
        nm(n, "model.layers.%d.post_attention_layernorm.weight", (int)l);
        g0 = mt_get(&mf, n);
        g1 = qx_store_find(&sc, n);
        QT_CHECK(g1 != NULL);
        if (!g1) break;
        for (j = 0; j < H; ++j) {
            s[j] = ((const float*)g1->data)[j] / g0[j];
            changed += ((const float*)g1->data)[j] != g0[j];
            lg += log((double)s[j]);
            g0[j] = ((const float*)g1->data)[j];
        }
        QT_CHECKF(fabs(g_alpha[l]) <= 1.0 && (g_alpha[l] != 0.0) == (changed > 0), "%s layer %lld: alpha %.1f, %d gains "
                  "changed", FAMS[fam], (long long)l, g_alpha[l], changed);
        n_alpha += g_alpha[l] != 0.0;
        QT_NEAR(lg / (double)H, 0.0, 1e-5);
        for (i = 0; i < 2; ++i) {   /* router [4][H], shared-expert gate [1][H] */
            const quarot_tensor* t;
            float* w;
            const int64_t rows = i ? 1 : 4;
            if (i) nm(n, "model.layers.%d.mlp.shared_expert_gate.weight", (int)l);
            else nm(n, m0->router, (int)l);
            t = qx_store_find(&sc, n);
            if (i && !m0->cfg.shared_intermediate) continue;
            w = mt_get(&mf, n);
            QT_CHECK(t != NULL);
            if (!t) continue;
            for (r = 0; r < rows; ++r)
                for (j = 0; j < H; ++j) {
                    const float v = ((const float*)t->data)[r * H + j];
                    bad += fabs((double)v * s[j] - w[r * H + j]) > 1e-6 * fabs((double)w[r * H + j]);
                    w[r * H + j] = v;
                }
        }
        for (e2 = 0; e2 <= 4; ++e2)   /* the experts' gate and up (4: the shared expert's), FP and RTN */
            for (p = 0; p < 2; ++p) {
                static float w[32 * 32];
                const quarot_tensor* t;
                quarot_quant_desc d;
                float* wf;
                const int64_t out = e2 == 4 ? 24 : 16;
                if (e2 == 4 && !m0->cfg.shared_intermediate) continue;
                if (e2 == 4) nm(n, p ? "model.layers.%d.mlp.shared_expert.up_proj.weight" : "model.layers.%d.mlp.shared_expert.gate_proj.weight", (int)l);
                else nme(n, per[p], (int)l, e2);
                wf = mt_get(&mf, n);
                t = qx_store_find(&sc, n);
                QT_CHECK(t != NULL && wf != NULL);
                if (!t || !wf) continue;
                for (r = 0; r < out; ++r)
                    for (j = 0; j < H; ++j) wf[r * H + j] /= s[j];
                memcpy(w, wf, (size_t)(out * H) * sizeof(float));
                memset(&d, 0, sizeof d);
                d.bits = 4;
                QT_OK(quarot_fake_quant_f32(w, out, H, H, &d));
                for (r = 0; r < out; ++r) {
                    double mx = 0.0;
                    for (j = 0; j < H; ++j)
                        if (fabs((double)wf[r * H + j]) > mx) mx = fabs((double)wf[r * H + j]);
                    for (j = 0; j < H; ++j) moved += fabs((double)((const float*)t->data)[r * H + j] - w[r * H + j]) > 1e-6 * mx;
                    total += H;
                }
            }
    }
    QT_CHECKF(bad == 0, "%s: %lld router / gate entries are not W diag(1/s)", FAMS[fam], (long long)bad);
    QT_CHECKF(n_alpha > 0, "%s: every MoE layer chose alpha 0", FAMS[fam]);
    QT_CHECKF(moved * 100 <= total, "%s: %lld of %lld expert entries are not RTN of W diag(1/s)", FAMS[fam], (long long)moved,
              (long long)total);
    QT_CHECK(mt_store(&mf, &sf) == QUAROT_OK);
    se = logits_err(&sf, lx, lfp, 1);
    for (i = 0; i < 16 * 24 * 48 && i < g_win.offset[g_win.n] * 48; ++i) ref += (double)lfp[i] * lfp[i];
    QT_CHECKF(se >= 0 && se <= 1e-10 * ref, "%s: FP-migrated logits SSE %.3g (ref %.3g)", FAMS[fam], se, ref);
    QT_CHECKF(memcmp(cnt, g_cnt, sizeof cnt) == 0, "%s: the FP-migrated model routes differently", FAMS[fam]);
    printf("    %-9s migration: alpha != 0 on %lld MoE layers; FP-migrated logits rms %.2e of theirs, same routing; "
           "%lld of %lld expert entries off RTN(W/s)\n", FAMS[fam], (long long)n_alpha, sqrt(se / ref), (long long)moved,
           (long long)total);
    stack_copy(m0, &ms);   /* 3-D experts: the same bits at each expert's rows */
    QT_CHECK(mt_store(&ms, &sst) == QUAROT_OK);
    QT_OK(run_migrate(&sst));
    for (l = 0; l < m0->cfg.n_layers; ++l) {
        const char* stk[3] = {m0->stg, m0->stu, m0->std_};
        const char* pe[3] = {m0->eg, m0->eu, m0->ed};
        int p, e2;
        char n2[QUAROT_NAME_MAX];
        if (!quarot_config_layer_is_moe(&m0->cfg, l)) continue;
        for (p = 0; p < 3; ++p)
            for (e2 = 0; e2 < 4; ++e2) {
                const quarot_tensor *a, *b;
                nme(n, pe[p], (int)l, e2);
                nm(n2, stk[p], (int)l);
                a = qx_store_find(&sc, n);
                b = qx_store_find(&sst, n2);
                QT_CHECKF(a && b && memcmp(a->data, (const char*)b->data + e2 * b->nb[2], 512 * 4) == 0,
                          "%s migrate: %s differs from expert %d of %s", FAMS[fam], n, e2, n2);
            }
        nm(n, m0->router, (int)l);
        QT_CHECK(same_tensor(&sc, &sst, n, 0, 4));
        nm(n, "model.layers.%d.post_attention_layernorm.weight", (int)l);
        QT_CHECK(same_tensor(&sc, &sst, n, 0, 1));
    }
    qx_store_free(&sst);
    qx_store_free(&sf);
    qx_store_free(&sc);
    mt_free(&ms);
    mt_free(&mf);
}

static void test_gptq_per_expert(void) {
    const int nwin = qt_quick() ? 4 : 12, len = 16;
    int f;
    make_windows(nwin, len);
    for (f = 0; f < 3; ++f) {
        static mt_model m, ms;
        static float lfp[16 * 24 * 48], lx[16 * 24 * 48];
        qx_store s0, sg, sr, s2, sst;
        reps rg, rr, r2, rst;
        qx_wq_stats st, st2, stst;
        qx_err e;
        qx_pool* pool;
        quarot_env env;
        int64_t n_moe = 0, l, ex, unpicked = 0;
        double eg, er;
        char n[QUAROT_NAME_MAX], want[128];
        int ok = 1;
        if (qt_quick() && f != 1) continue;
        mt_build(&m, (family)f, 0, 70u + (unsigned)f);
        tie_router(&m);
        for (l = 0; l < m.cfg.n_layers; ++l) n_moe += quarot_config_layer_is_moe(&m.cfg, l);
        QT_CHECK(mt_store(&m, &s0) == QUAROT_OK && mt_store(&m, &sg) == QUAROT_OK && mt_store(&m, &sr) == QUAROT_OK && mt_store(&m, &s2) == QUAROT_OK);
        QT_CHECK(logits_err(&s0, lfp, NULL, 1) >= 0);
        for (l = 0; l < m.cfg.n_layers; ++l) {   /* the FP model: expert 3 never chosen, the others are */
            if (!quarot_config_layer_is_moe(&m.cfg, l)) continue;
            unpicked += g_cnt[l][3] == 0;
            for (ex = 0; ex < 3; ++ex) ok &= g_cnt[l][ex] > 0;
        }
        QT_CHECKF(unpicked == n_moe && ok, "%s: the tied router should leave expert 3 (only) unpicked", FAMS[f]);
        if (run_stage(&sg, 1, 0, 0, NULL, &rg, &st, &e) != QUAROT_OK) { printf("    %s\n", e.msg); QT_CHECK(0); }
        QT_OK(run_stage(&sr, 0, 0, 0, NULL, &rr, NULL, &e));
        /* every routed expert's three linears and the shared expert's reported; one RTN expert per layer */
        QT_CHECKF(rg.experts == n_moe * 12 && rg.fallback == n_moe * 3 && st.experts_rtn == n_moe,
                  "%s: %lld expert linears, %lld fallbacks, %lld RTN experts (want %lld, %lld, %lld)", FAMS[f],
                  (long long)rg.experts, (long long)rg.fallback, (long long)st.experts_rtn, (long long)(n_moe * 12),
                  (long long)(n_moe * 3), (long long)n_moe);
        QT_CHECK(rg.shared == (m.cfg.shared_intermediate ? n_moe * 3 : 0));
        for (l = 0; l < m.cfg.n_layers; ++l)
            if (quarot_config_layer_is_moe(&m.cfg, l)) {
                snprintf(want, sizeof want, "layer %lld: 1 of 4 experts had no calibration tokens: RTN", (long long)l);
                QT_CHECKF(strstr(st.moe_note, want) != NULL, "%s: note \"%s\" lacks \"%s\"", FAMS[f], st.moe_note, want);
            }
        QT_CHECKF(rg.worse == 0 && rg.err < 0.9 * rg.err_rtn, "%s: GPTQ worse than RTN on %lld expert linears; "
                  "relative output error summed %.4g vs RTN %.4g", FAMS[f], (long long)rg.worse, rg.err, rg.err_rtn);
        /* expert 3: exactly RTN of the original; the router and shared gate untouched */
        for (l = 0; l < m.cfg.n_layers; ++l) {
            const char* per[3] = {m.eg, m.eu, m.ed};
            int p;
            if (!quarot_config_layer_is_moe(&m.cfg, l)) continue;
            for (p = 0; p < 3; ++p) {
                quarot_quant_desc d;
                static float w[512];
                const quarot_tensor* t;
                nme(n, per[p], l, 3);
                t = qx_store_find(&sg, n);
                memcpy(w, mt_get(&m, n), sizeof w);
                memset(&d, 0, sizeof d);
                d.bits = 4;
                QT_OK(quarot_fake_quant_f32(w, p == 2 ? 32 : 16, p == 2 ? 16 : 32, p == 2 ? 16 : 32, &d));
                QT_CHECKF(t && memcmp(t->data, w, sizeof w) == 0, "%s: %s is not RTN of the original", FAMS[f], n);
                QT_CHECKF(same_tensor(&sg, &sr, n, 0, p == 2 ? 32 : 16), "%s: %s differs from the RTN stage's", FAMS[f], n);
            }
            nm(n, m.router, l);
            QT_CHECK(same_tensor(&sg, &s0, n, 0, 4));
            if (m.cfg.shared_intermediate) {
                nm(n, "model.layers.%d.mlp.shared_expert_gate.weight", l);
                QT_CHECK(same_tensor(&sg, &s0, n, 0, 1));
            }
        }
        eg = logits_err(&sg, lx, lfp, 0);
        er = logits_err(&sr, lx, lfp, 0);
        QT_CHECKF(eg > 0 && er > 0 && eg < er, "%s: logits error to FP32 GPTQ %.4g, RTN %.4g", FAMS[f], eg, er);
        printf("    %-9s GPTQ per expert: %lld expert linears (%lld RTN: no tokens), output error / ref summed %.4g vs RTN %.4g; "
               "logits SSE to FP32 %.4g vs RTN %.4g\n", FAMS[f], (long long)rg.experts, (long long)rg.fallback, rg.err,
               rg.err_rtn, eg, er);
        /* 2 threads: the same bits */
        pool = qx_pool_create(2);
        qx_pool_env(pool, &env);
        QT_OK(run_stage(&s2, 1, 0, 0, &env, &r2, &st2, &e));
        qx_pool_destroy(pool);
        for (ok = 1, l = 0; l < (int64_t)sg.count; ++l) ok &= same_tensor(&sg, &s2, sg.items[l].name, 0, quarot_tensor_nrows(&sg.items[l].t));
        QT_CHECKF(ok, "%s: 2 threads differ from 1", FAMS[f]);
        /* the same model with 3-D experts: the same weights at each expert's rows */
        stack_copy(&m, &ms);
        QT_CHECK(mt_store(&ms, &sst) == QUAROT_OK);
        QT_OK(run_stage(&sst, 1, 0, 0, NULL, &rst, &stst, &e));
        QT_CHECK(rst.experts == rg.experts && rst.fallback == rg.fallback && strcmp(stst.moe_note, st.moe_note) == 0);
        for (l = 0; l < m.cfg.n_layers; ++l) {
            const char* per[3] = {m.eg, m.eu, m.ed};
            const char* stk[3] = {m.stg, m.stu, m.std_};
            int p;
            if (!quarot_config_layer_is_moe(&m.cfg, l)) continue;
            for (p = 0; p < 3; ++p)
                for (ex = 0; ex < 4; ++ex) {
                    const quarot_tensor *a, *b;
                    char n2[QUAROT_NAME_MAX];
                    nme(n, per[p], (int)l, (int)ex);
                    nm(n2, stk[p], (int)l);
                    a = qx_store_find(&sg, n);
                    b = qx_store_find(&sst, n2);
                    QT_CHECKF(a && b && memcmp(a->data, (const char*)b->data + ex * b->nb[2], 512 * 4) == 0,
                              "%s: %s differs from expert %lld of %s", FAMS[f], n, (long long)ex, n2);
                }
        }
        qx_store_free(&sst);
        mt_free(&ms);
        /* the clip search and int8 down_proj per expert (RTN); migration refused by name */
        {
            qx_store sc;
            QT_CHECK(mt_store(&m, &sc) == QUAROT_OK);
            QT_OK(run_stage(&sc, 0, 1, 1, NULL, &rr, &st2, &e));
            QT_CHECK(rr.experts == n_moe * 12 && rr.fallback == 0 && st2.experts_rtn == 0);
            qx_store_free(&sc);
        }
        check_migration(&m, (family)f, lfp);
        qx_store_free(&s0); qx_store_free(&sg); qx_store_free(&sr); qx_store_free(&s2);
        mt_free(&m);
    }
    free(g_win.offset);
}


static double eval_row(const char* model, const char* opts, const char* row) {
    int rc = CLI("eval %s --tokens %s --seq-len 16 --quiet %s", model, tmp_path("toks.txt"), opts);
    QT_CHECKF(rc == 0, "eval %s: rc %d: %s", model, rc, g_err);
    return rc == 0 ? row_value(row) : -1.0;
}

static void check_close(double file, double fake, const char* what) {
    QT_CHECKF(file > 0 && fake > 0 && fabs(file - fake) <= 1e-3 * fake, "%s: file %.5f vs fake-quant %.5f (> 0.1%%)", what, file, fake);
    printf("    %-34s file ppl %.5f, fake-quant %.5f (rel %.1e, bound 1e-3)\n", what, file, fake, fabs(file - fake) / fake);
}

static float f16(uint16_t h) {
    float f;
    quarot_f16_to_f32(&h, &f, 1);
    return f;
}

/* q.gguf's 3-D experts against the source m (no rotation): ne order, type, rows, values */
static void check_gguf_layout(const char* path, mt_model* m) {
    size_t len = 0;
    unsigned char* buf = read_all(path, &len);
    qx_gguf_file gf;
    qx_err e;
    int l, p, found = 0;
    double worst = 0;
    if (!buf || qx_gguf_parse(buf, len, path, &gf, &e) != QUAROT_OK) { QT_CHECKF(0, "%s: cannot parse", path); free(buf); return; }
    for (l = 0; l < (int)m->cfg.n_layers; ++l) {
        static const char* const gg[3] = {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"};
        const char* stk[3] = {m->stg, m->stu, m->std_};
        char want[64], n[QUAROT_NAME_MAX];
        uint64_t i;
        for (p = 0; p < 4; ++p) {
            const qx_gguf_tinfo* t = NULL;
            if (p < 3) snprintf(want, sizeof want, "blk.%d.%s.weight", l, gg[p]);
            else snprintf(want, sizeof want, "blk.%d.ffn_gate_inp.weight", l);
            for (i = 0; i < gf.n_tensors; ++i)
                if (gf.t[i].name_len == strlen(want) && memcmp(gf.t[i].name, want, gf.t[i].name_len) == 0) t = &gf.t[i];
            if (!t) { QT_CHECKF(0, "%s: no %s", path, want); continue; }
            found++;
            if (p == 3) {   /* the router: F32, the source's bytes */
                nm(n, m->router, l);
                QT_CHECKF(t->type == 0 && t->n_dims == 2 && t->ne[0] == 32 && t->ne[1] == 4 &&
                          memcmp(gf.data + t->offset, mt_get(m, n), 4 * 32 * 4) == 0, "%s: router not the F32 source", want);
                continue;
            }
            {
                const int64_t in = p == 2 ? 16 : 32, out = p == 2 ? 32 : 16;
                const unsigned char* d = gf.data + t->offset;
                int64_t ex, r, j;
                /* rows of 16 (down_proj) are not whole Q4_0 blocks: F16, llama.cpp's fallback */
                QT_CHECKF(t->type == (in % 32 ? 1u : 2u) && t->n_dims == 3 && t->ne[0] == in && t->ne[1] == out && t->ne[2] == 4,
                          "%s: type %u, ne [%lld, %lld, %lld], want %s [%lld, %lld, 4]", want, t->type, (long long)t->ne[0],
                          (long long)t->ne[1], (long long)t->ne[2], in % 32 ? "F16" : "Q4_0", (long long)in, (long long)out);
                nm(n, stk[p], l);
                if (in % 32) {   /* F16: the source's values, expert e at e * out rows */
                    const uint16_t* h = (const uint16_t*)(const void*)d;
                    for (j = 0; j < 4 * out * in; ++j) {
                        const double diff = fabs((double)f16(h[j]) - mt_get(m, n)[j]);
                        if (diff > 1e-3 * fabs((double)mt_get(m, n)[j]) + 1e-7) { QT_CHECKF(0, "%s: value %lld", want, (long long)j); break; }
                    }
                    continue;
                }
                for (ex = 0; ex < 4; ++ex)
                    for (r = 0; r < out; ++r) {
                        const float* src = mt_get(m, n) + (ex * out + r) * in;
                        const unsigned char* blk = d + (size_t)((ex * out + r) * (in / 32)) * 18;
                        float fq[32], amax = 0;
                        quarot_quant_desc qd;
                        memset(&qd, 0, sizeof qd);
                        qd.bits = 4;
                        qd.group_size = 32;
                        memcpy(fq, src, sizeof fq);
                        QT_OK(quarot_fake_quant_f32(fq, 1, 32, 32, &qd));
                        for (j = 0; j < 32; ++j) if (fabsf(src[j]) > amax) amax = fabsf(src[j]);
                        for (j = 0; j < 32; ++j) {   /* ggml's block_q4_0: f16 d, 16 bytes of two nibbles */
                            const float dd = f16((uint16_t)(blk[0] | blk[1] << 8));
                            const int qv = j < 16 ? (blk[2 + j] & 15) : (blk[2 + j - 16] >> 4);
                            const double diff = fabs((double)dd * (qv - 8) - fq[j]) / amax;
                            if (diff > worst) worst = diff;
                        }
                    }
            }
        }
    }
    QT_CHECKF(worst <= 1e-3, "%s: the file's experts differ from the fake-quantized source by %.3g of the row max", path, worst);
    printf("    %s: %d expert / router tensors, decoded Q4_0 vs fake-quant source max %.2e of the row max (bound 1e-3)\n",
           path, found, worst);
    qx_gguf_file_free(&gf);
    free(buf);
}

static void test_cli_quantize_moe(void) {
    char toks[256 * 4], in[512], q[512], rot[512], msg[64];
    int f, i, n = 0;
    for (i = 0; i < 96; ++i) n += snprintf(toks + n, sizeof toks - (size_t)n, "%d ", (i * 13 + 7) % 48);
    QT_CHECK(write_str(tmp_path("toks.txt"), toks));
    g_mlp_only = 0;
    for (f = 1; f < 3; ++f) {   /* GGUF: qwen2moe and qwen3moe, every layer MoE, experts 3-D */
        static mt_model m;
        double a, b;
        int rc;
        if (qt_quick() && f != 1) continue;
        mt_build_all_moe(&m, (family)f, 1, 80u + (unsigned)f);
        snprintf(in, sizeof in, "%s/%s_in.gguf", g_tmp, FAMS[f]);
        snprintf(q, sizeof q, "%s/%s_q.gguf", g_tmp, FAMS[f]);
        snprintf(rot, sizeof rot, "%s/%s_rot.gguf", g_tmp, FAMS[f]);
        if (!mt_save(&m, in, 1)) { QT_CHECK(0); mt_free(&m); continue; }
        rc = CLI("quantize %s %s --rotation none --dtype f32 --force", in, q);   /* f32: only the experts' Q4_0 differs */
        QT_CHECKF(rc == 0 && strstr(g_out, "Q4_0") && strstr(g_out, "routers / shared-expert gates kept F32"), "rc %d: %s%s", rc, g_out, g_err);
        check_gguf_layout(q, &m);
        a = eval_row(q, "--w-bits 16 --a-bits 16", "FP32");
        b = eval_row(in, "--w-bits 4 --a-bits 16 --group-size 32 --group-fallback", "W4A16");
        snprintf(msg, sizeof msg, "%s Q4_0, no rotation", FAMS[f]);
        check_close(a, b, msg);
        rc = CLI("quantize %s %s --dtype f32 --force --quiet", in, q);
        QT_CHECKF(rc == 0, "rc %d: %s", rc, g_err);
        rc = CLI("rotate %s %s --force --quiet", in, rot);
        QT_CHECKF(rc == 0, "rc %d: %s", rc, g_err);
        a = eval_row(q, "--w-bits 16 --a-bits 16", "FP32");
        b = eval_row(rot, "--w-bits 4 --a-bits 16 --group-size 32 --group-fallback", "W4A16");
        snprintf(msg, sizeof msg, "%s Q4_0, rotated", FAMS[f]);
        check_close(a, b, msg);
        mt_free(&m);
    }
    {   /* a Hugging Face Mixtral, per-expert tensors, to the packed format */
        static mt_model m;
        double a, b;
        int rc;
        mt_build(&m, FAM_MIXTRAL, 0, 90u);
        snprintf(in, sizeof in, "%s/mixtral_in", g_tmp);
        snprintf(q, sizeof q, "%s/mixtral_q.safetensors", g_tmp);
        if (mt_save(&m, in, 0)) {
            rc = CLI("quantize %s %s --rotation none --force", in, q);
            QT_CHECKF(rc == 0 && strstr(g_out, "experts.3.w2.weight") && strstr(g_out, "int4"), "rc %d: %s%s", rc, g_out, g_err);
            a = eval_row(q, "--w-bits 16 --a-bits 16", "FP32");
            b = eval_row(in, "--w-bits 4 --a-bits 16", "W4A16");
            check_close(a, b, "mixtral packed W4, no rotation");
        } else QT_CHECK(0);
        mt_free(&m);
    }
    g_mlp_only = 1;
}

/* quarot.h's stage alone: a MoE layer is refused by name without moe_mlp_by_caller; with it the
   layer's linears are the attention's four (router, experts, shared expert left to the caller) */
static void test_stage_moe_layer(void) {
    static mt_model m;
    quarot_model qm;
    quarot_quantizer qz;
    quarot_quantize_desc d;
    int64_t i;
    int ok = 1;
    mt_build(&m, FAM_QWEN2, 0, 99u);
    qm = mt_binding(&m);
    memset(&d, 0, sizeof d);
    QT_OK(quarot_quantizer_init(&qz, &qm, &d));
    QT_CHECKF(quarot_quantizer_begin_layer(&qz, 1) == QUAROT_ERR_UNSUPPORTED && strstr(qz.error, "mixture-of-experts"),
              "%s", qz.error);
    quarot_quantizer_free(&qz);
    d.moe_mlp_by_caller = 1;
    QT_OK(quarot_quantizer_init(&qz, &qm, &d));
    QT_OK(quarot_quantizer_begin_layer(&qz, 1));
    for (i = 0; i < qz.n_linears; ++i) ok &= strstr(qz.names[i], ".self_attn.") != NULL;
    QT_CHECKF(qz.n_linears == 4 && ok, "%lld linears in MoE layer 1", (long long)qz.n_linears);
    while (quarot_quantizer_pending(&qz)) QT_OK(quarot_quantizer_step(&qz));
    QT_OK(quarot_quantizer_end_layer(&qz));
    QT_OK(quarot_quantizer_begin_layer(&qz, 0));   /* a dense layer of the same model: all seven */
    QT_CHECKF(qz.n_linears == 7, "%lld linears in dense layer 0", (long long)qz.n_linears);
    quarot_quantizer_free(&qz);
    mt_free(&m);
}

/* m's vocabulary widened to the CLI tests' byte-level tokenizer (SYN_VOCAB), new rows random */
static void widen_vocab(mt_model* m) {
    const char* names[2] = {"model.embed_tokens.weight", "lm_head.weight"};
    int k;
    for (k = 0; k < 2; ++k) {
        mt_tensor* t = mt_find(m, names[k]);
        float* d = (float*)realloc(t->t.data, (size_t)SYN_VOCAB * 32 * sizeof(float));
        if (!d) continue;
        fill(d + 48 * 32, (int64_t)(SYN_VOCAB - 48) * 32, k ? 0.05 : 0.5);   /* lm_head rows small: a sane perplexity */
        t->t.data = d;
        t->t.ne[1] = SYN_VOCAB;
        t->t.nb[2] = t->t.nb[3] = (size_t)SYN_VOCAB * 32 * 4;
    }
    m->cfg.vocab = SYN_VOCAB;
}

/* GPTQ through quantize (3-D experts: each expert's codes at its rows) equals eval --w-quant gptq of
   the source within 0.1%; expert 3 (never routed to) is RTN, said on stderr and in the summary. */
static void test_cli_gptq_moe(void) {
    static mt_model m;
    char in[512], q[512], tok[512], txt[512], opts[2400];
    double a, b;
    int rc;
    g_mlp_only = 0;
    mt_build_all_moe(&m, FAM_QWEN3, 1, 95u);
    g_mlp_only = 1;
    tie_router(&m);
    widen_vocab(&m);
    snprintf(in, sizeof in, "%s/g_in.gguf", g_tmp);
    snprintf(q, sizeof q, "%s/g_q.gguf", g_tmp);
    snprintf(tok, sizeof tok, "%s", tmp_path("tok.bin"));
    snprintf(txt, sizeof txt, "%s", tmp_path("text.txt"));
    if (!mt_save(&m, in, 1) || !write_tokenizer(tok) || !cu_write_sentences(txt, 20)) { QT_CHECK(0); mt_free(&m); return; }
    rc = CLI("quantize %s %s --w-quant gptq --calib-text %s --tokenizer %s --nsamples 4 --seq-len 32 --dtype f32 --force", in, q,
             txt, tok);
    QT_CHECKF(rc == 0 && strstr(g_out, "layer 0: 1 of 4 experts had no calibration tokens: RTN") && strstr(g_out, "RTN*"),
              "rc %d: %s%s", rc, g_out, g_err);
    QT_CHECKF(strstr(g_err, "experts.3.gate_proj.weight: no calibration token routed to it") &&
              strstr(g_err, "mixture of experts: layer 0: 1 of 4 experts"), "%s", g_err);
    snprintf(opts, sizeof opts, "--tokenizer %s --w-bits 16 --a-bits 16 --columns none", tok);
    rc = CLI("eval %s --text %s --seq-len 32 --quiet %s", q, txt, opts);
    QT_CHECKF(rc == 0, "eval: rc %d: %s", rc, g_err);
    a = rc == 0 ? row_value("FP32") : -1;
    snprintf(opts, sizeof opts, "--tokenizer %s --w-bits 4 --a-bits 16 --group-size 32 --group-fallback --w-quant gptq --calib-text %s "
             "--nsamples 4 --columns quarot --no-online", tok, txt);
    rc = CLI("eval %s --text %s --seq-len 32 --quiet %s", in, txt, opts);
    QT_CHECKF(rc == 0, "eval: rc %d: %s", rc, g_err);
    b = rc == 0 ? row_value("W4A16") : -1;
    check_close(a, b, "qwen3_moe GPTQ Q4_0 rotated");
    mt_free(&m);
}

/* The linears of packed files a (from a GGUF) and b (the same model as Hugging Face safetensors):
   the same names, shapes, codes and scales, byte for byte; a's q/k rows in llama.cpp's interleaved
   RoPE order (a Mixtral GGUF) are compared at the half-split row they come from. Returns the number
   of linears compared (-1: a file did not parse). */
static int64_t same_packed_linears(const char* a, const char* b, int64_t head_dim, int a_interleaved, int64_t* n_experts) {
    size_t la = 0, lb = 0;
    unsigned char* ba = read_all(a, &la);
    unsigned char* bb = read_all(b, &lb);
    qx_packed_file fa, fb;
    qx_err e;
    int64_t i, j, r, n = -1;
    *n_experts = 0;
    memset(&fa, 0, sizeof fa);
    memset(&fb, 0, sizeof fb);
    if (ba && bb && qx_packed_parse(ba, la, a, &fa, &e) == QUAROT_OK && qx_packed_parse(bb, lb, b, &fb, &e) == QUAROT_OK) {
        n = 0;
        QT_CHECKF(fa.n_lin == fb.n_lin, "%lld vs %lld packed linears", (long long)fa.n_lin, (long long)fb.n_lin);
        for (i = 0; i < fb.n_lin; ++i) {
            const qx_packed_linear* y = &fb.lin[i];
            const qx_packed_linear* x = NULL;
            const size_t sb = fb.settings.scale_dtype == QUAROT_DTYPE_F16 ? 2 : 4;
            int qk = a_interleaved && (strstr(y->name, ".q_proj.") || strstr(y->name, ".k_proj."));
            for (j = 0; j < fa.n_lin && !x; ++j)
                if (strcmp(fa.lin[j].name, y->name) == 0) x = &fa.lin[j];
            if (!x) { QT_CHECKF(0, "%s: not in %s", y->name, a); continue; }
            if (x->out != y->out || x->in != y->in || x->groups != y->groups || x->row_bytes != y->row_bytes) {
                QT_CHECKF(0, "%s: shapes differ", y->name);
                continue;
            }
            for (r = 0; r < y->out; ++r) {   /* row r of a is row src(r) of b */
                int64_t sr = qk ? qx_rope_src_row(r, head_dim, 1) : r;
                if (memcmp(x->qweight + r * x->row_bytes, y->qweight + sr * y->row_bytes, (size_t)y->row_bytes) != 0 ||
                    memcmp(x->scales + r * x->groups * (int64_t)sb, y->scales + sr * y->groups * (int64_t)sb, (size_t)y->groups * sb) != 0) {
                    QT_CHECKF(0, "%s: row %lld: codes or scales differ", y->name, (long long)r);
                    break;
                }
            }
            n++;
            *n_experts += strstr(y->name, ".experts.") != NULL;
        }
    } else {
        QT_CHECKF(0, "%s / %s: cannot parse: %s", a, b, e.msg);
    }
    qx_packed_file_free(&fa);
    qx_packed_file_free(&fb);
    free(ba);
    free(bb);
    return n;
}

/* `quarot quantize` of a GGUF MoE (3-D experts) to the packed format: each expert a 2-D packed
   linear under its Hugging Face name; against the same model saved as safetensors (per-expert
   tensors) the packed files hold the same codes and scales, byte for byte, and `quarot eval
   --engine int` gives the same perplexity (bound 1e-6 relative: the Mixtral GGUF's interleaved
   q/k rows sum the attention scores in another order). RTN rotated for the three families, GPTQ
   (--w-quant gptq) for qwen2_moe; a group size that divides no expert row is refused with one
   error line and no output, and so are a NaN in an expert and a write that fails part-way. */
static void test_cli_packed_from_gguf(void) {
    char toks[256 * 4], gg[512], hf[512], pa[512], pb[512], msg[96], want[160], gopt[1200];
    int f, i, g, L, n = 0;
    for (i = 0; i < 96; ++i) n += snprintf(toks + n, sizeof toks - (size_t)n, "%d ", (i * 13 + 7) % 48);
    QT_CHECK(write_str(tmp_path("toks.txt"), toks));
    QT_CHECK(write_tokenizer(tmp_path("tok.bin")) && cu_write_sentences(tmp_path("text.txt"), 20));
    snprintf(gopt, sizeof gopt, " --w-quant gptq --calib-text %s --nsamples 4 --seq-len 32", tmp_path("text.txt"));
    n = (int)strlen(gopt);
    snprintf(gopt + n, sizeof gopt - (size_t)n, " --tokenizer %s", tmp_path("tok.bin"));
    g_mlp_only = 0;
    for (f = 0; f < 3; ++f) {
        static mt_model m, st;
        int64_t nl, nex;
        double a, b;
        int rc;
        if (qt_quick() && f != 1) continue;
        mt_build_all_moe(&m, (family)f, 0, 70u + (unsigned)f);
        L = (int)m.cfg.n_layers;
        if (f == 1) widen_vocab(&m);   /* GPTQ's calibration text through the byte-level tokenizer */
        stack_copy(&m, &st);
        snprintf(gg, sizeof gg, "%s/%s_p_in.gguf", g_tmp, FAMS[f]);
        snprintf(hf, sizeof hf, "%s/%s_p_in", g_tmp, FAMS[f]);
        snprintf(pa, sizeof pa, "%s/%s_gguf.safetensors", g_tmp, FAMS[f]);
        snprintf(pb, sizeof pb, "%s/%s_hf.safetensors", g_tmp, FAMS[f]);
        if (!mt_save(&st, gg, 1) || !mt_save(&m, hf, 0)) { QT_CHECK(0); mt_free(&m); mt_free(&st); continue; }
        for (g = 0; g < (f == 1 ? 2 : 1); ++g) {   /* RTN; qwen2_moe GPTQ too */
            snprintf(want, sizeof want, "3-D experts: %d tensors [n_experts][out][in] written as %d per-expert packed linears",
                     3 * L, 12 * L);
            rc = CLI("quantize %s %s --force%s", gg, pa, g ? gopt : "");
            QT_CHECKF(rc == 0 && strstr(g_out, want), "rc %d: %s%s", rc, g_out, g_err);
            rc = CLI("quantize %s %s --force --quiet%s", hf, pb, g ? gopt : "");
            QT_CHECKF(rc == 0, "rc %d: %s", rc, g_err);
            nl = same_packed_linears(pa, pb, 8, f == 0, &nex);
            QT_CHECKF(nex == 12 * L, "%lld expert linears, want %d", (long long)nex, 12 * L);
            a = eval_row(pa, "--engine int --no-fp32", "W4A4");
            b = eval_row(pb, "--engine int --no-fp32", "W4A4");
            /* qwen: the same printed perplexity; Mixtral within 1e-6 (its q/k rows in another order) */
            QT_CHECKF(a > 0 && b > 0 && (f == 0 ? fabs(a - b) <= 1e-6 * b : a == b), "%s: engine ppl %.7f (GGUF) vs %.7f (HF)",
                      FAMS[f], a, b);
            snprintf(msg, sizeof msg, "%s %s packed, GGUF vs HF", FAMS[f], g ? "GPTQ" : "RTN");
            printf("    %-34s %lld linears (%lld experts) same codes; engine ppl %.4f vs %.4f\n", msg, (long long)nl, (long long)nex,
                   a, b);
        }
        {   /* the rotation hands the 3-D experts over one expert at a time: the same bytes as whole (--whole-experts) */
            static const char* const outs[2] = {"q.gguf", "p.safetensors"};
            int v, k;
            for (k = 0; k < 2; ++k) {
                char o2[2][600];
                for (v = 0; v < 2; ++v) {
                    snprintf(o2[v], sizeof o2[v], "%s/%s_%d_%s", g_tmp, FAMS[f], v, outs[k]);
                    rc = CLI("quantize %s %s --force%s", gg, o2[v], v ? " --whole-experts" : "");
                    QT_CHECKF(rc == 0 && (strstr(g_out, "written one expert at a time (") != NULL) == (v == 0) &&
                                  (strstr(g_out, "a whole tensor at a time (--whole-experts") != NULL) == (v == 1),
                              "rc %d: %s%s", rc, g_out, g_err);
                }
                QT_CHECKF(same_file(o2[0], o2[1]), "%s %s: expert by expert differs from whole", FAMS[f], outs[k]);
            }
        }
        if (f == 1) {   /* a group size that divides no expert row: exit 4 (QX_EXIT_PROCESS), no file */
            const char* bad = tmp_path("bad_moe.safetensors");
            rc = CLI("quantize %s %s --group-size 24 --force", gg, bad);
            QT_CHECKF(rc == 4 && strstr(g_err, "--group-size 24 does not divide") && access(bad, F_OK) != 0,
                      "rc %d: %s", rc, g_err);
            {   /* a write that fails part-way (a file size limit below the file's size): exit 3, one line, no file or
                   temporary left */
                static const char* const outs[2] = {"fsz/moe.safetensors", "fsz/moe.gguf"};
                char pre[64];
                struct stat sb;
                int k;
                QT_CHECK(stat(pa, &sb) == 0 && mkdir(tmp_path("fsz"), 0755) == 0);
                snprintf(pre, sizeof pre, "ulimit -f %lld;", (long long)(sb.st_size / 2048));   /* at most half the file (units of 512 or 1024 bytes) */
                for (k = 0; k < 2; ++k) {
                    const char* o = tmp_path(outs[k]);
                    rc = run_prog(pre, g_bin, "quantize %s %s --force", gg, o);
                    if (getenv("QX_SHOW")) printf("    %s: %s", outs[k], g_err);
                    QT_CHECKF(rc == 3 && count_lines(g_err) == 1 && access(o, F_OK) != 0 && rmdir(tmp_path("fsz")) == 0 &&
                              mkdir(tmp_path("fsz"), 0755) == 0, "%s: rc %d: %s", outs[k], rc, g_err);
                }
            }
            {   /* a NaN in expert 2 of a 3-D tensor: exit 2, one error line naming it, no file (both outputs) */
                char nn[QUAROT_NAME_MAX];
                static const char* const outs[2] = {"nan_moe.safetensors", "nan_moe.gguf"};
                int k;
                nm(nn, st.stu, 1);
                mt_get(&st, nn)[2 * 512 + 5] = NAN;
                if (mt_save(&st, gg, 1))
                    for (k = 0; k < 2; ++k) {
                        const char* o = tmp_path(outs[k]);
                        rc = CLI("quantize %s %s --force", gg, o);
                        if (getenv("QX_SHOW")) printf("    %s: %s", outs[k], g_err);
                        QT_CHECKF(rc == 2 && strstr(g_err, "up_proj") && count_lines(g_err) == 1 && access(o, F_OK) != 0,
                                  "%s: rc %d: %s", outs[k], rc, g_err);
                    }
                else QT_CHECK(0);
            }
        }
        mt_free(&m);
        mt_free(&st);
    }
    g_mlp_only = 1;
}

int main(int argc, char** argv) {
    (void)argc;
    QT_RUN(test_stage_moe_layer);
    QT_RUN(test_gptq_per_expert);
    if (!cu_start(argv[0], "test_moe_quant")) return 1;
    QT_RUN(test_cli_quantize_moe);
    QT_RUN(test_cli_gptq_moe);
    QT_RUN(test_cli_packed_from_gguf);
    cu_finish();
    return qt_finish("test_moe_quant");
}
