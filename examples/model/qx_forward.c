/* qx_forward.c - see qx_forward.h. A plain FP32 reference: every linear is one GEMM over the T rows
   of a block, attention is two GEMMs per head (scores = q k^T, out = P v) over the KV cache, and
   the norms accumulate in double. Window and incremental decoding share this one code path, so
   they differ only by the summation order inside the GEMMs. */
#include "model/qx_forward.h"
#include "model/qx_qlinear.h"
#include "model/qx_model.h"
#include "model/qx_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char* qx_site_name(qx_site s) {
    switch (s) {
        case QX_SITE_DOWN_INPUT: return "down_input";
        case QX_SITE_O_INPUT: return "o_input";
        case QX_SITE_Q_ROPE: return "q_rope";
        case QX_SITE_K_ROPE: return "k_rope";
        case QX_SITE_EXPERT_DOWN_INPUT: return "expert_down_input";
        case QX_SITE_SHARED_DOWN_INPUT: return "shared_down_input";
        default: return "unknown";
    }
}

/* ---------------------------------------------------------------------------------------------
   GEMM and fake quantization: quarot.h's, one call site each. */

/* C[m][n] = alpha * A[m][k] * op(B), op(B) = B^T (B stored [n][k]) when trans_b, else B stored
   [k][n]; row-major with row strides lda, ldb, ldc. quarot_sgemm, with the env of the options. */
static quarot_result qx__gemm(const qx_forward* f, int trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                              const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc) {
    return quarot_sgemm(0, trans_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc, f->opts.env);
}

/* x[rows][stride], first cols per row, groups of `group` (0 = whole row): quarot_fake_quant_f32. */
static quarot_result qx__fake_quant(float* x, int64_t rows, int64_t cols, int64_t stride, int bits, int asym,
                                   int64_t group, float clip, int clip_search) {
    quarot_quant_desc d;
    memset(&d, 0, sizeof d);
    d.bits = bits;
    d.asymmetric = asym ? 1 : 0;
    d.group_size = group;
    d.clip_ratio = clip > 0.0f ? clip : 1.0f;
    d.clip_search = clip_search;   /* 0, QUAROT_CLIP_SEARCH_MSE or _LP */
    return quarot_fake_quant_f32(x, rows, cols, stride, &d);
}

/* ---------------------------------------------------------------------------------------------
   Threads: opts.env's parallel hook splits the GEMMs (quarot.h), and here the row-wise steps (norms,
   activation fake quantization, RoPE, activations, residual adds) over chunks of rows and attention
   over groups of heads. Every row / head is computed by the same code whatever the split, and no sum
   crosses a chunk, so the results are bit-identical for any number of threads. Work inside a task
   runs serially (quarot_parallel.run need not be reentrant). */

static int qx__threads(const qx_forward* f) {
    const quarot_env* env = f->opts.env;
    return env && env->parallel.run && env->parallel.n_threads > 1 ? env->parallel.n_threads : 1;
}

/* env for work inside a task: the caller's allocator, no parallel hook */
static quarot_env qx__serial_env(const qx_forward* f) {
    quarot_env e;
    memset(&e, 0, sizeof e);
    if (f->opts.env) e.allocator = f->opts.env->allocator;
    return e;
}

#define QX__MAX_TASKS 1024
typedef quarot_result (*qx__rows_fn)(void* ctx, int64_t r0, int64_t r1);
typedef struct qx__rows_job {
    qx__rows_fn fn;
    void* ctx;
    int64_t rows, per;
    quarot_result st[QX__MAX_TASKS];
} qx__rows_job;

static void qx__rows_task(void* arg, int64_t t) {
    qx__rows_job* j = (qx__rows_job*)arg;
    int64_t r0 = t * j->per, r1 = r0 + j->per < j->rows ? r0 + j->per : j->rows;
    j->st[t] = j->fn(j->ctx, r0, r1);
}

/* fn(ctx, r0, r1) over [0, rows) in chunks (serially when small: row_cost = elements per row);
   returns the first failing chunk's result in row order. */
static quarot_result qx__par_rows(const qx_forward* f, int64_t rows, int64_t row_cost, qx__rows_fn fn, void* ctx) {
    int th = qx__threads(f);
    int64_t tasks, t;
    qx__rows_job* j;
    quarot_result r = QUAROT_OK;
    if (rows <= 0) return QUAROT_OK;
    if (th <= 1 || rows == 1 || (double)rows * (double)row_cost < 32768.0) return fn(ctx, 0, rows);
    j = (qx__rows_job*)malloc(sizeof *j);
    if (!j) return fn(ctx, 0, rows);
    tasks = 4 * (int64_t)th;
    if (tasks > QX__MAX_TASKS) tasks = QX__MAX_TASKS;
    if (tasks > rows) tasks = rows;
    j->fn = fn;
    j->ctx = ctx;
    j->rows = rows;
    j->per = (rows + tasks - 1) / tasks;
    tasks = (rows + j->per - 1) / j->per;
    quarot_env_parallel_for(f->opts.env, qx__rows_task, j, tasks);
    for (t = 0; t < tasks && r == QUAROT_OK; ++t) r = j->st[t];
    free(j);
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* Weights */

/* Copy tensor `name` ([rows][cols]; rows == 1 for a vector) to f32. Missing: error when required,
   else *out = NULL and OK. */
static quarot_result qx__check(const qx_store* s, const char* name, int64_t rows, int64_t cols, int required,
                               const quarot_tensor** out, qx_err* e) {
    const quarot_tensor* t;
    quarot_result r = qx_model_weight(s, name, rows, cols, required, &t, e);
    *out = NULL;
    if (r != QUAROT_OK || !t) return r;
    if (t->dtype != QUAROT_DTYPE_F32 && t->dtype != QUAROT_DTYPE_F16 && t->dtype != QUAROT_DTYPE_BF16 &&
        t->dtype != QUAROT_DTYPE_F64 && t->dtype != QUAROT_DTYPE_DEFAULT) {
        qx_err_set(e, "%s: unsupported dtype", name);
        return QUAROT_ERR_UNSUPPORTED_DTYPE;
    }
    *out = t;
    return QUAROT_OK;
}

/* t stored as f32 with contiguous rows: usable in place as a [rows][cols] matrix */
static int qx__f32_in_place(const quarot_tensor* t, int64_t rows, int64_t cols) {
    return t->dtype == QUAROT_DTYPE_F32 && t->nb[0] == sizeof(float) &&
           (rows == 1 || t->nb[1] == (size_t)cols * sizeof(float)) && (rows == 1 || t->ne[2] * t->ne[3] == 1);
}

static quarot_result qx__load(qx_forward* f, const qx_store* s, const char* name, int64_t rows, int64_t cols,
                              int required, float** out, qx_err* e) {
    const quarot_tensor* t;
    quarot_result cr = qx__check(s, name, rows, cols, required, &t, e);
    *out = NULL;
    if (cr != QUAROT_OK || !t) return cr;
    /* layer-wise: the globals are read in place when they are f32 already (never written) */
    if (f->opts.stream_weights && qx__f32_in_place(t, rows, cols)) {
        *out = (float*)t->data;
        return QUAROT_OK;
    }
    return qx_model_weight_f32(t, name, rows, cols, &f->arena, out, e);
}

static int qx__bits_ok(int b) { return b == 0 || (b >= 2 && b <= 8); }

/* Resolve config defaults and check the geometry. */
static quarot_result qx__config(qx_forward* f, const quarot_model_config* c, qx_err* e) {
    quarot_model_config* g = &f->cfg;
    *g = *c;
    if (g->n_kv_heads == 0) g->n_kv_heads = g->n_heads;
    if (g->head_dim == 0 && g->n_heads > 0) g->head_dim = g->hidden / g->n_heads;
    if (g->norm_eps == 0.0f) g->norm_eps = 1e-5f;
    if (g->rope_theta == 0.0f) g->rope_theta = 10000.0f;
    if (g->norm == QUAROT_NORM_DEFAULT) g->norm = QUAROT_NORM_RMS;
    if (g->mlp == QUAROT_MLP_DEFAULT) g->mlp = QUAROT_MLP_GATED;
    if (g->act == QUAROT_ACT_DEFAULT) g->act = QUAROT_ACT_SILU;
    f->is_opt = strcmp(g->arch, "opt") == 0;
    f->is_fused = strcmp(g->arch, "phi3") == 0;
    f->is_moe = g->n_experts > 0;
    if (f->is_moe && g->intermediate <= 0) g->intermediate = g->expert_intermediate;   /* every layer MoE: unused */
    if (f->is_moe) {   /* the MoE families' names, a gated MLP per expert, a sane top-k */
        f->is_mixtral = strcmp(g->arch, "mixtral") == 0;
        if (!f->is_mixtral && strcmp(g->arch, "qwen2_moe") != 0 && strcmp(g->arch, "qwen3_moe") != 0) {
            qx_err_set(e, "config: %s has mixture-of-experts layers (%lld experts); the reference forward pass runs "
                       "those of mixtral, qwen2_moe and qwen3_moe", g->arch, (long long)g->n_experts);
            return QUAROT_ERR_UNSUPPORTED;
        }
        f->e_inter = quarot_config_expert_width(g);
        f->s_inter = f->is_mixtral ? 0 : g->shared_intermediate;
        if (g->n_experts > (1 << 16) || g->n_experts_used < 1 || g->n_experts_used > g->n_experts ||
            f->e_inter <= 0 || f->e_inter > (1 << 22) || f->s_inter < 0 || f->s_inter > (1 << 22) ||
            (g->mlp != QUAROT_MLP_DEFAULT && g->mlp != QUAROT_MLP_GATED)) {
            qx_err_set(e, "config: bad mixture of experts (%lld experts, %lld used, expert intermediate %lld, shared %lld; "
                       "the experts are gated MLPs)", (long long)g->n_experts, (long long)g->n_experts_used,
                       (long long)f->e_inter, (long long)f->s_inter);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    /* sizes: positive, heads divisible into KV groups, an even head_dim for RoPE pairs, and caps that
       keep every product below in int64 / size_t far from overflow */
    if (g->hidden <= 0 || g->intermediate <= 0 || g->n_layers <= 0 || g->n_heads <= 0 || g->n_kv_heads <= 0 ||
        g->head_dim <= 0 || g->vocab <= 0 || g->n_heads % g->n_kv_heads != 0 ||
        (!f->is_opt && g->head_dim % 2 != 0) || g->hidden > (1 << 20) || g->intermediate > (1 << 22) ||
        g->head_dim > (1 << 16) || g->n_heads > (1 << 12) || g->vocab > (1 << 24) || g->n_layers > (1 << 12)) {
        qx_err_set(e, "config: bad geometry (hidden %lld, intermediate %lld, layers %lld, heads %lld/%lld, head_dim %lld, vocab %lld)",
                   (long long)g->hidden, (long long)g->intermediate, (long long)g->n_layers, (long long)g->n_heads,
                   (long long)g->n_kv_heads, (long long)g->head_dim, (long long)g->vocab);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (g->norm != QUAROT_NORM_RMS && g->norm != QUAROT_NORM_LAYER) {
        qx_err_set(e, "config: unknown norm kind %d", (int)g->norm);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (g->mlp != QUAROT_MLP_GATED && g->mlp != QUAROT_MLP_PLAIN) {
        qx_err_set(e, "config: unknown MLP kind %d", (int)g->mlp);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (g->act != QUAROT_ACT_SILU && g->act != QUAROT_ACT_RELU && g->act != QUAROT_ACT_GELU) {
        qx_err_set(e, "config: unknown activation %d", (int)g->act);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (f->is_opt && g->mlp == QUAROT_MLP_GATED) {
        qx_err_set(e, "config: OPT names have no gated MLP (set mlp = QUAROT_MLP_PLAIN)");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (!(g->norm_eps > 0.0f) || !(g->rope_theta > 0.0f)) {
        qx_err_set(e, "config: norm_eps and rope_theta must be positive");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    f->q_dim = g->n_heads * g->head_dim;
    f->kv_dim = g->n_kv_heads * g->head_dim;
    return QUAROT_OK;
}

static quarot_result qx__check_quant(const qx_forward* f, const qx_fake_quant_opts* q, qx_err* e) {
    const quarot_model_config* g = &f->cfg;
    if (!qx__bits_ok(q->w_bits) || !qx__bits_ok(q->a_bits) || !qx__bits_ok(q->k_bits) || !qx__bits_ok(q->v_bits)) {
        qx_err_set(e, "fake quant: bits must be 0 (off) or 2..8");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (q->w_clip < 0.0f || q->w_clip > 1.0f || q->a_clip < 0.0f || q->a_clip > 1.0f || q->kv_clip < 0.0f ||
        q->kv_clip > 1.0f || q->w_clip != q->w_clip || q->a_clip != q->a_clip || q->kv_clip != q->kv_clip) {
        qx_err_set(e, "fake quant: clip ratios must lie in (0, 1] (0 = 1.0)");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    /* one group size for every linear: it must divide each input width (hidden for q/k/v/gate/up,
       n_heads*head_dim for o_proj, intermediate for down_proj) */
    if (!qx__bits_ok(q->a_down_bits) || q->a_group < 0 || (q->a_group && (g->hidden % q->a_group || g->intermediate % q->a_group ||
        f->q_dim % q->a_group || (f->is_moe && (f->e_inter % q->a_group || f->s_inter % q->a_group)))) ||
        q->k_group < 0 || q->v_group < 0 || (q->k_group && g->head_dim % q->k_group) ||
        (q->v_group && g->head_dim % q->v_group) || !(q->k_clip >= 0.0f && q->k_clip <= 1.0f) || !(q->v_clip >= 0.0f && q->v_clip <= 1.0f)) {
        qx_err_set(e, "fake quant: activation group %lld must divide hidden, intermediate and n_heads*head_dim; K/V groups (%lld, %lld) head_dim %lld; clips in (0, 1]",
                   (long long)q->a_group, (long long)q->k_group, (long long)q->v_group, (long long)g->head_dim);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (q->w_bits && q->w_group != 0 &&
        (q->w_group < 0 || g->hidden % q->w_group || g->intermediate % q->w_group || f->q_dim % q->w_group ||
         (f->is_moe && (f->e_inter % q->w_group || f->s_inter % q->w_group)))) {
        qx_err_set(e, "fake quant: weight group %lld must divide hidden %lld, intermediate %lld and n_heads*head_dim %lld",
                   (long long)q->w_group, (long long)g->hidden, (long long)g->intermediate, (long long)f->q_dim);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

/* "model.layers.{layer}.{suffix}" (OPT: "model.decoder.layers.{layer}.{suffix}") */
static void qx__name(const qx_forward* f, int64_t layer, const char* suffix, char* buf, size_t n) {
    snprintf(buf, n, "%s%lld.%s", f->is_opt ? "model.decoder.layers." : "model.layers.", (long long)layer, suffix);
}

/* The quantizer of the decoder-linear weights (what qx__fake_quant builds from the options). */
static void qx__weight_desc(const qx_forward* f, quarot_quant_desc* d) {
    const qx_fake_quant_opts* q = &f->opts.quant;
    memset(d, 0, sizeof *d);
    d->bits = q->w_bits;
    d->asymmetric = q->w_asym ? 1 : 0;
    d->group_size = q->w_group;
    d->clip_ratio = q->w_clip > 0.0f ? q->w_clip : 1.0f;
    d->clip_search = q->w_clip_search;
}

/* The integer form of weight `wname` (w[rows][cols], f32, before any fake quantization) into m over
   mem (qx_qlinear_bytes of it; NULL: from the arena), when the activations are quantized as an
   integer kernel takes them and the weight has codes: RTN at load (symmetric) or the store's grid
   (grid, may be NULL). Otherwise m stays empty (the float product). */
static quarot_result qx__int_form(qx_forward* f, const char* wname, const float* w, int64_t rows, int64_t cols,
                                  const qx_grid* grid, void* mem, int8_t* codes, quarot_qmat* m, qx_err* e) {
    const qx_fake_quant_opts* q = &f->opts.quant;
    quarot_quant_desc d;
    int8_t* own = NULL;
    quarot_result r;
    int bits = q->w_bits ? q->w_bits : grid ? grid->bits : 0;
    int64_t group = q->w_bits ? q->w_group : grid ? grid->group : 0, bad = -1;
    memset(m, 0, sizeof *m);
    if (!f->int_linears || !bits || (q->w_bits && q->w_asym) || (!q->w_bits && (grid->rows != rows || grid->cols != cols)) ||
        !qx_qlinear_fits(bits, cols, group))
        return QUAROT_OK;
    if (!mem && !(mem = qx_arena_alloc(&f->arena, qx_qlinear_bytes(bits, rows, cols, group)))) {
        qx_err_set(e, "%s: out of memory (integer form)", wname);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    if (!codes && !(codes = own = (int8_t*)malloc((size_t)(rows * cols)))) {
        qx_err_set(e, "%s: out of memory (codes)", wname);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    if (q->w_bits) {
        qx__weight_desc(f, &d);
        r = qx_qlinear_rtn(m, mem, w, rows, cols, &d, codes);
        if (r != QUAROT_OK) qx_err_set(e, "%s: quantization: %s", wname, quarot_result_string(r));
    } else {
        r = qx_qlinear_grid(m, mem, w, rows, cols, grid, codes, &bad);
        if (r != QUAROT_OK)
            qx_err_set(e, "%s: row %lld is off the %d-bit grid it was read with (the weights were changed after they were read)",
                       wname, (long long)bad, grid->bits);
    }
    free(own);
    if (r != QUAROT_OK) memset(m, 0, sizeof *m);
    return r;
}

/* Load one linear: weight [rows][cols] and its bias [rows] (required when req_bias); m (may be NULL)
   receives its integer form (qx__int_form). */
static quarot_result qx__load_linear(qx_forward* f, const qx_store* s, int64_t layer, const char* base,
                                     int64_t rows, int64_t cols, int req_bias, float** w, float** b, quarot_qmat* m,
                                     qx_err* e) {
    char name[256], wname[300];
    quarot_result r;
    qx_grid grid;
    qx__name(f, layer, base, name, sizeof name);
    snprintf(wname, sizeof wname, "%s.weight", name);
    r = qx__load(f, s, wname, rows, cols, 1, w, e);
    if (r != QUAROT_OK) return r;
    if (m) {
        int has_grid = !f->opts.quant.w_bits && qx_store_get_grid(s, wname, &grid);
        r = qx__int_form(f, wname, *w, rows, cols, has_grid ? &grid : NULL, NULL, NULL, m, e);
        if (r != QUAROT_OK) return r;
    }
    snprintf(wname, sizeof wname, "%s.bias", name);
    r = qx__load(f, s, wname, 1, rows, req_bias, b, e);
    if (r != QUAROT_OK) return r;
    /* weight fake quantization happens once, here: rows of W[out][in] are output channels */
    if (f->opts.quant.w_bits) {
        const qx_fake_quant_opts* q = &f->opts.quant;
        r = qx__fake_quant(*w, rows, cols, cols, q->w_bits, q->w_asym, q->w_group, q->w_clip, q->w_clip_search);
        if (r != QUAROT_OK) {
            qx_err_set(e, "%s.weight: fake quantization: %s", name, quarot_result_string(r));
            return r;
        }
    }
    return QUAROT_OK;
}

/* A norm's gain "<base>.weight" [hidden] (required) and bias "<base>.bias" (optional); layer < 0:
   base is the full name (the final norm). */
static quarot_result qx__load_norm(qx_forward* f, const qx_store* s, int64_t layer, const char* base,
                                   float** w, float** b, qx_err* e) {
    char name[300];
    quarot_result r;
    if (layer >= 0) qx__name(f, layer, base, name, sizeof name);
    else snprintf(name, sizeof name, "%s", base);
    strcat(name, ".weight");
    r = qx__load(f, s, name, 1, f->cfg.hidden, 1, w, e);
    if (r != QUAROT_OK) return r;
    name[strlen(name) - 7] = '\0';
    strcat(name, ".bias");
    return qx__load(f, s, name, 1, f->cfg.hidden, 0, b, e);
}

/* ---- layer-wise weights (opts.stream_weights) ---- */

/* One weight or vector of a decoder layer: its name, shape, whether it must exist, whether it is a
   linear's weight (fake-quantized), and the qx_forward_layer slot it fills. The order is the copy
   path's load order, so that both report the same first error. */
typedef struct qx__spec {
    char name[300];
    int64_t rows, cols;
    int required, linear;
    float** slot;
    int ql;                  /* linears: the QX_QL_* index of its integer form, else -1 */
} qx__spec;

static int qx__layer_specs(const qx_forward* f, int64_t l, qx_forward_layer* L, qx__spec* sp) {
    const quarot_model_config* g = &f->cfg;
    const char *n1 = f->is_opt ? "self_attn_layer_norm" : "input_layernorm";
    const char *n2 = f->is_opt ? "final_layer_norm" : "post_attention_layernorm";
    const char *o_name = f->is_opt ? "self_attn.out_proj" : "self_attn.o_proj";
    const char *up = f->is_opt ? "fc1" : "mlp.up_proj", *down = f->is_opt ? "fc2" : "mlp.down_proj";
    int n = 0;
    char base[256];
#define QX__SPEC(BASE, SUFFIX, ROWS, COLS, REQ, LIN, SLOT)                                         \
    do {                                                                                            \
        qx__name(f, l, BASE, base, sizeof base);                                                    \
        snprintf(sp[n].name, sizeof sp[n].name, "%s%s", base, SUFFIX);                              \
        sp[n].rows = ROWS; sp[n].cols = COLS; sp[n].required = REQ; sp[n].linear = (LIN) >= 0;      \
        sp[n].slot = SLOT; sp[n].ql = LIN; ++n;                                                     \
    } while (0)
    QX__SPEC(n1, ".weight", 1, g->hidden, 1, -1, &L->norm1_w);
    QX__SPEC(n1, ".bias", 1, g->hidden, 0, -1, &L->norm1_b);
    QX__SPEC(n2, ".weight", 1, g->hidden, 1, -1, &L->norm2_w);
    QX__SPEC(n2, ".bias", 1, g->hidden, 0, -1, &L->norm2_b);
    if (f->is_fused) {   /* phi3: q|k|v and gate|up in one weight each */
        QX__SPEC("self_attn.qkv_proj", ".weight", f->q_dim + 2 * f->kv_dim, g->hidden, 1, QX_QL_Q, &L->wq);
        QX__SPEC("self_attn.qkv_proj", ".bias", 1, f->q_dim + 2 * f->kv_dim, g->attn_qkv_bias, -1, &L->bq);
        QX__SPEC(o_name, ".weight", g->hidden, f->q_dim, 1, QX_QL_O, &L->wo);
        QX__SPEC("mlp.gate_up_proj", ".weight", 2 * g->intermediate, g->hidden, 1, QX_QL_GATE, &L->w_gate);
        QX__SPEC(down, ".weight", g->hidden, g->intermediate, 1, QX_QL_DOWN, &L->w_down);
        return n;
    }
    QX__SPEC("self_attn.q_proj", ".weight", f->q_dim, g->hidden, 1, QX_QL_Q, &L->wq);
    QX__SPEC("self_attn.q_proj", ".bias", 1, f->q_dim, g->attn_qkv_bias, -1, &L->bq);
    QX__SPEC("self_attn.k_proj", ".weight", f->kv_dim, g->hidden, 1, QX_QL_K, &L->wk);
    QX__SPEC("self_attn.k_proj", ".bias", 1, f->kv_dim, g->attn_qkv_bias, -1, &L->bk);
    QX__SPEC("self_attn.v_proj", ".weight", f->kv_dim, g->hidden, 1, QX_QL_V, &L->wv);
    QX__SPEC("self_attn.v_proj", ".bias", 1, f->kv_dim, g->attn_qkv_bias, -1, &L->bv);
    QX__SPEC(o_name, ".weight", g->hidden, f->q_dim, 1, QX_QL_O, &L->wo);
    QX__SPEC(o_name, ".bias", 1, g->hidden, g->attn_out_bias, -1, &L->bo);
    if (g->mlp == QUAROT_MLP_GATED && !quarot_config_layer_is_moe(g, l)) {
        QX__SPEC("mlp.gate_proj", ".weight", g->intermediate, g->hidden, 1, QX_QL_GATE, &L->w_gate);
        QX__SPEC("mlp.gate_proj", ".bias", 1, g->intermediate, g->mlp_bias, -1, &L->b_gate);
    }
    if (!quarot_config_layer_is_moe(g, l)) {   /* a MoE layer's MLP: qx__moe_stream_init / _layer */
        QX__SPEC(up, ".weight", g->intermediate, g->hidden, 1, QX_QL_UP, &L->w_up);
        QX__SPEC(up, ".bias", 1, g->intermediate, g->mlp_bias, -1, &L->b_up);
        QX__SPEC(down, ".weight", g->hidden, g->intermediate, 1, QX_QL_DOWN, &L->w_down);
        QX__SPEC(down, ".bias", 1, g->hidden, g->mlp_bias, -1, &L->b_down);
    }
    if (g->qk_norm) {
        QX__SPEC("self_attn.q_norm", ".weight", 1, g->head_dim, 1, -1, &L->q_norm);
        QX__SPEC("self_attn.k_norm", ".weight", 1, g->head_dim, 1, -1, &L->k_norm);
    }
#undef QX__SPEC
    return n;
}

static quarot_result qx__moe_stream_init(qx_forward* f, const qx_store* s, size_t* qcodes, qx_err* err);

/* init, layer-wise: check every layer's tensors now (the copy path's errors, at the same point),
   remember them, and size the layer buffer for the largest layer's conversions. */
static quarot_result qx__stream_init(qx_forward* f, const qx_store* s, qx_err* e) {
    int64_t l, n_layers = f->cfg.n_layers;
    qx__spec sp[QX_FWD_SLOTS];
    qx_forward_layer dummy;
    f->wt = (const quarot_tensor**)qx_arena_alloc(&f->arena, (size_t)n_layers * QX_FWD_SLOTS * sizeof *f->wt);
    if (!f->wt) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset((void*)f->wt, 0, (size_t)n_layers * QX_FWD_SLOTS * sizeof *f->wt);
    size_t qbytes[QX_QL_COUNT], qcodes = 0;
    memset(qbytes, 0, sizeof qbytes);
    if (f->int_linears) {
        f->grids = (qx_grid*)qx_arena_alloc(&f->arena, (size_t)n_layers * QX_QL_COUNT * sizeof *f->grids);
        if (!f->grids) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
        memset(f->grids, 0, (size_t)n_layers * QX_QL_COUNT * sizeof *f->grids);
    }
    for (l = 0; l < n_layers; ++l) {
        int i, n = qx__layer_specs(f, l, &dummy, sp);
        size_t floats = 0;
        for (i = 0; i < n; ++i) {
            quarot_result r = qx__check(s, sp[i].name, sp[i].rows, sp[i].cols, sp[i].required, &f->wt[l * QX_FWD_SLOTS + i], e);
            if (r != QUAROT_OK) return r;
            if (f->wt[l * QX_FWD_SLOTS + i]) floats += (size_t)sp[i].rows * (size_t)sp[i].cols;
            if (f->int_linears && sp[i].ql >= 0 && f->wt[l * QX_FWD_SLOTS + i]) {   /* room for its integer form */
                qx_grid* g = &f->grids[l * QX_QL_COUNT + sp[i].ql];
                int bits = f->opts.quant.w_bits;
                int64_t group = f->opts.quant.w_group;
                size_t nb;
                if (!bits && qx_store_get_grid(s, sp[i].name, g)) { bits = g->bits; group = g->group; }
                nb = bits ? qx_qlinear_bytes(bits, sp[i].rows, sp[i].cols, group) : 0;
                if (nb > qbytes[sp[i].ql]) qbytes[sp[i].ql] = nb;
                if (nb && (size_t)(sp[i].rows * sp[i].cols) > qcodes) qcodes = (size_t)(sp[i].rows * sp[i].cols);
            }
        }
        if (floats > f->layer_floats) f->layer_floats = floats;
    }
    if (f->is_moe) {
        quarot_result r = qx__moe_stream_init(f, s, &qcodes, e);
        if (r != QUAROT_OK) return r;
    }
    f->layer_buf = (float*)qx_arena_alloc(&f->arena, f->layer_floats * sizeof(float));
    if (!f->layer_buf) { qx_err_set(e, "out of memory (one layer in f32: %lu floats)", (unsigned long)f->layer_floats); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (l = 0; l < QX_QL_COUNT; ++l)
        if (qbytes[l] && !(f->qmem[l] = qx_arena_alloc(&f->arena, qbytes[l]))) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    if (qcodes && !(f->qcodes = (int8_t*)qx_arena_alloc(&f->arena, qcodes))) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    return QUAROT_OK;
}

typedef struct qx__conv_ctx {
    const quarot_tensor* t;
    float* w;
    int64_t cols;
    quarot_result st;
} qx__conv_ctx;

static quarot_result qx__conv_rows(void* c, int64_t r0, int64_t r1) {
    qx__conv_ctx* k = (qx__conv_ctx*)c;
    int64_t r;
    for (r = r0; r < r1; ++r) {
        quarot_result res = quarot_tensor_get_row_f32(k->t, r, k->w + r * k->cols);
        if (res != QUAROT_OK) return res;
    }
    return QUAROT_OK;
}

static quarot_result qx__fake_quant_w_par(const qx_forward* f, float* w, int64_t rows, int64_t cols);

/* ---- mixture-of-experts weights ---- */

/* Which MoE tensor: the router, the shared-expert gate, the shared expert's gate / up / down, a
   routed expert's gate / up / down. */
enum { QX_MW_ROUTER, QX_MW_SGATE, QX_MW_SHARED, QX_MW_EXPERT = QX_MW_SHARED + 3, QX_MW_COUNT = QX_MW_EXPERT + 3 };

/* "model.layers.{l}.<suffix>" of MoE tensor `which` (expert e; stacked: the 3-D name without e).
   The suffix alone (the layer's name part, as qx__linear_input takes it) into suf when not NULL. */
static void qx__moe_name(const qx_forward* f, int64_t l, int which, int64_t e, int stacked, char* name, size_t n,
                         char* suf, size_t sn) {
    static const char* const mix[3] = {"w1", "w3", "w2"};
    static const char* const qw[3] = {"gate_proj", "up_proj", "down_proj"};
    char sx[160];
    if (which == QX_MW_ROUTER) snprintf(sx, sizeof sx, "%s.gate.weight", f->is_mixtral ? "block_sparse_moe" : "mlp");
    else if (which == QX_MW_SGATE) snprintf(sx, sizeof sx, "mlp.shared_expert_gate.weight");
    else if (which < QX_MW_EXPERT) snprintf(sx, sizeof sx, "mlp.shared_expert.%s.weight", qw[which - QX_MW_SHARED]);
    else if (stacked)
        snprintf(sx, sizeof sx, "%s.experts.%s.weight", f->is_mixtral ? "block_sparse_moe" : "mlp",
                 f->is_mixtral ? mix[which - QX_MW_EXPERT] : qw[which - QX_MW_EXPERT]);
    else
        snprintf(sx, sizeof sx, "%s.experts.%lld.%s.weight", f->is_mixtral ? "block_sparse_moe" : "mlp", (long long)e,
                 f->is_mixtral ? mix[which - QX_MW_EXPERT] : qw[which - QX_MW_EXPERT]);
    if (name) qx__name(f, l, sx, name, n);
    if (suf) snprintf(suf, sn, "%s", sx);
}

/* The shape [rows][cols] of MoE tensor `which` (one expert's view for the experts). */
static void qx__moe_shape(const qx_forward* f, int which, int64_t* rows, int64_t* cols) {
    const int64_t H = f->cfg.hidden, I = which >= QX_MW_EXPERT ? f->e_inter : f->s_inter;
    if (which == QX_MW_ROUTER) { *rows = f->cfg.n_experts; *cols = H; }
    else if (which == QX_MW_SGATE) { *rows = 1; *cols = H; }
    else if (which == QX_MW_SHARED + 2 || which == QX_MW_EXPERT + 2) { *rows = H; *cols = I; }
    else { *rows = I; *cols = H; }
}

/* The store's tensor of MoE tensor `which` of layer l (expert e), checked: 2-D [rows][cols], or with
   config.experts_stacked the experts' 3-D [n_experts][rows][cols]. */
static quarot_result qx__moe_find(const qx_forward* f, const qx_store* s, int64_t l, int which, int64_t e,
                                  const quarot_tensor** out, qx_err* err) {
    const int stacked = which >= QX_MW_EXPERT && f->cfg.experts_stacked;
    char name[300];
    int64_t rows, cols;
    const quarot_tensor* t;
    qx__moe_name(f, l, which, e, stacked, name, sizeof name, NULL, 0);
    qx__moe_shape(f, which, &rows, &cols);
    if (!stacked) return qx__check(s, name, rows, cols, 1, out, err);
    *out = NULL;
    t = qx_store_find(s, name);
    if (!t) { qx_err_set(err, "%s: missing", name); return QUAROT_ERR_NOT_FOUND; }
    if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != f->cfg.n_experts || t->ne[3] != 1) {
        qx_err_set(err, "%s: shape [%lld][%lld][%lld], expected [%lld experts][%lld][%lld]", name, (long long)t->ne[2],
                   (long long)t->ne[1], (long long)t->ne[0], (long long)f->cfg.n_experts, (long long)rows, (long long)cols);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    if (t->dtype != QUAROT_DTYPE_F32 && t->dtype != QUAROT_DTYPE_F16 && t->dtype != QUAROT_DTYPE_BF16 &&
        t->dtype != QUAROT_DTYPE_F64) {
        qx_err_set(err, "%s: unsupported dtype", name);
        return QUAROT_ERR_UNSUPPORTED_DTYPE;
    }
    *out = t;
    return QUAROT_OK;
}

/* Expert e's 2-D view of t (t itself when it is not a stacked 3-D tensor). */
static quarot_tensor qx__moe_view(const quarot_tensor* t, int64_t e) {
    quarot_tensor v = *t;
    if (t->ne[2] > 1) {
        v.data = (char*)t->data + (size_t)e * t->nb[2];
        v.ne[2] = 1;
        v.nb[3] = v.nb[2];
    }
    return v;
}

/* One MoE linear from view v into w[rows][cols] (w given: converted there, else allocated in the
   arena): f32, its integer form into m (m may be NULL: the router and the shared-expert gate, never
   quantized) over qmem (NULL: the arena), then the weight fake quantization. */
static quarot_result qx__moe_convert(qx_forward* f, const quarot_tensor* v, const char* name, int64_t rows, int64_t cols,
                                     float** w, quarot_qmat* m, void* qmem, qx_err* err) {
    quarot_result r;
    if (!*w) {
        r = qx_model_weight_f32(v, name, rows, cols, &f->arena, w, err);
        if (r != QUAROT_OK) return r;
    } else {
        qx__conv_ctx k;
        k.t = v; k.w = *w; k.cols = cols;
        r = qx__par_rows(f, rows, cols, qx__conv_rows, &k);
        if (r != QUAROT_OK) { qx_err_set(err, "%s: %s", name, quarot_result_string(r)); return r; }
    }
    if (!m) return QUAROT_OK;
    r = qx__int_form(f, name, *w, rows, cols, NULL, qmem, f->qcodes, m, err);
    if (r == QUAROT_OK && f->opts.quant.w_bits) {
        r = qx__fake_quant_w_par(f, *w, rows, cols);
        if (r != QUAROT_OK) qx_err_set(err, "%s: fake quantization: %s", name, quarot_result_string(r));
    }
    return r;
}

/* copy path: layer l's router, shared expert and experts into L->moe */
static quarot_result qx__load_moe(qx_forward* f, const qx_store* s, int64_t l, qx_forward_layer* L, qx_err* err) {
    const int64_t E = f->cfg.n_experts;
    qx_forward_moe* m = (qx_forward_moe*)qx_arena_alloc(&f->arena, sizeof *m);
    int which, p;
    int64_t e;
    if (!m) { qx_err_set(err, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(m, 0, sizeof *m);
    m->w = (float**)qx_arena_alloc(&f->arena, (size_t)(3 * E) * sizeof *m->w);
    m->qm = (quarot_qmat*)qx_arena_alloc(&f->arena, (size_t)(3 * E) * sizeof *m->qm);
    if (!m->w || !m->qm) { qx_err_set(err, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(m->w, 0, (size_t)(3 * E) * sizeof *m->w);
    memset(m->qm, 0, (size_t)(3 * E) * sizeof *m->qm);
    for (which = 0; which < QX_MW_EXPERT + 3; ++which) {
        int64_t n_e = which >= QX_MW_EXPERT ? E : 1;
        if (which >= QX_MW_SGATE && which < QX_MW_EXPERT && f->s_inter <= 0) continue;
        for (e = 0; e < n_e; ++e) {
            const quarot_tensor* t;
            quarot_tensor v;
            char name[300];
            int64_t rows, cols;
            float** w;
            quarot_qmat* qm;
            quarot_result r = qx__moe_find(f, s, l, which, e, &t, err);
            if (r != QUAROT_OK) return r;
            v = qx__moe_view(t, e);
            qx__moe_name(f, l, which, e, 0, name, sizeof name, NULL, 0);
            qx__moe_shape(f, which, &rows, &cols);
            p = which >= QX_MW_EXPERT ? which - QX_MW_EXPERT : which - QX_MW_SHARED;
            w = which == QX_MW_ROUTER ? &m->router : which == QX_MW_SGATE ? &m->shared_gate
                : which < QX_MW_EXPERT ? &m->shared[p] : &m->w[3 * e + p];
            qm = which < QX_MW_SHARED ? NULL : which < QX_MW_EXPERT ? &m->shared_qm[p] : &m->qm[3 * e + p];
            r = qx__moe_convert(f, &v, name, rows, cols, w, qm, NULL, err);
            if (r != QUAROT_OK) return r;
        }
    }
    L->moe = m;
    return QUAROT_OK;
}

/* stream path, init: every MoE tensor checked and remembered (f->mwt), buffers for the router, the
   shared expert and one routed expert in f32 and their integer forms; *qcodes grown to the largest. */
static quarot_result qx__moe_stream_init(qx_forward* f, const qx_store* s, size_t* qcodes, qx_err* err) {
    const int64_t E = f->cfg.n_experts, per = 5 + 3 * E, H = f->cfg.hidden;
    int64_t l, e, p;
    size_t floats = (size_t)(E * H + H + 3 * f->s_inter * H + 3 * f->e_inter * H);
    f->mwt = (const quarot_tensor**)qx_arena_alloc(&f->arena, (size_t)(f->cfg.n_layers * per) * sizeof *f->mwt);
    if (!f->mwt) { qx_err_set(err, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset((void*)f->mwt, 0, (size_t)(f->cfg.n_layers * per) * sizeof *f->mwt);
    for (l = 0; l < f->cfg.n_layers; ++l) {
        int which;
        if (!quarot_config_layer_is_moe(&f->cfg, l)) continue;
        for (which = 0; which < QX_MW_EXPERT + 3; ++which) {
            int64_t n_e = which >= QX_MW_EXPERT ? E : 1;
            if (which >= QX_MW_SGATE && which < QX_MW_EXPERT && f->s_inter <= 0) continue;
            for (e = 0; e < n_e; ++e) {
                int64_t slot = which < QX_MW_EXPERT ? which : 5 + 3 * e + (which - QX_MW_EXPERT);
                quarot_result r;
                if (e > 0 && f->cfg.experts_stacked) {   /* the same 3-D tensor */
                    f->mwt[l * per + slot] = f->mwt[l * per + 5 + (which - QX_MW_EXPERT)];
                    continue;
                }
                r = qx__moe_find(f, s, l, which, e, &f->mwt[l * per + slot], err);
                if (r != QUAROT_OK) return r;
            }
        }
    }
    f->moe_buf = (float*)qx_arena_alloc(&f->arena, floats * sizeof(float));
    if (!f->moe_buf) { qx_err_set(err, "out of memory (MoE weights of one layer)"); return QUAROT_ERR_OUT_OF_MEMORY; }
    if (f->int_linears && f->opts.quant.w_bits)
        for (p = 0; p < 6; ++p) {   /* 0..2 the shared expert's, 3..5 the routed expert's */
            int64_t I = p < 3 ? f->s_inter : f->e_inter, rows = p % 3 == 2 ? H : I, cols = p % 3 == 2 ? I : H;
            size_t nb = I > 0 ? qx_qlinear_bytes(f->opts.quant.w_bits, rows, cols, f->opts.quant.w_group) : 0;
            if (nb && !(f->moe_qmem[p] = qx_arena_alloc(&f->arena, nb))) { qx_err_set(err, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
            if (nb && (size_t)(rows * cols) > *qcodes) *qcodes = (size_t)(rows * cols);
        }
    return QUAROT_OK;
}

/* stream path, layer l: its router and shared expert into f->moe_stream (the experts: qx__moe_expert) */
static quarot_result qx__moe_stream_layer(qx_forward* f, int64_t l) {
    const int64_t per = 5 + 3 * f->cfg.n_experts;
    qx_forward_moe* m = &f->moe_stream;
    float* buf = f->moe_buf;
    int which;
    memset(m, 0, sizeof *m);
    for (which = 0; which < QX_MW_EXPERT; ++which) {
        const quarot_tensor* t = f->mwt[l * per + which];
        int p = which - QX_MW_SHARED;
        char name[300];
        int64_t rows, cols;
        float** w;
        quarot_result r;
        if (!t) continue;
        qx__moe_name(f, l, which, 0, 0, name, sizeof name, NULL, 0);
        qx__moe_shape(f, which, &rows, &cols);
        w = which == QX_MW_ROUTER ? &m->router : which == QX_MW_SGATE ? &m->shared_gate : &m->shared[p];
        *w = buf;
        buf += rows * cols;
        r = qx__moe_convert(f, t, name, rows, cols, w, which < QX_MW_SHARED ? NULL : &m->shared_qm[p],
                            which < QX_MW_SHARED ? NULL : f->moe_qmem[p], NULL);
        if (r != QUAROT_OK) return r;
        if (f->opts.layer_done) f->opts.layer_done(f->opts.layer_done_user, l);
    }
    return QUAROT_OK;
}

/* Expert e of MoE layer l (L its weights): w[3] gate, up, down and their integer forms; layer-wise
   converted now into the expert part of f->moe_buf (one expert at a time). */
static quarot_result qx__moe_expert(qx_forward* f, int64_t l, const qx_forward_layer* L, int64_t e, float* w[3],
                                    const quarot_qmat* qm[3]) {
    const int64_t E = f->cfg.n_experts, per = 5 + 3 * E, H = f->cfg.hidden;
    float* buf;
    int p;
    if (!f->opts.stream_weights) {
        for (p = 0; p < 3; ++p) { w[p] = L->moe->w[3 * e + p]; qm[p] = &L->moe->qm[3 * e + p]; }
        return QUAROT_OK;
    }
    buf = f->moe_buf + E * H + H + 3 * f->s_inter * H;
    for (p = 0; p < 3; ++p) {
        quarot_tensor v = qx__moe_view(f->mwt[l * per + 5 + 3 * e + p], e);
        char name[300];
        int64_t rows, cols;
        quarot_result r;
        qx__moe_name(f, l, QX_MW_EXPERT + p, e, 0, name, sizeof name, NULL, 0);
        qx__moe_shape(f, QX_MW_EXPERT + p, &rows, &cols);
        w[p] = buf;
        buf += rows * cols;
        r = qx__moe_convert(f, &v, name, rows, cols, &w[p], &f->moe_eqm[p], f->moe_qmem[3 + p], NULL);
        if (r != QUAROT_OK) return r;
        qm[p] = &f->moe_eqm[p];
        if (f->opts.layer_done) f->opts.layer_done(f->opts.layer_done_user, l);
    }
    return QUAROT_OK;
}

/* Layer l's weights into f->layers[0]: views of f32 tensors that need no quantization, else
   conversions (row by row, as qx__load) into f->layer_buf, quantized as qx__load_linear does. */
static quarot_result qx__stream_layer(qx_forward* f, int64_t l) {
    qx__spec sp[QX_FWD_SLOTS];
    qx_forward_layer* L = &f->layers[0];
    int i, n;
    size_t off = 0;
    memset(L, 0, sizeof *L);
    n = qx__layer_specs(f, l, L, sp);
    for (i = 0; i < n; ++i) {
        const quarot_tensor* t = f->wt[l * QX_FWD_SLOTS + i];
        int quant = sp[i].linear && f->opts.quant.w_bits;
        qx__conv_ctx k;
        quarot_result r;
        const qx_grid* grid = f->grids && sp[i].ql >= 0 ? &f->grids[l * QX_QL_COUNT + sp[i].ql] : NULL;
        if (!t) continue;
        if (!quant && qx__f32_in_place(t, sp[i].rows, sp[i].cols)) {
            *sp[i].slot = (float*)t->data;
            if (grid && grid->bits)
                r = qx__int_form(f, sp[i].name, *sp[i].slot, sp[i].rows, sp[i].cols, grid, f->qmem[sp[i].ql], f->qcodes,
                                 &L->qm[sp[i].ql], NULL);
            else r = QUAROT_OK;
            if (r != QUAROT_OK) return r;
            continue;
        }
        k.t = t;
        k.w = f->layer_buf + off;
        k.cols = sp[i].cols;
        off += (size_t)sp[i].rows * (size_t)sp[i].cols;
        r = qx__par_rows(f, sp[i].rows, sp[i].cols, qx__conv_rows, &k);
        if (r == QUAROT_OK && grid && (quant || grid->bits))
            r = qx__int_form(f, sp[i].name, k.w, sp[i].rows, sp[i].cols, grid->bits ? grid : NULL, f->qmem[sp[i].ql], f->qcodes,
                             &L->qm[sp[i].ql], NULL);
        if (r == QUAROT_OK && quant) r = qx__fake_quant_w_par(f, k.w, sp[i].rows, sp[i].cols);
        if (r != QUAROT_OK) return r;
        *sp[i].slot = k.w;
        /* the source pages of this tensor are no longer needed: with a mapped store, at most one
           tensor's pages sit beside the layer buffer */
        if (f->opts.layer_done) f->opts.layer_done(f->opts.layer_done_user, l);
    }
    if (quarot_config_layer_is_moe(&f->cfg, l)) {
        quarot_result r = qx__moe_stream_layer(f, l);
        if (r != QUAROT_OK) return r;
        L->moe = &f->moe_stream;
    }
    return QUAROT_OK;
}

quarot_result qx_forward_init(qx_forward* f, const qx_store* s, const qx_forward_opts* o, qx_err* e) {
    const quarot_model_config* g;
    quarot_result r;
    int64_t l;
    if (!f) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(f, 0, sizeof *f);
    if (!s) {
        qx_err_set(e, "qx_forward_init: no store");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (o) f->opts = *o;
    r = qx__config(f, &s->config, e);
    if (r == QUAROT_OK) r = qx__check_quant(f, &f->opts.quant, e);
    if (r != QUAROT_OK) return r;
    f->int_linears = f->opts.quant.a_bits && !f->opts.quant.a_asym && !f->opts.quant.a_group && !f->opts.quant.float_linears;
    g = &f->cfg;
    if (g->n_mlp_only_layers > 0 && g->mlp_only_layers) {   /* not owned by the store's config: keep a copy */
        int64_t* dense = (int64_t*)qx_arena_alloc(&f->arena, (size_t)g->n_mlp_only_layers * sizeof *dense);
        if (!dense) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
        memcpy(dense, g->mlp_only_layers, (size_t)g->n_mlp_only_layers * sizeof *dense);
        f->cfg.mlp_only_layers = dense;
    } else {
        f->cfg.mlp_only_layers = NULL;
        f->cfg.n_mlp_only_layers = 0;
    }
    {
        int64_t n_slots = f->opts.stream_weights ? 1 : g->n_layers;
        f->layers = (qx_forward_layer*)qx_arena_alloc(&f->arena, (size_t)n_slots * sizeof *f->layers);
        if (!f->layers) {
            qx_err_set(e, "out of memory");
            return QUAROT_ERR_OUT_OF_MEMORY;
        }
        memset(f->layers, 0, (size_t)n_slots * sizeof *f->layers);
    }

    /* embeddings, final norm, lm_head */
    if (f->is_opt) {
        const quarot_tensor* pe = qx_store_find(s, "model.decoder.embed_positions.weight");
        r = qx__load(f, s, "model.decoder.embed_tokens.weight", g->vocab, g->hidden, 1, &f->embed, e);
        if (r != QUAROT_OK) goto fail;
        if (!pe) {
            qx_err_set(e, "model.decoder.embed_positions.weight: missing");
            r = QUAROT_ERR_NOT_FOUND;
            goto fail;
        }
        f->n_pos = quarot_tensor_nrows(pe);
        if (f->n_pos < 3) {
            qx_err_set(e, "model.decoder.embed_positions.weight: %lld rows, need at least 3 (offset 2)", (long long)f->n_pos);
            r = QUAROT_ERR_SHAPE_MISMATCH;
            goto fail;
        }
        r = qx__load(f, s, "model.decoder.embed_positions.weight", f->n_pos, g->hidden, 1, &f->pos_embed, e);
        if (r == QUAROT_OK) r = qx__load_norm(f, s, -1, "model.decoder.final_layer_norm", &f->final_w, &f->final_b, e);
    } else {
        r = qx__load(f, s, "model.embed_tokens.weight", g->vocab, g->hidden, 1, &f->embed, e);
        if (r == QUAROT_OK) r = qx__load_norm(f, s, -1, "model.norm", &f->final_w, &f->final_b, e);
    }
    if (r != QUAROT_OK) goto fail;
    r = qx__load(f, s, "lm_head.weight", g->vocab, g->hidden, 0, &f->lm_head, e);
    if (r != QUAROT_OK) goto fail;
    if (!f->lm_head) {
        if (!g->tied_embeddings) {
            qx_err_set(e, "lm_head.weight: missing (config says the embeddings are not tied)");
            r = QUAROT_ERR_NOT_FOUND;
            goto fail;
        }
        f->lm_head = f->embed;
    }
    r = qx__load(f, s, "lm_head.bias", 1, g->vocab, 0, &f->lm_head_b, e);
    if (r != QUAROT_OK) goto fail;

    if (f->opts.stream_weights) {
        r = qx__stream_init(f, s, e);
        if (r != QUAROT_OK) goto fail;
        return QUAROT_OK;
    }
    /* decoder layers: the same slots for both naming schemes (OPT's fc1/fc2 fill up/down) */
    for (l = 0; l < g->n_layers; ++l) {
        qx_forward_layer* L = &f->layers[l];
        const char *n1 = f->is_opt ? "self_attn_layer_norm" : "input_layernorm";
        const char *n2 = f->is_opt ? "final_layer_norm" : "post_attention_layernorm";
        const char *o_name = f->is_opt ? "self_attn.out_proj" : "self_attn.o_proj";
        const char *up = f->is_opt ? "fc1" : "mlp.up_proj", *down = f->is_opt ? "fc2" : "mlp.down_proj";
        r = qx__load_norm(f, s, l, n1, &L->norm1_w, &L->norm1_b, e);
        if (r == QUAROT_OK) r = qx__load_norm(f, s, l, n2, &L->norm2_w, &L->norm2_b, e);
        if (f->is_fused) {   /* phi3: the order of qx__layer_specs */
            if (r == QUAROT_OK) r = qx__load_linear(f, s, l, "self_attn.qkv_proj", f->q_dim + 2 * f->kv_dim, g->hidden,
                                                    g->attn_qkv_bias, &L->wq, &L->bq, &L->qm[QX_QL_Q], e);
            if (r == QUAROT_OK) r = qx__load_linear(f, s, l, o_name, g->hidden, f->q_dim, 0, &L->wo, &L->bo, &L->qm[QX_QL_O], e);
            if (r == QUAROT_OK) r = qx__load_linear(f, s, l, "mlp.gate_up_proj", 2 * g->intermediate, g->hidden, 0, &L->w_gate,
                                                    &L->b_gate, &L->qm[QX_QL_GATE], e);
            if (r == QUAROT_OK) r = qx__load_linear(f, s, l, down, g->hidden, g->intermediate, 0, &L->w_down, &L->b_down,
                                                    &L->qm[QX_QL_DOWN], e);
            if (r != QUAROT_OK) goto fail;
            continue;
        }
        if (r == QUAROT_OK) r = qx__load_linear(f, s, l, "self_attn.q_proj", f->q_dim, g->hidden, g->attn_qkv_bias, &L->wq, &L->bq,
                                                &L->qm[QX_QL_Q], e);
        if (r == QUAROT_OK) r = qx__load_linear(f, s, l, "self_attn.k_proj", f->kv_dim, g->hidden, g->attn_qkv_bias, &L->wk, &L->bk,
                                                &L->qm[QX_QL_K], e);
        if (r == QUAROT_OK) r = qx__load_linear(f, s, l, "self_attn.v_proj", f->kv_dim, g->hidden, g->attn_qkv_bias, &L->wv, &L->bv,
                                                &L->qm[QX_QL_V], e);
        if (r == QUAROT_OK) r = qx__load_linear(f, s, l, o_name, g->hidden, f->q_dim, g->attn_out_bias, &L->wo, &L->bo,
                                                &L->qm[QX_QL_O], e);
        if (quarot_config_layer_is_moe(g, l)) {
            if (r == QUAROT_OK) r = qx__load_moe(f, s, l, L, e);
        } else {
            if (r == QUAROT_OK && g->mlp == QUAROT_MLP_GATED)
                r = qx__load_linear(f, s, l, "mlp.gate_proj", g->intermediate, g->hidden, g->mlp_bias, &L->w_gate, &L->b_gate,
                                    &L->qm[QX_QL_GATE], e);
            if (r == QUAROT_OK) r = qx__load_linear(f, s, l, up, g->intermediate, g->hidden, g->mlp_bias, &L->w_up, &L->b_up,
                                                    &L->qm[QX_QL_UP], e);
            if (r == QUAROT_OK) r = qx__load_linear(f, s, l, down, g->hidden, g->intermediate, g->mlp_bias, &L->w_down,
                                                    &L->b_down, &L->qm[QX_QL_DOWN], e);
        }
        if (r == QUAROT_OK && g->qk_norm) {
            char name[256];
            qx__name(f, l, "self_attn.q_norm.weight", name, sizeof name);
            r = qx__load(f, s, name, 1, g->head_dim, 1, &L->q_norm, e);
            qx__name(f, l, "self_attn.k_norm.weight", name, sizeof name);
            if (r == QUAROT_OK) r = qx__load(f, s, name, 1, g->head_dim, 1, &L->k_norm, e);
        }
        if (r != QUAROT_OK) goto fail;
    }
    return QUAROT_OK;
fail:
    qx_forward_free(f);
    return r;
}

void qx_forward_free(qx_forward* f) {
    if (!f) return;
    qx_arena_free(&f->arena);
    free(f->k_cache);
    free(f->v_cache);
    free(f->scratch);
    memset(f, 0, sizeof *f);
}

void qx_forward_reset(qx_forward* f) {
    if (f) f->pos = 0;
}

/* --------------------------------------------------------------------------------------------- */
/* Building blocks */

typedef struct qx__norm_ctx {
    const float* x;
    float* y;
    int64_t n;
    const float *w, *b;
    quarot_norm_kind kind;
    float eps;
} qx__norm_ctx;

static quarot_result qx__norm_rows(void* c, int64_t r0, int64_t r1) {
    qx__norm_ctx* k = (qx__norm_ctx*)c;
    qx_ops_norm(k->x + r0 * k->n, k->y + r0 * k->n, r1 - r0, k->n, k->w, k->b, k->kind, k->eps);
    return QUAROT_OK;
}

/* qx_ops_norm over row chunks through the parallel hook */
static void qx__norm_par(const qx_forward* f, const float* x, float* y, int64_t rows, int64_t n, const float* w,
                         const float* b, quarot_norm_kind kind, float eps) {
    qx__norm_ctx k;
    k.x = x; k.y = y; k.n = n; k.w = w; k.b = b; k.kind = kind; k.eps = eps;
    (void)qx__par_rows(f, rows, n, qx__norm_rows, &k);
}

/* Row-wise steps as qx__par_rows functions. */
typedef struct qx__ew_ctx {
    float* y;                /* [rows][n] */
    const float* a;          /* bias [n] (add_bias), addend [rows][n] (add_rows), up [rows][n] (act) */
    int64_t n;
    quarot_act_kind act;
    int gated;
} qx__ew_ctx;

static quarot_result qx__add_bias_rows(void* c, int64_t r0, int64_t r1) {
    qx__ew_ctx* k = (qx__ew_ctx*)c;
    int64_t t, j;
    for (t = r0; t < r1; ++t)
        for (j = 0; j < k->n; ++j) k->y[t * k->n + j] += k->a[j];
    return QUAROT_OK;
}

static quarot_result qx__add_rows(void* c, int64_t r0, int64_t r1) {
    qx__ew_ctx* k = (qx__ew_ctx*)c;
    int64_t i;
    for (i = r0 * k->n; i < r1 * k->n; ++i) k->y[i] += k->a[i];
    return QUAROT_OK;
}

/* y = act(y) (plain) or y = act(gate) * y with gate = a (gated MLP) */
static quarot_result qx__act_rows(void* c, int64_t r0, int64_t r1) {
    qx__ew_ctx* k = (qx__ew_ctx*)c;
    qx_ops_act(k->y + r0 * k->n, k->gated ? k->a + r0 * k->n : NULL, (r1 - r0) * k->n, k->act);
    return QUAROT_OK;
}

typedef struct qx__fq_ctx {
    float* x;
    int64_t cols, stride, group;
    int bits, asym, clip_search;
    float clip;
} qx__fq_ctx;

static quarot_result qx__fq_rows(void* c, int64_t r0, int64_t r1) {
    qx__fq_ctx* k = (qx__fq_ctx*)c;
    return qx__fake_quant(k->x + r0 * k->stride, r1 - r0, k->cols, k->stride, k->bits, k->asym, k->group, k->clip,
                          k->clip_search);
}

/* qx__fake_quant (quarot_fake_quant_f32: its best SIMD kernel, per row) over row chunks */
static quarot_result qx__fake_quant_par(const qx_forward* f, float* x, int64_t rows, int64_t cols, int64_t stride,
                                        int bits, int asym, int64_t group, float clip) {
    qx__fq_ctx k;
    k.x = x; k.cols = cols; k.stride = stride; k.group = group; k.bits = bits; k.asym = asym; k.clip = clip;
    k.clip_search = 0;
    return qx__par_rows(f, rows, cols, qx__fq_rows, &k);
}

/* weight fake quantization (per output row, or groups along it) over row chunks: each row is
   quantized alone, so the split does not change a bit */
static quarot_result qx__fake_quant_w_par(const qx_forward* f, float* w, int64_t rows, int64_t cols) {
    const qx_fake_quant_opts* q = &f->opts.quant;
    qx__fq_ctx k;
    k.x = w; k.cols = cols; k.stride = cols; k.group = q->w_group; k.bits = q->w_bits; k.asym = q->w_asym;
    k.clip = q->w_clip; k.clip_search = q->w_clip_search;
    return qx__par_rows(f, rows, cols, qx__fq_rows, &k);
}

static void qx__ew(const qx_forward* f, qx__rows_fn fn, float* y, const float* a, int64_t rows, int64_t n,
                   quarot_act_kind act, int gated) {
    qx__ew_ctx k;
    k.y = y; k.a = a; k.n = n; k.act = act; k.gated = gated;
    (void)qx__par_rows(f, rows, n, fn, &k);
}

/* Scratch for T rows (qx__scratch): x, a [T][hidden]; q, att [T][q_dim]; k, v [T][kv_dim]; tmp
   [T][hidden]; g, u [T][inter]; scores [attention tasks][T][n_keys]; rope table [T][head_dim]. */
typedef struct qx__bufs {
    float *x, *a, *q, *k, *v, *att, *tmp, *g, *u, *scores, *rope;
    /* integer products: the codes of the current linear input [T][n], its per-token scales, the code
       sums per weight group */
    int8_t* xq;
    float* xs;
    int32_t* xsum;
} qx__bufs;

/* y[T][out] = x[T][in] * W^T + b. Layer-wise, the weights read are released after each linear
   (layer_done), so that an f32 tensor read in place from a mapping leaves its pages for one GEMM only. */
static quarot_result qx__linear_l(const qx_forward* f, int64_t layer, const float* x, int64_t T, int64_t in, const float* w,
                                  const float* b, int64_t out, float* y, const quarot_qmat* qm, const qx__bufs* bf) {
    quarot_result r;
    if (f->int_linears && qm && qm->data) {   /* exact integer sums of the codes, scaled once (qx_qlinear.h) */
        r = quarot_qact_sums(bf->xq, T, in, in, qm->group, bf->xsum);
        if (r == QUAROT_OK) r = quarot_qgemm(qm, bf->xq, in, bf->xs, bf->xsum, T, y, out, QUAROT_ISA_DEFAULT, f->opts.env);
    } else {
        r = qx__gemm(f, 1, T, out, in, 1.0f, x, in, w, in, y, out);
    }
    if (f->opts.stream_weights && f->opts.layer_done) f->opts.layer_done(f->opts.layer_done_user, layer);
    if (r != QUAROT_OK || !b) return r;
    qx__ew(f, qx__add_bias_rows, y, b, T, out, QUAROT_ACT_SILU, 0);
    return QUAROT_OK;
}

/* Input of decoder linears: capture (per linear name), then per-token activation fake quant
   (QUAROT_ERR_NONFINITE when the activations hold NaN/Inf). */
typedef struct qx__aq_ctx {
    const float* x;
    int64_t n;
    const quarot_quant_desc* d;
    int8_t* q;
    float* s;
} qx__aq_ctx;

static quarot_result qx__aq_rows(void* c, int64_t r0, int64_t r1) {
    qx__aq_ctx* k = (qx__aq_ctx*)c;
    return quarot_quantize_f32(k->x + r0 * k->n, r1 - r0, k->n, k->n, k->d, k->q + r0 * k->n, k->s + r0, NULL);
}

/* Input of decoder linears: capture (per linear name), then per-token activation fake quant
   (QUAROT_ERR_NONFINITE when the activations hold NaN/Inf); with integer products, the per-token
   codes and scales of x (before its fake quantization, the same quantizer) into b->xq / b->xs. */
static quarot_result qx__linear_input(const qx_forward* f, int64_t layer, float* x, int64_t T, int64_t n,
                             const char* const* names, int n_names, const qx__bufs* b) {
    const qx_fake_quant_opts* q = &f->opts.quant;
    int i, bits = q->a_bits;
    if (f->opts.capture) {
        for (i = 0; i < n_names; ++i) {
            char name[256];
            qx__name(f, layer, names[i], name, sizeof name);
            f->opts.capture(f->opts.capture_user, layer, name, x, T, n);
        }
    }
    if (!bits) return QUAROT_OK;
    if (q->a_down_bits && n_names == 1 && (strstr(names[0], "down_proj") || strcmp(names[0], "fc2.weight") == 0 ||
                                           strstr(names[0], ".w2.weight")))   /* Mixtral's expert down_proj */
        bits = q->a_down_bits;
    if (f->int_linears) {
        quarot_quant_desc d;
        qx__aq_ctx k;
        quarot_result r;
        memset(&d, 0, sizeof d);
        d.bits = bits;
        d.clip_ratio = q->a_clip > 0.0f ? q->a_clip : 1.0f;
        k.x = x; k.n = n; k.d = &d; k.q = b->xq; k.s = b->xs;
        r = qx__par_rows(f, T, n, qx__aq_rows, &k);
        if (r != QUAROT_OK) return r;
    }
    return qx__fake_quant_par(f, x, T, n, n, bits, q->a_asym, q->a_group, q->a_clip);
}

typedef struct qx__rope_ctx {
    const qx_forward* f;
    float* x;
    int64_t heads;
    const float* cs;
} qx__rope_ctx;

static quarot_result qx__rope_rows(void* c, int64_t t0, int64_t t1) {
    qx__rope_ctx* k = (qx__rope_ctx*)c;
    int64_t hd = k->f->cfg.head_dim;
    qx_ops_rope(k->x + t0 * k->heads * hd, t1 - t0, k->heads, hd, k->f->cfg.rope_interleaved, k->cs + t0 * hd);
    return QUAROT_OK;
}

/* Qwen2-VL / Qwen2.5-VL (arch "qwen2vl") run here as text: their M-RoPE turns frequency j of section s
   by position_ids[s] * inv_freq[j], and a text-only sequence has the three position ids equal (0..T-1),
   so it is this ordinary RoPE over the whole head_dim (formats/qx_safetensors.c, qx__vl_config). */
static void qx__rope_par(const qx_forward* f, float* x, int64_t T, int64_t heads, const float* cs) {
    qx__rope_ctx k;
    k.f = f; k.x = x; k.heads = heads; k.cs = cs;
    (void)qx__par_rows(f, T, heads * f->cfg.head_dim, qx__rope_rows, &k);
}

/* Grow the KV cache to hold `need` positions (contents of the first pos rows kept). */
static quarot_result qx__cache_reserve(qx_forward* f, int64_t need) {
    int64_t cap, l, L = f->cfg.n_layers, d = f->kv_dim;
    float *nk, *nv;
    if (need <= f->cache_cap) return QUAROT_OK;
    /* geometric growth (at least 64 positions); the layout [layer][position][kv_dim] changes with the
       capacity, so existing rows are copied layer by layer */
    cap = f->cache_cap * 2;
    if (cap < need) cap = need;
    if (cap < 64) cap = 64;
    nk = (float*)malloc((size_t)(L * cap * d) * sizeof(float));
    nv = (float*)malloc((size_t)(L * cap * d) * sizeof(float));
    if (!nk || !nv) {
        free(nk);
        free(nv);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    for (l = 0; l < L && f->pos > 0; ++l) {
        memcpy(nk + l * cap * d, f->k_cache + l * f->cache_cap * d, (size_t)(f->pos * d) * sizeof(float));
        memcpy(nv + l * cap * d, f->v_cache + l * f->cache_cap * d, (size_t)(f->pos * d) * sizeof(float));
    }
    free(f->k_cache);
    free(f->v_cache);
    f->k_cache = nk;
    f->v_cache = nv;
    f->cache_cap = cap;
    return QUAROT_OK;
}

/* Attention runs over groups of heads, one task per group (1 without threads). */
static int64_t qx__attn_tasks(const qx_forward* f) {
    int64_t th = qx__threads(f), nh = f->cfg.n_heads;
    return th < nh ? th : nh;
}

static quarot_result qx__scratch(qx_forward* f, int64_t T, int64_t n_keys, qx__bufs* b) {
    const quarot_model_config* g = &f->cfg;
    size_t sizes[14], total = 0, off = 0;
    float** ptrs[14];
    float *xq = NULL, *xsum = NULL;
    int64_t inter = g->intermediate, max_in;
    int i, n = f->int_linears ? 14 : 11;
    if (f->e_inter > inter) inter = f->e_inter;   /* MoE: the experts' and the shared expert's widths */
    if (f->s_inter > inter) inter = f->s_inter;
    max_in = g->hidden > inter ? g->hidden : inter;
    if (f->q_dim > max_in) max_in = f->q_dim;
    sizes[0] = (size_t)(T * g->hidden);       ptrs[0] = &b->x;
    sizes[1] = (size_t)(T * g->hidden);       ptrs[1] = &b->a;
    sizes[2] = (size_t)(T * f->q_dim);        ptrs[2] = &b->q;
    sizes[3] = (size_t)(T * f->kv_dim);       ptrs[3] = &b->k;
    sizes[4] = (size_t)(T * f->kv_dim);       ptrs[4] = &b->v;
    sizes[5] = (size_t)(T * f->q_dim);        ptrs[5] = &b->att;
    sizes[6] = (size_t)(T * g->hidden);       ptrs[6] = &b->tmp;
    sizes[7] = (size_t)(T * inter);           ptrs[7] = &b->g;
    sizes[8] = (size_t)(T * inter);           ptrs[8] = &b->u;
    sizes[9] = (size_t)(qx__attn_tasks(f) * T * n_keys); ptrs[9] = &b->scores;
    sizes[10] = (size_t)(T * g->head_dim);    ptrs[10] = &b->rope;
    sizes[11] = (size_t)(T * max_in + 3) / 4; ptrs[11] = &xq;        /* int8 codes */
    sizes[12] = (size_t)T;                    ptrs[12] = &b->xs;
    sizes[13] = (size_t)(T * max_in);         ptrs[13] = &xsum;      /* int32 sums (at most one per input) */
    b->xq = NULL;
    b->xs = NULL;
    b->xsum = NULL;
    /* one block, each buffer rounded up to 16 floats (64 bytes) so that every one starts aligned */
    for (i = 0; i < n; ++i) total += (sizes[i] + 15) & ~(size_t)15;
    if (total > f->scratch_floats) {
        float* p = (float*)malloc(total * sizeof(float));
        if (!p) return QUAROT_ERR_OUT_OF_MEMORY;
        free(f->scratch);
        f->scratch = p;
        f->scratch_floats = total;
    }
    for (i = 0; i < n; ++i) {
        *ptrs[i] = f->scratch + off;
        off += (sizes[i] + 15) & ~(size_t)15;
    }
    b->xq = (int8_t*)(void*)xq;
    b->xsum = (int32_t*)(void*)xsum;
    return QUAROT_OK;
}

/* Attention of heads [h0, h1) of one task: scores[T][n_keys] = q_h k_g^T / sqrt(hd), causal softmax,
   att_h = P v_g, with the task's own scores buffer and serial GEMMs. */
typedef struct qx__attn_job {
    const qx_forward* f;
    qx__bufs* b;
    const float *kc, *vc;
    int64_t T, pos0, n_keys, per;
    float scale;
    quarot_result st[QX__MAX_TASKS];
} qx__attn_job;

static void qx__attn_task(void* arg, int64_t task) {
    qx__attn_job* j = (qx__attn_job*)arg;
    const qx_forward* f = j->f;
    const quarot_model_config* g = &f->cfg;
    int64_t hd = g->head_dim, nh = g->n_heads, group = nh / g->n_kv_heads, n_keys = j->n_keys, T = j->T;
    int64_t h0 = task * j->per, h1 = h0 + j->per < nh ? h0 + j->per : nh, h, t, k;
    float* scores = j->b->scores + task * T * n_keys;
    quarot_env env = qx__serial_env(f);
    quarot_result r = QUAROT_OK;
    for (h = h0; h < h1 && r == QUAROT_OK; ++h) {
        int64_t kvh = h / group;
        r = quarot_sgemm(0, 1, T, n_keys, hd, j->scale, j->b->q + h * hd, f->q_dim, j->kc + kvh * hd, f->kv_dim, 0.0f,
                         scores, n_keys, &env);
        if (r != QUAROT_OK) break;
        for (t = 0; t < T; ++t) {
            float* s = scores + t * n_keys;
            int64_t last = j->pos0 + t;   /* keys 0..last are visible */
            float mx = s[0];
            double sum = 0.0;
            float inv;
            /* softmax over keys 0..last (max-shifted, sum in double); masked keys get weight 0 so
               that the P v GEMM may run over all n_keys rows */
            for (k = 1; k <= last; ++k) if (s[k] > mx) mx = s[k];
            for (k = 0; k <= last; ++k) {
                s[k] = expf(s[k] - mx);
                sum += s[k];
            }
            inv = (float)(1.0 / sum);
            for (k = 0; k <= last; ++k) s[k] *= inv;
            for (k = last + 1; k < n_keys; ++k) s[k] = 0.0f;
        }
        r = quarot_sgemm(0, 0, T, hd, n_keys, 1.0f, scores, n_keys, j->vc + kvh * hd, f->kv_dim, 0.0f,
                         j->b->att + h * hd, f->q_dim, &env);
    }
    j->st[task] = r;
}

/* A fused linear (phi3's q|k|v, gate|up): y = x W^T + b over all its rows at once, then each token's
   row split into its parts y0[T][n0], y1[T][n1], y2[T][n2] (n2 = 0: two parts). */
static quarot_result qx__fused_linear(const qx_forward* f, int64_t l, const float* x, int64_t T, const float* w,
                                      const float* bias, const quarot_qmat* qm, const qx__bufs* b, float* y0, int64_t n0,
                                      float* y1, int64_t n1, float* y2, int64_t n2) {
    int64_t n = n0 + n1 + n2, t;
    float* y = (float*)malloc((size_t)(T * n) * sizeof(float));
    quarot_result r;
    if (!y) return QUAROT_ERR_OUT_OF_MEMORY;
    r = qx__linear_l(f, l, x, T, f->cfg.hidden, w, bias, n, y, qm, b);
    for (t = 0; t < T && r == QUAROT_OK; ++t) {
        memcpy(y0 + t * n0, y + t * n, (size_t)n0 * sizeof(float));
        memcpy(y1 + t * n1, y + t * n + n0, (size_t)n1 * sizeof(float));
        if (n2) memcpy(y2 + t * n2, y + t * n + n0 + n1, (size_t)n2 * sizeof(float));
    }
    free(y);
    return r;
}


/* --------------------------------------------------------------------------------------------- */
/* The MLP of a MoE layer over T rows: a = norm2(x) (FP) in b->a; y = sum of the routed experts (and
   the shared expert) into b->tmp. See qx_forward.h for the routing. */

/* One gated MLP on x[n][H] (FP; quantized here, in place): out[n][H] = down(act(gate x) * up x), with
   the online hook `site` before down. names: the gate, up, down weights' layer suffixes. */
static quarot_result qx__moe_mlp(const qx_forward* f, int64_t l, float* x, int64_t n, int64_t I, float* const w[3],
                                 const quarot_qmat* const qm[3], char names[3][160], qx_site site, float* out, qx__bufs* b) {
    const quarot_model_config* g = &f->cfg;
    const char* gu[2];
    const char* dn = names[2];
    quarot_result r;
    gu[0] = names[0];
    gu[1] = names[1];
    r = qx__linear_input(f, l, x, n, g->hidden, gu, 2, b);
    if (r == QUAROT_OK) r = qx__linear_l(f, l, x, n, g->hidden, w[0], NULL, I, b->g, qm[0], b);
    if (r == QUAROT_OK) r = qx__linear_l(f, l, x, n, g->hidden, w[1], NULL, I, b->u, qm[1], b);
    if (r != QUAROT_OK) return r;
    qx__ew(f, qx__act_rows, b->u, b->g, n, I, g->act, 1);
    if (f->opts.online) f->opts.online(f->opts.online_user, l, site, b->u, n, I);
    r = qx__linear_input(f, l, b->u, n, I, &dn, 1, b);
    if (r == QUAROT_OK) r = qx__linear_l(f, l, b->u, n, I, w[2], NULL, g->hidden, out, qm[2], b);
    return r;
}

static quarot_result qx__moe(qx_forward* f, int64_t l, const qx_forward_layer* L, int64_t T, qx__bufs* b) {
    const quarot_model_config* g = &f->cfg;
    const qx_forward_moe* m = L->moe;
    const int64_t E = g->n_experts, K = g->n_experts_used, H = g->hidden;
    float *logit = NULL, *wt = NULL, *sg = NULL, *xg = NULL, *ye = NULL, *rw = NULL;
    int32_t* sel = NULL;
    int64_t *cnt = NULL, *rt = NULL, t, j, e, i;
    char names[3][160];
    quarot_result r = QUAROT_OK;
    logit = (float*)malloc((size_t)(T * E) * sizeof *logit);
    wt = (float*)malloc((size_t)(T * K) * sizeof *wt);
    sel = (int32_t*)malloc((size_t)(T * K) * sizeof *sel);
    cnt = (int64_t*)calloc((size_t)(E + 1), sizeof *cnt);
    rt = (int64_t*)malloc((size_t)(T * K) * sizeof *rt);
    rw = (float*)malloc((size_t)(T * K) * sizeof *rw);
    xg = (float*)malloc((size_t)(T * H) * sizeof *xg);
    ye = (float*)malloc((size_t)(T * H) * sizeof *ye);
    sg = (float*)malloc((size_t)T * sizeof *sg);
    if (!logit || !wt || !sel || !cnt || !rt || !rw || !xg || !ye || !sg) { r = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
    /* router logits (f32, never quantized) and each token's choice; its input offered to the capture */
    if (f->opts.capture && f->opts.capture_router) {
        char rn[256];
        qx__moe_name(f, l, QX_MW_ROUTER, 0, 0, rn, sizeof rn, NULL, 0);
        f->opts.capture(f->opts.capture_user, l, rn, b->a, T, H);
    }
    r = qx__gemm(f, 1, T, E, H, 1.0f, b->a, H, m->router, H, logit, E);
    for (t = 0; t < T && r == QUAROT_OK; ++t) r = qx_ops_route(logit + t * E, E, K, g->norm_topk_prob, sel + t * K, wt + t * K);
    if (r != QUAROT_OK) goto done;
    if (f->opts.route) f->opts.route(f->opts.route_user, l, sel, T, K);
    /* the shared expert's gate on the FP input, before a is quantized for the shared expert below */
    if (m->shared_gate) {
        r = qx__gemm(f, 1, T, 1, H, 1.0f, b->a, H, m->shared_gate, H, sg, 1);
        if (r != QUAROT_OK) goto done;
        for (t = 0; t < T; ++t) sg[t] = (float)(1.0 / (1.0 + exp(-(double)sg[t])));
    }
    /* rows per expert in token order (a counting sort): expert e's at rt[cnt[e] .. cnt[e+1]) */
    for (t = 0; t < T * K; ++t) cnt[sel[t] + 1]++;
    for (e = 0; e < E; ++e) cnt[e + 1] += cnt[e];
    {
        int64_t* fill = (int64_t*)malloc((size_t)E * sizeof *fill);
        if (!fill) { r = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
        memcpy(fill, cnt, (size_t)E * sizeof *fill);
        for (t = 0; t < T; ++t)
            for (j = 0; j < K; ++j) {
                int64_t at = fill[sel[t * K + j]]++;
                rt[at] = t;
                rw[at] = wt[t * K + j];
            }
        free(fill);
    }
    memset(b->tmp, 0, (size_t)(T * H) * sizeof(float));
    /* routed experts in index order: gather, one gated MLP over their rows, add w * out per row */
    for (e = 0; e < E && r == QUAROT_OK; ++e) {
        const int64_t n = cnt[e + 1] - cnt[e];
        float* w[3];
        const quarot_qmat* qm[3];
        int p;
        if (n == 0) continue;
        for (i = 0; i < n; ++i) memcpy(xg + i * H, b->a + rt[cnt[e] + i] * H, (size_t)H * sizeof(float));
        for (p = 0; p < 3; ++p) qx__moe_name(f, l, QX_MW_EXPERT + p, e, 0, NULL, 0, names[p], sizeof names[p]);
        r = qx__moe_expert(f, l, L, e, w, qm);
        if (r == QUAROT_OK) r = qx__moe_mlp(f, l, xg, n, f->e_inter, w, qm, names, QX_SITE_EXPERT_DOWN_INPUT, ye, b);
        for (i = 0; i < n && r == QUAROT_OK; ++i) {
            float* y = b->tmp + rt[cnt[e] + i] * H;
            const float* o = ye + i * H;
            const float c = rw[cnt[e] + i];
            for (j = 0; j < H; ++j) y[j] += c * o[j];
        }
    }
    /* the shared expert on every row (a is quantized in place: its last use), scaled by its gate */
    if (r == QUAROT_OK && m->shared[0]) {
        float* w[3];
        const quarot_qmat* qm[3];
        int p;
        for (p = 0; p < 3; ++p) {
            w[p] = m->shared[p];
            qm[p] = &m->shared_qm[p];
            qx__moe_name(f, l, QX_MW_SHARED + p, 0, 0, NULL, 0, names[p], sizeof names[p]);
        }
        r = qx__moe_mlp(f, l, b->a, T, f->s_inter, w, qm, names, QX_SITE_SHARED_DOWN_INPUT, ye, b);
        for (t = 0; t < T && r == QUAROT_OK; ++t)
            for (j = 0; j < H; ++j) b->tmp[t * H + j] += sg[t] * ye[t * H + j];
    }
done:
    free(logit); free(wt); free(sel); free(cnt); free(rt); free(rw); free(xg); free(ye); free(sg);
    return r;
}

/* --------------------------------------------------------------------------------------------- */
/* One decoder layer over T rows at positions pos0.. (K/V appended to the cache at pos0). */
static quarot_result qx__layer(qx_forward* f, int64_t l, int64_t T, int64_t pos0, qx__bufs* b) {
    const quarot_model_config* g = &f->cfg;
    const qx_forward_layer* L = &f->layers[f->opts.stream_weights ? 0 : l];
    const qx_fake_quant_opts* q = &f->opts.quant;
    int64_t hd = g->head_dim, nh = g->n_heads, nkv = g->n_kv_heads;
    int64_t n_keys = pos0 + T, task, tasks;
    qx__attn_job* aj;
    float* kc = f->k_cache + l * f->cache_cap * f->kv_dim;
    float* vc = f->v_cache + l * f->cache_cap * f->kv_dim;
    float scale = (float)(1.0 / sqrt((double)hd));
    quarot_result r = f->opts.stream_weights ? qx__stream_layer(f, l) : QUAROT_OK;
    static const char* const qkv_names[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"};
    const char* o_name = f->is_opt ? "self_attn.out_proj.weight" : "self_attn.o_proj.weight";
    const char* gu_names[2] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
    const char* down_name = f->is_opt ? "fc2.weight" : "mlp.down_proj.weight";
    const char* qkv_fused = "self_attn.qkv_proj.weight";
    const char* gu_fused = "mlp.gate_up_proj.weight";

    if (r != QUAROT_OK) return r;
    /* ---- attention: a = norm1(x); q, k, v = a W^T + b; q/k per-head norm and RoPE ---- */
    qx__norm_par(f, b->x, b->a, T, g->hidden, L->norm1_w, L->norm1_b, g->norm, g->norm_eps);
    if (f->is_fused) {
        r = qx__linear_input(f, l, b->a, T, g->hidden, &qkv_fused, 1, b);
        if (r == QUAROT_OK) r = qx__fused_linear(f, l, b->a, T, L->wq, L->bq, &L->qm[QX_QL_Q], b, b->q, f->q_dim, b->k, f->kv_dim,
                                                 b->v, f->kv_dim);
    } else {
        r = qx__linear_input(f, l, b->a, T, g->hidden, qkv_names, 3, b);
        if (r == QUAROT_OK) r = qx__linear_l(f, l, b->a, T, g->hidden, L->wq, L->bq, f->q_dim, b->q, &L->qm[QX_QL_Q], b);
        if (r == QUAROT_OK) r = qx__linear_l(f, l, b->a, T, g->hidden, L->wk, L->bk, f->kv_dim, b->k, &L->qm[QX_QL_K], b);
        if (r == QUAROT_OK) r = qx__linear_l(f, l, b->a, T, g->hidden, L->wv, L->bv, f->kv_dim, b->v, &L->qm[QX_QL_V], b);
    }
    if (r != QUAROT_OK) return r;
    if (L->q_norm) qx__norm_par(f, b->q, b->q, T * nh, hd, L->q_norm, NULL, QUAROT_NORM_RMS, g->norm_eps);
    if (L->k_norm) qx__norm_par(f, b->k, b->k, T * nkv, hd, L->k_norm, NULL, QUAROT_NORM_RMS, g->norm_eps);
    if (!f->is_opt) {
        qx__rope_par(f, b->q, T, nh, b->rope);
        qx__rope_par(f, b->k, T, nkv, b->rope);
    }
    /* online rotation of q and k (QuaRot's R3: the same H on both cancels in q.k) */
    if (f->opts.online) {
        f->opts.online(f->opts.online_user, l, QX_SITE_Q_ROPE, b->q, T * nh, hd);
        f->opts.online(f->opts.online_user, l, QX_SITE_K_ROPE, b->k, T * nkv, hd);
    }
    /* KV cache quantization: per token per head (groups of head_dim), asymmetric by default */
    if (q->k_bits)
        r = qx__fake_quant_par(f, b->k, T, f->kv_dim, f->kv_dim, q->k_bits, !(q->kv_sym || q->k_sym), q->k_group ? q->k_group : hd,
                               q->k_clip > 0.0f ? q->k_clip : q->kv_clip);
    if (r == QUAROT_OK && q->v_bits)
        r = qx__fake_quant_par(f, b->v, T, f->kv_dim, f->kv_dim, q->v_bits, !(q->kv_sym || q->v_sym), q->v_group ? q->v_group : hd,
                               q->v_clip > 0.0f ? q->v_clip : q->kv_clip);
    if (r != QUAROT_OK) return r;
    /* append this block's (quantized) K and V to the cache: rows pos0 .. pos0+T-1 */
    memcpy(kc + pos0 * f->kv_dim, b->k, (size_t)(T * f->kv_dim) * sizeof(float));
    memcpy(vc + pos0 * f->kv_dim, b->v, (size_t)(T * f->kv_dim) * sizeof(float));

    /* per query head: scores[T][n_keys] = q_h k_g^T / sqrt(hd), causal softmax, att_h = P v_g
       (groups of heads in parallel, see qx__attn_task) */
    tasks = qx__attn_tasks(f);
    aj = (qx__attn_job*)malloc(sizeof *aj);
    if (!aj) return QUAROT_ERR_OUT_OF_MEMORY;
    aj->f = f; aj->b = b; aj->kc = kc; aj->vc = vc; aj->T = T; aj->pos0 = pos0; aj->n_keys = n_keys; aj->scale = scale;
    aj->per = (nh + tasks - 1) / tasks;
    tasks = (nh + aj->per - 1) / aj->per;
    quarot_env_parallel_for(tasks > 1 ? f->opts.env : NULL, qx__attn_task, aj, tasks);
    for (task = 0; task < tasks && r == QUAROT_OK; ++task) r = aj->st[task];
    free(aj);
    if (r != QUAROT_OK) return r;
    /* o_proj input: online rotation, capture, quantization, then x += att Wo^T + bo */
    if (f->opts.online) f->opts.online(f->opts.online_user, l, QX_SITE_O_INPUT, b->att, T, f->q_dim);
    r = qx__linear_input(f, l, b->att, T, f->q_dim, &o_name, 1, b);
    if (r == QUAROT_OK) r = qx__linear_l(f, l, b->att, T, f->q_dim, L->wo, L->bo, g->hidden, b->tmp, &L->qm[QX_QL_O], b);
    if (r != QUAROT_OK) return r;
    qx__ew(f, qx__add_rows, b->x, b->tmp, T, g->hidden, g->act, 0);

    /* ---- MLP: a = norm2(x); h = act(a Wg^T) * (a Wu^T) (plain: act(a W1^T)); x += h Wd^T ---- */
    qx__norm_par(f, b->x, b->a, T, g->hidden, L->norm2_w, L->norm2_b, g->norm, g->norm_eps);
    if (L->moe) {   /* mixture of experts: x += routed experts (+ shared expert) */
        r = qx__moe(f, l, L, T, b);
        if (r != QUAROT_OK) return r;
        qx__ew(f, qx__add_rows, b->x, b->tmp, T, g->hidden, g->act, 0);
        return QUAROT_OK;
    }
    if (f->is_fused) {
        r = qx__linear_input(f, l, b->a, T, g->hidden, &gu_fused, 1, b);
        if (r == QUAROT_OK) r = qx__fused_linear(f, l, b->a, T, L->w_gate, L->b_gate, &L->qm[QX_QL_GATE], b, b->g,
                                                 g->intermediate, b->u, g->intermediate, NULL, 0);
        if (r != QUAROT_OK) return r;
        qx__ew(f, qx__act_rows, b->u, b->g, T, g->intermediate, g->act, 1);
    } else if (g->mlp == QUAROT_MLP_GATED) {
        r = qx__linear_input(f, l, b->a, T, g->hidden, gu_names, 2, b);
        if (r == QUAROT_OK) r = qx__linear_l(f, l, b->a, T, g->hidden, L->w_gate, L->b_gate, g->intermediate, b->g,
                                             &L->qm[QX_QL_GATE], b);
        if (r == QUAROT_OK) r = qx__linear_l(f, l, b->a, T, g->hidden, L->w_up, L->b_up, g->intermediate, b->u, &L->qm[QX_QL_UP], b);
        if (r != QUAROT_OK) return r;
        qx__ew(f, qx__act_rows, b->u, b->g, T, g->intermediate, g->act, 1);
    } else {
        const char* up_name = f->is_opt ? "fc1.weight" : "mlp.up_proj.weight";
        r = qx__linear_input(f, l, b->a, T, g->hidden, &up_name, 1, b);
        if (r == QUAROT_OK) r = qx__linear_l(f, l, b->a, T, g->hidden, L->w_up, L->b_up, g->intermediate, b->u, &L->qm[QX_QL_UP], b);
        if (r != QUAROT_OK) return r;
        qx__ew(f, qx__act_rows, b->u, NULL, T, g->intermediate, g->act, 0);
    }
    /* down_proj input: online rotation (QuaRot's R4), capture, quantization */
    if (f->opts.online) f->opts.online(f->opts.online_user, l, QX_SITE_DOWN_INPUT, b->u, T, g->intermediate);
    r = qx__linear_input(f, l, b->u, T, g->intermediate, &down_name, 1, b);
    if (r == QUAROT_OK) r = qx__linear_l(f, l, b->u, T, g->intermediate, L->w_down, L->b_down, g->hidden, b->tmp,
                                         &L->qm[QX_QL_DOWN], b);
    if (r != QUAROT_OK) return r;
    qx__ew(f, qx__add_rows, b->x, b->tmp, T, g->hidden, g->act, 0);
    return QUAROT_OK;
}

quarot_result qx_forward_tokens(qx_forward* f, const int32_t* tokens, int64_t T, float* logits, qx_err* e) {
    const quarot_model_config* g;
    qx__bufs b;
    quarot_result r;
    int64_t t, i, l, pos0;
    if (!f || !f->layers || !tokens || T <= 0 || T > (1 << 24)) {
        qx_err_set(e, "qx_forward_tokens: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    g = &f->cfg;
    pos0 = f->pos;   /* this block occupies positions pos0 .. pos0+T-1 */
    for (t = 0; t < T; ++t) {
        if (tokens[t] < 0 || tokens[t] >= g->vocab) {
            qx_err_set(e, "token %lld: id %ld outside the vocabulary [0, %lld)", (long long)t, (long)tokens[t], (long long)g->vocab);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    if (f->is_opt && pos0 + T + 2 > f->n_pos) {
        qx_err_set(e, "position %lld beyond the %lld learned positions", (long long)(pos0 + T - 1), (long long)(f->n_pos - 2));
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    r = qx__cache_reserve(f, pos0 + T);
    if (r == QUAROT_OK) r = qx__scratch(f, T, pos0 + T, &b);
    if (r != QUAROT_OK) {
        qx_err_set(e, "qx_forward_tokens: out of memory (%lld tokens at position %lld)", (long long)T, (long long)pos0);
        return r;
    }
    /* embeddings (+ learned positions, OPT offset 2) */
    for (t = 0; t < T; ++t) {
        const float* er = f->embed + (int64_t)tokens[t] * g->hidden;
        float* xr = b.x + t * g->hidden;
        memcpy(xr, er, (size_t)g->hidden * sizeof(float));
        if (f->pos_embed) {
            const float* pr = f->pos_embed + (pos0 + t + 2) * g->hidden;
            for (i = 0; i < g->hidden; ++i) xr[i] += pr[i];
        }
    }
    /* RoPE table for these positions: [T][cos half | sin half], angles in double */
    if (!f->is_opt) qx_ops_rope_table(b.rope, T, pos0, g->head_dim, g->rope_theta);
    for (l = 0; l < g->n_layers; ++l) {
        r = qx__layer(f, l, T, pos0, &b);
        if (r != QUAROT_OK) {
            qx_err_set(e, "layer %lld: %s", (long long)l, quarot_result_string(r));
            return r;
        }
        if (f->opts.stream_weights && f->opts.layer_done) f->opts.layer_done(f->opts.layer_done_user, l);
    }
    f->pos = pos0 + T;
    /* final norm and lm_head (FP, never quantized): logits [T][vocab] = norm(x) W_lm^T */
    if (!logits) return QUAROT_OK;
    qx__norm_par(f, b.x, b.a, T, g->hidden, f->final_w, f->final_b, g->norm, g->norm_eps);
    r = qx__gemm(f, 1, T, g->vocab, g->hidden, 1.0f, b.a, g->hidden, f->lm_head, g->hidden, logits, g->vocab);
    if (r != QUAROT_OK) { qx_err_set(e, "lm_head: %s", quarot_result_string(r)); return r; }
    if (f->lm_head_b) {
        int64_t ti, v;
        for (ti = 0; ti < T; ++ti)
            for (v = 0; v < g->vocab; ++v) logits[ti * g->vocab + v] += f->lm_head_b[v];
    }
    if (f->opts.stream_weights && f->opts.layer_done) f->opts.layer_done(f->opts.layer_done_user, -1);
    return r;
}

quarot_result qx_forward_window(qx_forward* f, const int32_t* tokens, int64_t T, float* logits, qx_err* e) {
    qx_forward_reset(f);
    return qx_forward_tokens(f, tokens, T, logits, e);
}

quarot_result qx_forward_step(qx_forward* f, int32_t token, float* logits, qx_err* e) {
    return qx_forward_tokens(f, &token, 1, logits, e);
}

/* --------------------------------------------------------------------------------------------- */
/* Layer-wise entry points (calibration). The RoPE table is filled as in qx_forward_tokens. */

quarot_result qx_forward_embed(qx_forward* f, const int32_t* tokens, int64_t T, float* x, qx_err* e) {
    const quarot_model_config* g;
    int64_t t, i;
    if (!f || !f->layers || !tokens || !x || T <= 0) {
        qx_err_set(e, "qx_forward_embed: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    g = &f->cfg;
    if (f->is_opt && T + 2 > f->n_pos) {
        qx_err_set(e, "position %lld beyond the %lld learned positions", (long long)(T - 1), (long long)(f->n_pos - 2));
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    for (t = 0; t < T; ++t) {
        float* xr = x + t * g->hidden;
        if (tokens[t] < 0 || tokens[t] >= g->vocab) {
            qx_err_set(e, "token %lld: id %ld outside the vocabulary [0, %lld)", (long long)t, (long)tokens[t], (long long)g->vocab);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        memcpy(xr, f->embed + (int64_t)tokens[t] * g->hidden, (size_t)g->hidden * sizeof(float));
        if (f->pos_embed)
            for (i = 0; i < g->hidden; ++i) xr[i] += f->pos_embed[(t + 2) * g->hidden + i];
    }
    return QUAROT_OK;
}

quarot_result qx_forward_layer_run(qx_forward* f, int64_t layer, float* x, int64_t T, qx_err* e) {
    const quarot_model_config* g;
    qx__bufs b;
    quarot_result r;
    int64_t saved;
    if (!f || !f->layers || !x || T <= 0 || T > (1 << 24) || layer < 0 || layer >= f->cfg.n_layers) {
        qx_err_set(e, "qx_forward_layer_run: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    g = &f->cfg;
    saved = f->pos;
    r = qx__cache_reserve(f, T);
    if (r == QUAROT_OK) r = qx__scratch(f, T, T, &b);
    if (r != QUAROT_OK) {
        qx_err_set(e, "qx_forward_layer_run: out of memory (%lld tokens)", (long long)T);
        return r;
    }
    if (!f->is_opt) qx_ops_rope_table(b.rope, T, 0, g->head_dim, g->rope_theta);
    memcpy(b.x, x, (size_t)(T * g->hidden) * sizeof(float));
    r = qx__layer(f, layer, T, 0, &b);
    f->pos = saved;
    if (r != QUAROT_OK) {
        qx_err_set(e, "layer %lld: %s", (long long)layer, quarot_result_string(r));
        return r;
    }
    memcpy(x, b.x, (size_t)(T * g->hidden) * sizeof(float));
    return QUAROT_OK;
}
