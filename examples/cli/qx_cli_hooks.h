/* qx_cli_hooks.h - the commands that run a model (eval, plot, inspect, calibrate) find and apply its
   online hooks: the hook file beside it (or --hooks FILE), checked against the model's weights
   digest and attached to its store (qx_model_hooks_attach, see qx_online.h). */
#ifndef QX_CLI_HOOKS_H
#define QX_CLI_HOOKS_H

#include "cli/qx_cli.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Attaches the hooks of the model at model_path to s (hooks_opt: --hooks FILE, or NULL to look
   beside the model). Says on stderr which file it applied; a model whose metadata says it needs
   hooks but has none gets a loud WARNING (its numbers are not the model's). Returns QX_EXIT_OK, or
   the exit code after printing the error line (a stale or unreadable hook file is refused). */
int qx_cli_model_hooks(qx_cli* cli, qx_store* s, const char* model_path, const char* hooks_opt);

#ifdef __cplusplus
}
#endif
#endif
