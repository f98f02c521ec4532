/* qx_model.h - expose a qx_store to quarot.h's processor as a quarot_model.

   get_tensor looks tensors up by name, create_tensor adds zero-filled owned tensors (untying the
   embeddings, a bias a LayerNorm bias is fused into). The binding also counts acquire/release
   calls and the most layers held at once, which tests use to check layer-wise processing. */
#ifndef QX_MODEL_H
#define QX_MODEL_H

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

#ifdef __cplusplus
}
#endif
#endif
