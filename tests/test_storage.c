/*
 * What an inference engine hands sdpa_forward (1.1): half-precision
 * storage types, paged K/V caches, and its own threads.
 *
 *  - Every path (materialised, tiled, decode with the library's streaming
 *    kernels, decode with BLAS products) and every row kernel the CPU runs,
 *    with q/k/v/out in float16, bfloat16 and mixtures with float32 (bias
 *    in float32 or the half type), GQA, kv_lens, causal rows and sinks,
 *    against the long-double reference (tests/common/reference.c) run on the
 * same values in float32. The inputs are multiples of 1/256 below 1 in
 *    magnitude, exact in both half types, so "the widened inputs" are the
 *    float32 tensors themselves. Tolerance: the float32 one of
 *    tests/test_paths.c plus one rounding of out (2^-11 · |out| for
 *    float16, 2^-8 for bfloat16).
 *  - The streaming decode kernels against the BLAS decode, within the
 *    float32 tolerance.
 *  - Paged K/V (page lengths 1, 3 and 16, shuffled pages, vLLM's
 *    [page, slot, head, dim] layout and [page, head, slot, dim]) bitwise
 *    equal to the contiguous call on the same path.
 *  - A paged decode's chunk items, run a chunk of every head at a time,
 *    bitwise equal to contiguous, and the same failure reported of
 *    several (the lowest batch, KV head, chunk).
 *  - A caller's parallel-for (threads of the test's own) bitwise equal to
 *    the context's workers; SDPA_NUM_THREADS_ALL likewise; a parallel-for
 *    that skips an item, calls one twice or names a bad worker fails
 *    with SDPA_ERR_PARALLEL_FOR.
 *  - Refusals: SDPA_ERR_BAD_DTYPE (unknown types, float64 mixed with
 *    another), SDPA_ERR_BAD_PAGE (a table entry outside the pool, paging
 *    fields without a table, a stride below pages_per_seq), float16
 *    output overflow as SDPA_ERR_NONFINITE; outputs untouched on refusal.
 *
 * The half encodings here are written from the formats' definitions and
 * share nothing with the library's (src/kernels/half.h).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the three headers above first */
#include <cmocka.h>

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caller_pool.h"
#include "checks.h"
#include "reference.h"
#include "half_codec.h"
#include "testutil.h"

/* ---- Half encodings of exactly representable values. ---------------- */

/* Bits of v in float16 / bfloat16; v must be exactly representable. */
static uint16_t half_bits(double v, int type)
{
    bool exact;
    uint16_t h = half_codec_bits(v, type, &exact);
    assert_true(exact);
    return h;
}

/* ---- A problem: float32 tensors (the reference's), and copies of them
 * in the storage types under test. ------------------------------------ */

typedef struct problem {
    int64_t n, hq, hkv, tq, tk, dk, dv;
    int causal;
    bool with_bias, with_lens, with_sinks;
    int64_t lens[4];
    double sinks[16];
    tbuf q, k, v, bias, out; /* float32 */
} problem;

static double grid_value(rng *r)
{
    /* multiples of 1/256 in (-1, 1): exact in float16 and bfloat16 */
    return (double)rng_int(r, -255, 255) / 256.0;
}

static void fill_grid(tbuf *x, rng *r)
{
    const int64_t *s = x->t.shape;
    for (int64_t a = 0; a < s[0]; a++)
        for (int64_t b = 0; b < s[1]; b++)
            for (int64_t c = 0; c < s[2]; c++)
                for (int64_t d = 0; d < s[3]; d++)
                    tset(x, a, b, c, d, 4 * grid_value(r));
}

static void problem_make(problem *p, uint64_t seed)
{
    rng r = {seed};
    tbuf_make(&p->q, SDPA_FLOAT32, p->n, p->hq, p->tq, p->dk, LAYOUT_BHTD, 0);
    tbuf_make(&p->k, SDPA_FLOAT32, p->n, p->hkv, p->tk, p->dk, LAYOUT_BTHD, 0);
    tbuf_make(&p->v, SDPA_FLOAT32, p->n, p->hkv, p->tk, p->dv, LAYOUT_BHTD, 0);
    tbuf_make(&p->out, SDPA_FLOAT32, p->n, p->hq, p->tq, p->dv, LAYOUT_BHTD, 0);
    fill_grid(&p->q, &r);
    fill_grid(&p->k, &r);
    fill_grid(&p->v, &r);
    if (p->with_bias) {
        tbuf_make(&p->bias, SDPA_FLOAT32, 1, p->hq, p->tq, p->tk, LAYOUT_BHTD,
                  0);
        fill_grid(&p->bias, &r);
        tset(&p->bias, 0, 0, 0, 1, -INFINITY); /* a forbidden key */
    }
    for (int64_t b = 0; b < p->n; b++)
        p->lens[b] = p->with_lens ? p->tk - 1 - b % 3 : p->tk;
    for (int64_t h = 0; h < p->hq; h++)
        p->sinks[h] = grid_value(&r);
}

static void problem_free(problem *p)
{
    tbuf_free_all((tbuf *[]){&p->q, &p->k, &p->v, &p->bias, &p->out, NULL});
}

/* A copy of a float32 tensor's elements in `type` (same strides). */
typedef struct typed {
    sdpa_tensor t;
    void *mem;
} typed;

static typed typed_copy(const tbuf *x, int type)
{
    typed c = {x->t, NULL};
    size_t es = type == SDPA_FLOAT32 ? 4 : 2;
    c.mem = malloc(x->elems * es);
    assert_non_null(c.mem);
    for (size_t i = 0; i < x->elems; i++) {
        float f = ((const float *)x->mem)[i];
        if (type == SDPA_FLOAT32)
            ((float *)c.mem)[i] = f;
        else /* padding (NaN) stays a NaN */
            ((uint16_t *)c.mem)[i] =
                isnan(f) ? (uint16_t)0x7e00u : half_bits((double)f, type);
    }
    c.t.data = c.mem;
    return c;
}

static double typed_get(const typed *x, int type, int64_t a, int64_t b,
                        int64_t c, int64_t d)
{
    int64_t o = toff(&x->t, a, b, c, d);
    return type == SDPA_FLOAT32
               ? (double)((const float *)x->mem)[o]
               : half_codec_value(((const uint16_t *)x->mem)[o], type);
}

/* The float32 arguments of p (out and lse given by the caller). */
static sdpa_forward_args problem_args(problem *p)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.causal = p->causal;
    a.q = p->q.t;
    a.k = p->k.t;
    a.v = p->v.t;
    if (p->with_bias)
        a.bias = p->bias.t;
    a.out = p->out.t;
    a.kv_lens = p->with_lens ? p->lens : NULL;
    a.sinks = p->with_sinks ? p->sinks : NULL;
    return a;
}

static sdpa_ctx *make_ctx(int kernel, int path, int threads)
{
    sdpa_ctx *ctx = tp_ctx(0);
    if (sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, kernel) != SDPA_OK) {
        sdpa_ctx_destroy(ctx);
        return NULL; /* the CPU lacks it */
    }
    tp_set(ctx, SDPA_OPT_PATH, path);
    tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
    return ctx;
}

static const int all_paths[] = {SDPA_PATH_MATERIALISED, SDPA_PATH_TILED,
                                SDPA_PATH_DECODE, SDPA_PATH_DECODE_BLAS};

/* ---- Half types against the reference. ------------------------------- */

typedef struct combo {
    int q, kv, bias; /* out is q's type */
} combo;

static const combo combos[] = {
    {SDPA_FLOAT16, SDPA_FLOAT16, SDPA_FLOAT16},
    {SDPA_BFLOAT16, SDPA_BFLOAT16, SDPA_BFLOAT16},
    {SDPA_FLOAT32, SDPA_FLOAT16, SDPA_FLOAT32},
    {SDPA_FLOAT32, SDPA_BFLOAT16, SDPA_FLOAT32},
    {SDPA_FLOAT16, SDPA_FLOAT16, SDPA_FLOAT32},
    {SDPA_BFLOAT16, SDPA_FLOAT32, SDPA_BFLOAT16},
    {SDPA_FLOAT16, SDPA_BFLOAT16, SDPA_FLOAT16},
};

static void check_against_reference(problem *p, const combo *c, int kernel,
                                    int path, const ref_result *ref)
{
    sdpa_ctx *ctx = make_ctx(kernel, path, 2);
    if (!ctx)
        return;
    typed q = typed_copy(&p->q, c->q), k = typed_copy(&p->k, c->kv);
    typed v = typed_copy(&p->v, c->kv), out = typed_copy(&p->out, c->q);
    typed bias = {{0}, NULL};
    if (p->with_bias)
        bias = typed_copy(&p->bias, c->bias);
    /* lse is in the compute type: float32 */
    float *lse = malloc((size_t)(p->n * p->hq * p->tq) * sizeof *lse);
    assert_non_null(lse);
    sdpa_forward_args a = problem_args(p);
    a.dtype = c->q;
    a.kv_dtype = c->kv;
    a.bias_dtype = c->bias;
    a.q = q.t;
    a.k = k.t;
    a.v = v.t;
    a.out = out.t;
    if (p->with_bias)
        a.bias = bias.t;
    a.lse = (sdpa_tensor){
        lse, {p->n, p->hq, p->tq, 1}, {p->hq * p->tq, p->tq, 1, 1}};
    int status = sdpa_forward(ctx, &a);
    if (status != SDPA_OK)
        fail_msg("types q %d kv %d bias %d, path %d, kernel %s: status %d "
                 "(%s)",
                 c->q, c->kv, c->bias, path, kernel_name(kernel), status,
                 sdpa_ctx_last_error(ctx));
    const double eps = FLT_EPSILON;
    double tol = 16 * eps * ((double)ref->logit_absmax + 8) *
                 ((double)ref->v_absmax + 1);
    double round_out = c->q == SDPA_FLOAT16    ? 0x1p-11
                       : c->q == SDPA_BFLOAT16 ? 0x1p-8
                                               : 0;
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t h = 0; h < p->hq; h++)
            for (int64_t i = 0; i < p->tq; i++) {
                size_t row = (size_t)((b * p->hq + h) * p->tq + i);
                for (int64_t d = 0; d < p->dv; d++) {
                    double want =
                        (double)ref->out[row * (size_t)p->dv + (size_t)d];
                    double got = typed_get(&out, c->q, b, h, i, d);
                    double bound = tol + round_out * fabs(want);
                    if (!(fabs(got - want) <= bound))
                        fail_msg("types q %d kv %d bias %d, path %d, kernel "
                                 "%s: out[%lld,%lld,%lld,%lld] = %.9g, "
                                 "reference %.9g (bound %.3g)",
                                 c->q, c->kv, c->bias, path,
                                 kernel_name(kernel), (long long)b,
                                 (long long)h, (long long)i, (long long)d, got,
                                 want, bound);
                }
                double want = (double)ref->lse[row];
                if (!(fabs((double)lse[row] - want) <= tol))
                    fail_msg("types q %d kv %d, path %d, kernel %s: lse row "
                             "%zu = %.9g, reference %.9g",
                             c->q, c->kv, path, kernel_name(kernel), row,
                             (double)lse[row], want);
            }
    free(q.mem);
    free(k.mem);
    free(v.mem);
    free(out.mem);
    free(bias.mem);
    free(lse);
    sdpa_ctx_destroy(ctx);
}

static void run_half_cases(problem *p, uint64_t seed)
{
    problem_make(p, seed);
    ref_result ref;
    sdpa_forward_args a = problem_args(p);
    assert_int_equal(ref_forward(&a, &ref), 0);
    assert_false(ref.any_empty);
    for (size_t c = 0; c < sizeof combos / sizeof combos[0]; c++)
        for (int t = 0; t < TEST_KERNELS; t++)
            for (size_t path = 0; path < 4; path++)
                check_against_reference(p, &combos[c], test_kernels[t],
                                        all_paths[path], &ref);
    ref_free(&ref);
    problem_free(p);
}

static void test_half_decode_shapes(void **state)
{
    (void)state;
    /* one query row per head, GQA 4:1 (the decode stack), keys over
     * several 128-key blocks and 512-key chunks */
    problem p = {.n = 2,
                 .hq = 8,
                 .hkv = 2,
                 .tq = 1,
                 .tk = 1100,
                 .dk = 64,
                 .dv = 48,
                 .with_lens = true,
                 .with_sinks = true};
    run_half_cases(&p, 11);
}

static void test_half_prefill_shapes(void **state)
{
    (void)state;
    problem p = {.n = 2,
                 .hq = 4,
                 .hkv = 2,
                 .tq = 37,
                 .tk = 53,
                 .dk = 16,
                 .dv = 24,
                 .causal = SDPA_CAUSAL_BOTTOM_RIGHT,
                 .with_bias = true,
                 .with_lens = true};
    run_half_cases(&p, 12);
}

/* float16 holds no more than 65504: an output beyond it is an error */
static void test_half_output_overflow(void **state)
{
    (void)state;
    uint16_t q = half_bits(1.0, SDPA_FLOAT16), k = q;
    uint16_t v = half_bits(65504.0, SDPA_FLOAT16), out = 0x1234;
    float v32 = 65520.0f, out32 = 0;
    sdpa_ctx *ctx = tp_ctx(0);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT16;
    const sdpa_tensor one = {NULL, {1, 1, 1, 1}, {1, 1, 1, 1}};
    a.q = a.k = a.v = a.out = one;
    a.q.data = &q;
    a.k.data = &k;
    a.v.data = &v;
    a.out.data = &out;
    assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
    assert_int_equal(out, v); /* the largest float16 stays itself */
    /* q and out in float16, v in float32 beyond float16's range */
    a.kv_dtype = SDPA_FLOAT32;
    a.k.data = &(float){1.0f};
    a.v.data = &v32;
    assert_int_equal(sdpa_forward(ctx, &a), SDPA_ERR_NONFINITE);
    /* the same in float32 out is fine */
    a.dtype = SDPA_FLOAT32;
    a.q.data = &(float){1.0f};
    a.out.data = &out32;
    assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
    assert_true(out32 == 65520.0f);
    sdpa_ctx_destroy(ctx);
}

/* ---- The streaming decode kernels against the BLAS decode. ---------- */

static void test_stream_decode_matches_blas(void **state)
{
    (void)state;
    problem p = {.n = 3,
                 .hq = 16,
                 .hkv = 2,
                 .tq = 1,
                 .tk = 2000,
                 .dk = 128,
                 .dv = 128,
                 .with_lens = true};
    problem_make(&p, 21);
    const double tol = 16 * FLT_EPSILON * (4.0 * 4 * 4 * 128 + 8) * 5;
    for (int t = 0; t < TEST_KERNELS; t++) {
        float *got[2];
        for (int path = 0; path < 2; path++) {
            sdpa_ctx *ctx =
                make_ctx(test_kernels[t],
                         path ? SDPA_PATH_DECODE_BLAS : SDPA_PATH_DECODE, 1);
            if (!ctx)
                goto next;
            sdpa_forward_args a = problem_args(&p);
            assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
            got[path] = malloc(p.out.elems * sizeof(float));
            assert_non_null(got[path]);
            memcpy(got[path], p.out.mem, p.out.elems * sizeof(float));
            sdpa_ctx_destroy(ctx);
        }
        for (size_t i = 0; i < p.out.elems; i++)
            if (!(fabs((double)got[0][i] - (double)got[1][i]) <= tol))
                fail_msg("kernel %s: element %zu: streaming %.9g, BLAS %.9g",
                         kernel_name(test_kernels[t]), i, (double)got[0][i],
                         (double)got[1][i]);
        free(got[0]);
        free(got[1]);
    next:;
    }
    problem_free(&p);
}

/* ---- Paged K/V, bitwise equal to contiguous. ------------------------- */

typedef struct pool {
    sdpa_tensor k, v;
    void *kmem, *vmem;
    int32_t *table;
    int64_t pages_per_seq, stride;
} pool;

/* K and V of p copied into a shuffled pool of pages of `page` keys, in
 * `type`, in vLLM's layout [page, slot, head, dim] or in [page, head,
 * slot, dim]; unused table slots hold -1. */
static pool make_pool(const problem *p, int64_t page, int type, bool vllm,
                      rng *r)
{
    pool pl = {0};
    size_t es = type == SDPA_FLOAT32 ? 4 : 2;
    int64_t pages;
    pl.table = tp_page_table(p->n, p->tk, page, r, &pl.pages_per_seq,
                             &pl.stride, &pages);
    const tbuf *src[2] = {&p->k, &p->v};
    sdpa_tensor *dst[2] = {&pl.k, &pl.v};
    void **mem[2] = {&pl.kmem, &pl.vmem};
    for (int x = 0; x < 2; x++) {
        int64_t d = src[x]->t.shape[3], h = p->hkv;
        sdpa_tensor *t = dst[x];
        tp_pool_view(t, pages, h, page, d, vllm);
        size_t elems = (size_t)(pages * h * page * d);
        *mem[x] = malloc(elems * es);
        assert_non_null(*mem[x]);
        memset(*mem[x], 0xff, elems * es); /* NaN in every unused slot */
        t->data = *mem[x];
        for (int64_t b = 0; b < p->n; b++)
            for (int64_t hh = 0; hh < h; hh++)
                for (int64_t j = 0; j < p->tk; j++)
                    for (int64_t e = 0; e < d; e++) {
                        int64_t at =
                            pl.table[b * pl.stride + j / page] * t->stride[0] +
                            hh * t->stride[1] + (j % page) * t->stride[2] + e;
                        double val = tget(src[x], b, hh, j, e);
                        if (type == SDPA_FLOAT32)
                            ((float *)*mem[x])[at] = (float)val;
                        else
                            ((uint16_t *)*mem[x])[at] = half_bits(val, type);
                    }
    }
    return pl;
}

static void test_paged_equals_contiguous(void **state)
{
    (void)state;
    static const int64_t pages[] = {1, 3, 16};
    static const int types[] = {SDPA_FLOAT32, SDPA_FLOAT16};
    /* the third is longer than the materialised path's staged keys (512):
     * its gemms must take the same pieces of keys paged or not */
    problem shapes[3] = {
        {.n = 2,
         .hq = 4,
         .hkv = 2,
         .tq = 1,
         .tk = 77,
         .dk = 32,
         .dv = 16,
         .with_lens = true},
        {.n = 2,
         .hq = 2,
         .hkv = 1,
         .tq = 21,
         .tk = 45,
         .dk = 8,
         .dv = 8,
         .causal = SDPA_CAUSAL_BOTTOM_RIGHT,
         .with_lens = true},
        {.n = 1, .hq = 1, .hkv = 1, .tq = 1, .tk = 528, .dk = 16, .dv = 64},
    };
    rng r = {31};
    for (int s = 0; s < 3; s++) {
        problem *p = &shapes[s];
        problem_make(p, 32 + (uint64_t)s);
        for (size_t ty = 0; ty < 2; ty++) {
            typed k = typed_copy(&p->k, types[ty]);
            typed v = typed_copy(&p->v, types[ty]);
            for (size_t path = 0; path < 4; path++) {
                sdpa_ctx *ctx = make_ctx(SDPA_KERNEL_AUTO, all_paths[path], 2);
                sdpa_forward_args a = problem_args(p);
                a.kv_dtype = types[ty];
                a.k = k.t;
                a.v = v.t;
                assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
                float *want = malloc(p->out.elems * sizeof(float));
                assert_non_null(want);
                memcpy(want, p->out.mem, p->out.elems * sizeof(float));
                for (size_t pg = 0; pg < 3; pg++)
                    for (int vllm = 0; vllm < 2; vllm++) {
                        pool pl = make_pool(p, pages[pg], types[ty], vllm, &r);
                        a.k = pl.k;
                        a.v = pl.v;
                        a.block_table = pl.table;
                        a.pages_per_seq = pl.pages_per_seq;
                        a.block_table_stride = pl.stride;
                        memset(p->out.mem, 0, p->out.elems * sizeof(float));
                        int status = sdpa_forward(ctx, &a);
                        if (status != SDPA_OK)
                            fail_msg("paged, page %lld: status %d (%s)",
                                     (long long)pages[pg], status,
                                     sdpa_ctx_last_error(ctx));
                        if (memcmp(want, p->out.mem,
                                   p->out.elems * sizeof(float)) != 0)
                            fail_msg("shape %d, kv type %d, path %d, page "
                                     "%lld, %s layout: paged output differs "
                                     "from contiguous",
                                     s, types[ty], all_paths[path],
                                     (long long)pages[pg],
                                     vllm ? "vLLM" : "head-major");
                        free(pl.kmem);
                        free(pl.vmem);
                        free(pl.table);
                    }
                free(want);
                sdpa_ctx_destroy(ctx);
            }
            free(k.mem);
            free(v.mem);
        }
        problem_free(p);
    }
}

/* ---- The caller's threads. ------------------------------------------- */

static void test_caller_threads(void **state)
{
    (void)state;
    /* the third is longer than the materialised path's staged keys (512):
     * its gemms must take the same pieces of keys paged or not */
    problem shapes[3] = {
        {.n = 2, .hq = 8, .hkv = 2, .tq = 1, .tk = 3000, .dk = 64, .dv = 64},
        {.n = 1,
         .hq = 4,
         .hkv = 4,
         .tq = 300,
         .tk = 300,
         .dk = 32,
         .dv = 32,
         .causal = SDPA_CAUSAL_TOP_LEFT},
    };
    for (int s = 0; s < 2; s++) {
        problem *p = &shapes[s];
        problem_make(p, 41 + (uint64_t)s);
        for (size_t path = 0; path < 4; path++) {
            sdpa_ctx *ctx = make_ctx(SDPA_KERNEL_AUTO, all_paths[path], 1);
            sdpa_forward_args a = problem_args(p);
            assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
            size_t bytes = p->out.elems * sizeof(float);
            float *want = malloc(bytes);
            assert_non_null(want);
            memcpy(want, p->out.mem, bytes);
            /* all cores */
            tp_set(ctx, SDPA_OPT_NUM_THREADS, SDPA_NUM_THREADS_ALL);
            int64_t value = 0;
            assert_int_equal(
                sdpa_ctx_get_int(ctx, SDPA_OPT_NUM_THREADS, &value), SDPA_OK);
            assert_int_equal(value, SDPA_NUM_THREADS_ALL);
            memset(p->out.mem, 0, bytes);
            assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
            assert_memory_equal(want, p->out.mem, bytes);
            /* the caller's pool, 3 workers */
            test_pool tp = {.workers = 3};
            assert_int_equal(
                sdpa_ctx_set_parallel_for(ctx, test_parallel_for, &tp, 3),
                SDPA_OK);
            memset(p->out.mem, 0, bytes);
            assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
            assert_memory_equal(want, p->out.mem, bytes);
            /* The streaming decode makes no BLAS calls: its items always
             * go to the pool (with a threaded BLAS, plans with large gemms
             * run on the calling thread alone and never call it). */
            if (all_paths[path] == SDPA_PATH_DECODE)
                assert_true(atomic_load(&tp.calls) >= 1);
            /* broken pools: an error whenever the pool was called */
            for (int bad = 1; bad <= 3; bad++) {
                tp.misbehave = bad;
                int before = atomic_load(&tp.calls);
                int status = sdpa_forward(ctx, &a);
                if (atomic_load(&tp.calls) == before) {
                    assert_int_equal(status, SDPA_OK);
                    continue;
                }
                assert_int_equal(status, SDPA_ERR_PARALLEL_FOR);
                assert_non_null(
                    strstr(sdpa_ctx_last_error(ctx), "parallel-for"));
            }
            tp.misbehave = 0;
            /* back to the context's own workers */
            assert_int_equal(sdpa_ctx_set_parallel_for(ctx, NULL, NULL, 0),
                             SDPA_OK);
            memset(p->out.mem, 0, bytes);
            assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
            assert_memory_equal(want, p->out.mem, bytes);
            assert_int_equal(
                sdpa_ctx_set_parallel_for(ctx, test_parallel_for, &tp, 0),
                SDPA_ERR_BAD_OPTION_VALUE);
            assert_int_equal(
                sdpa_ctx_set_parallel_for(ctx, test_parallel_for, &tp, 257),
                SDPA_ERR_BAD_OPTION_VALUE);
            free(want);
            sdpa_ctx_destroy(ctx);
        }
        problem_free(p);
    }
}

/* ---- A paged decode's chunk items, a chunk of every head at a time. -- */

/* The decode runs a paged cache's chunk items in another order than a
 * contiguous one's (src/runtime/pool.c, visited_item): the outputs stay bitwise
 * equal, and of several failing items the same one is reported, the
 * lowest (batch, KV head, chunk), on one worker, two, and a caller's
 * pool of three. */
static void test_paged_chunk_order(void **state)
{
    (void)state;
    problem p = {
        .n = 2, .hq = 6, .hkv = 3, .tq = 1, .tk = 112, .dk = 16, .dv = 8};
    problem_make(&p, 51);
    const size_t bytes = p.out.elems * sizeof(float);
    float *want = malloc(bytes);
    assert_non_null(want);
    static const int paths[] = {SDPA_PATH_DECODE, SDPA_PATH_DECODE_BLAS};
    for (int nan = 0; nan < 2; nan++) {
        if (nan) {
            /* key 5 of (batch 1, KV head 0): chunk 0 of item 3 · 7;
             * key 90 of (batch 0, KV head 2): chunk 5 of item 2 · 7,
             * visited later but lower, and the one reported */
            tset(&p.k, 1, 0, 5, 0, NAN);
            tset(&p.k, 0, 2, 90, 0, NAN);
        }
        rng r = {52};
        pool pl = make_pool(&p, 16, SDPA_FLOAT32, false, &r);
        for (size_t path = 0; path < 2; path++)
            for (int runner = 0; runner < 3; runner++) {
                sdpa_ctx *ctx = make_ctx(SDPA_KERNEL_AUTO, paths[path],
                                         runner == 0 ? 1 : runner + 1);
                /* chunks of 16 keys: 7 per (batch, KV head) */
                tp_set(ctx, SDPA_OPT_BLOCK_K, 16);
                test_pool tp = {.workers = 3};
                if (runner == 2)
                    assert_int_equal(sdpa_ctx_set_parallel_for(
                                         ctx, test_parallel_for, &tp, 3),
                                     SDPA_OK);
                sdpa_forward_args a = problem_args(&p);
                int status = sdpa_forward(ctx, &a);
                char message[256];
                snprintf(message, sizeof message, "%s",
                         sdpa_ctx_last_error(ctx));
                memcpy(want, p.out.mem, bytes);
                a.k = pl.k;
                a.v = pl.v;
                a.block_table = pl.table;
                a.pages_per_seq = pl.pages_per_seq;
                a.block_table_stride = pl.stride;
                memset(p.out.mem, 0, bytes);
                assert_int_equal(sdpa_forward(ctx, &a), status);
                if (runner == 2 && paths[path] == SDPA_PATH_DECODE)
                    assert_true(atomic_load(&tp.calls) >= 1);
                if (!nan) {
                    assert_int_equal(status, SDPA_OK);
                    assert_memory_equal(want, p.out.mem, bytes);
                } else {
                    assert_int_equal(status, SDPA_ERR_NONFINITE);
                    assert_non_null(
                        strstr(message, "batch 0, head 4, query row 0 "));
                    assert_string_equal(message, sdpa_ctx_last_error(ctx));
                }
                sdpa_ctx_destroy(ctx);
            }
        free(pl.kmem);
        free(pl.vmem);
        free(pl.table);
    }
    free(want);
    problem_free(&p);
}

/* ---- Refusals. ------------------------------------------------------- */

static void expect_refusal(sdpa_ctx *ctx, const sdpa_forward_args *a,
                           int status, const char *words, problem *p)
{
    fill_sentinel(p->out.mem, p->out.elems * sizeof(float));
    int got = sdpa_forward(ctx, a);
    if (got != status)
        fail_msg("expected status %d, got %d (%s)", status, got,
                 sdpa_ctx_last_error(ctx));
    assert_int_equal(
        first_non_sentinel(p->out.mem, p->out.elems * sizeof(float)), -1);
    if (!strstr(sdpa_ctx_last_error(ctx), words))
        fail_msg("message \"%s\" lacks \"%s\"", sdpa_ctx_last_error(ctx),
                 words);
    size_t bytes = 1;
    assert_int_equal(sdpa_forward_workspace(ctx, a, &bytes), status);
}

/* ---- A cache of larger capacity than its length. -------------------- */

/* K and V in caches of capacity 13 rows filled to 9 (the rest NaN, never
 * read), through sdpa_tensor_b?td_cap, give the bits of compact copies. */
static void test_capacity_views(void **state)
{
    (void)state;
    enum { N = 2, H = 3, T = 9, CAP = 13, D = 8, TQ = 4 };
    rng r = {77};
    float q[N * H * TQ * D], out[N * H * TQ * D], want[N * H * TQ * D];
    float k[N * H * T * D], v[N * H * T * D];
    float kc[N * H * CAP * D], vc[N * H * CAP * D];
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++)
        q[i] = (float)rng_sym(&r, 1);
    for (size_t i = 0; i < sizeof k / sizeof k[0]; i++) {
        k[i] = (float)rng_sym(&r, 1);
        v[i] = (float)rng_sym(&r, 1);
    }
    sdpa_ctx *ctx = make_ctx(SDPA_KERNEL_AUTO, SDPA_PATH_AUTO, 1);
    for (int bthd = 0; bthd < 2; bthd++) {
        for (size_t i = 0; i < sizeof kc / sizeof kc[0]; i++)
            kc[i] = vc[i] = NAN;
        for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t d = 0; d < D; d++) {
                        int64_t from = ((n * H + h) * T + t) * D + d;
                        int64_t to = bthd ? ((n * CAP + t) * H + h) * D + d
                                          : ((n * H + h) * CAP + t) * D + d;
                        kc[to] = k[from];
                        vc[to] = v[from];
                    }
        sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
        a.dtype = SDPA_FLOAT32;
        a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
        a.q = sdpa_tensor_bhtd(q, N, H, TQ, D);
        a.k = sdpa_tensor_bhtd(k, N, H, T, D);
        a.v = sdpa_tensor_bhtd(v, N, H, T, D);
        a.out = sdpa_tensor_bhtd(want, N, H, TQ, D);
        assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
        a.k = bthd ? sdpa_tensor_bthd_cap(kc, N, H, T, CAP, D)
                   : sdpa_tensor_bhtd_cap(kc, N, H, T, CAP, D);
        a.v = bthd ? sdpa_tensor_bthd_cap(vc, N, H, T, CAP, D)
                   : sdpa_tensor_bhtd_cap(vc, N, H, T, CAP, D);
        a.out = sdpa_tensor_bhtd(out, N, H, TQ, D);
        assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
        assert_memory_equal(out, want, sizeof out);
    }
    /* capacity = length: the plain constructors */
    sdpa_tensor x = sdpa_tensor_bthd_cap(k, N, H, T, T, D);
    sdpa_tensor y = sdpa_tensor_bthd(k, N, H, T, D);
    assert_memory_equal(&x, &y, sizeof x);
    x = sdpa_tensor_bhtd_cap(k, N, H, T, T, D);
    y = sdpa_tensor_bhtd(k, N, H, T, D);
    assert_memory_equal(&x, &y, sizeof x);
    sdpa_ctx_destroy(ctx);
}

static void test_refusals(void **state)
{
    (void)state;
    problem p = {
        .n = 2, .hq = 2, .hkv = 1, .tq = 1, .tk = 10, .dk = 8, .dv = 8};
    problem_make(&p, 51);
    sdpa_ctx *ctx = tp_ctx(0);
    sdpa_forward_args a = problem_args(&p);
    a.kv_dtype = 9;
    expect_refusal(ctx, &a, SDPA_ERR_BAD_DTYPE, "kv_dtype 9", &p);
    a.kv_dtype = SDPA_FLOAT64;
    expect_refusal(ctx, &a, SDPA_ERR_BAD_DTYPE, "mix SDPA_FLOAT64", &p);
    a.kv_dtype = 0;
    a.bias_dtype = -1;
    expect_refusal(ctx, &a, SDPA_ERR_BAD_DTYPE, "bias_dtype -1", &p);
    a.bias_dtype = 0;

    a.pages_per_seq = 2;
    expect_refusal(ctx, &a, SDPA_ERR_BAD_PAGE, "block_table is NULL", &p);
    rng r = {52};
    pool pl = make_pool(&p, 4, SDPA_FLOAT32, true, &r);
    a.k = pl.k;
    a.v = pl.v;
    a.block_table = pl.table;
    a.pages_per_seq = pl.pages_per_seq;
    a.block_table_stride = 1;
    expect_refusal(ctx, &a, SDPA_ERR_BAD_PAGE, "below pages_per_seq", &p);
    a.block_table_stride = pl.stride;
    /* a key count beyond the BLAS int is OVERFLOW, as for unpaged K/V
     * (it was BAD_PAGE with OVERFLOW's message: fuzz_storage finding 3) */
    a.pages_per_seq = INT_MAX / pl.k.shape[2] + 1;
    a.block_table_stride = 0;
    expect_refusal(ctx, &a, SDPA_ERR_OVERFLOW, "overflows the key count", &p);
    a.pages_per_seq = pl.pages_per_seq;
    a.block_table_stride = pl.stride;
    int32_t saved = pl.table[pl.stride + 2];
    pl.table[pl.stride + 2] = (int32_t)pl.k.shape[0];
    expect_refusal(ctx, &a, SDPA_ERR_BAD_PAGE, "block_table[1][2]", &p);
    pl.table[pl.stride + 2] = -1;
    expect_refusal(ctx, &a, SDPA_ERR_BAD_PAGE, "block_table[1][2] is -1", &p);
    /* a page past kv_lens is not read, so not checked */
    int64_t lens[2] = {10, 8};
    a.kv_lens = lens;
    assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
    pl.table[pl.stride + 2] = saved;
    a.kv_lens = NULL;
    /* the logical Tk: a bias of pages_per_seq · page keys */
    tbuf bias;
    tbuf_make(&bias, SDPA_FLOAT32, 1, 1, 1, 11, LAYOUT_BHTD, 0);
    fill_grid(&bias, &r);
    a.bias = bias.t;
    expect_refusal(ctx, &a, SDPA_ERR_SHAPE_MISMATCH, "pages_per_seq", &p);
    tbuf_free(&bias);
    free(pl.kmem);
    free(pl.vmem);
    free(pl.table);
    sdpa_ctx_destroy(ctx);
    problem_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_half_decode_shapes),
        cmocka_unit_test(test_half_prefill_shapes),
        cmocka_unit_test(test_half_output_overflow),
        cmocka_unit_test(test_stream_decode_matches_blas),
        cmocka_unit_test(test_paged_equals_contiguous),
        cmocka_unit_test(test_caller_threads),
        cmocka_unit_test(test_paged_chunk_order),
        cmocka_unit_test(test_capacity_views),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
