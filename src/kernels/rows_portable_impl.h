/* Portable row kernels, one instantiation per T/SUF (see rows.h). */
#include "kernels/rows_scalar_impl.h"

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

static void NAME(portable_dropout)(T *x, int64_t n, const sdpa_dropout_row *row,
                                   int64_t key, T c, T *g, T d)
{
    NAME(scalar_dropout)(x, 0, n, row, key, c, g, d);
}

/* Elements of one key / value row taken at a time by dot_rows and
 * acc_rows: widened (half types) into a stack buffer that every query row
 * then reads from L1, so the row leaves memory once whatever `rows` is. */
#ifndef SDPA_PORTABLE_CHUNK
#define SDPA_PORTABLE_CHUNK 256
#endif
/* A chunk starts at a block of a block type (32 values). */
_Static_assert(SDPA_PORTABLE_CHUNK % SDPA_QUANT_BLOCK == 0,
               "SDPA_PORTABLE_CHUNK must be whole quantized blocks");

/* Σ_{d<len} a[d]·b[d]: 8 lane sums in a fixed order (each lane's sum is
 * sequential, so compilers vectorise it without reassociating anything),
 * then the scalar tail and the lanes, in order. */
static T NAME(portable_dot)(const T *a, const T *b, int64_t len)
{
    T lane[8] = {0};
    int64_t d = 0;
    for (; d + 8 <= len; d += 8)
        for (int l = 0; l < 8; l++)
            lane[l] += a[d + l] * b[d + l];
    T sum = 0;
    for (; d < len; d++)
        sum += a[d] * b[d];
    for (int l = 0; l < 8; l++)
        sum += lane[l];
    return sum;
}

/* A chunk of the key / value row at `row` from element d0, len elements,
 * as T: in place for T's own type, else widened into buf. */
static const T *NAME(portable_row_chunk)(const char *row, int type, int64_t d0,
                                         int64_t len, T *buf)
{
    /* a block type's d0 / 32 counts units (rows_scalar_impl.h) */
    const int64_t es = (int64_t)NAME(elem_size)(type);
    const char *at = row + d0 / NAME(elem_values)(type) * es;
    if (es == (int64_t)sizeof(T))
        return (const T *)(const void *)at;
    NAME(scalar_widen)(at, type, buf, 0, len);
    return buf;
}

static void NAME(portable_dot_rows)(const T *q, int64_t ld_q, int64_t rows,
                                    const char *const *k, int type, int64_t n,
                                    int64_t dim, T c, T *s, int64_t ld_s,
                                    const sdpa_row_prefetch *pf)
{
    T buf[SDPA_PORTABLE_CHUNK];
    for (int64_t j = 0; j < n; j++) {
        sdpa_prefetch_row(pf, j);
        for (int64_t r = 0; r < rows; r++)
            s[r * ld_s + j] = 0;
        for (int64_t d0 = 0; d0 < dim; d0 += SDPA_PORTABLE_CHUNK) {
            int64_t len =
                dim - d0 < SDPA_PORTABLE_CHUNK ? dim - d0 : SDPA_PORTABLE_CHUNK;
            const T *kr = NAME(portable_row_chunk)(k[j], type, d0, len, buf);
            for (int64_t r = 0; r < rows; r++)
                s[r * ld_s + j] +=
                    NAME(portable_dot)(q + r * ld_q + d0, kr, len);
        }
        for (int64_t r = 0; r < rows; r++)
            s[r * ld_s + j] *= c;
    }
}

static void NAME(portable_acc_rows)(const T *p, int64_t ld_p, int64_t rows,
                                    const char *const *v, int type, int64_t n,
                                    int64_t dim, T *acc, int64_t ld_a,
                                    const sdpa_row_prefetch *pf)
{
    T buf[SDPA_PORTABLE_CHUNK];
    for (int64_t j = 0; j < n; j++) {
        sdpa_prefetch_row(pf, j);
        for (int64_t d0 = 0; d0 < dim; d0 += SDPA_PORTABLE_CHUNK) {
            int64_t len =
                dim - d0 < SDPA_PORTABLE_CHUNK ? dim - d0 : SDPA_PORTABLE_CHUNK;
            const T *vr = NAME(portable_row_chunk)(v[j], type, d0, len, buf);
            for (int64_t r = 0; r < rows; r++) {
                const T pr = p[r * ld_p + j];
                T *a = acc + r * ld_a + d0;
                for (int64_t d = 0; d < len; d++)
                    a[d] += pr * vr[d];
            }
        }
    }
}

static void NAME(portable_widen)(const void *src, int type, T *dst, int64_t n)
{
    NAME(scalar_widen)(src, type, dst, 0, n);
}

static void NAME(portable_narrow)(const T *src, int type, void *dst, int64_t n)
{
    NAME(scalar_narrow)(src, type, dst, 0, n);
}

const NAME(sdpa_row_kernels) NAME(sdpa_rows_portable) = {
    NAME(portable_mask_max), NAME(portable_exp_sum),  NAME(portable_scale),
    NAME(portable_softcap),  NAME(portable_dot_rows), NAME(portable_acc_rows),
    NAME(portable_widen),    NAME(portable_narrow),   NAME(portable_dropout),
};
