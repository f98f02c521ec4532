/* qx_cmd_calibrate.c - `quarot calibrate MODEL --text FILE -o CONTEXT`: Adapt Rotation stage 1.

   The model is loaded (qx_load_model), its norms are fused on a copy, the calibration text runs
   through the reference forward pass with the capture hook, and quarot_adapt_stage1 learns R (see
   qx_calib.h for the pipeline). The per-step loss goes to stderr, the summary (the final loss
   beside the starting random Hadamard's) to stdout, and the context file to CONTEXT through a
   temporary renamed into place. `quarot rotate --rotation adapt --context CONTEXT` is stage 2. */
#include "eval/qx_calib.h"
#include "cli/qx_cli.h"
#include "cli/qx_cli_hooks.h"
#include "eval/qx_evalkit.h"
#include "pipeline/qx_layerwise.h"
#include "support/qx_file.h"
#include "cli/qx_rotcheck.h"
#include "support/qx_threads.h"
#include "tokenizer/qx_tok_load.h"
#include "formats/qx_load.h"

#include <stdlib.h>
#include <string.h>

static void calibrate_usage(FILE* f) {
    fprintf(f,
        "usage: quarot calibrate MODEL --text FILE -o CONTEXT [options]\n"
        "\n"
        "Adapt Rotation stage 1 (msModelSlim's adapt_rotation, stage: 1): learn the hidden-size rotation from\n"
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
        "\n"
        "options (defaults as msModelSlim's):\n"
        "  --text FILE           calibration text (required): raw text, or .jsonl with one JSON value per\n"
        "                        line (a string, or an object: its \"text\" member, else its first string\n"
        "                        member), each record its own sample\n"
        "  -o, --output CONTEXT  the context file to write (required)\n"
        );
    fputs(
        "  --steps N             optimizer steps, 1..1000 (default 20)\n"
        "  --quant-dtype T       int4 (default) or int8: the activation quantizer the rotation is tuned for\n"
        "                        (match the downstream activation bits: int4 for W4A4, int8 for W8A8)\n"
        "  --layer-type LIST     comma-separated substrings of linear names whose inputs are captured\n"
        "                        (default up_proj; e.g. up_proj,q_proj). Only linears reading the residual\n"
        "                        stream (q/k/v_proj, gate/up_proj) may match\n"
        "  --block-size N        size of R: -1 = the full hidden size (default), else a power of two\n"
        "                        dividing hidden (block-diagonal H*R, one R for every block)\n"
        "  --max-samples N       rows kept per matched linear, 1..100000 (default 2048)\n"
        "  --seed N              seed of H's random signs (default 0; QuaRot's --seed gives the same H)\n"
        "  --seq-len N           calibration window length in tokens, BOS included (default 256)\n"
        "  --windows N           use only the first N windows (default 0 = all)\n"
        "  --windowing stream|docs  how raw text becomes windows, as in quarot eval (default stream)\n"
        "  --tokenizer FILE      GGUF, tokenizer.json or llama2.c tokenizer.bin (default: the model's own, as\n"
        "                        quarot eval: GGUF metadata, tokenizer.json, tok*.bin beside MODEL)\n"
        "  --tokens FILE         token ids instead of --text (whitespace separated or a JSON array); stream\n"
        "                        windows, with the tokenizer's BOS when one is found\n"
        QX_CLI_HOOKS_HELP
        "  --threads N           threads for the forward pass and the optimizer (default: every core);\n"
        "                        the results are the same for any N\n", f);
    fputs("  --strict              a fallback of H is an error instead of a warning (as quarot rotate: no Hadamard\n"
          "                        of the block size, so blocks smaller than 64, e.g. hidden 90 -> 45 blocks of 2x2)\n", f);
    fputs(
        "  --force               replace an existing CONTEXT\n"
        "  --quiet               no progress and no per-step loss on stderr\n"
        "  --help                this text\n"
        "\n"
        "stderr: progress and one line per optimizer step (loss, best loss, polar iterations).\n"
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
        "linear that does not read the residual stream; text shorter than one window), 5 internal.\n", f);
}

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

int qx_cmd_calibrate(int argc, char** argv) {
    qx_cli cli;
    const char *model_path = NULL, *text_path = NULL, *out_path = NULL, *tok_opt = NULL, *v, *layer_arg = NULL, *tokens_path = NULL;
    int32_t* ids = NULL;
    int64_t n_ids = 0;
    const char* hooks_opt = NULL;   /* --hooks FILE */
    const char* dtype = "int4";
    int64_t steps = 20, block = -1, max_samples = 2048, seed = 0, seq_len = 256, windows = 0, threads = 0;
    int windowing = QX_WINDOWING_STREAM, quiet = 0, force = 0, i, k, rc = QX_EXIT_OK, strict = 0, n_dims = 0;
    qx_rotcheck_dim dims[8];   /* what H (stage 1's starting rotation) is built from (no silent fallbacks) */
    char* layer_copy = NULL;
    const char** layer_list = NULL;
    int64_t n_layer = 0;
    static const char* const default_layer[1] = {"up_proj"};
    qx_store model;
    qx_tokenizer tok;
    qx_calib_text text;
    qx_windows win;
    qx_calib_opts co;
    qx_calib_stats st;
    quarot_adapt_context ctx;
    quarot_env env;
    qx_pool* pool = NULL;
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    char tok_path[4096];
    calib_progress cp;
    int have_model = 0, have_tok = 0, have_text = 0, have_win = 0;

    for (i = 1; i < argc; ++i)
        if (strcmp(argv[i], "--quiet") == 0 || strcmp(argv[i], "-q") == 0) quiet = 1;
    qx_cli_init(&cli, "calibrate", quiet);
    for (i = 1; i < argc; ++i) {
        const char* a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { calibrate_usage(stdout); return QX_EXIT_OK; }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) continue;
        if (strcmp(a, "--force") == 0) { force = 1; continue; }
        if (strcmp(a, "--strict") == 0) { strict = 1; continue; }
        if (a[0] != '-' || a[1] == '\0') {
            if (model_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "unexpected argument '%s' (one MODEL; see quarot calibrate --help)", a);
            model_path = a;
            continue;
        }
#define CAL_OPT(name) ((k = qx_cli_opt(&cli, argc, argv, &i, name, &v)) != 0)
        if (CAL_OPT("--text")) { if (k < 0) return QX_EXIT_USAGE; text_path = v; }
        else if (CAL_OPT("--tokens")) { if (k < 0) return QX_EXIT_USAGE; tokens_path = v; }
        else if (CAL_OPT("-o") || CAL_OPT("--output")) { if (k < 0) return QX_EXIT_USAGE; out_path = v; }
        else if (CAL_OPT("--tokenizer")) { if (k < 0) return QX_EXIT_USAGE; tok_opt = v; }
        else if (CAL_OPT("--hooks")) { if (k < 0) return QX_EXIT_USAGE; hooks_opt = v; }
        else if (CAL_OPT("--steps")) { if (k < 0 || !qx_cli_int(&cli, "--steps", v, 1, 1000, &steps)) return QX_EXIT_USAGE; }
        else if (CAL_OPT("--quant-dtype")) { if (k < 0) return QX_EXIT_USAGE; dtype = v; }
        else if (CAL_OPT("--layer-type")) { if (k < 0) return QX_EXIT_USAGE; layer_arg = v; }
        else if (CAL_OPT("--block-size")) {
            if (k < 0 || !qx_cli_int(&cli, "--block-size", v, -1, (int64_t)1 << 30, &block)) return QX_EXIT_USAGE;
            if (block != -1 && (block < 1 || (block & (block - 1))))
                return qx_cli_fail(&cli, QX_EXIT_USAGE, "--block-size: %lld is neither -1 nor a positive power of two", (long long)block);
        }
        else if (CAL_OPT("--max-samples")) { if (k < 0 || !qx_cli_int(&cli, "--max-samples", v, 1, 100000, &max_samples)) return QX_EXIT_USAGE; }
        else if (CAL_OPT("--seed")) { if (k < 0 || !qx_cli_int(&cli, "--seed", v, 0, INT64_MAX, &seed)) return QX_EXIT_USAGE; }
        else if (CAL_OPT("--seq-len")) { if (k < 0 || !qx_cli_int(&cli, "--seq-len", v, 2, 1 << 20, &seq_len)) return QX_EXIT_USAGE; }
        else if (CAL_OPT("--windows")) { if (k < 0 || !qx_cli_int(&cli, "--windows", v, 0, INT64_C(1) << 40, &windows)) return QX_EXIT_USAGE; }
        else if (CAL_OPT("--threads")) { if (k < 0 || !qx_cli_int(&cli, "--threads", v, 1, 256, &threads)) return QX_EXIT_USAGE; }
        else if (CAL_OPT("--windowing")) { if (k < 0 || !qx_cli_windowing(&cli, v, &windowing)) return QX_EXIT_USAGE; }
        else return qx_cli_fail(&cli, QX_EXIT_USAGE, "unknown option '%s' (see quarot calibrate --help)", a);
#undef CAL_OPT
    }
    if (!model_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot calibrate MODEL --text FILE -o CONTEXT)");
    if (!text_path && !tokens_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no --text FILE (or --tokens FILE) given (the calibration text; see quarot calibrate --help)");
    if (text_path && tokens_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--text and --tokens both give the calibration tokens: choose one");
    if (tokens_path && windowing == QX_WINDOWING_DOCS) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--tokens has no documents: use --windowing stream");
    if (tokens_path) text_path = tokens_path;
    memset(&text, 0, sizeof text);
    if (!out_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no -o CONTEXT given (the file stage 2 reads; see quarot calibrate --help)");
    if (layer_arg && !parse_layer_types(&cli, layer_arg, &layer_copy, &layer_list, &n_layer)) { rc = QX_EXIT_USAGE; goto done; }
    if (!qx_path_exists(text_path) || qx_is_dir(text_path)) {   /* before the model: the cheap mistake first */
        rc = qx_cli_fail(&cli, QX_EXIT_INPUT, "%s: %s (the calibration text)", text_path, qx_is_dir(text_path) ? "is a directory" : "no such file");
        goto done;
    }
    if (qx_is_dir(out_path)) { rc = qx_cli_fail(&cli, QX_EXIT_OUTPUT, "%s: is a directory (expected a file name for the context)", out_path); goto done; }
    if (!force && qx_path_exists(out_path)) { rc = qx_cli_fail(&cli, QX_EXIT_OUTPUT, "%s: exists already; use --force to replace it", out_path); goto done; }

    memset(&co, 0, sizeof co);
    co.adapt.steps = (int)steps;
    co.adapt.quant_dtype = dtype;
    co.adapt.layer_type = layer_list ? layer_list : default_layer;
    co.adapt.n_layer_type = layer_list ? n_layer : 1;
    co.adapt.block_size = block;
    co.adapt.max_samples = max_samples;
    co.adapt.seed = (uint64_t)seed;

    /* inputs */
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(model_path, &lo, &model, &e);
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg); goto done; }
    have_model = 1;
    if ((rc = qx_cli_model_hooks(&cli, &model, model_path, hooks_opt)) != QX_EXIT_OK) goto done;   /* the model's own hooks */
    /* the optimizer's own checks (quant_dtype, block_size against hidden) before any work */
    r = qx_calib_check(&co.adapt, model.config.hidden, &e);
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_USAGE, "%s", e.msg); goto done; }
    {   /* H of the block (R1 of stage 2): rotate's rule, warned or refused before any work */
        qx_rotcheck_opts rco;
        memset(&rco, 0, sizeof rco);
        rco.rotation = QUAROT_ROTATION_ADAPT;
        rco.block_size = block > 0 ? block : 0;
        rco.no_r2 = 1;
        if ((rc = qx_rotcheck_cli(&cli, model_path, NULL, &model.config, &rco, strict, dims, 8, &n_dims)) != QX_EXIT_OK) goto done;
    }
    if (model.config.max_seq > 0 && seq_len > model.config.max_seq) {
        rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--seq-len %lld is longer than the model's context (%lld tokens)", (long long)seq_len,
                         (long long)model.config.max_seq);
        goto done;
    }
    r = qx_tokenizer_for_model(&tok, model_path, tok_opt, model.config.vocab, tok_path, sizeof tok_path, &e);
    if (r != QUAROT_OK && (!tokens_path || r != QUAROT_ERR_NOT_FOUND)) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
    have_tok = r == QUAROT_OK;
    if (!have_tok) snprintf(tok_path, sizeof tok_path, "none (--tokens; windows without BOS)");
    if (tokens_path) {
        qx_ppl_opts po;
        r = qx_tokens_read(tokens_path, model.config.vocab, &ids, &n_ids, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
        memset(&po, 0, sizeof po);
        po.seq_len = seq_len;
        po.max_windows = windows;
        po.bos = have_tok ? qx_tokenizer_window_bos(&tok) : -1;
        r = qx_windows_stream(&win, ids, n_ids, &po, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", tokens_path, e.msg);
            goto done;
        }
        have_win = 1;
        goto windows_ready;
    }
    r = qx_calib_text_load(text_path, &text, &e);
    if (r != QUAROT_OK) {
        rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT,
                         "%s", e.msg);
        goto done;
    }
    have_text = 1;
    qx_cli_phase(&cli);
    r = qx_calib_windows(&text, &tok, windowing, seq_len, windows, &win, &e);
    if (r != QUAROT_OK) {
        if (r == QUAROT_ERR_INVALID_ARGUMENT)
            rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s: too short for one calibration window of %lld tokens (%s)", text_path, (long long)seq_len, e.msg);
        else
            rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: %s", text_path, e.msg);
        goto done;
    }
    have_win = 1;
    qx_cli_progress_end(&cli, "tokenizing");
windows_ready:

    /* stage 1 */
    if (threads == 0) threads = qx_cpu_count();
    if (threads > 1) pool = qx_pool_create((int)threads);
    qx_pool_env(pool, &env);
    co.env = &env;
    memset(&cp, 0, sizeof cp);
    cp.cli = &cli;
    cp.steps = (int)steps;
    cp.quiet = quiet;
    co.on_window = on_window;
    co.on_optimize = on_optimize;
    co.user = &cp;
    co.adapt.progress = on_step;
    co.adapt.user_data = &cp;
    quarot_adapt_context_init(&ctx, NULL);
    qx_cli_phase(&cli);
    r = qx_calib_stage1(&model, &win, &co, &ctx, &st, &e);
    if (r != QUAROT_OK) {
        int code = r == QUAROT_ERR_OUT_OF_MEMORY || r == QUAROT_ERR_INTERNAL ? QX_EXIT_INTERNAL
                 : r == QUAROT_ERR_NONFINITE || r == QUAROT_ERR_PARSE ? QX_EXIT_INPUT : QX_EXIT_PROCESS;
        rc = qx_cli_fail(&cli, code, "%s: %s", model_path, e.msg);
        quarot_adapt_context_free(&ctx);
        goto done;
    }
    qx_cli_progress_end(&cli, "optimizer");

    /* the report, then the file */
    {
        const quarot_model_config* c = &model.config;
        printf("calibrated %s (%s, %s, hidden %lld, %lld layers) on %s\n", model_path, model.source_format[0] ? model.source_format : "?",
               c->arch, (long long)c->hidden, (long long)c->n_layers, text_path);
        printf("  text       %lld windows, %lld tokens (%s%s, seq_len %lld), tokenizer %s\n", (long long)st.windows, (long long)st.tokens,
               text.jsonl ? "jsonl records" : windowing == QX_WINDOWING_STREAM ? "stream" : "docs",
               text.jsonl ? "" : " windowing", (long long)seq_len, tok_path);
        printf("  captured   %lld linears (%s), after norm fusion: %lld rows of %lld (at most %lld per linear)\n", (long long)st.linears,
               st.matched, (long long)st.rows, (long long)c->hidden, (long long)max_samples);
        printf("  optimizer  %s per-token symmetric, block %lld (Hadamard blocks of %lld, seed %llu), %d steps run of %d, best step %d\n",
               qx_calib_dtype(&ctx), (long long)ctx.block, (long long)ctx.hadamard_block, (unsigned long long)ctx.seed, ctx.steps_run,
               ctx.steps, ctx.best_step);
        qx_rotcheck_summary("  ", dims, n_dims);
        printf("  loss       random Hadamard %.6e -> adapted %.6e (%+.2f%%)\n", ctx.start_loss, ctx.best_loss, 100.0 * qx_calib_reduction(&ctx));
        printf("  time       forward %.2f s, optimizer %.2f s (%d thread%s)\n", st.forward_s, st.optimize_s, qx_pool_threads(pool),
               qx_pool_threads(pool) > 1 ? "s" : "");
        printf("  memory     peak resident %.1f MiB (layer-wise: one decoder layer in f32 at a time)\n", qx_lw_peak_rss_mib());
        fflush(stdout);
    }
    r = qx_calib_context_save(&ctx, out_path, force, &e);
    if (r != QUAROT_OK) rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_OUTPUT, "%s", e.msg);
    else {
        printf("  wrote      %s (stage 2: quarot rotate MODEL OUT --rotation adapt --context %s)\n", out_path, out_path);
    }
    quarot_adapt_context_free(&ctx);
done:
    qx_pool_destroy(pool);
    if (have_win) qx_windows_free(&win);
    if (have_text) qx_calib_text_free(&text);
    if (have_tok) qx_tokenizer_free(&tok);
    if (have_model) qx_store_free(&model);
    free(ids);
    free(layer_copy);
    free(layer_list);
    return rc;
}
