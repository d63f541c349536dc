/* Running a call's work items on the context's workers or the caller's
 * parallel-for (pool.c), and the order they are started in. */
#ifndef SDPA_RUNTIME_POOL_H
#define SDPA_RUNTIME_POOL_H

#include "core/context.h"
#include "core/problem.h"
#include "forward/plan.h"

#include <stdint.h>

/* Where a non-finite logit was met: batch item, query head, query row. */
typedef struct sdpa_where {
    int64_t batch, head, row;
} sdpa_where;

/* The paths' work items. Each computes item `item` on one worker's scratch
 * and returns SDPA_OK or SDPA_ERR_NONFINITE (with *where filled in). */
typedef int (*sdpa_path_fn)(const sdpa_problem *problem, const sdpa_plan *plan,
                            int kernel, void *scratch, int64_t item,
                            sdpa_where *where);

/* Runs items [0, items) — plan->work_items, or the decode path's
 * plan->merge_items — on plan->threads workers (the caller's
 * thread is worker 0). Results never depend on the thread count: every item
 * is computed the same way by whichever worker takes it; of several
 * failing items the lowest index is reported.
 * visit_rows sets only the order in which items are started: the items as
 * a grid of visit_rows rows (item = row · columns + column), taken column
 * by column; 1 (or less): in index order. items must fill the grid.
 * `who`, the entry point, starts the message of a failure to start. */
int sdpa_run_items(sdpa_ctx *ctx, const char *who, const sdpa_problem *problem,
                   const sdpa_plan *plan, int64_t items, int64_t visit_rows,
                   sdpa_path_fn fn, sdpa_where *where);

/* The item started n-th: items [0, items) as a grid of `rows` rows
 * (item = row · columns + column) taken column by column. Why a grid: the
 * decode's chunk items of a paged cache, (b · Hkv + KV head) · chunks +
 * chunk, run a chunk of every head before the next chunk, so that the
 * heads' rows of one page, which lie side by side in the pool, are read
 * close together in time. Measured on Zen 5 (Ph: 32 heads, 4096 keys,
 * f16, 16-key pages shuffled, one core): 1.89-2.02 ms against 2.29-2.36
 * head by head; contiguous K/V are faster head by head (1.69-1.78 ms
 * against 1.79-1.90). */
static inline int64_t sdpa_visited_item(int64_t n, int64_t items, int64_t rows)
{
    if (rows <= 1)
        return n;
    return n % rows * (items / rows) + n / rows;
}

/* Its inverse: when `item` is started. */
static inline int64_t sdpa_visit_position(int64_t item, int64_t items,
                                          int64_t rows)
{
    if (rows <= 1)
        return item;
    const int64_t columns = items / rows;
    return item % columns * rows + item / columns;
}
/* Starts the context's workers up to `workers` (the caller's thread is
 * worker 0) before the computation, or with the caller's parallel-for
 * makes its job record and the bits of up to max_items items (the most
 * items of any phase of the call), so that running them later allocates
 * nothing and cannot fail half way. */
int sdpa_pool_reserve(sdpa_ctx *ctx, const char *who, int workers,
                      int64_t max_items);
/* The bytes of those records (the items' bits and the job record) the
 * context will hold after a call of up to max_items items a phase. */
size_t sdpa_pool_record_bytes(const sdpa_ctx *ctx, int64_t max_items);
void sdpa_pool_destroy(sdpa_ctx *ctx);

#endif /* SDPA_RUNTIME_POOL_H */
