/* The example programs build and run: quickstart (the README's quick start: a rotated layer keeps
   its output and loses its outlier), user_adapter (a Meta-named Llama rotated through an adapter
   the program defines: it exits 0 only when the logits agree within 2e-5 of the largest and the
   weights did change) and hadamard_sizes (a full Hadamard for every model dimension of
   ALGORITHMS.md section 1; non-zero exit on a bad argument). Run from the repository root. */
#include "quarot.h"
#include "qt.h"

#include <sys/wait.h>

static int run(const char* cmd) {
    int st = system(cmd);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void test_quickstart(void) { QT_EQ_INT(run("./build/quickstart > /dev/null"), 0); }

static void test_user_adapter(void) {
    FILE* p = popen("./build/user_adapter", "r");
    char line[512];
    int said = 0;
    QT_CHECK(p != NULL);
    if (!p) return;
    while (fgets(line, sizeof line, p)) said += strstr(line, "adapter \"meta-llama\": rotated") != NULL;
    QT_EQ_INT(pclose(p), 0);
    QT_EQ_INT(said, 1);
}

static void test_hadamard_sizes(void) {
    FILE* p = popen("./build/hadamard_sizes", "r");
    char line[512];
    int full = 0, lines = 0;
    QT_CHECK(p != NULL);
    if (!p) return;
    while (fgets(line, sizeof line, p)) { lines++; full += strstr(line, "full Hadamard") != NULL; }
    QT_EQ_INT(pclose(p), 0);
    QT_CHECK(lines >= 24);
    QT_EQ_INT(full, lines);                     /* every listed model dimension gets one full Hadamard */
    QT_CHECK(run("./build/hadamard_sizes 86 > /dev/null") == 0);
    QT_CHECK(run("./build/hadamard_sizes abc > /dev/null 2>&1") != 0);
}

int main(void) {
    QT_RUN(test_quickstart);
    QT_RUN(test_user_adapter);
    QT_RUN(test_hadamard_sizes);
    return qt_finish("test_examples");
}
