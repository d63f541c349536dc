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
 * is one (batch item, KV head): it owns the dq rows of the group's heads
 * and the dk, dv rows of its KV head, and sums in a fixed order, so the
 * results are bitwise the same for every thread count. A call with fewer
 * such pairs than workers (shape D: one) runs split instead, in two
 * passes that each spread over the workers: dK and dV per key block, then
 * dQ per query tile, seven gemms per tile pair instead of five. Each tile
 * is computed as in the single pass, in the same order for every output,
 * so the split gives the same bits; with nothing else changing, whether
 * to split may then depend on the worker count. Outputs a broadcast
 * shares are owned by coarser items: with k or v broadcast over N an item
 * spans every batch item (dk, dv sum over them, the batch loop inside the
 * key loop), and likewise with dbias broadcast over N; with dbias
 * broadcast over the heads an item spans every KV head. dsinks, a sum over
 * every row of a head, is a separate pass on the caller's thread (it needs
 * only lse and D).
 *
 * Causal masks, windows and kv_lens skip the tiles no row sees; with a mask
 * or bias the products run over the runs of live keys (live_keys.c), so the
 * K and V rows no row may see are never read, as in the forward.
 */
#include "core/context.h"
#include "core/struct_import.h"
#include "core/checked.h"
#include "core/problem.h"
#include "forward/validate.h"
#include "forward/key_range.h"
#include "forward/plan.h"
#include "forward/row_block.h"
#include "runtime/pool.h"
#include "runtime/blas_threads.h"
#include "kernels/rows.h"
#include "kernels/vexp.h"

#include <cblas.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* The frozen version-1 size of sdpa_backward_args (1.1's sizeof on LP64). */
#define SDPA_BACKWARD_ARGS_SIZE_V1 ((size_t)952)
_Static_assert(sizeof(sdpa_backward_args) >= SDPA_BACKWARD_ARGS_SIZE_V1,
               "sdpa_backward_args only grows");

/* Tiles: query rows of one head, keys of one block (SDPA_OPT_BLOCK_Q /
 * SDPA_OPT_BLOCK_K override them). Measured at one thread (float32, D = 64,
 * backward / forward time, medians on a loaded 2-core EPYC, so ±10 %):
 * 128×256 gave 2.65 (shape A) and 2.51 (shape D), 2.34 and 2.11 causal;
 * 128×128 2.81 / 2.82, 2.31 / 2.62 causal; 64×256 2.81 / 2.38, 2.41 /
 * 2.97 causal. */
#define BWD_BLOCK_Q 128
#define BWD_BLOCK_K 256

/* The validated call: the forward's problem (first, so that a work item,
 * handed &problem->p, finds the rest), the gradient views, and the split
 * of the work. */
typedef struct sdpa_bwd_problem {
    sdpa_problem p;
    sdpa_view dout, dq, dk, dv, dbias;
    int64_t dbias_shape[4];
    double *dsinks;
    bool k_bcast, v_bcast; /* k / v broadcast over N: dk / dv sum over it */
    int64_t item_batches;  /* batch items per work item: 1 or N */
    int64_t item_heads;    /* KV heads per work item: 1 or Hkv */
    int64_t block_q, block_k, score_ld;
    int64_t key_blocks,
        query_tiles; /* ceil(Tk / block_k), ceil(Tq / block_q) */
    /* byte offsets of one worker's scratch regions */
    size_t off_s, off_dp, off_dk, off_dv, off_d, off_t, off_mask, off_bias,
        off_live, off_range;
    size_t worker_bytes;
} sdpa_bwd_problem;

/* The gradients a tile adds to (backward_impl.h, backward_tile). */
enum { BWD_KV = 1u, BWD_Q = 2u };

/* The static backward_item_f32/_f64 and its helpers, by HACKING.md's
 * naming rule (NAME(x) is x_f32, x_f64). */
#define SDPA_TEMPLATE "backward/backward_impl.h"
#include "core/instantiate.h"

static int backward_item(const sdpa_problem *p, const sdpa_plan *plan,
                         int kernel, void *scratch, int64_t item,
                         sdpa_where *where)
{
    return SDPA_BY_DTYPE(p, backward_item, p, plan, kernel, scratch, item,
                         where);
}

static int backward_kv_item(const sdpa_problem *p, const sdpa_plan *plan,
                            int kernel, void *scratch, int64_t item,
                            sdpa_where *where)
{
    return SDPA_BY_DTYPE(p, backward_kv_item, p, plan, kernel, scratch, item,
                         where);
}

static int backward_q_item(const sdpa_problem *p, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where)
{
    return SDPA_BY_DTYPE(p, backward_q_item, p, plan, kernel, scratch, item,
                         where);
}

/* sdpa_validate's messages name sdpa_forward: this call is sdpa_backward. */
static int rename_failure(sdpa_ctx *ctx, int status)
{
    static const char from[] = "sdpa_forward:", to[] = "sdpa_backward:";
    char *msg = ctx->message;
    size_t cap = sizeof ctx->message;
    if (strncmp(msg, from, sizeof from - 1) == 0) {
        size_t len = strlen(msg);
        size_t grow = sizeof to - sizeof from;
        if (len + grow >= cap)
            len = cap - 1 - grow;
        memmove(msg + sizeof to - 1, msg + sizeof from - 1,
                len - (sizeof from - 1));
        memcpy(msg, to, sizeof to - 1);
        msg[len + grow] = '\0';
    }
    return status;
}

typedef struct byte_range {
    const char *name;
    bool is_output;
    uintptr_t begin, end;
} byte_range;

/* The bytes a view spans: first to last element (strides >= 0). */
static byte_range span_of(const char *name, bool is_output, const void *data,
                          const int64_t shape[4], const int64_t stride[4],
                          size_t esize)
{
    size_t last = 0;
    for (int d = 0; d < 4; d++)
        last += (size_t)(shape[d] - 1) * (size_t)stride[d];
    return (byte_range){name, is_output, (uintptr_t)data,
                        (uintptr_t)data + (last + 1) * esize};
}

/* Checks one tensor of the backward call that sdpa_validate does not know
 * (dout, dq, dk, dv, dbias): present, the expected shape, non-negative
 * strides (innermost 1 unless any_inner; a row stride BLAS takes when
 * blas_rows), an output that writes no element twice, no overflow. Fills
 * *view (extent-1 strides zeroed) and *range. */
static int check_tensor(sdpa_ctx *ctx, const char *name, const sdpa_tensor *t,
                        const int64_t expect[4], size_t esize, bool is_output,
                        bool any_inner, bool blas_rows, sdpa_view *view,
                        byte_range *range)
{
    static const char *const dims[4] = {"N", "H", "T", "D"};
    if (!t->data)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_backward: %s.data is NULL", name);
    for (int d = 0; d < 4; d++)
        if (t->shape[d] <= 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                             "sdpa_backward: %s.shape[%d] (%s) is %lld, must "
                             "be positive",
                             name, d, dims[d], (long long)t->shape[d]);
    for (int d = 0; d < 4; d++)
        if (t->shape[d] != expect[d])
            return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                             "sdpa_backward: %s.shape[%d] (%s) is %lld, must "
                             "be %lld",
                             name, d, dims[d], (long long)t->shape[d],
                             (long long)expect[d]);
    int64_t stride[4];
    for (int d = 0; d < 4; d++) {
        if (t->stride[d] < 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                             "sdpa_backward: %s.stride[%d] is %lld, strides "
                             "must not be negative",
                             name, d, (long long)t->stride[d]);
        stride[d] = t->shape[d] == 1 ? 0 : t->stride[d];
    }
    if (!any_inner && t->shape[3] > 1 && t->stride[3] != 1)
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "sdpa_backward: %s.stride[3] is %lld, the innermost "
                         "stride must be 1",
                         name, (long long)t->stride[3]);
    if (blas_rows && t->shape[2] > 1 && stride[2] < t->shape[3])
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "sdpa_backward: %s.stride[2] is %lld, below the row "
                         "length %lld",
                         name, (long long)stride[2], (long long)t->shape[3]);
    if (is_output && sdpa_overlaps_itself(t->shape, stride))
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "sdpa_backward: output %s has strides {%lld, %lld, "
                         "%lld, %lld}: sorted, each must step past all the "
                         "smaller ones cover",
                         name, (long long)t->stride[0], (long long)t->stride[1],
                         (long long)t->stride[2], (long long)t->stride[3]);
    size_t span = 1, bytes;
    for (int d = 0; d < 4; d++) {
        size_t step;
        if (!sdpa_mul_size((size_t)(t->shape[d] - 1), (size_t)stride[d],
                           &step) ||
            !sdpa_add_size(span, step, &span))
            span = SIZE_MAX;
    }
    if (span == SIZE_MAX || !sdpa_mul_size(span, esize, &bytes) ||
        (uintptr_t)t->data > UINTPTR_MAX - bytes ||
        (blas_rows && stride[2] > INT_MAX))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_backward: the extent or row stride of %s "
                         "overflows",
                         name);
    view->data = t->data;
    memcpy(view->stride, stride, sizeof stride);
    *range = (byte_range){name, is_output, (uintptr_t)t->data,
                          (uintptr_t)t->data + bytes};
    return SDPA_OK;
}

/* Validates everything into *bp: the forward's rules through sdpa_validate
 * (on a forward call made of the same fields), then the backward's own
 * tensors and the overlap of its outputs with every input. */
static int validate(sdpa_ctx *ctx, const sdpa_backward_args *caller,
                    sdpa_bwd_problem *bp)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    ctx->message[0] = '\0';
    if (!caller)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_backward: args is NULL");
    sdpa_backward_args a;
    int status = sdpa_struct_import(ctx, "sdpa_backward: args", caller,
                                    SDPA_BACKWARD_ARGS_SIZE_V1, &a, sizeof a);
    if (status != SDPA_OK)
        return status;
    if (a.dtype != SDPA_FLOAT32 && a.dtype != SDPA_FLOAT64)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "sdpa_backward: dtype %d is neither SDPA_FLOAT32 nor "
                         "SDPA_FLOAT64 (the half types are storage types of "
                         "sdpa_forward only)",
                         a.dtype);
    if (!a.lse.data)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_backward: lse.data is NULL (the forward's lse "
                         "is required)");
    if (a.dbias.data && !a.bias.data)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_backward: dbias is set but bias.data is NULL");
    if (a.dsinks && !a.sinks)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_backward: dsinks is set but sinks is NULL");

    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.dtype = a.dtype;
    f.causal = a.causal;
    f.flags = a.flags;
    f.scale = a.scale;
    f.softcap = a.softcap;
    f.kv_lens = a.kv_lens;
    f.q = a.q;
    f.k = a.k;
    f.v = a.v;
    f.mask = a.mask;
    f.bias = a.bias;
    f.out = a.out;
    f.lse = a.lse;
    f.window_left = a.window_left;
    f.window_right = a.window_right;
    f.alibi_slopes = a.alibi_slopes;
    f.sinks = a.sinks;
    memset(bp, 0, sizeof *bp);
    sdpa_problem *p = &bp->p;
    status = sdpa_validate(ctx, &f, p);
    if (status != SDPA_OK)
        return rename_failure(ctx, status);

    const size_t es = p->elem_size;
    const int64_t n = p->batch, hq = p->heads_q, hkv = p->heads_kv;
    const int64_t tq = p->len_q, tk = p->len_k, dk = p->dim_k, dv = p->dim_v;
    bp->k_bcast = n > 1 && p->k.stride[0] == 0;
    bp->v_bcast = n > 1 && p->v.stride[0] == 0;
    const int64_t e_dout[4] = {n, hq, tq, dv}, e_dq[4] = {n, hq, tq, dk};
    const int64_t e_dk[4] = {bp->k_bcast ? 1 : n, hkv, tk, dk};
    const int64_t e_dv[4] = {bp->v_bcast ? 1 : n, hkv, tk, dv};
    const int64_t full[4] = {n, hq, tq, tk};
    for (int d = 0; d < 4; d++)
        bp->dbias_shape[d] =
            p->bias.data && p->bias.stride[d] != 0 ? full[d] : 1;

    enum { RANGES = 17 };
    byte_range r[RANGES];
    int nr = 0;
    status = check_tensor(ctx, "dout", &a.dout, e_dout, es, false, false, true,
                          &bp->dout, &r[nr++]);
    if (status == SDPA_OK)
        status = check_tensor(ctx, "dq", &a.dq, e_dq, es, true, false, true,
                              &bp->dq, &r[nr++]);
    if (status == SDPA_OK)
        status = check_tensor(ctx, "dk", &a.dk, e_dk, es, true, false, false,
                              &bp->dk, &r[nr++]);
    if (status == SDPA_OK)
        status = check_tensor(ctx, "dv", &a.dv, e_dv, es, true, false, false,
                              &bp->dv, &r[nr++]);
    if (status == SDPA_OK && a.dbias.data)
        status = check_tensor(ctx, "dbias", &a.dbias, bp->dbias_shape, es, true,
                              true, false, &bp->dbias, &r[nr++]);
    if (status != SDPA_OK)
        return status;

    /* The inputs' ranges, from the views sdpa_validate made. */
    r[nr++] = span_of("q", false, p->q.data, a.q.shape, p->q.stride, es);
    r[nr++] = span_of("k", false, p->k.data, a.k.shape, p->k.stride, es);
    r[nr++] = span_of("v", false, p->v.data, a.v.shape, p->v.stride, es);
    r[nr++] =
        span_of("out", false, p->out.data, a.out.shape, p->out.stride, es);
    r[nr++] =
        span_of("lse", false, p->lse.data, a.lse.shape, p->lse.stride, es);
    if (p->mask.data)
        r[nr++] = span_of("mask", false, p->mask.data, a.mask.shape,
                          p->mask.stride, 1);
    if (p->bias.data)
        r[nr++] = span_of("bias", false, p->bias.data, a.bias.shape,
                          p->bias.stride, es);
    if (a.kv_lens)
        r[nr++] = (byte_range){"kv_lens", false, (uintptr_t)a.kv_lens,
                               (uintptr_t)(a.kv_lens + n)};
    if (a.alibi_slopes)
        r[nr++] = (byte_range){"alibi_slopes", false, (uintptr_t)a.alibi_slopes,
                               (uintptr_t)(a.alibi_slopes + hq)};
    if (a.sinks)
        r[nr++] = (byte_range){"sinks", false, (uintptr_t)a.sinks,
                               (uintptr_t)(a.sinks + hq)};
    if (a.dsinks)
        r[nr++] = (byte_range){"dsinks", true, (uintptr_t)a.dsinks,
                               (uintptr_t)(a.dsinks + hq)};
    for (int x = 0; x < nr; x++)
        for (int y = x + 1; y < nr; y++)
            if ((r[x].is_output || r[y].is_output) && r[x].begin < r[y].end &&
                r[y].begin < r[x].end)
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 "sdpa_backward: output %s overlaps %s %s (the "
                                 "address ranges from first to last element "
                                 "must be disjoint)",
                                 r[x].is_output ? r[x].name : r[y].name,
                                 r[x].is_output && r[y].is_output ? "output"
                                                                  : "input",
                                 r[x].is_output ? r[y].name : r[x].name);
    bp->dsinks = a.dsinks;
    return SDPA_OK;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* Blocks, the work split and one worker's scratch layout; false on
 * overflow. */
static bool plan_backward(const sdpa_ctx *ctx, sdpa_bwd_problem *bp)
{
    const sdpa_problem *p = &bp->p;
    int64_t bq = ctx->options[SDPA_OPT_BLOCK_Q];
    int64_t bk = ctx->options[SDPA_OPT_BLOCK_K];
    bq = bq ? bq : BWD_BLOCK_Q;
    bk = bk ? bk : BWD_BLOCK_K;
    bp->block_q = min64(bq, p->len_q);
    bp->block_k = min64(bk, p->len_k);
    bp->key_blocks = (p->len_k + bp->block_k - 1) / bp->block_k;
    bp->query_tiles = (p->len_q + bp->block_q - 1) / bp->block_q;
    const int64_t per_line = SDPA_ALIGN / (int64_t)p->elem_size;
    bp->score_ld = (bp->block_k + per_line - 1) / per_line * per_line;
    if (bp->score_ld > INT_MAX)
        return false;

    /* Who owns what a broadcast shares (see the top of the file). */
    bool dbias_n = bp->p.bias.data && bp->dbias.data &&
                   bp->dbias_shape[0] == 1 && p->batch > 1;
    bool dbias_h = bp->p.bias.data && bp->dbias.data &&
                   bp->dbias_shape[1] == 1 && p->heads_q > 1;
    bp->item_batches = bp->k_bcast || bp->v_bcast || dbias_n ? p->batch : 1;
    bp->item_heads = dbias_h ? p->heads_kv : 1;

    enum { REGIONS = 10 };
    const size_t es = p->elem_size;
    const size_t q = (size_t)bp->block_q, k = (size_t)bp->block_k;
    const size_t ld = (size_t)bp->score_ld;
    const size_t dk = (size_t)p->dim_k, dv = (size_t)p->dim_v;
    size_t s_count, dk_count, dv_count;
    if (!sdpa_mul_size(q, ld, &s_count) || !sdpa_mul_size(k, dk, &dk_count) ||
        !sdpa_mul_size(k, dv, &dv_count))
        return false;
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
        2 * q};
    const size_t sizes[REGIONS] = {es, es, es, es, es,
                                   es, 1,  es, 1,  sizeof(int64_t)};
    size_t *offsets[REGIONS] = {&bp->off_s,    &bp->off_dp,   &bp->off_dk,
                                &bp->off_dv,   &bp->off_d,    &bp->off_t,
                                &bp->off_mask, &bp->off_bias, &bp->off_live,
                                &bp->off_range};
    size_t at = 0;
    for (int i = 0; i < REGIONS; i++) {
        size_t bytes;
        *offsets[i] = at;
        if (!sdpa_mul_size(counts[i], sizes[i], &bytes) ||
            !sdpa_add_size(at, bytes, &at) ||
            !sdpa_add_size(at, SDPA_ALIGN - 1, &at))
            return false;
        at = at / SDPA_ALIGN * SDPA_ALIGN;
    }
    bp->worker_bytes = at;
    return true;
}

/* dbias is a sum: zeroed first (its logical elements only), then the work
 * items add into the elements they own. */
static void zero_dbias(const sdpa_bwd_problem *bp)
{
    const int64_t *e = bp->dbias_shape;
    const sdpa_view *v = &bp->dbias;
    const size_t es = bp->p.elem_size;
    for (int64_t b = 0; b < e[0]; b++)
        for (int64_t h = 0; h < e[1]; h++)
            for (int64_t i = 0; i < e[2]; i++) {
                char *row = sdpa_at(v, es, b, h, i);
                for (int64_t j = 0; j < e[3]; j++)
                    memset(row + (size_t)(j * v->stride[3]) * es, 0, es);
            }
}

/* dsinks_h = −Σ_{b,i} exp(σ_h − lse_i)·D_i: the sink is one more key, with
 * value 0, so its dS is P_sink·(0 − D_i) (see include/sdpa.h). In double,
 * in a fixed order, on the caller's thread. */
static void sink_gradients(const sdpa_bwd_problem *bp)
{
    const sdpa_problem *p = &bp->p;
    const size_t es = p->elem_size;
    const bool f32 = p->dtype == SDPA_FLOAT32;
    for (int64_t h = 0; h < p->heads_q; h++) {
        double sum = 0;
        for (int64_t b = 0; b < p->batch; b++)
            for (int64_t i = 0; i < p->len_q; i++) {
                const char *o = sdpa_at(&p->out, es, b, h, i);
                const char *g = sdpa_at(&bp->dout, es, b, h, i);
                const char *l = sdpa_at(&p->lse, es, b, h, i);
                double lse = f32 ? (double)*(const float *)(const void *)l
                                 : *(const double *)(const void *)l;
                double d = 0;
                for (int64_t c = 0; c < p->dim_v; c++)
                    d += f32 ? (double)((const float *)(const void *)o)[c] *
                                   (double)((const float *)(const void *)g)[c]
                             : ((const double *)(const void *)o)[c] *
                                   ((const double *)(const void *)g)[c];
                if (lse > -INFINITY)
                    sum += exp(p->sinks[h] - lse) * d;
            }
        bp->dsinks[h] = -sum;
    }
}

int sdpa_backward(sdpa_ctx *ctx, const sdpa_backward_args *args)
{
    sdpa_bwd_problem bp;
    int status = validate(ctx, args, &bp);
    if (status != SDPA_OK)
        return status;
    if (!plan_backward(ctx, &bp))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_backward: the scratch of this call's blocks "
                         "overflows a size");
    const sdpa_problem *p = &bp.p;
    sdpa_plan plan = {0};
    plan.work_items = p->batch / bp.item_batches *
                      (p->heads_kv / bp.item_heads); /* <= N · Hkv */
    int64_t budget = sdpa_thread_budget(ctx);
    /* Workers whose gemms the BLAS threads would queue on its lock: let
     * the BLAS use the cores (only the worker count changes). */
    double dmax = (double)(p->dim_k > p->dim_v ? p->dim_k : p->dim_v);
    if (sdpa_blas_threads() > 1 &&
        (double)bp.block_q * (double)bp.block_k * dmax > SDPA_BLAS_SERIAL_MNK)
        budget = 1;
    /* Split (see the top) where it takes less time, counting gemms per
     * (tile, key block) in rounds of `budget` workers: a pair's W of them
     * cost 5W in one item; split, a key block's item costs 4W/blocks and
     * a tile's 3W/tiles. Only without a broadcast gradient that items of
     * the split would share: dk, dv or dbias over N and dbias over the
     * heads (whose single-pass items span several pairs), dbias over the
     * keys (which the key blocks would share). The pass items cannot
     * overflow: at most the elements of K and of Q, which validation
     * bounds. */
    const bool dbias_keys =
        bp.dbias.data && bp.dbias_shape[3] == 1 && p->len_k > 1;
    const int64_t pairs = plan.work_items;
    const int64_t kv_items = pairs * bp.key_blocks;
    const int64_t q_items = p->batch * p->heads_q * bp.query_tiles;
    const double tiles = (double)(p->group * bp.query_tiles);
    const double one_pass = 5.0 * (double)((pairs + budget - 1) / budget);
    const double two_passes =
        4.0 * (double)((kv_items + budget - 1) / budget) /
            (double)bp.key_blocks +
        3.0 * (double)((q_items + budget - 1) / budget) / tiles;
    const bool split = budget > 1 && bp.item_batches == 1 &&
                       bp.item_heads == 1 && !dbias_keys &&
                       two_passes < one_pass;
    /* workers for the most items of a pass; each pass takes its own */
    plan.threads =
        (int)min64(budget, split ? (kv_items > q_items ? kv_items : q_items)
                                 : plan.work_items);
    plan.reserve_workers =
        ctx->parallel_for ? ctx->parallel_workers : plan.threads;
    status =
        sdpa_scratch_reserve(ctx, plan.reserve_workers, bp.worker_bytes, 0);
    if (status == SDPA_OK)
        status = sdpa_pool_reserve(ctx, plan.reserve_workers);
    if (status != SDPA_OK)
        return rename_failure(ctx, status);

    if (bp.dbias.data)
        zero_dbias(&bp);
    sdpa_where where = {-1, -1, -1};
    if (split) {
        const int workers = plan.threads;
        plan.threads = (int)min64(workers, kv_items);
        status = sdpa_run_items(ctx, &bp.p, &plan, kv_items, 1,
                                backward_kv_item, &where);
        plan.threads = (int)min64(workers, q_items);
        if (status == SDPA_OK)
            status = sdpa_run_items(ctx, &bp.p, &plan, q_items, 1,
                                    backward_q_item, &where);
    } else {
        status = sdpa_run_items(ctx, &bp.p, &plan, plan.work_items, 1,
                                backward_item, &where);
    }
    if (status == SDPA_ERR_NONFINITE)
        return sdpa_fail(ctx, status,
                         "sdpa_backward: batch %lld, head %lld, query row "
                         "%lld has a NaN or infinite logit, or an lse that "
                         "is NaN, +inf, or -inf while the row has allowed "
                         "keys; the outputs hold unspecified values",
                         (long long)where.batch, (long long)where.head,
                         (long long)where.row);
    if (status != SDPA_OK)
        return rename_failure(ctx, status);
    if (bp.dsinks)
        sink_gradients(&bp);
    ctx->message[0] = '\0';
    return SDPA_OK;
}
