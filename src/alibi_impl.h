/* ALiBi's term of the logits, for one T/SUF (included by the path
 * templates): x[j] −= slope · |distance + j| for j in [0, n), where
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
