/* Writes the seed corpus of fuzz_adapt_context into the directory given as argv[1]: contexts from
   quarot_adapt_context_set (identity, a rotation, block-diagonal) and from a real stage 1 on small
   synthetic activations (with a loss history). Build and run:
     cc -std=c99 -I. fuzz/make_adapt_context_seeds.c examples/support/quarot_impl.c -lm -o /tmp/seeds &&
     /tmp/seeds fuzz/seeds/adapt_context */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "quarot.h"

static void save(const char* dir, const char* name, const quarot_adapt_context* c) {
    char path[1024];
    size_t need = 0;
    unsigned char* buf;
    FILE* f;
    quarot_adapt_context_write(c, NULL, 0, &need);
    buf = (unsigned char*)malloc(need);
    if (!buf || quarot_adapt_context_write(c, buf, need, &need) != QUAROT_OK) { free(buf); return; }
    snprintf(path, sizeof path, "%s/%s", dir, name);
    f = fopen(path, "wb");
    if (f) { fwrite(buf, 1, need, f); fclose(f); }
    free(buf);
}

int main(int argc, char** argv) {
    quarot_adapt_context c;
    double r[16 * 16];
    int i, j;
    if (argc < 2) return 1;
    quarot_adapt_context_init(&c, NULL);
    memset(r, 0, sizeof r);
    for (i = 0; i < 8; ++i) r[i * 8 + i] = 1.0;
    if (quarot_adapt_context_set(&c, 8, 8, 0, r) == QUAROT_OK) save(argv[1], "identity_8.bin", &c);
    {
        double r4[16];
        memset(r4, 0, sizeof r4);
        for (i = 0; i < 4; ++i) r4[i * 4 + i] = 1.0;
        if (quarot_adapt_context_set(&c, 16, 4, 3, r4) == QUAROT_OK) save(argv[1], "identity_block4_of_16.bin", &c);
    }
    /* a plane rotation in an 8x8 identity */
    memset(r, 0, sizeof r);
    for (i = 0; i < 8; ++i) r[i * 8 + i] = 1.0;
    r[0] = cos(0.3); r[1] = -sin(0.3); r[8] = sin(0.3); r[9] = cos(0.3);
    if (quarot_adapt_context_set(&c, 8, 8, 5, r) == QUAROT_OK) save(argv[1], "plane_8.bin", &c);
    /* stage 1 on 64 rows of 16 with two outlier channels */
    {
        quarot_adapt_capture cap;
        quarot_adapt_desc d;
        float x[64 * 16];
        unsigned s = 1;
        memset(&d, 0, sizeof d);
        d.steps = 4;
        for (i = 0; i < 64; ++i)
            for (j = 0; j < 16; ++j) {
                s = s * 1103515245u + 12345u;
                x[i * 16 + j] = (float)((int)(s >> 16 & 1023) - 512) / 256.0f * (j == 3 || j == 11 ? 12.0f : 1.0f);
            }
        if (quarot_adapt_capture_init(&cap, 16, &d, NULL) == QUAROT_OK &&
            quarot_adapt_capture_add(&cap, "model.layers.0.mlp.up_proj.weight", x, 64, 16) == QUAROT_OK &&
            quarot_adapt_stage1(&cap, &d, &c, NULL) == QUAROT_OK)
            save(argv[1], "stage1_16.bin", &c);
        quarot_adapt_capture_free(&cap);
    }
    quarot_adapt_context_free(&c);
    return 0;
}
