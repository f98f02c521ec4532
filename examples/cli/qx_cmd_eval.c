/* qx_cmd_eval.c - `quarot eval`: perplexity in FP32 and under fake quantization, without rotation
   and with QuaRot, as one table.

   The model is loaded once (qx_cli_load_model), rotated once (qx_ek_quarot: R1 + R2 folded, online
   Hadamard before down_proj and across the heads before o_proj, R3 on q/k when the KV cache is
   quantized), the text is cut into windows once (qx_eval.h's stream or docs windowing), and then
   every (setting, variant) cell builds its quantized forward pass once and scores every window.
   Variants are the table's columns: "no rotation", "QuaRot" and, with --context (a stage-1 file) or
   --calib-text (stage 1 run here, qx_calib.h), "Adapt": Adapt Rotation stage 2 (qx_ek_rotate), the
   same recipe as the QuaRot column with R1 = H*R learned from activations. */
#include "qx_calib.h"
#include "qx_cli.h"
#include "qx_evalkit.h"
#include "qx_layerwise.h"
#include "qx_threads.h"

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
        "  --text FILE           evaluation text (required)\n"
        "  --tokenizer FILE      llama2.c tokenizer (tokenizer.bin format); default: tok<vocab>.bin,\n"
        "                        tok512.bin or tokenizer.bin in the model's directory\n"
        "  --w-bits N[,N..]      weight bits (2..8, 16 = FP): RTN symmetric per output channel\n"
        "  --a-bits N[,N..]      activation bits (2..8, 16 = FP): per token symmetric, at every decoder-\n"
        "                        linear input\n"
        "  --kv-bits N[,N..]     KV-cache bits (2..8, 16 = FP): per token per head asymmetric\n"
        "                        Without any of the three: rows FP32, W4A4 and W8A4. With any: FP32 plus\n"
        "                        every combination of the lists (a part not given stays FP).\n"
        "  --group-size N        weights per group of N input channels instead of per output channel\n"
        "  --clip R              activation clip ratio in (0, 1] (default 1.0; QuaRot often uses 0.9)\n"
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
        "  --seed N              seed of the random Hadamard signs (default 0)\n"
        "  --threads N           threads for the forward pass and stage 1 (default: every core); the\n"
        "                        results are the same for any N\n"
        "  --quiet               no progress on stderr\n"
        "  --help                this text\n");
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

int qx_cmd_eval(int argc, char** argv) {
    qx_cli cli;
    const char *model_path = NULL, *text_path = NULL, *tok_opt = NULL, *v = NULL;
    const char *context_path = NULL, *calib_path = NULL, *calib_dtype = "int4", *calib_layers = NULL;
    int64_t calib_windows = 0;
    qx_store adapt;
    quarot_online_list adapt_hooks;
    quarot_adapt_context actx;
    qx_calib_stats cst;
    char adapt_recipe[2048];
    int have_adapt = 0, have_actx = 0;
    int w_list[8] = {16}, a_list[8] = {16}, kv_list[8] = {16}, n_w = 0, n_a = 0, n_kv = 0;
    int64_t group = 0, windows = 0, seq_len = 256, seed = 0, threads = 0;
    qx_pool* pool = NULL;
    quarot_env penv;
    double clip = 1.0;
    int windowing = QX_WINDOWING_STREAM, quiet = 0, i, j, k, rc = QX_EXIT_OK, any_kv = 0;
    qx_ek_setting settings[QX_EK_MAX_ROWS];
    int n_settings = 0;
    qx_store model, rot;
    quarot_online_list hooks;
    qx_tokenizer tok;
    char tok_path[4096], looked[4096 * 3 + 64], recipe[2048];
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
        else if ((got = EVAL_OPT("--tokenizer")) != 0) { if (got < 0) return QX_EXIT_USAGE; tok_opt = v; }
        else if ((got = EVAL_OPT("--w-bits")) != 0) { if (got < 0 || !(n_w = parse_bits(&cli, "--w-bits", v, w_list, 8))) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--a-bits")) != 0) { if (got < 0 || !(n_a = parse_bits(&cli, "--a-bits", v, a_list, 8))) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--kv-bits")) != 0) { if (got < 0 || !(n_kv = parse_bits(&cli, "--kv-bits", v, kv_list, 8))) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--group-size")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--group-size", v, 1, 1 << 24, &group)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--clip")) != 0) {
            if (got < 0 || !qx_cli_float(&cli, "--clip", v, 0.0, 1.0, &clip)) return QX_EXIT_USAGE;
            if (!(clip > 0.0)) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--clip: '%s' is not a number in (0, 1]", v);
        }
        else if ((got = EVAL_OPT("--windows")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--windows", v, 0, INT64_C(1) << 40, &windows)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--seq-len")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--seq-len", v, 2, 1 << 20, &seq_len)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--seed")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--seed", v, 0, INT64_MAX, &seed)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--context")) != 0) { if (got < 0) return QX_EXIT_USAGE; context_path = v; }
        else if ((got = EVAL_OPT("--calib-text")) != 0) { if (got < 0) return QX_EXIT_USAGE; calib_path = v; }
        else if ((got = EVAL_OPT("--calib-windows")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--calib-windows", v, 0, INT64_C(1) << 40, &calib_windows)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--calib-quant-dtype")) != 0) { if (got < 0) return QX_EXIT_USAGE; calib_dtype = v; }
        else if ((got = EVAL_OPT("--calib-layer-type")) != 0) { if (got < 0) return QX_EXIT_USAGE; calib_layers = v; }
        else if ((got = EVAL_OPT("--windowing")) != 0) { if (got < 0 || !qx_cli_windowing(&cli, v, &windowing)) return QX_EXIT_USAGE; }
        else if ((got = EVAL_OPT("--threads")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--threads", v, 1, 256, &threads)) return QX_EXIT_USAGE; }
        else return qx_cli_fail(&cli, QX_EXIT_USAGE, "unknown option '%s' (see quarot eval --help)", a);
#undef EVAL_OPT
    }
    cli.quiet = quiet;
    if (!model_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot eval MODEL --text FILE; see --help)");
    if (!text_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no --text FILE given (see quarot eval --help)");
    if (context_path && calib_path)
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
    if (!n_w && !n_a && !n_kv) {
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
    for (i = 0; i < n_settings; ++i)
        if (settings[i].kv_bits < 16) any_kv = 1;

    /* Inputs: model, tokenizer, text (each failure is one line naming the file). */
    memset(&lo, 0, sizeof lo);
    {
        FILE* tf = fopen(text_path, "rb");
        if (!tf) return qx_cli_fail(&cli, QX_EXIT_INPUT, "%s: cannot open the text: %s", text_path, strerror(errno));
        fclose(tf);
    }
    r = qx_cli_load_model(model_path, &lo, &model, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg);
    if (threads == 0) threads = qx_cpu_count();
    if (threads > 1) pool = qx_pool_create((int)threads);
    qx_pool_env(pool, &penv);
    have_model = 1;
    memset(&win, 0, sizeof win);
    quarot_online_list_init(&hooks, NULL);
    quarot_online_list_init(&adapt_hooks, NULL);
    quarot_adapt_context_init(&actx, NULL);
    have_actx = 1;
    memset(&cst, 0, sizeof cst);
    if (context_path) {   /* a stage-1 context: read (and validated) before any work */
        r = qx_calib_context_load(context_path, &actx, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg); goto done; }
    }
    memset(&tok, 0, sizeof tok);
    if (model.config.max_seq > 0 && seq_len > model.config.max_seq) {
        rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--seq-len %lld is longer than the model's context (%lld tokens)",
                         (long long)seq_len, (long long)model.config.max_seq);
        goto done;
    }
    if (group) {
        /* every quantized linear's input width must split into whole groups: say so before any work */
        const quarot_model_config* c = &model.config;
        int64_t hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
        if (c->hidden % group || c->intermediate % group || (c->n_heads * hd) % group) {
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "--group-size %lld does not divide the layer widths (hidden %lld, intermediate %lld, heads x head_dim %lld)",
                             (long long)group, (long long)c->hidden, (long long)c->intermediate, (long long)(c->n_heads * hd));
            goto done;
        }
    }
    if (tok_opt) {
        snprintf(tok_path, sizeof tok_path, "%s", tok_opt);
    } else if (!qx_ek_find_tokenizer(model_path, model.config.vocab, tok_path, sizeof tok_path, looked, sizeof looked)) {
        rc = qx_cli_fail(&cli, QX_EXIT_INPUT, "%s: no tokenizer found (looked for %s); pass --tokenizer FILE (llama2.c tokenizer.bin format)",
                         model_path, looked);
        goto done;
    }
    r = qx_tokenizer_load(&tok, tok_path, (int32_t)model.config.vocab, &e);
    if (r != QUAROT_OK) {
        rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg);
        goto done;
    }
    have_tok = 1;
    r = qx_ek_read_file(text_path, &text, &text_len, &e);
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }

    /* Windows, once for every cell. */
    memset(&po, 0, sizeof po);
    po.seq_len = seq_len;
    po.max_windows = windows;
    qx_cli_phase(&cli);
    if (windowing == QX_WINDOWING_STREAM) {
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
    qx_cli_phase(&cli);
    r = qx_ek_quarot(&model, (uint64_t)seed, any_kv, &rot, &hooks, recipe, sizeof recipe, on_layer, &cli, &e);
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: %s", model_path, e.msg); goto done; }
    have_rot = 1;
    qx_cli_progress_end(&cli, "QuaRot");

    /* Adapt Rotation: stage 1 here (--calib-text) or from a file (--context), then stage 2 once. */
    if (calib_path) {
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
        co.env = &penv;
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
    if (actx.matrix) {
        qx_cli_phase(&cli);
        r = qx_ek_rotate(&model, (uint64_t)seed, &actx, any_kv, &adapt, &adapt_hooks, adapt_recipe, sizeof adapt_recipe, on_layer_adapt, &cli, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", model_path, e.msg); goto done; }
        have_adapt = 1;
        qx_cli_progress_end(&cli, "Adapt Rotation stage 2");
    }

    /* The columns. Adapt Rotation: one more variant here (its store and hooks), nothing else. */
    variants[n_variants].name = "no rotation";
    variants[n_variants].store = &model;
    variants[n_variants++].hooks = NULL;
    variants[n_variants].name = "QuaRot";
    variants[n_variants].store = &rot;
    variants[n_variants++].hooks = &hooks;
    if (have_adapt) {
        variants[n_variants].name = "Adapt";
        variants[n_variants].store = &adapt;
        variants[n_variants++].hooks = &adapt_hooks;
    }

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
        qx_ek_setting_quant(&settings[i], group, clip, &q);
        for (j = 0; j < n_variants && rc == QX_EXIT_OK; ++j) {
            qx_ek_forward ef;
            qx_ppl_result res;
            double t0 = qx_cli_now();
            r = qx_ek_forward_init_env(&ef, variants[j].store, variants[j].hooks, &q, NULL, NULL, &penv, &e);
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
            if (qx_cli_now() - cli.t0 >= 1.0)
                qx_cli_info(&cli, "%s, %s: perplexity %.4f (%.1f s)", settings[i].label, variants[j].name, res.ppl, qx_cli_now() - t0);
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
        printf("text       %s: %lu bytes\n", text_path, (unsigned long)text_len);
        if (windowing == QX_WINDOWING_STREAM)
            printf("windows    %lld x seq_len %lld, stream windowing (text encoded once: %lld tokens; [BOS] + %lld consecutive tokens per window)\n",
                   (long long)win.n, (long long)seq_len, (long long)n_stream, (long long)(seq_len - 1));
        else
            printf("windows    %lld, seq_len %lld, docs windowing (%lld of %lld documents split at blank lines, each from [BOS]; longer ones continue in further windows)\n",
                   (long long)win.n, (long long)seq_len, (long long)win.n_docs, (long long)win.n_docs_total);
        printf("scored     %lld tokens\n", (long long)win.n_predicted);
        printf("quant      weights RTN symmetric per %s; activations per token symmetric, clip %.2f; KV cache %s\n",
               group ? "group" : "output channel", clip, any_kv ? "per token per head asymmetric" : "FP32");
        if (group) printf("           weight groups of %lld input channels\n", (long long)group);
        print_recipe("QuaRot", recipe);
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
        }
        printf("\n");
        qx_ek_table_print(stdout, &table);
        fflush(stdout);
    }
    qx_cli_info(&cli, "memory: peak resident %.1f MiB (layer-wise: one decoder layer in f32 at a time)", qx_lw_peak_rss_mib());

done:
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
