/*
 * The reference values of docs/SEMANTICS.md (from a university textbook unit
 * on scaled dot-product attention), asserted to 1e-4 absolute, in float and
 * in double:
 *   - the two-token example (weights A, outputs O), with the mask
 *     M = [[0,1],[0,0]] and with SDPA_CAUSAL_TOP_LEFT (both give Am, Om);
 *   - the masked softmax of S = [[0, 2, -inf], [1, -1, 0]] at scale 1, with
 *     the -inf given by a bias, by a mask, and by a bias over zero scores;
 *   - the post-softmax-zeroing pitfall (wrong: row sum 0.3302; ours: 1);
 *   - a fully masked row: SDPA_ERR_FULLY_MASKED_ROW naming batch/head/row,
 *     and under SDPA_EMPTY_ROWS_ZERO a zero row with lse = -inf.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "reference.h"
#include "checks.h"
#include "sdpa.h"
#include "problem.h"
#include "testutil.h"

#define TOL 1e-4

/* A contiguous BHTD tensor of the given dtype holding `vals` (row-major). */
static tbuf mk(int dtype, const double *vals, int64_t n, int64_t h, int64_t t,
               int64_t d)
{
    tbuf x;
    tbuf_make(&x, dtype, n, h, t, d, LAYOUT_BHTD, 0);
    int64_t k = 0;
    for (int64_t a = 0; a < n; ++a)
        for (int64_t b = 0; b < h; ++b)
            for (int64_t c = 0; c < t; ++c)
                for (int64_t e = 0; e < d; ++e, ++k)
                    tset(&x, a, b, c, e, vals ? vals[k] : 0.0);
    return x;
}

static void check_close(const char *what, int64_t idx, double got, double want,
                        double tol)
{
    if (!(fabs(got - want) <= tol)) {
        print_error("%s[%lld]: got %.9g, want %.9g (tol %g)\n", what,
                    (long long)idx, got, want, tol);
        fail();
    }
}

static void check_all(const char *what, const tbuf *x, const double *want,
                      double tol)
{
    int64_t k = 0;
    const int64_t *s = x->t.shape;
    for (int64_t a = 0; a < s[0]; ++a)
        for (int64_t b = 0; b < s[1]; ++b)
            for (int64_t c = 0; c < s[2]; ++c)
                for (int64_t e = 0; e < s[3]; ++e, ++k)
                    check_close(what, k, tget(x, a, b, c, e), want[k], tol);
}

/* The two-token example (docs/SEMANTICS.md, "Reference values"). */
static const double TQ[] = {1, 0, 0, 1};
static const double TK[] = {1, 1, 2, 0};
static const double TV[] = {1, 0, 0, 0, 1, 0};
static const double TA[] = {0.3302, 0.6698, 0.6698, 0.3302};
static const double TO[] = {0.3302, 0.6698, 0, 0.6698, 0.3302, 0};
static const double TAm[] = {1, 0, 0.6698, 0.3302};
static const double TOm[] = {1, 0, 0, 0.6698, 0.3302, 0};

/* The buffers and arguments of one call on T = 2 tokens, Dk = 2, Dv = 3:
 * n batch items and h heads, inputs given in [N, H, T, D] order, an
 * optional [N, H, T, T] mask; weights and lse requested. */
typedef struct fixture {
    tbuf q, k, v, out, w, lse, mask;
    sdpa_forward_args a;
} fixture;

static void fixture_init(fixture *f, int dtype, int64_t n, int64_t h,
                         const double *q, const double *k, const double *v,
                         const double *mask)
{
    memset(f, 0, sizeof *f);
    f->q = mk(dtype, q, n, h, 2, 2);
    f->k = mk(dtype, k, n, h, 2, 2);
    f->v = mk(dtype, v, n, h, 2, 3);
    f->out = mk(dtype, NULL, n, h, 2, 3);
    f->w = mk(dtype, NULL, n, h, 2, 2);
    f->lse = mk(dtype, NULL, n, h, 2, 1);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    tp_views(&a, &f->q, &f->k, &f->v, NULL, NULL, &f->out, &f->w, &f->lse,
             NULL);
    if (mask) {
        f->mask = mk(ELEM_U8, mask, n, h, 2, 2);
        a.mask = f->mask.t;
    }
    f->a = a;
}

static void fixture_free(fixture *f)
{
    tbuf_free_all((tbuf *[]){&f->q, &f->k, &f->v, &f->out, &f->w, &f->lse,
                             &f->mask, NULL});
}

/* The two-token example itself: one batch item, one head. */
typedef fixture two_token;

static void two_token_init(two_token *t, int dtype)
{
    fixture_init(t, dtype, 1, 1, TQ, TK, TV, NULL);
}

static void forward_ok(sdpa_ctx *ctx, const sdpa_forward_args *a)
{
    int st = sdpa_forward(ctx, a);
    if (st != SDPA_OK)
        print_error("sdpa_forward: %s (%s)\n", sdpa_status_string(st),
                    sdpa_ctx_last_error(ctx));
    assert_int_equal(st, SDPA_OK);
    assert_string_equal(sdpa_ctx_last_error(ctx), "");
}

/* The two-token example in the dtype of the test's state, and a context. */
static sdpa_ctx *two_token_begin(two_token *t, void **state)
{
    sdpa_ctx *ctx = tp_ctx(0);
    two_token_init(t, *(int *)*state);
    return ctx;
}

static void two_token_end(two_token *t, sdpa_ctx *ctx)
{
    fixture_free(t);
    sdpa_ctx_destroy(ctx);
}

/* The call of t succeeds; its weights and out are W and O (named wn, on). */
static void two_token_expect(sdpa_ctx *ctx, two_token *t, const char *wn,
                             const double *W, const char *on, const double *O)
{
    forward_ok(ctx, &t->a);
    check_all(wn, &t->w, W, TOL);
    check_all(on, &t->out, O, TOL);
}

static void test_two_token(void **state)
{
    two_token t;
    sdpa_ctx *ctx = two_token_begin(&t, state);
    two_token_expect(ctx, &t, "A", TA, "O", TO);
    /* lse_i = log(exp(s_i1) + exp(s_i2)), s = [[1,2],[1,0]] / sqrt(2). */
    const double r = 1.0 / sqrt(2.0);
    const double lse[2] = {log(exp(r) + exp(2 * r)), log(exp(r) + 1.0)};
    check_all("lse", &t.lse, lse, TOL);
    /* Each weight row sums to 1. */
    for (int64_t i = 0; i < 2; ++i)
        check_close("row sum", i,
                    tget(&t.w, 0, 0, i, 0) + tget(&t.w, 0, 0, i, 1), 1.0, 1e-6);
    two_token_end(&t, ctx);
}

static void test_two_token_mask(void **state)
{
    two_token t;
    sdpa_ctx *ctx = two_token_begin(&t, state);
    static const double M[] = {0, 1, 0, 0};
    t.mask = mk(ELEM_U8, M, 1, 1, 2, 2);
    t.a.mask = t.mask.t;
    two_token_expect(ctx, &t, "Am", TAm, "Om", TOm);
    /* The forbidden weight is exactly 0, not merely small. */
    assert_true(tget(&t.w, 0, 0, 0, 1) == 0.0);

    /* The same mask in PyTorch's convention (nonzero = may attend). */
    static const double Mt[] = {1, 0, 1, 1};
    tbuf mt = mk(ELEM_U8, Mt, 1, 1, 2, 2);
    t.a.mask = mt.t;
    t.a.flags = SDPA_FLAG_MASK_NONZERO_ALLOWS;
    two_token_expect(ctx, &t, "Am(allows)", TAm, "Om(allows)", TOm);
    tbuf_free(&mt);
    two_token_end(&t, ctx);
}

static void test_two_token_causal(void **state)
{
    two_token t;
    sdpa_ctx *ctx = two_token_begin(&t, state);
    t.a.causal = SDPA_CAUSAL_TOP_LEFT;
    two_token_expect(ctx, &t, "Am", TAm, "Om", TOm);
    assert_true(tget(&t.w, 0, 0, 0, 1) == 0.0);
    /* Tq == Tk: BOTTOM_RIGHT is the same diagonal. */
    t.a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    two_token_expect(ctx, &t, "Am(br)", TAm, "Om(br)", TOm);
    two_token_end(&t, ctx);
}

/*
 * S = [[0, 2, -inf], [1, -1, 0]] at scale 1. With Dk = 2, q1 = e1, q2 = e2
 * and k_j = (S_1j, S_2j), Q Kᵀ = S (k3 = (0, 0), its first entry forbidden
 * separately). Expected A1 = (0.1192, 0.8808, 0), A2 = (0.6652, 0.0900,
 * 0.2447).
 */
static const double SA[] = {0.1192, 0.8808, 0, 0.6652, 0.0900, 0.2447};

typedef enum { VIA_BIAS, VIA_MASK, VIA_BIAS_SCORES } forbid_via;

static void masked_softmax_case(int dtype, forbid_via via)
{
    static const double Q[] = {1, 0, 0, 1};
    static const double K[] = {0, 1, 2, -1, 0, 0};
    static const double Z[] = {0, 0, 0, 0};
    /* V = identity(3): out equals the weights. */
    static const double V[] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
    const double S[] = {0, 2, -INFINITY, 1, -1, 0};
    const double B[] = {0, 0, -INFINITY, 0, 0, 0};
    static const double M[] = {0, 0, 1, 0, 0, 0};

    sdpa_ctx *ctx = tp_ctx(0);
    tbuf q = mk(dtype, via == VIA_BIAS_SCORES ? Z : Q, 1, 1, 2, 2);
    tbuf k = mk(dtype, K, 1, 1, 3, 2);
    tbuf v = mk(dtype, V, 1, 1, 3, 3);
    tbuf out = mk(dtype, NULL, 1, 1, 2, 3);
    tbuf w = mk(dtype, NULL, 1, 1, 2, 3);
    tbuf extra;
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    a.scale = 1.0;
    tp_views(&a, &q, &k, &v, NULL, NULL, &out, &w, NULL, NULL);
    if (via == VIA_MASK) {
        extra = mk(ELEM_U8, M, 1, 1, 2, 3);
        a.mask = extra.t;
    } else {
        extra = mk(dtype, via == VIA_BIAS ? B : S, 1, 1, 2, 3);
        a.bias = extra.t;
    }
    forward_ok(ctx, &a);
    check_all("A", &w, SA, TOL);
    check_all("O", &out, SA, TOL);
    assert_true(tget(&w, 0, 0, 0, 2) == 0.0);
    assert_true(tget(&out, 0, 0, 0, 2) == 0.0);
    tbuf_free_all((tbuf *[]){&q, &k, &v, &out, &w, &extra, NULL});
    sdpa_ctx_destroy(ctx);
}

static void test_masked_softmax_bias(void **state)
{
    masked_softmax_case(*(int *)*state, VIA_BIAS);
}

static void test_masked_softmax_mask(void **state)
{
    masked_softmax_case(*(int *)*state, VIA_MASK);
}

static void test_masked_softmax_bias_scores(void **state)
{
    masked_softmax_case(*(int *)*state, VIA_BIAS_SCORES);
}

/* Zeroing the forbidden weight after an unmasked softmax leaves a first row
 * summing to 0.3302; masking before the softmax gives exactly 1. */
static void test_post_softmax_pitfall(void **state)
{
    two_token t;
    sdpa_ctx *ctx = two_token_begin(&t, state);
    forward_ok(ctx, &t.a);
    double wrong = tget(&t.w, 0, 0, 0, 0); /* A[0][1] zeroed afterwards */
    check_close("wrong row sum", 0, wrong, 0.3302, TOL);

    static const double M[] = {0, 1, 0, 0};
    t.mask = mk(ELEM_U8, M, 1, 1, 2, 2);
    t.a.mask = t.mask.t;
    forward_ok(ctx, &t.a);
    double right = tget(&t.w, 0, 0, 0, 0) + tget(&t.w, 0, 0, 0, 1);
    check_close("row sum", 0, right, 1.0, 1e-6);
    assert_true(fabs(right - wrong) > 0.5);
    two_token_end(&t, ctx);
}

/*
 * N = 2, H = 3, the two-token example in every slice; the mask forbids both
 * keys of (batch 1, head 2, row 1) only.
 */
typedef fixture fm;

static void fm_init(fm *f, int dtype)
{
    double q[2 * 3 * 4], k[2 * 3 * 4], v[2 * 3 * 6], m[2 * 3 * 4];
    for (int s = 0; s < 6; ++s) {
        memcpy(q + 4 * s, TQ, sizeof TQ);
        memcpy(k + 4 * s, TK, sizeof TK);
        memcpy(v + 6 * s, TV, sizeof TV);
    }
    memset(m, 0, sizeof m);
    m[(1 * 3 + 2) * 4 + 2] = 1; /* b1 h2 row1 key0 */
    m[(1 * 3 + 2) * 4 + 3] = 1; /* b1 h2 row1 key1 */
    fixture_init(f, dtype, 2, 3, q, k, v, m);
}

static void test_fully_masked_row_error(void **state)
{
    int dtype = *(int *)*state;
    sdpa_ctx *ctx = tp_ctx(0);
    fm f;
    fm_init(&f, dtype);
    fill_sentinel(f.out.mem, f.out.elems * f.out.esize);
    fill_sentinel(f.w.mem, f.w.elems * f.w.esize);
    fill_sentinel(f.lse.mem, f.lse.elems * f.lse.esize);
    assert_int_equal(sdpa_forward(ctx, &f.a), SDPA_ERR_FULLY_MASKED_ROW);
    const char *msg = sdpa_ctx_last_error(ctx);
    assert_non_null(msg);
    print_message("  message: %s\n", msg);
    assert_true(strlen(msg) > 0);
    /* batch 1, head 2, row 1: the numbers 1 and 2 and the word "row". */
    assert_non_null(strstr(msg, "1"));
    assert_non_null(strstr(msg, "2"));
    assert_non_null(strstr(msg, "row"));
    /* Detected before computing: outputs untouched. */
    assert_int_equal(first_non_sentinel(f.out.mem, f.out.elems * f.out.esize),
                     -1);
    assert_int_equal(first_non_sentinel(f.w.mem, f.w.elems * f.w.esize), -1);
    assert_int_equal(first_non_sentinel(f.lse.mem, f.lse.elems * f.lse.esize),
                     -1);
    fixture_free(&f);
    sdpa_ctx_destroy(ctx);
}

static void test_fully_masked_row_zero(void **state)
{
    int dtype = *(int *)*state;
    sdpa_ctx *ctx = tp_ctx(0);
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    fm f;
    fm_init(&f, dtype);
    fill_sentinel(f.out.mem, f.out.elems * f.out.esize);
    forward_ok(ctx, &f.a);
    const double r = 1.0 / sqrt(2.0);
    const double lse[2] = {log(exp(r) + exp(2 * r)), log(exp(r) + 1.0)};
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t h = 0; h < 3; ++h)
            for (int64_t i = 0; i < 2; ++i) {
                if (b == 1 && h == 2 && i == 1) {
                    for (int64_t c = 0; c < 3; ++c)
                        assert_true(tget(&f.out, b, h, i, c) == 0.0);
                    for (int64_t j = 0; j < 2; ++j)
                        assert_true(tget(&f.w, b, h, i, j) == 0.0);
                    double l = tget(&f.lse, b, h, i, 0);
                    assert_true(isinf(l) && l < 0);
                    continue;
                }
                for (int64_t c = 0; c < 3; ++c)
                    check_close("O", c, tget(&f.out, b, h, i, c), TO[i * 3 + c],
                                TOL);
                for (int64_t j = 0; j < 2; ++j)
                    check_close("A", j, tget(&f.w, b, h, i, j), TA[i * 2 + j],
                                TOL);
                check_close("lse", i, tget(&f.lse, b, h, i, 0), lse[i], TOL);
            }
    fixture_free(&f);
    sdpa_ctx_destroy(ctx);
}

/* The test reference itself must reproduce the reference values too. */
static void test_reference_agrees(void **state)
{
    int dtype = *(int *)*state;
    two_token t;
    two_token_init(&t, dtype);
    ref_result r;
    assert_int_equal(ref_forward(&t.a, &r), 0);
    for (int i = 0; i < 4; ++i)
        check_close("ref A", i, (double)r.weights[i], TA[i], TOL);
    for (int i = 0; i < 6; ++i)
        check_close("ref O", i, (double)r.out[i], TO[i], TOL);
    assert_false(r.any_empty);
    ref_free(&r);
    fixture_free(&t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TP_BOTH_NAMED(test_reference_agrees, NULL, NULL),
        TP_BOTH_NAMED(test_two_token, NULL, NULL),
        TP_BOTH_NAMED(test_two_token_mask, NULL, NULL),
        TP_BOTH_NAMED(test_two_token_causal, NULL, NULL),
        TP_BOTH_NAMED(test_masked_softmax_bias, NULL, NULL),
        TP_BOTH_NAMED(test_masked_softmax_mask, NULL, NULL),
        TP_BOTH_NAMED(test_masked_softmax_bias_scores, NULL, NULL),
        TP_BOTH_NAMED(test_post_softmax_pitfall, NULL, NULL),
        TP_BOTH_NAMED(test_fully_masked_row_error, NULL, NULL),
        TP_BOTH_NAMED(test_fully_masked_row_zero, NULL, NULL),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
