/*
 * sdpa_backward's plan: the tiles, which work item owns what a broadcast
 * shares, the work items (key blocks of (batch item, KV head) sets;
 * backward.c says why), the workers, the dQ turn counters (dq_order.h)
 * and the layout of one worker's scratch.
 */
#include "backward/backward.h"
#include "core/checked.h"
#include "runtime/blas_threads.h"

#include <limits.h>

/* Tiles: query rows of one head, keys of one block (SDPA_OPT_BLOCK_Q /
 * SDPA_OPT_BLOCK_K override them). Measured at one thread (float32, D = 64,
 * backward / forward time, medians on a loaded 2-core EPYC, so ±10 %):
 * 128×256 gave 2.65 (shape A) and 2.51 (shape D), 2.34 and 2.11 causal;
 * 128×128 2.81 / 2.82, 2.31 / 2.62 causal; 64×256 2.81 / 2.38, 2.41 /
 * 2.97 causal. */
#define BWD_BLOCK_Q 128
#define BWD_BLOCK_K 256

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The tiles and the owners of shared outputs; false on overflow. */
static bool plan_tiles(const sdpa_ctx *ctx, const sdpa_bwd_problem *bp,
                       sdpa_bwd_plan *pl)
{
    const sdpa_problem *p = &bp->p;
    int64_t bq = ctx->options[SDPA_OPT_BLOCK_Q];
    int64_t bk = ctx->options[SDPA_OPT_BLOCK_K];
    bq = bq ? bq : BWD_BLOCK_Q;
    bk = bk ? bk : BWD_BLOCK_K;
    pl->block_q = min64(bq, p->len_q);
    pl->block_k = min64(bk, p->len_k);
    pl->key_blocks = (p->len_k + pl->block_k - 1) / pl->block_k;
    pl->query_tiles = (p->len_q + pl->block_q - 1) / pl->block_q;
    const int64_t per_line = SDPA_ALIGN / (int64_t)p->elem_size;
    pl->score_ld = (pl->block_k + per_line - 1) / per_line * per_line;
    if (pl->score_ld > INT_MAX)
        return false;

    /* Who owns what a broadcast shares (see backward.c). */
    bool dbias_n = p->bias.data && bp->dbias.data && bp->dbias_shape[0] == 1 &&
                   p->batch > 1;
    bool dbias_h = p->bias.data && bp->dbias.data && bp->dbias_shape[1] == 1 &&
                   p->heads_q > 1;
    pl->item_batches = bp->k_bcast || bp->v_bcast || dbias_n ? p->batch : 1;
    pl->item_heads = dbias_h ? p->heads_kv : 1;
    return true;
}

/* One worker's scratch regions; false on overflow. */
static bool plan_scratch(const sdpa_bwd_problem *bp, sdpa_bwd_plan *pl)
{
    const sdpa_problem *p = &bp->p;
    enum { REGIONS = 14 };
    const size_t es = p->elem_size;
    const size_t q = (size_t)pl->block_q, k = (size_t)pl->block_k;
    const size_t ld = (size_t)pl->score_ld;
    const size_t dk = (size_t)p->dim_k, dv = (size_t)p->dim_v;
    size_t s_count, dk_count, dv_count, qk_count, qv_count;
    if (!sdpa_mul_size(q, ld, &s_count) || !sdpa_mul_size(k, dk, &dk_count) ||
        !sdpa_mul_size(k, dv, &dv_count) || !sdpa_mul_size(q, dk, &qk_count) ||
        !sdpa_mul_size(q, dv, &qv_count))
        return false;
    const bool kv_staged = sdpa_kv_staged(p);
    const size_t counts[REGIONS] = {
        s_count,
        s_count,
        dk_count,
        dv_count,
        q,
        p->softcap > 0 ? k : 0,
        p->mask.data && p->mask.stride[3] != 1 ? k : 0,
        p->bias.data && p->bias.stride[3] != 1 ? k : 0,
        p->mask.data || p->bias.data ? k : 0,
        2 * q,
        sdpa_q_staged(p) ? qk_count : 0,
        bp->dout_type != p->dtype ? qv_count : 0,
        kv_staged ? dk_count : 0,
        kv_staged ? dv_count : 0};
    const size_t sizes[REGIONS] = {
        es, es, es, es, es, es, 1, es, 1, sizeof(int64_t), es, es, es, es};
    size_t *const offsets[REGIONS] = {
        &pl->off_s, &pl->off_dp,   &pl->off_dk,   &pl->off_dv,   &pl->off_d,
        &pl->off_t, &pl->off_mask, &pl->off_bias, &pl->off_live, &pl->off_range,
        &pl->off_q, &pl->off_do,   &pl->off_k,    &pl->off_v};
    return sdpa_place_regions(REGIONS, counts, sizes, offsets, SDPA_ALIGN,
                              &pl->worker_bytes);
}

/* Workers whose gemms the BLAS threads would queue on its lock: let the
 * BLAS use the cores (only the worker count changes). */
bool sdpa_backward_blas_owns_cores(const sdpa_bwd_problem *bp,
                                   const sdpa_bwd_plan *pl)
{
    const sdpa_problem *p = &bp->p;
    double dmax = (double)(p->dim_k > p->dim_v ? p->dim_k : p->dim_v);
    return sdpa_blas_threads() > 1 &&
           (double)pl->block_q * (double)pl->block_k * dmax >
               SDPA_BLAS_SERIAL_MNK;
}

/* The work items and the workers. An item is one key block of a set of
 * (batch item, KV head) pairs: it owns the block's dk and dv rows (and
 * its dbias columns) and adds to the dq of every query tile that sees the
 * block, in turn (dq_order.h). So a call spreads over the workers even
 * with a single head (shape D), and every gemm of the tiles runs once.
 * With dbias summed over the keys, one item takes all of a set's blocks:
 * their dbias terms would meet in one element. The item count cannot
 * overflow: at most the elements of K, which validation bounds. */
static bool plan_work(const sdpa_ctx *ctx, const sdpa_bwd_problem *bp,
                      sdpa_bwd_plan *pl)
{
    const sdpa_problem *p = &bp->p;
    sdpa_plan *run = &pl->run;
    const bool dbias_keys =
        bp->dbias.data && bp->dbias_shape[3] == 1 && p->len_k > 1;
    pl->item_blocks = dbias_keys ? pl->key_blocks : 1;
    pl->groups = p->batch / pl->item_batches * (p->heads_kv / pl->item_heads);
    run->work_items = pl->groups * (pl->key_blocks / pl->item_blocks);
    int64_t budget = sdpa_thread_budget(ctx);
    if (sdpa_backward_blas_owns_cores(bp, pl))
        budget = 1;
    run->threads = (int)min64(budget, run->work_items);
    run->reserve_workers =
        ctx->parallel_for ? ctx->parallel_workers : run->threads;
    pl->turn_count = p->batch * p->heads_q * pl->query_tiles;
    size_t dq_count = 0, dq_end;
    return sdpa_mul_size((size_t)pl->turn_count, sizeof(atomic_llong),
                         &pl->turn_bytes) &&
           sdpa_round_up_size(pl->turn_bytes, SDPA_ALIGN, &pl->dq_offset) &&
           (bp->dq_type == p->dtype ||
            (sdpa_mul_size((size_t)(p->batch * p->heads_q * p->len_q),
                           (size_t)p->dim_k, &dq_count) &&
             sdpa_mul_size(dq_count, p->elem_size, &pl->dq_bytes))) &&
           sdpa_add_size(pl->dq_offset, pl->dq_bytes, &dq_end) &&
           sdpa_round_up_size(dq_end, SDPA_ALIGN, &pl->shared_bytes);
}

int sdpa_backward_plan(sdpa_ctx *ctx, const char *who,
                       const sdpa_bwd_problem *bp, sdpa_bwd_plan *pl)
{
    *pl = (sdpa_bwd_plan){0};
    if (!plan_tiles(ctx, bp, pl) || !plan_scratch(bp, pl) ||
        !plan_work(ctx, bp, pl))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%s: the scratch of this call's blocks overflows a "
                         "size",
                         who);
    return SDPA_OK;
}
