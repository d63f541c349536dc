/* The online softmax engine, instantiated for float and double. */
#include "forward/key_range.h"
#include "forward/plan.h"
#include "paths/online_softmax.h"
#include "kernels/rows.h"
#include "kernels/vexp.h"

#include <cblas.h>
#include <math.h>

/* The runs of keys [j, j + n) that lie in one page each (one run without
 * paging): each run's first key and length; returns their count. */
static int64_t kv_runs(const sdpa_problem *p, int64_t j, int64_t n,
                       int64_t *first, int64_t *len)
{
    int64_t runs = 0;
    for (int64_t k = j; k < j + n; k += len[runs++]) {
        first[runs] = k;
        len[runs] = sdpa_kv_span(p, k, j + n - k);
    }
    return runs;
}

/* The addresses of the rows of keys [j, j + n) (n at most
 * SDPA_FUSED_BLOCK_K) of batch item b and KV head hk in the K or V view,
 * in key order, wherever their pages put them: what the streaming kernels
 * read, a block per call. */
static void kv_rows(const sdpa_problem *p, const sdpa_view *view, int64_t b,
                    int64_t hk, int64_t j, int64_t n, const char **rows)
{
    const int64_t stride =
        view->stride[2] * (int64_t)sdpa_dtype_size(p->kv_type);
    int64_t first[SDPA_FUSED_BLOCK_K], len[SDPA_FUSED_BLOCK_K];
    const int64_t runs = kv_runs(p, j, n, first, len);
    for (int64_t r = 0; r < runs; r++) {
        const char *row = sdpa_kv_row(p, view, b, hk, first[r]);
        for (int64_t t = 0; t < len[r]; t++)
            rows[first[r] - j + t] = row + t * stride;
    }
}

/* The prefetch hint of one pass over a block: the rows, of `dim`
 * elements, of keys [j, j + n) (n at most SDPA_FUSED_BLOCK_K) of batch
 * item b and KV head hk, one per step. Where they lie in several pages,
 * rows[] gets their addresses with the pages taken in turn — the first
 * row of each page, then the second of each — rather than page after
 * page: a core's hardware prefetchers follow each page it is reading
 * from, so several pages named at once keep more of the block in flight
 * than the prefetch instructions alone (one core has only a few dozen
 * misses of its own in flight). Measured on Zen 5 (one core, shuffled 4
 * KiB runs of a 2 GiB buffer read in order, the next 4 runs prefetched a
 * line per line read): 10.5 GB/s page after page, 16.4 in turn. */
static sdpa_row_prefetch kv_hint(const sdpa_problem *p, const sdpa_view *view,
                                 int64_t b, int64_t hk, int64_t j, int64_t n,
                                 int64_t dim, const char **rows)
{
    const int64_t es = (int64_t)sdpa_dtype_size(p->kv_type);
    sdpa_row_prefetch pf = {
        NULL, view->stride[2] * es, 0, sdpa_kv_units(p, dim) * es, NULL, NULL};
    if (n <= 0)
        return pf;
    int64_t first[SDPA_FUSED_BLOCK_K], len[SDPA_FUSED_BLOCK_K], most = 0;
    const int64_t runs = kv_runs(p, j, n, first, len);
    pf.rows = n;
    if (runs == 1) { /* base and stride name them */
        pf.base = sdpa_kv_row(p, view, b, hk, j);
        return pf;
    }
    const char *run[SDPA_FUSED_BLOCK_K];
    for (int64_t r = 0; r < runs; r++) {
        run[r] = sdpa_kv_row(p, view, b, hk, first[r]);
        most = len[r] > most ? len[r] : most;
    }
    int64_t m = 0;
    for (int64_t t = 0; t < most; t++)
        for (int64_t r = 0; r < runs; r++)
            if (t < len[r])
                rows[m++] = run[r] + t * pf.stride;
    pf.row_at = rows;
    return pf;
}

/* sdpa_online_softmax_f32/_f64, sdpa_finish_row_* and
 * sdpa_store_diagnostics_* with their static helpers, by HACKING.md's
 * naming rule (NAME(x) is x_f32, x_f64). */
#define SDPA_TEMPLATE "paths/online_softmax_impl.h"
#include "core/instantiate.h"
