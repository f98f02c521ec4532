/* Fused readers in the header's plan (quarot_adapter_build_fused_names, the built-in "phi3" adapter):
   a model whose q|k|v and gate|up weights are concatenated (Phi-3's self_attn.qkv_proj and
   mlp.gate_up_proj) is rotated by the fused plan, and the same model with separate q/k/v and
   gate/up by the llama / qwen2 plan, with the same seed. Each fused tensor must come out equal, bit
   for bit, to the concatenation of the rotated separate ones (R1 on every row's input, R2 on the v
   rows only, biases included), and every other tensor equal too, with and without online
   rotations; the plan records the v and up row ranges; a q|k|v weight whose row count does not
   split into the config's heads is refused with a message naming it, before anything changes. */
#include "quarot.h"
#include "qt.h"
#include "model/qx_model.h"
#include "model/qx_synth.h"

/* The names of layer l's tensor `what` ("self_attn.q_proj.weight"). */
static void lname(char* out, size_t n, int64_t l, const char* what) {
    snprintf(out, n, "model.layers.%lld.%s", (long long)l, what);
}

/* Replace parts[0..n) of every layer by one tensor `fused` of their rows concatenated (in order). */
static int fuse_rows(qx_store* s, const char* const* parts, int n, const char* fused, int drop_rows) {
    int64_t l;
    for (l = 0; l < s->config.n_layers; ++l) {
        char name[128], fname[128];
        int64_t rows = 0, cols = 0, ne[2], off = 0;
        int k, vec = 0;
        float* buf;
        for (k = 0; k < n; ++k) {
            const quarot_tensor* t;
            lname(name, sizeof name, l, parts[k]);
            t = qx_store_find(s, name);
            if (!t || t->dtype != QUAROT_DTYPE_F32) return k == 0 ? -1 : 0;   /* -1: no such tensors (no biases) */
            vec = t->ne[1] == 1;
            rows += vec ? t->ne[0] : t->ne[1];
            cols = vec ? 1 : t->ne[0];
        }
        rows -= drop_rows;
        buf = (float*)malloc((size_t)(rows * cols) * sizeof(float));
        if (!buf) return 0;
        for (k = 0; k < n; ++k) {
            const quarot_tensor* t;
            int64_t cnt;
            lname(name, sizeof name, l, parts[k]);
            t = qx_store_find(s, name);
            cnt = quarot_tensor_nelements(t);
            if (off + cnt > rows * cols) cnt = rows * cols - off;
            memcpy(buf + off, t->data, (size_t)cnt * sizeof(float));
            off += cnt;
            qx_store_remove(s, name);
        }
        lname(fname, sizeof fname, l, fused);
        ne[0] = vec ? rows : cols;
        ne[1] = rows;
        if (qx_store_add(s, fname, QUAROT_DTYPE_F32, vec ? 1 : 2, ne, buf, NULL) != QUAROT_OK) { free(buf); return 0; }
        free(buf);
    }
    return 1;
}

/* The separate model s as a phi3-style fused one (drop_rows: rows left off the last q|k|v). */
static int make_fused(const qx_store* s, qx_store* f, int drop_rows) {
    static const char* const qkv_w[3] = {"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight"};
    static const char* const qkv_b[3] = {"self_attn.q_proj.bias", "self_attn.k_proj.bias", "self_attn.v_proj.bias"};
    static const char* const gu_w[2] = {"mlp.gate_proj.weight", "mlp.up_proj.weight"};
    if (qx_store_clone(s, f) != QUAROT_OK) return 0;
    snprintf(f->config.arch, sizeof f->config.arch, "phi3");
    if (fuse_rows(f, qkv_w, 3, "self_attn.qkv_proj.weight", drop_rows) != 1) return 0;
    if (fuse_rows(f, qkv_b, 3, "self_attn.qkv_proj.bias", drop_rows) == 0) return 0;
    if (fuse_rows(f, gu_w, 2, "mlp.gate_up_proj.weight", 0) != 1) return 0;
    return 1;
}

static quarot_result rotate(qx_store* s, const quarot_rotate_desc* d0, quarot_online_list* list, char* err) {
    quarot_model m;
    qx_binding b;
    quarot_rotate_desc d = *d0;
    quarot_result r;
    d.online_out = list;
    qx_model_bind(&m, &b, s);
    r = quarot_rotate_model(&m, &d);
    snprintf(err, 256, "%s", m.error);
    if (r == QUAROT_OK) qx_model_sync(&m, s);
    return r;
}

/* Every tensor of f equals s's (fused ones: the concatenation of s's parts). */
static int same_as_fused(const qx_store* s, const qx_store* f) {
    int64_t i;
    for (i = 0; i < f->count; ++i) {
        const char* name = f->items[i].name;
        const quarot_tensor* t = &f->items[i].t;
        const char* parts[3];
        int n = 0, k;
        int64_t off = 0;
        char pre[128], pn[160];
        const char* p;
        if ((p = strstr(name, "self_attn.qkv_proj.")) != NULL) {
            parts[0] = "self_attn.q_proj."; parts[1] = "self_attn.k_proj."; parts[2] = "self_attn.v_proj."; n = 3;
        } else if ((p = strstr(name, "mlp.gate_up_proj.")) != NULL) {
            parts[0] = "mlp.gate_proj."; parts[1] = "mlp.up_proj."; n = 2;
        }
        if (n == 0) {
            const quarot_tensor* u = qx_store_find(s, name);
            if (!u || quarot_tensor_nbytes(u) != quarot_tensor_nbytes(t) ||
                memcmp(u->data, t->data, quarot_tensor_nbytes(t)) != 0) {
                printf("    %s differs\n", name);
                return 0;
            }
            continue;
        }
        snprintf(pre, sizeof pre, "%.*s", (int)(p - name), name);
        for (k = 0; k < n; ++k) {
            const quarot_tensor* u;
            snprintf(pn, sizeof pn, "%s%s%s", pre, parts[k], strrchr(name, '.') + 1);
            u = qx_store_find(s, pn);
            if (!u || off + quarot_tensor_nelements(u) > quarot_tensor_nelements(t) ||
                memcmp((const float*)t->data + off, u->data, (size_t)quarot_tensor_nelements(u) * sizeof(float)) != 0) {
                printf("    %s: the rows of %s differ\n", name, pn);
                return 0;
            }
            off += quarot_tensor_nelements(u);
        }
        if (off != quarot_tensor_nelements(t)) { printf("    %s: %lld of %lld elements compared\n", name, (long long)off, (long long)quarot_tensor_nelements(t)); return 0; }
    }
    return 1;
}

static void test_fused_equals_separate(void) {
    static const char* const archs[2] = {"llama", "qwen2"};   /* GQA untied; q/k/v biases, tied */
    int a, v;
    for (a = 0; a < 2; ++a) {
        qx_synth_desc sd;
        qx_store s;
        qx_err e;
        memset(&sd, 0, sizeof sd);
        sd.arch = archs[a];
        sd.seed = 31 + (uint64_t)a;
        if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { QT_CHECKF(0, "synth: %s", e.msg); continue; }
        for (v = 0; v < 3; ++v) {
            qx_store s2, f2;
            quarot_rotate_desc d;
            quarot_online_list ls, lf;
            char err[256];
            memset(&d, 0, sizeof d);
            d.seed = 7 + (uint64_t)v;
            if (v == 1) { d.online = 1; d.r3 = 1; }
            if (v == 2) { d.online = 1; d.max_tp_size = 2; d.block_size = 32; }
            quarot_online_list_init(&ls, NULL);
            quarot_online_list_init(&lf, NULL);
            if (qx_store_clone(&s, &s2) != QUAROT_OK || !make_fused(&s, &f2, 0)) { QT_CHECK(0); continue; }
            QT_CHECKF(rotate(&s2, &d, &ls, err) == QUAROT_OK, "%s separate: %s", archs[a], err);
            QT_CHECKF(rotate(&f2, &d, &lf, err) == QUAROT_OK, "%s fused: %s", archs[a], err);
            QT_CHECKF(same_as_fused(&s2, &f2), "%s variant %d: fused rotation differs from the separate one", archs[a], v);
            QT_EQ_INT(ls.count, lf.count);
            printf("    %-5s variant %d: fused q|k|v, gate|up rotated bit for bit as the separate linears (%lld hooks)\n",
                   archs[a], v, (long long)lf.count);
            quarot_online_list_free(&ls);
            quarot_online_list_free(&lf);
            qx_store_free(&s2);
            qx_store_free(&f2);
        }
        qx_store_free(&s);
    }
}

static void test_fused_plan_rows(void) {
    quarot_model_config c;
    quarot_plan p;
    const quarot_adapter* ad = quarot_adapter_find("phi3");
    int64_t i, r2 = 0;
    memset(&c, 0, sizeof c);
    c.hidden = 64; c.intermediate = 96; c.n_layers = 2; c.n_heads = 4; c.n_kv_heads = 2; c.head_dim = 16; c.vocab = 32;
    QT_CHECK(ad != NULL);
    if (!ad) return;
    quarot_plan_init(&p, NULL);
    QT_EQ_INT(ad->build(ad, &c, -1, &p), QUAROT_OK);
    QT_CHECK(strcmp(p.layers[1].v_proj, "model.layers.1.self_attn.qkv_proj.weight") == 0);
    QT_EQ_INT(p.layers[1].v_row0, (4 + 2) * 16);
    QT_EQ_INT(p.layers[1].v_rows, 2 * 16);
    QT_CHECK(strcmp(p.layers[0].up_proj, "model.layers.0.mlp.gate_up_proj.weight") == 0);
    QT_EQ_INT(p.layers[0].up_row0, 96);
    QT_EQ_INT(p.layers[0].up_rows, 96);
    for (i = 0; i < p.n_rotations; ++i)
        if (p.rotations[i].rotation == QUAROT_ROT_R2 && p.rotations[i].side == QUAROT_SIDE_OUTPUT) {
            QT_EQ_INT(p.rotations[i].rows_of, (4 + 2 * 2) * 16);
            ++r2;
        }
    QT_EQ_INT(r2, 2);
    QT_CHECK(strstr(quarot_adapter_list(), "phi3") != NULL);
    quarot_plan_free(&p);
}

static void test_fused_bad_split(void) {
    qx_synth_desc sd;
    qx_store s, f, ref;
    qx_err e;
    quarot_rotate_desc d;
    quarot_online_list l;
    char err[256];
    memset(&sd, 0, sizeof sd);
    sd.arch = "qwen2";
    sd.seed = 5;
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { QT_CHECKF(0, "synth: %s", e.msg); return; }
    if (!make_fused(&s, &f, 16) || qx_store_clone(&f, &ref) != QUAROT_OK) { QT_CHECK(0); qx_store_free(&s); return; }
    memset(&d, 0, sizeof d);
    quarot_online_list_init(&l, NULL);
    QT_EQ_INT(rotate(&f, &d, &l, err), QUAROT_ERR_SHAPE_MISMATCH);
    QT_CHECKF(strstr(err, "model.layers.0.self_attn.qkv_proj.weight") && strstr(err, "112 rows") && strstr(err, "128"),
              "message: %s", err);
    printf("    refused: %s\n", err);
    {   /* nothing changed */
        int64_t i, same = 1;
        for (i = 0; i < f.count; ++i) {
            const quarot_tensor* u = qx_store_find(&ref, f.items[i].name);
            same &= u && memcmp(u->data, f.items[i].t.data, quarot_tensor_nbytes(u)) == 0;
        }
        QT_CHECK(same);
    }
    quarot_online_list_free(&l);
    qx_store_free(&ref);
    qx_store_free(&f);
    qx_store_free(&s);
}

int main(void) {
    QT_RUN(test_fused_plan_rows);
    QT_RUN(test_fused_equals_separate);
    QT_RUN(test_fused_bad_split);
    return qt_finish("test_fused");
}
