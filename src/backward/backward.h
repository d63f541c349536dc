/* sdpa_backward's pipeline (backward.c): validate (validate.c) → plan
 * (plan.c) → reserve → run (run.c, the tiles of backward_impl.h). */
#ifndef SDPA_BACKWARD_BACKWARD_H
#define SDPA_BACKWARD_BACKWARD_H

#include "core/context.h"
#include "core/problem.h"
#include "forward/plan.h"
#include "runtime/pool.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SDPA_BACKWARD_WHO "sdpa_backward"

/* The validated call: the forward's problem (first, so that a work item,
 * handed &problem->p, finds the rest) and the gradients' views. */
typedef struct sdpa_bwd_problem {
    sdpa_problem p;
    sdpa_view dout, dq, dk, dv, dbias;
    int64_t dbias_shape[4];
    double *dsinks;
    bool k_bcast, v_bcast; /* k / v broadcast over N: dk / dv sum over it */
} sdpa_bwd_problem;

/* The plan: tiles, who owns what a broadcast shares, the passes, and one
 * worker's scratch. */
typedef struct sdpa_bwd_plan {
    sdpa_plan run; /* what sdpa_run_items reads (threads, work_items): first,
                      so that a work item, handed &plan->run, finds the
                      rest */
    int64_t item_batches; /* batch items per work item: 1 or N */
    int64_t item_heads;   /* KV heads per work item: 1 or Hkv */
    int64_t block_q, block_k, score_ld;
    int64_t key_blocks;  /* ceil(Tk / block_k) */
    int64_t query_tiles; /* ceil(Tq / block_q) */
    bool split;          /* two passes: dK and dV per key block, then dQ per
                            query tile (backward.c) */
    int64_t kv_items, q_items; /* the passes' items */
    /* byte offsets of one worker's scratch regions */
    size_t off_s, off_dp, off_dk, off_dv, off_d, off_t, off_mask, off_bias,
        off_live, off_range;
    size_t worker_bytes;
} sdpa_bwd_plan;

/* The gradients a tile adds to (backward_impl.h, backward_tile). */
enum { BWD_KV = 1u, BWD_Q = 2u };

/* Checks every argument into *bp; writes nothing else but, on failure,
 * ctx's message. */
int sdpa_backward_validate(sdpa_ctx *ctx, const sdpa_backward_args *args,
                           sdpa_bwd_problem *bp);

/* Tiles, the work split and the scratch layout of a validated call. */
int sdpa_backward_plan(sdpa_ctx *ctx, const sdpa_bwd_problem *bp,
                       sdpa_bwd_plan *plan);

/* Runs the plan on reserved scratch and workers: dbias zeroed, the work
 * items, then dsinks. SDPA_ERR_NONFINITE with *where. */
int sdpa_backward_run(sdpa_ctx *ctx, const sdpa_bwd_problem *bp,
                      sdpa_bwd_plan *plan, sdpa_where *where);

/* The most items of any pass of the plan. */
static inline int64_t sdpa_backward_most_items(const sdpa_bwd_plan *plan)
{
    int64_t most = plan->run.work_items;
    most = plan->kv_items > most ? plan->kv_items : most;
    return plan->q_items > most ? plan->q_items : most;
}

/* sdpa_backward inside a call already in progress on ctx (sdpa_enter):
 * the layer's backward. */
int sdpa_backward_call(sdpa_ctx *ctx, const sdpa_backward_args *args);

#endif /* SDPA_BACKWARD_BACKWARD_H */
