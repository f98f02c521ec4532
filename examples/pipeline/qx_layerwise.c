/* qx_layerwise.c - see qx_layerwise.h. */
#define _DEFAULT_SOURCE   /* madvise, mkdtemp */
#include "pipeline/qx_layerwise.h"

#include "support/qx_file.h"
#include "formats/qx_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

int qx_lw_mapped(const qx_store* s) {
    int64_t i;
    if (!s) return 0;
    if (strncmp(s->source_format, "llama2c", 7) != 0 && strcmp(s->source_format, "gguf") != 0 &&
        strncmp(s->source_format, "safetensors", 11) != 0)
        return 0;
    for (i = 0; i < s->n_cleanups; ++i)
        if (s->cleanups[i].fn == qx_unmap_and_free) return 1;
    return 0;
}

void qx_lw_layer_done(void* store, int64_t layer) {
    const qx_store* s = (const qx_store*)store;
    int64_t i;
    (void)layer;
    if (!s) return;
    for (i = 0; i < s->n_cleanups; ++i)
        if (s->cleanups[i].fn == qx_unmap_and_free) {
            const qx_map* m = (const qx_map*)s->cleanups[i].arg;
            if (m && m->addr && m->len) (void)madvise(m->addr, m->len, MADV_DONTNEED);
        }
}

void qx_lw_forward_opts(qx_forward_opts* o, const qx_store* s) {
    int64_t i;
    size_t mapped = 0;
    o->stream_weights = 1;
    for (i = 0; i < s->n_cleanups; ++i)
        if (s->cleanups[i].fn == qx_unmap_and_free && s->cleanups[i].arg) mapped += ((const qx_map*)s->cleanups[i].arg)->len;
    if (mapped < QX_LW_DROP_MIN_BYTES) return;   /* small: re-faulting every window would cost more than it saves */
    o->layer_done = qx_lw_layer_done;
    o->layer_done_user = (void*)(size_t)s;   /* read-only use: madvise on its mappings */
}

typedef struct qx__lw_prog {
    void (*fn)(void* user, int64_t done, int64_t total);
    void* user;
} qx__lw_prog;

static void qx__lw_progress(void* user, const char* stage, int64_t done, int64_t total) {
    qx__lw_prog* p = (qx__lw_prog*)user;
    if (p->fn && strcmp(stage, "rotate") == 0 && done > 0) p->fn(p->user, done, total);
}

quarot_result qx_lw_rotate(const qx_store* src, const quarot_rotate_desc* desc, qx_store* dst,
                           void (*progress)(void* user, int64_t done, int64_t total), void* user,
                           qx_rotate_file_stats* st, qx_err* e) {
    qx_store v;
    qx_rotate_file_opts ro;
    qx_rotate_file_stats local;
    qx__lw_prog pg;
    qx_load_opts lo;
    quarot_result r = QUAROT_OK;
    const char* tmp = getenv("TMPDIR");
    const char* name;
    char dir[1024], out[1100], cfg[1100];
    int64_t i;
    int rope;
    qx_store_init(dst);
    if (!st) st = &local;
    if (!src || !desc) { qx_err_set(e, "qx_lw_rotate: invalid argument"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (strncmp(src->source_format, "llama2c", 7) == 0) name = "model.bin";
    else if (strcmp(src->source_format, "gguf") == 0) name = "model.gguf";
    else if (strncmp(src->source_format, "safetensors", 11) == 0) name = "model.safetensors";
    else {
        qx_err_set(e, "cannot write a temporary rotated copy of a model of format '%s'", src->source_format);
        return QUAROT_ERR_UNSUPPORTED;
    }
    /* a store of views of src's tensors (qx_rotate_file replaces them by copies and frees those) */
    qx_store_init(&v);
    v.config = src->config;
    memcpy(v.source_format, src->source_format, sizeof v.source_format);
    for (i = 0; i < src->n_blobs && r == QUAROT_OK; ++i) r = qx_store_set_blob(&v, src->blobs[i].key, src->blobs[i].data, src->blobs[i].len);
    for (i = 0; i < src->count && r == QUAROT_OK; ++i) r = qx_store_add_view(&v, src->items[i].name, &src->items[i].t);
    if (r != QUAROT_OK) { qx_store_free(&v); qx_err_set(e, "out of memory"); return r; }

    snprintf(dir, sizeof dir, "%s/quarot-XXXXXX", tmp && tmp[0] ? tmp : "/tmp");
    if (!mkdtemp(dir)) {
        qx_store_free(&v);
        qx_err_set(e, "%s: cannot create a temporary directory for the rotated model (set TMPDIR)", dir);
        return QUAROT_ERR_IO;
    }
    snprintf(out, sizeof out, "%s/%s", dir, name);
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    memset(&ro, 0, sizeof ro);
    ro.out_path = out;
    ro.config_path = strncmp(name, "model.safetensors", 17) == 0 ? cfg : NULL;
    ro.drop_pages = 1;
    ro.drop_from = src;
    pg.fn = progress;
    pg.user = user;
    ro.progress = qx__lw_progress;
    ro.user = &pg;
    r = qx_rotate_file(&v, desc, &ro, st, e);
    if (r == QUAROT_OK) {
        memset(&lo, 0, sizeof lo);
        r = qx_load_model(out, &lo, dst, e);
    }
    (void)remove(out);   /* the mapping keeps the data until dst is freed */
    (void)remove(cfg);
    (void)rmdir(dir);
    if (r == QUAROT_OK) {
        /* the processor's config (norm kind, untied lm_head, ...) with the layout the reader saw */
        rope = dst->config.rope_interleaved;
        dst->config = v.config;
        dst->config.rope_interleaved = rope;
        memcpy(dst->source_format, src->source_format, sizeof dst->source_format);
    }
    qx_store_free(&v);
    return r;
}

/* VmHWM is the high-water mark of this program's own address space; getrusage (the fallback) on
   Linux also counts what the process was before exec, e.g. a big parent that fork+exec'ed us. */
double qx_lw_peak_rss_mib(void) {
    FILE* f = fopen("/proc/self/status", "r");
    char line[256];
    struct rusage ru;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            fclose(f);
            return atof(line + 6) / 1024.0;   /* kB */
        }
    if (f) fclose(f);
    memset(&ru, 0, sizeof ru);
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss / 1024.0;
}
