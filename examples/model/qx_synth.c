/* qx_synth.c - see qx_synth.h. Every number comes from one quarot_rng stream in a fixed order, so a
   seed names a model. */
#include "model/qx_synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct qx__family {
    const char* arch;
    int64_t hidden, intermediate, n_layers, n_heads, n_kv_heads, head_dim;
    int tied;
    int64_t n_experts, n_experts_used, expert_intermediate, shared_intermediate;
} qx__family;

/* Family defaults: sizes chosen to cover GQA, head_dim * n_heads != hidden (qwen3, qwen3_moe), and
   intermediate sizes 320 = 20*16, 172 = 172*1, 192 = 12*16, 96 = 12*8, 48 = 12*4. */
static const qx__family qx__families[] = {
    {"llama", 128, 320, 3, 8, 2, 16, -1, 0, 0, 0, 0},
    {"qwen2", 64, 172, 2, 4, 2, 16, 1, 0, 0, 0, 0},
    {"qwen3", 128, 192, 2, 4, 2, 64, -1, 0, 0, 0, 0},
    {"opt", 64, 96, 2, 4, 4, 16, 1, 0, 0, 0, 0},
    {"phi3", 96, 160, 2, 4, 2, 24, -1, 0, 0, 0, 0},          /* fused q|k|v (192 rows) and gate|up (320 rows) */
    {"mixtral", 64, 96, 2, 4, 2, 16, -1, 4, 2, 96, 0},       /* experts as wide as intermediate_size */
    {"qwen2_moe", 64, 172, 2, 4, 2, 16, -1, 4, 2, 32, 64},   /* 172: dense layers (sparse_step > 1) */
    {"qwen3_moe", 64, 192, 2, 4, 2, 32, -1, 8, 2, 48, 0},
    {"qwen2vl", 64, 172, 2, 4, 2, 16, 1, 0, 0, 0, 0},        /* qwen2's decoder and a vision side */
};
#define QX__N_FAMILIES ((int)(sizeof qx__families / sizeof qx__families[0]))
#define QX__N_LISTED 4   /* qx_synth_family: the dense families with separate projections */

const char* qx_synth_family(int i) { return i >= 0 && i < QX__N_LISTED ? qx__families[i].arch : NULL; }
const char* qx_synth_any_family(int i) { return i >= 0 && i < QX__N_FAMILIES ? qx__families[i].arch : NULL; }

/* Zero fields take the family's value; then every size is checked (the caps keep the store small
   enough that no size computation below can overflow). */
quarot_result qx_synth_resolve(qx_synth_desc* d, qx_err* e) {
    const qx__family* fam = NULL;
    int i;
    if (!d) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!d->arch) d->arch = "llama";
    for (i = 0; i < QX__N_FAMILIES; ++i)
        if (strcmp(d->arch, qx__families[i].arch) == 0) fam = &qx__families[i];
    if (!fam) {
        qx_err_set(e, "qx_synth: unknown family \"%s\" (llama, qwen2, qwen3, opt, phi3, mixtral, qwen2_moe, "
                   "qwen3_moe, qwen2vl)", d->arch);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (!d->hidden) d->hidden = fam->hidden;
    if (!d->intermediate) d->intermediate = fam->intermediate;
    if (!d->n_layers) d->n_layers = fam->n_layers;
    if (!d->n_heads) d->n_heads = fam->n_heads;
    if (!d->n_kv_heads) d->n_kv_heads = fam->n_kv_heads > d->n_heads ? d->n_heads : fam->n_kv_heads;
    if (!d->head_dim) d->head_dim = fam->head_dim;
    if (!d->vocab) d->vocab = 256;
    if (!d->max_seq) d->max_seq = 128;
    if (!d->tied) d->tied = fam->tied;
    if (!d->n_outliers) d->n_outliers = 2;
    if (d->outlier_scale == 0.0f) d->outlier_scale = 16.0f;
    if (d->dtype == QUAROT_DTYPE_DEFAULT) d->dtype = QUAROT_DTYPE_F32;
    if (fam->n_experts > 0) {
        if (!d->n_experts) d->n_experts = fam->n_experts;
        if (!d->n_experts_used) d->n_experts_used = fam->n_experts_used > d->n_experts ? d->n_experts : fam->n_experts_used;
        if (strcmp(d->arch, "mixtral") == 0) {
            if (!d->expert_intermediate) d->expert_intermediate = d->intermediate;
        } else if (!d->expert_intermediate) {
            d->expert_intermediate = fam->expert_intermediate;
        }
        if (!d->shared_intermediate) d->shared_intermediate = fam->shared_intermediate;
        if (!d->sparse_step) d->sparse_step = 1;
        if (d->n_experts < 1 || d->n_experts > 256 || d->n_experts_used < 1 || d->n_experts_used > d->n_experts ||
            d->expert_intermediate < 2 || d->expert_intermediate > 262144 || d->n_outliers > d->expert_intermediate / 2 ||
            (strcmp(d->arch, "mixtral") == 0 && d->expert_intermediate != d->intermediate) ||
            (strcmp(d->arch, "qwen2_moe") == 0 ? d->shared_intermediate < 2 || d->shared_intermediate > 262144 ||
                                                     d->n_outliers > d->shared_intermediate / 2
                                               : d->shared_intermediate != 0) ||
            d->sparse_step < 1 || (d->sparse_step > 1 && strcmp(d->arch, "qwen2_moe") != 0) || d->experts_stacked < 0 ||
            d->experts_stacked > 1) {
            qx_err_set(e, "qx_synth: bad expert sizes for %s", d->arch);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    } else if (d->n_experts || d->n_experts_used || d->expert_intermediate || d->shared_intermediate || d->sparse_step ||
               d->experts_stacked) {
        qx_err_set(e, "qx_synth: %s has no experts (mixtral, qwen2_moe, qwen3_moe do)", d->arch);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (d->hidden <= 0 || d->intermediate <= 0 || d->n_layers <= 0 || d->n_heads <= 0 || d->n_kv_heads <= 0 ||
        d->head_dim <= 0 || d->head_dim % 2 || d->n_heads % d->n_kv_heads || d->vocab <= 0 || d->max_seq <= 0 ||
        d->hidden > 65536 || d->intermediate > 262144 || d->vocab > 1000000 || d->n_layers > 1024 ||
        d->n_heads * d->head_dim > 65536 || d->max_seq > 1000000 || d->n_outliers > d->hidden / 2 ||
        d->n_outliers > d->intermediate / 2 || !(d->outlier_scale >= 1.0f) ||
        (d->dtype != QUAROT_DTYPE_F32 && d->dtype != QUAROT_DTYPE_F16 && d->dtype != QUAROT_DTYPE_BF16)) {
        qx_err_set(e, "qx_synth: bad sizes for %s", d->arch);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (strcmp(d->arch, "qwen2vl") == 0 && d->head_dim < 8) {   /* three positive M-RoPE sections */
        qx_err_set(e, "qx_synth: qwen2vl needs head_dim >= 8 (M-RoPE's three sections of head_dim / 2)");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

/* Generator state: the rng, the store being filled, the outlier channel masks. */
typedef struct qx__gen {
    quarot_rng rng;
    qx_store* s;
    const qx_synth_desc* d;
    unsigned char* out_h;   /* [hidden] 1 = outlier residual channel */
    unsigned char* out_i;   /* [intermediate] 1 = outlier intermediate channel */
    unsigned char* out_e;   /* [expert_intermediate] of the expert being drawn */
    unsigned char* out_s;   /* [shared_intermediate] */
    qx_err* e;
} qx__gen;

static float qx__normal(qx__gen* g) { return (float)quarot_rng_normal(&g->rng); }
static float qx__unif(qx__gen* g, float lo, float hi) { return lo + (hi - lo) * (float)quarot_rng_uniform(&g->rng); }

/* Add a zeroed f32 tensor [rows][cols] (rows == 0: a vector [cols]); *out points at its data. */
static quarot_result qx__add(qx__gen* g, const char* name, int64_t rows, int64_t cols, float** out) {
    int64_t ne[2];
    quarot_tensor* t;
    quarot_result r;
    ne[0] = cols;
    ne[1] = rows;
    r = qx_store_add(g->s, name, QUAROT_DTYPE_F32, rows ? 2 : 1, ne, NULL, &t);
    if (r != QUAROT_OK) {
        qx_err_set(g->e, "qx_synth: %s: %s", name, quarot_result_string(r));
        return r;
    }
    *out = (float*)t->data;
    return QUAROT_OK;
}

/* Linear W[rows][cols] ~ N(0, (std/sqrt(cols))^2), columns in col_mask scaled by col_scale, rows in
   row_mask scaled by row_scale; optional bias [rows] ~ N(0, bias_std^2). */
static quarot_result qx__linear(qx__gen* g, const char* base, int64_t rows, int64_t cols, float std,
                                const unsigned char* col_mask, float col_scale, const unsigned char* row_mask,
                                float row_scale, float bias_std) {
    char name[256];
    float* w;
    int64_t i, j;
    quarot_result r;
    float sd = std / sqrtf((float)cols);
    snprintf(name, sizeof name, "%s.weight", base);
    r = qx__add(g, name, rows, cols, &w);
    if (r != QUAROT_OK) return r;
    for (i = 0; i < rows; ++i)
        for (j = 0; j < cols; ++j) {
            float v = sd * qx__normal(g);
            if (col_mask && col_mask[j]) v *= col_scale;
            if (row_mask && row_mask[i]) v *= row_scale;
            w[i * cols + j] = v;
        }
    if (bias_std > 0.0f) {
        snprintf(name, sizeof name, "%s.bias", base);
        r = qx__add(g, name, 0, rows, &w);
        if (r != QUAROT_OK) return r;
        for (i = 0; i < rows; ++i) w[i] = bias_std * qx__normal(g);
    }
    return QUAROT_OK;
}

/* Norm gain [n] ~ scale * U(0.5, 1.5) (entries in mask multiplied by mask_scale), bias ~ N(0, 0.1^2)
   when asked. */
static quarot_result qx__norm(qx__gen* g, const char* base, int64_t n, float scale, const unsigned char* mask,
                              float mask_scale, int bias) {
    char name[256];
    float* w;
    int64_t i;
    quarot_result r;
    snprintf(name, sizeof name, "%s.weight", base);
    r = qx__add(g, name, 0, n, &w);
    if (r != QUAROT_OK) return r;
    for (i = 0; i < n; ++i) {
        w[i] = scale * qx__unif(g, 0.5f, 1.5f);
        if (mask && mask[i]) w[i] *= mask_scale;
    }
    if (!bias) return QUAROT_OK;
    snprintf(name, sizeof name, "%s.bias", base);
    r = qx__add(g, name, 0, n, &w);
    if (r != QUAROT_OK) return r;
    for (i = 0; i < n; ++i) w[i] = 0.1f * qx__normal(g);
    return QUAROT_OK;
}

/* Mark k distinct random channels of n. */
/* (rejection sampling: k <= n/2, so it ends quickly) */
static void qx__pick(qx__gen* g, unsigned char* mask, int64_t n, int64_t k) {
    int64_t c = 0;
    memset(mask, 0, (size_t)n);
    while (c < k) {
        int64_t i = (int64_t)(quarot_rng_u64(&g->rng) % (uint64_t)n);
        if (!mask[i]) { mask[i] = 1; ++c; }
    }
}

/* phi3: the rows of layer l's parts[0..n) (f32, built separately) concatenated into one tensor `fused`. */
static quarot_result qx__fuse(qx_store* s, int64_t l, const char* const* parts, int n, const char* fused) {
    char name[160];
    int64_t rows = 0, cols = 0, off = 0, ne[2];
    float* buf;
    quarot_result r;
    int k;
    for (k = 0; k < n; ++k) {
        const quarot_tensor* t;
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, parts[k]);
        if (!(t = qx_store_find(s, name))) return QUAROT_ERR_INTERNAL;
        rows += t->ne[1];
        cols = t->ne[0];
    }
    if (!(buf = (float*)malloc((size_t)(rows * cols) * sizeof(float)))) return QUAROT_ERR_OUT_OF_MEMORY;
    for (k = 0; k < n; ++k) {
        const quarot_tensor* t;
        snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, parts[k]);
        t = qx_store_find(s, name);
        memcpy(buf + off, t->data, (size_t)(t->ne[0] * t->ne[1]) * sizeof(float));
        off += t->ne[0] * t->ne[1];
        qx_store_remove(s, name);
    }
    snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, fused);
    ne[0] = cols;
    ne[1] = rows;
    r = qx_store_add(s, name, QUAROT_DTYPE_F32, 2, ne, buf, NULL);
    free(buf);
    return r;
}

/* The n experts' tensors "<pre>experts.<x>.<proj>.weight" of one projection, removed and stored as
   one 3-D tensor "<pre>experts.<proj>.weight" [n][rows][cols] (experts in order). */
static quarot_result qx__stack(qx_store* s, const char* pre, const char* proj, int64_t n) {
    char name[200];
    int64_t rows = 0, cols = 0, x, ne[3];
    size_t one = 0;
    float* buf = NULL;
    quarot_result r;
    for (x = 0; x < n; ++x) {
        const quarot_tensor* t;
        snprintf(name, sizeof name, "%sexperts.%lld.%s.weight", pre, (long long)x, proj);
        if (!(t = qx_store_find(s, name))) { free(buf); return QUAROT_ERR_INTERNAL; }
        if (!buf) {
            cols = t->ne[0];
            rows = t->ne[1];
            one = (size_t)(rows * cols);
            if (!(buf = (float*)malloc(one * (size_t)n * sizeof(float)))) return QUAROT_ERR_OUT_OF_MEMORY;
        }
        memcpy(buf + (size_t)x * one, t->data, one * sizeof(float));
        qx_store_remove(s, name);
    }
    snprintf(name, sizeof name, "%sexperts.%s.weight", pre, proj);
    ne[0] = cols;
    ne[1] = rows;
    ne[2] = n;
    r = qx_store_add(s, name, QUAROT_DTYPE_F32, 3, ne, buf, NULL);
    free(buf);
    return r;
}

/* A gated MLP of width I reading the normed stream: gate/up columns of the hidden outliers 1/S,
   rows of the intermediate outliers (mask mi, drawn here) 4x, down_proj's matching columns 1/16. */
static quarot_result qx__gated(qx__gen* g, const char* pre, const char* const pj[3], int64_t I, unsigned char* mi) {
    char base[200];
    quarot_result r;
    int k;
    if (g->d->n_outliers > 0) qx__pick(g, mi, I, g->d->n_outliers);
    else memset(mi, 0, (size_t)I);
    for (k = 0; k < 2; ++k) {
        snprintf(base, sizeof base, "%s%s", pre, pj[k]);
        if ((r = qx__linear(g, base, I, g->d->hidden, 1.0f, g->out_h, 1.0f / g->d->outlier_scale, mi, 4.0f, 0.0f)) !=
            QUAROT_OK)
            return r;
    }
    snprintf(base, sizeof base, "%s%s", pre, pj[2]);
    return qx__linear(g, base, g->d->hidden, I, 1.0f, mi, 1.0f / 16.0f, NULL, 1.0f, 0.0f);
}

/* Layer l's MoE MLP: router, experts 0 .. n-1, then the shared expert and its gate (qwen2_moe). */
static quarot_result qx__moe(qx__gen* g, int64_t l) {
    static const char* const mix[3] = {"w1", "w3", "w2"};
    static const char* const hf[3] = {"gate_proj", "up_proj", "down_proj"};
    const qx_synth_desc* d = g->d;
    const int mixtral = strcmp(d->arch, "mixtral") == 0;
    const char* const* pj = mixtral ? mix : hf;
    const float inv_s = 1.0f / d->outlier_scale;
    char pre[160], base[200];
    quarot_result r;
    int64_t x;
    int k;
    snprintf(pre, sizeof pre, "model.layers.%lld.%s.", (long long)l, mixtral ? "block_sparse_moe" : "mlp");
    snprintf(base, sizeof base, "%sgate", pre);
    if ((r = qx__linear(g, base, d->n_experts, d->hidden, 1.0f, g->out_h, inv_s, NULL, 1.0f, 0.0f)) != QUAROT_OK) return r;
    for (x = 0; x < d->n_experts; ++x) {
        snprintf(base, sizeof base, "%sexperts.%lld.", pre, (long long)x);
        if ((r = qx__gated(g, base, pj, d->expert_intermediate, g->out_e)) != QUAROT_OK) return r;
    }
    if (d->shared_intermediate > 0) {
        snprintf(base, sizeof base, "%sshared_expert.", pre);
        if ((r = qx__gated(g, base, hf, d->shared_intermediate, g->out_s)) != QUAROT_OK) return r;
        snprintf(base, sizeof base, "%sshared_expert_gate", pre);
        if ((r = qx__linear(g, base, 1, d->hidden, 1.0f, g->out_h, inv_s, NULL, 1.0f, 0.0f)) != QUAROT_OK) return r;
    }
    for (k = 0; k < 3 && d->experts_stacked; ++k)
        if ((r = qx__stack(g->s, pre, pj[k], d->n_experts)) != QUAROT_OK) {
            qx_err_set(g->e, "qx_synth: stacking layer %lld's experts: %s", (long long)l, quarot_result_string(r));
            return r;
        }
    return QUAROT_OK;
}

/* Qwen2-VL's vision side: the 5-D patch embedding, the merger's LayerNorm and linears (mlp.2 writes
   the text stream: [hidden][64]), and config.json of the older layout. */
static quarot_result qx__vision(qx__gen* g) {
    static const int64_t patch[5] = {16, 3, 2, 4, 4};
    const qx_synth_desc* d = g->d;
    const quarot_model_config* c = &g->s->config;
    const int64_t half = d->head_dim / 2, sec_hw = half * 3 / 8;
    int64_t ne[QUAROT_MAX_DIMS], i;
    quarot_tensor* t;
    quarot_result r;
    char cfg[1400];
    int n;
    qx_shape_fold(5, patch, ne);
    if ((r = qx_store_add(g->s, "visual.patch_embed.proj.weight", QUAROT_DTYPE_F32, 4, ne, NULL, &t)) != QUAROT_OK ||
        (r = qx_store_set_shape(g->s, "visual.patch_embed.proj.weight", 5, patch)) != QUAROT_OK) {
        qx_err_set(g->e, "qx_synth: visual.patch_embed.proj.weight: %s", quarot_result_string(r));
        return r;
    }
    for (i = 0; i < quarot_tensor_nelements(t); ++i) ((float*)t->data)[i] = qx__normal(g) / sqrtf(96.0f);
    if ((r = qx__norm(g, "visual.merger.ln_q", 16, 1.0f, NULL, 1.0f, 1)) != QUAROT_OK ||
        (r = qx__linear(g, "visual.merger.mlp.0", 64, 64, 1.0f, NULL, 1.0f, NULL, 1.0f, 0.1f)) != QUAROT_OK ||
        (r = qx__linear(g, "visual.merger.mlp.2", d->hidden, 64, 1.0f, NULL, 1.0f, NULL, 1.0f, 0.1f)) != QUAROT_OK)
        return r;
    n = snprintf(cfg, sizeof cfg,
                 "{\n  \"architectures\": [\"Qwen2VLForConditionalGeneration\"],\n  \"model_type\": \"qwen2_vl\",\n"
                 "  \"hidden_size\": %lld,\n  \"intermediate_size\": %lld,\n  \"num_hidden_layers\": %lld,\n"
                 "  \"num_attention_heads\": %lld,\n  \"num_key_value_heads\": %lld,\n  \"vocab_size\": %lld,\n"
                 "  \"max_position_embeddings\": %lld,\n  \"rms_norm_eps\": 1e-06,\n  \"rope_theta\": 1000000.0,\n"
                 "  \"hidden_act\": \"silu\",\n  \"tie_word_embeddings\": %s,\n"
                 "  \"rope_scaling\": {\"type\": \"mrope\", \"mrope_section\": [%lld, %lld, %lld]},\n"
                 "  \"vision_config\": {\"depth\": 0, \"embed_dim\": 16, \"hidden_size\": %lld, \"in_chans\": 3, "
                 "\"patch_size\": 4, \"spatial_merge_size\": 2, \"temporal_patch_size\": 2}\n}\n",
                 (long long)c->hidden, (long long)c->intermediate, (long long)c->n_layers, (long long)c->n_heads,
                 (long long)c->n_kv_heads, (long long)c->vocab, (long long)c->max_seq,
                 c->tied_embeddings ? "true" : "false", (long long)(half - 2 * sec_hw), (long long)sec_hw,
                 (long long)sec_hw, (long long)c->hidden);
    if (n < 0 || (size_t)n >= sizeof cfg) return QUAROT_ERR_INTERNAL;
    if ((r = qx_store_set_blob(g->s, "hf.config.json", cfg, (size_t)n)) != QUAROT_OK)
        qx_err_set(g->e, "qx_synth: config.json: %s", quarot_result_string(r));
    return r;
}

static quarot_result qx__build(qx__gen* g) {
    const qx_synth_desc* d = g->d;
    quarot_model_config* c = &g->s->config;
    int opt = strcmp(d->arch, "opt") == 0;
    int gated = !opt;
    int64_t h = d->hidden, I = d->intermediate, qd = d->n_heads * d->head_dim, kvd = d->n_kv_heads * d->head_dim;
    int64_t l, v;
    float S = d->outlier_scale;
    /* gate and up rows of outlier intermediate channels are scaled by 4: the product grows ~16x
       (gated) or 4x (plain); down_proj's matching columns shrink by the same factor */
    float up_boost = 4.0f, down_shrink = gated ? 1.0f / 16.0f : 1.0f / 4.0f;
    float qkv_bias = strncmp(d->arch, "qwen2", 5) == 0 ? 0.3f : (opt ? 0.1f : 0.0f);
    float mlp_bias = opt ? 0.1f : 0.0f;
    const char* pre = opt ? "model.decoder.layers." : "model.layers.";
    char name[160], base[160];
    float* w;
    quarot_result r;

    /* config: what each family's loader would report (OPT: LayerNorm, ReLU plain MLP, biases
       everywhere; Qwen: eps 1e-6 and theta 1e6; qwen2 q/k/v biases; qwen3 q/k norms) */
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "%s", d->arch);
    c->hidden = h;
    c->intermediate = I;
    c->n_layers = d->n_layers;
    c->n_heads = d->n_heads;
    c->n_kv_heads = d->n_kv_heads;
    c->head_dim = d->head_dim;
    c->vocab = d->vocab;
    c->max_seq = d->max_seq;
    c->norm = opt ? QUAROT_NORM_LAYER : QUAROT_NORM_RMS;
    c->mlp = opt ? QUAROT_MLP_PLAIN : QUAROT_MLP_GATED;
    c->act = opt ? QUAROT_ACT_RELU : QUAROT_ACT_SILU;
    c->norm_eps = strncmp(d->arch, "qwen", 4) == 0 ? 1e-6f : 1e-5f;
    c->rope_theta = strncmp(d->arch, "qwen", 4) == 0 ? 1000000.0f : 10000.0f;
    c->rope_interleaved = d->rope_interleaved;
    c->tied_embeddings = d->tied > 0;
    c->attn_qkv_bias = qkv_bias > 0.0f;
    c->attn_out_bias = opt;
    c->mlp_bias = opt;
    c->qk_norm = strncmp(d->arch, "qwen3", 5) == 0;
    c->n_experts = d->n_experts;
    c->n_experts_used = d->n_experts_used;
    c->expert_intermediate = d->expert_intermediate;
    c->shared_intermediate = d->shared_intermediate;
    c->norm_topk_prob = d->n_experts > 0 && strcmp(d->arch, "qwen2_moe") != 0;   /* as the loaders set it */
    c->sparse_step = d->sparse_step;
    c->experts_stacked = d->experts_stacked;

    /* outlier channels are drawn first, so a seed fixes them independently of the sizes after */
    if (d->n_outliers > 0) {
        qx__pick(g, g->out_h, h, d->n_outliers);
        qx__pick(g, g->out_i, I, d->n_outliers);
    }

    /* token embedding N(0, 1) */
    r = qx__add(g, opt ? "model.decoder.embed_tokens.weight" : "model.embed_tokens.weight", d->vocab, h, &w);
    if (r != QUAROT_OK) return r;
    for (v = 0; v < d->vocab * h; ++v) w[v] = qx__normal(g);
    if (opt) {   /* learned positions, rows p + 2; N(0, 0.5^2) */
        r = qx__add(g, "model.decoder.embed_positions.weight", d->max_seq + 2, h, &w);
        if (r != QUAROT_OK) return r;
        for (v = 0; v < (d->max_seq + 2) * h; ++v) w[v] = 0.5f * qx__normal(g);
    }

    for (l = 0; l < d->n_layers; ++l) {
        /* Hidden outliers live in the norm gains: channel c of a norm output is S times larger, and
           the weight columns reading channel c are S times smaller, so the function is that of an
           outlier-free model while every q/k/v and gate/up input carries the outliers. Norm fusion
           (W <- W diag(g)) then removes them exactly, and a rotation sees an ordinary model. */
        snprintf(name, sizeof name, "%s%lld.%s", pre, (long long)l, opt ? "self_attn_layer_norm" : "input_layernorm");
        if ((r = qx__norm(g, name, h, 1.0f, g->out_h, S, opt)) != QUAROT_OK) return r;
        snprintf(base, sizeof base, "%s%lld.self_attn.q_proj", pre, (long long)l);
        if ((r = qx__linear(g, base, qd, h, 1.0f, g->out_h, 1.0f / S, NULL, 1.0f, qkv_bias)) != QUAROT_OK) return r;
        snprintf(base, sizeof base, "%s%lld.self_attn.k_proj", pre, (long long)l);
        if ((r = qx__linear(g, base, kvd, h, 1.0f, g->out_h, 1.0f / S, NULL, 1.0f, qkv_bias)) != QUAROT_OK) return r;
        snprintf(base, sizeof base, "%s%lld.self_attn.v_proj", pre, (long long)l);
        if ((r = qx__linear(g, base, kvd, h, 1.0f, g->out_h, 1.0f / S, NULL, 1.0f, qkv_bias)) != QUAROT_OK) return r;
        if (c->qk_norm) {
            snprintf(name, sizeof name, "%s%lld.self_attn.q_norm", pre, (long long)l);
            if ((r = qx__norm(g, name, d->head_dim, 1.0f, NULL, 1.0f, 0)) != QUAROT_OK) return r;
            snprintf(name, sizeof name, "%s%lld.self_attn.k_norm", pre, (long long)l);
            if ((r = qx__norm(g, name, d->head_dim, 1.0f, NULL, 1.0f, 0)) != QUAROT_OK) return r;
        }
        /* writers into the residual stream: std 1/sqrt(in) like the readers */
        snprintf(base, sizeof base, "%s%lld.self_attn.%s", pre, (long long)l, opt ? "out_proj" : "o_proj");
        if ((r = qx__linear(g, base, h, qd, 1.0f, NULL, 1.0f, NULL, 1.0f, opt ? 0.1f : 0.0f)) != QUAROT_OK) return r;
        snprintf(name, sizeof name, "%s%lld.%s", pre, (long long)l, opt ? "final_layer_norm" : "post_attention_layernorm");
        if ((r = qx__norm(g, name, h, 1.0f, g->out_h, S, opt)) != QUAROT_OK) return r;
        if (quarot_config_layer_is_moe(c, l)) {
            if ((r = qx__moe(g, l)) != QUAROT_OK) return r;
            continue;
        }
        if (gated) {
            snprintf(base, sizeof base, "%s%lld.mlp.gate_proj", pre, (long long)l);
            if ((r = qx__linear(g, base, I, h, 1.0f, g->out_h, 1.0f / S, g->out_i, up_boost, mlp_bias)) != QUAROT_OK) return r;
        }
        snprintf(base, sizeof base, "%s%lld.%s", pre, (long long)l, opt ? "fc1" : "mlp.up_proj");
        if ((r = qx__linear(g, base, I, h, 1.0f, g->out_h, 1.0f / S, g->out_i, up_boost, mlp_bias)) != QUAROT_OK) return r;
        snprintf(base, sizeof base, "%s%lld.%s", pre, (long long)l, opt ? "fc2" : "mlp.down_proj");
        if ((r = qx__linear(g, base, h, I, 1.0f, g->out_i, down_shrink, NULL, 1.0f, mlp_bias)) != QUAROT_OK) return r;
        if (strcmp(d->arch, "phi3") == 0) {   /* drawn as llama's, then stored fused as Phi-3 does */
            static const char* const qkv[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight",
                                               "self_attn.v_proj.weight"};
            static const char* const gu[2] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
            if ((r = qx__fuse(g->s, l, qkv, 3, "self_attn.qkv_proj.weight")) != QUAROT_OK ||
                (r = qx__fuse(g->s, l, gu, 2, "mlp.gate_up_proj.weight")) != QUAROT_OK) {
                qx_err_set(g->e, "qx_synth: fusing layer %lld: %s", (long long)l, quarot_result_string(r));
                return r;
            }
        }
    }
    /* final norm: ordinary gains (lm_head stays FP); with tied embeddings (entries N(0, 1)) the gains
       are 2/sqrt(hidden) smaller so that logits stay ~N(0, 4) */
    if ((r = qx__norm(g, opt ? "model.decoder.final_layer_norm" : "model.norm", h,
                      c->tied_embeddings ? 2.0f / sqrtf((float)h) : 1.0f, NULL, 1.0f, opt)) != QUAROT_OK)
        return r;
    /* untied lm_head: N(0, 4/hidden), so logits ~N(0, 4) from a final norm output of O(1) entries */
    if (!c->tied_embeddings) {
        float* lm;
        r = qx__add(g, "lm_head.weight", d->vocab, h, &lm);
        if (r != QUAROT_OK) return r;
        for (v = 0; v < d->vocab * h; ++v) lm[v] = qx__normal(g) * (2.0f / sqrtf((float)h));
    }
    return strcmp(d->arch, "qwen2vl") == 0 ? qx__vision(g) : QUAROT_OK;
}

quarot_result qx_synth_model(qx_store* s, const qx_synth_desc* desc, qx_err* e) {
    qx_synth_desc d;
    qx__gen g;
    quarot_result r;
    const char* a;
    uint64_t h = 1469598103934665603ULL;   /* FNV-1a of the family name, mixed into the seed */
    if (!s) return QUAROT_ERR_INVALID_ARGUMENT;
    qx_store_init(s);
    if (desc) d = *desc;
    else memset(&d, 0, sizeof d);
    r = qx_synth_resolve(&d, e);
    if (r != QUAROT_OK) return r;
    /* the family name is mixed into the seed so that seed 0 of two families are unrelated models */
    for (a = d.arch; *a; ++a) h = (h ^ (unsigned char)*a) * 1099511628211ULL;
    memset(&g, 0, sizeof g);
    quarot_rng_seed(&g.rng, d.seed ^ h);
    g.s = s;
    g.d = &d;
    g.e = e;
    g.out_h = (unsigned char*)calloc((size_t)d.hidden, 1);
    g.out_i = (unsigned char*)calloc((size_t)d.intermediate, 1);
    g.out_e = (unsigned char*)calloc((size_t)(d.expert_intermediate > 0 ? d.expert_intermediate : 1), 1);
    g.out_s = (unsigned char*)calloc((size_t)(d.shared_intermediate > 0 ? d.shared_intermediate : 1), 1);
    if (!g.out_h || !g.out_i || !g.out_e || !g.out_s) {
        r = QUAROT_ERR_OUT_OF_MEMORY;
        qx_err_set(e, "qx_synth: out of memory");
    } else {
        r = qx__build(&g);
    }
    free(g.out_h);
    free(g.out_i);
    free(g.out_e);
    free(g.out_s);
    /* generated in f32, then rounded (RNE) to the requested storage type */
    if (r == QUAROT_OK && d.dtype != QUAROT_DTYPE_F32) {
        r = qx_store_convert(s, d.dtype);
        if (r != QUAROT_OK) qx_err_set(e, "qx_synth: conversion to %s: %s", quarot_dtype_name(d.dtype), quarot_result_string(r));
    }
    if (r != QUAROT_OK) qx_store_free(s);
    return r;
}
