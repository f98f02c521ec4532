/* The rotation pipeline on random models of every built-in family (qx_synth: GQA, biases, q/k norms,
   tied embeddings, LayerNorm with mean baking, non-unit norm gains, outlier channels):
   - after rotation (random Hadamard and random orthogonal, full and block-diagonal, with and without
     online hooks, R3) the FP32 logits equal the original's within 1e-4 of the logits' scale
     (max |difference| / max |logit|), with the online hooks run by the forward pass;
   - skipping or doubling any single command breaks that equality and the exactly-once check;
   - at most one decoder layer is held at a time (acquire/release counted);
   - bad input (missing tensor, wrong shape, NaN, inconsistent config, unknown family, sizes without a
     Hadamard matrix) is refused with a message naming the tensor, before any weight changes;
   - the hook list survives a text round trip, and the read-back list gives the same logits. */
#include "quarot.h"
#include "qt.h"
#include "fwd_util.h"
#include "model/qx_forward.h"
#include "model/qx_model.h"
#include "model/qx_online.h"
#include "model/qx_synth.h"

#define N_TOK 12
static const int32_t tokens[N_TOK] = {1, 17, 5, 42, 9, 100, 3, 77, 28, 64, 11, 5};

/* Logits of model s on `tokens`, with hooks when list != NULL. Returns a malloc'd [N_TOK][vocab]. */
static float* run_logits(const qx_store* s, const quarot_online_list* list) { return run_window_hooks(s, list, tokens, N_TOK); }

/* Rotate a clone of `orig` with desc and compare logits; returns the relative difference (or 1e9). */
static double rotated_diff(const qx_store* orig, const float* ref, quarot_rotate_desc* desc, qx_binding* out_binding) {
    qx_store s;
    quarot_model m;
    qx_binding b;
    quarot_online_list list;
    float* got;
    double diff = 1e9;
    quarot_result r;
    if (qx_store_clone(orig, &s) != QUAROT_OK) return diff;
    quarot_online_list_init(&list, NULL);
    desc->online_out = &list;
    qx_model_bind(&m, &b, &s);
    r = quarot_rotate_model(&m, desc);
    if (r != QUAROT_OK) {
        printf("    rotate: %s: %s\n", quarot_result_string(r), m.error);
    } else {
        qx_model_sync(&m, &s);
        got = run_logits(&s, &list);
        if (got) diff = qt_rel_diff(got, ref, N_TOK * s.config.vocab);
        free(got);
    }
    if (out_binding) *out_binding = b;
    quarot_online_list_free(&list);
    qx_store_free(&s);
    return diff;
}

static void test_equivalence_all_families(void) {
    int fam;
    for (fam = 0; qx_synth_family(fam); ++fam) {
        const char* arch = qx_synth_family(fam);
        qx_store s;
        float* ref;
        int v;
        if (!synth_model(&s, arch, 100 + (uint64_t)fam)) { QT_CHECK(0); continue; }
        ref = run_logits(&s, NULL);
        QT_CHECK(ref != NULL);
        for (v = 0; v < 8 && ref; ++v) {
            quarot_rotate_desc d;
            qx_binding b;
            double diff;
            memset(&d, 0, sizeof d);
            d.seed = 1000 + (uint64_t)v;
            switch (v) {
                case 0: break;                                                          /* R1 + R2 random Hadamard */
                case 1: d.rotation = QUAROT_ROTATION_RANDOM_ORTHOGONAL; d.r2_rotation = QUAROT_ROTATION_RANDOM_ORTHOGONAL; break;
                case 2: d.block_size = 16; break;                                       /* block-diagonal R1 */
                case 3: d.online = 1; break;                                            /* + o_proj heads and down_proj R4 */
                case 4: d.online = 1; d.r3 = 1; d.block_size = 32; break;
                case 5: d.online = 1; d.max_tp_size = 2; d.rotation = QUAROT_ROTATION_RANDOM_ORTHOGONAL; break;
                case 6: d.no_r2 = 1; d.online = 1; d.down_proj_online = QUAROT_LAYERS_NONE; break;
                case 7: d.rotation = QUAROT_ROTATION_IDENTITY; d.no_r2 = 1; break;      /* fusion (and baking) only */
            }
            diff = rotated_diff(&s, ref, &d, &b);
            QT_CHECKF(diff < 1e-4, "%s variant %d: logits differ by %.3g of their scale", arch, v, diff);
            QT_CHECKF(b.max_live_layers <= 1 && b.acquires == 2 * s.config.n_layers && b.releases == b.acquires,
                      "%s variant %d: layers held %lld, acquires %lld, releases %lld", arch, v,
                      (long long)b.max_live_layers, (long long)b.acquires, (long long)b.releases);
            if (v == 0) printf("    %-6s R1+R2 hadamard: max|dlogit|/max|logit| = %.2e\n", arch, diff);
        }
        free(ref);
        qx_store_free(&s);
    }
}

static void test_half_precision_weights(void) {
    /* f16 / bf16 weights are rotated in double and rounded once: the rotated model matches the
       original to the format's precision */
    quarot_dtype dts[2] = {QUAROT_DTYPE_F16, QUAROT_DTYPE_BF16};
    double tol[2] = {5e-3, 4e-2};
    int k;
    for (k = 0; k < 2; ++k) {
        qx_synth_desc sd;
        qx_store s;
        qx_err e;
        quarot_rotate_desc d;
        float* ref;
        double diff;
        memset(&sd, 0, sizeof sd);
        sd.arch = "qwen2"; sd.seed = 5; sd.dtype = dts[k];
        if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { QT_CHECKF(0, "synth: %s", e.msg); continue; }
        ref = run_logits(&s, NULL);
        memset(&d, 0, sizeof d);
        d.online = 1;
        diff = rotated_diff(&s, ref, &d, NULL);
        QT_CHECKF(diff < tol[k], "%s weights: logits differ by %.3g", quarot_dtype_name(dts[k]), diff);
        printf("    %s weights: max|dlogit|/max|logit| = %.2e\n", quarot_dtype_name(dts[k]), diff);
        free(ref);
        qx_store_free(&s);
    }
}

/* on_command: count, or skip / double the command with index `target`. */
typedef struct cmd_probe { int64_t seen, target; int action; } cmd_probe;
static int probe_command(void* user, const quarot_command* c) {
    cmd_probe* p = (cmd_probe*)user;
    (void)c;
    return p->seen++ == p->target ? p->action : 0;
}

static void test_every_command_matters(void) {
    qx_store s;
    float* ref;
    quarot_rotate_desc d;
    cmd_probe probe;
    int64_t n_commands, k;
    int action;
    if (!synth_model(&s, "llama", 7)) { QT_CHECK(0); return; }
    ref = run_logits(&s, NULL);
    memset(&d, 0, sizeof d);
    d.online = 1;
    d.seed = 3;
    d.on_command = probe_command;
    d.user_data = &probe;
    probe.seen = 0; probe.target = -1; probe.action = 0;
    QT_CHECK(rotated_diff(&s, ref, &d, NULL) < 1e-4);
    n_commands = probe.seen;
    QT_CHECK(n_commands >= 2 + 11 * s.config.n_layers);
    for (action = 1; action <= 2; ++action)
        for (k = 0; k < n_commands; ++k) {
            qx_store c;
            quarot_model m;
            qx_binding b;
            quarot_online_list list;
            quarot_result r;
            float* got;
            qx_store_clone(&s, &c);
            quarot_online_list_init(&list, NULL);
            d.online_out = &list;
            probe.seen = 0; probe.target = k; probe.action = action;
            qx_model_bind(&m, &b, &c);
            r = quarot_rotate_model(&m, &d);
            QT_CHECKF(r == QUAROT_ERR_INTERNAL && strstr(m.error, "exactly once"),
                      "command %lld %s: rotate returned %d (%s)", (long long)k, action == 1 ? "skipped" : "doubled", (int)r, m.error);
            qx_model_sync(&m, &c);
            got = run_logits(&c, &list);
            QT_CHECKF(got && qt_rel_diff(got, ref, N_TOK * s.config.vocab) > 1e-3,
                      "command %lld %s: logits still match (%.3g)", (long long)k, action == 1 ? "skipped" : "doubled",
                      got ? qt_rel_diff(got, ref, N_TOK * s.config.vocab) : -1.0);
            free(got);
            quarot_online_list_free(&list);
            qx_store_free(&c);
        }
    printf("    %lld commands: each one skipped or doubled breaks the logits and the exactly-once check\n", (long long)n_commands);
    free(ref);
    qx_store_free(&s);
}


/* Rotate s with d (a hook list is supplied unless d->online_out is the sentinel NO_LIST) and expect
   the given error, a message containing needle, and s unchanged. */
static quarot_online_list no_list_sentinel;
#define NO_LIST (&no_list_sentinel)
static void expect_refusal(qx_store* s, const quarot_rotate_desc* d, quarot_result code, const char* needle, const char* what) {
    qx_store before;
    quarot_model m;
    qx_binding b;
    quarot_online_list list;
    quarot_rotate_desc dd = *d;
    quarot_result r;
    qx_store_clone(s, &before);
    quarot_online_list_init(&list, NULL);
    dd.online_out = d->online_out == NO_LIST ? NULL : &list;
    qx_model_bind(&m, &b, s);
    r = quarot_rotate_model(&m, &dd);
    QT_CHECKF(r == code, "%s: returned %d (%s), expected %d; message: %s", what, (int)r, quarot_result_string(r), (int)code, m.error);
    QT_CHECKF(needle == NULL || strstr(m.error, needle) != NULL, "%s: message '%s' does not mention '%s'", what, m.error, needle);
    QT_CHECKF(stores_same_bytes(&before, s), "%s: the model was modified before the error", what);
    QT_CHECKF(b.created == 0, "%s: tensors were created before the error", what);
    quarot_online_list_free(&list);
    qx_store_free(&before);
}

static void test_bad_input(void) {
    qx_store s;
    quarot_rotate_desc d;
    quarot_tensor* t;
    memset(&d, 0, sizeof d);
    d.online = 1;
    /* a tensor missing in the last layer */
    if (!synth_model(&s, "qwen2", 9)) { QT_CHECK(0); return; }
    {
        char name[QUAROT_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%lld.mlp.up_proj.weight", (long long)(s.config.n_layers - 1));
        qx_store_remove(&s, name);
        expect_refusal(&s, &d, QUAROT_ERR_NOT_FOUND, name, "missing up_proj");
    }
    qx_store_free(&s);
    /* a wrong shape */
    if (!synth_model(&s, "llama", 9)) { QT_CHECK(0); return; }
    {
        int64_t ne[2];
        ne[0] = s.config.hidden + 4; ne[1] = s.config.intermediate;
        qx_store_remove(&s, "model.layers.1.mlp.gate_proj.weight");
        qx_store_add(&s, "model.layers.1.mlp.gate_proj.weight", QUAROT_DTYPE_F32, 2, ne, NULL, NULL);
        expect_refusal(&s, &d, QUAROT_ERR_SHAPE_MISMATCH, "gate_proj", "wrong gate_proj shape");
    }
    qx_store_free(&s);
    /* NaN in the last layer: refused before the first layer is touched */
    if (!synth_model(&s, "qwen3", 9)) { QT_CHECK(0); return; }
    {
        char name[QUAROT_NAME_MAX];
        snprintf(name, sizeof name, "model.layers.%lld.self_attn.o_proj.weight", (long long)(s.config.n_layers - 1));
        t = qx_store_find(&s, name);
        ((float*)t->data)[7] = NAN;
        expect_refusal(&s, &d, QUAROT_ERR_NONFINITE, name, "NaN in o_proj");
    }
    qx_store_free(&s);
    /* inconsistent configs and adapters */
    if (!synth_model(&s, "llama", 9)) { QT_CHECK(0); return; }
    {
        quarot_model_config saved = s.config;
        s.config.head_dim = 0; s.config.n_heads = 7; s.config.n_kv_heads = 0;
        expect_refusal(&s, &d, QUAROT_ERR_INVALID_ARGUMENT, "head_dim", "n_heads not dividing hidden");
        s.config = saved;
        s.config.n_kv_heads = 3;
        expect_refusal(&s, &d, QUAROT_ERR_INVALID_ARGUMENT, "n_kv_heads", "n_kv_heads not dividing n_heads");
        s.config = saved;
        strcpy(s.config.arch, "gpt-j");
        expect_refusal(&s, &d, QUAROT_ERR_UNSUPPORTED, "gpt-j", "unknown family");
        s.config = saved;
        s.config.hidden += 8;
        expect_refusal(&s, &d, QUAROT_ERR_SHAPE_MISMATCH, NULL, "config hidden not matching tensors");
        s.config = saved;
        {
            quarot_rotate_desc bad = d;
            bad.online_out = NO_LIST;
            expect_refusal(&s, &bad, QUAROT_ERR_INVALID_ARGUMENT, "online_out", "online without a hook list");
            bad = d; bad.max_tp_size = 3;
            expect_refusal(&s, &bad, QUAROT_ERR_INVALID_ARGUMENT, "max_tp_size", "max_tp_size not a power of two");
            bad = d; bad.rotation = QUAROT_ROTATION_ADAPT;
            expect_refusal(&s, &bad, QUAROT_ERR_STATE, "stage 1", "adapt without a context");
            bad = d; bad.block_size = 48;
            expect_refusal(&s, &bad, QUAROT_ERR_INVALID_ARGUMENT, "block_size", "block size not dividing hidden");
        }
    }
    qx_store_free(&s);
}

static void test_sizes_without_hadamard(void) {
    /* hidden 90 (no Hadamard: blocks of 2 by default, refused with FALLBACK_ERROR), head_dim 15
       (R2 falls back to a random orthogonal matrix) */
    qx_synth_desc sd;
    qx_store s;
    qx_err e;
    quarot_rotate_desc d;
    float* ref;
    double diff;
    memset(&sd, 0, sizeof sd);
    sd.arch = "llama"; sd.seed = 4; sd.hidden = 90; sd.n_heads = 6; sd.n_kv_heads = 2; sd.intermediate = 96;
    if (qx_synth_model(&s, &sd, &e) != QUAROT_OK) { QT_CHECKF(0, "synth: %s", e.msg); return; }
    ref = run_logits(&s, NULL);
    memset(&d, 0, sizeof d);
    diff = rotated_diff(&s, ref, &d, NULL);
    QT_CHECKF(diff < 1e-4, "hidden 90 with fallbacks: logits differ by %.3g", diff);
    d.fallback = QUAROT_FALLBACK_ERROR;
    expect_refusal(&s, &d, QUAROT_ERR_UNSUPPORTED_SIZE, "R1", "hidden 90 with FALLBACK_ERROR");
    d.fallback = QUAROT_FALLBACK_RANDOM_ORTHOGONAL;
    diff = rotated_diff(&s, ref, &d, NULL);
    QT_CHECKF(diff < 1e-4, "hidden 90, random orthogonal: logits differ by %.3g", diff);
    free(ref);
    qx_store_free(&s);
}

static void test_hook_file_round_trip(void) {
    qx_store s, r;
    quarot_model m;
    qx_binding b;
    quarot_online_list list, back;
    quarot_rotate_desc d;
    float *l1, *l2;
    char* text;
    char err[128];
    size_t need;
    if (!synth_model(&s, "qwen3", 21)) { QT_CHECK(0); return; }
    qx_store_clone(&s, &r);
    quarot_online_list_init(&list, NULL);
    memset(&d, 0, sizeof d);
    d.online = 1; d.r3 = 1; d.online_out = &list;
    qx_model_bind(&m, &b, &r);
    QT_OK(quarot_rotate_model(&m, &d));
    qx_model_sync(&m, &r);
    QT_EQ_INT(list.count, 4 * r.config.n_layers);
    QT_OK(quarot_online_write(&list, NULL, 0, &need));
    text = (char*)malloc(need);
    QT_OK(quarot_online_write(&list, text, need, &need));
    quarot_online_list_init(&back, NULL);
    QT_OK(quarot_online_read(&back, text, strlen(text), err, sizeof err));
    l1 = run_logits(&r, &list);
    l2 = run_logits(&r, &back);
    QT_CHECK(l1 && l2 && memcmp(l1, l2, (size_t)(N_TOK * r.config.vocab) * sizeof(float)) == 0);
    free(l1); free(l2); free(text);
    quarot_online_list_free(&list);
    quarot_online_list_free(&back);
    qx_store_free(&r);
    qx_store_free(&s);
}

static void test_creates_are_announced(void) {
    /* p.creates after init lists exactly the tensors the run then creates (untied lm_head for tied
       families, lm_head.bias for OPT's fused final LayerNorm bias) */
    int fam;
    for (fam = 0; qx_synth_family(fam); ++fam) {
        qx_store s;
        quarot_model m;
        qx_binding b;
        quarot_processor p;
        quarot_rotate_desc d;
        int64_t i, n_announced, k;
        if (!synth_model(&s, qx_synth_family(fam), 31)) { QT_CHECK(0); continue; }
        memset(&d, 0, sizeof d);
        qx_model_bind(&m, &b, &s);
        QT_OK(quarot_processor_init(&p, &m, &d));
        n_announced = p.n_creates;
        for (i = 0; i < n_announced; ++i) QT_CHECKF(qx_store_find(&s, p.creates[i].name) == NULL, "%s exists already", p.creates[i].name);
        QT_OK(quarot_processor_pre_run(&p));
        for (k = 0; k < s.config.n_layers; ++k) QT_OK(quarot_processor_run_layer(&p, k));
        QT_OK(quarot_processor_post_run(&p));
        QT_EQ_INT(b.created, n_announced);
        for (i = 0; i < n_announced; ++i) {
            const quarot_tensor* t = qx_store_find(&s, p.creates[i].name);
            QT_CHECKF(t && t->ne[0] == p.creates[i].ne[0] && t->ne[1] == p.creates[i].ne[1] && t->dtype == p.creates[i].dtype,
                      "%s: announced shape/dtype differ from the created tensor", p.creates[i].name);
        }
        printf("    %-6s creates %lld tensor(s)%s%s\n", qx_synth_family(fam), (long long)n_announced,
               n_announced ? ": " : "", n_announced ? p.creates[0].name : "");
        quarot_processor_free(&p);
        qx_store_free(&s);
    }
}

static void test_processor_steps_in_order(void) {
    qx_store s;
    quarot_model m;
    qx_binding b;
    quarot_processor p;
    quarot_rotate_desc d;
    if (!synth_model(&s, "llama", 2)) { QT_CHECK(0); return; }
    memset(&d, 0, sizeof d);
    qx_model_bind(&m, &b, &s);
    QT_OK(quarot_processor_init(&p, &m, &d));
    QT_ERR(quarot_processor_run_layer(&p, 0), QUAROT_ERR_STATE);       /* pre_run first */
    QT_OK(quarot_processor_pre_run(&p));
    QT_ERR(quarot_processor_pre_run(&p), QUAROT_ERR_STATE);
    QT_ERR(quarot_processor_run_layer(&p, 1), QUAROT_ERR_STATE);       /* layers in order */
    QT_OK(quarot_processor_run_layer(&p, 0));
    QT_ERR(quarot_processor_post_run(&p), QUAROT_ERR_STATE);           /* not all layers yet */
    while (p.next_layer < s.config.n_layers) QT_OK(quarot_processor_run_layer(&p, p.next_layer));
    QT_OK(quarot_processor_post_run(&p));
    quarot_processor_free(&p);
    qx_store_free(&s);
}

/* A binding that hands out rows [r0, r0 + n) of the embedding and lm_head while `on` (the contract of
   quarot_processor_pre_run_rows), everything else through the store's own binding. */
typedef struct win_bind {
    quarot_model inner;
    const char *embed, *head;
    int64_t r0, n;
    int on, creates;
} win_bind;

static void win_view(win_bind* w, const char* name, quarot_tensor* t) {
    if (!w->on || (strcmp(name, w->embed) != 0 && strcmp(name, w->head) != 0)) return;
    t->data = (char*)t->data + (size_t)w->r0 * t->nb[1];
    t->ne[1] = w->n;
    t->nb[2] = t->nb[1] * (size_t)w->n;
    t->nb[3] = t->nb[2];
}
static quarot_result win_get(void* u, const char* name, quarot_tensor* out) {
    win_bind* w = (win_bind*)u;
    quarot_result r = w->inner.get_tensor(w->inner.user_data, name, out);
    if (r == QUAROT_OK) win_view(w, name, out);
    return r;
}
static quarot_result win_create(void* u, const char* name, quarot_dtype dt, int nd, const int64_t* ne, quarot_tensor* out) {
    win_bind* w = (win_bind*)u;
    quarot_result r = w->inner.create_tensor(w->inner.user_data, name, dt, nd, ne, out);
    w->creates++;
    if (r == QUAROT_OK) win_view(w, name, out);
    return r;
}
static quarot_result win_acquire(void* u, int64_t l) { win_bind* w = (win_bind*)u; return w->inner.acquire_layer(w->inner.user_data, l); }
static quarot_result win_release(void* u, int64_t l, int mod) { win_bind* w = (win_bind*)u; return w->inner.release_layer(w->inner.user_data, l, mod); }

/* 1 when every tensor of a is in b with the same shape, dtype and bytes. */
static int same_tensors(const qx_store* a, const qx_store* b) {
    int64_t i;
    if (a->count != b->count) { printf("    %lld tensors vs %lld\n", (long long)a->count, (long long)b->count); return 0; }
    for (i = 0; i < a->count; ++i) {
        const quarot_tensor* x = &a->items[i].t;
        const quarot_tensor* y = qx_store_find(b, a->items[i].name);
        if (!y || x->dtype != y->dtype || memcmp(x->ne, y->ne, sizeof x->ne) != 0 ||
            memcmp(x->data, y->data, quarot_tensor_nbytes(x)) != 0) {
            printf("    %s differs\n", a->items[i].name);
            return 0;
        }
    }
    return 1;
}

/* pre_run in row windows (quarot_processor_pre_run_rows) gives pre_run's bytes for any windows: every
   family, tied (untied by the fusion, or kept with an identity final norm) and untied, windows of 1,
   7 and all rows; LayerNorm families are refused by the probe with a reason; the windows' order and
   bounds are checked. */
static void test_pre_run_rows(void) {
    static const int64_t wins[3] = {1, 7, 0};
    int fam, w, ident;
    for (fam = 0; qx_synth_family(fam); ++fam)
        for (ident = 0; ident < 2; ++ident) {
            const char* arch = qx_synth_family(fam);
            qx_store orig, want;
            quarot_model m;
            qx_binding b;
            quarot_processor p;
            quarot_rotate_desc d;
            quarot_online_list la, lb;
            int64_t rows = 0, k;
            quarot_result pr;
            if (!synth_model(&orig, arch, 300 + (uint64_t)fam)) { QT_CHECK(0); continue; }
            if (ident) {   /* a final norm of ones: a tied model keeps its single table */
                quarot_tensor* g = qx_store_find(&orig, "model.norm.weight");
                float* ones;
                if (!g || !orig.config.tied_embeddings || !(ones = (float*)malloc((size_t)g->ne[0] * sizeof(float)))) {
                    qx_store_free(&orig);
                    continue;
                }
                for (k = 0; k < g->ne[0]; ++k) ones[k] = 1.0f;
                QT_OK(quarot_tensor_set_row_f32(g, 0, ones));
                free(ones);
            }
            memset(&d, 0, sizeof d);
            d.seed = 77;
            d.online = 1;
            quarot_online_list_init(&la, NULL);
            d.online_out = &la;
            if (qx_store_clone(&orig, &want) != QUAROT_OK) { QT_CHECK(0); qx_store_free(&orig); continue; }
            qx_model_bind(&m, &b, &want);
            QT_OK(quarot_rotate_model(&m, &d));
            qx_model_sync(&m, &want);
            for (w = 0; w < 3; ++w) {
                qx_store s;
                win_bind wb;
                quarot_model wm;
                int64_t r0, n;
                int created = 0;
                quarot_online_list_init(&lb, NULL);
                d.online_out = &lb;
                if (qx_store_clone(&orig, &s) != QUAROT_OK) { QT_CHECK(0); break; }
                memset(&wb, 0, sizeof wb);
                qx_model_bind(&wb.inner, &b, &s);
                wm = wb.inner;
                wm.user_data = &wb;
                wm.get_tensor = win_get;
                wm.create_tensor = win_create;
                wm.acquire_layer = win_acquire;
                wm.release_layer = win_release;
                QT_OK(quarot_processor_init(&p, &wm, &d));
                QT_ERR(quarot_processor_pre_run_rows(&p, 0, 1), QUAROT_ERR_STATE);   /* the probe first */
                pr = quarot_processor_rows_probe(&p, &rows);
                if (strcmp(arch, "opt") == 0) {   /* LayerNorm: mean baking, a final-norm bias */
                    QT_ERR(pr, QUAROT_ERR_UNSUPPORTED);
                    QT_CHECKF(strstr(wm.error, "row windows") != NULL, "no reason: \"%s\"", wm.error);
                    QT_OK(quarot_processor_pre_run(&p));   /* the whole-tensor path still works */
                    quarot_processor_free(&p);
                    quarot_online_list_free(&lb);
                    qx_store_free(&s);
                    break;
                }
                QT_OK(pr);
                QT_EQ_INT(rows, s.config.vocab);
                wb.embed = p.plan.embed;
                wb.head = p.plan.lm_head;
                wb.on = 1;
                n = wins[w] ? wins[w] : rows;
                QT_ERR(quarot_processor_pre_run_rows(&p, 1, n), QUAROT_ERR_STATE);   /* from row 0 */
                QT_ERR(quarot_processor_pre_run_rows(&p, 0, rows + 1), QUAROT_ERR_INVALID_ARGUMENT);
                wb.r0 = 0;   /* a binding that hands out one row too many: refused, nothing done */
                wb.n = 2;
                QT_ERR(quarot_processor_pre_run_rows(&p, 0, 1), QUAROT_ERR_SHAPE_MISMATCH);
                QT_CHECKF(strstr(wm.error, "row window [0, 1)") != NULL, "message: %s", wm.error);
                for (r0 = 0; r0 < rows; r0 += n) {
                    wb.r0 = r0;
                    wb.n = n < rows - r0 ? n : rows - r0;
                    QT_OK(quarot_processor_pre_run_rows(&p, r0, wb.n));
                    if (r0 == 0 && wb.n < rows) {
                        QT_ERR(quarot_processor_pre_run(&p), QUAROT_ERR_STATE);
                        QT_ERR(quarot_processor_run_layer(&p, 0), QUAROT_ERR_STATE);   /* not all rows yet */
                    }
                }
                created = wb.creates;
                wb.on = 0;
                QT_ERR(quarot_processor_rows_probe(&p, &rows), QUAROT_ERR_STATE);   /* pre_run is done */
                for (k = 0; k < s.config.n_layers; ++k) QT_OK(quarot_processor_run_layer(&p, k));
                QT_OK(quarot_processor_post_run(&p));
                qx_model_sync(&wm, &s);
                QT_EQ_INT(created, p.untie ? 1 : 0);
                QT_EQ_INT(s.config.tied_embeddings, want.config.tied_embeddings);
                QT_CHECKF(same_tensors(&want, &s), "%s%s, windows of %lld rows: not pre_run's bytes", arch,
                          ident ? " (identity final norm)" : "", (long long)n);
                if (w == 0) printf("    %-6s%s: %lld rows, %s\n", arch, ident ? " (final norm of ones)" : "", (long long)rows,
                                   p.untie ? "untied in windows" : s.config.tied_embeddings ? "stays tied" : "untied input");
                quarot_processor_free(&p);
                quarot_online_list_free(&lb);
                qx_store_free(&s);
            }
            quarot_online_list_free(&la);
            qx_store_free(&want);
            qx_store_free(&orig);
        }
}

int main(void) {
    QT_RUN(test_equivalence_all_families);
    QT_RUN(test_half_precision_weights);
    QT_RUN(test_every_command_matters);
    QT_RUN(test_bad_input);
    QT_RUN(test_sizes_without_hadamard);
    QT_RUN(test_hook_file_round_trip);
    QT_RUN(test_creates_are_announced);
    QT_RUN(test_processor_steps_in_order);
    QT_RUN(test_pre_run_rows);
    return qt_finish("test_pipeline");
}
