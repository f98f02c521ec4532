/* The reference forward pass (model/qx_forward.c) on mixture-of-experts models: synthetic Mixtral,
   Qwen2-MoE (a shared expert, dense and MoE layers mixed by sparse_step and mlp_only_layers) and
   Qwen3-MoE, experts one tensor each or 3-D [n_experts][out][in] (tests/moe_util.h, whose forward
   is written independently of the tool's).
   - The tool's logits equal the test-side forward's within 2e-5 of the largest |logit| (f32 GEMMs
     against matrix-vector products in double), and both choose the same experts for every token.
   - Layer-wise (stream_weights) and 2 threads give the same bits as the copy path on one.
   - Weight fake quantization applies to the experts' and the shared expert's linears and not to
     the router or the shared-expert gate: W4 equals the FP forward of a model whose expert / shared
     weights were fake-quantized beforehand with quarot_fake_quant_f32, bit for bit; W8A8's integer
     products on the experts equal the float products of the fake-quantized values within 1e-4.
   - `quarot eval` of a MoE safetensors directory and GGUF file, before and after `quarot rotate`
     (offline and --online), gives the same perplexity within 1e-4 relative (the bound of the
     dense families, test_cli_rotate.c), and the rotated model routes every token to the same
     experts as the original (0 routing flips), the rotated one run with its hooks.
     `quarot rotate --check` reports the same (its logit difference within 2e-5, 0 routing flips);
     `quarot plot --site down` draws a MoE layer's routed experts' inputs.
   - rotate's prediction of the online rotations (qx_rotcheck) covers the experts' R4.
   - calibrate (Adapt Rotation stage 1) captures the shared expert's, the routed experts' (pooled)
     or the router's inputs with the row counts the routing implies, and rotate --rotation adapt
     with its context keeps the logits (2e-5) and the routing; calibrate --method spinquant learns on
     them and its rotations keep the logits and the routing too (GPTQ and scale migration per expert:
     tests/test_moe_quant.c). From a GGUF MoE (3-D experts) the
     same patterns capture the same rows as from the model saved as safetensors, and the learned R
     equals that one (bit for bit; Mixtral, whose GGUF q/k rows are interleaved, within 1e-5). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "model_util.h"
#include "formats/qx_gguf.h"
#include "cli/qx_rotcheck.h"
#include "eval/qx_calib.h"
#include "model/qx_online.h"
#include "support/qx_threads.h"

#include "moe_util.h"
#include "moe_store.h"

static const char* const FAMS[3] = {"mixtral", "qwen2_moe", "qwen3_moe"};


/* the experts the tool chose: [layer][token][2], -1 in dense layers */
typedef struct routes {
    int chosen[4 * SEQ * 2];
    int64_t calls;
} routes;

static void on_route(void* u, int64_t layer, const int32_t* experts, int64_t T, int64_t k) {
    routes* r = (routes*)u;
    int64_t t;
    r->calls++;
    for (t = 0; t < T && t < SEQ && k == 2; ++t) {
        r->chosen[(layer * SEQ + t) * 2] = experts[t * 2];
        r->chosen[(layer * SEQ + t) * 2 + 1] = experts[t * 2 + 1];
    }
}

static int32_t g_toks[SEQ];

/* the tool's logits of g_toks through s with options o (hooks may be NULL) and its routes */
static int tool_logits(const qx_store* s, qx_forward_opts* o, const quarot_online_list* hooks, float* out, routes* rt) {
    qx_forward f;
    qx_err e;
    qx_online_ctx oc;
    int ok;
    memset(rt, 0xff, sizeof rt->chosen);
    rt->calls = 0;
    o->route = on_route;
    o->route_user = rt;
    qx_online_ctx_init(&oc, hooks);
    if (hooks) { o->online = qx_online_hooks; o->online_user = &oc; }
    if (qx_forward_init(&f, s, o, &e) != QUAROT_OK) { printf("    init: %s\n", e.msg); qx_online_ctx_free(&oc); return 0; }
    ok = qx_forward_window(&f, g_toks, SEQ, out, &e) == QUAROT_OK;
    if (!ok) printf("    forward: %s\n", e.msg);
    ok = ok && oc.status == QUAROT_OK && (!hooks || oc.calls > 0);
    qx_forward_free(&f);
    qx_online_ctx_free(&oc);
    return ok;
}

static void test_forward_matches_reference(void) {
    int f, stacked, i;
    for (i = 0; i < SEQ; ++i) g_toks[i] = (int32_t)((i * 11 + 5) % 48);
    for (f = 0; f < 3; ++f)
        for (stacked = 0; stacked < 2; ++stacked) {
            static mt_model m;
            static float la[SEQ * 48], lb[SEQ * 48], lc[SEQ * 48];
            int ca[4 * SEQ * 2];
            int64_t calls, flips = 0, n_moe = 0, l;
            routes rt;
            qx_store s;
            qx_forward_opts o;
            double diff;
            mt_build(&m, (family)f, stacked, 21u + (unsigned)f);
            m.rope = 1;
            m.tokens = g_toks;
            QT_CHECK(forward(&m, NULL, la, ca, &calls));
            QT_CHECK(mt_store(&m, &s) == QUAROT_OK);
            memset(&o, 0, sizeof o);
            QT_CHECK(tool_logits(&s, &o, NULL, lb, &rt));
            diff = qt_rel_diff(lb, la, SEQ * 48);
            for (l = 0; l < m.cfg.n_layers; ++l) n_moe += quarot_config_layer_is_moe(&m.cfg, l);
            for (i = 0; i < (int)m.cfg.n_layers * SEQ * 2; ++i) flips += ca[i] != rt.chosen[i];
            QT_CHECKF(diff <= 2e-5, "%s %s: tool vs reference logits differ by %.3g of the largest", FAMS[f],
                      stacked ? "3-D" : "per expert", diff);
            QT_CHECKF(flips == 0 && rt.calls == n_moe, "%s: %lld routing differences, %lld route calls for %lld MoE layers",
                      FAMS[f], (long long)flips, (long long)rt.calls, (long long)n_moe);
            printf("    %-9s %-10s tool vs test-side forward: logits max rel diff %.2e (bound 2e-5), %lld of %lld MoE layers, "
                   "routing differences %lld\n", FAMS[f], stacked ? "3-D" : "per expert", diff, (long long)n_moe,
                   (long long)m.cfg.n_layers, (long long)flips);
            {   /* layer-wise and 2 threads: the same bits */
                qx_pool* pool = qx_pool_create(2);
                quarot_env env;
                memset(&o, 0, sizeof o);
                o.stream_weights = 1;
                QT_CHECK(tool_logits(&s, &o, NULL, lc, &rt));
                QT_CHECKF(memcmp(lb, lc, sizeof lc) == 0, "%s: layer-wise differs", FAMS[f]);
                qx_pool_env(pool, &env);
                memset(&o, 0, sizeof o);
                o.env = &env;
                QT_CHECK(tool_logits(&s, &o, NULL, lc, &rt));
                QT_CHECKF(memcmp(lb, lc, sizeof lc) == 0, "%s: 2 threads differ from 1", FAMS[f]);
                qx_pool_destroy(pool);
            }
            qx_store_free(&s);
            mt_free(&m);
        }
}

/* W4 (per output channel, symmetric) on the experts and the shared expert only: the same as FP on a
   model whose expert / shared weights are fake-quantized beforehand; the router and the shared gate
   are left alone. W8A8's integer products (codes and scales, as the engine) on the experts equal the
   float products of the fake-quantized values to float rounding (1e-4 of the largest logit). */
static void test_weight_quant_skips_router(void) {
    int f, stacked;
    for (f = 0; f < 3; ++f)
        for (stacked = 0; stacked < 2; stacked += 1 + (f != 2)) {
            static mt_model m;
            static float lq[SEQ * 48], lp[SEQ * 48], l8[SEQ * 48];
            routes rt, rp;
            int64_t flips = 0;
            qx_store s, sq;
            qx_forward_opts o;
            quarot_quant_desc d;
            int i, n_q = 0;
            double d8;
            mt_build(&m, (family)f, stacked, 31u + (unsigned)f);
            m.tokens = g_toks;
            QT_CHECK(mt_store(&m, &s) == QUAROT_OK);
            memset(&o, 0, sizeof o);
            o.quant.w_bits = 4;
            QT_CHECK(tool_logits(&s, &o, NULL, lq, &rt));
            memset(&d, 0, sizeof d);
            d.bits = 4;
            d.clip_ratio = 1.0f;
            for (i = 0; i < m.count; ++i) {   /* every decoder linear but the router / the shared gate */
                const char* n = m.items[i].name;
                quarot_tensor* t = &m.items[i].t;
                if (!strstr(n, "_proj.weight") && !strstr(n, ".w1.") && !strstr(n, ".w2.") && !strstr(n, ".w3.")) continue;
                QT_OK(quarot_fake_quant_f32((float*)t->data, t->ne[1] * t->ne[2], t->ne[0], t->ne[0], &d));
                ++n_q;
            }
            QT_CHECK(mt_store(&m, &sq) == QUAROT_OK);
            memset(&o, 0, sizeof o);
            QT_CHECK(tool_logits(&sq, &o, NULL, lp, &rt));
            QT_CHECKF(memcmp(lq, lp, sizeof lp) == 0, "%s %s: W4 is not the FP forward of the fake-quantized experts "
                      "(rel %.3g)", FAMS[f], stacked ? "3-D" : "per expert", qt_rel_diff(lq, lp, SEQ * 48));
            memset(&o, 0, sizeof o);
            o.quant.w_bits = 8;
            o.quant.a_bits = 8;
            QT_CHECK(tool_logits(&s, &o, NULL, l8, &rt));
            o.stream_weights = 1;   /* layer-wise, one expert's integer form at a time: the same bits */
            QT_CHECK(tool_logits(&s, &o, NULL, lp, &rp));
            QT_CHECKF(memcmp(lp, l8, sizeof lp) == 0, "%s: W8A8 layer-wise differs", FAMS[f]);
            o.stream_weights = 0;
            o.quant.float_linears = 1;   /* the float product of the fake-quantized values */
            QT_CHECK(tool_logits(&s, &o, NULL, lp, &rp));
            d8 = qt_rel_diff(l8, lp, SEQ * 48);
            for (i = 0; i < 4 * SEQ * 2; ++i) flips += rt.chosen[i] != rp.chosen[i];
            QT_CHECKF(d8 <= 1e-4 && flips == 0, "%s: W8A8 integer vs float products %.3g, %lld flips", FAMS[f], d8, (long long)flips);
            printf("    %-9s %-10s W4 = FP on %d pre-quantized linears (router, shared gate FP): bit-identical; "
                   "W8A8 integer vs float products %.2e (bound 1e-4), %lld routing flips\n", FAMS[f], stacked ? "3-D" : "per expert", n_q, d8,
                   (long long)flips);
            qx_store_free(&s);
            qx_store_free(&sq);
            mt_free(&m);
        }
}

/* ---- the tool: eval before and after rotate ---- */


static double eval_ppl(const char* model, const char* toks) {
    int rc = CLI("eval %s --tokens %s --seq-len 16 --w-bits 16 --a-bits 16 --quiet", model, toks);
    QT_CHECKF(rc == 0, "eval %s: rc %d: %s", model, rc, g_err);
    return rc == 0 ? row_value("FP32") : -1.0;
}

static void test_cli_eval_rotate(void) {
    char toks[256 * 4], in[512], out[512], hooks[600];
    int gguf, f, online, i, n = 0;
    for (i = 0; i < 96; ++i) n += snprintf(toks + n, sizeof toks - (size_t)n, "%d ", (i * 13 + 7) % 48);
    QT_CHECK(write_str(tmp_path("toks.txt"), toks));
    snprintf(toks, sizeof toks, "%s", tmp_path("toks.txt"));
    g_mlp_only = 0;   /* the tool's readers take sparse_step, not mlp_only_layers */
    for (gguf = 0; gguf < 2; ++gguf)
        for (f = 0; f < 3; ++f) {   /* GGUF: Mixtral (llama with experts), qwen2moe, qwen3moe */
            static mt_model m;
            double p0, p1;
            qx_store a, b;
            if (qt_quick() && f != 1 + gguf) continue;
            g_all_moe = gguf;
            mt_build(&m, (family)f, gguf, 50u + (unsigned)f);
            g_all_moe = 0;
            snprintf(in, sizeof in, "%s/%s_in%s", g_tmp, FAMS[f], gguf ? ".gguf" : "");
            if (!mt_save(&m, in, gguf)) { QT_CHECK(0); mt_free(&m); continue; }
            p0 = eval_ppl(in, toks);
            QT_CHECK(load_model(in, &a));
            if (!gguf) {   /* plot of the routed experts' down_proj inputs, before and after QuaRot */
                int rc = CLI("plot %s --tokens %s -o %s/plot%d.svg --site down --force", in, toks, g_tmp, f);
                QT_CHECKF(rc == 0 && strstr(g_out, "after QuaRot:") != NULL, "plot %s: rc %d: %s", FAMS[f], rc, g_err);
            }
            for (online = 0; online < 2; ++online) {
                static float la[SEQ * 48], lb[SEQ * 48];
                routes ra, rb;
                qx_forward_opts o;
                quarot_online_list l;
                int64_t flips = 0, routed = 0, k;
                double rel;
                snprintf(out, sizeof out, "%s/%s_out%d%s", g_tmp, FAMS[f], online, gguf ? ".gguf" : "");
                if (gguf) snprintf(hooks, sizeof hooks, "%s.quarot-online", out);
                else snprintf(hooks, sizeof hooks, "%s/quarot_online.txt", out);
                QT_EQ_INT(CLI("rotate %s %s --check %s", in, out, online ? "--online" : ""), 0);
                {   /* rotate --check: its own logit difference and routing flips */
                    const char* c = strstr(g_out, "of the largest |logit|");
                    const char* p = c ? c : g_out;
                    double crel = 1;
                    while (c && p > g_out && p[-1] != ',') --p;
                    if (c) crel = atof(p + 1);
                    QT_CHECKF(c && crel <= 2e-5 && strstr(g_out, "; routing flips 0 of ") != NULL, "rotate --check: %s", g_out);
                }
                p1 = eval_ppl(out, toks);   /* eval attaches the hook file beside the model */
                if (online) {   /* the integer engine on the rotated file with its hooks: the reference's W4A4 */
                    double wr, wi;
                    const char* q = "--tokens %s --seq-len 16 --w-bits 4 --a-bits 4 --columns none --quiet";
                    char cmd[1400];
                    snprintf(cmd, sizeof cmd, "eval %s %s", out, q);
                    QT_EQ_INT(CLI(cmd, toks), 0);
                    wr = row_value("W4A4");
                    snprintf(cmd, sizeof cmd, "eval %s %s --engine int", out, q);
                    QT_EQ_INT(CLI(cmd, toks), 0);
                    wi = row_value("W4A4");
                    QT_CHECKF(wr > 0 && fabs(wi - wr) <= 1e-5 * wr, "%s %s: engine W4A4 %.6f vs reference %.6f", FAMS[f],
                              gguf ? "GGUF" : "safetensors", wi, wr);
                    printf("    %s %-9s rotated --online: W4A4 engine %.6f, reference %.6f\n", gguf ? "GGUF" : "safetensors", FAMS[f], wi, wr);
                }
                QT_CHECKF(p0 > 0 && p1 > 0 && fabs(p1 - p0) / p0 < 1e-4, "%s %s%s: perplexity %.6f -> %.6f", FAMS[f],
                          gguf ? "GGUF" : "safetensors", online ? " --online" : "", p0, p1);
                /* routing of the rotated model (with its hooks) against the original's */
                QT_CHECK(load_model(out, &b));
                quarot_online_list_init(&l, NULL);
                if (online) QT_CHECK(load_hooks(hooks, &l));
                memset(&o, 0, sizeof o);
                QT_CHECK(tool_logits(&a, &o, NULL, la, &ra));
                memset(&o, 0, sizeof o);
                QT_CHECK(tool_logits(&b, &o, online ? &l : NULL, lb, &rb));
                rel = qt_rel_diff(lb, la, SEQ * 48);
                for (k = 0; k < m.cfg.n_layers * SEQ * 2; ++k) {
                    flips += ra.chosen[k] != rb.chosen[k];
                    routed += ra.chosen[k] >= 0;
                }
                QT_CHECKF(rel <= 2e-5 && flips == 0, "%s%s: logits %.3g, %lld routing flips", FAMS[f], online ? " --online" : "",
                          rel, (long long)flips);
                printf("    quarot eval %-11s %-9s %-8s ppl %.6f -> %.6f (rel %.1e, bound 1e-4); logits rel %.1e, "
                       "routing flips %lld of %lld\n", gguf ? "GGUF" : "safetensors", FAMS[f], online ? "--online" : "offline",
                       p0, p1, p0 > 0 ? fabs(p1 - p0) / p0 : 0.0, rel, (long long)flips, (long long)routed);
                quarot_online_list_free(&l);
                qx_store_free(&b);
            }
            qx_store_free(&a);
            mt_free(&m);
        }
    g_mlp_only = 1;
}

/* rotate --check's report: its logit difference (of the largest |logit|) and 0 routing flips */
static int check_ok(const char* out, double* crel) {
    const char* c = strstr(out, "of the largest |logit|");
    const char* p = c;
    *crel = 1;
    while (c && p > out && p[-1] != ',') --p;
    if (c) *crel = atof(p + 1);
    return c && *crel <= 2e-5 && strstr(out, "; routing flips 0 of ") != NULL;
}

/* The "captured N linears (...), R rows" line of calibrate's stderr: N and R. */
static int captured(const char* err, long long* n, long long* rows) {
    const char* c = strstr(err, "captured ");
    const char* r = c ? strstr(c, "), ") : NULL;
    if (!c || !r) return 0;
    *n = atoll(c + 9);
    *rows = atoll(r + 3);
    return 1;
}

/* calibrate (Adapt Rotation stage 1) on MoE models, then rotate --rotation adapt with its context.
   96 tokens in 12 stream windows of 8 (no BOS: --tokens), every window starting with token 5, so
   position 0 (the same vector in every window) is captured from the first window only. Truth from
   the routing's definition: the shared expert and a dense layer see every token; each token goes
   to exactly k = 2 experts, so the routed experts' pooled rows are k per token, and position 0 of
   windows 2..12 is dropped from the k experts it went to: per layer, shared / dense 96 - 11 rows,
   pooled experts 2 x (96 - 11). Default --layer-type: Qwen2-MoE (layers 1, 3 MoE, 0, 2 dense) the
   shared expert's and the dense layers' up_proj, 4 linears; Mixtral and Qwen3-MoE (3 MoE layers)
   the routed experts' up_proj, 3 linears. Rotated with the context, the logits stay within
   rotate --check's 2e-5 with 0 routing flips. SpinQuant learns on them too;
   a --layer-type matching nothing: one line naming it and the names there are, exit 4, no file. */
static void test_cli_calibrate_moe(void) {
    static const char* const dflt[3] = {"experts.up_proj.weight", "shared_expert.up_proj.weight", "experts.up_proj.weight"};
    static const long long n_dflt[3] = {3, 4, 3}, per_dflt[3] = {2 * 85, 85, 2 * 85};
    /* one more --layer-type per family: Mixtral's w1 pooled, the shared expert's gate_proj, the router */
    static const char* const alt[3] = {"experts.gate_proj", "shared_expert.gate_proj", "gate.weight"};
    static const char* const alt_name[3] = {"block_sparse_moe.experts.gate_proj.weight", "mlp.shared_expert.gate_proj.weight",
                                            "mlp.gate.weight"};
    static const long long n_alt[3] = {3, 2, 3}, per_alt[3] = {2 * 85, 85, 85};
    static mt_model m;
    char toks[512], in[512], ctx[512], out[512];
    int f, rc, i, n = 0;
    for (i = 0; i < 96; ++i) n += snprintf(toks + n, sizeof toks - (size_t)n, "%d ", i % 8 == 0 ? 5 : (i * 7 + 3) % 48);
    QT_CHECK(write_str(tmp_path("cal_toks.txt"), toks));
    snprintf(toks, sizeof toks, "%s", tmp_path("cal_toks.txt"));
    g_mlp_only = 0;
    for (f = 0; f < 3; ++f) {
        long long nl = 0, rows = 0;
        double crel = 1;
        int k;
        if (qt_quick() && f != 1) continue;
        mt_build(&m, (family)f, 0, 70u + (unsigned)f);
        snprintf(in, sizeof in, "%s/cal_%s", g_tmp, FAMS[f]);
        snprintf(ctx, sizeof ctx, "%s/cal_%s.ctx", g_tmp, FAMS[f]);
        snprintf(out, sizeof out, "%s/cal_%s_rot", g_tmp, FAMS[f]);
        if (!mt_save(&m, in, 0)) { QT_CHECK(0); mt_free(&m); continue; }
        for (k = 0; k < 2; ++k) {
            long long want_n = k ? n_alt[f] : n_dflt[f], want_rows = want_n * (k ? per_alt[f] : per_dflt[f]);
            const char* name = k ? alt_name[f] : dflt[f];
            char lt[160] = "";
            if (k) snprintf(lt, sizeof lt, "--layer-type %s", alt[f]);
            rc = CLI("calibrate %s -o %s --tokens %s --seq-len 8 --steps 3 --force %s", in, ctx, toks, lt);
            QT_CHECKF(rc == 0, "%s %s: rc %d: %s", FAMS[f], lt, rc, g_err);
            QT_CHECKF(captured(g_err, &nl, &rows) && nl == want_n && rows == want_rows && strstr(g_err, name) != NULL &&
                      strstr(g_out, name) != NULL && strstr(g_out, "96 tokens") != NULL,
                      "%s %s: captured %lld linears, %lld rows (expected %lld, %lld of %s): %s", FAMS[f], lt, nl, rows, want_n,
                      want_rows, name, g_err);
            if (f == 1 && !k) {   /* the dense layers' up_proj beside the shared expert's */
                const char* c = strstr(g_err, "captured ");
                QT_CHECKF(strstr(g_out, "model.layers.{i}.mlp.up_proj.weight") != NULL, "%s", g_out);
                if (c) printf("    stderr: %s", c);
            }
            rc = CLI("rotate %s %s --rotation adapt --context %s --check --force", in, out, ctx);
            QT_CHECKF(rc == 0 && check_ok(g_out, &crel), "%s %s: rotate rc %d: %s%s", FAMS[f], lt, rc, g_out, g_err);
            printf("    calibrate %-9s %-30s captured %lld linears (%s), %lld rows; rotate --check %.1e, 0 routing flips\n",
                   FAMS[f], k ? lt + 13 : "(default)", nl, name, rows, crel);
        }
        if (f == 2 || qt_quick()) {   /* matches nothing here: named, with the names there are; nothing written */
            const char* none = f == 2 ? "shared_expert.up_proj" : "block_sparse_moe";
            remove(ctx);
            rc = CLI("calibrate %s -o %s --tokens %s --seq-len 8 --layer-type %s", in, ctx, toks, none);
            QT_CHECKF(rc == QX_EXIT_PROCESS && count_lines(g_err) == 1 && strstr(g_err, none) != NULL &&
                      strstr(g_err, f == 2 ? "mlp.experts.up_proj.weight" : "matched no linear") != NULL, "rc %d: %s", rc, g_err);
            QT_CHECK(access(ctx, F_OK) != 0);
            printf("    no match: %s", g_err);
            /* SpinQuant learns on the MoE model; its rotations keep the function and the routing */
            rc = CLI("calibrate %s -o %s.rot --tokens %s --seq-len 8 --nsamples 4 --batch 2 --steps 2 --method spinquant", in, ctx,
                     toks);
            QT_CHECKF(rc == 0 && strstr(g_out, "experts ") != NULL, "rc %d: %s%s", rc, g_out, g_err);
            rc = CLI("rotate %s %s --rotations %s.rot --check --force", in, out, ctx);
            QT_CHECKF(rc == 0 && check_ok(g_out, &crel), "%s spinquant: rotate rc %d: %s%s", FAMS[f], rc, g_out, g_err);
        }
        mt_free(&m);
    }
    g_mlp_only = 1;
}

/* m's routed experts, one tensor each, as the 3-D [n_experts][out][in] tensors of a GGUF file
   (the same values; the other tensors copied) into st. */
static void stack_experts(const mt_model* m, mt_model* st) {
    const char* const one[3] = {m->eg, m->eu, m->ed};
    const char* const three[3] = {m->stg, m->stu, m->std_};
    char n[QUAROT_NAME_MAX];
    int i, l, p, e;
    *st = *m;
    st->count = 0;
    st->cfg.experts_stacked = 1;
    for (i = 0; i < m->count; ++i) {
        const mt_tensor* t = &m->items[i];
        if (strstr(t->name, "experts.") && !strstr(t->name, "shared_expert")) continue;
        memcpy(mt_new(st, t->name, t->t.ne[0], t->t.ne[1], 1), t->t.data, (size_t)(t->t.ne[0] * t->t.ne[1]) * sizeof(float));
    }
    for (l = 0; l < (int)m->cfg.n_layers; ++l) {
        if (!quarot_config_layer_is_moe(&m->cfg, l)) continue;
        for (p = 0; p < 3; ++p) {
            const mt_tensor* t0;
            float* d;
            nme(n, one[p], l, 0);
            t0 = mt_find((mt_model*)m, n);
            nm(n, three[p], l);
            d = mt_new(st, n, t0->t.ne[0], t0->t.ne[1], m->cfg.n_experts);
            for (e = 0; e < (int)m->cfg.n_experts; ++e) {
                const mt_tensor* t;
                nme(n, one[p], l, e);
                t = mt_find((mt_model*)m, n);
                memcpy(d + (size_t)e * (size_t)(t->t.ne[0] * t->t.ne[1]), t->t.data, (size_t)(t->t.ne[0] * t->t.ne[1]) * sizeof(float));
            }
        }
    }
}

/* calibrate on a GGUF MoE (experts as 3-D tensors: llama.cpp's Mixtral, qwen2moe, qwen3moe) and on
   the same model saved as a Hugging Face safetensors directory (experts one tensor each), with the
   same tokens, seed and options: the same patterns select the same readers (the same "captured"
   line: linears, names and rows), and the contexts' R are equal: bit for bit for qwen2moe and
   qwen3moe (the same arithmetic on the same values: an expert's rows are a slice of the 3-D tensor),
   within 1e-5 for Mixtral (GGUF's llama stores q/k rows in the interleaved RoPE layout, so the
   attention sums in another order; 2.7e-6 measured after 3 steps). rotate --rotation adapt
   --context on the GGUF keeps its logits (rotate --check within 2e-5, 0 routing flips). */
static void test_cli_calibrate_moe_gguf(void) {
    /* per family: the default, then the routed experts' gate_proj with the router (and the shared expert's up_proj) */
    static const char* const lts[3][2] = {{"", "experts.gate_proj,gate.weight"},
                                          {"", "experts.up_proj,gate.weight,shared_expert.gate_proj"},
                                          {"", "experts.up_proj,gate.weight"}};
    static mt_model m, ms;
    char toks[512], st[512], gg[512], cst[512], cgg[512], out[512];
    int f, k, rc, i, n = 0;
    double worst = 0;
    for (i = 0; i < 96; ++i) n += snprintf(toks + n, sizeof toks - (size_t)n, "%d ", i % 8 == 0 ? 5 : (i * 7 + 3) % 48);
    QT_CHECK(write_str(tmp_path("calg_toks.txt"), toks));
    snprintf(toks, sizeof toks, "%s", tmp_path("calg_toks.txt"));
    g_mlp_only = 0;
    for (f = 0; f < 3; ++f) {
        if (qt_quick() && f != 1) continue;
        g_all_moe = 1;   /* llama.cpp's qwen2moe has no dense layers */
        mt_build(&m, (family)f, 0, 90u + (unsigned)f);
        g_all_moe = 0;
        stack_experts(&m, &ms);
        snprintf(st, sizeof st, "%s/calg_%s", g_tmp, FAMS[f]);
        snprintf(gg, sizeof gg, "%s/calg_%s.gguf", g_tmp, FAMS[f]);
        snprintf(cst, sizeof cst, "%s/calg_%s_st.ctx", g_tmp, FAMS[f]);
        snprintf(cgg, sizeof cgg, "%s/calg_%s_gguf.ctx", g_tmp, FAMS[f]);
        snprintf(out, sizeof out, "%s/calg_%s_rot.gguf", g_tmp, FAMS[f]);
        if (!mt_save(&m, st, 0) || !mt_save(&ms, gg, 1)) { QT_CHECK(0); mt_free(&m); mt_free(&ms); continue; }
        for (k = 0; k < 2; ++k) {
            char lt[160] = "", cap_st[600] = "", cap_gg[600] = "";
            const char* c;
            quarot_adapt_context a, b;
            qx_err e;
            long long nl = 0, rows = 0;
            double d = -1, crel = 1, dl = 1;
            if (lts[f][k][0]) snprintf(lt, sizeof lt, "--layer-type %s", lts[f][k]);
            rc = CLI("calibrate %s -o %s --tokens %s --seq-len 8 --steps 3 --force %s", st, cst, toks, lt);
            QT_CHECKF(rc == 0, "safetensors %s %s: rc %d: %s", FAMS[f], lt, rc, g_err);
            if ((c = strstr(g_err, "captured ")) != NULL) snprintf(cap_st, sizeof cap_st, "%.*s", (int)strcspn(c, "\n"), c);
            rc = CLI("calibrate %s -o %s --tokens %s --seq-len 8 --steps 3 --force %s", gg, cgg, toks, lt);
            QT_CHECKF(rc == 0, "GGUF %s %s: rc %d: %s", FAMS[f], lt, rc, g_err);
            if ((c = strstr(g_err, "captured ")) != NULL) snprintf(cap_gg, sizeof cap_gg, "%.*s", (int)strcspn(c, "\n"), c);
            QT_CHECKF(cap_st[0] && strcmp(cap_st, cap_gg) == 0 && captured(cap_gg, &nl, &rows) && nl > 0 && rows > 0,
                      "%s %s: safetensors '%s', GGUF '%s'", FAMS[f], lt, cap_st, cap_gg);
            quarot_adapt_context_init(&a, NULL);
            quarot_adapt_context_init(&b, NULL);
            if (qx_calib_context_load(cst, &a, &e) == QUAROT_OK && qx_calib_context_load(cgg, &b, &e) == QUAROT_OK && a.block == b.block &&
                a.rows == b.rows && a.seed == b.seed && a.hadamard_block == b.hadamard_block) {
                int64_t j;
                d = 0;
                for (j = 0; j < a.block * a.block; ++j)
                    if (fabs(a.matrix[j] - b.matrix[j]) > d) d = fabs(a.matrix[j] - b.matrix[j]);
            }
            QT_CHECKF(d >= 0 && d <= (f == 0 ? 1e-5 : 0.0), "%s %s: max |R_gguf - R_safetensors| %.3e (rows %lld / %lld)", FAMS[f], lt, d,
                      (long long)a.rows, (long long)b.rows);
            dl = a.start_loss > 0 ? fabs(a.start_loss - b.start_loss) / a.start_loss : 1;
            if (d > worst) worst = d;
            quarot_adapt_context_free(&a);
            quarot_adapt_context_free(&b);
            rc = CLI("rotate %s %s --rotation adapt --context %s --check --force", gg, out, cgg);
            QT_CHECKF(rc == 0 && check_ok(g_out, &crel), "%s %s: rotate rc %d: %s%s", FAMS[f], lt, rc, g_out, g_err);
            printf("    GGUF %-9s %-52s %s; max |dR| %.1e, start loss rel %.1e; rotate --check %.1e, 0 routing flips\n", FAMS[f],
                   lt[0] ? lt + 13 : "(default)", cap_gg, d, dl, crel);
        }
        if (f == 1) {   /* patterns match the Hugging Face names, not llama.cpp's: named, with the names there are */
            remove(cgg);
            rc = CLI("calibrate %s -o %s --tokens %s --seq-len 8 --layer-type ffn_up_exps", gg, cgg, toks);
            QT_CHECKF(rc == QX_EXIT_PROCESS && count_lines(g_err) == 1 && strstr(g_err, "ffn_up_exps") != NULL &&
                      strstr(g_err, "model.layers.{i}.mlp.experts.up_proj.weight") != NULL && access(cgg, F_OK) != 0, "rc %d: %s", rc, g_err);
        }
        mt_free(&m);
        mt_free(&ms);
    }
    g_mlp_only = 1;
    printf("    max |R_gguf - R_safetensors| %.2e\n", worst);
}

/* rotate's prediction of the online rotations covers the experts' R4 (expert_intermediate) and the
   shared expert's (shared_intermediate): a width with no Hadamard block above 2 is warned. */
static void test_rotcheck_experts(void) {
    static mt_model m;
    qx_rotcheck_opts o;
    qx_rotcheck_dim d[8];
    int n, k, seen_e = 0, seen_s = 0;
    mt_build(&m, FAM_QWEN2, 0, 3);
    m.cfg.expert_intermediate = 22;   /* 2 x 11: blocks of H_2 only */
    memset(&o, 0, sizeof o);
    o.online = 1;
    n = qx_rotcheck(&m.cfg, &o, d, 8);
    for (k = 0; k < n; ++k) {
        if (strcmp(d[k].what, "online expert down_proj") == 0) { seen_e = 1; QT_CHECKF(d[k].n == 22 && d[k].warn, "%s", d[k].text); }
        if (strcmp(d[k].what, "online shared down_proj") == 0) { seen_s = 1; QT_CHECKF(d[k].n == 24 && !d[k].warn, "%s", d[k].text); }
    }
    QT_CHECK(seen_e && seen_s);
    printf("    %d dimensions predicted; experts' R4 22: warned\n", n);
    mt_free(&m);
}

int main(int argc, char** argv) {
    (void)argc;
    QT_RUN(test_forward_matches_reference);
    QT_RUN(test_weight_quant_skips_router);
    QT_RUN(test_rotcheck_experts);
    if (!cu_start(argv[0], "test_moe_fwd")) return 1;
    QT_RUN(test_cli_eval_rotate);
    QT_RUN(test_cli_calibrate_moe);
    QT_RUN(test_cli_calibrate_moe_gguf);
    cu_finish();
    return qt_finish("test_moe_fwd");
}
