/* qx_online.c - see qx_online.h. */
#include "model/qx_online.h"
#include "support/qx_file.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void qx_online_ctx_init(qx_online_ctx* c, const quarot_online_list* list) {
    memset(c, 0, sizeof *c);
    c->list = list;
}

void qx_online_ctx_free(qx_online_ctx* c) {
    free(c->work);
    memset(c, 0, sizeof *c);
}

/* One list's hook for (layer, site) on the block, if it has one. */
static void qx__online_one(qx_online_ctx* c, const quarot_online_list* list, int64_t layer, quarot_online_site s, float* x,
                           int64_t rows, int64_t n) {
    const quarot_online_hook* h = list ? quarot_online_find(list, layer, s) : NULL;
    size_t need;
    if (!h) return;
    if ((rows * n) % h->size != 0) {
        if (c->status == QUAROT_OK) c->status = QUAROT_ERR_SHAPE_MISMATCH;
        return;
    }
    need = quarot_online_workspace_size(h);
    if (need > c->work_size) {
        void* w = realloc(c->work, need);
        if (!w) { if (c->status == QUAROT_OK) c->status = QUAROT_ERR_OUT_OF_MEMORY; return; }
        c->work = w;
        c->work_size = need;
    }
    {
        quarot_result r = quarot_online_apply(h, x, rows * n / h->size, h->size, c->work, c->work_size);
        if (r != QUAROT_OK && c->status == QUAROT_OK) c->status = r;
    }
    c->calls++;
}

void qx_online_hooks(void* user, int64_t layer, qx_site site, float* x, int64_t rows, int64_t n) {
    qx_online_ctx* c = (qx_online_ctx*)user;
    quarot_online_site s;
    switch (site) {
        case QX_SITE_DOWN_INPUT: s = QUAROT_SITE_DOWN_INPUT; break;
        case QX_SITE_O_INPUT: s = QUAROT_SITE_O_INPUT; break;
        case QX_SITE_Q_ROPE: s = QUAROT_SITE_Q_ROPE; break;
        case QX_SITE_K_ROPE: s = QUAROT_SITE_K_ROPE; break;
        case QX_SITE_EXPERT_DOWN_INPUT: s = QUAROT_SITE_EXPERT_DOWN_INPUT; break;   /* one hook for all the layer's experts */
        case QX_SITE_SHARED_DOWN_INPUT: s = QUAROT_SITE_SHARED_DOWN_INPUT; break;
        default: return;
    }
    /* the model's own hooks first: the list's were built for the model as it computes (with them) */
    qx__online_one(c, c->base, layer, s, x, rows, n);
    qx__online_one(c, c->list, layer, s, x, rows, n);
}

/* ---- hooks that travel with a model ---- */

char* qx_hooks_path_for(const char* model_path) {
    size_t n;
    char* p;
    if (!model_path) return NULL;
    if (qx_is_dir(model_path)) return qx_path_join(model_path, "quarot_online.txt");
    n = strlen(model_path);
    p = (char*)malloc(n + 16);
    if (p) { memcpy(p, model_path, n); strcpy(p + n, ".quarot-online"); }
    return p;
}

static int qx__contains(const void* hay, size_t n, const char* needle) {
    size_t m = strlen(needle), i;
    const char* h = (const char*)hay;
    if (!hay || m == 0 || n < m) return 0;
    for (i = 0; i + m <= n; ++i)
        if (h[i] == needle[0] && memcmp(h + i, needle, m) == 0) return 1;
    return 0;
}

int qx_model_needs_hooks(const qx_store* s) {
    size_t n = 0;
    const void* b;
    if (!s) return 0;
    if ((b = qx_store_get_blob(s, "gguf.kv", &n)) != NULL && qx__contains(b, n, QX_HOOKS_KEY)) return 1;
    if ((b = qx_store_get_blob(s, "safetensors.metadata", &n)) != NULL && qx__contains(b, n, "\"" QX_HOOKS_KEY "\"")) return 1;
    return 0;
}

char* qx_hooks_prev_path(const char* hooks_path) {
    const char* slash = hooks_path ? strrchr(hooks_path, '/') : NULL;
    const char* base = slash ? slash + 1 : hooks_path;
    size_t dir_len, base_len, keep;
    char* p;
    if (!hooks_path) return NULL;
    dir_len = (size_t)(base - hooks_path);
    base_len = strlen(base);
    keep = base_len + 6 <= 255 ? base_len : 255 - 6 - 17;   /* "." base ".prev", or base cut + "-" 16 hex */
    p = (char*)malloc(dir_len + 255 + 1);
    if (!p) return NULL;
    memcpy(p, hooks_path, dir_len);
    p[dir_len] = '.';
    memcpy(p + dir_len + 1, base, keep);
    if (keep < base_len) {
        uint64_t h = 1469598103934665603ull;
        size_t k;
        for (k = 0; k < base_len; ++k) h = (h ^ (unsigned char)base[k]) * 1099511628211ull;
        sprintf(p + dir_len + 1 + keep, "-%016llx.prev", (unsigned long long)h);
    } else {
        strcpy(p + dir_len + 1 + keep, ".prev");
    }
    return p;
}

int qx_hooks_named_digest(const char* text, char* want, size_t cap) {
    const char* w = !text ? NULL : strncmp(text, "weights ", 8) == 0 ? text : strstr(text, "\nweights ");
    const char* v;
    size_t k = 0;
    if (cap) want[0] = '\0';
    if (!w || !cap) return 0;
    v = w + (w[0] == '\n' ? 9 : 8);
    while (v[k] && v[k] != '\n' && v[k] != '\r' && k + 1 < cap) { want[k] = v[k]; ++k; }
    want[k] = '\0';
    return 1;
}

quarot_result qx_model_digest(const char* model_path, char out[QX_DIGEST_LEN], qx_err* e) {
    char** files = NULL;
    int n_files = 0;
    quarot_result r = qx_weight_files(model_path, &files, &n_files, e);
    if (r == QUAROT_OK) r = qx_digest_files((const char* const*)files, n_files, out, e);
    qx_free_paths(files, n_files);
    return r;
}

/* The kept previous hook list beside a single-file model (qx_hooks_prev_path), when one is there and
   its digest is the model's: 1 and its text in *text (malloc'ed), 0 when there is none or it is not
   the model's (ignored), -1 on a read error (e says why). have: the model's digest, computed here
   when have[0] is 0. */
static int qx__prev_hooks(const char* model_path, const char* hp, char have[QX_DIGEST_LEN], char** text, size_t* len,
                          char** prev_out, qx_err* e) {
    char* prev = qx_hooks_prev_path(hp);
    char want[64];
    int got = 0;
    *text = NULL;
    *prev_out = NULL;
    if (!prev || qx_is_dir(model_path) || !qx_path_exists(prev)) { free(prev); return 0; }
    if (!have[0] && qx_model_digest(model_path, have, e) != QUAROT_OK) { free(prev); return -1; }
    if (qx_read_file(prev, (size_t)64 << 20, text, len, e) != QUAROT_OK) { free(prev); return -1; }
    if (qx_hooks_named_digest(*text, want, sizeof want) && strcmp(want, have) == 0) got = 1;
    if (!got) { free(*text); *text = NULL; free(prev); return 0; }
    *prev_out = prev;
    return 1;
}

quarot_result qx_model_hooks_attach(qx_store* s, const char* model_path, const char* hooks_path, qx_hooks_status* status,
                                    char* used, size_t used_cap, qx_err* e) {
    char* path = hooks_path ? NULL : qx_hooks_path_for(model_path);
    const char* hp = hooks_path ? hooks_path : path;
    char* text = NULL;
    char* prev = NULL;
    size_t len = 0;
    int named, from_prev = 0;
    char want[64], have[QX_DIGEST_LEN];
    quarot_online_list list;
    char err[256];
    quarot_result r;
    if (status) *status = QX_HOOKS_NONE;
    if (used && used_cap) used[0] = '\0';
    have[0] = '\0';
    if (!s || !model_path || !hp) { free(path); qx_err_set(e, "hooks: invalid argument"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (!hooks_path && !qx_path_exists(hp)) {
        /* no hook file: unless a publish was interrupted and kept this model's hook list */
        int k = qx__prev_hooks(model_path, hp, have, &text, &len, &prev, e);
        if (k < 0) { free(path); return QUAROT_ERR_IO; }
        if (k == 0) {
            if (status && qx_model_needs_hooks(s)) *status = QX_HOOKS_MISSING;
            free(path);
            return QUAROT_OK;
        }
        from_prev = 1;
    } else {
        r = qx_read_file(hp, (size_t)64 << 20, &text, &len, e);
        if (r != QUAROT_OK) { free(path); return r; }
    }
    /* the weights it belongs to */
    named = qx_hooks_named_digest(text, want, sizeof want);
    if (named && !from_prev) {
        if (!have[0]) r = qx_model_digest(model_path, have, e);
        else r = QUAROT_OK;
        if (r == QUAROT_OK && strcmp(want, have) != 0) {
            /* not this model's: a publish interrupted after the new hook file went in keeps the old
               pair's list, which is then this model's */
            char* ptext = NULL;
            size_t plen = 0;
            int k = hooks_path ? 0 : qx__prev_hooks(model_path, hp, have, &ptext, &plen, &prev, e);
            if (k > 0) {
                free(text);
                text = ptext;
                len = plen;
                from_prev = 1;
            } else {
                if (k == 0)
                    qx_err_set(e, "%s: the hook file belongs to other weights (it names %s, %s has %s): a stale hook file is not "
                                  "applied; rotate again, or pass the right one with --hooks FILE", hp, want, model_path, have);
                r = k < 0 ? QUAROT_ERR_IO : QUAROT_ERR_INVALID_ARGUMENT;
            }
        }
        if (r != QUAROT_OK) { free(text); free(path); return r; }
    }
    if (used && used_cap) snprintf(used, used_cap, "%s%s", from_prev ? prev : hp,
                                   from_prev ? " (the previous pair's list, kept by an interrupted rotate)" : "");
    quarot_online_list_init(&list, NULL);
    r = quarot_online_read(&list, text, len, err, sizeof err);
    if (r == QUAROT_OK && from_prev && list.count == 0) {   /* the previous model had no hooks */
        quarot_online_list_free(&list);
        free(text); free(path); free(prev);
        if (used && used_cap) used[0] = '\0';
        return QUAROT_OK;
    }
    quarot_online_list_free(&list);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s: %s", from_prev ? prev : hp, err[0] ? err : quarot_result_string(r));
    } else {
        r = qx_store_set_blob(s, QX_HOOKS_BLOB, text, len);
        if (r != QUAROT_OK) qx_err_set(e, "%s: out of memory", hp);
        else if (status) *status = named || from_prev ? QX_HOOKS_ATTACHED : QX_HOOKS_UNBOUND;
    }
    free(text);
    free(path);
    free(prev);
    return r;
}

quarot_result qx_model_hooks_get(const qx_store* s, quarot_online_list* list, qx_err* e) {
    size_t n = 0;
    const char* t = s ? (const char*)qx_store_get_blob(s, QX_HOOKS_BLOB, &n) : NULL;
    char err[256];
    quarot_result r;
    quarot_online_list_init(list, NULL);
    if (!t) return QUAROT_OK;
    r = quarot_online_read(list, t, n, err, sizeof err);
    if (r != QUAROT_OK) qx_err_set(e, "the model's online hooks: %s", err[0] ? err : quarot_result_string(r));
    return r;
}
