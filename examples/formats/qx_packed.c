/* qx_packed.c - see qx_packed.h (the format's specification).

   Writing: the plan gives every tensor's stored form and size up front, so the data layout is fixed
   at begin: F32 tensors first, then F16/BF16, then U8 (each tensor aligned to its element size),
   natural name order inside each class. The header, which carries the online hook list that the
   rotation only completes at its end, is written at finish into space reserved before the data
   (padded with spaces, as safetensors allows); if it outgrows the reservation the data are moved up
   once, from the end backwards.

   Reading: strict JSON header, every tensor record checked alone (dtype, shape, byte size, inside
   the data section), then all together (sorted by offset they tile the data section), then the
   metadata keys and the relations between .qweight / .scales / .zeros, then the values (scales
   finite and >= 0, zeros and codes within range), last the hook list's binding to the weights
   (quarot.online.required, quarot.online.digest over the hook list and the data section). */
#include "formats/qx_packed.h"
#include "support/qx_file.h"
#include "support/qx_str.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QX__PK_CHUNK ((size_t)4 << 20)

/* ---- shared helpers ---- */

static int qx__pk_ends(const char* s, size_t n, const char* suf) {
    size_t k = strlen(suf);
    return n >= k && memcmp(s + n - k, suf, k) == 0;
}

static int qx__pk_packs_two(int bits) { return bits <= 4; }

/* Bytes of one row of `in` codes. */
static int64_t qx__pk_row_bytes(int bits, int64_t in) { return qx__pk_packs_two(bits) ? in / 2 : in; }

/* ---- writer ---- */

typedef struct qx__pk_item {
    char* name;               /* stored name */
    const char* dtype;        /* "F32", "F16", "BF16", "U8" */
    quarot_dtype dt;          /* float tensors */
    int n_dims;
    int64_t shape[QUAROT_MAX_DIMS];   /* outermost first, as in the header */
    uint64_t nbytes, off;     /* off: from the start of the data section */
    int written;
    int64_t rows_done;        /* qx_packed_writer_put_rows: rows written so far */
    int role;                 /* 0 plain, 1 qweight, 2 scales, 3 zeros */
    int64_t lin;              /* index into lin[] for roles 1-3 */
} qx__pk_item;

typedef struct qx__pk_lin {
    char* name;               /* "<base>.weight" */
    int64_t out, in, groups;
    int64_t it_q, it_s, it_z; /* items; it_z = -1 when symmetric */
    int written;
} qx__pk_lin;

struct qx_packed_writer {
    qx_out out;
    qx_packed_settings st;
    qx_packed_write_opts o;
    char *config, *online, *rotation;
    qx__pk_item* it;
    int64_t n_it;
    qx__pk_lin* lin;
    int64_t n_lin;
    uint64_t reserve;         /* bytes between the 8-byte length and the data section */
    uint64_t data_len;
    int online_required;      /* finish: quarot.online holds hooks */
    char online_digest[QX_DIGEST_LEN];   /* finish: quarot.online.digest */
};

void qx_packed_writer_abort(qx_packed_writer* w) {
    int64_t i;
    if (!w) return;
    qx_out_abort(&w->out);
    for (i = 0; i < w->n_it; ++i) free(w->it[i].name);
    for (i = 0; i < w->n_lin; ++i) free(w->lin[i].name);
    free(w->it);
    free(w->lin);
    free(w->config);
    free(w->online);
    free(w->rotation);
    free(w);
}

static char* qx__pk_strdup(const char* s) {
    size_t n = strlen(s ? s : "");
    char* p = (char*)malloc(n + 1);
    if (p) memcpy(p, s ? s : "", n + 1);
    return p;
}

/* Data order: larger element sizes first, then natural name order. */
static unsigned qx__pk_esize(const qx__pk_item* t) {
    return strcmp(t->dtype, "F32") == 0 ? 4u : strcmp(t->dtype, "U8") == 0 ? 1u : 2u;
}
static int qx__pk_order(const void* a, const void* b) {
    const qx__pk_item* x = *(const qx__pk_item* const*)a;
    const qx__pk_item* y = *(const qx__pk_item* const*)b;
    unsigned ex = qx__pk_esize(x), ey = qx__pk_esize(y);
    if (ex != ey) return ex > ey ? -1 : 1;
    return qx_name_cmp(x->name, y->name);
}

static void qx__pk_meta(qx_sb* b, const char* key, const char* val, int* first) {
    if (!*first) qx_sb_put(b, ",", 1);
    *first = 0;
    qx_sb_json_string(b, key, strlen(key));
    qx_sb_put(b, ":", 1);
    qx_sb_json_string(b, val, strlen(val));
}

static void qx__pk_meta_i(qx_sb* b, const char* key, long long v, int* first) {
    char t[32];
    snprintf(t, sizeof t, "%lld", v);
    qx__pk_meta(b, key, t, first);
}

static void qx__pk_meta_g(qx_sb* b, const char* key, double v, int* first) {
    char t[40];
    snprintf(t, sizeof t, "%.9g", v);
    qx__pk_meta(b, key, t, first);
}

/* The whole header JSON (without padding). */
static void qx__pk_header(const qx_packed_writer* w, qx_sb* b) {
    const qx_packed_settings* s = &w->st;
    int64_t i;
    int first = 1, d;
    qx_sb_puts(b, "{\"__metadata__\":{");
    qx__pk_meta(b, "format", QX_PACKED_FORMAT, &first);
    qx__pk_meta_i(b, "quarot.version", QX_PACKED_VERSION, &first);
    qx__pk_meta_i(b, "quarot.weight.bits", s->w_bits, &first);
    qx__pk_meta_i(b, "quarot.weight.group_size", (long long)s->w_group_size, &first);
    qx__pk_meta_i(b, "quarot.weight.asymmetric", s->w_asym, &first);
    qx__pk_meta(b, "quarot.weight.scale_dtype", s->scale_dtype == QUAROT_DTYPE_F32 ? "F32" : "F16", &first);
    qx__pk_meta(b, "quarot.weight.packing", "low_first", &first);
    qx__pk_meta(b, "quarot.weight.quantizer", s->w_quantizer[0] ? s->w_quantizer : "rtn", &first);
    qx__pk_meta_i(b, "quarot.act.bits", s->a_bits, &first);
    qx__pk_meta_i(b, "quarot.act.group_size", (long long)s->a_group_size, &first);
    qx__pk_meta_i(b, "quarot.act.asymmetric", s->a_asym, &first);
    qx__pk_meta_g(b, "quarot.act.clip_ratio", s->a_clip, &first);
    qx__pk_meta_i(b, "quarot.k.bits", s->k_bits, &first);
    qx__pk_meta_i(b, "quarot.k.group_size", (long long)s->k_group_size, &first);
    qx__pk_meta_i(b, "quarot.k.asymmetric", s->k_asym, &first);
    qx__pk_meta_g(b, "quarot.k.clip_ratio", s->k_clip, &first);
    qx__pk_meta_i(b, "quarot.v.bits", s->v_bits, &first);
    qx__pk_meta_i(b, "quarot.v.group_size", (long long)s->v_group_size, &first);
    qx__pk_meta_i(b, "quarot.v.asymmetric", s->v_asym, &first);
    qx__pk_meta_g(b, "quarot.v.clip_ratio", s->v_clip, &first);
    qx__pk_meta_i(b, "quarot.rope_interleaved", s->rope_interleaved, &first);
    qx__pk_meta(b, "quarot.config", w->config, &first);
    qx__pk_meta(b, "quarot.online", w->online, &first);
    qx__pk_meta_i(b, "quarot.online.required", w->online_required, &first);
    qx__pk_meta(b, "quarot.online.digest", w->online_digest, &first);
    qx__pk_meta(b, "quarot.rotation", w->rotation, &first);
    qx_sb_put(b, "}", 1);
    for (i = 0; i < w->n_it; ++i) {
        const qx__pk_item* t = &w->it[i];
        qx_sb_put(b, ",", 1);
        qx_sb_json_string(b, t->name, strlen(t->name));
        qx_sb_printf(b, ":{\"dtype\":\"%s\",\"shape\":[", t->dtype);
        for (d = 0; d < t->n_dims; ++d) qx_sb_printf(b, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        qx_sb_printf(b, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t->off, (unsigned long long)(t->off + t->nbytes));
    }
    qx_sb_put(b, "}", 1);
}

static quarot_result qx__pk_check_settings(const qx_packed_settings* s, const char* path, qx_err* e) {
    if (s->w_bits < 2 || s->w_bits > 8) { qx_err_set(e, "%s: weight bits %d outside 2..8", path, s->w_bits); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (s->w_group_size < 0) { qx_err_set(e, "%s: negative group size", path); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (s->scale_dtype != QUAROT_DTYPE_F16 && s->scale_dtype != QUAROT_DTYPE_F32) {
        qx_err_set(e, "%s: scales are F16 or F32", path);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    return QUAROT_OK;
}

quarot_result qx_packed_writer_begin(qx_packed_writer** wp, const char* path, const qx_packed_entry* plan, int64_t n,
                                     const qx_packed_settings* st, const qx_packed_write_opts* o, qx_err* e) {
    qx_packed_writer* w;
    qx__pk_item** order = NULL;
    qx_sb hdr;
    int64_t i, k, n_lin = 0, n_it = 0;
    uint64_t pos = 0;
    quarot_result r;
    if (!wp || !path || !st || n < 0 || (n && !plan)) return QUAROT_ERR_INVALID_ARGUMENT;
    *wp = NULL;
    if ((r = qx__pk_check_settings(st, path, e)) != QUAROT_OK) return r;
    for (i = 0; i < n; ++i) n_lin += plan[i].packed != 0;
    memset(&hdr, 0, sizeof hdr);
    w = (qx_packed_writer*)calloc(1, sizeof *w);
    if (!w) { qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    w->out.fd = -1;
    w->st = *st;
    if (o) w->o = *o;
    w->it = (qx__pk_item*)calloc((size_t)(n + 2 * n_lin + 1), sizeof *w->it);
    w->lin = (qx__pk_lin*)calloc((size_t)(n_lin + 1), sizeof *w->lin);
    w->config = qx__pk_strdup(o ? o->config_json : NULL);
    w->online = qx__pk_strdup(o ? o->online : NULL);
    w->rotation = qx__pk_strdup(o ? o->rotation : NULL);
    if (!w->it || !w->lin || !w->config || !w->online || !w->rotation) { r = QUAROT_ERR_OUT_OF_MEMORY; goto oom; }
    for (i = 0; i < n; ++i) {
        const qx_packed_entry* p = &plan[i];
        int d;
        if (!p->name || !p->name[0] || p->n_dims < 1 || p->n_dims > QUAROT_MAX_DIMS || strlen(p->name) >= 240) {
            qx_err_set(e, "%s: plan entry %lld needs a name (< 240 bytes) and 1..4 dimensions", path, (long long)i);
            r = QUAROT_ERR_INVALID_ARGUMENT;
            goto fail;
        }
        for (d = 0; d < p->n_dims; ++d)
            if (p->ne[d] < 1 || p->ne[d] > ((int64_t)1 << 40)) {
                qx_err_set(e, "%s: tensor \"%s\": bad shape", path, p->name);
                r = QUAROT_ERR_INVALID_ARGUMENT;
                goto fail;
            }
        if (p->packed) {
            qx__pk_lin* L = &w->lin[w->n_lin];
            int64_t in = p->ne[0], out = p->ne[1], g = st->w_group_size ? st->w_group_size : in;
            size_t bl = strlen(p->name);
            const char* roles[3] = {".qweight", ".scales", ".zeros"};
            int role;
            if (p->n_dims != 2 || !qx__pk_ends(p->name, bl, ".weight")) {
                qx_err_set(e, "%s: tensor \"%s\": only 2-D \"<base>.weight\" tensors can be packed", path, p->name);
                r = QUAROT_ERR_INVALID_ARGUMENT;
                goto fail;
            }
            if (in % g != 0) {
                qx_err_set(e, "%s: tensor \"%s\": group size %lld does not divide its rows of %lld", path, p->name,
                           (long long)g, (long long)in);
                r = QUAROT_ERR_INVALID_ARGUMENT;
                goto fail;
            }
            if (qx__pk_packs_two(st->w_bits) && in % 2 != 0) {
                qx_err_set(e, "%s: tensor \"%s\": rows of %lld (odd) cannot be packed two codes per byte", path, p->name, (long long)in);
                r = QUAROT_ERR_INVALID_ARGUMENT;
                goto fail;
            }
            if (!(L->name = qx__pk_strdup(p->name))) { r = QUAROT_ERR_OUT_OF_MEMORY; goto oom; }
            w->n_lin++;
            L->out = out; L->in = in; L->groups = in / g;
            L->it_z = -1;
            for (role = 0; role < 3; ++role) {
                qx__pk_item* t;
                if (role == 2 && !st->w_asym) continue;
                t = &w->it[w->n_it];
                if (!(t->name = (char*)malloc(bl + 8))) { r = QUAROT_ERR_OUT_OF_MEMORY; goto oom; }
                memcpy(t->name, p->name, bl - 7);
                strcpy(t->name + bl - 7, roles[role]);
                w->n_it++;
                t->role = role + 1;
                t->lin = w->n_lin - 1;
                t->n_dims = 2;
                t->shape[0] = out;
                t->shape[1] = role == 0 ? qx__pk_row_bytes(st->w_bits, in) : L->groups;
                t->dtype = role == 1 ? (st->scale_dtype == QUAROT_DTYPE_F32 ? "F32" : "F16") : "U8";
                t->nbytes = (uint64_t)t->shape[0] * (uint64_t)t->shape[1] * qx__pk_esize(t);
                if (role == 0) L->it_q = w->n_it - 1; else if (role == 1) L->it_s = w->n_it - 1; else L->it_z = w->n_it - 1;
            }
        } else {
            qx__pk_item* t = &w->it[w->n_it];
            quarot_dtype dt = p->dtype == QUAROT_DTYPE_DEFAULT ? QUAROT_DTYPE_F32 : p->dtype;
            if (dt != QUAROT_DTYPE_F32 && dt != QUAROT_DTYPE_F16 && dt != QUAROT_DTYPE_BF16) {
                qx_err_set(e, "%s: tensor \"%s\": plain tensors are F32, F16 or BF16", path, p->name);
                r = QUAROT_ERR_UNSUPPORTED_DTYPE;
                goto fail;
            }
            if (!(t->name = qx__pk_strdup(p->name))) { r = QUAROT_ERR_OUT_OF_MEMORY; goto oom; }
            w->n_it++;
            t->dt = dt;
            t->dtype = dt == QUAROT_DTYPE_F32 ? "F32" : dt == QUAROT_DTYPE_F16 ? "F16" : "BF16";
            t->n_dims = p->n_dims;
            t->nbytes = quarot_dtype_size(dt);
            for (d = 0; d < p->n_dims; ++d) {
                t->shape[d] = p->ne[p->n_dims - 1 - d];
                t->nbytes *= (uint64_t)t->shape[d];
            }
            t->lin = -1;
        }
    }
    /* names must be unique (a plain tensor may not collide with a packed one's parts) */
    n_it = w->n_it;
    order = (qx__pk_item**)malloc((size_t)(n_it + 1) * sizeof *order);
    if (!order) { r = QUAROT_ERR_OUT_OF_MEMORY; goto oom; }
    for (i = 0; i < n_it; ++i) order[i] = &w->it[i];
    qsort(order, (size_t)n_it, sizeof *order, qx__pk_order);
    for (i = 0; i < n_it; ++i) {
        for (k = i + 1; k < n_it; ++k)
            if (strcmp(order[i]->name, order[k]->name) == 0) {
                qx_err_set(e, "%s: tensor \"%s\" appears twice", path, order[i]->name);
                r = QUAROT_ERR_INVALID_ARGUMENT;
                goto fail;
            }
        order[i]->off = pos;
        pos += order[i]->nbytes;
    }
    w->data_len = pos;
    /* the header's size now, plus room for the online hook list that is only complete at finish */
    qx__pk_header(w, &hdr);
    if (hdr.failed) { r = QUAROT_ERR_OUT_OF_MEMORY; goto oom; }
    w->reserve = ((uint64_t)hdr.len + (o && o->online_reserve ? o->online_reserve : 4096) + 7) / 8 * 8;
    r = qx_out_begin(&w->out, path, o && o->force, e);
    if (r != QUAROT_OK) goto fail;
    qx_sb_free(&hdr);
    free(order);
    *wp = w;
    return QUAROT_OK;
oom:
    qx_err_set(e, "%s: out of memory", path);
fail:
    qx_sb_free(&hdr);
    free(order);
    qx_packed_writer_abort(w);
    return r;
}

static qx__pk_item* qx__pk_find(qx_packed_writer* w, const char* name) {
    int64_t i;
    for (i = 0; i < w->n_it; ++i)
        if (strcmp(w->it[i].name, name) == 0) return &w->it[i];
    return NULL;
}

/* The planned plain tensor `name` not yet written, with its shape in ne order; else *r says why. */
static qx__pk_item* qx__pk_plain(qx_packed_writer* w, const char* name, int64_t ne[QUAROT_MAX_DIMS], quarot_result* r, qx_err* e) {
    qx__pk_item* p = qx__pk_find(w, name);
    int d;
    if (!p || p->role != 0) {
        qx_err_set(e, "%s: tensor \"%s\" is not a planned plain tensor", w->out.path, name);
        *r = QUAROT_ERR_NOT_FOUND;
        return NULL;
    }
    if (p->written) {
        qx_err_set(e, "%s: tensor \"%s\" written twice", w->out.path, name);
        *r = QUAROT_ERR_STATE;
        return NULL;
    }
    for (d = 0; d < QUAROT_MAX_DIMS; ++d) ne[d] = d < p->n_dims ? p->shape[p->n_dims - 1 - d] : 1;
    return p;
}

quarot_result qx_packed_writer_put(qx_packed_writer* w, const char* name, const quarot_tensor* t, qx_err* e) {
    qx__pk_item* p;
    int64_t ne[QUAROT_MAX_DIMS];
    int d;
    quarot_result r = QUAROT_OK;
    if (!w || !name || !t) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!(p = qx__pk_plain(w, name, ne, &r, e))) return r;
    for (d = 0; d < QUAROT_MAX_DIMS; ++d)
        if (t->ne[d] != ne[d]) {
            qx_err_set(e, "%s: tensor \"%s\": shape differs from the plan's", w->out.path, name);
            return QUAROT_ERR_SHAPE_MISMATCH;
        }
    r = qx_out_tensor(&w->out, 8 + w->reserve + p->off, p->dt, t, 0, 0, name, e);
    if (r == QUAROT_OK) p->written = 1;
    return r;
}

quarot_result qx_packed_writer_put_rows(qx_packed_writer* w, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e) {
    qx__pk_item* p;
    int64_t ne[QUAROT_MAX_DIMS];
    quarot_result r = QUAROT_OK;
    if (!w || !name || !t) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!(p = qx__pk_plain(w, name, ne, &r, e))) return r;
    r = qx_out_tensor_rows(&w->out, 8 + w->reserve + p->off, p->dt, ne, &p->rows_done, row0, t, name, e);
    if (r == QUAROT_OK && p->rows_done == qx_out_rows(ne)) p->written = 1;
    return r;
}

quarot_result qx_packed_writer_put_linear(qx_packed_writer* w, const char* name, const int8_t* q, const float* scales,
                                          const float* zeros, qx_err* e) {
    int64_t i, r, c;
    qx__pk_lin* L = NULL;
    int b, half, top;
    unsigned char* buf;
    size_t es;
    uint64_t base;
    quarot_result res;
    if (!w || !name || !q || !scales) return QUAROT_ERR_INVALID_ARGUMENT;
    for (i = 0; i < w->n_lin; ++i)
        if (strcmp(w->lin[i].name, name) == 0) L = &w->lin[i];
    if (!L) { qx_err_set(e, "%s: tensor \"%s\" is not a planned packed linear", w->out.path, name); return QUAROT_ERR_NOT_FOUND; }
    if (L->written) { qx_err_set(e, "%s: tensor \"%s\" written twice", w->out.path, name); return QUAROT_ERR_STATE; }
    if (w->st.w_asym && !zeros) { qx_err_set(e, "%s: tensor \"%s\": asymmetric weights need zeros", w->out.path, name); return QUAROT_ERR_INVALID_ARGUMENT; }
    b = w->st.w_bits;
    half = 1 << (b - 1);
    top = (1 << b) - 1;
    es = w->st.scale_dtype == QUAROT_DTYPE_F32 ? 4 : 2;
    /* the values first: codes and zeros in range, scales finite, >= 0, representable */
    for (i = 0; i < L->out * L->in; ++i)
        if (q[i] < -half || q[i] > half - 1) {
            qx_err_set(e, "%s: tensor \"%s\": code %d outside [%d, %d]", w->out.path, name, q[i], -half, half - 1);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    for (i = 0; i < L->out * L->groups; ++i) {
        float s = scales[i];
        uint16_t h = 0;
        if (es == 2) quarot_f32_to_f16(&s, &h, 1);
        if (!(s >= 0.0f) || isinf(s) || (es == 2 && (h & 0x7c00u) == 0x7c00u)) {
            qx_err_set(e, "%s: tensor \"%s\": scale %g is negative, not finite or overflows %s", w->out.path, name, (double)s,
                       es == 2 ? "F16" : "F32");
            return QUAROT_ERR_NONFINITE;
        }
        if (zeros && w->st.w_asym && (!(zeros[i] + (float)half >= 0.0f) || zeros[i] + (float)half > (float)top ||
                                      zeros[i] != floorf(zeros[i]))) {
            qx_err_set(e, "%s: tensor \"%s\": zero point %g outside the code range", w->out.path, name, (double)zeros[i]);
            return QUAROT_ERR_INVALID_ARGUMENT;
        }
    }
    /* codes: row by row into one buffer (the largest of the three parts) */
    buf = (unsigned char*)malloc((size_t)(L->out * (L->in > L->groups * 4 ? L->in : L->groups * 4)) + 1);
    if (!buf) { qx_err_set(e, "%s: out of memory", w->out.path); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (r = 0; r < L->out; ++r) {
        const int8_t* qr = q + r * L->in;
        unsigned char* o = buf + r * qx__pk_row_bytes(b, L->in);
        if (qx__pk_packs_two(b))
            for (c = 0; c < L->in; c += 2)   /* even column: low nibble, odd column: high nibble */
                o[c / 2] = (unsigned char)((unsigned)(qr[c] + half) | (unsigned)(qr[c + 1] + half) << 4);
        else
            for (c = 0; c < L->in; ++c) o[c] = (unsigned char)(qr[c] + half);
    }
    base = 8 + w->reserve;
    res = qx_out_pwrite(&w->out, buf, (size_t)w->it[L->it_q].nbytes, base + w->it[L->it_q].off, e);
    if (res == QUAROT_OK) {
        for (i = 0; i < L->out * L->groups; ++i) {
            if (es == 4) {
                uint32_t u;
                memcpy(&u, &scales[i], 4);
                buf[4 * i] = (unsigned char)u; buf[4 * i + 1] = (unsigned char)(u >> 8);
                buf[4 * i + 2] = (unsigned char)(u >> 16); buf[4 * i + 3] = (unsigned char)(u >> 24);
            } else {
                uint16_t h;
                quarot_f32_to_f16(&scales[i], &h, 1);
                buf[2 * i] = (unsigned char)h; buf[2 * i + 1] = (unsigned char)(h >> 8);
            }
        }
        res = qx_out_pwrite(&w->out, buf, (size_t)w->it[L->it_s].nbytes, base + w->it[L->it_s].off, e);
    }
    if (res == QUAROT_OK && L->it_z >= 0) {
        for (i = 0; i < L->out * L->groups; ++i) buf[i] = (unsigned char)(int)(zeros[i] + (float)half);
        res = qx_out_pwrite(&w->out, buf, (size_t)w->it[L->it_z].nbytes, base + w->it[L->it_z].off, e);
    }
    free(buf);
    if (res == QUAROT_OK) {
        L->written = 1;
        w->it[L->it_q].written = w->it[L->it_s].written = 1;
        if (L->it_z >= 0) w->it[L->it_z].written = 1;
    }
    return res;
}

quarot_result qx_packed_writer_set_online(qx_packed_writer* w, const char* online) {
    char* p;
    if (!w) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!(p = qx__pk_strdup(online))) return QUAROT_ERR_OUT_OF_MEMORY;
    free(w->online);
    w->online = p;
    return QUAROT_OK;
}

/* The number of hooks in a hook list's text ("" holds none); -1 when it does not parse (msg says why). */
static int64_t qx__pk_hook_count(const char* text, char* msg, size_t cap) {
    quarot_online_list l;
    int64_t n;
    if (!text || !text[0]) return 0;
    quarot_online_list_init(&l, NULL);
    n = quarot_online_read(&l, text, strlen(text), msg, cap) == QUAROT_OK ? l.count : -1;
    quarot_online_list_free(&l);
    return n;
}

/* quarot.online.digest: the hook list's length and bytes, then the data section. */
static void qx__pk_digest_begin(qx_digest_state* g, const char* online) {
    unsigned char n8[8];
    uint64_t n = (uint64_t)strlen(online ? online : "");
    int i;
    for (i = 0; i < 8; ++i) n8[i] = (unsigned char)(n >> (8 * i));
    qx_digest_begin(g);
    qx_digest_put(g, n8, 8);
    qx_digest_put(g, online ? online : "", (size_t)n);
}

/* The binding of the writer's hook list to the data written: read back from the temporary. */
static quarot_result qx__pk_bind(qx_packed_writer* w, qx_err* e) {
    qx_digest_state g;
    char msg[256];
    unsigned char* buf;
    uint64_t done = 0;
    int64_t hooks;
    msg[0] = '\0';
    hooks = qx__pk_hook_count(w->online, msg, sizeof msg);
    if (hooks < 0) {
        qx_err_set(e, "%s: quarot.online: %s", w->out.path, msg[0] ? msg : "not a hook list");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    w->online_required = hooks > 0;
    buf = (unsigned char*)malloc(QX__PK_CHUNK);
    if (!buf) { qx_err_set(e, "%s: out of memory", w->out.path); return QUAROT_ERR_OUT_OF_MEMORY; }
    qx__pk_digest_begin(&g, w->online);
    while (done < w->data_len) {
        size_t n = (size_t)(w->data_len - done < QX__PK_CHUNK ? w->data_len - done : QX__PK_CHUNK);
        if (!qx_pread_all(w->out.fd, buf, n, (int64_t)(8 + w->reserve + done))) {
            free(buf);
            qx_err_set(e, "%s: cannot read back the temporary", w->out.path);
            return QUAROT_ERR_IO;
        }
        qx_digest_put(&g, buf, n);
        done += n;
    }
    free(buf);
    qx_digest_end(&g, w->online_digest);
    return QUAROT_OK;
}

/* Moves the data section [from, from + len) up to `to` (> from), from the end backwards. */
static quarot_result qx__pk_move(qx_packed_writer* w, uint64_t from, uint64_t to, uint64_t len, qx_err* e) {
    unsigned char* buf = (unsigned char*)malloc(QX__PK_CHUNK);
    uint64_t done = 0;
    quarot_result r = QUAROT_OK;
    if (!buf) { qx_err_set(e, "%s: out of memory", w->out.path); return QUAROT_ERR_OUT_OF_MEMORY; }
    while (done < len && r == QUAROT_OK) {
        size_t n = (size_t)(len - done < QX__PK_CHUNK ? len - done : QX__PK_CHUNK);
        uint64_t at = from + len - done - n;
        if (qx_pread_all(w->out.fd, buf, n, (int64_t)at)) r = qx_out_pwrite(&w->out, buf, n, at + (to - from), e);
        else { qx_err_set(e, "%s: cannot read back the temporary", w->out.path); r = QUAROT_ERR_IO; }
        done += n;
    }
    free(buf);
    return r;
}

quarot_result qx_packed_writer_finish(qx_packed_writer* w, qx_err* e) {
    qx_sb hdr;
    int64_t i;
    quarot_result r = QUAROT_OK;
    uint64_t need;
    unsigned char len8[8];
    if (!w) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(&hdr, 0, sizeof hdr);
    for (i = 0; i < w->n_it && r == QUAROT_OK; ++i)
        if (!w->it[i].written) {
            qx_err_set(e, "%s: tensor \"%s\" was planned but never written", w->out.path, w->it[i].name);
            r = QUAROT_ERR_STATE;
        }
    if (r == QUAROT_OK) r = qx__pk_bind(w, e);
    if (r == QUAROT_OK) {
        qx__pk_header(w, &hdr);
        if (hdr.failed) { qx_err_set(e, "%s: out of memory", w->out.path); r = QUAROT_ERR_OUT_OF_MEMORY; }
    }
    if (r == QUAROT_OK) {
        need = ((uint64_t)hdr.len + 7) / 8 * 8;
        if (need > w->reserve) {              /* the hook list outgrew the reservation: move the data up */
            r = qx__pk_move(w, 8 + w->reserve, 8 + need, w->data_len, e);
            w->reserve = need;
        }
    }
    if (r == QUAROT_OK) {
        while (!hdr.failed && hdr.len < w->reserve) qx_sb_put(&hdr, " ", 1);
        for (i = 0; i < 8; ++i) len8[i] = (unsigned char)(w->reserve >> (8 * i));
        r = qx_out_pwrite(&w->out, len8, 8, 0, e);
        if (r == QUAROT_OK) r = qx_out_pwrite(&w->out, hdr.p, hdr.len, 8, e);
    }
    if (r == QUAROT_OK) r = qx_out_sync(&w->out, 8 + w->reserve + w->data_len, e);
    if (r == QUAROT_OK) r = qx_out_publish(&w->out, e);
    qx_sb_free(&hdr);
    qx_packed_writer_abort(w);
    return r;
}

/* ---- reader ---- */

typedef struct qx__pk_rt {
    const char* name;         /* NUL-terminated (JSON arena) */
    size_t name_len;
    const char* dtype;
    int n_dims;
    int64_t shape[QUAROT_MAX_DIMS];   /* outermost first */
    uint64_t begin, end;
    int used;
} qx__pk_rt;

static int qx__pk_rt_off(const void* a, const void* b) {
    const qx__pk_rt* x = *(const qx__pk_rt* const*)a;
    const qx__pk_rt* y = *(const qx__pk_rt* const*)b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : x->end < y->end ? -1 : x->end > y->end;
}

void qx_packed_file_free(qx_packed_file* f) {
    if (!f) return;
    free(f->config_json);
    free(f->online);
    free(f->rotation);
    free(f->lin);
    free(f->plain);
    memset(f, 0, sizeof *f);
}

/* Scale i of a linear's scale bytes (F16 or F32, little-endian). */
static float qx__pk_scale_at(quarot_dtype dt, const unsigned char* scales, int64_t i) {
    float s;
    if (dt == QUAROT_DTYPE_F16) {
        uint16_t h = (uint16_t)(scales[2 * i] | scales[2 * i + 1] << 8);
        quarot_f16_to_f32(&h, &s, 1);
    } else {
        uint32_t u = (uint32_t)scales[4 * i] | (uint32_t)scales[4 * i + 1] << 8 | (uint32_t)scales[4 * i + 2] << 16 |
                     (uint32_t)scales[4 * i + 3] << 24;
        memcpy(&s, &u, 4);
    }
    return s;
}

int qx_packed_sniff(const void* buf, size_t len) {
    const unsigned char* p = (const unsigned char*)buf;
    uint64_t n;
    size_t lim, i, fl = strlen("\"" QX_PACKED_FORMAT "\"");
    if (!buf || len < 8) return 0;
    n = qx_str_le64(p);
    lim = n < (uint64_t)(len - 8) ? (size_t)n : len - 8;     /* the header, or what of it is at hand */
    for (i = 0; i + fl <= lim; ++i)
        if (memcmp(p + 8 + i, "\"" QX_PACKED_FORMAT "\"", fl) == 0) return 1;
    return 0;
}

/* A metadata string, NULL when absent or not a string. */
static const char* qx__pk_mstr(const qx_json* meta, const char* key) { return qx_json_as_string(qx_json_get(meta, key), NULL); }

/* A required decimal integer key within [lo, hi]. */
static int qx__pk_mint(const qx_json* meta, const char* key, long long lo, long long hi, long long* out) {
    const char* s = qx__pk_mstr(meta, key);
    char* end;
    long long v;
    if (!s || !s[0] || (s[0] == '0' && s[1]) || (!(s[0] >= '0' && s[0] <= '9') && s[0] != '-')) return 0;
    v = strtoll(s, &end, 10);
    if (*end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

static int qx__pk_mfloat(const qx_json* meta, const char* key, double* out) {
    const char* s = qx__pk_mstr(meta, key);
    char* end;
    double v;
    if (!s || !s[0]) return 0;
    v = strtod(s, &end);
    if (*end || !(v > 0.0 && v <= 1.0)) return 0;
    *out = v;
    return 1;
}

static int qx__pk_bits_ok(long long b) { return (b >= 2 && b <= 8) || b == 16; }

static char* qx__pk_copy_meta(const qx_json* meta, const char* key) {
    size_t n = 0;
    const char* s = qx_json_as_string(qx_json_get(meta, key), &n);
    char* p = (char*)malloc(n + 1);
    if (!p) return NULL;
    if (n) memcpy(p, s, n);
    p[n] = '\0';
    return p;
}

/* The metadata -> settings (all keys required, in range). */
static quarot_result qx__pk_settings(const qx_json* meta, const char* name, qx_packed_settings* s, qx_err* e) {
    long long v[16];
    const char* sd;
    const char* fmt = qx__pk_mstr(meta, "format");
    const char* pack;
    const char* qz;
    memset(s, 0, sizeof *s);
    if (!meta || !fmt || strcmp(fmt, QX_PACKED_FORMAT) != 0) {
        qx_err_set(e, "%s: not a quarot-packed file (__metadata__ \"format\" is not \"%s\")", name, QX_PACKED_FORMAT);
        return QUAROT_ERR_PARSE;
    }
    if (!qx__pk_mint(meta, "quarot.version", 0, 1000000, &v[0])) {
        qx_err_set(e, "%s: quarot.version is missing or not an integer", name);
        return QUAROT_ERR_PARSE;
    }
    if (v[0] != QX_PACKED_VERSION) {
        qx_err_set(e, "%s: quarot-packed version %lld is not supported (%d is%s)", name, v[0], QX_PACKED_VERSION,
                   v[0] == 1 ? ": version 1 does not bind its hook list to the weights; quantize again" : "");
        return QUAROT_ERR_UNSUPPORTED;
    }
#define QX__PK_INT(key, lo, hi, dst) \
    do { if (!qx__pk_mint(meta, key, lo, hi, &v[1])) { qx_err_set(e, "%s: metadata %s is missing or outside [%lld, %lld]", name, key, (long long)(lo), (long long)(hi)); return QUAROT_ERR_PARSE; } dst = v[1]; } while (0)
#define QX__PK_BITS(key, dst) \
    do { if (!qx__pk_mint(meta, key, 2, 16, &v[1]) || !qx__pk_bits_ok(v[1])) { qx_err_set(e, "%s: metadata %s must be 2..8 or 16", name, key); return QUAROT_ERR_PARSE; } dst = (int)v[1]; } while (0)
#define QX__PK_CLIP(key, dst) \
    do { if (!qx__pk_mfloat(meta, key, &dst)) { qx_err_set(e, "%s: metadata %s must be a number in (0, 1]", name, key); return QUAROT_ERR_PARSE; } } while (0)
    QX__PK_INT("quarot.weight.bits", 2, 8, s->w_bits);
    QX__PK_INT("quarot.weight.group_size", 0, (long long)1 << 40, s->w_group_size);
    QX__PK_INT("quarot.weight.asymmetric", 0, 1, s->w_asym);
    QX__PK_BITS("quarot.act.bits", s->a_bits);
    QX__PK_INT("quarot.act.group_size", 0, (long long)1 << 40, s->a_group_size);
    QX__PK_INT("quarot.act.asymmetric", 0, 1, s->a_asym);
    QX__PK_CLIP("quarot.act.clip_ratio", s->a_clip);
    QX__PK_BITS("quarot.k.bits", s->k_bits);
    QX__PK_INT("quarot.k.group_size", 0, (long long)1 << 40, s->k_group_size);
    QX__PK_INT("quarot.k.asymmetric", 0, 1, s->k_asym);
    QX__PK_CLIP("quarot.k.clip_ratio", s->k_clip);
    QX__PK_BITS("quarot.v.bits", s->v_bits);
    QX__PK_INT("quarot.v.group_size", 0, (long long)1 << 40, s->v_group_size);
    QX__PK_INT("quarot.v.asymmetric", 0, 1, s->v_asym);
    QX__PK_CLIP("quarot.v.clip_ratio", s->v_clip);
    QX__PK_INT("quarot.rope_interleaved", 0, 1, s->rope_interleaved);
#undef QX__PK_INT
#undef QX__PK_BITS
#undef QX__PK_CLIP
    sd = qx__pk_mstr(meta, "quarot.weight.scale_dtype");
    if (!sd || (strcmp(sd, "F16") != 0 && strcmp(sd, "F32") != 0)) {
        qx_err_set(e, "%s: metadata quarot.weight.scale_dtype must be \"F16\" or \"F32\"", name);
        return QUAROT_ERR_PARSE;
    }
    s->scale_dtype = strcmp(sd, "F16") == 0 ? QUAROT_DTYPE_F16 : QUAROT_DTYPE_F32;
    pack = qx__pk_mstr(meta, "quarot.weight.packing");
    if (!pack || strcmp(pack, "low_first") != 0) {
        qx_err_set(e, "%s: metadata quarot.weight.packing must be \"low_first\"", name);
        return QUAROT_ERR_PARSE;
    }
    qz = qx__pk_mstr(meta, "quarot.weight.quantizer");
    snprintf(s->w_quantizer, sizeof s->w_quantizer, "%s", qz ? qz : "");
    if (!qx_json_as_string(qx_json_get(meta, "quarot.config"), NULL) || !qx_json_as_string(qx_json_get(meta, "quarot.online"), NULL)) {
        qx_err_set(e, "%s: metadata quarot.config and quarot.online are required (strings)", name);
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

/* One parse: the image's data section, the tensor records read from the header (t[0..n), in
   header order; order[] the same sorted by offset) and the __metadata__ object. */
typedef struct qx__pk_parse {
    const char* name;
    const unsigned char* data;
    uint64_t data_len;
    qx__pk_rt* t;
    qx__pk_rt** order;
    size_t n;
    const qx_json* meta;
    qx_err* e;
} qx__pk_parse;

/* One tensor record alone: dtype, shape, a name of 1..239 bytes, offsets of exactly its bytes
   inside the data section. */
static quarot_result qx__pk_record(const qx__pk_parse* P, const qx_json* v, qx__pk_rt* x) {
    const char* name = P->name;
    qx_err* e = P->e;
    const qx_json* dt = qx_json_get(v, "dtype");
    const qx_json* sh = qx_json_get(v, "shape");
    const qx_json* of = qx_json_get(v, "data_offsets");
    int64_t a, b;
    uint64_t elems = 1, es;
    size_t d;
    x->name = v->key;
    x->name_len = v->key_len;
    if (v->type != QX_JSON_OBJECT || !qx_json_as_string(dt, NULL) || !sh || sh->type != QX_JSON_ARRAY || !of || of->type != QX_JSON_ARRAY ||
        of->count != 2 || sh->count < 1 || sh->count > QUAROT_MAX_DIMS || x->name_len == 0 || x->name_len >= 240 ||
        memchr(x->name, '\0', x->name_len)) {
        qx_err_set(e, "%s: tensor \"%.100s\": needs dtype, 1..4 dimensions and two data offsets (and a name of 1..239 bytes)", name, v->key);
        return QUAROT_ERR_PARSE;
    }
    x->dtype = dt->str;
    es = strcmp(x->dtype, "F32") == 0 ? 4 : (strcmp(x->dtype, "F16") == 0 || strcmp(x->dtype, "BF16") == 0) ? 2 :
         strcmp(x->dtype, "U8") == 0 ? 1 : 0;
    if (!es) {
        qx_err_set(e, "%s: tensor \"%.100s\": dtype %.16s is not F32, F16, BF16 or U8", name, x->name, x->dtype);
        return QUAROT_ERR_UNSUPPORTED_DTYPE;
    }
    x->n_dims = (int)sh->count;
    for (d = 0; d < sh->count; ++d) {
        int64_t s;
        if (qx_json_as_int64(&sh->items[d], &s) != QUAROT_OK || s < 1 || s > ((int64_t)1 << 40) || elems > (UINT64_MAX / 8) / (uint64_t)s) {
            qx_err_set(e, "%s: tensor \"%.100s\": bad shape", name, x->name);
            return QUAROT_ERR_PARSE;
        }
        x->shape[d] = s;
        elems *= (uint64_t)s;
    }
    if (qx_json_as_int64(&of->items[0], &a) != QUAROT_OK || qx_json_as_int64(&of->items[1], &b) != QUAROT_OK || a < 0 || b < a ||
        (uint64_t)b > P->data_len || (uint64_t)(b - a) != elems * es) {
        qx_err_set(e, "%s: tensor \"%.100s\": data offsets do not match %llu elements of %s inside the %llu-byte data section", name,
                   x->name, (unsigned long long)elems, x->dtype, (unsigned long long)P->data_len);
        return QUAROT_ERR_PARSE;
    }
    x->begin = (uint64_t)a;
    x->end = (uint64_t)b;
    return QUAROT_OK;
}

/* The header's entries: __metadata__ kept aside, every tensor record checked alone. */
static quarot_result qx__pk_records(qx__pk_parse* P, const qx_json* root) {
    size_t i;
    quarot_result r;
    if (!root || root->type != QX_JSON_OBJECT) { qx_err_set(P->e, "%s: the header is not a JSON object", P->name); return QUAROT_ERR_PARSE; }
    P->t = (qx__pk_rt*)calloc(root->count + 1, sizeof *P->t);
    P->order = (qx__pk_rt**)calloc(root->count + 1, sizeof *P->order);
    if (!P->t || !P->order) { qx_err_set(P->e, "%s: out of memory", P->name); return QUAROT_ERR_OUT_OF_MEMORY; }
    for (i = 0; i < root->count; ++i) {
        const qx_json* v = &root->items[i];
        if (strcmp(v->key, "__metadata__") == 0) {
            if (v->type != QX_JSON_OBJECT) { qx_err_set(P->e, "%s: __metadata__ is not an object", P->name); return QUAROT_ERR_PARSE; }
            P->meta = v;
            continue;
        }
        if ((r = qx__pk_record(P, v, &P->t[P->n])) != QUAROT_OK) return r;
        P->order[P->n] = &P->t[P->n];
        ++P->n;
    }
    return QUAROT_OK;
}

/* The records together: sorted by offset they tile the data section, to its last byte. */
static quarot_result qx__pk_tiling(qx__pk_parse* P) {
    size_t i;
    uint64_t pos = 0;
    qsort(P->order, P->n, sizeof *P->order, qx__pk_rt_off);
    for (i = 0; i < P->n; ++i) {
        if (P->order[i]->begin != pos) {
            qx_err_set(P->e, "%s: tensor \"%.100s\" starts at %llu, expected %llu (tensors must tile the data section)", P->name,
                       P->order[i]->name, (unsigned long long)P->order[i]->begin, (unsigned long long)pos);
            return QUAROT_ERR_PARSE;
        }
        pos = P->order[i]->end;
    }
    if (pos != P->data_len) {
        qx_err_set(P->e, "%s: %llu bytes after the last tensor", P->name, (unsigned long long)(P->data_len - pos));
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

/* The metadata: the settings, the config / online / rotation strings copied, and room for the
   linears and plain tensors. */
static quarot_result qx__pk_metadata(const qx__pk_parse* P, qx_packed_file* f) {
    quarot_result r;
    if ((r = qx__pk_settings(P->meta, P->name, &f->settings, P->e)) != QUAROT_OK) return r;
    f->config_json = qx__pk_copy_meta(P->meta, "quarot.config");
    f->online = qx__pk_copy_meta(P->meta, "quarot.online");
    f->rotation = qx__pk_copy_meta(P->meta, "quarot.rotation");
    f->lin = (qx_packed_linear*)calloc(P->n + 1, sizeof *f->lin);
    f->plain = (qx_packed_plain*)calloc(P->n + 1, sizeof *f->plain);
    if (!f->config_json || !f->online || !f->rotation || !f->lin || !f->plain) {
        qx_err_set(P->e, "%s: out of memory", P->name);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    return QUAROT_OK;
}

/* A linear's values: scales finite and >= 0, zero points and codes within the bit width. */
static quarot_result qx__pk_linear_values(const qx__pk_parse* P, const qx_packed_settings* st, const qx_packed_linear* L) {
    size_t j;
    for (j = 0; j < (size_t)(L->out * L->groups); ++j) {
        float sv = qx__pk_scale_at(st->scale_dtype, L->scales, (int64_t)j);
        if (!(sv >= 0.0f) || isinf(sv)) {
            qx_err_set(P->e, "%s: tensor \"%.100s\": scale %lld is %g (scales must be finite and >= 0)", P->name, L->name, (long long)j, (double)sv);
            return QUAROT_ERR_NONFINITE;
        }
        if (L->zeros && L->zeros[j] > (1 << st->w_bits) - 1) {
            qx_err_set(P->e, "%s: tensor \"%.100s\": zero point %d outside [0, %d]", P->name, L->name, L->zeros[j], (1 << st->w_bits) - 1);
            return QUAROT_ERR_PARSE;
        }
    }
    if (st->w_bits != 4 && st->w_bits != 8) {
        int top = (1 << st->w_bits) - 1;
        for (j = 0; j < (size_t)(L->out * L->row_bytes); ++j) {
            int lo4 = L->qweight[j] & 15, hi4 = L->qweight[j] >> 4;
            int bad = qx__pk_packs_two(st->w_bits) ? (lo4 > top || hi4 > top) : L->qweight[j] > top;
            if (bad) {
                qx_err_set(P->e, "%s: tensor \"%.100s\": byte %lld holds a code above %d", P->name, L->name, (long long)j, top);
                return QUAROT_ERR_PARSE;
            }
        }
    }
    return QUAROT_OK;
}

/* The linear of record q (a .qweight): its .scales (and .zeros) beside it, shapes and dtypes as the
   metadata says, then its values. */
static quarot_result qx__pk_linear(const qx__pk_parse* P, qx_packed_file* f, qx__pk_rt* q) {
    const char* name = P->name;
    const qx_packed_settings* st = &f->settings;
    qx__pk_rt *s = NULL, *z = NULL, *t = P->t;
    qx_packed_linear* L;
    char want[256];
    size_t bl = q->name_len - 8, j;
    int64_t in, g;
    for (j = 0; j < P->n; ++j) {
        if (t[j].name_len == bl + 7 && memcmp(t[j].name, q->name, bl) == 0 && memcmp(t[j].name + bl, ".scales", 7) == 0) s = &t[j];
        if (t[j].name_len == bl + 6 && memcmp(t[j].name, q->name, bl) == 0 && memcmp(t[j].name + bl, ".zeros", 6) == 0) z = &t[j];
    }
    if (!s || (st->w_asym && !z) || (!st->w_asym && z)) {
        qx_err_set(P->e, "%s: tensor \"%.100s\": %s", name, q->name, !s ? "no .scales beside it" : z ? ".zeros in a symmetric file" :
                   "no .zeros beside it (asymmetric file)");
        return QUAROT_ERR_PARSE;
    }
    in = qx__pk_packs_two(st->w_bits) ? 2 * (q->n_dims == 2 ? q->shape[1] : 0) : (q->n_dims == 2 ? q->shape[1] : 0);
    g = st->w_group_size ? st->w_group_size : in;
    if (strcmp(q->dtype, "U8") != 0 || q->n_dims != 2 || s->n_dims != 2 || s->shape[0] != q->shape[0] || g < 1 || in % g ||
        s->shape[1] != in / g || strcmp(s->dtype, st->scale_dtype == QUAROT_DTYPE_F16 ? "F16" : "F32") != 0 ||
        (z && (strcmp(z->dtype, "U8") != 0 || z->n_dims != 2 || z->shape[0] != s->shape[0] || z->shape[1] != s->shape[1]))) {
        qx_err_set(P->e, "%s: tensor \"%.100s\": shapes or dtypes of .qweight/.scales/.zeros disagree with the metadata (bits %d, group %lld)",
                   name, q->name, st->w_bits, (long long)st->w_group_size);
        return QUAROT_ERR_PARSE;
    }
    L = &f->lin[f->n_lin++];
    snprintf(want, sizeof want, "%.*s.weight", (int)bl, q->name);
    snprintf(L->name, sizeof L->name, "%s", want);
    L->out = q->shape[0];
    L->in = in;
    L->group = g;
    L->groups = in / g;
    L->row_bytes = q->shape[1];
    L->qweight = P->data + q->begin;
    L->scales = P->data + s->begin;
    L->zeros = z ? P->data + z->begin : NULL;
    q->used = s->used = 1;
    if (z) z->used = 1;
    return qx__pk_linear_values(P, st, L);
}

/* The plain tensors: the float records that are not parts of a linear. */
static quarot_result qx__pk_plains(const qx__pk_parse* P, qx_packed_file* f) {
    size_t i;
    for (i = 0; i < P->n; ++i) {
        const qx__pk_rt* x = &P->t[i];
        qx_packed_plain* pl;
        int d;
        if (x->used) continue;
        if (qx__pk_ends(x->name, x->name_len, ".scales") || qx__pk_ends(x->name, x->name_len, ".zeros") || strcmp(x->dtype, "U8") == 0) {
            qx_err_set(P->e, "%s: tensor \"%.100s\": %s without its .qweight", P->name, x->name,
                       strcmp(x->dtype, "U8") == 0 ? "U8 data" : "quantization parameters");
            return QUAROT_ERR_PARSE;
        }
        pl = &f->plain[f->n_plain++];
        snprintf(pl->name, sizeof pl->name, "%s", x->name);
        pl->dtype = strcmp(x->dtype, "F32") == 0 ? QUAROT_DTYPE_F32 : strcmp(x->dtype, "F16") == 0 ? QUAROT_DTYPE_F16 : QUAROT_DTYPE_BF16;
        pl->n_dims = x->n_dims;
        for (d = 0; d < QUAROT_MAX_DIMS; ++d) pl->ne[d] = d < x->n_dims ? x->shape[x->n_dims - 1 - d] : 1;
        pl->data = P->data + x->begin;
    }
    return QUAROT_OK;
}

/* The safetensors frame (u64 header length, JSON header), then the records alone, together, the
   metadata, the linears (every .qweight with its .scales and .zeros) and the plain tensors. */
/* The hook list bound to the weights: quarot.online parses, holds hooks exactly when
   quarot.online.required is 1, and quarot.online.digest is its digest with the data section. */
static quarot_result qx__pk_binding(const qx__pk_parse* P, const qx_packed_file* f) {
    long long req = -1;
    const char* want = qx__pk_mstr(P->meta, "quarot.online.digest");
    char msg[256], have[QX_DIGEST_LEN];
    qx_digest_state g;
    int64_t hooks;
    if (!qx__pk_mint(P->meta, "quarot.online.required", 0, 1, &req) || !want) {
        qx_err_set(P->e, "%s: metadata quarot.online.required (0 / 1) and quarot.online.digest are required: they bind the "
                         "hook list to the weights", P->name);
        return QUAROT_ERR_PARSE;
    }
    msg[0] = '\0';
    hooks = qx__pk_hook_count(f->online, msg, sizeof msg);
    if (hooks < 0) {
        qx_err_set(P->e, "%s: metadata quarot.online: %s", P->name, msg[0] ? msg : "not a hook list");
        return QUAROT_ERR_PARSE;
    }
    if (req && hooks == 0) {
        qx_err_set(P->e, "%s: the weights carry the offline halves of online rotations (quarot.online.required 1) but "
                         "quarot.online holds no hook: the hook list was stripped, and without it the model computes "
                         "another function", P->name);
        return QUAROT_ERR_PARSE;
    }
    if (!req && hooks > 0) {
        qx_err_set(P->e, "%s: quarot.online holds %lld hooks but quarot.online.required is 0 (weights without online "
                         "rotations)", P->name, (long long)hooks);
        return QUAROT_ERR_PARSE;
    }
    qx__pk_digest_begin(&g, f->online);
    qx_digest_put(&g, P->data, (size_t)P->data_len);
    qx_digest_end(&g, have);
    if (strcmp(want, have) != 0) {
        qx_err_set(P->e, "%s: quarot.online.digest %.40s is not that of the hook list and the weights (%s): the hook list or "
                         "the weights were changed after the file was written", P->name, want, have);
        return QUAROT_ERR_PARSE;
    }
    return QUAROT_OK;
}

quarot_result qx_packed_parse(const void* buf, size_t len, const char* name, qx_packed_file* f, qx_err* e) {
    const unsigned char* p = (const unsigned char*)buf;
    qx_json_doc doc;
    qx__pk_parse P;
    uint64_t hl;
    size_t i;
    quarot_result r;
    if (!f || (!buf && len)) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(f, 0, sizeof *f);
    memset(&doc, 0, sizeof doc);
    if (!name) name = "packed";
    if (len < 8) { qx_err_set(e, "%s: %zu bytes is too short for a safetensors header", name, len); return QUAROT_ERR_PARSE; }
    hl = qx_str_le64(p);
    if (hl > len - 8 || hl > QX_ST_MAX_HEADER) {
        qx_err_set(e, "%s: header length %llu passes the end of the file or the %llu-byte limit", name, (unsigned long long)hl,
                   (unsigned long long)QX_ST_MAX_HEADER);
        return QUAROT_ERR_PARSE;
    }
    r = qx_json_parse((const char*)p + 8, (size_t)hl, name, NULL, &doc, e);
    if (r != QUAROT_OK) return r;
    memset(&P, 0, sizeof P);
    P.name = name;
    P.e = e;
    P.data = p + 8 + hl;
    P.data_len = (uint64_t)len - 8 - hl;
    r = qx__pk_records(&P, doc.root);
    if (r == QUAROT_OK) r = qx__pk_tiling(&P);
    if (r == QUAROT_OK) r = qx__pk_metadata(&P, f);
    for (i = 0; i < P.n && r == QUAROT_OK; ++i)
        if (qx__pk_ends(P.t[i].name, P.t[i].name_len, ".qweight")) r = qx__pk_linear(&P, f, &P.t[i]);
    if (r == QUAROT_OK) r = qx__pk_plains(&P, f);
    if (r == QUAROT_OK) r = qx__pk_binding(&P, f);
    free(P.t);
    free(P.order);
    qx_json_doc_free(&doc);
    if (r != QUAROT_OK) qx_packed_file_free(f);
    return r;
}

/* Stored code of column c of row r. */
static int qx__pk_code(const qx_packed_file* f, const qx_packed_linear* l, int64_t r, int64_t c) {
    const unsigned char* row = l->qweight + r * l->row_bytes;
    if (!qx__pk_packs_two(f->settings.w_bits)) return row[c];
    return (c & 1) ? row[c / 2] >> 4 : row[c / 2] & 15;
}

static float qx__pk_scale(const qx_packed_file* f, const qx_packed_linear* l, int64_t i) {
    return qx__pk_scale_at(f->settings.scale_dtype, l->scales, i);
}

void qx_packed_dequant_row(const qx_packed_file* f, const qx_packed_linear* l, int64_t r, float* out) {
    int64_t c;
    int half = 1 << (f->settings.w_bits - 1);
    for (c = 0; c < l->in; ++c) {
        int64_t gi = r * l->groups + c / l->group;
        float z = l->zeros ? (float)l->zeros[gi] : (float)half;
        out[c] = ((float)qx__pk_code(f, l, r, c) - z) * qx__pk_scale(f, l, gi);
    }
}

void qx_packed_codes(const qx_packed_file* f, const qx_packed_linear* l, int8_t* q, float* scales, float* zeros) {
    int64_t r, c, i;
    int half = 1 << (f->settings.w_bits - 1);
    for (r = 0; r < l->out; ++r)
        for (c = 0; c < l->in; ++c) q[r * l->in + c] = (int8_t)(qx__pk_code(f, l, r, c) - half);
    for (i = 0; i < l->out * l->groups; ++i) {
        scales[i] = qx__pk_scale(f, l, i);
        if (zeros) zeros[i] = l->zeros ? (float)(l->zeros[i] - half) : 0.0f;
    }
}

quarot_result qx_packed_read_mem(const void* buf, size_t len, const char* name, qx_store* s, qx_err* e) {
    qx_packed_file f;
    quarot_result r;
    int64_t i, row;
    if (!s) return QUAROT_ERR_INVALID_ARGUMENT;
    if (!name) name = "packed";
    r = qx_packed_parse(buf, len, name, &f, e);
    if (r != QUAROT_OK) return r;
    r = qx_hf_config_parse(f.config_json, strlen(f.config_json), name, &s->config, e);
    if (r == QUAROT_OK) s->config.rope_interleaved = f.settings.rope_interleaved;
    if (r == QUAROT_OK && strcmp(s->config.arch, "qwen2vl") == 0) {   /* the text decoder alone: as qwen2 (see the header) */
        int vision = 0;
        for (i = 0; i < f.n_plain && !vision; ++i) vision = strncmp(f.plain[i].name, "visual.", 7) == 0;
        for (i = 0; i < f.n_lin && !vision; ++i) vision = strncmp(f.lin[i].name, "visual.", 7) == 0;
        if (!vision) {
            snprintf(s->config.arch, sizeof s->config.arch, "qwen2");
            r = qx_store_set_blob(s, "vl.text", "qwen2vl", 7);
            if (r != QUAROT_OK) qx_err_set(e, "%s: out of memory", name);
        }
    }
    for (i = 0; i < f.n_plain && r == QUAROT_OK; ++i) {
        const qx_packed_plain* P = &f.plain[i];
        r = qx_store_add(s, P->name, P->dtype, P->n_dims, P->ne, P->data, NULL);
        if (r != QUAROT_OK) qx_err_set(e, "%s: tensor \"%s\": %s", name, P->name, quarot_result_string(r));
    }
    for (i = 0; i < f.n_lin && r == QUAROT_OK; ++i) {
        const qx_packed_linear* L = &f.lin[i];
        int64_t ne[2];
        quarot_tensor* t = NULL;
        ne[0] = L->in;
        ne[1] = L->out;
        r = qx_store_add(s, L->name, QUAROT_DTYPE_F32, 2, ne, NULL, &t);
        if (r != QUAROT_OK) { qx_err_set(e, "%s: tensor \"%s\": %s", name, L->name, quarot_result_string(r)); break; }
        for (row = 0; row < L->out; ++row) qx_packed_dequant_row(&f, L, row, (float*)t->data + row * L->in);
        if (!L->zeros) {   /* symmetric: W = f32(code) * scale exactly, the grid of the reference's integer products */
            float* sc = (float*)malloc((size_t)(L->out * L->groups) * sizeof(float));
            int64_t gi;
            if (!sc) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "%s: out of memory", name); break; }
            for (gi = 0; gi < L->out * L->groups; ++gi) sc[gi] = qx__pk_scale(&f, L, gi);
            r = qx_store_set_grid(s, L->name, f.settings.w_bits, L->out, L->in, L->group, sc);
            free(sc);
            if (r != QUAROT_OK) { qx_err_set(e, "%s: tensor \"%s\": %s", name, L->name, quarot_result_string(r)); break; }
        }
    }
    if (r == QUAROT_OK) r = qx_store_set_blob(s, "quarot.online", f.online, strlen(f.online));
    if (r == QUAROT_OK) {
        snprintf(s->source_format, sizeof s->source_format, "quarot-packed");
        r = qx_hf_check_tensors(s, name, e);
    }
    qx_packed_file_free(&f);
    return r;
}

quarot_result qx_packed_load(const char* path, qx_store* s, qx_err* e) {
    qx_map m;
    qx_store tmp;
    quarot_result r;
    if (!path || !s) return QUAROT_ERR_INVALID_ARGUMENT;
    if (s->count || s->n_blobs) { qx_err_set(e, "%s: the store to load into is not empty", path); return QUAROT_ERR_INVALID_ARGUMENT; }
    r = qx_map_file(path, &m, e);
    if (r != QUAROT_OK) return r;
    qx_store_init(&tmp);
    r = qx_packed_read_mem(m.addr, m.len, path, &tmp, e);
    qx_unmap(&m);
    if (r != QUAROT_OK) { qx_store_free(&tmp); return r; }
    *s = tmp;
    return QUAROT_OK;
}
