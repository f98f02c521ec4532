/* qx_rotcheck.h - what `quarot rotate` will build for each rotated dimension, before it runs, so
   that no fallback is silent (rotate's warnings and --strict, inspect's per-dimension table).

   For a config and the rotate options it predicts, with the processor's own rules (quarot.h
   >>processor, quarot__build_rotations):
     R1     hidden (or --block-size blocks): Hadamard of that order; when none exists the largest
            Hadamard block dividing it (block-diagonal), else a dense random orthogonal matrix;
            --rotation random: dense random orthogonal, no fallback
     R2     head_dim, per head (unless --no-r2), the same rules
     online o_proj across heads (n_heads / max_tp_size) and down_proj (intermediate / max_tp_size)
            with --online, q/k after RoPE (head_dim) with --r3: Hadamard of the order, else the
            largest Hadamard block dividing it; rotate fails when there is none (block 1)
   A block-diagonal rotation (or a dense random fallback) is a WARNING when its blocks are smaller
   than 64, or smaller than the --block-size asked for: a 2x2 block barely spreads outliers (an
   odd-multiple hidden size such as 90 = 45 x 2 gets 45 blocks of 2x2). Larger fallback blocks are
   reported as notes. rotate prints the warnings on stderr and in its summary; --strict makes any
   warning an error before anything is written. */
#ifndef QX_ROTCHECK_H
#define QX_ROTCHECK_H

#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_rotcheck_opts {   /* zero = rotate's defaults */
    quarot_rotation_kind rotation;  /* R1: DEFAULT/HADAMARD, RANDOM_ORTHOGONAL, ADAPT (its block given as block_size),
                                       IDENTITY (rotate --rotation none: nothing built), MATRIX (learned R1 and R2) */
    int64_t block_size;             /* <= 0: full hidden */
    int no_r2, online, r3;
    int64_t max_tp_size;            /* 0 = 1 */
} qx_rotcheck_opts;

#define QX_ROTCHECK_MIN_BLOCK 64

typedef struct qx_rotcheck_dim {
    char what[48];                  /* "R1 hidden", "R2 head_dim", "online down_proj", ... */
    int64_t n;                      /* the length each rotation covers (per block asked, per TP slice) */
    int64_t dim;                    /* the model dimension */
    int64_t block;                  /* Hadamard block built (n when full), 0 = dense random orthogonal */
    int fallback;                   /* not what was asked: block-diagonal or dense random */
    int warn;                       /* fallback with blocks < 64 (or < the block asked for) */
    int fails;                      /* rotate fails on this dimension */
    char text[200];                 /* one line: what rotate builds and why */
} qx_rotcheck_dim;

/* Fills out[0..return) (at most cap; 7 is always enough: with experts, the online R4 of the routed
   experts (expert_intermediate) and of the shared expert (shared_intermediate) too). */
int qx_rotcheck(const quarot_model_config* c, const qx_rotcheck_opts* o, qx_rotcheck_dim* out, int cap);

/* The same rule for the commands that rotate in memory (eval's QuaRot / Adapt columns, plot,
   calibrate): runs qx_rotcheck into out (*n_out entries) and prints each warning on stderr as rotate
   does ("quarot CMD: warning: [LABEL: ]WHAT (DIM): TEXT (--strict makes this an error)"). With
   strict the first warning is an error line instead (qx_cli_fail) and the result QX_EXIT_PROCESS;
   else QX_EXIT_OK. label (may be NULL) names the column / rotation. */
struct qx_cli;
int qx_rotcheck_cli(struct qx_cli* cli, const char* model, const char* label, const quarot_model_config* c,
                    const qx_rotcheck_opts* o, int strict, qx_rotcheck_dim* out, int cap, int* n_out);
/* The summary lines of those warnings on stdout, one per warned dimension:
   "PREFIXWARNING WHAT (DIM): TEXT"; returns their count. */
int qx_rotcheck_summary(const char* prefix, const qx_rotcheck_dim* d, int n);

#ifdef __cplusplus
}
#endif
#endif
