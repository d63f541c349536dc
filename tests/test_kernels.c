/*
 * The row kernels on their own (internal API, linked from the static
 * library): the exp error bound stated in src/kernels/vexp.h, exact zeros for
 * forbidden keys, and agreement of the vector kernels (AVX2+FMA, AVX-512)
 * with the portable ones. Every vector set this CPU runs is tested; the
 * others are named in the output as not tested. Bounds checked here:
 *   - exp: <= 2 ulp against long double expl over the normal range, for the
 *     scalar (portable) and each vector code, float and double;
 *   - mask_max: bitwise equal between kernels (it only adds and selects);
 *   - exp_sum: each value within 2 ulp of expl (hence within 4 ulp of each
 *     other), sums within n·2^-23 (float) / n·2^-52 (double) relative;
 *   - softcap: within 4·eps·c of c·tanh(x/c) (absolute, the bound rows.h
 *     states);
 *   - dropout: bitwise the values rows.h defines, with the mask of the
 *     tests' own Philox4x32-10 (tests/common/reference.c), in every set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the three headers above first */
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/cpu.h"
#include "kernels/rows.h"
#include "kernels/vexp.h"
#include "reference.h"
#include "sdpa.h"

enum { ROW = 1037 }; /* odd, so vector bodies and scalar tails both run */

static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static double uniform(double lo, double hi)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return lo + (hi - lo) * (double)(rng_state >> 11) * 0x1p-53;
}

/* Distance of y from the exact value in units of the last place of the
 * correctly rounded result. */
static double ulps_f32(float y, long double exact)
{
    float r = (float)exact;
    long double ulp = (long double)nextafterf(r, INFINITY) - (long double)r;
    return (double)(fabsl((long double)y - exact) / ulp);
}
static double ulps_f64(double y, long double exact)
{
    double r = (double)exact;
    long double ulp = (long double)nextafter(r, INFINITY) - (long double)r;
    return (double)(fabsl((long double)y - exact) / ulp);
}

#include "kernel_sets.h"

/* Worst errors seen so far, scalar exp and one vector set's exp_sum. */
typedef struct exp_worst {
    double scalar, vector;
} exp_worst;

static void exp_worst_add(exp_worst *w, double scalar_ulps, double vector_ulps)
{
    w->scalar = scalar_ulps > w->scalar ? scalar_ulps : w->scalar;
    w->vector = vector_ulps > w->vector ? vector_ulps : w->vector;
}

/* The bound of src/kernels/vexp.h: 2 ulp, scalar and vector. */
static void exp_worst_check(const exp_worst *w, const char *type, int k)
{
    print_message("exp %s: worst %.3f ulp scalar, %.3f ulp %s\n", type,
                  w->scalar, w->vector, kernel_sets[k].name);
    assert_true(w->scalar <= 2.0);
    assert_true(w->vector <= 2.0);
}

static void exp_f32_bound(int k)
{
    const sdpa_row_kernels_f32 *vec = kernel_sets[k].f32;
    /* Every 257th float from log(FLT_MIN) to 0: about 4 million values. */
    float lo = SDPA_EXP_LOWEST_f32;
    uint32_t lo_bits, zero_bits = 0x80000000u; /* -0.0 */
    memcpy(&lo_bits, &lo, sizeof lo_bits);
    static float batch[ROW], args[ROW];
    exp_worst worst = {0, 0};
    int n = 0;
    for (uint32_t bits = zero_bits; bits <= lo_bits; bits += 257) {
        float x;
        memcpy(&x, &bits, sizeof x);
        args[n] = batch[n] = x;
        if (++n < ROW && bits + 257 <= lo_bits)
            continue;
        vec->exp_sum(batch, n, 0.0f);
        for (int i = 0; i < n; i++) {
            long double exact = expl((long double)args[i]);
            exp_worst_add(&worst, ulps_f32(sdpa_exp_neg_f32(args[i]), exact),
                          ulps_f32(batch[i], exact));
        }
        n = 0;
    }
    exp_worst_check(&worst, "f32", k);
}

static void exp_f64_bound(int k)
{
    const sdpa_row_kernels_f64 *vec = kernel_sets[k].f64;
    static double batch[ROW], args[ROW];
    exp_worst worst = {0, 0};
    for (int round = 0; round < 1000; round++) {
        for (int i = 0; i < ROW; i++) {
            /* half spread over the whole range, half near 0 where softmax
             * arguments gather */
            double lo = i % 2 ? SDPA_EXP_LOWEST_f64 : -8.0;
            args[i] = batch[i] = uniform(lo, 0.0);
        }
        vec->exp_sum(batch, ROW, 0.0);
        for (int i = 0; i < ROW; i++) {
            long double exact = expl((long double)args[i]);
            exp_worst_add(&worst, ulps_f64(sdpa_exp_neg_f64(args[i]), exact),
                          ulps_f64(batch[i], exact));
        }
    }
    exp_worst_check(&worst, "f64", k);
}

static void test_exp_bound(void **state)
{
    (void)state;
    for (int k = 0; k < KERNEL_SETS; k++)
        if (runnable(k)) {
            exp_f32_bound(k);
            exp_f64_bound(k);
        }
}

static void test_exp_edges(void **state)
{
    (void)state;
    assert_true(sdpa_exp_neg_f32(-INFINITY) == 0.0f);
    assert_true(sdpa_exp_neg_f64(-INFINITY) == 0.0);
    assert_true(sdpa_exp_neg_f32(0.0f) == 1.0f);
    assert_true(sdpa_exp_neg_f64(0.0) == 1.0);
    assert_true(sdpa_exp_neg_f32(-100.0f) == 0.0f); /* below FLT_MIN: flush */
    assert_true(sdpa_exp_neg_f64(-800.0) == 0.0);
    for (int k = 0; k < KERNEL_SETS; k++) {
        if (!runnable(k))
            continue;
        float x[37]; /* past two 16-lane vectors, so a tail runs too */
        double y[37];
        for (int i = 0; i < 37; i++) {
            x[i] = i % 3 ? -INFINITY : 0.0f;
            y[i] = i % 3 ? -INFINITY : (i % 2 ? -800.0 : 0.0);
        }
        float sum = kernel_sets[k].f32->exp_sum(x, 37, 0.0f);
        double sum_d = kernel_sets[k].f64->exp_sum(y, 37, 0.0);
        for (int i = 0; i < 37; i++) {
            assert_true(x[i] == (i % 3 ? 0.0f : 1.0f));
            assert_true(y[i] == (i % 3 || i % 2 ? 0.0 : 1.0));
        }
        assert_true(sum == 13.0f);
        assert_true(sum_d == 7.0);
    }
}

/* One body for both dtypes: vector set `vec` against the portable one on
 * rows of n = 1, 1 + nstep, ... scores in [-range, range], with a bias (some
 * -inf), a mask with values other than 1, and both mask conventions. */
#define DEFINE_VECTOR_MATCHES_PORTABLE(sfx, T, EPS, range, nstep)              \
    static void vector_matches_portable_##sfx(                                 \
        const sdpa_row_kernels_##sfx *vec)                                     \
    {                                                                          \
        static T a[ROW], b[ROW], bias[ROW];                                    \
        static uint8_t mask[ROW];                                              \
        for (int round = 0; round < 200; round++) {                            \
            int n = 1 + round * (nstep) % ROW;                                 \
            for (int j = 0; j < n; j++) {                                      \
                a[j] = (T)uniform(-(range), range);                            \
                bias[j] = j % 11 == 3 ? (T)-INFINITY : (T)uniform(-2, 2);      \
                mask[j] = (uint8_t)(j % 7 == 1 ? 0 : (j % 5 == 2 ? 9 : 0));    \
            }                                                                  \
            memcpy(b, a, sizeof a);                                            \
            bool allows = round % 2;                                           \
            const T *use_bias = round % 3 ? bias : NULL;                       \
            const uint8_t *use_mask = round % 4 ? mask : NULL;                 \
            T ma = sdpa_rows_portable_##sfx.mask_max(a, n, use_bias, use_mask, \
                                                     allows);                  \
            T mb = vec->mask_max(b, n, use_bias, use_mask, allows);            \
            assert_memory_equal(a, b, (size_t)n * sizeof(T));                  \
            assert_true(ma == mb);                                             \
            if (ma == -INFINITY)                                               \
                continue;                                                      \
            T sa = sdpa_rows_portable_##sfx.exp_sum(a, n, ma);                 \
            T sb = vec->exp_sum(b, n, mb);                                     \
            for (int j = 0; j < n; j++) {                                      \
                if (!(b[j] > 0)) { /* forbidden stays exactly 0 in both */     \
                    assert_true(a[j] == 0 && b[j] == 0);                       \
                    continue;                                                  \
                }                                                              \
                assert_true(fabsl((long double)a[j] - b[j]) <=                 \
                            4 * (EPS) * (long double)a[j]);                    \
            }                                                                  \
            assert_true(fabsl((long double)sa - sb) <=                         \
                        (long double)n * sa * (EPS));                          \
        }                                                                      \
    }

DEFINE_VECTOR_MATCHES_PORTABLE(f32, float, FLT_EPSILON, 30, 5)
DEFINE_VECTOR_MATCHES_PORTABLE(f64, double, DBL_EPSILON, 300, 7)

static void test_vector_matches_portable(void **state)
{
    (void)state;
    int tested = 0;
    for (int k = 1; k < KERNEL_SETS; k++)
        if (runnable(k)) {
            vector_matches_portable_f32(kernel_sets[k].f32);
            vector_matches_portable_f64(kernel_sets[k].f64);
            tested++;
        }
    if (!tested)
        skip(); /* no vector set on this CPU */
}

/* A NaN logit must come out of mask_max as NaN (the caller then reports
 * SDPA_ERR_NONFINITE), wherever it sits: vector body or scalar tail. */
static void test_nan_is_reported(void **state)
{
    (void)state;
    for (int k = 0; k < KERNEL_SETS; k++)
        for (int at = 0; at < 37 && runnable(k); at++) {
            float x[37];
            double y[37];
            for (int j = 0; j < 37; j++)
                x[j] = (float)j, y[j] = j;
            x[at] = NAN, y[at] = NAN;
            float m = kernel_sets[k].f32->mask_max(x, 37, NULL, NULL, false);
            double md = kernel_sets[k].f64->mask_max(y, 37, NULL, NULL, false);
            assert_true(m != m);
            assert_true(md != md);
        }
}

/* A -inf bias forbids its key whatever the logit, NaN and +inf included,
 * as a mask does: the key becomes -inf and the row's max stays finite. */
static void test_ninf_bias_forbids_nan(void **state)
{
    (void)state;
    for (int k = 0; k < KERNEL_SETS; k++)
        for (int at = 0; at < 37 && runnable(k); at++) {
            float x[37], bx[37];
            double y[37], by[37];
            for (int j = 0; j < 37; j++)
                x[j] = (float)j, y[j] = j, bx[j] = 0, by[j] = 0;
            x[at] = at % 2 ? NAN : INFINITY, y[at] = at % 2 ? NAN : INFINITY;
            bx[at] = -INFINITY, by[at] = -INFINITY;
            float m = kernel_sets[k].f32->mask_max(x, 37, bx, NULL, false);
            double md = kernel_sets[k].f64->mask_max(y, 37, by, NULL, false);
            assert_float_equal(m, at == 36 ? 35 : 36, 0);
            assert_float_equal(md, at == 36 ? 35 : 36, 0);
            assert_true(x[at] == -INFINITY && y[at] == -INFINITY);
        }
}

/* The soft-cap at c = 30: within 4·eps·c of c·tanh(x/c) (long double
 * tanhl) in both kernels and dtypes, NaN kept, ±inf → ±c. The general bound,
 * 8·eps·min(|s|, c) for every cap, is tests/test_softcap.c's. */
static void test_softcap(void **state)
{
    (void)state;
    static float xf[ROW], yf[ROW];
    static double xd[ROW], yd[ROW];
    const double cap = 30.0;
    for (int k = 0; k < KERNEL_SETS; k++) {
        if (!runnable(k))
            continue;
        const sdpa_row_kernels_f32 *kf = kernel_sets[k].f32;
        const sdpa_row_kernels_f64 *kd = kernel_sets[k].f64;
        for (int i = 0; i < ROW; i++) {
            /* from tiny to far beyond the cap, both signs */
            double v = uniform(-1, 1) * pow(10.0, uniform(-6, 3.5));
            xf[i] = yf[i] = (float)v;
            xd[i] = yd[i] = v;
        }
        yf[5] = NAN, yd[5] = NAN;
        yf[6] = INFINITY, yd[6] = -INFINITY;
        kf->softcap(yf, ROW, (float)cap);
        kd->softcap(yd, ROW, cap);
        for (int i = 0; i < ROW; i++) {
            if (i == 5) {
                assert_true(yf[i] != yf[i] && yd[i] != yd[i]);
                continue;
            }
            if (i == 6) {
                assert_true(yf[i] == (float)cap && yd[i] == -cap);
                continue;
            }
            long double wf = (long double)cap * tanhl((long double)xf[i] / cap);
            long double wd = (long double)cap * tanhl((long double)xd[i] / cap);
            assert_true(fabsl((long double)yf[i] - wf) <=
                        4 * FLT_EPSILON * cap);
            assert_true(fabsl((long double)yd[i] - wd) <=
                        4 * DBL_EPSILON * cap);
        }
    }
}

/* Every set's dropout against rows.h's definition, element by element
 * and bit by bit: runs of many lengths from keys at every position in
 * their Philox block (and past 2^32 keys), with and without the gradient
 * row. */
#define DROPOUT_CHECK(T, sfx)                                                  \
    static void dropout_matches_##sfx(const sdpa_row_kernels_##sfx *rk,        \
                                      const char *set)                         \
    {                                                                          \
        static const int64_t lengths[] = {1, 3, 7, 31, 64, 257, ROW};          \
        static const int64_t starts[] = {                                      \
            0, 1, 2, 3, 5, 1021, ((int64_t)1 << 33) + 2};                      \
        static const uint32_t thresholds[] = {429496729u, 2147483648u,         \
                                              4166118277u, 0u};                \
        T x[ROW], g[ROW], want_x[ROW], want_g[ROW];                            \
        for (size_t ti = 0; ti < 4; ti++)                                      \
            for (size_t li = 0; li < 7; li++)                                  \
                for (size_t si = 0; si < 7; si++) {                            \
                    const int64_t n = lengths[li], key = starts[si];           \
                    const sdpa_dropout_row row = {{0x01234567u, 0x89abcdefu},  \
                                                  (uint32_t)(li * 31 + si),    \
                                                  {0xdeadbeefu, (uint32_t)ti}, \
                                                  thresholds[ti]};             \
                    const T c = (T)1.25, d = (T)0.375;                         \
                    for (int with_g = 0; with_g < 2; with_g++) {               \
                        for (int64_t j = 0; j < n; j++) {                      \
                            x[j] = (T)uniform(0, 1);                           \
                            g[j] = (T)uniform(-2, 2);                          \
                            const int64_t k = key + j;                         \
                            const uint32_t ctr[4] = {(uint32_t)(k / 4),        \
                                                     row.row, row.stream[0],   \
                                                     row.stream[1]};           \
                            uint32_t w[4];                                     \
                            ref_philox4x32_10(ctr, row.key, w);                \
                            const int keep = w[k % 4] >= row.threshold;        \
                            T kept = keep ? c * g[j] : (T)0;                   \
                            T factor = kept - d;                               \
                            want_g[j] = with_g ? x[j] * factor : g[j];         \
                            want_x[j] = keep ? x[j] * c : (T)0;                \
                        }                                                      \
                        rk->dropout(x, n, &row, key, c, with_g ? g : NULL, d); \
                        if (memcmp(x, want_x, (size_t)n * sizeof(T)) != 0 ||   \
                            memcmp(g, want_g, (size_t)n * sizeof(T)) != 0) {   \
                            print_error("%s " #T " dropout: n %lld from key "  \
                                        "%lld, threshold %u, g %d differs\n",  \
                                        set, (long long)n, (long long)key,     \
                                        row.threshold, with_g);                \
                            fail();                                            \
                        }                                                      \
                    }                                                          \
                }                                                              \
    }
DROPOUT_CHECK(float, f32)
DROPOUT_CHECK(double, f64)

static void test_dropout(void **state)
{
    (void)state;
    for (int k = 0; k < KERNEL_SETS; k++)
        if (runnable(k)) {
            dropout_matches_f32(kernel_sets[k].f32, kernel_sets[k].name);
            dropout_matches_f64(kernel_sets[k].f64, kernel_sets[k].name);
        }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exp_bound),
        cmocka_unit_test(test_exp_edges),
        cmocka_unit_test(test_vector_matches_portable),
        cmocka_unit_test(test_nan_is_reported),
        cmocka_unit_test(test_ninf_bias_forbids_nan),
        cmocka_unit_test(test_softcap),
        cmocka_unit_test(test_dropout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
