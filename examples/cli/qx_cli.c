/* qx_cli.c - see qx_cli.h. */
#include "cli/qx_cli.h"
#include "eval/qx_eval.h"
#include "support/qx_file.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

void qx_cli_init(qx_cli* cli, const char* cmd, int quiet) {
    memset(cli, 0, sizeof *cli);
    cli->cmd = cmd;
    cli->quiet = quiet;
    cli->tty = isatty(2);
    cli->t0 = cli->last = qx_now();
}

static void qx__cli_close_progress(qx_cli* cli) {
    if (cli->progress_open) {
        fputc('\n', stderr);
        cli->progress_open = 0;
    }
}

int qx_cli_fail(qx_cli* cli, int code, const char* fmt, ...) {
    va_list ap;
    qx__cli_close_progress(cli);
    fprintf(stderr, "quarot %s: ", cli->cmd ? cli->cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return code;
}

int qx_cli_exit_for(quarot_result r) {
    switch (r) {
        case QUAROT_OK: return QX_EXIT_OK;
        case QUAROT_ERR_PARSE:
        case QUAROT_ERR_IO:
        case QUAROT_ERR_NOT_FOUND:
        case QUAROT_ERR_UNSUPPORTED_DTYPE:
        case QUAROT_ERR_NONFINITE:
        case QUAROT_ERR_OVERFLOW: return QX_EXIT_INPUT;
        case QUAROT_ERR_OUT_OF_MEMORY:
        case QUAROT_ERR_INTERNAL: return QX_EXIT_INTERNAL;
        default: return QX_EXIT_PROCESS;
    }
}

void qx_cli_phase(qx_cli* cli) {
    qx__cli_close_progress(cli);
    cli->t0 = cli->last = qx_now();
}

void qx_cli_progress(qx_cli* cli, int64_t done, int64_t total, const char* what) {
    double now = qx_now(), el = now - cli->t0;
    if (cli->quiet || el < 1.0 || now - cli->last < 0.2) return;
    cli->last = now;
    if (cli->tty) {
        fprintf(stderr, "\r%s %lld/%lld (%.1f/s, %.0f s)   ", what, (long long)done, (long long)total, (double)done / el, el);
        cli->progress_open = 1;
    } else {
        fprintf(stderr, "%s %lld/%lld (%.1f/s, %.0f s)\n", what, (long long)done, (long long)total, (double)done / el, el);
    }
    fflush(stderr);
}

void qx_cli_progress_end(qx_cli* cli, const char* what) {
    double el = qx_now() - cli->t0;
    if (cli->quiet) return;
    if (cli->progress_open || el >= 1.0) {
        qx__cli_close_progress(cli);
        fprintf(stderr, "%s done in %.1f s\n", what, el);
    }
}

void qx_cli_info(qx_cli* cli, const char* fmt, ...) {
    va_list ap;
    if (cli->quiet) return;
    qx__cli_close_progress(cli);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int qx_cli_end_of_options(int argc, char** argv) {
    return qx_cli_end_of_options_at(argc, argv, 2);
}

int qx_cli_end_of_options_at(int argc, char** argv, int first) {
    int i, k;
    for (i = first; i < argc && strcmp(argv[i], "--") != 0; ++i) {}
    if (i >= argc) return argc;
    for (k = i; k + 1 < argc; ++k) argv[k] = argv[k + 1];
    argv[--argc] = NULL;
    for (k = i; k < argc; ++k)
        if (argv[k][0] == '-' && argv[k][1] != '\0') {
            char* p = (char*)malloc(strlen(argv[k]) + 3);   /* lives as long as argv */
            if (!p) continue;
            p[0] = '.'; p[1] = '/';
            strcpy(p + 2, argv[k]);
            argv[k] = p;
        }
    return argc;
}

int qx_cli_int(qx_cli* cli, const char* opt, const char* s, int64_t lo, int64_t hi, int64_t* out) {
    char* end;
    long long v;
    errno = 0;
    v = strtoll(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < lo || v > hi) {
        qx_cli_fail(cli, QX_EXIT_USAGE, "%s: '%s' is not an integer in [%lld, %lld]", opt, s, (long long)lo, (long long)hi);
        return 0;
    }
    *out = (int64_t)v;
    return 1;
}

int qx_cli_float(qx_cli* cli, const char* opt, const char* s, double lo, double hi, double* out) {
    char* end;
    double v;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end != '\0' || !(v >= lo && v <= hi)) {
        qx_cli_fail(cli, QX_EXIT_USAGE, "%s: '%s' is not a number in [%g, %g]", opt, s, lo, hi);
        return 0;
    }
    *out = v;
    return 1;
}
