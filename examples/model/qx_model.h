/* qx_model.h - expose a qx_store to quarot.h's processor as a quarot_model, and read a model's
   weights out of a store for the forward pass and the engine.

   get_tensor looks tensors up by name, create_tensor adds zero-filled owned tensors (untying the
   embeddings, a bias a LayerNorm bias is fused into). The binding also counts acquire/release
   calls and the most layers held at once, which tests use to check layer-wise processing. */
#ifndef QX_MODEL_H
#define QX_MODEL_H

#include "support/qx_arena.h"
#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_binding {
    qx_store* store;
    int64_t live_layers;      /* layers acquired and not yet released */
    int64_t max_live_layers;  /* the most held at once */
    int64_t acquires, releases;
    int64_t created;          /* tensors create_tensor added */
} qx_binding;

/* Fill m (config copied from the store, callbacks bound to b). Afterwards, copy m->config back into
   the store with qx_model_sync so that writers and the forward pass see the processor's changes. */
void qx_model_bind(quarot_model* m, qx_binding* b, qx_store* s);
void qx_model_sync(const quarot_model* m, qx_store* s);

/* Weight `name` of s as a [rows][cols] matrix (rows 1: a vector): stored as such (ne = {cols, rows})
   or, for a vector, any shape of one row of cols. *out = the tensor; missing: QUAROT_ERR_NOT_FOUND
   when required, else *out = NULL and QUAROT_OK; another shape: QUAROT_ERR_SHAPE_MISMATCH (e says
   which). */
quarot_result qx_model_weight(const qx_store* s, const char* name, int64_t rows, int64_t cols, int required,
                              const quarot_tensor** out, qx_err* e);
/* t (a qx_model_weight answer) copied row by row into a new FP32 [rows][cols] block of arena a. */
quarot_result qx_model_weight_f32(const quarot_tensor* t, const char* name, int64_t rows, int64_t cols, qx_arena* a,
                                  float** out, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
