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

quarot_result qx_model_hooks_attach(qx_store* s, const char* model_path, const char* hooks_path, qx_hooks_status* status,
                                    char* used, size_t used_cap, qx_err* e) {
    char* path = hooks_path ? NULL : qx_hooks_path_for(model_path);
    const char* hp = hooks_path ? hooks_path : path;
    char* text = NULL;
    size_t len = 0;
    const char* w;
    quarot_online_list list;
    char err[256];
    quarot_result r;
    if (status) *status = QX_HOOKS_NONE;
    if (used && used_cap) used[0] = '\0';
    if (!s || !model_path || !hp) { free(path); qx_err_set(e, "hooks: invalid argument"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (!hooks_path && !qx_path_exists(hp)) {
        if (status && qx_model_needs_hooks(s)) *status = QX_HOOKS_MISSING;
        free(path);
        return QUAROT_OK;
    }
    r = qx_read_file(hp, (size_t)64 << 20, &text, &len, e);
    if (r != QUAROT_OK) { free(path); return r; }
    if (used && used_cap) snprintf(used, used_cap, "%s", hp);
    /* the weights it belongs to */
    w = strncmp(text, "weights ", 8) == 0 ? text : strstr(text, "\nweights ");
    if (w) {
        char want[64], have[QX_DIGEST_LEN];
        char** files = NULL;
        int n_files = 0;
        const char* v = w + (w[0] == '\n' ? 9 : 8);
        size_t k = 0;
        while (v[k] && v[k] != '\n' && v[k] != '\r' && k + 1 < sizeof want) { want[k] = v[k]; ++k; }
        want[k] = '\0';
        r = qx_weight_files(model_path, &files, &n_files, e);
        if (r == QUAROT_OK) r = qx_digest_files((const char* const*)files, n_files, have, e);
        qx_free_paths(files, n_files);
        if (r == QUAROT_OK && strcmp(want, have) != 0) {
            qx_err_set(e, "%s: the hook file belongs to other weights (it names %s, %s has %s): a stale hook file is not "
                          "applied; rotate again, or pass the right one with --hooks FILE", hp, want, model_path, have);
            r = QUAROT_ERR_INVALID_ARGUMENT;
        }
        if (r != QUAROT_OK) { free(text); free(path); return r; }
    }
    quarot_online_list_init(&list, NULL);
    r = quarot_online_read(&list, text, len, err, sizeof err);
    quarot_online_list_free(&list);
    if (r != QUAROT_OK) {
        qx_err_set(e, "%s: %s", hp, err[0] ? err : quarot_result_string(r));
    } else {
        r = qx_store_set_blob(s, QX_HOOKS_BLOB, text, len);
        if (r != QUAROT_OK) qx_err_set(e, "%s: out of memory", hp);
        else if (status) *status = w ? QX_HOOKS_ATTACHED : QX_HOOKS_UNBOUND;
    }
    free(text);
    free(path);
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
