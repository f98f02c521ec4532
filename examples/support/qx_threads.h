/* qx_threads.h - a small pthread pool behind quarot.h's parallel-for hook (quarot_env.parallel).

   The library never creates threads: it splits heavy work (GEMMs, the polar factor, model rotation)
   into tasks and hands them to env->parallel.run when a caller provides one. This is that caller
   side for the examples and the quarot tool (`--threads N`): n-1 worker threads started once, plus
   the calling thread, take task indices from a shared counter until all are done. run() returns
   when every task has returned, as quarot_parallel requires. Results do not depend on the thread
   count (the library's tasks are written so that any split gives the same bits).

   One pool serves one caller thread at a time (run() is not reentrant); n_threads <= 1 makes a
   pool with no workers whose env runs everything serially. */
#ifndef QX_THREADS_H
#define QX_THREADS_H

#include "quarot.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct qx_pool qx_pool;

/* Starts n_threads - 1 workers (n_threads is capped at 256). Returns NULL when out of memory or
   when threads cannot be created (then the caller runs serially). */
qx_pool* qx_pool_create(int n_threads);
/* Stops and joins the workers; NULL is fine. */
void qx_pool_destroy(qx_pool* pool);
/* Fills env (allocator zeroed = default) with the pool's parallel hook; pool NULL = serial. */
void qx_pool_env(qx_pool* pool, quarot_env* env);
/* Threads the pool runs tasks on (1 for NULL). */
int qx_pool_threads(const qx_pool* pool);
/* Online processors: sysconf(_SC_NPROCESSORS_ONLN), at least 1. */
int qx_cpu_count(void);

#ifdef __cplusplus
}
#endif
#endif
