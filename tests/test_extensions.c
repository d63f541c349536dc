/*
 * The 1.1 extensions of sdpa_forward_args (include/sdpa.h): the sliding
 * window (SDPA_FLAG_WINDOW, window_left / window_right), ALiBi
 * (alibi_slopes, sdpa_alibi_slopes), attention sinks (sinks) and the
 * logits output (logits, logits_stage), in float and double, on every path
 * (SDPA_OPT_PATH AUTO, MATERIALISED, TILED, DECODE) and every row kernel
 * this CPU has (PORTABLE, AVX2, AVX512; the ones it lacks are printed and
 * skipped).
 *
 * Every computed case is compared with the long-double reference
 * (reference.c), whose 1.1 rules are themselves checked here against values
 * worked out by hand (the comments give them). On TILED and DECODE a call
 * with weights or logits must be refused with SDPA_ERR_UNSUPPORTED, outputs
 * untouched; the same call without them must then succeed and match. K and
 * V rows that no query row of the heads sharing them may see (by the
 * reference: window, mask, causality, -inf bias, kv_lens) hold NaN, which
 * must never reach an output. Tolerances are those of test_random.c (its
 * header derives them from the dtype, ALiBi and sinks included).
 *
 *  - window: exact zeros outside the band, a 300 x 300 causal window 17/0, a
 *    non-causal window 5/3 with Tq != Tk (the bottom-right anchor), a decode
 *    step against a long cache, one-sided windows; rows the window empties
 *    (SDPA_ERR_FULLY_MASKED_ROW by default, zero rows with
 *    SDPA_EMPTY_ROWS_ZERO);
 *  - validation: window extents below -1 or set without the flag, NaN /
 *    inf slopes and sinks, bad logits stages, a misshapen, strided or
 *    overlapping logits tensor: the status, for sdpa_forward and
 *    sdpa_forward_workspace, and every output byte untouched;
 *  - sdpa_alibi_slopes against the closed form (H = 1..64, several
 *    max_bias, 4 ulp) and its errors (nothing written);
 *  - ALiBi: a hand case, the bottom-right anchor, random cases;
 *  - sinks: a fully masked row (out 0, lse sigma exactly, OK under the
 *    default policy), kv_lens 0, a hand case, decode split in many chunks
 *    (the sink counted once);
 *  - logits: the three ONNX stages on a hand case with soft-cap, bias,
 *    mask and ALiBi; forced TILED / DECODE refused;
 *  - struct_size 624 (a 1.0 caller): the 1.1 fields, even invalid ones,
 *    are not read;
 *  - random mixes of all of the above with mask, bias, GQA and kv_lens.
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
#include "checks.h"
#include "problem.h"
#include "testutil.h"

static const char *dt_name(int dtype)
{
    return dtype == SDPA_FLOAT32 ? "float" : "double";
}

/* ---- A problem: contiguous BHTD tensors, optional 1.1 fields. --------- */

typedef test_problem prob;

/* q and k uniform in [-amp, amp) with amp chosen so that |logit| stays
 * around 3; v in [-1, 1). */
static void prob_make(prob *p, int dtype, uint64_t seed, int64_t N, int64_t Hq,
                      int64_t Hkv, int64_t Tq, int64_t Tk, int64_t Dk,
                      int64_t Dv)
{
    rng r = {seed * UINT64_C(0x9E3779B97F4A7C15) + 17};
    tp_make(p, dtype, &r, sqrt(3.0 / sqrt((double)Dk)), N, Hq, Hkv, Tq, Tk, Dk,
            Dv);
}

/* A [1, Hq, Tq, Tk] bias in [-1, 1), -inf with probability ninf. */
static void prob_bias_random(prob *p, rng *r, double ninf)
{
    tbuf_make(&p->bias, p->dtype, 1, p->Hq, p->Tq, p->Tk, LAYOUT_BHTD, 0);
    for (int64_t h = 0; h < p->Hq; ++h)
        for (int64_t i = 0; i < p->Tq; ++i)
            for (int64_t j = 0; j < p->Tk; ++j)
                tset(&p->bias, 0, h, i, j,
                     rng_unit(r) < ninf ? -INFINITY : rng_sym(r, 1.0));
    p->a.bias = p->bias.t;
}

/* ---- Tolerances: test_random.c's derivation (see its header). --------- */

typedef test_tol tol;

static tol tolerance(const prob *p, const sdpa_forward_args *a,
                     const ref_result *r)
{
    return tp_forward_tol(tp_eps(p->dtype), r, p->Tk, p->Dk, a->softcap,
                          a->sinks != NULL, 0, 0);
}

/* The value x as the dtype holds it. */
static double in_dtype(int dtype, double x)
{
    return dtype == SDPA_FLOAT32 ? (double)(float)x : x;
}

/* ---- Comparison with the reference. ------------------------------------ */

typedef struct where {
    const char *name;
    int dtype, path, kernel;
} where;

static long g_printed; /* mismatch lines printed so far (capped) */

static void mismatch(const where *w, const char *what, int64_t b, int64_t h,
                     int64_t i, int64_t j, double got, double want, double tl)
{
    if (g_printed++ >= 30)
        return;
    print_message("  MISMATCH %s %s path=%s kernel=%s: %s[%lld,%lld,%lld,%lld] "
                  "got %.17g expected %.17g (tolerance %.3g)\n",
                  w->name, dt_name(w->dtype), tp_path_name(w->path),
                  kernel_name(w->kernel), what, (long long)b, (long long)h,
                  (long long)i, (long long)j, got, want, tl);
}

/* Compare what call `a` wrote with the reference; returns the number of
 * mismatching elements. A row without an allowed key must be exactly out 0,
 * weights 0, logits -inf, lse -inf (no sink) or sigma_h (sink). */
static long compare(const prob *p, const sdpa_forward_args *a,
                    const ref_result *r, const tol *t, const where *w)
{
    long bad = 0;
    for (int64_t b = 0; b < p->N; ++b)
        for (int64_t h = 0; h < p->Hq; ++h)
            for (int64_t i = 0; i < p->Tq; ++i) {
                const size_t row = (size_t)((b * p->Hq + h) * p->Tq + i);
                const unsigned char *ok = r->allowed + row * (size_t)p->Tk;
                int any = 0;
                for (int64_t j = 0; j < p->Tk; ++j)
                    any |= ok[j];
                for (int64_t d = 0; d < p->Dv; ++d) {
                    double want =
                        (double)r->out[row * (size_t)p->Dv + (size_t)d];
                    double got = tget(&p->out, b, h, i, d);
                    if (any ? !(fabs(got - want) <= t->out) : got != 0.0) {
                        mismatch(w, "out", b, h, i, d, got, want,
                                 any ? t->out : 0);
                        bad++;
                    }
                }
                if (a->weights.data)
                    for (int64_t j = 0; j < p->Tk; ++j) {
                        size_t k = row * (size_t)p->Tk + (size_t)j;
                        double want = (double)r->weights[k];
                        double got = tget(&p->w, b, h, i, j);
                        if (ok[j] ? !(fabs(got - want) <= t->w) : got != 0.0) {
                            mismatch(w, ok[j] ? "weights" : "forbidden weight",
                                     b, h, i, j, got, want, ok[j] ? t->w : 0);
                            bad++;
                        }
                    }
                if (a->logits.data)
                    for (int64_t j = 0; j < p->Tk; ++j) {
                        size_t k = row * (size_t)p->Tk + (size_t)j;
                        double want = (double)r->logits[k];
                        double got = tget(&p->lg, b, h, i, j);
                        if (ok[j] ? !(fabs(got - want) <= t->logit)
                                  : !(isinf(got) && got < 0)) {
                            mismatch(w, ok[j] ? "logits" : "forbidden logit", b,
                                     h, i, j, got, want, ok[j] ? t->logit : 0);
                            bad++;
                        }
                    }
                if (a->lse.data) {
                    double want = (double)r->lse[row];
                    double got = tget(&p->lse, b, h, i, 0);
                    int good;
                    if (any)
                        good = fabs(got - want) <=
                               t->lse_abs + t->lse_rel * fabs(want);
                    else if (a->sinks)
                        good = got == (want = in_dtype(p->dtype, a->sinks[h]));
                    else
                        good = isinf(got) && got < 0;
                    if (!good) {
                        mismatch(w, "lse", b, h, i, 0, got, want,
                                 any ? t->lse_abs + t->lse_rel * fabs(want)
                                     : 0);
                        bad++;
                    }
                }
            }
    return bad;
}

/* ---- Running a case on every kernel and path. -------------------------- */

typedef struct case_opts {
    int empty_zero;  /* SDPA_EMPTY_ROWS_ZERO instead of ERROR */
    int64_t block_k; /* SDPA_OPT_BLOCK_K (0 = auto) */
    int as_v10;      /* call with struct_size 624, the 1.1 fields as they
                        are; the reference sees them zeroed */
} case_opts;

typedef struct case_result {
    long runs[4], failures, poisoned;
    int expect_error;
} case_result;

/* The 1.1 fields of a copy of `a` zeroed (a 1.0 caller's view). */
static sdpa_forward_args strip_v11(const sdpa_forward_args *a)
{
    sdpa_forward_args c = *a;
    c.flags &= ~(uint32_t)SDPA_FLAG_WINDOW;
    c.window_left = c.window_right = 0;
    c.alibi_slopes = c.sinks = NULL;
    memset(&c.logits, 0, sizeof c.logits);
    c.logits_stage = 0;
    return c;
}

static case_result run_case(const char *name, prob *p, const case_opts *o)
{
    case_result cr;
    memset(&cr, 0, sizeof cr);
    const sdpa_forward_args ref_args = o->as_v10 ? strip_v11(&p->a) : p->a;
    ref_result r;
    assert_int_equal(ref_forward(&ref_args, &r), 0);
    cr.poisoned = tp_poison_unseen(p, &r, 0);
    const tol t = tolerance(p, &ref_args, &r);
    cr.expect_error = r.any_empty && !o->empty_zero;

    sdpa_ctx *ctx = tp_ctx(0);
    tp_set_empty_rows(ctx, o->empty_zero);
    tp_set(ctx, SDPA_OPT_BLOCK_K, o->block_k);
    for (int ki = 0; ki < TEST_KERNELS; ++ki) {
        if (!tp_use_kernel(ctx, ki))
            continue;
        for (int path = SDPA_PATH_AUTO; path <= SDPA_PATH_DECODE; ++path) {
            tp_set(ctx, SDPA_OPT_PATH, path);
            where w = {name, p->dtype, path, test_kernels[ki]};
            sdpa_forward_args a = p->a;
            if (o->as_v10)
                a.struct_size = 624;
            /* A 1.0 caller's logits are not there. */
            const int heavy =
                a.weights.data != NULL || (!o->as_v10 && a.logits.data);
            int rc;
            if (heavy && path >= SDPA_PATH_TILED) {
                /* Weights / logits need the materialised path. */
                tp_clear_outputs(p);
                rc = sdpa_forward(ctx, &a);
                if (!(rc == SDPA_ERR_UNSUPPORTED ||
                      (cr.expect_error && rc == SDPA_ERR_FULLY_MASKED_ROW)) ||
                    !tp_outputs_untouched(p)) {
                    print_message(
                        "  %s %s path=%s kernel=%s: with weights "
                        "or logits: %s (expected UNSUPPORTED), "
                        "outputs %s\n",
                        name, dt_name(p->dtype), tp_path_name(path),
                        kernel_name(test_kernels[ki]), sdpa_status_string(rc),
                        tp_outputs_untouched(p) ? "untouched" : "WRITTEN");
                    cr.failures++;
                }
                /* ... and the same call with out and lse only. */
                memset(&a.weights, 0, sizeof a.weights);
                memset(&a.logits, 0, sizeof a.logits);
                a.logits_stage = 0;
            }
            tp_clear_outputs(p);
            rc = sdpa_forward(ctx, &a);
            cr.runs[path]++;
            if (cr.expect_error) {
                if (rc != SDPA_ERR_FULLY_MASKED_ROW ||
                    !tp_outputs_untouched(p)) {
                    print_message("  %s %s path=%s kernel=%s: expected "
                                  "FULLY_MASKED_ROW (b%lld h%lld i%lld), got "
                                  "%s, outputs %s: %s\n",
                                  name, dt_name(p->dtype), tp_path_name(path),
                                  kernel_name(test_kernels[ki]),
                                  (long long)r.empty_b, (long long)r.empty_h,
                                  (long long)r.empty_i, sdpa_status_string(rc),
                                  tp_outputs_untouched(p) ? "untouched"
                                                          : "WRITTEN",
                                  sdpa_ctx_last_error(ctx));
                    cr.failures++;
                }
            } else if (rc != SDPA_OK) {
                print_message("  %s %s path=%s kernel=%s: %s: %s\n", name,
                              dt_name(p->dtype), tp_path_name(path),
                              kernel_name(test_kernels[ki]),
                              sdpa_status_string(rc), sdpa_ctx_last_error(ctx));
                cr.failures++;
            } else {
                const sdpa_forward_args seen = o->as_v10 ? strip_v11(&a) : a;
                long bad = compare(p, &seen, &r, &t, &w);
                if (o->as_v10 && p->lg.mem &&
                    first_non_sentinel(p->lg.mem, p->lg.elems * p->lg.esize) >=
                        0) {
                    print_message("  %s: struct_size 624 but the logits "
                                  "buffer was written (path %s)\n",
                                  name, tp_path_name(path));
                    bad++;
                }
                if (bad)
                    cr.failures++;
            }
        }
    }
    sdpa_ctx_destroy(ctx);
    ref_free(&r);
    return cr;
}

/* run_case, then: no failure, and every path ran. */
static void check_case(const char *name, prob *p, const case_opts *o)
{
    case_result cr = run_case(name, p, o);
    print_message("  %-34s %-6s runs %ld/%ld/%ld/%ld, %ld NaN K/V rows, %s: "
                  "%ld failed\n",
                  name, dt_name(p->dtype), cr.runs[0], cr.runs[1], cr.runs[2],
                  cr.runs[3], cr.poisoned,
                  cr.expect_error ? "expects FULLY_MASKED_ROW" : "computes",
                  cr.failures);
    assert_int_equal(cr.failures, 0);
    for (int path = 0; path < 4; ++path)
        assert_true(cr.runs[path] > 0);
}

static const case_opts k_default = {0, 0, 0};

/* The reference's allowed keys of row (b, h, i) are exactly [lo, hi]. */
static void assert_band(const ref_result *r, const prob *p, int64_t b,
                        int64_t h, int64_t i, int64_t lo, int64_t hi)
{
    const size_t row = (size_t)((b * p->Hq + h) * p->Tq + i);
    for (int64_t j = 0; j < p->Tk; ++j) {
        int want = j >= lo && j <= hi;
        if (r->allowed[row * (size_t)p->Tk + (size_t)j] != want)
            fail_msg("reference: row (b%lld h%lld i%lld) key %lld allowed=%d, "
                     "band [%lld, %lld]",
                     (long long)b, (long long)h, (long long)i, (long long)j,
                     r->allowed[row * (size_t)p->Tk + (size_t)j], (long long)lo,
                     (long long)hi);
    }
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* ---- Window: exact zeros outside the band, against the reference. ----- */

static void test_window_causal_long(void **state)
{
    const int dt = *(int *)*state;
    /* Tq = Tk = 300, causal top-left, window 17/0: row i sees keys
     * i-17..i, weights exactly 0 elsewhere. */
    prob p;
    prob_make(&p, dt, 1, 1, 2, 1, 300, 300, 16, 8);
    p.a.causal = SDPA_CAUSAL_TOP_LEFT;
    tp_window(&p, 17, 0);
    tp_outputs(&p, 1, 1, 0);
    ref_result r;
    assert_int_equal(ref_forward(&p.a, &r), 0);
    for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < 300; ++i)
            assert_band(&r, &p, 0, h, i, max64(0, i - 17), i);
    ref_free(&r);
    check_case("window 17/0 causal 300x300", &p, &k_default);
    case_opts o = {0, 16, 0}; /* 16-key tiles: most lie outside the band */
    check_case("window 17/0 causal, BLOCK_K 16", &p, &o);
    /* Bottom-right causality agrees when Tq = Tk. */
    p.a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    check_case("window 17/0 bottom-right 300x300", &p, &o);
    tp_free(&p);
}

static void test_window_bottom_right_anchor(void **state)
{
    const int dt = *(int *)*state;
    /* No causality, window 5/3, Tq = 7 < Tk = 40, kv_lens {40, 23}: the
     * diagonal is d_i = i + L_b - 7, so row i of item b sees keys
     * [i + L_b - 12, i + L_b - 4] within [0, L_b). Keys left of every band
     * hold NaN. GQA: Hq = 4, Hkv = 2. */
    prob p;
    prob_make(&p, dt, 2, 2, 4, 2, 7, 40, 8, 5);
    const int64_t lens[2] = {40, 23};
    tp_kvlens(&p, lens);
    tp_window(&p, 5, 3);
    tp_outputs(&p, 1, 1, SDPA_LOGITS_MASKED);
    ref_result r;
    assert_int_equal(ref_forward(&p.a, &r), 0);
    for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = 0; i < 7; ++i)
            assert_band(&r, &p, b, 3, i, max64(0, i + lens[b] - 12),
                        min64(lens[b] - 1, i + lens[b] - 4));
    ref_free(&r);
    case_result cr = run_case("window 5/3 Tq 7 Tk 40", &p, &k_default);
    print_message("  window 5/3 Tq 7 Tk 40: %ld NaN K/V rows, %ld failed\n",
                  cr.poisoned, cr.failures);
    /* Per KV head: item 0 keys 0..27, item 1 keys 0..10 and 23..39. */
    assert_int_equal(cr.poisoned, 2 * 28 + 2 * (11 + 17));
    assert_int_equal(cr.failures, 0);
    case_opts o = {0, 3, 0};
    check_case("window 5/3 Tq 7 Tk 40, BLOCK_K 3", &p, &o);
    tp_free(&p);

    /* A decode step on a long cache: Tq = 2, Tk = 300, kv_lens {300, 150},
     * causal bottom-right, window 17/0, MQA: all but 19 keys per item hold
     * NaN. */
    prob_make(&p, dt, 3, 2, 4, 1, 2, 300, 16, 8);
    const int64_t lens2[2] = {300, 150};
    tp_kvlens(&p, lens2);
    p.a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    tp_window(&p, 17, 0);
    tp_outputs(&p, 0, 1, 0);
    cr = run_case("decode window 17/0 Tk 300", &p, &k_default);
    assert_int_equal(cr.poisoned, (300 - 19) + (300 - 19));
    assert_int_equal(cr.failures, 0);
    case_opts o2 = {0, 16, 0};
    check_case("decode window 17/0, BLOCK_K 16", &p, &o2);
    tp_free(&p);
}

static void test_window_one_sided(void **state)
{
    const int dt = *(int *)*state;
    /* Tq = Tk = 50, no causality: window -1/2 (everything left, 2 right)
     * and 4/-1 (4 left, everything right). */
    prob p;
    prob_make(&p, dt, 4, 1, 2, 2, 50, 50, 12, 12);
    tp_window(&p, -1, 2);
    tp_outputs(&p, 1, 1, SDPA_LOGITS_SCALED);
    ref_result r;
    assert_int_equal(ref_forward(&p.a, &r), 0);
    for (int64_t i = 0; i < 50; ++i)
        assert_band(&r, &p, 0, 1, i, 0, min64(49, i + 2));
    ref_free(&r);
    check_case("window -1/2", &p, &k_default);
    p.a.window_left = 4;
    p.a.window_right = -1;
    assert_int_equal(ref_forward(&p.a, &r), 0);
    for (int64_t i = 0; i < 50; ++i)
        assert_band(&r, &p, 0, 0, i, max64(0, i - 4), 49);
    ref_free(&r);
    case_opts o = {0, 7, 0};
    check_case("window 4/-1, BLOCK_K 7", &p, &o);
    /* Window 0/0: the diagonal alone (weights exactly 1). */
    p.a.window_left = 0;
    p.a.window_right = 0;
    check_case("window 0/0", &p, &k_default);
    tp_free(&p);
}

static void test_window_empty_rows(void **state)
{
    const int dt = *(int *)*state;
    /* Tq = 6, Tk = 4, no causality: d_i = i - 2. Window 1/0 allows keys
     * [i - 3, i - 2]: rows 0 and 1 have none. */
    prob p;
    prob_make(&p, dt, 5, 1, 2, 1, 6, 4, 3, 2);
    tp_window(&p, 1, 0);
    tp_outputs(&p, 1, 1, SDPA_LOGITS_MASKED);
    ref_result r;
    assert_int_equal(ref_forward(&p.a, &r), 0);
    assert_true(r.any_empty);
    assert_int_equal(r.empty_i, 0);
    for (int64_t i = 0; i < 6; ++i)
        assert_band(&r, &p, 0, 0, i, max64(0, i - 3), i - 2);
    ref_free(&r);
    case_result cr = run_case("window empties rows, ERROR", &p, &k_default);
    assert_true(cr.expect_error);
    assert_int_equal(cr.failures, 0);
    case_opts z = {1, 0, 0};
    cr = run_case("window empties rows, ZERO", &p, &z);
    assert_false(cr.expect_error);
    assert_int_equal(cr.failures, 0);
    print_message("  window empties rows: FULLY_MASKED_ROW by default, zero "
                  "rows (lse -inf) with SDPA_EMPTY_ROWS_ZERO: checked\n");
    tp_free(&p);
}

/* ---- Validation. -------------------------------------------------------- */

static void test_validation(void **state)
{
    const int dt = *(int *)*state;
    enum { N = 1, HQ = 2, TQ = 3, TK = 5 };
    prob p;
    prob_make(&p, dt, 6, N, HQ, 1, TQ, TK, 4, 3);
    tp_outputs(&p, 1, 1, 0);
    /* A logits buffer with room for views one larger in every dimension. */
    tbuf_make(&p.lg, dt, N + 1, HQ + 1, TQ + 1, TK + 1, LAYOUT_BHTD, 0);
    const sdpa_tensor lg_ok = {
        p.lg.mem, {N, HQ, TQ, TK}, {HQ * TQ * TK, TQ * TK, TK, 1}};
    double good[HQ] = {0.5, 0.25}, nan_[HQ] = {0.5, NAN},
           pinf[HQ] = {INFINITY, 0.5}, ninf[HQ] = {0.5, -INFINITY};
    struct {
        const char *what;
        int status;
    } cases[] = {
        {"window_left -2 with the flag", SDPA_ERR_BAD_WINDOW},
        {"window_right -2 with the flag", SDPA_ERR_BAD_WINDOW},
        {"window_left INT64_MIN with the flag", SDPA_ERR_BAD_WINDOW},
        {"window_right -2 without the flag", SDPA_ERR_BAD_WINDOW},
        {"window_left 3 without the flag", SDPA_ERR_BAD_WINDOW},
        {"window_right 1 without the flag", SDPA_ERR_BAD_WINDOW},
        {"window_left -1 without the flag", SDPA_ERR_BAD_WINDOW},
        {"slope NaN", SDPA_ERR_BAD_ALIBI},
        {"slope +inf", SDPA_ERR_BAD_ALIBI},
        {"slope -inf", SDPA_ERR_BAD_ALIBI},
        {"sink NaN", SDPA_ERR_BAD_SINK},
        {"sink +inf", SDPA_ERR_BAD_SINK},
        {"sink -inf", SDPA_ERR_BAD_SINK},
        {"logits with stage 0", SDPA_ERR_BAD_LOGITS_STAGE},
        {"logits with stage 4", SDPA_ERR_BAD_LOGITS_STAGE},
        {"logits with stage -1", SDPA_ERR_BAD_LOGITS_STAGE},
        {"stage 1 without logits", SDPA_ERR_BAD_LOGITS_STAGE},
        {"stage 3 without logits", SDPA_ERR_BAD_LOGITS_STAGE},
        {"logits shape[3] Tk + 1", SDPA_ERR_SHAPE_MISMATCH},
        {"logits shape[2] Tq - 1", SDPA_ERR_SHAPE_MISMATCH},
        {"logits shape[1] Hq + 1", SDPA_ERR_SHAPE_MISMATCH},
        {"logits shape[0] N + 1", SDPA_ERR_SHAPE_MISMATCH},
        {"logits shape[3] 1", SDPA_ERR_SHAPE_MISMATCH},
        {"logits stride[3] 2", SDPA_ERR_BAD_STRIDE},
        {"logits on the weights", SDPA_ERR_OVERLAP},
    };
    const int ncases = (int)(sizeof cases / sizeof cases[0]);
    sdpa_ctx *ctx = tp_ctx(0);
    long failures = 0;
    for (int c = 0; c < ncases; ++c) {
        sdpa_forward_args a = p.a;
        switch (c) {
        case 0:
            a.flags |= SDPA_FLAG_WINDOW;
            a.window_left = -2;
            break;
        case 1:
            a.flags |= SDPA_FLAG_WINDOW;
            a.window_left = 1;
            a.window_right = -2;
            break;
        case 2:
            a.flags |= SDPA_FLAG_WINDOW;
            a.window_left = INT64_MIN;
            break;
        case 3:
            a.window_right = -2;
            break;
        case 4:
            a.window_left = 3;
            break;
        case 5:
            a.window_right = 1;
            break;
        case 6:
            a.window_left = -1;
            break;
        case 7:
            a.alibi_slopes = nan_;
            break;
        case 8:
            a.alibi_slopes = pinf;
            break;
        case 9:
            a.alibi_slopes = ninf;
            break;
        case 10:
            a.sinks = nan_;
            break;
        case 11:
            a.sinks = pinf;
            break;
        case 12:
            a.sinks = ninf;
            break;
        case 13:
            a.logits = lg_ok;
            a.logits_stage = 0;
            break;
        case 14:
            a.logits = lg_ok;
            a.logits_stage = 4;
            break;
        case 15:
            a.logits = lg_ok;
            a.logits_stage = -1;
            break;
        case 16:
            a.logits_stage = SDPA_LOGITS_SCALED;
            break;
        case 17:
            a.logits_stage = SDPA_LOGITS_MASKED;
            break;
        case 18:
            a.logits = lg_ok;
            a.logits.shape[3] = TK + 1;
            a.logits.stride[2] = TK + 1;
            a.logits.stride[1] = TQ * (TK + 1);
            a.logits.stride[0] = HQ * TQ * (TK + 1);
            a.logits_stage = SDPA_LOGITS_CAPPED;
            break;
        case 19:
            a.logits = lg_ok;
            a.logits.shape[2] = TQ - 1;
            a.logits_stage = SDPA_LOGITS_CAPPED;
            break;
        case 20:
            a.logits = lg_ok;
            a.logits.shape[1] = HQ + 1;
            a.logits.stride[0] = (HQ + 1) * TQ * TK;
            a.logits_stage = SDPA_LOGITS_CAPPED;
            break;
        case 21:
            a.logits = lg_ok;
            a.logits.shape[0] = N + 1;
            a.logits_stage = SDPA_LOGITS_CAPPED;
            break;
        case 22:
            a.logits = lg_ok;
            a.logits.shape[3] = 1;
            a.logits_stage = SDPA_LOGITS_CAPPED;
            break;
        case 23:
            a.logits = lg_ok;
            a.logits.stride[3] = 2;
            a.logits.stride[2] = 2 * TK;
            a.logits.stride[1] = 2 * TQ * TK;
            a.logits.stride[0] = 2 * HQ * TQ * TK;
            a.logits_stage = SDPA_LOGITS_CAPPED;
            break;
        case 24:
            a.logits = p.w.t;
            a.logits_stage = SDPA_LOGITS_CAPPED;
            break;
        }
        tp_clear_outputs(&p);
        int st = sdpa_forward(ctx, &a);
        size_t bytes = 12345;
        int sw = sdpa_forward_workspace(ctx, &a, &bytes);
        int untouched = tp_outputs_untouched(&p);
        if (st != cases[c].status || sw != cases[c].status || !untouched ||
            bytes != 12345) {
            print_message("  %s: %s: sdpa_forward %d (%s), workspace %d, "
                          "expected %d (%s); outputs %s%s: %s\n",
                          dt_name(dt), cases[c].what, st,
                          sdpa_status_string(st), sw, cases[c].status,
                          sdpa_status_string(cases[c].status),
                          untouched ? "untouched" : "WRITTEN",
                          bytes != 12345 ? ", *bytes written" : "",
                          sdpa_ctx_last_error(ctx));
            failures++;
        }
    }
    /* The base of those cases, with every feature valid, succeeds. */
    sdpa_forward_args a = p.a;
    a.flags |= SDPA_FLAG_WINDOW;
    a.window_left = 1;
    a.window_right = 1;
    a.alibi_slopes = good;
    a.sinks = good;
    a.logits = lg_ok;
    a.logits_stage = SDPA_LOGITS_MASKED;
    int st = sdpa_forward(ctx, &a);
    if (st != SDPA_OK) {
        print_message("  %s: the valid base call: %s: %s\n", dt_name(dt),
                      sdpa_status_string(st), sdpa_ctx_last_error(ctx));
        failures++;
    }
    print_message("  %s: %d invalid argument sets checked, %ld failed\n",
                  dt_name(dt), ncases, failures);
    sdpa_ctx_destroy(ctx);
    tp_free(&p);
    assert_int_equal(failures, 0);
}

/* ---- sdpa_alibi_slopes. ------------------------------------------------- */

/* The closed form of include/sdpa.h, computed here with exp2: n the largest
 * power of two <= heads, 2^(-mb (h+1)/n) for h < n, else
 * 2^(-mb (2(h-n)+1)/(2n)); max_bias 0 means 8. */
static double slope_closed_form(int64_t heads, double max_bias, int64_t h)
{
    const double mb = max_bias == 0.0 ? 8.0 : max_bias;
    int64_t n = 1;
    while (n * 2 <= heads)
        n *= 2;
    if (h < n)
        return exp2(-mb * (double)(h + 1) / (double)n);
    return exp2(-mb * (double)(2 * (h - n) + 1) / (double)(2 * n));
}

/* |got - want| in units of ulp(want). */
static double ulps(double got, double want)
{
    return fabs(got - want) / (nextafter(want, INFINITY) - want);
}

static void test_alibi_slopes_closed_form(void **state)
{
    (void)state;
    static const double biases[] = {0.0, 8.0, 1.0, 0.5, 3.7, 16.0};
    double got[65];
    double worst = 0;
    long failures = 0;
    for (size_t bi = 0; bi < sizeof biases / sizeof biases[0]; ++bi)
        for (int64_t H = 1; H <= 64; ++H) {
            fill_sentinel(got, sizeof got);
            int st = sdpa_alibi_slopes(H, biases[bi], got);
            if (st != SDPA_OK) {
                print_message("  sdpa_alibi_slopes(%lld, %g): %s\n",
                              (long long)H, biases[bi], sdpa_status_string(st));
                failures++;
                continue;
            }
            for (int64_t h = 0; h < H; ++h) {
                double want = slope_closed_form(H, biases[bi], h);
                double u = ulps(got[h], want);
                if (!(u <= 4.0)) {
                    if (failures < 20)
                        print_message("  sdpa_alibi_slopes(%lld, %g)[%lld] = "
                                      "%.17g, expected %.17g (%.3g ulp)\n",
                                      (long long)H, biases[bi], (long long)h,
                                      got[h], want, u);
                    failures++;
                } else if (u > worst) {
                    worst = u;
                }
            }
            /* Nothing written past the H slopes. */
            if (first_non_sentinel(
                    got + H, sizeof got - (size_t)H * sizeof(double)) >= 0) {
                print_message("  sdpa_alibi_slopes(%lld): wrote past slot "
                              "%lld\n",
                              (long long)H, (long long)H);
                failures++;
            }
        }
    /* The paper's examples: H = 8 gives 2^-1 .. 2^-8; H = 12 the first 8
     * of those, then 2^-0.5, 2^-1.5, 2^-2.5, 2^-3.5 (the odd ones of the
     * 16-head sequence 2^(-k/2)). */
    static const double e12[12] = {1, 2, 3, 4, 5, 6, 7, 8, 0.5, 1.5, 2.5, 3.5};
    assert_int_equal(sdpa_alibi_slopes(8, 0.0, got), SDPA_OK);
    for (int h = 0; h < 8; ++h)
        assert_true(ulps(got[h], pow(2.0, -e12[h])) <= 4.0);
    assert_int_equal(sdpa_alibi_slopes(12, 8.0, got), SDPA_OK);
    for (int h = 0; h < 12; ++h)
        assert_true(ulps(got[h], pow(2.0, -e12[h])) <= 4.0);
    print_message("  sdpa_alibi_slopes: H 1..64 x 6 max_bias, worst %.3g ulp, "
                  "%ld failed\n",
                  worst, failures);
    assert_int_equal(failures, 0);
}

static void test_alibi_slopes_errors(void **state)
{
    (void)state;
    double buf[8];
    struct {
        int64_t heads;
        double mb;
        int null, status;
    } cases[] = {
        {0, 0.0, 0, SDPA_ERR_BAD_DIM},
        {-1, 0.0, 0, SDPA_ERR_BAD_DIM},
        {INT64_MIN, 8.0, 0, SDPA_ERR_BAD_DIM},
        {4, 0.0, 1, SDPA_ERR_NULL_POINTER},
        {4, -1.0, 0, SDPA_ERR_BAD_ALIBI},
        {4, -1e-300, 0, SDPA_ERR_BAD_ALIBI},
        {4, NAN, 0, SDPA_ERR_BAD_ALIBI},
        {4, INFINITY, 0, SDPA_ERR_BAD_ALIBI},
        {4, -INFINITY, 0, SDPA_ERR_BAD_ALIBI},
    };
    long failures = 0;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; ++c) {
        fill_sentinel(buf, sizeof buf);
        int st = sdpa_alibi_slopes(cases[c].heads, cases[c].mb,
                                   cases[c].null ? NULL : buf);
        if (st != cases[c].status || first_non_sentinel(buf, sizeof buf) >= 0) {
            print_message("  sdpa_alibi_slopes(%lld, %g, %s): %d (%s), "
                          "expected %d; buffer %s\n",
                          (long long)cases[c].heads, cases[c].mb,
                          cases[c].null ? "NULL" : "buf", st,
                          sdpa_status_string(st), cases[c].status,
                          first_non_sentinel(buf, sizeof buf) >= 0 ? "WRITTEN"
                                                                   : "intact");
            failures++;
        }
    }
    assert_int_equal(failures, 0);
}

/* ---- ALiBi. -------------------------------------------------------------- */

/* Expect the reference's row to be `w` (weights) and `lse` to 1e-15. */
static void assert_ref_row(const ref_result *r, int64_t row, int64_t tk,
                           const double *w, double lse)
{
    for (int64_t j = 0; j < tk; ++j)
        if (!(fabsl(r->weights[row * tk + j] - w[j]) <= 1e-15L))
            fail_msg("reference weight [%lld][%lld] %.17Lg, by hand %.17g",
                     (long long)row, (long long)j, r->weights[row * tk + j],
                     w[j]);
    if (!(fabsl(r->lse[row] - lse) <= 1e-15L))
        fail_msg("reference lse [%lld] %.17Lg, by hand %.17g", (long long)row,
                 r->lse[row], lse);
}

static void test_alibi_hand(void **state)
{
    const int dt = *(int *)*state;
    /* One head, Tq = Tk = 3, q = k = 0 (logits are pure ALiBi), no
     * causality (d_i = i), slope 0.5, V = identity so out = weights:
     *   row 0: logits  0, -0.5, -1   -> Z = 1 + e^-0.5 + e^-1 = 1.9744101
     *          weights 0.50648039105565, 0.30719588571850, 0.18632372322585
     *          lse = log Z = 0.68026967064173
     *   row 1: logits -0.5, 0, -0.5  -> Z = 1 + 2 e^-0.5 = 2.2130613
     *          weights 0.27406861906120, 0.45186276187761, 0.27406861906120
     *          lse = 0.79437676941764
     *   row 2: row 0 reversed.
     * Tq = 1 against the same 3 keys puts the row's diagonal at d_0 = 2
     * (bottom-right): row 2's values. */
    static const double w0[3] = {0.506480391055654, 0.3071958857184984,
                                 0.1863237232258476};
    static const double w1[3] = {0.274068619061197, 0.45186276187760605,
                                 0.274068619061197};
    static const double w2[3] = {0.1863237232258476, 0.3071958857184984,
                                 0.506480391055654};
    const double lse02 = 0.6802696706417346, lse1 = 0.7943767694176432;
    const double half = 0.5;
    prob p;
    prob_make(&p, dt, 7, 1, 1, 1, 3, 3, 2, 3);
    for (int64_t i = 0; i < 3; ++i)
        for (int64_t d = 0; d < 2; ++d) {
            tset(&p.q, 0, 0, i, d, 0.0);
            tset(&p.k, 0, 0, i, d, 0.0);
        }
    for (int64_t j = 0; j < 3; ++j)
        for (int64_t d = 0; d < 3; ++d)
            tset(&p.v, 0, 0, j, d, j == d ? 1.0 : 0.0);
    tp_alibi(&p, &half);
    tp_outputs(&p, 1, 1, SDPA_LOGITS_MASKED);
    ref_result r;
    assert_int_equal(ref_forward(&p.a, &r), 0);
    assert_ref_row(&r, 0, 3, w0, lse02);
    assert_ref_row(&r, 1, 3, w1, lse1);
    assert_ref_row(&r, 2, 3, w2, lse02);
    assert_true(fabsl(r.logits[2 * 3 + 0] + 1.0L) == 0 &&
                fabsl(r.logits[2 * 3 + 1] + 0.5L) == 0 && r.logits[8] == 0);
    ref_free(&r);
    check_case("ALiBi by hand, 3x3", &p, &k_default);
    tp_free(&p);

    prob_make(&p, dt, 8, 1, 1, 1, 1, 3, 2, 3);
    for (int64_t d = 0; d < 2; ++d) {
        tset(&p.q, 0, 0, 0, d, 0.0);
        for (int64_t j = 0; j < 3; ++j)
            tset(&p.k, 0, 0, j, d, 0.0);
    }
    for (int64_t j = 0; j < 3; ++j)
        for (int64_t d = 0; d < 3; ++d)
            tset(&p.v, 0, 0, j, d, j == d ? 1.0 : 0.0);
    tp_alibi(&p, &half);
    tp_outputs(&p, 1, 1, 0);
    assert_int_equal(ref_forward(&p.a, &r), 0);
    assert_ref_row(&r, 0, 3, w2, lse02);
    ref_free(&r);
    check_case("ALiBi by hand, Tq 1 bottom-right", &p, &k_default);
    tp_free(&p);
}

static void test_alibi_random(void **state)
{
    const int dt = *(int *)*state;
    rng r = {dt == SDPA_FLOAT32 ? 101u : 202u};
    /* Standard slopes for 4 heads (GQA 4/2), mask, bias, kv_lens,
     * causal bottom-right or none, Tq 1 and 9. */
    for (int c = 0; c < 4; ++c) {
        prob p;
        const int64_t tq = c % 2 ? 9 : 1;
        prob_make(&p, dt, 20 + (uint64_t)c, 2, 4, 2, tq, 37, 8, 6);
        double s[4];
        for (int h = 0; h < 4; ++h)
            s[h] = slope_closed_form(4, 8.0, h);
        tp_alibi(&p, s);
        const int64_t lens[2] = {37, 20};
        tp_kvlens(&p, lens);
        p.a.causal = c < 2 ? SDPA_CAUSAL_BOTTOM_RIGHT : SDPA_CAUSAL_NONE;
        tp_mask_random(&p, &r, 0.2);
        prob_bias_random(&p, &r, 0.1);
        tp_outputs(&p, 1, 1, SDPA_LOGITS_MASKED);
        case_opts o = {1, c == 3 ? 5 : 0, 0};
        check_case("ALiBi standard slopes, random", &p, &o);
        tp_free(&p);
    }
    /* Random slopes of both signs, 6 heads over 3 KV heads, top-left
     * causal, soft-cap. */
    prob p;
    prob_make(&p, dt, 30, 1, 6, 3, 12, 30, 5, 7);
    double s[6];
    for (int h = 0; h < 6; ++h)
        s[h] = rng_sym(&r, 0.4);
    tp_alibi(&p, s);
    p.a.causal = SDPA_CAUSAL_TOP_LEFT;
    p.a.softcap = 2.5;
    tp_outputs(&p, 1, 1, SDPA_LOGITS_CAPPED);
    check_case("ALiBi random slopes, soft-cap", &p, &k_default);
    tp_free(&p);
}

/* ---- Sinks. -------------------------------------------------------------- */

static void test_sink_masked_row(void **state)
{
    const int dt = *(int *)*state;
    /* Row 0 of both heads has every key masked; with sinks (0.75, -1.25,
     * exact in float) it is not empty: out 0, weights 0, logits -inf,
     * lse = sigma_h exactly, and the call succeeds under the default ERROR
     * policy. Row 1 is an ordinary row with a sink. */
    prob p;
    prob_make(&p, dt, 40, 1, 2, 1, 2, 3, 4, 3);
    tbuf_make(&p.mask, ELEM_U8, 1, 1, 2, 3, LAYOUT_BHTD, 0);
    for (int64_t j = 0; j < 3; ++j) {
        tset(&p.mask, 0, 0, 0, j, 1);
        tset(&p.mask, 0, 0, 1, j, j == 1);
    }
    p.a.mask = p.mask.t;
    const double sig[2] = {0.75, -1.25};
    tp_sinks(&p, sig);
    tp_outputs(&p, 1, 1, SDPA_LOGITS_MASKED);
    ref_result r;
    assert_int_equal(ref_forward(&p.a, &r), 0);
    assert_false(r.any_empty);
    assert_true(r.lse[0] == 0.75L && r.lse[2] == -1.25L);
    ref_free(&r);
    check_case("sink, fully masked row, ERROR", &p, &k_default);
    case_opts z = {1, 0, 0};
    check_case("sink, fully masked row, ZERO", &p, &z);
    tp_free(&p);

    /* kv_lens 0 for item 0: every row of it has only the sink (its K / V
     * rows are all NaN); item 1 is ordinary. */
    prob_make(&p, dt, 41, 2, 2, 2, 4, 9, 6, 5);
    const int64_t lens[2] = {0, 9};
    tp_kvlens(&p, lens);
    tp_sinks(&p, sig);
    p.a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    tp_outputs(&p, 1, 1, 0);
    check_case("sink, kv_lens 0", &p, &k_default);
    tp_free(&p);
}

static void test_sink_hand(void **state)
{
    const int dt = *(int *)*state;
    /* One key whose logit is 0 (q = 0), a sink 0: the softmax over {0, 0}
     * gives the key weight 1/2, out = v / 2 = (1.5, -0.5), lse = log 2. */
    prob p;
    prob_make(&p, dt, 42, 1, 1, 1, 1, 1, 1, 2);
    tset(&p.q, 0, 0, 0, 0, 0.0);
    tset(&p.k, 0, 0, 0, 0, 1.0);
    tset(&p.v, 0, 0, 0, 0, 3.0);
    tset(&p.v, 0, 0, 0, 1, -1.0);
    const double zero = 0.0;
    tp_sinks(&p, &zero);
    tp_outputs(&p, 1, 1, SDPA_LOGITS_MASKED);
    ref_result r;
    assert_int_equal(ref_forward(&p.a, &r), 0);
    const double half = 0.5;
    assert_ref_row(&r, 0, 1, &half, log(2.0));
    assert_true(fabsl(r.out[0] - 1.5L) <= 1e-18L &&
                fabsl(r.out[1] + 0.5L) <= 1e-18L);
    ref_free(&r);
    check_case("sink by hand", &p, &k_default);
    tp_free(&p);
}

static void test_sink_decode_chunks(void **state)
{
    const int dt = *(int *)*state;
    /* One query per head over 64 keys, split in chunks of 8, 5 and 1 keys
     * (SDPA_OPT_BLOCK_K): the sink joins the softmax once, not once per
     * chunk. Sinks large against the logits (|logit| ~ 3, sigma up to 3:
     * the sink's share is a few %; counted twice, lse moves by that much,
     * thousands of times the tolerance). MQA, four different sinks. */
    static const double sig[4] = {3.0, -2.0, 0.5, 2.5};
    static const int64_t blocks[] = {8, 5, 1, 0};
    for (int t = 0; t < 2; ++t) {
        prob p;
        prob_make(&p, dt, 43 + (uint64_t)t, 2, 4, 1, t ? 2 : 1, 64, 8, 4);
        tp_sinks(&p, sig);
        if (t) {
            const int64_t lens[2] = {64, 13};
            tp_kvlens(&p, lens);
            p.a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
        }
        tp_outputs(&p, 0, 1, 0);
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; ++bi) {
            case_opts o = {0, blocks[bi], 0};
            char name[64];
            snprintf(name, sizeof name, "sink decode Tq %d, BLOCK_K %lld",
                     t ? 2 : 1, (long long)blocks[bi]);
            check_case(name, &p, &o);
        }
        tp_free(&p);
    }
}

/* ---- The logits output. -------------------------------------------------- */

static void test_logits_hand(void **state)
{
    const int dt = *(int *)*state;
    /* Tq = 2, Tk = 3, Dk = Dv = 1, scale 1, soft-cap c = 2;
     *   q = (1, -2), k = (1, 0.5, -1), v = (1, 2, 4);
     *   bias = [[0.5, -inf, 0.25], [0, 1, -0.5]], mask forbids (1, 0).
     * Forbidden: (0, 1) by the bias, (1, 0) by the mask.
     *   SCALED  q_i k_j:  [[1, -inf, -1], [-inf, -1, 2]]
     *   CAPPED  2 tanh(s/2): 2 tanh(0.5) = 0.92423431452001952,
     *           2 tanh(1) = 1.5231883119115297:
     *           [[0.92423, -inf, -0.92423], [-inf, -0.92423, 1.52319]]
     *   MASKED  + bias: [[1.42423431452001952, -inf, -0.67423431452001952],
     *                    [-inf, 0.07576568547998053, 1.0231883119115297]]
     *   weights softmax(MASKED): [[0.89075424853279, 0, 0.10924575146721],
     *                             [0, 0.27940344789786, 0.72059655210214]]
     * With ALiBi slope 0.25 (no causality: d_i = i + 1, distances
     * [[1, 0, 1], [2, 1, 0]]) MASKED becomes
     *   [[1.17423431452001952, -inf, -0.92423431452001952],
     *    [-inf, -0.17423431452001947, 1.0231883119115297]]
     * and row 1's weights 0.23193403421884, 0.76806596578116 (row 0's do
     * not change: both allowed keys move by -0.25); SCALED and CAPPED do
     * not change. */
    const double ni = -INFINITY;
    const double t2 = 0.9242343145200195, t1 = 1.5231883119115297;
    const double want[2][3][6] = {
        /* no ALiBi: SCALED, CAPPED, MASKED */
        {{1, ni, -1, ni, -1, 2},
         {t2, ni, -t2, ni, -t2, t1},
         {1.4242343145200196, ni, -0.6742343145200195, ni, 0.07576568547998053,
          1.0231883119115297}},
        {{1, ni, -1, ni, -1, 2},
         {t2, ni, -t2, ni, -t2, t1},
         {1.1742343145200196, ni, -0.9242343145200195, ni, -0.17423431452001947,
          1.0231883119115297}}};
    const double want_w[2][6] = {{0.8907542485327902, 0, 0.10924575146720993, 0,
                                  0.27940344789785637, 0.7205965521021437},
                                 {0.8907542485327901, 0, 0.10924575146720993, 0,
                                  0.23193403421883999, 0.7680659657811599}};
    const double quarter = 0.25;
    long failures = 0;
    for (int al = 0; al < 2; ++al)
        for (int stage = SDPA_LOGITS_SCALED; stage <= SDPA_LOGITS_MASKED;
             ++stage) {
            prob p;
            prob_make(&p, dt, 50, 1, 1, 1, 2, 3, 1, 1);
            tset(&p.q, 0, 0, 0, 0, 1.0);
            tset(&p.q, 0, 0, 1, 0, -2.0);
            static const double kk[3] = {1, 0.5, -1}, vv[3] = {1, 2, 4};
            static const double bb[6] = {0.5, -INFINITY, 0.25, 0, 1, -0.5};
            for (int64_t j = 0; j < 3; ++j) {
                tset(&p.k, 0, 0, j, 0, kk[j]);
                tset(&p.v, 0, 0, j, 0, vv[j]);
            }
            tbuf_make(&p.bias, dt, 1, 1, 2, 3, LAYOUT_BHTD, 0);
            tbuf_make(&p.mask, ELEM_U8, 1, 1, 2, 3, LAYOUT_BHTD, 0);
            for (int64_t i = 0; i < 2; ++i)
                for (int64_t j = 0; j < 3; ++j) {
                    tset(&p.bias, 0, 0, i, j, bb[i * 3 + j]);
                    tset(&p.mask, 0, 0, i, j, i == 1 && j == 0);
                }
            p.a.bias = p.bias.t;
            p.a.mask = p.mask.t;
            p.a.scale = 1.0;
            p.a.softcap = 2.0;
            if (al)
                tp_alibi(&p, &quarter);
            tp_outputs(&p, 1, 1, stage);
            ref_result r;
            assert_int_equal(ref_forward(&p.a, &r), 0);
            for (int e = 0; e < 6; ++e) {
                long double g = r.logits[e];
                double h = want[al][stage - 1][e];
                if (isinf(h) ? !(isinf(g) && g < 0) : !(fabsl(g - h) <= 1e-15L))
                    fail_msg("reference logits stage %d alibi %d [%d]: %.17Lg, "
                             "by hand %.17g",
                             stage, al, e, g, h);
                if (!(fabsl(r.weights[e] - want_w[al][e]) <= 1e-15L))
                    fail_msg("reference weight alibi %d [%d]: %.17Lg, by hand "
                             "%.17g",
                             al, e, r.weights[e], want_w[al][e]);
            }
            const tol t = tolerance(&p, &p.a, &r);
            ref_free(&r);
            /* The library against the hand values, element by element. */
            sdpa_ctx *ctx = tp_ctx(0);
            for (int ki = 0; ki < TEST_KERNELS; ++ki) {
                if (!tp_use_kernel(ctx, ki))
                    continue;
                for (int path = SDPA_PATH_AUTO; path <= SDPA_PATH_MATERIALISED;
                     ++path) {
                    tp_set(ctx, SDPA_OPT_PATH, path);
                    where w = {al ? "logits by hand, ALiBi" : "logits by hand",
                               dt, path, test_kernels[ki]};
                    tp_clear_outputs(&p);
                    int st = sdpa_forward(ctx, &p.a);
                    if (st != SDPA_OK) {
                        print_message("  logits by hand stage %d: %s: %s\n",
                                      stage, sdpa_status_string(st),
                                      sdpa_ctx_last_error(ctx));
                        failures++;
                        continue;
                    }
                    for (int e = 0; e < 6; ++e) {
                        double g = tget(&p.lg, 0, 0, e / 3, e % 3);
                        double h = want[al][stage - 1][e];
                        if (isinf(h) ? !(isinf(g) && g < 0)
                                     : !(fabs(g - h) <= t.logit)) {
                            mismatch(&w,
                                     stage == 1   ? "SCALED logits"
                                     : stage == 2 ? "CAPPED logits"
                                                  : "MASKED logits",
                                     0, 0, e / 3, e % 3, g, h, t.logit);
                            failures++;
                        }
                        g = tget(&p.w, 0, 0, e / 3, e % 3);
                        h = want_w[al][e];
                        if (h == 0 ? g != 0 : !(fabs(g - h) <= t.w)) {
                            mismatch(&w, "weights", 0, 0, e / 3, e % 3, g, h,
                                     t.w);
                            failures++;
                        }
                    }
                }
            }
            sdpa_ctx_destroy(ctx);
            char name[64];
            snprintf(name, sizeof name, "logits by hand, stage %d%s", stage,
                     al ? ", ALiBi" : "");
            check_case(name, &p, &k_default);
            tp_free(&p);
        }
    print_message("  %s: logits by hand, 3 stages x (ALiBi off, on): %ld "
                  "failed\n",
                  dt_name(dt), failures);
    assert_int_equal(failures, 0);
}

static void test_logits_forced_paths(void **state)
{
    const int dt = *(int *)*state;
    /* Logits without weights still need the materialised path: forced TILED
     * or DECODE refuse with SDPA_ERR_UNSUPPORTED (sdpa_forward and
     * sdpa_forward_workspace), every output untouched; AUTO and
     * MATERIALISED compute it. */
    prob p;
    prob_make(&p, dt, 60, 1, 2, 1, 1, 10, 4, 4);
    tp_sinks(&p, (const double[]){0.5, 1});
    tp_outputs(&p, 0, 1, SDPA_LOGITS_CAPPED);
    sdpa_ctx *ctx = tp_ctx(0);
    long failures = 0;
    for (int ki = 0; ki < TEST_KERNELS; ++ki) {
        if (!tp_use_kernel(ctx, ki))
            continue;
        for (int path = SDPA_PATH_TILED; path <= SDPA_PATH_DECODE; ++path) {
            tp_set(ctx, SDPA_OPT_PATH, path);
            tp_clear_outputs(&p);
            int st = sdpa_forward(ctx, &p.a);
            size_t bytes = 777;
            int sw = sdpa_forward_workspace(ctx, &p.a, &bytes);
            if (st != SDPA_ERR_UNSUPPORTED || sw != SDPA_ERR_UNSUPPORTED ||
                !tp_outputs_untouched(&p) || bytes != 777) {
                print_message("  %s logits with path %s kernel %s: %s, "
                              "workspace %s, outputs %s\n",
                              dt_name(dt), tp_path_name(path),
                              kernel_name(test_kernels[ki]),
                              sdpa_status_string(st), sdpa_status_string(sw),
                              tp_outputs_untouched(&p) ? "untouched"
                                                       : "WRITTEN");
                failures++;
            }
        }
    }
    sdpa_ctx_destroy(ctx);
    assert_int_equal(failures, 0);
    check_case("logits without weights", &p, &k_default);
    tp_free(&p);
}

/* ---- A 1.0 caller. --------------------------------------------------------
 */

static void test_struct_size_624(void **state)
{
    const int dt = *(int *)*state;
    /* 624 is 1.0's size: the 1.1 fields begin right after it (on LP64). */
    if (sizeof(void *) == 8)
        assert_int_equal(offsetof(sdpa_forward_args, window_left), 624);
    /* struct_size 624 with every 1.1 field set, invalid ones included (a
     * window without the flag, NaN slopes and sinks, a logits tensor with
     * stage 9): none of them may be read. Results are those of the call
     * without them; the logits buffer stays untouched. */
    prob p;
    prob_make(&p, dt, 70, 2, 2, 1, 5, 11, 6, 4);
    p.a.causal = SDPA_CAUSAL_TOP_LEFT;
    tp_outputs(&p, 1, 1, 0);
    tbuf_make(&p.lg, dt, 2, 2, 5, 11, LAYOUT_BHTD, 0);
    static const double nan2[2] = {NAN, NAN};
    p.a.window_left = 2;
    p.a.window_right = -7;
    p.a.alibi_slopes = nan2;
    p.a.sinks = nan2;
    p.a.logits = p.lg.t;
    p.a.logits_stage = 9;
    case_opts o = {0, 0, 1};
    check_case("struct_size 624, 1.1 fields set", &p, &o);

    /* The same from a heap block of exactly 624 bytes (under a sanitizer,
     * a read past it is reported). */
    unsigned char *block = malloc(624);
    assert_non_null(block);
    sdpa_forward_args a = p.a;
    a.struct_size = 624;
    memcpy(block, &a, 624);
    sdpa_ctx *ctx = tp_ctx(0);
    tp_clear_outputs(&p);
    int st = sdpa_forward(ctx, (const sdpa_forward_args *)(void *)block);
    if (st != SDPA_OK)
        print_message("  624-byte block: %s: %s\n", sdpa_status_string(st),
                      sdpa_ctx_last_error(ctx));
    assert_int_equal(st, SDPA_OK);
    assert_true(first_non_sentinel(p.lg.mem, p.lg.elems * p.lg.esize) < 0);
    sdpa_ctx_destroy(ctx);
    free(block);
    tp_free(&p);
}

/* ---- Random mixes. ------------------------------------------------------- */

static void test_random_mix(void **state)
{
    const int dt = *(int *)*state;
    static const int64_t hqs[] = {1, 2, 4, 6};
    static const int64_t blocks[] = {0, 0, 1, 7, 16};
    long n_window = 0, n_alibi = 0, n_sinks = 0, n_logits = 0, n_err = 0;
    const int count = 24;
    for (int c = 0; c < count; ++c) {
        rng r = {UINT64_C(0xC0FFEE) * (uint64_t)(c + 1) + (uint64_t)dt};
        const int64_t N = rng_int(&r, 1, 3), Hq = hqs[rng_int(&r, 0, 3)];
        int64_t divs[8], nd = 0;
        for (int64_t d = 1; d <= Hq; ++d)
            if (Hq % d == 0)
                divs[nd++] = d;
        const int64_t Hkv = divs[rng_int(&r, 0, nd - 1)];
        const int64_t Tq = rng_int(&r, 1, 20), Tk = rng_int(&r, 1, 50);
        prob p;
        prob_make(&p, dt, 100 + (uint64_t)c, N, Hq, Hkv, Tq, Tk,
                  rng_int(&r, 1, 16), rng_int(&r, 1, 16));
        p.a.causal = (int)rng_int(&r, 0, 2);
        if (rng_int(&r, 0, 9) < 7) {
            int64_t l = rng_int(&r, -1, Tk), rr = rng_int(&r, -1, Tk / 2);
            tp_window(&p, l, rr);
            n_window++;
        }
        if (rng_int(&r, 0, 1)) {
            double s[TP_MAX_H];
            for (int64_t h = 0; h < Hq; ++h)
                s[h] = rng_int(&r, 0, 1) ? slope_closed_form(Hq, 8.0, h)
                                         : rng_sym(&r, 0.3);
            tp_alibi(&p, s);
            n_alibi++;
        }
        if (rng_int(&r, 0, 1)) {
            double s[TP_MAX_H];
            for (int64_t h = 0; h < Hq; ++h)
                s[h] = rng_sym(&r, 3.0);
            tp_sinks(&p, s);
            n_sinks++;
        }
        if (rng_int(&r, 0, 2) == 0)
            tp_mask_random(&p, &r, 0.3);
        if (rng_int(&r, 0, 2) == 0)
            prob_bias_random(&p, &r, 0.1);
        if (rng_int(&r, 0, 1)) {
            int64_t lens[4];
            for (int64_t b = 0; b < N; ++b)
                lens[b] = rng_int(&r, 0, Tk);
            tp_kvlens(&p, lens);
        }
        if (rng_int(&r, 0, 3) == 0)
            p.a.softcap = 3.0;
        const int logits = rng_int(&r, 0, 1) ? (int)rng_int(&r, 1, 3) : 0;
        n_logits += logits != 0;
        tp_outputs(&p, logits != 0 || rng_int(&r, 0, 1), 1, logits);
        case_opts o = {(int)rng_int(&r, 0, 1), blocks[rng_int(&r, 0, 4)], 0};
        case_result cr = run_case("random mix", &p, &o);
        n_err += cr.expect_error;
        if (cr.failures)
            print_message("  random mix %d failed: N %lld Hq %lld Hkv %lld Tq "
                          "%lld Tk %lld causal %d window %d (%lld/%lld) "
                          "alibi %d sinks %d mask %d bias %d kv_lens %d "
                          "logits %d zero %d block_k %lld\n",
                          c, (long long)N, (long long)Hq, (long long)Hkv,
                          (long long)Tq, (long long)Tk, p.a.causal,
                          (p.a.flags & SDPA_FLAG_WINDOW) != 0,
                          (long long)p.a.window_left,
                          (long long)p.a.window_right, p.a.alibi_slopes != NULL,
                          p.a.sinks != NULL, p.a.mask.data != NULL,
                          p.a.bias.data != NULL, p.a.kv_lens != NULL, logits,
                          o.empty_zero, (long long)o.block_k);
        assert_int_equal(cr.failures, 0);
        tp_free(&p);
    }
    print_message("  %s: %d random mixes (window %ld, ALiBi %ld, sinks %ld, "
                  "logits %ld; %ld expecting FULLY_MASKED_ROW)\n",
                  dt_name(dt), count, n_window, n_alibi, n_sinks, n_logits,
                  n_err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TP_BOTH(test_window_causal_long),
        TP_BOTH(test_window_bottom_right_anchor),
        TP_BOTH(test_window_one_sided),
        TP_BOTH(test_window_empty_rows),
        TP_BOTH(test_validation),
        cmocka_unit_test(test_alibi_slopes_closed_form),
        cmocka_unit_test(test_alibi_slopes_errors),
        TP_BOTH(test_alibi_hand),
        TP_BOTH(test_alibi_random),
        TP_BOTH(test_sink_masked_row),
        TP_BOTH(test_sink_hand),
        TP_BOTH(test_sink_decode_chunks),
        TP_BOTH(test_logits_hand),
        TP_BOTH(test_logits_forced_paths),
        TP_BOTH(test_struct_size_624),
        TP_BOTH(test_random_mix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
