/*
 * The AVX2+FMA row kernels. Only this file is compiled with -mavx2 -mfma;
 * rows_dispatch.c calls it only after CPU detection says it may. The
 * algorithm is in rows_avx2_impl.h, written once over the macros below.
 */
#if defined(__x86_64__) || defined(__i386__)

#include "rows.h"
#include "template.h"
#include "vexp.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* ---- float: 8 lanes ---- */
#define T float
#define SUF f32
#define W 8
#define VT __m256
#define VZERO() _mm256_setzero_ps()
#define VSET1(a) _mm256_set1_ps(a)
#define VSET1I(a) _mm256_set1_epi32(a)
#define VLOAD(p) _mm256_loadu_ps(p)
#define VSTORE(p, a) _mm256_storeu_ps(p, a)
#define VADD(a, b) _mm256_add_ps(a, b)
#define VSUB(a, b) _mm256_sub_ps(a, b)
#define VMUL(a, b) _mm256_mul_ps(a, b)
#define VMAX(a, b) _mm256_max_ps(a, b)
#define VAND(a, b) _mm256_and_ps(a, b)
#define VOR(a, b) _mm256_or_ps(a, b)
#define VANDNOT(a, b) _mm256_andnot_ps(a, b) /* ~a & b */
#define VDIV(a, b) _mm256_div_ps(a, b)
#define VFMA(a, b, c) _mm256_fmadd_ps(a, b, c)   /* a·b + c */
#define VFNMA(a, b, c) _mm256_fnmadd_ps(a, b, c) /* c − a·b */
#define VBLENDV(a, b, m) _mm256_blendv_ps(a, b, m)
#define VCMP_GE(a, b) _mm256_cmp_ps(a, b, _CMP_GE_OQ)
#define VCMP_UNORD(a, b) _mm256_cmp_ps(a, b, _CMP_UNORD_Q)
#define VMOVEMASK(a) _mm256_movemask_ps(a)
#define VCASTI(a) _mm256_castps_si256(a)
#define VCASTF(a) _mm256_castsi256_ps(a)
#define VADDI(a, b) _mm256_add_epi32(a, b)
#define VSLLI(a, n) _mm256_slli_epi32(a, n)
/* all-ones lanes where the 8 mask bytes at p are 0 */
static inline __m256i mask_is_zero_f32(const uint8_t *p)
{
    __m128i bytes = _mm_loadl_epi64((const __m128i *)(const void *)p);
    return _mm256_cmpeq_epi32(_mm256_cvtepu8_epi32(bytes),
                              _mm256_setzero_si256());
}
#define MASK_IS_ZERO(p) mask_is_zero_f32(p)
#include "rows_avx2_impl.h"
#undef T
#undef SUF
#undef W
#undef VT
#undef VZERO
#undef VSET1
#undef VSET1I
#undef VLOAD
#undef VSTORE
#undef VADD
#undef VSUB
#undef VMUL
#undef VMAX
#undef VAND
#undef VOR
#undef VANDNOT
#undef VDIV
#undef VFMA
#undef VFNMA
#undef VBLENDV
#undef VCMP_GE
#undef VCMP_UNORD
#undef VMOVEMASK
#undef VCASTI
#undef VCASTF
#undef VADDI
#undef VSLLI
#undef MASK_IS_ZERO

/* ---- double: 4 lanes ---- */
#define T double
#define SUF f64
#define W 4
#define VT __m256d
#define VZERO() _mm256_setzero_pd()
#define VSET1(a) _mm256_set1_pd(a)
#define VSET1I(a) _mm256_set1_epi64x(a)
#define VLOAD(p) _mm256_loadu_pd(p)
#define VSTORE(p, a) _mm256_storeu_pd(p, a)
#define VADD(a, b) _mm256_add_pd(a, b)
#define VSUB(a, b) _mm256_sub_pd(a, b)
#define VMUL(a, b) _mm256_mul_pd(a, b)
#define VMAX(a, b) _mm256_max_pd(a, b)
#define VAND(a, b) _mm256_and_pd(a, b)
#define VOR(a, b) _mm256_or_pd(a, b)
#define VANDNOT(a, b) _mm256_andnot_pd(a, b)
#define VDIV(a, b) _mm256_div_pd(a, b)
#define VFMA(a, b, c) _mm256_fmadd_pd(a, b, c)
#define VFNMA(a, b, c) _mm256_fnmadd_pd(a, b, c)
#define VBLENDV(a, b, m) _mm256_blendv_pd(a, b, m)
#define VCMP_GE(a, b) _mm256_cmp_pd(a, b, _CMP_GE_OQ)
#define VCMP_UNORD(a, b) _mm256_cmp_pd(a, b, _CMP_UNORD_Q)
#define VMOVEMASK(a) _mm256_movemask_pd(a)
#define VCASTI(a) _mm256_castpd_si256(a)
#define VCASTF(a) _mm256_castsi256_pd(a)
#define VADDI(a, b) _mm256_add_epi64(a, b)
#define VSLLI(a, n) _mm256_slli_epi64(a, n)
/* all-ones lanes where the 4 mask bytes at p are 0 */
static inline __m256i mask_is_zero_f64(const uint8_t *p)
{
    int32_t word;
    memcpy(&word, p, sizeof word);
    return _mm256_cmpeq_epi64(_mm256_cvtepu8_epi64(_mm_cvtsi32_si128(word)),
                              _mm256_setzero_si256());
}
#define MASK_IS_ZERO(p) mask_is_zero_f64(p)
#include "rows_avx2_impl.h"

#endif /* x86 */
