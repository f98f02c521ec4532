/* qx_cmd_run.c - `quarot run CONFIG.yaml --model IN --save OUT`: an msModelSlim-style YAML
   configuration of the rotation processors, run as msModelSlim's multi-stage service would:
   spec.prior's adapt_rotation stage 1 on its dataset first (Adapt Rotation stage 1, in memory),
   then spec.process's rotation processor (quarot, or adapt_rotation stage 2 using stage 1's
   context), writing the rotated model like `quarot rotate` (same formats, hook file when online).
   SpinQuant (quarot's own processor type `spinquant`): in spec.prior it learns R1 and one R2 per
   layer on its dataset (eval/qx_spin.h, in memory); in spec.process it folds them (or those of its
   `rotations:` file).
   The configuration is read by qx_runcfg (a strict YAML subset, qx_yaml.h); see its header for the
   keys and their defaults. */
#include "eval/qx_calib.h"
#include "eval/qx_spin.h"
#include "cli/qx_cli.h"
#include "eval/qx_evalkit.h"
#include "support/qx_file.h"
#include "cli/qx_rotate_job.h"
#include "cli/qx_runcfg.h"
#include "support/qx_threads.h"
#include "tokenizer/qx_tok_load.h"
#include "formats/qx_load.h"
#include "cli/qx_opts.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

typedef struct run_opts {
    const char *config, *model, *save;
    int skip;
    qx_opts_common c;
    qx_opts_input in;
    qx_opts_rotation rot;
    qx_opts_windowing w;
} run_opts;

static const qx_opt run_table[] = {
    {QX_OPT_STRING, "--model", .arg = "IN", QX_AT(run_opts, model), .help = "the checkpoint to rotate (required; any format quarot rotate reads)"},
    {QX_OPT_STRING, "--save", .arg = "OUT", QX_AT(run_opts, save), .help = "the rotated checkpoint (required; same rules as quarot rotate's OUT)"},
    {QX_OPT_FLAG, "--skip-unsupported", QX_AT(run_opts, skip),
     .help = "skip processors other than quarot / adapt_rotation and spec.save, warning"},
    {QX_OPT_END}
};
static const qx_opt_group run_group = {"options:", run_table, NULL};

const qx_opts_cmd qx_cmd_run_spec = {
    .name = "run",
    .synopsis = "CONFIG.yaml --model IN --save OUT [options]",
    .about = "Run the rotation processors of an msModelSlim configuration (apiversion modelslim_v1 or\n"
             "modelslim_v1_multi_stage) on the checkpoint IN and write the rotated checkpoint to OUT in IN's\n"
             "format, as `quarot rotate` does (online hook file beside it when online: True):\n"
             "  spec.prior:   - process: [adapt_rotation, stage: 1, steps, quant_dtype, layer_type, block_size,\n"
             "                            max_samples]\n"
             "                  dataset: FILE   (.txt raw text or .jsonl: each line a string or an object whose\n"
             "                                  \"text\" member - else its first string member - is one sample;\n"
             "                                  relative to CONFIG's folder; default spec.dataset)\n"
             "  spec.process: - quarot                      (online, block_size, max_tp_size,\n"
             "                                               down_proj_online_layers, export_extra_info)\n"
             "                - adapt_rotation, stage: 2    (online, block_size, max_tp_size,\n"
             "                                               down_proj_online_layers): R1 = H*R of stage 1\n"
             "Defaults are msModelSlim's: steps 20, quant_dtype int4, layer_type [up_proj], block_size -1,\n"
             "max_samples 2048, online False, max_tp_size 4, down_proj_online_layers [] (with online: True only\n"
             "the listed layers get the online down_proj rotation; [] = none, the heads rotation before o_proj\n"
             "is always added), export_extra_info True (no effect: quarot writes no extra files). For stage 2,\n"
             "block_size -1 means stage 1's block; another value must equal it. Stage 1 runs as\n"
             "`quarot calibrate` (per-step loss on stderr), in memory; the result equals calibrate + rotate\n"
             "with the same settings. --context FILE gives a configuration whose adapt_rotation stage 2 has no\n"
             "stage 1 in spec.prior its stage-1 context; --seed seeds the random Hadamard of stage 1's H and of\n"
             "quarot's R1; --tokens, --seq-len, --windows and --windowing shape stage 1's windows.\n"
             "\n"
             "The YAML is read strictly (block mappings and sequences, [flow] lists, quoted and plain scalars,\n"
             "comments, True/False, anchors & aliases; no tags, block scalars, merge keys or multi-line\n"
             "values): an unknown key, a value of the wrong type or a malformed line is an error naming the key\n"
             "and the line. Other processors (autoround_quant, linear_quant, ...) and spec.save entries are\n"
             "refused, since quarot does not quantize or save in msModelSlim's formats, unless\n"
             "--skip-unsupported skips them with a warning. metadata, spec.runner and top-level templates with\n"
             "an anchor (`default_w4a4_dynamic: &default_w4a4_dynamic ...`) are accepted and not used.\n",
    .operands = {{"CONFIG.yaml", offsetof(run_opts, config)}},
    .uses = {{&run_group, 0, 0, NULL},
             {&qx_opts_rotation_group, offsetof(run_opts, rot), QX_ROTATION_CONTEXT | QX_ROTATION_SEED, NULL},
             {&qx_opts_input_group, offsetof(run_opts, in), QX_INPUT_TOKENIZER | QX_INPUT_TOKENS, NULL},
             {&qx_opts_windowing_group, offsetof(run_opts, w), 0, NULL},
             {&qx_opts_common_group, offsetof(run_opts, c), QX_COMMON_THREADS | QX_COMMON_QUIET_Q | QX_COMMON_FORCE, NULL}},
    .epilog = "Memory (layer-wise): stage 1 as quarot calibrate, stage 2 and spec.save as quarot rotate: the model\n"
              "stays mapped in its stored dtype and one decoder layer is held in f32 at a time (plus the\n"
              "embeddings and lm_head); the summary reports the peak resident set.\n"
              "Exit codes: 0 ok, 1 usage, 2 input (model, dataset or tokenizer missing or malformed; the YAML\n"
              "malformed or asking for something quarot does not run), 3 output (exists without --force,\n"
              "cannot be written), 4 processing (e.g. layer_type matching no linear), 5 internal.\n",
};

static void on_warn(void* user, const char* msg) {
    (void)user;
    fprintf(stderr, "quarot run: warning: %s\n", msg);
}

typedef struct run_progress {
    qx_cli* cli;
    int steps;
} run_progress;

static void on_window(void* user, int64_t done, int64_t total) {
    qx_cli_progress(((run_progress*)user)->cli, done, total, "stage 1: calibration window");
}

static void on_optimize(void* user) {
    run_progress* p = (run_progress*)user;
    qx_cli_progress_end(p->cli, "stage 1: calibration forward pass");
    qx_cli_phase(p->cli);
}

static void on_step(void* user, int step, double loss, double best, int iters) {
    run_progress* p = (run_progress*)user;
    if (step == 0) qx_cli_info(p->cli, "stage 1: step %2d/%d  loss %.6e  (random Hadamard, R = I)", step, p->steps, loss);
    else qx_cli_info(p->cli, "stage 1: step %2d/%d  loss %.6e  best %.6e  (%d polar iterations)", step, p->steps, loss, best, iters);
}

static void on_spin_step(void* user, const quarot_train_step_info* in) {
    qx_cli* cli = (qx_cli*)user;
    qx_cli_info(cli, "spinquant step %3d/%d  loss %.6f  lr %.4f  orthogonality %.1e", in->step, in->steps, in->loss, in->lr, in->orth_error);
}

/* Stage 1's working state; run_s1_free frees what was built. */
typedef struct run_s1 {
    const qx_runcfg_stage1* s1;
    const char* pats[64];          /* layer_type */
    qx_calib_opts co;
    qx_store model;
    qx_tokenizer tok;              /* have_tok */
    qx_calib_text text;            /* have_text */
    qx_windows win;                /* have_win */
    int32_t* ids;                  /* --tokens */
    int64_t n_ids;
    qx_pool* pool;
    int have_tok, have_text, have_win;
} run_s1;

static void run_s1_free(run_s1* w) {
    qx_pool_destroy(w->pool);
    if (w->have_win) qx_windows_free(&w->win);
    if (w->have_text) qx_calib_text_free(&w->text);
    if (w->have_tok) qx_tokenizer_free(&w->tok);
    free(w->ids);
    qx_store_free(&w->model);
}

/* adapt_rotation stage 1's settings from the configuration (layer_type up_proj by default), checked
   against the model they run on. */
static int run_s1_load(qx_cli* cli, const run_opts* o, run_s1* w) {
    static const char* const def_layer[1] = {"up_proj"};
    const qx_runcfg_stage1* s1 = w->s1;
    qx_calib_opts* co = &w->co;
    int64_t i, n_pats = s1->n_layer_type;
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    if (n_pats > 64) return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: line %d: layer_type: more than 64 patterns", o->config, s1->line);
    for (i = 0; i < n_pats; ++i) w->pats[i] = s1->layer_type[i];
    co->adapt.steps = s1->steps;
    co->adapt.quant_dtype = s1->quant_dtype;
    co->adapt.layer_type = n_pats ? w->pats : def_layer;
    co->adapt.n_layer_type = n_pats ? n_pats : 1;
    co->adapt.block_size = s1->block_size;
    co->adapt.max_samples = s1->max_samples;
    co->adapt.seed = (uint64_t)o->rot.seed;
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(o->model, &lo, &w->model, &e);
    if (r != QUAROT_OK) return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    r = s1->spin ? QUAROT_OK : qx_calib_check(&co->adapt, w->model.config.hidden, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS, "%s: line %d: adapt_rotation stage 1: %s",
                           o->config, s1->line, e.msg);
    if (w->model.config.max_seq > 0 && o->w.seq_len > w->model.config.max_seq)
        return qx_cli_fail(cli, QX_EXIT_PROCESS, "--seq-len %lld is longer than the model's context (%lld tokens)", (long long)o->w.seq_len,
                           (long long)w->model.config.max_seq);
    return QX_EXIT_OK;
}

/* Stage 1's windows: --tokens as stream windows, else the configuration's dataset through the
   model's tokenizer. */
static int run_s1_windows(qx_cli* cli, const run_opts* o, run_s1* w) {
    const qx_runcfg_stage1* s1 = w->s1;
    const char* tokens_path = o->in.tokens;
    char tok_path[4096];
    qx_err e;
    quarot_result r;
    r = qx_tokenizer_for_model(&w->tok, o->model, o->in.tokenizer, w->model.config.vocab, tok_path, sizeof tok_path, &e);
    if (r != QUAROT_OK && (!tokens_path || r != QUAROT_ERR_NOT_FOUND)) return qx_cli_fail(cli, qx_cli_exit_for(r), "%s (stage 1's dataset)", e.msg);
    w->have_tok = r == QUAROT_OK;
    if (tokens_path) {
        qx_ppl_opts po;
        r = qx_tokens_read(tokens_path, w->model.config.vocab, &w->ids, &w->n_ids, &e);
        if (r != QUAROT_OK) return qx_cli_fail(cli, qx_cli_exit_for(r), "%s", e.msg);
        memset(&po, 0, sizeof po);
        po.seq_len = o->w.seq_len;
        po.max_windows = o->w.windows;
        po.bos = w->have_tok ? qx_tokenizer_window_bos(&w->tok) : -1;
        r = qx_windows_stream(&w->win, w->ids, w->n_ids, &po, &e);
        if (r != QUAROT_OK)
            return qx_cli_fail(cli, r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", tokens_path, e.msg);
        w->have_win = 1;
        return QX_EXIT_OK;
    }
    r = qx_calib_text_load(s1->dataset, &w->text, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : QX_EXIT_INPUT,
                           "%s (dataset of stage 1, %s line %d)", e.msg, o->config, s1->dataset_line);
    w->have_text = 1;
    r = qx_calib_windows(&w->text, &w->tok, o->w.windowing, o->w.seq_len, o->w.windows, &w->win, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(cli, r == QUAROT_ERR_INVALID_ARGUMENT ? QX_EXIT_PROCESS : qx_cli_exit_for(r), "%s: %s", s1->dataset, e.msg);
    w->have_win = 1;
    return QX_EXIT_OK;
}

/* The calibration forward pass and the optimizer (quarot calibrate's) on a thread pool, with
   progress on stderr; then stage 1's two summary lines. */
static int run_s1_optimize(qx_cli* cli, const run_opts* o, run_s1* w, quarot_adapt_context* ctx) {
    const qx_runcfg_stage1* s1 = w->s1;
    qx_calib_opts* co = &w->co;
    int64_t threads = o->c.threads;
    quarot_env env;
    run_progress rp;
    qx_calib_stats st;
    qx_err e;
    quarot_result r;
    if (threads == 0) threads = qx_cpu_count();
    if (threads > 1) w->pool = qx_pool_create((int)threads);
    qx_pool_env(w->pool, &env);
    co->env = &env;
    rp.cli = cli;
    rp.steps = s1->steps;
    co->on_window = on_window;
    co->on_optimize = on_optimize;
    co->user = &rp;
    co->adapt.progress = on_step;
    co->adapt.user_data = &rp;
    qx_cli_phase(cli);
    r = qx_calib_stage1(&w->model, &w->win, co, ctx, &st, &e);
    if (r != QUAROT_OK) {
        int code = r == QUAROT_ERR_OUT_OF_MEMORY || r == QUAROT_ERR_INTERNAL ? QX_EXIT_INTERNAL
                 : r == QUAROT_ERR_NONFINITE || r == QUAROT_ERR_PARSE ? QX_EXIT_INPUT : QX_EXIT_PROCESS;
        return qx_cli_fail(cli, code, "%s: adapt_rotation stage 1 (%s line %d): %s", o->model, o->config, s1->line, e.msg);
    }
    qx_cli_progress_end(cli, "stage 1: optimizer");
    printf("stage 1   adapt_rotation (%s line %d) on %s: %lld windows, %lld tokens; %lld linears (%s), %lld rows of %lld\n", o->config,
           s1->line, o->in.tokens ? o->in.tokens : s1->dataset, (long long)st.windows, (long long)st.tokens, (long long)st.linears, st.matched,
           (long long)st.rows, (long long)w->model.config.hidden);
    printf("          %s, block %lld, seed %llu, %d of %d steps, best step %d; loss random Hadamard %.6e -> adapted %.6e (%+.2f%%); "
           "%.2f s + %.2f s\n", qx_calib_dtype(ctx), (long long)ctx->block, (unsigned long long)ctx->seed, ctx->steps_run, ctx->steps,
           ctx->best_step, ctx->start_loss, ctx->best_loss, 100.0 * qx_calib_reduction(ctx), st.forward_s, st.optimize_s);
    fflush(stdout);
    return QX_EXIT_OK;
}

/* SpinQuant on the prior stage's dataset (with the online hooks of spec.process); fills spin and
   prints its summary line. */
static int run_s1_spin(qx_cli* cli, const run_opts* o, const qx_runcfg* cfg, run_s1* w, qx_spin_rot* spin) {
    const qx_runcfg_stage1* s1 = w->s1;
    int64_t threads = o->c.threads;
    quarot_env env;
    qx_spin_opts so;
    qx_spin_stats ss;
    qx_err e;
    quarot_result r;
    if (threads == 0) threads = qx_cpu_count();
    if (threads > 1) w->pool = qx_pool_create((int)threads);
    qx_pool_env(w->pool, &env);
    memset(&so, 0, sizeof so);
    so.desc.seed = (uint64_t)o->rot.seed;
    so.desc.steps = s1->steps;
    so.desc.lr = s1->lr;
    so.desc.batch = s1->batch;
    so.desc.loss = s1->loss;
    so.desc.online = cfg->stage2.online;
    if (s1->a_bits < 16) {
        so.desc.act.a_bits = (int)s1->a_bits;
        so.desc.act.a_asym = s1->a_asym;
        so.desc.act.a_clip = (float)s1->a_clip;
    }
    if (s1->w_bits < 16) {
        so.desc.w_bits = (int)s1->w_bits;
        so.desc.weight.asymmetric = s1->w_asym;
        so.desc.weight.clip_search = s1->w_clip ? QUAROT_CLIP_SEARCH_LP : 0;
    }
    if (!cli->quiet) {
        so.desc.progress = on_spin_step;
        so.desc.user_data = cli;
    }
    so.nsamples = s1->nsamples;
    so.env = &env;
    qx_cli_phase(cli);
    r = qx_spin_train(&w->model, &w->win, o->w.seq_len, &so, spin, &ss, &e);
    if (r != QUAROT_OK) {
        qx_spin_rot_free(spin);
        return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY || r == QUAROT_ERR_INTERNAL ? QX_EXIT_INTERNAL : QX_EXIT_PROCESS,
                           "%s: spinquant (%s line %d): %s", o->model, o->config, s1->line, e.msg);
    }
    printf("stage 1   spinquant (%s line %d) on %s: %lld windows of %lld tokens; %d steps, batch loss %.6f -> %.6f; orthogonality %.2e; %.2f s\n",
           o->config, s1->line, o->in.tokens ? o->in.tokens : s1->dataset, (long long)ss.windows, (long long)o->w.seq_len, ss.steps_run,
           ss.first_loss, ss.last_loss, ss.max_orth, ss.seconds);
    fflush(stdout);
    return QX_EXIT_OK;
}

/* Stage 1 from the configuration (Adapt Rotation stage 1 or SpinQuant, in memory): the settings and
   the model, the windows, the optimizer; fills ctx (or spin). Returns an exit code. */
static int run_stage1(qx_cli* cli, const run_opts* o, const qx_runcfg* cfg, quarot_adapt_context* ctx, qx_spin_rot* spin) {
    run_s1 w;
    int rc;
    memset(&w, 0, sizeof w);
    w.s1 = &cfg->stage1;
    qx_store_init(&w.model);
    rc = run_s1_load(cli, o, &w);
    if (rc == QX_EXIT_OK) rc = run_s1_windows(cli, o, &w);
    if (rc == QX_EXIT_OK) rc = cfg->stage1.spin ? run_s1_spin(cli, o, cfg, &w, spin) : run_s1_optimize(cli, o, &w, ctx);
    run_s1_free(&w);
    return rc;
}

/* CONFIG.yaml, read and checked completely before any work. */
static int run_read_config(qx_cli* cli, const run_opts* o, qx_runcfg* cfg) {
    char* text = NULL;
    size_t len = 0;
    qx_err e;
    quarot_result r = qx_read_file(o->config, (size_t)1 << 20, &text, &len, &e);
    if (r != QUAROT_OK) {
        if (!qx_path_exists(o->config)) return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: no such file", o->config);
        return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    }
    r = qx_runcfg_parse(text, len, o->config, o->skip, on_warn, NULL, cfg, &e);
    free(text);
    if (r != QUAROT_OK) return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    return QX_EXIT_OK;
}

/* The configuration with the command line: where stage 2's context comes from, and OUT. */
static int run_check_config(qx_cli* cli, const run_opts* o, const qx_runcfg* cfg) {
    if (o->rot.context && !cfg->stage2.adapt)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--context: %s rotates with quarot (line %d), which uses no Adapt Rotation context", o->config,
                           cfg->stage2.line);
    if (o->rot.context && cfg->stage1.present)
        return qx_cli_fail(cli, QX_EXIT_USAGE, "--context: %s runs adapt_rotation stage 1 itself (line %d); remove it from spec.prior to use a "
                                               "context file", o->config, cfg->stage1.line);
    if (cfg->stage2.adapt && !cfg->stage1.present && !o->rot.context)
        return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: line %d: adapt_rotation stage 2 needs the adapted matrix of stage 1, and there is no context: "
                                               "put adapt_rotation stage 1 in spec.prior (with a dataset), or pass --context FILE from "
                                               "`quarot calibrate` (stage 1 must run first)", o->config, cfg->stage2.line);
    if (qx_is_dir(o->save) ? 0 : (!o->c.force && qx_path_exists(o->save)))
        return qx_cli_fail(cli, QX_EXIT_OUTPUT, "%s: exists already; use --force to replace it", o->save);
    return QX_EXIT_OK;
}

static void run_print_config(const run_opts* o, const qx_runcfg* cfg) {
    printf("config    %s (%s): %s%s%s", o->config, cfg->apiversion,
           cfg->stage1.present ? (cfg->stage1.spin ? "spinquant training, then " : "adapt_rotation stage 1, then ") : "",
           cfg->stage2.spin ? "spinquant" : cfg->stage2.adapt ? "adapt_rotation stage 2" : "quarot", cfg->stage2.online ? " (online)" : "");
    if (cfg->n_skipped) printf("; %d unsupported entr%s skipped", cfg->n_skipped, cfg->n_skipped == 1 ? "y" : "ies");
    printf("\n");
    fflush(stdout);
}

/* Stage 1 (in memory), the rotation file of spinquant or the context file, when the configuration
   has one. */
static int run_context(qx_cli* cli, const run_opts* o, const qx_runcfg* cfg, quarot_adapt_context* ctx, qx_spin_rot* spin) {
    qx_err e;
    quarot_result r;
    if (cfg->stage1.present)
        return run_stage1(cli, o, cfg, ctx, spin);
    if (cfg->stage2.spin) {
        r = qx_spin_load(cfg->stage2.rotations, spin, &e);
        if (r != QUAROT_OK)
            return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s (%s line %d)", e.msg, o->config,
                               cfg->stage2.rotations_line);
        return QX_EXIT_OK;
    }
    if (!o->rot.context) return QX_EXIT_OK;
    r = qx_calib_context_load(o->rot.context, ctx, &e);
    if (r != QUAROT_OK) return qx_cli_fail(cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    return QX_EXIT_OK;
}

/* Stage 2 / quarot as a rotate job (the writer paths of quarot rotate); layers_what names the
   configuration line of the layer list in messages. */
static int run_fill_job(qx_cli* cli, const run_opts* o, const qx_runcfg* cfg, const quarot_adapt_context* ctx, qx_spin_rot* spin,
                        char* layers_what, size_t layers_what_size, qx_rotate_job* job) {
    memset(job, 0, sizeof *job);
    job->in = o->model;
    job->out = o->save;
    job->seed = (uint64_t)o->rot.seed;
    job->block_size = cfg->stage2.block_size;
    if (cfg->stage2.adapt) {
        if (cfg->stage2.block_size > 0 && cfg->stage2.block_size != ctx->block)
            return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: line %d: adapt_rotation stage 2: block_size %lld differs from stage 1's block %lld "
                                                   "(use -1 or %lld)", o->config, cfg->stage2.line, (long long)cfg->stage2.block_size,
                               (long long)ctx->block, (long long)ctx->block);
        job->rotation = QUAROT_ROTATION_ADAPT;
        job->context = ctx;
        job->context_name = cfg->stage1.present ? "stage 1, in memory" : o->rot.context;
        job->block_size = ctx->block;
    } else if (cfg->stage2.spin) {
        job->rotation = QUAROT_ROTATION_MATRIX;
        job->learned = spin;
        job->learned_name = cfg->stage1.present ? "spinquant, in memory" : cfg->stage2.rotations;
        job->block_size = -1;
        if (cfg->stage1.present) {   /* learned on this very file: its digest */
            qx_err e;
            quarot_result r = qx_spin_model_digest(o->model, spin->digest, &e);
            if (r != QUAROT_OK) return qx_cli_fail(cli, QX_EXIT_INPUT, "%s", e.msg);
        }
    } else {
        job->rotation = QUAROT_ROTATION_HADAMARD;
    }
    job->online = cfg->stage2.online;
    job->max_tp_size = cfg->stage2.max_tp_size;
    if (cfg->stage2.spin) job->max_tp_size = 1;   /* the hooks the rotations were learned with: every layer, whole dimensions */
    else if (cfg->stage2.online) {
        /* msModelSlim: the down_proj online rotation only in the listed layers ([] = none) */
        job->down_proj_online = cfg->stage2.n_layers ? QUAROT_LAYERS_LIST : QUAROT_LAYERS_NONE;
        job->layers = cfg->stage2.layers;
        job->n_layers = cfg->stage2.n_layers;
        snprintf(layers_what, layers_what_size, "%s: line %d: down_proj_online_layers", o->config, cfg->stage2.layers_line);
        job->layers_what = layers_what;
    }
    job->force = o->c.force;
    return QX_EXIT_OK;
}

/* quarot run: read and check the configuration; stage 1 in memory (or the context file); then
   stage 2 / quarot as quarot rotate would run it. */
int qx_cmd_run(int argc, char** argv) {
    qx_cli cli;
    run_opts o;
    int rc;
    qx_runcfg cfg;
    quarot_adapt_context ctx;
    qx_spin_rot spin;
    qx_rotate_job job;
    char layers_what[600];

    signal(SIGXFSZ, SIG_IGN);
    qx_cli_init(&cli, "run", 0);
    memset(&o, 0, sizeof o);
    qx_opts_rotation_init(&o.rot);
    qx_opts_windowing_init(&o.w);
    if ((rc = qx_opts_parse(&qx_cmd_run_spec, &cli, argc, argv, &o)) != QX_OPTS_RUN) return rc;
    cli.quiet = o.c.quiet;
    if (!o.config) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no CONFIG.yaml given (usage: quarot run CONFIG.yaml --model IN --save OUT)");
    if (!o.model) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no --model IN given (the checkpoint to rotate; see quarot run --help)");
    if (!o.save) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no --save OUT given (where the rotated checkpoint goes; see quarot run --help)");
    if ((rc = run_read_config(&cli, &o, &cfg)) != QX_EXIT_OK) return rc;
    quarot_adapt_context_init(&ctx, NULL);
    memset(&spin, 0, sizeof spin);
    rc = run_check_config(&cli, &o, &cfg);
    if (rc == QX_EXIT_OK) {
        run_print_config(&o, &cfg);
        rc = run_context(&cli, &o, &cfg, &ctx, &spin);
    }
    if (rc == QX_EXIT_OK) rc = run_fill_job(&cli, &o, &cfg, &ctx, &spin, layers_what, sizeof layers_what, &job);
    if (rc == QX_EXIT_OK) rc = qx_rotate_job_run(&cli, &job);
    quarot_adapt_context_free(&ctx);
    qx_spin_rot_free(&spin);
    qx_runcfg_free(&cfg);
    return rc;
}
