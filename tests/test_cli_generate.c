/* `quarot generate` and `quarot eval --engine int` on stories260K (skipped without ../shared):
   - W4A4 with QuaRot (--quarot) produces the same text for 1 and 2 threads, and FP32 greedy text
     equals the reference forward pass's greedy decoding (qx_eval_generate, decoded here);
   - a seeded sampled run is reproducible and differs from greedy;
   - eval --engine int prints the same table layout with perplexities within 0.1% of the reference's;
   - bad input: a prompt longer than the context, an unknown --engine, bits out of range, a hook file
     for another model -> one error line and the documented exit code;
   - a hook file of other weights, given with --hooks (foreign) or left beside the model (stale), is
     refused by its weights digest (exit 2) as eval refuses it; the model's own is applied. */
#include "qt.h"
#include "cli_util.h"
#include "cli/qx_cli.h"
#include "eval/qx_eval.h"
#include "formats/qx_llama2c.h"
#include "tokenizer/qx_tokenizer.h"

#include <errno.h>
#include <math.h>
#include <unistd.h>

static const char *MODEL, *TEXT;

static void test_generate(void) {
    char a[1 << 16], b[1 << 16], ref[1 << 16];
    int rc;
    if (!MODEL) QT_SKIP("stories260K not in ../shared");
    rc = CLI("generate '%s' -n 80 --quarot --w-bits 4 --a-bits 4 --threads 1 --quiet", MODEL);
    QT_EQ_INT(rc, 0);
    strcpy(a, g_out);
    rc = CLI("generate '%s' -n 80 --quarot --w-bits 4 --a-bits 4 --threads 2 --quiet", MODEL);
    QT_EQ_INT(rc, 0);
    QT_CHECKF(strcmp(a, g_out) == 0, "W4A4 text differs between 1 and 2 threads:\n%s\n---\n%s", a, g_out);
    QT_CHECK(strlen(a) > 100);
    /* FP32 greedy = the reference forward's greedy tokens, decoded as run.c does */
    {
        qx_store s;
        qx_l2c_read_opts ro;
        qx_forward f;
        qx_tokenizer tk;
        qx_err e;
        int32_t out[80], prev = 1;
        size_t n = 0;
        int i;
        memset(&ro, 0, sizeof ro);
        ro.copy = 1;
        QT_OK(qx_l2c_read_file(MODEL, &ro, &s, &e));
        QT_OK(qx_forward_init(&f, &s, NULL, &e));
        QT_OK(qx_eval_generate(&f, 1, 80, out, &e));
        QT_OK(qx_tokenizer_load(&tk, qt_shared_path("models/stories260K/tok512.bin"), 512, &e));
        for (i = 0; i < 80 && out[i] != 1 && out[i] != 2; ++i) {
            size_t pl;
            const char* p = qx_tokenizer_decode(&tk, prev, out[i], &pl);
            if (p && qx_tokenizer_safe_piece(p, pl)) { memcpy(ref + n, p, pl); n += pl; }
            prev = out[i];
        }
        ref[n++] = '\n';
        ref[n] = '\0';
        qx_tokenizer_free(&tk);
        qx_forward_free(&f);
        qx_store_free(&s);
    }
    rc = CLI("generate '%s' -n 80 --quiet", MODEL);
    QT_EQ_INT(rc, 0);
    QT_CHECKF(strcmp(ref, g_out) == 0, "FP32 greedy text differs from the reference:\n%s\n---\n%s", ref, g_out);
    /* sampling: reproducible with a seed, different from greedy */
    rc = CLI("generate '%s' -n 60 --temp 1.0 --seed 7 --prompt 'Once upon a time' --quiet", MODEL);
    QT_EQ_INT(rc, 0);
    strcpy(b, g_out);
    rc = CLI("generate '%s' -n 60 --temp 1.0 --seed 7 --prompt 'Once upon a time' --quiet --threads 2", MODEL);
    QT_CHECK(rc == 0 && strcmp(b, g_out) == 0);
    QT_CHECK(strncmp(b, "Once upon a time", 16) == 0);
    QT_CHECK(strcmp(b, ref) != 0);
}

static void test_eval_engine(void) {
    double r1, r2, e1, e2;
    const char* p;
    int rc;
    const int nw = qt_quick() ? 2 : 3;   /* 2 under qemu, where the emulated engine is slow */
    if (!MODEL || !TEXT) QT_SKIP("stories260K not in ../shared");
    rc = CLI("eval '%s' --text '%s' --windows %d --w-bits 4 --a-bits 4 --quiet", MODEL, TEXT, nw);
    QT_EQ_INT(rc, 0);
    p = strstr(g_out, "\nW4A4 ");
    QT_CHECK(p && sscanf(p + 6, "%lf %lf", &r1, &r2) == 2);
    rc = CLI("eval '%s' --text '%s' --windows %d --w-bits 4 --a-bits 4 --quiet --engine int", MODEL, TEXT, nw);
    QT_EQ_INT(rc, 0);
    p = strstr(g_out, "\nW4A4 ");
    QT_CHECK(p && sscanf(p + 6, "%lf %lf", &e1, &e2) == 2);
    if (!p) return;
    QT_CHECKF(fabs(e2 - r2) <= 1e-3 * r2 && fabs(e1 - r1) <= 1e-3 * r1, "engine %.4f / %.4f vs reference %.4f / %.4f", e1, e2, r1, r2);
}

static void test_bad_input(void) {
    char prompt[4096], hooks[600];
    int i;
    if (!MODEL) QT_SKIP("stories260K not in ../shared");
    for (i = 0; i < 3000; ++i) prompt[i] = (char)('a' + i % 26);
    prompt[3000] = '\0';
    QT_EQ_INT(CLI("generate '%s' --prompt '%s' --quiet", MODEL, prompt), QX_EXIT_PROCESS);
    QT_CHECK(strstr(g_err, "longer than the context") != NULL && count_lines(g_err) == 1);
    QT_EQ_INT(CLI("generate '%s' --w-bits 9", MODEL), QX_EXIT_USAGE);
    QT_EQ_INT(CLI("generate '%s' --quarot --hooks x", MODEL), QX_EXIT_USAGE);
    QT_EQ_INT(CLI("eval '%s' --text '%s' --engine fast", MODEL, TEXT ? TEXT : "x"), QX_EXIT_USAGE);
    /* a hook file for another model (down_proj of 128 inputs; stories260K has 172) */
    snprintf(hooks, sizeof hooks, "%s/other.quarot-online", g_tmp);
    {
        quarot_online_list l;
        char text[8192];
        size_t need;
        quarot_online_list_init(&l, NULL);
        QT_OK(quarot_online_list_add(&l, 0, QUAROT_SITE_DOWN_INPUT, 128, 1, 128, 1, NULL));
        QT_OK(quarot_online_write(&l, text, sizeof text, &need));
        quarot_online_list_free(&l);
        QT_CHECK(write_str(hooks, text));
    }
    QT_EQ_INT(CLI("generate '%s' --hooks '%s' -n 5 --quiet", MODEL, hooks), QX_EXIT_PROCESS);
    QT_CHECK(strstr(g_err, "does not divide") != NULL && count_lines(g_err) == 1);
    QT_EQ_INT(CLI("generate '%s' --hooks /nonexistent/hooks -n 5", MODEL), QX_EXIT_INPUT);
}

static void test_foreign_and_stale_hooks(void) {
    char a[1024], b[1024], tok[4096];
    if (!MODEL) QT_SKIP("stories260K not in ../shared");
    snprintf(tok, sizeof tok, "%s", qt_shared_path("models/stories260K/tok512.bin"));
    snprintf(a, sizeof a, "%s", tmp_path("gh_a.bin"));
    snprintf(b, sizeof b, "%s", tmp_path("gh_b.bin"));
    QT_EQ_INT(CLI("rotate '%s' '%s' --online --seed 1", MODEL, a), 0);
    QT_EQ_INT(CLI("rotate '%s' '%s' --online --seed 2", MODEL, b), 0);
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 8", a, tok), 0);   /* its own: applied */
    QT_CHECKF(strstr(g_err, "weights digest matches") != NULL, "stderr: %s", g_err);
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 8 --hooks '%s.quarot-online'", a, tok, b), QX_EXIT_INPUT);   /* foreign */
    QT_CHECKF(strstr(g_err, "belongs to other weights") != NULL && count_lines(g_err) == 1, "stderr: %s", g_err);
    QT_CHECK(g_out[0] == '\0');
    {   /* stale: another model's hook file beside it */
        char cmd[3000];
        snprintf(cmd, sizeof cmd, "cp '%s.quarot-online' '%s.quarot-online'", b, a);
        QT_CHECK(system(cmd) == 0);
    }
    QT_EQ_INT(CLI("generate '%s' --tokenizer '%s' -n 8", a, tok), QX_EXIT_INPUT);
    QT_CHECKF(strstr(g_err, "belongs to other weights") != NULL && strstr(g_err, "gh_a.bin.quarot-online") != NULL,
              "stderr: %s", g_err);
    QT_CHECK(g_out[0] == '\0');
}

int main(int argc, char** argv) {
    static char model[4096], text[4096];
    (void)argc;
    if (!cu_start(argv[0], "test_cli_generate")) return 1;
    if (qt_shared_path("models/stories260K/stories260K.bin") && qt_shared_path("models/stories260K/tok512.bin")) {
        strcpy(model, qt_shared_path("models/stories260K/stories260K.bin"));
        MODEL = model;
    }
    if (qt_shared_path("data/tinystories_eval.txt")) {
        strcpy(text, qt_shared_path("data/tinystories_eval.txt"));
        TEXT = text;
    }
    QT_RUN(test_generate);
    QT_RUN(test_eval_engine);
    QT_RUN(test_bad_input);
    QT_RUN(test_foreign_and_stale_hooks);
    cu_finish();
    return qt_finish("test_cli_generate");
}
