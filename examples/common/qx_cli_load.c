/* qx_cli_load.c - qx_cli_load_model: format detection and loading (see qx_cli.h).
   For now: llama2.c checkpoints; safetensors and GGUF are added with their readers. */
#include "qx_cli.h"
#include "qx_llama2c.h"

#include <string.h>

quarot_result qx_cli_load_model(const char* path, const qx_load_opts* opts, qx_store* out, qx_err* err) {
    qx_l2c_read_opts ro;
    memset(&ro, 0, sizeof ro);
    if (opts) { ro.copy = opts->copy; ro.writable = opts->writable; }
    return qx_l2c_read_file(path, &ro, out, err);
}
