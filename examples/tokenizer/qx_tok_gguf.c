/* qx_tok_gguf.c - a qx_vocab from GGUF `tokenizer.ggml.*` metadata (see qx_tok_load.h).

   Keys: tokenizer.ggml.model ("llama" = SPM, "gpt2" = byte-level BPE; others refused by name),
   .pre (BPE; see qx_tok_pre.h), .tokens (string array), .scores (f32 array, SPM), .token_type
   (i32 array), .merges (string array "left right", BPE), .bos_token_id / .eos_token_id /
   .unknown_token_id, .add_bos_token / .add_eos_token, .add_space_prefix. Every array must have as
   many entries as .tokens; ids must lie inside the vocabulary. */
#include "tokenizer/qx_tok_load.h"
#include "formats/qx_gguf.h"
#include "support/qx_str.h"

#include <string.h>

/* Next string of a STRING array: *p moves past it; 0 when the bytes run out. */
static int qx__next_str(const unsigned char** p, const unsigned char* end, const char** s, size_t* n) {
    uint64_t len;
    if ((size_t)(end - *p) < 8) return 0;
    len = qx_str_le64(*p);
    if (len > (uint64_t)(end - *p) - 8) return 0;
    *s = (const char*)*p + 8;
    *n = (size_t)len;
    *p += 8 + len;
    return 1;
}

static const qx_gguf_kv* qx__arr(const qx_gguf_file* f, const char* key, uint32_t type, int required, const char* name,
                                 quarot_result* r, qx_err* e) {
    const qx_gguf_kv* kv = qx_gguf_find(f, key);
    *r = QUAROT_OK;
    if (!kv) {
        if (required) { qx_err_set(e, "%s: no %s", name, key); *r = QUAROT_ERR_PARSE; }
        return NULL;
    }
    if (kv->type != QX_GGUF_ARRAY || kv->arr_type != type) {
        qx_err_set(e, "%s: %s is not an array of %s", name, key,
                   type == QX_GGUF_STRING ? "strings" : type == QX_GGUF_F32 ? "f32" : "i32");
        *r = QUAROT_ERR_PARSE;
        return NULL;
    }
    return kv;
}

static quarot_result qx__id_key(const qx_gguf_file* f, const char* key, int32_t* out, const char* name, qx_err* e) {
    const qx_gguf_kv* kv = qx_gguf_find(f, key);
    int64_t v;
    if (!kv) return QUAROT_OK;
    if (qx_gguf_kv_int(kv, &v) != QUAROT_OK || v < -1 || v > INT32_MAX) {
        qx_err_set(e, "%s: %s is not a token id", name, key);
        return QUAROT_ERR_PARSE;
    }
    *out = (int32_t)v;
    return QUAROT_OK;
}

static quarot_result qx__bool_key(const qx_gguf_file* f, const char* key, int* out, const char* name, qx_err* e) {
    const qx_gguf_kv* kv = qx_gguf_find(f, key);
    int64_t v;
    if (!kv) return QUAROT_OK;
    if (kv->type == QX_GGUF_BOOL && kv->val_len >= 1) { *out = kv->val[0] != 0; return QUAROT_OK; }
    if (qx_gguf_kv_int(kv, &v) != QUAROT_OK) { qx_err_set(e, "%s: %s is not a boolean", name, key); return QUAROT_ERR_PARSE; }
    *out = v != 0;
    return QUAROT_OK;
}

int qx_gguf_has_tokenizer(const qx_gguf_file* f) { return qx_gguf_find(f, "tokenizer.ggml.tokens") != NULL; }

quarot_result qx_vocab_from_gguf(qx_vocab* v, const qx_gguf_file* f, const char* name, qx_err* e) {
    const qx_gguf_kv *model, *pre, *tokens, *scores, *types, *merges;
    const char* mname;
    uint64_t mlen = 0, plen = 0, i;
    int kind;
    quarot_result r;
    const unsigned char *p, *end;
    memset(v, 0, sizeof *v);
    model = qx_gguf_find(f, "tokenizer.ggml.model");
    if (!model) { qx_err_set(e, "%s: no tokenizer.ggml.model (the file holds no tokenizer)", name); return QUAROT_ERR_PARSE; }
    mname = qx_gguf_kv_string(model, &mlen);
    if (!mname) { qx_err_set(e, "%s: tokenizer.ggml.model is not a string", name); return QUAROT_ERR_PARSE; }
    if (mlen == 5 && memcmp(mname, "llama", 5) == 0) kind = QX_VOCAB_SPM;
    else if (mlen == 4 && memcmp(mname, "gpt2", 4) == 0) kind = QX_VOCAB_BPE;
    else {
        qx_err_set(e, "%s: tokenizer.ggml.model '%.*s' is not supported (supported: llama, gpt2)", name,
                   (int)(mlen > 64 ? 64 : mlen), mname);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (!(tokens = qx__arr(f, "tokenizer.ggml.tokens", QX_GGUF_STRING, 1, name, &r, e))) return r;
    scores = qx__arr(f, "tokenizer.ggml.scores", QX_GGUF_F32, 0, name, &r, e);
    if (r != QUAROT_OK) return r;
    types = qx__arr(f, "tokenizer.ggml.token_type", QX_GGUF_I32, 0, name, &r, e);
    if (r != QUAROT_OK) return r;
    merges = qx__arr(f, "tokenizer.ggml.merges", QX_GGUF_STRING, kind == QX_VOCAB_BPE, name, &r, e);
    if (r != QUAROT_OK) return r;
    if (scores && scores->arr_count != tokens->arr_count) {
        qx_err_set(e, "%s: tokenizer.ggml.scores has %llu entries, tokenizer.ggml.tokens %llu", name,
                   (unsigned long long)scores->arr_count, (unsigned long long)tokens->arr_count);
        return QUAROT_ERR_PARSE;
    }
    if (types && types->arr_count != tokens->arr_count) {
        qx_err_set(e, "%s: tokenizer.ggml.token_type has %llu entries, tokenizer.ggml.tokens %llu", name,
                   (unsigned long long)types->arr_count, (unsigned long long)tokens->arr_count);
        return QUAROT_ERR_PARSE;
    }
    if (tokens->arr_count < 1 || tokens->arr_count > QX_VOCAB_MAX_TOKENS) {
        qx_err_set(e, "%s: tokenizer.ggml.tokens has %llu entries (expected 1 to %d)", name, (unsigned long long)tokens->arr_count,
                   QX_VOCAB_MAX_TOKENS);
        return QUAROT_ERR_PARSE;
    }
    r = qx_vocab_begin(v, kind, (int64_t)tokens->arr_count, name, e);
    if (r != QUAROT_OK) return r;
    if (kind == QX_VOCAB_BPE) {
        const char* pname = "";
        pre = qx_gguf_find(f, "tokenizer.ggml.pre");
        if (pre && !(pname = qx_gguf_kv_string(pre, &plen))) { qx_err_set(e, "%s: tokenizer.ggml.pre is not a string", name); r = QUAROT_ERR_PARSE; goto fail; }
        if (!qx_pre_from_name(pname, (size_t)plen, &v->pre)) {
            qx_err_set(e, "%s: tokenizer.ggml.pre '%.*s' is not supported (supported: %s)", name, (int)(plen > 64 ? 64 : plen), pname,
                       qx_pre_names());
            r = QUAROT_ERR_UNSUPPORTED;
            goto fail;
        }
        v->add_bos = v->pre.ignore_merges;   /* llama.cpp: the llama3 family adds BOS by default */
    } else {
        v->bos = 1; v->eos = 2; v->unk = 0; v->add_bos = 1;   /* llama.cpp's SPM defaults */
    }
    p = tokens->val;
    end = tokens->val + tokens->val_len;
    for (i = 0; i < tokens->arr_count; ++i) {
        const char* s;
        size_t n;
        float sc = 0.0f;
        int32_t ty = QX_TT_NORMAL;
        if (!qx__next_str(&p, end, &s, &n)) { qx_err_set(e, "%s: tokenizer.ggml.tokens[%llu] runs past the array", name, (unsigned long long)i); r = QUAROT_ERR_PARSE; goto fail; }
        if (scores) memcpy(&sc, scores->val + 4 * i, 4);
        if (types) memcpy(&ty, types->val + 4 * i, 4);
        r = qx_vocab_set(v, (int32_t)i, s, n, sc, ty, name, e);
        if (r != QUAROT_OK) goto fail;
    }
    if (merges) {
        if (merges->arr_count > QX_VOCAB_MAX_MERGES) { qx_err_set(e, "%s: tokenizer.ggml.merges has %llu entries (at most %d)", name, (unsigned long long)merges->arr_count, QX_VOCAB_MAX_MERGES); r = QUAROT_ERR_PARSE; goto fail; }
        if ((r = qx_vocab_reserve_merges(v, (int64_t)merges->arr_count, name, e)) != QUAROT_OK) goto fail;
        p = merges->val;
        end = merges->val + merges->val_len;
        for (i = 0; i < merges->arr_count; ++i) {
            const char *s, *sp;
            size_t n;
            if (!qx__next_str(&p, end, &s, &n)) { qx_err_set(e, "%s: tokenizer.ggml.merges[%llu] runs past the array", name, (unsigned long long)i); r = QUAROT_ERR_PARSE; goto fail; }
            sp = n > 1 ? (const char*)memchr(s + 1, ' ', n - 1) : NULL;   /* llama.cpp: the first space after byte 0 */
            if (!sp) { qx_err_set(e, "%s: tokenizer.ggml.merges[%llu] '%.*s' is not \"left right\"", name, (unsigned long long)i, (int)(n > 64 ? 64 : n), s); r = QUAROT_ERR_PARSE; goto fail; }
            r = qx_vocab_add_merge(v, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp - s) - 1, name, "tokenizer.ggml.merges", e);
            if (r != QUAROT_OK) goto fail;
        }
        if (kind == QX_VOCAB_SPM) v->use_merges = 1;
    }
    if (v->bos >= v->n) v->bos = -1;   /* llama.cpp's defaults may not fit a tiny vocabulary */
    if (v->eos >= v->n) v->eos = -1;
    if (v->unk >= v->n) v->unk = -1;
    if ((r = qx__id_key(f, "tokenizer.ggml.bos_token_id", &v->bos, name, e)) != QUAROT_OK) goto fail;
    if ((r = qx__id_key(f, "tokenizer.ggml.eos_token_id", &v->eos, name, e)) != QUAROT_OK) goto fail;
    if ((r = qx__id_key(f, "tokenizer.ggml.unknown_token_id", &v->unk, name, e)) != QUAROT_OK) goto fail;
    if ((r = qx__bool_key(f, "tokenizer.ggml.add_bos_token", &v->add_bos, name, e)) != QUAROT_OK) goto fail;
    if ((r = qx__bool_key(f, "tokenizer.ggml.add_eos_token", &v->add_eos, name, e)) != QUAROT_OK) goto fail;
    if ((r = qx__bool_key(f, "tokenizer.ggml.add_space_prefix", &v->add_space_prefix, name, e)) != QUAROT_OK) goto fail;
    r = qx_vocab_finish(v, name, e);
    if (r != QUAROT_OK) goto fail;
    return QUAROT_OK;
fail:
    qx_vocab_free(v);
    return r;
}
