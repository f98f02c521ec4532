/* qx_cmd_demo.c - `quarot demo` (what `make demo` runs): the whole QuaRot story in a few seconds.

   Part 1 needs nothing but this binary: a small LLaMA is generated in-process (qx_synth, fixed
   seed) with LLM-like outlier channels in the residual stream and the MLP. It is rotated with
   QuaRot's recipe (qx_ek_quarot), and the demo shows
     (a) the model and the rotation built,
     (b) that the rotated model computes the same function (logits with the online hooks run),
     (c) what rotation does to quantization error: the outliers at a layer input, the error of
         per-token 4-bit activation quantization there, and the logits' error under W4A4,
     (d) perplexity before / after under W4A4 and W8A4, on text the FP32 model itself sampled
         (so that perplexity means something for a random model).
   Part 2 does the same on stories260K when ../shared/models/stories260K is found (relative to the
   current directory or to the binary), on the first windows of ../shared/data/tinystories_eval.txt,
   and adds its greedy text before / after. */
#include "cli/qx_cli.h"
#include "eval/qx_evalkit.h"
#include "model/qx_synth.h"
#include "formats/qx_load.h"
#include "model/qx_logits.h"
#include "support/qx_file.h"
#include "support/qx_str.h"
#include "cli/qx_opts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct demo_opts {
    int synthetic_only;
    int64_t windows;
    qx_opts_common c;
} demo_opts;

static const qx_opt demo_table[] = {
    {QX_OPT_FLAG, "--synthetic-only", QX_AT(demo_opts, synthetic_only), .help = "skip stories260K even when it is there"},
    {QX_OPT_INT, "--windows", .arg = "N", QX_AT(demo_opts, windows), .lo = 1, .hi = 64, .def = "8",
     .help = "perplexity windows per model; fewer is faster"},
    {QX_OPT_END}
};
static const qx_opt_group demo_group = {"options:", demo_table, NULL};

const qx_opts_cmd qx_cmd_demo_spec = {
    .name = "demo",
    .about = "The whole QuaRot story on an embedded default: a small synthetic LLaMA (generated in-process from\n"
             "a fixed seed, with outlier channels as real LLMs have) is rotated, checked for equivalence, and\n"
             "its quantization error and W4A4 / W8A4 perplexity are measured before and after rotation. When\n"
             "../shared/models/stories260K is found (next to the current directory or to the binary; or under\n"
             "$QUAROT_SHARED), the same runs on it with a few windows of ../shared/data/tinystories_eval.txt,\n"
             "plus its greedy text before and after. Takes a few seconds.\n",
    .uses = {{&demo_group, 0, 0, NULL}, {&qx_opts_common_group, offsetof(demo_opts, c), QX_COMMON_QUIET_Q, NULL}},
    .epilog = "Exit codes: 0 ok, 1 usage, 2 input (a shared file exists but cannot be read), 4 a check failed\n"
              "(the rotated model does not compute the same function), 5 internal.\n",
};

/* ---- captures: one linear input of one layer, copied ([rows][n]) --------------------------- */

typedef struct demo_capture {
    int64_t layer;
    const char* suffix;
    float* x;
    int64_t rows, n;
} demo_capture;

static void demo_on_capture(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    demo_capture* c = (demo_capture*)user;
    if (layer != c->layer || c->x || !qx_str_ends_with(name, c->suffix)) return;
    c->x = (float*)malloc((size_t)(rows * n) * sizeof *c->x);
    if (!c->x) return;
    memcpy(c->x, x, (size_t)(rows * n) * sizeof *c->x);
    c->rows = rows;
    c->n = n;
}

/* max over channels of (max over tokens |x|) / median of the same: the outlier ratio */
static int demo_cmp(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return x < y ? -1 : x > y;
}

static double outlier_ratio(const demo_capture* c) {
    float* m = (float*)calloc((size_t)c->n, sizeof *m);
    double med, mx;
    int64_t t, j;
    if (!m) return NAN;
    for (t = 0; t < c->rows; ++t)
        for (j = 0; j < c->n; ++j)
            if (fabsf(c->x[t * c->n + j]) > m[j]) m[j] = fabsf(c->x[t * c->n + j]);
    qsort(m, (size_t)c->n, sizeof *m, demo_cmp);
    med = c->n % 2 ? m[c->n / 2] : 0.5 * ((double)m[c->n / 2 - 1] + (double)m[c->n / 2]);
    mx = m[c->n - 1];
    free(m);
    return med > 0 ? mx / med : INFINITY;
}

/* |x - Q4(x)|^2 / |x|^2 with Q4 = per-token symmetric 4-bit RTN (quarot_fake_quant_f32) */
static double quant_rel_mse(const demo_capture* c) {
    float* q = (float*)malloc((size_t)(c->rows * c->n) * sizeof *q);
    quarot_quant_desc d;
    double num = 0, den = 0;
    int64_t i;
    if (!q) return NAN;
    memcpy(q, c->x, (size_t)(c->rows * c->n) * sizeof *q);
    memset(&d, 0, sizeof d);
    d.bits = 4;
    if (quarot_fake_quant_f32(q, c->rows, c->n, c->n, &d) != QUAROT_OK) { free(q); return NAN; }
    for (i = 0; i < c->rows * c->n; ++i) {
        double e = (double)q[i] - (double)c->x[i];
        num += e * e;
        den += (double)c->x[i] * (double)c->x[i];
    }
    free(q);
    return den > 0 ? num / den : 0.0;
}

/* ---- one model's story ---------------------------------------------------------------------- */

typedef struct demo_model {
    const char* title;
    const qx_store* model;
    const qx_windows* win;        /* evaluation windows; window 0 is the equivalence input */
    const char* win_text;         /* where the windows come from, for the report */
    const qx_tokenizer* tok;      /* for greedy text; NULL: none */
    int64_t layer;                /* the layer whose inputs (c) looks at */
} demo_model;

typedef struct demo_progress {
    qx_cli* cli;
    int64_t before, total;
} demo_progress;

static void demo_on_window(void* user, int64_t done, int64_t total) {
    demo_progress* p = (demo_progress*)user;
    (void)total;
    qx_cli_progress(p->cli, p->before + done, p->total, "perplexity: window");
}

/* logits [T][vocab] of store (+hooks) under q (NULL = FP32) on tokens[T]; captures may be NULL */
static quarot_result run_logits(const qx_store* s, const quarot_online_list* hooks, const qx_fake_quant_opts* q,
                                const int32_t* tokens, int64_t T, float* logits, demo_capture* cap, qx_err* e) {
    qx_ek_forward ef;
    quarot_result r = qx_ek_forward_init(&ef, s, hooks, q, cap ? demo_on_capture : NULL, cap, e);
    if (r != QUAROT_OK) return r;
    r = qx_forward_window(&ef.f, tokens, T, logits, e);
    if (r == QUAROT_OK) r = qx_ek_forward_status(&ef);
    qx_ek_forward_free(&ef);
    return r;
}

/* Two captures at once (q input and down input) need one callback that feeds both. */
typedef struct demo_capture2 {
    demo_capture q, down;
} demo_capture2;

static void demo_on_capture2(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    demo_capture2* c = (demo_capture2*)user;
    demo_on_capture(&c->q, layer, name, x, rows, n);
    demo_on_capture(&c->down, layer, name, x, rows, n);
}

static quarot_result run_capture2(const qx_store* s, const quarot_online_list* hooks, const int32_t* tokens, int64_t T,
                                  float* logits, demo_capture2* cap, qx_err* e) {
    qx_ek_forward ef;
    quarot_result r = qx_ek_forward_init(&ef, s, hooks, NULL, demo_on_capture2, cap, e);
    if (r != QUAROT_OK) return r;
    r = qx_forward_window(&ef.f, tokens, T, logits, e);
    if (r == QUAROT_OK) r = qx_ek_forward_status(&ef);
    qx_ek_forward_free(&ef);
    return r;
}

static void print_text(const qx_tokenizer* tok, const char* label, const int32_t* ids, int64_t n, const int32_t* ref) {
    int64_t i;
    int32_t prev = QX_TOK_BOS;
    size_t col = 0;
    if (ref) {
        for (i = 0; i < n && ids[i] == ref[i]; ++i) {}
        if (i == n) { printf("    %-17s (identical to FP32, token for token)\n", label); return; }
    }
    printf("    %-17s ", label);
    for (i = 0; i < n; ++i) {
        size_t len, k;
        const char* p;
        if (ids[i] == QX_TOK_BOS || ids[i] == QX_TOK_EOS) break;
        p = qx_tokenizer_decode(tok, prev, ids[i], &len);
        prev = ids[i];
        if (!p || !qx_tokenizer_safe_piece(p, len)) continue;
        for (k = 0; k < len && col < 96; ++k, ++col) putchar(p[k] == '\n' || p[k] == '\r' || p[k] == '\t' ? ' ' : p[k]);
        if (col >= 96) { printf("..."); break; }
    }
    putchar('\n');
}

/* What one story builds: the rotated model, the logits of window 0, the captured layer inputs;
   story_free frees it. */
typedef struct demo_run {
    qx_cli* cli;
    const demo_model* dm;
    const int32_t* tok0;           /* window 0, the equivalence input */
    int64_t T, V;                  /* its tokens; the vocabulary */
    qx_store rot;
    quarot_online_list hooks;
    char recipe[2048];
    int have_rot;
    float *l_fp, *l_rot, *l_q;     /* [T][V] logits: FP32 original, FP32 rotated, quantized */
    demo_capture2 cap[2];          /* the q and down_proj inputs: original, rotated */
    qx_fake_quant_opts w4a4;
} demo_run;

static void story_init(demo_run* run, qx_cli* cli, const demo_model* dm) {
    memset(run, 0, sizeof *run);
    run->cli = cli;
    run->dm = dm;
    run->tok0 = dm->win->tokens;
    run->T = dm->win->offset[1] - dm->win->offset[0];
    run->V = dm->model->config.vocab;
    run->w4a4.w_bits = 4;
    run->w4a4.a_bits = 4;
}

static void story_free(demo_run* run) {
    int k;
    for (k = 0; k < 2; ++k) {
        free(run->cap[k].q.x);
        free(run->cap[k].down.x);
    }
    free(run->l_fp);
    free(run->l_rot);
    free(run->l_q);
    if (run->have_rot) {
        qx_store_free(&run->rot);
        quarot_online_list_free(&run->hooks);
    }
}

/* (a) the model and the QuaRot rotation built for it */
static int story_rotate(demo_run* run, int part) {
    const demo_model* dm = run->dm;
    const quarot_model_config* c = &dm->model->config;
    const char* line = run->recipe;
    qx_err e;
    quarot_result r;
    printf("\n== %d. %s\n", part, dm->title);
    printf("(a) model: %s, hidden %lld, intermediate %lld, %lld layers, %lld heads (%lld KV) of %lld, vocab %lld\n", c->arch,
           (long long)c->hidden, (long long)c->intermediate, (long long)c->n_layers, (long long)c->n_heads,
           (long long)(c->n_kv_heads ? c->n_kv_heads : c->n_heads), (long long)(c->head_dim ? c->head_dim : c->hidden / c->n_heads),
           (long long)c->vocab);
    r = qx_ek_quarot(dm->model, 0, 0, &run->rot, &run->hooks, run->recipe, sizeof run->recipe, NULL, NULL, &e);
    if (r != QUAROT_OK) return qx_cli_fail(run->cli, qx_cli_exit_for(r), "%s: %s", dm->title, e.msg);
    run->have_rot = 1;
    printf("    QuaRot rotation built (qx_ek_quarot = quarot_rotate_model with online hooks, %lld hooks):\n", (long long)run->hooks.count);
    while (*line) {
        const char* nl = strchr(line, '\n');
        size_t n = nl ? (size_t)(nl - line) : strlen(line);
        printf("      %.*s\n", (int)n, line);
        line += n + (nl ? 1 : 0);
    }
    return QX_EXIT_OK;
}

/* (b) equivalence: FP32 logits of the original and of the rotated model (online hooks run), with
   the layer inputs (c) looks at captured on the way */
static int story_equivalence(demo_run* run) {
    const demo_model* dm = run->dm;
    const int64_t TV = run->T * run->V;
    double maxdiff = 0, maxlogit = 0;
    qx_err e;
    int64_t i;
    int k;
    run->l_fp = (float*)malloc((size_t)TV * sizeof *run->l_fp);
    run->l_rot = (float*)malloc((size_t)TV * sizeof *run->l_rot);
    run->l_q = (float*)malloc((size_t)TV * sizeof *run->l_q);
    if (!run->l_fp || !run->l_rot || !run->l_q) return qx_cli_fail(run->cli, QX_EXIT_INTERNAL, "out of memory");
    for (k = 0; k < 2; ++k) {
        demo_capture2* cap = &run->cap[k];
        quarot_result r;
        cap->q.layer = cap->down.layer = dm->layer;
        cap->q.suffix = "q_proj.weight";
        cap->down.suffix = "down_proj.weight";
        r = run_capture2(k ? &run->rot : dm->model, k ? &run->hooks : NULL, run->tok0, run->T, k ? run->l_rot : run->l_fp, cap, &e);
        if (r != QUAROT_OK) return qx_cli_fail(run->cli, qx_cli_exit_for(r), "%s: forward pass: %s", dm->title, e.msg);
        if (!cap->q.x || !cap->down.x) return qx_cli_fail(run->cli, QX_EXIT_INTERNAL, "%s: no activations captured", dm->title);
    }
    for (i = 0; i < TV; ++i) {
        double d = fabs((double)run->l_fp[i] - (double)run->l_rot[i]);
        if (d > maxdiff) maxdiff = d;
        if (fabs((double)run->l_fp[i]) > maxlogit) maxlogit = fabs((double)run->l_fp[i]);
    }
    printf("(b) equivalence: logits of the original vs the rotated model (weights rewritten, online hooks run),\n"
           "    FP32, %lld tokens x %lld logits (the first evaluation window):\n"
           "    max |logit difference| %.2e, max |logit| %.2f  ->  relative %.2e  %s\n",
           (long long)run->T, (long long)run->V, maxdiff, maxlogit, maxlogit > 0 ? maxdiff / maxlogit : 0.0,
           maxlogit > 0 && maxdiff / maxlogit < 1e-4 ? "(same function, float rounding only)" : "(NOT EQUIVALENT)");
    if (!(maxlogit > 0 && maxdiff / maxlogit < 1e-4))
        return qx_cli_fail(run->cli, QX_EXIT_PROCESS, "%s: the rotated model's logits differ from the original's (relative %.2e)", dm->title,
                           maxlogit > 0 ? maxdiff / maxlogit : 0.0);
    return QX_EXIT_OK;
}

/* (c) quantization error at the layer inputs, and of the logits under W4A4 */
static int story_quant_error(demo_run* run) {
    const demo_model* dm = run->dm;
    const demo_capture2* cap = run->cap;
    const int64_t T = run->T, V = run->V;
    double rel_err[2] = {0, 0};
    int64_t agree[2] = {0, 0}, i, j;
    qx_err e;
    int k;
    printf("(c) quantization error, no rotation -> QuaRot (same %lld tokens):\n", (long long)T);
    printf("    layer %lld q/k/v input:     outliers max/median channel %6.2f -> %5.2f;  per-token 4-bit |x-Q(x)|^2/|x|^2 %.4f -> %.4f\n",
           (long long)dm->layer, outlier_ratio(&cap[0].q), outlier_ratio(&cap[1].q), quant_rel_mse(&cap[0].q), quant_rel_mse(&cap[1].q));
    printf("    layer %lld down_proj input: outliers max/median channel %6.2f -> %5.2f;  per-token 4-bit |x-Q(x)|^2/|x|^2 %.4f -> %.4f\n",
           (long long)dm->layer, outlier_ratio(&cap[0].down), outlier_ratio(&cap[1].down), quant_rel_mse(&cap[0].down), quant_rel_mse(&cap[1].down));
    for (k = 0; k < 2; ++k) {
        double num = 0, den = 0;
        quarot_result r = run_logits(k ? &run->rot : dm->model, k ? &run->hooks : NULL, &run->w4a4, run->tok0, T, run->l_q, NULL, &e);
        if (r != QUAROT_OK) return qx_cli_fail(run->cli, qx_cli_exit_for(r), "%s: W4A4 forward pass: %s", dm->title, e.msg);
        for (i = 0; i < T * V; ++i) {
            double d = (double)run->l_q[i] - (double)run->l_fp[i];
            num += d * d;
            den += (double)run->l_fp[i] * (double)run->l_fp[i];
        }
        rel_err[k] = den > 0 ? sqrt(num / den) : 0;
        for (j = 0; j < T; ++j) agree[k] += qx_logits_argmax(run->l_q + j * V, V) == qx_logits_argmax(run->l_fp + j * V, V);
    }
    printf("    logits under W4A4 vs FP32:  relative RMS error %.3f -> %.3f;  top-1 token agrees with FP32 %.0f%% -> %.0f%%\n",
           rel_err[0], rel_err[1], 100.0 * (double)agree[0] / (double)T, 100.0 * (double)agree[1] / (double)T);
    printf("    (weights RTN symmetric per output channel; activations per token symmetric; embeddings, final norm\n"
           "     and lm_head stay FP32, as in QuaRot)\n");
    return QX_EXIT_OK;
}

/* The table, indented by four spaces. */
static void print_table_indented(const qx_ek_table* table) {
    char* buf = NULL;
    size_t len = 0;
    FILE* mf = open_memstream(&buf, &len);
    if (mf) {
        char* line;
        qx_ek_table_print(mf, table);
        fclose(mf);
        for (line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) printf("    %s\n", line);
        free(buf);
    } else {
        qx_ek_table_print(stdout, table);
    }
}

/* (d) perplexity before / after: rows FP32, W4A4, W8A4 */
static int story_perplexity(demo_run* run) {
    static const int set[3][2] = {{16, 16}, {4, 4}, {8, 4}};
    const demo_model* dm = run->dm;
    demo_progress prog;
    qx_ek_table table;
    qx_err e;
    int i, k;
    prog.cli = run->cli;
    prog.before = 0;
    prog.total = 6 * dm->win->n;
    qx_ek_table_init(&table, "perplexity");
    qx_ek_table_add_col(&table, "no rotation");
    qx_ek_table_add_col(&table, "QuaRot");
    qx_cli_phase(run->cli);
    for (i = 0; i < 3; ++i) {
        qx_ek_setting s;
        qx_fake_quant_opts q;
        s.w_bits = set[i][0];
        s.a_bits = set[i][1];
        s.kv_bits = 16;
        qx_ek_setting_label(&s);
        qx_ek_setting_quant(&s, 0, 0, &q);
        qx_ek_table_add_row(&table, s.label);
        for (k = 0; k < 2; ++k) {
            qx_ek_forward ef;
            qx_ppl_result res;
            quarot_result r = qx_ek_forward_init(&ef, k ? &run->rot : dm->model, k ? &run->hooks : NULL, &q, NULL, NULL, &e);
            if (r == QUAROT_OK) {
                r = qx_eval_windows(&ef.f, dm->win, demo_on_window, &prog, &res, &e);
                if (r == QUAROT_OK) r = qx_ek_forward_status(&ef);
                qx_ek_forward_free(&ef);
            }
            if (r != QUAROT_OK) return qx_cli_fail(run->cli, qx_cli_exit_for(r), "%s: perplexity: %s", dm->title, e.msg);
            table.v[i][k] = res.ppl;
            prog.before += dm->win->n;
        }
    }
    qx_cli_progress_end(run->cli, "perplexity");
    printf("(d) perplexity on %s\n    (%lld windows, %lld tokens scored):\n", dm->win_text, (long long)dm->win->n, (long long)dm->win->n_predicted);
    print_table_indented(&table);
    return QX_EXIT_OK;
}

/* Greedy text from BOS before / after, FP32 and W4A4 (with a tokenizer only). */
static int story_greedy(demo_run* run) {
    enum { N = 40 };
    static const char* const labels[4] = {"FP32", "FP32 QuaRot", "W4A4 no rotation", "W4A4 QuaRot"};
    const demo_model* dm = run->dm;
    int32_t g[4][N];
    qx_err e;
    int k;
    for (k = 0; k < 4; ++k) {
        qx_ek_forward ef;
        quarot_result r = qx_ek_forward_init(&ef, k % 2 ? &run->rot : dm->model, k % 2 ? &run->hooks : NULL, k >= 2 ? &run->w4a4 : NULL, NULL,
                                             NULL, &e);
        if (r == QUAROT_OK) {
            r = qx_eval_generate(&ef.f, QX_TOK_BOS, N, g[k], &e);
            if (r == QUAROT_OK) r = qx_ek_forward_status(&ef);
            qx_ek_forward_free(&ef);
        }
        if (r != QUAROT_OK) return qx_cli_fail(run->cli, qx_cli_exit_for(r), "%s: generation: %s", dm->title, e.msg);
    }
    printf("    greedy text from BOS (%d tokens):\n", (int)N);
    for (k = 0; k < 4; ++k) print_text(dm->tok, labels[k], g[k], N, k == 1 ? g[0] : NULL);
    return QX_EXIT_OK;
}

/* One model's story, (a) to (d), numbered `part`. */
static int demo_story(qx_cli* cli, const demo_model* dm, int part) {
    demo_run run;
    double t0 = qx_now();
    int rc;
    story_init(&run, cli, dm);
    rc = story_rotate(&run, part);
    if (!rc) rc = story_equivalence(&run);
    if (!rc) rc = story_quant_error(&run);
    if (!rc) rc = story_perplexity(&run);
    if (!rc && dm->tok) rc = story_greedy(&run);
    if (!rc) printf("    (%.1f s)\n", qx_now() - t0);
    story_free(&run);
    return rc;
}

/* ---- the synthetic model and its sampled text ------------------------------------------------- */

/* Sample n_win sequences of seq-1 tokens from the FP32 model (each from BOS, softmax at
   temperature 1, quarot_rng seeded), back to back in out (n_win*(seq-1) tokens). */
static quarot_result sample_stream(const qx_store* s, uint64_t seed, int64_t n_win, int64_t seq, int32_t* out, qx_err* e) {
    qx_forward f;
    quarot_rng rng;
    float* logits;
    double* p;
    int64_t V = s->config.vocab, w, t, j;
    quarot_result r = qx_forward_init(&f, s, NULL, e);
    if (r != QUAROT_OK) return r;
    logits = (float*)malloc((size_t)V * sizeof *logits);
    p = (double*)malloc((size_t)V * sizeof *p);
    if (!logits || !p) { free(logits); free(p); qx_forward_free(&f); return QUAROT_ERR_OUT_OF_MEMORY; }
    quarot_rng_seed(&rng, seed);
    for (w = 0; w < n_win && r == QUAROT_OK; ++w) {
        int32_t tok = QX_TOK_BOS;
        qx_forward_reset(&f);
        for (t = 0; t + 1 < seq && r == QUAROT_OK; ++t) {
            double m, sum = 0, u;
            r = qx_forward_step(&f, tok, logits, e);
            if (r != QUAROT_OK) break;
            m = logits[0];
            for (j = 1; j < V; ++j) if (logits[j] > m) m = logits[j];
            for (j = 0; j < V; ++j) sum += (p[j] = exp((double)logits[j] - m));
            u = quarot_rng_uniform(&rng) * sum;
            for (j = 0; j + 1 < V && u >= p[j]; ++j) u -= p[j];
            tok = (int32_t)j;
            out[w * (seq - 1) + t] = tok;
        }
    }
    free(logits);
    free(p);
    qx_forward_free(&f);
    return r;
}

/* ---- ../shared ------------------------------------------------------------------------------ */

/* out = a + b when it fits in cap bytes (memcpy: no format-truncation guesswork); 0 otherwise. */
static int demo_join(char* out, size_t cap, const char* a, const char* b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la + lb + 1 > cap) return 0;
    memcpy(out, a, la);
    memcpy(out + la, b, lb + 1);
    return 1;
}

/* The shared folder holding models/stories260K/stories260K.bin: $QUAROT_SHARED, ../shared, or
   ../shared beside the repository the binary was built in (<bin dir>/../../shared). */
static int find_shared(char* out, size_t cap) {
    char cand[4][4096], exe[4000], probe[4200];
    const char* env = getenv("QUAROT_SHARED");
    int n = 0, i;
    ssize_t len;
    if (env && env[0] && demo_join(cand[n], sizeof cand[0], env, "")) n++;
    demo_join(cand[n++], sizeof cand[0], "../shared", "");
    len = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (len > 0) {
        char* slash;
        exe[len] = '\0';
        slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            if (demo_join(cand[n], sizeof cand[0], exe, "/../../shared")) n++;
            if (demo_join(cand[n], sizeof cand[0], exe, "/../shared")) n++;
        }
    }
    for (i = 0; i < n; ++i)
        if (demo_join(probe, sizeof probe, cand[i], "/models/stories260K/stories260K.bin") && qx_is_file(probe))
            return demo_join(out, cap, cand[i], "");
    return 0;
}

/* ---- the two parts -------------------------------------------------------------------------- */

/* Part 1: a synthetic LLaMA (sizes wide enough that the outliers stand out and 4-bit hurts, small
   enough for ~1 s), on text it sampled itself (window w = [BOS] + sample w). */
static int demo_part_synthetic(qx_cli* cli, int64_t n_win) {
    const int64_t seq = 128;
    qx_synth_desc sd;
    qx_store syn;
    qx_windows win;
    qx_ppl_opts po;
    int32_t* sampled;
    char title[256], wt[256];
    demo_model dm;
    qx_err e;
    quarot_result r;
    int rc;
    memset(&sd, 0, sizeof sd);
    sd.arch = "llama";
    sd.seed = 1;
    sd.rope_interleaved = 1;
    r = qx_synth_model(&syn, &sd, &e);
    if (r != QUAROT_OK) return qx_cli_fail(cli, QX_EXIT_INTERNAL, "synthetic model: %s", e.msg);
    qx_synth_resolve(&sd, NULL);
    sampled = (int32_t*)malloc((size_t)(n_win * (seq - 1)) * sizeof *sampled);
    if (!sampled) { qx_store_free(&syn); return qx_cli_fail(cli, QX_EXIT_INTERNAL, "out of memory"); }
    r = sample_stream(&syn, 7, n_win, seq, sampled, &e);
    memset(&win, 0, sizeof win);
    memset(&po, 0, sizeof po);
    po.seq_len = seq;
    if (r == QUAROT_OK) r = qx_windows_stream(&win, sampled, n_win * (seq - 1), &po, &e);
    if (r != QUAROT_OK) {
        free(sampled);
        qx_store_free(&syn);
        return qx_cli_fail(cli, qx_cli_exit_for(r), "sampling the evaluation text: %s", e.msg);
    }
    snprintf(title, sizeof title, "a synthetic LLaMA (qx_synth seed %llu: random weights, %lld outlier channels with 16x norm gains in the\n"
             "   residual stream and 4x gate/up rows in the MLP, as real LLMs have)",
             (unsigned long long)sd.seed, (long long)sd.n_outliers);
    snprintf(wt, sizeof wt, "text the FP32 model sampled itself (seed 7, temperature 1; [BOS] + %lld tokens per window)", (long long)(seq - 1));
    dm.title = title;
    dm.model = &syn;
    dm.win = &win;
    dm.win_text = wt;
    dm.tok = NULL;
    dm.layer = 1;
    rc = demo_story(cli, &dm, 1);
    qx_windows_free(&win);
    free(sampled);
    qx_store_free(&syn);
    return rc;
}

/* The first n_win stream windows of 256 tokens of the text at xpath: they need n_win*255 tokens
   (~4 bytes each), so only a prefix of the text is encoded. *text and *stream are the caller's. */
static quarot_result demo_text_windows(const qx_tokenizer* tok, const char* xpath, int64_t n_win, char** text, int32_t** stream, qx_windows* win,
                                       qx_err* e) {
    size_t text_len = 0;
    int64_t n_stream = 0;
    quarot_result r = qx_ek_read_file(xpath, text, &text_len, e);
    if (r == QUAROT_OK) {
        size_t want = (size_t)n_win * 255 * 16 + 4096, take = text_len < want ? text_len : want;
        int64_t capn = qx_tokenizer_max_tokens(take);
        *stream = (int32_t*)malloc((size_t)capn * sizeof **stream);
        r = *stream ? qx_tokenizer_encode(tok, *text, take, 0, 0, *stream, capn, &n_stream, e) : QUAROT_ERR_OUT_OF_MEMORY;
    }
    memset(win, 0, sizeof *win);
    if (r == QUAROT_OK) {
        qx_ppl_opts po;
        memset(&po, 0, sizeof po);
        po.seq_len = 256;
        po.max_windows = n_win;
        r = qx_windows_stream(win, *stream, n_stream, &po, e);
    }
    return r;
}

/* Part 2: stories260K from the shared folder, on the first windows of tinystories_eval.txt, with
   its greedy text. */
static int demo_part_stories(qx_cli* cli, const char* shared, int64_t n_win) {
    char mpath[4300], tpath[4300], xpath[4300], title[4500], wt[4500];
    qx_store st;
    qx_tokenizer tok;
    qx_load_opts lo;
    qx_windows win;
    char* text = NULL;
    int32_t* stream = NULL;
    demo_model dm;
    qx_err e;
    quarot_result r;
    int rc;
    demo_join(mpath, sizeof mpath, shared, "/models/stories260K/stories260K.bin");
    demo_join(tpath, sizeof tpath, shared, "/models/stories260K/tok512.bin");
    demo_join(xpath, sizeof xpath, shared, "/data/tinystories_eval.txt");
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(mpath, &lo, &st, &e);
    if (r != QUAROT_OK) return qx_cli_fail(cli, qx_cli_exit_for(r), "%s", e.msg);
    r = qx_tokenizer_load(&tok, tpath, (int32_t)st.config.vocab, &e);
    if (r != QUAROT_OK) { qx_store_free(&st); return qx_cli_fail(cli, qx_cli_exit_for(r), "%s", e.msg); }
    r = demo_text_windows(&tok, xpath, n_win, &text, &stream, &win, &e);
    if (r != QUAROT_OK) {
        rc = qx_cli_fail(cli, qx_cli_exit_for(r), "%s: %s", xpath, e.msg);
    } else {
        snprintf(title, sizeof title, "stories260K (%s, trained on TinyStories)", mpath);
        snprintf(wt, sizeof wt, "the first windows of %s\n    (stream windowing: the text encoded once, [BOS] + 255 tokens per window; `quarot eval` does all of them)", xpath);
        dm.title = title;
        dm.model = &st;
        dm.win = &win;
        dm.win_text = wt;
        dm.tok = &tok;
        dm.layer = 1;
        rc = demo_story(cli, &dm, 2);
    }
    qx_windows_free(&win);
    free(stream);
    free(text);
    qx_tokenizer_free(&tok);
    qx_store_free(&st);
    return rc;
}

int qx_cmd_demo(int argc, char** argv) {
    qx_cli cli;
    demo_opts o;
    int rc;
    double t_start = qx_now();
    char shared[4096];

    qx_cli_init(&cli, "demo", 0);
    memset(&o, 0, sizeof o);
    o.windows = 8;
    if ((rc = qx_opts_parse(&qx_cmd_demo_spec, &cli, argc, argv, &o)) != QX_OPTS_RUN) return rc;
    cli.quiet = o.c.quiet;

    printf("quarot demo: QuaRot rotates a model so that its activations lose their outlier channels, which\n"
           "makes 4-bit activation quantization work. Rotation changes the weights, not the function.\n");
    if ((rc = demo_part_synthetic(&cli, o.windows)) != QX_EXIT_OK) return rc;
    if (o.synthetic_only)
        printf("\n(stories260K skipped: --synthetic-only)\n");
    else if (!find_shared(shared, sizeof shared))
        printf("\n(stories260K not found: ../shared/models/stories260K/stories260K.bin is absent; part 1 is the demo)\n");
    else if ((rc = demo_part_stories(&cli, shared, o.windows)) != QX_EXIT_OK)
        return rc;
    printf("\nWhat to take away: the rotated model computes the same function (b), its activations lose their\n"
           "outlier channels and quantize with far less error (c), and W4A4 / W8A4 perplexity drops (d).\n"
           "demo done in %.1f s. Next: quarot eval MODEL --text FILE, quarot plot MODEL --text FILE -o out.svg\n",
           qx_now() - t_start);
    return QX_EXIT_OK;
}
