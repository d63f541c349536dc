/*
 * sdpa_mpi_decode: the KV cache split by key range over the ranks, the
 * query rows replicated. Each rank computes its partial result over its
 * keys (the causal diagonal and kv_lens measured on the whole cache); the
 * partials (out and lse, contiguous) are gathered on every rank and merged
 * in rank order with sdpa_merge: the same bits everywhere.
 */
#include "internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int sdpa_mpi_decode(sdpa_ctx *ctx, MPI_Comm comm, const sdpa_mpi_args *args)
{
    mpi_job j;
    const char *fn = "sdpa_mpi_decode";
    int status = mpi_job_start(&j, fn, ctx, comm, args);
    if (status == SDPA_OK && args->layout != 0)
        status = mpi_fail(SDPA_ERR_BAD_OPTION_VALUE,
                          "%s: layout is %d: decode takes none (0)", fn,
                          args->layout);
    int64_t *table = NULL;
    if (status == SDPA_OK) {
        table = malloc((size_t)j.ranks * DESC_COUNT * sizeof *table);
        if (!table)
            status = mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                              "%s: %d ranks' descriptions", fn, j.ranks);
    }
    status = mpi_agree(&j, status);
    const bool exchanged = status == SDPA_OK; /* the same on every rank */
    if (exchanged)
        status = mpi_exchange(&j, 0, true, table);
    int64_t first = 0, total = 0; /* this rank's first key, all keys */
    for (int r = 0; status == SDPA_OK && r < j.ranks; r++) {
        if (r == j.rank)
            first = total;
        total += table[r * DESC_COUNT + DESC_KROWS];
    }
    j.tq_total = j.rows;
    j.tk_total = total;
    for (int64_t b = 0; status == SDPA_OK && j.a.kv_lens && b < j.n; b++)
        if (j.a.kv_lens[b] < 0 || j.a.kv_lens[b] > total)
            status = mpi_fail(SDPA_ERR_BAD_KV_LEN,
                              "%s: kv_lens[%lld] is %lld, outside [0, Tk = "
                              "%lld] (the keys of all ranks)",
                              fn, (long long)b, (long long)j.a.kv_lens[b],
                              (long long)total);
    const int64_t my_keys = j.a.k.shape[2];
    if (status == SDPA_OK)
        status = mpi_check_side(&j, "mask", &j.a.mask, my_keys);
    if (status == SDPA_OK)
        status = mpi_check_side(&j, "bias", &j.a.bias, my_keys);
    size_t part = 0; /* elements of one rank's out and lse */
    if (status == SDPA_OK && (!mpi_mul_size((size_t)(j.n * j.hq * j.rows),
                                            (size_t)(j.dv + 1), &part) ||
                              part > INT_MAX))
        status = mpi_fail(SDPA_ERR_OVERFLOW,
                          "%s: a partial result is above INT_MAX elements "
                          "(an MPI count)",
                          fn);
    char *gathered = NULL;
    sdpa_tensor *views = NULL;
    if (status == SDPA_OK) {
        gathered = malloc((size_t)j.ranks * part * j.es);
        views = malloc(2 * (size_t)j.ranks * sizeof *views);
        if (!gathered || !views)
            status = mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                              "%s: %d partial results of %zu bytes", fn,
                              j.ranks, part * j.es);
    }
    if (status == SDPA_OK)
        /* One block, whose calls take disjoint rows: each writes its rows
         * directly, none is merged, no part buffer. */
        status = mpi_job_buffers(&j, true, 0);
    if (exchanged)
        status = mpi_agree(&j, status);

    if (status == SDPA_OK) {
        const mpi_seg qs = {0, j.rows, 0};
        int failed = mpi_block(&j, &qs, 0, j.rows, &j.a.k, &j.a.v, 0, first,
                               first + my_keys, 0);
        status = mpi_agree(&j, failed);
    }
    if (status == SDPA_OK) {
        const MPI_Datatype type =
            j.a.dtype == SDPA_FLOAT32 ? MPI_FLOAT : MPI_DOUBLE;
        double t0 = mpi_now();
        /* acc_lse follows the private acc in one block: out, then lse */
        MPI_Allgather(j.acc.data, (int)part, type, gathered, (int)part, type,
                      comm);
        j.stats.wait_seconds += mpi_now() - t0;
        j.stats.bytes_sent += (uint64_t)part * j.es * (uint64_t)(j.ranks - 1);
        const int64_t rows = j.n * j.hq * j.rows;
        for (int p = 0; p < j.ranks; p++) {
            char *base = gathered + (size_t)p * part * j.es;
            views[p] =
                (sdpa_tensor){base,
                              {j.n, j.hq, j.rows, j.dv},
                              {j.hq * j.rows * j.dv, j.rows * j.dv, j.dv, 1}};
            views[j.ranks + p] =
                (sdpa_tensor){base + (size_t)(rows * j.dv) * j.es,
                              {j.n, j.hq, j.rows, 1},
                              {j.hq * j.rows, j.rows, 1, 1}};
        }
        /* The caller's policy for the whole rows: the same data and
         * decision on every rank. */
        sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, j.policy);
        sdpa_merge_args m = SDPA_MERGE_ARGS_INIT;
        m.dtype = j.a.dtype;
        m.parts = j.ranks;
        m.outs = views;
        m.lses = views + j.ranks;
        m.out = j.a.out;
        m.lse = j.a.lse;
        t0 = mpi_now();
        status = sdpa_merge(ctx, &m);
        j.stats.compute_seconds += mpi_now() - t0;
        if (status != SDPA_OK)
            status = mpi_fail(status, "%s: %s", fn, sdpa_ctx_last_error(ctx));
    }
    free(table);
    free(gathered);
    free(views);
    return mpi_job_end(&j, args, status);
}
