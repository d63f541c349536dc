/*
 * The row kernels: the few operations of the masked softmax that touch every
 * score, in a portable C version, an AVX2+FMA version and an AVX-512 version
 * (rows_simd_impl.h for both vector ones), chosen at run time.
 * Each kernel set exists for float (f32) and double (f64) from one template.
 *
 * All of them work on one row of n scores x[0..n), in place:
 *   mask_max  x += bias (if any); forbidden (mask says so, or bias -inf)
 *             → -inf; returns the max over x (-inf if none allowed).
 *   exp_sum   x = exp(x - m), -inf → exactly 0; returns the sum.
 *   scale     x *= c.
 *   softcap   x = c·tanh(x/c), the logit soft-cap (NaN stays NaN). As
 *             tanh(a) = (1 − e)/(1 + e) with e = exp(−2|a|) from the exp of
 *             vexp.h: an absolute error within 4 eps of tanh, so the capped
 *             logit is within 4·eps·c — what matters to the softmax, where
 *             a logit's absolute error is the weight's relative error.
 * mask_max: mask[j] != 0 forbids key j, or allows it when
 * mask_nonzero_allows is true.
 */
#ifndef SDPA_ROWS_H
#define SDPA_ROWS_H

#include <stdbool.h>
#include <stdint.h>

#define SDPA_DECLARE_ROW_KERNELS(T, SUF)                                       \
    typedef struct sdpa_row_kernels_##SUF {                                    \
        T (*mask_max)(T *x, int64_t n, const T *bias, const uint8_t *mask,     \
                      bool mask_nonzero_allows);                               \
        T (*exp_sum)(T *x, int64_t n, T m);                                    \
        void (*scale)(T *x, int64_t n, T c);                                   \
        void (*softcap)(T *x, int64_t n, T c);                                 \
    } sdpa_row_kernels_##SUF;                                                  \
    extern const sdpa_row_kernels_##SUF sdpa_rows_portable_##SUF;              \
    extern const sdpa_row_kernels_##SUF sdpa_rows_avx2_##SUF;                  \
    extern const sdpa_row_kernels_##SUF sdpa_rows_avx512_##SUF;                \
    const sdpa_row_kernels_##SUF *sdpa_row_kernels_select_##SUF(int kernel);

SDPA_DECLARE_ROW_KERNELS(float, f32)
SDPA_DECLARE_ROW_KERNELS(double, f64)

#endif /* SDPA_ROWS_H */
