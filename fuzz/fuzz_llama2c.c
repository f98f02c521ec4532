/* libFuzzer harness for the llama2.c readers (tests/fuzz.sh builds it with ASan + UBSan).

   The whole input goes to the checkpoint reader, as views and (on odd first bytes) as copies; when
   it parses, writing it back must give the very same bytes (an oracle, not just a crash check).
   The input also goes, split, to the tokenizer: bytes 0-1 give the length of a tokenizer.bin image
   that follows; the rest is text to encode and decode with it. Everything is freed each run, so
   LeakSanitizer checks the error paths too. Seeds: fuzz/seeds/llama2c (fuzz/make_llama2c_seeds.py). */
#include "qx_llama2c.h"
#include "qx_tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void fuzz_checkpoint(const uint8_t* data, size_t size) {
    qx_store s;
    qx_err e;
    qx_l2c_read_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.copy = size > 0 && (data[0] & 1);
    if (qx_l2c_read_memory(data, size, "fuzz", &ro, &s, &e) == QUAROT_OK) {
        void* w;
        size_t wn;
        if (qx_l2c_write_memory(&s, NULL, &w, &wn, &e) != QUAROT_OK) abort();
        if (wn != size || memcmp(w, data, size) != 0) abort();   /* read -> write must be the identity */
        free(w);
    }
    qx_store_free(&s);
}

static void fuzz_tokenizer(const uint8_t* data, size_t size) {
    size_t split;
    qx_tokenizer t;
    qx_err e;
    if (size < 2) return;
    split = (size_t)data[0] | ((size_t)data[1] << 8);
    data += 2;
    size -= 2;
    if (split > size) split = size;
    if (qx_tokenizer_load_memory(&t, data, split, 0, "fuzz-tok", &e) == QUAROT_OK) {
        const char* text = (const char*)data + split;
        size_t len = size - split;
        int64_t cap = qx_tokenizer_max_tokens(len), n = 0, i;
        int32_t* tok = (int32_t*)malloc((size_t)cap * sizeof(int32_t));
        int flags = split & 3;
        if (tok && qx_tokenizer_encode(&t, text, len, flags & 1, flags & 2, tok, cap, &n, &e) == QUAROT_OK) {
            int32_t prev = 0;
            for (i = 0; i < n; ++i) {
                size_t pl;
                const char* p = qx_tokenizer_decode(&t, prev, tok[i], &pl);
                if (!p) abort();                        /* encode only emits ids inside the vocabulary */
                (void)qx_tokenizer_safe_piece(p, pl);
                prev = tok[i];
            }
            /* a too-small buffer reports the same count */
            if (n > 0) {
                int64_t n2 = 0;
                if (qx_tokenizer_encode(&t, text, len, flags & 1, flags & 2, tok, n - 1, &n2, &e) != QUAROT_ERR_WORKSPACE || n2 != n)
                    abort();
            }
        }
        free(tok);
    }
    qx_tokenizer_free(&t);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz_checkpoint(data, size);
    fuzz_tokenizer(data, size);
    return 0;
}
