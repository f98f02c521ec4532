/* qx_tok_write.c - see qx_tok_write.h. */
#include "tokenizer/qx_tok_write.h"
#include "formats/qx_gguf.h"
#include "support/qx_str.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the merges in rank order ---------------------------------------------------------------- */

typedef struct qx__mg { int64_t rank; int32_t l, r, res; } qx__mg;

static int qx__cmp_mg(const void* a, const void* b) {
    const qx__mg *x = (const qx__mg*)a, *y = (const qx__mg*)b;
    return (x->rank > y->rank) - (x->rank < y->rank);
}

typedef struct qx__sid { float s; int32_t id; } qx__sid;
static int qx__cmp_sid(const void* a, const void* b) {
    const qx__sid *x = (const qx__sid*)a, *y = (const qx__sid*)b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* v's merges as (left, right) ids, in rank order: the merge table's (a repeated pair once, at its
   first rank), or for a score-only SentencePiece vocabulary the merges its scores imply (every split
   of a normal token at a UTF-8 boundary into two tokens; tokens by score desc, then id). */
static quarot_result qx__merges(const qx_vocab* v, qx__mg** out, int64_t* n_out, const char* name, qx_err* e) {
    int64_t n = 0, cap = 0;
    qx__mg* m = NULL;
    *out = NULL;
    *n_out = 0;
    if (v->mkey) {
        uint64_t i;
        for (i = 0; i <= v->mmask; ++i) n += v->mkey[i] != 0;
        m = (qx__mg*)malloc((size_t)(n ? n : 1) * sizeof *m);
        if (!m) goto oom;
        n = 0;
        for (i = 0; i <= v->mmask; ++i) {
            uint64_t key;
            if (!v->mkey[i]) continue;
            key = v->mkey[i] - 1;
            m[n].rank = v->mrank[i];
            m[n].l = (int32_t)(key >> 32);
            m[n].r = (int32_t)(key & 0xFFFFFFFFu);
            m[n].res = v->mres[i];
            ++n;
        }
        qsort(m, (size_t)n, sizeof *m, qx__cmp_mg);
    } else if (v->kind == QX_VOCAB_SPM) {
        qx__sid* o = (qx__sid*)malloc((size_t)v->n * sizeof *o);
        int32_t i;
        if (!o) goto oom;
        for (i = 0; i < v->n; ++i) { o[i].s = v->score[i]; o[i].id = i; }
        qsort(o, (size_t)v->n, sizeof *o, qx__cmp_sid);
        for (i = 0; i < v->n; ++i) {
            int32_t id = o[i].id, k;
            if (v->type[id] != QX_TT_NORMAL) continue;
            for (k = 1; k < v->len[id]; ++k) {
                int32_t l, r;
                if (((unsigned char)v->text[id][k] & 0xC0) == 0x80) continue;
                if ((l = qx_vocab_lookup(v, v->text[id], (size_t)k)) < 0) continue;
                if ((r = qx_vocab_lookup(v, v->text[id] + k, (size_t)(v->len[id] - k))) < 0) continue;
                if (n == cap) {
                    int64_t nc = cap ? cap * 2 : 4096;
                    qx__mg* p = (qx__mg*)realloc(m, (size_t)nc * sizeof *p);
                    if (!p) { free(o); goto oom; }
                    m = p;
                    cap = nc;
                }
                m[n].rank = n;
                m[n].l = l;
                m[n].r = r;
                m[n].res = id;
                ++n;
            }
        }
        free(o);
    }
    *out = m;
    *n_out = n;
    return QUAROT_OK;
oom:
    free(m);
    qx_err_set(e, "%s: out of memory for the merges", name);
    return QUAROT_ERR_OUT_OF_MEMORY;
}

/* The llama.cpp `pre` name whose regex list equals v's (the vocabulary's own name first), or NULL. */
static const char* qx__pre_name(const qx_vocab* v, char* buf, size_t cap) {
    const char* list = qx_pre_names();
    const char* p = list;
    qx_pre q;
    int k, pass;
    for (pass = 0; pass < 2; ++pass) {
        for (p = list; *p;) {
            const char* c = strchr(p, ',');
            size_t len = c ? (size_t)(c - p) : strlen(p);
            int same;
            if (pass == 0 ? (strlen(v->pre.name) == len && memcmp(v->pre.name, p, len) == 0) : 1) {
                same = qx_pre_from_name(p, len, &q) && q.n == v->pre.n && q.ignore_merges == v->pre.ignore_merges;
                for (k = 0; same && k < q.n; ++k) same = q.re[k] == v->pre.re[k];
                if (same && len < cap) {
                    memcpy(buf, p, len);
                    buf[len] = '\0';
                    return buf;
                }
            }
            p = c ? c + 1 : p + len;
            while (*p == ' ') ++p;
        }
    }
    return NULL;
}

const char* qx_vocab_gguf_unfit(const qx_vocab* v) {
    char buf[64];
    uint64_t i;
    if (!v || !v->hash) return "no vocabulary";
    if (v->kind == QX_VOCAB_SPM && !v->byte_fallback)
        return "a SentencePiece BPE without byte fallback (GGUF's \"llama\" tokenizer always falls back to bytes)";
    if (v->kind == QX_VOCAB_BPE && !qx__pre_name(v, buf, sizeof buf))
        return "its pre-tokenizer regexes match no llama.cpp tokenizer.ggml.pre name";
    /* GGUF merges are "left right", cut at the first space after byte 0 */
    for (i = 0; v->mkey && i <= v->mmask; ++i) {
        int32_t l;
        if (!v->mkey[i]) continue;
        l = (int32_t)((v->mkey[i] - 1) >> 32);
        if (v->len[l] > 1 && memchr(v->text[l] + 1, ' ', (size_t)v->len[l] - 1))
            return "a merge's left token holds a space (GGUF's \"left right\" merge strings cannot say where it ends)";
    }
    return NULL;
}

void qx_vocab_describe(const qx_vocab* v, char* buf, size_t cap) {
    if (v->kind == QX_VOCAB_SPM)
        snprintf(buf, cap, "SentencePiece BPE, %ld tokens%s", (long)v->n, v->use_merges ? ", merges" : "");
    else
        snprintf(buf, cap, "byte-level BPE, %ld tokens, %lld merges", (long)v->n, (long long)v->n_merges);
}

/* ---- GGUF ------------------------------------------------------------------------------------- */

quarot_result qx_vocab_write_gguf_kv(const qx_vocab* v, qx_sb* kv, const char* name, qx_err* e) {
    const char* why = qx_vocab_gguf_unfit(v);
    char pre[64];
    qx__mg* m = NULL;
    int64_t nm = 0, k;
    uint64_t pairs = 0;
    int32_t i;
    int spm;
    quarot_result r;
    if (why) { qx_err_set(e, "%s: cannot be written as GGUF tokenizer.ggml.*: %s", name, why); return QUAROT_ERR_UNSUPPORTED; }
    if (kv->len < 8) { qx_err_set(e, "%s: not a gguf.kv blob", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    spm = v->kind == QX_VOCAB_SPM;
    if (v->mkey && (r = qx__merges(v, &m, &nm, name, e)) != QUAROT_OK) return r;
    qx_gguf_kv_str(kv, "tokenizer.ggml.model", spm ? "llama" : "gpt2", spm ? 5 : 4);
    ++pairs;
    if (!spm) {
        qx__pre_name(v, pre, sizeof pre);
        qx_gguf_kv_str(kv, "tokenizer.ggml.pre", pre, strlen(pre));
        ++pairs;
    }
    qx_gguf_kv_arr_begin(kv, "tokenizer.ggml.tokens", QX_GGUF_STRING, (uint64_t)v->n);
    for (i = 0; i < v->n; ++i) qx_gguf_put_str(kv, v->text[i], (size_t)v->len[i]);
    ++pairs;
    if (spm) {
        float* sc = (float*)malloc((size_t)v->n * sizeof *sc);
        int any = 0;
        if (!sc) { free(m); qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
        for (i = 0; i < v->n; ++i) { sc[i] = v->score[i]; any |= v->score[i] != 0.0f; }
        if (!any && nm > 0) {   /* tokenizer.json: scores that order llama.cpp's merging as the ranks do */
            for (i = 0; i < v->n; ++i) {
                const unsigned char c = (unsigned char)v->text[i][0];
                int32_t one = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
                sc[i] = v->type[i] == QX_TT_NORMAL && v->len[i] > one ? -(float)(nm + i) : 0.0f;
            }
            for (k = nm - 1; k >= 0; --k)
                if (m[k].res >= 0) sc[m[k].res] = -(float)k;
        }
        qx_gguf_kv_arr_begin(kv, "tokenizer.ggml.scores", QX_GGUF_F32, (uint64_t)v->n);
        for (i = 0; i < v->n; ++i) qx_gguf_put_f32(kv, sc[i]);
        free(sc);
        ++pairs;
    }
    qx_gguf_kv_arr_begin(kv, "tokenizer.ggml.token_type", QX_GGUF_I32, (uint64_t)v->n);
    for (i = 0; i < v->n; ++i) qx_sb_le(kv, v->type[i], 4);
    ++pairs;
    if (nm > 0) {
        qx_sb t;
        memset(&t, 0, sizeof t);
        qx_gguf_kv_arr_begin(kv, "tokenizer.ggml.merges", QX_GGUF_STRING, (uint64_t)nm);
        for (k = 0; k < nm; ++k) {
            t.len = 0;
            qx_sb_put(&t, v->text[m[k].l], (size_t)v->len[m[k].l]);
            qx_sb_put(&t, " ", 1);
            qx_sb_put(&t, v->text[m[k].r], (size_t)v->len[m[k].r]);
            qx_gguf_put_str(kv, t.p ? t.p : "", t.len);
        }
        if (t.failed) kv->failed = 1;
        qx_sb_free(&t);
        ++pairs;
    }
    free(m);
    if (v->bos >= 0) { qx_gguf_kv_u32(kv, "tokenizer.ggml.bos_token_id", (uint32_t)v->bos); ++pairs; }
    if (v->eos >= 0) { qx_gguf_kv_u32(kv, "tokenizer.ggml.eos_token_id", (uint32_t)v->eos); ++pairs; }
    if (v->unk >= 0) { qx_gguf_kv_u32(kv, "tokenizer.ggml.unknown_token_id", (uint32_t)v->unk); ++pairs; }
    qx_gguf_kv_bool(kv, "tokenizer.ggml.add_bos_token", v->add_bos); ++pairs;
    qx_gguf_kv_bool(kv, "tokenizer.ggml.add_eos_token", v->add_eos); ++pairs;
    if (spm) { qx_gguf_kv_bool(kv, "tokenizer.ggml.add_space_prefix", v->add_space_prefix); ++pairs; }
    if (qx_gguf_kv_count_add(kv, pairs) != 0) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
    return QUAROT_OK;
}

/* llama2.c piece -> SentencePiece piece: ' ' -> U+2581 ("\xe2\x96\x81"). */
static void qx__sp_piece(qx_sb* b, const char* piece, int32_t len) {
    int32_t j;
    for (j = 0; j < len; ++j) {
        if (piece[j] == ' ') qx_sb_put(b, "\xe2\x96\x81", 3);
        else qx_sb_put(b, piece + j, 1);
    }
}

static int qx__is_byte_piece(const char* p, int32_t len) {
    static const char hex[] = "0123456789ABCDEF";
    return len == 6 && strncmp(p, "<0x", 3) == 0 && strchr(hex, p[3]) && strchr(hex, p[4]) && p[5] == '>';
}

quarot_result qx_tokenizer_write_gguf_kv(const qx_tokenizer* t, const char* pre, qx_sb* kv, const char* name, qx_err* e) {
    static const char* const special[3] = {"<unk>", "<s>", "</s>"};
    qx_sb piece;
    int32_t i;
    if (!t || !kv) return QUAROT_ERR_INVALID_ARGUMENT;
    if (t->vocab) return qx_vocab_write_gguf_kv(t->vocab, kv, name, e);
    if (kv->len < 8) { qx_err_set(e, "%s: not a gguf.kv blob", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    qx_gguf_kv_str(kv, "tokenizer.ggml.model", "llama", 5);
    if (pre) qx_gguf_kv_str(kv, "tokenizer.ggml.pre", pre, strlen(pre));
    qx_gguf_kv_arr_begin(kv, "tokenizer.ggml.tokens", QX_GGUF_STRING, (uint64_t)t->vocab_size);
    memset(&piece, 0, sizeof piece);
    for (i = 0; i < t->vocab_size; ++i) {
        piece.len = 0;
        if (i < 3) qx_sb_puts(&piece, special[i]);
        else qx__sp_piece(&piece, t->pieces[i], t->lens[i]);
        qx_gguf_put_str(kv, piece.p ? piece.p : "", piece.len);
    }
    if (piece.failed) kv->failed = 1;
    qx_sb_free(&piece);
    qx_gguf_kv_arr_begin(kv, "tokenizer.ggml.scores", QX_GGUF_F32, (uint64_t)t->vocab_size);
    for (i = 0; i < t->vocab_size; ++i) qx_gguf_put_f32(kv, t->scores[i]);
    qx_gguf_kv_arr_begin(kv, "tokenizer.ggml.token_type", QX_GGUF_I32, (uint64_t)t->vocab_size);
    for (i = 0; i < t->vocab_size; ++i)
        qx_sb_le(kv, i == 0 ? 2u : i <= 2 ? 3u : qx__is_byte_piece(t->pieces[i], t->lens[i]) ? 6u : 1u, 4);
    qx_gguf_kv_u32(kv, "tokenizer.ggml.bos_token_id", 1);
    qx_gguf_kv_u32(kv, "tokenizer.ggml.eos_token_id", 2);
    qx_gguf_kv_u32(kv, "tokenizer.ggml.unknown_token_id", 0);
    qx_gguf_kv_bool(kv, "tokenizer.ggml.add_bos_token", 1);
    qx_gguf_kv_bool(kv, "tokenizer.ggml.add_eos_token", 0);
    if (qx_gguf_kv_count_add(kv, pre ? 10 : 9) != 0) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
    return QUAROT_OK;
}

/* ---- tokenizer.json --------------------------------------------------------------------------- */

static void qx__jtok(qx_sb* b, const qx_vocab* v, int32_t id) {
    if (id < 0) qx_sb_puts(b, "null");
    else qx_sb_json_string(b, v->text[id], (size_t)v->len[id]);
}

static int qx__is_added(const qx_vocab* v, int32_t id) {
    return v->type[id] == QX_TT_CONTROL || v->type[id] == QX_TT_USER_DEFINED || v->type[id] == QX_TT_UNKNOWN;
}

quarot_result qx_vocab_write_hf_json(const qx_vocab* v, qx_sb* json, qx_sb* config, const char* name, qx_err* e) {
    int spm, first, arrays = 0, k;
    int32_t i;
    int64_t nm = 0, j;
    qx__mg* m = NULL;
    quarot_result r;
    if (!v || !v->hash) { qx_err_set(e, "%s: no vocabulary", name); return QUAROT_ERR_INVALID_ARGUMENT; }
    spm = v->kind == QX_VOCAB_SPM;
    if (config) {
        qx_sb_printf(config, "{\n  \"add_bos_token\": %s,\n  \"add_eos_token\": %s,\n  \"bos_token\": ", v->add_bos ? "true" : "false",
                     v->add_eos ? "true" : "false");
        qx__jtok(config, v, v->bos);
        qx_sb_puts(config, ",\n  \"eos_token\": ");
        qx__jtok(config, v, v->eos);
        qx_sb_puts(config, ",\n  \"unk_token\": ");
        qx__jtok(config, v, v->unk);
        qx_sb_printf(config, ",\n  \"clean_up_tokenization_spaces\": false,\n  \"tokenizer_class\": \"%s\"\n}\n",
                     spm ? "LlamaTokenizerFast" : "PreTrainedTokenizerFast");
        if (config->failed) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
    }
    if (!json) return QUAROT_OK;
    if ((r = qx__merges(v, &m, &nm, name, e)) != QUAROT_OK) return r;
    qx_sb_puts(json, "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n  \"added_tokens\": [");
    for (i = 0, first = 1; i < v->n; ++i) {
        if (!qx__is_added(v, i) || v->len[i] == 0) continue;
        qx_sb_printf(json, "%s\n    {\"id\": %ld, \"content\": ", first ? "" : ",", (long)i);
        qx_sb_json_string(json, v->text[i], (size_t)v->len[i]);
        qx_sb_printf(json, ", \"single_word\": false, \"lstrip\": false, \"rstrip\": false, \"normalized\": false, \"special\": %s}",
                     v->type[i] == QX_TT_USER_DEFINED ? "false" : "true");
        first = 0;
    }
    qx_sb_puts(json, first ? "],\n" : "\n  ],\n");
    if (spm) {
        qx_sb_puts(json, "  \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [");
        if (v->add_space_prefix) qx_sb_puts(json, "{\"type\": \"Prepend\", \"prepend\": \"\xE2\x96\x81\"}, ");
        qx_sb_puts(json, "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xE2\x96\x81\"}]},\n"
                         "  \"pre_tokenizer\": null,\n");
    } else {
        int gpt2_only = v->pre.n == 1 && v->pre.re[0] == QX_RE_GPT2;
        qx_sb_puts(json, "  \"normalizer\": null,\n  \"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [");
        for (k = 0; k < v->pre.n && !gpt2_only; ++k) {
            const char* rx = qx_pre_regex_text(v->pre.re[k]);
            qx_sb_puts(json, "{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
            qx_sb_json_string(json, rx, strlen(rx));
            qx_sb_puts(json, "}, \"behavior\": \"Isolated\", \"invert\": false}, ");
        }
        qx_sb_printf(json, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": %s}]},\n",
                     gpt2_only ? "true" : "false");
    }
    /* post-processor: BOS / EOS around the text, as the model adds them */
    if ((v->add_bos && v->bos >= 0) || (v->add_eos && v->eos >= 0)) {
        int pass;
        qx_sb_puts(json, "  \"post_processor\": {\"type\": \"TemplateProcessing\"");
        for (pass = 0; pass < 2; ++pass) {
            qx_sb_puts(json, pass == 0 ? ", \"single\": [" : ", \"pair\": [");
            for (k = 0; k <= pass; ++k) {
                if (k) qx_sb_puts(json, ", ");
                if (v->add_bos && v->bos >= 0) {
                    qx_sb_puts(json, "{\"SpecialToken\": {\"id\": ");
                    qx__jtok(json, v, v->bos);
                    qx_sb_printf(json, ", \"type_id\": %d}}, ", k);
                }
                qx_sb_printf(json, "{\"Sequence\": {\"id\": \"%s\", \"type_id\": %d}}", k ? "B" : "A", k);
                if (v->add_eos && v->eos >= 0) {
                    qx_sb_puts(json, ", {\"SpecialToken\": {\"id\": ");
                    qx__jtok(json, v, v->eos);
                    qx_sb_printf(json, ", \"type_id\": %d}}", k);
                }
            }
            qx_sb_puts(json, "]");
        }
        qx_sb_puts(json, ", \"special_tokens\": {");
        for (k = 0, first = 1; k < 2; ++k) {
            int32_t id = k == 0 ? (v->add_bos ? v->bos : -1) : (v->add_eos ? v->eos : -1);
            if (id < 0 || (k == 1 && id == v->bos && v->add_bos)) continue;
            if (!first) qx_sb_puts(json, ", ");
            qx__jtok(json, v, id);
            qx_sb_puts(json, ": {\"id\": ");
            qx__jtok(json, v, id);
            qx_sb_printf(json, ", \"ids\": [%ld], \"tokens\": [", (long)id);
            qx__jtok(json, v, id);
            qx_sb_puts(json, "]}");
            first = 0;
        }
        qx_sb_puts(json, "}},\n");
    } else {
        qx_sb_puts(json, "  \"post_processor\": null,\n");
    }
    if (spm)
        qx_sb_printf(json, "  \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": "
                           "\"\xE2\x96\x81\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}%s]},\n",
                     v->add_space_prefix ? ", {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}" : "");
    else
        qx_sb_puts(json, "  \"decoder\": {\"type\": \"ByteLevel\", \"add_prefix_space\": true, \"trim_offsets\": true, \"use_regex\": true},\n");
    qx_sb_printf(json, "  \"model\": {\"type\": \"BPE\", \"dropout\": null, \"unk_token\": ");
    qx__jtok(json, v, v->unk);
    qx_sb_printf(json, ", \"continuing_subword_prefix\": null, \"end_of_word_suffix\": null, \"fuse_unk\": %s, \"byte_fallback\": %s, "
                       "\"ignore_merges\": %s,\n    \"vocab\": {",
                 spm ? "true" : "false", spm && v->byte_fallback ? "true" : "false", v->pre.ignore_merges && !spm ? "true" : "false");
    for (i = 0, first = 1; i < v->n; ++i) {
        if (qx_vocab_lookup(v, v->text[i], (size_t)v->len[i]) != i) continue;   /* a repeated text: the id lookups give */
        qx_sb_puts(json, first ? "\n      " : ",\n      ");
        qx_sb_json_string(json, v->text[i], (size_t)v->len[i]);
        qx_sb_printf(json, ": %ld", (long)i);
        first = 0;
    }
    /* merges: "left right" strings unless a token holds a space, then [left, right] pairs */
    for (j = 0; j < nm && !arrays; ++j)
        arrays = memchr(v->text[m[j].l], ' ', (size_t)v->len[m[j].l]) || memchr(v->text[m[j].r], ' ', (size_t)v->len[m[j].r]);
    qx_sb_puts(json, "\n    },\n    \"merges\": [");
    for (j = 0; j < nm; ++j) {
        qx_sb_puts(json, j ? ",\n      " : "\n      ");
        if (arrays) {
            qx_sb_puts(json, "[");
            qx__jtok(json, v, m[j].l);
            qx_sb_puts(json, ", ");
            qx__jtok(json, v, m[j].r);
            qx_sb_puts(json, "]");
        } else {
            qx_sb t;
            memset(&t, 0, sizeof t);
            qx_sb_put(&t, v->text[m[j].l], (size_t)v->len[m[j].l]);
            qx_sb_put(&t, " ", 1);
            qx_sb_put(&t, v->text[m[j].r], (size_t)v->len[m[j].r]);
            if (t.failed) json->failed = 1;
            else qx_sb_json_string(json, t.p, t.len);
            qx_sb_free(&t);
        }
    }
    qx_sb_puts(json, nm ? "\n    ]\n  }\n}\n" : "]\n  }\n}\n");
    free(m);
    if (json->failed) { qx_err_set(e, "%s: out of memory", name); return QUAROT_ERR_OUT_OF_MEMORY; }
    return QUAROT_OK;
}
