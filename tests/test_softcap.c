/*
 * The logit soft-cap s → c·tanh(s/c), accurate relative to the logit:
 *
 *   |computed − c·tanh(s/c)| <= 8·eps·min(|s|, c)
 *
 * (eps = FLT_EPSILON or DBL_EPSILON; c·tanh(s/c) from long double tanhl on
 * the dtype's s and the cap as the caller gives it), the bound
 * src/kernels/rows.h states, for caps from 0.5 to 1000 and |s| from 1e-6 to 1e4
 * and on to 2000·c (deep saturation), both signs, both dtypes, on every kernel
 * set this CPU runs (the others are named in the output as not tested).
 *
 *  - Through the public API on every path (MATERIALISED, TILED, DECODE,
 *    forced with SDPA_OPT_PATH): scale 1, Dk = 1, so a logit is a product
 *    q·k computed exactly, and the lse of a row with a single allowed key
 *    is that key's capped logit exactly (m + log 1). Two layouts:
 *      * Tk = 1, k = 1: s = q, one key per row (the kernels' scalar code);
 *      * Tk = 37, k_j = 2^((j mod 5) − 2), and a mask that allows key
 *        i mod 37 only in row i: the soft-cap runs over whole rows of 37
 *        with different values per lane, so the vector bodies, their lane
 *        blend and the scalar tails all produce allowed logits.
 *    ±inf logits give lse = ±c exactly, ±0 give 0.
 *  - The row kernels directly (when the static library is linked, whose
 *    internal symbols are reachable): rows of many lengths (vector bodies
 *    and scalar tails) of shuffled grid values, plus NaN → NaN, ±0 → ±0
 *    (sign kept), ±inf → ±c, subnormal logits.
 * The worst error seen is printed in units of eps·|s| per dtype, kernel set
 * and path.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the three headers above first */
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "sdpa.h"
#include "problem.h"
#include "testutil.h"

#ifdef SDPA_TEST_ROW_KERNELS
#include "kernels/cpu.h"
#include "kernels/rows.h"
#endif

/* Bound in units of eps·min(|s|, c). */
#define BOUND 8.0

/* From 0.5 to 1000. The reference uses the cap as given (a double): for
 * float, 0.7, 33.3 and 333.3 are rounded on the way in, and that rounding
 * must fit in the bound too. */
static const double caps[] = {0.5, 0.7, 0.75, 1,    1.5, 2,   3,   5,     7.5,
                              10,  20,  30,   33.3, 50,  100, 250, 333.3, 1000};
enum { CAPS = sizeof caps / sizeof caps[0] };

static double eps_of(int dtype)
{
    return dtype == SDPA_FLOAT32 ? (double)FLT_EPSILON : DBL_EPSILON;
}

/* v rounded to the dtype. */
static double to_dtype(double v, int dtype)
{
    return dtype == SDPA_FLOAT32 ? (double)(float)v : v;
}

/* The finite nonzero logits checked for cap c, rounded to the dtype, both
 * signs of each: |s| log-spaced over [1e-6, 1e4]; |s|/c evenly spread over
 * (0, 4]; the 200 neighbours in steps of eps·c/4, eps·c/2 and eps·c around
 * c/4, c/2 (the kernels' threshold) and c; |s|/c log-spaced over [4, 2000]
 * (saturation). Returns the count, GRID. */
enum { GRID = 2 * (1000 + 3000 + 3 * 200 + 200) };
static int make_grid(double c, int dtype, double *s)
{
    const double eps = eps_of(dtype);
    int n = 0;
    double mag[GRID / 2];
    int m = 0;
    for (int i = 0; i < 1000; i++)
        mag[m++] = pow(10.0, -6.0 + 10.0 * i / 999.0);
    for (int i = 1; i <= 3000; i++)
        mag[m++] = c * 4.0 * i / 3000.0;
    const double around[3] = {0.25, 0.5, 1.0};
    for (int a = 0; a < 3; a++)
        for (int k = -100; k < 100; k++)
            mag[m++] = c * around[a] * (1.0 + k * eps);
    for (int i = 0; i < 200; i++)
        mag[m++] = c * pow(10.0, log10(4.0) +
                                     (log10(2000.0) - log10(4.0)) * i / 199.0);
    for (int i = 0; i < m; i++) {
        double v = to_dtype(mag[i], dtype);
        s[n++] = v;
        s[n++] = -v;
    }
    return n;
}

/* c·tanh(s/c) in long double. */
static long double capped(double s, double c)
{
    return (long double)c * tanhl((long double)s / (long double)c);
}

/* Worst errors seen in one run, in units of eps·|s| and of eps·c, and the
 * number of results outside the bound. */
typedef struct worst {
    double rel, abs_c, at_s, at_c;
    long bad;
} worst;

/* Checks one result against the bound; records it in w (the first few
 * failures are printed; the test fails at its end if any was seen, after
 * printing the worst error). */
static long failures_printed;
static void check_one(worst *w, double got, double s, double c, int dtype,
                      const char *where)
{
    const double eps = eps_of(dtype);
    bool ok;
    if (isinf(s)) {
        ok = got == to_dtype(s > 0 ? c : -c, dtype); /* ±c in the dtype */
    } else if (s == 0) {
        ok = got == 0;
    } else {
        long double err = fabsl((long double)got - capped(s, c));
        double rel = (double)(err / ((long double)eps * fabsl((long double)s)));
        double abs_c = (double)(err / ((long double)eps * c));
        if (rel > w->rel) {
            w->rel = rel;
            w->at_s = s;
            w->at_c = c;
        }
        if (abs_c > w->abs_c)
            w->abs_c = abs_c;
        ok = rel <= BOUND && abs_c <= BOUND;
    }
    if (!ok) {
        w->bad++;
        if (failures_printed++ < 10)
            print_error("%s: s = %.9g, c = %g: got %.17g, want %.17Lg\n", where,
                        s, c, got, capped(s, c));
    }
}

static void print_worst(const char *what, const worst *w)
{
    print_message("softcap %s: worst %.3f eps·|s| (s = %.6g, c = %g), "
                  "%.3f eps·c%s\n",
                  what, w->rel, w->at_s, w->at_c, w->abs_c,
                  w->bad ? " -- OUTSIDE THE BOUND" : "");
    if (w->bad)
        print_error("softcap %s: %ld results outside %g·eps·min(|s|, c)\n",
                    what, w->bad, BOUND);
}

/* ---- Through the public API. ------------------------------------------ */

static const char *path_name(int path)
{
    return path == SDPA_PATH_MATERIALISED ? "materialised"
           : path == SDPA_PATH_TILED      ? "tiled"
                                          : "decode";
}

enum { TK_WIDE = 37 };

/* k_j of the wide layout: a power of 2, so q·k is exact. */
static double key_of(int64_t j, int64_t tk)
{
    return tk == 1 ? 1.0 : ldexp(1.0, (int)(j % 5) - 2);
}

/* One call on every path and kernel: rows hold the logits s[0..n) (the
 * grid, then ±inf and ±0), on Tk = tk keys. Merges the worst errors into
 * w[kernel index][path − 1]. */
static void api_run(sdpa_ctx *ctx, int dtype, double c, const double *s, int n,
                    int64_t tk, worst w[TEST_KERNELS][3])
{
    tbuf q, k, v, mask, out, lse;
    tbuf_make(&q, dtype, 1, 1, n, 1, LAYOUT_BHTD, 0);
    tbuf_make(&k, dtype, 1, 1, tk, 1, LAYOUT_BHTD, 0);
    tbuf_make(&v, dtype, 1, 1, tk, 1, LAYOUT_BHTD, 0);
    tbuf_make(&out, dtype, 1, 1, n, 1, LAYOUT_BHTD, 0);
    tbuf_make(&lse, dtype, 1, 1, n, 1, LAYOUT_BHTD, 0);
    for (int64_t j = 0; j < tk; j++) {
        tset(&k, 0, 0, j, 0, key_of(j, tk));
        tset(&v, 0, 0, j, 0, 1.0);
    }
    /* row i: q = s / k_(i mod tk), exact (a power of 2) */
    for (int i = 0; i < n; i++)
        tset(&q, 0, 0, i, 0, s[i] / key_of(i % tk, tk));
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    a.scale = 1.0;
    a.softcap = c;
    tp_views(&a, &q, &k, &v, NULL, NULL, &out, NULL, &lse, NULL);
    if (tk > 1) {
        tbuf_make(&mask, ELEM_U8, 1, 1, n, tk, LAYOUT_BHTD, 0);
        for (int i = 0; i < n; i++)
            for (int64_t j = 0; j < tk; j++)
                tset(&mask, 0, 0, i, j, j == i % tk ? 0 : 1);
        a.mask = mask.t;
    }
    for (int ki = 0; ki < TEST_KERNELS; ki++) {
        int ks = sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, test_kernels[ki]);
        if (ks == SDPA_ERR_UNSUPPORTED)
            continue; /* named once by the caller */
        assert_int_equal(ks, SDPA_OK);
        for (int path = SDPA_PATH_MATERIALISED; path <= SDPA_PATH_DECODE;
             path++) {
            assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_PATH, path),
                             SDPA_OK);
            char where[96];
            snprintf(where, sizeof where, "%s %s %s Tk=%d",
                     dtype == SDPA_FLOAT32 ? "f32" : "f64",
                     kernel_name(test_kernels[ki]), path_name(path), (int)tk);
            int st = sdpa_forward(ctx, &a);
            if (st != SDPA_OK)
                print_error("%s: %s: %s\n", where, sdpa_status_string(st),
                            sdpa_ctx_last_error(ctx));
            assert_int_equal(st, SDPA_OK);
            for (int i = 0; i < n; i++)
                check_one(&w[ki][path - 1], tget(&lse, 0, 0, i, 0), s[i], c,
                          dtype, where);
        }
    }
    tbuf_free_all((tbuf *[]){&q, &k, &v, &out, &lse, NULL});
    if (tk > 1)
        tbuf_free(&mask);
}

static void api_test(int dtype)
{
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    for (int ki = 0; ki < TEST_KERNELS; ki++)
        if (sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, test_kernels[ki]) ==
            SDPA_ERR_UNSUPPORTED)
            print_message("kernel %s: not supported by this CPU, not "
                          "tested\n",
                          kernel_name(test_kernels[ki]));
    static double s[GRID + 4];
    worst w[TEST_KERNELS][3];
    memset(w, 0, sizeof w);
    for (int ci = 0; ci < CAPS; ci++) {
        int n = make_grid(caps[ci], dtype, s);
        s[n++] = INFINITY;
        s[n++] = -INFINITY;
        s[n++] = 0.0;
        s[n++] = -0.0;
        api_run(ctx, dtype, caps[ci], s, n, 1, w);
        api_run(ctx, dtype, caps[ci], s, n, TK_WIDE, w);
    }
    long bad = 0;
    for (int ki = 0; ki < TEST_KERNELS; ki++) {
        if (sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, test_kernels[ki]) ==
            SDPA_ERR_UNSUPPORTED)
            continue;
        for (int p = 0; p < 3; p++) {
            char what[64];
            snprintf(what, sizeof what, "%s %-8s %-12s",
                     dtype == SDPA_FLOAT32 ? "f32" : "f64",
                     kernel_name(test_kernels[ki]), path_name(p + 1));
            print_worst(what, &w[ki][p]);
            bad += w[ki][p].bad;
        }
    }
    assert_int_equal(bad, 0);
    sdpa_ctx_destroy(ctx);
}

static void test_api(void **state)
{
    api_test(*(int *)*state);
}

/* ---- The row kernels directly (static library only). ----------------- */
#ifdef SDPA_TEST_ROW_KERNELS

#include "kernel_sets.h"

/* Row lengths: every length up to 40 (each tail length of every vector
 * width, with and without a body), and some long ones. */
static const int lengths[] = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10,  11,
                              12, 13, 14, 15, 16, 17, 18, 19, 20, 21,  22,
                              23, 24, 25, 26, 27, 28, 29, 30, 31, 32,  33,
                              34, 35, 36, 37, 38, 39, 40, 61, 64, 127, 1037};
enum { LENGTHS = sizeof lengths / sizeof lengths[0] };

static uint64_t shuffle_state = 0x2545F4914F6CDD1Du;
static void shuffle(double *s, int n)
{
    for (int i = n - 1; i > 0; i--) {
        shuffle_state ^= shuffle_state << 13;
        shuffle_state ^= shuffle_state >> 7;
        shuffle_state ^= shuffle_state << 17;
        int j = (int)(shuffle_state % (uint64_t)(i + 1));
        double t = s[i];
        s[i] = s[j];
        s[j] = t;
    }
}

/* One body for both dtypes: kernel set k on the grid of cap c, cut into
 * rows of every length above; then the special values. */
#define DEFINE_KERNEL_CHECK(sfx, T, DTYPE)                                     \
    static void kernel_check_##sfx(int k, double c, const double *s, int n,    \
                                   worst *w)                                   \
    {                                                                          \
        const sdpa_row_kernels_##sfx *rk = kernel_sets[k].sfx;                 \
        static T x[GRID];                                                      \
        char where[64];                                                        \
        snprintf(where, sizeof where, "%s row kernel %s", #sfx,                \
                 kernel_sets[k].name);                                         \
        for (int li = 0; li < LENGTHS; li++) {                                 \
            int len = lengths[li];                                             \
            for (int at = 0; at + len <= n; at += len) {                       \
                for (int j = 0; j < len; j++)                                  \
                    x[j] = (T)s[at + j];                                       \
                rk->softcap(x, len, (T)c);                                     \
                for (int j = 0; j < len; j++)                                  \
                    check_one(w, (double)x[j], s[at + j], c, DTYPE, where);    \
            }                                                                  \
        }                                                                      \
        /* specials at every position of a row of 37 */                        \
        const T tiny =                                                         \
            (T)(DTYPE == SDPA_FLOAT32 ? FLT_TRUE_MIN : DBL_TRUE_MIN);          \
        const T special[] = {(T)NAN,                                           \
                             (T)INFINITY,                                      \
                             -(T)INFINITY,                                     \
                             (T)0.0,                                           \
                             -(T)0.0,                                          \
                             tiny,                                             \
                             -tiny,                                            \
                             tiny * 1024,                                      \
                             (T)(DTYPE == SDPA_FLOAT32 ? FLT_MIN : DBL_MIN),   \
                             (T)(DTYPE == SDPA_FLOAT32 ? FLT_MAX : DBL_MAX),   \
                             -(T)(DTYPE == SDPA_FLOAT32 ? FLT_MAX : DBL_MAX)}; \
        const int specials = (int)(sizeof special / sizeof special[0]);        \
        for (int si = 0; si < specials; si++)                                  \
            for (int pos = 0; pos < 37; pos++) {                               \
                T row[37];                                                     \
                for (int j = 0; j < 37; j++)                                   \
                    row[j] = (T)s[j];                                          \
                row[pos] = special[si];                                        \
                rk->softcap(row, 37, (T)c);                                    \
                T got = row[pos], v = special[si];                             \
                if (v != v || v == 0 || fabs((double)v) > 1e300 ||             \
                    (DTYPE == SDPA_FLOAT32 && fabs((double)v) > 1e38)) {       \
                    /* NaN, ±0: kept (with the sign); ±inf, ±MAX: ±c */    \
                    bool ok = v != v ? got != got                              \
                              : v == 0                                         \
                                  ? got == 0 && !signbit(got) == !signbit(v)   \
                                  : got == (v > 0 ? (T)c : -(T)c);             \
                    if (!ok) {                                                 \
                        w->bad++;                                              \
                        if (failures_printed++ < 10)                           \
                            print_error("%s: s = %g, c = %g: got %g\n", where, \
                                        (double)v, c, (double)got);            \
                    }                                                          \
                } else {                                                       \
                    check_one(w, (double)got, (double)v, c, DTYPE, where);     \
                }                                                              \
                for (int j = 0; j < 37; j++) /* neighbours unaffected */       \
                    if (j != pos)                                              \
                        check_one(w, (double)row[j], s[j], c, DTYPE, where);   \
            }                                                                  \
    }

DEFINE_KERNEL_CHECK(f32, float, SDPA_FLOAT32)
DEFINE_KERNEL_CHECK(f64, double, SDPA_FLOAT64)

static void kernels_test(int dtype)
{
    static double s[GRID];
    long bad = 0;
    for (int k = 0; k < KERNEL_SETS; k++) {
        if (!runnable(k))
            continue;
        worst w = {0, 0, 0, 0, 0};
        for (int ci = 0; ci < CAPS; ci++) {
            int n = make_grid(caps[ci], dtype, s);
            shuffle(s, n);
            if (dtype == SDPA_FLOAT32)
                kernel_check_f32(k, caps[ci], s, n, &w);
            else
                kernel_check_f64(k, caps[ci], s, n, &w);
        }
        char what[64];
        snprintf(what, sizeof what, "%s row kernel %-8s",
                 dtype == SDPA_FLOAT32 ? "f32" : "f64", kernel_sets[k].name);
        print_worst(what, &w);
        bad += w.bad;
    }
    assert_int_equal(bad, 0);
}

static void row_kernels(void **state)
{
    kernels_test(*(int *)*state);
}
#endif /* SDPA_TEST_ROW_KERNELS */

int main(void)
{
    const struct CMUnitTest tests[] = {
        TP_BOTH_NAMED(test_api, NULL, NULL),
#ifdef SDPA_TEST_ROW_KERNELS
        TP_BOTH_AS("test_kernels", row_kernels, NULL, NULL),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
