/*
 * sdpa_mpi_prefill: context-parallel self-attention by ring. Each rank
 * keeps its query rows and merges its partial results in the caller's out
 * (with each row's running lse beside it); the K/V shards travel round the
 * ring, packed contiguous [Nk, Hkv, T_s, Dk] then [Nk, Hkv, T_s, Dv], with
 * MPI_Isend / MPI_Irecv posted before the compute on the shard in hand and
 * driven (MPI_Testall) between pieces of it.
 *
 * Memory beyond the caller's tensors and the two ring buffers: the running
 * lse (rows values), one piece's partial result (PIECE_ROWS rows x (Dv +
 * 1) values per item and head) and libsdpa's scratch.
 */
#include "internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* Query rows per piece of compute: a few milliseconds of work for D = 64
 * between two MPI_Testall calls while transfers are in flight, and the
 * size of the part buffer, which holds one piece's partial result. */
enum { PIECE_ROWS = 2048 };

/* The shards: segs[2r], segs[2r + 1] of rank r (length 0 if unused). */
static int layout_segments(mpi_job *j, int layout, const int64_t *table,
                           mpi_seg *segs, int64_t *total)
{
    int64_t t = 0;
    for (int r = 0; r < j->ranks; r++)
        t += table[r * DESC_COUNT + DESC_ROWS];
    *total = t;
    int64_t off = 0;
    for (int r = 0; r < j->ranks; r++) {
        int64_t rows = table[r * DESC_COUNT + DESC_ROWS];
        mpi_seg *s = &segs[2 * r];
        if (layout == SDPA_MPI_LAYOUT_CONTIGUOUS) {
            s[0] = (mpi_seg){off, rows, 0};
            s[1] = (mpi_seg){off + rows, 0, rows};
            off += rows;
            continue;
        }
        int64_t o[2], l[2];
        int status = sdpa_mpi_shard(layout, t, r, j->ranks, o, l);
        if (status != SDPA_OK || l[0] + l[1] != rows)
            return mpi_fail(SDPA_ERR_SHAPE_MISMATCH,
                            "%s: rank %d holds %lld query rows; the balanced "
                            "layout of T = %lld over %d ranks gives it "
                            "%lld + %lld (sdpa_mpi_shard)",
                            j->fn, r, (long long)rows, (long long)t, j->ranks,
                            status == SDPA_OK ? (long long)l[0] : 0LL,
                            status == SDPA_OK ? (long long)l[1] : 0LL);
        s[0] = (mpi_seg){o[0], l[0], 0};
        s[1] = (mpi_seg){o[1], l[1], l[0]};
    }
    return SDPA_OK;
}

/* Elements of rank r's packed shard, 0 on overflow. */
static size_t shard_elems(const mpi_job *j, int64_t rows)
{
    size_t per_row = (size_t)(j->dk + j->dv), n;
    if (!mpi_mul_size((size_t)(j->nk * j->hkv), (size_t)rows, &n) ||
        !mpi_mul_size(n, per_row, &n))
        return 0;
    return n;
}

/* Packs the caller's K and V (any strides) contiguous into buf. */
static void pack_shard(const mpi_job *j, char *buf)
{
    const sdpa_tensor *src[2] = {&j->a.k, &j->a.v};
    const int64_t d[2] = {j->dk, j->dv};
    for (int w = 0; w < 2; w++) {
        const sdpa_tensor *t = src[w];
        size_t row_bytes = (size_t)d[w] * j->es;
        for (int64_t n = 0; n < j->nk; n++)
            for (int64_t h = 0; h < j->hkv; h++)
                for (int64_t i = 0; i < j->rows; i++) {
                    int64_t at =
                        n * t->stride[0] + h * t->stride[1] + i * t->stride[2];
                    memcpy(buf, (const char *)t->data + (size_t)at * j->es,
                           row_bytes);
                    buf += row_bytes;
                }
    }
}

/* The packed shard of `rows` rows at buf as K and V views. */
static void shard_views(const mpi_job *j, char *buf, int64_t rows,
                        sdpa_tensor *kt, sdpa_tensor *vt)
{
    const int64_t hk = j->hkv, dk = j->dk, dv = j->dv;
    *kt = (sdpa_tensor){
        buf, {j->nk, hk, rows, dk}, {hk * rows * dk, rows * dk, dk, 1}};
    char *v = buf + (size_t)(j->nk * hk * rows * dk) * j->es;
    *vt = (sdpa_tensor){
        v, {j->nk, hk, rows, dv}, {hk * rows * dv, rows * dv, dv, 1}};
}

/* One ring step: this rank's query segments against the shard of rank
 * src (segments ks), keeping the transfers in req moving. For every row
 * the blocks are merged in the order of the steps, then of ks. */
static int step_compute(mpi_job *j, const mpi_seg *qs, const mpi_seg *ks,
                        const sdpa_tensor *kt, const sdpa_tensor *vt,
                        MPI_Request *req, int nreq)
{
    for (int q = 0; q < 2; q++)
        for (int k = 0; k < 2; k++) {
            if (ks[k].len == 0)
                continue;
            /* A block whose results are merged goes in pieces that fit the
             * part buffer. On one rank, the rows' first key segment comes
             * before anything and is merged into nothing: its calls write
             * out directly, whatever their size, so that one rank with one
             * shard makes the calls sdpa_forward would (one, or one per
             * batch item with kv_lens) and gets its bits. */
            const int64_t piece =
                j->ranks == 1 && k == 0 ? INT64_MAX : PIECE_ROWS;
            const int64_t end = qs[q].off + qs[q].len;
            for (int64_t a = qs[q].off, e; a < end; a = e) {
                e = end - a > piece ? a + piece : end;
                int status =
                    mpi_block(j, &qs[q], a, e, kt, vt, ks[k].local, ks[k].off,
                              ks[k].off + ks[k].len, ks[k].off);
                if (status != SDPA_OK)
                    return status;
                if (nreq > 0) {
                    int done;
                    MPI_Testall(nreq, req, &done, MPI_STATUSES_IGNORE);
                }
            }
        }
    return SDPA_OK;
}

int sdpa_mpi_prefill(sdpa_ctx *ctx, MPI_Comm comm, const sdpa_mpi_args *args)
{
    mpi_job j;
    const char *fn = "sdpa_mpi_prefill";
    int status = mpi_job_start(&j, fn, ctx, comm, args);
    int layout = status == SDPA_OK ? args->layout : 0;
    if (status == SDPA_OK && layout != SDPA_MPI_LAYOUT_CONTIGUOUS &&
        layout != SDPA_MPI_LAYOUT_BALANCED)
        status = mpi_fail(SDPA_ERR_BAD_OPTION_VALUE,
                          "%s: layout %d is not an SDPA_MPI_LAYOUT_* value", fn,
                          layout);
    if (status == SDPA_OK && j.a.k.shape[2] != j.rows)
        status = mpi_fail(SDPA_ERR_SHAPE_MISMATCH,
                          "%s: k holds %lld rows, q %lld: a rank holds the "
                          "K/V rows of its query positions",
                          fn, (long long)j.a.k.shape[2], (long long)j.rows);
    int64_t *table = NULL;
    mpi_seg *segs = NULL;
    char *ring[2] = {NULL, NULL};
    if (status == SDPA_OK) {
        table = malloc((size_t)j.ranks * DESC_COUNT * sizeof *table);
        segs = malloc(2 * (size_t)j.ranks * sizeof *segs);
        if (!table || !segs)
            status = mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                              "%s: %d ranks' "
                              "descriptions",
                              fn, j.ranks);
    }
    status = mpi_agree(&j, status);
    const bool exchanged = status == SDPA_OK; /* the same on every rank */
    if (exchanged)
        status = mpi_exchange(&j, layout, false, table);
    int64_t total = 0;
    if (status == SDPA_OK)
        status = layout_segments(&j, layout, table, segs, &total);
    /* Checks against the whole problem, on this rank's arguments. */
    j.tq_total = j.tk_total = total;
    size_t most = 0;
    for (int r = 0; status == SDPA_OK && r < j.ranks; r++) {
        size_t e = shard_elems(&j, table[r * DESC_COUNT + DESC_ROWS]);
        if (e == 0 || e > INT_MAX)
            status = mpi_fail(SDPA_ERR_OVERFLOW,
                              "%s: rank %d's K/V shard is above INT_MAX "
                              "elements (an MPI count)",
                              fn, r);
        most = e > most ? e : most;
    }
    for (int64_t b = 0; status == SDPA_OK && j.a.kv_lens && b < j.n; b++)
        if (j.a.kv_lens[b] < 0 || j.a.kv_lens[b] > total)
            status = mpi_fail(SDPA_ERR_BAD_KV_LEN,
                              "%s: kv_lens[%lld] is %lld, outside [0, T = "
                              "%lld]",
                              fn, (long long)b, (long long)j.a.kv_lens[b],
                              (long long)total);
    if (status == SDPA_OK)
        status = mpi_check_side(&j, "mask", &j.a.mask, total);
    if (status == SDPA_OK)
        status = mpi_check_side(&j, "bias", &j.a.bias, total);
    /* Everything that can be checked is checked here, before the first
     * write to out: after that, a failure leaves out unspecified. */
    if (status == SDPA_OK)
        status = mpi_check_outputs(&j);
    if (status == SDPA_OK)
        status = mpi_check_rows(&j, &segs[2 * j.rank], 2);
    if (status == SDPA_OK && j.ranks > 1) {
        ring[0] = malloc(most * j.es);
        ring[1] = malloc(most * j.es);
        if (!ring[0] || !ring[1])
            status =
                mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                         "%s: two K/V buffers of %zu bytes", fn, most * j.es);
    }
    if (status == SDPA_OK)
        status = mpi_job_buffers(&j, false,
                                 j.rows < PIECE_ROWS ? j.rows : PIECE_ROWS);
    if (exchanged) /* every rank is here */
        status = mpi_agree(&j, status);

    if (status == SDPA_OK) {
        const int P = j.ranks, me = j.rank;
        const MPI_Datatype type =
            j.a.dtype == SDPA_FLOAT32 ? MPI_FLOAT : MPI_DOUBLE;
        if (P > 1)
            pack_shard(&j, ring[0]);
        int cur = 0, failed = SDPA_OK;
        for (int s = 0; s < P; s++) {
            int src = (me - s + P) % P;
            int64_t src_rows = table[src * DESC_COUNT + DESC_ROWS];
            MPI_Request req[2];
            int nreq = 0;
            if (s < P - 1) {
                int from = (me - s - 1 + P) % P; /* held at step s + 1 */
                int64_t from_rows = table[from * DESC_COUNT + DESC_ROWS];
                MPI_Irecv(ring[1 - cur], (int)shard_elems(&j, from_rows), type,
                          (me - 1 + P) % P, s, comm, &req[nreq++]);
                int count = (int)shard_elems(&j, src_rows);
                MPI_Isend(ring[cur], count, type, (me + 1) % P, s, comm,
                          &req[nreq++]);
                j.stats.bytes_sent += (uint64_t)count * j.es;
            }
            sdpa_tensor kt = j.a.k, vt = j.a.v; /* step 0: the caller's */
            if (s > 0)
                shard_views(&j, ring[cur], src_rows, &kt, &vt);
            if (failed == SDPA_OK)
                failed = step_compute(&j, &segs[2 * me], &segs[2 * src], &kt,
                                      &vt, req, nreq);
            double t0 = mpi_now();
            MPI_Waitall(nreq, req, MPI_STATUSES_IGNORE);
            j.stats.wait_seconds += mpi_now() - t0;
            cur = 1 - cur;
        }
        if (failed == SDPA_OK)
            failed = mpi_check_lse(&j, &segs[2 * me], 2);
        status = mpi_agree(&j, failed);
        if (status == SDPA_OK)
            mpi_write_result(&j);
    }
    free(table);
    free(segs);
    free(ring[0]);
    free(ring[1]);
    return mpi_job_end(&j, args, status);
}
