/* qx_layerwise.h - what lets `quarot eval`, `calibrate`, `plot` and `run` work one decoder layer at
   a time on models that do not fit in memory in f32.

   - The model stays memory-mapped in its stored dtype (qx_load_model's views). The forward pass
     runs with qx_forward_opts.stream_weights (one layer converted to f32 when it runs) and
     layer_done = qx_lw_layer_done, which hands the mapping's pages back to the kernel after every
     layer (clean private file pages: re-read from the page cache if touched again), so the
     resident set stays near one layer instead of growing to the whole file.
   - A rotated (or norm-fused) variant of the model is not built in memory: qx_lw_rotate writes it
     through qx_rotate_file (one layer in memory, the input's pages dropped as they are consumed)
     to a temporary file in $TMPDIR (or /tmp) in the input's format and dtype, maps it back and
     removes the file (the mapping keeps its pages alive until the store is freed). The disk holds
     one copy of the model meanwhile.
   Peak memory: the globals (embeddings, final norm, lm_head; f32 copies when stored as f16/bf16)
   plus one decoder layer in f32 plus the KV cache and activations of one window. f32 models give
   the same bits as the in-memory path; f16/bf16 models are rotated with each value rounded once to
   the stored dtype (as `quarot rotate` writes them). */
#ifndef QX_LAYERWISE_H
#define QX_LAYERWISE_H

#include "pipeline/qx_rotate_file.h"
#include "model/qx_forward.h"

#ifdef __cplusplus
extern "C" {
#endif

/* 1 when s's tensors are views of file mappings in a format qx_lw_rotate can write (llama2.c,
   GGUF, safetensors): what qx_load_model returns. Stores built in memory give 0. */
int qx_lw_mapped(const qx_store* s);

/* qx_forward_opts.layer_done for a store of views of file mappings (user = the qx_store): madvise
   DONTNEED on each of its mappings. A no-op for stores that own their tensors. */
void qx_lw_layer_done(void* store, int64_t layer);

/* Sets o->stream_weights, and o->layer_done = qx_lw_layer_done with s when s's mappings total at
   least QX_LW_DROP_MIN_BYTES (smaller models stay resident: handing their pages back after every
   linear would only add page faults, e.g. per generated token). */
#define QX_LW_DROP_MIN_BYTES ((size_t)32 << 20)
void qx_lw_forward_opts(qx_forward_opts* o, const qx_store* s);

/* Rotates src (views, left unchanged and usable) with desc into dst (initialized here: views of a
   mapped temporary file, with the processor's config); desc->online_out receives the hooks.
   progress (may be NULL) is called after each rotated layer. st (may be NULL) receives
   qx_rotate_file's account (the rotations built, copies held). */
quarot_result qx_lw_rotate(const qx_store* src, const quarot_rotate_desc* desc, qx_store* dst,
                           void (*progress)(void* user, int64_t done, int64_t total), void* user,
                           qx_rotate_file_stats* st, qx_err* e);

/* Peak resident set of this process in MiB (VmHWM of /proc/self/status; getrusage elsewhere). */
double qx_lw_peak_rss_mib(void);

#ifdef __cplusplus
}
#endif
#endif
