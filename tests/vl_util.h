/* vl_util.h - helpers shared by the vision-language tests (test_vl.c, test_cli_vl.c): the Qwen2-VL
   merger's output for random patch features, the check that a rotated merger's output is the
   original's times R1 (without forming R1), and byte equality of two stores' tensors.
   Include after qt.h. */
#ifndef VL_UTIL_H
#define VL_UTIL_H

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "quarot.h"
#include "support/qx_store.h"

/* y[N][out] = z W^T + b for the merger of s. */
QT_UNUSED static void vl_merger(const qx_store* s, const char* wname, const char* bname, const float* z, int64_t N, double* y) {
    const quarot_tensor* w = qx_store_find(s, wname);
    const quarot_tensor* b = qx_store_find(s, bname);
    int64_t in = w->ne[0], out = w->ne[1], n, o, k;
    for (n = 0; n < N; ++n)
        for (o = 0; o < out; ++o) {
            double acc = ((const float*)b->data)[o];
            for (k = 0; k < in; ++k) acc += (double)z[n * in + k] * ((const float*)w->data)[o * in + k];
            y[n * out + o] = acc;
        }
}

/* max over patches n and embedding rows v of |y'_n . E'_v - y_n . E_v| / max |y_n . E_v|, and the
   largest relative change of |y_n|. */
QT_UNUSED static double vl_merger_check(const qx_store* a, const qx_store* b, const char* wa, const char* ba, const char* wb,
                           const char* bb, const char* ea, const char* eb, double* norm_rel) {
    enum { N = 6 };
    const quarot_tensor* Ea = qx_store_find(a, ea);
    const quarot_tensor* Eb = qx_store_find(b, eb);
    int64_t h = a->config.hidden, in = qx_store_find(a, wa)->ne[0], V = a->config.vocab, n, v, k;
    float* z = (float*)malloc((size_t)(N * in) * sizeof(float));
    double *ya = (double*)malloc((size_t)(N * h) * sizeof(double)), *yb = (double*)malloc((size_t)(N * h) * sizeof(double));
    double diff = 0, amax = 0;
    quarot_rng rng;
    quarot_rng_seed(&rng, 77);
    for (k = 0; k < N * in; ++k) z[k] = (float)quarot_rng_normal(&rng);
    vl_merger(a, wa, ba, z, N, ya);
    vl_merger(b, wb, bb, z, N, yb);
    *norm_rel = 0;
    for (n = 0; n < N; ++n) {
        double na = 0, nb = 0;
        for (k = 0; k < h; ++k) { na += ya[n * h + k] * ya[n * h + k]; nb += yb[n * h + k] * yb[n * h + k]; }
        if (fabs(sqrt(nb) - sqrt(na)) / sqrt(na) > *norm_rel) *norm_rel = fabs(sqrt(nb) - sqrt(na)) / sqrt(na);
        for (v = 0; v < V; ++v) {
            double pa = 0, pb = 0;
            for (k = 0; k < h; ++k) {
                pa += ya[n * h + k] * ((const float*)Ea->data)[v * h + k];
                pb += yb[n * h + k] * ((const float*)Eb->data)[v * h + k];
            }
            if (fabs(pb - pa) > diff) diff = fabs(pb - pa);
            if (fabs(pa) > amax) amax = fabs(pa);
        }
    }
    free(z); free(ya); free(yb);
    return diff / (amax > 0 ? amax : 1);
}

QT_UNUSED static int vl_same_bytes(const qx_store* a, const char* na, const qx_store* b, const char* nb) {
    const quarot_tensor* x = qx_store_find(a, na);
    const quarot_tensor* y = qx_store_find(b, nb);
    return x && y && quarot_tensor_nbytes(x) == quarot_tensor_nbytes(y) && memcmp(x->data, y->data, quarot_tensor_nbytes(x)) == 0;
}

#endif
