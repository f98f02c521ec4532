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

int qx_cmd_generate(int argc, char** argv) {
    qx_cli cli;
    generate_opts o;
    int rc = QX_EXIT_OK;
    int have_model = 0, have_rot = 0, have_tok = 0, have_eng = 0, packed = 0;
    int64_t vocab = 0;
    qx_store model, rot;
    quarot_online_list hooks;
    qx_tokenizer tok;
    qx_engine en;
    qx_engine_opts eo;
    qx_pool* pool = NULL;
    quarot_env env;
    quarot_rng rng;
    qx_load_opts lo;
    qx_err e;
    quarot_result r;
    char tok_path[4096], looked[4096 * 3 + 64], hook_path[4200];
    int32_t *ptoks = NULL, prev, next;
    float *logits = NULL, *work = NULL;
    int64_t n_prompt = 0, t, done = 0;
    double t0, t_prefill = 0.0, t_decode = 0.0;

    qx_cli_init(&cli, "generate", 0);
    memset(&o, 0, sizeof o);
    o.prompt = "";
    o.n_gen = 256;
    o.top_p = 0.9;
    o.clip = 1.0;
    o.w_bits = o.a_bits = o.kv_bits = 16;
    if ((rc = qx_opts_parse(&qx_cmd_generate_spec, &cli, argc, argv, &o)) != QX_OPTS_RUN) return rc;
    rc = QX_EXIT_OK;
    cli.quiet = o.c.quiet;
    if (!o.model) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot generate MODEL; see --help)");
    if (o.quarot && o.hooks) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--quarot builds its own hooks: do not also give --hooks");

    memset(&lo, 0, sizeof lo);
    quarot_online_list_init(&hooks, NULL);
    packed = qx_engine_is_packed_file(o.model);
    if (packed) {
        /* the packed W4A4 file: the engine reads its codes, settings and hooks itself */
        if (o.quarot) { rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--quarot: %s is a packed file, rotated already", o.model); goto done; }
        if (o.hooks) { rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--hooks: %s carries its online hooks in its metadata", o.model); goto done; }
        pool = qx_pool_create(o.c.threads ? (int)o.c.threads : qx_cpu_count());
        qx_pool_env(pool, &env);
        memset(&eo, 0, sizeof eo);
        eo.w_bits = o.w_given ? o.w_bits : 0;
        eo.a_bits = o.a_given ? o.a_bits : 0;
        eo.kv_bits = o.kv_given ? o.kv_bits : 0;
        eo.w_group = o.group;
        eo.a_clip = o.clip_given ? (float)o.clip : 0.0f;
        eo.context = o.context;
        eo.env = &env;
        r = qx_engine_load_packed(&en, o.model, &eo, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_INPUT : QX_EXIT_PROCESS,
                             "%s", e.msg);
            goto done;
        }
        have_eng = 1;
        vocab = en.cfg.vocab;
        o.context = en.context;
        o.w_bits = en.opts.w_bits; o.a_bits = en.opts.a_bits; o.kv_bits = en.opts.kv_bits;
        if (en.file_hooks && en.file_hooks->count)
            qx_cli_info(&cli, "online hooks: %lld from the file's metadata", (long long)en.file_hooks->count);
    } else {
        r = qx_load_model(o.model, &lo, &model, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
        have_model = 1;
        vocab = model.config.vocab;
    }
    if (o.tokenizer) snprintf(tok_path, sizeof tok_path, "%s", o.tokenizer);
    else if (!qx_tokenizer_find_bin(o.model, vocab, tok_path, sizeof tok_path, looked, sizeof looked)) {
        rc = qx_cli_fail(&cli, QX_EXIT_INPUT, "%s: no tokenizer found (looked for %s); pass --tokenizer FILE", o.model, looked);
        goto done;
    }
    r = qx_tokenizer_load(&tok, tok_path, (int32_t)vocab, &e);
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
    have_tok = 1;
    if (packed) {
        /* hooks: the file's */
    } else if (o.quarot) {
        r = qx_ek_quarot(&model, 0, o.kv_bits < 16, &rot, &hooks, NULL, 0, NULL, NULL, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: QuaRot: %s", o.model, e.msg); goto done; }
        have_rot = 1;
    } else {
        hook_path[0] = '\0';
        if (o.hooks) snprintf(hook_path, sizeof hook_path, "%s", o.hooks);
        else {
            snprintf(hook_path, sizeof hook_path, "%s.quarot-online", o.model);
            if (!qx_is_file(hook_path)) snprintf(hook_path, sizeof hook_path, "%s/quarot_online.txt", o.model);
            if (!qx_is_file(hook_path)) hook_path[0] = '\0';
        }
        if (hook_path[0]) {
            r = read_hooks(hook_path, &hooks, &e);
            if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg); goto done; }
            qx_cli_info(&cli, "online hooks: %s (%lld hooks)", hook_path, (long long)hooks.count);
        }
    }

    /* The prompt: BOS + text, checked against the context before any work. */
    {
        size_t len = strlen(o.prompt);
        int64_t cap = qx_tokenizer_max_tokens(len);
        ptoks = (int32_t*)malloc((size_t)cap * sizeof *ptoks);
        if (!ptoks) { rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "out of memory"); goto done; }
        r = qx_tokenizer_encode(&tok, o.prompt, len, 1, 0, ptoks, cap, &n_prompt, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "--prompt: %s", e.msg); goto done; }
    }
    if (!o.context) o.context = model.config.max_seq > 0 ? model.config.max_seq : 2048;   /* (packed: the engine's) */
    if (n_prompt > o.context) {
        rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "--prompt: %lld tokens (BOS included), longer than the context of %lld tokens",
                         (long long)n_prompt, (long long)o.context);
        goto done;
    }

    if (!packed) {
        pool = qx_pool_create(o.c.threads ? (int)o.c.threads : qx_cpu_count());
        qx_pool_env(pool, &env);
        memset(&eo, 0, sizeof eo);
        eo.w_bits = o.w_bits; eo.a_bits = o.a_bits; eo.kv_bits = o.kv_bits;
        eo.w_group = o.group;
        eo.a_clip = (float)o.clip;
        eo.context = o.context;
        eo.max_tokens = n_prompt > 512 ? 512 : n_prompt;
        eo.hooks = hooks.count ? &hooks : NULL;
        eo.env = &env;
        r = qx_engine_init(&en, have_rot ? &rot : &model, &eo, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_INPUT : QX_EXIT_PROCESS,
                             "%s: %s", o.model, e.msg);
            goto done;
        }
        have_eng = 1;
    }
    logits = (float*)malloc((size_t)vocab * sizeof(float));
    work = (float*)malloc((size_t)vocab * 2 * sizeof(float));
    if (!logits || !work) { rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "out of memory"); goto done; }
    quarot_rng_seed(&rng, (uint64_t)o.seed);

    /* prefill in blocks of max_tokens, printing the prompt as run.c does */
    t0 = qx_now();
    for (t = 0; t < n_prompt && r == QUAROT_OK; t += en.max_tokens) {
        int64_t nb = n_prompt - t < en.max_tokens ? n_prompt - t : en.max_tokens;
        r = qx_engine_forward(&en, ptoks + t, nb, logits, 0, &e);
    }
    t_prefill = qx_now() - t0;
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s", e.msg); goto done; }
    for (t = 1; t < n_prompt; ++t) {
        size_t pl;
        const char* p = qx_tokenizer_decode(&tok, ptoks[t - 1], ptoks[t], &pl);
        if (p && qx_tokenizer_safe_piece(p, pl)) fwrite(p, 1, pl, stdout);
    }
    prev = ptoks[n_prompt - 1];
    t0 = qx_now();
    for (done = 0; done < o.n_gen && en.pos < en.context; ++done) {
        size_t pl;
        const char* p;
        next = qx_engine_sample(logits, vocab, (float)o.temp, (float)o.top_p, &rng, work);
        if (next == 1 || next == 2) break;   /* BOS / EOS delimit sequences */
        p = qx_tokenizer_decode(&tok, prev, next, &pl);
        if (p && qx_tokenizer_safe_piece(p, pl)) fwrite(p, 1, pl, stdout);
        fflush(stdout);
        prev = next;
        if (done + 1 < o.n_gen && en.pos < en.context) {
            r = qx_engine_forward(&en, &next, 1, logits, 0, &e);
            if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "%s", e.msg); goto done; }
        }
    }
    t_decode = qx_now() - t0;
    printf("\n");
    fflush(stdout);
    qx_cli_info(&cli, "%lld prompt tokens in %.3f s (%.1f tok/s), %lld generated in %.3f s (%.1f tok/s); %d threads; weights %.2f MiB (decoder linears), KV cache %.2f MiB; W%d A%d KV%d%s",
                (long long)n_prompt, t_prefill, t_prefill > 0 ? (double)n_prompt / t_prefill : 0.0, (long long)done, t_decode,
                t_decode > 0 ? (double)done / t_decode : 0.0, qx_pool_threads(pool), (double)en.weight_bytes / 1048576.0,
                (double)en.kv_bytes / 1048576.0, o.w_bits, o.a_bits, o.kv_bits,
                hooks.count || (en.file_hooks && en.file_hooks->count) ? ", online hooks" : "");

done:
    free(logits);
    free(work);
    free(ptoks);
    if (have_eng) qx_engine_free(&en);
    qx_pool_destroy(pool);
    quarot_online_list_free(&hooks);
    if (have_rot) qx_store_free(&rot);
    if (have_tok) qx_tokenizer_free(&tok);
    if (have_model) qx_store_free(&model);
    return rc;
}
