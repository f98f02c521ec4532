/* user_adapter.c - rotating a model whose tensors follow a naming scheme quarot.h has never seen,
   with an adapter the program defines itself, and without touching the processor.

   quarot.h's processor never looks at tensor names: an adapter (quarot.h >>adapter) turns a model's
   config into a plan -- which norms fuse into which linears, which weights R1 and R2 rotate on which
   side -- and the model (>>model) hands out tensors by the names the plan uses. Here the names are
   those of Meta's original Llama checkpoints (consolidated.*.pth):
       tok_embeddings.weight, layers.N.attention_norm.weight, layers.N.attention.wq/wk/wv/wo.weight,
       layers.N.ffn_norm.weight, layers.N.feed_forward.w1/w2/w3.weight (gate/down/up), norm.weight,
       output.weight
   and the adapter only has to name them (quarot_adapter_names + the library's generic build
   function), then pass itself through desc.adapter. The engine side is a plain table of named
   tensors with a get_tensor callback over it.

   To check the result, the program builds a small random Llama with LLM-like outlier channels
   (qx_synth, the tool's test models, Hugging Face names), copies it into the Meta-named table,
   rotates the table with QuaRot (R1 + R2 random Hadamard, norms fused), maps the rotated tensors back
   and compares the logits of both models with the tool's reference forward pass (qx_forward): they
   must agree to float rounding (max |diff| / max |logit| <= 2e-5). Exit code 0 when they do.
   Build: `make` (links build/libqx.a, which holds quarot.h's implementation); run ./build/user_adapter. */
#include "quarot.h"
#include "model/qx_forward.h"
#include "model/qx_synth.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the engine's own storage: named tensors in Meta's scheme ---------------------------------- */

typedef struct meta_tensor {
    char name[QUAROT_NAME_MAX];
    quarot_tensor t;             /* f32, contiguous, owned */
} meta_tensor;

typedef struct meta_model {
    meta_tensor* items;
    int n, cap;
} meta_model;

static quarot_tensor* meta_find(meta_model* mm, const char* name) {
    int i;
    for (i = 0; i < mm->n; ++i)
        if (strcmp(mm->items[i].name, name) == 0) return &mm->items[i].t;
    return NULL;
}

static quarot_tensor* meta_add(meta_model* mm, const char* name, int n_dims, const int64_t* ne) {
    meta_tensor* t;
    if (mm->n == mm->cap) {
        int cap = mm->cap ? 2 * mm->cap : 64;
        meta_tensor* p = (meta_tensor*)realloc(mm->items, (size_t)cap * sizeof *p);
        if (!p) return NULL;
        mm->items = p;
        mm->cap = cap;
    }
    t = &mm->items[mm->n];
    snprintf(t->name, sizeof t->name, "%s", name);
    if (quarot_tensor_init(&t->t, NULL, QUAROT_DTYPE_F32, n_dims, ne) != QUAROT_OK) return NULL;
    t->t.data = calloc((size_t)quarot_tensor_nelements(&t->t), sizeof(float));
    if (!t->t.data) return NULL;
    mm->n++;
    return &t->t;
}

/* The quarot_model callbacks over the table: everything is in memory, so no acquire/release. */
static quarot_result meta_get(void* user, const char* name, quarot_tensor* out) {
    quarot_tensor* t = meta_find((meta_model*)user, name);
    if (!t) return QUAROT_ERR_NOT_FOUND;
    *out = *t;
    return QUAROT_OK;
}

static quarot_result meta_create(void* user, const char* name, quarot_dtype dt, int n_dims, const int64_t* ne, quarot_tensor* out) {
    quarot_tensor* t;
    (void)dt;   /* this engine stores f32 */
    t = meta_add((meta_model*)user, name, n_dims, ne);
    if (!t) return QUAROT_ERR_OUT_OF_MEMORY;
    *out = *t;
    return QUAROT_OK;
}

/* ---- the adapter: Meta's names, the library's generic plan builder ----------------------------- */

static const quarot_adapter_names meta_names = {
    "tok_embeddings.weight",     /* embed */
    NULL,                        /* pos_embed: RoPE, no learned positions */
    "norm",                      /* final norm prefix (+ ".weight") */
    "output.weight",             /* lm_head */
    "layers.{i}.",               /* prefix of every per-layer name */
    "attention_norm",            /* norm before attention */
    "ffn_norm",                  /* norm before the MLP */
    "attention.wq", "attention.wk", "attention.wv", "attention.wo",
    "feed_forward.w1",           /* gate */
    "feed_forward.w3",           /* up */
    "feed_forward.w2",           /* down */
    NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL   /* no mixture of experts */
};

static const quarot_adapter meta_adapter = {"meta-llama", &meta_names, quarot_adapter_build_from_names, NULL};

/* ---- checking: Hugging Face names <-> Meta names, logits -------------------------------------- */

/* Hugging Face suffix -> Meta suffix, per layer; then the globals. */
static const char* const layer_map[][2] = {
    {"input_layernorm.weight", "attention_norm.weight"},
    {"self_attn.q_proj.weight", "attention.wq.weight"}, {"self_attn.k_proj.weight", "attention.wk.weight"},
    {"self_attn.v_proj.weight", "attention.wv.weight"}, {"self_attn.o_proj.weight", "attention.wo.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "feed_forward.w1.weight"}, {"mlp.down_proj.weight", "feed_forward.w2.weight"},
    {"mlp.up_proj.weight", "feed_forward.w3.weight"},
};
static const char* const global_map[][2] = {
    {"model.embed_tokens.weight", "tok_embeddings.weight"}, {"model.norm.weight", "norm.weight"}, {"lm_head.weight", "output.weight"},
};

/* The Meta name of a Hugging Face name (0 when it has none). */
static int to_meta(const char* hf, char* out, size_t n) {
    size_t k;
    int layer, used = 0;
    for (k = 0; k < sizeof global_map / sizeof global_map[0]; ++k)
        if (strcmp(hf, global_map[k][0]) == 0) return snprintf(out, n, "%s", global_map[k][1]) > 0;
    if (sscanf(hf, "model.layers.%d.%n", &layer, &used) == 1 && used > 0)
        for (k = 0; k < sizeof layer_map / sizeof layer_map[0]; ++k)
            if (strcmp(hf + used, layer_map[k][0]) == 0) return snprintf(out, n, "layers.%d.%s", layer, layer_map[k][1]) > 0;
    return 0;
}

static int logits(const qx_store* s, const int32_t* tok, int64_t T, float* out) {
    qx_forward f;
    qx_err e;
    int ok;
    if (qx_forward_init(&f, s, NULL, &e) != QUAROT_OK) { fprintf(stderr, "forward: %s\n", e.msg); return 0; }
    ok = qx_forward_window(&f, tok, T, out, &e) == QUAROT_OK;
    if (!ok) fprintf(stderr, "forward: %s\n", e.msg);
    qx_forward_free(&f);
    return ok;
}

int main(void) {
    qx_synth_desc sd;
    qx_store hf, back;
    qx_err e;
    meta_model mm = {0};
    quarot_model m;
    quarot_rotate_desc desc;
    int32_t tok[32];
    int64_t i, T = 32, V;
    float *l0, *l1;
    double diff = 0, amax = 0;
    char name[QUAROT_NAME_MAX];
    int rc = 1;

    /* a checkpoint (Hugging Face names) and its copy in the engine's Meta-named table */
    memset(&sd, 0, sizeof sd);
    sd.arch = "llama";
    sd.seed = 11;
    sd.tied = -1;                            /* Meta's checkpoints have a separate output.weight */
    if (qx_synth_model(&hf, &sd, &e) != QUAROT_OK) { fprintf(stderr, "%s\n", e.msg); return 1; }
    for (i = 0; i < hf.count; ++i) {
        const quarot_tensor* t = &hf.items[i].t;
        quarot_tensor* d;
        if (!to_meta(hf.items[i].name, name, sizeof name)) { fprintf(stderr, "no Meta name for %s\n", hf.items[i].name); return 1; }
        d = meta_add(&mm, name, QUAROT_MAX_DIMS, t->ne);
        if (!d) return 1;
        memcpy(d->data, t->data, (size_t)quarot_tensor_nelements(t) * sizeof(float));
    }

    /* --- the rotation: the processor sees Meta's names through the adapter --- */
    memset(&m, 0, sizeof m);
    m.config = hf.config;                    /* sizes, norm kind, RoPE; arch is only a label here */
    snprintf(m.config.arch, sizeof m.config.arch, "%s", meta_adapter.arch);
    m.user_data = &mm;
    m.get_tensor = meta_get;
    m.create_tensor = meta_create;
    memset(&desc, 0, sizeof desc);           /* R1 + R2 random Hadamard, seed 0 */
    desc.adapter = &meta_adapter;
    if (quarot_rotate_model(&m, &desc) != QUAROT_OK) { fprintf(stderr, "rotate: %s\n", m.error); return 1; }

    /* --- the check: rotated weights back under Hugging Face names, logits against the original --- */
    qx_store_init(&back);
    back.config = hf.config;
    back.config.tied_embeddings = m.config.tied_embeddings;
    for (i = 0; i < hf.count; ++i) {
        const quarot_tensor* t;
        to_meta(hf.items[i].name, name, sizeof name);
        t = meta_find(&mm, name);
        if (!t || qx_store_add(&back, hf.items[i].name, QUAROT_DTYPE_F32, QUAROT_MAX_DIMS, t->ne, t->data, NULL) != QUAROT_OK) return 1;
    }
    V = hf.config.vocab;
    for (i = 0; i < T; ++i) tok[i] = (int32_t)((i * 37 + 5) % V);
    l0 = (float*)malloc((size_t)(T * V) * sizeof(float));
    l1 = (float*)malloc((size_t)(T * V) * sizeof(float));
    if (l0 && l1 && logits(&hf, tok, T, l0) && logits(&back, tok, T, l1)) {
        for (i = 0; i < T * V; ++i) {
            double d = fabs((double)l0[i] - (double)l1[i]);
            if (d > diff) diff = d;
            if (fabs((double)l0[i]) > amax) amax = fabs((double)l0[i]);
        }
        printf("adapter \"%s\": rotated %d Meta-named tensors (%lld layers, hidden %lld) without changing the processor\n",
               meta_adapter.arch, mm.n, (long long)hf.config.n_layers, (long long)hf.config.hidden);
        printf("logits over %lld tokens: max |rotated - original| / max |original| = %.2e (bound 2e-5)\n", (long long)T,
               diff / (amax > 0 ? amax : 1));
        {   /* and the weights did change: the embedding rows were rotated by R1 */
            const quarot_tensor* a = qx_store_find(&hf, "model.embed_tokens.weight");
            const quarot_tensor* b = qx_store_find(&back, "model.embed_tokens.weight");
            double dw = 0;
            for (i = 0; a && b && i < quarot_tensor_nelements(a); ++i) {
                double d = fabs((double)((const float*)a->data)[i] - (double)((const float*)b->data)[i]);
                if (d > dw) dw = d;
            }
            printf("weights changed: max |E_rotated - E| = %.3g\n", dw);
            rc = diff / (amax > 0 ? amax : 1) <= 2e-5 && dw > 0.1 ? 0 : 1;
        }
    }
    free(l0);
    free(l1);
    for (i = 0; i < mm.n; ++i) free(mm.items[i].t.data);
    free(mm.items);
    qx_store_free(&back);
    qx_store_free(&hf);
    return rc;
}
