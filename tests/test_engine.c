/* The inference engine (examples/engine/) against the reference forward pass (model/qx_forward.c),
   on the real stories260K model when ../shared is present (skipped otherwise) and on a small
   synthetic Qwen3-style model (q/k norms, q/k/v biases) always:
   - FP32 mode: logits of a whole window within 1e-5 relative (qt_rel_diff) of qx_forward's, and the
     same greedy tokens from BOS by token-by-token decoding;
   - W4A4 (QuaRot, online hooks) and W4A4KV4: perplexity over a few windows within 0.1% of the fake-
     quantized reference (`quarot eval`'s forward pass) for the same settings;
   - 1 and 2 threads give bit-identical logits;
   - bad input: a prompt past the context, a block past max_tokens, out-of-vocabulary ids, a hook
     list for another model -> one error each, nothing crashes. */
#include "qt.h"
#include "stories_util.h"
#include "engine/qx_engine.h"
#include "eval/qx_eval.h"
#include "eval/qx_evalkit.h"
#include "formats/qx_llama2c.h"
#include "model/qx_synth.h"
#include "support/qx_threads.h"
#include "tokenizer/qx_tokenizer.h"
#include "model/qx_logits.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static struct {
    int have;
    qx_store orig, rot;
    quarot_online_list hooks;
    int32_t* tokens;
    int64_t n_tokens;
} S;

static int setup(void) {
    qx_tokenizer tk;
    qx_err e;
    int r;
    if ((r = stories_model(&S.orig)) <= 0 || (r = stories_tokenizer(&tk)) <= 0) return r;
    r = stories_eval_tokens(&tk, &S.tokens, &S.n_tokens);
    qx_tokenizer_free(&tk);
    if (r <= 0) return r;
    /* QuaRot with R3 (q/k rotation), as `quarot eval --kv-bits` builds it */
    if (qx_ek_quarot(&S.orig, 0, 1, &S.rot, &S.hooks, NULL, 0, NULL, NULL, &e) != QUAROT_OK) { printf("    %s\n", e.msg); return -1; }
    return 1;
}

/* FP32: the engine against qx_forward on one window, and greedy decoding. */
static void check_fp32(const qx_store* s, const int32_t* win, int64_t T, int64_t n_greedy) {
    qx_forward f;
    qx_engine en;
    qx_err e;
    int64_t V = s->config.vocab, i;
    float* l0 = (float*)malloc((size_t)(T * V) * sizeof(float));
    float* l1 = (float*)malloc((size_t)(T * V) * sizeof(float));
    int32_t* g0 = (int32_t*)malloc((size_t)n_greedy * sizeof(int32_t));
    int32_t tok = 1;
    double rd;
    QT_OK(qx_forward_init(&f, s, NULL, &e));
    QT_OK(qx_engine_init(&en, s, NULL, &e));
    QT_OK(qx_forward_window(&f, win, T, l0, &e));
    QT_OK(qx_engine_forward(&en, win, T, l1, 1, &e));
    rd = qt_rel_diff(l1, l0, T * V);
    QT_CHECKF(rd <= 1e-5, "FP32 logits: relative difference %.3g > 1e-5", rd);
    /* greedy from BOS, one token at a time through both KV caches */
    QT_OK(qx_eval_generate(&f, 1, n_greedy, g0, &e));
    qx_engine_reset(&en);
    for (i = 0; i < n_greedy; ++i) {
        QT_OK(qx_engine_forward(&en, &tok, 1, l1, 0, &e));
        tok = qx_logits_argmax(l1, V);
        if (tok != g0[i]) break;
    }
    QT_CHECKF(i == n_greedy, "greedy tokens differ at step %lld", (long long)i);
    qx_engine_free(&en);
    qx_forward_free(&f);
    free(l0); free(l1); free(g0);
}

static void test_fp32_stories(void) {
    if (!S.have) QT_SKIP("stories260K not in ../shared");
    check_fp32(&S.orig, S.tokens, 128, 64);
    check_fp32(&S.rot, S.tokens + 500, 96, 32);   /* a rotated model (no hooks needed in FP32: R3 cancels) */
}

/* Perplexity of the engine vs the fake-quantized reference on the same windows and settings. */
static void check_ppl(const qx_store* s, const quarot_online_list* hooks, const qx_windows* win, int w, int a, int kv,
                      double* ppl_ref, double* ppl_eng) {
    qx_ek_setting st;
    qx_fake_quant_opts q;
    qx_ek_forward ef;
    qx_engine en;
    qx_engine_opts o;
    qx_ppl_result r0, r1;
    qx_err e;
    st.w_bits = w; st.a_bits = a; st.kv_bits = kv;
    qx_ek_setting_quant(&st, 0, 1.0, &q);
    QT_OK(qx_ek_forward_init(&ef, s, hooks, &q, NULL, NULL, &e));
    QT_OK(qx_eval_windows(&ef.f, win, NULL, NULL, &r0, &e));
    QT_OK(qx_ek_forward_status(&ef));
    qx_ek_forward_free(&ef);
    memset(&o, 0, sizeof o);
    o.w_bits = w; o.a_bits = a; o.kv_bits = kv; o.hooks = hooks;
    o.max_tokens = win->max_len;
    QT_OK(qx_engine_init(&en, s, &o, &e));
    QT_OK(qx_engine_eval(&en, win, &r1, &e));
    qx_engine_free(&en);
    /* the same engine with FP32 GEMMs on fake-quantized values reproduces the reference to rounding */
    {
        qx_ppl_result r2;
        o.fp_linears = 1;
        QT_OK(qx_engine_init(&en, s, &o, &e));
        QT_OK(qx_engine_eval(&en, win, &r2, &e));
        qx_engine_free(&en);
        QT_CHECKF(fabs(r2.ppl - r0.ppl) <= 1e-6 * r0.ppl, "fp_linears: %.8f vs reference %.8f", r2.ppl, r0.ppl);
    }
    *ppl_ref = r0.ppl;
    *ppl_eng = r1.ppl;
    QT_CHECKF(fabs(r1.ppl - r0.ppl) <= 1e-3 * r0.ppl, "W%dA%dKV%d: engine perplexity %.6f vs reference %.6f (%.4f%%)", w, a, kv,
              r1.ppl, r0.ppl, 100.0 * (r1.ppl - r0.ppl) / r0.ppl);
}

static void test_w4a4_stories(void) {
    qx_windows win;
    qx_ppl_opts po;
    qx_err e;
    double p0, p1;
    if (!S.have) QT_SKIP("stories260K not in ../shared");
    memset(&po, 0, sizeof po);
    po.seq_len = 256;
    po.max_windows = qt_quick() ? 2 : 4;
    QT_OK(qx_windows_stream(&win, S.tokens, S.n_tokens, &po, &e));
    check_ppl(&S.rot, &S.hooks, &win, 4, 4, 16, &p0, &p1);
    printf("    W4A4 QuaRot: reference %.4f, engine %.4f\n", p0, p1);
    check_ppl(&S.rot, &S.hooks, &win, 4, 4, 4, &p0, &p1);
    printf("    W4A4KV4 QuaRot: reference %.4f, engine %.4f\n", p0, p1);
    check_ppl(&S.orig, NULL, &win, 8, 8, 8, &p0, &p1);
    printf("    W8A8KV8 no rotation: reference %.4f, engine %.4f\n", p0, p1);
    qx_windows_free(&win);
}

/* Bit-identical logits for 1 and 2 threads (prefill and decode). */
static void check_threads(const qx_store* s, const quarot_online_list* hooks, int bits, const int32_t* toks, int64_t T) {
    qx_pool* pool = qx_pool_create(2);
    quarot_env env;
    qx_engine e1, e2;
    qx_engine_opts o;
    qx_err e;
    int64_t V = s->config.vocab;
    float* l1 = (float*)malloc((size_t)(T * V) * sizeof(float));
    float* l2 = (float*)malloc((size_t)(T * V) * sizeof(float));
    qx_pool_env(pool, &env);
    memset(&o, 0, sizeof o);
    o.w_bits = o.a_bits = o.kv_bits = bits;
    o.hooks = hooks;
    QT_OK(qx_engine_init(&e1, s, &o, &e));
    o.env = &env;
    QT_OK(qx_engine_init(&e2, s, &o, &e));
    QT_OK(qx_engine_forward(&e1, toks, T, l1, 1, &e));
    QT_OK(qx_engine_forward(&e2, toks, T, l2, 1, &e));
    QT_CHECK(memcmp(l1, l2, (size_t)(T * V) * sizeof(float)) == 0);
    QT_OK(qx_engine_forward(&e1, toks, 1, l1, 0, &e));
    QT_OK(qx_engine_forward(&e2, toks, 1, l2, 0, &e));
    QT_CHECK(memcmp(l1, l2, (size_t)V * sizeof(float)) == 0);
    qx_engine_free(&e1);
    qx_engine_free(&e2);
    qx_pool_destroy(pool);
    free(l1); free(l2);
}

static void test_threads(void) {
    if (!S.have) QT_SKIP("stories260K not in ../shared");
    check_threads(&S.rot, &S.hooks, 4, S.tokens, 64);
    check_threads(&S.orig, NULL, 16, S.tokens, 64);
}

/* A synthetic Qwen3-shaped model: q/k norms and q/k/v biases through the same comparisons. */
static void test_synth_qwen3(void) {
    qx_synth_desc d;
    qx_store s;
    qx_err e;
    int32_t toks[40];
    int i;
    memset(&d, 0, sizeof d);
    d.arch = "qwen3";
    if (qx_synth_resolve(&d, &e) != QUAROT_OK) QT_SKIP("no qwen3 synthetic family");
    QT_OK(qx_synth_model(&s, &d, &e));
    for (i = 0; i < 40; ++i) toks[i] = (int32_t)((i * 7 + 3) % s.config.vocab);
    check_fp32(&s, toks, 40, 12);
    check_threads(&s, NULL, 4, toks, 24);
    qx_store_free(&s);
}

static void test_bad_input(void) {
    qx_engine en;
    qx_engine_opts o;
    qx_err e;
    int32_t toks[80];
    float* lg;
    quarot_online_list other;
    int i;
    if (!S.have) QT_SKIP("stories260K not in ../shared");
    lg = (float*)malloc(80 * 512 * sizeof(float));
    for (i = 0; i < 80; ++i) toks[i] = 5;
    memset(&o, 0, sizeof o);
    o.context = 64;
    o.max_tokens = 32;
    QT_OK(qx_engine_init(&en, &S.orig, &o, &e));
    QT_ERR(qx_engine_forward(&en, toks, 33, lg, 1, &e), QUAROT_ERR_INVALID_ARGUMENT);   /* block > max_tokens */
    QT_CHECK(strstr(e.msg, "more than") != NULL);
    QT_OK(qx_engine_forward(&en, toks, 32, lg, 0, &e));
    QT_OK(qx_engine_forward(&en, toks, 32, lg, 0, &e));
    QT_ERR(qx_engine_forward(&en, toks, 1, lg, 0, &e), QUAROT_ERR_INVALID_ARGUMENT);    /* past the context */
    QT_CHECK(strstr(e.msg, "context") != NULL);
    qx_engine_reset(&en);
    toks[3] = 512;
    QT_ERR(qx_engine_forward(&en, toks, 4, lg, 0, &e), QUAROT_ERR_INVALID_ARGUMENT);    /* outside the vocabulary */
    qx_engine_free(&en);
    /* hooks for another model: a down_proj hook of size 128 on intermediate 172; a layer past the last */
    quarot_online_list_init(&other, NULL);
    QT_OK(quarot_online_list_add(&other, 0, QUAROT_SITE_DOWN_INPUT, 128, 1, 128, 1, NULL));
    o.hooks = &other;
    QT_ERR(qx_engine_init(&en, &S.orig, &o, &e), QUAROT_ERR_SHAPE_MISMATCH);
    quarot_online_list_free(&other);
    quarot_online_list_init(&other, NULL);
    QT_OK(quarot_online_list_add(&other, 9, QUAROT_SITE_Q_ROPE, 8, 1, 8, 1, NULL));
    QT_ERR(qx_engine_init(&en, &S.orig, &o, &e), QUAROT_ERR_SHAPE_MISMATCH);
    quarot_online_list_free(&other);
    o.hooks = NULL;
    o.w_bits = 9;
    QT_ERR(qx_engine_init(&en, &S.orig, &o, &e), QUAROT_ERR_INVALID_ARGUMENT);
    o.w_bits = 4;
    o.w_group = 5;
    QT_ERR(qx_engine_init(&en, &S.orig, &o, &e), QUAROT_ERR_INVALID_ARGUMENT);
    free(lg);
}

int main(void) {
    int st = setup();
    if (st < 0) { printf("test_engine: setup failed\n"); return 1; }
    S.have = st;
    QT_RUN(test_fp32_stories);
    QT_RUN(test_w4a4_stories);
    QT_RUN(test_threads);
    QT_RUN(test_synth_qwen3);
    QT_RUN(test_bad_input);
    if (S.have) {
        qx_store_free(&S.orig);
        qx_store_free(&S.rot);
        quarot_online_list_free(&S.hooks);
        free(S.tokens);
    }
    return qt_finish("test_engine");
}
