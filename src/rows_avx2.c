/*
 * The AVX2+FMA row kernels. Only this file is compiled with -mavx2 -mfma;
 * rows_dispatch.c calls it only after CPU detection says it may. The
 * algorithm is in rows_simd_impl.h, written once over the macros below.
 * Lane masks are vectors here: all-ones lanes for true.
 */
#if defined(__x86_64__) || defined(__i386__)

#include "rows.h"
#include "template.h"
#include "vexp.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Defines the kernel tables sdpa_rows_avx2_f32 and sdpa_rows_avx2_f64 over
 * the static sdpa_rows_avx2_mask_max_f32, sdpa_rows_avx2_mask_max_f64,
 * sdpa_rows_avx2_exp_sum_f32, sdpa_rows_avx2_exp_sum_f64,
 * sdpa_rows_avx2_scale_f32, sdpa_rows_avx2_scale_f64,
 * sdpa_rows_avx2_softcap_f32, sdpa_rows_avx2_softcap_f64,
 * sdpa_rows_avx2_vexp_neg_f32, sdpa_rows_avx2_vexp_neg_f64
 * (rows_simd_impl.h, KERNEL_NAME), and their own copies of
 * rows_scalar_impl.h's helpers (rows_portable.c lists them). */
#define ROW_KERNELS sdpa_rows_avx2

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
#include "rows_simd_impl.h"
#include "rows_simd_undef.h"

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
#include "rows_simd_impl.h"
#include "rows_simd_undef.h"

#endif /* x86 */
