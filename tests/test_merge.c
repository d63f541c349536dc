/*
 * sdpa_merge (include/sdpa.h, docs/MERGING.md):
 *
 *   - the manual's recipe (chunk_forward, forward_in_chunks: the file is
 *     extracted from docs/MERGING.md at configure time and compiled in, so
 *     the text users read is the text tested) on random problems split into
 *     key chunks of every size, both causal anchors, none, kv_lens, GQA,
 *     soft-cap, float and double, against the long-double reference;
 *   - partials with lse -inf (no allowed key) contribute nothing, and their
 *     out rows (NaN here) are never read;
 *   - the empty-row policy: SDPA_ERR_FULLY_MASKED_ROW naming the row, or
 *     zeros and lse -inf under SDPA_EMPTY_ROWS_ZERO;
 *   - every error status, with the outputs untouched (sentinels);
 *   - bitwise reproducibility: repeated calls, in place (out = outs[0]) and
 *     out of place, one partial copied exactly, strided views.
 */
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

#include "checks.h"
#include "reference.h"
#include "sdpa.h"
#include "problem.h"
#include "testutil.h"

/* docs/MERGING.md's recipe, extracted by tests/CMakeLists.txt. */
#include "merge_recipe.c"

/* ---- the manual's recipe against the reference ------------------------- */

typedef struct problem {
    int dtype, causal;
    int64_t n, hq, hkv, tq, tk, dk, dv;
    double softcap;
    int64_t kv_lens[4];
    int use_kv_lens;
    tbuf q, k, v, out, lse;
} problem;

static void problem_make(problem *p, rng *r, int dtype)
{
    memset(p, 0, sizeof *p);
    p->dtype = dtype;
    p->n = rng_int(r, 1, 3);
    p->hkv = rng_int(r, 1, 2);
    p->hq = p->hkv * rng_int(r, 1, 3);
    p->tk = rng_int(r, 1, 40);
    p->tq = rng_int(r, 1, 20);
    p->dk = rng_int(r, 1, 9);
    p->dv = rng_int(r, 1, 7);
    p->causal = (int)rng_int(r, 0, 2);
    if (p->causal == SDPA_CAUSAL_TOP_LEFT && p->tq > p->tk)
        p->tq = p->tk; /* the recipe's top-left needs Tq <= Tk */
    p->use_kv_lens = rng_int(r, 0, 1) == 1;
    for (int64_t b = 0; b < p->n; b++)
        p->kv_lens[b] = rng_int(r, 0, p->tk);
    p->softcap = rng_int(r, 0, 3) == 0 ? 2.5 : 0;
    int layout = (int)rng_int(r, 0, 1);
    tbuf_make(&p->q, dtype, p->n, p->hq, p->tq, p->dk, layout, 1);
    tbuf_make(&p->k, dtype, p->n, p->hkv, p->tk, p->dk, layout, 0);
    tbuf_make(&p->v, dtype, p->n, p->hkv, p->tk, p->dv, layout, 2);
    tbuf_make(&p->out, dtype, p->n, p->hq, p->tq, p->dv, layout, 1);
    tbuf_make(&p->lse, dtype, p->n, p->hq, p->tq, 1, LAYOUT_BHTD, 0);
    tbuf_fill_random(&p->q, r, 1.5);
    tbuf_fill_random(&p->k, r, 1.5);
    tbuf_fill_random(&p->v, r, 2.0);
}

static void problem_free(problem *p)
{
    tbuf_free_all((tbuf *[]){&p->q, &p->k, &p->v, &p->out, &p->lse, NULL});
}

static sdpa_forward_args problem_args(const problem *p)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = p->dtype;
    a.causal = p->causal;
    a.softcap = p->softcap;
    a.kv_lens = p->use_kv_lens ? p->kv_lens : NULL;
    tp_views(&a, &p->q, &p->k, &p->v, NULL, NULL, &p->out, NULL, &p->lse, NULL);
    return a;
}

static int64_t g_compared;

/* Tolerances as test_random.c derives them, doubled for the merge's
 * rescaling (each partial's weights gain exp(lse_p - lse), whose error is
 * that of the lse). */
static void compare_with_reference(const problem *p, const ref_result *r,
                                   int64_t chunk)
{
    const double eps = p->dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    const double L = (double)r->logit_absmax, Tk = (double)p->tk;
    const double e_s =
        ((double)p->dk + 4) * eps * L + 4 * eps * (1 + L + p->softcap);
    const double e_p = 2 * e_s + (Tk + 16) * eps;
    const double lse_tol = 4 * (e_s + (Tk + 16) * eps);
    const double out_tol =
        4 * ((double)r->v_absmax + 1e-300) * (e_p + (Tk + 4) * eps) +
        4 * lse_tol * ((double)r->v_absmax + 1e-300);
    for (int64_t b = 0; b < p->n; b++)
        for (int64_t h = 0; h < p->hq; h++)
            for (int64_t i = 0; i < p->tq; i++) {
                size_t row = (size_t)((b * p->hq + h) * p->tq + i);
                long double want_lse = r->lse[row];
                double got_lse = tget(&p->lse, b, h, i, 0);
                if (isinf(want_lse)) {
                    if (!(isinf(got_lse) && got_lse < 0))
                        fail_msg("chunk %lld: row %lld/%lld/%lld lse %g, want "
                                 "-inf",
                                 (long long)chunk, (long long)b, (long long)h,
                                 (long long)i, got_lse);
                } else if (fabs(got_lse - (double)want_lse) >
                           lse_tol + 2 * eps * fabs((double)want_lse)) {
                    fail_msg("chunk %lld: row %lld/%lld/%lld lse %.17g, ref "
                             "%.17Lg",
                             (long long)chunk, (long long)b, (long long)h,
                             (long long)i, got_lse, want_lse);
                }
                for (int64_t d = 0; d < p->dv; d++) {
                    long double want = r->out[row * (size_t)p->dv + (size_t)d];
                    double got = tget(&p->out, b, h, i, d);
                    if (!(fabs(got - (double)want) <= out_tol))
                        fail_msg("chunk %lld: out[%lld,%lld,%lld,%lld] = "
                                 "%.17g, ref %.17Lg, tol %.3g",
                                 (long long)chunk, (long long)b, (long long)h,
                                 (long long)i, (long long)d, got, want,
                                 out_tol);
                    g_compared++;
                }
            }
}

static void run_recipe(int dtype, uint64_t seed, int count)
{
    sdpa_ctx *ctx = tp_ctx(0);
    rng r = {seed};
    for (int c = 0; c < count; c++) {
        problem p;
        problem_make(&p, &r, dtype);
        sdpa_forward_args a = problem_args(&p);
        ref_result ref;
        assert_int_equal(ref_forward(&a, &ref), 0);
        for (int64_t chunk = 1; chunk <= p.tk; chunk++) {
            tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ERROR);
            int status = forward_in_chunks(ctx, &a, chunk);
            if (ref.any_empty) {
                /* The merge applies the default policy to the whole row. */
                assert_int_equal(status, SDPA_ERR_FULLY_MASKED_ROW);
                char want[96];
                snprintf(want, sizeof want,
                         "batch %lld, head %lld, query row %lld has",
                         (long long)ref.empty_b, (long long)ref.empty_h,
                         (long long)ref.empty_i);
                if (!strstr(sdpa_ctx_last_error(ctx), want))
                    fail_msg("message '%s' lacks '%s'",
                             sdpa_ctx_last_error(ctx), want);
                tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
                status = forward_in_chunks(ctx, &a, chunk);
            }
            if (status != SDPA_OK)
                fail_msg("config %d chunk %lld: %s: %s", c, (long long)chunk,
                         sdpa_status_string(status), sdpa_ctx_last_error(ctx));
            compare_with_reference(&p, &ref, chunk);
        }
        ref_free(&ref);
        problem_free(&p);
    }
    sdpa_ctx_destroy(ctx);
}

static void test_recipe_float(void **state)
{
    (void)state;
    g_compared = 0;
    run_recipe(SDPA_FLOAT32, 1201, 60);
    print_message("  %lld output values compared\n", (long long)g_compared);
}

static void test_recipe_double(void **state)
{
    (void)state;
    run_recipe(SDPA_FLOAT64, 1202, 60);
}

/* ---- Hand-made partials -------------------------------------------------- */

enum { N = 2, H = 3, T = 4, DV = 5, P = 3 };

typedef struct parts {
    int dtype;
    tbuf outs[P], lses[P], out, lse;
    sdpa_tensor out_views[P], lse_views[P];
} parts;

static void parts_make(parts *s, int dtype, uint64_t seed)
{
    memset(s, 0, sizeof *s);
    s->dtype = dtype;
    rng r = {seed};
    for (int p = 0; p < P; p++) {
        /* strided: rows padded, and heads interleaved for partial 1 */
        tbuf_make(&s->outs[p], dtype, N, H, T, DV,
                  p == 1 ? LAYOUT_BTHD : LAYOUT_BHTD, p);
        tbuf_make(&s->lses[p], dtype, N, H, T, 1, LAYOUT_BHTD, p);
        tbuf_fill_random(&s->outs[p], &r, 2.0);
        tbuf_fill_random(&s->lses[p], &r, 3.0);
        s->out_views[p] = s->outs[p].t;
        s->lse_views[p] = s->lses[p].t;
    }
    tbuf_make(&s->out, dtype, N, H, T, DV, LAYOUT_BHTD, 1);
    tbuf_make(&s->lse, dtype, N, H, T, 1, LAYOUT_BHTD, 0);
}

static void parts_free(parts *s)
{
    for (int p = 0; p < P; p++) {
        tbuf_free(&s->outs[p]);
        tbuf_free(&s->lses[p]);
    }
    tbuf_free(&s->out);
    tbuf_free(&s->lse);
}

static sdpa_merge_args parts_args(parts *s)
{
    sdpa_merge_args m = SDPA_MERGE_ARGS_INIT;
    m.dtype = s->dtype;
    m.parts = P;
    m.outs = s->out_views;
    m.lses = s->lse_views;
    m.out = s->out.t;
    m.lse = s->lse.t;
    return m;
}

/* The identity in long double, row by row, skipping -inf partials. */
static void check_identity(parts *s)
{
    const double eps = s->dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                long double m = -INFINITY, sum = 0;
                for (int p = 0; p < P; p++) {
                    long double l = tget(&s->lses[p], b, h, t, 0);
                    m = l > m ? l : m;
                }
                if (m == -INFINITY) {
                    assert_true(tget(&s->lse, b, h, t, 0) == -INFINITY);
                    for (int64_t d = 0; d < DV; d++)
                        assert_true(tget(&s->out, b, h, t, d) == 0.0);
                    continue;
                }
                for (int p = 0; p < P; p++) {
                    long double l = tget(&s->lses[p], b, h, t, 0);
                    if (l != -INFINITY)
                        sum += expl(l - m);
                }
                long double lse = m + logl(sum);
                assert_true(fabsl(tget(&s->lse, b, h, t, 0) - lse) <=
                            8 * eps * (1 + fabsl(lse)));
                for (int64_t d = 0; d < DV; d++) {
                    long double want = 0;
                    for (int p = 0; p < P; p++) {
                        long double l = tget(&s->lses[p], b, h, t, 0);
                        if (l != -INFINITY)
                            want +=
                                expl(l - lse) * tget(&s->outs[p], b, h, t, d);
                    }
                    assert_true(fabsl(tget(&s->out, b, h, t, d) - want) <=
                                16 * eps * 2.0L * P);
                }
            }
}

/* body on a fresh set of partials of each dtype (seed + dtype), in one
 * context. */
static void each_dtype(uint64_t seed, void (*body)(sdpa_ctx *, parts *))
{
    sdpa_ctx *ctx = tp_ctx(0);
    for (int dt = SDPA_FLOAT32; dt <= SDPA_FLOAT64; dt++) {
        parts s;
        parts_make(&s, dt, seed + (uint64_t)dt);
        body(ctx, &s);
        parts_free(&s);
    }
    sdpa_ctx_destroy(ctx);
}

static void identity_and_empty_partials(sdpa_ctx *ctx, parts *s)
{
    /* Partial 1 saw no key for some rows: lse -inf, out NaN (never
     * read); for row (1, 2, 3) no partial saw a key. */
    for (int64_t t = 0; t < T; t += 2) {
        tset(&s->lses[1], 0, 1, t, 0, -INFINITY);
        for (int64_t d = 0; d < DV; d++)
            tset(&s->outs[1], 0, 1, t, d, NAN);
    }
    for (int p = 0; p < P; p++) {
        tset(&s->lses[p], 1, 2, 3, 0, -INFINITY);
        for (int64_t d = 0; d < DV; d++)
            tset(&s->outs[p], 1, 2, 3, d, NAN);
    }
    sdpa_merge_args m = parts_args(s);
    size_t ob = s->out.elems * s->out.esize, lb = s->lse.elems * s->lse.esize;
    fill_sentinel(s->out.mem, ob);
    fill_sentinel(s->lse.mem, lb);
    /* Default policy: the empty row is an error, named; nothing
     * written. */
    assert_int_equal(sdpa_merge(ctx, &m), SDPA_ERR_FULLY_MASKED_ROW);
    assert_non_null(strstr(sdpa_ctx_last_error(ctx),
                           "batch 1, head 2, query row 3 has no allowed"));
    assert_int_equal(first_non_sentinel(s->out.mem, ob), -1);
    assert_int_equal(first_non_sentinel(s->lse.mem, lb), -1);
    /* Zero rows: zeros and -inf there, the identity elsewhere. */
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    assert_int_equal(sdpa_merge(ctx, &m), SDPA_OK);
    assert_string_equal(sdpa_ctx_last_error(ctx), "");
    check_identity(s);
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ERROR);
}

static void test_identity_and_empty_partials(void **state)
{
    (void)state;
    each_dtype(77, identity_and_empty_partials);
}

static void bitwise(sdpa_ctx *ctx, parts *s)
{
    tset(&s->lses[2], 1, 1, 1, 0, -INFINITY);
    sdpa_merge_args m = parts_args(s);
    assert_int_equal(sdpa_merge(ctx, &m), SDPA_OK);
    check_identity(s);
    size_t ob = s->out.elems * s->out.esize, lb = s->lse.elems * s->lse.esize;
    void *out1 = malloc(ob), *lse1 = malloc(lb);
    assert_non_null(out1);
    assert_non_null(lse1);
    memcpy(out1, s->out.mem, ob);
    memcpy(lse1, s->lse.mem, lb);
    /* Again: the same bits. */
    assert_int_equal(sdpa_merge(ctx, &m), SDPA_OK);
    assert_memory_equal(out1, s->out.mem, ob);
    assert_memory_equal(lse1, s->lse.mem, lb);
    /* In place into partial 0: the same values, bit for bit. */
    m.out = s->outs[0].t;
    m.lse = s->lses[0].t;
    assert_int_equal(sdpa_merge(ctx, &m), SDPA_OK);
    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                double a = tget(&s->lses[0], b, h, t, 0);
                double e = tget(&s->lse, b, h, t, 0);
                assert_memory_equal(&a, &e, sizeof a);
                for (int64_t d = 0; d < DV; d++) {
                    a = tget(&s->outs[0], b, h, t, d);
                    e = tget(&s->out, b, h, t, d);
                    assert_memory_equal(&a, &e, sizeof a);
                }
            }
    /* One partial is copied exactly (weight exp(0) / 1 = 1). */
    m = parts_args(s);
    m.parts = 1;
    assert_int_equal(sdpa_merge(ctx, &m), SDPA_OK);
    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                assert_true(tget(&s->lse, b, h, t, 0) ==
                            tget(&s->lses[0], b, h, t, 0));
                for (int64_t d = 0; d < DV; d++)
                    assert_true(tget(&s->out, b, h, t, d) ==
                                tget(&s->outs[0], b, h, t, d));
            }
    free(out1);
    free(lse1);
}

static void test_bitwise(void **state)
{
    (void)state;
    each_dtype(91, bitwise);
}

/* ---- Errors: status, message, outputs untouched -------------------------- */

static void expect_error(sdpa_ctx *ctx, parts *s, const sdpa_merge_args *m,
                         int status, const char *words)
{
    size_t ob = s->out.elems * s->out.esize, lb = s->lse.elems * s->lse.esize;
    fill_sentinel(s->out.mem, ob);
    fill_sentinel(s->lse.mem, lb);
    int got = sdpa_merge(ctx, m);
    if (got != status)
        fail_msg("expected %s, got %s: %s (%s)", sdpa_status_string(status),
                 sdpa_status_string(got), sdpa_ctx_last_error(ctx), words);
    if (!strstr(sdpa_ctx_last_error(ctx), words))
        fail_msg("message '%s' lacks '%s'", sdpa_ctx_last_error(ctx), words);
    assert_int_equal(first_non_sentinel(s->out.mem, ob), -1);
    assert_int_equal(first_non_sentinel(s->lse.mem, lb), -1);
}

static void test_errors(void **state)
{
    (void)state;
    sdpa_ctx *ctx = tp_ctx(0);
    assert_int_equal(sdpa_merge(NULL, NULL), SDPA_ERR_NULL_POINTER);
    assert_int_equal(sdpa_merge(ctx, NULL), SDPA_ERR_NULL_POINTER);
    parts s;
    parts_make(&s, SDPA_FLOAT32, 5);
    sdpa_merge_args m;

    m = parts_args(&s);
    m.struct_size = 183;
    expect_error(ctx, &s, &m, SDPA_ERR_STRUCT_SIZE, "struct_size is 183");
    m = parts_args(&s);
    m.dtype = 3;
    expect_error(ctx, &s, &m, SDPA_ERR_BAD_DTYPE, "dtype 3");
    m = parts_args(&s);
    m.parts = 0;
    expect_error(ctx, &s, &m, SDPA_ERR_BAD_DIM, "parts is 0");
    m = parts_args(&s);
    m.lses = NULL;
    expect_error(ctx, &s, &m, SDPA_ERR_NULL_POINTER, "lses is NULL");
    m = parts_args(&s);
    m.out.data = NULL;
    expect_error(ctx, &s, &m, SDPA_ERR_NULL_POINTER, "out.data is NULL");
    m = parts_args(&s);
    m.parts = INT64_MAX / 8;
    expect_error(ctx, &s, &m, SDPA_ERR_OVERFLOW, "overflow");

    sdpa_tensor views[P], lviews[P];
    memcpy(views, s.out_views, sizeof views);
    memcpy(lviews, s.lse_views, sizeof lviews);
    m = parts_args(&s);
    m.outs = views;
    m.lses = lviews;
    views[2].data = NULL;
    expect_error(ctx, &s, &m, SDPA_ERR_NULL_POINTER, "outs[2].data is NULL");
    views[2] = s.out_views[2];
    views[1].shape[1] = 0;
    expect_error(ctx, &s, &m, SDPA_ERR_BAD_DIM, "outs[1].shape[1] (H) is 0");
    views[1].shape[1] = 2;
    expect_error(ctx, &s, &m, SDPA_ERR_SHAPE_MISMATCH,
                 "outs[1].shape[1] is 2, but outs[0]'s");
    views[1] = s.out_views[1];
    lviews[2].shape[3] = 2;
    expect_error(ctx, &s, &m, SDPA_ERR_SHAPE_MISMATCH, "lses[2].shape[3] is 2");
    lviews[2] = s.lse_views[2];
    views[2].stride[3] = 2;
    expect_error(ctx, &s, &m, SDPA_ERR_BAD_STRIDE, "outs[2].stride[3] is 2");
    views[2].stride[3] = 1;
    views[2].stride[0] = -1;
    expect_error(ctx, &s, &m, SDPA_ERR_BAD_STRIDE, "outs[2].stride[0] is -1");
    views[2] = s.out_views[2];
    views[2].stride[0] = INT64_MAX / 2;
    expect_error(ctx, &s, &m, SDPA_ERR_OVERFLOW, "extent of outs[2]");
    views[2] = s.out_views[2];

    /* An output that writes an element twice. */
    m.out.stride[2] = 1;
    expect_error(ctx, &s, &m, SDPA_ERR_BAD_STRIDE, "output out has strides");
    m.out = s.out.t;
    /* Overlaps: out meets partial 1, lse meets out, lse meets lses[2], and
     * out is partial 0 shifted by one element (not the same view). */
    m.out = s.outs[1].t;
    expect_error(ctx, &s, &m, SDPA_ERR_OVERLAP,
                 "output out overlaps input outs[1]");
    m.out = s.out.t;
    m.lse.data = s.out.mem;
    expect_error(ctx, &s, &m, SDPA_ERR_OVERLAP, "output lse");
    m.lse = s.lses[2].t;
    expect_error(ctx, &s, &m, SDPA_ERR_OVERLAP,
                 "output lse overlaps input lses[2]");
    m.lse = s.lse.t;
    m.out = s.outs[0].t; /* partial 0's memory, one element on */
    m.out.data = (float *)s.outs[0].t.data + 1;
    expect_error(ctx, &s, &m, SDPA_ERR_OVERLAP,
                 "output out overlaps input outs[0]");
    memcpy(views, s.out_views, sizeof views);
    memcpy(lviews, s.lse_views, sizeof lviews);
    m = parts_args(&s);

    /* Values: NaN or +inf lse (before any write). */
    tset(&s.lses[1], 1, 0, 2, 0, NAN);
    expect_error(ctx, &s, &m, SDPA_ERR_NONFINITE,
                 "lses[1] at batch 1, head 0, row 2 is nan");
    tset(&s.lses[1], 1, 0, 2, 0, INFINITY);
    expect_error(ctx, &s, &m, SDPA_ERR_NONFINITE, "is inf");
    tset(&s.lses[1], 1, 0, 2, 0, 0.5);
    /* And a success clears the message. */
    assert_int_equal(sdpa_merge(ctx, &m), SDPA_OK);
    assert_string_equal(sdpa_ctx_last_error(ctx), "");
    parts_free(&s);
    sdpa_ctx_destroy(ctx);
}

/* A struct with 1.1's first size followed by an unreadable byte is read
 * without going past it; a larger one with a non-zero tail is refused. */
static void test_struct_size(void **state)
{
    (void)state;
    sdpa_ctx *ctx = tp_ctx(0);
    parts s;
    parts_make(&s, SDPA_FLOAT64, 6);
    struct {
        sdpa_merge_args m;
        unsigned char tail[8];
    } grown;
    memset(&grown, 0, sizeof grown);
    grown.m = parts_args(&s);
    grown.m.struct_size = sizeof grown;
    assert_int_equal(sdpa_merge(ctx, &grown.m), SDPA_OK);
    grown.tail[3] = 1;
    expect_error(ctx, &s, &grown.m, SDPA_ERR_STRUCT_TAIL, "is not zero");
    parts_free(&s);
    sdpa_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recipe_float),
        cmocka_unit_test(test_recipe_double),
        cmocka_unit_test(test_identity_and_empty_partials),
        cmocka_unit_test(test_bitwise),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_struct_size),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
