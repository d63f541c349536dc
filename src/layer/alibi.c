/* The standard ALiBi slopes (Press, Smith and Lewis, "Train Short, Test
 * Long"; ggml's max_bias generalises their 8): a geometric sequence over
 * the largest power of two n <= H heads, and for the H − n heads beyond it
 * the odd terms of the 2n-head sequence, which fall between the first n. */

#include "sdpa.h"

#include <math.h>

int sdpa_alibi_slopes(int64_t heads, double max_bias, double *slopes)
{
    if (heads <= 0)
        return SDPA_ERR_BAD_DIM;
    if (!slopes)
        return SDPA_ERR_NULL_POINTER;
    if (!(isfinite(max_bias) && max_bias >= 0))
        return SDPA_ERR_BAD_ALIBI;
    double bias = max_bias == 0 ? 8 : max_bias;
    int64_t n = 1; /* the largest power of two <= heads */
    while (n <= heads / 2)
        n *= 2;
    for (int64_t h = 0; h < heads; h++)
        slopes[h] =
            h < n ? exp2(-bias * (double)(h + 1) / (double)n)
                  : exp2(-bias * (double)(2 * (h - n) + 1) / (double)(2 * n));
    return SDPA_OK;
}
