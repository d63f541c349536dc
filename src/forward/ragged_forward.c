/*
 * sdpa_forward on a ragged batch: every sequence is validated and planned
 * as the rectangular call of its own views would be (ragged.c slices
 * them), and the items of all their plans run in one parallel phase (then
 * the decode sequences' merges in a second), heaviest items first, so that
 * a long prefill chunk and many short decodes keep every worker busy.
 * Each item is computed exactly as in the sequence's own call: its bits
 * do not depend on the other sequences, the order or the thread count.
 */
#include "forward/ragged_forward.h"
#include "core/checked.h"
#include "core/tensor_check.h"
#include "forward/forward.h"
#include "forward/plan.h"
#include "forward/ragged.h"
#include "forward/validate.h"
#include "kernels/half.h"
#include "paths/paths.h"
#include "runtime/pool.h"

#include <stdlib.h>
#include <string.h>

#define WHO "sdpa_forward"

/* One sequence of a ragged call: its own problem and plan, where its items
 * start in the call's two phases, and where its decode partials live. */
typedef struct sdpa_part {
    sdpa_problem problem;
    sdpa_plan plan;
    int64_t seq;
    int64_t first;       /* its first item of the parallel phase */
    int64_t first_merge; /* decode: its first item of the merge phase */
    size_t shared_at;    /* decode: its partials in the shared buffer */
    double item_cost;    /* multiply-adds per item: the start order */
} sdpa_part;

/* What the whole call needs, summed or maximised over its parts. */
typedef struct ragged_totals {
    int64_t parts, items, merges;
    size_t worker_bytes, shared_bytes;
    bool blas_owns_cores;
} ragged_totals;

static const sdpa_named_tensor *row_tensors(const sdpa_forward_args *a,
                                            sdpa_named_tensor rows[5])
{
    rows[0] = (sdpa_named_tensor){"out", &a->out};
    rows[1] = (sdpa_named_tensor){"lse", &a->lse};
    rows[2] = (sdpa_named_tensor){"max_weight", &a->max_weight};
    rows[3] = (sdpa_named_tensor){"entropy", &a->entropy};
    rows[4] = (sdpa_named_tensor){"q", &a->q};
    return rows;
}

/* Sequence b validated and planned, as its own call would be. */
static int make_part(sdpa_ctx *ctx, const sdpa_forward_args *args,
                     const sdpa_ragged *r, int64_t b, sdpa_part *part)
{
    char who[64];
    sdpa_forward_args sub;
    sdpa_ragged_slice(args, r, b, &sub);
    int status = sdpa_validate_call(ctx, sdpa_seq_who(who, sizeof who, WHO, b),
                                    &sub, &part->problem);
    if (status == SDPA_ERR_BAD_PAGE && strstr(ctx->message, "block_table["))
        return sdpa_ragged_page_error(ctx, WHO, args, r, b);
    if (status == SDPA_OK)
        status = sdpa_make_plan(ctx, &part->problem, &part->plan);
    if (status != SDPA_OK)
        return status;
    const sdpa_problem *p = &part->problem;
    const sdpa_plan *plan = &part->plan;
    double keys = plan->path == SDPA_PATH_DECODE ? (double)plan->chunk_len
                                                 : (double)p->len_k;
    part->seq = b;
    part->item_cost = (double)plan->rows * keys * (double)(p->dim_k + p->dim_v);
    return SDPA_OK;
}

static bool add_part(ragged_totals *t, const sdpa_part *part)
{
    const sdpa_plan *plan = &part->plan;
    size_t shared;
    t->parts++;
    t->worker_bytes = plan->worker_bytes > t->worker_bytes ? plan->worker_bytes
                                                           : t->worker_bytes;
    t->blas_owns_cores |= plan->blas_owns_cores;
    if (plan->path == SDPA_PATH_DECODE &&
        (!sdpa_round_up_size(plan->shared_bytes, SDPA_ALIGN, &shared) ||
         !sdpa_add_size(t->shared_bytes, shared, &t->shared_bytes) ||
         plan->merge_items > INT64_MAX - t->merges))
        return false;
    if (plan->path == SDPA_PATH_DECODE)
        t->merges += plan->merge_items;
    if (plan->work_items > INT64_MAX - t->items)
        return false;
    t->items += plan->work_items;
    return true;
}

/* Every check of the call, and its totals: nothing is allocated or
 * written. */
static int check_call(sdpa_ctx *ctx, const sdpa_forward_args *args,
                      sdpa_ragged *r, ragged_totals *t)
{
    sdpa_named_tensor rows[5];
    const sdpa_named_tensor refused[4] = {{"mask", &args->mask},
                                          {"bias", &args->bias},
                                          {"weights", &args->weights},
                                          {"logits", &args->logits}};
    int status = sdpa_ragged_check(ctx, WHO, args, row_tensors(args, rows), 5,
                                   refused, 4, r);
    if (status != SDPA_OK)
        return status;
    *t = (ragged_totals){0};
    sdpa_part part;
    for (int64_t b = 0; b < r->seqs; b++) {
        if (sdpa_seq_rows(r, b) == 0)
            continue;
        status = make_part(ctx, args, r, b, &part);
        if (status != SDPA_OK)
            return status;
        if (!add_part(t, &part))
            return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                             "%s: the work items or partial results of the "
                             "sequences up to %lld overflow a size",
                             WHO, (long long)b);
    }
    if (t->parts == 0)
        return sdpa_validate_settings(ctx, WHO, args);
    /* the storage types are the call's: any part's */
    const sdpa_problem *p = &part.problem;
    const size_t es = sdpa_dtype_size(p->dtype);
    const size_t kv_es = sdpa_dtype_size(p->kv_type);
    /* a block type's whole k and v start their rows and items at blocks
     * (the offsets step along strides no sequence's view may), then in
     * blocks, as their sequences were checked */
    status = sdpa_check_block_strides(ctx, WHO, "k", &args->k, p->kv_type);
    if (status == SDPA_OK)
        status = sdpa_check_block_strides(ctx, WHO, "v", &args->v, p->kv_type);
    if (status != SDPA_OK)
        return status;
    const sdpa_tensor k = sdpa_tensor_in_units(args->k, p->kv_type);
    const sdpa_tensor v = sdpa_tensor_in_units(args->v, p->kv_type);
    const sdpa_whole_tensor whole[7] = {
        {"q", &args->q, sdpa_dtype_size(p->q_type), false, false},
        {"k", &k, kv_es, false, false},
        {"v", &v, kv_es, false, false},
        {"out", &args->out, sdpa_dtype_size(p->out_type), true, false},
        {"lse", &args->lse, es, true, true},
        {"max_weight", &args->max_weight, es, true, true},
        {"entropy", &args->entropy, es, true, true}};
    return sdpa_ragged_check_whole(ctx, WHO, args, r, whole, 7);
}

/* Heaviest items first; ties in sequence order (the order changes no
 * result, only how evenly the workers finish). */
static int by_cost(const void *a, const void *b)
{
    const sdpa_part *x = a, *y = b;
    if (x->item_cost != y->item_cost)
        return x->item_cost > y->item_cost ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The part whose items [first, first + count) hold item n of a phase. */
static const sdpa_part *part_of(const sdpa_plan *plan, int64_t n, bool merge)
{
    int64_t lo = 0, hi = plan->part_count - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        int64_t first =
            merge ? plan->parts[mid].first_merge : plan->parts[mid].first;
        if (first <= n)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &plan->parts[lo];
}

static sdpa_path_fn item_fn(const sdpa_plan *plan)
{
    switch (plan->path) {
    case SDPA_PATH_MATERIALISED:
        return sdpa_materialised_item;
    case SDPA_PATH_TILED:
        return sdpa_tiled_item;
    default:
        return sdpa_decode_chunk_item;
    }
}

/* Item n of the parallel phase: an item of one sequence's own plan, in
 * that plan's visiting order. */
static int ragged_item(const sdpa_problem *problem, const sdpa_plan *plan,
                       int kernel, void *scratch, int64_t n, sdpa_where *where)
{
    (void)problem;
    const sdpa_part *part = part_of(plan, n, false);
    const sdpa_plan *own = &part->plan;
    int64_t item =
        sdpa_visited_item(n - part->first, own->work_items, own->visit_rows);
    int status =
        item_fn(own)(&part->problem, own, kernel, scratch, item, where);
    if (status != SDPA_OK)
        where->batch = part->seq;
    return status;
}

/* Item n of the merge phase: a decode sequence's merge item. A part
 * without merges has its successor's first_merge, so that part_of, which
 * takes the last part starting at or before n, skips it. */
static int ragged_merge(const sdpa_problem *problem, const sdpa_plan *plan,
                        int kernel, void *scratch, int64_t n, sdpa_where *where)
{
    (void)problem;
    const sdpa_part *part = part_of(plan, n, true);
    int status = sdpa_decode_merge_item(&part->problem, &part->plan, kernel,
                                        scratch, n - part->first_merge, where);
    if (status != SDPA_OK)
        where->batch = part->seq;
    return status;
}

/* The parts into ctx->parts, in their start order, with their offsets. */
static void fill_parts(sdpa_ctx *ctx, const sdpa_forward_args *args,
                       const sdpa_ragged *r, sdpa_part *parts, int64_t count)
{
    int64_t i = 0;
    for (int64_t b = 0; b < r->seqs && i < count; b++)
        if (sdpa_seq_rows(r, b) > 0)
            (void)make_part(ctx, args, r, b, &parts[i++]); /* checked */
    qsort(parts, (size_t)count, sizeof *parts, by_cost);
    int64_t items = 0, merges = 0;
    size_t shared = 0;
    for (i = 0; i < count; i++) {
        sdpa_part *part = &parts[i];
        part->first = items;
        part->first_merge = merges;
        items += part->plan.work_items;
        if (part->plan.path != SDPA_PATH_DECODE)
            continue;
        part->shared_at = shared;
        part->plan.shared = (char *)ctx->shared.ptr + shared;
        merges += part->plan.merge_items;
        size_t rounded = 0;
        (void)sdpa_round_up_size(part->plan.shared_bytes, SDPA_ALIGN, &rounded);
        shared += rounded;
    }
}

/* The plan of the whole call: its workers, scratch and items. */
static void master_plan(const sdpa_ctx *ctx, const ragged_totals *t,
                        sdpa_plan *plan)
{
    *plan = (sdpa_plan){0};
    int64_t budget = sdpa_thread_budget(ctx);
    int64_t threads = budget < t->items ? budget : t->items;
    plan->reserve_workers =
        ctx->parallel_for ? ctx->parallel_workers : (int)threads;
    /* one sequence whose gemms want the BLAS's threads: all on one worker,
     * as its own call would run (its bits are the same either way) */
    plan->threads = t->blas_owns_cores ? 1 : (int)threads;
    plan->worker_bytes = t->worker_bytes;
    plan->shared_bytes = t->shared_bytes;
    plan->work_items = t->items;
    plan->merge_items = t->merges;
}

/* The bytes of the parts' records. */
static int parts_bytes(sdpa_ctx *ctx, const ragged_totals *t, size_t *bytes)
{
    if (!sdpa_mul_size((size_t)t->parts, sizeof(sdpa_part), bytes))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%s: the records of %lld sequences overflow a size",
                         WHO, (long long)t->parts);
    return SDPA_OK;
}

int sdpa_ragged_forward(sdpa_ctx *ctx, const sdpa_forward_args *args)
{
    sdpa_ragged r;
    ragged_totals t;
    size_t bytes = 0;
    int status = check_call(ctx, args, &r, &t);
    if (status == SDPA_OK)
        status = parts_bytes(ctx, &t, &bytes);
    if (status != SDPA_OK || t.parts == 0)
        return status;
    sdpa_plan plan;
    master_plan(ctx, &t, &plan);
    status = sdpa_parts_reserve(ctx, WHO, bytes);
    if (status == SDPA_OK)
        status = sdpa_scratch_reserve(ctx, WHO, plan.reserve_workers,
                                      plan.worker_bytes, plan.shared_bytes);
    if (status == SDPA_OK)
        status = sdpa_pool_reserve(ctx, WHO, plan.reserve_workers, t.items);
    if (status != SDPA_OK)
        return status;
    sdpa_part *parts = ctx->parts.ptr;
    fill_parts(ctx, args, &r, parts, t.parts);
    plan.parts = parts;
    plan.part_count = t.parts;
    sdpa_where where = {-1, -1, -1};
    status = sdpa_run_items(ctx, WHO, &parts[0].problem, &plan, t.items, 1,
                            ragged_item, &where);
    if (status == SDPA_OK && t.merges > 0)
        status = sdpa_run_items(ctx, WHO, &parts[0].problem, &plan, t.merges, 1,
                                ragged_merge, &where);
    if (status == SDPA_ERR_NONFINITE)
        return sdpa_fail(ctx, status,
                         "%s: sequence %lld, head %lld, query row %lld "
                         "(packed row %lld) has a NaN or infinite logit "
                         "(non-finite input or overflow); the outputs hold "
                         "unspecified values",
                         WHO, (long long)where.batch, (long long)where.head,
                         (long long)where.row,
                         (long long)(r.q_off[where.batch] + where.row));
    return status;
}

int sdpa_ragged_forward_workspace(sdpa_ctx *ctx, const sdpa_forward_args *args,
                                  size_t *bytes)
{
    sdpa_ragged r;
    ragged_totals t;
    size_t parts = 0;
    int status = check_call(ctx, args, &r, &t);
    if (status == SDPA_OK)
        status = parts_bytes(ctx, &t, &parts);
    if (status != SDPA_OK)
        return status;
    sdpa_plan plan;
    master_plan(ctx, &t, &plan);
    return sdpa_workspace_total(ctx, &plan, parts, bytes);
}
