/* qx_runcfg.c - see qx_runcfg.h. The YAML tree (qx_yaml) is walked key by key; every key is looked
   up in the table of its level, every value's type checked, and each error names the key path and
   the line. Unsupported processors are refused (or skipped with a warning) without reading their
   fields, so whatever they hold (aliases of quantization templates, ...) does not matter. */
#include "cli/qx_runcfg.h"
#include "formats/qx_yaml.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct qx__rc {
    const char* name;
    qx_err* e;
    int skip;
    qx_runcfg_warn_fn warn;
    void* user;
    qx_runcfg* cfg;
    int stage2_line;               /* first rotation processor (0 = none yet) */
    int stage1_line;
    const char* spec_dataset;
    int spec_dataset_line;
} qx__rc;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
static quarot_result qx__rcfail(qx__rc* C, int line, const char* fmt, ...) {
    char msg[420];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    qx_err_set(C->e, "%s: line %d: %s", C->name, line, msg);
    return QUAROT_ERR_PARSE;
}

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
static void qx__rcwarn(qx__rc* C, const char* fmt, ...) {
    char msg[420];
    va_list ap;
    C->cfg->n_skipped++;
    if (!C->warn) return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    C->warn(C->user, msg);
}

static int qx__pow2(int64_t v) { return v > 0 && (v & (v - 1)) == 0; }

/* A string value: a quoted scalar, or a plain one that YAML does not read as a number, boolean or null. */
static const char* qx__rcstr(const qx_yaml_node* v) {
    int64_t i;
    int b;
    if (!v || v->kind != QX_YAML_SCALAR) return NULL;
    if (v->style == QX_YAML_PLAIN && (qx_yaml_as_int(v, &i) || qx_yaml_as_bool(v, &b))) return NULL;
    return v->str;
}

static quarot_result qx__rcint(qx__rc* C, const qx_yaml_pair* p, const char* path, int64_t lo, int64_t hi, int64_t* out) {
    char d[96];
    if (!qx_yaml_as_int(p->value, out))
        return qx__rcfail(C, p->line, "%s: expected an integer, found %s", path, qx_yaml_describe(p->value, d, sizeof d));
    if (*out < lo || *out > hi)
        return qx__rcfail(C, p->line, "%s: %lld is outside %lld..%lld", path, (long long)*out, (long long)lo, (long long)hi);
    return QUAROT_OK;
}

static quarot_result qx__rcbool(qx__rc* C, const qx_yaml_pair* p, const char* path, int* out) {
    char d[96];
    if (!qx_yaml_as_bool(p->value, out))
        return qx__rcfail(C, p->line, "%s: expected a boolean (True/False/true/false), found %s", path, qx_yaml_describe(p->value, d, sizeof d));
    return QUAROT_OK;
}

static quarot_result qx__rcblock(qx__rc* C, const qx_yaml_pair* p, const char* path, int64_t* out) {
    quarot_result r = qx__rcint(C, p, path, -1, (int64_t)1 << 30, out);
    if (r == QUAROT_OK && *out != -1 && !qx__pow2(*out))
        return qx__rcfail(C, p->line, "%s: %lld is neither -1 nor a positive power of 2", path, (long long)*out);
    return r;
}

/* "a, b, c" of a key table, for messages. */
static void qx__rckeys(const char* const* keys, char* buf, size_t size) {
    size_t used = 0;
    int i;
    buf[0] = '\0';
    for (i = 0; keys[i] && used + 1 < size; ++i) used += (size_t)snprintf(buf + used, size - used, "%s%s", i ? ", " : "", keys[i]);
}

static int qx__rcin(const char* const* keys, const char* k) {
    int i;
    for (i = 0; keys[i]; ++i)
        if (strcmp(keys[i], k) == 0) return 1;
    return 0;
}

/* Every key of map must be in keys. */
static quarot_result qx__rconly(qx__rc* C, const qx_yaml_node* map, const char* path, const char* what, const char* const* keys) {
    size_t i;
    char list[256];
    for (i = 0; i < map->count; ++i)
        if (!qx__rcin(keys, map->pairs[i].key)) {
            qx__rckeys(keys, list, sizeof list);
            return qx__rcfail(C, map->pairs[i].line, "%s: unknown key '%.60s' for %s (allowed: %s)", path, map->pairs[i].key, what, list);
        }
    return QUAROT_OK;
}

static char* qx__rcpath(const char* yaml, const char* file) {
    const char* slash = strrchr(yaml, '/');
    size_t d = slash ? (size_t)(slash - yaml) + 1 : 0, n = strlen(file);
    char* p;
    if (file[0] == '/') d = 0;
    p = (char*)malloc(d + n + 1);
    if (!p) return NULL;
    memcpy(p, yaml, d);
    memcpy(p + d, file, n + 1);
    return p;
}

static int qx__cmp64(const void* a, const void* b) {
    int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
    return x < y ? -1 : x > y;
}

/* ---- processors --------------------------------------------------------------------------- */

static quarot_result qx__rcstage1(qx__rc* C, const qx_yaml_node* m, const char* path, int line) {
    static const char* const keys[] = {"type", "stage", "steps", "quant_dtype", "layer_type", "block_size", "max_samples", NULL};
    qx_runcfg_stage1* s = &C->cfg->stage1;
    const qx_yaml_pair* p;
    char sub[160], d[96];
    quarot_result r;
    int64_t v;
    if (C->stage1_line) return qx__rcfail(C, line, "%s: a second adapt_rotation stage 1 (the first is on line %d): one is supported", path, C->stage1_line);
    C->stage1_line = line;
    if ((r = qx__rconly(C, m, path, "adapt_rotation stage 1", keys)) != QUAROT_OK) return r;
    s->present = 1;
    s->line = line;
    s->steps = 20;
    snprintf(s->quant_dtype, sizeof s->quant_dtype, "int4");
    s->block_size = -1;
    s->max_samples = 2048;
    if (qx_yaml_get(m, "steps", &p)) {
        snprintf(sub, sizeof sub, "%s.steps", path);
        if ((r = qx__rcint(C, p, sub, 1, 1000, &v)) != QUAROT_OK) return r;
        s->steps = (int)v;
    }
    if (qx_yaml_get(m, "quant_dtype", &p)) {
        const char* t = qx__rcstr(p->value);
        if (!t) return qx__rcfail(C, p->line, "%s.quant_dtype: expected \"int4\" or \"int8\", found %s", path, qx_yaml_describe(p->value, d, sizeof d));
        if (strcmp(t, "int4") != 0 && strcmp(t, "int8") != 0)
            return qx__rcfail(C, p->line, "%s.quant_dtype: '%.32s' is not supported (use \"int4\" or \"int8\")", path, t);
        snprintf(s->quant_dtype, sizeof s->quant_dtype, "%s", t);
    }
    if (qx_yaml_get(m, "layer_type", &p)) {
        const qx_yaml_node* l = p->value;
        size_t i;
        if (!l || l->kind != QX_YAML_SEQ || l->count == 0)
            return qx__rcfail(C, p->line, "%s.layer_type: expected a non-empty list of name patterns (e.g. [\"up_proj\"]), found %s", path,
                              qx_yaml_describe(l, d, sizeof d));
        s->layer_type = (char(*)[128])calloc(l->count, sizeof *s->layer_type);
        if (!s->layer_type) return qx__rcfail(C, p->line, "out of memory");
        for (i = 0; i < l->count; ++i) {
            const char* t = qx__rcstr(l->items[i]);
            size_t k, n = t ? strlen(t) : 0;
            int blank = 1;
            for (k = 0; k < n; ++k) blank &= t[k] == ' ' || t[k] == '\t';
            if (!t || blank || n >= 128 || n != l->items[i]->len)
                return qx__rcfail(C, l->items[i]->line, "%s.layer_type[%lu]: expected a non-empty name pattern of at most 127 bytes, found %s", path,
                                  (unsigned long)i, qx_yaml_describe(l->items[i], d, sizeof d));
            memcpy(s->layer_type[i], t, n + 1);
        }
        s->n_layer_type = (int64_t)l->count;
    }
    if (qx_yaml_get(m, "block_size", &p)) {
        snprintf(sub, sizeof sub, "%s.block_size", path);
        if ((r = qx__rcblock(C, p, sub, &s->block_size)) != QUAROT_OK) return r;
    }
    if (qx_yaml_get(m, "max_samples", &p)) {
        snprintf(sub, sizeof sub, "%s.max_samples", path);
        if ((r = qx__rcint(C, p, sub, 1, 100000, &s->max_samples)) != QUAROT_OK) return r;
    }
    return QUAROT_OK;
}

/* type: spinquant in spec.prior: SpinQuant's training options */
static quarot_result qx__rcspin1(qx__rc* C, const qx_yaml_node* m, const char* path, int line) {
    static const char* const keys[] = {"type", "steps", "lr", "nsamples", "batch", "a_bits", "a_asym", "a_clip", "w_bits", "w_asym", "w_clip",
                                       "loss", NULL};
    qx_runcfg_stage1* s = &C->cfg->stage1;
    const qx_yaml_pair* p;
    char sub[160], d[96];
    quarot_result r;
    int64_t v;
    if (C->stage1_line) return qx__rcfail(C, line, "%s: a second prior stage processor (the first is on line %d): one is supported", path, C->stage1_line);
    C->stage1_line = line;
    if ((r = qx__rconly(C, m, path, "spinquant", keys)) != QUAROT_OK) return r;
    s->present = 1;
    s->spin = 1;
    s->line = line;
    s->steps = 100;
    s->lr = 1.5;
    s->nsamples = 128;
    s->batch = 8;
    s->a_bits = 4;
    s->a_clip = 1.0;
    s->w_bits = 16;
    if (qx_yaml_get(m, "steps", &p)) {
        snprintf(sub, sizeof sub, "%s.steps", path);
        if ((r = qx__rcint(C, p, sub, 1, 1000, &v)) != QUAROT_OK) return r;
        s->steps = (int)v;
    }
    if (qx_yaml_get(m, "nsamples", &p) && (snprintf(sub, sizeof sub, "%s.nsamples", path), (r = qx__rcint(C, p, sub, 1, 1 << 24, &s->nsamples))) != QUAROT_OK) return r;
    if (qx_yaml_get(m, "batch", &p) && (snprintf(sub, sizeof sub, "%s.batch", path), (r = qx__rcint(C, p, sub, 1, 1 << 20, &s->batch))) != QUAROT_OK) return r;
    if (qx_yaml_get(m, "a_bits", &p) && (snprintf(sub, sizeof sub, "%s.a_bits", path), (r = qx__rcint(C, p, sub, 2, 16, &s->a_bits))) != QUAROT_OK) return r;
    if (qx_yaml_get(m, "w_bits", &p) && (snprintf(sub, sizeof sub, "%s.w_bits", path), (r = qx__rcint(C, p, sub, 2, 16, &s->w_bits))) != QUAROT_OK) return r;
    if ((s->a_bits > 8 && s->a_bits != 16) || (s->w_bits > 8 && s->w_bits != 16))
        return qx__rcfail(C, line, "%s: a_bits / w_bits: 2..8, or 16 for full precision", path);
    if (qx_yaml_get(m, "a_asym", &p) && (snprintf(sub, sizeof sub, "%s.a_asym", path), (r = qx__rcbool(C, p, sub, &s->a_asym))) != QUAROT_OK) return r;
    if (qx_yaml_get(m, "w_asym", &p) && (snprintf(sub, sizeof sub, "%s.w_asym", path), (r = qx__rcbool(C, p, sub, &s->w_asym))) != QUAROT_OK) return r;
    if (qx_yaml_get(m, "w_clip", &p) && (snprintf(sub, sizeof sub, "%s.w_clip", path), (r = qx__rcbool(C, p, sub, &s->w_clip))) != QUAROT_OK) return r;
    if (qx_yaml_get(m, "lr", &p) || qx_yaml_get(m, "a_clip", &p)) {
        int k;
        for (k = 0; k < 2; ++k) {
            const char* key = k ? "a_clip" : "lr";
            double x;
            char* end = NULL;
            if (!qx_yaml_get(m, key, &p)) continue;
            x = p->value && p->value->kind == QX_YAML_SCALAR && p->value->style == QX_YAML_PLAIN ? strtod(p->value->str, &end) : 0.0;
            if (!end || *end || !(x > 0.0) || (k == 0 && x > 1e6) || (k == 1 && x > 1.0))
                return qx__rcfail(C, p->line, "%s.%s: expected a number in %s, found %s", path, key, k ? "(0, 1]" : "(0, 1e6]",
                                  qx_yaml_describe(p->value, d, sizeof d));
            if (k) s->a_clip = x; else s->lr = x;
        }
    }
    if (qx_yaml_get(m, "loss", &p)) {
        const char* t = qx__rcstr(p->value);
        if (!t || (strcmp(t, "ce") != 0 && strcmp(t, "kl") != 0))
            return qx__rcfail(C, p->line, "%s.loss: expected \"ce\" or \"kl\", found %s", path, qx_yaml_describe(p->value, d, sizeof d));
        s->loss = strcmp(t, "kl") == 0 ? QUAROT_TRAIN_LOSS_KL : QUAROT_TRAIN_LOSS_CE;
    }
    return QUAROT_OK;
}

static quarot_result qx__rcstage2(qx__rc* C, const qx_yaml_node* m, const char* path, int line, int adapt) {
    static const char* const akeys[] = {"type", "stage", "online", "block_size", "max_tp_size", "down_proj_online_layers", NULL};
    static const char* const qkeys[] = {"type", "online", "block_size", "max_tp_size", "down_proj_online_layers", "export_extra_info", NULL};
    static const char* const skeys[] = {"type", "online", "rotations", "export_extra_info", NULL};
    int spin = adapt == 2;
    qx_runcfg_stage2* s = &C->cfg->stage2;
    const qx_yaml_pair* p;
    char sub[160], d[96];
    quarot_result r;
    if (C->stage2_line)
        return qx__rcfail(C, line, "%s: a second rotation processor (the first is on line %d): quarot runs one", path, C->stage2_line);
    C->stage2_line = line;
    if ((r = qx__rconly(C, m, path, spin ? "spinquant" : adapt ? "adapt_rotation stage 2" : "quarot", spin ? skeys : adapt ? akeys : qkeys)) != QUAROT_OK)
        return r;
    s->present = 1;
    s->adapt = adapt == 1;
    s->spin = spin;
    if (spin && qx_yaml_get(m, "rotations", &p)) {
        const char* f = qx__rcstr(p->value);
        if (!f || !f[0]) return qx__rcfail(C, p->line, "%s.rotations: expected a file name, found %s", path, qx_yaml_describe(p->value, d, sizeof d));
        s->rotations = qx__rcpath(C->name, f);
        s->rotations_line = p->line;
        if (!s->rotations) return qx__rcfail(C, p->line, "out of memory");
    }
    s->line = line;
    s->block_size = -1;
    s->max_tp_size = 4;
    s->export_extra_info = 1;
    if (qx_yaml_get(m, "online", &p)) {
        snprintf(sub, sizeof sub, "%s.online", path);
        if ((r = qx__rcbool(C, p, sub, &s->online)) != QUAROT_OK) return r;
    }
    if (qx_yaml_get(m, "block_size", &p)) {
        snprintf(sub, sizeof sub, "%s.block_size", path);
        if ((r = qx__rcblock(C, p, sub, &s->block_size)) != QUAROT_OK) return r;
    }
    if (qx_yaml_get(m, "max_tp_size", &p)) {
        snprintf(sub, sizeof sub, "%s.max_tp_size", path);
        if ((r = qx__rcint(C, p, sub, 1, adapt ? 64 : (int64_t)1 << 20, &s->max_tp_size)) != QUAROT_OK) return r;
        if (!qx__pow2(s->max_tp_size)) return qx__rcfail(C, p->line, "%s: %lld is not 1 or a power of 2", sub, (long long)s->max_tp_size);
    }
    if (qx_yaml_get(m, "export_extra_info", &p)) {
        snprintf(sub, sizeof sub, "%s.export_extra_info", path);
        if ((r = qx__rcbool(C, p, sub, &s->export_extra_info)) != QUAROT_OK) return r;
    }
    if (qx_yaml_get(m, "down_proj_online_layers", &p)) {
        const qx_yaml_node* l = p->value;
        size_t i;
        int64_t k = 0;
        s->layers_line = p->line;
        if (!l || l->kind != QX_YAML_SEQ)
            return qx__rcfail(C, p->line, "%s.down_proj_online_layers: expected a list of layer indices (e.g. [0, 3]), found %s", path,
                              qx_yaml_describe(l, d, sizeof d));
        if (l->count) {
            s->layers = (int64_t*)malloc(l->count * sizeof *s->layers);
            if (!s->layers) return qx__rcfail(C, p->line, "out of memory");
        }
        for (i = 0; i < l->count; ++i) {
            int64_t v;
            if (!qx_yaml_as_int(l->items[i], &v) || v < 0 || v > ((int64_t)1 << 30))
                return qx__rcfail(C, l->items[i]->line, "%s.down_proj_online_layers[%lu]: expected a layer index >= 0, found %s", path,
                                  (unsigned long)i, qx_yaml_describe(l->items[i], d, sizeof d));
            s->layers[i] = v;
        }
        if (l->count) qsort(s->layers, l->count, sizeof *s->layers, qx__cmp64);
        for (i = 0; i < l->count; ++i)
            if (k == 0 || s->layers[i] != s->layers[k - 1]) s->layers[k++] = s->layers[i];
        s->n_layers = k;
    }
    return QUAROT_OK;
}

/* One processor of a list. prior: 1 in spec.prior. */
static quarot_result qx__rcproc(qx__rc* C, const qx_yaml_node* m, const char* path, int line, int prior) {
    const qx_yaml_pair* tp;
    const qx_yaml_pair* sp;
    const char* type;
    char d[96];
    if (!m || m->kind != QX_YAML_MAP)
        return qx__rcfail(C, line, "%s: expected a processor (a mapping with 'type'), found %s", path, qx_yaml_describe(m, d, sizeof d));
    if (!qx_yaml_get(m, "type", &tp)) return qx__rcfail(C, m->line, "%s: a processor without 'type'", path);
    type = qx__rcstr(tp->value);
    if (!type) return qx__rcfail(C, tp->line, "%s.type: expected a processor name, found %s", path, qx_yaml_describe(tp->value, d, sizeof d));
    if (strcmp(type, "adapt_rotation") == 0) {
        int64_t stage;
        if (!qx_yaml_get(m, "stage", &sp)) return qx__rcfail(C, tp->line, "%s: adapt_rotation needs 'stage: 1' or 'stage: 2'", path);
        if (!qx_yaml_as_int(sp->value, &stage) || (stage != 1 && stage != 2))
            return qx__rcfail(C, sp->line, "%s.stage: expected 1 or 2, found %s", path, qx_yaml_describe(sp->value, d, sizeof d));
        if (stage == 1 && !prior)
            return qx__rcfail(C, sp->line, "%s: adapt_rotation stage 1 belongs in spec.prior (a prior stage with its dataset)", path);
        if (stage == 2 && prior)
            return qx__rcfail(C, sp->line, "%s: adapt_rotation stage 2 belongs in spec.process (stage 1 goes in spec.prior)", path);
        return stage == 1 ? qx__rcstage1(C, m, path, tp->line) : qx__rcstage2(C, m, path, tp->line, 1);
    }
    if (strcmp(type, "spinquant") == 0)   /* training in spec.prior, the learned rotations in spec.process */
        return prior ? qx__rcspin1(C, m, path, tp->line) : qx__rcstage2(C, m, path, tp->line, 2);
    if (strcmp(type, "quarot") == 0) {
        if (prior) return qx__rcfail(C, tp->line, "%s: quarot belongs in spec.process, not spec.prior", path);
        return qx__rcstage2(C, m, path, tp->line, 0);
    }
    if (!C->skip)
        return qx__rcfail(C, tp->line, "%s: processor type '%.60s' is not run by quarot, which runs only the rotation processors (quarot, "
                                       "adapt_rotation); remove it, or pass --skip-unsupported to skip it with a warning", path, type);
    qx__rcwarn(C, "%s: line %d: %s: skipped processor '%.60s' (quarot runs only quarot and adapt_rotation; quantize the rotated model with "
                  "your own tool)", C->name, tp->line, path, type);
    return QUAROT_OK;
}

static quarot_result qx__rclist(qx__rc* C, const qx_yaml_pair* p, const char* path, int prior) {
    const qx_yaml_node* l = p->value;
    char sub[128], d[96];
    size_t i;
    quarot_result r;
    if (l && l->kind == QX_YAML_NULL) return QUAROT_OK;     /* `process:` with nothing */
    if (!l || l->kind != QX_YAML_SEQ)
        return qx__rcfail(C, p->line, "%s: expected a list of processors ('- type: ...'), found %s", path, qx_yaml_describe(l, d, sizeof d));
    for (i = 0; i < l->count; ++i) {
        snprintf(sub, sizeof sub, "%s[%lu]", path, (unsigned long)i);
        if ((r = qx__rcproc(C, l->items[i], sub, l->items[i]->line, prior)) != QUAROT_OK) return r;
    }
    return QUAROT_OK;
}

/* ---- spec --------------------------------------------------------------------------------- */

static quarot_result qx__rcspec(qx__rc* C, const qx_yaml_pair* sp) {
    static const char* const keys[] = {"prior", "process", "save", "dataset", "runner", NULL};
    static const char* const stage_keys[] = {"process", "dataset", NULL};
    const qx_yaml_node* spec = sp->value;
    const qx_yaml_pair* p;
    char d[96], sub[64];
    quarot_result r;
    size_t i;
    const char* prior_dataset = NULL;
    int prior_dataset_line = 0, prior_line = 0;
    if (!spec || spec->kind != QX_YAML_MAP) return qx__rcfail(C, sp->line, "spec: expected a mapping, found %s", qx_yaml_describe(spec, d, sizeof d));
    if ((r = qx__rconly(C, spec, "spec", "spec", keys)) != QUAROT_OK) return r;
    if (qx_yaml_get(spec, "dataset", &p)) {
        C->spec_dataset = qx__rcstr(p->value);
        C->spec_dataset_line = p->line;
        if (!C->spec_dataset) return qx__rcfail(C, p->line, "spec.dataset: expected a file name, found %s", qx_yaml_describe(p->value, d, sizeof d));
    }
    if (qx_yaml_get(spec, "runner", &p) && !qx__rcstr(p->value))
        return qx__rcfail(C, p->line, "spec.runner: expected a runner name, found %s", qx_yaml_describe(p->value, d, sizeof d));
    if (qx_yaml_get(spec, "prior", &p) && p->value->kind != QX_YAML_NULL) {
        const qx_yaml_node* l = p->value;
        if (l->kind != QX_YAML_SEQ)
            return qx__rcfail(C, p->line, "spec.prior: expected a list of stages ('- process: [...]'), found %s", qx_yaml_describe(l, d, sizeof d));
        for (i = 0; i < l->count; ++i) {
            const qx_yaml_node* st = l->items[i];
            const qx_yaml_pair* pp;
            int had = C->stage1_line;
            snprintf(sub, sizeof sub, "spec.prior[%lu]", (unsigned long)i);
            if (!st || st->kind != QX_YAML_MAP)
                return qx__rcfail(C, st ? st->line : p->line, "%s: expected a stage ('process:' and 'dataset:'), found %s", sub, qx_yaml_describe(st, d, sizeof d));
            if ((r = qx__rconly(C, st, sub, "a prior stage", stage_keys)) != QUAROT_OK) return r;
            if (!qx_yaml_get(st, "process", &pp)) return qx__rcfail(C, st->line, "%s: a stage without 'process'", sub);
            {
                char sub2[96];
                snprintf(sub2, sizeof sub2, "%s.process", sub);
                if ((r = qx__rclist(C, pp, sub2, 1)) != QUAROT_OK) return r;
            }
            if (qx_yaml_get(st, "dataset", &pp)) {
                const char* ds = qx__rcstr(pp->value);
                if (!ds) return qx__rcfail(C, pp->line, "%s.dataset: expected a file name, found %s", sub, qx_yaml_describe(pp->value, d, sizeof d));
                if (!had && C->stage1_line) { prior_dataset = ds; prior_dataset_line = pp->line; }
            }
            if (!had && C->stage1_line) prior_line = st->line;
        }
    }
    if (qx_yaml_get(spec, "process", &p) && (r = qx__rclist(C, p, "spec.process", 0)) != QUAROT_OK) return r;
    if (qx_yaml_get(spec, "save", &p) && p->value->kind != QX_YAML_NULL) {
        const qx_yaml_node* l = p->value;
        if (l->kind != QX_YAML_SEQ) return qx__rcfail(C, p->line, "spec.save: expected a list of savers, found %s", qx_yaml_describe(l, d, sizeof d));
        for (i = 0; i < l->count; ++i) {
            const qx_yaml_pair* tp = NULL;
            const char* type = l->items[i]->kind == QX_YAML_MAP && qx_yaml_get(l->items[i], "type", &tp) ? qx__rcstr(tp->value) : NULL;
            if (!type) return qx__rcfail(C, l->items[i]->line, "spec.save[%lu]: expected a saver ('- type: ...')", (unsigned long)i);
            if (!C->skip)
                return qx__rcfail(C, tp->line, "spec.save[%lu]: saver '%.60s' is not run by quarot, which writes the rotated model in the input's "
                                               "format to --save OUT; remove spec.save, or pass --skip-unsupported to skip it with a warning",
                                  (unsigned long)i, type);
            qx__rcwarn(C, "%s: line %d: spec.save[%lu]: skipped saver '%.60s' (the rotated model is written in the input's format to --save)",
                       C->name, tp->line, (unsigned long)i, type);
        }
    }
    if (!C->cfg->stage2.present)
        return qx__rcfail(C, sp->line, "spec.process has no rotation processor (quarot, or adapt_rotation with stage: 2): nothing to run");
    if (C->cfg->stage2.spin && !C->cfg->stage1.spin && !C->cfg->stage2.rotations)
        return qx__rcfail(C, C->cfg->stage2.line, "spinquant in spec.process needs 'rotations: FILE' (quarot calibrate --method spinquant), or a "
                                                  "spinquant stage in spec.prior that learns them");
    if (C->cfg->stage1.spin && C->cfg->stage2.rotations)
        return qx__rcfail(C, C->cfg->stage2.rotations_line, "rotations: spec.prior learns them (line %d); give one or the other", C->cfg->stage1.line);
    if (C->cfg->stage1.present) {
        const char* ds = prior_dataset ? prior_dataset : C->spec_dataset;
        if (C->cfg->stage1.spin && !C->cfg->stage2.spin)
            return qx__rcfail(C, C->cfg->stage1.line, "spinquant in spec.prior has no use here: spec.process rotates with %s (line %d), not "
                                                      "spinquant", C->cfg->stage2.adapt ? "adapt_rotation" : "quarot", C->cfg->stage2.line);
        if (!C->cfg->stage1.spin && !C->cfg->stage2.adapt)
            return qx__rcfail(C, C->cfg->stage1.line, "adapt_rotation stage 1 has no use here: spec.process rotates with %s (line %d), not "
                                                      "adapt_rotation stage 2", C->cfg->stage2.spin ? "spinquant" : "quarot", C->cfg->stage2.line);
        if (!ds)
            return qx__rcfail(C, prior_line ? prior_line : C->cfg->stage1.line, "%s needs calibration data: give the prior "
                                                                               "stage a 'dataset:' (or spec.dataset)",
                              C->cfg->stage1.spin ? "spinquant" : "adapt_rotation stage 1");
        C->cfg->stage1.dataset = qx__rcpath(C->name, ds);
        C->cfg->stage1.dataset_line = prior_dataset ? prior_dataset_line : C->spec_dataset_line;
        if (!C->cfg->stage1.dataset) return qx__rcfail(C, 1, "out of memory");
    }
    return QUAROT_OK;
}

quarot_result qx_runcfg_parse(const char* text, size_t len, const char* name, int skip_unsupported,
                              qx_runcfg_warn_fn warn, void* user, qx_runcfg* cfg, qx_err* e) {
    qx_yaml_doc doc;
    qx__rc C;
    const qx_yaml_node* root;
    const qx_yaml_pair* api = NULL;
    const qx_yaml_pair* spec = NULL;
    char d[96];
    size_t i;
    quarot_result r = QUAROT_OK;
    if (!cfg) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(cfg, 0, sizeof *cfg);
    if (!name) name = "config.yaml";
    r = qx_yaml_parse(text, len, name, &doc, e);
    if (r != QUAROT_OK) return r;
    memset(&C, 0, sizeof C);
    C.name = name;
    C.e = e;
    C.skip = skip_unsupported;
    C.warn = warn;
    C.user = user;
    C.cfg = cfg;
    root = doc.root;
    if (root->kind != QX_YAML_MAP) {
        r = qx__rcfail(&C, root->line, "the configuration must be a mapping with 'apiversion' and 'spec', found %s", qx_yaml_describe(root, d, sizeof d));
        goto done;
    }
    for (i = 0; i < root->count && r == QUAROT_OK; ++i) {
        const qx_yaml_pair* p = &root->pairs[i];
        if (strcmp(p->key, "apiversion") == 0) api = p;
        else if (strcmp(p->key, "spec") == 0) spec = p;
        else if (strcmp(p->key, "metadata") == 0) continue;
        else if (p->value->anchor) continue;   /* a template for aliases (e.g. &default_w4a4_dynamic) */
        else
            r = qx__rcfail(&C, p->line, "unknown top-level key '%.60s' (allowed: apiversion, spec, metadata, and templates carrying an "
                                        "anchor: 'name: &name ...')", p->key);
    }
    if (r != QUAROT_OK) goto done;
    if (!api) { r = qx__rcfail(&C, 1, "apiversion is missing (modelslim_v1 or modelslim_v1_multi_stage)"); goto done; }
    {
        const char* v = qx__rcstr(api->value);
        if (!v || (strcmp(v, "modelslim_v1") != 0 && strcmp(v, "modelslim_v1_multi_stage") != 0)) {
            r = qx__rcfail(&C, api->line, "apiversion: expected modelslim_v1 or modelslim_v1_multi_stage, found %s", qx_yaml_describe(api->value, d, sizeof d));
            goto done;
        }
        snprintf(cfg->apiversion, sizeof cfg->apiversion, "%s", v);
    }
    if (!spec) { r = qx__rcfail(&C, 1, "spec is missing (spec.process with a quarot or adapt_rotation processor)"); goto done; }
    r = qx__rcspec(&C, spec);
done:
    qx_yaml_doc_free(&doc);
    if (r != QUAROT_OK) qx_runcfg_free(cfg);
    return r;
}

void qx_runcfg_free(qx_runcfg* cfg) {
    if (!cfg) return;
    free(cfg->stage1.layer_type);
    free(cfg->stage1.dataset);
    free(cfg->stage2.layers);
    free(cfg->stage2.rotations);
    memset(cfg, 0, sizeof *cfg);
}
