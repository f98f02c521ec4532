/* The trainer's loss and its gradients with respect to R1 and every layer's R2 (quarot.h
   >>train_model) against a double-precision reference written here.

   The reference (ref_loss) computes the same loss from the model's tensors naively, per token and
   per head, in double, with the rotations as plain matrices where quarot_rotate_model folds them:
   E <- E R1, readers W <- W diag(g) R1, v_proj per KV head W <- R2^T W (b <- b R2), o_proj W <- R1^T W
   (I (x) R2) (H_heads (x) I), down_proj W <- R1^T W H4, lm_head W <- W diag(g_final) R1, with the
   online transforms on the activations (dense normalized Hadamard matrices) and R3 on q and k after
   RoPE. Every entry of R1 and of each R2 is differentiated by central differences of the reference
   in double (h = 1e-6: error ~1e-10), at a random orthogonal point (not QuaRot's start, so nothing
   relies on the Hadamard structure), and compared with the trainer's float gradients:
       max |analytic - fd| <= 1e-5 * max |fd|   over all of R1, and over all R2 entries
   (float rounding in the GEMMs and norms leaves 3e-7 .. 1.3e-6; under QT_QUICK every 7th entry). The losses agree to 1e-6 relative. Families:
   llama (GQA, both RoPE layouts), llama with the online hooks and R3, qwen2 (q/k/v biases, tied
   embeddings), qwen3 (per-head q/k norms), and the mixture-of-experts families, whose reference
   routes each token in double (softmax over the experts, top K, renormalized for mixtral and
   qwen3_moe) and runs the chosen experts and the shared expert with its sigmoid gate: mixtral,
   qwen2_moe (a dense layer, the shared expert, online R4 per expert) and qwen3_moe (3-D experts);
   and phi3, whose fused q|k|v and gate|up weights the reference splits by rows.
   The trainer holds the routing fixed; a token whose routing changed inside a difference would
   show up as a gradient error, so the bound also says none did at these points. Activation quantization is off here (the quantized loss
   is piecewise constant; its straight-through gradient is checked for finiteness and closeness to
   the FP gradient at 8 bits). */
#include "quarot.h"
#include "support/qx_store.h"
#include "model/qx_model.h"
#include "model/qx_synth.h"
#include "qt.h"

#define GRAD_TOL 1e-5

typedef struct ref {
    const qx_store* s;
    int64_t h, I, nh, nkv, hd, V, L, qd, kvd;
    int64_t E, K, ei, si;        /* mixture of experts (E 0: dense) */
    int norm_topk, mixtral, stacked;
    int fused;                   /* phi3: q|k|v and gate|up in one weight each */
    double *h4e, *h4s;           /* R4 of the expert and shared widths */
    int il, online, r3, qkn, tied;
    double eps, theta;
    int64_t g_heads, n4, n3;
    double *hh, *h4, *h3;        /* dense normalized Hadamard blocks */
} ref;

static double* get64(const qx_store* s, const char* name, int64_t* n) {
    const quarot_tensor* t = qx_store_find(s, name);
    int64_t r, rows, cols;
    double* d;
    if (!t) return NULL;
    rows = quarot_tensor_nrows(t);
    cols = t->ne[0];
    d = (double*)malloc((size_t)(rows * cols) * sizeof(double));
    for (r = 0; r < rows; ++r) quarot_tensor_get_row_f64(t, r, d + r * cols);
    if (n) *n = rows * cols;
    return d;
}

static double* layer64(const ref* m, int64_t l, const char* suffix) {
    char name[160];
    snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, suffix);
    return get64(m->s, name, NULL);
}

/* c[m][n] = a[m][k] b[k][n] (ta: a stored [k][m]; tb: b stored [n][k]) */
static void mm(const double* a, const double* b, double* c, int64_t m, int64_t n, int64_t k, int ta, int tb) {
    int64_t i, j, p;
    for (i = 0; i < m; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (p = 0; p < k; ++p) s += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
            c[i * n + j] = s;
        }
}

static void rms64(double* x, int64_t n, const double* g, double eps) {
    double ss = 0.0, inv;
    int64_t i;
    for (i = 0; i < n; ++i) ss += x[i] * x[i];
    inv = 1.0 / sqrt(ss / (double)n + eps);
    for (i = 0; i < n; ++i) x[i] *= inv * (g ? g[i] : 1.0);
}

/* v <- v * blockdiag(H) over blocks of b (per block: y_j = sum_i v_i H[i][j]) */
static void blocks_times(double* v, int64_t n, const double* H, int64_t b) {
    double tmp[512];
    int64_t o, i, j;
    for (o = 0; o < n / b; ++o) {
        for (j = 0; j < b; ++j) {
            double s = 0.0;
            for (i = 0; i < b; ++i) s += v[o * b + i] * H[i * b + j];
            tmp[j] = s;
        }
        memcpy(v + o * b, tmp, (size_t)b * sizeof(double));
    }
}

/* the heads transform on [nh][hd]: per block of g heads, v_i <- sum_k v_k H[k][i] for every column */
static void heads_times(double* v, int64_t nh, int64_t hd, const double* H, int64_t g) {
    double tmp[1024];
    int64_t o, i, k, d;
    for (o = 0; o < nh / g; ++o) {
        for (i = 0; i < g; ++i)
            for (d = 0; d < hd; ++d) {
                double s = 0.0;
                for (k = 0; k < g; ++k) s += v[(o * g + k) * hd + d] * H[k * g + i];
                tmp[i * hd + d] = s;
            }
        memcpy(v + o * g * hd, tmp, (size_t)(g * hd) * sizeof(double));
    }
}

static void rope64(double* v, int64_t hd, int64_t pos, double theta, int il) {
    int64_t i, half = hd / 2;
    for (i = 0; i < half; ++i) {
        int64_t i0 = il ? 2 * i : i, i1 = il ? 2 * i + 1 : i + half;
        double ang = (double)pos * pow(theta, -(double)(2 * i) / (double)hd), a = v[i0], b = v[i1];
        v[i0] = a * cos(ang) - b * sin(ang);
        v[i1] = a * sin(ang) + b * cos(ang);
    }
}

/* expert e's projection p (0 gate, 1 up, 2 down) of layer l, [rows][cols] in double */
static double* expert64(const ref* m, int64_t l, int64_t e, int p) {
    static const char* const hf[3] = {"gate_proj", "up_proj", "down_proj"}, *const mx[3] = {"w1", "w3", "w2"};
    char sx[96];
    double *all, *one;
    int64_t n;
    if (!m->stacked) {
        snprintf(sx, sizeof sx, "%s.experts.%lld.%s.weight", m->mixtral ? "block_sparse_moe" : "mlp", (long long)e,
                 m->mixtral ? mx[p] : hf[p]);
        return layer64(m, l, sx);
    }
    snprintf(sx, sizeof sx, "%s.experts.%s.weight", m->mixtral ? "block_sparse_moe" : "mlp", m->mixtral ? mx[p] : hf[p]);
    all = layer64(m, l, sx);
    n = m->ei * m->h;
    one = (double*)malloc((size_t)n * sizeof(double));
    memcpy(one, all + e * n, (size_t)n * sizeof(double));
    free(all);
    return one;
}

/* One gated MLP's effective weights in double, as quarot_rotate_model folds them: gate and up
   W diag(g2) R1 [I][h], down R1^T W H4 [h][I] (wg, wu, wd are the frozen ones, changed in place). */
typedef struct mlp_w64 {
    int64_t I, n4;
    double *eg, *eu, *ed;
    const double* H4;
} mlp_w64;

static void mlp_form64(const ref* m, const double* r1, const double* g2, double* wg, double* wu, double* wd, int64_t I,
                       const double* H4, mlp_w64* w) {
    int64_t i, j, h = m->h;
    w->I = I; w->n4 = I; w->H4 = H4;
    w->eg = (double*)malloc((size_t)(I * h) * sizeof(double));
    w->eu = (double*)malloc((size_t)(I * h) * sizeof(double));
    w->ed = (double*)malloc((size_t)(h * I) * sizeof(double));
    for (i = 0; i < I; ++i) for (j = 0; j < h; ++j) { wg[i * h + j] *= g2[j]; wu[i * h + j] *= g2[j]; }
    mm(wg, r1, w->eg, I, h, h, 0, 0);
    mm(wu, r1, w->eu, I, h, h, 0, 0);
    if (m->online) for (i = 0; i < h; ++i) blocks_times(wd + i * I, I, H4, I);
    mm(r1, wd, w->ed, h, I, h, 1, 0);
}

/* out [h] = the MLP of the normed row a [h] (H4 on the down_proj input when online) */
static void mlp_row64(const ref* m, const mlp_w64* w, const double* a, double* out) {
    double *gg = (double*)malloc((size_t)w->I * sizeof(double)), *hh = (double*)malloc((size_t)w->I * sizeof(double));
    int64_t j;
    mm(a, w->eg, gg, 1, w->I, m->h, 0, 1);
    mm(a, w->eu, hh, 1, w->I, m->h, 0, 1);
    for (j = 0; j < w->I; ++j) hh[j] *= gg[j] / (1.0 + exp(-gg[j]));
    if (m->online) blocks_times(hh, w->I, w->H4, w->n4);
    mm(hh, w->ed, out, 1, m->h, w->I, 0, 1);
    free(gg); free(hh);
}

/* A MoE layer's effective weights: router er [E][h], the experts (E <= 16), the shared expert and its gate es [h]. */
typedef struct moe_w64 {
    double *er, *es;
    mlp_w64 ex[16], sh;
} moe_w64;

static void moe_form64(const ref* m, int64_t l, const double* r1, moe_w64* w) {
    const int64_t h = m->h, E = m->E;
    double *g2 = layer64(m, l, "post_attention_layernorm.weight"), *wr = layer64(m, l, m->mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
    int64_t i, j, e;
    memset(w, 0, sizeof *w);
    w->er = (double*)malloc((size_t)(E * h) * sizeof(double));
    for (i = 0; i < E; ++i) for (j = 0; j < h; ++j) wr[i * h + j] *= g2[j];
    mm(wr, r1, w->er, E, h, h, 0, 0);
    for (e = 0; e < E; ++e) {
        double *wg = expert64(m, l, e, 0), *wu = expert64(m, l, e, 1), *wd = expert64(m, l, e, 2);
        mlp_form64(m, r1, g2, wg, wu, wd, m->ei, m->h4e, &w->ex[e]);
        free(wg); free(wu); free(wd);
    }
    if (m->si) {
        double *wg = layer64(m, l, "mlp.shared_expert.gate_proj.weight"), *wu = layer64(m, l, "mlp.shared_expert.up_proj.weight");
        double *wd = layer64(m, l, "mlp.shared_expert.down_proj.weight"), *ws = layer64(m, l, "mlp.shared_expert_gate.weight");
        w->es = (double*)malloc((size_t)h * sizeof(double));
        for (j = 0; j < h; ++j) ws[j] *= g2[j];
        mm(ws, r1, w->es, 1, h, h, 0, 0);
        mlp_form64(m, r1, g2, wg, wu, wd, m->si, m->h4s, &w->sh);
        free(wg); free(wu); free(wd); free(ws);
    }
    free(g2); free(wr);
}

static void moe_free64(const ref* m, moe_w64* w) {
    int64_t e;
    for (e = 0; e < m->E; ++e) { free(w->ex[e].eg); free(w->ex[e].eu); free(w->ex[e].ed); }
    free(w->sh.eg); free(w->sh.eu); free(w->sh.ed); free(w->er); free(w->es);
}

/* The MoE MLP on the normed row a [h] (no gain) into out [h]: router softmax over all experts, top K
   (renormalized with norm_topk), the experts' sum, the shared expert times its gate. */
static void moe_row64(const ref* m, const moe_w64* w, const double* a, double* out) {
    const int64_t h = m->h, E = m->E;
    double z[64], y[512], mx, den = 0.0, top = 0.0;
    int64_t sel[8], i, j, e;
    memset(z, 0, sizeof z);
    mm(a, w->er, z, 1, E, h, 0, 1);
    mx = z[0];
    for (e = 1; e < E; ++e) if (z[e] > mx) mx = z[e];
    for (e = 0; e < E; ++e) den += exp(z[e] - mx);
    for (j = 0; j < m->K; ++j) {
        int64_t best = -1;
        for (e = 0; e < E; ++e) {
            for (i = 0; i < j && sel[i] != e; ++i) {}
            if (i < j) continue;
            if (best < 0 || z[e] > z[best]) best = e;
        }
        sel[j] = best;
        top += exp(z[best] - mx) / den;
    }
    for (j = 0; j < h; ++j) out[j] = 0.0;
    for (j = 0; j < m->K; ++j) {
        double wt = exp(z[sel[j]] - mx) / den;
        if (m->norm_topk) wt /= top;
        mlp_row64(m, &w->ex[sel[j]], a, y);
        for (i = 0; i < h; ++i) out[i] += wt * y[i];
    }
    if (m->si) {
        double c = 0.0;
        mm(a, w->es, &c, 1, 1, h, 0, 1);
        mlp_row64(m, &w->sh, a, y);
        for (i = 0; i < h; ++i) out[i] += y[i] / (1.0 + exp(-c));
    }
}

/* Mean next-token loss of tokens[B][T] at rotations r1 [h][h], r2 [L][hd][hd] (NULL = none). */
static double ref_loss(const ref* m, const int32_t* tok, int64_t B, int64_t T, const double* r1, const double* r2) {
    int64_t h = m->h, I = m->I, hd = m->hd, qd = m->qd, kvd = m->kvd, grp = m->nh / m->nkv;
    int64_t rows = B * T, l, r, i, j, g;
    double *x = (double*)calloc((size_t)(rows * h), sizeof(double)), *E = get64(m->s, "model.embed_tokens.weight", NULL);
    double *lm = m->tied ? E : get64(m->s, "lm_head.weight", NULL), *gf = get64(m->s, "model.norm.weight", NULL);
    double total = 0.0;
    double *a = (double*)malloc((size_t)h * sizeof(double)), *x0 = (double*)malloc((size_t)h * sizeof(double));
    for (r = 0; r < rows; ++r) {
        memcpy(x0, E + (int64_t)tok[r] * h, (size_t)h * sizeof(double));
        mm(x0, r1, x + r * h, 1, h, h, 0, 0);
    }
    for (l = 0; l < m->L; ++l) {
        double *wq = layer64(m, l, "self_attn.q_proj.weight"), *wk = layer64(m, l, "self_attn.k_proj.weight");
        double *wv = layer64(m, l, "self_attn.v_proj.weight"), *wo = layer64(m, l, "self_attn.o_proj.weight");
        double *wg = layer64(m, l, "mlp.gate_proj.weight"), *wu = layer64(m, l, "mlp.up_proj.weight");
        if (m->fused) {   /* the rows of the fused weights: q, k, v and gate, up */
            double *qkv = layer64(m, l, "self_attn.qkv_proj.weight"), *gu = layer64(m, l, "mlp.gate_up_proj.weight");
            wq = (double*)malloc((size_t)(qd * h) * sizeof(double));
            wk = (double*)malloc((size_t)(kvd * h) * sizeof(double));
            wv = (double*)malloc((size_t)(kvd * h) * sizeof(double));
            wg = (double*)malloc((size_t)(I * h) * sizeof(double));
            wu = (double*)malloc((size_t)(I * h) * sizeof(double));
            memcpy(wq, qkv, (size_t)(qd * h) * sizeof(double));
            memcpy(wk, qkv + qd * h, (size_t)(kvd * h) * sizeof(double));
            memcpy(wv, qkv + (qd + kvd) * h, (size_t)(kvd * h) * sizeof(double));
            memcpy(wg, gu, (size_t)(I * h) * sizeof(double));
            memcpy(wu, gu + I * h, (size_t)(I * h) * sizeof(double));
            free(qkv);
            free(gu);
        }
        double *wd = layer64(m, l, "mlp.down_proj.weight"), *g1 = layer64(m, l, "input_layernorm.weight");
        double *g2 = layer64(m, l, "post_attention_layernorm.weight");
        double *bq = layer64(m, l, "self_attn.q_proj.bias"), *bk = layer64(m, l, "self_attn.k_proj.bias");
        double *bv = layer64(m, l, "self_attn.v_proj.bias");
        double *qn = m->qkn ? layer64(m, l, "self_attn.q_norm.weight") : NULL, *kn = m->qkn ? layer64(m, l, "self_attn.k_norm.weight") : NULL;
        double *eq = (double*)malloc((size_t)(qd * h) * sizeof(double)), *ek = (double*)malloc((size_t)(kvd * h) * sizeof(double));
        double *ev = (double*)malloc((size_t)(kvd * h) * sizeof(double)), *eo = (double*)malloc((size_t)(h * qd) * sizeof(double));
        double *eg = (double*)malloc((size_t)(I * h) * sizeof(double)), *eu = (double*)malloc((size_t)(I * h) * sizeof(double));
        double *ed = (double*)malloc((size_t)(h * I) * sizeof(double)), *tmp = (double*)malloc((size_t)(h * (qd > I ? qd : I)) * sizeof(double));
        double *bve = bv ? (double*)malloc((size_t)kvd * sizeof(double)) : NULL;
        double *q = (double*)malloc((size_t)(rows * qd) * sizeof(double)), *k = (double*)malloc((size_t)(rows * kvd) * sizeof(double));
        double *v = (double*)malloc((size_t)(rows * kvd) * sizeof(double)), *att = (double*)malloc((size_t)(rows * qd) * sizeof(double));
        double *hh = (double*)malloc((size_t)I * sizeof(double)), *gg = (double*)malloc((size_t)I * sizeof(double));
        const double* R2 = r2 ? r2 + l * hd * hd : NULL;
        const int moe = m->E && quarot_config_layer_is_moe(&m->s->config, l);
        moe_w64 mw;
        /* fused, rotated weights */
        for (i = 0; i < qd; ++i) for (j = 0; j < h; ++j) wq[i * h + j] *= g1[j];
        for (i = 0; i < m->kvd; ++i) for (j = 0; j < h; ++j) { wk[i * h + j] *= g1[j]; wv[i * h + j] *= g1[j]; }
        for (i = 0; i < I && !moe; ++i) for (j = 0; j < h; ++j) { wg[i * h + j] *= g2[j]; wu[i * h + j] *= g2[j]; }
        mm(wq, r1, eq, qd, h, h, 0, 0);
        mm(wk, r1, ek, kvd, h, h, 0, 0);
        mm(wv, r1, tmp, kvd, h, h, 0, 0);
        for (g = 0; g < m->nkv; ++g) {
            if (R2) mm(R2, tmp + g * hd * h, ev + g * hd * h, hd, h, hd, 1, 0);
            else memcpy(ev + g * hd * h, tmp + g * hd * h, (size_t)(hd * h) * sizeof(double));
            if (bv) {
                if (R2) mm(bv + g * hd, R2, bve + g * hd, 1, hd, hd, 0, 0);
                else memcpy(bve + g * hd, bv + g * hd, (size_t)hd * sizeof(double));
            }
        }
        if (m->online) for (i = 0; i < h; ++i) heads_times(wo + i * qd, m->nh, hd, m->hh, m->g_heads);
        if (R2) for (i = 0; i < h; ++i) blocks_times(wo + i * qd, qd, R2, hd);
        mm(r1, wo, eo, h, qd, h, 1, 0);
        if (!moe) {
            mm(wg, r1, eg, I, h, h, 0, 0);
            mm(wu, r1, eu, I, h, h, 0, 0);
            if (m->online) for (i = 0; i < h; ++i) blocks_times(wd + i * I, I, m->h4, m->n4);
            mm(r1, wd, ed, h, I, h, 1, 0);
        }
        /* q, k, v per token */
        for (r = 0; r < rows; ++r) {
            int64_t pos = r % T;
            memcpy(a, x + r * h, (size_t)h * sizeof(double));
            rms64(a, h, NULL, m->eps);
            mm(a, eq, q + r * qd, 1, qd, h, 0, 1);
            mm(a, ek, k + r * kvd, 1, kvd, h, 0, 1);
            mm(a, ev, v + r * kvd, 1, kvd, h, 0, 1);
            for (j = 0; bq && j < qd; ++j) q[r * qd + j] += bq[j];
            for (j = 0; bk && j < kvd; ++j) k[r * kvd + j] += bk[j];
            for (j = 0; bve && j < kvd; ++j) v[r * kvd + j] += bve[j];
            for (g = 0; g < m->nh; ++g) {
                if (qn) rms64(q + r * qd + g * hd, hd, qn, m->eps);
                rope64(q + r * qd + g * hd, hd, pos, m->theta, m->il);
                if (m->r3) blocks_times(q + r * qd + g * hd, hd, m->h3, m->n3);
            }
            for (g = 0; g < m->nkv; ++g) {
                if (kn) rms64(k + r * kvd + g * hd, hd, kn, m->eps);
                rope64(k + r * kvd + g * hd, hd, pos, m->theta, m->il);
                if (m->r3) blocks_times(k + r * kvd + g * hd, hd, m->h3, m->n3);
            }
        }
        /* causal attention per window and head */
        for (r = 0; r < rows; ++r) {
            int64_t w0 = (r / T) * T, t = r % T, s, d;
            for (g = 0; g < m->nh; ++g) {
                int64_t kv = g / grp;
                double sc[64], mx = -1e300, sum = 0.0;
                for (s = 0; s <= t; ++s) {
                    double dd = 0.0;
                    for (d = 0; d < hd; ++d) dd += q[r * qd + g * hd + d] * k[(w0 + s) * kvd + kv * hd + d];
                    sc[s] = dd / sqrt((double)hd);
                    if (sc[s] > mx) mx = sc[s];
                }
                for (s = 0; s <= t; ++s) { sc[s] = exp(sc[s] - mx); sum += sc[s]; }
                for (d = 0; d < hd; ++d) {
                    double o = 0.0;
                    for (s = 0; s <= t; ++s) o += sc[s] / sum * v[(w0 + s) * kvd + kv * hd + d];
                    att[r * qd + g * hd + d] = o;
                }
            }
            if (m->online) heads_times(att + r * qd, m->nh, hd, m->hh, m->g_heads);
        }
        /* x += att Wo^T; the MLP */
        if (moe) moe_form64(m, l, r1, &mw);
        for (r = 0; r < rows; ++r) {
            mm(att + r * qd, eo, a, 1, h, qd, 0, 1);
            for (j = 0; j < h; ++j) x[r * h + j] += a[j];
            memcpy(a, x + r * h, (size_t)h * sizeof(double));
            rms64(a, h, NULL, m->eps);
            if (moe) {
                double y[512];
                moe_row64(m, &mw, a, y);
                for (j = 0; j < h; ++j) x[r * h + j] += y[j];
                continue;
            }
            mm(a, eg, gg, 1, I, h, 0, 1);
            mm(a, eu, hh, 1, I, h, 0, 1);
            for (j = 0; j < I; ++j) hh[j] *= gg[j] / (1.0 + exp(-gg[j]));
            if (m->online) blocks_times(hh, I, m->h4, m->n4);
            mm(hh, ed, a, 1, h, I, 0, 1);
            for (j = 0; j < h; ++j) x[r * h + j] += a[j];
        }
        free(wq); free(wk); free(wv); free(wo); free(wg); free(wu); free(wd); free(g1); free(g2); free(bq); free(bk); free(bv);
        free(qn); free(kn); free(eq); free(ek); free(ev); free(eo); free(eg); free(eu); free(ed); free(tmp); free(bve);
        free(q); free(k); free(v); free(att); free(hh); free(gg);
        if (moe) moe_free64(m, &mw);
    }
    /* logits = ((norm(x) R1^T) * g_final) W_lm^T; cross-entropy over positions t < T-1 */
    for (r = 0; r < rows; ++r) {
        double* lg = (double*)malloc((size_t)m->V * sizeof(double));
        double mx = -1e300, s = 0.0;
        if (r % T == T - 1) { free(lg); continue; }
        memcpy(x0, x + r * h, (size_t)h * sizeof(double));
        rms64(x0, h, NULL, m->eps);
        mm(x0, r1, a, 1, h, h, 0, 1);
        for (j = 0; j < h; ++j) a[j] *= gf[j];
        mm(a, lm, lg, 1, m->V, h, 0, 1);
        for (j = 0; j < m->V; ++j) if (lg[j] > mx) mx = lg[j];
        for (j = 0; j < m->V; ++j) s += exp(lg[j] - mx);
        total += mx + log(s) - lg[tok[r + 1]];
        free(lg);
    }
    if (!m->tied) free(lm);
    free(E); free(gf); free(x); free(a); free(x0);
    return total / (double)(B * (T - 1));
}

static double* hadamard64(int64_t n) {
    double* H = (double*)malloc((size_t)(n * n) * sizeof(double));
    if (quarot_hadamard_build_f64(n, 1, H, NULL) != QUAROT_OK) { free(H); return NULL; }
    return H;
}

/* One family: the trainer's loss and gradients at a random orthogonal point against the reference. */
static void check_family(const char* arch, int interleaved, int online, int r3, int stacked) {
    qx_store s;
    qx_synth_desc sd;
    qx_err e;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    ref rf;
    enum { B = 2, T = 6 };
    int32_t tok[B * T];
    double *r1, *r2, *fd1, *fd2, loss = 0.0, l0;
    int64_t h, hd, L, i;
    memset(&sd, 0, sizeof sd);
    sd.arch = arch;
    sd.seed = 5;
    sd.hidden = 16; sd.intermediate = 48; sd.n_layers = 2; sd.n_heads = 4; sd.n_kv_heads = 2; sd.head_dim = 8; sd.vocab = 32;
    sd.rope_interleaved = interleaved;
    if (strcmp(arch, "qwen2") == 0) sd.tied = 1;
    if (strstr(arch, "moe") || strcmp(arch, "mixtral") == 0) {   /* 4 experts, top 2 */
        sd.n_experts = 4;
        sd.n_experts_used = 2;
        sd.experts_stacked = stacked;
        if (strcmp(arch, "mixtral") != 0) sd.expert_intermediate = 16;
        if (strcmp(arch, "qwen2_moe") == 0) { sd.shared_intermediate = 32; sd.sparse_step = 2; }   /* layer 0 dense */
    }
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { QT_CHECKF(0, "synth %s: %s", arch, e.msg); return; }
    h = s.config.hidden; hd = s.config.head_dim; L = s.config.n_layers;
    qt_seed(21);
    for (i = 0; i < B * T; ++i) tok[i] = (int32_t)(qt_uniform() * (double)s.config.vocab);
    memset(&rf, 0, sizeof rf);
    rf.s = &s; rf.h = h; rf.I = s.config.intermediate; rf.nh = s.config.n_heads; rf.nkv = s.config.n_kv_heads; rf.hd = hd;
    rf.V = s.config.vocab; rf.L = L; rf.qd = rf.nh * hd; rf.kvd = rf.nkv * hd; rf.il = interleaved; rf.online = online; rf.r3 = r3;
    rf.qkn = s.config.qk_norm; rf.tied = s.config.tied_embeddings; rf.eps = s.config.norm_eps > 0 ? (double)s.config.norm_eps : 1e-5;
    rf.theta = s.config.rope_theta > 0 ? (double)s.config.rope_theta : 10000.0;
    rf.g_heads = rf.nh; rf.n4 = rf.I; rf.n3 = hd;
    rf.hh = hadamard64(rf.nh); rf.h4 = hadamard64(rf.I); rf.h3 = hadamard64(hd);
    rf.E = s.config.n_experts; rf.K = s.config.n_experts_used; rf.norm_topk = s.config.norm_topk_prob;
    rf.ei = s.config.expert_intermediate > 0 ? s.config.expert_intermediate : s.config.intermediate;
    rf.si = s.config.shared_intermediate; rf.mixtral = strcmp(arch, "mixtral") == 0; rf.stacked = s.config.experts_stacked;
    rf.h4e = rf.E ? hadamard64(rf.ei) : NULL; rf.h4s = rf.si ? hadamard64(rf.si) : NULL;
    rf.fused = strcmp(arch, "phi3") == 0;
    /* a random orthogonal point */
    r1 = (double*)malloc((size_t)(h * h) * sizeof(double));
    r2 = (double*)malloc((size_t)(L * hd * hd) * sizeof(double));
    fd1 = (double*)malloc((size_t)(h * h) * sizeof(double));
    fd2 = (double*)malloc((size_t)(L * hd * hd) * sizeof(double));
    QT_OK(quarot_random_orthogonal_f64(h, 3, r1, h, NULL));
    for (i = 0; i < L; ++i) QT_OK(quarot_random_orthogonal_f64(hd, 10 + (uint64_t)i, r2 + i * hd * hd, hd, NULL));
    qx_model_bind(&m, &b, &s);
    memset(&td, 0, sizeof td);
    td.online = online;
    td.r3 = r3;
    if (quarot_trainer_init(&t, &m, &td) != QUAROT_OK) { QT_CHECKF(0, "init %s: %s", arch, t.error); goto out; }
    QT_OK(quarot_trainer_set_rotations(&t, r1, r2));
    QT_OK(quarot_trainer_loss(&t, tok, B, T, 1, &loss));
    l0 = ref_loss(&rf, tok, B, T, r1, r2);
    QT_CHECKF(fabs(loss - l0) <= 1e-6 * fabs(l0), "%s: loss %.9g, reference %.9g", arch, loss, l0);
    /* central differences of the reference over every entry (QT_QUICK: every 7th, the rest copied from
       the analytic gradient so that only the differenced entries are compared) */
    for (i = 0; i < h * h; ++i) {
        double keep = r1[i], lp, lm;
        if (qt_quick() && i % 7) { fd1[i] = t.grad_r1[i]; continue; }
        r1[i] = keep + 1e-6; lp = ref_loss(&rf, tok, B, T, r1, r2);
        r1[i] = keep - 1e-6; lm = ref_loss(&rf, tok, B, T, r1, r2);
        r1[i] = keep;
        fd1[i] = (lp - lm) / 2e-6;
    }
    for (i = 0; i < L * hd * hd; ++i) {
        double keep = r2[i], lp, lm;
        if (qt_quick() && i % 7) { fd2[i] = t.grad_r2[i]; continue; }
        r2[i] = keep + 1e-6; lp = ref_loss(&rf, tok, B, T, r1, r2);
        r2[i] = keep - 1e-6; lm = ref_loss(&rf, tok, B, T, r1, r2);
        r2[i] = keep;
        fd2[i] = (lp - lm) / 2e-6;
    }
    QT_CHECKF(qt_rel_diff_f64(t.grad_r1, fd1, h * h) <= GRAD_TOL, "%s%s%s: dL/dR1 error %.3g", arch, online ? " online" : "", r3 ? " r3" : "",
              qt_rel_diff_f64(t.grad_r1, fd1, h * h));
    QT_CHECKF(qt_rel_diff_f64(t.grad_r2, fd2, L * hd * hd) <= GRAD_TOL, "%s%s%s: dL/dR2 error %.3g", arch, online ? " online" : "", r3 ? " r3" : "",
              qt_rel_diff_f64(t.grad_r2, fd2, L * hd * hd));
    if (getenv("QT_VERBOSE"))
        printf("    %s il %d online %d r3 %d: loss %.9f vs %.9f, dR1 %.3g, dR2 %.3g\n", arch, interleaved, online, r3, loss, l0,
               qt_rel_diff_f64(t.grad_r1, fd1, h * h), qt_rel_diff_f64(t.grad_r2, fd2, L * hd * hd));
    quarot_trainer_free(&t);
out:
    free(r1); free(r2); free(fd1); free(fd2); free(rf.hh); free(rf.h4); free(rf.h3); free(rf.h4e); free(rf.h4s);
    qx_store_free(&s);
}

static void test_grad_llama(void) { check_family("llama", 0, 0, 0, 0); }
static void test_grad_llama_interleaved(void) { check_family("llama", 1, 0, 0, 0); }
static void test_grad_llama_online_r3(void) { check_family("llama", 0, 1, 1, 0); }
static void test_grad_qwen2(void) { check_family("qwen2", 0, 1, 0, 0); }
static void test_grad_qwen3(void) { check_family("qwen3", 0, 0, 1, 0); }
/* mixture of experts: Mixtral (renormalized top 2), Qwen2-MoE (a dense layer, the shared expert and
   its gate, weights not renormalized) with the online hooks (R4 per expert and for the shared one),
   Qwen3-MoE with 3-D expert tensors */
static void test_grad_phi3(void) { check_family("phi3", 0, 1, 0, 0); }   /* fused q|k|v, gate|up */
static void test_grad_moe(void) {
    check_family("mixtral", 0, 0, 0, 0);
    check_family("qwen2_moe", 0, 1, 0, 0);
    check_family("qwen3_moe", 0, 0, 0, 1);
}

/* Straight-through gradients with fake quantization: finite, and at 8 bits close to the FP ones. */
static void test_grad_quantized(void) {
    qx_store s;
    qx_synth_desc sd;
    qx_err e;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    int32_t tok[24];
    double *g_fp, loss, diff = 0.0, nrm = 0.0;
    int64_t i, n;
    memset(&sd, 0, sizeof sd);
    sd.hidden = 16; sd.intermediate = 48; sd.n_layers = 2; sd.n_heads = 4; sd.n_kv_heads = 2; sd.head_dim = 8; sd.vocab = 32;
    sd.n_outliers = -1;
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { QT_CHECKF(0, "synth: %s", e.msg); return; }
    for (i = 0; i < 24; ++i) tok[i] = (int32_t)((i * 11 + 2) % 32);
    n = 16 * 16;
    g_fp = (double*)malloc((size_t)n * sizeof(double));
    qx_model_bind(&m, &b, &s);
    memset(&td, 0, sizeof td);
    td.online = 1;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    QT_OK(quarot_trainer_loss(&t, tok, 2, 12, 1, &loss));
    memcpy(g_fp, t.grad_r1, (size_t)n * sizeof(double));
    quarot_trainer_free(&t);
    td.act.a_bits = 8;
    td.act.a_asym = 1;
    td.w_bits = 8;
    td.act.k_bits = td.act.v_bits = 8;
    td.r3 = 1;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    QT_OK(quarot_trainer_loss(&t, tok, 2, 12, 1, &loss));
    for (i = 0; i < n; ++i) {
        diff += (t.grad_r1[i] - g_fp[i]) * (t.grad_r1[i] - g_fp[i]);
        nrm += g_fp[i] * g_fp[i];
    }
    QT_CHECKF(sqrt(diff / nrm) < 0.05, "8-bit gradient differs from FP by %.3g", sqrt(diff / nrm));
    quarot_trainer_free(&t);
    free(g_fp);
    qx_store_free(&s);
}

int main(void) {
    QT_RUN(test_grad_llama);
    QT_RUN(test_grad_llama_interleaved);
    QT_RUN(test_grad_llama_online_r3);
    QT_RUN(test_grad_qwen2);
    QT_RUN(test_grad_qwen3);
    QT_RUN(test_grad_phi3);
    QT_RUN(test_grad_moe);
    QT_RUN(test_grad_quantized);
    return qt_finish("test_train_grad");
}
