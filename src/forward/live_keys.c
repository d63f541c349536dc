/*
 * Which keys a slice of work may read (include/sdpa.h, rule 5): key j is
 * live when at least one query row of the slice may see it — below the
 * row's key limit (kv_lens, causality), not forbidden by the mask, and not
 * given a −∞ bias. The paths run their products over the live keys only,
 * in runs, so a key that no row of the slice may see is never read: its K
 * and V rows may hold anything (garbage, NaN) without reaching the output.
 */
#include "core/problem.h"
#include "forward/key_range.h"
#include "forward/row_block.h"

#include <math.h>
#include <string.h>

/* Does the mask or the bias forbid key j of row i of head h? */
static bool forbidden(const sdpa_problem *p, int64_t b, int64_t h, int64_t i,
                      int64_t j)
{
    if (p->mask.data) {
        const uint8_t *m = (const uint8_t *)sdpa_at(&p->mask, 1, b, h, i);
        if ((m[j * p->mask.stride[3]] != 0) != p->mask_nonzero_allows)
            return true;
    }
    if (p->bias.data) {
        const char *row =
            sdpa_at(&p->bias, sdpa_dtype_size(p->bias_type), b, h, i);
        if (sdpa_value_at(row, p->bias_type, j * p->bias.stride[3]) ==
            -INFINITY)
            return true;
    }
    return false;
}

int64_t sdpa_live_keys(const sdpa_problem *p, const sdpa_row_block *slice,
                       int64_t kb, int64_t bk, uint8_t *live)
{
    const int64_t n = slice->heads * slice->rows;
    memset(live, 0, (size_t)bk);
    /* A mask and bias that are the same for every head and row of the
     * slice are read once, over the union of the rows' key ranges: from
     * the first row's start to the last row's limit (both never decrease
     * down the rows, and consecutive rows' ranges overlap or touch). */
    bool same_rows =
        (!p->mask.data || (p->mask.stride[1] == 0 && p->mask.stride[2] == 0)) &&
        (!p->bias.data || (p->bias.stride[1] == 0 && p->bias.stride[2] == 0));
    int64_t count = 0;
    for (int64_t r = 0; r < n && count < bk; r++) {
        int64_t h = slice->head_first + r % slice->heads;
        int64_t i = slice->row_first + r / slice->heads;
        int64_t begin = sdpa_key_start(p, slice->batch, i);
        if (same_rows) /* the last row's limit is the furthest */
            i = slice->row_first + slice->rows - 1;
        int64_t end = sdpa_key_limit(p, slice->batch, i);
        end = end < kb + bk ? end : kb + bk;
        begin = begin > kb ? begin : kb;
        for (int64_t j = begin; j < end; j++)
            if (!live[j - kb] && !forbidden(p, slice->batch, h, i, j)) {
                live[j - kb] = 1;
                count++;
            }
        if (same_rows)
            break;
    }
    return count;
}

int64_t sdpa_next_run(const uint8_t *live, int64_t from, int64_t bk,
                      int64_t *run_end)
{
    while (from < bk && !live[from])
        from++;
    int64_t end = from;
    while (end < bk && live[end])
        end++;
    *run_end = end;
    return from;
}

bool sdpa_live_run(const uint8_t *live, int64_t live_count, int64_t n,
                   int64_t *j0, int64_t *j1)
{
    if (live_count >= n) { /* every key live: one run */
        *j1 = n;
        return *j0 < n;
    }
    *j0 = sdpa_next_run(live, *j0, n, j1);
    return *j0 < n;
}
