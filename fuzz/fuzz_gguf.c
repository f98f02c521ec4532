/* libFuzzer harness of the GGUF reader (qx_gguf_parse and qx_gguf_read_mem, from memory).

   Whatever the bytes: no crash, no out-of-bounds access, no leak; for a parsed file every pair is
   read through the typed accessors and every tensor of known size lies inside the data section;
   for a file that loads into a store, every row is read back. Seeds: fuzz/seeds/gguf/ (see
   fuzz_json.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/qx_gguf.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    qx_gguf_file f;
    qx_store s;
    qx_err e;
    if (qx_gguf_parse(data, size, "fuzz.gguf", &f, &e) == QUAROT_OK) {
        uint64_t k, len;
        volatile unsigned sum = 0;
        for (k = 0; k < f.n_kv; ++k) {
            int64_t i;
            double d;
            const char* str = qx_gguf_kv_string(&f.kv[k], &len);
            (void)qx_gguf_kv_int(&f.kv[k], &i);
            (void)qx_gguf_kv_float(&f.kv[k], &d);
            if (str && len) sum += (unsigned char)str[len - 1];
            if (f.kv[k].raw + f.kv[k].raw_len > data + size) __builtin_trap();
        }
        for (k = 0; k < f.n_tensors; ++k) {
            const qx_gguf_tinfo* t = &f.t[k];
            if (t->nbytes && (t->offset > f.data_len || t->nbytes > f.data_len - t->offset)) __builtin_trap();
            if (t->nbytes) sum += f.data[t->offset + t->nbytes - 1];
        }
        (void)sum;
        qx_gguf_file_free(&f);
    }
    qx_store_init(&s);
    if (qx_gguf_read_mem(data, size, "fuzz.gguf", &s, &e) == QUAROT_OK) fz_read_rows(&s);
    qx_store_free(&s);
    return 0;
}
