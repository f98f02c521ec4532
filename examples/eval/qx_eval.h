/* qx_eval.h - perplexity over fixed windows and greedy generation, on a qx_forward.

   The windows (stream or docs) are model/qx_windows.h's. Perplexity: ppl = exp(mean NLL over every
   scored token of every window), the NLL of each token taken from a log-softmax computed in double
   (max-shifted, model/qx_logits.h), summed in double in window order; only the first max_windows
   windows are used when max_windows > 0.

   Greedy generation: from BOS, feed one token at a time through the KV cache; the next token is the
   argmax of the logits (ties go to the lowest index). */
#ifndef QX_EVAL_H
#define QX_EVAL_H

#include "model/qx_forward.h"
#include "model/qx_windows.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Stream perplexity of tokens[n_tokens] (qx_windows_stream + qx_eval_windows). QUAROT_ERR_INVALID_ARGUMENT when not a
   single full window fits. o may be NULL. Resets f's KV cache. */
quarot_result qx_eval_perplexity(qx_forward* f, const int32_t* tokens, int64_t n_tokens, const qx_ppl_opts* o,
                                 qx_ppl_result* res, qx_err* e);

/* Called after each window: done windows of total. */
typedef void (*qx_ppl_progress_fn)(void* user, int64_t done, int64_t total);

/* Perplexity of f over the windows w (see above). progress may be NULL. Resets f's KV cache. */
quarot_result qx_eval_windows(qx_forward* f, const qx_windows* w, qx_ppl_progress_fn progress, void* user,
                              qx_ppl_result* res, qx_err* e);

/* Greedy decoding: out[0..n-1] are the n tokens generated after `bos` (bos not included). Resets
   f's KV cache first; stops at nothing (the caller decides what to do with EOS / BOS tokens). */
quarot_result qx_eval_generate(qx_forward* f, int32_t bos, int64_t n, int32_t* out, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
