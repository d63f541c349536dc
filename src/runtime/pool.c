/*
 * Worker threads of a context. The caller's thread is worker 0; workers
 * 1..n-1 are started on first use and kept until the context is destroyed.
 * Work items are claimed from a shared counter, in index order or in the
 * column order of a grid (sdpa_run_items's visit_rows). Every item is
 * computed the same way whichever worker takes it, whenever (each worker
 * has its own scratch; items write disjoint outputs, or add to one in a
 * fixed order: the backward's dQ, backward/dq_order.h), so results are
 * bitwise identical for every thread count and order; of several failing
 * items the lowest index is reported.
 * A caller's parallel-for (sdpa_ctx_set_parallel_for) runs the same items
 * on the caller's threads instead, also started in visiting order.
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
#include <string.h>

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

typedef struct sdpa_caller_job caller_job;
static caller_job *caller_job_of(sdpa_ctx *ctx, const char *who);

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

int sdpa_pool_reserve(sdpa_ctx *ctx, const char *who, int workers,
                      int64_t max_items)
{
    if (ctx->parallel_for) {
        /* the caller's threads run the items: the job record and the
         * items' bits, before any item writes anything */
        size_t words = (size_t)(max_items + 63) / 64;
        int status = sdpa_claims_reserve(ctx, who, words * sizeof(uint64_t));
        if (status == SDPA_OK && !caller_job_of(ctx, who))
            status = SDPA_ERR_OUT_OF_MEMORY;
        return status;
    }
    return workers > 1 ? pool_grow(ctx, who, workers) : SDPA_OK;
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

static int set_parallel_for(sdpa_ctx *ctx, sdpa_parallel_for_fn parallel_for,
                            void *user, int workers)
{
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

int sdpa_ctx_set_parallel_for(sdpa_ctx *ctx, sdpa_parallel_for_fn parallel_for,
                              void *user, int workers)
{
    int status = sdpa_enter(ctx);
    if (status != SDPA_OK)
        return status;
    return sdpa_leave(ctx, set_parallel_for(ctx, parallel_for, user, workers));
}

/* One call's items as the caller's parallel-for runs them. The record
 * lives with the context, not on the stack of the call: a task call that
 * comes after the parallel-for returned (a contract breach that cannot be
 * reported any more) finds it through its ticket, sees that the ticket is
 * not the open job's and returns without touching anything; the call does
 * not return while a task call is still inside it. A ticket serves every
 * TICKETS-th job: a task call late by that many jobs of the context counts
 * as a call of the job in progress (an item called twice fails it). */
enum { TICKETS = 256 };
typedef struct job_ticket {
    struct sdpa_caller_job *job;
    _Atomic uint64_t generation; /* the job it was handed out for */
} job_ticket;

struct sdpa_caller_job {
    sdpa_ctx *ctx;
    const sdpa_problem *problem;
    const sdpa_plan *plan;
    sdpa_path_fn fn;
    int64_t items, visit_rows;
    /* task n's bit: called (ctx->claims, items / 64 words): a second call
     * of a task is refused, so that calls == items means every item ran
     * once, whatever the order of the calls */
    _Atomic uint64_t *taken;
    _Atomic uint64_t generation; /* of the job in progress, or the last */
    job_ticket tickets[TICKETS]; /* the task_arg of job g: tickets[g % n] */
    atomic_bool open;            /* between the start and the end of a job */
    atomic_int inside;           /* task calls in progress */
    atomic_llong calls;          /* task calls with a valid item and worker */
    atomic_llong next;           /* the items started, in visiting order */
    atomic_bool bad_call;        /* one outside them */
    atomic_int busy[SDPA_MAX_THREADS]; /* calls running per worker */
    first_failure failure;
};

static void caller_item(caller_job *job, int64_t n, int worker)
{
    if (n < 0 || n >= job->items || worker < 0 ||
        worker >= job->ctx->parallel_workers) {
        atomic_store(&job->bad_call, true);
        return;
    }
    const uint64_t bit = UINT64_C(1) << (n % 64);
    if (atomic_fetch_or(&job->taken[n / 64], bit) & bit) {
        atomic_store(&job->bad_call, true); /* called twice */
        return;
    }
    /* two calls on one worker at once would share its scratch */
    if (atomic_fetch_add(&job->busy[worker], 1) != 0) {
        atomic_fetch_sub(&job->busy[worker], 1);
        atomic_store(&job->bad_call, true);
        return;
    }
    /* task n runs the next item in visiting order, not item n: whatever
     * order the caller's pool calls the tasks in, an item starts after
     * every item before it has (the backward's dQ turns wait on them) */
    const int64_t item = sdpa_visited_item(atomic_fetch_add(&job->next, 1),
                                           job->items, job->visit_rows);
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

static void caller_task(void *arg, int64_t n, int worker)
{
    job_ticket *ticket = arg;
    caller_job *job = ticket->job;
    /* counted in before looking: the end of the job either sees this call
     * inside or this call sees the job closed */
    atomic_fetch_add(&job->inside, 1);
    if (atomic_load(&job->open) &&
        atomic_load(&ticket->generation) == atomic_load(&job->generation))
        caller_item(job, n, worker);
    atomic_fetch_sub(&job->inside, 1);
}

/* The context's job record, made on first use and kept until it is
 * destroyed. */
static caller_job *caller_job_of(sdpa_ctx *ctx, const char *who)
{
    if (!ctx->caller_job) {
        caller_job *job = sdpa_alloc(ctx, sizeof *job);
        if (!job) {
            (void)sdpa_fail(ctx, SDPA_ERR_OUT_OF_MEMORY,
                            "%s: cannot allocate the parallel-for's job "
                            "record",
                            who);
            return NULL;
        }
        memset(job, 0, sizeof *job);
        atomic_init(&job->generation, 0);
        for (int t = 0; t < TICKETS; t++) {
            job->tickets[t].job = job;
            atomic_init(&job->tickets[t].generation, UINT64_MAX);
        }
        atomic_init(&job->open, false);
        atomic_init(&job->inside, 0);
        pthread_mutex_init(&job->failure.lock, NULL);
        ctx->caller_job = job;
    }
    return ctx->caller_job;
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
    const size_t words = (size_t)(items + 63) / 64;
    int status = sdpa_claims_reserve(ctx, who, words * sizeof(uint64_t));
    caller_job *job = status == SDPA_OK ? caller_job_of(ctx, who) : NULL;
    if (!job)
        return status != SDPA_OK ? status : SDPA_ERR_OUT_OF_MEMORY;
    job->ctx = ctx;
    job->problem = problem;
    job->plan = plan;
    job->fn = fn;
    job->items = items;
    job->visit_rows = visit_rows;
    job->failure.item = INT64_MAX;
    job->failure.status = SDPA_OK;
    job->failure.where = (sdpa_where){-1, -1, -1};
    job->taken = ctx->claims.ptr;
    for (size_t w = 0; w < words; w++)
        atomic_init(&job->taken[w], 0);
    atomic_store(&job->calls, 0);
    atomic_store(&job->next, 0);
    atomic_store(&job->bad_call, false);
    for (int w = 0; w < SDPA_MAX_THREADS; w++)
        atomic_store(&job->busy[w], 0);
    const uint64_t generation = atomic_load(&job->generation) + 1;
    job_ticket *ticket = &job->tickets[generation % TICKETS];
    atomic_store(&ticket->generation, generation);
    atomic_store(&job->generation, generation);
    atomic_store(&job->open, true);
    ctx->parallel_for(ctx->parallel_user, items, caller_task, ticket);
    atomic_store(&job->open, false);
    /* a task the parallel-for left running must not outlive the call */
    while (atomic_load(&job->inside) != 0)
        sched_yield();
    long long calls = atomic_load(&job->calls);
    if (atomic_load(&job->bad_call) || calls != items)
        return sdpa_fail(ctx, SDPA_ERR_PARALLEL_FOR,
                         "the caller's parallel-for made %lld "
                         "valid task calls for %lld items%s; each item must "
                         "be called once, with a worker index in [0, %d) "
                         "that no other running call has",
                         calls, (long long)items,
                         atomic_load(&job->bad_call)
                             ? ", and calls with an item or worker out of "
                               "range, an item called twice or a worker "
                               "already busy"
                             : "",
                         ctx->parallel_workers);
    *where = job->failure.where;
    return job->failure.status;
}

void sdpa_pool_destroy(sdpa_ctx *ctx)
{
    if (ctx->caller_job) {
        pthread_mutex_destroy(&ctx->caller_job->failure.lock);
        sdpa_free(ctx, ctx->caller_job, sizeof *ctx->caller_job);
        ctx->caller_job = NULL;
    }
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

size_t sdpa_pool_record_bytes(const sdpa_ctx *ctx, int64_t max_items)
{
    size_t claims = ctx->claims.size;
    bool job = ctx->caller_job != NULL;
    if (ctx->parallel_for) {
        size_t need = (size_t)(max_items + 63) / 64 * sizeof(uint64_t);
        claims = need > claims ? need : claims;
        job = true;
    }
    return claims + (job ? sizeof(caller_job) : 0);
}
