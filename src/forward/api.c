/* The front door: sdpa_forward and the workspace query. Both run the same
 * pipeline — validate, plan — and sdpa_forward then grows the scratch once
 * and executes the plan's work items. */
#include "core/context.h"
#include "core/checked.h"
#include "core/problem.h"
#include "core/struct_import.h"
#include "forward/validate.h"
#include "forward/plan.h"
#include "forward/ragged.h"
#include "forward/ragged_forward.h"
#include "forward/forward.h"
#include "runtime/pool.h"
#include "paths/paths.h"

#define WHO "sdpa_forward"

/* The caller's struct, read through a zero-filled copy of this library's
 * size: a 1.0 caller's 624 bytes are all it has. */
static int import(sdpa_ctx *ctx, const sdpa_forward_args *args,
                  sdpa_forward_args *known)
{
    return sdpa_import_args(ctx, WHO, args, SDPA_ARGS_SIZE_V1, known,
                            sizeof *known);
}

static int prepare(sdpa_ctx *ctx, const sdpa_forward_args *known,
                   sdpa_problem *problem, sdpa_plan *plan)
{
    int status = sdpa_validate_call(ctx, WHO, known, problem);
    if (status != SDPA_OK)
        return status;
    return sdpa_make_plan(ctx, problem, plan);
}

static int execute(sdpa_ctx *ctx, const sdpa_problem *problem, sdpa_plan *plan,
                   sdpa_where *where)
{
    switch (plan->path) {
    case SDPA_PATH_MATERIALISED:
        return sdpa_run_items(ctx, WHO, problem, plan, plan->work_items, 1,
                              sdpa_materialised_item, where);
    case SDPA_PATH_TILED:
        return sdpa_run_items(ctx, WHO, problem, plan, plan->work_items, 1,
                              sdpa_tiled_item, where);
    default: {
        plan->shared = ctx->shared.ptr;
        int status =
            sdpa_run_items(ctx, WHO, problem, plan, plan->work_items,
                           plan->visit_rows, sdpa_decode_chunk_item, where);
        if (status != SDPA_OK)
            return status;
        return sdpa_run_items(ctx, WHO, problem, plan, plan->merge_items, 1,
                              sdpa_decode_merge_item, where);
    }
    }
}

int sdpa_forward_call(sdpa_ctx *ctx, const sdpa_forward_args *args)
{
    sdpa_forward_args known;
    int status = import(ctx, args, &known);
    if (status != SDPA_OK)
        return status;
    if (sdpa_is_ragged(&known))
        return sdpa_ragged_forward(ctx, &known);
    sdpa_problem problem;
    sdpa_plan plan;
    status = prepare(ctx, &known, &problem, &plan);
    if (status == SDPA_OK)
        status = sdpa_scratch_reserve(ctx, WHO, plan.reserve_workers,
                                      plan.worker_bytes, plan.shared_bytes);
    if (status == SDPA_OK)
        status =
            sdpa_pool_reserve(ctx, WHO, plan.reserve_workers, plan.work_items);
    if (status != SDPA_OK)
        return status;
    sdpa_where where = {-1, -1, -1};
    status = execute(ctx, &problem, &plan, &where);
    if (status == SDPA_ERR_NONFINITE)
        return sdpa_fail(ctx, status,
                         "sdpa_forward: batch %lld, head %lld, query row %lld "
                         "has a NaN or infinite logit (non-finite input or "
                         "overflow); the outputs hold unspecified values",
                         (long long)where.batch, (long long)where.head,
                         (long long)where.row);
    return status;
}

int sdpa_workspace_total(sdpa_ctx *ctx, const sdpa_plan *plan, size_t parts,
                         size_t *bytes)
{
    size_t total = ctx->shared.size > plan->shared_bytes ? ctx->shared.size
                                                         : plan->shared_bytes;
    parts = parts > ctx->parts.size ? parts : ctx->parts.size;
    bool ok = sdpa_add_size(total, parts, &total) &&
              sdpa_add_size(total, ctx->layer.size, &total) &&
              sdpa_add_size(
                  total, sdpa_pool_record_bytes(ctx, plan->work_items), &total);
    for (int i = 0; ok && i < SDPA_MAX_THREADS; i++) {
        size_t held = ctx->scratch[i].size;
        size_t need = i < plan->reserve_workers && plan->worker_bytes > held
                          ? plan->worker_bytes
                          : held;
        ok = sdpa_add_size(total, need, &total);
    }
    if (!ok)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward_workspace: total overflows");
    *bytes = total;
    return SDPA_OK;
}

int sdpa_forward(sdpa_ctx *ctx, const sdpa_forward_args *args)
{
    int status = sdpa_enter(ctx);
    return status != SDPA_OK ? status
                             : sdpa_leave(ctx, sdpa_forward_call(ctx, args));
}

static int workspace(sdpa_ctx *ctx, const sdpa_forward_args *args,
                     size_t *bytes)
{
    if (!bytes)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_forward_workspace: bytes is NULL");
    sdpa_forward_args known;
    int status = import(ctx, args, &known);
    if (status != SDPA_OK)
        return status;
    if (sdpa_is_ragged(&known))
        return sdpa_ragged_forward_workspace(ctx, &known, bytes);
    sdpa_problem problem;
    sdpa_plan plan;
    status = prepare(ctx, &known, &problem, &plan);
    if (status != SDPA_OK)
        return status;
    return sdpa_workspace_total(ctx, &plan, 0, bytes);
}

int sdpa_forward_workspace(sdpa_ctx *ctx, const sdpa_forward_args *args,
                           size_t *bytes)
{
    int status = sdpa_enter(ctx);
    return status != SDPA_OK ? status
                             : sdpa_leave(ctx, workspace(ctx, args, bytes));
}
