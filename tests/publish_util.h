/* publish_util.h - what a kill during a command's publish steps may leave at its output, for the
   reliability tests (test_reliability.c, test_kill_families.c): a snapshot of a file or directory
   (name, size and FNV-1a hash of each visible file, in name order), the temporaries a run leaves
   beside an output, and the kill loop itself. Include after qt.h and cli_util.h. */
#ifndef PUBLISH_UTIL_H
#define PUBLISH_UTIL_H

#include <dirent.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/qx_file.h"

QT_UNUSED static int pu_sh(const char* fmt, ...) {
    char cmd[8192];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    return system(cmd);
}

QT_UNUSED static uint64_t pu_fnv(const unsigned char* p, size_t n) {
    uint64_t h = 1469598103934665603ull;
    size_t i;
    for (i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

QT_UNUSED static int pu_cmp_names(const void* a, const void* b) { return strcmp(*(char* const*)a, *(char* const*)b); }

/* A directory's visible files as one text: "name size fnv\n" per file in name order (hidden entries
   are not part of an output). A file path gives its own line; a missing path "absent". */
QT_UNUSED static void pu_snapshot(const char* path, char* out, size_t cap) {
    DIR* d = opendir(path);
    struct dirent* de;
    char* names[256];
    int n = 0, i;
    size_t len = 0;
    out[0] = '\0';
    if (!d) {
        size_t sz = 0;
        unsigned char* b = read_all(path, &sz);
        if (b) snprintf(out, cap, "%zu %016llx\n", sz, (unsigned long long)pu_fnv(b, sz));
        else snprintf(out, cap, "absent\n");
        free(b);
        return;
    }
    while ((de = readdir(d)) != NULL && n < 256)
        if (de->d_name[0] != '.') names[n++] = strdup(de->d_name);
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, pu_cmp_names);
    for (i = 0; i < n; ++i) {
        char* p = qx_path_join(path, names[i]);
        size_t sz = 0;
        unsigned char* b = read_all(p, &sz);
        len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s %zu %016llx\n", names[i], sz,
                                (unsigned long long)(b ? pu_fnv(b, sz) : 0));
        free(b);
        free(p);
        free(names[i]);
    }
}

/* Entries in dir whose name starts with "." + base + ".tmp-" (what a run leaves beside `base`). */
QT_UNUSED static int pu_temporaries_beside(const char* dir, const char* base) {
    DIR* d = opendir(dir);
    struct dirent* de;
    char pre[512];
    int n = 0;
    snprintf(pre, sizeof pre, ".%.200s.tmp-", base);
    if (!d) return -1;
    while ((de = readdir(d)) != NULL) n += strncmp(de->d_name, pre, strlen(pre)) == 0;
    closedir(d);
    return n;
}

/* `quarot ARGS --force` writing OUT (a file or a directory, named `base` inside g_tmp) over a copy of
   OLD (a previous output), killed before its k-th publish step (QX_FAULT_PUBLISH=k) for k = 1, 2, ...
   until a run completes: after every killed run OUT must be exactly OLD or exactly NEW (the same
   command's output made beforehand), and the completed run must leave NEW with no temporary beside
   it. `what` names the case in failures. */
QT_UNUSED static void pu_kill_loop(const char* what, const char* base, const char* old_out, const char* new_out, const char* args) {
    static char s_old[16384], s_new[16384], s_now[16384];
    char out[1024], pre[64];
    int k, rc = -1, interrupted = 0;
    snprintf(out, sizeof out, "%s/%s", g_tmp, base);
    pu_snapshot(old_out, s_old, sizeof s_old);
    pu_snapshot(new_out, s_new, sizeof s_new);
    QT_CHECKF(strcmp(s_old, s_new) != 0 && !strstr(s_old, "absent"), "%s: the old and the new output must differ", what);
    for (k = 1; k < 80; ++k) {
        pu_sh("rm -rf '%s' && cp -a '%s' '%s'", out, old_out, out);
        snprintf(pre, sizeof pre, "QX_FAULT_PUBLISH=%d", k);
        rc = run_prog(pre, g_bin, "%s --force", args);
        pu_snapshot(out, s_now, sizeof s_now);
        if (rc != 86) {
            QT_EQ_INT(rc, 0);
            QT_CHECKF(strcmp(s_now, s_new) == 0, "%s: completed run: not the new output:\n%s", what, s_now);
            break;
        }
        ++interrupted;
        QT_CHECKF(strcmp(s_now, s_old) == 0 || strcmp(s_now, s_new) == 0, "%s killed before publish step %d: a mix of old and new:\n%s",
                  what, k, s_now);
    }
    QT_CHECKF(interrupted >= 1, "%s: the fault hook never interrupted the run", what);
    QT_EQ_INT(rc, 0);
    QT_EQ_INT(pu_temporaries_beside(g_tmp, base), 0);
    printf("    %s: killed before each of %d publish steps: old or new output every time\n", what, interrupted);
}

#endif
