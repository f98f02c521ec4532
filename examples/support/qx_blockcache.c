/* qx_blockcache.c - see qx_blockcache.h.

   Every block carries a 64-byte header in front of the caller's pointer: its capacity (0 for a
   small block that bypasses the cache), so only pointers from this allocator may be freed by it.
   Free blocks sit in a small array under a mutex; alloc takes the smallest one that fits and is
   at most twice the request (so a small request does not pin a large block). */
#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE   /* madvise, MADV_HUGEPAGE */
#endif
#include "support/qx_blockcache.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#define QX__BC_HDR 64
#define QX__BC_SLOTS 64

struct qx_blockcache {
    pthread_mutex_t lock;
    size_t max_cached, cached, hits;
    int n;
    void* blk[QX__BC_SLOTS];     /* header addresses */
    size_t cap[QX__BC_SLOTS];
};

void qx_thp_advise(void* p, size_t bytes) {
#ifdef MADV_HUGEPAGE
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t a = ((uintptr_t)p + huge - 1) & ~(huge - 1), z = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (p && z > a) (void)madvise((void*)a, (size_t)(z - a), MADV_HUGEPAGE);
#else
    (void)p;
    (void)bytes;
#endif
}

qx_blockcache* qx_blockcache_create(size_t max_cached) {
    qx_blockcache* c = (qx_blockcache*)calloc(1, sizeof *c);
    if (!c) return NULL;
    if (pthread_mutex_init(&c->lock, NULL) != 0) { free(c); return NULL; }
    c->max_cached = max_cached;
    return c;
}

void qx_blockcache_destroy(qx_blockcache* c) {
    int i;
    if (!c) return;
    for (i = 0; i < c->n; ++i) free(c->blk[i]);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

size_t qx_blockcache_hits(const qx_blockcache* c) { return c ? c->hits : 0; }

static void* qx__bc_new(size_t size, size_t cap) {
    void* h = NULL;
    if (size > SIZE_MAX - QX__BC_HDR || posix_memalign(&h, QX__BC_HDR, QX__BC_HDR + size) != 0) return NULL;
    ((size_t*)h)[0] = cap;
    if (cap) qx_thp_advise(h, QX__BC_HDR + size);
    return (char*)h + QX__BC_HDR;
}

static void* qx__bc_alloc(size_t size, void* user) {
    qx_blockcache* c = (qx_blockcache*)user;
    int i, best = -1;
    void* h;
    if (size < QX_BLOCKCACHE_MIN) return qx__bc_new(size, 0);
    pthread_mutex_lock(&c->lock);
    for (i = 0; i < c->n; ++i)
        if (c->cap[i] >= size && c->cap[i] / 2 <= size && (best < 0 || c->cap[i] < c->cap[best])) best = i;
    if (best >= 0) {
        h = c->blk[best];
        c->cached -= c->cap[best];
        c->blk[best] = c->blk[c->n - 1];
        c->cap[best] = c->cap[c->n - 1];
        c->n--;
        c->hits++;
        pthread_mutex_unlock(&c->lock);
        return (char*)h + QX__BC_HDR;
    }
    pthread_mutex_unlock(&c->lock);
    return qx__bc_new(size, size);
}

static void qx__bc_free(void* p, void* user) {
    qx_blockcache* c = (qx_blockcache*)user;
    char* h;
    size_t cap;
    if (!p) return;
    h = (char*)p - QX__BC_HDR;
    cap = ((size_t*)h)[0];
    if (cap) {
        pthread_mutex_lock(&c->lock);
        if (c->n < QX__BC_SLOTS && c->cached + cap <= c->max_cached) {
            c->blk[c->n] = h;
            c->cap[c->n] = cap;
            c->n++;
            c->cached += cap;
            h = NULL;
        }
        pthread_mutex_unlock(&c->lock);
    }
    free(h);
}

void qx_blockcache_allocator(qx_blockcache* c, quarot_allocator* a) {
    memset(a, 0, sizeof *a);
    if (!c) return;
    a->alloc = qx__bc_alloc;
    a->free = qx__bc_free;
    a->user_data = c;
}
