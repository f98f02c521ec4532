/* qx_store.h - a named tensor store for the examples, tests and the quarot tool.

   Checkpoint readers (llama2.c, safetensors, GGUF) fill a qx_store with Hugging Face-style tensor
   names and a quarot_model_config; the reference forward pass and the rotation pipeline read and
   write the tensors through it; writers save it back. Tensors are contiguous, owned by the store
   (heap) unless added as views of memory someone else owns (a file mapping).

   Errors: functions return quarot_result and, where a qx_err is passed, a one-line message naming
   the file or tensor and the reason. */
#ifndef QX_STORE_H
#define QX_STORE_H

#include "quarot.h"

#ifdef __cplusplus
extern "C" {
#endif

/* One-line error message of the example code ("file.bin: header says dim 0"). */
typedef struct qx_err {
    char msg[512];
} qx_err;

#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
/* Formats into e->msg (e may be NULL); returns nothing so callers write `qx_err_set(e, ...); return X;`. */
void qx_err_set(qx_err* e, const char* fmt, ...);

typedef struct qx_entry {
    char* name;
    quarot_tensor t;
    void* owned;          /* heap block the store frees, or NULL for a view */
} qx_entry;

/* A named byte string that travels with the model from reader to writer: the text of config.json
   ("hf.config.json"), the safetensors __metadata__ object ("safetensors.metadata"), the GGUF
   key/value section ("gguf.kv"). Writers use them to preserve what they do not interpret. */
typedef struct qx_blob {
    char* key;
    void* data;           /* len bytes plus a NUL the store adds */
    size_t len;
} qx_blob;

/* A function qx_store_free calls (last registered first), e.g. to unmap the file behind views. */
typedef struct qx_cleanup {
    void (*fn)(void* arg);
    void* arg;
} qx_cleanup;

typedef struct qx_store {
    quarot_model_config config;
    qx_entry* items;
    int64_t count, cap;
    char source_format[32];/* set by readers ("llama2c-v0", "llama2c-v1", ...); "" when built by hand */
    qx_blob* blobs;
    int64_t n_blobs;
    qx_cleanup* cleanups;
    int64_t n_cleanups;
} qx_store;

void qx_store_init(qx_store* s);
void qx_store_free(qx_store* s);

/* Add a contiguous tensor; its data are copied from `data`, or zero-filled when data is NULL.
   ne has n_dims sizes, innermost first ({cols, rows}). Fails with QUAROT_ERR_INVALID_ARGUMENT if
   the name exists already. *out (may be NULL) points at the stored view (valid until the store
   grows: look tensors up again by name after adding others). */
quarot_result qx_store_add(qx_store* s, const char* name, quarot_dtype dt, int n_dims, const int64_t* ne,
                           const void* data, quarot_tensor** out);
/* Add a view of memory the store does not own (e.g. a read-only file mapping). */
quarot_result qx_store_add_view(qx_store* s, const char* name, const quarot_tensor* view);
/* Replace a view's data by an owned copy (so it may be written). No-op for owned tensors. */
quarot_result qx_store_make_owned(qx_store* s, const char* name);
/* The tensor named `name`, or NULL. */
quarot_tensor* qx_store_find(const qx_store* s, const char* name);
/* Remove (and free) a tensor; returns 1 if it existed. */
int qx_store_remove(qx_store* s, const char* name);
/* Deep copy: every tensor becomes owned by dst. */
quarot_result qx_store_clone(const qx_store* src, qx_store* dst);
/* Set (copy in, replacing any old value) / get a blob; get returns NULL when absent. */
quarot_result qx_store_set_blob(qx_store* s, const char* key, const void* data, size_t len);
const void* qx_store_get_blob(const qx_store* s, const char* key, size_t* len);
/* Register fn(arg) to run in qx_store_free after the tensors are freed (views stay valid until then). */
quarot_result qx_store_on_free(qx_store* s, void (*fn)(void* arg), void* arg);

/* RoPE layouts of q/k projection rows within one head of head_dim rows (head_dim even):
   interleaved (llama2.c, GGUF) rotates the pairs (2i, 2i+1); half-split (Hugging Face) rotates
   (i, i + head_dim/2). Converting a W[n_heads*head_dim][in] between them permutes rows inside each
   head: destination row r takes source row qx_rope_src_row(r, head_dim, to_interleaved).
     to_interleaved:   dst h*hd + 2i + j  <-  src h*hd + j*hd/2 + i
     to half-split:    dst h*hd + j*hd/2 + i  <-  src h*hd + 2i + j          (j in {0,1}) */
int64_t qx_rope_src_row(int64_t r, int64_t head_dim, int to_interleaved);

/* Orders names with digit runs compared as numbers ("layers.2" before "layers.10"); strcmp order
   otherwise. Writers use it for a deterministic tensor order. */
int qx_name_cmp(const char* a, const char* b);
/* The decoder layer a tensor name belongs to: N of the first "layers.N." at the start of the name
   or after a '.' ("model.layers.12.mlp..." -> 12); -1 for a global. pos / len (either may be
   NULL) get the offset and the length of N's digits. */
int64_t qx_name_layer(const char* name, size_t* pos, size_t* len);

/* Convert every floating-point tensor to dtype (f32, f16 or bf16), in place of the old data. */
quarot_result qx_store_convert(qx_store* s, quarot_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
