/*
 * Properties of sdpa_forward that hold for any input:
 *   - forbidden weights are exactly 0.0 (removed before the exponent);
 *   - allowed weights of a row sum to 1 within (Tk + 8) * eps;
 *   - permuting keys and values together (and mask/bias columns with them)
 *     permutes the weights and leaves out/lse unchanged within tolerance;
 *   - NaN in K/V rows j >= kv_lens[b] never reaches out/weights/lse;
 *   - results are bitwise identical for 1, 2 and 3 worker threads, and when
 *     4 threads run their own contexts at once on shared inputs;
 *   - the portable, AVX2 and AVX-512 row kernels agree within a stated
 *     bound (each vector set where the CPU has it);
 *   - after the first call with a shape, later calls with the same or a
 *     smaller shape allocate nothing (counting allocator), every allocation
 *     honours its alignment and is freed with its size;
 *   - sdpa_forward_workspace validates, reports > 0 bytes for the
 *     materialised path, allocates nothing and writes nothing.
 * Each property is checked on every kernel / path the context accepts
 * (SDPA_ERR_UNSUPPORTED skips a forced TILED / DECODE path or a vector
 * kernel the CPU lacks).
 */
#define _POSIX_C_SOURCE 200809L /* pthreads */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "sdpa.h"
#include "checks.h"
#include "problem.h"
#include "testutil.h"

typedef test_problem prob;

typedef struct prob_opts {
    int mask, bias, bias_ninf, causal, kvlens, weights, lse;
} prob_opts;

/* Contiguous BHTD problem with random data; logits bounded by about 4. */
static void prob_make(prob *p, int dtype, uint64_t seed, int64_t N, int64_t Hq,
                      int64_t Hkv, int64_t Tq, int64_t Tk, int64_t Dk,
                      int64_t Dv, const prob_opts *o, const int64_t *kv_lens)
{
    rng r = {seed};
    tp_make(p, dtype, &r, sqrt(4.0 / sqrt((double)Dk)), N, Hq, Hkv, Tq, Tk, Dk,
            Dv);
    sdpa_forward_args a = p->a;
    if (o->mask) {
        tp_mask_random(p, &r, 0.3);
        a.mask = p->mask.t;
    }
    if (o->bias) {
        tbuf_make(&p->bias, dtype, 1, Hq, Tq, Tk, LAYOUT_BHTD, 0);
        tbuf_fill_random(&p->bias, &r, 1.0);
        if (o->bias_ninf)
            for (int64_t h = 0; h < Hq; ++h)
                for (int64_t i = 0; i < Tq; ++i)
                    for (int64_t j = 0; j < Tk; ++j)
                        if (rng_unit(&r) < 0.15)
                            tset(&p->bias, 0, h, i, j, -INFINITY);
        a.bias = p->bias.t;
    }
    a.causal = o->causal;
    p->a = a;
    if (o->kvlens && kv_lens)
        tp_kvlens(p, kv_lens);
    tp_outputs(p, o->weights, o->lse, 0);
}

/* Iterate over (kernel, path) pairs the context accepts. run() is called
 * after setting both; returns the number of pairs that ran. */
typedef void (*pair_fn)(sdpa_ctx *ctx, prob *p, int kernel, int path,
                        void *user);

static int for_each_pair(sdpa_ctx *ctx, prob *p, pair_fn fn, void *user)
{
    int ran = 0;
    for (int ki = 0; ki < TEST_KERNELS; ++ki) {
        if (!tp_use_kernel(ctx, ki))
            continue;
        for (int path = SDPA_PATH_AUTO; path <= SDPA_PATH_DECODE; ++path) {
            tp_use_path(ctx, path);
            tp_clear_outputs(p);
            int st = sdpa_forward(ctx, &p->a);
            if (st == SDPA_ERR_UNSUPPORTED &&
                (path == SDPA_PATH_TILED || path == SDPA_PATH_DECODE))
                continue;
            if (st != SDPA_OK)
                print_error("kernel %d path %d: %s: %s\n", test_kernels[ki],
                            path, sdpa_status_string(st),
                            sdpa_ctx_last_error(ctx));
            assert_int_equal(st, SDPA_OK);
            fn(ctx, p, test_kernels[ki], path, user);
            ran++;
        }
    }
    return ran;
}

/* ---- forbidden weights are exactly 0; rows sum to 1 ------------------- */

typedef struct zero_ctx {
    ref_result *r;
    long forbidden_seen, allowed_seen;
} zero_ctx;

static void check_zero_and_sum(sdpa_ctx *ctx, prob *p, int kernel, int path,
                               void *user)
{
    (void)ctx;
    zero_ctx *z = user;
    /* Each probability carries a few ulp from exp and the division; the
     * normalising sum of Tk terms adds at most Tk ulp: (Tk + 8) eps. */
    const double bound = ((double)p->Tk + 8) * tp_eps(p->dtype);
    for (int64_t b = 0; b < p->N; ++b)
        for (int64_t h = 0; h < p->Hq; ++h)
            for (int64_t i = 0; i < p->Tq; ++i) {
                size_t row = (size_t)((b * p->Hq + h) * p->Tq + i);
                long double sum = 0;
                int any = 0;
                for (int64_t j = 0; j < p->Tk; ++j) {
                    double w = tget(&p->w, b, h, i, j);
                    if (!z->r->allowed[row * (size_t)p->Tk + (size_t)j]) {
                        if (w != 0.0)
                            print_error("kernel %d path %d: forbidden "
                                        "w[%lld,%lld,%lld,%lld] = %g\n",
                                        kernel, path, (long long)b,
                                        (long long)h, (long long)i,
                                        (long long)j, w);
                        assert_true(w == 0.0);
                        z->forbidden_seen++;
                    } else {
                        assert_true(w > 0.0 && w <= 1.0);
                        sum += w;
                        any = 1;
                        z->allowed_seen++;
                    }
                }
                if (any) {
                    if (!(fabsl(sum - 1.0L) <= bound))
                        print_error("kernel %d path %d: row sum %.17Lg, bound "
                                    "%g\n",
                                    kernel, path, sum, bound);
                    assert_true(fabsl(sum - 1.0L) <= bound);
                } else {
                    assert_true(sum == 0.0L);
                }
            }
}

static void test_forbidden_zero_rows_sum_one(void **state)
{
    const int dtype = *(int *)*state;
    static const int causals[] = {SDPA_CAUSAL_NONE, SDPA_CAUSAL_TOP_LEFT,
                                  SDPA_CAUSAL_BOTTOM_RIGHT};
    for (int c = 0; c < 3; ++c) {
        sdpa_ctx *ctx = tp_ctx(1);
        prob p;
        prob_opts o = {1, 1, 1, causals[c], 1, 1, 1};
        const int64_t lens[2] = {13, 7};
        prob_make(&p, dtype, 11u + (uint64_t)c, 2, 4, 2, 9, 13, 8, 5, &o, lens);
        ref_result r;
        assert_int_equal(ref_forward(&p.a, &r), 0);
        zero_ctx z = {&r, 0, 0};
        int ran = for_each_pair(ctx, &p, check_zero_and_sum, &z);
        assert_true(ran >= 2);
        assert_true(z.forbidden_seen > 0);
        assert_true(z.allowed_seen > 0);
        ref_free(&r);
        tp_free(&p);
        sdpa_ctx_destroy(ctx);
    }
}

/* ---- permutation of keys and values ----------------------------------- */

typedef struct perm_ctx {
    prob *orig;          /* the permuted problem's source */
    const int64_t *perm; /* key j of the permuted problem is key perm[j] */
    double *out0, *w0, *lse0;
    int have0;
} perm_ctx;

/* Relative difference; equal values (also two -inf) give 0, a NaN anywhere
 * gives NaN, which nan_max keeps so that a NaN can never pass a bound. */
static double rdiff(double x, double y)
{
    return x == y ? 0.0 : fabs(x - y) / (1 + fabs(x));
}

static double nan_max(double worst, double e)
{
    return (isnan(e) || e > worst) ? e : worst;
}

static void snapshot(const prob *p, double *out, double *w, double *lse)
{
    size_t k = 0, kw = 0, kl = 0;
    for (int64_t b = 0; b < p->N; ++b)
        for (int64_t h = 0; h < p->Hq; ++h)
            for (int64_t i = 0; i < p->Tq; ++i) {
                for (int64_t d = 0; d < p->Dv; ++d)
                    out[k++] = tget(&p->out, b, h, i, d);
                for (int64_t j = 0; j < p->Tk; ++j)
                    w[kw++] = tget(&p->w, b, h, i, j);
                lse[kl++] = tget(&p->lse, b, h, i, 0);
            }
}

static void test_permutation(void **state)
{
    const int dtype = *(int *)*state;
    const int64_t N = 2, Hq = 4, Hkv = 2, Tq = 7, Tk = 19, Dk = 6, Dv = 5;
    for (int with_mask = 0; with_mask < 2; ++with_mask) {
        prob a, b;
        prob_opts o = {with_mask, with_mask, with_mask, 0, 0, 1, 1};
        prob_make(&a, dtype, 77, N, Hq, Hkv, Tq, Tk, Dk, Dv, &o, NULL);
        prob_make(&b, dtype, 77, N, Hq, Hkv, Tq, Tk, Dk, Dv, &o, NULL);
        int64_t perm[19];
        rng r = {5};
        for (int64_t j = 0; j < Tk; ++j)
            perm[j] = j;
        for (int64_t j = Tk - 1; j > 0; --j) {
            int64_t s = rng_int(&r, 0, j), t = perm[j];
            perm[j] = perm[s];
            perm[s] = t;
        }
        /* b: key/value row j (and mask/bias column j) = a's perm[j]. */
        for (int64_t n = 0; n < N; ++n)
            for (int64_t j = 0; j < Tk; ++j) {
                for (int64_t h = 0; h < Hkv; ++h) {
                    for (int64_t d = 0; d < Dk; ++d)
                        tset(&b.k, n, h, j, d, tget(&a.k, n, h, perm[j], d));
                    for (int64_t d = 0; d < Dv; ++d)
                        tset(&b.v, n, h, j, d, tget(&a.v, n, h, perm[j], d));
                }
                if (with_mask)
                    for (int64_t h = 0; h < Hq; ++h)
                        for (int64_t i = 0; i < Tq; ++i) {
                            tset(&b.mask, n, h, i, j,
                                 tget(&a.mask, n, h, i, perm[j]));
                            if (n == 0)
                                tset(&b.bias, 0, h, i, j,
                                     tget(&a.bias, 0, h, i, perm[j]));
                        }
            }
        /* Both runs compute the same logits; only summation orders differ
         * (softmax sum, P·V over Tk, possibly gemm blocking over columns):
         * |difference| <= 4 (Tk + Dk + 16) eps (1 + |value|). */
        const double tol = 4.0 * (double)(Tk + Dk + 16) * tp_eps(dtype);
        size_t no = (size_t)(N * Hq * Tq * Dv), nw = (size_t)(N * Hq * Tq * Tk),
               nl = (size_t)(N * Hq * Tq);
        double *oa = malloc(no * sizeof(double)),
               *wa = malloc(nw * sizeof(double)),
               *la = malloc(nl * sizeof(double));
        double *ob = malloc(no * sizeof(double)),
               *wb = malloc(nw * sizeof(double)),
               *lb = malloc(nl * sizeof(double));
        assert_true(oa && wa && la && ob && wb && lb);
        sdpa_ctx *ctx = tp_ctx(1);
        static const int paths[] = {SDPA_PATH_AUTO, SDPA_PATH_MATERIALISED,
                                    SDPA_PATH_TILED, SDPA_PATH_DECODE};
        int ran = 0;
        for (int pi = 0; pi < 4; ++pi) {
            tp_set(ctx, SDPA_OPT_PATH, paths[pi]);
            int sa = sdpa_forward(ctx, &a.a);
            int sb = sdpa_forward(ctx, &b.a);
            if (pi >= 2 && sa == SDPA_ERR_UNSUPPORTED) {
                assert_int_equal(sb, SDPA_ERR_UNSUPPORTED);
                continue;
            }
            assert_int_equal(sa, SDPA_OK);
            assert_int_equal(sb, SDPA_OK);
            ran++;
            snapshot(&a, oa, wa, la);
            snapshot(&b, ob, wb, lb);
            double worst = 0;
            for (size_t k = 0; k < no; ++k)
                worst = nan_max(worst, rdiff(oa[k], ob[k]));
            for (size_t k = 0; k < nl; ++k)
                worst = nan_max(worst, rdiff(la[k], lb[k]));
            for (size_t row = 0; row < nl; ++row)
                for (int64_t j = 0; j < Tk; ++j)
                    worst = nan_max(
                        worst, rdiff(wa[row * (size_t)Tk + (size_t)perm[j]],
                                     wb[row * (size_t)Tk + (size_t)j]));
            if (!(worst <= tol))
                print_error("path %d: permuted result differs by %g (tol %g)\n",
                            paths[pi], worst, tol);
            assert_true(worst <= tol);
        }
        assert_true(ran >= 2);
        /* The permutation is not the identity, so the test can tell. */
        int moved = 0;
        for (int64_t j = 0; j < Tk; ++j)
            moved += perm[j] != j;
        assert_true(moved > 0);
        free(oa);
        free(wa);
        free(la);
        free(ob);
        free(wb);
        free(lb);
        sdpa_ctx_destroy(ctx);
        tp_free(&a);
        tp_free(&b);
    }
}

/* ---- NaN beyond kv_lens never reaches the outputs ---------------------- */

typedef struct nan_ctx {
    ref_result *r;
} nan_ctx;

/* Row (b, h, i) of out finite and within tol of the reference. */
static void check_out_row(const prob *p, const ref_result *r, int64_t b,
                          int64_t h, int64_t i, double tol, int kernel,
                          int path, int64_t block_k)
{
    const size_t row = (size_t)((b * p->Hq + h) * p->Tq + i);
    for (int64_t d = 0; d < p->Dv; ++d) {
        double x = tget(&p->out, b, h, i, d);
        double ref = (double)r->out[row * (size_t)p->Dv + (size_t)d];
        if (!(isfinite(x) && fabs(x - ref) <= tol))
            print_error("kernel %d path %d block_k %lld out[%lld,%lld,%lld,"
                        "%lld] = %g (ref %g)\n",
                        kernel, path, (long long)block_k, (long long)b,
                        (long long)h, (long long)i, (long long)d, x, ref);
        assert_true(isfinite(x) && fabs(x - ref) <= tol);
    }
}

static void check_nan_free(sdpa_ctx *ctx, prob *p, int kernel, int path,
                           void *user)
{
    (void)ctx;
    nan_ctx *n = user;
    /* Loose accuracy bound (the random test has the tight one): 1e-4 for
     * float, 1e-10 for double; the point here is "finite and right". */
    const double tol = p->dtype == SDPA_FLOAT32 ? 1e-4 : 1e-10;
    for (int64_t b = 0; b < p->N; ++b)
        for (int64_t h = 0; h < p->Hq; ++h)
            for (int64_t i = 0; i < p->Tq; ++i) {
                size_t row = (size_t)((b * p->Hq + h) * p->Tq + i);
                check_out_row(p, n->r, b, h, i, tol, kernel, path, -1);
                for (int64_t j = 0; j < p->Tk; ++j) {
                    double x = tget(&p->w, b, h, i, j);
                    double ref =
                        (double)n->r->weights[row * (size_t)p->Tk + (size_t)j];
                    assert_true(isfinite(x) && fabs(x - ref) <= tol);
                }
                double l = tget(&p->lse, b, h, i, 0);
                double lref = (double)n->r->lse[row];
                if (isinf(lref))
                    assert_true(isinf(l) && l < 0);
                else
                    assert_true(isfinite(l) && fabs(l - lref) <= tol);
            }
}

static void test_nan_beyond_kv_lens(void **state)
{
    const int dtype = *(int *)*state;
    static const int causals[] = {SDPA_CAUSAL_NONE, SDPA_CAUSAL_BOTTOM_RIGHT};
    for (int c = 0; c < 2; ++c) {
        sdpa_ctx *ctx = tp_ctx(1);
        prob p;
        prob_opts o = {0, 0, 0, causals[c], 1, 1, 1};
        const int64_t lens[3] = {5, 17, 0};
        prob_make(&p, dtype, 99, 3, 2, 1, 6, 17, 7, 4, &o, lens);
        for (int64_t b = 0; b < 3; ++b)
            for (int64_t j = lens[b]; j < 17; ++j) {
                for (int64_t d = 0; d < 7; ++d)
                    tset(&p.k, b, 0, j, d, NAN);
                for (int64_t d = 0; d < 4; ++d)
                    tset(&p.v, b, 0, j, d, NAN);
            }
        ref_result r;
        assert_int_equal(ref_forward(&p.a, &r), 0);
        assert_true(r.any_empty); /* batch 2 has no keys: ZERO policy rows */
        nan_ctx n = {&r};
        assert_true(for_each_pair(ctx, &p, check_nan_free, &n) >= 2);
        ref_free(&r);
        tp_free(&p);
        sdpa_ctx_destroy(ctx);
    }
}

/* ---- keys that no row may see are never read ---------------------------- */

/* out (and lse) finite and within a loose bound of the reference, whose
 * naive loop skips forbidden keys and so never reads their K / V rows. */
static void check_out_close(sdpa_ctx *ctx, prob *p, int kernel, int path,
                            void *user)
{
    nan_ctx *n = user;
    int64_t block_k = -1;
    assert_int_equal(sdpa_ctx_get_int(ctx, SDPA_OPT_BLOCK_K, &block_k),
                     SDPA_OK);
    const double tol = p->dtype == SDPA_FLOAT32 ? 1e-4 : 1e-10;
    for (int64_t b = 0; b < p->N; ++b)
        for (int64_t h = 0; h < p->Hq; ++h)
            for (int64_t i = 0; i < p->Tq; ++i) {
                size_t row = (size_t)((b * p->Hq + h) * p->Tq + i);
                check_out_row(p, n->r, b, h, i, tol, kernel, path, block_k);
                if (p->lse.mem) {
                    double x = tget(&p->lse, b, h, i, 0);
                    assert_true(isfinite(x) &&
                                fabs(x - (double)n->r->lse[row]) <= tol);
                }
            }
}

/* A key that a mask, causality or a -inf bias forbids for every query row
 * of a batch item (left padding is the everyday case) is never read: NaN in
 * its K and V rows must not reach the output (0 · NaN in P·V would). */
static void test_nan_behind_forbidden_keys(void **state)
{
    const int dtype = *(int *)*state;
    /* 0: N = H = 1, Tq = Tk = 6, D = 4, key 2 masked in every row;
     * 1: left padding by a mask (3, 0 and 9 keys) and a masked key 20, GQA,
     *    causal bottom-right;
     * 2: the same keys forbidden by a -inf bias (shared by the items). */
    for (int variant = 0; variant < 3; ++variant) {
        prob p;
        prob_opts o = {variant < 2,
                       variant == 2,
                       0,
                       variant ? SDPA_CAUSAL_BOTTOM_RIGHT : SDPA_CAUSAL_NONE,
                       0,
                       0,
                       1};
        if (variant == 0)
            prob_make(&p, dtype, 7, 1, 1, 1, 6, 6, 4, 4, &o, NULL);
        else
            prob_make(&p, dtype, 8, 3, 4, 2, 5, 40, 8, 6, &o, NULL);
        const int64_t pads[3] = {3, 0, 9};
        for (int64_t b = 0; b < p.N; ++b) {
            int64_t pad = variant == 0 ? 0 : variant == 1 ? pads[b] : 3;
            int64_t middle = variant == 0 ? 2 : 20;
            for (int64_t j = 0; j < p.Tk; ++j) {
                int dead = j < pad || j == middle;
                for (int64_t h = 0; h < p.Hq; ++h)
                    for (int64_t i = 0; i < p.Tq; ++i) {
                        if (variant < 2)
                            tset(&p.mask, b, h, i, j, dead ? 1 : 0);
                        else if (b == 0)
                            tset(&p.bias, 0, h, i, j,
                                 dead ? -INFINITY : tget(&p.bias, 0, h, i, j));
                    }
                if (!dead)
                    continue;
                for (int64_t h = 0; h < p.Hkv; ++h) {
                    for (int64_t d = 0; d < p.Dk; ++d)
                        tset(&p.k, b, h, j, d, NAN);
                    for (int64_t d = 0; d < p.Dv; ++d)
                        tset(&p.v, b, h, j, d, NAN);
                }
            }
        }
        ref_result r;
        assert_int_equal(ref_forward(&p.a, &r), 0);
        assert_false(r.any_empty);
        nan_ctx n = {&r};
        sdpa_ctx *ctx = tp_ctx(1);
        for (int64_t block_k = 0; block_k <= 8; block_k += 8) {
            tp_set(ctx, SDPA_OPT_BLOCK_K, block_k);
            assert_true(for_each_pair(ctx, &p, check_out_close, &n) >= 4);
        }
        sdpa_ctx_destroy(ctx);
        ref_free(&r);
        tp_free(&p);
    }
}

/* ---- per-row diagnostics: max weight and entropy ----------------------- */

/* max_weight and entropy (1.1) on every path and kernel against the weights
 * of the reference: max_j p_ij and -Σ p_ij log p_ij in long double (with a
 * sink, its share counts as one more outcome); 0 and 0 for an empty row
 * under the zero policy. */
static void test_diagnostics(void **state)
{
    const int dtype = *(int *)*state;
    const double eps = tp_eps(dtype);
    for (int variant = 0; variant < 3; ++variant) {
        prob p;
        prob_opts o = {variant != 1, 0, 0, SDPA_CAUSAL_BOTTOM_RIGHT, 1, 0, 1};
        const int64_t lens[3] = {37, 0, 21};
        prob_make(&p, dtype, 77 + (uint64_t)variant, 3, 4, 2, 6, 37, 16, 8, &o,
                  lens);
        double sinks[4] = {0.5, -1.0, 2.0, 0.0};
        if (variant == 2)
            p.a.sinks = sinks;
        tbuf mw, en;
        tbuf_make(&mw, dtype, 3, 4, 6, 1, LAYOUT_BHTD, 0);
        tbuf_make(&en, dtype, 3, 4, 6, 1, LAYOUT_BHTD, 0);
        p.a.max_weight = mw.t;
        p.a.entropy = en.t;
        ref_result r;
        assert_int_equal(ref_forward(&p.a, &r), 0);
        sdpa_ctx *ctx = tp_ctx(1);
        int ran = 0;
        for (int ki = 0; ki < TEST_KERNELS; ++ki) {
            if (sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, test_kernels[ki]) !=
                SDPA_OK)
                continue;
            for (int path = SDPA_PATH_MATERIALISED; path <= SDPA_PATH_DECODE;
                 ++path) {
                tp_set(ctx, SDPA_OPT_PATH, path);
                tp_set(ctx, SDPA_OPT_BLOCK_K, 8);
                assert_int_equal(sdpa_forward(ctx, &p.a), SDPA_OK);
                ran++;
                for (int64_t b = 0; b < 3; ++b)
                    for (int64_t h = 0; h < 4; ++h)
                        for (int64_t i = 0; i < 6; ++i) {
                            size_t row = (size_t)((b * 4 + h) * 6 + i);
                            long double top = 0, ent = 0, total = 0;
                            for (int64_t j = 0; j < 37; ++j) {
                                long double w = r.weights[row * 37 + (size_t)j];
                                total += w;
                                top = w > top ? w : top;
                                if (w > 0)
                                    ent -= w * logl(w);
                            }
                            if (variant == 2 && r.lse[row] != -INFINITY) {
                                long double ws =
                                    expl((long double)sinks[h] - r.lse[row]);
                                top = ws > top ? ws : top;
                                ent -= ws * logl(ws);
                            }
                            double got_m = tget(&mw, b, h, i, 0);
                            double got_e = tget(&en, b, h, i, 0);
                            /* e_p of test_random.c's derivation, loosely */
                            double tol = 64 * eps * (1 + (double)fabsl(ent));
                            if (!(fabs(got_m - (double)top) <= tol &&
                                  fabs(got_e - (double)ent) <= 4 * tol))
                                print_error("variant %d path %d kernel %d row "
                                            "(%lld,%lld,%lld): max %g/%Lg "
                                            "entropy %g/%Lg\n",
                                            variant, path, test_kernels[ki],
                                            (long long)b, (long long)h,
                                            (long long)i, got_m, top, got_e,
                                            ent);
                            assert_true(fabs(got_m - (double)top) <= tol);
                            assert_true(fabs(got_e - (double)ent) <= 4 * tol);
                            /* a row with no allowed key: 0 and 0, or
                             * with a sink its only outcome, 1 and 0 */
                            if (total == 0 && variant != 2)
                                assert_true(got_m == 0 && got_e == 0);
                            if (total == 0 && variant == 2)
                                assert_true(got_m == 1 && got_e == 0);
                        }
            }
        }
        assert_true(ran >= 3);
        sdpa_ctx_destroy(ctx);
        ref_free(&r);
        tbuf_free(&mw);
        tbuf_free(&en);
        tp_free(&p);
    }
}

/* ---- contexts in parallel ----------------------------------------------- */

/* One application thread with its own context and output buffers, reading
 * inputs shared with the others. */
typedef struct parallel_job {
    sdpa_forward_args a;
    void *out, *lse;
    size_t out_bytes, lse_bytes;
    int workers, path, status, calls;
} parallel_job;

static void *parallel_run(void *arg)
{
    parallel_job *job = arg;
    sdpa_ctx *ctx = NULL;
    job->status = sdpa_ctx_create(&ctx);
    if (job->status == SDPA_OK)
        job->status = sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, job->workers);
    if (job->status == SDPA_OK)
        job->status = sdpa_ctx_set_int(ctx, SDPA_OPT_PATH, job->path);
    job->a.out.data = job->out;
    job->a.lse.data = job->lse;
    for (int i = 0; i < job->calls && job->status == SDPA_OK; i++)
        job->status = sdpa_forward(ctx, &job->a);
    sdpa_ctx_destroy(ctx);
    return NULL;
}

/* Four threads, each with its own context (one or two workers of its own),
 * on the same inputs at once: every result equals the serial one, bit for
 * bit (run under ThreadSanitizer in CI). */
static void test_contexts_in_parallel(void **state)
{
    const int dtype = *(int *)*state;
    prob p;
    prob_opts o = {1, 1, 0, SDPA_CAUSAL_BOTTOM_RIGHT, 1, 0, 1};
    const int64_t lens[2] = {150, 97};
    prob_make(&p, dtype, 4321, 2, 4, 2, 40, 150, 16, 8, &o, lens);
    size_t bo = p.out.elems * p.out.esize, bl = p.lse.elems * p.lse.esize;
    for (int path = SDPA_PATH_MATERIALISED; path <= SDPA_PATH_DECODE; ++path) {
        sdpa_ctx *ctx = tp_ctx(0);
        tp_set(ctx, SDPA_OPT_PATH, path);
        assert_int_equal(sdpa_forward(ctx, &p.a), SDPA_OK);
        sdpa_ctx_destroy(ctx);
        parallel_job jobs[4];
        pthread_t tid[4];
        for (int t = 0; t < 4; t++) {
            jobs[t] = (parallel_job){p.a,       malloc(bo), malloc(bl), bo, bl,
                                     1 + t % 2, path,       -1,         3};
            assert_true(jobs[t].out && jobs[t].lse);
            assert_int_equal(
                pthread_create(&tid[t], NULL, parallel_run, &jobs[t]), 0);
        }
        for (int t = 0; t < 4; t++) {
            assert_int_equal(pthread_join(tid[t], NULL), 0);
            assert_int_equal(jobs[t].status, SDPA_OK);
            assert_memory_equal(jobs[t].out, p.out.mem, bo);
            assert_memory_equal(jobs[t].lse, p.lse.mem, bl);
            free(jobs[t].out);
            free(jobs[t].lse);
        }
    }
    tp_free(&p);
}

/* ---- bitwise identical across thread counts ---------------------------- */

static void test_threads_bitwise(void **state)
{
    const int dtype = *(int *)*state;
    prob p;
    prob_opts o = {1, 1, 1, SDPA_CAUSAL_BOTTOM_RIGHT, 1, 1, 1};
    const int64_t lens[3] = {47, 30, 40};
    prob_make(&p, dtype, 1234, 3, 4, 2, 33, 47, 16, 8, &o, lens);
    size_t bo = p.out.elems * p.out.esize, bw = p.w.elems * p.w.esize,
           bl = p.lse.elems * p.lse.esize;
    unsigned char *o1 = malloc(bo), *w1 = malloc(bw), *l1 = malloc(bl);
    assert_true(o1 && w1 && l1);
    sdpa_ctx *ctx = tp_ctx(1);
    int compared = 0;
    for (int ki = 0; ki < TEST_KERNELS; ++ki) {
        if (sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, test_kernels[ki]) != SDPA_OK)
            continue;
        for (int path = SDPA_PATH_AUTO; path <= SDPA_PATH_DECODE; ++path) {
            tp_set(ctx, SDPA_OPT_PATH, path);
            int supported = 1;
            for (int th = 1; th <= 3 && supported; ++th) {
                if (sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, th) !=
                    SDPA_OK) {
                    print_message("  NUM_THREADS %d refused: skipping\n", th);
                    break;
                }
                tp_clear_outputs(&p);
                int st = sdpa_forward(ctx, &p.a);
                if (st == SDPA_ERR_UNSUPPORTED && path >= SDPA_PATH_TILED) {
                    supported = 0;
                    break;
                }
                assert_int_equal(st, SDPA_OK);
                if (th == 1) {
                    memcpy(o1, p.out.mem, bo);
                    memcpy(w1, p.w.mem, bw);
                    memcpy(l1, p.lse.mem, bl);
                } else {
                    if (memcmp(o1, p.out.mem, bo) || memcmp(w1, p.w.mem, bw) ||
                        memcmp(l1, p.lse.mem, bl))
                        print_error("kernel %d path %d: %d threads differ from "
                                    "1 thread\n",
                                    test_kernels[ki], path, th);
                    assert_memory_equal(o1, p.out.mem, bo);
                    assert_memory_equal(w1, p.w.mem, bw);
                    assert_memory_equal(l1, p.lse.mem, bl);
                    compared++;
                }
            }
            tp_set(ctx, SDPA_OPT_NUM_THREADS, 1);
        }
    }
    if (compared == 0)
        skip();
    assert_true(compared >= 2);
    free(o1);
    free(w1);
    free(l1);
    sdpa_ctx_destroy(ctx);
    tp_free(&p);
}

/* ---- portable vs each vector kernel ------------------------------------ */

static void test_kernels_agree(void **state)
{
    const int dtype = *(int *)*state;
    sdpa_ctx *ctx = tp_ctx(1);
    prob p;
    prob_opts o = {1, 1, 1, SDPA_CAUSAL_TOP_LEFT, 1, 1, 1};
    const int64_t lens[2] = {70, 45};
    prob_make(&p, dtype, 4321, 2, 3, 3, 21, 70, 12, 9, &o, lens);
    size_t no = (size_t)(2 * 3 * 21 * 9), nw = (size_t)(2 * 3 * 21 * 70),
           nl = (size_t)(2 * 3 * 21);
    double *op = malloc(no * sizeof(double)), *wp = malloc(nw * sizeof(double)),
           *lp = malloc(nl * sizeof(double));
    double *oa = malloc(no * sizeof(double)), *wa = malloc(nw * sizeof(double)),
           *la = malloc(nl * sizeof(double));
    assert_true(op && wp && lp && oa && wa && la);
    tp_set(ctx, SDPA_OPT_PATH, SDPA_PATH_MATERIALISED);
    tp_set(ctx, SDPA_OPT_KERNEL, SDPA_KERNEL_PORTABLE);
    assert_int_equal(sdpa_forward(ctx, &p.a), SDPA_OK);
    snapshot(&p, op, wp, lp);
    int compared = 0;
    for (int ki = 1; ki < TEST_KERNELS; ++ki) { /* the vector kernels */
        const int kernel = test_kernels[ki];
        int ks = sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, kernel);
        if (ks == SDPA_ERR_UNSUPPORTED) {
            print_message("  %s: not supported by this CPU, not compared\n",
                          kernel_name(kernel));
            continue;
        }
        assert_int_equal(ks, SDPA_OK);
        int64_t got = -1;
        assert_int_equal(sdpa_ctx_get_int(ctx, SDPA_OPT_KERNEL, &got), SDPA_OK);
        assert_int_equal(got, kernel);
        assert_int_equal(sdpa_forward(ctx, &p.a), SDPA_OK);
        snapshot(&p, oa, wa, la);
        /* Same gemm, so the same logits; the row kernels differ only in
         * their exp (each within a few ulp) and summation order (<= Tk
         * ulp): |portable - vector| <= (Tk + 32) eps (1 + |value|). */
        const double tol = (double)(70 + 32) * tp_eps(dtype);
        double worst = 0;
        for (size_t k = 0; k < no; ++k)
            worst = nan_max(worst, rdiff(op[k], oa[k]));
        for (size_t k = 0; k < nw; ++k) {
            worst = nan_max(worst, rdiff(wp[k], wa[k]));
            assert_true((wp[k] == 0.0) == (wa[k] == 0.0));
        }
        for (size_t k = 0; k < nl; ++k)
            worst = nan_max(worst, rdiff(lp[k], la[k]));
        print_message("  portable vs %s: largest difference %g (bound %g)\n",
                      kernel_name(kernel), worst, tol);
        assert_true(worst <= tol);
        compared++;
    }
    free(op);
    free(wp);
    free(lp);
    free(oa);
    free(wa);
    free(la);
    tp_free(&p);
    sdpa_ctx_destroy(ctx);
    if (!compared)
        skip(); /* no vector kernel on this CPU */
}

/* ---- no allocation after the first call -------------------------------- */

static void alloc_case(int dtype, int path, int threads)
{
    counting_alloc ca;
    sdpa_allocator al = ca_start(&ca, -1);
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
    assert_non_null(ctx);
    /* The context itself goes through the allocator. */
    assert_true(ca.allocs >= 1);
    tp_set(ctx, SDPA_OPT_PATH, path);
    tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
    prob big, small;
    prob_opts o = {1, 1, 0, SDPA_CAUSAL_NONE, 0, 0, 1};
    prob_make(&big, dtype, 5, 2, 4, 2, 40, 90, 16, 16, &o, NULL);
    prob_make(&small, dtype, 6, 1, 2, 1, 10, 30, 8, 4, &o, NULL);

    size_t ws_big = 0, ws_small_fresh = 0;
    long before = ca.allocs;
    assert_int_equal(sdpa_forward_workspace(ctx, &big.a, &ws_big), SDPA_OK);
    assert_int_equal(sdpa_forward_workspace(ctx, &small.a, &ws_small_fresh),
                     SDPA_OK);
    assert_int_equal(ca.allocs, before); /* workspace allocates nothing */
    if (path == SDPA_PATH_MATERIALISED) {
        assert_true(ws_big > 0);
        assert_true(ws_small_fresh > 0);
    }
    assert_true(ws_small_fresh <= ws_big);

    assert_int_equal(sdpa_forward(ctx, &big.a), SDPA_OK);
    long after_first = ca.allocs;
    assert_int_equal(sdpa_forward(ctx, &big.a), SDPA_OK);
    if (ca.allocs != after_first)
        print_error("path %d threads %d: second call allocated %ld times\n",
                    path, threads, ca.allocs - after_first);
    assert_int_equal(ca.allocs, after_first);
    assert_int_equal(sdpa_forward(ctx, &small.a), SDPA_OK);
    assert_int_equal(ca.allocs, after_first);
    assert_int_equal(sdpa_forward(ctx, &big.a), SDPA_OK);
    assert_int_equal(ca.allocs, after_first);

    /* Held scratch counts: the small call would still hold the big scratch. */
    size_t ws_big_after = 0, ws_small_after = 0;
    assert_int_equal(sdpa_forward_workspace(ctx, &big.a, &ws_big_after),
                     SDPA_OK);
    assert_int_equal(sdpa_forward_workspace(ctx, &small.a, &ws_small_after),
                     SDPA_OK);
    assert_int_equal(ca.allocs, after_first);
    assert_true(ws_big_after >= ws_big);
    assert_true(ws_small_after >= ws_small_fresh);
    assert_true(ws_small_after == ws_big_after);

    sdpa_ctx_destroy(ctx);
    assert_int_equal(ca.allocs, ca.frees);
    assert_int_equal(ca.live_bytes, 0);
    assert_int_equal(ca.bad_free, 0);
    assert_int_equal(ca.bad_alignment, 0);
    tp_free(&big);
    tp_free(&small);
}

static void test_no_alloc_after_first_call(void **state)
{
    const int dtype = *(int *)*state;
    alloc_case(dtype, SDPA_PATH_MATERIALISED, 1);
    alloc_case(dtype, SDPA_PATH_AUTO, 1);
    alloc_case(dtype, SDPA_PATH_MATERIALISED, 2);
    alloc_case(dtype, SDPA_PATH_AUTO, 3);
}

/* The promise, over random sequences: after a call, a call on the same
 * context with the same path, dtype, options, optional tensors, Dk, Dv and
 * group size Hq/Hkv allocates nothing when none of N, Hkv, Tq, Tk is
 * larger (docs/CONTEXTS.md). */
static void test_no_alloc_random_sequences(void **state)
{
    const int dtype = *(int *)*state;
    static const int paths[] = {SDPA_PATH_MATERIALISED, SDPA_PATH_TILED,
                                SDPA_PATH_DECODE};
    rng r = {0xA110C};
    long sequences = 0;
    for (int seq = 0; seq < 90; ++seq) {
        int path = paths[seq % 3];
        int threads = (int)rng_int(&r, 1, 3);
        int64_t group = rng_int(&r, 1, 4), dk = rng_int(&r, 1, 40);
        int64_t dv = rng_int(&r, 1, 40);
        prob_opts o = {(int)rng_int(&r, 0, 1),
                       (int)rng_int(&r, 0, 1),
                       0,
                       (int)rng_int(&r, 0, 2),
                       0,
                       path == SDPA_PATH_MATERIALISED && rng_int(&r, 0, 1),
                       (int)rng_int(&r, 0, 1)};
        int64_t n = rng_int(&r, 1, 3), hkv = rng_int(&r, 1, 3);
        int64_t tq = rng_int(&r, 1, path == SDPA_PATH_DECODE ? 8 : 600);
        int64_t tk = rng_int(&r, 1, 1500);
        counting_alloc ca;
        sdpa_allocator al = ca_start(&ca, -1);
        sdpa_ctx *ctx = NULL;
        assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
        tp_set(ctx, SDPA_OPT_PATH, path);
        tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
        tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
        prob big;
        prob_make(&big, dtype, (uint64_t)seq, n, group * hkv, hkv, tq, tk, dk,
                  dv, &o, NULL);
        assert_int_equal(sdpa_forward(ctx, &big.a), SDPA_OK);
        long after_first = ca.allocs;
        for (int call = 0; call < 6; ++call) {
            int64_t n2 = rng_int(&r, 1, n), hkv2 = rng_int(&r, 1, hkv);
            int64_t tq2 = rng_int(&r, 1, tq), tk2 = rng_int(&r, 1, tk);
            prob small;
            prob_make(&small, dtype, (uint64_t)(seq * 8 + call), n2,
                      group * hkv2, hkv2, tq2, tk2, dk, dv, &o, NULL);
            assert_int_equal(sdpa_forward(ctx, &small.a), SDPA_OK);
            if (ca.allocs != after_first)
                print_error("path %d threads %d group %lld Dk %lld Dv %lld "
                            "mask %d bias %d causal %d: N %lld Hkv %lld Tq "
                            "%lld Tk %lld after N %lld Hkv %lld Tq %lld Tk "
                            "%lld allocated\n",
                            path, threads, (long long)group, (long long)dk,
                            (long long)dv, o.mask, o.bias, o.causal,
                            (long long)n2, (long long)hkv2, (long long)tq2,
                            (long long)tk2, (long long)n, (long long)hkv,
                            (long long)tq, (long long)tk);
            assert_int_equal(ca.allocs, after_first);
            tp_free(&small);
        }
        tp_free(&big);
        sdpa_ctx_destroy(ctx);
        assert_int_equal(ca.allocs, ca.frees);
        sequences++;
    }
    assert_int_equal(sequences, 90);
}

/* ---- workspace query ---------------------------------------------------- */

static void test_workspace(void **state)
{
    const int dtype = *(int *)*state;
    counting_alloc ca;
    sdpa_allocator al = ca_start(&ca, -1);
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
    tp_set(ctx, SDPA_OPT_PATH, SDPA_PATH_MATERIALISED);
    prob p;
    /* Causal only (no random mask): no row can be empty. */
    prob_opts o = {0, 0, 0, SDPA_CAUSAL_TOP_LEFT, 0, 0, 1};
    prob_make(&p, dtype, 8, 2, 2, 2, 16, 64, 8, 8, &o, NULL);
    tp_clear_outputs(&p);
    long before = ca.allocs;
    size_t bytes = 0;
    assert_int_equal(sdpa_forward_workspace(ctx, &p.a, &bytes), SDPA_OK);
    assert_true(bytes > 0);
    assert_int_equal(ca.allocs, before);
    assert_int_equal(first_non_sentinel(p.out.mem, p.out.elems * p.out.esize),
                     -1);
    assert_int_equal(first_non_sentinel(p.lse.mem, p.lse.elems * p.lse.esize),
                     -1);
    /* After the call, the context holds what was announced. */
    assert_int_equal(sdpa_forward(ctx, &p.a), SDPA_OK);
    size_t again = 0;
    assert_int_equal(sdpa_forward_workspace(ctx, &p.a, &again), SDPA_OK);
    assert_int_equal(again, bytes);
    /* The workspace query validates like sdpa_forward. */
    size_t untouched_bytes = 12345;
    p.a.scale = -1.0;
    assert_int_equal(sdpa_forward_workspace(ctx, &p.a, &untouched_bytes),
                     SDPA_ERR_BAD_SCALE);
    assert_true(strlen(sdpa_ctx_last_error(ctx)) > 0);
    p.a.scale = 0.0;
    assert_int_equal(sdpa_forward_workspace(ctx, &p.a, NULL),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(sdpa_forward_workspace(NULL, &p.a, &again),
                     SDPA_ERR_NULL_POINTER);
    sdpa_ctx_destroy(ctx);
    assert_int_equal(ca.live_bytes, 0);
    tp_free(&p);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TP_BOTH_NAMED(test_forbidden_zero_rows_sum_one, NULL, NULL),
        TP_BOTH_NAMED(test_permutation, NULL, NULL),
        TP_BOTH_NAMED(test_nan_beyond_kv_lens, NULL, NULL),
        TP_BOTH_NAMED(test_nan_behind_forbidden_keys, NULL, NULL),
        TP_BOTH_NAMED(test_contexts_in_parallel, NULL, NULL),
        TP_BOTH_NAMED(test_diagnostics, NULL, NULL),
        TP_BOTH_NAMED(test_threads_bitwise, NULL, NULL),
        TP_BOTH_NAMED(test_kernels_agree, NULL, NULL),
        TP_BOTH_NAMED(test_no_alloc_after_first_call, NULL, NULL),
        TP_BOTH_NAMED(test_no_alloc_random_sequences, NULL, NULL),
        TP_BOTH_NAMED(test_workspace, NULL, NULL),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
