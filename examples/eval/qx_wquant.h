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
   Mixture of experts: in a MoE layer the stage quantizes the attention; the experts are quantized
   here after it, each routed expert on the calibration rows routed to it (gate/up: its normed rows;
   down_proj: its intermediate activations after the online R4), the shared expert on all rows; an
   expert no calibration token reaches is RTN (report fallback = 1), counted in st->experts_rtn and
   per layer in st->moe_note. 3-D experts are written back at expert e's rows (e * out). Routers and
   shared-expert gates are not quantized. Scale migration (desc.migrate) at a MoE layer's MLP norm:
   the alpha search with each routed expert's gate / up scored on its own routed rows' Hessian and
   the shared expert's on every row, the scales from the norm's output (the router's input); the
   norm gain, every expert's gate / up, the router and the shared-expert gate take s (qx_wquant.c).
   Errors: a one-line message in e; calibration windows fewer than nsamples -> QUAROT_ERR_INVALID_ARGUMENT
   ("calibration text too short"); the stage's errors name the linear. */
#ifndef QX_WQUANT_H
#define QX_WQUANT_H

#include "eval/qx_evalkit.h"

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
    int64_t linears;                      /* linears quantized (each expert's three) */
    int64_t experts_rtn;                  /* GPTQ, MoE: routed experts no calibration token reached (RTN) */
    char moe_note[512];                   /* "layer 3: 2 of 16 experts had no calibration tokens: RTN; ..." */
    double seconds;
} qx_wq_stats;

quarot_result qx_wq_quantize(qx_store* s, const qx_wq_opts* o, qx_wq_stats* st, qx_err* e);

/* The weight quantization of one evaluation cell: a table row's weight bits with the run's options.
   Routing: the reference forward pass quantizes weights itself as it loads each layer, by plain
   RTN (the same quantizer; a layer-wise run keeps one layer in memory). Everything RTN at load
   cannot do goes through qx_wq_quantize on a copy of the store instead: GPTQ, the clip search,
   scale migration, int8 down_proj and the group fallback (keep_indivisible). A packed file's
   weights are its codes already and are not quantized again. */
typedef struct qx_wq_cell {
    int w_bits;                           /* the row's weight bits; >= 16: not quantized */
    int packed;                           /* the store holds a packed file's dequantized codes */
    int gptq;                             /* --w-quant gptq */
    int clip_search;                      /* --w-clip */
    int migrate;                          /* scale migration on this row (weight-only rows) */
    int int8_down_proj;                   /* --int8-down-proj */
    int group_fallback;                   /* --group-fallback: rows not whole groups stay f16 */
} qx_wq_cell;

/* 1 when the cell's weights must be made by qx_wq_quantize in a copy of the store, 0 when the
   forward pass's RTN at load makes them (or nothing is quantized). */
int qx_wq_cell_staged(const qx_wq_cell* c);

#ifdef __cplusplus
}
#endif
#endif
