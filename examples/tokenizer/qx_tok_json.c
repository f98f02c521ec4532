/* qx_tok_json.c - a qx_vocab from a Hugging Face tokenizer.json (+ tokenizer_config.json); see
   qx_tok_load.h for what is supported. Every error names the file and the field. */
#include "tokenizer/qx_tok_load.h"
#include "formats/qx_json.h"

#include <stdio.h>
#include <string.h>

static int qx__streq(const qx_json* v, const char* s) {
    size_t n;
    const char* p = qx_json_as_string(v, &n);
    return p && n == strlen(s) && memcmp(p, s, n) == 0;
}

/* A token name from tokenizer_config.json: a string or {"content": string}. */
static const char* qx__tok_name(const qx_json* v, size_t* n) {
    if (v && v->type == QX_JSON_OBJECT) v = qx_json_get(v, "content");
    return qx_json_as_string(v, n);
}

/* One pre-tokenizer object into the list; *bytelevel set when it is ByteLevel. */
static quarot_result qx__pre_one(const qx_json* p, qx_pre* pre, int* bytelevel, int* metaspace, int* prefix, const char* name,
                                 const char* field, qx_err* e) {
    const qx_json* type = qx_json_get(p, "type");
    int re = -1;
    if (!qx_json_as_string(type, NULL)) { qx_err_set(e, "%s: %s: no \"type\" string", name, field); return QUAROT_ERR_PARSE; }
    if (qx__streq(type, "ByteLevel")) {
        const qx_json* ur = qx_json_get(p, "use_regex");
        const qx_json* ap = qx_json_get(p, "add_prefix_space");
        int use = 1, add = 0;
        if (ur && qx_json_as_bool(ur, &use) != QUAROT_OK) { qx_err_set(e, "%s: %s.use_regex is not a boolean", name, field); return QUAROT_ERR_PARSE; }
        if (ap && qx_json_as_bool(ap, &add) != QUAROT_OK) { qx_err_set(e, "%s: %s.add_prefix_space is not a boolean", name, field); return QUAROT_ERR_PARSE; }
        if (add) { qx_err_set(e, "%s: %s.add_prefix_space true is not supported", name, field); return QUAROT_ERR_UNSUPPORTED; }
        *bytelevel = 1;
        if (use) re = QX_RE_GPT2;
    } else if (qx__streq(type, "Split")) {
        const qx_json* pat = qx_json_get(p, "pattern");
        const qx_json* rx = qx_json_get(pat, "Regex");
        size_t n = 0;
        const char* s = qx_json_as_string(rx, &n);
        if (!s) { qx_err_set(e, "%s: %s.pattern.Regex is missing or not a string", name, field); return QUAROT_ERR_PARSE; }
        if (!qx__streq(qx_json_get(p, "behavior"), "Isolated") || (qx_json_get(p, "invert") && qx_json_get(p, "invert")->boolean)) {
            qx_err_set(e, "%s: %s: only Split with behavior \"Isolated\" and invert false is supported", name, field);
            return QUAROT_ERR_UNSUPPORTED;
        }
        re = qx_pre_regex_from_text(s, n);
        if (re < 0) {
            qx_err_set(e, "%s: %s.pattern.Regex '%.*s' is not a supported pre-tokenizer regex", name, field, (int)(n > 80 ? 80 : n), s);
            return QUAROT_ERR_UNSUPPORTED;
        }
    } else if (qx__streq(type, "Digits")) {
        int ind = 0;
        const qx_json* d = qx_json_get(p, "individual_digits");
        if (d && qx_json_as_bool(d, &ind) != QUAROT_OK) { qx_err_set(e, "%s: %s.individual_digits is not a boolean", name, field); return QUAROT_ERR_PARSE; }
        re = ind ? QX_RE_NUM1 : QX_RE_NUMS;
    } else if (qx__streq(type, "Metaspace")) {
        const qx_json* ps = qx_json_get(p, "prepend_scheme");
        const qx_json* ap = qx_json_get(p, "add_prefix_space");
        const qx_json* sp = qx_json_get(p, "split");
        int add = 1;
        if (sp && sp->type == QX_JSON_BOOL && sp->boolean) {
            qx_err_set(e, "%s: %s: Metaspace with \"split\": true is not supported (SentencePiece merges across words)", name, field);
            return QUAROT_ERR_UNSUPPORTED;
        }
        *metaspace = 1;
        if (ps) *prefix = !qx__streq(ps, "never");
        else if (ap && qx_json_as_bool(ap, &add) == QUAROT_OK) *prefix = add;
        else *prefix = 1;
    } else {
        size_t n = 0;
        const char* s = qx_json_as_string(type, &n);
        qx_err_set(e, "%s: %s: pre-tokenizer type '%.*s' is not supported (ByteLevel, Split, Digits, Metaspace)", name, field,
                   (int)(n > 40 ? 40 : n), s);
        return QUAROT_ERR_UNSUPPORTED;
    }
    if (re >= 0) {
        if (pre->n >= QX_PRE_MAX) { qx_err_set(e, "%s: %s: more than %d pre-tokenizers", name, field, QX_PRE_MAX); return QUAROT_ERR_UNSUPPORTED; }
        pre->re[pre->n++] = re;
    }
    return QUAROT_OK;
}

static int32_t qx__id_of(const qx_vocab* v, const char* s, size_t n) { return s ? qx_vocab_lookup(v, s, n) : -1; }

/* ---- qx_vocab_from_hf_json, step by step ---- */

/* What qx_vocab_from_hf_json works with: the parsed files, the fields its steps found and what the
   pre-tokenizer and normalizer decided. */
typedef struct qx__hfj {
    qx_vocab* v;
    const char* name;
    qx_err* e;
    const qx_json *root, *model, *vocab, *merges, *added;
    const qx_json* croot;        /* tokenizer_config.json's root; NULL when it is absent or unreadable */
    qx_pre pre;
    int bytelevel, metaspace, prefix, byte_fallback, kind;
    int64_t n_tokens;
} qx__hfj;

/* Every step reports its error with qx_err_set and returns the code. */
#define QX__HFJ_FAIL(code, ...) do { qx_err_set(e, __VA_ARGS__); return code; } while (0)

/* The root and its model: a BPE with vocab, merges, byte_fallback; added_tokens. */
static quarot_result qx__hfj_model(qx__hfj* g) {
    const char* name = g->name;
    qx_err* e = g->e;
    const qx_json* model;
    if (g->root->type != QX_JSON_OBJECT) QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: not a JSON object", name);
    model = g->model = qx_json_get(g->root, "model");
    if (!model || model->type != QX_JSON_OBJECT) QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model is missing or not an object", name);
    if (!qx__streq(qx_json_get(model, "type"), "BPE")) {
        size_t n = 0;
        const char* s = qx_json_as_string(qx_json_get(model, "type"), &n);
        if (!s) QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.type is missing or not a string", name);
        QX__HFJ_FAIL(QUAROT_ERR_UNSUPPORTED, "%s: model.type '%.*s' is not supported (BPE only)", name, (int)(n > 40 ? 40 : n), s);
    }
    g->vocab = qx_json_get(model, "vocab");
    if (!g->vocab || g->vocab->type != QX_JSON_OBJECT) QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.vocab is missing or not an object", name);
    g->merges = qx_json_get(model, "merges");
    if (!g->merges || g->merges->type != QX_JSON_ARRAY) QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.merges is missing or not an array", name);
    if (qx_json_get(model, "byte_fallback") && qx_json_as_bool(qx_json_get(model, "byte_fallback"), &g->byte_fallback) != QUAROT_OK)
        QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.byte_fallback is not a boolean", name);
    g->added = qx_json_get(g->root, "added_tokens");
    if (g->added && g->added->type != QX_JSON_ARRAY && g->added->type != QX_JSON_NULL)
        QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: added_tokens is not an array", name);
    return QUAROT_OK;
}

/* The pre-tokenizer and the normalizer decide the kind: ByteLevel BPE or Metaspace (SentencePiece-like). */
static quarot_result qx__hfj_kind(qx__hfj* g) {
    const char* name = g->name;
    qx_err* e = g->e;
    const qx_json* pt = qx_json_get(g->root, "pre_tokenizer");
    const qx_json* norm;
    size_t i;
    quarot_result r;
    if (pt && pt->type == QX_JSON_OBJECT) {
        if (qx__streq(qx_json_get(pt, "type"), "Sequence")) {
            const qx_json* list = qx_json_get(pt, "pretokenizers");
            if (!list || list->type != QX_JSON_ARRAY) QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: pre_tokenizer.pretokenizers is not an array", name);
            for (i = 0; i < list->count; ++i) {
                char field[64];
                snprintf(field, sizeof field, "pre_tokenizer.pretokenizers[%zu]", i);
                if (list->items[i].type != QX_JSON_OBJECT) QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: %s is not an object", name, field);
                r = qx__pre_one(&list->items[i], &g->pre, &g->bytelevel, &g->metaspace, &g->prefix, name, field, e);
                if (r != QUAROT_OK) return r;
            }
        } else if ((r = qx__pre_one(pt, &g->pre, &g->bytelevel, &g->metaspace, &g->prefix, name, "pre_tokenizer", e)) != QUAROT_OK) {
            return r;
        }
    } else if (pt && pt->type != QX_JSON_NULL) {
        QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: pre_tokenizer is not an object", name);
    }
    norm = qx_json_get(g->root, "normalizer");
    if (!g->bytelevel && !g->metaspace && norm && norm->type == QX_JSON_OBJECT) {
        /* Llama-2's: Sequence [Prepend "▁", Replace " " -> "▁"] */
        const qx_json* list = qx_json_get(norm, "normalizers");
        int has_replace = 0;
        for (i = 0; list && list->type == QX_JSON_ARRAY && i < list->count; ++i) {
            const qx_json* n1 = &list->items[i];
            if (qx__streq(qx_json_get(n1, "type"), "Prepend") && qx__streq(qx_json_get(n1, "prepend"), "\xE2\x96\x81")) g->prefix = 1;
            if (qx__streq(qx_json_get(n1, "type"), "Replace") && qx__streq(qx_json_get(qx_json_get(n1, "pattern"), "String"), " ") &&
                qx__streq(qx_json_get(n1, "content"), "\xE2\x96\x81"))
                has_replace = 1;
        }
        g->metaspace = has_replace;
    }
    if (g->bytelevel) g->kind = QX_VOCAB_BPE;
    else if (g->metaspace) g->kind = QX_VOCAB_SPM;
    else QX__HFJ_FAIL(QUAROT_ERR_UNSUPPORTED, "%s: pre_tokenizer / normalizer: neither ByteLevel nor Metaspace (\"\xE2\x96\x81\") BPE", name);
    if (g->kind == QX_VOCAB_BPE && g->pre.n == 0)
        QX__HFJ_FAIL(QUAROT_ERR_UNSUPPORTED, "%s: pre_tokenizer: ByteLevel without a regex (use_regex false and no Split)", name);
    return QUAROT_OK;
}

/* The ids of model.vocab and added_tokens (checked): n_tokens is one past the largest. */
static quarot_result qx__hfj_count(qx__hfj* g) {
    const char* name = g->name;
    qx_err* e = g->e;
    const qx_json *vocab = g->vocab, *added = g->added;
    size_t i;
    for (i = 0; i < vocab->count; ++i) {
        int64_t id;
        if (qx_json_as_int64(&vocab->items[i], &id) != QUAROT_OK || id < 0 || id >= QX_VOCAB_MAX_TOKENS)
            QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.vocab['%.*s'] is not a token id in [0, %d)", name,
                         (int)(vocab->items[i].key_len > 40 ? 40 : vocab->items[i].key_len), vocab->items[i].key, QX_VOCAB_MAX_TOKENS);
        if (id + 1 > g->n_tokens) g->n_tokens = id + 1;
    }
    for (i = 0; added && added->type == QX_JSON_ARRAY && i < added->count; ++i) {
        const qx_json* a = &added->items[i];
        int64_t id;
        if (a->type != QX_JSON_OBJECT || qx_json_as_int64(qx_json_get(a, "id"), &id) != QUAROT_OK || id < 0 || id >= QX_VOCAB_MAX_TOKENS ||
            !qx_json_as_string(qx_json_get(a, "content"), NULL))
            QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: added_tokens[%zu] lacks an \"id\" in [0, %d) or a \"content\" string", name, i, QX_VOCAB_MAX_TOKENS);
        if (id + 1 > g->n_tokens) g->n_tokens = id + 1;
    }
    if (g->n_tokens > (int64_t)(vocab->count + (added ? added->count : 0)) + 65536)
        QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.vocab / added_tokens: ids up to %lld for %zu tokens (more than 65536 ids unused)", name,
                     (long long)g->n_tokens - 1, vocab->count + (added ? added->count : 0));
    return QUAROT_OK;
}

/* The vocabulary begun with its settings, then its tokens: the added ones (with their type), model.vocab's
   (<0xNN> bytes for SentencePiece), and every id nobody names as an empty unused token. */
static quarot_result qx__hfj_tokens(qx__hfj* g) {
    qx_vocab* v = g->v;
    const char* name = g->name;
    qx_err* e = g->e;
    const qx_json *vocab = g->vocab, *added = g->added;
    size_t i;
    quarot_result r = qx_vocab_begin(v, g->kind, g->n_tokens, name, e);
    if (r != QUAROT_OK) return r;
    v->pre = g->pre;
    memcpy(v->pre.name, "tokenizer.json", 15);
    v->add_space_prefix = g->kind == QX_VOCAB_SPM ? g->prefix : 0;
    v->byte_fallback = g->byte_fallback;
    v->use_merges = 1;
    if (qx_json_get(g->model, "ignore_merges") && qx_json_get(g->model, "ignore_merges")->boolean) v->pre.ignore_merges = 1;
    for (i = 0; added && added->type == QX_JSON_ARRAY && i < added->count; ++i) {
        const qx_json* a = &added->items[i];
        int64_t id = 0;
        size_t n = 0;
        const char* s = qx_json_as_string(qx_json_get(a, "content"), &n);
        int special = 0;
        (void)qx_json_as_int64(qx_json_get(a, "id"), &id);
        (void)qx_json_as_bool(qx_json_get(a, "special"), &special);
        if (v->text[id]) continue;   /* also in model.vocab: set below with the added type */
        if ((r = qx_vocab_set(v, (int32_t)id, s, n, 0.0f, special ? QX_TT_CONTROL : QX_TT_USER_DEFINED, name, e)) != QUAROT_OK) return r;
    }
    for (i = 0; i < vocab->count; ++i) {
        int64_t id = vocab->items[i].i;
        const char* s = vocab->items[i].key;
        size_t n = vocab->items[i].key_len;
        int type = QX_TT_NORMAL;
        if (v->text[id]) {
            if ((size_t)v->len[id] == n && memcmp(v->text[id], s, n) == 0) continue;   /* an added token that is also in the vocab */
            QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.vocab: id %lld is given to two tokens", name, (long long)id);
        }
        if (g->kind == QX_VOCAB_SPM && n == 6 && s[0] == '<' && s[1] == '0' && s[2] == 'x' && s[5] == '>') type = QX_TT_BYTE;
        if ((r = qx_vocab_set(v, (int32_t)id, s, n, 0.0f, type, name, e)) != QUAROT_OK) return r;
    }
    for (i = 0; i < (size_t)v->n; ++i)   /* ids nobody names: empty, unused */
        if (!v->text[i] && (r = qx_vocab_set(v, (int32_t)i, "", 0, 0.0f, QX_TT_UNUSED, name, e)) != QUAROT_OK) return r;
    return QUAROT_OK;
}

/* model.merges: each "left right" or [left, right]. */
static quarot_result qx__hfj_merges(qx__hfj* g) {
    const char* name = g->name;
    qx_err* e = g->e;
    const qx_json* merges = g->merges;
    size_t i;
    quarot_result r = qx_vocab_reserve_merges(g->v, (int64_t)merges->count, name, e);
    if (r != QUAROT_OK) return r;
    for (i = 0; i < merges->count; ++i) {
        const qx_json* m = &merges->items[i];
        size_t n = 0;
        const char* s = qx_json_as_string(m, &n);
        if (s) {
            const char* sp = n > 1 ? (const char*)memchr(s + 1, ' ', n - 1) : NULL;
            if (!sp) QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.merges[%zu] '%.*s' is not \"left right\"", name, i, (int)(n > 40 ? 40 : n), s);
            r = qx_vocab_add_merge(g->v, s, (size_t)(sp - s), sp + 1, n - (size_t)(sp - s) - 1, name, "model.merges", e);
        } else if (m->type == QX_JSON_ARRAY && m->count == 2 && qx_json_as_string(&m->items[0], NULL) && qx_json_as_string(&m->items[1], NULL)) {
            r = qx_vocab_add_merge(g->v, m->items[0].str, m->items[0].len, m->items[1].str, m->items[1].len, name, "model.merges", e);
        } else {
            QX__HFJ_FAIL(QUAROT_ERR_PARSE, "%s: model.merges[%zu] is neither \"left right\" nor [left, right]", name, i);
        }
        if (r != QUAROT_OK) return r;
    }
    return QUAROT_OK;
}

/* The special ids: unk from the model, then (after the index) bos/eos and add_bos/add_eos from
   tokenizer_config.json, and a post_processor TemplateProcessing whose first item is a special token
   (the model adds BOS) unless the config says add_bos_token itself. */
static quarot_result qx__hfj_special(qx__hfj* g) {
    qx_vocab* v = g->v;
    const char* name = g->name;
    qx_err* e = g->e;
    const qx_json* croot = g->croot;
    size_t n = 0;
    const char* s = qx_json_as_string(qx_json_get(g->model, "unk_token"), &n);
    quarot_result r;
    v->unk = qx__id_of(v, s, n);
    if ((r = qx_vocab_index(v, name, e)) != QUAROT_OK) return r;
    if (croot && croot->type == QX_JSON_OBJECT) {
        const qx_json* b;
        if ((s = qx__tok_name(qx_json_get(croot, "bos_token"), &n)) != NULL) v->bos = qx__id_of(v, s, n);
        if ((s = qx__tok_name(qx_json_get(croot, "eos_token"), &n)) != NULL) v->eos = qx__id_of(v, s, n);
        if ((b = qx_json_get(croot, "add_bos_token")) != NULL && qx_json_as_bool(b, &v->add_bos) != QUAROT_OK)
            QX__HFJ_FAIL(QUAROT_ERR_PARSE, "tokenizer_config.json: add_bos_token is not a boolean");
        if ((b = qx_json_get(croot, "add_eos_token")) != NULL && qx_json_as_bool(b, &v->add_eos) != QUAROT_OK)
            QX__HFJ_FAIL(QUAROT_ERR_PARSE, "tokenizer_config.json: add_eos_token is not a boolean");
    }
    {
        const qx_json* pp = qx_json_get(g->root, "post_processor");
        const qx_json* single = qx_json_get(pp, "single");
        const qx_json* first = qx_json_at(single, 0);
        const qx_json* st = qx_json_get(first, "SpecialToken");
        if (st && !(croot && qx_json_get(croot, "add_bos_token"))) {
            int32_t id;
            n = 0;
            s = qx_json_as_string(qx_json_get(st, "id"), &n);
            id = qx__id_of(v, s, n);
            if (id >= 0) { v->bos = id; v->add_bos = 1; }
        }
    }
    return QUAROT_OK;
}

#undef QX__HFJ_FAIL

/* Parse both files (an unreadable tokenizer_config.json is ignored), check the model, decide the
   kind, count the ids, then the tokens, the merges and the special ids; the vocabulary is freed on
   any failure. */
quarot_result qx_vocab_from_hf_json(qx_vocab* v, const char* json, size_t len, const char* config, size_t config_len,
                                    const char* name, qx_err* e) {
    qx_json_doc doc, cdoc;
    qx__hfj g;
    int have_cfg = 0;
    quarot_result r;
    memset(v, 0, sizeof *v);
    memset(&g, 0, sizeof g);
    g.v = v;
    g.name = name;
    g.e = e;
    r = qx_json_parse(json, len, name, NULL, &doc, e);
    if (r != QUAROT_OK) return r;
    if (config) {
        qx_err ce;
        if (qx_json_parse(config, config_len, "tokenizer_config.json", NULL, &cdoc, &ce) == QUAROT_OK) {
            have_cfg = 1;
            g.croot = cdoc.root;
        }
    }
    g.root = doc.root;
    r = qx__hfj_model(&g);
    if (r == QUAROT_OK) r = qx__hfj_kind(&g);
    if (r == QUAROT_OK) r = qx__hfj_count(&g);
    if (r == QUAROT_OK) r = qx__hfj_tokens(&g);
    if (r == QUAROT_OK) r = qx__hfj_merges(&g);
    if (r == QUAROT_OK) r = qx__hfj_special(&g);
    if (r == QUAROT_OK) r = qx_vocab_finish(v, name, e);
    if (r != QUAROT_OK) qx_vocab_free(v);
    qx_json_doc_free(&doc);
    if (have_cfg) qx_json_doc_free(&cdoc);
    return r;
}
