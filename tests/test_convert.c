/*
 * sdpa_convert (1.2) against the tests' own codec (half_codec.h, which
 * shares nothing with the library): every float16 and bfloat16 pattern
 * widened exactly, float32 values of every binade, the halfway cases and
 * the overflow edge narrowed to nearest even, and each refusal with the
 * destination untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "half_codec.h"
#include "testutil.h"

static const int half_types[2] = {SDPA_FLOAT16, SDPA_BFLOAT16};

static void test_widen_every_pattern(void **state)
{
    (void)state;
    enum { PATTERNS = 65536 };
    uint16_t *codes = malloc(PATTERNS * sizeof *codes);
    float *wide = malloc(PATTERNS * sizeof *wide);
    assert_non_null(codes);
    assert_non_null(wide);
    for (uint32_t i = 0; i < PATTERNS; i++)
        codes[i] = (uint16_t)i;
    for (int t = 0; t < 2; t++) {
        assert_int_equal(
            sdpa_convert(SDPA_FLOAT32, wide, half_types[t], codes, PATTERNS),
            SDPA_OK);
        for (uint32_t i = 0; i < PATTERNS; i++) {
            double want = half_codec_value((uint16_t)i, half_types[t]);
            if (isnan(want)) {
                if (!isnan(wide[i]) || !signbit(wide[i]) != !signbit(want))
                    fail_msg("type %d pattern 0x%04x: %g, want a NaN of its "
                             "sign",
                             half_types[t], i, (double)wide[i]);
            } else if ((double)wide[i] != want ||
                       !signbit(wide[i]) != !signbit(want)) {
                fail_msg("type %d pattern 0x%04x: %.9g, want %.9g",
                         half_types[t], i, (double)wide[i], want);
            }
        }
    }
    free(codes);
    free(wide);
}

/* float32 values: the edges of both types, the halfway points between
 * neighbouring half values (ties go to the even one) and random bit
 * patterns of every exponent. */
static size_t narrow_inputs(float *x, size_t most, rng *r)
{
    size_t n = 0;
    static const float edges[] = {0.0f,
                                  -0.0f,
                                  INFINITY,
                                  -INFINITY,
                                  65504.0f,
                                  65519.99f,
                                  65520.0f,
                                  -65520.0f,
                                  6.1035156e-05f,  /* f16 smallest normal */
                                  5.9604645e-08f,  /* f16 smallest subnormal */
                                  2.9802322e-08f,  /* half of it: to 0 */
                                  2.9802326e-08f,  /* just above: up */
                                  1.17549435e-38f, /* f32 smallest normal */
                                  1.4e-45f,
                                  3.4028235e38f,
                                  1.0f,
                                  1.00048828125f, /* 1 + 2^-11: f16 tie */
                                  1.00146484375f, /* 1 + 3·2^-11: tie up */
                                  1.00390625f,    /* 1 + 2^-8: bf16 tie */
                                  1.01171875f};   /* 1 + 3·2^-8 */
    for (size_t i = 0; i < sizeof edges / sizeof edges[0]; i++)
        x[n++] = edges[i];
    for (int t = 0; t < 2; t++)
        for (uint32_t h = 0; h < 65536 && n + 1 < most; h += 7) {
            double a = half_codec_value((uint16_t)h, half_types[t]);
            double b = half_codec_value((uint16_t)(h + 1), half_types[t]);
            if (isfinite(a) && isfinite(b) && (h & 0x7fff) != 0x7fff) {
                x[n++] = (float)((a + b) / 2); /* exact in float32 */
                x[n++] = (float)a;
            }
        }
    while (n < most) {
        uint32_t bits = (uint32_t)rng_next(r);
        float f;
        memcpy(&f, &bits, sizeof f);
        x[n++] = f;
    }
    return n;
}

static void test_narrow_nearest_even(void **state)
{
    (void)state;
    enum { MOST = 400000 };
    float *x = malloc(MOST * sizeof *x);
    uint16_t *h = malloc(MOST * sizeof *h);
    assert_non_null(x);
    assert_non_null(h);
    rng r = {2026};
    const size_t n = narrow_inputs(x, MOST, &r);
    for (int t = 0; t < 2; t++) {
        const int type = half_types[t];
        assert_int_equal(sdpa_convert(type, h, SDPA_FLOAT32, x, (int64_t)n),
                         SDPA_OK);
        for (size_t i = 0; i < n; i++) {
            if (isnan(x[i])) {
                if (!isnan(half_codec_value(h[i], type)))
                    fail_msg("type %d: NaN became 0x%04x", type, h[i]);
                continue;
            }
            bool exact;
            uint16_t want =
                half_codec_bits(half_codec_round(x[i], type), type, &exact);
            assert_true(exact);
            if (h[i] != want)
                fail_msg("type %d: %.9g became 0x%04x, want 0x%04x", type,
                         (double)x[i], h[i], want);
        }
    }
    /* float32 to float32 copies, NaN payloads included */
    float *copy = malloc(n * sizeof *copy);
    assert_non_null(copy);
    assert_int_equal(
        sdpa_convert(SDPA_FLOAT32, copy, SDPA_FLOAT32, x, (int64_t)n), SDPA_OK);
    assert_memory_equal(copy, x, n * sizeof *copy);
    free(copy);
    free(x);
    free(h);
}

static void test_refusals(void **state)
{
    (void)state;
    float src[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    uint16_t dst[8];
    memset(dst, 0x5a, sizeof dst);
    const struct {
        int dst_type, src_type;
    } bad_types[] = {{SDPA_FLOAT64, SDPA_FLOAT32},
                     {SDPA_FLOAT32, SDPA_FLOAT64},
                     {SDPA_FLOAT16, SDPA_FLOAT16},
                     {SDPA_FLOAT16, SDPA_BFLOAT16},
                     {SDPA_BFLOAT16, SDPA_FLOAT16},
                     {0, SDPA_FLOAT32},
                     {SDPA_FLOAT16, 7}};
    for (size_t i = 0; i < sizeof bad_types / sizeof bad_types[0]; i++)
        assert_int_equal(sdpa_convert(bad_types[i].dst_type, dst,
                                      bad_types[i].src_type, src, 8),
                         SDPA_ERR_BAD_DTYPE);
    assert_int_equal(sdpa_convert(SDPA_FLOAT16, dst, SDPA_FLOAT32, src, -1),
                     SDPA_ERR_BAD_DIM);
    assert_int_equal(sdpa_convert(SDPA_FLOAT16, NULL, SDPA_FLOAT32, src, 8),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(sdpa_convert(SDPA_FLOAT16, dst, SDPA_FLOAT32, NULL, 8),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(sdpa_convert(SDPA_FLOAT16, NULL, SDPA_FLOAT32, NULL, 0),
                     SDPA_OK);
    assert_int_equal(
        sdpa_convert(SDPA_FLOAT16, dst, SDPA_FLOAT32, src, INT64_MAX / 2),
        SDPA_ERR_OVERFLOW);
    /* the float16 output over the last bytes of its own input */
    assert_int_equal(
        sdpa_convert(SDPA_FLOAT16, (char *)src + 10, SDPA_FLOAT32, src, 4),
        SDPA_ERR_OVERLAP);
    assert_true(src[2] == 3 && src[3] == 4 && src[4] == 5);
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(dst[i], 0x5a5a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widen_every_pattern),
        cmocka_unit_test(test_narrow_nearest_even),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
