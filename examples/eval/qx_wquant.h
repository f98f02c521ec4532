/* qx_wquant.h - quarot.h's >>quantize stage driven by the reference forward pass (QuaRot's
   gptq_fwrd / rtn_fwrd), for `quarot eval --w-quant` and `quarot quantize`.

   qx_wq_quantize quantizes the decoder linears of a store in place:
     1. a FP32 forward pass over the store (no fake quantization) runs its online hooks, and the
        stage (quarot_quantizer) sees the weights through a quarot_model bound to that forward's
        own f32 copies, so a quantized step is used at once by the next forward;
     2. GPTQ: the first desc.nsamples calibration windows are embedded once ([rows][hidden], memory
        = calibration tokens x hidden floats); for each layer, for each of QuaRot's steps (q/k/v,
        o_proj, gate/up, down_proj), the windows run through that layer alone and the capture hook
        feeds the inputs of the step's linears (after the online Hadamard) to the stage, which then
        quantizes them; the quantized layer's outputs become the next layer's inputs (sequential);
        RTN needs no calibration and only runs the steps;
     3. the quantized weights are written back into the store (f32 exactly; f16/bf16 rounded).
   Errors: a one-line message in e; calibration windows fewer than nsamples -> QUAROT_ERR_INVALID_ARGUMENT
   ("calibration text too short"); the stage's errors name the linear. */
#ifndef QX_WQUANT_H
#define QX_WQUANT_H

#include "qx_evalkit.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_wq_opts {
    quarot_quantize_desc desc;            /* method, weight quantizer, GPTQ options, on_linear */
    const quarot_online_list* hooks;      /* the store's online hooks, or NULL */
    const qx_windows* calib;              /* GPTQ: calibration windows (the first desc.nsamples used) */
    const quarot_env* env;                /* threads for GEMMs and GPTQ (NULL = serial) */
    void (*on_layer)(void* user, int64_t layers_done, int64_t n_layers);
    void* user;
} qx_wq_opts;

typedef struct qx_wq_stats {
    int64_t windows, tokens;              /* calibration actually used */
    int64_t linears;                      /* linears quantized */
    double seconds;
} qx_wq_stats;

quarot_result qx_wq_quantize(qx_store* s, const qx_wq_opts* o, qx_wq_stats* st, qx_err* e);

#ifdef __cplusplus
}
#endif
#endif
