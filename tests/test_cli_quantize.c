/* test_cli_quantize.c - `quarot quantize`: the written files against `quarot eval`'s fake
   quantization, --dry-run, and bad input (one error line, no output).

   The check of a written file: `quarot eval` of the quantize output (its FP32 row: the file's
   integer weights dequantized) equals `quarot eval`'s fake-quant number for the same settings on the
   same rotated model (`quarot rotate`, then the no-rotation column of the W4A16 row, RTN per group of
   32 or per channel) within 0.1%. The two differ only in the scale's storage (f16 in the file, f32
   in the fake quantizer) and in the F16 storage of the unquantized matrices. A synthetic LLaMA
   (hidden 64, intermediate 192, 2 layers) keeps every row a multiple of 32. */
#include "qt.h"
#include "cli_util.h"
#include "formats/qx_gguf.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_packed.h"

#include <sys/stat.h>
#include <unistd.h>

static char g_model[1024], g_text[1024];
static int g_ok;

static int exists(const char* p) { return access(p, F_OK) == 0; }

/* 1 when the n bytes of `needle` occur in hay[0..len) (memmem is not POSIX). */
static int has_bytes(const unsigned char* hay, size_t len, const char* needle, size_t n) {
    size_t i;
    for (i = 0; i + n <= len; ++i)
        if (memcmp(hay + i, needle, n) == 0) return 1;
    return 0;
}

static int setup(void) {
    qx_synth_desc d;
    char tok[1100];
    cu_synth_desc(&d);
    d.intermediate = 192;
    snprintf(g_model, sizeof g_model, "%s/model.bin", g_tmp);
    snprintf(tok, sizeof tok, "%s/tokenizer.bin", g_tmp);
    snprintf(g_text, sizeof g_text, "%s/text.txt", g_tmp);
    return cu_write_synth_l2c(&d, g_model) && write_tokenizer(tok) && cu_write_sentences(g_text, qt_quick() ? 20 : 60);
}

static double eval_row(const char* model, const char* opts, const char* row) {
    int rc = CLI("eval '%s' --text '%s' --seq-len 64 --quiet %s", model, g_text, opts);
    QT_CHECKF(rc == 0, "eval %s: rc %d: %s", model, rc, g_err);
    return row_value(row);
}

static void check_close(double file, double fake, const char* what) {
    if (getenv("QX_SHOW")) printf("    %s: file %.4f, fake-quant %.4f\n", what, file, fake);
    QT_CHECKF(file > 0 && fake > 0 && fabs(file - fake) <= 1e-3 * fake, "%s: file %.4f vs fake-quant %.4f (> 0.1%%)", what, file, fake);
}

static void test_gguf_matches_fake_quant(void) {
    const char* q = tmp_path("q.gguf");
    const char* q8 = tmp_path("q8.gguf");
    const char* base = tmp_path("base.gguf");
    const char* rot = tmp_path("rot.bin");
    double a, b;
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    /* rotated, Q4_0 vs quarot rotate + eval W4 (groups of 32) on the rotated model */
    QT_EQ_INT(CLI("quantize '%s' '%s' --quiet", g_model, q), 0);
    QT_CHECKF(strstr(g_out, "Q4_0") && strstr(g_out, "14 tensors quantized"), "%s", g_out);
    QT_EQ_INT(CLI("rotate '%s' '%s' --quiet", g_model, rot), 0);
    a = eval_row(q, "--w-bits 16", "FP32");
    b = eval_row(rot, "--w-bits 4 --a-bits 16 --group-size 32", "W4A16");
    check_close(a, b, "Q4_0 rotated");
    /* 8 bits */
    QT_EQ_INT(CLI("quantize '%s' '%s' --bits 8 --quiet", g_model, q8), 0);
    a = eval_row(q8, "--w-bits 16", "FP32");
    b = eval_row(rot, "--w-bits 8 --a-bits 16 --group-size 32", "W8A16");
    check_close(a, b, "Q8_0 rotated");
    /* no rotation: the baseline */
    QT_EQ_INT(CLI("quantize '%s' '%s' --rotation none --quiet", g_model, base), 0);
    a = eval_row(base, "--w-bits 16", "FP32");
    b = eval_row(g_model, "--w-bits 4 --a-bits 16 --group-size 32", "W4A16");
    check_close(a, b, "Q4_0 without rotation");
}

/* A Hugging Face directory (half-split RoPE rows): the GGUF gets q/k rows in llama.cpp's interleaved
   layout, quantized after the permutation (per row, so the same values), and evaluates like the
   fake-quantized directory. */
static void test_gguf_from_hf(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    qx_st_save_opts so;
    const char* dir = tmp_path("hf");
    const char* q = tmp_path("hf.gguf");
    char opts[2200];
    double a, b;
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    cu_synth_desc(&d);
    d.intermediate = 192;
    d.rope_interleaved = 0;
    QT_OK(qx_synth_model(&s, &d, &e));
    memset(&so, 0, sizeof so);
    QT_OK(qx_st_save(&s, dir, &so, &e));
    qx_store_free(&s);
    QT_EQ_INT(CLI("quantize '%s' '%s' --rotation none --dtype f32 --quiet", dir, q), 0);
    snprintf(opts, sizeof opts, "--tokenizer '%s/tokenizer.bin' --w-bits 16", g_tmp);
    a = eval_row(q, opts, "FP32");
    snprintf(opts, sizeof opts, "--tokenizer '%s/tokenizer.bin' --w-bits 4 --a-bits 16 --group-size 32", g_tmp);
    b = eval_row(dir, opts, "W4A16");
    check_close(a, b, "Q4_0 from a Hugging Face directory");
}

/* The embedding and lm_head in row windows (QX_GLOBAL_WINDOW_ROWS=7; by default only for large
   vocabularies): GGUF Q4_0 and packed W4A4 outputs are byte-identical to whole copies; with
   --quantize-embeddings the tables are quantized whole and the windows stay off (same bytes too). */
static void test_windows_same_bytes(void) {
    static const char* outs[3] = {"w.gguf", "w.safetensors", "wq.safetensors"};
    int k, v;
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    for (k = 0; k < 3; ++k) {
        char f[2][1100];
        for (v = 0; v < 2; ++v) {
            snprintf(f[v], sizeof f[v], "%s/%d_%s", g_tmp, v, outs[k]);
            QT_EQ_INT(run_prog(v ? "QX_GLOBAL_WINDOW_ROWS=7" : "", g_bin, "quantize '%s' '%s'%s", g_model, f[v],
                               k == 2 ? " --quantize-embeddings" : ""), 0);
            QT_CHECKF((strstr(g_out, "embedding and lm_head: ") && strstr(g_out, " row windows of 7 rows")) == (v == 1 && k < 2),
                      "%s: summary: %s", outs[k], g_out);
            QT_CHECKF((strstr(g_out, "whole copies (the caller's output takes whole tensors)") != NULL) == (v == 1 && k == 2),
                      "%s: summary: %s", outs[k], g_out);
        }
        QT_CHECKF(same_file(f[0], f[1]), "%s: windows change the bytes", outs[k]);
    }
}

static void test_packed_matches_fake_quant(void) {
    const char* p = tmp_path("p.safetensors");
    const char* rot = tmp_path("rot2.bin");
    double a, b;
    qx_store s;
    qx_err e;
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    QT_EQ_INT(CLI("quantize '%s' '%s' --no-online --quiet", g_model, p), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --quiet", g_model, rot), 0);
    a = eval_row(p, "--w-bits 16", "FP32");
    b = eval_row(rot, "--w-bits 4 --a-bits 16", "W4A16");
    check_close(a, b, "packed per channel");
    /* stories260K (a real model; rows of 172 are fine per channel) */
    {
        const char* sm = qt_shared_path("models/stories260K/stories260K.bin");
        char m[1024], tok[1100], txt[1100], opts[2400];
        const char* sp = tmp_path("s.safetensors");
        const char* sr = tmp_path("s_rot.bin");
        if (sm && !qt_quick()) {
            snprintf(m, sizeof m, "%s", sm);
            snprintf(tok, sizeof tok, "%s", qt_shared_path("models/stories260K/tok512.bin"));
            snprintf(txt, sizeof txt, "%s", qt_shared_path("data/tinystories_eval.txt") ? qt_shared_path("data/tinystories_eval.txt") : "");
            QT_EQ_INT(CLI("quantize '%s' '%s' --no-online --quiet", m, sp), 0);
            QT_EQ_INT(CLI("rotate '%s' '%s' --quiet", m, sr), 0);
            snprintf(opts, sizeof opts, "--tokenizer '%s' --windows 6 --w-bits 16", tok);
            QT_EQ_INT(CLI("eval '%s' --text '%s' --quiet %s", sp, txt, opts), 0);
            a = row_value("FP32");
            snprintf(opts, sizeof opts, "--tokenizer '%s' --windows 6 --w-bits 4 --a-bits 16", tok);
            QT_EQ_INT(CLI("eval '%s' --text '%s' --quiet %s", sr, txt, opts), 0);
            b = row_value("W4A16");
            check_close(a, b, "stories260K packed per channel");
        }
    }
    /* with online hooks: they are in the file's metadata */
    QT_EQ_INT(CLI("quantize '%s' '%s' --force --kv-bits 4 --a-clip 0.9 --quiet", g_model, p), 0);
    qx_store_init(&s);
    QT_OK(qx_packed_load(p, &s, &e));
    {
        size_t n = 0;
        const char* h = (const char*)qx_store_get_blob(&s, "quarot.online", &n);
        QT_CHECKF(h && strstr(h, "down_input") && strstr(h, "q_rope") && strstr(h, "k_rope"), "%s", h ? h : "(none)");
    }
    qx_store_free(&s);
}

static void test_dry_run(void) {
    const char* q = tmp_path("dry.gguf");
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    QT_EQ_INT(CLI("quantize '%s' '%s' --dry-run", g_model, q), 0);
    QT_CHECK(!exists(q));
    QT_CHECKF(strstr(g_out, "model.layers.1.mlp.down_proj.weight") && strstr(g_out, "-> Q4_0") && strstr(g_out, "lm_head.weight"), "%s", g_out);
    /* stories260K: down_proj rows of 172 stay F16 and the dry run says why */
    {
        const char* m = qt_shared_path("models/stories260K/stories260K.bin");
        if (m) {
            QT_EQ_INT(CLI("quantize '%s' '%s' --dry-run", m, q), 0);
            QT_CHECKF(strstr(g_out, "rows of 172 are not a multiple of 32"), "%s", g_out);
        }
    }
}

/* One error line, the right exit code, nothing written. */
static void expect_fail(int want_rc, const char* out, const char* want_msg, const char* fmt, const char* extra) {
    int rc = CLI("quantize '%s' '%s' %s", g_model, out, extra);
    (void)fmt;
    QT_CHECKF(rc == want_rc, "%s: rc %d (want %d): %s", extra, rc, want_rc, g_err);
    QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, want_msg), "%s: stderr '%s' lacks '%s'", extra, g_err, want_msg);
    QT_CHECKF(!exists(out), "%s: %s was written", extra, out);
}

static void test_bad_input(void) {
    const char* q = tmp_path("bad.gguf");
    const char* p = tmp_path("bad.safetensors");
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    QT_EQ_INT(CLI("quantize --help"), 0);
    QT_CHECK(strstr(g_out, "usage: quarot quantize IN OUT") != NULL && g_err[0] == '\0');
    expect_fail(1, q, "--bits: 9 is outside 2..8", "", "--bits 9");
    expect_fail(1, p, "--bits: 1 is outside 2..8", "", "--bits 1");
    expect_fail(1, q, "--group-size 64: Q4_0 blocks hold groups of 32", "", "--group-size 64");
    expect_fail(1, q, "GGUF output has Q4_0 (--bits 4) and Q8_0 (--bits 8) only", "", "--bits 3");
    expect_fail(1, q, "Q4_0 / Q8_0 blocks are symmetric", "", "--asym");
    expect_fail(4, p, "model.layers.0.self_attn.q_proj.weight: --group-size 48 does not divide its rows of 64", "", "--group-size 48");
    expect_fail(1, tmp_path("x.bin"), "cannot tell the output form", "", "");
    expect_fail(1, p, "--a-bits: 1 is outside 2..8", "", "--a-bits 1");
    /* an existing output is kept without --force */
    QT_CHECK(write_str(q, "keep"));
    QT_EQ_INT(CLI("quantize '%s' '%s' --quiet", g_model, q), 3);
    QT_CHECKF(strstr(g_err, "exists already"), "%s", g_err);
    {
        size_t n = 0;
        unsigned char* b = read_all(q, &n);
        QT_CHECK(b && n == 4 && memcmp(b, "keep", 4) == 0);
        free(b);
    }
    remove(q);
    /* a missing input */
    QT_EQ_INT(CLI("quantize '%s/none.bin' '%s' --quiet", g_tmp, q), 2);
    QT_CHECK(!exists(q));
}

/* ---- --w-quant gptq ---- */

/* A variant of the synthetic model written as llama2.c beside the test's tokenizer: layer 0's
   gate_proj and up_proj set to `v` everywhere (0: down_proj's input is dead; 1e30: it overflows). */
static int write_variant(const char* path, float v) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    qx_l2c_write_opts wo;
    static const char* const names[2] = {"model.layers.0.mlp.gate_proj.weight", "model.layers.0.mlp.up_proj.weight"};
    int k, ok;
    cu_synth_desc(&d);
    d.intermediate = 192;
    if (qx_synth_model(&s, &d, &e) != QUAROT_OK) return 0;
    for (k = 0; k < 2; ++k) {
        quarot_tensor* t = qx_store_find(&s, names[k]);
        int64_t i, n = t ? t->ne[0] * t->ne[1] : 0;
        if (!t || t->dtype != QUAROT_DTYPE_F32) { qx_store_free(&s); return 0; }
        for (i = 0; i < n; ++i) ((float*)t->data)[i] = v;
    }
    memset(&wo, 0, sizeof wo);
    wo.format = QX_L2C_V0;
    ok = qx_l2c_write_file(&s, path, &wo, &e) == QUAROT_OK;
    qx_store_free(&s);
    return ok;
}

/* GPTQ through quantize equals eval --w-quant gptq (the same stage, the same calibration windows)
   within 0.1%: on the synthetic model always, on stories260K (rows of 172: down_proj stays F16 in
   the GGUF, --group-fallback in eval) when ../shared is there. */
static void test_gptq_matches_fake_quant(void) {
    const char* q = tmp_path("g.gguf");
    const char* p = tmp_path("g.safetensors");
    char opts[2400];
    double a, b;
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    QT_EQ_INT(CLI("quantize '%s' '%s' --w-quant gptq --calib-text '%s' --nsamples 4 --seq-len 64 --dtype f32", g_model, q, g_text), 0);
    QT_CHECKF(strstr(g_out, "weights: GPTQ per group") && strstr(g_out, "14 tensors quantized") && strstr(g_out, "GPTQ "), "%s", g_out);
    QT_CHECKF(strstr(g_err, "layer 2/2 quantized") && strstr(g_err, "GPTQ loss"), "%s", g_err);   /* progress per layer and linear */
    a = eval_row(q, "--w-bits 16", "FP32");
    snprintf(opts, sizeof opts, "--w-bits 4 --a-bits 16 --group-size 32 --w-quant gptq --calib-text '%s' --nsamples 4 --columns quarot --no-online", g_text);
    b = eval_row(g_model, opts, "W4A16");
    check_close(a, b, "GPTQ Q4_0 rotated");
    /* packed: per channel, asymmetric, clip search, act-order */
    QT_EQ_INT(CLI("quantize '%s' '%s' --w-quant gptq --calib-text '%s' --nsamples 4 --seq-len 64 --w-asym --w-clip --act-order --no-online "
                  "--quiet", g_model, p, g_text), 0);
    a = eval_row(p, "--w-bits 16", "FP32");
    snprintf(opts, sizeof opts, "--w-bits 4 --a-bits 16 --w-asym --w-clip --act-order --w-quant gptq --calib-text '%s' --nsamples 4 "
                                "--columns quarot --no-online", g_text);
    b = eval_row(g_model, opts, "W4A16");
    check_close(a, b, "GPTQ packed asymmetric per channel");
    {
        const char* sm = qt_shared_path("models/stories260K/stories260K.bin");
        char m[1024], tok[1100], txt[1100], cal[1100];
        const char* sq = tmp_path("sg.gguf");
        const char* sp = tmp_path("sg.safetensors");
        if (!sm || qt_quick()) return;
        snprintf(m, sizeof m, "%s", sm);   /* qt_shared_path's buffer is reused by the next call */
        if (!qt_shared_path("data/tinystories_calib.txt")) return;
        snprintf(tok, sizeof tok, "%s", qt_shared_path("models/stories260K/tok512.bin"));
        snprintf(txt, sizeof txt, "%s", qt_shared_path("data/tinystories_eval.txt"));
        snprintf(cal, sizeof cal, "%s", qt_shared_path("data/tinystories_calib.txt"));
        QT_EQ_INT(CLI("quantize '%s' '%s' --w-quant gptq --calib-text '%s' --nsamples 8 --seq-len 128 --dtype f32 --quiet", m, sq, cal), 0);
        QT_CHECKF(strstr(g_out, "5 linears kept in F16"), "%s", g_out);
        QT_EQ_INT(CLI("eval '%s' --text '%s' --tokenizer '%s' --seq-len 128 --windows 6 --w-bits 16 --columns none --quiet", sq, txt, tok), 0);
        a = row_value("FP32");
        QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 128 --windows 6 --w-bits 4 --a-bits 16 --group-size 32 --group-fallback --w-quant gptq "
                      "--calib-text '%s' --nsamples 8 --columns quarot --no-online --quiet", m, txt, cal), 0);
        b = row_value("W4A16");
        check_close(a, b, "stories260K GPTQ Q4_0");
        QT_EQ_INT(CLI("quantize '%s' '%s' --w-quant gptq --calib-text '%s' --nsamples 8 --seq-len 128 --act-order --no-online --quiet", m, sp, cal), 0);
        QT_EQ_INT(CLI("eval '%s' --text '%s' --tokenizer '%s' --seq-len 128 --windows 6 --w-bits 16 --columns none --quiet", sp, txt, tok), 0);
        a = row_value("FP32");
        QT_EQ_INT(CLI("eval '%s' --text '%s' --seq-len 128 --windows 6 --w-bits 4 --a-bits 16 --act-order --w-quant gptq --calib-text '%s' "
                      "--nsamples 8 --columns quarot --no-online --quiet", m, txt, cal), 0);
        b = row_value("W4A16");
        check_close(a, b, "stories260K GPTQ packed per channel");
    }
}

static void test_gptq_bad_input(void) {
    const char* q = tmp_path("gbad.gguf");
    const char* p = tmp_path("gbad.safetensors");
    const char* dead = tmp_path("dead.bin");
    const char* huge = tmp_path("huge.bin");
    char extra[2400];
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    expect_fail(1, q, "--w-quant gptq needs --calib-text", "", "--w-quant gptq");
    snprintf(extra, sizeof extra, "--calib-text '%s'", g_text);
    expect_fail(1, q, "are GPTQ options: add --w-quant gptq", "", extra);
    expect_fail(1, q, "--w-quant: 'awq' is not rtn or gptq", "", "--w-quant awq");
    snprintf(extra, sizeof extra, "--w-quant gptq --calib-text '%s' --nsamples 1000 --seq-len 64", g_text);
    expect_fail(4, q, "calibration text too short: ", "", extra);
    snprintf(extra, sizeof extra, "--w-quant gptq --calib-text '%s' --bits 9", g_text);
    expect_fail(1, p, "--bits: 9 is outside 2..8", "", extra);
    snprintf(extra, sizeof extra, "--w-quant gptq --calib-text '%s' --group-size 16", g_text);
    expect_fail(1, q, "--group-size 16: Q4_0 blocks hold groups of 32", "", extra);
    snprintf(extra, sizeof extra, "--w-quant gptq --calib-text '%s' --group-size 48", g_text);
    expect_fail(4, p, "model.layers.0.self_attn.q_proj.weight: --group-size 48 does not divide its rows of 64", "", extra);
    /* a dead linear: layer 0's gate/up all zero, so nothing reaches down_proj: RTN, said on stderr and in the table */
    QT_CHECK(write_variant(dead, 0.0f));
    QT_CHECK(exists(tmp_path("tokenizer.bin")));
    QT_EQ_INT(CLI("quantize '%s' '%s' --w-quant gptq --calib-text '%s' --nsamples 4 --seq-len 64 --no-online", dead, p, g_text), 0);
    QT_CHECKF(strstr(g_err, "model.layers.0.mlp.down_proj.weight: dead input") && strstr(g_out, "RTN*: 1 linears with a dead input"), "%s\n%s",
              g_err, g_out);
    QT_CHECK(exists(p));
    remove(p);
    /* activations that overflow into down_proj: NaN/Inf in its Hessian's rows, one line naming it, exit code 2
       (the model's input makes them), nothing written */
    QT_CHECK(write_variant(huge, 1e30f));
    QT_EQ_INT(CLI("quantize '%s' '%s' --w-quant gptq --calib-text '%s' --nsamples 4 --seq-len 64 --quiet", huge, q, g_text), 2);
    QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "model.layers.0.mlp.down_proj.weight") && strstr(g_err, "NaN or Inf"), "%s", g_err);
    QT_CHECK(!exists(q));
}

/* stories260K -> GGUF: the llama2.c tokenizer beside it is embedded as llama.cpp's sentencepiece
   vocabulary, with the same keys and value types as llama.cpp's own llama-spm vocabulary file
   (../shared/tokenizers), ' ' turned back into U+2581, <unk>/<s>/</s> and byte tokens typed. */
static void test_gguf_tokenizer(void) {
    const char* m = qt_shared_path("models/stories260K/stories260K.bin");
    const char* q = tmp_path("tok.gguf");
    char model[1024], ref[1024];
    size_t n1 = 0, n2 = 0;
    unsigned char *a, *b;
    qx_gguf_file fa, fb;
    qx_err e;
    uint64_t k;
    if (!m) { QT_SKIP("../shared not present"); return; }
    snprintf(model, sizeof model, "%s", m);   /* qt_shared_path's buffer is reused by the next call */
    m = qt_shared_path("tokenizers/ggml-vocab-llama-spm.gguf");
    if (!m) { QT_SKIP("../shared/tokenizers not present"); return; }
    snprintf(ref, sizeof ref, "%s", m);
    QT_EQ_INT(CLI("quantize '%s' '%s' --quiet", model, q), 0);
    QT_CHECKF(strstr(g_out, "tok512.bin (512 tokens)") != NULL, "%s", g_out);
    a = read_all(q, &n1);
    b = read_all(ref, &n2);
    if (a && b && qx_gguf_parse(a, n1, "q", &fa, &e) == QUAROT_OK) {
        if (qx_gguf_parse(b, n2, "ref", &fb, &e) == QUAROT_OK) {
            int n_tok = 0;
            for (k = 0; k < fb.n_kv; ++k) {
                char key[128];
                const qx_gguf_kv* x;
                if (fb.kv[k].key_len >= sizeof key || strncmp(fb.kv[k].key, "tokenizer.", 10) != 0) continue;
                memcpy(key, fb.kv[k].key, (size_t)fb.kv[k].key_len);
                key[fb.kv[k].key_len] = '\0';
                x = qx_gguf_find(&fa, key);
                QT_CHECKF(x && x->type == fb.kv[k].type && (x->type != QX_GGUF_ARRAY || x->arr_type == fb.kv[k].arr_type), "%s", key);
                ++n_tok;
            }
            QT_CHECK(n_tok >= 8);
            {
                const qx_gguf_kv* t = qx_gguf_find(&fa, "tokenizer.ggml.tokens");
                const qx_gguf_kv* ty = qx_gguf_find(&fa, "tokenizer.ggml.token_type");
                QT_CHECK(t && t->arr_count == 512 && ty && ty->arr_count == 512);
                /* the first pieces: <unk>, <s>, </s>; types 2, 3, 3, then byte tokens (6) */
                QT_CHECK(t && memcmp(t->val, "\5\0\0\0\0\0\0\0<unk>\3\0\0\0\0\0\0\0<s>\4\0\0\0\0\0\0\0</s>", 8 + 5 + 8 + 3 + 8 + 4) == 0);
                QT_CHECK(ty && ty->val[0] == 2 && ty->val[4] == 3 && ty->val[8] == 3 && ty->val[12] == 6);
                QT_CHECK(has_bytes(t->val, (size_t)t->val_len, "\xe2\x96\x81the", 6));
            }
            qx_gguf_file_free(&fb);
        }
        qx_gguf_file_free(&fa);
    } else {
        QT_CHECKF(0, "%s", e.msg);
    }
    free(a);
    free(b);
}

/* GGUF from a Hugging Face directory with a tokenizer.json: the vocabulary is converted into
   tokenizer.ggml.* as `rotate` converts it (llama.cpp refuses a GGUF without tokenizer.ggml.model).
   The directory comes from the llama2.c model and its tokenizer.bin through GGUF; its tokenizer.json
   must give the Q4_0 file the same tokenizer.ggml.tokens array as the GGUF it came from. */
static void test_gguf_tokenizer_from_hf(void) {
    const char* g = tmp_path("tokhf.gguf");
    const char* dir = tmp_path("tokhf");
    const char* q = tmp_path("tokhf_q.gguf");
    size_t n1 = 0, n2 = 0;
    unsigned char *a = NULL, *b = NULL;
    qx_gguf_file fa, fb;
    qx_err e;
    if (!g_ok) { QT_SKIP("setup failed"); return; }
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotation none --quiet", g_model, g), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --rotation none --format safetensors --quiet", g, dir), 0);
    QT_CHECK(exists(tmp_path("tokhf/tokenizer.json")));
    QT_EQ_INT(CLI("quantize '%s' '%s'", dir, q), 0);
    QT_CHECKF(strstr(g_out, "tokenizer.json -> tokenizer.ggml.*") != NULL, "%s", g_out);
    QT_CHECKF(strstr(g_out, "none found") == NULL, "%s", g_out);
    a = read_all(q, &n1);
    b = read_all(g, &n2);
    if (a && b && qx_gguf_parse(a, n1, "q", &fa, &e) == QUAROT_OK) {
        if (qx_gguf_parse(b, n2, "g", &fb, &e) == QUAROT_OK) {
            const qx_gguf_kv* tq = qx_gguf_find(&fa, "tokenizer.ggml.tokens");
            const qx_gguf_kv* tg = qx_gguf_find(&fb, "tokenizer.ggml.tokens");
            QT_CHECK(qx_gguf_find(&fa, "tokenizer.ggml.model") != NULL);
            QT_CHECKF(tq && tg && tq->arr_count == tg->arr_count && tq->val_len == tg->val_len &&
                          memcmp(tq->val, tg->val, (size_t)tq->val_len) == 0,
                      "tokenizer.ggml.tokens: %llu vs %llu tokens", tq ? (unsigned long long)tq->arr_count : 0ull,
                      tg ? (unsigned long long)tg->arr_count : 0ull);
            qx_gguf_file_free(&fb);
        } else {
            QT_CHECKF(0, "%s", e.msg);
        }
        qx_gguf_file_free(&fa);
    } else {
        QT_CHECKF(0, "%s", a && b ? e.msg : "outputs missing");
    }
    free(a);
    free(b);
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_quantize")) return 1;
    g_ok = setup();
    QT_RUN(test_gguf_matches_fake_quant);
    QT_RUN(test_gguf_from_hf);
    QT_RUN(test_packed_matches_fake_quant);
    QT_RUN(test_windows_same_bytes);
    QT_RUN(test_gguf_tokenizer);
    QT_RUN(test_gguf_tokenizer_from_hf);
    QT_RUN(test_dry_run);
    QT_RUN(test_bad_input);
    QT_RUN(test_gptq_matches_fake_quant);
    QT_RUN(test_gptq_bad_input);
    cu_finish();
    return qt_finish("test_cli_quantize");
}
