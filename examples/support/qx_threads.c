/* qx_threads.c - see qx_threads.h.

   Protocol (everything below the mutex): run() publishes a job (fn, arg, n_tasks, next = 0) and
   bumps `generation`; a worker that sees a new generation joins (active++), takes indices while
   next < n_tasks (calling fn without the lock), then leaves (active--) and signals `done` when it
   was the last one. run() takes indices too and then waits until no worker is active. A worker
   that wakes late finds next == n_tasks (or the following job, which it then serves correctly,
   since it reads the job under the lock). */
#include "support/qx_threads.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define QX_POOL_MAX 256

struct qx_pool {
    pthread_mutex_t lock;
    pthread_cond_t work, done;
    pthread_t threads[QX_POOL_MAX];
    int n_workers;                 /* started workers (threads - 1) */
    int stop;
    uint64_t generation;
    int active;
    quarot_task_fn fn;
    void* arg;
    int64_t n_tasks, next;
};

static void* qx__pool_worker(void* p) {
    qx_pool* pool = (qx_pool*)p;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->lock);
    seen = pool->generation;
    for (;;) {
        while (!pool->stop && pool->generation == seen) pthread_cond_wait(&pool->work, &pool->lock);
        if (pool->stop) break;
        seen = pool->generation;
        pool->active++;
        while (pool->next < pool->n_tasks) {
            int64_t i = pool->next++;
            quarot_task_fn fn = pool->fn;
            void* arg = pool->arg;
            pthread_mutex_unlock(&pool->lock);
            fn(arg, i);
            pthread_mutex_lock(&pool->lock);
        }
        if (--pool->active == 0) pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

static void qx__pool_run(void* user, quarot_task_fn fn, void* arg, int64_t n_tasks) {
    qx_pool* pool = (qx_pool*)user;
    pthread_mutex_lock(&pool->lock);
    pool->fn = fn;
    pool->arg = arg;
    pool->n_tasks = n_tasks;
    pool->next = 0;
    pool->generation++;
    pthread_cond_broadcast(&pool->work);
    while (pool->next < pool->n_tasks) {
        int64_t i = pool->next++;
        pthread_mutex_unlock(&pool->lock);
        fn(arg, i);
        pthread_mutex_lock(&pool->lock);
    }
    while (pool->active > 0) pthread_cond_wait(&pool->done, &pool->lock);
    pthread_mutex_unlock(&pool->lock);
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
    pool->stop = 1;
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
