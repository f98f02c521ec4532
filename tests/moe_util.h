/* moe_util.h - a small mixture-of-experts model held in memory and a forward pass over it, written
   here independently of the tool's code (tests/test_moe.c, tests/test_moe_fwd.c): synthetic Mixtral,
   Qwen2-MoE (a shared expert with a sigmoid gate, dense and MoE layers mixed by sparse_step and
   mlp_only_layers) and Qwen3-MoE, with the experts as one tensor each (Hugging Face) or as 3-D
   tensors [n_experts][out][in] (GGUF). The forward: RMSNorm, causal attention (RoPE in HF's halves
   layout when m->rope is set), softmax routing over the router logits, top 2 of 4 (ties to the lower
   index), renormalization where the config says, SiLU experts, the online hooks; one token at a
   time, matrix-vector products in double. Include after quarot.h and qt.h. */
#ifndef MOE_UTIL_H
#define MOE_UTIL_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    int rope;                                  /* 1: RoPE on q and k (HF halves, theta 10000), as the tool runs;
                                                  0: none (rotation invariance holds either way) */
    const int32_t* tokens;                     /* SEQ token ids, NULL: (7 t + 3) mod vocab */
} mt_model;

QT_UNUSED static mt_tensor* mt_find(mt_model* m, const char* name) {
    int i;
    for (i = 0; i < m->count; ++i)
        if (strcmp(m->items[i].name, name) == 0) return &m->items[i];
    return NULL;
}

QT_UNUSED static float* mt_new(mt_model* m, const char* name, int64_t ne0, int64_t ne1, int64_t ne2) {
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

QT_UNUSED static float* mt_get(mt_model* m, const char* name) {
    mt_tensor* it = mt_find(m, name);
    return it ? (float*)it->t.data : NULL;
}

QT_UNUSED static void mt_free(mt_model* m) {
    int i;
    for (i = 0; i < m->count; ++i) free(m->items[i].t.data);
    m->count = 0;
}

QT_UNUSED static quarot_result mt_get_tensor(void* u, const char* name, quarot_tensor* out) {
    mt_tensor* it = mt_find((mt_model*)u, name);
    if (!it) return QUAROT_ERR_NOT_FOUND;
    *out = it->t;
    return QUAROT_OK;
}

QT_UNUSED static quarot_result mt_create(void* u, const char* name, quarot_dtype dt, int n_dims, const int64_t* ne,
                               quarot_tensor* out) {
    mt_model* m = (mt_model*)u;
    if (dt != QUAROT_DTYPE_F32 || m->count >= MAXT) return QUAROT_ERR_UNSUPPORTED;
    mt_new(m, name, ne[0], n_dims > 1 ? ne[1] : 1, 1);
    *out = m->items[m->count - 1].t;
    return QUAROT_OK;
}

QT_UNUSED static void fill(float* x, int64_t n, double scale) {
    int64_t i;
    for (i = 0; i < n; ++i) x[i] = (float)(qt_normal() * scale);
}

/* names */
QT_UNUSED static void nm(char* out, const char* fmt, int layer) { snprintf(out, QUAROT_NAME_MAX, fmt, layer); }
QT_UNUSED static void nme(char* out, const char* fmt, int layer, int e) { snprintf(out, QUAROT_NAME_MAX, fmt, layer, e); }

typedef enum { FAM_MIXTRAL, FAM_QWEN2, FAM_QWEN3 } family;

QT_UNUSED static const int64_t qwen2_dense[1] = {3};
QT_UNUSED static int g_mlp_only = 1;
QT_UNUSED static int g_all_moe = 0;    /* 1: Qwen2-MoE without dense layers (llama.cpp's qwen2moe has none) */   /* 0: Qwen2-MoE's layer 3 is MoE too (the tool refuses a non-empty mlp_only_layers) */

/* hidden 32, 4 heads (2 KV) of 8, vocab 48, 3 layers, 4 experts of 16 (top 2); Qwen2-MoE: 4 layers,
   a shared expert of 24, sparse_step 2 and mlp_only_layers {3} (layer 1 MoE; 0, 2, 3 dense of 40). */
QT_UNUSED static void mt_build(mt_model* m, family fam, int stacked, unsigned long long seed) {
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

/* mt_build with every layer MoE (g_all_moe for this one build: llama.cpp's layout). */
QT_UNUSED static void mt_build_all_moe(mt_model* m, family fam, int stacked, unsigned long long seed) {
    g_all_moe = 1;
    mt_build(m, fam, stacked, seed);
    g_all_moe = 0;
}

/* ---- forward pass ------------------------------------------------------------------------------ */

/* y[out] = W[out][in] x[in] */
QT_UNUSED static void matvec(const float* w, const float* x, int64_t in, int64_t out, float* y) {
    int64_t o, i;
    for (o = 0; o < out; ++o) {
        double s = 0.0;
        for (i = 0; i < in; ++i) s += (double)w[o * in + i] * x[i];
        y[o] = (float)s;
    }
}

QT_UNUSED static void rmsnorm(const float* x, const float* g, int64_t n, float* y) {
    double s = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) s += (double)x[i] * x[i];
    s = 1.0 / sqrt(s / (double)n + 1e-5);
    for (i = 0; i < n; ++i) y[i] = (float)(x[i] * s * (g ? g[i] : 1.0f));
}

QT_UNUSED static float silu(float v) { return v / (1.0f + expf(-v)); }

QT_UNUSED static int hook(const quarot_online_list* hooks, int layer, quarot_online_site site, float* x, int64_t* calls) {
    const quarot_online_hook* h = hooks ? quarot_online_find(hooks, layer, site) : NULL;
    char work[1 << 14];
    if (!h) return 1;
    ++*calls;
    return quarot_online_apply(h, x, 1, h->size, work, sizeof work) == QUAROT_OK;
}

/* gated MLP of inner width I: y = down(silu(gate x) * up x), with the hook before down */
QT_UNUSED static int mlp(const float* g, const float* u, const float* d, int64_t H, int64_t I, const float* x, float* y,
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
QT_UNUSED static int forward(mt_model* m, const quarot_online_list* hooks, float* logits, int* chosen, int64_t* calls) {
    const quarot_model_config* c = &m->cfg;
    const int64_t H = c->hidden, V = c->vocab, hd = 8, nh = 4, nkv = 2, E = 4;
    static float xs[SEQ][32], ks[SEQ][16], vs[SEQ][16];
    float xn[32], q[32], att[32], o[32], y[32], ye[32];
    char n[QUAROT_NAME_MAX];
    int l, t, s, h, e, k;
    *calls = 0;
    for (t = 0; t < SEQ; ++t)
        memcpy(xs[t], mt_get(m, "model.embed_tokens.weight") + (m->tokens ? m->tokens[t] : (t * 7 + 3) % V) * H, 32 * 4);
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
            if (m->rope) {   /* RoPE at position t, pairs (i, i + hd/2), angles in double */
                for (h = 0; h < nh + nkv; ++h) {
                    float* v = h < nh ? q + h * hd : ks[t] + (h - nh) * hd;
                    for (k = 0; k < hd / 2; ++k) {
                        const double ang = (double)t * pow(c->rope_theta > 0.0f ? (double)c->rope_theta : 10000.0,
                                                           -(double)(2 * k) / (double)hd);
                        const double a = v[k], bb = v[k + hd / 2];
                        v[k] = (float)(a * cos(ang) - bb * sin(ang));
                        v[k + hd / 2] = (float)(a * sin(ang) + bb * cos(ang));
                    }
                }
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

QT_UNUSED static quarot_model mt_binding(mt_model* m) {
    quarot_model qm;
    memset(&qm, 0, sizeof qm);
    qm.config = m->cfg;
    qm.user_data = m;
    qm.get_tensor = mt_get_tensor;
    qm.create_tensor = mt_create;
    return qm;
}

#endif
