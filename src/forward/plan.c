/*
 * The plan: which path runs, how the work is split into items, and how much
 * scratch each worker holds. SDPA_OPT_NUM_THREADS decides only how many
 * workers run: paths, block sizes and decode chunks come from the shape,
 * the options and the BLAS's own thread count, so results are bitwise the
 * same for every SDPA_OPT_NUM_THREADS.
 */
#include "core/context.h"
#include "core/checked.h"
#include "core/problem.h"
#include "forward/plan.h"
#include "runtime/blas_threads.h"
#include "paths/online_softmax.h"

#include <limits.h>

/* Score block the materialised path aims for per worker when the caller set
 * no SDPA_OPT_SCRATCH_LIMIT. Measured on the 2-core AVX2 machines (shape A,
 * 1 thread, ratio to the bare gemms): blocks of 128 / 256 / 512 query rows
 * of 1024 keys gave 1.13 / 1.14 / 1.09 — taller blocks re-pack K and V
 * fewer times, which outweighs keeping the scores in L2 (512 KiB). */
#define DEFAULT_SCORE_BLOCK_BYTES (2 * 1024 * 1024)
#define MIN_BLOCK_Q 16
#define MAX_BLOCK_Q 512

/* Tiled path defaults (SDPA_OPT_BLOCK_Q / _K override them), measured at
 * 1 thread as the ratio to the bare gemms: shape D (4096 keys) 256×512
 * 1.01, 128×256 1.05, 64×256 1.07 (materialised 1.17); shape A (1024 keys)
 * 256×512 1.08–1.10, materialised 1.10–1.12. So AUTO takes the tiled path
 * unless the weights are wanted. */
#define TILED_BLOCK_Q 256
#define TILED_BLOCK_K 512
/* With a causal mask smaller tiles waste less on the diagonal: shape B
 * measured 64×128 0.63, 128×64 0.64, 256×512 0.72 (materialised 0.85).
 * The waste shrinks with the length while small tiles stay slower: causal
 * at T = 16384 measured 64×128 0.49, 256×512 0.475. Small tiles are used
 * below CAUSAL_SMALL_TILES_BELOW query rows. */
#define CAUSAL_BLOCK_Q 64
#define CAUSAL_BLOCK_K 128
#define CAUSAL_SMALL_TILES_BELOW 4096
/* A left window bounds each row's keys: narrow row blocks waste less on
 * the band's two edges, long key blocks keep the gemms efficient. Shape W
 * (T = 16384, window 1024, causal, D = 64), W's time over shape A's at 1
 * and 2 threads: 64×768, 96×512, 64×512, 64×1024 all 17.7–17.9 (within
 * noise of each other), 128×512 18.0–18.3, 256×512 (the causal default at
 * this length) about 19.4. */
#define WINDOW_BLOCK_Q 64
#define WINDOW_BLOCK_K 768
/* When the BLAS runs its own threads, tiles small enough that every gemm
 * stays on the calling thread (M·N·K <= SDPA_BLAS_SERIAL_MNK), so that
 * several workers can run gemms side by side. */
#define SERIAL_BLOCK_K 64

/* Decode: AUTO takes it when a KV head serves at most this many query rows
 * (group · Tq), and splits the keys into chunks of this many (1 to 4096 keys
 * measured alike at one thread: shape G 0.48–0.50 of the bare gemms). When
 * the BLAS runs its own threads, chunks whose products it runs serially
 * instead, so that several workers read keys side by side: shape G with
 * OpenBLAS at 2 threads measured 13.6 ms with 512-key chunks (one worker,
 * threaded gemvs), 12.2 / 6.7 ms with 64-key chunks on 1 / 2 workers. */
#define DECODE_MAX_ROWS 16
#define DECODE_CHUNK 512
#define DECODE_MIN_CHUNK 16
/* The materialised path widens or gathers K and V (sdpa_kv_staged) this
 * many keys at a time, so its scratch stays bounded whatever Tk is; its
 * gemms take this many keys at a time whether staged or not, since a P V
 * product split over keys sums in another order: paged K/V must give the
 * bits of contiguous ones. */
#define MATERIALISED_STAGE_KEYS 512

static int64_t round_up(int64_t x, int64_t to)
{
    return (x + to - 1) / to * to;
}

/* a · b for non-negative a, b; false when it does not fit int64_t. Every
 * product of extents below goes through here: validation bounds the
 * extents BLAS sees by INT_MAX, but N, Hq and Hkv only by the span of
 * their tensors, which stride 0 makes unlimited. */
static bool mul64(int64_t a, int64_t b, int64_t *r)
{
    if (a != 0 && b > INT64_MAX / a)
        return false;
    *r = a * b;
    return true;
}

/* Extents of one region as a size_t count; false on overflow. */
static bool count_of(int64_t a, int64_t b, size_t *r)
{
    int64_t c;
    if (!mul64(a, b, &c))
        return false;
    *r = (size_t)c;
    return true;
}
static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t score_budget(const sdpa_ctx *ctx)
{
    return ctx->options[SDPA_OPT_SCRATCH_LIMIT] > 0
               ? ctx->options[SDPA_OPT_SCRATCH_LIMIT]
               : DEFAULT_SCORE_BLOCK_BYTES;
}

static int64_t materialised_block_q(const sdpa_ctx *ctx, const sdpa_problem *p,
                                    int64_t score_ld)
{
    int64_t block = ctx->options[SDPA_OPT_BLOCK_Q];
    if (block == 0) {
        block = score_budget(ctx) / (score_ld * (int64_t)p->elem_size);
        block = block / MIN_BLOCK_Q * MIN_BLOCK_Q;
        block = block < MIN_BLOCK_Q ? MIN_BLOCK_Q : min64(block, MAX_BLOCK_Q);
    }
    return min64(block, p->len_q);
}

/* The score rows and the row count the materialised path reserves: at
 * least what materialised_block_q uses, and never more for a shorter Tq or
 * Tk. (The block itself grows as Tk shrinks, rounded to MIN_BLOCK_Q rows,
 * so its exact size is not monotone: 512 rows of 1008 keys are more than
 * 336 rows of 1504.) */
static void materialised_reserve(const sdpa_ctx *ctx, const sdpa_problem *p,
                                 int64_t score_ld, int64_t *score_elems,
                                 int64_t *rows)
{
    int64_t cap = ctx->options[SDPA_OPT_BLOCK_Q]
                      ? ctx->options[SDPA_OPT_BLOCK_Q]
                      : MAX_BLOCK_Q;
    *rows = min64(cap, p->len_q);
    int64_t elems = *rows * score_ld;
    if (ctx->options[SDPA_OPT_BLOCK_Q] == 0) {
        /* block ≤ max(MIN_BLOCK_Q, budget / row bytes) */
        int64_t budget_elems = score_budget(ctx) / (int64_t)p->elem_size;
        int64_t floor_elems = MIN_BLOCK_Q * score_ld;
        elems = min64(elems,
                      budget_elems > floor_elems ? budget_elems : floor_elems);
    }
    *score_elems = elems;
}

/* Lays out one worker's regions, 64-byte aligned, in plan->off_*; false on
 * overflow. Sizes are in elements; `keys` is the longest run of keys one row
 * is given to the row kernels at once, for which a mask or bias whose key
 * stride is not 1 (a bias of another type) is gathered (regions mask and
 * bias) and, with a mask or bias, which keys some row may see is noted
 * (region live). */
static bool lay_out(sdpa_plan *plan, const sdpa_problem *p, size_t q, size_t s,
                    size_t o, size_t rows, size_t keys)
{
    enum { REGIONS = 13 };
    /* K and V rows staged for the BLAS: stage_keys of them */
    size_t kt = 0, vt = 0;
    if (plan->stage_keys > 0 && (!count_of(plan->stage_keys, p->dim_k, &kt) ||
                                 !count_of(plan->stage_keys, p->dim_v, &vt)))
        return false;
    const size_t es = p->elem_size;
    /* region a: each row's key limit and start (two int64 a row) */
    const size_t counts[REGIONS] = {
        q,
        s,
        o,
        rows,
        rows,
        2 * rows,
        p->mask.data && p->mask.stride[3] != 1 ? keys : 0,
        p->bias.data && (p->bias.stride[3] != 1 || p->bias_type != p->dtype)
            ? keys
            : 0,
        p->mask.data || p->bias.data ? keys : 0,
        p->diagnostics ? keys : 0,
        p->diagnostics ? rows : 0,
        kt,
        vt};
    const size_t sizes[REGIONS] = {es, es, es, es, es, sizeof(int64_t), 1, es,
                                   1,  es, es, es, es};
    size_t *offsets[REGIONS] = {
        &plan->off_q,    &plan->off_s, &plan->off_o,    &plan->off_m,
        &plan->off_l,    &plan->off_a, &plan->off_mask, &plan->off_bias,
        &plan->off_live, &plan->off_t, &plan->off_e,    &plan->off_kt,
        &plan->off_vt};
    return sdpa_place_regions(REGIONS, counts, sizes, offsets, SDPA_ALIGN,
                              &plan->worker_bytes);
}

/* The path to run: an SDPA_PATH_* value, SDPA_PATH_DECODE_BLAS included;
 * -1 when forced onto one that cannot give the outputs asked for. */
static int choose_path(sdpa_ctx *ctx, const sdpa_problem *p)
{
    int64_t path = ctx->options[SDPA_OPT_PATH];
    bool weights = p->weights.data != NULL || p->logits.data != NULL;
    if (path == SDPA_PATH_AUTO) {
        if (weights)
            return SDPA_PATH_MATERIALISED;
        if (p->group * p->len_q <= DECODE_MAX_ROWS)
            return SDPA_PATH_DECODE;
        return SDPA_PATH_TILED;
    }
    if (weights && path != SDPA_PATH_MATERIALISED)
        return sdpa_fail(ctx, SDPA_ERR_UNSUPPORTED,
                         "sdpa_forward: the %s output needs the "
                         "materialised path, but SDPA_OPT_PATH forces %s",
                         p->weights.data ? "weights" : "logits",
                         path == SDPA_PATH_TILED ? "the tiled path"
                         : path == SDPA_PATH_DECODE
                             ? "the decode path"
                             : "the decode path with BLAS products"),
               -1;
    return (int)path;
}

/* The largest M·N·K of the plan's gemms and M·N of its gemvs (the online
 * softmax engine's choice: Q Kᵀ as gemvs up to GEMV_MAX_ROWS rows, P V
 * always a gemm). */
static void largest_calls(const sdpa_problem *p, const sdpa_plan *plan,
                          double *gemm_mnk, double *gemv_mn)
{
    double dk = (double)p->dim_k, dv = (double)p->dim_v;
    double rows = (double)plan->rows;
    double keys = plan->path == SDPA_PATH_MATERIALISED ? (double)p->len_k
                                                       : (double)plan->block_k;
    bool gemv_scores =
        plan->path != SDPA_PATH_MATERIALISED && plan->rows <= GEMV_MAX_ROWS;
    double pv = rows * keys * dv, qk = rows * keys * dk;
    *gemm_mnk = (gemv_scores || pv > qk) ? pv : qk;
    *gemv_mn = gemv_scores ? keys * dk : 0;
}

/* Tile sizes for the tiled path: the options, else the defaults, else
 * (BLAS threads inside gemms) tiles whose gemms the BLAS runs serially.
 * The defaults count the stacked rows of a whole GQA group; block_q is the
 * query rows of each head (SDPA_OPT_BLOCK_Q sets it directly). */
static void tiled_blocks(const sdpa_ctx *ctx, const sdpa_problem *p,
                         bool blas_parallel, int64_t *block_q, int64_t *block_k)
{
    bool causal =
        p->causal != SDPA_CAUSAL_NONE && p->len_q < CAUSAL_SMALL_TILES_BELOW;
    int64_t bq = causal ? CAUSAL_BLOCK_Q : TILED_BLOCK_Q;
    int64_t bk = causal ? CAUSAL_BLOCK_K : TILED_BLOCK_K;
    if (p->window_left >= 0) {
        bq = WINDOW_BLOCK_Q;
        bk = WINDOW_BLOCK_K;
    }
    if (blas_parallel) {
        int64_t dmax = p->dim_k > p->dim_v ? p->dim_k : p->dim_v;
        bk = SERIAL_BLOCK_K;
        bq = SDPA_BLAS_SERIAL_MNK / (bk * dmax);
        bq = bq < MIN_BLOCK_Q ? MIN_BLOCK_Q : min64(bq, TILED_BLOCK_Q);
    }
    bq = bq / p->group > 0 ? bq / p->group : 1;
    if (ctx->options[SDPA_OPT_BLOCK_Q])
        bq = ctx->options[SDPA_OPT_BLOCK_Q];
    if (ctx->options[SDPA_OPT_BLOCK_K])
        bk = ctx->options[SDPA_OPT_BLOCK_K];
    *block_q = min64(bq, p->len_q);
    *block_k = min64(bk, p->len_k);
}

/* Keys per decode chunk: DECODE_CHUNK, or with BLAS threads the longest
 * multiple of DECODE_MIN_CHUNK whose products the BLAS runs serially (Q Kᵀ
 * as gemvs up to GEMV_MAX_ROWS rows, else gemms; P V a gemm). */
static int64_t decode_chunk(const sdpa_problem *p, int64_t rows,
                            bool blas_parallel)
{
    if (!blas_parallel)
        return DECODE_CHUNK;
    int64_t dmax = p->dim_k > p->dim_v ? p->dim_k : p->dim_v;
    int64_t chunk = SDPA_BLAS_SERIAL_MNK / (rows * dmax);
    if (rows <= GEMV_MAX_ROWS)
        chunk = min64(chunk, (SDPA_BLAS_SERIAL_MN - 1) / p->dim_k);
    chunk = chunk / DECODE_MIN_CHUNK * DECODE_MIN_CHUNK;
    return chunk < DECODE_MIN_CHUNK ? DECODE_MIN_CHUNK
                                    : min64(chunk, DECODE_CHUNK);
}

/* Each path's blocks, items and scratch regions; false when a count
 * overflows. The extents are at most INT_MAX (validation: BLAS rows and
 * lengths), the block sizes at most 2^20: their sums and roundings cannot
 * overflow. Products with N, Hq, Hkv or the GQA group can. */
static bool plan_materialised(const sdpa_ctx *ctx, const sdpa_problem *p,
                              sdpa_plan *plan)
{
    const int64_t per_line = SDPA_ALIGN / (int64_t)p->elem_size;
    int64_t score_ld = round_up(p->len_k, per_line);
    plan->block_q = materialised_block_q(ctx, p, score_ld);
    plan->q_blocks = (p->len_q + plan->block_q - 1) / plan->block_q;
    plan->score_ld = (size_t)score_ld;
    plan->rows = plan->block_q;
    /* region s: the scores (unless they live in the caller's weights);
     * region m: the 1/sum of each row */
    int64_t s_elems, s_rows;
    if (!(score_ld <= INT_MAX &&
          mul64(p->batch, p->heads_q, &plan->work_items) &&
          mul64(plan->work_items, plan->q_blocks, &plan->work_items)))
        return false;
    materialised_reserve(ctx, p, score_ld, &s_elems, &s_rows);
    /* staged q and out: a block's rows widened, and its output rows
     * before they are rounded to out's type */
    plan->piece_keys = MATERIALISED_STAGE_KEYS;
    if (sdpa_kv_staged(p))
        plan->stage_keys = min64(p->len_k, MATERIALISED_STAGE_KEYS);
    size_t q_count = 0, o_count = 0;
    return count_of(sdpa_q_staged(p) ? s_rows : 0, p->dim_k, &q_count) &&
           count_of(sdpa_out_staged(p) ? s_rows : 0, p->dim_v, &o_count) &&
           lay_out(plan, p, q_count, (size_t)s_elems, o_count, (size_t)s_rows,
                   (size_t)p->len_k);
}

static bool plan_tiled(const sdpa_ctx *ctx, const sdpa_problem *p,
                       sdpa_plan *plan, bool blas_parallel)
{
    const int64_t per_line = SDPA_ALIGN / (int64_t)p->elem_size;
    /* block_q query rows of each of the group's g heads: rows = g·block_q
     * stacked rows (gathered from q when g > 1), one gemm's M */
    tiled_blocks(ctx, p, blas_parallel, &plan->block_q, &plan->block_k);
    plan->q_blocks = (p->len_q + plan->block_q - 1) / plan->block_q;
    plan->score_ld = (size_t)round_up(plan->block_k, per_line);
    plan->stage_keys = sdpa_kv_staged(p) ? plan->block_k : 0;
    size_t q_count = 0, s_count = 0, o_count = 0;
    return mul64(plan->block_q, p->group, &plan->rows) &&
           plan->rows <= INT_MAX &&
           mul64(p->batch, p->heads_kv, &plan->work_items) &&
           mul64(plan->work_items, plan->q_blocks, &plan->work_items) &&
           count_of(p->group > 1 || sdpa_q_staged(p) ? plan->rows : 0, p->dim_k,
                    &q_count) &&
           count_of(plan->rows, (int64_t)plan->score_ld, &s_count) &&
           count_of(plan->rows, p->dim_v, &o_count) &&
           lay_out(plan, p, q_count, s_count, o_count, (size_t)plan->rows,
                   (size_t)plan->block_k);
}

static bool plan_decode(const sdpa_ctx *ctx, const sdpa_problem *p,
                        sdpa_plan *plan, bool blas_parallel)
{
    const int64_t per_line = SDPA_ALIGN / (int64_t)p->elem_size;
    const int64_t opt_k = ctx->options[SDPA_OPT_BLOCK_K];
    /* every query row of a GQA group, stacked: one gemm's M */
    if (!(mul64(p->group, p->len_q, &plan->rows) && plan->rows <= INT_MAX))
        return false;
    /* the own kernels make no BLAS calls: nothing to keep serial */
    const bool blas_sized = blas_parallel && !plan->fused;
    plan->chunk_len = min64(
        opt_k ? opt_k : decode_chunk(p, plan->rows, blas_sized), p->len_k);
    plan->block_k = plan->fused ? min64(plan->chunk_len, SDPA_FUSED_BLOCK_K)
                                : plan->chunk_len;
    plan->chunks = (p->len_k + plan->chunk_len - 1) / plan->chunk_len;
    plan->score_ld = (size_t)round_up(plan->block_k, per_line);
    /* Reserved so that fewer rows or keys never need more: the score
     * rows for the longest chunk the options allow, and the partial
     * results for the most chunks any as many rows or fewer would make
     * (decode_chunk shrinks as rows grow, but jumps up past the gemv
     * rows). */
    int64_t longest = min64(opt_k ? opt_k : DECODE_CHUNK, p->len_k);
    int64_t shortest =
        opt_k ? plan->chunk_len
              : min64(decode_chunk(p, plan->rows, blas_sized),
                      decode_chunk(p, min64(plan->rows, GEMV_MAX_ROWS),
                                   blas_sized));
    if (plan->fused)
        longest = min64(longest, SDPA_FUSED_BLOCK_K);
    else if (sdpa_kv_staged(p))
        plan->stage_keys = longest;
    shortest = min64(shortest, p->len_k);
    int64_t most_chunks = (p->len_k + shortest - 1) / shortest;
    int64_t reserved_items, partial_rows;
    size_t q_count = 0, s_count = 0, o_count = 0;
    bool ok = mul64(p->batch, p->heads_kv, &plan->merge_items) &&
              mul64(plan->merge_items, plan->chunks, &plan->work_items) &&
              mul64(plan->merge_items, most_chunks, &reserved_items) &&
              count_of(plan->rows, p->dim_k, &q_count) &&
              count_of(plan->rows, round_up(longest, per_line), &s_count) &&
              count_of(plan->rows, p->dim_v, &o_count) &&
              lay_out(plan, p, q_count, s_count, o_count, (size_t)plan->rows,
                      (size_t)longest) &&
              /* the partial results: rows · (Dv + 3) values per chunk */
              mul64(reserved_items, plan->rows, &partial_rows) &&
              sdpa_mul_size((size_t)partial_rows,
                            (size_t)(p->dim_v + 3) * p->elem_size,
                            &plan->shared_bytes);
    /* a paged cache's chunks: every head's before the next (pool.c) */
    plan->visit_rows = p->block_table ? plan->merge_items : 1;
    return ok;
}

/* How many workers run, and whose scratch is held. */
static void plan_workers(const sdpa_ctx *ctx, const sdpa_problem *p,
                         sdpa_plan *plan, bool blas_parallel)
{
    int64_t threads = sdpa_thread_budget(ctx);
    plan->threads = (int)min64(threads, plan->work_items);
    /* Scratch for every worker this many items could use, even when the
     * rule below runs only one: a smaller call with smaller gemms may run
     * them all. */
    /* a caller's parallel-for may hand an item to any of its workers */
    plan->reserve_workers =
        ctx->parallel_for ? ctx->parallel_workers : plan->threads;
    /* Workers whose gemms the BLAS threads would queue on its lock: let the
     * BLAS use the cores instead. Only the worker count changes, never the
     * blocks, so results stay bitwise the same. */
    double gemm_mnk, gemv_mn;
    largest_calls(p, plan, &gemm_mnk, &gemv_mn);
    if (blas_parallel && !plan->fused &&
        (gemm_mnk > SDPA_BLAS_SERIAL_MNK || gemv_mn >= SDPA_BLAS_SERIAL_MN)) {
        plan->threads = 1;
        plan->blas_owns_cores = true;
    }
}

int sdpa_make_plan(sdpa_ctx *ctx, const sdpa_problem *p, sdpa_plan *plan)
{
    int path = choose_path(ctx, p);
    if (path < 0)
        return SDPA_ERR_UNSUPPORTED;
    *plan = (sdpa_plan){0};
    /* SDPA_PATH_DECODE_BLAS is the decode path with the BLAS's products */
    plan->fused = path == SDPA_PATH_DECODE;
    plan->path = path == SDPA_PATH_DECODE_BLAS ? SDPA_PATH_DECODE : path;
    const bool blas_parallel = sdpa_blas_threads() > 1;
    bool ok;
    switch (plan->path) {
    case SDPA_PATH_MATERIALISED:
        ok = plan_materialised(ctx, p, plan);
        break;
    case SDPA_PATH_TILED:
        ok = plan_tiled(ctx, p, plan, blas_parallel);
        break;
    default:
        ok = plan_decode(ctx, p, plan, blas_parallel);
        break;
    }
    if (!ok)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward: the work of this call (N · heads · "
                         "blocks, or the stacked rows of a GQA group, %lld "
                         "query heads per KV head) overflows a size or the "
                         "BLAS int",
                         (long long)p->group);
    plan_workers(ctx, p, plan, blas_parallel);
    return SDPA_OK;
}
