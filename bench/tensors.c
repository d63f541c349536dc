/* Inputs from a fixed-seed PRNG, output buffers, and the comparison. */
#define _DEFAULT_SOURCE /* madvise */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "bench.h"

/* ---- element access: the only place that knows float from double ---- */

static void store(void *base, size_t i, double x, int dtype)
{
    if (dtype == SDPA_FLOAT64)
        ((double *)base)[i] = x;
    else
        ((float *)base)[i] = (float)x;
}

static double load(const void *base, size_t i, int dtype)
{
    return dtype == SDPA_FLOAT64 ? ((const double *)base)[i]
                                 : (double)((const float *)base)[i];
}

/* ---- PRNG: splitmix64, then an Irwin–Hall sum of 4 uniforms ---------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double uniform01(uint64_t *state)
{
    return (double)(splitmix64(state) >> 11) * 0x1.0p-53;
}

/* Mean 0, variance 1, support [-2√3, 2√3]: normal enough for attention
 * logits of realistic spread, and cheap for the 128k shape. */
static double normalish(uint64_t *state)
{
    double u = uniform01(state) + uniform01(state) + uniform01(state) +
               uniform01(state);
    return (u - 2.0) * 1.7320508075688772; /* sqrt(3): Var(sum) = 4/12 */
}

static int huge_pages;

void bench_use_huge_pages(int on)
{
    huge_pages = on;
}

int bench_huge_pages(void)
{
    return huge_pages;
}

void *bench_alloc(size_t bytes)
{
    const size_t align = huge_pages ? (size_t)2 << 20 : 64;
    size_t rounded = (bytes + align - 1) & ~(align - 1);
    rounded = rounded ? rounded : align;
    void *p = aligned_alloc(align, rounded);
    if (!p)
        return NULL;
#ifdef MADV_HUGEPAGE
    if (huge_pages) /* advice only: a kernel without THP ignores it */
        (void)madvise(p, rounded, MADV_HUGEPAGE);
#endif
    memset(p, 0, rounded);
    return p;
}

/* Fill an [N, H, T, D] tensor; rows t >= kv_len(b) get NaN, which libsdpa
 * must never read (contract item 5) and the naive baseline does not read. */
static void fill(void *x, const bench_shape *s, int64_t h, int64_t t,
                 int64_t dim, int pad_rows, uint64_t *state)
{
    size_t i = 0;
    for (int64_t b = 0; b < s->n; b++) {
        int64_t valid = pad_rows ? bench_shape_kv_len(s, b) : t;
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t r = 0; r < t; r++)
                for (int64_t c = 0; c < dim; c++, i++)
                    store(x, i, r < valid ? normalish(state) : (double)NAN,
                          s->dtype);
    }
}

/* The window as a dense bias: one [Tq, Tk] matrix broadcast over N and H
 * (shape [1, 1, Tq, Tk], strides 0 there), 0 where the window (and the
 * causal mask) allow a key and -inf elsewhere. The band of batch item 0 is
 * used for every item, which is exact when N = 1 or the band does not
 * depend on the key length (top-left causal without kv_lens). The call
 * is d->args without the window. */
static int init_dense_bias(bench_data *d, const bench_shape *s)
{
    size_t el = bench_elem_size(s->dtype);
    size_t count = (size_t)s->tq * (size_t)s->tk;
    d->bias_bytes = count * el;
    d->bias = bench_alloc(d->bias_bytes);
    if (!d->bias)
        return -1;
    size_t i = 0;
    for (int64_t r = 0; r < s->tq; r++) {
        int64_t lo, hi;
        bench_shape_allowed(s, 0, r, &lo, &hi);
        for (int64_t c = 0; c < s->tk; c++, i++)
            store(d->bias, i, c >= lo && c < hi ? 0.0 : -(double)INFINITY,
                  s->dtype);
    }
    sdpa_forward_args a = d->args;
    a.flags &= ~(uint32_t)SDPA_FLAG_WINDOW;
    a.window_left = 0;
    a.window_right = 0;
    a.bias = (sdpa_tensor){d->bias, {1, 1, s->tq, s->tk}, {0, 0, s->tk, 1}};
    d->dense_args = a;
    return 0;
}

int bench_data_init(bench_data *d, const bench_shape *s, uint64_t seed)
{
    memset(d, 0, sizeof *d);
    d->shape = s;
    size_t el = bench_elem_size(s->dtype);
    size_t nq = (size_t)(s->n * s->hq * s->tq * s->dk);
    size_t nk = (size_t)(s->n * s->hkv * s->tk * s->dk);
    size_t nv = (size_t)(s->n * s->hkv * s->tk * s->dv);
    d->out_count = (size_t)(s->n * s->hq * s->tq * s->dv);

    d->q = bench_alloc(nq * el);
    d->k = bench_alloc(nk * el);
    d->v = bench_alloc(nv * el);
    d->out_lib = bench_alloc(d->out_count * el);
    d->out_ref = bench_alloc(d->out_count * el);
    d->out_bare = bench_alloc(d->out_count * el);
    if (!d->q || !d->k || !d->v || !d->out_lib || !d->out_ref || !d->out_bare) {
        bench_data_free(d);
        return -1;
    }

    uint64_t state = seed;
    fill(d->q, s, s->hq, s->tq, s->dk, 0, &state);
    fill(d->k, s, s->hkv, s->tk, s->dk, s->has_kv_lens, &state);
    fill(d->v, s, s->hkv, s->tk, s->dv, s->has_kv_lens, &state);

    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = s->dtype;
    a.causal = s->causal;
    a.kv_lens = s->has_kv_lens ? s->kv_lens : NULL;
    a.q = sdpa_tensor_bhtd(d->q, s->n, s->hq, s->tq, s->dk);
    a.k = sdpa_tensor_bhtd(d->k, s->n, s->hkv, s->tk, s->dk);
    a.v = sdpa_tensor_bhtd(d->v, s->n, s->hkv, s->tk, s->dv);
    a.out = sdpa_tensor_bhtd(d->out_lib, s->n, s->hq, s->tq, s->dv);
    if (s->window) {
        a.flags |= SDPA_FLAG_WINDOW;
        a.window_left = s->window_left;
        a.window_right = s->window_right;
    }
    a.dropout_p = s->dropout_p;
    a.dropout_seed = BENCH_DROPOUT_SEED;
    a.dropout_offset = BENCH_DROPOUT_OFFSET;
    d->args = a;
    if ((s->dense_bias && init_dense_bias(d, s)) || bench_storage_init(d)) {
        bench_data_free(d);
        return -1;
    }
    return 0;
}

void bench_data_free(bench_data *d)
{
    bench_cold_free(d);
    free(d->q);
    free(d->k);
    free(d->v);
    free(d->out_lib);
    free(d->out_ref);
    free(d->out_bare);
    free(d->bias);
    bench_storage_free(d);
    memset(d, 0, sizeof *d);
}

void bench_fill_random(void *x, size_t count, int dtype, uint64_t seed)
{
    uint64_t state = seed;
    for (size_t i = 0; i < count; i++)
        store(x, i, normalish(&state), dtype);
}

double bench_max_abs_diff(const void *a, const void *b, size_t n, int dtype)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double x = load(a, i, dtype), y = load(b, i, dtype);
        if (isnan(x) || isnan(y))
            return INFINITY;
        double e = fabs(x - y);
        if (e > worst)
            worst = e;
    }
    return worst;
}
