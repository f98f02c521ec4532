/* qx_cli.h - conventions shared by the subcommands of the `quarot` tool (examples/quarot.c).

   Exit codes (documented in `quarot --help` and docs/tool.md):
     0  success
     1  usage: unknown subcommand or option, missing or malformed argument
     2  input: a file is missing, unreadable, truncated, malformed or of an unsupported kind
     3  output: the output exists (and --force was not given) or cannot be written
     4  processing: the model cannot be rotated / evaluated as asked (e.g. a size with no Hadamard
        matrix and no fallback, an inconsistent config, a calibration that found no activations)
     5  internal error or out of memory
   Errors: exactly one line on stderr, "quarot <cmd>: <file or object>: <reason>".
   Progress: on stderr, only for steps that take more than about a second, rewritten in place on a
   terminal and one line per update otherwise; --quiet silences it (errors are still printed). */
#ifndef QX_CLI_H
#define QX_CLI_H

#include "support/qx_store.h"

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

enum { QX_EXIT_OK = 0, QX_EXIT_USAGE = 1, QX_EXIT_INPUT = 2, QX_EXIT_OUTPUT = 3, QX_EXIT_PROCESS = 4, QX_EXIT_INTERNAL = 5 };

typedef struct qx_cli {
    const char* cmd;        /* subcommand name, for messages */
    int quiet;
    int tty;                /* stderr is a terminal */
    double t0;              /* start of the current progress phase (seconds) */
    double last;            /* last progress print */
    int progress_open;      /* a progress line is being rewritten (needs a newline before others) */
} qx_cli;

void qx_cli_init(qx_cli* cli, const char* cmd, int quiet);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 3, 4)))
#endif
/* Print the one error line and return `code` (so: `return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: ...", path);`). */
int qx_cli_fail(qx_cli* cli, int code, const char* fmt, ...);
/* Map a library / example result code to an exit code (input errors vs. processing vs. memory). */
int qx_cli_exit_for(quarot_result r);
/* Start a progress phase; then qx_cli_progress(cli, done, total, "layer") prints "<what> i/n
   (x.x/s)" when at least a second has passed since the phase started and ~0.2 s since the last
   print; qx_cli_progress_end prints the closing line (elapsed time) if anything was shown. */
void qx_cli_phase(qx_cli* cli);
void qx_cli_progress(qx_cli* cli, int64_t done, int64_t total, const char* what);
void qx_cli_progress_end(qx_cli* cli, const char* what);
#if defined(__GNUC__) || defined(__clang__)
__attribute__((format(printf, 2, 3)))
#endif
/* An informational line on stderr (suppressed by --quiet). */
void qx_cli_info(qx_cli* cli, const char* fmt, ...);

/* "--" ends the options (POSIX): removes the first "--" after the command from argv and turns every
   later argument that starts with '-' (but "-") into "./" + it, the same relative path that no
   option parser takes for an option. Returns the new argc. */
int qx_cli_end_of_options(int argc, char** argv);
/* The same from argv[first] on (the dispatcher's argv: 2, past the command's name; a command's: 1). */
int qx_cli_end_of_options_at(int argc, char** argv, int first);

/* Option parsing is qx_opts.h's. Numbers with range checks (its integer and number options); print
   a usage error and return 0 on failure. */
int qx_cli_int(qx_cli* cli, const char* opt, const char* s, int64_t lo, int64_t hi, int64_t* out);
int qx_cli_float(qx_cli* cli, const char* opt, const char* s, double lo, double hi, double* out);

/* The subcommands (each in examples/cli/qx_cmd_<name>.c). argv[0] is the subcommand name. */
int qx_cmd_rotate(int argc, char** argv);
int qx_cmd_eval(int argc, char** argv);
int qx_cmd_inspect(int argc, char** argv);
int qx_cmd_plot(int argc, char** argv);
int qx_cmd_demo(int argc, char** argv);
int qx_cmd_calibrate(int argc, char** argv);
int qx_cmd_run(int argc, char** argv);
int qx_cmd_tokenize(int argc, char** argv);
int qx_cmd_quantize(int argc, char** argv);
int qx_cmd_generate(int argc, char** argv);

#ifdef __cplusplus
}
#endif
#endif
