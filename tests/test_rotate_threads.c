/* `quarot rotate --threads N`: the output files are byte-identical for N = 1, 2 and 3, for f16 and
   bf16 checkpoints, with and without --online, and with --rotation random (the processor splits each rotate command's rows or
   columns into tasks on the pool; every task's arithmetic is independent of the split). The model
   is a small random llama whose tensors span several tasks (more than 64 rows / columns), with
   a non-power-of-two intermediate size (320 = 20 * 16) so the Kronecker transform runs too. The
   same with the embedding and lm_head in row windows. */
#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "formats/qx_safetensors.h"

static void test_threads_identical(void) {
    static const quarot_dtype dts[] = {QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    int d, online, t;
    for (d = 0; d < 2; ++d) {
        char in[512];
        snprintf(in, sizeof in, "%s/in_%s", g_tmp, quarot_dtype_name(dts[d]));
        QT_CHECK(cu_save_llama_st(in, 5, 128, 320, 4, 32, 200, dts[d]));
        for (online = 0; online < 3; ++online) {   /* offline, --online, --rotation random (GEMM inside the tasks) */
            char out[3][600], f0[700], f1[700];
            for (t = 0; t < 3; ++t) {
                snprintf(out[t], sizeof out[t], "%s/out_%s_%d_t%d", g_tmp, quarot_dtype_name(dts[d]), online, t + 1);
                QT_EQ_INT(CLI("rotate %s %s --threads %d --quiet%s", in, out[t], t + 1,
                              online == 1 ? " --online" : online == 2 ? " --rotation random" : ""), 0);
            }
            for (t = 1; t < 3; ++t) {
                snprintf(f0, sizeof f0, "%s/model.safetensors", out[0]);
                snprintf(f1, sizeof f1, "%s/model.safetensors", out[t]);
                QT_CHECKF(same_file(f0, f1), "%s %s: --threads 1 and %d differ", quarot_dtype_name(dts[d]), online == 1 ? "online" : online ? "random" : "offline", t + 1);
                if (online == 1) {
                    snprintf(f0, sizeof f0, "%s/quarot_online.txt", out[0]);
                    snprintf(f1, sizeof f1, "%s/quarot_online.txt", out[t]);
                    QT_CHECK(same_file(f0, f1));
                }
            }
            /* the rotation did something: the output differs from the input */
            snprintf(f0, sizeof f0, "%s/model.safetensors", in);
            snprintf(f1, sizeof f1, "%s/model.safetensors", out[0]);
            QT_CHECK(!same_file(f0, f1));
        }
    }
    QT_EQ_INT(CLI("rotate a b --threads 0"), 1);   /* usage error */
}

/* The embedding and lm_head in row windows (QX_GLOBAL_WINDOW_ROWS=7 turns them on for this small
   model): --threads 1, 2 and 3 give the bytes of whole copies; the summary says so. */
static void test_threads_windows(void) {
    char in[512], out[4][600], f0[700], f1[700];
    int t;
    snprintf(in, sizeof in, "%s/in_win", g_tmp);
    QT_CHECK(cu_save_llama_st(in, 6, 128, 320, 4, 32, 200, QUAROT_DTYPE_BF16));
    for (t = 0; t < 4; ++t) {
        snprintf(out[t], sizeof out[t], "%s/out_win_t%d", g_tmp, t);
        if (t == 0) QT_EQ_INT(CLI("rotate %s %s --threads 2 --online", in, out[t]), 0);
        else QT_EQ_INT(run_prog("QX_GLOBAL_WINDOW_ROWS=7", g_bin, "rotate %s %s --threads %d --online", in, out[t], t), 0);
        QT_CHECKF((strstr(g_out, "embedding and lm_head: 29 row windows of 7 rows") != NULL) == (t > 0), "summary: %s", g_out);
    }
    for (t = 1; t < 4; ++t) {
        snprintf(f0, sizeof f0, "%s/model.safetensors", out[0]);
        snprintf(f1, sizeof f1, "%s/model.safetensors", out[t]);
        QT_CHECKF(same_file(f0, f1), "windows on %d thread(s) differ from whole copies", t);
        snprintf(f0, sizeof f0, "%s/quarot_online.txt", out[0]);
        snprintf(f1, sizeof f1, "%s/quarot_online.txt", out[t]);
        QT_CHECK(same_file(f0, f1));
    }
}

int main(int argc, char** argv) {
    const char* slash = strrchr(argv[0], '/');
    size_t dl = slash ? (size_t)(slash - argv[0]) : 0;
    (void)argc;
    snprintf(g_bin, sizeof g_bin, "%.*s%squarot", (int)dl, argv[0], dl ? "/../" : "../");
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qx_rotate_threads_XXXXXX");
    if (!mkdtemp(g_tmp) || !qx_path_exists(g_bin)) {
        printf("  cannot set up (%s, %s)\n", g_tmp, g_bin);
        printf("test_rotate_threads: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    QT_RUN(test_threads_identical);
    QT_RUN(test_threads_windows);
    {
        char cmd[512];
        snprintf(cmd, sizeof cmd, "rm -rf %s", g_tmp);
        if (system(cmd) != 0) printf("  could not remove %s\n", g_tmp);
    }
    return qt_finish("test_rotate_threads");
}
