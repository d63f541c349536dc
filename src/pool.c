/*
 * Worker threads of a context. The caller's thread is worker 0; workers
 * 1..n-1 are started on first use and kept until the context is destroyed.
 * Work items are claimed from a shared counter. Every item is computed the
 * same way whichever worker takes it (each worker has its own scratch and
 * items write disjoint outputs), so results are bitwise identical for every
 * thread count; of several failing items the lowest index is reported.
 */
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>

typedef struct worker_arg {
    sdpa_pool *pool;
    int index;
} worker_arg;

struct sdpa_pool {
    int started; /* workers that exist, the caller included */
    pthread_t threads[SDPA_MAX_THREADS];
    worker_arg args[SDPA_MAX_THREADS];
    pthread_mutex_t lock;
    pthread_cond_t wake, done;
    uint64_t generation; /* bumped for every job */
    int active;          /* workers taking part in the current job */
    int finished;        /* helpers done with the current job */
    bool quit;

    /* the current job */
    sdpa_ctx *ctx;
    const sdpa_problem *problem;
    const sdpa_plan *plan;
    sdpa_path_fn fn;
    int64_t items;
    atomic_llong next_item;
    int64_t bad_item; /* lowest failing item, or INT64_MAX */
    sdpa_where where;
    int status;
};

static void run_share(sdpa_pool *pool, int worker)
{
    void *scratch = pool->ctx->scratch[worker].ptr;
    for (;;) {
        int64_t item = atomic_fetch_add(&pool->next_item, 1);
        if (item >= pool->items)
            return;
        sdpa_where where = {-1, -1, -1};
        int status = pool->fn(pool->problem, pool->plan, pool->ctx->kernel,
                              scratch, item, &where);
        if (status == SDPA_OK)
            continue;
        pthread_mutex_lock(&pool->lock);
        if (item < pool->bad_item) {
            pool->bad_item = item;
            pool->where = where;
            pool->status = status;
        }
        pthread_mutex_unlock(&pool->lock);
    }
}

static void *worker_main(void *opaque)
{
    worker_arg arg = *(worker_arg *)opaque;
    sdpa_pool *pool = arg.pool;
    uint64_t seen = 0;
    pthread_mutex_lock(&pool->lock);
    for (;;) {
        while (!pool->quit && pool->generation == seen)
            pthread_cond_wait(&pool->wake, &pool->lock);
        if (pool->quit)
            break;
        seen = pool->generation;
        if (arg.index >= pool->active)
            continue;
        pthread_mutex_unlock(&pool->lock);
        run_share(pool, arg.index);
        pthread_mutex_lock(&pool->lock);
        if (++pool->finished == pool->active - 1)
            pthread_cond_signal(&pool->done);
    }
    pthread_mutex_unlock(&pool->lock);
    return NULL;
}

/* Starts helpers until `count` workers (the caller included) exist. */
static int pool_grow(sdpa_ctx *ctx, int count)
{
    sdpa_pool *pool = ctx->pool;
    if (!pool) {
        pool = sdpa_alloc(ctx, sizeof *pool);
        if (!pool)
            return sdpa_fail(ctx, SDPA_ERR_OUT_OF_MEMORY,
                             "sdpa_forward: cannot allocate the thread pool");
        *pool = (sdpa_pool){0};
        pthread_mutex_init(&pool->lock, NULL);
        pthread_cond_init(&pool->wake, NULL);
        pthread_cond_init(&pool->done, NULL);
        pool->started = 1; /* worker 0 is the caller */
        ctx->pool = pool;
    }
    while (pool->started < count) {
        int index = pool->started;
        pool->args[index] = (worker_arg){pool, index};
        if (pthread_create(&pool->threads[index], NULL, worker_main,
                           &pool->args[index]) != 0)
            return sdpa_fail(ctx, SDPA_ERR_OUT_OF_MEMORY,
                             "sdpa_forward: cannot start worker thread %d",
                             index);
        pool->started++;
    }
    return SDPA_OK;
}

int sdpa_pool_reserve(sdpa_ctx *ctx, int workers)
{
    return workers > 1 ? pool_grow(ctx, workers) : SDPA_OK;
}

void sdpa_pool_destroy(sdpa_ctx *ctx)
{
    sdpa_pool *pool = ctx->pool;
    if (!pool)
        return;
    pthread_mutex_lock(&pool->lock);
    pool->quit = true;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);
    for (int i = 1; i < pool->started; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->lock);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    sdpa_free(ctx, pool, sizeof *pool);
    ctx->pool = NULL;
}

int sdpa_run_items(sdpa_ctx *ctx, const sdpa_problem *problem,
                   const sdpa_plan *plan, int64_t items, sdpa_path_fn fn,
                   sdpa_where *where)
{
    if (plan->threads <= 1 || items <= 1) {
        for (int64_t item = 0; item < items; item++) {
            int status = fn(problem, plan, ctx->kernel, ctx->scratch[0].ptr,
                            item, where);
            if (status != SDPA_OK)
                return status;
        }
        return SDPA_OK;
    }
    int status = pool_grow(ctx, plan->threads);
    if (status != SDPA_OK)
        return status;
    sdpa_pool *pool = ctx->pool;
    pthread_mutex_lock(&pool->lock);
    pool->ctx = ctx;
    pool->problem = problem;
    pool->plan = plan;
    pool->fn = fn;
    pool->items = items;
    atomic_store(&pool->next_item, 0);
    pool->bad_item = INT64_MAX;
    pool->status = SDPA_OK;
    pool->active = plan->threads;
    pool->finished = 0;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    run_share(pool, 0);

    pthread_mutex_lock(&pool->lock);
    while (pool->finished < pool->active - 1)
        pthread_cond_wait(&pool->done, &pool->lock);
    status = pool->status;
    *where = pool->where;
    pthread_mutex_unlock(&pool->lock);
    return status;
}
