/* Per-row helpers the path templates share, for one T/SUF.
 *
 * ALiBi's term of the logits: x[j] −= slope · |distance + j| for j in
 * [0, n), where
 * distance is the first key's offset from the row's diagonal (key − d_i).
 * Distances are exact integers; one rounding each for the product and the
 * sum, as for a bias added from memory. */
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
