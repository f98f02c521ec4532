/* qx_cmd_generate.c - `quarot generate`: text from a model through the inference engine
   (examples/engine/): FP32, or W4A4 / W8A8 / any bits with the integer kernels of quarot.h, online
   hooks and a quantized KV cache, prefill + token-by-token decode, greedy or temperature / top-p
   sampling with a seed, threads through the qx_threads pool (the same text for any thread count). */
#include "cli/qx_cli.h"
#include "engine/qx_engine.h"
#include "eval/qx_eval.h"
#include "eval/qx_evalkit.h"
#include "support/qx_file.h"
#include "support/qx_threads.h"
#include "tokenizer/qx_tok_load.h"
#include "tokenizer/qx_tokenizer.h"
#include "formats/qx_load.h"
#include "cli/qx_opts.h"

#include <stdlib.h>
#include <string.h>

typedef struct generate_opts {
    const char *model, *prompt, *tokenizer, *hooks;
    int64_t n_gen, seed, group, context;
    double temp, top_p, clip;
    int w_bits, a_bits, kv_bits, quarot;
    int w_given, a_given, kv_given, clip_given;
    qx_opts_common c;
} generate_opts;

static int check_bits(qx_cli* cli, const qx_opt* o, const char* name, const char* v, void* base) {
    int b = *(int*)((char*)base + o->off);
    (void)v;
    if (b > 8 && b != 16) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %d bits: 2..8, or 16 for not quantized", name, b), 0;
    return 1;
}

static const qx_opt generate_table[] = {
    {QX_OPT_STRING, "--prompt", .arg = "TEXT", QX_AT(generate_opts, prompt), .def = "none, start from BOS", .help = "the prompt"},
    {QX_OPT_INT, "-n", .arg = "N", QX_AT(generate_opts, n_gen), .lo = 0, .hi = INT64_C(1) << 30, .def = "256", .help = "tokens to generate"},
    {QX_OPT_FLOAT, "--temp", .arg = "T", QX_AT(generate_opts, temp), .flo = 0.0, .fhi = 100.0, .def = "0 = greedy: the most likely token",
     .help = "sampling temperature"},
    {QX_OPT_FLOAT, "--top-p", .arg = "P", QX_AT(generate_opts, top_p), .flo = 0.0, .fhi = 1.0, .def = "0.9",
     .help = "nucleus sampling: draw from the smallest set of tokens holding mass P (1 = all tokens); only with --temp > 0"},
    {QX_OPT_INT, "--seed", .arg = "S", QX_AT(generate_opts, seed), .lo = 0, .hi = INT64_MAX, .def = "0",
     .help = "seed of the sampler: quarot_rng, the same on every platform"},
    {QX_OPT_INT, "--w-bits", .arg = "N", QX_AT(generate_opts, w_bits), QX_GIVEN(generate_opts, w_given), .lo = 2, .hi = 16,
     .fn = check_bits, .def = "16 = FP32",
     .help = "decoder-linear weights: RTN symmetric per output channel (or --group-size), 2..8 bits; 2..4 bits run the packed int4 "
             "kernels"},
    {QX_OPT_INT, "--a-bits", .arg = "N", QX_AT(generate_opts, a_bits), QX_GIVEN(generate_opts, a_given), .lo = 2, .hi = 16,
     .fn = check_bits, .def = "16 = FP", .help = "activations per token symmetric at every decoder-linear input, 2..8 bits"},
    {QX_OPT_INT, "--kv-bits", .arg = "N", QX_AT(generate_opts, kv_bits), QX_GIVEN(generate_opts, kv_given), .lo = 2, .hi = 16,
     .fn = check_bits, .def = "16 = FP32", .help = "KV cache per token per head asymmetric, stored as codes, 2..8 bits"},
    {QX_OPT_INT, "--group-size", .arg = "N", QX_AT(generate_opts, group), .lo = 1, .hi = 1 << 20, .def = "per output channel",
     .help = "weight groups of N input channels"},
    {QX_OPT_FLOAT, "--clip", .arg = "R", QX_AT(generate_opts, clip), QX_GIVEN(generate_opts, clip_given), .flo = 0.0, .fhi = 1.0,
     .open = QX_OPT_OPEN_LO, .def = "1.0", .help = "activation clip ratio in (0, 1]"},
    {QX_OPT_FLAG, "--quarot", QX_AT(generate_opts, quarot),
     .help = "rotate the model in memory first (QuaRot, as `quarot eval`: R1/R2 folded, online Hadamard hooks; the q/k rotation "
             "too with --kv-bits)"},
    {QX_OPT_STRING, "--hooks", .arg = "FILE", QX_AT(generate_opts, hooks),
     .def = "MODEL.quarot-online or MODEL/quarot_online.txt when present, as `quarot rotate --online` writes",
     .help = "online hook file of a rotated model"},
    {QX_OPT_STRING, "--tokenizer", .arg = "FILE", QX_AT(generate_opts, tokenizer),
     .def = "tok<vocab>.bin, tok512.bin or tokenizer.bin beside the model", .help = "llama2.c tokenizer"},
    {QX_OPT_INT, "--context", .arg = "N", QX_AT(generate_opts, context), .lo = 2, .hi = 1 << 24, .def = "the model's max_seq, else 2048",
     .help = "KV cache positions"},
    {QX_OPT_END}
};
static const qx_opt_group generate_group = {"options:", generate_table, NULL};

const qx_opts_cmd qx_cmd_generate_spec = {
    .name = "generate",
    .synopsis = "MODEL [--prompt TEXT] [-n N] [options]",
    .about = "Generates text with the reference inference engine (examples/engine/): the prompt (after BOS) is\n"
             "run as one prefill block, then one token at a time through the KV cache, printed as it comes.\n"
             "Generation stops after N tokens (default 256), at the end of the context, or at a BOS/EOS token.\n"
             "MODEL may be the packed W4A4 file of `quarot quantize OUT.safetensors`: its integer codes and scales\n"
             "run as stored, with the activation / KV settings and the online hooks of its metadata (no\n"
             "quantization flags needed; one that contradicts the file is an error, as are --quarot and --hooks).\n",
    .operands = {{"MODEL", offsetof(generate_opts, model)}},
    .uses = {{&generate_group, 0, 0, NULL},
             {&qx_opts_common_group, offsetof(generate_opts, c), QX_COMMON_THREADS | QX_COMMON_QUIET_Q, NULL}},
    .epilog = "Statistics (stderr, unless --quiet): prefill and decode tokens/s, weight and KV-cache memory.\n"
              "Exit codes: 0 ok, 1 usage, 2 input, 4 cannot run as asked (e.g. a prompt longer than the\n"
              "context, hooks for another model), 5 internal or out of memory.\n",
};

/* Read an online hook file into list (initialized by the caller). */
static quarot_result read_hooks(const char* path, quarot_online_list* list, qx_err* e) {
    char* text = NULL;
    size_t len = 0;
    char msg[256];
    quarot_result r = qx_ek_read_file(path, &text, &len, e);
    if (r != QUAROT_OK) return r;
    msg[0] = '\0';
    r = quarot_online_read(list, text, len, msg, sizeof msg);
    free(text);
    if (r != QUAROT_OK) qx_err_set(e, "%s: %s", path, msg[0] ? msg : quarot_result_string(r));
    return r;
}

/* ---- one run -------------------------------------------------------------------------------- */

/* What one `quarot generate` reads and builds; generate_free frees it. */
typedef struct generate_state {
    qx_cli cli;
    generate_opts o;
    int packed;                    /* MODEL is a packed W4A4 file: the engine reads it itself */
    int64_t vocab;
    qx_store model, rot;           /* rot: --quarot's */
    quarot_online_list hooks;      /* --quarot's, or the hook file's */
    qx_tokenizer tok;
    char tok_path[4096], hook_path[4200];
    qx_pool* pool;
    quarot_env env;
    qx_engine en;
    qx_engine_opts eo;
    int32_t* ptoks;                /* the prompt: BOS + text */
    int64_t n_prompt, done;        /* done: tokens generated */
    float *logits, *work;
    double t_prefill, t_decode;
    int have_model, have_rot, have_tok, have_eng;
} generate_state;

static void generate_init(generate_state* st) {
    memset(st, 0, sizeof *st);
    qx_cli_init(&st->cli, "generate", 0);
    st->o.prompt = "";
    st->o.n_gen = 256;
    st->o.top_p = 0.9;
    st->o.clip = 1.0;
    st->o.w_bits = st->o.a_bits = st->o.kv_bits = 16;
    quarot_online_list_init(&st->hooks, NULL);
}

static void generate_free(generate_state* st) {
    free(st->logits);
    free(st->work);
    free(st->ptoks);
    if (st->have_eng) qx_engine_free(&st->en);
    qx_pool_destroy(st->pool);
    quarot_online_list_free(&st->hooks);
    if (st->have_rot) qx_store_free(&st->rot);
    if (st->have_tok) qx_tokenizer_free(&st->tok);
    if (st->have_model) qx_store_free(&st->model);
}

/* The engine's failure: input errors stay input errors, the rest cannot run as asked. */
static int generate_engine_exit(quarot_result r) {
    return r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_INPUT : QX_EXIT_PROCESS;
}

/* The packed W4A4 file: the engine reads its codes, settings and hooks itself; the quantization
   flags given must agree with the file, and the engine's settings become the run's. */
static int generate_load_packed(generate_state* st) {
    generate_opts* o = &st->o;
    qx_engine_opts* eo = &st->eo;
    qx_err e;
    quarot_result r;
    if (o->quarot) return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "--quarot: %s is a packed file, rotated already", o->model);
    if (o->hooks) return qx_cli_fail(&st->cli, QX_EXIT_USAGE, "--hooks: %s carries its online hooks in its metadata", o->model);
    st->pool = qx_pool_create(o->c.threads ? (int)o->c.threads : qx_cpu_count());
    qx_pool_env(st->pool, &st->env);
    memset(eo, 0, sizeof *eo);
    eo->w_bits = o->w_given ? o->w_bits : 0;
    eo->a_bits = o->a_given ? o->a_bits : 0;
    eo->kv_bits = o->kv_given ? o->kv_bits : 0;
    eo->w_group = o->group;
    eo->a_clip = o->clip_given ? (float)o->clip : 0.0f;
    eo->context = o->context;
    eo->env = &st->env;
    r = qx_engine_load_packed(&st->en, o->model, eo, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, generate_engine_exit(r), "%s", e.msg);
    st->have_eng = 1;
    st->vocab = st->en.cfg.vocab;
    o->context = st->en.context;
    o->w_bits = st->en.opts.w_bits;
    o->a_bits = st->en.opts.a_bits;
    o->kv_bits = st->en.opts.kv_bits;
    if (st->en.file_hooks && st->en.file_hooks->count)
        qx_cli_info(&st->cli, "online hooks: %lld from the file's metadata", (long long)st->en.file_hooks->count);
    return QX_EXIT_OK;
}

/* The model: a packed file into the engine, anything else into a store. */
static int generate_load_model(generate_state* st) {
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    memset(&lo, 0, sizeof lo);
    st->packed = qx_engine_is_packed_file(st->o.model);
    if (st->packed) return generate_load_packed(st);
    r = qx_load_model(st->o.model, &lo, &st->model, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s", e.msg);
    st->have_model = 1;
    st->vocab = st->model.config.vocab;
    return QX_EXIT_OK;
}

/* --tokenizer, or the llama2.c tokenizer beside the model. */
static int generate_tokenizer(generate_state* st) {
    char looked[4096 * 3 + 64];
    qx_err e;
    quarot_result r;
    if (st->o.tokenizer) snprintf(st->tok_path, sizeof st->tok_path, "%s", st->o.tokenizer);
    else if (!qx_tokenizer_find_bin(st->o.model, st->vocab, st->tok_path, sizeof st->tok_path, looked, sizeof looked))
        return qx_cli_fail(&st->cli, QX_EXIT_INPUT, "%s: no tokenizer found (looked for %s); pass --tokenizer FILE", st->o.model, looked);
    r = qx_tokenizer_load(&st->tok, st->tok_path, (int32_t)st->vocab, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s", e.msg);
    st->have_tok = 1;
    return QX_EXIT_OK;
}

/* The online hooks: a packed file's are its own; --quarot rotates the model in memory and builds
   them; otherwise --hooks FILE, or MODEL.quarot-online / MODEL/quarot_online.txt when present. */
static int generate_hooks(generate_state* st) {
    const generate_opts* o = &st->o;
    qx_err e;
    quarot_result r;
    if (st->packed) return QX_EXIT_OK;
    if (o->quarot) {
        r = qx_ek_quarot(&st->model, 0, o->kv_bits < 16, &st->rot, &st->hooks, NULL, 0, NULL, NULL, &e);
        if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "%s: QuaRot: %s", o->model, e.msg);
        st->have_rot = 1;
        return QX_EXIT_OK;
    }
    st->hook_path[0] = '\0';
    if (o->hooks) snprintf(st->hook_path, sizeof st->hook_path, "%s", o->hooks);
    else {
        snprintf(st->hook_path, sizeof st->hook_path, "%s.quarot-online", o->model);
        if (!qx_is_file(st->hook_path)) snprintf(st->hook_path, sizeof st->hook_path, "%s/quarot_online.txt", o->model);
        if (!qx_is_file(st->hook_path)) st->hook_path[0] = '\0';
    }
    if (!st->hook_path[0]) return QX_EXIT_OK;
    r = read_hooks(st->hook_path, &st->hooks, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    qx_cli_info(&st->cli, "online hooks: %s (%lld hooks)", st->hook_path, (long long)st->hooks.count);
    return QX_EXIT_OK;
}

/* The prompt: BOS + text, checked against the context before any work. */
static int generate_prompt(generate_state* st) {
    generate_opts* o = &st->o;
    size_t len = strlen(o->prompt);
    int64_t cap = qx_tokenizer_max_tokens(len);
    qx_err e;
    quarot_result r;
    st->ptoks = (int32_t*)malloc((size_t)cap * sizeof *st->ptoks);
    if (!st->ptoks) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory");
    r = qx_tokenizer_encode(&st->tok, o->prompt, len, 1, 0, st->ptoks, cap, &st->n_prompt, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, qx_cli_exit_for(r), "--prompt: %s", e.msg);
    if (!o->context) o->context = st->model.config.max_seq > 0 ? st->model.config.max_seq : 2048;   /* (packed: the engine's) */
    if (st->n_prompt > o->context)
        return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "--prompt: %lld tokens (BOS included), longer than the context of %lld tokens",
                           (long long)st->n_prompt, (long long)o->context);
    return QX_EXIT_OK;
}

/* The engine on the store (the rotated one with --quarot), unless a packed file loaded it; the
   logits and the sampler's buffers. */
static int generate_engine(generate_state* st) {
    const generate_opts* o = &st->o;
    qx_engine_opts* eo = &st->eo;
    qx_err e;
    if (!st->packed) {
        quarot_result r;
        st->pool = qx_pool_create(o->c.threads ? (int)o->c.threads : qx_cpu_count());
        qx_pool_env(st->pool, &st->env);
        memset(eo, 0, sizeof *eo);
        eo->w_bits = o->w_bits;
        eo->a_bits = o->a_bits;
        eo->kv_bits = o->kv_bits;
        eo->w_group = o->group;
        eo->a_clip = (float)o->clip;
        eo->context = o->context;
        eo->max_tokens = st->n_prompt > 512 ? 512 : st->n_prompt;
        eo->hooks = st->hooks.count ? &st->hooks : NULL;
        eo->env = &st->env;
        r = qx_engine_init(&st->en, st->have_rot ? &st->rot : &st->model, eo, &e);
        if (r != QUAROT_OK) return qx_cli_fail(&st->cli, generate_engine_exit(r), "%s: %s", o->model, e.msg);
        st->have_eng = 1;
    }
    st->logits = (float*)malloc((size_t)st->vocab * sizeof(float));
    st->work = (float*)malloc((size_t)st->vocab * 2 * sizeof(float));
    if (!st->logits || !st->work) return qx_cli_fail(&st->cli, QX_EXIT_INTERNAL, "out of memory");
    return QX_EXIT_OK;
}

/* The prompt in blocks of max_tokens, then printed (after BOS) as run.c does. */
static int generate_prefill(generate_state* st) {
    qx_engine* en = &st->en;
    quarot_result r = QUAROT_OK;
    qx_err e;
    double t0 = qx_now();
    int64_t t;
    for (t = 0; t < st->n_prompt && r == QUAROT_OK; t += en->max_tokens) {
        int64_t nb = st->n_prompt - t < en->max_tokens ? st->n_prompt - t : en->max_tokens;
        r = qx_engine_forward(en, st->ptoks + t, nb, st->logits, 0, &e);
    }
    st->t_prefill = qx_now() - t0;
    if (r != QUAROT_OK) return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "%s", e.msg);
    for (t = 1; t < st->n_prompt; ++t) {
        size_t pl;
        const char* p = qx_tokenizer_decode(&st->tok, st->ptoks[t - 1], st->ptoks[t], &pl);
        if (p && qx_tokenizer_safe_piece(p, pl)) fwrite(p, 1, pl, stdout);
    }
    return QX_EXIT_OK;
}

/* One token at a time: sample, print, run it, until -n tokens, the end of the context, or BOS/EOS. */
static int generate_decode(generate_state* st) {
    qx_engine* en = &st->en;
    quarot_rng rng;
    qx_err e;
    int32_t prev = st->ptoks[st->n_prompt - 1], next;
    double t0;
    quarot_rng_seed(&rng, (uint64_t)st->o.seed);
    t0 = qx_now();
    for (st->done = 0; st->done < st->o.n_gen && en->pos < en->context; ++st->done) {
        size_t pl;
        const char* p;
        next = qx_engine_sample(st->logits, st->vocab, (float)st->o.temp, (float)st->o.top_p, &rng, st->work);
        if (next == 1 || next == 2) break;   /* BOS / EOS delimit sequences */
        p = qx_tokenizer_decode(&st->tok, prev, next, &pl);
        if (p && qx_tokenizer_safe_piece(p, pl)) fwrite(p, 1, pl, stdout);
        fflush(stdout);
        prev = next;
        if (st->done + 1 < st->o.n_gen && en->pos < en->context) {
            quarot_result r = qx_engine_forward(en, &next, 1, st->logits, 0, &e);
            if (r != QUAROT_OK) return qx_cli_fail(&st->cli, QX_EXIT_PROCESS, "%s", e.msg);
        }
    }
    st->t_decode = qx_now() - t0;
    return QX_EXIT_OK;
}

/* The statistics on stderr: speeds, threads, memory, the setting. */
static void generate_report(generate_state* st) {
    const qx_engine* en = &st->en;
    printf("\n");
    fflush(stdout);
    qx_cli_info(&st->cli, "%lld prompt tokens in %.3f s (%.1f tok/s), %lld generated in %.3f s (%.1f tok/s); %d threads; weights %.2f MiB (decoder linears), KV cache %.2f MiB; W%d A%d KV%d%s",
                (long long)st->n_prompt, st->t_prefill, st->t_prefill > 0 ? (double)st->n_prompt / st->t_prefill : 0.0, (long long)st->done,
                st->t_decode, st->t_decode > 0 ? (double)st->done / st->t_decode : 0.0, qx_pool_threads(st->pool), (double)en->weight_bytes / 1048576.0,
                (double)en->kv_bytes / 1048576.0, st->o.w_bits, st->o.a_bits, st->o.kv_bits,
                st->hooks.count || (en->file_hooks && en->file_hooks->count) ? ", online hooks" : "");
}

int qx_cmd_generate(int argc, char** argv) {
    generate_state st;
    int rc;
    generate_init(&st);
    rc = qx_opts_parse(&qx_cmd_generate_spec, &st.cli, argc, argv, &st.o);
    if (rc != QX_OPTS_RUN) return rc;   /* --help, or a usage error */
    st.cli.quiet = st.o.c.quiet;
    if (!st.o.model) return qx_cli_fail(&st.cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot generate MODEL; see --help)");
    if (st.o.quarot && st.o.hooks) return qx_cli_fail(&st.cli, QX_EXIT_USAGE, "--quarot builds its own hooks: do not also give --hooks");
    rc = generate_load_model(&st);
    if (!rc) rc = generate_tokenizer(&st);
    if (!rc) rc = generate_hooks(&st);       /* a packed file's, --quarot's or the hook file's */
    if (!rc) rc = generate_prompt(&st);
    if (!rc) rc = generate_engine(&st);
    if (!rc) rc = generate_prefill(&st);
    if (!rc) rc = generate_decode(&st);
    if (!rc) generate_report(&st);
    generate_free(&st);
    return rc;
}
