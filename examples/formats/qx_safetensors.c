/* qx_safetensors.c - see qx_safetensors.h.

   Reading one image: header length -> strict JSON -> one record per tensor, each checked alone
   (dtype, shape product * element bits == 8 * (end - begin), end <= data size), then all together
   (sorted by offset they must tile [0, data size) exactly). Only then does anything enter the
   store. Then config.json <-> quarot_model_config with the tensor checks, and the writer. */
#include "formats/qx_safetensors.h"
#include "support/qx_str.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- dtypes ---- */

typedef struct qx__st_dtype {
    const char* name;
    unsigned bits;            /* per element */
    quarot_dtype dt;          /* DEFAULT: known to safetensors, not loadable here */
} qx__st_dtype;

static const qx__st_dtype qx__st_dtypes[] = {
    {"F32", 32, QUAROT_DTYPE_F32},  {"F16", 16, QUAROT_DTYPE_F16},  {"BF16", 16, QUAROT_DTYPE_BF16},
    {"F64", 64, QUAROT_DTYPE_F64},  {"BOOL", 8, QUAROT_DTYPE_DEFAULT}, {"U8", 8, QUAROT_DTYPE_DEFAULT},
    {"I8", 8, QUAROT_DTYPE_DEFAULT}, {"F8_E5M2", 8, QUAROT_DTYPE_DEFAULT}, {"F8_E4M3", 8, QUAROT_DTYPE_DEFAULT},
    {"F8_E8M0", 8, QUAROT_DTYPE_DEFAULT}, {"I16", 16, QUAROT_DTYPE_DEFAULT}, {"U16", 16, QUAROT_DTYPE_DEFAULT},
    {"I32", 32, QUAROT_DTYPE_DEFAULT}, {"U32", 32, QUAROT_DTYPE_DEFAULT}, {"I64", 64, QUAROT_DTYPE_DEFAULT},
    {"U64", 64, QUAROT_DTYPE_DEFAULT}, {"C64", 64, QUAROT_DTYPE_DEFAULT}, {"F4", 4, QUAROT_DTYPE_DEFAULT},
    {"F6_E2M3", 6, QUAROT_DTYPE_DEFAULT}, {"F6_E3M2", 6, QUAROT_DTYPE_DEFAULT},
};

static const qx__st_dtype* qx__st_dtype_find(const char* s, size_t len) {
    size_t k;
    for (k = 0; k < sizeof qx__st_dtypes / sizeof qx__st_dtypes[0]; ++k)
        if (strlen(qx__st_dtypes[k].name) == len && memcmp(qx__st_dtypes[k].name, s, len) == 0)
            return &qx__st_dtypes[k];
    return NULL;
}

/* Derived buffers some checkpoints carry; never weights, skipped whatever their dtype. */
static int qx__st_skip_listed(const char* name, size_t len) {
    static const char* const suffix[] = {".rotary_emb.inv_freq"};
    size_t k;
    for (k = 0; k < sizeof suffix / sizeof suffix[0]; ++k) {
        size_t n = strlen(suffix[k]);
        if (len >= n && memcmp(name + len - n, suffix[k], n) == 0) return 1;
    }
    return 0;
}

/* ---- one image ---- */

typedef struct qx__st_tensor {
    const char* name;         /* in the JSON arena, NUL-terminated */
    size_t name_len;
    const char* dtype;
    quarot_dtype dt;          /* DEFAULT when not loadable */
    int n_dims;               /* as written (0 for a scalar) */
    int64_t ne[QUAROT_MAX_DIMS];  /* qx_shape_fold of the shape */
    const qx_json* shape;     /* the shape as written */
    int empty;                /* a 0 in the shape */
    uint64_t begin, end;
    int skip;
} qx__st_tensor;

typedef struct qx__st_image {
    qx_json_doc doc;
    const qx_json* meta;      /* __metadata__ or NULL */
    qx__st_tensor* t;
    size_t n;
    const unsigned char* data;
    uint64_t data_len;
} qx__st_image;

static void qx__st_image_free(qx__st_image* im) {
    qx_json_doc_free(&im->doc);
    free(im->t);
    memset(im, 0, sizeof *im);
}

#define QX__NAME(t) (int)((t)->name_len > 200 ? 200 : (t)->name_len), (t)->name

static int qx__st_cmp_offsets(const void* a, const void* b) {
    const qx__st_tensor* x = *(const qx__st_tensor* const*)a;
    const qx__st_tensor* y = *(const qx__st_tensor* const*)b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* One tensor record {"dtype", "shape", "data_offsets"}; checks what can be checked alone. */
static quarot_result qx__st_record(const qx_json* v, const char* fname, uint64_t data_len, qx__st_tensor* t,
                                   qx_err* e) {
    const qx_json* dt = qx_json_get(v, "dtype");
    const qx_json* shape = qx_json_get(v, "shape");
    const qx_json* offs = qx_json_get(v, "data_offsets");
    const qx__st_dtype* d;
    uint64_t prod = 1, bits, b, en;
    int64_t x;
    size_t k;
    t->name = v->key;
    t->name_len = v->key_len;
    if (memchr(t->name, '\0', t->name_len)) {
        qx_err_set(e, "%s: a tensor name contains a NUL character", fname);
        return QUAROT_ERR_PARSE;
    }
    if (v->type != QX_JSON_OBJECT || !dt || dt->type != QX_JSON_STRING || !shape || shape->type != QX_JSON_ARRAY ||
        !offs || offs->type != QX_JSON_ARRAY) {
        qx_err_set(e, "%s: tensor \"%.*s\": needs \"dtype\" (string), \"shape\" and \"data_offsets\" (arrays)", fname, QX__NAME(t));
        return QUAROT_ERR_PARSE;
    }
    d = qx__st_dtype_find(dt->str, dt->len);
    if (!d) {
        qx_err_set(e, "%s: tensor \"%.*s\": unknown dtype \"%.*s\"", fname, QX__NAME(t), (int)(dt->len > 20 ? 20 : dt->len), dt->str);
        return QUAROT_ERR_PARSE;
    }
    t->dtype = d->name;
    t->dt = d->dt;
    if (shape->count > QX_MAX_RANK) {
        qx_err_set(e, "%s: tensor \"%.*s\": %zu dimensions (at most %d are read)", fname, QX__NAME(t), shape->count,
                   QX_MAX_RANK);
        return QUAROT_ERR_PARSE;
    }
    t->n_dims = (int)shape->count;
    t->shape = shape;
    for (k = 0; k < QUAROT_MAX_DIMS; ++k) t->ne[k] = 1;
    for (k = 0; k < shape->count; ++k) {
        if (qx_json_as_int64(&shape->items[k], &x) != QUAROT_OK || x < 0) {
            qx_err_set(e, "%s: tensor \"%.*s\": shape[%zu] is not a non-negative integer", fname, QX__NAME(t), k);
            return QUAROT_ERR_PARSE;
        }
        if (x == 0) t->empty = 1;
        else if (!t->empty && prod > UINT64_MAX / (uint64_t)x) {
            qx_err_set(e, "%s: tensor \"%.*s\": shape product overflows", fname, QX__NAME(t));
            return QUAROT_ERR_OVERFLOW;
        } else prod *= (uint64_t)x;
        if (shape->count <= QUAROT_MAX_DIMS) t->ne[shape->count - 1 - k] = x;   /* outermost first -> ne[] */
        else if (k < 3) t->ne[3 - k] = x;                                       /* qx_shape_fold */
        else t->ne[0] = k == 3 ? x : (int64_t)((uint64_t)t->ne[0] * (uint64_t)x);   /* checked below */
    }
    if (t->empty) prod = 0;
    if (prod > UINT64_MAX / d->bits) {
        qx_err_set(e, "%s: tensor \"%.*s\": byte size overflows", fname, QX__NAME(t));
        return QUAROT_ERR_OVERFLOW;
    }
    bits = prod * d->bits;
    {
        int64_t xb = -1, xe = -1;
        if (offs->count != 2 || qx_json_as_int64(&offs->items[0], &xb) != QUAROT_OK ||
            qx_json_as_int64(&offs->items[1], &xe) != QUAROT_OK || xb < 0 || xe < 0) {
            qx_err_set(e, "%s: tensor \"%.*s\": data_offsets must be two non-negative integers", fname, QX__NAME(t));
            return QUAROT_ERR_PARSE;
        }
        b = (uint64_t)xb;
        en = (uint64_t)xe;
    }
    t->begin = b;
    t->end = en;
    if (en < b) {
        qx_err_set(e, "%s: tensor \"%.*s\": data_offsets [%llu, %llu] end before they begin", fname, QX__NAME(t),
                   (unsigned long long)b, (unsigned long long)en);
        return QUAROT_ERR_PARSE;
    }
    if (en > data_len) {
        qx_err_set(e, "%s: tensor \"%.*s\": data_offsets [%llu, %llu] pass the end of the %llu-byte data section",
                   fname, QX__NAME(t), (unsigned long long)b, (unsigned long long)en, (unsigned long long)data_len);
        return QUAROT_ERR_PARSE;
    }
    if (bits % 8 != 0) {
        qx_err_set(e, "%s: tensor \"%.*s\": %s shape of %llu bits is not a whole number of bytes", fname,
                   QX__NAME(t), d->name, (unsigned long long)bits);
        return QUAROT_ERR_PARSE;
    }
    if (bits / 8 != en - b) {
        qx_err_set(e, "%s: tensor \"%.*s\": %s shape needs %llu bytes but data_offsets [%llu, %llu] hold %llu",
                   fname, QX__NAME(t), d->name, (unsigned long long)(bits / 8), (unsigned long long)b,
                   (unsigned long long)en, (unsigned long long)(en - b));
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

/* Parses and validates a whole image; nothing enters a store here. */
static quarot_result qx__st_parse(const unsigned char* buf, size_t len, const char* fname,
                                  const qx_st_read_opts* o, qx__st_image* im, qx_err* e) {
    uint64_t hlen, pos;
    const qx_json* root;
    qx_json_opts jo;
    qx__st_tensor** order = NULL;
    quarot_result r;
    size_t k, n;
    memset(im, 0, sizeof *im);
    if (len < 8) {
        qx_err_set(e, "%s: %zu bytes is too short for a safetensors file (8-byte header length)", fname, len);
        return QUAROT_ERR_PARSE;
    }
    hlen = qx_str_le64(buf);
    if (hlen > QX_ST_MAX_HEADER) {
        qx_err_set(e, "%s: header length %llu exceeds the %llu-byte limit", fname, (unsigned long long)hlen,
                   (unsigned long long)QX_ST_MAX_HEADER);
        return QUAROT_ERR_PARSE;
    }
    if (hlen > (uint64_t)(len - 8)) {
        qx_err_set(e, "%s: header length %llu passes the end of the %zu-byte file", fname, (unsigned long long)hlen, len);
        return QUAROT_ERR_PARSE;
    }
    if (hlen < 2 || buf[8] != '{') {
        qx_err_set(e, "%s: the header must be a JSON object starting with '{'", fname);
        return QUAROT_ERR_PARSE;
    }
    memset(&jo, 0, sizeof jo);
    jo.max_depth = 8;
    jo.max_size = (size_t)hlen;
    r = qx_json_parse((const char*)buf + 8, (size_t)hlen, fname, &jo, &im->doc, e);
    if (r != QUAROT_OK) return r;
    root = im->doc.root;
    im->data = buf + 8 + hlen;
    im->data_len = (uint64_t)len - 8 - hlen;
    if (root->type != QX_JSON_OBJECT) {
        qx_err_set(e, "%s: the header is not a JSON object", fname);
        qx__st_image_free(im);
        return QUAROT_ERR_PARSE;
    }
    im->t = (qx__st_tensor*)calloc(root->count ? root->count : 1, sizeof *im->t);
    order = (qx__st_tensor**)malloc((root->count ? root->count : 1) * sizeof *order);
    if (!im->t || !order) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "%s: out of memory", fname); goto fail; }
    for (k = 0, n = 0; k < root->count; ++k) {
        const qx_json* v = &root->items[k];
        if (v->key_len == 12 && memcmp(v->key, "__metadata__", 12) == 0) {
            size_t j;
            if (v->type != QX_JSON_OBJECT) { qx_err_set(e, "%s: __metadata__ is not an object", fname); r = QUAROT_ERR_PARSE; goto fail; }
            for (j = 0; j < v->count; ++j)
                if (v->items[j].type != QX_JSON_STRING) {
                    qx_err_set(e, "%s: __metadata__ value \"%.*s\" is not a string", fname,
                               (int)(v->items[j].key_len > 100 ? 100 : v->items[j].key_len), v->items[j].key);
                    r = QUAROT_ERR_PARSE;
                    goto fail;
                }
            im->meta = v;
            continue;
        }
        r = qx__st_record(v, fname, im->data_len, &im->t[n], e);
        if (r != QUAROT_OK) goto fail;
        order[n] = &im->t[n];
        ++n;
    }
    im->n = n;
    /* the tensors must tile the data section: sorted by offset, each begins where the last ended */
    qsort(order, n, sizeof *order, qx__st_cmp_offsets);
    for (k = 0, pos = 0; k < n; ++k) {
        const qx__st_tensor* t = order[k];
        if (t->begin != pos) {
            if (t->begin < pos)
                qx_err_set(e, "%s: tensor \"%.*s\": data_offsets [%llu, %llu] overlap the previous tensor (ends at %llu)",
                           fname, QX__NAME(t), (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)pos);
            else
                qx_err_set(e, "%s: tensor \"%.*s\": data_offsets [%llu, %llu] leave a hole after byte %llu",
                           fname, QX__NAME(t), (unsigned long long)t->begin, (unsigned long long)t->end, (unsigned long long)pos);
            r = QUAROT_ERR_PARSE;
            goto fail;
        }
        pos = t->end;
    }
    if (pos != im->data_len) {
        qx_err_set(e, "%s: tensors cover %llu bytes but the data section holds %llu", fname,
                   (unsigned long long)pos, (unsigned long long)im->data_len);
        r = QUAROT_ERR_PARSE;
        goto fail;
    }
    /* what can be loaded; the rest is skipped or refused */
    for (k = 0; k < n; ++k) {
        qx__st_tensor* t = &im->t[k];
        int why = t->dt == QUAROT_DTYPE_DEFAULT ? 1 : t->empty ? 2 : 0;
        if (!why) continue;
        if (qx__st_skip_listed(t->name, t->name_len) || (o && o->skip_unsupported)) { t->skip = 1; continue; }
        if (why == 1)
            qx_err_set(e, "%s: tensor \"%.*s\" has dtype %s; only F32, F16, BF16 and F64 are supported", fname,
                       QX__NAME(t), t->dtype);
        else
            qx_err_set(e, "%s: tensor \"%.*s\" has a 0 in its shape; empty tensors are not supported", fname, QX__NAME(t));
        r = t->dt == QUAROT_DTYPE_DEFAULT ? QUAROT_ERR_UNSUPPORTED_DTYPE : QUAROT_ERR_UNSUPPORTED;
        goto fail;
    }
    free(order);
    return QUAROT_OK;
fail:
    free(order);
    qx__st_image_free(im);
    return r;
}

/* Adds an image's loadable tensors to s: views when allowed and aligned, copies otherwise. */
static quarot_result qx__st_add(qx_store* s, const qx__st_image* im, const char* fname, int allow_view, qx_err* e) {
    size_t k;
    quarot_result r;
    if (im->meta && !qx_store_get_blob(s, "safetensors.metadata", NULL)) {
        qx_sb b;
        memset(&b, 0, sizeof b);
        qx_json_write(&b, im->meta, 0);
        r = b.failed ? QUAROT_ERR_OUT_OF_MEMORY : qx_store_set_blob(s, "safetensors.metadata", b.p, b.len);
        qx_sb_free(&b);
        if (r != QUAROT_OK) { qx_err_set(e, "%s: out of memory", fname); return r; }
    }
    for (k = 0; k < im->n; ++k) {
        const qx__st_tensor* t = &im->t[k];
        const unsigned char* p = im->data + t->begin;
        int n_dims = t->n_dims < 1 ? 1 : t->n_dims > QUAROT_MAX_DIMS ? QUAROT_MAX_DIMS : t->n_dims;   /* ne: the fold */
        if (t->skip) continue;
        if (qx_store_find(s, t->name)) {
            qx_err_set(e, "%s: tensor \"%.*s\" appears twice (in another file)", fname, QX__NAME(t));
            return QUAROT_ERR_PARSE;
        }
        if (allow_view && ((uintptr_t)p % quarot_dtype_size(t->dt)) == 0) {
            quarot_tensor v;
            r = quarot_tensor_init(&v, (void*)(uintptr_t)p, t->dt, n_dims, t->ne);
            if (r == QUAROT_OK) r = qx_store_add_view(s, t->name, &v);
        } else {
            r = qx_store_add(s, t->name, t->dt, n_dims, t->ne, p, NULL);
        }
        if (r == QUAROT_OK && (t->n_dims > QUAROT_MAX_DIMS || t->n_dims != qx_plan_rank(t->ne))) {
            /* a shape ne[] does not say by itself (rank > 4, a scalar, outer 1s): recorded for the writers */
            int64_t shape[QX_MAX_RANK];
            int d;
            for (d = 0; d < t->n_dims; ++d) (void)qx_json_as_int64(&t->shape->items[d], &shape[d]);
            r = qx_store_set_shape(s, t->name, t->n_dims, shape);
        }
        if (r != QUAROT_OK) {
            qx_err_set(e, "%s: tensor \"%.*s\": cannot add to the store (%s)", fname, QX__NAME(t), quarot_result_string(r));
            return r;
        }
    }
    return QUAROT_OK;
}

quarot_result qx_st_read_mem(const void* buf, size_t len, const char* name, qx_store* s,
                             const qx_st_read_opts* opts, qx_err* e) {
    qx__st_image im;
    quarot_result r;
    if (!s || (!buf && len)) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!name) name = "safetensors";
    r = qx__st_parse((const unsigned char*)buf, len, name, opts, &im, e);
    if (r != QUAROT_OK) return r;
    r = qx__st_add(s, &im, name, 0, e);
    qx__st_image_free(&im);
    return r;
}

/* weight_map members ordered by tensor name (keys hold no NUL: checked when the index is read). */
static int qx__wm_cmp(const void* a, const void* b) {
    const qx_json* x = *(const qx_json* const*)a;
    const qx_json* y = *(const qx_json* const*)b;
    int c = strcmp(x->key, y->key);
    return c;
}

/* Maps one file, validates it, adds its tensors (views keep the mapping alive via the store).
   With wm (the sorted weight_map, index loading), each tensor must be listed there for this file
   (`label`), and seen[] marks the entries found. */
static quarot_result qx__st_load_file(const char* path, const char* label, qx_store* s, const qx_st_read_opts* o,
                                      const qx_json* const* wm, size_t wm_n, unsigned char* seen, qx_err* e) {
    qx_map* m = (qx_map*)calloc(1, sizeof *m);
    qx__st_image im;
    quarot_result r;
    size_t k;
    if (!m) return QUAROT_ERR_OUT_OF_MEMORY;
    r = qx_map_file(path, m, e);
    if (r != QUAROT_OK) { free(m); return r; }
    r = qx__st_parse((const unsigned char*)m->addr, m->len, path, o, &im, e);
    if (r != QUAROT_OK) { qx_unmap_and_free(m); return r; }
    /* the store owns the mapping from now on: views into it stay valid until qx_store_free */
    r = qx_store_on_free(s, qx_unmap_and_free, m);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s: out of memory", path);
        qx__st_image_free(&im);
        qx_unmap_and_free(m);
        return r;
    }
    for (k = 0; wm && k < im.n; ++k) {      /* the index must list every tensor of this shard for it */
        const qx__st_tensor* t = &im.t[k];
        qx_json key;
        const qx_json* kp = &key;
        const qx_json* const* hit;
        memset(&key, 0, sizeof key);
        key.key = t->name;
        hit = (const qx_json* const*)bsearch(&kp, wm, wm_n, sizeof *wm, qx__wm_cmp);
        if (!hit || strcmp((*hit)->str, label) != 0) {
            if (hit) qx_err_set(e, "%s: tensor \"%.*s\" is in this shard but the index lists it in %s", path, QX__NAME(t), (*hit)->str);
            else qx_err_set(e, "%s: tensor \"%.*s\" is not listed in model.safetensors.index.json", path, QX__NAME(t));
            qx__st_image_free(&im);
            return QUAROT_ERR_PARSE;
        }
        seen[hit - wm] = 1;
    }
    r = qx__st_add(s, &im, path, !(o && o->copy), e);
    qx__st_image_free(&im);
    return r;
}

static int qx__str_cmp(const void* a, const void* b) {
    return strcmp(*(const char* const*)a, *(const char* const*)b);
}

/* Shards listed by model.safetensors.index.json, each loaded once; every index entry must be found. */
static quarot_result qx__st_load_index(const char* dir, const char* index_path, qx_store* s, const qx_st_read_opts* o,
                                       qx_err* e) {
    char* text = NULL;
    size_t len = 0, k, n;
    qx_json_doc doc;
    const qx_json* wmap;
    const qx_json** wm = NULL;
    const char** shards = NULL;
    unsigned char* seen = NULL;
    quarot_result r;
    memset(&doc, 0, sizeof doc);
    r = qx_read_file(index_path, (size_t)64 << 20, &text, &len, e);
    if (r != QUAROT_OK) return r;
    r = qx_json_parse(text, len, index_path, NULL, &doc, e);
    if (r != QUAROT_OK) goto done;
    wmap = qx_json_get(doc.root, "weight_map");
    if (!wmap || wmap->type != QX_JSON_OBJECT) {
        qx_err_set(e, "%s: no \"weight_map\" object", index_path);
        r = QUAROT_ERR_PARSE;
        goto done;
    }
    n = wmap->count;
    wm = (const qx_json**)malloc((n ? n : 1) * sizeof *wm);
    seen = (unsigned char*)calloc(n ? n : 1, 1);
    if (!wm || !seen) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "%s: out of memory", index_path); goto done; }
    for (k = 0; k < n; ++k) {
        const qx_json* v = &wmap->items[k];
        if (v->type != QX_JSON_STRING || memchr(v->str, '\0', v->len) || !qx_is_plain_filename(v->str) ||
            memchr(v->key, '\0', v->key_len)) {
            qx_err_set(e, "%s: weight_map entry \"%.*s\" does not name a plain file in the directory", index_path,
                       (int)(v->key_len > 200 ? 200 : v->key_len), v->key);
            r = QUAROT_ERR_PARSE;
            goto done;
        }
        wm[k] = v;
    }
    qsort(wm, n, sizeof *wm, qx__wm_cmp);
    /* the distinct shard names: sorted copies of the value pointers, each loaded once */
    shards = (const char**)malloc((n ? n : 1) * sizeof *shards);
    if (!shards) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "%s: out of memory", index_path); goto done; }
    for (k = 0; k < n; ++k) shards[k] = wmap->items[k].str;
    qsort(shards, n, sizeof *shards, qx__str_cmp);
    for (k = 0; k < n; ++k) {
        char* path;
        if (k && strcmp(shards[k - 1], shards[k]) == 0) continue;
        path = qx_path_join(dir, shards[k]);
        if (!path) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "%s: out of memory", index_path); goto done; }
        r = qx__st_load_file(path, shards[k], s, o, wm, n, seen, e);
        free(path);
        if (r != QUAROT_OK) goto done;
    }
    for (k = 0; k < n; ++k)
        if (!seen[k]) {
            qx_err_set(e, "%s: tensor \"%.*s\" is listed for %s but that shard does not hold it", index_path,
                       (int)(wm[k]->key_len > 200 ? 200 : wm[k]->key_len), wm[k]->key, wm[k]->str);
            r = QUAROT_ERR_PARSE;
            goto done;
        }
done:
    free(shards);
    free(seen);
    free(wm);
    qx_json_doc_free(&doc);
    free(text);
    return r;
}

/* Gives names saved without the base-model prefix their "model." (see the header). */
static quarot_result qx__hf_normalize_names(qx_store* s, const char* fname, qx_err* e) {
    static const char* const llama_roots[] = {"layers.", "embed_tokens.", "norm."};
    static const char* const opt_roots[] = {"decoder."};
    const char* const* roots = strcmp(s->config.arch, "opt") == 0 ? opt_roots : llama_roots;
    int n_roots = strcmp(s->config.arch, "opt") == 0 ? 1 : 3;
    int64_t i;
    int vl = strcmp(s->config.arch, "qwen2vl") == 0, newer = 0;
    for (i = 0; vl && i < s->count && !newer; ++i) newer = strncmp(s->items[i].name, "model.language_model.", 21) == 0;
    for (i = 0; i < s->count; ++i) {
        const char* name = s->items[i].name;
        const char* strip = "";
        const char* add = "model.";
        char* nn;
        int k;
        quarot_result r;
        if (newer) {   /* Qwen2-VL's newer layout, read under the older names (qx_hf_file_renames writes it back) */
            if (strncmp(name, "model.language_model.", 21) == 0) strip = "model.language_model.";
            else if (strncmp(name, "model.visual.", 13) == 0) { strip = "model."; add = ""; }
            else if (strcmp(name, "lm_head.weight") != 0) {
                qx_err_set(e, "%s: tensor \"%.120s\" lies outside the layout model.language_model.* / model.visual.* / "
                           "lm_head of the other tensors", fname, name);
                return QUAROT_ERR_PARSE;
            }
            if (!strip[0]) continue;
        } else {
            for (k = 0; k < n_roots; ++k)
                if (strncmp(name, roots[k], strlen(roots[k])) == 0) break;
            if (k == n_roots) continue;
        }
        nn = (char*)malloc(strlen(add) + strlen(name) - strlen(strip) + 1);
        if (!nn) { qx_err_set(e, "%s: out of memory", fname); return QUAROT_ERR_OUT_OF_MEMORY; }
        strcpy(nn, add);
        strcat(nn, name + strlen(strip));
        if (qx_store_find(s, nn)) {
            qx_err_set(e, "%s: tensors \"%s\" and \"%s\" both present", fname, name, nn);
            free(nn);
            return QUAROT_ERR_PARSE;
        }
        r = qx_store_rename(s, i, nn);
        free(nn);
        if (r != QUAROT_OK) { qx_err_set(e, "%s: out of memory", fname); return r; }
    }
    if (newer) return qx_store_set_blob(s, "hf.names", "qwen2vl-lm", 10);
    return QUAROT_OK;
}

/* 1 when s is "<proj>.weight" with proj an expert projection's name. */
static int qx__expert_proj(const char* s) {
    static const char* const pj[6] = {"w1", "w2", "w3", "gate_proj", "up_proj", "down_proj"};
    int k;
    for (k = 0; k < 6; ++k)
        if (strncmp(s, pj[k], strlen(pj[k])) == 0 && strcmp(s + strlen(pj[k]), ".weight") == 0) return 1;
    return 0;
}

int64_t qx_hf_expert_stacked_name(const char* name, char* out, size_t n) {
    const char* p = name ? strstr(name, ".experts.") : NULL;
    const char* q;
    int64_t x = 0;
    int len;
    if (!p || !out) return -1;
    q = p + 9;
    if (*q < '0' || *q > '9' || (*q == '0' && q[1] != '.')) return -1;
    for (; *q >= '0' && *q <= '9'; ++q)
        if ((x = x * 10 + (*q - '0')) > (1 << 16)) return -1;
    if (*q != '.' || !qx__expert_proj(q + 1)) return -1;
    len = snprintf(out, n, "%.*s.experts%s", (int)(p - name), name, q);   /* q: ".<proj>.weight" */
    return len > 0 && (size_t)len < n ? x : -1;
}

int qx_hf_expert_name(const char* stacked, int64_t e, char* out, size_t n) {
    const char* p = stacked ? strstr(stacked, ".experts.") : NULL;
    int len;
    if (!p || !out || e < 0 || !qx__expert_proj(p + 9)) return 0;
    len = snprintf(out, n, "%.*s.experts.%lld.%s", (int)(p - stacked), stacked, (long long)e, p + 9);
    return len > 0 && (size_t)len < n;
}

int qx_hf_file_renames(const qx_store* s, const char* const** pairs) {
    static const char* const lm[4] = {"visual.", "model.visual.", "model.", "model.language_model."};
    size_t len = 0;
    const char* b = s ? (const char*)qx_store_get_blob(s, "hf.names", &len) : NULL;
    if (!b || len != 10 || memcmp(b, "qwen2vl-lm", 10) != 0) return 0;
    if (pairs) *pairs = lm;
    return 2;
}

int64_t qx_vl_tensor_count(const qx_store* s) {
    int64_t i, n = 0;
    for (i = 0; s && i < s->count; ++i) n += strncmp(s->items[i].name, "visual.", 7) == 0;
    return n;
}

/* config.json text -> s->config and blob; names normalized, tied lm_head dropped, tensors checked. */
static quarot_result qx__st_apply_config(qx_store* s, const char* cfg_path, qx_err* e) {
    char* text = NULL;
    size_t len = 0;
    quarot_result r = qx_read_file(cfg_path, (size_t)16 << 20, &text, &len, e);
    if (r != QUAROT_OK) return r;
    r = qx_hf_config_parse(text, len, cfg_path, &s->config, e);
    if (r == QUAROT_OK) r = qx_store_set_blob(s, "hf.config.json", text, len);
    free(text);
    if (r != QUAROT_OK) return r;
    r = qx__hf_normalize_names(s, cfg_path, e);
    if (r != QUAROT_OK) return r;
    if (s->config.tied_embeddings) (void)qx_store_remove(s, "lm_head.weight");
    return qx_hf_check_tensors(s, cfg_path, e);
}

quarot_result qx_st_load(const char* path, qx_store* s, const qx_st_read_opts* opts, qx_err* e) {
    qx_store tmp;
    quarot_result r;
    char* cfg = NULL;
    if (!path || !s) return QUAROT_ERR_INVALID_ARGUMENT;
    if (s->count || s->n_blobs || s->n_cleanups) {
        qx_err_set(e, "%s: the store to load into is not empty", path);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    /* everything goes into a scratch store that replaces *s only on success */
    qx_store_init(&tmp);
    if (qx_is_dir(path)) {
        /* a Hugging Face directory: model.safetensors first (as transformers), else the index */
        char* index = qx_path_join(path, "model.safetensors.index.json");
        char* single = qx_path_join(path, "model.safetensors");
        cfg = qx_path_join(path, "config.json");
        if (!index || !single || !cfg) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "%s: out of memory", path); }
        else if (qx_path_exists(single)) r = qx__st_load_file(single, "model.safetensors", &tmp, opts, NULL, 0, NULL, e);
        else if (qx_path_exists(index)) r = qx__st_load_index(path, index, &tmp, opts, e);
        else {
            qx_err_set(e, "%s: neither model.safetensors nor model.safetensors.index.json in this directory", path);
            r = QUAROT_ERR_IO;
        }
        if (r == QUAROT_OK && !(opts && opts->no_config) && !qx_path_exists(cfg)) {
            qx_err_set(e, "%s: no config.json in this directory", path);
            r = QUAROT_ERR_IO;
        }
        free(index);
        free(single);
    } else {
        /* one file, with the config.json of its directory when there is one */
        const char* slash = strrchr(path, '/');
        r = qx__st_load_file(path, path, &tmp, opts, NULL, 0, NULL, e);
        if (slash) {
            size_t dl = (size_t)(slash - path);
            cfg = (char*)malloc(dl + 13);
            if (cfg) { memcpy(cfg, path, dl); strcpy(cfg + dl, "/config.json"); }
        } else {
            cfg = (char*)malloc(12);
            if (cfg) strcpy(cfg, "config.json");
        }
        if (!cfg && r == QUAROT_OK) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "%s: out of memory", path); }
        if (cfg && !qx_path_exists(cfg)) { free(cfg); cfg = NULL; }   /* optional beside a file */
    }
    if (r == QUAROT_OK && cfg && !(opts && opts->no_config)) r = qx__st_apply_config(&tmp, cfg, e);
    free(cfg);
    if (r != QUAROT_OK) {
        qx_store_free(&tmp);
        return r;
    }
    *s = tmp;
    return QUAROT_OK;
}

/* ---- config.json <-> quarot_model_config ---- */

#define QX__DIM_MAX ((int64_t)1 << 24)   /* sanity bound on every size in a config */

typedef struct qx__cfg {
    const qx_json* root;
    const char* fname;
    qx_err* e;
} qx__cfg;

/* Optional integer key (absent or null -> def) within [lo, hi]. */
static quarot_result qx__cfg_int(const qx__cfg* c, const char* key, int64_t def, int64_t lo, int64_t hi, int64_t* out) {
    const qx_json* v = qx_json_get(c->root, key);
    if (!v || v->type == QX_JSON_NULL) {
        if (def < lo) {
            qx_err_set(c->e, "%s: required key \"%s\" is missing", c->fname, key);
            return QUAROT_ERR_PARSE;
        }
        *out = def;
        return QUAROT_OK;
    }
    if (qx_json_as_int64(v, out) != QUAROT_OK || *out < lo || *out > hi) {
        qx_err_set(c->e, "%s: \"%s\" must be an integer in [%lld, %lld]", c->fname, key, (long long)lo, (long long)hi);
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

static quarot_result qx__cfg_num(const qx__cfg* c, const qx_json* v, const char* key, double def, double lo, double hi,
                                 float* out) {
    double d = def;
    if (v && v->type != QX_JSON_NULL && (qx_json_as_double(v, &d) != QUAROT_OK || !(d > lo && d <= hi))) {
        qx_err_set(c->e, "%s: \"%s\" must be a number in (%g, %g]", c->fname, key, lo, hi);
        return QUAROT_ERR_PARSE;
    }
    *out = (float)d;
    return QUAROT_OK;
}

static quarot_result qx__cfg_bool(const qx__cfg* c, const char* key, int def, int* out) {
    const qx_json* v = qx_json_get(c->root, key);
    if (!v || v->type == QX_JSON_NULL) { *out = def; return QUAROT_OK; }
    if (qx_json_as_bool(v, out) != QUAROT_OK) {
        qx_err_set(c->e, "%s: \"%s\" must be true or false", c->fname, key);
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

static quarot_result qx__cfg_act(const qx__cfg* c, const char* key, const char* def, quarot_act_kind* out) {
    const qx_json* v = qx_json_get(c->root, key);
    const char* s = def;
    if (v && v->type != QX_JSON_NULL && !(s = qx_json_as_string(v, NULL))) {
        qx_err_set(c->e, "%s: \"%s\" must be a string", c->fname, key);
        return QUAROT_ERR_PARSE;
    }
    if (strcmp(s, "silu") == 0 || strcmp(s, "swish") == 0) *out = QUAROT_ACT_SILU;
    else if (strcmp(s, "relu") == 0) *out = QUAROT_ACT_RELU;
    /* "gelu" (erf) is taken as the tanh approximation the library implements */
    else if (strcmp(s, "gelu_pytorch_tanh") == 0 || strcmp(s, "gelu_new") == 0 || strcmp(s, "gelu_fast") == 0 ||
             strcmp(s, "gelu") == 0) *out = QUAROT_ACT_GELU;
    else {
        qx_err_set(c->e, "%s: %s \"%.40s\" is not supported (silu, relu, gelu)", c->fname, key, s);
        return QUAROT_ERR_UNSUPPORTED;
    }
    return QUAROT_OK;
}

const char* const qx_gemma_norms_reason =
    "its post_attention_layernorm / post_feedforward_layernorm normalize each attention and MLP output before "
    "it is added to the residual stream, and an RMSNorm of a block's output does not commute with the residual "
    "rotation R1, so R1 would not be exact; the rotations that stay exact without R1 (R2, the online down_proj "
    "and o_proj rotations) are not offered for it either (the reference forward pass does not implement Gemma)";

int qx_gemma_norms_refused(const char* cls) {
    static const char* const names[] = {"Gemma2ForCausalLM", "Gemma3ForCausalLM", "Gemma3ForConditionalGeneration",
                                        "gemma2", "gemma3", "gemma3_text"};
    size_t k;
    for (k = 0; cls && k < sizeof names / sizeof names[0]; ++k)
        if (strcmp(cls, names[k]) == 0) return 1;
    return 0;
}

/* Phi-3 / Phi-3.5 / Phi-4: fused q|k|v and gate|up (no biases). What the reference forward pass does
   not implement is refused: partial RoPE (partial_rotary_factor < 1, Phi-4-mini) and rope_scaling
   (LongRoPE / su scaling of the 128K variants). */
static quarot_result qx__phi3_rope(qx__cfg* c, quarot_model_config* m) {
    const qx_json* prf = qx_json_get(c->root, "partial_rotary_factor");
    const qx_json* rs = qx_json_get(c->root, "rope_scaling");
    float f = 1.0f;
    if (prf && prf->type != QX_JSON_NULL &&
        qx__cfg_num(c, prf, "partial_rotary_factor", 1.0, 0.0, 1.0, &f) != QUAROT_OK) return QUAROT_ERR_PARSE;
    if (f != 1.0f) {
        qx_err_set(c->e, "%s: Phi-3 with partial_rotary_factor %g (RoPE on part of each head) is not supported", c->fname,
                   (double)f);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (rs && rs->type != QX_JSON_NULL) {
        const char* type = qx_json_as_string(qx_json_get(rs, "type"), NULL);
        if (!type) type = qx_json_as_string(qx_json_get(rs, "rope_type"), NULL);
        qx_err_set(c->e, "%s: Phi-3 with rope_scaling \"%.20s\" is not supported (plain RoPE only: the 4K/8K-context "
                   "variants)", c->fname, type ? type : "?");
        return QUAROT_ERR_UNSUPPORTED;
    }
    m->attn_qkv_bias = m->attn_out_bias = m->mlp_bias = 0;
    return QUAROT_OK;
}

/* The mixture-of-experts keys of MixtralConfig (num_local_experts; top-k renormalized always),
   Qwen2MoeConfig (num_experts, moe_intermediate_size, shared_expert_intermediate_size, norm_topk_prob,
   decoder_sparse_step, mlp_only_layers) and Qwen3MoeConfig (the same without a shared expert). A
   non-empty mlp_only_layers is refused: the config keeps no list of its own. */
static quarot_result qx__moe_config(const qx__cfg* c, quarot_model_config* m) {
    int mixtral = strcmp(m->arch, "mixtral") == 0, qwen2 = strcmp(m->arch, "qwen2_moe") == 0;
    const qx_json* only;
    quarot_result r;
    if (!mixtral && !qwen2 && strcmp(m->arch, "qwen3_moe") != 0) return QUAROT_OK;
    if ((r = qx__cfg_int(c, mixtral ? "num_local_experts" : "num_experts", 0, 1, 1 << 16, &m->n_experts)) != QUAROT_OK)
        return r;
    if ((r = qx__cfg_int(c, "num_experts_per_tok", 0, 1, 1 << 16, &m->n_experts_used)) != QUAROT_OK) return r;
    if (m->n_experts_used > m->n_experts) {
        qx_err_set(c->e, "%s: num_experts_per_tok %lld is larger than the %lld experts", c->fname,
                   (long long)m->n_experts_used, (long long)m->n_experts);
        return QUAROT_ERR_PARSE;
    }
    if (mixtral) {
        m->norm_topk_prob = 1;
        m->expert_intermediate = m->intermediate;
        m->sparse_step = 1;
        return QUAROT_OK;
    }
    if ((r = qx__cfg_int(c, "moe_intermediate_size", 0, 1, QX__DIM_MAX, &m->expert_intermediate)) != QUAROT_OK) return r;
    if (qwen2 && (r = qx__cfg_int(c, "shared_expert_intermediate_size", 0, 0, QX__DIM_MAX,
                                  &m->shared_intermediate)) != QUAROT_OK)
        return r;
    if ((r = qx__cfg_bool(c, "norm_topk_prob", 0, &m->norm_topk_prob)) != QUAROT_OK) return r;
    if ((r = qx__cfg_int(c, "decoder_sparse_step", 1, 1, 1 << 16, &m->sparse_step)) != QUAROT_OK) return r;
    only = qx_json_get(c->root, "mlp_only_layers");
    if (only && only->type != QX_JSON_NULL && !(only->type == QX_JSON_ARRAY && only->count == 0)) {
        qx_err_set(c->e, "%s: a non-empty \"mlp_only_layers\" is not supported (dense layers chosen by "
                   "decoder_sparse_step are)", c->fname);
        return QUAROT_ERR_UNSUPPORTED;
    }
    return QUAROT_OK;
}

/* Qwen2-VL / Qwen2.5-VL: M-RoPE's sections and the vision tower's output width (c->root is the text
   config, top the whole config.json).
   M-RoPE (Qwen2VLRotaryEmbedding, apply_multimodal_rotary_pos_emb): the head_dim/2 rotary frequencies
   inv_freq[j] = theta^(-2j/head_dim) are split into consecutive sections mrope_section = [t, h, w]
   (t + h + w = head_dim/2); frequency j in section s turns by position_ids[s] * inv_freq[j], the
   temporal, height and width position of the token, and the half-split layout repeats the sections
   for the second half (apply_multimodal_rotary_pos_emb splits cos/sin by mrope_section * 2, which
   needs 2 (t + h + w) = head_dim). In a text-only sequence get_rope_index gives every token
   position_ids[0] = [1] = [2] = p, its index, so every frequency turns by p * inv_freq[j] whichever
   section it lies in: ordinary RoPE over the whole head_dim. The reference forward pass runs text
   that way; image tokens (3-D positions, and text after an image continuing from the image's largest
   position) are not run. The rotation itself does not depend on RoPE at all. */
/* mrope_section where transformers keeps it (root: the text config, top: the whole config.json), its
   key path in *where; NULL when absent. */
static const qx_json* qx__mrope_json(const qx_json* root, const qx_json* top, const char** where) {
    const qx_json* rs = qx_json_get(root, "rope_scaling");
    const qx_json* sec = NULL;
    *where = "rope_scaling.mrope_section";
    if (!rs || rs->type != QX_JSON_OBJECT) rs = qx_json_get(top, "rope_scaling");
    if (rs && rs->type == QX_JSON_OBJECT) sec = qx_json_get(rs, "mrope_section");
    if (!sec && (sec = qx_json_get(qx_json_get(root, "rope_parameters"), "mrope_section")) == NULL)   /* newer transformers */
        sec = qx_json_get(qx_json_get(top, "rope_parameters"), "mrope_section");
    if (sec && !(rs && qx_json_get(rs, "mrope_section") == sec)) *where = "rope_parameters.mrope_section";
    if (!sec) { sec = qx_json_get(top, "mrope_section"); *where = "mrope_section"; }
    return sec;
}

static quarot_result qx__vl_config(const qx__cfg* c, const qx_json* top, quarot_model_config* m) {
    const char* where;
    const qx_json* sec = qx__mrope_json(c->root, top, &where);
    const qx_json* vc = qx_json_get(top, "vision_config");
    int64_t sum = 0, x, out_w = 0;
    size_t k;
    if (!sec || sec->type != QX_JSON_ARRAY || sec->count == 0) {
        qx_err_set(c->e, "%s: Qwen2-VL needs %s (M-RoPE's split of the head_dim/2 rotary frequencies), an array of "
                   "positive integers", c->fname, sec ? where : "rope_scaling.mrope_section");
        return QUAROT_ERR_PARSE;
    }
    for (k = 0; k < sec->count; ++k) {
        if (qx_json_as_int64(&sec->items[k], &x) != QUAROT_OK || x < 1 || x > QX__DIM_MAX) {
            qx_err_set(c->e, "%s: %s[%zu] is not a positive integer", c->fname, where, k);
            return QUAROT_ERR_PARSE;
        }
        sum += x;
    }
    if (sum * 2 != m->head_dim) {
        qx_err_set(c->e, "%s: %s sums to %lld, but head_dim / 2 is %lld (the sections split the rotary frequencies "
                   "of each head)", c->fname, where, (long long)sum, (long long)(m->head_dim / 2));
        return QUAROT_ERR_PARSE;
    }
    if (vc && vc->type == QX_JSON_OBJECT) {
        const qx_json* ow = qx_json_get(vc, "out_hidden_size");   /* Qwen2.5-VL; Qwen2-VL: hidden_size */
        const char* key = ow ? "vision_config.out_hidden_size" : "vision_config.hidden_size";
        if (!ow) ow = qx_json_get(vc, "hidden_size");
        if (ow && ow->type != QX_JSON_NULL && (qx_json_as_int64(ow, &out_w) != QUAROT_OK || out_w != m->hidden)) {
            qx_err_set(c->e, "%s: %s is %lld, but the merger's output enters the text stream of hidden_size %lld", c->fname,
                       key, (long long)out_w, (long long)m->hidden);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    }
    return QUAROT_OK;
}

quarot_result qx_vl_mrope_sections(const qx_store* s, int64_t sec[4], int* n, qx_err* e) {
    size_t len = 0;
    const char* blob = s ? (const char*)qx_store_get_blob(s, "hf.config.json", &len) : NULL;
    const qx_json *root, *arr;
    const char* where;
    qx_json_doc doc;
    quarot_result r;
    size_t k;
    if (!s || !sec || !n) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!blob) { qx_err_set(e, "qwen2vl: no config.json kept with the model (M-RoPE's sections are in it)"); return QUAROT_ERR_NOT_FOUND; }
    if ((r = qx_json_parse(blob, len, "config.json", NULL, &doc, e)) != QUAROT_OK) return r;
    root = qx_json_get(doc.root, "text_config");
    if (!root || root->type != QX_JSON_OBJECT) root = doc.root;
    arr = qx__mrope_json(root, doc.root, &where);
    r = QUAROT_OK;
    if (!arr || arr->type != QX_JSON_ARRAY || arr->count < 1 || arr->count > 4) {   /* checked when it was read; here 4 at most */
        qx_err_set(e, "config.json: %s must be an array of 1 to 4 sections", where);
        r = QUAROT_ERR_PARSE;
    }
    for (k = 0; r == QUAROT_OK && k < 4; ++k) {
        sec[k] = 0;
        if (k < arr->count && (qx_json_as_int64(&arr->items[k], &sec[k]) != QUAROT_OK || sec[k] < 0 || sec[k] > 0x7fffffff)) {
            qx_err_set(e, "config.json: %s[%zu] is not a section size", where, k);
            r = QUAROT_ERR_PARSE;
        }
    }
    if (r == QUAROT_OK) *n = (int)arr->count;
    qx_json_doc_free(&doc);
    return r;
}

quarot_result qx_hf_config_parse(const char* text, size_t len, const char* name, quarot_model_config* out,
                                 qx_err* e) {
    static const struct { const char* cls; const char* type; const char* arch; } archs[] = {
        {"LlamaForCausalLM", "llama", "llama"}, {"MistralForCausalLM", "mistral", "llama"},
        {"Qwen2ForCausalLM", "qwen2", "qwen2"}, {"Qwen3ForCausalLM", "qwen3", "qwen3"},
        {"OPTForCausalLM", "opt", "opt"}, {"Phi3ForCausalLM", "phi3", "phi3"},
        {"MixtralForCausalLM", "mixtral", "mixtral"}, {"Qwen2MoeForCausalLM", "qwen2_moe", "qwen2_moe"},
        {"Qwen3MoeForCausalLM", "qwen3_moe", "qwen3_moe"},
        {"Qwen2VLForConditionalGeneration", "qwen2_vl", "qwen2vl"},
        {"Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl", "qwen2vl"},
    };
    qx_json_doc doc;
    qx__cfg c;
    quarot_model_config m;
    const qx_json* a;
    const char* cls = NULL;
    int64_t x;
    size_t k;
    int is_opt, b, vl;
    const qx_json* root;
    quarot_result r;
    if (!out || (!text && len)) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!name) name = "config.json";
    r = qx_json_parse(text, len, name, NULL, &doc, e);
    if (r != QUAROT_OK) return r;
    memset(&m, 0, sizeof m);
    c.root = doc.root;
    c.fname = name;
    c.e = e;
    r = QUAROT_ERR_PARSE;
    if (doc.root->type != QX_JSON_OBJECT) { qx_err_set(e, "%s: not a JSON object", name); goto done; }
    /* the model class: architectures[0], else model_type */
    a = qx_json_get(doc.root, "architectures");
    if (a && a->type == QX_JSON_ARRAY && a->count > 0) {
        if (!(cls = qx_json_as_string(&a->items[0], NULL))) { qx_err_set(e, "%s: architectures[0] is not a string", name); goto done; }
        for (k = 0; k < sizeof archs / sizeof archs[0]; ++k) if (strcmp(cls, archs[k].cls) == 0) break;
    } else {
        if (!(cls = qx_json_as_string(qx_json_get(doc.root, "model_type"), NULL))) {
            qx_err_set(e, "%s: neither \"architectures\" nor \"model_type\" names the model", name);
            goto done;
        }
        for (k = 0; k < sizeof archs / sizeof archs[0]; ++k) if (strcmp(cls, archs[k].type) == 0) break;
    }
    if (k == sizeof archs / sizeof archs[0] && qx_gemma_norms_refused(cls)) {
        qx_err_set(e, "%s: architecture \"%.60s\" is not supported: %s", name, cls, qx_gemma_norms_reason);
        r = QUAROT_ERR_UNSUPPORTED;
        goto done;
    }
    if (k == sizeof archs / sizeof archs[0]) {
        qx_err_set(e, "%s: architecture \"%.60s\" is not supported (LlamaForCausalLM, MistralForCausalLM, "
                   "Qwen2ForCausalLM, Qwen3ForCausalLM, OPTForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM, "
                   "Qwen3MoeForCausalLM, Qwen2VLForConditionalGeneration, Qwen2_5_VLForConditionalGeneration)", name, cls);
        r = QUAROT_ERR_UNSUPPORTED;
        goto done;
    }
    strcpy(m.arch, archs[k].arch);
    is_opt = strcmp(m.arch, "opt") == 0;
    vl = strcmp(m.arch, "qwen2vl") == 0;
    if (vl && qx_json_get(doc.root, "text_config") && qx_json_get(doc.root, "text_config")->type == QX_JSON_OBJECT)
        c.root = qx_json_get(doc.root, "text_config");   /* newer transformers nest the decoder's keys */
    root = c.root;
    /* sizes every family has (OPT calls the MLP width ffn_dim) */
    if ((r = qx__cfg_int(&c, "hidden_size", 0, 1, QX__DIM_MAX, &m.hidden)) != QUAROT_OK) goto done;
    if ((r = qx__cfg_int(&c, is_opt ? "ffn_dim" : "intermediate_size", 0, 1, QX__DIM_MAX, &m.intermediate)) != QUAROT_OK) goto done;
    if ((r = qx__cfg_int(&c, "num_hidden_layers", 0, 1, 1 << 16, &m.n_layers)) != QUAROT_OK) goto done;
    if ((r = qx__cfg_int(&c, "num_attention_heads", 0, 1, 1 << 16, &m.n_heads)) != QUAROT_OK) goto done;
    if ((r = qx__cfg_int(&c, "vocab_size", 0, 1, QX__DIM_MAX, &m.vocab)) != QUAROT_OK) goto done;
    if ((r = qx__cfg_int(&c, "max_position_embeddings", is_opt ? 2048 : 0, 0, (int64_t)1 << 40, &m.max_seq)) != QUAROT_OK) goto done;
    r = QUAROT_ERR_PARSE;
    if (is_opt) {
        /* OPT: only the pre-norm variant without embedding projections fits the library's model */
        int before, affine;
        if (qx__cfg_int(&c, "word_embed_proj_dim", m.hidden, 1, QX__DIM_MAX, &x) != QUAROT_OK) goto done;
        if (x != m.hidden) {
            qx_err_set(e, "%s: OPT with word_embed_proj_dim %lld != hidden_size %lld (projected embeddings) is not supported",
                       name, (long long)x, (long long)m.hidden);
            r = QUAROT_ERR_UNSUPPORTED;
            goto done;
        }
        if (qx__cfg_bool(&c, "do_layer_norm_before", 1, &before) != QUAROT_OK) goto done;
        if (qx__cfg_bool(&c, "layer_norm_elementwise_affine", 1, &affine) != QUAROT_OK) goto done;
        if (!before || !affine) {
            qx_err_set(e, "%s: OPT with %s is not supported (pre-norm with affine LayerNorm only)", name,
                       !before ? "do_layer_norm_before false (post-norm)" : "layer_norm_elementwise_affine false");
            r = QUAROT_ERR_UNSUPPORTED;
            goto done;
        }
        if (qx__cfg_bool(&c, "enable_bias", 1, &b) != QUAROT_OK) goto done;
        m.attn_qkv_bias = m.attn_out_bias = m.mlp_bias = b;
        if (qx__cfg_bool(&c, "tie_word_embeddings", 1, &m.tied_embeddings) != QUAROT_OK) goto done;
        if ((r = qx__cfg_act(&c, "activation_function", "relu", &m.act)) != QUAROT_OK) goto done;
        r = QUAROT_ERR_PARSE;
        m.n_kv_heads = m.n_heads;
        if (m.hidden % m.n_heads != 0) {
            qx_err_set(e, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld", name,
                       (long long)m.hidden, (long long)m.n_heads);
            goto done;
        }
        m.head_dim = m.hidden / m.n_heads;
        m.norm = QUAROT_NORM_LAYER;
        m.mlp = QUAROT_MLP_PLAIN;
        m.norm_eps = 1e-5f;                  /* nn.LayerNorm's default; OPT has no key for it */
    } else {
        /* the Llama family: GQA heads, optional explicit head_dim, RMSNorm eps, RoPE base, biases */
        const qx_json* theta = qx_json_get(root, "rope_theta");
        const qx_json* rp = qx_json_get(root, "rope_parameters");   /* newer transformers */
        if (!theta && rp) theta = qx_json_get(rp, "rope_theta");
        if (qx__cfg_int(&c, "num_key_value_heads", m.n_heads, 1, m.n_heads, &m.n_kv_heads) != QUAROT_OK) goto done;
        if (m.n_heads % m.n_kv_heads != 0) {
            qx_err_set(e, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld", name,
                       (long long)m.n_heads, (long long)m.n_kv_heads);
            goto done;
        }
        if (!qx_json_get(root, "head_dim") || qx_json_get(root, "head_dim")->type == QX_JSON_NULL) {
            if (m.hidden % m.n_heads != 0) {
                qx_err_set(e, "%s: hidden_size %lld is not a multiple of num_attention_heads %lld (and no head_dim)", name,
                           (long long)m.hidden, (long long)m.n_heads);
                goto done;
            }
            m.head_dim = m.hidden / m.n_heads;
        } else if (qx__cfg_int(&c, "head_dim", 0, 1, QX__DIM_MAX, &m.head_dim) != QUAROT_OK) {
            goto done;
        }
        if (m.head_dim % 2 != 0) { qx_err_set(e, "%s: head_dim %lld is odd (RoPE needs pairs)", name, (long long)m.head_dim); goto done; }
        if (qx__cfg_num(&c, qx_json_get(root, "rms_norm_eps"), "rms_norm_eps", 1e-6, 0.0, 1.0, &m.norm_eps) != QUAROT_OK) goto done;
        if (qx__cfg_num(&c, theta, "rope_theta", 10000.0, 0.0, 1e12, &m.rope_theta) != QUAROT_OK) goto done;
        if (vl && root != doc.root && !qx_json_get(root, "tie_word_embeddings")) {
            qx__cfg top;   /* nested: the text config's key when it has one (what transformers ties by), else the top level's */
            top = c;
            top.root = doc.root;
            if (qx__cfg_bool(&top, "tie_word_embeddings", 0, &m.tied_embeddings) != QUAROT_OK) goto done;
        } else if (qx__cfg_bool(&c, "tie_word_embeddings", 0, &m.tied_embeddings) != QUAROT_OK) {
            goto done;
        }
        if ((r = qx__cfg_act(&c, "hidden_act", "silu", &m.act)) != QUAROT_OK) goto done;
        r = QUAROT_ERR_PARSE;
        if (qx__cfg_bool(&c, "attention_bias", 0, &b) != QUAROT_OK) goto done;
        if (strcmp(m.arch, "qwen2") == 0 || strcmp(m.arch, "qwen2_moe") == 0 || vl) {
            m.attn_qkv_bias = 1;             /* Qwen2 hard-codes q/k/v biases and no o_proj bias */
        } else {
            m.attn_qkv_bias = m.attn_out_bias = b;
            if (qx__cfg_bool(&c, "mlp_bias", 0, &m.mlp_bias) != QUAROT_OK) goto done;
        }
        m.qk_norm = strcmp(m.arch, "qwen3") == 0 || strcmp(m.arch, "qwen3_moe") == 0;
        if (strcmp(m.arch, "phi3") == 0 && (r = qx__phi3_rope(&c, &m)) != QUAROT_OK) goto done;
        m.norm = QUAROT_NORM_RMS;
        m.mlp = QUAROT_MLP_GATED;
        if ((r = qx__moe_config(&c, &m)) != QUAROT_OK) goto done;
        if (vl && (r = qx__vl_config(&c, doc.root, &m)) != QUAROT_OK) goto done;
    }
    m.rope_interleaved = 0;                  /* Hugging Face's half-split layout */
    *out = m;
    r = QUAROT_OK;
done:
    qx_json_doc_free(&doc);
    return r;
}

/* The tensor `name` must exist with ne = {n0, n1} (n1 = 1 for vectors). */
static quarot_result qx__expect(const qx_store* s, const char* fname, const char* name, int64_t n0, int64_t n1,
                                qx_err* e) {
    const quarot_tensor* t = qx_store_find(s, name);
    if (!t) { qx_err_set(e, "%s: tensor \"%s\" is missing (the config implies it)", fname, name); return QUAROT_ERR_NOT_FOUND; }
    if (t->ne[0] != n0 || t->ne[1] != n1 || t->ne[2] != 1 || t->ne[3] != 1) {
        qx_err_set(e, "%s: tensor \"%s\" has shape [%lld, %lld, %lld, %lld] (outermost first), the config implies [%lld, %lld]",
                   fname, name, (long long)t->ne[3], (long long)t->ne[2], (long long)t->ne[1], (long long)t->ne[0],
                   (long long)n1, (long long)n0);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    return QUAROT_OK;
}

/* A fused projection ([rows][hidden]) whose row count must be `want`: the split it implies, in words. */
static quarot_result qx__expect_fused(const qx_store* s, const char* fname, const char* name, int64_t hidden, int64_t want,
                                      const char* split, qx_err* e) {
    const quarot_tensor* t = qx_store_find(s, name);
    if (t && t->ne[0] == hidden && t->ne[1] != want && t->ne[2] == 1 && t->ne[3] == 1) {
        qx_err_set(e, "%s: tensor \"%s\" has %lld rows, which do not split into the config's %s (%lld rows)", fname, name,
                   (long long)t->ne[1], split, (long long)want);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    return qx__expect(s, fname, name, hidden, want, e);
}

quarot_result qx_hf_check_tensors(const qx_store* s, const char* fname, qx_err* e) {
    const quarot_model_config* c;
    int opt, phi3;
    const char* pre;
    char nm[160];
    int64_t i, hd, q_out, kv_out;
    quarot_result r;
    if (!s) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!fname) fname = "model";
    c = &s->config;
    opt = strcmp(c->arch, "opt") == 0;
    phi3 = strcmp(c->arch, "phi3") == 0;
    if (!opt && strcmp(c->arch, "llama") && strcmp(c->arch, "qwen2") && strcmp(c->arch, "qwen3") && !phi3 &&
        strcmp(c->arch, "mixtral") && strcmp(c->arch, "qwen2_moe") && strcmp(c->arch, "qwen3_moe") &&
        strcmp(c->arch, "qwen2vl")) {
        qx_err_set(e, "%s: no tensor layout known for architecture \"%.32s\"", fname, c->arch);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (c->hidden < 1 || c->n_heads < 1 || c->n_layers < 1 || c->vocab < 1 || c->intermediate < 1) {
        qx_err_set(e, "%s: config sizes must be positive", fname);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    /* projections: q_proj [n_heads*hd][hidden], k/v_proj [n_kv*hd][hidden], o_proj [hidden][n_heads*hd] */
    hd = c->head_dim ? c->head_dim : c->hidden / c->n_heads;
    q_out = c->n_heads * hd;
    kv_out = (c->n_kv_heads ? c->n_kv_heads : c->n_heads) * hd;
    pre = opt ? "model.decoder." : "model.";
#define QX__X(n0, n1, ...) do { snprintf(nm, sizeof nm, __VA_ARGS__); \
        if ((r = qx__expect(s, fname, nm, n0, n1, e)) != QUAROT_OK) return r; } while (0)
    QX__X(c->hidden, c->vocab, "%sembed_tokens.weight", pre);
    if (c->tied_embeddings) {
        if (qx_store_find(s, "lm_head.weight")) {
            qx_err_set(e, "%s: lm_head.weight is present but the config ties the embeddings", fname);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    } else {
        QX__X(c->hidden, c->vocab, "lm_head.weight");
    }
    if (opt) {
        QX__X(c->hidden, 1, "model.decoder.final_layer_norm.weight");
        QX__X(c->hidden, 1, "model.decoder.final_layer_norm.bias");
        /* learned positions: max_position_embeddings + 2 rows (OPT's offset) */
        QX__X(c->hidden, c->max_seq + 2, "model.decoder.embed_positions.weight");
    } else {
        QX__X(c->hidden, 1, "model.norm.weight");
    }
    for (i = 0; i < c->n_layers; ++i) {
        static const char* const qkv[3] = {"q", "k", "v"};
        int k;
        if (phi3) {   /* fused: qkv_proj = q|k|v rows, gate_up_proj = gate|up rows; no biases */
            char split[160];
            snprintf(split, sizeof split, "q|k|v for %lld heads and %lld KV heads of head_dim %lld", (long long)c->n_heads,
                     (long long)(c->n_kv_heads ? c->n_kv_heads : c->n_heads), (long long)hd);
            snprintf(nm, sizeof nm, "model.layers.%lld.self_attn.qkv_proj.weight", (long long)i);
            if ((r = qx__expect_fused(s, fname, nm, c->hidden, q_out + 2 * kv_out, split, e)) != QUAROT_OK) return r;
            snprintf(split, sizeof split, "gate|up of intermediate_size %lld", (long long)c->intermediate);
            snprintf(nm, sizeof nm, "model.layers.%lld.mlp.gate_up_proj.weight", (long long)i);
            if ((r = qx__expect_fused(s, fname, nm, c->hidden, 2 * c->intermediate, split, e)) != QUAROT_OK) return r;
            QX__X(q_out, c->hidden, "model.layers.%lld.self_attn.o_proj.weight", (long long)i);
            QX__X(c->hidden, 1, "model.layers.%lld.input_layernorm.weight", (long long)i);
            QX__X(c->hidden, 1, "model.layers.%lld.post_attention_layernorm.weight", (long long)i);
            QX__X(c->intermediate, c->hidden, "model.layers.%lld.mlp.down_proj.weight", (long long)i);
            continue;
        }
        for (k = 0; k < 3; ++k) {
            int64_t n_out = k == 0 ? q_out : kv_out;
            QX__X(c->hidden, n_out, "%slayers.%lld.self_attn.%s_proj.weight", pre, (long long)i, qkv[k]);
            if (c->attn_qkv_bias) QX__X(n_out, 1, "%slayers.%lld.self_attn.%s_proj.bias", pre, (long long)i, qkv[k]);
        }
        QX__X(q_out, c->hidden, "%slayers.%lld.self_attn.%s.weight", pre, (long long)i, opt ? "out_proj" : "o_proj");
        if (c->attn_out_bias) QX__X(c->hidden, 1, "%slayers.%lld.self_attn.%s.bias", pre, (long long)i, opt ? "out_proj" : "o_proj");
        if (opt) {
            QX__X(c->hidden, 1, "model.decoder.layers.%lld.self_attn_layer_norm.weight", (long long)i);
            QX__X(c->hidden, 1, "model.decoder.layers.%lld.self_attn_layer_norm.bias", (long long)i);
            QX__X(c->hidden, 1, "model.decoder.layers.%lld.final_layer_norm.weight", (long long)i);
            QX__X(c->hidden, 1, "model.decoder.layers.%lld.final_layer_norm.bias", (long long)i);
            QX__X(c->hidden, c->intermediate, "model.decoder.layers.%lld.fc1.weight", (long long)i);
            QX__X(c->intermediate, c->hidden, "model.decoder.layers.%lld.fc2.weight", (long long)i);
            if (c->mlp_bias) {
                QX__X(c->intermediate, 1, "model.decoder.layers.%lld.fc1.bias", (long long)i);
                QX__X(c->hidden, 1, "model.decoder.layers.%lld.fc2.bias", (long long)i);
            }
            continue;
        }
        QX__X(c->hidden, 1, "model.layers.%lld.input_layernorm.weight", (long long)i);
        QX__X(c->hidden, 1, "model.layers.%lld.post_attention_layernorm.weight", (long long)i);
        if (c->qk_norm) {
            QX__X(hd, 1, "model.layers.%lld.self_attn.q_norm.weight", (long long)i);
            QX__X(hd, 1, "model.layers.%lld.self_attn.k_norm.weight", (long long)i);
        }
        if (quarot_config_layer_is_moe(c, i)) {   /* router, experts, shared expert and its gate */
            int mixtral = strcmp(c->arch, "mixtral") == 0;
            const char* moe = mixtral ? "block_sparse_moe" : "mlp";
            int64_t x, ei = quarot_config_expert_width(c);
            QX__X(c->hidden, c->n_experts, "model.layers.%lld.%s.gate.weight", (long long)i, moe);
            if (c->experts_stacked) {   /* GGUF: one 3-D tensor [n_experts][out][in] per projection */
                static const char* const pr[3] = {"gate_proj", "up_proj", "down_proj"};
                int k3;
                for (k3 = 0; k3 < 3; ++k3) {
                    const int64_t n0 = k3 == 2 ? ei : c->hidden, n1 = k3 == 2 ? c->hidden : ei;
                    const quarot_tensor* t;
                    snprintf(nm, sizeof nm, "model.layers.%lld.%s.experts.%s.weight", (long long)i, moe,
                             mixtral ? (k3 == 0 ? "w1" : k3 == 1 ? "w3" : "w2") : pr[k3]);
                    t = qx_store_find(s, nm);
                    if (!t) {
                        qx_err_set(e, "%s: tensor \"%s\" is missing (the config implies it)", fname, nm);
                        return QUAROT_ERR_NOT_FOUND;
                    }
                    if (t->ne[0] != n0 || t->ne[1] != n1 || t->ne[2] != c->n_experts || t->ne[3] != 1) {
                        qx_err_set(e, "%s: tensor \"%s\" has shape [%lld, %lld, %lld] (outermost first), the config "
                                   "implies [%lld experts, %lld, %lld]", fname, nm, (long long)t->ne[2],
                                   (long long)t->ne[1], (long long)t->ne[0], (long long)c->n_experts, (long long)n1,
                                   (long long)n0);
                        return QUAROT_ERR_SHAPE_MISMATCH;
                    }
                }
            }
            for (x = 0; x < c->n_experts && !c->experts_stacked; ++x) {
                QX__X(c->hidden, ei, "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)i, moe, (long long)x,
                      mixtral ? "w1" : "gate_proj");
                QX__X(c->hidden, ei, "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)i, moe, (long long)x,
                      mixtral ? "w3" : "up_proj");
                QX__X(ei, c->hidden, "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)i, moe, (long long)x,
                      mixtral ? "w2" : "down_proj");
            }
            snprintf(nm, sizeof nm, "model.layers.%lld.%s.experts.%lld.", (long long)i, moe, (long long)c->n_experts);
            for (x = 0; x < s->count; ++x)
                if (strncmp(s->items[x].name, nm, strlen(nm)) == 0) {
                    qx_err_set(e, "%s: tensor \"%.120s\" is an expert beyond the config's %lld", fname,
                               s->items[x].name, (long long)c->n_experts);
                    return QUAROT_ERR_SHAPE_MISMATCH;
                }
            if (c->shared_intermediate > 0) {
                QX__X(c->hidden, c->shared_intermediate, "model.layers.%lld.mlp.shared_expert.gate_proj.weight",
                      (long long)i);
                QX__X(c->hidden, c->shared_intermediate, "model.layers.%lld.mlp.shared_expert.up_proj.weight",
                      (long long)i);
                QX__X(c->shared_intermediate, c->hidden, "model.layers.%lld.mlp.shared_expert.down_proj.weight",
                      (long long)i);
                QX__X(c->hidden, 1, "model.layers.%lld.mlp.shared_expert_gate.weight", (long long)i);
            }
            continue;
        }
        QX__X(c->hidden, c->intermediate, "model.layers.%lld.mlp.gate_proj.weight", (long long)i);
        QX__X(c->hidden, c->intermediate, "model.layers.%lld.mlp.up_proj.weight", (long long)i);
        QX__X(c->intermediate, c->hidden, "model.layers.%lld.mlp.down_proj.weight", (long long)i);
        if (c->mlp_bias) {
            QX__X(c->intermediate, 1, "model.layers.%lld.mlp.gate_proj.bias", (long long)i);
            QX__X(c->intermediate, 1, "model.layers.%lld.mlp.up_proj.bias", (long long)i);
            QX__X(c->hidden, 1, "model.layers.%lld.mlp.down_proj.bias", (long long)i);
        }
    }
    if (strcmp(c->arch, "qwen2vl") == 0) {   /* the vision merger's output projection writes the text stream */
        const quarot_tensor* t = qx_store_find(s, QX_VL_MERGER_WEIGHT);
        const char* fp = qx_hf_file_renames(s, NULL) ? "model." : "";   /* named as the file names it */
        if (!t) {
            qx_err_set(e, "%s: tensor \"%s%s\" is missing (the vision merger's output projection, which the rotation "
                       "must rotate with the text stream)", fname, fp, QX_VL_MERGER_WEIGHT);
            return QUAROT_ERR_NOT_FOUND;
        }
        if (t->ne[1] != c->hidden || t->ne[2] != 1 || t->ne[3] != 1) {
            qx_err_set(e, "%s: tensor \"%s%s\" has shape [%lld, %lld] (outermost first): its output width %lld is not "
                       "the text hidden size %lld", fname, fp, QX_VL_MERGER_WEIGHT, (long long)t->ne[1], (long long)t->ne[0],
                       (long long)t->ne[1], (long long)c->hidden);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
        t = qx_store_find(s, QX_VL_MERGER_BIAS);
        if (!t || t->ne[0] != c->hidden || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1) {
            qx_err_set(e, "%s: tensor \"%s%s\" is %s (the merger's output bias, [%lld])", fname, fp, QX_VL_MERGER_BIAS,
                       t ? "of another shape" : "missing", (long long)c->hidden);
            return t ? QUAROT_ERR_SHAPE_MISMATCH : QUAROT_ERR_NOT_FOUND;
        }
    }
#undef QX__X
    /* no layer beyond the config's count */
    snprintf(nm, sizeof nm, "%slayers.", pre);
    for (i = 0; i < s->count; ++i) {
        const char* name = s->items[i].name;
        size_t pl = strlen(nm);
        long long layer = 0;
        const char* d;
        if (strncmp(name, nm, pl) != 0) continue;
        for (d = name + pl; *d >= '0' && *d <= '9' && layer <= c->n_layers; ++d) layer = layer * 10 + (*d - '0');
        if (d == name + pl || layer >= c->n_layers) {
            qx_err_set(e, "%s: tensor \"%.120s\" lies outside the config's %lld layers", fname, name, (long long)c->n_layers);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    }
    return QUAROT_OK;
}

/* JSON member helpers for the generated config */
static void qx__kv(qx_sb* b, int* first, const char* key) {
    qx_sb_puts(b, *first ? "\n  " : ",\n  ");
    *first = 0;
    qx_sb_json_string(b, key, strlen(key));
    qx_sb_puts(b, ": ");
}

static const char* qx__torch_dtype(const qx_store* s) {
    int64_t i;
    quarot_dtype dt = s->count ? s->items[0].t.dtype : QUAROT_DTYPE_F32;
    for (i = 1; i < s->count; ++i)
        if (s->items[i].t.dtype != dt) return "float32";
    return dt == QUAROT_DTYPE_F16 ? "float16" : dt == QUAROT_DTYPE_BF16 ? "bfloat16" : dt == QUAROT_DTYPE_F64 ? "float64" : "float32";
}

quarot_result qx_hf_config_write(const qx_store* s, qx_sb* out, qx_err* e) {
    const quarot_model_config* c;
    size_t blen = 0;
    const char* blob;
    int has_head, first = 1;
    if (!s || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    c = &s->config;
    has_head = qx_store_find(s, "lm_head.weight") != NULL;
    blob = (const char*)qx_store_get_blob(s, "hf.config.json", &blen);
    if (blob) {
        /* the original, with tie_word_embeddings patched only where its effective value is wrong */
        qx_json_doc doc;
        int tied_read = strcmp(c->arch, "opt") == 0, v;
        const char* key = "tie_word_embeddings";
        const char* val = has_head ? "false" : "true";
        quarot_result r = qx_json_parse(blob, blen, "hf.config.json", NULL, &doc, e);
        if (r != QUAROT_OK) return r;
        if (doc.root->type != QX_JSON_OBJECT) { qx_json_doc_free(&doc); qx_err_set(e, "hf.config.json: not an object"); return QUAROT_ERR_PARSE; }
        if (qx_json_as_bool(qx_json_get(doc.root, key), &v) == QUAROT_OK) tied_read = v;
        {   /* Qwen2-VL's nested text_config may say it too (transformers ties by that one): patched alike */
            const qx_json* tc = strcmp(c->arch, "qwen2vl") == 0 ? qx_json_get(doc.root, "text_config") : NULL;
            const char* keys[2];
            const char* vals[2];
            int n = 0, tv;
            qx_sb tb;
            memset(&tb, 0, sizeof tb);
            if (tied_read != !has_head) { keys[n] = key; vals[n++] = val; }
            if (tc && tc->type == QX_JSON_OBJECT && qx_json_as_bool(qx_json_get(tc, key), &tv) == QUAROT_OK && tv != !has_head) {
                qx_json_write_patched(&tb, tc, 0, &key, &val, 1);
                keys[n] = "text_config";
                vals[n++] = tb.p;
            }
            qx_json_write_patched(out, doc.root, 2, keys, vals, n);
            if (tb.failed) out->failed = 1;
            qx_sb_free(&tb);
        }
        qx_sb_puts(out, "\n");
        qx_json_doc_free(&doc);
        return out->failed ? QUAROT_ERR_OUT_OF_MEMORY : QUAROT_OK;
    }
    {
        /* generated: first refuse configs the Hugging Face class could not express */
        int mixtral = strcmp(c->arch, "mixtral") == 0, qwen2_moe = strcmp(c->arch, "qwen2_moe") == 0;
        int qwen3_moe = strcmp(c->arch, "qwen3_moe") == 0;
        int llama = strcmp(c->arch, "llama") == 0 || mixtral, qwen2 = strcmp(c->arch, "qwen2") == 0 || qwen2_moe;
        int qwen3 = strcmp(c->arch, "qwen3") == 0 || qwen3_moe, opt = strcmp(c->arch, "opt") == 0;
        int phi3 = strcmp(c->arch, "phi3") == 0;
        int64_t hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
        const char* act = c->act == QUAROT_ACT_RELU ? "relu" : c->act == QUAROT_ACT_GELU ? "gelu_pytorch_tanh" : "silu";
        const char* why = NULL;
        if (!llama && !qwen2 && !qwen3 && !opt && !phi3) why = "has no Hugging Face class here";
        else if (phi3 && (c->attn_qkv_bias || c->attn_out_bias || c->mlp_bias || c->qk_norm))
            why = "does not fit Phi3Config (no biases, no q/k norms)";
        else if (opt && (c->norm != QUAROT_NORM_LAYER || c->mlp != QUAROT_MLP_PLAIN || c->qk_norm ||
                         c->attn_qkv_bias != c->attn_out_bias || c->attn_qkv_bias != c->mlp_bias ||
                         (c->n_kv_heads && c->n_kv_heads != c->n_heads) || hd * c->n_heads != c->hidden))
            why = "does not fit OPTConfig";
        else if (!opt && (c->norm == QUAROT_NORM_LAYER || c->mlp == QUAROT_MLP_PLAIN))
            why = "has LayerNorm or a plain MLP";
        else if (llama && (c->attn_qkv_bias != c->attn_out_bias || c->qk_norm))
            why = "has q/k/v biases without an o_proj bias, or q/k norms (not expressible in LlamaConfig)";
        else if (qwen2 && (!c->attn_qkv_bias || c->attn_out_bias || c->mlp_bias || c->qk_norm))
            why = "does not fit Qwen2Config (q/k/v biases only)";
        else if (qwen3 && (!c->qk_norm || c->mlp_bias || c->attn_qkv_bias != c->attn_out_bias))
            why = "does not fit Qwen3Config";
        if (why) {
            qx_err_set(e, "config.json: architecture \"%.32s\" %s", c->arch, why);
            return QUAROT_ERR_UNSUPPORTED;
        }
        /* then the keys qx_hf_config_parse reads, so the config survives the round trip */
        qx_sb_puts(out, "{");
        qx__kv(out, &first, "architectures");
        qx_sb_puts(out, mixtral ? "[\"MixtralForCausalLM\"]" : qwen2_moe ? "[\"Qwen2MoeForCausalLM\"]"
                        : qwen3_moe ? "[\"Qwen3MoeForCausalLM\"]" : phi3 ? "[\"Phi3ForCausalLM\"]"
                        : opt ? "[\"OPTForCausalLM\"]" : qwen2 ? "[\"Qwen2ForCausalLM\"]"
                        : qwen3 ? "[\"Qwen3ForCausalLM\"]" : "[\"LlamaForCausalLM\"]");
        qx__kv(out, &first, "model_type");
        qx_sb_printf(out, "\"%s\"", c->arch);
        qx__kv(out, &first, "hidden_size"); qx_sb_printf(out, "%lld", (long long)c->hidden);
        qx__kv(out, &first, opt ? "ffn_dim" : "intermediate_size"); qx_sb_printf(out, "%lld", (long long)c->intermediate);
        qx__kv(out, &first, "num_hidden_layers"); qx_sb_printf(out, "%lld", (long long)c->n_layers);
        qx__kv(out, &first, "num_attention_heads"); qx_sb_printf(out, "%lld", (long long)c->n_heads);
        if (!opt) {
            qx__kv(out, &first, "num_key_value_heads");
            qx_sb_printf(out, "%lld", (long long)(c->n_kv_heads ? c->n_kv_heads : c->n_heads));
            qx__kv(out, &first, "head_dim"); qx_sb_printf(out, "%lld", (long long)hd);
        }
        qx__kv(out, &first, "vocab_size"); qx_sb_printf(out, "%lld", (long long)c->vocab);
        if (c->max_seq > 0) { qx__kv(out, &first, "max_position_embeddings"); qx_sb_printf(out, "%lld", (long long)c->max_seq); }
        if (opt) {
            qx__kv(out, &first, "word_embed_proj_dim"); qx_sb_printf(out, "%lld", (long long)c->hidden);
            qx__kv(out, &first, "do_layer_norm_before"); qx_sb_puts(out, "true");
            qx__kv(out, &first, "enable_bias"); qx_sb_puts(out, c->attn_qkv_bias ? "true" : "false");
            qx__kv(out, &first, "activation_function"); qx_sb_printf(out, "\"%s\"", act);
        } else {
            qx__kv(out, &first, "rms_norm_eps"); qx_sb_float(out, c->norm_eps > 0 ? c->norm_eps : 1e-5f);
            qx__kv(out, &first, "rope_theta"); qx_sb_float(out, c->rope_theta > 0 ? c->rope_theta : 10000.0f);
            qx__kv(out, &first, "hidden_act"); qx_sb_printf(out, "\"%s\"", act);
            if (!qwen2 && !phi3) { qx__kv(out, &first, "attention_bias"); qx_sb_puts(out, c->attn_qkv_bias ? "true" : "false"); }
            if (llama) { qx__kv(out, &first, "mlp_bias"); qx_sb_puts(out, c->mlp_bias ? "true" : "false"); }
        }
        if (mixtral || qwen2_moe || qwen3_moe) {   /* the keys qx__moe_config reads */
            qx__kv(out, &first, mixtral ? "num_local_experts" : "num_experts");
            qx_sb_printf(out, "%lld", (long long)c->n_experts);
            qx__kv(out, &first, "num_experts_per_tok"); qx_sb_printf(out, "%lld", (long long)c->n_experts_used);
            if (!mixtral) {
                qx__kv(out, &first, "moe_intermediate_size");
                qx_sb_printf(out, "%lld", (long long)(c->expert_intermediate ? c->expert_intermediate : c->intermediate));
                if (qwen2_moe) {
                    qx__kv(out, &first, "shared_expert_intermediate_size");
                    qx_sb_printf(out, "%lld", (long long)c->shared_intermediate);
                }
                qx__kv(out, &first, "norm_topk_prob"); qx_sb_puts(out, c->norm_topk_prob ? "true" : "false");
                qx__kv(out, &first, "decoder_sparse_step");
                qx_sb_printf(out, "%lld", (long long)(c->sparse_step > 0 ? c->sparse_step : 1));
                qx__kv(out, &first, "mlp_only_layers"); qx_sb_puts(out, "[]");
            }
        }
        qx__kv(out, &first, "tie_word_embeddings"); qx_sb_puts(out, has_head ? "false" : "true");
        qx__kv(out, &first, "torch_dtype"); qx_sb_printf(out, "\"%s\"", qx__torch_dtype(s));
        qx_sb_puts(out, "\n}\n");
    }
    return out->failed ? QUAROT_ERR_OUT_OF_MEMORY : QUAROT_OK;
}

/* ---- writer ---- */

typedef struct qx__st_went {
    char* name;
    quarot_dtype dt;
    int n_dims;
    int64_t ne[QUAROT_MAX_DIMS];
    int rank;                 /* shape written: shape[rank] outermost first, or ne[n_dims) when shape is NULL */
    int64_t* shape;
    uint64_t nbytes;
    int file;                 /* index into files[] */
    uint64_t off;             /* absolute offset in that file */
    int written;
    int64_t rows_done;        /* qx_st_writer_put_rows: rows written so far */
} qx__st_went;

/* A planned 3-D expert tensor "<pre>experts.<proj>.weight" [n_exp][rows][cols] (GGUF's layout), written
   as Hugging Face holds it: n_exp tensors "<pre>experts.<e>.<proj>.weight" [rows][cols]. */
typedef struct qx__st_stack {
    char* name;               /* as planned (before renames) */
    int64_t n_exp, rows;
} qx__st_stack;

struct qx_st_writer {
    qx__st_went* t;           /* sorted by qx_name_cmp */
    int64_t n;
    qx_out* files;
    uint64_t* file_size;
    int n_files;
    qx_out extra[2];          /* index and config, when written */
    char* extra_text[2];
    size_t extra_len[2];
    int n_extra;
    char* stale;              /* the other layout's entry file, removed on finish (force) */
    char* made_dir;           /* directory begin created; removed again on abort (when empty) */
    int* direct_mode;         /* opts->direct_mode */
    char ren[4][2][48];       /* opts->rename, copied */
    int n_ren;
    qx__st_stack* stk;        /* planned 3-D expert tensors, written one tensor per expert */
    int64_t n_stk;
};

/* name as the file holds it (opts->rename): malloc'ed, NULL when out of memory. */
static char* qx__st_file_name(const qx_st_writer* w, const char* name) {
    const char* from = "";
    const char* to = "";
    char* out;
    int k;
    for (k = 0; k < w->n_ren; ++k)
        if (strncmp(name, w->ren[k][0], strlen(w->ren[k][0])) == 0) { from = w->ren[k][0]; to = w->ren[k][1]; break; }
    out = (char*)malloc(strlen(to) + strlen(name) - strlen(from) + 1);
    if (!out) return NULL;
    strcpy(out, to);
    strcat(out, name + strlen(from));
    return out;
}

static const char* qx__st_dtype_name(quarot_dtype dt) {
    switch (dt) {
        case QUAROT_DTYPE_F16: return "F16";
        case QUAROT_DTYPE_BF16: return "BF16";
        case QUAROT_DTYPE_F64: return "F64";
        default: return "F32";
    }
}

static int qx__went_name_cmp(const void* a, const void* b) {
    return qx_name_cmp(((const qx__st_went*)a)->name, ((const qx__st_went*)b)->name);
}

/* In-file order: larger elements first (keeps every tensor aligned), then natural name order. */
static int qx__went_file_cmp(const void* a, const void* b) {
    const qx__st_went* x = *(const qx__st_went* const*)a;
    const qx__st_went* y = *(const qx__st_went* const*)b;
    size_t ex = quarot_dtype_size(x->dt), ey = quarot_dtype_size(y->dt);
    if (ex != ey) return ex > ey ? -1 : 1;
    return qx_name_cmp(x->name, y->name);
}

void qx_st_writer_abort(qx_st_writer* w) {
    int64_t i;
    int k;
    if (!w) return;
    for (k = 0; w->files && k < w->n_files; ++k) qx_out_abort(&w->files[k]);
    for (k = 0; k < w->n_extra; ++k) { qx_out_abort(&w->extra[k]); free(w->extra_text[k]); }
    for (i = 0; i < w->n; ++i) { free(w->t[i].name); free(w->t[i].shape); }
    for (i = 0; i < w->n_stk; ++i) free(w->stk[i].name);
    free(w->stk);
    free(w->t);
    free(w->files);
    free(w->file_size);
    free(w->stale);
    if (w->made_dir) (void)rmdir(w->made_dir);
    free(w->made_dir);
    free(w);
}

/* The compact __metadata__ object: the caller's (checked: an object of strings) or {"format":"pt"}. */
static quarot_result qx__st_meta(const char* json, qx_sb* out, qx_err* e) {
    qx_json_doc doc;
    size_t k;
    quarot_result r;
    if (!json) { qx_sb_puts(out, "{\"format\":\"pt\"}"); return QUAROT_OK; }
    r = qx_json_parse(json, strlen(json), "__metadata__", NULL, &doc, e);
    if (r != QUAROT_OK) return r;
    for (k = 0; doc.root->type == QX_JSON_OBJECT && k < doc.root->count; ++k)
        if (doc.root->items[k].type != QX_JSON_STRING) break;
    if (doc.root->type != QX_JSON_OBJECT || k < doc.root->count) {
        qx_json_doc_free(&doc);
        qx_err_set(e, "__metadata__: must be a JSON object of strings");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    qx_json_write(out, doc.root, 0);
    qx_json_doc_free(&doc);
    return QUAROT_OK;
}

/* ---- qx_st_writer_begin, step by step ---- */

/* What qx_st_writer_begin works with; its steps fill w (freed by qx_st_writer_abort on failure). */
typedef struct qx__stw_begin {
    qx_st_writer* w;
    const char* out;
    size_t olen;
    int single;                  /* out ends in .safetensors: one file (else a directory) */
    int force;
    const qx_st_write_opts* opts;
    qx_sb meta;                  /* the compact __metadata__ object */
    qx_sb hdr;                   /* one file's header */
    qx__st_went** order;         /* one file's tensors in file order */
    qx_err* e;
} qx__stw_begin;

/* The plan: names, dtypes, shapes, byte sizes (all checked: a plan may come from anywhere), then
   natural name order: deterministic, shards hold whole consecutive layers, lookups bisect. */
static quarot_result qx__stw_plan(qx__stw_begin* g, const qx_tensor_plan* plan, int64_t n) {
    qx_st_writer* w = g->w;
    const char* out = g->out;
    qx_err* e = g->e;
    int64_t i;
    for (i = 0; i < n; ++i) {
        const qx_tensor_plan* p = &plan[i];
        qx__st_went* t = &w->t[i];
        size_t es;
        int d;
        if (!p->name || !p->name[0] || strcmp(p->name, "__metadata__") == 0 || p->n_dims < 1 || p->n_dims > QUAROT_MAX_DIMS) {
            qx_err_set(e, "%s: plan entry %lld: needs a name (not __metadata__) and 1..4 dimensions", out, (long long)i);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        t->dt = p->dtype == QUAROT_DTYPE_DEFAULT ? QUAROT_DTYPE_F32 : p->dtype;
        es = quarot_dtype_size(t->dt);
        if (es == 0) { qx_err_set(e, "%s: tensor \"%s\": unknown dtype", out, p->name); return QUAROT_ERR_UNSUPPORTED_DTYPE; }
        t->name = qx__st_file_name(w, p->name);
        if (!t->name) { qx_err_set(e, "%s: out of memory", out); return QUAROT_ERR_OUT_OF_MEMORY; }
        t->n_dims = p->n_dims;
        t->nbytes = es;
        w->n = i + 1;
        for (d = 0; d < QUAROT_MAX_DIMS; ++d) {
            t->ne[d] = d < p->n_dims ? p->ne[d] : 1;
            if (t->ne[d] < 1 || t->nbytes > UINT64_MAX / (uint64_t)t->ne[d] || t->nbytes * (uint64_t)t->ne[d] > (uint64_t)INT64_MAX / 2) {
                qx_err_set(e, "%s: tensor \"%s\": bad or overflowing shape", out, p->name);
                return QUAROT_ERR_INVALID_ARGUMENT;
            }
            t->nbytes *= (uint64_t)t->ne[d];
        }
        if (p->shape) {   /* a recorded shape: its fold must be the planned sizes */
            int64_t fold[QUAROT_MAX_DIMS];
            int ok = p->rank >= 0 && p->rank <= QX_MAX_RANK;
            for (d = 0; ok && d < p->rank; ++d) ok = p->shape[d] >= 1 && p->shape[d] <= t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
            if (ok) qx_shape_fold(p->rank, p->shape, fold);
            for (d = 0; ok && d < QUAROT_MAX_DIMS; ++d) ok = fold[d] == t->ne[d];
            if (!ok) {
                qx_err_set(e, "%s: tensor \"%s\": the shape to write does not hold its planned sizes", out, p->name);
                return QUAROT_ERR_INVALID_ARGUMENT;
            }
            t->shape = (int64_t*)malloc((size_t)(p->rank ? p->rank : 1) * sizeof *t->shape);
            if (!t->shape) { qx_err_set(e, "%s: out of memory", out); return QUAROT_ERR_OUT_OF_MEMORY; }
            if (p->rank) memcpy(t->shape, p->shape, (size_t)p->rank * sizeof *t->shape);
            t->rank = p->rank;
        }
    }
    w->n = n;
    qsort(w->t, (size_t)n, sizeof *w->t, qx__went_name_cmp);
    for (i = 1; i < n; ++i)
        if (strcmp(w->t[i - 1].name, w->t[i].name) == 0) {
            qx_err_set(e, "%s: tensor \"%s\" is planned twice", out, w->t[i].name);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    return QUAROT_OK;
}

/* shards: natural order, greedy: a tensor starts a new shard when it would overflow this one */
static quarot_result qx__stw_shards(qx__stw_begin* g) {
    qx_st_writer* w = g->w;
    uint64_t shard_bytes = g->opts ? g->opts->shard_bytes : 0, cur = 0;
    int64_t i;
    w->n_files = 1;
    if (g->single || shard_bytes == 0) return QUAROT_OK;
    for (i = 0; i < w->n; ++i) {
        if (cur > 0 && w->t[i].nbytes > shard_bytes - (cur < shard_bytes ? cur : shard_bytes)) { ++w->n_files; cur = 0; }
        w->t[i].file = w->n_files - 1;
        cur += w->t[i].nbytes;
    }
    if (w->n_files > 99999) { qx_err_set(g->e, "%s: more than 99999 shards", g->out); return QUAROT_ERR_INVALID_ARGUMENT; }
    return QUAROT_OK;
}

/* The metadata, the files' bookkeeping and, for a directory output, the directory. */
static quarot_result qx__stw_prepare(qx__stw_begin* g) {
    qx_st_writer* w = g->w;
    const char* out = g->out;
    int64_t n = w->n;
    int k;
    quarot_result r = qx__st_meta(g->opts ? g->opts->metadata_json : NULL, &g->meta, g->e);
    if (r != QUAROT_OK) return r;
    w->files = (qx_out*)calloc((size_t)w->n_files, sizeof *w->files);
    w->file_size = (uint64_t*)calloc((size_t)w->n_files, sizeof *w->file_size);
    g->order = (qx__st_went**)malloc((size_t)(n ? n : 1) * sizeof *g->order);
    if (!w->files || !w->file_size || !g->order || g->meta.failed) { qx_err_set(g->e, "%s: out of memory", out); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (k = 0; k < w->n_files; ++k) w->files[k].fd = -1;
    if (!g->single && !qx_is_dir(out)) {
        if (mkdir(out, 0777) != 0) {
            qx_err_set(g->e, "%s: cannot create the directory: %s", out, strerror(errno));
            return QUAROT_ERR_IO;
        }
        w->made_dir = (char*)malloc(g->olen + 1);
        if (w->made_dir) strcpy(w->made_dir, out);
    }
    return QUAROT_OK;
}

/* File k's header into g->hdr: its tensors in file order (g->order[0..*m)) with offsets relative to
   the data, padded with spaces to 8 bytes; *pos = the data's size. */
static void qx__stw_header(qx__stw_begin* g, int k, int64_t* m, uint64_t* pos) {
    qx_st_writer* w = g->w;
    qx_sb* hdr = &g->hdr;
    int64_t i, j;
    *m = 0;
    *pos = 0;
    for (i = 0; i < w->n; ++i) if (w->t[i].file == k) g->order[(*m)++] = &w->t[i];
    qsort(g->order, (size_t)*m, sizeof *g->order, qx__went_file_cmp);
    hdr->len = 0;
    qx_sb_puts(hdr, "{\"__metadata__\":");
    qx_sb_put(hdr, g->meta.p, g->meta.len);
    for (j = 0; j < *m; ++j) {
        qx__st_went* t = g->order[j];
        int d;
        qx_sb_puts(hdr, ",");
        qx_sb_json_string(hdr, t->name, strlen(t->name));
        qx_sb_printf(hdr, ":{\"dtype\":\"%s\",\"shape\":[", qx__st_dtype_name(t->dt));
        if (t->shape)
            for (d = 0; d < t->rank; ++d) qx_sb_printf(hdr, "%lld%s", (long long)t->shape[d], d + 1 < t->rank ? "," : "");
        else
            for (d = t->n_dims - 1; d >= 0; --d) qx_sb_printf(hdr, "%lld%s", (long long)t->ne[d], d ? "," : "");
        qx_sb_printf(hdr, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)*pos, (unsigned long long)(*pos + t->nbytes));
        t->off = *pos;                      /* relative for now */
        *pos += t->nbytes;
    }
    qx_sb_puts(hdr, "}");
    while (!hdr->failed && hdr->len % 8) qx_sb_put(hdr, " ", 1);
}

/* File k: its header (checked as the reader would), the absolute offsets, the temporary opened with
   the length and header written. */
static quarot_result qx__stw_begin_file(qx__stw_begin* g, int k) {
    qx_st_writer* w = g->w;
    const char* out = g->out;
    qx_err* e = g->e;
    int64_t m, j;
    uint64_t pos, hlen;
    unsigned char len8[8];
    char fname[64];
    char* path;
    quarot_result r;
    qx__stw_header(g, k, &m, &pos);
    if (g->hdr.failed) { qx_err_set(e, "%s: out of memory", out); return QUAROT_ERR_OUT_OF_MEMORY; }
    {   /* never write a header the reader would refuse (e.g. a name that is not UTF-8) */
        qx_json_doc chk;
        qx_json_opts jo;
        memset(&jo, 0, sizeof jo);
        jo.max_depth = 8;
        jo.max_size = (size_t)QX_ST_MAX_HEADER;
        if ((r = qx_json_parse(g->hdr.p, g->hdr.len, out, &jo, &chk, e)) != QUAROT_OK) return r;
        qx_json_doc_free(&chk);
    }
    hlen = g->hdr.len;
    if (hlen > QX_ST_MAX_HEADER) { qx_err_set(e, "%s: header of %llu bytes is too large", out, (unsigned long long)hlen); return QUAROT_ERR_OVERFLOW; }
    for (j = 0; j < m; ++j) g->order[j]->off += 8 + hlen;
    w->file_size[k] = 8 + hlen + pos;
    if (w->n_files == 1) snprintf(fname, sizeof fname, "model.safetensors");
    else snprintf(fname, sizeof fname, "model-%05d-of-%05d.safetensors", k + 1, w->n_files);
    path = g->single ? NULL : qx_path_join(out, fname);
    if (!g->single && !path) { qx_err_set(e, "%s: out of memory", out); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = qx_out_begin(&w->files[k], g->single ? out : path, g->force, e);
    free(path);
    if (r != QUAROT_OK) return r;
    if (g->opts && g->opts->direct) qx_out_direct(&w->files[k], w->file_size[k]);
    if (g->opts) w->files[k].env = g->opts->env;
    for (j = 0; j < 8; ++j) len8[j] = (unsigned char)(hlen >> (8 * j));
    if ((r = qx_out_pwrite(&w->files[k], len8, 8, 0, e)) != QUAROT_OK) return r;
    return qx_out_pwrite(&w->files[k], g->hdr.p, g->hdr.len, 8, e);
}

/* The shards' index (model.safetensors.index.json), its text kept for finish. */
static quarot_result qx__stw_begin_index(qx__stw_begin* g) {
    qx_st_writer* w = g->w;
    const char* out = g->out;
    qx_sb ix;
    uint64_t total = 0;
    int64_t i;
    char* p;
    quarot_result r;
    memset(&ix, 0, sizeof ix);
    for (i = 0; i < w->n; ++i) total += w->t[i].nbytes;
    qx_sb_printf(&ix, "{\n  \"metadata\": {\n    \"total_size\": %llu\n  },\n  \"weight_map\": {", (unsigned long long)total);
    for (i = 0; i < w->n; ++i) {
        qx_sb_puts(&ix, i ? ",\n    " : "\n    ");
        qx_sb_json_string(&ix, w->t[i].name, strlen(w->t[i].name));
        qx_sb_printf(&ix, ": \"model-%05d-of-%05d.safetensors\"", w->t[i].file + 1, w->n_files);
    }
    qx_sb_puts(&ix, "\n  }\n}\n");
    w->extra_text[w->n_extra] = ix.p;
    w->extra_len[w->n_extra] = ix.len;
    w->extra[w->n_extra].fd = -1;
    if (ix.failed) { w->n_extra++; qx_err_set(g->e, "%s: out of memory", out); return QUAROT_ERR_OUT_OF_MEMORY; }
    p = qx_path_join(out, "model.safetensors.index.json");
    w->n_extra++;
    if (!p) { qx_err_set(g->e, "%s: out of memory", out); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = qx_out_begin(&w->extra[w->n_extra - 1], p, g->force, g->e);
    free(p);
    return r;
}

/* config.json (opts->config_json) beside the weights, its text kept for finish. */
static quarot_result qx__stw_begin_config(qx__stw_begin* g) {
    qx_st_writer* w = g->w;
    const char* json = g->opts->config_json;
    char* p = qx_path_join(g->out, "config.json");
    size_t cl = strlen(json);
    quarot_result r;
    w->extra[w->n_extra].fd = -1;
    w->extra_text[w->n_extra] = (char*)malloc(cl + 1);
    w->n_extra++;
    if (!p || !w->extra_text[w->n_extra - 1]) { free(p); qx_err_set(g->e, "%s: out of memory", g->out); return QUAROT_ERR_OUT_OF_MEMORY; }
    memcpy(w->extra_text[w->n_extra - 1], json, cl + 1);
    w->extra_len[w->n_extra - 1] = cl;
    r = qx_out_begin(&w->extra[w->n_extra - 1], p, g->force, g->e);
    free(p);
    return r;
}

/* Expert e's name of stacked tensor `name`: malloc'ed, NULL when out of memory. */
static char* qx__st_part_name(const char* name, int64_t e) {
    size_t n = strlen(name) + 24;
    char* out = (char*)malloc(n);
    if (out && !qx_hf_expert_name(name, e, out, n)) { free(out); out = NULL; }
    return out;
}

/* 1 when plan entry p is a 3-D stacked expert tensor (a written shape, if recorded, its own sizes). */
static int qx__plan_stacked(const qx_tensor_plan* p) {
    const char* x = p->name ? strstr(p->name, ".experts.") : NULL;
    if (!x || p->n_dims != 3 || p->ne[2] < 2 || !qx__expert_proj(x + 9)) return 0;
    return !p->shape || (p->rank == 3 && p->shape[0] == p->ne[2] && p->shape[1] == p->ne[1] && p->shape[2] == p->ne[0]);
}

/* The plan with every 3-D stacked expert tensor replaced by its experts' 2-D tensors (recorded in
   w->stk); *names (the new names, to free with the array) and *n_out. */
static quarot_result qx__stw_unstack(qx_st_writer* w, const qx_tensor_plan* plan, int64_t n, qx_tensor_plan** out,
                                     int64_t* n_out, char*** names, int64_t* n_names, const char* fname, qx_err* e) {
    int64_t i, m = 0, x, nn = 0, ns = 0;
    *out = NULL;
    *names = NULL;
    *n_names = 0;
    for (i = 0; i < n; ++i) {
        const qx_tensor_plan* p = &plan[i];
        if (qx__plan_stacked(p)) {
            if (p->ne[2] > (1 << 16)) { qx_err_set(e, "%s: tensor \"%s\": too many experts", fname, p->name); return QUAROT_ERR_INVALID_ARGUMENT; }
            m += p->ne[2];
            ++ns;
        } else {
            ++m;
        }
    }
    *n_out = m;
    if (!ns) return QUAROT_OK;
    *out = (qx_tensor_plan*)calloc((size_t)m, sizeof **out);
    *names = (char**)calloc((size_t)(m - (n - ns)), sizeof **names);
    w->stk = (qx__st_stack*)calloc((size_t)ns, sizeof *w->stk);
    if (!*out || !*names || !w->stk) { qx_err_set(e, "%s: out of memory", fname); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (i = 0, m = 0; i < n; ++i) {
        const qx_tensor_plan* p = &plan[i];
        qx__st_stack* k;
        if (!qx__plan_stacked(p)) {
            (*out)[m++] = *p;
            continue;
        }
        k = &w->stk[w->n_stk];
        if (!(k->name = (char*)malloc(strlen(p->name) + 1))) { qx_err_set(e, "%s: out of memory", fname); return QUAROT_ERR_OUT_OF_MEMORY; }
        strcpy(k->name, p->name);
        k->n_exp = p->ne[2];
        k->rows = p->ne[1];
        w->n_stk++;
        for (x = 0; x < k->n_exp; ++x) {
            qx_tensor_plan* q = &(*out)[m++];
            *q = *p;
            q->n_dims = 2;
            q->ne[2] = 1;
            q->rank = 2;
            q->shape = NULL;
            if (!((*names)[nn] = qx__st_part_name(k->name, x))) { qx_err_set(e, "%s: out of memory", fname); return QUAROT_ERR_OUT_OF_MEMORY; }
            q->name = (*names)[nn++];
            *n_names = nn;
        }
    }
    return QUAROT_OK;
}

/* Check the plan, lay out the shards, prepare the metadata and the directory, then begin each
   file (header written), the index (shards) and config (directory output). A 3-D expert tensor is
   planned as its experts' tensors (qx__stw_unstack). */
quarot_result qx_st_writer_begin(qx_st_writer** wp, const char* out, const qx_tensor_plan* plan, int64_t n,
                                 const qx_st_write_opts* opts, qx_err* e) {
    qx__stw_begin g;
    int k;
    quarot_result r;
    if (!wp || !out || !out[0] || n < 0 || (n && !plan)) return QUAROT_ERR_INVALID_ARGUMENT;
    *wp = NULL;
    memset(&g, 0, sizeof g);
    g.out = out;
    g.olen = strlen(out);
    g.single = g.olen > 12 && strcmp(out + g.olen - 12, ".safetensors") == 0;
    g.force = opts && opts->force;
    g.opts = opts;
    g.e = e;
    g.w = (qx_st_writer*)calloc(1, sizeof *g.w);
    if (!g.w) {
        qx_err_set(e, "%s: out of memory", out);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    g.w->direct_mode = opts ? opts->direct_mode : NULL;
    for (k = 0; opts && opts->rename && k < opts->n_rename; ++k) {
        if (k >= 4 || strlen(opts->rename[2 * k]) >= 48 || strlen(opts->rename[2 * k + 1]) >= 48) {
            qx_st_writer_abort(g.w);
            qx_err_set(e, "%s: at most 4 renames of prefixes under 48 characters", out);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
        strcpy(g.w->ren[k][0], opts->rename[2 * k]);
        strcpy(g.w->ren[k][1], opts->rename[2 * k + 1]);
        g.w->n_ren = k + 1;
    }
    {
        qx_tensor_plan* up = NULL;
        char** names = NULL;
        int64_t nu = n, nn = 0, i;
        r = qx__stw_unstack(g.w, plan, n, &up, &nu, &names, &nn, out, e);
        if (r == QUAROT_OK && !(g.w->t = (qx__st_went*)calloc((size_t)(nu ? nu : 1), sizeof *g.w->t))) {
            qx_err_set(e, "%s: out of memory", out);
            r = QUAROT_ERR_OUT_OF_MEMORY;
        }
        if (r == QUAROT_OK) r = qx__stw_plan(&g, up ? up : plan, nu);
        for (i = 0; i < nn; ++i) free(names[i]);
        free(names);
        free(up);
    }
    if (r == QUAROT_OK) r = qx__stw_shards(&g);
    if (r == QUAROT_OK) r = qx__stw_prepare(&g);
    for (k = 0; r == QUAROT_OK && k < g.w->n_files; ++k) r = qx__stw_begin_file(&g, k);
    if (r == QUAROT_OK && !g.single && g.w->n_files > 1) r = qx__stw_begin_index(&g);
    if (r == QUAROT_OK && !g.single && opts && opts->config_json) r = qx__stw_begin_config(&g);
    if (r == QUAROT_OK && !g.single && g.force)
        g.w->stale = qx_path_join(out, g.w->n_files > 1 ? "model.safetensors" : "model.safetensors.index.json");
    qx_sb_free(&g.meta);
    qx_sb_free(&g.hdr);
    free(g.order);
    if (r != QUAROT_OK) {
        qx_st_writer_abort(g.w);
        return r;
    }
    *wp = g.w;
    return QUAROT_OK;
}

/* The planned tensor `name` (binary search in natural order), or NULL. */
static qx__st_went* qx__st_find(qx_st_writer* w, const char* name) {
    int64_t lo = 0, hi = w->n - 1;
    char* fn = w->n_ren ? qx__st_file_name(w, name) : NULL;
    qx__st_went* hit = NULL;
    if (w->n_ren && !fn) return NULL;
    if (fn) name = fn;
    while (lo <= hi) {                       /* entries are sorted by qx_name_cmp */
        int64_t mid = lo + (hi - lo) / 2;
        int c = qx_name_cmp(name, w->t[mid].name);
        if (c == 0) { hit = &w->t[mid]; break; }
        if (c < 0) hi = mid - 1; else lo = mid + 1;
    }
    free(fn);
    return hit;
}

/* The stacked expert tensor planned as `name`, or NULL. */
static const qx__st_stack* qx__st_find_stack(const qx_st_writer* w, const char* name) {
    int64_t i;
    for (i = 0; i < w->n_stk; ++i)
        if (strcmp(w->stk[i].name, name) == 0) return &w->stk[i];
    return NULL;
}

/* Rows [row0, row0 + n) of a stacked tensor's t (rows of all experts in order; t 3-D whole when
   whole) to its experts' tensors. */
static quarot_result qx__st_put_stack(qx_st_writer* w, const qx__st_stack* k, int64_t row0, const quarot_tensor* t, int whole,
                                      int64_t head_dim, int to_interleaved, qx_err* e) {
    int64_t done = 0, n = whole ? t->ne[1] * t->ne[2] : t->ne[1];
    quarot_result r = QUAROT_OK;
    if (whole && (t->ne[2] != k->n_exp || t->ne[1] != k->rows || t->ne[3] != 1)) {
        qx_err_set(e, "%s: tensor \"%s\": shape differs from the plan's %lld experts of %lld rows", w->files[0].path, k->name,
                   (long long)k->n_exp, (long long)k->rows);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    if (row0 + n > k->n_exp * k->rows) {
        qx_err_set(e, "%s: tensor \"%s\": rows beyond its %lld experts", w->files[0].path, k->name, (long long)k->n_exp);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    while (r == QUAROT_OK && done < n) {
        const int64_t g = row0 + done, x = g / k->rows, local = g % k->rows;
        const int64_t take = whole ? k->rows : (n - done < k->rows - local ? n - done : k->rows - local);
        quarot_tensor v = *t;
        char* part = qx__st_part_name(k->name, x);
        if (!part) { qx_err_set(e, "%s: out of memory", w->files[0].path); return QUAROT_ERR_OUT_OF_MEMORY; }
        if (whole) {
            v.data = (char*)t->data + (size_t)x * t->nb[2];
        } else {
            v.data = (char*)t->data + (size_t)done * t->nb[1];
            v.ne[1] = take;
        }
        v.ne[2] = 1;
        v.nb[3] = v.nb[2] = v.nb[1] * (size_t)v.ne[1];
        if (whole || (local == 0 && take == k->rows)) {
            r = qx_st_writer_put_permuted(w, part, &v, head_dim, to_interleaved, e);
        } else {
            r = qx_st_writer_put_rows(w, part, local, &v, e);
        }
        free(part);
        done += take;
    }
    return r;
}

quarot_result qx_st_writer_put_permuted(qx_st_writer* w, const char* name, const quarot_tensor* t,
                                        int64_t head_dim, int to_interleaved, qx_err* e) {
    const qx__st_stack* k;
    qx__st_went* p;
    quarot_result r;
    int d;
    if (!w || !name || !t) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((k = qx__st_find_stack(w, name)) != NULL) return qx__st_put_stack(w, k, 0, t, 1, head_dim, to_interleaved, e);
    p = qx__st_find(w, name);
    if (!p) { qx_err_set(e, "%s: tensor \"%s\" is not in the plan", w->files[0].path, name); return QUAROT_ERR_NOT_FOUND; }
    if (p->written) { qx_err_set(e, "%s: tensor \"%s\" written twice", w->files[p->file].path, name); return QUAROT_ERR_STATE; }
    for (d = 0; d < QUAROT_MAX_DIMS; ++d)
        if (t->ne[d] != p->ne[d]) {
            qx_err_set(e, "%s: tensor \"%s\": shape [%lld, %lld, %lld, %lld] differs from the plan's [%lld, %lld, %lld, %lld] (ne order)",
                       w->files[p->file].path, name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)t->ne[3], (long long)p->ne[0], (long long)p->ne[1], (long long)p->ne[2], (long long)p->ne[3]);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    r = qx_out_tensor(&w->files[p->file], p->off, p->dt, t, head_dim, to_interleaved, name, e);
    if (r == QUAROT_OK) p->written = 1;
    return r;
}

quarot_result qx_st_writer_put(qx_st_writer* w, const char* name, const quarot_tensor* t, qx_err* e) {
    return qx_st_writer_put_permuted(w, name, t, 0, 0, e);
}

quarot_result qx_st_writer_put_rows(qx_st_writer* w, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e) {
    const qx__st_stack* k;
    qx__st_went* p;
    quarot_result r;
    if (!w || !name || !t) return QUAROT_ERR_INVALID_ARGUMENT;
    if ((k = qx__st_find_stack(w, name)) != NULL) {
        if (t->ne[2] != 1 || t->ne[3] != 1 || row0 < 0 || t->ne[1] < 1) return QUAROT_ERR_INVALID_ARGUMENT;
        return qx__st_put_stack(w, k, row0, t, 0, 0, 0, e);
    }
    p = qx__st_find(w, name);
    if (!p) { qx_err_set(e, "%s: tensor \"%s\" is not in the plan", w->files[0].path, name); return QUAROT_ERR_NOT_FOUND; }
    if (p->written) { qx_err_set(e, "%s: tensor \"%s\" written twice", w->files[p->file].path, name); return QUAROT_ERR_STATE; }
    r = qx_out_tensor_rows(&w->files[p->file], p->off, p->dt, p->ne, &p->rows_done, row0, t, name, e);
    if (r == QUAROT_OK && p->rows_done == qx_out_rows(p->ne)) p->written = 1;
    return r;
}

quarot_result qx_st_writer_finish(qx_st_writer* w, qx_err* e) {
    int64_t i;
    int k;
    quarot_result r = QUAROT_OK;
    if (!w) return QUAROT_ERR_INVALID_ARGUMENT;
    for (i = 0; i < w->n; ++i)               /* a file with a hole would be a silently wrong model */
        if (!w->t[i].written) {
            qx_err_set(e, "%s: tensor \"%s\" was planned but never written", w->files[w->t[i].file].path, w->t[i].name);
            r = QUAROT_ERR_STATE;
            goto done;
        }
    /* the small texts (index, config) are written only now, then everything is synced */
    for (k = 0; k < w->n_extra && r == QUAROT_OK; ++k) {
        r = qx_out_pwrite(&w->extra[k], w->extra_text[k], w->extra_len[k], 0, e);
        if (r == QUAROT_OK) r = qx_out_sync(&w->extra[k], w->extra_len[k], e);
    }
    for (k = 0; k < w->n_files && r == QUAROT_OK; ++k) r = qx_out_sync(&w->files[k], w->file_size[k], e);
    if (w->direct_mode && r == QUAROT_OK) {   /* O_DIRECT (1) only if every file got it */
        *w->direct_mode = w->n_files ? w->files[0].direct_mode : 0;
        for (k = 1; k < w->n_files; ++k)
            if (w->files[k].direct_mode != 1) *w->direct_mode = w->files[k].direct_mode;
    }
    /* everything is on disk: the shards first, then config and index (readers look for those) */
    for (k = 0; k < w->n_files && r == QUAROT_OK; ++k) r = qx_out_publish(&w->files[k], e);
    for (k = w->n_extra - 1; k >= 0 && r == QUAROT_OK; --k) r = qx_out_publish(&w->extra[k], e);
    if (r == QUAROT_OK && w->stale) (void)remove(w->stale);
    if (r == QUAROT_OK) { free(w->made_dir); w->made_dir = NULL; }   /* keep the new directory */
done:
    qx_st_writer_abort(w);
    return r;
}

int qx_plan_rank(const int64_t ne[QUAROT_MAX_DIMS]) {
    int d, n = 1;
    for (d = 0; d < QUAROT_MAX_DIMS; ++d)
        if (ne[d] > 1) n = d + 1;
    return n;
}

qx_tensor_plan* qx_store_plan(const qx_store* s, quarot_dtype dt, int64_t extra) {
    qx_tensor_plan* plan = (qx_tensor_plan*)calloc((size_t)(s->count + extra > 0 ? s->count + extra : 1), sizeof *plan);
    int64_t i;
    if (!plan) return NULL;
    for (i = 0; i < s->count; ++i) {
        const quarot_tensor* t = &s->items[i].t;
        plan[i].name = s->items[i].name;
        plan[i].dtype = dt != QUAROT_DTYPE_DEFAULT ? dt : t->dtype;
        memcpy(plan[i].ne, t->ne, sizeof plan[i].ne);
        plan[i].n_dims = qx_plan_rank(t->ne);
        if (!qx_store_get_shape(s, plan[i].name, t, &plan[i].rank, &plan[i].shape)) plan[i].shape = NULL;
    }
    return plan;
}

quarot_result qx_st_save(const qx_store* s, const char* out, const qx_st_save_opts* o, qx_err* e) {
    qx_tensor_plan* plan;
    qx_st_write_opts wo;
    qx_st_writer* w = NULL;
    qx_sb cfg;
    size_t olen;
    int64_t i, hd = 0;
    int single, perm;
    quarot_result r;
    if (!s || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    olen = strlen(out);
    single = olen > 12 && strcmp(out + olen - 12, ".safetensors") == 0;
    memset(&cfg, 0, sizeof cfg);
    memset(&wo, 0, sizeof wo);
    /* interleaved RoPE rows go back to the half-split layout (see the header) */
    perm = s->config.rope_interleaved && strcmp(s->config.arch, "opt") != 0;
    if (perm) {
        hd = s->config.head_dim ? s->config.head_dim : (s->config.n_heads ? s->config.hidden / s->config.n_heads : 0);
        if (hd < 2 || hd % 2 || s->config.qk_norm) {
            qx_err_set(e, "%s: cannot convert this interleaved-RoPE model (head_dim %lld%s) to the Hugging Face layout", out,
                       (long long)hd, s->config.qk_norm ? ", q/k norms" : "");
            return QUAROT_ERR_UNSUPPORTED;
        }
    }
    plan = qx_store_plan(s, o ? o->dtype : QUAROT_DTYPE_DEFAULT, 0);
    if (!plan) { qx_err_set(e, "%s: out of memory", out); return QUAROT_ERR_OUT_OF_MEMORY; }
    wo.force = o ? o->force : 0;
    wo.shard_bytes = o ? o->shard_bytes : 0;
    wo.metadata_json = (const char*)qx_store_get_blob(s, "safetensors.metadata", NULL);
    wo.n_rename = qx_hf_file_renames(s, &wo.rename);
    if (!single && s->config.arch[0]) {
        r = qx_hf_config_write(s, &cfg, e);
        if (r != QUAROT_OK) { free(plan); qx_sb_free(&cfg); return r; }
        wo.config_json = cfg.p;
    }
    r = qx_st_writer_begin(&w, out, plan, s->count, &wo, e);
    free(plan);
    qx_sb_free(&cfg);
    if (r != QUAROT_OK) return r;
    /* tensors in store order (the writer places them); q/k rows back to half-split when needed */
    for (i = 0; i < s->count && r == QUAROT_OK; ++i) {
        const char* name = s->items[i].name;
        size_t nl = strlen(name);
        int qk = perm && strncmp(name, "model.layers.", 13) == 0 && nl > 22 &&
                 (strstr(name, ".self_attn.q_proj.") || strstr(name, ".self_attn.k_proj."));
        r = qx_st_writer_put_permuted(w, name, &s->items[i].t, qk ? hd : 0, 0, e);
    }
    if (r != QUAROT_OK) { qx_st_writer_abort(w); return r; }
    return qx_st_writer_finish(w, e);
}
