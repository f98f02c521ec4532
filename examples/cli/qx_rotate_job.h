/* qx_rotate_job.h - `quarot rotate`'s work after option parsing, shared with `quarot run`.

   A job names the input and output paths, the output format and the rotation; qx_rotate_job_run
   loads IN (mapped views), picks OUT's format (qx_convert.h), applies the output-path rules of `quarot rotate --help` (what OUT is for each format, the
   hook file beside it, config.json for a single safetensors file, no overwrite without force, IN is
   never OUT), rotates layer by layer through qx_rotate_file, prints the summary on stdout and returns
   the exit code (one error line on stderr through cli on failure). Implemented in qx_cmd_rotate.c. */
#ifndef QX_ROTATE_JOB_H
#define QX_ROTATE_JOB_H

#include "cli/qx_cli.h"
#include "eval/qx_spin.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_rotate_job {
    const char* in;
    const char* out;
    quarot_rotation_kind rotation;           /* HADAMARD, RANDOM_ORTHOGONAL (also for R2), ADAPT, IDENTITY
                                                (no R1; with no_r2: a conversion that only fuses norms), or
                                                MATRIX (the learned rotations below) */
    const quarot_adapt_context* context;     /* ADAPT: stage 1's result (its seed and block are used) */
    const char* context_name;                /* for the summary: the context's file, or "stage 1 (in memory)" */
    qx_spin_rot* learned;                    /* MATRIX: learned R1 and per-layer R2 (checked against IN, made
                                                orthogonal in place before use) */
    const char* learned_name;                /* for messages and the summary: the rotation file */
    uint64_t seed;                           /* HADAMARD / RANDOM_ORTHOGONAL */
    int64_t block_size;                      /* -1 / 0: full hidden (ADAPT: the context's block) */
    int no_r2, online, r3;
    int64_t max_tp_size;                     /* 0 = 1 */
    quarot_layer_select down_proj_online;    /* DEFAULT/ALL, LIST or NONE (with online) */
    const int64_t* layers;                   /* LIST: sorted, distinct, >= 0 (checked against the model here) */
    int64_t n_layers;
    const char* layers_what;                 /* how the list was given, for messages ("--down-proj-online-layers") */
    quarot_dtype dtype;                      /* DEFAULT = as in IN */
    int threads;                             /* 0 = every online CPU (qx_rotate_file_opts.threads) */
    int force;
    int strict;                              /* a warned fallback (qx_rotcheck.h) is an error */
    const char* format;                      /* "llama2c", "safetensors", "gguf" or NULL: OUT's extension
                                                (.bin, .safetensors, .gguf), else IN's format; an extension
                                                naming another format than this is refused */
    int f64;                                 /* double arithmetic for every output dtype (qx_rotate_file_opts.f64_arithmetic) */
    int check;                               /* after writing: the logits of IN and of OUT (with its hooks) on
                                                QX_ROTATE_CHECK_TOKENS tokens, and the MoE routing flips */
    const char* mmproj;                      /* a llama.cpp qwen2vl text GGUF IN: its mmproj file, whose merger output
                                                (mm.2) is rotated by the same R1 into mmproj_out (NULL: none) */
    const char* mmproj_out;
    int text_only;                           /* a Hugging Face vision-language IN to a GGUF OUT: the text decoder alone
                                                (qx_rotate_file_opts.leave_out "visual."), llama.cpp's qwen2vl */
} qx_rotate_job;

#define QX_ROTATE_CHECK_TOKENS 16

int qx_rotate_job_run(qx_cli* cli, const qx_rotate_job* job);

#ifdef __cplusplus
}
#endif
#endif
