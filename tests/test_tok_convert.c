/* Tokenizers carried through format conversions (qx_tok_write.h, qx_convert.h): a GGUF
   tokenizer.ggml.* vocabulary written as tokenizer.json, a tokenizer.json vocabulary written as
   tokenizer.ggml.* pairs, a llama2.c tokenizer.bin written as tokenizer.ggml.* pairs, and
   `quarot rotate` doing both on whole models
   (safetensors directory with tokenizer.json -> GGUF -> safetensors directory).
   Truth: llama.cpp's test vectors in ../shared/tokenizers (five vocab-only GGUF files with test
   strings and expected ids): after every conversion EVERY string must encode to exactly the
   expected ids (no tolerance). A tokenizer that cannot be converted (a pre-tokenizer regex list no
   llama.cpp `pre` name has) is a warning on stderr and in the summary, and the model is still
   written. Skips cleanly without ../shared. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "tok_util.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"
#include "support/qx_str.h"
#include "tokenizer/qx_tok_load.h"
#include "tokenizer/qx_tok_write.h"
#include <sys/stat.h>

/* a vocabulary as a tokenizer, checked against the set (v is taken over) */
static void check_vocab(qx_vocab* v, const tset* t, const char* label) {
    qx_tokenizer tk;
    qx_err e;
    if (qx_tokenizer_from_vocab(&tk, v, &e) != QUAROT_OK) { QT_CHECKF(0, "%s: %s", label, e.msg); return; }
    {
        int bad = check_set(&tk, t, label);
        QT_CHECKF(bad == 0, "%s: %d of %d strings differ", label, bad, t->n);
    }
    qx_tokenizer_free(&tk);
}

/* a GGUF image holding only the pairs of a "gguf.kv" blob: magic, version 3, 0 tensors, the blob
   (whose leading count is the header's n_kv) */
static quarot_result vocab_from_kv(qx_vocab* v, const qx_sb* kv, qx_sb* img, qx_err* e) {
    static const char head[16] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    qx_gguf_file f;
    quarot_result r;
    img->len = 0;
    qx_sb_put(img, head, 16);
    qx_sb_put(img, kv->p, kv->len);
    r = qx_gguf_parse(img->p, img->len, "kv.gguf", &f, e);
    if (r != QUAROT_OK) return r;
    r = qx_vocab_from_gguf(v, &f, "kv.gguf", e);
    qx_gguf_file_free(&f);
    return r;
}

static quarot_result load_gguf_vocab(const char* path, qx_vocab* v, qx_err* e) {
    qx_map m;
    qx_gguf_file f;
    quarot_result r = qx_map_file(path, &m, e);
    if (r != QUAROT_OK) return r;
    r = qx_gguf_parse(m.addr, m.len, path, &f, e);
    if (r == QUAROT_OK) {
        r = qx_vocab_from_gguf(v, &f, path, e);
        qx_gguf_file_free(&f);
    }
    qx_unmap(&m);
    return r;
}

/* ---- a llama2.c tokenizer.bin -> tokenizer.ggml.* (qx_tokenizer_write_gguf_kv) ----------------- */

/* The tokenizer.bin layout: u32 max_token_length, then per token f32 score, u32 length, bytes. */
static void l2c_piece(qx_sb* b, float score, const char* s) {
    uint32_t u;
    memcpy(&u, &score, 4);
    qx_sb_le(b, u, 4);
    qx_sb_le(b, strlen(s), 4);
    qx_sb_puts(b, s);
}

/* Element i of a STRING array pair equals want. */
static int arr_str_is(const qx_gguf_kv* kv, uint64_t i, const char* want) {
    const unsigned char* p = kv->val;
    uint64_t k, n = 0;
    for (k = 0; k <= i; ++k) {
        n = qx_str_le64(p);
        if (k < i) p += 8 + n;
    }
    return n == strlen(want) && memcmp(p + 8, want, (size_t)n) == 0;
}

/* ids 0-2 get their SentencePiece names whatever the file spells, ' ' becomes U+2581, a byte token
   is <0xXX> with two upper-case hex digits; `pre` adds tokenizer.ggml.pre (and one pair). */
static void test_llama2c_writer(void) {
    static const char* const pieces[] = {"UNK", "\n<s>\n", "\n</s>\n", "<0x41>", "<0xZZ>", " a b", "x"};
    qx_sb bin, kv, img;
    qx_tokenizer t;
    qx_err e;
    int pass, i;
    memset(&bin, 0, sizeof bin);
    qx_sb_le(&bin, 16, 4);
    for (i = 0; i < 7; ++i) l2c_piece(&bin, -(float)i, pieces[i]);
    QT_OK(qx_tokenizer_load_memory(&t, bin.p, bin.len, 0, "mem", &e));
    for (pass = 0; pass < 2; ++pass) {
        static const char head[16] = {'G', 'G', 'U', 'F', 3, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
        const char* pre = pass ? "default" : NULL;
        qx_gguf_file f;
        const qx_gguf_kv *tk, *ty, *pr;
        uint64_t len = 0;
        memset(&kv, 0, sizeof kv);
        memset(&img, 0, sizeof img);
        qx_sb_le(&kv, 0, 8);
        QT_OK(qx_tokenizer_write_gguf_kv(&t, pre, &kv, "mem", &e));
        QT_CHECK(qx_str_le64((const unsigned char*)kv.p) == (pass ? 10u : 9u));
        qx_sb_put(&img, head, 16);
        qx_sb_put(&img, kv.p, kv.len);
        QT_OK(qx_gguf_parse(img.p, img.len, "kv.gguf", &f, &e));
        tk = qx_gguf_find(&f, "tokenizer.ggml.tokens");
        ty = qx_gguf_find(&f, "tokenizer.ggml.token_type");
        pr = qx_gguf_find(&f, "tokenizer.ggml.pre");
        QT_CHECK(tk && tk->arr_count == 7 && ty && ty->arr_count == 7);
        if (tk && ty && tk->arr_count == 7 && ty->arr_count == 7) {
            static const uint32_t types[] = {2, 3, 3, 6, 1, 1, 1};
            QT_CHECK(arr_str_is(tk, 0, "<unk>") && arr_str_is(tk, 1, "<s>") && arr_str_is(tk, 2, "</s>"));
            QT_CHECK(arr_str_is(tk, 3, "<0x41>") && arr_str_is(tk, 4, "<0xZZ>"));
            QT_CHECK(arr_str_is(tk, 5, "\xe2\x96\x81" "a" "\xe2\x96\x81" "b") && arr_str_is(tk, 6, "x"));
            for (i = 0; i < 7; ++i)
                QT_CHECKF(qx_str_le32(ty->val + 4 * i) == types[i], "token %d: type %u", i, (unsigned)qx_str_le32(ty->val + 4 * i));
        }
        if (pass) QT_CHECK(pr && qx_gguf_kv_string(pr, &len) && len == 7 && memcmp(qx_gguf_kv_string(pr, NULL), "default", 7) == 0);
        else QT_CHECK(!pr);
        qx_gguf_file_free(&f);
        qx_sb_free(&img);
        qx_sb_free(&kv);
    }
    qx_tokenizer_free(&t);
    qx_sb_free(&bin);
}

/* ---- the writers: GGUF -> tokenizer.json -> tokenizer.ggml.*, and GGUF -> tokenizer.ggml.* ------ */

static void test_writers(void) {
    int have = 0;
    for (int s = 0; s < N_SETS; ++s) {
        tset t;
        char path[4096], label[96];
        qx_vocab v0, vj, vg;
        qx_sb json, cfg, kv, img;
        qx_err e;
        quarot_result r;
        if (qt_quick() && s != 0) continue;   /* QT_QUICK: SentencePiece here; test_cli_round_trip does both kinds */
        if (!load_set(k_sets[s], &t, path, sizeof path)) { free_set(&t); continue; }
        have = 1;
        memset(&json, 0, sizeof json); memset(&cfg, 0, sizeof cfg); memset(&kv, 0, sizeof kv); memset(&img, 0, sizeof img);
        QT_OK(load_gguf_vocab(path, &v0, &e));
        QT_CHECK(qx_vocab_gguf_unfit(&v0) == NULL);
        /* GGUF -> tokenizer.json (+ config) -> read back */
        QT_OK(qx_vocab_write_hf_json(&v0, &json, &cfg, path, &e));
        r = qx_vocab_from_hf_json(&vj, json.p, json.len, cfg.p, cfg.len, "tokenizer.json", &e);
        QT_CHECKF(r == QUAROT_OK, "%s: %s", k_sets[s], e.msg);
        if (r == QUAROT_OK) {
            QT_EQ_INT(vj.kind, v0.kind);
            QT_EQ_INT(vj.bos, v0.bos);
            QT_EQ_INT(vj.eos, v0.eos);
            QT_EQ_INT(vj.add_bos, v0.add_bos);
            /* tokenizer.json -> tokenizer.ggml.* -> read back (SentencePiece: merges + derived scores) */
            qx_sb_put(&kv, "\0\0\0\0\0\0\0\0", 8);
            QT_CHECKF(qx_vocab_gguf_unfit(&vj) == NULL, "%s: %s", k_sets[s], qx_vocab_gguf_unfit(&vj));
            r = qx_vocab_write_gguf_kv(&vj, &kv, "tokenizer.json", &e);
            QT_CHECKF(r == QUAROT_OK, "%s: %s", k_sets[s], e.msg);
            if (r == QUAROT_OK && vocab_from_kv(&vg, &kv, &img, &e) == QUAROT_OK) {
                QT_EQ_INT(vg.n, vj.n);
                QT_EQ_INT(vg.bos, vj.bos);
                snprintf(label, sizeof label, "%s (GGUF -> tokenizer.json -> GGUF)", k_sets[s]);
                check_vocab(&vg, &t, label);
            } else if (r == QUAROT_OK) {
                QT_CHECKF(0, "%s: %s", k_sets[s], e.msg);
            }
            snprintf(label, sizeof label, "%s (GGUF -> tokenizer.json)", k_sets[s]);
            check_vocab(&vj, &t, label);
        }
        /* GGUF -> tokenizer.ggml.* (the writer alone) */
        kv.len = 0;
        qx_sb_put(&kv, "\0\0\0\0\0\0\0\0", 8);
        QT_OK(qx_vocab_write_gguf_kv(&v0, &kv, path, &e));
        if (vocab_from_kv(&vg, &kv, &img, &e) == QUAROT_OK) {
            snprintf(label, sizeof label, "%s (GGUF -> GGUF pairs)", k_sets[s]);
            check_vocab(&vg, &t, label);
        } else {
            QT_CHECKF(0, "%s: %s", k_sets[s], e.msg);
        }
        qx_vocab_free(&v0);
        qx_sb_free(&json); qx_sb_free(&cfg); qx_sb_free(&kv); qx_sb_free(&img);
        free_set(&t);
    }
    if (!have) QT_SKIP("../shared/tokenizers absent");
}

/* ---- quarot rotate: safetensors dir (tokenizer.json) -> GGUF -> safetensors dir ------------------ */

/* a small synthetic llama saved as a Hugging Face directory, vocabulary `vocab` */
static int make_model_dir(const char* dir, int64_t vocab, qx_err* e) {
    qx_synth_desc d;
    qx_store s;
    qx_st_save_opts so;
    quarot_result r;
    memset(&d, 0, sizeof d);
    d.arch = "llama";
    d.seed = 11;
    d.vocab = vocab;
    d.hidden = 32;
    d.intermediate = 96;
    d.n_layers = 1;
    d.n_heads = 2;
    d.n_kv_heads = 1;
    d.head_dim = 16;
    d.max_seq = 64;
    if (qx_synth_model(&s, &d, e) != QUAROT_OK) return 0;
    memset(&so, 0, sizeof so);
    r = qx_st_save(&s, dir, &so, e);
    qx_store_free(&s);
    return r == QUAROT_OK;
}

static int write_sb(const char* dir, const char* name, const qx_sb* b) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return qt_write_file(p, b->p, b->len);
}

static void test_cli_round_trip(void) {
    static const int sets[2] = {0, 2};   /* llama-spm (SentencePiece), gpt-2 (byte-level BPE) */
    int have = 0;
    for (int k = 0; k < 2; ++k) {
        tset t;
        char path[4096], dir[600], gg[600], hf[600], label[96];
        qx_vocab v0;
        qx_sb json, cfg;
        qx_tokenizer tk;
        qx_err e;
        int64_t pad = k == 0 ? 7 : 0;   /* the model's vocabulary larger than the tokenizer's: [PAD<id>] */
        if (!load_set(k_sets[sets[k]], &t, path, sizeof path)) { free_set(&t); continue; }
        have = 1;
        snprintf(dir, sizeof dir, "%s/%s_dir", g_tmp, k_sets[sets[k]]);
        snprintf(gg, sizeof gg, "%s/%s.gguf", g_tmp, k_sets[sets[k]]);
        snprintf(hf, sizeof hf, "%s/%s_hf", g_tmp, k_sets[sets[k]]);
        memset(&json, 0, sizeof json);
        memset(&cfg, 0, sizeof cfg);
        QT_OK(load_gguf_vocab(path, &v0, &e));
        QT_CHECKF(make_model_dir(dir, v0.n + pad, &e), "%s", e.msg);
        QT_OK(qx_vocab_write_hf_json(&v0, &json, &cfg, path, &e));
        QT_CHECK(write_sb(dir, "tokenizer.json", &json) && write_sb(dir, "tokenizer_config.json", &cfg));
        /* the original: the directory's tokenizer.json */
        QT_OK(qx_tokenizer_load_any(&tk, dir, 0, &e));
        snprintf(label, sizeof label, "%s tokenizer.json", k_sets[sets[k]]);
        QT_EQ_INT(check_set(&tk, &t, label), 0);
        qx_tokenizer_free(&tk);
        /* -> GGUF: tokenizer.ggml.* in the model file */
        QT_EQ_INT(CLI("rotate %s %s --quiet", dir, gg), 0);
        QT_CHECKF(strstr(g_out, "tokenizer.json -> tokenizer.ggml.*") != NULL, "%s", g_out);
        QT_CHECK(strstr(g_err, "warning") == NULL);
        memset(&tk, 0, sizeof tk);
        if (qx_tokenizer_load_any(&tk, gg, 0, &e) == QUAROT_OK) {
            QT_EQ_INT(tk.vocab_size, (int)(v0.n + pad));
            snprintf(label, sizeof label, "%s -> GGUF", k_sets[sets[k]]);
            QT_EQ_INT(check_set(&tk, &t, label), 0);
        } else {
            QT_CHECKF(0, "%s", e.msg);
        }
        qx_tokenizer_free(&tk);
        /* -> safetensors directory: tokenizer.json + tokenizer_config.json beside the weights */
        QT_EQ_INT(CLI("rotate %s %s --format safetensors --quiet", gg, hf), 0);
        QT_CHECKF(strstr(g_out, "-> tokenizer.json + tokenizer_config.json") != NULL, "%s", g_out);
        QT_CHECK(strstr(g_out, "copied 2 Hugging Face files") != NULL);
        memset(&tk, 0, sizeof tk);
        if (qx_tokenizer_load_any(&tk, hf, 0, &e) == QUAROT_OK) {
            snprintf(label, sizeof label, "%s -> GGUF -> tokenizer.json", k_sets[sets[k]]);
            QT_EQ_INT(check_set(&tk, &t, label), 0);
            QT_EQ_INT(tk.bos_id, v0.bos);
            QT_EQ_INT(tk.add_bos, v0.add_bos && v0.bos >= 0);
        } else {
            QT_CHECKF(0, "%s", e.msg);
        }
        qx_tokenizer_free(&tk);
        {   /* no scratch directory left beside OUT */
            char cmd[1400];
            snprintf(cmd, sizeof cmd, "ls -a %s | grep -q quarot-tok", g_tmp);
            QT_CHECK(system(cmd) != 0);
        }
        if (k == 1) {   /* a byte-level BPE whose regex list no llama.cpp `pre` has: warned, not converted */
            char gb[600];
            qx_gguf_file f;
            size_t n = 0;
            unsigned char* img;
            v0.pre.n = 1;
            v0.pre.re[0] = QX_RE_DIGITS3;
            QT_CHECK(qx_vocab_gguf_unfit(&v0) != NULL);
            json.len = 0;
            QT_OK(qx_vocab_write_hf_json(&v0, &json, NULL, path, &e));
            QT_CHECK(write_sb(dir, "tokenizer.json", &json));
            snprintf(gb, sizeof gb, "%s/unfit.gguf", g_tmp);
            QT_EQ_INT(CLI("rotate %s %s --quiet", dir, gb), 0);
            QT_CHECKF(strstr(g_err, "warning: tokenizer not converted") != NULL && strstr(g_err, "pre") != NULL, "%s", g_err);
            QT_CHECKF(strstr(g_out, "WARNING tokenizer: not converted") != NULL, "%s", g_out);
            img = read_all(gb, &n);
            if (img && qx_gguf_parse(img, n, gb, &f, &e) == QUAROT_OK) {
                QT_CHECK(!qx_gguf_has_tokenizer(&f));
                qx_gguf_file_free(&f);
            } else {
                QT_CHECKF(0, "%s: not a GGUF file", gb);
            }
            free(img);
        }
        qx_vocab_free(&v0);
        qx_sb_free(&json);
        qx_sb_free(&cfg);
        free_set(&t);
    }
    if (!have) QT_SKIP("../shared/tokenizers absent");
}

int main(int argc, char** argv) {
    const char* slash = strrchr(argv[0], '/');
    size_t dl = slash ? (size_t)(slash - argv[0]) : 0;
    (void)argc;
    snprintf(g_bin, sizeof g_bin, "%.*s%squarot", (int)dl, argv[0], dl ? "/../" : "../");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qx_tok_convert_XXXXXX");
    if (!mkdtemp(g_tmp) || !qx_path_exists(g_bin)) {
        printf("  cannot set up (%s, %s)\n", g_tmp, g_bin);
        printf("test_tok_convert: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    QT_RUN(test_llama2c_writer);
    QT_RUN(test_writers);
    QT_RUN(test_cli_round_trip);
    {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
        if (system(cmd) != 0) printf("  could not remove %s\n", g_tmp);
    }
    return qt_finish("test_tok_convert");
}
