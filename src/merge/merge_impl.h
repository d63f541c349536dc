/* sdpa_merge's two passes for one dtype; see merge.c. */

/* Element [n, h, t, 0] of a validated view of T (broadcast dimensions of
 * extent 1 are always indexed 0, so their strides never count). */
static T *NAME(merge_at)(const sdpa_tensor *x, int64_t n, int64_t h, int64_t t)
{
    int64_t offset = (x->shape[0] > 1 ? n * x->stride[0] : 0) +
                     (x->shape[1] > 1 ? h * x->stride[1] : 0) +
                     (x->shape[2] > 1 ? t * x->stride[2] : 0);
    return (T *)x->data + offset;
}

/* Pass 1, before anything is written: every partial lse is finite or -inf,
 * and (under the error policy) every row has a partial that saw a key. */
static int NAME(merge_check)(sdpa_ctx *ctx, const sdpa_merge_args *a,
                             bool empty_rows_zero)
{
    const sdpa_tensor *shape = &a->outs[0];
    for (int64_t n = 0; n < shape->shape[0]; n++)
        for (int64_t h = 0; h < shape->shape[1]; h++)
            for (int64_t t = 0; t < shape->shape[2]; t++) {
                bool any = false;
                for (int64_t p = 0; p < a->parts; p++) {
                    T v = *NAME(merge_at)(&a->lses[p], n, h, t);
                    if (isnan(v) || v == (T)INFINITY)
                        return sdpa_fail(
                            ctx, SDPA_ERR_NONFINITE,
                            "sdpa_merge: lses[%lld] at batch %lld, head %lld, "
                            "row %lld is %g: a partial lse must be finite, or "
                            "-inf for a partial without an allowed key",
                            (long long)p, (long long)n, (long long)h,
                            (long long)t, (double)v);
                    any |= v != (T)-INFINITY;
                }
                if (!any && !empty_rows_zero)
                    return sdpa_fail(
                        ctx, SDPA_ERR_FULLY_MASKED_ROW,
                        "sdpa_merge: batch %lld, head %lld, query row %lld has "
                        "no allowed key in any of the %lld partials (every "
                        "lse is -inf); set SDPA_OPT_EMPTY_ROWS to "
                        "SDPA_EMPTY_ROWS_ZERO to get a zero row instead",
                        (long long)n, (long long)h, (long long)t,
                        (long long)a->parts);
            }
    return SDPA_OK;
}

/* Pass 2: out_i = Σ_p exp(lse_p - lse) out_p, lse = m + log Σ_p exp(lse_p -
 * m), m = max_p lse_p, partials taken in the order 0..P-1. The weights are
 * computed in double. Row by row, every lse of the row is read before
 * anything of it is written, and partial 0's element d is read before
 * out's element d is written: out and lse may be partial 0's own views. */
static void NAME(merge_rows)(const sdpa_merge_args *a)
{
    const sdpa_tensor *shape = &a->outs[0];
    const int64_t dv = shape->shape[3];
    for (int64_t n = 0; n < shape->shape[0]; n++)
        for (int64_t h = 0; h < shape->shape[1]; h++)
            for (int64_t t = 0; t < shape->shape[2]; t++) {
                double m = -INFINITY, sum = 0;
                for (int64_t p = 0; p < a->parts; p++) {
                    double v = (double)*NAME(merge_at)(&a->lses[p], n, h, t);
                    m = v > m ? v : m;
                }
                T *out = NAME(merge_at)(&a->out, n, h, t);
                T lse = (T)-INFINITY;
                if (m == -INFINITY) { /* the zero-row policy (checked) */
                    for (int64_t d = 0; d < dv; d++)
                        out[d] = 0;
                } else {
                    for (int64_t p = 0; p < a->parts; p++) {
                        double v =
                            (double)*NAME(merge_at)(&a->lses[p], n, h, t);
                        if (v != -INFINITY)
                            sum += exp(v - m);
                    }
                    lse = (T)(m + log(sum));
                    bool first = true;
                    for (int64_t p = 0; p < a->parts; p++) {
                        double v =
                            (double)*NAME(merge_at)(&a->lses[p], n, h, t);
                        if (v == -INFINITY)
                            continue; /* never read: contributes nothing */
                        const T w = (T)(exp(v - m) / sum);
                        const T *x = NAME(merge_at)(&a->outs[p], n, h, t);
                        if (first)
                            for (int64_t d = 0; d < dv; d++)
                                out[d] = w * x[d];
                        else
                            for (int64_t d = 0; d < dv; d++)
                                out[d] += w * x[d];
                        first = false;
                    }
                }
                if (a->lse.data)
                    *NAME(merge_at)(&a->lse, n, h, t) = lse;
            }
}
