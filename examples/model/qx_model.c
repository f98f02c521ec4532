/* qx_model.c - see qx_model.h. */
#include "model/qx_model.h"

#include <string.h>

static quarot_result qx__get(void* user, const char* name, quarot_tensor* out) {
    qx_binding* b = (qx_binding*)user;
    quarot_tensor* t = qx_store_find(b->store, name);
    if (!t) return QUAROT_ERR_NOT_FOUND;
    if (!t->data) return QUAROT_ERR_STATE;
    *out = *t;
    return QUAROT_OK;
}

static quarot_result qx__create(void* user, const char* name, quarot_dtype dt, int n_dims, const int64_t* ne, quarot_tensor* out) {
    qx_binding* b = (qx_binding*)user;
    quarot_tensor* t;
    quarot_result r = qx_store_add(b->store, name, dt, n_dims, ne, NULL, &t);
    if (r != QUAROT_OK) return r;
    b->created++;
    *out = *t;
    return QUAROT_OK;
}

static quarot_result qx__acquire(void* user, int64_t layer) {
    qx_binding* b = (qx_binding*)user;
    (void)layer;
    b->acquires++;
    if (++b->live_layers > b->max_live_layers) b->max_live_layers = b->live_layers;
    return QUAROT_OK;
}

static quarot_result qx__release(void* user, int64_t layer, int modified) {
    qx_binding* b = (qx_binding*)user;
    (void)layer;
    (void)modified;
    b->releases++;
    b->live_layers--;
    return QUAROT_OK;
}

void qx_model_bind(quarot_model* m, qx_binding* b, qx_store* s) {
    memset(m, 0, sizeof *m);
    memset(b, 0, sizeof *b);
    b->store = s;
    m->config = s->config;
    m->user_data = b;
    m->get_tensor = qx__get;
    m->create_tensor = qx__create;
    m->acquire_layer = qx__acquire;
    m->release_layer = qx__release;
}

void qx_model_sync(const quarot_model* m, qx_store* s) { s->config = m->config; }
