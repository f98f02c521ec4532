/* fmt_util.h - helpers shared by the format tests: scratch directories, a small random model with
   Hugging Face names for any supported architecture, store comparison, a growing byte buffer for
   hand-made files, and the comparison of two GGUF files' tensors. Include after qt.h. */
#ifndef FMT_UTIL_H
#define FMT_UTIL_H

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "support/qx_store.h"
#include "formats/qx_gguf.h"

/* ---- directories ---- */

QT_UNUSED static void fu_rm_rf(const char* path) {
    struct stat st;
    if (lstat(path, &st) != 0) return;
    if (S_ISDIR(st.st_mode)) {
        DIR* d = opendir(path);
        struct dirent* de;
        while (d && (de = readdir(d)) != NULL) {
            char sub[1024];
            if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0) continue;
            snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
            fu_rm_rf(sub);
        }
        if (d) closedir(d);
        rmdir(path);
    } else {
        unlink(path);
    }
}

/* A fresh scratch directory (static buffer per slot: 4 slots). */
QT_UNUSED static const char* fu_tmpdir(void) {
    static char buf[4][64];
    static int slot;
    char* p = buf[slot++ & 3];
    strcpy(p, "/tmp/qx_fmt_test_XXXXXX");
    if (!mkdtemp(p)) return NULL;
    return p;
}

/* Number of directory entries (excluding . and ..); -1 if it cannot be read. */
QT_UNUSED static int fu_count_entries(const char* dir) {
    DIR* d = opendir(dir);
    struct dirent* de;
    int n = 0;
    if (!d) return -1;
    while ((de = readdir(d)) != NULL)
        if (strcmp(de->d_name, ".") && strcmp(de->d_name, "..")) ++n;
    closedir(d);
    return n;
}

QT_UNUSED static int fu_exists(const char* dir, const char* name) {
    char p[1024];
    struct stat st;
    if (name) snprintf(p, sizeof p, "%s/%s", dir, name); else snprintf(p, sizeof p, "%s", dir);
    return stat(p, &st) == 0;
}

/* Fuzz seeds: with QX_SEEDS_DIR set (e.g. fuzz/seeds), tests write small sample inputs there
   under `rel` ("gguf/valid.gguf"); the subfolders must exist. */
QT_UNUSED static void fu_seed(const char* rel, const void* data, size_t n) {
    const char* dir = getenv("QX_SEEDS_DIR");
    char p[1024];
    if (!dir || !dir[0] || n > 4096) return;
    snprintf(p, sizeof p, "%s/%s", dir, rel);
    qt_write_file(p, data, n);
}

/* ---- byte buffers for hand-made files ---- */

typedef struct fu_buf {
    unsigned char* p;
    size_t len, cap;
} fu_buf;

QT_UNUSED static void fu_put(fu_buf* b, const void* data, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        b->p = (unsigned char*)realloc(b->p, cap);
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, data, n);
    b->len += n;
}
QT_UNUSED static void fu_u8(fu_buf* b, unsigned v) { unsigned char c = (unsigned char)v; fu_put(b, &c, 1); }
QT_UNUSED static void fu_u32(fu_buf* b, uint32_t v) { int k; for (k = 0; k < 4; ++k) fu_u8(b, (v >> (8 * k)) & 0xff); }
QT_UNUSED static void fu_u64(fu_buf* b, uint64_t v) { int k; for (k = 0; k < 8; ++k) fu_u8(b, (unsigned)((v >> (8 * k)) & 0xff)); }
QT_UNUSED static void fu_f32(fu_buf* b, float x) { uint32_t u; memcpy(&u, &x, 4); fu_u32(b, u); }
QT_UNUSED static void fu_str(fu_buf* b, const char* s) { fu_put(b, s, strlen(s)); }

/* ---- a random model ---- */

/* Adds tensor `name` with ne = {n0, n1} (n1 = 0: a vector) and values ~ N(0, 1) (norm gains
   around 1), in dtype dt. */
QT_UNUSED static void fu_add(qx_store* s, const char* name, quarot_dtype dt, int64_t n0, int64_t n1, int gain) {
    int64_t ne[2] = {n0, n1 ? n1 : 1}, k, n = n0 * (n1 ? n1 : 1);
    float* v = (float*)malloc((size_t)n * sizeof *v);
    quarot_tensor* t = NULL;
    for (k = 0; k < n; ++k) v[k] = (float)(gain ? 1.0 + 0.1 * qt_normal() : qt_normal());
    if (qx_store_add(s, name, dt, n1 ? 2 : 1, ne, NULL, &t) == QUAROT_OK) {
        for (k = 0; k < ne[1]; ++k) quarot_tensor_set_row_f32(t, k, v + k * n0);
    }
    free(v);
}

/* Fills s with a small model of the given arch ("llama", "qwen2", "qwen3", "opt") with every tensor
   the config implies; dtypes cycle through `dts` (n_dts of them) tensor by tensor. */
QT_UNUSED static void fu_make_model(qx_store* s, const char* arch, int tied, const quarot_dtype* dts, int n_dts) {
    quarot_model_config* c = &s->config;
    int opt = strcmp(arch, "opt") == 0, qwen2 = strcmp(arch, "qwen2") == 0, qwen3 = strcmp(arch, "qwen3") == 0;
    const char* pre = opt ? "model.decoder." : "model.";
    char nm[128];
    int64_t i, hd, q_out, kv_out;
    int di = 0;
#define FU_DT (dts[(di++) % n_dts])
    memset(c, 0, sizeof *c);
    strcpy(c->arch, arch);
    c->hidden = 16; c->intermediate = 24; c->n_layers = 2; c->n_heads = 4;
    c->n_kv_heads = opt ? 4 : 2; c->head_dim = 4; c->vocab = 11; c->max_seq = 32;
    c->norm = opt ? QUAROT_NORM_LAYER : QUAROT_NORM_RMS;
    c->mlp = opt ? QUAROT_MLP_PLAIN : QUAROT_MLP_GATED;
    c->act = opt ? QUAROT_ACT_RELU : QUAROT_ACT_SILU;
    c->norm_eps = opt ? 1e-5f : 1e-6f;
    c->rope_theta = opt ? 0.0f : 500000.0f;
    c->tied_embeddings = tied;
    c->attn_qkv_bias = opt || qwen2;
    c->attn_out_bias = opt;
    c->mlp_bias = opt;
    c->qk_norm = qwen3;
    hd = c->head_dim; q_out = c->n_heads * hd; kv_out = c->n_kv_heads * hd;
    snprintf(nm, sizeof nm, "%sembed_tokens.weight", pre); fu_add(s, nm, FU_DT, c->hidden, c->vocab, 0);
    if (!tied) fu_add(s, "lm_head.weight", FU_DT, c->hidden, c->vocab, 0);
    if (opt) {
        fu_add(s, "model.decoder.final_layer_norm.weight", FU_DT, c->hidden, 0, 1);
        fu_add(s, "model.decoder.final_layer_norm.bias", FU_DT, c->hidden, 0, 0);
        fu_add(s, "model.decoder.embed_positions.weight", FU_DT, c->hidden, c->max_seq + 2, 0);
    } else {
        fu_add(s, "model.norm.weight", FU_DT, c->hidden, 0, 1);
    }
    for (i = 0; i < c->n_layers; ++i) {
        const char* qkv[3] = {"q", "k", "v"};
        int k;
        for (k = 0; k < 3; ++k) {
            int64_t n_out = k == 0 ? q_out : kv_out;
            snprintf(nm, sizeof nm, "%slayers.%d.self_attn.%s_proj.weight", pre, (int)i, qkv[k]);
            fu_add(s, nm, FU_DT, c->hidden, n_out, 0);
            if (c->attn_qkv_bias) {
                snprintf(nm, sizeof nm, "%slayers.%d.self_attn.%s_proj.bias", pre, (int)i, qkv[k]);
                fu_add(s, nm, FU_DT, n_out, 0, 0);
            }
        }
        snprintf(nm, sizeof nm, "%slayers.%d.self_attn.%s.weight", pre, (int)i, opt ? "out_proj" : "o_proj");
        fu_add(s, nm, FU_DT, q_out, c->hidden, 0);
        if (c->attn_out_bias) {
            snprintf(nm, sizeof nm, "%slayers.%d.self_attn.%s.bias", pre, (int)i, opt ? "out_proj" : "o_proj");
            fu_add(s, nm, FU_DT, c->hidden, 0, 0);
        }
        if (opt) {
            const char* ln[4] = {"self_attn_layer_norm.weight", "self_attn_layer_norm.bias", "final_layer_norm.weight", "final_layer_norm.bias"};
            for (k = 0; k < 4; ++k) {
                snprintf(nm, sizeof nm, "model.decoder.layers.%d.%s", (int)i, ln[k]);
                fu_add(s, nm, FU_DT, c->hidden, 0, k % 2 == 0);
            }
            snprintf(nm, sizeof nm, "model.decoder.layers.%d.fc1.weight", (int)i); fu_add(s, nm, FU_DT, c->hidden, c->intermediate, 0);
            snprintf(nm, sizeof nm, "model.decoder.layers.%d.fc1.bias", (int)i); fu_add(s, nm, FU_DT, c->intermediate, 0, 0);
            snprintf(nm, sizeof nm, "model.decoder.layers.%d.fc2.weight", (int)i); fu_add(s, nm, FU_DT, c->intermediate, c->hidden, 0);
            snprintf(nm, sizeof nm, "model.decoder.layers.%d.fc2.bias", (int)i); fu_add(s, nm, FU_DT, c->hidden, 0, 0);
            continue;
        }
        snprintf(nm, sizeof nm, "model.layers.%d.input_layernorm.weight", (int)i); fu_add(s, nm, FU_DT, c->hidden, 0, 1);
        snprintf(nm, sizeof nm, "model.layers.%d.post_attention_layernorm.weight", (int)i); fu_add(s, nm, FU_DT, c->hidden, 0, 1);
        if (qwen3) {
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.q_norm.weight", (int)i); fu_add(s, nm, FU_DT, hd, 0, 1);
            snprintf(nm, sizeof nm, "model.layers.%d.self_attn.k_norm.weight", (int)i); fu_add(s, nm, FU_DT, hd, 0, 1);
        }
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.gate_proj.weight", (int)i); fu_add(s, nm, FU_DT, c->hidden, c->intermediate, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.up_proj.weight", (int)i); fu_add(s, nm, FU_DT, c->hidden, c->intermediate, 0);
        snprintf(nm, sizeof nm, "model.layers.%d.mlp.down_proj.weight", (int)i); fu_add(s, nm, FU_DT, c->intermediate, c->hidden, 0);
    }
#undef FU_DT
}

/* 1 when b holds exactly a's tensors (names, dtypes, shapes, bytes); otherwise 0 and why in msg. */
QT_UNUSED static int fu_same_tensors(const qx_store* a, const qx_store* b, char* msg, size_t msg_len) {
    int64_t i;
    if (a->count != b->count) { snprintf(msg, msg_len, "%lld vs %lld tensors", (long long)a->count, (long long)b->count); return 0; }
    for (i = 0; i < a->count; ++i) {
        const quarot_tensor* x = &a->items[i].t;
        const quarot_tensor* y = qx_store_find(b, a->items[i].name);
        int d;
        if (!y) { snprintf(msg, msg_len, "%s missing", a->items[i].name); return 0; }
        if (x->dtype != y->dtype) { snprintf(msg, msg_len, "%s: dtype %d vs %d", a->items[i].name, x->dtype, y->dtype); return 0; }
        for (d = 0; d < QUAROT_MAX_DIMS; ++d)
            if (x->ne[d] != y->ne[d]) { snprintf(msg, msg_len, "%s: ne[%d] %lld vs %lld", a->items[i].name, d, (long long)x->ne[d], (long long)y->ne[d]); return 0; }
        if (!quarot_tensor_is_contiguous(x) || !quarot_tensor_is_contiguous(y) ||
            memcmp(x->data, y->data, quarot_tensor_nbytes(x)) != 0) {
            snprintf(msg, msg_len, "%s: bytes differ", a->items[i].name);
            return 0;
        }
    }
    return 1;
}

/* Config fields that survive a file round trip. */
QT_UNUSED static int fu_same_config(const quarot_model_config* a, const quarot_model_config* b, char* msg, size_t msg_len) {
#define FU_C(f) if (a->f != b->f) { snprintf(msg, msg_len, #f ": %g vs %g", (double)a->f, (double)b->f); return 0; }
    if (strcmp(a->arch, b->arch)) { snprintf(msg, msg_len, "arch %s vs %s", a->arch, b->arch); return 0; }
    FU_C(hidden) FU_C(intermediate) FU_C(n_layers) FU_C(n_heads) FU_C(n_kv_heads) FU_C(head_dim) FU_C(vocab)
    FU_C(max_seq) FU_C(norm) FU_C(mlp) FU_C(act) FU_C(norm_eps) FU_C(rope_theta) FU_C(rope_interleaved)
    FU_C(tied_embeddings) FU_C(attn_qkv_bias) FU_C(attn_out_bias) FU_C(mlp_bias) FU_C(qk_norm)
#undef FU_C
    return 1;
}

/* ---- GGUF ---- */

/* The GGUF tensors of b all in a (name, type, ne, bytes), and no other; NULL when so, else the first
   that differs. */
QT_UNUSED static const char* gguf_same_tensors(const qx_gguf_file* a, const qx_gguf_file* b) {
    uint64_t i, k;
    if (a->n_tensors != b->n_tensors) return "(the counts)";
    for (i = 0; i < b->n_tensors; ++i) {
        const qx_gguf_tinfo* y = &b->t[i];
        for (k = 0; k < a->n_tensors; ++k)
            if (a->t[k].name_len == y->name_len && memcmp(a->t[k].name, y->name, (size_t)y->name_len) == 0) break;
        if (k == a->n_tensors || a->t[k].type != y->type || memcmp(a->t[k].ne, y->ne, sizeof y->ne) != 0 ||
            a->t[k].nbytes != y->nbytes || memcmp(a->data + a->t[k].offset, b->data + y->offset, (size_t)y->nbytes) != 0)
            return y->name;
    }
    return NULL;
}

#endif
