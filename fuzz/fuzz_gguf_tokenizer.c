/* libFuzzer harness of the GGUF tokenizer reader (qx_vocab_from_gguf on qx_gguf_parse) and the
   encoder on top.

   Whatever the bytes: no crash, no out-of-bounds access, no leak; a vocabulary that loads encodes
   a fixed mixed-script text (and every byte value) with and without special-token parsing into
   ids inside the vocabulary. Seeds: fuzz/seeds/gguf_tokenizer/ (fuzz/make_tokenizer_seeds.py). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/qx_gguf.h"
#include "tokenizer/qx_tok_load.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    static const char fixed[] = "Hello world, y'all! 12345 \xC3\xA9t\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\xA6\x99\r\n\n  \t<s>end</s> ";
    qx_gguf_file f;
    qx_vocab v;
    qx_err e;
    if (qx_gguf_parse(data, size, "fuzz.gguf", &f, &e) != QUAROT_OK) return 0;
    if (qx_vocab_from_gguf(&v, &f, "fuzz.gguf", &e) == QUAROT_OK) {
        int ps;
        for (ps = 0; ps < 2; ++ps) {
            int32_t* ids = NULL;
            int64_t n = 0, i;
            if (qx_vocab_encode(&v, fixed, sizeof fixed - 1, 1, 1, ps, &ids, &n, &e) == QUAROT_OK) {
                for (i = 0; i < n; ++i)
                    if (ids[i] < 0 || ids[i] >= v.n) __builtin_trap();
                free(ids);
            }
        }
        qx_vocab_free(&v);
    }
    qx_gguf_file_free(&f);
    return 0;
}
