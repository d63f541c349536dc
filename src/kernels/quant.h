/* The quantized storage types of K and V (include/sdpa.h, docs/STORAGE.md):
 * the 8-bit floats E4M3 and E5M2 and ggml's blocks Q8_0 and Q4_0, decoded
 * value by value. These are the reference of the vector kernels' decoding
 * (rows_avx2.c, rows_avx512.c give the same bits) and the scalar code
 * that serves the portable set and the vector sets' tails. Every decoded
 * value is exact in float32. */
#ifndef SDPA_QUANT_H
#define SDPA_QUANT_H

#include "kernels/half.h"
#include "sdpa.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

/* Values per block of a block type; the other types have 1. */
enum { SDPA_QUANT_BLOCK = 32 };
enum { SDPA_Q8_0_BYTES = 2 + 32, SDPA_Q4_0_BYTES = 2 + 16 };

static inline bool sdpa_is_block_type(int type)
{
    return type == SDPA_Q8_0 || type == SDPA_Q4_0;
}

static inline bool sdpa_is_fp8_type(int type)
{
    return type == SDPA_FP8_E4M3 || type == SDPA_FP8_E5M2;
}

/* Is `type` one of the quantized K/V types? */
static inline bool sdpa_is_quant_type(int type)
{
    return sdpa_is_fp8_type(type) || sdpa_is_block_type(type);
}

/* E4M3: S.EEEE.MMM, bias 7; exponent 0 is subnormal (M · 2^-9);
 * S.1111.111 is NaN; there is no infinity. */
static inline float sdpa_e4m3_to_f32(uint8_t c)
{
    const uint32_t sign = (uint32_t)(c & 0x80u) << 24;
    const uint32_t e = (c >> 3) & 15u, m = c & 7u;
    if (e == 15 && m == 7)
        return sdpa_bits_float(sign | 0x7fc00000u);
    if (e == 0) {
        float sub = (float)m * 0x1p-9f; /* exact: 3 bits */
        return sign ? -sub : sub;
    }
    return sdpa_bits_float(sign | (e + 120u) << 23 | m << 20);
}

/* E5M2 is the top byte of a float16, infinities and NaNs included. */
static inline float sdpa_e5m2_to_f32(uint8_t c)
{
    return sdpa_f16_to_f32((uint16_t)(c << 8));
}

/* A block's float16 scale d, read without assuming its alignment (the
 * blocks are 34 and 18 bytes long). */
static inline float sdpa_block_scale(const unsigned char *block)
{
    uint16_t d;
    memcpy(&d, block, sizeof d);
    return sdpa_f16_to_f32(d);
}

/* Value i (< 32) of a Q8_0 block: d · q[i]. */
static inline float sdpa_q8_0_value(const unsigned char *block, int i)
{
    return sdpa_block_scale(block) * (float)(int8_t)block[2 + i];
}

/* Value i (< 32) of a Q4_0 block: the low nibbles are values 0..15, the
 * high ones 16..31, each minus 8, times d. */
static inline float sdpa_q4_0_value(const unsigned char *block, int i)
{
    const unsigned char b = block[2 + (i & 15)];
    const int q = (i < 16 ? b & 15 : b >> 4) - 8;
    return sdpa_block_scale(block) * (float)q;
}

/* Value i of an array of quantized `type` that starts at a block (or any
 * byte for FP8). */
static inline float sdpa_quant_value(const void *base, int type, int64_t i)
{
    const unsigned char *u = base;
    switch (type) {
    case SDPA_FP8_E4M3:
        return sdpa_e4m3_to_f32(u[i]);
    case SDPA_FP8_E5M2:
        return sdpa_e5m2_to_f32(u[i]);
    case SDPA_Q8_0:
        return sdpa_q8_0_value(u + i / 32 * SDPA_Q8_0_BYTES, (int)(i % 32));
    default:
        return sdpa_q4_0_value(u + i / 32 * SDPA_Q4_0_BYTES, (int)(i % 32));
    }
}

#endif /* SDPA_QUANT_H */
