/*
 * sdpa_backward (include/sdpa.h): the gradients of attention by
 * FlashAttention-2's scheme, on CBLAS gemms, in O(blocks) scratch.
 *
 * Nothing T × T is stored: for each key block of a KV head (dK and dV
 * accumulate in scratch) and each query tile of each head of its group
 * that sees the block,
 *
 *   S  = scale · Q Kᵀ_blk          gemm; soft-cap, ALiBi, bias, mask as in
 *   P  = exp(S − lse)              the forward (the row kernels); 0 at
 *                                  forbidden keys and for empty rows
 *   dV_blk += Pᵀ dO                gemm
 *   dP = dO Vᵀ_blk                 gemm
 *   dS = P ∘ (dP − D)              D_i = <dO_i, O_i>, recomputed per tile;
 *                                  dbias += dS here; then ∘ (1 − tanh²)
 *                                  with a soft-cap
 *   dK_blk += scale · dSᵀ Q        gemm
 *   dQ += scale · dS K_blk         gemm into the caller's dq, in place
 *
 * so the backward costs five gemms where the forward has two. A work item
 * is one key block of a (batch item, KV head): it owns the block's dk and
 * dv rows, summed in a fixed order, and adds to the dq of the query tiles
 * of the group's heads. Those adds are what several items share: they
 * run in key-block order, each on the tile's turn (dq_order.h), so dq is
 * summed block 0, 1, 2, ... in place as on one thread, and the results are
 * bitwise the same for every thread count. So a call with a single head
 * (shape D) spreads over the workers, with each gemm computed once and no
 * dq-sized partial per worker; a worker waits only when it reaches a tile
 * before the worker of the previous block has left it. Outputs a
 * broadcast shares are owned by coarser items: with k or v broadcast over
 * N an item spans every batch item (dk, dv sum over them, the batch loop
 * inside the key loop), and likewise with dbias broadcast over N; with
 * dbias broadcast over the heads an item spans every KV head, with dbias
 * summed over the keys it spans every key block. dsinks, a sum over every
 * row of a head, is a separate pass on the caller's thread (it needs only
 * lse and D).
 *
 * Causal masks, windows and kv_lens skip the tiles no row sees; with a mask
 * or bias the products run over the runs of live keys (live_keys.c), so the
 * K and V rows no row may see are never read, as in the forward.
 *
 * The pipeline is the forward's: validate (validate.c) → plan (plan.c) →
 * reserve scratch and workers → run (run.c). A ragged batch (ragged.c)
 * validates and plans each sequence as such a call of its own, then runs
 * the items of all of them at once.
 */
#include "backward/backward.h"

#define WHO SDPA_BACKWARD_WHO

int sdpa_backward_call(sdpa_ctx *ctx, const sdpa_backward_args *args)
{
    sdpa_backward_args known;
    int status = sdpa_backward_import(ctx, args, &known);
    if (status != SDPA_OK)
        return status;
    if (sdpa_backward_is_ragged(&known))
        return sdpa_ragged_backward(ctx, &known);
    sdpa_bwd_problem bp;
    sdpa_bwd_plan plan;
    status = sdpa_backward_validate(ctx, WHO, &known, &bp);
    if (status == SDPA_OK)
        status = sdpa_backward_plan(ctx, WHO, &bp, &plan);
    if (status == SDPA_OK)
        status = sdpa_scratch_reserve(ctx, WHO, plan.run.reserve_workers,
                                      plan.worker_bytes, plan.shared_bytes);
    if (status == SDPA_OK)
        status = sdpa_pool_reserve(ctx, WHO, plan.run.reserve_workers,
                                   plan.run.work_items);
    if (status != SDPA_OK)
        return status;
    sdpa_backward_bind(&bp, &plan, ctx->shared.ptr);
    sdpa_where where = {-1, -1, -1};
    status = sdpa_backward_run(ctx, &bp, &plan, &where);
    if (status == SDPA_ERR_NONFINITE)
        return sdpa_fail(ctx, status,
                         WHO ": batch %lld, head %lld, query row %lld has a "
                             "NaN or infinite logit, or an lse that is NaN, "
                             "+inf, or -inf while the row has allowed keys; "
                             "the outputs hold unspecified values",
                         (long long)where.batch, (long long)where.head,
                         (long long)where.row);
    if (status != SDPA_OK)
        return status;
    ctx->message[0] = '\0';
    return SDPA_OK;
}

int sdpa_backward(sdpa_ctx *ctx, const sdpa_backward_args *args)
{
    int status = sdpa_enter(ctx);
    return status != SDPA_OK ? status
                             : sdpa_leave(ctx, sdpa_backward_call(ctx, args));
}
