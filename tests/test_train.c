/* The SpinQuant trainer (quarot.h >>train_model) on whole models.
   - Its forward pass is the tool's reference forward (examples/model/qx_forward.c) in FP32: with
     R1 = R2 = I and no hooks, logits within 2e-6 (rms, relative) of qx_forward on the original model;
     at its start (QuaRot's R1 / R2 of the seed) with the online hooks and R3, within 2e-6 of
     qx_forward on the model quarot_rotate_model rotated with the same seed, run with its hooks; for
     llama (GQA), qwen2 (biases, tied embeddings), qwen3 (q/k norms), phi3 (fused q|k|v and gate|up
     read by row ranges), the mixture-of-experts families
     (mixtral; qwen2_moe with a dense layer and the shared expert; qwen3_moe with 3-D experts; the
     online hooks include R4 per expert) and stories260K.
   - Learned rotations applied by the processor (R1 as MATRIX, one R2 per layer through
     quarot_rotate_desc.r2_matrices, the same online hooks) give the trainer's logits, and the
     FP32 function of the original model: stories260K's perplexity equal within 1e-6 relative.
   - Steps keep every rotation orthogonal to 1e-6; quantized training lowers the batch loss (CE and
     the KL objective, which is 0 without quantization, positive and lowered with it).
   - Same bits for 1, 2 and 3 threads (rotations, losses; qwen2 and qwen2_moe); recompute = 1 gives
     the same gradients.
   - A NaN in the middle of a run stops it, keeps the best rotations so far and names the step.
   - Bad input: unsupported families, bad options, foreign tokens, non-orthogonal rotations. */
#include "quarot.h"
#include "support/qx_store.h"
#include "support/qx_threads.h"
#include "model/qx_forward.h"
#include "model/qx_model.h"
#include "model/qx_synth.h"
#include "eval/qx_eval.h"
#include "formats/qx_llama2c.h"
#include "tokenizer/qx_tokenizer.h"
#include "qt.h"
#include "fwd_util.h"

static int make_model(qx_store* s, const char* arch, uint64_t seed) {
    qx_synth_desc sd;
    qx_err e;
    memset(&sd, 0, sizeof sd);
    sd.arch = arch;
    sd.seed = seed;
    sd.hidden = 32; sd.intermediate = 48; sd.n_layers = 2; sd.n_heads = 4; sd.n_kv_heads = 2; sd.head_dim = 8; sd.vocab = 64;
    if (strcmp(arch, "qwen2") == 0) sd.tied = 1;
    if (strstr(arch, "moe") || strcmp(arch, "mixtral") == 0) {   /* 4 experts, top 2 */
        sd.n_experts = 4;
        sd.n_experts_used = 2;
        if (strcmp(arch, "mixtral") != 0) sd.expert_intermediate = 16;
        if (strcmp(arch, "qwen2_moe") == 0) { sd.shared_intermediate = 32; sd.sparse_step = 2; }   /* layer 0 dense */
        if (strcmp(arch, "qwen3_moe") == 0) sd.experts_stacked = 1;
    }
    if (qx_synth_model(s, &sd, &e) != QUAROT_OK) { printf("    synth %s: %s\n", arch, e.msg); return 0; }
    return 1;
}

static void tokens_of(int32_t* t, int64_t n, int64_t vocab, unsigned long long seed) {
    int64_t i;
    qt_seed(seed);
    for (i = 0; i < n; ++i) t[i] = (int32_t)(qt_uniform() * (double)vocab);
}

static double* identity(int64_t n) {
    double* m = (double*)calloc((size_t)(n * n), sizeof(double));
    int64_t i;
    for (i = 0; i < n; ++i) m[i * n + i] = 1.0;
    return m;
}

/* the model rotated by the processor: QuaRot's (r1 == NULL) or the given R1 / per-layer R2 */
static int rotate_copy(const qx_store* src, uint64_t seed, const double* r1, const double* r2, int online, int r3, qx_store* dst,
                       quarot_online_list* hooks) {
    quarot_rotate_desc d;
    quarot_model m;
    qx_binding b;
    quarot_result r;
    quarot_online_list_init(hooks, NULL);
    if (qx_store_clone(src, dst) != QUAROT_OK) return 0;
    memset(&d, 0, sizeof d);
    d.seed = seed;
    if (r1) { d.rotation = QUAROT_ROTATION_MATRIX; d.matrix = r1; }
    if (r2) { d.r2_rotation = QUAROT_ROTATION_MATRIX; d.r2_matrices = r2; }
    d.online = online;
    d.r3 = r3;
    d.online_out = hooks;
    qx_model_bind(&m, &b, dst);
    r = quarot_rotate_model(&m, &d);
    if (r != QUAROT_OK) { printf("    rotate: %s\n", m.error); return 0; }
    qx_model_sync(&m, dst);
    return 1;
}

static void check_forward(const char* arch) {
    qx_store s, rot;
    quarot_online_list hooks;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    enum { T = 20 };
    int32_t tok[T];
    float *lt, *lr;
    double* eye;
    int64_t V;
    if (!make_model(&s, arch, 1)) { QT_CHECK(0); return; }
    QT_CHECKF(s.config.n_experts == ((strstr(arch, "moe") || !strcmp(arch, "mixtral")) ? 4 : 0), "%s: %lld experts", arch,
              (long long)s.config.n_experts);
    V = s.config.vocab;
    tokens_of(tok, T, V, 3);
    lt = (float*)malloc((size_t)(T * V) * sizeof(float));
    lr = run_window(&s, NULL, tok, T);
    qx_model_bind(&m, &b, &s);
    memset(&td, 0, sizeof td);
    QT_OK(quarot_trainer_init(&t, &m, &td));
    eye = identity(s.config.hidden);
    QT_OK(quarot_trainer_set_rotations(&t, eye, NULL));
    {   /* R2 = I too */
        int64_t hd = s.config.head_dim, L = s.config.n_layers, l;
        double* e2 = (double*)calloc((size_t)(L * hd * hd), sizeof(double));
        for (l = 0; l < L; ++l) {
            int64_t i;
            for (i = 0; i < hd; ++i) e2[l * hd * hd + i * hd + i] = 1.0;
        }
        QT_OK(quarot_trainer_set_rotations(&t, NULL, e2));
        free(e2);
    }
    QT_OK(quarot_trainer_logits(&t, tok, T, lt));
    QT_CHECKF(lr && rms_rel(lt, lr, T * V) < 2e-6, "%s, R = I: rms rel %.3g", arch, lr ? rms_rel(lt, lr, T * V) : -1.0);
    quarot_trainer_free(&t);
    /* QuaRot's start with the online hooks and R3, against the rotated model run with its hooks */
    td.online = 1;
    td.r3 = 1;
    td.seed = 7;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    QT_OK(quarot_trainer_logits(&t, tok, T, lt));
    QT_CHECKF(lr && rms_rel(lt, lr, T * V) < 2e-6, "%s start vs original: %.3g", arch, lr ? rms_rel(lt, lr, T * V) : -1.0);
    if (rotate_copy(&s, 7, NULL, NULL, 1, 1, &rot, &hooks)) {
        float* lh = run_window_hooks(&rot, &hooks, tok, T);
        QT_CHECKF(lh && rms_rel(lt, lh, T * V) < 2e-6, "%s start vs QuaRot: %.3g", arch, lh ? rms_rel(lt, lh, T * V) : -1.0);
        free(lh);
        qx_store_free(&rot);
        quarot_online_list_free(&hooks);
    } else {
        QT_CHECK(0);
    }
    quarot_trainer_free(&t);
    free(lt); free(lr); free(eye);
    qx_store_free(&s);
}

static void test_forward_llama(void) { check_forward("llama"); }
static void test_forward_qwen2(void) { check_forward("qwen2"); }
static void test_forward_qwen3(void) { check_forward("qwen3"); }
static void test_forward_phi3(void) { check_forward("phi3"); }   /* fused q|k|v and gate|up */
static void test_forward_moe(void) {
    check_forward("mixtral");
    check_forward("qwen2_moe");
    check_forward("qwen3_moe");
}

/* A few quantized steps: orthogonal throughout, lower loss; then the processor applies them. */
static void test_learned_apply(void) {
    qx_store s, rot;
    quarot_online_list hooks;
    quarot_model m;
    qx_binding b;
    quarot_trainer t, tf;
    quarot_train_desc td;
    enum { B = 4, T = 16, STEPS = 12 };
    int32_t tok[B * T];
    float *lt, *lh, *lo;
    double first, last, worst = 0.0;
    int64_t V, i;
    if (!make_model(&s, "llama", 2)) { QT_CHECK(0); return; }
    V = s.config.vocab;
    tokens_of(tok, B * T, V, 4);
    qx_model_bind(&m, &b, &s);
    memset(&td, 0, sizeof td);
    td.online = 1;
    td.act.a_bits = 4;
    td.act.a_asym = 1;
    td.steps = STEPS;
    td.batch = B;
    td.lr = 1.0;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    QT_OK(quarot_trainer_run(&t, tok, B, T));
    QT_EQ_INT(t.steps_run, STEPS);
    for (i = 0; i < t.steps_run; ++i) if (t.history[i].orth_error > worst) worst = t.history[i].orth_error;
    first = t.history[0].loss;
    last = t.history[STEPS - 1].loss;
    QT_CHECKF(last < first, "quantized loss %.5f -> %.5f", first, last);
    QT_CHECKF(worst <= 1e-6, "orthogonality %.3g", worst);
    {
        quarot_train_step_info in;   /* one more step by hand: the same check */
        QT_OK(quarot_trainer_step(&t, tok, B, T, 1, 1, &in));
        QT_CHECK(in.orth_error <= 1e-6 && in.lr == 1.0);
    }
    /* the trainer in FP at the learned rotations, against the processor's rotated model */
    td.act.a_bits = 0;
    QT_OK(quarot_trainer_init(&tf, &m, &td));
    QT_OK(quarot_trainer_set_rotations(&tf, t.r1, t.r2));
    lt = (float*)malloc((size_t)(T * V) * sizeof(float));
    QT_OK(quarot_trainer_logits(&tf, tok, T, lt));
    lo = run_window(&s, NULL, tok, T);
    QT_CHECKF(lo && rms_rel(lt, lo, T * V) < 2e-6, "learned FP vs original: %.3g", lo ? rms_rel(lt, lo, T * V) : -1.0);
    if (rotate_copy(&s, 0, t.r1, t.r2, 1, 0, &rot, &hooks)) {
        lh = run_window_hooks(&rot, &hooks, tok, T);
        QT_CHECKF(lh && rms_rel(lh, lt, T * V) < 2e-6, "processor vs trainer: %.3g", lh ? rms_rel(lh, lt, T * V) : -1.0);
        QT_CHECKF(lh && lo && rms_rel(lh, lo, T * V) < 2e-6, "processor vs original: %.3g", lh && lo ? rms_rel(lh, lo, T * V) : -1.0);
        QT_EQ_INT(hooks.count, 2 * s.config.n_layers);
        free(lh);
        qx_store_free(&rot);
        quarot_online_list_free(&hooks);
    } else {
        QT_CHECK(0);
    }
    /* a per-layer R2 that is not orthogonal is refused by the processor, before any change */
    {
        int64_t hd = s.config.head_dim;
        double* bad = (double*)malloc((size_t)(s.config.n_layers * hd * hd) * sizeof(double));
        qx_store c;
        quarot_rotate_desc d;
        quarot_model mc;
        qx_binding bc;
        memcpy(bad, t.r2, (size_t)(s.config.n_layers * hd * hd) * sizeof(double));
        bad[hd * hd + 3] += 1e-3;
        QT_OK(qx_store_clone(&s, &c));
        memset(&d, 0, sizeof d);
        d.r2_rotation = QUAROT_ROTATION_MATRIX;
        d.r2_matrices = bad;
        qx_model_bind(&mc, &bc, &c);
        QT_ERR(quarot_rotate_model(&mc, &d), QUAROT_ERR_INVALID_ARGUMENT);
        QT_CHECKF(strstr(mc.error, "layer 1") != NULL, "error: %s", mc.error);
        d.r2_matrices = NULL;
        QT_ERR(quarot_rotate_model(&mc, &d), QUAROT_ERR_INVALID_ARGUMENT);
        qx_store_free(&c);
        free(bad);
    }
    quarot_trainer_free(&tf);
    quarot_trainer_free(&t);
    free(lt); free(lo);
    qx_store_free(&s);
}

/* The whole run under 1, 2 and 3 threads, and recompute = 1: the same bits. */
static void check_threads(const char* arch) {
    qx_store s;
    enum { NW = 6, T = 12, STEPS = 3 };
    int32_t tok[NW * T];
    double *r1 = NULL, *r2 = NULL, loss[STEPS], g1[32 * 32];
    int th, rc;
    int64_t n1, n2;
    if (!make_model(&s, arch, 3)) { QT_CHECK(0); return; }
    tokens_of(tok, NW * T, s.config.vocab, 5);
    n1 = s.config.hidden * s.config.hidden;
    n2 = s.config.n_layers * s.config.head_dim * s.config.head_dim;
    for (th = 1; th <= 4; ++th) {   /* 4: 3 threads with recompute */
        qx_pool* pool = qx_pool_create(th == 4 ? 3 : th);
        quarot_model m;
        qx_binding b;
        quarot_trainer t;
        quarot_train_desc td;
        int k;
        qx_model_bind(&m, &b, &s);
        qx_pool_env(pool, &m.env);
        memset(&td, 0, sizeof td);
        td.online = 1;
        td.r3 = 1;
        td.act.a_bits = 4;
        td.act.k_bits = 4;
        td.act.k_asym = 1;
        td.w_bits = 4;
        td.steps = STEPS;
        td.batch = 2;
        td.recompute = th == 4;
        QT_OK(quarot_trainer_init(&t, &m, &td));
        QT_OK(quarot_trainer_run(&t, tok, NW, T));
        if (th == 1) {
            r1 = (double*)malloc((size_t)n1 * sizeof(double));
            r2 = (double*)malloc((size_t)n2 * sizeof(double));
            memcpy(r1, t.r1, (size_t)n1 * sizeof(double));
            memcpy(r2, t.r2, (size_t)n2 * sizeof(double));
            for (k = 0; k < STEPS; ++k) loss[k] = t.history[k].loss;
            memcpy(g1, t.grad_r1, (size_t)n1 * sizeof(double));
        } else {
            rc = memcmp(r1, t.r1, (size_t)n1 * sizeof(double)) == 0 && memcmp(r2, t.r2, (size_t)n2 * sizeof(double)) == 0;
            QT_CHECKF(rc, "%s, %d threads%s: rotations differ", arch, th == 4 ? 3 : th, th == 4 ? " (recompute)" : "");
            for (k = 0; k < STEPS; ++k) QT_CHECKF(loss[k] == t.history[k].loss, "step %d loss %.17g vs %.17g", k + 1, t.history[k].loss, loss[k]);
            QT_CHECK(memcmp(g1, t.grad_r1, (size_t)n1 * sizeof(double)) == 0);
        }
        quarot_trainer_free(&t);
        qx_pool_destroy(pool);
    }
    free(r1); free(r2);
    qx_store_free(&s);
}

/* (qwen2_moe: a dense layer, then a MoE layer with the shared expert) */
static void test_threads(void) {
    check_threads("qwen2");
    check_threads("qwen2_moe");
}

/* The KL objective: 0 with every quantizer off (the FP32 model is its own teacher, at any rotation),
   positive and decreasing under 4-bit activations. */
static void test_kl_loss(void) {
    qx_store s;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    enum { B = 4, T = 16, STEPS = 10 };
    int32_t tok[B * T];
    double loss = 1.0, gn = 0.0;
    int64_t i;
    if (!make_model(&s, "llama", 5)) { QT_CHECK(0); return; }
    tokens_of(tok, B * T, s.config.vocab, 8);
    qx_model_bind(&m, &b, &s);
    memset(&td, 0, sizeof td);
    td.online = 1;
    td.loss = QUAROT_TRAIN_LOSS_KL;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    QT_OK(quarot_trainer_loss(&t, tok, B, T, 1, &loss));
    for (i = 0; i < s.config.hidden * s.config.hidden; ++i) gn += t.grad_r1[i] * t.grad_r1[i];
    QT_CHECKF(fabs(loss) < 1e-6 && sqrt(gn) < 1e-4, "FP32 KL %.3g, |dR1| %.3g", loss, sqrt(gn));
    quarot_trainer_free(&t);
    td.act.a_bits = 4;
    td.act.a_asym = 1;
    td.steps = STEPS;
    td.batch = B;
    td.lr = 1.0;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    QT_OK(quarot_trainer_run(&t, tok, B, T));
    {   /* the quantized loss is rough (rounding flips), so: positive, finite, and some step below the start */
        double lo = t.history[0].loss;
        for (i = 0; i < STEPS; ++i) {
            QT_CHECK(t.history[i].loss > 0.0 && t.history[i].loss < 10.0);
            if (t.history[i].loss < lo) lo = t.history[i].loss;
        }
        QT_CHECKF(lo < t.history[0].loss, "KL never below the start %.5f", t.history[0].loss);
    }
    quarot_trainer_free(&t);
    qx_store_free(&s);
}

/* max |R^T R - I| */
static double orth_err(const double* r, int64_t n) {
    double w = 0.0;
    int64_t i, j, k;
    for (i = 0; i < n; ++i)
        for (j = 0; j < n; ++j) {
            double s = 0.0;
            for (k = 0; k < n; ++k) s += r[k * n + i] * r[k * n + j];
            s -= i == j ? 1.0 : 0.0;
            if (fabs(s) > w) w = fabs(s);
        }
    return w;
}

/* NaN in the embedding after step 2: step 3's loss is NaN. */
typedef struct nan_ctx { qx_store* s; int at; } nan_ctx;
static void poison(void* user, const quarot_train_step_info* in) {
    nan_ctx* c = (nan_ctx*)user;
    if (in->step == c->at) {   /* the embedding is read row by row as it is used: the loss becomes NaN */
        quarot_tensor* w = qx_store_find(c->s, "model.embed_tokens.weight");
        int64_t i;
        for (i = 0; i < quarot_tensor_nelements(w); ++i) ((float*)w->data)[i] = (float)NAN;
    }
}

static void test_nan_stop(void) {
    qx_store s;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    nan_ctx nc;
    enum { NW = 4, T = 12 };
    int32_t tok[NW * T];
    double* before;
    int64_t n1;
    if (!make_model(&s, "llama", 4)) { QT_CHECK(0); return; }
    tokens_of(tok, NW * T, s.config.vocab, 6);
    qx_model_bind(&m, &b, &s);
    memset(&td, 0, sizeof td);
    td.act.a_bits = 4;
    td.steps = 6;
    td.batch = 2;
    td.progress = poison;
    nc.s = &s;
    nc.at = 2;
    td.user_data = &nc;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    n1 = s.config.hidden * s.config.hidden;
    before = (double*)malloc((size_t)n1 * sizeof(double));
    memcpy(before, t.r1, (size_t)n1 * sizeof(double));
    QT_ERR(quarot_trainer_run(&t, tok, NW, T), QUAROT_ERR_NONFINITE);
    QT_EQ_INT(t.stop_step, 3);
    QT_EQ_INT(t.steps_run, 2);
    QT_CHECK(t.best_step >= 0 && t.best_step <= 2);
    QT_CHECKF(strstr(t.error, "step 3") != NULL, "error: %s", t.error);
    if (t.best_step == 0) QT_CHECK(memcmp(before, t.r1, (size_t)n1 * sizeof(double)) == 0);
    QT_CHECK(orth_err(t.r1, s.config.hidden) <= 1e-6);
    QT_CHECKF(strstr(t.error, "not finite") != NULL || strstr(t.error, "NaN") != NULL, "%s", t.error);
    quarot_trainer_free(&t);
    free(before);
    qx_store_free(&s);
}

static void test_errors(void) {
    qx_store s;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    int32_t tok[24];
    double loss, *r;
    int64_t h;
    if (!make_model(&s, "opt", 1)) { QT_CHECK(0); return; }
    qx_model_bind(&m, &b, &s);
    memset(&td, 0, sizeof td);
    QT_ERR(quarot_trainer_init(&t, &m, &td), QUAROT_ERR_UNSUPPORTED);
    QT_CHECK(t.error[0] != '\0');
    qx_store_free(&s);
    if (!make_model(&s, "llama", 1)) { QT_CHECK(0); return; }
    qx_model_bind(&m, &b, &s);
    td.lr = -1.0;
    QT_ERR(quarot_trainer_init(&t, &m, &td), QUAROT_ERR_INVALID_ARGUMENT);
    td.lr = 0.0;
    td.w_bits = 9;
    QT_ERR(quarot_trainer_init(&t, &m, &td), QUAROT_ERR_INVALID_ARGUMENT);
    td.w_bits = 0;
    td.act.a_bits = 1;
    QT_ERR(quarot_trainer_init(&t, &m, &td), QUAROT_ERR_INVALID_ARGUMENT);
    td.act.a_bits = 0;
    td.momentum = 1.0;
    QT_ERR(quarot_trainer_init(&t, &m, &td), QUAROT_ERR_INVALID_ARGUMENT);
    td.momentum = 0.0;
    td.batch = 4;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    tokens_of(tok, 24, s.config.vocab, 1);
    QT_ERR(quarot_trainer_run(&t, tok, 2, 12), QUAROT_ERR_INVALID_ARGUMENT);   /* a batch of 4 from 2 windows */
    tok[5] = (int32_t)s.config.vocab;
    QT_ERR(quarot_trainer_loss(&t, tok, 2, 12, 0, &loss), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(t.error, "vocabulary") != NULL, "%s", t.error);
    QT_ERR(quarot_trainer_loss(&t, tok, 1, 1, 0, &loss), QUAROT_ERR_INVALID_ARGUMENT);
    h = s.config.hidden;
    r = identity(h);
    r[1] = 0.01;
    QT_ERR(quarot_trainer_set_rotations(&t, r, NULL), QUAROT_ERR_INVALID_ARGUMENT);
    QT_CHECKF(strstr(t.error, "R1") != NULL, "%s", t.error);
    free(r);
    quarot_trainer_free(&t);
    quarot_trainer_free(&t);   /* twice: harmless */
    /* a missing tensor */
    qx_store_remove(&s, "model.layers.1.self_attn.k_proj.weight");
    qx_model_bind(&m, &b, &s);
    QT_ERR(quarot_trainer_init(&t, &m, &td), QUAROT_ERR_NOT_FOUND);
    QT_CHECKF(strstr(t.error, "k_proj") != NULL, "%s", t.error);
    qx_store_free(&s);
}

/* stories260K: the forward against qx_forward, and learned rotations that keep its FP32 perplexity. */
static void test_stories260k(void) {
    const char* mp = qt_shared_path("models/stories260K/stories260K.bin");
    qx_store s, rot;
    quarot_online_list hooks;
    qx_l2c_read_opts ro;
    qx_tokenizer tk;
    qx_err e;
    quarot_model m;
    qx_binding b;
    quarot_trainer t;
    quarot_train_desc td;
    int32_t* stream = NULL;
    int64_t n_stream = 0, T = 64, NW = qt_quick() ? 2 : 8, V, w;
    float *lt, *lr;
    char tokp[4096];
    if (!mp) { QT_SKIP("../shared/models/stories260K not found"); return; }
    memset(&ro, 0, sizeof ro);
    ro.copy = 1;
    if (qx_l2c_read_file(mp, &ro, &s, &e) != QUAROT_OK) { QT_CHECKF(0, "%s", e.msg); return; }
    strcpy(tokp, qt_shared_path("models/stories260K/tok512.bin"));
    if (qx_tokenizer_load(&tk, tokp, 512, &e) != QUAROT_OK ||
        qx_tokenize_file(&tk, qt_shared_path("data/tinystories_eval.txt"), 0, 0, &stream, &n_stream, &e) != QUAROT_OK) {
        QT_CHECKF(0, "%s", e.msg);
        qx_store_free(&s);
        return;
    }
    qx_tokenizer_free(&tk);
    V = s.config.vocab;
    qx_model_bind(&m, &b, &s);
    memset(&td, 0, sizeof td);
    td.online = 1;
    td.act.a_bits = 4;
    td.act.a_asym = 1;
    td.act.a_clip = 0.9f;
    td.steps = qt_quick() ? 2 : 4;
    td.batch = 2;
    QT_OK(quarot_trainer_init(&t, &m, &td));
    QT_OK(quarot_trainer_run(&t, stream, NW, T));
    /* the FP trainer at the learned rotations against qx_forward, and the processor's rotated model's
       perplexity against the original's */
    {
        quarot_trainer tf;
        qx_forward f0, f1;
        qx_forward_opts o1;
        qx_online_ctx oc;
        qx_ppl_opts po;
        qx_ppl_result p0, p1;
        td.act.a_bits = 0;
        QT_OK(quarot_trainer_init(&tf, &m, &td));
        QT_OK(quarot_trainer_set_rotations(&tf, t.r1, t.r2));
        lt = (float*)malloc((size_t)(T * V) * sizeof(float));
        QT_OK(quarot_trainer_logits(&tf, stream, T, lt));
        lr = run_window(&s, NULL, stream, T);
        QT_CHECKF(lr && rms_rel(lt, lr, T * V) < 2e-6, "stories260K learned FP vs original: %.3g", lr ? rms_rel(lt, lr, T * V) : -1.0);
        quarot_trainer_free(&tf);
        free(lt); free(lr);
        if (!rotate_copy(&s, 0, t.r1, t.r2, 1, 0, &rot, &hooks)) { QT_CHECK(0); goto out; }
        memset(&po, 0, sizeof po);
        po.seq_len = 256;
        po.max_windows = qt_quick() ? 4 : 16;
        memset(&o1, 0, sizeof o1);
        qx_online_ctx_init(&oc, &hooks);
        o1.online = qx_online_hooks;
        o1.online_user = &oc;
        QT_OK(qx_forward_init(&f0, &s, NULL, &e));
        QT_OK(qx_forward_init(&f1, &rot, &o1, &e));
        QT_OK(qx_eval_perplexity(&f0, stream, n_stream, &po, &p0, &e));
        QT_OK(qx_eval_perplexity(&f1, stream, n_stream, &po, &p1, &e));
        QT_CHECKF(fabs(p1.ppl - p0.ppl) <= 1e-6 * p0.ppl, "perplexity %.9f vs original %.9f (rel %.3g)", p1.ppl, p0.ppl,
                  fabs(p1.ppl - p0.ppl) / p0.ppl);
        qx_forward_free(&f0);
        qx_forward_free(&f1);
        qx_online_ctx_free(&oc);
        qx_store_free(&rot);
        quarot_online_list_free(&hooks);
    }
    for (w = 0; w < t.steps_run; ++w) QT_CHECK(t.history[w].orth_error <= 1e-6);
out:
    quarot_trainer_free(&t);
    free(stream);
    qx_store_free(&s);
}

int main(void) {
    QT_RUN(test_forward_llama);
    QT_RUN(test_forward_qwen2);
    QT_RUN(test_forward_qwen3);
    QT_RUN(test_forward_phi3);
    QT_RUN(test_forward_moe);
    QT_RUN(test_learned_apply);
    QT_RUN(test_threads);
    QT_RUN(test_kl_loss);
    QT_RUN(test_nan_stop);
    QT_RUN(test_errors);
    QT_RUN(test_stories260k);
    return qt_finish("test_train");
}
