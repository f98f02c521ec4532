/* qx_ops.c - see qx_ops.h. */
#include "model/qx_ops.h"

#include <math.h>

void qx_ops_norm(const float* x, float* y, int64_t rows, int64_t n, const float* w, const float* b, quarot_norm_kind kind,
                 float eps) {
    int64_t r, i;
    for (r = 0; r < rows; ++r) {
        const float* xr = x + r * n;
        float* yr = y + r * n;
        double mean = 0.0, ss = 0.0;
        float inv;
        /* ss = sum (x - mean)^2 with mean = 0 for RMSNorm; y = (x - mean) * (1/sqrt(ss/n + eps)) * w */
        if (kind == QUAROT_NORM_LAYER) {
            for (i = 0; i < n; ++i) mean += xr[i];
            mean /= (double)n;
        }
        for (i = 0; i < n; ++i) ss += ((double)xr[i] - mean) * ((double)xr[i] - mean);
        inv = (float)(1.0 / sqrt(ss / (double)n + (double)eps));
        for (i = 0; i < n; ++i) {
            float v = (float)((double)xr[i] - mean) * inv * w[i];
            yr[i] = b ? v + b[i] : v;
        }
    }
}

void qx_ops_rope_table(float* cs, int64_t T, int64_t pos0, int64_t head_dim, float theta) {
    int64_t half = head_dim / 2, t, i;
    for (t = 0; t < T; ++t)
        for (i = 0; i < half; ++i) {
            double freq = pow((double)theta, -(double)(2 * i) / (double)head_dim);
            double ang = (double)(pos0 + t) * freq;
            cs[t * head_dim + i] = (float)cos(ang);
            cs[t * head_dim + half + i] = (float)sin(ang);
        }
}

void qx_ops_rope(float* x, int64_t T, int64_t heads, int64_t head_dim, int interleaved, const float* cs) {
    int64_t half = head_dim / 2, t, h, i;
    /* a rotation of each pair, so norms are preserved and q_t . k_s depends on t - s only */
    for (t = 0; t < T; ++t) {
        const float* c = cs + t * head_dim;   /* cos[half] then sin[half] for this position */
        const float* sn = c + half;
        for (h = 0; h < heads; ++h) {
            float* v = x + (t * heads + h) * head_dim;
            for (i = 0; i < half; ++i) {
                int64_t i0 = interleaved ? 2 * i : i, i1 = interleaved ? 2 * i + 1 : i + half;
                float a = v[i0], b = v[i1];
                v[i0] = a * c[i] - b * sn[i];
                v[i1] = a * sn[i] + b * c[i];
            }
        }
    }
}

static float qx__act(float x, quarot_act_kind k) {
    if (k == QUAROT_ACT_RELU) return x > 0.0f ? x : 0.0f;
    if (k == QUAROT_ACT_GELU) {
        double d = x;
        return (float)(0.5 * d * (1.0 + tanh(0.7978845608028654 * (d + 0.044715 * d * d * d))));
    }
    return x / (1.0f + expf(-x));
}

void qx_ops_act(float* y, const float* gate, int64_t n, quarot_act_kind act) {
    int64_t i;
    if (gate) for (i = 0; i < n; ++i) y[i] = qx__act(gate[i], act) * y[i];
    else for (i = 0; i < n; ++i) y[i] = qx__act(y[i], act);
}

quarot_result qx_ops_route(const float* r, int64_t E, int64_t k, int norm, int32_t* sel, float* w) {
    double mx, den = 0.0, top = 0.0;
    int64_t e, j;
    for (e = 0; e < E; ++e)
        if (!(r[e] - r[e] == 0.0f)) return QUAROT_ERR_NONFINITE;
    mx = r[0];
    for (e = 1; e < E; ++e) if (r[e] > mx) mx = r[e];
    for (e = 0; e < E; ++e) den += exp((double)r[e] - mx);
    for (j = 0; j < k; ++j) {
        int64_t best = -1, i;
        for (e = 0; e < E; ++e) {
            for (i = 0; i < j && sel[i] != e; ++i) {}
            if (i < j) continue;   /* taken */
            if (best < 0 || r[e] > r[best]) best = e;
        }
        sel[j] = (int32_t)best;
        top += exp((double)r[best] - mx) / den;
    }
    for (j = 0; j < k; ++j) {
        double p = exp((double)r[sel[j]] - mx) / den;
        w[j] = (float)(norm ? p / top : p);
    }
    return QUAROT_OK;
}
