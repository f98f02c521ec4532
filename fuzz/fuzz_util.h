/* fuzz_util.h - checks shared by the libFuzzer harnesses of the checkpoint readers. */
#ifndef FUZZ_UTIL_H
#define FUZZ_UTIL_H

#include <stdint.h>
#include <stdlib.h>

#include "support/qx_store.h"

/* Reads every row of every tensor of a store a reader accepted back as f32: a tensor whose offset or
   size runs outside its file shows as an ASan error, a row the accessor refuses as a trap. */
static void fz_read_rows(const qx_store* s) {
    int64_t i, r;
    for (i = 0; i < s->count; ++i) {
        const quarot_tensor* t = &s->items[i].t;
        float* row = (float*)malloc((size_t)t->ne[0] * sizeof *row);
        if (!row) break;
        for (r = 0; r < quarot_tensor_nrows(t); ++r)
            if (quarot_tensor_get_row_f32(t, r, row) != QUAROT_OK) __builtin_trap();
        free(row);
    }
}

#endif
