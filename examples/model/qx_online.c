/* qx_online.c - see qx_online.h. */
#include "qx_online.h"

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

void qx_online_hooks(void* user, int64_t layer, qx_site site, float* x, int64_t rows, int64_t n) {
    qx_online_ctx* c = (qx_online_ctx*)user;
    quarot_online_site s;
    const quarot_online_hook* h;
    size_t need;
    switch (site) {
        case QX_SITE_DOWN_INPUT: s = QUAROT_SITE_DOWN_INPUT; break;
        case QX_SITE_O_INPUT: s = QUAROT_SITE_O_INPUT; break;
        case QX_SITE_Q_ROPE: s = QUAROT_SITE_Q_ROPE; break;
        case QX_SITE_K_ROPE: s = QUAROT_SITE_K_ROPE; break;
        default: return;
    }
    h = quarot_online_find(c->list, layer, s);
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
