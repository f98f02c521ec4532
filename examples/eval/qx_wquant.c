/* qx_wquant.c - see qx_wquant.h. */
#include "eval/qx_wquant.h"
#include "support/qx_file.h"

#include <stdlib.h>
#include <string.h>

/* ---- a quarot_model over a qx_forward's f32 weight copies ---- */

typedef struct qx__fwbind {
    qx_forward* f;
} qx__fwbind;

/* "model.layers.{i}.<suffix>" or "model.decoder.layers.{i}.<suffix>" -> the forward's array. */
static quarot_result qx__fw_get(void* user, const char* name, quarot_tensor* out) {
    qx_forward* f = ((qx__fwbind*)user)->f;
    const char* p = name;
    const char* pre = f->is_opt ? "model.decoder.layers." : "model.layers.";
    qx_forward_layer* L;
    int64_t l = 0, ne[2];
    float* w = NULL;
    const char* sfx;
    if (strncmp(p, pre, strlen(pre)) != 0) return QUAROT_ERR_NOT_FOUND;
    p += strlen(pre);
    if (*p < '0' || *p > '9') return QUAROT_ERR_NOT_FOUND;
    while (*p >= '0' && *p <= '9') l = l * 10 + (*p++ - '0');
    if (*p++ != '.' || l >= f->cfg.n_layers) return QUAROT_ERR_NOT_FOUND;
    L = &f->layers[l];
    sfx = p;
    ne[0] = f->cfg.hidden;
    if (strcmp(sfx, "input_layernorm.weight") == 0) return quarot_tensor_init(out, L->norm1_w, QUAROT_DTYPE_F32, 1, ne);
    if (strcmp(sfx, "post_attention_layernorm.weight") == 0) return quarot_tensor_init(out, L->norm2_w, QUAROT_DTYPE_F32, 1, ne);
    if (strcmp(sfx, "self_attn.q_proj.weight") == 0) { w = L->wq; ne[1] = f->q_dim; }
    else if (strcmp(sfx, "self_attn.k_proj.weight") == 0) { w = L->wk; ne[1] = f->kv_dim; }
    else if (strcmp(sfx, "self_attn.v_proj.weight") == 0) { w = L->wv; ne[1] = f->kv_dim; }
    else if (strcmp(sfx, "self_attn.o_proj.weight") == 0 || strcmp(sfx, "self_attn.out_proj.weight") == 0) {
        w = L->wo; ne[0] = f->q_dim; ne[1] = f->cfg.hidden;
    }
    else if (strcmp(sfx, "mlp.gate_proj.weight") == 0) { w = L->w_gate; ne[1] = f->cfg.intermediate; }
    else if (strcmp(sfx, "mlp.up_proj.weight") == 0 || strcmp(sfx, "fc1.weight") == 0) { w = L->w_up; ne[1] = f->cfg.intermediate; }
    else if (strcmp(sfx, "mlp.down_proj.weight") == 0 || strcmp(sfx, "fc2.weight") == 0) {
        w = L->w_down; ne[0] = f->cfg.intermediate; ne[1] = f->cfg.hidden;
    }
    if (!w) return QUAROT_ERR_NOT_FOUND;
    return quarot_tensor_init(out, w, QUAROT_DTYPE_F32, 2, ne);
}

/* ---- mixture of experts: each expert on the calibration rows routed to it ----

   The stage (quarot_quantizer, desc.moe_mlp_by_caller) quantizes a MoE layer's attention; its MLP is
   quantized here, in two steps like the dense gate/up and down_proj: each routed expert's gate and
   up on the Hessian of the normed rows routed to it, then each expert's down_proj on the Hessian of
   its own intermediate activations (after the online R4, as the capture hook gives them); the
   shared expert on every row. Hessians are collected for a chunk of experts per pass over the
   calibration windows (a chunk's Hessians within QX__MOE_HBYTES); an expert's inputs do not depend
   on the other experts' weights, so the chunking does not change the result. An expert that no
   calibration token is routed to is quantized by RTN (report fallback = 1) and counted. The router
   and the shared-expert gate are never quantized. */

#define QX__MOE_HBYTES ((size_t)2 << 30)

typedef struct qx__moeq {
    int64_t layer, E;                 /* the MoE layer being collected; E routed experts, index E = shared */
    int phase;                        /* 0: gate/up inputs, 1: down_proj inputs */
    int64_t lo, hi;                   /* experts [lo, hi) collected in this pass (hi may include E) */
    int64_t in;                       /* the phase's input width for routed experts */
    int64_t s_in;                     /* the shared expert's (phase 1: shared_intermediate) */
    double** h;                       /* [E + 1] */
    int64_t* rows;                    /* [E + 1] */
    double* diag;                     /* migration: diag of the router input's Hessian [hidden], else NULL */
    double alpha;                     /* migration: the alpha chosen at this layer's MLP norm */
    int mixtral;
    const quarot_env* env;
    quarot_result status;
    char err[200];
} qx__moeq;

/* expert index (E = the shared expert) of a capture name that is the phase's input, else -1 */
static int64_t qx__moe_which(const qx__moeq* m, const char* name) {
    const char* p = name;
    int64_t l = 0, e = 0;
    if (strncmp(p, "model.layers.", 13) != 0) return -1;
    p += 13;
    while (*p >= '0' && *p <= '9') l = l * 10 + (*p++ - '0');
    if (l != m->layer || *p++ != '.') return -1;
    if (strncmp(p, "mlp.shared_expert.", 18) == 0)
        return strcmp(p + 18, m->phase ? "down_proj.weight" : "gate_proj.weight") == 0 ? m->E : -1;
    if (strncmp(p, m->mixtral ? "block_sparse_moe.experts." : "mlp.experts.", m->mixtral ? 25u : 12u) != 0) return -1;
    p += m->mixtral ? 25 : 12;
    if (*p < '0' || *p > '9') return -1;
    while (*p >= '0' && *p <= '9') e = e * 10 + (*p++ - '0');
    if (*p++ != '.' || e >= m->E) return -1;
    if (m->mixtral) return strcmp(p, m->phase ? "w2.weight" : "w1.weight") == 0 ? e : -1;
    return strcmp(p, m->phase ? "down_proj.weight" : "gate_proj.weight") == 0 ? e : -1;
}

/* 1 when a capture name is this layer's router (its input: the MLP norm's output rows) */
static int qx__moe_is_router(const qx__moeq* m, const char* name) {
    char want[96];
    snprintf(want, sizeof want, "model.layers.%lld.%s.gate.weight", (long long)m->layer, m->mixtral ? "block_sparse_moe" : "mlp");
    return strcmp(name, want) == 0;
}

static void qx__moe_add(qx__moeq* m, const char* name, const float* x, int64_t rows, int64_t n) {
    int64_t e = qx__moe_which(m, name), in, t, j;
    quarot_result r;
    if (e < 0 && m->diag && n == m->in && qx__moe_is_router(m, name)) {   /* the norm's output, every row */
        for (t = 0; t < rows; ++t)
            for (j = 0; j < n; ++j) m->diag[j] += (double)x[t * n + j] * (double)x[t * n + j];
        return;
    }
    if (e < 0 || e < m->lo || e >= m->hi || rows <= 0) return;
    in = e == m->E ? m->s_in : m->in;
    if (n != in) { m->status = QUAROT_ERR_SHAPE_MISMATCH; snprintf(m->err, sizeof m->err, "%s: input of %lld, expected %lld", name, (long long)n, (long long)in); return; }
    if (!m->h[e]) {
        m->h[e] = (double*)calloc((size_t)(in * in), sizeof(double));
        if (!m->h[e]) { m->status = QUAROT_ERR_OUT_OF_MEMORY; snprintf(m->err, sizeof m->err, "%s: out of memory for its [%lld][%lld] Hessian", name, (long long)in, (long long)in); return; }
    }
    r = quarot_hessian_accumulate_f64(m->h[e], in, x, rows, n);
    if (r != QUAROT_OK) { m->status = r; snprintf(m->err, sizeof m->err, "%s: %s in its calibration input rows", name, r == QUAROT_ERR_NONFINITE ? "NaN or Inf" : quarot_result_string(r)); return; }
    m->rows[e] += rows;
}

/* ---- capture: every decoder linear's input goes to the stage (it keeps what it wants) ---- */

typedef struct qx__wqcap {
    quarot_quantizer* qz;
    qx__moeq* moe;                    /* collecting a MoE layer's experts, else NULL */
    quarot_result status;
} qx__wqcap;

static void qx__wq_capture(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    qx__wqcap* c = (qx__wqcap*)user;
    quarot_result r;
    (void)layer;
    if (c->moe) {
        if (c->moe->status == QUAROT_OK) qx__moe_add(c->moe, name, x, rows, n);
        return;
    }
    if (c->status != QUAROT_OK || !quarot_quantizer_wants(c->qz, name)) return;
    r = quarot_quantizer_add(c->qz, name, x, rows, n);
    if (r != QUAROT_OK) c->status = r;
}

/* The HF name of MoE layer l's expert e (E: the shared expert) projection p (0 gate, 1 up, 2 down). */
static void qx__moe_wname(const qx_forward* f, int64_t l, int64_t e, int p, char* out, size_t n) {
    static const char* const mix[3] = {"w1", "w3", "w2"};
    static const char* const qw[3] = {"gate_proj", "up_proj", "down_proj"};
    if (e == f->cfg.n_experts) snprintf(out, n, "model.layers.%lld.mlp.shared_expert.%s.weight", (long long)l, qw[p]);
    else if (f->is_mixtral) snprintf(out, n, "model.layers.%lld.block_sparse_moe.experts.%lld.%s.weight", (long long)l, (long long)e, mix[p]);
    else snprintf(out, n, "model.layers.%lld.mlp.experts.%lld.%s.weight", (long long)l, (long long)e, qw[p]);
}

/* The store's tensor of that projection and the first row of it in the tensor (a stacked 3-D
   tensor [n_experts][out][in]: expert e's rows start at e * out). */
static quarot_tensor* qx__moe_dst(qx_store* s, const qx_forward* f, int64_t l, int64_t e, int p, int64_t out, int64_t* row0,
                                  char* nm, size_t n) {
    static const char* const mix[3] = {"w1", "w3", "w2"};
    static const char* const qw[3] = {"gate_proj", "up_proj", "down_proj"};
    *row0 = 0;
    if (e < f->cfg.n_experts && f->cfg.experts_stacked) {
        if (f->is_mixtral) snprintf(nm, n, "model.layers.%lld.block_sparse_moe.experts.%s.weight", (long long)l, mix[p]);
        else snprintf(nm, n, "model.layers.%lld.mlp.experts.%s.weight", (long long)l, qw[p]);
        *row0 = e * out;
    } else {
        qx__moe_wname(f, l, e, p, nm, n);
    }
    return qx_store_find(s, nm);
}

/* One pass of the calibration windows through MoE layer m->layer: the Hessians of experts [lo, hi)
   of m->phase (their row counts restarted), and with m->diag the router input's diagonal. */
static quarot_result qx__moe_collect(const qx_wq_opts* o, qx_ek_forward* ef, qx__moeq* m, const float* x, float* tmp,
                                     int64_t nwin, int64_t lo, int64_t hi, qx_err* e) {
    const int64_t H = ef->f.cfg.hidden;
    int64_t ex, w;
    quarot_result r = QUAROT_OK;
    m->lo = lo;
    m->hi = hi;
    for (ex = lo; ex < hi; ++ex) m->rows[ex] = 0;
    for (w = 0; w < nwin && r == QUAROT_OK; ++w) {
        int64_t a = o->calib->offset[w], T = o->calib->offset[w + 1] - a;
        memcpy(tmp, x + a * H, (size_t)(T * H) * sizeof(float));
        r = qx_forward_layer_run(&ef->f, m->layer, tmp, T, e);
        if (r == QUAROT_OK && m->status != QUAROT_OK) { r = m->status; qx_err_set(e, "%s", m->err); }
        if (r == QUAROT_OK && qx_ek_forward_status(ef) != QUAROT_OK) r = qx_ek_forward_status(ef);
    }
    return r;
}

/* Experts [lo, hi) of a pass over `in`-wide inputs: as many as QX__MOE_HBYTES of Hessians hold. */
static int64_t qx__moe_chunk(int64_t in) {
    int64_t chunk = (int64_t)(QX__MOE_HBYTES / ((size_t)(in * in) * sizeof(double)));
    return chunk < 1 ? 1 : chunk;
}

/* desc.migrate at MoE layer l's MLP norm: the alpha search of quarot_scale_migration_search, with
   each routed expert's gate and up under the Hessian of the rows routed to it and the shared
   expert's under every row, the scales from the norm's output over every row (the router's input).
   Where alpha != 0 the norm gain takes s and every reader of it -- each expert's gate and up, the
   shared expert's, the router and the shared-expert gate -- W diag(1/s): in the forward's weights
   (phase 0 then collects the experts' Hessians again, on the migrated inputs) and, for the router
   and the gate, which are not quantized, in the store (the norm gain is written back by the caller). */
static quarot_result qx__moe_migrate(qx_store* s, const qx_wq_opts* o, qx_ek_forward* ef, qx__moeq* m, const float* x,
                                     float* tmp, int64_t nwin, qx_err* e) {
    qx_forward* f = &ef->f;
    const qx_forward_moe* mo = f->layers[m->layer].moe;
    const int64_t E = f->cfg.n_experts, H = f->cfg.hidden, l = m->layer, chunk = qx__moe_chunk(H);
    const int keep_router = f->opts.capture_router;
    double err[QUAROT_MIGRATION_STEPS], alphas[QUAROT_MIGRATION_STEPS];
    double* diag;
    float *sc, *sv, *wt;
    int64_t lo, ex, j, r0, i;
    int k, p, kb = 0;
    quarot_result r = QUAROT_OK;
    m->alpha = 0.0;
    m->phase = 0;
    m->in = m->s_in = H;
    diag = (double*)calloc((size_t)H, sizeof(double));
    sc = (float*)malloc((size_t)(QUAROT_MIGRATION_STEPS * H) * sizeof(float));
    if (!diag || !sc) { free(diag); free(sc); qx_err_set(e, "layer %lld: out of memory", (long long)l); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (k = 0; k < QUAROT_MIGRATION_STEPS; ++k) err[k] = 0.0;
    for (lo = 0; lo <= E && r == QUAROT_OK; lo += chunk) {
        int64_t hi = lo + chunk > E + 1 ? E + 1 : lo + chunk;
        if (hi == E + 1 && !mo->shared[0]) hi = E;
        if (lo >= hi) break;
        m->diag = lo == 0 ? diag : NULL;   /* every pass sees every row: the first one measures them */
        f->opts.capture_router = lo == 0 ? 1 : keep_router;
        r = qx__moe_collect(o, ef, m, x, tmp, nwin, lo, hi, e);
        m->diag = NULL;
        f->opts.capture_router = keep_router;
        if (r != QUAROT_OK) break;
        for (k = 0; lo == 0 && k < QUAROT_MIGRATION_STEPS && r == QUAROT_OK; ++k)
            r = quarot_scale_migration_scales(diag, H, k, sc + k * H, &alphas[k]);
        for (ex = lo; ex < hi && r == QUAROT_OK; ++ex) {
            for (p = 0; p < 2 && m->h[ex] && r == QUAROT_OK; ++p) {   /* no routed rows: no error at any alpha */
                wt = ex == E ? mo->shared[p] : mo->w[3 * ex + p];
                for (k = 0; k < QUAROT_MIGRATION_STEPS && r == QUAROT_OK; ++k) {
                    double ek = 0.0;
                    r = quarot_scale_migration_error(m->h[ex], H, wt, ex == E ? f->s_inter : f->e_inter, &o->desc.weight,
                                                     sc + k * H, &ek, o->env);
                    err[k] += ek;
                }
            }
            free(m->h[ex]);
            m->h[ex] = NULL;
        }
        if (r != QUAROT_OK) qx_err_set(e, "layer %lld: scale migration: %s", (long long)l, quarot_result_string(r));
    }
    for (k = 1; k < QUAROT_MIGRATION_STEPS; ++k)
        if (err[k] < err[kb]) kb = k;
    if (r == QUAROT_OK && kb > 0) {   /* step 0 is alpha = 0 */
        const char* rn = f->is_mixtral ? "block_sparse_moe.gate" : "mlp.gate";
        sv = sc + kb * H;
        m->alpha = alphas[kb];
        for (j = 0; j < H; ++j) f->layers[l].norm2_w[j] *= sv[j];
        for (ex = 0; ex <= E; ++ex)
            for (p = 0; p < 2 && (ex < E || mo->shared[0]); ++p) {
                const int64_t out = ex == E ? f->s_inter : f->e_inter;
                wt = ex == E ? mo->shared[p] : mo->w[3 * ex + p];
                for (r0 = 0; r0 < out; ++r0)
                    for (j = 0; j < H; ++j) wt[r0 * H + j] /= sv[j];
            }
        for (i = 0; i < 2 && r == QUAROT_OK; ++i) {   /* the router [E][H] and the shared-expert gate [1][H] */
            char nm[QUAROT_NAME_MAX];
            quarot_tensor* dst;
            const int64_t rows = i ? 1 : E;
            wt = i ? mo->shared_gate : mo->router;
            if (!wt) continue;
            snprintf(nm, sizeof nm, "model.layers.%lld.%s.weight", (long long)l, i ? "mlp.shared_expert_gate" : rn);
            for (r0 = 0; r0 < rows; ++r0)
                for (j = 0; j < H; ++j) wt[r0 * H + j] /= sv[j];
            dst = qx_store_find(s, nm);
            if (!dst || dst->ne[0] != H || quarot_tensor_nrows(dst) != rows) {
                qx_err_set(e, "%s: cannot write the migrated weight back", nm);
                r = QUAROT_ERR_INTERNAL;
            }
            for (r0 = 0; r0 < rows && r == QUAROT_OK; ++r0) r = quarot_tensor_set_row_f32(dst, r0, wt + r0 * H);
        }
    }
    free(diag);
    free(sc);
    return r;
}

/* MoE layer l's MLP: collect, quantize and write back every expert (see above). */
static quarot_result qx__moe_layer(qx_store* s, const qx_wq_opts* o, qx_ek_forward* ef, qx__wqcap* cap, const float* x,
                                   float* tmp, int64_t nwin, int gptq, qx_wq_stats* st, qx_err* e) {
    qx_forward* f = &ef->f;
    const qx_forward_moe* mo;
    const int64_t E = f->cfg.n_experts, H = f->cfg.hidden, l = cap->moe->layer;
    qx__moeq* m = cap->moe;
    quarot_result r = QUAROT_OK;
    int64_t ex, none = 0;
    int phase, p;
    int8_t* q = NULL;
    float *sc = NULL, *zr = NULL;
    int64_t maxw = (f->e_inter > f->s_inter ? f->e_inter : f->s_inter) * H;
    mo = f->opts.stream_weights ? NULL : f->layers[l].moe;
    if (!mo || !mo->w) {
        qx_err_set(e, "layer %lld: the MoE weights are not in memory (layer-wise forward)", (long long)l);
        return QUAROT_ERR_UNSUPPORTED;
    }
    q = (int8_t*)malloc((size_t)maxw);
    sc = (float*)malloc((size_t)maxw * sizeof(float));
    zr = (float*)malloc((size_t)maxw * sizeof(float));
    if (!q || !sc || !zr) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "layer %lld: out of memory", (long long)l); goto done; }
    m->alpha = 0.0;
    if (o->desc.migrate) r = qx__moe_migrate(s, o, ef, m, x, tmp, nwin, e);
    for (phase = 0; phase < 2 && r == QUAROT_OK; ++phase) {
        int64_t chunk, lo;
        m->phase = phase;
        m->in = phase ? f->e_inter : H;
        m->s_in = phase ? f->s_inter : H;
        chunk = qx__moe_chunk(m->in);
        for (lo = 0; lo <= E && r == QUAROT_OK; lo += chunk) {
            int64_t hi = lo + chunk > E + 1 ? E + 1 : lo + chunk;
            if (hi == E + 1 && !mo->shared[0]) hi = E;
            if (lo >= hi) break;
            r = qx__moe_collect(o, ef, m, x, tmp, gptq ? nwin : 0, lo, hi, e);   /* the chunk's inputs */
            for (ex = lo; ex < hi && r == QUAROT_OK; ++ex) {
                const int shared = ex == E;
                const int64_t I = shared ? f->s_inter : f->e_inter;
                if (gptq && !shared && m->rows[ex] == 0 && phase == 0) none++;
                for (p = phase ? 2 : 0; p < (phase ? 3 : 2) && r == QUAROT_OK; ++p) {
                    float* wt = shared ? mo->shared[p] : mo->w[3 * ex + p];
                    const int64_t out = p == 2 ? H : I, in = p == 2 ? I : H;
                    quarot_quantize_desc d = o->desc;
                    quarot_qlinear_report rep;
                    quarot_tensor* dst;
                    int64_t row0, k;
                    char nm[QUAROT_NAME_MAX], msg[200];
                    qx__moe_wname(f, l, ex, p, nm, sizeof nm);
                    if (d.keep_indivisible && d.weight.group_size > 0 && in % d.weight.group_size != 0 &&
                        !(p == 2 && d.int8_down_proj))
                        continue;   /* the group fallback: left as it is, as the stage does */
                    d.dead_fallback = 1;   /* no routed rows: RTN, reported (fallback) and counted */
                    if (p == 2 && d.int8_down_proj) { d.weight.bits = 8; d.weight.group_size = 0; }
                    r = quarot_quantize_linear(wt, out, in, in, m->h[ex], m->rows[ex], &d, q, sc, zr, &rep, msg,
                                               sizeof msg, o->env);
                    if (r != QUAROT_OK) { qx_err_set(e, "%s: %s", nm, msg[0] ? msg : quarot_result_string(r)); break; }
                    rep.name = nm;
                    rep.layer = l;
                    rep.step = p == 2 ? 3 : 2;
                    rep.migrate_alpha = p == 2 ? 0.0 : m->alpha;
                    if (d.on_linear && (r = d.on_linear(d.user_data, &rep)) != QUAROT_OK) {
                        qx_err_set(e, "%s: stopped by the report callback: %s", nm, quarot_result_string(r));
                        break;
                    }
                    st->linears++;
                    dst = qx__moe_dst(s, f, l, ex, p, out, &row0, nm, sizeof nm);
                    if (!dst || dst->ne[0] != in || quarot_tensor_nrows(dst) < row0 + out) {
                        qx_err_set(e, "%s: cannot write the quantized weight back", nm);
                        r = QUAROT_ERR_INTERNAL;
                        break;
                    }
                    for (k = 0; k < out && r == QUAROT_OK; ++k) r = quarot_tensor_set_row_f32(dst, row0 + k, wt + k * in);
                    if (r != QUAROT_OK) qx_err_set(e, "%s: %s", nm, quarot_result_string(r));
                }
                free(m->h[ex]);
                m->h[ex] = NULL;
            }
        }
    }
    if (r == QUAROT_OK && none > 0) {
        size_t len = strlen(st->moe_note);
        st->experts_rtn += none;
        if (len + 96 < sizeof st->moe_note)
            snprintf(st->moe_note + len, sizeof st->moe_note - len, "%slayer %lld: %lld of %lld experts had no calibration tokens: RTN",
                     len ? "; " : "", (long long)l, (long long)none, (long long)E);
        else if (len + 5 < sizeof st->moe_note && !strstr(st->moe_note, "; ..."))
            snprintf(st->moe_note + len, sizeof st->moe_note - len, "; ...");
    }
done:
    for (ex = 0; ex <= E; ++ex) { free(m->h[ex]); m->h[ex] = NULL; }
    free(q);
    free(sc);
    free(zr);
    return r;
}

quarot_result qx_wq_quantize(qx_store* s, const qx_wq_opts* o, qx_wq_stats* st, qx_err* e) {
    qx_ek_forward ef;
    qx__fwbind bind;
    qx__wqcap cap;
    quarot_model m;
    quarot_quantizer qz;
    quarot_quantize_desc desc;
    qx__moeq moe;
    quarot_result r;
    qx_wq_stats dummy;
    int64_t nwin = 0, tokens = 0, l, w, i, k, L, hidden;
    float *x = NULL, *tmp = NULL;
    int gptq, have_f = 0, have_qz = 0;
    double t0 = qx_now();
    if (!st) st = &dummy;
    memset(st, 0, sizeof *st);
    if (!s || !o) {
        qx_err_set(e, "qx_wq_quantize: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    gptq = o->desc.method == QUAROT_WQUANT_GPTQ || o->desc.migrate;   /* calibration rows needed */
    memset(&cap, 0, sizeof cap);
    memset(&moe, 0, sizeof moe);
    cap.qz = &qz;
    desc = o->desc;
    desc.moe_mlp_by_caller = 1;   /* a MoE layer's experts: qx__moe_layer */
    if (s->config.n_experts > 0) {
        moe.E = s->config.n_experts;
        moe.mixtral = strcmp(s->config.arch, "mixtral") == 0;
        moe.env = o->env;
        moe.h = (double**)calloc((size_t)(moe.E + 1), sizeof *moe.h);
        moe.rows = (int64_t*)calloc((size_t)(moe.E + 1), sizeof *moe.rows);
        if (!moe.h || !moe.rows) {
            free(moe.h);
            free(moe.rows);
            qx_err_set(e, "out of memory");
            return QUAROT_ERR_OUT_OF_MEMORY;
        }
    }
    r = qx_ek_forward_init(&ef, s, o->hooks, NULL, gptq ? qx__wq_capture : NULL, &cap, e);
    if (r != QUAROT_OK) { free(moe.h); free(moe.rows); return r; }
    have_f = 1;
    ef.f.opts.env = o->env;
    L = ef.f.cfg.n_layers;
    hidden = ef.f.cfg.hidden;
    /* the stage's view of the forward's weights */
    bind.f = &ef.f;
    memset(&m, 0, sizeof m);
    m.config = s->config;
    m.user_data = &bind;
    m.get_tensor = qx__fw_get;
    if (o->env) m.env = *o->env;
    r = quarot_quantizer_init(&qz, &m, &desc);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s", qz.error[0] ? qz.error : quarot_result_string(r));
        goto done;
    }
    have_qz = 1;
    /* calibration inputs: the embeddings of the first nsamples windows, back to back */
    if (gptq) {
        int64_t want = o->desc.nsamples ? o->desc.nsamples : 128;
        if (!o->calib || o->calib->n < want) {
            qx_err_set(e, "calibration text too short: %lld windows of up to %lld tokens, --nsamples asks for %lld",
                       (long long)(o->calib ? o->calib->n : 0), (long long)(o->calib ? o->calib->max_len : 0), (long long)want);
            r = QUAROT_ERR_INVALID_ARGUMENT;
            goto done;
        }
        nwin = want;
        tokens = o->calib->offset[nwin];
        x = (float*)malloc((size_t)(tokens * hidden) * sizeof(float));
        tmp = (float*)malloc((size_t)(o->calib->max_len * hidden) * sizeof(float));
        if (!x || !tmp) {
            qx_err_set(e, "calibration: out of memory (%lld tokens x %lld)", (long long)tokens, (long long)hidden);
            r = QUAROT_ERR_OUT_OF_MEMORY;
            goto done;
        }
        for (w = 0; w < nwin && r == QUAROT_OK; ++w) {
            int64_t a = o->calib->offset[w];
            r = qx_forward_embed(&ef.f, o->calib->tokens + a, o->calib->offset[w + 1] - a, x + a * hidden, e);
        }
        if (r != QUAROT_OK) goto done;
        st->windows = nwin;
        st->tokens = tokens;
    }
    for (l = 0; l < L; ++l) {
        r = quarot_quantizer_begin_layer(&qz, l);
        while (r == QUAROT_OK && quarot_quantizer_pending(&qz)) {
            if (quarot_quantizer_wants_data(&qz)) {
                /* this step's inputs: the layer over every window (the quantized steps before it included) */
                for (w = 0; w < nwin && r == QUAROT_OK; ++w) {
                    int64_t a = o->calib->offset[w], T = o->calib->offset[w + 1] - a;
                    memcpy(tmp, x + a * hidden, (size_t)(T * hidden) * sizeof(float));
                    r = qx_forward_layer_run(&ef.f, l, tmp, T, e);
                    if (r == QUAROT_OK && cap.status != QUAROT_OK) r = cap.status;
                    if (r == QUAROT_OK && qx_ek_forward_status(&ef) != QUAROT_OK) r = qx_ek_forward_status(&ef);
                }
                if (r != QUAROT_OK) {
                    if (cap.status != QUAROT_OK) qx_err_set(e, "%s", qz.error);
                    break;
                }
            }
            r = quarot_quantizer_step(&qz);
            if (r != QUAROT_OK) qx_err_set(e, "%s", qz.error[0] ? qz.error : quarot_result_string(r));
        }
        if (r == QUAROT_OK && quarot_config_layer_is_moe(&ef.f.cfg, l)) {   /* the experts, on their routed rows */
            moe.layer = l;
            moe.status = QUAROT_OK;
            cap.moe = &moe;
            r = qx__moe_layer(s, o, &ef, &cap, x, tmp, nwin, gptq, st, e);
            cap.moe = NULL;
        }
        if (r == QUAROT_OK) r = quarot_quantizer_end_layer(&qz);
        if (r != QUAROT_OK) goto done;
        /* sequential: the quantized layer's outputs are the next layer's inputs */
        for (w = 0; gptq && l + 1 < L && w < nwin && r == QUAROT_OK; ++w) {
            int64_t a = o->calib->offset[w];
            r = qx_forward_layer_run(&ef.f, l, x + a * hidden, o->calib->offset[w + 1] - a, e);
        }
        if (r != QUAROT_OK) goto done;
        /* write the layer back into the store (with scale migration, the norm gains too) */
        for (i = 0; i < qz.n_linears + (o->desc.migrate ? 2 : 0) && r == QUAROT_OK; ++i) {
            char nn[QUAROT_NAME_MAX];
            quarot_tensor src, *dst;
            if (i < qz.n_linears) snprintf(nn, sizeof nn, "%s", qz.names[i]);
            else snprintf(nn, sizeof nn, "model.layers.%lld.%s", (long long)l,
                          i == qz.n_linears ? "input_layernorm.weight" : "post_attention_layernorm.weight");
            dst = qx_store_find(s, nn);
            if (!dst || qx__fw_get(&bind, nn, &src) != QUAROT_OK || quarot_tensor_nrows(dst) != quarot_tensor_nrows(&src)) {
                qx_err_set(e, "%s: cannot write the quantized weight back", nn);
                r = QUAROT_ERR_INTERNAL;
                break;
            }
            for (k = 0; k < quarot_tensor_nrows(&src) && r == QUAROT_OK; ++k)
                r = quarot_tensor_set_row_f32(dst, k, (const float*)src.data + k * src.ne[0]);
            if (r != QUAROT_OK) qx_err_set(e, "%s: %s", nn, quarot_result_string(r));
        }
        if (r != QUAROT_OK) goto done;
        if (o->on_layer) o->on_layer(o->user, l + 1, L);
    }
    st->linears += qz.linears_done;
done:
    free(moe.h);
    free(moe.rows);
    free(x);
    free(tmp);
    if (have_qz) quarot_quantizer_free(&qz);
    if (have_f) qx_ek_forward_free(&ef);
    st->seconds = qx_now() - t0;
    return r;
}

int qx_wq_cell_staged(const qx_wq_cell* c) {
    return c->w_bits < 16 && !c->packed && (c->gptq || c->clip_search || c->migrate || c->int8_down_proj || c->group_fallback);
}
