/* qx_arena.h - a list of malloc blocks freed together.

   The reference forward pass, the integer engine and the YAML reader each make many allocations
   whose lifetime is the object's (weight copies, packed codes, parse nodes) and must release them
   all from one free call, also after an init that failed half-way. An arena remembers every block
   it hands out; qx_arena_free releases them and leaves the arena empty (reusable). A zeroed
   qx_arena is an empty one. Blocks are separate allocations (posix_memalign, 64-byte aligned for
   the SIMD kernels; free() releases them), so one block can be given back early with
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
