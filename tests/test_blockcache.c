/* qx_blockcache: large blocks are handed out again after a free (the same address, counted as a
   hit), a small request does not take a block more than twice its size, small blocks bypass the
   cache, the byte cap is kept, and the pool's tasks can allocate and free through it concurrently
   (each task writes and checks its own block). qx_thp_advise on any range is harmless. */
#include "qt.h"
#include "support/qx_blockcache.h"
#include "support/qx_threads.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static void test_reuse(void) {
    qx_blockcache* c = qx_blockcache_create((size_t)8 << 20);
    quarot_env env;
    void *a, *b, *s1, *s2;
    QT_CHECK(c != NULL);
    if (!c) return;
    memset(&env, 0, sizeof env);
    qx_blockcache_allocator(c, &env.allocator);
    a = quarot_env_alloc(&env, (size_t)1 << 20);
    QT_CHECK(a != NULL && ((uintptr_t)a % 64) == 0);
    memset(a, 7, (size_t)1 << 20);
    quarot_env_free(&env, a);
    b = quarot_env_alloc(&env, ((size_t)1 << 20) - 100);   /* fits the cached block */
    QT_CHECK(b == a);
    QT_EQ_INT((int)qx_blockcache_hits(c), 1);
    quarot_env_free(&env, b);
    b = quarot_env_alloc(&env, (size_t)300 << 10);           /* under half of it: a new block */
    QT_CHECK(b != NULL && b != a);
    QT_EQ_INT((int)qx_blockcache_hits(c), 1);
    quarot_env_free(&env, b);
    s1 = quarot_env_alloc(&env, 100);                        /* small: malloc'd, never cached */
    QT_CHECK(s1 != NULL);
    quarot_env_free(&env, s1);
    s2 = quarot_env_alloc(&env, 100);
    QT_CHECK(s2 != NULL);
    quarot_env_free(&env, s2);
    QT_EQ_INT((int)qx_blockcache_hits(c), 1);
    /* over the cap: a 16 MiB block is freed, not kept, so the next one is not a hit */
    a = quarot_env_alloc(&env, (size_t)16 << 20);
    QT_CHECK(a != NULL);
    quarot_env_free(&env, a);
    a = quarot_env_alloc(&env, (size_t)16 << 20);
    QT_EQ_INT((int)qx_blockcache_hits(c), 1);
    quarot_env_free(&env, a);
    qx_blockcache_destroy(c);
    qx_blockcache_destroy(NULL);
    qx_thp_advise(NULL, 0);
    qx_thp_advise(&env, sizeof env);
}

typedef struct job {
    const quarot_env* env;
    int bad;                     /* tasks whose block did not hold what they wrote (racy reuse) */
} job;

static void task(void* arg, int64_t i) {
    job* j = (job*)arg;
    size_t n = ((size_t)256 << 10) + (size_t)(i % 3) * 4096, k;
    unsigned char* p = (unsigned char*)quarot_env_alloc(j->env, n);
    int bad = 0;
    if (!p) { __sync_fetch_and_add(&j->bad, 1); return; }
    memset(p, (int)(i & 0xff), n);
    for (k = 0; k < n; k += 509)
        if (p[k] != (unsigned char)(i & 0xff)) bad = 1;
    quarot_env_free(j->env, p);
    if (bad) __sync_fetch_and_add(&j->bad, 1);
}

static void test_threads(void) {
    qx_blockcache* c = qx_blockcache_create((size_t)4 << 20);
    qx_pool* pool = qx_pool_create(3);
    quarot_env env;
    job j;
    qx_pool_env(pool, &env);
    qx_blockcache_allocator(c, &env.allocator);
    j.env = &env;
    j.bad = 0;
    quarot_env_parallel_for(&env, task, &j, 300);
    QT_EQ_INT(j.bad, 0);
    QT_CHECK(qx_blockcache_hits(c) > 0);
    qx_pool_destroy(pool);
    qx_blockcache_destroy(c);
}

int main(void) {
    QT_RUN(test_reuse);
    QT_RUN(test_threads);
    return qt_finish("test_blockcache");
}
