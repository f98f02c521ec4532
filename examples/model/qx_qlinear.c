/* qx_qlinear.c - see qx_qlinear.h. */
#include "model/qx_qlinear.h"

#include <math.h>
#include <string.h>

int qx_qlinear_container(int w_bits) { return w_bits <= 4 ? 4 : 8; }

int qx_qlinear_fits(int w_bits, int64_t cols, int64_t group) {
    int64_t g = group > 0 ? group : cols;
    if (w_bits < 2 || w_bits > 8 || cols <= 0 || g <= 0 || cols % g != 0) return 0;
    return g <= (qx_qlinear_container(w_bits) == 4 ? ((int64_t)1 << 20) : ((int64_t)1 << 16));
}

static size_t qx__up64(size_t n) { return (n + 63) & ~(size_t)63; }

size_t qx_qlinear_bytes(int w_bits, int64_t rows, int64_t cols, int64_t group) {
    int64_t g = group > 0 ? group : cols;
    size_t rb;
    if (!qx_qlinear_fits(w_bits, cols, group) || rows <= 0) return 0;
    rb = quarot_qmat_row_bytes(qx_qlinear_container(w_bits), cols, g);
    return qx__up64(rb * (size_t)rows) + qx__up64((size_t)(rows * (cols / g)) * sizeof(float));
}

/* m over mem: packed codes first, then the scales (filled by the caller) */
static void qx__qmat_at(quarot_qmat* m, void* mem, int w_bits, int64_t rows, int64_t cols, int64_t group) {
    int64_t g = group > 0 ? group : cols;
    size_t rb = quarot_qmat_row_bytes(qx_qlinear_container(w_bits), cols, g);
    memset(m, 0, sizeof *m);
    m->bits = qx_qlinear_container(w_bits);
    m->rows = rows;
    m->cols = cols;
    m->group = g;
    m->data = (const uint8_t*)mem;
    m->scales = (const float*)(const void*)((char*)mem + qx__up64(rb * (size_t)rows));
}

quarot_result qx_qlinear_rtn(quarot_qmat* m, void* mem, const float* w, int64_t rows, int64_t cols,
                             const quarot_quant_desc* d, int8_t* codes) {
    quarot_result r;
    if (!m || !mem || !w || !d || !codes || d->asymmetric || !qx_qlinear_fits(d->bits, cols, d->group_size) || rows <= 0)
        return QUAROT_ERR_INVALID_ARGUMENT;
    qx__qmat_at(m, mem, d->bits, rows, cols, d->group_size);
    r = quarot_quantize_f32(w, rows, cols, cols, d, codes, (float*)(void*)(uintptr_t)m->scales, NULL);
    if (r == QUAROT_OK) r = quarot_qmat_pack(m->bits, codes, rows, cols, m->group, (uint8_t*)(void*)(uintptr_t)m->data);
    return r;
}

quarot_result qx_qlinear_grid(quarot_qmat* m, void* mem, const float* w, int64_t rows, int64_t cols, const qx_grid* g,
                              int8_t* codes, int64_t* bad_row) {
    int64_t r, c, ng;
    int lo, hi;
    float* sc;
    if (bad_row) *bad_row = -1;
    if (!m || !mem || !w || !g || !codes || g->rows != rows || g->cols != cols || !qx_qlinear_fits(g->bits, cols, g->group))
        return QUAROT_ERR_INVALID_ARGUMENT;
    qx__qmat_at(m, mem, g->bits, rows, cols, g->group);
    ng = cols / m->group;
    sc = (float*)(void*)(uintptr_t)m->scales;
    memcpy(sc, g->scales, (size_t)(rows * ng) * sizeof(float));
    lo = -(1 << (g->bits - 1));
    hi = (1 << (g->bits - 1)) - 1;
    for (r = 0; r < rows; ++r) {
        for (c = 0; c < cols; ++c) {
            float s = sc[r * ng + c / m->group], x = w[r * cols + c];
            double q = s > 0.0f ? nearbyint((double)x / (double)s) : 0.0;
            if (!(q >= lo && q <= hi) || (float)q * s != x) {
                if (bad_row) *bad_row = r;
                return QUAROT_ERR_INVALID_ARGUMENT;
            }
            codes[r * cols + c] = (int8_t)q;
        }
    }
    return quarot_qmat_pack(m->bits, codes, rows, cols, m->group, (uint8_t*)(void*)(uintptr_t)m->data);
}
