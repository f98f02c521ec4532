/* qx_arena.c - see qx_arena.h. */
#include "qx_arena.h"

#include <stdlib.h>
#include <string.h>

/* Makes room for one more entry in the list (doubling from 64), then records p. */
static void* qx__arena_keep(qx_arena* a, void* p) {
    if (!p) return NULL;
    if (a->n_blocks == a->cap_blocks) {
        int64_t cap = a->cap_blocks ? a->cap_blocks * 2 : 64;
        void** nb = (void**)realloc(a->blocks, (size_t)cap * sizeof *nb);
        if (!nb) {
            free(p);
            return NULL;
        }
        a->blocks = nb;
        a->cap_blocks = cap;
    }
    a->blocks[a->n_blocks++] = p;
    return p;
}

void* qx_arena_alloc(qx_arena* a, size_t bytes) {
    return qx__arena_keep(a, malloc(bytes ? bytes : 1));
}

void* qx_arena_calloc(qx_arena* a, size_t bytes) {
    return qx__arena_keep(a, calloc(1, bytes ? bytes : 1));
}

/* Searches from the newest block: the early releases (a weight's FP32 copy once packed) come
   soon after the allocation. The last entry moves into the freed slot; order does not matter. */
void qx_arena_release(qx_arena* a, void* p) {
    int64_t i;
    if (!a || !p) return;
    for (i = a->n_blocks - 1; i >= 0; --i)
        if (a->blocks[i] == p) {
            free(p);
            a->blocks[i] = a->blocks[--a->n_blocks];
            return;
        }
}

void qx_arena_free(qx_arena* a) {
    int64_t i;
    if (!a) return;
    for (i = 0; i < a->n_blocks; ++i) free(a->blocks[i]);
    free(a->blocks);
    memset(a, 0, sizeof *a);
}
