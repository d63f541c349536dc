/*
 * A context answers one call at a time, and the caller's parallel-for
 * cannot make it unsafe:
 *  - a call on the context from inside its own parallel-for (the same
 *    thread, between task calls) is refused with SDPA_ERR_BUSY whatever it
 *    is (forward, workspace, backward, merge, the layer, the setters), and
 *    the call in progress completes with the bits it has without it;
 *  - a task call made after the parallel-for returned is ignored: nothing
 *    is read or written through it (under ASan: no stack-use-after-return),
 *    and the next call is exact;
 *  - with the caller's parallel-for, sdpa_backward allocates everything
 *    before its first write: an allocation failure at any point leaves
 *    dq, dk, dv and dbias untouched.
 */
/* posix_memalign */
#define _POSIX_C_SOURCE 200112L

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "problem.h"
#include "testutil.h"

/* ---- A parallel-for that runs the items on the calling thread. ------- */

typedef struct serial_pool {
    int workers;
    /* called once between items 0 and 1 (NULL: none) */
    void (*between)(struct serial_pool *);
    sdpa_ctx *ctx;
    const sdpa_forward_args *inner;
    int inner_status[8];
    int inner_calls;
    /* the last job's task, kept to call it late */
    sdpa_task_fn task;
    void *task_arg;
    int64_t items;
    /* call the last job's task for its items 0 and 1 first */
    bool late_into_next;
} serial_pool;

static void serial_parallel_for(void *user, int64_t items, sdpa_task_fn task,
                                void *task_arg)
{
    serial_pool *pool = user;
    if (pool->late_into_next && pool->task) {
        pool->task(pool->task_arg, 0, 0);
        pool->task(pool->task_arg, 1, 1 % pool->workers);
    }
    pool->task = task;
    pool->task_arg = task_arg;
    pool->items = items;
    for (int64_t i = 0; i < items; i++) {
        task(task_arg, i, (int)(i % pool->workers));
        if (i == 0 && pool->between) {
            void (*between)(serial_pool *) = pool->between;
            pool->between = NULL; /* once per job, not in its own call */
            between(pool);
        }
    }
}

/* Every entry point that may change the context, called from inside. */
static void call_everything(serial_pool *pool)
{
    sdpa_ctx *ctx = pool->ctx;
    size_t bytes = 0;
    int n = 0;
    pool->inner_status[n++] = sdpa_forward(ctx, pool->inner);
    pool->inner_status[n++] = sdpa_forward_workspace(ctx, pool->inner, &bytes);
    sdpa_backward_args b = tp_backward_of(pool->inner);
    pool->inner_status[n++] = sdpa_backward(ctx, &b);
    sdpa_merge_args m = SDPA_MERGE_ARGS_INIT;
    pool->inner_status[n++] = sdpa_merge(ctx, &m);
    sdpa_mha_args l = {.struct_size = sizeof l};
    pool->inner_status[n++] = sdpa_mha_forward(ctx, &l);
    pool->inner_status[n++] = sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, 1);
    /* the audit's case: more workers, then a worker index past the old
     * count would have met unreserved scratch */
    pool->inner_status[n++] =
        sdpa_ctx_set_parallel_for(ctx, serial_parallel_for, pool, 64);
    pool->inner_calls = n;
}

static void test_reentry_refused(void **state)
{
    (void)state;
    rng r = {7};
    test_problem small, large;
    tp_make(&small, SDPA_FLOAT32, &r, 1.0, 2, 4, 2, 24, 40, 16, 16);
    tp_outputs(&small, 0, 1, 0);
    /* larger, so that the audit's inner call would have grown the item
     * record under the outer job */
    tp_make(&large, SDPA_FLOAT32, &r, 1.0, 4, 8, 2, 200, 300, 16, 16);
    tp_outputs(&large, 0, 1, 0);

    /* the bits without re-entry */
    sdpa_ctx *plain = NULL;
    assert_int_equal(sdpa_ctx_create(&plain), SDPA_OK);
    assert_int_equal(sdpa_forward(plain, &small.a), SDPA_OK);
    const size_t out_bytes = small.out.elems * small.out.esize;
    unsigned char *want = malloc(out_bytes);
    assert_non_null(want);
    memcpy(want, small.out.mem, out_bytes);
    sdpa_ctx_destroy(plain);

    /* (one worker runs the items without the parallel-for) */
    for (int workers = 2; workers <= 3; workers++) {
        sdpa_ctx *ctx = NULL;
        assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
        serial_pool pool = {.workers = workers,
                            .between = call_everything,
                            .ctx = ctx,
                            .inner = &large.a};
        assert_int_equal(
            sdpa_ctx_set_parallel_for(ctx, serial_parallel_for, &pool, workers),
            SDPA_OK);
        memset(small.out.mem, 0, out_bytes);
        const size_t large_bytes = large.out.elems * large.out.esize;
        memset(large.out.mem, 0x5a, large_bytes);
        int status = sdpa_forward(ctx, &small.a);
        if (status != SDPA_OK)
            fail_msg("workers %d: outer call %d (%s)", workers, status,
                     sdpa_ctx_last_error(ctx));
        assert_int_equal(pool.inner_calls, 7);
        for (int i = 0; i < pool.inner_calls; i++)
            if (pool.inner_status[i] != SDPA_ERR_BUSY)
                fail_msg("workers %d: inner call %d returned %d, not "
                         "SDPA_ERR_BUSY",
                         workers, i, pool.inner_status[i]);
        assert_memory_equal(small.out.mem, want, out_bytes);
        /* the refused inner forward wrote nothing */
        for (size_t i = 0; i < large_bytes; i++)
            assert_int_equal(((unsigned char *)large.out.mem)[i], 0x5a);
        /* the context is as it was: the same parallel-for and workers, and
         * it takes the next call */
        assert_int_equal(sdpa_forward(ctx, &large.a), SDPA_OK);
        assert_string_equal(sdpa_status_string(SDPA_ERR_BUSY),
                            "the context is inside a call");
        sdpa_ctx_destroy(ctx);
    }
    free(want);
    tp_free(&small);
    tp_free(&large);
}

/* A task call after the parallel-for returned, with the stack it lived on
 * reused in between. */
static void scribble_stack(void)
{
    volatile unsigned char junk[16384];
    for (size_t i = 0; i < sizeof junk; i++)
        junk[i] = (unsigned char)(0xa5 ^ i);
}

static void test_late_task_calls_ignored(void **state)
{
    (void)state;
    rng r = {11};
    test_problem p;
    tp_make(&p, SDPA_FLOAT64, &r, 1.0, 2, 4, 2, 33, 65, 8, 8);
    tp_outputs(&p, 0, 1, 0);
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    serial_pool pool = {.workers = 2};
    assert_int_equal(
        sdpa_ctx_set_parallel_for(ctx, serial_parallel_for, &pool, 2), SDPA_OK);
    assert_int_equal(sdpa_forward(ctx, &p.a), SDPA_OK);
    const size_t out_bytes = p.out.elems * p.out.esize;
    unsigned char *want = malloc(out_bytes);
    assert_non_null(want);
    memcpy(want, p.out.mem, out_bytes);
    assert_true(pool.items > 1);

    /* the outputs changed behind the library's back: a late call that
     * computed an item would write them again */
    memset(p.out.mem, 0x3c, out_bytes);
    scribble_stack();
    for (int64_t i = 0; i < pool.items; i++)
        pool.task(pool.task_arg, i, 0);
    pool.task(pool.task_arg, -1, 5); /* out of range too: ignored */
    for (size_t i = 0; i < out_bytes; i++)
        assert_int_equal(((unsigned char *)p.out.mem)[i], 0x3c);

    /* the next call is exact and reports no breach */
    memset(p.out.mem, 0, out_bytes);
    assert_int_equal(sdpa_forward(ctx, &p.a), SDPA_OK);
    assert_memory_equal(p.out.mem, want, out_bytes);

    /* late calls made while the next call is in progress, inside its
     * parallel-for before its own calls: not taken for its items */
    pool.late_into_next = true;
    for (int round = 0; round < 3; round++) {
        memset(p.out.mem, 0, out_bytes);
        int status = sdpa_forward(ctx, &p.a);
        if (status != SDPA_OK)
            fail_msg("round %d: %d (%s)", round, status,
                     sdpa_ctx_last_error(ctx));
        assert_memory_equal(p.out.mem, want, out_bytes);
    }
    free(want);
    sdpa_ctx_destroy(ctx);
    tp_free(&p);
}

/* ---- Allocation failures in sdpa_backward with the caller's threads. -- */

typedef struct failing_heap {
    long allowed; /* allocations that succeed; then every one fails */
    long made;
} failing_heap;

static void *failing_alloc(void *opaque, size_t size, size_t align)
{
    failing_heap *h = opaque;
    if (h->made >= h->allowed)
        return NULL;
    h->made++;
    void *p = NULL;
    if (align < sizeof(void *))
        align = sizeof(void *);
    return posix_memalign(&p, align, size) == 0 ? p : NULL;
}

static void failing_free(void *opaque, void *ptr, size_t size)
{
    (void)opaque;
    (void)size;
    free(ptr);
}

static void test_backward_allocates_before_writing(void **state)
{
    (void)state;
    /* the audit's shape: one KV head for sixteen query heads, a full bias,
     * causal top-left, small blocks: many key blocks adding to dq in
     * turn */
    rng r = {23};
    test_problem p;
    tp_make(&p, SDPA_FLOAT32, &r, 1.0, 1, 16, 1, 256, 128, 16, 16);
    tp_outputs(&p, 0, 1, 0);
    tbuf_make(&p.bias, SDPA_FLOAT32, 1, 16, 256, 128, LAYOUT_BHTD, 0);
    tbuf_fill_random(&p.bias, &r, 0.5);
    p.a.bias = p.bias.t;
    p.a.causal = SDPA_CAUSAL_TOP_LEFT;
    sdpa_ctx *fwd = NULL;
    assert_int_equal(sdpa_ctx_create(&fwd), SDPA_OK);
    assert_int_equal(sdpa_forward(fwd, &p.a), SDPA_OK);
    sdpa_ctx_destroy(fwd);

    tbuf dout, dq, dk, dv, dbias;
    tbuf_make(&dout, SDPA_FLOAT32, 1, 16, 256, 16, LAYOUT_BHTD, 0);
    tbuf_fill_random(&dout, &r, 1.0);
    tbuf_make(&dq, SDPA_FLOAT32, 1, 16, 256, 16, LAYOUT_BHTD, 0);
    tbuf_make(&dk, SDPA_FLOAT32, 1, 1, 128, 16, LAYOUT_BHTD, 0);
    tbuf_make(&dv, SDPA_FLOAT32, 1, 1, 128, 16, LAYOUT_BHTD, 0);
    tbuf_make(&dbias, SDPA_FLOAT32, 1, 16, 256, 128, LAYOUT_BHTD, 0);
    sdpa_backward_args b = tp_backward_of(&p.a);
    b.dout = dout.t;
    b.dq = dq.t;
    b.dk = dk.t;
    b.dv = dv.t;
    b.dbias = dbias.t;
    tbuf *const grads[] = {&dq, &dk, &dv, &dbias};
    bool succeeded = false;
    for (long allowed = 0; allowed < 64 && !succeeded; allowed++) {
        failing_heap heap = {.allowed = allowed};
        sdpa_allocator al = {sizeof al, failing_alloc, failing_free, &heap};
        sdpa_ctx *ctx = NULL;
        if (sdpa_ctx_create_with_allocator(&ctx, &al) != SDPA_OK)
            continue; /* the context itself did not fit */
        serial_pool pool = {.workers = 3};
        assert_int_equal(
            sdpa_ctx_set_parallel_for(ctx, serial_parallel_for, &pool, 3),
            SDPA_OK);
        assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_BLOCK_Q, 32), SDPA_OK);
        assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_BLOCK_K, 64), SDPA_OK);
        for (size_t g = 0; g < 4; g++)
            memset(grads[g]->mem, 0x77, grads[g]->elems * grads[g]->esize);
        int status = sdpa_backward(ctx, &b);
        if (status == SDPA_OK) {
            succeeded = true;
        } else {
            if (status != SDPA_ERR_OUT_OF_MEMORY)
                fail_msg("%ld allocations: status %d (%s)", allowed, status,
                         sdpa_ctx_last_error(ctx));
            for (size_t g = 0; g < 4; g++) {
                const unsigned char *m = grads[g]->mem;
                for (size_t i = 0; i < grads[g]->elems * grads[g]->esize; i++)
                    if (m[i] != 0x77)
                        fail_msg("%ld allocations: out of memory after "
                                 "gradient %zu byte %zu was written",
                                 allowed, g, i);
            }
        }
        sdpa_ctx_destroy(ctx);
    }
    assert_true(succeeded);
    tbuf_free_all((tbuf *const[]){&dout, &dq, &dk, &dv, &dbias, NULL});
    tp_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reentry_refused),
        cmocka_unit_test(test_late_task_calls_ignored),
        cmocka_unit_test(test_backward_allocates_before_writing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
