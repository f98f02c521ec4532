/* qx_evalkit.h - the pieces `quarot eval`, `quarot plot` and `quarot demo` share.

   - qx_ek_quarot / qx_ek_rotate: QuaRot's (or Adapt Rotation stage 2's) recipe on a copy of a model (R1 random Hadamard and R2 per head folded
     into the weights, norms fused, online Hadamard hooks before every down_proj and across the heads
     before every o_proj; optionally R3 on q/k after RoPE for KV-cache quantization), with a readable
     account of what was built.
   - qx_ek_forward: a qx_forward that runs a hook list (or none) under fake quantization.
   - qx_ek_setting: a quantization setting ("W4A4", "W8A4KV4") and its forward-pass options.
   - qx_ek_table: the perplexity table, one row per setting and one column per model variant
     ("no rotation", "QuaRot", and later "Adapt"); every column after the first also shows its change
     against the first, so adding a variant is adding a column.
   - small file helpers (read a whole file, find the llama2.c tokenizer beside a model). */
#ifndef QX_EVALKIT_H
#define QX_EVALKIT_H

#include "eval/qx_eval.h"
#include "model/qx_online.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Read a whole file into a malloc'ed buffer (NUL-terminated; *len excludes the NUL). Pipes and
   other streams are read to their end, up to QX_EK_MAX_TEXT bytes (more is an error). */
#define QX_EK_MAX_TEXT ((size_t)256 << 20)
quarot_result qx_ek_read_file(const char* path, char** data, size_t* len, qx_err* e);

/* QuaRot on a deep copy of src: dst (initialized here) gets the rotated weights, hooks (initialized
   here) the online rotations. When src's tensors are views of a mapped file (qx_load_model),
   the copy is not made in memory: the rotation runs layer-wise into a temporary file that dst maps
   (qx_lw_rotate, qx_layerwise.h). r3 = 1 adds the q/k rotation after RoPE (for KV-cache quantization).
   recipe (may be NULL) receives one line per rotation built, e.g.
     "R1 hadamard 64 (sylvester) x 2^0, random signs (seed 0), folded into the weights". */
typedef void (*qx_ek_layer_fn)(void* user, int64_t layer, int64_t n_layers);
quarot_result qx_ek_quarot(const qx_store* src, uint64_t seed, int r3, qx_store* dst, quarot_online_list* hooks,
                           char* recipe, size_t recipe_cap, qx_ek_layer_fn progress, void* user, qx_err* e);
/* The same recipe with R1 from an Adapt Rotation context (stage 2: H*R_best, H rebuilt from the
   context's seed and block; R2 with the context's seed; the same online hooks), so an Adapt column
   differs from the QuaRot column only in R1. context NULL = qx_ek_quarot with `seed` (with a
   context, `seed` is ignored). */
quarot_result qx_ek_rotate(const qx_store* src, uint64_t seed, const quarot_adapt_context* context, int r3, qx_store* dst,
                           quarot_online_list* hooks, char* recipe, size_t recipe_cap, qx_ek_layer_fn progress, void* user,
                           qx_err* e);

/* qx_ek_rotate with the choices of `quarot eval --rotation / --no-online`: online = 0 folds R1 + R2
   only (no hooks but R3 when r3); r1 = QUAROT_ROTATION_HADAMARD or RANDOM_ORTHOGONAL (ignored with
   a context). */
quarot_result qx_ek_rotate_ex(const qx_store* src, uint64_t seed, const quarot_adapt_context* context, int r3, int online,
                              quarot_rotation_kind r1, qx_store* dst, quarot_online_list* hooks, char* recipe, size_t recipe_cap,
                              qx_ek_layer_fn progress, void* user, qx_err* e);

/* The same machinery with a prepared descriptor (its online_out is set to hooks here): who names the
   variant in errors ("QuaRot", "SpinQuant"), r1_note follows the R1 rotation's text in the recipe's
   first line (", seed 0"; NULL = nothing). */
quarot_result qx_ek_rotate_with(const qx_store* src, const quarot_rotate_desc* desc, const char* who, const char* r1_note,
                                qx_store* dst, quarot_online_list* hooks, char* recipe, size_t recipe_cap, qx_ek_layer_fn progress,
                                void* user, qx_err* e);

/* A forward pass with its online-hook context (the forward points into it: do not move it). */
typedef struct qx_ek_forward {
    qx_forward f;
    qx_online_ctx ctx;
    int has_hooks;
    quarot_online_list base;     /* the store's own hooks (qx_model_hooks_get), run before `hooks` */
} qx_ek_forward;

/* hooks may be NULL (no online rotation); q may be NULL (FP32); capture may be NULL. A store with
   hooks attached (qx_model_hooks_attach; copies made by qx_ek_quarot keep them) runs them first. A
   store of views of file mappings (qx_load_model, or a rotation above of such a store) runs
   layer-wise (qx_layerwise.h: it must outlive ef); any other store is copied to f32 at init. */
quarot_result qx_ek_forward_init(qx_ek_forward* ef, const qx_store* s, const quarot_online_list* hooks,
                                 const qx_fake_quant_opts* q, qx_capture_fn capture, void* capture_user, qx_err* e);
/* The same with env's allocator and parallel hook for the forward pass (qx_forward_opts.env; NULL =
   serial): GEMMs, row-wise steps and attention heads are split, with the same results for any
   number of threads. env must outlive ef. */
quarot_result qx_ek_forward_init_env(qx_ek_forward* ef, const qx_store* s, const quarot_online_list* hooks,
                                     const qx_fake_quant_opts* q, qx_capture_fn capture, void* capture_user,
                                     const quarot_env* env, qx_err* e);
/* QUAROT_OK, or the first error an online hook met. */
quarot_result qx_ek_forward_status(const qx_ek_forward* ef);
void qx_ek_forward_free(qx_ek_forward* ef);

/* A quantization setting: bits 16 (or 0) = that part stays FP. */
typedef struct qx_ek_setting {
    int w_bits, a_bits, kv_bits;
    char label[32];              /* "FP32", "W4A4", "W8A4KV4", "W4A16" */
} qx_ek_setting;

/* Fill s->label from the bits. */
void qx_ek_setting_label(qx_ek_setting* s);
/* Forward-pass options: weights per output channel (or per w_group along the input) RTN symmetric,
   activations per token symmetric with clip a_clip (0 = 1.0), K and V per token per head asymmetric. */
void qx_ek_setting_quant(const qx_ek_setting* s, int64_t w_group, double a_clip, qx_fake_quant_opts* q);

#define QX_EK_MAX_ROWS 32
#define QX_EK_MAX_COLS 4
typedef struct qx_ek_table {
    const char* corner;                     /* top-left cell, e.g. "perplexity" */
    int n_rows, n_cols;
    char row[QX_EK_MAX_ROWS][32];
    char col[QX_EK_MAX_COLS][24];
    double v[QX_EK_MAX_ROWS][QX_EK_MAX_COLS];   /* NaN: not measured (printed "-") */
} qx_ek_table;

void qx_ek_table_init(qx_ek_table* t, const char* corner);
int qx_ek_table_add_col(qx_ek_table* t, const char* name);   /* index, or -1 when full */
int qx_ek_table_add_row(qx_ek_table* t, const char* name);
/* Rows of values with 4 decimals; columns after the first add "(+x.x%)" against the first. */
void qx_ek_table_print(FILE* f, const qx_ek_table* t);

#ifdef __cplusplus
}
#endif
#endif
