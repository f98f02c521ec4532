/* qx_threads.c - see qx_threads.h.

   Protocol: run() publishes a job (fn, arg, n_tasks, next = 0, finished = 0) and then bumps
   `generation` (release). Every worker takes part in every job: it waits for a new generation
   (spinning a short while, since the next job of a decode step follows within microseconds, then
   sleeping on `work`), takes task indices from the atomic `next` until n_tasks, and counts itself
   in `finished`. run() takes indices too and returns once every worker has counted itself in, so a
   worker never sees a job change under it. Indices come from one atomic add each (no lock per
   task); the mutex only guards the sleeps. */
#include "support/qx_threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define QX_RELAX() _mm_pause()
#elif defined(__aarch64__)
#define QX_RELAX() __asm__ __volatile__("yield")
#else
#define QX_RELAX() ((void)0)
#endif

#define QX_POOL_MAX 256
/* Polls of a waiting thread before it sleeps: about 0.1-0.5 ms, longer than the gap between two
   products of a decode step, far shorter than a scheduler tick. */
#define QX_SPIN 4096

struct qx_pool {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    pthread_t threads[QX_POOL_MAX];
    int n_workers;                 /* started workers (threads - 1) */
    int stop;                      /* atomic */
    uint64_t generation;           /* atomic: bumped once per job */
    int finished;                  /* atomic: workers done with the current job */
    quarot_task_fn fn;
    void* arg;
    int64_t n_tasks;
    char pad[64];
    int64_t next;                  /* atomic, on its own cache line */
    char pad2[64];
};

#define QX_LOAD(p) __atomic_load_n((p), __ATOMIC_ACQUIRE)

static void qx__pool_take(qx_pool* pool, quarot_task_fn fn, void* arg, int64_t n) {
    int64_t i;
    while ((i = __atomic_fetch_add(&pool->next, 1, __ATOMIC_RELAXED)) < n) fn(arg, i);
}

static void* qx__pool_worker(void* p) {
    qx_pool* pool = (qx_pool*)p;
    uint64_t seen = 0, g;
    for (;;) {
        int spins = 0;
        while ((g = QX_LOAD(&pool->generation)) == seen && !QX_LOAD(&pool->stop)) {
            if (++spins < QX_SPIN) { QX_RELAX(); continue; }
            pthread_mutex_lock(&pool->lock);
            while (QX_LOAD(&pool->generation) == seen && !QX_LOAD(&pool->stop))
                pthread_cond_wait(&pool->work, &pool->lock);
            pthread_mutex_unlock(&pool->lock);
        }
        if (QX_LOAD(&pool->stop)) break;
        seen = g;
        qx__pool_take(pool, pool->fn, pool->arg, pool->n_tasks);
        if (__atomic_add_fetch(&pool->finished, 1, __ATOMIC_ACQ_REL) == pool->n_workers) {
            pthread_mutex_lock(&pool->lock);
            pthread_cond_signal(&pool->done);
            pthread_mutex_unlock(&pool->lock);
        }
    }
    return NULL;
}

static void qx__pool_run(void* user, quarot_task_fn fn, void* arg, int64_t n_tasks) {
    qx_pool* pool = (qx_pool*)user;
    int spins = 0;
    pool->fn = fn;
    pool->arg = arg;
    pool->n_tasks = n_tasks;
    __atomic_store_n(&pool->next, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&pool->finished, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&pool->generation, 1, __ATOMIC_RELEASE);
    /* wake sleepers: the check above is under the lock in the worker, so none is missed */
    pthread_mutex_lock(&pool->lock);
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    qx__pool_take(pool, fn, arg, n_tasks);
    while (QX_LOAD(&pool->finished) < pool->n_workers) {
        if (++spins < QX_SPIN) { QX_RELAX(); continue; }
        pthread_mutex_lock(&pool->lock);
        while (QX_LOAD(&pool->finished) < pool->n_workers) pthread_cond_wait(&pool->done, &pool->lock);
        pthread_mutex_unlock(&pool->lock);
    }
}

qx_pool* qx_pool_create(int n_threads) {
    qx_pool* pool;
    int i;
    if (n_threads > QX_POOL_MAX) n_threads = QX_POOL_MAX;
    pool = (qx_pool*)calloc(1, sizeof *pool);
    if (!pool) return NULL;
    if (pthread_mutex_init(&pool->lock, NULL) != 0) { free(pool); return NULL; }
    if (pthread_cond_init(&pool->work, NULL) != 0) { pthread_mutex_destroy(&pool->lock); free(pool); return NULL; }
    if (pthread_cond_init(&pool->done, NULL) != 0) {
        pthread_cond_destroy(&pool->work);
        pthread_mutex_destroy(&pool->lock);
        free(pool);
        return NULL;
    }
    for (i = 1; i < n_threads; ++i) {
        if (pthread_create(&pool->threads[pool->n_workers], NULL, qx__pool_worker, pool) != 0) {
            qx_pool_destroy(pool);
            return NULL;
        }
        pool->n_workers++;
    }
    return pool;
}

void qx_pool_destroy(qx_pool* pool) {
    int i;
    if (!pool) return;
    pthread_mutex_lock(&pool->lock);
    __atomic_store_n(&pool->stop, 1, __ATOMIC_RELEASE);
    pthread_cond_broadcast(&pool->work);
    pthread_mutex_unlock(&pool->lock);
    for (i = 0; i < pool->n_workers; ++i) pthread_join(pool->threads[i], NULL);
    pthread_cond_destroy(&pool->done);
    pthread_cond_destroy(&pool->work);
    pthread_mutex_destroy(&pool->lock);
    free(pool);
}

void qx_pool_env(qx_pool* pool, quarot_env* env) {
    memset(env, 0, sizeof *env);
    if (!pool || pool->n_workers == 0) return;
    env->parallel.run = qx__pool_run;
    env->parallel.user_data = pool;
    env->parallel.n_threads = pool->n_workers + 1;
}

int qx_pool_threads(const qx_pool* pool) { return pool ? pool->n_workers + 1 : 1; }

int qx_cpu_count(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)(n > QX_POOL_MAX ? QX_POOL_MAX : n) : 1;
}
