/* qx_online.h - run quarot.h's online hooks inside the reference forward pass.

   qx_online_hooks is the qx_online_fn the forward pass calls at each site; its user data is a
   qx_online_ctx holding the hook list the processor produced (or one read back from a hook file).
   The forward hands activations as [rows][n] blocks ([T*heads][head_dim] for q and k); the hook's
   own row length (`size`) divides rows*n, and the block is re-cut into rows of that length. A site
   with no hook for the layer is left alone. Errors are recorded in ctx->status (first one wins). */
#ifndef QX_ONLINE_H
#define QX_ONLINE_H

#include "qx_forward.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_online_ctx {
    const quarot_online_list* list;
    void* work;                 /* grown on demand */
    size_t work_size;
    quarot_result status;       /* QUAROT_OK, or the first error */
    int64_t calls;              /* hooks actually applied */
} qx_online_ctx;

void qx_online_ctx_init(qx_online_ctx* c, const quarot_online_list* list);
void qx_online_ctx_free(qx_online_ctx* c);
void qx_online_hooks(void* user, int64_t layer, qx_site site, float* x, int64_t rows, int64_t n);

#ifdef __cplusplus
}
#endif
#endif
