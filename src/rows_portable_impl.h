/* Portable row kernels, one instantiation per T/SUF (see rows.h). */

static T NAME(portable_mask_max)(T *x, int64_t n, const T *bias,
                                 const uint8_t *mask, bool mask_nonzero_allows)
{
    T m = (T)-INFINITY;
    bool nan = false;
    for (int64_t j = 0; j < n; j++) {
        T v = x[j];
        if (bias)
            v += bias[j];
        if (mask && (mask[j] != 0) != mask_nonzero_allows)
            v = (T)-INFINITY;
        x[j] = v;
        m = v > m ? v : m;
        nan |= v != v;
    }
    return nan ? (T)NAN : m;
}

static T NAME(portable_exp_sum)(T *x, int64_t n, T m)
{
    T sum = 0;
    for (int64_t j = 0; j < n; j++) {
        T e = NAME(sdpa_exp_neg)(x[j] - m);
        x[j] = e;
        sum += e;
    }
    return sum;
}

static void NAME(portable_scale)(T *x, int64_t n, T c)
{
    for (int64_t j = 0; j < n; j++)
        x[j] *= c;
}

const NAME(sdpa_row_kernels) NAME(sdpa_rows_portable) = {
    NAME(portable_mask_max),
    NAME(portable_exp_sum),
    NAME(portable_scale),
};
