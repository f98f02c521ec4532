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
#include <stdlib.h>
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
             "--calib-text; see README)"},
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

/* MODEL is a quarot-packed file: read its settings (the file parsed again: the store holds only the
   dequantized weights) and its hook list (blob "quarot.online"); bits flags must be the file's or 16
   (the FP32 row: the file's weights dequantized, nothing else quantized), the rotation flags have
   nothing to do (it is rotated already). */
static int eval_packed_setup(qx_cli* cli, const char* path, const qx_store* model, const char* hooks_opt, const int* cols,
                             const char* rows_opt, const int* w_list, int n_w, const int* a_list, int n_a, const int* kv_list, int n_kv,
                             int64_t group, double clip, qx_packed_settings* st, quarot_online_list* hooks) {
    qx_map m;
    qx_packed_file f;
    qx_err e;
    quarot_result r;
    const char* text;
    size_t n = 0;
    char msg[256];
    int i;
    if (hooks_opt) return qx_cli_fail(cli, QX_EXIT_USAGE, "--hooks: %s carries its online hooks in its metadata", path);
    if (cols && (cols[1] || cols[2] || cols[3]))
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--columns: %s is a packed file, rotated already (its one column is the file)", path);
    if (rows_opt) return qx_cli_fail(cli, QX_EXIT_USAGE, "--rows: %s is a packed file: its one row is the file's setting", path);
    r = qx_map_file(path, &m, &e);
    if (r == QUAROT_OK) {
        r = qx_packed_parse(m.addr, m.len, path, &f, &e);
        if (r == QUAROT_OK) { *st = f.settings; qx_packed_file_free(&f); }
        qx_unmap(&m);
    }
    if (r != QUAROT_OK) return qx_cli_fail(cli, qx_cli_exit_for(r), "%s", e.msg);
    for (i = 0; i < n_w; ++i)
        if (w_list[i] != st->w_bits && w_list[i] != 16)
            return qx_cli_fail(cli, QX_EXIT_USAGE, "--w-bits %d contradicts %s's quarot.weight.bits %d", w_list[i], path, st->w_bits);
    for (i = 0; i < n_a; ++i)
        if (a_list[i] != st->a_bits && a_list[i] != 16)
            return qx_cli_fail(cli, QX_EXIT_USAGE, "--a-bits %d contradicts %s's quarot.act.bits %d", a_list[i], path, st->a_bits);
    for (i = 0; i < n_kv; ++i)
        if ((kv_list[i] != st->k_bits || kv_list[i] != st->v_bits) && kv_list[i] != 16)
            return qx_cli_fail(cli, QX_EXIT_USAGE, "--kv-bits %d contradicts %s's quarot.k.bits %d / quarot.v.bits %d", kv_list[i], path,
                               st->k_bits, st->v_bits);
    if (group && group != st->w_group_size)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--group-size %lld contradicts %s's quarot.weight.group_size %lld", (long long)group, path,
                           (long long)st->w_group_size);
    if (clip > 0.0 && fabs(clip - st->a_clip) > 1e-6)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--clip %g contradicts %s's quarot.act.clip_ratio %g", clip, path, st->a_clip);
    text = (const char*)qx_store_get_blob(model, "quarot.online", &n);
    msg[0] = '\0';
    r = text && n ? quarot_online_read(hooks, text, n, msg, sizeof msg) : QUAROT_OK;   /* "": no hooks */
    if (r != QUAROT_OK) return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: metadata quarot.online: %s", path, msg[0] ? msg : quarot_result_string(r));
    if (hooks->count) qx_cli_info(cli, "online hooks: %lld from %s's metadata, applied in every forward pass", (long long)hooks->count, path);
    return QX_EXIT_OK;
}

int qx_cmd_eval(int argc, char** argv) {
    qx_cli cli;
    eval_opts o;
    qx_store adapt;
    quarot_online_list adapt_hooks;
    quarot_adapt_context actx;
    qx_calib_stats cst;
    char adapt_recipe[2048];
    int have_adapt = 0, have_actx = 0;
    int i, j, k, rc = QX_EXIT_OK, any_kv = 0;
    qx_ek_setting settings[QX_EK_MAX_ROWS];
    int n_settings = 0;
    qx_store model, rot;
    quarot_online_list hooks;
    qx_tokenizer tok;
    char tok_path[4096], recipe[2048];
    char* text = NULL;
    size_t text_len = 0;
    int32_t* stream = NULL;
    int64_t n_stream = 0;
    qx_windows win;
    qx_ppl_opts po;
    qx_ek_table table;
    eval_variant variants[QX_EK_MAX_COLS];
    int n_variants = 0;
    eval_progress prog;
    qx_load_opts lo;
    int k_sym, v_sym, gptq, want_col[4] = {1, 1, 1, 1}, columns_given = 0, n_rq = 0, n_ra = 0, n_rl = 0;
    qx_spin_rot spin;
    qx_store learned;
    quarot_online_list learned_hooks;
    char learned_recipe[2048];
    int have_learned = 0;
    double spin_orth = 0.0;
    int packed = 0, packed_row = -1;   /* MODEL is a quarot-packed file: its settings and hooks decide */
    qx_packed_settings pst;
    qx_rotcheck_dim rq[8], ra[8], rl[8];   /* what the QuaRot / Adapt / learned columns' rotations build (no silent fallbacks) */
    int k_of[QX_EK_MAX_ROWS], v_of[QX_EK_MAX_ROWS], n_qs = 0;
    eval_qstore* qs = NULL;
    qx_windows gcw;
    int have_gcw = 0;
    qx_pool* pool = NULL;
    quarot_env env;
    qx_err e;
    quarot_result r;
    int have_model = 0, have_rot = 0, have_tok = 0, have_win = 0;

    qx_cli_init(&cli, "eval", 0);
    memset(&o, 0, sizeof o);
    o.w.v[0] = o.a.v[0] = o.kv.v[0] = 16;
    o.clip = 1.0;
    o.percdamp = 0.01;
    o.calib_quant_dtype = "int4";
    o.q.k_asym = o.q.v_asym = 1;
    qx_opts_rotation_init(&o.rot);
    qx_opts_windowing_init(&o.win);
    if ((rc = qx_opts_parse(&qx_cmd_eval_spec, &cli, argc, argv, &o)) != QX_OPTS_RUN) return rc;
    rc = QX_EXIT_OK;
    cli.quiet = o.c.quiet;
    k_sym = !o.q.k_asym;
    v_sym = !o.q.v_asym;
    if (!o.model) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot eval MODEL --text FILE; see --help)");
    if (!o.text && !o.in.tokens) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no --text FILE (or --tokens FILE) given (see quarot eval --help)");
    if (o.text && o.in.tokens) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--text and --tokens both give the evaluation tokens: choose one");
    if (o.in.tokens && o.win.windowing == QX_WINDOWING_DOCS) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--tokens has no documents: use --windowing stream");
    if (o.in.tokens) o.text = o.in.tokens;
    if ((o.k_bits > 8 && o.k_bits != 16) || (o.v_bits > 8 && o.v_bits != 16))
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--k-bits / --v-bits: the quantizer takes 2..8 bits (16 = not quantized)");
    gptq = o.g.w_quant == QX_WQ_GPTQ;
    if (o.migrate && !o.g.calib_text)
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--migrate needs --calib-text FILE (the scales are chosen on calibration rows)");
    if (gptq && !o.g.calib_text)
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--w-quant gptq needs --calib-text FILE (the calibration text for the Hessians)");
    if (!gptq && (o.g.act_order || o.percdamp != 0.01 || (o.nsamples && !o.migrate)))
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--nsamples / --act-order / --percdamp are GPTQ options: add --w-quant gptq");
    memset(&spin, 0, sizeof spin);
    if (o.columns || o.rotation == QX_ROT_ADAPT || o.rotation == QX_ROT_LEARNED) {
        const char* p = o.columns ? o.columns : o.rotation == QX_ROT_LEARNED ? "none,learned" : "none,adapt";
        want_col[0] = want_col[1] = want_col[2] = want_col[3] = 0;
        columns_given = 1;
        while (*p) {
            size_t n = strcspn(p, ",");
            if (n == 4 && strncmp(p, "none", 4) == 0) want_col[0] = 1;
            else if (n == 6 && strncmp(p, "quarot", 6) == 0) want_col[1] = 1;
            else if (n == 5 && strncmp(p, "adapt", 5) == 0) want_col[2] = 1;
            else if (n == 7 && strncmp(p, "learned", 7) == 0) want_col[3] = 1;
            else return qx_cli_fail(&cli, QX_EXIT_USAGE, "--columns: '%s' is not a list of none, quarot, adapt, learned", o.columns);
            p += n;
            if (*p == ',') ++p;
        }
        if (want_col[2] && !o.rot.context && !o.g.calib_text)
            return qx_cli_fail(&cli, QX_EXIT_USAGE, "the Adapt column needs --context FILE or --calib-text FILE");
        if (want_col[3] && !o.rot.rotations)
            return qx_cli_fail(&cli, QX_EXIT_USAGE, "the learned column needs --rotations FILE (quarot calibrate --method spinquant writes one)");
    }
    if (o.rot.context && o.g.calib_text && !gptq)
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--context and --calib-text both give the Adapt column its R: choose one");
    if (!o.g.calib_text && (o.calib_windows || o.calib_layers || strcmp(o.calib_quant_dtype, "int4") != 0))
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--calib-windows / --calib-quant-dtype / --calib-layer-type need --calib-text");
    if (o.calib_layers) {
        const char* c = o.calib_layers;
        size_t run = 0;
        for (;; ++c) {
            if (*c == ',' || *c == '\0') {
                if (run == 0 || run >= 128)
                    return qx_cli_fail(&cli, QX_EXIT_USAGE, "--calib-layer-type: '%s' is not a list of non-empty patterns (at most 127 bytes each)", o.calib_layers);
                run = 0;
                if (!*c) break;
            } else {
                ++run;
            }
        }
    }

    /* The rows: FP32 first, then the default pair or every combination asked for (duplicates and
       settings that quantize nothing fold into the rows already there). */
    settings[0].w_bits = settings[0].a_bits = settings[0].kv_bits = 16;
    qx_ek_setting_label(&settings[0]);
    n_settings = 1;
    if (o.rows) {
        const char* p = o.rows;
        if (o.w.n || o.a.n || o.kv.n) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--rows replaces --w-bits / --a-bits / --kv-bits: give one or the other");
        while (*p) {
            qx_ek_setting s;
            int wb = 0, ab = 0, kvb = 16, used = 0, used2 = 0;
            size_t n = strcspn(p, ",");
            if (sscanf(p, "W%dA%d%n", &wb, &ab, &used) != 2 || (used < (int)n && sscanf(p + used, "KV%d%n", &kvb, &used2) != 1) ||
                used + used2 != (int)n || wb < 2 || ab < 2 || kvb < 2 || (wb > 8 && wb != 16) || (ab > 8 && ab != 16) || (kvb > 8 && kvb != 16))
                return qx_cli_fail(&cli, QX_EXIT_USAGE, "--rows: '%.*s' is not a setting like W4A4, W4A16 or W4A4KV4 (bits 2..8 or 16)", (int)n, p);
            s.w_bits = wb;
            s.a_bits = ab;
            s.kv_bits = kvb;
            qx_ek_setting_label(&s);
            if (!has_setting(settings, n_settings, &s)) {
                if (n_settings >= QX_EK_MAX_ROWS) return qx_cli_fail(&cli, QX_EXIT_USAGE, "too many settings (at most %d rows)", QX_EK_MAX_ROWS);
                settings[n_settings++] = s;
            }
            p += n;
            if (*p == ',') ++p;
        }
    } else if (!o.w.n && !o.a.n && !o.kv.n && !o.k_bits && !o.v_bits) {
        static const int def[2][2] = {{4, 4}, {8, 4}};
        for (k = 0; k < 2; ++k) {
            settings[n_settings].w_bits = def[k][0];
            settings[n_settings].a_bits = def[k][1];
            settings[n_settings].kv_bits = 16;
            qx_ek_setting_label(&settings[n_settings]);
            n_settings++;
        }
    } else {
        if (!o.w.n) o.w.n = 1;
        if (!o.a.n) o.a.n = 1;
        if (!o.kv.n) o.kv.n = 1;
        for (i = 0; i < o.w.n; ++i)
            for (j = 0; j < o.a.n; ++j)
                for (k = 0; k < o.kv.n; ++k) {
                    qx_ek_setting s;
                    s.w_bits = o.w.v[i];
                    s.a_bits = o.a.v[j];
                    s.kv_bits = o.kv.v[k];
                    qx_ek_setting_label(&s);
                    if (has_setting(settings, n_settings, &s)) continue;
                    if (n_settings >= QX_EK_MAX_ROWS) return qx_cli_fail(&cli, QX_EXIT_USAGE, "too many settings (at most %d rows)", QX_EK_MAX_ROWS);
                    settings[n_settings++] = s;
                }
    }
    for (i = 0; i < n_settings; ++i) {
        int q_any = settings[i].w_bits < 16 || settings[i].a_bits < 16 || settings[i].kv_bits < 16 || i > 0;
        k_of[i] = q_any && o.k_bits ? (int)o.k_bits : settings[i].kv_bits;
        v_of[i] = q_any && o.v_bits ? (int)o.v_bits : settings[i].kv_bits;
        if (i > 0 && (o.k_bits || o.v_bits)) eval_label(&settings[i], k_of[i], v_of[i]);
        if (k_of[i] < 16 || v_of[i] < 16) any_kv = 1;
    }
    if (o.no_fp32) {   /* drop the FP32 row (row 0) */
        memmove(settings, settings + 1, (size_t)(n_settings - 1) * sizeof settings[0]);
        memmove(k_of, k_of + 1, (size_t)(n_settings - 1) * sizeof k_of[0]);
        memmove(v_of, v_of + 1, (size_t)(n_settings - 1) * sizeof v_of[0]);
        n_settings--;
        if (n_settings == 0) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--no-fp32 leaves no row: give --w-bits / --a-bits / --kv-bits");
    }

    /* Inputs: model, tokenizer, text (each failure is one line naming the file). */
    memset(&lo, 0, sizeof lo);
    {
        FILE* tf = fopen(o.text, "rb");
        if (!tf) return qx_cli_fail(&cli, QX_EXIT_INPUT, "%s: cannot open the text: %s", o.text, strerror(errno));
        fclose(tf);
    }
    r = qx_load_model(o.model, &lo, &model, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg);
    if (o.c.threads == 0) o.c.threads = qx_cpu_count();
    if (o.c.threads > 1) pool = qx_pool_create((int)o.c.threads);
    qx_pool_env(pool, &env);
    have_model = 1;
    memset(&win, 0, sizeof win);
    quarot_online_list_init(&hooks, NULL);
    quarot_online_list_init(&adapt_hooks, NULL);
    quarot_adapt_context_init(&actx, NULL);
    have_actx = 1;
    memset(&cst, 0, sizeof cst);
    if (strcmp(model.source_format, "quarot-packed") == 0) {
        if ((rc = eval_packed_setup(&cli, o.model, &model, o.in.hooks, columns_given ? want_col : NULL, o.rows, o.w.v, o.w.n, o.a.v,
                                    o.a.n, o.kv.v, o.kv.n, o.group, o.clip_given ? o.clip : 0.0, &pst, &hooks)) != QX_EXIT_OK)
            goto done;
        /* rows: FP32 (the file's weights dequantized, nothing else quantized; --no-fp32 drops it) and the
           file's own setting; one column, the file as it is (rotated already) */
        packed = 1;
        want_col[0] = 1;
        want_col[1] = want_col[2] = want_col[3] = 0;
        n_settings = 0;
        if (!o.no_fp32) {
            settings[0].w_bits = settings[0].a_bits = settings[0].kv_bits = 16;
            qx_ek_setting_label(&settings[0]);
            k_of[0] = v_of[0] = 16;
            n_settings = 1;
        }
        packed_row = n_settings;
        settings[packed_row].w_bits = pst.w_bits;
        settings[packed_row].a_bits = pst.a_bits;
        settings[packed_row].kv_bits = pst.k_bits == pst.v_bits ? pst.k_bits : 16;
        qx_ek_setting_label(&settings[packed_row]);
        k_of[packed_row] = pst.k_bits;
        v_of[packed_row] = pst.v_bits;
        if (pst.k_bits != pst.v_bits) eval_label(&settings[packed_row], k_of[packed_row], v_of[packed_row]);
        n_settings++;
        any_kv = pst.k_bits < 16 || pst.v_bits < 16;
        o.group = pst.w_group_size;
        o.clip = pst.a_clip;
        o.q.w_asym = pst.w_asym;
        o.q.a_asym = pst.a_asym;
        o.a_group = pst.a_group_size;
        o.k_group = pst.k_group_size;
        o.v_group = pst.v_group_size;
        k_sym = !pst.k_asym;
        v_sym = !pst.v_asym;
        o.q.k_clip = pst.k_clip;
        o.q.v_clip = pst.v_clip;
        gptq = 0;
    } else if ((rc = qx_cli_model_hooks(&cli, &model, o.model, o.in.hooks)) != QX_EXIT_OK) goto done;   /* the model's own hooks */
    if (o.rot.context) {   /* a stage-1 context: read (and validated) before any work */
        r = qx_calib_context_load(o.rot.context, &actx, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg); goto done; }
    }
    if (!o.rot.rotations) want_col[3] = 0;
    if (o.rot.rotations && want_col[3]) {   /* learned rotations: read and checked against this model before any work */
        char digest[QX_DIGEST_LEN];
        r = qx_spin_load(o.rot.rotations, &spin, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg); goto done; }
        r = qx_spin_model_digest(o.model, digest, &e);
        if (r == QUAROT_OK) r = qx_spin_check(&spin, &model.config, digest, &spin_orth, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s: %s: %s", o.model, o.rot.rotations, e.msg);
            goto done;
        }
    }
    {   /* no silent fallbacks: what the rotated columns build, warned (or refused with --strict) before any work */
        qx_rotcheck_opts rco;
        memset(&rco, 0, sizeof rco);
        rco.online = !o.rot.no_online;
        rco.r3 = any_kv;
        if (want_col[1]) {
            rco.rotation = o.rotation == QX_ROT_RANDOM ? QUAROT_ROTATION_RANDOM_ORTHOGONAL : QUAROT_ROTATION_HADAMARD;
            if ((rc = qx_rotcheck_cli(&cli, o.model, "QuaRot", &model.config, &rco, o.rot.strict, rq, 8, &n_rq)) != QX_EXIT_OK) goto done;
        }
        if (want_col[3]) {
            rco.rotation = QUAROT_ROTATION_MATRIX;
            rco.no_r2 = spin.r2 == NULL;
            if ((rc = qx_rotcheck_cli(&cli, o.model, "learned", &model.config, &rco, o.rot.strict, rl, 8, &n_rl)) != QX_EXIT_OK) goto done;
            rco.no_r2 = 0;
        }
        if (want_col[2] && (o.rot.context || o.g.calib_text)) {
            rco.rotation = QUAROT_ROTATION_ADAPT;
            rco.block_size = o.rot.context ? actx.block : 0;   /* stage 1 here: the full hidden size */
            if ((rc = qx_rotcheck_cli(&cli, o.model, "Adapt", &model.config, &rco, o.rot.strict, ra, 8, &n_ra)) != QX_EXIT_OK) goto done;
        }
    }
    memset(&tok, 0, sizeof tok);
    if (model.config.max_seq > 0 && o.win.seq_len > model.config.max_seq) {
        rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--seq-len %lld is longer than the model's context (%lld tokens)",
                         (long long)o.win.seq_len, (long long)model.config.max_seq);
        goto done;
    }
    if (o.group && !o.group_fallback) {
        /* every quantized linear's input width must split into whole groups: say so before any work
           (with --int8-down-proj, down_proj is per channel: its width, intermediate, need not) */
        const quarot_model_config* c = &model.config;
        int64_t hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
        if (c->hidden % o.group || (!o.int8_down && c->intermediate % o.group) || (c->n_heads * hd) % o.group) {
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "--group-size %lld does not divide the layer widths (hidden %lld, intermediate %lld, heads x head_dim %lld)",
                             (long long)o.group, (long long)c->hidden, (long long)c->intermediate, (long long)(c->n_heads * hd));
            goto done;
        }
    }
    r = qx_tokenizer_for_model(&tok, o.model, o.in.tokenizer, model.config.vocab, tok_path, sizeof tok_path, &e);
    if (r != QUAROT_OK && (!o.in.tokens || r != QUAROT_ERR_NOT_FOUND)) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
    have_tok = r == QUAROT_OK;
    if (!have_tok) snprintf(tok_path, sizeof tok_path, "none (--tokens; windows without BOS)");
    if (!have_tok && o.g.calib_text) { rc = qx_cli_fail(&cli, QX_EXIT_INPUT, "--calib-text needs a tokenizer: %s", e.msg); goto done; }
    if (o.in.tokens) r = qx_tokens_read(o.in.tokens, model.config.vocab, &stream, &n_stream, &e);
    else r = qx_ek_read_file(o.text, &text, &text_len, &e);
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }

    /* Windows, once for every cell. */
    memset(&po, 0, sizeof po);
    po.seq_len = o.win.seq_len;
    po.max_windows = o.win.windows;
    po.bos = have_tok ? qx_tokenizer_window_bos(&tok) : -1;
    qx_cli_phase(&cli);
    if (o.in.tokens) {
        r = qx_windows_stream(&win, stream, n_stream, &po, &e);
    } else if (o.win.windowing == QX_WINDOWING_STREAM) {
        int64_t cap = qx_tokenizer_max_tokens(text_len);
        stream = (int32_t*)malloc((size_t)cap * sizeof *stream);
        if (!stream) { rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "%s: out of memory", o.text); goto done; }
        r = qx_tokenizer_encode(&tok, text, text_len, 0, 0, stream, cap, &n_stream, &e);
        if (r == QUAROT_OK) r = qx_windows_stream(&win, stream, n_stream, &po, &e);
    } else {
        r = qx_windows_docs(&win, &tok, text, text_len, &po, &e);
    }
    if (r != QUAROT_OK) {
        if (r == QUAROT_ERR_INVALID_ARGUMENT)
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s: too short for one window of %lld tokens (%s)", o.text, (long long)o.win.seq_len, e.msg);
        else
            rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: %s", o.text, e.msg);
        goto done;
    }
    have_win = 1;
    qx_cli_progress_end(&cli, "tokenizing");

    /* QuaRot, once. */
    if (want_col[1]) {
        qx_cli_phase(&cli);
        r = qx_ek_rotate_ex(&model, (uint64_t)o.rot.seed, NULL, any_kv, !o.rot.no_online,
                            o.rotation == QX_ROT_RANDOM ? QUAROT_ROTATION_RANDOM_ORTHOGONAL : QUAROT_ROTATION_HADAMARD, &rot, &hooks,
                            recipe, sizeof recipe, on_layer, &cli, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: %s", o.model, e.msg); goto done; }
        have_rot = 1;
        qx_cli_progress_end(&cli, "QuaRot");
    }

    /* GPTQ's calibration windows (the same tokenizer, --seq-len and --windowing). */
    if (gptq || o.migrate) {
        qx_calib_text ct;
        r = qx_calib_text_load(o.g.calib_text, &ct, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT, "%s", e.msg);
            goto done;
        }
        r = qx_calib_windows(&ct, &tok, o.win.windowing, o.win.seq_len, 0, &gcw, &e);
        qx_calib_text_free(&ct);
        if (r == QUAROT_ERR_INVALID_ARGUMENT) {
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s: calibration text too short for one window of %lld tokens (%s)", o.g.calib_text, (long long)o.win.seq_len, e.msg);
            goto done;
        }
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: calibration windows: %s", o.g.calib_text, e.msg);
            goto done;
        }
        have_gcw = 1;
        if (!o.nsamples) o.nsamples = 128;
        if (gcw.n < o.nsamples) {
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s: calibration text too short: %lld windows of %lld tokens, --nsamples %lld",
                             o.g.calib_text, (long long)gcw.n, (long long)o.win.seq_len, (long long)o.nsamples);
            goto done;
        }
    }

    /* Adapt Rotation: stage 1 here (--calib-text) or from a file (--context), then stage 2 once. */
    if (o.g.calib_text && !o.rot.context && want_col[2]) {
        qx_calib_text ct;
        qx_windows cw;
        qx_calib_opts co;
        char* pats = NULL;
        const char* plist[64];
        static const char* const def_layer[1] = {"up_proj"};
        int64_t n_pats = 0;
        r = qx_calib_text_load(o.g.calib_text, &ct, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT, "%s", e.msg);
            goto done;
        }
        r = qx_calib_windows(&ct, &tok, o.win.windowing, o.win.seq_len, o.calib_windows, &cw, &e);
        qx_calib_text_free(&ct);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: calibration windows: %s", o.g.calib_text, e.msg);
            goto done;
        }
        memset(&co, 0, sizeof co);
        co.env = &env;
        co.on_window = on_calib_window;
        co.user = &cli;
        co.adapt.quant_dtype = o.calib_quant_dtype;
        co.adapt.seed = (uint64_t)o.rot.seed;
        co.adapt.layer_type = def_layer;
        co.adapt.n_layer_type = 1;
        if (o.calib_layers) {
            char* p;
            pats = (char*)malloc(strlen(o.calib_layers) + 1);
            if (!pats) { qx_windows_free(&cw); rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "out of memory"); goto done; }
            strcpy(pats, o.calib_layers);
            for (p = pats; p && n_pats < 64;) {
                char* comma = strchr(p, ',');
                if (comma) *comma = '\0';
                plist[n_pats++] = p;
                p = comma ? comma + 1 : NULL;
            }
            co.adapt.layer_type = plist;
            co.adapt.n_layer_type = n_pats;
        }
        r = qx_calib_check(&co.adapt, model.config.hidden, &e);
        if (r != QUAROT_OK) {
            free(pats);
            qx_windows_free(&cw);
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_USAGE, "%s", e.msg);
            goto done;
        }
        qx_cli_phase(&cli);
        r = qx_calib_stage1(&model, &cw, &co, &actx, &cst, &e);
        free(pats);
        qx_windows_free(&cw);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY || r == QUAROT_ERR_INTERNAL ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS,
                             "%s: Adapt Rotation stage 1 on %s: %s", o.model, o.g.calib_text, e.msg);
            goto done;
        }
        qx_cli_progress_end(&cli, "Adapt Rotation stage 1");
        qx_cli_info(&cli, "Adapt Rotation stage 1: loss %.6e (random Hadamard) -> %.6e (%+.2f%%), %lld rows", actx.start_loss,
                    actx.best_loss, 100.0 * qx_calib_reduction(&actx), (long long)actx.rows);
    }
    if (actx.matrix && want_col[2]) {
        qx_cli_phase(&cli);
        r = qx_ek_rotate_ex(&model, (uint64_t)o.rot.seed, &actx, any_kv, !o.rot.no_online, QUAROT_ROTATION_HADAMARD, &adapt, &adapt_hooks, adapt_recipe,
                            sizeof adapt_recipe, on_layer_adapt, &cli, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", o.model, e.msg); goto done; }
        have_adapt = 1;
        qx_cli_progress_end(&cli, "Adapt Rotation stage 2");
    }
    if (spin.r1 && want_col[3]) {   /* the learned column: the same recipe, R1 and R2 from the file */
        qx_cli_phase(&cli);
        r = qx_spin_rotate(&model, &spin, any_kv, !o.rot.no_online, &learned, &learned_hooks, learned_recipe, sizeof learned_recipe,
                           on_layer_learned, &cli, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", o.model, e.msg); goto done; }
        have_learned = 1;
        qx_cli_progress_end(&cli, "learned rotations");
    }

    /* The columns. Adapt Rotation: one more variant here (its store and hooks), nothing else. */
    if (want_col[0]) {
        variants[n_variants].name = packed ? "packed" : "no rotation";
        variants[n_variants].store = &model;
        variants[n_variants++].hooks = packed && hooks.count ? &hooks : NULL;
    }
    if (have_rot) {
        variants[n_variants].name = "QuaRot";
        variants[n_variants].store = &rot;
        variants[n_variants++].hooks = &hooks;
    }
    if (have_adapt) {
        variants[n_variants].name = "Adapt";
        variants[n_variants].store = &adapt;
        variants[n_variants++].hooks = &adapt_hooks;
    }
    if (have_learned) {
        variants[n_variants].name = "learned";
        variants[n_variants].store = &learned;
        variants[n_variants++].hooks = &learned_hooks;
    }

    if (n_variants == 0) { rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--columns: no column to compute"); goto done; }
    (void)columns_given;
    qs = (eval_qstore*)calloc((size_t)(n_variants * n_settings), sizeof *qs);
    if (!qs) { rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "out of memory"); goto done; }
    qx_ek_table_init(&table, "perplexity");
    for (j = 0; j < n_variants; ++j) qx_ek_table_add_col(&table, variants[j].name);
    for (i = 0; i < n_settings; ++i) qx_ek_table_add_row(&table, settings[i].label);

    /* Every cell: build the (quantized) forward once, score every window. */
    qx_cli_phase(&cli);
    prog.cli = &cli;
    prog.total = (int64_t)n_settings * n_variants * win.n;
    prog.before = 0;
    for (i = 0; i < n_settings && rc == QX_EXIT_OK; ++i) {
        qx_fake_quant_opts q;
        qx_ek_setting kv = settings[i];
        qx_wq_cell cell;
        int stage_w;
        kv.kv_bits = 16;
        qx_ek_setting_quant(&kv, o.group, o.clip, &q);
        /* which weights the quantization stage makes in a copy of the store (below) and which the
           forward pass's RTN makes as it loads each layer: qx_wq_cell_staged */
        memset(&cell, 0, sizeof cell);
        cell.w_bits = settings[i].w_bits;
        cell.packed = packed;
        cell.gptq = gptq;
        cell.clip_search = o.q.w_clip;
        cell.migrate = o.migrate && settings[i].a_bits >= 16;   /* weight-only rows only */
        cell.int8_down_proj = o.int8_down;
        cell.group_fallback = o.group_fallback;
        stage_w = qx_wq_cell_staged(&cell);
        if (stage_w || packed) {   /* a packed file's weights are its codes already: not quantized again */
            q.w_bits = 0;
            q.w_group = 0;
        } else if (q.w_bits) {
            q.w_asym = o.q.w_asym;
            q.w_group = o.group;
        }
        if (q.a_bits) {
            q.a_asym = o.q.a_asym;
            q.a_group = o.a_group;
            if (o.int8_down) q.a_down_bits = 8;
        }
        q.k_bits = k_of[i] < 16 ? k_of[i] : 0;
        q.v_bits = v_of[i] < 16 ? v_of[i] : 0;
        q.k_group = o.k_group;
        q.v_group = o.v_group;
        q.k_sym = k_sym;
        q.v_sym = v_sym;
        q.k_clip = (float)o.q.k_clip;
        q.v_clip = (float)o.q.v_clip;
        for (j = 0; j < n_variants && rc == QX_EXIT_OK; ++j) {
            qx_ek_forward ef;
            qx_ppl_result res;
            double t0 = qx_now();
            const qx_store* src = variants[j].store;
            if (stage_w) {   /* the quantized weights of (column, bits): made once */
                eval_qstore* x = NULL;
                int m;
                int mig = cell.migrate;
                for (m = 0; m < n_qs; ++m)
                    if (qs[m].variant == j && qs[m].w_bits == settings[i].w_bits && qs[m].migrate == mig) x = &qs[m];
                if (!x) {
                    qx_wq_opts wo;
                    eval_qctx qc;
                    x = &qs[n_qs];
                    memset(x, 0, sizeof *x);
                    x->variant = j;
                    x->w_bits = settings[i].w_bits;
                    x->migrate = mig;
                    r = qx_store_clone(src, &x->s);
                    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "copying the model: out of memory"); break; }
                    n_qs++;
                    memset(&wo, 0, sizeof wo);
                    wo.desc.method = gptq ? QUAROT_WQUANT_GPTQ : QUAROT_WQUANT_RTN;
                    wo.desc.weight.bits = settings[i].w_bits;
                    wo.desc.weight.asymmetric = o.q.w_asym;
                    wo.desc.weight.group_size = o.group;
                    wo.desc.weight.clip_search = o.q.w_clip ? QUAROT_CLIP_SEARCH_LP : 0;
                    wo.desc.percdamp = o.percdamp;
                    wo.desc.act_order = o.g.act_order;
                    wo.desc.int8_down_proj = o.int8_down;
                    wo.desc.nsamples = o.nsamples;
                    wo.desc.migrate = mig;
                    wo.desc.seq_len = o.win.seq_len;
                    wo.desc.keep_indivisible = o.group_fallback;
                    wo.desc.dead_fallback = 1;
                    wo.desc.on_linear = on_linear;
                    wo.desc.user_data = &qc;
                    wo.hooks = variants[j].hooks;
                    wo.calib = have_gcw ? &gcw : NULL;
                    wo.env = &env;
                    wo.on_layer = on_wq_layer;
                    wo.user = &qc;
                    qc.cli = &cli;
                    qc.q = x;
                    qc.column = variants[j].name;
                    qc.quiet = o.c.quiet;
                    r = qx_wq_quantize(&x->s, &wo, &x->st, &e);
                    if (r != QUAROT_OK) {
                        rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s, %s: weight quantization: %s",
                                         settings[i].label, variants[j].name, e.msg);
                        break;
                    }
                    qx_cli_info(&cli, "%s W%d: %lld linears quantized by %s in %.1f s", variants[j].name, x->w_bits, (long long)x->st.linears,
                                gptq ? "GPTQ" : "RTN", x->st.seconds);
                }
                src = &x->s;
            }
            if (o.engine) {   /* the inference engine scores the cell itself */
                /* RTN weights: the engine quantizes the store's weights at load (the same RTN as the
                   reference) and runs its integer kernels on them; the stage's weights (GPTQ, clip search,
                   migration, int8 down_proj) would not round-trip, so those run FP32 linears on them */
                qx_fake_quant_opts qe = q;
                if (settings[i].w_bits < 16 && !stage_w) {
                    qe.w_bits = settings[i].w_bits;
                    qe.w_group = o.group;
                }
                r = packed && i == packed_row ? qx_engine_eval_packed(o.model, &win, NULL, &res, &e)   /* the file's codes, settings, hooks */
                           : qx_engine_eval_quant(src, variants[j].hooks, &qe, &win, NULL, &res, &e);
                if (r != QUAROT_OK) {
                    rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s, %s: engine: %s",
                                     settings[i].label, variants[j].name, e.msg);
                    break;
                }
                table.v[i][j] = res.ppl;
                prog.before += win.n;
                continue;
            }
            r = qx_ek_forward_init_env(&ef, src, variants[j].hooks, &q, NULL, NULL, &env, &e);
            if (r != QUAROT_OK) {
                rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s, %s: %s",
                                 settings[i].label, variants[j].name, e.msg);
                break;
            }
            snprintf(prog.label, sizeof prog.label, "%s, %s: window", settings[i].label, variants[j].name);
            r = qx_eval_windows(&ef.f, &win, on_window, &prog, &res, &e);
            if (r == QUAROT_OK && qx_ek_forward_status(&ef) != QUAROT_OK) {
                r = qx_ek_forward_status(&ef);
                snprintf(e.msg, sizeof e.msg, "online rotation: %s", quarot_result_string(r));
            }
            qx_ek_forward_free(&ef);
            if (r != QUAROT_OK) {
                rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s, %s: %s",
                                 settings[i].label, variants[j].name, e.msg);
                break;
            }
            table.v[i][j] = res.ppl;
            prog.before += win.n;
            if (qx_now() - cli.t0 >= 1.0)
                qx_cli_info(&cli, "%s, %s: perplexity %.4f (%.1f s)", settings[i].label, variants[j].name, res.ppl, qx_now() - t0);
        }
    }
    if (rc != QX_EXIT_OK) goto done;
    qx_cli_progress_end(&cli, "evaluation");

    /* The report. */
    {
        const quarot_model_config* c = &model.config;
        printf("model      %s: %s, %s, hidden %lld, intermediate %lld, %lld layers, %lld heads (%lld KV), vocab %lld\n",
               o.model, model.source_format[0] ? model.source_format : "?", c->arch, (long long)c->hidden,
               (long long)c->intermediate, (long long)c->n_layers, (long long)c->n_heads,
               (long long)(c->n_kv_heads ? c->n_kv_heads : c->n_heads), (long long)c->vocab);
        printf("tokenizer  %s\n", tok_path);
        {   /* the model's own online hooks (rotate --online), found beside it or given by --hooks */
            quarot_online_list ml;
            if (qx_model_hooks_get(&model, &ml, &e) == QUAROT_OK) {
                char* hp = o.in.hooks ? NULL : qx_hooks_path_for(o.model);
                if (ml.count > 0)
                    printf("hooks      %s: %lld online hooks of the model, applied in every forward pass of every column\n",
                           o.in.hooks ? o.in.hooks : hp ? hp : "?", (long long)ml.count);
                free(hp);
                quarot_online_list_free(&ml);
            }
        }
        if (o.in.tokens) printf("tokens     %s: %lld ids\n", o.in.tokens, (long long)n_stream);
        else printf("text       %s: %lu bytes\n", o.text, (unsigned long)text_len);
        if (o.win.windowing == QX_WINDOWING_STREAM)
            printf("windows    %lld x seq_len %lld, stream windowing (text encoded once: %lld tokens; [BOS] + %lld consecutive tokens per window)\n",
                   (long long)win.n, (long long)o.win.seq_len, (long long)n_stream, (long long)(o.win.seq_len - 1));
        else
            printf("windows    %lld, seq_len %lld, docs windowing (%lld of %lld documents split at blank lines, each from [BOS]; longer ones continue in further windows)\n",
                   (long long)win.n, (long long)o.win.seq_len, (long long)win.n_docs, (long long)win.n_docs_total);
        printf("scored     %lld tokens\n", (long long)win.n_predicted);
        printf("quant      weights %s%s %s per %s; activations per token %s, clip %.2f%s; KV cache %s\n",
               gptq ? "GPTQ" : "RTN", o.q.w_clip ? " with clip search (|err|^2.4)" : "", o.q.w_asym ? "asymmetric" : "symmetric",
               o.group ? "group" : "output channel", o.q.a_asym ? "asymmetric" : "symmetric", o.clip,
               o.int8_down ? "; down_proj input and weights 8-bit" : "",
               any_kv ? (k_sym && v_sym ? "per token per head symmetric" : (k_sym || v_sym) ? "per token per head, K/V sym/asym as asked" : "per token per head asymmetric") : "FP32");
        if (o.group) printf("           weight groups of %lld input channels\n", (long long)o.group);
        if (o.a_group) printf("           activation groups of %lld channels\n", (long long)o.a_group);
        if (any_kv && (o.k_group || o.v_group || o.q.k_clip > 0 || o.q.v_clip > 0))
            printf("           K groups %lld, V groups %lld (0 = head_dim); K clip %.2f, V clip %.2f\n", (long long)o.k_group, (long long)o.v_group,
                   o.q.k_clip > 0 ? o.q.k_clip : 1.0, o.q.v_clip > 0 ? o.q.v_clip : 1.0);
        if (gptq)
            printf("GPTQ       %s: %lld windows of %lld tokens (%s windowing), percdamp %g, block 128%s, sequential (QuaRot's steps q/k/v, o, gate/up, down)\n",
                   o.g.calib_text, (long long)o.nsamples, (long long)o.win.seq_len, o.win.windowing == QX_WINDOWING_STREAM ? "stream" : "docs", o.percdamp,
                   o.g.act_order ? ", act-order" : "");
        if (packed)
            printf("packed     the file's own setting: %d-bit weights (%s, %s), scored as stored; %lld online hooks from its metadata\n",
                   pst.w_bits, pst.w_quantizer[0] ? pst.w_quantizer : "?", pst.w_group_size ? "groups" : "per output channel",
                   (long long)hooks.count);
        if (want_col[1] && o.rot.no_online) printf("%-10s no online hooks (--no-online): R1 + R2 folded only\n", "QuaRot");
        print_recipe("QuaRot", recipe);
        if (want_col[1]) qx_rotcheck_summary("QuaRot     ", rq, n_rq);
        if (have_adapt) {
            if (o.g.calib_text)
                printf("%-10s stage 1 on %s: %lld windows, %lld tokens; %lld linears (%s), %lld rows of %lld\n", "Adapt", o.g.calib_text,
                       (long long)cst.windows, (long long)cst.tokens, (long long)cst.linears, cst.matched, (long long)cst.rows,
                       (long long)model.config.hidden);
            else
                printf("%-10s stage 1 context %s: %lld rows of %lld, %d steps run\n", "Adapt", o.rot.context, (long long)actx.rows,
                       (long long)actx.block, actx.steps_run);
            printf("%-10s stage 1 loss (%s per token): random Hadamard %.6e -> adapted %.6e (%+.2f%%)\n", "", qx_calib_dtype(&actx),
                   actx.start_loss, actx.best_loss, 100.0 * qx_calib_reduction(&actx));
            print_recipe("", adapt_recipe);
            qx_rotcheck_summary("Adapt      ", ra, n_ra);
        }
        if (have_learned) {
            printf("%-10s %s: %s; orthogonality before use %.2e\n", "learned", o.rot.rotations, spin.about, spin_orth);
            print_recipe("", learned_recipe);
            qx_rotcheck_summary("learned    ", rl, n_rl);
        }
        printf("\n");
        qx_ek_table_print(stdout, &table);
        if (!o.no_fp32) {   /* FP32 to 9 digits: a rotated model's must equal the original's (function preserved) */
            printf("FP32 to 9 digits:");
            for (j = 0; j < table.n_cols; ++j)
                if (table.v[0][j] == table.v[0][j]) printf("  %s %.9g", table.col[j], table.v[0][j]);
            printf("\n");
        }
        /* quantization error per linear type, averaged over the layers */
        for (i = 0; i < n_qs; ++i) {
            const eval_qstore* x = &qs[i];
            int t;
            printf("\nweights W%d, %s (%s%s): mean over layers\n", x->w_bits, variants[x->variant].name, gptq ? "GPTQ" : "RTN",
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
        }
        fflush(stdout);
    }
    qx_cli_info(&cli, "memory: peak resident %.1f MiB (layer-wise: one decoder layer in f32 at a time)", qx_lw_peak_rss_mib());

done:
    for (i = 0; i < n_qs; ++i) qx_store_free(&qs[i].s);
    free(qs);
    if (have_gcw) qx_windows_free(&gcw);
    qx_pool_destroy(pool);
    if (have_win) qx_windows_free(&win);
    free(stream);
    free(text);
    if (have_tok) qx_tokenizer_free(&tok);
    if (have_rot) qx_store_free(&rot);
    quarot_online_list_free(&hooks);
    if (have_adapt) qx_store_free(&adapt);
    if (have_learned) {
        qx_store_free(&learned);
        quarot_online_list_free(&learned_hooks);
    }
    qx_spin_rot_free(&spin);
    if (have_actx) {
        quarot_online_list_free(&adapt_hooks);
        quarot_adapt_context_free(&actx);
    }
    if (have_model) qx_store_free(&model);
    return rc;
}
