/*
 * The half-precision storage types, scalar and portable C: IEEE 754
 * binary16 (SDPA_FLOAT16) and bfloat16 (SDPA_BFLOAT16, the top 16 bits of a
 * float32). The library stores q/k/v/out in them and computes in float32.
 *
 *   sdpa_f16_to_f32   exact; a NaN comes out quiet (the quiet bit set, as
 *                     F16C's vcvtph2ps does), sign and payload kept.
 *   sdpa_f32_to_f16   round to nearest, ties to even, subnormal results
 *                     included; |f| >= 65520 → ±inf; NaN → quiet NaN of
 *                     the same sign with the payload's top 9 bits (what
 *                     vcvtps2ph gives).
 *   sdpa_bf16_to_f32  exact: a shift (a signalling NaN stays signalling).
 *   sdpa_f32_to_bf16  round to nearest, ties to even, overflow → ±inf;
 *                     NaN → quiet NaN, sign and top payload bits kept (the
 *                     rounding increment never turns a NaN into inf).
 *
 * Integer arithmetic only, so the results do not depend on the FPU's
 * rounding mode, flush-to-zero or excess precision. The vector kernels
 * (rows.h: widen, narrow) give these functions' bits exactly, NaNs too.
 */
#ifndef SDPA_HALF_H
#define SDPA_HALF_H

#include "sdpa.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

static inline uint32_t sdpa_float_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static inline float sdpa_bits_float(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline float sdpa_f16_to_f32(uint16_t h)
{
    /* The three cases computed alike and selected by masks, without
     * branches, so that compilers vectorise loops of it (the portable
     * kernels widen with it). */
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, abs = h & 0x7fffu;
    uint32_t exp = abs >> 10, mant = abs & 0x3ffu;
    /* normal: rebias 15 → 127 */
    uint32_t normal = (abs << 13) + 0x38000000u;
    /* inf, or NaN made quiet (the quiet bit set when mant != 0) */
    uint32_t special =
        (abs << 13) | 0x7f800000u | (((mant + 0x3ffu) & 0x400u) << 12);
    /* zero or subnormal: mant · 2^-24, exact in float (an integer below
     * 2^10 times a power of two, a normal float unless 0) */
    uint32_t small = sdpa_float_bits((float)mant * 0x1p-24f);
    uint32_t is_small = 0u - (uint32_t)(exp == 0);
    uint32_t is_special = 0u - (uint32_t)(exp == 31);
    uint32_t bits = (small & is_small) | (special & is_special) |
                    (normal & ~(is_small | is_special));
    return sdpa_bits_float(sign | bits);
}

static inline uint16_t sdpa_f32_to_f16(float f)
{
    uint32_t u = sdpa_float_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) /* NaN: quiet, top payload bits kept */
        return (uint16_t)(sign | 0x7e00u | ((abs >> 13) & 0x3ffu));
    if (abs >= 0x477ff000u) /* >= 65520, the midpoint above 65504: inf */
        return (uint16_t)(sign | 0x7c00u);
    if (abs >= 0x38800000u) {
        /* normal half (>= 2^-14): drop 13 mantissa bits, nearest even; a
         * carry into the exponent is the right result (and cannot pass
         * 0x7bff: the larger values went to inf above) */
        abs += 0xfffu + ((abs >> 13) & 1u);
        return (uint16_t)(sign | ((abs - 0x38000000u) >> 13));
    }
    if (abs < 0x33000000u) /* <= 2^-25, half the least subnormal: ±0 */
        return sign;
    /* subnormal half: |f| = m · 2^(e − 150), m with its implicit bit, in
     * units of 2^-24 is m >> (126 − e): shift by 14..24, nearest even on
     * the bits shifted out. 2^-14 may come out, which is the right bits. */
    uint32_t e = abs >> 23, m = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126 - e, q = m >> shift;
    uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    q += rest > half || (rest == half && (q & 1u));
    return (uint16_t)(sign | q);
}

static inline float sdpa_bf16_to_f32(uint16_t h)
{
    return sdpa_bits_float((uint32_t)h << 16);
}

static inline uint16_t sdpa_f32_to_bf16(float f)
{
    uint32_t u = sdpa_float_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: quiet, never inf */
        return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u); /* nearest even; overflow → inf */
    return (uint16_t)(u >> 16);
}

/* Bytes of one unit of a storage type (SDPA_FLOAT*, quantized types): an
 * element, or a block of 32 values for SDPA_Q8_0 and SDPA_Q4_0 (quant.h),
 * whose views count their strides in blocks once validated; 0 for an
 * unknown type. */
static inline size_t sdpa_dtype_size(int dtype)
{
    switch (dtype) {
    case SDPA_FLOAT32:
        return 4;
    case SDPA_FLOAT64:
        return 8;
    case SDPA_FLOAT16:
    case SDPA_BFLOAT16:
        return 2;
    case SDPA_FP8_E4M3:
    case SDPA_FP8_E5M2:
        return 1;
    case SDPA_Q8_0:
        return 34;
    case SDPA_Q4_0:
        return 18;
    default:
        return 0;
    }
}

/* Values in one unit of a storage type: 32 for the block types, else 1. */
static inline int64_t sdpa_dtype_values(int dtype)
{
    return dtype == SDPA_Q8_0 || dtype == SDPA_Q4_0 ? 32 : 1;
}

#endif /* SDPA_HALF_H */
