/*
 * Worker threads of a context. The caller's thread is worker 0; workers
 * 1..n-1 are started on first use and kept until the context is destroyed.
 * Work items are claimed from a shared counter, in index order or in the
 * column order of a grid (sdpa_run_items's visit_rows). Every item is
 * computed the same way whichever worker takes it, whenever (each worker
 * has its own scratch and items write disjoint outputs), so results are
 * bitwise identical for every thread count and order; of several failing
 * items the lowest index is reported.
 * A caller's parallel-for (sdpa_ctx_set_parallel_for) runs the same items
 * on the caller's threads instead.
 */
/* sched_getaffinity and CPU_COUNT (SDPA_NUM_THREADS_ALL) are GNU
 * extensions */
#define _GNU_SOURCE
#include "core/context.h"
#include "core/problem.h"
#include "forward/plan.h"
#include "runtime/pool.h"
#include "runtime/blas_threads.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

/* The lowest failing item of a job and what it reported: the same failure
 * is reported whichever worker met which item first. */
typedef struct first_failure {
    pthread_mutex_t lock;
    int64_t item; /* INT64_MAX while none */
    sdpa_where where;
    int status;
} first_failure;

static void failure_note(first_failure *f, int64_t item, sdpa_where where,
                         int status)
{
    pthread_mutex_lock(&f->lock);
    if (item < f->item) {
        f->item = item;
        f->where = where;
        f->status = status;
    }
    pthread_mutex_unlock(&f->lock);
}

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
    int64_t items, visit_rows;
    atomic_llong next_item; /* in visiting order */
    first_failure failure;
};

/* A worker's share of the job; its gemms run on its own thread where the
 * BLAS lets one thread say so (the plan assumed it: sdpa_blas_threads),
 * as they do when the caller's thread runs every item alone. */
static void run_share(sdpa_pool *pool, int worker)
{
    void *scratch = pool->ctx->scratch[worker].ptr;
    const sdpa_blas_serial blas_was = sdpa_blas_serial_begin();
    for (;;) {
        int64_t n = atomic_fetch_add(&pool->next_item, 1);
        if (n >= pool->items)
            break;
        int64_t item = sdpa_visited_item(n, pool->items, pool->visit_rows);
        sdpa_where where = {-1, -1, -1};
        int status = pool->fn(pool->problem, pool->plan, pool->ctx->kernel,
                              scratch, item, &where);
        if (status != SDPA_OK)
            failure_note(&pool->failure, item, where, status);
    }
    sdpa_blas_serial_end(&blas_was);
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
static int pool_grow(sdpa_ctx *ctx, const char *who, int count)
{
    sdpa_pool *pool = ctx->pool;
    if (!pool) {
        pool = sdpa_alloc(ctx, sizeof *pool);
        if (!pool)
            return sdpa_fail(ctx, SDPA_ERR_OUT_OF_MEMORY,
                             "%s: cannot allocate the thread pool", who);
        *pool = (sdpa_pool){0};
        pthread_mutex_init(&pool->lock, NULL);
        pthread_mutex_init(&pool->failure.lock, NULL);
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
                             "%s: cannot start worker thread %d", who, index);
        pool->started++;
    }
    return SDPA_OK;
}

int sdpa_pool_reserve(sdpa_ctx *ctx, const char *who, int workers)
{
    if (ctx->parallel_for)
        return SDPA_OK; /* the caller's threads run the items */
    return workers > 1 ? pool_grow(ctx, who, workers) : SDPA_OK;
}

/* The claims of a run of `items` items on the caller's threads. */
static int claims_reserve(sdpa_ctx *ctx, const char *who, int64_t items)
{
    const size_t words = (size_t)(items + 63) / 64;
    return sdpa_claims_reserve(ctx, who, words * sizeof(uint64_t));
}

int sdpa_pool_reserve_items(sdpa_ctx *ctx, const char *who, int64_t items)
{
    return ctx->parallel_for && items > 1 ? claims_reserve(ctx, who, items)
                                          : SDPA_OK;
}

int sdpa_thread_budget(const sdpa_ctx *ctx)
{
    if (ctx->parallel_for)
        return ctx->parallel_workers;
    int64_t threads = ctx->options[SDPA_OPT_NUM_THREADS];
    if (threads != SDPA_NUM_THREADS_ALL)
        return (int)threads;
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0)
        return 1;
    int cpus = CPU_COUNT(&set);
    return cpus < 1 ? 1 : cpus > SDPA_MAX_THREADS ? SDPA_MAX_THREADS : cpus;
}

int sdpa_ctx_set_parallel_for(sdpa_ctx *ctx, sdpa_parallel_for_fn parallel_for,
                              void *user, int workers)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    if (parallel_for && (workers < 1 || workers > SDPA_MAX_THREADS))
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "sdpa_ctx_set_parallel_for: workers takes values in "
                         "[1, %d], got %d",
                         SDPA_MAX_THREADS, workers);
    ctx->parallel_for = parallel_for;
    ctx->parallel_user = parallel_for ? user : NULL;
    ctx->parallel_workers = parallel_for ? workers : 0;
    ctx->message[0] = '\0';
    return SDPA_OK;
}

/* One call's items as the caller's parallel-for runs them. */
typedef struct caller_job {
    sdpa_ctx *ctx;
    const sdpa_problem *problem;
    const sdpa_plan *plan;
    sdpa_path_fn fn;
    int64_t items, visit_rows;
    /* item i's bit: taken (ctx->claims, items / 64 words): a second call
     * of an item is refused, so that calls == items means every item ran
     * once, whatever the order of the calls */
    _Atomic uint64_t *taken;
    atomic_llong calls;   /* task calls with a valid item and worker */
    atomic_bool bad_call; /* one outside them */
    atomic_int busy[SDPA_MAX_THREADS]; /* calls running per worker */
    first_failure failure;
} caller_job;

static void caller_task(void *arg, int64_t n, int worker)
{
    caller_job *job = arg;
    if (n < 0 || n >= job->items || worker < 0 ||
        worker >= job->ctx->parallel_workers) {
        atomic_store(&job->bad_call, true);
        return;
    }
    /* the caller's n-th task: its pool likely starts them in order */
    const int64_t item = sdpa_visited_item(n, job->items, job->visit_rows);
    const uint64_t bit = UINT64_C(1) << (item % 64);
    if (atomic_fetch_or(&job->taken[item / 64], bit) & bit) {
        atomic_store(&job->bad_call, true); /* called twice */
        return;
    }
    /* two calls on one worker at once would share its scratch */
    if (atomic_fetch_add(&job->busy[worker], 1) != 0) {
        atomic_fetch_sub(&job->busy[worker], 1);
        atomic_store(&job->bad_call, true);
        return;
    }
    sdpa_where where = {-1, -1, -1};
    const sdpa_blas_serial blas_was = sdpa_blas_serial_begin(); /* as above */
    int status = job->fn(job->problem, job->plan, job->ctx->kernel,
                         job->ctx->scratch[worker].ptr, item, &where);
    sdpa_blas_serial_end(&blas_was);
    atomic_fetch_sub(&job->busy[worker], 1);
    atomic_fetch_add(&job->calls, 1);
    if (status != SDPA_OK)
        failure_note(&job->failure, item, where, status);
}

static int run_on_caller_threads(sdpa_ctx *ctx, const char *who,
                                 const sdpa_problem *problem,
                                 const sdpa_plan *plan, int64_t items,
                                 int64_t visit_rows, sdpa_path_fn fn,
                                 sdpa_where *where)
{
    /* the items' bits, kept with the context like its scratch: before any
     * item runs, so that running out of memory leaves the outputs as they
     * were */
    int status = claims_reserve(ctx, who, items);
    if (status != SDPA_OK)
        return status;
    const size_t words = (size_t)(items + 63) / 64;
    caller_job job = {.ctx = ctx,
                      .problem = problem,
                      .plan = plan,
                      .fn = fn,
                      .items = items,
                      .visit_rows = visit_rows,
                      .failure = {.item = INT64_MAX, .status = SDPA_OK}};
    job.taken = ctx->claims.ptr;
    for (size_t w = 0; w < words; w++)
        atomic_init(&job.taken[w], 0);
    atomic_init(&job.calls, 0);
    atomic_init(&job.bad_call, false);
    for (int w = 0; w < SDPA_MAX_THREADS; w++)
        atomic_init(&job.busy[w], 0);
    pthread_mutex_init(&job.failure.lock, NULL);
    ctx->parallel_for(ctx->parallel_user, items, caller_task, &job);
    pthread_mutex_destroy(&job.failure.lock);
    long long calls = atomic_load(&job.calls);
    if (atomic_load(&job.bad_call) || calls != items)
        return sdpa_fail(ctx, SDPA_ERR_PARALLEL_FOR,
                         "the caller's parallel-for made %lld "
                         "valid task calls for %lld items%s; each item must "
                         "be called once, with a worker index in [0, %d) "
                         "that no other running call has",
                         calls, (long long)items,
                         atomic_load(&job.bad_call)
                             ? ", and calls with an item or worker out of "
                               "range, an item called twice or a worker "
                               "already busy"
                             : "",
                         ctx->parallel_workers);
    *where = job.failure.where;
    return job.failure.status;
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
    pthread_mutex_destroy(&pool->failure.lock);
    pthread_cond_destroy(&pool->wake);
    pthread_cond_destroy(&pool->done);
    sdpa_free(ctx, pool, sizeof *pool);
    ctx->pool = NULL;
}

int sdpa_run_items(sdpa_ctx *ctx, const char *who, const sdpa_problem *problem,
                   const sdpa_plan *plan, int64_t items, int64_t visit_rows,
                   sdpa_path_fn fn, sdpa_where *where)
{
    if (plan->threads <= 1 || items <= 1) {
        /* serial gemms here too: a BLAS's results may depend on its thread
         * count (BLIS's do), and one worker must give the bits of several */
        const sdpa_blas_serial blas_was = sdpa_blas_serial_begin();
        int status = SDPA_OK;
        int64_t failed = INT64_MAX; /* the lowest failing item so far */
        for (int64_t n = 0; n < items; n++) {
            int64_t item = sdpa_visited_item(n, items, visit_rows);
            if (item > failed)
                continue; /* a lower one failed: not reported */
            sdpa_where at = {-1, -1, -1};
            int item_status =
                fn(problem, plan, ctx->kernel, ctx->scratch[0].ptr, item, &at);
            if (item_status != SDPA_OK) {
                failed = item;
                status = item_status;
                *where = at;
            }
        }
        sdpa_blas_serial_end(&blas_was);
        return status;
    }
    if (ctx->parallel_for)
        return run_on_caller_threads(ctx, who, problem, plan, items, visit_rows,
                                     fn, where);
    int status = pool_grow(ctx, who, plan->threads);
    if (status != SDPA_OK)
        return status;
    sdpa_pool *pool = ctx->pool;
    pthread_mutex_lock(&pool->lock);
    pool->ctx = ctx;
    pool->problem = problem;
    pool->plan = plan;
    pool->fn = fn;
    pool->items = items;
    pool->visit_rows = visit_rows;
    atomic_store(&pool->next_item, 0);
    pool->failure.item = INT64_MAX;
    pool->failure.status = SDPA_OK;
    pool->active = plan->threads;
    pool->finished = 0;
    pool->generation++;
    pthread_cond_broadcast(&pool->wake);
    pthread_mutex_unlock(&pool->lock);

    run_share(pool, 0);

    pthread_mutex_lock(&pool->lock);
    while (pool->finished < pool->active - 1)
        pthread_cond_wait(&pool->done, &pool->lock);
    status = pool->failure.status;
    *where = pool->failure.where;
    pthread_mutex_unlock(&pool->lock);
    return status;
}
