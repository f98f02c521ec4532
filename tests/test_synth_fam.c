/* Synthetic mixture-of-experts and vision-language models (examples/model/qx_synth.c: mixtral,
   qwen2_moe, qwen3_moe with experts per tensor or stacked 3-D, qwen2_moe with dense layers between
   MoE layers, qwen2vl with its vision side):
   - each is deterministic for a seed, has the Hugging Face names and config of its family, passes
     the safetensors writer's tensor check, and runs in the reference forward pass with finite, O(1)
     logits that depend on the context and a routing that uses more than one expert;
   - the rotation (R1 + R2 random Hadamard with the online hooks, R4 per expert) leaves the FP32
     logits equal within 1e-4 of their scale and the routing unchanged (0 flips);
   - saved as a Hugging Face directory (stacked experts written one tensor per expert, as
     transformers holds them) and, where llama.cpp has the layout (every layer MoE, experts stacked;
     qwen2vl's text decoder, written by `quarot rotate --rotation none --text-only`), as GGUF, each
     reads back through qx_load_model to the same logits (safetensors: the same bits; GGUF: within
     1e-5 of their scale, Mixtral's q/k rows permuted to llama.cpp's RoPE order and back, qwen2vl's
     norms fused);
   - per-expert tensors that make no 3-D GGUF tensor are refused, naming the tensor, no file written;
   - bad descriptions (top-k above the expert count, experts on a dense family, dense layers on
     Mixtral, a qwen2vl head too narrow for M-RoPE) are refused with a message. */
#include "quarot.h"
#include "support/qx_store.h"
#include "model/qx_forward.h"
#include "model/qx_model.h"
#include "model/qx_synth.h"
#include "formats/qx_load.h"
#include "formats/qx_gguf.h"
#include "formats/qx_safetensors.h"
#include "model/qx_online.h"
#include "qt.h"
#include "fwd_util.h"
#include "cli_util.h"
#include "fmt_util.h"

#define T_TOK 16
#define MAX_ROUTE (T_TOK * 8 * 4)

typedef struct variant {
    const char* arch;
    int stacked;
    int64_t sparse_step;
    int gguf;   /* llama.cpp has the layout */
} variant;

static const variant VARIANTS[] = {
    {"mixtral", 0, 0, 1},   {"mixtral", 1, 0, 1},   {"qwen2_moe", 0, 0, 1}, {"qwen2_moe", 1, 0, 1},
    {"qwen2_moe", 0, 2, 0}, {"qwen3_moe", 0, 0, 1}, {"qwen3_moe", 1, 0, 1}, {"qwen2vl", 0, 0, 1},
};
#define N_VARIANTS ((int)(sizeof VARIANTS / sizeof VARIANTS[0]))

typedef struct routes {
    int32_t e[8][MAX_ROUTE];   /* [layer][token * k + j] */
    int64_t n[8];
} routes;

static void on_route(void* user, int64_t layer, const int32_t* experts, int64_t T, int64_t k) {
    routes* r = (routes*)user;
    if (layer < 0 || layer >= 8 || T * k > MAX_ROUTE) return;
    memcpy(r->e[layer], experts, (size_t)(T * k) * sizeof(int32_t));
    r->n[layer] = T * k;
}

/* logits [T_TOK][vocab] (malloc'ed) and the routing, with online hooks from list */
static float* run(const qx_store* s, const quarot_online_list* list, const int32_t* toks, routes* rt) {
    qx_forward f;
    qx_forward_opts o;
    qx_online_ctx ctx;
    qx_err e;
    float* lg = (float*)malloc((size_t)(T_TOK * s->config.vocab) * sizeof(float));
    memset(&o, 0, sizeof o);
    memset(rt, 0, sizeof *rt);
    qx_online_ctx_init(&ctx, list);
    if (list) { o.online = qx_online_hooks; o.online_user = &ctx; }
    o.route = on_route;
    o.route_user = rt;
    if (qx_forward_init(&f, s, &o, &e) != QUAROT_OK) {
        printf("    forward init: %s\n", e.msg);
        free(lg);
        qx_online_ctx_free(&ctx);
        return NULL;
    }
    if (qx_forward_window(&f, toks, T_TOK, lg, &e) != QUAROT_OK || (list && ctx.status != QUAROT_OK)) {
        printf("    forward: %s\n", e.msg);
        free(lg);
        lg = NULL;
    }
    qx_forward_free(&f);
    qx_online_ctx_free(&ctx);
    return lg;
}

static int64_t flips(const routes* a, const routes* b, int64_t n_layers) {
    int64_t l, i, n = 0;
    for (l = 0; l < n_layers && l < 8; ++l) {
        if (a->n[l] != b->n[l]) return -1;
        for (i = 0; i < a->n[l]; ++i) n += a->e[l][i] != b->e[l][i];
    }
    return n;
}

/* 1 when GGUF files a and b hold the same tensors (names, types, shapes, bytes) */
static int gguf_files_same(const char* a, const char* b) {
    size_t na = 0, nb = 0;
    unsigned char* x = read_all(a, &na);
    unsigned char* y = read_all(b, &nb);
    qx_gguf_file fa, fb;
    qx_err e;
    const char* diff = "(unreadable)";
    memset(&fa, 0, sizeof fa);
    memset(&fb, 0, sizeof fb);
    if (x && y && qx_gguf_parse(x, na, a, &fa, &e) == QUAROT_OK && qx_gguf_parse(y, nb, b, &fb, &e) == QUAROT_OK)
        diff = gguf_same_tensors(&fa, &fb);
    if (diff) printf("    %s: %s differs\n", b, diff);
    qx_gguf_file_free(&fa);
    qx_gguf_file_free(&fb);
    free(x);
    free(y);
    return diff == NULL;
}

static int build(const variant* v, uint64_t seed, qx_store* s) {
    qx_synth_desc d;
    qx_err e;
    memset(&d, 0, sizeof d);
    d.arch = v->arch;
    d.seed = seed;
    d.experts_stacked = v->stacked;
    d.sparse_step = v->sparse_step;
    if (qx_synth_model(s, &d, &e) != QUAROT_OK) {
        printf("    %s: %s\n", v->arch, e.msg);
        return 0;
    }
    return 1;
}

/* The model at path (a conversion of s) read back: its logits on toks within 1e-5 of the source's a
   (relative to their scale), no routing flips, experts stacked as `stacked` says. */
static void check_converted(const char* path, const char* what, const qx_store* s, const float* a, const routes* ra,
                            const int32_t* toks, int stacked) {
    static routes rc;
    qx_store back;
    qx_err e;
    float* lg;
    double d = 1e9;
    if (qx_load_model(path, NULL, &back, &e) != QUAROT_OK) {
        QT_CHECKF(0, "%s: %s: %s", s->config.arch, what, e.msg);
        return;
    }
    QT_CHECK(back.config.experts_stacked == stacked && back.config.n_experts == s->config.n_experts);
    lg = run(&back, NULL, toks, &rc);
    if (lg && a) d = qt_rel_diff(lg, a, T_TOK * s->config.vocab);
    QT_CHECKF(d < 1e-5 && flips(ra, &rc, s->config.n_layers) == 0, "%s: %s differs by %.3g", s->config.arch, what, d);
    free(lg);
    qx_store_free(&back);
}

/* the names each variant promises */
static void check_names(const variant* v, const qx_store* s) {
    const quarot_model_config* c = &s->config;
    const int mixtral = strcmp(v->arch, "mixtral") == 0;
    const char* moe = mixtral ? "block_sparse_moe" : "mlp";
    const char* up = mixtral ? "w3" : "up_proj";
    int64_t l;
    char nm[200];
    qx_err e;
    QT_CHECK(strcmp(c->arch, v->arch) == 0);
    QT_CHECKF(qx_hf_check_tensors(s, v->arch, &e) == QUAROT_OK, "%s: %s", v->arch, e.msg);
    if (!strcmp(v->arch, "qwen2vl")) {
        const char* blob;
        size_t n;
        int64_t sec[4];
        int ns = 0;
        QT_CHECK(qx_store_find(s, QX_VL_MERGER_WEIGHT) && qx_store_find(s, QX_VL_MERGER_BIAS));
        QT_CHECK(qx_store_find(s, "visual.patch_embed.proj.weight") != NULL);
        blob = (const char*)qx_store_get_blob(s, "hf.config.json", &n);
        QT_CHECK(blob && strstr(blob, "Qwen2VLForConditionalGeneration"));
        QT_CHECKF(qx_vl_mrope_sections(s, sec, &ns, &e) == QUAROT_OK && ns == 3 && sec[0] + sec[1] + sec[2] == c->head_dim / 2,
                  "mrope sections: %s", e.msg);
        QT_CHECK(c->attn_qkv_bias && c->tied_embeddings && c->n_experts == 0);
        return;
    }
    QT_CHECK(c->n_experts > 0 && c->n_experts_used == 2 && c->experts_stacked == v->stacked);
    QT_CHECK(c->norm_topk_prob == (strcmp(v->arch, "qwen2_moe") != 0));
    QT_CHECK((c->shared_intermediate > 0) == (strcmp(v->arch, "qwen2_moe") == 0));
    QT_CHECK(c->qk_norm == (strcmp(v->arch, "qwen3_moe") == 0));
    for (l = 0; l < c->n_layers; ++l) {
        const int is_moe = (l + 1) % (v->sparse_step > 0 ? v->sparse_step : 1) == 0;
        QT_CHECK(quarot_config_layer_is_moe(c, l) == is_moe);
        snprintf(nm, sizeof nm, "model.layers.%lld.%s.gate.weight", (long long)l, moe);
        QT_CHECK((qx_store_find(s, nm) != NULL) == is_moe);
        snprintf(nm, sizeof nm, "model.layers.%lld.mlp.up_proj.weight", (long long)l);
        QT_CHECK((qx_store_find(s, nm) != NULL) == !is_moe);
        if (!is_moe) continue;
        if (v->stacked) {
            const quarot_tensor* t;
            snprintf(nm, sizeof nm, "model.layers.%lld.%s.experts.%s.weight", (long long)l, moe, up);
            t = qx_store_find(s, nm);
            QT_CHECK(t && t->ne[2] == c->n_experts && t->ne[1] == c->expert_intermediate && t->ne[0] == c->hidden);
        } else {
            snprintf(nm, sizeof nm, "model.layers.%lld.%s.experts.%lld.%s.weight", (long long)l, moe,
                     (long long)(c->n_experts - 1), up);
            QT_CHECK(qx_store_find(s, nm) != NULL);
        }
        snprintf(nm, sizeof nm, "model.layers.%lld.mlp.shared_expert_gate.weight", (long long)l);
        QT_CHECK((qx_store_find(s, nm) != NULL) == (c->shared_intermediate > 0));
    }
}

static void test_variants(void) {
    int vi;
    int32_t toks[T_TOK], toks2[T_TOK];
    int64_t i;
    for (i = 0; i < T_TOK; ++i) toks[i] = (int32_t)(1 + (i * 7919 + i * i * 31) % 255);
    memcpy(toks2, toks, sizeof toks);
    toks2[0] = 200; toks2[1] = 3; toks2[2] = 77;
    for (vi = 0; vi < N_VARIANTS; ++vi) {
        const variant* v = &VARIANTS[vi];
        qx_store s, s2, s3, r;
        static routes ra, rb, rc;
        float *a = NULL, *b = NULL, *rot = NULL;
        int64_t V, l, used_min = 1 << 30, fl = -1;
        double mean = 0, var = 0, dctx = 0, drot = 1e9;
        if (!build(v, 300 + (uint64_t)vi, &s) || !build(v, 300 + (uint64_t)vi, &s2) || !build(v, 301 + (uint64_t)vi, &s3)) {
            QT_CHECK(0);
            continue;
        }
        QT_CHECK(stores_same_bytes(&s, &s2));
        QT_CHECK(!stores_same_bytes(&s, &s3));
        check_names(v, &s);
        V = s.config.vocab;
        a = run(&s, NULL, toks, &ra);
        b = run(&s, NULL, toks2, &rb);
        QT_CHECK(a && b);
        if (a && b) {
            for (i = 0; i < T_TOK * V; ++i) mean += a[i];
            mean /= (double)(T_TOK * V);
            for (i = 0; i < T_TOK * V; ++i) var += (a[i] - mean) * (a[i] - mean);
            var /= (double)(T_TOK * V);
            for (i = (T_TOK - 1) * V; i < T_TOK * V; ++i)
                if (fabs((double)a[i] - b[i]) > dctx) dctx = fabs((double)a[i] - b[i]);
            QT_CHECKF(sqrt(var) > 0.3 && sqrt(var) < 30.0, "%s: logit std %.3g", v->arch, sqrt(var));
            QT_CHECKF(dctx > 0.05 * sqrt(var), "%s: context changes the last logits by %.3g", v->arch, dctx);
        }
        for (l = 0; l < s.config.n_layers && s.config.n_experts > 0; ++l) {   /* experts in use per MoE layer */
            int seen[256] = {0}, n = 0;
            if (!quarot_config_layer_is_moe(&s.config, l)) continue;
            for (i = 0; i < ra.n[l]; ++i)
                if (ra.e[l][i] >= 0 && ra.e[l][i] < 256 && !seen[ra.e[l][i]]++) ++n;
            if (n < used_min) used_min = n;
        }
        if (s.config.n_experts > 0) QT_CHECKF(used_min >= 2, "%s: a MoE layer routes every token to the same experts", v->arch);
        {   /* rotation: logits and routing unchanged */
            quarot_model m;
            qx_binding bd;
            quarot_online_list list;
            quarot_rotate_desc d;
            quarot_online_list_init(&list, NULL);
            memset(&d, 0, sizeof d);
            d.seed = 9;
            d.online = 1;
            d.online_out = &list;
            QT_OK(qx_store_clone(&s, &r));
            qx_model_bind(&m, &bd, &r);
            if (quarot_rotate_model(&m, &d) != QUAROT_OK) {
                printf("    rotate %s: %s\n", v->arch, m.error);
                QT_CHECK(0);
            } else {
                qx_model_sync(&m, &r);
                rot = run(&r, &list, toks, &rc);
                if (rot && a) {
                    drot = qt_rel_diff(rot, a, T_TOK * V);
                    fl = flips(&ra, &rc, s.config.n_layers);
                }
            }
            QT_CHECKF(drot < 1e-4, "%s: rotated logits differ by %.3g of their scale", v->arch, drot);
            QT_CHECKF(fl == 0, "%s: %lld routing flips", v->arch, (long long)fl);
            quarot_online_list_free(&list);
            qx_store_free(&r);
        }
        {   /* both formats, and the conversions between them, read back */
            char dir[512], gg[512], conv[600], q1[600], q2[600];
            qx_st_save_opts so;
            qx_gguf_save_opts go;
            qx_err e;
            qx_store back;
            float* lg;
            snprintf(dir, sizeof dir, "%s/v%d_dir", g_tmp, vi);
            snprintf(gg, sizeof gg, "%s/v%d.gguf", g_tmp, vi);
            memset(&so, 0, sizeof so);
            so.force = 1;
            QT_CHECKF(qx_st_save(&s, dir, &so, &e) == QUAROT_OK, "%s", e.msg);
            if (qx_load_model(dir, NULL, &back, &e) != QUAROT_OK) {
                QT_CHECKF(0, "%s: reading the directory back: %s", v->arch, e.msg);
            } else {   /* the same bits */
                lg = run(&back, NULL, toks, &rc);
                QT_CHECKF(lg && a && memcmp(lg, a, (size_t)(T_TOK * V) * sizeof(float)) == 0 && flips(&ra, &rc, s.config.n_layers) == 0,
                          "%s: the directory read back gives other logits", v->arch);
                free(lg);
                qx_store_free(&back);
            }
            if (v->gguf) {
                memset(&go, 0, sizeof go);
                go.force = 1;
                if (!strcmp(v->arch, "qwen2vl"))   /* GGUF holds the text decoder (the vision side goes to an mmproj) */
                    QT_EQ_INT(CLI("rotate %s %s --rotation none --text-only --quiet", dir, gg), 0);
                else
                    QT_CHECKF(qx_gguf_save(&s, gg, &go, &e) == QUAROT_OK, "%s", e.msg);
                check_converted(gg, "the GGUF", &s, a, &ra, toks, s.config.n_experts > 0);
                if (qx_load_model(gg, NULL, &back, &e) == QUAROT_OK) {   /* a qwen2vl GGUF reads as qwen2 text, gguf.vl says what */
                    size_t bl = 0;
                    const void* vl = qx_store_get_blob(&back, "gguf.vl", &bl);
                    QT_CHECK(strcmp(v->arch, "qwen2vl") ? strcmp(back.config.arch, v->arch) == 0
                                                        : strcmp(back.config.arch, "qwen2") == 0 && vl && bl == 7);
                    qx_store_free(&back);
                }
                if (!v->stacked && strcmp(v->arch, "qwen2vl")) {   /* per-expert directory -> 3-D GGUF experts, by the CLI */
                    snprintf(conv, sizeof conv, "%s/v%d_from_dir.gguf", g_tmp, vi);
                    snprintf(q1, sizeof q1, "%s/v%d_q_dir.gguf", g_tmp, vi);
                    snprintf(q2, sizeof q2, "%s/v%d_q_gguf.gguf", g_tmp, vi);
                    QT_EQ_INT(CLI("rotate %s %s --rotation none --quiet", dir, conv), 0);
                    check_converted(conv, "the GGUF from the directory", &s, a, &ra, toks, 1);
                    /* Q4_0 from the per-expert directory: the same file, byte for byte, as from the model's GGUF */
                    QT_EQ_INT(CLI("quantize %s %s --quiet", dir, q1), 0);
                    QT_EQ_INT(CLI("quantize %s %s --quiet", gg, q2), 0);
                    QT_CHECKF(same_file(q1, q2) && gguf_files_same(q1, q2), "%s: Q4_0 from the directory and from the GGUF differ", v->arch);
                }
                if (v->stacked) {   /* 3-D GGUF experts -> Hugging Face directory, streamed one expert at a time */
                    snprintf(conv, sizeof conv, "%s/v%d_from_gguf", g_tmp, vi);
                    QT_EQ_INT(CLI("rotate %s %s --format safetensors --rotation none --quiet", gg, conv), 0);
                    check_converted(conv, "the directory from the GGUF", &s, a, &ra, toks, 0);
                }
            }
            printf("    %-9s %-7s step %lld: %3lld tensors, logit std %.2f, context %.2f, experts used >= %lld, rotated %.1e, "
                   "flips %lld, GGUF %s\n", v->arch, v->stacked ? "stacked" : "split", (long long)(v->sparse_step ? v->sparse_step : 1),
                   (long long)s.count, sqrt(var), dctx, (long long)(s.config.n_experts > 0 ? used_min : 0), drot, (long long)fl,
                   v->gguf ? "read back" : "-");
        }
        free(a);
        free(b);
        free(rot);
        qx_store_free(&s);
        qx_store_free(&s2);
        qx_store_free(&s3);
    }
}

static void test_bad_descs(void) {
    struct { const char* arch; int64_t ne, k, step, hd, ei; } bad[] = {
        {"mixtral", 4, 5, 0, 0, 0},   /* top-k above the expert count */
        {"llama", 4, 2, 0, 0, 0},     /* experts on a dense family */
        {"mixtral", 0, 0, 2, 0, 0},   /* dense layers on Mixtral */
        {"mixtral", 0, 0, 0, 0, 48},  /* Mixtral's experts are intermediate wide */
        {"qwen2vl", 0, 0, 0, 4, 0},   /* M-RoPE needs head_dim >= 8 */
    };
    int i;
    for (i = 0; i < (int)(sizeof bad / sizeof bad[0]); ++i) {
        qx_synth_desc d;
        qx_store s;
        qx_err e;
        memset(&d, 0, sizeof d);
        memset(&e, 0, sizeof e);
        d.arch = bad[i].arch;
        d.n_experts = bad[i].ne;
        d.n_experts_used = bad[i].k;
        d.sparse_step = bad[i].step;
        d.head_dim = bad[i].hd;
        d.expert_intermediate = bad[i].ei;
        QT_CHECKF(qx_synth_model(&s, &d, &e) == QUAROT_ERR_INVALID_ARGUMENT && e.msg[0], "bad desc %d accepted", i);
        printf("    refused: %s\n", e.msg);
    }
    for (i = 0; qx_synth_any_family(i); ++i) {}
    QT_CHECK(i == 9);
}

/* Per-expert tensors that do not make a 3-D GGUF tensor (an expert missing, one of another shape)
   are refused by the GGUF writer with a message naming the tensor, and no file appears. */
static void test_gguf_expert_groups_bad(void) {
    int k;
    for (k = 0; k < 2; ++k) {
        const variant v = {"qwen3_moe", 0, 0, 1};
        qx_store s;
        qx_gguf_save_opts go;
        qx_err e;
        const char* out = tmp_path(k ? "bad_shape.gguf" : "bad_missing.gguf");
        quarot_result r;
        if (!build(&v, 7, &s)) { QT_CHECK(0); continue; }
        if (k == 0) {
            qx_store_remove(&s, "model.layers.1.mlp.experts.3.up_proj.weight");
        } else {
            int64_t ne[2] = {s.config.hidden, s.config.expert_intermediate / 2};
            qx_store_remove(&s, "model.layers.1.mlp.experts.2.gate_proj.weight");
            QT_OK(qx_store_add(&s, "model.layers.1.mlp.experts.2.gate_proj.weight", QUAROT_DTYPE_F32, 2, ne, NULL, NULL));
        }
        memset(&go, 0, sizeof go);
        memset(&e, 0, sizeof e);
        go.force = 1;
        r = qx_gguf_save(&s, out, &go, &e);
        printf("    %s: %s\n", k ? "an expert of another shape" : "an expert missing", e.msg);
        QT_CHECK(r != QUAROT_OK && strstr(e.msg, "experts.") != NULL);
        QT_CHECK(access(out, F_OK) != 0);
        qx_store_free(&s);
    }
}

int main(int argc, char** argv) {
    (void)argc;
    if (!cu_start(argv[0], "test_synth_fam")) return 1;
    QT_RUN(test_variants);
    QT_RUN(test_bad_descs);
    QT_RUN(test_gguf_expert_groups_bad);
    cu_finish();
    return qt_finish("test_synth_fam");
}
