/* The inference engine (examples/engine/) on the families beyond the LLaMA shape, against the
   reference forward pass (model/qx_forward.c) on synthetic models, without ../shared:
   - phi3 (fused q|k|v and gate|up, model/qx_synth.c), qwen2vl (qx_synth's Qwen2-VL, its vision
     tower beside the text decoder), mixtral, qwen2_moe (a shared expert with its sigmoid gate, dense
     and MoE layers mixed by sparse_step and mlp_only_layers) and qwen3_moe (tests/moe_util.h;
     Qwen3-MoE with its experts as 3-D tensors [n_experts][out][in], as GGUF stores them), and the
     same three MoE families from qx_synth (experts per tensor, dense layers by sparse_step, 3-D);
   - FP32: the engine's logits of a whole window within 1e-5 relative (qt_rel_diff, the dense
     engine's bound in test_engine.c) of the reference's, and token-by-token decoding (one token per
     call through the KV cache) within 1e-5 of the same rows;
   - W4A4, W4A4KV4, W8A8 (per channel) and W4A4 with weight groups: the engine's perplexity within
     1e-5 relative of the fake-quantized reference's (whose quantized linears are the same integer
     sums, model/qx_qlinear.h) -- on the original model and on the QuaRot-rotated one with its online
     hooks (R3 on q/k; R4 before down_proj, before every routed expert's down_proj and the shared
     expert's);
   - 1 and 2 threads give bit-identical logits (prefill and decode);
   - a hook at a site the layer does not have (down_input on a MoE layer) is refused by name. */
#include "qt.h"
#include "cli_util.h"
#include "engine/qx_engine.h"
#include "eval/qx_eval.h"
#include "eval/qx_evalkit.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"
#include "model/qx_synth.h"
#include "support/qx_threads.h"

#include "moe_util.h"
#include "moe_store.h"
#include "engine_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N_FAMS 8
static const char* const FAMS[N_FAMS] = {"phi3", "qwen2vl", "mixtral", "qwen2_moe", "qwen3_moe",
                                         "mixtral", "qwen2_moe", "qwen3_moe"};

/* family f's model into s: 1 on success. 0..1 and 5..7 from qx_synth (5: Mixtral's experts one tensor
   each, 6: Qwen2-MoE with dense layers between MoE layers, 7: Qwen3-MoE's as 3-D tensors), 2..4
   from tests/moe_util.h */
static int fam_store(int f, qx_store* s) {
    qx_synth_desc d;
    qx_err e;
    static mt_model m;
    int ok;
    if (f < 2 || f >= 5) {
        memset(&d, 0, sizeof d);
        d.arch = FAMS[f];
        d.seed = 5 + (uint64_t)f;
        d.max_seq = 128;
        d.sparse_step = f == 6 ? 2 : 0;
        d.experts_stacked = f == 7;
        if (qx_synth_model(s, &d, &e) != QUAROT_OK) { printf("    %s\n", e.msg); return 0; }
        return 1;
    }
    mt_build(&m, (family)(f - 2), f == 4, 70u + (unsigned)f);
    ok = mt_store(&m, s) == QUAROT_OK;
    mt_free(&m);   /* the store holds copies */
    return ok;
}

/* a weight group dividing every linear's input width (at most 16) */
static int64_t fam_group(const qx_store* s) {
    const quarot_model_config* c = &s->config;
    const int64_t w[4] = {c->hidden, c->intermediate, c->expert_intermediate, c->shared_intermediate};
    int64_t g = 16;
    int i;
    for (i = 0; i < 4; ++i)
        while (w[i] > 0 && w[i] % g) g /= 2;
    return g;
}

static void fam_tokens(const qx_store* s, int32_t* toks, int64_t n) {
    int64_t i;
    for (i = 0; i < n; ++i) toks[i] = (int32_t)(1 + (i * 7919 + i * i * 31) % (s->config.vocab - 1));
}

/* FP32: window logits and token-by-token decoding of the engine against the reference's window */
static void check_fp32(const char* fam, const qx_store* s, const quarot_online_list* hooks, const int32_t* toks, int64_t T) {
    qx_ek_forward ef;
    qx_engine en;
    qx_engine_opts o;
    qx_err e;
    int64_t V = s->config.vocab, t;
    float* l0 = (float*)malloc((size_t)(T * V) * sizeof(float));
    float* l1 = (float*)malloc((size_t)(T * V) * sizeof(float));
    double rd, rs;
    QT_OK(qx_ek_forward_init(&ef, s, hooks, NULL, NULL, NULL, &e));
    QT_OK(qx_forward_window(&ef.f, toks, T, l0, &e));
    QT_OK(qx_ek_forward_status(&ef));
    qx_ek_forward_free(&ef);
    memset(&o, 0, sizeof o);
    o.hooks = hooks;
    o.context = T;
    QT_OK(qx_engine_init(&en, s, &o, &e));
    QT_OK(qx_engine_forward(&en, toks, T, l1, 1, &e));
    rd = qt_rel_diff(l1, l0, T * V);
    qx_engine_reset(&en);
    for (t = 0; t < T; ++t) QT_OK(qx_engine_forward(&en, toks + t, 1, l1 + t * V, 0, &e));
    rs = qt_rel_diff(l1, l0, T * V);
    qx_engine_free(&en);
    QT_CHECKF(rd <= 1e-5 && rs <= 1e-5, "%s%s FP32: engine vs reference logits %.3g (window), %.3g (decode) > 1e-5", fam,
              hooks ? " rotated" : "", rd, rs);
    printf("    %-9s %-8s FP32 logits vs reference: window %.2e, token by token %.2e (bound 1e-5)\n", fam,
           hooks ? "QuaRot" : "original", rd, rs);
    free(l0); free(l1);
}

/* the engine's perplexity against the fake-quantized reference's */
static double check_ppl(const char* fam, const qx_store* s, const quarot_online_list* hooks, const qx_windows* win, int w, int a,
                        int kv, int64_t group) {
    qx_err e;
    double rel, p0 = 0, p1 = 0;
    if (eng_ppl_pair(s, hooks, win, w, a, kv, group, 0, &p0, &p1, &e) != QUAROT_OK) {
        QT_CHECKF(0, "%s: engine: %s", fam, e.msg);
        return 1;
    }
    rel = fabs(p1 - p0) / p0;
    QT_CHECKF(rel <= 1e-5, "%s%s W%dA%dKV%d g%lld: engine perplexity %.9f vs reference %.9f (%.2e)", fam, hooks ? " rotated" : "",
              w, a, kv, (long long)group, p1, p0, rel);
    printf("    %-9s %-8s W%dA%d%s%s: reference %.6f, engine %.6f (rel %.1e, bound 1e-5)\n", fam, hooks ? "QuaRot" : "original",
           w, a, kv < 16 ? "KV4" : "", group ? " grouped" : "", p0, p1, rel);
    return rel;
}

/* bit-identical logits for 1 and 2 threads, prefill and decode */
static void check_threads(const char* fam, const qx_store* s, const quarot_online_list* hooks, int bits, const int32_t* toks,
                          int64_t T) {
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
    o.context = T + 1;
    QT_OK(qx_engine_init(&e1, s, &o, &e));
    o.env = &env;
    QT_OK(qx_engine_init(&e2, s, &o, &e));
    QT_OK(qx_engine_forward(&e1, toks, T, l1, 1, &e));
    QT_OK(qx_engine_forward(&e2, toks, T, l2, 1, &e));
    QT_CHECKF(memcmp(l1, l2, (size_t)(T * V) * sizeof(float)) == 0, "%s W%d: 2 threads differ from 1 (prefill)", fam, bits);
    QT_OK(qx_engine_forward(&e1, toks, 1, l1, 0, &e));
    QT_OK(qx_engine_forward(&e2, toks, 1, l2, 0, &e));
    QT_CHECKF(memcmp(l1, l2, (size_t)V * sizeof(float)) == 0, "%s W%d: 2 threads differ from 1 (decode)", fam, bits);
    qx_engine_free(&e1);
    qx_engine_free(&e2);
    qx_pool_destroy(pool);
    free(l1); free(l2);
}

static void test_families(void) {
    int f;
    for (f = 0; f < N_FAMS; ++f) {
        qx_store s, rot;
        quarot_online_list hooks;
        qx_windows win;
        qx_ppl_opts po;
        qx_err e;
        int32_t toks[192];
        const int64_t n = qt_quick() ? 96 : 192, T = 48;
        int64_t group;
        quarot_result r;
        if (!fam_store(f, &s)) { QT_CHECK(0); continue; }
        fam_tokens(&s, toks, n);
        group = fam_group(&s);
        memset(&po, 0, sizeof po);
        po.seq_len = T;
        QT_OK(qx_windows_stream(&win, toks, n, &po, &e));
        check_fp32(FAMS[f], &s, NULL, toks, T);
        check_ppl(FAMS[f], &s, NULL, &win, 4, 4, 16, 0);
        check_ppl(FAMS[f], &s, NULL, &win, 8, 8, 16, 0);
        check_threads(FAMS[f], &s, NULL, 4, toks, 32);
        /* QuaRot with R3 and its online hooks (R4 before every down_proj, routed or shared; Qwen2-VL's
           merger output rotated with the stream, the rest of its vision tower untouched) */
        r = qx_ek_quarot(&s, 0, 1, &rot, &hooks, NULL, 0, NULL, NULL, &e);
        if (r != QUAROT_OK) {
            QT_CHECKF(0, "%s: QuaRot: %s", FAMS[f], e.msg);
        } else {
            int64_t k, n_exp = 0, n_sh = 0;
            for (k = 0; k < hooks.count; ++k) {
                n_exp += hooks.hooks[k].site == QUAROT_SITE_EXPERT_DOWN_INPUT;
                n_sh += hooks.hooks[k].site == QUAROT_SITE_SHARED_DOWN_INPUT;
            }
            QT_CHECKF((n_exp > 0) == (f >= 2) && (n_sh > 0) == (f == 3 || f == 6), "%s: %lld expert, %lld shared-expert hooks", FAMS[f],
                      (long long)n_exp, (long long)n_sh);
            check_fp32(FAMS[f], &rot, &hooks, toks, T);
            check_ppl(FAMS[f], &rot, &hooks, &win, 4, 4, 16, 0);
            check_ppl(FAMS[f], &rot, &hooks, &win, 4, 4, 4, 0);
            if (!qt_quick()) check_ppl(FAMS[f], &rot, &hooks, &win, 4, 4, 16, group);
            check_threads(FAMS[f], &rot, &hooks, 4, toks, 32);
            check_threads(FAMS[f], &rot, &hooks, 16, toks, 20);
            qx_store_free(&rot);
            quarot_online_list_free(&hooks);
        }
        qx_windows_free(&win);
        qx_store_free(&s);
    }
}

/* hooks at sites a layer does not have */
static void test_bad_hooks(void) {
    qx_store s;
    qx_engine en;
    qx_engine_opts o;
    quarot_online_list h;
    qx_err e;
    if (!fam_store(3, &s)) { QT_CHECK(0); return; }   /* qwen2_moe: layer 1 MoE, layer 0 dense */
    memset(&o, 0, sizeof o);
    quarot_online_list_init(&h, NULL);
    QT_OK(quarot_online_list_add(&h, 1, QUAROT_SITE_DOWN_INPUT, 16, 1, 16, 1, NULL));
    o.hooks = &h;
    QT_ERR(qx_engine_init(&en, &s, &o, &e), QUAROT_ERR_SHAPE_MISMATCH);
    QT_CHECKF(strstr(e.msg, "down_input") != NULL && strstr(e.msg, "mixture-of-experts") != NULL, "%s", e.msg);
    quarot_online_list_free(&h);
    quarot_online_list_init(&h, NULL);
    QT_OK(quarot_online_list_add(&h, 0, QUAROT_SITE_SHARED_DOWN_INPUT, 24, 1, 24, 1, NULL));
    QT_ERR(qx_engine_init(&en, &s, &o, &e), QUAROT_ERR_SHAPE_MISMATCH);
    QT_CHECKF(strstr(e.msg, "shared_down_input") != NULL && strstr(e.msg, "dense") != NULL, "%s", e.msg);
    quarot_online_list_free(&h);
    qx_store_free(&s);
}

/* `quarot eval --engine int` against `--engine ref` on the W4A4 row (no rotation and QuaRot
   columns) of a phi3, a Mixtral and a Qwen2-MoE safetensors directory, and on the packed W4A4 file
   `quarot quantize` writes of each */
static void test_cli_eval(void) {
    static const int fams[3] = {0, 2, 3};
    char toks[1024], dir[512];
    int i, k, n = 0;
    for (i = 0; i < 64; ++i) n += snprintf(toks + n, sizeof toks - (size_t)n, "%d ", 1 + (i * 13 + 7) % 47);
    QT_CHECK(write_str(tmp_path("toks.txt"), toks));
    for (k = 0; k < 3; ++k) {
        qx_store s;
        qx_st_save_opts so;
        qx_err e;
        double r1 = 0, r2 = 0, e1 = 0, e2 = 0;
        int ok;
        if (qt_quick() && k != 2) continue;
        g_mlp_only = 0;   /* the tool's readers take sparse_step, not mlp_only_layers */
        ok = fam_store(fams[k], &s);
        g_mlp_only = 1;
        if (!ok) { QT_CHECK(0); continue; }
        snprintf(dir, sizeof dir, "%s/%s", g_tmp, FAMS[fams[k]]);
        memset(&so, 0, sizeof so);
        so.force = 1;
        QT_OK(qx_st_save(&s, dir, &so, &e));
        qx_store_free(&s);
        QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 16 --w-bits 4 --a-bits 4 --quiet", dir, tmp_path("toks.txt")), 0);
        ok = table_row(g_out, "W4A4", &r1, &r2);
        QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 16 --w-bits 4 --a-bits 4 --quiet --engine int", dir, tmp_path("toks.txt")), 0);
        ok = ok && table_row(g_out, "W4A4", &e1, &e2);
        QT_CHECKF(ok && fabs(e1 - r1) <= 1e-5 * r1 && fabs(e2 - r2) <= 1e-5 * r2, "%s: engine %.6f / %.6f vs reference %.6f / %.6f: %s",
                  FAMS[fams[k]], e1, e2, r1, r2, g_err);
        printf("    quarot eval %-9s W4A4 no rotation / QuaRot: --engine ref %.6f / %.6f, --engine int %.6f / %.6f (bound 1e-5)\n",
               FAMS[fams[k]], r1, r2, e1, e2);
        {   /* the packed W4A4 file of `quarot quantize` (experts one tensor each): the engine runs its codes */
            char q[600];
            snprintf(q, sizeof q, "%s.packed.safetensors", dir);
            QT_EQ_INT(CLI("quantize %s %s --quiet", dir, q), 0);
            QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 16 --quiet", q, tmp_path("toks.txt")), 0);
            r1 = row_value("W4A4");
            QT_EQ_INT(CLI("eval %s --tokens %s --seq-len 16 --quiet --engine int", q, tmp_path("toks.txt")), 0);
            e1 = row_value("W4A4");
            QT_CHECKF(r1 > 0 && fabs(e1 - r1) <= 1e-5 * r1, "%s packed: engine %.6f vs reference %.6f: %s", FAMS[fams[k]], e1, r1,
                      g_err);
            printf("    quarot eval %-9s packed W4A4 file: --engine ref %.6f, --engine int %.6f (bound 1e-5)\n", FAMS[fams[k]], r1,
                   e1);
        }
    }
}

int main(int argc, char** argv) {
    (void)argc;
    QT_RUN(test_families);
    QT_RUN(test_bad_hooks);
    if (cu_start(argv[0], "test_engine_fam")) {
        QT_RUN(test_cli_eval);
        cu_finish();
    }
    return qt_finish("test_engine_fam");
}
