/* The two reference programs the library is measured against. The float and
 * double versions are one body (baseline_tmpl.h) instantiated twice. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench.h"
#include "kernels/philox.h" /* the mask the naive baseline applies */

/* Every extent and leading dimension of the suite fits a BLAS int. */
static int blas_int(int64_t x)
{
    return (int)x;
}

/* Keys query row i may see among the first `len`: the causal limit (shapes
 * without a window; windowed ones use bench_shape_allowed). */
static int64_t allowed_keys(const bench_shape *s, int64_t i, int64_t len)
{
    int64_t limit = len;
    if (s->causal == SDPA_CAUSAL_TOP_LEFT)
        limit = i + 1;
    else if (s->causal == SDPA_CAUSAL_BOTTOM_RIGHT)
        limit = i + (len - s->tq) + 1;
    return limit < len ? limit : len;
}

#define BT float
#define BSUF f
#define BGEMM cblas_sgemm
#define BEXP expf
#include "baseline_tmpl.h"

#define BT double
#define BSUF d
#define BGEMM cblas_dgemm
#define BEXP exp
#include "baseline_tmpl.h"

int bench_baseline_init(bench_baseline *b, const bench_shape *s,
                        size_t budget_bytes)
{
    memset(b, 0, sizeof *b);
    if (s->window && s->window_left >= 0) {
        /* banded: blocks of max(64, window_left) rows, each against at most
         * rows + window_left + window_right keys (the right side is 0 under
         * causality, Tk when unbounded) */
        int64_t rows = s->window_left > 64 ? s->window_left : 64;
        rows = rows < s->tq ? rows : s->tq;
        int64_t right = s->causal != SDPA_CAUSAL_NONE ? 0 : s->tk;
        if (s->window_right >= 0 && s->window_right < right)
            right = s->window_right;
        int64_t width = rows + s->window_left + right;
        width = width < s->tk ? width : s->tk;
        b->row_block = rows;
        b->s_bytes = (size_t)rows * (size_t)width * bench_elem_size(s->dtype);
        size_t rounded = (b->s_bytes + 63u) & ~(size_t)63u;
        if (b->s_bytes > budget_bytes || !(b->s = aligned_alloc(64, rounded)))
            return -1;
        memset(b->s, 0, rounded);
        return 0;
    }
    size_t row_bytes = (size_t)s->tk * bench_elem_size(s->dtype);
    int64_t rows = (int64_t)(budget_bytes / row_bytes);
    if (rows < 1)
        rows = 1;
    if (rows > s->tq)
        rows = s->tq;
    b->row_block = rows;
    b->s_bytes = (size_t)rows * row_bytes;
    size_t rounded = (b->s_bytes + 63u) & ~(size_t)63u;
    b->s = aligned_alloc(64, rounded);
    if (!b->s)
        return -1;
    memset(b->s, 0, rounded); /* touch: resident before any timing */
    return 0;
}

void bench_baseline_free(bench_baseline *b)
{
    free(b->s);
    memset(b, 0, sizeof *b);
}

void bench_bare_gemms(const bench_data *d, bench_baseline *b)
{
    if (d->shape->window)
        return; /* a band: no bound (and a score block of the band only) */
    if (d->shape->dtype == SDPA_FLOAT64)
        bare_d(d, b);
    else
        bare_f(d, b);
}

void bench_bare_backward_gemms(const bench_data *d, const void *dout, void *dq,
                               void *dk, void *dv, bench_baseline *s_block,
                               bench_baseline *dp_block)
{
    if (d->shape->window)
        return; /* as bench_bare_gemms */
    if (d->shape->dtype == SDPA_FLOAT64)
        bare_backward_d(d, dout, dq, dk, dv, s_block, dp_block);
    else
        bare_backward_f(d, dout, dq, dk, dv, s_block, dp_block);
}

int bench_naive(const bench_data *d, bench_baseline *b)
{
    return d->shape->dtype == SDPA_FLOAT64 ? naive_d(d, b) : naive_f(d, b);
}
