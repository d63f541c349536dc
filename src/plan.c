/*
 * The plan: which path runs, how the work is split into items (batch ×
 * query head × block of query rows), and how much scratch each worker holds.
 */
#include "internal.h"

#include <limits.h>

/* Score block the materialised path aims for per worker when the caller set
 * no SDPA_OPT_SCRATCH_LIMIT: the per-core L2 of the machines we measure on
 * (512 KiB), so the block's scores stay in cache between the three passes. */
#define DEFAULT_SCORE_BLOCK_BYTES (512u * 1024u)
#define MIN_BLOCK_Q 16
#define MAX_BLOCK_Q 256

static int64_t round_up(int64_t x, int64_t to) { return (x + to - 1) / to * to; }

static int64_t choose_block_q(const sdpa_ctx *ctx, const sdpa_problem *p,
                              int64_t score_ld)
{
    int64_t forced = ctx->options[SDPA_OPT_BLOCK_Q];
    int64_t block;
    if (forced > 0) {
        block = forced;
    } else {
        int64_t budget = ctx->options[SDPA_OPT_SCRATCH_LIMIT] > 0
                             ? ctx->options[SDPA_OPT_SCRATCH_LIMIT]
                             : DEFAULT_SCORE_BLOCK_BYTES;
        block = budget / (score_ld * (int64_t)p->elem_size);
        block = block / MIN_BLOCK_Q * MIN_BLOCK_Q;
        if (block < MIN_BLOCK_Q)
            block = MIN_BLOCK_Q;
        if (block > MAX_BLOCK_Q)
            block = MAX_BLOCK_Q;
    }
    return block < p->len_q ? block : p->len_q;
}

int sdpa_make_plan(sdpa_ctx *ctx, const sdpa_problem *p, sdpa_plan *plan)
{
    int64_t path = ctx->options[SDPA_OPT_PATH];
    if (path == SDPA_PATH_AUTO)
        path = SDPA_PATH_MATERIALISED;
    if (path != SDPA_PATH_MATERIALISED)
        return sdpa_fail(ctx, SDPA_ERR_UNSUPPORTED,
                         "sdpa_forward: SDPA_OPT_PATH %lld is not available "
                         "in this build",
                         (long long)path);

    /* Rows of 64-byte multiples keep every score row aligned. */
    int64_t per_line = SDPA_ALIGN / (int64_t)p->elem_size;
    int64_t score_ld = round_up(p->len_k, per_line);
    if (score_ld > INT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward: Tk = %lld exceeds the BLAS int",
                         (long long)p->len_k);
    *plan = (sdpa_plan){0};
    plan->path = (int)path;
    plan->block_q = choose_block_q(ctx, p, score_ld);
    plan->q_blocks = (p->len_q + plan->block_q - 1) / plan->block_q;
    plan->score_ld = (size_t)score_ld;
    if (p->batch > INT64_MAX / p->heads_q ||
        p->batch * p->heads_q > INT64_MAX / plan->q_blocks)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward: N·Hq·ceil(Tq/block) overflows");
    plan->work_items = p->batch * p->heads_q * plan->q_blocks;
    int64_t threads = ctx->options[SDPA_OPT_NUM_THREADS];
    plan->threads = (int)(threads < plan->work_items ? threads
                                                     : plan->work_items);

    /* Scratch per worker: the score block (unless the scores live in the
     * caller's weights) and one 1/sum per row, aligned. */
    size_t scores = 0, sums;
    if (!sdpa_mul_size((size_t)plan->block_q, plan->score_ld, &scores) ||
        !sdpa_mul_size(scores + (size_t)plan->block_q, p->elem_size, &sums))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward: the scratch size overflows size_t");
    plan->worker_bytes = sums;
    return SDPA_OK;
}
