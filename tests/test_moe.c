/* Mixture-of-experts layers in the header's processor (>>moe, >>processor_moe): synthetic Mixtral,
   Qwen2-MoE (a shared expert with a sigmoid gate, dense and MoE layers mixed by sparse_step and
   mlp_only_layers) and Qwen3-MoE models held in memory, with the experts as one tensor each (Hugging
   Face) or as 3-D tensors [n_experts][out][in] (GGUF). A small forward pass here (RMSNorm, causal
   attention, softmax routing over the router logits, top-k, renormalization where the family does,
   the online hooks) gives the logits before and after quarot_rotate_model, with and without online
   rotations: they agree within the bound the dense families meet in f32 (max |d logit| <= 2e-5 of
   max |logit|, tests/test_cli_rotate.c), and the same experts are chosen for every token. Bad
   shapes and counts are refused during validation, before anything is written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "model_util.h"
#include "formats/qx_gguf.h"

#define MAXT 160
#define SEQ 12

typedef struct mt_tensor {
    char name[QUAROT_NAME_MAX];
    quarot_tensor t;
} mt_tensor;

typedef struct mt_model {
    mt_tensor items[MAXT];
    int count;
    quarot_model_config cfg;
    const char* router;   /* name templates of the family, "%d" layer then expert */
    const char* eg, *eu, *ed, *sg, *su, *sd;   /* per expert */
    const char* stg, *stu, *std_;              /* stacked */
} mt_model;

static mt_tensor* mt_find(mt_model* m, const char* name) {
    int i;
    for (i = 0; i < m->count; ++i)
        if (strcmp(m->items[i].name, name) == 0) return &m->items[i];
    return NULL;
}

static float* mt_new(mt_model* m, const char* name, int64_t ne0, int64_t ne1, int64_t ne2) {
    mt_tensor* it = &m->items[m->count++];
    size_t n = (size_t)(ne0 * ne1 * ne2);
    snprintf(it->name, sizeof it->name, "%s", name);
    memset(&it->t, 0, sizeof it->t);
    it->t.dtype = QUAROT_DTYPE_F32;
    it->t.ne[0] = ne0; it->t.ne[1] = ne1; it->t.ne[2] = ne2; it->t.ne[3] = 1;
    it->t.nb[0] = 4; it->t.nb[1] = (size_t)ne0 * 4; it->t.nb[2] = (size_t)(ne0 * ne1) * 4;
    it->t.nb[3] = (size_t)(ne0 * ne1 * ne2) * 4;
    it->t.data = calloc(n, sizeof(float));
    return (float*)it->t.data;
}

static float* mt_get(mt_model* m, const char* name) {
    mt_tensor* it = mt_find(m, name);
    return it ? (float*)it->t.data : NULL;
}

static void mt_free(mt_model* m) {
    int i;
    for (i = 0; i < m->count; ++i) free(m->items[i].t.data);
    m->count = 0;
}

static quarot_result mt_get_tensor(void* u, const char* name, quarot_tensor* out) {
    mt_tensor* it = mt_find((mt_model*)u, name);
    if (!it) return QUAROT_ERR_NOT_FOUND;
    *out = it->t;
    return QUAROT_OK;
}

static quarot_result mt_create(void* u, const char* name, quarot_dtype dt, int n_dims, const int64_t* ne,
                               quarot_tensor* out) {
    mt_model* m = (mt_model*)u;
    if (dt != QUAROT_DTYPE_F32 || m->count >= MAXT) return QUAROT_ERR_UNSUPPORTED;
    mt_new(m, name, ne[0], n_dims > 1 ? ne[1] : 1, 1);
    *out = m->items[m->count - 1].t;
    return QUAROT_OK;
}

static void fill(float* x, int64_t n, double scale) {
    int64_t i;
    for (i = 0; i < n; ++i) x[i] = (float)(qt_normal() * scale);
}

/* names */
static void nm(char* out, const char* fmt, int layer) { snprintf(out, QUAROT_NAME_MAX, fmt, layer); }
static void nme(char* out, const char* fmt, int layer, int e) { snprintf(out, QUAROT_NAME_MAX, fmt, layer, e); }

typedef enum { FAM_MIXTRAL, FAM_QWEN2, FAM_QWEN3 } family;

static const int64_t qwen2_dense[1] = {3};
static int g_mlp_only = 1;
static int g_all_moe = 0;    /* 1: Qwen2-MoE without dense layers (llama.cpp's qwen2moe has none) */   /* 0: Qwen2-MoE's layer 3 is MoE too (the tool refuses a non-empty mlp_only_layers) */

/* hidden 32, 4 heads (2 KV) of 8, vocab 48, 3 layers, 4 experts of 16 (top 2); Qwen2-MoE: 4 layers,
   a shared expert of 24, sparse_step 2 and mlp_only_layers {3} (layer 1 MoE; 0, 2, 3 dense of 40). */
static void mt_build(mt_model* m, family fam, int stacked, unsigned long long seed) {
    quarot_model_config* c = &m->cfg;
    const int64_t H = 32, V = 48;
    char n[QUAROT_NAME_MAX];
    int l, e, k;
    memset(m, 0, sizeof *m);
    qt_seed(seed);
    snprintf(c->arch, sizeof c->arch, "%s", fam == FAM_MIXTRAL ? "mixtral" : fam == FAM_QWEN2 ? "qwen2_moe" : "qwen3_moe");
    c->hidden = H; c->intermediate = 40; c->n_layers = fam == FAM_QWEN2 ? 4 : 3; c->n_heads = 4; c->n_kv_heads = 2; c->head_dim = 8;
    c->vocab = V; c->max_seq = 64; c->norm_eps = 1e-5f;
    c->n_experts = 4; c->n_experts_used = 2; c->expert_intermediate = 16;
    c->norm_topk_prob = fam != FAM_QWEN2;
    c->attn_qkv_bias = fam == FAM_QWEN2;   /* as Qwen2MoeConfig / Qwen3MoeConfig have them */
    c->qk_norm = fam == FAM_QWEN3;
    if (fam == FAM_MIXTRAL) c->intermediate = 16;   /* MixtralConfig's intermediate_size is the experts' */
    c->experts_stacked = stacked;
    if (fam == FAM_QWEN2) {
        c->shared_intermediate = 24;
        c->sparse_step = g_all_moe ? 1 : 2;
        c->mlp_only_layers = g_mlp_only ? qwen2_dense : NULL;
        c->n_mlp_only_layers = g_mlp_only;
    }
    if (fam == FAM_MIXTRAL) {
        m->router = "model.layers.%d.block_sparse_moe.gate.weight";
        m->eg = "model.layers.%d.block_sparse_moe.experts.%d.w1.weight";
        m->eu = "model.layers.%d.block_sparse_moe.experts.%d.w3.weight";
        m->ed = "model.layers.%d.block_sparse_moe.experts.%d.w2.weight";
        m->stg = "model.layers.%d.block_sparse_moe.experts.w1.weight";
        m->stu = "model.layers.%d.block_sparse_moe.experts.w3.weight";
        m->std_ = "model.layers.%d.block_sparse_moe.experts.w2.weight";
    } else {
        m->router = "model.layers.%d.mlp.gate.weight";
        m->eg = "model.layers.%d.mlp.experts.%d.gate_proj.weight";
        m->eu = "model.layers.%d.mlp.experts.%d.up_proj.weight";
        m->ed = "model.layers.%d.mlp.experts.%d.down_proj.weight";
        m->stg = "model.layers.%d.mlp.experts.gate_proj.weight";
        m->stu = "model.layers.%d.mlp.experts.up_proj.weight";
        m->std_ = "model.layers.%d.mlp.experts.down_proj.weight";
    }
    {   /* embedding with LLM-like outlier channels */
        float* emb = mt_new(m, "model.embed_tokens.weight", H, V, 1);
        int64_t t;
        fill(emb, H * V, 0.5);
        for (t = 0; t < V; ++t) { emb[t * H + 3] *= 12.0f; emb[t * H + 17] *= 8.0f; }
    }
    fill(mt_new(m, "lm_head.weight", H, V, 1), H * V, 0.2);
    {
        float* g = mt_new(m, "model.norm.weight", H, 1, 1);
        for (k = 0; k < H; ++k) g[k] = (float)(1.0 + 0.3 * qt_normal());
    }
    for (l = 0; l < (int)c->n_layers; ++l) {
        const char* an[2] = {"model.layers.%d.input_layernorm.weight", "model.layers.%d.post_attention_layernorm.weight"};
        for (k = 0; k < 2; ++k) {
            float* g;
            nm(n, an[k], l);
            g = mt_new(m, n, H, 1, 1);
            for (e = 0; e < H; ++e) g[e] = (float)(1.0 + 0.3 * qt_normal());
        }
        nm(n, "model.layers.%d.self_attn.q_proj.weight", l); fill(mt_new(m, n, H, 32, 1), H * 32, 0.2);
        nm(n, "model.layers.%d.self_attn.k_proj.weight", l); fill(mt_new(m, n, H, 16, 1), H * 16, 0.2);
        nm(n, "model.layers.%d.self_attn.v_proj.weight", l); fill(mt_new(m, n, H, 16, 1), H * 16, 0.2);
        nm(n, "model.layers.%d.self_attn.o_proj.weight", l); fill(mt_new(m, n, 32, H, 1), H * 32, 0.2);
        if (c->attn_qkv_bias) {
            nm(n, "model.layers.%d.self_attn.q_proj.bias", l); fill(mt_new(m, n, 32, 1, 1), 32, 0.2);
            nm(n, "model.layers.%d.self_attn.k_proj.bias", l); fill(mt_new(m, n, 16, 1, 1), 16, 0.2);
            nm(n, "model.layers.%d.self_attn.v_proj.bias", l); fill(mt_new(m, n, 16, 1, 1), 16, 0.2);
        }
        if (c->qk_norm) {
            float* g;
            nm(n, "model.layers.%d.self_attn.q_norm.weight", l); g = mt_new(m, n, 8, 1, 1);
            for (e = 0; e < 8; ++e) g[e] = (float)(1.0 + 0.3 * qt_normal());
            nm(n, "model.layers.%d.self_attn.k_norm.weight", l); g = mt_new(m, n, 8, 1, 1);
            for (e = 0; e < 8; ++e) g[e] = (float)(1.0 + 0.3 * qt_normal());
        }
        if (!quarot_config_layer_is_moe(c, l)) {
            nm(n, "model.layers.%d.mlp.gate_proj.weight", l); fill(mt_new(m, n, H, 40, 1), H * 40, 0.2);
            nm(n, "model.layers.%d.mlp.up_proj.weight", l); fill(mt_new(m, n, H, 40, 1), H * 40, 0.2);
            nm(n, "model.layers.%d.mlp.down_proj.weight", l); fill(mt_new(m, n, 40, H, 1), H * 40, 0.2);
            continue;
        }
        nm(n, m->router, l); fill(mt_new(m, n, H, 4, 1), H * 4, 0.3);
        if (stacked) {
            nm(n, m->stg, l); fill(mt_new(m, n, H, 16, 4), H * 16 * 4, 0.2);
            nm(n, m->stu, l); fill(mt_new(m, n, H, 16, 4), H * 16 * 4, 0.2);
            nm(n, m->std_, l); fill(mt_new(m, n, 16, H, 4), H * 16 * 4, 0.2);
        } else {
            for (e = 0; e < 4; ++e) {
                nme(n, m->eg, l, e); fill(mt_new(m, n, H, 16, 1), H * 16, 0.2);
                nme(n, m->eu, l, e); fill(mt_new(m, n, H, 16, 1), H * 16, 0.2);
                nme(n, m->ed, l, e); fill(mt_new(m, n, 16, H, 1), H * 16, 0.2);
            }
        }
        if (c->shared_intermediate) {
            nm(n, "model.layers.%d.mlp.shared_expert.gate_proj.weight", l); fill(mt_new(m, n, H, 24, 1), H * 24, 0.2);
            nm(n, "model.layers.%d.mlp.shared_expert.up_proj.weight", l); fill(mt_new(m, n, H, 24, 1), H * 24, 0.2);
            nm(n, "model.layers.%d.mlp.shared_expert.down_proj.weight", l); fill(mt_new(m, n, 24, H, 1), H * 24, 0.2);
            nm(n, "model.layers.%d.mlp.shared_expert_gate.weight", l); fill(mt_new(m, n, H, 1, 1), H, 0.3);
        }
    }
}

/* ---- forward pass ------------------------------------------------------------------------------ */

/* y[out] = W[out][in] x[in] */
static void matvec(const float* w, const float* x, int64_t in, int64_t out, float* y) {
    int64_t o, i;
    for (o = 0; o < out; ++o) {
        double s = 0.0;
        for (i = 0; i < in; ++i) s += (double)w[o * in + i] * x[i];
        y[o] = (float)s;
    }
}

static void rmsnorm(const float* x, const float* g, int64_t n, float* y) {
    double s = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) s += (double)x[i] * x[i];
    s = 1.0 / sqrt(s / (double)n + 1e-5);
    for (i = 0; i < n; ++i) y[i] = (float)(x[i] * s * (g ? g[i] : 1.0f));
}

static float silu(float v) { return v / (1.0f + expf(-v)); }

static int hook(const quarot_online_list* hooks, int layer, quarot_online_site site, float* x, int64_t* calls) {
    const quarot_online_hook* h = hooks ? quarot_online_find(hooks, layer, site) : NULL;
    char work[1 << 14];
    if (!h) return 1;
    ++*calls;
    return quarot_online_apply(h, x, 1, h->size, work, sizeof work) == QUAROT_OK;
}

/* gated MLP of inner width I: y = down(silu(gate x) * up x), with the hook before down */
static int mlp(const float* g, const float* u, const float* d, int64_t H, int64_t I, const float* x, float* y,
               const quarot_online_list* hooks, int layer, quarot_online_site site, int64_t* calls) {
    float a[64], b[64];
    int64_t i;
    matvec(g, x, H, I, a);
    matvec(u, x, H, I, b);
    for (i = 0; i < I; ++i) a[i] = silu(a[i]) * b[i];
    if (!hook(hooks, layer, site, a, calls)) return 0;
    matvec(d, a, I, H, y);
    return 1;
}

/* Logits [SEQ][vocab] and the chosen experts [layer][token][2] (-1 in dense layers). */
static int forward(mt_model* m, const quarot_online_list* hooks, float* logits, int* chosen, int64_t* calls) {
    const quarot_model_config* c = &m->cfg;
    const int64_t H = c->hidden, V = c->vocab, hd = 8, nh = 4, nkv = 2, E = 4;
    static float xs[SEQ][32], ks[SEQ][16], vs[SEQ][16];
    float xn[32], q[32], att[32], o[32], y[32], ye[32];
    char n[QUAROT_NAME_MAX];
    int l, t, s, h, e, k;
    *calls = 0;
    for (t = 0; t < SEQ; ++t) memcpy(xs[t], mt_get(m, "model.embed_tokens.weight") + ((t * 7 + 3) % V) * H, 32 * 4);
    for (l = 0; l < (int)c->n_layers; ++l) {
        const int moe = quarot_config_layer_is_moe(c, l);
        float *wq, *wk, *wv, *wo;
        nm(n, "model.layers.%d.self_attn.q_proj.weight", l); wq = mt_get(m, n);
        nm(n, "model.layers.%d.self_attn.k_proj.weight", l); wk = mt_get(m, n);
        nm(n, "model.layers.%d.self_attn.v_proj.weight", l); wv = mt_get(m, n);
        nm(n, "model.layers.%d.self_attn.o_proj.weight", l); wo = mt_get(m, n);
        for (t = 0; t < SEQ; ++t) {
            nm(n, "model.layers.%d.input_layernorm.weight", l);
            rmsnorm(xs[t], mt_get(m, n), H, xn);
            matvec(wq, xn, H, 32, q);
            matvec(wk, xn, H, 16, ks[t]);
            matvec(wv, xn, H, 16, vs[t]);
            if (c->attn_qkv_bias) {
                const float *bq, *bk, *bv;
                nm(n, "model.layers.%d.self_attn.q_proj.bias", l); bq = mt_get(m, n);
                nm(n, "model.layers.%d.self_attn.k_proj.bias", l); bk = mt_get(m, n);
                nm(n, "model.layers.%d.self_attn.v_proj.bias", l); bv = mt_get(m, n);
                for (k = 0; k < 32; ++k) q[k] += bq[k];
                for (k = 0; k < 16; ++k) { ks[t][k] += bk[k]; vs[t][k] += bv[k]; }
            }
            if (c->qk_norm) {   /* per-head RMSNorm of q and k */
                nm(n, "model.layers.%d.self_attn.q_norm.weight", l);
                for (h = 0; h < nh; ++h) rmsnorm(q + h * hd, mt_get(m, n), hd, q + h * hd);
                nm(n, "model.layers.%d.self_attn.k_norm.weight", l);
                for (h = 0; h < nkv; ++h) rmsnorm(ks[t] + h * hd, mt_get(m, n), hd, ks[t] + h * hd);
            }
            for (h = 0; h < nh; ++h) {   /* causal attention of head h over tokens 0..t */
                const int kv = h / (int)(nh / nkv);
                double sc[SEQ], mx = -1e30, den = 0.0;
                int64_t j;
                for (s = 0; s <= t; ++s) {
                    double d = 0.0;
                    for (j = 0; j < hd; ++j) d += (double)q[h * hd + j] * ks[s][kv * hd + j];
                    sc[s] = d / sqrt((double)hd);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (s = 0; s <= t; ++s) { sc[s] = exp(sc[s] - mx); den += sc[s]; }
                for (j = 0; j < hd; ++j) {
                    double a = 0.0;
                    for (s = 0; s <= t; ++s) a += sc[s] / den * vs[s][kv * hd + j];
                    att[h * hd + j] = (float)a;
                }
            }
            if (!hook(hooks, l, QUAROT_SITE_O_INPUT, att, calls)) return 0;
            matvec(wo, att, 32, H, o);
            for (k = 0; k < H; ++k) xs[t][k] += o[k];
            nm(n, "model.layers.%d.post_attention_layernorm.weight", l);
            rmsnorm(xs[t], mt_get(m, n), H, xn);
            chosen[(l * SEQ + t) * 2] = chosen[(l * SEQ + t) * 2 + 1] = -1;
            if (!moe) {
                float *g, *u, *d;
                nm(n, "model.layers.%d.mlp.gate_proj.weight", l); g = mt_get(m, n);
                nm(n, "model.layers.%d.mlp.up_proj.weight", l); u = mt_get(m, n);
                nm(n, "model.layers.%d.mlp.down_proj.weight", l); d = mt_get(m, n);
                if (!mlp(g, u, d, H, 40, xn, y, hooks, l, QUAROT_SITE_DOWN_INPUT, calls)) return 0;
            } else {
                float rl[4];
                double p[4], mx = -1e30, den = 0.0, wsum;
                int top[2];
                nm(n, m->router, l);
                matvec(mt_get(m, n), xn, H, E, rl);
                for (e = 0; e < E; ++e) if (rl[e] > mx) mx = rl[e];
                for (e = 0; e < E; ++e) { p[e] = exp(rl[e] - mx); den += p[e]; }
                for (e = 0; e < E; ++e) p[e] /= den;
                top[0] = 0;
                for (e = 1; e < E; ++e) if (p[e] > p[top[0]]) top[0] = e;
                top[1] = top[0] == 0 ? 1 : 0;
                for (e = 0; e < E; ++e) if (e != top[0] && p[e] > p[top[1]]) top[1] = e;
                wsum = c->norm_topk_prob ? p[top[0]] + p[top[1]] : 1.0;
                memset(y, 0, sizeof y);
                for (k = 0; k < 2; ++k) {
                    const float *g, *u, *d;
                    int64_t j;
                    e = top[k];
                    chosen[(l * SEQ + t) * 2 + k] = e;
                    if (c->experts_stacked) {
                        nm(n, m->stg, l); g = mt_get(m, n) + e * 16 * H;
                        nm(n, m->stu, l); u = mt_get(m, n) + e * 16 * H;
                        nm(n, m->std_, l); d = mt_get(m, n) + e * 16 * H;
                    } else {
                        nme(n, m->eg, l, e); g = mt_get(m, n);
                        nme(n, m->eu, l, e); u = mt_get(m, n);
                        nme(n, m->ed, l, e); d = mt_get(m, n);
                    }
                    if (!mlp(g, u, d, H, 16, xn, ye, hooks, l, QUAROT_SITE_EXPERT_DOWN_INPUT, calls)) return 0;
                    for (j = 0; j < H; ++j) y[j] += (float)(p[e] / wsum) * ye[j];
                }
                if (c->shared_intermediate) {
                    const float *g, *u, *d;
                    float gl;
                    int64_t j;
                    nm(n, "model.layers.%d.mlp.shared_expert.gate_proj.weight", l); g = mt_get(m, n);
                    nm(n, "model.layers.%d.mlp.shared_expert.up_proj.weight", l); u = mt_get(m, n);
                    nm(n, "model.layers.%d.mlp.shared_expert.down_proj.weight", l); d = mt_get(m, n);
                    if (!mlp(g, u, d, H, 24, xn, ye, hooks, l, QUAROT_SITE_SHARED_DOWN_INPUT, calls)) return 0;
                    nm(n, "model.layers.%d.mlp.shared_expert_gate.weight", l);
                    matvec(mt_get(m, n), xn, H, 1, &gl);
                    for (j = 0; j < H; ++j) y[j] += (float)(1.0 / (1.0 + exp(-(double)gl))) * ye[j];
                }
            }
            for (k = 0; k < H; ++k) xs[t][k] += y[k];
        }
    }
    for (t = 0; t < SEQ; ++t) {
        rmsnorm(xs[t], mt_get(m, "model.norm.weight"), H, xn);
        matvec(mt_get(m, "lm_head.weight"), xn, H, V, logits + t * V);
    }
    return 1;
}

/* ---- tests ------------------------------------------------------------------------------------- */

static quarot_model mt_binding(mt_model* m) {
    quarot_model qm;
    memset(&qm, 0, sizeof qm);
    qm.config = m->cfg;
    qm.user_data = m;
    qm.get_tensor = mt_get_tensor;
    qm.create_tensor = mt_create;
    return qm;
}

static void test_moe_invariance(void) {
    static const char* const fams[3] = {"mixtral", "qwen2_moe", "qwen3_moe"};
    int f, stacked, online;
    for (f = 0; f < 3; ++f)
        for (stacked = 0; stacked < 2; ++stacked)
            for (online = 0; online < 2; ++online) {
                static mt_model m;
                float la[SEQ * 48], lb[SEQ * 48];
                int ca[4 * SEQ * 2], cb[4 * SEQ * 2];
                int64_t calls_a, calls_b, i, flips = 0, routed = 0;
                double diff = 0.0, amax = 0.0;
                quarot_model qm;
                quarot_rotate_desc d;
                quarot_online_list hooks;
                quarot_result r;
                mt_build(&m, (family)f, stacked, 11u + (unsigned)f);
                QT_CHECK(forward(&m, NULL, la, ca, &calls_a));
                qm = mt_binding(&m);
                memset(&d, 0, sizeof d);
                d.seed = 5;
                d.online = online;
                quarot_online_list_init(&hooks, NULL);
                d.online_out = &hooks;
                r = quarot_rotate_model(&qm, &d);
                QT_CHECKF(r == QUAROT_OK, "%s: %s", fams[f], qm.error);
                QT_CHECK(forward(&m, online ? &hooks : NULL, lb, cb, &calls_b));
                for (i = 0; i < SEQ * 48; ++i) {
                    if (fabs((double)la[i] - lb[i]) > diff) diff = fabs((double)la[i] - lb[i]);
                    if (fabs((double)la[i]) > amax) amax = fabs((double)la[i]);
                }
                for (i = 0; i < m.cfg.n_layers * SEQ * 2; ++i) { flips += ca[i] != cb[i]; routed += ca[i] >= 0; }
                diff /= amax;
                QT_CHECKF(diff <= 2e-5, "%s %s%s: logits differ by %.3g of the largest", fams[f],
                          stacked ? "3-D" : "per expert", online ? " --online" : "", diff);
                QT_CHECKF(flips == 0, "%s: %lld routing flips", fams[f], (long long)flips);
                if (online) {
                    const quarot_online_hook* h = quarot_online_find(&hooks, 1, QUAROT_SITE_EXPERT_DOWN_INPUT);
                    QT_CHECK(h && h->experts == 4 && h->size == 16);
                    QT_CHECK(calls_b > 0);
                    QT_CHECK((f == 1) == (quarot_online_find(&hooks, 1, QUAROT_SITE_SHARED_DOWN_INPUT) != NULL));
                    QT_CHECK((f == 1) == (quarot_online_find(&hooks, 0, QUAROT_SITE_DOWN_INPUT) != NULL));
                    QT_CHECK((f == 1) == (quarot_online_find(&hooks, 3, QUAROT_SITE_DOWN_INPUT) != NULL));
                    QT_CHECK(quarot_online_find(&hooks, 3, QUAROT_SITE_EXPERT_DOWN_INPUT) == NULL);
                    QT_CHECK(quarot_online_find(&hooks, 1, QUAROT_SITE_DOWN_INPUT) == NULL);
                }
                printf("    %-9s %-10s %-8s logits max rel diff %.2e (bound 2e-5), routing flips %lld of %lld\n",
                       fams[f], stacked ? "3-D" : "per expert", online ? "--online" : "offline", diff,
                       (long long)flips, (long long)routed);
                quarot_online_list_free(&hooks);
                mt_free(&m);
            }
}

/* A rotation that forgets the routed experts' R4 (the hook without its offline half, or an expert's
   down_proj left out) changes the logits: the check above can fail. */
static int skip_expert_down(void* u, const quarot_command* c) {
    (void)u;
    return c->rotation == QUAROT_ROT_R4_EXPERT && strstr(c->weight, "experts.2.") != NULL;
}

static void test_moe_check_can_fail(void) {
    static mt_model m;
    float la[SEQ * 48], lb[SEQ * 48];
    int ca[4 * SEQ * 2], cb[4 * SEQ * 2];
    int64_t ka, kb, i;
    double diff = 0.0;
    quarot_model qm;
    quarot_rotate_desc d;
    quarot_online_list hooks;
    mt_build(&m, FAM_QWEN3, 0, 3);
    QT_CHECK(forward(&m, NULL, la, ca, &ka));
    qm = mt_binding(&m);
    memset(&d, 0, sizeof d);
    d.online = 1;
    quarot_online_list_init(&hooks, NULL);
    d.online_out = &hooks;
    d.on_command = skip_expert_down;
    QT_CHECK(quarot_rotate_model(&qm, &d) != QUAROT_OK);   /* the exactly-once check */
    QT_CHECK(forward(&m, &hooks, lb, cb, &kb));
    for (i = 0; i < SEQ * 48; ++i)
        if (fabs((double)la[i] - lb[i]) > diff) diff = fabs((double)la[i] - lb[i]);
    QT_CHECKF(diff > 1e-3, "a skipped expert R4 went unnoticed (%.3g)", diff);
    quarot_online_list_free(&hooks);
    mt_free(&m);
}

/* Bad input: refused in validation with the tensor named, nothing written. */
static void test_moe_bad_input(void) {
    int k;
    for (k = 0; k < 5; ++k) {
        static mt_model m;
        quarot_model qm;
        quarot_rotate_desc d;
        quarot_result r;
        float before;
        const char* expect;
        mt_build(&m, k == 4 ? FAM_QWEN2 : FAM_MIXTRAL, k == 3, 7);
        before = mt_get(&m, "model.layers.0.self_attn.q_proj.weight")[0];
        qm = mt_binding(&m);
        switch (k) {
            case 0:   /* config says 5 experts, the tensors hold 4 */
                qm.config.n_experts = 5;
                expect = "block_sparse_moe.gate.weight";
                break;
            case 1:   /* top-k larger than the experts */
                qm.config.n_experts_used = 5;
                expect = "experts used";
                break;
            case 2: { /* a missing expert tensor */
                mt_tensor* t = mt_find(&m, "model.layers.1.block_sparse_moe.experts.3.w2.weight");
                snprintf(t->name, sizeof t->name, "renamed");
                expect = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
                break;
            }
            case 3: { /* a 3-D expert tensor with the wrong expert count */
                mt_tensor* t = mt_find(&m, "model.layers.0.block_sparse_moe.experts.w1.weight");
                t->t.ne[2] = 3;
                expect = "model.layers.0.block_sparse_moe.experts.w1.weight";
                break;
            }
            default: { /* a router of the wrong shape (Qwen2-MoE's layer 1) */
                mt_tensor* t = mt_find(&m, "model.layers.1.mlp.gate.weight");
                t->t.ne[1] = 3;
                expect = "model.layers.1.mlp.gate.weight";
                break;
            }
        }
        memset(&d, 0, sizeof d);
        r = quarot_rotate_model(&qm, &d);
        QT_CHECKF(r != QUAROT_OK && strstr(qm.error, expect) != NULL, "case %d: %s (%s)", k, qm.error,
                  quarot_result_string(r));
        QT_CHECK(mt_get(&m, "model.layers.0.self_attn.q_proj.weight")[0] == before);
        printf("    refused: %s\n", qm.error);
        mt_free(&m);
    }
}

/* The hook file names the experts a hook covers, and reads back. */
static void test_moe_hook_file(void) {
    quarot_online_list a, b;
    size_t need = 0;
    char* text;
    char err[200];
    quarot_online_list_init(&a, NULL);
    quarot_online_list_init(&b, NULL);
    QT_OK(quarot_online_list_add(&a, 1, QUAROT_SITE_EXPERT_DOWN_INPUT, 16, 1, 16, 1, NULL));
    a.hooks[0].experts = 4;
    QT_OK(quarot_online_list_add(&a, 1, QUAROT_SITE_SHARED_DOWN_INPUT, 24, 1, 24, 1, NULL));
    QT_OK(quarot_online_write(&a, NULL, 0, &need));
    text = (char*)malloc(need);
    QT_OK(quarot_online_write(&a, text, need, &need));
    QT_CHECK(strstr(text, "hook 1 expert_down_input size=16 outer=1 n=16 inner=1 K=1 m=4 experts=4 signs=-") != NULL);
    QT_CHECK(strstr(text, "hook 1 shared_down_input size=24") != NULL);
    QT_OK(quarot_online_read(&b, text, strlen(text), err, sizeof err));
    QT_CHECK(b.count == 2 && b.hooks[0].experts == 4 && b.hooks[1].experts == 0);
    quarot_online_list_free(&b);
    quarot_online_list_init(&b, NULL);
    {   /* without the count: refused */
        char* p = strstr(text, " experts=4");
        memmove(p, p + 10, strlen(p + 10) + 1);
        QT_CHECK(quarot_online_read(&b, text, strlen(text), err, sizeof err) == QUAROT_ERR_PARSE);
    }
    free(text);
    quarot_online_list_free(&a);
    quarot_online_list_free(&b);
}

/* ---- the tool: quarot rotate on a Hugging Face directory ----------------------------------------- */

/* m's tensors and config saved as a safetensors directory (config.json generated by the tool) or,
   gguf = 1, as a GGUF file (keys generated from the config, llama.cpp's tensor names). */
static int mt_save(mt_model* m, const char* dir, int gguf) {
    qx_store s;
    qx_st_save_opts so;
    qx_err e;
    quarot_result r = QUAROT_OK;
    int i;
    qx_store_init(&s);
    s.config = m->cfg;
    for (i = 0; i < m->count && r == QUAROT_OK; ++i) {
        const quarot_tensor* t = &m->items[i].t;
        int nd = t->ne[2] > 1 ? 3 : t->ne[1] > 1 ? 2 : 1;
        r = qx_store_add(&s, m->items[i].name, QUAROT_DTYPE_F32, nd, t->ne, t->data, NULL);
    }
    memset(&so, 0, sizeof so);
    so.force = 1;
    if (r == QUAROT_OK && gguf) {
        qx_gguf_save_opts go;
        memset(&go, 0, sizeof go);
        go.force = 1;
        r = qx_gguf_save(&s, dir, &go, &e);
    } else if (r == QUAROT_OK) {
        r = qx_st_save(&s, dir, &so, &e);
    }
    if (r != QUAROT_OK) printf("    save %s: %s\n", dir, e.msg);
    qx_store_free(&s);
    return r == QUAROT_OK;
}

/* The tensors of the model file at path into m (whose names and config it keeps). */
static int mt_load(mt_model* m, const char* path) {
    qx_store s;
    int i;
    if (!load_model(path, &s)) return 0;
    for (i = 0; i < m->count; ++i) {
        const quarot_tensor* t = qx_store_find(&s, m->items[i].name);
        int64_t n = m->items[i].t.ne[0] * m->items[i].t.ne[1] * m->items[i].t.ne[2];
        if (!t || t->dtype != QUAROT_DTYPE_F32 || quarot_tensor_nelements(t) != n) {
            printf("    %s: tensor %s missing or changed\n", path, m->items[i].name);
            qx_store_free(&s);
            return 0;
        }
        memcpy(m->items[i].t.data, t->data, (size_t)n * sizeof(float));
    }
    qx_store_free(&s);
    return 1;
}

static void test_cli_moe_rotate(void) {
    static const char* const fams[3] = {"mixtral", "qwen2_moe", "qwen3_moe"};
    int f, online, gguf;
    g_mlp_only = 0;
    for (gguf = 0; gguf < 2; ++gguf)
    for (f = gguf; f < 3; ++f)   /* GGUF: qwen2moe and qwen3moe (a llama GGUF with experts is refused) */
        for (online = 0; online < 2; ++online) {
            static mt_model m;
            float la[SEQ * 48], lb[SEQ * 48];
            int ca[4 * SEQ * 2], cb[4 * SEQ * 2];
            int64_t calls, i, flips = 0;
            double diff = 0.0, amax = 0.0;
            char in[512], out[512], hooks[600];
            quarot_online_list l;
            int ok;
            g_all_moe = gguf;
            mt_build(&m, (family)f, gguf, 40u + (unsigned)f);
            g_all_moe = 0;
            QT_CHECK(forward(&m, NULL, la, ca, &calls));
            snprintf(in, sizeof in, "%s/%s_in%s", g_tmp, fams[f], gguf ? ".gguf" : "");
            snprintf(out, sizeof out, "%s/%s_out%d%s", g_tmp, fams[f], online, gguf ? ".gguf" : "");
            if (gguf) snprintf(hooks, sizeof hooks, "%s.quarot-online", out);
            else snprintf(hooks, sizeof hooks, "%s/quarot_online.txt", out);
            if (!mt_save(&m, in, gguf)) { QT_CHECK(0); mt_free(&m); continue; }
            QT_EQ_INT(CLI("rotate %s %s %s", in, out, online ? "--online" : ""), 0);
            if (online) {   /* the summary counts one expert hook per MoE layer */
                char want[64];
                int64_t n_moe = 0, L;
                for (L = 0; L < m.cfg.n_layers; ++L) n_moe += quarot_config_layer_is_moe(&m.cfg, L);
                snprintf(want, sizeof want, "expert_down_input %lld, shared_down_input %lld", (long long)n_moe,
                         (long long)(f == 1 ? n_moe : 0));
                QT_CHECKF(strstr(g_out, want) != NULL, "%s", g_out);
            }
            if (gguf && !online) {   /* quantize keeps the MoE tensors and says so; eval refuses MoE by name */
                QT_EQ_INT(CLI("quantize %s %s/q%d.gguf --quiet", in, g_tmp, f), 0);
                QT_CHECKF(strstr(g_out, "mixture-of-experts tensors not quantized") != NULL &&
                          strstr(g_out, "MoE gate, not quantized") != NULL, "%s", g_out);
                QT_CHECK(write_str(tmp_path("toks.txt"), "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18\n"));
                QT_CHECK(CLI("eval %s --tokens %s --seq-len 8", in, tmp_path("toks.txt")) != 0);
                QT_CHECKF(strstr(g_err, "mixture-of-experts") != NULL, "%s", g_err);
            }
            ok = mt_load(&m, out);
            QT_CHECK(ok);
            quarot_online_list_init(&l, NULL);
            if (ok && online) ok = load_hooks(hooks, &l);
            QT_CHECK(ok);
            if (ok) QT_CHECK(forward(&m, online ? &l : NULL, lb, cb, &calls));
            for (i = 0; ok && i < SEQ * 48; ++i) {
                if (fabs((double)la[i] - lb[i]) > diff) diff = fabs((double)la[i] - lb[i]);
                if (fabs((double)la[i]) > amax) amax = fabs((double)la[i]);
            }
            for (i = 0; ok && i < m.cfg.n_layers * SEQ * 2; ++i) flips += ca[i] != cb[i];
            diff = ok ? diff / amax : 1e30;
            QT_CHECKF(diff <= 2e-5 && flips == 0, "%s%s: logits differ by %.3g, %lld routing flips", fams[f],
                      online ? " --online" : "", diff, (long long)flips);
            printf("    quarot rotate %-11s %-9s %-8s logits max rel diff %.2e, routing flips %lld\n",
                   gguf ? "GGUF 3-D" : "safetensors", fams[f], online ? "--online" : "", diff, (long long)flips);
            quarot_online_list_free(&l);
            mt_free(&m);
        }
    g_mlp_only = 1;
}

/* Bad input through the tool: exit code 2, one line naming what is wrong, nothing written. */
static void test_cli_moe_bad_input(void) {
    static mt_model m;
    char in[512], out[512], cfg[600];
    int k;
    g_mlp_only = 0;
    for (k = 0; k < 3; ++k) {
        const char* expect;
        mt_build(&m, k == 2 ? FAM_QWEN2 : FAM_MIXTRAL, 0, 9);
        snprintf(in, sizeof in, "%s/bad%d", g_tmp, k);
        snprintf(out, sizeof out, "%s/bad%d_out", g_tmp, k);
        if (k == 0) {   /* the config counts 5 experts, the tensors 4 */
            m.cfg.n_experts = 5;
            expect = "model.layers.0.block_sparse_moe.gate.weight";
        } else if (k == 1) {   /* top-k larger than the experts */
            m.cfg.n_experts_used = 6;
            expect = "num_experts_per_tok";
        } else {   /* a missing expert tensor */
            mt_tensor* t = mt_find(&m, "model.layers.1.mlp.experts.2.up_proj.weight");
            snprintf(t->name, sizeof t->name, "model.layers.1.mlp.unused.weight");
            expect = "model.layers.1.mlp.experts.2.up_proj.weight";
        }
        QT_CHECK(mt_save(&m, in, 0));
        if (k == 1) {   /* the tool's config writer keeps top-k <= experts: write the bad key by hand */
            size_t n = 0;
            char* text;
            char* p;
            snprintf(cfg, sizeof cfg, "%s/config.json", in);
            text = (char*)read_all(cfg, &n);
            p = text ? strstr(text, "\"num_experts_per_tok\": 6") : NULL;
            QT_CHECK(p != NULL);
            free(text);
        }
        QT_EQ_INT(CLI("rotate %s %s", in, out), 2);
        QT_CHECKF(strstr(g_err, expect) != NULL && count_lines(g_err) == 1, "case %d: %s", k, g_err);
        QT_CHECK(access(out, F_OK) != 0);
        printf("    refused: %s", g_err);
        mt_free(&m);
    }
    g_mlp_only = 1;
}

int main(int argc, char** argv) {
    (void)argc;
    QT_RUN(test_moe_invariance);
    QT_RUN(test_moe_check_can_fail);
    QT_RUN(test_moe_bad_input);
    QT_RUN(test_moe_hook_file);
    if (!cu_start(argv[0], "test_moe")) return 1;
    QT_RUN(test_cli_moe_rotate);
    QT_RUN(test_cli_moe_bad_input);
    cu_finish();
    return qt_finish("test_moe");
}
