/* What both calls share: argument import, agreement, the block procedure
 * that turns (query rows, key range) into sdpa_forward calls, the
 * accumulator they are merged into with sdpa_merge, and the checks before
 * and after the computation. */
#include "internal.h"

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char message[MPI_MESSAGE_SIZE];

char *mpi_message(void)
{
    return message;
}

const char *sdpa_mpi_last_error(void)
{
    return message;
}

unsigned sdpa_mpi_version_number(void)
{
    return SDPA_MPI_VERSION_MAJOR * 10000 + SDPA_MPI_VERSION_MINOR * 100 +
           SDPA_MPI_VERSION_PATCH;
}

int mpi_fail(int status, const char *format, ...)
{
    va_list ap;
    va_start(ap, format);
    vsnprintf(message, sizeof message, format, ap);
    va_end(ap);
    return status;
}

double mpi_now(void)
{
    return MPI_Wtime();
}

int sdpa_mpi_shard(int layout, int64_t seq_len, int rank, int ranks,
                   int64_t offset[2], int64_t length[2])
{
    message[0] = '\0';
    if (!offset || !length)
        return mpi_fail(SDPA_ERR_NULL_POINTER,
                        "sdpa_mpi_shard: offset or length is NULL");
    if (layout != SDPA_MPI_LAYOUT_CONTIGUOUS &&
        layout != SDPA_MPI_LAYOUT_BALANCED)
        return mpi_fail(SDPA_ERR_BAD_OPTION_VALUE,
                        "sdpa_mpi_shard: layout %d is not an "
                        "SDPA_MPI_LAYOUT_* value",
                        layout);
    if (ranks < 1 || rank < 0 || rank >= ranks || seq_len < ranks)
        return mpi_fail(SDPA_ERR_BAD_DIM,
                        "sdpa_mpi_shard: rank %d of %d ranks, %lld tokens: "
                        "need 0 <= rank < ranks <= tokens",
                        rank, ranks, (long long)seq_len);
    int64_t pieces =
        layout == SDPA_MPI_LAYOUT_BALANCED ? 2 * (int64_t)ranks : ranks;
    int64_t base = seq_len / pieces, extra = seq_len % pieces;
    int64_t which[2] = {rank, pieces - 1 - rank};
    for (int s = 0; s < 2; s++) {
        int64_t p = which[s];
        offset[s] = p * base + (p < extra ? p : extra);
        length[s] = base + (p < extra ? 1 : 0);
    }
    if (layout == SDPA_MPI_LAYOUT_CONTIGUOUS) {
        offset[1] = offset[0] + length[0];
        length[1] = 0;
    }
    return SDPA_OK;
}

int mpi_job_start(mpi_job *j, const char *fn, sdpa_ctx *ctx, MPI_Comm comm,
                  const sdpa_mpi_args *args)
{
    int status = mpi_job_open(j, fn, ctx, comm);
    if (status != SDPA_OK)
        return status;
    if (!args || !args->attn)
        return mpi_fail(SDPA_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                        !args ? "args" : "args->attn");
    if (args->struct_size < SDPA_MPI_ARGS_SIZE_V1)
        return mpi_fail(SDPA_ERR_STRUCT_SIZE,
                        "%s: args->struct_size is %zu, below %zu", fn,
                        args->struct_size, SDPA_MPI_ARGS_SIZE_V1);
    if (args->stats && args->stats->struct_size < SDPA_MPI_STATS_SIZE_V1)
        return mpi_fail(SDPA_ERR_STRUCT_SIZE,
                        "%s: stats->struct_size is %zu, below %zu", fn,
                        args->stats->struct_size, SDPA_MPI_STATS_SIZE_V1);
    return mpi_job_import(j, args->attn);
}

int mpi_job_open(mpi_job *j, const char *fn, sdpa_ctx *ctx, MPI_Comm comm)
{
    memset(j, 0, sizeof *j);
    message[0] = '\0';
    j->fn = fn;
    j->ctx = ctx;
    j->comm = comm;
    j->stats.struct_size = sizeof j->stats;
    MPI_Comm_rank(comm, &j->rank);
    MPI_Comm_size(comm, &j->ranks);
    return ctx ? SDPA_OK
               : mpi_fail(SDPA_ERR_NULL_POINTER, "%s: ctx is NULL", fn);
}

int mpi_job_import(mpi_job *j, const sdpa_forward_args *u)
{
    const char *fn = j->fn;
    sdpa_ctx *ctx = j->ctx;
    if (u->struct_size < SDPA_FORWARD_ARGS_SIZE_V1)
        return mpi_fail(SDPA_ERR_STRUCT_SIZE,
                        "%s: attn->struct_size is %zu, below %zu", fn,
                        u->struct_size, SDPA_FORWARD_ARGS_SIZE_V1);
    const unsigned char *bytes = (const unsigned char *)u;
    for (size_t i = sizeof j->a; i < u->struct_size; i++)
        if (bytes[i] != 0)
            return mpi_fail(SDPA_ERR_STRUCT_TAIL,
                            "%s: attn->struct_size is %zu and byte %zu, past "
                            "the %zu this library knows, is not zero",
                            fn, u->struct_size, i, sizeof j->a);
    memcpy(&j->a, u,
           u->struct_size < sizeof j->a ? u->struct_size : sizeof j->a);
    j->a.struct_size = sizeof j->a;
    const sdpa_forward_args *a = &j->a;
    const char *refused =
        a->weights.data      ? "weights"
        : a->logits.data     ? "logits"
        : a->max_weight.data ? "max_weight"
        : a->entropy.data    ? "entropy"
        : a->alibi_slopes    ? "alibi_slopes"
        : a->sinks           ? "sinks"
        : (a->flags & SDPA_FLAG_WINDOW) || a->window_left || a->window_right
            ? "window"
        : a->dropout_p != 0                        ? "dropout_p"
        : a->seqs || a->q_offsets || a->kv_offsets ? "seqs"
                                                   : NULL;
    if (refused)
        return mpi_fail(SDPA_ERR_UNSUPPORTED,
                        "%s: attn->%s is not supported across ranks (the "
                        "weights, logits and diagnostics span keys no rank "
                        "holds; windows, ALiBi and sinks: pass a mask or "
                        "bias; dropout's mask and ragged batches follow "
                        "positions within a call)",
                        fn, refused);
    if (a->dtype != SDPA_FLOAT32 && a->dtype != SDPA_FLOAT64)
        return mpi_fail(SDPA_ERR_BAD_DTYPE,
                        "%s: dtype %d is neither SDPA_FLOAT32 nor "
                        "SDPA_FLOAT64",
                        fn, a->dtype);
    /* the shards travel and merge in the call's dtype, unpaged */
    if ((a->kv_dtype && a->kv_dtype != a->dtype) ||
        (a->bias_dtype && a->bias_dtype != a->dtype))
        return mpi_fail(SDPA_ERR_BAD_DTYPE,
                        "%s: attn->kv_dtype %d / bias_dtype %d: across ranks "
                        "k, v and bias are in dtype %d (0 or that)",
                        fn, a->kv_dtype, a->bias_dtype, a->dtype);
    if (a->block_table || a->pages_per_seq || a->block_table_stride)
        return mpi_fail(SDPA_ERR_UNSUPPORTED,
                        "%s: attn->block_table: paged K/V is not supported "
                        "across ranks (pass each rank's shard contiguous)",
                        fn);
    if (!a->q.data || !a->k.data || !a->v.data || !a->out.data)
        return mpi_fail(SDPA_ERR_NULL_POINTER, "%s: attn->%s.data is NULL", fn,
                        !a->q.data   ? "q"
                        : !a->k.data ? "k"
                        : !a->v.data ? "v"
                                     : "out");
    j->es = a->dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
    j->n = a->q.shape[0];
    j->hq = a->q.shape[1];
    j->dk = a->q.shape[3];
    j->hkv = a->k.shape[1];
    j->dv = a->v.shape[3];
    j->nk = a->k.shape[0];
    j->rows = a->q.shape[2];
    /* Everything local: shapes, strides, overlaps, scale, soft-cap, flags,
     * head grouping: sdpa_forward's own validation of the rank's tensors
     * without mask, bias, kv_lens and causality (checked later against the
     * whole problem). */
    if (a->causal != SDPA_CAUSAL_NONE && a->causal != SDPA_CAUSAL_TOP_LEFT &&
        a->causal != SDPA_CAUSAL_BOTTOM_RIGHT)
        return mpi_fail(SDPA_ERR_BAD_CAUSAL,
                        "%s: causal is %d, not an SDPA_CAUSAL_* value", fn,
                        a->causal);
    sdpa_forward_args probe = *a;
    probe.mask = probe.bias = (sdpa_tensor){0};
    probe.kv_lens = NULL;
    probe.causal = SDPA_CAUSAL_NONE; /* the diagonal is the whole call's */
    size_t bytes_needed;
    int status = sdpa_forward_workspace(ctx, &probe, &bytes_needed);
    if (status != SDPA_OK)
        return mpi_fail(status, "%s: this rank's tensors: %s", fn,
                        sdpa_ctx_last_error(ctx));
    return sdpa_ctx_get_int(ctx, SDPA_OPT_EMPTY_ROWS, &j->policy);
}

/* mask / bias against [N|1, Hq|1, rows|1, cols|1]. */
int mpi_check_side(const mpi_job *j, const char *name, const sdpa_tensor *t,
                   int64_t cols)
{
    if (!t->data)
        return SDPA_OK;
    const int64_t want[4] = {j->n, j->hq, j->rows, cols};
    static const char *const what[4] = {"N", "Hq", "query rows of this rank",
                                        "key columns"};
    for (int d = 0; d < 4; d++) {
        if (t->shape[d] != want[d] && t->shape[d] != 1)
            return mpi_fail(SDPA_ERR_SHAPE_MISMATCH,
                            "%s: %s.shape[%d] is %lld, must be 1 or %lld (%s)",
                            j->fn, name, d, (long long)t->shape[d],
                            (long long)want[d], what[d]);
        if (t->stride[d] < 0)
            return mpi_fail(SDPA_ERR_BAD_STRIDE,
                            "%s: %s.stride[%d] is %lld, must not be negative",
                            j->fn, name, d, (long long)t->stride[d]);
    }
    return SDPA_OK;
}

int mpi_job_buffers(mpi_job *j, bool private_acc, int64_t part_rows)
{
    /* No overflow: the caller's out and lse hold rows x (Dv + 1) values,
     * and part_rows <= j->rows. */
    const size_t rows = (size_t)(j->n * j->hq * j->rows), dv = (size_t)j->dv;
    const size_t part = (size_t)(j->n * j->hq * part_rows);
    const size_t acc = private_acc ? rows * dv : 0;
    const size_t bytes = (acc + rows + part * (dv + 1)) * j->es;
    j->scratch = malloc(bytes ? bytes : 1);
    if (!j->scratch)
        return mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                        "%s: %zu bytes of partial results", j->fn, bytes);
    char *p = j->scratch;
    if (private_acc) {
        /* Sent whole (decode): no byte of it left undefined. */
        memset(p, 0, acc * j->es);
        j->acc =
            (sdpa_tensor){p,
                          {j->n, j->hq, j->rows, j->dv},
                          {j->hq * j->rows * j->dv, j->rows * j->dv, j->dv, 1}};
    } else {
        j->acc = j->a.out;
    }
    j->acc_lse = p + acc * j->es; /* right after a private acc: one block */
    j->part_out = (char *)j->acc_lse + rows * j->es;
    j->part_lse = (char *)j->part_out + part * dv * j->es;
    j->part_rows = part_rows;
    for (size_t i = 0; i < rows; i++) {
        if (j->es == sizeof(float))
            ((float *)j->acc_lse)[i] = -INFINITY;
        else
            ((double *)j->acc_lse)[i] = -INFINITY;
    }
    int status =
        sdpa_ctx_set_int(j->ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    j->policy_set = status == SDPA_OK;
    return status;
}

int mpi_job_end(mpi_job *j, const sdpa_mpi_args *args, int status)
{
    if (j->policy_set)
        sdpa_ctx_set_int(j->ctx, SDPA_OPT_EMPTY_ROWS, j->policy);
    free(j->scratch);
    j->scratch = j->acc_lse = j->part_out = j->part_lse = NULL;
    if (args && args->struct_size >= SDPA_MPI_ARGS_SIZE_V1 && args->stats &&
        args->stats->struct_size >= SDPA_MPI_STATS_SIZE_V1)
        memcpy((char *)args->stats + sizeof(size_t),
               (const char *)&j->stats + sizeof(size_t),
               SDPA_MPI_STATS_SIZE_V1 - sizeof(size_t));
    if (status == SDPA_OK)
        message[0] = '\0';
    return status;
}

int mpi_agree(mpi_job *j, int status)
{
    int in[2] = {status != SDPA_OK ? status : INT_MAX, j->rank}, out[2];
    MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MINLOC, j->comm);
    if (out[0] == INT_MAX)
        return SDPA_OK;
    char text[MPI_MESSAGE_SIZE];
    if (j->rank == out[1])
        memcpy(text, message, sizeof text);
    MPI_Bcast(text, (int)sizeof text, MPI_CHAR, out[1], j->comm);
    if (j->rank != out[1]) {
        text[sizeof text - 1] = '\0';
        return mpi_fail(out[0], "rank %d: %s", out[1], text);
    }
    return out[0];
}

/* ---- The block procedure ------------------------------------------------ */

/* Element offset of [n, h, t, col] in a view whose extent-1 dimensions
 * broadcast. */
static int64_t view_offset(const sdpa_tensor *t, int64_t n, int64_t row,
                           int64_t col)
{
    return (t->shape[0] > 1 ? n * t->stride[0] : 0) +
           (t->shape[2] > 1 ? row * t->stride[2] : 0) +
           (t->shape[3] > 1 ? col * t->stride[3] : 0);
}

/* A view of batch items [b0, b0 + nb), rows [row, row + rows) and
 * columns [col, col + cols) of t (extent-1 dimensions stay broadcast). */
sdpa_tensor mpi_sub_view(const sdpa_tensor *t, size_t es, int64_t b0,
                         int64_t nb, int64_t row, int64_t rows, int64_t col,
                         int64_t cols)
{
    sdpa_tensor v = *t;
    v.data = (char *)t->data + (size_t)view_offset(t, b0, row, col) * es;
    if (t->shape[0] > 1)
        v.shape[0] = nb;
    if (t->shape[2] > 1)
        v.shape[2] = rows;
    if (t->shape[3] > 1)
        v.shape[3] = cols;
    return v;
}

/* The view [nb, Hq, rows, d] at (b0, row) of buf, contiguous [N, Hq,
 * j->rows, d]: the running lse. */
static sdpa_tensor acc_view(const mpi_job *j, void *buf, int64_t d, int64_t b0,
                            int64_t nb, int64_t row, int64_t rows)
{
    sdpa_tensor v = {
        buf, {nb, j->hq, rows, d}, {j->hq * j->rows * d, j->rows * d, d, 1}};
    v.data = (char *)buf + (size_t)((b0 * j->hq * j->rows + row) * d) * j->es;
    return v;
}

/* The part buffer buf as a contiguous [nb, Hq, rows, d]. */
static sdpa_tensor part_view(const mpi_job *j, void *buf, int64_t d, int64_t nb,
                             int64_t rows)
{
    return (sdpa_tensor){
        buf, {nb, j->hq, rows, d}, {j->hq * rows * d, rows * d, d, 1}};
}

/* Element i of the running lse ([N, Hq, rows] contiguous). */
static double lse_value(const mpi_job *j, size_t i)
{
    return j->es == sizeof(float) ? (double)((const float *)j->acc_lse)[i]
                                  : ((const double *)j->acc_lse)[i];
}

/* True when no row of items [b0, b0 + nb), local rows [row, row + rows)
 * has seen a key yet (every running lse is -inf). */
static bool rows_unseen(const mpi_job *j, int64_t b0, int64_t nb, int64_t row,
                        int64_t rows)
{
    for (int64_t b = b0; b < b0 + nb; b++)
        for (int64_t h = 0; h < j->hq; h++) {
            size_t at = (size_t)((b * j->hq + h) * j->rows + row);
            for (int64_t i = 0; i < rows; i++)
                if (lse_value(j, at + (size_t)i) != -INFINITY)
                    return false;
        }
    return true;
}

/* One sdpa_forward call (mpi_call, internal.h), merged into the
 * accumulator. */
static int forward_call(mpi_job *j, const mpi_call *call)
{
    const mpi_seg *qs = call->qs;
    const int64_t b0 = call->b0, nb = call->nb, r0 = call->r0, r1 = call->r1;
    const sdpa_tensor *kt = call->kt, *vt = call->vt;
    const int64_t krow = call->krow, klen = call->klen, col0 = call->col0;
    const int causal = call->causal;
    const int64_t *kvl = call->kvl;
    const int64_t lrow = r0 - qs->off + qs->local, rows = r1 - r0;
    const size_t es = j->es;
    sdpa_forward_args c = j->a;
    c.causal = causal;
    c.kv_lens = kvl;
    c.q = mpi_sub_view(&j->a.q, es, b0, nb, lrow, rows, 0, j->dk);
    c.k = mpi_sub_view(kt, es, b0, nb, krow, klen, 0, j->dk);
    c.v = mpi_sub_view(vt, es, b0, nb, krow, klen, 0, j->dv);
    if (c.mask.data)
        c.mask = mpi_sub_view(&j->a.mask, 1, b0, nb, lrow, rows, col0, klen);
    if (c.bias.data)
        c.bias = mpi_sub_view(&j->a.bias, es, b0, nb, lrow, rows, col0, klen);
    sdpa_tensor acc = mpi_sub_view(&j->acc, es, b0, nb, lrow, rows, 0, j->dv);
    sdpa_tensor acc_lse = acc_view(j, j->acc_lse, 1, b0, nb, lrow, rows);
    /* Merging a result into rows that have seen nothing is an exact copy
     * (weight 1, its lse kept; sdpa_merge reads no row whose lse is -inf),
     * so such a call writes straight into the accumulator: the same bits,
     * without the part buffer. Only calls that must be merged use it, and
     * the callers keep those within part_rows rows. */
    const bool direct = rows_unseen(j, b0, nb, lrow, rows);
    if (!direct && rows > j->part_rows)
        return mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                        "%s: internal error: a partial result of %lld rows "
                        "for a buffer of %lld",
                        j->fn, (long long)rows, (long long)j->part_rows);
    c.out = direct ? acc : part_view(j, j->part_out, j->dv, nb, rows);
    c.lse = direct ? acc_lse : part_view(j, j->part_lse, 1, nb, rows);
    double t0 = mpi_now();
    int status = sdpa_forward(j->ctx, &c);
    j->stats.forward_calls++;
    if (status == SDPA_OK && !direct) {
        sdpa_tensor outs[2] = {acc, c.out};
        sdpa_tensor lses[2] = {acc_lse, c.lse};
        sdpa_merge_args m = SDPA_MERGE_ARGS_INIT;
        m.dtype = j->a.dtype;
        m.parts = 2;
        m.outs = outs;
        m.lses = lses;
        m.out = outs[0]; /* in place */
        m.lse = lses[0];
        status = sdpa_merge(j->ctx, &m);
    }
    j->stats.compute_seconds += mpi_now() - t0;
    if (status != SDPA_OK)
        return mpi_fail(status,
                        "%s: query rows %lld..%lld against keys "
                        "%lld..%lld: %s",
                        j->fn, (long long)r0, (long long)r1 - 1,
                        (long long)col0, (long long)(col0 + klen - 1),
                        sdpa_ctx_last_error(j->ctx));
    return SDPA_OK;
}

/* The block for items [b0, b0 + nb) whose valid key count is L (the same
 * for all of them; kvl: their shifted lengths, or NULL when L is the whole
 * key count). See mpi_block. */
/* Dispatches one call of the block procedure to the job's kind. */
static int sub_call(mpi_job *j, const mpi_seg *qs, int64_t b0, int64_t nb,
                    int64_t r0, int64_t r1, const sdpa_tensor *kt,
                    const sdpa_tensor *vt, int64_t krow, int64_t klen,
                    int64_t col0, int causal, const int64_t *kvl)
{
    const mpi_call call = {qs, b0,   nb,   r0,   r1,     kt,
                           vt, krow, klen, col0, causal, kvl};
    return j->call ? j->call(j, &call) : forward_call(j, &call);
}

static int block_items(mpi_job *j, const mpi_seg *qs, int64_t b0, int64_t nb,
                       int64_t len, const int64_t *kvl, int64_t a, int64_t e,
                       const sdpa_tensor *kt, const sdpa_tensor *vt,
                       int64_t krow, int64_t k0, int64_t k1, int64_t col0)
{
    const int64_t kend = k1 < len ? k1 : len, full = k1 - k0;
    const int causal = j->a.causal;
    if (kend <= k0) {
        j->stats.blocks_skipped++;
        return SDPA_OK; /* past the key length */
    }
    int64_t shifted = kend - k0; /* the call's key length */
    const int64_t *kv = kvl ? &shifted : NULL;
    if (causal == SDPA_CAUSAL_NONE)
        return sub_call(j, qs, b0, nb, a, e, kt, vt, krow, full, col0,
                        SDPA_CAUSAL_NONE, kv);
    /* Row i sees keys j <= i + delta (and j < L): the whole problem's
     * diagonal. */
    const int64_t delta =
        causal == SDPA_CAUSAL_BOTTOM_RIGHT ? len - j->tq_total : 0;
    if (e - 1 + delta < k0) {
        j->stats.blocks_skipped++;
        return SDPA_OK; /* entirely above the diagonal */
    }
    if (a + delta >= kend - 1) /* every row sees every key */
        return sub_call(j, qs, b0, nb, a, e, kt, vt, krow, full, col0,
                        SDPA_CAUSAL_NONE, kv);
    if (kend - e == delta) /* the call's own bottom-right diagonal */
        return sub_call(j, qs, b0, nb, a, e, kt, vt, krow, full, col0,
                        SDPA_CAUSAL_BOTTOM_RIGHT, kv);
    if (a + delta == k0) /* the call's own top-left diagonal */
        return sub_call(j, qs, b0, nb, a, e, kt, vt, krow, full, col0,
                        SDPA_CAUSAL_TOP_LEFT, kv);
    /* The diagonal crosses the block elsewhere: a bottom-right call on a
     * key view cut where the last of its rows stops, and the rows that see
     * the whole block without causality. Rows that see none of it come
     * out empty (lse -inf) and contribute nothing. */
    const int64_t r_full = kend - 1 - delta; /* first row seeing all */
    if (r_full >= e)
        return sub_call(j, qs, b0, nb, a, e, kt, vt, krow, e + delta - k0, col0,
                        SDPA_CAUSAL_BOTTOM_RIGHT, NULL);
    int status = SDPA_OK;
    if (kend - 1 - k0 > 0)
        status = sub_call(j, qs, b0, nb, a, r_full, kt, vt, krow, kend - 1 - k0,
                          col0, SDPA_CAUSAL_BOTTOM_RIGHT, NULL);
    if (status == SDPA_OK)
        status = sub_call(j, qs, b0, nb, r_full, e, kt, vt, krow, full, col0,
                          SDPA_CAUSAL_NONE, kv);
    return status;
}

int mpi_block(mpi_job *j, const mpi_seg *qs, int64_t a, int64_t e,
              const sdpa_tensor *kt, const sdpa_tensor *vt, int64_t krow,
              int64_t k0, int64_t k1, int64_t col0)
{
    if (!j->a.kv_lens)
        return block_items(j, qs, 0, j->n, j->tk_total, NULL, a, e, kt, vt,
                           krow, k0, k1, col0);
    for (int64_t b = 0; b < j->n; b++) {
        int status = block_items(j, qs, b, 1, j->a.kv_lens[b], j->a.kv_lens, a,
                                 e, kt, vt, krow, k0, k1, col0);
        if (status != SDPA_OK)
            return status;
    }
    return SDPA_OK;
}

/* ---- Before and after the computation ----------------------------------- */

/* The bytes [*begin, *end) a view spans (non-negative strides; extent-1
 * dimensions do not move); false when that overflows the address space. */
bool mpi_view_bytes(const sdpa_tensor *t, size_t es, uintptr_t *begin,
                    uintptr_t *end)
{
    size_t span = 1, step, bytes;
    for (int d = 0; d < 4; d++) {
        size_t stride = t->shape[d] > 1 ? (size_t)t->stride[d] : 0;
        if (!mpi_mul_size((size_t)(t->shape[d] - 1), stride, &step) ||
            step > SIZE_MAX - span)
            return false;
        span += step;
    }
    if (!mpi_mul_size(span, es, &bytes) ||
        (uintptr_t)t->data > UINTPTR_MAX - bytes)
        return false;
    *begin = (uintptr_t)t->data;
    *end = *begin + bytes;
    return true;
}

int mpi_check_outputs(mpi_job *j)
{
    const sdpa_forward_args *a = &j->a;
    struct {
        const char *name;
        const void *data;
        uintptr_t begin, end;
    } v[5] = {{"out", a->out.data, 0, 0},
              {"lse", a->lse.data, 0, 0},
              {"mask", a->mask.data, 0, 0},
              {"bias", a->bias.data, 0, 0},
              {"kv_lens", a->kv_lens, 0, 0}};
    const sdpa_tensor *t[4] = {&a->out, &a->lse, &a->mask, &a->bias};
    const size_t es[4] = {j->es, j->es, 1, j->es};
    for (int i = 0; i < 4; i++)
        if (v[i].data && !mpi_view_bytes(t[i], es[i], &v[i].begin, &v[i].end))
            return mpi_fail(SDPA_ERR_OVERFLOW,
                            "%s: the extent of %s overflows the address "
                            "space",
                            j->fn, v[i].name);
    if (a->kv_lens) {
        v[4].begin = (uintptr_t)a->kv_lens;
        v[4].end = (uintptr_t)(a->kv_lens + j->n);
    }
    /* out is written from the first sdpa_forward call on, while these are
     * still read: sdpa_forward's own rule (disjoint address ranges), for
     * the whole tensors rather than each call's slices. */
    for (int o = 0; o < 2; o++)
        for (int i = 2; i < 5; i++)
            if (v[o].data && v[i].data && v[o].begin < v[i].end &&
                v[i].begin < v[o].end)
                return mpi_fail(SDPA_ERR_OVERLAP,
                                "%s: output %s overlaps input %s (the address "
                                "ranges from first to last element must be "
                                "disjoint)",
                                j->fn, v[o].name, v[i].name);
    return SDPA_OK;
}

/* The global position of local row i. */
static int64_t global_row(const mpi_seg *segs, int nsegs, int64_t i)
{
    for (int s = 0; s < nsegs; s++)
        if (i >= segs[s].local && i < segs[s].local + segs[s].len)
            return segs[s].off + i - segs[s].local;
    return i;
}

/* Element [b, h, i, col] of a mask or bias view (extent-1 dimensions
 * broadcast). */
static const char *side_at(const sdpa_tensor *t, size_t es, int64_t b,
                           int64_t h, int64_t i, int64_t col)
{
    int64_t at =
        view_offset(t, b, i, col) + (t->shape[1] > 1 ? h * t->stride[1] : 0);
    return (const char *)t->data + (size_t)at * es;
}

int mpi_check_rows(mpi_job *j, const mpi_seg *segs, int nsegs)
{
    if (j->policy == SDPA_EMPTY_ROWS_ZERO)
        return SDPA_OK;
    const sdpa_tensor *mask = j->a.mask.data ? &j->a.mask : NULL;
    const sdpa_tensor *bias = j->a.bias.data ? &j->a.bias : NULL;
    const bool allows = (j->a.flags & SDPA_FLAG_MASK_NONZERO_ALLOWS) != 0;
    /* Only the dimensions along which a row's allowed keys can differ are
     * walked (sdpa_forward's validation does the same), so a mask or bias
     * broadcast over items and heads is read once per row. */
    const bool per_item = j->a.kv_lens || (mask && mask->shape[0] > 1) ||
                          (bias && bias->shape[0] > 1);
    const bool per_head =
        (mask && mask->shape[1] > 1) || (bias && bias->shape[1] > 1);
    const int64_t items = per_item ? j->n : 1, heads = per_head ? j->hq : 1;
    for (int64_t b = 0; b < items; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < j->rows; i++) {
                const int64_t pos = global_row(segs, nsegs, i);
                const int64_t len =
                    j->a.kv_lens ? j->a.kv_lens[b] : j->tk_total;
                int64_t limit = len; /* the row's keys are [0, limit) */
                if (j->a.causal == SDPA_CAUSAL_TOP_LEFT && pos + 1 < limit)
                    limit = pos + 1;
                if (j->a.causal == SDPA_CAUSAL_BOTTOM_RIGHT &&
                    pos + len - j->tq_total + 1 < limit)
                    limit = pos + len - j->tq_total + 1;
                bool any = false;
                for (int64_t k = 0; k < limit && !any; k++) {
                    if (mask && (*side_at(mask, 1, b, h, i, k) != 0) != allows)
                        continue;
                    if (bias) {
                        const char *x = side_at(bias, j->es, b, h, i, k);
                        double value = j->es == sizeof(float)
                                           ? (double)*(const float *)x
                                           : *(const double *)x;
                        if (value == -INFINITY)
                            continue;
                    }
                    any = true;
                }
                if (any)
                    continue;
                return mpi_fail(
                    SDPA_ERR_FULLY_MASKED_ROW,
                    "%s: batch %lld%s, head %lld%s, query row %lld (this "
                    "rank's row %lld) has no allowed key (%s); set "
                    "SDPA_OPT_EMPTY_ROWS to SDPA_EMPTY_ROWS_ZERO to get a "
                    "zero row instead",
                    j->fn, (long long)b,
                    items == 1 && j->n > 1 ? " (and every item)" : "",
                    (long long)h,
                    heads == 1 && j->hq > 1 ? " (and every head)" : "",
                    (long long)pos, (long long)i,
                    limit <= 0 ? "key length and causal mask exclude all"
                               : "mask/bias forbid every key");
            }
    return SDPA_OK;
}

int mpi_check_lse(mpi_job *j, const mpi_seg *segs, int nsegs)
{
    if (j->policy == SDPA_EMPTY_ROWS_ZERO)
        return SDPA_OK;
    for (int64_t b = 0; b < j->n; b++)
        for (int64_t h = 0; h < j->hq; h++)
            for (int64_t i = 0; i < j->rows; i++) {
                size_t at = (size_t)((b * j->hq + h) * j->rows + i);
                if (lse_value(j, at) != -INFINITY)
                    continue;
                return mpi_fail(
                    SDPA_ERR_NONFINITE,
                    "%s: batch %lld, head %lld, query row %lld (this rank's "
                    "row %lld): every allowed logit is -inf (non-finite "
                    "input or overflow); out holds unspecified values",
                    j->fn, (long long)b, (long long)h,
                    (long long)global_row(segs, nsegs, i), (long long)i);
            }
    return SDPA_OK;
}

void mpi_write_result(mpi_job *j)
{
    const sdpa_tensor *out = &j->a.out, *lse = &j->a.lse;
    for (int64_t b = 0; b < j->n; b++)
        for (int64_t h = 0; h < j->hq; h++)
            for (int64_t i = 0; i < j->rows; i++) {
                size_t at = (size_t)((b * j->hq + h) * j->rows + i);
                /* An element's offset in out or lse (stride[3] of lse is
                 * ignored; out's is 1: sdpa_forward's rules). */
                int64_t o = (out->shape[0] > 1 ? b * out->stride[0] : 0) +
                            (out->shape[1] > 1 ? h * out->stride[1] : 0) +
                            (out->shape[2] > 1 ? i * out->stride[2] : 0);
                /* A row no key reached was never written: the zero-row
                 * policy's zeros (the error policy failed the call). */
                if (lse_value(j, at) == -INFINITY)
                    memset((char *)out->data + (size_t)o * j->es, 0,
                           (size_t)j->dv * j->es);
                if (!lse->data)
                    continue;
                int64_t l = (lse->shape[0] > 1 ? b * lse->stride[0] : 0) +
                            (lse->shape[1] > 1 ? h * lse->stride[1] : 0) +
                            (lse->shape[2] > 1 ? i * lse->stride[2] : 0);
                memcpy((char *)lse->data + (size_t)l * j->es,
                       (const char *)j->acc_lse + at * j->es, j->es);
            }
}

/* Every rank's kv_lens hold the same values: the smallest and the largest
 * of each item over the ranks, compared (a hash of them could collide), a
 * fixed number of items at a time so that nothing is allocated. Called by
 * every rank once N and the presence of kv_lens are agreed on: every rank
 * makes the same calls and reaches the same verdict. */
static int same_kv_lens(const mpi_job *j)
{
    enum { AT_ONCE = 256 };
    int64_t low[AT_ONCE], high[AT_ONCE];
    for (int64_t b0 = 0; b0 < j->n; b0 += AT_ONCE) {
        int count = (int)(j->n - b0 < AT_ONCE ? j->n - b0 : AT_ONCE);
        MPI_Allreduce(j->a.kv_lens + b0, low, count, MPI_INT64_T, MPI_MIN,
                      j->comm);
        MPI_Allreduce(j->a.kv_lens + b0, high, count, MPI_INT64_T, MPI_MAX,
                      j->comm);
        for (int i = 0; i < count; i++)
            if (low[i] != high[i])
                return mpi_fail(SDPA_ERR_BAD_KV_LEN,
                                "%s: kv_lens[%lld] is not the same on every "
                                "rank: it ranges from %lld to %lld (this rank "
                                "%d has %lld)",
                                j->fn, (long long)(b0 + i), (long long)low[i],
                                (long long)high[i], j->rank,
                                (long long)j->a.kv_lens[b0 + i]);
    }
    return SDPA_OK;
}

int mpi_exchange(mpi_job *j, int layout, bool same_rows, int64_t *table)
{
    const sdpa_forward_args *a = &j->a;
    int64_t mine[DESC_COUNT];
    mine[DESC_DTYPE] = a->dtype;
    mine[DESC_CAUSAL] = a->causal;
    mine[DESC_FLAGS] = a->flags;
    mine[DESC_N] = j->n;
    mine[DESC_HQ] = j->hq;
    mine[DESC_HKV] = j->hkv;
    mine[DESC_DK] = j->dk;
    mine[DESC_DV] = j->dv;
    mine[DESC_NK] = j->nk;
    mine[DESC_KVLENS] = a->kv_lens != NULL; /* the values: same_kv_lens */
    mine[DESC_MASK] = a->mask.data != NULL;
    mine[DESC_BIAS] = a->bias.data != NULL;
    memcpy(&mine[DESC_SCALE], &a->scale, sizeof(double));
    memcpy(&mine[DESC_SOFTCAP], &a->softcap, sizeof(double));
    mine[DESC_LAYOUT] = layout;
    mine[DESC_POLICY] = j->policy;
    mine[DESC_ROWS] = j->rows;
    mine[DESC_KROWS] = a->k.shape[2];
    MPI_Allgather(mine, DESC_COUNT, MPI_INT64_T, table, DESC_COUNT, MPI_INT64_T,
                  j->comm);
    static const struct {
        const char *what;
        int status;
    } field[DESC_ROWS + 1] = {
        [DESC_DTYPE] = {"dtype", SDPA_ERR_BAD_DTYPE},
        [DESC_CAUSAL] = {"causal", SDPA_ERR_BAD_CAUSAL},
        [DESC_FLAGS] = {"flags", SDPA_ERR_BAD_FLAGS},
        [DESC_N] = {"N (q.shape[0])", SDPA_ERR_SHAPE_MISMATCH},
        [DESC_HQ] = {"Hq (q.shape[1])", SDPA_ERR_SHAPE_MISMATCH},
        [DESC_HKV] = {"Hkv (k.shape[1])", SDPA_ERR_SHAPE_MISMATCH},
        [DESC_DK] = {"Dk (q.shape[3])", SDPA_ERR_SHAPE_MISMATCH},
        [DESC_DV] = {"Dv (v.shape[3])", SDPA_ERR_SHAPE_MISMATCH},
        [DESC_NK] = {"k.shape[0]", SDPA_ERR_SHAPE_MISMATCH},
        [DESC_KVLENS] = {"kv_lens (present)", SDPA_ERR_BAD_KV_LEN},
        [DESC_MASK] = {"a mask (present)", SDPA_ERR_SHAPE_MISMATCH},
        [DESC_BIAS] = {"a bias (present)", SDPA_ERR_SHAPE_MISMATCH},
        [DESC_SCALE] = {"scale (bits)", SDPA_ERR_BAD_SCALE},
        [DESC_SOFTCAP] = {"softcap (bits)", SDPA_ERR_BAD_SOFTCAP},
        [DESC_LAYOUT] = {"layout", SDPA_ERR_BAD_OPTION_VALUE},
        [DESC_POLICY] = {"SDPA_OPT_EMPTY_ROWS", SDPA_ERR_BAD_OPTION_VALUE},
        [DESC_ROWS] = {"q.shape[2] (replicated rows)", SDPA_ERR_SHAPE_MISMATCH},
    };
    int fields = same_rows ? DESC_ROWS + 1 : DESC_ROWS;
    for (int r = 1; r < j->ranks; r++)
        for (int f = 0; f < fields; f++)
            if (table[r * DESC_COUNT + f] != table[f])
                return mpi_fail(field[f].status,
                                "%s: rank %d has %s %lld, rank 0 has %lld: "
                                "it must be the same on every rank",
                                j->fn, r, field[f].what,
                                (long long)table[r * DESC_COUNT + f],
                                (long long)table[f]);
    return a->kv_lens ? same_kv_lens(j) : SDPA_OK;
}
