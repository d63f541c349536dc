/*
 * The AVX-512 row kernels (F, DQ, BW and VL: the x86-64-v4 set). Only this
 * file is compiled with those -m flags; rows_dispatch.c calls it only after
 * CPU detection says it may. The algorithm is rows_simd_impl.h, the same as
 * the AVX2 kernels' on twice the lanes, with lane masks in mask registers.
 * The 32 vector registers hold the four interleaved exps without spills.
 */
#if defined(__x86_64__) || defined(__i386__)

#include "rows.h"
#include "template.h"
#include "vexp.h"

#include <immintrin.h>
#include <math.h>
#include <string.h>

/* Defines the kernel tables sdpa_rows_avx512_f32 and sdpa_rows_avx512_f64 over
 * the static sdpa_rows_avx512_mask_max_f32, sdpa_rows_avx512_mask_max_f64,
 * sdpa_rows_avx512_exp_sum_f32, sdpa_rows_avx512_exp_sum_f64,
 * sdpa_rows_avx512_scale_f32, sdpa_rows_avx512_scale_f64,
 * sdpa_rows_avx512_softcap_f32, sdpa_rows_avx512_softcap_f64,
 * sdpa_rows_avx512_vexp_neg_f32, sdpa_rows_avx512_vexp_neg_f64
 * (rows_simd_impl.h, KERNEL_NAME), and their own copies of
 * rows_scalar_impl.h's helpers (rows_portable.c lists them). */
#define ROW_KERNELS sdpa_rows_avx512

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
#include "rows_simd_impl.h"
#include "rows_simd_undef.h"

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
#include "rows_simd_impl.h"
#include "rows_simd_undef.h"

#endif /* x86 */
