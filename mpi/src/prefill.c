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
    int64_t *table;
    mpi_seg *segs;
    char *ring[2] = {NULL, NULL};
    size_t most;
    bool exchanged;
    status =
        mpi_ring_begin(&j, status, layout, &table, &segs, &most, &exchanged);
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
            mpi_pack_shard(&j, &j.a.k, &j.a.v, ring[0]);
        int cur = 0, failed = SDPA_OK;
        for (int s = 0; s < P; s++) {
            int src = (me - s + P) % P;
            int64_t src_rows = table[src * DESC_COUNT + DESC_ROWS];
            MPI_Request req[2];
            int nreq = 0;
            if (s < P - 1) {
                int from = (me - s - 1 + P) % P; /* held at step s + 1 */
                int64_t from_rows = table[from * DESC_COUNT + DESC_ROWS];
                MPI_Irecv(ring[1 - cur], (int)mpi_shard_elems(&j, from_rows),
                          type, (me - 1 + P) % P, s, comm, &req[nreq++]);
                int count = (int)mpi_shard_elems(&j, src_rows);
                MPI_Isend(ring[cur], count, type, (me + 1) % P, s, comm,
                          &req[nreq++]);
                j.stats.bytes_sent += (uint64_t)count * j.es;
            }
            sdpa_tensor kt = j.a.k, vt = j.a.v; /* step 0: the caller's */
            if (s > 0)
                mpi_shard_views(&j, ring[cur], src_rows, &kt, &vt);
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
