/* qx_ops.h - the row-wise steps of a decoder layer: norms, the rotary embedding and the MLP's
   activation. One implementation for the reference forward pass (qx_forward.c) and the inference
   engine (engine/qx_engine.c), so that both compute them with the same floating-point operations in
   the same order (the engine's FP32 logits are checked against the forward pass's). Serial: a
   caller that splits rows over threads calls these on each chunk (no sum crosses a row). */
#ifndef QX_OPS_H
#define QX_OPS_H

#include "quarot.h"

#ifdef __cplusplus
extern "C" {
#endif

/* y[r] = norm(x[r]) * w (+ b when b is not NULL) for rows of n (y may be x). RMS:
   x / sqrt(mean(x^2) + eps); LayerNorm: (x - mean) / sqrt(var + eps) (biased variance). The sums in
   double; y = (float)(x - mean) * (float)(1 / sqrt(ss / n + eps)) * w. */
void qx_ops_norm(const float* x, float* y, int64_t rows, int64_t n, const float* w, const float* b, quarot_norm_kind kind,
                 float eps);

/* The RoPE table of positions pos0 .. pos0 + T - 1: cs[t][head_dim] = cos of the head_dim/2
   angles, then their sin; angle i = position * theta^(-2i / head_dim), in double. */
void qx_ops_rope_table(float* cs, int64_t T, int64_t pos0, int64_t head_dim, float theta);

/* Rotary embedding in place on x[T][heads][head_dim] with the table cs (token t: cs + t * head_dim):
   each pair (a, b) <- (a cos - b sin, a sin + b cos), the pairs (2i, 2i + 1) when interleaved,
   else (i, i + head_dim / 2). */
void qx_ops_rope(float* x, int64_t T, int64_t heads, int64_t head_dim, int interleaved, const float* cs);

/* The MLP activation over n values: y[i] = act(gate[i]) * y[i] (a gated MLP; gate not NULL) or
   y[i] = act(y[i]). act: ReLU, GELU (tanh approximation, 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715
   x^3))) in double), else SiLU x / (1 + expf(-x)). */
void qx_ops_act(float* y, const float* gate, int64_t n, quarot_act_kind act);

/* Mixture-of-experts routing of one token: the top k of the router logits r[E] into sel[k]
   (decreasing; ties: the lower index) and their weights into w[k]: softmax probabilities
   (max-shifted, in double), renormalized over the k when norm. QUAROT_ERR_NONFINITE when a logit is
   NaN or Inf. */
quarot_result qx_ops_route(const float* r, int64_t E, int64_t k, int norm, int32_t* sel, float* w);

#ifdef __cplusplus
}
#endif
#endif
