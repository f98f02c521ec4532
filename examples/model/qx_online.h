/* qx_online.h - run quarot.h's online hooks inside the reference forward pass.

   qx_online_hooks is the qx_online_fn the forward pass calls at each site; its user data is a
   qx_online_ctx holding the hook list the processor produced (or one read back from a hook file).
   The forward hands activations as [rows][n] blocks ([T*heads][head_dim] for q and k); the hook's
   own row length (`size`) divides rows*n, and the block is re-cut into rows of that length. A site
   with no hook for the layer is left alone. Errors are recorded in ctx->status (first one wins). */
#ifndef QX_ONLINE_H
#define QX_ONLINE_H

#include "model/qx_forward.h"
#include "support/qx_file.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_online_ctx {
    const quarot_online_list* list;
    const quarot_online_list* base;  /* the model's own hooks (qx_model_hooks_*), run before list's at each
                                        site; NULL: none (set it after qx_online_ctx_init) */
    void* work;                 /* grown on demand */
    size_t work_size;
    quarot_result status;       /* QUAROT_OK, or the first error */
    int64_t calls;              /* hooks actually applied */
} qx_online_ctx;

void qx_online_ctx_init(qx_online_ctx* c, const quarot_online_list* list);
void qx_online_ctx_free(qx_online_ctx* c);
void qx_online_hooks(void* user, int64_t layer, qx_site site, float* x, int64_t rows, int64_t n);

/* ---- hooks that travel with a model ----------------------------------------------------------

   `quarot rotate --online` writes the hook list beside the model (MODEL.quarot-online for a file,
   MODEL/quarot_online.txt for a directory) with a "weights <digest>" line naming the digest of the
   model's weight files (qx_digest_files), and marks GGUF / safetensors outputs with the metadata
   key "quarot.online_hooks" (so a model that needs hooks is recognised without its file). The
   commands that run a model attach the hooks to its store (blob QX_HOOKS_BLOB: the hook file's
   text); qx_ek_forward and the forward passes built on a store run them first at every site, so a
   copy rotated again (the eval columns) runs the model's hooks, then its own. */
#define QX_HOOKS_BLOB "quarot.online_hooks"
#define QX_HOOKS_KEY "quarot.online_hooks"

typedef enum qx_hooks_status {
    QX_HOOKS_NONE = 0,          /* no hook file, and the model is not marked as needing one */
    QX_HOOKS_ATTACHED = 1,      /* found, digest matches, attached */
    QX_HOOKS_UNBOUND = 2,       /* found and attached, but it names no weights digest (an older file) */
    QX_HOOKS_MISSING = 3        /* the model's metadata says it needs hooks, none found */
} qx_hooks_status;

/* The hook file beside model_path (malloc'ed; NULL when out of memory). */
char* qx_hooks_path_for(const char* model_path);
/* A single-file model and its hook file are one unit, published by two renames (docs/formats.md,
   "Publishing a model with its hook file"): while `rotate` replaces a pair, the previous pair's hook
   list is kept as ".<hook file name>.prev" beside it (a hook file of 0 hooks when the previous model
   had none), bound to the previous weights by its digest, until the new model is in place. This is
   that name for hooks_path (malloc'ed; the name cut to the file system's 255 bytes, with a hash of
   the whole name, when longer; NULL when out of memory). */
char* qx_hooks_prev_path(const char* hooks_path);
/* The "weights" digest a hook file's text names, into want (cap bytes); 0 when it names none. */
int qx_hooks_named_digest(const char* text, char* want, size_t cap);
/* The digest of model_path's weight files (qx_weight_files, qx_digest_files). */
quarot_result qx_model_digest(const char* model_path, char out[QX_DIGEST_LEN], qx_err* e);
/* 1 when the store's metadata (GGUF key / safetensors __metadata__) marks it as needing hooks. */
int qx_model_needs_hooks(const qx_store* s);
/* Finds the hook file (hooks_path, or the one beside model_path), checks its "weights" digest
   against model_path's weight files (a mismatch is QUAROT_ERR_INVALID_ARGUMENT: a stale hook file
   is refused, never applied), parses it and attaches its text to s. used (may be NULL) receives the
   file used. hooks_path given but absent is QUAROT_ERR_IO. Beside a single-file model, a kept
   previous hook list (qx_hooks_prev_path: a publish was interrupted) whose digest is the model's is
   the model's own: used when the hook file's digest is not (its hooks, or none when it holds 0);
   one whose digest is not the model's is ignored. */
quarot_result qx_model_hooks_attach(qx_store* s, const char* model_path, const char* hooks_path, qx_hooks_status* status,
                                    char* used, size_t used_cap, qx_err* e);
/* The store's attached hooks parsed into list (initialized here; empty when none). */
quarot_result qx_model_hooks_get(const qx_store* s, quarot_online_list* list, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
