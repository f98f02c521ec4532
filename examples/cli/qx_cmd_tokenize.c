/* qx_cmd_tokenize.c - `quarot tokenize`: a model's tokenizer on a text, printed like llama.cpp's
   llama-tokenize (one "id -> 'piece'" line per token, or the ids alone as a JSON array, which
   `--tokens FILE` of eval / calibrate / plot / run reads back). */
#include "cli/qx_cli.h"
#include "eval/qx_evalkit.h"
#include "tokenizer/qx_tok_load.h"
#include "cli/qx_opts.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct tokenize_opts {
    const char *model, *text, *prompt;
    int no_bos, no_parse_special, ids_only;
    qx_opts_common c;
    qx_opts_input in;
} tokenize_opts;

static const qx_opt tokenize_table[] = {
    {QX_OPT_STRING, "--text", .arg = "FILE", QX_AT(tokenize_opts, text), .help = "the text to encode (UTF-8)"},
    {QX_OPT_STRING, "--prompt", .arg = "TEXT", QX_AT(tokenize_opts, prompt), .help = "the text to encode, given inline"},
    {QX_OPT_FLAG, "--no-bos", QX_AT(tokenize_opts, no_bos), .def = "added when the tokenizer says so, add_bos_token",
     .help = "do not add BOS"},
    {QX_OPT_FLAG, "--no-parse-special", QX_AT(tokenize_opts, no_parse_special),
     .help = "special tokens' texts (e.g. \"<s>\") stay plain text"},
    {QX_OPT_FLAG, "--ids-only", QX_AT(tokenize_opts, ids_only), .help = "print only the ids, as a JSON array ([1, 15043, 3186])"},
    {QX_OPT_END}
};
static const qx_opt_group tokenize_group = {"options:", tokenize_table, NULL};

const qx_opts_cmd qx_cmd_tokenize_spec = {
    .name = "tokenize",
    .synopsis = "MODEL|--tokenizer FILE (--text FILE | --prompt TEXT) [options]",
    .about = "Encodes a text with a model's tokenizer and prints the token ids and pieces. The tokenizer comes\n"
             "with MODEL: GGUF metadata (tokenizer.ggml.*), tokenizer.json (+ tokenizer_config.json) in a Hugging\n"
             "Face directory, or tok<vocab>.bin / tok512.bin / tokenizer.bin beside a llama2.c model; --tokenizer\n"
             "FILE gives it instead.\n",
    .operands = {{"MODEL", offsetof(tokenize_opts, model)}},
    .uses = {{&tokenize_group, 0, 0, NULL},
             {&qx_opts_input_group, offsetof(tokenize_opts, in), QX_INPUT_TOKENIZER, NULL},
             {&qx_opts_common_group, offsetof(tokenize_opts, c), QX_COMMON_QUIET_Q, NULL}},
    .epilog = "Kinds: SentencePiece BPE with byte fallback (tokenizer.ggml.model llama; tokenizer.json BPE +\n"
              "Metaspace), byte-level BPE (gpt2; tokenizer.json ByteLevel) with the pre-tokenizers\n"
              "  %s,\nand llama2.c tokenizer.bin.\n\n"
              "Exit codes: 0 ok, 1 usage, 2 input (tokenizer or text missing, malformed or unsupported).\n",
    .epilog_arg = qx_pre_names,
};

/* piece bytes with quotes, backslashes and control bytes escaped */
static void print_piece(const char* p, size_t n) {
    size_t i;
    for (i = 0; i < n; ++i) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\'' || c == '\\') { putchar('\\'); putchar(c); }
        else if (c < 0x20 || c == 0x7F) printf("\\x%02X", c);
        else putchar(c);
    }
}

int qx_cmd_tokenize(int argc, char** argv) {
    qx_cli cli;
    tokenize_opts o;
    int rc = QX_EXIT_OK;
    qx_tokenizer tok;
    char used[4096];
    char* text = NULL;
    size_t len = 0;
    int32_t* ids = NULL;
    int64_t n = 0, j;
    qx_err e;
    quarot_result r;
    qx_cli_init(&cli, "tokenize", 0);
    memset(&o, 0, sizeof o);
    if ((rc = qx_opts_parse(&qx_cmd_tokenize_spec, &cli, argc, argv, &o)) != QX_OPTS_RUN) return rc;
    rc = QX_EXIT_OK;
    cli.quiet = o.c.quiet;
    if (!o.model && !o.in.tokenizer) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no MODEL or --tokenizer FILE given (see quarot tokenize --help)");
    if (!!o.text == !!o.prompt) return qx_cli_fail(&cli, QX_EXIT_USAGE, "give exactly one of --text FILE and --prompt TEXT");
    r = qx_tokenizer_for_model(&tok, o.model, o.in.tokenizer, 0, used, sizeof used, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    if (o.text) {
        r = qx_ek_read_file(o.text, &text, &len, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
    }
    {
        const char* src = text ? text : o.prompt;
        size_t slen = text ? len : strlen(o.prompt);
        int bos = !o.no_bos && tok.add_bos;
        if (tok.vocab) {
            r = qx_vocab_encode(tok.vocab, src, slen, bos, tok.vocab->add_eos, !o.no_parse_special, &ids, &n, &e);
        } else {
            int64_t cap = qx_tokenizer_max_tokens(slen);
            ids = (int32_t*)malloc((size_t)cap * sizeof *ids);
            r = ids ? qx_tokenizer_encode(&tok, src, slen, bos, 0, ids, cap, &n, &e) : QUAROT_ERR_OUT_OF_MEMORY;
            if (!ids) qx_err_set(&e, "out of memory");
        }
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: %s", o.text ? o.text : "--prompt", e.msg);
            goto done;
        }
    }
    qx_cli_info(&cli, "tokenizer %s: %s, %ld tokens; %lld ids", used, tok.kind, (long)tok.vocab_size, (long long)n);
    if (o.ids_only) {
        putchar('[');
        for (j = 0; j < n; ++j) printf("%s%ld", j ? ", " : "", (long)ids[j]);
        printf("]\n");
    } else {
        for (j = 0; j < n; ++j) {
            size_t pl = 0;
            const char* p = qx_tokenizer_decode(&tok, j ? ids[j - 1] : -1, ids[j], &pl);
            printf("%6ld -> '", (long)ids[j]);
            if (p) print_piece(p, pl);
            printf("'\n");
        }
    }
done:
    free(ids);
    free(text);
    qx_tokenizer_free(&tok);
    return rc;
}
