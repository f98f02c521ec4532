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

quarot_result qx_model_weight(const qx_store* s, const char* name, int64_t rows, int64_t cols, int required,
                              const quarot_tensor** out, qx_err* e) {
    const quarot_tensor* t = qx_store_find(s, name);
    *out = NULL;
    if (!t) {
        if (!required) return QUAROT_OK;
        qx_err_set(e, "%s: missing", name);
        return QUAROT_ERR_NOT_FOUND;
    }
    if (t->ne[0] != cols || quarot_tensor_nrows(t) != rows || (rows > 1 && t->ne[1] != rows)) {
        qx_err_set(e, "%s: shape [%lld][%lld], expected [%lld][%lld]", name, (long long)quarot_tensor_nrows(t),
                   (long long)t->ne[0], (long long)rows, (long long)cols);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    *out = t;
    return QUAROT_OK;
}

quarot_result qx_model_weight_f32(const quarot_tensor* t, const char* name, int64_t rows, int64_t cols, qx_arena* a,
                                  float** out, qx_err* e) {
    float* w = (float*)qx_arena_alloc(a, (size_t)rows * (size_t)cols * sizeof(float));
    int64_t r;
    *out = NULL;
    if (!w) {
        qx_err_set(e, "%s: out of memory", name);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    /* row by row: the store may hold strided views, and f16/bf16/f64 convert with RNE */
    for (r = 0; r < rows; ++r) {
        quarot_result res = quarot_tensor_get_row_f32(t, r, w + r * cols);
        if (res != QUAROT_OK) {
            qx_err_set(e, "%s: %s", name, quarot_result_string(res));
            return res;
        }
    }
    *out = w;
    return QUAROT_OK;
}
