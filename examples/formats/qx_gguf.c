/* qx_gguf.c - see qx_gguf.h.

   Parsing walks the image with a cursor that checks, before every read, that the bytes are there
   ("need"), and bounds every count by what could fit in the rest of the file (a string takes at
   least 8 bytes, an array 12, a pair 13, a tensor info 32), so allocations never exceed what the
   file size implies. Values are validated by skipping over them; the pairs keep pointers into the
   image. */
#include "formats/qx_gguf.h"
#include "support/qx_file.h"
#include "support/qx_str.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QX_GGUF_MAX_DEPTH 8          /* nested arrays */
#define QX_GGUF_MAX_NAME 256         /* tensor name bytes (llama.cpp: 64) */
#define QX_GGUF_MAX_KEY 65535

typedef struct qx__gr {
    const unsigned char* start;
    const unsigned char* p;
    const unsigned char* end;
    const char* name;
    qx_err* e;
} qx__gr;

/* Bytes left after the cursor; the readers below assume the caller checked qx__rest first. */
static uint64_t qx__rest(const qx__gr* r) { return (uint64_t)(r->end - r->p); }

static uint32_t qx__rd32(qx__gr* r) {
    uint32_t v = qx_str_le32(r->p);
    r->p += 4;
    return v;
}

static uint64_t qx__rd64(qx__gr* r) {
    uint64_t v = qx_str_le64(r->p);
    r->p += 8;
    return v;
}

/* The message for a read that would pass the end of the image. */
static quarot_result qx__gtrunc(qx__gr* r, const char* what, uint64_t n) {
    qx_err_set(r->e, "%s: %s (%llu bytes) passes the end of the file at offset %llu", r->name, what,
               (unsigned long long)n, (unsigned long long)(r->p - r->start));
    return QUAROT_ERR_PARSE;
}

/* Bytes of a scalar value type; 0 for STRING, ARRAY and unknown types. */
static unsigned qx__gguf_scalar_size(uint32_t t) {
    switch (t) {
        case QX_GGUF_U8: case QX_GGUF_I8: case QX_GGUF_BOOL: return 1;
        case QX_GGUF_U16: case QX_GGUF_I16: return 2;
        case QX_GGUF_U32: case QX_GGUF_I32: case QX_GGUF_F32: return 4;
        case QX_GGUF_U64: case QX_GGUF_I64: case QX_GGUF_F64: return 8;
        default: return 0;
    }
}

/* Validates and skips one value of type t; ctx (the key) names it in messages. */
static quarot_result qx__gskip(qx__gr* r, uint32_t t, int depth, const char* ctx, int ctx_len) {
    unsigned sz = qx__gguf_scalar_size(t);
    if (sz) {
        if (qx__rest(r) < sz) return qx__gtrunc(r, "a value", sz);
        r->p += sz;
        return QUAROT_OK;
    }
    if (t == QX_GGUF_STRING) {
        uint64_t n;
        if (qx__rest(r) < 8) return qx__gtrunc(r, "a string length", 8);
        n = qx__rd64(r);
        if (qx__rest(r) < n) {
            qx_err_set(r->e, "%s: key \"%.*s\": string length %llu passes the end of the file (offset %llu)", r->name,
                       ctx_len, ctx, (unsigned long long)n, (unsigned long long)(r->p - r->start));
            return QUAROT_ERR_PARSE;
        }
        r->p += n;
        return QUAROT_OK;
    }
    if (t == QX_GGUF_ARRAY) {
        uint32_t et;
        uint64_t cnt, k, min;
        quarot_result res;
        if (depth >= QX_GGUF_MAX_DEPTH) {
            qx_err_set(r->e, "%s: key \"%.*s\": arrays nested deeper than %d", r->name, ctx_len, ctx, QX_GGUF_MAX_DEPTH);
            return QUAROT_ERR_PARSE;
        }
        if (qx__rest(r) < 12) return qx__gtrunc(r, "an array header", 12);
        et = qx__rd32(r);
        cnt = qx__rd64(r);
        sz = qx__gguf_scalar_size(et);
        min = sz ? sz : et == QX_GGUF_STRING ? 8 : et == QX_GGUF_ARRAY ? 12 : 0;
        if (!min) {
            qx_err_set(r->e, "%s: key \"%.*s\": unknown array element type %u", r->name, ctx_len, ctx, et);
            return QUAROT_ERR_PARSE;
        }
        if (cnt > qx__rest(r) / min) {
            qx_err_set(r->e, "%s: key \"%.*s\": array of %llu elements cannot fit in the %llu bytes left", r->name, ctx_len,
                       ctx, (unsigned long long)cnt, (unsigned long long)qx__rest(r));
            return QUAROT_ERR_PARSE;
        }
        if (sz) { r->p += cnt * sz; return QUAROT_OK; }
        for (k = 0; k < cnt; ++k)
            if ((res = qx__gskip(r, et, depth + 1, ctx, ctx_len)) != QUAROT_OK) return res;
        return QUAROT_OK;
    }
    qx_err_set(r->e, "%s: key \"%.*s\": unknown value type %u", r->name, ctx_len, ctx, t);
    return QUAROT_ERR_PARSE;
}

/* Pairs ordered by key bytes (for duplicate detection). */
static int qx__kv_cmp(const void* a, const void* b) {
    const qx_gguf_kv* x = *(const qx_gguf_kv* const*)a;
    const qx_gguf_kv* y = *(const qx_gguf_kv* const*)b;
    uint64_t n = x->key_len < y->key_len ? x->key_len : y->key_len;
    int c = memcmp(x->key, y->key, (size_t)n);
    if (c) return c;
    return x->key_len < y->key_len ? -1 : x->key_len > y->key_len ? 1 : 0;
}

/* n_kv pairs at r->p; fills kv[] (allocated here) and rejects duplicate keys. */
/* 1 when p[0..n) is well-formed UTF-8 (shortest forms, no surrogates, at most U+10FFFF, no NUL). */
static int qx__gguf_utf8(const unsigned char* p, uint64_t n) {
    uint64_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        uint64_t k, len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
        unsigned long v;
        if (c == 0 || len == 0 || len > n - i) return 0;
        v = len == 1 ? c : len == 2 ? (c & 0x1Fu) : len == 3 ? (c & 0x0Fu) : (c & 0x07u);
        for (k = 1; k < len; ++k) {
            if ((p[i + k] & 0xC0) != 0x80) return 0;
            v = (v << 6) | (p[i + k] & 0x3Fu);
        }
        if ((len == 2 && v < 0x80) || (len == 3 && v < 0x800) || (len == 4 && v < 0x10000) || v > 0x10FFFF ||
            (v >= 0xD800 && v <= 0xDFFF))
            return 0;
        i += len;
    }
    return 1;
}

static quarot_result qx__gparse_kvs(qx__gr* r, uint64_t n_kv, qx_gguf_kv** out) {
    qx_gguf_kv* kv;
    const qx_gguf_kv** order;
    uint64_t k;
    quarot_result res = QUAROT_OK;
    *out = NULL;
    if (n_kv > qx__rest(r) / 13) {        /* key length 8 + key >= 1... + type 4: at least 13 bytes each */
        qx_err_set(r->e, "%s: %llu key/value pairs cannot fit in the %llu bytes left", r->name, (unsigned long long)n_kv,
                   (unsigned long long)qx__rest(r));
        return QUAROT_ERR_PARSE;
    }
    kv = (qx_gguf_kv*)calloc((size_t)(n_kv ? n_kv : 1), sizeof *kv);
    order = (const qx_gguf_kv**)malloc((size_t)(n_kv ? n_kv : 1) * sizeof *order);
    if (!kv || !order) { free(kv); free(order); qx_err_set(r->e, "%s: out of memory", r->name); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (k = 0; k < n_kv; ++k) {
        qx_gguf_kv* p = &kv[k];
        uint64_t kl;
        int cl;
        p->raw = r->p;
        if (qx__rest(r) < 8) { res = qx__gtrunc(r, "a key length", 8); break; }
        kl = qx__rd64(r);
        if (kl == 0 || kl > QX_GGUF_MAX_KEY || kl > qx__rest(r)) {
            qx_err_set(r->e, "%s: key %llu: length %llu is empty, too long or passes the end of the file", r->name,
                       (unsigned long long)k, (unsigned long long)kl);
            res = QUAROT_ERR_PARSE;
            break;
        }
        p->key = (const char*)r->p;
        p->key_len = kl;
        if (!qx__gguf_utf8(r->p, kl)) {   /* as the other readers: names are UTF-8 text */
            qx_err_set(r->e, "%s: key %llu is not valid UTF-8", r->name, (unsigned long long)k);
            res = QUAROT_ERR_PARSE;
            break;
        }
        r->p += kl;
        cl = (int)(kl > 100 ? 100 : kl);
        if (memchr(p->key, '\0', (size_t)kl)) {
            qx_err_set(r->e, "%s: key \"%.*s\" contains a NUL byte", r->name, cl, p->key);
            res = QUAROT_ERR_PARSE;
            break;
        }
        if (qx__rest(r) < 4) { res = qx__gtrunc(r, "a value type", 4); break; }
        p->type = qx__rd32(r);
        p->val = r->p;
        if (p->type == QX_GGUF_STRING && qx__rest(r) >= 8) {
            const unsigned char* save = r->p;
            p->val_len = qx__rd64(r);
            p->val = r->p;
            r->p = save;
        } else if (p->type == QX_GGUF_ARRAY && qx__rest(r) >= 12) {
            const unsigned char* save = r->p;
            p->arr_type = qx__rd32(r);
            p->arr_count = qx__rd64(r);
            p->val = r->p;
            r->p = save;
        } else {
            p->val_len = qx__gguf_scalar_size(p->type);
        }
        if ((res = qx__gskip(r, p->type, 0, p->key, cl)) != QUAROT_OK) break;
        if (p->type == QX_GGUF_ARRAY) p->val_len = (uint64_t)(r->p - p->val);
        p->raw_len = (uint64_t)(r->p - p->raw);
        order[k] = p;
    }
    if (res == QUAROT_OK && n_kv > 1) {
        qsort(order, (size_t)n_kv, sizeof *order, qx__kv_cmp);
        for (k = 1; k < n_kv; ++k)
            if (qx__kv_cmp(&order[k - 1], &order[k]) == 0) {
                qx_err_set(r->e, "%s: key \"%.*s\" appears twice", r->name, (int)(order[k]->key_len > 100 ? 100 : order[k]->key_len),
                           order[k]->key);
                res = QUAROT_ERR_PARSE;
                break;
            }
    }
    free(order);
    if (res != QUAROT_OK) { free(kv); return res; }
    *out = kv;
    return QUAROT_OK;
}

/* Element size of the ggml types whose data this code can bound (0: unknown here). */
static unsigned qx__ggml_size(uint32_t t) {
    switch (t) {
        case QX_GGML_F32: return 4;
        case QX_GGML_F16: case QX_GGML_BF16: return 2;
        case QX_GGML_F64: return 8;
        case 24: return 1;            /* I8 */
        case 25: return 2;            /* I16 */
        case 26: return 4;            /* I32 */
        case 27: return 8;            /* I64 */
        default: return 0;
    }
}

/* ggml's numbering; removed types keep their old names so messages stay specific. */
const char* qx_ggml_type_name(uint32_t type, char buf[16]) {
    static const char* const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8", "I16",
        "I32", "I64", "F64", "IQ1_M", "BF16", "Q4_0_4_4", "Q4_0_4_8", "Q4_0_8_8", "TQ1_0", "TQ2_0", "IQ4_NL_4_4",
        "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
    if (type < sizeof names / sizeof names[0]) return names[type];
    snprintf(buf, 16, "type %u", type);
    return buf;
}

/* ---- Q4_0 / Q8_0 blocks (layout in the header) ---- */

uint64_t qx_ggml_row_bytes(uint32_t type, int64_t n) {
    if (n < 0) return 0;
    switch (type) {
        case QX_GGML_Q4_0: return n % QX_GGML_QK ? 0 : (uint64_t)(n / QX_GGML_QK) * QX_GGML_Q4_0_BLOCK;
        case QX_GGML_Q8_0: return n % QX_GGML_QK ? 0 : (uint64_t)(n / QX_GGML_QK) * QX_GGML_Q8_0_BLOCK;
        case QX_GGML_F32: case QX_GGML_F16: case QX_GGML_BF16: case QX_GGML_F64: return (uint64_t)n * qx__ggml_size(type);
        default: return 0;
    }
}

quarot_result qx_ggml_encode_row(uint32_t type, const int8_t* q, const float* scales, int64_t n, void* out,
                                 const char* what, qx_err* e) {
    unsigned char* o = (unsigned char*)out;
    int64_t b, i, nb = n / QX_GGML_QK;
    int lo = type == QX_GGML_Q4_0 ? -8 : -128, hi = type == QX_GGML_Q4_0 ? 7 : 127;
    if (!what) what = "tensor";
    if ((type != QX_GGML_Q4_0 && type != QX_GGML_Q8_0) || n < 0 || n % QX_GGML_QK || (n && (!q || !scales || !out))) {
        qx_err_set(e, "%s: cannot encode a row of %lld elements as ggml type %u", what, (long long)n, type);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    for (b = 0; b < nb; ++b) {
        const int8_t* c = q + b * QX_GGML_QK;
        uint16_t h;
        float back;
        quarot_f32_to_f16(&scales[b], &h, 1);
        quarot_f16_to_f32(&h, &back, 1);
        if ((h & 0x7c00u) == 0x7c00u) {          /* Inf or NaN after rounding to f16 */
            qx_err_set(e, "%s: block %lld: scale %g is not finite in f16 (|scale| must stay below 65520)", what, (long long)b,
                       (double)scales[b]);
            return QUAROT_ERR_NONFINITE;
        }
        for (i = 0; i < QX_GGML_QK; ++i)
            if (c[i] < lo || c[i] > hi) {
                qx_err_set(e, "%s: element %lld: code %d outside [%d, %d] of this block type", what, (long long)(b * QX_GGML_QK + i),
                           c[i], lo, hi);
                return QUAROT_ERR_INVALID_ARGUMENT;
            }
        o[0] = (unsigned char)(h & 0xffu);       /* little-endian f16 */
        o[1] = (unsigned char)(h >> 8);
        if (type == QX_GGML_Q4_0) {
            for (i = 0; i < QX_GGML_QK / 2; ++i)   /* element i low nibble, element i+16 high nibble, offset by 8 */
                o[2 + i] = (unsigned char)((unsigned)(c[i] + 8) | (unsigned)(c[i + QX_GGML_QK / 2] + 8) << 4);
            o += QX_GGML_Q4_0_BLOCK;
        } else {
            for (i = 0; i < QX_GGML_QK; ++i) o[2 + i] = (unsigned char)(uint8_t)c[i];
            o += QX_GGML_Q8_0_BLOCK;
        }
    }
    return QUAROT_OK;
}

quarot_result qx_ggml_decode_row(uint32_t type, const void* blocks, int64_t n, float* out) {
    const unsigned char* p = (const unsigned char*)blocks;
    int64_t b, i, nb = n / QX_GGML_QK;
    if (type != QX_GGML_Q4_0 && type != QX_GGML_Q8_0) return QUAROT_ERR_UNSUPPORTED_DTYPE;
    if (n < 0 || n % QX_GGML_QK || (n && (!blocks || !out))) return QUAROT_ERR_INVALID_ARGUMENT;
    for (b = 0; b < nb; ++b) {
        uint16_t h = (uint16_t)(p[0] | p[1] << 8);
        float d;
        float* y = out + b * QX_GGML_QK;
        quarot_f16_to_f32(&h, &d, 1);
        if (type == QX_GGML_Q4_0) {
            for (i = 0; i < QX_GGML_QK / 2; ++i) {
                y[i] = (float)((int)(p[2 + i] & 0x0f) - 8) * d;
                y[i + QX_GGML_QK / 2] = (float)((int)(p[2 + i] >> 4) - 8) * d;
            }
            p += QX_GGML_Q4_0_BLOCK;
        } else {
            for (i = 0; i < QX_GGML_QK; ++i) y[i] = (float)(int8_t)p[2 + i] * d;
            p += QX_GGML_Q8_0_BLOCK;
        }
    }
    return QUAROT_OK;
}

/* Tensor infos by name (duplicates) and by offset (overlaps). */
static int qx__tinfo_name_cmp(const void* a, const void* b) {
    const qx_gguf_tinfo* x = *(const qx_gguf_tinfo* const*)a;
    const qx_gguf_tinfo* y = *(const qx_gguf_tinfo* const*)b;
    uint64_t n = x->name_len < y->name_len ? x->name_len : y->name_len;
    int c = memcmp(x->name, y->name, (size_t)n);
    if (c) return c;
    return x->name_len < y->name_len ? -1 : x->name_len > y->name_len ? 1 : 0;
}

static int qx__tinfo_off_cmp(const void* a, const void* b) {
    const qx_gguf_tinfo* x = *(const qx_gguf_tinfo* const*)a;
    const qx_gguf_tinfo* y = *(const qx_gguf_tinfo* const*)b;
    return x->offset < y->offset ? -1 : x->offset > y->offset ? 1 : 0;
}

#define QX__TN(t) (int)((t)->name_len), (t)->name

void qx_gguf_file_free(qx_gguf_file* f) {
    if (!f) return;
    free(f->kv);
    free(f->t);
    memset(f, 0, sizeof *f);
}

/* The header after the magic: the version (a byte-swapped one means a big-endian file) and the
   tensor and pair counts. */
static quarot_result qx__gparse_header(qx__gr* r, qx_gguf_file* f) {
    f->version = qx__rd32(r);
    if (f->version != 2 && f->version != 3) {
        if (f->version == 0x02000000u || f->version == 0x03000000u)
            qx_err_set(r->e, "%s: big-endian GGUF is not supported", r->name);
        else
            qx_err_set(r->e, "%s: GGUF version %u is not supported (2 and 3 are)", r->name, f->version);
        return QUAROT_ERR_UNSUPPORTED;
    }
    f->n_tensors = qx__rd64(r);
    f->n_kv = qx__rd64(r);
    return QUAROT_OK;
}

/* general.alignment: a u32 power of two, 32 when absent. */
static quarot_result qx__galignment(qx__gr* r, qx_gguf_file* f) {
    const qx_gguf_kv* al = qx_gguf_find(f, "general.alignment");
    int64_t a;
    f->alignment = 32;
    if (!al) return QUAROT_OK;
    if (al->type != QX_GGUF_U32 || qx_gguf_kv_int(al, &a) != QUAROT_OK || a < 1 || a > (1 << 30) || (a & (a - 1))) {
        qx_err_set(r->e, "%s: general.alignment must be a u32 power of two", r->name);
        return QUAROT_ERR_PARSE;
    }
    f->alignment = (uint32_t)a;
    return QUAROT_OK;
}

/* Tensor info k: name, n_dims, ne (the element count must fit in int64), type and offset; the byte
   size for the types whose size is known here (0 otherwise). */
static quarot_result qx__gparse_tinfo(qx__gr* r, uint64_t k, qx_gguf_tinfo* t) {
    const char* name = r->name;
    qx_err* e = r->e;
    uint64_t nl, prod = 1;
    uint32_t d;
    if (qx__rest(r) < 8) return qx__gtrunc(r, "a tensor name length", 8);
    nl = qx__rd64(r);
    if (nl == 0 || nl >= QX_GGUF_MAX_NAME || nl > qx__rest(r)) {
        qx_err_set(e, "%s: tensor %llu: name length %llu is empty, too long (>= %d) or passes the end of the file", name,
                   (unsigned long long)k, (unsigned long long)nl, QX_GGUF_MAX_NAME);
        return QUAROT_ERR_PARSE;
    }
    t->name = (const char*)r->p;
    t->name_len = nl;
    r->p += nl;
    if (memchr(t->name, '\0', (size_t)nl)) { qx_err_set(e, "%s: tensor %llu: name contains a NUL byte", name, (unsigned long long)k); return QUAROT_ERR_PARSE; }
    if (qx__rest(r) < 4) return qx__gtrunc(r, "n_dims", 4);
    t->n_dims = qx__rd32(r);
    if (t->n_dims < 1 || t->n_dims > QUAROT_MAX_DIMS) {
        qx_err_set(e, "%s: tensor \"%.*s\": %u dimensions (1 to %d allowed)", name, QX__TN(t), t->n_dims, QUAROT_MAX_DIMS);
        return QUAROT_ERR_PARSE;
    }
    if (qx__rest(r) < 8ull * t->n_dims + 12) return qx__gtrunc(r, "a tensor info", 8ull * t->n_dims + 12);
    for (d = 0; d < QUAROT_MAX_DIMS; ++d) t->ne[d] = 1;
    {   /* every dimension read first, so the message names them all, not the one that tipped the product over */
        uint64_t v[QUAROT_MAX_DIMS];
        int over = 0;
        for (d = 0; d < t->n_dims; ++d) v[d] = qx__rd64(r);
        for (d = 0; d < t->n_dims && !over; ++d) {
            if (v[d] > (uint64_t)INT64_MAX || (v[d] && prod > (uint64_t)INT64_MAX / v[d])) over = 1;
            else prod *= v[d];
        }
        if (over) {
            char dims[QUAROT_MAX_DIMS * 24];
            size_t at = 0;
            for (d = 0; d < t->n_dims; ++d)
                at += (size_t)snprintf(dims + at, sizeof dims - at, "%s%llu", d ? ", " : "", (unsigned long long)v[d]);
            qx_err_set(e, "%s: tensor \"%.*s\": ne = [%s]: the element count overflows 2^63", name, QX__TN(t), dims);
            return QUAROT_ERR_OVERFLOW;
        }
        for (d = 0; d < t->n_dims; ++d) t->ne[d] = (int64_t)v[d];
    }
    t->type = qx__rd32(r);
    t->offset = qx__rd64(r);
    if (t->type == QX_GGML_Q4_0 || t->type == QX_GGML_Q8_0) {
        char tb[16];
        if (t->ne[0] % QX_GGML_QK != 0) {
            qx_err_set(e, "%s: tensor \"%.*s\": type %s needs rows of a multiple of %d elements, not %lld", name, QX__TN(t),
                       qx_ggml_type_name(t->type, tb), QX_GGML_QK, (long long)t->ne[0]);
            return QUAROT_ERR_PARSE;
        }
        /* prod < 2^63, so prod / 32 * 34 < 2^64 */
        t->nbytes = prod / QX_GGML_QK * (t->type == QX_GGML_Q4_0 ? QX_GGML_Q4_0_BLOCK : QX_GGML_Q8_0_BLOCK);
    } else if (qx__ggml_size(t->type)) {
        if (prod > UINT64_MAX / qx__ggml_size(t->type)) {
            qx_err_set(e, "%s: tensor \"%.*s\": byte size overflows", name, QX__TN(t));
            return QUAROT_ERR_OVERFLOW;
        }
        t->nbytes = prod * qx__ggml_size(t->type);
    }
    return QUAROT_OK;
}

/* The tensor infos (each at least 32 bytes: name 8 + n, n_dims 4, ne 8 each, type 4, offset 8),
   no name twice; order[] gets them all (sorted by name). */
static quarot_result qx__gparse_tinfos(qx__gr* r, qx_gguf_file* f, qx_gguf_tinfo** order) {
    uint64_t k;
    quarot_result res;
    for (k = 0; k < f->n_tensors; ++k) {
        if ((res = qx__gparse_tinfo(r, k, &f->t[k])) != QUAROT_OK) return res;
        order[k] = &f->t[k];
    }
    if (f->n_tensors > 1) {
        qsort(order, (size_t)f->n_tensors, sizeof *order, qx__tinfo_name_cmp);
        for (k = 1; k < f->n_tensors; ++k)
            if (qx__tinfo_name_cmp(&order[k - 1], &order[k]) == 0) {
                qx_err_set(r->e, "%s: tensor \"%.*s\" appears twice", r->name, QX__TN(order[k]));
                return QUAROT_ERR_PARSE;
            }
    }
    return QUAROT_OK;
}

/* The data section, from the next multiple of the alignment after the infos: every tensor aligned
   inside it, and nothing after the last tensor but its padding to the alignment (the other readers
   refuse trailing bytes too: they are a truncated-or-concatenated file, not a model). */
static quarot_result qx__gdata_section(qx__gr* r, qx_gguf_file* f, size_t len) {
    const char* name = r->name;
    uint64_t pos = (uint64_t)(r->p - r->start), pad = (f->alignment - pos % f->alignment) % f->alignment, k, end = 0, aligned;
    int unknown = 0;   /* a tensor of a type whose size is unknown here: its load says so */
    f->data_offset = pos + pad;
    if (f->data_offset > (uint64_t)len) {
        if (f->n_tensors) {
            qx_err_set(r->e, "%s: the data section would start at %llu, past the end of the %zu-byte file", name,
                       (unsigned long long)f->data_offset, len);
            return QUAROT_ERR_PARSE;
        }
        f->data_offset = (uint64_t)len;
    }
    f->data = r->start + f->data_offset;
    f->data_len = (uint64_t)len - f->data_offset;
    for (k = 0; k < f->n_tensors; ++k) {
        const qx_gguf_tinfo* t = &f->t[k];
        if (t->offset % f->alignment != 0 || t->offset > f->data_len || t->nbytes > f->data_len - t->offset) {
            qx_err_set(r->e, "%s: tensor \"%.*s\": offset %llu + %llu bytes is unaligned (%u) or passes the end of the %llu-byte data section",
                       name, QX__TN(t), (unsigned long long)t->offset, (unsigned long long)t->nbytes, f->alignment,
                       (unsigned long long)f->data_len);
            return QUAROT_ERR_PARSE;
        }
    }
    for (k = 0; k < f->n_tensors; ++k) {
        unknown |= f->t[k].nbytes == 0;
        if (f->t[k].offset + f->t[k].nbytes > end) end = f->t[k].offset + f->t[k].nbytes;
    }
    aligned = end + (f->alignment - end % f->alignment) % f->alignment;
    if (!unknown && f->data_len > aligned) {
        qx_err_set(r->e, "%s: %llu trailing bytes after the last tensor's data", name, (unsigned long long)(f->data_len - aligned));
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

/* No overlaps among tensors of known size (order[] sorted by offset: an overlap shows with the next
   tensor). */
static quarot_result qx__gcheck_overlaps(qx__gr* r, const qx_gguf_file* f, qx_gguf_tinfo** order) {
    uint64_t k;
    qsort(order, (size_t)f->n_tensors, sizeof *order, qx__tinfo_off_cmp);
    for (k = 1; k < f->n_tensors; ++k) {
        const qx_gguf_tinfo* prev = order[k - 1];
        if (prev->nbytes && order[k]->offset < prev->offset + prev->nbytes) {
            qx_err_set(r->e, "%s: tensors \"%.*s\" and \"%.*s\" overlap", r->name, QX__TN(prev), QX__TN(order[k]));
            return QUAROT_ERR_PARSE;
        }
    }
    return QUAROT_OK;
}

/* Magic and header, the pairs (their bytes stay addressable as one section for verbatim copies),
   the alignment, the tensor infos, the data section and the tensors' extents in it. */
quarot_result qx_gguf_parse(const void* buf, size_t len, const char* name, qx_gguf_file* f, qx_err* e) {
    qx__gr r;
    qx_gguf_tinfo** order = NULL;
    quarot_result res;
    if (!f || (!buf && len)) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(f, 0, sizeof *f);
    if (!name) name = "gguf";
    if (len < 24) { qx_err_set(e, "%s: %zu bytes is too short for a GGUF header (24)", name, len); return QUAROT_ERR_PARSE; }
    r.start = r.p = (const unsigned char*)buf;
    r.end = r.p + len;
    r.name = name;
    r.e = e;
    if (memcmp(r.p, "GGUF", 4) != 0) { qx_err_set(e, "%s: no GGUF magic", name); return QUAROT_ERR_PARSE; }
    r.p += 4;
    if ((res = qx__gparse_header(&r, f)) != QUAROT_OK) return res;
    f->kv_begin = r.p;
    if ((res = qx__gparse_kvs(&r, f->n_kv, &f->kv)) != QUAROT_OK) return res;
    f->kv_bytes = (uint64_t)(r.p - f->kv_begin);
    res = qx__galignment(&r, f);
    if (res == QUAROT_OK && f->n_tensors > qx__rest(&r) / 32) {
        qx_err_set(e, "%s: %llu tensors cannot fit in the %llu bytes left", name, (unsigned long long)f->n_tensors,
                   (unsigned long long)qx__rest(&r));
        res = QUAROT_ERR_PARSE;
    }
    if (res == QUAROT_OK) {
        f->t = (qx_gguf_tinfo*)calloc((size_t)(f->n_tensors ? f->n_tensors : 1), sizeof *f->t);
        order = (qx_gguf_tinfo**)malloc((size_t)(f->n_tensors ? f->n_tensors : 1) * sizeof *order);
        if (!f->t || !order) { qx_err_set(e, "%s: out of memory", name); res = QUAROT_ERR_OUT_OF_MEMORY; }
    }
    if (res == QUAROT_OK) res = qx__gparse_tinfos(&r, f, order);
    if (res == QUAROT_OK) res = qx__gdata_section(&r, f, len);
    if (res == QUAROT_OK) res = qx__gcheck_overlaps(&r, f, order);
    free(order);
    if (res != QUAROT_OK) qx_gguf_file_free(f);
    return res;
}

const qx_gguf_kv* qx_gguf_find(const qx_gguf_file* f, const char* key) {
    uint64_t k, n;
    if (!f || !key) return NULL;
    n = strlen(key);
    for (k = 0; k < f->n_kv; ++k)
        if (f->kv[k].key_len == n && memcmp(f->kv[k].key, key, (size_t)n) == 0) return &f->kv[k];
    return NULL;
}

quarot_result qx_gguf_kv_int(const qx_gguf_kv* kv, int64_t* out) {
    uint64_t u;
    if (!kv || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    switch (kv->type) {
        case QX_GGUF_U8: case QX_GGUF_U16: case QX_GGUF_U32: case QX_GGUF_U64:
            u = qx_str_le(kv->val, qx__gguf_scalar_size(kv->type));
            if (u > (uint64_t)INT64_MAX) return QUAROT_ERR_OVERFLOW;
            *out = (int64_t)u;
            return QUAROT_OK;
        case QX_GGUF_I8: *out = (int8_t)kv->val[0]; return QUAROT_OK;
        case QX_GGUF_I16: *out = (int16_t)(uint16_t)qx_str_le(kv->val, 2); return QUAROT_OK;
        case QX_GGUF_I32: *out = (int32_t)(uint32_t)qx_str_le(kv->val, 4); return QUAROT_OK;
        case QX_GGUF_I64: *out = (int64_t)qx_str_le(kv->val, 8); return QUAROT_OK;
        default: return QUAROT_ERR_PARSE;
    }
}

quarot_result qx_gguf_kv_float(const qx_gguf_kv* kv, double* out) {
    if (!kv || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    if (kv->type == QX_GGUF_F32) {
        uint32_t u = (uint32_t)qx_str_le(kv->val, 4);
        float x;
        memcpy(&x, &u, 4);
        *out = (double)x;
        return QUAROT_OK;
    }
    if (kv->type == QX_GGUF_F64) {
        uint64_t u = qx_str_le(kv->val, 8);
        memcpy(out, &u, 8);
        return QUAROT_OK;
    }
    return QUAROT_ERR_PARSE;
}

const char* qx_gguf_kv_string(const qx_gguf_kv* kv, uint64_t* len) {
    if (!kv || kv->type != QX_GGUF_STRING) return NULL;
    if (len) *len = kv->val_len;
    return (const char*)kv->val;
}

/* ---- names ---- */

/* The one mapping table. Layer names are "blk.N.<gguf>" <-> "model.layers.N.<hf>". */
static const char* const qx__gguf_global[][2] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
};
static const char* const qx__gguf_layer[][2] = {
    {"attn_norm.weight", "input_layernorm.weight"},
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},   /* qwen3 */
    {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"attn_qkv.weight", "self_attn.qkv_proj.weight"},   /* phi3: q|k|v rows */
    {"attn_qkv.bias", "self_attn.qkv_proj.bias"},
    {"ffn_up.weight", "mlp.gate_up_proj.weight"},       /* phi3: gate|up rows (GGUF -> HF: qx__gguf_to_store) */
    {"ffn_gate_inp.weight", "mlp.gate.weight"},                  /* qwen2moe / qwen3moe: router */
    {"ffn_gate_exps.weight", "mlp.experts.gate_proj.weight"},    /* experts, 3-D [n_expert][out][in] */
    {"ffn_up_exps.weight", "mlp.experts.up_proj.weight"},
    {"ffn_down_exps.weight", "mlp.experts.down_proj.weight"},
    {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
    {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
    {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
    {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
    /* Mixtral (llama.cpp: arch llama with expert_count): HF -> GGUF here; GGUF -> HF by qx__gguf_mixtral_name */
    {"ffn_gate_inp.weight", "block_sparse_moe.gate.weight"},
    {"ffn_gate_exps.weight", "block_sparse_moe.experts.w1.weight"},
    {"ffn_up_exps.weight", "block_sparse_moe.experts.w3.weight"},
    {"ffn_down_exps.weight", "block_sparse_moe.experts.w2.weight"},
};

/* dir 0: GGUF -> HF, 1: HF -> GGUF. Global names first, then "blk.N." / "model.layers.N." with a
   per-layer suffix from the table; anything else is copied unchanged. */
static int qx__gguf_map(const char* in, char* out, size_t n, int dir) {
    static const char* const prefix[2] = {"blk.", "model.layers."};
    const char* pre = prefix[dir];
    size_t k, pl = strlen(pre);
    if (!in || !out || n == 0) return -1;
    for (k = 0; k < sizeof qx__gguf_global / sizeof qx__gguf_global[0]; ++k)
        if (strcmp(in, qx__gguf_global[k][dir]) == 0) {
            if (strlen(qx__gguf_global[k][!dir]) >= n) return -1;
            strcpy(out, qx__gguf_global[k][!dir]);
            return 1;
        }
    if (strncmp(in, pre, pl) == 0) {
        const char* d = in + pl;
        const char* q = d;
        while (*q >= '0' && *q <= '9' && q - d < 9) ++q;
        /* a plain layer number (no sign, no leading zero) followed by a known suffix */
        if (q > d && *q == '.' && !(d[0] == '0' && q - d > 1))
            for (k = 0; k < sizeof qx__gguf_layer / sizeof qx__gguf_layer[0]; ++k)
                if (strcmp(q + 1, qx__gguf_layer[k][dir]) == 0) {
                    int w = snprintf(out, n, "%s%.*s.%s", prefix[!dir], (int)(q - d), d, qx__gguf_layer[k][!dir]);
                    return w < 0 || (size_t)w >= n ? -1 : 1;
                }
    }
    if (strlen(in) >= n) return -1;
    strcpy(out, in);
    return 0;
}

int qx_gguf_name_to_hf(const char* gguf, char* out, size_t n) { return qx__gguf_map(gguf, out, n, 0); }

/* A Mixtral GGUF's router and experts under the mixtral adapter's names (block_sparse_moe.gate,
   block_sparse_moe.experts.w1 / w3 / w2: the stacked form) instead of the Qwen-MoE ones the table
   maps them to first; hname holds at least strlen + 16 bytes more. */
static void qx__gguf_mixtral_name(char* hname, size_t n) {
    static const char* const from[4] = {".mlp.gate.weight", ".mlp.experts.gate_proj.weight", ".mlp.experts.up_proj.weight",
                                        ".mlp.experts.down_proj.weight"};
    static const char* const to[4] = {".block_sparse_moe.gate.weight", ".block_sparse_moe.experts.w1.weight",
                                      ".block_sparse_moe.experts.w3.weight", ".block_sparse_moe.experts.w2.weight"};
    size_t len = strlen(hname), k;
    for (k = 0; k < 4; ++k) {
        size_t fl = strlen(from[k]);
        if (len > fl && strcmp(hname + len - fl, from[k]) == 0 && len - fl + strlen(to[k]) < n) {
            strcpy(hname + len - fl, to[k]);
            return;
        }
    }
}
int qx_gguf_name_from_hf(const char* hf, char* out, size_t n) { return qx__gguf_map(hf, out, n, 1); }

/* ---- GGUF -> store ---- */

/* Integer key `key` within [lo, hi]; absent -> def (def < lo: required). */
static quarot_result qx__gint(const qx_gguf_file* f, const char* fname, const char* key, int64_t def, int64_t lo,
                              int64_t hi, int64_t* out, qx_err* e) {
    const qx_gguf_kv* kv = qx_gguf_find(f, key);
    if (!kv) {
        if (def < lo) { qx_err_set(e, "%s: required key %s is missing", fname, key); return QUAROT_ERR_PARSE; }
        if (def > hi) { qx_err_set(e, "%s: %s (derived: %lld) exceeds %lld", fname, key, (long long)def, (long long)hi); return QUAROT_ERR_PARSE; }
        *out = def;
        return QUAROT_OK;
    }
    if (qx_gguf_kv_int(kv, out) != QUAROT_OK || *out < lo || *out > hi) {
        qx_err_set(e, "%s: %s must be an integer in [%lld, %lld]", fname, key, (long long)lo, (long long)hi);
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

static quarot_result qx__gfloat(const qx_gguf_file* f, const char* fname, const char* key, double def, double hi,
                                float* out, qx_err* e) {
    const qx_gguf_kv* kv = qx_gguf_find(f, key);
    double d = def;
    if (kv && (qx_gguf_kv_float(kv, &d) != QUAROT_OK || !(d > 0.0 && d <= hi))) {
        qx_err_set(e, "%s: %s must be a float in (0, %g]", fname, key, hi);
        return QUAROT_ERR_PARSE;
    }
    *out = (float)d;
    return QUAROT_OK;
}

/* The tensor info named `name`, or NULL. */
static const qx_gguf_tinfo* qx__gtensor(const qx_gguf_file* f, const char* name) {
    uint64_t k, n = strlen(name);
    for (k = 0; k < f->n_tensors; ++k)
        if (f->t[k].name_len == n && memcmp(f->t[k].name, name, (size_t)n) == 0) return &f->t[k];
    return NULL;
}

/* The architectures read and written here: llama.cpp's names, and whether its converter stores q/k
   rows in the interleaved RoPE layout (llama: LLAMA_ROPE_TYPE_NORM, rows permuted) or keeps Hugging
   Face's half-split one (qwen2, qwen3: LLAMA_ROPE_TYPE_NEOX, rows as in the checkpoint). */
static const struct { const char* arch; int interleaved; } qx__gguf_archs[] = {
    {"llama", 1}, {"qwen2", 0}, {"qwen3", 0}, {"phi3", 0}, {"qwen2_moe", 0}, {"qwen3_moe", 0}, {"mixtral", 1},
    {"qwen2vl", 0},   /* written only: the text decoder of a Hugging Face Qwen2-VL (qx_gguf_kv_from_config) */
};
#define QX__N_GGUF_ARCHS ((int)(sizeof qx__gguf_archs / sizeof qx__gguf_archs[0]))

int qx_gguf_arch_supported(const char* arch, int* interleaved) {
    int k;
    for (k = 0; arch && k < QX__N_GGUF_ARCHS; ++k)
        if (strcmp(arch, qx__gguf_archs[k].arch) == 0) {
            if (interleaved) *interleaved = qx__gguf_archs[k].interleaved;
            return 1;
        }
    return 0;
}

/* llama.cpp's architecture name of a store architecture (qwen2_moe -> qwen2moe; mixtral -> llama,
   which llama.cpp writes with expert_count) and back. */
static const char* qx__gguf_arch_name(const char* arch) {
    return strcmp(arch, "qwen2_moe") == 0 ? "qwen2moe" : strcmp(arch, "qwen3_moe") == 0 ? "qwen3moe" :
           strcmp(arch, "mixtral") == 0 ? "llama" : arch;
}

/* "<arch>.<rest>" into buf (arch names are short: the keys always fit). */
static const char* qx__akey(char* buf, size_t n, const char* arch, const char* rest) {
    snprintf(buf, n, "%s.%s", arch, rest);
    return buf;
}

static quarot_result qx__gguf_config_as(const qx_gguf_file* f, const char* fname, const char* key_arch, const char* arch,
                                        int interleaved, quarot_model_config* c, qx_err* e);

/* llama.cpp's qwen2vl (convert_hf_to_gguf.py's Qwen2VLModel, Qwen2-VL and Qwen2.5-VL): the text
   decoder only, with the vision tower in a separate mmproj file. Its keys are qwen2's under
   "qwen2vl." plus rope.dimension_sections (M-RoPE's sections, up to 4, summing to head_dim / 2); its
   q/k rows are in the half-split layout (LLAMA_ROPE_TYPE_MROPE pairs like NEOX). For text tokens the
   sections' three positions are equal and M-RoPE is ordinary RoPE (see qx_safetensors.c's
   qx__vl_config), so the store gets arch "qwen2", read under the qwen2vl keys, and the blob
   "gguf.vl" = "qwen2vl" says what it is (the input's key/value pairs, arch included, are what a GGUF
   output keeps). */
static quarot_result qx__gguf_config_vl(const qx_gguf_file* f, const char* fname, quarot_model_config* c, qx_err* e) {
    const qx_gguf_kv* ds = qx_gguf_find(f, "qwen2vl.rope.dimension_sections");
    int64_t sum = 0;
    uint64_t k;
    quarot_result r = qx__gguf_config_as(f, fname, "qwen2vl", "qwen2", 0, c, e);
    if (r != QUAROT_OK) return r;
    if (!ds || ds->type != QX_GGUF_ARRAY || (ds->arr_type != QX_GGUF_I32 && ds->arr_type != QX_GGUF_U32) ||
        ds->arr_count < 1 || ds->arr_count > 4 || ds->val_len != 4 * ds->arr_count) {
        qx_err_set(e, "%s: qwen2vl.rope.dimension_sections must be an array of up to 4 int32 (M-RoPE's sections)", fname);
        return QUAROT_ERR_PARSE;
    }
    for (k = 0; k < ds->arr_count; ++k) {
        const unsigned char* b = ds->val + 4 * k;
        uint32_t u = (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        if (ds->arr_type == QX_GGUF_I32 && u > 0x7fffffffu) {
            qx_err_set(e, "%s: qwen2vl.rope.dimension_sections[%llu] is negative", fname, (unsigned long long)k);
            return QUAROT_ERR_PARSE;
        }
        sum += (int64_t)u;
    }
    if (sum * 2 != c->head_dim) {
        qx_err_set(e, "%s: qwen2vl.rope.dimension_sections sums to %lld, but head_dim / 2 is %lld", fname, (long long)sum,
                   (long long)(c->head_dim / 2));
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

/* <arch>.* keys -> config (see the header). */
static quarot_result qx__gguf_config(const qx_gguf_file* f, const char* fname, quarot_model_config* c, qx_err* e) {
    const qx_gguf_kv* kv = qx_gguf_find(f, "general.architecture");
    uint64_t al = 0;
    const char* arch = qx_gguf_kv_string(kv, &al);
    int k;
    memset(c, 0, sizeof *c);
    if (!arch) { qx_err_set(e, "%s: no general.architecture string", fname); return QUAROT_ERR_PARSE; }
    if (al == 7 && memcmp(arch, "qwen2vl", 7) == 0) return qx__gguf_config_vl(f, fname, c, e);
    for (k = 0; k < QX__N_GGUF_ARCHS; ++k) {
        const char* g = qx__gguf_arch_name(qx__gguf_archs[k].arch);
        if (al == strlen(g) && memcmp(arch, g, (size_t)al) == 0) break;
    }
    if (k == QX__N_GGUF_ARCHS && al == 6 && (memcmp(arch, "gemma2", 6) == 0 || memcmp(arch, "gemma3", 6) == 0)) {
        qx_err_set(e, "%s: architecture \"%.*s\" is not supported: %s", fname, (int)al, arch, qx_gemma_norms_reason);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (k == QX__N_GGUF_ARCHS) {
        qx_err_set(e, "%s: architecture \"%.*s\" is not supported (llama, qwen2, qwen3, phi3, qwen2moe, qwen3moe; "
                   "Mistral GGUF files are \"llama\")", fname, (int)(al > 40 ? 40 : al), arch);
        return QUAROT_ERR_UNSUPPORTED;
    }
    return qx__gguf_config_as(f, fname, qx__gguf_arch_name(qx__gguf_archs[k].arch), qx__gguf_archs[k].arch,
                              qx__gguf_archs[k].interleaved, c, e);
}

/* The config of a GGUF file whose keys are "<a>.*", into store arch `arch`. */
static quarot_result qx__gguf_config_as(const qx_gguf_file* f, const char* fname, const char* key_arch, const char* arch,
                                        int interleaved, quarot_model_config* c, qx_err* e) {
    const qx_gguf_kv* kv;
    const qx_gguf_tinfo* emb;
    int64_t x;
    char a[16], kb[96];
    const int64_t DMAX = (int64_t)1 << 24;
    snprintf(a, sizeof a, "%s", key_arch);
    snprintf(c->arch, sizeof c->arch, "%s", arch);
#define QX__K(rest) qx__akey(kb, sizeof kb, a, rest)
    if (strcmp(c->arch, "llama") == 0 && qx_gguf_find(f, QX__K("expert_count"))) {
        /* Mixtral as llama.cpp writes it: arch llama with expert_count, experts of feed_forward_length
           (MixtralConfig's intermediate_size), top-k weights renormalized */
        strcpy(c->arch, "mixtral");
        if (qx__gint(f, fname, QX__K("expert_count"), 0, 1, 1 << 16, &c->n_experts, e) != QUAROT_OK ||
            qx__gint(f, fname, QX__K("expert_used_count"), 0, 1, c->n_experts, &c->n_experts_used, e) != QUAROT_OK)
            return QUAROT_ERR_PARSE;
        c->norm_topk_prob = 1;
        c->sparse_step = 1;
        c->experts_stacked = 1;
    }
    if (strcmp(c->arch, "qwen2_moe") == 0 || strcmp(c->arch, "qwen3_moe") == 0) {
        /* llama.cpp's MoE keys; every layer is a MoE layer there, qwen3moe renormalizes the top-k weights */
        if (qx__gint(f, fname, QX__K("expert_count"), 0, 1, 1 << 16, &c->n_experts, e) != QUAROT_OK ||
            qx__gint(f, fname, QX__K("expert_used_count"), 0, 1, c->n_experts, &c->n_experts_used, e) != QUAROT_OK ||
            qx__gint(f, fname, QX__K("expert_feed_forward_length"), 0, 1, DMAX, &c->expert_intermediate, e) != QUAROT_OK ||
            qx__gint(f, fname, QX__K("expert_shared_feed_forward_length"), 0, 0, DMAX, &c->shared_intermediate, e) !=
                QUAROT_OK)
            return QUAROT_ERR_PARSE;
        c->norm_topk_prob = strcmp(c->arch, "qwen3_moe") == 0;
        c->sparse_step = 1;
        c->experts_stacked = 1;
    }
    if (qx__gint(f, fname, QX__K("embedding_length"), 0, 1, DMAX, &c->hidden, e) != QUAROT_OK ||
        qx__gint(f, fname, QX__K("feed_forward_length"), 0, 1, DMAX, &c->intermediate, e) != QUAROT_OK ||
        qx__gint(f, fname, QX__K("block_count"), 0, 1, 1 << 16, &c->n_layers, e) != QUAROT_OK ||
        qx__gint(f, fname, QX__K("attention.head_count"), 0, 1, 1 << 16, &c->n_heads, e) != QUAROT_OK ||
        qx__gint(f, fname, QX__K("attention.head_count_kv"), c->n_heads, 1, c->n_heads, &c->n_kv_heads, e) != QUAROT_OK ||
        qx__gint(f, fname, QX__K("context_length"), 0, 0, (int64_t)1 << 40, &c->max_seq, e) != QUAROT_OK ||
        qx__gfloat(f, fname, QX__K("attention.layer_norm_rms_epsilon"), 1e-5, 1.0, &c->norm_eps, e) != QUAROT_OK ||
        qx__gfloat(f, fname, QX__K("rope.freq_base"), 10000.0, 1e12, &c->rope_theta, e) != QUAROT_OK)
        return QUAROT_ERR_PARSE;
    if (strcmp(c->arch, "mixtral") == 0 &&
        qx__gint(f, fname, QX__K("expert_feed_forward_length"), c->intermediate, c->intermediate, c->intermediate,
                 &c->expert_intermediate, e) != QUAROT_OK)
        return QUAROT_ERR_PARSE;
    if (c->n_heads % c->n_kv_heads != 0) {
        qx_err_set(e, "%s: head_count %lld is not a multiple of head_count_kv %lld", fname, (long long)c->n_heads, (long long)c->n_kv_heads);
        return QUAROT_ERR_PARSE;
    }
    if (qx__gint(f, fname, QX__K("attention.key_length"), c->hidden % c->n_heads == 0 ? c->hidden / c->n_heads : 0, 1, DMAX,
                 &c->head_dim, e) != QUAROT_OK)
        return QUAROT_ERR_PARSE;
    if (qx__gint(f, fname, QX__K("attention.value_length"), c->head_dim, c->head_dim, c->head_dim, &x, e) != QUAROT_OK ||
        qx__gint(f, fname, QX__K("rope.dimension_count"), c->head_dim, c->head_dim, c->head_dim, &x, e) != QUAROT_OK) {
        qx_err_set(e, "%s: value_length and rope.dimension_count must equal the head size %lld (partial RoPE is not supported)",
                   fname, (long long)c->head_dim);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (c->head_dim % 2) { qx_err_set(e, "%s: odd head size %lld", fname, (long long)c->head_dim); return QUAROT_ERR_PARSE; }
    /* vocabulary: <arch>.vocab_size, else the token list, else the rows of the embedding or output */
    kv = qx_gguf_find(f, "tokenizer.ggml.tokens");
    emb = qx__gtensor(f, "token_embd.weight");
    if (!emb) emb = qx__gtensor(f, "output.weight");
    x = kv && kv->type == QX_GGUF_ARRAY ? (int64_t)kv->arr_count : emb ? emb->ne[1] : 0;
    if (qx__gint(f, fname, QX__K("vocab_size"), x, 1, DMAX, &c->vocab, e) != QUAROT_OK) return QUAROT_ERR_PARSE;
#undef QX__K
    c->norm = QUAROT_NORM_RMS;
    c->mlp = QUAROT_MLP_GATED;
    c->act = QUAROT_ACT_SILU;
    c->rope_interleaved = interleaved;
    c->tied_embeddings = qx__gtensor(f, "output.weight") == NULL;
    c->attn_qkv_bias = qx__gtensor(f, "blk.0.attn_q.bias") != NULL || qx__gtensor(f, "blk.0.attn_qkv.bias") != NULL;
    c->attn_out_bias = qx__gtensor(f, "blk.0.attn_output.bias") != NULL;
    c->qk_norm = qx__gtensor(f, "blk.0.attn_q_norm.weight") != NULL;
    if (strcmp(a, "llama") == 0 && c->qk_norm) {
        qx_err_set(e, "%s: a llama model with attn_q_norm tensors (q/k norms are qwen3's)", fname);
        return QUAROT_ERR_UNSUPPORTED;
    }
    return QUAROT_OK;
}

/* The tensor check speaks of the store's (Hugging Face) names: the first quoted one that has a GGUF
   name gets it in front, so the line names the tensor as the file does. */
static void qx__gguf_err_names(qx_err* e) {
    char* a = strchr(e->msg, '"');
    char* b = a ? strchr(a + 1, '"') : NULL;
    char hf[QX_GGUF_MAX_NAME + 32], gg[QX_GGUF_MAX_NAME + 32], out[sizeof e->msg];
    int w;
    if (!b || (size_t)(b - a - 1) >= sizeof hf) return;
    memcpy(hf, a + 1, (size_t)(b - a - 1));
    hf[b - a - 1] = '\0';
    if (qx_gguf_name_from_hf(hf, gg, sizeof gg) != 1) return;
    w = snprintf(out, sizeof out, "%.*s\"%s\" (%s)%s", (int)(a - e->msg), e->msg, gg, hf, b + 1);
    if (w > 0 && (size_t)w < sizeof out) memcpy(e->msg, out, sizeof out);
}

/* Config, tensors (under Hugging Face names) and the pairs blob into s, then the tensor check. */
static quarot_result qx__gguf_to_store(const qx_gguf_file* f, const char* fname, qx_store* s, int allow_view, qx_err* e) {
    quarot_result r;
    uint64_t k;
    unsigned char n8[8];
    char* blob;
    r = qx__gguf_config(f, fname, &s->config, e);
    if (r != QUAROT_OK) return r;
    for (k = 0; k < f->n_tensors; ++k) {       /* every tensor must be loadable before any is added */
        const qx_gguf_tinfo* t = &f->t[k];
        char tb[16];
        quarot_dtype dt = t->type == QX_GGML_F32 ? QUAROT_DTYPE_F32 : t->type == QX_GGML_F16 ? QUAROT_DTYPE_F16 :
                          t->type == QX_GGML_BF16 ? QUAROT_DTYPE_BF16 : t->type == QX_GGML_F64 ? QUAROT_DTYPE_F64 : QUAROT_DTYPE_DEFAULT;
        if (t->type == QX_GGML_Q4_0 || t->type == QX_GGML_Q8_0) dt = QUAROT_DTYPE_F32;   /* dequantized on load */
        if (dt == QUAROT_DTYPE_DEFAULT) {
            if (t->type >= 24 && t->type <= 27)
                qx_err_set(e, "%s: tensor \"%.*s\" has integer type %s; only F32, F16, BF16 and F64 tensors load", fname,
                           QX__TN(t), qx_ggml_type_name(t->type, tb));
            else if (strncmp(qx_ggml_type_name(t->type, tb), "type ", 5) == 0)   /* not a GGML type at all */
                qx_err_set(e, "%s: tensor \"%.*s\" has unknown GGML type %u", fname, QX__TN(t), (unsigned)t->type);
            else
                qx_err_set(e, "%s: tensor \"%.*s\" has type %s: quantized GGUF tensors are not supported (of the quantized types, Q4_0 and Q8_0 load); convert from an "
                           "F16/F32 GGUF or safetensors", fname, QX__TN(t), qx_ggml_type_name(t->type, tb));
            return QUAROT_ERR_UNSUPPORTED_DTYPE;
        }
        if (t->nbytes == 0) {
            qx_err_set(e, "%s: tensor \"%.*s\" is empty (a 0 in ne[])", fname, QX__TN(t));
            return QUAROT_ERR_UNSUPPORTED;
        }
    }
    for (k = 0; k < f->n_tensors; ++k) {
        const qx_gguf_tinfo* t = &f->t[k];
        char gname[QX_GGUF_MAX_NAME], hname[QX_GGUF_MAX_NAME + 32];
        const unsigned char* p = f->data + t->offset;
        quarot_dtype dt = t->type == QX_GGML_F16 ? QUAROT_DTYPE_F16 : t->type == QX_GGML_BF16 ? QUAROT_DTYPE_BF16 :
                          t->type == QX_GGML_F64 ? QUAROT_DTYPE_F64 : QUAROT_DTYPE_F32;
        memcpy(gname, t->name, (size_t)t->name_len);
        gname[t->name_len] = '\0';
        if (qx_gguf_name_to_hf(gname, hname, sizeof hname) < 0) {
            qx_err_set(e, "%s: tensor \"%s\": name too long", fname, gname);
            return QUAROT_ERR_PARSE;
        }
        if (strcmp(s->config.arch, "phi3") == 0 && strlen(hname) > 19 &&
            strcmp(hname + strlen(hname) - 19, ".mlp.up_proj.weight") == 0)   /* phi3's ffn_up is gate|up */
            snprintf(hname + strlen(hname) - 19, sizeof hname - (strlen(hname) - 19), ".mlp.gate_up_proj.weight");
        if (strcmp(s->config.arch, "mixtral") == 0) qx__gguf_mixtral_name(hname, sizeof hname);
        if (qx_store_find(s, hname)) {
            qx_err_set(e, "%s: tensor \"%s\" maps to \"%s\", which exists already", fname, gname, hname);
            return QUAROT_ERR_PARSE;
        }
        if (t->type == QX_GGML_Q4_0 || t->type == QX_GGML_Q8_0) {
            /* an F32 copy, each row decoded from its blocks */
            quarot_tensor* dst = NULL;
            uint64_t rb = qx_ggml_row_bytes(t->type, t->ne[0]);
            int64_t row, rows = t->ne[1] * t->ne[2] * t->ne[3];
            r = qx_store_add(s, hname, QUAROT_DTYPE_F32, (int)t->n_dims, t->ne, NULL, &dst);
            for (row = 0; row < rows && r == QUAROT_OK; ++row)
                r = qx_ggml_decode_row(t->type, p + (size_t)row * rb, t->ne[0], (float*)dst->data + row * t->ne[0]);
        } else if (allow_view && (uintptr_t)p % quarot_dtype_size(dt) == 0) {
            quarot_tensor v;
            r = quarot_tensor_init(&v, (void*)(uintptr_t)p, dt, (int)t->n_dims, t->ne);
            if (r == QUAROT_OK) r = qx_store_add_view(s, hname, &v);
        } else {
            r = qx_store_add(s, hname, dt, (int)t->n_dims, t->ne, p, NULL);
        }
        if (r == QUAROT_OK && (int)t->n_dims != qx_plan_rank(t->ne)) {   /* outer sizes of 1 kept (qx_store_set_shape) */
            int64_t shape[QUAROT_MAX_DIMS];
            uint32_t d;
            for (d = 0; d < t->n_dims; ++d) shape[d] = t->ne[t->n_dims - 1 - d];
            r = qx_store_set_shape(s, hname, (int)t->n_dims, shape);
        }
        if (r != QUAROT_OK) {
            qx_err_set(e, "%s: tensor \"%s\": cannot add to the store (%s)", fname, gname, quarot_result_string(r));
            return r;
        }
    }
    /* the key/value pairs verbatim: u64 count + the bytes */
    blob = (char*)malloc((size_t)f->kv_bytes + 8);
    if (!blob) { qx_err_set(e, "%s: out of memory", fname); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (k = 0; k < 8; ++k) n8[k] = (unsigned char)(f->n_kv >> (8 * k));
    memcpy(blob, n8, 8);
    if (f->kv_bytes) memcpy(blob + 8, f->kv_begin, (size_t)f->kv_bytes);
    r = qx_store_set_blob(s, "gguf.kv", blob, (size_t)f->kv_bytes + 8);
    free(blob);
    {   /* llama.cpp's qwen2vl: the text decoder of a vision-language model (qx__gguf_config_vl) */
        uint64_t al = 0;
        const char* arch = qx_gguf_kv_string(qx_gguf_find(f, "general.architecture"), &al);
        if (r == QUAROT_OK && arch && al == 7 && memcmp(arch, "qwen2vl", 7) == 0) r = qx_store_set_blob(s, "gguf.vl", "qwen2vl", 7);
    }
    if (r != QUAROT_OK) { qx_err_set(e, "%s: out of memory", fname); return r; }
    r = qx_hf_check_tensors(s, fname, e);
    if (r != QUAROT_OK && e) qx__gguf_err_names(e);
    return r;
}

/* From memory: parse, then copy everything into s. */
quarot_result qx_gguf_read_mem(const void* buf, size_t len, const char* name, qx_store* s, qx_err* e) {
    qx_gguf_file f;
    quarot_result r;
    if (!s) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!name) name = "gguf";
    r = qx_gguf_parse(buf, len, name, &f, e);
    if (r != QUAROT_OK) return r;
    r = qx__gguf_to_store(&f, name, s, 0, e);
    qx_gguf_file_free(&f);
    return r;
}

/* From a file: map it, hand the mapping to a scratch store (views point into it), swap on success. */
quarot_result qx_gguf_load(const char* path, qx_store* s, const qx_gguf_read_opts* opts, qx_err* e) {
    qx_store tmp;
    qx_map* m;
    qx_gguf_file f;
    quarot_result r;
    if (!path || !s) return QUAROT_ERR_INVALID_ARGUMENT;
    if (s->count || s->n_blobs || s->n_cleanups) {
        qx_err_set(e, "%s: the store to load into is not empty", path);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    m = (qx_map*)calloc(1, sizeof *m);
    if (!m) { qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = qx_map_file(path, m, e);
    if (r != QUAROT_OK) { free(m); return r; }
    qx_store_init(&tmp);
    r = qx_store_on_free(&tmp, qx_unmap_and_free, m);        /* views keep the mapping alive */
    if (r != QUAROT_OK) { qx_unmap_and_free(m); qx_err_set(e, "%s: out of memory", path); return r; }
    r = qx_gguf_parse(m->addr, m->len, path, &f, e);
    if (r == QUAROT_OK) {
        r = qx__gguf_to_store(&f, path, &tmp, !(opts && opts->copy), e);
        qx_gguf_file_free(&f);
    }
    if (r != QUAROT_OK) { qx_store_free(&tmp); return r; }
    *s = tmp;
    return QUAROT_OK;
}

/* ---- writer ---- */

void qx_gguf_put_str(qx_sb* b, const char* s, uint64_t n) {
    qx_sb_le(b, n, 8);
    qx_sb_put(b, s, (size_t)n);
}

void qx_gguf_put_f32(qx_sb* b, float v) {
    uint32_t u;
    memcpy(&u, &v, 4);
    qx_sb_le(b, u, 4);
}

void qx_gguf_kv_key(qx_sb* b, const char* key, uint32_t type) {
    qx_gguf_put_str(b, key, strlen(key));
    qx_sb_le(b, type, 4);
}

void qx_gguf_kv_str(qx_sb* b, const char* key, const char* s, uint64_t n) {
    qx_gguf_kv_key(b, key, QX_GGUF_STRING);
    qx_gguf_put_str(b, s, n);
}

void qx_gguf_kv_u32(qx_sb* b, const char* key, uint32_t v) {
    qx_gguf_kv_key(b, key, QX_GGUF_U32);
    qx_sb_le(b, v, 4);
}

void qx_gguf_kv_bool(qx_sb* b, const char* key, int v) {
    qx_gguf_kv_key(b, key, QX_GGUF_BOOL);
    qx_sb_le(b, v != 0, 1);
}

void qx_gguf_kv_arr_begin(qx_sb* b, const char* key, uint32_t elem, uint64_t count) {
    qx_gguf_kv_key(b, key, QX_GGUF_ARRAY);
    qx_sb_le(b, elem, 4);
    qx_sb_le(b, count, 8);
}

int qx_gguf_kv_count_add(qx_sb* b, uint64_t n) {
    uint64_t count;
    int k;
    if (b->failed || b->len < 8) return -1;
    count = qx_str_le64((const unsigned char*)b->p) + n;
    for (k = 0; k < 8; ++k) b->p[k] = (char)(count >> (8 * k));
    return 0;
}

/* Encodes one change (key, type, value); QUAROT_ERR_INVALID_ARGUMENT when the value does not fit. */
static quarot_result qx__gset_encode(qx_sb* b, const qx_gguf_set* s, qx_err* e) {
    unsigned sz = qx__gguf_scalar_size((uint32_t)s->type);
    uint64_t bits = 0;
    qx_gguf_kv_key(b, s->key, (uint32_t)s->type);
    switch (s->type) {
        case QX_GGUF_U8: case QX_GGUF_U16: case QX_GGUF_U32: case QX_GGUF_BOOL:
            if (sz < 8 && s->u >> (8 * sz)) goto range;
            if (s->type == QX_GGUF_BOOL && s->u > 1) goto range;
            bits = s->u;
            break;
        case QX_GGUF_U64: bits = s->u; break;
        case QX_GGUF_I8: case QX_GGUF_I16: case QX_GGUF_I32: {
            int64_t lim = (int64_t)1 << (8 * sz - 1);
            if (s->i < -lim || s->i >= lim) goto range;
            bits = (uint64_t)s->i;
            break;
        }
        case QX_GGUF_I64: bits = (uint64_t)s->i; break;
        case QX_GGUF_F32: { float x = (float)s->f; uint32_t u; memcpy(&u, &x, 4); bits = u; break; }
        case QX_GGUF_F64: memcpy(&bits, &s->f, 8); break;
        case QX_GGUF_STRING:
            if (!s->str) goto range;
            qx_gguf_put_str(b, s->str, strlen(s->str));
            return QUAROT_OK;
        default:
            qx_err_set(e, "gguf: key %s: type %d cannot be set (scalars and strings only)", s->key, s->type);
            return QUAROT_ERR_INVALID_ARGUMENT;
    }
    qx_sb_le(b, bits, (int)sz);
    return QUAROT_OK;
range:
    qx_err_set(e, "gguf: key %s: value out of range for type %d", s->key, s->type);
    return QUAROT_ERR_INVALID_ARGUMENT;
}

/* The pairs of a "gguf.kv" blob with the changes applied, into out (count first); *n_out pairs. */
static quarot_result qx__gkv_build(const void* kv, size_t kv_len, const qx_gguf_set* set, int n_set, qx_sb* out,
                                   uint64_t* n_out, qx_err* e) {
    qx__gr r;
    qx_gguf_kv* kvs = NULL;
    uint64_t n = 0, k, count = 0;
    int j;
    quarot_result res;
    qx_sb_le(out, 0, 8);                              /* count, patched at the end */
    if (kv && kv_len) {
        if (kv_len < 8) { qx_err_set(e, "gguf.kv: blob of %zu bytes", kv_len); return QUAROT_ERR_PARSE; }
        r.start = (const unsigned char*)kv;
        r.p = r.start;
        r.end = r.start + kv_len;
        r.name = "gguf.kv";
        r.e = e;
        n = qx__rd64(&r);
        if ((res = qx__gparse_kvs(&r, n, &kvs)) != QUAROT_OK) return res;
        if (r.p != r.end) { free(kvs); qx_err_set(e, "gguf.kv: %llu trailing bytes", (unsigned long long)(r.end - r.p)); return QUAROT_ERR_PARSE; }
    }
    for (j = 0; j < n_set; ++j)
        if (!set[j].key || !set[j].key[0]) { free(kvs); qx_err_set(e, "gguf: a change without a key"); return QUAROT_ERR_INVALID_ARGUMENT; }
    for (k = 0; k < n; ++k) {                     /* existing pairs in order: verbatim, replaced, or removed */
        int last = -1;
        for (j = 0; j < n_set; ++j)
            if (strlen(set[j].key) == kvs[k].key_len && memcmp(set[j].key, kvs[k].key, (size_t)kvs[k].key_len) == 0) last = j;
        if (last < 0) { qx_sb_put(out, (const char*)kvs[k].raw, (size_t)kvs[k].raw_len); ++count; continue; }
        if (set[last].type < 0) continue;
        if ((res = qx__gset_encode(out, &set[last], e)) != QUAROT_OK) { free(kvs); return res; }
        ++count;
    }
    for (j = 0; j < n_set; ++j) {                 /* new keys: the last change of each, if not a removal */
        int later = 0, jj;
        for (jj = j + 1; jj < n_set; ++jj) if (strcmp(set[jj].key, set[j].key) == 0) later = 1;
        for (k = 0; k < n && !later; ++k)
            if (strlen(set[j].key) == kvs[k].key_len && memcmp(set[j].key, kvs[k].key, (size_t)kvs[k].key_len) == 0) later = 1;
        if (later || set[j].type < 0) continue;
        if ((res = qx__gset_encode(out, &set[j], e)) != QUAROT_OK) { free(kvs); return res; }
        ++count;
    }
    free(kvs);
    if (out->failed) { qx_err_set(e, "gguf: out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (k = 0; k < 8; ++k) out->p[k] = (char)(count >> (8 * k));
    *n_out = count;
    return QUAROT_OK;
}

typedef struct qx__gw_t {
    char* hf;
    char* gguf;
    quarot_dtype dt;
    uint32_t ggml;
    int n_dims;
    int64_t ne[QUAROT_MAX_DIMS];
    uint64_t nbytes, off;     /* off: absolute in the file */
    int written;
    int raw;                  /* a block type: bytes through qx_gguf_writer_put_raw */
    int64_t rows_done;        /* qx_gguf_writer_put_rows: rows written so far */
    int64_t expert;           /* >= 0: Hugging Face's tensor of one expert, written as that expert's
                                 slice of the 3-D GGUF tensor `gguf` (-1: a tensor of its own) */
    int64_t group;            /* the first expert of a group: its expert count (the file's ne[2]) */
} qx__gw_t;

struct qx_gguf_writer {
    qx_out out;
    qx__gw_t* t;              /* sorted by qx_name_cmp of the HF name */
    int64_t n;
    uint64_t file_size;
};

/* Removes the temporary and frees everything (also the common end of finish). */
void qx_gguf_writer_abort(qx_gguf_writer* w) {
    int64_t i;
    if (!w) return;
    qx_out_abort(&w->out);
    for (i = 0; i < w->n; ++i) { free(w->t[i].hf); free(w->t[i].gguf); }
    free(w->t);
    free(w);
}

/* Planned tensors: by HF name for lookups, by GGUF name for the file's order. */
static int qx__gw_hf_cmp(const void* a, const void* b) {
    return qx_name_cmp(((const qx__gw_t*)a)->hf, ((const qx__gw_t*)b)->hf);
}
static int qx__gw_gguf_cmp(const void* a, const void* b) {
    const qx__gw_t* x = *(const qx__gw_t* const*)a;
    const qx__gw_t* y = *(const qx__gw_t* const*)b;
    int c = qx_name_cmp(x->gguf, y->gguf);
    return c ? c : (x->expert > y->expert) - (x->expert < y->expert);
}

/* ---- qx_gguf_writer_begin, step by step ---- */

/* What qx_gguf_writer_begin works with; its steps fill w (freed by qx_gguf_writer_abort on failure). */
typedef struct qx__gwb {
    qx_gguf_writer* w;
    const char* path;
    const qx_gguf_write_opts* opts;
    qx_sb kvb;                   /* the key/value pairs, after an 8-byte count */
    qx_sb hdr;                   /* the file's header */
    qx__gw_t** order;            /* the tensors in the file's order (natural order of GGUF names) */
    uint64_t n_kv, align;
    qx_err* e;
} qx__gwb;

/* Key/value pairs with the changes, re-parsed: a change may not create a duplicate key, and the
   resulting general.alignment must be a u32 power of two. */
static quarot_result qx__gwb_pairs(qx__gwb* g, const void* kv, size_t kv_len) {
    qx__gr rr;
    qx_gguf_kv* kvs = NULL;
    qx_gguf_file tmpf;
    const qx_gguf_kv* al;
    int64_t a;
    quarot_result r = qx__gkv_build(kv, kv_len, g->opts ? g->opts->set : NULL, g->opts ? g->opts->n_set : 0, &g->kvb, &g->n_kv, g->e);
    if (r != QUAROT_OK) return r;
    rr.start = rr.p = (const unsigned char*)g->kvb.p + 8;
    rr.end = (const unsigned char*)g->kvb.p + g->kvb.len;
    rr.name = g->path;
    rr.e = g->e;
    if ((r = qx__gparse_kvs(&rr, g->n_kv, &kvs)) != QUAROT_OK) return r;   /* e.g. a change made a key twice */
    memset(&tmpf, 0, sizeof tmpf);
    tmpf.kv = kvs;
    tmpf.n_kv = g->n_kv;
    al = qx_gguf_find(&tmpf, "general.alignment");
    if (al && (al->type != QX_GGUF_U32 || qx_gguf_kv_int(al, &a) != QUAROT_OK || a < 1 || a > (1 << 30) || (a & (a - 1)))) {
        free(kvs);
        qx_err_set(g->e, "%s: general.alignment must be a u32 power of two", g->path);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (al) g->align = (uint64_t)a;
    free(kvs);
    return QUAROT_OK;
}

/* Plan entry i into w->t[i]: checked like the safetensors writer's, its name mapped to GGUF, its
   type (a block type from opts->block_types) and byte size. */
static quarot_result qx__gwb_tensor(qx__gwb* g, const qx_tensor_plan* p, int64_t i) {
    qx__gw_t* t = &g->w->t[i];
    const char* path = g->path;
    qx_err* e = g->e;
    char gn[QX_GGUF_MAX_NAME + 64];
    size_t es;
    int d;
    if (!p->name || !p->name[0] || p->n_dims < 1 || p->n_dims > QUAROT_MAX_DIMS) {
        qx_err_set(e, "%s: plan entry %lld needs a name and 1..4 dimensions", path, (long long)i);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (p->shape && p->rank > QUAROT_MAX_DIMS) {
        qx_err_set(e, "%s: tensor \"%.100s\" has %d dimensions; GGUF holds at most %d", path, p->name, p->rank,
                   QUAROT_MAX_DIMS);
        return QUAROT_ERR_UNSUPPORTED;
    }
    t->dt = p->dtype == QUAROT_DTYPE_DEFAULT ? QUAROT_DTYPE_F32 : p->dtype;
    t->ggml = t->dt == QUAROT_DTYPE_F32 ? QX_GGML_F32 : t->dt == QUAROT_DTYPE_F16 ? QX_GGML_F16 :
              t->dt == QUAROT_DTYPE_BF16 ? QX_GGML_BF16 : QX_GGML_F64;
    es = quarot_dtype_size(t->dt);
    if (g->opts && g->opts->block_types && g->opts->block_types[i]) {
        uint32_t bt = g->opts->block_types[i];
        if ((bt != QX_GGML_Q4_0 && bt != QX_GGML_Q8_0) || p->n_dims < 1 || p->ne[0] < 1 || p->ne[0] % QX_GGML_QK) {
            qx_err_set(e, "%s: tensor \"%s\": block type %u needs Q4_0/Q8_0 and rows of a multiple of %d elements", path,
                       p->name, bt, QX_GGML_QK);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        t->ggml = bt;
        t->raw = 1;
    }
    if (!es) { qx_err_set(e, "%s: tensor \"%s\": unknown dtype", path, p->name); return QUAROT_ERR_UNSUPPORTED_DTYPE; }
    {   /* one expert's tensor: named as the stacked one, written as its slice */
        char sn[QX_GGUF_MAX_NAME + 64];
        t->expert = qx_hf_expert_stacked_name(p->name, sn, sizeof sn);
        if (t->expert >= 0 && (p->n_dims > 2 || p->shape)) {
            qx_err_set(e, "%s: tensor \"%.100s\": an expert's tensor must be 2-D", path, p->name);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        if (t->expert >= 0 && (qx_gguf_name_from_hf(sn, gn, sizeof gn) < 0 || strncmp(gn, "blk.", 4) != 0 ||
                               strlen(gn) >= QX_GGUF_MAX_NAME))
            t->expert = -1;
    }
    if (t->expert < 0 && (qx_gguf_name_from_hf(p->name, gn, sizeof gn) < 0 || strlen(gn) >= QX_GGUF_MAX_NAME)) {
        qx_err_set(e, "%s: tensor \"%.100s\": name too long for GGUF", path, p->name);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    t->hf = (char*)malloc(strlen(p->name) + 1);
    t->gguf = (char*)malloc(strlen(gn) + 1);
    if (!t->hf || !t->gguf) { qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    strcpy(t->hf, p->name);
    strcpy(t->gguf, gn);
    t->n_dims = p->shape && p->rank >= 1 ? p->rank : p->n_dims;   /* a recorded shape: its outer 1s kept */
    t->nbytes = es;
    for (d = 0; d < QUAROT_MAX_DIMS; ++d) {
        t->ne[d] = p->shape || d < p->n_dims ? p->ne[d] : 1;
        if (t->ne[d] < 1 || t->nbytes > ((uint64_t)1 << 62) / (uint64_t)t->ne[d]) {
            qx_err_set(e, "%s: tensor \"%s\": bad or overflowing shape", path, p->name);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        t->nbytes *= (uint64_t)t->ne[d];
    }
    if (t->raw) t->nbytes = t->nbytes / es / QX_GGML_QK * (t->ggml == QX_GGML_Q4_0 ? QX_GGML_Q4_0_BLOCK : QX_GGML_Q8_0_BLOCK);
    return QUAROT_OK;
}

/* The tensors sorted by HF name (lookups bisect) and, in g->order, by GGUF name; two HF names may not
   map to one GGUF name. */
static quarot_result qx__gwb_order(qx__gwb* g) {
    qx_gguf_writer* w = g->w;
    int64_t i, n = w->n;
    qsort(w->t, (size_t)n, sizeof *w->t, qx__gw_hf_cmp);
    for (i = 0; i < n; ++i) g->order[i] = &w->t[i];
    qsort(g->order, (size_t)n, sizeof *g->order, qx__gw_gguf_cmp);
    for (i = 0; i < n; ++i) {   /* experts 0 .. E-1 of one shape and type make one 3-D tensor */
        qx__gw_t* f = g->order[i];
        int64_t j = i + 1;
        if (f->expert < 0) {
            if (i + 1 < n && strcmp(f->gguf, g->order[i + 1]->gguf) == 0) break;
            continue;
        }
        while (j < n && strcmp(g->order[j]->gguf, f->gguf) == 0) {
            const qx__gw_t* x = g->order[j];
            if (x->expert != j - i || x->dt != f->dt || x->ggml != f->ggml || x->ne[0] != f->ne[0] || x->ne[1] != f->ne[1]) {
                qx_err_set(g->e, "%s: tensor \"%s\" is not expert %lld of \"%s\" with expert 0's shape and type", g->path,
                           x->hf, (long long)(j - i), f->gguf);
                return QUAROT_ERR_INVALID_ARGUMENT;
            }
            ++j;
        }
        if (f->expert != 0) {
            qx_err_set(g->e, "%s: tensor \"%s\": the experts of \"%s\" do not start at 0", g->path, f->hf, f->gguf);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        f->group = j - i;
        i = j - 1;
    }
    if (i < n) {
        qx_err_set(g->e, "%s: two tensors map to GGUF name \"%s\"", g->path, g->order[i]->gguf);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

/* Header, pairs, tensor infos (natural order of GGUF names), padding; the absolute offsets; the
   temporary opened and the header written. */
static quarot_result qx__gwb_header(qx__gwb* g) {
    qx_gguf_writer* w = g->w;
    qx_sb* hdr = &g->hdr;
    uint64_t pos = 0, align = g->align, n_file = 0;
    int64_t i, n = w->n;
    quarot_result r;
    for (i = 0; i < n; ++i) n_file += g->order[i]->expert <= 0;   /* a group of experts is one tensor */
    qx_sb_put(hdr, "GGUF", 4);
    qx_sb_le(hdr, 3, 4);
    qx_sb_le(hdr, n_file, 8);
    qx_sb_le(hdr, g->n_kv, 8);
    qx_sb_put(hdr, g->kvb.p + 8, g->kvb.len - 8);
    for (i = 0; i < n; ++i) {
        qx__gw_t* t = g->order[i];
        uint64_t bytes = t->nbytes;
        int d;
        if (t->expert > 0) continue;   /* placed with expert 0 */
        qx_gguf_put_str(hdr, t->gguf, strlen(t->gguf));
        if (t->expert == 0) {   /* [n_expert][out][in]: expert e's rows at e * its size, no padding between */
            int64_t x;
            qx_sb_le(hdr, 3, 4);
            qx_sb_le(hdr, (uint64_t)t->ne[0], 8);
            qx_sb_le(hdr, (uint64_t)t->ne[1], 8);
            qx_sb_le(hdr, (uint64_t)t->group, 8);
            for (x = 0; x < t->group; ++x) g->order[i + x]->off = pos + (uint64_t)x * t->nbytes;
            bytes = t->nbytes * (uint64_t)t->group;
        } else {
            qx_sb_le(hdr, (uint32_t)t->n_dims, 4);
            for (d = 0; d < t->n_dims; ++d) qx_sb_le(hdr, (uint64_t)t->ne[d], 8);
            t->off = pos;
        }
        qx_sb_le(hdr, t->ggml, 4);
        qx_sb_le(hdr, pos, 8);
        pos += bytes + (align - bytes % align) % align;
    }
    while (!hdr->failed && hdr->len % align) qx_sb_put(hdr, "", 1);
    if (hdr->failed) { qx_err_set(g->e, "%s: out of memory", g->path); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (i = 0; i < n; ++i) w->t[i].off += hdr->len;
    w->file_size = hdr->len + pos;
    if ((r = qx_out_begin(&w->out, g->path, g->opts && g->opts->force, g->e)) != QUAROT_OK) return r;
    return qx_out_pwrite(&w->out, hdr->p, hdr->len, 0, g->e);
}

/* Build the key/value pairs, check and map the plan, order the tensors, then write the header. */
quarot_result qx_gguf_writer_begin(qx_gguf_writer** wp, const char* path, const qx_tensor_plan* plan, int64_t n,
                                   const void* kv, size_t kv_len, const qx_gguf_write_opts* opts, qx_err* e) {
    qx__gwb g;
    int64_t i;
    quarot_result r;
    if (!wp || !path || n < 0 || (n && !plan)) return QUAROT_ERR_INVALID_ARGUMENT;
    *wp = NULL;
    memset(&g, 0, sizeof g);
    g.path = path;
    g.opts = opts;
    g.align = 32;
    g.e = e;
    g.w = (qx_gguf_writer*)calloc(1, sizeof *g.w);
    if (!g.w || !(g.w->t = (qx__gw_t*)calloc((size_t)(n ? n : 1), sizeof *g.w->t)) ||
        !(g.order = (qx__gw_t**)malloc((size_t)(n ? n : 1) * sizeof *g.order))) {
        if (g.w) free(g.w->t);
        free(g.w);
        qx_err_set(e, "%s: out of memory", path);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    g.w->out.fd = -1;
    r = qx__gwb_pairs(&g, kv, kv_len);
    for (i = 0; r == QUAROT_OK && i < n; ++i) {
        g.w->n = i + 1;
        r = qx__gwb_tensor(&g, &plan[i], i);
    }
    if (r == QUAROT_OK) r = qx__gwb_order(&g);
    if (r == QUAROT_OK) r = qx__gwb_header(&g);
    qx_sb_free(&g.kvb);
    qx_sb_free(&g.hdr);
    free(g.order);
    if (r != QUAROT_OK) {
        qx_gguf_writer_abort(g.w);
        return r;
    }
    *wp = g.w;
    return QUAROT_OK;
}

/* The planned tensor by HF name (binary search in natural order), not yet written. */
static quarot_result qx__gw_find(qx_gguf_writer* w, const char* name, qx__gw_t** out, qx_err* e) {
    int64_t lo = 0, hi = w->n - 1;
    qx__gw_t* p = NULL;
    while (lo <= hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = qx_name_cmp(name, w->t[mid].hf);
        if (c == 0) { p = &w->t[mid]; break; }
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    if (!p) { qx_err_set(e, "%s: tensor \"%s\" is not in the plan", w->out.path, name); return QUAROT_ERR_NOT_FOUND; }
    if (p->written) { qx_err_set(e, "%s: tensor \"%s\" written twice", w->out.path, name); return QUAROT_ERR_STATE; }
    *out = p;
    return QUAROT_OK;
}

quarot_result qx_gguf_writer_put_raw(qx_gguf_writer* w, const char* name, const void* data, uint64_t n, qx_err* e) {
    qx__gw_t* p = NULL;
    quarot_result r;
    if (!w || !name || (!data && n)) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((r = qx__gw_find(w, name, &p, e)) != QUAROT_OK) return r;
    if (!p->raw || n != p->nbytes) {
        qx_err_set(e, "%s: tensor \"%s\": %llu encoded bytes for a tensor planned as %s of %llu bytes", w->out.path, name,
                   (unsigned long long)n, p->raw ? "blocks" : "plain values", (unsigned long long)p->nbytes);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    r = qx_out_pwrite(&w->out, data, (size_t)n, p->off, e);
    if (r == QUAROT_OK) p->written = 1;
    return r;
}

quarot_result qx_gguf_writer_put_raw_rows(qx_gguf_writer* w, const char* name, int64_t row0, int64_t rows, const void* data,
                                          uint64_t n, qx_err* e) {
    qx__gw_t* p = NULL;
    int64_t total;
    uint64_t rb;
    quarot_result r;
    if (!w || !name || !data || rows < 1) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((r = qx__gw_find(w, name, &p, e)) != QUAROT_OK) return r;
    total = qx_out_rows(p->ne);
    rb = p->nbytes / (uint64_t)total;   /* a block type's rows are whole blocks: nbytes = total rows x row bytes */
    if (!p->raw || row0 != p->rows_done || row0 + rows > total || n != rb * (uint64_t)rows) {
        qx_err_set(e, "%s: tensor \"%s\": rows [%lld, %lld) of %llu encoded bytes do not follow the %lld written of %lld "
                   "planned as %s", w->out.path, name, (long long)row0, (long long)(row0 + rows), (unsigned long long)n,
                   (long long)p->rows_done, (long long)total, p->raw ? "blocks" : "plain values");
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    r = qx_out_pwrite(&w->out, data, (size_t)n, p->off + rb * (uint64_t)row0, e);
    if (r == QUAROT_OK) {
        p->rows_done += rows;
        if (p->rows_done == total) p->written = 1;
    }
    return r;
}

quarot_result qx_gguf_writer_put_permuted(qx_gguf_writer* w, const char* name, const quarot_tensor* t,
                                          int64_t head_dim, int to_interleaved, qx_err* e) {
    /* find the planned tensor, check, write in place */
    qx__gw_t* p = NULL;
    quarot_result r;
    int d;
    if (!w || !name || !t) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((r = qx__gw_find(w, name, &p, e)) != QUAROT_OK) return r;
    if (p->raw) { qx_err_set(e, "%s: tensor \"%s\" is planned as blocks (qx_gguf_writer_put_raw)", w->out.path, name); return QUAROT_ERR_STATE; }
    for (d = 0; d < QUAROT_MAX_DIMS; ++d)
        if (t->ne[d] != p->ne[d]) {
            qx_err_set(e, "%s: tensor \"%s\": shape differs from the plan's", w->out.path, name);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    r = qx_out_tensor(&w->out, p->off, p->dt, t, head_dim, to_interleaved, name, e);
    if (r == QUAROT_OK) p->written = 1;
    return r;
}

quarot_result qx_gguf_writer_put(qx_gguf_writer* w, const char* name, const quarot_tensor* t, qx_err* e) {
    return qx_gguf_writer_put_permuted(w, name, t, 0, 0, e);
}

quarot_result qx_gguf_writer_put_rows(qx_gguf_writer* w, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e) {
    qx__gw_t* p = NULL;
    quarot_result r;
    if (!w || !name || !t) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((r = qx__gw_find(w, name, &p, e)) != QUAROT_OK) return r;
    if (p->raw) { qx_err_set(e, "%s: tensor \"%s\" is planned as blocks (qx_gguf_writer_put_raw)", w->out.path, name); return QUAROT_ERR_STATE; }
    r = qx_out_tensor_rows(&w->out, p->off, p->dt, p->ne, &p->rows_done, row0, t, name, e);
    if (r == QUAROT_OK && p->rows_done == qx_out_rows(p->ne)) p->written = 1;
    return r;
}

/* All tensors present -> sync (file size includes the last tensor's padding) -> rename. */
quarot_result qx_gguf_writer_finish(qx_gguf_writer* w, qx_err* e) {
    int64_t i;
    quarot_result r = QUAROT_OK;
    if (!w) return QUAROT_ERR_INVALID_ARGUMENT;
    for (i = 0; i < w->n && r == QUAROT_OK; ++i)
        if (!w->t[i].written) {
            qx_err_set(e, "%s: tensor \"%s\" was planned but never written", w->out.path, w->t[i].hf);
            r = QUAROT_ERR_STATE;
        }
    if (r == QUAROT_OK) r = qx_out_sync(&w->out, w->file_size, e);
    if (r == QUAROT_OK) r = qx_out_publish(&w->out, e);
    qx_gguf_writer_abort(w);
    return r;
}

/* ---- the mmproj of llama.cpp's qwen2vl ---- */

quarot_result qx_gguf_mmproj_stage(qx_out* o, const char* in, const char* out, int64_t hidden, const quarot_rotation* r1,
                                   int force, int* output_failed, qx_err* e) {
    static const char* const names[2] = {"mm.2.weight", "mm.2.bias"};
    qx_map m;
    qx_gguf_file f;
    const qx_gguf_tinfo* t[2];
    unsigned char* buf[2] = {NULL, NULL};
    uint64_t al = 0, off;
    const char* arch;
    quarot_result r;
    int k, begun = 0;
    if (output_failed) *output_failed = 0;
    if (!o || !in || !out || hidden < 1) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(o, 0, sizeof *o);
    o->fd = -1;
    o->lock_fd = -1;
    if ((r = qx_map_file(in, &m, e)) != QUAROT_OK) return r;
    if ((r = qx_gguf_parse(m.addr, m.len, in, &f, e)) != QUAROT_OK) { qx_unmap(&m); return r; }
    arch = qx_gguf_kv_string(qx_gguf_find(&f, "general.architecture"), &al);
    if (!arch || al != 4 || memcmp(arch, "clip", 4) != 0) {
        qx_err_set(e, "%s: general.architecture is \"%.*s\", not \"clip\" (llama.cpp's mmproj of a qwen2vl model)", in,
                   arch ? (int)(al > 40 ? 40 : al) : 0, arch ? arch : "");
        r = QUAROT_ERR_UNSUPPORTED;
        goto done;
    }
    for (k = 0; k < 2; ++k) {
        t[k] = qx__gtensor(&f, names[k]);
        if (!t[k]) {
            qx_err_set(e, "%s: tensor \"%s\" is missing (the merger's output projection, which must be rotated with the text "
                       "model)", in, names[k]);
            r = QUAROT_ERR_NOT_FOUND;
            goto done;
        }
        if (t[k]->type != QX_GGML_F32 && t[k]->type != QX_GGML_F16 && t[k]->type != QX_GGML_BF16) {
            char tb[16];
            qx_err_set(e, "%s: tensor \"%s\" has type %s (F32, F16 or BF16 are rotated)", in, names[k],
                       qx_ggml_type_name(t[k]->type, tb));
            r = QUAROT_ERR_UNSUPPORTED_DTYPE;
            goto done;
        }
        if ((k == 0 && (t[k]->n_dims != 2 || t[k]->ne[1] != hidden)) || (k == 1 && (t[k]->n_dims != 1 || t[k]->ne[0] != hidden))) {
            qx_err_set(e, "%s: tensor \"%s\" has ne [%lld, %lld]: its output width is not the text model's hidden size %lld", in,
                       names[k], (long long)t[k]->ne[0], (long long)t[k]->ne[1], (long long)hidden);
            r = QUAROT_ERR_SHAPE_MISMATCH;
            goto done;
        }
        if (!(buf[k] = (unsigned char*)malloc((size_t)t[k]->nbytes))) { qx_err_set(e, "%s: out of memory", in); r = QUAROT_ERR_OUT_OF_MEMORY; goto done; }
        memcpy(buf[k], f.data + t[k]->offset, (size_t)t[k]->nbytes);
    }
    if (r1 && r1->kind != QUAROT_ROTATION_IDENTITY) {   /* the command the qwen2vl adapter plans for the merger */
        quarot_command c;
        quarot_tensor w, b;
        quarot_dtype dw = t[0]->type == QX_GGML_F32 ? QUAROT_DTYPE_F32 : t[0]->type == QX_GGML_F16 ? QUAROT_DTYPE_F16 : QUAROT_DTYPE_BF16;
        quarot_dtype db = t[1]->type == QX_GGML_F32 ? QUAROT_DTYPE_F32 : t[1]->type == QX_GGML_F16 ? QUAROT_DTYPE_F16 : QUAROT_DTYPE_BF16;
        memset(&c, 0, sizeof c);
        c.layer = -1;
        c.rotation = QUAROT_ROT_R1;
        c.side = QUAROT_SIDE_OUTPUT;
        c.outer = 1;
        c.inner = 1;
        snprintf(c.weight, sizeof c.weight, "%s", names[0]);
        snprintf(c.bias, sizeof c.bias, "%s", names[1]);
        r = quarot_tensor_init(&w, buf[0], dw, 2, t[0]->ne);
        if (r == QUAROT_OK) r = quarot_tensor_init(&b, buf[1], db, 1, t[1]->ne);
        if (r == QUAROT_OK) r = quarot_command_apply(&c, r1, &w, &b, NULL);
        if (r != QUAROT_OK) { qx_err_set(e, "%s: mm.2: rotation failed (%s)", in, quarot_result_string(r)); goto done; }
    }
    /* the copy: every byte as in the input, the two tensors' ranges replaced */
    if ((r = qx_out_begin(o, out, force, e)) != QUAROT_OK) {
        if (output_failed) *output_failed = 1;
        output_failed = NULL;
        goto done;
    }
    begun = 1;
    for (off = 0; off < m.len && r == QUAROT_OK;) {
        uint64_t n = m.len - off > ((uint64_t)8 << 20) ? ((uint64_t)8 << 20) : m.len - off;
        r = qx_out_pwrite(o, (const unsigned char*)m.addr + off, (size_t)n, off, e);
        off += n;
    }
    for (k = 0; k < 2 && r == QUAROT_OK; ++k)
        r = qx_out_pwrite(o, buf[k], (size_t)t[k]->nbytes, f.data_offset + t[k]->offset, e);
    if (r == QUAROT_OK) r = qx_out_sync(o, (uint64_t)m.len, e);
done:
    if (r != QUAROT_OK && begun) qx_out_abort(o);
    if (r != QUAROT_OK && output_failed) *output_failed = begun;
    free(buf[0]);
    free(buf[1]);
    qx_gguf_file_free(&f);
    qx_unmap(&m);
    return r;
}

/* Blob-format pairs from a llama / qwen2 / qwen3 config (llama.cpp's <arch>.* keys). A qwen2vl store
   (Hugging Face's Qwen2-VL) is written as what qx__gguf_config_vl reads: qwen2's keys under
   "qwen2vl." and rope.dimension_sections, M-RoPE's sections padded with zeros to 4. */
quarot_result qx_gguf_kv_from_config(const qx_store* s, qx_sb* out, qx_err* e) {
    const quarot_model_config* c;
    qx_gguf_set set[24];
    char keys[24][96];
    int n = 0, k, llama, qwen2, qwen3, phi3, vl, n_sec = 0;
    int64_t sec[4];
    quarot_result r;
    int64_t hd, i;
    uint64_t cnt;
    quarot_dtype dt;
    const char* why = NULL;
    if (!s || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    c = &s->config;
    llama = strcmp(c->arch, "llama") == 0 || strcmp(c->arch, "mixtral") == 0;
    vl = strcmp(c->arch, "qwen2vl") == 0;
    qwen2 = strcmp(c->arch, "qwen2") == 0 || strcmp(c->arch, "qwen2_moe") == 0 || vl;
    qwen3 = strcmp(c->arch, "qwen3") == 0 || strcmp(c->arch, "qwen3_moe") == 0;
    phi3 = strcmp(c->arch, "phi3") == 0;
    if (!llama && !qwen2 && !qwen3 && !phi3)
        why = "has no GGUF architecture here (llama, qwen2, qwen3, phi3, qwen2moe, qwen3moe, qwen2vl; mixtral as llama with experts)";
    else if (c->n_experts > 0 && (c->sparse_step > 1 || c->n_mlp_only_layers > 0))
        why = "has dense layers between its MoE layers (llama.cpp's MoE layout: every layer a MoE layer)";
    else if (c->norm == QUAROT_NORM_LAYER || c->mlp == QUAROT_MLP_PLAIN || c->mlp_bias ||
             (c->act != QUAROT_ACT_DEFAULT && c->act != QUAROT_ACT_SILU))
        why = "is not RMSNorm with a SiLU-gated MLP without biases";
    else if (llama && c->qk_norm) why = "has q/k norms (qwen3's)";
    else if (llama && c->n_experts > 0 && c->expert_intermediate > 0 && c->expert_intermediate != c->intermediate)
        why = "has experts narrower than feed_forward_length (llama.cpp's Mixtral: one width for both)";
    else if (qwen2 && (c->qk_norm || c->attn_out_bias)) why = "does not fit llama.cpp's qwen2 (q/k/v biases only)";
    else if (qwen3 && (c->attn_qkv_bias || c->attn_out_bias)) why = "does not fit llama.cpp's qwen3 (q/k norms, no biases)";
    else if (phi3 && (c->attn_qkv_bias || c->attn_out_bias || c->qk_norm)) why = "does not fit llama.cpp's phi3 (no biases)";
    if (why) {
        qx_err_set(e, "gguf: architecture \"%.32s\" %s", c->arch, why);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (vl && (r = qx_vl_mrope_sections(s, sec, &n_sec, e)) != QUAROT_OK) return r;
    hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
    memset(set, 0, sizeof set);
#define QX__KEY(k_) (snprintf(keys[n], sizeof keys[n], "%s.%s", qx__gguf_arch_name(c->arch), k_), keys[n])
#define QX__SET_U(k_, v_) do { set[n].key = QX__KEY(k_); set[n].type = QX_GGUF_U32; set[n].u = (uint64_t)(v_); ++n; } while (0)
#define QX__SET_F(k_, v_) do { set[n].key = QX__KEY(k_); set[n].type = QX_GGUF_F32; set[n].f = (double)(v_); ++n; } while (0)
    set[n].key = "general.architecture"; set[n].type = QX_GGUF_STRING; set[n].str = qx__gguf_arch_name(c->arch); ++n;
    if (c->n_experts > 0) {
        QX__SET_U("expert_count", c->n_experts);
        QX__SET_U("expert_used_count", c->n_experts_used);
        if (!llama)   /* llama.cpp's Mixtral has none: its experts are feed_forward_length wide */
            QX__SET_U("expert_feed_forward_length", c->expert_intermediate ? c->expert_intermediate : c->intermediate);
        if (c->shared_intermediate > 0) QX__SET_U("expert_shared_feed_forward_length", c->shared_intermediate);
    }
    if (c->max_seq > 0) QX__SET_U("context_length", c->max_seq);
    QX__SET_U("embedding_length", c->hidden);
    QX__SET_U("block_count", c->n_layers);
    QX__SET_U("feed_forward_length", c->intermediate);
    QX__SET_U("rope.dimension_count", hd);
    QX__SET_U("attention.head_count", c->n_heads);
    QX__SET_U("attention.head_count_kv", c->n_kv_heads ? c->n_kv_heads : c->n_heads);
    if (c->n_heads && hd * c->n_heads != c->hidden) {
        QX__SET_U("attention.key_length", hd);
        QX__SET_U("attention.value_length", hd);
    }
    QX__SET_F("attention.layer_norm_rms_epsilon", c->norm_eps > 0 ? c->norm_eps : 1e-5f);
    QX__SET_F("rope.freq_base", c->rope_theta > 0 ? c->rope_theta : 10000.0f);
    QX__SET_U("vocab_size", c->vocab);
    /* llama.cpp refuses a phi3 file without a sliding window; 0 (Phi-4's value) is full attention, which
       is what the forward here computes (config.json's sliding_window is not read) */
    if (phi3) QX__SET_U("attention.sliding_window", 0);
    /* general.file_type: 0 all F32, 1 mostly F16, 32 mostly BF16 (llama.cpp's numbering) */
    dt = QUAROT_DTYPE_F32;
    for (i = 0; i < s->count; ++i) if (s->items[i].t.ne[1] > 1 && s->items[i].t.dtype != QUAROT_DTYPE_F32) { dt = s->items[i].t.dtype; break; }
    set[n].key = "general.file_type"; set[n].type = QX_GGUF_U32; set[n].u = dt == QUAROT_DTYPE_F16 ? 1 : dt == QUAROT_DTYPE_BF16 ? 32 : 0; ++n;
#undef QX__SET_U
#undef QX__SET_F
#undef QX__KEY
    for (k = 0; k < n; ++k)
        if (set[k].type == QX_GGUF_U32 && set[k].u > 0xffffffffu) set[k].type = QX_GGUF_U64;
    r = qx__gkv_build(NULL, 0, set, n, out, &cnt, e);
    if (r == QUAROT_OK && vl) {   /* an array, which the changes above cannot express */
        qx_gguf_kv_arr_begin(out, "qwen2vl.rope.dimension_sections", QX_GGUF_I32, 4);
        for (k = 0; k < 4; ++k) qx_sb_le(out, (uint64_t)sec[k], 4);
        if (qx_gguf_kv_count_add(out, 1) != 0) { qx_err_set(e, "gguf: out of memory"); r = QUAROT_ERR_OUT_OF_MEMORY; }
    }
    return r;
}

quarot_result qx_gguf_save(const qx_store* s, const char* path, const qx_gguf_save_opts* o, qx_err* e) {
    qx_tensor_plan* plan;
    qx_gguf_write_opts wo;
    qx_gguf_writer* w = NULL;
    qx_sb gen;
    const void* kv;
    size_t kv_len = 0;
    int64_t i, hd;
    int perm;
    quarot_result r;
    if (!s || !path) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(&gen, 0, sizeof gen);
    /* the store must be a complete model of a GGUF architecture; generated pairs are used when it has none */
    r = qx_gguf_kv_from_config(s, &gen, e);
    if (r == QUAROT_OK) r = qx_hf_check_tensors(s, path, e);
    if (r != QUAROT_OK) { qx_sb_free(&gen); return r; }
    kv = qx_store_get_blob(s, "gguf.kv", &kv_len);
    if (!kv) { kv = gen.p; kv_len = gen.len; }
    hd = s->config.head_dim ? s->config.head_dim : s->config.hidden / s->config.n_heads;
    /* llama: Hugging Face layout -> llama.cpp's interleaved rows; qwen2/qwen3 stay half-split */
    {
        int want = 1;
        (void)qx_gguf_arch_supported(s->config.arch, &want);
        perm = s->config.rope_interleaved != want ? (want ? 1 : -1) : 0;
    }
    if (perm && strcmp(s->config.arch, "phi3") == 0) {   /* its q|k rows would need the permutation inside qkv_proj */
        qx_err_set(e, "%s: a phi3 model in the interleaved RoPE layout cannot be written as GGUF", path);
        qx_sb_free(&gen);
        return QUAROT_ERR_UNSUPPORTED;
    }
    plan = qx_store_plan(s, o ? o->dtype : QUAROT_DTYPE_DEFAULT, 0);
    if (!plan) { qx_sb_free(&gen); qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(&wo, 0, sizeof wo);
    wo.force = o ? o->force : 0;
    wo.set = o ? o->set : NULL;
    wo.n_set = o ? o->n_set : 0;
    r = qx_gguf_writer_begin(&w, path, plan, s->count, kv, kv_len, &wo, e);
    free(plan);
    qx_sb_free(&gen);
    if (r != QUAROT_OK) return r;
    /* tensors in store order; q/k weights and biases change RoPE layout when the file's differs */
    for (i = 0; i < s->count && r == QUAROT_OK; ++i) {
        const char* name = s->items[i].name;
        int qk = perm && strncmp(name, "model.layers.", 13) == 0 &&
                 (strstr(name, ".self_attn.q_proj.") || strstr(name, ".self_attn.k_proj.") ||
                  strstr(name, ".self_attn.q_norm.") || strstr(name, ".self_attn.k_norm."));
        r = qx_gguf_writer_put_permuted(w, name, &s->items[i].t, qk ? hd : 0, perm > 0, e);
    }
    if (r != QUAROT_OK) { qx_gguf_writer_abort(w); return r; }
    return qx_gguf_writer_finish(w, e);
}
