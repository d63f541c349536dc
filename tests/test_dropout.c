/*
 * Dropout on the attention weights (1.2: dropout_p, dropout_seed,
 * dropout_offset of sdpa_forward_args and sdpa_backward_args), through the
 * public API:
 *   - the tests' own Philox4x32-10 (tests/common/reference.c) against
 *     Random123's published known-answer vectors;
 *   - the keep rate within 5 sigma of the binomial over millions of keys,
 *     and the mask the header defines, key by key (the weights output);
 *   - the forward on every path and kernel set against the long-double
 *     reference given the same mask (out, weights, lse, diagnostics of the
 *     undropped softmax, sinks), bitwise across 1, 2, 3 threads and the
 *     caller's parallel-for; p = 0 bitwise as no dropout;
 *   - ragged calls bitwise their sequences' own calls with dropout_offset
 *     + b·Hq, forward and backward; sdpa_merge of split keys;
 *   - the backward against the gradient oracle, by finite differences with
 *     the mask fixed, bitwise across thread counts and its two schemes;
 *   - the layer passing the fields to both of its calls;
 *   - every refused dropout_p, outputs untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "caller_pool.h"
#include "checks.h"
#include "oracle.h"
#include "problem.h"
#include "reference.h"
#include "testutil.h"

/* ---- Philox4x32-10: Random123's kat_vectors. -------------------------- */
static void test_philox_known_answers(void **state)
{
    (void)state;
    static const struct {
        uint32_t ctr[4], key[2], out[4];
    } kat[] = {
        {{0, 0, 0, 0},
         {0, 0},
         {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
        {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
         {0xffffffff, 0xffffffff},
         {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
        {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
         {0xa4093822, 0x299f31d0},
         {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    };
    for (size_t v = 0; v < sizeof kat / sizeof kat[0]; v++) {
        uint32_t out[4];
        ref_philox4x32_10(kat[v].ctr, kat[v].key, out);
        for (int w = 0; w < 4; w++)
            assert_int_equal(out[w], kat[v].out[w]);
    }
}

/* ---- Problems. ----------------------------------------------------------- */
typedef struct dcase {
    int dtype;
    int64_t N, Hq, Hkv, Tq, Tk, Dk, Dv;
    tp_call x;
    double p;
    uint64_t seed, offset;
    double amp;
    int weights, diagnostics, mask;
} dcase;

typedef struct dinst {
    test_problem tp;
    tbuf mw, ent;
    sdpa_forward_args a;
} dinst;

/* A case of this shape (contiguous tensors, |q|, |k| < 1), no dropout
 * and no option yet. */
static dcase dcase_of(int dtype, int64_t N, int64_t Hq, int64_t Hkv, int64_t Tq,
                      int64_t Tk, int64_t Dk, int64_t Dv)
{
    dcase c = {.dtype = dtype,
               .N = N,
               .Hq = Hq,
               .Hkv = Hkv,
               .Tq = Tq,
               .Tk = Tk,
               .Dk = Dk,
               .Dv = Dv,
               .amp = 1.0};
    return c;
}

static void dinst_make(dinst *s, const dcase *c, uint64_t seed)
{
    rng r = {seed};
    memset(s, 0, sizeof *s);
    tp_make(&s->tp, c->dtype, &r, c->amp, c->N, c->Hq, c->Hkv, c->Tq, c->Tk,
            c->Dk, c->Dv);
    tp_outputs(&s->tp, c->weights, 1, 0);
    if (c->mask)
        tp_mask_random(&s->tp, &r, 0.2);
    s->a = s->tp.a;
    tp_apply(&s->a, c->dtype, &c->x);
    if (c->diagnostics) {
        tbuf_make(&s->mw, c->dtype, c->N, c->Hq, c->Tq, 1, LAYOUT_BHTD, 0);
        tbuf_make(&s->ent, c->dtype, c->N, c->Hq, c->Tq, 1, LAYOUT_BHTD, 0);
        s->a.max_weight = s->mw.t;
        s->a.entropy = s->ent.t;
    }
    s->a.dropout_p = c->p;
    s->a.dropout_seed = c->seed;
    s->a.dropout_offset = c->offset;
}

static void dinst_free(dinst *s)
{
    tbuf_free(&s->mw);
    tbuf_free(&s->ent);
    tp_free(&s->tp);
}

static double dtype_eps(int dtype)
{
    return dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
}

/* The forward's outputs against the reference of the same call (its mask
 * drawn by the reference's own Philox) and, for lse and the diagnostics,
 * the reference of the undropped call. Returns 1 when all match. */
static int forward_matches(const dcase *c, const dinst *s, const char *where)
{
    ref_result r, r0;
    sdpa_forward_args undropped = s->a;
    undropped.dropout_p = 0;
    assert_int_equal(ref_forward(&s->a, &r), 0);
    assert_int_equal(ref_forward(&undropped, &r0), 0);
    const double eps = dtype_eps(c->dtype);
    const test_tol t = tp_forward_tol(eps, &r, c->Tk, c->Dk, c->x.softcap,
                                      c->x.use_sinks, 0, 0);
    const double cd = (double)ref_dropout_scale(c->dtype, c->p);
    int ok = 1;
    for (int64_t b = 0; b < c->N && ok; b++)
        for (int64_t h = 0; h < c->Hq && ok; h++)
            for (int64_t i = 0; i < c->Tq && ok; i++) {
                const size_t row = (size_t)((b * c->Hq + h) * c->Tq + i);
                for (int64_t d = 0; d < c->Dv && ok; d++) {
                    double ref = (double)r.out[row * (size_t)c->Dv + (size_t)d];
                    double got = tget(&s->tp.out, b, h, i, d);
                    if (!(fabs(got - ref) <=
                          cd * t.out + 4 * eps * fabs(ref))) {
                        print_message("  out[%lld,%lld,%lld,%lld] %.10g, "
                                      "reference %.10g (%s)\n",
                                      (long long)b, (long long)h, (long long)i,
                                      (long long)d, got, ref, where);
                        ok = 0;
                    }
                }
                double lref = (double)r0.lse[row];
                double lgot = tget(&s->tp.lse, b, h, i, 0);
                if (!(fabs(lgot - lref) <=
                      t.lse_abs + t.lse_rel * fabs(lref))) {
                    print_message("  lse[%lld,%lld,%lld] %.10g, undropped "
                                  "reference %.10g (%s)\n",
                                  (long long)b, (long long)h, (long long)i,
                                  lgot, lref, where);
                    ok = 0;
                }
                for (int64_t j = 0; c->weights && j < c->Tk && ok; j++) {
                    double ref =
                        (double)r.weights[row * (size_t)c->Tk + (size_t)j];
                    double got = tget(&s->tp.w, b, h, i, j);
                    int dropped = !ref_dropout_keep(&s->a, b, h, i, j);
                    int good =
                        dropped || !r.allowed[row * (size_t)c->Tk + (size_t)j]
                            ? got == 0
                            : fabs(got - ref) <= cd * t.w;
                    if (!good) {
                        print_message("  weights[%lld,%lld,%lld,%lld] %.10g, "
                                      "reference %.10g%s (%s)\n",
                                      (long long)b, (long long)h, (long long)i,
                                      (long long)j, got, ref,
                                      dropped ? " (dropped)" : "", where);
                        ok = 0;
                    }
                }
                if (c->diagnostics && ok) {
                    long double top, ent;
                    ref_diagnostics(&r0, c->x.use_sinks ? c->x.sinks : NULL, h,
                                    row, &top, &ent);
                    double mw = tget(&s->mw, b, h, i, 0);
                    double en = tget(&s->ent, b, h, i, 0);
                    if (!(fabs(mw - (double)top) <= t.w) ||
                        !(fabs(en - (double)ent) <=
                          t.entropy + t.e_p * (double)ent)) {
                        print_message("  max_weight %.10g / entropy %.10g "
                                      "at [%lld,%lld,%lld], undropped "
                                      "reference %.10Lg / %.10Lg (%s)\n",
                                      mw, en, (long long)b, (long long)h,
                                      (long long)i, top, ent, where);
                        ok = 0;
                    }
                }
            }
    ref_free(&r);
    ref_free(&r0);
    return ok;
}

static size_t tbuf_bytes(const tbuf *x)
{
    return x->elems * x->esize;
}

/* A copy of a buffer's bytes (to compare later runs with). */
static void *bytes_of(const tbuf *x)
{
    void *m = malloc(tbuf_bytes(x));
    if (!m)
        abort();
    memcpy(m, x->mem, tbuf_bytes(x));
    return m;
}

static const int paths[] = {SDPA_PATH_MATERIALISED, SDPA_PATH_TILED,
                            SDPA_PATH_DECODE, SDPA_PATH_DECODE_BLAS};
enum { PATHS = sizeof paths / sizeof paths[0] };

static const char *path_name(int path)
{
    return path == SDPA_PATH_MATERIALISED ? "materialised"
           : path == SDPA_PATH_TILED      ? "tiled"
           : path == SDPA_PATH_DECODE     ? "decode"
                                          : "decode-blas";
}

/* ---- The mask and the keep rate. --------------------------------------- */
/* Over N·Hq·Tq·Tk = 2^21 weights per p, with small logits (no weight
 * underflows to 0): every weight is 0 exactly where the header's mask
 * drops it, and the dropped share is within 5 sigma of p. */
static void test_keep_rate(void **state)
{
    (void)state;
    static const double ps[] = {0.1, 0.5, 0.9, 0.013};
    sdpa_ctx *ctx = tp_ctx(0);
    for (size_t k = 0; k < sizeof ps / sizeof ps[0]; k++) {
        dcase c = dcase_of(SDPA_FLOAT32, 2, 4, 2, 128, 2048, 8, 4);
        c.p = ps[k];
        c.seed = 0x0123456789abcdefull + k;
        c.offset = 1000 * k;
        c.amp = 0.3;
        c.weights = 1;
        dinst s;
        dinst_make(&s, &c, 11 + k);
        tp_use_path(ctx, SDPA_PATH_MATERIALISED);
        assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_OK);
        const double cd = (double)ref_dropout_scale(c.dtype, c.p);
        long dropped = 0, total = 0, wrong = 0;
        for (int64_t b = 0; b < c.N; b++)
            for (int64_t h = 0; h < c.Hq; h++)
                for (int64_t i = 0; i < c.Tq; i++)
                    for (int64_t j = 0; j < c.Tk; j++, total++) {
                        double w = tget(&s.tp.w, b, h, i, j);
                        int keep = ref_dropout_keep(&s.a, b, h, i, j);
                        dropped += w == 0;
                        /* a kept weight is positive and at least c·e^-0.6/Tk */
                        wrong += keep ? !(w > 0.5 * cd / (double)c.Tk) : w != 0;
                    }
        const double n = (double)total;
        const double sigma = sqrt(n * c.p * (1 - c.p));
        print_message("  p %.3f: %ld of %ld dropped (expected %.0f, sigma "
                      "%.0f)\n",
                      c.p, dropped, total, n * c.p, sigma);
        assert_int_equal(wrong, 0);
        assert_true(fabs((double)dropped - n * c.p) <= 5 * sigma);
        dinst_free(&s);
    }
    sdpa_ctx_destroy(ctx);
}

/* ---- The forward on every path and kernel set. ------------------------- */
static void case_options(dcase *c, int variant)
{
    memset(&c->x, 0, sizeof c->x);
    c->mask = 0;
    switch (variant) {
    case 0:
        break;
    case 1:
        c->x.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
        c->x.use_kvlens = 1;
        for (int64_t b = 0; b < c->N; b++)
            c->x.kv_lens[b] = c->Tk - 3 * b;
        break;
    case 2:
        tp_every_option(&c->x, 9);
        break;
    default:
        c->mask = 1;
        c->x.softcap = 3;
        break;
    }
}

/* Every path (every_path: the decode ones must take the call too), kernel
 * set and 1 to 3 threads, for four sets of options. */
static void forward_case(sdpa_ctx *ctx, dcase *c, uint64_t seed, int every_path)
{
    long ran[PATHS] = {0};
    for (int variant = 0; variant < 4; variant++) {
        case_options(c, variant);
        c->weights = 1;
        dinst s;
        dinst_make(&s, c, seed + (uint64_t)variant);
        for (size_t pi = 0; pi < PATHS; pi++) {
            /* the weights output needs the materialised path */
            c->weights = paths[pi] == SDPA_PATH_MATERIALISED;
            sdpa_forward_args a = s.a;
            if (!c->weights)
                a.weights = (sdpa_tensor){0};
            /* the threads' bits, taken at one kernel set */
            void *first = NULL;
            for (int ki = 0; ki < TEST_KERNELS; ki++) {
                if (!tp_use_kernel(ctx, ki))
                    continue;
                tp_use_path(ctx, paths[pi]);
                for (int threads = 1; threads <= 3; threads++) {
                    tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
                    tp_clear_outputs(&s.tp);
                    int st = sdpa_forward(ctx, &a);
                    if (st == SDPA_ERR_UNSUPPORTED)
                        break; /* the decode path wants few query rows */
                    assert_int_equal(st, SDPA_OK);
                    ran[pi]++;
                    char where[96];
                    snprintf(where, sizeof where,
                             "variant %d, %s, kernel %s, %d threads", variant,
                             path_name(paths[pi]),
                             kernel_name(test_kernels[ki]), threads);
                    dinst view = s;
                    view.a = a;
                    assert_true(forward_matches(c, &view, where));
                    if (threads == 1) {
                        free(first);
                        first = bytes_of(&s.tp.out);
                    } else if (memcmp(first, s.tp.out.mem,
                                      tbuf_bytes(&s.tp.out)) != 0) {
                        print_message("  %s: not the bits of one thread\n",
                                      where);
                        fail();
                    }
                }
            }
            free(first);
        }
        tp_set(ctx, SDPA_OPT_NUM_THREADS, 1);
        tp_use_path(ctx, SDPA_PATH_AUTO);
        dinst_free(&s);
    }
    tp_set(ctx, SDPA_OPT_KERNEL, SDPA_KERNEL_AUTO);
    c->weights = 0;
    for (size_t pi = 0; pi < PATHS; pi++) {
        print_message("  Tq %lld: %s path, %ld runs\n", (long long)c->Tq,
                      path_name(paths[pi]), ran[pi]);
        assert_true(ran[pi] > 0 || (!every_path && pi >= 2));
    }
}

static void test_forward_paths(void **state)
{
    const int dtype = *(const int *)*state;
    sdpa_ctx *ctx = tp_ctx(1);
    /* few query rows (every path, the decode ones included), then a
     * prefill (materialised and tiled) */
    dcase small = dcase_of(dtype, 2, 4, 2, 3, 77, 8, 6);
    small.p = 0.3;
    small.seed = 42;
    small.offset = 7;
    small.diagnostics = 1;
    forward_case(ctx, &small, 100, 1);
    dcase prefill = small;
    prefill.Tq = 45;
    prefill.Tk = 61;
    prefill.p = 0.15;
    prefill.seed = 0xfeedface12345678ull;
    prefill.offset = UINT64_MAX - 3; /* the stream wraps mod 2^64 */
    tp_set(ctx, SDPA_OPT_BLOCK_Q, 16);
    tp_set(ctx, SDPA_OPT_BLOCK_K, 20);
    forward_case(ctx, &prefill, 200, 0);
    sdpa_ctx_destroy(ctx);
}

/* The caller's parallel-for gives the bits of one worker. */
static void test_caller_threads(void **state)
{
    const int dtype = *(const int *)*state;
    dcase c = dcase_of(dtype, 1, 2, 1, 40, 90, 8, 8);
    c.p = 0.4;
    c.seed = 5;
    c.offset = 9;
    dinst s;
    dinst_make(&s, &c, 300);
    sdpa_ctx *ctx = tp_ctx(0);
    tp_set(ctx, SDPA_OPT_BLOCK_Q, 8);
    assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_OK);
    void *one = bytes_of(&s.tp.out);
    test_pool pool = {.workers = 3};
    assert_int_equal(
        sdpa_ctx_set_parallel_for(ctx, test_parallel_for, &pool, pool.workers),
        SDPA_OK);
    tp_clear_outputs(&s.tp);
    assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_OK);
    assert_true(atomic_load(&pool.calls) > 0);
    assert_memory_equal(one, s.tp.out.mem, tbuf_bytes(&s.tp.out));
    assert_true(forward_matches(&c, &s, "caller's parallel-for"));
    free(one);
    sdpa_ctx_destroy(ctx);
    dinst_free(&s);
}

/* dropout_p = 0 is no dropout, whatever the seed and offset. */
static void test_p_zero(void **state)
{
    const int dtype = *(const int *)*state;
    dcase c = dcase_of(dtype, 2, 2, 2, 9, 33, 4, 4);
    c.weights = 1;
    dinst s;
    dinst_make(&s, &c, 400);
    sdpa_ctx *ctx = tp_ctx(0);
    assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_OK);
    void *out = bytes_of(&s.tp.out), *w = bytes_of(&s.tp.w);
    s.a.dropout_seed = 123456789;
    s.a.dropout_offset = 987654321;
    tp_clear_outputs(&s.tp);
    assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_OK);
    assert_memory_equal(out, s.tp.out.mem, tbuf_bytes(&s.tp.out));
    assert_memory_equal(w, s.tp.w.mem, tbuf_bytes(&s.tp.w));
    /* and dropout does change the output */
    s.a.dropout_p = 0.5;
    assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_OK);
    assert_true(memcmp(out, s.tp.out.mem, tbuf_bytes(&s.tp.out)) != 0);
    FREE_ALL(out, w);
    sdpa_ctx_destroy(ctx);
    dinst_free(&s);
}

/* ---- Storage types and paged K/V. ------------------------------------- */
/* K and V in bfloat16 (the reference on their exactly widened values) and
 * paged (bitwise the unpaged call: the mask follows the logical key), on
 * every path. */
static void test_storage_and_pages(void **state)
{
    (void)state;
    enum { PAGE = 16, PAGES = 8 };
    dcase c = dcase_of(SDPA_FLOAT32, 2, 4, 2, 3, 64, 8, 8);
    c.p = 0.3;
    c.seed = 99;
    c.offset = 1;
    dinst s;
    dinst_make(&s, &c, 1100);
    /* k and v made bfloat16 values, and bfloat16 copies of them */
    const tbuf *kv[2] = {&s.tp.k, &s.tp.v};
    uint16_t *half[2];
    for (int t = 0; t < 2; t++) {
        const int64_t n = (int64_t)kv[t]->elems;
        half[t] = malloc((size_t)n * sizeof(uint16_t));
        assert_non_null(half[t]);
        assert_int_equal(
            sdpa_convert(SDPA_BFLOAT16, half[t], SDPA_FLOAT32, kv[t]->mem, n),
            SDPA_OK);
        assert_int_equal(
            sdpa_convert(SDPA_FLOAT32, kv[t]->mem, SDPA_BFLOAT16, half[t], n),
            SDPA_OK);
    }
    /* pools of pages: page c of item b is pool page table[b][c] */
    int32_t table[2][4];
    tbuf pool_k, pool_v;
    tbuf_make(&pool_k, SDPA_FLOAT32, PAGES, 2, PAGE, 8, LAYOUT_BHTD, 0);
    tbuf_make(&pool_v, SDPA_FLOAT32, PAGES, 2, PAGE, 8, LAYOUT_BHTD, 0);
    for (int b = 0; b < 2; b++)
        for (int pg = 0; pg < 4; pg++) {
            table[b][pg] = (int32_t)((pg * 2 + b * 5 + 3) % PAGES);
            for (int64_t hk = 0; hk < 2; hk++)
                for (int64_t j = 0; j < PAGE; j++)
                    for (int64_t d = 0; d < 8; d++) {
                        tset(&pool_k, table[b][pg], hk, j, d,
                             tget(&s.tp.k, b, hk, pg * PAGE + j, d));
                        tset(&pool_v, table[b][pg], hk, j, d,
                             tget(&s.tp.v, b, hk, pg * PAGE + j, d));
                    }
        }
    sdpa_ctx *ctx = tp_ctx(0);
    for (size_t pi = 0; pi < PATHS; pi++) {
        tp_use_path(ctx, paths[pi]);
        tp_clear_outputs(&s.tp);
        assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_OK);
        void *plain = bytes_of(&s.tp.out);
        sdpa_forward_args paged = s.a;
        paged.k = pool_k.t;
        paged.v = pool_v.t;
        paged.block_table = &table[0][0];
        paged.pages_per_seq = 4;
        tp_clear_outputs(&s.tp);
        assert_int_equal(sdpa_forward(ctx, &paged), SDPA_OK);
        assert_memory_equal(plain, s.tp.out.mem, tbuf_bytes(&s.tp.out));
        sdpa_forward_args typed = s.a;
        typed.kv_dtype = SDPA_BFLOAT16;
        typed.k.data = half[0];
        typed.v.data = half[1];
        tp_clear_outputs(&s.tp);
        assert_int_equal(sdpa_forward(ctx, &typed), SDPA_OK);
        assert_true(forward_matches(&c, &s, path_name(paths[pi])));
        free(plain);
    }
    FREE_ALL(half[0], half[1]);
    tbuf_free_all((tbuf *const[]){&pool_k, &pool_v, NULL});
    sdpa_ctx_destroy(ctx);
    dinst_free(&s);
}

/* ---- Refusals. ---------------------------------------------------------- */
static void test_bad_dropout(void **state)
{
    const int dtype = *(const int *)*state;
    dcase c = dcase_of(dtype, 1, 2, 1, 4, 8, 4, 4);
    c.weights = 1;
    dinst s;
    dinst_make(&s, &c, 500);
    sdpa_ctx *ctx = tp_ctx(0);
    const double bad[] = {-0.1, 1.0,      1.5,      -0.0 - 1e-300,
                          NAN,  INFINITY, -INFINITY};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        s.a.dropout_p = bad[k];
        tp_clear_outputs(&s.tp);
        assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_ERR_BAD_DROPOUT);
        assert_true(tp_outputs_untouched(&s.tp));
        assert_non_null(strstr(sdpa_ctx_last_error(ctx), "dropout_p"));
        size_t bytes = 0;
        assert_int_equal(sdpa_forward_workspace(ctx, &s.a, &bytes),
                         SDPA_ERR_BAD_DROPOUT);
        sdpa_backward_args ba = tp_backward_of(&s.a);
        tbuf dout, dq, dk, dv;
        tbuf_make(&dout, dtype, 1, 2, 4, 4, LAYOUT_BHTD, 0);
        tbuf_make(&dq, dtype, 1, 2, 4, 4, LAYOUT_BHTD, 0);
        tbuf_make(&dk, dtype, 1, 1, 8, 4, LAYOUT_BHTD, 0);
        tbuf_make(&dv, dtype, 1, 1, 8, 4, LAYOUT_BHTD, 0);
        tp_clear(&dq);
        tp_clear(&dk);
        tp_clear(&dv);
        ba.dout = dout.t;
        ba.dq = dq.t;
        ba.dk = dk.t;
        ba.dv = dv.t;
        assert_int_equal(sdpa_backward(ctx, &ba), SDPA_ERR_BAD_DROPOUT);
        assert_true(tp_untouched(&dq, NULL, 1) < 0);
        assert_true(tp_untouched(&dk, NULL, 1) < 0);
        assert_true(tp_untouched(&dv, NULL, 1) < 0);
        assert_non_null(
            strstr(sdpa_ctx_last_error(ctx), "sdpa_backward: dropout_p"));
        tbuf_free_all((tbuf *const[]){&dout, &dq, &dk, &dv, NULL});
    }
    /* below 1 in double, 1 in float: a float32 call refuses it */
    s.a.dropout_p = 1 - 1e-9;
    tp_clear_outputs(&s.tp);
    int st = sdpa_forward(ctx, &s.a);
    if (dtype == SDPA_FLOAT32) {
        assert_int_equal(st, SDPA_ERR_BAD_DROPOUT);
        assert_true(tp_outputs_untouched(&s.tp));
        assert_non_null(strstr(sdpa_ctx_last_error(ctx), "rounds to 1"));
    } else {
        assert_int_equal(st, SDPA_OK);
    }
    sdpa_ctx_destroy(ctx);
    dinst_free(&s);
}

/* ---- Merge: split keys, the same mask. --------------------------------- */
/* Two calls that each allow half of the keys (a mask: the logical key
 * index, and so the mask's draw, is the whole call's), merged, against
 * one call over all of them. */
static void test_merge_split_keys(void **state)
{
    const int dtype = *(const int *)*state;
    dcase c = dcase_of(dtype, 1, 2, 2, 5, 40, 8, 4);
    c.p = 0.35;
    c.seed = 77;
    c.offset = 3;
    dinst s;
    dinst_make(&s, &c, 600);
    sdpa_ctx *ctx = tp_ctx(0);
    assert_int_equal(sdpa_forward(ctx, &s.a), SDPA_OK);
    tbuf outs[2], lses[2], masks[2];
    for (int part = 0; part < 2; part++) {
        tbuf_make(&outs[part], dtype, 1, 2, 5, 4, LAYOUT_BHTD, 0);
        tbuf_make(&lses[part], dtype, 1, 2, 5, 1, LAYOUT_BHTD, 0);
        tbuf_make(&masks[part], ELEM_U8, 1, 1, 1, 40, LAYOUT_BHTD, 0);
        for (int64_t j = 0; j < 40; j++)
            tset(&masks[part], 0, 0, 0, j, (j < 20) != (part == 0));
        sdpa_forward_args a = s.a;
        a.out = outs[part].t;
        a.lse = lses[part].t;
        a.mask = masks[part].t;
        a.mask.stride[0] = a.mask.stride[1] = a.mask.stride[2] = 0;
        assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
    }
    tbuf merged;
    tbuf_make(&merged, dtype, 1, 2, 5, 4, LAYOUT_BHTD, 0);
    sdpa_merge_args m = SDPA_MERGE_ARGS_INIT;
    m.dtype = dtype;
    m.parts = 2;
    const sdpa_tensor o[2] = {outs[0].t, outs[1].t},
                      l[2] = {lses[0].t, lses[1].t};
    m.outs = o;
    m.lses = l;
    m.out = merged.t;
    assert_int_equal(sdpa_merge(ctx, &m), SDPA_OK);
    const double eps = dtype_eps(dtype);
    for (int64_t h = 0; h < 2; h++)
        for (int64_t i = 0; i < 5; i++)
            for (int64_t d = 0; d < 4; d++) {
                double one = tget(&s.tp.out, 0, h, i, d);
                double two = tget(&merged, 0, h, i, d);
                assert_true(fabs(one - two) <= 200 * eps);
            }
    tbuf_free_all((tbuf *const[]){&outs[0], &outs[1], &lses[0], &lses[1],
                                  &masks[0], &masks[1], &merged, NULL});
    sdpa_ctx_destroy(ctx);
    dinst_free(&s);
}

/* ---- The backward. ------------------------------------------------------- */
typedef struct bwd_inst {
    dinst f;
    tbuf dout, dq, dk, dv;
    double dsinks[TP_MAX_H];
    sdpa_backward_args ba;
} bwd_inst;

static void bwd_make(bwd_inst *s, const dcase *c, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    dinst_make(&s->f, c, seed);
    rng r = {seed ^ 0x9e3779b97f4a7c15ull};
    tbuf_make(&s->dout, c->dtype, c->N, c->Hq, c->Tq, c->Dv, LAYOUT_BHTD, 0);
    tbuf_fill_random(&s->dout, &r, 1.0);
    tbuf_make(&s->dq, c->dtype, c->N, c->Hq, c->Tq, c->Dk, LAYOUT_BHTD, 0);
    tbuf_make(&s->dk, c->dtype, c->N, c->Hkv, c->Tk, c->Dk, LAYOUT_BHTD, 0);
    tbuf_make(&s->dv, c->dtype, c->N, c->Hkv, c->Tk, c->Dv, LAYOUT_BHTD, 0);
    s->ba = tp_backward_of(&s->f.a);
    s->ba.dout = s->dout.t;
    s->ba.dq = s->dq.t;
    s->ba.dk = s->dk.t;
    s->ba.dv = s->dv.t;
    if (c->x.use_sinks)
        s->ba.dsinks = s->dsinks;
}

static void bwd_free(bwd_inst *s)
{
    tbuf_free_all((tbuf *const[]){&s->dout, &s->dq, &s->dk, &s->dv, NULL});
    dinst_free(&s->f);
}

static int grad_close(const char *what, double got, long double ref,
                      long double bound, int support, long double eps)
{
    if (!support && got == 0)
        return 1;
    long double tol = 2 * (bound + 2 * eps * fabsl(ref));
    if (fabsl((long double)got - ref) <= tol)
        return 1;
    print_message("  %s = %.17g, oracle %.17Lg, tolerance %.3Lg\n", what, got,
                  ref, tol);
    return 0;
}

/* The gradients against the oracle (the same mask, drawn by the tests'
 * own Philox). */
static int backward_matches(const dcase *c, const bwd_inst *s)
{
    const long double eps = dtype_eps(c->dtype);
    const bwd_extra none = {0, 0, 0, 0, 0, 0};
    bwd_ref r;
    assert_int_equal(ref_backward(&s->ba, (double)eps, &none, &r), 0);
    int ok = 1;
    for (int64_t b = 0; b < c->N; b++) {
        for (int64_t h = 0; h < c->Hq && ok; h++)
            for (int64_t i = 0; i < c->Tq && ok; i++)
                for (int64_t d = 0; d < c->Dk && ok; d++) {
                    size_t x = bwd_dq_at(&r, b, h, i) + (size_t)d;
                    ok = grad_close("dq", tget(&s->dq, b, h, i, d), r.dq[x],
                                    r.tq[x], r.sq[x], eps);
                }
        for (int64_t hk = 0; hk < c->Hkv && ok; hk++)
            for (int64_t j = 0; j < c->Tk && ok; j++) {
                for (int64_t d = 0; d < c->Dk && ok; d++) {
                    size_t x = bwd_dk_at(&r, b, hk, j) + (size_t)d;
                    ok = grad_close("dk", tget(&s->dk, b, hk, j, d), r.dk[x],
                                    r.tk[x], r.sk[x], eps);
                }
                for (int64_t d = 0; d < c->Dv && ok; d++) {
                    size_t x = bwd_dv_at(&r, b, hk, j) + (size_t)d;
                    ok = grad_close("dv", tget(&s->dv, b, hk, j, d), r.dv[x],
                                    r.tv[x], r.sv[x], eps);
                }
            }
    }
    for (int64_t h = 0; c->x.use_sinks && h < c->Hq && ok; h++)
        ok = grad_close("dsinks", s->dsinks[h], r.dsinks[h], r.ts[h], 1,
                        DBL_EPSILON);
    bwd_ref_free(&r);
    return ok;
}

/* The backward's bits at 1 thread (one pass), then at 2 and 3 (for one
 * (batch item, KV head) pair: the two-pass scheme) and with the caller's
 * parallel-for: the same. */
static void test_backward(void **state)
{
    const int dtype = *(const int *)*state;
    sdpa_ctx *ctx = tp_ctx(1);
    tp_set(ctx, SDPA_OPT_BLOCK_Q, 8);
    tp_set(ctx, SDPA_OPT_BLOCK_K, 16);
    for (int variant = 0; variant < 4; variant++) {
        dcase c = dcase_of(dtype, variant == 3 ? 1 : 2, 4, variant == 3 ? 1 : 2,
                           19, 37, 8, 6);
        c.p = 0.25;
        c.seed = 1234 + (uint64_t)variant;
        c.offset = 99;
        case_options(&c, variant);
        /* variant 3: a mask (dead keys in the tiles) */
        bwd_inst s;
        bwd_make(&s, &c, 700 + (uint64_t)variant);
        assert_int_equal(sdpa_forward(ctx, &s.f.a), SDPA_OK);
        void *bits[3] = {NULL, NULL, NULL};
        const tbuf *grads[3] = {&s.dq, &s.dk, &s.dv};
        for (int threads = 1; threads <= 3; threads++) {
            tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
            tp_clear(&s.dq);
            tp_clear(&s.dk);
            tp_clear(&s.dv);
            assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
            if (threads == 1) {
                if (!backward_matches(&c, &s)) {
                    print_message("  variant %d\n", variant);
                    fail();
                }
                for (int g = 0; g < 3; g++)
                    bits[g] = bytes_of(grads[g]);
            } else {
                for (int g = 0; g < 3; g++)
                    assert_memory_equal(bits[g], grads[g]->mem,
                                        tbuf_bytes(grads[g]));
            }
        }
        tp_set(ctx, SDPA_OPT_NUM_THREADS, 1);
        test_pool pool = {.workers = 2};
        assert_int_equal(sdpa_ctx_set_parallel_for(ctx, test_parallel_for,
                                                   &pool, pool.workers),
                         SDPA_OK);
        tp_clear(&s.dq);
        tp_clear(&s.dk);
        tp_clear(&s.dv);
        assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
        for (int g = 0; g < 3; g++)
            assert_memory_equal(bits[g], grads[g]->mem, tbuf_bytes(grads[g]));
        assert_int_equal(sdpa_ctx_set_parallel_for(ctx, NULL, NULL, 1),
                         SDPA_OK);
        FREE_ALL(bits[0], bits[1], bits[2]);
        bwd_free(&s);
    }
    sdpa_ctx_destroy(ctx);
}

/* Finite differences of Σ dout ∘ out with the mask fixed (the same seed
 * and offset at every point), float64. */
static void test_finite_differences(void **state)
{
    (void)state;
    dcase c = dcase_of(SDPA_FLOAT64, 1, 2, 1, 5, 9, 3, 4);
    c.p = 0.3;
    c.seed = 31337;
    c.offset = 5;
    c.amp = 0.9;
    tp_every_option(&c.x, 4);
    bwd_inst s;
    bwd_make(&s, &c, 800);
    sdpa_ctx *ctx = tp_ctx(0);
    tp_fd_point at = {ctx, &s.f.a, &s.dout, &s.f.tp.out};
    assert_true(isfinite(tp_fd_loss(&at)) != 0);
    assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
    tbuf dq = s.dq, dk = s.dk, dv = s.dv;
    int bad = 0;
    double worst = 0;
    for (int64_t h = 0; h < c.Hq; h++)
        for (int64_t i = 0; i < c.Tq; i++)
            for (int64_t d = 0; d < c.Dk; d++)
                bad |= tp_fd_check(tp_fd_loss, &at, &s.f.tp.q, NULL, 0, h, i, d,
                                   tget(&dq, 0, h, i, d), "q", &worst);
    for (int64_t j = 0; j < c.Tk; j++) {
        for (int64_t d = 0; d < c.Dk; d++)
            bad |= tp_fd_check(tp_fd_loss, &at, &s.f.tp.k, NULL, 0, 0, j, d,
                               tget(&dk, 0, 0, j, d), "k", &worst);
        for (int64_t d = 0; d < c.Dv; d++)
            bad |= tp_fd_check(tp_fd_loss, &at, &s.f.tp.v, NULL, 0, 0, j, d,
                               tget(&dv, 0, 0, j, d), "v", &worst);
    }
    for (int64_t h = 0; h < c.Hq; h++)
        bad |= tp_fd_check(tp_fd_loss, &at, NULL, &c.x.sinks[h], 0, h, 0, 0,
                           s.dsinks[h], "sinks", &worst);
    print_message("  finite differences: worst error / tolerance %.3g\n",
                  worst);
    assert_false(bad);
    sdpa_ctx_destroy(ctx);
    bwd_free(&s);
}

/* ---- Ragged. ----------------------------------------------------------- */
/* Packed sequences of lengths 3, 0, 7, 5 (keys 6, 4, 0, 9): forward and
 * backward bitwise their own rectangular calls made with dropout_offset +
 * b·Hq. */
static void test_ragged(void **state)
{
    const int dtype = *(const int *)*state;
    enum { SEQS = 4, HQ = 2, HKV = 1, DK = 4, DV = 4 };
    const int64_t tq[SEQS] = {3, 0, 7, 5}, tk[SEQS] = {6, 4, 0, 9};
    int64_t q_off[SEQS + 1] = {0}, kv_off[SEQS + 1] = {0};
    for (int b = 0; b < SEQS; b++) {
        q_off[b + 1] = q_off[b] + tq[b];
        kv_off[b + 1] = kv_off[b] + tk[b];
    }
    const int64_t TQ = q_off[SEQS], TK = kv_off[SEQS];
    rng r = {900};
    tbuf q, k, v, out, lse, dout, dq, dk, dv;
    tbuf_make(&q, dtype, 1, HQ, TQ, DK, LAYOUT_BTHD, 0);
    tbuf_make(&k, dtype, 1, HKV, TK, DK, LAYOUT_BTHD, 0);
    tbuf_make(&v, dtype, 1, HKV, TK, DV, LAYOUT_BTHD, 0);
    tbuf_make(&out, dtype, 1, HQ, TQ, DV, LAYOUT_BTHD, 0);
    tbuf_make(&lse, dtype, 1, HQ, TQ, 1, LAYOUT_BHTD, 0);
    tbuf_make(&dout, dtype, 1, HQ, TQ, DV, LAYOUT_BTHD, 0);
    tbuf_make(&dq, dtype, 1, HQ, TQ, DK, LAYOUT_BTHD, 0);
    tbuf_make(&dk, dtype, 1, HKV, TK, DK, LAYOUT_BTHD, 0);
    tbuf_make(&dv, dtype, 1, HKV, TK, DV, LAYOUT_BTHD, 0);
    tbuf_fill_random(&q, &r, 1.0);
    tbuf_fill_random(&k, &r, 1.0);
    tbuf_fill_random(&v, &r, 1.0);
    tbuf_fill_random(&dout, &r, 1.0);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    a.q = q.t;
    a.k = k.t;
    a.v = v.t;
    a.out = out.t;
    a.lse = lse.t;
    a.seqs = SEQS;
    a.q_offsets = q_off;
    a.kv_offsets = kv_off;
    a.dropout_p = 0.3;
    a.dropout_seed = 0xabcdef;
    a.dropout_offset = 40;
    sdpa_ctx *ctx = tp_ctx(1);
    for (int threads = 1; threads <= 2; threads++) {
        tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
        assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
        sdpa_backward_args ba = tp_backward_of(&a);
        ba.seqs = SEQS;
        ba.q_offsets = q_off;
        ba.kv_offsets = kv_off;
        ba.dout = dout.t;
        ba.dq = dq.t;
        ba.dk = dk.t;
        ba.dv = dv.t;
        assert_int_equal(sdpa_backward(ctx, &ba), SDPA_OK);
        for (int64_t b = 0; b < SEQS; b++) {
            if (tq[b] == 0 || tk[b] == 0)
                continue;
            sdpa_backward_args sb = tp_ragged_sequence(&ba, b);
            tbuf so, sl, sq, sk, sv;
            tbuf_make(&so, dtype, 1, HQ, tq[b], DV, LAYOUT_BHTD, 0);
            tbuf_make(&sl, dtype, 1, HQ, tq[b], 1, LAYOUT_BHTD, 0);
            tbuf_make(&sq, dtype, 1, HQ, tq[b], DK, LAYOUT_BHTD, 0);
            tbuf_make(&sk, dtype, 1, HKV, tk[b], DK, LAYOUT_BHTD, 0);
            tbuf_make(&sv, dtype, 1, HKV, tk[b], DV, LAYOUT_BHTD, 0);
            sdpa_forward_args sa = SDPA_FORWARD_ARGS_INIT;
            TP_COPY_SHARED(sa, sb);
            sa.dropout_offset = a.dropout_offset + (uint64_t)(b * HQ);
            sa.out = so.t;
            sa.lse = sl.t;
            assert_int_equal(sdpa_forward(ctx, &sa), SDPA_OK);
            for (int64_t h = 0; h < HQ; h++)
                for (int64_t i = 0; i < tq[b]; i++) {
                    for (int64_t d = 0; d < DV; d++)
                        assert_true(tget(&so, 0, h, i, d) ==
                                    tget(&out, 0, h, q_off[b] + i, d));
                    assert_true(tget(&sl, 0, h, i, 0) ==
                                tget(&lse, 0, h, q_off[b] + i, 0));
                }
            sb.dropout_offset = sa.dropout_offset;
            sb.dq = sq.t;
            sb.dk = sk.t;
            sb.dv = sv.t;
            assert_int_equal(sdpa_backward(ctx, &sb), SDPA_OK);
            for (int64_t h = 0; h < HQ; h++)
                for (int64_t i = 0; i < tq[b]; i++)
                    for (int64_t d = 0; d < DK; d++)
                        assert_true(tget(&sq, 0, h, i, d) ==
                                    tget(&dq, 0, h, q_off[b] + i, d));
            for (int64_t j = 0; j < tk[b]; j++) {
                for (int64_t d = 0; d < DK; d++)
                    assert_true(tget(&sk, 0, 0, j, d) ==
                                tget(&dk, 0, 0, kv_off[b] + j, d));
                for (int64_t d = 0; d < DV; d++)
                    assert_true(tget(&sv, 0, 0, j, d) ==
                                tget(&dv, 0, 0, kv_off[b] + j, d));
            }
            /* the sequence against the reference too: the offset moved */
            dcase c = dcase_of(dtype, 1, HQ, HKV, tq[b], tk[b], DK, DV);
            c.p = a.dropout_p;
            c.x.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
            dinst view;
            memset(&view, 0, sizeof view);
            view.a = sa;
            view.tp.out = so;
            view.tp.lse = sl;
            assert_true(forward_matches(&c, &view, "ragged sequence"));
            tbuf_free_all((tbuf *const[]){&so, &sl, &sq, &sk, &sv, NULL});
        }
    }
    sdpa_ctx_destroy(ctx);
    tbuf_free_all(
        (tbuf *const[]){&q, &k, &v, &out, &lse, &dout, &dq, &dk, &dv, NULL});
}

/* ---- The layer. -----------------------------------------------------------
 */
typedef struct layer_point {
    sdpa_ctx *ctx;
    const sdpa_mha_args *m;
    const tbuf *dy, *y;
} layer_point;

static double layer_loss(void *user)
{
    const layer_point *at = user;
    if (sdpa_mha_forward(at->ctx, at->m) != SDPA_OK)
        return NAN;
    return tp_dot(at->dy, at->y);
}

/* sdpa_mha_forward and sdpa_mha_backward with the attention's dropout:
 * the layer's dx_q against finite differences of its forward with the
 * same mask (a backward without the dropout would not match). */
static void test_layer(void **state)
{
    (void)state;
    enum { N = 1, T = 6, E = 8, H = 2, DH = 4 };
    rng r = {1000};
    tbuf x, y, dy, dx, w[4];
    tbuf_make(&x, SDPA_FLOAT64, N, 1, T, E, LAYOUT_BHTD, 0);
    tbuf_make(&y, SDPA_FLOAT64, N, 1, T, E, LAYOUT_BHTD, 0);
    tbuf_make(&dy, SDPA_FLOAT64, N, 1, T, E, LAYOUT_BHTD, 0);
    tbuf_make(&dx, SDPA_FLOAT64, N, 1, T, E, LAYOUT_BHTD, 0);
    tbuf_fill_random(&x, &r, 1.0);
    tbuf_fill_random(&dy, &r, 1.0);
    void *wp[4];
    for (int i = 0; i < 4; i++) {
        tbuf_make(&w[i], SDPA_FLOAT64, 1, 1, E, E, LAYOUT_BHTD, 0);
        tbuf_fill_random(&w[i], &r, 0.5);
        wp[i] = w[i].mem;
    }
    void *nob[4] = {NULL, NULL, NULL, NULL};
    sdpa_mha_args m = tp_mha_args(SDPA_FLOAT64, SDPA_POS_NONE, H, H, DH, DH,
                                  &x.t, NULL, &y.t, wp, nob);
    sdpa_forward_args attn = SDPA_FORWARD_ARGS_INIT;
    attn.causal = SDPA_CAUSAL_TOP_LEFT;
    attn.dropout_p = 0.4;
    attn.dropout_seed = 2024;
    attn.dropout_offset = 11;
    m.attn = &attn;
    sdpa_ctx *ctx = tp_ctx(0);
    assert_int_equal(sdpa_mha_forward(ctx, &m), SDPA_OK);
    sdpa_mha_backward_args mb = SDPA_MHA_BACKWARD_ARGS_INIT;
    mb.forward = &m;
    mb.dy = dy.t;
    mb.dx_q = dx.t;
    assert_int_equal(sdpa_mha_backward(ctx, &mb), SDPA_OK);
    layer_point at = {ctx, &m, &dy, &y};
    int bad = 0;
    double worst = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t e = 0; e < E; e++)
            bad |= tp_fd_check(layer_loss, &at, &x, NULL, 0, 0, t, e,
                               tget(&dx, 0, 0, t, e), "x_q", &worst);
    print_message("  layer: worst error / tolerance %.3g\n", worst);
    assert_false(bad);
    sdpa_ctx_destroy(ctx);
    tbuf_free_all(
        (tbuf *const[]){&x, &y, &dy, &dx, &w[0], &w[1], &w[2], &w[3], NULL});
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_keep_rate),
        TP_BOTH(test_forward_paths),
        TP_BOTH(test_caller_threads),
        TP_BOTH(test_p_zero),
        TP_BOTH(test_bad_dropout),
        TP_BOTH(test_merge_split_keys),
        cmocka_unit_test(test_storage_and_pages),
        TP_BOTH(test_backward),
        cmocka_unit_test(test_finite_differences),
        TP_BOTH(test_ragged),
        cmocka_unit_test(test_layer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
