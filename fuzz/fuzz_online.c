/* libFuzzer harness for the online hook file reader (quarot_online_read: the text engines take from
   outside; tests/fuzz.sh builds it with ASan + UBSan).

   The input is a hook file. When it parses: writing the list back and reading that again must give
   the same list (same text when written a second time), every hook must be found by its
   (layer, site), and each hook of a modest size must run on a row of data taken from the input
   (finite in, finite out: the transforms are orthogonal). Seeds: fuzz/seeds/online (hook files
   `quarot rotate --online` / `--r3` wrote for stories260K, with their weights lines, and the small
   ones fuzz/make_online_seeds.c writes); fuzz/fuzz_online.dict holds the words of the format. */
#include "quarot.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    quarot_online_list a, b;
    char err[256];
    char *t1 = NULL, *t2 = NULL;
    size_t n1 = 0, n2 = 0;
    int64_t i;
    quarot_online_list_init(&a, NULL);
    quarot_online_list_init(&b, NULL);
    if (quarot_online_read(&a, (const char*)data, size, err, sizeof err) != QUAROT_OK) {
        if (a.count != 0) abort();                    /* a failed read leaves the list empty */
        quarot_online_list_free(&a);
        return 0;
    }
    if (quarot_online_write(&a, NULL, 0, &n1) != QUAROT_OK || !(t1 = (char*)malloc(n1))) abort();
    if (quarot_online_write(&a, t1, n1, &n1) != QUAROT_OK) abort();
    if (quarot_online_read(&b, t1, strlen(t1), err, sizeof err) != QUAROT_OK) abort();   /* our own output reads back */
    if (b.count != a.count) abort();
    if (quarot_online_write(&b, NULL, 0, &n2) != QUAROT_OK || n2 != n1 || !(t2 = (char*)malloc(n2))) abort();
    if (quarot_online_write(&b, t2, n2, &n2) != QUAROT_OK || memcmp(t1, t2, n1) != 0) abort();
    for (i = 0; i < a.count; ++i) {
        const quarot_online_hook* h = &a.hooks[i];
        if (!quarot_online_find(&a, h->layer, h->site)) abort();
        if (h->size <= 4096) {
            size_t ws = quarot_online_workspace_size(h);
            float* x = (float*)malloc((size_t)h->size * sizeof(float));
            void* w = malloc(ws ? ws : 1);
            int64_t k;
            if (!x || !w) abort();
            for (k = 0; k < h->size; ++k) x[k] = (float)((int)data[(size_t)k % size] - 128) / 16.0f;
            if (quarot_online_apply(h, x, 1, h->size, w, ws) != QUAROT_OK) abort();
            for (k = 0; k < h->size; ++k)
                if (!(fabsf(x[k]) < 1e6f)) abort();   /* |x| <= 8 * sqrt(size) after an orthogonal map */
            free(x);
            free(w);
        }
    }
    free(t1);
    free(t2);
    quarot_online_list_free(&a);
    quarot_online_list_free(&b);
    return 0;
}
