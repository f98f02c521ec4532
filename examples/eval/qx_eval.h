/* qx_eval.h - perplexity over fixed windows and greedy generation, on a qx_forward.

   Two windowings (what the CLI and the tests cite; `quarot eval --windowing` picks one):

   stream (the default; qx_eval_perplexity, qx_windows_stream):
     the text is encoded once, as one stream of tokens with no BOS; the stream is cut into
     consecutive, non-overlapping chunks of seq_len - 1 tokens (a trailing partial chunk is dropped);
     each window is [BOS] + chunk (seq_len tokens) and runs through the model from position 0;
     every position t = 0 .. seq_len-2 predicts token t+1 of the window (the first chunk token is
     predicted from BOS alone), so a window contributes seq_len - 1 negative log-likelihoods.
     With bos = -1 (no BOS) the chunks are seq_len tokens and each contributes seq_len - 1 NLLs.

   docs (qx_windows_docs):
     the text is split into documents at blank lines: a line is a run of bytes ended by "\n" (or the
     end of the text); a blank line is empty or holds only spaces, tabs and "\r"; a document is a
     maximal run of non-blank lines, from the first byte of its first line to the last byte of its
     last line before that line's "\n" (a "\r" before the "\n" is dropped too). Each document is
     encoded on its own as run.c does (dummy-prefix space, no BOS from the encoder); its tokens are
     cut into consecutive chunks of seq_len - 1 (seq_len without BOS) and every chunk, the last
     partial one included, becomes a window [BOS] + chunk from position 0, scoring each of its
     tokens (len - 1 NLLs for a window of len tokens; a window of fewer than 2 tokens scores nothing
     and is skipped). Windows follow file order: a document longer than seq_len - 1 tokens continues
     in the next window, with a fresh BOS and no memory of the previous one.

   Both: ppl = exp(mean NLL over every scored token of every window), the NLL of each token taken
   from a log-softmax computed in double (max-shifted), summed in double in window order; only the
   first max_windows windows are used when max_windows > 0.

   Greedy generation: from BOS, feed one token at a time through the KV cache; the next token is the
   argmax of the logits (ties go to the lowest index). */
#ifndef QX_EVAL_H
#define QX_EVAL_H

#include "qx_forward.h"
#include "qx_tokenizer.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_ppl_opts {    /* zero-init = seq_len 256, every full window, BOS 1 */
    int64_t seq_len;            /* window length including BOS; 0 = 256; >= 2 */
    int64_t max_windows;        /* 0 = all full windows */
    int32_t bos;                /* 0 = 1 (llama2.c's BOS), -1 = no BOS, else that id */
} qx_ppl_opts;

typedef enum qx_windowing {
    QX_WINDOWING_STREAM = 0,    /* the default: one token stream, full windows only */
    QX_WINDOWING_DOCS = 1       /* documents split at blank lines, each from a fresh BOS */
} qx_windowing;

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

/* Stream perplexity of tokens[n_tokens] (qx_windows_stream + qx_eval_windows). QUAROT_ERR_INVALID_ARGUMENT when not a
   single full window fits. o may be NULL. Resets f's KV cache. */
quarot_result qx_eval_perplexity(qx_forward* f, const int32_t* tokens, int64_t n_tokens, const qx_ppl_opts* o,
                                 qx_ppl_result* res, qx_err* e);

/* Windows built once and scored by any number of forward passes (every setting of `quarot eval`).
   Window w is tokens[offset[w] .. offset[w+1]), BOS included when there is one. */
typedef struct qx_windows {
    int32_t* tokens;            /* every window back to back */
    int64_t* offset;            /* [n + 1] */
    int64_t n;                  /* windows */
    int64_t n_predicted;        /* tokens scored: sum over windows of (length - 1) */
    int64_t max_len;            /* longest window */
    int64_t n_docs;             /* docs: documents with at least one window taken; stream: 0 */
    int64_t n_docs_total;       /* docs: documents in the text (all of them, even past max_windows) */
    int64_t n_text_tokens;      /* stream: tokens of the whole text; docs: tokens of the documents taken */
} qx_windows;

/* Stream windowing of tokens[n_tokens] (see above); QUAROT_ERR_INVALID_ARGUMENT when not a single
   full window fits. o may be NULL (defaults as qx_eval_perplexity). */
quarot_result qx_windows_stream(qx_windows* w, const int32_t* tokens, int64_t n_tokens, const qx_ppl_opts* o, qx_err* e);
/* Docs windowing of text[len] with tokenizer t (see above); QUAROT_ERR_INVALID_ARGUMENT when the
   text yields no window. Errors of the encoder are passed on. */
quarot_result qx_windows_docs(qx_windows* w, const qx_tokenizer* t, const char* text, size_t len, const qx_ppl_opts* o,
                              qx_err* e);
void qx_windows_free(qx_windows* w);

/* Called after each window: done windows of total. */
typedef void (*qx_ppl_progress_fn)(void* user, int64_t done, int64_t total);

/* Perplexity of f over the windows w (see "Both" above). progress may be NULL. Resets f's KV cache. */
quarot_result qx_eval_windows(qx_forward* f, const qx_windows* w, qx_ppl_progress_fn progress, void* user,
                              qx_ppl_result* res, qx_err* e);

/* Greedy decoding: out[0..n-1] are the n tokens generated after `bos` (bos not included). Resets
   f's KV cache first; stops at nothing (the caller decides what to do with EOS / BOS tokens). */
quarot_result qx_eval_generate(qx_forward* f, int32_t bos, int64_t n, int32_t* out, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
