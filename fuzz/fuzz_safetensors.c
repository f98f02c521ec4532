/* libFuzzer harness of the safetensors reader (qx_st_read_mem, the from-memory entry point).

   Whatever the bytes: no crash, no out-of-bounds access, no leak; when the image is accepted,
   every tensor's rows are read back (so a bad offset would show as an ASan error), and the
   metadata blob is valid JSON. Seeds: fuzz/seeds/safetensors/ (see fuzz_json.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/qx_safetensors.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    qx_store s;
    qx_err e;
    qx_st_read_opts o;
    memset(&o, 0, sizeof o);
    o.skip_unsupported = size & 1;
    qx_store_init(&s);
    if (qx_st_read_mem(data, size, "fuzz.safetensors", &s, &o, &e) == QUAROT_OK) {
        size_t ml;
        const char* meta = (const char*)qx_store_get_blob(&s, "safetensors.metadata", &ml);
        fz_read_rows(&s);
        if (meta) {
            qx_json_doc d;
            if (qx_json_parse(meta, ml, "meta", NULL, &d, &e) != QUAROT_OK) __builtin_trap();
            qx_json_doc_free(&d);
        }
        (void)qx_hf_check_tensors(&s, "fuzz", &e);
    }
    qx_store_free(&s);
    return 0;
}
