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

#include <stdlib.h>
#include <string.h>

static void generate_usage(FILE* f) {
    fprintf(f,
        "usage: quarot generate MODEL [--prompt TEXT] [-n N] [--temp T] [--top-p P] [--seed S] [--threads N]\n"
        "                             [--w-bits N] [--a-bits N] [--kv-bits N] [--group-size N] [--clip R]\n"
        "                             [--quarot | --hooks FILE] [--tokenizer FILE] [--context N] [--quiet]\n"
        "\n"
        "Generates text with the reference inference engine (examples/engine/): the prompt (after BOS) is\n"
        "run as one prefill block, then one token at a time through the KV cache, printed as it comes.\n"
        "Generation stops after N tokens (default 256), at the end of the context, or at a BOS/EOS token.\n"
        "MODEL may be the packed W4A4 file of `quarot quantize OUT.safetensors`: its integer codes and scales\n"
        "run as stored, with the activation / KV settings and the online hooks of its metadata (no\n"
        "quantization flags needed; one that contradicts the file is an error, as are --quarot and --hooks).\n"
        "\n"
        "options:\n"
        "  --prompt TEXT     the prompt (default: none, start from BOS)\n"
        "  -n N              tokens to generate (default 256)\n"
        "  --temp T          sampling temperature (default 0 = greedy: the most likely token)\n"
        "  --top-p P         nucleus sampling: draw from the smallest set of tokens holding mass P\n"
        "                    (default 0.9; 1 = all tokens); only with --temp > 0\n"
        "  --seed S          seed of the sampler (default 0; quarot_rng, the same on every platform)\n"
        "  --threads N       threads (default: the online processors)\n"
        "  --w-bits N        decoder-linear weights: RTN symmetric per output channel (or --group-size),\n"
        "                    2..8 (16 = FP32, the default); 2..4 bits run the packed int4 kernels\n"
        "  --a-bits N        activations per token symmetric at every decoder-linear input (16 = FP)\n"
        "  --kv-bits N       KV cache per token per head asymmetric, stored as codes (16 = FP32)\n"
        "  --group-size N    weight groups of N input channels\n"
        "  --clip R          activation clip ratio in (0, 1] (default 1.0)\n"
        "  --quarot          rotate the model in memory first (QuaRot, as `quarot eval`: R1/R2 folded,\n"
        "                    online Hadamard hooks; the q/k rotation too with --kv-bits)\n"
        "  --hooks FILE      online hook file of a rotated model (default: MODEL.quarot-online or\n"
        "                    MODEL/quarot_online.txt when present, as `quarot rotate --online` writes)\n"
        "  --tokenizer FILE  llama2.c tokenizer (default: tok<vocab>.bin, tok512.bin or tokenizer.bin beside\n"
        "                    the model)\n"
        "  --context N       KV cache positions (default: the model's max_seq, else 2048)\n"
        "  --quiet           no statistics on stderr\n"
        "\n"
        "Statistics (stderr): prefill and decode tokens/s, weight and KV-cache memory.\n"
        "Exit codes: 0 ok, 1 usage, 2 input, 4 cannot run as asked (e.g. a prompt longer than the\n"
        "context, hooks for another model), 5 internal or out of memory.\n");
}

static int parse_bits1(qx_cli* cli, const char* opt, const char* v, int* out) {
    int64_t b;
    if (!qx_cli_int(cli, opt, v, 2, 16, &b)) return 0;
    if (b > 8 && b != 16) return qx_cli_fail(cli, QX_EXIT_USAGE, "%s: %lld bits: 2..8, or 16 for not quantized", opt, (long long)b), 0;
    *out = (int)b;
    return 1;
}

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
    const char *model_path = NULL, *prompt = "", *tok_opt = NULL, *hooks_opt = NULL, *v = NULL;
    int64_t n_gen = 256, seed = 0, threads = 0, group = 0, context = 0;
    double temp = 0.0, top_p = 0.9, clip = 1.0;
    int w_bits = 16, a_bits = 16, kv_bits = 16, quarot = 0, quiet = 0, i, rc = QX_EXIT_OK;
    int have_model = 0, have_rot = 0, have_tok = 0, have_eng = 0, packed = 0;
    int w_given = 0, a_given = 0, kv_given = 0, clip_given = 0;
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
    for (i = 1; i < argc; ++i) {
        const char* a = argv[i];
        int got;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { generate_usage(stdout); return QX_EXIT_OK; }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) { quiet = 1; continue; }
        if (strcmp(a, "--quarot") == 0) { quarot = 1; continue; }
        if (a[0] != '-' || a[1] == '\0') {
            if (model_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "unexpected argument '%s' (one MODEL; see quarot generate --help)", a);
            model_path = a;
            continue;
        }
#define GEN_OPT(name) ((got = qx_cli_opt(&cli, argc, argv, &i, name, &v)) < 0 ? -1 : got)
        if ((got = GEN_OPT("--prompt")) != 0) { if (got < 0) return QX_EXIT_USAGE; prompt = v; }
        else if ((got = GEN_OPT("-n")) != 0) { if (got < 0 || !qx_cli_int(&cli, "-n", v, 0, INT64_C(1) << 30, &n_gen)) return QX_EXIT_USAGE; }
        else if ((got = GEN_OPT("--temp")) != 0) { if (got < 0 || !qx_cli_float(&cli, "--temp", v, 0.0, 100.0, &temp)) return QX_EXIT_USAGE; }
        else if ((got = GEN_OPT("--top-p")) != 0) { if (got < 0 || !qx_cli_float(&cli, "--top-p", v, 0.0, 1.0, &top_p)) return QX_EXIT_USAGE; }
        else if ((got = GEN_OPT("--seed")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--seed", v, 0, INT64_MAX, &seed)) return QX_EXIT_USAGE; }
        else if ((got = GEN_OPT("--threads")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--threads", v, 1, 256, &threads)) return QX_EXIT_USAGE; }
        else if ((got = GEN_OPT("--w-bits")) != 0) { if (got < 0 || !parse_bits1(&cli, "--w-bits", v, &w_bits)) return QX_EXIT_USAGE; w_given = 1; }
        else if ((got = GEN_OPT("--a-bits")) != 0) { if (got < 0 || !parse_bits1(&cli, "--a-bits", v, &a_bits)) return QX_EXIT_USAGE; a_given = 1; }
        else if ((got = GEN_OPT("--kv-bits")) != 0) { if (got < 0 || !parse_bits1(&cli, "--kv-bits", v, &kv_bits)) return QX_EXIT_USAGE; kv_given = 1; }
        else if ((got = GEN_OPT("--group-size")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--group-size", v, 1, 1 << 20, &group)) return QX_EXIT_USAGE; }
        else if ((got = GEN_OPT("--clip")) != 0) {
            if (got < 0 || !qx_cli_float(&cli, "--clip", v, 0.0, 1.0, &clip)) return QX_EXIT_USAGE;
            if (!(clip > 0.0)) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--clip: '%s' is not a number in (0, 1]", v);
            clip_given = 1;
        }
        else if ((got = GEN_OPT("--hooks")) != 0) { if (got < 0) return QX_EXIT_USAGE; hooks_opt = v; }
        else if ((got = GEN_OPT("--tokenizer")) != 0) { if (got < 0) return QX_EXIT_USAGE; tok_opt = v; }
        else if ((got = GEN_OPT("--context")) != 0) { if (got < 0 || !qx_cli_int(&cli, "--context", v, 2, 1 << 24, &context)) return QX_EXIT_USAGE; }
        else return qx_cli_fail(&cli, QX_EXIT_USAGE, "unknown option '%s' (see quarot generate --help)", a);
#undef GEN_OPT
    }
    cli.quiet = quiet;
    if (!model_path) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no MODEL given (usage: quarot generate MODEL; see --help)");
    if (quarot && hooks_opt) return qx_cli_fail(&cli, QX_EXIT_USAGE, "--quarot builds its own hooks: do not also give --hooks");

    memset(&lo, 0, sizeof lo);
    quarot_online_list_init(&hooks, NULL);
    packed = qx_engine_is_packed_file(model_path);
    if (packed) {
        /* the packed W4A4 file: the engine reads its codes, settings and hooks itself */
        if (quarot) { rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--quarot: %s is a packed file, rotated already", model_path); goto done; }
        if (hooks_opt) { rc = qx_cli_fail(&cli, QX_EXIT_USAGE, "--hooks: %s carries its online hooks in its metadata", model_path); goto done; }
        pool = qx_pool_create(threads ? (int)threads : qx_cpu_count());
        qx_pool_env(pool, &env);
        memset(&eo, 0, sizeof eo);
        eo.w_bits = w_given ? w_bits : 0;
        eo.a_bits = a_given ? a_bits : 0;
        eo.kv_bits = kv_given ? kv_bits : 0;
        eo.w_group = group;
        eo.a_clip = clip_given ? (float)clip : 0.0f;
        eo.context = context;
        eo.env = &env;
        r = qx_engine_load_packed(&en, model_path, &eo, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_INPUT : QX_EXIT_PROCESS,
                             "%s", e.msg);
            goto done;
        }
        have_eng = 1;
        vocab = en.cfg.vocab;
        context = en.context;
        w_bits = en.opts.w_bits; a_bits = en.opts.a_bits; kv_bits = en.opts.kv_bits;
        if (en.file_hooks && en.file_hooks->count)
            qx_cli_info(&cli, "online hooks: %lld from the file's metadata", (long long)en.file_hooks->count);
    } else {
        r = qx_load_model(model_path, &lo, &model, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
        have_model = 1;
        vocab = model.config.vocab;
    }
    if (tok_opt) snprintf(tok_path, sizeof tok_path, "%s", tok_opt);
    else if (!qx_tokenizer_find_bin(model_path, vocab, tok_path, sizeof tok_path, looked, sizeof looked)) {
        rc = qx_cli_fail(&cli, QX_EXIT_INPUT, "%s: no tokenizer found (looked for %s); pass --tokenizer FILE", model_path, looked);
        goto done;
    }
    r = qx_tokenizer_load(&tok, tok_path, (int32_t)vocab, &e);
    if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
    have_tok = 1;
    if (packed) {
        /* hooks: the file's */
    } else if (quarot) {
        r = qx_ek_quarot(&model, 0, kv_bits < 16, &rot, &hooks, NULL, 0, NULL, NULL, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: QuaRot: %s", model_path, e.msg); goto done; }
        have_rot = 1;
    } else {
        hook_path[0] = '\0';
        if (hooks_opt) snprintf(hook_path, sizeof hook_path, "%s", hooks_opt);
        else {
            snprintf(hook_path, sizeof hook_path, "%s.quarot-online", model_path);
            if (!qx_is_file(hook_path)) snprintf(hook_path, sizeof hook_path, "%s/quarot_online.txt", model_path);
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
        size_t len = strlen(prompt);
        int64_t cap = qx_tokenizer_max_tokens(len);
        ptoks = (int32_t*)malloc((size_t)cap * sizeof *ptoks);
        if (!ptoks) { rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "out of memory"); goto done; }
        r = qx_tokenizer_encode(&tok, prompt, len, 1, 0, ptoks, cap, &n_prompt, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "--prompt: %s", e.msg); goto done; }
    }
    if (!context) context = model.config.max_seq > 0 ? model.config.max_seq : 2048;   /* (packed: the engine's) */
    if (n_prompt > context) {
        rc = qx_cli_fail(&cli, QX_EXIT_PROCESS, "--prompt: %lld tokens (BOS included), longer than the context of %lld tokens",
                         (long long)n_prompt, (long long)context);
        goto done;
    }

    if (!packed) {
        pool = qx_pool_create(threads ? (int)threads : qx_cpu_count());
        qx_pool_env(pool, &env);
        memset(&eo, 0, sizeof eo);
        eo.w_bits = w_bits; eo.a_bits = a_bits; eo.kv_bits = kv_bits;
        eo.w_group = group;
        eo.a_clip = (float)clip;
        eo.context = context;
        eo.max_tokens = n_prompt > 512 ? 512 : n_prompt;
        eo.hooks = hooks.count ? &hooks : NULL;
        eo.env = &env;
        r = qx_engine_init(&en, have_rot ? &rot : &model, &eo, &e);
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : qx_cli_exit_for(r) == QX_EXIT_INPUT ? QX_EXIT_INPUT : QX_EXIT_PROCESS,
                             "%s: %s", model_path, e.msg);
            goto done;
        }
        have_eng = 1;
    }
    logits = (float*)malloc((size_t)vocab * sizeof(float));
    work = (float*)malloc((size_t)vocab * 2 * sizeof(float));
    if (!logits || !work) { rc = qx_cli_fail(&cli, QX_EXIT_INTERNAL, "out of memory"); goto done; }
    quarot_rng_seed(&rng, (uint64_t)seed);

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
    for (done = 0; done < n_gen && en.pos < en.context; ++done) {
        size_t pl;
        const char* p;
        next = qx_engine_sample(logits, vocab, (float)temp, (float)top_p, &rng, work);
        if (next == 1 || next == 2) break;   /* BOS / EOS delimit sequences */
        p = qx_tokenizer_decode(&tok, prev, next, &pl);
        if (p && qx_tokenizer_safe_piece(p, pl)) fwrite(p, 1, pl, stdout);
        fflush(stdout);
        prev = next;
        if (done + 1 < n_gen && en.pos < en.context) {
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
                (double)en.kv_bytes / 1048576.0, w_bits, a_bits, kv_bits,
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
