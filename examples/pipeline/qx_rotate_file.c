/* qx_rotate_file.c - see qx_rotate_file.h.

   Memory model: the binding below is the quarot_model the processor sees. A tensor of decoder
   layer i ("...layers.<i>....") is handed out only while layer i is acquired (anything else is
   refused and counted, which is how the tests prove the processing is layer-wise); global tensors
   at any time. Copies are made on acquire (rotation pass) and freed on release after they were
   written, so the live set is {globals} + {one layer}. A layer's copy buffers are kept on release
   and handed to the next layer's copies of the same size (every decoder layer has the same shapes):
   fresh pages cost a page fault and a kernel clear each (on some virtual machines 5-10 s per GB),
   reused ones nothing; buffers the next layer does not take are freed once its copies are made.
   Fresh copy buffers are advised onto 2 MiB pages (qx_thp_advise), the widening to f32 runs on the
   thread pool, and the processor's work buffers come from a qx_blockcache (recycled across tasks,
   commands and layers instead of fresh pages per task). The global tensors are written as soon as
   pre_run has rotated them (with the built-in writers), and their f32 copies (embeddings, lm_head:
   the largest blocks of the run) become slabs that the first layer's copies are carved from, so
   the first layer touches no fresh memory either and the peak is max(globals, one layer). Where
   the processor's global scope is row-separable and the writer takes row windows (safetensors,
   GGUF), large embedding and lm_head tables never exist whole: they stream through two window
   buffers of about 4 MiB (qx__stream_globals, quarot_processor_pre_run_rows) before the layers,
   and the peak is one layer. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* madvise */
#endif
#include "pipeline/qx_rotate_file.h"
#include "pipeline/qx_convert.h"
#include "support/qx_file.h"
#include "formats/qx_gguf.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_safetensors.h"
#include "support/qx_threads.h"
#include "support/qx_blockcache.h"
#include "model/qx_online.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- the output writer: one of the three formats behind put / finish / abort ---------------- */

typedef enum qx__out_kind { QX__OUT_L2C, QX__OUT_ST, QX__OUT_GGUF, QX__OUT_CALLER } qx__out_kind;

typedef struct qx__sink {
    qx__out_kind kind;
    qx_l2c_writer* l2c;
    qx_st_writer* st;
    qx_gguf_writer* gg;
    int64_t perm_hd;             /* > 0: q/k rows change RoPE layout (heads of perm_hd rows) on the way out */
    int to_interleaved;
    const qx_rotate_sink* caller;   /* QX__OUT_CALLER, begun */
    int direct_mode;             /* safetensors: how the weights were written (set on finish) */
    const char* leave_out;       /* opts.leave_out: names with this prefix are not written */
    int64_t left_out;            /* how many were put and not written */
} qx__sink;

/* q/k projections (weights, biases) and qwen3's per-head q/k norms carry the RoPE row order. */
static int qx__rope_rows(const char* name) {
    return strstr(name, ".self_attn.q_proj.") || strstr(name, ".self_attn.k_proj.") || strstr(name, ".self_attn.q_norm.") ||
           strstr(name, ".self_attn.k_norm.");
}

/* A contiguous copy of t with rows (a 1-D tensor: elements) permuted between RoPE layouts. */
static quarot_result qx__permuted(const quarot_tensor* t, int64_t hd, int to_il, quarot_tensor* out, void** mem) {
    int one = t->ne[1] == 1 && t->ne[2] == 1 && t->ne[3] == 1;
    int64_t rows = one ? t->ne[0] : quarot_tensor_nrows(t), r;
    size_t es = quarot_dtype_size(t->dtype), rb = one ? es : (size_t)t->ne[0] * es;
    char* m;
    quarot_result res;
    if (rows % hd != 0) return QUAROT_ERR_SHAPE_MISMATCH;
    res = quarot_tensor_init(out, NULL, t->dtype, QUAROT_MAX_DIMS, t->ne);
    if (res != QUAROT_OK) return res;
    m = (char*)malloc(rows ? (size_t)rows * rb : 1);
    if (!m) return QUAROT_ERR_OUT_OF_MEMORY;
    for (r = 0; r < rows; ++r) {
        int64_t src = qx_rope_src_row(r, hd, to_il);
        const char* from = one ? (const char*)t->data + (size_t)src * (size_t)t->nb[0]
                               : (const char*)t->data + (size_t)(src % t->ne[1]) * t->nb[1] + (size_t)((src / t->ne[1]) % t->ne[2]) * t->nb[2] +
                                     (size_t)(src / (t->ne[1] * t->ne[2])) * t->nb[3];
        memcpy(m + (size_t)r * rb, from, rb);
    }
    out->data = m;
    *mem = m;
    return QUAROT_OK;
}

static quarot_result qx__sink_put_raw(qx__sink* k, const char* name, const quarot_tensor* t, qx_err* e);

static quarot_result qx__sink_put(qx__sink* k, const char* name, const quarot_tensor* t, qx_err* e) {
    if (k->leave_out && strncmp(name, k->leave_out, strlen(k->leave_out)) == 0) {   /* not in the plan */
        k->left_out++;
        return QUAROT_OK;
    }
    if (k->perm_hd > 0 && strncmp(name, "model.layers.", 13) == 0 && qx__rope_rows(name)) {
        quarot_tensor pt;
        void* mem = NULL;
        quarot_result r = qx__permuted(t, k->perm_hd, k->to_interleaved, &pt, &mem);
        if (r != QUAROT_OK) {
            qx_err_set(e, "%s: cannot change the RoPE row order: %s", name, quarot_result_string(r));
            return r;
        }
        r = qx__sink_put_raw(k, name, &pt, e);
        free(mem);
        return r;
    }
    return qx__sink_put_raw(k, name, t, e);
}

static quarot_result qx__sink_put_raw(qx__sink* k, const char* name, const quarot_tensor* t, qx_err* e) {
    switch (k->kind) {
        case QX__OUT_L2C: return qx_l2c_writer_put(k->l2c, name, t, e);
        case QX__OUT_ST: return qx_st_writer_put(k->st, name, t, e);
        case QX__OUT_CALLER: return k->caller->put(k->caller->user, name, t, e);
        default: return qx_gguf_writer_put(k->gg, name, t, e);
    }
}

/* Rows [row0, row0 + t->ne[1]) of a streamed global (the formats that take row windows). */
static quarot_result qx__sink_put_rows(qx__sink* k, const char* name, int64_t row0, const quarot_tensor* t, qx_err* e) {
    switch (k->kind) {
        case QX__OUT_ST: return qx_st_writer_put_rows(k->st, name, row0, t, e);
        case QX__OUT_GGUF: return qx_gguf_writer_put_rows(k->gg, name, row0, t, e);
        case QX__OUT_CALLER: if (k->caller->put_rows) return k->caller->put_rows(k->caller->user, name, row0, t, e); /* fall through */
        default: qx_err_set(e, "%s: this output takes whole tensors only", name); return QUAROT_ERR_UNSUPPORTED;
    }
}

/* Expert ex of a stacked weight (t: its rows {in, out}): rows ex * out .. of the built-in formats,
   a caller's put_expert. */
static quarot_result qx__sink_put_expert(qx__sink* k, const char* name, int64_t ex, const quarot_tensor* t, qx_err* e) {
    if (k->kind == QX__OUT_CALLER && k->caller->put_expert) return k->caller->put_expert(k->caller->user, name, ex, t, e);
    return qx__sink_put_rows(k, name, ex * t->ne[1], t, e);
}

/* Publishes the output; the writer is freed in every case. */
static quarot_result qx__sink_finish(qx__sink* k, qx_err* e) {
    quarot_result r;
    switch (k->kind) {
        case QX__OUT_L2C: r = qx_l2c_writer_finish(k->l2c, e); break;
        case QX__OUT_ST: r = qx_st_writer_finish(k->st, e); break;
        case QX__OUT_CALLER: r = k->caller->finish(k->caller->user, e); break;
        default: r = qx_gguf_writer_finish(k->gg, e); break;
    }
    k->l2c = NULL; k->st = NULL; k->gg = NULL; k->caller = NULL;
    return r;
}

static void qx__sink_abort(qx__sink* k) {
    qx_l2c_writer_abort(k->l2c);
    qx_st_writer_abort(k->st);
    qx_gguf_writer_abort(k->gg);
    if (k->caller) k->caller->abort(k->caller->user);
    k->l2c = NULL; k->st = NULL; k->gg = NULL; k->caller = NULL;
}

/* ---- the binding ------------------------------------------------------------------------------ */

typedef struct qx__rf {
    qx_store* s;
    int phase;                   /* 0: validation (read-only views), 1: rotation (copies, written on release) */
    int64_t held;                /* the acquired layer, -1 none */
    int64_t live, n_layers;
    int drop;                    /* views are file mappings: madvise their pages away */
    size_t cur_bytes;
    qx__sink* sink;
    quarot_result werr;          /* first failure inside release (its message in werr_msg) */
    qx_err werr_msg;
    quarot_result in_err;        /* first bad input value found while copying (its message in in_msg) */
    qx_err in_msg;
    qx_rotate_file_stats* st;
    const qx_rotate_file_opts* o;
    /* phase clock: t_mark starts the running phase, fuse until a scope's first command, then rotate */
    double t_mark;
    int in_rotate;
    const quarot_rotate_desc* user_desc;   /* the caller's observers, forwarded */
    /* released copy buffers kept for the next layer (counted in cur_bytes until reused or freed) */
    void** spare;
    size_t* spare_bytes;
    int64_t n_spare, cap_spare;
    const quarot_env* env;       /* the pool (parallel widening of the copies) */
    double t_layer, layer_bytes; /* the held layer's start and input bytes (phase 1) */
    int64_t layers_done;         /* layers rotated so far */
    /* the global tensors' copies once written (after pre_run): the decoder layers' copies are carved
       out of them, so the first layer touches no fresh memory either (counted in cur_bytes) */
    char* slab[8];
    size_t slab_cap[8], slab_used[8];
    int n_slab;
    /* streamed globals: while win_on, get_tensor / create_tensor of the embedding and lm_head give
       the current window, win[k].t (quarot_processor_pre_run_rows' contract) */
    struct qx__win {
        char name[QUAROT_NAME_MAX];
        int created;             /* the untied lm_head: no input rows, create_tensor gives zeros */
        quarot_tensor src;       /* else the input's view the rows are copied from */
        quarot_dtype wdt;        /* the window's dtype (f16 / bf16 widened to f32, as qx__own) */
        int64_t ne0;
        char* mem;               /* room for the largest window */
        size_t bytes;            /* of mem */
        quarot_tensor t;         /* the current window */
    } win[2];
    int n_win, win_on;
    /* a stacked expert weight of the held layer taken one expert at a time (quarot_model.get_slice):
       expert slice_e's copy in slice_mem (NULL: none out), written as rows of the output on
       slice_done; slice_next experts of slice_name are written so far */
    char slice_name[QUAROT_NAME_MAX];
    int64_t slice_e, slice_next;
    char* slice_mem;
    size_t slice_bytes;
    quarot_tensor slice_t;
} qx__rf;

/* 1 if p was carved out of a slab (never passed to free). */
static int qx__in_slab(const qx__rf* b, const void* p) {
    int k;
    for (k = 0; k < b->n_slab; ++k)
        if ((const char*)p >= b->slab[k] && (const char*)p < b->slab[k] + b->slab_cap[k]) return 1;
    return 0;
}

/* A written global's block becomes a slab (else it is freed). */
static void qx__slab_add(qx__rf* b, void* p, size_t bytes) {
    if (b->n_slab == (int)(sizeof b->slab / sizeof b->slab[0]) || bytes < ((size_t)1 << 20)) {
        free(p);
        b->cur_bytes -= bytes;
        return;
    }
    b->slab[b->n_slab] = (char*)p;
    b->slab_cap[b->n_slab] = bytes;
    b->slab_used[b->n_slab] = 0;
    b->n_slab++;
}

/* bytes carved from a slab (64-byte aligned), NULL when none has room. */
static void* qx__slab_take(qx__rf* b, size_t bytes) {
    int k;
    for (k = 0; k < b->n_slab; ++k) {
        size_t at = (b->slab_used[k] + 63) & ~(size_t)63;
        if (at <= b->slab_cap[k] && b->slab_cap[k] - at >= bytes) {
            b->slab_used[k] = at + bytes;
            return b->slab[k] + at;
        }
    }
    return NULL;
}

static void qx__slabs_free(qx__rf* b) {
    while (b->n_slab > 0) {
        b->n_slab--;
        free(b->slab[b->n_slab]);
        b->cur_bytes -= b->slab_cap[b->n_slab];
    }
}

/* A buffer of exactly `bytes` from the spares, else malloc (then counted in cur_bytes). */
static void* qx__take(qx__rf* b, size_t bytes) {
    int64_t i;
    void* p;
    for (i = 0; i < b->n_spare; ++i)
        if (b->spare_bytes[i] == bytes) {
            p = b->spare[i];
            b->spare[i] = b->spare[b->n_spare - 1];
            b->spare_bytes[i] = b->spare_bytes[b->n_spare - 1];
            b->n_spare--;
            return p;
        }
    if ((p = qx__slab_take(b, bytes)) != NULL) return p;   /* already counted, already touched */
    p = malloc(bytes ? bytes : 1);
    if (p) b->cur_bytes += bytes;
    qx_thp_advise(p, bytes);   /* before the first write: one fault per 2 MiB */
    return p;
}

#define QX__EARLY_MIN ((size_t)64 << 20)   /* global copies from which step 4b writes them early */

/* Keeps a released copy for the next layer (frees it when the list cannot grow). */
static void qx__give(qx__rf* b, void* p, size_t bytes) {
    if (b->n_spare == b->cap_spare) {
        int64_t cap = b->cap_spare ? 2 * b->cap_spare : 16;
        void** ns = (void**)realloc(b->spare, (size_t)cap * sizeof *ns);
        size_t* nb;
        if (ns) b->spare = ns;
        nb = ns ? (size_t*)realloc(b->spare_bytes, (size_t)cap * sizeof *nb) : NULL;
        if (nb) b->spare_bytes = nb;
        if (!ns || !nb) {
            if (!qx__in_slab(b, p)) { free(p); b->cur_bytes -= bytes; }
            return;
        }
        b->cap_spare = cap;
    }
    b->spare[b->n_spare] = p;
    b->spare_bytes[b->n_spare] = bytes;
    b->n_spare++;
}

/* Frees the spares no copy took. */
static void qx__spares_free(qx__rf* b) {
    while (b->n_spare > 0) {
        b->n_spare--;
        if (qx__in_slab(b, b->spare[b->n_spare])) continue;   /* the slab is freed whole */
        free(b->spare[b->n_spare]);
        b->cur_bytes -= b->spare_bytes[b->n_spare];
    }
}

/* Ends the running fuse / rotate phase at now and starts the next one (fuse). */
static void qx__phase_end(qx__rf* b, double now) {
    if (b->in_rotate) b->st->rotate_s += now - b->t_mark;
    else b->st->fuse_s += now - b->t_mark;
    b->t_mark = now;
    b->in_rotate = 0;
}

/* The processor's observers: the first command of a scope ends its fusion phase. */
static int qx__on_command(void* user, const quarot_command* c) {
    qx__rf* b = (qx__rf*)user;
    if (b->phase == 1 && !b->in_rotate) {
        double now = qx_now();
        b->st->fuse_s += now - b->t_mark;
        b->t_mark = now;
        b->in_rotate = 1;
    }
    return b->user_desc->on_command ? b->user_desc->on_command(b->user_desc->user_data, c) : 0;
}

static void qx__on_progress(void* user, const char* stage, int64_t layer, int64_t n_layers) {
    qx__rf* b = (qx__rf*)user;
    if (b->user_desc->progress) b->user_desc->progress(b->user_desc->user_data, stage, layer, n_layers);
}

static qx_entry* qx__entry(qx_store* s, const char* name) {
    int64_t i;
    for (i = 0; i < s->count; ++i)
        if (strcmp(s->items[i].name, name) == 0) return &s->items[i];
    return NULL;
}

/* Hands the input's mapped pages back to the kernel. The views are clean private file pages, so
   this only shrinks the resident set (a later read faults them in from the file again). Whole
   mappings are dropped, not just a tensor's range: a read fault maps the whole large folio around
   the page (up to 2 MiB on current kernels), which would leave neighbouring tensors' pages behind.
   The mappings are the store's qx_map cleanups (every reader's file mapping); drop_pages says the
   caller's views are such mappings. */
static void qx__drop_pages(const qx__rf* b) {
    int64_t i;
    const qx_store* ms = b->o->drop_from ? b->o->drop_from : b->s;
    if (!b->drop) return;
    for (i = 0; i < ms->n_cleanups; ++i)
        if (ms->cleanups[i].fn == qx_unmap_and_free) {
            const qx_map* m = (const qx_map*)ms->cleanups[i].arg;
            if (m && m->addr && m->len) (void)madvise(m->addr, m->len, MADV_DONTNEED);
        }
}

/* The file behind a view, opened for pread, with the view's offset in it: only where drop_pages
   says the views are clean file mappings (the same bytes as the file) and the tensor's rows are
   contiguous; -1 otherwise (then the copies read the mapping, as they do with QX_NO_PREAD set). */
static int qx__open_backing(const qx__rf* b, const quarot_tensor* t, int64_t* off) {
    const qx_store* ms = b->o->drop_from ? b->o->drop_from : b->s;
    size_t es = quarot_dtype_size(t->dtype);
    int64_t i;
    if (getenv("QX_NO_PREAD")) return -1;   /* measuring: the copies fault the mapped pages in instead */
    if (!b->drop || !t->data || t->nb[0] != es || t->nb[1] != (size_t)t->ne[0] * es || t->nb[2] != t->nb[1] * (size_t)t->ne[1] ||
        t->nb[3] != t->nb[2] * (size_t)t->ne[2])
        return -1;
    for (i = 0; i < ms->n_cleanups; ++i)
        if (ms->cleanups[i].fn == qx_unmap_and_free) {
            const qx_map* m = (const qx_map*)ms->cleanups[i].arg;
            const char* p = (const char*)t->data;
            if (m && m->addr && m->path && p >= (const char*)m->addr && p + quarot_tensor_nbytes(t) <= (const char*)m->addr + m->len) {
                *off = (int64_t)(p - (const char*)m->addr);
                return open(m->path, O_RDONLY | O_CLOEXEC);
            }
        }
    return -1;
}

/* Rows [task*rpt, ...) of a view widened to f32 into a contiguous copy (a pool task), each
   row checked for NaN / Inf as it is written (the processor's validation leaves the values to us:
   quarot_rotate_desc.values_checked_by_caller): bad[task] = the first bad flat index, -1 none.
   f16 / bf16 NaN and Inf widen to f32 NaN and Inf (and no other value does), so a row is checked on
   its source where that was just read with pread, else on the copy. */
#define QX__OWN_ROWS 256
#define QX__PREAD_BYTES ((size_t)64 << 10)   /* rows read per pread: stays in L2 for the widening */
typedef struct qx__own_job {
    const quarot_tensor* src;
    char* mem;
    size_t es;
    int same;                    /* copy as is (no widening) */
    int64_t* bad;                /* [tasks] */
    int fd;                      /* >= 0: read the (contiguous) rows from this file at off with pread */
    int64_t off;
    int64_t rpt;                 /* rows per task */
} qx__own_job;

/* Rows [r, end) read with pread (into the copy itself when no widening, else through buf and
   widened from there); returns the first row not done (a failed read leaves the rest to the
   mapping). Reading the file this way costs a copy from the page cache; faulting the mapped pages
   in costs a page-table update per page (plus the kernel's clearing of them again on drop), which
   measured ~2x slower here. A widened row is checked for NaN / Inf on its f16 / bf16 source, just
   read (half the bytes of the copy: f16 / bf16 NaN and Inf are exactly the values that widen to f32
   NaN and Inf); *bad = the first bad flat index of the task's rows. Rows copied as they are (same)
   are checked by the caller. */
static int64_t qx__own_pread(const qx__own_job* j, int64_t r, int64_t end, char** buf, int64_t* bad) {
    const quarot_tensor* src = j->src;
    size_t in_row = (size_t)src->ne[0] * quarot_dtype_size(src->dtype), out_row = (size_t)src->ne[0] * j->es;
    int64_t chunk = (int64_t)(QX__PREAD_BYTES / in_row), k, ne0 = src->ne[0], at;
    quarot_tensor rv;   /* one source row, for quarot_tensor_check_finite */
    if (chunk < 1) chunk = 1;
    (void)quarot_tensor_init(&rv, NULL, src->dtype, 1, &ne0);   /* ne0 >= 1 of a valid tensor */
    while (r < end) {
        int64_t c = end - r < chunk ? end - r : chunk;
        char* dst = j->mem + (size_t)r * out_row;
        if (j->same) {
            if (!qx_pread_all(j->fd, dst, (size_t)c * in_row, j->off + r * (int64_t)in_row)) return r;
        } else {
            if (!*buf && !(*buf = (char*)malloc((size_t)chunk * in_row))) return r;
            if (!qx_pread_all(j->fd, *buf, (size_t)c * in_row, j->off + r * (int64_t)in_row)) return r;
            for (k = 0; k < c; ++k) {
                rv.data = *buf + (size_t)k * in_row;
                (void)quarot_convert(dst + (size_t)k * out_row, QUAROT_DTYPE_F32, rv.data, src->dtype, ne0, QUAROT_ISA_DEFAULT);
                if (*bad < 0 && quarot_tensor_check_finite(&rv, &at) == QUAROT_ERR_NONFINITE) *bad = (r + k) * ne0 + at;
            }
        }
        r += c;
    }
    return r;
}

static void qx__own_task(void* arg, int64_t task) {
    const qx__own_job* j = (const qx__own_job*)arg;
    const quarot_tensor* src = j->src;
    int64_t rows = quarot_tensor_nrows(src), r = task * j->rpt, end = r + j->rpt < rows ? r + j->rpt : rows;
    int64_t done = r, ne0 = src->ne[0];
    char* buf = NULL;
    quarot_tensor rv;   /* one row of the copy, for quarot_tensor_check_finite */
    j->bad[task] = -1;
    (void)quarot_tensor_init(&rv, NULL, j->same ? src->dtype : QUAROT_DTYPE_F32, 1, &ne0);   /* ne0 >= 1 of a valid tensor */
    if (j->fd >= 0) done = qx__own_pread(j, r, end, &buf, &j->bad[task]);
    free(buf);
    for (; r < end; ++r) {
        char* dst = j->mem + (size_t)r * (size_t)src->ne[0] * j->es;
        int64_t at;
        if (r < done) {
            if (!j->same) continue;   /* read, widened and checked on its source above */
        } else if (j->same) {
            int64_t i1 = r % src->ne[1], i2 = (r / src->ne[1]) % src->ne[2], i3 = r / (src->ne[1] * src->ne[2]);
            memcpy(dst, (const char*)src->data + (size_t)i1 * src->nb[1] + (size_t)i2 * src->nb[2] + (size_t)i3 * src->nb[3],
                   (size_t)src->ne[0] * j->es);
        } else {
            (void)quarot_tensor_get_row_f32(src, r, (float*)dst);
        }
        if (j->bad[task] < 0) {   /* the row was just written: read from L1 */
            rv.data = dst;
            if (quarot_tensor_check_finite(&rv, &at) == QUAROT_ERR_NONFINITE) j->bad[task] = r * ne0 + at;
        }
    }
}

/* The message for a NaN / Inf at flat index `first` of a tensor with rows of ne0 (row0: the row the
   copy started at; a decoder layer's tensor is prefixed with its layer). */
static void qx__nonfinite_msg(qx_err* e, const char* name, int64_t ne0, int64_t row0, int64_t first) {
    int64_t L = qx_name_layer(name, NULL, NULL);
    char where[40] = "";
    if (L >= 0) snprintf(where, sizeof where, "layer %lld: ", (long long)L);
    qx_err_set(e, "%stensor '%s' has NaN or Inf at element %lld (row %lld, column %lld)", where, name, (long long)(row0 * ne0 + first),
               (long long)(row0 + first / ne0), (long long)(first % ne0));
}

/* Replace a view by a writable contiguous copy (f16/bf16 widened to f32 so the processor's several
   passes over a tensor round only once, when it is written). A NaN or Inf anywhere in it gives
   QUAROT_ERR_NONFINITE with the tensor, element and row in b->in_msg (the copy is kept as the
   entry's, freed with the others). */
/* The dtype a view's writable copy gets: f16 / bf16 widened to f32, others as they are. */
static quarot_dtype qx__copy_dtype(quarot_dtype dt) {
    return (dt == QUAROT_DTYPE_F16 || dt == QUAROT_DTYPE_BF16) ? QUAROT_DTYPE_F32 : dt;
}

/* src (a view) into mem as contiguous rows of qx__copy_dtype, on the pool; *first = the first flat
   index holding NaN / Inf, -1 none. */
static quarot_result qx__copy_view(const qx__rf* b, const quarot_tensor* src, char* mem, int64_t* first) {
    quarot_dtype wdt = qx__copy_dtype(src->dtype);
    int64_t rows = quarot_tensor_nrows(src), k, tasks;
    int64_t bad_local[64];
    qx__own_job job;
    /* QX__OWN_ROWS rows a task, fewer for a small tensor or a streamed window (at least 8 tasks) */
    job.rpt = (rows + 7) / 8 < QX__OWN_ROWS ? (rows + 7) / 8 : QX__OWN_ROWS;
    tasks = (rows + job.rpt - 1) / job.rpt;
    job.bad = tasks <= 64 ? bad_local : (int64_t*)malloc((size_t)tasks * sizeof(int64_t));
    if (!job.bad) return QUAROT_ERR_OUT_OF_MEMORY;
    job.src = src;
    job.mem = mem;
    job.es = quarot_dtype_size(wdt);
    job.same = wdt == src->dtype;
    job.fd = qx__open_backing(b, src, &job.off);
    quarot_env_parallel_for(b->env, qx__own_task, &job, tasks);
    if (job.fd >= 0) close(job.fd);
    *first = -1;
    for (k = 0; k < tasks && *first < 0; ++k) *first = job.bad[k];   /* the lowest task's: the same for any split */
    if (job.bad != bad_local) free(job.bad);
    return QUAROT_OK;
}

static quarot_result qx__own(qx__rf* b, qx_entry* en) {
    quarot_tensor src = en->t, nt;
    size_t bytes;
    int64_t first = -1;
    char* mem;
    quarot_result res;
    if (en->owned) return QUAROT_OK;
    res = quarot_tensor_init(&nt, NULL, qx__copy_dtype(src.dtype), QUAROT_MAX_DIMS, src.ne);
    if (res != QUAROT_OK) return res;
    bytes = quarot_tensor_nbytes(&nt);
    mem = (char*)qx__take(b, bytes);
    if (!mem) return QUAROT_ERR_OUT_OF_MEMORY;
    nt.data = mem;
    res = qx__copy_view(b, &src, mem, &first);
    if (res != QUAROT_OK) {
        if (!qx__in_slab(b, mem)) { free(mem); b->cur_bytes -= bytes; }
        return res;
    }
    en->t = nt;
    en->owned = mem;
    qx__drop_pages(b);
    if (b->cur_bytes > b->st->peak_copy_bytes) b->st->peak_copy_bytes = b->cur_bytes;
    if (first >= 0) {
        qx__nonfinite_msg(&b->in_msg, en->name, nt.ne[0], 0, first);
        b->in_err = QUAROT_ERR_NONFINITE;
        return QUAROT_ERR_NONFINITE;
    }
    return QUAROT_OK;
}

/* The streamed global `name`, NULL when it is not one. */
static struct qx__win* qx__win_named(qx__rf* b, const char* name) {
    int k;
    for (k = 0; k < b->n_win; ++k)
        if (strcmp(b->win[k].name, name) == 0) return &b->win[k];
    return NULL;
}

/* The same while a window runs (what the binding hands out instead of the store's entry). */
static struct qx__win* qx__win_of(qx__rf* b, const char* name) { return b->win_on ? qx__win_named(b, name) : NULL; }

static quarot_result qx__get(void* user, const char* name, quarot_tensor* out) {
    qx__rf* b = (qx__rf*)user;
    qx_entry* en;
    struct qx__win* w = qx__win_of(b, name);
    int64_t L;
    if (w) {
        *out = w->t;
        return QUAROT_OK;
    }
    en = qx__entry(b->s, name);
    if (!en) return QUAROT_ERR_NOT_FOUND;
    L = qx_name_layer(name, NULL, NULL);
    if (L >= 0 && L != b->held) {   /* a layer that is not in memory */
        b->st->out_of_layer++;
        return QUAROT_ERR_STATE;
    }
    if (!en->t.data) return QUAROT_ERR_STATE;   /* a global already written (step 4b) */
    /* validation reads the views tensor by tensor: let the previous tensors' pages go first, so
       the mapped input stays near one tensor (rounded to the page cache's folios) */
    if (b->phase == 0 && !en->owned) qx__drop_pages(b);
    if (b->phase == 1 && L >= 0 && !en->owned) {   /* the rotation pass copies a layer's tensor when first asked */
        double t0 = qx_now();
        quarot_result r;
        b->layer_bytes += (double)quarot_tensor_nbytes(&en->t);
        r = qx__own(b, en);
        b->st->read_s += qx_now() - t0;
        if (r != QUAROT_OK) return r;
    }
    *out = en->t;
    return QUAROT_OK;
}

static quarot_result qx__create(void* user, const char* name, quarot_dtype dt, int n_dims, const int64_t* ne, quarot_tensor* out) {
    qx__rf* b = (qx__rf*)user;
    quarot_tensor* t;
    struct qx__win* w = qx__win_of(b, name);
    quarot_result r;
    if (w) {   /* the untied lm_head, asked in the first window: its rows start as zeros */
        if (!w->created || dt != w->wdt || n_dims != 2 || ne[0] != w->ne0) return QUAROT_ERR_SHAPE_MISMATCH;
        memset(w->t.data, 0, quarot_tensor_nbytes(&w->t));
        *out = w->t;
        return QUAROT_OK;
    }
    r = qx_store_add(b->s, name, dt, n_dims, ne, NULL, &t);
    if (r != QUAROT_OK) return r;
    b->cur_bytes += quarot_tensor_nbytes(t);
    if (b->cur_bytes > b->st->peak_copy_bytes) b->st->peak_copy_bytes = b->cur_bytes;
    if (qx_name_layer(name, NULL, NULL) < 0) b->st->global_copy_bytes += quarot_tensor_nbytes(t);
    *out = *t;
    return QUAROT_OK;
}

static quarot_result qx__acquire(void* user, int64_t layer) {
    qx__rf* b = (qx__rf*)user;
    int64_t i;
    if (b->held >= 0) return QUAROT_ERR_STATE;   /* one layer at a time */
    b->held = layer;
    b->st->acquires++;
    if (++b->live > b->st->max_live_layers) b->st->max_live_layers = b->live;
    if (b->o->progress) b->o->progress(b->o->user, b->phase ? "rotate" : "validate", layer, b->n_layers);
    if (b->phase == 1) {
        double t0 = qx_now();
        b->t_layer = t0;
        b->layer_bytes = 0.0;
        (void)i;   /* the copies are made when the processor first asks (qx__get) and written after the
                      last command on them (qx__tensor_done), so a layer never exists whole in f32 */
        b->t_mark = qx_now();
        b->in_rotate = 0;
        b->st->read_s += b->t_mark - t0;
    }
    return QUAROT_OK;
}

/* 1 when the output takes a stacked expert weight one expert at a time (the built-in safetensors
   and GGUF writers as rows, a caller's sink with put_expert; one without gets whole tensors, its
   put_rows is for the embedding and lm_head; a tensor opts.leave_out names is put whole, i.e. not
   written) and opts.whole_experts does not say otherwise. */
static int qx__sink_rows(const qx__rf* b, const char* name) {
    const qx__sink* k = b->sink;
    if (b->o->whole_experts || !k || (k->leave_out && strncmp(name, k->leave_out, strlen(k->leave_out)) == 0)) return 0;
    return k->kind == QX__OUT_ST || k->kind == QX__OUT_GGUF || (k->kind == QX__OUT_CALLER && k->caller && k->caller->put_expert);
}

/* Expert e of a stacked weight [n][out][in] of the held layer (quarot_model.get_slice): a copy of its
   rows widened as qx__own widens, so the processor's arithmetic sees the same values as in the whole
   copy; experts in order, one out at a time. An output that takes whole tensors only gets the whole
   copy (made on the first expert), handed out a slice at a time and written by tensor_done. */
static quarot_result qx__get_slice(void* user, const char* name, int64_t e, quarot_tensor* out) {
    qx__rf* b = (qx__rf*)user;
    qx_entry* en = qx__entry(b->s, name);
    quarot_tensor src, nt;
    int64_t first = -1;
    double t0 = qx_now();
    quarot_result r;
    if (!en) return QUAROT_ERR_NOT_FOUND;
    if (b->phase != 1 || qx_name_layer(name, NULL, NULL) != b->held) {
        b->st->out_of_layer++;
        return QUAROT_ERR_STATE;
    }
    if (en->t.ne[3] != 1 || e < 0 || e >= en->t.ne[2] || b->slice_mem) return QUAROT_ERR_STATE;
    if (!en->owned && !qx__sink_rows(b, name)) {
        b->layer_bytes += (double)quarot_tensor_nbytes(&en->t);
        r = qx__own(b, en);
        b->st->read_s += qx_now() - t0;
        if (r != QUAROT_OK) return r;
    }
    src = en->t;   /* expert e as a contiguous 2-D view (of the input, or of the whole copy) */
    src.data = (char*)en->t.data + (size_t)e * en->t.nb[2];
    src.ne[2] = 1;
    src.nb[2] = src.nb[3] = src.nb[1] * (size_t)src.ne[1];
    if (en->owned) {
        *out = src;
        return QUAROT_OK;
    }
    if (e != (b->slice_name[0] ? b->slice_next : 0) || (b->slice_name[0] && strcmp(b->slice_name, name) != 0))
        return QUAROT_ERR_STATE;   /* the output's rows come in order: experts 0, 1, ... of one weight */
    if ((r = quarot_tensor_init(&nt, NULL, qx__copy_dtype(src.dtype), 2, src.ne)) != QUAROT_OK) return r;
    b->slice_bytes = quarot_tensor_nbytes(&nt);
    if (!(b->slice_mem = (char*)qx__take(b, b->slice_bytes))) return QUAROT_ERR_OUT_OF_MEMORY;
    nt.data = b->slice_mem;
    r = qx__copy_view(b, &src, b->slice_mem, &first);
    b->layer_bytes += (double)quarot_tensor_nbytes(&src);
    if (r == QUAROT_OK) {
        qx__drop_pages(b);
        if (b->cur_bytes > b->st->peak_copy_bytes) b->st->peak_copy_bytes = b->cur_bytes;
    }
    if (r == QUAROT_OK && first >= 0) {   /* the whole copy's message: rows counted across the experts */
        qx__nonfinite_msg(&b->in_msg, name, nt.ne[0], e * nt.ne[1], first);
        b->in_err = r = QUAROT_ERR_NONFINITE;
    }
    b->st->read_s += qx_now() - t0;
    if (r != QUAROT_OK) {
        qx__give(b, b->slice_mem, b->slice_bytes);
        b->slice_mem = NULL;
        return r;
    }
    snprintf(b->slice_name, sizeof b->slice_name, "%s", name);
    b->slice_e = e;
    b->slice_t = nt;
    *out = nt;
    return QUAROT_OK;
}

/* The processor is done with expert e (quarot_model.slice_done): its rows are written and the copy
   goes to the spares, where the next expert's copy takes it; after the last expert the store forgets
   the weight (tensor_done and release find nothing left to write). */
static quarot_result qx__slice_done(void* user, const char* name, int64_t e) {
    qx__rf* b = (qx__rf*)user;
    qx_entry* en = qx__entry(b->s, name);
    double t0 = qx_now();
    if (!en) return QUAROT_ERR_NOT_FOUND;
    if (en->owned && !b->slice_mem) return QUAROT_OK;   /* the whole copy: tensor_done writes it */
    if (!b->slice_mem || e != b->slice_e || strcmp(name, b->slice_name) != 0) return QUAROT_ERR_STATE;
    if (b->werr == QUAROT_OK) b->werr = qx__sink_put_expert(b->sink, name, e, &b->slice_t, &b->werr_msg);
    qx__give(b, b->slice_mem, b->slice_bytes);
    b->slice_mem = NULL;
    b->slice_next = e + 1;
    b->st->expert_slices++;
    if (b->slice_next == en->t.ne[2]) {
        if (b->werr == QUAROT_OK) b->st->tensors_written++;
        b->slice_name[0] = 0;
        b->slice_next = 0;
        (void)qx_store_remove(b->s, name);
    }
    b->st->write_s += qx_now() - t0;
    return b->werr;
}

/* Release of a layer with a stacked weight only partly written (the processor stopped between its
   experts, i.e. the run fails): the copy out goes back and the weight is not written again whole
   (the writer's finish would refuse the incomplete tensor; the run never gets there). */
static void qx__slices_abandon(qx__rf* b) {
    if (b->slice_mem) {
        qx__give(b, b->slice_mem, b->slice_bytes);
        b->slice_mem = NULL;
    }
    if (b->slice_name[0]) {
        (void)qx_store_remove(b->s, b->slice_name);
        b->slice_name[0] = 0;
        b->slice_next = 0;
    }
}

static quarot_result qx__release(void* user, int64_t layer, int modified) {
    qx__rf* b = (qx__rf*)user;
    int64_t i = 0;
    (void)modified;
    double t0;
    if (b->held != layer) return QUAROT_ERR_STATE;
    t0 = qx_now();
    if (b->phase == 1) qx__phase_end(b, t0);
    qx__slices_abandon(b);
    while (i < b->s->count) {
        qx_entry* en = &b->s->items[i];
        if (qx_name_layer(en->name, NULL, NULL) != layer) { ++i; continue; }
        if (b->phase == 0) { ++i; continue; }   /* validation only read it */
        /* after a bad input value stopped the run (in_err) nothing more is copied or written */
        if (b->werr == QUAROT_OK && b->in_err == QUAROT_OK && !en->owned) {   /* no command touched it: written
                                                                                through a copy as the others */
            b->layer_bytes += (double)quarot_tensor_nbytes(&en->t);
            b->werr = qx__own(b, en);
            if (b->werr == QUAROT_ERR_NONFINITE) b->werr_msg = b->in_msg;
        }
        if (b->werr == QUAROT_OK && b->in_err == QUAROT_OK) {
            b->werr = qx__sink_put(b->sink, en->name, &en->t, &b->werr_msg);
            if (b->werr == QUAROT_OK) b->st->tensors_written++;
        }
        if (en->owned) {   /* the copy goes to the spares, the store forgets it */
            qx__give(b, en->owned, quarot_tensor_nbytes(&en->t));
            en->owned = NULL;
        }
        (void)qx_store_remove(b->s, en->name);   /* the next entry moves to i */
    }
    qx__drop_pages(b);   /* what the validation pass read, or the copies were made from */
    if (b->phase == 1) {
        b->t_mark = qx_now();
        b->st->write_s += b->t_mark - t0;
        if (b->layers_done++ == 0) {
            b->st->first_layer_s += b->t_mark - b->t_layer;
            b->st->first_layer_bytes += b->layer_bytes;
        } else {
            b->st->later_layers_s += b->t_mark - b->t_layer;
            b->st->later_layers_bytes += b->layer_bytes;
        }
    }
    b->held = -1;
    b->live--;
    b->st->releases++;
    if (b->o->progress && b->phase == 1) b->o->progress(b->o->user, "rotate", layer + 1, b->n_layers);
    return b->werr;
}

/* The processor is done with a tensor of the held layer (quarot_model.tensor_done): it is written
   now and its copy goes to the spares, where the layer's next copy of the same size takes it. */
static quarot_result qx__tensor_done(void* user, const char* name) {
    qx__rf* b = (qx__rf*)user;
    qx_entry* en;
    double t0;
    if (b->phase != 1 || qx_name_layer(name, NULL, NULL) != b->held) return QUAROT_OK;
    en = qx__entry(b->s, name);
    if (!en || !en->owned) return QUAROT_OK;   /* written already, or never copied (release writes it) */
    t0 = qx_now();
    if (b->werr == QUAROT_OK) {
        b->werr = qx__sink_put(b->sink, en->name, &en->t, &b->werr_msg);
        if (b->werr == QUAROT_OK) b->st->tensors_written++;
    }
    qx__give(b, en->owned, quarot_tensor_nbytes(&en->t));
    en->owned = NULL;
    (void)qx_store_remove(b->s, name);
    b->st->write_s += qx_now() - t0;
    return b->werr;
}

/* ---- planning --------------------------------------------------------------------------------- */

/* The output's tensors: the store's (views, before any copy) and the processor's creations. The
   names point into the store and the processor: valid until the tensor is written and removed. */
static quarot_result qx__plan(const qx_store* s, const quarot_processor* p, quarot_dtype dt, const char* fmt,
                              const char* leave_out, qx_tensor_plan** out, int64_t* n_out) {
    int64_t i, n = 0;
    /* GGUF keeps vectors (norms, biases) in f32 under a dtype change or a conversion, as llama.cpp's
       converter does */
    int vec_f32 = strcmp(fmt, "gguf") == 0 && (dt != QUAROT_DTYPE_DEFAULT || strcmp(s->source_format, "gguf") != 0);
    qx_tensor_plan* pl = (qx_tensor_plan*)calloc((size_t)(s->count + p->n_creates + 1), sizeof *pl);
    if (!pl) return QUAROT_ERR_OUT_OF_MEMORY;
    for (i = 0; i < s->count; ++i) {
        if (leave_out && leave_out[0] && strncmp(s->items[i].name, leave_out, strlen(leave_out)) == 0) continue;
        pl[n].name = s->items[i].name;
        pl[n].dtype = dt != QUAROT_DTYPE_DEFAULT ? dt : s->items[i].t.dtype;
        memcpy(pl[n].ne, s->items[i].t.ne, sizeof pl[n].ne);
        pl[n].n_dims = qx_plan_rank(pl[n].ne);
        if (!qx_store_get_shape(s, pl[n].name, &s->items[i].t, &pl[n].rank, &pl[n].shape)) pl[n].shape = NULL;
        ++n;
    }
    for (i = 0; i < p->n_creates; ++i) {
        const quarot_tensor_spec* c = &p->creates[i];
        if (qx_store_find(s, c->name)) continue;
        pl[n].name = c->name;
        pl[n].dtype = dt != QUAROT_DTYPE_DEFAULT ? dt : c->dtype;
        memcpy(pl[n].ne, c->ne, sizeof pl[n].ne);
        pl[n].n_dims = qx_plan_rank(pl[n].ne);
        ++n;
    }
    for (i = 0; i < n && vec_f32; ++i)
        if (pl[i].n_dims == 1) pl[i].dtype = QUAROT_DTYPE_F32;
    *out = pl;
    *n_out = n;
    return QUAROT_OK;
}

static int qx__planned(const qx_tensor_plan* pl, int64_t n, const char* name) {
    int64_t i;
    for (i = 0; i < n; ++i)
        if (strcmp(pl[i].name, name) == 0) return 1;
    return 0;
}

/* The output format (o->out_format, else the input's). */
static const char* qx__out_format(const qx_store* s, const qx_rotate_file_opts* o) {
    return o->out_format && o->out_format[0] ? o->out_format : s->source_format;
}

/* torch_dtype for config.json: the dtype the embedding (else the first matrix) is written in. */
static const char* qx__plan_torch_dtype(const qx_tensor_plan* pl, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i)
        if (strcmp(pl[i].name, "model.embed_tokens.weight") == 0) return qx_convert_torch_dtype(pl[i].dtype);
    for (i = 0; i < n; ++i)
        if (pl[i].n_dims >= 2) return qx_convert_torch_dtype(pl[i].dtype);
    return NULL;
}

/* Opens the writer for the output format (after pre_run: the config says whether lm_head exists). */
static quarot_result qx__sink_begin(qx__sink* k, const qx_store* s, const qx_tensor_plan* pl, int64_t n,
                                    const qx_rotate_file_opts* o, const quarot_env* env, qx_err* e) {
    const char* fmt = qx__out_format(s, o);
    int il;
    memset(k, 0, sizeof *k);
    k->leave_out = o->leave_out && o->leave_out[0] ? o->leave_out : NULL;
    if (o->sink) {
        quarot_result r = o->sink->begin(o->sink->user, s, pl, n, e);
        k->kind = QX__OUT_CALLER;
        if (r == QUAROT_OK) k->caller = o->sink;
        return r;
    }
    il = qx_convert_interleaved(fmt, s->config.arch);
    if (il != (s->config.rope_interleaved != 0)) {
        k->perm_hd = s->config.head_dim ? s->config.head_dim : s->config.hidden / (s->config.n_heads ? s->config.n_heads : 1);
        k->to_interleaved = il;
    }
    if (strncmp(fmt, "llama2c", 7) == 0) {
        qx_l2c_write_opts wo;
        quarot_model_config oc = s->config;
        memset(&wo, 0, sizeof wo);
        wo.format = strcmp(fmt, "llama2c-v1") == 0 ? QX_L2C_V1 : QX_L2C_V0;
        wo.force = o->force;
        k->kind = QX__OUT_L2C;
        oc.rope_interleaved = il;   /* the rows are permuted on the way out when the input's layout differs */
        return qx_l2c_writer_begin(&k->l2c, o->out_path, &oc, !qx__planned(pl, n, "lm_head.weight"), &wo, e);
    }
    if (strncmp(fmt, "safetensors", 11) == 0) {
        qx_st_write_opts wo;
        size_t ol = strlen(o->out_path);
        int single = ol > 12 && strcmp(o->out_path + ol - 12, ".safetensors") == 0;
        qx_sb cfg, meta;
        quarot_result r = QUAROT_OK;
        memset(&wo, 0, sizeof wo);
        memset(&cfg, 0, sizeof cfg);
        memset(&meta, 0, sizeof meta);
        wo.force = o->force;
        wo.direct = 1;   /* O_DIRECT from reused block buffers: no page cache pages for the weights */
        wo.direct_mode = &k->direct_mode;
        wo.env = env;    /* the output conversion on the pool too (it idles while a layer is written) */
        wo.shard_bytes = single ? 0 : o->shard_bytes;
        wo.metadata_json = (const char*)qx_store_get_blob(s, "safetensors.metadata", NULL);
        wo.n_rename = qx_hf_file_renames(s, &wo.rename);   /* the names the input was read with */
        if (o->hooks_path) {   /* marks the model as needing its hook file (qx_model_needs_hooks) */
            const char* m = wo.metadata_json;
            const char* body = m ? strchr(m, '{') : NULL;
            const char* rest = body ? body + 1 : "}";
            while (*rest == ' ' || *rest == '\n' || *rest == '\t' || *rest == '\r') ++rest;
            qx_sb_printf(&meta, "{\"quarot.online_hooks\":\"%s\"%s%s", single ? "beside the file (.quarot-online)" : "quarot_online.txt",
                         *rest == '}' ? "" : ",", rest);
            wo.metadata_json = meta.p;
        }
        if (!single) {
            r = qx_convert_hf_config(s, qx__plan_torch_dtype(pl, n), &cfg, e);   /* tie_word_embeddings, torch_dtype */
            wo.config_json = cfg.p;
        }
        k->kind = QX__OUT_ST;
        if (r == QUAROT_OK) r = qx_st_writer_begin(&k->st, o->out_path, pl, n, &wo, e);
        qx_sb_free(&cfg);
        qx_sb_free(&meta);
        return r;
    }
    if (strcmp(fmt, "gguf") == 0) {
        qx_gguf_write_opts wo;
        qx_gguf_set set[2];
        size_t kv_len = 0;
        const void* kv = qx_store_get_blob(s, "gguf.kv", &kv_len);
        memset(&wo, 0, sizeof wo);
        memset(set, 0, sizeof set);
        wo.force = o->force;
        wo.set = set;
        if (o->dtype != QUAROT_DTYPE_DEFAULT) {   /* llama.cpp's LLAMA_FTYPE: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32 */
            set[wo.n_set].key = "general.file_type";
            set[wo.n_set].type = QX_GGUF_U32;
            set[wo.n_set++].u = o->dtype == QUAROT_DTYPE_F16 ? 1u : o->dtype == QUAROT_DTYPE_BF16 ? 32u : 0u;
        }
        if (o->hooks_path) {   /* marks the model as needing its hook file (qx_model_needs_hooks) */
            set[wo.n_set].key = "quarot.online_hooks";
            set[wo.n_set].type = QX_GGUF_STRING;
            set[wo.n_set++].str = "beside the file (.quarot-online)";
        }
        k->kind = QX__OUT_GGUF;
        return qx_gguf_writer_begin(&k->gg, o->out_path, pl, n, kv, kv_len, &wo, e);
    }
    qx_err_set(e, "%s: no writer for the input's format \"%s\"", o->out_path, fmt);
    return QUAROT_ERR_UNSUPPORTED;
}

/* ---- streamed globals --------------------------------------------------------------------------- */

#define QX__WIN_BYTES ((size_t)4 << 20)   /* a streamed table's window in its copy dtype (auto) */

/* Whether the embedding and lm_head go through in row windows, and how many rows a window: 0 = whole
   copies (st->global_whole_why says why when the windows were asked for or the tables are large). */
static int64_t qx__window_rows(const qx_store* s, quarot_processor* p, quarot_model* m, const qx_rotate_file_opts* o,
                               qx_rotate_file_stats* st) {
    const char* fmt = qx__out_format(s, o);
    const quarot_tensor* e = qx_store_find(s, p->plan.embed);
    const char* env = getenv("QX_GLOBAL_WINDOW_ROWS");   /* tests: windows of that many rows for the auto case */
    int64_t total = 0, es, asked = o->global_window_rows == 0 && env && atoll(env) > 0 ? (int64_t)atoll(env) : o->global_window_rows;
    size_t bytes;
    const char* why = NULL;
    if (asked < 0 || !e) return 0;
    es = (int64_t)quarot_dtype_size(qx__copy_dtype(e->dtype));
    bytes = (size_t)(e->ne[0] * e->ne[1] * es) * ((qx_store_find(s, p->plan.lm_head) || p->untie) ? 2u : 1u);
    if (asked == 0 && bytes < QX__EARLY_MIN) return 0;   /* small: whole copies cost nothing */
    if (o->sink && !o->sink->put_rows) why = "the caller's output takes whole tensors";
    else if (o->globals_last) why = "globals_last asks for whole copies written after the layers";
    else if (!o->sink && strncmp(fmt, "safetensors", 11) != 0 && strcmp(fmt, "gguf") != 0) why = "the llama2.c writer takes whole tensors";
    else if (quarot_processor_rows_probe(p, &total) != QUAROT_OK) why = m->error;
    if (why) {
        snprintf(st->global_whole_why, sizeof st->global_whole_why, "%s", why);
        m->error[0] = '\0';
        return 0;
    }
    if (asked > 0) return asked < total ? asked : total;
    return (int64_t)QX__WIN_BYTES / (e->ne[0] * es) > 0 ? (int64_t)QX__WIN_BYTES / (e->ne[0] * es) : 1;
}

/* The embedding and lm_head (b->win, set up by the caller) window by window: rows copied from the
   input (widened, checked), rotated by quarot_processor_pre_run_rows, written at their offsets. */
static quarot_result qx__stream_globals(qx__rf* b, quarot_processor* p, const quarot_model* m, int64_t per, qx_err* e) {
    int64_t total = p->rows_total, r0, n, first, since_drop = 0;
    int k;
    quarot_result r = QUAROT_OK;
    double t0;
    for (r0 = 0; r0 < total && r == QUAROT_OK; r0 += n) {
        n = per < total - r0 ? per : total - r0;
        t0 = qx_now();
        for (k = 0; k < b->n_win && r == QUAROT_OK; ++k) {
            struct qx__win* w = &b->win[k];
            int64_t ne[2];
            ne[0] = w->ne0;
            ne[1] = n;
            (void)quarot_tensor_init(&w->t, w->mem, w->wdt, 2, ne);
            if (!w->created) {
                quarot_tensor src = w->src;   /* rows [r0, r0 + n) of the input's view */
                src.data = (char*)src.data + (size_t)r0 * src.nb[1];
                src.ne[1] = n;
                src.nb[2] = src.nb[3] = src.nb[1] * (size_t)n;
                since_drop += (int64_t)quarot_tensor_nbytes(&src);
                r = qx__copy_view(b, &src, w->mem, &first);
                if (r != QUAROT_OK) qx_err_set(e, "%s: out of memory", w->name);
                else if (first >= 0) {
                    qx__nonfinite_msg(e, w->name, w->ne0, r0, first);
                    r = QUAROT_ERR_NONFINITE;
                }
            }
        }
        if (since_drop >= ((int64_t)64 << 20)) { qx__drop_pages(b); since_drop = 0; }
        b->t_mark = qx_now();
        b->st->read_s += b->t_mark - t0;
        if (r != QUAROT_OK) return r;
        b->in_rotate = 0;
        b->win_on = 1;
        r = quarot_processor_pre_run_rows(p, r0, n);
        b->win_on = 0;
        qx__phase_end(b, qx_now());
        if (r != QUAROT_OK) { qx_err_set(e, "%s", m->error[0] ? m->error : quarot_result_string(r)); return r; }
        t0 = qx_now();
        for (k = 0; k < b->n_win && r == QUAROT_OK; ++k) r = qx__sink_put_rows(b->sink, b->win[k].name, r0, &b->win[k].t, e);
        b->st->write_s += qx_now() - t0;
        if (r != QUAROT_OK) { b->st->output_error = 1; return r; }
        b->st->global_windows++;
    }
    qx__drop_pages(b);
    return QUAROT_OK;
}

/* A small text file through a temporary (synced, not yet published). */
static quarot_result qx__text_begin(qx_out* out, const char* path, const char* text, size_t len, int force, qx_err* e) {
    quarot_result r = qx_out_begin(out, path, force, e);
    if (r == QUAROT_OK) r = qx_out_pwrite(out, text, len, 0, e);
    if (r == QUAROT_OK) r = qx_out_sync(out, len, e);
    if (r != QUAROT_OK) qx_out_abort(out);
    return r;
}

/* ---- publishing: a staging directory beside the output ---------------------------------------

   Every file of the output is written and synced inside a private hidden directory beside OUT
   (".OUT.tmp-XXXXXX", locked while the run lives; a later run removes one a killed run left).
   A directory output (safetensors shards, index, config, hook file) is that directory: it appears
   at OUT with one rename (an existing OUT is exchanged atomically, its other files carried over).
   A single-file output with side files (the hook file OUT.quarot-online, config.json) cannot be
   one rename, so the hook file names the digest of the weights it belongs to and the side files
   are published first, the model last: a kill in between leaves the previous model with a hook
   file whose digest it does not match (readers refuse it), never new weights beside old hooks
   that are taken for theirs. */

typedef struct qx__stage {
    qx_dir_out dir;
    int is_dir;                  /* the output is a directory (the staging directory itself) */
    char* model;                 /* the writer's path inside the staging directory */
    char* hooks;                 /* the hook file's and config.json's staging paths */
    char* config;
} qx__stage;

static void qx__stage_free(qx__stage* g) {
    qx_live_remove(g->model);
    qx_live_remove(g->hooks);
    qx_live_remove(g->config);
    qx_dir_out_abort(&g->dir);   /* removes what is left (nothing after a publish) */
    free(g->model);
    free(g->hooks);
    free(g->config);
    g->model = g->hooks = g->config = NULL;
}

static const char* qx__base(const char* path) {
    const char* sl = strrchr(path, '/');
    return sl ? sl + 1 : path;
}

/* is_dir must agree with qx__sink_begin's choice of layout (a safetensors output not ending in
   .safetensors is a directory). */
static quarot_result qx__stage_begin(qx__stage* g, const qx_store* s, const qx_rotate_file_opts* o, qx_err* e) {
    size_t ol = strlen(o->out_path);
    quarot_result r = o->hooks_path ? qx_check_out_name(o->hooks_path, e) : QUAROT_OK;
    if (r == QUAROT_OK) r = qx_dir_out_begin(&g->dir, o->out_path, o->force, e);
    if (r != QUAROT_OK) return r;
    g->is_dir = strncmp(qx__out_format(s, o), "safetensors", 11) == 0 &&
                !(ol > 12 && strcmp(o->out_path + ol - 12, ".safetensors") == 0);
    if (g->is_dir) {
        g->model = (char*)malloc(strlen(g->dir.tmp) + 1);
        if (g->model) strcpy(g->model, g->dir.tmp);
        g->hooks = qx_path_join(g->dir.tmp, "quarot_online.txt");
    } else {
        g->model = qx_path_join(g->dir.tmp, qx__base(o->out_path));
        g->hooks = o->hooks_path ? qx_path_join(g->dir.tmp, qx__base(o->hooks_path)) : NULL;
    }
    g->config = qx_path_join(g->dir.tmp, "config.json");
    if (!g->model || !g->config || (o->hooks_path && !g->hooks)) { qx_err_set(e, "%s: out of memory", o->out_path); return QUAROT_ERR_OUT_OF_MEMORY; }
    if (!g->is_dir) qx_live_add(g->model, 0);   /* for the SIGBUS cleanup (qx_sigbus_cleanup) */
    qx_live_add(g->hooks, 0);
    qx_live_add(g->config, 0);
    return QUAROT_OK;
}

/* A hook file's text: quarot_online_write's with a "weights <digest>" line (the digest of the weight
   files of `model`: the staged ones, read uncached, or a published model's) after the header. */
static quarot_result qx__hooks_text_for(const quarot_online_list* list, const char* model, int uncached, char** out, qx_err* e) {
    char** files = NULL;
    int n_files = 0;
    char digest[QX_DIGEST_LEN];
    size_t need = 0, dl;
    char *txt = NULL, *res, *cut;
    quarot_result r = qx_weight_files(model, &files, &n_files, e);
    if (r == QUAROT_OK)
        r = uncached ? qx_digest_files_uncached((const char* const*)files, n_files, digest, e)
                     : qx_digest_files((const char* const*)files, n_files, digest, e);
    qx_free_paths(files, n_files);
    if (r != QUAROT_OK) return r;
    r = quarot_online_write(list, NULL, 0, &need);
    if (r == QUAROT_OK && !(txt = (char*)malloc(need))) r = QUAROT_ERR_OUT_OF_MEMORY;
    if (r == QUAROT_OK) r = quarot_online_write(list, txt, need, &need);
    cut = txt && r == QUAROT_OK ? strchr(txt, '\n') : NULL;
    if (cut) cut = strchr(cut + 1, '\n');
    dl = strlen(digest);
    if (!cut || !(res = (char*)malloc(need + dl + 16))) {
        free(txt);
        qx_err_set(e, "cannot serialize the online hooks: %s", quarot_result_string(r != QUAROT_OK ? r : QUAROT_ERR_OUT_OF_MEMORY));
        return r != QUAROT_OK ? r : QUAROT_ERR_OUT_OF_MEMORY;
    }
    memcpy(res, txt, (size_t)(cut + 1 - txt));
    sprintf(res + (cut + 1 - txt), "weights %s\n%s", digest, cut + 1);
    free(txt);
    *out = res;
    return QUAROT_OK;
}

static quarot_result qx__hooks_text(const quarot_online_list* list, const qx__stage* g, char** out, qx_err* e) {
    return qx__hooks_text_for(list, g->model, 1, out, e);
}

/* Copies the Hugging Face side files found in src_dir into the staging directory dst. */
static quarot_result qx__side_files(const char* src_dir, const char* dst, int* n, qx_err* e) {
    int k;
    quarot_result r = QUAROT_OK;
    for (k = 0; QX_CONVERT_HF_FILES[k] && r == QUAROT_OK; ++k) {
        char* from = qx_path_join(src_dir, QX_CONVERT_HF_FILES[k]);
        char* to = qx_path_join(dst, QX_CONVERT_HF_FILES[k]);
        char* data = NULL;
        size_t len = 0;
        qx_out out;
        memset(&out, 0, sizeof out);
        out.fd = -1;
        if (!from || !to) { qx_err_set(e, "out of memory"); r = QUAROT_ERR_OUT_OF_MEMORY; }
        else if (qx_path_exists(from)) {
            r = qx_read_file(from, (size_t)1 << 30, &data, &len, e);
            if (r == QUAROT_OK) r = qx__text_begin(&out, to, data, len, 0, e);
            if (r == QUAROT_OK) r = qx_out_publish(&out, e);
            qx_out_abort(&out);
            if (r == QUAROT_OK) ++*n;
        }
        free(data);
        free(from);
        free(to);
    }
    return r;
}

/* The previous pair's kept hook list (qx_hooks_prev_path) when a killed publish left one: the pair
   at the output is finished as the digests say, before a new publish starts. If the hook file names
   the model's weights, the kept list is stale; if the kept list does, it is put back (a list of 0
   hooks: the hook file removed); otherwise neither is the model's and the kept one goes. */
static quarot_result qx__repair_pair(const char* out, const char* hp, const char* prev, qx_err* e) {
    char have[QX_DIGEST_LEN], want[64];
    char* text = NULL;
    size_t len = 0;
    int hooks_ok = 0, prev_ok = 0, prev_empty = 0;
    if (!qx_path_exists(prev)) return QUAROT_OK;
    if (qx_path_exists(out) && qx_model_digest(out, have, NULL) == QUAROT_OK) {
        if (qx_read_file(hp, (size_t)64 << 20, &text, &len, NULL) == QUAROT_OK)
            hooks_ok = qx_hooks_named_digest(text, want, sizeof want) && strcmp(want, have) == 0;
        free(text);
        text = NULL;
        if (!hooks_ok && qx_read_file(prev, (size_t)64 << 20, &text, &len, NULL) == QUAROT_OK) {
            prev_ok = qx_hooks_named_digest(text, want, sizeof want) && strcmp(want, have) == 0;
            prev_empty = strstr(text, "\nhooks 0\n") != NULL;
        }
        free(text);
    }
    if (prev_ok && !prev_empty) {
        qx_fault_point("restore the kept hook file");
        if (rename(prev, hp) != 0) {
            qx_err_set(e, "%s: cannot put back the hook file an interrupted run kept (%s): %s", hp, prev, strerror(errno));
            return QUAROT_ERR_IO;
        }
        qx_sync_parent(hp);
        return QUAROT_OK;
    }
    if (prev_ok && qx_path_exists(hp)) {   /* the previous model had no hooks */
        qx_fault_point("remove the interrupted run's hook file");
        if (unlink(hp) != 0) { qx_err_set(e, "%s: cannot remove: %s", hp, strerror(errno)); return QUAROT_ERR_IO; }
    }
    qx_fault_point("remove the kept hook file");
    if (unlink(prev) != 0) { qx_err_set(e, "%s: cannot remove: %s", prev, strerror(errno)); return QUAROT_ERR_IO; }
    qx_sync_parent(hp);
    return QUAROT_OK;
}

/* Moves the staged output into place (see above). A directory is one rename. A single file with
   its hook file OUT.quarot-online is one unit made of two files, published so that after a kill at
   any point the readers (qx_model_hooks_attach) find the complete old pair or the complete new one
   (docs/formats.md, "Publishing a model with its hook file"):
     0. a kept list a killed run left is settled first (qx__repair_pair);
     1. the old pair's hook list is kept as PREV = qx_hooks_prev_path(OUT.quarot-online): a hard
        link of the old hook file, or, when the old model had none and the new one has hooks, a
        list of 0 hooks naming the old model's digest;
     2. the new hook file replaces the old one (or the old one is removed when the new model has
        none): a reader of the old model now finds a hook file of other weights and takes PREV;
     3. config.json, then the model (a reader of the new model finds its own hook file);
     4. PREV goes.
   On failure the files this call published are put back as they were. st->stale_hooks_removed
   says a hook file of the previous model was removed (the new one needs none). */
static quarot_result qx__stage_publish(qx__stage* g, const qx_rotate_file_opts* o, int have_hooks, int have_cfg,
                                       qx_rotate_file_stats* st, qx_err* e) {
    quarot_result r = QUAROT_OK;
    int cfg_done = 0, kept = 0, kept_empty = 0, hooks_changed = 0;
    char* hp = NULL;
    char* prev = NULL;
    char* marker = NULL;
    if (g->is_dir) return qx_dir_out_publish(&g->dir, NULL, e);
    if (o->hooks_path && (hp = (char*)malloc(strlen(o->hooks_path) + 1)) != NULL) strcpy(hp, o->hooks_path);
    else if (!o->hooks_path) hp = qx_hooks_path_for(o->out_path);
    prev = hp ? qx_hooks_prev_path(hp) : NULL;
    if (!hp || !prev) { free(hp); free(prev); qx_err_set(e, "%s: out of memory", o->out_path); return QUAROT_ERR_OUT_OF_MEMORY; }
    /* 0 */
    if ((r = qx__repair_pair(o->out_path, hp, prev, e)) != QUAROT_OK) goto done;
    /* 1 */
    if (qx_path_exists(hp) && o->force) {   /* without --force the command refused an existing one */
        if ((r = qx_check_replaceable(hp, 0, e)) != QUAROT_OK) goto done;
        qx_fault_point("keep the previous hook file");
        if (link(hp, prev) != 0) {
            qx_err_set(e, "%s: cannot keep the previous hook file while the new pair is published (hard link %s): %s", hp, prev,
                       strerror(errno));
            r = QUAROT_ERR_IO;
            goto done;
        }
        kept = 1;
    } else if (have_hooks && qx_path_exists(o->out_path)) {
        quarot_online_list none;
        char* text = NULL;
        qx_out mo;
        memset(&mo, 0, sizeof mo);
        mo.fd = -1;
        quarot_online_list_init(&none, NULL);
        marker = qx_path_join(g->dir.tmp, "previous.quarot-online");
        r = marker ? qx__hooks_text_for(&none, o->out_path, 0, &text, e) : QUAROT_ERR_OUT_OF_MEMORY;
        if (r == QUAROT_OK) r = qx__text_begin(&mo, marker, text, strlen(text), 0, e);
        if (r == QUAROT_OK) r = qx_out_publish(&mo, e);
        qx_out_abort(&mo);
        free(text);
        quarot_online_list_free(&none);
        if (r == QUAROT_OK) r = qx_publish_file(marker, prev, 1, e);
        if (r != QUAROT_OK) goto done;
        kept = kept_empty = 1;
    }
    if (kept) qx_sync_parent(prev);
    /* 2 */
    if (have_hooks) {
        if ((r = qx_publish_file(g->hooks, hp, o->force || kept, e)) != QUAROT_OK) goto undo;
        hooks_changed = 1;
    } else if (kept) {
        qx_fault_point("remove the previous hook file");
        if (unlink(hp) != 0) { qx_err_set(e, "%s: cannot remove: %s", hp, strerror(errno)); r = QUAROT_ERR_IO; goto undo; }
        hooks_changed = 1;
        if (st) st->stale_hooks_removed = 1;
    }
    /* 3 */
    if (have_cfg && (r = qx_publish_file(g->config, o->config_path, o->force, e)) == QUAROT_OK) cfg_done = 1;
    if (r == QUAROT_OK) r = qx_publish_file(g->model, o->out_path, o->force, e);
    if (r != QUAROT_OK) goto undo;
    qx_sync_parent(o->out_path);
    /* 4 */
    if (kept) {
        qx_fault_point("remove the kept hook file");
        (void)unlink(prev);
        qx_sync_parent(prev);
    }
    goto done;
undo:
    if (cfg_done) (void)remove(o->config_path);
    if (hooks_changed || kept) {   /* the old pair back as it was */
        if (kept && !kept_empty) (void)rename(prev, hp);
        else {
            if (hooks_changed) (void)remove(hp);
            if (kept) (void)unlink(prev);
        }
    }
done:
    if (marker) (void)unlink(marker);
    free(marker);
    free(hp);
    free(prev);
    return r;
}

/* ---- the whole run ---------------------------------------------------------------------------- */

int qx_rotate_file_globals_line(const qx_rotate_file_stats* st, char* buf, size_t cap) {
    if (!st || !buf || cap == 0) return 0;
    if (st->global_window_rows > 0)
        snprintf(buf, cap, "embedding and lm_head: %lld row windows of %lld rows (never whole in memory)", (long long)st->global_windows,
                 (long long)st->global_window_rows);
    else if (st->global_whole_why[0])
        snprintf(buf, cap, "embedding and lm_head: whole copies (%s)", st->global_whole_why);
    else
        return 0;
    return 1;
}

/* ---- qx_rotate_file, step by step ------------------------------------------------------------ */

/* What one run builds; qx__run_free frees it all (and removes the staged output unless it was
   published). The binding (b) is the processor's model (m); both point into this struct. */
typedef struct qx__run {
    qx_store* s;
    const quarot_rotate_desc* desc;
    const qx_rotate_file_opts* o;
    qx_rotate_file_stats* st;
    qx_err* e;
    double t_start;              /* the run's */
    double t_write;              /* steps 6 and 7: writing the rest and publishing */
    quarot_model m;
    qx__rf b;
    quarot_rotate_desc d2;       /* desc with the phase clock's observers in front of the caller's */
    qx_pool* pool;
    qx_blockcache* cache;
    quarot_processor p;
    int have_p;
    qx_tensor_plan* plan;
    int64_t n_plan;
    int64_t per;                 /* > 0: the embedding and lm_head go through in windows of this many rows */
    qx__sink sink;
    const char* torch_dtype;     /* config.json's, from the plan (qx__plan_torch_dtype) */
    qx__stage stg;
    qx_out hooks_out, cfg_out;
    int have_hooks, have_cfg;
    char* hooks_text;
    qx_sb cfg_text;
} qx__run;

static void qx__run_init(qx__run* u, qx_store* s, const quarot_rotate_desc* desc, const qx_rotate_file_opts* o,
                         qx_rotate_file_stats* st, qx_err* e) {
    memset(u, 0, sizeof *u);
    u->s = s;
    u->desc = desc;
    u->o = o;
    u->st = st;
    u->e = e;
    u->t_start = qx_now();
    memset(st, 0, sizeof *st);
    u->stg.dir.lock_fd = -1;
    u->hooks_out.fd = u->cfg_out.fd = -1;
}

static quarot_result qx__run_check(const qx__run* u) {
    const qx_rotate_file_opts* o = u->o;
    if (!u->s || !u->desc || !o || !o->out_path) { qx_err_set(u->e, "qx_rotate_file: invalid argument"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (o->dtype != QUAROT_DTYPE_DEFAULT && o->dtype != QUAROT_DTYPE_F32 && o->dtype != QUAROT_DTYPE_F16 &&
        o->dtype != QUAROT_DTYPE_BF16) {
        qx_err_set(u->e, "%s: output dtype must be f32, f16 or bf16", o->out_path);
        return QUAROT_ERR_UNSUPPORTED_DTYPE;
    }
    return QUAROT_OK;
}

/* The binding as the processor's model, the thread pool, the work-buffer cache, the observers. */
static void qx__run_bind(qx__run* u) {
    qx_store* s = u->s;
    qx__rf* b = &u->b;
    quarot_model* m = &u->m;
    b->s = s;
    b->held = -1;
    b->n_layers = s->config.n_layers;
    b->drop = u->o->drop_pages;
    b->st = u->st;
    b->o = u->o;
    b->sink = &u->sink;
    m->config = s->config;
    m->user_data = b;
    m->get_tensor = qx__get;
    m->create_tensor = qx__create;
    m->acquire_layer = qx__acquire;
    m->release_layer = qx__release;
    m->tensor_done = qx__tensor_done;
    m->get_slice = qx__get_slice;   /* stacked experts one at a time (whole where the output wants that) */
    m->slice_done = qx__slice_done;
    /* threads: the processor splits each command's rows over the pool (same bytes for any count) */
    u->st->threads = u->o->threads > 0 ? u->o->threads : qx_cpu_count();
    if (u->st->threads > 1) u->pool = qx_pool_create(u->st->threads);
    if (!u->pool) u->st->threads = 1;
    qx_pool_env(u->pool, &m->env);
    b->env = &m->env;
    /* the processor's work buffers (a few MiB per task) recycled: 64 MiB covers every task's
       buffers of a 7B-class layer on a few threads; what does not fit is freed as before */
    u->cache = qx_blockcache_create((size_t)64 << 20);
    if (u->cache) qx_blockcache_allocator(u->cache, &m->env.allocator);
    /* the caller's observers behind the phase clock's */
    u->d2 = *u->desc;
    b->user_desc = u->desc;
    u->d2.user_data = b;
    u->d2.on_command = qx__on_command;
    u->d2.progress = qx__on_progress;
    /* NaN / Inf: checked on the copies as they are made (qx__own), not by a separate pass over the
       mapped input in init; a bad value in a late layer stops the run there, and the staged output
       is removed (nothing is published) */
    u->d2.values_checked_by_caller = 1;
}

/* What qx__run_bind made, where validation failed (nothing else was built). */
static void qx__run_unbind(qx__run* u) {
    qx_pool_destroy(u->pool);
    qx_blockcache_destroy(u->cache);
}

/* 1. validation: every tensor read once, layer by layer; nothing written. The rotations built go
   into the stats. */
static quarot_result qx__run_validate(qx__run* u) {
    quarot_processor* p = &u->p;
    qx_rotate_file_stats* st = u->st;
    const qx_rotate_file_opts* o = u->o;
    quarot_result r = quarot_processor_init(p, &u->m, &u->d2);
    st->validate_s = qx_now() - u->t_start;
    if (r != QUAROT_OK) {
        qx_err_set(u->e, "%s", u->m.error[0] ? u->m.error : quarot_result_string(r));
        return r;
    }
    u->have_p = 1;
    if (o->progress) o->progress(o->user, "validate", u->b.n_layers, u->b.n_layers);
    if (o->progress) o->progress(o->user, "rotate", 0, u->b.n_layers);   /* the globals' copies and pre_run count as rotation */
    snprintf(st->r1, sizeof st->r1, "%s", p->rot[QUAROT_ROT_R1].text);
    snprintf(st->r2, sizeof st->r2, "%s", p->have_rot[QUAROT_ROT_R2] ? p->rot[QUAROT_ROT_R2].text : "none");
    st->n_commands = p->n_commands;
    if (p->have_rot[QUAROT_ROT_R4]) snprintf(st->r4, sizeof st->r4, "%s", p->rot[QUAROT_ROT_R4].text);
    if (p->have_rot[QUAROT_ROT_HEADS]) snprintf(st->heads, sizeof st->heads, "%s", p->rot[QUAROT_ROT_HEADS].text);
    if (u->desc->r3) snprintf(st->r3, sizeof st->r3, "%s", p->r3.text);
    st->untied = p->untie;
    return QUAROT_OK;
}

/* 2. the output plan, from the views (input dtypes) and the processor's creations.
   2b. a weight written as f16 / bf16 is rotated in f32 (quarot_command.f32: the SIMD transform
   in place on the f32 copy; its error, ~log2(n) * 2^-24 of the row's norm, is far below the
   output's own rounding, 2^-11 / 2^-8); f32 outputs keep double arithmetic */
static quarot_result qx__run_plan(qx__run* u) {
    quarot_processor* p = &u->p;
    const qx_rotate_file_opts* o = u->o;
    int64_t i;
    quarot_result r = qx__plan(u->s, p, o->dtype, qx__out_format(u->s, o), o->leave_out, &u->plan, &u->n_plan);
    if (r != QUAROT_OK) { qx_err_set(u->e, "%s: out of memory", o->out_path); return r; }
    /* the plan's names are the store's: a decoder layer's are freed once it is written (step 5), so
       what config.json needs from the plan is taken now */
    u->torch_dtype = qx__plan_torch_dtype(u->plan, u->n_plan);
    for (i = 0; i < p->n_commands; ++i) {
        int64_t j;
        for (j = 0; j < u->n_plan; ++j)
            if (strcmp(u->plan[j].name, p->commands[i].weight) == 0) {
                p->commands[i].f32 = !o->f64_arithmetic && (u->plan[j].dtype == QUAROT_DTYPE_F16 || u->plan[j].dtype == QUAROT_DTYPE_BF16) &&
                                     p->rot[p->commands[i].rotation].kind == QUAROT_ROTATION_HADAMARD;
                break;
            }
        if (p->commands[i].f32) u->st->f32_commands++;
    }
    return QUAROT_OK;
}

/* 3a. Whether the embedding and lm_head stream (u->per > 0): then they get window buffers instead of
   whole copies, and go through after the writer is open (step 4s). */
static quarot_result qx__run_windows(qx__run* u) {
    qx_store* s = u->s;
    quarot_processor* p = &u->p;
    qx__rf* b = &u->b;
    qx_rotate_file_stats* st = u->st;
    const quarot_tensor *et, *ht;
    int k;
    quarot_result r;
    b->phase = 1;
    u->per = qx__window_rows(s, p, &u->m, u->o, st);
    if (u->per <= 0) return QUAROT_OK;
    et = qx_store_find(s, p->plan.embed);
    ht = qx_store_find(s, p->plan.lm_head);
    b->n_win = ht || p->untie ? 2 : 1;
    for (k = 0; k < b->n_win; ++k) {
        struct qx__win* w = &b->win[k];
        const quarot_tensor* src = k == 1 && ht ? ht : et;   /* a created lm_head: the embedding's shape */
        snprintf(w->name, sizeof w->name, "%s", k == 0 ? p->plan.embed : p->plan.lm_head);
        w->created = k == 1 && !ht;
        w->src = *src;
        w->wdt = qx__copy_dtype(src->dtype);
        w->ne0 = src->ne[0];
        w->bytes = (size_t)(u->per * w->ne0) * quarot_dtype_size(w->wdt);
        w->mem = (char*)malloc(w->bytes);
        if (!w->mem) { qx_err_set(u->e, "%s: out of memory", w->name); return QUAROT_ERR_OUT_OF_MEMORY; }
        b->cur_bytes += w->bytes;
        st->global_copy_bytes += w->bytes;
        if (w->created) {   /* the untied lm_head's entry (config.json asks whether it exists); written in windows */
            quarot_tensor v;
            int64_t ne[2];
            ne[0] = w->ne0;
            ne[1] = et->ne[1];
            (void)quarot_tensor_init(&v, w->mem, w->wdt, 2, ne);
            if ((r = qx_store_add_view(s, w->name, &v)) != QUAROT_OK) { qx_err_set(u->e, "%s: %s", w->name, quarot_result_string(r)); return r; }
            qx__entry(s, w->name)->t.data = NULL;
            s->config.tied_embeddings = 0;   /* what the last window sets */
        }
    }
    st->global_window_rows = u->per;
    if (b->cur_bytes > st->peak_copy_bytes) st->peak_copy_bytes = b->cur_bytes;
    return QUAROT_OK;
}

/* 3b. globals: writable copies (but the streamed ones), then pre_run rotates them (and creates
   lm_head when untying); streamed, pre_run goes window by window in step 4s. */
static quarot_result qx__run_globals(qx__run* u) {
    qx_store* s = u->s;
    qx__rf* b = &u->b;
    double t0 = qx_now();
    int64_t i;
    quarot_result r = QUAROT_OK;
    for (i = 0; i < s->count && r == QUAROT_OK; ++i)
        if (qx_name_layer(s->items[i].name, NULL, NULL) < 0 && s->items[i].t.data && !qx__win_named(b, s->items[i].name)) {
            r = qx__own(b, &s->items[i]);
            if (r == QUAROT_OK) u->st->global_copy_bytes += quarot_tensor_nbytes(&s->items[i].t);
        }
    if (r != QUAROT_OK) {
        if (b->in_err != QUAROT_OK) *u->e = b->in_msg;
        else qx_err_set(u->e, "global tensors: %s", quarot_result_string(r));
        return r;
    }
    b->t_mark = qx_now();
    b->in_rotate = 0;
    u->st->read_s += b->t_mark - t0;
    if (u->per == 0) {
        r = quarot_processor_pre_run(&u->p);
        qx__phase_end(b, qx_now());
        if (r != QUAROT_OK) { qx_err_set(u->e, "%s", u->m.error[0] ? u->m.error : quarot_result_string(r)); return r; }
        s->config = u->m.config;
    }
    return QUAROT_OK;
}

/* 4. the output file(s), laid out before the first layer, in a private staging directory
   beside the output (published all-or-nothing in step 7) */
static quarot_result qx__run_open_output(qx__run* u) {
    const qx_rotate_file_opts* o = u->o;
    quarot_result r;
    if (o->sink && (o->hooks_path || o->config_path)) {
        qx_err_set(u->e, "%s: a caller's output writes its own hook file and config", o->out_path);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (o->sink) {   /* a caller's output publishes itself (its own temporary and rename) */
        r = qx__sink_begin(&u->sink, u->s, u->plan, u->n_plan, o, &u->m.env, u->e);
        if (r != QUAROT_OK) { u->st->output_error = 1; return r; }
    } else if ((r = qx__stage_begin(&u->stg, u->s, o, u->e)) == QUAROT_OK) {
        qx_rotate_file_opts so = *o;
        so.out_path = u->stg.model;
        so.force = 0;
        r = qx__sink_begin(&u->sink, u->s, u->plan, u->n_plan, &so, &u->m.env, u->e);
    }
    if (r != QUAROT_OK) u->st->output_error = 1;
    return r;
}

/* 4s. the streamed globals, window by window (then their entries count as written) */
static quarot_result qx__run_stream(qx__run* u) {
    qx__rf* b = &u->b;
    int k;
    quarot_result r;
    if (u->per <= 0) return QUAROT_OK;
    if ((r = qx__stream_globals(b, &u->p, &u->m, u->per, u->e)) != QUAROT_OK) return r;
    u->s->config = u->m.config;
    for (k = 0; k < b->n_win; ++k) {
        qx_entry* en = qx__entry(u->s, b->win[k].name);
        if (en) en->t.data = NULL;
        free(b->win[k].mem);
        b->win[k].mem = NULL;
        b->cur_bytes -= b->win[k].bytes;
        u->st->tensors_written++;
    }
    b->n_win = 0;
    return QUAROT_OK;
}

/* 4b. the globals are final after pre_run (no layer command touches them; qx__get refuses
   them from now on): the built-in writers take them now, and their copies become the slabs
   the layers' copies are carved from (a caller's sink gets them at the end, as documented).
   Only where the globals' copies are large (a real vocabulary): for small models there is
   nothing to gain, and the layer-wise eval's resident-memory bound on its tiny test model
   came out 10 MiB higher with the globals written first (file pages of the rotated copy it
   maps afterwards, it seems: not pinned down) */
static quarot_result qx__run_globals_early(qx__run* u) {
    qx_store* s = u->s;
    const qx_rotate_file_opts* o = u->o;
    double t0 = qx_now();
    int64_t i = 0;
    int early = u->per == 0 && !o->sink && !o->globals_last && u->st->global_copy_bytes >= QX__EARLY_MIN;
    quarot_result r = QUAROT_OK;
    while (early && i < s->count && r == QUAROT_OK) {
        qx_entry* en = &s->items[i];
        if (qx_name_layer(en->name, NULL, NULL) >= 0) { ++i; continue; }
        r = qx__sink_put(&u->sink, en->name, &en->t, u->e);
        if (r != QUAROT_OK) { u->st->output_error = 1; break; }
        u->st->tensors_written++;
        if (en->owned) {
            qx__slab_add(&u->b, en->owned, quarot_tensor_nbytes(&en->t));
            en->owned = NULL;
        }
        en->t.data = NULL;   /* written: the entry stays (config.json asks whether lm_head exists) */
        ++i;
    }
    u->st->write_s += qx_now() - t0;
    return r;
}

/* 5. layer by layer: copies on acquire, written and freed on release; then post_run */
static quarot_result qx__run_layers(qx__run* u) {
    qx__rf* b = &u->b;
    int64_t i;
    quarot_result r = QUAROT_OK;
    for (i = 0; i < u->s->config.n_layers && r == QUAROT_OK; ++i) {
        r = quarot_processor_run_layer(&u->p, i);
        if (r != QUAROT_OK) {
            if (b->werr != QUAROT_OK) { *u->e = b->werr_msg; u->st->output_error = 1; r = b->werr; }
            else if (b->in_err != QUAROT_OK) { *u->e = b->in_msg; r = b->in_err; }
            else qx_err_set(u->e, "%s", u->m.error[0] ? u->m.error : quarot_result_string(r));
        }
    }
    qx__spares_free(b);
    qx__slabs_free(b);
    if (r != QUAROT_OK) return r;
    b->t_mark = qx_now();
    b->in_rotate = 0;
    r = quarot_processor_post_run(&u->p);
    qx__phase_end(b, qx_now());
    u->st->fused_into_commands = u->p.fused_into_commands;
    if (r != QUAROT_OK) { qx_err_set(u->e, "%s", u->m.error[0] ? u->m.error : quarot_result_string(r)); return r; }
    u->s->config = u->m.config;
    return QUAROT_OK;
}

/* 6. the globals (all that is left in the store, but those step 4b wrote) */
static quarot_result qx__run_globals_last(qx__run* u) {
    qx_store* s = u->s;
    int64_t i;
    quarot_result r = QUAROT_OK;
    u->t_write = qx_now();
    for (i = 0; i < s->count && r == QUAROT_OK; ++i) {
        if (!s->items[i].t.data) continue;
        r = qx__sink_put(&u->sink, s->items[i].name, &s->items[i].t, u->e);
        if (r == QUAROT_OK) u->st->tensors_written++;
        else u->st->output_error = 1;
    }
    return r;
}

/* 7. the model, hook file and config.json complete in the staging directory, then published */
static quarot_result qx__run_publish(qx__run* u) {
    const qx_rotate_file_opts* o = u->o;
    qx_rotate_file_stats* st = u->st;
    qx_err* e = u->e;
    quarot_result r = qx__sink_finish(&u->sink, e);
    if (r != QUAROT_OK) { st->output_error = 1; return r; }
    st->direct_mode = u->sink.direct_mode;
    if (o->hooks_path && u->desc->online_out) {
        r = qx__hooks_text(u->desc->online_out, &u->stg, &u->hooks_text, e);
        if (r == QUAROT_OK) r = qx__text_begin(&u->hooks_out, u->stg.hooks, u->hooks_text, strlen(u->hooks_text), 0, e);
        if (r == QUAROT_OK) r = qx_out_publish(&u->hooks_out, e);
        if (r != QUAROT_OK) { st->output_error = 1; return r; }
        u->have_hooks = 1;
    }
    if (o->config_path) {
        r = qx_convert_hf_config(u->s, u->torch_dtype, &u->cfg_text, e);
        if (r == QUAROT_OK) r = qx__text_begin(&u->cfg_out, u->stg.config, u->cfg_text.p, u->cfg_text.len, 0, e);
        if (r == QUAROT_OK) r = qx_out_publish(&u->cfg_out, e);
        if (r != QUAROT_OK) { st->output_error = 1; return r; }
        u->have_cfg = 1;
    }
    if (!o->sink && o->side_dir && u->stg.is_dir) {
        r = qx__side_files(o->side_dir, u->stg.dir.tmp, &st->side_files, e);
        if (r != QUAROT_OK) { st->output_error = 1; return r; }
    }
    if (!o->sink) {
        r = qx__stage_publish(&u->stg, o, u->have_hooks, u->have_cfg, u->st, e);
        if (r != QUAROT_OK) { st->output_error = 1; return r; }
    }
    qx__stage_free(&u->stg);
    qx_out_abort(&u->hooks_out);   /* frees the paths (published: nothing to remove) */
    qx_out_abort(&u->cfg_out);
    st->write_s += qx_now() - u->t_write;
    return QUAROT_OK;
}

/* Frees what the run built; what was not published (the staged output, a caller's output) is
   removed. After a publish the removals find nothing left. */
static void qx__run_free(qx__run* u) {
    qx__rf* b = &u->b;
    int k;
    for (k = 0; k < b->n_win; ++k) free(b->win[k].mem);
    qx_out_abort(&u->hooks_out);
    qx_out_abort(&u->cfg_out);
    qx__sink_abort(&u->sink);
    qx__stage_free(&u->stg);
    qx__spares_free(b);
    qx__slabs_free(b);
    free(b->spare);
    free(b->spare_bytes);
    qx_pool_destroy(u->pool);
    if (u->have_p) quarot_processor_free(&u->p);
    qx_blockcache_destroy(u->cache);
    qx_sb_free(&u->cfg_text);
    free(u->hooks_text);
    free(u->plan);
}

/* A message that names a staged file names the output instead: the staging directory's path is
   replaced by OUT (a directory output) or by OUT's directory (a single file and its side files). */
static void qx__err_unstage(const qx__stage* g, const char* out_path, qx_err* e) {
    const char* tmp = g->dir.tmp;
    const char* hit = tmp && e ? strstr(e->msg, tmp) : NULL;
    char buf[sizeof e->msg];
    size_t tl;
    if (!hit) return;
    tl = strlen(tmp);
    if (g->is_dir) {
        snprintf(buf, sizeof buf, "%.*s%s%s", (int)(hit - e->msg), e->msg, out_path, hit + tl);
    } else {
        const char* slash = strrchr(out_path, '/');
        if (hit[tl] != '/') return;
        snprintf(buf, sizeof buf, "%.*s%.*s%s", (int)(hit - e->msg), e->msg, slash ? (int)(slash + 1 - out_path) : 0, out_path,
                 hit + tl + 1);
    }
    memcpy(e->msg, buf, sizeof buf);
}

quarot_result qx_rotate_file(qx_store* s, const quarot_rotate_desc* desc, const qx_rotate_file_opts* o,
                             qx_rotate_file_stats* st, qx_err* e) {
    qx__run u;
    qx_rotate_file_stats local;
    quarot_result r;
    if (!st) st = &local;
    qx__run_init(&u, s, desc, o, st, e);
    if ((r = qx__run_check(&u)) != QUAROT_OK) return r;
    qx__run_bind(&u);
    if ((r = qx__run_validate(&u)) != QUAROT_OK) {
        qx__run_unbind(&u);
        return r;
    }
    r = o->on_rotations ? o->on_rotations(o->rotations_user, &u.p, e) : QUAROT_OK;   /* nothing opened yet */
    if (r == QUAROT_OK) r = qx__run_plan(&u);
    if (r == QUAROT_OK) r = qx__run_windows(&u);
    if (r == QUAROT_OK) r = qx__run_globals(&u);
    if (r == QUAROT_OK) r = qx__run_open_output(&u);
    if (r == QUAROT_OK) r = qx__run_stream(&u);
    if (r == QUAROT_OK) r = qx__run_globals_early(&u);
    if (r == QUAROT_OK) r = qx__run_layers(&u);
    if (r == QUAROT_OK) r = qx__run_globals_last(&u);
    if (r == QUAROT_OK) r = qx__run_publish(&u);
    if (r == QUAROT_OK) {
        st->total_s = qx_now() - u.t_start;
        st->tensors_left_out = u.sink.left_out;   /* put, and counted as written, but not in the output */
        st->tensors_written -= u.sink.left_out;
    } else {
        qx__err_unstage(&u.stg, o->out_path, e);
    }
    qx__run_free(&u);
    return r;
}
