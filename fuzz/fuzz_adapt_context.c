/* libFuzzer harness of quarot_adapt_context_read (the stage-1 context file `quarot rotate --context`
   and `quarot run --context` read from outside).

   Whatever the bytes: no crash, no out-of-bounds access, no leak. A context that reads back must be
   what the reader promised: R orthogonal to 1e-5 and finite, the loss history consistent, and
   writing it again gives exactly the input bytes (the format has one encoding per context). Small
   ones also build their stage-2 rotation and rotate a vector, which must keep its norm.
   Seeds: fuzz/seeds/adapt_context/ (written by fuzz/make_adapt_context_seeds.c). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "quarot.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

static void check(const uint8_t* data, size_t size);

/* The bytes as given, and again with the trailing checksum made right (FNV-1a-64 of everything
   before it, as the format says), so that mutations reach the field checks behind it. */
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    check(data, size);
    if (size >= 16) {
        uint8_t* fixed = (uint8_t*)malloc(size);
        uint64_t h = 0xcbf29ce484222325ULL;
        size_t i;
        if (!fixed) return 0;
        memcpy(fixed, data, size);
        for (i = 0; i + 8 < size; ++i) { h ^= fixed[i]; h *= 0x100000001b3ULL; }
        for (i = 0; i < 8; ++i) fixed[size - 8 + i] = (uint8_t)(h >> (8 * i));
        check(fixed, size);
        free(fixed);
    }
    return 0;
}

static void check(const uint8_t* data, size_t size) {
    quarot_adapt_context c;
    quarot_adapt_context_init(&c, NULL);
    if (quarot_adapt_context_read(&c, data, size) == QUAROT_OK) {
        size_t need = 0;
        unsigned char* back;
        int64_t i, b = c.block;
        if (!c.matrix || c.hidden <= 0 || b <= 0 || c.hidden % b != 0 || c.steps_run < 0 || c.best_step > c.steps_run) __builtin_trap();
        for (i = 0; i < b * b; ++i)
            if (!(fabs(c.matrix[i]) <= 1.0 + 1e-5)) __builtin_trap();
        if (quarot_adapt_context_write(&c, NULL, 0, &need) != QUAROT_OK || need != size) __builtin_trap();
        back = (unsigned char*)malloc(need);
        if (!back || quarot_adapt_context_write(&c, back, need, &need) != QUAROT_OK || memcmp(back, data, size) != 0) __builtin_trap();
        free(back);
        if (c.hidden <= 4096) {
            quarot_rotation r;
            if (quarot_adapt_context_rotation(&c, &r, NULL) == QUAROT_OK) {
                float* x = (float*)calloc((size_t)c.hidden, sizeof(float));
                double n0 = 0.0, n1 = 0.0;
                if (!x) __builtin_trap();
                for (i = 0; i < c.hidden; ++i) { x[i] = (float)((i * 37 % 11) - 5); n0 += (double)x[i] * x[i]; }
                if (quarot_rotation_apply_f32(&r, x, 1, c.hidden, 0, NULL, 0) != QUAROT_OK) __builtin_trap();
                for (i = 0; i < c.hidden; ++i) n1 += (double)x[i] * x[i];
                if (!(fabs(n1 - n0) <= 1e-3 * n0 + 1e-6)) __builtin_trap();
                free(x);
                quarot_rotation_free(&r);
            }
        }
    }
    quarot_adapt_context_free(&c);
}
