/* Mixture-of-experts layers in the header's processor (>>moe, >>processor_moe): synthetic Mixtral,
   Qwen2-MoE (a shared expert with a sigmoid gate, dense and MoE layers mixed by sparse_step and
   mlp_only_layers) and Qwen3-MoE models held in memory, with the experts as one tensor each (Hugging
   Face) or as 3-D tensors [n_experts][out][in] (GGUF). A small forward pass (tests/moe_util.h: RMSNorm, causal
   attention, softmax routing over the router logits, top-k, renormalization where the family does,
   the online hooks) gives the logits before and after quarot_rotate_model, with and without online
   rotations: they agree within the bound the dense families meet in f32 (max |d logit| <= 2e-5 of
   max |logit|, tests/test_cli_rotate.c), and the same experts are chosen for every token. Bad
   shapes and counts are refused during validation, before anything is written. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quarot.h"
#include "qt.h"
#include "cli_util.h"
#include "model_util.h"
#include "formats/qx_gguf.h"
#include "formats/qx_load.h"
#include "pipeline/qx_rotate_file.h"

#include "moe_util.h"
#include "moe_store.h"
#include "rotate_util.h"

static void test_moe_invariance(void) {
    static const char* const fams[3] = {"mixtral", "qwen2_moe", "qwen3_moe"};
    int f, stacked, online;
    for (f = 0; f < 3; ++f)
        for (stacked = 0; stacked < 2; ++stacked)
            for (online = 0; online < 2; ++online) {
                static mt_model m;
                float la[SEQ * 48], lb[SEQ * 48];
                int ca[4 * SEQ * 2], cb[4 * SEQ * 2];
                int64_t calls_a, calls_b, i, flips = 0, routed = 0;
                double diff = 0.0, amax = 0.0;
                quarot_model qm;
                quarot_rotate_desc d;
                quarot_online_list hooks;
                quarot_result r;
                mt_build(&m, (family)f, stacked, 11u + (unsigned)f);
                QT_CHECK(forward(&m, NULL, la, ca, &calls_a));
                qm = mt_binding(&m);
                memset(&d, 0, sizeof d);
                d.seed = 5;
                d.online = online;
                quarot_online_list_init(&hooks, NULL);
                d.online_out = &hooks;
                r = quarot_rotate_model(&qm, &d);
                QT_CHECKF(r == QUAROT_OK, "%s: %s", fams[f], qm.error);
                QT_CHECK(forward(&m, online ? &hooks : NULL, lb, cb, &calls_b));
                for (i = 0; i < SEQ * 48; ++i) {
                    if (fabs((double)la[i] - lb[i]) > diff) diff = fabs((double)la[i] - lb[i]);
                    if (fabs((double)la[i]) > amax) amax = fabs((double)la[i]);
                }
                for (i = 0; i < m.cfg.n_layers * SEQ * 2; ++i) { flips += ca[i] != cb[i]; routed += ca[i] >= 0; }
                diff /= amax;
                QT_CHECKF(diff <= 2e-5, "%s %s%s: logits differ by %.3g of the largest", fams[f],
                          stacked ? "3-D" : "per expert", online ? " --online" : "", diff);
                QT_CHECKF(flips == 0, "%s: %lld routing flips", fams[f], (long long)flips);
                if (online) {
                    const quarot_online_hook* h = quarot_online_find(&hooks, 1, QUAROT_SITE_EXPERT_DOWN_INPUT);
                    QT_CHECK(h && h->experts == 4 && h->size == 16);
                    QT_CHECK(calls_b > 0);
                    QT_CHECK((f == 1) == (quarot_online_find(&hooks, 1, QUAROT_SITE_SHARED_DOWN_INPUT) != NULL));
                    QT_CHECK((f == 1) == (quarot_online_find(&hooks, 0, QUAROT_SITE_DOWN_INPUT) != NULL));
                    QT_CHECK((f == 1) == (quarot_online_find(&hooks, 3, QUAROT_SITE_DOWN_INPUT) != NULL));
                    QT_CHECK(quarot_online_find(&hooks, 3, QUAROT_SITE_EXPERT_DOWN_INPUT) == NULL);
                    QT_CHECK(quarot_online_find(&hooks, 1, QUAROT_SITE_DOWN_INPUT) == NULL);
                }
                printf("    %-9s %-10s %-8s logits max rel diff %.2e (bound 2e-5), routing flips %lld of %lld\n",
                       fams[f], stacked ? "3-D" : "per expert", online ? "--online" : "offline", diff,
                       (long long)flips, (long long)routed);
                quarot_online_list_free(&hooks);
                mt_free(&m);
            }
}

/* tensor_done: the names the processor is done with; a tensor asked for again after that fails the
   test (the binding may have written and freed it). */
typedef struct td_state {
    mt_model* m;
    char done[MAXT][QUAROT_NAME_MAX];
    int n_done, asked_after, twice;
    /* get_slice / slice_done (slices = 1): expert e of a stacked weight is copied into buf and copied
       back on slice_done; the rotation pass must ask for no stacked weight whole, and take the
       experts of each in order, one at a time */
    int slices, rotating;
    int whole_asked, bad_order, n_slices;
    char cur[QUAROT_NAME_MAX];   /* the weight whose expert cur_e is out ("" none) */
    int64_t cur_e, next_e;
    float* buf;
    int64_t max_slice;           /* largest slice handed out, elements */
    int64_t observed;            /* on_command calls */
} td_state;

static int td_observe(void* u, const quarot_command* c) {
    (void)c;
    ((td_state*)u)->observed++;
    return 0;
}

static quarot_result td_get(void* u, const char* name, quarot_tensor* out) {
    td_state* t = (td_state*)u;
    quarot_result r;
    int i;
    for (i = 0; i < t->n_done; ++i)
        if (strcmp(t->done[i], name) == 0) t->asked_after++;
    r = mt_get_tensor(t->m, name, out);
    if (r == QUAROT_OK && t->slices && t->rotating && out->ne[2] > 1) t->whole_asked++;
    return r;
}

static quarot_result td_get_slice(void* u, const char* name, int64_t e, quarot_tensor* out) {
    td_state* t = (td_state*)u;
    quarot_tensor w;
    int64_t ne[2];
    quarot_result r = mt_get_tensor(t->m, name, &w);
    if (r != QUAROT_OK) return r;
    if (t->cur[0] || w.ne[2] < 2 || e < 0 || e >= w.ne[2]) { t->bad_order++; return QUAROT_ERR_STATE; }
    if (e != t->next_e) t->bad_order++;   /* experts 0, 1, ... of one weight, then the next weight's */
    ne[0] = w.ne[0];
    ne[1] = w.ne[1];
    t->buf = (float*)malloc((size_t)(ne[0] * ne[1]) * sizeof(float));
    if (!t->buf) return QUAROT_ERR_OUT_OF_MEMORY;
    memcpy(t->buf, (const char*)w.data + (size_t)e * w.nb[2], (size_t)(ne[0] * ne[1]) * sizeof(float));
    if (ne[0] * ne[1] > t->max_slice) t->max_slice = ne[0] * ne[1];
    snprintf(t->cur, sizeof t->cur, "%s", name);
    t->cur_e = e;
    return quarot_tensor_init(out, t->buf, QUAROT_DTYPE_F32, 2, ne);
}

static quarot_result td_slice_done(void* u, const char* name, int64_t e) {
    td_state* t = (td_state*)u;
    quarot_tensor w;
    if (strcmp(t->cur, name) != 0 || e != t->cur_e || mt_get_tensor(t->m, name, &w) != QUAROT_OK) {
        t->bad_order++;
        return QUAROT_ERR_STATE;
    }
    memcpy((char*)w.data + (size_t)e * w.nb[2], t->buf, (size_t)(w.ne[0] * w.ne[1]) * sizeof(float));
    free(t->buf);
    t->buf = NULL;
    t->cur[0] = 0;
    t->next_e = e + 1 < w.ne[2] ? e + 1 : 0;
    t->n_slices++;
    return QUAROT_OK;
}

static quarot_result td_create(void* u, const char* name, quarot_dtype dt, int n_dims, const int64_t* ne, quarot_tensor* out) {
    return mt_create(((td_state*)u)->m, name, dt, n_dims, ne, out);
}

static quarot_result td_done(void* u, const char* name) {
    td_state* t = (td_state*)u;
    int i;
    if (t->cur[0] || t->next_e != 0) t->bad_order++;   /* an expert still out, or not all of them done */
    for (i = 0; i < t->n_done; ++i)
        if (strcmp(t->done[i], name) == 0) t->twice++;
    if (t->n_done < MAXT) snprintf(t->done[t->n_done++], QUAROT_NAME_MAX, "%s", name);
    return QUAROT_OK;
}

/* m rotated through the processor's steps; f32: the commands' single-precision flag (the tool's
   setting for f16 / bf16 outputs, under which norm scalings fold into commands); td: with tensor_done
   (and with get_slice / slice_done when slices). */
static int td_rotate(mt_model* m, int online, int f32, td_state* td, int slices, quarot_online_list* hooks) {
    quarot_model qm = mt_binding(m);
    quarot_rotate_desc d;
    quarot_processor p;
    int64_t i, l;
    quarot_result r;
    memset(&d, 0, sizeof d);
    d.seed = 3;
    d.online = online;
    d.online_out = hooks;
    if (td) {
        memset(td, 0, sizeof *td);
        td->m = m;
        qm.user_data = td;
        qm.get_tensor = td_get;
        qm.create_tensor = td_create;
        qm.tensor_done = td_done;
        td->slices = slices;
        d.on_command = td_observe;
        d.user_data = td;
        if (slices) {
            qm.get_slice = td_get_slice;
            qm.slice_done = td_slice_done;
        }
    }
    r = quarot_processor_init(&p, &qm, &d);
    if (r != QUAROT_OK) { printf("    init: %s\n", qm.error); return 0; }
    for (i = 0; i < p.n_commands; ++i) p.commands[i].f32 = f32;
    r = quarot_processor_pre_run(&p);
    if (td) td->rotating = 1;
    for (l = 0; r == QUAROT_OK && l < m->cfg.n_layers; ++l) r = quarot_processor_run_layer(&p, l);
    if (r == QUAROT_OK) r = quarot_processor_post_run(&p);
    if (r != QUAROT_OK) printf("    rotate: %s\n", qm.error);
    if (td && r == QUAROT_OK && td->observed != p.n_commands) {
        printf("    on_command called %lld times for %lld commands\n", (long long)td->observed, (long long)p.n_commands);
        r = QUAROT_ERR_INTERNAL;
    }
    if (td) { free(td->buf); td->buf = NULL; }
    quarot_processor_free(&p);
    return r == QUAROT_OK;
}

/* With tensor_done a layer runs tensor by tensor: every tensor of the model ends with the same bits
   as in the plain order, each layer weight is named done once and never asked for again. With
   get_slice (stacked experts) the rotation pass takes every 3-D weight expert by expert, in order,
   never whole, and on_command still sees each command once. */
static void test_moe_tensor_done(void) {
    static mt_model a, b;
    static td_state td;
    int f, stacked, online, f32, sl;
    for (f = 0; f < 3; ++f)
        for (stacked = 0; stacked < 2; ++stacked)
            for (online = 0; online < 2; ++online)
                for (f32 = 0; f32 < 2; ++f32)
                for (sl = 0; sl <= stacked; ++sl) {
                    quarot_online_list ha, hb;
                    int i, same = 1, layer_weights = 0, named = 0, ok;
                    int64_t want_slices = 0, want_max = 0;
                    mt_build(&a, (family)f, stacked, 21u + (unsigned)f);
                    mt_build(&b, (family)f, stacked, 21u + (unsigned)f);
                    quarot_online_list_init(&ha, NULL);
                    quarot_online_list_init(&hb, NULL);
                    ok = td_rotate(&a, online, f32, NULL, 0, &ha) && td_rotate(&b, online, f32, &td, sl, &hb);
                    QT_CHECK(ok);
                    QT_EQ_INT(a.count, b.count);
                    for (i = 0; ok && i < a.count && i < b.count; ++i) {
                        const quarot_tensor* t = &a.items[i].t;
                        size_t nb = (size_t)(t->ne[0] * t->ne[1] * t->ne[2]) * sizeof(float);
                        same &= strcmp(a.items[i].name, b.items[i].name) == 0 && memcmp(t->data, b.items[i].t.data, nb) == 0;
                        if (strstr(a.items[i].name, "layers.") && strstr(a.items[i].name, "proj.weight")) ++layer_weights;
                        if (t->ne[2] > 1) {
                            want_slices += t->ne[2];
                            if (t->ne[0] * t->ne[1] > want_max) want_max = t->ne[0] * t->ne[1];
                        }
                    }
                    for (i = 0; i < td.n_done; ++i) named += strstr(td.done[i], "proj.weight") != NULL;
                    QT_CHECKF(same, "%d %d %d %d %d: tensors differ", f, stacked, online, f32, sl);
                    if (sl) {
                        QT_CHECKF(want_slices > 0 && td.n_slices == want_slices && td.max_slice == want_max,
                                  "%d experts of %lld taken one at a time (largest %lld elements, one expert %lld)",
                                  td.n_slices, (long long)want_slices, (long long)td.max_slice, (long long)want_max);
                        QT_CHECKF(td.whole_asked == 0 && td.bad_order == 0, "%d stacked weights asked whole, %d out of order",
                                  td.whole_asked, td.bad_order);
                    }
                    QT_CHECKF(td.asked_after == 0 && td.twice == 0, "%d asked after done, %d named twice", td.asked_after, td.twice);
                    QT_CHECKF(named == layer_weights, "%d of %d layer projections named done", named, layer_weights);
                    QT_EQ_INT((int)ha.count, (int)hb.count);
                    quarot_online_list_free(&ha);
                    quarot_online_list_free(&hb);
                    mt_free(&a);
                    mt_free(&b);
                }
}

/* A rotation that forgets the routed experts' R4 (the hook without its offline half, or an expert's
   down_proj left out) changes the logits: the check above can fail. */
static int skip_expert_down(void* u, const quarot_command* c) {
    (void)u;
    return c->rotation == QUAROT_ROT_R4_EXPERT && strstr(c->weight, "experts.2.") != NULL;
}

static void test_moe_check_can_fail(void) {
    static mt_model m;
    float la[SEQ * 48], lb[SEQ * 48];
    int ca[4 * SEQ * 2], cb[4 * SEQ * 2];
    int64_t ka, kb, i;
    double diff = 0.0;
    quarot_model qm;
    quarot_rotate_desc d;
    quarot_online_list hooks;
    mt_build(&m, FAM_QWEN3, 0, 3);
    QT_CHECK(forward(&m, NULL, la, ca, &ka));
    qm = mt_binding(&m);
    memset(&d, 0, sizeof d);
    d.online = 1;
    quarot_online_list_init(&hooks, NULL);
    d.online_out = &hooks;
    d.on_command = skip_expert_down;
    QT_CHECK(quarot_rotate_model(&qm, &d) != QUAROT_OK);   /* the exactly-once check */
    QT_CHECK(forward(&m, &hooks, lb, cb, &kb));
    for (i = 0; i < SEQ * 48; ++i)
        if (fabs((double)la[i] - lb[i]) > diff) diff = fabs((double)la[i] - lb[i]);
    QT_CHECKF(diff > 1e-3, "a skipped expert R4 went unnoticed (%.3g)", diff);
    quarot_online_list_free(&hooks);
    mt_free(&m);
}

/* Bad input: refused in validation with the tensor named, nothing written. */
static void test_moe_bad_input(void) {
    int k;
    for (k = 0; k < 5; ++k) {
        static mt_model m;
        quarot_model qm;
        quarot_rotate_desc d;
        quarot_result r;
        float before;
        const char* expect;
        mt_build(&m, k == 4 ? FAM_QWEN2 : FAM_MIXTRAL, k == 3, 7);
        before = mt_get(&m, "model.layers.0.self_attn.q_proj.weight")[0];
        qm = mt_binding(&m);
        switch (k) {
            case 0:   /* config says 5 experts, the tensors hold 4 */
                qm.config.n_experts = 5;
                expect = "block_sparse_moe.gate.weight";
                break;
            case 1:   /* top-k larger than the experts */
                qm.config.n_experts_used = 5;
                expect = "experts used";
                break;
            case 2: { /* a missing expert tensor */
                mt_tensor* t = mt_find(&m, "model.layers.1.block_sparse_moe.experts.3.w2.weight");
                snprintf(t->name, sizeof t->name, "renamed");
                expect = "model.layers.1.block_sparse_moe.experts.3.w2.weight";
                break;
            }
            case 3: { /* a 3-D expert tensor with the wrong expert count */
                mt_tensor* t = mt_find(&m, "model.layers.0.block_sparse_moe.experts.w1.weight");
                t->t.ne[2] = 3;
                expect = "model.layers.0.block_sparse_moe.experts.w1.weight";
                break;
            }
            default: { /* a router of the wrong shape (Qwen2-MoE's layer 1) */
                mt_tensor* t = mt_find(&m, "model.layers.1.mlp.gate.weight");
                t->t.ne[1] = 3;
                expect = "model.layers.1.mlp.gate.weight";
                break;
            }
        }
        memset(&d, 0, sizeof d);
        r = quarot_rotate_model(&qm, &d);
        QT_CHECKF(r != QUAROT_OK && strstr(qm.error, expect) != NULL, "case %d: %s (%s)", k, qm.error,
                  quarot_result_string(r));
        QT_CHECK(mt_get(&m, "model.layers.0.self_attn.q_proj.weight")[0] == before);
        printf("    refused: %s\n", qm.error);
        mt_free(&m);
    }
}

/* The hook file names the experts a hook covers, and reads back. */
static void test_moe_hook_file(void) {
    quarot_online_list a, b;
    size_t need = 0;
    char* text;
    char err[200];
    quarot_online_list_init(&a, NULL);
    quarot_online_list_init(&b, NULL);
    QT_OK(quarot_online_list_add(&a, 1, QUAROT_SITE_EXPERT_DOWN_INPUT, 16, 1, 16, 1, NULL));
    a.hooks[0].experts = 4;
    QT_OK(quarot_online_list_add(&a, 1, QUAROT_SITE_SHARED_DOWN_INPUT, 24, 1, 24, 1, NULL));
    QT_OK(quarot_online_write(&a, NULL, 0, &need));
    text = (char*)malloc(need);
    QT_OK(quarot_online_write(&a, text, need, &need));
    QT_CHECK(strstr(text, "hook 1 expert_down_input size=16 outer=1 n=16 inner=1 K=1 m=4 experts=4 signs=-") != NULL);
    QT_CHECK(strstr(text, "hook 1 shared_down_input size=24") != NULL);
    QT_OK(quarot_online_read(&b, text, strlen(text), err, sizeof err));
    QT_CHECK(b.count == 2 && b.hooks[0].experts == 4 && b.hooks[1].experts == 0);
    quarot_online_list_free(&b);
    quarot_online_list_init(&b, NULL);
    {   /* without the count: refused */
        char* p = strstr(text, " experts=4");
        memmove(p, p + 10, strlen(p + 10) + 1);
        QT_CHECK(quarot_online_read(&b, text, strlen(text), err, sizeof err) == QUAROT_ERR_PARSE);
    }
    free(text);
    quarot_online_list_free(&a);
    quarot_online_list_free(&b);
}

/* ---- the tool: quarot rotate on a Hugging Face directory ----------------------------------------- */

/* The tensors of the model file at path into m (whose names and config it keeps). */
static int mt_load(mt_model* m, const char* path) {
    qx_store s;
    int i;
    if (!load_model(path, &s)) return 0;
    for (i = 0; i < m->count; ++i) {
        const quarot_tensor* t = qx_store_find(&s, m->items[i].name);
        int64_t n = m->items[i].t.ne[0] * m->items[i].t.ne[1] * m->items[i].t.ne[2];
        if (!t || t->dtype != QUAROT_DTYPE_F32 || quarot_tensor_nelements(t) != n) {
            printf("    %s: tensor %s missing or changed\n", path, m->items[i].name);
            qx_store_free(&s);
            return 0;
        }
        memcpy(m->items[i].t.data, t->data, (size_t)n * sizeof(float));
    }
    qx_store_free(&s);
    return 1;
}

static void test_cli_moe_rotate(void) {
    static const char* const fams[3] = {"mixtral", "qwen2_moe", "qwen3_moe"};
    int f, online, gguf;
    g_mlp_only = 0;
    for (gguf = 0; gguf < 2; ++gguf)
    for (f = 0; f < 3; ++f)   /* GGUF: Mixtral as llama with experts, qwen2moe and qwen3moe */
        for (online = 0; online < 2; ++online) {
            static mt_model m;
            float la[SEQ * 48], lb[SEQ * 48];
            int ca[4 * SEQ * 2], cb[4 * SEQ * 2];
            int64_t calls, i, flips = 0;
            double diff = 0.0, amax = 0.0;
            char in[512], out[512], hooks[600];
            quarot_online_list l;
            int ok;
            g_all_moe = gguf;
            mt_build(&m, (family)f, gguf, 40u + (unsigned)f);
            g_all_moe = 0;
            QT_CHECK(forward(&m, NULL, la, ca, &calls));
            snprintf(in, sizeof in, "%s/%s_in%s", g_tmp, fams[f], gguf ? ".gguf" : "");
            snprintf(out, sizeof out, "%s/%s_out%d%s", g_tmp, fams[f], online, gguf ? ".gguf" : "");
            if (gguf) snprintf(hooks, sizeof hooks, "%s.quarot-online", out);
            else snprintf(hooks, sizeof hooks, "%s/quarot_online.txt", out);
            if (!mt_save(&m, in, gguf)) { QT_CHECK(0); mt_free(&m); continue; }
            QT_EQ_INT(CLI("rotate %s %s %s", in, out, online ? "--online" : ""), 0);
            if (online) {   /* the summary counts one expert hook per MoE layer */
                char want[64];
                int64_t n_moe = 0, L;
                for (L = 0; L < m.cfg.n_layers; ++L) n_moe += quarot_config_layer_is_moe(&m.cfg, L);
                snprintf(want, sizeof want, "expert_down_input %lld, shared_down_input %lld", (long long)n_moe,
                         (long long)(f == 1 ? n_moe : 0));
                QT_CHECKF(strstr(g_out, want) != NULL, "%s", g_out);
            }
            if (gguf && !online) {   /* quantize keeps the routers in F32 and says so */
                QT_EQ_INT(CLI("quantize %s %s/q%d.gguf --quiet", in, g_tmp, f), 0);
                QT_CHECKF(strstr(g_out, "mixture-of-experts routers / shared-expert gates kept F32") != NULL &&
                          strstr(g_out, "MoE gate, kept F32") != NULL, "%s", g_out);
            }
            ok = mt_load(&m, out);
            QT_CHECK(ok);
            quarot_online_list_init(&l, NULL);
            if (ok && online) ok = load_hooks(hooks, &l);
            QT_CHECK(ok);
            if (ok) QT_CHECK(forward(&m, online ? &l : NULL, lb, cb, &calls));
            for (i = 0; ok && i < SEQ * 48; ++i) {
                if (fabs((double)la[i] - lb[i]) > diff) diff = fabs((double)la[i] - lb[i]);
                if (fabs((double)la[i]) > amax) amax = fabs((double)la[i]);
            }
            for (i = 0; ok && i < m.cfg.n_layers * SEQ * 2; ++i) flips += ca[i] != cb[i];
            diff = ok ? diff / amax : 1e30;
            QT_CHECKF(diff <= 2e-5 && flips == 0, "%s%s: logits differ by %.3g, %lld routing flips", fams[f],
                      online ? " --online" : "", diff, (long long)flips);
            printf("    quarot rotate %-11s %-9s %-8s logits max rel diff %.2e, routing flips %lld\n",
                   gguf ? "GGUF 3-D" : "safetensors", fams[f], online ? "--online" : "", diff, (long long)flips);
            quarot_online_list_free(&l);
            mt_free(&m);
        }
    g_mlp_only = 1;
}

/* m as a GGUF file without the save's checks (keys from the config, then `set` applied): the bad
   files a reader must refuse. */
static int mt_save_gguf_unchecked(mt_model* m, const char* path, const qx_gguf_set* set, int n_set) {
    qx_store s;
    qx_sb kv;
    qx_tensor_plan* plan = NULL;
    qx_gguf_writer* w = NULL;
    qx_gguf_write_opts wo;
    qx_err e;
    quarot_result r = mt_store(m, &s);
    int64_t i;
    memset(&kv, 0, sizeof kv);
    memset(&wo, 0, sizeof wo);
    wo.force = 1;
    wo.set = set;
    wo.n_set = n_set;
    if (r == QUAROT_OK) r = qx_gguf_kv_from_config(&s, &kv, &e);
    if (r == QUAROT_OK && !(plan = qx_store_plan(&s, QUAROT_DTYPE_DEFAULT, 0))) r = QUAROT_ERR_OUT_OF_MEMORY;
    if (r == QUAROT_OK) r = qx_gguf_writer_begin(&w, path, plan, s.count, kv.p, kv.len, &wo, &e);
    for (i = 0; r == QUAROT_OK && i < s.count; ++i) r = qx_gguf_writer_put(w, s.items[i].name, &s.items[i].t, &e);
    if (r == QUAROT_OK) r = qx_gguf_writer_finish(w, &e);
    else qx_gguf_writer_abort(w);
    if (r != QUAROT_OK) printf("    save %s: %s\n", path, e.msg);
    free(plan);
    qx_sb_free(&kv);
    qx_store_free(&s);
    return r == QUAROT_OK;
}

/* A Mixtral GGUF as llama.cpp writes it: arch llama with llama.expert_count / expert_used_count,
   no expert_feed_forward_length, the router and the 3-D experts under their GGUF names. */
static void test_cli_moe_mixtral_gguf_keys(void) {
    static mt_model m;
    static const char* const want[] = {"llama.expert_count", "llama.expert_used_count", "blk.2.ffn_gate_inp.weight",
                                       "blk.2.ffn_gate_exps.weight", "blk.2.ffn_up_exps.weight", "blk.2.ffn_down_exps.weight"};
    char in[512], out[512];
    size_t n = 0, k;
    char* img;
    g_mlp_only = 0;
    mt_build(&m, FAM_MIXTRAL, 1, 7);
    snprintf(in, sizeof in, "%s/mixtral_keys.gguf", g_tmp);
    snprintf(out, sizeof out, "%s/mixtral_keys_out.gguf", g_tmp);
    QT_CHECK(mt_save(&m, in, 1));
    QT_EQ_INT(CLI("rotate %s %s", in, out), 0);
    img = (char*)read_all(out, &n);
    QT_CHECK(img != NULL);
    for (k = 0; img && k < sizeof want / sizeof want[0]; ++k) {
        size_t l = strlen(want[k]), i;
        int found = 0;
        for (i = 0; !found && i + l <= n; ++i) found = memcmp(img + i, want[k], l) == 0;
        QT_CHECKF(found, "%s not in the rotated GGUF", want[k]);
    }
    if (img) {   /* the architecture string llama.cpp reads: "llama" after general.architecture */
        size_t i, l = strlen("general.architecture");
        int arch_llama = 0, no_eff = 1;
        for (i = 0; i + l + 16 <= n; ++i)
            if (memcmp(img + i, "general.architecture", l) == 0) arch_llama = memcmp(img + i + l + 4 + 8, "llama", 5) == 0;
        for (i = 0; i + 26 <= n; ++i) no_eff &= memcmp(img + i, "expert_feed_forward_length", 26) != 0;
        QT_CHECK(arch_llama);
        QT_CHECK(no_eff);
    }
    free(img);
    mt_free(&m);
    g_mlp_only = 1;
}

/* Bad Mixtral GGUF files: exit code 2, one line naming the key or tensor, nothing written. */
static void test_cli_moe_mixtral_gguf_bad(void) {
    static mt_model m;
    char in[512], out[512];
    int k;
    g_mlp_only = 0;
    for (k = 0; k < 3; ++k) {
        qx_gguf_set set[1];
        int n_set = 0;
        const char* expect;
        mt_build(&m, FAM_MIXTRAL, 1, 11);
        memset(set, 0, sizeof set);
        if (k == 0) {   /* top-k above the expert count */
            set[0].key = "llama.expert_used_count"; set[0].type = QX_GGUF_U32; set[0].u = 6;
            n_set = 1;
            expect = "llama.expert_used_count";
        } else if (k == 1) {   /* a router of 3 rows for 4 experts */
            mt_find(&m, "model.layers.1.block_sparse_moe.gate.weight")->t.ne[1] = 3;
            expect = "\"blk.1.ffn_gate_inp.weight\" (model.layers.1.block_sparse_moe.gate.weight)";
        } else {   /* no up experts in layer 2 */
            mt_tensor* t = mt_find(&m, "model.layers.2.block_sparse_moe.experts.w3.weight");
            snprintf(t->name, sizeof t->name, "model.layers.2.unused.weight");
            expect = "\"blk.2.ffn_up_exps.weight\" (model.layers.2.block_sparse_moe.experts.w3.weight)";
        }
        snprintf(in, sizeof in, "%s/mixtral_bad%d.gguf", g_tmp, k);
        snprintf(out, sizeof out, "%s/mixtral_bad%d_out.gguf", g_tmp, k);
        QT_CHECK(mt_save_gguf_unchecked(&m, in, set, n_set));
        QT_EQ_INT(CLI("rotate %s %s", in, out), 2);
        QT_CHECKF(strstr(g_err, expect) != NULL && count_lines(g_err) == 1, "case %d: %s", k, g_err);
        QT_CHECK(access(out, F_OK) != 0);
        printf("    refused: %s", g_err);
        mt_free(&m);
    }
    g_mlp_only = 1;
}

/* Bad input through the tool: exit code 2, one line naming what is wrong, nothing written. */
/* m as a GGUF file with every tensor in dt (the CLI test's mt_save writes f32). */
static int mt_save_gguf_dt(const mt_model* m, const char* path, quarot_dtype dt) {
    qx_store s;
    qx_gguf_save_opts go;
    qx_err e;
    quarot_result r = QUAROT_OK;
    int i;
    qx_store_init(&s);
    s.config = m->cfg;
    for (i = 0; i < m->count && r == QUAROT_OK; ++i) {
        const quarot_tensor* t = &m->items[i].t;
        quarot_tensor* c = NULL;
        r = qx_store_add(&s, m->items[i].name, dt, t->ne[2] > 1 ? 3 : t->ne[1] > 1 ? 2 : 1, t->ne, NULL, &c);
        if (r == QUAROT_OK)
            r = quarot_convert(c->data, dt, t->data, QUAROT_DTYPE_F32, quarot_tensor_nelements(t), QUAROT_ISA_DEFAULT);
    }
    memset(&go, 0, sizeof go);
    memset(&e, 0, sizeof e);
    go.force = 1;
    if (r == QUAROT_OK) r = qx_gguf_save(&s, path, &go, &e);
    if (r != QUAROT_OK) printf("    save %s: %s %s\n", path, quarot_result_string(r), e.msg);
    qx_store_free(&s);
    return r == QUAROT_OK;
}

static int pe_exists(const char* path) {
    FILE* f = fopen(path, "rb");
    if (f) fclose(f);
    return f != NULL;
}

/* The GGUF at `in` rotated by qx_rotate_file into `out` as the tool does (file mappings dropped,
   `threads`), the stacked experts whole or one expert at a time. */
static quarot_result moe_rotate_file(const char* in, const char* out, int online, int whole, int threads,
                                     qx_rotate_file_stats* st, qx_err* e) {
    quarot_rotate_desc desc;
    qx_rotate_file_opts ro = ru_file_opts(out, threads);
    memset(&desc, 0, sizeof desc);
    desc.seed = 9;
    desc.online = online;
    ro.whole_experts = whole;
    return ru_rotate_file(in, &desc, &ro, st, e);
}

/* quarot rotate of a GGUF with 3-D experts [n][out][in] (f32, f16, bf16; offline and --online):
   by default the tool copies, rotates and writes each stacked weight one expert at a time
   (quarot_model.get_slice), never holding one whole, and the file has the same bytes as the
   whole-tensor order's (opts.whole_experts). A NaN in an expert stops both the same way, with the
   same message and nothing written. */
static void test_file_moe_gguf_per_expert(void) {
    static const quarot_dtype dts[3] = {QUAROT_DTYPE_F32, QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    static mt_model m;
    int d, online;
    g_mlp_only = 0;
    for (d = 0; d < 3; ++d)
        for (online = 0; online < 2; ++online) {
            qx_rotate_file_stats sw, ss;
            qx_err e;
            char in[512], ow[600], os[600];
            int64_t experts = 0, i;
            size_t stacked_f32 = 0;
            mt_build(&m, FAM_QWEN3, 1, 60u + (unsigned)d);
            for (i = 0; i < m.count; ++i)
                if (m.items[i].t.ne[2] > 1) {
                    experts += m.items[i].t.ne[2];
                    stacked_f32 = (size_t)quarot_tensor_nelements(&m.items[i].t) * sizeof(float);
                }
            snprintf(in, sizeof in, "%s/pe_%s.gguf", g_tmp, quarot_dtype_name(dts[d]));
            snprintf(ow, sizeof ow, "%s/pe_whole%d.gguf", g_tmp, online);
            snprintf(os, sizeof os, "%s/pe_slices%d.gguf", g_tmp, online);
            if (!mt_save_gguf_dt(&m, in, dts[d])) { QT_CHECK(0); mt_free(&m); continue; }
            QT_OK(moe_rotate_file(in, ow, online, 1, 2, &sw, &e));
            QT_OK(moe_rotate_file(in, os, online, 0, 1 + d % 2, &ss, &e));
            QT_CHECKF(same_file(ow, os), "%s%s: the expert-by-expert output differs from the whole-tensor one",
                      quarot_dtype_name(dts[d]), online ? " --online" : "");
            QT_EQ_INT((int)sw.expert_slices, 0);
            QT_CHECKF(experts > 0 && ss.expert_slices == experts, "%lld of %lld experts written one at a time",
                      (long long)ss.expert_slices, (long long)experts);
            QT_EQ_INT((int)ss.tensors_written, (int)sw.tensors_written);
            QT_CHECKF(ss.peak_copy_bytes < sw.peak_copy_bytes && sw.peak_copy_bytes >= stacked_f32,
                      "writable copies at most %zu bytes expert by expert, %zu whole (a stacked weight in f32: %zu)",
                      ss.peak_copy_bytes, sw.peak_copy_bytes, stacked_f32);
            printf("    GGUF %-4s %-8s 3-D experts: %lld one at a time, same bytes as whole; copies at most %zu vs %zu bytes\n",
                   quarot_dtype_name(dts[d]), online ? "--online" : "offline", (long long)ss.expert_slices,
                   ss.peak_copy_bytes, sw.peak_copy_bytes);
            if (d == 1 && online == 0) {   /* a NaN in expert 2 of layer 1's down_proj */
                mt_tensor* t = mt_find(&m, "model.layers.1.mlp.experts.down_proj.weight");
                char ew[sizeof e.msg];
                int k;
                QT_CHECK(t != NULL);
                if (t) ((float*)t->t.data)[2 * t->t.ne[0] * t->t.ne[1] + 5 * t->t.ne[0] + 3] = NAN;
                QT_CHECK(mt_save_gguf_dt(&m, in, dts[d]));
                for (k = 0; k < 2; ++k) {
                    remove(k ? os : ow);
                    QT_EQ_INT(moe_rotate_file(in, k ? os : ow, 0, !k, 1, k ? &ss : &sw, &e), QUAROT_ERR_NONFINITE);
                    QT_CHECKF(!pe_exists(k ? os : ow), "%s left behind", k ? os : ow);
                    if (k == 0) memcpy(ew, e.msg, sizeof ew);
                }
                QT_CHECKF(strcmp(ew, e.msg) == 0 && strstr(e.msg, "row 69, column 3"), "whole: %s; experts: %s", ew, e.msg);
                printf("    refused: %s\n", e.msg);
            }
            remove(in);
            remove(ow);
            remove(os);
            mt_free(&m);
        }
    g_mlp_only = 1;
}

static void test_cli_moe_bad_input(void) {
    static mt_model m;
    char in[512], out[512], cfg[600];
    int k;
    g_mlp_only = 0;
    for (k = 0; k < 3; ++k) {
        const char* expect;
        mt_build(&m, k == 2 ? FAM_QWEN2 : FAM_MIXTRAL, 0, 9);
        snprintf(in, sizeof in, "%s/bad%d", g_tmp, k);
        snprintf(out, sizeof out, "%s/bad%d_out", g_tmp, k);
        if (k == 0) {   /* the config counts 5 experts, the tensors 4 */
            m.cfg.n_experts = 5;
            expect = "model.layers.0.block_sparse_moe.gate.weight";
        } else if (k == 1) {   /* top-k larger than the experts */
            m.cfg.n_experts_used = 6;
            expect = "num_experts_per_tok";
        } else {   /* a missing expert tensor */
            mt_tensor* t = mt_find(&m, "model.layers.1.mlp.experts.2.up_proj.weight");
            snprintf(t->name, sizeof t->name, "model.layers.1.mlp.unused.weight");
            expect = "model.layers.1.mlp.experts.2.up_proj.weight";
        }
        QT_CHECK(mt_save(&m, in, 0));
        if (k == 1) {   /* the tool's config writer keeps top-k <= experts: write the bad key by hand */
            size_t n = 0;
            char* text;
            char* p;
            snprintf(cfg, sizeof cfg, "%s/config.json", in);
            text = (char*)read_all(cfg, &n);
            p = text ? strstr(text, "\"num_experts_per_tok\": 6") : NULL;
            QT_CHECK(p != NULL);
            free(text);
        }
        QT_EQ_INT(CLI("rotate %s %s", in, out), 2);
        QT_CHECKF(strstr(g_err, expect) != NULL && count_lines(g_err) == 1, "case %d: %s", k, g_err);
        QT_CHECK(access(out, F_OK) != 0);
        printf("    refused: %s", g_err);
        mt_free(&m);
    }
    g_mlp_only = 1;
}

int main(int argc, char** argv) {
    (void)argc;
    QT_RUN(test_moe_invariance);
    QT_RUN(test_moe_tensor_done);
    QT_RUN(test_moe_check_can_fail);
    QT_RUN(test_moe_bad_input);
    QT_RUN(test_moe_hook_file);
    if (!cu_start(argv[0], "test_moe")) return 1;
    QT_RUN(test_cli_moe_rotate);
    QT_RUN(test_file_moe_gguf_per_expert);
    QT_RUN(test_cli_moe_bad_input);
    QT_RUN(test_cli_moe_mixtral_gguf_keys);
    QT_RUN(test_cli_moe_mixtral_gguf_bad);
    cu_finish();
    return qt_finish("test_moe");
}
