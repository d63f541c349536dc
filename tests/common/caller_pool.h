/*
 * A caller's parallel-for for the unit tests (sdpa_ctx_set_parallel_for;
 * header-only, test code only): `workers` threads of the test's own (the
 * caller is worker 0) that take items from a shared counter. Link with
 * Threads::Threads.
 *
 * misbehave: 1 skips item 0, 2 names worker `workers`, 3 calls item 1 in
 * place of item 0 (as many calls as items: only knowing which items ran
 * tells; fuzz_storage's finding 2, accepted with SDPA_OK and rows never
 * written before).
 * reverse: the tasks are called last to first, as a pool may (legal: the
 * library must not depend on the order its tasks are called in).
 */
#ifndef SDPA_TEST_CALLER_POOL_H
#define SDPA_TEST_CALLER_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "sdpa.h"

enum { TEST_POOL_MAX = 8 };

typedef struct test_pool {
    int workers, misbehave;
    bool reverse;
    atomic_llong next;
    int64_t items;
    sdpa_task_fn task;
    void *arg;
    atomic_int calls; /* parallel_for calls made */
} test_pool;

typedef struct test_pool_worker {
    test_pool *pool;
    int index;
} test_pool_worker;

static inline void *test_pool_drain(void *opaque)
{
    test_pool_worker *w = opaque;
    test_pool *tp = w->pool;
    for (;;) {
        int64_t item = atomic_fetch_add(&tp->next, 1);
        if (item >= tp->items)
            break;
        if (tp->reverse)
            item = tp->items - 1 - item;
        if (tp->misbehave == 1 && item == 0)
            continue;
        int worker = tp->misbehave == 2 ? tp->workers : w->index;
        if (tp->misbehave == 3 && item == 0 && tp->items > 1)
            item = 1;
        tp->task(tp->arg, item, worker);
    }
    return NULL;
}

/* The sdpa_parallel_for_fn; user is a test_pool of at most TEST_POOL_MAX
 * workers. */
static inline void test_parallel_for(void *user, int64_t items,
                                     sdpa_task_fn task, void *arg)
{
    test_pool *tp = user;
    atomic_fetch_add(&tp->calls, 1);
    tp->items = items;
    tp->task = task;
    tp->arg = arg;
    atomic_store(&tp->next, 0);
    pthread_t threads[TEST_POOL_MAX];
    test_pool_worker ws[TEST_POOL_MAX];
    for (int i = 0; i < tp->workers; i++)
        ws[i] = (test_pool_worker){tp, i};
    for (int i = 1; i < tp->workers; i++)
        if (pthread_create(&threads[i], NULL, test_pool_drain, &ws[i]) != 0)
            abort();
    test_pool_drain(&ws[0]);
    for (int i = 1; i < tp->workers; i++)
        pthread_join(threads[i], NULL);
}

#endif
