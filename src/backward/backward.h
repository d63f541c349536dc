/* sdpa_backward's pipeline (backward.c): validate (validate.c) → plan
 * (plan.c) → reserve → run (run.c, the tiles of backward_impl.h). */
#ifndef SDPA_BACKWARD_BACKWARD_H
#define SDPA_BACKWARD_BACKWARD_H

#include "core/context.h"
#include "core/problem.h"
#include "forward/plan.h"
#include "runtime/pool.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SDPA_BACKWARD_WHO "sdpa_backward"

/* The validated call: the forward's problem (first, so that a work item,
 * handed &problem->p, finds the rest) and the gradients' views. */
typedef struct sdpa_bwd_problem {
    sdpa_problem p;
    sdpa_view dout, dq, dk, dv, dbias;
    /* storage types (SDPA_FLOAT*): dout's (out's), dq's, and dk's and
     * dv's; dbias is in the compute type p.dtype */
    int dout_type, dq_type, dkv_type;
    int64_t dbias_shape[4];
    double *dsinks;
    bool k_bcast, v_bcast; /* k / v broadcast over N: dk / dv sum over it */
} sdpa_bwd_problem;

/* The plan: tiles, who owns what a broadcast shares, the work items, and
 * one worker's scratch. */
typedef struct sdpa_bwd_plan {
    sdpa_plan run; /* what sdpa_run_items reads (threads, work_items): first,
                      so that a work item, handed &plan->run, finds the
                      rest */
    int64_t item_batches; /* batch items per work item: 1 or N */
    int64_t item_heads;   /* KV heads per work item: 1 or Hkv */
    int64_t item_blocks;  /* key blocks per work item: 1, or all of them
                             when dbias sums over the keys */
    int64_t groups;       /* the (batch items, KV heads) sets of the items */
    int64_t block_q, block_k, score_ld;
    int64_t key_blocks;  /* ceil(Tk / block_k) */
    int64_t query_tiles; /* ceil(Tq / block_q) */
    /* dq_order.h: a turn counter per query tile of each (batch item,
     * head), N · Hq · query_tiles of them, set before the run */
    atomic_llong *turns;
    int64_t turn_count;
    /* where dq sums: the caller's dq, or with dq in a half type a float32
     * [N, Hq, Tq, Dk] array after the turns (dq_bytes), rounded into dq
     * once a tile's last key block has added to it */
    sdpa_view dq_sum;
    size_t turn_bytes, dq_offset, dq_bytes;
    size_t shared_bytes; /* both, SDPA_ALIGN-rounded */
    /* byte offsets of one worker's scratch regions (q, dout, k and v
     * widened: their blocks when stored in another type than T) */
    size_t off_s, off_dp, off_dk, off_dv, off_d, off_t, off_mask, off_bias,
        off_live, off_range, off_q, off_do, off_k, off_v;
    size_t worker_bytes;
} sdpa_bwd_plan;

/* The gradients a tile adds to (backward_impl.h, backward_tile). */
enum { BWD_KV = 1u, BWD_Q = 2u };

/* The caller's struct imported at this library's size (struct_size and
 * tail rules, core/struct_import.h) into *known. */
int sdpa_backward_import(sdpa_ctx *ctx, const sdpa_backward_args *args,
                         sdpa_backward_args *known);

/* Checks every argument of an imported rectangular call into *bp, its
 * messages starting with `who` (a ragged call's sequence passes "sdpa_backward:
 * sequence 3"); writes nothing else but, on failure, ctx's message. */
int sdpa_backward_validate(sdpa_ctx *ctx, const char *who,
                           const sdpa_backward_args *a, sdpa_bwd_problem *bp);

/* What the forward's rules do not cover: the dtype, lse present, dbias and
 * dsinks only with bias and sinks. Part of sdpa_backward_validate. */
int sdpa_backward_check_own(sdpa_ctx *ctx, const char *who,
                            const sdpa_backward_args *a);

/* The forward call of the same fields (the ragged ones included), whose
 * rules the backward's inputs follow. */
sdpa_forward_args sdpa_backward_forward_fields(const sdpa_backward_args *a);

/* Tiles, the work split and the scratch layout of a validated call. */
int sdpa_backward_plan(sdpa_ctx *ctx, const char *who,
                       const sdpa_bwd_problem *bp, sdpa_bwd_plan *plan);

/* Would the BLAS's own threads run this plan's gemms better than the
 * workers (then the call runs on one worker)? */
bool sdpa_backward_blas_owns_cores(const sdpa_bwd_problem *bp,
                                   const sdpa_bwd_plan *plan);

/* Places the plan's shared_bytes (its turn counters, then a half dq's
 * float32 sums) at `shared`, SDPA_ALIGN-aligned: ctx->shared for a call of
 * its own. */
void sdpa_backward_bind(const sdpa_bwd_problem *bp, sdpa_bwd_plan *plan,
                        void *shared);

/* Runs the bound plan on reserved scratch and workers: dbias zeroed, the
 * work items, then dsinks. SDPA_ERR_NONFINITE with *where. */
int sdpa_backward_run(sdpa_ctx *ctx, const sdpa_bwd_problem *bp,
                      sdpa_bwd_plan *plan, sdpa_where *where);

/* The work items of sdpa_backward_run, handed &bp->p and &plan->run: item
 * (set · blocks per set + block) computes one key block (or all) of a set
 * of (batch item, KV head) pairs. */
int sdpa_backward_item(const sdpa_problem *p, const sdpa_plan *plan, int kernel,
                       void *scratch, int64_t item, sdpa_where *where);

/* dsinks[h] of a validated call (sdpa_backward_run writes it): a sum in
 * double over the call's rows in order. */
double sdpa_backward_sink_gradient(const sdpa_bwd_problem *bp, int64_t h);

/* sdpa_backward on a ragged batch (ragged.c); args is imported. */
int sdpa_ragged_backward(sdpa_ctx *ctx, const sdpa_backward_args *args);

/* Is this an imported call with ragged fields? */
static inline bool sdpa_backward_is_ragged(const sdpa_backward_args *a)
{
    return a->seqs != 0 || a->q_offsets || a->kv_offsets;
}

/* sdpa_backward inside a call already in progress on ctx (sdpa_enter):
 * the layer's backward. */
int sdpa_backward_call(sdpa_ctx *ctx, const sdpa_backward_args *args);

#endif /* SDPA_BACKWARD_BACKWARD_H */
