/* qx_calib.c - see qx_calib.h. */
#include "eval/qx_calib.h"
#include "support/qx_file.h"
#include "formats/qx_json.h"
#include "pipeline/qx_layerwise.h"
#include "model/qx_model.h"
#include "model/qx_online.h"
#include "support/qx_str.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- dataset ------------------------------------------------------------------------------ */

static int qx__space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

void qx_calib_text_free(qx_calib_text* t) {
    if (!t) return;
    free(t->text);
    free(t->rec_off);
    memset(t, 0, sizeof *t);
}

/* The text of one JSONL record: a string, or an object's "text" member, or its first string member. */
static const qx_json* qx__record_text(const qx_json* v) {
    size_t k;
    if (v->type == QX_JSON_STRING) return v;
    if (v->type != QX_JSON_OBJECT) return NULL;
    for (k = 0; k < v->count; ++k)
        if (v->items[k].key_len == 4 && memcmp(v->items[k].key, "text", 4) == 0)
            return v->items[k].type == QX_JSON_STRING ? &v->items[k] : NULL;
    for (k = 0; k < v->count; ++k)
        if (v->items[k].type == QX_JSON_STRING) return &v->items[k];
    return NULL;
}

/* JSONL: every non-blank line is one JSON value; the records' texts are packed back to back into
   t->text with their offsets in rec_off. */
static quarot_result qx__load_jsonl(const char* path, const char* data, size_t len, qx_calib_text* t, qx_err* e) {
    size_t pos = 0, cap_rec = 0, used = 0;
    int64_t line = 0;
    quarot_result r = QUAROT_OK;
    t->jsonl = 1;
    t->text = (char*)malloc(len + 1);   /* decoded texts are never longer than their JSON */
    if (!t->text) { qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    while (pos < len && r == QUAROT_OK) {
        size_t eol = pos, a, b;
        qx_json_doc doc;
        const qx_json* s;
        char name[64];
        while (eol < len && data[eol] != '\n') ++eol;
        ++line;
        a = pos;
        b = eol;
        pos = eol < len ? eol + 1 : len;
        while (a < b && qx__space(data[a])) ++a;
        while (b > a && qx__space(data[b - 1])) --b;
        if (a == b) continue;
        snprintf(name, sizeof name, "line %lld", (long long)line);
        r = qx_json_parse(data + a, b - a, name, NULL, &doc, e);
        if (r != QUAROT_OK) {
            char msg[sizeof e->msg];
            snprintf(msg, sizeof msg, "%s", e->msg);
            qx_err_set(e, "%s: %s (one JSON value per line expected)", path, msg);
            r = QUAROT_ERR_PARSE;
            break;
        }
        s = qx__record_text(doc.root);
        if (!s) {
            qx_err_set(e, "%s: line %lld: a JSON %s without a string field (expected \"text\" or {\"text\": \"...\"})", path,
                       (long long)line, qx_json_type_name(doc.root->type));
            qx_json_doc_free(&doc);
            r = QUAROT_ERR_PARSE;
            break;
        }
        if (s->len == 0) {
            t->n_skipped++;
        } else {
            if ((size_t)t->n_records + 2 > cap_rec) {
                size_t nc = cap_rec ? 2 * cap_rec : 256;
                size_t* p = (size_t*)realloc(t->rec_off, nc * sizeof *p);
                if (!p) { qx_json_doc_free(&doc); qx_err_set(e, "%s: out of memory", path); r = QUAROT_ERR_OUT_OF_MEMORY; break; }
                t->rec_off = p;
                cap_rec = nc;
            }
            if (used + s->len > len) {   /* cannot happen (escapes only shrink), but never overrun */
                qx_json_doc_free(&doc);
                qx_err_set(e, "%s: line %lld: internal size error", path, (long long)line);
                r = QUAROT_ERR_INTERNAL;
                break;
            }
            t->rec_off[t->n_records] = used;
            memcpy(t->text + used, s->str, s->len);
            used += s->len;
            t->rec_off[++t->n_records] = used;
        }
        qx_json_doc_free(&doc);
    }
    if (r == QUAROT_OK && t->n_records == 0) {
        qx_err_set(e, "%s: no text in any record (%lld empty)", path, (long long)t->n_skipped);
        r = QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (r == QUAROT_OK) {
        t->text[used] = '\0';
        t->len = used;
    }
    return r;
}

quarot_result qx_calib_text_load(const char* path, qx_calib_text* t, qx_err* e) {
    char* data = NULL;
    size_t len = 0;
    quarot_result r;
    memset(t, 0, sizeof *t);
    if (!path) { qx_err_set(e, "calibration text: no path"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (qx_is_dir(path)) { qx_err_set(e, "%s: is a directory, not a text or .jsonl file", path); return QUAROT_ERR_IO; }
    if (!qx_path_exists(path)) { qx_err_set(e, "%s: no such file (calibration text)", path); return QUAROT_ERR_IO; }
    r = qx_read_file(path, (size_t)1 << 31, &data, &len, e);
    if (r != QUAROT_OK) return r;
    if (qx_str_ends_with(path, ".jsonl")) {
        r = qx__load_jsonl(path, data, len, t, e);
        free(data);
        if (r != QUAROT_OK) qx_calib_text_free(t);
        return r;
    }
    t->text = data;
    t->len = len;
    return QUAROT_OK;
}

/* ---- windows ------------------------------------------------------------------------------ */

/* Append [bos] + c[0..n) as one window (bos < 0: none; capacities doubled as needed). */
static quarot_result qx__push(qx_windows* w, int64_t* cap_tok, int64_t* cap_win, int32_t bos, const int32_t* c, int64_t n) {
    int64_t at;
    if (w->n + 2 > *cap_win) {
        int64_t nc = *cap_win ? 2 * *cap_win : 64;
        int64_t* p = (int64_t*)realloc(w->offset, (size_t)nc * sizeof *p);
        if (!p) return QUAROT_ERR_OUT_OF_MEMORY;
        if (w->n == 0) p[0] = 0;
        w->offset = p;
        *cap_win = nc;
    }
    at = w->offset[w->n];
    if (at + n + 1 > *cap_tok) {
        int64_t nc = *cap_tok ? 2 * *cap_tok : 4096;
        int32_t* p;
        while (nc < at + n + 1) nc *= 2;
        p = (int32_t*)realloc(w->tokens, (size_t)nc * sizeof *p);
        if (!p) return QUAROT_ERR_OUT_OF_MEMORY;
        w->tokens = p;
        *cap_tok = nc;
    }
    if (bos >= 0) w->tokens[at++] = bos;
    memcpy(w->tokens + at, c, (size_t)n * sizeof *c);
    w->offset[++w->n] = at + n;
    w->n_predicted += bos >= 0 ? n : n - 1;
    if (n + 1 > w->max_len) w->max_len = n + 1;
    return QUAROT_OK;
}

quarot_result qx_calib_windows(const qx_calib_text* t, const qx_tokenizer* tok, int windowing, int64_t seq_len,
                               int64_t max_windows, qx_windows* w, qx_err* e) {
    qx_ppl_opts po;
    quarot_result r = QUAROT_OK;
    memset(w, 0, sizeof *w);
    if (!t || !tok || seq_len < 2 || max_windows < 0) {
        qx_err_set(e, "calibration windows: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    memset(&po, 0, sizeof po);
    po.seq_len = seq_len;
    po.max_windows = max_windows;
    po.bos = qx_tokenizer_window_bos(tok);   /* the model's BOS, or none (-1) */
    if (!t->jsonl) {
        if (windowing == QX_WINDOWING_DOCS) return qx_windows_docs(w, tok, t->text, t->len, &po, e);
        {
            int64_t cap = qx_tokenizer_max_tokens(t->len), n = 0;
            int32_t* s = (int32_t*)malloc((size_t)cap * sizeof *s);
            if (!s) { qx_err_set(e, "calibration text: out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
            r = qx_tokenizer_encode(tok, t->text, t->len, 0, 0, s, cap, &n, e);
            if (r == QUAROT_OK) r = qx_windows_stream(w, s, n, &po, e);
            free(s);
            return r;
        }
    } else {
        /* record by record: [BOS] + chunks of seq_len - 1 tokens, the last partial one included */
        int64_t i, cap_tok = 0, cap_win = 0, chunk = po.bos >= 0 ? seq_len - 1 : seq_len, total = 0, cap_s = 0;
        int32_t* s = NULL;
        for (i = 0; i < t->n_records && r == QUAROT_OK; ++i) {
            const char* p = t->text + t->rec_off[i];
            size_t len = t->rec_off[i + 1] - t->rec_off[i];
            int64_t need = qx_tokenizer_max_tokens(len), n = 0, k;
            if (need > cap_s) {
                int32_t* q = (int32_t*)realloc(s, (size_t)need * sizeof *q);
                if (!q) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "calibration text: out of memory"); break; }
                s = q;
                cap_s = need;
            }
            r = qx_tokenizer_encode(tok, p, len, 0, 0, s, cap_s, &n, e);
            if (r != QUAROT_OK) break;
            total += n;
            for (k = 0; k < n && r == QUAROT_OK; k += chunk) {
                if (max_windows > 0 && w->n >= max_windows) break;
                if (po.bos < 0 && n - k < 2) break;   /* a window of one token scores nothing */
                r = qx__push(w, &cap_tok, &cap_win, po.bos, s + k, n - k < chunk ? n - k : chunk);
                if (r != QUAROT_OK) qx_err_set(e, "calibration text: out of memory");
            }
            if (max_windows > 0 && w->n >= max_windows) break;
            w->n_docs++;
        }
        free(s);
        w->n_docs_total = t->n_records;
        w->n_text_tokens = total;
        if (r == QUAROT_OK && w->n == 0) {
            qx_err_set(e, "calibration text: no window (every record encodes to nothing)");
            r = QUAROT_ERR_INVALID_ARGUMENT;
        }
        if (r != QUAROT_OK) qx_windows_free(w);
        return r;
    }
}

/* ---- stage 1 ------------------------------------------------------------------------------ */

quarot_result qx_calib_check(const quarot_adapt_desc* d, int64_t hidden, qx_err* e) {
    quarot_adapt_capture cap;
    quarot_adapt_context ctx;
    quarot_result r = quarot_adapt_capture_init(&cap, hidden, d, NULL);
    if (r != QUAROT_OK) {
        qx_err_set(e, "adapt stage 1: layer_type must be 1..4096 non-empty patterns shorter than %d bytes, max_samples >= 1 (%s)",
                   QUAROT_NAME_MAX, quarot_result_string(r));
        return r == QUAROT_ERR_OUT_OF_MEMORY ? r : QUAROT_ERR_INVALID_ARGUMENT;
    }
    /* An empty capture: stage 1 checks its options first and, when they are fine, stops at "no
       activations" (QUAROT_ERR_NOT_FOUND) before any work. */
    quarot_adapt_context_init(&ctx, NULL);
    r = quarot_adapt_stage1(&cap, d, &ctx, NULL);
    if (r == QUAROT_ERR_NOT_FOUND) r = QUAROT_OK;
    else if (r == QUAROT_OK) r = QUAROT_ERR_INTERNAL;
    else qx_err_set(e, "%s", ctx.error[0] ? ctx.error : quarot_result_string(r));
    quarot_adapt_context_free(&ctx);
    quarot_adapt_capture_free(&cap);
    return r;
}

/* What the capture hook of the forward pass sees. */
typedef struct qx__calib_hook {
    quarot_adapt_capture* cap;
    const quarot_plan* plan;        /* the linears reading the residual stream (fusion targets) */
    int skip_bos;                   /* drop row 0 (the BOS token at position 0) of this window */
    int32_t first[64];              /* the experts token 0 was routed to in the current MoE layer */
    int64_t n_first;
    quarot_result status;
    char msg[400];
} qx__calib_hook;

static int qx__reads_residual(const quarot_plan* p, const char* name) {
    int64_t i;
    for (i = 0; i < p->n_linears; ++i)
        if (strcmp(p->linears[i].weight, name) == 0) return 1;
    return 0;
}

/* A routed expert's linear under its pooled name: "<prefix>experts.<e>.<w>" becomes
   "<prefix>experts.<w>" (the rows of all experts of a layer in one linear), Mixtral's w1 / w3 / w2
   as gate_proj / up_proj / down_proj; 1 when name is an expert's, else 0 (pooled unset). */
static int qx__pool_expert(const char* name, char* pooled, size_t size) {
    const char* p = strstr(name, "experts.");
    const char* q;
    const char* w;
    if (!p || (p > name && p[-1] != '.')) return 0;   /* not shared_experts / shared_expert */
    q = p + 8;
    while (*q >= '0' && *q <= '9') ++q;
    if (q == p + 8 || *q != '.') return 0;            /* a stacked 3-D name: no index to drop */
    w = q + 1;
    if (strcmp(w, "w1.weight") == 0) w = "gate_proj.weight";
    else if (strcmp(w, "w3.weight") == 0) w = "up_proj.weight";
    else if (strcmp(w, "w2.weight") == 0) w = "down_proj.weight";
    snprintf(pooled, size, "%.*s%s", (int)(p + 8 - name), name, w);
    return 1;
}

/* Whether a MoE layer's linear reads the normed residual stream: the router, the shared expert's
   and the routed experts' gate / up (not down); -1 when name is not a MoE linear. */
static int qx__moe_reads_residual(const char* name) {
    if (!strstr(name, "experts.") && !strstr(name, "shared_expert.") && !strstr(name, "mlp.gate.weight") &&
        !strstr(name, "block_sparse_moe.gate.weight"))
        return -1;
    return strstr(name, "down_proj") == NULL;
}

/* A MoE layer's routing (before its experts run): whose rows start with token 0's. */
static void qx__calib_route(void* user, int64_t layer, const int32_t* experts, int64_t T, int64_t k) {
    qx__calib_hook* h = (qx__calib_hook*)user;
    int64_t j;
    (void)layer;
    h->n_first = T > 0 ? (k < 64 ? k : 64) : 0;
    for (j = 0; j < h->n_first; ++j) h->first[j] = experts[j];
}

/* Whether row 0 of expert linear `name` (its rows in token order) is token 0's. */
static int qx__first_is_bos(const qx__calib_hook* h, const char* name) {
    const char* p = strstr(name, "experts.");
    long e;
    int64_t j;
    if (!p) return 0;
    e = strtol(p + 8, NULL, 10);
    for (j = 0; j < h->n_first; ++j)
        if (h->first[j] == e) return 1;
    return 0;
}

static void qx__calib_capture(void* user, int64_t layer, const char* name0, const float* x, int64_t rows, int64_t n) {
    qx__calib_hook* h = (qx__calib_hook*)user;
    char pooled[QUAROT_NAME_MAX];
    const int expert = qx__pool_expert(name0, pooled, sizeof pooled);
    const char* name = expert ? pooled : name0;
    int moe = qx__moe_reads_residual(name);
    (void)layer;
    if (h->status != QUAROT_OK) return;
    if (quarot_adapt_capture_matches(h->cap, name) && (moe == 0 || (moe < 0 && !qx__reads_residual(h->plan, name)))) {
        h->status = QUAROT_ERR_INVALID_ARGUMENT;
        snprintf(h->msg, sizeof h->msg,
                 "adapt stage 1: layer_type matches %s, whose input is not the residual stream (Adapt Rotation learns "
                 "the hidden-size rotation R1 from the linears after a norm: q/k/v_proj, gate/up_proj, the experts' and "
                 "the shared expert's gate/up_proj, the router)", name);
        return;
    }
    if (h->skip_bos && rows > 0 && (!expert || qx__first_is_bos(h, name0))) {   /* an expert: only token 0's row */
        x += n;
        rows--;
    }
    (void)quarot_adapt_capture_add(h->cap, name, x, rows, n);   /* errors stay in cap->status */
}

/* Names with digit runs folded to "{i}", distinct ones comma-separated. */
static void qx__fold_names(const quarot_adapt_capture* cap, char* out, size_t size) {
    int64_t i;
    size_t used = 0;
    out[0] = '\0';
    for (i = 0; i < cap->n_linears; ++i) {
        char f[3 * QUAROT_NAME_MAX];
        const char* s = cap->linears[i].name;
        size_t o = 0;
        while (*s) {
            if (*s >= '0' && *s <= '9') {
                while (*s >= '0' && *s <= '9') ++s;
                memcpy(f + o, "{i}", 3);
                o += 3;
            } else {
                f[o++] = *s++;
            }
        }
        f[o] = '\0';
        {
            /* already listed? (an exact entry between separators) */
            const char* p = out;
            size_t fl = strlen(f);
            int dup = 0;
            while ((p = strstr(p, f)) != NULL) {
                if ((p == out || p[-1] == ' ') && (p[fl] == ',' || p[fl] == '\0')) { dup = 1; break; }
                p += fl;
            }
            if (dup) continue;
        }
        if (used + strlen(f) + 3 >= size) {
            if (used + 4 < size) { memcpy(out + used, "...", 4); }
            return;
        }
        used += (size_t)snprintf(out + used, size - used, "%s%s", used ? ", " : "", f);
    }
}

/* ---- qx_calib_stage1, step by step ---- */

/* What qx_calib_stage1 works with; the have_* flags say what qx__cs1_free must free. */
typedef struct qx__cs1 {
    const qx_store* model;
    const qx_windows* w;
    const qx_calib_opts* o;
    quarot_adapt_context* ctx;
    qx_calib_stats* st;
    qx_err* e;
    quarot_plan plan;                      /* the adapter's: the linears reading the residual stream */
    qx_store fused;                        /* the model with its norms fused (R1 = identity) */
    quarot_adapt_capture cap;
    qx__calib_hook hook;
    qx_forward f;
    qx_forward_opts fo;
    quarot_online_list mhooks;             /* the model's own online hooks (qx_model_hooks_attach) */
    qx_online_ctx moc;
    int have_plan, have_fused, have_cap, have_fwd, layerwise;
    double t0;                             /* the forward time counts from the fusion's start */
} qx__cs1;

static void qx__cs1_free(qx__cs1* g) {
    if (g->have_fwd) qx_forward_free(&g->f);
    if (g->have_cap) quarot_adapt_capture_free(&g->cap);
    if (g->have_fused) qx_store_free(&g->fused);
    if (g->have_plan) quarot_plan_free(&g->plan);
    qx_online_ctx_free(&g->moc);
    quarot_online_list_free(&g->mhooks);
}

/* The options checked, the architecture's adapter and its plan. */
static quarot_result qx__cs1_plan(qx__cs1* g) {
    const qx_store* model = g->model;
    const quarot_adapter* ad;
    quarot_result r = qx_calib_check(&g->o->adapt, model->config.hidden, g->e);
    if (r != QUAROT_OK) return r;
    ad = quarot_adapter_find(model->config.arch);
    if (!ad) {
        qx_err_set(g->e, "adapt stage 1: no adapter for architecture '%s' (known: %s)", model->config.arch, quarot_adapter_list());
        return QUAROT_ERR_UNSUPPORTED;
    }
    quarot_plan_init(&g->plan, g->o->env);
    g->have_plan = 1;
    r = ad->build(ad, &model->config, -1, &g->plan);
    if (r != QUAROT_OK) qx_err_set(g->e, "adapt stage 1: adapter '%s': %s", ad->arch, quarot_result_string(r));
    return r;
}

/* 1. norm fusion on a copy (R1 = identity, no R2: the weights are otherwise unchanged); a mapped
   model: layer-wise into a mapped temporary file (qx_layerwise.h), never whole in memory */
static quarot_result qx__cs1_fuse(qx__cs1* g) {
    quarot_rotate_desc fd;
    quarot_model m;
    qx_binding b;
    quarot_result r;
    g->t0 = qx_now();
    memset(&fd, 0, sizeof fd);
    fd.rotation = QUAROT_ROTATION_IDENTITY;
    fd.no_r2 = 1;
    g->layerwise = qx_lw_mapped(g->model);
    if (g->layerwise) {
        qx_err why;
        why.msg[0] = '\0';
        r = qx_lw_rotate(g->model, &fd, &g->fused, NULL, NULL, NULL, &why);
        if (r != QUAROT_OK) {
            qx_err_set(g->e, "adapt stage 1: norm fusion: %s (%s)", why.msg[0] ? why.msg : "failed", quarot_result_string(r));
            return r;
        }
        g->have_fused = 1;
        return QUAROT_OK;
    }
    r = qx_store_clone(g->model, &g->fused);
    if (r != QUAROT_OK) {
        qx_err_set(g->e, "adapt stage 1: copying the model: %s", quarot_result_string(r));
        return r;
    }
    g->have_fused = 1;
    qx_model_bind(&m, &b, &g->fused);
    if (g->o->env) m.env = *g->o->env;
    r = quarot_rotate_model(&m, &fd);
    if (r != QUAROT_OK) {
        qx_err_set(g->e, "adapt stage 1: norm fusion: %s (%s)", m.error[0] ? m.error : "failed", quarot_result_string(r));
        return r;
    }
    qx_model_sync(&m, &g->fused);
    return QUAROT_OK;
}

/* 2a. the capture, and the forward pass over the fused model offering every linear input to it
   (with the model's own online hooks, if it has any) */
static quarot_result qx__cs1_forward_begin(qx__cs1* g) {
    quarot_result r = quarot_adapt_capture_init(&g->cap, g->model->config.hidden, &g->o->adapt, g->o->env);
    if (r != QUAROT_OK) { qx_err_set(g->e, "adapt stage 1: capture: %s", quarot_result_string(r)); return r; }
    g->have_cap = 1;
    memset(&g->hook, 0, sizeof g->hook);
    g->hook.cap = &g->cap;
    g->hook.plan = &g->plan;
    memset(&g->fo, 0, sizeof g->fo);
    g->fo.capture = qx__calib_capture;
    g->fo.capture_user = &g->hook;
    g->fo.capture_router = 1;
    g->fo.route = qx__calib_route;
    g->fo.route_user = &g->hook;
    g->fo.env = g->o->env;
    r = qx_model_hooks_get(g->model, &g->mhooks, g->e);
    if (r != QUAROT_OK) return r;
    if (g->mhooks.count > 0) { g->moc.base = &g->mhooks; g->fo.online = qx_online_hooks; g->fo.online_user = &g->moc; }
    if (g->layerwise) qx_lw_forward_opts(&g->fo, &g->fused);   /* one layer in f32 at a time; fused stays mapped */
    r = qx_forward_init(&g->f, &g->fused, &g->fo, g->e);
    if (r != QUAROT_OK) return r;
    g->have_fwd = 1;
    if (!g->layerwise) {
        qx_store_free(&g->fused);          /* the forward pass holds its own f32 copies */
        qx_store_init(&g->fused);
    }
    return QUAROT_OK;
}

/* 2b. the calibration windows through the forward pass (which is freed after them).
   Every window starts with BOS at position 0, whose activations are the same vector in every
   window: it is captured from the first window only. Otherwise stream windows (period seq_len,
   a power of two by default) would put 1 in every (seq_len / step) kept rows on that one vector
   (the capture keeps every step-th row, step a power of two: e.g. a quarter of all rows at
   seq_len 256 and step 64), and keep the same few positions of every window. Without it, each
   window adds seq_len - 1 rows, an odd period, so the kept rows walk through all positions. */
static quarot_result qx__cs1_windows(qx__cs1* g) {
    const qx_windows* w = g->w;
    qx_calib_stats* st = g->st;
    qx_err* e = g->e;
    quarot_result r = QUAROT_OK;
    int64_t i;
    for (i = 0; i < w->n && r == QUAROT_OK; ++i) {
        int64_t len = w->offset[i + 1] - w->offset[i];
        g->hook.skip_bos = i > 0 && w->tokens[w->offset[i]] == w->tokens[0];   /* position 0 sees only its own token */
        r = qx_forward_window(&g->f, w->tokens + w->offset[i], len, NULL, e);
        if (r == QUAROT_OK && g->hook.status != QUAROT_OK) { r = g->hook.status; qx_err_set(e, "%s", g->hook.msg); }
        if (r == QUAROT_OK && g->moc.status != QUAROT_OK) { r = g->moc.status; qx_err_set(e, "the model's online hooks: %s", quarot_result_string(r)); }
        if (r == QUAROT_OK && g->cap.status != QUAROT_OK) {
            r = g->cap.status;
            qx_err_set(e, "adapt stage 1: capture: %s", g->cap.error[0] ? g->cap.error : quarot_result_string(r));
        }
        st->windows++;
        st->tokens += len;
        if (g->o->on_window) g->o->on_window(g->o->user, i + 1, w->n);
    }
    qx_forward_free(&g->f);
    g->have_fwd = 0;
    return r;
}

/* What the capture holds: the forward time, the linears matched, their rows. */
static void qx__cs1_stats(qx__cs1* g) {
    qx_calib_stats* st = g->st;
    int64_t i;
    st->forward_s = qx_now() - g->t0;
    st->linears = g->cap.n_linears;
    for (i = 0; i < g->cap.n_linears; ++i) {
        st->rows += g->cap.linears[i].count;
        if (g->cap.linears[i].count > st->rows_per_linear) st->rows_per_linear = g->cap.linears[i].count;
    }
    qx__fold_names(&g->cap, st->matched, sizeof st->matched);
}

/* 3. the optimizer */
static quarot_result qx__cs1_optimize(qx__cs1* g) {
    double t0;
    quarot_result r;
    if (g->o->on_optimize) g->o->on_optimize(g->o->user);
    t0 = qx_now();
    r = quarot_adapt_stage1(&g->cap, &g->o->adapt, g->ctx, g->o->env);
    g->st->optimize_s = qx_now() - t0;
    if (r != QUAROT_OK) qx_err_set(g->e, "%s", g->ctx->error[0] ? g->ctx->error : quarot_result_string(r));
    return r;
}

/* Check and plan, fuse the norms, run the windows through the forward pass into the capture, then
   optimize the rotation from what it holds. */
quarot_result qx_calib_stage1(const qx_store* model, const qx_windows* w, const qx_calib_opts* o,
                              quarot_adapt_context* ctx, qx_calib_stats* st, qx_err* e) {
    qx__cs1 g;
    quarot_result r;
    memset(&g, 0, sizeof g);
    quarot_online_list_init(&g.mhooks, NULL);
    qx_online_ctx_init(&g.moc, NULL);
    memset(st, 0, sizeof *st);
    if (!model || !w || !o || !ctx || w->n <= 0) {
        qx_err_set(e, "adapt stage 1: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    g.model = model;
    g.w = w;
    g.o = o;
    g.ctx = ctx;
    g.st = st;
    g.e = e;
    r = qx__cs1_plan(&g);
    if (r == QUAROT_OK) r = qx__cs1_fuse(&g);
    if (r == QUAROT_OK) r = qx__cs1_forward_begin(&g);
    if (r == QUAROT_OK) r = qx__cs1_windows(&g);
    if (r == QUAROT_OK) {
        qx__cs1_stats(&g);
        r = qx__cs1_optimize(&g);
    }
    qx__cs1_free(&g);
    return r;
}

/* ---- the context file --------------------------------------------------------------------- */

quarot_result qx_calib_context_save(const quarot_adapt_context* ctx, const char* path, int force, qx_err* e) {
    size_t need = 0;
    void* buf;
    qx_out out;
    quarot_result r = quarot_adapt_context_write(ctx, NULL, 0, &need);
    if (r != QUAROT_OK) { qx_err_set(e, "%s: cannot serialize the context: %s", path, quarot_result_string(r)); return r; }
    buf = malloc(need);
    if (!buf) { qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    r = quarot_adapt_context_write(ctx, buf, need, &need);
    if (r != QUAROT_OK) { free(buf); qx_err_set(e, "%s: cannot serialize the context: %s", path, quarot_result_string(r)); return r; }
    r = qx_out_begin(&out, path, force, e);
    if (r == QUAROT_OK) r = qx_out_pwrite(&out, buf, need, 0, e);
    if (r == QUAROT_OK) r = qx_out_sync(&out, (uint64_t)need, e);
    if (r == QUAROT_OK) r = qx_out_publish(&out, e);
    qx_out_abort(&out);
    free(buf);
    return r;
}

quarot_result qx_calib_context_load(const char* path, quarot_adapt_context* ctx, qx_err* e) {
    char* data = NULL;
    size_t len = 0;
    quarot_result r;
    if (!path || !path[0]) {
        qx_err_set(e, "no Adapt Rotation context given: run `quarot calibrate` (stage 1) first and pass its output");
        return QUAROT_ERR_NOT_FOUND;
    }
    if (!qx_path_exists(path)) {
        qx_err_set(e, "%s: no such file: run `quarot calibrate` (stage 1) first to write the Adapt Rotation context", path);
        return QUAROT_ERR_NOT_FOUND;
    }
    if (qx_is_dir(path)) {
        qx_err_set(e, "%s: is a directory, not an Adapt Rotation context (written by `quarot calibrate`)", path);
        return QUAROT_ERR_IO;
    }
    r = qx_read_file(path, (size_t)-1 >> 1, &data, &len, e);
    if (r != QUAROT_OK) return r;
    r = quarot_adapt_context_read(ctx, data, len);
    free(data);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s: not a valid Adapt Rotation context (%s)", path, ctx->error[0] ? ctx->error : quarot_result_string(r));
        if (r != QUAROT_ERR_OUT_OF_MEMORY) r = QUAROT_ERR_PARSE;
    }
    return r;
}

const char* qx_calib_dtype(const quarot_adapt_context* ctx) { return ctx && ctx->bits == 8 ? "int8" : "int4"; }

double qx_calib_reduction(const quarot_adapt_context* ctx) {
    if (!ctx || !(ctx->start_loss > 0.0)) return 0.0;
    return (ctx->best_loss - ctx->start_loss) / ctx->start_loss;
}
