/*
 * Positional encodings (include/sdpa.h, 1.1): the sinusoidal table of
 * "Attention Is All You Need" and rotary embeddings (RoPE) in the
 * half-split (GPT-NeoX, Llama) and interleaved (GPT-J) styles.
 *
 * Angles. Pair r's frequency is f_r = base^(-2r/d) (d = dim, or
 * rotary_dim), one pow() per pair and call; the angle of position p is
 * p · f_r, one double product, computed directly for every position —
 * never by accumulating rotations, whose rounding errors would add up
 * along the sequence. What is left is the rounding of the product
 * (|p| · f_r · 2^-53), of pow (about |p| · f_r · 2^-53 again) and of the
 * exponent 2r/d, which moves f_r by f_r · ln(base) · (2r/d) · 2^-53, at
 * most 2^-53 / e: the angle is off by at most about 2.4 · |p| · 2^-53
 * radians — an error that grows with the position itself (the spacing of
 * doubles near p · f_r), not with the number of steps taken to reach it.
 * sin and cos (< 1 ulp in glibc) and the rotation (two products and a sum
 * in double, rounded once to the dtype) add a few units of 2^-53 of the
 * pair's norm.
 *
 * Bound, tested by tests/test_positions.c against the same rotation in
 * long double (sinl, cosl, angles p · powl(base, -2r/d)): every rotated
 * component of a float64 call is within (2.5 |p| + 8) · 2^-53 · ‖pair‖ —
 * 2.8e-10 · ‖pair‖ at |p| = 10^6 — and every value of the table within
 * (2.5 |p| + 8) · 2^-53. Measured at positions up to 10^6 (D = 128 and
 * 256, bases 10^4 and 5·10^5, x86-64, glibc 2.36): at most
 * 1.07e-10 · ‖pair‖, 0.51 of the bound at the worst position. A float32
 * call adds its final rounding, at most 2^-24 · ‖pair‖.
 */
#include "core/checked.h"
#include "layer/positions.h"
#include "sdpa.h"

#include <float.h>
#include <math.h>

/* The static store_strided_f32/_f64 and rotate_pairs_*, by HACKING.md's
 * naming rule. */
#define SDPA_TEMPLATE "layer/positions_impl.h"
#include "core/instantiate.h"

/* Pairs whose frequencies, sines and cosines are held at once (on the
 * stack: these functions take no context and allocate nothing). */
enum { PAIR_CHUNK = 64 };

static int check_dtype(int dtype)
{
    return dtype == SDPA_FLOAT32 || dtype == SDPA_FLOAT64;
}

/* 0 (the default, 10000) or a finite base of at least 1: the frequencies
 * base^(-2r/d) are then at most 1, so every angle p f_r is at most |p| <=
 * 2^63 and finite. A smaller base has frequencies above 1 (up to
 * 1/base), and a large position overflowed the angle to inf and the
 * rotated values to NaN; a subnormal base overflowed the frequencies
 * themselves (both found by the fuzzer). No model uses such a base. */
bool sdpa_position_base_ok(double base)
{
    return isfinite(base) && (base == 0 || base >= 1);
}

/* f_r = base^(-2r/d) for r = r0 .. r0 + n - 1. */
static void frequencies(double base, int64_t d, int64_t r0, int64_t n,
                        double *freq)
{
    for (int64_t k = 0; k < n; k++)
        freq[k] = pow(base, -(double)(2 * (r0 + k)) / (double)d);
}

int sdpa_sinusoidal_table(int dtype, int64_t tokens, int64_t dim,
                          int64_t offset, double base, void *table)
{
    if (!check_dtype(dtype))
        return SDPA_ERR_BAD_DTYPE;
    if (tokens <= 0 || dim <= 0)
        return SDPA_ERR_BAD_DIM;
    if (!table)
        return SDPA_ERR_NULL_POINTER;
    if (!sdpa_position_base_ok(base))
        return SDPA_ERR_BAD_SCALE;
    size_t esize = dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
    size_t bytes;
    if (!sdpa_mul_size((size_t)tokens, (size_t)dim, &bytes) ||
        !sdpa_mul_size(bytes, esize, &bytes) || bytes > PTRDIFF_MAX ||
        (uintptr_t)table > UINTPTR_MAX - bytes ||
        (offset > 0 && tokens - 1 > INT64_MAX - offset))
        return SDPA_ERR_OVERFLOW;
    base = base == 0 ? 10000.0 : base;

    /* Pairs r = 0 .. ceil(dim/2) - 1: column 2r holds the sine, column
     * 2r + 1 (when it exists: an odd dim ends with a sine) the cosine. */
    const int64_t pairs = (dim + 1) / 2;
    double freq[PAIR_CHUNK], s[PAIR_CHUNK], c[PAIR_CHUNK];
    for (int64_t r0 = 0; r0 < pairs; r0 += PAIR_CHUNK) {
        int64_t n = pairs - r0 < PAIR_CHUNK ? pairs - r0 : PAIR_CHUNK;
        int64_t n_cos = 2 * (r0 + n) <= dim ? n : n - 1;
        frequencies(base, dim, r0, n, freq);
        for (int64_t t = 0; t < tokens; t++) {
            double pos = (double)(offset + t);
            for (int64_t k = 0; k < n; k++) {
                double angle = pos * freq[k];
                s[k] = sin(angle);
                c[k] = cos(angle);
            }
            size_t first = (size_t)(t * dim + 2 * r0);
            if (dtype == SDPA_FLOAT32) {
                float *row = (float *)table + first;
                store_strided_f32(row, 2, s, n);
                store_strided_f32(row + 1, 2, c, n_cos);
            } else {
                double *row = (double *)table + first;
                store_strided_f64(row, 2, s, n);
                store_strided_f64(row + 1, 2, c, n_cos);
            }
        }
    }
    return SDPA_OK;
}

/* Would an in-place update of x touch one element twice? Sorted by
 * stride, every dimension must step past everything the inner ones
 * cover (the rule sdpa_forward applies to its outputs). */
static int writes_twice(const sdpa_tensor *x)
{
    int order[4] = {0, 1, 2, 3};
    for (int a = 1; a < 4; a++)
        for (int b = a; b > 0 && x->stride[order[b]] < x->stride[order[b - 1]];
             b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    int64_t covered = 0;
    for (int i = 0; i < 4; i++) {
        int d = order[i];
        if (x->shape[d] == 1)
            continue;
        if (x->stride[d] <= covered)
            return 1;
        if (x->shape[d] - 1 > (INT64_MAX - covered) / x->stride[d])
            return 0; /* too large to overlap: caught as overflow */
        covered += (x->shape[d] - 1) * x->stride[d];
    }
    return 0;
}

int sdpa_rope_apply(int dtype, sdpa_tensor x, const int64_t *positions,
                    int style, double base, int64_t rotary_dim)
{
    if (!check_dtype(dtype))
        return SDPA_ERR_BAD_DTYPE;
    if (!x.data)
        return SDPA_ERR_NULL_POINTER;
    for (int d = 0; d < 4; d++)
        if (x.shape[d] <= 0)
            return SDPA_ERR_BAD_DIM;
    const int64_t n_items = x.shape[0], heads = x.shape[1];
    const int64_t len = x.shape[2], dim = x.shape[3];
    if (style != SDPA_ROPE_HALF && style != SDPA_ROPE_INTERLEAVED)
        return SDPA_ERR_BAD_OPTION_VALUE;
    const int64_t rd = rotary_dim == 0 ? dim : rotary_dim;
    if (rotary_dim < 0 || rd > dim || rd % 2 != 0)
        return SDPA_ERR_BAD_OPTION_VALUE;
    if (!sdpa_position_base_ok(base))
        return SDPA_ERR_BAD_SCALE;
    for (int d = 0; d < 4; d++)
        if (x.stride[d] < 0)
            return SDPA_ERR_BAD_STRIDE;
    if (x.stride[3] != 1 || writes_twice(&x))
        return SDPA_ERR_BAD_STRIDE;
    size_t esize = dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
    size_t span = 1, step, rows;
    for (int d = 0; d < 4; d++)
        if (!sdpa_mul_size((size_t)(x.shape[d] - 1), (size_t)x.stride[d],
                           &step) ||
            !sdpa_add_size(span, step, &span))
            return SDPA_ERR_OVERFLOW;
    if (!sdpa_mul_size(span, esize, &span) || span > PTRDIFF_MAX ||
        (uintptr_t)x.data > UINTPTR_MAX - span ||
        !sdpa_mul_size((size_t)n_items, (size_t)len, &rows) ||
        rows > PTRDIFF_MAX)
        return SDPA_ERR_OVERFLOW;
    base = base == 0 ? 10000.0 : base;

    const int64_t half = rd / 2;
    double freq[PAIR_CHUNK], s[PAIR_CHUNK], c[PAIR_CHUNK];
    for (int64_t r0 = 0; r0 < half; r0 += PAIR_CHUNK) {
        int64_t n = half - r0 < PAIR_CHUNK ? half - r0 : PAIR_CHUNK;
        frequencies(base, rd, r0, n, freq);
        for (int64_t b = 0; b < n_items; b++)
            for (int64_t t = 0; t < len; t++) {
                int64_t p = positions ? positions[b * len + t] : t;
                for (int64_t k = 0; k < n; k++) {
                    double angle = (double)p * freq[k];
                    s[k] = sin(angle);
                    c[k] = cos(angle);
                }
                /* every head of the row shares the angles */
                for (int64_t h = 0; h < heads; h++) {
                    size_t at = (size_t)(b * x.stride[0] + h * x.stride[1] +
                                         t * x.stride[2]);
                    if (dtype == SDPA_FLOAT32)
                        rotate_pairs_f32((float *)x.data + at, style, half, r0,
                                         n, c, s);
                    else
                        rotate_pairs_f64((double *)x.data + at, style, half, r0,
                                         n, c, s);
                }
            }
    }
    return SDPA_OK;
}
