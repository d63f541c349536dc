/*
 * ONNX Attention with a KV cache, expressed as libsdpa calls, checked
 * against the long-double reference (reference.c) in float and double.
 *
 * ONNX anchors `is_causal` bottom-right: new token i of a step with Sq new
 * tokens sits at absolute position off + i and sees the keys j <= off + i,
 * where off is the past length (past_key / past_value given) or
 * nonpad_kv_seqlen[b] - Sq (the cache updated outside the operator). In
 * libsdpa that is SDPA_CAUSAL_BOTTOM_RIGHT with kv_lens[b] = past + Sq (or
 * nonpad_kv_seqlen[b]): docs/SEMANTICS.md, "Masks and causality in other
 * frameworks".
 *
 * The reference knows nothing of ONNX: each case hands it an explicit mask
 * built here from the ONNX rule ("token i sees keys j <= off + i, and only
 * the valid ones"), no causal mode and no kv_lens. So a mapping of is_causal
 * to SDPA_CAUSAL_TOP_LEFT (key j <= i only) fails every comparison of a row
 * with off > 0; test_past_key_causal also checks that property directly.
 *
 * Cases:
 *   - past_key: per item a past of its own length (ONNX's past_key has one
 *     past length for the batch; libsdpa takes one per item, which covers
 *     both), the new keys/values written after the past ones in a cache
 *     buffer of capacity Tk > past + Sq whose other rows hold NaN and must
 *     never be read; GQA (Hq = 4, Hkv = 2); Dk != Dv;
 *   - nonpad_kv_seqlen: K and V are the whole cache (Tk rows, NaN beyond
 *     each item's nonpad length), kv_lens = nonpad_kv_seqlen;
 *   - an attn_mask shorter than the total key length (ONNX pads it with
 *     false / -inf): under is_causal the mask is widened to Tk with a
 *     forbidden tail and kv_lens stays past + Sq (kv_lens = mask length
 *     would move the causal diagonal, which is checked to differ); without
 *     is_causal, kv_lens = mask length is equivalent and the tail may hold
 *     anything.
 * Every case runs on every kernel and path the machine and call accept.
 * Tolerances are derived from the dtype as in test_random.c.
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

#include "reference.h"
#include "sdpa.h"
#include "testutil.h"

enum { NB = 4, HQ = 4, HKV = 2, SQ = 3, DK = 8, DV = 5, TK = 12, PMAX = 9 };

static int g_float = SDPA_FLOAT32;
static int g_double = SDPA_FLOAT64;

/* ONNX `is_causal = 1` in libsdpa terms, for a call whose kv_lens[b] is the
 * number of valid keys (past + Sq, or nonpad_kv_seqlen[b]). Every ONNX-style
 * call below takes its causal mode from here. */
static int onnx_causal_mode(void)
{
    return SDPA_CAUSAL_BOTTOM_RIGHT;
}

/* The buffers of one ONNX-style step. */
typedef struct step {
    int dtype;
    tbuf q;            /* [NB, HQ, SQ, DK] the new tokens' queries */
    tbuf k, v;         /* [NB, HKV, TK, D] the cache: valid rows, then NaN */
    tbuf out, lse;     /* [NB, HQ, SQ, DV], [NB, HQ, SQ, 1] */
    int64_t total[NB]; /* valid keys per item: past + SQ, or nonpad */
    int64_t off[NB];   /* ONNX causal offset: past, or nonpad - SQ */
} step;

static void fill_rows(tbuf *x, int64_t b, int64_t lo, int64_t hi, rng *r,
                      double amp)
{
    for (int64_t h = 0; h < x->t.shape[1]; ++h)
        for (int64_t t = lo; t < hi; ++t)
            for (int64_t d = 0; d < x->t.shape[3]; ++d)
                tset(x, b, h, t, d, rng_sym(r, amp));
}

static void step_alloc(step *s, int dtype)
{
    memset(s, 0, sizeof *s);
    s->dtype = dtype;
    tbuf_make(&s->q, dtype, NB, HQ, SQ, DK, LAYOUT_BHTD, 0);
    tbuf_make(&s->k, dtype, NB, HKV, TK, DK, LAYOUT_BHTD, 0);
    tbuf_make(&s->v, dtype, NB, HKV, TK, DV, LAYOUT_BHTD, 0);
    tbuf_make(&s->out, dtype, NB, HQ, SQ, DV, LAYOUT_BHTD, 0);
    tbuf_make(&s->lse, dtype, NB, HQ, SQ, 1, LAYOUT_BHTD, 0);
}

static void step_free(step *s)
{
    tbuf_free(&s->q);
    tbuf_free(&s->k);
    tbuf_free(&s->v);
    tbuf_free(&s->out);
    tbuf_free(&s->lse);
}

/*
 * ONNX case 1: past_key / past_value [NB, HKV, PMAX, D] (item b's first
 * past[b] rows valid) and K / V of the new tokens [NB, HKV, SQ, D]. The
 * cache buffer gets the past rows at 0..past-1 and the new rows right after
 * them, at past..past+SQ-1 (what ONNX's present_key holds); its remaining
 * rows stay NaN.
 */
static void step_from_past(step *s, int dtype, const int64_t *past, rng *r)
{
    step_alloc(s, dtype);
    tbuf pk, pv, nk, nv;
    tbuf_make(&pk, dtype, NB, HKV, PMAX, DK, LAYOUT_BHTD, 0);
    tbuf_make(&pv, dtype, NB, HKV, PMAX, DV, LAYOUT_BHTD, 0);
    tbuf_make(&nk, dtype, NB, HKV, SQ, DK, LAYOUT_BHTD, 0);
    tbuf_make(&nv, dtype, NB, HKV, SQ, DV, LAYOUT_BHTD, 0);
    tbuf_fill_random(&s->q, r, 1.5);
    for (int64_t b = 0; b < NB; ++b) {
        assert_true(past[b] <= PMAX && past[b] + SQ <= TK);
        fill_rows(&pk, b, 0, past[b], r, 1.5);
        fill_rows(&pv, b, 0, past[b], r, 1.0);
        fill_rows(&nk, b, 0, SQ, r, 1.5);
        fill_rows(&nv, b, 0, SQ, r, 1.0);
        for (int64_t h = 0; h < HKV; ++h) {
            for (int64_t t = 0; t < past[b]; ++t) {
                for (int64_t d = 0; d < DK; ++d)
                    tset(&s->k, b, h, t, d, tget(&pk, b, h, t, d));
                for (int64_t d = 0; d < DV; ++d)
                    tset(&s->v, b, h, t, d, tget(&pv, b, h, t, d));
            }
            for (int64_t t = 0; t < SQ; ++t) {
                for (int64_t d = 0; d < DK; ++d)
                    tset(&s->k, b, h, past[b] + t, d, tget(&nk, b, h, t, d));
                for (int64_t d = 0; d < DV; ++d)
                    tset(&s->v, b, h, past[b] + t, d, tget(&nv, b, h, t, d));
            }
        }
        s->total[b] = past[b] + SQ;
        s->off[b] = past[b];
    }
    tbuf_free(&pk);
    tbuf_free(&pv);
    tbuf_free(&nk);
    tbuf_free(&nv);
}

/* ONNX case 2: K / V are the whole cache (already updated outside the
 * operator), nonpad[b] valid rows each, NaN beyond. */
static void step_from_nonpad(step *s, int dtype, const int64_t *nonpad, rng *r)
{
    step_alloc(s, dtype);
    tbuf_fill_random(&s->q, r, 1.5);
    for (int64_t b = 0; b < NB; ++b) {
        assert_true(nonpad[b] >= SQ && nonpad[b] <= TK);
        fill_rows(&s->k, b, 0, nonpad[b], r, 1.5);
        fill_rows(&s->v, b, 0, nonpad[b], r, 1.0);
        s->total[b] = nonpad[b];
        s->off[b] = nonpad[b] - SQ;
    }
}

/* The libsdpa arguments of the step: kv_lens = the valid key counts. */
static sdpa_forward_args step_args(step *s, int causal)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = s->dtype;
    a.causal = causal;
    a.kv_lens = s->total;
    a.q = s->q.t;
    a.k = s->k.t;
    a.v = s->v.t;
    a.out = s->out.t;
    a.lse = s->lse.t;
    return a;
}

/*
 * The expected visibility, written out for the reference as a uint8 mask
 * [NB, 1, SQ, TK] (nonzero = forbidden, broadcast over heads): key j is
 * allowed for new token i of item b iff j < total[b], and, under is_causal,
 * j <= off[b] + i, and, with an ONNX bool attn_mask `am` [NB, 1, SQ, M]
 * (nonzero = takes part), j < M and am[b, 0, i, j] != 0.
 */
static tbuf expected_mask(const step *s, int causal, const tbuf *am)
{
    tbuf m;
    tbuf_make(&m, ELEM_U8, NB, 1, SQ, TK, LAYOUT_BHTD, 0);
    const int64_t M = am ? am->t.shape[3] : TK;
    for (int64_t b = 0; b < NB; ++b)
        for (int64_t i = 0; i < SQ; ++i)
            for (int64_t j = 0; j < TK; ++j) {
                int ok = j < s->total[b];
                if (causal && j > s->off[b] + i)
                    ok = 0;
                if (am && (j >= M || tget(am, b, 0, i, j) == 0.0))
                    ok = 0;
                tset(&m, b, 0, i, j, ok ? 0.0 : 1.0);
            }
    return m;
}

/* The reference for the step: the step's inputs, the explicit mask, no
 * causal mode, no kv_lens. */
static void reference_for(const step *s, const tbuf *mask, ref_result *r)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = s->dtype;
    a.q = s->q.t;
    a.k = s->k.t;
    a.v = s->v.t;
    a.out = s->out.t;
    a.lse = s->lse.t;
    a.mask = mask->t;
    assert_int_equal(ref_forward(&a, r), 0);
    assert_false(r->any_empty);
}

typedef struct tol {
    double out, lse_abs, lse_rel;
} tol;

/* As in test_random.c: eps of the dtype, the logit bound L and the largest
 * |v| from the reference, Tk and Dk of the call. */
static tol tolerance(int dtype, const ref_result *r)
{
    const double eps = dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    const double L = (double)r->logit_absmax;
    const double e_s = (DK + 4) * eps * L + 4 * eps * (1 + L);
    const double e_p = 2 * e_s + (TK + 16) * eps;
    tol t;
    t.out = 2 * ((double)r->v_absmax + 1e-300) * (e_p + (TK + 4) * eps);
    t.lse_abs = 2 * (e_s + (TK + 16) * eps);
    t.lse_rel = 2 * eps;
    return t;
}

static void poison(tbuf *x)
{
    for (size_t e = 0; e < x->elems; ++e) {
        if (x->kind == SDPA_FLOAT32)
            ((float *)x->mem)[e] = NAN;
        else
            ((double *)x->mem)[e] = NAN;
    }
}

/* Number of out / lse elements outside the tolerance (printing the first
 * few when `what` is not NULL). A NaN (a padding row read) counts as
 * outside. */
static int compare(const step *s, const ref_result *r, const tol *t,
                   const char *what)
{
    int bad = 0;
    for (int64_t b = 0; b < NB; ++b)
        for (int64_t h = 0; h < HQ; ++h)
            for (int64_t i = 0; i < SQ; ++i) {
                const size_t row = (size_t)((b * HQ + h) * SQ + i);
                for (int64_t d = 0; d < DV; ++d) {
                    double got = tget(&s->out, b, h, i, d);
                    double want = (double)r->out[row * DV + (size_t)d];
                    if (!(fabs(got - want) <= t->out) && bad++ < 5 && what)
                        print_message("  %s: out[%lld,%lld,%lld,%lld] = "
                                      "%.9g, reference %.9g (tol %.3g)\n",
                                      what, (long long)b, (long long)h,
                                      (long long)i, (long long)d, got, want,
                                      t->out);
                }
                double got = tget(&s->lse, b, h, i, 0);
                double want = (double)r->lse[row];
                double tl = t->lse_abs + t->lse_rel * fabs(want);
                if (!(fabs(got - want) <= tl) && bad++ < 5 && what)
                    print_message("  %s: lse[%lld,%lld,%lld] = %.9g, "
                                  "reference %.9g (tol %.3g)\n",
                                  what, (long long)b, (long long)h,
                                  (long long)i, got, want, tl);
            }
    return bad;
}

static const char *path_name(int p)
{
    static const char *n[] = {"AUTO", "MATERIALISED", "TILED", "DECODE"};
    return n[p];
}

/* Runs `a` on every kernel and path the machine and call accept and
 * compares out and lse with `r` each time. TILED and DECODE may answer
 * SDPA_ERR_UNSUPPORTED; AUTO and MATERIALISED must run. */
static void run_all(step *s, const sdpa_forward_args *a, const ref_result *r,
                    const char *what)
{
    const tol t = tolerance(s->dtype, r);
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    int failures = 0, runs = 0;
    for (int ki = 0; ki < TEST_KERNELS; ++ki) {
        int ks = sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, test_kernels[ki]);
        if (ks == SDPA_ERR_UNSUPPORTED)
            continue;
        assert_int_equal(ks, SDPA_OK);
        for (int path = SDPA_PATH_AUTO; path <= SDPA_PATH_DECODE; ++path) {
            assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_PATH, path),
                             SDPA_OK);
            poison(&s->out);
            poison(&s->lse);
            int st = sdpa_forward(ctx, a);
            if (st == SDPA_ERR_UNSUPPORTED &&
                (path == SDPA_PATH_TILED || path == SDPA_PATH_DECODE))
                continue;
            if (st != SDPA_OK) {
                print_message("  %s: sdpa_forward: %s (%s), kernel %s, path "
                              "%s\n",
                              what, sdpa_status_string(st),
                              sdpa_ctx_last_error(ctx),
                              kernel_name(test_kernels[ki]), path_name(path));
                failures++;
                continue;
            }
            runs++;
            if (compare(s, r, &t, what)) {
                print_message("  %s: above: kernel %s, path %s\n", what,
                              kernel_name(test_kernels[ki]), path_name(path));
                failures++;
            }
        }
    }
    sdpa_ctx_destroy(ctx);
    assert_true(runs >= 2);
    assert_int_equal(failures, 0);
}

/* Largest |out_x - out_y| over the first new token's row (i = 0) of item
 * b, over all heads and columns. */
static double row0_diff(const tbuf *x, const tbuf *y, int64_t b)
{
    double m = 0;
    for (int64_t h = 0; h < HQ; ++h)
        for (int64_t d = 0; d < DV; ++d) {
            double e = fabs(tget(x, b, h, 0, d) - tget(y, b, h, 0, d));
            if (!(e <= m))
                m = e; /* NaN too */
        }
    return m;
}

/* past_key / past_value, is_causal = 1: different past lengths per item,
 * one of them 0 (a prefill: there BOTTOM_RIGHT = TOP_LEFT), one that fills
 * the cache to its capacity. */
static void test_past_key_causal(void **state)
{
    const int dtype = *(int *)*state;
    static const int64_t past[NB] = {5, 0, 9, 2};
    rng r = {0x0111ca5eu};
    step s;
    step_from_past(&s, dtype, past, &r);
    tbuf m = expected_mask(&s, 1, NULL);
    ref_result ref;
    reference_for(&s, &m, &ref);
    sdpa_forward_args a = step_args(&s, onnx_causal_mode());
    run_all(&s, &a, &ref, "past_key causal");

    /* Anchoring matters: the first new token of an item with a past sees
     * past + 1 keys, not 1, so TOP_LEFT gives another output. */
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
    tbuf br;
    tbuf_make(&br, dtype, NB, HQ, SQ, DV, LAYOUT_BHTD, 0);
    memcpy(br.mem, s.out.mem, s.out.elems * s.out.esize);
    sdpa_forward_args tl = step_args(&s, SDPA_CAUSAL_TOP_LEFT);
    assert_int_equal(sdpa_forward(ctx, &tl), SDPA_OK);
    const tol t = tolerance(dtype, &ref);
    for (int64_t b = 0; b < NB; ++b) {
        double d = row0_diff(&s.out, &br, b);
        if (past[b] > 0) {
            if (!(d > 1e-2 && d > 100 * t.out))
                fail_msg("item %lld (past %lld): TOP_LEFT and BOTTOM_RIGHT "
                         "first-token outputs differ by only %.3g",
                         (long long)b, (long long)past[b], d);
        } else {
            /* No past: both anchorings are the same diagonal. */
            assert_true(d <= 2 * t.out);
        }
    }
    tbuf_free(&br);
    sdpa_ctx_destroy(ctx);
    ref_free(&ref);
    tbuf_free(&m);
    step_free(&s);
}

/* One past length for the whole batch, as ONNX's past_key has it, without
 * is_causal: every new token sees all past + Sq keys (and none of the NaN
 * rows). */
static void test_past_key_noncausal(void **state)
{
    const int dtype = *(int *)*state;
    static const int64_t past[NB] = {6, 6, 6, 6}; /* ONNX's uniform past */
    rng r = {0x0222ca5eu};
    step s;
    step_from_past(&s, dtype, past, &r);
    tbuf m = expected_mask(&s, 0, NULL);
    ref_result ref;
    reference_for(&s, &m, &ref);
    sdpa_forward_args a = step_args(&s, SDPA_CAUSAL_NONE);
    run_all(&s, &a, &ref, "past_key non-causal");
    ref_free(&ref);
    tbuf_free(&m);
    step_free(&s);
}

/* nonpad_kv_seqlen, is_causal = 1: kv_lens = nonpad, offset nonpad - Sq. */
static void test_nonpad_causal(void **state)
{
    const int dtype = *(int *)*state;
    static const int64_t nonpad[NB] = {7, 3, 12, 4};
    rng r = {0x0333ca5eu};
    step s;
    step_from_nonpad(&s, dtype, nonpad, &r);
    tbuf m = expected_mask(&s, 1, NULL);
    ref_result ref;
    reference_for(&s, &m, &ref);
    sdpa_forward_args a = step_args(&s, onnx_causal_mode());
    run_all(&s, &a, &ref, "nonpad causal");
    ref_free(&ref);
    tbuf_free(&m);
    step_free(&s);
}

/* An ONNX bool attn_mask [NB, 1, SQ, M] (nonzero = takes part) with
 * M < past + SQ: ONNX pads it with false. Key 0 is always allowed (no
 * empty row); (i = 0, key M - 1) is allowed for every item, so that
 * kv_lens = M below must change row 0. */
enum { UPAST = 6, MLEN = 7 };

static tbuf onnx_short_mask(rng *r)
{
    tbuf am;
    tbuf_make(&am, ELEM_U8, NB, 1, SQ, MLEN, LAYOUT_BHTD, 0);
    for (int64_t b = 0; b < NB; ++b)
        for (int64_t i = 0; i < SQ; ++i)
            for (int64_t j = 0; j < MLEN; ++j)
                tset(&am, b, 0, i, j,
                     (j == 0 || (i == 0 && j == MLEN - 1) || rng_unit(r) < 0.7)
                         ? 1.0
                         : 0.0);
    return am;
}

/* libsdpa mask [NB, 1, SQ, TK] under SDPA_FLAG_MASK_NONZERO_ALLOWS: the
 * ONNX mask in columns 0..M-1, then `tail` (0 = forbidden) up to TK. */
static tbuf widened(const tbuf *am, double tail)
{
    tbuf w;
    tbuf_make(&w, ELEM_U8, NB, 1, SQ, TK, LAYOUT_BHTD, 0);
    for (int64_t b = 0; b < NB; ++b)
        for (int64_t i = 0; i < SQ; ++i)
            for (int64_t j = 0; j < TK; ++j)
                tset(&w, b, 0, i, j, j < MLEN ? tget(am, b, 0, i, j) : tail);
    return w;
}

static void test_short_mask_causal(void **state)
{
    const int dtype = *(int *)*state;
    static const int64_t past[NB] = {UPAST, UPAST, UPAST, UPAST};
    rng r = {0x0444ca5eu};
    step s;
    step_from_past(&s, dtype, past, &r);
    tbuf am = onnx_short_mask(&r);
    tbuf m = expected_mask(&s, 1, &am);
    ref_result ref;
    reference_for(&s, &m, &ref);

    /* Right: full-length mask with the tail forbidden, kv_lens = past + Sq. */
    tbuf w = widened(&am, 0.0);
    sdpa_forward_args a = step_args(&s, onnx_causal_mode());
    a.flags = SDPA_FLAG_MASK_NONZERO_ALLOWS;
    a.mask = w.t;
    run_all(&s, &a, &ref, "short attn_mask causal");

    /* Wrong: kv_lens = M moves the diagonal to j <= i + M - Sq, which
     * forbids key M - 1 (allowed by ONNX) for token 0 of every item. */
    int64_t lens_m[NB] = {MLEN, MLEN, MLEN, MLEN};
    a.kv_lens = lens_m;
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
    const tol t = tolerance(dtype, &ref);
    assert_true(compare(&s, &ref, &t, NULL) > 0);
    sdpa_ctx_destroy(ctx);
    tbuf_free(&w);
    ref_free(&ref);
    tbuf_free(&m);
    tbuf_free(&am);
    step_free(&s);
}

/* Without is_causal, kv_lens = M is the same as padding the mask: keys
 * j >= M are forbidden by j >= kv_lens whatever the mask's tail holds (here
 * 0xEE, "allowed" under the flag). */
static void test_short_mask_noncausal(void **state)
{
    const int dtype = *(int *)*state;
    static const int64_t past[NB] = {UPAST, UPAST, UPAST, UPAST};
    rng r = {0x0555ca5eu};
    step s;
    step_from_past(&s, dtype, past, &r);
    tbuf am = onnx_short_mask(&r);
    tbuf m = expected_mask(&s, 0, &am);
    ref_result ref;
    reference_for(&s, &m, &ref);

    tbuf w = widened(&am, 0xEE);
    int64_t lens_m[NB] = {MLEN, MLEN, MLEN, MLEN};
    sdpa_forward_args a = step_args(&s, SDPA_CAUSAL_NONE);
    a.kv_lens = lens_m;
    a.flags = SDPA_FLAG_MASK_NONZERO_ALLOWS;
    a.mask = w.t;
    run_all(&s, &a, &ref, "short attn_mask, kv_lens = M");

    /* The forbidden-tail form gives the same. */
    tbuf w0 = widened(&am, 0.0);
    a.kv_lens = s.total;
    a.mask = w0.t;
    run_all(&s, &a, &ref, "short attn_mask, widened");
    tbuf_free(&w0);
    tbuf_free(&w);
    ref_free(&ref);
    tbuf_free(&m);
    tbuf_free(&am);
    step_free(&s);
}

/* One CMocka test per function and dtype. */
#define IN_FLOAT(fn)                                                           \
    {                                                                          \
        "" #fn "_float", fn, NULL, NULL, &g_float                              \
    }
#define IN_DOUBLE(fn)                                                          \
    {                                                                          \
        "" #fn "_double", fn, NULL, NULL, &g_double                            \
    }

int main(void)
{
    const struct CMUnitTest tests[] = {
        IN_FLOAT(test_past_key_causal),
        IN_DOUBLE(test_past_key_causal),
        IN_FLOAT(test_past_key_noncausal),
        IN_DOUBLE(test_past_key_noncausal),
        IN_FLOAT(test_nonpad_causal),
        IN_DOUBLE(test_nonpad_causal),
        IN_FLOAT(test_short_mask_causal),
        IN_DOUBLE(test_short_mask_causal),
        IN_FLOAT(test_short_mask_noncausal),
        IN_DOUBLE(test_short_mask_noncausal),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
