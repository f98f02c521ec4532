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

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void eval_usage(FILE* f) {
    fprintf(f,
        "usage: quarot eval MODEL --text FILE [options]\n"
        "\n"
        "Perplexity of MODEL on the text FILE in FP32 and fake-quantized, without rotation and with QuaRot\n"
        "(random Hadamard R1 and R2 folded into the weights, norms fused, online Hadamard rotations before\n"
        "every down_proj and across the heads before every o_proj, run inside the forward pass; with\n"
        "--kv-bits also the q/k rotation after RoPE), printed as one table on stdout: one row per setting,\n"
        "one column per model variant, each column after the first with its change against no rotation.\n"
        "\n"
        "options:\n"
        "  --text FILE           evaluation text (required unless --tokens)\n"
        "  --tokenizer FILE      GGUF, tokenizer.json or llama2.c tokenizer.bin; default: the model's own\n"
        "                        (GGUF metadata, tokenizer.json beside it, tok<vocab>.bin / tok512.bin /\n"
        "                        tokenizer.bin beside a llama2.c model); see quarot tokenize --help\n"
        "  --tokens FILE         token ids instead of --text (whitespace separated or a JSON array, e.g.\n"
        "                        quarot tokenize MODEL --text T --no-bos --ids-only); stream windowing;\n"
        "                        windows start with the tokenizer's BOS when one is found\n"
        QX_CLI_HOOKS_HELP
        "  --w-bits N[,N..]      weight bits (2..8, 16 = FP; QuaRot --w_bits): per output channel, RTN\n"
        "                        unless --w-quant gptq\n"
        "  --a-bits N[,N..]      activation bits (2..8, 16 = FP): per token symmetric, at every decoder-\n"
        "                        linear input\n"
        "  --kv-bits N[,N..]     KV-cache bits (2..8, 16 = FP): per token per head asymmetric; sets K and V\n"
        "                        Without any of the three: rows FP32, W4A4 and W8A4. With any: FP32 plus\n"
        "                        every combination of the lists (a part not given stays FP).\n"
        "  --group-size N        weights per group of N input channels instead of per output channel\n"
        "                        (QuaRot --w_groupsize)\n"
        "  --group-fallback      with --group-size: linears whose input width is not whole groups stay FP32\n"
        "                        instead of an error (as a GGUF Q4_0 / Q8_0 file of quarot quantize keeps\n"
        "                        them F16, llama.cpp's fallback)\n"
        "  --clip R              ACTIVATION clip ratio in (0, 1] (default 1.0; QuaRot --a_clip_ratio, which\n"
        "                        is often 0.9); --w-clip is the weight clip search\n"
        "  --windows N           score only the first N windows (default 0 = all)\n"
        "  --seq-len N           window length in tokens, BOS included (default 256, at most the model's\n"
        "                        context)\n"
        "  --windowing stream|docs  how the text becomes windows (default stream):\n"
        "      stream  the whole text is encoded once (run.c's encoder, no BOS) and cut into consecutive\n"
        "              chunks of seq_len-1 tokens (a trailing partial chunk is dropped); each window is\n"
        "              [BOS] + chunk, run from position 0, and every one of its seq_len-1 chunk tokens is\n"
        "              scored (the first one predicted from BOS alone).\n"
        "      docs    the text is split into documents at blank lines (lines empty or holding only\n"
        "              spaces, tabs, CR); each document is encoded on its own and cut into chunks of\n"
        "              seq_len-1 tokens, the last partial one included; each chunk becomes a window\n"
        "              [BOS] + chunk from position 0 (a long document continues in further windows with a\n"
        "              fresh BOS), every chunk token is scored; windows follow file order.\n"
        "              Both: perplexity = exp(mean negative log-likelihood over every scored token),\n"
        "              log-softmax in double precision.\n"
        );
    fputs(
        "  --seed N              seed of the random Hadamard signs (default 0; QuaRot --seed)\n"
        "  --threads N           threads for the forward pass, GPTQ and stage 1 (default: every core);\n"
        "                        the results are the same for any N\n"
        "  --engine ref|int      who computes the perplexity: ref (default) the fake-quantized reference\n"
        "                        forward pass; int the inference engine (examples/engine/: integer kernels,\n"
        "                        online hooks, quantized KV cache), which must agree within ~0.1%\n"
        "  --quiet               no progress on stderr\n"
        "  --help                this text\n", f);
    fputs(
        "\n"
        "Adapt Rotation column (\"Adapt\"): Adapt Rotation stage 2 with the same R2 and online hooks as the\n"
        "QuaRot column, its R1 being H*R with R learned by stage 1 (quarot calibrate --help):\n"
        "  --context FILE        a stage-1 context written by quarot calibrate (its seed and block are used)\n"
        "  --calib-text FILE     or: run stage 1 here on this text (.txt or .jsonl, as quarot calibrate) with\n"
        "                        calibrate's defaults (20 steps, up_proj, block -1, 2048 samples), --seed,\n"
        "                        --seq-len and --windowing of this command, and the tokenizer above\n"
        "  --calib-windows N     stage 1 on the first N calibration windows only (default 0 = all)\n"
        "  --calib-quant-dtype T int4 (default) or int8 (match the activation bits of the rows you look at)\n"
        "  --calib-layer-type L  comma-separated layer_type patterns (default up_proj)\n"
        "  With --calib-text the stage-1 loss (start with the random Hadamard, end with H*R) is printed too.\n"
        "\n", f);
    fputs(
        "QuaRot's levers (fake_quant/main.py flag in brackets):\n"
        "  --w-quant rtn|gptq    weight quantizer (default rtn [--w_rtn]; gptq = GPTQ per linear on Hessians\n"
        "                        of --calib-text, layer by layer with the online hooks applied, each layer\n"
        "                        calibrated on the quantized layers before it (QuaRot's sequential mode)\n"
        "  --w-clip              weight clip search: per channel (or group) the ratio 1.00..0.21 minimizing\n"
        "                        sum |Q(w)-w|^2.4 [--w_clip]; also inside GPTQ\n"
        "  --w-asym              asymmetric weights [--w_asym]\n"
        "  --a-asym              asymmetric per-token activations [--a_asym]\n"
        "  --a-group-size N      activation groups of N channels [--a_groupsize] (default whole row)\n"
        "  --k-bits N, --v-bits N  K / V cache bits (2..8, 16 = FP) [--k_bits, --v_bits]; override --kv-bits\n"
        "  --k-group-size N, --v-group-size N  K / V groups (default head_dim) [--k_groupsize, --v_groupsize]\n"
        "  --k-asym, --v-asym    asymmetric K / V (the default here) [--k_asym, --v_asym];\n"
        "  --k-sym, --v-sym      symmetric K / V (QuaRot's default without --k_asym / --v_asym)\n"
        "  --k-clip R, --v-clip R  K / V clip ratios (default 1.0) [--k_clip_ratio, --v_clip_ratio]\n"
        "  --int8-down-proj      down_proj input and weights at 8 bits [--int8_down_proj]\n"
        "  --nsamples N          GPTQ calibration windows (default 128) [--nsamples]; of --seq-len tokens,\n"
        "                        cut from --calib-text by --windowing\n"
        "  --percdamp R          GPTQ damping, fraction of mean diag(H) (default 0.01) [--percdamp]\n"
        "  --act-order           GPTQ columns by descending Hessian diagonal [--act_order]\n"
        "  --calib-text FILE     calibration text: GPTQ's Hessians [--cal_dataset], and Adapt stage 1\n"
        "  --no-online           QuaRot column without online Hadamards (R1 + R2 folded only)\n"
        "  --strict              a rotation fallback is an error instead of a warning (as quarot rotate: a\n"
        "                        block-diagonal R1, R2 or online rotation with blocks smaller than 64, or a\n"
        "                        dense random R1 where no Hadamard block exists, e.g. hidden 90)\n"
        "  --rotation hadamard|random|adapt  R1 of the rotated column: random Hadamard (default), random\n"
        "                        orthogonal [--rotate_mode random], or Adapt Rotation only (= --columns adapt)\n"
        "  --columns LIST        columns to compute, comma-separated from none, quarot, adapt (default: none\n"
        "                        and quarot, plus adapt with --context / --calib-text)\n"
        "  --rows LIST           rows to compute instead of the combinations of --w/--a/--kv-bits, e.g.\n"
        "                        W4A4,W4A16,W8A8 or W4A4KV4 (16 = FP); FP32 first unless --no-fp32\n"
        "  --no-fp32             skip the FP32 row (for sweeps that know it)\n"
        "  --migrate             weight-only rows (A16): per-channel scale migration at each norm before\n"
        "                        the weights are quantized (needs --calib-text; see README)\n"
        "  After the perplexity table, one table per quantized weight setting and column sums up the\n"
        "  quantization error of each linear type over the layers (layer-output error relative to\n"
        "  ||x W^T||^2 on the calibration rows when there are any, and weight MSE).\n"
        "\n", f);
    fprintf(f,
        "Weights, activations and the KV cache of the decoder layers are quantized; the embeddings, the\n"
        "final norm and lm_head stay FP32, as in QuaRot. Progress goes to stderr; the table to stdout.\n"
        "Memory (layer-wise): MODEL stays memory-mapped in its stored dtype and runs one decoder layer at\n"
        "a time (that layer converted to f32 when it runs, its mapped pages handed back after it); the\n"
        "QuaRot and Adapt variants are rotated layer by layer into temporary files in $TMPDIR (default\n"
        "/tmp; one model's size on disk each, removed once mapped) and run the same way. Peak memory is\n"
        "about the embeddings, final norm and lm_head (f32) + one decoder layer in f32 + the KV cache and\n"
        "activations of one window, never the whole model in f32; stderr reports the peak resident set.\n"
        "Exit codes: 0 ok, 1 usage, 2 input (model, tokenizer or text missing or malformed), 4 cannot\n"
        "evaluate as asked (e.g. a group size that does not divide the layer widths, text shorter than\n"
        "one window), 5 internal or out of memory.\n");
}

/* "4,8" -> bits[], each 2..8 or 16; returns the count, 0 on a bad list (usage error printed). */
static int parse_bits(qx_cli* cli, const char* opt, const char* s, int* bits, int cap) {
    int n = 0;
    const char* p = s;
    for (;;) {
        char tmp[32];
        const char* comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        int64_t v;
        if (len == 0 || len >= sizeof tmp || n >= cap) {
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
        bits[n++] = (int)v;
        if (!comma) break;
        p = comma + 1;
    }
    return n;
}

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
    if (cols && (cols[1] || cols[2]))
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
    const char *model_path = NULL, *text_path = NULL, *tok_opt = NULL, *v = NULL, *tokens_path = NULL;
    const char* hooks_opt = NULL;   /* --hooks FILE */
    const char *context_path = NULL, *calib_path = NULL, *calib_dtype = "int4", *calib_layers = NULL;
    int64_t calib_windows = 0;
    qx_store adapt;
    quarot_online_list adapt_hooks;
    quarot_adapt_context actx;
    qx_calib_stats cst;
    char adapt_recipe[2048];
    int have_adapt = 0, have_actx = 0;
    int w_list[8] = {16}, a_list[8] = {16}, kv_list[8] = {16}, n_w = 0, n_a = 0, n_kv = 0;
    int64_t group = 0, windows = 0, seq_len = 256, seed = 0;
    int group_fallback = 0;
    double clip = 1.0;
    int windowing = QX_WINDOWING_STREAM, quiet = 0, i, j, k, rc = QX_EXIT_OK, any_kv = 0, use_engine = 0;
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
    /* QuaRot's levers */
    const char *w_quant = "rtn", *rotation_opt = "hadamard", *columns_opt = NULL, *rows_opt = NULL;
    int migrate = 0, w_clip = 0, w_asym = 0, a_asym = 0, act_order = 0, int8_down = 0, no_online = 0, no_fp32 = 0;
    int k_sym = 0, v_sym = 0, gptq = 0, want_col[3] = {1, 1, 1}, columns_given = 0, strict = 0, n_rq = 0, n_ra = 0;
    int packed = 0, clip_given = 0, packed_row = -1;   /* MODEL is a quarot-packed file: its settings and hooks decide */
    qx_packed_settings pst;
    qx_rotcheck_dim rq[8], ra[8];   /* what the QuaRot / Adapt columns' rotations build (no silent fallbacks) */
    int64_t a_group = 0, k_group = 0, v_group = 0, nsamples = 0, threads = 0, kb_opt = 0, vb_opt = 0;
    double k_clip = 0.0, v_clip = 0.0, percdamp = 0.01;
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
    for (i = 1; i < argc; ++i) {
        const char* a = argv[i];
        int got;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { eval_usage(stdout); return QX_EXIT_OK; }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) { quiet = 1; continue; }
        if (a[0] != '-' || a[1] == '\0') {
            if (model_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "unexpected argument '%s' (one MODEL; see quarot eval --help)", a);
            model_path = a;
            continue;
        }
#define EVAL_OPT(name) ((got = qx_cli_opt(&cli, argc, argv, &i, name, &v)) < 0 ? -1 : got)
        if ((got = EVAL_OPT("--text")) != 0) { if (got < 0) return QX_EXIT_USAGE; text_path = v; }
        else if ((got = EVAL_OPT("--tokens")) != 0) { if (got < 0) return QX_EXIT_USAGE; tokens_path = v; }
        else if ((got = EVAL_OPT("--tokenizer")) != 0) { if (got < 0) return QX_EXIT_USAGE; tok_opt = v; }
        else if ((got = EVAL_OPT("--hooks")) != 0) { if (got < 0) return QX_EXIT_USAGE; hooks_opt = v; }
        else if ((got = EVAL_OPT("--w-bits")) != 0) { if (got < 0 || !(n_w = parse_bits(&cli, "--w-bits", v, w_list, 8))) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--a-bits")) != 0) { if (got < 0 || !(n_a = parse_bits(&cli, "--a-bits", v, a_list, 8))) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--kv-bits")) != 0) { if (got < 0 || !(n_kv = parse_bits(&cli, "--kv-bits", v, kv_list, 8))) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--group-size")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--group-size", v, 1, 1 << 24, &group)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--clip")) != 0) {
            char* endp = NULL;   /* (0, 1]: qx_cli_float's message would say [0, 1] */
            if (got < 0) return QX_EXIT_USAGE;
            clip = strtod(v, &endp);
            clip_given = 1;
            if (endp == v || *endp != '\0' || !(clip > 0.0 && clip <= 1.0))
                return qx_cli_fail(&cli, QX_EXIT_USAGE, "--clip: '%s' is not a number in (0, 1]", v);
        }
        else if ((got = EVAL_OPT("--windows")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--windows", v, 0, INT64_C(1) << 40, &windows)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--seq-len")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--seq-len", v, 2, 1 << 20, &seq_len)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--seed")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--seed", v, 0, INT64_MAX, &seed)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--context")) != 0) { if (got < 0) return QX_EXIT_USAGE; context_path = v; }
        else if ((got = EVAL_OPT("--calib-text")) != 0) { if (got < 0) return QX_EXIT_USAGE; calib_path = v; }
        else if ((got = EVAL_OPT("--calib-windows")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--calib-windows", v, 0, INT64_C(1) << 40, &calib_windows)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--calib-quant-dtype")) != 0) { if (got < 0) return QX_EXIT_USAGE; calib_dtype = v; }
        else if ((got = EVAL_OPT("--calib-layer-type")) != 0) { if (got < 0) return QX_EXIT_USAGE; calib_layers = v; }
        else if ((got = EVAL_OPT("--engine")) != 0) {
            if (got < 0) return QX_EXIT_USAGE;
            if (strcmp(v, "int") == 0) use_engine = 1;
            else if (strcmp(v, "ref") != 0) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--engine: '%s' is not ref or int", v);
        }
        else if ((got = EVAL_OPT("--windowing")) != 0) { if (got < 0 || !qx_cli_windowing(&cli, v, &windowing)) return QX_EXIT_USAGE; }
        else if (strcmp(a, "--w-clip") == 0) w_clip = 1;
        else if (strcmp(a, "--w-asym") == 0) w_asym = 1;
        else if (strcmp(a, "--a-asym") == 0) a_asym = 1;
        else if (strcmp(a, "--act-order") == 0) act_order = 1;
        else if (strcmp(a, "--group-fallback") == 0) group_fallback = 1;
        else if (strcmp(a, "--int8-down-proj") == 0) int8_down = 1;
        else if (strcmp(a, "--no-online") == 0) no_online = 1;
        else if (strcmp(a, "--strict") == 0) strict = 1;
        else if (strcmp(a, "--no-fp32") == 0) no_fp32 = 1;
        else if (strcmp(a, "--migrate") == 0) migrate = 1;
        else if (strcmp(a, "--k-asym") == 0) k_sym = 0;
        else if (strcmp(a, "--v-asym") == 0) v_sym = 0;
        else if (strcmp(a, "--k-sym") == 0) k_sym = 1;
        else if (strcmp(a, "--v-sym") == 0) v_sym = 1;
        else if ((got = EVAL_OPT("--w-quant")) != 0) {
            if (got < 0) return QX_EXIT_USAGE;
            if (strcmp(v, "rtn") != 0 && strcmp(v, "gptq") != 0) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--w-quant: '%s' is not rtn or gptq", v);
            w_quant = v;
        }
        else if ((got = EVAL_OPT("--rotation")) != 0) {
            if (got < 0) return QX_EXIT_USAGE;
            if (strcmp(v, "hadamard") != 0 && strcmp(v, "random") != 0 && strcmp(v, "adapt") != 0)
                return qx_cli_fail(&cli, QX_EXIT_USAGE, "--rotation: '%s' is not hadamard, random or adapt", v);
            rotation_opt = v;
        }
        else if ((got = EVAL_OPT("--columns")) != 0) { if (got < 0) return QX_EXIT_USAGE; columns_opt = v; }
        else if ((got = EVAL_OPT("--rows")) != 0) { if (got < 0) return QX_EXIT_USAGE; rows_opt = v; }
        else if ((got = EVAL_OPT("--a-group-size")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--a-group-size", v, 1, 1 << 24, &a_group)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--k-group-size")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--k-group-size", v, 1, 1 << 24, &k_group)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--v-group-size")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--v-group-size", v, 1, 1 << 24, &v_group)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--k-bits")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--k-bits", v, 2, 16, &kb_opt)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--v-bits")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--v-bits", v, 2, 16, &vb_opt)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--k-clip")) != 0) { if (got < 0 || !qx_cli_float(&cli, "--k-clip", v, 1e-6, 1.0, &k_clip)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--v-clip")) != 0) { if (got < 0 || !qx_cli_float(&cli, "--v-clip", v, 1e-6, 1.0, &v_clip)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--nsamples")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--nsamples", v, 1, 1 << 24, &nsamples)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--percdamp")) != 0) {
            if (got < 0 || !qx_cli_float(&cli, "--percdamp", v, 0.0, 1e6, &percdamp)) return QX_EXIT_USAGE;
            if (!(percdamp > 0.0)) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--percdamp: '%s' must be positive", v);
        }
        else if ((got = EVAL_OPT("--threads")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--threads", v, 1, 256, &threads)) return QX_EXIT_USAGE; }
        else return qx_cli_fail(&cli, QX_EXIT_USAGE, "unknown option '%s' (see quarot eval --help)", a);
#undef EVAL_OPT
    }
    cli.quiet = quiet;
    if (!model_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot eval MODEL --text FILE; see --help)");
    if (!text_path && !tokens_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no --text FILE (or --tokens FILE) given (see quarot eval --help)");
    if (text_path && tokens_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--text and --tokens both give the evaluation tokens: choose one");
    if (tokens_path && windowing == QX_WINDOWING_DOCS) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--tokens has no documents: use --windowing stream");
    if (tokens_path) text_path = tokens_path;
    if ((kb_opt > 8 && kb_opt != 16) || (vb_opt > 8 && vb_opt != 16))
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--k-bits / --v-bits: the quantizer takes 2..8 bits (16 = not quantized)");
    gptq = strcmp(w_quant, "gptq") == 0;
    if (migrate && !calib_path)
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--migrate needs --calib-text FILE (the scales are chosen on calibration rows)");
    if (gptq && !calib_path)
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--w-quant gptq needs --calib-text FILE (the calibration text for the Hessians)");
    if (!gptq && (act_order || percdamp != 0.01 || (nsamples && !migrate)))
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--nsamples / --act-order / --percdamp are GPTQ options: add --w-quant gptq");
    if (columns_opt || strcmp(rotation_opt, "adapt") == 0) {
        const char* p = columns_opt ? columns_opt : "none,adapt";
        want_col[0] = want_col[1] = want_col[2] = 0;
        columns_given = 1;
        while (*p) {
            size_t n = strcspn(p, ",");
            if (n == 4 && strncmp(p, "none", 4) == 0) want_col[0] = 1;
            else if (n == 6 && strncmp(p, "quarot", 6) == 0) want_col[1] = 1;
            else if (n == 5 && strncmp(p, "adapt", 5) == 0) want_col[2] = 1;
            else return qx_cli_fail(&cli, QX_EXIT_USAGE, "--columns: '%s' is not a list of none, quarot, adapt", columns_opt);
            p += n;
            if (*p == ',') ++p;
        }
        if (want_col[2] && !context_path && !calib_path)
            return qx_cli_fail(&cli, QX_EXIT_USAGE, "the Adapt column needs --context FILE or --calib-text FILE");
    }
    if (context_path && calib_path && !gptq)
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--context and --calib-text both give the Adapt column its R: choose one");
    if (!calib_path && (calib_windows || calib_layers || strcmp(calib_dtype, "int4") != 0))
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "--calib-windows / --calib-quant-dtype / --calib-layer-type need --calib-text");
    if (calib_layers) {
        const char* c = calib_layers;
        size_t run = 0;
        for (;; ++c) {
            if (*c == ',' || *c == '\0') {
                if (run == 0 || run >= 128)
                    return qx_cli_fail(&cli, QX_EXIT_USAGE, "--calib-layer-type: '%s' is not a list of non-empty patterns (at most 127 bytes each)", calib_layers);
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
    if (rows_opt) {
        const char* p = rows_opt;
        if (n_w || n_a || n_kv) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--rows replaces --w-bits / --a-bits / --kv-bits: give one or the other");
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
    } else if (!n_w && !n_a && !n_kv && !kb_opt && !vb_opt) {
        static const int def[2][2] = {{4, 4}, {8, 4}};
        for (k = 0; k < 2; ++k) {
            settings[n_settings].w_bits = def[k][0];
            settings[n_settings].a_bits = def[k][1];
            settings[n_settings].kv_bits = 16;
            qx_ek_setting_label(&settings[n_settings]);
            n_settings++;
        }
    } else {
        if (!n_w) n_w = 1;
        if (!n_a) n_a = 1;
        if (!n_kv) n_kv = 1;
        for (i = 0; i < n_w; ++i)
            for (j = 0; j < n_a; ++j)
                for (k = 0; k < n_kv; ++k) {
                    qx_ek_setting s;
                    s.w_bits = w_list[i];
                    s.a_bits = a_list[j];
                    s.kv_bits = kv_list[k];
                    qx_ek_setting_label(&s);
                    if (has_setting(settings, n_settings, &s)) continue;
                    if (n_settings >= QX_EK_MAX_ROWS) return qx_cli_fail(&cli, QX_EXIT_USAGE, "too many settings (at most %d rows)", QX_EK_MAX_ROWS);
                    settings[n_settings++] = s;
                }
    }
    for (i = 0; i < n_settings; ++i) {
        int q_any = settings[i].w_bits < 16 || settings[i].a_bits < 16 || settings[i].kv_bits < 16 || i > 0;
        k_of[i] = q_any && kb_opt ? (int)kb_opt : settings[i].kv_bits;
        v_of[i] = q_any && vb_opt ? (int)vb_opt : settings[i].kv_bits;
        if (i > 0 && (kb_opt || vb_opt)) eval_label(&settings[i], k_of[i], v_of[i]);
        if (k_of[i] < 16 || v_of[i] < 16) any_kv = 1;
    }
    if (no_fp32) {   /* drop the FP32 row (row 0) */
        memmove(settings, settings + 1, (size_t)(n_settings - 1) * sizeof settings[0]);
        memmove(k_of, k_of + 1, (size_t)(n_settings - 1) * sizeof k_of[0]);
        memmove(v_of, v_of + 1, (size_t)(n_settings - 1) * sizeof v_of[0]);
        n_settings--;
        if (n_settings == 0) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--no-fp32 leaves no row: give --w-bits / --a-bits / --kv-bits");
    }

    /* Inputs: model, tokenizer, text (each failure is one line naming the file). */
    memset(&lo, 0, sizeof lo);
    {
        FILE* tf = fopen(text_path, "rb");
        if (!tf) return qx_cli_fail(&cli, QX_EXIT_INPUT, "%s: cannot open the text: %s", text_path, strerror(errno));
        fclose(tf);
    }
    r = qx_load_model(model_path, &lo, &model, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg);
    if (threads == 0) threads = qx_cpu_count();
    if (threads > 1) pool = qx_pool_create((int)threads);
    qx_pool_env(pool, &env);
    have_model = 1;
    memset(&win, 0, sizeof win);
    quarot_online_list_init(&hooks, NULL);
    quarot_online_list_init(&adapt_hooks, NULL);
    quarot_adapt_context_init(&actx, NULL);
    have_actx = 1;
    memset(&cst, 0, sizeof cst);
    if (strcmp(model.source_format, "quarot-packed") == 0) {
        if ((rc = eval_packed_setup(&cli, model_path, &model, hooks_opt, columns_given ? want_col : NULL, rows_opt, w_list, n_w, a_list,
                                    n_a, kv_list, n_kv, group, clip_given ? clip : 0.0, &pst, &hooks)) != QX_EXIT_OK)
            goto done;
        /* rows: FP32 (the file's weights dequantized, nothing else quantized; --no-fp32 drops it) and the
           file's own setting; one column, the file as it is (rotated already) */
        packed = 1;
        want_col[0] = 1;
        want_col[1] = want_col[2] = 0;
        n_settings = 0;
        if (!no_fp32) {
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
        group = pst.w_group_size;
        clip = pst.a_clip;
        w_asym = pst.w_asym;
        a_asym = pst.a_asym;
        a_group = pst.a_group_size;
        k_group = pst.k_group_size;
        v_group = pst.v_group_size;
        k_sym = !pst.k_asym;
        v_sym = !pst.v_asym;
        k_clip = pst.k_clip;
        v_clip = pst.v_clip;
        w_quant = "rtn";
        gptq = 0;
    } else if ((rc = qx_cli_model_hooks(&cli, &model, model_path, hooks_opt)) != QX_EXIT_OK) goto done;   /* the model's own hooks */
    if (context_path) {   /* a stage-1 context: read (and validated) before any work */
        r = qx_calib_context_load(context_path, &actx, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg); goto done; }
    }
    {   /* no silent fallbacks: what the rotated columns build, warned (or refused with --strict) before any work */
        qx_rotcheck_opts rco;
        memset(&rco, 0, sizeof rco);
        rco.online = !no_online;
        rco.r3 = any_kv;
        if (want_col[1]) {
            rco.rotation = strcmp(rotation_opt, "random") == 0 ? QUAROT_ROTATION_RANDOM_ORTHOGONAL : QUAROT_ROTATION_HADAMARD;
            if ((rc = qx_rotcheck_cli(&cli, model_path, "QuaRot", &model.config, &rco, strict, rq, 8, &n_rq)) != QX_EXIT_OK) goto done;
        }
        if (want_col[2] && (context_path || calib_path)) {
            rco.rotation = QUAROT_ROTATION_ADAPT;
            rco.block_size = context_path ? actx.block : 0;   /* stage 1 here: the full hidden size */
            if ((rc = qx_rotcheck_cli(&cli, model_path, "Adapt", &model.config, &rco, strict, ra, 8, &n_ra)) != QX_EXIT_OK) goto done;
        }
    }
    memset(&tok, 0, sizeof tok);
    if (model.config.max_seq > 0 && seq_len > model.config.max_seq) {
        rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--seq-len %lld is longer than the model's context (%lld tokens)",
                         (long long)seq_len, (long long)model.config.max_seq);
        goto done;
    }
    if (group && !group_fallback) {
        /* every quantized linear's input width must split into whole groups: say so before any work
           (with --int8-down-proj, down_proj is per channel: its width, intermediate, need not) */
        const quarot_model_config* c = &model.config;
        int64_t hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
        if (c->hidden % group || (!int8_down && c->intermediate % group) || (c->n_heads * hd) % group) {
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "--group-size %lld does not divide the layer widths (hidden %lld, intermediate %lld, heads x head_dim %lld)",
                             (long long)group, (long long)c->hidden, (long long)c->intermediate, (long long)(c->n_heads * hd));
            goto done;
        }
    }
    r = qx_tokenizer_for_model(&tok, model_path, tok_opt, model.config.vocab, tok_path, sizeof tok_path, &e);
    if (r != QUAROT_OK && (!tokens_path || r != QUAROT_ERR_NOT_FOUND)) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
    have_tok = r == QUAROT_OK;
    if (!have_tok) snprintf(tok_path, sizeof tok_path, "none (--tokens; windows without BOS)");
    if (!have_tok && calib_path) { rc = qx_cli_fail(&cli, QX_EXIT_INPUT, "--calib-text needs a tokenizer: %s", e.msg); goto done; }
    if (tokens_path) r = qx_tokens_read(tokens_path, model.config.vocab, &stream, &n_stream, &e);
    else r = qx_ek_read_file(text_path, &text, &text_len, &e);
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }

    /* Windows, once for every cell. */
    memset(&po, 0, sizeof po);
    po.seq_len = seq_len;
    po.max_windows = windows;
    po.bos = have_tok ? qx_tokenizer_window_bos(&tok) : -1;
    qx_cli_phase(&cli);
    if (tokens_path) {
        r = qx_windows_stream(&win, stream, n_stream, &po, &e);
    } else if (windowing == QX_WINDOWING_STREAM) {
        int64_t cap = qx_tokenizer_max_tokens(text_len);
        stream = (int32_t*)malloc((size_t)cap * sizeof *stream);
        if (!stream) { rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "%s: out of memory", text_path); goto done; }
        r = qx_tokenizer_encode(&tok, text, text_len, 0, 0, stream, cap, &n_stream, &e);
        if (r == QUAROT_OK) r = qx_windows_stream(&win, stream, n_stream, &po, &e);
    } else {
        r = qx_windows_docs(&win, &tok, text, text_len, &po, &e);
    }
    if (r != QUAROT_OK) {
        if (r == QUAROT_ERR_INVALID_ARGUMENT)
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s: too short for one window of %lld tokens (%s)", text_path, (long long)seq_len, e.msg);
        else
            rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: %s", text_path, e.msg);
        goto done;
    }
    have_win = 1;
    qx_cli_progress_end(&cli, "tokenizing");

    /* QuaRot, once. */
    if (want_col[1]) {
        qx_cli_phase(&cli);
        r = qx_ek_rotate_ex(&model, (uint64_t)seed, NULL, any_kv, !no_online,
                            strcmp(rotation_opt, "random") == 0 ? QUAROT_ROTATION_RANDOM_ORTHOGONAL : QUAROT_ROTATION_HADAMARD, &rot, &hooks,
                            recipe, sizeof recipe, on_layer, &cli, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: %s", model_path, e.msg); goto done; }
        have_rot = 1;
        qx_cli_progress_end(&cli, "QuaRot");
    }

    /* GPTQ's calibration windows (the same tokenizer, --seq-len and --windowing). */
    if (gptq || migrate) {
        qx_calib_text ct;
        r = qx_calib_text_load(calib_path, &ct, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT, "%s", e.msg);
            goto done;
        }
        r = qx_calib_windows(&ct, &tok, windowing, seq_len, 0, &gcw, &e);
        qx_calib_text_free(&ct);
        if (r == QUAROT_ERR_INVALID_ARGUMENT) {
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s: calibration text too short for one window of %lld tokens (%s)", calib_path, (long long)seq_len, e.msg);
            goto done;
        }
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: calibration windows: %s", calib_path, e.msg);
            goto done;
        }
        have_gcw = 1;
        if (!nsamples) nsamples = 128;
        if (gcw.n < nsamples) {
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s: calibration text too short: %lld windows of %lld tokens, --nsamples %lld",
                             calib_path, (long long)gcw.n, (long long)seq_len, (long long)nsamples);
            goto done;
        }
    }

    /* Adapt Rotation: stage 1 here (--calib-text) or from a file (--context), then stage 2 once. */
    if (calib_path && !context_path && want_col[2]) {
        qx_calib_text ct;
        qx_windows cw;
        qx_calib_opts co;
        char* pats = NULL;
        const char* plist[64];
        static const char* const def_layer[1] = {"up_proj"};
        int64_t n_pats = 0;
        r = qx_calib_text_load(calib_path, &ct, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT, "%s", e.msg);
            goto done;
        }
        r = qx_calib_windows(&ct, &tok, windowing, seq_len, calib_windows, &cw, &e);
        qx_calib_text_free(&ct);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: calibration windows: %s", calib_path, e.msg);
            goto done;
        }
        memset(&co, 0, sizeof co);
        co.env = &env;
        co.on_window = on_calib_window;
        co.user = &cli;
        co.adapt.quant_dtype = calib_dtype;
        co.adapt.seed = (uint64_t)seed;
        co.adapt.layer_type = def_layer;
        co.adapt.n_layer_type = 1;
        if (calib_layers) {
            char* p;
            pats = (char*)malloc(strlen(calib_layers) + 1);
            if (!pats) { qx_windows_free(&cw); rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "out of memory"); goto done; }
            strcpy(pats, calib_layers);
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
                             "%s: Adapt Rotation stage 1 on %s: %s", model_path, calib_path, e.msg);
            goto done;
        }
        qx_cli_progress_end(&cli, "Adapt Rotation stage 1");
        qx_cli_info(&cli, "Adapt Rotation stage 1: loss %.6e (random Hadamard) -> %.6e (%+.2f%%), %lld rows", actx.start_loss,
                    actx.best_loss, 100.0 * qx_calib_reduction(&actx), (long long)actx.rows);
    }
    if (actx.matrix && want_col[2]) {
        qx_cli_phase(&cli);
        r = qx_ek_rotate_ex(&model, (uint64_t)seed, &actx, any_kv, !no_online, QUAROT_ROTATION_HADAMARD, &adapt, &adapt_hooks, adapt_recipe,
                            sizeof adapt_recipe, on_layer_adapt, &cli, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", model_path, e.msg); goto done; }
        have_adapt = 1;
        qx_cli_progress_end(&cli, "Adapt Rotation stage 2");
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
        qx_ek_setting_quant(&kv, group, clip, &q);
        /* which weights the quantization stage makes in a copy of the store (below) and which the
           forward pass's RTN makes as it loads each layer: qx_wq_cell_staged */
        memset(&cell, 0, sizeof cell);
        cell.w_bits = settings[i].w_bits;
        cell.packed = packed;
        cell.gptq = gptq;
        cell.clip_search = w_clip;
        cell.migrate = migrate && settings[i].a_bits >= 16;   /* weight-only rows only */
        cell.int8_down_proj = int8_down;
        cell.group_fallback = group_fallback;
        stage_w = qx_wq_cell_staged(&cell);
        if (stage_w || packed) {   /* a packed file's weights are its codes already: not quantized again */
            q.w_bits = 0;
            q.w_group = 0;
        } else if (q.w_bits) {
            q.w_asym = w_asym;
            q.w_group = group;
        }
        if (q.a_bits) {
            q.a_asym = a_asym;
            q.a_group = a_group;
            if (int8_down) q.a_down_bits = 8;
        }
        q.k_bits = k_of[i] < 16 ? k_of[i] : 0;
        q.v_bits = v_of[i] < 16 ? v_of[i] : 0;
        q.k_group = k_group;
        q.v_group = v_group;
        q.k_sym = k_sym;
        q.v_sym = v_sym;
        q.k_clip = (float)k_clip;
        q.v_clip = (float)v_clip;
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
                    wo.desc.weight.asymmetric = w_asym;
                    wo.desc.weight.group_size = group;
                    wo.desc.weight.clip_search = w_clip ? QUAROT_CLIP_SEARCH_LP : 0;
                    wo.desc.percdamp = percdamp;
                    wo.desc.act_order = act_order;
                    wo.desc.int8_down_proj = int8_down;
                    wo.desc.nsamples = nsamples;
                    wo.desc.migrate = mig;
                    wo.desc.seq_len = seq_len;
                    wo.desc.keep_indivisible = group_fallback;
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
                    qc.quiet = quiet;
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
            if (use_engine) {   /* the inference engine scores the cell itself */
                /* RTN weights: the engine quantizes the store's weights at load (the same RTN as the
                   reference) and runs its integer kernels on them; the stage's weights (GPTQ, clip search,
                   migration, int8 down_proj) would not round-trip, so those run FP32 linears on them */
                qx_fake_quant_opts qe = q;
                if (settings[i].w_bits < 16 && !stage_w) {
                    qe.w_bits = settings[i].w_bits;
                    qe.w_group = group;
                }
                r = packed && i == packed_row ? qx_engine_eval_packed(model_path, &win, NULL, &res, &e)   /* the file's codes, settings, hooks */
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
               model_path, model.source_format[0] ? model.source_format : "?", c->arch, (long long)c->hidden,
               (long long)c->intermediate, (long long)c->n_layers, (long long)c->n_heads,
               (long long)(c->n_kv_heads ? c->n_kv_heads : c->n_heads), (long long)c->vocab);
        printf("tokenizer  %s\n", tok_path);
        {   /* the model's own online hooks (rotate --online), found beside it or given by --hooks */
            quarot_online_list ml;
            if (qx_model_hooks_get(&model, &ml, &e) == QUAROT_OK) {
                char* hp = hooks_opt ? NULL : qx_hooks_path_for(model_path);
                if (ml.count > 0)
                    printf("hooks      %s: %lld online hooks of the model, applied in every forward pass of every column\n",
                           hooks_opt ? hooks_opt : hp ? hp : "?", (long long)ml.count);
                free(hp);
                quarot_online_list_free(&ml);
            }
        }
        if (tokens_path) printf("tokens     %s: %lld ids\n", tokens_path, (long long)n_stream);
        else printf("text       %s: %lu bytes\n", text_path, (unsigned long)text_len);
        if (windowing == QX_WINDOWING_STREAM)
            printf("windows    %lld x seq_len %lld, stream windowing (text encoded once: %lld tokens; [BOS] + %lld consecutive tokens per window)\n",
                   (long long)win.n, (long long)seq_len, (long long)n_stream, (long long)(seq_len - 1));
        else
            printf("windows    %lld, seq_len %lld, docs windowing (%lld of %lld documents split at blank lines, each from [BOS]; longer ones continue in further windows)\n",
                   (long long)win.n, (long long)seq_len, (long long)win.n_docs, (long long)win.n_docs_total);
        printf("scored     %lld tokens\n", (long long)win.n_predicted);
        printf("quant      weights %s%s %s per %s; activations per token %s, clip %.2f%s; KV cache %s\n",
               gptq ? "GPTQ" : "RTN", w_clip ? " with clip search (|err|^2.4)" : "", w_asym ? "asymmetric" : "symmetric",
               group ? "group" : "output channel", a_asym ? "asymmetric" : "symmetric", clip,
               int8_down ? "; down_proj input and weights 8-bit" : "",
               any_kv ? (k_sym && v_sym ? "per token per head symmetric" : (k_sym || v_sym) ? "per token per head, K/V sym/asym as asked" : "per token per head asymmetric") : "FP32");
        if (group) printf("           weight groups of %lld input channels\n", (long long)group);
        if (a_group) printf("           activation groups of %lld channels\n", (long long)a_group);
        if (any_kv && (k_group || v_group || k_clip > 0 || v_clip > 0))
            printf("           K groups %lld, V groups %lld (0 = head_dim); K clip %.2f, V clip %.2f\n", (long long)k_group, (long long)v_group,
                   k_clip > 0 ? k_clip : 1.0, v_clip > 0 ? v_clip : 1.0);
        if (gptq)
            printf("GPTQ       %s: %lld windows of %lld tokens (%s windowing), percdamp %g, block 128%s, sequential (QuaRot's steps q/k/v, o, gate/up, down)\n",
                   calib_path, (long long)nsamples, (long long)seq_len, windowing == QX_WINDOWING_STREAM ? "stream" : "docs", percdamp,
                   act_order ? ", act-order" : "");
        if (packed)
            printf("packed     the file's own setting: %d-bit weights (%s, %s), scored as stored; %lld online hooks from its metadata\n",
                   pst.w_bits, pst.w_quantizer[0] ? pst.w_quantizer : "?", pst.w_group_size ? "groups" : "per output channel",
                   (long long)hooks.count);
        if (want_col[1] && no_online) printf("%-10s no online hooks (--no-online): R1 + R2 folded only\n", "QuaRot");
        print_recipe("QuaRot", recipe);
        if (want_col[1]) qx_rotcheck_summary("QuaRot     ", rq, n_rq);
        if (have_adapt) {
            if (calib_path)
                printf("%-10s stage 1 on %s: %lld windows, %lld tokens; %lld linears (%s), %lld rows of %lld\n", "Adapt", calib_path,
                       (long long)cst.windows, (long long)cst.tokens, (long long)cst.linears, cst.matched, (long long)cst.rows,
                       (long long)model.config.hidden);
            else
                printf("%-10s stage 1 context %s: %lld rows of %lld, %d steps run\n", "Adapt", context_path, (long long)actx.rows,
                       (long long)actx.block, actx.steps_run);
            printf("%-10s stage 1 loss (%s per token): random Hadamard %.6e -> adapted %.6e (%+.2f%%)\n", "", qx_calib_dtype(&actx),
                   actx.start_loss, actx.best_loss, 100.0 * qx_calib_reduction(&actx));
            print_recipe("", adapt_recipe);
            qx_rotcheck_summary("Adapt      ", ra, n_ra);
        }
        printf("\n");
        qx_ek_table_print(stdout, &table);
        if (!no_fp32) {   /* FP32 to 9 digits: a rotated model's must equal the original's (function preserved) */
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
    if (have_actx) {
        quarot_online_list_free(&adapt_hooks);
        quarot_adapt_context_free(&actx);
    }
    if (have_model) qx_store_free(&model);
    return rc;
}
