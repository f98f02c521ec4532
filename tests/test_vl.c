/* Vision-language text decoders in the header's plan (quarot_adapter_build_vision_names, the built-in
   "qwen2vl" and "qwen2vl-lm" adapters): a synthetic Qwen2 decoder with a Qwen2-VL vision merger
   (visual.merger.mlp.2: weight [hidden][1.5 hidden], bias [hidden]) and a kept vision tensor.
   - the text logits of the rotated model equal the original's within 1e-4 of their scale (the bound
     test_pipeline holds every dense family to), with and without online rotations;
   - the merger's output y for random patch features, times R1, equals the rotated merger's output
     y': checked without forming R1 as y' E'^T = y E^T against every row of the embedding (E' = E R1,
     and E has full column rank) and |y'| = |y|, within 1e-5 of the largest product;
   - the rest of the vision tower is untouched (bytes equal);
   - the newer layout (model.language_model.*, model.visual.*) rotates to the same bytes;
   - a merger whose output width is not hidden is refused, naming it, before anything changes. */
#include "quarot.h"
#include "qt.h"
#include "fwd_util.h"
#include "model/qx_model.h"
#include "model/qx_synth.h"
#include "vl_util.h"

#include <math.h>

#define N_TOK 12
static const int32_t tokens[N_TOK] = {1, 17, 5, 42, 9, 100, 3, 77, 28, 64, 11, 5};

/* A qwen2 synth decoder (GQA, q/k/v biases, tied embeddings) plus a merger writing `out` rows. */
static int vl_model(qx_store* s, int64_t out) {
    qx_synth_desc d;
    qx_err e;
    quarot_rng rng;
    quarot_tensor* t;
    int64_t ne[4], i, h, dv;
    memset(&d, 0, sizeof d);
    d.arch = "qwen2";
    d.seed = 21;
    if (qx_synth_model(s, &d, &e) != QUAROT_OK) { printf("    synth: %s\n", e.msg); return 0; }
    snprintf(s->config.arch, sizeof s->config.arch, "qwen2vl");
    h = s->config.hidden;
    dv = h + h / 2;
    quarot_rng_seed(&rng, 5);
    ne[0] = dv; ne[1] = out;
    if (qx_store_add(s, "visual.merger.mlp.2.weight", QUAROT_DTYPE_F32, 2, ne, NULL, &t) != QUAROT_OK) return 0;
    for (i = 0; i < dv * out; ++i) ((float*)t->data)[i] = (float)(quarot_rng_normal(&rng) / sqrt((double)dv));
    ne[0] = out;
    if (qx_store_add(s, "visual.merger.mlp.2.bias", QUAROT_DTYPE_F32, 1, ne, NULL, &t) != QUAROT_OK) return 0;
    for (i = 0; i < out; ++i) ((float*)t->data)[i] = (float)(0.1 * quarot_rng_normal(&rng));
    ne[0] = dv; ne[1] = dv;   /* the merger's first linear: vision side, kept */
    if (qx_store_add(s, "visual.merger.mlp.0.weight", QUAROT_DTYPE_F32, 2, ne, NULL, &t) != QUAROT_OK) return 0;
    for (i = 0; i < dv * dv; ++i) ((float*)t->data)[i] = (float)quarot_rng_normal(&rng);
    ne[0] = 14 * 14; ne[1] = 2; ne[2] = 3; ne[3] = 16;   /* a patch embedding (Conv3d, here 4-D), kept */
    if (qx_store_add(s, "visual.patch_embed.proj.weight", QUAROT_DTYPE_F32, 4, ne, NULL, &t) != QUAROT_OK) return 0;
    for (i = 0; i < quarot_tensor_nelements(t); ++i) ((float*)t->data)[i] = (float)quarot_rng_normal(&rng);
    return 1;
}

static quarot_result rotate(qx_store* s, const quarot_rotate_desc* d0, quarot_online_list* list, char* err) {
    quarot_model m;
    qx_binding b;
    quarot_rotate_desc d = *d0;
    quarot_result r;
    d.online_out = list;
    qx_model_bind(&m, &b, s);
    r = quarot_rotate_model(&m, &d);
    snprintf(err, 256, "%s", m.error);
    if (r == QUAROT_OK) qx_model_sync(&m, s);
    return r;
}

static void test_vl_rotation(void) {
    qx_store s;
    float* ref;
    int v;
    if (!vl_model(&s, 64)) { QT_CHECK(0); return; }
    QT_EQ_INT(s.config.hidden, 64);
    ref = run_window_hooks(&s, NULL, tokens, N_TOK);
    QT_CHECK(ref != NULL);
    for (v = 0; v < 2 && ref; ++v) {
        qx_store r;
        quarot_rotate_desc d;
        quarot_online_list l;
        char err[256];
        float* got;
        double rel, mrel = 1e30, nrel = 1e30;
        memset(&d, 0, sizeof d);
        d.seed = 3 + (uint64_t)v;
        d.online = v;
        quarot_online_list_init(&l, NULL);
        if (qx_store_clone(&s, &r) != QUAROT_OK) { QT_CHECK(0); continue; }
        QT_CHECKF(rotate(&r, &d, &l, err) == QUAROT_OK, "rotate: %s", err);
        got = run_window_hooks(&r, v ? &l : NULL, tokens, N_TOK);
        rel = got ? qt_rel_diff(got, ref, N_TOK * s.config.vocab) : 1e30;
        QT_CHECKF(rel < 1e-4, "variant %d: text logits differ by %.3g", v, rel);
        if (qx_store_find(&r, "model.embed_tokens.weight"))
            mrel = vl_merger_check(&s, &r, "visual.merger.mlp.2.weight", "visual.merger.mlp.2.bias", "visual.merger.mlp.2.weight",
                                "visual.merger.mlp.2.bias", "model.embed_tokens.weight", "model.embed_tokens.weight", &nrel);
        QT_CHECKF(mrel <= 1e-5 && nrel <= 1e-5, "variant %d: merger output not rotated by R1 (%.3g, norms %.3g)", v, mrel, nrel);
        QT_CHECK(!vl_same_bytes(&s, "visual.merger.mlp.2.weight", &r, "visual.merger.mlp.2.weight"));
        QT_CHECK(vl_same_bytes(&s, "visual.merger.mlp.0.weight", &r, "visual.merger.mlp.0.weight"));
        QT_CHECK(vl_same_bytes(&s, "visual.patch_embed.proj.weight", &r, "visual.patch_embed.proj.weight"));
        printf("    qwen2vl%s: text logits rel %.2e; merger y' E'^T vs y E^T rel %.2e, |y'| vs |y| %.2e\n",
               v ? " --online" : "", rel, mrel, nrel);
        free(got);
        quarot_online_list_free(&l);
        qx_store_free(&r);
    }
    free(ref);
    qx_store_free(&s);
}

/* The store with every name in the newer layout: model.X -> model.language_model.X, visual.X ->
   model.visual.X (lm_head stays). */
static int newer_layout(const qx_store* s, qx_store* n) {
    int64_t i;
    qx_store_init(n);
    n->config = s->config;
    snprintf(n->config.arch, sizeof n->config.arch, "qwen2vl-lm");
    for (i = 0; i < s->count; ++i) {
        const char* name = s->items[i].name;
        const quarot_tensor* t = &s->items[i].t;
        char nn[200];
        int nd = t->ne[3] > 1 ? 4 : t->ne[2] > 1 ? 3 : t->ne[1] > 1 ? 2 : 1;
        if (strncmp(name, "model.", 6) == 0) snprintf(nn, sizeof nn, "model.language_model.%s", name + 6);
        else if (strncmp(name, "visual.", 7) == 0) snprintf(nn, sizeof nn, "model.%s", name);
        else snprintf(nn, sizeof nn, "%s", name);
        if (qx_store_add(n, nn, t->dtype, nd, t->ne, t->data, NULL) != QUAROT_OK) return 0;
    }
    return 1;
}

static void test_vl_newer_layout(void) {
    qx_store s, n;
    quarot_rotate_desc d;
    quarot_online_list l1, l2;
    char err[256];
    int64_t i, same = 1;
    if (!vl_model(&s, 64) || !newer_layout(&s, &n)) { QT_CHECK(0); return; }
    memset(&d, 0, sizeof d);
    d.seed = 9;
    d.online = 1;
    quarot_online_list_init(&l1, NULL);
    quarot_online_list_init(&l2, NULL);
    QT_CHECKF(rotate(&s, &d, &l1, err) == QUAROT_OK, "older layout: %s", err);
    QT_CHECKF(rotate(&n, &d, &l2, err) == QUAROT_OK, "newer layout: %s", err);
    for (i = 0; i < s.count; ++i) {
        const char* name = s.items[i].name;
        char nn[200];
        if (strncmp(name, "model.", 6) == 0) snprintf(nn, sizeof nn, "model.language_model.%s", name + 6);
        else if (strncmp(name, "visual.", 7) == 0) snprintf(nn, sizeof nn, "model.%s", name);
        else snprintf(nn, sizeof nn, "%s", name);
        if (!vl_same_bytes(&s, name, &n, nn)) { printf("    %s differs from %s\n", name, nn); same = 0; }
    }
    QT_CHECK(same && s.count == n.count);
    QT_EQ_INT(l1.count, l2.count);
    quarot_online_list_free(&l1);
    quarot_online_list_free(&l2);
    qx_store_free(&s);
    qx_store_free(&n);
}

static void test_vl_bad_merger(void) {
    qx_store s, ref;
    quarot_rotate_desc d;
    quarot_online_list l;
    char err[256];
    int64_t i;
    int same = 1;
    if (!vl_model(&s, 72) || qx_store_clone(&s, &ref) != QUAROT_OK) { QT_CHECK(0); return; }
    memset(&d, 0, sizeof d);
    quarot_online_list_init(&l, NULL);
    QT_EQ_INT(rotate(&s, &d, &l, err), QUAROT_ERR_SHAPE_MISMATCH);
    QT_CHECKF(strstr(err, "visual.merger.mlp.2.weight") != NULL, "message: %s", err);
    printf("    refused: %s\n", err);
    for (i = 0; i < s.count; ++i) same &= vl_same_bytes(&s, s.items[i].name, &ref, s.items[i].name);
    QT_CHECK(same);
    quarot_online_list_free(&l);
    qx_store_free(&ref);
    qx_store_free(&s);
}

int main(void) {
    QT_RUN(test_vl_rotation);
    QT_RUN(test_vl_newer_layout);
    QT_RUN(test_vl_bad_merger);
    return qt_finish("test_vl");
}
