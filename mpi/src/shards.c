/* The ring's shards, shared by sdpa_mpi_prefill and sdpa_mpi_backward: the
 * layouts' segments, the packed K/V shards that travel (contiguous [Nk,
 * Hkv, T_s, Dk] then [Nk, Hkv, T_s, Dv]) and the checks of a ring call
 * against the whole problem. */
#include "internal.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

int mpi_layout_segments(mpi_job *j, int layout, const int64_t *table,
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

size_t mpi_shard_elems(const mpi_job *j, int64_t rows)
{
    size_t per_row = (size_t)(j->dk + j->dv), n;
    if (!mpi_mul_size((size_t)(j->nk * j->hkv), (size_t)rows, &n) ||
        !mpi_mul_size(n, per_row, &n))
        return 0;
    return n;
}

void mpi_pack_shard(const mpi_job *j, const sdpa_tensor *k,
                    const sdpa_tensor *v, char *buf)
{
    const sdpa_tensor *src[2] = {k, v};
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

void mpi_shard_views(const mpi_job *j, char *buf, int64_t rows, sdpa_tensor *kt,
                     sdpa_tensor *vt)
{
    const int64_t hk = j->hkv, dk = j->dk, dv = j->dv;
    *kt = (sdpa_tensor){
        buf, {j->nk, hk, rows, dk}, {hk * rows * dk, rows * dk, dk, 1}};
    char *v = buf + (size_t)(j->nk * hk * rows * dk) * j->es;
    *vt = (sdpa_tensor){
        v, {j->nk, hk, rows, dv}, {hk * rows * dv, rows * dv, dv, 1}};
}

int mpi_ring_checks(mpi_job *j, int layout, const int64_t *table, mpi_seg *segs,
                    size_t *most)
{
    int64_t total = 0;
    int status = mpi_layout_segments(j, layout, table, segs, &total);
    j->tq_total = j->tk_total = total;
    *most = 0;
    for (int r = 0; status == SDPA_OK && r < j->ranks; r++) {
        size_t e = mpi_shard_elems(j, table[r * DESC_COUNT + DESC_ROWS]);
        if (e == 0 || e > INT_MAX)
            status = mpi_fail(SDPA_ERR_OVERFLOW,
                              "%s: rank %d's K/V shard is above INT_MAX "
                              "elements (an MPI count)",
                              j->fn, r);
        *most = e > *most ? e : *most;
    }
    for (int64_t b = 0; status == SDPA_OK && j->a.kv_lens && b < j->n; b++)
        if (j->a.kv_lens[b] < 0 || j->a.kv_lens[b] > total)
            status = mpi_fail(SDPA_ERR_BAD_KV_LEN,
                              "%s: kv_lens[%lld] is %lld, outside [0, T = "
                              "%lld]",
                              j->fn, (long long)b, (long long)j->a.kv_lens[b],
                              (long long)total);
    if (status == SDPA_OK)
        status = mpi_check_side(j, "mask", &j->a.mask, total);
    if (status == SDPA_OK)
        status = mpi_check_side(j, "bias", &j->a.bias, total);
    return status;
}

int mpi_ring_begin(mpi_job *j, int status, int layout, int64_t **table,
                   mpi_seg **segs, size_t *most, bool *exchanged)
{
    *table = NULL;
    *segs = NULL;
    *most = 0;
    if (status == SDPA_OK && layout != SDPA_MPI_LAYOUT_CONTIGUOUS &&
        layout != SDPA_MPI_LAYOUT_BALANCED)
        status = mpi_fail(SDPA_ERR_BAD_OPTION_VALUE,
                          "%s: layout %d is not an SDPA_MPI_LAYOUT_* value",
                          j->fn, layout);
    if (status == SDPA_OK && j->a.k.shape[2] != j->rows)
        status =
            mpi_fail(SDPA_ERR_SHAPE_MISMATCH,
                     "%s: k holds %lld rows, q %lld: a rank holds the "
                     "K/V rows of its query positions",
                     j->fn, (long long)j->a.k.shape[2], (long long)j->rows);
    if (status == SDPA_OK) {
        *table = malloc((size_t)j->ranks * DESC_COUNT * sizeof **table);
        *segs = malloc(2 * (size_t)j->ranks * sizeof **segs);
        if (!*table || !*segs)
            status = mpi_fail(SDPA_ERR_OUT_OF_MEMORY,
                              "%s: %d ranks' descriptions", j->fn, j->ranks);
    }
    status = mpi_agree(j, status);
    *exchanged = status == SDPA_OK; /* the same on every rank */
    if (*exchanged)
        status = mpi_exchange(j, layout, false, *table);
    if (status == SDPA_OK)
        status = mpi_ring_checks(j, layout, *table, *segs, most);
    return status;
}
