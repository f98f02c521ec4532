/* tools/check_layers.sh, the layering of the tool's folders under examples/ (support < formats <
   tokenizer < model < pipeline < eval, engine < cli): the real tree has no violation, and a copy of
   examples/ with one deliberate offence is refused (exit 1) with a line naming the file, its line
   and the include - an include of a folder above, one between the siblings eval/ and engine/ (both
   ways), a tool header without its folder (also from within its own folder, which compiles), a
   folder the layering does not place - while includes of the same folder and of folders below
   pass. The repository root is found from this program's path (BUILD/tests/test_layers), or else
   the working directory (make test runs from the root). */
#include "qt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static char g_root[4096];            /* the repository (holds tools/check_layers.sh and examples/) */
static char g_tmp[256];              /* scratch: one copy of examples/ at a time under g_tmp/copy */
static char g_out[1 << 16];          /* the last check's stdout and stderr */

static int is_file(const char* p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

/* Runs the check on root; its output in g_out, returns its exit status (-1 if it did not exit). */
static int check(const char* root) {
    char cmd[9000];
    FILE* p;
    size_t n = 0;
    int st;
    snprintf(cmd, sizeof cmd, "sh '%s/tools/check_layers.sh' '%s' 2>&1", g_root, root);
    g_out[0] = '\0';
    p = popen(cmd, "r");
    if (!p) return -1;
    while (n + 1 < sizeof g_out) {
        size_t got = fread(g_out + n, 1, sizeof g_out - 1 - n, p);
        if (got == 0) break;
        n += got;
    }
    g_out[n] = '\0';
    st = pclose(p);
    return st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int sh(const char* fmt, const char* a, const char* b) {
    char cmd[9000];
    snprintf(cmd, sizeof cmd, fmt, a, b);
    return system(cmd) == 0;
}

/* A fresh copy of the real examples/ under g_tmp/copy; returns that root (static buffer). */
static const char* fresh_copy(void) {
    static char root[512];
    snprintf(root, sizeof root, "%s/copy", g_tmp);
    if (!sh("rm -rf '%s' && mkdir -p '%s'", root, root)) return NULL;
    if (!sh("cp -R '%s/examples' '%s/'", g_root, root)) return NULL;
    return root;
}

/* Appends `line` to root/examples/rel; returns the line number it lands on (0 on failure). */
static int append_line(const char* root, const char* rel, const char* line) {
    char path[1024];
    FILE* f;
    int c, lines = 0, last = '\n';
    snprintf(path, sizeof path, "%s/examples/%s", root, rel);
    f = fopen(path, "rb");
    if (!f) return 0;
    while ((c = fgetc(f)) != EOF) { lines += c == '\n'; last = c; }
    fclose(f);
    f = fopen(path, "ab");
    if (!f) return 0;
    if (last != '\n') { fputc('\n', f); ++lines; }
    fprintf(f, "%s\n", line);
    return fclose(f) == 0 ? lines + 1 : 0;
}

/* The copy with `line` added to examples/rel must fail with exactly one violation, reported as
   "examples/rel:LINE: #include "inc": ..." and containing `rule`. */
static void expect_refused(const char* rel, const char* line, const char* inc, const char* rule) {
    const char* root = fresh_copy();
    char want[1024];
    int at, rc;
    QT_CHECKF(root != NULL, "cannot copy %s/examples to %s", g_root, g_tmp);
    if (!root) return;
    at = append_line(root, rel, line);
    QT_CHECKF(at > 0, "cannot append to %s", rel);
    if (at <= 0) return;
    rc = check(root);
    QT_CHECKF(rc == 1, "%s + '%s': exit %d, expected 1; output:\n%s", rel, line, rc, g_out);
    snprintf(want, sizeof want, "examples/%s:%d: #include \"%s\": ", rel, at, inc);
    QT_CHECKF(strstr(g_out, want) != NULL, "no line '%s' in:\n%s", want, g_out);
    QT_CHECKF(strstr(g_out, rule) != NULL, "the rule '%s' is not named in:\n%s", rule, g_out);
    QT_CHECKF(strstr(g_out, " files checked, 1 violations\n") != NULL, "expected exactly one violation:\n%s", g_out);
}

static void test_real_tree_is_layered(void) {
    int rc = check(g_root), files = 0, bad = -1;
    const char* s = strstr(g_out, "layers: ");
    QT_CHECKF(rc == 0, "exit %d on %s; output:\n%s", rc, g_root, g_out);
    QT_CHECKF(s && sscanf(s, "layers: %d files checked, %d violations", &files, &bad) == 2, "no summary in:\n%s", g_out);
    QT_CHECKF(files >= 50, "%d files checked (expected every examples/*/*.c and *.h)", files);
    QT_EQ_INT(bad, 0);
}

static void test_back_arrow(void) {
    expect_refused("support/qx_arena.c", "#include \"cli/qx_cli.h\"", "cli/qx_cli.h", "support/ may not include cli/");
    expect_refused("model/qx_forward.h", "#include \"pipeline/qx_rotate_file.h\"", "pipeline/qx_rotate_file.h",
                   "model/ may not include pipeline/");
    expect_refused("formats/qx_gguf.c", "#  include \"tokenizer/qx_tokenizer.h\"", "tokenizer/qx_tokenizer.h",
                   "formats/ may not include tokenizer/");
}

static void test_eval_engine_are_siblings(void) {
    expect_refused("engine/qx_engine.c", "#include \"eval/qx_eval.h\"", "eval/qx_eval.h", "siblings");
    expect_refused("eval/qx_eval.h", "#include \"engine/qx_engine.h\"", "engine/qx_engine.h", "siblings");
}

static void test_folderless_include(void) {
    /* within its own folder this compiles (the includer's directory is searched first) */
    expect_refused("support/qx_threads.c", "#include \"qx_arena.h\"", "qx_arena.h", "without its folder");
    expect_refused("cli/qx_cmd_run.c", "#include \"qx_eval.h\"", "qx_eval.h", "without its folder");
}

static void test_unplaced_folder(void) {
    const char* root = fresh_copy();
    char dir[1024];
    int rc;
    QT_CHECK(root != NULL);
    if (!root) return;
    snprintf(dir, sizeof dir, "%s/examples/extra", root);
    QT_CHECK(sh("mkdir -p '%s' && echo '#include \"quarot.h\"' > '%s/qx_extra.c'", dir, dir));
    rc = check(root);
    QT_CHECKF(rc == 1, "exit %d, expected 1; output:\n%s", rc, g_out);
    QT_CHECKF(strstr(g_out, "examples/extra/qx_extra.c: folder extra/ is not in the layering") != NULL, "output:\n%s", g_out);
}

static void test_allowed_includes_pass(void) {
    const char* root = fresh_copy();
    int rc;
    QT_CHECK(root != NULL);
    if (!root) return;
    /* same folder, every folder below, and quarot.h */
    QT_CHECK(append_line(root, "cli/qx_cli.c", "#include \"cli/qx_runcfg.h\"") > 0);
    QT_CHECK(append_line(root, "cli/qx_cli.c", "#include \"engine/qx_engine.h\"") > 0);
    QT_CHECK(append_line(root, "cli/qx_cli.c", "#include \"eval/qx_calib.h\"") > 0);
    QT_CHECK(append_line(root, "eval/qx_wquant.c", "#include \"pipeline/qx_convert.h\"") > 0);
    QT_CHECK(append_line(root, "pipeline/qx_convert.c", "#include \"model/qx_forward.h\"") > 0);
    QT_CHECK(append_line(root, "model/qx_synth.c", "#include \"tokenizer/qx_vocab.h\"") > 0);
    QT_CHECK(append_line(root, "tokenizer/qx_vocab.c", "#include \"formats/qx_json.h\"") > 0);
    QT_CHECK(append_line(root, "formats/qx_yaml.c", "#include \"support/qx_str.h\"") > 0);
    QT_CHECK(append_line(root, "support/qx_str.c", "#include \"quarot.h\"") > 0);
    rc = check(root);
    QT_CHECKF(rc == 0, "exit %d, expected 0; output:\n%s", rc, g_out);
    QT_CHECKF(strstr(g_out, " 0 violations") != NULL, "output:\n%s", g_out);
}

static int find_root(const char* argv0) {
    const char* slash = strrchr(argv0, '/');
    char probe[4200];
    if (slash) {
        snprintf(g_root, sizeof g_root, "%.*s/../..", (int)(slash - argv0), argv0);
        snprintf(probe, sizeof probe, "%s/tools/check_layers.sh", g_root);
        if (is_file(probe)) return 1;
    }
    snprintf(g_root, sizeof g_root, ".");
    return is_file("tools/check_layers.sh");
}

int main(int argc, char** argv) {
    (void)argc;
    if (!find_root(argv[0])) {
        printf("  cannot find tools/check_layers.sh (run from the repository root)\n");
        printf("test_layers: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    snprintf(g_tmp, sizeof g_tmp, "/tmp/qx_test_layers_XXXXXX");
    if (!mkdtemp(g_tmp)) {
        printf("  cannot create %s\n", g_tmp);
        printf("test_layers: 0 passed, 1 failed, 0 skipped\n");
        return 1;
    }
    QT_RUN(test_real_tree_is_layered);
    QT_RUN(test_back_arrow);
    QT_RUN(test_eval_engine_are_siblings);
    QT_RUN(test_folderless_include);
    QT_RUN(test_unplaced_folder);
    QT_RUN(test_allowed_includes_pass);
    if (!getenv("QT_KEEP") && !sh("rm -rf '%s'%s", g_tmp, "")) printf("  could not remove %s\n", g_tmp);
    return qt_finish("test_layers");
}
