/* Scalar row operations on x[from, n), for one T/SUF: the portable kernels
 * are these over whole rows, the vector kernels (AVX2, AVX-512) use them for
 * row tails. */
#include "kernels/half.h"
#include "kernels/philox.h"
#include "kernels/quant.h"

/* x += bias, forbidden → -inf; returns max(m, the new values) and ORs into
 * *nan whether a NaN was met (the max alone would drop it). */
static inline T NAME(scalar_mask_max)(T *x, int64_t from, int64_t n,
                                      const T *bias, const uint8_t *mask,
                                      bool mask_nonzero_allows, T m, bool *nan)
{
    for (int64_t j = from; j < n; j++) {
        T v = x[j];
        if (bias) /* a -inf bias forbids the key whatever its logit (NaN too) */
            v = bias[j] == (T)-INFINITY ? bias[j] : v + bias[j];
        if (mask && (mask[j] != 0) != mask_nonzero_allows)
            v = (T)-INFINITY;
        x[j] = v;
        m = v > m ? v : m;
        *nan |= v != v;
    }
    return m;
}

/* x = exp(x − m); returns sum + the new values. */
static inline T NAME(scalar_exp_sum)(T *x, int64_t from, int64_t n, T m, T sum)
{
    for (int64_t j = from; j < n; j++) {
        T e = NAME(sdpa_exp_neg)(x[j] - m);
        x[j] = e;
        sum += e;
    }
    return sum;
}

static inline void NAME(scalar_scale)(T *x, int64_t from, int64_t n, T c)
{
    for (int64_t j = from; j < n; j++)
        x[j] *= c;
}

/* Key j (j in [from, n)) of the run whose first is logical key `key`: kept
 * when its Philox word reaches the row's threshold (philox.h). The
 * gradient first, from x as it was (rows.h: dropout), then x itself. */
static inline void NAME(scalar_dropout_key)(T *x, T *g, int64_t j, bool keep,
                                            T c, T d)
{
    if (g) {
        T kept = keep ? c * g[j] : (T)0;
        T factor = kept - d;
        g[j] = x[j] * factor;
    }
    x[j] = keep ? x[j] * c : (T)0;
}

static inline void NAME(scalar_dropout)(T *x, int64_t from, int64_t n,
                                        const sdpa_dropout_row *row,
                                        int64_t key, T c, T *g, T d)
{
    uint32_t words[4];
    int64_t block = -1;
    for (int64_t j = from; j < n; j++) {
        int64_t k = key + j;
        if (k / 4 != block) {
            block = k / 4;
            sdpa_dropout_block(row, (uint32_t)block, words);
        }
        NAME(scalar_dropout_key)
        (x, g, j, words[k % 4] >= row->threshold, c, d);
    }
}

/* The soft-cap's two branches (rows.h), c·tanh(a/c) for a = |s| and
 * y = a·(1/c), 1/c rounded: a·(1 + z·Q(z)), z = y², below the threshold
 * (vexp.h), c·(1 − e)/(1 + e), e = exp(−2y), from it on. The vector kernels
 * compute both and blend by lane. */
static inline T NAME(softcap_small)(T a, T y)
{
    T z = y * y;
    T p = (T)sdpa_tanh_taylor[EXPC(TANH_TERMS)];
    for (int k = EXPC(TANH_TERMS) - 1; k >= 1; k--)
        p = p * z + (T)sdpa_tanh_taylor[k];
    return a + a * (z * p);
}

static inline T NAME(softcap_large)(T y, T c)
{
    T e = NAME(sdpa_exp_neg)(-2 * y);
    return c * ((1 - e) / (1 + e));
}

/* x = c·tanh(x/c) by the method of rows.h (NaN stays NaN, ±0 stays ±0,
 * ±inf → ±c). */
static inline void NAME(scalar_softcap)(T *x, int64_t from, int64_t n, T c)
{
    const T inv_c = 1 / c;
    for (int64_t j = from; j < n; j++) {
        T v = x[j];
        T a = signbit(v) ? -v : v;
        T y = a * inv_c;
        T r = y < EXPC(TANH_SMALL) ? NAME(softcap_small)(a, y)
                                   : NAME(softcap_large)(y, c);
        if (v == v)
            x[j] = signbit(v) ? -r : r;
    }
}

/* Does this T's kernel set read `type` as a half type? Only float's do
 * (rows.h); the double sets take every array as double. A constant after
 * inlining, so the other branches vanish. */
static inline bool NAME(reads_f16)(int type)
{
    return sizeof(T) == sizeof(float) && type == SDPA_FLOAT16;
}
static inline bool NAME(reads_bf16)(int type)
{
    return sizeof(T) == sizeof(float) && type == SDPA_BFLOAT16;
}

/* ... as a quantized type (quant.h)? Likewise float's only. */
static inline bool NAME(reads_quant)(int type)
{
    return sizeof(T) == sizeof(float) && sdpa_is_quant_type(type);
}

/* Bytes of one unit (an element, or a block of a block type) of an array
 * of `type`, as this T's set reads it. */
static inline size_t NAME(elem_size)(int type)
{
    if (NAME(reads_quant)(type))
        return sdpa_dtype_size(type);
    return NAME(reads_f16)(type) || NAME(reads_bf16)(type) ? 2 : sizeof(T);
}

/* Values in one such unit: 32 for a block type, else 1. */
static inline int64_t NAME(elem_values)(int type)
{
    return NAME(reads_quant)(type) ? sdpa_dtype_values(type) : 1;
}

/* dst[i] = src[i] widened to T (exactly), i in [from, n); a block type's
 * src starts at a block. */
static inline void NAME(scalar_widen)(const void *src, int type, T *dst,
                                      int64_t from, int64_t n)
{
    const uint16_t *h = src;
    if (NAME(reads_quant)(type))
        for (int64_t i = from; i < n; i++)
            dst[i] = (T)sdpa_quant_value(src, type, i);
    else if (NAME(reads_f16)(type))
        for (int64_t i = from; i < n; i++)
            dst[i] = sdpa_f16_to_f32(h[i]);
    else if (NAME(reads_bf16)(type))
        for (int64_t i = from; i < n; i++)
            dst[i] = sdpa_bf16_to_f32(h[i]);
    else if (n > from)
        memcpy(dst + from, (const T *)src + from,
               (size_t)(n - from) * sizeof(T));
}

/* dst[i] = src[i] rounded to `type` (half.h's functions), i in [from, n). */
static inline void NAME(scalar_narrow)(const T *src, int type, void *dst,
                                       int64_t from, int64_t n)
{
    uint16_t *h = dst;
    if (NAME(reads_f16)(type))
        for (int64_t i = from; i < n; i++)
            h[i] = sdpa_f32_to_f16((float)src[i]);
    else if (NAME(reads_bf16)(type))
        for (int64_t i = from; i < n; i++)
            h[i] = sdpa_f32_to_bf16((float)src[i]);
    else if (n > from)
        memcpy((T *)dst + from, src + from, (size_t)(n - from) * sizeof(T));
}
