/* qx_cmd_plot.c - `quarot plot`: the QuaRot picture. Per-channel max |activation| at one linear
   input of one layer, before rotation and after QuaRot (with its online hooks), as two SVG panels
   on the same y scale.

   The activations come from the forward pass's capture hook: the input of q_proj (= k/v input,
   after input_layernorm) or of down_proj (after the online Hadamard in the rotated model), before
   any quantization, over the first --tokens tokens of the text ([BOS] + text tokens, one window).
   For each channel j: m_j = max over tokens |x[t][j]|; the panels show m_j as bars, the median of
   the m_j as a dashed line, and the ratio max_j m_j / median_j m_j that per-token quantization
   suffers from (a 4-bit scale is set by the largest channel). */
#include "cli/qx_cli.h"
#include "cli/qx_cli_hooks.h"
#include "eval/qx_evalkit.h"
#include "cli/qx_rotcheck.h"
#include "tokenizer/qx_tok_load.h"
#include "pipeline/qx_layerwise.h"
#include "support/qx_threads.h"
#include "formats/qx_load.h"
#include "support/qx_str.h"
#include "cli/qx_opts.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

typedef struct plot_opts {
    const char *model, *text, *output, *tokens_file;
    int64_t layer, tokens;
    int site, log_scale;
    qx_opts_common c;
    qx_opts_input in;
    qx_opts_rotation rot;
} plot_opts;

/* --tokens N (how many tokens to run) or --tokens FILE (token ids): a number is N */
static int parse_tokens(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    plot_opts* p = (plot_opts*)base;
    (void)o;
    if (v[0] >= '0' && v[0] <= '9' && strspn(v, "0123456789") == strlen(v)) return qx_cli_int(cli, name, v, 2, 1 << 20, &p->tokens);
    p->tokens_file = v;
    return 1;
}

static const qx_opt_choice plot_sites[] = {{"q", 0}, {"down", 1}, {NULL, 0}};

static const qx_opt plot_table[] = {
    {QX_OPT_STRING, "--text", .arg = "FILE", QX_AT(plot_opts, text),
     .help = "text whose first tokens drive the model (required unless --tokens FILE)"},
    {QX_OPT_STRING, "--output", "-o", .arg = "FILE", QX_AT(plot_opts, output),
     .help = "the SVG to write (required); written to a temporary and renamed"},
    {QX_OPT_INT, "--layer", .arg = "N", QX_AT(plot_opts, layer), .lo = 0, .hi = 1 << 20, .def = "1; 0 when the model has one layer",
     .help = "decoder layer"},
    {QX_OPT_CHOICE, "--site", QX_AT(plot_opts, site), .choices = plot_sites, .bad = "is neither q nor down", .def = "q",
     .help = "q: the q/k/v input (after the input norm); down: the down_proj input (after the online Hadamard in the rotated "
             "model)"},
    {QX_OPT_CUSTOM, "--tokens", .arg = "N|FILE", .fn = parse_tokens, .def = "256",
     .help = "a number: tokens to run (at most the model's context); anything else: a file of token ids instead of --text, "
             "whitespace separated or a JSON array, after the tokenizer's BOS when one is found"},
    {QX_OPT_FLAG, "--log", QX_AT(plot_opts, log_scale), .def = "linear", .help = "logarithmic y axis"},
    {QX_OPT_END}
};
static const qx_opt_group plot_group = {"options:", plot_table, NULL};

const qx_opts_cmd qx_cmd_plot_spec = {
    .name = "plot",
    .synopsis = "MODEL --text FILE -o OUT.svg [options]",
    .about = "Draws the QuaRot picture: the largest |activation| of every channel at one layer input, before\n"
             "rotation and after QuaRot (R1/R2 folded, online Hadamard rotations run in the forward pass), as\n"
             "two panels on the same y scale, with the max/median channel ratio of each. The activations are\n"
             "captured in FP32 over the first --tokens tokens of the text (one window from BOS).\n",
    .operands = {{"MODEL", offsetof(plot_opts, model)}},
    .uses = {{&plot_group, 0, 0, NULL},
             {&qx_opts_input_group, offsetof(plot_opts, in), QX_INPUT_TOKENIZER | QX_INPUT_HOOKS, NULL},
             {&qx_opts_rotation_group, offsetof(plot_opts, rot), QX_ROTATION_SEED | QX_ROTATION_STRICT, NULL},
             {&qx_opts_common_group, offsetof(plot_opts, c), QX_COMMON_THREADS | QX_COMMON_QUIET_Q | QX_COMMON_FORCE_F, NULL}},
    .epilog = "stdout gets one line per panel (max, median, ratio, the largest channel) and the output path.\n"
              "Memory (layer-wise, as quarot eval): MODEL stays mapped in its stored dtype, QuaRot's rotation goes\n"
              "layer by layer through a temporary file in $TMPDIR, and the forward pass holds one decoder layer\n"
              "in f32 at a time (plus the embeddings and lm_head); stderr reports the peak resident set.\n"
              "Exit codes: 0 ok, 1 usage, 2 input, 3 output (exists without --force, cannot write), 4 cannot\n"
              "run as asked (layer out of range, text too short), 5 internal.\n",
};

/* Per-channel max |x| of one linear input, accumulated over every capture call. */
typedef struct plot_capture {
    int64_t layer;
    const char* suffix;     /* "q_proj.weight" or "down_proj.weight" / "fc2.weight" */
    const char* suffix2;
    const char* within;     /* NULL, or a part the name must hold (".experts.": a MoE layer's routed experts) */
    float* cmax;            /* [n] */
    int64_t n;
    int64_t rows;
    int bad;                /* the width changed between calls */
} plot_capture;

static void on_capture(void* user, int64_t layer, const char* name, const float* x, int64_t rows, int64_t n) {
    plot_capture* c = (plot_capture*)user;
    int64_t t, j;
    if (layer != c->layer || !(qx_str_ends_with(name, c->suffix) || (c->suffix2 && qx_str_ends_with(name, c->suffix2)))) return;
    if (c->within && !strstr(name, c->within)) return;
    if (!c->cmax) {
        c->cmax = (float*)calloc((size_t)n, sizeof *c->cmax);
        if (!c->cmax) { c->bad = 1; return; }
        c->n = n;
    }
    if (n != c->n) { c->bad = 1; return; }
    for (t = 0; t < rows; ++t)
        for (j = 0; j < n; ++j) {
            float a = fabsf(x[t * n + j]);
            if (a > c->cmax[j]) c->cmax[j] = a;
        }
    c->rows += rows;
}

static int cmp_float(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return x < y ? -1 : x > y;
}

typedef struct panel_stats {
    double max, median, ratio;
    int64_t argmax;
} panel_stats;

static int stats_of(const float* v, int64_t n, panel_stats* s) {
    float* tmp = (float*)malloc((size_t)n * sizeof *tmp);
    int64_t j;
    if (!tmp) return 0;
    memcpy(tmp, v, (size_t)n * sizeof *tmp);
    qsort(tmp, (size_t)n, sizeof *tmp, cmp_float);
    s->median = n % 2 ? tmp[n / 2] : 0.5 * ((double)tmp[n / 2 - 1] + (double)tmp[n / 2]);
    s->max = tmp[n - 1];
    s->argmax = 0;
    for (j = 1; j < n; ++j)
        if (v[j] > v[s->argmax]) s->argmax = j;
    s->ratio = s->median > 0 ? s->max / s->median : INFINITY;
    free(tmp);
    return 1;
}

/* ---- SVG ------------------------------------------------------------------------------------ */

/* A "nice" tick step (1, 2 or 5 x 10^k) giving about `want` intervals over [0, span]. */
static double nice_step(double span, int want) {
    double raw = span / want, p = pow(10.0, floor(log10(raw))), f = raw / p;
    return (f <= 1.0 ? 1.0 : f <= 2.0 ? 2.0 : f <= 5.0 ? 5.0 : 10.0) * p;
}

/* XML-escape s into out. */
static void xml_escape(char* out, size_t cap, const char* s) {
    size_t n = 0;
    for (; *s && n + 7 < cap; ++s) {
        const char* rep = NULL;
        switch (*s) {
            case '&': rep = "&amp;"; break;
            case '<': rep = "&lt;"; break;
            case '>': rep = "&gt;"; break;
            case '"': rep = "&quot;"; break;
            default: break;
        }
        if (rep) { memcpy(out + n, rep, strlen(rep)); n += strlen(rep); }
        else if ((unsigned char)*s >= 0x20 || *s == '\t') out[n++] = *s;
    }
    out[n] = '\0';
}

/* Format a tick label: no trailing zeros ("0.5", "12", "1e-3"). */
static void tick_label(char* buf, size_t cap, double v) {
    if (v != 0 && (fabs(v) < 1e-3 || fabs(v) >= 1e5)) snprintf(buf, cap, "%.0e", v);
    else snprintf(buf, cap, "%.4g", v);
}

typedef struct plot_axes {
    int log;
    double ymin, ymax;       /* data range shown: linear [0, ymax]; log [ymin, ymax] (decades) */
} plot_axes;

static double y_of(const plot_axes* a, double v, double top, double h) {
    double f;
    if (a->log) {
        double lv = v > a->ymin ? log10(v) : log10(a->ymin);
        f = (lv - log10(a->ymin)) / (log10(a->ymax) - log10(a->ymin));
    } else {
        f = v / a->ymax;
    }
    if (f < 0) f = 0;
    if (f > 1) f = 1;
    return top + h * (1.0 - f);
}

/* The y grid and its tick labels over the plot area (px, py, pw, ph): decades with fainter 2x and
   5x lines (labelled when there are few decades), or a nice linear step. */
static void svg_y_grid(FILE* f, const plot_axes* ax, double px, double py, double pw, double ph) {
    char lab[64];
    if (ax->log) {
        double d;
        for (d = floor(log10(ax->ymin) + 1e-9); d <= log10(ax->ymax) + 1e-9; d += 1.0) {
            double yy = y_of(ax, pow(10.0, d), py, ph);
            tick_label(lab, sizeof lab, pow(10.0, d));
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e6ec\"/>\n", px, yy, px + pw, yy);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">%s</text>\n", px - 6, yy + 4, lab);
            /* 2x and 5x inside the decade: fainter lines, labelled when there are few decades */
            if (d + 1.0 <= log10(ax->ymax) + 1e-9) {
                static const double mult[2] = {2.0, 5.0};
                int m;
                for (m = 0; m < 2; ++m) {
                    double vv = mult[m] * pow(10.0, d), ym = y_of(ax, vv, py, ph);
                    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eef0f4\"/>\n", px, ym, px + pw, ym);
                    if (log10(ax->ymax) - log10(ax->ymin) <= 3.0 + 1e-9) {
                        tick_label(lab, sizeof lab, vv);
                        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"10\" fill=\"#888\" text-anchor=\"end\">%s</text>\n", px - 6, ym + 4, lab);
                    }
                }
            }
        }
    } else {
        double step = nice_step(ax->ymax, 5), t;
        for (t = 0; t <= ax->ymax * (1 + 1e-9); t += step) {
            double yy = y_of(ax, t, py, ph);
            tick_label(lab, sizeof lab, t);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#e3e6ec\"/>\n", px, yy, px + pw, yy);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#555\" text-anchor=\"end\">%s</text>\n", px - 6, yy + 4, lab);
        }
    }
}

/* One panel at (x0, y0) of size w x h (plot area inside the margins). */
static void svg_panel(FILE* f, const plot_axes* ax, double x0, double y0, double w, double h, const float* v, int64_t n,
                      const panel_stats* st, const char* title, const char* colour, const char* channel_name) {
    double ml = 62, mr = 16, mt = 50, mb = 46;   /* margins inside the panel box */
    double px = x0 + ml, py = y0 + mt, pw = w - ml - mr, ph = h - mt - mb, bw = pw / (double)n, ymed;
    double xstep;
    int64_t j;
    /* frame and title */
    fprintf(f, "<g>\n<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#fbfbfd\" stroke=\"#d0d4dc\"/>\n", px, py, pw, ph);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\" fill=\"#222\">%s</text>\n", px, y0 + 20, title);
    svg_y_grid(f, ax, px, py, pw, ph);
    /* bars: one path of rectangles (thin lines when there are many channels) */
    fprintf(f, "<path fill=\"%s\" stroke=\"none\"%s d=\"", colour, bw < 2 ? " shape-rendering=\"crispEdges\"" : "");
    for (j = 0; j < n; ++j) {
        double top = y_of(ax, v[j], py, ph), bx = px + bw * (double)j, bwid = bw > 3 ? bw * 0.8 : bw;
        if (bwid < 1.0) bwid = 1.0;   /* a channel is never thinner than a pixel */
        if (bw > 3) bx += bw * 0.1;
        fprintf(f, "M%.2f %.2fh%.2fV%.2fh%.2fz", bx, py + ph, bwid, top, -bwid);
    }
    fprintf(f, "\"/>\n");
    /* median line and its label */
    ymed = y_of(ax, st->median, py, ph);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" stroke-width=\"1.2\" stroke-dasharray=\"5 4\"/>\n",
            px, ymed, px + pw, ymed);
    /* x ticks: channel indices */
    xstep = nice_step((double)n, 8);
    if (xstep < 1) xstep = 1;
    {
        double c;
        for (c = 0; c < (double)n; c += xstep) {
            double xx = px + bw * (c + 0.5);
            fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#888\"/>\n", xx, py + ph, xx, py + ph + 4);
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#555\" text-anchor=\"middle\">%.0f</text>\n", xx, py + ph + 17, c);
        }
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#333\" text-anchor=\"middle\">%s channel</text>\n", px + pw / 2, py + ph + 36,
            channel_name);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" fill=\"#333\" text-anchor=\"middle\" transform=\"rotate(-90 %.1f %.1f)\">max |activation| over tokens%s</text>\n",
            x0 + 16, py + ph / 2, x0 + 16, py + ph / 2, ax->log ? " (log scale)" : "");
    /* the statistics, in the panel header (never over the bars): the ratio at the right of the
       title, the numbers behind it on the line below. Symmetric 4-bit: levels -7..7 of step max/7,
       so a channel of magnitude m spans 7*m/max of them. */
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"15\" font-weight=\"bold\" fill=\"%s\" text-anchor=\"end\">max/median = %.2f</text>\n",
            px + pw, y0 + 20, colour, st->ratio);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11.5\" fill=\"#555\" text-anchor=\"end\">max %.3g (channel %lld), median %.3g; 4-bit: the median channel spans %.1f of 7 levels</text>\n",
            px + pw, y0 + 38, st->max, (long long)st->argmax, st->median, st->max > 0 ? 7.0 * st->median / st->max : 0.0);
    fprintf(f, "</g>\n");
}

/* ---- one run -------------------------------------------------------------------------------- */

/* What one `quarot plot` reads and builds; plot_free frees it. */
typedef struct plot_state {
    qx_cli cli;
    plot_opts o;
    const char* site;              /* "q" or "down" */
    qx_store model, rot;
    qx_pool* pool;
    quarot_env env;
    qx_rotcheck_dim dims[8];       /* what QuaRot builds here (no silent fallbacks) */
    int n_dims;
    quarot_online_list hooks;      /* QuaRot's */
    qx_tokenizer tok;
    char tok_path[4096], recipe[2048], tmp_path[4200];
    char* text;
    size_t text_len;
    int32_t* toks;
    int64_t n_toks, T;             /* T: the tokens run */
    plot_capture cap[2];           /* before rotation, after QuaRot */
    panel_stats stats[2];
    int have_model, have_rot, have_tok, tmp_fd;
} plot_state;

static void plot_init(plot_state* st) {
    memset(st, 0, sizeof *st);
    qx_cli_init(&st->cli, "plot", 0);
    st->o.layer = -1;
    st->o.tokens = 256;
    qx_opts_rotation_init(&st->o.rot);
    quarot_online_list_init(&st->hooks, NULL);
    st->tmp_fd = -1;
}

static void plot_free(plot_state* st) {
    qx_pool_destroy(st->pool);
    if (st->tmp_fd >= 0) { close(st->tmp_fd); unlink(st->tmp_path); }
    free(st->cap[0].cmax);
    free(st->cap[1].cmax);
    free(st->toks);
    free(st->text);
    if (st->have_tok) qx_tokenizer_free(&st->tok);
    if (st->have_rot) qx_store_free(&st->rot);
    quarot_online_list_free(&st->hooks);
    if (st->have_model) qx_store_free(&st->model);
}

/* The usage errors, an existing output (without --force) and a missing text, before the model. */
static int plot_check_options(plot_state* st) {
    plot_opts* o = &st->o;
    qx_cli* cli = &st->cli;
    struct stat sb;
    int tf;
    st->site = qx_opt_word(plot_sites, o->site);
    if (!o->model) return qx_cli_fail(cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot plot MODEL --text FILE -o OUT.svg; see --help)");
    if (!o->text && !o->tokens_file) return qx_cli_fail(cli, QX_EXIT_USAGE, "no --text FILE (or --tokens FILE) given (see quarot plot --help)");
    if (o->text && o->tokens_file) return qx_cli_fail(cli, QX_EXIT_USAGE, "--text and --tokens both give the tokens: choose one");
    if (o->tokens_file) o->text = o->tokens_file;
    if (!o->output) return qx_cli_fail(cli, QX_EXIT_USAGE, "no -o OUT.svg given (see quarot plot --help)");
    if (stat(o->output, &sb) == 0 && !o->c.force) return qx_cli_fail(cli, QX_EXIT_OUTPUT, "%s: exists (pass --force to replace it)", o->output);
    tf = open(o->text, O_RDONLY | O_NONBLOCK | O_CLOEXEC);   /* without blocking: a FIFO with no writer; read later */
    if (tf < 0) return qx_cli_fail(cli, QX_EXIT_INPUT, "%s: cannot open the text: %s", o->text, strerror(errno));
    close(tf);
    return QX_EXIT_OK;
}

/* The model, the thread pool and the model's own online hooks. */
static int plot_load_model(plot_state* st) {
    plot_opts* o = &st->o;
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(o->model, &lo, &st->model, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_input(r), "%s", e.msg);
    if (o->c.threads == 0) o->c.threads = qx_cpu_count();
    if (o->c.threads > 1) st->pool = qx_pool_create((int)o->c.threads);
    qx_pool_env(st->pool, &st->env);
    st->have_model = 1;
    return qx_cli_model_hooks(&st->cli, &st->model, o->model, o->in.hooks);
}

/* QuaRot as qx_ek_quarot builds it (R1 + R2 Hadamard, online hooks) checked, --layer (default 1,
   or 0 for one layer) in range, --tokens at most the model's context. */
static int plot_check_model(plot_state* st) {
    plot_opts* o = &st->o;
    const quarot_model_config* c = &st->model.config;
    qx_rotcheck_opts rco;
    int rc;
    memset(&rco, 0, sizeof rco);
    rco.online = 1;
    if ((rc = qx_rotcheck_cli(&st->cli, o->model, NULL, c, &rco, o->rot.strict, st->dims, 8, &st->n_dims)) != QX_EXIT_OK) return rc;
    if (o->layer < 0) o->layer = c->n_layers > 1 ? 1 : 0;
    if (o->layer >= c->n_layers)
        return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "--layer %lld: the model has %lld layers (0..%lld)", (long long)o->layer,
                           (long long)c->n_layers, (long long)c->n_layers - 1);
    if (c->max_seq > 0 && o->tokens > c->max_seq) o->tokens = c->max_seq;
    return QX_EXIT_OK;
}

/* --tokens FILE: [BOS when the tokenizer adds one] + the ids of the file */
static int plot_tokens_from_file(plot_state* st) {
    int32_t* ids = NULL;
    int64_t n_ids = 0, bos = st->have_tok ? qx_tokenizer_window_bos(&st->tok) : -1;
    qx_err e;
    quarot_result r = qx_tokens_read(st->o.tokens_file, st->model.config.vocab, &ids, &n_ids, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s", e.msg);
    st->toks = (int32_t*)malloc((size_t)(n_ids + 1) * sizeof *st->toks);
    if (!st->toks) { free(ids); return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory"); }
    st->n_toks = 0;
    if (bos >= 0) st->toks[st->n_toks++] = (int32_t)bos;
    memcpy(st->toks + st->n_toks, ids, (size_t)n_ids * sizeof *ids);
    st->n_toks += n_ids;
    free(ids);
    return QX_EXIT_OK;
}

/* --text: [BOS] + the text's first tokens; only as much text as needed is encoded (a generous prefix) */
static int plot_tokens_from_text(plot_state* st) {
    const plot_opts* o = &st->o;
    size_t take, want_bytes = (size_t)o->tokens * 64 + 64;
    int64_t capn;
    qx_err e;
    quarot_result r = qx_ek_read_file(o->text, &st->text, &st->text_len, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s", e.msg);
    take = st->text_len > want_bytes ? want_bytes : st->text_len;
    capn = qx_tokenizer_max_tokens(take);
    st->toks = (int32_t*)malloc((size_t)capn * sizeof *st->toks);
    if (!st->toks) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory");
    r = qx_tokenizer_encode(&st->tok, st->text, take, st->tok.add_bos, 0, st->toks, capn, &st->n_toks, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: %s", o->text, e.msg);
    return QX_EXIT_OK;
}

/* The tokenizer (none needed with --tokens FILE) and the tokens to run. */
static int plot_read_tokens(plot_state* st) {
    const plot_opts* o = &st->o;
    qx_err e;
    int rc;
    quarot_result r = qx_tokenizer_for_model(&st->tok, o->model, o->in.tokenizer, st->model.config.vocab, st->tok_path, sizeof st->tok_path, &e);
    if (r != QUAROT_OK && (!o->tokens_file || r != QUAROT_ERR_NOT_FOUND)) return qx_cli_fail(&st->cli, qx_cli_exit_input(r), "%s", e.msg);
    st->have_tok = r == QUAROT_OK;
    rc = o->tokens_file ? plot_tokens_from_file(st) : plot_tokens_from_text(st);
    if (rc != QX_EXIT_OK) return rc;
    if (st->n_toks < 2) return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "%s: no text to run", o->text);
    st->T = st->n_toks < o->tokens ? st->n_toks : o->tokens;
    return QX_EXIT_OK;
}

static int plot_rotate(plot_state* st) {
    qx_err e;
    quarot_result r = qx_ek_quarot(&st->model, (uint64_t)st->o.rot.seed, 0, &st->rot, &st->hooks, st->recipe, sizeof st->recipe, NULL, NULL, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: %s", st->o.model, e.msg);
    st->have_rot = 1;
    return QX_EXIT_OK;
}

/* The chosen input in both models (FP32; the rotated one with its online hooks), and its statistics. */
static int plot_capture_both(plot_state* st) {
    const plot_opts* o = &st->o;
    const int q = strcmp(st->site, "q") == 0;
    int i;
    for (i = 0; i < 2; ++i) {
        plot_capture* cap = &st->cap[i];
        qx_ek_forward ef;
        qx_err e;
        quarot_result r;
        cap->layer = o->layer;
        cap->suffix = q ? "q_proj.weight" : "down_proj.weight";
        cap->suffix2 = q ? NULL : "fc2.weight";
        if (!q && quarot_config_layer_is_moe(&st->model.config, o->layer)) {   /* every routed expert's rows, one width */
            cap->suffix2 = ".w2.weight";
            cap->within = ".experts.";
        }
        r = qx_ek_forward_init_env(&ef, i ? &st->rot : &st->model, i ? &st->hooks : NULL, NULL, on_capture, cap, &st->env, &e);
        if (r == QUAROT_OK) {
            r = qx_forward_window(&ef.f, st->toks, st->T, NULL, &e);
            if (r == QUAROT_OK) r = qx_ek_forward_status(&ef);
            qx_ek_forward_free(&ef);
        }
        if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: forward pass: %s", o->model, e.msg);
        if (cap->bad || !cap->cmax)
            return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "%s: no %s input captured in layer %lld", o->model, st->site, (long long)o->layer);
        if (!stats_of(cap->cmax, cap->n, &st->stats[i])) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory");
    }
    return QX_EXIT_OK;
}

/* ---- the SVG file --------------------------------------------------------------------------- */

/* A temporary beside the output, with the usual 0666 & ~umask (mkstemp makes 0600), as a FILE. */
static int plot_open_temp(plot_state* st, FILE** out) {
    mode_t um;
    snprintf(st->tmp_path, sizeof st->tmp_path, "%s.tmpXXXXXX", st->o.output);
    st->tmp_fd = mkstemp(st->tmp_path);
    if (st->tmp_fd < 0) return qx_cli_fail(&st->cli, QX_EXIT_OUTPUT, "%s: cannot create a temporary beside it: %s", st->o.output, strerror(errno));
    um = umask(0);
    umask(um);
    if (fchmod(st->tmp_fd, (mode_t)(0666 & ~um)) != 0) { /* harmless: the SVG stays private */ }
    *out = fdopen(st->tmp_fd, "w");
    if (!*out) return qx_cli_fail(&st->cli, QX_EXIT_OUTPUT, "%s: %s", st->tmp_path, strerror(errno));
    st->tmp_fd = -1;   /* owned by the FILE now */
    return QX_EXIT_OK;
}

/* The same y scale for both panels: whole decades (--log) or [0, a nice step above the larger max]. */
static void plot_axes_of(const plot_state* st, plot_axes* ax) {
    double gmax = st->stats[0].max > st->stats[1].max ? st->stats[0].max : st->stats[1].max;
    float gmin = INFINITY;
    int i;
    size_t k;
    memset(ax, 0, sizeof *ax);
    ax->log = st->o.log_scale;
    if (st->o.log_scale) {
        for (i = 0; i < 2; ++i)
            for (k = 0; k < (size_t)st->cap[i].n; ++k)
                if (st->cap[i].cmax[k] > 0 && st->cap[i].cmax[k] < gmin) gmin = st->cap[i].cmax[k];
        if (!(gmin < INFINITY)) gmin = 1e-3f;
        ax->ymin = pow(10.0, floor(log10((double)gmin)));
        ax->ymax = pow(10.0, ceil(log10(gmax > 0 ? gmax : 1.0)));
        if (ax->ymax <= ax->ymin) ax->ymax = ax->ymin * 10;
    } else {
        double step = nice_step(gmax > 0 ? gmax : 1.0, 5);
        ax->ymax = ceil((gmax > 0 ? gmax : 1.0) / step - 1e-9) * step;
    }
}

/* The document's head: title, subtitle and legend. */
static void plot_svg_head(const plot_state* st, FILE* f, double W, double H) {
    const plot_opts* o = &st->o;
    const char* slash = strrchr(o->model, '/');
    const char* mname = slash && slash[1] ? slash + 1 : o->model;
    const char* site_text = strcmp(st->site, "q") == 0 ? "q/k/v input (after input_layernorm)"
                            : quarot_config_layer_is_moe(&st->model.config, st->o.layer) ? "routed experts' down_proj input"
                            : "down_proj input";
    char esc_model[512], title[1024], sub[1024];
    xml_escape(esc_model, sizeof esc_model, mname);
    snprintf(title, sizeof title, "%s: layer %lld %s, per-channel max |activation| over %lld tokens", esc_model, (long long)o->layer, site_text,
             (long long)st->T);
    snprintf(sub, sizeof sub, "before rotation vs. after QuaRot (random Hadamard R1%s, seed %lld; online Hadamard before down_proj). Same y scale in both panels.",
             st->model.config.n_heads > 0 ? " + R2" : "", (long long)o->rot.seed);
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            W, H, W, H);
    fprintf(f, "<title>%s</title>\n", title);
    fprintf(f, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"#ffffff\"/>\n", W, H);
    fprintf(f, "<text x=\"20\" y=\"30\" font-size=\"18\" font-weight=\"bold\" fill=\"#111\">%s</text>\n", title);
    fprintf(f, "<text x=\"20\" y=\"52\" font-size=\"12.5\" fill=\"#555\">%s</text>\n", sub);
    /* legend */
    fprintf(f, "<g font-size=\"12\" fill=\"#333\">\n");
    fprintf(f, "<rect x=\"20\" y=\"64\" width=\"14\" height=\"12\" fill=\"#d1495b\"/><text x=\"40\" y=\"75\">channel max, no rotation</text>\n");
    fprintf(f, "<rect x=\"210\" y=\"64\" width=\"14\" height=\"12\" fill=\"#2e86ab\"/><text x=\"230\" y=\"75\">channel max, QuaRot</text>\n");
    fprintf(f, "<line x1=\"380\" y1=\"70\" x2=\"408\" y2=\"70\" stroke=\"#333\" stroke-width=\"1.2\" stroke-dasharray=\"5 4\"/><text x=\"414\" y=\"75\">median over channels</text>\n");
    fprintf(f, "</g>\n");
}

/* The SVG, into a temporary beside the output, then renamed into place. */
static int plot_write_svg(plot_state* st) {
    const double W = 1240, H = 580, top = 92, pw = (W - 40) / 2, ph = H - top - 40;
    const int q = strcmp(st->site, "q") == 0;
    plot_axes ax;
    FILE* f;
    int rc;
    if ((rc = plot_open_temp(st, &f)) != QX_EXIT_OK) return rc;
    plot_axes_of(st, &ax);
    plot_svg_head(st, f, W, H);
    svg_panel(f, &ax, 20, top, pw, ph, st->cap[0].cmax, st->cap[0].n, &st->stats[0], "Before rotation", "#d1495b", q ? "hidden" : "intermediate");
    svg_panel(f, &ax, 20 + pw, top, pw, ph, st->cap[1].cmax, st->cap[1].n, &st->stats[1], "After QuaRot rotation", "#2e86ab",
              q ? "rotated hidden" : "rotated intermediate");
    fprintf(f, "</svg>\n");
    if (ferror(f) | fclose(f)) {
        rc = qx_cli_fail(&st->cli, QX_EXIT_OUTPUT, "%s: write failed: %s", st->tmp_path, strerror(errno));
        unlink(st->tmp_path);
        return rc;
    }
    if (rename(st->tmp_path, st->o.output) != 0) {
        rc = qx_cli_fail(&st->cli, QX_EXIT_OUTPUT, "%s: cannot rename the temporary into place: %s", st->o.output, strerror(errno));
        unlink(st->tmp_path);
        return rc;
    }
    return QX_EXIT_OK;
}

/* One line per panel and the output path on stdout; the peak resident set on stderr. */
static void plot_print_summary(plot_state* st) {
    const panel_stats* s = st->stats;
    printf("layer %lld %s input, %lld channels, %lld tokens\n", (long long)st->o.layer, st->site, (long long)st->cap[0].n, (long long)st->T);
    printf("before rotation: max %.4g (channel %lld), median %.4g, max/median %.2f\n", s[0].max, (long long)s[0].argmax, s[0].median, s[0].ratio);
    printf("after QuaRot:    max %.4g (channel %lld), median %.4g, max/median %.2f\n", s[1].max, (long long)s[1].argmax, s[1].median, s[1].ratio);
    qx_rotcheck_summary("QuaRot: ", st->dims, st->n_dims);
    printf("wrote %s\n", st->o.output);
    fflush(stdout);
    qx_cli_info(&st->cli, "memory: peak resident %.1f MiB (layer-wise: one decoder layer in f32 at a time)", qx_lw_peak_rss_mib());
}

int qx_cmd_plot(int argc, char** argv) {
    plot_state st;
    int rc;
    plot_init(&st);
    rc = qx_opts_parse(&qx_cmd_plot_spec, &st.cli, argc, argv, &st.o);
    if (rc != QX_OPTS_RUN) return rc;   /* --help, or a usage error */
    st.cli.quiet = st.o.c.quiet;
    rc = plot_check_options(&st);
    if (!rc) rc = plot_load_model(&st);
    if (!rc) rc = plot_check_model(&st);     /* the rotation it gets, --layer, --tokens */
    if (!rc) rc = plot_read_tokens(&st);
    if (!rc) rc = plot_rotate(&st);          /* QuaRot, in memory */
    if (!rc) rc = plot_capture_both(&st);    /* the layer input before and after */
    if (!rc) rc = plot_write_svg(&st);
    if (!rc) plot_print_summary(&st);
    plot_free(&st);
    return rc;
}
