/* qx_eval.c - see qx_eval.h. */
#include "qx_eval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double qx_eval_nll(const float* logits, int64_t vocab, int32_t target) {
    /* log softmax_t = l_t - (m + log sum_j exp(l_j - m)), m = max_j l_j */
    double m = logits[0], sum = 0.0;
    int64_t j;
    for (j = 1; j < vocab; ++j) if (logits[j] > m) m = logits[j];
    for (j = 0; j < vocab; ++j) sum += exp((double)logits[j] - m);
    return m + log(sum) - (double)logits[target];
}

int32_t qx_eval_argmax(const float* logits, int64_t vocab) {
    int64_t j, best = 0;
    /* strictly greater wins, so the lowest index keeps a tie; a NaN at `best` yields to any number */
    for (j = 1; j < vocab; ++j)
        if (logits[j] > logits[best] || (logits[best] != logits[best] && logits[j] == logits[j])) best = j;
    return (int32_t)best;
}

quarot_result qx_eval_perplexity(qx_forward* f, const int32_t* tokens, int64_t n_tokens, const qx_ppl_opts* o,
                                 qx_ppl_result* res, qx_err* e) {
    qx_ppl_opts opts;
    int64_t seq, chunk, n_win, w, t, vocab;
    int32_t* win = NULL;
    float* logits = NULL;
    double nll = 0.0;
    quarot_result r = QUAROT_OK;
    if (!f || !f->layers || !tokens || !res || n_tokens < 0) {
        qx_err_set(e, "qx_eval_perplexity: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    memset(res, 0, sizeof *res);
    if (o) opts = *o;
    else memset(&opts, 0, sizeof opts);
    seq = opts.seq_len ? opts.seq_len : 256;
    if (opts.bos == 0) opts.bos = 1;   /* llama2.c's BOS; -1 = none */
    if (seq < 2 || seq > (1 << 20) || opts.max_windows < 0 || opts.bos < -1) {
        qx_err_set(e, "qx_eval_perplexity: seq_len %lld, max_windows %lld, bos %ld", (long long)seq,
                   (long long)opts.max_windows, (long)opts.bos);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    /* chunk = text tokens per window; only full chunks count */
    chunk = opts.bos >= 0 ? seq - 1 : seq;
    n_win = n_tokens / chunk;
    if (opts.max_windows > 0 && n_win > opts.max_windows) n_win = opts.max_windows;
    if (n_win == 0) {
        qx_err_set(e, "qx_eval_perplexity: %lld tokens do not fill one window of %lld", (long long)n_tokens, (long long)chunk);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    vocab = f->cfg.vocab;
    win = (int32_t*)malloc((size_t)seq * sizeof *win);
    logits = (float*)malloc((size_t)(seq * vocab) * sizeof *logits);
    if (!win || !logits) {
        free(win);
        free(logits);
        qx_err_set(e, "qx_eval_perplexity: out of memory");
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    /* window w = [BOS] + tokens[w*chunk .. (w+1)*chunk), run from position 0; logits row t scores
       window token t+1, so every window adds seq-1 NLLs (summed in double) */
    for (w = 0; w < n_win && r == QUAROT_OK; ++w) {
        const int32_t* c = tokens + w * chunk;
        if (opts.bos >= 0) {
            win[0] = opts.bos;
            memcpy(win + 1, c, (size_t)chunk * sizeof *win);
        } else {
            memcpy(win, c, (size_t)chunk * sizeof *win);
        }
        r = qx_forward_window(f, win, seq, logits, e);
        if (r != QUAROT_OK) break;
        for (t = 0; t + 1 < seq; ++t) nll += qx_eval_nll(logits + t * vocab, vocab, win[t + 1]);
    }
    free(win);
    free(logits);
    qx_forward_reset(f);
    if (r != QUAROT_OK) return r;
    res->n_windows = n_win;
    res->n_predicted = n_win * (seq - 1);
    res->nll = nll / (double)res->n_predicted;
    res->ppl = exp(res->nll);
    return QUAROT_OK;
}

quarot_result qx_eval_generate(qx_forward* f, int32_t bos, int64_t n, int32_t* out, qx_err* e) {
    float* logits;
    int32_t tok = bos;
    int64_t i;
    quarot_result r = QUAROT_OK;
    if (!f || !f->layers || !out || n < 0) {
        qx_err_set(e, "qx_eval_generate: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    logits = (float*)malloc((size_t)f->cfg.vocab * sizeof *logits);
    if (!logits) {
        qx_err_set(e, "qx_eval_generate: out of memory");
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    /* feed the previous token at the next position through the KV cache, pick the argmax */
    qx_forward_reset(f);
    for (i = 0; i < n; ++i) {
        r = qx_forward_step(f, tok, logits, e);
        if (r != QUAROT_OK) break;
        tok = qx_eval_argmax(logits, f->cfg.vocab);
        out[i] = tok;
    }
    free(logits);
    return r;
}
