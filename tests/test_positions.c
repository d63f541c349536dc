/*
 * Positional encodings (include/sdpa.h, 1.1): sdpa_sinusoidal_table and
 * sdpa_rope_apply, in float and double, against long-double evaluations of
 * the header's formulas:
 *
 *  - the sinusoidal table against sin / cos of pos / base^(2r/d) (odd d,
 *    offsets, bases, more pairs than one chunk), and its first row
 *    (0, 1, 0, 1, ...) exactly;
 *  - the statement of the textbook unit "32.2 Scaled dot-product
 *    attention" (docs/SEMANTICS.md, "Sources"): attention without positions is
 *    permutation-equivariant (permuting the tokens permutes the outputs,
 *    through sdpa_forward), and with the table added it is not;
 *  - RoPE in both styles against a direct long-double rotation (sinl,
 *    cosl), strided views (padding never touched), positions given or t,
 *    rotary_dim < D (the rest bitwise untouched), the pairs' norms kept,
 *    and RoPE's point: <rope(q, m), rope(k, n)> depends on m − n only;
 *  - positions up to 10^6 in float64 within the bound src/layer/positions.c
 *    states, (2.5 |p| + 8) · 2^-53 · ‖pair‖ (the measured maximum is
 *    printed);
 *  - every error: its status, and nothing written.
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

#include "sdpa.h"
#include "testutil.h"

static int g_float = SDPA_FLOAT32;
static int g_double = SDPA_FLOAT64;

static const char *dt_name(int dtype)
{
    return dtype == SDPA_FLOAT32 ? "float" : "double";
}

/* The bound src/layer/positions.c states for an angle at position p (relative
 * to the pair's norm, or absolute for the table's values), plus the
 * rounding to float in a float32 call. */
static long double position_bound(int dtype, long double p)
{
    long double b = (2.5L * fabsl(p) + 8.0L) * (long double)DBL_EPSILON / 2;
    if (dtype == SDPA_FLOAT32)
        b += (long double)FLT_EPSILON;
    return b;
}

/* The largest error of a rotated component relative to its pair's norm
 * that check_rope has seen. */
static long double g_worst_relative;

static long double frequency(long double base, int64_t r, int64_t d)
{
    return powl(base, -(long double)(2 * r) / (long double)d);
}

/* ---- The sinusoidal table. -------------------------------------------- */

static void test_sinusoidal_closed_form(void **state)
{
    const int dtype = **(int **)state;
    const size_t es = dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
    const int64_t dims[] = {1, 2, 3, 7, 16, 33, 130, 257};
    const int64_t offsets[] = {0, 3, -4, 1000, 999990};
    const double bases[] = {0, 10000, 500, 1e6};
    long double worst = 0;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
        for (size_t oi = 0; oi < sizeof offsets / sizeof offsets[0]; oi++)
            for (size_t bi = 0; bi < sizeof bases / sizeof bases[0]; bi++) {
                const int64_t d = dims[di], tokens = 6;
                const long double base = bases[bi] == 0 ? 10000 : bases[bi];
                size_t bytes = (size_t)(tokens * d) * es;
                unsigned char *table = malloc(bytes + 64);
                assert_non_null(table);
                fill_sentinel(table, bytes + 64);
                assert_int_equal(sdpa_sinusoidal_table(dtype, tokens, d,
                                                       offsets[oi], bases[bi],
                                                       table),
                                 SDPA_OK);
                /* nothing past the table */
                assert_int_equal(first_non_sentinel(table + bytes, 64), -1);
                for (int64_t t = 0; t < tokens; t++) {
                    const long double pos = (long double)(offsets[oi] + t);
                    for (int64_t c = 0; c < d; c++) {
                        long double angle = pos * frequency(base, c / 2, d);
                        long double want = c % 2 ? cosl(angle) : sinl(angle);
                        long double got =
                            dtype == SDPA_FLOAT32
                                ? (long double)((float *)table)[t * d + c]
                                : (long double)((double *)table)[t * d + c];
                        long double err = fabsl(got - want);
                        long double bound = position_bound(dtype, pos);
                        if (err > bound)
                            fail_msg("%s d=%lld offset=%lld base=%g: "
                                     "table[%lld, %lld] = %.17Lg, want "
                                     "%.17Lg (bound %.3Lg)",
                                     dt_name(dtype), (long long)d,
                                     (long long)offsets[oi], bases[bi],
                                     (long long)t, (long long)c, got, want,
                                     bound);
                        if (err / bound > worst)
                            worst = err / bound;
                    }
                }
                /* position 0: sin 0 = 0 and cos 0 = 1 exactly */
                if (offsets[oi] == 0)
                    for (int64_t c = 0; c < d; c++) {
                        double v = dtype == SDPA_FLOAT32
                                       ? (double)((float *)table)[c]
                                       : ((double *)table)[c];
                        assert_true(v == (c % 2 ? 1.0 : 0.0));
                    }
                free(table);
            }
    print_message("  %s: largest error / bound %.3Lg\n", dt_name(dtype), worst);
}

/* The textbook's example, spelled out: d = 4, position 1: sin 1, cos 1,
 * sin 0.01, cos 0.01 (10000^(2/4) = 100). */
static void test_sinusoidal_hand(void **state)
{
    (void)state;
    double t[2 * 4];
    assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT64, 2, 4, 0, 0, t),
                     SDPA_OK);
    const double want[8] = {0,        1,        0,         1,
                            sin(1.0), cos(1.0), sin(0.01), cos(0.01)};
    for (int i = 0; i < 8; i++)
        assert_true(fabs(t[i] - want[i]) <= 2 * DBL_EPSILON);
}

/* Self-attention with Q = K = V = the token rows: permuting the tokens
 * permutes the output rows (attention is permutation-equivariant); with
 * the sinusoidal table added first it does not. */
static void attend_self(sdpa_ctx *ctx, const double *x, int64_t t, int64_t d,
                        double *out)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT64;
    a.q = sdpa_tensor_bhtd((void *)(uintptr_t)x, 1, 1, t, d);
    a.k = a.q;
    a.v = a.q;
    a.out = sdpa_tensor_bhtd(out, 1, 1, t, d);
    assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
}

static void test_permutation_equivariance(void **state)
{
    (void)state;
    enum { T = 7, D = 8 };
    const int perm[T] = {3, 0, 6, 1, 5, 2, 4};
    double x[T * D], px[T * D], table[T * D], out[T * D], pout[T * D];
    rng r = {42};
    for (int i = 0; i < T * D; i++)
        x[i] = rng_sym(&r, 1.0);
    sdpa_ctx *ctx;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT64, T, D, 0, 0, table),
                     SDPA_OK);
    for (int with_positions = 0; with_positions < 2; with_positions++) {
        double xt[T * D], pxt[T * D];
        for (int t = 0; t < T; t++)
            for (int c = 0; c < D; c++) {
                px[t * D + c] = x[perm[t] * D + c];
                /* the permuted sequence: token perm[t] now at position t */
                xt[t * D + c] =
                    x[t * D + c] + with_positions * table[t * D + c];
                pxt[t * D + c] =
                    px[t * D + c] + with_positions * table[t * D + c];
            }
        attend_self(ctx, xt, T, D, out);
        attend_self(ctx, pxt, T, D, pout);
        double largest = 0;
        for (int t = 0; t < T; t++)
            for (int c = 0; c < D; c++) {
                double diff = fabs(pout[t * D + c] - out[perm[t] * D + c]);
                largest = diff > largest ? diff : largest;
            }
        print_message("  %s positions: max |f(Px) - P f(x)| = %.3g\n",
                      with_positions ? "with" : "without", largest);
        if (with_positions)
            assert_true(largest > 1e-2); /* the order now matters */
        else
            assert_true(largest <= 1e-14); /* equivariant */
    }
    sdpa_ctx_destroy(ctx);
}

/* ---- RoPE. ------------------------------------------------------------- */

/* The rotation of one row's pairs by position p, in long double. */
static void rope_reference(long double *row, int64_t d, int64_t rd, int style,
                           long double base, long double p)
{
    for (int64_t r = 0; r < rd / 2; r++) {
        long double angle = p * frequency(base, r, rd);
        int64_t a = style == SDPA_ROPE_HALF ? r : 2 * r;
        int64_t b = style == SDPA_ROPE_HALF ? r + rd / 2 : 2 * r + 1;
        long double xa = row[a], xb = row[b];
        row[a] = xa * cosl(angle) - xb * sinl(angle);
        row[b] = xa * sinl(angle) + xb * cosl(angle);
    }
    (void)d;
}

/* Runs sdpa_rope_apply on a random x (layout, padding) and compares every
 * element with the long-double rotation: rotated components within the
 * bound times their pair's norm, the rest (beyond rotary_dim) and the
 * padding bitwise untouched. Returns the largest error / bound. */
static long double check_rope(int dtype, int64_t n, int64_t h, int64_t t,
                              int64_t d, int64_t rotary_dim, int style,
                              double base, const int64_t *positions, int layout,
                              int64_t pad, rng *r, double amp)
{
    tbuf x;
    tbuf_make(&x, dtype, n, h, t, d, layout, pad);
    tbuf_fill_random(&x, r, amp);
    const size_t bytes = x.elems * x.esize;
    unsigned char *before = malloc(bytes);
    assert_non_null(before);
    memcpy(before, x.mem, bytes);
    unsigned char *logical = tbuf_logical_map(&x);
    assert_int_equal(
        sdpa_rope_apply(dtype, x.t, positions, style, base, rotary_dim),
        SDPA_OK);
    const int64_t rd = rotary_dim ? rotary_dim : d;
    const long double lbase = base == 0 ? 10000 : base;
    long double worst = 0;
    long double *row = malloc((size_t)d * sizeof *row);
    assert_non_null(row);
    for (int64_t b = 0; b < n; b++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t i = 0; i < t; i++) {
                int64_t p = positions ? positions[b * t + i] : i;
                for (int64_t c = 0; c < d; c++) {
                    int64_t o = toff(&x.t, b, hh, i, c);
                    row[c] = dtype == SDPA_FLOAT32
                                 ? (long double)((float *)(void *)before)[o]
                                 : (long double)((double *)(void *)before)[o];
                }
                rope_reference(row, d, rd, style, lbase, (long double)p);
                for (int64_t c = 0; c < d; c++) {
                    int64_t o = toff(&x.t, b, hh, i, c);
                    long double got = (long double)tget(&x, b, hh, i, c);
                    if (c >= rd) { /* untouched, bit for bit */
                        assert_memory_equal((char *)x.mem + (size_t)o * x.esize,
                                            before + (size_t)o * x.esize,
                                            x.esize);
                        continue;
                    }
                    /* the pair's norm (rotation keeps it) */
                    int64_t mate = style == SDPA_ROPE_HALF
                                       ? (c < rd / 2 ? c + rd / 2 : c - rd / 2)
                                       : (c ^ 1);
                    long double norm = hypotl(row[c], row[mate]);
                    long double bound =
                        position_bound(dtype, (long double)p) * norm + LDBL_MIN;
                    long double err = fabsl(got - row[c]);
                    if (err > bound)
                        fail_msg("%s style %d: x[%lld,%lld,%lld,%lld] at "
                                 "position %lld = %.17Lg, want %.17Lg (error "
                                 "%.3Lg, bound %.3Lg)",
                                 dt_name(dtype), style, (long long)b,
                                 (long long)hh, (long long)i, (long long)c,
                                 (long long)p, got, row[c], err, bound);
                    if (err / bound > worst)
                        worst = err / bound;
                    if (norm > 0 && err / norm > g_worst_relative)
                        g_worst_relative = err / norm;
                }
            }
    /* padding between rows: never written */
    for (size_t e = 0; e < x.elems; e++)
        if (!logical[e])
            assert_memory_equal((char *)x.mem + e * x.esize,
                                before + e * x.esize, x.esize);
    free(row);
    free(logical);
    free(before);
    tbuf_free(&x);
    return worst;
}

static void test_rope_reference(void **state)
{
    const int dtype = **(int **)state;
    rng r = {7 + (uint64_t)dtype};
    long double worst = 0;
    for (int style = SDPA_ROPE_HALF; style <= SDPA_ROPE_INTERLEAVED; style++)
        for (int iter = 0; iter < 60; iter++) {
            int64_t n = rng_int(&r, 1, 3), h = rng_int(&r, 1, 4);
            int64_t t = rng_int(&r, 1, 9), d = 2 * rng_int(&r, 1, 80);
            if (iter % 3 == 0)
                d += 1; /* odd D: only rotary_dim < D */
            int64_t rd = iter % 4 == 1 ? 0 : 2 * rng_int(&r, 1, d / 2);
            if (d % 2 && rd == 0)
                rd = d - 1;
            const double bases[] = {0, 10000, 500000, 100};
            double base = bases[rng_int(&r, 0, 3)];
            int64_t *pos = NULL;
            if (iter % 2) {
                pos = malloc((size_t)(n * t) * sizeof *pos);
                assert_non_null(pos);
                for (int64_t i = 0; i < n * t; i++)
                    pos[i] = rng_int(&r, -50, 5000);
            }
            long double w = check_rope(dtype, n, h, t, d, rd, style, base, pos,
                                       iter % 2 ? LAYOUT_BTHD : LAYOUT_BHTD,
                                       rng_int(&r, 0, 3), &r,
                                       rng_int(&r, 0, 1) ? 1.0 : 1000.0);
            worst = w > worst ? w : worst;
            free(pos);
        }
    print_message("  %s: largest error / bound %.3Lg\n", dt_name(dtype), worst);
}

/* A hand case: D = 4, position 1, base 10000: frequencies 1 and 0.01. */
static void test_rope_hand(void **state)
{
    (void)state;
    double half[4] = {1, 2, 3, 4}, inter[4] = {1, 2, 3, 4};
    int64_t p = 1;
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64,
                                     sdpa_tensor_bhtd(half, 1, 1, 1, 4), &p,
                                     SDPA_ROPE_HALF, 0, 0),
                     SDPA_OK);
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64,
                                     sdpa_tensor_bhtd(inter, 1, 1, 1, 4), &p,
                                     SDPA_ROPE_INTERLEAVED, 0, 0),
                     SDPA_OK);
    /* half-split: pairs (0, 2) by 1 rad and (1, 3) by 0.01 rad */
    const double c1 = cos(1.0), s1 = sin(1.0), c2 = cos(0.01), s2 = sin(0.01);
    const double want_half[4] = {1 * c1 - 3 * s1, 2 * c2 - 4 * s2,
                                 1 * s1 + 3 * c1, 2 * s2 + 4 * c2};
    /* interleaved: pairs (0, 1) by 1 rad and (2, 3) by 0.01 rad */
    const double want_inter[4] = {1 * c1 - 2 * s1, 1 * s1 + 2 * c1,
                                  3 * c2 - 4 * s2, 3 * s2 + 4 * c2};
    for (int i = 0; i < 4; i++) {
        assert_true(fabs(half[i] - want_half[i]) <= 8 * DBL_EPSILON);
        assert_true(fabs(inter[i] - want_inter[i]) <= 8 * DBL_EPSILON);
    }
}

/* Positions up to 10^6 in float64: every component within the stated
 * bound of the long-double rotation (the measured worst is printed), at
 * D = 128 (64 frequencies, one chunk) and D = 256 (two). */
static void test_rope_large_positions(void **state)
{
    (void)state;
    rng r = {1000000};
    long double worst = 0;
    g_worst_relative = 0;
    for (int style = SDPA_ROPE_HALF; style <= SDPA_ROPE_INTERLEAVED; style++)
        for (int64_t d = 128; d <= 256; d *= 2) {
            enum { N = 2, T = 64 };
            int64_t pos[N * T];
            for (int i = 0; i < N * T; i++)
                pos[i] = i < 4 ? 1000000 - i : rng_int(&r, 0, 1000000);
            const double bases[] = {10000, 500000};
            for (int bi = 0; bi < 2; bi++) {
                long double w =
                    check_rope(SDPA_FLOAT64, N, 2, T, d, 0, style, bases[bi],
                               pos, LAYOUT_BTHD, 0, &r, 1.0);
                worst = w > worst ? w : worst;
            }
        }
    print_message("  float64, positions <= 1e6: largest error %.3Lg x |pair| "
                  "(bound at 1e6: %.3Lg x |pair|); largest error / bound at "
                  "its position %.3Lg\n",
                  g_worst_relative, position_bound(SDPA_FLOAT64, 1e6L), worst);
}

/* Rotations keep each pair's norm, and RoPE makes the product of a rotated
 * query and key depend on their distance only: <R(m) q, R(n) k> is the
 * same for (m, n) = (3, 1), (10, 8) and (1002, 1000). */
static void test_rope_norms_and_relative(void **state)
{
    const int dtype = **(int **)state;
    const double tol = dtype == SDPA_FLOAT32 ? 1e-5 : 1e-12;
    enum { D = 16 };
    rng r = {99};
    double q0[D], k0[D];
    for (int i = 0; i < D; i++) {
        q0[i] = rng_sym(&r, 1);
        k0[i] = rng_sym(&r, 1);
    }
    const int64_t pairs[3][2] = {{3, 1}, {10, 8}, {1002, 1000}};
    for (int style = SDPA_ROPE_HALF; style <= SDPA_ROPE_INTERLEAVED; style++) {
        double dots[3];
        for (int c = 0; c < 3; c++) {
            tbuf q, k;
            tbuf_make(&q, dtype, 1, 1, 1, D, LAYOUT_BHTD, 0);
            tbuf_make(&k, dtype, 1, 1, 1, D, LAYOUT_BHTD, 0);
            for (int i = 0; i < D; i++) {
                tset(&q, 0, 0, 0, i, q0[i]);
                tset(&k, 0, 0, 0, i, k0[i]);
            }
            assert_int_equal(
                sdpa_rope_apply(dtype, q.t, &pairs[c][0], style, 0, 0),
                SDPA_OK);
            assert_int_equal(
                sdpa_rope_apply(dtype, k.t, &pairs[c][1], style, 0, 0),
                SDPA_OK);
            dots[c] = 0;
            for (int i = 0; i < D; i++)
                dots[c] += tget(&q, 0, 0, 0, i) * tget(&k, 0, 0, 0, i);
            for (int pr = 0; pr < D / 2; pr++) {
                int a = style == SDPA_ROPE_HALF ? pr : 2 * pr;
                int b = style == SDPA_ROPE_HALF ? pr + D / 2 : 2 * pr + 1;
                double before = hypot(q0[a], q0[b]);
                double after =
                    hypot(tget(&q, 0, 0, 0, a), tget(&q, 0, 0, 0, b));
                assert_true(fabs(after - before) <= tol * (1 + before));
            }
            tbuf_free(&q);
            tbuf_free(&k);
        }
        assert_true(fabs(dots[1] - dots[0]) <= 4 * tol);
        assert_true(fabs(dots[2] - dots[0]) <= 4 * tol);
    }
}

/* ---- Errors: the status, and nothing written. ------------------------- */

static void test_errors(void **state)
{
    (void)state;
    double buf[64];
    fill_sentinel(buf, sizeof buf);
    /* the table */
    assert_int_equal(sdpa_sinusoidal_table(0, 2, 4, 0, 0, buf),
                     SDPA_ERR_BAD_DTYPE);
    assert_int_equal(sdpa_sinusoidal_table(3, 2, 4, 0, 0, buf),
                     SDPA_ERR_BAD_DTYPE);
    assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT64, 0, 4, 0, 0, buf),
                     SDPA_ERR_BAD_DIM);
    assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT64, 2, -1, 0, 0, buf),
                     SDPA_ERR_BAD_DIM);
    assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT32, 2, 4, 0, 0, NULL),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT64, 2, 4, 0, -1, buf),
                     SDPA_ERR_BAD_SCALE);
    assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT64, 2, 4, 0, NAN, buf),
                     SDPA_ERR_BAD_SCALE);
    assert_int_equal(
        sdpa_sinusoidal_table(SDPA_FLOAT64, 2, 4, 0, INFINITY, buf),
        SDPA_ERR_BAD_SCALE);
    /* A base below 1 has frequencies above 1: a subnormal one overflowed
     * them to inf, a tiny normal one (1e-300, d 64) overflowed the angle
     * of a position near 2^62 to inf, and both gave NaN with SDPA_OK
     * (fuzzer findings). 1 is the smallest base accepted. */
    const double small_bases[] = {5e-324, DBL_MIN, 1e-300, 0.5,
                                  nextafter(1.0, 0.0)};
    for (size_t i = 0; i < sizeof small_bases / sizeof small_bases[0]; i++)
        assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT64, 2, 4,
                                               INT64_C(1) << 62, small_bases[i],
                                               buf),
                         SDPA_ERR_BAD_SCALE);
    /* base 1: every frequency is 1, and the largest positions stay
     * finite: sin and cos of the position itself */
    double base_one[2 * 64];
    assert_int_equal(sdpa_sinusoidal_table(SDPA_FLOAT64, 2, 64, INT64_MAX - 1,
                                           1.0, base_one),
                     SDPA_OK);
    for (int t = 0; t < 2; t++)
        for (int c = 0; c < 64; c++) {
            long double pos = (long double)(INT64_MAX - 1 + (int64_t)t);
            long double ref = c % 2 ? cosl((double)pos) : sinl((double)pos);
            assert_true(fabsl((long double)base_one[t * 64 + c] - ref) <=
                        0x1p-52L);
        }
    assert_int_equal(
        sdpa_sinusoidal_table(SDPA_FLOAT64, INT64_MAX / 2, 4, 0, 0, buf),
        SDPA_ERR_OVERFLOW);
    assert_int_equal(
        sdpa_sinusoidal_table(SDPA_FLOAT64, 2, 4, INT64_MAX, 0, buf),
        SDPA_ERR_OVERFLOW);
    assert_int_equal(first_non_sentinel(buf, sizeof buf), -1);
    /* the last position representable: fine */
    assert_int_equal(
        sdpa_sinusoidal_table(SDPA_FLOAT64, 2, 4, INT64_MAX - 1, 0, buf),
        SDPA_OK);

    /* RoPE */
    fill_sentinel(buf, sizeof buf);
    const sdpa_tensor x = sdpa_tensor_bhtd(buf, 1, 2, 2, 8);
    const int64_t pos[2] = {0, 1};
    const int R = SDPA_ROPE_HALF;
    assert_int_equal(sdpa_rope_apply(0, x, pos, R, 0, 0), SDPA_ERR_BAD_DTYPE);
    sdpa_tensor bad = x;
    bad.data = NULL;
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, bad, pos, R, 0, 0),
                     SDPA_ERR_NULL_POINTER);
    for (int d = 0; d < 4; d++) {
        bad = x;
        bad.shape[d] = d == 2 ? -3 : 0;
        assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, bad, pos, R, 0, 0),
                         SDPA_ERR_BAD_DIM);
    }
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, x, pos, 0, 0, 0),
                     SDPA_ERR_BAD_OPTION_VALUE);
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, x, pos, 3, 0, 0),
                     SDPA_ERR_BAD_OPTION_VALUE);
    const int64_t bad_rd[] = {-2, 3, 10, 7};
    for (int i = 0; i < 4; i++)
        assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, x, pos, R, 0, bad_rd[i]),
                         SDPA_ERR_BAD_OPTION_VALUE);
    bad = sdpa_tensor_bhtd(buf, 1, 2, 2, 7); /* odd D, rotary_dim 0 = D */
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, bad, pos, R, 0, 0),
                     SDPA_ERR_BAD_OPTION_VALUE);
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, x, pos, R, -1, 0),
                     SDPA_ERR_BAD_SCALE);
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, x, pos, R, NAN, 0),
                     SDPA_ERR_BAD_SCALE);
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, x, pos, R, 5e-324, 0),
                     SDPA_ERR_BAD_SCALE);
    {
        /* the fuzzer's case: base 1e-300, d 64, a position near 2^62 made
         * the angle inf and the row NaN with SDPA_OK; any base below 1 is
         * refused and the row left as it was */
        double row[64], was[64];
        for (int c = 0; c < 64; c++)
            row[c] = was[c] = 1.0 + c;
        sdpa_tensor x64 = sdpa_tensor_bhtd(row, 1, 1, 1, 64);
        const int64_t far = INT64_C(1) << 62;
        const double below_one[] = {1e-300, DBL_MIN, 0.5, nextafter(1.0, 0.0)};
        for (int i = 0; i < 4; i++) {
            assert_int_equal(
                sdpa_rope_apply(SDPA_FLOAT64, x64, &far, R, below_one[i], 0),
                SDPA_ERR_BAD_SCALE);
            assert_memory_equal(row, was, sizeof row);
        }
        /* base 1 rotates every pair by the position itself: finite, and
         * each pair keeps its norm */
        assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, x64, &far, R, 1.0, 0),
                         SDPA_OK);
        for (int r = 0; r < 32; r++) {
            long double n0 = hypotl(was[r], was[r + 32]);
            long double n1 = hypotl(row[r], row[r + 32]);
            assert_true(isfinite(row[r]) && isfinite(row[r + 32]));
            assert_true(fabsl(n1 - n0) <= 0x1p-50L * n0);
        }
    }
    bad = x;
    bad.stride[1] = -16;
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, bad, pos, R, 0, 0),
                     SDPA_ERR_BAD_STRIDE);
    bad = x;
    bad.stride[3] = 2;
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, bad, pos, R, 0, 0),
                     SDPA_ERR_BAD_STRIDE);
    bad = x;
    bad.stride[1] = 0; /* both heads one row: rotated twice */
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, bad, pos, R, 0, 0),
                     SDPA_ERR_BAD_STRIDE);
    bad = x;
    bad.stride[2] = 4; /* rows overlap */
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, bad, pos, R, 0, 0),
                     SDPA_ERR_BAD_STRIDE);
    bad = x;
    bad.stride[0] = INT64_MAX / 2;
    bad.shape[0] = 3;
    assert_int_equal(sdpa_rope_apply(SDPA_FLOAT64, bad, NULL, R, 0, 0),
                     SDPA_ERR_OVERFLOW);
    assert_int_equal(first_non_sentinel(buf, sizeof buf), -1);
}

#define BOTH(fn)                                                               \
    cmocka_unit_test_prestate(fn, &g_float),                                   \
        cmocka_unit_test_prestate(fn, &g_double)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_sinusoidal_closed_form),
        cmocka_unit_test(test_sinusoidal_hand),
        cmocka_unit_test(test_permutation_equivariance),
        BOTH(test_rope_reference),
        cmocka_unit_test(test_rope_hand),
        cmocka_unit_test(test_rope_large_positions),
        BOTH(test_rope_norms_and_relative),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
