/*
 * The row kernels: the few operations of the masked softmax that touch every
 * score, in a portable C version, an AVX2+FMA version and an AVX-512 version
 * (rows_simd_impl.h for both vector ones), chosen at run time.
 * Each kernel set exists for float (f32) and double (f64) from one template.
 *
 * All of them work on one row of n scores x[0..n), in place:
 *   mask_max  x += bias (if any); forbidden (mask says so, or bias -inf)
 *             → -inf; returns the max over x (-inf if none allowed).
 *   exp_sum   x = exp(x - m), -inf → exactly 0; returns the sum.
 *   scale     x *= c.
 *   softcap   x = c·tanh(x/c), the logit soft-cap (NaN stays NaN, ±0 stays
 *             ±0, ±inf → ±c), accurate relative to the logit s = x:
 *               |error| <= 8·eps·min(|s|, c)   (eps of the dtype)
 *             (relative for small logits, within 8·eps·c for large ones).
 *             With y = |s|·(1/c), 1/c rounded (y within eps of |s|/c):
 *             y < 1/2: |s|·(1 + z·Q(z)), z = y², Q the Taylor series of
 *               (tanh(y)/y − 1)/z cut after 7 (float) / 16 (double) terms
 *               (vexp.h; cut-off < 0.08 eps). |z·Q| < 0.076, so the
 *               errors of y, z and Horner (< 5 eps relative) reach the
 *               result damped by 0.076: within 1.1·eps·|s| with the final
 *               rounding.
 *             y >= 1/2: c·(1 − e)/(1 + e), e = exp(−2y) (vexp.h, 2 ulp).
 *               e's error reaches t = (1 − e)/(1 + e) times 1/sinh(2y) <=
 *               0.85: t within 3.2 eps relative with the three roundings,
 *               c·t within 3.7·eps·c·tanh(y) <= 3.5·eps·|s|; y's error
 *               adds c·y·sech²(y)·eps <= eps·min(0.79|s|, 0.45c): within
 *               4.2·eps·min(|s|, c).
 *             The cap rounded to the dtype moves c·tanh(s/c) by at most
 *             0.22·eps·|s| and 0.5·eps·c, so the bound holds for the
 *             caller's cap too. Measured worst (caps 0.5 to 1000, |s| 1e-6
 *             to 2e6, tests/test_softcap.c): 2.1·eps·|s|, 1.35·eps·c. The
 *             vector kernels compute both branches (each only when a lane
 *             needs it) and blend by lane; the scalar code serves their
 *             tails.
 * mask_max: mask[j] != 0 forbids key j, or allows it when
 * mask_nonzero_allows is true.
 *
 * The streaming kernels of the decode path read K and V in their storage
 * type and compute in T. `type` (an SDPA_FLOAT* or quantized SDPA_* value)
 * is the storage type of the K / V rows, each named by its address: the
 * decode hands a block's rows over wherever its pages put them, in one
 * call (SDPA_FLOAT64 for T = double; the double sets do not look at it).
 * Strides (ld_*) count elements of T. Stored elements are widened or
 * decoded to T exactly (half.h, quant.h).
 *   dot_rows  s[r·ld_s + j] = c · Σ_{d<dim} q[r·ld_q + d] · K_j[d] for
 *             r < rows, j < n, key row K_j at k[j].
 *   acc_rows  acc[r·ld_a + d] += Σ_{j<n} p[r·ld_p + j] · V_j[d] for
 *             r < rows, d < dim, value row V_j at v[j].
 *             Adds to acc; every term is computed (0·inf and 0·NaN give
 *             NaN, as they must), none is skipped.
 *             Both read each key / value row from memory once for all the
 *             rows (1..8 typically, up to ~64), front to back, and widen
 *             it once per few rows (rows_simd_impl.h says how, and what
 *             that is worth). Nothing outside s[r·ld_s + j] (r < rows,
 *             j < n), resp. acc[r·ld_a + d] (d < dim), is written.
 *             Accuracy: that of T accumulation, within
 *             (terms + 2)·eps·Σ|products| of the exact value (terms = dim,
 *             resp. n, plus acc's own magnitude for acc_rows; eps of T;
 *             tests/test_half.c measures at most 0.39 of it). The order of
 *             the sums differs between kernel sets but depends on n, dim,
 *             rows and type only, so results are deterministic, whatever
 *             the alignment of the pointers.
 *             pf (NULL: none) names rows of other memory to ask the
 *             caches for while they work, spread over the keys: row j of
 *             pf at the step of key j (sdpa_row_prefetch). Prefetches
 *             change no result.
 *   widen     dst[i] = src[i] (of `type`) as T, exact, i < n.
 *   narrow    dst[i] = src[i] rounded to `type`: a copy for T's own type,
 *             else half.h's sdpa_f32_to_f16 / sdpa_f32_to_bf16, the same
 *             bits (NaNs included) in every kernel set.
 *
 * The dropout of a run of n keys of one row, x[j] the weight of logical
 * key key + j, kept when its Philox word (philox.h; row gives the key,
 * the row's counter words and the threshold) is at least the threshold:
 *   dropout   g (optional, the backward's dP row): g[j] = x[j]·(c·g[j] − d)
 *             if kept, x[j]·(0 − d) if dropped (each product and the
 *             difference rounded once, in that order: dS = P∘(Z̃∘dP − D));
 *             then x[j] = x[j]·c if kept, exactly 0 if dropped. The same
 *             mask in every kernel set, and the same bits (the scalar
 *             scalar_dropout of rows_scalar_impl.h is the reference).
 */
#ifndef SDPA_ROWS_H
#define SDPA_ROWS_H

#include "kernels/philox.h"

#include <stdbool.h>
#include <stdint.h>

/* Rows the streaming kernels prefetch in step with their own keys: row j
 * (j < rows) at base + j·stride bytes, its first `bytes` bytes, requested
 * when the kernel's pass from memory reaches key j. The hardware
 * prefetchers follow one run of rows, and lose it where a page of a
 * paged cache ends (a few KB) or where the stream turns from K to V; the
 * decode names the rows it will read next (V of the same keys while it
 * reads K, K of the next block while it reads V; the first block's K pass
 * also its own next page; the last block's V pass K of the first block of
 * the item started after its own), one row per key; where a block spans
 * several pages, their rows in turn (online_softmax.c, kv_hint).
 * Measured on Zen 5 (Ph: 32 heads, 4096 keys, f16, 16-key pages
 * shuffled, one core): 6.0 ms without, 3.2 ms with (1.8 ms unpaged),
 * 3.0 with the first block's own prefetch;
 * bursts of a whole page or block of prefetches at once gained nothing,
 * and huge pages under the pool about 5 %. Another Zen 5 guest, K/V read
 * cold (sdpa-bench, interleaved runs): 4.9-5.1 ms page after page, 3.2-3.3
 * ms with the pages in turn, against Gh's 2.4-2.5 ms unpaged. */
typedef struct sdpa_row_prefetch {
    const char *base;
    int64_t stride, rows, bytes;
    const struct sdpa_row_prefetch *also; /* more rows, same steps, or NULL */
    /* rows named by address instead: row j at row_at[j] (NULL: base +
     * j·stride); the decode's order across the pages of a block */
    const char *const *row_at;
} sdpa_row_prefetch;

/* Always 0. acc_rows adds it, masked with a value computed from the row
 * it has just read, to the index of the hint's row it prefetches, so that
 * the prefetch waits in hardware until that row is in: the prefetches of
 * the next block's K rows then keep pace with the V rows the pass needs
 * now instead of filling the core's miss buffers ahead of them. It lives
 * in rows_dispatch.c, where compilers cannot see that it is 0 and drop
 * the dependency. Measured on Zen 5 (Ph: 32 heads, 4096 keys, f16,
 * 16-key pages shuffled, one core, one build A/B): 2.26-2.32 ms paced
 * against 2.60-2.76 unpaced; contiguous K/V unchanged. Pacing the K
 * pass's prefetches of V the same way was slower (2.41-2.46 ms). */
extern int64_t sdpa_prefetch_pace_zero;

/* Row j of pf and of the hints it chains, where they name one. A build
 * with SDPA_PREFETCH_HINTS 0 (CMakeLists.txt, for sensitivity runs)
 * prefetches none. */
#ifndef SDPA_PREFETCH_HINTS
#define SDPA_PREFETCH_HINTS 1
#endif
static inline void sdpa_prefetch_row(const sdpa_row_prefetch *pf, int64_t j)
{
    if (!SDPA_PREFETCH_HINTS)
        return;
    for (; pf; pf = pf->also)
        if (j < pf->rows) {
            /* every line the row touches: a row that starts inside a
             * line (136-byte Q8_0 rows) ends in one more than its bytes
             * / 64 */
            const uintptr_t row =
                (uintptr_t)(pf->row_at ? pf->row_at[j]
                                       : pf->base + j * pf->stride);
            for (uintptr_t line = row & ~(uintptr_t)63;
                 line < row + (uintptr_t)pf->bytes; line += 64)
                __builtin_prefetch((const void *)line);
        }
}

#define SDPA_DECLARE_ROW_KERNELS(T, SUF)                                       \
    typedef struct sdpa_row_kernels_##SUF {                                    \
        T(*mask_max)                                                           \
        (T * x, int64_t n, const T *bias, const uint8_t *mask,                 \
         bool mask_nonzero_allows);                                            \
        T (*exp_sum)(T * x, int64_t n, T m);                                   \
        void (*scale)(T * x, int64_t n, T c);                                  \
        void (*softcap)(T * x, int64_t n, T c);                                \
        void (*dot_rows)(const T *q, int64_t ld_q, int64_t rows,               \
                         const char *const *k, int type, int64_t n,            \
                         int64_t dim, T c, T *s, int64_t ld_s,                 \
                         const sdpa_row_prefetch *pf);                         \
        void (*acc_rows)(const T *p, int64_t ld_p, int64_t rows,               \
                         const char *const *v, int type, int64_t n,            \
                         int64_t dim, T *acc, int64_t ld_a,                    \
                         const sdpa_row_prefetch *pf);                         \
        void (*widen)(const void *src, int type, T *dst, int64_t n);           \
        void (*narrow)(const T *src, int type, void *dst, int64_t n);          \
        void (*dropout)(T * x, int64_t n, const sdpa_dropout_row *row,         \
                        int64_t key, T c, T *g, T d);                          \
    } sdpa_row_kernels_##SUF;                                                  \
    extern const sdpa_row_kernels_##SUF sdpa_rows_portable_##SUF;              \
    extern const sdpa_row_kernels_##SUF sdpa_rows_avx2_##SUF;                  \
    extern const sdpa_row_kernels_##SUF sdpa_rows_avx512_##SUF;                \
    const sdpa_row_kernels_##SUF *sdpa_row_kernels_select_##SUF(int kernel);

/* Declares sdpa_row_kernels_f32 / sdpa_row_kernels_f64 (the types), the
 * tables sdpa_rows_portable_f32, sdpa_rows_portable_f64 (rows_portable.c),
 * sdpa_rows_avx2_f32, sdpa_rows_avx2_f64 (rows_avx2.c), sdpa_rows_avx512_f32,
 * sdpa_rows_avx512_f64 (rows_avx512.c), and sdpa_row_kernels_select_f32,
 * sdpa_row_kernels_select_f64 (rows_dispatch.c). */
SDPA_DECLARE_ROW_KERNELS(float, f32)
SDPA_DECLARE_ROW_KERNELS(double, f64)

#endif /* SDPA_ROWS_H */
