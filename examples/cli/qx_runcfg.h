/* qx_runcfg.h - msModelSlim's YAML configuration, the part `quarot run` executes.

   Layout (msModelSlim's modelslim_v1 service; every key checked, unknown keys are errors):
     apiversion: modelslim_v1 | modelslim_v1_multi_stage          (required)
     metadata: {...}                                              (accepted, not read)
     <name>: &anchor {...}                                        (top-level templates for aliases,
                                                                   e.g. &default_w4a4_dynamic; not read)
     spec:
       prior:                                                     (at most one stage, one processor)
         - process:
             - type: adapt_rotation
               stage: 1
               steps: 20              int 1..1000
               quant_dtype: int4      "int4" | "int8"
               layer_type: [up_proj]  non-empty list of non-empty strings (< 128 bytes)
               block_size: -1         -1 or a power of two
               max_samples: 2048      int 1..100000
           dataset: FILE             (default spec.dataset) .txt or .jsonl, relative to the YAML's folder
         - process:                                               (or SpinQuant's training, quarot's own type)
             - type: spinquant
               steps: 100  lr: 1.5  nsamples: 128  batch: 8  (ints; lr a number)
               a_bits: 4  a_asym: False  a_clip: 1.0  w_bits: 16  w_asym: False  w_clip: False
               loss: ce              "ce" | "kl"
           dataset: FILE
       process:                                                   (exactly one rotation processor)
         - type: quarot | adapt_rotation (stage: 2) | spinquant (online, rotations: FILE unless the prior
                                      stage trains them; the learned R1 and per-layer R2)
           online: False              bool
           block_size: -1             -1 or a power of two (adapt_rotation: -1 = the context's block)
           max_tp_size: 4             1..64, a power of two (only used with online)
           down_proj_online_layers: []   ints >= 0; the layers whose down_proj gets the online
                                      rotation (with online); [] = none, as in msModelSlim
           export_extra_info: True    bool, quarot only (accepted; quarot writes no extra files)
       save: [...]                  msModelSlim savers: quarot writes the input's format (--save OUT)
       dataset: FILE                  the default dataset of the stages
       runner: ...                    accepted, not used (quarot always works layer by layer)
   Processors other than quarot / adapt_rotation (autoround_quant, linear_quant, ...) and `save`
   entries are refused, or skipped with a warning when skip_unsupported is set. Values are typed as
   YAML has them: 20 is a number, "20" a string; booleans True/False/true/false.
   Errors: "FILE: line L: spec.process[0].online: expected a boolean (True/False), found 'yes'". */
#ifndef QX_RUNCFG_H
#define QX_RUNCFG_H

#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_runcfg_stage1 {
    int present;
    int line;                      /* of its `type:` */
    int steps;
    char quant_dtype[8];
    char (*layer_type)[128];       /* [n_layer_type] */
    int64_t n_layer_type;
    int64_t block_size;
    int64_t max_samples;
    char* dataset;                 /* resolved path (malloc'ed), NULL when none was given */
    int dataset_line;
    /* spin: SpinQuant's training (type: spinquant) instead of adapt_rotation stage 1 */
    int spin;
    double lr, a_clip;
    int64_t nsamples, batch, a_bits, w_bits;
    int a_asym, w_asym, w_clip, loss;
} qx_runcfg_stage1;

typedef struct qx_runcfg_stage2 {
    int present;
    int adapt;                     /* 1: adapt_rotation stage 2, 0: quarot */
    int line;
    int online;
    int64_t block_size;            /* -1 = full hidden (adapt: the context's block) */
    int64_t max_tp_size;
    int64_t* layers;               /* down_proj_online_layers, sorted and distinct */
    int64_t n_layers;
    int layers_line;               /* of the key, 0 when absent */
    int export_extra_info;
    int spin;                      /* 1: spinquant (the learned rotations) */
    char* rotations;               /* spin: the rotation file (resolved, malloc'ed), NULL = from spec.prior */
    int rotations_line;
} qx_runcfg_stage2;

typedef struct qx_runcfg {
    char apiversion[40];
    qx_runcfg_stage1 stage1;
    qx_runcfg_stage2 stage2;
    int n_skipped;                 /* processors / savers skipped (skip_unsupported) */
} qx_runcfg;

/* Called once per skipped item with a one-line message (may be NULL). */
typedef void (*qx_runcfg_warn_fn)(void* user, const char* msg);

/* Parse and check a configuration. name: the file (messages, and dataset paths are resolved
   against its directory). Errors: QUAROT_ERR_PARSE with "name: line L: what" in e. */
quarot_result qx_runcfg_parse(const char* text, size_t len, const char* name, int skip_unsupported,
                              qx_runcfg_warn_fn warn, void* user, qx_runcfg* cfg, qx_err* e);
void qx_runcfg_free(qx_runcfg* cfg);

#ifdef __cplusplus
}
#endif
#endif
