/* qx_blockcache.h - recycled large blocks and transparent-huge-page advice for fresh memory.

   Why: on the virtual machines this project is measured on, the first write to a page the process
   has never touched costs 10-40 us (the guest's page fault plus the host backing the page: 0.1-0.3
   GB/s, against 10+ GB/s for rewriting a page already touched). A rotation run that mallocs and
   frees multi-megabyte work buffers per task, or fills gigabytes of fresh copies, spends most of its
   time there. Two remedies, both leaving every computed byte unchanged:
   - qx_thp_advise: asks the kernel to back a fresh block with 2 MiB pages (one fault per 2 MiB
     instead of 512); call it right after malloc, before the first write. A no-op where
     MADV_HUGEPAGE does not exist or the block holds no whole aligned 2 MiB page.
   - qx_blockcache: a quarot_allocator that keeps freed blocks of at least QX_BLOCKCACHE_MIN bytes
     (up to a byte cap) and hands them out again, so a library loop that allocates the same work
     buffer per task touches fresh pages only the first time. Thread-safe (the pool's tasks
     allocate concurrently). Small blocks go straight to malloc. */
#ifndef QX_BLOCKCACHE_H
#define QX_BLOCKCACHE_H

#include "quarot.h"

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define QX_BLOCKCACHE_MIN ((size_t)256 << 10)

/* Advises 2 MiB pages for the whole aligned 2 MiB pages inside [p, p + bytes). */
void qx_thp_advise(void* p, size_t bytes);

typedef struct qx_blockcache qx_blockcache;

/* A cache holding at most max_cached bytes of free blocks; NULL when out of memory. */
qx_blockcache* qx_blockcache_create(size_t max_cached);
/* Frees the cached blocks and the cache (blocks still handed out must be freed through the
   allocator before this; NULL is fine). */
void qx_blockcache_destroy(qx_blockcache* c);
/* Fills a with the cache's hooks (alloc / free / user_data = c). */
void qx_blockcache_allocator(qx_blockcache* c, quarot_allocator* a);
/* Blocks taken from the cache instead of malloc so far (for tests and benchmarks). */
size_t qx_blockcache_hits(const qx_blockcache* c);

#ifdef __cplusplus
}
#endif
#endif
