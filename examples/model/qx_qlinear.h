/* qx_qlinear.h - the reference forward pass's quantized linears, computed as an integer kernel
   computes them.

   When weights and activations are both quantized with the settings an integer kernel runs
   (symmetric weights per output channel or per group, symmetric activations per token), the
   reference does not sum dequantized values in float: it takes the codes and computes
       acc[t][o][g] = sum_{k in group g} wq[o][k] * xq[t][k]                        (exact integer)
       y[t][o]      = (sum_g f32(acc[t][o][g]) * w_scale[o][g], in g order) * x_scale[t]
   through quarot.h's quarot_qgemm (whose SIMD paths are bit-identical to its scalar _ref), the
   arithmetic of the inference engine (examples/engine/), so that the engine and `quarot eval`
   agree to float rounding on any text. Everything else (asymmetric weights or activations,
   activation groups, weight-only or activation-only rows) has no integer kernel and stays the float
   product of the fake-quantized values (quarot_sgemm), as does qx_fake_quant_opts.float_linears.

   Weight codes come from quarot_quantize_f32 (RTN at load, the quantizer the fake quantization
   uses, so f32(code) * scale is the fake-quantized weight bit for bit), or, for weights a reader
   already dequantized from codes (the packed W4A4 file), from the store's grid (qx_store_get_grid):
   code = W / scale, which must be an integer in range with f32(code) * scale == W exactly. */
#ifndef QX_QLINEAR_H
#define QX_QLINEAR_H

#include "support/qx_store.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The container of w_bits codes (4 for 2..4 bits, 8 for 5..8) and whether quarot_qgemm holds a row of
   cols inputs in groups of `group` (0 = cols): 1 when it does. */
int qx_qlinear_container(int w_bits);
int qx_qlinear_fits(int w_bits, int64_t cols, int64_t group);
/* Bytes of memory a [rows][cols] linear needs (packed codes and scales, 64-byte aligned parts);
   0 on bad arguments. */
size_t qx_qlinear_bytes(int w_bits, int64_t rows, int64_t cols, int64_t group);

/* m <- the codes of w[rows][cols] quantized by d (symmetric: d->asymmetric must be 0), packed into
   mem (qx_qlinear_bytes of it, 64-byte aligned); codes: scratch of rows*cols bytes. */
quarot_result qx_qlinear_rtn(quarot_qmat* m, void* mem, const float* w, int64_t rows, int64_t cols,
                             const quarot_quant_desc* d, int8_t* codes);
/* m <- the codes of w on grid g (g->rows == rows, g->cols == cols). A weight off the grid is
   QUAROT_ERR_INVALID_ARGUMENT with *bad_row (may be NULL) its row. */
quarot_result qx_qlinear_grid(quarot_qmat* m, void* mem, const float* w, int64_t rows, int64_t cols, const qx_grid* g,
                              int8_t* codes, int64_t* bad_row);

#ifdef __cplusplus
}
#endif
#endif
