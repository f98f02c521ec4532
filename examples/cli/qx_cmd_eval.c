/* qx_cmd_eval.c - `quarot eval`: perplexity in FP32 and under fake quantization, without rotation
   and with QuaRot, as one table.

   The model is loaded once (qx_load_model), rotated once (qx_ek_quarot: R1 + R2 folded, online
   Hadamard before down_proj and across the heads before o_proj, R3 on q/k when the KV cache is
   quantized), the text is cut into windows once (qx_windows.h's stream or docs windowing), and then
   every (setting, variant) cell builds its quantized forward pass once and scores every window.
   Variants are the table's columns: "no rotation", "QuaRot" and, with --context (a stage-1 file) or
   --calib-text (stage 1 run here, qx_calib.h), "Adapt": Adapt Rotation stage 2 (qx_ek_rotate), the
   same recipe as the QuaRot column with R1 = H*R learned from activations. */
#include "eval/qx_calib.h"
#include "eval/qx_spin.h"
#include "cli/qx_cli.h"
#include "engine/qx_engine.h"
#include "support/qx_file.h"
#include "formats/qx_packed.h"
#include "cli/qx_cli_hooks.h"
#include "eval/qx_evalkit.h"
#include "model/qx_online.h"
#include "cli/qx_rotcheck.h"
#include "tokenizer/qx_tok_load.h"
#include "pipeline/qx_layerwise.h"
#include "support/qx_threads.h"
#include "eval/qx_wquant.h"
#include "formats/qx_load.h"
#include "cli/qx_opts.h"

#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

typedef struct eval_bits {
    int n;                         /* 0: not given */
    int v[8];
} eval_bits;

typedef struct eval_opts {
    const char *model, *text, *calib_quant_dtype, *calib_layers, *columns, *rows;
    eval_bits w, a, kv;
    int64_t group, calib_windows, a_group, k_group, v_group, nsamples, k_bits, v_bits;
    double clip, percdamp;
    int clip_given, group_fallback, engine, rotation, int8_down, no_fp32, migrate;
    qx_opts_common c;
    qx_opts_input in;
    qx_opts_rotation rot;
    qx_opts_quant q;
    qx_opts_gptq g;
    qx_opts_windowing win;
} eval_opts;

/* "4,8" -> bits, each 2..8 or 16 */
static int parse_bits(qx_cli* cli, const qx_opt* o, const char* opt, const char* s, void* base) {
    eval_bits* b = (eval_bits*)((char*)base + o->off);
    int n = 0;
    const char* p = s;
    for (;;) {
        char tmp[32];
        const char* comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int64_t v;
        if (len == 0 || len >= sizeof tmp || n >= 8) {
            qx_cli_fail(cli, QX_EXIT_USAGE, "%s: '%s' is not a list of bit widths (2..8 or 16, comma-separated)", opt, s);
            return 0;
        }
        memcpy(tmp, p, len);
        tmp[len] = '\0';
        if (!qx_cli_int(cli, opt, tmp, 2, 16, &v)) return 0;
        if (v > 8 && v != 16) {
            qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %lld bits: the quantizer takes 2..8 bits (16 = not quantized)", opt, (long long)v);
            return 0;
        }
        b->v[n++] = (int)v;
        if (!comma) break;
        p = comma + 1;
    }
    b->n = n;
    return 1;
}

/* --clip R in (0, 1], read with strtod alone (qx_cli_float's message would say [0, 1]) */
static int parse_clip(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    eval_opts* x = (eval_opts*)base;
    char* endp = NULL;
    (void)o;
    x->clip = strtod(v, &endp);
    x->clip_given = 1;
    if (endp == v || *endp != '\0' || !(x->clip > 0.0 && x->clip <= 1.0))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: '%s' is not a number in (0, 1]", name, v), 0;
    return 1;
}

static int check_positive(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    if (!(*(double*)((char*)base + o->off) > 0.0)) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: '%s' must be positive", name, v), 0;
    return 1;
}

static const qx_opt_choice eval_engines[] = {{"ref", 0}, {"int", 1}, {NULL, 0}};
static const qx_opt_choice eval_rotations[] = {{"hadamard", QX_ROT_HADAMARD}, {"random", QX_ROT_RANDOM}, {"adapt", QX_ROT_ADAPT},
                                               {"learned", QX_ROT_LEARNED}, {NULL, 0}};

static const qx_opt eval_table[] = {
    {QX_OPT_STRING, "--text", .arg = "FILE", QX_AT(eval_opts, text), .help = "evaluation text (required unless --tokens)"},
    {QX_OPT_CUSTOM, "--w-bits", .arg = "N[,N..]", QX_AT(eval_opts, w), .fn = parse_bits, .ref = "--w_bits",
     .help = "weight bits (2..8, 16 = FP): per output channel, RTN unless --w-quant gptq"},
    {QX_OPT_CUSTOM, "--a-bits", .arg = "N[,N..]", QX_AT(eval_opts, a), .fn = parse_bits, .ref = "--a_bits",
     .help = "activation bits (2..8, 16 = FP): per token symmetric, at every decoder-linear input"},
    {QX_OPT_CUSTOM, "--kv-bits", .arg = "N[,N..]", QX_AT(eval_opts, kv), .fn = parse_bits,
     .help = "KV-cache bits (2..8, 16 = FP): per token per head asymmetric; sets K and V"
             "\nWithout any of the three: rows FP32, W4A4 and W8A4. With any: FP32 plus every combination of the lists (a part "
             "not given stays FP)."},
    {QX_OPT_INT, "--group-size", .arg = "N", QX_AT(eval_opts, group), .lo = 1, .hi = 1 << 24, .def = "per output channel",
     .ref = "--w_groupsize", .help = "weights per group of N input channels"},
    {QX_OPT_FLAG, "--group-fallback", QX_AT(eval_opts, group_fallback),
     .help = "with --group-size: linears whose input width is not whole groups stay FP32 instead of an error (as a GGUF "
             "Q4_0 / Q8_0 file of quarot quantize keeps them F16, llama.cpp's fallback)"},
    {QX_OPT_CUSTOM, "--clip", .arg = "R", .fn = parse_clip, .def = "1.0", .ref = "--a_clip_ratio, often 0.9",
     .help = "ACTIVATION clip ratio in (0, 1]; --w-clip is the weight clip search"},
    {QX_OPT_CHOICE, "--engine", QX_AT(eval_opts, engine), .choices = eval_engines, .def = "ref",
     .help = "who computes the perplexity: ref the fake-quantized reference forward pass; int the inference engine "
             "(examples/engine/: integer kernels, online hooks, quantized KV cache), which must agree within ~0.1%"},
    {QX_OPT_END}
};
static const qx_opt_group eval_group = {"options:", eval_table, NULL};

static const qx_opt eval_adapt_table[] = {
    {QX_OPT_INT, "--calib-windows", .arg = "N", QX_AT(eval_opts, calib_windows), .lo = 0, .hi = INT64_C(1) << 40, .def = "0 = all",
     .help = "stage 1 on the first N calibration windows only"},
    {QX_OPT_STRING, "--calib-quant-dtype", .arg = "T", QX_AT(eval_opts, calib_quant_dtype), .def = "int4",
     .help = "int4 or int8 (match the activation bits of the rows you look at)"},
    {QX_OPT_STRING, "--calib-layer-type", .arg = "L", QX_AT(eval_opts, calib_layers), .def = "up_proj",
     .help = "comma-separated layer_type patterns"},
    {QX_OPT_END}
};
static const qx_opt_group eval_adapt_group = {
    NULL, eval_adapt_table,
    "Or, with --calib-text FILE and no --context, stage 1 runs here on that text (.txt or .jsonl, as quarot calibrate) "
    "with calibrate's defaults (20 steps, up_proj, block -1, 2048 samples), --seed, --seq-len and --windowing of this "
    "command, and the tokenizer above; its loss (start with the random Hadamard, end with H*R) is printed too."};

static const qx_opt eval_gptq_table[] = {
    {QX_OPT_INT, "--nsamples", .arg = "N", QX_AT(eval_opts, nsamples), .lo = 1, .hi = 1 << 24, .def = "128", .ref = "--nsamples",
     .help = "GPTQ calibration windows, of --seq-len tokens, cut from --calib-text by --windowing"},
    {QX_OPT_FLOAT, "--percdamp", .arg = "R", QX_AT(eval_opts, percdamp), .flo = 0.0, .fhi = 1e6, .fn = check_positive, .def = "0.01",
     .ref = "--percdamp", .help = "GPTQ damping, fraction of mean diag(H)"},
    {QX_OPT_END}
};
static const qx_opt_group eval_gptq_group = {NULL, eval_gptq_table, NULL};

static const qx_opt eval_levers_table[] = {
    {QX_OPT_INT, "--a-group-size", .arg = "N", QX_AT(eval_opts, a_group), .lo = 1, .hi = 1 << 24, .def = "whole row",
     .ref = "--a_groupsize", .help = "activation groups of N channels"},
    {QX_OPT_INT, "--k-bits", .arg = "N", QX_AT(eval_opts, k_bits), .lo = 2, .hi = 16, .ref = "--k_bits",
     .help = "K cache bits (2..8, 16 = FP); overrides --kv-bits"},
    {QX_OPT_INT, "--v-bits", .arg = "N", QX_AT(eval_opts, v_bits), .lo = 2, .hi = 16, .ref = "--v_bits",
     .help = "V cache bits (2..8, 16 = FP); overrides --kv-bits"},
    {QX_OPT_INT, "--k-group-size", .arg = "N", QX_AT(eval_opts, k_group), .lo = 1, .hi = 1 << 24, .def = "head_dim",
     .ref = "--k_groupsize", .help = "K cache groups of N"},
    {QX_OPT_INT, "--v-group-size", .arg = "N", QX_AT(eval_opts, v_group), .lo = 1, .hi = 1 << 24, .def = "head_dim",
     .ref = "--v_groupsize", .help = "V cache groups of N"},
    {QX_OPT_FLAG, "--int8-down-proj", QX_AT(eval_opts, int8_down), .ref = "--int8_down_proj",
     .help = "down_proj input and weights at 8 bits"},
    {QX_OPT_END}
};
static const qx_opt_group eval_levers_group = {NULL, eval_levers_table, NULL};

static const qx_opt eval_columns_table[] = {
    {QX_OPT_CHOICE, "--rotation", .arg = "KIND", QX_AT(eval_opts, rotation), .choices = eval_rotations, .def = "hadamard",
     .help = "R1 of the rotated column: hadamard (random Hadamard), random (random orthogonal [--rotate_mode random]), adapt "
             "(Adapt Rotation only, = --columns none,adapt) or learned (the --rotations only, = --columns none,learned)"},
    {QX_OPT_STRING, "--columns", .arg = "LIST", QX_AT(eval_opts, columns),
     .def = "none and quarot, plus adapt with --context / --calib-text, learned with --rotations",
     .help = "columns to compute, comma-separated from none, quarot, adapt, learned"},
    {QX_OPT_STRING, "--rows", .arg = "LIST", QX_AT(eval_opts, rows),
     .help = "rows to compute instead of the combinations of --w/--a/--kv-bits, e.g. W4A4,W4A16,W8A8 or W4A4KV4 (16 = FP); FP32 "
             "first unless --no-fp32"},
    {QX_OPT_FLAG, "--no-fp32", QX_AT(eval_opts, no_fp32), .help = "skip the FP32 row (for sweeps that know it)"},
    {QX_OPT_FLAG, "--migrate", QX_AT(eval_opts, migrate),
     .help = "weight-only rows (A16): per-channel scale migration at each norm before the weights are quantized (needs "
             "--calib-text; see docs/algorithms.md section 7)"},
    {QX_OPT_END}
};
static const qx_opt_group eval_columns_group = {
    NULL, eval_columns_table,
    "After the perplexity table, one table per quantized weight setting and column sums up the quantization error of each "
    "linear type over the layers (layer-output error relative to ||x W^T||^2 on the calibration rows when there are any, "
    "and weight MSE)."};

const qx_opts_cmd qx_cmd_eval_spec = {
    .name = "eval",
    .synopsis = "MODEL --text FILE [options]",
    .about = "Perplexity of MODEL on the text FILE in FP32 and fake-quantized, without rotation and with QuaRot\n"
             "(random Hadamard R1 and R2 folded into the weights, norms fused, online Hadamard rotations before\n"
             "every down_proj and across the heads before every o_proj, run inside the forward pass; with\n"
             "--kv-bits also the q/k rotation after RoPE), printed as one table on stdout: one row per setting,\n"
             "one column per model variant, each column after the first with its change against no rotation.\n"
             "Perplexity = exp(mean negative log-likelihood over every scored token; --windowing tells which),\n"
             "log-softmax in double precision.\n",
    .operands = {{"MODEL", offsetof(eval_opts, model)}},
    .uses = {{&eval_group, 0, 0, NULL},
             {&qx_opts_input_group, offsetof(eval_opts, in), QX_INPUT_TOKENIZER | QX_INPUT_TOKENS | QX_INPUT_HOOKS, NULL},
             {&qx_opts_windowing_group, offsetof(eval_opts, win), 0, NULL},
             {&qx_opts_rotation_group, offsetof(eval_opts, rot), QX_ROTATION_SEED, NULL},
             {&qx_opts_common_group, offsetof(eval_opts, c), QX_COMMON_THREADS | QX_COMMON_QUIET_Q, NULL},
             {&qx_opts_rotation_group, offsetof(eval_opts, rot), QX_ROTATION_CONTEXT,
              "Adapt Rotation column (\"Adapt\"): Adapt Rotation stage 2 with the same R2 and online hooks as the\n"
              "QuaRot column, its R1 being H*R with R learned by stage 1 (quarot calibrate --help):"},
             {&eval_adapt_group, 0, 0, NULL},
             {&qx_opts_rotation_group, offsetof(eval_opts, rot), QX_ROTATION_ROTATIONS,
              "Learned column (\"learned\"): R1 and one R2 per layer learned by SpinQuant (quarot calibrate --method\n"
              "spinquant) with the same online hooks as the QuaRot column:"},
             {&qx_opts_gptq_group, offsetof(eval_opts, g), 0, "QuaRot's levers (fake_quant/main.py flag in brackets):"},
             {&eval_gptq_group, 0, 0, NULL},
             {&qx_opts_quant_group, offsetof(eval_opts, q), QX_QUANT_W_ASYM | QX_QUANT_W_CLIP | QX_QUANT_A_ASYM | QX_QUANT_KV_ASYM | QX_QUANT_KV_CLIP, NULL},
             {&eval_levers_group, 0, 0, NULL},
             {&qx_opts_rotation_group, offsetof(eval_opts, rot), QX_ROTATION_NO_ONLINE | QX_ROTATION_STRICT, NULL},
             {&eval_columns_group, 0, 0, NULL}},
    .epilog = "Weights, activations and the KV cache of the decoder layers are quantized; the embeddings, the\n"
              "final norm and lm_head stay FP32, as in QuaRot. Progress goes to stderr; the table to stdout.\n"
              "Memory (layer-wise): MODEL stays memory-mapped in its stored dtype and runs one decoder layer at\n"
              "a time (that layer converted to f32 when it runs, its mapped pages handed back after it); the\n"
              "QuaRot and Adapt variants are rotated layer by layer into temporary files in $TMPDIR (default\n"
              "/tmp; one model's size on disk each, removed once mapped) and run the same way. Peak memory is\n"
              "about the embeddings, final norm and lm_head (f32) + one decoder layer in f32 + the KV cache and\n"
              "activations of one window, never the whole model in f32; stderr reports the peak resident set.\n"
              "Exit codes: 0 ok, 1 usage, 2 input (model, tokenizer or text missing or malformed), 4 cannot\n"
              "evaluate as asked (e.g. a group size that does not divide the layer widths, text shorter than\n"
              "one window), 5 internal or out of memory.\n",
};

/* One column of the table: a model (and its online hooks). */
typedef struct eval_variant {
    const char* name;
    const qx_store* store;
    const quarot_online_list* hooks;   /* NULL: none */
} eval_variant;

typedef struct eval_progress {
    qx_cli* cli;
    int64_t before, total;
    char label[96];
} eval_progress;

static void on_window(void* user, int64_t done, int64_t total) {
    eval_progress* p = (eval_progress*)user;
    (void)total;
    qx_cli_progress(p->cli, p->before + done, p->total, p->label);
}

static void on_layer(void* user, int64_t layer, int64_t n_layers) {
    qx_cli_progress((qx_cli*)user, layer, n_layers, "QuaRot: layer");
}

static void on_layer_adapt(void* user, int64_t layer, int64_t n_layers) {
    qx_cli_progress((qx_cli*)user, layer, n_layers, "Adapt Rotation stage 2: layer");
}

static void on_layer_learned(void* user, int64_t layer, int64_t n_layers) {
    qx_cli_progress((qx_cli*)user, layer, n_layers, "learned rotations: layer");
}

static void on_calib_window(void* user, int64_t done, int64_t total) {
    qx_cli_progress((qx_cli*)user, done, total, "Adapt Rotation stage 1: calibration window");
}

/* A recipe (lines of text), the first line under `label`, the others indented. */
static void print_recipe(const char* label, const char* recipe) {
    const char* line = recipe;
    int first = 1;
    while (*line) {
        const char* nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        printf("%-10s %.*s\n", first ? label : "", (int)n, line);
        first = 0;
        line += n + (nl ? 1 : 0);
    }
}

static int has_setting(const qx_ek_setting* s, int n, const qx_ek_setting* x) {
    int i;
    for (i = 0; i < n; ++i)
        if (strcmp(s[i].label, x->label) == 0) return 1;
    return 0;
}

/* Quantized weights, once per (column, weight bits): the store and what the stage reported. */
#define EVAL_MAX_LIN 4096
typedef struct eval_qstore {
    int variant, w_bits, migrate;
    qx_store s;
    qx_wq_stats st;
    /* per linear type (q, k, v, o, gate, up, down): sums over layers */
    double err[8], err_rtn[8], ref[8], mse[8];
    int64_t n[8];
    int calibrated;
} eval_qstore;

typedef struct eval_qctx {
    qx_cli* cli;
    eval_qstore* q;
    const char* column;
    int quiet;
} eval_qctx;

static const char* const lin_types[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

static int lin_type(const char* name) {
    int k;
    if (strstr(name, "out_proj")) return 3;
    if (strstr(name, "fc1")) return 5;
    if (strstr(name, "fc2")) return 6;
    if (strstr(name, ".w1.")) return 4;   /* Mixtral's experts: gate, up, down */
    if (strstr(name, ".w3.")) return 5;
    if (strstr(name, ".w2.")) return 6;
    for (k = 0; k < 7; ++k)
        if (strstr(name, lin_types[k])) return k;
    return 7;
}

static quarot_result on_linear(void* user, const quarot_qlinear_report* r) {
    eval_qctx* x = (eval_qctx*)user;
    int k = lin_type(r->name);
    const char* short_name = strstr(r->name, "layers.") ? strstr(r->name, "layers.") + 7 : r->name;
    x->q->n[k]++;
    x->q->mse[k] += r->w_mse;
    if (r->rows > 0 && r->ref > 0) {
        x->q->err[k] += r->err / r->ref;
        x->q->err_rtn[k] += r->err_rtn / r->ref;
        x->q->calibrated = 1;
    }
    if (!x->quiet) {
        if (r->method == QUAROT_WQUANT_GPTQ)
            qx_cli_info(x->cli, "%s W%d: %s: GPTQ loss %.4e, output error %.4e of %.4e (RTN %.4e)%s", x->column, r->bits, short_name,
                        r->gptq_loss, r->err, r->ref, r->err_rtn, r->retries ? " (more damping)" : "");
        else
            qx_cli_info(x->cli, "%s W%d: %s: RTN weight MSE %.4e%s", x->column, r->bits, short_name, r->w_mse,
                        r->fallback ? " (dead input, all-zero Hessian: RTN instead of GPTQ)" : "");
    }
    return QUAROT_OK;
}

static void on_wq_layer(void* user, int64_t done, int64_t n) {
    eval_qctx* x = (eval_qctx*)user;
    if (!x->quiet) qx_cli_info(x->cli, "%s W%d: layer %lld/%lld quantized", x->column, x->q->w_bits, (long long)done, (long long)n);
}

/* "W4A4", "W4A4KV4", "W4A4K4V8" */
static void eval_label(qx_ek_setting* s, int kb, int vb) {
    char tail[24] = "";
    qx_ek_setting tmp = *s;
    tmp.kv_bits = 16;
    qx_ek_setting_label(&tmp);
    if (kb < 16 || vb < 16) {
        if (kb == vb) snprintf(tail, sizeof tail, "KV%d", kb);
        else snprintf(tail, sizeof tail, "K%dV%d", kb, vb);
        if (strcmp(tmp.label, "FP32") == 0) snprintf(tmp.label, sizeof tmp.label, "W16A16");
    }
    {   /* at most "W16A16" + "K16V16": far below the label's size; cut, never overflow */
        char full[sizeof tmp.label + sizeof tail] = "";
        snprintf(full, sizeof full, "%s%s", tmp.label, tail);
        memcpy(s->label, full, sizeof s->label - 1);
        s->label[sizeof s->label - 1] = '\0';
    }
}

/* ---- one run ------------------------------------------------------------------------------------ */

/* What one `quarot eval` reads, decides and builds, in the order it happens; eval_free frees it. */
typedef struct eval_state {
    qx_cli cli;
    eval_opts o;
    /* decided by the options (a packed MODEL replaces them with the file's own settings) */
    int gptq, k_sym, v_sym, any_kv;
    int want_col[4], columns_given;                   /* none, quarot, adapt, learned */
    qx_ek_setting settings[QX_EK_MAX_ROWS];           /* the rows */
    int k_of[QX_EK_MAX_ROWS], v_of[QX_EK_MAX_ROWS];   /* each row's K / V cache bits */
    int n_settings;
    int packed, packed_row;                           /* MODEL is a quarot-packed file: its settings and hooks decide */
    qx_packed_settings pst;
    /* the inputs */
    qx_store model;
    qx_pool* pool;
    quarot_env env;
    qx_tokenizer tok;
    char tok_path[4096];
    char* text;
    size_t text_len;
    int32_t* stream;
    int64_t n_stream;
    qx_windows win;                                   /* the evaluation windows, once for every cell */
    qx_windows gcw;                                   /* GPTQ's (and migration's) calibration windows */
    /* the columns */
    qx_store rot, adapt;
    quarot_online_list hooks, adapt_hooks;            /* QuaRot's (a packed file's own), Adapt's */
    quarot_adapt_context actx;                        /* stage 1: read from --context or run here */
    qx_calib_stats cst;
    qx_spin_rot spin;                                 /* the learned column's R1 / R2 (--rotations) */
    double spin_orth;                                 /* its orthogonality error before use */
    qx_store learned;
    quarot_online_list learned_hooks;
    char recipe[2048], adapt_recipe[2048], learned_recipe[2048];
    qx_rotcheck_dim rq[8], ra[8], rl[8];              /* what the QuaRot / Adapt / learned rotations build (no silent fallbacks) */
    int n_rq, n_ra, n_rl;
    eval_variant variants[QX_EK_MAX_COLS];
    int n_variants;
    /* the results */
    eval_qstore* qs;                                  /* quantized weights per (column, weight bits, migration) */
    int n_qs;
    qx_ek_table table;
    int have_model, have_tok, have_win, have_gcw, have_rot, have_adapt, have_learned;
} eval_state;

static void eval_init(eval_state* st) {
    memset(st, 0, sizeof *st);
    qx_cli_init(&st->cli, "eval", 0);
    st->o.w.v[0] = st->o.a.v[0] = st->o.kv.v[0] = 16;
    st->o.clip = 1.0;
    st->o.percdamp = 0.01;
    st->o.calib_quant_dtype = "int4";
    st->o.q.k_asym = st->o.q.v_asym = 1;
    qx_opts_rotation_init(&st->o.rot);
    qx_opts_windowing_init(&st->o.win);
    st->want_col[0] = st->want_col[1] = st->want_col[2] = st->want_col[3] = 1;
    st->packed_row = -1;
    quarot_online_list_init(&st->hooks, NULL);
    quarot_online_list_init(&st->adapt_hooks, NULL);
    quarot_online_list_init(&st->learned_hooks, NULL);
    quarot_adapt_context_init(&st->actx, NULL);
}

static void eval_free(eval_state* st) {
    int i;
    for (i = 0; i < st->n_qs; ++i) qx_store_free(&st->qs[i].s);
    free(st->qs);
    if (st->have_gcw) qx_windows_free(&st->gcw);
    qx_pool_destroy(st->pool);
    if (st->have_win) qx_windows_free(&st->win);
    free(st->stream);
    free(st->text);
    if (st->have_tok) qx_tokenizer_free(&st->tok);
    if (st->have_rot) qx_store_free(&st->rot);
    quarot_online_list_free(&st->hooks);
    if (st->have_adapt) qx_store_free(&st->adapt);
    quarot_online_list_free(&st->adapt_hooks);
    if (st->have_learned) qx_store_free(&st->learned);
    quarot_online_list_free(&st->learned_hooks);
    qx_spin_rot_free(&st->spin);
    quarot_adapt_context_free(&st->actx);
    if (st->have_model) qx_store_free(&st->model);
}

/* ---- the options ---------------------------------------------------------------------------- */

/* --columns none,quarot,adapt,learned (--rotation adapt: none and adapt; learned: none and learned) */
static int eval_parse_columns(eval_state* st) {
    const eval_opts* o = &st->o;
    const char* p = o->columns ? o->columns : o->rotation == QX_ROT_LEARNED ? "none,learned" : "none,adapt";
    st->want_col[0] = st->want_col[1] = st->want_col[2] = st->want_col[3] = 0;
    st->columns_given = 1;
    while (*p) {
        size_t n = strcspn(p, ",");
        if (n == 4 && strncmp(p, "none", 4) == 0) st->want_col[0] = 1;
        else if (n == 6 && strncmp(p, "quarot", 6) == 0) st->want_col[1] = 1;
        else if (n == 5 && strncmp(p, "adapt", 5) == 0) st->want_col[2] = 1;
        else if (n == 7 && strncmp(p, "learned", 7) == 0) st->want_col[3] = 1;
        else return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "--columns: '%s' is not a list of none, quarot, adapt, learned", o->columns);
        p += n;
        if (*p == ',') ++p;
    }
    if (st->want_col[2] && !o->rot.context && !o->g.calib_text)
        return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "the Adapt column needs --context FILE or --calib-text FILE");
    if (st->want_col[3] && !o->rot.rotations)
        return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "the learned column needs --rotations FILE (quarot calibrate --method spinquant writes one)");
    return QX_EXIT_OK;
}

/* --calib-layer-type: non-empty patterns of at most 127 bytes */
static int eval_check_layer_list(eval_state* st) {
    const char* c = st->o.calib_layers;
    size_t run = 0;
    for (;; ++c) {
        if (*c == ',' || *c == '\0') {
            if (run == 0 || run >= 128)
                return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "--calib-layer-type: '%s' is not a list of non-empty patterns (at most 127 bytes each)",
                                   st->o.calib_layers);
            run = 0;
            if (!*c) break;
        } else {
            ++run;
        }
    }
    return QX_EXIT_OK;
}

/* The usage errors, before any file is read. */
static int eval_check_options(eval_state* st) {
    eval_opts* o = &st->o;
    qx_cli* cli = &st->cli;
    int rc;
    st->k_sym = !o->q.k_asym;
    st->v_sym = !o->q.v_asym;
    if (!o->model) return qx_cli_fail(cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot eval MODEL --text FILE; see --help)");
    if (!o->text && !o->in.tokens) return qx_cli_fail(cli, QX_EXIT_USAGE, "no --text FILE (or --tokens FILE) given (see quarot eval --help)");
    if (o->text && o->in.tokens) return qx_cli_fail(cli, QX_EXIT_USAGE, "--text and --tokens both give the evaluation tokens: choose one");
    if (o->in.tokens && o->win.windowing == QX_WINDOWING_DOCS) return qx_cli_fail(cli, QX_EXIT_USAGE, "--tokens has no documents: use --windowing stream");
    if (o->in.tokens) o->text = o->in.tokens;
    if ((o->k_bits > 8 && o->k_bits != 16) || (o->v_bits > 8 && o->v_bits != 16))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--k-bits / --v-bits: the quantizer takes 2..8 bits (16 = not quantized)");
    st->gptq = o->g.w_quant == QX_WQ_GPTQ;
    if (o->migrate && !o->g.calib_text)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--migrate needs --calib-text FILE (the scales are chosen on calibration rows)");
    if (st->gptq && !o->g.calib_text)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--w-quant gptq needs --calib-text FILE (the calibration text for the Hessians)");
    if (!st->gptq && (o->g.act_order || o->percdamp != 0.01 || (o->nsamples && !o->migrate)))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--nsamples / --act-order / --percdamp are GPTQ options: add --w-quant gptq");
    if ((o->columns || o->rotation == QX_ROT_ADAPT || o->rotation == QX_ROT_LEARNED) && (rc = eval_parse_columns(st)) != QX_EXIT_OK)
        return rc;
    if (o->rot.context && o->g.calib_text && !st->gptq)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--context and --calib-text both give the Adapt column its R: choose one");
    if (!o->g.calib_text && (o->calib_windows || o->calib_layers || strcmp(o->calib_quant_dtype, "int4") != 0))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--calib-windows / --calib-quant-dtype / --calib-layer-type need --calib-text");
    if (o->calib_layers) return eval_check_layer_list(st);
    return QX_EXIT_OK;
}

/* ---- the rows ------------------------------------------------------------------------------- */

/* One more row, unless it is there already (duplicates fold into the rows already there). */
static int eval_add_row(eval_state* st, const qx_ek_setting* s) {
    if (has_setting(st->settings, st->n_settings, s)) return QX_EXIT_OK;
    if (st->n_settings >= QX_EK_MAX_ROWS) return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "too many settings (at most %d rows)", QX_EK_MAX_ROWS);
    st->settings[st->n_settings++] = *s;
    return QX_EXIT_OK;
}

static void eval_setting(qx_ek_setting* s, int w_bits, int a_bits, int kv_bits) {
    s->w_bits = w_bits;
    s->a_bits = a_bits;
    s->kv_bits = kv_bits;
    qx_ek_setting_label(s);
}

/* --rows W4A4,W4A16,W4A4KV4 */
static int eval_rows_from_list(eval_state* st) {
    const eval_opts* o = &st->o;
    const char* p = o->rows;
    int rc;
    if (o->w.n || o->a.n || o->kv.n) return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "--rows replaces --w-bits / --a-bits / --kv-bits: give one or the other");
    while (*p) {
        qx_ek_setting s;
        int wb = 0, ab = 0, kvb = 16, used = 0, used2 = 0;
        size_t n = strcspn(p, ",");
        if (sscanf(p, "W%dA%d%n", &wb, &ab, &used) != 2 || (used < (int)n && sscanf(p + used, "KV%d%n", &kvb, &used2) != 1) ||
            used + used2 != (int)n || wb < 2 || ab < 2 || kvb < 2 || (wb > 8 && wb != 16) || (ab > 8 && ab != 16) || (kvb > 8 && kvb != 16))
            return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "--rows: '%.*s' is not a setting like W4A4, W4A16 or W4A4KV4 (bits 2..8 or 16)", (int)n, p);
        eval_setting(&s, wb, ab, kvb);
        if ((rc = eval_add_row(st, &s)) != QX_EXIT_OK) return rc;
        p += n;
        if (*p == ',') ++p;
    }
    return QX_EXIT_OK;
}

/* Every combination of --w-bits x --a-bits x --kv-bits (a list not given: FP) */
static int eval_rows_from_bits(eval_state* st) {
    eval_opts* o = &st->o;
    int i, j, k, rc;
    if (!o->w.n) o->w.n = 1;
    if (!o->a.n) o->a.n = 1;
    if (!o->kv.n) o->kv.n = 1;
    for (i = 0; i < o->w.n; ++i)
        for (j = 0; j < o->a.n; ++j)
            for (k = 0; k < o->kv.n; ++k) {
                qx_ek_setting s;
                eval_setting(&s, o->w.v[i], o->a.v[j], o->kv.v[k]);
                if ((rc = eval_add_row(st, &s)) != QX_EXIT_OK) return rc;
            }
    return QX_EXIT_OK;
}

/* The rows: FP32 first, then W4A4 and W8A4 or the settings asked for; each row's K / V bits
   (--k-bits / --v-bits override the row's KV bits); --no-fp32 drops row 0. */
static int eval_rows(eval_state* st) {
    const eval_opts* o = &st->o;
    int i, rc;
    eval_setting(&st->settings[0], 16, 16, 16);
    st->n_settings = 1;
    if (o->rows) {
        if ((rc = eval_rows_from_list(st)) != QX_EXIT_OK) return rc;
    } else if (!o->w.n && !o->a.n && !o->kv.n && !o->k_bits && !o->v_bits) {
        eval_setting(&st->settings[st->n_settings++], 4, 4, 16);
        eval_setting(&st->settings[st->n_settings++], 8, 4, 16);
    } else if ((rc = eval_rows_from_bits(st)) != QX_EXIT_OK) {
        return rc;
    }
    for (i = 0; i < st->n_settings; ++i) {
        const qx_ek_setting* s = &st->settings[i];
        int q_any = s->w_bits < 16 || s->a_bits < 16 || s->kv_bits < 16 || i > 0;
        st->k_of[i] = q_any && o->k_bits ? (int)o->k_bits : s->kv_bits;
        st->v_of[i] = q_any && o->v_bits ? (int)o->v_bits : s->kv_bits;
        if (i > 0 && (o->k_bits || o->v_bits)) eval_label(&st->settings[i], st->k_of[i], st->v_of[i]);
        if (st->k_of[i] < 16 || st->v_of[i] < 16) st->any_kv = 1;
    }
    if (o->no_fp32) {   /* drop the FP32 row (row 0) */
        memmove(st->settings, st->settings + 1, (size_t)(st->n_settings - 1) * sizeof st->settings[0]);
        memmove(st->k_of, st->k_of + 1, (size_t)(st->n_settings - 1) * sizeof st->k_of[0]);
        memmove(st->v_of, st->v_of + 1, (size_t)(st->n_settings - 1) * sizeof st->v_of[0]);
        st->n_settings--;
        if (st->n_settings == 0) return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "--no-fp32 leaves no row: give --w-bits / --a-bits / --kv-bits");
    }
    return QX_EXIT_OK;
}

/* ---- the model ------------------------------------------------------------------------------ */

/* MODEL is a quarot-packed file: read its settings (the file parsed again: the store holds only the
   dequantized weights) and its hook list (blob "quarot.online"); bits flags must be the file's or 16
   (the FP32 row: the file's weights dequantized, nothing else quantized), the rotation flags have
   nothing to do (it is rotated already). */
static int eval_packed_setup(eval_state* st) {
    const eval_opts* o = &st->o;
    const char* path = o->model;
    qx_cli* cli = &st->cli;
    qx_packed_settings* ps = &st->pst;
    double clip = o->clip_given ? o->clip : 0.0;
    qx_map m;
    qx_packed_file f;
    qx_err e;
    quarot_result r;
    const char* text;
    size_t n = 0;
    char msg[256];
    int i;
    if (o->in.hooks) return qx_cli_fail(cli, QX_EXIT_PROCESS, "--hooks: %s carries its online hooks in its metadata", path);
    if (st->columns_given && (st->want_col[1] || st->want_col[2] || st->want_col[3]))
        return qx_cli_fail(cli, QX_EXIT_PROCESS, "--columns: %s is a packed file, rotated already (its one column is the file)", path);
    if (o->rows) return qx_cli_fail(cli, QX_EXIT_PROCESS, "--rows: %s is a packed file: its one row is the file's setting", path);
    r = qx_map_file(path, &m, &e);
    if (r == QUAROT_OK) {
        r = qx_packed_parse(m.addr, m.len, path, &f, &e);
        if (r == QUAROT_OK) { *ps = f.settings; qx_packed_file_free(&f); }
        qx_unmap(&m);
    }
    if (r != QUAROT_OK) return qx_cli_fail(cli, qx_cli_exit_for(r), "%s", e.msg);
    for (i = 0; i < o->w.n; ++i)
        if (o->w.v[i] != ps->w_bits && o->w.v[i] != 16)
            return qx_cli_fail(cli, QX_EXIT_PROCESS, "--w-bits %d contradicts %s's quarot.weight.bits %d", o->w.v[i], path, ps->w_bits);
    for (i = 0; i < o->a.n; ++i)
        if (o->a.v[i] != ps->a_bits && o->a.v[i] != 16)
            return qx_cli_fail(cli, QX_EXIT_PROCESS, "--a-bits %d contradicts %s's quarot.act.bits %d", o->a.v[i], path, ps->a_bits);
    for (i = 0; i < o->kv.n; ++i)
        if ((o->kv.v[i] != ps->k_bits || o->kv.v[i] != ps->v_bits) && o->kv.v[i] != 16)
            return qx_cli_fail(cli, QX_EXIT_PROCESS, "--kv-bits %d contradicts %s's quarot.k.bits %d / quarot.v.bits %d", o->kv.v[i], path,
                               ps->k_bits, ps->v_bits);
    if (o->group && o->group != ps->w_group_size)
        return qx_cli_fail(cli, QX_EXIT_PROCESS, "--group-size %lld contradicts %s's quarot.weight.group_size %lld", (long long)o->group, path,
                           (long long)ps->w_group_size);
    if (clip > 0.0 && fabs(clip - ps->a_clip) > 1e-6)
        return qx_cli_fail(cli, QX_EXIT_PROCESS, "--clip %g contradicts %s's quarot.act.clip_ratio %g", clip, path, ps->a_clip);
    text = (const char*)qx_store_get_blob(&st->model, "quarot.online", &n);
    msg[0] = '\0';
    r = text && n ? quarot_online_read(&st->hooks, text, n, msg, sizeof msg) : QUAROT_OK;   /* "": no hooks */
    if (r != QUAROT_OK) return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: metadata quarot.online: %s", path, msg[0] ? msg : quarot_result_string(r));
    if (st->hooks.count) qx_cli_info(cli, "online hooks: %lld from %s's metadata, applied in every forward pass", (long long)st->hooks.count, path);
    return QX_EXIT_OK;
}

/* A packed file's rows: FP32 (the file's weights dequantized, nothing else quantized; --no-fp32
   drops it) and the file's own setting; one column, the file as it is (rotated already). The
   quantizer options become the file's. */
static void eval_use_packed_settings(eval_state* st) {
    const qx_packed_settings* ps = &st->pst;
    eval_opts* o = &st->o;
    int row;
    st->packed = 1;
    st->want_col[0] = 1;
    st->want_col[1] = st->want_col[2] = st->want_col[3] = 0;
    st->n_settings = 0;
    if (!o->no_fp32) {
        eval_setting(&st->settings[0], 16, 16, 16);
        st->k_of[0] = st->v_of[0] = 16;
        st->n_settings = 1;
    }
    row = st->packed_row = st->n_settings;
    eval_setting(&st->settings[row], ps->w_bits, ps->a_bits, ps->k_bits == ps->v_bits ? ps->k_bits : 16);
    st->k_of[row] = ps->k_bits;
    st->v_of[row] = ps->v_bits;
    if (ps->k_bits != ps->v_bits) eval_label(&st->settings[row], st->k_of[row], st->v_of[row]);
    st->n_settings++;
    st->any_kv = ps->k_bits < 16 || ps->v_bits < 16;
    o->group = ps->w_group_size;
    o->clip = ps->a_clip;
    o->q.w_asym = ps->w_asym;
    o->q.a_asym = ps->a_asym;
    o->a_group = ps->a_group_size;
    o->k_group = ps->k_group_size;
    o->v_group = ps->v_group_size;
    st->k_sym = !ps->k_asym;
    st->v_sym = !ps->v_asym;
    o->q.k_clip = ps->k_clip;
    o->q.v_clip = ps->v_clip;
    st->gptq = 0;
}

/* The text checked for, the model loaded (each failure is one line naming the file), the thread
   pool, and the model's online hooks (a packed file: its settings and hooks). */
static int eval_load_model(eval_state* st) {
    eval_opts* o = &st->o;
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    int rc;
    /* opened without blocking (a FIFO with no writer would hang a plain open); read later */
    int tf = open(o->text, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (tf < 0) return qx_cli_fail(&st->cli, QX_EXIT_INPUT, "%s: cannot open the text: %s", o->text, strerror(errno));
    close(tf);
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(o->model, &lo, &st->model, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_input(r), "%s", e.msg);
    if (o->c.threads == 0) o->c.threads = qx_cpu_count();
    if (o->c.threads > 1) st->pool = qx_pool_create((int)o->c.threads);
    qx_pool_env(st->pool, &st->env);
    st->have_model = 1;
    if (strcmp(st->model.source_format, "quarot-packed") != 0)
        return qx_cli_model_hooks(&st->cli, &st->model, o->model, o->in.hooks);   /* the model's own hooks */
    if ((rc = eval_packed_setup(st)) != QX_EXIT_OK) return rc;
    eval_use_packed_settings(st);
    return QX_EXIT_OK;
}

/* No silent fallbacks: what the rotated columns build, warned (or refused with --strict). */
static int eval_rotcheck(eval_state* st) {
    const eval_opts* o = &st->o;
    qx_rotcheck_opts rco;
    int rc;
    memset(&rco, 0, sizeof rco);
    rco.online = !o->rot.no_online;
    rco.r3 = st->any_kv;
    if (st->want_col[1]) {
        rco.rotation = o->rotation == QX_ROT_RANDOM ? QUAROT_ROTATION_RANDOM_ORTHOGONAL : QUAROT_ROTATION_HADAMARD;
        if ((rc = qx_rotcheck_cli(&st->cli, o->model, "QuaRot", &st->model.config, &rco, o->rot.strict, st->rq, 8, &st->n_rq)) != QX_EXIT_OK)
            return rc;
    }
    if (st->want_col[3]) {
        rco.rotation = QUAROT_ROTATION_MATRIX;
        rco.no_r2 = st->spin.r2 == NULL;
        if ((rc = qx_rotcheck_cli(&st->cli, o->model, "learned", &st->model.config, &rco, o->rot.strict, st->rl, 8, &st->n_rl)) != QX_EXIT_OK)
            return rc;
        rco.no_r2 = 0;
    }
    if (st->want_col[2] && (o->rot.context || o->g.calib_text)) {
        rco.rotation = QUAROT_ROTATION_ADAPT;
        rco.block_size = o->rot.context ? st->actx.block : 0;   /* stage 1 here: the full hidden size */
        return qx_rotcheck_cli(&st->cli, o->model, "Adapt", &st->model.config, &rco, o->rot.strict, st->ra, 8, &st->n_ra);
    }
    return QX_EXIT_OK;
}

/* The learned rotations (--rotations, with the learned column): read and checked against this model. */
static int eval_load_learned(eval_state* st) {
    const eval_opts* o = &st->o;
    char digest[QX_DIGEST_LEN];
    qx_err e;
    quarot_result r;
    if (!o->rot.rotations) st->want_col[3] = 0;
    if (!st->want_col[3]) return QX_EXIT_OK;
    r = qx_spin_load(o->rot.rotations, &st->spin, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    r = qx_spin_model_digest(o->model, digest, &e);
    if (r == QUAROT_OK) r = qx_spin_check(&st->spin, &st->model.config, digest, &st->spin_orth, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s: %s: %s", o->model, o->rot.rotations,
                           e.msg);
    return QX_EXIT_OK;
}

/* Before any work: the stage-1 context read (and validated), the learned rotations, the rotations checked, --seq-len
   against the model's context, and every quantized linear's input width split into whole groups
   (with --int8-down-proj, down_proj is per channel: its width, intermediate, need not). */
static int eval_check_model(eval_state* st) {
    const eval_opts* o = &st->o;
    const quarot_model_config* c = &st->model.config;
    qx_err e;
    int rc;
    if (o->rot.context) {
        quarot_result r = qx_calib_context_load(o->rot.context, &st->actx, &e);
        if (r != QUAROT_OK) return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    }
    if ((rc = eval_load_learned(st)) != QX_EXIT_OK) return rc;
    if ((rc = eval_rotcheck(st)) != QX_EXIT_OK) return rc;
    if (c->max_seq > 0 && o->win.seq_len > c->max_seq)
        return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "--seq-len %lld is longer than the model's context (%lld tokens)", (long long)o->win.seq_len,
                           (long long)c->max_seq);
    if (o->group && !o->group_fallback) {
        int64_t hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
        if (c->hidden % o->group || (!o->int8_down && c->intermediate % o->group) || (c->n_heads * hd) % o->group)
            return qx_cli_fail(&st->cli, QX_EXIT_PROCESS,
                               "--group-size %lld does not divide the layer widths (hidden %lld, intermediate %lld, heads x head_dim %lld)",
                               (long long)o->group, (long long)c->hidden, (long long)c->intermediate, (long long)(c->n_heads * hd));
    }
    return QX_EXIT_OK;
}

/* ---- the text ------------------------------------------------------------------------------- */

/* The tokenizer (none with --tokens when the model has none) and the text or the token ids. */
static int eval_read_input(eval_state* st) {
    const eval_opts* o = &st->o;
    qx_err e;
    quarot_result r = qx_tokenizer_for_model(&st->tok, o->model, o->in.tokenizer, st->model.config.vocab, st->tok_path, sizeof st->tok_path, &e);
    if (r != QUAROT_OK && (!o->in.tokens || r != QUAROT_ERR_NOT_FOUND)) return qx_cli_fail(&st->cli, qx_cli_exit_input(r), "%s", e.msg);
    st->have_tok = r == QUAROT_OK;
    if (!st->have_tok) snprintf(st->tok_path, sizeof st->tok_path, "none (--tokens; windows without BOS)");
    if (!st->have_tok && o->g.calib_text) return qx_cli_fail(&st->cli, QX_EXIT_INPUT, "--calib-text needs a tokenizer: %s", e.msg);
    if (o->in.tokens) r = qx_tokens_read(o->in.tokens, st->model.config.vocab, &st->stream, &st->n_stream, &e);
    else r = qx_ek_read_file(o->text, &st->text, &st->text_len, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_input(r), "%s", e.msg);
    return QX_EXIT_OK;
}

/* The windows, once for every cell: the token ids as given, the text encoded once (stream), or
   its documents (docs). */
static int eval_windows(eval_state* st) {
    const eval_opts* o = &st->o;
    qx_ppl_opts po;
    qx_err e;
    quarot_result r;
    memset(&po, 0, sizeof po);
    po.seq_len = o->win.seq_len;
    po.max_windows = o->win.windows;
    po.bos = st->have_tok ? qx_tokenizer_window_bos(&st->tok) : -1;
    qx_cli_phase(&st->cli);
    if (o->in.tokens) {
        r = qx_windows_stream(&st->win, st->stream, st->n_stream, &po, &e);
    } else if (o->win.windowing == QX_WINDOWING_STREAM) {
        int64_t cap = qx_tokenizer_max_tokens(st->text_len);
        st->stream = (int32_t*)malloc((size_t)cap * sizeof *st->stream);
        if (!st->stream) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "%s: out of memory", o->text);
        r = qx_tokenizer_encode(&st->tok, st->text, st->text_len, 0, 0, st->stream, cap, &st->n_stream, &e);
        if (r == QUAROT_OK) r = qx_windows_stream(&st->win, st->stream, st->n_stream, &po, &e);
    } else {
        r = qx_windows_docs(&st->win, &st->tok, st->text, st->text_len, &po, &e);
    }
    if (r != QUAROT_OK) {
        if (r == QUAROT_ERR_INVALID_ARGUMENT)
            return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "%s: too short for one window of %lld tokens (%s)", o->text, (long long)o->win.seq_len, e.msg);
        return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: %s", o->text, e.msg);
    }
    st->have_win = 1;
    qx_cli_progress_end(&st->cli, "tokenizing");
    return QX_EXIT_OK;
}

/* ---- the rotated columns -------------------------------------------------------------------- */

/* QuaRot, once (with the QuaRot column). */
static int eval_rotate_quarot(eval_state* st) {
    const eval_opts* o = &st->o;
    qx_err e;
    quarot_result r;
    if (!st->want_col[1]) return QX_EXIT_OK;
    qx_cli_phase(&st->cli);
    r = qx_ek_rotate_ex(&st->model, (uint64_t)o->rot.seed, NULL, st->any_kv, !o->rot.no_online,
                        o->rotation == QX_ROT_RANDOM ? QUAROT_ROTATION_RANDOM_ORTHOGONAL : QUAROT_ROTATION_HADAMARD, &st->rot, &st->hooks,
                        st->recipe, sizeof st->recipe, on_layer, &st->cli, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: %s", o->model, e.msg);
    st->have_rot = 1;
    qx_cli_progress_end(&st->cli, "QuaRot");
    return QX_EXIT_OK;
}

static int eval_load_calib_text(eval_state* st, qx_calib_text* ct) {
    qx_err e;
    quarot_result r = qx_calib_text_load(st->o.g.calib_text, ct, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT,
                           "%s", e.msg);
    return QX_EXIT_OK;
}

/* GPTQ's calibration windows (the same tokenizer, --seq-len and --windowing), also migration's. */
static int eval_calib_windows(eval_state* st) {
    eval_opts* o = &st->o;
    qx_calib_text ct;
    qx_err e;
    quarot_result r;
    int rc;
    if (!st->gptq && !o->migrate) return QX_EXIT_OK;
    if ((rc = eval_load_calib_text(st, &ct)) != QX_EXIT_OK) return rc;
    r = qx_calib_windows(&ct, &st->tok, o->win.windowing, o->win.seq_len, 0, &st->gcw, &e);
    qx_calib_text_free(&ct);
    if (r == QUAROT_ERR_INVALID_ARGUMENT)
        return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "%s: calibration text too short for one window of %lld tokens (%s)", o->g.calib_text,
                           (long long)o->win.seq_len, e.msg);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: calibration windows: %s", o->g.calib_text, e.msg);
    st->have_gcw = 1;
    if (!o->nsamples) o->nsamples = 128;
    if (st->gcw.n < o->nsamples)
        return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "%s: calibration text too short: %lld windows of %lld tokens, --nsamples %lld", o->g.calib_text,
                           (long long)st->gcw.n, (long long)o->win.seq_len, (long long)o->nsamples);
    return QX_EXIT_OK;
}

/* Stage 1's options: calibrate's defaults, this command's --seed and --calib-quant-dtype, and the
   --calib-layer-type patterns (pointers into *copy, at most 64). */
static int eval_stage1_opts(eval_state* st, qx_calib_opts* co, const char** plist, char** copy) {
    static const char* const def_layer[1] = {"up_proj"};
    const eval_opts* o = &st->o;
    int64_t n_pats = 0;
    char* p;
    memset(co, 0, sizeof *co);
    co->env = &st->env;
    co->on_window = on_calib_window;
    co->user = &st->cli;
    co->adapt.quant_dtype = o->calib_quant_dtype;
    co->adapt.seed = (uint64_t)o->rot.seed;
    co->adapt.layer_type = def_layer;
    co->adapt.n_layer_type = 1;
    if (!o->calib_layers) return QX_EXIT_OK;
    *copy = (char*)malloc(strlen(o->calib_layers) + 1);
    if (!*copy) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory");
    strcpy(*copy, o->calib_layers);
    for (p = *copy; p && n_pats < 64;) {
        char* comma = strchr(p, ',');
        if (comma) *comma = '\0';
        plist[n_pats++] = p;
        p = comma ? comma + 1 : NULL;
    }
    co->adapt.layer_type = plist;
    co->adapt.n_layer_type = n_pats;
    return QX_EXIT_OK;
}

/* Adapt Rotation stage 1 on --calib-text (with the Adapt column and no --context). */
static int eval_adapt_stage1(eval_state* st) {
    const eval_opts* o = &st->o;
    qx_calib_text ct;
    qx_windows cw;
    qx_calib_opts co;
    char* pats = NULL;
    const char* plist[64];
    qx_err e;
    quarot_result r;
    int rc;
    if (!o->g.calib_text || o->rot.context || !st->want_col[2]) return QX_EXIT_OK;
    if ((rc = eval_load_calib_text(st, &ct)) != QX_EXIT_OK) return rc;
    r = qx_calib_windows(&ct, &st->tok, o->win.windowing, o->win.seq_len, o->calib_windows, &cw, &e);
    qx_calib_text_free(&ct);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: calibration windows: %s",
                           o->g.calib_text, e.msg);
    rc = eval_stage1_opts(st, &co, plist, &pats);
    if (rc == QX_EXIT_OK) {
        r = qx_calib_check(&co.adapt, st->model.config.hidden, &e);
        if (r != QUAROT_OK) rc = qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_USAGE, "%s", e.msg);
    }
    if (rc == QX_EXIT_OK) {
        qx_cli_phase(&st->cli);
        r = qx_calib_stage1(&st->model, &cw, &co, &st->actx, &st->cst, &e);
        if (r != QUAROT_OK)
            rc = qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY || r == QUAROT_ERR_INTERNAL ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS,
                             "%s: Adapt Rotation stage 1 on %s: %s", o->model, o->g.calib_text, e.msg);
    }
    free(pats);
    qx_windows_free(&cw);
    if (rc != QX_EXIT_OK) return rc;
    qx_cli_progress_end(&st->cli, "Adapt Rotation stage 1");
    qx_cli_info(&st->cli, "Adapt Rotation stage 1: loss %.6e (random Hadamard) -> %.6e (%+.2f%%), %lld rows", st->actx.start_loss,
                st->actx.best_loss, 100.0 * qx_calib_reduction(&st->actx), (long long)st->actx.rows);
    return QX_EXIT_OK;
}

/* Adapt Rotation stage 2, once: R1 = H*R, the rest as the QuaRot column. */
static int eval_adapt_stage2(eval_state* st) {
    const eval_opts* o = &st->o;
    qx_err e;
    quarot_result r;
    if (!st->actx.matrix || !st->want_col[2]) return QX_EXIT_OK;
    qx_cli_phase(&st->cli);
    r = qx_ek_rotate_ex(&st->model, (uint64_t)o->rot.seed, &st->actx, st->any_kv, !o->rot.no_online, QUAROT_ROTATION_HADAMARD, &st->adapt,
                        &st->adapt_hooks, st->adapt_recipe, sizeof st->adapt_recipe, on_layer_adapt, &st->cli, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", o->model, e.msg);
    st->have_adapt = 1;
    qx_cli_progress_end(&st->cli, "Adapt Rotation stage 2");
    return QX_EXIT_OK;
}

/* The learned column, once: R1 and R2 from --rotations, the rest as the QuaRot column. */
static int eval_rotate_learned(eval_state* st) {
    const eval_opts* o = &st->o;
    qx_err e;
    quarot_result r;
    if (!st->spin.r1 || !st->want_col[3]) return QX_EXIT_OK;
    qx_cli_phase(&st->cli);
    r = qx_spin_rotate(&st->model, &st->spin, st->any_kv, !o->rot.no_online, &st->learned, &st->learned_hooks, st->learned_recipe,
                       sizeof st->learned_recipe, on_layer_learned, &st->cli, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", o->model, e.msg);
    st->have_learned = 1;
    qx_cli_progress_end(&st->cli, "learned rotations");
    return QX_EXIT_OK;
}

static void eval_add_variant(eval_state* st, const char* name, const qx_store* store, const quarot_online_list* hooks) {
    st->variants[st->n_variants].name = name;
    st->variants[st->n_variants].store = store;
    st->variants[st->n_variants++].hooks = hooks;
}

/* The columns (Adapt Rotation: one more variant, its store and hooks, nothing else), room for
   their quantized weights, and the empty table. */
static int eval_columns(eval_state* st) {
    int i, j;
    if (st->want_col[0]) eval_add_variant(st, st->packed ? "packed" : "no rotation", &st->model, st->packed && st->hooks.count ? &st->hooks : NULL);
    if (st->have_rot) eval_add_variant(st, "QuaRot", &st->rot, &st->hooks);
    if (st->have_adapt) eval_add_variant(st, "Adapt", &st->adapt, &st->adapt_hooks);
    if (st->have_learned) eval_add_variant(st, "learned", &st->learned, &st->learned_hooks);
    if (st->n_variants == 0) return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "--columns: no column to compute");
    st->qs = (eval_qstore*)calloc((size_t)(st->n_variants * st->n_settings), sizeof *st->qs);
    if (!st->qs) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory");
    qx_ek_table_init(&st->table, "perplexity");
    for (j = 0; j < st->n_variants; ++j) qx_ek_table_add_col(&st->table, st->variants[j].name);
    for (i = 0; i < st->n_settings; ++i) qx_ek_table_add_row(&st->table, st->settings[i].label);
    return QX_EXIT_OK;
}

/* ---- the cells ------------------------------------------------------------------------------ */

/* Row i's fake quantization, and which weights the quantization stage makes in a copy of the
   store (qx_wq_cell_staged; returned) rather than the forward pass's RTN as it loads each layer. */
static int eval_row_quant(const eval_state* st, int i, qx_fake_quant_opts* q, qx_wq_cell* cell) {
    const eval_opts* o = &st->o;
    qx_ek_setting kv = st->settings[i];
    int stage_w;
    kv.kv_bits = 16;
    qx_ek_setting_quant(&kv, o->group, o->clip, q);
    memset(cell, 0, sizeof *cell);
    cell->w_bits = st->settings[i].w_bits;
    cell->packed = st->packed;
    cell->gptq = st->gptq;
    cell->clip_search = o->q.w_clip;
    cell->migrate = o->migrate && st->settings[i].a_bits >= 16;   /* weight-only rows only */
    cell->int8_down_proj = o->int8_down;
    cell->group_fallback = o->group_fallback;
    stage_w = qx_wq_cell_staged(cell);
    if (stage_w || st->packed) {   /* a packed file's weights are its codes already: not quantized again */
        q->w_bits = 0;
        q->w_group = 0;
    } else if (q->w_bits) {
        q->w_asym = o->q.w_asym;
        q->w_group = o->group;
    }
    if (q->a_bits) {
        q->a_asym = o->q.a_asym;
        q->a_group = o->a_group;
        if (o->int8_down) q->a_down_bits = 8;
    }
    q->k_bits = st->k_of[i] < 16 ? st->k_of[i] : 0;
    q->v_bits = st->v_of[i] < 16 ? st->v_of[i] : 0;
    q->k_group = o->k_group;
    q->v_group = o->v_group;
    q->k_sym = st->k_sym;
    q->v_sym = st->v_sym;
    q->k_clip = (float)o->q.k_clip;
    q->v_clip = (float)o->q.v_clip;
    return stage_w;
}

/* The quantization stage on x (a copy of column j's store) at row i's weight bits. */
static int eval_quantize_weights(eval_state* st, int i, int j, eval_qstore* x) {
    const eval_opts* o = &st->o;
    qx_wq_opts wo;
    eval_qctx qc;
    qx_err e;
    quarot_result r;
    memset(&wo, 0, sizeof wo);
    wo.desc.method = st->gptq ? QUAROT_WQUANT_GPTQ : QUAROT_WQUANT_RTN;
    wo.desc.weight.bits = st->settings[i].w_bits;
    wo.desc.weight.asymmetric = o->q.w_asym;
    wo.desc.weight.group_size = o->group;
    wo.desc.weight.clip_search = o->q.w_clip ? QUAROT_CLIP_SEARCH_LP : 0;
    wo.desc.percdamp = o->percdamp;
    wo.desc.act_order = o->g.act_order;
    wo.desc.int8_down_proj = o->int8_down;
    wo.desc.nsamples = o->nsamples;
    wo.desc.migrate = x->migrate;
    wo.desc.seq_len = o->win.seq_len;
    wo.desc.keep_indivisible = o->group_fallback;
    wo.desc.dead_fallback = 1;
    wo.desc.on_linear = on_linear;
    wo.desc.user_data = &qc;
    wo.hooks = st->variants[j].hooks;
    wo.calib = st->have_gcw ? &st->gcw : NULL;
    wo.env = &st->env;
    wo.on_layer = on_wq_layer;
    wo.user = &qc;
    qc.cli = &st->cli;
    qc.q = x;
    qc.column = st->variants[j].name;
    qc.quiet = o->c.quiet;
    r = qx_wq_quantize(&x->s, &wo, &x->st, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s, %s: weight quantization: %s",
                           st->settings[i].label, st->variants[j].name, e.msg);
    qx_cli_info(&st->cli, "%s W%d: %lld linears quantized by %s in %.1f s", st->variants[j].name, x->w_bits, (long long)x->st.linears,
                st->gptq ? "GPTQ" : "RTN", x->st.seconds);
    if (x->st.moe_note[0]) qx_cli_info(&st->cli, "%s W%d: %s", st->variants[j].name, x->w_bits, x->st.moe_note);
    return QX_EXIT_OK;
}

/* The quantized weights of (column j, row i's weight bits, migration): made once; *src becomes them. */
static int eval_staged_weights(eval_state* st, int i, int j, int migrate, const qx_store** src) {
    eval_qstore* x = NULL;
    int m;
    for (m = 0; m < st->n_qs; ++m)
        if (st->qs[m].variant == j && st->qs[m].w_bits == st->settings[i].w_bits && st->qs[m].migrate == migrate) x = &st->qs[m];
    if (!x) {
        int rc;
        x = &st->qs[st->n_qs];
        memset(x, 0, sizeof *x);
        x->variant = j;
        x->w_bits = st->settings[i].w_bits;
        x->migrate = migrate;
        if (qx_store_clone(*src, &x->s) != QUAROT_OK) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "copying the model: out of memory");
        st->n_qs++;
        if ((rc = eval_quantize_weights(st, i, j, x)) != QX_EXIT_OK) return rc;
    }
    *src = &x->s;
    return QX_EXIT_OK;
}

/* The inference engine scores the cell itself. RTN weights: the engine quantizes the store's
   weights at load (the same RTN as the reference) and runs its integer kernels on them; the
   stage's weights (GPTQ, clip search, migration, int8 down_proj) would not round-trip, so those run
   FP32 linears on them. A packed file's own row: its codes, settings and hooks. */
static int eval_score_engine(eval_state* st, int i, int j, const qx_store* src, const qx_fake_quant_opts* q, int stage_w, qx_ppl_result* res) {
    qx_fake_quant_opts qe = *q;
    qx_err e;
    quarot_result r;
    if (st->settings[i].w_bits < 16 && !stage_w) {
        qe.w_bits = st->settings[i].w_bits;
        qe.w_group = st->o.group;
    }
    r = st->packed && i == st->packed_row ? qx_engine_eval_packed(st->o.model, &st->win, NULL, res, &e)
                                          : qx_engine_eval_quant(src, st->variants[j].hooks, &qe, &st->win, NULL, res, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s, %s: engine: %s", st->settings[i].label,
                           st->variants[j].name, e.msg);
    return QX_EXIT_OK;
}

/* The reference forward pass, fake-quantized by q, over every window. */
static int eval_score_ref(eval_state* st, int i, int j, const qx_store* src, const qx_fake_quant_opts* q, eval_progress* prog, qx_ppl_result* res) {
    qx_ek_forward ef;
    qx_err e;
    quarot_result r = qx_ek_forward_init_env(&ef, src, st->variants[j].hooks, q, NULL, NULL, &st->env, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s, %s: %s", st->settings[i].label,
                           st->variants[j].name, e.msg);
    snprintf(prog->label, sizeof prog->label, "%s, %s: window", st->settings[i].label, st->variants[j].name);
    r = qx_eval_windows(&ef.f, &st->win, on_window, prog, res, &e);
    if (r == QUAROT_OK && qx_ek_forward_status(&ef) != QUAROT_OK) {
        r = qx_ek_forward_status(&ef);
        snprintf(e.msg, sizeof e.msg, "online rotation: %s", quarot_result_string(r));
    }
    qx_ek_forward_free(&ef);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s, %s: %s", st->settings[i].label,
                           st->variants[j].name, e.msg);
    return QX_EXIT_OK;
}

/* One cell: row i's setting on column j's model, its perplexity into the table. */
static int eval_cell(eval_state* st, int i, int j, const qx_fake_quant_opts* q, const qx_wq_cell* cell, int stage_w, eval_progress* prog) {
    qx_ppl_result res;
    double t0 = qx_now();
    const qx_store* src = st->variants[j].store;
    int rc;
    if (stage_w && (rc = eval_staged_weights(st, i, j, cell->migrate, &src)) != QX_EXIT_OK) return rc;
    rc = st->o.engine ? eval_score_engine(st, i, j, src, q, stage_w, &res) : eval_score_ref(st, i, j, src, q, prog, &res);
    if (rc != QX_EXIT_OK) return rc;
    st->table.v[i][j] = res.ppl;
    prog->before += st->win.n;
    if (!st->o.engine && qx_now() - st->cli.t0 >= 1.0)
        qx_cli_info(&st->cli, "%s, %s: perplexity %.4f (%.1f s)", st->settings[i].label, st->variants[j].name, res.ppl, qx_now() - t0);
    return QX_EXIT_OK;
}

/* Every cell: build the (quantized) forward once, score every window. */
static int eval_cells(eval_state* st) {
    eval_progress prog;
    int i, j, rc;
    qx_cli_phase(&st->cli);
    prog.cli = &st->cli;
    prog.total = (int64_t)st->n_settings * st->n_variants * st->win.n;
    prog.before = 0;
    for (i = 0; i < st->n_settings; ++i) {
        qx_fake_quant_opts q;
        qx_wq_cell cell;
        int stage_w = eval_row_quant(st, i, &q, &cell);
        for (j = 0; j < st->n_variants; ++j)
            if ((rc = eval_cell(st, i, j, &q, &cell, stage_w, &prog)) != QX_EXIT_OK) return rc;
    }
    qx_cli_progress_end(&st->cli, "evaluation");
    return QX_EXIT_OK;
}

/* ---- the report ----------------------------------------------------------------------------- */

/* The model, its tokenizer and hooks, the text and its windows. */
static void eval_print_inputs(const eval_state* st) {
    const eval_opts* o = &st->o;
    const quarot_model_config* c = &st->model.config;
    quarot_online_list ml;
    qx_err e;
    printf("model      %s: %s, %s, hidden %lld, intermediate %lld, %lld layers, %lld heads (%lld KV), vocab %lld\n", o->model,
           st->model.source_format[0] ? st->model.source_format : "?", c->arch, (long long)c->hidden, (long long)c->intermediate,
           (long long)c->n_layers, (long long)c->n_heads, (long long)(c->n_kv_heads ? c->n_kv_heads : c->n_heads), (long long)c->vocab);
    printf("tokenizer  %s\n", st->tok_path);
    if (qx_model_hooks_get(&st->model, &ml, &e) == QUAROT_OK) {   /* the model's own online hooks (rotate --online), beside it or --hooks */
        char* hp = o->in.hooks ? NULL : qx_hooks_path_for(o->model);
        if (ml.count > 0)
            printf("hooks      %s: %lld online hooks of the model, applied in every forward pass of every column\n",
                   o->in.hooks ? o->in.hooks : hp ? hp : "?", (long long)ml.count);
        free(hp);
        quarot_online_list_free(&ml);
    }
    if (o->in.tokens) printf("tokens     %s: %lld ids\n", o->in.tokens, (long long)st->n_stream);
    else printf("text       %s: %lu bytes\n", o->text, (unsigned long)st->text_len);
    if (o->win.windowing == QX_WINDOWING_STREAM)
        printf("windows    %lld x seq_len %lld, stream windowing (text encoded once: %lld tokens; [BOS] + %lld consecutive tokens per window)\n",
               (long long)st->win.n, (long long)o->win.seq_len, (long long)st->n_stream, (long long)(o->win.seq_len - 1));
    else
        printf("windows    %lld, seq_len %lld, docs windowing (%lld of %lld documents split at blank lines, each from [BOS]; longer ones continue in further windows)\n",
               (long long)st->win.n, (long long)o->win.seq_len, (long long)st->win.n_docs, (long long)st->win.n_docs_total);
    printf("scored     %lld tokens\n", (long long)st->win.n_predicted);
}

/* How weights, activations and the KV cache are quantized (GPTQ's calibration, a packed file's own). */
static void eval_print_quant(const eval_state* st) {
    const eval_opts* o = &st->o;
    const qx_packed_settings* ps = &st->pst;
    printf("quant      weights %s%s %s per %s; activations per token %s, clip %.2f%s; KV cache %s\n", st->gptq ? "GPTQ" : "RTN",
           o->q.w_clip ? " with clip search (|err|^2.4)" : "", o->q.w_asym ? "asymmetric" : "symmetric", o->group ? "group" : "output channel",
           o->q.a_asym ? "asymmetric" : "symmetric", o->clip, o->int8_down ? "; down_proj input and weights 8-bit" : "",
           st->any_kv ? (st->k_sym && st->v_sym ? "per token per head symmetric"
                         : (st->k_sym || st->v_sym) ? "per token per head, K/V sym/asym as asked" : "per token per head asymmetric")
                      : "FP32");
    if (o->group) printf("           weight groups of %lld input channels\n", (long long)o->group);
    if (o->a_group) printf("           activation groups of %lld channels\n", (long long)o->a_group);
    if (st->any_kv && (o->k_group || o->v_group || o->q.k_clip > 0 || o->q.v_clip > 0))
        printf("           K groups %lld, V groups %lld (0 = head_dim); K clip %.2f, V clip %.2f\n", (long long)o->k_group, (long long)o->v_group,
               o->q.k_clip > 0 ? o->q.k_clip : 1.0, o->q.v_clip > 0 ? o->q.v_clip : 1.0);
    if (st->gptq)
        printf("GPTQ       %s: %lld windows of %lld tokens (%s windowing), percdamp %g, block 128%s, sequential (QuaRot's steps q/k/v, o, gate/up, down)\n",
               o->g.calib_text, (long long)o->nsamples, (long long)o->win.seq_len, o->win.windowing == QX_WINDOWING_STREAM ? "stream" : "docs",
               o->percdamp, o->g.act_order ? ", act-order" : "");
    if (st->packed)
        printf("packed     the file's own setting: %d-bit weights (%s, %s), scored as stored; %lld online hooks from its metadata\n", ps->w_bits,
               ps->w_quantizer[0] ? ps->w_quantizer : "?", ps->w_group_size ? "groups" : "per output channel", (long long)st->hooks.count);
}

/* The learned column: the file, its recipe, the rotation checks. */
static void eval_print_learned(const eval_state* st) {
    if (!st->have_learned) return;
    printf("%-10s %s: %s; orthogonality before use %.2e\n", "learned", st->o.rot.rotations, st->spin.about, st->spin_orth);
    print_recipe("", st->learned_recipe);
    qx_rotcheck_summary("learned    ", st->rl, st->n_rl);
}

/* What the QuaRot, Adapt and learned columns are: their recipes, stage 1, the rotation checks. */
static void eval_print_columns(const eval_state* st) {
    const eval_opts* o = &st->o;
    const quarot_adapt_context* a = &st->actx;
    if (st->want_col[1] && o->rot.no_online) printf("%-10s no online hooks (--no-online): R1 + R2 folded only\n", "QuaRot");
    if (st->have_rot) print_recipe("QuaRot", st->recipe);   /* built only with the QuaRot column */
    if (st->want_col[1]) qx_rotcheck_summary("QuaRot     ", st->rq, st->n_rq);
    if (!st->have_adapt) {
        eval_print_learned(st);
        return;
    }
    if (o->g.calib_text)
        printf("%-10s stage 1 on %s: %lld windows, %lld tokens; %lld linears (%s), %lld rows of %lld\n", "Adapt", o->g.calib_text,
               (long long)st->cst.windows, (long long)st->cst.tokens, (long long)st->cst.linears, st->cst.matched, (long long)st->cst.rows,
               (long long)st->model.config.hidden);
    else
        printf("%-10s stage 1 context %s: %lld rows of %lld, %d steps run\n", "Adapt", o->rot.context, (long long)a->rows, (long long)a->block,
               a->steps_run);
    printf("%-10s stage 1 loss (%s per token): random Hadamard %.6e -> adapted %.6e (%+.2f%%)\n", "", qx_calib_dtype(a), a->start_loss,
           a->best_loss, 100.0 * qx_calib_reduction(a));
    print_recipe("", st->adapt_recipe);
    qx_rotcheck_summary("Adapt      ", st->ra, st->n_ra);
    eval_print_learned(st);
}

/* The quantization error per linear type, averaged over the layers, per quantized weight store. */
static void eval_print_linear_errors(const eval_state* st) {
    int i, t;
    for (i = 0; i < st->n_qs; ++i) {
        const eval_qstore* x = &st->qs[i];
        printf("\nweights W%d, %s (%s%s): mean over layers\n", x->w_bits, st->variants[x->variant].name, st->gptq ? "GPTQ" : "RTN",
               x->migrate ? ", scale migration" : "");
        if (x->calibrated)
            printf("  %-10s %14s %14s %12s\n", "linear", "out err/ref", "RTN err/ref", "weight MSE");
        else
            printf("  %-10s %12s\n", "linear", "weight MSE");
        for (t = 0; t < 8; ++t) {
            double n = (double)x->n[t];
            if (!x->n[t]) continue;
            if (x->calibrated)
                printf("  %-10s %14.4e %14.4e %12.4e\n", t < 7 ? lin_types[t] : "other", x->err[t] / n, x->err_rtn[t] / n, x->mse[t] / n);
            else
                printf("  %-10s %12.4e\n", t < 7 ? lin_types[t] : "other", x->mse[t] / n);
        }
        if (st->model.config.n_experts > 0)
            printf("  mixture of experts: %s; routers and shared-expert gates not quantized%s%s\n",
                   st->gptq ? "GPTQ on each expert's routed calibration rows (the shared expert on all)" : "every expert quantized",
                   x->st.moe_note[0] ? "; " : "", x->st.moe_note);
    }
}

/* The report on stdout: the inputs, the quantization, the columns, the table, the errors. */
static void eval_report(eval_state* st) {
    int j;
    eval_print_inputs(st);
    eval_print_quant(st);
    eval_print_columns(st);
    printf("\n");
    qx_ek_table_print(stdout, &st->table);
    if (!st->o.no_fp32) {   /* FP32 to 9 digits: a rotated model's must equal the original's (function preserved) */
        printf("FP32 to 9 digits:");
        for (j = 0; j < st->table.n_cols; ++j)
            if (st->table.v[0][j] == st->table.v[0][j]) printf("  %s %.9g", st->table.col[j], st->table.v[0][j]);
        printf("\n");
    }
    eval_print_linear_errors(st);
    fflush(stdout);
    qx_cli_info(&st->cli, "memory: peak resident %.1f MiB (layer-wise: one decoder layer in f32 at a time)", qx_lw_peak_rss_mib());
}

int qx_cmd_eval(int argc, char** argv) {
    eval_state st;
    int rc;
    eval_init(&st);
    rc = qx_opts_parse(&qx_cmd_eval_spec, &st.cli, argc, argv, &st.o);
    if (rc != QX_OPTS_RUN) return rc;   /* --help, or a usage error */
    st.cli.quiet = st.o.c.quiet;
    rc = eval_check_options(&st);                     /* usage errors, before any file is read */
    if (!rc) rc = eval_rows(&st);                     /* FP32, then the settings asked for */
    if (!rc) rc = eval_load_model(&st);               /* with its hooks (a packed file: its settings) */
    if (!rc) rc = eval_check_model(&st);              /* the context, the rotations, --seq-len, --group-size */
    if (!rc) rc = eval_read_input(&st);               /* the tokenizer and the text */
    if (!rc) rc = eval_windows(&st);
    if (!rc) rc = eval_rotate_quarot(&st);            /* the QuaRot column's model */
    if (!rc) rc = eval_calib_windows(&st);            /* GPTQ's and migration's calibration rows */
    if (!rc) rc = eval_adapt_stage1(&st);             /* the Adapt column: R learned here, or --context's */
    if (!rc) rc = eval_adapt_stage2(&st);
    if (!rc) rc = eval_rotate_learned(&st);           /* the learned column: --rotations' R1 and R2 */
    if (!rc) rc = eval_columns(&st);
    if (!rc) rc = eval_cells(&st);                    /* every (row, column): the perplexity */
    if (!rc) eval_report(&st);
    eval_free(&st);
    return rc;
}
