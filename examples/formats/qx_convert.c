/* qx_convert.c - see qx_convert.h. */
#include "qx_convert.h"
#include "qx_gguf.h"
#include "qx_safetensors.h"
#include "qx_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char* const QX_CONVERT_HF_FILES[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                                           "special_tokens_map.json", "tokenizer.model", NULL};

static int qx__ends(const char* s, const char* suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a > b && strcmp(s + a - b, suffix) == 0;
}

const char* qx_convert_format_of_path(const char* path) {
    if (!path) return NULL;
    if (qx__ends(path, ".bin")) return "llama2c";
    if (qx__ends(path, ".gguf")) return "gguf";
    if (qx__ends(path, ".safetensors")) return "safetensors";
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

static void qx__le(qx_sb* b, uint64_t v, int bytes) {
    char c[8];
    int k;
    for (k = 0; k < bytes; ++k) c[k] = (char)((v >> (8 * k)) & 0xff);
    qx_sb_put(b, c, (size_t)bytes);
}

static void qx__gstr(qx_sb* b, const char* s, size_t n) {
    qx__le(b, (uint64_t)n, 8);
    qx_sb_put(b, s, n);
}

/* key, value type, and for arrays the element type and count */
static void qx__gkey(qx_sb* b, const char* key, uint32_t type) {
    qx__gstr(b, key, strlen(key));
    qx__le(b, type, 4);
}

static void qx__garr(qx_sb* b, const char* key, uint32_t elem, uint64_t count) {
    qx__gkey(b, key, QX_GGUF_ARRAY);
    qx__le(b, elem, 4);
    qx__le(b, count, 8);
}

/* llama2.c piece -> SentencePiece piece: BOS/EOS names back, ' ' -> U+2581 ("\xe2\x96\x81"). */
static void qx__sp_piece(qx_sb* tmp, const char* piece, int32_t id) {
    const char* p;
    if (id == 1) { qx_sb_puts(tmp, "<s>"); return; }
    if (id == 2) { qx_sb_puts(tmp, "</s>"); return; }
    for (p = piece; *p; ++p) {
        if (*p == ' ') qx_sb_put(tmp, "\xe2\x96\x81", 3);
        else qx_sb_put(tmp, p, 1);
    }
}

static int qx__is_byte_piece(const char* p) {
    static const char hex[] = "0123456789ABCDEF";
    return strlen(p) == 6 && strncmp(p, "<0x", 3) == 0 && strchr(hex, p[3]) && strchr(hex, p[4]) && p[5] == '>';
}

quarot_result qx_convert_gguf_kv(const qx_store* s, const char* tokenizer_path, qx_sb* out, qx_err* e) {
    qx_tokenizer t;
    qx_sb tmp;
    quarot_result r;
    uint64_t count = 0;
    int32_t i;
    int k;
    if (!s || !out) return QUAROT_ERR_INVALID_ARGUMENT;
    r = qx_gguf_kv_from_config(s, out, e);
    if (r != QUAROT_OK || !tokenizer_path) return r;
    memset(&t, 0, sizeof t);
    r = qx_tokenizer_load(&t, tokenizer_path, (int32_t)s->config.vocab, e);
    if (r != QUAROT_OK) return r;
    memset(&tmp, 0, sizeof tmp);
    qx__gkey(out, "tokenizer.ggml.model", QX_GGUF_STRING);
    qx__gstr(out, "llama", 5);
    qx__garr(out, "tokenizer.ggml.tokens", QX_GGUF_STRING, (uint64_t)t.vocab_size);
    for (i = 0; i < t.vocab_size; ++i) {
        tmp.len = 0;
        qx__sp_piece(&tmp, t.pieces[i], i);
        qx__gstr(out, tmp.p ? tmp.p : "", tmp.len);
    }
    qx__garr(out, "tokenizer.ggml.scores", QX_GGUF_F32, (uint64_t)t.vocab_size);
    for (i = 0; i < t.vocab_size; ++i) {
        uint32_t u;
        memcpy(&u, &t.scores[i], 4);
        qx__le(out, u, 4);
    }
    qx__garr(out, "tokenizer.ggml.token_type", QX_GGUF_I32, (uint64_t)t.vocab_size);
    for (i = 0; i < t.vocab_size; ++i)
        qx__le(out, i == 0 ? 2u : (i == 1 || i == 2) ? 3u : qx__is_byte_piece(t.pieces[i]) ? 6u : 1u, 4);
    qx__gkey(out, "tokenizer.ggml.bos_token_id", QX_GGUF_U32); qx__le(out, 1, 4);
    qx__gkey(out, "tokenizer.ggml.eos_token_id", QX_GGUF_U32); qx__le(out, 2, 4);
    qx__gkey(out, "tokenizer.ggml.unknown_token_id", QX_GGUF_U32); qx__le(out, 0, 4);
    qx__gkey(out, "tokenizer.ggml.add_bos_token", QX_GGUF_BOOL); qx__le(out, 1, 1);
    qx__gkey(out, "tokenizer.ggml.add_eos_token", QX_GGUF_BOOL); qx__le(out, 0, 1);
    qx_sb_free(&tmp);
    qx_tokenizer_free(&t);
    if (out->failed || out->len < 8) { qx_err_set(e, "%s: out of memory", tokenizer_path); return QUAROT_ERR_OUT_OF_MEMORY; }
    /* the blob starts with the pair count: 9 pairs more */
    for (k = 7; k >= 0; --k) count = (count << 8) | (unsigned char)out->p[k];
    count += 9;
    for (k = 0; k < 8; ++k) out->p[k] = (char)((count >> (8 * k)) & 0xff);
    return QUAROT_OK;
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
