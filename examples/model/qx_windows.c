/* qx_windows.c - see qx_windows.h. */
#include "model/qx_windows.h"
#include "model/qx_logits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Options with the defaults filled in (seq_len 256, BOS 1) and checked; chunk = text tokens per
   window (seq_len - 1 after a BOS, seq_len without). */
static quarot_result qx__ppl_resolve(const qx_ppl_opts* o, qx_ppl_opts* out, int64_t* chunk, const char* who, qx_err* e) {
    if (o) *out = *o;
    else memset(out, 0, sizeof *out);
    if (out->seq_len == 0) out->seq_len = 256;
    if (out->bos == 0) out->bos = 1;   /* llama2.c's BOS; -1 = none */
    if (out->seq_len < 2 || out->seq_len > (1 << 20) || out->max_windows < 0 || out->bos < -1) {
        qx_err_set(e, "%s: seq_len %lld, max_windows %lld, bos %ld", who, (long long)out->seq_len,
                   (long long)out->max_windows, (long)out->bos);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    *chunk = out->bos >= 0 ? out->seq_len - 1 : out->seq_len;
    return QUAROT_OK;
}

void qx_windows_free(qx_windows* w) {
    if (!w) return;
    free(w->tokens);
    free(w->offset);
    memset(w, 0, sizeof *w);
}

/* Append one window [bos] + c[0..len) to w (capacity grown by doubling). */
static quarot_result qx__windows_push(qx_windows* w, int64_t* cap_tok, int64_t* cap_win, int32_t bos, const int32_t* c,
                                      int64_t len) {
    int64_t need = (bos >= 0 ? 1 : 0) + len, at;
    if (w->n + 2 > *cap_win) {
        int64_t nc = *cap_win ? 2 * *cap_win : 64;
        int64_t* p = (int64_t*)realloc(w->offset, (size_t)nc * sizeof *p);
        if (!p) return QUAROT_ERR_OUT_OF_MEMORY;
        w->offset = p;
        *cap_win = nc;
        if (w->n == 0) w->offset[0] = 0;
    }
    at = w->offset[w->n];
    if (at + need > *cap_tok) {
        int64_t nc = *cap_tok ? 2 * *cap_tok : 4096;
        int32_t* p;
        while (nc < at + need) nc *= 2;
        p = (int32_t*)realloc(w->tokens, (size_t)nc * sizeof *p);
        if (!p) return QUAROT_ERR_OUT_OF_MEMORY;
        w->tokens = p;
        *cap_tok = nc;
    }
    if (bos >= 0) w->tokens[at++] = bos;
    memcpy(w->tokens + at, c, (size_t)len * sizeof *c);
    at += len;
    w->offset[++w->n] = at;
    w->n_predicted += need - 1;
    if (need > w->max_len) w->max_len = need;
    return QUAROT_OK;
}

quarot_result qx_windows_stream(qx_windows* w, const int32_t* tokens, int64_t n_tokens, const qx_ppl_opts* o, qx_err* e) {
    qx_ppl_opts opts;
    int64_t chunk, n_win, i, cap_tok = 0, cap_win = 0;
    quarot_result r;
    if (!w) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(w, 0, sizeof *w);
    if (!tokens || n_tokens < 0) {
        qx_err_set(e, "qx_windows_stream: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    r = qx__ppl_resolve(o, &opts, &chunk, "qx_windows_stream", e);
    if (r != QUAROT_OK) return r;
    /* only full chunks count */
    n_win = n_tokens / chunk;
    if (opts.max_windows > 0 && n_win > opts.max_windows) n_win = opts.max_windows;
    if (n_win == 0) {
        qx_err_set(e, "qx_windows_stream: %lld tokens do not fill one window of %lld", (long long)n_tokens, (long long)chunk);
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    /* window i = [BOS] + tokens[i*chunk .. (i+1)*chunk) */
    for (i = 0; i < n_win; ++i) {
        r = qx__windows_push(w, &cap_tok, &cap_win, opts.bos, tokens + i * chunk, chunk);
        if (r != QUAROT_OK) {
            qx_windows_free(w);
            qx_err_set(e, "qx_windows_stream: out of memory");
            return r;
        }
    }
    w->n_text_tokens = n_tokens;
    return QUAROT_OK;
}

static int qx__blank_line(const char* s, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
    return 1;
}

quarot_result qx_windows_docs(qx_windows* w, const qx_tokenizer* t, const char* text, size_t len, const qx_ppl_opts* o,
                              qx_err* e) {
    qx_ppl_opts opts;
    int64_t chunk, cap_tok = 0, cap_win = 0, cap_doc = 0, n_doc;
    int32_t* doc = NULL;
    size_t pos = 0, doc_start = 0, doc_end = 0;
    int in_doc = 0, full = 0;
    quarot_result r;
    if (!w) return QUAROT_ERR_INVALID_ARGUMENT;
    memset(w, 0, sizeof *w);
    if (!t || (!text && len > 0)) {
        qx_err_set(e, "qx_windows_docs: bad arguments");
        return QUAROT_ERR_INVALID_ARGUMENT;
    }
    r = qx__ppl_resolve(o, &opts, &chunk, "qx_windows_docs", e);
    if (r != QUAROT_OK) return r;
    /* Scan line by line; a document is [doc_start, doc_end) over its non-blank lines. One more
       iteration at pos == len closes the last document. */
    while (r == QUAROT_OK) {
        size_t eol = pos, next;
        int at_end = pos >= len, blank;
        if (!at_end) {
            while (eol < len && text[eol] != '\n') ++eol;
            next = eol < len ? eol + 1 : len;
            blank = qx__blank_line(text + pos, eol - pos);
        } else {
            next = len;
            blank = 1;
        }
        if (!blank) {
            size_t end = eol;
            if (end > pos && text[end - 1] == '\r') --end;   /* "\r\n" line ends */
            if (!in_doc) { doc_start = pos; in_doc = 1; }
            doc_end = end;
        } else if (in_doc) {
            /* encode the document (no BOS from the encoder) and cut it into windows */
            int64_t need = qx_tokenizer_max_tokens(doc_end - doc_start), i;
            in_doc = 0;
            w->n_docs_total++;
            if (!full) {
                if (need > cap_doc) {
                    int32_t* p = (int32_t*)realloc(doc, (size_t)need * sizeof *p);
                    if (!p) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "qx_windows_docs: out of memory"); break; }
                    doc = p;
                    cap_doc = need;
                }
                r = qx_tokenizer_encode(t, text + doc_start, doc_end - doc_start, 0, 0, doc, cap_doc, &n_doc, e);
                if (r != QUAROT_OK) break;
                for (i = 0; i < n_doc && !full; i += chunk) {
                    int64_t c = n_doc - i < chunk ? n_doc - i : chunk;
                    if ((opts.bos >= 0 ? 1 : 0) + c < 2) continue;   /* scores nothing */
                    r = qx__windows_push(w, &cap_tok, &cap_win, opts.bos, doc + i, c);
                    if (r != QUAROT_OK) { qx_err_set(e, "qx_windows_docs: out of memory"); break; }
                    w->n_text_tokens += c;
                    if (i == 0) w->n_docs++;
                    if (opts.max_windows > 0 && w->n >= opts.max_windows) full = 1;
                }
            }
        }
        if (at_end) break;
        pos = next;
    }
    free(doc);
    if (r == QUAROT_OK && w->n == 0) {
        qx_err_set(e, "qx_windows_docs: the text holds no document with a token to score");
        r = QUAROT_ERR_INVALID_ARGUMENT;
    }
    if (r != QUAROT_OK) {
        int64_t keep = w->n_docs_total;
        qx_windows_free(w);
        w->n_docs_total = keep;
    }
    return r;
}

quarot_result qx_windows_score(const qx_windows* w, int64_t vocab, qx_window_logits_fn logits_of, void* user,
                               void (*done)(void* done_user, int64_t done, int64_t total), void* done_user, const char* what,
                               qx_ppl_result* res, qx_err* e) {
    int64_t i, t;
    float* logits;
    double nll = 0.0;
    quarot_result r = QUAROT_OK;
    memset(res, 0, sizeof *res);
    logits = (float*)malloc((size_t)(w->max_len * vocab) * sizeof *logits);
    if (!logits) {
        qx_err_set(e, "%s: out of memory", what);
        return QUAROT_ERR_OUT_OF_MEMORY;
    }
    /* logits row t scores window token t+1 */
    for (i = 0; i < w->n; ++i) {
        const int32_t* win = w->tokens + w->offset[i];
        int64_t len = w->offset[i + 1] - w->offset[i];
        r = logits_of(user, win, len, logits, e);
        if (r != QUAROT_OK) break;
        for (t = 0; t + 1 < len; ++t) nll += qx_logits_nll(logits + t * vocab, vocab, win[t + 1]);
        if (done) done(done_user, i + 1, w->n);
    }
    free(logits);
    if (r != QUAROT_OK) return r;
    res->n_windows = w->n;
    res->n_predicted = w->n_predicted;
    res->nll = nll / (double)res->n_predicted;
    res->ppl = exp(res->nll);
    return QUAROT_OK;
}
