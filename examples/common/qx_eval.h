/* qx_eval.h - perplexity over fixed windows and greedy generation, on a qx_forward.

   Perplexity windowing (what the CLI and the tests cite):
     the text is encoded once, as one stream of tokens with no BOS; the stream is cut into
     consecutive, non-overlapping chunks of seq_len - 1 tokens (a trailing partial chunk is dropped);
     each window is [BOS] + chunk (seq_len tokens) and runs through the model from position 0;
     every position t = 0 .. seq_len-2 predicts token t+1 of the window (the first chunk token is
     predicted from BOS alone), so a window contributes seq_len - 1 negative log-likelihoods;
     ppl = exp(mean NLL over all windows), the NLL taken from a log-softmax computed in double
     (max-shifted). Only the first max_windows windows are used when max_windows > 0.
   With bos = -1 (no BOS) the chunks are seq_len tokens and each contributes seq_len - 1 NLLs.

   Greedy generation: from BOS, feed one token at a time through the KV cache; the next token is the
   argmax of the logits (ties go to the lowest index). */
#ifndef QX_EVAL_H
#define QX_EVAL_H

#include "qx_forward.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_ppl_opts {    /* zero-init = seq_len 256, every full window, BOS 1 */
    int64_t seq_len;            /* window length including BOS; 0 = 256; >= 2 */
    int64_t max_windows;        /* 0 = all full windows */
    int32_t bos;                /* 0 = 1 (llama2.c's BOS), -1 = no BOS, else that id */
} qx_ppl_opts;

typedef struct qx_ppl_result {
    double ppl;                 /* exp(nll) */
    double nll;                 /* mean negative log-likelihood, nats per token */
    int64_t n_windows;
    int64_t n_predicted;        /* tokens scored */
} qx_ppl_result;

/* -log softmax(logits)[target], stably in double. */
double qx_eval_nll(const float* logits, int64_t vocab, int32_t target);
/* Index of the largest logit (the lowest index among ties; NaN never wins). */
int32_t qx_eval_argmax(const float* logits, int64_t vocab);

/* Perplexity of tokens[n_tokens] (see the windowing above). QUAROT_ERR_INVALID_ARGUMENT when not a
   single full window fits. o may be NULL. Resets f's KV cache. */
quarot_result qx_eval_perplexity(qx_forward* f, const int32_t* tokens, int64_t n_tokens, const qx_ppl_opts* o,
                                 qx_ppl_result* res, qx_err* e);

/* Greedy decoding: out[0..n-1] are the n tokens generated after `bos` (bos not included). Resets
   f's KV cache first; stops at nothing (the caller decides what to do with EOS / BOS tokens). */
quarot_result qx_eval_generate(qx_forward* f, int32_t bos, int64_t n, int32_t* out, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
