/* libFuzzer harness of the quarot-packed reader (qx_packed_parse and qx_packed_read_mem, from
   memory) and of the inference engine's loader of the same bytes (qx_engine_init_packed: settings
   onto the engine, codes repacked, hook list parsed and checked against the model).

   Whatever the bytes: no crash, no out-of-bounds access, no leak; for a parsed file every linear is
   dequantized row by row and read back as codes, and every plain tensor's last byte is read; for a
   file that loads into a store, every row is read back; for a file the engine takes, one token is
   run through it (context 4). Seeds: fuzz/seeds/packed/ (written by
   tests/test_qformats.c with QX_SEEDS_DIR set, see fuzz_json.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/qx_engine.h"
#include "formats/qx_packed.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    qx_packed_file f;
    qx_store s;
    qx_err e;
    (void)qx_packed_sniff(data, size);
    if (qx_packed_parse(data, size, "fuzz.safetensors", &f, &e) == QUAROT_OK) {
        int64_t i, r;
        volatile float sum = 0.0f;
        for (i = 0; i < f.n_lin; ++i) {
            const qx_packed_linear* L = &f.lin[i];
            float* row = (float*)malloc((size_t)L->in * sizeof *row + 1);
            int8_t* q = (int8_t*)malloc((size_t)(L->out * L->in) + 1);
            float* sc = (float*)malloc((size_t)(L->out * L->groups) * sizeof *sc + 1);
            float* zr = (float*)malloc((size_t)(L->out * L->groups) * sizeof *zr + 1);
            if (row && q && sc && zr) {
                for (r = 0; r < L->out; ++r) {
                    qx_packed_dequant_row(&f, L, r, row);
                    if (L->in) sum += row[L->in - 1];
                }
                qx_packed_codes(&f, L, q, sc, zr);
            }
            free(row); free(q); free(sc); free(zr);
        }
        for (i = 0; i < f.n_plain; ++i) {
            const qx_packed_plain* P = &f.plain[i];
            size_t n = quarot_dtype_size(P->dtype) * (size_t)(P->ne[0] * P->ne[1] * P->ne[2] * P->ne[3]);
            if (n) sum += (float)P->data[n - 1];
        }
        (void)sum;
        qx_packed_file_free(&f);
    }
    qx_store_init(&s);
    if (qx_packed_read_mem(data, size, "fuzz.safetensors", &s, &e) == QUAROT_OK) fz_read_rows(&s);
    qx_store_free(&s);
    {
        qx_engine en;
        qx_engine_opts o;
        memset(&o, 0, sizeof o);
        o.context = 4;
        o.max_tokens = 2;
        if (qx_engine_init_packed(&en, data, size, "fuzz.safetensors", &o, &e) == QUAROT_OK) {
            int32_t tok[2] = {0, 0};
            float* logits = (float*)malloc((size_t)en.cfg.vocab * sizeof *logits);
            if (logits) {
                tok[1] = (int32_t)(en.cfg.vocab - 1);
                (void)qx_engine_forward(&en, tok, 2, logits, 0, &e);
                (void)qx_engine_forward(&en, tok, 1, logits, 0, &e);
            }
            free(logits);
            qx_engine_free(&en);
        }
    }
    return 0;
}
