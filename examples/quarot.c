/* quarot - rotate LLM checkpoints so they quantize to 4 bits, and measure what that buys.

   The command-line face of quarot.h. It reads llama2.c checkpoints, Hugging Face safetensors
   directories and GGUF files, rotates them with the library's QuaRot processor (norm fusion, R1/R2
   folded into the weights, optional online Hadamard hooks written beside the output), and evaluates
   perplexity in FP32 and under fake quantization with and without rotation. `quarot demo` tells the
   whole story on a small synthetic model generated in-process (and on stories260K when ../shared is
   present). Each subcommand lives in examples/cli/qx_cmd_<name>.c; this file only dispatches.

       quarot rotate IN OUT [options]        rotate a checkpoint (same format out)
       quarot quantize IN OUT [options]      rotate + quantize: GGUF Q4_0/Q8_0, or packed W4A4 safetensors
       quarot eval MODEL --text FILE         perplexity table: FP32 / quantized, without and with rotation
       quarot inspect MODEL                  config, tensors, Hadamard constructions, outlier statistics
       quarot plot MODEL --text FILE -o SVG  per-channel max |activation| before / after rotation
       quarot calibrate MODEL --text FILE -o CONTEXT   Adapt Rotation stage 1
       quarot run CONFIG.yaml                msModelSlim-style YAML (quarot / adapt_rotation processors)
       quarot tokenize MODEL --prompt TEXT   token ids and pieces of a model's tokenizer
       quarot generate MODEL [--prompt TEXT] text from the W4A4 inference engine (examples/engine/)
       quarot demo                           the whole story on an embedded default

   Exit codes: 0 ok, 1 usage, 2 input, 3 output, 4 processing, 5 internal (see qx_cli.h). */
#include "cli/qx_cli.h"
#include "support/qx_file.h"

#include <stdio.h>
#include <string.h>

typedef struct qx_subcommand {
    const char* name;
    int (*fn)(int argc, char** argv);
    const char* summary;
} qx_subcommand;

static const qx_subcommand commands[] = {
    {"rotate", qx_cmd_rotate, "rotate a checkpoint (llama2.c .bin, safetensors, GGUF) into the same format"},
    {"quantize", qx_cmd_quantize, "rotate + quantize: GGUF Q4_0/Q8_0 for llama.cpp, or packed W4A4 safetensors"},
    {"eval", qx_cmd_eval, "perplexity in FP32 and fake-quantized, without and with rotation"},
    {"inspect", qx_cmd_inspect, "config, tensors, Hadamard construction per dimension, outlier statistics"},
    {"plot", qx_cmd_plot, "SVG of per-channel max |activation| before and after rotation"},
    {"calibrate", qx_cmd_calibrate, "Adapt Rotation stage 1: learn the rotation from calibration text"},
    {"run", qx_cmd_run, "run an msModelSlim-style YAML configuration"},
    {"tokenize", qx_cmd_tokenize, "a model's tokenizer on a text: token ids and pieces (like llama-tokenize)"},
    {"generate", qx_cmd_generate, "generate text with the W4A4 inference engine (integer kernels, online hooks)"},
    {"demo", qx_cmd_demo, "the whole story on an embedded default model (what `make demo` runs)"},
};

static void usage(FILE* f) {
    size_t i;
    fprintf(f, "quarot %s - rotate LLM weights so they quantize to 4 bits (QuaRot / Adapt Rotation)\n\n"
               "usage: quarot <command> [options]      quarot <command> --help for its options\n\ncommands:\n",
            quarot_version_string());
    for (i = 0; i < sizeof commands / sizeof commands[0]; ++i) fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit codes: 0 ok, 1 usage, 2 input (missing/malformed/unsupported file), 3 output (exists\n"
               "without --force, cannot write), 4 processing (cannot rotate/evaluate as asked), 5 internal.\n"
               "Errors are one line on stderr; progress goes to stderr (--quiet silences it).\n");
}

int main(int argc, char** argv) {
    size_t i;
    if (argc < 2) { usage(stderr); return QX_EXIT_USAGE; }
    argc = qx_cli_end_of_options(argc, argv);   /* "--": what follows are operands */
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) { usage(stdout); return 0; }
    if (strcmp(argv[1], "--version") == 0) { printf("quarot %s (%s)\n", quarot_version_string(), quarot_simd_name()); return 0; }
    for (i = 0; i < sizeof commands / sizeof commands[0]; ++i)
        if (strcmp(argv[1], commands[i].name) == 0) {
            /* a mapped input truncated while it is read (SIGBUS) becomes an input error naming the
               file, the temporaries removed (qx_sigbus_cleanup) */
            static char what[64];
            snprintf(what, sizeof what, "quarot %s", commands[i].name);
            qx_sigbus_cleanup(what);
            return commands[i].fn(argc - 1, argv + 1);
        }
    fprintf(stderr, "quarot: unknown command '%s' (quarot --help lists them)\n", argv[1]);
    return QX_EXIT_USAGE;
}
