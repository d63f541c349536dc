/*
 * Internal declarations shared by the library's layers:
 * context (options, scratch, errors) → validate → plan → paths → row kernels.
 */
#ifndef SDPA_INTERNAL_H
#define SDPA_INTERNAL_H

#include "half.h"
#include "sdpa.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The scratch alignment: one cache line, and a whole AVX-512 register. */
#define SDPA_ALIGN 64

/* Most worker threads a context may use (SDPA_OPT_NUM_THREADS). */
#define SDPA_MAX_THREADS 256

/* One worker's scratch buffer, grown on demand and kept between calls. */
typedef struct sdpa_buffer {
    void *ptr;
    size_t size;
} sdpa_buffer;

typedef struct sdpa_pool sdpa_pool;

struct sdpa_ctx {
    sdpa_allocator allocator;
    int64_t options[8]; /* indexed by SDPA_OPT_*; [0] unused */
    int kernel;         /* resolved SDPA_KERNEL_* (never AUTO) */
    sdpa_buffer scratch[SDPA_MAX_THREADS]; /* one per worker */
    sdpa_buffer shared;                    /* read by every worker */
    sdpa_buffer layer;  /* sdpa_mha_forward's projections (layer.c) */
    sdpa_buffer claims; /* the caller's parallel-for: one bit per item,
                           set when the item is taken (pool.c) */
    sdpa_pool *pool;
    /* the caller's parallel-for (sdpa_ctx_set_parallel_for), or NULL */
    sdpa_parallel_for_fn parallel_for;
    void *parallel_user;
    int parallel_workers;
    char message[256];
};

/* The workers a call may use: the caller's parallel-for's, else
 * SDPA_OPT_NUM_THREADS (SDPA_NUM_THREADS_ALL: the CPUs this process may
 * run on, at most SDPA_MAX_THREADS). */
int sdpa_thread_budget(const sdpa_ctx *ctx);

/* Records a failure on ctx (printf-style message: what and where) and returns
 * status, so that callers can write `return sdpa_fail(ctx, ...)`. */
int sdpa_fail(sdpa_ctx *ctx, int status, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* The frozen version-1 sizes of the structs that carry struct_size (never
 * sizeof: that grows with every appended field). */
#define SDPA_ARGS_SIZE_V1 ((size_t)624)
#define SDPA_ALLOCATOR_SIZE_V1 ((size_t)32)

/* Copies a caller's struct that starts with size_t struct_size into *local
 * (local_size = this library's sizeof), zero-filling the fields an older,
 * shorter caller lacks and reading none of its bytes past struct_size.
 * SDPA_ERR_STRUCT_SIZE below v1_size, SDPA_ERR_STRUCT_TAIL when a byte this
 * library does not know is not zero; `what` names the struct in the message
 * (ctx may be NULL). */
int sdpa_struct_import(sdpa_ctx *ctx, const char *what, const void *caller,
                       size_t v1_size, void *local, size_t local_size);

/* Allocation through the context's allocator. */
void *sdpa_alloc(const sdpa_ctx *ctx, size_t size);
void sdpa_free(const sdpa_ctx *ctx, void *ptr, size_t size);

/* Makes the scratch of workers [0, workers) at least worker_bytes large and
 * the shared buffer at least shared_bytes, allocating only what is missing
 * (a second call with the same shape allocates nothing). */
int sdpa_scratch_reserve(sdpa_ctx *ctx, int workers, size_t worker_bytes,
                         size_t shared_bytes);
/* Makes ctx->layer at least bytes large (allocating only when it is
 * smaller). */
int sdpa_layer_reserve(sdpa_ctx *ctx, size_t bytes);
/* Likewise ctx->claims. */
int sdpa_claims_reserve(sdpa_ctx *ctx, size_t bytes);

/* A validated tensor: base pointer and element strides, with broadcast
 * dimensions' strides set to 0. data is NULL for an absent optional tensor. */
typedef struct sdpa_view {
    char *data;
    int64_t stride[4];
} sdpa_view;

/* Address of element [n, h, t, 0] of a view of esize-byte elements. */
static inline char *sdpa_at(const sdpa_view *view, size_t esize, int64_t n,
                            int64_t h, int64_t t)
{
    int64_t offset =
        n * view->stride[0] + h * view->stride[1] + t * view->stride[2];
    return view->data + (size_t)offset * esize;
}

/* The row stride to hand BLAS as a leading dimension: a single-row view
 * has stride 0 after validation, and BLAS wants at least the row length. */
static inline int64_t sdpa_row_stride(const sdpa_view *view, int64_t row_len)
{
    return view->stride[2] > row_len ? view->stride[2] : row_len;
}

/* Everything a path needs, validated and resolved (defaults applied). */
typedef struct sdpa_problem {
    int dtype;
    size_t elem_size;
    int64_t batch, heads_q, heads_kv, group; /* group = Hq / Hkv */
    int64_t len_q, len_k, dim_k, dim_v;
    double scale;   /* resolved: never 0 */
    double softcap; /* 0 = off */
    int causal;
    bool mask_nonzero_allows;
    bool empty_rows_zero;
    const int64_t *kv_lens;
    /* 1.1: a window's extents (-1 = unbounded side, both -1 without a
     * window), ALiBi slopes and sinks (Hq each, or NULL), the logits
     * output's stage (0 without it) */
    int64_t window_left, window_right;
    const double *alibi_slopes, *sinks;
    int logits_stage;
    sdpa_view q, k, v, mask, bias, out, weights, lse, logits;
    sdpa_view max_weight, entropy; /* 1.1 per-row diagnostics */
    bool diagnostics;              /* either of them is asked for */
    /* 1.1 storage types (SDPA_FLOAT*) of q, k and v, the bias, and out;
     * dtype above is the compute type, which every other output has */
    int q_type, kv_type, bias_type, out_type;
    /* 1.1 paged K/V: the block table (NULL: k and v are [N|1, Hkv, Tk,
     * D]), the entries from one row to the next, keys per page */
    const int32_t *block_table;
    int64_t table_stride, page_len;
} sdpa_problem;

/* Element i of an array of storage type `type` (SDPA_FLOAT*), as a double
 * (exact for every type). */
static inline double sdpa_value_at(const void *base, int type, int64_t i)
{
    switch (type) {
    case SDPA_FLOAT32:
        return ((const float *)base)[i];
    case SDPA_FLOAT64:
        return ((const double *)base)[i];
    case SDPA_FLOAT16:
        return sdpa_f16_to_f32(((const uint16_t *)base)[i]);
    default:
        return sdpa_bf16_to_f32(((const uint16_t *)base)[i]);
    }
}

/* Are q / k and v / out stored in another type than the compute type, or
 * k and v in pages? Then the BLAS cannot read (or write) them where they
 * are: the paths widen or gather them into scratch, a block at a time. */
static inline bool sdpa_q_staged(const sdpa_problem *p)
{
    return p->q_type != p->dtype;
}
static inline bool sdpa_kv_staged(const sdpa_problem *p)
{
    return p->kv_type != p->dtype || p->block_table != NULL;
}
static inline bool sdpa_out_staged(const sdpa_problem *p)
{
    return p->out_type != p->dtype;
}

/* Row j (a key) of batch item b, KV head h of the K or V view, in its
 * storage type: through the block table when K and V are paged. */
static inline const char *sdpa_kv_row(const sdpa_problem *p,
                                      const sdpa_view *view, int64_t b,
                                      int64_t h, int64_t j)
{
    size_t es = sdpa_dtype_size(p->kv_type);
    if (!p->block_table)
        return sdpa_at(view, es, b, h, j);
    int64_t page = p->block_table[b * p->table_stride + j / p->page_len];
    return sdpa_at(view, es, page, h, j % p->page_len);
}

/* How many of the n keys from key j on are consecutive rows of one page
 * (all n without paging): a run read with one row stride. */
static inline int64_t sdpa_kv_span(const sdpa_problem *p, int64_t j, int64_t n)
{
    if (!p->block_table)
        return n;
    int64_t left = p->page_len - j % p->page_len;
    return left < n ? left : n;
}

/* Could an output view write one element twice? (validate.c's rule,
 * conservative: sorted by stride, each dimension must step past all that
 * the inner ones cover; strides non-negative, broadcast ones already 0.) */
bool sdpa_overlaps_itself(const int64_t shape[4], const int64_t stride[4]);

/* Checks every argument and every size; writes nothing but *problem and, on
 * failure, ctx's message. */
int sdpa_validate(sdpa_ctx *ctx, const sdpa_forward_args *args,
                  sdpa_problem *problem);

/* Row `row`'s diagonal d_i (include/sdpa.h): the key that the causal mask,
 * the window and ALiBi measure distances from. Top-left: i; otherwise
 * bottom-right, i + (L_b - Tq). */
static inline int64_t sdpa_diagonal(const sdpa_problem *p, int64_t b,
                                    int64_t row)
{
    int64_t valid = p->kv_lens ? p->kv_lens[b] : p->len_k;
    return p->causal == SDPA_CAUSAL_TOP_LEFT ? row : row + valid - p->len_q;
}

/* Keys row `row` of batch item `b` may see before the mask and the bias
 * are applied: [sdpa_key_start, sdpa_key_limit) — kv_lens, causality and
 * the window; none when limit <= start. Both never decrease with the row.
 * (Window extents are at most Tq + Tk after validation: no overflow.) */
static inline int64_t sdpa_key_limit(const sdpa_problem *p, int64_t b,
                                     int64_t row)
{
    int64_t valid = p->kv_lens ? p->kv_lens[b] : p->len_k;
    int64_t limit = valid, diagonal = sdpa_diagonal(p, b, row);
    if (p->causal != SDPA_CAUSAL_NONE)
        limit = diagonal + 1;
    if (p->window_right >= 0 && diagonal + p->window_right + 1 < limit)
        limit = diagonal + p->window_right + 1;
    return limit < valid ? limit : valid;
}

static inline int64_t sdpa_key_start(const sdpa_problem *p, int64_t b,
                                     int64_t row)
{
    if (p->window_left < 0)
        return 0;
    int64_t valid = p->kv_lens ? p->kv_lens[b] : p->len_k;
    int64_t start = sdpa_diagonal(p, b, row) - p->window_left;
    start = start < valid ? start : valid; /* past every key: none left */
    return start > 0 ? start : 0;
}

/* Row i's mask over keys [j0, j0 + n) as n contiguous bytes: the caller's
 * own when the mask's key stride is 1, else gathered into buf (n bytes; a
 * key-broadcast mask has stride 0). */
static inline const uint8_t *sdpa_mask_keys(const sdpa_problem *p, int64_t b,
                                            int64_t h, int64_t i, int64_t j0,
                                            int64_t n, uint8_t *buf)
{
    const uint8_t *row = (const uint8_t *)sdpa_at(&p->mask, 1, b, h, i);
    const int64_t step = p->mask.stride[3];
    if (step == 1)
        return row + j0;
    for (int64_t j = 0; j < n; j++)
        buf[j] = row[(j0 + j) * step];
    return buf;
}

/* The same for the bias, in the compute type: the caller's row when its
 * key stride is 1 and it is stored in the compute type, else gathered and
 * widened into buf (n values). */
static inline const void *sdpa_bias_keys(const sdpa_problem *p, int64_t b,
                                         int64_t h, int64_t i, int64_t j0,
                                         int64_t n, void *buf)
{
    const size_t size = sdpa_dtype_size(p->bias_type);
    const char *row = sdpa_at(&p->bias, size, b, h, i);
    const int64_t step = p->bias.stride[3];
    if (step == 1 && p->bias_type == p->dtype)
        return row + (size_t)j0 * size;
    if (p->dtype == SDPA_FLOAT32)
        for (int64_t j = 0; j < n; j++)
            ((float *)buf)[j] =
                (float)sdpa_value_at(row, p->bias_type, (j0 + j) * step);
    else
        for (int64_t j = 0; j < n; j++)
            ((double *)buf)[j] =
                sdpa_value_at(row, p->bias_type, (j0 + j) * step);
    return buf;
}

/* A set of query rows that read the same KV head, and a range of keys:
 * a work item's slice. Stacked row r is query row row_first + r / heads of
 * query head head_first + r % heads: rows first, so that the rows' causal
 * key limits never decrease down the stack. */
typedef struct sdpa_row_block {
    int64_t batch, head_kv;
    int64_t head_first, heads; /* query heads head_first .. + heads - 1 */
    int64_t row_first, rows;   /* query rows row_first .. + rows - 1 */
    int64_t key_begin, key_end;
    /* K rows [next_key, next_end) of (next_batch, next_head_kv), valid
     * keys its worker likely reads next (the streaming decode prefetches
     * them in its last block; none when next_end <= next_key) */
    int64_t next_batch, next_head_kv, next_key, next_end;
} sdpa_row_block;

/* live[j - kb] = 1 for each key j of [kb, kb + bk) that some row of the
 * block may see (below its key limit, not forbidden by the mask, no −inf
 * bias), else 0; returns how many are live (live_keys.c). */
int64_t sdpa_live_keys(const sdpa_problem *p, const sdpa_row_block *blk,
                       int64_t kb, int64_t bk, uint8_t *live);
/* The runs of live keys of a block of n keys (live_count of them, as
 * sdpa_live_keys counts; when live_count >= n, live is not read and the
 * block is one run):
 *   for (j0 = 0, j1 = 0; sdpa_live_run(live, count, n, &j0, &j1); j0 = j1)
 * visits each run [j0, j1) in order. */
bool sdpa_live_run(const uint8_t *live, int64_t live_count, int64_t n,
                   int64_t *j0, int64_t *j1);
/* The step beneath it: the first run of live keys at or after `from`;
 * returns its start (bk when there is none), *run_end past its end. */
int64_t sdpa_next_run(const uint8_t *live, int64_t from, int64_t bk,
                      int64_t *run_end);

/* The plan of one call: which path, how the work is split, what scratch
 * each worker needs. */
typedef struct sdpa_plan {
    int path;            /* resolved SDPA_PATH_* */
    int threads;         /* workers that will run */
    int reserve_workers; /* workers whose scratch (and threads) are held:
                            >= threads, so that smaller calls, which may
                            run more of them, allocate nothing */
    int64_t block_q;     /* query rows of one head per work item */
    int64_t block_k;     /* keys per block (tiled and decode paths) */
    int64_t q_blocks;    /* ceil(Tq / block_q) */
    int64_t chunk_len;   /* decode: keys per chunk (never depends on threads) */
    int64_t chunks;      /* decode: ceil(Tk / chunk_len) */
    int64_t rows;        /* most stacked query rows one item handles */
    int64_t work_items;  /* items of the parallel phase */
    int64_t merge_items; /* decode: items of the merge phase (N · Hkv) */
    int64_t visit_rows;  /* decode: the chunk items' visiting order
                            (sdpa_run_items): merge_items for a paged
                            cache (a chunk of every head, then the next
                            chunk), else 1 (a head's chunks in turn) */
    size_t score_ld;     /* leading dimension of the score scratch */
    /* byte offsets of the regions of one worker's scratch (tiled/decode) */
    size_t off_q, off_s, off_o, off_m, off_l, off_a;
    size_t off_mask, off_bias; /* a row's gathered mask / bias keys */
    size_t off_live;           /* which keys of a block some row may see */
    size_t off_t, off_e;       /* diagnostics: a row's final logits (t)
                                  and each row's Σ e·(s − m) (e) */
    size_t off_kt, off_vt;     /* K and V rows widened or gathered for the
                                  BLAS (sdpa_kv_staged), a block at a time */
    int64_t stage_keys;        /* keys of those regions */
    bool fused;                /* decode: the library's own streaming
                                  kernels (rows.h dot_rows, acc_rows) read
                                  K and V, instead of BLAS gemv/gemm */
    size_t worker_bytes;       /* scratch per worker, as reserved: at least what
                                  the plan uses, and never more for a call that is
                                  no larger (docs/CONTEXTS.md) */
    size_t shared_bytes;       /* decode: partial results of every chunk, as
                                  reserved likewise */
    void *shared;              /* set at execution: the shared buffer */
} sdpa_plan;

int sdpa_make_plan(sdpa_ctx *ctx, const sdpa_problem *problem, sdpa_plan *plan);

/* The end of the piece of keys [a, end) the BLAS takes at once: all of
 * them, or plan->stage_keys when K and V are staged into scratch. */
static inline int64_t sdpa_stage_end(const sdpa_plan *plan, int64_t a,
                                     int64_t end)
{
    return plan->stage_keys && end - a > plan->stage_keys ? a + plan->stage_keys
                                                          : end;
}

/* Region `name` (q, s, o, m, l, a, mask, bias, live, t, e, kt, vt) of a
 * worker's scratch, as a T*. */
#define SDPA_REGION(T, plan, scratch, name)                                    \
    ((T *)(void *)((char *)(scratch) + (plan)->off_##name))

/* Where a non-finite logit was met: batch item, query head, query row. */
typedef struct sdpa_where {
    int64_t batch, head, row;
} sdpa_where;

/* The paths' work items. Each computes item `item` on one worker's scratch
 * and returns SDPA_OK or SDPA_ERR_NONFINITE (with *where filled in). */
typedef int (*sdpa_path_fn)(const sdpa_problem *problem, const sdpa_plan *plan,
                            int kernel, void *scratch, int64_t item,
                            sdpa_where *where);

int sdpa_materialised_item(const sdpa_problem *problem, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where);
int sdpa_tiled_item(const sdpa_problem *problem, const sdpa_plan *plan,
                    int kernel, void *scratch, int64_t item, sdpa_where *where);
int sdpa_decode_chunk_item(const sdpa_problem *problem, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where);
int sdpa_decode_merge_item(const sdpa_problem *problem, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where);

/* Runs items [0, items) — plan->work_items, or the decode path's
 * plan->merge_items — on plan->threads workers (the caller's
 * thread is worker 0). Results never depend on the thread count: every item
 * is computed the same way by whichever worker takes it; of several
 * failing items the lowest index is reported.
 * visit_rows sets only the order in which items are started: the items as
 * a grid of visit_rows rows (item = row · columns + column), taken column
 * by column; 1 (or less): in index order. items must fill the grid. */
int sdpa_run_items(sdpa_ctx *ctx, const sdpa_problem *problem,
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
 * worker 0) before the computation, so that running them later allocates
 * nothing and cannot fail half way. */
int sdpa_pool_reserve(sdpa_ctx *ctx, int workers);
void sdpa_pool_destroy(sdpa_ctx *ctx);

/* The CBLAS's threads (blas_threads.c). sdpa_blas_own_threads: threads it
 * may use inside one gemm, as it reports them (1 if unknown).
 * sdpa_blas_local_control: whether a thread can limit its own gemms
 * without changing other threads' (MKL, BLIS 1.0+ with thread-local
 * storage). sdpa_blas_threads: the threads a plan must assume for the
 * gemms of its items: 1 with local control (the threads that run a call's
 * items run theirs serially, between sdpa_blas_serial_begin and _end,
 * which restores the thread's own setting), else the BLAS's own. Also the
 * largest M·N·K that OpenBLAS runs on the calling thread alone. */
typedef struct sdpa_blas_serial {
    bool set;    /* a setting was changed, to restore */
    int threads; /* the thread's previous setting */
    int ways[5]; /* and BLIS's per-loop ways */
} sdpa_blas_serial;
int sdpa_blas_own_threads(void);
bool sdpa_blas_local_control(void);
int sdpa_blas_threads(void);
sdpa_blas_serial sdpa_blas_serial_begin(void);
void sdpa_blas_serial_end(const sdpa_blas_serial *was);
#define SDPA_BLAS_SERIAL_MNK 262144 /* gemm: 65536 · 4 */
#define SDPA_BLAS_SERIAL_MN 9216    /* gemv: M·N below 2304 · 4 */

/* CPU detection: can this CPU (and OS) run the row kernels of kernel
 * (an SDPA_KERNEL_* other than AUTO)? And the widest set it can run, what
 * SDPA_KERNEL_AUTO resolves to. */
bool sdpa_kernel_supported(int kernel);
int sdpa_kernel_best(void);
/* Lower-case name of an SDPA_KERNEL_* value ("auto", "portable", "avx2",
 * "avx512"), as the SDPA_KERNEL environment variable spells it. */
const char *sdpa_kernel_name(int kernel);
/* The kernel a new context starts with: the SDPA_KERNEL environment
 * variable's (any case; unset, empty or "auto": the widest the CPU runs).
 * SDPA_ERR_BAD_OPTION_VALUE for a name it does not know,
 * SDPA_ERR_UNSUPPORTED for a kernel this CPU lacks. */
int sdpa_kernel_from_environment(int *kernel);

/* A sinusoidal / RoPE base the positions accept (positions.c): 0 (the
 * default 10000), or finite and at least 1. */
bool sdpa_position_base_ok(double base);

/* Checked size arithmetic: false on overflow. */
static inline bool sdpa_mul_size(size_t a, size_t b, size_t *r)
{
    if (a != 0 && b > SIZE_MAX / a)
        return false;
    *r = a * b;
    return true;
}
static inline bool sdpa_add_size(size_t a, size_t b, size_t *r)
{
    if (b > SIZE_MAX - a)
        return false;
    *r = a + b;
    return true;
}

#endif /* SDPA_INTERNAL_H */
