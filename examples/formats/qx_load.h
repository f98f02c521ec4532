/* qx_load.h - one loader for every model format the tool reads.

   qx_load_model loads a model of any supported format into out (initialized here): a llama2.c
   checkpoint (.bin: legacy v0 or version-1 float32 export), a Hugging Face directory (config.json +
   safetensors, sharded or not) or a .safetensors file with config.json beside it, a quarot packed
   W4A4 file, or a GGUF file (llama, qwen2, qwen3; F32/F16/BF16).
   The format is detected from the path and the first bytes. copy = 1 gives owned, writable tensors;
   0 gives read-only views of file mappings where the format allows (call qx_store_make_owned before
   writing). out->source_format names what was read: "llama2c-v0", "llama2c-v1", "safetensors" (a
   file), "safetensors-dir" or "gguf". Errors (one line in err, "file: reason"): missing or
   unreadable path, unknown format, truncated or malformed files, unsupported dtypes, architectures
   or quantized GGUF tensors; a .safetensors file without config.json beside it is refused (its
   architecture is unknown). Detection rules: examples/formats/qx_load.c. */
#ifndef QX_LOAD_H
#define QX_LOAD_H

#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_load_opts {
    int copy;
    int writable;           /* views mapped copy-on-write (edits never reach the file) */
} qx_load_opts;
quarot_result qx_load_model(const char* path, const qx_load_opts* opts, qx_store* out, qx_err* err);

#ifdef __cplusplus
}
#endif
#endif
