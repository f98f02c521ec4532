/* qx_llama2c.c - see qx_llama2c.h. The layouts follow llama2.c's run.c (memory_map_weights) and
   export.py (legacy_export, version1_export).

   A checkpoint is a header plus a list of segments; both the reader and the writer walk the same
   segment plan (name, shape, float offset), built from a checked header, so the two can never
   disagree about where a tensor lives. Every size is computed in uint64 with overflow checks and the
   file size must equal header + 4 * n_floats before any tensor is touched. */
#ifndef _POSIX_C_SOURCE
#define _POSIX_C_SOURCE 200809L   /* pread, lstat, link, fsync */
#endif
#include "formats/qx_llama2c.h"
#include "support/qx_file.h"
#include "support/qx_str.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define QX_L2C_MAGIC 0x616b3432u
#define QX_L2C_V0_HEADER 28u
#define QX_L2C_V1_HEADER 256u
#define QX_L2C_MAX_SEQ (1 << 24)   /* a sanity bound: v1 files carry no data sized by seq_len */

/* ---- small helpers ---------------------------------------------------------------------------- */

static int32_t qx__rd_i32(const unsigned char* p) {
    uint32_t u = qx_str_le32(p);
    int32_t v;
    memcpy(&v, &u, 4);   /* two's complement reinterpretation without implementation-defined casts */
    return v;
}
static void qx__wr_u32(unsigned char* p, uint32_t v) {
    p[0] = (unsigned char)v; p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16); p[3] = (unsigned char)(v >> 24);
}
static void qx__wr_i32(unsigned char* p, int32_t v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    qx__wr_u32(p, u);
}
static int qx__host_le(void) {
    const uint32_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}
/* *acc += a * b (and a * b * c) in uint64, 0 on overflow. */
static int qx__madd(uint64_t* acc, uint64_t a, uint64_t b) {
    uint64_t p;
    if (a != 0 && b > UINT64_MAX / a) return 0;
    p = a * b;
    if (p > UINT64_MAX - *acc) return 0;
    *acc += p;
    return 1;
}
static int qx__madd3(uint64_t* acc, uint64_t a, uint64_t b, uint64_t c) {
    if (a != 0 && b > UINT64_MAX / a) return 0;
    return qx__madd(acc, a * b, c);
}

/* ---- header ----------------------------------------------------------------------------------- */

quarot_result qx_l2c_parse_header(const void* data, size_t size, const char* name, qx_l2c_header* h, qx_err* err) {
    const unsigned char* p = (const unsigned char*)data;
    const char* fields[7] = { "dim", "hidden_dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "seq_len" };
    int32_t v[7];
    uint64_t dim, hid, L, kv_dim, hd, per_layer = 0, n = 0;
    size_t off;
    int i;
    if (!name) name = "<memory>";
    if (!h || (!data && size)) { qx_err_set(err, "%s: invalid argument", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    memset(h, 0, sizeof *h);
    if (size < 4) {
        qx_err_set(err, "%s: truncated header: %zu bytes present, at least 28 expected", name, size);
        return QUAROT_ERR_PARSE;
    }
    if (qx_str_le32(p) == QX_L2C_MAGIC) {
        int32_t version;
        if (size < 8) {
            qx_err_set(err, "%s: truncated header: %zu bytes present, 256 expected", name, size);
            return QUAROT_ERR_PARSE;
        }
        version = qx__rd_i32(p + 4);
        if (version == 2) {
            qx_err_set(err, "%s: llama2.c version 2 (int8 Q8_0) checkpoints are not supported; export float32 "
                            "(export.py --version 0 or 1)", name);
            return QUAROT_ERR_UNSUPPORTED;
        }
        if (version != 1) {
            qx_err_set(err, "%s: unknown llama2.c checkpoint version %d (only 0 and 1 are supported)", name, (int)version);
            return QUAROT_ERR_UNSUPPORTED;
        }
        if (size < QX_L2C_V1_HEADER) {
            qx_err_set(err, "%s: truncated header: %zu bytes present, 256 expected", name, size);
            return QUAROT_ERR_PARSE;
        }
        h->format = QX_L2C_V1;
        h->header_bytes = QX_L2C_V1_HEADER;
        off = 8;
    } else {
        if (size < QX_L2C_V0_HEADER) {
            qx_err_set(err, "%s: truncated header: %zu bytes present, 28 expected", name, size);
            return QUAROT_ERR_PARSE;
        }
        h->format = QX_L2C_V0;
        h->header_bytes = QX_L2C_V0_HEADER;
        off = 0;
    }
    for (i = 0; i < 7; ++i) v[i] = qx__rd_i32(p + off + 4 * (size_t)i);

    /* The classifier flag: v0 encodes it in the sign of vocab_size, v1 in a byte after the params. */
    if (h->format == QX_L2C_V0) {
        if (v[5] < 0 && v[5] != INT32_MIN) { v[5] = -v[5]; h->shared_classifier = 0; }
        else h->shared_classifier = 1;
    } else {
        if (p[36] > 1) {
            qx_err_set(err, "%s: shared_classifier flag is %u (0 or 1 expected)", name, (unsigned)p[36]);
            return QUAROT_ERR_PARSE;
        }
        h->shared_classifier = p[36];
        for (off = 37; off < QX_L2C_V1_HEADER; ++off)
            if (p[off]) {
                qx_err_set(err, "%s: header padding byte %zu is %u (zeros expected in version 1)", name, off, (unsigned)p[off]);
                return QUAROT_ERR_PARSE;
            }
    }
    for (i = 0; i < 7; ++i)
        if (v[i] <= 0) {
            qx_err_set(err, "%s: header says %s %d (must be positive)", name, fields[i], (int)v[i]);
            return QUAROT_ERR_PARSE;
        }
    h->dim = v[0]; h->hidden_dim = v[1]; h->n_layers = v[2]; h->n_heads = v[3];
    h->n_kv_heads = v[4]; h->vocab_size = v[5]; h->seq_len = v[6];
    if (h->dim % h->n_heads != 0) {
        qx_err_set(err, "%s: dim %d is not a multiple of n_heads %d", name, (int)h->dim, (int)h->n_heads);
        return QUAROT_ERR_PARSE;
    }
    if ((h->dim / h->n_heads) % 2 != 0) {
        qx_err_set(err, "%s: head_dim %d (dim %d / n_heads %d) is odd; RoPE rotates pairs", name,
                   (int)(h->dim / h->n_heads), (int)h->dim, (int)h->n_heads);
        return QUAROT_ERR_PARSE;
    }
    if (h->n_kv_heads > h->n_heads || h->n_heads % h->n_kv_heads != 0) {
        qx_err_set(err, "%s: n_heads %d is not a multiple of n_kv_heads %d", name, (int)h->n_heads, (int)h->n_kv_heads);
        return QUAROT_ERR_PARSE;
    }
    if (h->seq_len > QX_L2C_MAX_SEQ) {
        qx_err_set(err, "%s: seq_len %d exceeds the sanity bound %d", name, (int)h->seq_len, QX_L2C_MAX_SEQ);
        return QUAROT_ERR_PARSE;
    }

    /* n_floats = vocab*dim + L * (2*dim + 2*dim*dim + 2*kv_dim*dim + 3*hidden*dim) + dim
                  [+ seq_len * head_dim (v0 freq_cis)] [+ vocab*dim (wcls)] */
    dim = (uint64_t)h->dim; hid = (uint64_t)h->hidden_dim; L = (uint64_t)h->n_layers;
    hd = dim / (uint64_t)h->n_heads;
    kv_dim = hd * (uint64_t)h->n_kv_heads;
    if (!qx__madd(&per_layer, 2, dim) || !qx__madd3(&per_layer, 2, dim, dim) || !qx__madd3(&per_layer, 2, kv_dim, dim) ||
        !qx__madd3(&per_layer, 3, hid, dim) || !qx__madd(&n, L, per_layer) ||
        !qx__madd(&n, (uint64_t)h->vocab_size, dim) || !qx__madd(&n, 1, dim) ||
        (h->format == QX_L2C_V0 && !qx__madd(&n, (uint64_t)h->seq_len, hd)) ||
        (!h->shared_classifier && !qx__madd(&n, (uint64_t)h->vocab_size, dim)) ||
        n > (UINT64_MAX - h->header_bytes) / 4) {
        qx_err_set(err, "%s: the sizes in the header overflow (dim %d, hidden_dim %d, n_layers %d, vocab %d)", name,
                   (int)h->dim, (int)h->hidden_dim, (int)h->n_layers, (int)h->vocab_size);
        return QUAROT_ERR_OVERFLOW;
    }
    h->n_floats = n;
    h->expected_size = h->header_bytes + 4 * n;
    return QUAROT_OK;
}

/* ---- the segment plan ------------------------------------------------------------------------- */

typedef struct qx_l2c_seg {
    char name[80];
    int64_t ne0, ne1;     /* [ne1][ne0]; ne1 = 1 for vectors */
    uint64_t off;         /* in floats from the end of the header */
} qx_l2c_seg;

typedef struct qx_l2c_plan {
    qx_l2c_seg* seg;
    int64_t n, cap;
    uint64_t pos;         /* running float offset */
} qx_l2c_plan;

static int qx__plan_push(qx_l2c_plan* pl, const char* name, int64_t ne0, int64_t ne1) {
    qx_l2c_seg* s;
    if (pl->n == pl->cap) return 0;   /* the capacity is exact; see qx__plan_build */
    s = &pl->seg[pl->n++];
    snprintf(s->name, sizeof s->name, "%s", name);
    s->ne0 = ne0; s->ne1 = ne1; s->off = pl->pos;
    pl->pos += (uint64_t)ne0 * (uint64_t)ne1;   /* no overflow: bounded by the checked n_floats */
    return 1;
}

/* One per-layer block ("layers.{i}.<suffix>") for every layer. */
static int qx__plan_layers(qx_l2c_plan* pl, int64_t L, const char* suffix, int64_t ne0, int64_t ne1) {
    char nm[80];
    int64_t i;
    for (i = 0; i < L; ++i) {
        snprintf(nm, sizeof nm, "model.layers.%lld.%s", (long long)i, suffix);
        if (!qx__plan_push(pl, nm, ne0, ne1)) return 0;
    }
    return 1;
}

static const char* const qx__l2c_names[9] = {
    "input_layernorm.weight", "self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
    "self_attn.o_proj.weight", "post_attention_layernorm.weight", "mlp.gate_proj.weight", "mlp.down_proj.weight",
    "mlp.up_proj.weight"
};

/* Segments in file order for h's format. Returns QUAROT_OK or QUAROT_ERR_OUT_OF_MEMORY. */
static quarot_result qx__plan_build(const qx_l2c_header* h, qx_l2c_plan* pl) {
    int64_t L = h->n_layers, dim = h->dim, hid = h->hidden_dim, hd = h->dim / h->n_heads;
    int64_t kv = hd * h->n_kv_heads;
    /* the 9 per-layer tensors with their [ne1][ne0] shapes, in v0 order */
    int64_t shp[9][2];
    int ok = 1, k;
    memset(pl, 0, sizeof *pl);
    shp[0][0] = dim; shp[0][1] = 1;   shp[1][0] = dim; shp[1][1] = dim;
    shp[2][0] = dim; shp[2][1] = kv;  shp[3][0] = dim; shp[3][1] = kv;
    shp[4][0] = dim; shp[4][1] = dim; shp[5][0] = dim; shp[5][1] = 1;
    shp[6][0] = dim; shp[6][1] = hid; shp[7][0] = hid; shp[7][1] = dim;
    shp[8][0] = dim; shp[8][1] = hid;
    pl->cap = 9 * L + 5;
    pl->seg = (qx_l2c_seg*)malloc((size_t)pl->cap * sizeof *pl->seg);
    if (!pl->seg) return QUAROT_ERR_OUT_OF_MEMORY;
    if (h->format == QX_L2C_V0) {
        /* run.c: embedding, rms_att, wq, wk, wv, wo, rms_ffn, w1, w2, w3, rms_final, freq_cis, [wcls] */
        ok = qx__plan_push(pl, "model.embed_tokens.weight", dim, h->vocab_size);
        for (k = 0; k < 9 && ok; ++k) ok = qx__plan_layers(pl, L, qx__l2c_names[k], shp[k][0], shp[k][1]);
        ok = ok && qx__plan_push(pl, "model.norm.weight", dim, 1);
        ok = ok && qx__plan_push(pl, "llama2c.freq_cis_real", hd / 2, h->seq_len);
        ok = ok && qx__plan_push(pl, "llama2c.freq_cis_imag", hd / 2, h->seq_len);
    } else {
        /* export.py version1: norms first, then the embedding, then the matrices, [wcls] */
        static const int mats[7] = { 1, 2, 3, 4, 6, 7, 8 };   /* wq wk wv wo w1 w2 w3 */
        ok = qx__plan_layers(pl, L, qx__l2c_names[0], dim, 1) && qx__plan_layers(pl, L, qx__l2c_names[5], dim, 1);
        ok = ok && qx__plan_push(pl, "model.norm.weight", dim, 1);
        ok = ok && qx__plan_push(pl, "model.embed_tokens.weight", dim, h->vocab_size);
        for (k = 0; k < 7 && ok; ++k) ok = qx__plan_layers(pl, L, qx__l2c_names[mats[k]], shp[mats[k]][0], shp[mats[k]][1]);
    }
    if (ok && !h->shared_classifier) ok = qx__plan_push(pl, "lm_head.weight", dim, h->vocab_size);
    if (!ok || pl->pos != h->n_floats) {   /* cannot happen: the header check sized the same list */ free(pl->seg); pl->seg = NULL; return QUAROT_ERR_INTERNAL; }
    return QUAROT_OK;
}

/* ---- reading ---------------------------------------------------------------------------------- */

static void qx__fill_config(const qx_l2c_header* h, quarot_model_config* c) {
    memset(c, 0, sizeof *c);
    snprintf(c->arch, sizeof c->arch, "llama");
    c->hidden = h->dim;
    c->intermediate = h->hidden_dim;
    c->n_layers = h->n_layers;
    c->n_heads = h->n_heads;
    c->n_kv_heads = h->n_kv_heads;
    c->head_dim = h->dim / h->n_heads;
    c->vocab = h->vocab_size;
    c->max_seq = h->seq_len;
    c->norm = QUAROT_NORM_RMS;
    c->mlp = QUAROT_MLP_GATED;
    c->act = QUAROT_ACT_SILU;
    c->norm_eps = 1e-5f;
    c->rope_theta = 10000.0f;
    c->rope_interleaved = 1;    /* run.c rotates (q[2i], q[2i+1]) */
    c->tied_embeddings = h->shared_classifier;
}

/* Fill an initialized store from a whole checkpoint in memory. */
static quarot_result qx__load(const unsigned char* base, size_t size, const char* name, int copy, qx_store* out,
                              qx_err* err) {
    qx_l2c_header h;
    qx_l2c_plan pl;
    quarot_result r;
    const unsigned char* fdata;
    int64_t i;
    r = qx_l2c_parse_header(base, size, name, &h, err);
    if (r != QUAROT_OK) return r;
    if ((uint64_t)size != h.expected_size) {
        qx_err_set(err, "%s: %s: the header implies %llu bytes, %zu present", name,
                   (uint64_t)size < h.expected_size ? "truncated" : "trailing bytes",
                   (unsigned long long)h.expected_size, size);
        return QUAROT_ERR_PARSE;
    }
    if (!qx__host_le()) {
        qx_err_set(err, "%s: llama2.c checkpoints are little-endian; this host is not", name);
        return QUAROT_ERR_UNSUPPORTED;
    }
    fdata = base + h.header_bytes;
    if (((uintptr_t)fdata & 3u) != 0) copy = 1;   /* unaligned floats: copy rather than view */
    r = qx__plan_build(&h, &pl);
    if (r != QUAROT_OK) { qx_err_set(err, "%s: out of memory", name); return r; }
    for (i = 0; i < pl.n && r == QUAROT_OK; ++i) {
        const qx_l2c_seg* s = &pl.seg[i];
        int64_t ne[2];
        const void* src = fdata + 4 * s->off;
        ne[0] = s->ne0; ne[1] = s->ne1;
        if (copy) {
            r = qx_store_add(out, s->name, QUAROT_DTYPE_F32, s->ne1 > 1 ? 2 : 1, ne, src, NULL);
        } else {
            quarot_tensor t;
            r = quarot_tensor_init(&t, (void*)(uintptr_t)src, QUAROT_DTYPE_F32, s->ne1 > 1 ? 2 : 1, ne);
            if (r == QUAROT_OK) r = qx_store_add_view(out, s->name, &t);
        }
        if (r != QUAROT_OK) qx_err_set(err, "%s: cannot add tensor %s: %s", name, s->name, quarot_result_string(r));
    }
    free(pl.seg);
    if (r != QUAROT_OK) return r;
    qx__fill_config(&h, &out->config);
    snprintf(out->source_format, sizeof out->source_format, "%s", h.format == QX_L2C_V1 ? "llama2c-v1" : "llama2c-v0");
    return QUAROT_OK;
}

quarot_result qx_l2c_read_memory(const void* data, size_t size, const char* name, const qx_l2c_read_opts* opts,
                                 qx_store* out, qx_err* err) {
    quarot_result r;
    if (!name) name = "<memory>";
    if (!out) { qx_err_set(err, "%s: no output store", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    qx_store_init(out);
    if (!data && size) { qx_err_set(err, "%s: NULL buffer", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    r = qx__load((const unsigned char*)data, size, name, opts ? opts->copy : 0, out, err);
    if (r != QUAROT_OK) qx_store_free(out);
    return r;
}

quarot_result qx_l2c_read_file(const char* path, const qx_l2c_read_opts* opts, qx_store* out, qx_err* err) {
    struct stat st;
    void* map;
    size_t size;
    int fd, copy = opts ? opts->copy : 0, writable = opts ? opts->writable : 0;
    quarot_result r;
    if (!out) { qx_err_set(err, "%s: no output store", path ? path : "(null)"); return QUAROT_ERR_INVALID_ARGUMENT; }
    qx_store_init(out);
    if (!path) { qx_err_set(err, "(null): no path"); return QUAROT_ERR_INVALID_ARGUMENT; }
    fd = open(path, O_RDONLY);
    if (fd < 0) { qx_err_set(err, "%s: cannot open: %s", path, strerror(errno)); return QUAROT_ERR_IO; }
    if (fstat(fd, &st) != 0) {
        qx_err_set(err, "%s: cannot stat: %s", path, strerror(errno));
        close(fd);
        return QUAROT_ERR_IO;
    }
    if (!S_ISREG(st.st_mode)) { qx_err_set(err, "%s: not a regular file", path); close(fd); return QUAROT_ERR_IO; }
    if ((uint64_t)st.st_size > (uint64_t)SIZE_MAX) { qx_err_set(err, "%s: too large to map", path); close(fd); return QUAROT_ERR_OVERFLOW; }
    size = (size_t)st.st_size;
    if (size < QX_L2C_V0_HEADER) {   /* mmap cannot map an empty file; the parser words the error */
        unsigned char head[QX_L2C_V0_HEADER];
        ssize_t got = size ? pread(fd, head, size, 0) : 0;
        close(fd);
        if (got < 0 || (size_t)got != size) { qx_err_set(err, "%s: read failed", path); return QUAROT_ERR_IO; }
        return qx__load(head, size, path, 1, out, err);   /* always an error: shorter than any header */
    }
    map = mmap(NULL, size, PROT_READ | (writable && !copy ? PROT_WRITE : 0), MAP_PRIVATE, fd, 0);
    close(fd);   /* the mapping stays valid without the descriptor */
    if (map == MAP_FAILED) { qx_err_set(err, "%s: mmap failed: %s", path, strerror(errno)); return QUAROT_ERR_IO; }
    if (copy) {
        r = qx__load((const unsigned char*)map, size, path, 1, out, err);
        munmap(map, size);
    } else {
        qx_map* m = (qx_map*)malloc(sizeof *m);   /* unmapped by qx_store_free, after the views */
        if (m) {
            m->addr = map;
            m->len = size;
            m->path = (char*)malloc(strlen(path) + 1);   /* NULL: readers fault the pages in instead */
            if (m->path) memcpy(m->path, path, strlen(path) + 1);
        }
        r = m ? qx_store_on_free(out, qx_unmap_and_free, m) : QUAROT_ERR_OUT_OF_MEMORY;
        if (r != QUAROT_OK) { if (m) free(m->path); free(m); munmap(map, size); qx_err_set(err, "%s: out of memory", path); }
        else r = qx__load((const unsigned char*)map, size, path, 0, out, err);
    }
    if (r != QUAROT_OK) qx_store_free(out);
    return r;
}

/* ---- writing ---------------------------------------------------------------------------------- */

/* Where the bytes go: a file descriptor behind a buffer, or a growing memory block. */
typedef struct qx_sink {
    int fd;                       /* >= 0: file */
    unsigned char* buf;
    size_t len, cap;
    int is_mem;
    int failed_errno;             /* file: errno of the first failed write */
} qx_sink;

static int qx__sink_flush(qx_sink* k) {
    size_t done = 0;
    if (k->is_mem) return 1;
    while (done < k->len) {
        ssize_t w = write(k->fd, k->buf + done, k->len - done);
        if (w < 0) {
            if (errno == EINTR) continue;
            k->failed_errno = errno;
            return 0;
        }
        if (w == 0) { k->failed_errno = EIO; return 0; }
        done += (size_t)w;
    }
    k->len = 0;
    return 1;
}

static int qx__sink_write(qx_sink* k, const void* p, size_t n) {
    const unsigned char* b = (const unsigned char*)p;
    while (n > 0) {
        size_t room, m;
        if (k->len == k->cap) {
            if (k->is_mem) {   /* grow (the writer reserves the exact size up front; this is a fallback) */
                size_t nc = k->cap ? k->cap * 2 : 4096;
                unsigned char* nb = (unsigned char*)realloc(k->buf, nc);
                if (!nb) { k->failed_errno = ENOMEM; return 0; }
                k->buf = nb; k->cap = nc;
            } else if (!qx__sink_flush(k)) {
                return 0;
            }
        }
        room = k->cap - k->len;
        m = n < room ? n : room;
        memcpy(k->buf + k->len, b, m);
        k->len += m; b += m; n -= m;
    }
    return 1;
}

/* Checks a store against the llama2.c model class and prepares the header. */
static quarot_result qx__writer_header(const quarot_model_config* c, int shared, qx_l2c_format fmt, unsigned char* hdr,
                                       qx_l2c_header* h, const char* name, qx_err* err) {
    int64_t kvh = c->n_kv_heads ? c->n_kv_heads : c->n_heads;
    int64_t vals[7];
    int i;
    vals[0] = c->hidden; vals[1] = c->intermediate; vals[2] = c->n_layers; vals[3] = c->n_heads;
    vals[4] = kvh; vals[5] = c->vocab; vals[6] = c->max_seq;
    for (i = 0; i < 7; ++i)
        if (vals[i] <= 0 || vals[i] > INT32_MAX) {
            qx_err_set(err, "%s: config value %d (%lld) does not fit the llama2.c header (1..2^31-1)", name, i,
                       (long long)vals[i]);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    if (c->head_dim != 0 && (c->head_dim != c->hidden / c->n_heads || c->hidden % c->n_heads != 0)) {
        qx_err_set(err, "%s: head_dim %lld * n_heads %lld != hidden %lld; llama2.c has head_dim = dim / n_heads", name,
                   (long long)c->head_dim, (long long)c->n_heads, (long long)c->hidden);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if ((c->norm != QUAROT_NORM_DEFAULT && c->norm != QUAROT_NORM_RMS) ||
        (c->mlp != QUAROT_MLP_DEFAULT && c->mlp != QUAROT_MLP_GATED) ||
        (c->act != QUAROT_ACT_DEFAULT && c->act != QUAROT_ACT_SILU)) {
        qx_err_set(err, "%s: llama2.c models have RMSNorm and a gated SiLU MLP; this config differs", name);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if ((c->norm_eps != 0.0f && c->norm_eps != 1e-5f) || (c->rope_theta != 0.0f && c->rope_theta != 10000.0f)) {
        qx_err_set(err, "%s: run.c fixes eps 1e-5 and RoPE theta 10000; config has eps %g, theta %g", name,
                   (double)c->norm_eps, (double)c->rope_theta);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (!c->rope_interleaved) {
        qx_err_set(err, "%s: llama2.c uses interleaved RoPE pairs; this store's q/k use the half layout "
                        "(config.rope_interleaved = 0): permute q_proj/k_proj rows first", name);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (c->attn_qkv_bias || c->attn_out_bias || c->mlp_bias || c->qk_norm) {
        qx_err_set(err, "%s: llama2.c models have no biases and no qk-norm", name);
        return QUAROT_ERR_UNSUPPORTED;
    }
    memset(hdr, 0, QX_L2C_V1_HEADER);
    if (fmt == QX_L2C_V1) {
        qx__wr_u32(hdr, QX_L2C_MAGIC);
        qx__wr_i32(hdr + 4, 1);
        for (i = 0; i < 7; ++i) qx__wr_i32(hdr + 8 + 4 * i, (int32_t)vals[i]);
        hdr[36] = (unsigned char)shared;
    } else {
        for (i = 0; i < 7; ++i) qx__wr_i32(hdr + 4 * i, (int32_t)vals[i]);
        if (!shared) qx__wr_i32(hdr + 20, (int32_t)-vals[5]);
    }
    /* The reader's checks (divisibility, even head_dim, overflow) apply to what we write. */
    return qx_l2c_parse_header(hdr, fmt == QX_L2C_V1 ? QX_L2C_V1_HEADER : QX_L2C_V0_HEADER, name, h, err);
}

/* Row `pos` of a freq_cis table, as model.py's precompute_freqs_cis in its float32 steps:
   f = 1 / theta^(2c/head_dim), angle = pos * f, then cos/sin. (Within an ulp of PyTorch's tables;
   95% of stories260K's values come out bit-identical.) */
static void qx__freq_row(const qx_l2c_seg* sg, int64_t pos, float* row) {
    int64_t c, hd = sg->ne0 * 2;
    int real = strcmp(sg->name, "llama2c.freq_cis_real") == 0;
    for (c = 0; c < sg->ne0; ++c) {
        float fr = 1.0f / powf(10000.0f, (float)(2 * c) / (float)hd);
        float a = (float)pos * fr;
        row[c] = (float)(real ? cos((double)a) : sin((double)a));
    }
}

/* Writes the header and every segment to k; validates everything first (before any byte). */
static quarot_result qx__write_all(const qx_store* s, const qx_l2c_write_opts* o, qx_sink* k, int (*before_first)(void*),
                                   void* before_arg, const char* name, qx_err* err) {
    unsigned char hdr[QX_L2C_V1_HEADER];
    qx_l2c_header h;
    qx_l2c_plan pl;
    qx_l2c_format fmt = o ? o->format : QX_L2C_DEFAULT;
    quarot_result r;
    float* row = NULL;
    int64_t i, j, max_row = 1;
    if (fmt == QX_L2C_DEFAULT) fmt = strcmp(s->source_format, "llama2c-v1") == 0 ? QX_L2C_V1 : QX_L2C_V0;
    if (fmt != QX_L2C_V0 && fmt != QX_L2C_V1) { qx_err_set(err, "%s: unknown output format %d", name, (int)fmt); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (!qx__host_le()) { qx_err_set(err, "%s: writing needs a little-endian host", name); return QUAROT_ERR_UNSUPPORTED; }
    r = qx__writer_header(&s->config, qx_store_find(s, "lm_head.weight") == NULL, fmt, hdr, &h, name, err);
    if (r != QUAROT_OK) return r;
    r = qx__plan_build(&h, &pl);
    if (r != QUAROT_OK) { qx_err_set(err, "%s: out of memory", name); return r; }
    if (k->is_mem && h.expected_size <= (uint64_t)SIZE_MAX && k->cap < (size_t)h.expected_size) {
        unsigned char* nb = (unsigned char*)realloc(k->buf, (size_t)h.expected_size);   /* the exact size */
        if (nb) { k->buf = nb; k->cap = (size_t)h.expected_size; }
    }

    /* Every tensor the format needs, with the exact shape; freq_cis may be absent (computed). */
    for (i = 0; i < pl.n; ++i) {
        const qx_l2c_seg* sg = &pl.seg[i];
        const quarot_tensor* t = qx_store_find(s, sg->name);
        if (sg->ne0 > max_row) max_row = sg->ne0;
        if (!t) {
            if (strncmp(sg->name, "llama2c.", 8) == 0) continue;
            qx_err_set(err, "%s: the store has no tensor %s", name, sg->name);
            r = QUAROT_ERR_NOT_FOUND;
            break;
        }
        if (quarot_tensor_validate(t) != QUAROT_OK || t->ne[0] != sg->ne0 || t->ne[1] != sg->ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
            qx_err_set(err, "%s: tensor %s is [%lld][%lld][%lld][%lld] (%s), expected [%lld][%lld]", name, sg->name,
                       (long long)t->ne[3], (long long)t->ne[2], (long long)t->ne[1], (long long)t->ne[0],
                       quarot_dtype_name(t->dtype), (long long)sg->ne1, (long long)sg->ne0);
            r = QUAROT_ERR_SHAPE_MISMATCH;
            break;
        }
    }
    /* Every store tensor must have a place, unless the caller allows dropping it. */
    for (j = 0; r == QUAROT_OK && !(o && o->allow_extra) && j < s->count; ++j) {
        const char* nm = s->items[j].name;
        int found = strcmp(nm, "llama2c.freq_cis_real") == 0 || strcmp(nm, "llama2c.freq_cis_imag") == 0;
        for (i = 0; i < pl.n && !found; ++i) found = strcmp(pl.seg[i].name, nm) == 0;
        if (!found) {
            qx_err_set(err, "%s: tensor %s has no place in the llama2.c format (allow_extra drops it)", name, nm);
            r = QUAROT_ERR_UNSUPPORTED;
        }
    }
    if (r == QUAROT_OK) {
        row = (float*)malloc((size_t)max_row * sizeof(float));
        if (!row) { qx_err_set(err, "%s: out of memory", name); r = QUAROT_ERR_OUT_OF_MEMORY; }
    }
    if (r == QUAROT_OK && before_first && !before_first(before_arg)) r = QUAROT_ERR_IO;   /* message set there */

    if (r == QUAROT_OK && !qx__sink_write(k, hdr, (size_t)h.header_bytes)) r = QUAROT_ERR_IO;
    for (i = 0; i < pl.n && r == QUAROT_OK; ++i) {
        const qx_l2c_seg* sg = &pl.seg[i];
        const quarot_tensor* t = qx_store_find(s, sg->name);
        int64_t rr;
        for (rr = 0; rr < sg->ne1 && r == QUAROT_OK; ++rr) {
            if (t) r = quarot_tensor_get_row_f32(t, rr, row);
            else qx__freq_row(sg, rr, row);
            if (r != QUAROT_OK) {
                qx_err_set(err, "%s: cannot read tensor %s: %s", name, sg->name, quarot_result_string(r));
            } else if (!qx__sink_write(k, row, (size_t)sg->ne0 * sizeof(float))) {
                r = QUAROT_ERR_IO;
            }
        }
    }
    if (r == QUAROT_OK && !qx__sink_flush(k)) r = QUAROT_ERR_IO;
    if (r == QUAROT_ERR_IO && k->failed_errno)
        qx_err_set(err, "%s: write failed: %s", name, strerror(k->failed_errno));
    free(row);
    free(pl.seg);
    return r;
}

quarot_result qx_l2c_write_memory(const qx_store* s, const qx_l2c_write_opts* opts, void** data, size_t* size,
                                  qx_err* err) {
    qx_sink k;
    quarot_result r;
    if (!s || !data || !size) { qx_err_set(err, "<memory>: invalid argument"); return QUAROT_ERR_INVALID_ARGUMENT; }
    *data = NULL; *size = 0;
    memset(&k, 0, sizeof k);
    k.fd = -1; k.is_mem = 1;
    r = qx__write_all(s, opts, &k, NULL, NULL, "<memory>", err);
    if (r == QUAROT_ERR_IO && k.failed_errno == ENOMEM) r = QUAROT_ERR_OUT_OF_MEMORY;
    if (r != QUAROT_OK) { free(k.buf); return r; }
    *data = k.buf; *size = k.len;
    return QUAROT_OK;
}

/* File output: a temporary "<path>.tmp-<pid>-<n>" opened O_EXCL, created only after the store has
   been checked (the before_first hook), and committed by link() (fails if the output exists, so
   there is no check-then-rename race) or rename() under force. */
typedef struct qx_fileout {
    const char* path;
    char* tmp;
    int fd;
    qx_sink* sink;
    qx_err* err;
} qx_fileout;

static int qx__open_tmp(void* arg) {
    qx_fileout* f = (qx_fileout*)arg;
    size_t n = strlen(f->path) + 48;
    int attempt;
    f->tmp = (char*)malloc(n);
    if (!f->tmp) { qx_err_set(f->err, "%s: out of memory", f->path); return 0; }
    for (attempt = 0; attempt < 1000; ++attempt) {
        snprintf(f->tmp, n, "%s.tmp-%ld-%d", f->path, (long)getpid(), attempt);
        f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_EXCL, 0666);   /* umask applies, as for any new file */
        if (f->fd >= 0) { f->sink->fd = f->fd; return 1; }
        if (errno != EEXIST) break;
    }
    qx_err_set(f->err, "%s: cannot create a temporary file beside it: %s", f->path, strerror(errno));
    free(f->tmp);
    f->tmp = NULL;
    return 0;
}

quarot_result qx_l2c_write_file(const qx_store* s, const char* path, const qx_l2c_write_opts* opts, qx_err* err) {
    qx_fileout f;
    qx_sink k;
    struct stat st;
    quarot_result r;
    int force = opts ? opts->force : 0;
    if (!s || !path || !path[0]) { qx_err_set(err, "%s: invalid argument", path ? path : "(null)"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (!force && lstat(path, &st) == 0) {
        qx_err_set(err, "%s: exists already (set force to replace it)", path);
        return QUAROT_ERR_IO;
    }
    memset(&f, 0, sizeof f);
    memset(&k, 0, sizeof k);
    f.path = path; f.fd = -1; f.err = err; f.sink = &k;
    k.fd = -1;
    k.cap = (size_t)1 << 20;
    k.buf = (unsigned char*)malloc(k.cap);
    if (!k.buf) { qx_err_set(err, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = qx__write_all(s, opts, &k, qx__open_tmp, &f, path, err);   /* the hook creates the temporary */
    free(k.buf);
    if (f.fd >= 0) {
        if (r == QUAROT_OK && fsync(f.fd) != 0) { qx_err_set(err, "%s: fsync failed: %s", path, strerror(errno)); r = QUAROT_ERR_IO; }
        if (close(f.fd) != 0 && r == QUAROT_OK) { qx_err_set(err, "%s: close failed: %s", path, strerror(errno)); r = QUAROT_ERR_IO; }
    }
    if (r == QUAROT_OK) {
        if (force) {
            if (rename(f.tmp, path) != 0) { qx_err_set(err, "%s: rename failed: %s", path, strerror(errno)); r = QUAROT_ERR_IO; }
        } else if (link(f.tmp, path) == 0) {
            unlink(f.tmp);
        } else if (errno == EEXIST) {
            qx_err_set(err, "%s: exists already (set force to replace it)", path);
            r = QUAROT_ERR_IO;
        } else if (lstat(path, &st) == 0) {   /* no hard links here (some filesystems): check, then rename */
            qx_err_set(err, "%s: exists already (set force to replace it)", path);
            r = QUAROT_ERR_IO;
        } else if (rename(f.tmp, path) != 0) {
            qx_err_set(err, "%s: rename failed: %s", path, strerror(errno));
            r = QUAROT_ERR_IO;
        }
    }
    if (r == QUAROT_OK) qx_sync_parent(path);   /* make the new directory entry durable too (best effort) */
    if (f.tmp) {
        if (r != QUAROT_OK) unlink(f.tmp);
        free(f.tmp);
    }
    return r;
}

/* ---- streaming writer ------------------------------------------------------------------------- */

/* The segment plan comes from the config alone, so the file can be laid out before any tensor
   exists; tensors then go to their offsets (positional writes, any order) through a temporary. */
struct qx_l2c_writer {
    qx_l2c_header h;
    qx_l2c_plan pl;
    unsigned char* written;    /* [pl.n] */
    qx_out out;
    int allow_extra;
};

void qx_l2c_writer_abort(qx_l2c_writer* w) {
    if (!w) return;
    qx_out_abort(&w->out);
    free(w->pl.seg);
    free(w->written);
    free(w);
}

quarot_result qx_l2c_writer_begin(qx_l2c_writer** wp, const char* path, const quarot_model_config* cfg,
                                  int shared_classifier, const qx_l2c_write_opts* opts, qx_err* err) {
    unsigned char hdr[QX_L2C_V1_HEADER];
    qx_l2c_writer* w;
    qx_l2c_format fmt = opts && opts->format != QX_L2C_DEFAULT ? opts->format : QX_L2C_V0;
    quarot_result r;
    if (!wp || !path || !path[0] || !cfg) { qx_err_set(err, "%s: invalid argument", path ? path : "(null)"); return QUAROT_ERR_INVALID_ARGUMENT; }
    *wp = NULL;
    if (fmt != QX_L2C_V0 && fmt != QX_L2C_V1) { qx_err_set(err, "%s: unknown output format %d", path, (int)fmt); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (!qx__host_le()) { qx_err_set(err, "%s: writing needs a little-endian host", path); return QUAROT_ERR_UNSUPPORTED; }
    w = (qx_l2c_writer*)calloc(1, sizeof *w);
    if (!w) { qx_err_set(err, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    w->out.fd = -1;
    w->allow_extra = opts ? opts->allow_extra : 0;
    r = qx__writer_header(cfg, shared_classifier != 0, fmt, hdr, &w->h, path, err);
    if (r == QUAROT_OK && (r = qx__plan_build(&w->h, &w->pl)) != QUAROT_OK) qx_err_set(err, "%s: out of memory", path);
    if (r == QUAROT_OK && !(w->written = (unsigned char*)calloc((size_t)w->pl.n, 1))) {
        qx_err_set(err, "%s: out of memory", path);
        r = QUAROT_ERR_OUT_OF_MEMORY;
    }
    if (r == QUAROT_OK) r = qx_out_begin(&w->out, path, opts ? opts->force : 0, err);
    if (r == QUAROT_OK) r = qx_out_pwrite(&w->out, hdr, (size_t)w->h.header_bytes, 0, err);
    if (r != QUAROT_OK) { qx_l2c_writer_abort(w); return r; }
    *wp = w;
    return QUAROT_OK;
}

quarot_result qx_l2c_writer_put(qx_l2c_writer* w, const char* name, const quarot_tensor* t, qx_err* err) {
    int64_t i;
    if (!w || !name || !t) return QUAROT_ERR_INVALID_ARGUMENT;
    for (i = 0; i < w->pl.n; ++i)
        if (strcmp(w->pl.seg[i].name, name) == 0) break;
    if (i == w->pl.n) {
        if (w->allow_extra) return QUAROT_OK;
        qx_err_set(err, "%s: tensor %s has no place in the llama2.c format", w->out.path, name);
        return QUAROT_ERR_UNSUPPORTED;
    }
    {
        const qx_l2c_seg* sg = &w->pl.seg[i];
        if (w->written[i]) { qx_err_set(err, "%s: tensor %s written twice", w->out.path, name); return QUAROT_ERR_STATE; }
        if (quarot_tensor_validate(t) != QUAROT_OK || t->ne[0] != sg->ne0 || t->ne[1] != sg->ne1 || t->ne[2] != 1 || t->ne[3] != 1) {
            qx_err_set(err, "%s: tensor %s is [%lld][%lld], expected [%lld][%lld]", w->out.path, name, (long long)t->ne[1],
                       (long long)t->ne[0], (long long)sg->ne1, (long long)sg->ne0);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
        w->written[i] = 1;
        return qx_out_tensor(&w->out, w->h.header_bytes + 4 * sg->off, QUAROT_DTYPE_F32, t, 0, 0, name, err);
    }
}

quarot_result qx_l2c_writer_finish(qx_l2c_writer* w, qx_err* err) {
    quarot_result r = QUAROT_OK;
    float* row = NULL;
    int64_t i, rr;
    if (!w) return QUAROT_ERR_INVALID_ARGUMENT;
    for (i = 0; i < w->pl.n && r == QUAROT_OK; ++i) {
        const qx_l2c_seg* sg = &w->pl.seg[i];
        if (w->written[i]) continue;
        if (strncmp(sg->name, "llama2c.", 8) != 0) {
            qx_err_set(err, "%s: tensor %s was never written", w->out.path, sg->name);
            r = QUAROT_ERR_STATE;
            break;
        }
        /* a v0 file needs the RoPE tables; computed as model.py does when not given */
        free(row);
        row = (float*)malloc((size_t)sg->ne0 * sizeof(float));
        if (!row) { qx_err_set(err, "%s: out of memory", w->out.path); r = QUAROT_ERR_OUT_OF_MEMORY; break; }
        for (rr = 0; rr < sg->ne1 && r == QUAROT_OK; ++rr) {
            qx__freq_row(sg, rr, row);
            r = qx_out_pwrite(&w->out, row, (size_t)sg->ne0 * sizeof(float),
                              w->h.header_bytes + 4 * (sg->off + (uint64_t)rr * (uint64_t)sg->ne0), err);
        }
    }
    free(row);
    if (r == QUAROT_OK) r = qx_out_sync(&w->out, w->h.expected_size, err);
    if (r == QUAROT_OK) r = qx_out_publish(&w->out, err);
    qx_l2c_writer_abort(w);   /* frees; removes the temporary unless published */
    return r;
}
