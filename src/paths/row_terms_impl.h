/* Per-row helpers the path templates share, for one T/SUF.
 *
 * ALiBi's term of the logits: x[j] −= slope · |distance + j| for j in
 * [0, n), where
 * distance is the first key's offset from the row's diagonal (key − d_i).
 * Distances are exact integers; one rounding each for the product and the
 * sum, as for a bias added from memory. */
/* Dropout's factor for the kept weights, 1/(1 − p), in the compute type. */
static inline T NAME(dropout_scale)(const sdpa_problem *p)
{
    return (T)1 / ((T)1 - (T)p->dropout_p);
}

static inline void NAME(add_alibi)(T *x, int64_t n, T slope, int64_t distance)
{
    for (int64_t j = 0; j < n; j++) {
        int64_t d = distance + j;
        x[j] -= slope * (T)(d < 0 ? -d : d);
    }
}

/* Σ_j x_j·(t_j − m) over the keys a row allows (x_j = exp(t_j − m) > 0,
 * t_j its final logit): the row's (or block's) part of the entropy's sum,
 * H = log ℓ − Σ_j e^{s_j − m}(s_j − m)/ℓ (sdpa_store_diagnostics). */
static inline T NAME(entropy_sum)(const T *x, const T *t, int64_t n, T m)
{
    T sum = 0;
    for (int64_t j = 0; j < n; j++)
        if (x[j] > 0)
            sum += x[j] * (t[j] - m);
    return sum;
}

/* The scores of dead keys (no row of the block may see them) are not
 * computed: rows [0, rows) of s (leading dimension ld) get 0 there, a
 * finite value the mask or bias then forbids in every row. */
static inline void NAME(zero_dead_scores)(T *s, int64_t ld, int64_t rows,
                                          const uint8_t *live, int64_t n)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t j = 0; j < n; j++)
            if (!live[j])
                s[r * ld + j] = 0;
}

/* n values of T rounded to storage type `type` into dst (nearest even);
 * false when one of them is not finite there (an output that overflows
 * float16's 65504 is an error, like one that overflows T). */
static inline bool NAME(store_values)(void *dst, int type, const T *src,
                                      int64_t n)
{
    bool finite = true;
    for (int64_t j = 0; j < n; j++) {
        float f = (float)src[j];
        uint16_t h;
        switch (type) {
        case SDPA_FLOAT16:
            h = sdpa_f32_to_f16(f);
            finite &= (h & 0x7c00u) != 0x7c00u;
            ((uint16_t *)dst)[j] = h;
            break;
        case SDPA_BFLOAT16:
            h = sdpa_f32_to_bf16(f);
            finite &= (h & 0x7f80u) != 0x7f80u;
            ((uint16_t *)dst)[j] = h;
            break;
        default:
            ((T *)dst)[j] = src[j];
            finite &= isfinite(src[j]) != 0;
        }
    }
    return finite;
}

/* Rows [j, j + n) of the K or V view of (b, KV head h), dim values each,
 * widened and gathered from their pages into dst (dim values a row): what
 * the BLAS reads when they are stored otherwise (sdpa_kv_staged). */
static inline void NAME(stage_kv_rows)(const sdpa_problem *p,
                                       const sdpa_view *view, int64_t dim,
                                       int64_t b, int64_t h, int64_t j,
                                       int64_t n, T *dst,
                                       const NAME(sdpa_row_kernels) * rk)
{
    /* strides in the view's units: blocks for a block type */
    const int64_t units = sdpa_kv_units(p, dim);
    const int64_t ld = sdpa_row_stride(view, units);
    const size_t es = sdpa_dtype_size(p->kv_type);
    for (int64_t x = 0; x < n;) {
        int64_t span = sdpa_kv_span(p, j + x, n - x);
        const char *src = sdpa_kv_row(p, view, b, h, j + x);
        if (ld == units) /* the span's rows are one array */
            rk->widen(src, p->kv_type, dst + x * dim, span * dim);
        else
            for (int64_t r = 0; r < span; r++)
                rk->widen(src + (size_t)(r * ld) * es, p->kv_type,
                          dst + (x + r) * dim, dim);
        x += span;
    }
}

/* n rows of K or V from key j of (b, KV head h) as T rows the BLAS reads:
 * the caller's own, or widened / gathered into dst (sdpa_kv_staged). */
static inline const T *NAME(blas_kv_rows)(const sdpa_problem *p,
                                          const NAME(sdpa_row_kernels) * rk,
                                          const sdpa_view *view, int64_t dim,
                                          int64_t b, int64_t h, int64_t j,
                                          int64_t n, T *dst, int64_t *ld)
{
    if (!sdpa_kv_staged(p)) {
        *ld = sdpa_row_stride(view, dim);
        return AT(view, b, h, j);
    }
    NAME(stage_kv_rows)(p, view, dim, b, h, j, n, dst, rk);
    *ld = dim;
    return dst;
}
