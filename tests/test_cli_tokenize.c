/* `quarot tokenize` and the tokenizer wiring of the commands:
   - tokenize prints llama.cpp's ids for the shared GGUF vocabularies (ids only and "id -> 'piece'");
   - a Hugging Face directory (a synthetic model written here + a small byte-level BPE
     tokenizer.json) gets its tokenizer.json without --tokenizer, in tokenize, eval and calibrate;
   - --tokens FILE (ids from `quarot tokenize --no-bos --ids-only`) gives eval the same table and
     calibrate the same context file as the text (synthetic model always; stories260K with
     ../shared);
   - bad input: ids outside the vocabulary, invalid UTF-8, a missing tokenizer: one error line. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "formats/qx_json.h"
#include "formats/qx_safetensors.h"
#include "formats/qx_gguf.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[512];   /* the synthetic Hugging Face model */
static char g_gguf[512];  /* the same model as GGUF, its tokenizer in tokenizer.ggml.* */
static int g_have_dir, g_have_gguf;

/* GPT-2's byte alphabet: the codepoint byte b stands for */
static unsigned byte_cp(int b) {
    int k, n = 0;
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF)) return (unsigned)b;
    for (k = 0; k < b; ++k)
        if (!((k >= 0x21 && k <= 0x7E) || (k >= 0xA1 && k <= 0xAC) || (k >= 0xAE && k <= 0xFF))) ++n;
    return 256u + (unsigned)n;
}

static void put_cp(qx_sb* b, unsigned cp) {
    char u[4];
    if (cp < 0x80) { u[0] = (char)cp; qx_sb_json_string(b, u, 1); }
    else { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); qx_sb_json_string(b, u, 2); }
}

/* byte-level BPE: ids 0..255 the bytes, 256.. the merges' results, 262 <|endoftext|> */
static int write_tokenizer_json(const char* path) {
    static const char* const merges[] = {"t h", "th e", "\xC4\xA0 t", "\xC4\xA0 a", "i n", "e r"};
    static const char* const results[] = {"th", "the", "\xC4\xA0t", "\xC4\xA0\x61", "in", "er"};
    qx_sb b;
    int i, ok;
    memset(&b, 0, sizeof b);
    qx_sb_puts(&b, "{\"added_tokens\": [{\"id\": 262, \"content\": \"<|endoftext|>\", \"special\": true}],\n"
                   "\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true},\n"
                   "\"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (i = 0; i < 256; ++i) {
        if (i) qx_sb_puts(&b, ", ");
        put_cp(&b, byte_cp(i));
        qx_sb_printf(&b, ": %d", i);
    }
    for (i = 0; i < 6; ++i) {
        qx_sb_puts(&b, ", ");
        qx_sb_json_string(&b, results[i], strlen(results[i]));
        qx_sb_printf(&b, ": %d", 256 + i);
    }
    qx_sb_puts(&b, ", \"<|endoftext|>\": 262}, \"merges\": [");
    for (i = 0; i < 6; ++i) {
        if (i) qx_sb_puts(&b, ", ");
        qx_sb_json_string(&b, merges[i], strlen(merges[i]));
    }
    qx_sb_puts(&b, "]}}\n");
    ok = !b.failed && qt_write_file(path, b.p, b.len);
    qx_sb_free(&b);
    return ok;
}

/* the tokenizer.json vocabulary above as tokenizer.ggml.* pairs appended to blob (count bumped) */
static void add_gguf_tokenizer(qx_sb* b) {
    static const char* const merges[] = {"t h", "th e", "\xC4\xA0 t", "\xC4\xA0 a", "i n", "e r"};
    static const char* const results[] = {"th", "the", "\xC4\xA0t", "\xC4\xA0\x61", "in", "er"};
    int i;
    qx_gguf_kv_str(b, "tokenizer.ggml.model", "gpt2", 4);
    qx_gguf_kv_str(b, "tokenizer.ggml.pre", "gpt-2", 5);
    qx_gguf_kv_arr_begin(b, "tokenizer.ggml.tokens", QX_GGUF_STRING, 263);
    for (i = 0; i < 256; ++i) {
        unsigned cp = byte_cp(i);
        char u[3] = {0, 0, 0};
        if (cp < 0x80) u[0] = (char)cp;
        else { u[0] = (char)(0xC0 | (cp >> 6)); u[1] = (char)(0x80 | (cp & 0x3F)); }
        qx_gguf_put_str(b, u, strlen(u));
    }
    for (i = 0; i < 6; ++i) qx_gguf_put_str(b, results[i], strlen(results[i]));
    qx_gguf_put_str(b, "<|endoftext|>", 13);
    qx_gguf_kv_arr_begin(b, "tokenizer.ggml.token_type", QX_GGUF_I32, 263);
    for (i = 0; i < 263; ++i) qx_sb_le(b, i == 262 ? 3u : 1u, 4);
    qx_gguf_kv_arr_begin(b, "tokenizer.ggml.merges", QX_GGUF_STRING, 6);
    for (i = 0; i < 6; ++i) qx_gguf_put_str(b, merges[i], strlen(merges[i]));
    (void)qx_gguf_kv_count_add(b, 5);
}

static int setup(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    qx_st_save_opts so;
    char p[1024];
    int ok;
    cu_synth_desc(&d);
    if (qx_synth_model(&s, &d, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    snprintf(g_dir, sizeof g_dir, "%s/hf", g_tmp);
    memset(&so, 0, sizeof so);
    ok = qx_st_save(&s, g_dir, &so, &e) == QUAROT_OK;
    if (!ok) printf("    save: %s\n", e.msg);
    {
        qx_sb kv;
        qx_gguf_save_opts go;
        memset(&kv, 0, sizeof kv);
        memset(&go, 0, sizeof go);
        snprintf(g_gguf, sizeof g_gguf, "%s/model.gguf", g_tmp);
        g_have_gguf = qx_gguf_kv_from_config(&s, &kv, &e) == QUAROT_OK;
        if (g_have_gguf) {
            add_gguf_tokenizer(&kv);
            g_have_gguf = !kv.failed && qx_store_set_blob(&s, "gguf.kv", kv.p, kv.len) == QUAROT_OK &&
                          qx_gguf_save(&s, g_gguf, &go, &e) == QUAROT_OK;
        }
        if (!g_have_gguf) printf("    gguf: %s\n", e.msg);
        qx_sb_free(&kv);
    }
    qx_store_free(&s);
    snprintf(p, sizeof p, "%s/tokenizer.json", g_dir);
    ok = ok && write_tokenizer_json(p);
    {
        /* a text of the vocabulary's letters, long enough for a few windows */
        qx_sb t;
        int i;
        memset(&t, 0, sizeof t);
        for (i = 0; i < 60; ++i) qx_sb_puts(&t, i % 3 ? "the thin otter ran in the rain. " : "a thin thread there.\n");
        ok = ok && qt_write_file(tmp_path("text.txt"), t.p, t.len);
        qx_sb_free(&t);
    }
    return ok;
}

static void test_help(void) {
    QT_EQ_INT(CLI("tokenize --help"), 0);
    QT_CHECK(strstr(g_out, "--ids-only") && strstr(g_out, "qwen2") && strstr(g_out, "deepseek-coder"));
    QT_EQ_INT(CLI("--help"), 0);
    QT_CHECK(strstr(g_out, "tokenize"));
    QT_EQ_INT(CLI("tokenize"), 1);
    QT_EQ_INT(CLI("tokenize --prompt hi"), 1);
    QT_CHECK(strstr(g_err, "quarot tokenize: no MODEL or --tokenizer"));
}

static void test_tokenize_shared(void) {
    const char* gpt2 = qt_shared_path("tokenizers/ggml-vocab-gpt-2.gguf");
    char g[4096];
    if (!gpt2) { QT_SKIP("../shared/tokenizers absent"); return; }
    snprintf(g, sizeof g, "%s", gpt2);
    QT_EQ_INT(CLI("tokenize '%s' --prompt 'Hello world' --ids-only -q", g), 0);
    QT_CHECKF(strcmp(g_out, "[15496, 995]\n") == 0, "got '%s'", g_out);
    /* special tokens are parsed by default (llama-tokenize), not with --no-parse-special */
    QT_EQ_INT(CLI("tokenize --tokenizer '%s' --prompt 'Hi<|endoftext|>' --ids-only -q", g), 0);
    QT_CHECKF(strcmp(g_out, "[17250, 50256]\n") == 0, "got '%s'", g_out);
    QT_EQ_INT(CLI("tokenize --tokenizer '%s' --prompt 'Hi<|endoftext|>' --ids-only -q --no-parse-special", g), 0);
    QT_CHECKF(strstr(g_out, "50256") == NULL, "got '%s'", g_out);
    if (qt_shared_path("tokenizers/ggml-vocab-llama-spm.gguf")) {
        snprintf(g, sizeof g, "%s", qt_shared_path("tokenizers/ggml-vocab-llama-spm.gguf"));
        QT_EQ_INT(CLI("tokenize '%s' --prompt 'Hello world'", g), 0);
        QT_CHECKF(strcmp(g_out, "     1 -> '<s>'\n 15043 -> 'Hello'\n  3186 -> ' world'\n") == 0, "got '%s'", g_out);
        QT_CHECK(strstr(g_err, "SentencePiece BPE, 32000 tokens; 3 ids"));
        QT_EQ_INT(CLI("tokenize '%s' --prompt 'Hello world' --no-bos --ids-only", g), 0);
        QT_CHECKF(strcmp(g_out, "[15043, 3186]\n") == 0, "got '%s'", g_out);
    }
}

static void test_hf_dir(void) {
    char ids[600], a[1 << 14];
    if (!g_have_dir) { QT_CHECK(0); return; }
    /* "the thin": "the", then " thin" -> Ġ + th + in */
    QT_EQ_INT(CLI("tokenize '%s' --prompt 'the thin' --ids-only", g_dir), 0);
    QT_CHECKF(strcmp(g_out, "[257, 32, 256, 260]\n") == 0, "got '%s' (%s)", g_out, g_err);
    QT_CHECK(strstr(g_err, "tokenizer.json: byte-level BPE (pre tokenizer.json)"));
    QT_EQ_INT(CLI("tokenize '%s' --prompt 'the thin'", g_dir), 0);
    QT_CHECKF(strcmp(g_out, "   257 -> 'the'\n    32 -> ' '\n   256 -> 'th'\n   260 -> 'in'\n") == 0, "got '%s'", g_out);
    /* eval finds tokenizer.json by itself; --tokens gives the same table */
    snprintf(ids, sizeof ids, "%s", tmp_path("ids.json"));
    QT_EQ_INT(CLI("tokenize '%s' --text '%s' --no-bos --ids-only -q", g_dir, tmp_path("text.txt")), 0);
    QT_CHECK(g_out[0] == '[' && write_str(ids, g_out));
    QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 32 --windows 3 -q", g_dir, tmp_path("text.txt")), 0);
    QT_CHECKF(strstr(g_out, "tokenizer  ") && strstr(g_out, "/hf/tokenizer.json"), "%s%s", g_out, g_err);
    snprintf(a, sizeof a, "%s", strstr(g_out, "perplexity") ? strstr(g_out, "perplexity") : "none");
    QT_EQ_INT(CLI("eval '%s' --tokens '%s' --seq-len 32 --windows 3 -q", g_dir, ids), 0);
    QT_CHECKF(strstr(g_out, "perplexity") && strcmp(strstr(g_out, "perplexity"), a) == 0, "tables differ:\n%s\n---\n%s", a, g_out);
    QT_CHECK(strstr(g_out, "tokens     "));
    /* calibrate: the same context from the text and from its ids */
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' --seq-len 32 --windows 3 --steps 2 -q -o '%s'", g_dir, tmp_path("text.txt"), tmp_path("a.ctx")), 0);
    QT_EQ_INT(CLI("calibrate '%s' --tokens '%s' --seq-len 32 --windows 3 --steps 2 -q -o '%s'", g_dir, ids, tmp_path("b.ctx")), 0);
    {
        size_t na = 0, nb = 0;
        unsigned char* pa = read_all(tmp_path("a.ctx"), &na);
        unsigned char* pb = read_all(tmp_path("b.ctx"), &nb);
        QT_CHECK(pa && pb && na == nb && na > 0 && memcmp(pa, pb, na) == 0);
        free(pa);
        free(pb);
    }
}

/* a GGUF model carries its tokenizer: tokenize and eval use it without --tokenizer */
static void test_gguf_model(void) {
    char ids[600], a[1 << 14];
    if (!g_have_gguf) { QT_CHECK(0); return; }
    QT_EQ_INT(CLI("tokenize '%s' --prompt 'the thin<|endoftext|>' --ids-only", g_gguf), 0);
    QT_CHECKF(strcmp(g_out, "[257, 32, 256, 260, 262]\n") == 0, "got '%s' (%s)", g_out, g_err);
    QT_CHECK(strstr(g_err, "model.gguf: byte-level BPE (pre gpt-2), 263 tokens"));
    snprintf(ids, sizeof ids, "%s", tmp_path("gids.json"));
    QT_EQ_INT(CLI("tokenize '%s' --text '%s' --no-bos --ids-only -q", g_gguf, tmp_path("text.txt")), 0);
    QT_CHECK(g_out[0] == '[' && write_str(ids, g_out));
    QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 32 --windows 3 -q", g_gguf, tmp_path("text.txt")), 0);
    QT_CHECKF(strstr(g_out, "tokenizer  ") && strstr(g_out, "/model.gguf\n"), "%s%s", g_out, g_err);
    snprintf(a, sizeof a, "%s", strstr(g_out, "perplexity") ? strstr(g_out, "perplexity") : "none");
    QT_EQ_INT(CLI("eval '%s' --tokens '%s' --seq-len 32 --windows 3 -q", g_gguf, ids), 0);
    QT_CHECKF(strstr(g_out, "perplexity") && strcmp(strstr(g_out, "perplexity"), a) == 0, "tables differ:\n%s\n---\n%s", a, g_out);
}

static void test_tokens_stories(void) {
    char model[4096], text[4096], ids[600], a[1 << 14];
    if (!qt_shared_path("models/stories260K/stories260K.bin")) { QT_SKIP("../shared/models/stories260K absent"); return; }
    snprintf(model, sizeof model, "%s", qt_shared_path("models/stories260K/stories260K.bin"));
    if (!qt_shared_path("data/tinystories_eval.txt")) { QT_SKIP("../shared/data absent"); return; }
    {
        /* its first 8 KB (the ids must fit the test's 64 KB capture of stdout) */
        size_t n = 0;
        unsigned char* all = read_all(qt_shared_path("data/tinystories_eval.txt"), &n);
        QT_CHECK(all && n > 8192);
        snprintf(text, sizeof text, "%s", tmp_path("stories.txt"));
        QT_CHECK(all && qt_write_file(text, all, 8192));
        free(all);
    }
    snprintf(ids, sizeof ids, "%s", tmp_path("stories_ids.txt"));
    QT_EQ_INT(CLI("tokenize '%s' --text '%s' --no-bos -q", model, text), 0);   /* id -> 'piece' lines */
    QT_CHECKF(strncmp(g_out, "   301 -> ' S'\n   427 -> 'p'\n", 28) == 0, "%.60s", g_out);
    QT_EQ_INT(CLI("tokenize '%s' --text '%s' --no-bos --ids-only -q", model, text), 0);
    QT_CHECK(g_out[0] == '[' && write_str(ids, g_out));
    QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 64 --windows 4 -q", model, text), 0);
    snprintf(a, sizeof a, "%s", strstr(g_out, "perplexity") ? strstr(g_out, "perplexity") : "none");
    QT_EQ_INT(CLI("eval '%s' --tokens '%s' --seq-len 64 --windows 4 -q", model, ids), 0);
    QT_CHECKF(strstr(g_out, "perplexity") && strcmp(strstr(g_out, "perplexity"), a) == 0, "tables differ:\n%s\n---\n%s", a, g_out);
    QT_EQ_INT(CLI("calibrate '%s' --text '%s' --seq-len 64 --windows 4 --steps 2 -q -o '%s'", model, text, tmp_path("s1.ctx")), 0);
    QT_EQ_INT(CLI("calibrate '%s' --tokens '%s' --seq-len 64 --windows 4 --steps 2 -q -o '%s'", model, ids, tmp_path("s2.ctx")), 0);
    {
        size_t na = 0, nb = 0;
        unsigned char* pa = read_all(tmp_path("s1.ctx"), &na);
        unsigned char* pb = read_all(tmp_path("s2.ctx"), &nb);
        QT_CHECK(pa && pb && na == nb && na > 0 && memcmp(pa, pb, na) == 0);
        free(pa);
        free(pb);
    }
}

static void test_bad_input(void) {
    if (!g_have_dir) { QT_CHECK(0); return; }
    write_str(tmp_path("big.txt"), "1 2 3 99999\n");
    QT_EQ_INT(CLI("eval '%s' --tokens '%s' --seq-len 32 -q", g_dir, tmp_path("big.txt")), 2);
    QT_CHECKF(strstr(g_err, "big.txt: token 3 (id 99999) is not below the vocabulary size") && count_lines(g_err) == 1, "%s", g_err);
    write_str(tmp_path("bad.txt"), "[1, \"x\"]");
    QT_EQ_INT(CLI("calibrate '%s' --tokens '%s' --seq-len 32 -q -o '%s'", g_dir, tmp_path("bad.txt"), tmp_path("x.ctx")), 2);
    QT_CHECKF(strstr(g_err, "bad.txt: entry 1 is not a token id"), "%s", g_err);
    QT_EQ_INT(CLI("eval '%s' --tokens '%s' --text '%s' -q", g_dir, tmp_path("big.txt"), tmp_path("text.txt")), 1);
    QT_EQ_INT(CLI("eval '%s' --tokens '%s' --windowing docs -q", g_dir, tmp_path("big.txt")), 1);
    qt_write_file(tmp_path("latin1.txt"), "caf\xE9 the\n", 9);
    QT_EQ_INT(CLI("tokenize '%s' --text '%s'", g_dir, tmp_path("latin1.txt")), 2);
    QT_CHECKF(strstr(g_err, "latin1.txt: byte offset 3: invalid UTF-8") && count_lines(g_err) == 1, "%s", g_err);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 32 -q", g_dir, tmp_path("latin1.txt")), 2);
    QT_CHECKF(strstr(g_err, "byte offset 3: invalid UTF-8"), "%s", g_err);
    QT_EQ_INT(CLI("tokenize --tokenizer '%s' --prompt hi", tmp_path("nothing.json")), 2);
    QT_CHECKF(strstr(g_err, "nothing.json: cannot open the tokenizer"), "%s", g_err);
    write_str(tmp_path("broken.json"), "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a q\"]}, "
                                      "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}}");
    QT_EQ_INT(CLI("tokenize --tokenizer '%s' --prompt hi", tmp_path("broken.json")), 2);
    QT_CHECKF(strstr(g_err, "broken.json: model.merges[0] names 'q', which is not a token") && count_lines(g_err) == 1, "%s", g_err);
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_tokenize")) return 1;
    g_have_dir = setup();
    QT_RUN(test_help);
    QT_RUN(test_tokenize_shared);
    QT_RUN(test_hf_dir);
    QT_RUN(test_gguf_model);
    QT_RUN(test_tokens_stories);
    QT_RUN(test_bad_input);
    cu_finish();
    return qt_finish("test_cli_tokenize");
}
