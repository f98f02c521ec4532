/* qx_eval.c - see qx_eval.h. */
#include "eval/qx_eval.h"
#include "model/qx_logits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static quarot_result qx__window_logits(void* user, const int32_t* tokens, int64_t len, float* logits, qx_err* e) {
    return qx_forward_window((qx_forward*)user, tokens, len, logits, e);
}

quarot_result qx_eval_windows(qx_forward* f, const qx_windows* w, qx_ppl_progress_fn progress, void* user,
                              qx_ppl_result* res, qx_err* e) {
    quarot_result r;
    if (!f || !f->layers || !w || !res || w->n <= 0 || !w->tokens || !w->offset || w->n_predicted <= 0) {
        qx_err_set(e, "qx_eval_windows: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    /* each window runs from position 0 (qx_forward_window) */
    r = qx_windows_score(w, f->cfg.vocab, qx__window_logits, f, progress, user, "qx_eval_windows", res, e);
    qx_forward_reset(f);
    return r;
}

quarot_result qx_eval_perplexity(qx_forward* f, const int32_t* tokens, int64_t n_tokens, const qx_ppl_opts* o,
                                 qx_ppl_result* res, qx_err* e) {
    qx_windows w;
    quarot_result r;
    if (!f || !f->layers || !tokens || !res || n_tokens < 0) {
        qx_err_set(e, "qx_eval_perplexity: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    memset(res, 0, sizeof *res);
    r = qx_windows_stream(&w, tokens, n_tokens, o, e);
    if (r == QUAROT_OK) r = qx_eval_windows(f, &w, NULL, NULL, res, e);
    qx_windows_free(&w);
    return r;
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
        tok = qx_logits_argmax(logits, f->cfg.vocab);
        out[i] = tok;
    }
    free(logits);
    return r;
}
