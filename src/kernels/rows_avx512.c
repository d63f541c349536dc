/*
 * The AVX-512 row kernels (F, DQ, BW and VL, with AVX2, FMA and F16C: the
 * x86-64-v4 set). Only this file is compiled with those -m flags;
 * rows_dispatch.c calls it only after CPU detection says it may. The
 * algorithm is rows_simd_impl.h, the same as
 * the AVX2 kernels' on twice the lanes, with lane masks in mask registers.
 * The 32 vector registers hold the four interleaved exps without spills.
 */
#if defined(__x86_64__) || defined(__i386__)

#include "kernels/rows.h"
#include "core/template.h"
#include "kernels/vexp.h"
#include "kernels/quant.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* The kernel tables sdpa_rows_avx512_f32/_f64 over the static kernels
 * KERNEL_NAME(x) = sdpa_rows_avx512_x_f32/_f64 of rows_simd_impl.h, and
 * their own copies of rows_scalar_impl.h's helpers (HACKING.md's naming
 * rule). */
#define ROW_KERNELS sdpa_rows_avx512

/* Philox4x32-10 (philox.h) for the dropout kernel, 8 counters a vector:
 * each word lives in the low half of a 64-bit lane, where vpmuludq takes
 * its operand and leaves the whole product (the low word in place, the
 * high one a shift away); the high halves hold garbage no step reads.
 * PHILOX_VECS vectors at once: one round is a chain of dependent steps
 * (product, shift, xor), so independent counters keep the units busy.
 * Measured on Zen 4 (8192 rows of 1024 keys, float): 0.65 ns a key with
 * one vector of 16 counters in 32-bit lanes, 0.42 with this (AVX2: 0.87);
 * the ten rounds are most of it. */
enum { PHILOX_VECS = 4 };

/* The words of `blocks` blocks of a row from block `block` on, in key
 * order (block b's 4 words at out[4b]), 8·PHILOX_VECS blocks at a time
 * (so up to that many minus one more than asked). */
static void philox_words_avx512(uint32_t *out, const sdpa_dropout_row *row,
                                uint32_t block, int64_t blocks)
{
    const __m512i m0 = _mm512_set1_epi64(SDPA_PHILOX_M0);
    const __m512i m1 = _mm512_set1_epi64(SDPA_PHILOX_M1);
    const __m512i lanes = _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7);
    const __m512i first = _mm512_setr_epi64(0, 1, 8, 9, 2, 3, 10, 11);
    const __m512i second = _mm512_setr_epi64(4, 5, 12, 13, 6, 7, 14, 15);
    for (int64_t b = 0; b < blocks; b += 8 * PHILOX_VECS) {
        __m512i c0[PHILOX_VECS], c1[PHILOX_VECS], c2[PHILOX_VECS],
            c3[PHILOX_VECS];
        for (int u = 0; u < PHILOX_VECS; u++) {
            c0[u] = _mm512_add_epi64(
                _mm512_set1_epi64((int64_t)block + b + 8 * u), lanes);
            c1[u] = _mm512_set1_epi64(row->row);
            c2[u] = _mm512_set1_epi64(row->stream[0]);
            c3[u] = _mm512_set1_epi64(row->stream[1]);
        }
        uint32_t k0 = row->key[0], k1 = row->key[1];
        for (int r = 0; r < SDPA_PHILOX_ROUNDS; r++) {
            const __m512i vk0 = _mm512_set1_epi64(k0);
            const __m512i vk1 = _mm512_set1_epi64(k1);
            for (int u = 0; u < PHILOX_VECS; u++) {
                __m512i p0 = _mm512_mul_epu32(c0[u], m0);
                __m512i p1 = _mm512_mul_epu32(c2[u], m1);
                /* a ^ b ^ c */
                c0[u] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p1, 32),
                                                  c1[u], vk0, 0x96);
                c2[u] = _mm512_ternarylogic_epi64(_mm512_srli_epi64(p0, 32),
                                                  c3[u], vk1, 0x96);
                c1[u] = p1;
                c3[u] = p0;
            }
            k0 += SDPA_PHILOX_W0;
            k1 += SDPA_PHILOX_W1;
        }
        for (int u = 0; u < PHILOX_VECS; u++, out += 32) {
            /* 64-bit lane l: words 0, 1 of block l, and words 2, 3 */
            __m512i w01 = _mm512_mask_blend_epi32(0xAAAA, c0[u],
                                                  _mm512_slli_epi64(c1[u], 32));
            __m512i w23 = _mm512_mask_blend_epi32(0xAAAA, c2[u],
                                                  _mm512_slli_epi64(c3[u], 32));
            /* 128-bit lanes: blocks 0, 2, 4, 6 and 1, 3, 5, 7 */
            __m512i even = _mm512_unpacklo_epi64(w01, w23);
            __m512i odd = _mm512_unpackhi_epi64(w01, w23);
            _mm512_storeu_si512(out,
                                _mm512_permutex2var_epi64(even, first, odd));
            _mm512_storeu_si512(out + 16,
                                _mm512_permutex2var_epi64(even, second, odd));
        }
    }
}
#define PHILOX_LANES (8 * PHILOX_VECS)
#define PHILOX_WORDS(out, row, block, blocks)                                  \
    philox_words_avx512(out, row, block, blocks)

/* ---- float: 16 lanes ---- */
#define T float
#define SUF f32
#define W 16
#define VT __m512
#define VI __m512i
#define VM __mmask16
#define VZERO() _mm512_setzero_ps()
#define VSET1(a) _mm512_set1_ps(a)
#define VSET1I(a) _mm512_set1_epi32(a)
#define VLOAD(p) _mm512_loadu_ps(p)
#define VSTORE(p, a) _mm512_storeu_ps(p, a)
#define VADD(a, b) _mm512_add_ps(a, b)
#define VSUB(a, b) _mm512_sub_ps(a, b)
#define VMUL(a, b) _mm512_mul_ps(a, b)
#define VDIV(a, b) _mm512_div_ps(a, b)
#define VMAX(a, b) _mm512_max_ps(a, b)
#define VAND(a, b) _mm512_and_ps(a, b)
#define VOR(a, b) _mm512_or_ps(a, b)
#define VANDNOT(a, b) _mm512_andnot_ps(a, b)     /* ~a & b */
#define VFMA(a, b, c) _mm512_fmadd_ps(a, b, c)   /* a·b + c */
#define VFNMA(a, b, c) _mm512_fnmadd_ps(a, b, c) /* c − a·b */
#define VCASTI(a) _mm512_castps_si512(a)
#define VCASTF(a) _mm512_castsi512_ps(a)
#define VADDI(a, b) _mm512_add_epi32(a, b)
#define VSLLI(a, n) _mm512_slli_epi32(a, n)
#define VCMP_GE(a, b) _mm512_cmp_ps_mask(a, b, _CMP_GE_OQ)
#define VCMP_UNORD(a, b) _mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q)
#define VBLENDV(a, b, m) _mm512_mask_blend_ps(m, a, b) /* m ? b : a */
#define VKEEP(a, m) _mm512_maskz_mov_ps(m, a)          /* m ? a : 0 */
#define VM_NONE() ((__mmask16)0)
#define VM_OR(a, b) ((__mmask16)((a) | (b)))
#define VM_ANY(m) ((m) != 0)
/* Lanes whose key the 16 mask bytes at p forbid: the zero bytes when
 * nonzero allows, the nonzero ones otherwise. */
static inline __mmask16 mask_forbids_f32(const uint8_t *p, bool nonzero_allows)
{
    __m128i bytes = _mm_loadu_si128((const __m128i *)(const void *)p);
    return nonzero_allows ? _mm_cmpeq_epi8_mask(bytes, _mm_setzero_si128())
                          : _mm_cmpneq_epi8_mask(bytes, _mm_setzero_si128());
}
#define MASK_FORBIDS(p, nonzero_allows) mask_forbids_f32(p, nonzero_allows)
#define KEEP_MASK(w, threshold)                                                \
    _mm512_cmpge_epu32_mask(_mm512_loadu_si512(w),                             \
                            _mm512_set1_epi32((int)(threshold)))
/* 16 of the 32 registers hold accumulators, the rest the operands. */
#define ACC_VECS 16
/* The first n (< 16) lanes: masked loads read (and stores write) only
 * those, and never fault on the others. */
#define FIRST_LANES_16(n) ((__mmask16)((1u << (n)) - 1))
#define VLOAD_PART(p, n) _mm512_maskz_loadu_ps(FIRST_LANES_16(n), p)
#define VSTORE_PART(p, a, n) _mm512_mask_storeu_ps(p, FIRST_LANES_16(n), a)
/* One vector of the lane sums of v[0..16) (lane l: v[l]'s), in four
 * rounds that each halve the vectors: 256-bit halves, 128-bit quarters
 * (each 128-bit lane then holds 4 partial sums of one vector), pairs and
 * single lanes within 128-bit lanes. The last two rounds leave lane 4q + m
 * with the sum of input 4m + q, so the inputs are taken transposed. */
static inline __m512 fold_pair_f32(__m512 a, __m512 b)
{
    /* [a(L0+L2), a(L1+L3), b(L0+L2), b(L1+L3)] in 128-bit lanes L */
    return _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44),
                         _mm512_shuffle_f32x4(a, b, 0xEE));
}
static inline __m512 fold_quad_f32(__m512 ab, __m512 cd)
{
    /* [a, b, c, d], each 4 partial sums */
    return _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88),
                         _mm512_shuffle_f32x4(ab, cd, 0xDD));
}
static inline __m512 hsum16_f32(const __m512 *v)
{
#define IN(p) v[(p) % 4 * 4 + (p) / 4]
    __m512 y[4];
    for (int i = 0; i < 4; i++)
        y[i] = fold_quad_f32(fold_pair_f32(IN(4 * i), IN(4 * i + 1)),
                             fold_pair_f32(IN(4 * i + 2), IN(4 * i + 3)));
#undef IN
    __m512 z0 = _mm512_add_ps(_mm512_unpacklo_ps(y[0], y[1]),
                              _mm512_unpackhi_ps(y[0], y[1]));
    __m512 z1 = _mm512_add_ps(_mm512_unpacklo_ps(y[2], y[3]),
                              _mm512_unpackhi_ps(y[2], y[3]));
    return _mm512_add_ps(_mm512_shuffle_ps(z0, z1, 0x44),
                         _mm512_shuffle_ps(z0, z1, 0xEE));
}
#define VHSUMW(v) hsum16_f32(v)
/* 16 halves at p (32 bytes); the _PART forms the first n (< 16), zeros
 * after them, by a masked 16-bit load (AVX512BW+VL). */
static inline __m256i halves(const uint16_t *p)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}
/* bfloat16 → float is a shift into the top half of each 32-bit lane. */
static inline __m512 bf16_to_f32(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#define VLOAD_F16(p) _mm512_cvtph_ps(halves(p))
#define VLOAD_F16_PART(p, n)                                                   \
    _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(FIRST_LANES_16(n), p))
#define VLOAD_BF16(p) bf16_to_f32(halves(p))
#define VLOAD_BF16_PART(p, n)                                                  \
    bf16_to_f32(_mm256_maskz_loadu_epi16(FIRST_LANES_16(n), p))
/* vcvtps2ph with an explicit nearest-even rounds as sdpa_f32_to_f16 does,
 * NaNs included (quiet, sign and top payload kept: tests/test_half.c). The
 * zero-masking form with every lane set, because without optimisation
 * gcc's _mm512_cvtps_ph is a macro that passes the mask as a plain -1
 * (-Wsign-conversion, an error in Debug builds). */
#define VSTORE_F16(p, a)                                                       \
    _mm256_storeu_si256(                                                       \
        (__m256i *)(void *)(p),                                                \
        _mm512_maskz_cvtps_ph((__mmask16)0xFFFF, a,                            \
                              _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
/* sdpa_f32_to_bf16 on 16 lanes, by integer arithmetic (AVX512_BF16's
 * vcvtneps2bf16 is not in the x86-64-v4 set): nearest even by addition,
 * NaN → its top half with the quiet bit set; then each 32-bit lane
 * truncated to its low 16 bits. */
static inline void store_bf16(uint16_t *p, __m512 a)
{
    __m512i x = _mm512_castps_si512(a), top = _mm512_srli_epi32(x, 16);
    __m512i odd = _mm512_and_si512(top, _mm512_set1_epi32(1));
    __m512i sum = _mm512_add_epi32(x, _mm512_set1_epi32(0x7fff));
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(sum, odd), 16);
    __mmask16 nan = _mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
    r = _mm512_mask_or_epi32(r, nan, top, _mm512_set1_epi32(0x40));
    _mm256_storeu_si256((__m256i *)(void *)p, _mm512_cvtepi32_epi16(r));
}
#define VSTORE_BF16(p, a) store_bf16(p, a)
/* The quantized K/V types (quant.h's bits). 16 FP8 codes as 16-bit lanes;
 * E5M2 is a float16's top byte. E4M3 is read as value / 2^8 (rows_simd_impl.h,
 * STREAM_UNIT): its bits placed in a float16 (bias 7 is float16's 15 minus
 * 8), exactly, subnormals included. Sign-extended to 16 bits and shifted by
 * 7, a code has its sign on bit 15 (and a copy on bit 14, cleared) and its
 * exponent and mantissa on bits 7..13; S.1111.111 then becomes float16's
 * quiet NaN 0x7e00 of its sign (0x3f80 + 0x3e80, no carry into the sign). */
static inline __m256i fp8_lanes(const unsigned char *p)
{
    return _mm256_cvtepu8_epi16(
        _mm_loadu_si128((const __m128i *)(const void *)p));
}
static inline __m512 e5m2_to_f32(const unsigned char *p)
{
    return _mm512_cvtph_ps(_mm256_slli_epi16(fp8_lanes(p), 8));
}
static inline __m512 e4m3_to_f32_scaled(const unsigned char *p)
{
    const __m256i c =
        _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(const void *)p));
    const __m256i h = _mm256_and_si256(_mm256_slli_epi16(c, 7),
                                       _mm256_set1_epi16((short)0xbf80));
    const __mmask16 nan =
        _mm256_cmpeq_epi16_mask(_mm256_and_si256(h, _mm256_set1_epi16(0x3f80)),
                                _mm256_set1_epi16(0x3f80));
    return _mm512_cvtph_ps(
        _mm256_mask_add_epi16(h, nan, h, _mm256_set1_epi16(0x3e80)));
}
/* A block's float16 d on every lane (F16C). */
static inline __m512 block_d(const unsigned char *block)
{
    uint16_t d;
    memcpy(&d, block, sizeof d);
    return _mm512_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d)));
}
static inline __m512 q8_0_to_f32(const unsigned char *block, int k, __m512 d)
{
    const __m128i q =
        _mm_loadu_si128((const __m128i *)(const void *)(block + 2 + k));
    return _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)), d);
}
/* Q4_0's 16 values d·(n − 8), n = 0..15, on the lanes n: a block's d
 * takes the form of this table (VLOAD_BLOCK_D), from which vpermps picks
 * a nibble's value by the low 4 bits of its lane, exactly (d·(n − 8) is a
 * float32). Values 0..15 are the low nibbles of the 16 bytes, 16..31 the
 * high ones. */
static inline __m512 block_d_typed(const unsigned char *block, int type)
{
    const __m512 d = block_d(block);
    if (type != SDPA_Q4_0)
        return d;
    return _mm512_mul_ps(d, _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1,
                                           2, 3, 4, 5, 6, 7));
}
static inline __m512 q4_0_to_f32(const unsigned char *block, int k,
                                 __m512 table)
{
    const __m512i b = _mm512_cvtepu8_epi32(
        _mm_loadu_si128((const __m128i *)(const void *)(block + 2)));
    return _mm512_permutexvar_ps(k == 0 ? b : _mm512_srli_epi32(b, 4), table);
}
#define VLOAD_E4M3(p) e4m3_to_f32_scaled(p)
#define VLOAD_E5M2(p) e5m2_to_f32(p)
#define VLOAD_BLOCK_D(block, type) block_d_typed(block, type)
#define VLOAD_Q8_0(block, k, d) q8_0_to_f32(block, k, d)
#define VLOAD_Q4_0(block, k, d) q4_0_to_f32(block, k, d)
#include "kernels/rows_simd_impl.h"
#include "kernels/rows_simd_undef.h"

/* ---- double: 8 lanes ---- */
#define T double
#define SUF f64
#define W 8
#define VT __m512d
#define VI __m512i
#define VM __mmask8
#define VZERO() _mm512_setzero_pd()
#define VSET1(a) _mm512_set1_pd(a)
#define VSET1I(a) _mm512_set1_epi64(a)
#define VLOAD(p) _mm512_loadu_pd(p)
#define VSTORE(p, a) _mm512_storeu_pd(p, a)
#define VADD(a, b) _mm512_add_pd(a, b)
#define VSUB(a, b) _mm512_sub_pd(a, b)
#define VMUL(a, b) _mm512_mul_pd(a, b)
#define VDIV(a, b) _mm512_div_pd(a, b)
#define VMAX(a, b) _mm512_max_pd(a, b)
#define VAND(a, b) _mm512_and_pd(a, b)
#define VOR(a, b) _mm512_or_pd(a, b)
#define VANDNOT(a, b) _mm512_andnot_pd(a, b)
#define VFMA(a, b, c) _mm512_fmadd_pd(a, b, c)
#define VFNMA(a, b, c) _mm512_fnmadd_pd(a, b, c)
#define VCASTI(a) _mm512_castpd_si512(a)
#define VCASTF(a) _mm512_castsi512_pd(a)
#define VADDI(a, b) _mm512_add_epi64(a, b)
#define VSLLI(a, n) _mm512_slli_epi64(a, n)
#define VCMP_GE(a, b) _mm512_cmp_pd_mask(a, b, _CMP_GE_OQ)
#define VCMP_UNORD(a, b) _mm512_cmp_pd_mask(a, b, _CMP_UNORD_Q)
#define VBLENDV(a, b, m) _mm512_mask_blend_pd(m, a, b)
#define VKEEP(a, m) _mm512_maskz_mov_pd(m, a)
#define VM_NONE() ((__mmask8)0)
#define VM_OR(a, b) ((__mmask8)((a) | (b)))
#define VM_ANY(m) ((m) != 0)
static inline __mmask8 mask_forbids_f64(const uint8_t *p, bool nonzero_allows)
{
    __m128i bytes = _mm_loadl_epi64((const __m128i *)(const void *)p);
    __mmask16 lanes = nonzero_allows
                          ? _mm_cmpeq_epi8_mask(bytes, _mm_setzero_si128())
                          : _mm_cmpneq_epi8_mask(bytes, _mm_setzero_si128());
    return (__mmask8)(lanes & 0xFF); /* the upper 8 bytes are not ours */
}
#define MASK_FORBIDS(p, nonzero_allows) mask_forbids_f64(p, nonzero_allows)
#define KEEP_MASK(w, threshold)                                                \
    _mm256_cmpge_epu32_mask(                                                   \
        _mm256_loadu_si256((const __m256i *)(const void *)(w)),                \
        _mm256_set1_epi32((int)(threshold)))
#define ACC_VECS 16
#define FIRST_LANES_8(n) ((__mmask8)((1u << (n)) - 1))
#define VLOAD_PART(p, n) _mm512_maskz_loadu_pd(FIRST_LANES_8(n), p)
#define VSTORE_PART(p, a, n) _mm512_mask_storeu_pd(p, FIRST_LANES_8(n), a)
/* One vector of the lane sums of v[0..8), as hsum16_f32 with 2 lanes per
 * 128-bit lane: 256-bit halves, 128-bit quarters, then the pairs; lane
 * 2q + m gets input 4m + q's sum, so the inputs are taken transposed. */
static inline __m512d fold_pair_f64(__m512d a, __m512d b)
{
    return _mm512_add_pd(_mm512_shuffle_f64x2(a, b, 0x44),
                         _mm512_shuffle_f64x2(a, b, 0xEE));
}
static inline __m512d fold_quad_f64(__m512d ab, __m512d cd)
{
    return _mm512_add_pd(_mm512_shuffle_f64x2(ab, cd, 0x88),
                         _mm512_shuffle_f64x2(ab, cd, 0xDD));
}
static inline __m512d hsum8_f64(const __m512d *v)
{
#define IN(p) v[(p) % 4 * 2 + (p) / 4]
    __m512d y0 =
        fold_quad_f64(fold_pair_f64(IN(0), IN(1)), fold_pair_f64(IN(2), IN(3)));
    __m512d y1 =
        fold_quad_f64(fold_pair_f64(IN(4), IN(5)), fold_pair_f64(IN(6), IN(7)));
#undef IN
    return _mm512_add_pd(_mm512_unpacklo_pd(y0, y1),
                         _mm512_unpackhi_pd(y0, y1));
}
#define VHSUMW(v) hsum8_f64(v)
#include "kernels/rows_simd_impl.h"
#include "kernels/rows_simd_undef.h"
#undef FIRST_LANES_16
#undef FIRST_LANES_8

#endif /* x86 */
