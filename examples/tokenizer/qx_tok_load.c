/* qx_tok_load.c - see qx_tok_load.h. */
#include "tokenizer/qx_tok_load.h"
#include "support/qx_file.h"
#include "formats/qx_gguf.h"
#include "formats/qx_json.h"
#include "support/qx_str.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define QX_TOK_JSON_MAX ((size_t)512 << 20)

quarot_result qx_tokenizer_from_vocab(qx_tokenizer* t, qx_vocab* v, qx_err* e) {
    qx_vocab* p = (qx_vocab*)malloc(sizeof *p);
    memset(t, 0, sizeof *t);
    if (!p) { qx_vocab_free(v); qx_err_set(e, "tokenizer: out of memory"); return QUAROT_ERR_OUT_OF_MEMORY; }
    *p = *v;
    memset(v, 0, sizeof *v);
    t->vocab = p;
    t->vocab_size = p->n;
    t->bos_id = p->bos;
    t->eos_id = p->eos;
    t->add_bos = p->add_bos && p->bos >= 0;
    if (p->kind == QX_VOCAB_SPM) snprintf(t->kind, sizeof t->kind, "SentencePiece BPE%s", p->use_merges ? " (merges)" : "");
    else snprintf(t->kind, sizeof t->kind, "byte-level BPE (pre %s)", p->pre.name[0] ? p->pre.name : "default");
    return QUAROT_OK;
}

static int qx__is_gguf(const char* path) {
    unsigned char m[4];
    FILE* f = fopen(path, "rb");
    int ok;
    if (!f) return 0;
    ok = fread(m, 1, 4, f) == 4 && memcmp(m, "GGUF", 4) == 0;
    fclose(f);
    return ok;
}

static quarot_result qx__load_gguf(qx_tokenizer* t, const char* path, qx_err* e) {
    qx_map m;
    qx_gguf_file f;
    qx_vocab v;
    quarot_result r = qx_map_file(path, &m, e);
    if (r != QUAROT_OK) return r;
    r = qx_gguf_parse(m.addr, m.len, path, &f, e);
    if (r != QUAROT_OK) { qx_unmap(&m); return r; }
    r = qx_vocab_from_gguf(&v, &f, path, e);
    qx_gguf_file_free(&f);
    qx_unmap(&m);
    if (r != QUAROT_OK) return r;
    return qx_tokenizer_from_vocab(t, &v, e);
}

/* tokenizer.json at path; tokenizer_config.json from the same directory when there is one */
static quarot_result qx__load_json(qx_tokenizer* t, const char* path, qx_err* e) {
    char *json = NULL, *cfg = NULL, *dir, *cpath = NULL;
    size_t len = 0, clen = 0;
    const char* slash = strrchr(path, '/');
    qx_vocab v;
    quarot_result r = qx_read_file(path, QX_TOK_JSON_MAX, &json, &len, e);
    if (r != QUAROT_OK) return r;
    dir = slash ? (char*)malloc((size_t)(slash - path) + 1) : NULL;
    if (dir) {
        memcpy(dir, path, (size_t)(slash - path));
        dir[slash - path] = '\0';
        cpath = qx_path_join(dir, "tokenizer_config.json");
    } else if (!slash) {
        cpath = qx_path_join(".", "tokenizer_config.json");
    }
    free(dir);
    if (cpath && qx_path_exists(cpath)) {
        qx_err ce;
        if (qx_read_file(cpath, QX_TOK_JSON_MAX, &cfg, &clen, &ce) != QUAROT_OK) cfg = NULL;
    }
    r = qx_vocab_from_hf_json(&v, json, len, cfg, clen, path, e);
    free(json);
    free(cfg);
    free(cpath);
    if (r != QUAROT_OK) return r;
    return qx_tokenizer_from_vocab(t, &v, e);
}

quarot_result qx_tokenizer_load_any(qx_tokenizer* t, const char* path, int32_t vocab_size, qx_err* e) {
    memset(t, 0, sizeof *t);
    if (!path) { qx_err_set(e, "tokenizer: no path"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (qx_is_dir(path)) {
        char* j = qx_path_join(path, "tokenizer.json");
        quarot_result r;
        if (!j) { qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
        if (!qx_path_exists(j)) { qx_err_set(e, "%s: a directory without tokenizer.json", path); free(j); return QUAROT_ERR_NOT_FOUND; }
        r = qx__load_json(t, j, e);
        free(j);
        return r;
    }
    if (!qx_path_exists(path)) { qx_err_set(e, "%s: cannot open the tokenizer: %s", path, strerror(ENOENT)); return QUAROT_ERR_IO; }
    if (qx__is_gguf(path)) return qx__load_gguf(t, path, e);
    if (qx_str_ends_with(path, ".json")) return qx__load_json(t, path, e);
    return qx_tokenizer_load(t, path, vocab_size, e);
}

static quarot_result qx__check_size(qx_tokenizer* t, int64_t model_vocab, const char* path, qx_err* e) {
    if (model_vocab > 0 && t->vocab && t->vocab->n > model_vocab) {
        qx_err_set(e, "%s: the tokenizer has %ld tokens, more than the model's vocabulary of %lld", path, (long)t->vocab->n,
                   (long long)model_vocab);
        qx_tokenizer_free(t);
        return QUAROT_ERR_SHAPE_MISMATCH;
    }
    return QUAROT_OK;
}

int qx_tokenizer_find_bin(const char* model_path, int64_t vocab, char* out, size_t cap, char* looked, size_t looked_cap) {
    char dir[4096], names[3][32];
    size_t used = 0;
    int i, n_names = 0;
    qx_model_dir(model_path, dir, sizeof dir);
    if (vocab > 0 && vocab != 512) snprintf(names[n_names++], sizeof names[0], "tok%lld.bin", (long long)vocab);
    snprintf(names[n_names++], sizeof names[0], "tok512.bin");
    snprintf(names[n_names++], sizeof names[0], "tokenizer.bin");
    if (looked && looked_cap) looked[0] = '\0';
    for (i = 0; i < n_names; ++i) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (looked && used + 1 < looked_cap) {
            int w = snprintf(looked + used, looked_cap - used, "%s%s", i ? ", " : "", path);
            if (w > 0) used += (size_t)w < looked_cap - used ? (size_t)w : looked_cap - used - 1;
        }
        if (qx_is_file(path)) {
            snprintf(out, cap, "%s", path);
            return 1;
        }
    }
    return 0;
}

quarot_result qx_tokenizer_for_model(qx_tokenizer* t, const char* model_path, const char* tok_opt, int64_t model_vocab,
                                     char* used, size_t used_cap, qx_err* e) {
    char dir[4096], path[4200], looked[4 * 4200 + 64], bins[3 * 4200 + 8];
    quarot_result r;
    size_t lo = 0;
    memset(t, 0, sizeof *t);
    if (used && used_cap) used[0] = '\0';
    if (tok_opt) {
        r = qx_tokenizer_load_any(t, tok_opt, (int32_t)(model_vocab > 0 && model_vocab < INT32_MAX ? model_vocab : 0), e);
        if (r == QUAROT_OK) r = qx__check_size(t, model_vocab, tok_opt, e);
        if (r == QUAROT_OK && used) snprintf(used, used_cap, "%s", tok_opt);
        return r;
    }
    if (!model_path) { qx_err_set(e, "tokenizer: no model path"); return QUAROT_ERR_INVALID_ARGUMENT; }
    if (!qx_is_dir(model_path) && qx__is_gguf(model_path)) {
        qx_map m;
        qx_gguf_file f;
        int has = 0;
        if (qx_map_file(model_path, &m, e) == QUAROT_OK) {
            if (qx_gguf_parse(m.addr, m.len, model_path, &f, e) == QUAROT_OK) {
                has = qx_gguf_has_tokenizer(&f);
                qx_gguf_file_free(&f);
            }
            qx_unmap(&m);
        }
        if (has) {
            r = qx__load_gguf(t, model_path, e);
            if (r == QUAROT_OK) r = qx__check_size(t, model_vocab, model_path, e);
            if (r == QUAROT_OK && used) snprintf(used, used_cap, "%s", model_path);
            return r;
        }
        lo += (size_t)snprintf(looked + lo, sizeof looked - lo, "tokenizer.ggml.* in %s, ", model_path);
    }
    qx_model_dir(model_path, dir, sizeof dir);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    lo += (size_t)snprintf(looked + lo, lo < sizeof looked ? sizeof looked - lo : 0, "%s", path);
    if (qx_path_exists(path)) {
        r = qx__load_json(t, path, e);
        if (r == QUAROT_OK) r = qx__check_size(t, model_vocab, path, e);
        if (r == QUAROT_OK && used) snprintf(used, used_cap, "%s", path);
        return r;
    }
    if (qx_tokenizer_find_bin(model_path, model_vocab, path, sizeof path, bins, sizeof bins)) {
        r = qx_tokenizer_load(t, path, (int32_t)(model_vocab > 0 && model_vocab < INT32_MAX ? model_vocab : 0), e);
        if (r == QUAROT_OK && used) snprintf(used, used_cap, "%s", path);
        return r;
    }
    if (lo < sizeof looked) snprintf(looked + lo, sizeof looked - lo, ", %s", bins);
    qx_err_set(e, "%s: no tokenizer found (looked for %s); pass --tokenizer FILE (GGUF, tokenizer.json or llama2.c tokenizer.bin) or --tokens FILE",
               model_path, looked);
    return QUAROT_ERR_NOT_FOUND;
}

/* ---- --tokens FILE ------------------------------------------------------------------------------ */

static quarot_result qx__tokens_json(const qx_json* a, int64_t vocab, int32_t* ids, int64_t* n, const char* path, qx_err* e) {
    size_t i;
    for (i = 0; i < a->count; ++i) {
        const qx_json* x = &a->items[i];
        int64_t v;
        if (x->type == QX_JSON_ARRAY) {
            quarot_result r = qx__tokens_json(x, vocab, ids, n, path, e);
            if (r != QUAROT_OK) return r;
            continue;
        }
        if (qx_json_as_int64(x, &v) != QUAROT_OK || v < 0 || v > INT32_MAX || (vocab > 0 && v >= vocab)) {
            qx_err_set(e, "%s: entry %lld is not a token id in [0, %lld)", path, (long long)*n, (long long)(vocab > 0 ? vocab : INT32_MAX));
            return QUAROT_ERR_PARSE;
        }
        ids[(*n)++] = (int32_t)v;
    }
    return QUAROT_OK;
}

quarot_result qx_tokens_read(const char* path, int64_t vocab, int32_t** ids_out, int64_t* n_out, qx_err* e) {
    char* text = NULL;
    size_t len = 0, i = 0;
    int32_t* ids;
    int64_t n = 0;
    quarot_result r;
    *ids_out = NULL;
    *n_out = 0;
    r = qx_read_file(path, (size_t)1 << 34, &text, &len, e);
    if (r != QUAROT_OK) return r;
    while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r')) ++i;
    ids = (int32_t*)malloc((len / 2 + 1) * sizeof *ids);   /* every id takes at least 2 bytes with its separator */
    if (!ids) { free(text); qx_err_set(e, "%s: out of memory", path); return QUAROT_ERR_OUT_OF_MEMORY; }
    if (i < len && text[i] == '[') {
        qx_json_doc doc;
        r = qx_json_parse(text, len, path, NULL, &doc, e);
        if (r == QUAROT_OK) {
            if (doc.root->type != QX_JSON_ARRAY) { qx_err_set(e, "%s: not a JSON array of token ids", path); r = QUAROT_ERR_PARSE; }
            else r = qx__tokens_json(doc.root, vocab, ids, &n, path, e);
            qx_json_doc_free(&doc);
        }
    } else {
        while (r == QUAROT_OK && i < len) {
            int64_t v = 0;
            size_t start = i;
            while (i < len && text[i] >= '0' && text[i] <= '9' && v <= INT32_MAX) v = v * 10 + (text[i++] - '0');
            if (i == start || (i < len && !(text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r' || text[i] == ','))) {
                qx_err_set(e, "%s: byte %zu: expected a token id (digits), whitespace separated", path, i);
                r = QUAROT_ERR_PARSE;
                break;
            }
            if (v > INT32_MAX || (vocab > 0 && v >= vocab)) {
                qx_err_set(e, "%s: token %lld (id %lld) is not below the vocabulary size %lld", path, (long long)n, (long long)v, (long long)vocab);
                r = QUAROT_ERR_PARSE;
                break;
            }
            ids[n++] = (int32_t)v;
            while (i < len && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r' || text[i] == ',')) ++i;
        }
    }
    free(text);
    if (r == QUAROT_OK && n == 0) { qx_err_set(e, "%s: no token ids", path); r = QUAROT_ERR_PARSE; }
    if (r != QUAROT_OK) { free(ids); return r; }
    *ids_out = ids;
    *n_out = n;
    return QUAROT_OK;
}
