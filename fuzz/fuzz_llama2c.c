/* libFuzzer harness for the llama2.c readers (tests/fuzz.sh builds it with ASan + UBSan).

   The whole input goes to the checkpoint reader, as views and (on odd first bytes) as copies; when
   it parses, writing it back must give the very same bytes (an oracle, not just a crash check).
   The input also goes, split, to the tokenizer: bytes 0-1 give the length of a tokenizer.bin image
   that follows; the rest is text to encode and decode with it. Everything is freed each run, so
   LeakSanitizer checks the error paths too. Seeds: fuzz/seeds/llama2c (fuzz/make_llama2c_seeds.py).

   Structured inputs: random bytes almost never make a header whose sizes match the file, so the
   reader's tensor paths and the write-back oracle stayed cold (coverage flat after a minute). An
   input starting with 'S' is a recipe instead: bytes 1-8 pick a small consistent header (v0 or v1;
   dims, heads, GQA, layers, vocab with or without its own classifier, context: small, since the
   code paths do not depend on the sizes) and the rest of the input fills the weights, so every
   such input is a checkpoint of exactly the right size whose values (NaN and Inf included) come
   from the fuzzer. Byte 7 also picks the oracles: read (bit 4: as copies) -> write = identity
   always; bit 2: written in the other format and read back (every tensor but the v0-only freq_cis
   tables must be bit-identical; v1 -> v0 -> v1 gives the very same bytes); bit 3: converted to
   f16 / bf16 (byte 8, bit 7) and written (writing what that reads back, converted again, gives the
   same bytes: the rounding is idempotent). fuzz/fuzz_llama2c.dict gives the raw path the magic
   and version words. */
#include "formats/qx_llama2c.h"
#include "tokenizer/qx_tokenizer.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

/* Writing s back must give the bytes it was read from. */
static void same_bytes_back(const qx_store* s, const uint8_t* data, size_t size) {
    void* w;
    size_t wn;
    qx_err e;
    if (qx_l2c_write_memory(s, NULL, &w, &wn, &e) != QUAROT_OK) abort();
    if (wn != size || memcmp(w, data, size) != 0) abort();   /* read -> write must be the identity */
    free(w);
}

static void fuzz_checkpoint(const uint8_t* data, size_t size) {
    qx_store s;
    qx_err e;
    qx_l2c_read_opts ro;
    memset(&ro, 0, sizeof ro);
    ro.copy = size > 0 && (data[0] & 1);
    if (qx_l2c_read_memory(data, size, "fuzz", &ro, &s, &e) == QUAROT_OK) same_bytes_back(&s, data, size);
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

/* Every tensor of a (but the freq_cis tables when skip_freq) is in b with the same dtype, shape and bytes. */
static void same_tensors(const qx_store* a, const qx_store* b, int skip_freq) {
    int64_t i;
    for (i = 0; i < a->count; ++i) {
        const quarot_tensor* ta = &a->items[i].t;
        const quarot_tensor* tb;
        if (skip_freq && strncmp(a->items[i].name, "llama2c.freq_cis", 16) == 0) continue;
        tb = qx_store_find(b, a->items[i].name);
        if (!tb || tb->dtype != ta->dtype || memcmp(tb->ne, ta->ne, sizeof ta->ne) != 0 ||
            memcmp(tb->data, ta->data, quarot_tensor_nbytes(ta)) != 0)
            abort();
    }
}

static void fuzz_other_format(const qx_store* s, qx_l2c_format own, const void* file, size_t size) {
    qx_l2c_write_opts wo;
    qx_l2c_read_opts ro;
    qx_store t;
    qx_err e;
    void *w, *w2;
    size_t wn, wn2;
    memset(&wo, 0, sizeof wo);
    memset(&ro, 0, sizeof ro);
    wo.format = own == QX_L2C_V1 ? QX_L2C_V0 : QX_L2C_V1;
    if (qx_l2c_write_memory(s, &wo, &w, &wn, &e) != QUAROT_OK) abort();
    if (qx_l2c_read_memory(w, wn, "fuzz-other", &ro, &t, &e) != QUAROT_OK) abort();
    same_tensors(s, &t, 1);
    same_tensors(&t, s, 1);
    if (own == QX_L2C_V1) {   /* v0 holds everything v1 does: back to v1 gives the input's bytes */
        wo.format = QX_L2C_V1;
        if (qx_l2c_write_memory(&t, &wo, &w2, &wn2, &e) != QUAROT_OK) abort();
        if (wn2 != size || memcmp(w2, file, size) != 0) abort();
        free(w2);
    }
    qx_store_free(&t);
    free(w);
}

static void fuzz_half(const qx_store* s, quarot_dtype dt) {
    qx_store c, t;
    qx_err e;
    qx_l2c_read_opts ro;
    void *w1, *w2;
    size_t n1, n2;
    memset(&ro, 0, sizeof ro);
    if (qx_store_clone(s, &c) != QUAROT_OK) abort();
    if (qx_store_convert(&c, dt) != QUAROT_OK) abort();
    if (qx_l2c_write_memory(&c, NULL, &w1, &n1, &e) != QUAROT_OK) abort();
    if (qx_l2c_read_memory(w1, n1, "fuzz-half", &ro, &t, &e) != QUAROT_OK) abort();
    if (qx_store_convert(&t, dt) != QUAROT_OK) abort();
    if (qx_l2c_write_memory(&t, NULL, &w2, &n2, &e) != QUAROT_OK) abort();
    if (n2 != n1 || memcmp(w1, w2, n1) != 0) abort();
    free(w1);
    free(w2);
    qx_store_free(&t);
    qx_store_free(&c);
}

static void fuzz_structured(const uint8_t* data, size_t size) {
    int32_t dims[7];
    int32_t heads = 1 << (data[2] % 3), dim = heads * 2 * (1 + data[1] % 2);   /* at most 16: small is fast */
    int v1 = (data[7] & 2) != 0, shared;
    unsigned char hdr[256];
    size_t hn, i, rest = size - 9;
    qx_l2c_header h;
    qx_l2c_read_opts ro;
    qx_store s;
    qx_err e;
    unsigned char* buf;
    dims[0] = dim;
    dims[1] = 1 + data[3] % 8;                           /* hidden */
    dims[2] = 1 + data[4] % 2;                           /* layers */
    dims[3] = heads;
    dims[4] = heads >> (data[5] % (heads > 1 ? 2 : 1));  /* kv heads: MHA or GQA */
    dims[5] = 1 + data[6] % 12;                          /* vocab */
    dims[6] = 1 + data[8] % 4;                           /* context */
    shared = !(data[7] & 1);                             /* else its own classifier */
    memset(hdr, 0, sizeof hdr);
    if (v1) {   /* the format is little-endian, as the hosts we fuzz on */
        uint32_t magic = 0x616b3432u;
        int32_t version = 1;
        memcpy(hdr, &magic, 4);
        memcpy(hdr + 4, &version, 4);
        memcpy(hdr + 8, dims, sizeof dims);
        hdr[36] = (unsigned char)shared;
        hn = 256;
    } else {
        if (!shared) dims[5] = -dims[5];
        memcpy(hdr, dims, sizeof dims);
        hn = sizeof dims;
    }
    if (qx_l2c_parse_header(hdr, hn, "fuzz-structured", &h, &e) != QUAROT_OK) abort();   /* the recipe is always valid */
    if (h.expected_size > ((uint64_t)1 << 16)) abort();   /* about 6 KB at most */
    buf = (unsigned char*)malloc((size_t)h.expected_size);
    if (!buf) return;
    memcpy(buf, hdr, hn);
    for (i = hn; i < (size_t)h.expected_size; ++i) buf[i] = rest ? data[9 + (i - hn) % rest] : 0;
    memset(&ro, 0, sizeof ro);
    ro.copy = (data[7] & 16) != 0;
    if (qx_l2c_read_memory(buf, (size_t)h.expected_size, "fuzz-structured", &ro, &s, &e) != QUAROT_OK) abort();
    same_bytes_back(&s, buf, (size_t)h.expected_size);
    if (data[7] & 4) fuzz_other_format(&s, h.format, buf, (size_t)h.expected_size);
    if (data[7] & 8) fuzz_half(&s, (data[8] & 0x80) ? QUAROT_DTYPE_BF16 : QUAROT_DTYPE_F16);
    qx_store_free(&s);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size >= 9 && data[0] == 'S') {
        fuzz_structured(data, size);
        return 0;
    }
    fuzz_checkpoint(data, size);
    fuzz_tokenizer(data, size);
    return 0;
}
