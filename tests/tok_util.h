/* tok_util.h - llama.cpp's tokenizer test vectors in ../shared/tokenizers, shared by test_tok_vocab.c
   and test_tok_convert.c: five vocab-only GGUF files ggml-vocab-NAME.gguf, each with test strings
   (NAME.gguf.inp, separated by "\n__ggml_vocab_test__\n") and the ids the reference tokenizer gives
   for them (NAME.gguf.out, one line of ids a string). load_set reads one set, check_set encodes
   every string (no BOS / EOS) and counts those whose ids differ. Include after qt.h. */
#ifndef TOK_UTIL_H
#define TOK_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "support/qx_file.h"
#include "tokenizer/qx_tokenizer.h"

QT_UNUSED static const char* const k_sets[] = {"llama-spm", "phi-3", "gpt-2", "deepseek-coder", "mpt"};
#define N_SETS 5

typedef struct tset {
    char* inp; size_t inp_len;
    char* out; size_t out_len;
    int n;                     /* strings */
    const char* s[256]; size_t slen[256];
    int32_t* ids[256]; int64_t nids[256];
} tset;

/* Set NAME into t (gguf_path[cap] gets the GGUF file's path); 0 when ../shared lacks it. Strings: the
   text between separators "\n__ggml_vocab_test__\n" (the first starts at byte 0). Free with free_set. */
QT_UNUSED static int load_set(const char* name, tset* t, char* gguf_path, size_t cap) {
    char p[4200];
    const char* sep = "\n__ggml_vocab_test__\n";
    size_t sl = strlen(sep), pos = 0, o = 0;
    const char* sp;
    memset(t, 0, sizeof *t);
    snprintf(p, sizeof p, "tokenizers/ggml-vocab-%s.gguf", name);
    if (!qt_shared_path(p)) return 0;
    snprintf(gguf_path, cap, "%s", qt_shared_path(p));
    snprintf(p, sizeof p, "%s.inp", gguf_path);
    t->inp = qt_read_file(p, &t->inp_len);
    snprintf(p, sizeof p, "%s.out", gguf_path);
    t->out = qt_read_file(p, &t->out_len);
    if (!t->inp || !t->out) return 0;
    while ((sp = strstr(t->inp + pos, sep)) != NULL && t->n < 256) {
        t->s[t->n] = t->inp + pos;
        t->slen[t->n] = (size_t)(sp - (t->inp + pos));
        pos = (size_t)(sp - t->inp) + sl;
        t->n++;
    }
    for (int i = 0; i < t->n; ++i) {
        size_t e = o;
        int64_t k = 0;
        while (e < t->out_len && t->out[e] != '\n') ++e;
        t->ids[i] = (int32_t*)malloc((e - o + 1) * sizeof(int32_t));
        while (o < e) {
            char* end;
            long v = strtol(t->out + o, &end, 10);
            if (end == t->out + o) { ++o; continue; }
            t->ids[i][k++] = (int32_t)v;
            o = (size_t)(end - t->out);
        }
        t->nids[i] = k;
        o = e + 1;
    }
    return t->n > 0;
}

QT_UNUSED static void free_set(tset* t) {
    for (int i = 0; i < t->n; ++i) free(t->ids[i]);
    free(t->inp);
    free(t->out);
}

/* every string of the set through tokenizer tk; returns the mismatch count */
QT_UNUSED static int check_set(const qx_tokenizer* tk, const tset* t, const char* label) {
    int bad = 0;
    for (int i = 0; i < t->n; ++i) {
        int64_t cap = qx_tokenizer_max_tokens(t->slen[i]), n = -1;
        int32_t* got = (int32_t*)malloc((size_t)cap * sizeof *got);
        qx_err e;
        int ok;
        e.msg[0] = 0;
        ok = qx_tokenizer_encode(tk, t->s[i], t->slen[i], 0, 0, got, cap, &n, &e) == QUAROT_OK && n == t->nids[i] &&
             (n == 0 || memcmp(got, t->ids[i], (size_t)n * sizeof *got) == 0);
        if (!ok) {
            if (++bad <= 3) {
                printf("    %s string %d (%zu bytes) %s: got", label, i, t->slen[i], e.msg);
                for (int64_t k = 0; k < n && k < 24; ++k) printf(" %d", got[k]);
                printf("\n      expected");
                for (int64_t k = 0; k < t->nids[i] && k < 24; ++k) printf(" %d", t->ids[i][k]);
                printf("\n");
            }
        }
        free(got);
    }
    return bad;
}

#endif
