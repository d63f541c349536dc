/*
 * The tests' own decoders of the quantized K/V types, written from the
 * formats' descriptions (the OCP 8-bit floating point specification for
 * E4M3 and E5M2; ggml's block_q8_0 and block_q4_0) with ldexp and integer
 * arithmetic, sharing nothing with the library's src/kernels/quant.h.
 * Header-only (static functions), for the unit tests and the fuzz targets.
 */
#ifndef SDPA_TESTS_QUANT_CODEC_H
#define SDPA_TESTS_QUANT_CODEC_H

#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <sdpa.h>

#include "half_codec.h"

static inline bool quant_codec_is_block(int type)
{
    return type == SDPA_Q8_0 || type == SDPA_Q4_0;
}

/* Bytes of one block (32 values) of a block type, of one FP8 value. */
static inline size_t quant_codec_unit_bytes(int type)
{
    return type == SDPA_Q8_0 ? 34 : type == SDPA_Q4_0 ? 18 : 1;
}

/* Values of one unit: 32 for the block types, 1 for FP8. */
static inline int quant_codec_unit_values(int type)
{
    return quant_codec_is_block(type) ? 32 : 1;
}

/* An OCP 8-bit float: sign, `eb` exponent bits of bias 2^(eb-1) - 1, the
 * rest mantissa; exponent 0 subnormal. E4M3 has NaN only at S.1111.111 and
 * no infinity; E5M2 follows IEEE 754 (all-ones exponent: inf when the
 * mantissa is 0, else NaN). */
static inline double quant_codec_fp8(uint8_t code, int type)
{
    const int eb = type == SDPA_FP8_E4M3 ? 4 : 5;
    const int mb = 7 - eb, bias = (1 << (eb - 1)) - 1;
    const int e = (code >> mb) & ((1 << eb) - 1), m = code & ((1 << mb) - 1);
    double v;
    if (type == SDPA_FP8_E4M3 && e == 15 && m == 7)
        v = NAN;
    else if (type == SDPA_FP8_E5M2 && e == 31)
        v = m ? NAN : INFINITY;
    else if (e == 0)
        v = ldexp(m, 1 - bias - mb);
    else
        v = ldexp(m + (1 << mb), e - bias - mb);
    return code & 0x80 ? -v : v;
}

/* Is the FP8 code a finite value? */
static inline bool quant_codec_fp8_finite(uint8_t code, int type)
{
    return type == SDPA_FP8_E4M3 ? (code & 0x7f) != 0x7f
                                 : (code & 0x7c) != 0x7c;
}

/* Value i (< 32) of a ggml block: a little-endian float16 d, then the
 * quants: Q8_0 32 int8 q (d · q[i]); Q4_0 16 bytes, values 0..15 their
 * low nibbles and 16..31 their high ones, each minus 8 (d · (n − 8)). */
static inline double quant_codec_block(const unsigned char *block, int type,
                                       int i)
{
    const double d =
        half_codec_value((uint16_t)(block[0] | block[1] << 8), SDPA_FLOAT16);
    int q;
    if (type == SDPA_Q8_0)
        q = block[2 + i] < 128 ? block[2 + i] : block[2 + i] - 256;
    else
        q = (i < 16 ? block[2 + i] % 16 : block[2 + i - 16] / 16) - 8;
    return d * q;
}

/* Value i of an array of `type` (blocks from its start). */
static inline double quant_codec_value(const unsigned char *base, int type,
                                       int64_t i)
{
    if (!quant_codec_is_block(type))
        return quant_codec_fp8(base[i], type);
    return quant_codec_block(base + (size_t)(i / 32) *
                                        quant_codec_unit_bytes(type),
                             type, (int)(i % 32));
}

/* Does a view of a block type split a block: a dimension of extent above 1
 * whose stride is not a multiple of 32 (SDPA_ERR_BAD_STRIDE)? */
static inline bool quant_codec_splits_blocks(const sdpa_tensor *t)
{
    for (int d = 0; d < 3; d++)
        if (t->shape[d] > 1 && t->stride[d] % 32 != 0)
            return true;
    return false;
}

/* Byte offset of the unit that holds value offset o. */
static inline size_t quant_codec_unit_at(int type, int64_t o)
{
    return (size_t)(o / quant_codec_unit_values(type)) *
           quant_codec_unit_bytes(type);
}

#endif
