/*
 * The AVX2+FMA+F16C row kernels. Only this file is compiled with -mavx2
 * -mfma -mf16c; rows_dispatch.c calls it only after CPU detection says it
 * may. The algorithm is in rows_simd_impl.h, written once over the macros
 * below. Lane masks are vectors here: all-ones lanes for true.
 */
#if defined(__x86_64__) || defined(__i386__)

#include "kernels/rows.h"
#include "core/template.h"
#include "kernels/vexp.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* The kernel tables sdpa_rows_avx2_f32/_f64 over the static kernels
 * KERNEL_NAME(x) = sdpa_rows_avx2_x_f32/_f64 of rows_simd_impl.h, and
 * their own copies of rows_scalar_impl.h's helpers (HACKING.md's naming
 * rule). */
#define ROW_KERNELS sdpa_rows_avx2

/* Philox4x32-10 (philox.h) for the dropout kernel, 4 counters a vector:
 * each word in the low half of a 64-bit lane, where vpmuludq takes its
 * operand and leaves the whole product (the low word in place, the high
 * one a shift away); the high halves hold garbage no step reads.
 * PHILOX_VECS vectors at once: one round is a chain of dependent steps,
 * so independent counters keep the units busy (rows_avx512.c has the
 * measurements). */
enum { PHILOX_VECS = 4 };

/* The words of `blocks` blocks of a row from block `block` on, in key
 * order (block b's 4 words at out[4b]), 4·PHILOX_VECS blocks at a time
 * (so up to that many minus one more than asked). */
static void philox_words_avx2(uint32_t *out, const sdpa_dropout_row *row,
                              uint32_t block, int64_t blocks)
{
    const __m256i m0 = _mm256_set1_epi64x(SDPA_PHILOX_M0);
    const __m256i m1 = _mm256_set1_epi64x(SDPA_PHILOX_M1);
    const __m256i lanes = _mm256_setr_epi64x(0, 1, 2, 3);
    for (int64_t b = 0; b < blocks; b += 4 * PHILOX_VECS) {
        __m256i c0[PHILOX_VECS], c1[PHILOX_VECS], c2[PHILOX_VECS],
            c3[PHILOX_VECS];
        for (int u = 0; u < PHILOX_VECS; u++) {
            c0[u] = _mm256_add_epi64(
                _mm256_set1_epi64x((int64_t)block + b + 4 * u), lanes);
            c1[u] = _mm256_set1_epi64x(row->row);
            c2[u] = _mm256_set1_epi64x(row->stream[0]);
            c3[u] = _mm256_set1_epi64x(row->stream[1]);
        }
        uint32_t k0 = row->key[0], k1 = row->key[1];
        for (int r = 0; r < SDPA_PHILOX_ROUNDS; r++) {
            const __m256i vk0 = _mm256_set1_epi64x(k0);
            const __m256i vk1 = _mm256_set1_epi64x(k1);
            for (int u = 0; u < PHILOX_VECS; u++) {
                __m256i p0 = _mm256_mul_epu32(c0[u], m0);
                __m256i p1 = _mm256_mul_epu32(c2[u], m1);
                c0[u] = _mm256_xor_si256(
                    _mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1[u]), vk0);
                c2[u] = _mm256_xor_si256(
                    _mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3[u]), vk1);
                c1[u] = p1;
                c3[u] = p0;
            }
            k0 += SDPA_PHILOX_W0;
            k1 += SDPA_PHILOX_W1;
        }
        for (int u = 0; u < PHILOX_VECS; u++, out += 16) {
            /* 64-bit lane l: words 0, 1 of block l, and words 2, 3 */
            __m256i w01 =
                _mm256_blend_epi32(c0[u], _mm256_slli_epi64(c1[u], 32), 0xAA);
            __m256i w23 =
                _mm256_blend_epi32(c2[u], _mm256_slli_epi64(c3[u], 32), 0xAA);
            /* 128-bit lanes: blocks 0, 2 and 1, 3 */
            __m256i even = _mm256_unpacklo_epi64(w01, w23);
            __m256i odd = _mm256_unpackhi_epi64(w01, w23);
            __m256i *dst = (__m256i *)(void *)out;
            _mm256_storeu_si256(dst,
                                _mm256_permute2x128_si256(even, odd, 0x20));
            _mm256_storeu_si256(dst + 1,
                                _mm256_permute2x128_si256(even, odd, 0x31));
        }
    }
}
#define PHILOX_LANES (4 * PHILOX_VECS)
#define PHILOX_WORDS(out, row, block, blocks)                                  \
    philox_words_avx2(out, row, block, blocks)

/* The lanes whose Philox word (unsigned) reaches the threshold, all-ones:
 * signed compares of the words with their top bit flipped. */
static inline __m256i philox_drops_avx2(__m256i words, uint32_t threshold)
{
    const __m256i top = _mm256_set1_epi32(INT32_MIN);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(threshold ^ 0x80000000u)),
                              _mm256_xor_si256(words, top));
}

/* ---- float: 8 lanes ---- */
#define T float
#define SUF f32
#define W 8
#define VT __m256
#define VI __m256i
#define VM __m256
#define VZERO() _mm256_setzero_ps()
#define VSET1(a) _mm256_set1_ps(a)
#define VSET1I(a) _mm256_set1_epi32(a)
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, a) _mm256_storeu_ps(p, a)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VDIV(a, b) _mm256_div_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VAND(a, b) _mm256_and_ps(a, b)
#define VOR(a, b) _mm256_or_ps(a, b)
#define VANDNOT(a, b) _mm256_andnot_ps(a, b)     /* ~a & b */
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)   /* a·b + c */
#define VFNMA(a, b, c) _mm256_fnmadd_ps(a, b, c) /* c − a·b */
#define VCASTI(a) _mm256_castps_si256(a)
#define VCASTF(a) _mm256_castsi256_ps(a)
#define VADDI(a, b) _mm256_add_epi32(a, b)
#define VSLLI(a, n) _mm256_slli_epi32(a, n)
#define VCMP_GE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define VCMP_UNORD(a, b) _mm256_cmp_ps(a, b, _CMP_UNORD_Q)
#define VBLENDV(a, b, m) _mm256_blendv_ps(a, b, m) /* m ? b : a */
#define VKEEP(a, m) _mm256_and_ps(a, m)            /* m ? a : 0 */
#define VM_NONE() _mm256_setzero_ps()
#define VM_OR(a, b) _mm256_or_ps(a, b)
#define VM_ANY(m) (_mm256_movemask_ps(m) != 0)
/* Lanes whose key the 8 mask bytes at p forbid: the zero bytes when nonzero
 * allows, the nonzero ones otherwise. */
static inline __m256 mask_forbids_f32(const uint8_t *p, bool nonzero_allows)
{
    __m128i bytes = _mm_loadl_epi64((const __m128i *)(const void *)p);
    __m256i zero =
        _mm256_cmpeq_epi32(_mm256_cvtepu8_epi32(bytes), _mm256_setzero_si256());
    __m256i flip = _mm256_set1_epi32(nonzero_allows ? 0 : -1);
    return _mm256_castsi256_ps(_mm256_xor_si256(zero, flip));
}
#define MASK_FORBIDS(p, nonzero_allows) mask_forbids_f32(p, nonzero_allows)
static inline __m256 keep_mask_f32(const uint32_t *w, uint32_t threshold)
{
    __m256i words = _mm256_loadu_si256((const __m256i *)(const void *)w);
    return _mm256_castsi256_ps(_mm256_xor_si256(
        philox_drops_avx2(words, threshold), _mm256_set1_epi32(-1)));
}
#define KEEP_MASK(w, threshold) keep_mask_f32(w, threshold)
/* 8 of the 16 registers hold accumulators, the rest the operands (key or
 * value vectors, a query or weight vector): nothing spills. */
#define ACC_VECS 8
/* All-ones in the first n (< 8) lanes: vmaskmov reads and writes only
 * those (and never faults on the others). */
static inline __m256i first_lanes_f32(int n)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}
#define VLOAD_PART(p, n) _mm256_maskload_ps(p, first_lanes_f32(n))
#define VSTORE_PART(p, a, n) _mm256_maskstore_ps(p, first_lanes_f32(n), a)
/* One vector of the lane sums of v[0..8) (lane l: v[l]'s): pairwise adds
 * within 128-bit halves twice, then the halves. */
static inline __m256 hsum8_f32(const __m256 *v)
{
    __m256 h0 =
        _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
    __m256 h1 =
        _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(h0, h1, 0x20),
                         _mm256_permute2f128_ps(h0, h1, 0x31));
}
#define VHSUMW(v) hsum8_f32(v)
/* 8 halves at p (16 bytes); halves_part: the first n (< 8), then zeros.
 * There is no 16-bit masked load before AVX-512: a stack copy (only row
 * tails take it). */
static inline __m128i halves(const uint16_t *p)
{
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}
static inline __m128i halves_part(const uint16_t *p, int n)
{
    uint16_t b[8] = {0};
    memcpy(b, p, (size_t)n * sizeof *p);
    return halves(b);
}
/* bfloat16 → float is a shift into the top half of each 32-bit lane. */
static inline __m256 bf16_to_f32(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
#define VLOAD_F16(p) _mm256_cvtph_ps(halves(p))
#define VLOAD_F16_PART(p, n) _mm256_cvtph_ps(halves_part(p, n))
#define VLOAD_BF16(p) bf16_to_f32(halves(p))
#define VLOAD_BF16_PART(p, n) bf16_to_f32(halves_part(p, n))
/* vcvtps2ph with an explicit nearest-even rounds as sdpa_f32_to_f16 does,
 * NaNs included (quiet, sign and top payload kept: tests/test_half.c). */
#define VSTORE_F16(p, a)                                                       \
    _mm_storeu_si128(                                                          \
        (__m128i *)(void *)(p),                                                \
        _mm256_cvtps_ph(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC))
/* sdpa_f32_to_bf16 on 8 lanes: nearest even by integer addition, NaN →
 * its top half with the quiet bit set; then the 32-bit lanes (each below
 * 2^16, so the unsigned saturation never acts) packed to 16 bits. */
static inline void store_bf16(uint16_t *p, __m256 a)
{
    __m256i x = _mm256_castps_si256(a), top = _mm256_srli_epi32(x, 16);
    __m256i odd = _mm256_and_si256(top, _mm256_set1_epi32(1));
    __m256i sum = _mm256_add_epi32(x, _mm256_set1_epi32(0x7fff));
    __m256i r = _mm256_srli_epi32(_mm256_add_epi32(sum, odd), 16);
    __m256i quiet = _mm256_or_si256(top, _mm256_set1_epi32(0x40));
    __m256 nan = _mm256_cmp_ps(a, a, _CMP_UNORD_Q);
    r = _mm256_blendv_epi8(r, quiet, _mm256_castps_si256(nan));
    _mm_storeu_si128((__m128i *)(void *)p,
                     _mm_packus_epi32(_mm256_castsi256_si128(r),
                                      _mm256_extracti128_si256(r, 1)));
}
#define VSTORE_BF16(p, a) store_bf16(p, a)
/* The quantized K/V types (quant.h's bits), as in rows_avx512.c on 8
 * lanes: 8 FP8 codes as 16-bit lanes; E5M2 a float16's top byte; E4M3 as
 * value / 2^8, its bits placed in a float16, S.1111.111 made float16's
 * quiet NaN 0x7e00 of its sign. */
static inline __m128i fp8_lanes(const unsigned char *p)
{
    return _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
}
static inline __m256 e5m2_to_f32(const unsigned char *p)
{
    return _mm256_cvtph_ps(_mm_slli_epi16(fp8_lanes(p), 8));
}
static inline __m256 e4m3_to_f32_scaled(const unsigned char *p)
{
    const __m128i c =
        _mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(const void *)p));
    const __m128i h =
        _mm_and_si128(_mm_slli_epi16(c, 7), _mm_set1_epi16((short)0xbf80));
    const __m128i nan = _mm_cmpeq_epi16(
        _mm_and_si128(h, _mm_set1_epi16(0x3f80)), _mm_set1_epi16(0x3f80));
    return _mm256_cvtph_ps(
        _mm_add_epi16(h, _mm_and_si128(nan, _mm_set1_epi16(0x3e80))));
}
/* A block's float16 d on every lane (F16C). */
static inline __m256 block_d(const unsigned char *block)
{
    uint16_t d;
    memcpy(&d, block, sizeof d);
    return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d)));
}
static inline __m256 q8_0_to_f32(const unsigned char *block, int k, __m256 d)
{
    const __m128i q =
        _mm_loadl_epi64((const __m128i *)(const void *)(block + 2 + k));
    return _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d);
}
/* Values 0..15 are the low nibbles of the 16 bytes, 16..31 the high ones:
 * 8 values from value k are bytes k % 16 .. k % 16 + 8. */
static inline __m256 q4_0_to_f32(const unsigned char *block, int k, __m256 d)
{
    const __m256i b = _mm256_cvtepu8_epi32(
        _mm_loadl_epi64((const __m128i *)(const void *)(block + 2 + k % 16)));
    const __m256i q = k < 16 ? _mm256_and_si256(b, _mm256_set1_epi32(15))
                             : _mm256_srli_epi32(b, 4);
    return _mm256_mul_ps(
        _mm256_cvtepi32_ps(_mm256_sub_epi32(q, _mm256_set1_epi32(8))), d);
}
#define VLOAD_E4M3(p) e4m3_to_f32_scaled(p)
#define VLOAD_E5M2(p) e5m2_to_f32(p)
#define VLOAD_BLOCK_D(block, type) block_d(block)
#define VLOAD_Q8_0(block, k, d) q8_0_to_f32(block, k, d)
#define VLOAD_Q4_0(block, k, d) q4_0_to_f32(block, k, d)
#include "kernels/rows_simd_impl.h"
#include "kernels/rows_simd_undef.h"

/* ---- double: 4 lanes ---- */
#define T double
#define SUF f64
#define W 4
#define VT __m256d
#define VI __m256i
#define VM __m256d
#define VZERO() _mm256_setzero_pd()
#define VSET1(a) _mm256_set1_pd(a)
#define VSET1I(a) _mm256_set1_epi64x(a)
#define VLOAD(p) _mm256_loadu_pd(p)
#define VSTORE(p, a) _mm256_storeu_pd(p, a)
#define VADD(a, b) _mm256_add_pd(a, b)
#define VSUB(a, b) _mm256_sub_pd(a, b)
#define VMUL(a, b) _mm256_mul_pd(a, b)
#define VDIV(a, b) _mm256_div_pd(a, b)
#define VMAX(a, b) _mm256_max_pd(a, b)
#define VAND(a, b) _mm256_and_pd(a, b)
#define VOR(a, b) _mm256_or_pd(a, b)
#define VANDNOT(a, b) _mm256_andnot_pd(a, b)
#define VFMA(a, b, c) _mm256_fmadd_pd(a, b, c)
#define VFNMA(a, b, c) _mm256_fnmadd_pd(a, b, c)
#define VCASTI(a) _mm256_castpd_si256(a)
#define VCASTF(a) _mm256_castsi256_pd(a)
#define VADDI(a, b) _mm256_add_epi64(a, b)
#define VSLLI(a, n) _mm256_slli_epi64(a, n)
#define VCMP_GE(a, b) _mm256_cmp_pd(a, b, _CMP_GE_OQ)
#define VCMP_UNORD(a, b) _mm256_cmp_pd(a, b, _CMP_UNORD_Q)
#define VBLENDV(a, b, m) _mm256_blendv_pd(a, b, m)
#define VKEEP(a, m) _mm256_and_pd(a, m)
#define VM_NONE() _mm256_setzero_pd()
#define VM_OR(a, b) _mm256_or_pd(a, b)
#define VM_ANY(m) (_mm256_movemask_pd(m) != 0)
static inline __m256d mask_forbids_f64(const uint8_t *p, bool nonzero_allows)
{
    int32_t word;
    memcpy(&word, p, sizeof word);
    __m256i zero = _mm256_cmpeq_epi64(
        _mm256_cvtepu8_epi64(_mm_cvtsi32_si128(word)), _mm256_setzero_si256());
    __m256i flip = _mm256_set1_epi64x(nonzero_allows ? 0 : -1);
    return _mm256_castsi256_pd(_mm256_xor_si256(zero, flip));
}
#define MASK_FORBIDS(p, nonzero_allows) mask_forbids_f64(p, nonzero_allows)
static inline __m256d keep_mask_f64(const uint32_t *w, uint32_t threshold)
{
    __m128i words = _mm_loadu_si128((const __m128i *)(const void *)w);
    __m128i drops =
        _mm_cmpgt_epi32(_mm_set1_epi32((int)(threshold ^ 0x80000000u)),
                        _mm_xor_si128(words, _mm_set1_epi32(INT32_MIN)));
    return _mm256_castsi256_pd(
        _mm256_xor_si256(_mm256_cvtepi32_epi64(drops), _mm256_set1_epi64x(-1)));
}
#define KEEP_MASK(w, threshold) keep_mask_f64(w, threshold)
#define ACC_VECS 8
static inline __m256i first_lanes_f64(int n)
{
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(n),
                              _mm256_setr_epi64x(0, 1, 2, 3));
}
#define VLOAD_PART(p, n) _mm256_maskload_pd(p, first_lanes_f64(n))
#define VSTORE_PART(p, a, n) _mm256_maskstore_pd(p, first_lanes_f64(n), a)
/* One vector of the lane sums of v[0..4): pairs within 128-bit halves,
 * then the halves. */
static inline __m256d hsum4_f64(const __m256d *v)
{
    __m256d h0 = _mm256_hadd_pd(v[0], v[1]), h1 = _mm256_hadd_pd(v[2], v[3]);
    return _mm256_add_pd(_mm256_permute2f128_pd(h0, h1, 0x20),
                         _mm256_permute2f128_pd(h0, h1, 0x31));
}
#define VHSUMW(v) hsum4_f64(v)
#include "kernels/rows_simd_impl.h"
#include "kernels/rows_simd_undef.h"

#endif /* x86 */
