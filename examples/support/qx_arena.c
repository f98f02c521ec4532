/* qx_arena.c - see qx_arena.h. */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* madvise, MADV_HUGEPAGE */
#endif
#include "support/qx_arena.h"

#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

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

/* 64-byte aligned: the SIMD kernels' 64-byte loads of weight and activation rows then never
   straddle two cache lines (unaligned rows ran the engine's W4A4 product about 1.4x slower and the
   AVX-512 FWHT up to 18 points of its add peak lower). */
void* qx_aligned_alloc(size_t bytes) {
    void* p = NULL;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes >= QX_HUGE_MIN) {
        if (posix_memalign(&p, (size_t)2 << 20, bytes) != 0) return NULL;
        (void)madvise(p, bytes, MADV_HUGEPAGE);   /* advice: refused or not, the block is the same */
        return p;
    }
#endif
    return posix_memalign(&p, 64, bytes ? bytes : 1) == 0 ? p : NULL;
}

static void* qx__arena_aligned(size_t bytes) { return qx_aligned_alloc(bytes); }

void* qx_arena_alloc(qx_arena* a, size_t bytes) {
    return qx__arena_keep(a, qx__arena_aligned(bytes));
}

void* qx_arena_calloc(qx_arena* a, size_t bytes) {
    void* p = qx__arena_aligned(bytes);
    if (p) memset(p, 0, bytes ? bytes : 1);
    return qx__arena_keep(a, p);
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
