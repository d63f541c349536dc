/* The online softmax engine, instantiated for float and double. */
#include "forward/key_range.h"
#include "forward/plan.h"
#include "paths/online_softmax.h"
#include "kernels/rows.h"
#include "kernels/vexp.h"

#include <cblas.h>
#include <math.h>

/* The streaming kernels' prefetch hint: keys [j, j + n) of batch item b
 * and KV head hk in the K or V view, rows of `dim` elements, as far as
 * they lie in one page (the rest is not named). */
static sdpa_row_prefetch kv_prefetch(const sdpa_problem *p,
                                     const sdpa_view *view, int64_t b,
                                     int64_t hk, int64_t j, int64_t n,
                                     int64_t dim)
{
    const int64_t es = (int64_t)sdpa_dtype_size(p->kv_type);
    sdpa_row_prefetch pf = {
        NULL, view->stride[2] * es, 0, sdpa_kv_units(p, dim) * es, NULL, NULL};
    if (n > 0) {
        pf.base = sdpa_kv_row(p, view, b, hk, j);
        pf.rows = sdpa_kv_span(p, j, n);
    }
    return pf;
}

/* The hint of one pass over a block: keys [j, j + n) (n at most
 * SDPA_FUSED_BLOCK_K) of batch item b and KV head hk, all of them. Where
 * they lie in several pages, rows[] gets their addresses with the pages
 * taken in turn — the first row of each page, then the second of each —
 * rather than page after page: a core's hardware prefetchers follow each
 * page it is reading from, so several pages named at once keep more of
 * the block in flight than the prefetch instructions alone (which one
 * core has only a few dozen misses in flight for). Measured on Zen 5 (one
 * core, shuffled 4 KiB runs of a 2 GiB buffer read in order, the next 4
 * runs prefetched a line per line read): 10.5 GB/s page after page, 16.4
 * in turn. */
static sdpa_row_prefetch kv_hint(const sdpa_problem *p, const sdpa_view *view,
                                 int64_t b, int64_t hk, int64_t j, int64_t n,
                                 int64_t dim, const char **rows)
{
    sdpa_row_prefetch pf = kv_prefetch(p, view, b, hk, j, n, dim);
    if (n <= 0 || pf.rows == n) /* one run: base and stride name it */
        return pf;
    const char *run[SDPA_FUSED_BLOCK_K];
    int64_t len[SDPA_FUSED_BLOCK_K], runs = 0, most = 0;
    for (int64_t k = j; k < j + n; k += len[runs++]) {
        run[runs] = sdpa_kv_row(p, view, b, hk, k);
        len[runs] = sdpa_kv_span(p, k, j + n - k);
        most = len[runs] > most ? len[runs] : most;
    }
    int64_t m = 0;
    for (int64_t t = 0; t < most; t++)
        for (int64_t r = 0; r < runs; r++)
            if (t < len[r])
                rows[m++] = run[r] + t * pf.stride;
    pf.row_at = rows;
    pf.rows = n;
    return pf;
}

/* The part of a block's hint from its key `from` on: what the pass's call
 * for the keys from there names at its steps 0, 1, ... */
static sdpa_row_prefetch kv_hint_from(const sdpa_row_prefetch *block,
                                      int64_t from)
{
    sdpa_row_prefetch pf = *block;
    if (from >= pf.rows) {
        pf.rows = 0;
        pf.base = NULL;
        pf.row_at = NULL;
    } else if (pf.row_at) {
        pf.row_at += from;
        pf.rows -= from;
    } else {
        pf.base += from * pf.stride;
        pf.rows -= from;
    }
    return pf;
}

/* sdpa_online_softmax_f32/_f64, sdpa_finish_row_* and
 * sdpa_store_diagnostics_* with their static helpers, by HACKING.md's
 * naming rule (NAME(x) is x_f32, x_f64). */
#define SDPA_TEMPLATE "paths/online_softmax_impl.h"
#include "core/instantiate.h"
