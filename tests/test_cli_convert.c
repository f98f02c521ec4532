/* `quarot rotate IN OUT` across formats and model families (the built binary, run with system()):
   OUT's format from --format or its name, conversions that keep the model's function, the metadata
   that goes along, and the errors that replace silent wrong writes.
   Truths used:
   - The logits of the converted-and-rotated output, read back through the ordinary loader, equal the
     original file's over 24 tokens (qx_forward, both directions of RoPE row order exercised:
     llama2.c/llama GGUF interleaved, Hugging Face/qwen GGUF half-split). Tolerance relative to the
     largest |logit|: 4e-5 after two f32 rotations (float rounding of a few GEMMs; measured ~1e-6),
     3e-2 for bf16 storage (8 significant bits). A missed q/k permutation gives differences of the
     order of the logits.
   - qwen2 / qwen3 GGUF files written from synthetic models (qx_synth: q/k/v biases, q/k norms, GQA,
     outlier channels) rotate, with and without online hooks, to the same logits.
   - A llama2.c model's tokenizer becomes GGUF tokenizer.ggml.* arrays: the pieces read back equal the
     tokenizer file's (U+2581 for ' ', "<s>"/"</s>" for BOS/EOS), scores bit for bit, token types.
   - Hugging Face directories: tokenizer.json etc. copied byte for byte; torch_dtype = what was written.
   - Mismatches (OUT's extension vs --format, an architecture the target cannot hold): one stderr
     line, exit code 1 / 4, no output file. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "model_util.h"
#include "cli/qx_cli.h"
#include "model/qx_forward.h"
#include "formats/qx_gguf.h"
#include "formats/qx_llama2c.h"
#include "model/qx_online.h"
#include "formats/qx_safetensors.h"
#include "tokenizer/qx_tokenizer.h"
#include <sys/stat.h>
#include <unistd.h>

/* The logits of the file at `a` vs the file at `b` (hooks file hp or NULL). */
static double file_diff(const char* a, const char* b, const char* hp) {
    qx_store sa, sb;
    quarot_online_list l;
    double r = 1e30;
    int have_l = 0;
    if (!load_model(a, &sa)) return r;
    if (!load_model(b, &sb)) { qx_store_free(&sa); return r; }
    if (hp) have_l = load_hooks(hp, &l);
    if (!hp || have_l) r = logit_rel_diff(&sa, &sb, have_l ? &l : NULL, 24);
    if (have_l) quarot_online_list_free(&l);
    qx_store_free(&sa);
    qx_store_free(&sb);
    return r;
}

static int file_has(const char* path, const char* needle) {
    size_t n = 0;
    char* t = (char*)read_all(path, &n);
    int ok = t && strstr(t, needle) != NULL;
    free(t);
    return ok;
}

static int same_bytes(const char* a, const char* b) {
    size_t na = 0, nb = 0;
    unsigned char *x = read_all(a, &na), *y = read_all(b, &nb);
    int ok = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return ok;
}

#define CHECK_DIFF(d, tol, what)                                                                  \
    do {                                                                                          \
        double d_ = (d);                                                                          \
        QT_CHECKF(d_ <= (tol), "%s: logits differ by %.3g of the largest (tolerance %.0e)", what, d_, (double)(tol)); \
        printf("    %-52s logits max rel diff %.2e (tol %.0e)\n", what, d_, (double)(tol));      \
    } while (0)

/* ---- llama2.c -> GGUF -> safetensors -> llama2.c ------------------------------------------------- */

static void test_bin_gguf_safetensors(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    qx_l2c_write_opts wo;
    char bin[600], gg[600], hf[600], back[600], bf[600], cfg[1100];
    snprintf(bin, sizeof bin, "%s", tmp_path("m.bin"));   /* (tmp_path's buffers are reused) */
    snprintf(gg, sizeof gg, "%s", tmp_path("m.gguf"));
    snprintf(hf, sizeof hf, "%s", tmp_path("m_hf"));
    snprintf(back, sizeof back, "%s", tmp_path("back.bin"));
    snprintf(bf, sizeof bf, "%s", tmp_path("bf"));
    cu_synth_desc(&d);
    QT_OK(qx_synth_model(&s, &d, &e));
    memset(&wo, 0, sizeof wo);
    QT_OK(qx_l2c_write_file(&s, bin, &wo, &e));
    qx_store_free(&s);
    {   /* tok<vocab>.bin beside the model */
        char tp[1100];
        snprintf(tp, sizeof tp, "%s/tok%d.bin", g_tmp, SYN_VOCAB);
        QT_CHECK(write_tokenizer(tp));
        QT_EQ_INT(CLI("rotate %s %s --quiet", bin, gg), 0);
        QT_CHECK(strstr(g_out, "format: llama2c-v0 -> gguf (q/k rows") == NULL);   /* both interleaved */
        QT_CHECK(strstr(g_out, "tokenizer.ggml.*") != NULL);
        {   /* a real GGUF (the old bug wrote llama2.c bytes here), with the vocabulary */
            size_t n = 0;
            char* img = (char*)read_all(gg, &n);
            qx_gguf_file f;
            qx_tokenizer t;
            QT_CHECK(img && n > 4 && memcmp(img, "GGUF", 4) == 0);
            memset(&t, 0, sizeof t);
            if (img && qx_gguf_parse(img, n, gg, &f, &e) == QUAROT_OK && qx_tokenizer_load(&t, tp, SYN_VOCAB, &e) == QUAROT_OK) {
                const qx_gguf_kv* tk = qx_gguf_find(&f, "tokenizer.ggml.tokens");
                const qx_gguf_kv* sc = qx_gguf_find(&f, "tokenizer.ggml.scores");
                const qx_gguf_kv* ty = qx_gguf_find(&f, "tokenizer.ggml.token_type");
                uint64_t al = 0;
                const char* model = qx_gguf_kv_string(qx_gguf_find(&f, "tokenizer.ggml.model"), &al);
                int64_t bos = -1;
                QT_CHECK(model && al == 5 && memcmp(model, "llama", 5) == 0);
                QT_CHECK(qx_gguf_kv_int(qx_gguf_find(&f, "tokenizer.ggml.bos_token_id"), &bos) == QUAROT_OK && bos == 1);
                QT_CHECK(tk && tk->arr_type == QX_GGUF_STRING && tk->arr_count == SYN_VOCAB);
                QT_CHECK(sc && sc->arr_type == QX_GGUF_F32 && sc->arr_count == SYN_VOCAB);
                QT_CHECK(ty && ty->arr_type == QX_GGUF_I32 && ty->arr_count == SYN_VOCAB);
                if (tk && sc && ty && tk->arr_count == SYN_VOCAB && sc->arr_count == SYN_VOCAB && ty->arr_count == SYN_VOCAB) {
                    const unsigned char* p = tk->val;
                    int i, bad = 0;
                    for (i = 0; i < SYN_VOCAB; ++i) {
                        uint64_t len = 0;
                        int k, type;
                        char want[64], *w = want;
                        const char* q;
                        float score;
                        int32_t ti;
                        for (k = 7; k >= 0; --k) len = (len << 8) | p[k];
                        p += 8;
                        /* the expected SentencePiece piece */
                        if (i == 1) strcpy(want, "<s>");
                        else if (i == 2) strcpy(want, "</s>");
                        else
                            for (q = t.pieces[i]; *q; ++q) {
                                if (*q == ' ') { memcpy(w, "\xe2\x96\x81", 3); w += 3; }
                                else *w++ = *q;
                            }
                        if (i > 2) *w = '\0';
                        if (len != strlen(want) || memcmp(p, want, (size_t)len) != 0) ++bad;
                        p += len;
                        memcpy(&score, sc->val + 4 * i, 4);
                        memcpy(&ti, ty->val + 4 * i, 4);
                        type = i == 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1;
                        if (score != t.scores[i] || ti != type) ++bad;
                    }
                    QT_EQ_INT(bad, 0);
                }
                qx_gguf_file_free(&f);
            } else {
                QT_CHECKF(0, "%s", e.msg);
            }
            qx_tokenizer_free(&t);
            free(img);
        }
        CHECK_DIFF(file_diff(bin, gg, NULL), 2e-5, "llama2.c -> GGUF");
        QT_EQ_INT(CLI("rotate %s %s --format safetensors --quiet", gg, hf), 0);
        QT_CHECK(strstr(g_out, "format: gguf -> safetensors (q/k rows reordered") != NULL);
        snprintf(cfg, sizeof cfg, "%s/config.json", hf);
        QT_CHECK(file_has(cfg, "\"torch_dtype\": \"float32\"") && file_has(cfg, "\"tie_word_embeddings\": false"));
        CHECK_DIFF(file_diff(bin, hf, NULL), 4e-5, "llama2.c -> GGUF -> safetensors");
        QT_EQ_INT(CLI("rotate %s %s --quiet", hf, back), 0);
        CHECK_DIFF(file_diff(bin, back, NULL), 6e-5, "... -> safetensors -> llama2.c");
        /* bf16 safetensors straight from llama2.c, with online hooks */
        QT_EQ_INT(CLI("rotate %s %s --format safetensors --dtype bf16 --online --quiet", bin, bf), 0);
        snprintf(cfg, sizeof cfg, "%s/config.json", bf);
        QT_CHECK(file_has(cfg, "\"torch_dtype\": \"bfloat16\""));
        {
            char hp[1100];
            snprintf(hp, sizeof hp, "%s/quarot_online.txt", bf);
            CHECK_DIFF(file_diff(bin, bf, hp), 3e-2, "llama2.c -> safetensors bf16 --online");
        }
    }
}

/* ---- qwen2 / qwen3: GGUF rotation, safetensors <-> GGUF, side files ----------------------------- */

static void test_qwen(void) {
    const char* fam[2] = {"qwen2", "qwen3"};
    int a;
    for (a = 0; a < 2; ++a) {
        qx_synth_desc d;
        qx_store s;
        qx_err e;
        qx_st_save_opts so;
        qx_gguf_save_opts go;
        char dir[1100], gg[1100], rg[1100], hp[1200], hf[1100], hf2[1100], what[96], p1[1200], p2[1200];
        memset(&d, 0, sizeof d);
        d.arch = fam[a];
        d.seed = (uint64_t)(40 + a);
        d.n_layers = 2;
        QT_OK(qx_synth_model(&s, &d, &e));
        snprintf(dir, sizeof dir, "%s/%s_dir", g_tmp, fam[a]);
        snprintf(gg, sizeof gg, "%s/%s.gguf", g_tmp, fam[a]);
        snprintf(rg, sizeof rg, "%s/%s_rot.gguf", g_tmp, fam[a]);
        snprintf(hp, sizeof hp, "%s.quarot-online", rg);
        snprintf(hf, sizeof hf, "%s/%s_hf", g_tmp, fam[a]);
        snprintf(hf2, sizeof hf2, "%s/%s_hf2", g_tmp, fam[a]);
        memset(&so, 0, sizeof so);
        memset(&go, 0, sizeof go);
        QT_OK(qx_st_save(&s, dir, &so, &e));
        QT_OK(qx_gguf_save(&s, gg, &go, &e));
        qx_store_free(&s);
        /* the side files of a Hugging Face directory */
        snprintf(p1, sizeof p1, "%s/tokenizer.json", dir);
        QT_CHECK(write_str(p1, "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\"}}\n"));
        snprintf(p1, sizeof p1, "%s/generation_config.json", dir);
        QT_CHECK(write_str(p1, "{\"bos_token_id\": 1, \"eos_token_id\": 2}\n"));

        /* GGUF in, GGUF out, with and without online hooks */
        QT_EQ_INT(CLI("rotate %s %s --quiet", gg, rg), 0);
        snprintf(what, sizeof what, "%s GGUF rotated", fam[a]);
        CHECK_DIFF(file_diff(gg, rg, NULL), 2e-5, what);
        QT_EQ_INT(CLI("rotate %s %s --online --r3 --force --quiet", gg, rg), 0);
        snprintf(what, sizeof what, "%s GGUF rotated --online --r3", fam[a]);
        CHECK_DIFF(file_diff(gg, rg, hp), 2e-5, what);
        /* safetensors directory -> GGUF, and back to a directory with --dtype bf16 */
        QT_EQ_INT(CLI("rotate %s %s --force --quiet", dir, rg), 0);
        QT_CHECK(strstr(g_out, "format: safetensors-dir -> gguf\n") != NULL);   /* qwen: same row order */
        QT_CHECK(!qx_path_exists(hp));
        snprintf(what, sizeof what, "%s safetensors -> GGUF", fam[a]);
        CHECK_DIFF(file_diff(dir, rg, NULL), 2e-5, what);
        QT_EQ_INT(CLI("rotate %s %s --dtype bf16 --quiet", rg, hf), 0);   /* no extension: IN's format */
        QT_CHECK(!qx_is_dir(hf));
        QT_EQ_INT(CLI("rotate %s %s --format safetensors --dtype bf16 --quiet", rg, hf2), 0);
        snprintf(p1, sizeof p1, "%s/config.json", hf2);
        QT_CHECK(file_has(p1, "\"torch_dtype\": \"bfloat16\"") && file_has(p1, fam[a]));
        snprintf(what, sizeof what, "%s safetensors -> GGUF -> safetensors bf16", fam[a]);
        CHECK_DIFF(file_diff(dir, hf2, NULL), 3e-2, what);
        /* directory -> directory: tokenizer files copied, torch_dtype set */
        snprintf(hf2, sizeof hf2, "%s/%s_hf3", g_tmp, fam[a]);
        QT_EQ_INT(CLI("rotate %s %s --dtype f16 --quiet", dir, hf2), 0);
        QT_CHECK(strstr(g_out, "copied 2 Hugging Face files") != NULL);
        snprintf(p1, sizeof p1, "%s/tokenizer.json", dir);
        snprintf(p2, sizeof p2, "%s/tokenizer.json", hf2);
        QT_CHECK(same_bytes(p1, p2));
        snprintf(p1, sizeof p1, "%s/generation_config.json", dir);
        snprintf(p2, sizeof p2, "%s/generation_config.json", hf2);
        QT_CHECK(same_bytes(p1, p2));
        snprintf(p2, sizeof p2, "%s/special_tokens_map.json", hf2);
        QT_CHECK(!qx_path_exists(p2));
        snprintf(p1, sizeof p1, "%s/config.json", hf2);
        QT_CHECK(file_has(p1, "\"torch_dtype\": \"float16\""));
        /* a second run without --force refuses the existing side file too */
        QT_EQ_INT(CLI("rotate %s %s --dtype f16 --quiet", dir, hf2), QX_EXIT_OUTPUT);
        /* qwen cannot be llama2.c */
        QT_EQ_INT(CLI("rotate %s %s/%s.bin --quiet", rg, g_tmp, fam[a]), QX_EXIT_PROCESS);
        QT_EQ_INT(count_lines(g_err), 1);
        QT_CHECK(strstr(g_err, "cannot be written as llama2.c") != NULL);
    }
}

/* ---- mismatches ---------------------------------------------------------------------------------- */

static void test_mismatch(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    qx_l2c_write_opts wo;
    char bin[600];
    snprintf(bin, sizeof bin, "%s", tmp_path("mm.bin"));   /* (tmp_path's buffers are reused) */
    cu_synth_desc(&d);
    QT_OK(qx_synth_model(&s, &d, &e));
    memset(&wo, 0, sizeof wo);
    QT_OK(qx_l2c_write_file(&s, bin, &wo, &e));
    qx_store_free(&s);
    QT_EQ_INT(CLI("rotate %s %s --format safetensors --quiet", bin, tmp_path("o.gguf")), QX_EXIT_USAGE);
    QT_CHECK(strstr(g_err, "ends in .gguf but --format is safetensors") != NULL && count_lines(g_err) == 1);
    QT_CHECK(!qx_path_exists(tmp_path("o.gguf")));
    QT_EQ_INT(CLI("rotate %s %s --format gguf --quiet", bin, tmp_path("o.bin")), QX_EXIT_USAGE);
    QT_CHECK(!qx_path_exists(tmp_path("o.bin")));
    QT_EQ_INT(CLI("rotate %s %s --format llama2c --quiet", bin, tmp_path("o.safetensors")), QX_EXIT_USAGE);
    QT_EQ_INT(CLI("rotate %s %s --format onnx --quiet", bin, tmp_path("o2")), QX_EXIT_USAGE);
    QT_CHECK(strstr(g_err, "'onnx' is not llama2c, safetensors or gguf") != NULL);
    /* an architecture the target format cannot hold: refused by name before any work */
    {
        qx_synth_desc od;
        qx_store os;
        qx_st_save_opts so;
        char odir[600];
        memset(&od, 0, sizeof od);
        od.arch = "opt";
        od.n_layers = 1;
        snprintf(odir, sizeof odir, "%s", tmp_path("opt_dir"));
        QT_OK(qx_synth_model(&os, &od, &e));
        memset(&so, 0, sizeof so);
        QT_OK(qx_st_save(&os, odir, &so, &e));
        qx_store_free(&os);
        QT_EQ_INT(CLI("rotate %s %s --quiet", odir, tmp_path("opt.gguf")), QX_EXIT_PROCESS);
        QT_CHECK(count_lines(g_err) == 1 && strstr(g_err, "architecture opt cannot be written as GGUF here (llama, qwen2, qwen3)") != NULL);
        QT_CHECK(!qx_path_exists(tmp_path("opt.gguf")));
    }
    /* --format with a name that says nothing: that format */
    QT_EQ_INT(CLI("rotate %s %s --format gguf --quiet", bin, tmp_path("plain")), 0);
    {
        size_t n = 0;
        unsigned char* b = read_all(tmp_path("plain"), &n);
        QT_CHECK(b && n > 4 && memcmp(b, "GGUF", 4) == 0);
        free(b);
    }
    /* a .safetensors OUT from llama2.c: one file with config.json beside it */
    {
        char sub[1100], cfg[1200];
        snprintf(sub, sizeof sub, "%s/single", g_tmp);
        mkdir(sub, 0777);
        snprintf(cfg, sizeof cfg, "%s/m.safetensors", sub);
        QT_EQ_INT(CLI("rotate %s %s --quiet", bin, cfg), 0);
        CHECK_DIFF(file_diff(bin, cfg, NULL), 2e-5, "llama2.c -> one .safetensors file");
        snprintf(cfg, sizeof cfg, "%s/config.json", sub);
        QT_CHECK(file_has(cfg, "LlamaForCausalLM") && file_has(cfg, "\"torch_dtype\": \"float32\""));
    }
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_convert")) return 1;
    QT_RUN(test_bin_gguf_safetensors);
    QT_RUN(test_qwen);
    QT_RUN(test_mismatch);
    cu_finish();
    return qt_finish("test_cli_convert");
}
