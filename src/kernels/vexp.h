/*
 * exp(x) for x <= 0: the only arguments a softmax needs once the row maximum
 * has been subtracted. One method for float and double, scalar here and
 * vector in rows_simd_impl.h (the same steps with intrinsics):
 *
 *   n = round(x · log2 e)            by adding and subtracting 1.5·2^p
 *   r = x − n·ln2_hi − n·ln2_lo      |r| <= ln2/2, exact (Cody–Waite)
 *   exp(r) = Σ_{k<=deg} r^k / k!     Horner; deg 7 (float), 13 (double):
 *                                    truncation < 2^-28 / 2^-58 relative
 *   exp(x) = exp(r) · 2^n            n + bias written into the exponent bits
 *
 * Error bound: at most 2 ulp (float and double) for every result in the
 * normal range; tests/test_kernels.c checks it against long double expl.
 * Results below the smallest normal number (x < -87.33 for float, x <
 * -708.39 for double) are flushed to exactly 0, an absolute error below
 * 2^-126 / 2^-1022 that cannot be seen next to a row sum >= 1. exp(-inf) is
 * exactly 0, so forbidden keys get weight exactly 0. NaN also gives 0: the
 * row kernels report a NaN logit (mask_max returns NaN) before any exp.
 */
#ifndef SDPA_VEXP_H
#define SDPA_VEXP_H

#include <stdint.h>
#include <string.h>

/* 1/k! for k = 0..13, the Taylor coefficients of exp. */
static const double sdpa_inv_factorial[14] = {
    1.0,
    1.0,
    1.0 / 2,
    1.0 / 6,
    1.0 / 24,
    1.0 / 120,
    1.0 / 720,
    1.0 / 5040,
    1.0 / 40320,
    1.0 / 362880,
    1.0 / 3628800,
    1.0 / 39916800,
    1.0 / 479001600,
    1.0 / 6227020800.0,
};

/* Per-type constants of the method above. */
#define SDPA_EXP_DEGREE_f32 7
#define SDPA_EXP_LOWEST_f32 (-87.33654f) /* log(FLT_MIN) */
#define SDPA_EXP_MAGIC_f32 12582912.0f   /* 1.5 · 2^23 */
#define SDPA_EXP_LOG2E_f32 1.44269504088896341f
#define SDPA_EXP_LN2HI_f32 0.693359375f /* 9 bits: n·ln2_hi is exact */
#define SDPA_EXP_LN2LO_f32 (-2.12194440e-4f)
#define SDPA_EXP_BIAS_f32 127
#define SDPA_EXP_MANT_f32 23

#define SDPA_EXP_DEGREE_f64 13
#define SDPA_EXP_LOWEST_f64 (-708.3964185322641) /* log(DBL_MIN) */
#define SDPA_EXP_MAGIC_f64 6755399441055744.0    /* 1.5 · 2^52 */
#define SDPA_EXP_LOG2E_f64 1.4426950408889634074
#define SDPA_EXP_LN2HI_f64 6.93147180369123816490e-01 /* fdlibm split */
#define SDPA_EXP_LN2LO_f64 1.90821492927058770002e-10
#define SDPA_EXP_BIAS_f64 1023
#define SDPA_EXP_MANT_f64 52

/*
 * tanh for the logit soft-cap (rows.h). For 0 <= y < SMALL:
 *
 *   tanh(y) = y·(1 + z·Q(z)),  z = y²,  Q(z) = Σ_{k=1..TERMS} a_k z^(k−1)
 *
 * the Taylor series tanh(y) = Σ_k a_k y^(2k+1) cut after a_TERMS. Its terms
 * alternate in sign and shrink (|a_(k+1)/a_k| <= 0.41, → 4/π²), so the
 * cut-off error is below the first term left out, |a_(TERMS+1)|·y^(2·TERMS
 * +2) relative to y. With SMALL = 1/2 that is 9.0e-9 = 0.076·eps (float,
 * TERMS = 7; 6 terms would leave 0.75·eps) and 1.0e-17 = 0.046·eps
 * (double, TERMS = 16; 15 would leave 0.45·eps): the fewest terms that
 * keep the cut-off below 0.1·eps. Above SMALL the soft-cap uses
 * (1 − e)/(1 + e), e = exp(−2y), whose error is exp's times 1/sinh(2y),
 * <= 0.85 there. SMALL = 1/2 by measurement: at 1/4 (4 and 10 terms) the
 * exp branch's worst grows to 2.6·eps·|s| (bound 6.7) to save ~10% only
 * where lanes mix; at 1/2 the usual logits, |s| < c/2, take the
 * polynomial alone, which costs about half the exp branch. The
 * coefficients, rounded, err by eps/2 each, damped like Q's other errors
 * (rows.h).
 */
static const double sdpa_tanh_taylor[17] = {
    1.0,                     /* a_0 = 1 */
    -0.33333333333333331,    /* -1/3 */
    0.13333333333333333,     /* 2/15 */
    -0.053968253968253971,   /* -17/315 */
    0.021869488536155203,    /* 62/2835 */
    -0.0088632355299021973,  /* -1382/155925 */
    0.0035921280365724811,   /* 21844/6081075 */
    -0.0014558343870513183,  /* -929569/638512875 */
    0.00059002744094558595,  /* 6404582/10854718875 */
    -0.00023912911424355248, /* -443861162/1856156927625 */
    9.6915379569294509e-05,  /* 18888466084/194896477400625 */
    -3.9278323883316833e-05, /* a_k = 2^(2k+2)·(2^(2k+2) − 1)·B_(2k+2) */
    1.5918905069328964e-05,  /*       / (2k+2)!, B the Bernoulli numbers, */
    -6.4516892156554306e-06, /* each the double nearest the rational */
    2.6147711512907546e-06,
    -1.0597268320104654e-06,
    4.2949110782738057e-07,
};
#define SDPA_EXP_TANH_SMALL_f32 0.5f
#define SDPA_EXP_TANH_TERMS_f32 7
#define SDPA_EXP_TANH_SMALL_f64 0.5
#define SDPA_EXP_TANH_TERMS_f64 16

/* Scalar version: sdpa_exp_neg_f32(float), sdpa_exp_neg_f64(double). */
#define SDPA_DEFINE_EXP_NEG(T, SUF, UINT)                                      \
    static inline T sdpa_exp_neg_##SUF(T x)                                    \
    {                                                                          \
        if (!(x >= SDPA_EXP_LOWEST_##SUF))                                     \
            return (T)0; /* tiny, -inf and NaN → 0 */                        \
        T t = x * SDPA_EXP_LOG2E_##SUF + SDPA_EXP_MAGIC_##SUF;                 \
        T n = t - SDPA_EXP_MAGIC_##SUF;                                        \
        T r = x - n * SDPA_EXP_LN2HI_##SUF;                                    \
        r = r - n * SDPA_EXP_LN2LO_##SUF;                                      \
        T p = (T)sdpa_inv_factorial[SDPA_EXP_DEGREE_##SUF];                    \
        for (int k = SDPA_EXP_DEGREE_##SUF - 1; k >= 0; k--)                   \
            p = p * r + (T)sdpa_inv_factorial[k];                              \
        UINT bits;                                                             \
        memcpy(&bits, &t, sizeof bits);                                        \
        /* The low bits of t hold n (two's complement): shift n + bias     */  \
        /* into the exponent field; the magic's own bits shift out.        */  \
        bits = (bits + SDPA_EXP_BIAS_##SUF) << SDPA_EXP_MANT_##SUF;            \
        T two_n;                                                               \
        memcpy(&two_n, &bits, sizeof two_n);                                   \
        return p * two_n;                                                      \
    }

SDPA_DEFINE_EXP_NEG(float, f32, uint32_t)
SDPA_DEFINE_EXP_NEG(double, f64, uint64_t)

#endif /* SDPA_VEXP_H */
