/* qx_store.c - see qx_store.h. A flat array with linear lookup: models have at most a few thousand
   tensors and lookups happen once per tensor per pass. */
#include "support/qx_store.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qx_err_set(qx_err* e, const char* fmt, ...) {
    va_list ap;
    char* c;
    if (!e) return;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    for (c = e->msg; *c; ++c)           /* one line, whatever names from a file contain */
        if ((unsigned char)*c < 0x20) *c = '?';
}

void qx_store_init(qx_store* s) { memset(s, 0, sizeof *s); }

void qx_store_free(qx_store* s) {
    int64_t i;
    if (!s) return;
    for (i = 0; i < s->count; ++i) {
        free(s->items[i].name);
        free(s->items[i].owned);
    }
    free(s->items);
    for (i = 0; i < s->n_blobs; ++i) {
        free(s->blobs[i].key);
        free(s->blobs[i].data);
    }
    free(s->blobs);
    for (i = s->n_cleanups - 1; i >= 0; --i) s->cleanups[i].fn(s->cleanups[i].arg);   /* after the views are gone */
    free(s->cleanups);
    memset(s, 0, sizeof *s);
}

quarot_result qx_store_set_blob(qx_store* s, const char* key, const void* data, size_t len) {
    int64_t i;
    char* copy;
    if (!s || !key || (len && !data) || len == SIZE_MAX) return QUAROT_ERR_INVALID_ARGUMENT;
    copy = (char*)malloc(len + 1);
    if (!copy) return QUAROT_ERR_OUT_OF_MEMORY;
    if (len) memcpy(copy, data, len);
    copy[len] = '\0';
    for (i = 0; i < s->n_blobs; ++i) {
        if (strcmp(s->blobs[i].key, key) != 0) continue;
        free(s->blobs[i].data);
        s->blobs[i].data = copy;
        s->blobs[i].len = len;
        return QUAROT_OK;
    }
    {
        qx_blob* b = (qx_blob*)realloc(s->blobs, (size_t)(s->n_blobs + 1) * sizeof *b);
        size_t klen = strlen(key);
        char* k = (char*)malloc(klen + 1);
        if (!b || !k) { if (b) s->blobs = b; free(k); free(copy); return QUAROT_ERR_OUT_OF_MEMORY; }
        memcpy(k, key, klen + 1);
        s->blobs = b;
        b[s->n_blobs].key = k;
        b[s->n_blobs].data = copy;
        b[s->n_blobs].len = len;
        s->n_blobs++;
    }
    return QUAROT_OK;
}

const void* qx_store_get_blob(const qx_store* s, const char* key, size_t* len) {
    int64_t i;
    if (len) *len = 0;
    if (!s || !key) return NULL;
    for (i = 0; i < s->n_blobs; ++i) {
        if (strcmp(s->blobs[i].key, key) != 0) continue;
        if (len) *len = s->blobs[i].len;
        return s->blobs[i].data;
    }
    return NULL;
}

/* ---- weight grids: blob "quarot.grid:<name>" = {i32 bits, i32 0, i64 rows, cols, group} + scales ---- */

typedef struct qx__grid_head {
    int32_t bits, zero;
    int64_t rows, cols, group;
} qx__grid_head;

static char* qx__grid_key(const char* weight) {
    size_t a = strlen(QX_GRID_PREFIX), b = strlen(weight);
    char* k = (char*)malloc(a + b + 1);
    if (!k) return NULL;
    memcpy(k, QX_GRID_PREFIX, a);
    memcpy(k + a, weight, b + 1);
    return k;
}

quarot_result qx_store_set_grid(qx_store* s, const char* weight, int bits, int64_t rows, int64_t cols, int64_t group,
                                const float* scales) {
    qx__grid_head h;
    char *key, *buf;
    size_t n_sc, bytes;
    quarot_result r;
    if (!s || !weight || !scales || bits < 2 || bits > 8 || rows <= 0 || cols <= 0 || group <= 0 || cols % group != 0 ||
        (uint64_t)rows > ((uint64_t)1 << 40) / (uint64_t)(cols / group))
        return QUAROT_ERR_INVALID_ARGUMENT;
    n_sc = (size_t)(rows * (cols / group));
    bytes = sizeof h + n_sc * sizeof(float);
    key = qx__grid_key(weight);
    buf = (char*)malloc(bytes);
    if (!key || !buf) { free(key); free(buf); return QUAROT_ERR_OUT_OF_MEMORY; }
    memset(&h, 0, sizeof h);
    h.bits = bits;
    h.rows = rows;
    h.cols = cols;
    h.group = group;
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, scales, n_sc * sizeof(float));
    r = qx_store_set_blob(s, key, buf, bytes);
    free(key);
    free(buf);
    return r;
}

int qx_store_get_grid(const qx_store* s, const char* weight, qx_grid* g) {
    qx__grid_head h;
    size_t len = 0;
    char* key;
    const char* b;
    if (!s || !weight || !g || s->n_blobs == 0 || !(key = qx__grid_key(weight))) return 0;
    b = (const char*)qx_store_get_blob(s, key, &len);
    free(key);
    if (!b || len < sizeof h) return 0;
    memcpy(&h, b, sizeof h);
    if (h.bits < 2 || h.bits > 8 || h.rows <= 0 || h.cols <= 0 || h.group <= 0 || h.cols % h.group != 0 ||
        (uint64_t)h.rows > ((uint64_t)1 << 40) / (uint64_t)(h.cols / h.group) ||
        len != sizeof h + (size_t)(h.rows * (h.cols / h.group)) * sizeof(float))
        return 0;
    g->bits = h.bits;
    g->rows = h.rows;
    g->cols = h.cols;
    g->group = h.group;
    g->scales = (const float*)(const void*)(b + sizeof h);   /* the blob is a malloc'ed copy: aligned */
    return 1;
}

void qx_store_remove_grid(qx_store* s, const char* weight) {
    int64_t i;
    char* key;
    if (!s || !weight || s->n_blobs == 0 || !(key = qx__grid_key(weight))) return;
    for (i = 0; i < s->n_blobs; ++i) {
        if (strcmp(s->blobs[i].key, key) != 0) continue;
        free(s->blobs[i].key);
        free(s->blobs[i].data);
        memmove(&s->blobs[i], &s->blobs[i + 1], (size_t)(s->n_blobs - i - 1) * sizeof s->blobs[0]);
        s->n_blobs--;
        break;
    }
    free(key);
}

/* ---- written shapes: blob "quarot.shape:<name>" = {i64 rank, i64 shape[rank]} ---- */

void qx_shape_fold(int rank, const int64_t* shape, int64_t ne[QUAROT_MAX_DIMS]) {
    int d;
    for (d = 0; d < QUAROT_MAX_DIMS; ++d) ne[d] = 1;
    if (rank <= QUAROT_MAX_DIMS) {
        for (d = 0; d < rank; ++d) ne[d] = shape[rank - 1 - d];
        return;
    }
    ne[3] = shape[0];
    ne[2] = shape[1];
    ne[1] = shape[2];
    for (d = 3; d < rank; ++d) ne[0] *= shape[d];
}

static char* qx__shape_key(const char* name) {
    size_t a = strlen(QX_SHAPE_PREFIX), b = strlen(name);
    char* k = (char*)malloc(a + b + 1);
    if (!k) return NULL;
    memcpy(k, QX_SHAPE_PREFIX, a);
    memcpy(k + a, name, b + 1);
    return k;
}

quarot_result qx_store_set_shape(qx_store* s, const char* name, int rank, const int64_t* shape) {
    int64_t buf[QX_MAX_RANK + 1];
    char* key;
    quarot_result r;
    if (!s || !name || rank < 0 || rank > QX_MAX_RANK || (rank && !shape)) return QUAROT_ERR_INVALID_ARGUMENT;
    buf[0] = rank;
    if (rank) memcpy(buf + 1, shape, (size_t)rank * sizeof *shape);
    if (!(key = qx__shape_key(name))) return QUAROT_ERR_OUT_OF_MEMORY;
    r = qx_store_set_blob(s, key, buf, (size_t)(rank + 1) * sizeof *buf);
    free(key);
    return r;
}

int qx_store_get_shape(const qx_store* s, const char* name, const quarot_tensor* t, int* rank, const int64_t** shape) {
    const int64_t* b;
    int64_t ne[QUAROT_MAX_DIMS];
    size_t len = 0;
    char* key;
    int d;
    if (!s || !name || !t || s->n_blobs == 0 || !(key = qx__shape_key(name))) return 0;
    b = (const int64_t*)qx_store_get_blob(s, key, &len);   /* a malloc'ed copy: aligned */
    free(key);
    if (!b || len < sizeof *b || b[0] < 0 || b[0] > QX_MAX_RANK || len != (size_t)(b[0] + 1) * sizeof *b) return 0;
    for (d = 0; d < (int)b[0]; ++d)
        if (b[1 + d] < 1) return 0;
    qx_shape_fold((int)b[0], b + 1, ne);
    for (d = 0; d < QUAROT_MAX_DIMS; ++d)
        if (ne[d] != t->ne[d]) return 0;
    if (rank) *rank = (int)b[0];
    if (shape) *shape = b + 1;
    return 1;
}

quarot_result qx_store_rename(qx_store* s, int64_t i, const char* name) {
    static const char* const prefixes[] = {QX_GRID_PREFIX, QX_SHAPE_PREFIX};
    char* nn;
    int64_t b;
    size_t k;
    if (!s || !name || i < 0 || i >= s->count) return QUAROT_ERR_INVALID_ARGUMENT;
    if (qx_store_find(s, name)) return QUAROT_ERR_INVALID_ARGUMENT;
    for (k = 0; k < sizeof prefixes / sizeof prefixes[0]; ++k) {   /* the records keyed by the old name */
        size_t pl = strlen(prefixes[k]);
        for (b = 0; b < s->n_blobs; ++b) {
            char* key;
            if (strncmp(s->blobs[b].key, prefixes[k], pl) != 0 || strcmp(s->blobs[b].key + pl, s->items[i].name) != 0) continue;
            if (!(key = (char*)malloc(pl + strlen(name) + 1))) return QUAROT_ERR_OUT_OF_MEMORY;
            memcpy(key, prefixes[k], pl);
            strcpy(key + pl, name);
            free(s->blobs[b].key);
            s->blobs[b].key = key;
            break;
        }
    }
    if (!(nn = (char*)malloc(strlen(name) + 1))) return QUAROT_ERR_OUT_OF_MEMORY;
    strcpy(nn, name);
    free(s->items[i].name);
    s->items[i].name = nn;
    return QUAROT_OK;
}

quarot_result qx_store_on_free(qx_store* s, void (*fn)(void* arg), void* arg) {
    qx_cleanup* c;
    if (!s || !fn) return QUAROT_ERR_INVALID_ARGUMENT;
    c = (qx_cleanup*)realloc(s->cleanups, (size_t)(s->n_cleanups + 1) * sizeof *c);
    if (!c) return QUAROT_ERR_OUT_OF_MEMORY;
    s->cleanups = c;
    c[s->n_cleanups].fn = fn;
    c[s->n_cleanups].arg = arg;
    s->n_cleanups++;
    return QUAROT_OK;
}

int64_t qx_rope_src_row(int64_t r, int64_t head_dim, int to_interleaved) {
    int64_t h = r / head_dim, k = r % head_dim, half = head_dim / 2;
    if (to_interleaved) return h * head_dim + (k % 2) * half + k / 2;
    return h * head_dim + 2 * (k % half) + k / half;
}

static int qx__isdigit(char c) { return c >= '0' && c <= '9'; }

int64_t qx_name_layer(const char* name, size_t* pos, size_t* len) {
    const char* p = name;
    while ((p = strstr(p, "layers.")) != NULL) {
        const char* q = p + 7;
        int64_t v = 0;
        int digits = 0;
        if (p == name || p[-1] == '.') {
            while (*q >= '0' && *q <= '9' && digits < 12) { v = v * 10 + (*q - '0'); ++q; ++digits; }
            if (digits > 0 && *q == '.') {
                if (pos) *pos = (size_t)(p + 7 - name);
                if (len) *len = (size_t)digits;
                return v;
            }
        }
        p += 7;
    }
    return -1;
}

int qx_name_cmp(const char* a, const char* b) {
    const char* p = a;
    const char* q = b;
    while (*p && *q) {
        if (qx__isdigit(*p) && qx__isdigit(*q)) {
            const char *p0, *q0;
            size_t lp, lq;
            int c;
            while (*p == '0') ++p;            /* compare digit runs by value: length, then digits */
            while (*q == '0') ++q;
            p0 = p; q0 = q;
            while (qx__isdigit(*p)) ++p;
            while (qx__isdigit(*q)) ++q;
            lp = (size_t)(p - p0); lq = (size_t)(q - q0);
            if (lp != lq) return lp < lq ? -1 : 1;
            c = memcmp(p0, q0, lp);
            if (c) return c < 0 ? -1 : 1;
        } else {
            if (*p != *q) return (unsigned char)*p < (unsigned char)*q ? -1 : 1;
            ++p; ++q;
        }
    }
    if (*p || *q) return *p ? 1 : -1;
    return strcmp(a, b);   /* equal up to leading zeros: fall back to byte order */
}

quarot_tensor* qx_store_find(const qx_store* s, const char* name) {
    int64_t i;
    if (!s || !name) return NULL;
    for (i = 0; i < s->count; ++i)
        if (strcmp(s->items[i].name, name) == 0) return &s->items[i].t;
    return NULL;
}

static quarot_result qx__append(qx_store* s, const char* name, const quarot_tensor* t, void* owned) {
    qx_entry* e;
    size_t len;
    if (s->count == s->cap) {
        int64_t cap = s->cap ? s->cap * 2 : 64;
        qx_entry* items = (qx_entry*)realloc(s->items, (size_t)cap * sizeof *items);
        if (!items) return QUAROT_ERR_OUT_OF_MEMORY;
        s->items = items;
        s->cap = cap;
    }
    e = &s->items[s->count];
    len = strlen(name);
    e->name = (char*)malloc(len + 1);
    if (!e->name) return QUAROT_ERR_OUT_OF_MEMORY;
    memcpy(e->name, name, len + 1);
    e->t = *t;
    e->owned = owned;
    s->count++;
    return QUAROT_OK;
}

quarot_result qx_store_add(qx_store* s, const char* name, quarot_dtype dt, int n_dims, const int64_t* ne,
                           const void* data, quarot_tensor** out) {
    quarot_tensor t;
    quarot_result r;
    size_t bytes;
    void* mem;
    if (!s || !name || !ne) return QUAROT_ERR_INVALID_ARGUMENT;
    if (qx_store_find(s, name)) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot_tensor_init(&t, NULL, dt, n_dims, ne);   /* checks the shape; data set below */
    if (r != QUAROT_OK) return r;
    bytes = quarot_tensor_nbytes(&t);
    if (bytes == 0) return QUAROT_ERR_OVERFLOW;
    mem = data ? malloc(bytes) : calloc(1, bytes);
    if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;
    if (data) memcpy(mem, data, bytes);
    t.data = mem;
    r = qx__append(s, name, &t, mem);
    if (r != QUAROT_OK) { free(mem); return r; }
    if (out) *out = &s->items[s->count - 1].t;
    return QUAROT_OK;
}

quarot_result qx_store_add_view(qx_store* s, const char* name, const quarot_tensor* view) {
    quarot_result r;
    if (!s || !name || !view) return QUAROT_ERR_INVALID_ARGUMENT;
    if (qx_store_find(s, name)) return QUAROT_ERR_INVALID_ARGUMENT;
    r = quarot_tensor_validate(view);
    if (r != QUAROT_OK) return r;
    return qx__append(s, name, view, NULL);
}

quarot_result qx_store_make_owned(qx_store* s, const char* name) {
    int64_t i;
    for (i = 0; i < s->count; ++i) {
        qx_entry* e = &s->items[i];
        size_t bytes;
        void* mem;
        if (strcmp(e->name, name) != 0) continue;
        if (e->owned) return QUAROT_OK;
        if (!quarot_tensor_is_contiguous(&e->t)) return QUAROT_ERR_SHAPE_MISMATCH;
        bytes = quarot_tensor_nbytes(&e->t);
        mem = malloc(bytes ? bytes : 1);
        if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;
        memcpy(mem, e->t.data, bytes);
        e->t.data = mem;
        e->owned = mem;
        return QUAROT_OK;
    }
    return QUAROT_ERR_NOT_FOUND;
}

int qx_store_remove(qx_store* s, const char* name) {
    int64_t i;
    for (i = 0; i < s->count; ++i) {
        if (strcmp(s->items[i].name, name) != 0) continue;
        free(s->items[i].name);
        free(s->items[i].owned);
        memmove(&s->items[i], &s->items[i + 1], (size_t)(s->count - i - 1) * sizeof s->items[0]);
        s->count--;
        return 1;
    }
    return 0;
}

quarot_result qx_store_clone(const qx_store* src, qx_store* dst) {
    int64_t i;
    qx_store_init(dst);
    dst->config = src->config;
    memcpy(dst->source_format, src->source_format, sizeof dst->source_format);
    for (i = 0; i < src->n_blobs; ++i) {
        quarot_result res = qx_store_set_blob(dst, src->blobs[i].key, src->blobs[i].data, src->blobs[i].len);
        if (res != QUAROT_OK) { qx_store_free(dst); return res; }
    }
    for (i = 0; i < src->count; ++i) {
        const qx_entry* e = &src->items[i];
        quarot_tensor* t;
        int64_t r, rows = quarot_tensor_nrows(&e->t);
        quarot_result res = qx_store_add(dst, e->name, e->t.dtype, QUAROT_MAX_DIMS, e->t.ne, NULL, &t);
        size_t row_bytes = (size_t)e->t.ne[0] * quarot_dtype_size(e->t.dtype);
        if (res != QUAROT_OK) { qx_store_free(dst); return res; }
        for (r = 0; r < rows; ++r) {   /* copy row by row: the source may be a strided view */
            int64_t i1 = r % e->t.ne[1], i2 = (r / e->t.ne[1]) % e->t.ne[2], i3 = r / (e->t.ne[1] * e->t.ne[2]);
            const char* from = (const char*)e->t.data + (size_t)i1 * e->t.nb[1] + (size_t)i2 * e->t.nb[2] + (size_t)i3 * e->t.nb[3];
            memcpy((char*)t->data + (size_t)r * row_bytes, from, row_bytes);
        }
    }
    return QUAROT_OK;
}

quarot_result qx_store_convert(qx_store* s, quarot_dtype dt) {
    int64_t i, r;
    for (i = 0; i < s->count; ++i) {
        qx_entry* e = &s->items[i];
        quarot_tensor nt;
        float* row;
        void* mem;
        size_t bytes;
        quarot_result res;
        if (e->t.dtype == dt) continue;
        res = quarot_tensor_init(&nt, NULL, dt, QUAROT_MAX_DIMS, e->t.ne);
        if (res != QUAROT_OK) return res;
        bytes = quarot_tensor_nbytes(&nt);
        mem = malloc(bytes);
        row = (float*)malloc((size_t)e->t.ne[0] * sizeof(float));
        if (!mem || !row) { free(mem); free(row); return QUAROT_ERR_OUT_OF_MEMORY; }
        nt.data = mem;
        for (r = 0; r < quarot_tensor_nrows(&e->t); ++r) {
            quarot_tensor_get_row_f32(&e->t, r, row);
            quarot_tensor_set_row_f32(&nt, r, row);
        }
        free(row);
        free(e->owned);
        e->owned = mem;
        e->t = nt;
    }
    return QUAROT_OK;
}
