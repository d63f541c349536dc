/* The positional encodings' element loops for one dtype (T/SUF), included
 * by positions.c through instantiate.h. The angles and their sines and
 * cosines are computed in double by the caller; here values are read from
 * and stored to T. */

/* dst[k · step] = (T)src[k] for k in [0, n). */
static void NAME(store_strided)(T *dst, int64_t step, const double *src,
                                int64_t n)
{
    for (int64_t k = 0; k < n; k++)
        dst[k * step] = (T)src[k];
}

/* Rotates the pairs r0 .. r0 + n - 1 of one row of x by the angles whose
 * cosines and sines are c[0..n) and s[0..n): the pair (a, b) becomes
 * (a·cos − b·sin, a·sin + b·cos), computed in double and rounded once.
 * Pair r is (r, r + half) in the half-split style, (2r, 2r + 1) in the
 * interleaved one. */
static void NAME(rotate_pairs)(T *x, int style, int64_t half, int64_t r0,
                               int64_t n, const double *c, const double *s)
{
    const int64_t step = style == SDPA_ROPE_HALF ? 1 : 2;
    const int64_t other = style == SDPA_ROPE_HALF ? half : 1;
    T *a = x + r0 * step;
    for (int64_t k = 0; k < n; k++, a += step) {
        double xa = (double)a[0], xb = (double)a[other];
        a[0] = (T)(xa * c[k] - xb * s[k]);
        a[other] = (T)(xa * s[k] + xb * c[k]);
    }
}
