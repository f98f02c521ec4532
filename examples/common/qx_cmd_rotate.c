/* qx_cmd_rotate.c - `quarot rotate` (being written). */
#include "qx_cli.h"

int qx_cmd_rotate(int argc, char** argv) {
    qx_cli cli;
    (void)argc;
    (void)argv;
    qx_cli_init(&cli, "rotate", 0);
    return qx_cli_fail(&cli, QX_EXIT_INTERNAL, "not available in this build yet");
}
