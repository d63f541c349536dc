/* The front door: sdpa_forward and the workspace query. Each is the same
 * pipeline — validate, plan, (grow scratch, execute). */
#include "internal.h"

static int prepare(sdpa_ctx *ctx, const sdpa_forward_args *args,
                   sdpa_problem *problem, sdpa_plan *plan)
{
    int status = sdpa_validate(ctx, args, problem);
    if (status != SDPA_OK)
        return status;
    return sdpa_make_plan(ctx, problem, plan);
}

int sdpa_forward(sdpa_ctx *ctx, const sdpa_forward_args *args)
{
    sdpa_problem problem;
    sdpa_plan plan;
    int status = prepare(ctx, args, &problem, &plan);
    if (status != SDPA_OK)
        return status;
    status = sdpa_scratch_reserve(ctx, plan.threads, plan.worker_bytes);
    if (status != SDPA_OK)
        return status;
    int64_t bad_item = -1, bad_row = -1;
    status = sdpa_run_items(ctx, &problem, &plan, sdpa_materialised_item,
                            &bad_item, &bad_row);
    if (status == SDPA_ERR_NONFINITE) {
        int64_t per_batch = problem.heads_q * plan.q_blocks;
        return sdpa_fail(ctx, status,
                         "sdpa_forward: batch %lld, head %lld, query row %lld "
                         "has a NaN or infinite logit (non-finite input or "
                         "overflow); the outputs hold unspecified values",
                         (long long)(bad_item / per_batch),
                         (long long)(bad_item % per_batch / plan.q_blocks),
                         (long long)bad_row);
    }
    return status;
}

int sdpa_forward_workspace(sdpa_ctx *ctx, const sdpa_forward_args *args,
                           size_t *bytes)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    if (!bytes)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_forward_workspace: bytes is NULL");
    sdpa_problem problem;
    sdpa_plan plan;
    int status = prepare(ctx, args, &problem, &plan);
    if (status != SDPA_OK)
        return status;
    size_t total = 0;
    for (int i = 0; i < SDPA_MAX_THREADS; i++) {
        size_t held = ctx->scratch[i].size;
        size_t need = i < plan.threads && plan.worker_bytes > held
                          ? plan.worker_bytes
                          : held;
        if (!sdpa_add_size(total, need, &total))
            return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                             "sdpa_forward_workspace: total overflows");
    }
    *bytes = total;
    return SDPA_OK;
}
