/* qx_cli_hooks.c - see qx_cli_hooks.h. */
#include "cli/qx_cli_hooks.h"
#include "model/qx_online.h"

#include <stdio.h>

int qx_cli_model_hooks(qx_cli* cli, qx_store* s, const char* model_path, const char* hooks_opt) {
    qx_hooks_status st = QX_HOOKS_NONE;
    char used[1024];
    qx_err e;
    quarot_result r = qx_model_hooks_attach(s, model_path, hooks_opt, &st, used, sizeof used, &e);
    if (r != QUAROT_OK) return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    if (st == QX_HOOKS_ATTACHED)
        qx_cli_info(cli, "online hooks: %s (weights digest matches), applied in every forward pass", used);
    else if (st == QX_HOOKS_UNBOUND)
        qx_cli_info(cli, "online hooks: %s, applied; it names no weights digest (an older file), so it cannot be "
                         "checked against %s", used, model_path);
    else if (st == QX_HOOKS_MISSING)   /* loud even under --quiet: every number that follows is wrong */
        fprintf(stderr, "WARNING: %s was written by `quarot rotate --online` and needs its online hook file, which is "
                        "not there (looked for %s); without it the model computes another function and every number "
                        "below is meaningless. Pass --hooks FILE.\n", model_path, hooks_opt ? hooks_opt : "the file beside it");
    return QX_EXIT_OK;
}
