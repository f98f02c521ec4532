/* qx_cmd_tokenize.c - `quarot tokenize`: a model's tokenizer on a text, printed like llama.cpp's
   llama-tokenize (one "id -> 'piece'" line per token, or the ids alone as a JSON array, which
   `--tokens FILE` of eval / calibrate / plot / run reads back). */
#include "cli/qx_cli.h"
#include "eval/qx_evalkit.h"
#include "tokenizer/qx_tok_load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void tokenize_usage(FILE* f) {
    fprintf(f,
        "usage: quarot tokenize MODEL|--tokenizer FILE (--text FILE | --prompt TEXT) [options]\n\n"
        "Encodes a text with a model's tokenizer and prints the token ids and pieces.\n\n"
        "  MODEL               the tokenizer comes with it: GGUF metadata (tokenizer.ggml.*), tokenizer.json\n"
        "                      (+ tokenizer_config.json) in a Hugging Face directory, or tok<vocab>.bin /\n"
        "                      tok512.bin / tokenizer.bin beside a llama2.c model\n"
        "  --tokenizer FILE    a GGUF file, a tokenizer.json (or a directory holding one) or a llama2.c\n"
        "                      tokenizer.bin, instead of MODEL's\n"
        "  --text FILE         the text to encode (UTF-8)\n"
        "  --prompt TEXT       the text to encode, given inline\n"
        "  --no-bos            do not add BOS (default: added when the tokenizer says so, add_bos_token)\n"
        "  --no-parse-special  special tokens' texts (e.g. \"<s>\") stay plain text\n"
        "  --ids-only          print only the ids, as a JSON array ([1, 15043, 3186])\n"
        "  -q, --quiet         no information line on stderr\n\n"
        "Kinds: SentencePiece BPE with byte fallback (tokenizer.ggml.model llama; tokenizer.json BPE +\n"
        "Metaspace), byte-level BPE (gpt2; tokenizer.json ByteLevel) with the pre-tokenizers\n"
        "  %s,\nand llama2.c tokenizer.bin.\n\n"
        "Exit codes: 0 ok, 1 usage, 2 input (tokenizer or text missing, malformed or unsupported).\n",
        qx_pre_names());
}

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
    const char *model = NULL, *tok_opt = NULL, *text_path = NULL, *prompt = NULL, *v;
    int no_bos = 0, ids_only = 0, parse_special = 1, quiet = 0, i, k, rc = QX_EXIT_OK;
    qx_tokenizer tok;
    char used[4096];
    char* text = NULL;
    size_t len = 0;
    int32_t* ids = NULL;
    int64_t n = 0, j;
    qx_err e;
    quarot_result r;
    qx_cli_init(&cli, "tokenize", 0);
    for (i = 1; i < argc; ++i) {
        const char* a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) { tokenize_usage(stdout); return QX_EXIT_OK; }
        if (strcmp(a, "--no-bos") == 0) { no_bos = 1; continue; }
        if (strcmp(a, "--ids-only") == 0) { ids_only = 1; continue; }
        if (strcmp(a, "--no-parse-special") == 0) { parse_special = 0; continue; }
        if (strcmp(a, "--quiet") == 0 || strcmp(a, "-q") == 0) { quiet = 1; continue; }
        if (a[0] != '-' || a[1] == '\0') {
            if (model) return qx_cli_fail(&cli, QX_EXIT_USAGE, "unexpected argument '%s' (one MODEL; see quarot tokenize --help)", a);
            model = a;
            continue;
        }
        if ((k = qx_cli_opt(&cli, argc, argv, &i, "--tokenizer", &v)) != 0) { if (k < 0) return QX_EXIT_USAGE; tok_opt = v; continue; }
        if ((k = qx_cli_opt(&cli, argc, argv, &i, "--text", &v)) != 0) { if (k < 0) return QX_EXIT_USAGE; text_path = v; continue; }
        if ((k = qx_cli_opt(&cli, argc, argv, &i, "--prompt", &v)) != 0) { if (k < 0) return QX_EXIT_USAGE; prompt = v; continue; }
        return qx_cli_fail(&cli, QX_EXIT_USAGE, "unknown option '%s' (see quarot tokenize --help)", a);
    }
    cli.quiet = quiet;
    if (!model && !tok_opt) return qx_cli_fail(&cli, QX_EXIT_USAGE, "no MODEL or --tokenizer FILE given (see quarot tokenize --help)");
    if (!!text_path == !!prompt) return qx_cli_fail(&cli, QX_EXIT_USAGE, "give exactly one of --text FILE and --prompt TEXT");
    r = qx_tokenizer_for_model(&tok, model, tok_opt, 0, used, sizeof used, &e);
    if (r != QUAROT_OK) return qx_cli_fail(&cli, r == QUAROT_ERR_OUT_OF_MEMORY ? QX_EXIT_INTERNAL : QX_EXIT_INPUT, "%s", e.msg);
    if (text_path) {
        r = qx_ek_read_file(text_path, &text, &len, &e);
        if (r != QUAROT_OK) { rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s", e.msg); goto done; }
    }
    {
        const char* src = text ? text : prompt;
        size_t slen = text ? len : strlen(prompt);
        int bos = !no_bos && tok.add_bos;
        if (tok.vocab) {
            r = qx_vocab_encode(tok.vocab, src, slen, bos, tok.vocab->add_eos, parse_special, &ids, &n, &e);
        } else {
            int64_t cap = qx_tokenizer_max_tokens(slen);
            ids = (int32_t*)malloc((size_t)cap * sizeof *ids);
            r = ids ? qx_tokenizer_encode(&tok, src, slen, bos, 0, ids, cap, &n, &e) : QUAROT_ERR_OUT_OF_MEMORY;
            if (!ids) qx_err_set(&e, "out of memory");
        }
        if (r != QUAROT_OK) {
            rc = qx_cli_fail(&cli, qx_cli_exit_for(r), "%s: %s", text_path ? text_path : "--prompt", e.msg);
            goto done;
        }
    }
    qx_cli_info(&cli, "tokenizer %s: %s, %ld tokens; %lld ids", used, tok.kind, (long)tok.vocab_size, (long long)n);
    if (ids_only) {
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
