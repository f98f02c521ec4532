/* qx_cmd_inspect.c - `quarot inspect MODEL`: what a model is and what rotating it will do.

   Four sections on stdout:
     config       every quarot_model_config field, defaults resolved (n_kv_heads, head_dim, eps, theta)
     tensors      name, dtype, shape, bytes; models with more than a few layers are summarized by
                  layer pattern ("model.layers.{0..31}.mlp.up_proj.weight  x32")
     hadamard     the construction each rotated dimension gets (hidden: R1, head_dim: R2 / R3,
                  intermediate: the online down_proj R4, n_heads: the online o_proj rotation), as
                  examples/hadamard_sizes.c prints it, with the block-diagonal fallback when none exists
     rotate       what `quarot rotate` builds per rotated dimension (qx_rotcheck.h): the Hadamard order,
                  a block-diagonal or random fallback (WARNING where rotate warns), or that it fails
     outliers     the forward pass (qx_forward) on a short text or random token ids, before and after
                  rotation (an in-memory copy rotated with default QuaRot + online hooks): per decoder
                  layer, at the q/k/v input and the down_proj input, max |x| over channels, the ratio of
                  the largest per-channel max |x| to the median one, and the kurtosis of all values
                  (E[(x-mean)^4] / var^2; 3 for a Gaussian, large with outlier channels).
   The statistics need the weights in f32 twice (original and rotated): --no-stats skips them. */
#include "cli/qx_cli.h"
#include "cli/qx_cli_hooks.h"
#include "model/qx_forward.h"
#include "model/qx_model.h"
#include "model/qx_online.h"
#include "cli/qx_rotcheck.h"
#include "tokenizer/qx_tok_load.h"
#include "tokenizer/qx_tokenizer.h"
#include "formats/qx_load.h"
#include "cli/qx_opts.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct inspect_opts {
    const char *model, *text;
    int64_t tokens;
    int no_stats, all_tensors;
    qx_opts_common c;
    qx_opts_input in;
    qx_opts_rotation rot;
} inspect_opts;

static const qx_opt inspect_table[] = {
    {QX_OPT_STRING, "--text", .arg = "FILE", QX_AT(inspect_opts, text), .def = "random token ids",
     .help = "text for the statistics, read with the model's tokenizer"},
    {QX_OPT_INT, "--tokens", .arg = "N", QX_AT(inspect_opts, tokens), .lo = 2, .hi = 1 << 20, .def = "128",
     .help = "tokens to run (at most the model's context); with no --text, N random ids drawn from --seed"},
    {QX_OPT_FLAG, "--no-stats", QX_AT(inspect_opts, no_stats),
     .help = "skip the statistics (no forward pass; they hold the weights in f32 twice, original and rotated, which a large "
             "model may not fit)"},
    {QX_OPT_FLAG, "--all-tensors", QX_AT(inspect_opts, all_tensors), .help = "list every tensor instead of layer patterns"},
    {QX_OPT_END}
};
static const qx_opt_group inspect_group = {"options:", inspect_table, NULL};

const qx_opts_cmd qx_cmd_inspect_spec = {
    .name = "inspect",
    .about = "Print MODEL's configuration (every field, defaults resolved), its tensors (name, dtype, shape,\n"
             "bytes; summarized by layer pattern for models with many layers), the Hadamard construction each\n"
             "rotated dimension gets (hidden: R1; head_dim: R2 and the q/k rotation R3; intermediate: the online\n"
             "down_proj rotation; n_heads: the online o_proj rotation), what `quarot rotate` builds for each\n"
             "(block-diagonal fallbacks with blocks < 64 marked WARNING, as rotate warns), and activation outlier\n"
             "statistics: the forward pass runs on a short text (or random token ids) through the original model\n"
             "and through a copy rotated in memory with QuaRot (R1 + R2 folded, online Hadamard hooks; --seed\n"
             "seeds its rotation), and for every decoder layer reports, at the q/k/v input and the down_proj\n"
             "input,\n"
             "  max        the largest |x| over all tokens and channels\n"
             "  max/med    largest per-channel max |x| divided by the median per-channel max |x|\n"
             "  kurt       kurtosis of all values, E[(x-mean)^4]/var^2 (3 for a Gaussian)\n"
             "MODEL: a llama2.c .bin, a Hugging Face safetensors directory or file, or a GGUF file.\n",
    .operands = {{"MODEL", offsetof(inspect_opts, model)}},
    .usage_on_excess = 1,
    .uses = {{&inspect_group, 0, 0, NULL},
             {&qx_opts_input_group, offsetof(inspect_opts, in), QX_INPUT_TOKENIZER | QX_INPUT_HOOKS, NULL},
             {&qx_opts_rotation_group, offsetof(inspect_opts, rot), QX_ROTATION_SEED, NULL},
             {&qx_opts_common_group, offsetof(inspect_opts, c), QX_COMMON_QUIET, NULL}},
    .epilog = "Exit codes: 0 ok (the model can be rotated; where only the online rotations cannot be built the\n"
              "statistics use R1 + R2), 1 usage, 2 input (MODEL, text or tokenizer missing or malformed), 4 the\n"
              "statistics cannot be computed (the model cannot be rotated), 5 internal or out of memory.\n",
};

/* ---- config and tensors ----------------------------------------------------------------------- */

static const char* norm_name(quarot_norm_kind k) { return k == QUAROT_NORM_LAYER ? "layernorm" : "rmsnorm"; }
static const char* act_name(quarot_act_kind k) { return k == QUAROT_ACT_RELU ? "relu" : k == QUAROT_ACT_GELU ? "gelu (tanh)" : "silu"; }

static void print_config(const qx_store* s, const char* path) {
    const quarot_model_config* c = &s->config;
    int64_t kv = c->n_kv_heads ? c->n_kv_heads : c->n_heads;
    int64_t hd = c->head_dim ? c->head_dim : (c->n_heads ? c->hidden / c->n_heads : 0);
    printf("model: %s\n  format          %s\n", path, s->source_format[0] ? s->source_format : "?");
    printf("  arch            %s\n", c->arch);
    printf("  hidden          %lld\n  intermediate    %lld\n  n_layers        %lld\n", (long long)c->hidden,
           (long long)c->intermediate, (long long)c->n_layers);
    printf("  n_heads         %lld\n  n_kv_heads      %lld%s\n  head_dim        %lld%s\n", (long long)c->n_heads, (long long)kv,
           c->n_kv_heads ? "" : " (= n_heads)", (long long)hd, c->head_dim ? "" : " (= hidden / n_heads)");
    printf("  vocab           %lld\n  max_seq         %lld\n", (long long)c->vocab, (long long)c->max_seq);
    printf("  norm            %s, eps %g%s\n", norm_name(c->norm), c->norm_eps > 0 ? (double)c->norm_eps : 1e-5,
           c->norm_eps > 0 ? "" : " (default)");
    printf("  mlp             %s, %s\n", c->mlp == QUAROT_MLP_PLAIN ? "plain" : "gated", act_name(c->act));
    printf("  rope            theta %g%s, %s pairs\n", c->rope_theta > 0 ? (double)c->rope_theta : 10000.0,
           c->rope_theta > 0 ? "" : " (default)", c->rope_interleaved ? "interleaved (2i, 2i+1)" : "half-split (i, i+head_dim/2)");
    printf("  tied_embeddings %s\n  biases          q/k/v %s, o %s, mlp %s\n  qk_norm         %s\n", c->tied_embeddings ? "yes" : "no",
           c->attn_qkv_bias ? "yes" : "no", c->attn_out_bias ? "yes" : "no", c->mlp_bias ? "yes" : "no", c->qk_norm ? "yes" : "no");
}

/* The shape as the file holds it (the store's record, qx_store_get_shape), else from ne[]. */
static void shape_text(const qx_store* s, const char* name, const quarot_tensor* t, char* buf, size_t n) {
    int d, nd = 1, rank;
    size_t o = 0;
    const int64_t* shape;
    if (qx_store_get_shape(s, name, t, &rank, &shape)) {
        o += (size_t)snprintf(buf + o, n - o, "[");
        for (d = 0; d < rank && o < n; ++d) o += (size_t)snprintf(buf + o, n - o, "%lld%s", (long long)shape[d], d + 1 < rank ? ", " : "");
        if (o < n) snprintf(buf + o, n - o, "]");
        return;
    }
    for (d = 0; d < QUAROT_MAX_DIMS; ++d)
        if (t->ne[d] > 1) nd = d + 1;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (d = nd - 1; d >= 0 && o < n; --d) o += (size_t)snprintf(buf + o, n - o, "%lld%s", (long long)t->ne[d], d ? ", " : "]");
}

static void human(double bytes, char* buf, size_t n) {
    if (bytes >= 1024.0 * 1024.0 * 1024.0) snprintf(buf, n, "%.2f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
    else if (bytes >= 1024.0 * 1024.0) snprintf(buf, n, "%.2f MiB", bytes / (1024.0 * 1024.0));
    else if (bytes >= 1024.0) snprintf(buf, n, "%.1f KiB", bytes / 1024.0);
    else snprintf(buf, n, "%.0f B", bytes);
}

static void print_tensors(const qx_store* s, int all) {
    int64_t i, j, counts[5] = {0, 0, 0, 0, 0};
    double total = 0;
    char hb[32], sh[96];
    int summarize = !all && s->config.n_layers > 2;
    for (i = 0; i < s->count; ++i) {
        total += (double)quarot_tensor_nelements(&s->items[i].t) * (double)quarot_dtype_size(s->items[i].t.dtype);
        if ((int)s->items[i].t.dtype >= 0 && (int)s->items[i].t.dtype < 5) counts[s->items[i].t.dtype]++;
    }
    human(total, hb, sizeof hb);
    printf("\ntensors: %lld, %s (", (long long)s->count, hb);
    for (j = 1, i = 0; j < 5; ++j)
        if (counts[j]) printf("%s%s: %lld", i++ ? ", " : "", quarot_dtype_name((quarot_dtype)j), (long long)counts[j]);
    printf(")%s\n", summarize ? "; per-layer tensors summarized as model.layers.{first..last}" : "");
    printf("  %-52s %-5s %-18s %s\n", "name", "dtype", "shape", "bytes");
    for (i = 0; i < s->count; ++i) {
        const qx_entry* e = &s->items[i];
        size_t pos = 0, len = 0;
        int64_t L = qx_name_layer(e->name, &pos, &len), lo = L, hi = L, n_same = 1;
        double bytes = (double)quarot_tensor_nelements(&e->t) * (double)quarot_dtype_size(e->t.dtype);
        char name[200];
        if (summarize && L >= 0) {
            /* print a pattern once, at its first member: the other layers with the same suffix */
            int first = 1;
            for (j = 0; j < s->count; ++j) {
                size_t p2, l2;
                const qx_entry* f = &s->items[j];
                int64_t L2 = qx_name_layer(f->name, &p2, &l2);
                if (j == i || L2 < 0 || p2 != pos || strncmp(f->name, e->name, pos) != 0 ||
                    strcmp(f->name + p2 + l2, e->name + pos + len) != 0) continue;
                if (j < i) first = 0;
                if (f->t.dtype == e->t.dtype && memcmp(f->t.ne, e->t.ne, sizeof e->t.ne) == 0) {
                    n_same++;
                    if (L2 < lo) lo = L2;
                    if (L2 > hi) hi = L2;
                }
            }
            if (!first) continue;
            if (n_same > 1) {
                snprintf(name, sizeof name, "%.*s{%lld..%lld}%s", (int)pos, e->name, (long long)lo, (long long)hi, e->name + pos + len);
                shape_text(s, e->name, &e->t, sh, sizeof sh);
                human(bytes, hb, sizeof hb);
                printf("  %-52s %-5s %-18s %s each, x%lld\n", name, quarot_dtype_name(e->t.dtype), sh, hb, (long long)n_same);
                continue;
            }
        }
        shape_text(s, e->name, &e->t, sh, sizeof sh);
        human(bytes, hb, sizeof hb);
        printf("  %-52s %-5s %-18s %s\n", e->name, quarot_dtype_name(e->t.dtype), sh, hb);
    }
}

/* ---- Hadamard constructions ------------------------------------------------------------------- */

static const char* construction_name(quarot_hadamard_construction c) {
    switch (c) {
        case QUAROT_HADAMARD_SYLVESTER: return "Sylvester";
        case QUAROT_HADAMARD_PALEY1: return "Paley I";
        case QUAROT_HADAMARD_PALEY2: return "Paley II";
        case QUAROT_HADAMARD_TABLE: return "embedded table";
        case QUAROT_HADAMARD_KRONECKER: return "Kronecker product";
        default: return "none";
    }
}

static void describe_dim(const char* label, const char* use, int64_t n) {
    quarot_hadamard_info info;
    printf("  %-13s %7lld  ", label, (long long)n);
    if (quarot_hadamard_info_get(n, &info) == QUAROT_OK) {
        if (info.K == 1) printf("H_%lld = H_2^%d (Sylvester)", (long long)n, info.m);
        else if (info.m == 0) printf("H_%lld by %s", (long long)n, construction_name(info.construction));
        else printf("H_%lld = H_%lld (x) H_2^%d, H_%lld by %s", (long long)n, (long long)info.K, info.m, (long long)info.K,
                    construction_name(info.construction));
        if (info.construction == QUAROT_HADAMARD_PALEY1 || info.construction == QUAROT_HADAMARD_PALEY2) printf(" over GF(%lld)", (long long)info.q);
        if (info.construction == QUAROT_HADAMARD_KRONECKER) printf(" H_%lld (x) H_%lld", (long long)info.a, (long long)info.b);
        printf("; %.4g adds/row", (double)n * info.m + (info.K > 1 ? (double)info.K * (double)n : 0.0));
    } else {
        int64_t b = quarot_hadamard_largest_block(n, n);
        printf("no Hadamard of order %lld", (long long)n);
        if (b > 1) printf("; block-diagonal fallback: %lld blocks of %lld", (long long)(n / b), (long long)b);
        else printf("; fallback: random orthogonal (offline rotations only)");
    }
    printf("  -- %s\n", use);
}

/* ---- activation statistics -------------------------------------------------------------------- */

typedef struct site_stats {
    int64_t n;                /* channels */
    float* chmax;             /* [n] per-channel max |x| */
    double sum, sum2, sum3, sum4, count, absmax;
} site_stats;

typedef struct capture_ctx {
    site_stats* st;           /* [n_layers][2]: q/k/v input, down_proj input */
    int64_t n_layers;
    int failed;
} capture_ctx;

static void on_capture(void* user, int64_t layer, const char* linear, const float* x, int64_t rows, int64_t n) {
    capture_ctx* c = (capture_ctx*)user;
    site_stats* s;
    int64_t r, j;
    int site;
    if (layer < 0 || layer >= c->n_layers) return;
    if (strstr(linear, "q_proj.weight") || strstr(linear, "qkv_proj.weight")) site = 0;   /* q, k and v see the same input:
                                                                                              count it once */
    else if (strstr(linear, "down_proj.weight") || strstr(linear, ".fc2.weight")) site = 1;
    else return;
    s = &c->st[layer * 2 + site];
    if (!s->chmax) {
        s->chmax = (float*)calloc((size_t)n, sizeof(float));
        if (!s->chmax) { c->failed = 1; return; }
        s->n = n;
    }
    if (s->n != n) { c->failed = 1; return; }
    for (r = 0; r < rows; ++r)
        for (j = 0; j < n; ++j) {
            double v = x[r * n + j], a = fabs(v);
            if ((float)a > s->chmax[j]) s->chmax[j] = (float)a;
            if (a > s->absmax) s->absmax = a;
            s->sum += v;
            s->sum2 += v * v;
            s->sum3 += v * v * v;
            s->sum4 += v * v * v * v;
        }
    s->count += (double)(rows * n);
}

static int cmp_float(const void* a, const void* b) {
    float x = *(const float*)a, y = *(const float*)b;
    return x < y ? -1 : x > y ? 1 : 0;
}

/* max over channels / median over channels of per-channel max |x|, and the kurtosis of all values. */
static void summarize(const site_stats* s, double* ratio, double* kurt) {
    float* tmp;
    double med, m, var, m4;
    *ratio = *kurt = NAN;
    if (!s->chmax || s->count < 2) return;
    tmp = (float*)malloc((size_t)s->n * sizeof(float));
    if (!tmp) return;
    memcpy(tmp, s->chmax, (size_t)s->n * sizeof(float));
    qsort(tmp, (size_t)s->n, sizeof(float), cmp_float);
    med = s->n % 2 ? tmp[s->n / 2] : 0.5 * ((double)tmp[s->n / 2 - 1] + (double)tmp[s->n / 2]);
    *ratio = med > 0 ? (double)tmp[s->n - 1] / med : INFINITY;
    free(tmp);
    /* central moments from raw sums: E[(x-m)^4] = E[x^4] - 4m E[x^3] + 6m^2 E[x^2] - 3m^4 */
    m = s->sum / s->count;
    var = s->sum2 / s->count - m * m;
    m4 = s->sum4 / s->count - 4 * m * s->sum3 / s->count + 6 * m * m * s->sum2 / s->count - 3 * m * m * m * m;
    *kurt = var > 0 ? m4 / (var * var) : NAN;
}

static void free_stats(site_stats* st, int64_t n) {
    int64_t i;
    if (!st) return;
    for (i = 0; i < n; ++i) free(st[i].chmax);
    free(st);
}

/* One forward pass of tokens through s (with hooks when given), capturing the two sites. */
static quarot_result collect(const qx_store* s, const quarot_online_list* hooks, const int32_t* tokens, int64_t T,
                             site_stats** out, qx_err* e) {
    qx_forward f;
    qx_forward_opts o;
    qx_online_ctx oc;
    quarot_online_list mh;
    capture_ctx cc;
    quarot_result r;
    memset(&o, 0, sizeof o);
    memset(&cc, 0, sizeof cc);
    cc.n_layers = s->config.n_layers;
    cc.st = (site_stats*)calloc((size_t)(2 * cc.n_layers), sizeof(site_stats));
    if (!cc.st) return QUAROT_ERR_OUT_OF_MEMORY;
    qx_online_ctx_init(&oc, hooks);
    r = qx_model_hooks_get(s, &mh, e);   /* the model's own hooks (qx_model_hooks_attach), run first */
    if (r != QUAROT_OK) { free_stats(cc.st, 2 * cc.n_layers); return r; }
    if (mh.count > 0) oc.base = &mh;
    if (hooks || mh.count > 0) { o.online = qx_online_hooks; o.online_user = &oc; }
    o.capture = on_capture;
    o.capture_user = &cc;
    r = qx_forward_init(&f, s, &o, e);
    if (r == QUAROT_OK) {
        r = qx_forward_window(&f, tokens, T, NULL, e);
        qx_forward_free(&f);
    }
    if (r == QUAROT_OK && oc.status != QUAROT_OK) { r = oc.status; qx_err_set(e, "online hooks: %s", quarot_result_string(r)); }
    if (r == QUAROT_OK && cc.failed) { r = QUAROT_ERR_OUT_OF_MEMORY; qx_err_set(e, "statistics: out of memory"); }
    qx_online_ctx_free(&oc);
    quarot_online_list_free(&mh);
    if (r != QUAROT_OK) { free_stats(cc.st, 2 * cc.n_layers); return r; }
    *out = cc.st;
    return QUAROT_OK;
}

/* ---- one run -------------------------------------------------------------------------------- */

/* What one `quarot inspect` reads and builds; inspect_free frees it. */
typedef struct inspect_state {
    qx_cli cli;
    inspect_opts o;
    qx_store s, rot;                   /* the model; its copy rotated in memory */
    quarot_online_list hooks;          /* the rotated copy's */
    int32_t* tokens;                   /* the statistics' input */
    int64_t T, L;                      /* tokens run; decoder layers */
    int offline_ok, online_ok;         /* what `quarot rotate` (with --online --r3) can build */
    site_stats *before, *after;        /* [L][2] */
    int have_model;
} inspect_state;

static void inspect_init(inspect_state* st) {
    memset(st, 0, sizeof *st);
    qx_cli_init(&st->cli, "inspect", 0);
    st->o.tokens = 128;
    qx_opts_rotation_init(&st->o.rot);
    qx_store_init(&st->rot);
    quarot_online_list_init(&st->hooks, NULL);
    st->offline_ok = st->online_ok = 1;
}

static void inspect_free(inspect_state* st) {
    if (!st->have_model) return;
    free_stats(st->before, 2 * st->L);
    free_stats(st->after, 2 * st->L);
    free(st->tokens);
    quarot_online_list_free(&st->hooks);
    qx_store_free(&st->rot);
    qx_store_free(&st->s);
}

/* The model and its own online hooks. */
static int inspect_load_model(inspect_state* st) {
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    memset(&lo, 0, sizeof lo);
    r = qx_load_model(st->o.model, &lo, &st->s, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    st->have_model = 1;
    st->L = st->s.config.n_layers;
    return qx_cli_model_hooks(&st->cli, &st->s, st->o.model, st->o.in.hooks);
}

/* --text: its first tokens under the model's own tokenizer (GGUF metadata, tokenizer.json,
   tok*.bin) or --tokenizer */
static int inspect_text_tokens(inspect_state* st) {
    const inspect_opts* o = &st->o;
    qx_tokenizer tk;
    char tok_buf[4096];
    int32_t* all_tokens = NULL;
    int64_t n_all = 0;
    qx_err e;
    quarot_result r = qx_tokenizer_for_model(&tk, o->model, o->in.tokenizer, st->s.config.vocab, tok_buf, sizeof tok_buf, &e);
    if (r != QUAROT_OK)
        return qx_cli_fail(&st->cli, r == QUAROT_ERR_NOT_FOUND ? QX_EXIT_USAGE : QX_EXIT_INPUT, "%s%s", e.msg,
                           r == QUAROT_ERR_NOT_FOUND ? " (or drop --text for random token ids)" : "");
    r = qx_tokenize_file(&tk, o->text, tk.add_bos, 0, &all_tokens, &n_all, &e);
    qx_tokenizer_free(&tk);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s", e.msg);
    if (n_all < 2) { free(all_tokens); return qx_cli_fail(&st->cli, QX_EXIT_INPUT, "%s: too short (fewer than 2 tokens)", o->text); }
    st->T = n_all < o->tokens ? n_all : o->tokens;
    st->tokens = all_tokens;
    return QX_EXIT_OK;
}

/* No --text: BOS and random ids drawn from --seed */
static int inspect_random_tokens(inspect_state* st) {
    const int64_t vocab = st->s.config.vocab;
    quarot_rng rng;
    int64_t i;
    st->tokens = (int32_t*)malloc((size_t)st->o.tokens * sizeof(int32_t));
    if (!st->tokens) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory");
    quarot_rng_seed(&rng, (uint64_t)st->o.rot.seed);
    st->tokens[0] = 1;   /* BOS in llama2.c / LLaMA vocabularies */
    for (i = 1; i < st->o.tokens; ++i) st->tokens[i] = (int32_t)(quarot_rng_u64(&rng) % (uint64_t)vocab);
    if (vocab < 2) st->tokens[0] = 0;
    st->T = st->o.tokens;
    return QX_EXIT_OK;
}

/* The statistics' tokens first, so that a bad --text fails before anything is printed. */
static int inspect_tokens(inspect_state* st) {
    if (st->o.no_stats) return QX_EXIT_OK;
    if (st->s.config.max_seq > 0 && st->o.tokens > st->s.config.max_seq) st->o.tokens = st->s.config.max_seq;
    return st->o.text ? inspect_text_tokens(st) : inspect_random_tokens(st);
}

static void print_hadamard(const qx_store* s) {
    int64_t hd = s->config.head_dim ? s->config.head_dim : s->config.hidden / s->config.n_heads;
    printf("\nhadamard constructions (H_n = H_K (x) H_2^m; transform cost n*m + K*n adds per row):\n");
    describe_dim("hidden", "R1, residual stream (offline)", s->config.hidden);
    describe_dim("head_dim", "R2 v/o per head (offline), R3 q/k after RoPE (online)", hd);
    describe_dim("intermediate", "R4 down_proj input (online)", s->config.intermediate);
    describe_dim("n_heads", "o_proj input across heads (online)", s->config.n_heads);
}

/* What `quarot rotate` builds per dimension (qx_rotcheck.h): warnings are what rotate warns about. */
static void print_rotate_plan(inspect_state* st) {
    qx_rotcheck_opts co;
    qx_rotcheck_dim dims[8];
    int nd, j;
    memset(&co, 0, sizeof co);
    co.online = 1;
    co.r3 = 1;
    nd = qx_rotcheck(&st->s.config, &co, dims, 8);
    printf("\nquarot rotate would build (seed-independent; --online / --r3 rows only with those options):\n");
    for (j = 0; j < nd; ++j) {
        printf("  %-20s %7lld  %s%s\n", dims[j].what, (long long)dims[j].dim, dims[j].warn ? "WARNING: " : "", dims[j].text);
        if (j >= 2 && dims[j].fails) st->online_ok = 0;
        if (j < 2 && dims[j].fails) st->offline_ok = 0;
    }
    printf("  => quarot rotate: %s; with --online --r3: %s\n", st->offline_ok ? "ok" : "fails", st->online_ok ? "ok" : "fails");
}

/* The rotated copy: default QuaRot with online hooks, in memory (where the online rotations cannot
   be built, R1 + R2 only, as rotate would). */
static int inspect_rotate_copy(inspect_state* st) {
    quarot_model m;
    qx_binding b;
    quarot_rotate_desc d;
    quarot_result r;
    qx_cli_phase(&st->cli);
    if (qx_store_clone(&st->s, &st->rot) != QUAROT_OK) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory");
    memset(&d, 0, sizeof d);
    d.seed = (uint64_t)st->o.rot.seed;
    d.online = st->online_ok;
    d.online_out = &st->hooks;
    qx_model_bind(&m, &b, &st->rot);
    r = quarot_rotate_model(&m, &d);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: cannot rotate: %s", st->o.model, m.error);
    qx_model_sync(&m, &st->rot);
    return QX_EXIT_OK;
}

/* The two sites of every layer before and after rotation, as a table. */
static int inspect_outliers(inspect_state* st) {
    qx_err e;
    quarot_result r;
    int64_t i;
    if ((r = collect(&st->s, NULL, st->tokens, st->T, &st->before, &e)) != QUAROT_OK ||
        (r = collect(&st->rot, &st->hooks, st->tokens, st->T, &st->after, &e)) != QUAROT_OK)
        return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: forward pass: %s", st->o.model, e.msg);
    qx_cli_progress_end(&st->cli, "statistics");
    printf("\nactivation outliers: %lld tokens (%s); per site: max |x|, max/median of per-channel max |x|, kurtosis\n", (long long)st->T,
           st->o.text ? st->o.text : "random ids");
    printf("  original, and after QuaRot (R1 + R2 folded%s)\n", st->online_ok ? ", online down_proj and o_proj Hadamard" : "; no online rotation: see above");
    printf("  %-5s %-11s %10s %9s %9s   %10s %9s %9s\n", "layer", "site", "max", "max/med", "kurt", "rot max", "max/med", "kurt");
    for (i = 0; i < st->L; ++i) {
        int site;
        for (site = 0; site < 2; ++site) {
            const site_stats* b0 = &st->before[i * 2 + site];
            const site_stats* a0 = &st->after[i * 2 + site];
            double rb, kb, ra, ka;
            summarize(b0, &rb, &kb);
            summarize(a0, &ra, &ka);
            printf("  %-5d %-11s %10.4g %9.2f %9.2f   %10.4g %9.2f %9.2f\n", (int)i, site ? "down input" : "q/k/v input", b0->absmax, rb, kb,
                   a0->absmax, ra, ka);
        }
    }
    return QX_EXIT_OK;
}

int qx_cmd_inspect(int argc, char** argv) {
    inspect_state st;
    int rc;
    inspect_init(&st);
    rc = qx_opts_parse(&qx_cmd_inspect_spec, &st.cli, argc, argv, &st.o);
    if (rc != QX_OPTS_RUN) return rc;   /* --help, or a usage error */
    st.cli.quiet = st.o.c.quiet;
    if (!st.o.model) return qx_cli_fail(&st.cli, QX_EXIT_USAGE, "needs MODEL (usage: quarot inspect MODEL [options])");
    rc = inspect_load_model(&st);
    if (!rc) rc = inspect_tokens(&st);
    if (!rc) {
        print_config(&st.s, st.o.model);
        print_tensors(&st.s, st.o.all_tensors);
        print_hadamard(&st.s);
        print_rotate_plan(&st);
    }
    if (!rc && !st.o.no_stats) rc = inspect_rotate_copy(&st);
    if (!rc && !st.o.no_stats) rc = inspect_outliers(&st);
    inspect_free(&st);
    return rc;
}
