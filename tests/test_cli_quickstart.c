/* README's quick start, run as written there (the built binary, through system()) on stories260K:
     quarot rotate stories260K.bin model.gguf --rotation none        (convert: llama2.c -> GGUF + tokenizer)
     quarot calibrate model.gguf --text tinystories_calib.txt -o ctx (Adapt Rotation stage 1)
     quarot rotate model.gguf rot.gguf --rotation adapt --context ctx --online   (stage 2)
     quarot eval rot.gguf --text tinystories_eval.txt --columns none (its tokenizer and hooks found)
   with --windows / --steps / --rows cut so that it runs in seconds (8 eval windows, 3 under QT_QUICK).
   Truths: eval of rot.gguf finds its hook file (the digest matches) and its tokenizer (the GGUF's
   own tokenizer.ggml.*, converted from tok512.bin) with no extra flag, and its FP32 perplexity equals
   the original model.gguf's within 1e-6 relative (rotation preserves the function; measured
   differences are float rounding, ~1e-7). Without the hook file the same eval warns loudly and its
   FP32 perplexity moves by far more than that (the check can fail). Skips without ../shared. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_cli.h"
#include <math.h>

/* "FP32 to 9 digits:  no rotation X ..." -> X */
static int fp32_of(const char* out, double* v) {
    const char* p = strstr(out, "FP32 to 9 digits:  no rotation ");
    return p && sscanf(p + strlen("FP32 to 9 digits:  no rotation "), "%lf", v) == 1;
}

static void test_quickstart(void) {
    char model[600], ctx[600], rot[600], hooks[700], moved[720], b[4096], c[4096], t[4096];
    double p0 = 0, p1 = 0, p2 = 0;
    const int nw = qt_quick() ? 3 : 8;   /* eval windows (3 under qemu, where emulated floats are slow) */
    const char* p;
    /* (qt_shared_path's buffer is reused: copy each at once) */
    if (!(p = qt_shared_path("models/stories260K/stories260K.bin"))) { QT_SKIP("../shared stories260K absent"); return; }
    snprintf(b, sizeof b, "%s", p);
    if (!(p = qt_shared_path("data/tinystories_calib.txt"))) { QT_SKIP("../shared data absent"); return; }
    snprintf(c, sizeof c, "%s", p);
    if (!(p = qt_shared_path("data/tinystories_eval.txt"))) { QT_SKIP("../shared data absent"); return; }
    snprintf(t, sizeof t, "%s", p);
    snprintf(model, sizeof model, "%s", tmp_path("model.gguf"));
    snprintf(ctx, sizeof ctx, "%s", tmp_path("ctx"));
    snprintf(rot, sizeof rot, "%s", tmp_path("rot.gguf"));
    snprintf(hooks, sizeof hooks, "%s.quarot-online", rot);
    snprintf(moved, sizeof moved, "%s.away", hooks);
    QT_EQ_INT(CLI("rotate %s %s --rotation none", b, model), 0);
    QT_CHECK(strstr(g_out, "tokenizer.ggml.*") != NULL && strstr(g_out, "R1: identity 64") != NULL);
    QT_EQ_INT(CLI("calibrate %s --text %s -o %s --windows 4 --steps 3 --quiet", model, c, ctx), 0);
    QT_CHECK(strstr(g_out, "wrote ") != NULL);
    QT_EQ_INT(CLI("rotate %s %s --rotation adapt --context %s --online", model, rot, ctx), 0);
    QT_CHECK(strstr(g_out, "online hooks: 10") != NULL && qx_path_exists(hooks));
    /* eval picks up the tokenizer and the hooks */
    QT_EQ_INT(CLI("eval %s --text %s --columns none --rows W4A4 --windows %d", rot, t, nw), 0);
    QT_CHECKF(strstr(g_err, "online hooks:") != NULL && strstr(g_err, "(weights digest matches)") != NULL, "%s", g_err);
    QT_CHECK(strstr(g_out, "hooks      ") != NULL && strstr(g_out, ".quarot-online: 10 online hooks") != NULL);
    QT_CHECK(strstr(g_out, "tokenizer  ") != NULL && strstr(g_err, "WARNING") == NULL);
    QT_CHECKF(fp32_of(g_out, &p1), "%s", g_out);
    QT_EQ_INT(CLI("eval %s --text %s --columns none --rows W4A4 --windows %d --quiet", model, t, nw), 0);
    QT_CHECK(fp32_of(g_out, &p0));
    QT_CHECKF(p0 > 1 && fabs(p1 - p0) <= 1e-6 * p0, "FP32 perplexity %.9g (rot.gguf) vs %.9g (model.gguf)", p1, p0);
    printf("    FP32 perplexity, %d windows: model.gguf %.9g, rot.gguf (Adapt + online hooks) %.9g, rel diff %.1e (tol 1e-6)\n", nw, p0, p1,
           fabs(p1 - p0) / p0);
    /* without its hook file the rotated model is another function: loud, and the number moves */
    QT_CHECK(rename(hooks, moved) == 0);
    QT_EQ_INT(CLI("eval %s --text %s --columns none --rows W4A4 --windows %d --quiet", rot, t, nw), 0);
    QT_CHECK(strstr(g_err, "WARNING") != NULL && strstr(g_err, "needs its online hook file") != NULL);
    QT_CHECK(fp32_of(g_out, &p2) && fabs(p2 - p0) > 1e-3 * p0);
    printf("    without the hook file: FP32 perplexity %.6g (and a WARNING)\n", p2);
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_quickstart")) return 1;
    QT_RUN(test_quickstart);
    cu_finish();
    return qt_finish("test_cli_quickstart");
}
