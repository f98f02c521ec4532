/* qx_calib.h - Adapt Rotation stage 1 on a real model, as `quarot calibrate`, `quarot eval
   --calib-text` and `quarot run` use it.

   Stage 1 (quarot.h >>adapt) learns R from the inputs of the linears whose names match layer_type,
   taken AFTER norm fusion (the RMSNorm gains folded into the linears, so a captured row is
   x / rms(x): what the rotated model's linears see, up to the rotation itself). Here that is:
     1. a copy of the model with the norms fused (quarot_rotate_model, rotation IDENTITY, no R2);
     2. the calibration windows run through the reference forward pass (qx_forward) with its capture
        hook feeding quarot_adapt_capture_add (every linear's input is offered; the capture keeps the
        matching ones, max_samples rows per linear spread evenly over all tokens);
     3. quarot_adapt_stage1 on the captured rows: the context (H seed, block, R_best, loss history).
   A matched linear must read the residual stream (q/k/v_proj, gate/up_proj: the linears after a
   norm in the adapter's fusion map); a pattern that also matches o_proj or down_proj is refused
   with a message naming it, since R1 never touches their inputs.

   Calibration text: a .txt file is raw text (cut into windows like `quarot eval`: stream or docs);
   a .jsonl file holds one JSON value per line: a string, or an object whose "text" member is used
   (when it has none, its first string member, e.g. msModelSlim's "inputs_pretokenized"); each
   record is one sample, encoded on its own and cut into windows [BOS] + up to seq_len-1 tokens (a
   long record continues in further windows). Blank lines are skipped; empty texts are skipped. */
#ifndef QX_CALIB_H
#define QX_CALIB_H

#include "eval/qx_eval.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A calibration dataset: raw text (.txt or anything not ending in .jsonl) or JSONL records. */
typedef struct qx_calib_text {
    int jsonl;                  /* 1: records, 0: one raw text */
    char* text;                 /* raw: the file (NUL-terminated); jsonl: the records' texts back to back */
    size_t len;
    int64_t n_records;          /* jsonl: texts kept */
    size_t* rec_off;            /* jsonl: [n_records + 1] byte offsets into text */
    int64_t n_skipped;          /* jsonl: empty texts skipped */
} qx_calib_text;

/* Read a dataset file (kind from the name: ".jsonl" = records, else raw text). Errors name the file
   (and the line for JSONL): missing / unreadable -> QUAROT_ERR_IO, malformed JSON or a record
   without a string -> QUAROT_ERR_PARSE, nothing to calibrate on -> QUAROT_ERR_INVALID_ARGUMENT. */
quarot_result qx_calib_text_load(const char* path, qx_calib_text* t, qx_err* e);
void qx_calib_text_free(qx_calib_text* t);

/* Windows for calibration: raw text by `windowing` (QX_WINDOWING_STREAM / _DOCS, as qx_windows.h),
   JSONL record by record (as docs windowing does a document). seq_len >= 2 (BOS included);
   max_windows > 0 keeps the first ones. QUAROT_ERR_INVALID_ARGUMENT when no window results. */
quarot_result qx_calib_windows(const qx_calib_text* t, const qx_tokenizer* tok, int windowing, int64_t seq_len,
                               int64_t max_windows, qx_windows* w, qx_err* e);

/* Stage 1. adapt: the library's options (steps, quant_dtype, layer_type, block_size, max_samples,
   seed, progress); env: threads for the forward pass, the fusion and the optimizer (may be NULL). */
typedef struct qx_calib_opts {
    quarot_adapt_desc adapt;
    const quarot_env* env;
    void (*on_window)(void* user, int64_t done, int64_t total);   /* after each window (may be NULL) */
    void (*on_optimize)(void* user);                              /* between capture and optimizer */
    void* user;
} qx_calib_opts;

typedef struct qx_calib_stats {
    int64_t windows, tokens;    /* fed through the model */
    int64_t linears;            /* linears matched */
    int64_t rows;               /* rows kept over all matched linears (before cutting into blocks) */
    int64_t rows_per_linear;    /* the most any linear kept */
    char matched[256];          /* the matched names, folded ("model.layers.{i}.mlp.up_proj.weight") */
    double forward_s, optimize_s;
} qx_calib_stats;

/* Check the options the optimizer would refuse (quant_dtype, steps, block_size against hidden) before
   any work: QUAROT_OK or QUAROT_ERR_INVALID_ARGUMENT with the library's message in e. */
quarot_result qx_calib_check(const quarot_adapt_desc* d, int64_t hidden, qx_err* e);

/* Stage 1 on `model` (not modified) over the windows w; ctx (initialized) receives the result.
   Errors (message in e): the option errors of qx_calib_check; a pattern matching no linear ->
   QUAROT_ERR_NOT_FOUND (the library's message: the patterns and the linear names that exist); a
   pattern matching a linear that does not read the residual stream -> QUAROT_ERR_INVALID_ARGUMENT;
   forward / fusion failures as they come. */
quarot_result qx_calib_stage1(const qx_store* model, const qx_windows* w, const qx_calib_opts* o,
                              quarot_adapt_context* ctx, qx_calib_stats* st, qx_err* e);

/* Write ctx (quarot_adapt_context_write) to path through a temporary renamed into place; an existing
   path is refused unless force. Errors name the file. */
quarot_result qx_calib_context_save(const quarot_adapt_context* ctx, const char* path, int force, qx_err* e);
/* Read a context file written by qx_calib_context_save (in this or another process). A missing file
   -> QUAROT_ERR_NOT_FOUND with "run `quarot calibrate` (stage 1) first"; a corrupted or foreign one ->
   QUAROT_ERR_PARSE (or the reader's code) with quarot_adapt_context_read's reason. */
quarot_result qx_calib_context_load(const char* path, quarot_adapt_context* ctx, qx_err* e);

/* "int4" / "int8" for the context's bits. */
const char* qx_calib_dtype(const quarot_adapt_context* ctx);
/* Relative change of the loss, (best - start) / start (0 when start is 0). */
double qx_calib_reduction(const quarot_adapt_context* ctx);

#ifdef __cplusplus
}
#endif
#endif
