/* test_engine_packed.c - the inference engine on the packed W4A4 file of `quarot quantize
   OUT.safetensors` (qx_engine_init_packed, `quarot generate PACKED`, `quarot eval PACKED --engine int`).

   - Codes as stored: the engine built from the packed file holds exactly the codes (quarot_qmat bytes)
     of the engine that quantizes the same rotated float weights at load (the file written with f32
     scales and f32 matrices, dequantized, quantized again by RTN), and scales within 1e-6 relative
     (RTN of q*s gives back s up to one rounding); the two engines' logits agree within 1e-4.
   - Perplexity: `quarot eval PACKED --engine int` (codes, settings and hooks from the file) equals
     `quarot eval PACKED` (the fake-quantized reference forward pass of the same settings: dequantized
     weights, activations / KV quantized as the metadata says, the file's hooks) within 0.1%, on a
     synthetic LLaMA and on stories260K (skipped without ../shared); on stories260K the packed file
     also equals `quarot eval ROTATED --engine int --w-bits 4 --a-bits 4` (quantize at load) to the
     printed digits.
   - Greedy text of the packed file: identical for 1 and 2 threads.
   - Bad input: quantization flags contradicting the file, --quarot / --hooks with a packed file, a
     prompt longer than the context, metadata bits disagreeing with the tensors, a missing .scales, a
     NaN scale, a hook list for another model (layer, size) -> one error line and the exit code (CLI),
     an error and a freed engine (API). */
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_cli.h"
#include "engine/qx_engine.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_packed.h"

#include <math.h>
#include <unistd.h>

static char g_model[1024], g_text[1024], g_tok[1024], g_packed[1024];
static int g_ok;

static int setup(void) {
    qx_synth_desc d;
    cu_synth_desc(&d);
    d.intermediate = 192;
    snprintf(g_model, sizeof g_model, "%s/model.bin", g_tmp);
    snprintf(g_tok, sizeof g_tok, "%s/tokenizer.bin", g_tmp);
    snprintf(g_text, sizeof g_text, "%s/text.txt", g_tmp);
    snprintf(g_packed, sizeof g_packed, "%s/model.safetensors", g_tmp);
    if (!cu_write_synth_l2c(&d, g_model) || !write_tokenizer(g_tok) || !cu_write_sentences(g_text, qt_quick() ? 20 : 40)) return 0;
    /* W4A4KV4 with QuaRot's hooks (q/k too), f32 scales and matrices: the file the tests read */
    if (CLI("quantize '%s' '%s' --kv-bits 4 --a-clip 0.9 --scale-dtype f32 --dtype f32 --quiet", g_model, g_packed) != 0) {
        printf("    quantize: %s\n", g_err);
        return 0;
    }
    return 1;
}

/* The engine from the file vs the engine quantizing the file's dequantized weights at load. */
static void test_codes_as_stored(void) {
    qx_engine a, b;
    qx_engine_opts o;
    qx_store s;
    quarot_online_list hooks;
    qx_err e;
    size_t n = 0;
    const char* text;
    int64_t l, k, vocab;
    int32_t toks[6] = {1, 40, 77, 100, 5, 260};
    float *la, *lb;
    double worst = 0.0;
    if (!g_ok) QT_SKIP("setup failed");
    memset(&o, 0, sizeof o);
    o.context = 32;
    QT_OK(qx_engine_load_packed(&a, g_packed, &o, &e));
    QT_EQ_INT(a.opts.w_bits, 4);
    QT_EQ_INT(a.opts.a_bits, 4);
    QT_EQ_INT(a.opts.kv_bits, 4);
    QT_CHECK(fabs(a.opts.a_clip - 0.9f) < 1e-6f);
    QT_CHECK(a.file_hooks && a.file_hooks->count > 0);
    qx_store_init(&s);
    QT_OK(qx_packed_load(g_packed, &s, &e));
    text = (const char*)qx_store_get_blob(&s, "quarot.online", &n);
    quarot_online_list_init(&hooks, NULL);
    QT_OK(quarot_online_read(&hooks, text, n, NULL, 0));
    o.w_bits = 4;
    o.a_bits = 4;
    o.kv_bits = 4;
    o.a_clip = 0.9f;
    o.hooks = &hooks;
    QT_OK(qx_engine_init(&b, &s, &o, &e));
    for (l = 0; l < a.cfg.n_layers; ++l) {
        const qx_eng_linear* x[7] = {&a.layers[l].q, &a.layers[l].k, &a.layers[l].v, &a.layers[l].o, &a.layers[l].gate,
                                     &a.layers[l].up, &a.layers[l].down};
        const qx_eng_linear* y[7] = {&b.layers[l].q, &b.layers[l].k, &b.layers[l].v, &b.layers[l].o, &b.layers[l].gate,
                                     &b.layers[l].up, &b.layers[l].down};
        for (k = 0; k < 7; ++k) {
            size_t rb = quarot_qmat_row_bytes(x[k]->qm.bits, x[k]->qm.cols, x[k]->qm.group);
            int64_t i;
            QT_CHECK(x[k]->int_kernel && y[k]->int_kernel && x[k]->qm.bits == 4 && y[k]->qm.bits == 4);
            if (!x[k]->int_kernel || !y[k]->int_kernel) continue;
            QT_CHECKF(memcmp(x[k]->qm.data, y[k]->qm.data, rb * (size_t)x[k]->qm.rows) == 0, "layer %lld linear %lld: codes differ",
                      (long long)l, (long long)k);
            for (i = 0; i < x[k]->qm.rows; ++i) {
                double d = fabs((double)x[k]->qm.scales[i] - (double)y[k]->qm.scales[i]) / (double)y[k]->qm.scales[i];
                if (d > worst) worst = d;
            }
        }
    }
    QT_CHECKF(worst <= 1e-6, "scales differ by %.3g relative", worst);
    vocab = a.cfg.vocab;
    la = (float*)malloc((size_t)(6 * vocab) * sizeof *la);
    lb = (float*)malloc((size_t)(6 * vocab) * sizeof *lb);
    QT_CHECK(la && lb);
    if (la && lb) {
        double md = 0.0, mx = 0.0;
        QT_OK(qx_engine_forward(&a, toks, 6, la, 1, &e));
        QT_OK(qx_engine_forward(&b, toks, 6, lb, 1, &e));
        for (k = 0; k < 6 * vocab; ++k) {
            if (fabs((double)la[k] - lb[k]) > md) md = fabs((double)la[k] - lb[k]);
            if (fabs((double)lb[k]) > mx) mx = fabs((double)lb[k]);
        }
        QT_CHECKF(md <= 1e-4 * mx, "logits differ by %.3g (max %.3g)", md, mx);
    }
    free(la);
    free(lb);
    qx_engine_free(&a);
    qx_engine_free(&b);
    quarot_online_list_free(&hooks);
    qx_store_free(&s);
}

static void check_eval_pair(const char* model, const char* extra, const char* row, const char* what) {
    double r, x;
    QT_EQ_INT(CLI("eval '%s' --text '%s' --quiet %s", model, g_text, extra), 0);
    r = row_value(row);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --quiet --engine int %s", model, g_text, extra), 0);
    x = row_value(row);
    QT_CHECKF(r > 0 && x > 0 && fabs(x - r) <= 1e-3 * r, "%s: engine %.4f vs reference %.4f", what, x, r);
}

static void test_eval_and_generate(void) {
    static char a[1 << 16];
    char opts[1200];
    if (!g_ok) QT_SKIP("setup failed");
    snprintf(opts, sizeof opts, "--tokenizer '%s' --seq-len 64", g_tok);
    check_eval_pair(g_packed, opts, "W4A4KV4", "synthetic W4A4KV4");
    QT_CHECKF(strstr(g_out, "packed") != NULL, "%s", g_out);
    /* a file without online hooks (--no-online, f16 scales) */
    {
        const char* nh = tmp_path("nohooks.safetensors");
        QT_EQ_INT(CLI("quantize '%s' '%s' --no-online --quiet", g_model, nh), 0);
        check_eval_pair(nh, opts, "W4A4", "synthetic W4A4 without hooks");
    }
    /* flags that agree with the file are accepted */
    snprintf(opts, sizeof opts, "--tokenizer '%s' --seq-len 64 --w-bits 4 --a-bits 4 --kv-bits 4 --clip 0.9 --engine int", g_tok);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --quiet %s", g_packed, g_text, opts), 0);
    /* greedy text, 1 and 2 threads */
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 40 --prompt 'the cat' --threads 1 --quiet", g_packed, g_tok), 0);
    snprintf(a, sizeof a, "%s", g_out);
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 40 --prompt 'the cat' --threads 2 --quiet", g_packed, g_tok), 0);
    QT_CHECKF(strcmp(a, g_out) == 0, "1 vs 2 threads:\n%s\n---\n%s", a, g_out);
    QT_CHECK(strncmp(a, "the cat", 7) == 0 && strlen(a) > 10);
}

static void test_stories(void) {
    char model[1024], tok[1024], text[1024], opts[3000];
    static char a[1 << 16];
    const char* p = tmp_path("s.safetensors");
    const char* r = tmp_path("s_rot.bin");
    double x, y, z;
    /* qt_shared_path returns one static buffer: copy each path at once */
    if (!qt_shared_path("models/stories260K/stories260K.bin")) QT_SKIP("stories260K not in ../shared");
    snprintf(model, sizeof model, "%s", qt_shared_path("models/stories260K/stories260K.bin"));
    if (!qt_shared_path("models/stories260K/tok512.bin")) QT_SKIP("stories260K's tokenizer not in ../shared");
    snprintf(tok, sizeof tok, "%s", qt_shared_path("models/stories260K/tok512.bin"));
    if (!qt_shared_path("data/tinystories_eval.txt")) QT_SKIP("tinystories_eval.txt not in ../shared");
    snprintf(text, sizeof text, "%s", qt_shared_path("data/tinystories_eval.txt"));
    QT_EQ_INT(CLI("quantize '%s' '%s' --scale-dtype f32 --dtype f32 --quiet", model, p), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --online --quiet", model, r), 0);
    snprintf(opts, sizeof opts, "--tokenizer '%s' --windows %d", tok, qt_quick() ? 2 : 6);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --quiet %s", p, text, opts), 0);
    x = row_value("W4A4");
    QT_EQ_INT(CLI("eval '%s' --text '%s' --quiet --engine int %s", p, text, opts), 0);
    y = row_value("W4A4");
    QT_CHECKF(x > 0 && y > 0 && fabs(x - y) <= 1e-3 * x, "stories260K packed: engine %.4f vs reference %.4f", y, x);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --quiet --engine int --columns none --w-bits 4 --a-bits 4 %s", r, text, opts), 0);
    z = row_value("W4A4");
    QT_CHECKF(z > 0 && fabs(z - y) <= 1e-4 * y, "stories260K: packed %.4f vs quantized at load %.4f", y, z);
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 60 --threads 1 --quiet", p, tok), 0);
    snprintf(a, sizeof a, "%s", g_out);
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 60 --threads 2 --quiet", p, tok), 0);
    QT_CHECKF(strcmp(a, g_out) == 0, "1 vs 2 threads:\n%s\n---\n%s", a, g_out);
    QT_CHECKF(strncmp(a, "Once upon a time", 16) == 0, "%s", a);
}

/* buf with the first `from` in its JSON header replaced by `to` (header length fixed up); NULL when
   from is not in the header. */
static unsigned char* edit_header(const unsigned char* buf, size_t len, const char* from, const char* to, size_t* out_len) {
    uint64_t hl = 0, nl;
    int k;
    const unsigned char* hit = NULL;
    size_t i, fl = strlen(from), tl = strlen(to);
    unsigned char* o;
    for (k = 7; k >= 0; --k) hl = (hl << 8) | buf[k];
    for (i = 8; i + fl <= 8 + hl; ++i)
        if (memcmp(buf + i, from, fl) == 0) { hit = buf + i; break; }
    if (!hit) return NULL;
    *out_len = len - fl + tl;
    o = (unsigned char*)malloc(*out_len);
    if (!o) return NULL;
    memcpy(o, buf, (size_t)(hit - buf));
    memcpy(o + (hit - buf), to, tl);
    memcpy(o + (hit - buf) + tl, hit + fl, len - (size_t)(hit - buf) - fl);
    nl = hl - fl + tl;
    for (k = 0; k < 8; ++k) o[k] = (unsigned char)(nl >> (8 * k));
    return o;
}

/* The engine refuses buf with code want and a one-line message containing msg. */
static void expect_engine_fail(const unsigned char* buf, size_t len, quarot_result want, const char* msg, const char* what) {
    qx_engine en;
    qx_err e;
    quarot_result r;
    e.msg[0] = '\0';
    r = qx_engine_init_packed(&en, buf, len, "bad.safetensors", NULL, &e);
    QT_CHECKF(r == want, "%s: %s (want %s): %s", what, quarot_result_string(r), quarot_result_string(want), e.msg);
    QT_CHECKF(strstr(e.msg, msg) != NULL && !strchr(e.msg, '\n'), "%s: '%s' lacks '%s'", what, e.msg, msg);
    QT_CHECK(en.arena.n_blocks == 0 && en.layers == NULL && en.file_hooks == NULL);
    if (r == QUAROT_OK) qx_engine_free(&en);
}

static void test_bad_input(void) {
    unsigned char *img, *x;
    size_t len = 0, xl = 0;
    char prompt[400], opts[1200];
    const char* bad = tmp_path("bad.safetensors");
    int i;
    if (!g_ok) QT_SKIP("setup failed");
    /* flags against the file */
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' --a-bits 8 -n 3", g_packed, g_tok), QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "activation bits 8 contradicts the file's quarot.act.bits 4") && count_lines(g_err) == 1, "%s", g_err);
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' --kv-bits 16 -n 3", g_packed, g_tok), QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "contradicts the file's quarot.k.bits 4") && count_lines(g_err) == 1, "%s", g_err);
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' --quarot -n 3", g_packed, g_tok), QX_EXIT_USAGE);
    QT_CHECKF(strstr(g_err, "rotated already") && count_lines(g_err) == 1, "%s", g_err);
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' --hooks x -n 3", g_packed, g_tok), QX_EXIT_USAGE);
    QT_CHECKF(strstr(g_err, "carries its online hooks") && count_lines(g_err) == 1, "%s", g_err);
    snprintf(opts, sizeof opts, "--tokenizer '%s' --seq-len 64", g_tok);
    QT_EQ_INT(CLI("eval '%s' --text '%s' %s --w-bits 8 --engine int", g_packed, g_text, opts), QX_EXIT_USAGE);
    QT_CHECKF(strstr(g_err, "--w-bits 8 contradicts") && count_lines(g_err) == 1, "%s", g_err);
    QT_EQ_INT(CLI("eval '%s' --text '%s' %s --clip 0.5", g_packed, g_text, opts), QX_EXIT_USAGE);
    QT_CHECKF(strstr(g_err, "--clip 0.5 contradicts") && count_lines(g_err) == 1, "%s", g_err);
    QT_EQ_INT(CLI("eval '%s' --text '%s' %s --columns quarot", g_packed, g_text, opts), QX_EXIT_USAGE);
    /* a prompt longer than the context */
    for (i = 0; i < 300; ++i) prompt[i] = (char)('a' + i % 26);
    prompt[300] = '\0';
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' --context 16 --prompt '%s' --quiet", g_packed, g_tok, prompt), QX_EXIT_PROCESS);
    QT_CHECKF(strstr(g_err, "longer than the context") && count_lines(g_err) == 1, "%s", g_err);

    img = read_all(g_packed, &len);
    QT_CHECK(img != NULL);
    if (!img) return;
    expect_engine_fail(img, len - 1, QUAROT_ERR_PARSE, "bad.safetensors", "truncated");
    /* weight bits in the metadata against the tensors: 8-bit codes would be one per byte, so every
       linear reads as half as wide as the config says */
    x = edit_header(img, len, "\"quarot.weight.bits\":\"4\"", "\"quarot.weight.bits\":\"8\"", &xl);
    QT_CHECK(x != NULL);
    if (x) {
        expect_engine_fail(x, xl, QUAROT_ERR_SHAPE_MISMATCH, "packed shape", "bits 8");
        QT_CHECK(qt_write_file(bad, x, xl));
        QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 3", bad, g_tok), QX_EXIT_PROCESS);
        QT_CHECKF(strstr(g_err, "packed shape") && count_lines(g_err) == 1, "%s", g_err);
        free(x);
    }
    /* a missing .scales */
    x = edit_header(img, len, "model.layers.1.mlp.up_proj.scales", "model.layers.1.mlp.up_proj.scalez", &xl);
    QT_CHECK(x != NULL);
    if (x) {
        expect_engine_fail(x, xl, QUAROT_ERR_PARSE, "no .scales beside it", "missing scales");
        QT_CHECK(qt_write_file(bad, x, xl));
        QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 3", bad, g_tok), QX_EXIT_INPUT);
        QT_CHECKF(strstr(g_err, "no .scales beside it") && count_lines(g_err) == 1, "%s", g_err);
        QT_EQ_INT(CLI("eval '%s' --text '%s' %s --engine int", bad, g_text, opts), QX_EXIT_INPUT);
        QT_CHECKF(count_lines(g_err) == 1, "%s", g_err);
        free(x);
    }
    /* a hook list for another model: a layer it does not have; a down_proj row it does not have */
    x = edit_header(img, len, "hook 1 down_input", "hook 7 down_input", &xl);
    QT_CHECK(x != NULL);
    if (x) {
        expect_engine_fail(x, xl, QUAROT_ERR_SHAPE_MISMATCH, "does not fit this model", "hook layer");
        QT_CHECK(qt_write_file(bad, x, xl));
        QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 3", bad, g_tok), QX_EXIT_PROCESS);
        QT_CHECKF(strstr(g_err, "does not fit this model") && count_lines(g_err) == 1, "%s", g_err);
        free(x);
    }
    {
        /* the down_input hook of layer 0, whatever its factorization, becomes a 172-wide one */
        const char* key = "hook 0 down_input ";
        uint64_t hl = 0;
        int k;
        size_t j, s0 = 0, s1 = 0;
        char from[256];
        for (k = 7; k >= 0; --k) hl = (hl << 8) | img[k];
        for (j = 8; j + strlen(key) <= 8 + hl; ++j)
            if (memcmp(img + j, key, strlen(key)) == 0) { s0 = j; break; }
        for (j = s0; s0 && j + 6 <= 8 + hl; ++j)
            if (memcmp(img + j, " signs", 6) == 0) { s1 = j; break; }
        QT_CHECK(s0 && s1 && s1 - s0 < sizeof from);
        if (s0 && s1 && s1 - s0 < sizeof from) {
            memcpy(from, img + s0, s1 - s0);
            from[s1 - s0] = '\0';
            x = edit_header(img, len, from, "hook 0 down_input size=172 outer=1 n=172 inner=1 K=172 m=0", &xl);
            QT_CHECK(x != NULL);
            if (x) {
                expect_engine_fail(x, xl, QUAROT_ERR_SHAPE_MISMATCH, "does not divide the row", "hook size");
                free(x);
            }
        }
    }
    /* a NaN scale (f32 scales: the first scale of the file's first packed tensor's .scales) */
    {
        qx_packed_file f;
        qx_err e;
        if (qx_packed_parse(img, len, "x", &f, &e) == QUAROT_OK) {
            size_t off = (size_t)(f.lin[0].scales - img);
            static const unsigned char nan_le[4] = {0x00, 0x00, 0xc0, 0x7f};
            qx_packed_file_free(&f);
            x = (unsigned char*)malloc(len);
            QT_CHECK(x != NULL);
            if (x) {
                memcpy(x, img, len);
                memcpy(x + off, nan_le, 4);
                expect_engine_fail(x, len, QUAROT_ERR_NONFINITE, "scales must be finite", "NaN scale");
                QT_CHECK(qt_write_file(bad, x, len));
                QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 3", bad, g_tok), QX_EXIT_INPUT);
                QT_CHECKF(strstr(g_err, "scales must be finite") && count_lines(g_err) == 1, "%s", g_err);
                free(x);
            }
        } else {
            QT_CHECKF(0, "%s", e.msg);
        }
    }
    /* settings the engine cannot run exactly */
    x = edit_header(img, len, "\"quarot.act.asymmetric\":\"0\"", "\"quarot.act.asymmetric\":\"1\"", &xl);
    QT_CHECK(x != NULL);
    if (x) {
        expect_engine_fail(x, xl, QUAROT_ERR_UNSUPPORTED, "per token, symmetric", "asymmetric activations");
        free(x);
    }
    free(img);
}

/* With QX_SEEDS_DIR set: a tiny packed model with online hooks (q/k too) and a quantized KV cache,
   the fuzz seed that walks the engine's loader (fuzz/fuzz_packed.c) to the end. */
static void write_seed(void) {
    const char* dir = getenv("QX_SEEDS_DIR");
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    qx_l2c_write_opts wo;
    char m[1100], out[1100];
    if (!dir || !dir[0]) return;
    memset(&d, 0, sizeof d);
    d.arch = "llama";
    d.seed = 5;
    d.vocab = 16;
    d.rope_interleaved = 1;
    d.hidden = 16;
    d.intermediate = 32;
    d.n_layers = 1;
    d.n_heads = 2;
    d.n_kv_heads = 1;
    d.head_dim = 8;
    d.max_seq = 16;
    if (qx_synth_model(&s, &d, &e) != QUAROT_OK) return;
    memset(&wo, 0, sizeof wo);
    wo.format = QX_L2C_V0;
    snprintf(m, sizeof m, "%s/tiny.bin", g_tmp);
    snprintf(out, sizeof out, "%s/packed/engine_hooks.safetensors", dir);
    if (qx_l2c_write_file(&s, m, &wo, &e) == QUAROT_OK)
        QT_EQ_INT(CLI("quantize '%s' '%s' --kv-bits 4 --dtype f16 --force --quiet", m, out), 0);
    qx_store_free(&s);
}

int main(int argc, char** argv) {
    const char* slash = strrchr(argv[0], '/');
    size_t dl = slash ? (size_t)(slash - argv[0]) : 0;
    (void)argc;
    snprintf(g_bin, sizeof g_bin, "%.*s%squarot", (int)dl, argv[0], dl ? "/../" : "../");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qx_engine_packed_XXXXXX");
    if (!mkdtemp(g_tmp) || access(g_bin, X_OK) != 0) {
        printf("  cannot set up (%s, %s)\n", g_tmp, g_bin);
        printf("test_engine_packed: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    g_ok = setup();
    write_seed();
    QT_RUN(test_codes_as_stored);
    QT_RUN(test_eval_and_generate);
    QT_RUN(test_stories);
    QT_RUN(test_bad_input);
    {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
        if (system(cmd) != 0) printf("  could not remove %s\n", g_tmp);
    }
    return qt_finish("test_engine_packed");
}
