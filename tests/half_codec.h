/*
 * The tests' own binary16 / bfloat16 codec and nearest-even rounding:
 * field by field with frexp and ldexp in double, sharing nothing with the
 * library's src/kernels/half.h, so that the tests check the library's
 * conversions rather than repeat them. Header-only (static functions), for the
 * unit tests and the fuzz targets.
 */
#ifndef SDPA_TESTS_HALF_CODEC_H
#define SDPA_TESTS_HALF_CODEC_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include <sdpa.h>

/* A half pattern's value: ±inf, NaN (of the pattern's sign) for NaNs,
 * subnormals and -0 exact. type: SDPA_FLOAT16 or SDPA_BFLOAT16. */
static inline double half_codec_value(uint16_t h, int type)
{
    const int mant_bits = type == SDPA_FLOAT16 ? 10 : 7;
    const int exp_bits = type == SDPA_FLOAT16 ? 5 : 8;
    const int bias = type == SDPA_FLOAT16 ? 15 : 127;
    int e = (h >> mant_bits) & ((1 << exp_bits) - 1);
    int mant = h & ((1 << mant_bits) - 1);
    double v;
    if (e == (1 << exp_bits) - 1)
        v = mant ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(mant, 1 - bias - mant_bits);
    else
        v = ldexp(mant + (1 << mant_bits), e - bias - mant_bits);
    return h >> 15 ? -v : v;
}

/* The pattern of v: ±0, ±inf, a quiet NaN of v's sign, or v exactly.
 * *exact is false (and the pattern meaningless) when v is finite but not
 * a value of the type: the caller rounds before it encodes. */
static inline uint16_t half_codec_bits(double v, int type, bool *exact)
{
    const int mant_bits = type == SDPA_FLOAT16 ? 10 : 7;
    const int bias = type == SDPA_FLOAT16 ? 15 : 127;
    const unsigned all_ones = type == SDPA_FLOAT16 ? 0x1fu : 0xffu;
    const unsigned sign = signbit(v) ? 0x8000u : 0u;
    *exact = true;
    if (isnan(v))
        return (uint16_t)(sign | all_ones << mant_bits | 1u << (mant_bits - 1));
    double a = fabs(v);
    if (isinf(a))
        return (uint16_t)(sign | all_ones << mant_bits);
    if (a == 0)
        return (uint16_t)sign;
    int e;
    double m = frexp(a, &e); /* a = m · 2^e, m in [0.5, 1) */
    int biased = e - 1 + bias;
    double mant;
    if (biased <= 0) { /* subnormal: a = mant · 2^(1 - bias - mant_bits) */
        biased = 0;
        mant = ldexp(a, bias - 1 + mant_bits);
    } else {
        mant = ldexp(2 * m - 1, mant_bits);
    }
    if (mant != floor(mant) || biased >= (int)all_ones) {
        *exact = false;
        return 0;
    }
    return (uint16_t)(sign | (unsigned)biased << mant_bits | (unsigned)mant);
}

/* x rounded to the storage type, nearest even, by double arithmetic:
 * |x| / ulp is exact (x has at most 53 bits, ulp is a power of two) and
 * nearbyint rounds it to even in the default mode; beyond the largest
 * finite value ±inf. type: SDPA_FLOAT16, SDPA_BFLOAT16 or SDPA_FLOAT32;
 * SDPA_FLOAT64, zeros, infinities and NaN come back as they are. */
static inline double half_codec_round(double x, int type)
{
    if (type == SDPA_FLOAT64 || !isfinite(x) || x == 0)
        return x;
    const int frac = type == SDPA_FLOAT16 ? 10 : type == SDPA_BFLOAT16 ? 7 : 23;
    const int emin = type == SDPA_FLOAT16 ? -14 : -126;
    const double max = type == SDPA_FLOAT16    ? 65504.0
                       : type == SDPA_BFLOAT16 ? 0x1.fep127
                                               : 0x1.fffffep127;
    double a = fabs(x);
    int e;
    (void)frexp(a, &e); /* a = m·2^e, m in [0.5, 1): the binade's e − 1 */
    int q = (e - 1 < emin ? emin : e - 1) - frac;
    double r = ldexp(nearbyint(ldexp(a, -q)), q);
    if (r > max)
        r = INFINITY;
    return copysign(r, x);
}

#endif /* SDPA_TESTS_HALF_CODEC_H */
