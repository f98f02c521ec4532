/* qx_cmd_calibrate.c - `quarot calibrate MODEL --text FILE -o CONTEXT`: Adapt Rotation stage 1, or
   with --method spinquant SpinQuant's learned R1 / R2 (eval/qx_spin.h) written to a rotation file.

   The model is loaded (qx_load_model), its norms are fused on a copy, the calibration text runs
   through the reference forward pass with the capture hook, and quarot_adapt_stage1 learns R (see
   qx_calib.h for the pipeline). The per-step loss goes to stderr, the summary (the final loss
   beside the starting random Hadamard's) to stdout, and the context file to CONTEXT through a
   temporary renamed into place. `quarot rotate --rotation adapt --context CONTEXT` is stage 2. */
#include "eval/qx_calib.h"
#include "eval/qx_spin.h"
#include "cli/qx_cli.h"
#include "cli/qx_cli_hooks.h"
#include "eval/qx_evalkit.h"
#include "pipeline/qx_layerwise.h"
#include "support/qx_file.h"
#include "cli/qx_rotcheck.h"
#include "support/qx_threads.h"
#include "tokenizer/qx_tok_load.h"
#include "formats/qx_load.h"
#include "cli/qx_opts.h"

#include <stdlib.h>
#include <string.h>

enum { CALIB_ADAPT = 0, CALIB_SPINQUANT = 1 };
static const qx_opt_choice calibrate_methods[] = {{"adapt", CALIB_ADAPT}, {"spinquant", CALIB_SPINQUANT}, {NULL, 0}};
static const qx_opt_choice calibrate_losses[] = {{"ce", QUAROT_TRAIN_LOSS_CE}, {"kl", QUAROT_TRAIN_LOSS_KL}, {NULL, 0}};

typedef struct calibrate_opts {
    const char *model, *text, *output, *quant_dtype, *layer_type;
    int64_t steps, block, max_samples;
    int steps_given, method;
    /* SpinQuant */
    double lr, momentum, a_clip;
    int64_t nsamples, batch, a_bits, w_bits, kv_bits;
    int loss, recompute;
    qx_opts_quant q;
    qx_opts_common c;
    qx_opts_input in;
    qx_opts_rotation rot;
    qx_opts_windowing w;
} calibrate_opts;

static int check_bits(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    int64_t b = *(int64_t*)((char*)base + o->off);
    (void)v;
    if (b > 8 && b != 16) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %lld bits: the quantizer takes 2..8 bits (16 = not quantized)", name, (long long)b), 0;
    return 1;
}

static int check_block(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    int64_t b = *(int64_t*)((char*)base + o->off);
    (void)v;
    if (b != -1 && (b < 1 || (b & (b - 1))))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %lld is neither -1 nor a positive power of two", name, (long long)b), 0;
    return 1;
}

static const qx_opt calibrate_table[] = {
    {QX_OPT_CHOICE, "--method", QX_AT(calibrate_opts, method), .choices = calibrate_methods, .def = "adapt",
     .help = "adapt: Adapt Rotation stage 1 (writes a context for --rotation adapt); spinquant: SpinQuant, R1 and one R2 per "
             "layer learned by Cayley SGD on the model's own next-token loss under fake quantization (writes a rotation file "
             "for --rotation learned --rotations FILE; options below)"},
    {QX_OPT_STRING, "--text", .arg = "FILE", QX_AT(calibrate_opts, text),
     .help = "calibration text (required unless --tokens): raw text, or .jsonl with one JSON value per line (a string, or an "
             "object: its \"text\" member, else its first string member), each record its own sample"},
    {QX_OPT_STRING, "--output", "-o", .arg = "CONTEXT", QX_AT(calibrate_opts, output), .help = "the context file to write (required)"},
    {QX_OPT_INT, "--steps", .arg = "N", QX_AT(calibrate_opts, steps), QX_GIVEN(calibrate_opts, steps_given), .lo = 1, .hi = 1000,
     .def = "20; spinquant 100", .help = "optimizer steps, 1..1000"},
    {QX_OPT_STRING, "--quant-dtype", .arg = "T", QX_AT(calibrate_opts, quant_dtype), .def = "int4",
     .help = "int4 or int8: the activation quantizer the rotation is tuned for (match the downstream activation bits: int4 for "
             "W4A4, int8 for W8A8)"},
    {QX_OPT_STRING, "--layer-type", .arg = "LIST", QX_AT(calibrate_opts, layer_type), .def = "up_proj",
     .help = "comma-separated substrings of linear names whose inputs are captured (e.g. up_proj,q_proj). Only linears reading "
             "the residual stream (q/k/v_proj, gate/up_proj) may match. Mixture-of-experts layers: shared_expert.up_proj / "
             "shared_expert.gate_proj (the shared expert: every token), experts.up_proj / experts.gate_proj (the routed "
             "experts' inputs, the rows of all experts of a layer pooled; Mixtral's w3 / w1; GGUF's ffn_up_exps / ffn_gate_exps), "
             "gate.weight (the router); "
             "default there: mlp.up_proj with shared_expert.up_proj, else experts.up_proj"},
    {QX_OPT_INT, "--block-size", .arg = "N", QX_AT(calibrate_opts, block), .lo = -1, .hi = (int64_t)1 << 30, .fn = check_block,
     .def = "-1", .help = "size of R: -1 = the full hidden size, else a power of two dividing hidden (block-diagonal H*R, one R "
                          "for every block)"},
    {QX_OPT_INT, "--max-samples", .arg = "N", QX_AT(calibrate_opts, max_samples), .lo = 1, .hi = 100000, .def = "2048",
     .help = "rows kept per matched linear, 1..100000"},
    {QX_OPT_END}
};
static const qx_opt_group calibrate_group = {"options (defaults as msModelSlim's):", calibrate_table, NULL};

static const qx_opt spin_table[] = {
    {QX_OPT_FLOAT, "--lr", .arg = "R", QX_AT(calibrate_opts, lr), .flo = 0.0, .fhi = 1e6, .open = QX_OPT_OPEN_LO, .def = "1.5",
     .ref = "--learning_rate", .help = "learning rate of the Cayley SGD, decayed by a cosine to 0 over --steps"},
    {QX_OPT_INT, "--nsamples", .arg = "N", QX_AT(calibrate_opts, nsamples), .lo = 1, .hi = 1 << 24, .def = "128", .ref = "--nsamples",
     .help = "training windows: the first N windows of exactly --seq-len tokens of --text (too few is an error)"},
    {QX_OPT_INT, "--batch", .arg = "N", QX_AT(calibrate_opts, batch), .lo = 1, .hi = 1 << 20, .def = "8",
     .ref = "--per_device_train_batch_size x GPUs", .help = "windows per step, in a seeded order reshuffled every epoch"},
    {QX_OPT_INT, "--a-bits", .arg = "N", QX_AT(calibrate_opts, a_bits), .lo = 2, .hi = 16, .fn = check_bits, .def = "4", .ref = "--a_bits",
     .help = "activations fake-quantized during training, per token at every decoder-linear input (16 = FP)"},
    {QX_OPT_FLOAT, "--clip", .arg = "R", QX_AT(calibrate_opts, a_clip), .flo = 0.0, .fhi = 1.0, .open = QX_OPT_OPEN_LO, .def = "1.0",
     .ref = "--a_clip_ratio", .help = "activation clip ratio during training (match the evaluation's --clip)"},
    {QX_OPT_INT, "--w-bits", .arg = "N", QX_AT(calibrate_opts, w_bits), .lo = 2, .hi = 16, .fn = check_bits, .def = "16", .ref = "--w_bits",
     .help = "weights fake-quantized during training (RTN per output channel, with --w-asym, and --w-clip as the squared-error "
             "clip search); 16 = FP, SpinQuant's choice before GPTQ"},
    {QX_OPT_INT, "--kv-bits", .arg = "N", QX_AT(calibrate_opts, kv_bits), .lo = 2, .hi = 16, .fn = check_bits, .def = "16",
     .ref = "--k_bits, --v_bits", .help = "K and V fake-quantized during training, per token per head (asymmetric; R3 on q/k then)"},
    {QX_OPT_CHOICE, "--loss", QX_AT(calibrate_opts, loss), .choices = calibrate_losses, .def = "ce",
     .help = "ce: the next-token cross-entropy (SpinQuant); kl: the KL divergence from the FP32 model's next-token "
             "distribution (one more forward pass per step)"},
    {QX_OPT_FLOAT, "--momentum", .arg = "R", QX_AT(calibrate_opts, momentum), .flo = 0.0, .fhi = 1.0, .open = QX_OPT_OPEN_HI,
     .def = "0", .help = "momentum of the Cayley SGD"},
    {QX_OPT_FLAG, "--recompute", QX_AT(calibrate_opts, recompute),
     .help = "keep only each layer's input and run the layer again for its backward (less memory, about a third more time)"},
    {QX_OPT_END}
};
static const qx_opt_group spin_group = {"SpinQuant (--method spinquant; SpinQuant's optimize_rotation.py flag in brackets):", spin_table,
                                        "The start is QuaRot's random Hadamard R1 and R2 of --seed, so --steps 1 at a tiny --lr is "
                                        "QuaRot; the online Hadamards (before down_proj, across the heads before o_proj) are part of "
                                        "the trained model unless --no-online. Use the same --no-online, --kv-bits and activation "
                                        "settings downstream."};

const qx_opts_cmd qx_cmd_calibrate_spec = {
    .name = "calibrate",
    .synopsis = "MODEL --text FILE -o CONTEXT [options]",
    .about = "Adapt Rotation stage 1 (msModelSlim's adapt_rotation, stage: 1): learn the hidden-size rotation from\n"
             "calibration activations. MODEL's RMSNorm gains are fused into the linears (in memory), the text runs\n"
             "through the model, and the inputs of the linears whose names contain a --layer-type pattern are\n"
             "captured (at most --max-samples rows per linear, spread evenly over all tokens; the BOS token,\n"
             "the same vector in every window, only once). Starting from the random Hadamard H of QuaRot (same\n"
             "--seed), each step rotates the rows A = X*H*R, quantizes them per token (symmetric,\n"
             "--quant-dtype), and moves R to the orthogonal R' minimizing ||A*R' - Q(A)||\n"
             "(polar factor: scaled Newton from a block of 512, Newton-Schulz below); the best R is kept (early\n"
             "stop after 5 steps without improvement).\n"
             "CONTEXT receives H's seed and block and the learned R; stage 2 applies H*R as R1:\n"
             "    quarot rotate MODEL OUT --rotation adapt --context CONTEXT [--online ...]\n"
             "With --method spinquant: SpinQuant (Liu et al. 2024). From QuaRot's random Hadamard R1 and R2 (--seed),\n"
             "R1 and one R2 per layer are learned by Cayley SGD on the Stiefel manifold, minimizing the model's own\n"
             "next-token loss on --nsamples windows of --text with the weights frozen and the activations (and\n"
             "optionally weights, K and V) fake-quantized with straight-through gradients. -o ROT receives a\n"
             "safetensors file (R1, model.layers.{i}.self_attn.R2, the model's digest); then\n"
             "    quarot rotate|quantize|eval MODEL ... --rotation learned --rotations ROT\n",
    .operands = {{"MODEL", offsetof(calibrate_opts, model)}},
    .uses = {{&calibrate_group, 0, 0, NULL},
             {&spin_group, 0, 0, NULL},
             {&qx_opts_quant_group, offsetof(calibrate_opts, q), QX_QUANT_W_ASYM | QX_QUANT_W_CLIP | QX_QUANT_A_ASYM, NULL},
             {&qx_opts_rotation_group, offsetof(calibrate_opts, rot),
              QX_ROTATION_SEED | QX_ROTATION_STRICT | QX_ROTATION_NO_R2 | QX_ROTATION_NO_ONLINE, NULL},
             {&qx_opts_windowing_group, offsetof(calibrate_opts, w), 0, NULL},
             {&qx_opts_input_group, offsetof(calibrate_opts, in), QX_INPUT_TOKENIZER | QX_INPUT_TOKENS | QX_INPUT_HOOKS, NULL},
             {&qx_opts_common_group, offsetof(calibrate_opts, c), QX_COMMON_THREADS | QX_COMMON_QUIET_Q | QX_COMMON_FORCE, NULL}},
    .epilog = "stderr (not with --quiet): progress and one line per optimizer step (loss, best loss, polar\n"
              "iterations; spinquant: the batch loss, the learning rate and the orthogonality error).\n"
              "stdout: what was captured, the loss of the starting random Hadamard beside the final one, the time.\n"
              "Memory (layer-wise): MODEL stays memory-mapped in its stored dtype; the norm fusion is written layer\n"
              "by layer to a temporary file in $TMPDIR (default /tmp; the model's size on disk, removed once\n"
              "mapped) and the forward pass converts one decoder layer to f32 when it runs. Peak: the embeddings,\n"
              "final norm and lm_head (f32) + one decoder layer in f32 + one window's activations, plus\n"
              "max_samples x hidden floats per matched linear and the optimizer's 3 x rows x block + ~9 x block^2\n"
              "floats; stdout reports the peak resident set.\n"
              "Exit codes: 0 ok, 1 usage (incl. --quant-dtype other than int4/int8), 2 input (model, tokenizer or\n"
              "text missing or malformed), 3 output (CONTEXT exists without --force, cannot be written),\n"
              "4 processing (--layer-type matches no linear: the message lists the linear names; or matches a\n"
              "linear that does not read the residual stream; text shorter than one window, or than --nsamples\n"
              "windows of --seq-len tokens; spinquant: a NaN loss or gradient, which stops the run: the best rotations\n"
              "so far are written and the step is named), 5 internal.\n",
};

/* "a,b,c" -> patterns (pointers into a copy); 0 on a bad list (usage error printed). */
static int parse_layer_types(qx_cli* cli, const char* s, char** copy, const char*** out, int64_t* n_out) {
    char* p;
    int64_t n = 1, k = 0;
    const char* c;
    for (c = s; *c; ++c) n += *c == ',';
    *copy = (char*)malloc(strlen(s) + 1);
    *out = (const char**)malloc((size_t)n * sizeof **out);
    if (!*copy || !*out) return qx_cli_fail(cli, QX_EXIT_INTERNAL, "out of memory"), 0;
    strcpy(*copy, s);
    p = *copy;
    for (;;) {
        char* comma = strchr(p, ',');
        if (comma) *comma = '\0';
        if (!p[0] || strlen(p) >= 128) {
            qx_cli_fail(cli, QX_EXIT_USAGE, "--layer-type: '%s' is not a list of non-empty patterns (at most 127 bytes each), e.g. up_proj,gate_proj", s);
            return 0;
        }
        (*out)[k++] = p;
        if (!comma) break;
        p = comma + 1;
    }
    *n_out = k;
    return 1;
}

typedef struct calib_progress {
    qx_cli* cli;
    int steps;
    int quiet;
} calib_progress;

static void on_window(void* user, int64_t done, int64_t total) {
    calib_progress* p = (calib_progress*)user;
    qx_cli_progress(p->cli, done, total, "calibration window");
}

static void on_optimize(void* user) {
    calib_progress* p = (calib_progress*)user;
    qx_cli_progress_end(p->cli, "calibration forward pass");
    qx_cli_phase(p->cli);
}

static void on_step(void* user, int step, double loss, double best, int iters) {
    calib_progress* p = (calib_progress*)user;
    if (p->quiet) return;
    if (step == 0)
        qx_cli_info(p->cli, "step %2d/%d  loss %.6e  (random Hadamard, R = I)", step, p->steps, loss);
    else
        qx_cli_info(p->cli, "step %2d/%d  loss %.6e  best %.6e  (%d polar iterations)", step, p->steps, loss, best, iters);
}

typedef struct spin_progress {
    qx_cli* cli;
    int quiet;
} spin_progress;

static void on_spin_step(void* user, const quarot_train_step_info* in) {
    spin_progress* p = (spin_progress*)user;
    if (p->quiet) return;
    qx_cli_info(p->cli, "step %3d/%d  loss %.6f  lr %.4f  |dL/dR1| %.3e  orthogonality %.1e%s", in->step, in->steps, in->loss, in->lr,
                in->grad_norm_r1, in->orth_error, in->reorthogonalized ? " (re-orthogonalized)" : "");
}

/* --method spinquant on the windows: train, report, write ROT. */
static int calibrate_spin(qx_cli* cli, const calibrate_opts* o, const qx_store* model, const qx_windows* win, const char* tok_path,
                          const quarot_env* env) {
    qx_spin_opts so;
    qx_spin_rot rot;
    qx_spin_stats st;
    spin_progress sp;
    qx_err e;
    quarot_result r, rs;
    int rc = QX_EXIT_OK;
    char seed[32];
    const char* extra[4];
    memset(&so, 0, sizeof so);
    so.desc.seed = (uint64_t)o->rot.seed;
    so.desc.steps = (int)o->steps;
    so.desc.lr = o->lr;
    so.desc.momentum = o->momentum;
    so.desc.batch = o->batch;
    so.desc.online = !o->rot.no_online;
    so.desc.no_r2 = o->rot.no_r2;
    so.desc.recompute = o->recompute;
    so.desc.loss = o->loss;
    if (o->a_bits < 16) {
        so.desc.act.a_bits = (int)o->a_bits;
        so.desc.act.a_asym = o->q.a_asym;
        so.desc.act.a_clip = (float)o->a_clip;
    }
    if (o->kv_bits < 16) {
        so.desc.act.k_bits = so.desc.act.v_bits = (int)o->kv_bits;
        so.desc.act.k_asym = so.desc.act.v_asym = 1;
        so.desc.r3 = !o->rot.no_online;
    }
    if (o->w_bits < 16) {
        so.desc.w_bits = (int)o->w_bits;
        so.desc.weight.asymmetric = o->q.w_asym;
        /* the clip search in the loop: the squared-error one (51 ratios); QuaRot's |err|^2.4 search costs
           about 10x a whole training pass on stories260K, twice a step */
        so.desc.weight.clip_search = o->q.w_clip ? QUAROT_CLIP_SEARCH_MSE : 0;
    }
    memset(&sp, 0, sizeof sp);
    sp.cli = cli;
    sp.quiet = o->c.quiet;
    so.desc.progress = on_spin_step;
    so.desc.user_data = &sp;
    so.nsamples = o->nsamples;
    so.env = env;
    qx_cli_phase(cli);
    r = qx_spin_train(model, win, o->w.seq_len, &so, &rot, &st, &e);
    if (r != QUAROT_OK && !rot.r1) {
        int code = r == QUAROT_ERR_OUT_OF_MEMORY || r == QUAROT_ERR_INTERNAL ? QX_EXIT_INTERNAL
                 : r == QUAROT_ERR_UNSUPPORTED ? QX_EXIT_INPUT : QX_EXIT_PROCESS;
        return qx_cli_fail(cli, code, "%s: SpinQuant on %s: %s", o->model, o->text, e.msg);
    }
    if (r != QUAROT_OK) rc = qx_cli_fail(cli, QX_EXIT_PROCESS, "%s: SpinQuant on %s: %s", o->model, o->text, e.msg);   /* NaN: the best so far is written */
    rs = qx_spin_model_digest(o->model, rot.digest, &e);
    if (rs != QUAROT_OK) {
        qx_spin_rot_free(&rot);
        return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: %s", o->model, e.msg);
    }
    printf("calibrated %s (%s, %s, hidden %lld, %lld layers, head_dim %lld) on %s by SpinQuant\n", o->model,
           model->source_format[0] ? model->source_format : "?", model->config.arch, (long long)rot.hidden, (long long)rot.n_layers,
           (long long)rot.head_dim, o->text);
    printf("  text       %lld windows of %lld tokens (%lld tokens), tokenizer %s\n", (long long)st.windows, (long long)o->w.seq_len,
           (long long)st.tokens, tok_path);
    printf("  training   %d steps of %lld windows, lr %g (cosine), momentum %g, loss %s; activations %s, weights %s, KV %s%s%s\n",
           st.steps_run, (long long)o->batch, o->lr, o->momentum, o->loss == QUAROT_TRAIN_LOSS_KL ? "kl" : "ce",
           o->a_bits < 16 ? (o->q.a_asym ? "asymmetric" : "symmetric") : "FP", o->w_bits < 16 ? "RTN" : "FP", o->kv_bits < 16 ? "asymmetric" : "FP",
           o->rot.no_online                 ? ", no online Hadamards"
           : model->config.n_experts <= 0   ? ", online Hadamards (down_proj, heads)"
           : model->config.shared_intermediate > 0 ? ", online Hadamards (every expert's and the shared expert's down_proj, heads)"
                                                   : ", online Hadamards (every expert's down_proj, heads)",
           o->rot.no_r2 ? ", no R2" : "");
    if (model->config.n_experts > 0)
        printf("  experts    %lld of width %lld, top %lld%s: routing held fixed in the backward, routers%s FP\n",
               (long long)model->config.n_experts,
               (long long)quarot_config_expert_width(&model->config),
               (long long)model->config.n_experts_used, model->config.shared_intermediate > 0 ? " and a shared expert" : "",
               model->config.shared_intermediate > 0 ? " and the shared-expert gate" : "");
    if (o->a_bits < 16 || o->w_bits < 16 || o->kv_bits < 16)
        printf("  bits       A%lld W%lld KV%lld, activation clip %g\n", (long long)o->a_bits, (long long)o->w_bits, (long long)o->kv_bits, o->a_clip);
    printf("  loss       batch loss %.6f (step 1, QuaRot's rotations) -> %.6f (step %d)\n", st.first_loss, st.last_loss, st.steps_run);
    printf("  rotations  R1 %lld x %lld%s; orthogonality max|R^T R - I| %.2e over the run, %d re-orthogonalization%s\n",
           (long long)rot.hidden, (long long)rot.hidden, rot.r2 ? ", R2 per layer" : "", st.max_orth, st.reorthogonalized,
           st.reorthogonalized == 1 ? "" : "s");
    printf("  time       %.2f s (%d thread%s)\n", st.seconds, env->parallel.n_threads > 1 ? env->parallel.n_threads : 1,
           env->parallel.n_threads > 1 ? "s" : "");
    snprintf(seed, sizeof seed, "%lld", (long long)o->rot.seed);
    extra[0] = "quarot.seed";
    extra[1] = seed;
    extra[2] = NULL;
    rs = qx_spin_save(&rot, o->output, extra, o->c.force, &e);
    if (rs != QUAROT_OK) {
        if (rc == QX_EXIT_OK) rc = qx_cli_fail(cli, rs == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_OUTPUT, "%s", e.msg);
    } else {
        printf("  wrote      %s (quarot rotate|quantize|eval MODEL ... --rotation learned --rotations %s)\n", o->output, o->output);
    }
    fflush(stdout);
    qx_spin_rot_free(&rot);
    return rc;
}

/* ---- one run -------------------------------------------------------------------------------- */

/* What one `quarot calibrate` reads and builds; calibrate_free frees it. */
typedef struct calibrate_state {
    qx_cli cli;
    calibrate_opts o;
    char* layer_copy;              /* --layer-type's patterns point into it */
    const char** layer_list;
    int64_t n_layer;
    const char* moe_layer[2];      /* the default on a mixture-of-experts model */
    qx_calib_opts co;              /* stage 1's options */
    qx_store model;
    qx_rotcheck_dim dims[8];       /* what H (stage 1's starting rotation) is built from (no silent fallbacks) */
    int n_dims;
    qx_tokenizer tok;
    char tok_path[4096];
    int32_t* ids;                  /* --tokens */
    int64_t n_ids;
    qx_calib_text text;            /* --text */
    qx_windows win;
    qx_pool* pool;
    quarot_env env;
    calib_progress cp;
    quarot_adapt_context ctx;      /* what stage 1 learns */
    qx_calib_stats stats;
    int have_model, have_tok, have_text, have_win;
} calibrate_state;

static void calibrate_init(calibrate_state* st) {
    memset(st, 0, sizeof *st);
    qx_cli_init(&st->cli, "calibrate", 0);
    st->o.quant_dtype = "int4";
    st->o.steps = 20;
    st->o.block = -1;
    st->o.max_samples = 2048;
    st->o.lr = 1.5;
    st->o.nsamples = 128;
    st->o.batch = 8;
    st->o.a_bits = 4;
    st->o.a_clip = 1.0;
    st->o.w_bits = 16;
    st->o.kv_bits = 16;
    qx_opts_rotation_init(&st->o.rot);
    qx_opts_windowing_init(&st->o.w);
    quarot_adapt_context_init(&st->ctx, NULL);
}

static void calibrate_free(calibrate_state* st) {
    quarot_adapt_context_free(&st->ctx);
    qx_pool_destroy(st->pool);
    if (st->have_win) qx_windows_free(&st->win);
    if (st->have_text) qx_calib_text_free(&st->text);
    if (st->have_tok) qx_tokenizer_free(&st->tok);
    if (st->have_model) qx_store_free(&st->model);
    free(st->ids);
    free(st->layer_copy);
    free(st->layer_list);
}

/* The usage errors, then the cheap mistakes (no text, an output that is a directory or exists
   without --force) before the model is read. */
static int calibrate_check_options(calibrate_state* st) {
    calibrate_opts* o = &st->o;
    qx_cli* cli = &st->cli;
    if (!o->model) return qx_cli_fail(cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot calibrate MODEL --text FILE -o CONTEXT)");
    if (!o->text && !o->in.tokens)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "no --text FILE (or --tokens FILE) given (the calibration text; see quarot calibrate --help)");
    if (o->text && o->in.tokens) return qx_cli_fail(cli, QX_EXIT_USAGE, "--text and --tokens both give the calibration tokens: choose one");
    if (o->in.tokens && o->w.windowing == QX_WINDOWING_DOCS) return qx_cli_fail(cli, QX_EXIT_USAGE, "--tokens has no documents: use --windowing stream");
    if (o->in.tokens) o->text = o->in.tokens;
    if (!o->output) return qx_cli_fail(cli, QX_EXIT_USAGE, "no -o CONTEXT given (the file stage 2 reads; see quarot calibrate --help)");
    if (o->method == CALIB_SPINQUANT && !o->steps_given) o->steps = 100;
    if (o->method == CALIB_ADAPT && (o->rot.no_online || o->rot.no_r2))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "%s applies to --method spinquant (Adapt Rotation learns R1 only)",
                           o->rot.no_online ? "--no-online" : "--no-r2");
    if (o->method == CALIB_SPINQUANT && o->layer_type)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--layer-type applies to --method adapt (SpinQuant trains on the model's loss)");
    if (o->layer_type && !parse_layer_types(cli, o->layer_type, &st->layer_copy, &st->layer_list, &st->n_layer)) return QX_EXIT_USAGE;
    if (!qx_path_exists(o->text) || qx_is_dir(o->text))
        return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: %s (the calibration text)", o->text, qx_is_dir(o->text) ? "is a directory" : "no such file");
    if (qx_is_dir(o->output)) return qx_cli_fail(cli, QX_EXIT_OUTPUT, "%s: is a directory (expected a file name for the context)", o->output);
    if (!o->c.force && qx_path_exists(o->output)) return qx_cli_fail(cli, QX_EXIT_OUTPUT, "%s: exists already; use --force to replace it", o->output);
    return QX_EXIT_OK;
}

/* Stage 1's options from the command line (default layer type: up_proj). */
static void calibrate_stage1_opts(calibrate_state* st) {
    static const char* const default_layer[1] = {"up_proj"};
    const calibrate_opts* o = &st->o;
    quarot_adapt_desc* a = &st->co.adapt;
    memset(&st->co, 0, sizeof st->co);
    a->steps = (int)o->steps;
    a->quant_dtype = o->quant_dtype;
    a->layer_type = st->layer_list ? st->layer_list : default_layer;
    a->n_layer_type = st->layer_list ? st->n_layer : 1;
    a->block_size = o->block;
    a->max_samples = o->max_samples;
    a->seed = (uint64_t)o->rot.seed;
}

/* The model and its own online hooks. */
static int calibrate_load_model(calibrate_state* st) {
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(st->o.model, &lo, &st->model, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    st->have_model = 1;
    return qx_cli_model_hooks(&st->cli, &st->model, st->o.model, st->o.in.hooks);
}

/* Before any work: the optimizer's own checks (quant_dtype, block_size against hidden), H of the
   block (R1 of stage 2) by rotate's rule, warned or refused (SpinQuant's start: QuaRot's R1 and R2
   with the online Hadamards), and --seq-len against the context. */
static int calibrate_check_model(calibrate_state* st) {
    const calibrate_opts* o = &st->o;
    const quarot_model_config* c = &st->model.config;
    qx_rotcheck_opts rco;
    qx_err e;
    int rc;
    quarot_result r;
    if (c->n_experts > 0 && o->method != CALIB_SPINQUANT && !st->layer_list) {
        /* msModelSlim's advice for MoE: the shared expert (every token) rather than one expert's
           linears (only the rows routed to it); without one, the routed experts' inputs pooled */
        st->moe_layer[0] = "mlp.up_proj";
        st->moe_layer[1] = c->shared_intermediate > 0 ? "shared_expert.up_proj" : "experts.up_proj";
        st->co.adapt.layer_type = st->moe_layer;
        st->co.adapt.n_layer_type = 2;
        qx_cli_info(&st->cli, "note: %s has mixture-of-experts layers (%lld experts): --layer-type defaults to %s,%s (%s; "
                    "the dense layers' up_proj where there are any)", c->arch, (long long)c->n_experts, st->moe_layer[0],
                    st->moe_layer[1], c->shared_intermediate > 0 ? "the shared expert, which sees every token"
                                                                 : "the routed experts' inputs, the rows of all experts pooled per layer");
    }
    r = o->method == CALIB_ADAPT ? qx_calib_check(&st->co.adapt, c->hidden, &e) : QUAROT_OK;
    /* a bad value is usage; a block wider than this model's hidden is valid alone: cannot do */
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : o->block > c->hidden ? QX_EXIT_PROCESS : QX_EXIT_USAGE,
                           "%s", e.msg);
    memset(&rco, 0, sizeof rco);
    rco.rotation = o->method == CALIB_SPINQUANT ? QUAROT_ROTATION_HADAMARD : QUAROT_ROTATION_ADAPT;
    rco.block_size = o->method == CALIB_ADAPT && o->block > 0 ? o->block : 0;
    rco.no_r2 = o->method == CALIB_ADAPT || o->rot.no_r2;
    rco.online = o->method == CALIB_SPINQUANT && !o->rot.no_online;
    rco.r3 = rco.online && o->kv_bits < 16;
    if ((rc = qx_rotcheck_cli(&st->cli, o->model, NULL, c, &rco, o->rot.strict, st->dims, 8, &st->n_dims)) != QX_EXIT_OK) return rc;
    if (c->max_seq > 0 && o->w.seq_len > c->max_seq)
        return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "--seq-len %lld is longer than the model's context (%lld tokens)", (long long)o->w.seq_len,
                           (long long)c->max_seq);
    return QX_EXIT_OK;
}

/* --tokens FILE: the ids in stream windows (from the tokenizer's BOS when there is one) */
static int calibrate_windows_from_ids(calibrate_state* st) {
    const calibrate_opts* o = &st->o;
    qx_ppl_opts po;
    qx_err e;
    quarot_result r = qx_tokens_read(o->in.tokens, st->model.config.vocab, &st->ids, &st->n_ids, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s", e.msg);
    memset(&po, 0, sizeof po);
    po.seq_len = o->w.seq_len;
    po.max_windows = o->w.windows;
    po.bos = st->have_tok ? qx_tokenizer_window_bos(&st->tok) : -1;
    r = qx_windows_stream(&st->win, st->ids, st->n_ids, &po, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", o->in.tokens, e.msg);
    st->have_win = 1;
    return QX_EXIT_OK;
}

/* --text FILE: raw text or .jsonl records, cut by --windowing */
static int calibrate_windows_from_text(calibrate_state* st) {
    const calibrate_opts* o = &st->o;
    qx_err e;
    quarot_result r = qx_calib_text_load(o->text, &st->text, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT,
                           "%s", e.msg);
    st->have_text = 1;
    qx_cli_phase(&st->cli);
    r = qx_calib_windows(&st->text, &st->tok, o->w.windowing, o->w.seq_len, o->w.windows, &st->win, &e);
    if (r != QUAROT_OK) {
        if (r == QUAROT_ERR_INVALID_ARGUMENT)
            return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "%s: too short for one calibration window of %lld tokens (%s)", o->text,
                               (long long)o->w.seq_len, e.msg);
        return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: %s", o->text, e.msg);
    }
    st->have_win = 1;
    qx_cli_progress_end(&st->cli, "tokenizing");
    return QX_EXIT_OK;
}

/* The tokenizer (none needed with --tokens) and the calibration windows. */
static int calibrate_windows(calibrate_state* st) {
    const calibrate_opts* o = &st->o;
    qx_err e;
    quarot_result r = qx_tokenizer_for_model(&st->tok, o->model, o->in.tokenizer, st->model.config.vocab, st->tok_path, sizeof st->tok_path, &e);
    if (r != QUAROT_OK && (!o->in.tokens || r != QUAROT_ERR_NOT_FOUND)) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s", e.msg);
    st->have_tok = r == QUAROT_OK;
    if (!st->have_tok) snprintf(st->tok_path, sizeof st->tok_path, "none (--tokens; windows without BOS)");
    return o->in.tokens ? calibrate_windows_from_ids(st) : calibrate_windows_from_text(st);
}

/* The thread pool of --threads. */
static void calibrate_pool(calibrate_state* st) {
    calibrate_opts* o = &st->o;
    if (o->c.threads == 0) o->c.threads = qx_cpu_count();
    if (o->c.threads > 1) st->pool = qx_pool_create((int)o->c.threads);
    qx_pool_env(st->pool, &st->env);
}

/* Stage 1 on the thread pool, with the progress and the per-step loss on stderr. */
static int calibrate_run_stage1(calibrate_state* st) {
    calibrate_opts* o = &st->o;
    qx_calib_opts* co = &st->co;
    qx_err e;
    quarot_result r;
    co->env = &st->env;
    st->cp.cli = &st->cli;
    st->cp.steps = (int)o->steps;
    st->cp.quiet = o->c.quiet;
    co->on_window = on_window;
    co->on_optimize = on_optimize;
    co->user = &st->cp;
    co->adapt.progress = on_step;
    co->adapt.user_data = &st->cp;
    qx_cli_phase(&st->cli);
    r = qx_calib_stage1(&st->model, &st->win, co, &st->ctx, &st->stats, &e);
    if (r != QUAROT_OK) {
        int code = r == QUAROT_ERR_OUT_OF_MEMORY || r == QUAROT_ERR_INTERNAL ? QX_EXIT_INTERNAL
                 : r == QUAROT_ERR_NONFINITE || r == QUAROT_ERR_PARSE ? QX_EXIT_INPUT : QX_EXIT_PROCESS;
        return qx_cli_fail(&st->cli, code, "%s: %s", o->model, e.msg);
    }
    qx_cli_progress_end(&st->cli, "optimizer");
    if (st->model.config.n_experts > 0)
        qx_cli_info(&st->cli, "captured %lld linears (%s), %lld rows", (long long)st->stats.linears, st->stats.matched,
                    (long long)st->stats.rows);
    return QX_EXIT_OK;
}

/* The summary on stdout: what was captured, the optimizer, the loss before and after, time, memory. */
static void calibrate_report(const calibrate_state* st) {
    const calibrate_opts* o = &st->o;
    const quarot_model_config* c = &st->model.config;
    const quarot_adapt_context* ctx = &st->ctx;
    const qx_calib_stats* s = &st->stats;
    printf("calibrated %s (%s, %s, hidden %lld, %lld layers) on %s\n", o->model, st->model.source_format[0] ? st->model.source_format : "?",
           c->arch, (long long)c->hidden, (long long)c->n_layers, o->text);
    printf("  text       %lld windows, %lld tokens (%s%s, seq_len %lld), tokenizer %s\n", (long long)s->windows, (long long)s->tokens,
           st->text.jsonl ? "jsonl records" : o->w.windowing == QX_WINDOWING_STREAM ? "stream" : "docs", st->text.jsonl ? "" : " windowing",
           (long long)o->w.seq_len, st->tok_path);
    printf("  captured   %lld linears (%s), after norm fusion: %lld rows of %lld (at most %lld per linear)\n", (long long)s->linears, s->matched,
           (long long)s->rows, (long long)c->hidden, (long long)o->max_samples);
    printf("  optimizer  %s per-token symmetric, block %lld (Hadamard blocks of %lld, seed %llu), %d steps run of %d, best step %d\n",
           qx_calib_dtype(ctx), (long long)ctx->block, (long long)ctx->hadamard_block, (unsigned long long)ctx->seed, ctx->steps_run, ctx->steps,
           ctx->best_step);
    qx_rotcheck_summary("  ", st->dims, st->n_dims);
    printf("  loss       random Hadamard %.6e -> adapted %.6e (%+.2f%%)\n", ctx->start_loss, ctx->best_loss, 100.0 * qx_calib_reduction(ctx));
    printf("  time       forward %.2f s, optimizer %.2f s (%d thread%s)\n", s->forward_s, s->optimize_s, qx_pool_threads(st->pool),
           qx_pool_threads(st->pool) > 1 ? "s" : "");
    printf("  memory     peak resident %.1f MiB (layer-wise: one decoder layer in f32 at a time)\n", qx_lw_peak_rss_mib());
    fflush(stdout);
}

/* The context file (a temporary renamed into place). */
static int calibrate_save(calibrate_state* st) {
    qx_err e;
    quarot_result r = qx_calib_context_save(&st->ctx, st->o.output, st->o.c.force, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_OUTPUT, "%s", e.msg);
    printf("  wrote      %s (stage 2: quarot rotate MODEL OUT --rotation adapt --context %s)\n", st->o.output, st->o.output);
    return QX_EXIT_OK;
}

int qx_cmd_calibrate(int argc, char** argv) {
    calibrate_state st;
    int rc;
    calibrate_init(&st);
    rc = qx_opts_parse(&qx_cmd_calibrate_spec, &st.cli, argc, argv, &st.o);
    if (rc != QX_OPTS_RUN) return rc;   /* --help, or a usage error */
    st.cli.quiet = st.o.c.quiet;
    rc = calibrate_check_options(&st);
    if (!rc) {
        calibrate_stage1_opts(&st);
        rc = calibrate_load_model(&st);
    }
    if (!rc) rc = calibrate_check_model(&st);   /* the optimizer's checks, H's construction, --seq-len */
    if (!rc) rc = calibrate_windows(&st);       /* the tokenizer and the calibration windows */
    if (!rc) calibrate_pool(&st);
    if (!rc && st.o.method == CALIB_SPINQUANT) {   /* train, report, write ROT */
        rc = calibrate_spin(&st.cli, &st.o, &st.model, &st.win, st.tok_path, &st.env);
        calibrate_free(&st);
        return rc;
    }
    if (!rc) rc = calibrate_run_stage1(&st);    /* capture, then optimize R */
    if (!rc) {
        calibrate_report(&st);
        rc = calibrate_save(&st);
    }
    calibrate_free(&st);
    return rc;
}
