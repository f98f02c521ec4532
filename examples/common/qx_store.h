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

/* Memory that views point into and the store must release (a file mapping): release(ptr, size) is
   called by qx_store_free after the tensors are gone, the last added first. */
typedef struct qx_backing {
    void (*release)(void* ptr, size_t size);
    void* ptr;
    size_t size;
} qx_backing;

typedef struct qx_store {
    quarot_model_config config;
    qx_entry* items;
    int64_t count, cap;
    qx_backing* backings;  /* released by qx_store_free; never copied by qx_store_clone */
    int64_t n_backings;
    char source_format[32];/* set by readers ("llama2c-v0", "llama2c-v1", ...); "" when built by hand */
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
/* Hand the store a block its views point into; release(ptr, size) runs in qx_store_free. On failure
   (out of memory) the block is released at once and the error returned. */
quarot_result qx_store_add_backing(qx_store* s, void (*release)(void* ptr, size_t size), void* ptr, size_t size);
/* Replace a view's data by an owned copy (so it may be written). No-op for owned tensors. */
quarot_result qx_store_make_owned(qx_store* s, const char* name);
/* The tensor named `name`, or NULL. */
quarot_tensor* qx_store_find(const qx_store* s, const char* name);
/* Remove (and free) a tensor; returns 1 if it existed. */
int qx_store_remove(qx_store* s, const char* name);
/* Deep copy: every tensor becomes owned by dst. */
quarot_result qx_store_clone(const qx_store* src, qx_store* dst);
/* Convert every floating-point tensor to dtype (f32, f16 or bf16), in place of the old data. */
quarot_result qx_store_convert(qx_store* s, quarot_dtype dt);

#ifdef __cplusplus
}
#endif
#endif
