/* qx_convert.c - see qx_convert.h. */
#include "pipeline/qx_convert.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"
#include "tokenizer/qx_tokenizer.h"
#include "tokenizer/qx_tok_load.h"
#include "tokenizer/qx_tok_write.h"
#include "support/qx_file.h"
#include "support/qx_str.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char* const QX_CONVERT_HF_FILES[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                           "special_tokens_map.json", "tokenizer.model", NULL};

/* s ends with the extension ext after a name of at least one byte */
static int qx__has_ext(const char* s, const char* ext) { return strlen(s) > strlen(ext) && qx_str_ends_with(s, ext); }

const char* qx_convert_format_of_path(const char* path) {
    if (!path) return NULL;
    if (qx__has_ext(path, ".bin")) return "llama2c";
    if (qx__has_ext(path, ".gguf")) return "gguf";
    if (qx__has_ext(path, ".safetensors")) return "safetensors";
    return NULL;
}

int qx_convert_interleaved(const char* fmt, const char* arch) {
    int il = 1;
    if (!fmt) return 0;
    if (strncmp(fmt, "llama2c", 7) == 0) return 1;
    if (strcmp(fmt, "gguf") == 0) return qx_gguf_arch_supported(arch, &il) ? il : 1;
    return 0;
}

const char* qx_convert_torch_dtype(quarot_dtype dt) {
    return dt == QUAROT_DTYPE_F16 ? "float16" : dt == QUAROT_DTYPE_BF16 ? "bfloat16" : dt == QUAROT_DTYPE_F64 ? "float64" : "float32";
}

/* ---- GGUF pairs ---- */

quarot_result qx_convert_gguf_kv(const qx_store* s, const char* tokenizer_path, qx_sb* out, qx_err* e) {
    qx_tokenizer t;
    quarot_result r;
    if (!s || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    r = qx_gguf_kv_from_config(s, out, e);
    if (r != QUAROT_OK || !tokenizer_path) return r;
    memset(&t, 0, sizeof t);
    r = qx_tokenizer_load(&t, tokenizer_path, (int32_t)s->config.vocab, e);
    if (r != QUAROT_OK) return r;
    r = qx_tokenizer_write_gguf_kv(&t, NULL, out, tokenizer_path, e);
    qx_tokenizer_free(&t);
    return r;
}

/* ---- config.json ---- */

quarot_result qx_convert_hf_config(const qx_store* s, const char* torch_dtype, qx_sb* out, qx_err* e) {
    qx_sb raw;
    qx_json_doc doc;
    char val[32];
    const char* key = "torch_dtype";
    const char* vp = val;
    quarot_result r;
    if (!torch_dtype) return qx_hf_config_write(s, out, e);
    memset(&raw, 0, sizeof raw);
    r = qx_hf_config_write(s, &raw, e);
    if (r == QUAROT_OK) r = qx_json_parse(raw.p, raw.len, "config.json", NULL, &doc, e);
    if (r != QUAROT_OK) { qx_sb_free(&raw); return r; }
    if (doc.root->type != QX_JSON_OBJECT) {
        qx_json_doc_free(&doc);
        qx_sb_free(&raw);
        qx_err_set(e, "config.json: not an object");
        return QUAROT_ERR_PARSE;
    }
    snprintf(val, sizeof val, "\"%s\"", torch_dtype);
    qx_json_write_patched(out, doc.root, 2, &key, &vp, 1);
    qx_sb_puts(out, "\n");
    qx_json_doc_free(&doc);
    qx_sb_free(&raw);
    return out->failed ? QUAROT_ERR_OUT_OF_MEMORY : QUAROT_OK;
}

/* ---- tokenizers of real models ---- */

int qx_convert_tok_to_gguf(const char* src_dir, int64_t model_vocab, qx_sb* kv, char* note, size_t cap, qx_err* e) {
    char* path = qx_path_join(src_dir, "tokenizer.json");
    qx_tokenizer t;
    qx_vocab* v;
    qx_err te;
    char what[160];
    size_t mark = kv->len;
    int rc;
    quarot_result r;
    if (!path) { qx_err_set(e, "out of memory"); return QX_TOKCONV_ERROR; }
    if (!qx_path_exists(path)) {
        snprintf(note, cap, "none (no tokenizer.json in %s): no tokenizer.ggml.* keys", src_dir);
        free(path);
        return QX_TOKCONV_NONE;
    }
    memset(&t, 0, sizeof t);
    te.msg[0] = '\0';
    r = qx_tokenizer_load_any(&t, path, 0, &te);
    if (r == QUAROT_ERR_OUT_OF_MEMORY) { qx_err_set(e, "%s", te.msg); free(path); return QX_TOKCONV_ERROR; }
    if (r != QUAROT_OK || !t.vocab) {
        snprintf(note, cap, "not converted: %s", r != QUAROT_OK ? te.msg : "not a vocabulary tokenizer");
        qx_tokenizer_free(&t);
        free(path);
        return QX_TOKCONV_UNFIT;
    }
    v = t.vocab;
    if (model_vocab > 0 && v->n > model_vocab) {
        snprintf(note, cap, "not converted: %s has %ld tokens, the model's vocabulary %lld", path, (long)v->n, (long long)model_vocab);
        rc = QX_TOKCONV_UNFIT;
    } else if (qx_vocab_gguf_unfit(v)) {
        snprintf(note, cap, "not converted: %s: %s", path, qx_vocab_gguf_unfit(v));
        rc = QX_TOKCONV_UNFIT;
    } else {
        /* padded to the model's vocabulary with unused "[PAD<id>]" tokens (llama.cpp's converter) */
        qx_vocab pv;
        int32_t n = model_vocab > v->n ? (int32_t)model_vocab : v->n, i;
        const qx_vocab* w = v;
        r = QUAROT_OK;
        memset(&pv, 0, sizeof pv);
        if (n > v->n) {
            r = qx_vocab_begin(&pv, v->kind, n, path, &te);
            for (i = 0; i < n && r == QUAROT_OK; ++i) {
                char pad[32];
                if (i < v->n) r = qx_vocab_set(&pv, i, v->text[i], (size_t)v->len[i], v->score[i], v->type[i], path, &te);
                else {
                    snprintf(pad, sizeof pad, "[PAD%ld]", (long)i);
                    r = qx_vocab_set(&pv, i, pad, strlen(pad), 0.0f, QX_TT_UNUSED, path, &te);
                }
            }
            if (r == QUAROT_OK) {
                /* the merges and settings of v (ranks kept: re-added in rank order) */
                pv.pre = v->pre;
                pv.bos = v->bos; pv.eos = v->eos; pv.unk = v->unk;
                pv.add_bos = v->add_bos; pv.add_eos = v->add_eos; pv.add_space_prefix = v->add_space_prefix;
                pv.byte_fallback = v->byte_fallback; pv.use_merges = v->use_merges;
                r = qx_vocab_index(&pv, path, &te);
                if (r == QUAROT_OK && v->mkey) {
                    /* copy the merge table as is: ids below v->n are the same tokens */
                    size_t slots = (size_t)v->mmask + 1;
                    pv.mkey = (uint64_t*)malloc(slots * sizeof *pv.mkey);
                    pv.mrank = (int32_t*)malloc(slots * sizeof *pv.mrank);
                    pv.mres = (int32_t*)malloc(slots * sizeof *pv.mres);
                    if (!pv.mkey || !pv.mrank || !pv.mres) { qx_err_set(&te, "out of memory"); r = QUAROT_ERR_OUT_OF_MEMORY; }
                    else {
                        memcpy(pv.mkey, v->mkey, slots * sizeof *pv.mkey);
                        memcpy(pv.mrank, v->mrank, slots * sizeof *pv.mrank);
                        memcpy(pv.mres, v->mres, slots * sizeof *pv.mres);
                        pv.mmask = v->mmask;
                        pv.n_merges = v->n_merges;
                    }
                }
            }
            w = &pv;
        }
        if (r == QUAROT_OK) r = qx_vocab_write_gguf_kv(w, kv, path, &te);
        qx_vocab_describe(v, what, sizeof what);
        if (r == QUAROT_OK) {
            if (n > v->n) snprintf(note, cap, "%s -> tokenizer.ggml.* (%s; padded to %ld with [PAD<id>])", path, what, (long)n);
            else snprintf(note, cap, "%s -> tokenizer.ggml.* (%s)", path, what);
            rc = QX_TOKCONV_DONE;
        } else if (r == QUAROT_ERR_OUT_OF_MEMORY) {
            qx_err_set(e, "%s", te.msg);
            rc = QX_TOKCONV_ERROR;
        } else {
            snprintf(note, cap, "not converted: %s", te.msg);
            rc = QX_TOKCONV_UNFIT;
        }
        qx_vocab_free(&pv);
    }
    if (rc != QX_TOKCONV_DONE) {   /* kv as it was */
        kv->len = mark;
        if (kv->p) kv->p[mark] = '\0';
    }
    qx_tokenizer_free(&t);
    free(path);
    return rc;
}

static quarot_result qx__write_text(const char* dir, const char* name, const qx_sb* b, qx_err* e) {
    char* path = qx_path_join(dir, name);
    FILE* f = path ? fopen(path, "wb") : NULL;
    int ok = f && (b->len == 0 || fwrite(b->p, 1, b->len, f) == b->len);
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) qx_err_set(e, "%s: cannot write", path ? path : name);
    free(path);
    return ok ? QUAROT_OK : QUAROT_ERR_IO;
}

int qx_convert_tok_to_hf(const char* gguf_path, int64_t model_vocab, const char* dst_dir, char* note, size_t cap, qx_err* e) {
    qx_map m;
    qx_gguf_file f;
    qx_vocab v;
    qx_sb json, cfg;
    qx_err te;
    char what[160];
    quarot_result r;
    int rc;
    te.msg[0] = '\0';
    if ((r = qx_map_file(gguf_path, &m, &te)) != QUAROT_OK) { qx_err_set(e, "%s", te.msg); return QX_TOKCONV_ERROR; }
    if ((r = qx_gguf_parse(m.addr, m.len, gguf_path, &f, &te)) != QUAROT_OK) {
        qx_unmap(&m);
        qx_err_set(e, "%s", te.msg);
        return QX_TOKCONV_ERROR;
    }
    if (!qx_gguf_has_tokenizer(&f)) {
        qx_gguf_file_free(&f);
        qx_unmap(&m);
        snprintf(note, cap, "none (%s has no tokenizer.ggml.tokens): no tokenizer.json", gguf_path);
        return QX_TOKCONV_NONE;
    }
    r = qx_vocab_from_gguf(&v, &f, gguf_path, &te);
    qx_gguf_file_free(&f);
    qx_unmap(&m);
    if (r == QUAROT_ERR_OUT_OF_MEMORY) { qx_err_set(e, "%s", te.msg); return QX_TOKCONV_ERROR; }
    if (r != QUAROT_OK) { snprintf(note, cap, "not converted: %s", te.msg); return QX_TOKCONV_UNFIT; }
    if (model_vocab > 0 && v.n > model_vocab) {
        snprintf(note, cap, "not converted: %s has %ld tokens, the model's vocabulary %lld", gguf_path, (long)v.n, (long long)model_vocab);
        qx_vocab_free(&v);
        return QX_TOKCONV_UNFIT;
    }
    memset(&json, 0, sizeof json);
    memset(&cfg, 0, sizeof cfg);
    r = qx_vocab_write_hf_json(&v, &json, &cfg, gguf_path, &te);
    if (r == QUAROT_OK) r = qx__write_text(dst_dir, "tokenizer.json", &json, &te);
    if (r == QUAROT_OK) r = qx__write_text(dst_dir, "tokenizer_config.json", &cfg, &te);
    qx_vocab_describe(&v, what, sizeof what);
    if (r == QUAROT_OK) {
        snprintf(note, cap, "%s tokenizer.ggml.* -> tokenizer.json + tokenizer_config.json (%s)", gguf_path, what);
        rc = QX_TOKCONV_DONE;
    } else {
        qx_err_set(e, "%s", te.msg);
        rc = QX_TOKCONV_ERROR;
    }
    qx_sb_free(&json);
    qx_sb_free(&cfg);
    qx_vocab_free(&v);
    return rc;
}
