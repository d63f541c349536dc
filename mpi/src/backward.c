/*
 * sdpa_mpi_backward: the ring prefill's gradient (sdpa_mpi.h). Each rank
 * keeps its query rows, their out, dout and lse, and accumulates their dq
 * in the caller's dq; the K/V shards travel round the ring as in prefill.
 * A (query rows, key block) tile's share of dq, dk and dv is exactly
 * sdpa_backward of its sub-views: the weights come from the global lse and
 * D_i = <dout_i, out_i> from the whole rows, which sdpa_backward recomputes
 * from out and dout. Shard s's dK/dV accumulator starts on rank s + 1
 * (ring step 1), which sends it on after adding its share; each later rank
 * computes its share into a buffer of its own while the accumulator is in
 * flight, then adds the arrived accumulator and sends the sum on. After
 * P - 1 steps it reaches home, where the rank's own share (its diagonal
 * block, in the caller's dk and dv) was computed half before the ring
 * (hiding the first K/V transfer) and half after it (hiding the home
 * transfer). Every sum runs in a fixed order.
 */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

/* Query rows and keys per tile: a few milliseconds of work for D = 64
 * between two MPI_Testall calls, and the size of the tile's gradients. */
enum { TILE = 2048 };

/* MPI tags: the K/V shards and the dK/dV accumulators (each stream is in
 * order between two ranks, MPI's non-overtaking rule). */
enum { TAG_KV = 0, TAG_DKV = 1 };

typedef struct bwd_state {
    sdpa_backward_args g;     /* the caller's, in this library's size */
    sdpa_tensor dk_to, dv_to; /* where the visiting block's dk, dv go */
    void *dq_part, *dkv_part; /* one tile's gradients */
    void *dbias_part;         /* and its dbias, with one */
    MPI_Request *req;         /* transfers to drive between tiles */
    int nreq;
} bwd_state;

/* dst[i] += src[i] for count elements. */
static void add_flat(void *dst, const void *src, size_t count, size_t es)
{
    if (es == sizeof(float))
        for (size_t i = 0; i < count; i++)
            ((float *)dst)[i] += ((const float *)src)[i];
    else
        for (size_t i = 0; i < count; i++)
            ((double *)dst)[i] += ((const double *)src)[i];
}

/* dst += src, both [s0, s1, s2, s3] (src contiguous, dst strided). */
static void add_into(const sdpa_tensor *dst, const void *src, size_t es)
{
    const int64_t *n = dst->shape, *st = dst->stride;
    const int64_t step = n[3] > 1 ? st[3] : 1;
    size_t at = 0;
    for (int64_t a = 0; a < n[0]; a++)
        for (int64_t b = 0; b < n[1]; b++)
            for (int64_t c = 0; c < n[2]; c++) {
                char *row = (char *)dst->data +
                            (size_t)(a * st[0] + b * st[1] + c * st[2]) * es;
                if (step == 1) /* the gradients: rows contiguous */
                    add_flat(row, (const char *)src + at * es, (size_t)n[3],
                             es);
                else if (es == sizeof(float))
                    for (int64_t i = 0; i < n[3]; i++)
                        ((float *)(void *)row)[i * step] +=
                            ((const float *)src)[at + (size_t)i];
                else
                    for (int64_t i = 0; i < n[3]; i++)
                        ((double *)(void *)row)[i * step] +=
                            ((const double *)src)[at + (size_t)i];
                at += (size_t)n[3];
            }
}

/* Zeros every element of a view. */
static void zero_view(const sdpa_tensor *t, size_t es)
{
    for (int64_t a = 0; a < t->shape[0]; a++)
        for (int64_t b = 0; b < t->shape[1]; b++)
            for (int64_t c = 0; c < t->shape[2]; c++) {
                char *row = (char *)t->data +
                            (size_t)(a * t->stride[0] + b * t->stride[1] +
                                     c * t->stride[2]) *
                                es;
                if (t->stride[3] == 1 || t->shape[3] == 1)
                    memset(row, 0, (size_t)t->shape[3] * es);
                else
                    for (int64_t i = 0; i < t->shape[3]; i++)
                        memset(row + (size_t)(i * t->stride[3]) * es, 0, es);
            }
}

static sdpa_tensor contiguous(void *p, int64_t n, int64_t h, int64_t t,
                              int64_t d)
{
    return (sdpa_tensor){p, {n, h, t, d}, {h * t * d, t * d, d, 1}};
}

/* One tile of the block procedure: sdpa_backward of the sub-views, its dq
 * added to the caller's, its dk and dv to the block's targets. */
static int backward_call(mpi_job *j, const mpi_call *call)
{
    bwd_state *st = j->user;
    const sdpa_backward_args *g = &st->g;
    const size_t es = j->es;
    const int64_t b0 = call->b0, nb = call->nb, klen = call->klen;
    const int64_t lrow = call->r0 - call->qs->off + call->qs->local;
    const int64_t rows = call->r1 - call->r0;
    const int64_t kn = call->kt->shape[0] > 1 ? nb : 1;
    sdpa_backward_args c = *g;
    c.causal = call->causal;
    c.kv_lens = call->kvl;
    c.q = mpi_sub_view(&g->q, es, b0, nb, lrow, rows, 0, j->dk);
    c.out = mpi_sub_view(&g->out, es, b0, nb, lrow, rows, 0, j->dv);
    c.dout = mpi_sub_view(&g->dout, es, b0, nb, lrow, rows, 0, j->dv);
    c.lse = mpi_sub_view(&g->lse, es, b0, nb, lrow, rows, 0, 1);
    c.k = mpi_sub_view(call->kt, es, b0, nb, call->krow, klen, 0, j->dk);
    c.v = mpi_sub_view(call->vt, es, b0, nb, call->krow, klen, 0, j->dv);
    if (c.mask.data)
        c.mask =
            mpi_sub_view(&g->mask, 1, b0, nb, lrow, rows, call->col0, klen);
    if (c.bias.data)
        c.bias =
            mpi_sub_view(&g->bias, es, b0, nb, lrow, rows, call->col0, klen);
    const sdpa_tensor *db = &g->dbias;
    if (db->data) /* extent 1 where the caller's dbias sums */
        c.dbias = contiguous(st->dbias_part, db->shape[0] > 1 ? nb : 1,
                             db->shape[1], db->shape[2] > 1 ? rows : 1,
                             db->shape[3] > 1 ? klen : 1);
    c.dq = contiguous(st->dq_part, nb, j->hq, rows, j->dk);
    c.dk = contiguous(st->dkv_part, kn, j->hkv, klen, j->dk);
    c.dv = contiguous((char *)st->dkv_part +
                          (size_t)(kn * j->hkv * klen * j->dk) * es,
                      kn, j->hkv, klen, j->dv);
    double t0 = mpi_now();
    int status = sdpa_backward(j->ctx, &c);
    j->stats.forward_calls++;
    if (status == SDPA_OK) {
        sdpa_tensor dq = mpi_sub_view(&g->dq, es, b0, nb, lrow, rows, 0, j->dk);
        add_into(&dq, c.dq.data, es);
        sdpa_tensor dk =
            mpi_sub_view(&st->dk_to, es, b0, nb, call->krow, klen, 0, j->dk);
        sdpa_tensor dv =
            mpi_sub_view(&st->dv_to, es, b0, nb, call->krow, klen, 0, j->dv);
        add_into(&dk, c.dk.data, es);
        add_into(&dv, c.dv.data, es);
        if (db->data) {
            sdpa_tensor to =
                mpi_sub_view(db, es, b0, nb, lrow, rows, call->col0, klen);
            add_into(&to, st->dbias_part, es);
        }
    }
    j->stats.compute_seconds += mpi_now() - t0;
    if (st->nreq > 0) {
        int done;
        MPI_Testall(st->nreq, st->req, &done, MPI_STATUSES_IGNORE);
    }
    if (status != SDPA_OK)
        return mpi_fail(status,
                        "%s: query rows %lld..%lld against keys "
                        "%lld..%lld: %s",
                        j->fn, (long long)call->r0, (long long)call->r1 - 1,
                        (long long)call->col0,
                        (long long)(call->col0 + klen - 1),
                        sdpa_ctx_last_error(j->ctx));
    return SDPA_OK;
}

/* The visible (query, key) pairs of a tile under the whole problem's
 * causal diagonal (kv_lens aside): how the own block is cut in halves. */
static int64_t tile_work(const mpi_job *j, int64_t a, int64_t e, int64_t k0,
                         int64_t k1)
{
    if (j->a.causal == SDPA_CAUSAL_NONE)
        return (e - a) * (k1 - k0);
    int64_t w = 0;
    for (int64_t i = a; i < e; i++) {
        int64_t last = i + 1 < k1 ? i + 1 : k1; /* keys [k0, last) */
        w += last > k0 ? last - k0 : 0;
    }
    return w;
}

/* The tiles of this rank's query segments qs against key segments ks, in
 * their fixed order; with `part` 0 or 1 only the first or second half of
 * them by work (own block), with -1 all. */
static int run_tiles(mpi_job *j, const mpi_seg *qs, const mpi_seg *ks,
                     const sdpa_tensor *kt, const sdpa_tensor *vt, int part)
{
    int64_t total = 0, done = 0;
    for (int pass = part < 0 ? 1 : 0; pass < 2; pass++)
        for (int q = 0; q < 2; q++)
            for (int k = 0; k < 2; k++) {
                const int64_t qend = qs[q].off + qs[q].len;
                const int64_t kend = ks[k].off + ks[k].len;
                for (int64_t a = qs[q].off; a < qend; a += TILE) {
                    int64_t e = qend - a > TILE ? a + TILE : qend;
                    for (int64_t k0 = ks[k].off; k0 < kend; k0 += TILE) {
                        int64_t k1 = kend - k0 > TILE ? k0 + TILE : kend;
                        if (pass == 0) {
                            total += tile_work(j, a, e, k0, k1);
                            continue;
                        }
                        if (part >= 0) {
                            /* a tile belongs to the half where its work
                             * starts */
                            bool first = 2 * done < total;
                            done += tile_work(j, a, e, k0, k1);
                            if (first != (part == 0))
                                continue;
                        }
                        int status = mpi_block(j, &qs[q], a, e, kt, vt,
                                               ks[k].local + (k0 - ks[k].off),
                                               k0, k1, k0);
                        if (status != SDPA_OK)
                            return status;
                    }
                }
            }
    return SDPA_OK;
}

/* A gradient or dout tensor of the rank: present, of shape want, innermost
 * stride 1, no negative stride. */
static int check_grad(const mpi_job *j, const char *name, const sdpa_tensor *t,
                      const int64_t want[4])
{
    if (!t->data)
        return mpi_fail(SDPA_ERR_NULL_POINTER, "%s: grad->%s.data is NULL",
                        j->fn, name);
    for (int d = 0; d < 4; d++) {
        if (t->shape[d] != want[d])
            return mpi_fail(SDPA_ERR_SHAPE_MISMATCH,
                            "%s: grad->%s.shape[%d] is %lld, must be %lld",
                            j->fn, name, d, (long long)t->shape[d],
                            (long long)want[d]);
        if (t->stride[d] < 0 ||
            (d == 3 && t->shape[3] > 1 && t->stride[3] != 1))
            return mpi_fail(
                SDPA_ERR_BAD_STRIDE, "%s: grad->%s.stride[%d] is %lld (%s)",
                j->fn, name, d, (long long)t->stride[d],
                d == 3 ? "the innermost must be 1" : "must not be negative");
    }
    return SDPA_OK;
}

/* dq, dk, dv and dbias must not overlap each other or any input. */
static int check_overlaps(const mpi_job *j, const sdpa_backward_args *g)
{
    enum { OUTS = 4, ALL = 12 };
    struct {
        const char *name;
        const sdpa_tensor *t;
        size_t es;
        uintptr_t begin, end;
    } v[ALL] = {
        {"dq", &g->dq, j->es, 0, 0},     {"dk", &g->dk, j->es, 0, 0},
        {"dv", &g->dv, j->es, 0, 0},     {"dbias", &g->dbias, j->es, 0, 0},
        {"q", &g->q, j->es, 0, 0},       {"k", &g->k, j->es, 0, 0},
        {"v", &g->v, j->es, 0, 0},       {"out", &g->out, j->es, 0, 0},
        {"dout", &g->dout, j->es, 0, 0}, {"lse", &g->lse, j->es, 0, 0},
        {"mask", &g->mask, 1, 0, 0},     {"bias", &g->bias, j->es, 0, 0}};
    for (int i = 0; i < ALL; i++)
        if (v[i].t->data &&
            !mpi_view_bytes(v[i].t, v[i].es, &v[i].begin, &v[i].end))
            return mpi_fail(SDPA_ERR_OVERFLOW,
                            "%s: the extent of %s overflows the address space",
                            j->fn, v[i].name);
    uintptr_t kl0 = (uintptr_t)g->kv_lens, kl1 = kl0;
    if (g->kv_lens)
        kl1 = (uintptr_t)(g->kv_lens + j->n);
    for (int o = 0; o < OUTS; o++) {
        if (!v[o].t->data)
            continue;
        for (int i = o + 1; i < ALL; i++)
            if (v[i].t->data && v[o].begin < v[i].end && v[i].begin < v[o].end)
                return mpi_fail(SDPA_ERR_OVERLAP,
                                "%s: output %s overlaps %s %s (the address "
                                "ranges from first to last element must be "
                                "disjoint)",
                                j->fn, v[o].name, i < OUTS ? "output" : "input",
                                v[i].name);
        if (g->kv_lens && v[o].begin < kl1 && kl0 < v[o].end)
            return mpi_fail(SDPA_ERR_OVERLAP,
                            "%s: output %s overlaps input kv_lens", j->fn,
                            v[o].name);
    }
    return SDPA_OK;
}

/* dbias, optional: the bias's shape [N|1, Hq|1, T_r|1, T|1] with extent 1
 * exactly where the bias broadcasts (extent 1 or stride 0), as
 * sdpa_backward wants it; non-negative strides. */
static int check_dbias(const mpi_job *j, const sdpa_backward_args *g)
{
    const sdpa_tensor *d = &g->dbias, *b = &g->bias;
    if (!d->data)
        return SDPA_OK;
    for (int x = 0; x < 4; x++) {
        int64_t want = b->shape[x] > 1 && b->stride[x] != 0 ? b->shape[x] : 1;
        if (d->shape[x] != want)
            return mpi_fail(SDPA_ERR_SHAPE_MISMATCH,
                            "%s: grad->dbias.shape[%d] is %lld, must be %lld "
                            "(the bias's, 1 where it broadcasts)",
                            j->fn, x, (long long)d->shape[x], (long long)want);
        if (d->stride[x] < 0)
            return mpi_fail(SDPA_ERR_BAD_STRIDE,
                            "%s: grad->dbias.stride[%d] is %lld, must not be "
                            "negative",
                            j->fn, x, (long long)d->stride[x]);
    }
    return SDPA_OK;
}

/* Imports args into j and st: the struct sizes, the backward's own
 * fields, and the attention arguments as the forward's (mpi_job_import),
 * then the gradients' shapes. */
static int backward_start(mpi_job *j, bwd_state *st, sdpa_ctx *ctx,
                          MPI_Comm comm, const sdpa_mpi_backward_args *args)
{
    const char *fn = "sdpa_mpi_backward";
    int status = mpi_job_open(j, fn, ctx, comm);
    if (status != SDPA_OK)
        return status;
    if (!args || !args->grad)
        return mpi_fail(SDPA_ERR_NULL_POINTER, "%s: %s is NULL", fn,
                        !args ? "args" : "args->grad");
    if (args->struct_size < SDPA_MPI_BACKWARD_ARGS_SIZE_V1)
        return mpi_fail(SDPA_ERR_STRUCT_SIZE,
                        "%s: args->struct_size is %zu, below %zu", fn,
                        args->struct_size, SDPA_MPI_BACKWARD_ARGS_SIZE_V1);
    if (args->stats && args->stats->struct_size < SDPA_MPI_STATS_SIZE_V1)
        return mpi_fail(SDPA_ERR_STRUCT_SIZE,
                        "%s: stats->struct_size is %zu, below %zu", fn,
                        args->stats->struct_size, SDPA_MPI_STATS_SIZE_V1);
    const sdpa_backward_args *u = args->grad;
    if (u->struct_size < SDPA_BACKWARD_ARGS_SIZE_V1)
        return mpi_fail(SDPA_ERR_STRUCT_SIZE,
                        "%s: grad->struct_size is %zu, below %zu", fn,
                        u->struct_size, SDPA_BACKWARD_ARGS_SIZE_V1);
    const unsigned char *bytes = (const unsigned char *)u;
    for (size_t i = sizeof st->g; i < u->struct_size; i++)
        if (bytes[i] != 0)
            return mpi_fail(SDPA_ERR_STRUCT_TAIL,
                            "%s: grad->struct_size is %zu and byte %zu, past "
                            "the %zu this library knows, is not zero",
                            fn, u->struct_size, i, sizeof st->g);
    memset(&st->g, 0, sizeof st->g);
    memcpy(&st->g, u,
           u->struct_size < sizeof st->g ? u->struct_size : sizeof st->g);
    st->g.struct_size = sizeof st->g;
    sdpa_backward_args *g = &st->g;
    /* k or v broadcast over N by a zero stride: the extent-1 view it is,
     * so that the shard that travels is one item (dk, dv are [1, ...]). */
    sdpa_tensor *kv[2] = {&g->k, &g->v};
    for (int w = 0; w < 2; w++)
        if (kv[w]->shape[0] > 1 && kv[w]->stride[0] == 0)
            kv[w]->shape[0] = 1;
    const char *refused = g->dsinks           ? "dsinks"
                          : g->dropout_p != 0 ? "dropout_p"
                          : g->seqs || g->q_offsets || g->kv_offsets ? "seqs"
                                                                     : NULL;
    if (refused)
        return mpi_fail(SDPA_ERR_UNSUPPORTED,
                        "%s: grad->%s is not supported across ranks (dsinks: "
                        "sinks are refused; dropout's mask and ragged "
                        "batches follow positions within a call)",
                        fn, refused);
    if (g->grad_dtype && !(g->grad_dtype == g->dtype))
        return mpi_fail(SDPA_ERR_BAD_DTYPE,
                        "%s: grad->grad_dtype %d: across ranks the gradients "
                        "are in dtype %d (0 or that)",
                        fn, g->grad_dtype, g->dtype);
    if (g->dbias.data && !g->bias.data)
        return mpi_fail(SDPA_ERR_NULL_POINTER,
                        "%s: grad->dbias is set but bias.data is NULL", fn);
    if (!g->lse.data)
        return mpi_fail(SDPA_ERR_NULL_POINTER,
                        "%s: grad->lse.data is NULL (the forward's lse is "
                        "required)",
                        fn);
    if (g->k.shape[0] != g->v.shape[0])
        return mpi_fail(SDPA_ERR_UNSUPPORTED,
                        "%s: k.shape[0] is %lld and v.shape[0] %lld (after "
                        "zero-stride broadcasts): k and v travel as one "
                        "shard, broadcast over N both or neither",
                        fn, (long long)g->k.shape[0], (long long)g->v.shape[0]);
    /* The attention's arguments, as the forward's. */
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = g->dtype;
    a.causal = g->causal;
    a.flags = g->flags;
    a.scale = g->scale;
    a.softcap = g->softcap;
    a.kv_lens = g->kv_lens;
    a.q = g->q;
    a.k = g->k;
    a.v = g->v;
    a.mask = g->mask;
    a.bias = g->bias;
    a.out = g->out;
    a.lse = g->lse;
    a.window_left = g->window_left;
    a.window_right = g->window_right;
    a.alibi_slopes = g->alibi_slopes;
    a.sinks = g->sinks;
    a.kv_dtype = g->kv_dtype;
    a.bias_dtype = g->bias_dtype;
    status = mpi_job_import(j, &a);
    if (status != SDPA_OK)
        return status;
    const int64_t dq[4] = {j->n, j->hq, j->rows, j->dk};
    const int64_t dout[4] = {j->n, j->hq, j->rows, j->dv};
    const int64_t dk[4] = {j->nk, j->hkv, j->rows, j->dk};
    const int64_t dv[4] = {j->nk, j->hkv, j->rows, j->dv};
    status = check_grad(j, "dout", &g->dout, dout);
    if (status == SDPA_OK)
        status = check_grad(j, "dq", &g->dq, dq);
    if (status == SDPA_OK)
        status = check_grad(j, "dk", &g->dk, dk);
    if (status == SDPA_OK)
        status = check_grad(j, "dv", &g->dv, dv);
    if (status == SDPA_OK)
        status = check_overlaps(j, g);
    return status;
}

int sdpa_mpi_backward(sdpa_ctx *ctx, MPI_Comm comm,
                      const sdpa_mpi_backward_args *args)
{
    mpi_job j;
    bwd_state st = {0};
    const char *fn = "sdpa_mpi_backward";
    int status = backward_start(&j, &st, ctx, comm, args);
    int layout = status == SDPA_OK ? args->layout : 0;
    int64_t *table;
    mpi_seg *segs;
    char *kvbuf[2] = {NULL, NULL}, *acc[3] = {NULL, NULL, NULL};
    size_t most;
    bool exchanged;
    status =
        mpi_ring_begin(&j, status, layout, &table, &segs, &most, &exchanged);
    if (status == SDPA_OK)
        status = check_dbias(&j, &st.g);
    if (status == SDPA_OK)
        status = mpi_check_rows(&j, &segs[2 * j.rank], 2);
    if (status == SDPA_OK && j.ranks > 1) {
        for (int b = 0; b < 2; b++)
            kvbuf[b] = malloc(most * j.es);
        /* acc[s % 3] at ring step s, acc[P % 3] home: on 2 ranks acc[0]
         * is never used */
        for (int b = j.ranks > 2 ? 0 : 1; b < 3; b++)
            if (!(acc[b] = malloc(most * j.es)))
                status = SDPA_ERR_OUT_OF_MEMORY;
        if (!kvbuf[0] || !kvbuf[1] || status != SDPA_OK)
            status = mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                              "%s: %d K/V-sized buffers of %zu bytes", fn,
                              j.ranks > 2 ? 5 : 4, most * j.es);
    }
    if (status == SDPA_OK) {
        /* no overflow: bounded by the caller's dq and a packed shard */
        const int64_t tq = j.rows < TILE ? j.rows : TILE;
        size_t dq_part = (size_t)(j.n * j.hq * tq * j.dk);
        size_t dkv_part = (size_t)(j.nk * j.hkv * TILE * (j.dk + j.dv));
        const int64_t *e = st.g.dbias.shape;
        size_t dbias_part = st.g.dbias.data
                                ? (size_t)(e[0] * e[1] * (e[2] > 1 ? tq : 1) *
                                           (e[3] > 1 ? TILE : 1))
                                : 0;
        size_t all = dq_part + dkv_part + dbias_part;
        j.scratch = malloc(all * j.es);
        if (!j.scratch)
            status =
                mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                         "%s: %zu bytes of tile gradients", fn, all * j.es);
        st.dq_part = j.scratch;
        st.dkv_part = (char *)j.scratch + dq_part * j.es;
        st.dbias_part = (char *)st.dkv_part + dkv_part * j.es;
    }
    if (status == SDPA_OK) {
        /* The tiles' rows without a key in a tile are no error. */
        status =
            sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
        j.policy_set = status == SDPA_OK;
    }
    if (exchanged) /* every rank is here */
        status = mpi_agree(&j, status);

    if (status == SDPA_OK) {
        const int P = j.ranks, me = j.rank;
        const MPI_Datatype type =
            j.a.dtype == SDPA_FLOAT32 ? MPI_FLOAT : MPI_DOUBLE;
        const int next = (me + 1) % P, prev = (me - 1 + P) % P;
        const mpi_seg *mine = &segs[2 * me];
        j.call = backward_call;
        j.user = &st;
        zero_view(&st.g.dq, j.es);
        zero_view(&st.g.dk, j.es);
        zero_view(&st.g.dv, j.es);
        if (st.g.dbias.data)
            zero_view(&st.g.dbias, j.es);
        MPI_Request kv_req[2], acc_req = MPI_REQUEST_NULL;
        int kv_n = 0, acc_send = 0, failed = SDPA_OK;
        MPI_Request reqs[4];
        /* Step 0: the first half of the own block, while the own K/V shard
         * goes to the next rank and the previous rank's arrives. */
        if (P > 1) {
            mpi_pack_shard(&j, &j.a.k, &j.a.v, kvbuf[0]);
            int64_t from_rows = table[prev * DESC_COUNT + DESC_ROWS];
            MPI_Irecv(kvbuf[1], (int)mpi_shard_elems(&j, from_rows), type, prev,
                      TAG_KV, comm, &kv_req[kv_n++]);
            int count = (int)mpi_shard_elems(&j, j.rows);
            MPI_Isend(kvbuf[0], count, type, next, TAG_KV, comm,
                      &kv_req[kv_n++]);
            j.stats.bytes_sent += (uint64_t)count * j.es;
        }
        st.dk_to = st.g.dk;
        st.dv_to = st.g.dv;
        st.req = kv_req;
        st.nreq = kv_n;
        failed = run_tiles(&j, mine, mine, &j.a.k, &j.a.v, 0);
        double t0 = mpi_now();
        MPI_Waitall(kv_n, kv_req, MPI_STATUSES_IGNORE);
        j.stats.wait_seconds += mpi_now() - t0;
        int cur = 1; /* kvbuf[cur]: the shard in hand */
        for (int s = 1; s < P; s++) {
            const int src = (me - s + P) % P;
            const int64_t src_rows = table[src * DESC_COUNT + DESC_ROWS];
            const int count = (int)mpi_shard_elems(&j, src_rows);
            char *mine_acc = acc[s % 3], *in_acc = acc[(s + 1) % 3];
            int n = 0;
            if (s < P - 1) {
                int from = (me - s - 1 + P) % P; /* held at step s + 1 */
                int64_t from_rows = table[from * DESC_COUNT + DESC_ROWS];
                MPI_Irecv(kvbuf[1 - cur], (int)mpi_shard_elems(&j, from_rows),
                          type, prev, TAG_KV, comm, &reqs[n++]);
                MPI_Isend(kvbuf[cur], count, type, next, TAG_KV, comm,
                          &reqs[n++]);
                j.stats.bytes_sent += (uint64_t)count * j.es;
            }
            if (s >= 2) /* the accumulator of shard src, from prev's step */
                MPI_Irecv(in_acc, count, type, prev, TAG_DKV, comm, &reqs[n++]);
            if (acc_send) /* the previous step's accumulator, going on */
                reqs[n++] = acc_req;
            acc_send = 0;
            sdpa_tensor kt, vt;
            mpi_shard_views(&j, kvbuf[cur], src_rows, &kt, &vt);
            mpi_shard_views(&j, mine_acc, src_rows, &st.dk_to, &st.dv_to);
            memset(mine_acc, 0, (size_t)count * j.es);
            st.req = reqs;
            st.nreq = n;
            if (failed == SDPA_OK)
                failed = run_tiles(&j, mine, &segs[2 * src], &kt, &vt, -1);
            t0 = mpi_now();
            MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
            j.stats.wait_seconds += mpi_now() - t0;
            if (s >= 2) /* the ranks before plus this rank's share (the
                           sum is commutative: the same bits) */
                add_flat(mine_acc, in_acc, (size_t)count, j.es);
            MPI_Isend(mine_acc, count, type, next, TAG_DKV, comm, &acc_req);
            j.stats.bytes_sent += (uint64_t)count * j.es;
            acc_send = 1;
            cur = 1 - cur;
        }
        /* The second half of the own block, while the own accumulator
         * comes home. */
        int n = 0;
        char *home = acc[P % 3];
        const int own = (int)mpi_shard_elems(&j, j.rows);
        if (P > 1)
            MPI_Irecv(home, own, type, prev, TAG_DKV, comm, &reqs[n++]);
        if (acc_send)
            reqs[n++] = acc_req;
        st.dk_to = st.g.dk;
        st.dv_to = st.g.dv;
        st.req = reqs;
        st.nreq = n;
        if (failed == SDPA_OK)
            failed = run_tiles(&j, mine, mine, &j.a.k, &j.a.v, 1);
        t0 = mpi_now();
        MPI_Waitall(n, reqs, MPI_STATUSES_IGNORE);
        j.stats.wait_seconds += mpi_now() - t0;
        if (P > 1) { /* the own share, then the other ranks' */
            sdpa_tensor hk, hv;
            mpi_shard_views(&j, home, j.rows, &hk, &hv);
            add_into(&st.g.dk, hk.data, j.es);
            add_into(&st.g.dv, hv.data, j.es);
        }
        status = mpi_agree(&j, failed);
    }
    free(table);
    free(segs);
    for (int b = 0; b < 2; b++)
        free(kvbuf[b]);
    for (int b = 0; b < 3; b++)
        free(acc[b]);
    if (!args || args->struct_size < SDPA_MPI_BACKWARD_ARGS_SIZE_V1)
        return mpi_job_end(&j, NULL, status);
    sdpa_mpi_args view = {.struct_size = SDPA_MPI_ARGS_SIZE_V1,
                          .stats = args->stats};
    return mpi_job_end(&j, &view, status);
}
