/* llama2.c checkpoints: config and tensor placement against an independent layout computation
   (run.c's memory_map_weights / export.py's version1 order written out here), byte-identical round
   trips (v0 and v1, real and hand-made files), hostile headers and truncations, and the writer's
   atomicity (no overwrite without force, no temporary or output left after any failure). */
#include "formats/qx_llama2c.h"
#include "qt.h"

#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- helpers ---------------------------------------------------------------------------------- */

/* Entries of dir whose name contains "tmp" (the writer's temporaries are "<name>.tmp-<pid>-<n>"). */
static int count_temps(const char* dir) {
    DIR* d = opendir(dir);
    struct dirent* e;
    int n = 0;
    if (!d) return -1;
    while ((e = readdir(d)) != NULL) n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(d);
    return n;
}

static int file_exists(const char* p) { struct stat st; return stat(p, &st) == 0; }

static char tmpdir[256];
static const char* tmp_path(const char* name) {
    static char buf[512];
    if (!tmpdir[0]) {
        snprintf(tmpdir, sizeof tmpdir, "/tmp/qx_l2c_XXXXXX");
        if (!mkdtemp(tmpdir)) return NULL;
    }
    snprintf(buf, sizeof buf, "%s/%s", tmpdir, name);
    return buf;
}

/* Independent layout: float offset (after the header) of each tensor, as run.c / export.py lay
   them out. kind: 0 emb, 1 rms_att, 2 wq, 3 wk, 4 wv, 5 wo, 6 rms_ffn, 7 w1, 8 w2, 9 w3, 10 rms_final,
   11 freq_real, 12 freq_imag, 13 wcls. */
typedef struct dims { long dim, hid, L, H, KV, V, S; int shared; } dims;
static long layer_size(const dims* d, int kind) {
    long hd = d->dim / d->H, kv = hd * d->KV;
    switch (kind) {
        case 1: case 6: return d->dim;
        case 2: case 5: return d->dim * d->dim;
        case 3: case 4: return kv * d->dim;
        default: return d->dim * d->hid;   /* 7, 8, 9 */
    }
}
static long offset_of(const dims* d, int v1, int kind, long layer) {
    long off = 0, hd = d->dim / d->H;
    int k;
    if (!v1) {
        static const int order[] = { 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13 };
        for (k = 0; order[k] != kind; ++k) {
            int o = order[k];
            if (o == 0) off += d->V * d->dim;
            else if (o == 10) off += d->dim;
            else if (o == 11 || o == 12) off += d->S * hd / 2;
            else off += d->L * layer_size(d, o);
        }
    } else {
        static const int order[] = { 1, 6, 10, 0, 2, 3, 4, 5, 7, 8, 9, 13 };
        for (k = 0; order[k] != kind; ++k) {
            int o = order[k];
            if (o == 0) off += d->V * d->dim;
            else if (o == 10) off += d->dim;
            else off += d->L * layer_size(d, o);
        }
    }
    if (kind >= 1 && kind <= 9) off += layer * layer_size(d, kind);
    return off;
}
static long total_floats(const dims* d, int v1) {
    return offset_of(d, v1, 13, 0) + (d->shared ? 0 : d->V * d->dim);
}

static void put_i32(unsigned char* p, long v) {
    unsigned u = (unsigned)(int)v;
    p[0] = (unsigned char)u; p[1] = (unsigned char)(u >> 8); p[2] = (unsigned char)(u >> 16); p[3] = (unsigned char)(u >> 24);
}

/* A checkpoint whose float i holds the value i (exact below 2^24), so every element names its
   own file offset. */
static unsigned char* make_ckpt(const dims* d, int v1, size_t* size) {
    long hb = v1 ? 256 : 28, n = total_floats(d, v1), i;
    unsigned char* b = (unsigned char*)calloc(1, (size_t)(hb + 4 * n));
    long hv[7];
    hv[0] = d->dim; hv[1] = d->hid; hv[2] = d->L; hv[3] = d->H; hv[4] = d->KV; hv[5] = d->V; hv[6] = d->S;
    if (v1) {
        put_i32(b, 0x616b3432); put_i32(b + 4, 1);
        for (i = 0; i < 7; ++i) put_i32(b + 8 + 4 * i, hv[i]);
        b[36] = (unsigned char)d->shared;
    } else {
        if (!d->shared) hv[5] = -hv[5];
        for (i = 0; i < 7; ++i) put_i32(b + 4 * i, hv[i]);
    }
    for (i = 0; i < n; ++i) { float f = (float)i; memcpy(b + hb + 4 * i, &f, 4); }
    *size = (size_t)(hb + 4 * n);
    return b;
}

static float elem(const quarot_tensor* t, long row, long col) {
    return ((const float*)t->data)[row * t->ne[0] + col];
}

/* ---- real checkpoints ------------------------------------------------------------------------- */

static void check_real(const char* rel, const dims* d, long n_tensors) {
    const char* p0 = qt_shared_path(rel);
    char p[4096];
    unsigned char* raw;
    size_t n, wn;
    qx_store s, c;
    qx_err e;
    void* w;
    const quarot_tensor* t;
    const float* rf;
    const char* out;
    qx_l2c_read_opts ro;
    qx_l2c_write_opts wo;
    long hd = d->dim / d->H;
    if (!p0) { QT_SKIP("../shared model not found"); return; }
    snprintf(p, sizeof p, "%s", p0);
    raw = (unsigned char*)qt_read_file(p, &n);
    QT_CHECK(raw != NULL);
    rf = (const float*)(raw + 28);
    QT_OK(qx_l2c_read_file(p, NULL, &s, &e));
    QT_EQ_INT(s.config.hidden, d->dim);
    QT_EQ_INT(s.config.intermediate, d->hid);
    QT_EQ_INT(s.config.n_layers, d->L);
    QT_EQ_INT(s.config.n_heads, d->H);
    QT_EQ_INT(s.config.n_kv_heads, d->KV);
    QT_EQ_INT(s.config.vocab, d->V);
    QT_EQ_INT(s.config.max_seq, d->S);
    QT_EQ_INT(s.config.head_dim, hd);
    QT_EQ_INT(s.config.tied_embeddings, 1);
    QT_EQ_INT(s.config.rope_interleaved, 1);
    QT_EQ_INT(s.config.norm, QUAROT_NORM_RMS);
    QT_EQ_INT(s.config.mlp, QUAROT_MLP_GATED);
    QT_EQ_INT(s.config.act, QUAROT_ACT_SILU);
    QT_CHECK(s.config.norm_eps == 1e-5f);
    QT_NEAR(s.config.rope_theta, 10000, 0);
    QT_CHECK(strcmp(s.config.arch, "llama") == 0);
    QT_CHECK(strcmp(s.source_format, "llama2c-v0") == 0);
    QT_EQ_INT(s.count, n_tensors);
    QT_CHECK(qx_store_find(&s, "lm_head.weight") == NULL);
    /* views into the mapping, at run.c's offsets */
    t = qx_store_find(&s, "model.layers.2.self_attn.k_proj.weight");
    QT_CHECK(t && t->ne[0] == d->dim && t->ne[1] == d->KV * hd && t->ne[2] == 1);
    {   /* the mapping starts 28 header bytes before the embedding table, the first tensor */
        const quarot_tensor* emb = qx_store_find(&s, "model.embed_tokens.weight");
        QT_CHECK(emb && t && t->data == (const void*)((const char*)emb->data + 4 * offset_of(d, 0, 3, 2)));
    }
    QT_CHECK(t && elem(t, 3, 5) == rf[offset_of(d, 0, 3, 2) + 3 * d->dim + 5]);
    t = qx_store_find(&s, "model.layers.1.mlp.down_proj.weight");
    QT_CHECK(t && t->ne[0] == d->hid && t->ne[1] == d->dim);
    QT_CHECK(t && elem(t, d->dim - 1, d->hid - 1) == rf[offset_of(d, 0, 8, 1) + d->dim * d->hid - 1]);
    t = qx_store_find(&s, "llama2c.freq_cis_imag");
    QT_CHECK(t && t->ne[0] == hd / 2 && t->ne[1] == d->S);
    QT_CHECK(t && elem(t, 1, 0) == rf[offset_of(d, 0, 12, 0) + hd / 2]);
    QT_NEAR(t ? elem(t, 1, 0) : 0, sin(1.0), 1e-6);   /* pos 1, pair 0: angle 1 rad */

    /* write -> identical bytes, through memory and through a file (default format = the source's) */
    QT_OK(qx_l2c_write_memory(&s, NULL, &w, &wn, &e));
    QT_CHECK(wn == n && memcmp(w, raw, n) == 0);
    free(w);
    out = tmp_path("rt.bin");
    QT_OK(qx_l2c_write_file(&s, out, NULL, &e));
    {
        size_t on;
        unsigned char* ob = (unsigned char*)qt_read_file(out, &on);
        QT_CHECK(ob && on == n && memcmp(ob, raw, n) == 0);
        free(ob);
    }
    QT_EQ_INT(count_temps(tmpdir), 0);
    unlink(out);

    /* owned copies read the same values */
    memset(&ro, 0, sizeof ro);
    ro.copy = 1;
    QT_OK(qx_l2c_read_file(p, &ro, &c, &e));
    QT_EQ_INT(c.n_cleanups, 0);
    QT_CHECK(c.items[5].owned != NULL);
    QT_OK(qx_l2c_write_memory(&c, NULL, &w, &wn, &e));
    QT_CHECK(wn == n && memcmp(w, raw, n) == 0);
    free(w);
    qx_store_free(&c);

    /* v1: its layout, its round trip, and back to v0 (freq_cis recomputed: within 1e-6) */
    memset(&wo, 0, sizeof wo);
    wo.format = QX_L2C_V1;
    QT_OK(qx_l2c_write_memory(&s, &wo, &w, &wn, &e));
    QT_EQ_INT(wn, 256 + 4 * total_floats(d, 1));
    if (wn == (size_t)(256 + 4 * total_floats(d, 1))) {
        const float* vf = (const float*)((const char*)w + 256);
        void* w2;
        size_t wn2;
        QT_CHECK(((const unsigned char*)w)[36] == 1);
        QT_CHECK(vf[offset_of(d, 1, 0, 0) + 7] == rf[7]);                                 /* embedding */
        QT_CHECK(vf[offset_of(d, 1, 6, 1) + 2] == rf[offset_of(d, 0, 6, 1) + 2]);         /* rms_ffn[1] */
        QT_CHECK(vf[offset_of(d, 1, 9, d->L - 1) + 11] == rf[offset_of(d, 0, 9, d->L - 1) + 11]);   /* w3 */
        QT_OK(qx_l2c_read_memory(w, wn, "v1", NULL, &c, &e));
        QT_CHECK(strcmp(c.source_format, "llama2c-v1") == 0);
        QT_EQ_INT(c.count, n_tensors - 2);
        QT_OK(qx_l2c_write_memory(&c, NULL, &w2, &wn2, &e));   /* default: v1 again */
        QT_CHECK(wn2 == wn && memcmp(w2, w, wn) == 0);
        free(w2);
        wo.format = QX_L2C_V0;
        QT_OK(qx_l2c_write_memory(&c, &wo, &w2, &wn2, &e));
        QT_EQ_INT(wn2, n);
        if (wn2 == n) {
            long fr = offset_of(d, 0, 11, 0), fe = offset_of(d, 0, 13, 0), i;
            const float* bf = (const float*)((const char*)w2 + 28);
            double md = 0;
            QT_CHECK(memcmp(w2, raw, 28 + 4 * (size_t)fr) == 0);
            for (i = fr; i < fe; ++i) md = fabs(bf[i] - rf[i]) > md ? fabs(bf[i] - rf[i]) : md;
            QT_NEAR(md, 0, 1e-6);
        }
        free(w2);
        qx_store_free(&c);
    }
    free(w);
    qx_store_free(&s);
    free(raw);
}

static void test_stories260K(void) {
    dims d = { 64, 172, 5, 8, 4, 512, 512, 1 };
    check_real("models/stories260K/stories260K.bin", &d, 1 + 9 * 5 + 1 + 2);
}

static void test_aidreams260K(void) {
    dims d = { 64, 172, 4, 4, 4, 512, 128, 1 };
    check_real("models/aidreams260K/aidreams260K.bin", &d, 1 + 9 * 4 + 1 + 2);
}

/* ---- hand-made files -------------------------------------------------------------------------- */

static void test_handmade(void) {
    dims cases[3] = { { 8, 12, 2, 4, 2, 10, 3, 0 }, { 8, 12, 2, 4, 2, 10, 3, 1 }, { 6, 5, 1, 3, 1, 7, 2, 0 } };
    int ci, v1;
    for (ci = 0; ci < 3; ++ci)
        for (v1 = 0; v1 < 2; ++v1) {
            const dims* d = &cases[ci];
            size_t n, wn;
            unsigned char* b = make_ckpt(d, v1, &n);
            qx_store s;
            qx_err e;
            void* w;
            const quarot_tensor* t;
            long hd = d->dim / d->H;
            QT_OK(qx_l2c_read_memory(b, n, "hand", NULL, &s, &e));
            QT_EQ_INT(s.config.tied_embeddings, d->shared);
            QT_EQ_INT(s.count, 1 + 9 * d->L + 1 + (v1 ? 0 : 2) + (d->shared ? 0 : 1));
            t = qx_store_find(&s, "model.layers.1.self_attn.q_proj.weight");
            if (d->L > 1) QT_CHECK(t && elem(t, 2, 3) == (float)(offset_of(d, v1, 2, 1) + 2 * d->dim + 3));
            t = qx_store_find(&s, "model.layers.0.self_attn.v_proj.weight");
            QT_CHECK(t && t->ne[1] == d->KV * hd && elem(t, 1, 0) == (float)(offset_of(d, v1, 4, 0) + d->dim));
            t = qx_store_find(&s, "model.layers.0.self_attn.o_proj.weight");
            QT_CHECK(t && elem(t, 0, 1) == (float)(offset_of(d, v1, 5, 0) + 1));
            t = qx_store_find(&s, "model.layers.0.mlp.gate_proj.weight");
            QT_CHECK(t && t->ne[1] == d->hid && elem(t, 0, 0) == (float)offset_of(d, v1, 7, 0));
            t = qx_store_find(&s, "model.layers.0.mlp.up_proj.weight");
            QT_CHECK(t && elem(t, 0, 0) == (float)offset_of(d, v1, 9, 0));
            t = qx_store_find(&s, "model.layers.0.post_attention_layernorm.weight");
            QT_CHECK(t && t->ne[1] == 1 && elem(t, 0, 0) == (float)offset_of(d, v1, 6, 0));
            t = qx_store_find(&s, "model.norm.weight");
            QT_CHECK(t && elem(t, 0, 0) == (float)offset_of(d, v1, 10, 0));
            t = qx_store_find(&s, "model.embed_tokens.weight");
            QT_CHECK(t && t->ne[1] == d->V && elem(t, 0, 0) == (float)offset_of(d, v1, 0, 0));
            t = qx_store_find(&s, "lm_head.weight");
            QT_CHECK(d->shared ? t == NULL : (t && elem(t, 1, 0) == (float)(offset_of(d, v1, 13, 0) + d->dim)));
            QT_OK(qx_l2c_write_memory(&s, NULL, &w, &wn, &e));
            QT_CHECK(wn == n && memcmp(w, b, n) == 0);
            free(w);
            qx_store_free(&s);
            /* from an unaligned buffer: copied, same values */
            {
                unsigned char* u = (unsigned char*)malloc(n + 1);
                memcpy(u + 1, b, n);
                QT_OK(qx_l2c_read_memory(u + 1, n, "unaligned", NULL, &s, &e));
                QT_CHECK(s.items[0].owned != NULL);
                QT_OK(qx_l2c_write_memory(&s, NULL, &w, &wn, &e));
                QT_CHECK(wn == n && memcmp(w, b, n) == 0);
                free(w);
                qx_store_free(&s);
                free(u);
            }
            free(b);
        }
}

/* ---- hostile inputs --------------------------------------------------------------------------- */

static quarot_result read_mem(const unsigned char* b, size_t n, qx_err* e) {
    qx_store s;
    quarot_result r = qx_l2c_read_memory(b, n, "bad.bin", NULL, &s, e);
    qx_store_free(&s);
    return r;
}

static void test_truncated(void) {
    dims d = { 8, 12, 2, 4, 2, 10, 3, 0 };
    int v1, bad = 0;
    for (v1 = 0; v1 < 2; ++v1) {
        size_t n, cut;
        unsigned char* b = make_ckpt(&d, v1, &n);
        qx_err e;
        char want[64];
        for (cut = 0; cut < n; ++cut) {   /* a heap copy of exactly cut bytes: ASan sees any overread */
            unsigned char* c = (unsigned char*)malloc(cut ? cut : 1);
            quarot_result r;
            memcpy(c, b, cut);
            r = read_mem(c, cut, &e);
            if (r != QUAROT_ERR_PARSE || !strstr(e.msg, "bad.bin") || !strstr(e.msg, "truncated")) {
                if (bad++ < 3) printf("    cut %zu: %d %s\n", cut, (int)r, e.msg);
            }
            free(c);
        }
        /* the message gives expected and present sizes */
        read_mem(b, n - 5, &e);
        snprintf(want, sizeof want, "implies %zu bytes, %zu present", n, n - 5);
        QT_CHECK(strstr(e.msg, want) != NULL);
        /* one byte too many */
        {
            unsigned char* c = (unsigned char*)malloc(n + 1);
            memcpy(c, b, n);
            c[n] = 0;
            QT_ERR(read_mem(c, n + 1, &e), QUAROT_ERR_PARSE);
            QT_CHECK(strstr(e.msg, "trailing") != NULL);
            free(c);
        }
        free(b);
    }
    QT_EQ_INT(bad, 0);
}

static void test_truncated_file(void) {
    {   /* files that cannot be read at all */
        qx_store s;
        qx_err e;
        QT_ERR(qx_l2c_read_file("/nonexistent/model.bin", NULL, &s, &e), QUAROT_ERR_IO);
        QT_CHECK(strstr(e.msg, "/nonexistent/model.bin") != NULL);
        QT_CHECK(tmp_path("x") != NULL);
        QT_ERR(qx_l2c_read_file(tmpdir, NULL, &s, &e), QUAROT_ERR_IO);   /* a directory */
        QT_CHECK(strstr(e.msg, "not a regular file") != NULL);
    }
    {   /* the real file, truncated at assorted offsets, read from disk */
        const char* p0 = qt_shared_path("models/stories260K/stories260K.bin");
        size_t n, k;
        unsigned char* raw;
        qx_store s;
        qx_err e;
        const char* tp = tmp_path("trunc.bin");
        char tpath[512];
        if (!p0) { QT_SKIP("../shared/models/stories260K not found"); return; }
        snprintf(tpath, sizeof tpath, "%s", tp);
        raw = (unsigned char*)qt_read_file(p0, &n);
        for (k = 0; k < 40; ++k) {
            size_t cut = k < 30 ? k : n - 1 - (k - 30) * 4099;
            QT_CHECK(qt_write_file(tpath, raw, cut));
            QT_ERR(qx_l2c_read_file(tpath, NULL, &s, &e), QUAROT_ERR_PARSE);
            QT_CHECK(strstr(e.msg, "trunc.bin") != NULL);
        }
        unlink(tpath);
        free(raw);
    }
}

static void test_bad_headers(void) {
    dims d = { 8, 12, 2, 4, 2, 10, 3, 1 };
    size_t n0, n1;
    unsigned char* b0 = make_ckpt(&d, 0, &n0);
    unsigned char* b1 = make_ckpt(&d, 1, &n1);
    unsigned char h[256];
    qx_err e;
    int f;
    /* each field zero, then negative (vocab negative is legal in v0: it flips the classifier flag) */
    for (f = 0; f < 7; ++f) {
        memcpy(h, b0, 28);
        put_i32(h + 4 * f, 0);
        QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
        QT_CHECK(strstr(e.msg, "must be positive") != NULL);
        memcpy(h, b1, 256);
        put_i32(h + 8 + 4 * f, -3);
        QT_ERR(read_mem(h, 256, &e), QUAROT_ERR_PARSE);
        if (f == 5) continue;
        memcpy(h, b0, 28);
        put_i32(h + 4 * f, -7);
        QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
    }
    memcpy(h, b0, 28); put_i32(h + 20, (long)INT32_MIN);
    QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
    memcpy(h, b0, 28); put_i32(h + 12, 3);                        /* dim 8 % 3 heads */
    QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "multiple of n_heads") != NULL);
    memcpy(h, b0, 28); put_i32(h + 0, 12);                        /* head_dim 3: odd */
    QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
    memcpy(h, b0, 28); put_i32(h + 16, 3);                        /* 4 heads % 3 kv heads */
    QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
    memcpy(h, b0, 28); put_i32(h + 16, 8);                        /* more kv heads than heads */
    QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
    memcpy(h, b0, 28); put_i32(h + 24, 0x7fffffff);               /* seq_len beyond the sanity bound */
    QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
    /* dims whose products overflow 64 bits, and ones that merely imply an enormous file */
    memcpy(h, b0, 28);
    put_i32(h + 0, 0x7ffffffe); put_i32(h + 4, 0x7fffffff); put_i32(h + 8, 0x7fffffff);
    put_i32(h + 12, 1); put_i32(h + 16, 1);
    QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_OVERFLOW);
    QT_CHECK(strstr(e.msg, "overflow") != NULL);
    memcpy(h, b0, 28); put_i32(h + 0, 65536); put_i32(h + 12, 2); put_i32(h + 16, 1);
    QT_ERR(read_mem(h, 28, &e), QUAROT_ERR_PARSE);
    QT_CHECK(strstr(e.msg, "truncated") != NULL);
    /* versions, magic, flags, padding */
    memcpy(h, b1, 256); put_i32(h + 4, 2);
    QT_ERR(read_mem(h, 256, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "version 2") != NULL);
    memcpy(h, b1, 256); put_i32(h + 4, 7);
    QT_ERR(read_mem(h, 256, &e), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(strstr(e.msg, "unknown") != NULL);
    memcpy(h, b1, 256); put_i32(h + 4, 0);
    QT_ERR(read_mem(h, 256, &e), QUAROT_ERR_UNSUPPORTED);
    memcpy(h, b1, 256); put_i32(h, 0x616b3433);                   /* wrong magic: read as a v0 header */
    QT_ERR(read_mem(h, 256, &e), QUAROT_ERR_PARSE);
    memcpy(h, b1, 256); h[36] = 2;
    QT_ERR(read_mem(h, 256, &e), QUAROT_ERR_PARSE);
    memcpy(h, b1, 256); h[200] = 1;
    QT_ERR(read_mem(h, 256, &e), QUAROT_ERR_PARSE);
    QT_ERR(read_mem(b1, 6, &e), QUAROT_ERR_PARSE);                 /* magic, half a version */
    QT_ERR(read_mem(b1, 100, &e), QUAROT_ERR_PARSE);
    QT_ERR(read_mem(NULL, 0, &e), QUAROT_ERR_PARSE);
    QT_ERR(read_mem(NULL, 10, &e), QUAROT_ERR_INVALID_ARGUMENT);
    free(b0);
    free(b1);
}

/* ---- the writer ------------------------------------------------------------------------------- */

static void test_writer_safety(void) {
    dims d = { 32, 48, 2, 4, 2, 40, 8, 0 };   /* ~62 KB */
    size_t n;
    unsigned char* b = make_ckpt(&d, 0, &n);
    qx_store s;
    qx_err e;
    qx_l2c_write_opts wo;
    char out[512];
    unsigned char* ob;
    size_t on;
    snprintf(out, sizeof out, "%s", tmp_path("w.bin"));
    memset(&wo, 0, sizeof wo);
    QT_OK(qx_l2c_read_memory(b, n, "w", NULL, &s, &e));

    /* no overwrite without force; force replaces */
    QT_CHECK(qt_write_file(out, "old", 3));
    QT_ERR(qx_l2c_write_file(&s, out, &wo, &e), QUAROT_ERR_IO);
    QT_CHECK(strstr(e.msg, "exists") != NULL && strstr(e.msg, "w.bin") != NULL);
    ob = (unsigned char*)qt_read_file(out, &on);
    QT_CHECK(ob && on == 3);
    free(ob);
    wo.force = 1;
    QT_OK(qx_l2c_write_file(&s, out, &wo, &e));
    ob = (unsigned char*)qt_read_file(out, &on);
    QT_CHECK(ob && on == n && memcmp(ob, b, n) == 0);
    free(ob);
    unlink(out);
    wo.force = 0;
    QT_EQ_INT(count_temps(tmpdir), 0);

    /* a directory that does not exist */
    {
        char bad[600];
        snprintf(bad, sizeof bad, "%s/missing/dir/w.bin", tmpdir);
        QT_ERR(qx_l2c_write_file(&s, bad, &wo, &e), QUAROT_ERR_IO);
        QT_CHECK(strstr(e.msg, "missing/dir/w.bin") != NULL);
    }
    /* a directory without write permission (meaningless as root, who may write anyway) */
    if (geteuid() != 0) {
        char sub[600], p2[700];
        snprintf(sub, sizeof sub, "%s/ro", tmpdir);
        mkdir(sub, 0500);
        snprintf(p2, sizeof p2, "%s/w.bin", sub);
        QT_ERR(qx_l2c_write_file(&s, p2, &wo, &e), QUAROT_ERR_IO);
        QT_CHECK(!file_exists(p2) && count_temps(sub) == 0);
        rmdir(sub);
    }

    /* a failure in the middle of writing: the file size limit stops it after 4 KB */
    {
        struct rlimit old, lim;
        void (*prev)(int) = signal(SIGXFSZ, SIG_IGN);
        QT_CHECK(getrlimit(RLIMIT_FSIZE, &old) == 0);
        lim = old;
        lim.rlim_cur = 4096;
        if (setrlimit(RLIMIT_FSIZE, &lim) == 0) {
            quarot_result r = qx_l2c_write_file(&s, out, &wo, &e);
            setrlimit(RLIMIT_FSIZE, &old);
            QT_ERR(r, QUAROT_ERR_IO);
            QT_CHECK(strstr(e.msg, "write failed") != NULL);
        }
        signal(SIGXFSZ, prev);
        QT_CHECK(!file_exists(out));
        QT_EQ_INT(count_temps(tmpdir), 0);
    }

    /* a store missing a tensor / with a wrong shape / an extra tensor / an unsupported config:
       refused before any file is created */
    {
        qx_store c;
        int64_t ne[2] = { 3, 3 };
        QT_OK(qx_store_clone(&s, &c));
        QT_CHECK(qx_store_remove(&c, "model.layers.1.mlp.up_proj.weight") == 1);
        QT_ERR(qx_l2c_write_file(&c, out, &wo, &e), QUAROT_ERR_NOT_FOUND);
        QT_CHECK(strstr(e.msg, "model.layers.1.mlp.up_proj.weight") != NULL);
        QT_OK(qx_store_add(&c, "model.layers.1.mlp.up_proj.weight", QUAROT_DTYPE_F32, 2, ne, NULL, NULL));
        QT_ERR(qx_l2c_write_file(&c, out, &wo, &e), QUAROT_ERR_SHAPE_MISMATCH);
        qx_store_free(&c);
        QT_OK(qx_store_clone(&s, &c));
        QT_OK(qx_store_add(&c, "model.layers.0.self_attn.q_proj.bias", QUAROT_DTYPE_F32, 1, ne, NULL, NULL));
        QT_ERR(qx_l2c_write_file(&c, out, &wo, &e), QUAROT_ERR_UNSUPPORTED);
        QT_CHECK(strstr(e.msg, "q_proj.bias") != NULL);
        wo.allow_extra = 1;
        QT_OK(qx_l2c_write_file(&c, out, &wo, &e));   /* dropped on request */
        wo.allow_extra = 0;
        ob = (unsigned char*)qt_read_file(out, &on);
        QT_CHECK(ob && on == n && memcmp(ob, b, n) == 0);
        free(ob);
        unlink(out);
        qx_store_remove(&c, "model.layers.0.self_attn.q_proj.bias");
        c.config.norm_eps = 1e-6f;
        QT_ERR(qx_l2c_write_file(&c, out, &wo, &e), QUAROT_ERR_UNSUPPORTED);
        c.config.norm_eps = 1e-5f;
        c.config.rope_interleaved = 0;
        QT_ERR(qx_l2c_write_file(&c, out, &wo, &e), QUAROT_ERR_UNSUPPORTED);
        c.config.rope_interleaved = 1;
        c.config.head_dim = 16;
        QT_ERR(qx_l2c_write_file(&c, out, &wo, &e), QUAROT_ERR_UNSUPPORTED);
        c.config.head_dim = 0;   /* 0 = hidden / n_heads */
        c.config.max_seq = 0;
        QT_ERR(qx_l2c_write_file(&c, out, &wo, &e), QUAROT_ERR_INVALID_ARGUMENT);
        c.config.max_seq = 8;
        wo.format = (qx_l2c_format)9;
        QT_ERR(qx_l2c_write_file(&c, out, &wo, &e), QUAROT_ERR_INVALID_ARGUMENT);
        wo.format = QX_L2C_DEFAULT;
        QT_CHECK(!file_exists(out));
        QT_EQ_INT(count_temps(tmpdir), 0);
        /* a separate classifier is decided by lm_head's presence: without it, a shared one */
        qx_store_remove(&c, "lm_head.weight");
        QT_OK(qx_l2c_write_file(&c, out, &wo, &e));
        ob = (unsigned char*)qt_read_file(out, &on);
        QT_CHECK(ob && on == n - 4 * (size_t)(d.V * d.dim) && ob[20] == 40 && memcmp(ob + 28, b + 28, on - 28) == 0);
        free(ob);
        unlink(out);
        qx_store_free(&c);
    }
    qx_store_free(&s);
    free(b);
}

/* f16 / bf16 / f64 stores are written as float32; a writable mapping never reaches the file. */
static void test_dtypes_and_mapping(void) {
    dims d = { 8, 12, 2, 4, 2, 10, 3, 0 };
    size_t n, wn, i;
    unsigned char* b = make_ckpt(&d, 0, &n);
    qx_store s, c;
    qx_err e;
    void* w;
    char path[512];
    qx_l2c_read_opts ro;
    QT_OK(qx_l2c_read_memory(b, n, "dt", NULL, &s, &e));
    /* f64: exact round trip */
    QT_OK(qx_store_clone(&s, &c));
    QT_OK(qx_store_convert(&c, QUAROT_DTYPE_F64));
    QT_CHECK(qx_store_find(&c, "model.norm.weight")->dtype == QUAROT_DTYPE_F64);
    QT_OK(qx_l2c_write_memory(&c, NULL, &w, &wn, &e));
    QT_CHECK(wn == n && memcmp(w, b, n) == 0);
    free(w);
    qx_store_free(&c);
    /* f16 / bf16: each float comes back as its rounded value */
    {
        quarot_dtype dts[2] = { QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16 };
        int k;
        for (k = 0; k < 2; ++k) {
            int bad = 0;
            QT_OK(qx_store_clone(&s, &c));
            QT_OK(qx_store_convert(&c, dts[k]));
            QT_OK(qx_l2c_write_memory(&c, NULL, &w, &wn, &e));
            QT_EQ_INT(wn, n);
            for (i = 28; wn == n && i < n; i += 4) {
                float x, y, r;
                uint16_t hbits;
                memcpy(&x, b + i, 4);
                memcpy(&y, (const char*)w + i, 4);
                if (k == 0) { quarot_f32_to_f16(&x, &hbits, 1); quarot_f16_to_f32(&hbits, &r, 1); }
                else { quarot_f32_to_bf16(&x, &hbits, 1); quarot_bf16_to_f32(&hbits, &r, 1); }
                bad += y != r;
            }
            QT_EQ_INT(bad, 0);
            free(w);
            qx_store_free(&c);
        }
    }
    qx_store_free(&s);
    /* copy-on-write mapping: edit a view in place, the file keeps its bytes */
    snprintf(path, sizeof path, "%s", tmp_path("cow.bin"));
    QT_CHECK(qt_write_file(path, b, n));
    memset(&ro, 0, sizeof ro);
    ro.writable = 1;
    QT_OK(qx_l2c_read_file(path, &ro, &s, &e));
    {
        quarot_tensor* t = qx_store_find(&s, "model.norm.weight");
        unsigned char* after;
        size_t an;
        ((float*)t->data)[0] = 1234.5f;
        QT_OK(qx_l2c_write_memory(&s, NULL, &w, &wn, &e));
        QT_CHECK(wn == n && memcmp(w, b, n) != 0);
        free(w);
        after = (unsigned char*)qt_read_file(path, &an);
        QT_CHECK(after && an == n && memcmp(after, b, n) == 0);
        free(after);
    }
    qx_store_free(&s);
    unlink(path);
    free(b);
}

int main(void) {
    QT_RUN(test_stories260K);
    QT_RUN(test_aidreams260K);
    QT_RUN(test_handmade);
    QT_RUN(test_truncated);
    QT_RUN(test_truncated_file);
    QT_RUN(test_bad_headers);
    QT_RUN(test_writer_safety);
    QT_RUN(test_dtypes_and_mapping);
    if (tmpdir[0]) rmdir(tmpdir);
    return qt_finish("test_llama2c");
}
