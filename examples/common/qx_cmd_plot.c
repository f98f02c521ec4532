/* qx_cmd_plot.c - `quarot plot` (being written). */
#include "qx_cli.h"

int qx_cmd_plot(int argc, char** argv) {
    qx_cli cli;
    (void)argc;
    (void)argv;
    qx_cli_init(&cli, "plot", 0);
    return qx_cli_fail(&cli, QX_EXIT_INTERNAL, "not available in this build yet");
}
