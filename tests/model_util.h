/* model_util.h - helpers shared by the tests that compare a model file's function before and after
   a command (test_cli_rotate.c, test_cli_convert.c): load a model file through the tool's loader,
   read an online-hooks file, and the logits of a token window through the reference forward pass
   (model/qx_forward.c, through fwd_util.h), with the hooks applied. Include after qt.h and cli_util.h. */
#ifndef MODEL_UTIL_H
#define MODEL_UTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fwd_util.h"
#include "cli/qx_cli.h"
#include "formats/qx_load.h"

/* Loads the model at path (any format the tool reads; tensors copied) into s; 0 and why on stdout
   when it fails. */
QT_UNUSED static int load_model(const char* path, qx_store* s) {
    qx_load_opts lo;
    qx_err e;
    memset(&lo, 0, sizeof lo);
    lo.copy = 1;
    if (qx_load_model(path, &lo, s, &e) != QUAROT_OK) { printf("    load %s: %s\n", path, e.msg); return 0; }
    return 1;
}

/* Reads the online-hooks file at path into l (initialised here; free it when 1 is returned). */
QT_UNUSED static int load_hooks(const char* path, quarot_online_list* l) {
    size_t n = 0;
    char* text = (char*)read_all(path, &n);
    char err[256];
    quarot_result r;
    quarot_online_list_init(l, NULL);
    if (!text) { printf("    cannot read %s\n", path); return 0; }
    r = quarot_online_read(l, text, n, err, sizeof err);
    free(text);
    if (r != QUAROT_OK) { printf("    %s: %s\n", path, err); return 0; }
    return 1;
}

/* Logits of tokens[T] through s (hooks may be NULL; when given they must be applied at least once)
   into out[T*vocab]. */
QT_UNUSED static int logits_of(const qx_store* s, const quarot_online_list* hooks, const int32_t* tokens, int64_t T,
                               float* out) {
    int64_t calls = 0;
    if (!window_hooks_into(s, hooks, tokens, T, out, &calls)) return 0;
    if (hooks && calls == 0) { printf("    hooks were never applied\n"); return 0; }
    return 1;
}

/* max |logits(a) - logits(b)| / max |logits(a)| over T <= 24 tokens (b with hooks hb, may be NULL);
   1e30 when either side fails or the vocabularies differ. */
QT_UNUSED static double logit_rel_diff(const qx_store* a, const qx_store* b, const quarot_online_list* hb, int64_t T) {
    int32_t tokens[24];
    int64_t V = a->config.vocab, i;
    float *la, *lb;
    double diff = 0, amax = 0, out = 1e30;
    if (T > 24) T = 24;
    la = (float*)malloc((size_t)(T * V) * sizeof(float));
    lb = (float*)malloc((size_t)(T * V) * sizeof(float));
    for (i = 0; i < T; ++i) tokens[i] = (int32_t)((i * 37 + 1) % V);
    if (la && lb && b->config.vocab == V && logits_of(a, NULL, tokens, T, la) && logits_of(b, hb, tokens, T, lb)) {
        for (i = 0; i < T * V; ++i) {
            double d = fabs((double)la[i] - (double)lb[i]);
            if (d > diff) diff = d;
            if (fabs((double)la[i]) > amax) amax = fabs((double)la[i]);
        }
        out = diff / (amax > 0 ? amax : 1);
    }
    free(la);
    free(lb);
    return out;
}

#endif
