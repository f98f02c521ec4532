/* fwd_util.h - helpers shared by the tests of the reference forward pass on synthetic models
   (test_forward.c, test_synth.c, test_pipeline.c, test_adapt.c): the logits of one window (with or
   without a model's online hooks), a random orthogonal matrix and the
   product of rows with it (online rotations applied by hand), the relative rms error between
   two logit arrays, a synthetic model of a family, and byte equality of two stores. Include after
   qt.h. */
#ifndef FWD_UTIL_H
#define FWD_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/qx_forward.h"
#include "model/qx_online.h"
#include "model/qx_synth.h"

/* Logits [T][vocab] of tokens toks[T] through s with options o (NULL: defaults), malloc'ed; NULL
   (and why on stdout) when the forward pass fails. */
QT_UNUSED static float* run_window(const qx_store* s, const qx_forward_opts* o, const int32_t* toks, int64_t T) {
    qx_forward f;
    qx_err e;
    float* lg = (float*)malloc((size_t)(T * s->config.vocab) * sizeof(float));
    quarot_result r = qx_forward_init(&f, s, o, &e);
    if (r != QUAROT_OK) {
        printf("    init: %s\n", e.msg);
        free(lg);
        return NULL;
    }
    r = qx_forward_window(&f, toks, T, lg, &e);
    qx_forward_free(&f);
    if (r != QUAROT_OK) {
        printf("    window: %s\n", e.msg);
        free(lg);
        return NULL;
    }
    return lg;
}

/* Logits of toks[T] through s into out[T*vocab] with the online hooks of list applied (qx_online;
   list NULL: none); *calls (may be NULL) gets how many hook calls were made. 0 (and why on stdout)
   when the forward pass or a hook failed. */
QT_UNUSED static int window_hooks_into(const qx_store* s, const quarot_online_list* list, const int32_t* toks, int64_t T,
                                       float* out, int64_t* calls) {
    qx_forward f;
    qx_forward_opts o;
    qx_online_ctx ctx;
    qx_err e;
    int ok = 1;
    memset(&o, 0, sizeof o);
    qx_online_ctx_init(&ctx, list);
    if (list) { o.online = qx_online_hooks; o.online_user = &ctx; }
    if (qx_forward_init(&f, s, &o, &e) != QUAROT_OK) {
        printf("    forward init: %s\n", e.msg);
        qx_online_ctx_free(&ctx);
        return 0;
    }
    if (qx_forward_window(&f, toks, T, out, &e) != QUAROT_OK) { printf("    forward: %s\n", e.msg); ok = 0; }
    if (ok && list && ctx.status != QUAROT_OK) {
        printf("    online hooks: %s\n", quarot_result_string(ctx.status));
        ok = 0;
    }
    if (calls) *calls = ctx.calls;
    qx_forward_free(&f);
    qx_online_ctx_free(&ctx);
    return ok;
}

/* The same, malloc'ed [T][vocab]; NULL when anything failed. */
QT_UNUSED static float* run_window_hooks(const qx_store* s, const quarot_online_list* list, const int32_t* toks, int64_t T) {
    float* logits = (float*)malloc((size_t)(T * s->config.vocab) * sizeof(float));
    if (logits && !window_hooks_into(s, list, toks, T, logits, NULL)) {
        free(logits);
        logits = NULL;
    }
    return logits;
}

/* Random orthogonal Q [n][n] (malloc'ed): Gaussian rows from qt_seed(seed), modified Gram-Schmidt
   on the rows, twice for accuracy. */
QT_UNUSED static double* random_orthogonal(int64_t n, unsigned long long seed) {
    double* q = (double*)malloc((size_t)(n * n) * sizeof(double));
    int64_t i, j, p;
    qt_seed(seed);
    for (i = 0; i < n * n; ++i) q[i] = qt_normal();
    for (i = 0; i < n; ++i) {
        int pass;
        for (pass = 0; pass < 2; ++pass)
            for (p = 0; p < i; ++p) {
                double d = 0.0;
                for (j = 0; j < n; ++j) d += q[i * n + j] * q[p * n + j];
                for (j = 0; j < n; ++j) q[i * n + j] -= d * q[p * n + j];
            }
        {
            double nn = 0.0;
            for (j = 0; j < n; ++j) nn += q[i * n + j] * q[i * n + j];
            nn = sqrt(nn);
            for (j = 0; j < n; ++j) q[i * n + j] /= nn;
        }
    }
    return q;
}

/* rows of x[rows][n] <- x * Q (in double, rounded once) */
QT_UNUSED static void rows_times(float* x, int64_t rows, int64_t n, const double* q) {
    double* tmp = (double*)malloc((size_t)n * sizeof(double));
    int64_t r, i, j;
    for (r = 0; r < rows; ++r) {
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (i = 0; i < n; ++i) s += (double)x[r * n + i] * q[i * n + j];
            tmp[j] = s;
        }
        for (j = 0; j < n; ++j) x[r * n + j] = (float)tmp[j];
    }
    free(tmp);
}

/* ||a - b|| / ||b|| over n values (rms of the difference relative to b's) */
QT_UNUSED static double rms_rel(const float* a, const float* b, int64_t n) {
    double num = 0.0, den = 0.0;
    int64_t i;
    for (i = 0; i < n; ++i) { num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]); den += (double)b[i] * b[i]; }
    return sqrt(num / den);
}

/* A synthetic model of family arch (qx_synth_model, default sizes) from seed; 0 (and why on
   stdout) when it cannot be built. */
QT_UNUSED static int synth_model(qx_store* s, const char* arch, uint64_t seed) {
    qx_synth_desc d;
    qx_err e;
    memset(&d, 0, sizeof d);
    d.arch = arch;
    d.seed = seed;
    if (qx_synth_model(s, &d, &e) != QUAROT_OK) { printf("    synth %s: %s\n", arch, e.msg); return 0; }
    return 1;
}

/* 1 when every tensor of a and b has identical bytes (and the same names). */
QT_UNUSED static int stores_same_bytes(const qx_store* a, const qx_store* b) {
    int64_t i;
    if (a->count != b->count) return 0;
    for (i = 0; i < a->count; ++i) {
        const quarot_tensor* t = qx_store_find(b, a->items[i].name);
        if (!t || quarot_tensor_nbytes(t) != quarot_tensor_nbytes(&a->items[i].t) ||
            memcmp(t->data, a->items[i].t.data, quarot_tensor_nbytes(t)) != 0)
            return 0;
    }
    return 1;
}

#endif
