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
/* Weight grids: the quantization grid a stored weight already lies on, for the reference forward
   pass's integer products (model/qx_qlinear.h). A reader of a quantized file (the packed W4A4
   reader) that dequantizes a symmetric linear W[rows][cols] exactly, W = f32(code) * scale, records
   its bits, group and scales [rows][cols/group] as the blob "quarot.grid:<weight name>". A grid
   describes the tensor as it was read: whoever changes the tensor's values drops its grid
   (qx_store_remove_grid); the forward pass refuses weights that are off their grid. */
#define QX_GRID_PREFIX "quarot.grid:"
typedef struct qx_grid {
    int bits;             /* 2..8, symmetric: codes in [-2^(bits-1), 2^(bits-1) - 1] */
    int64_t rows, cols, group;   /* group divides cols (cols = one group per row) */
    const float* scales;  /* [rows][cols/group], finite and >= 0 (view of the blob) */
} qx_grid;
quarot_result qx_store_set_grid(qx_store* s, const char* weight, int bits, int64_t rows, int64_t cols, int64_t group,
                                const float* scales);
/* 1 and *g filled when `weight` has a well-formed grid (NULL-safe), else 0. */
int qx_store_get_grid(const qx_store* s, const char* weight, qx_grid* g);
void qx_store_remove_grid(qx_store* s, const char* weight);
/* Shapes a quarot_tensor (ne[QUAROT_MAX_DIMS]) does not hold as written: more than QUAROT_MAX_DIMS
   dimensions (Qwen2-VL's Conv3d patch embedding [embed][3][2][14][14]), a scalar (rank 0), or outer
   sizes of 1 that the writers' qx_plan_rank would drop ([1][n]). Such a tensor enters the store as
   its bytes unchanged with ne = qx_shape_fold(shape) (the three outermost sizes kept, the innermost
   ones multiplied into ne[0]), and its shape as written as the blob "quarot.shape:<name>"
   ({int64 rank, int64 shape[rank]}, outermost first). The writers give the tensor that shape back
   as long as the tensor's ne still equals the fold (whoever reshapes a tensor drops the record by
   doing so); GGUF refuses a rank above 4 by name. */
#define QX_SHAPE_PREFIX "quarot.shape:"
#define QX_MAX_RANK 64
/* ne of a tensor of shape[rank] (outermost first, rank 0..QX_MAX_RANK); see above. */
void qx_shape_fold(int rank, const int64_t* shape, int64_t ne[QUAROT_MAX_DIMS]);
/* Records the written shape of tensor `name` (replacing an earlier record). */
quarot_result qx_store_set_shape(qx_store* s, const char* name, int rank, const int64_t* shape);
/* 1 with *rank and *shape (a view of the blob) when `name` has a record whose fold equals t->ne, else 0. */
int qx_store_get_shape(const qx_store* s, const char* name, const quarot_tensor* t, int* rank, const int64_t** shape);
/* Renames entry i (0 <= i < count) to `name` (copied; an existing name is QUAROT_ERR_INVALID_ARGUMENT),
   moving its grid and shape records with it. */
quarot_result qx_store_rename(qx_store* s, int64_t i, const char* name);
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
