/* libFuzzer harness of the tokenizer.json reader (qx_vocab_from_hf_json) and the encoder on top.

   Input: a tokenizer.json, optionally followed by a NUL byte and a text to encode. Whatever the
   bytes: no crash, no out-of-bounds access, no leak; a vocabulary that loads encodes the text (and
   a fixed mixed-script text) with and without special-token parsing into ids inside the
   vocabulary, and every id decodes. Seeds: fuzz/seeds/tokenizer_json/ (fuzz/make_tokenizer_seeds.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/qx_tok_load.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void encode_all(const qx_vocab* v, const char* text, size_t len) {
    int ps;
    for (ps = 0; ps < 2; ++ps) {
        int32_t* ids = NULL;
        int64_t n = 0, i;
        qx_err e;
        if (qx_vocab_encode(v, text, len, 1, 1, ps, &ids, &n, &e) != QUAROT_OK) continue;
        for (i = 0; i < n; ++i) {
            if (ids[i] < 0 || ids[i] >= v->n) __builtin_trap();
            if (v->dec_len[ids[i]] < 0 || (v->dec_len[ids[i]] > 0 && !v->dec[ids[i]])) __builtin_trap();
        }
        free(ids);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const char fixed[] = "Hello world, y'all! 3.14159 \xC3\xA9t\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\xA6\x99\n\n  \tend";
    const uint8_t* nul = (const uint8_t*)memchr(data, 0, size);
    size_t jlen = nul ? (size_t)(nul - data) : size;
    qx_vocab v;
    qx_err e;
    if (qx_vocab_from_hf_json(&v, (const char*)data, jlen, NULL, 0, "fuzz.json", &e) == QUAROT_OK) {
        encode_all(&v, fixed, sizeof fixed - 1);
        if (nul) encode_all(&v, (const char*)nul + 1, size - jlen - 1);
        qx_vocab_free(&v);
    }
    return 0;
}
