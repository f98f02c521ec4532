/* qx_engine.c - see qx_engine.h. One decoder layer is the reference forward pass's sequence
   (model/qx_forward.c) with the decoder linears on integer kernels and the KV cache in codes. */
#include "engine/qx_engine.h"
#include "model/qx_logits.h"
#include "model/qx_model.h"
#include "model/qx_ops.h"
#include "model/qx_windows.h"
#include "support/qx_file.h"
#include "model/qx_online.h"
#include "formats/qx_packed.h"
#include "formats/qx_safetensors.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { ENG_Q_ROPE = 0, ENG_K_ROPE = 1, ENG_O_INPUT = 2, ENG_DOWN_INPUT = 3, ENG_EXPERT_DOWN_INPUT = 4, ENG_SHARED_DOWN_INPUT = 5 };

/* Attention: queries in blocks of ENG_ATT_QB through quarot_sgemm; at head_dim <= ENG_ATT_DIRECT_HD
   (a small model, where quarot_sgemm's packing of the K / V slice costs more than the products) the
   direct kernel (quarot_attention_direct_f32) instead, ENG_ATT_DIRECT_Q queries per pass over the keys. */
enum { ENG_ATT_QB = 64, ENG_ATT_DIRECT_HD = 32, ENG_ATT_DIRECT_Q = QUAROT_ATTENTION_DIRECT_Q };

/* profile 1: wall clock; 2: this thread's CPU time (single-thread runs on a shared machine) */
static double eng_now_clock(int profile) { return profile == 2 ? qx_thread_cpu_now() : qx_now(); }

/* Every allocation of the engine, freed together (also after a failed init). */
static void* eng_alloc(qx_engine* en, size_t bytes) { return qx_arena_alloc(&en->arena, bytes); }

/* Drop one block early (the FP32 copy of a weight once it is packed). */
static void eng_release(qx_engine* en, void* p) { qx_arena_release(&en->arena, p); }

/* Tensor `name` [rows][cols] (rows 1: a vector) as FP32; missing and not required: *out = NULL. */
static quarot_result eng_load(qx_engine* en, const qx_store* s, const char* name, int64_t rows, int64_t cols,
                              int required, float** out, qx_err* e) {
    const quarot_tensor* t;
    quarot_result r = qx_model_weight(s, name, rows, cols, required, &t, e);
    *out = NULL;
    if (r != QUAROT_OK || !t) return r;
    return qx_model_weight_f32(t, name, rows, cols, &en->arena, out, e);
}

static int eng_bits_on(int b) { return b != 0 && b != 16; }

/* A decoder linear from the packed file: its codes and scales as stored (repacked into quarot_qmat's
   nibble order), or dequantized (the format's value) when no integer kernel applies. Returns 1 with
   *r set when the file holds it packed, 0 when it is not a packed linear of the file. */
static int eng_linear_packed(qx_engine* en, const char* name, int64_t out, int64_t in, qx_eng_linear* L, quarot_result* r,
                             qx_err* e) {
    const qx_packed_file* f = en->pk;
    const qx_packed_linear* P = NULL;
    const qx_engine_opts* o = &en->opts;
    int64_t i, grp, ng, lim;
    int cbits;
    *r = QUAROT_OK;
    for (i = 0; i < f->n_lin; ++i)
        if (strcmp(f->lin[i].name, name) == 0) { P = &f->lin[i]; break; }
    if (!P) return 0;
    en->pk_used++;
    if (P->out != out || P->in != in) {
        qx_err_set(e, "%s: packed shape [%lld][%lld], the model's config says [%lld][%lld]", name, (long long)P->out,
                   (long long)P->in, (long long)out, (long long)in);
        *r = QUAROT_ERR_SHAPE_MISMATCH;
        return 1;
    }
    grp = P->group == P->in ? 0 : P->group;
    ng = P->groups;
    cbits = f->settings.w_bits <= 4 ? 4 : 8;
    lim = cbits == 4 ? ((int64_t)1 << 20) : ((int64_t)1 << 16);
    if (eng_bits_on(o->a_bits) && !o->fp_linears) {
        size_t rb = quarot_qmat_row_bytes(cbits, in, grp);
        int8_t* codes;
        uint8_t* data;
        float* sc;
        if (P->group > lim) {
            qx_err_set(e, "%s: weight groups of %lld inputs are too wide for int32 accumulation (at most %lld at %d bits)", name,
                       (long long)P->group, (long long)lim, f->settings.w_bits);
            *r = QUAROT_ERR_UNSUPPORTED;
            return 1;
        }
        codes = (int8_t*)malloc((size_t)(out * in));
        data = (uint8_t*)eng_alloc(en, rb * (size_t)out);
        sc = (float*)eng_alloc(en, (size_t)(out * ng) * sizeof(float));
        if (!codes || !data || !sc || !rb) {
            free(codes);
            qx_err_set(e, "%s: out of memory", name);
            *r = QUAROT_ERR_OUT_OF_MEMORY;
            return 1;
        }
        qx_packed_codes(f, P, codes, sc, NULL);
        *r = quarot_qmat_pack(cbits, codes, out, in, grp, data);
        free(codes);
        if (*r != QUAROT_OK) { qx_err_set(e, "%s: codes: %s", name, quarot_result_string(*r)); return 1; }
        L->int_kernel = 1;
        L->qm.bits = cbits;
        L->qm.rows = out;
        L->qm.cols = in;
        L->qm.group = grp;
        L->qm.data = data;
        L->qm.scales = sc;
        en->weight_bytes += rb * (size_t)out + (size_t)(out * ng) * sizeof(float);
    } else {
        L->w = (float*)eng_alloc(en, (size_t)(out * in) * sizeof(float));
        if (!L->w) { qx_err_set(e, "%s: out of memory", name); *r = QUAROT_ERR_OUT_OF_MEMORY; return 1; }
        for (i = 0; i < out; ++i) qx_packed_dequant_row(f, P, i, L->w + i * in);
        en->weight_bytes += (size_t)(out * in) * sizeof(float);
    }
    return 1;
}

/* Load and quantize one linear: weight `wname` [out][in] (from the store, or from the 2-D view
   `view` of a stacked expert tensor when not NULL), bias `bname` (NULL: none; required when
   req_bias). */
static quarot_result eng_linear_named(qx_engine* en, const qx_store* s, const char* wname, const char* bname,
                                      const quarot_tensor* view, int64_t out, int64_t in, int req_bias, qx_eng_linear* L,
                                      qx_err* e) {
    char name[300];
    quarot_result r;
    const qx_engine_opts* o = &en->opts;
    quarot_quant_desc d;
    memset(L, 0, sizeof *L);
    L->out = out;
    L->in = in;
    if (bname) {
        r = eng_load(en, s, bname, 1, out, req_bias, &L->bias, e);
        if (r != QUAROT_OK) return r;
        if (L->bias) en->weight_bytes += (size_t)out * sizeof(float);
    }
    snprintf(name, sizeof name, "%s", wname);
    if (en->pk && eng_linear_packed(en, name, out, in, L, &r, e)) return r;
    r = view ? qx_model_weight_f32(view, name, out, in, &en->arena, &L->w, e) : eng_load(en, s, name, out, in, 1, &L->w, e);
    if (r != QUAROT_OK) return r;
    if (!eng_bits_on(o->w_bits) || en->pk) {   /* a linear the packed file left in float runs in FP32 */
        en->weight_bytes += (size_t)(out * in) * sizeof(float);
        return QUAROT_OK;
    }
    memset(&d, 0, sizeof d);
    d.bits = o->w_bits;
    d.group_size = o->w_group;
    if (!eng_bits_on(o->a_bits) || o->fp_linears) {
        /* no integer kernel without activation codes: FP32 GEMM on the fake-quantized weights */
        r = quarot_fake_quant_f32(L->w, out, in, in, &d);
        if (r != QUAROT_OK) { qx_err_set(e, "%s: quantization: %s", name, quarot_result_string(r)); return r; }
        en->weight_bytes += (size_t)(out * in) * sizeof(float);
        return QUAROT_OK;
    } else {
        int64_t ng = in / (o->w_group ? o->w_group : in);
        int cbits = o->w_bits <= 4 ? 4 : 8;
        size_t rb = quarot_qmat_row_bytes(cbits, in, o->w_group);
        int8_t* codes = (int8_t*)malloc((size_t)(out * in));
        uint8_t* data = (uint8_t*)eng_alloc(en, rb * (size_t)out);
        float* sc = (float*)eng_alloc(en, (size_t)(out * ng) * sizeof(float));
        if (!codes || !data || !sc) {
            free(codes);
            qx_err_set(e, "%s: out of memory", name);
            return QUAROT_ERR_OUT_OF_MEMORY;
        }
        r = quarot_quantize_f32(L->w, out, in, in, &d, codes, sc, NULL);
        if (r == QUAROT_OK) r = quarot_qmat_pack(cbits, codes, out, in, o->w_group, data);
        free(codes);
        if (r != QUAROT_OK) { qx_err_set(e, "%s: quantization: %s", name, quarot_result_string(r)); return r; }
        eng_release(en, L->w);
        L->w = NULL;
        L->int_kernel = 1;
        L->qm.bits = cbits;
        L->qm.rows = out;
        L->qm.cols = in;
        L->qm.group = o->w_group;
        L->qm.data = data;
        L->qm.scales = sc;
        en->weight_bytes += rb * (size_t)out + (size_t)(out * ng) * sizeof(float);
    }
    return QUAROT_OK;
}

/* Load and quantize one linear "model.layers.{l}.{base}.weight" [out][in] (+ bias). */
static quarot_result eng_linear(qx_engine* en, const qx_store* s, int64_t l, const char* base, int64_t out, int64_t in,
                                int req_bias, qx_eng_linear* L, qx_err* e) {
    char wname[300], bname[300];
    snprintf(wname, sizeof wname, "model.layers.%lld.%s.weight", (long long)l, base);
    snprintf(bname, sizeof bname, "model.layers.%lld.%s.bias", (long long)l, base);
    return eng_linear_named(en, s, wname, bname, NULL, out, in, req_bias, L, e);
}

/* ---- mixture-of-experts weights (the names of model/qx_forward.h) ---- */

/* Which MoE tensor: the router, the shared-expert gate, the shared expert's gate / up / down, a
   routed expert's gate / up / down. */
enum { ENG_MW_ROUTER, ENG_MW_SGATE, ENG_MW_SHARED, ENG_MW_EXPERT = ENG_MW_SHARED + 3 };

/* "model.layers.{l}.<name>" of MoE tensor `which` (expert e; stacked: the 3-D name without e). */
static void eng_moe_name(const qx_engine* en, int64_t l, int which, int64_t e, int stacked, char* name, size_t n) {
    static const char* const mix[3] = {"w1", "w3", "w2"};
    static const char* const qw[3] = {"gate_proj", "up_proj", "down_proj"};
    const char* blk = en->is_mixtral ? "block_sparse_moe" : "mlp";
    if (which == ENG_MW_ROUTER) snprintf(name, n, "model.layers.%lld.%s.gate.weight", (long long)l, blk);
    else if (which == ENG_MW_SGATE) snprintf(name, n, "model.layers.%lld.mlp.shared_expert_gate.weight", (long long)l);
    else if (which < ENG_MW_EXPERT)
        snprintf(name, n, "model.layers.%lld.mlp.shared_expert.%s.weight", (long long)l, qw[which - ENG_MW_SHARED]);
    else if (stacked)
        snprintf(name, n, "model.layers.%lld.%s.experts.%s.weight", (long long)l, blk,
                 en->is_mixtral ? mix[which - ENG_MW_EXPERT] : qw[which - ENG_MW_EXPERT]);
    else
        snprintf(name, n, "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)l, blk, (long long)e,
                 en->is_mixtral ? mix[which - ENG_MW_EXPERT] : qw[which - ENG_MW_EXPERT]);
}

/* Layer l's router, shared expert and routed experts into L->moe. Experts stored as 3-D tensors
   [n_experts][out][in] (config.experts_stacked) are read one expert's 2-D view at a time. */
static quarot_result eng_load_moe(qx_engine* en, const qx_store* s, int64_t l, qx_eng_layer* L, qx_err* e) {
    const quarot_model_config* g = &en->cfg;
    const int64_t E = g->n_experts, H = g->hidden, I = en->e_inter, S = en->s_inter;
    qx_eng_moe* m = (qx_eng_moe*)eng_alloc(en, sizeof *m);
    char name[300];
    quarot_result r;
    int64_t x;
    int p;
    if (!m || !(m->experts = (qx_eng_linear*)eng_alloc(en, (size_t)(3 * E) * sizeof *m->experts))) {
        qx_err_set(e, "out of memory");
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    memset(m->shared, 0, sizeof m->shared);
    m->shared_gate = NULL;
    eng_moe_name(en, l, ENG_MW_ROUTER, 0, 0, name, sizeof name);
    r = eng_load(en, s, name, E, H, 1, &m->router, e);
    if (r != QUAROT_OK) return r;
    en->weight_bytes += (size_t)(E * H) * sizeof(float);
    if (S > 0) {
        eng_moe_name(en, l, ENG_MW_SGATE, 0, 0, name, sizeof name);
        r = eng_load(en, s, name, 1, H, 1, &m->shared_gate, e);
        if (r != QUAROT_OK) return r;
        en->weight_bytes += (size_t)H * sizeof(float);
        for (p = 0; p < 3 && r == QUAROT_OK; ++p) {
            eng_moe_name(en, l, ENG_MW_SHARED + p, 0, 0, name, sizeof name);
            r = eng_linear_named(en, s, name, NULL, NULL, p == 2 ? H : S, p == 2 ? S : H, 0, &m->shared[p], e);
        }
        if (r != QUAROT_OK) return r;
    }
    for (p = 0; p < 3; ++p) {
        const int64_t rows = p == 2 ? H : I, cols = p == 2 ? I : H;
        const quarot_tensor* t = NULL;
        if (g->experts_stacked) {
            eng_moe_name(en, l, ENG_MW_EXPERT + p, 0, 1, name, sizeof name);
            t = qx_store_find(s, name);
            if (!t) { qx_err_set(e, "%s: missing", name); return QUAROT_ERR_NOT_FOUND; }
            if (t->ne[0] != cols || t->ne[1] != rows || t->ne[2] != E || t->ne[3] != 1) {
                qx_err_set(e, "%s: shape [%lld][%lld][%lld], expected [%lld experts][%lld][%lld]", name, (long long)t->ne[2],
                           (long long)t->ne[1], (long long)t->ne[0], (long long)E, (long long)rows, (long long)cols);
                return QUAROT_ERR_SHAPE_MISMATCH;
            }
        }
        for (x = 0; x < E; ++x) {
            quarot_tensor v;
            eng_moe_name(en, l, ENG_MW_EXPERT + p, x, 0, name, sizeof name);
            if (t) {   /* expert x's 2-D view of the 3-D tensor */
                v = *t;
                v.data = (char*)t->data + (size_t)x * t->nb[2];
                v.ne[2] = 1;
                v.nb[3] = v.nb[2];
            }
            r = eng_linear_named(en, s, name, NULL, t ? &v : NULL, rows, cols, 0, &m->experts[3 * x + p], e);
            if (r != QUAROT_OK) return r;
        }
    }
    L->moe = m;
    return QUAROT_OK;
}

/* The widest MLP inner row: the dense intermediate, the experts', the shared expert's. */
static int64_t eng_inter_max(const qx_engine* en) {
    int64_t w = en->cfg.intermediate;
    if (en->e_inter > w) w = en->e_inter;
    if (en->s_inter > w) w = en->s_inter;
    return w;
}

static quarot_result eng_check(qx_engine* en, const qx_store* s, const qx_engine_opts* o, qx_err* e) {
    quarot_model_config* g = &en->cfg;
    *g = s->config;
    if (g->n_kv_heads == 0) g->n_kv_heads = g->n_heads;
    if (g->head_dim == 0 && g->n_heads > 0) g->head_dim = g->hidden / g->n_heads;
    if (g->norm_eps == 0.0f) g->norm_eps = 1e-5f;
    if (g->rope_theta == 0.0f) g->rope_theta = 10000.0f;
    if (g->act == QUAROT_ACT_DEFAULT) g->act = QUAROT_ACT_SILU;
    en->fused = strcmp(g->arch, "phi3") == 0;
    if (g->n_experts > 0) {   /* the reference forward pass's MoE families (model/qx_forward.h) */
        en->is_mixtral = strcmp(g->arch, "mixtral") == 0;
        if (!en->is_mixtral && strcmp(g->arch, "qwen2_moe") != 0 && strcmp(g->arch, "qwen3_moe") != 0) {
            qx_err_set(e, "engine: %s has mixture-of-experts layers (%lld experts); the engine runs those of mixtral, "
                       "qwen2_moe and qwen3_moe", g->arch, (long long)g->n_experts);
            return QUAROT_ERR_UNSUPPORTED;
        }
        if (g->intermediate <= 0) g->intermediate = g->expert_intermediate;   /* every layer MoE: unused */
        en->e_inter = quarot_config_expert_width(g);
        en->s_inter = en->is_mixtral ? 0 : g->shared_intermediate;
        if (g->n_experts > (1 << 16) || g->n_experts_used < 1 || g->n_experts_used > g->n_experts || en->e_inter <= 0 ||
            en->e_inter > (1 << 22) || en->s_inter < 0 || en->s_inter > (1 << 22)) {
            qx_err_set(e, "config: bad mixture of experts (%lld experts, %lld used, expert intermediate %lld, shared %lld)",
                       (long long)g->n_experts, (long long)g->n_experts_used, (long long)en->e_inter, (long long)en->s_inter);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    if (strcmp(g->arch, "opt") == 0 || (g->norm != QUAROT_NORM_DEFAULT && g->norm != QUAROT_NORM_RMS) ||
        (g->mlp != QUAROT_MLP_DEFAULT && g->mlp != QUAROT_MLP_GATED) || g->act != QUAROT_ACT_SILU) {
        qx_err_set(e, "engine: LLaMA family only (RMSNorm, gated SiLU MLP); this model is '%s'", g->arch);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (g->hidden <= 0 || g->intermediate <= 0 || g->n_layers <= 0 || g->n_heads <= 0 || g->n_kv_heads <= 0 ||
        g->head_dim <= 0 || g->head_dim % 2 || g->vocab <= 0 || g->n_heads % g->n_kv_heads || g->hidden > (1 << 20) ||
        g->intermediate > (1 << 22) || g->vocab > (1 << 24) || g->n_layers > (1 << 12) || g->n_heads > (1 << 12)) {
        qx_err_set(e, "config: bad geometry (hidden %lld, intermediate %lld, layers %lld, heads %lld/%lld, head_dim %lld)",
                   (long long)g->hidden, (long long)g->intermediate, (long long)g->n_layers, (long long)g->n_heads,
                   (long long)g->n_kv_heads, (long long)g->head_dim);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    en->q_dim = g->n_heads * g->head_dim;
    en->kv_dim = g->n_kv_heads * g->head_dim;
#define ENG_BITS_OK(b) ((b) == 0 || (b) == 16 || ((b) >= 2 && (b) <= 8))
    if (!ENG_BITS_OK(o->w_bits) || !ENG_BITS_OK(o->a_bits) || !ENG_BITS_OK(o->kv_bits)) {
        qx_err_set(e, "engine: bits must be 2..8 (16 or 0 = not quantized): w %d, a %d, kv %d", o->w_bits, o->a_bits, o->kv_bits);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
#undef ENG_BITS_OK
    if (!(o->a_clip >= 0.0f && o->a_clip <= 1.0f) || o->context < 0 || o->max_tokens < 0 || o->w_group < 0) {
        qx_err_set(e, "engine: bad options (a_clip in [0, 1], context, max_tokens, w_group >= 0)");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (eng_bits_on(o->w_bits) && o->w_group &&
        (g->hidden % o->w_group || g->intermediate % o->w_group || en->q_dim % o->w_group || en->e_inter % o->w_group ||
         en->s_inter % o->w_group || o->w_group > (o->w_bits <= 4 ? (1 << 20) : (1 << 16)))) {
        qx_err_set(e, "engine: weight group %lld must divide hidden %lld, intermediate %lld%s and heads x head_dim %lld",
                   (long long)o->w_group, (long long)g->hidden, (long long)g->intermediate,
                   g->n_experts > 0 ? " (and the experts')" : "", (long long)en->q_dim);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (eng_bits_on(o->w_bits) && eng_bits_on(o->a_bits) && !o->w_group &&
        eng_inter_max(en) > (o->w_bits <= 4 ? (1 << 20) : (1 << 16))) {
        qx_err_set(e, "engine: intermediate %lld too wide for int32 accumulation per channel; use a weight group",
                   (long long)eng_inter_max(en));
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

/* Find and check the hooks: each must be at a site the layer has (down_input in a dense layer, the
   experts' and the shared expert's in a MoE layer) and cut its site's row into whole rows. */
static quarot_result eng_hooks(qx_engine* en, qx_err* e) {
    const quarot_online_list* h = en->opts.hooks;
    static const quarot_online_site sites[6] = {QUAROT_SITE_Q_ROPE, QUAROT_SITE_K_ROPE, QUAROT_SITE_O_INPUT,
                                                QUAROT_SITE_DOWN_INPUT, QUAROT_SITE_EXPERT_DOWN_INPUT,
                                                QUAROT_SITE_SHARED_DOWN_INPUT};
    int64_t l, i, width[6];
    size_t need = 0;
    int k;
    if (!h) return QUAROT_OK;
    width[0] = en->q_dim; width[1] = en->kv_dim; width[2] = en->q_dim; width[3] = en->cfg.intermediate;
    width[4] = en->e_inter; width[5] = en->s_inter;
    for (i = 0; i < h->count; ++i) {
        const quarot_online_hook* k0 = &h->hooks[i];
        if (k0->layer < 0 || k0->layer >= en->cfg.n_layers || k0->site <= QUAROT_SITE_NONE || k0->site >= QUAROT_SITE_COUNT_) {
            qx_err_set(e, "online hooks: hook %lld (layer %lld, %s) does not fit this model (%lld layers)", (long long)i,
                       (long long)k0->layer, quarot_online_site_name(k0->site), (long long)en->cfg.n_layers);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    }
    for (l = 0; l < en->cfg.n_layers; ++l)
        for (k = 0; k < 6; ++k) {
            const quarot_online_hook* x = quarot_online_find(h, l, sites[k]);
            const int moe = en->layers[l].moe != NULL;
            const int has = k < 3 || (k == 3 && !moe) || (k == 4 && moe) || (k == 5 && moe && en->s_inter > 0);
            en->layers[l].hook[k] = x;
            if (!x) continue;
            if (!has) {
                qx_err_set(e, "online hooks: layer %lld has no %s site (%s layer)", (long long)l, quarot_online_site_name(sites[k]),
                           moe ? (k == 3 ? "a mixture-of-experts" : "a MoE layer without a shared expert: a") : "a dense");
                return QUAROT_ERR_SHAPE_MISMATCH;
            }
            if (x->size <= 0 || width[k] % x->size != 0) {
                qx_err_set(e, "online hooks: layer %lld %s has size %lld, which does not divide the row (%lld) of this model",
                           (long long)l, quarot_online_site_name(sites[k]), (long long)x->size, (long long)width[k]);
                return QUAROT_ERR_SHAPE_MISMATCH;
            }
            if (k == 4 && x->experts && x->experts != en->cfg.n_experts) {
                qx_err_set(e, "online hooks: layer %lld expert_down_input covers %lld experts; the layer has %lld", (long long)l,
                           (long long)x->experts, (long long)en->cfg.n_experts);
                return QUAROT_ERR_SHAPE_MISMATCH;
            }
            if (quarot_online_workspace_size(x) > need) need = quarot_online_workspace_size(x);
        }
    if (need) {   /* one workspace for each task of a prefill block (eng_row_tasks) */
        const int64_t nth = en->env.parallel.n_threads > 1 ? en->env.parallel.n_threads : 1;
        need = (need + 63) & ~(size_t)63;
        en->hook_work = eng_alloc(en, need * (size_t)(4 * nth));
        if (!en->hook_work) { qx_err_set(e, "online hooks: out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
        en->hook_work_size = need;
    }
    return QUAROT_OK;
}

static quarot_result eng_buffers(qx_engine* en, qx_err* e) {
    const quarot_model_config* g = &en->cfg;
    int64_t T = en->max_tokens, C = en->context, L = g->n_layers, nkv = g->n_kv_heads;
    int64_t inter = eng_inter_max(en), wide = inter > en->q_dim ? inter : en->q_dim, E = g->n_experts, K = g->n_experts_used;
    int64_t fw = en->q_dim + 2 * en->kv_dim > 2 * g->intermediate ? en->q_dim + 2 * en->kv_dim : 2 * g->intermediate;
    int kvq = eng_bits_on(en->opts.kv_bits);
#define ENG_BUF(p, type, n) do { (p) = (type*)eng_alloc(en, (size_t)(n) * sizeof(type)); if (!(p)) goto oom; } while (0)
    ENG_BUF(en->x, float, T * g->hidden);
    ENG_BUF(en->a, float, T * g->hidden);
    ENG_BUF(en->qb, float, T * en->q_dim);
    ENG_BUF(en->kb, float, T * en->kv_dim);
    ENG_BUF(en->vb, float, T * en->kv_dim);
    ENG_BUF(en->att, float, T * en->q_dim);
    ENG_BUF(en->tmp, float, T * g->hidden);
    ENG_BUF(en->g, float, T * inter);
    ENG_BUF(en->u, float, T * inter);
    if (en->fused) ENG_BUF(en->fused_out, float, T * fw);
    if (E > 0) {
        ENG_BUF(en->moe_logit, float, T * E);
        ENG_BUF(en->moe_w, float, T * K);
        ENG_BUF(en->moe_rw, float, T * K);
        ENG_BUF(en->moe_sg, float, T);
        ENG_BUF(en->moe_xg, float, T * g->hidden);
        ENG_BUF(en->moe_ye, float, T * g->hidden);
        ENG_BUF(en->moe_sel, int32_t, T * K);
        ENG_BUF(en->moe_cnt, int64_t, E + 1);
        ENG_BUF(en->moe_rt, int64_t, T * K);
        ENG_BUF(en->moe_fill, int64_t, E);
    }
    /* attention runs n_att tasks side by side (kv heads dealt out round robin), each with its own
       scores and dequantized K / V slices */
    en->n_att = en->env.parallel.run && en->env.parallel.n_threads > 1 ? en->env.parallel.n_threads : 1;
    if (en->n_att > nkv) en->n_att = nkv;
    ENG_BUF(en->scores, float, en->n_att * T * C);
    ENG_BUF(en->rope, float, T * g->head_dim);
    ENG_BUF(en->act_q, int8_t, T * (wide > g->hidden ? wide : g->hidden));
    ENG_BUF(en->act_s, float, T);
    ENG_BUF(en->act_sum, int32_t, T * (wide > g->hidden ? wide : g->hidden));
    /* AMX tiles for blocks of >= 16 tokens on the integer path, when Linux grants tile state */
    en->amx = !en->opts.no_amx && !en->opts.fp_linears && T >= 16 &&
              (en->opts.isa == QUAROT_ISA_DEFAULT || en->opts.isa == QUAROT_ISA_AVX512) &&
              quarot_amx_request() == QUAROT_OK;
    if (en->amx) {
        en->amx_work_size = quarot_qgemm_amx_workspace_size(T, wide > g->hidden ? wide : g->hidden);
        ENG_BUF(en->amx_work, uint8_t, en->amx_work_size);
    }
    /* dequantized K (kv_bits < 16), or K transposed [head_dim][context] for the direct attention at a
       small head_dim (either cache) */
    if (kvq || g->head_dim <= ENG_ATT_DIRECT_HD) ENG_BUF(en->kdeq, float, en->n_att * C * g->head_dim);
    if (kvq) {
        int64_t rb = en->opts.kv_bits <= 4 ? en->kv_dim / 2 : en->kv_dim;
        en->kv_row_bytes = rb;
        ENG_BUF(en->k_q, uint8_t, L * C * rb);
        ENG_BUF(en->v_q, uint8_t, L * C * rb);
        ENG_BUF(en->k_s, float, L * C * nkv);
        ENG_BUF(en->k_z, float, L * C * nkv);
        ENG_BUF(en->v_s, float, L * C * nkv);
        ENG_BUF(en->v_z, float, L * C * nkv);
        ENG_BUF(en->vdeq, float, en->n_att * C * g->head_dim);
        ENG_BUF(en->kv_codes, int8_t, T * en->kv_dim);
        ENG_BUF(en->kv_sc, float, T * nkv);
        ENG_BUF(en->kv_zp, float, T * nkv);
        en->kv_bytes = (size_t)(2 * L * C) * ((size_t)rb + 2 * (size_t)nkv * sizeof(float));
    } else {
        ENG_BUF(en->k_f, float, L * C * en->kv_dim);
        ENG_BUF(en->v_f, float, L * C * en->kv_dim);
        en->kv_bytes = (size_t)(2 * L * C * en->kv_dim) * sizeof(float);
    }
#undef ENG_BUF
    return QUAROT_OK;
oom:
    qx_err_set(e, "engine: out of memory for buffers (%lld tokens, context %lld)", (long long)T, (long long)C);
    return QUAROT_ERR_OUT_OF_MEMORY;
}

static quarot_result eng_init(qx_engine* en, const qx_store* s, const qx_engine_opts* o, qx_err* e);

quarot_result qx_engine_init(qx_engine* en, const qx_store* s, const qx_engine_opts* o, qx_err* e) {
    if (!en) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(en, 0, sizeof *en);
    return eng_init(en, s, o, e);
}

/* Builds the engine into en (zeroed, or holding only pk / file_hooks). */
static quarot_result eng_init(qx_engine* en, const qx_store* s, const qx_engine_opts* o, qx_err* e) {
    qx_engine_opts def;
    quarot_model_config* g;
    quarot_result r;
    int64_t l;
    if (!s) { qx_err_set(e, "engine: no model"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (!o) { memset(&def, 0, sizeof def); o = &def; }
    en->opts = *o;
    if (o->env) en->env = *o->env;
    r = eng_check(en, s, o, e);
    if (r != QUAROT_OK) return r;
    g = &en->cfg;
    en->context = o->context ? o->context : (g->max_seq > 0 ? g->max_seq : 2048);
    en->max_tokens = o->max_tokens ? o->max_tokens : 512;
    if (en->max_tokens > en->context) en->max_tokens = en->context;
    if (en->context > (1 << 24)) { qx_err_set(e, "engine: context %lld too long", (long long)en->context); return QUAROT_ERR_INVALID_ARGUMENT; }
    en->layers = (qx_eng_layer*)eng_alloc(en, (size_t)g->n_layers * sizeof *en->layers);
    if (!en->layers) { qx_err_set(e, "out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(en->layers, 0, (size_t)g->n_layers * sizeof *en->layers);
    r = eng_load(en, s, "model.embed_tokens.weight", g->vocab, g->hidden, 1, &en->embed, e);
    if (r == QUAROT_OK) r = eng_load(en, s, "model.norm.weight", 1, g->hidden, 1, &en->final_norm, e);
    if (r == QUAROT_OK) r = eng_load(en, s, "lm_head.weight", g->vocab, g->hidden, 0, &en->lm_head, e);
    if (r != QUAROT_OK) goto fail;
    if (!en->lm_head) {
        if (!g->tied_embeddings) { qx_err_set(e, "lm_head.weight: missing (embeddings not tied)"); r = QUAROT_ERR_NOT_FOUND; goto fail; }
        en->lm_head = en->embed;
    }
    if (qx_store_find(s, "lm_head.bias") || qx_store_find(s, "model.norm.bias")) {
        qx_err_set(e, "engine: norm or lm_head biases (a fused LayerNorm model) are not supported");
        r = QUAROT_ERR_UNSUPPORTED;
        goto fail;
    }
    for (l = 0; l < g->n_layers && r == QUAROT_OK; ++l) {
        qx_eng_layer* L = &en->layers[l];
        char name[256];
        snprintf(name, sizeof name, "model.layers.%lld.input_layernorm.weight", (long long)l);
        r = eng_load(en, s, name, 1, g->hidden, 1, &L->norm1, e);
        snprintf(name, sizeof name, "model.layers.%lld.post_attention_layernorm.weight", (long long)l);
        if (r == QUAROT_OK) r = eng_load(en, s, name, 1, g->hidden, 1, &L->norm2, e);
        if (en->fused) {   /* phi3: one linear each for q|k|v and gate|up, split after the product */
            if (r == QUAROT_OK) r = eng_linear(en, s, l, "self_attn.qkv_proj", en->q_dim + 2 * en->kv_dim, g->hidden,
                                               g->attn_qkv_bias, &L->q, e);
            if (r == QUAROT_OK) r = eng_linear(en, s, l, "self_attn.o_proj", g->hidden, en->q_dim, 0, &L->o, e);
            if (r == QUAROT_OK) r = eng_linear(en, s, l, "mlp.gate_up_proj", 2 * g->intermediate, g->hidden, 0, &L->gate, e);
            if (r == QUAROT_OK) r = eng_linear(en, s, l, "mlp.down_proj", g->hidden, g->intermediate, 0, &L->down, e);
        } else {
            if (r == QUAROT_OK) r = eng_linear(en, s, l, "self_attn.q_proj", en->q_dim, g->hidden, g->attn_qkv_bias, &L->q, e);
            if (r == QUAROT_OK) r = eng_linear(en, s, l, "self_attn.k_proj", en->kv_dim, g->hidden, g->attn_qkv_bias, &L->k, e);
            if (r == QUAROT_OK) r = eng_linear(en, s, l, "self_attn.v_proj", en->kv_dim, g->hidden, g->attn_qkv_bias, &L->v, e);
            if (r == QUAROT_OK) r = eng_linear(en, s, l, "self_attn.o_proj", g->hidden, en->q_dim, g->attn_out_bias, &L->o, e);
            if (quarot_config_layer_is_moe(g, l)) {
                if (r == QUAROT_OK) r = eng_load_moe(en, s, l, L, e);
            } else {
                if (r == QUAROT_OK) r = eng_linear(en, s, l, "mlp.gate_proj", g->intermediate, g->hidden, g->mlp_bias, &L->gate, e);
                if (r == QUAROT_OK) r = eng_linear(en, s, l, "mlp.up_proj", g->intermediate, g->hidden, g->mlp_bias, &L->up, e);
                if (r == QUAROT_OK) r = eng_linear(en, s, l, "mlp.down_proj", g->hidden, g->intermediate, g->mlp_bias, &L->down, e);
            }
        }
        if (r == QUAROT_OK && g->qk_norm) {
            snprintf(name, sizeof name, "model.layers.%lld.self_attn.q_norm.weight", (long long)l);
            r = eng_load(en, s, name, 1, g->head_dim, 1, &L->q_norm, e);
            snprintf(name, sizeof name, "model.layers.%lld.self_attn.k_norm.weight", (long long)l);
            if (r == QUAROT_OK) r = eng_load(en, s, name, 1, g->head_dim, 1, &L->k_norm, e);
        }
    }
    /* which layers are MoE is in L->moe now: the config's list of dense layers belongs to the store */
    g->mlp_only_layers = NULL;
    g->n_mlp_only_layers = 0;
    if (r == QUAROT_OK) r = eng_hooks(en, e);
    if (r == QUAROT_OK) r = eng_buffers(en, e);
    if (r == QUAROT_OK) return QUAROT_OK;
fail:
    qx_engine_free(en);
    return r;
}

void qx_engine_free(qx_engine* en) {
    if (!en) return;
    qx_arena_free(&en->arena);
    if (en->file_hooks) {
        quarot_online_list_free(en->file_hooks);
        free(en->file_hooks);
    }
    memset(en, 0, sizeof *en);
}

void qx_engine_reset(qx_engine* en) {
    if (en) en->pos = 0;
}

/* ---------------------------------------------------------------------------------------------
   Building blocks, as the reference forward pass computes them. */

/* Row-wise steps of a block (online hooks, the gated activation, activation quantization) treat each
   token on its own, so any split gives the same bits: prefill splits the tokens into at most 4 tasks a
   thread (serial, the hooks alone held a 2-thread prefill of 64 tokens to 1.63x one thread); a
   decode step or a block under 16 tokens is one task. Returns the task count, *per the tokens a task. */
static int64_t eng_row_tasks(const qx_engine* en, int64_t T, int64_t* per) {
    const int64_t nth = en->env.parallel.n_threads > 1 ? en->env.parallel.n_threads : 1;
    *per = T < 16 ? T : (T + 4 * nth - 1) / (4 * nth);
    return *per > 0 ? (T + *per - 1) / *per : 0;
}

typedef struct eng_row_job {
    qx_engine* en;
    const quarot_online_hook* h;   /* the hook, or NULL: y = act(g) * y */
    float *x, *g;
    int64_t T, width, per;
    int failed;                    /* a task's error, or 0 */
} eng_row_job;

static void eng_row_task(void* arg, int64_t task) {
    eng_row_job* jb = (eng_row_job*)arg;
    const int64_t t0 = task * jb->per, nt = jb->T - t0 < jb->per ? jb->T - t0 : jb->per, w = jb->width;
    quarot_result r = QUAROT_OK;
    if (jb->h) {
        void* ws = (char*)jb->en->hook_work + (size_t)task * jb->en->hook_work_size;
        r = quarot_online_apply(jb->h, jb->x + t0 * w, nt * w / jb->h->size, jb->h->size, ws, jb->en->hook_work_size);
    } else {
        qx_ops_act(jb->x + t0 * w, jb->g + t0 * w, nt * w, QUAROT_ACT_SILU);
    }
    if (r != QUAROT_OK) __atomic_store_n(&jb->failed, (int)r, __ATOMIC_RELAXED);
}

/* x[T][width] = act(g) * x (h NULL), or the online hook h on each token's row of x. */
static quarot_result eng_rows(qx_engine* en, const quarot_online_hook* h, float* x, float* g, int64_t T, int64_t width) {
    eng_row_job jb;
    int64_t n;
    memset(&jb, 0, sizeof jb);
    jb.en = en; jb.h = h; jb.x = x; jb.g = g; jb.T = T; jb.width = width;
    n = eng_row_tasks(en, T, &jb.per);
    if (n == 1) eng_row_task(&jb, 0);
    else if (n > 1) quarot_env_parallel_for(&en->env, eng_row_task, &jb, n);
    return (quarot_result)jb.failed;
}

static quarot_result eng_hook(qx_engine* en, const quarot_online_hook* h, float* x, int64_t T, int64_t width) {
    double t0;
    quarot_result r;
    if (!h) return QUAROT_OK;
    t0 = en->opts.profile ? eng_now_clock(en->opts.profile) : 0.0;
    r = eng_rows(en, h, x, NULL, T, width);
    if (en->opts.profile) en->t_hooks += eng_now_clock(en->opts.profile) - t0;
    return r;
}

/* Activation quantization of tokens [t0, t1) (each token on its own, so any split gives the same
   codes): codes, scales and group sums (integer path) or fake quantization in place. */
typedef struct eng_act_job {
    qx_engine* en;
    float* x;
    int64_t T, n, group, per;   /* per: tokens a task */
    int int_kernel;
    quarot_quant_desc d;
    int failed;                 /* a task's error, or 0 */
} eng_act_job;

static void eng_act_task(void* arg, int64_t task) {
    eng_act_job* jb = (eng_act_job*)arg;
    qx_engine* en = jb->en;
    int64_t t0 = task * jb->per, nt = jb->T - t0 < jb->per ? jb->T - t0 : jb->per, n = jb->n;
    int64_t ng = jb->group ? n / jb->group : 1;
    quarot_result r;
    if (jb->int_kernel) {
        r = quarot_quantize_f32(jb->x + t0 * n, nt, n, n, &jb->d, en->act_q + t0 * n, en->act_s + t0, NULL);
        if (r == QUAROT_OK) r = quarot_qact_sums(en->act_q + t0 * n, nt, n, n, jb->group, en->act_sum + t0 * ng);
    } else {
        r = quarot_fake_quant_f32(jb->x + t0 * n, nt, n, n, &jb->d);
    }
    if (r != QUAROT_OK) __atomic_store_n(&jb->failed, (int)r, __ATOMIC_RELAXED);
}

/* Decoder-linear input x[T][n]: per-token codes (integer path) or fake quantization in place (FP
   path with activation bits), as the reference's qx__linear_input, split as eng_row_tasks says
   (serial, it was a tenth of a 2-thread prefill step). */
static quarot_result eng_act(qx_engine* en, float* x, int64_t T, int64_t n, const qx_eng_linear* L) {
    eng_act_job jb;
    double t0;
    int64_t tasks;
    if (!eng_bits_on(en->opts.a_bits)) return QUAROT_OK;
    t0 = en->opts.profile ? eng_now_clock(en->opts.profile) : 0.0;
    memset(&jb, 0, sizeof jb);
    jb.en = en; jb.x = x; jb.T = T; jb.n = n;
    jb.int_kernel = L->int_kernel;
    jb.group = L->int_kernel ? L->qm.group : 0;
    jb.d.bits = en->opts.a_bits;
    jb.d.clip_ratio = en->opts.a_clip > 0.0f ? en->opts.a_clip : 1.0f;
    tasks = eng_row_tasks(en, T, &jb.per);
    quarot_env_parallel_for(&en->env, eng_act_task, &jb, tasks);
    if (en->opts.profile) en->t_actq += eng_now_clock(en->opts.profile) - t0;
    return (quarot_result)jb.failed;
}

/* y[T][out] = x W^T + b, with the codes eng_act left (integer path) or x itself. */
static quarot_result eng_matmul(qx_engine* en, const qx_eng_linear* L, const float* x, int64_t T, float* y) {
    quarot_result r;
    int64_t t, j;
    if (L->int_kernel && en->amx && T >= 16)
        r = quarot_qgemm_amx(&L->qm, en->act_q, L->in, en->act_s, en->act_sum, T, y, L->out, en->amx_work,
                             en->amx_work_size, &en->env);
    else if (L->int_kernel)
        r = quarot_qgemm(&L->qm, en->act_q, L->in, en->act_s, en->act_sum, T, y, L->out, en->opts.isa, &en->env);
    else if (T <= 2)   /* FP32 decode: quarot_sgemm packs its operands, which costs more than the product */
        r = quarot_sgemv(T, L->out, L->in, x, L->in, L->w, L->in, y, L->out, &en->env, QUAROT_ISA_DEFAULT);
    else
        r = quarot_sgemm(0, 1, T, L->out, L->in, 1.0f, x, L->in, L->w, L->in, 0.0f, y, L->out, &en->env);
    if (r != QUAROT_OK || !L->bias) return r;
    for (t = 0; t < T; ++t)
        for (j = 0; j < L->out; ++j) y[t * L->out + j] += L->bias[j];
    return QUAROT_OK;
}

/* KV rows of this block into the cache at positions pos0.. (codes, scales, zeros when quantized). */
static quarot_result eng_kv_store(qx_engine* en, int64_t l, int64_t pos0, int64_t T, const float* src, uint8_t* q,
                                  float* sc, float* zp, float* fcache) {
    int64_t C = en->context, kvd = en->kv_dim, nkv = en->cfg.n_kv_heads, t, j;
    quarot_quant_desc d;
    quarot_result r;
    if (!eng_bits_on(en->opts.kv_bits)) {
        memcpy(fcache + (l * C + pos0) * kvd, src, (size_t)(T * kvd) * sizeof(float));
        return QUAROT_OK;
    }
    memset(&d, 0, sizeof d);
    d.bits = en->opts.kv_bits;
    d.asymmetric = en->opts.kv_sym ? 0 : 1;
    d.group_size = en->cfg.head_dim;
    r = quarot_quantize_f32(src, T, kvd, kvd, &d, en->kv_codes, en->kv_sc, en->opts.kv_sym ? NULL : en->kv_zp);
    if (r != QUAROT_OK) return r;
    for (t = 0; t < T; ++t) {
        const int8_t* c = en->kv_codes + t * kvd;
        uint8_t* dst = q + (l * C + pos0 + t) * en->kv_row_bytes;
        if (en->opts.kv_bits <= 4)
            for (j = 0; j < kvd / 2; ++j) dst[j] = (uint8_t)((c[2 * j] + 8) | ((c[2 * j + 1] + 8) << 4));
        else
            for (j = 0; j < kvd; ++j) dst[j] = (uint8_t)(c[j] + 128);
        memcpy(sc + (l * C + pos0 + t) * nkv, en->kv_sc + t * nkv, (size_t)nkv * sizeof(float));
        if (en->opts.kv_sym) memset(zp + (l * C + pos0 + t) * nkv, 0, (size_t)nkv * sizeof(float));
        else memcpy(zp + (l * C + pos0 + t) * nkv, en->kv_zp + t * nkv, (size_t)nkv * sizeof(float));
    }
    return QUAROT_OK;
}

/* Cache rows 0..n-1 of layer l, KV head kvh, as floats out[n][head_dim] (transposed: out[head_dim][ldo],
   the direct attention's K): (code - zero) * scale, quarot_dequantize_f32's expression. */
static quarot_result eng_kv_load(const qx_engine* en, int64_t l, int64_t kvh, int64_t n, const uint8_t* q, const float* sc,
                                 const float* zp, int transposed, float* out, int64_t ldo) {
    int64_t C = en->context, hd = en->cfg.head_dim, nkv = en->cfg.n_kv_heads;
    int bits = en->opts.kv_bits <= 4 ? 4 : 8;
    return quarot_attention_kv_dequant_f32(bits, q + l * C * en->kv_row_bytes + kvh * hd * bits / 8, en->kv_row_bytes,
                                           sc + l * C * nkv + kvh, zp + l * C * nkv + kvh, nkv, n, hd, transposed, out,
                                           ldo, QUAROT_ISA_DEFAULT);
}

/* Causal attention of the block's T queries over n_keys cache rows, per query head:
   softmax(q k^T / sqrt(hd)) v (GQA: KV head h / grp). Task i takes KV heads i, i + n_att, ...; each
   head's arithmetic is the same whichever task runs it (the products run serially inside a task). */
typedef struct eng_att_job {
    qx_engine* en;
    int64_t l, T, pos0;
    quarot_env serial;         /* en->env without the parallel hook */
    int failed;                /* a product's error, or 0 */
} eng_att_job;

static void eng_att_task(void* arg, int64_t task) {
    eng_att_job* jb = (eng_att_job*)arg;
    qx_engine* en = jb->en;
    const quarot_model_config* g = &en->cfg;
    int64_t hd = g->head_dim, nh = g->n_heads, nkv = g->n_kv_heads, grp = nh / nkv, T = jb->T, pos0 = jb->pos0;
    int64_t n_keys = pos0 + T, C = en->context, kvh, h, t, t0, j, ld;
    float scale = (float)(1.0 / sqrt((double)hd));
    float* scores = en->scores + task * T * C;
    const float *kc, *vc;
    quarot_result r;
    for (kvh = task; kvh < nkv; kvh += en->n_att) {
        int direct = hd <= ENG_ATT_DIRECT_HD, kvq = eng_bits_on(en->opts.kv_bits);
        float* kd = en->kdeq ? en->kdeq + task * C * hd : NULL;
        if (kvq) {
            float* vd = en->vdeq + task * C * hd;
            r = eng_kv_load(en, jb->l, kvh, n_keys, en->k_q, en->k_s, en->k_z, direct, kd, direct ? C : hd);
            if (r == QUAROT_OK) r = eng_kv_load(en, jb->l, kvh, n_keys, en->v_q, en->v_s, en->v_z, 0, vd, hd);
            if (r != QUAROT_OK) { __atomic_store_n(&jb->failed, (int)r, __ATOMIC_RELAXED); return; }
            kc = kd;
            vc = vd;
            ld = hd;
        } else {
            kc = en->k_f + jb->l * C * en->kv_dim + kvh * hd;
            vc = en->v_f + jb->l * C * en->kv_dim + kvh * hd;
            ld = en->kv_dim;
            if (direct) {
                for (j = 0; j < n_keys; ++j)
                    for (t = 0; t < hd; ++t) kd[t * C + j] = kc[j * ld + t];
            }
        }
        if (direct) {
            for (h = kvh * grp; h < (kvh + 1) * grp; ++h)
                for (t = 0; t < T; t += ENG_ATT_DIRECT_Q) {
                    int nq = T - t < ENG_ATT_DIRECT_Q ? (int)(T - t) : ENG_ATT_DIRECT_Q;
                    r = quarot_attention_direct_f32(en->qb + t * en->q_dim + h * hd, en->q_dim, nq, kd, C, vc, ld, hd,
                                                    pos0 + t + 1, scale, scores, C, en->att + t * en->q_dim + h * hd,
                                                    en->q_dim, QUAROT_ISA_DEFAULT);
                    if (r != QUAROT_OK) { __atomic_store_n(&jb->failed, (int)r, __ATOMIC_RELAXED); return; }
                }
            continue;
        }
        /* queries in blocks of ENG_ATT_QB: a block's scores stay in cache between the two products, and
           it reads only the keys its last query sees (the causal mask's zeros past them add nothing) */
        for (h = kvh * grp; h < (kvh + 1) * grp; ++h)
            for (t0 = 0; t0 < T; t0 += ENG_ATT_QB) {
                int64_t tb = T - t0 < ENG_ATT_QB ? T - t0 : ENG_ATT_QB, n = pos0 + t0 + tb;
                r = quarot_sgemm(0, 1, tb, n, hd, scale, en->qb + t0 * en->q_dim + h * hd, en->q_dim, kc, ld, 0.0f, scores,
                                 n, &jb->serial);
                if (r != QUAROT_OK) { __atomic_store_n(&jb->failed, (int)r, __ATOMIC_RELAXED); return; }
                for (t = 0; t < tb; ++t) {
                    float* s = scores + t * n;
                    int64_t last = pos0 + t0 + t;
                    r = quarot_attention_softmax_f32(s, last + 1, QUAROT_ISA_DEFAULT);
                    if (r != QUAROT_OK) { __atomic_store_n(&jb->failed, (int)r, __ATOMIC_RELAXED); return; }
                    for (j = last + 1; j < n; ++j) s[j] = 0.0f;
                }
                r = quarot_sgemm(0, 0, tb, hd, n, 1.0f, scores, n, vc, ld, 0.0f, en->att + t0 * en->q_dim + h * hd, en->q_dim,
                                 &jb->serial);
                if (r != QUAROT_OK) { __atomic_store_n(&jb->failed, (int)r, __ATOMIC_RELAXED); return; }
            }
    }
}

/* Each row of y[T][n0 + n1 + n2] split into y0[T][n0], y1[T][n1], y2[T][n2] (n2 0: two parts). */
static void eng_split(const float* y, int64_t T, float* y0, int64_t n0, float* y1, int64_t n1, float* y2, int64_t n2) {
    const int64_t n = n0 + n1 + n2;
    int64_t t;
    for (t = 0; t < T; ++t) {
        memcpy(y0 + t * n0, y + t * n, (size_t)n0 * sizeof(float));
        memcpy(y1 + t * n1, y + t * n + n0, (size_t)n1 * sizeof(float));
        if (n2) memcpy(y2 + t * n2, y + t * n + n0 + n1, (size_t)n2 * sizeof(float));
    }
}

/* The second half of a gated MLP: en->u = act(en->g) * en->u [n][I], the online hook before down
   (R4), out[n][hidden] = down(u). */
static quarot_result eng_mlp_down(qx_engine* en, const qx_eng_linear* down, int64_t n, int64_t I, const quarot_online_hook* hook,
                                  float* out) {
    quarot_result r = eng_rows(en, NULL, en->u, en->g, n, I);
    if (r == QUAROT_OK) r = eng_hook(en, hook, en->u, n, I);
    if (r == QUAROT_OK) r = eng_act(en, en->u, n, I, down);
    if (r == QUAROT_OK) r = eng_matmul(en, down, en->u, n, out);
    return r;
}

/* A gated MLP of inner width I on x[n][hidden] (fake-quantized in place on the FP path):
   out[n][hidden] = down(act(gate x) * up x), hook before down. */
static quarot_result eng_mlp(qx_engine* en, float* x, int64_t n, int64_t I, const qx_eng_linear* gate, const qx_eng_linear* up,
                             const qx_eng_linear* down, const quarot_online_hook* hook, float* out) {
    quarot_result r = eng_act(en, x, n, en->cfg.hidden, gate);
    if (r == QUAROT_OK) r = eng_matmul(en, gate, x, n, en->g);
    if (r == QUAROT_OK) r = eng_matmul(en, up, x, n, en->u);
    if (r == QUAROT_OK) r = eng_mlp_down(en, down, n, I, hook, out);
    return r;
}

/* A mixture-of-experts MLP on a = norm2(x) (en->a, FP) into en->tmp, the reference's sequence
   (model/qx_forward.c): router logits in f32 (never quantized), each token's top k (qx_ops_route),
   the shared expert's sigmoid gate on the FP input; the rows routed to each expert gathered in token
   order (a counting sort) and run as one gated MLP per expert (one integer GEMM per linear), experts
   in index order, out += w * expert(row); then the shared expert on every row, out += gate * shared. */
static quarot_result eng_moe(qx_engine* en, const qx_eng_layer* L, int64_t T) {
    const quarot_model_config* g = &en->cfg;
    const qx_eng_moe* m = L->moe;
    const int64_t E = g->n_experts, K = g->n_experts_used, H = g->hidden;
    int64_t t, j, x, i;
    quarot_result r;
    r = quarot_sgemm(0, 1, T, E, H, 1.0f, en->a, H, m->router, H, 0.0f, en->moe_logit, E, &en->env);
    for (t = 0; t < T && r == QUAROT_OK; ++t)
        r = qx_ops_route(en->moe_logit + t * E, E, K, g->norm_topk_prob, en->moe_sel + t * K, en->moe_w + t * K);
    if (r != QUAROT_OK) return r;
    if (m->shared_gate) {
        r = quarot_sgemm(0, 1, T, 1, H, 1.0f, en->a, H, m->shared_gate, H, 0.0f, en->moe_sg, 1, &en->env);
        if (r != QUAROT_OK) return r;
        for (t = 0; t < T; ++t) en->moe_sg[t] = (float)(1.0 / (1.0 + exp(-(double)en->moe_sg[t])));
    }
    memset(en->moe_cnt, 0, (size_t)(E + 1) * sizeof *en->moe_cnt);
    for (t = 0; t < T * K; ++t) en->moe_cnt[en->moe_sel[t] + 1]++;
    for (x = 0; x < E; ++x) en->moe_cnt[x + 1] += en->moe_cnt[x];
    memcpy(en->moe_fill, en->moe_cnt, (size_t)E * sizeof *en->moe_fill);
    for (t = 0; t < T; ++t)
        for (j = 0; j < K; ++j) {
            int64_t at = en->moe_fill[en->moe_sel[t * K + j]]++;
            en->moe_rt[at] = t;
            en->moe_rw[at] = en->moe_w[t * K + j];
        }
    memset(en->tmp, 0, (size_t)(T * H) * sizeof(float));
    for (x = 0; x < E; ++x) {
        const int64_t n = en->moe_cnt[x + 1] - en->moe_cnt[x], base = en->moe_cnt[x];
        const qx_eng_linear* ex = m->experts + 3 * x;
        if (n == 0) continue;
        for (i = 0; i < n; ++i) memcpy(en->moe_xg + i * H, en->a + en->moe_rt[base + i] * H, (size_t)H * sizeof(float));
        r = eng_mlp(en, en->moe_xg, n, en->e_inter, &ex[0], &ex[1], &ex[2], L->hook[ENG_EXPERT_DOWN_INPUT], en->moe_ye);
        if (r != QUAROT_OK) return r;
        for (i = 0; i < n; ++i) {
            float* y = en->tmp + en->moe_rt[base + i] * H;
            const float* o = en->moe_ye + i * H;
            const float c = en->moe_rw[base + i];
            for (j = 0; j < H; ++j) y[j] += c * o[j];
        }
    }
    if (m->shared[0].out) {   /* a's last use: quantized in place on the FP path */
        r = eng_mlp(en, en->a, T, en->s_inter, &m->shared[0], &m->shared[1], &m->shared[2], L->hook[ENG_SHARED_DOWN_INPUT],
                    en->moe_ye);
        if (r != QUAROT_OK) return r;
        for (t = 0; t < T; ++t)
            for (j = 0; j < H; ++j) en->tmp[t * H + j] += en->moe_sg[t] * en->moe_ye[t * H + j];
    }
    return QUAROT_OK;
}

static quarot_result eng_layer(qx_engine* en, int64_t l, int64_t T, int64_t pos0) {
    const quarot_model_config* g = &en->cfg;
    const qx_eng_layer* L = &en->layers[l];
    int64_t hd = g->head_dim, nh = g->n_heads, nkv = g->n_kv_heads, i;
    eng_att_job aj;
    quarot_result r;

    qx_ops_norm(en->x, en->a, T, g->hidden, L->norm1, NULL, QUAROT_NORM_RMS, g->norm_eps);
    r = eng_act(en, en->a, T, g->hidden, &L->q);
    if (en->fused) {   /* one product over q|k|v (the activation quantized once), then each row split */
        if (r == QUAROT_OK) r = eng_matmul(en, &L->q, en->a, T, en->fused_out);
        if (r == QUAROT_OK) eng_split(en->fused_out, T, en->qb, en->q_dim, en->kb, en->kv_dim, en->vb, en->kv_dim);
    } else {
        if (r == QUAROT_OK) r = eng_matmul(en, &L->q, en->a, T, en->qb);
        if (r == QUAROT_OK) r = eng_matmul(en, &L->k, en->a, T, en->kb);
        if (r == QUAROT_OK) r = eng_matmul(en, &L->v, en->a, T, en->vb);
    }
    if (r != QUAROT_OK) return r;
    if (L->q_norm) qx_ops_norm(en->qb, en->qb, T * nh, hd, L->q_norm, NULL, QUAROT_NORM_RMS, g->norm_eps);
    if (L->k_norm) qx_ops_norm(en->kb, en->kb, T * nkv, hd, L->k_norm, NULL, QUAROT_NORM_RMS, g->norm_eps);
    qx_ops_rope(en->qb, T, nh, hd, g->rope_interleaved, en->rope);
    qx_ops_rope(en->kb, T, nkv, hd, g->rope_interleaved, en->rope);
    r = eng_hook(en, L->hook[ENG_Q_ROPE], en->qb, T, en->q_dim);
    if (r == QUAROT_OK) r = eng_hook(en, L->hook[ENG_K_ROPE], en->kb, T, en->kv_dim);
    if (r == QUAROT_OK) r = eng_kv_store(en, l, pos0, T, en->kb, en->k_q, en->k_s, en->k_z, en->k_f);
    if (r == QUAROT_OK) r = eng_kv_store(en, l, pos0, T, en->vb, en->v_q, en->v_s, en->v_z, en->v_f);
    if (r != QUAROT_OK) return r;
    memset(&aj, 0, sizeof aj);
    aj.en = en; aj.l = l; aj.T = T; aj.pos0 = pos0;
    aj.serial.allocator = en->env.allocator;
    quarot_env_parallel_for(&en->env, eng_att_task, &aj, en->n_att);
    if (aj.failed) return (quarot_result)aj.failed;
    r = eng_hook(en, L->hook[ENG_O_INPUT], en->att, T, en->q_dim);
    if (r == QUAROT_OK) r = eng_act(en, en->att, T, en->q_dim, &L->o);
    if (r == QUAROT_OK) r = eng_matmul(en, &L->o, en->att, T, en->tmp);
    if (r != QUAROT_OK) return r;
    for (i = 0; i < T * g->hidden; ++i) en->x[i] += en->tmp[i];

    qx_ops_norm(en->x, en->a, T, g->hidden, L->norm2, NULL, QUAROT_NORM_RMS, g->norm_eps);
    if (L->moe) r = eng_moe(en, L, T);
    else if (en->fused) {
        r = eng_act(en, en->a, T, g->hidden, &L->gate);
        if (r == QUAROT_OK) r = eng_matmul(en, &L->gate, en->a, T, en->fused_out);
        if (r != QUAROT_OK) return r;
        eng_split(en->fused_out, T, en->g, g->intermediate, en->u, g->intermediate, NULL, 0);
        r = eng_mlp_down(en, &L->down, T, g->intermediate, L->hook[ENG_DOWN_INPUT], en->tmp);
    } else {
        r = eng_mlp(en, en->a, T, g->intermediate, &L->gate, &L->up, &L->down, L->hook[ENG_DOWN_INPUT], en->tmp);
    }
    if (r != QUAROT_OK) return r;
    for (i = 0; i < T * g->hidden; ++i) en->x[i] += en->tmp[i];
    return QUAROT_OK;
}

quarot_result qx_engine_forward(qx_engine* en, const int32_t* tokens, int64_t T, float* logits, int all_logits, qx_err* e) {
    const quarot_model_config* g;
    int64_t t, l, pos0, rows;
    quarot_result r;
    if (!en || !en->layers || !tokens || T <= 0) {
        qx_err_set(e, "engine: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    g = &en->cfg;
    pos0 = en->pos;
    if (T > en->max_tokens) {
        qx_err_set(e, "engine: %lld tokens in one call, more than the %lld it was sized for", (long long)T, (long long)en->max_tokens);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (pos0 + T > en->context) {
        qx_err_set(e, "engine: %lld tokens at position %lld do not fit the context of %lld tokens", (long long)T,
                   (long long)pos0, (long long)en->context);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    for (t = 0; t < T; ++t)
        if (tokens[t] < 0 || tokens[t] >= g->vocab) {
            qx_err_set(e, "engine: token %lld: id %ld outside the vocabulary [0, %lld)", (long long)t, (long)tokens[t], (long long)g->vocab);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    for (t = 0; t < T; ++t) memcpy(en->x + t * g->hidden, en->embed + (int64_t)tokens[t] * g->hidden, (size_t)g->hidden * sizeof(float));
    qx_ops_rope_table(en->rope, T, pos0, g->head_dim, g->rope_theta);
    for (l = 0; l < g->n_layers; ++l) {
        r = eng_layer(en, l, T, pos0);
        if (r != QUAROT_OK) {
            qx_err_set(e, "engine: layer %lld: %s", (long long)l, quarot_result_string(r));
            return r;
        }
    }
    en->pos = pos0 + T;
    if (!logits) return QUAROT_OK;
    rows = all_logits ? T : 1;
    qx_ops_norm(en->x + (T - rows) * g->hidden, en->a, rows, g->hidden, en->final_norm, NULL, QUAROT_NORM_RMS, g->norm_eps);
    if (rows <= 2)   /* decode: quarot_sgemm would pack all of lm_head (vocab x hidden floats) for one row */
        r = quarot_sgemv(rows, g->vocab, g->hidden, en->a, g->hidden, en->lm_head, g->hidden, logits, g->vocab, &en->env,
                         QUAROT_ISA_DEFAULT);
    else
        r = quarot_sgemm(0, 1, rows, g->vocab, g->hidden, 1.0f, en->a, g->hidden, en->lm_head, g->hidden, 0.0f, logits,
                         g->vocab, &en->env);
    if (r != QUAROT_OK) qx_err_set(e, "engine: lm_head: %s", quarot_result_string(r));
    return r;
}

typedef struct eng_cand { float p; int32_t i; } eng_cand;

static int eng_cand_cmp(const void* a, const void* b) {
    const eng_cand* x = (const eng_cand*)a;
    const eng_cand* y = (const eng_cand*)b;
    if (x->p != y->p) return x->p > y->p ? -1 : 1;
    return x->i < y->i ? -1 : (x->i > y->i);
}

int32_t qx_engine_sample(const float* logits, int64_t vocab, float temp, float top_p, quarot_rng* rng, float* work) {
    eng_cand* c = (eng_cand*)(void*)work;
    double sum = 0.0, cut, acc, r;
    float mx;
    int64_t i, n;
    if (!(temp > 0.0f)) return qx_logits_argmax(logits, vocab);
    mx = logits[0];
    for (i = 1; i < vocab; ++i) if (logits[i] > mx) mx = logits[i];
    for (i = 0; i < vocab; ++i) {
        c[i].p = expf((logits[i] - mx) / temp);
        c[i].i = (int32_t)i;
        sum += c[i].p;
    }
    n = vocab;
    cut = sum;
    if (top_p > 0.0f && top_p < 1.0f) {
        qsort(c, (size_t)vocab, sizeof *c, eng_cand_cmp);
        acc = 0.0;
        for (n = 0; n < vocab;) {
            acc += c[n++].p;
            if (acc >= (double)top_p * sum) break;
        }
        cut = acc;
    }
    r = quarot_rng_uniform(rng) * cut;
    acc = 0.0;
    for (i = 0; i < n; ++i) {
        acc += c[i].p;
        if (r < acc) return c[i].i;
    }
    return c[n - 1].i;
}

static quarot_result eng_window_logits(void* user, const int32_t* tokens, int64_t len, float* logits, qx_err* e) {
    qx_engine* en = (qx_engine*)user;
    qx_engine_reset(en);
    return qx_engine_forward(en, tokens, len, logits, 1, e);
}

quarot_result qx_engine_eval(qx_engine* en, const qx_windows* w, qx_ppl_result* res, qx_err* e) {
    quarot_result r;
    if (!en || !w || !res || w->n <= 0 || w->n_predicted <= 0) {
        qx_err_set(e, "engine eval: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    r = qx_windows_score(w, en->cfg.vocab, eng_window_logits, en, NULL, NULL, "engine eval", res, e);
    qx_engine_reset(en);
    return r;
}

quarot_result qx_engine_eval_quant(const qx_store* s, const quarot_online_list* hooks, const qx_fake_quant_opts* q,
                                   const qx_windows* w, const quarot_env* env, qx_ppl_result* res, qx_err* e) {
    qx_engine en;
    qx_engine_opts o;
    quarot_online_list own;
    quarot_result r;
    if (!s || !q || !w || !res) { qx_err_set(e, "engine eval: bad arguments"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (q->w_asym || q->a_asym || (q->w_clip != 0.0f && q->w_clip != 1.0f) || q->w_clip_search || q->k_bits != q->v_bits ||
        (q->kv_clip != 0.0f && q->kv_clip != 1.0f)) {
        qx_err_set(e, "engine: asymmetric weights/activations, weight clipping and different K/V bits are not supported");
        return QUAROT_ERR_UNSUPPORTED;
    }
    memset(&o, 0, sizeof o);
    o.w_bits = q->w_bits;
    o.w_group = q->w_group;
    o.a_bits = q->a_bits;
    o.a_clip = q->a_clip;
    o.kv_bits = q->k_bits;
    o.kv_sym = q->kv_sym;
    o.context = w->max_len;
    o.max_tokens = w->max_len;
    o.hooks = hooks && hooks->count ? hooks : NULL;
    o.env = env;
    /* the model's own hooks (a model written by `quarot rotate --online`, attached to its store) */
    r = qx_model_hooks_get(s, &own, e);
    if (r != QUAROT_OK) { quarot_online_list_free(&own); return r; }
    if (own.count && o.hooks) {
        quarot_online_list_free(&own);
        qx_err_set(e, "engine: a model with its own online hooks rotated again (two hook lists at one site) is not supported");
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (own.count) o.hooks = &own;
    r = qx_engine_init(&en, s, &o, e);
    if (r == QUAROT_OK) {
        r = qx_engine_eval(&en, w, res, e);
        qx_engine_free(&en);
    }
    quarot_online_list_free(&own);
    return r;
}

/* ---------------------------------------------------------------------------------------------
   The packed W4A4 file (formats/qx_packed.h). */

/* 1 when name is "model.layers.{l}.<decoder linear>.weight" with l < n_layers. */
static int eng_is_decoder_linear(const char* name, int64_t n_layers) {
    static const char* const base[12] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                         "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "self_attn.qkv_proj",
                                         "mlp.gate_up_proj", "mlp.shared_expert.gate_proj", "mlp.shared_expert.up_proj",
                                         "mlp.shared_expert.down_proj"};
    char want[300];
    long long l, x;
    int k, used = 0, u2 = 0;
    if (sscanf(name, "model.layers.%lld.%n", &l, &used) != 1 || used == 0 || l < 0 || l >= n_layers) return 0;
    for (k = 0; k < 12; ++k) {
        snprintf(want, sizeof want, "model.layers.%lld.%s.weight", l, base[k]);
        if (strcmp(want, name) == 0) return 1;
    }
    /* a routed expert's linear, one tensor per expert */
    if ((sscanf(name + used, "mlp.experts.%lld.%n", &x, &u2) == 1 || sscanf(name + used, "block_sparse_moe.experts.%lld.%n", &x, &u2) == 1) &&
        u2 > 0 && x >= 0)
        return 1;
    return 0;
}

static int eng_bits_same(int a, int b) { return (eng_bits_on(a) ? a : 16) == (eng_bits_on(b) ? b : 16); }

/* The file's settings onto the engine's options; the caller's non-zero fields must agree. */
static quarot_result eng_packed_opts(const qx_packed_settings* st, int64_t head_dim, const qx_engine_opts* in, qx_engine_opts* o,
                                     const char* name, qx_err* e) {
    int kvq = eng_bits_on(st->k_bits);
    *o = *in;
    if (st->w_asym) {
        qx_err_set(e, "%s: asymmetric weights (quarot.weight.asymmetric 1): the engine's integer kernels take symmetric codes", name);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (eng_bits_on(st->a_bits) && (st->a_asym || st->a_group_size)) {
        qx_err_set(e, "%s: activations %s%s: the engine quantizes activations per token, symmetric", name,
                   st->a_asym ? "asymmetric" : "", st->a_group_size ? (st->a_asym ? " in groups" : "in groups") : "");
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (!eng_bits_same(st->k_bits, st->v_bits) ||
        (kvq && (st->k_asym != st->v_asym || (st->k_group_size && st->k_group_size != head_dim) ||
                 (st->v_group_size && st->v_group_size != head_dim) || st->k_clip != 1.0 || st->v_clip != 1.0))) {
        qx_err_set(e, "%s: KV cache K %d bits / V %d bits (groups %lld / %lld, clip %g / %g): the engine stores K and V with the "
                      "same bits and symmetry, per head, unclipped", name, st->k_bits, st->v_bits, (long long)st->k_group_size,
                   (long long)st->v_group_size, st->k_clip, st->v_clip);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (in->hooks) {
        qx_err_set(e, "%s: the packed file carries its online hooks (quarot.online): give none", name);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
#define ENG_PK_AGREE(cond, what, mine, theirs)                                                                    \
    do {                                                                                                          \
        if (!(cond)) {                                                                                            \
            qx_err_set(e, "%s: %s %s contradicts the file's %s", name, what, mine, theirs);                      \
            return QUAROT_ERR_INVALID_ARGUMENT;                                                                   \
        }                                                                                                         \
    } while (0)
    {
        char a[64], b[64];
        snprintf(a, sizeof a, "%d", in->w_bits);
        snprintf(b, sizeof b, "quarot.weight.bits %d", st->w_bits);
        ENG_PK_AGREE(!in->w_bits || eng_bits_same(in->w_bits, st->w_bits), "weight bits", a, b);
        snprintf(a, sizeof a, "%lld", (long long)in->w_group);
        snprintf(b, sizeof b, "quarot.weight.group_size %lld", (long long)st->w_group_size);
        ENG_PK_AGREE(!in->w_group || in->w_group == st->w_group_size, "weight group", a, b);
        snprintf(a, sizeof a, "%d", in->a_bits);
        snprintf(b, sizeof b, "quarot.act.bits %d", st->a_bits);
        ENG_PK_AGREE(!in->a_bits || eng_bits_same(in->a_bits, st->a_bits), "activation bits", a, b);
        snprintf(a, sizeof a, "%g", (double)in->a_clip);
        snprintf(b, sizeof b, "quarot.act.clip_ratio %g", st->a_clip);
        ENG_PK_AGREE(in->a_clip == 0.0f || fabs((double)in->a_clip - st->a_clip) <= 1e-6, "activation clip", a, b);
        snprintf(a, sizeof a, "%d", in->kv_bits);
        snprintf(b, sizeof b, "quarot.k.bits %d", st->k_bits);
        ENG_PK_AGREE(!in->kv_bits || eng_bits_same(in->kv_bits, st->k_bits), "KV bits", a, b);
        ENG_PK_AGREE(!in->kv_sym || !kvq || !st->k_asym, "KV", "symmetric", "quarot.k.asymmetric 1");
    }
#undef ENG_PK_AGREE
    o->w_bits = st->w_bits;
    o->w_group = st->w_group_size;
    o->a_bits = st->a_bits;
    o->a_clip = (float)st->a_clip;
    o->kv_bits = st->k_bits;
    o->kv_sym = kvq ? !st->k_asym : 0;
    return QUAROT_OK;
}

quarot_result qx_engine_init_packed(qx_engine* en, const void* buf, size_t len, const char* name, const qx_engine_opts* o,
                                    qx_err* e) {
    qx_packed_file f;
    qx_store s;
    qx_engine_opts def, eo;
    quarot_result r;
    int64_t i, row, hd, n_dec = 0;
    char msg[256];
    if (!en) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(en, 0, sizeof *en);
    if (!name) name = "packed";
    if (!o) { memset(&def, 0, sizeof def); o = &def; }
    r = qx_packed_parse(buf, len, name, &f, e);
    if (r != QUAROT_OK) return r;
    qx_store_init(&s);
    r = qx_hf_config_parse(f.config_json, strlen(f.config_json), name, &s.config, e);
    if (r == QUAROT_OK) s.config.rope_interleaved = f.settings.rope_interleaved;
    for (i = 0; i < f.n_plain && r == QUAROT_OK; ++i) {
        const qx_packed_plain* P = &f.plain[i];
        r = qx_store_add(&s, P->name, P->dtype, P->n_dims, P->ne, P->data, NULL);
        if (r != QUAROT_OK) qx_err_set(e, "%s: tensor \"%s\": %s", name, P->name, quarot_result_string(r));
    }
    /* packed tensors that are not decoder linears (a quantized embedding or lm_head): their exact values */
    for (i = 0; i < f.n_lin && r == QUAROT_OK; ++i) {
        const qx_packed_linear* L = &f.lin[i];
        int64_t ne[2];
        quarot_tensor* t = NULL;
        if (strncmp(L->name, "model.layers.", 13) == 0) { ++n_dec; continue; }
        ne[0] = L->in;
        ne[1] = L->out;
        r = qx_store_add(&s, L->name, QUAROT_DTYPE_F32, 2, ne, NULL, &t);
        if (r != QUAROT_OK) { qx_err_set(e, "%s: tensor \"%s\": %s", name, L->name, quarot_result_string(r)); break; }
        for (row = 0; row < L->out; ++row) qx_packed_dequant_row(&f, L, row, (float*)t->data + row * L->in);
    }
    if (r == QUAROT_OK) {
        en->file_hooks = (quarot_online_list*)malloc(sizeof *en->file_hooks);
        if (!en->file_hooks) { qx_err_set(e, "%s: out of memory", name); r = QUAROT_ERR_OUT_OF_MEMORY; }
    }
    if (r == QUAROT_OK) {
        quarot_online_list_init(en->file_hooks, NULL);
        msg[0] = '\0';
        if (f.online[0]) r = quarot_online_read(en->file_hooks, f.online, strlen(f.online), msg, sizeof msg);   /* "": none */
        if (r != QUAROT_OK) qx_err_set(e, "%s: metadata quarot.online: %s", name, msg[0] ? msg : quarot_result_string(r));
    }
    hd = s.config.head_dim ? s.config.head_dim : (s.config.n_heads > 0 ? s.config.hidden / s.config.n_heads : 0);
    if (r == QUAROT_OK) r = eng_packed_opts(&f.settings, hd, o, &eo, name, e);
    if (r == QUAROT_OK) {
        eo.hooks = en->file_hooks->count ? en->file_hooks : NULL;
        en->pk = &f;
        r = eng_init(en, &s, &eo, e);   /* frees en on failure */
        en->pk = NULL;
    }
    if (r == QUAROT_OK && en->pk_used != n_dec) {
        for (i = 0; i < f.n_lin; ++i)
            if (strncmp(f.lin[i].name, "model.layers.", 13) == 0 && !eng_is_decoder_linear(f.lin[i].name, en->cfg.n_layers)) break;
        qx_err_set(e, "%s: packed tensor \"%s\" is not a decoder linear of this model (%lld layers)", name,
                   i < f.n_lin ? f.lin[i].name : "?", (long long)en->cfg.n_layers);
        r = QUAROT_ERR_SHAPE_MISMATCH;
    }
    if (r != QUAROT_OK) qx_engine_free(en);
    qx_store_free(&s);
    qx_packed_file_free(&f);
    return r;
}

int qx_engine_is_packed_file(const char* path) {
    unsigned char head[256];
    ssize_t n;
    int fd = -1;
    if (!path || qx_open_input(path, &fd, NULL) != QUAROT_OK) return 0;
    n = pread(fd, head, sizeof head, 0);
    close(fd);
    return n > 0 && qx_packed_sniff(head, (size_t)n);
}

quarot_result qx_engine_load_packed(qx_engine* en, const char* path, const qx_engine_opts* o, qx_err* e) {
    qx_map m;
    quarot_result r;
    if (!en || !path) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(en, 0, sizeof *en);
    r = qx_map_file(path, &m, e);
    if (r != QUAROT_OK) return r;
    qx_fault_truncate_inputs("engine");   /* tests: the file truncated while the engine reads it */
    r = qx_engine_init_packed(en, m.addr, m.len, path, o, e);
    qx_unmap(&m);
    return r;
}

quarot_result qx_engine_eval_packed(const char* path, const qx_windows* w, const quarot_env* env, qx_ppl_result* res, qx_err* e) {
    qx_engine en;
    qx_engine_opts o;
    quarot_result r;
    if (!path || !w || !res) { qx_err_set(e, "engine eval: bad arguments"); return QUAROT_ERR_INVALID_ARGUMENT; }
    memset(&o, 0, sizeof o);
    o.context = w->max_len;
    o.max_tokens = w->max_len;
    o.env = env;
    r = qx_engine_load_packed(&en, path, &o, e);
    if (r != QUAROT_OK) return r;
    r = qx_engine_eval(&en, w, res, e);
    qx_engine_free(&en);
    return r;
}
