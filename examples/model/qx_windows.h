/* qx_windows.h - the windows of tokens a model is scored on (perplexity, calibration), built once
   from a text and scored by any number of forward passes: by eval/ (qx_eval_windows) and by the
   inference engine (qx_engine_eval) alike.

   Two windowings (what the CLI and the tests cite; `quarot eval --windowing` picks one):

   stream (the default; qx_windows_stream, and eval's qx_eval_perplexity):
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

   Both keep only the first max_windows windows when max_windows > 0. */
#ifndef QX_WINDOWS_H
#define QX_WINDOWS_H

#include "tokenizer/qx_tokenizer.h"

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

/* The logits of every position of one window of len tokens, from position 0, into logits[len][vocab]. */
typedef quarot_result (*qx_window_logits_fn)(void* user, const int32_t* tokens, int64_t len, float* logits, qx_err* e);
/* Scores every window of w with logits_of (the forward pass's or the engine's): the NLL of each
   window token after the first given the ones before it (qx_logits_nll, summed in double), mean and
   perplexity into res. done (may be NULL) is told after each window. Stops at the first error of
   logits_of and returns it; what labels the other errors. */
quarot_result qx_windows_score(const qx_windows* w, int64_t vocab, qx_window_logits_fn logits_of, void* user,
                               void (*done)(void* done_user, int64_t done, int64_t total), void* done_user, const char* what,
                               qx_ppl_result* res, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
