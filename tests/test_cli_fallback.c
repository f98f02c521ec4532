/* No silent fallbacks (the built binary, run with system()): a rotated dimension without a Hadamard
   matrix of its order gets a block-diagonal (or dense random) rotation, and `quarot rotate` says so.
   Truths used:
   - hidden 90 has no Hadamard matrix (90 = 2 x 45, not a multiple of 4): R1 becomes 45 blocks of 2x2;
     n_heads 6 likewise gives the online o_proj rotation 3 blocks of 2. rotate warns on stderr and in
     its summary, still computes the same function (logits within 2e-5 of the largest, f32), and
     --strict refuses before writing anything (exit 4, one stderr line, no output).
   - --block-size 18 on hidden 144: no Hadamard of order 18, so blocks of 16 (smaller than asked):
     a warning even though 16 is what a user asking for 16 would get silently.
   - A model whose dimensions all have Hadamard matrices gets no warning, and --strict passes.
   - inspect prints, per dimension, what rotate builds, and exits 0 wherever `rotate` succeeds:
     intermediate 171 (odd) has no Hadamard block at all, so `rotate --online` fails (exit 4) while
     plain `rotate` succeeds; inspect (with its statistics) then exits 0 and says online fails.
   - eval (QuaRot and Adapt columns), plot and calibrate rotate in memory with the same rules: the
     same warnings on stderr (named by column) and in their summaries, and their --strict refuses
     hidden 90 before any work (exit 4, one stderr line, no output file). */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_cli.h"
#include "model/qx_forward.h"
#include "model/qx_online.h"
#include "formats/qx_safetensors.h"
#include "formats/qx_load.h"

static int save_synth(const char* dir, int64_t hidden, int64_t inter, int64_t heads) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    qx_st_save_opts o;
    int ok;
    memset(&d, 0, sizeof d);
    d.arch = "llama";
    d.seed = 7;
    d.hidden = hidden;
    d.intermediate = inter;
    d.n_heads = heads;
    d.n_kv_heads = 2;
    d.head_dim = 16;
    d.n_layers = 2;
    if (qx_synth_model(&s, &d, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    memset(&o, 0, sizeof o);
    ok = qx_st_save(&s, dir, &o, &e) == QUAROT_OK;
    if (!ok) printf("    save: %s\n", e.msg);
    qx_store_free(&s);
    return ok;
}

static double logit_diff(const char* a, const char* b, const char* hooks_path) {
    qx_store sa, sb;
    qx_load_opts lo;
    qx_err e;
    quarot_online_list l;
    qx_forward fa, fb;
    qx_forward_opts oa, ob;
    qx_online_ctx c;
    int32_t tok[16];
    int64_t T = 16, V, i;
    float *la = NULL, *lb = NULL;
    double diff = 0, amax = 0, out = 1e30;
    size_t n = 0;
    char* text;
    char err[256];
    memset(&lo, 0, sizeof lo);
    lo.copy = 1;
    quarot_online_list_init(&l, NULL);
    if (qx_load_model(a, &lo, &sa, &e) != QUAROT_OK) { printf("    %s\n", e.msg); return out; }
    if (qx_load_model(b, &lo, &sb, &e) != QUAROT_OK) { printf("    %s\n", e.msg); qx_store_free(&sa); return out; }
    text = (char*)read_all(hooks_path, &n);
    if (!text || quarot_online_read(&l, text, n, err, sizeof err) != QUAROT_OK) printf("    hooks %s unreadable\n", hooks_path);
    free(text);
    V = sa.config.vocab;
    for (i = 0; i < T; ++i) tok[i] = (int32_t)((i * 29 + 3) % V);
    la = (float*)malloc((size_t)(T * V) * sizeof(float));
    lb = (float*)malloc((size_t)(T * V) * sizeof(float));
    memset(&oa, 0, sizeof oa);
    memset(&ob, 0, sizeof ob);
    qx_online_ctx_init(&c, &l);
    ob.online = qx_online_hooks;
    ob.online_user = &c;
    if (la && lb && qx_forward_init(&fa, &sa, &oa, &e) == QUAROT_OK) {
        if (qx_forward_window(&fa, tok, T, la, &e) == QUAROT_OK && qx_forward_init(&fb, &sb, &ob, &e) == QUAROT_OK) {
            if (qx_forward_window(&fb, tok, T, lb, &e) == QUAROT_OK && c.status == QUAROT_OK && c.calls > 0) {
                for (i = 0; i < T * V; ++i) {
                    double dd = fabs((double)la[i] - (double)lb[i]);
                    if (dd > diff) diff = dd;
                    if (fabs((double)la[i]) > amax) amax = fabs((double)la[i]);
                }
                out = diff / (amax > 0 ? amax : 1);
            }
            qx_forward_free(&fb);
        }
        qx_forward_free(&fa);
    }
    qx_online_ctx_free(&c);
    quarot_online_list_free(&l);
    free(la);
    free(lb);
    qx_store_free(&sa);
    qx_store_free(&sb);
    return out;
}

static void test_warn_and_strict(void) {
    char m[600], o[600], s[600], hooks[1100];
    snprintf(m, sizeof m, "%s", tmp_path("m90"));   /* (tmp_path's buffers are reused) */
    snprintf(o, sizeof o, "%s", tmp_path("m90_rot"));
    snprintf(s, sizeof s, "%s", tmp_path("m90_strict"));
    double d;
    if (!save_synth(m, 90, 172, 6)) { QT_CHECK(0); return; }
    QT_EQ_INT(CLI("rotate %s %s --online --quiet", m, o), 0);
    QT_CHECK(strstr(g_err, "warning: R1 hidden (90): no Hadamard of order 90: block-diagonal, 45 blocks of Hadamard 2") != NULL);
    QT_CHECK(strstr(g_err, "warning: online o_proj heads (6): no Hadamard of order 6: block-diagonal, 3 blocks of Hadamard 2") != NULL);
    QT_CHECK(strstr(g_err, "--strict makes this an error") != NULL);
    QT_CHECK(strstr(g_out, "WARNING R1 hidden (90)") != NULL && strstr(g_out, "WARNING online o_proj heads (6)") != NULL);
    QT_CHECK(strstr(g_out, "R1: block-diagonal 45 x hadamard") != NULL);   /* what the processor built agrees */
    snprintf(hooks, sizeof hooks, "%s/quarot_online.txt", o);
    d = logit_diff(m, o, hooks);
    QT_CHECKF(d <= 2e-5, "logits differ by %.3g", d);
    printf("    hidden 90 (45 blocks of 2x2), --online: logits max rel diff %.2e (tol 2e-05)\n", d);
    QT_EQ_INT(CLI("rotate %s %s --strict --quiet", m, s), QX_EXIT_PROCESS);
    QT_EQ_INT(count_lines(g_err), 1);
    QT_CHECK(strstr(g_err, "--strict: R1 hidden (90)") != NULL);
    QT_CHECK(!qx_path_exists(s));
    /* R1 fine, only the online heads rotation is small: --strict still refuses it with --online */
    {
        char m2[600];
        snprintf(m2, sizeof m2, "%s", tmp_path("m64h6"));
        if (!save_synth(m2, 64, 172, 6)) { QT_CHECK(0); return; }
        QT_EQ_INT(CLI("rotate %s %s --strict --quiet", m2, tmp_path("m64h6_a")), 0);   /* no online: nothing small */
        QT_CHECK(strstr(g_err, "warning") == NULL);
        QT_EQ_INT(CLI("rotate %s %s --strict --online --quiet", m2, tmp_path("m64h6_b")), QX_EXIT_PROCESS);
        QT_CHECK(strstr(g_err, "online o_proj heads (6)") != NULL && !qx_path_exists(tmp_path("m64h6_b")));
    }
    /* a block size asked for that has no Hadamard matrix: smaller blocks, a warning */
    {
        char m3[600];
        snprintf(m3, sizeof m3, "%s", tmp_path("m144"));
        if (!save_synth(m3, 144, 172, 4)) { QT_CHECK(0); return; }
        QT_EQ_INT(CLI("rotate %s %s --block-size 18 --quiet", m3, tmp_path("m144_r")), 0);
        QT_CHECK(strstr(g_err, "R1 hidden (144): no Hadamard of order 18: block-diagonal, 9 blocks of Hadamard 16 (smaller than the block asked for)") != NULL);
        QT_EQ_INT(CLI("rotate %s %s --block-size 16 --strict --quiet", m3, tmp_path("m144_s")), 0);   /* as asked: fine */
        QT_CHECK(strstr(g_err, "warning") == NULL);
        QT_EQ_INT(CLI("rotate %s %s --strict --quiet", m3, tmp_path("m144_t")), 0);   /* H_144 = H_36 (x) H_4 exists */
    }
}

static void test_inspect(void) {
    char m[600];
    snprintf(m, sizeof m, "%s", tmp_path("m171"));
    if (!save_synth(m, 64, 171, 4)) { QT_CHECK(0); return; }
    QT_EQ_INT(CLI("rotate %s %s --quiet", m, tmp_path("m171_r")), 0);
    QT_EQ_INT(CLI("rotate %s %s --online --quiet", m, tmp_path("m171_o")), QX_EXIT_PROCESS);
    QT_EQ_INT(CLI("inspect %s --tokens 16 --quiet", m), 0);
    QT_CHECK(strstr(g_out, "online down_proj         171  no Hadamard of order 171 or of any block dividing it: rotate fails") != NULL);
    QT_CHECK(strstr(g_out, "=> quarot rotate: ok; with --online --r3: fails") != NULL);
    QT_CHECK(strstr(g_out, "activation outliers: 16 tokens") != NULL && strstr(g_out, "no online rotation") != NULL);
    QT_EQ_INT(CLI("inspect %s --no-stats", tmp_path("m90")), 0);
    QT_CHECK(strstr(g_out, "R1 hidden                 90  WARNING: no Hadamard of order 90: block-diagonal, 45 blocks of Hadamard 2") != NULL);
    QT_CHECK(strstr(g_out, "R2 head_dim               16  Hadamard 16") != NULL);
}

/* eval (QuaRot / Adapt columns), plot and calibrate rotate in memory: the same warnings as rotate on
   stderr and in their summaries, and --strict refuses before any work (exit 4, one line, no output) */
static void test_in_memory(void) {
    char m[600], toks[600], ctx[600], svg[600], m2[600];
    char ids[4096];
    size_t n = 0;
    int i;
    snprintf(m, sizeof m, "%s", tmp_path("m90"));   /* from test_warn_and_strict */
    snprintf(toks, sizeof toks, "%s", tmp_path("ids.txt"));
    snprintf(ctx, sizeof ctx, "%s", tmp_path("m90.ctx"));
    snprintf(svg, sizeof svg, "%s", tmp_path("m90.svg"));
    snprintf(m2, sizeof m2, "%s", tmp_path("m64h6"));
    if (!qx_path_exists(m) && !save_synth(m, 90, 172, 6)) { QT_CHECK(0); return; }
    for (i = 0; i < 200; ++i) n += (size_t)snprintf(ids + n, sizeof ids - n, "%d ", (i * 7 + 3) % 50);
    QT_CHECK(write_str(toks, ids));
    /* eval: the QuaRot column */
    QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 32 --quiet", m, toks), 0);
    QT_CHECKF(strstr(g_err, "quarot eval: warning: QuaRot: R1 hidden (90): no Hadamard of order 90: block-diagonal, 45 blocks of Hadamard 2") != NULL, "%s", g_err);
    QT_CHECK(strstr(g_err, "quarot eval: warning: QuaRot: online o_proj heads (6)") != NULL);
    QT_CHECK(strstr(g_out, "QuaRot     WARNING R1 hidden (90)") != NULL && strstr(g_out, "QuaRot     WARNING online o_proj heads (6)") != NULL);
    QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 32 --strict --quiet", m, toks), QX_EXIT_PROCESS);
    QT_EQ_INT(count_lines(g_err), 1);
    QT_CHECK(strstr(g_err, "--strict: QuaRot: R1 hidden (90)") != NULL && g_out[0] == '\0');
    /* calibrate: H of the full hidden size */
    QT_EQ_INT(CLI("calibrate %s --tokens %s --seq-len 32 --steps 2 -o %s --quiet", m, toks, ctx), 0);
    QT_CHECKF(strstr(g_err, "quarot calibrate: warning: R1 hidden (90): no Hadamard of order 90") != NULL, "%s", g_err);
    QT_CHECK(strstr(g_out, "  WARNING R1 hidden (90)") != NULL);
    QT_EQ_INT(CLI("calibrate %s --tokens %s --seq-len 32 --steps 2 -o %s.strict --strict --quiet", m, toks, ctx), QX_EXIT_PROCESS);
    QT_EQ_INT(count_lines(g_err), 1);
    QT_CHECK(strstr(g_err, "--strict: R1 hidden (90)") != NULL);
    QT_CHECK(!qx_path_exists(tmp_path("m90.ctx.strict")));
    /* eval with the Adapt column from that context */
    if (qx_path_exists(ctx)) {
        QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 32 --context %s --quiet", m, toks, ctx), 0);
        QT_CHECK(strstr(g_err, "quarot eval: warning: Adapt: R1 hidden (90)") != NULL);
        QT_CHECK(strstr(g_out, "Adapt      WARNING R1 hidden (90)") != NULL);
    }
    /* plot */
    QT_EQ_INT(CLI("plot %s --tokens %s -o %s --quiet", m, toks, svg), 0);
    QT_CHECKF(strstr(g_err, "quarot plot: warning: R1 hidden (90)") != NULL, "%s", g_err);
    QT_CHECK(strstr(g_out, "QuaRot: WARNING R1 hidden (90)") != NULL);
    QT_EQ_INT(CLI("plot %s --tokens %s -o %s.strict.svg --strict --quiet", m, toks, svg), QX_EXIT_PROCESS);
    QT_CHECK(count_lines(g_err) == 1 && strstr(g_err, "--strict: R1 hidden (90)") != NULL);
    QT_CHECK(!qx_path_exists(tmp_path("m90.svg.strict.svg")));
    /* hidden 64, 6 heads: only the online heads rotation is small; without it nothing to say */
    if (!qx_path_exists(m2) && !save_synth(m2, 64, 172, 6)) { QT_CHECK(0); return; }
    QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 32 --no-online --strict --quiet", m2, toks), 0);
    QT_CHECK(strstr(g_err, "warning") == NULL && strstr(g_out, "WARNING") == NULL);
    QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 32 --strict --quiet", m2, toks), QX_EXIT_PROCESS);
    QT_CHECK(strstr(g_err, "online o_proj heads (6)") != NULL);
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_cli_fallback")) return 1;
    QT_RUN(test_warn_and_strict);
    QT_RUN(test_inspect);
    QT_RUN(test_in_memory);
    cu_finish();
    return qt_finish("test_cli_fallback");
}
