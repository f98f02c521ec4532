/* qx_arena.h - a list of malloc blocks freed together.

   The reference forward pass, the integer engine and the YAML reader each make many allocations
   whose lifetime is the object's (weight copies, packed codes, parse nodes) and must release them
   all from one free call, also after an init that failed half-way. An arena remembers every block
   it hands out; qx_arena_free releases them and leaves the arena empty (reusable). A zeroed
   qx_arena is an empty one. Blocks are separate allocations (posix_memalign, 64-byte aligned for
   the SIMD kernels, large ones on huge pages: qx_aligned_alloc; free() releases them), so one block can be given back early with
   qx_arena_release. */
#ifndef QX_ARENA_H
#define QX_ARENA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_arena {
    void** blocks;           /* [n_blocks] every live allocation */
    int64_t n_blocks, cap_blocks;
} qx_arena;

/* One block as the arena allocates it (free() releases it): 64-byte aligned; from QX_HUGE_MIN bytes
   on, 2 MiB aligned and (Linux) advised as transparent huge pages. A weight matrix read from DRAM
   at decode streams through 2 MiB pages at about 1.6x the rate of 4 KiB pages on Zen 4 (the
   hardware prefetcher stops at every 4 KiB page; docs/benchmarks.md). */
#define QX_HUGE_MIN ((size_t)4 << 20)
void* qx_aligned_alloc(size_t bytes);
/* A new block of `bytes` (0 counts as 1), uninitialised / zeroed; NULL when out of memory (the
   arena is unchanged then). */
void* qx_arena_alloc(qx_arena* a, size_t bytes);
void* qx_arena_calloc(qx_arena* a, size_t bytes);
/* Frees block p early (a pointer from this arena; one it does not hold is ignored). */
void qx_arena_release(qx_arena* a, void* p);
/* Frees every block and the list; the arena is empty afterwards. NULL is fine. */
void qx_arena_free(qx_arena* a);

#ifdef __cplusplus
}
#endif
#endif
