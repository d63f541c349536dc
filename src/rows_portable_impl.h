/* Portable row kernels, one instantiation per T/SUF (see rows.h). */
#include "rows_scalar_impl.h"

static T NAME(portable_mask_max)(T *x, int64_t n, const T *bias,
                                 const uint8_t *mask, bool mask_nonzero_allows)
{
    bool nan = false;
    T m = NAME(scalar_mask_max)(x, 0, n, bias, mask, mask_nonzero_allows,
                                (T)-INFINITY, &nan);
    return nan ? (T)NAN : m;
}

static T NAME(portable_exp_sum)(T *x, int64_t n, T m)
{
    return NAME(scalar_exp_sum)(x, 0, n, m, 0);
}

static void NAME(portable_scale)(T *x, int64_t n, T c)
{
    NAME(scalar_scale)(x, 0, n, c);
}

static void NAME(portable_softcap)(T *x, int64_t n, T c)
{
    NAME(scalar_softcap)(x, 0, n, c);
}

const NAME(sdpa_row_kernels) NAME(sdpa_rows_portable) = {
    NAME(portable_mask_max),
    NAME(portable_exp_sum),
    NAME(portable_scale),
    NAME(portable_softcap),
};
