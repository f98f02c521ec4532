/* Vocabulary tokenizers (SentencePiece BPE, byte-level BPE) against llama.cpp's test vectors:
   ../shared/tokenizers holds five vocab-only GGUF files, each with test strings (.inp) and the ids
   the reference tokenizer gives for them (.out); EVERY string must encode to exactly those ids.
   The same vocabularies converted to tokenizer.json (written here) must give the same ids. Decoding
   must give the text back. Skips cleanly without ../shared. */
#include "tokenizer/qx_tok_load.h"
#include "formats/qx_gguf.h"
#include "formats/qx_json.h"
#include "tokenizer/qx_unicode.h"
#include "support/qx_file.h"
#include "qt.h"
#include "tok_util.h"

static void test_shared_sets(void) {
    int total = 0, have = 0;
    for (int s = 0; s < N_SETS; ++s) {
        tset t;
        char path[4096];
        qx_tokenizer tk;
        qx_err e;
        if (!load_set(k_sets[s], &t, path, sizeof path)) { free_set(&t); continue; }
        have = 1;
        QT_OK(qx_tokenizer_load_any(&tk, path, 0, &e));
        if (!tk.vocab) { QT_CHECKF(0, "%s: %s", path, e.msg); free_set(&t); continue; }
        {
            int bad = check_set(&tk, &t, k_sets[s]);
            QT_CHECKF(bad == 0, "%s: %d of %d strings differ", k_sets[s], bad, t.n);
            total += t.n;
        }
        qx_tokenizer_free(&tk);
        free_set(&t);
    }
    if (!have) { QT_SKIP("../shared/tokenizers absent"); return; }
    printf("    %d strings over the shared sets\n", total);
}

/* ---- tokenizer.json written from the GGUF vocabularies ------------------------------------------ */

typedef struct gvocab {
    int32_t n;
    const char** s; size_t* len; float* score; int32_t* type;
    int64_t n_merges; const char** ms; size_t* mlen;
    int spm;
    char pre[64];
} gvocab;

static uint64_t rd64(const unsigned char* p) { uint64_t v = 0; for (int i = 7; i >= 0; --i) v = (v << 8) | p[i]; return v; }

static int gvocab_read(const qx_gguf_file* f, gvocab* g) {
    const qx_gguf_kv *tk = qx_gguf_find(f, "tokenizer.ggml.tokens"), *sc = qx_gguf_find(f, "tokenizer.ggml.scores"),
                     *ty = qx_gguf_find(f, "tokenizer.ggml.token_type"), *mg = qx_gguf_find(f, "tokenizer.ggml.merges"),
                     *md = qx_gguf_find(f, "tokenizer.ggml.model"), *pr = qx_gguf_find(f, "tokenizer.ggml.pre");
    const unsigned char* p;
    uint64_t l;
    const char* m;
    memset(g, 0, sizeof *g);
    if (!tk || !md) return 0;
    m = qx_gguf_kv_string(md, &l);
    g->spm = l == 5 && memcmp(m, "llama", 5) == 0;
    if (pr) { m = qx_gguf_kv_string(pr, &l); snprintf(g->pre, sizeof g->pre, "%.*s", (int)l, m); }
    g->n = (int32_t)tk->arr_count;
    g->s = (const char**)malloc((size_t)g->n * sizeof *g->s);
    g->len = (size_t*)malloc((size_t)g->n * sizeof *g->len);
    g->score = (float*)calloc((size_t)g->n, sizeof *g->score);
    g->type = (int32_t*)calloc((size_t)g->n, sizeof *g->type);
    for (int32_t i = 0; i < g->n; ++i) {
        if (sc) memcpy(&g->score[i], sc->val + 4 * i, 4);
        g->type[i] = 1;
        if (ty) memcpy(&g->type[i], ty->val + 4 * i, 4);
    }
    for (p = tk->val, l = 0; l < (uint64_t)g->n; ++l) { g->len[l] = (size_t)rd64(p); g->s[l] = (const char*)p + 8; p += 8 + g->len[l]; }
    if (mg) {
        g->n_merges = (int64_t)mg->arr_count;
        g->ms = (const char**)malloc((size_t)g->n_merges * sizeof *g->ms);
        g->mlen = (size_t*)malloc((size_t)g->n_merges * sizeof *g->mlen);
        for (p = mg->val, l = 0; l < (uint64_t)g->n_merges; ++l) { g->mlen[l] = (size_t)rd64(p); g->ms[l] = (const char*)p + 8; p += 8 + g->mlen[l]; }
    }
    return 1;
}

static void gvocab_free(gvocab* g) { free(g->s); free(g->len); free(g->score); free(g->type); free(g->ms); free(g->mlen); }

typedef struct sid { float s; int32_t id; } sid;
static int cmp_sid(const void* a, const void* b) {
    const sid *x = (const sid*)a, *y = (const sid*)b;
    if (x->s != y->s) return x->s > y->s ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* tokenizer.json of g: Hugging Face's layout for the kind (SentencePiece BPE: merges derived from
   the scores, as transformers' converter does: every split of a token into two tokens, tokens in
   score order). */
static void write_tokenizer_json(const gvocab* g, const qx_vocab* v, qx_sb* b) {
    int32_t i;
    int first = 1;
    qx_sb_puts(b, "{\"version\": \"1.0\", \"added_tokens\": [");
    for (i = 0; i < g->n; ++i) {
        if (g->type[i] != 3 && g->type[i] != 4) continue;
        qx_sb_printf(b, "%s{\"id\": %ld, \"content\": ", first ? "" : ", ", (long)i);
        qx_sb_json_string(b, g->s[i], g->len[i]);
        qx_sb_printf(b, ", \"special\": %s}", g->type[i] == 3 ? "true" : "false");
        first = 0;
    }
    qx_sb_puts(b, "],\n");
    if (g->spm) {
        qx_sb_puts(b, "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": \"\xE2\x96\x81\"}, "
                      "{\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xE2\x96\x81\"}]},\n\"pre_tokenizer\": null,\n");
    } else {
        qx_pre pre;
        qx_sb_puts(b, "\"normalizer\": null,\n\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [");
        qx_pre_from_name(g->pre, strlen(g->pre), &pre);
        for (int k = 0; k < pre.n; ++k) {
            if (pre.re[k] == QX_RE_GPT2) continue;   /* ByteLevel's own regex, below */
            qx_sb_puts(b, "{\"type\": \"Split\", \"pattern\": {\"Regex\": ");
            qx_sb_json_string(b, qx_pre_regex_text(pre.re[k]), strlen(qx_pre_regex_text(pre.re[k])));
            qx_sb_puts(b, "}, \"behavior\": \"Isolated\", \"invert\": false}, ");
        }
        qx_sb_printf(b, "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, \"use_regex\": %s}]},\n",
                     pre.n == 1 && pre.re[0] == QX_RE_GPT2 ? "true" : "false");
    }
    qx_sb_printf(b, "\"model\": {\"type\": \"BPE\", \"byte_fallback\": %s, \"unk_token\": %s, \"vocab\": {", g->spm ? "true" : "false",
                 g->spm ? "\"<unk>\"" : "null");
    for (i = 0, first = 1; i < g->n; ++i) {
        if (qx_vocab_lookup(v, g->s[i], g->len[i]) != i) continue;   /* a repeated string: the id lookups give */
        if (!first) qx_sb_puts(b, ", ");
        qx_sb_json_string(b, g->s[i], g->len[i]);
        qx_sb_printf(b, ": %ld", (long)i);
        first = 0;
    }
    qx_sb_puts(b, "},\n\"merges\": [");
    if (!g->spm) {
        for (int64_t k = 0; k < g->n_merges; ++k) {
            if (k) qx_sb_puts(b, ", ");
            qx_sb_json_string(b, g->ms[k], g->mlen[k]);
        }
    } else {
        sid* o = (sid*)malloc((size_t)g->n * sizeof *o);
        int64_t nm = 0;
        for (i = 0; i < g->n; ++i) { o[i].s = g->score[i]; o[i].id = i; }
        qsort(o, (size_t)g->n, sizeof *o, cmp_sid);
        for (i = 0; i < g->n; ++i) {
            int32_t id = o[i].id;
            if (g->type[id] != 1) continue;
            for (size_t k = 1; k < g->len[id]; ++k) {
                if (((unsigned char)g->s[id][k] & 0xC0) == 0x80) continue;
                if (qx_vocab_lookup(v, g->s[id], k) < 0 || qx_vocab_lookup(v, g->s[id] + k, g->len[id] - k) < 0) continue;
                qx_sb_puts(b, nm++ ? ", [" : "[");
                qx_sb_json_string(b, g->s[id], k);
                qx_sb_puts(b, ", ");
                qx_sb_json_string(b, g->s[id] + k, g->len[id] - k);
                qx_sb_puts(b, "]");
            }
        }
        free(o);
    }
    qx_sb_puts(b, "]}}\n");
}

static void test_tokenizer_json(void) {
    int have = 0;
    for (int s = 0; s < N_SETS; ++s) {
        tset t;
        char path[4096];
        qx_map m;
        qx_gguf_file f;
        gvocab g;
        qx_vocab v, vj;
        qx_tokenizer tk;
        qx_sb b;
        qx_err e;
        const char* cfg = "{\"add_bos_token\": true, \"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\"}";
        if (qt_quick() && s != 0 && s != 2) continue;   /* one of each kind under QT_QUICK */
        if (!load_set(k_sets[s], &t, path, sizeof path)) { free_set(&t); continue; }
        have = 1;
        QT_OK(qx_map_file(path, &m, &e));
        QT_OK(qx_gguf_parse(m.addr, m.len, path, &f, &e));
        QT_OK(qx_vocab_from_gguf(&v, &f, path, &e));
        QT_CHECK(gvocab_read(&f, &g));
        memset(&b, 0, sizeof b);
        write_tokenizer_json(&g, &v, &b);
        QT_CHECK(!b.failed);
        {
            quarot_result r = qx_vocab_from_hf_json(&vj, b.p, b.len, g.spm ? cfg : NULL, g.spm ? strlen(cfg) : 0, "tokenizer.json", &e);
            QT_CHECKF(r == QUAROT_OK, "%s: %s", k_sets[s], e.msg);
            if (r == QUAROT_OK) {
                QT_EQ_INT(vj.kind, v.kind);
                if (g.spm) { QT_EQ_INT(vj.bos, 1); QT_EQ_INT(vj.eos, 2); QT_CHECK(vj.add_bos); }
                QT_OK(qx_tokenizer_from_vocab(&tk, &vj, &e));
                {
                    char label[64];
                    int bad;
                    snprintf(label, sizeof label, "%s (tokenizer.json)", k_sets[s]);
                    bad = check_set(&tk, &t, label);
                    QT_CHECKF(bad == 0, "%s: %d of %d strings differ", label, bad, t.n);
                }
                qx_tokenizer_free(&tk);
            }
        }
        qx_sb_free(&b);
        gvocab_free(&g);
        qx_vocab_free(&v);
        qx_gguf_file_free(&f);
        qx_unmap(&m);
        free_set(&t);
    }
    if (!have) QT_SKIP("../shared/tokenizers absent");
}

/* decode(encode(s)) gives s back (SentencePiece: with the space it prepends) */
static void test_decode_round_trip(void) {
    int have = 0;
    for (int s = 0; s < N_SETS; ++s) {
        tset t;
        char path[4096];
        qx_tokenizer tk;
        qx_err e;
        int bad = 0;
        if (!load_set(k_sets[s], &t, path, sizeof path)) { free_set(&t); continue; }
        have = 1;
        QT_OK(qx_tokenizer_load_any(&tk, path, 0, &e));
        for (int i = 0; i < t.n && tk.vocab; ++i) {
            qx_sb b;
            int spm = tk.vocab->kind == QX_VOCAB_SPM;
            memset(&b, 0, sizeof b);
            for (int64_t k = 0; k < t.nids[i]; ++k) {
                size_t n = 0;
                const char* p = qx_tokenizer_decode(&tk, k ? t.ids[i][k - 1] : -1, t.ids[i][k], &n);
                QT_CHECK(p != NULL);
                if (p) qx_sb_put(&b, p, n);
            }
            if (t.slen[i] == 0) { if (b.len != 0) ++bad; }
            else if (b.len != t.slen[i] + (size_t)spm || memcmp(b.p + spm, t.s[i], t.slen[i]) != 0 || (spm && b.p[0] != ' ')) ++bad;
            qx_sb_free(&b);
        }
        QT_CHECKF(bad == 0, "%s: %d strings do not decode back", k_sets[s], bad);
        /* BOS after which SentencePiece drops the leading space */
        if (tk.vocab && tk.vocab->kind == QX_VOCAB_SPM) {
            size_t n = 0;
            int32_t ids[4];
            int64_t cnt = 0;
            const char* p;
            QT_ERR(qx_tokenizer_encode(&tk, "Hello", 5, 1, 1, ids, 2, &cnt, &e), QUAROT_ERR_WORKSPACE);
            QT_EQ_INT(cnt, 3);   /* BOS, "\xE2\x96\x81Hello", EOS */
            QT_OK(qx_tokenizer_encode(&tk, "Hello", 5, 1, 1, ids, 4, &cnt, &e));
            QT_EQ_INT(cnt, 3);
            QT_EQ_INT(ids[0], tk.bos_id);
            QT_EQ_INT(ids[2], tk.eos_id);
            p = qx_tokenizer_decode(&tk, tk.bos_id, ids[1], &n);
            QT_CHECK(p && n == 5 && memcmp(p, "Hello", 5) == 0);
            p = qx_tokenizer_decode(&tk, -1, ids[1], &n);
            QT_CHECK(p && n == 6 && memcmp(p, " Hello", 6) == 0);
        }
        qx_tokenizer_free(&tk);
        free_set(&t);
    }
    if (!have) QT_SKIP("../shared/tokenizers absent");
}

/* ---- bad input ---------------------------------------------------------------------------------- */

/* a tiny GGUF v3 image with key/value pairs only */
typedef struct gb { qx_sb b; int64_t n_kv; } gb;
static void gb_kv_str(gb* g, const char* k, const char* v) { qx_gguf_kv_str(&g->b, k, v, strlen(v)); g->n_kv++; }
static void gb_kv_strs(gb* g, const char* k, const char* const* v, int n) {
    qx_gguf_kv_arr_begin(&g->b, k, QX_GGUF_STRING, (uint64_t)n);
    for (int i = 0; i < n; ++i) qx_gguf_put_str(&g->b, v[i], strlen(v[i]));
    g->n_kv++;
}
static void gb_kv_f32s(gb* g, const char* k, int n) {
    qx_gguf_kv_arr_begin(&g->b, k, QX_GGUF_F32, (uint64_t)n);
    for (int i = 0; i < n; ++i) qx_gguf_put_f32(&g->b, 0.0f);
    g->n_kv++;
}
static void gb_kv_i32s(gb* g, const char* k, int n) {
    qx_gguf_kv_arr_begin(&g->b, k, QX_GGUF_I32, (uint64_t)n);
    for (int i = 0; i < n; ++i) qx_sb_le(&g->b, 1, 4);
    g->n_kv++;
}
static void gb_kv_u32(gb* g, const char* k, uint32_t v) { qx_gguf_kv_u32(&g->b, k, v); g->n_kv++; }

/* parses the image (header prepended) and loads its vocabulary: the result, message in e */
static quarot_result gb_load(gb* g, qx_err* e) {
    gb h;
    qx_gguf_file f;
    qx_vocab v;
    quarot_result r;
    memset(&h, 0, sizeof h);
    qx_sb_put(&h.b, "GGUF", 4);
    qx_sb_le(&h.b, 3, 4); qx_sb_le(&h.b, 0, 8); qx_sb_le(&h.b, (uint64_t)g->n_kv, 8);
    qx_sb_put(&h.b, g->b.p, g->b.len);
    r = qx_gguf_parse(h.b.p, h.b.len, "bad.gguf", &f, e);
    if (r == QUAROT_OK) {
        r = qx_vocab_from_gguf(&v, &f, "bad.gguf", e);
        if (r == QUAROT_OK) qx_vocab_free(&v);
        qx_gguf_file_free(&f);
    }
    qx_sb_free(&h.b);
    qx_sb_free(&g->b);
    memset(g, 0, sizeof *g);
    return r;
}

#define EXPECT_MSG(e, sub) QT_CHECKF(strstr((e).msg, sub) != NULL, "message '%s' lacks '%s'", (e).msg, sub)

static void test_bad_gguf(void) {
    static const char* const toks[] = {"a", "b", "ab", "<s>"};
    static const char* const merges_ok[] = {"a b"};
    static const char* const merges_bad[] = {"a x"};
    static const char* const merges_nosp[] = {"ab"};
    gb g;
    qx_err e;
    memset(&g, 0, sizeof g);
    /* a good one first, so the failures below are the fields' fault */
    gb_kv_str(&g, "tokenizer.ggml.model", "gpt2"); gb_kv_str(&g, "tokenizer.ggml.pre", "qwen2");
    gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4); gb_kv_strs(&g, "tokenizer.ggml.merges", merges_ok, 1);
    QT_OK(gb_load(&g, &e));
    gb_kv_str(&g, "tokenizer.ggml.model", "llama"); gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4); gb_kv_f32s(&g, "tokenizer.ggml.scores", 3);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "bad.gguf: tokenizer.ggml.scores has 3 entries, tokenizer.ggml.tokens 4");
    gb_kv_str(&g, "tokenizer.ggml.model", "llama"); gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4); gb_kv_i32s(&g, "tokenizer.ggml.token_type", 5);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "tokenizer.ggml.token_type has 5 entries");
    gb_kv_str(&g, "tokenizer.ggml.model", "gpt2"); gb_kv_str(&g, "tokenizer.ggml.pre", "my-new-pre");
    gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4); gb_kv_strs(&g, "tokenizer.ggml.merges", merges_ok, 1);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_UNSUPPORTED);
    EXPECT_MSG(e, "tokenizer.ggml.pre 'my-new-pre' is not supported");
    EXPECT_MSG(e, "qwen2");
    gb_kv_str(&g, "tokenizer.ggml.model", "gpt2"); gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4); gb_kv_strs(&g, "tokenizer.ggml.merges", merges_bad, 1);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "tokenizer.ggml.merges[0] names 'x', which is not a token");
    gb_kv_str(&g, "tokenizer.ggml.model", "gpt2"); gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4); gb_kv_strs(&g, "tokenizer.ggml.merges", merges_nosp, 1);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "tokenizer.ggml.merges[0] 'ab' is not \"left right\"");
    gb_kv_str(&g, "tokenizer.ggml.model", "gpt2"); gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "no tokenizer.ggml.merges");
    gb_kv_str(&g, "tokenizer.ggml.model", "bert"); gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_UNSUPPORTED);
    EXPECT_MSG(e, "tokenizer.ggml.model 'bert' is not supported");
    gb_kv_str(&g, "tokenizer.ggml.model", "llama"); gb_kv_i32s(&g, "tokenizer.ggml.tokens", 4);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "tokenizer.ggml.tokens is not an array of strings");
    gb_kv_str(&g, "tokenizer.ggml.model", "llama"); gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4); gb_kv_u32(&g, "tokenizer.ggml.bos_token_id", 9);
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "bos 9");
    gb_kv_str(&g, "general.architecture", "llama");
    QT_ERR(gb_load(&g, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "no tokenizer.ggml.model");
}

static quarot_result json_load(const char* text, qx_err* e) {
    qx_vocab v;
    quarot_result r = qx_vocab_from_hf_json(&v, text, strlen(text), NULL, 0, "bad/tokenizer.json", e);
    if (r == QUAROT_OK) qx_vocab_free(&v);
    return r;
}

static void test_bad_json(void) {
    qx_err e;
    const char* pre = "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"use_regex\": true}, ";
    char buf[1024];
    snprintf(buf, sizeof buf, "{%s\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}}", pre);
    QT_OK(json_load(buf, &e));
    snprintf(buf, sizeof buf, "{%s\"model\": {\"type\": \"BPE\", \"vocab\": [\"a\"], \"merges\": []}}", pre);
    QT_ERR(json_load(buf, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "bad/tokenizer.json: model.vocab is missing or not an object");
    snprintf(buf, sizeof buf, "{%s\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}}}", pre);
    QT_ERR(json_load(buf, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "model.merges is missing or not an array");
    snprintf(buf, sizeof buf, "{%s\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"zero\"}, \"merges\": []}}", pre);
    QT_ERR(json_load(buf, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "model.vocab['a'] is not a token id");
    snprintf(buf, sizeof buf, "{%s\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 2000000000}, \"merges\": []}}", pre);
    QT_ERR(json_load(buf, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "model.vocab['b'] is not a token id in [0, 4000000)");
    snprintf(buf, sizeof buf, "{%s\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a c\"]}}", pre);
    QT_ERR(json_load(buf, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "model.merges[0] names 'c', which is not a token");
    snprintf(buf, sizeof buf, "{%s\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [7]}}", pre);
    QT_ERR(json_load(buf, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "model.merges[0] is neither");
    QT_ERR(json_load("{\"model\": {\"type\": \"Unigram\", \"vocab\": []}}", &e), QUAROT_ERR_UNSUPPORTED);
    EXPECT_MSG(e, "model.type 'Unigram' is not supported");
    QT_ERR(json_load("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"[a-z]+\"}, \"behavior\": \"Isolated\"}, "
                     "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", &e), QUAROT_ERR_UNSUPPORTED);
    EXPECT_MSG(e, "pre_tokenizer.pattern.Regex '[a-z]+' is not a supported");
    QT_ERR(json_load("{\"pre_tokenizer\": {\"type\": \"Whitespace\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", &e), QUAROT_ERR_UNSUPPORTED);
    EXPECT_MSG(e, "pre-tokenizer type 'Whitespace' is not supported");
    QT_ERR(json_load("{\"pre_tokenizer\": {\"type\": \"Metaspace\", \"split\": true}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}", &e), QUAROT_ERR_UNSUPPORTED);
    EXPECT_MSG(e, "Metaspace with \"split\": true is not supported");
    QT_ERR(json_load("[1, 2]", &e), QUAROT_ERR_PARSE);
    QT_ERR(json_load("{\"model\": ", &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "bad/tokenizer.json");
}

static void test_bad_text(void) {
    static const char* const toks[] = {"a", "b", "ab", "\xC3\xA9"};
    static const char* const merges_ok[] = {"a b"};
    gb g;
    qx_gguf_file f;
    qx_vocab v;
    qx_err e;
    gb h;
    int32_t* ids = NULL;
    int64_t n = 0;
    memset(&g, 0, sizeof g);
    memset(&h, 0, sizeof h);
    gb_kv_str(&g, "tokenizer.ggml.model", "gpt2"); gb_kv_str(&g, "tokenizer.ggml.pre", "gpt-2");
    gb_kv_strs(&g, "tokenizer.ggml.tokens", toks, 4); gb_kv_strs(&g, "tokenizer.ggml.merges", merges_ok, 1);
    qx_sb_put(&h.b, "GGUF", 4);
    qx_sb_le(&h.b, 3, 4); qx_sb_le(&h.b, 0, 8); qx_sb_le(&h.b, (uint64_t)g.n_kv, 8);
    qx_sb_put(&h.b, g.b.p, g.b.len);
    QT_OK(qx_gguf_parse(h.b.p, h.b.len, "t.gguf", &f, &e));
    QT_OK(qx_vocab_from_gguf(&v, &f, "t.gguf", &e));
    QT_OK(qx_vocab_encode(&v, "abab", 4, 0, 0, 0, &ids, &n, &e));
    QT_EQ_INT(n, 2);
    if (n == 2) { QT_EQ_INT(ids[0], 2); QT_EQ_INT(ids[1], 2); }
    free(ids);
    QT_ERR(qx_vocab_encode(&v, "ab\xC3(", 4, 0, 0, 0, &ids, &n, &e), QUAROT_ERR_PARSE);
    EXPECT_MSG(e, "byte offset 2: invalid UTF-8");
    QT_ERR(qx_vocab_encode(&v, "\xED\xA0\x80", 3, 0, 0, 0, &ids, &n, &e), QUAROT_ERR_PARSE);   /* a surrogate */
    QT_ERR(qx_vocab_encode(&v, "\xC0\xAF", 2, 0, 0, 0, &ids, &n, &e), QUAROT_ERR_PARSE);      /* overlong */
    qx_vocab_free(&v);
    qx_gguf_file_free(&f);
    qx_sb_free(&g.b);
    qx_sb_free(&h.b);
}

/* --tokens FILE: whitespace separated or a JSON array; ids checked against the vocabulary */
static void test_tokens_file(void) {
    const char* path = "build/tests/tok_vocab_ids.txt";
    int32_t* ids = NULL;
    int64_t n = 0;
    qx_err e;
    FILE* f;
    static const struct { const char* text; int ok; int64_t n; } cases[] = {
        {"1 2  3\n4\t5\n", 1, 5}, {"[1, 2, [3, 4]]", 1, 4}, {"1 2 x", 0, 0}, {"1 2 600", 0, 0}, {"[1, -2]", 0, 0},
        {"[1, 2.5]", 0, 0}, {"", 0, 0}, {"{\"a\": 1}", 0, 0},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        f = fopen(path, "wb");
        if (!f) { QT_CHECK(0); return; }
        fputs(cases[c].text, f);
        fclose(f);
        if (cases[c].ok) {
            QT_OK(qx_tokens_read(path, 512, &ids, &n, &e));
            QT_EQ_INT(n, cases[c].n);
            if (n >= 4) QT_EQ_INT(ids[3], 4);
            free(ids);
        } else {
            QT_CHECKF(qx_tokens_read(path, 512, &ids, &n, &e) != QUAROT_OK, "'%s' accepted", cases[c].text);
            QT_CHECKF(strstr(e.msg, path) != NULL, "message '%s' does not name the file", e.msg);
        }
    }
    remove(path);
}

/* pre-tokenizer names: the listed ones load, others do not */
static void test_pre_names(void) {
    static const char* const names[] = {"default", "gpt-2", "llama3", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder",
                                        "falcon", "mpt", "starcoder", "refact", "gpt-neox"};
    qx_pre p;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        QT_CHECKF(qx_pre_from_name(names[i], strlen(names[i]), &p) && p.n > 0, "%s", names[i]);
        QT_CHECKF(strstr(qx_pre_names(), names[i]) != NULL || !names[i][0], "%s not listed", names[i]);
    }
    QT_CHECK(!qx_pre_from_name("tekken", 6, &p));
    /* every regex text reads back as itself */
    for (int r = 0; r < QX_RE_COUNT; ++r) QT_EQ_INT(qx_pre_regex_from_text(qx_pre_regex_text(r), strlen(qx_pre_regex_text(r))), r);
}

/* a few splits against what the regexes give (worked out by hand) */
static void test_pre_split(void) {
    static const struct { const char* name; const char* text; const char* want; } cases[] = {
        {"gpt-2", "Hello world's  3.14!!", "Hello| world|'s| | 3|.|14|!!"},
        {"llama3", "I've 12345 \n\n  x", "I|'ve| |123|45| \n\n| | x"},
        {"qwen2", "ab12", "ab|1|2"},
        {"deepseek-coder", "a1\nb", "a|1|\n|b"},
        {"default", "a=b 1234", "a|=|b| |123|4"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        qx_pre p;
        uint32_t cp[64];
        size_t n = 0, ends[64], scratch[64], k, nw, start = 0;
        char got[256];
        size_t gl = 0;
        const unsigned char* s = (const unsigned char*)cases[c].text;
        size_t len = strlen(cases[c].text), i = 0;
        QT_CHECK(qx_pre_from_name(cases[c].name, strlen(cases[c].name), &p));
        while (i < len) i += (size_t)qx_utf8_decode(s + i, len - i, &cp[n++]);
        nw = qx_pre_split(&p, cp, n, ends, scratch);
        for (k = 0; k < nw; ++k) {
            if (k) got[gl++] = '|';
            for (size_t j = start; j < ends[k]; ++j) got[gl++] = (char)cp[j];
            start = ends[k];
        }
        got[gl] = 0;
        QT_CHECKF(strcmp(got, cases[c].want) == 0, "%s: '%s' -> '%s', expected '%s'", cases[c].name, cases[c].text, got, cases[c].want);
    }
}

int main(void) {
    QT_RUN(test_bad_gguf);
    QT_RUN(test_bad_json);
    QT_RUN(test_bad_text);
    QT_RUN(test_tokens_file);
    QT_RUN(test_pre_names);
    QT_RUN(test_pre_split);
    QT_RUN(test_shared_sets);
    QT_RUN(test_tokenizer_json);
    QT_RUN(test_decode_round_trip);
    return qt_finish("test_tok_vocab");
}
