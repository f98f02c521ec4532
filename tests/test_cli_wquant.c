/* `quarot eval` with QuaRot's quantization levers (--w-quant gptq, --w-clip, ...), run as a user
   runs it (the quarot binary beside this test's directory, through $QT_RUNNER): bad input gives
   one error line and the documented exit code; a small GPTQ run on stories260K (../shared; skipped
   when absent) prints the perplexity table and the per-linear error summary, where GPTQ's output
   error is below RTN's for every linear type, and W4A16 with GPTQ is below W4A16 with RTN. The
   routing of a cell's weights (qx_wq_cell_staged): plain RTN and unquantized / packed weights stay
   with the forward pass, each of GPTQ, the clip search, migration, int8 down_proj and the group
   fallback alone sends a quantized row through the stage. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "eval/qx_wquant.h"

#include <errno.h>
#include <unistd.h>

static char M[4096], TXT[4096], CAL[4096];

static int stories(void) {
    const char* p = qt_shared_path("models/stories260K/stories260K.bin");
    if (!p) return 0;
    snprintf(M, sizeof M, "%s", p);
    if (!(p = qt_shared_path("data/tinystories_eval.txt"))) return 0;
    snprintf(TXT, sizeof TXT, "%s", p);
    if (!(p = qt_shared_path("data/tinystories_calib.txt"))) return 0;
    snprintf(CAL, sizeof CAL, "%s", p);
    return 1;
}

static void test_cell_routing(void) {
    qx_wq_cell c;
    int k;
    for (k = 0; k <= 5; ++k) {
        memset(&c, 0, sizeof c);
        c.w_bits = 4;
        if (k == 1) c.gptq = 1;
        if (k == 2) c.clip_search = 1;
        if (k == 3) c.migrate = 1;
        if (k == 4) c.int8_down_proj = 1;
        if (k == 5) c.group_fallback = 1;
        QT_CHECKF(qx_wq_cell_staged(&c) == (k > 0), "option %d, W4: staged %d", k, qx_wq_cell_staged(&c));
        c.w_bits = 16;   /* nothing to quantize */
        QT_CHECKF(!qx_wq_cell_staged(&c), "option %d, W16 staged", k);
        c.w_bits = 4;
        c.packed = 1;    /* the file's codes */
        QT_CHECKF(!qx_wq_cell_staged(&c), "option %d, packed staged", k);
    }
}

static void test_bad_input(void) {
    int rc;
    const char* shortf = tmp_path("short.txt");
    if (!stories()) { QT_SKIP("../shared/models/stories260K not found"); return; }
    rc = CLI("eval '%s' --text '%s' --w-quant gptq", M, TXT);
    QT_EQ_INT(rc, 1);
    QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "--calib-text"), "%s", g_err);
    QT_CHECK(g_out[0] == '\0');
    rc = CLI("eval '%s' --text '%s' --w-quant gptq --calib-text '%s' --w-bits 9", M, TXT, CAL);
    QT_EQ_INT(rc, 1);
    QT_CHECKF(count_lines(g_err) == 1, "%s", g_err);
    rc = CLI("eval '%s' --text '%s' --w-quant bogus", M, TXT);
    QT_EQ_INT(rc, 1);
    rc = CLI("eval '%s' --text '%s' --nsamples 4", M, TXT);     /* a GPTQ option without GPTQ */
    QT_EQ_INT(rc, 1);
    rc = CLI("eval '%s' --text '%s' --group-size 32 --windows 1 --quiet", M, TXT);   /* 32 does not divide 172 */
    QT_EQ_INT(rc, 4);
    QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "group"), "%s", g_err);
    /* ... unless down_proj is per channel (--int8-down-proj): then only hidden and heads x head_dim
       (64) must split, as in a Q4_0 file whose down_proj rows of 172 stay unquantized */
    rc = CLI("eval '%s' --text '%s' --group-size 32 --int8-down-proj --rows W4A16 --columns quarot --no-fp32 "
             "--windows 1 --seq-len 64 --quiet", M, TXT);
    QT_EQ_INT(rc, 0);
    QT_CHECKF(strstr(g_out, "W4A16") != NULL, "%s%s", g_out, g_err);
    QT_CHECK(write_str(shortf, "Once upon a time there was a cat.\n"));
    rc = CLI("eval '%s' --text '%s' --windows 1 --w-quant gptq --calib-text '%s' --seq-len 64 --quiet", M, TXT, shortf);
    QT_EQ_INT(rc, 4);
    QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "too short"), "%s", g_err);
    QT_CHECK(g_out[0] == '\0');
    rc = CLI("eval '%s' --text '%s' --windows 1 --w-quant gptq --calib-text '%s' --seq-len 64 --nsamples 100000 --quiet", M, TXT, CAL);
    QT_EQ_INT(rc, 4);
    QT_CHECKF(count_lines(g_err) == 1 && strstr(g_err, "too short"), "%s", g_err);
    remove(shortf);
}

/* the value in row `row`, column `col` (0-based) of the perplexity table */
static double cell(const char* out, const char* row, int col) {
    const char* p = strstr(out, "\nperplexity");
    char key[40];
    int k;
    double v = NAN;
    if (!p) return NAN;
    snprintf(key, sizeof key, "\n%s ", row);
    p = strstr(p, key);
    if (!p) return NAN;
    p += strlen(key);
    for (k = 0; k <= col; ++k) {
        char* end;
        while (*p == ' ') ++p;
        v = strtod(p, &end);
        if (end == p) return NAN;
        p = end;
        while (*p == ' ') ++p;
        if (*p == '(') { while (*p && *p != ')') ++p; if (*p) ++p; }
    }
    return v;
}

static void test_gptq_run(void) {
    int rc;
    double rtn, gp;
    const char* s;
    if (!stories()) { QT_SKIP("../shared/models/stories260K not found"); return; }
    rc = CLI("eval '%s' --text '%s' --windows 2 --seq-len 64 --columns quarot --no-fp32 --w-bits 4 --a-bits 16 --quiet", M, TXT);
    QT_EQ_INT(rc, 0);
    rtn = cell(g_out, "W4A16", 0);
    rc = CLI("eval '%s' --text '%s' --windows 2 --seq-len 64 --columns quarot --no-fp32 --w-bits 4 --a-bits 16 --w-quant gptq "
             "--calib-text '%s' --nsamples 16 --w-clip --w-asym --act-order --threads 2", M, TXT, CAL);
    QT_EQ_INT(rc, 0);
    gp = cell(g_out, "W4A16", 0);
    QT_CHECKF(gp < rtn, "W4A16 GPTQ %.4f, RTN %.4f\n%s", gp, rtn, g_out);
    QT_CHECKF(strstr(g_out, "GPTQ") && strstr(g_out, "out err/ref"), "%s", g_out);
    QT_CHECKF(strstr(g_err, "GPTQ loss") != NULL, "%s", g_err);   /* per-linear progress */
    /* every linear type: GPTQ's column below RTN's */
    s = strstr(g_out, "out err/ref");
    while (s && (s = strstr(s, "_proj")) != NULL) {
        double a, b;
        s += 5;
        if (sscanf(s, "%lf %lf", &a, &b) == 2) QT_CHECKF(a < b, "GPTQ %.4g >= RTN %.4g", a, b);
    }
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_wquant")) return 1;
    QT_RUN(test_cell_routing);
    QT_RUN(test_bad_input);
    QT_RUN(test_gptq_run);
    cu_finish();
    return qt_finish("test_cli_wquant");
}
