/* `quarot eval` and `quarot calibrate` layer by layer: on a synthetic llama2.c model of
   8 decoder layers (80 MiB in f32), the peak resident set each command reports (VmHWM of its own
   process) stays within a stated bound of one decoder layer plus the embeddings, far below the
   model; the temporary rotated copies (eval's QuaRot column, calibrate's norm fusion) leave nothing
   in $TMPDIR; and the layer-wise table equals the one computed in this process with the model
   copied to memory (in-memory QuaRot, f32 copies at init): same digits.

   Bound (like test_cli_rotate's): 8 MiB (binary, libc, tokenizer, text, windows, allocator slack)
   + 1.5 x (one decoder layer in f32 + the embedding). What is resident at the peak: the pages of
   the layer being run (the mapped file, dropped after each layer and each converted tensor), or
   the layer buffer of a quantized setting plus one tensor's pages, or during the rotation the
   copies of one layer; the KV cache and activations of a 64-token window are < 1 MiB here.
   calibrate runs with --max-samples 64 --block-size 64 so that stage 1's own memory (captured rows
   and optimizer, stated in its --help, independent of the layer count) stays below 1 MiB. Not
   checked under sanitizers or qemu (their allocators and emulators add their own memory) nor
   under QT_QUICK (smaller model, where the constant dominates): there the commands still run and
   their tables are still compared. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "fmt_util.h"
#include "cli/qx_cli.h"
#include "eval/qx_eval.h"
#include "eval/qx_evalkit.h"
#include "formats/qx_gguf.h"
#include "formats/qx_llama2c.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"
#include "tokenizer/qx_tokenizer.h"
#include "formats/qx_load.h"

#include <dirent.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char g_model[512], g_text[512], g_tmpdir[512];
static qx_synth_desc g_d;
static double g_layer_mib, g_embed_mib, g_model_mib;

static int setup(void) {
    char dir[600], tokp[700];
    FILE* f;
    int i, quick = qt_quick();
    static const char* const words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "then", "it", "ran", "in", "there", "with", "her", "end"};
    memset(&g_d, 0, sizeof g_d);
    g_d.arch = "llama";
    g_d.seed = 5;
    g_d.vocab = SYN_VOCAB;
    g_d.rope_interleaved = 1;
    g_d.hidden = quick ? 128 : 512;
    g_d.intermediate = quick ? 256 : 1024;
    g_d.n_layers = 8;
    g_d.n_heads = 8;
    g_d.n_kv_heads = 8;
    g_d.head_dim = g_d.hidden / 8;
    g_d.max_seq = 256;
    g_d.tied = 1;
    snprintf(dir, sizeof dir, "%s/m", g_tmp);
    mkdir(dir, 0755);
    snprintf(g_model, sizeof g_model, "%s/m/model.bin", g_tmp);
    snprintf(tokp, sizeof tokp, "%s/m/tokenizer.bin", g_tmp);
    if (!cu_write_synth_l2c(&g_d, g_model) || !write_tokenizer(tokp)) return 0;
    snprintf(g_text, sizeof g_text, "%s/text.txt", g_tmp);
    f = fopen(g_text, "wb");
    if (!f) return 0;
    for (i = 0; i < 1500; ++i) fprintf(f, "%s%s", words[(i * 7 + i / 5) % 15], i % 11 == 10 ? ".\n" : " ");
    if (fclose(f) != 0) return 0;
    snprintf(g_tmpdir, sizeof g_tmpdir, "%s/tmpdir", g_tmp);
    mkdir(g_tmpdir, 0755);
    g_layer_mib = (double)(4 * g_d.hidden * g_d.hidden + 3 * g_d.hidden * g_d.intermediate + 2 * g_d.hidden) * 4.0 / 1048576.0;
    g_embed_mib = (double)(g_d.vocab * g_d.hidden) * 4.0 / 1048576.0;
    g_model_mib = g_layer_mib * (double)g_d.n_layers + g_embed_mib;
    return 1;
}

/* Peak resident set of a layer-wise command: the binary and libc with allocator slack (8 MiB), then
   per decoder layer in flight its mapped input pages and its f32 copy (eval also keeps the rotated
   copy's pages of the same layer): 2.5 layers and the embedding. Measured on the 8-layer model
   (80.7 MiB): eval 31 MiB, calibrate 15.5 MiB; holding the model would be over 80. */
static void check_peak(const char* what, double peak) {
    double bound = 8.0 + 2.5 * (g_layer_mib + g_embed_mib);
    printf("    %s: model %.1f MiB (8 layers of %.1f MiB, embedding %.1f MiB): peak resident %.1f MiB (bound %.1f MiB)\n", what,
           g_model_mib, g_layer_mib, g_embed_mib, peak, bound);
    QT_CHECKF(peak > 0, "%s: no peak reported", what);
    if (!UNDER_ASAN && !qt_emulated() && !qt_quick()) {
        QT_CHECKF(peak <= bound, "%s: peak resident %.1f MiB > bound %.1f MiB (model %.1f MiB)", what, peak, bound, g_model_mib);
        QT_CHECK(bound < 0.45 * g_model_mib);
    }
}

/* Two windows of 64 tokens of g_text under the tokenizer at tokp, windowed as the tool does (one
   stream, BOS first): the in-memory runs score the same tokens as `quarot eval`. */
static void text_windows(const char* tokp, int64_t vocab, qx_windows* win) {
    qx_tokenizer tok;
    qx_ppl_opts po;
    qx_err e;
    char* text = NULL;
    size_t len = 0;
    int32_t* stream;
    int64_t n = 0, cap;
    memset(win, 0, sizeof *win);
    QT_OK(qx_tokenizer_load(&tok, tokp, (int32_t)vocab, &e));
    QT_OK(qx_ek_read_file(g_text, &text, &len, &e));
    cap = qx_tokenizer_max_tokens(len);
    stream = (int32_t*)malloc((size_t)cap * sizeof *stream);
    QT_CHECK(stream != NULL);
    QT_OK(qx_tokenizer_encode(&tok, text, len, 0, 0, stream, cap, &n, &e));
    memset(&po, 0, sizeof po);
    po.seq_len = 64;
    po.max_windows = 2;
    QT_OK(qx_windows_stream(win, stream, n, &po, &e));
    free(stream);
    free(text);
    qx_tokenizer_free(&tok);
}

/* The perplexity of one table cell, as printed ("%.4f"), from the in-memory path of this process. */
static void in_memory_table(double ppl[2][2]) {
    qx_store mapped, mem, rot;
    qx_windows win;
    quarot_online_list hooks;
    qx_load_opts lo;
    qx_err e;
    int i, j;
    char tokp[700];
    memset(&lo, 0, sizeof lo);
    ppl[0][0] = ppl[0][1] = ppl[1][0] = ppl[1][1] = -1.0;
    QT_OK(qx_load_model(g_model, &lo, &mapped, &e));
    QT_OK(qx_store_clone(&mapped, &mem));   /* owned copies: the in-memory path (no mapping) */
    qx_store_free(&mapped);
    snprintf(tokp, sizeof tokp, "%s/m/tokenizer.bin", g_tmp);
    text_windows(tokp, mem.config.vocab, &win);
    QT_OK(qx_ek_quarot(&mem, 0, 0, &rot, &hooks, NULL, 0, NULL, NULL, &e));
    for (i = 0; i < 2; ++i) {          /* rows FP32, W4A4 */
        qx_ek_setting st;
        qx_fake_quant_opts q;
        memset(&st, 0, sizeof st);
        st.w_bits = i ? 4 : 16;
        st.a_bits = i ? 4 : 16;
        st.kv_bits = 16;
        qx_ek_setting_quant(&st, 0, 0.0, &q);
        for (j = 0; j < 2; ++j) {      /* columns no rotation, QuaRot */
            qx_ek_forward ef;
            qx_ppl_result res;
            QT_OK(qx_ek_forward_init(&ef, j ? &rot : &mem, j ? &hooks : NULL, &q, NULL, NULL, &e));
            QT_CHECK(!ef.f.opts.stream_weights);
            QT_OK(qx_eval_windows(&ef.f, &win, NULL, NULL, &res, &e));
            qx_ek_forward_free(&ef);
            ppl[i][j] = res.ppl;
        }
    }
    quarot_online_list_free(&hooks);
    qx_store_free(&rot);
    qx_windows_free(&win);
    qx_store_free(&mem);
}

static void test_eval_layerwise(void) {
    char pre[700], want[64];
    double ppl[2][2];
    int i;
    snprintf(pre, sizeof pre, "TMPDIR='%s'", g_tmpdir);
    QT_EQ_INT(run_prog(pre, g_bin, "eval '%s' --text '%s' --seq-len 64 --windows 2 --w-bits 4 --a-bits 4 --threads 1",
                       g_model, g_text), 0);
    QT_CHECKF(strstr(g_out, "QuaRot") != NULL, "no table: %s", g_out);
    check_peak("eval", field_after(g_err, "peak resident "));
    QT_CHECKF(fu_count_entries(g_tmpdir) == 0, "eval left files in %s", g_tmpdir);
    in_memory_table(ppl);
    for (i = 0; i < 2; ++i) {   /* "FP32   x   y (..%)" and "W4A4   x   y (..%)": the same digits */
        const char* row = strstr(g_out, i ? "\nW4A4 " : "\nFP32 ");
        double a = -1, b = -1;
        QT_CHECKF(row != NULL, "row %d missing: %s", i, g_out);
        if (!row) continue;
        QT_CHECK(sscanf(row + 6, "%lf %lf", &a, &b) == 2);
        snprintf(want, sizeof want, "%.4f %.4f", ppl[i][0], ppl[i][1]);
        {
            char got[64];
            snprintf(got, sizeof got, "%.4f %.4f", a, b);
            QT_CHECKF(strcmp(got, want) == 0, "row %d: layer-wise %s, in memory %s", i, got, want);
            printf("    %s: layer-wise %s, in memory %s\n", i ? "W4A4" : "FP32", got, want);
        }
    }
}

static void test_calibrate_layerwise(void) {
    char pre[700], ctx[600];
    snprintf(pre, sizeof pre, "TMPDIR='%s'", g_tmpdir);
    snprintf(ctx, sizeof ctx, "%s/ctx.bin", g_tmp);
    QT_EQ_INT(run_prog(pre, g_bin, "calibrate '%s' --text '%s' -o '%s' --seq-len 64 --windows 3 --steps 2 --max-samples 64 --block-size 64 --threads 1 --quiet",
                       g_model, g_text, ctx), 0);
    check_peak("calibrate", field_after(g_out, "peak resident "));
    QT_CHECKF(fu_count_entries(g_tmpdir) == 0, "calibrate left files in %s", g_tmpdir);
    remove(ctx);
}

/* f16 GGUF and f16 safetensors directories (2 layers, small): eval runs layer-wise (the QuaRot copy
   goes through a temporary file of the same format) and its table matches the in-memory path
   (the model loaded as owned copies): the "no rotation" column digit for digit (the same f32
   values), the QuaRot column within 1e-4 relative (the rotated f16 weights may round differently
   on the two paths: the in-memory one rotates the f16 tensors in place, the layer-wise one widens
   to f32 and rounds once when writing, as `quarot rotate`; measured 1e-8). */
static void test_formats_f16(void) {
    int k;
    for (k = 0; k < 2; ++k) {
        qx_synth_desc d;
        qx_store s, mem, rot;
        qx_err e;
        qx_load_opts lo;
        quarot_online_list hooks;
        qx_windows win;
        char path[700], pre[700], tokp[700];
        double ppl[2] = {0, 0}, a = -1, b = -1;
        const char* row;
        int j;
        cu_synth_desc(&d);
        d.n_layers = 2;
        d.rope_interleaved = k == 0 ? 1 : 0;
        QT_OK(qx_synth_model(&s, &d, &e));
        if (k == 0) {
            qx_gguf_save_opts go;
            memset(&go, 0, sizeof go);
            go.dtype = QUAROT_DTYPE_F16;
            snprintf(path, sizeof path, "%s/f16.gguf", g_tmp);
            QT_OK(qx_gguf_save(&s, path, &go, &e));
        } else {
            qx_st_save_opts so;
            memset(&so, 0, sizeof so);
            so.dtype = QUAROT_DTYPE_F16;
            snprintf(path, sizeof path, "%s/f16_st", g_tmp);
            QT_OK(qx_st_save(&s, path, &so, &e));
        }
        qx_store_free(&s);
        snprintf(tokp, sizeof tokp, "%s/m/tokenizer.bin", g_tmp);
        snprintf(pre, sizeof pre, "TMPDIR='%s'", g_tmpdir);
        QT_EQ_INT(run_prog(pre, g_bin, "eval '%s' --tokenizer '%s' --text '%s' --seq-len 64 --windows 2 --w-bits 4 --a-bits 4 --threads 1 --quiet",
                           path, tokp, g_text), 0);
        QT_CHECKF(fu_count_entries(g_tmpdir) == 0, "eval left files in %s", g_tmpdir);
        row = strstr(g_out, "\nW4A4 ");
        QT_CHECKF(row && sscanf(row + 6, "%lf %lf", &a, &b) == 2, "%s: no W4A4 row: %s", path, g_out);
        /* the in-memory path */
        memset(&lo, 0, sizeof lo);
        lo.copy = 1;
        QT_OK(qx_load_model(path, &lo, &mem, &e));
        text_windows(tokp, mem.config.vocab, &win);
        QT_OK(qx_ek_quarot(&mem, 0, 0, &rot, &hooks, NULL, 0, NULL, NULL, &e));
        for (j = 0; j < 2; ++j) {
            qx_ek_setting st;
            qx_fake_quant_opts q;
            qx_ek_forward ef;
            qx_ppl_result res;
            memset(&st, 0, sizeof st);
            st.w_bits = 4;
            st.a_bits = 4;
            st.kv_bits = 16;
            qx_ek_setting_quant(&st, 0, 0.0, &q);
            QT_OK(qx_ek_forward_init(&ef, j ? &rot : &mem, j ? &hooks : NULL, &q, NULL, NULL, &e));
            QT_OK(qx_eval_windows(&ef.f, &win, NULL, NULL, &res, &e));
            qx_ek_forward_free(&ef);
            ppl[j] = res.ppl;
        }
        {
            char got[32], want[32];
            snprintf(got, sizeof got, "%.4f", a);
            snprintf(want, sizeof want, "%.4f", ppl[0]);
            QT_CHECKF(strcmp(got, want) == 0, "%s: no rotation %s, in memory %s", path, got, want);
            QT_CHECKF(fabs(b - ppl[1]) <= 1e-4 * ppl[1], "%s: QuaRot %.4f, in memory %.4f", path, b, ppl[1]);
            printf("    %s (f16): W4A4 no rotation %s (in memory %s), QuaRot %.4f (in memory %.4f, %+.2e relative)\n",
                   k == 0 ? "gguf" : "safetensors dir", got, want, b, ppl[1], (b - ppl[1]) / ppl[1]);
        }
        quarot_online_list_free(&hooks);
        qx_store_free(&rot);
        qx_windows_free(&win);
        qx_store_free(&mem);
    }
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_layerwise")) return 1;
    if (!setup()) {
        printf("  cannot set up (%s, %s)\n", g_tmp, g_bin);
        printf("test_cli_layerwise: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    QT_RUN(test_eval_layerwise);
    QT_RUN(test_calibrate_layerwise);
    QT_RUN(test_formats_f16);
    cu_finish();
    return qt_finish("test_cli_layerwise");
}
