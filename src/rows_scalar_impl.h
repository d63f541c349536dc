/* Scalar row operations on x[from, n), for one T/SUF: the portable kernels
 * are these over whole rows, the AVX2 kernels use them for row tails. */

/* x += bias, forbidden → -inf; returns max(m, the new values) and ORs into
 * *nan whether a NaN was met (the max alone would drop it). */
static inline T NAME(scalar_mask_max)(T *x, int64_t from, int64_t n,
                                      const T *bias, const uint8_t *mask,
                                      bool mask_nonzero_allows, T m,
                                      bool *nan)
{
    for (int64_t j = from; j < n; j++) {
        T v = x[j];
        if (bias)
            v += bias[j];
        if (mask && (mask[j] != 0) != mask_nonzero_allows)
            v = (T)-INFINITY;
        x[j] = v;
        m = v > m ? v : m;
        *nan |= v != v;
    }
    return m;
}

/* x = exp(x − m); returns sum + the new values. */
static inline T NAME(scalar_exp_sum)(T *x, int64_t from, int64_t n, T m,
                                     T sum)
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

/* x = c·tanh(x/c) by the formula of rows.h (NaN stays NaN). */
static inline void NAME(scalar_softcap)(T *x, int64_t from, int64_t n, T c)
{
    for (int64_t j = from; j < n; j++) {
        T y = x[j] / c;
        T e = NAME(sdpa_exp_neg)(-2 * (y < 0 ? -y : y));
        T t = (1 - e) / (1 + e);
        if (y == y)
            x[j] = y < 0 ? -c * t : c * t;
    }
}
