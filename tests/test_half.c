/*
 * The half-precision types (src/kernels/half.h) and the streaming kernels of
 * the row kernel sets (src/kernels/rows.h: widen, narrow, dot_rows, acc_rows),
 * internal API linked from the static library.
 *
 * Conversions, against the tests' decoders (half_codec.h) and a rounding
 * written here (ldexp and double arithmetic, no bit tricks shared with
 * half.h):
 *   - all 65536 binary16 and bfloat16 patterns to float: the value and sign
 *     exactly; NaN stays NaN of the same sign (binary16: made quiet,
 *     payload kept; bfloat16: the bits shifted);
 *   - float to half: every half value round-trips bitwise; every midpoint
 *     between neighbouring halves goes to the even one, the floats one ulp
 *     either side of it to the nearer one; ±inf, NaN (quiet, sign and top
 *     payload kept, never inf), the overflow threshold, subnormals, -0;
 *     17 million floats spread over all patterns.
 * Kernels, every set this CPU runs (the others are named as not tested):
 *   - widen / narrow: bitwise equal to the scalar functions on all 65536
 *     patterns, the midpoints, random floats and special values, lengths
 *     0..70 at misaligned addresses, nothing written past the end;
 *   - dot_rows / acc_rows for f32, f16, bf16 (float) and f64 (double):
 *     rows 1..9, n 0..70 and 1000, dim 1..3, 64, 127, 128, 256, strides
 *     larger than the rows, against a long double reference within
 *       |s − c·Σ| <= (dim + 2)·eps·|c|·Σ|q·k|,
 *       |acc − (acc0 + Σ)| <= (n + 2)·eps·(|acc0| + Σ|p·v|)
 *     (eps of T), nothing written outside the outputs, the same bits from
 *     a second call and from copies at other alignments; acc_rows adds to
 *     acc; inf and NaN in K and V reach the results (0·inf is NaN).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the three headers above first */
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half_codec.h"
#include "kernels/cpu.h"
#include "kernels/half.h"
#include "kernels/rows.h"
#include "testutil.h"

/* ---- independent decoders and rounding -------------------------------- */

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* A binary16 / bfloat16 pattern's value (NaN for NaNs), from its fields
 * (half_codec.h). */
static double decode_f16(uint16_t h)
{
    return half_codec_value(h, SDPA_FLOAT16);
}

static double decode_bf16(uint16_t h)
{
    return half_codec_value(h, SDPA_BFLOAT16);
}

/* A half format: its name, type, decoder and the library's conversions. */
typedef struct half_format {
    const char *name;
    int type; /* SDPA_FLOAT16 / SDPA_BFLOAT16 */
    double (*decode)(uint16_t);
    uint16_t (*narrow)(float);
    float (*widen)(uint16_t);
} half_format;

static const half_format formats[2] = {
    {"float16", SDPA_FLOAT16, decode_f16, sdpa_f32_to_f16, sdpa_f16_to_f32},
    {"bfloat16", SDPA_BFLOAT16, decode_bf16, sdpa_f32_to_bf16,
     sdpa_bf16_to_f32},
};

/* x (finite) rounded to the format, nearest even (half_codec.h). */
static double reference_round(const half_format *f, float x)
{
    return half_codec_round((double)x, f->type);
}

/* Does half h stand for value v (NaN excluded), sign of zero included? */
static bool half_is(const half_format *f, uint16_t h, double v)
{
    double d = f->decode(h);
    return d == v && signbit(d) == signbit(v);
}

/* x → half as half.h must give it: NaN quiet with sign and the top payload
 * bits, the rest by reference_round. */
static void check_narrow_one(const half_format *f, float x)
{
    uint16_t h = f->narrow(x);
    uint32_t u = bits_of(x);
    if (x != x) {
        if (f->type == SDPA_FLOAT16) {
            assert_int_equal(h & 0x7e00, 0x7e00); /* NaN, quiet */
            assert_int_equal(h & 0x8000, (u >> 16) & 0x8000);
            assert_int_equal(h & 0x1ff, (u >> 13) & 0x1ff);
        } else {
            assert_int_equal(h, (u >> 16) | 0x40);
        }
        return;
    }
    if (!half_is(f, h, reference_round(f, x)))
        fail_msg("%s: %a (0x%08x) → 0x%04x, expected %a", f->name, (double)x,
                 (unsigned)u, h, reference_round(f, x));
}

/* ---- conversions -------------------------------------------------------- */

static void test_widen_all_patterns(void **state)
{
    (void)state;
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        float a = sdpa_f16_to_f32(h), b = sdpa_bf16_to_f32(h);
        double da = decode_f16(h), db = decode_bf16(h);
        if (da != da) { /* NaN: quiet, sign and payload kept */
            uint32_t u = bits_of(a);
            assert_true(a != a);
            assert_int_equal(u >> 31, h >> 15);
            assert_int_equal(u & 0x00400000u, 0x00400000u);
            assert_int_equal((u >> 13) & 0x1ffu, h & 0x1ffu);
        } else {
            assert_true((double)a == da);
            assert_int_equal(signbit(a) != 0, signbit(da) != 0);
        }
        if (db != db)
            assert_true(b != b && bits_of(b) == i << 16);
        else {
            assert_true((double)b == db);
            assert_int_equal(signbit(b) != 0, signbit(db) != 0);
        }
    }
}

static void test_narrow_round_trip(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        const half_format *f = &formats[k];
        for (uint32_t i = 0; i < 65536; i++) {
            uint16_t h = (uint16_t)i;
            double d = f->decode(h);
            uint16_t back = f->narrow(f->widen(h));
            if (d != d)
                assert_true(f->decode(back) != f->decode(back));
            else
                assert_int_equal(back, h);
        }
    }
}

/* Between every two neighbouring halves (both signs): the midpoint goes to
 * the even one, the floats one ulp below and above it to the nearer. */
static void test_narrow_midpoints(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++) {
        const half_format *f = &formats[k];
        uint16_t last = f->type == SDPA_FLOAT16 ? 0x7bff : 0x7f7f;
        for (uint16_t h = 0; h <= last; h++) {
            double lo = f->decode(h);
            double hi = h == last
                            ? 2 * ldexp(1.0, f->type == SDPA_FLOAT16 ? 15 : 127)
                            : f->decode((uint16_t)(h + 1));
            float mid = (float)((lo + hi) / 2);
            assert_true((double)mid == (lo + hi) / 2); /* exact */
            for (int neg = 0; neg < 2; neg++) {
                float m = neg ? -mid : mid;
                uint16_t sign = neg ? 0x8000 : 0;
                uint16_t even = (uint16_t)((h & 1 ? h + 1 : h) | sign);
                uint16_t got = f->narrow(m);
                assert_int_equal(got, even); /* for h = last: inf */
                assert_int_equal(f->narrow(nextafterf(m, 0)), h | sign);
                assert_int_equal(
                    f->narrow(nextafterf(m, neg ? -INFINITY : INFINITY)),
                    (h + 1) | sign);
                check_narrow_one(f, m);
                check_narrow_one(f, nextafterf(m, 0));
                check_narrow_one(f, nextafterf(m, INFINITY));
                check_narrow_one(f, nextafterf(m, -INFINITY));
            }
        }
    }
}

static void test_narrow_specials(void **state)
{
    (void)state;
    const float nan_q = NAN;
    assert_int_equal(sdpa_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(sdpa_f32_to_f16(-INFINITY), 0xfc00);
    assert_int_equal(sdpa_f32_to_bf16(INFINITY), 0x7f80);
    assert_int_equal(sdpa_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(sdpa_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(sdpa_f32_to_f16(-65520.0f), 0xfc00);
    assert_int_equal(sdpa_f32_to_f16(nextafterf(65520.0f, 0)), 0x7bff);
    assert_int_equal(sdpa_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(sdpa_f32_to_f16(FLT_MAX), 0x7c00);
    assert_int_equal(sdpa_f32_to_bf16(FLT_MAX), 0x7f80); /* above 0x7f7f½ */
    assert_int_equal(sdpa_f32_to_bf16(float_of(0x7f7f7fffu)), 0x7f7f);
    assert_int_equal(sdpa_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(sdpa_f32_to_f16(-0.0f), 0x8000);
    assert_int_equal(sdpa_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(sdpa_f32_to_f16(0x1p-24f), 0x0001); /* least subnormal */
    assert_int_equal(sdpa_f32_to_f16(0x1p-25f), 0x0000); /* tie → even 0 */
    assert_int_equal(sdpa_f32_to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
    assert_int_equal(sdpa_f32_to_f16(-0x1.8p-24f), 0x8002);  /* tie → even */
    assert_int_equal(sdpa_f32_to_f16(0x1.ff8p-15f), 0x03ff); /* largest */
    assert_int_equal(sdpa_f32_to_f16(0x1.ffcp-15f), 0x0400); /* → normal */
    assert_int_equal(sdpa_f32_to_f16(FLT_TRUE_MIN), 0x0000);
    assert_int_equal(sdpa_f32_to_f16(-FLT_TRUE_MIN), 0x8000);
    assert_int_equal(sdpa_f32_to_bf16(FLT_TRUE_MIN), 0x0000);
    assert_int_equal(sdpa_f32_to_bf16(float_of(0x00008000u)), 0x0000);
    assert_int_equal(sdpa_f32_to_bf16(float_of(0x00018000u)), 0x0002);
    assert_int_equal(sdpa_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(sdpa_f32_to_f16(1.0f), 0x3c00);
    /* NaNs: quiet, sign and top payload kept, never inf */
    assert_int_equal(sdpa_f32_to_f16(nan_q) & 0x7e00, 0x7e00);
    assert_int_equal(sdpa_f32_to_f16(float_of(0x7f800001u)), 0x7e00);
    assert_int_equal(sdpa_f32_to_f16(float_of(0xff802000u)), 0xfe01);
    assert_int_equal(sdpa_f32_to_f16(float_of(0x7fffffffu)), 0x7fff);
    assert_int_equal(sdpa_f32_to_bf16(float_of(0x7f800001u)), 0x7fc0);
    assert_int_equal(sdpa_f32_to_bf16(float_of(0xff810000u)), 0xffc1);
    assert_int_equal(sdpa_f32_to_bf16(float_of(0x7fffffffu)), 0x7fff);
    assert_int_equal(sdpa_f16_to_f32(0x7c01) != sdpa_f16_to_f32(0x7c01), 1);
    assert_int_equal(bits_of(sdpa_f16_to_f32(0xfc01)), 0xffc02000u);
    assert_int_equal(bits_of(sdpa_bf16_to_f32(0xff81)), 0xff810000u);
    assert_int_equal(sdpa_dtype_size(SDPA_FLOAT32), 4);
    assert_int_equal(sdpa_dtype_size(SDPA_FLOAT64), 8);
    assert_int_equal(sdpa_dtype_size(SDPA_FLOAT16), 2);
    assert_int_equal(sdpa_dtype_size(SDPA_BFLOAT16), 2);
    assert_int_equal(sdpa_dtype_size(0), 0);
    assert_int_equal(sdpa_dtype_size(SDPA_FP8_E4M3), 1);
    assert_int_equal(sdpa_dtype_size(SDPA_FP8_E5M2), 1);
    assert_int_equal(sdpa_dtype_size(SDPA_Q8_0), 34);
    assert_int_equal(sdpa_dtype_size(SDPA_Q4_0), 18);
    assert_int_equal(sdpa_dtype_size(9), 0);
}

/* Every 251st float pattern (17 million, all exponents and both signs),
 * plus the special values above, against the reference rounding. */
static void test_narrow_sweep(void **state)
{
    (void)state;
    for (int k = 0; k < 2; k++)
        for (uint64_t u = 0; u < 0x100000000ull; u += 251)
            check_narrow_one(&formats[k], float_of((uint32_t)u));
}

#include "kernel_sets.h"

/* Floats that narrowing must get right: every half of both formats (as
 * float), the midpoints and their neighbours, specials, random patterns. */
static float *narrow_inputs(size_t *count)
{
    size_t cap = 2 * 65536 * 4 + 64 + 8192, n = 0;
    float *x = malloc(cap * sizeof *x);
    assert_non_null(x);
    for (uint32_t i = 0; i < 65536; i++) {
        float a = sdpa_f16_to_f32((uint16_t)i);
        float b = sdpa_f16_to_f32((uint16_t)((i + 1) & 0xffff));
        x[n++] = a;
        x[n++] = sdpa_bf16_to_f32((uint16_t)i);
        if (a == a && b == b && fabsf(a) < 65504) {
            float mid = (float)(((double)a + b) / 2);
            x[n++] = mid;
            x[n++] = nextafterf(mid, INFINITY);
        }
        float c = sdpa_bf16_to_f32((uint16_t)i);
        float d = sdpa_bf16_to_f32((uint16_t)((i + 1) & 0xffff));
        if (c == c && d == d && fabsf(c) < FLT_MAX) {
            float mid = (float)(((double)c + d) / 2);
            x[n++] = mid;
            x[n++] = nextafterf(mid, -INFINITY);
        }
    }
    const uint32_t specials[] = {
        0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
        0xff812345u, 0x7fbfffffu, 0x7fffffffu, 0x00000000u, 0x80000000u,
        0x00000001u, 0x80000001u, 0x007fffffu, 0x00800000u, 0x7f7fffffu,
        0x477ff000u, 0x477fefffu, 0xc77ff000u, 0x33000000u, 0x33000001u,
        0x7f7f8000u, 0x7f7f7fffu, 0x387fc000u, 0x38800000u, 0x3f800000u};
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        x[n++] = float_of(specials[i]);
    rng r = {42};
    for (int i = 0; i < 8000; i++)
        x[n++] = float_of((uint32_t)rng_next(&r));
    assert_true(n <= cap);
    *count = n;
    return x;
}

/* widen / narrow of set k against the scalar functions, bitwise: whole
 * arrays, and every length 0..70 at element offsets 0..3 of source and
 * destination (vector bodies, tails, misaligned), with guards after. */
static void convert_matches_scalar(int k)
{
    const sdpa_row_kernels_f32 *ks = kernel_sets[k].f32;
    size_t nx;
    float *x = narrow_inputs(&nx);
    uint16_t *all = malloc(65536 * sizeof *all), *h = malloc(nx * sizeof *h);
    float *w = malloc(65536 * sizeof *w);
    assert_non_null(all);
    assert_non_null(h);
    assert_non_null(w);
    for (uint32_t i = 0; i < 65536; i++)
        all[i] = (uint16_t)i;
    for (int f = 0; f < 2; f++) {
        const half_format *fm = &formats[f];
        ks->widen(all, fm->type, w, 65536);
        for (uint32_t i = 0; i < 65536; i++)
            assert_int_equal(bits_of(w[i]), bits_of(fm->widen((uint16_t)i)));
        ks->narrow(x, fm->type, h, (int64_t)nx);
        for (size_t i = 0; i < nx; i++)
            assert_int_equal(h[i], fm->narrow(x[i]));
    }
    /* float32 to float32: a copy, NaN payloads included */
    float *copy = malloc(nx * sizeof *copy);
    assert_non_null(copy);
    ks->widen(x, SDPA_FLOAT32, copy, (int64_t)nx);
    assert_memory_equal(copy, x, nx * sizeof *x);
    memset(copy, 0, nx * sizeof *copy);
    ks->narrow(x, SDPA_FLOAT32, copy, (int64_t)nx);
    assert_memory_equal(copy, x, nx * sizeof *x);
    free(copy);
    /* lengths and alignments */
    enum { LEN = 70, PAD = 8 };
    for (int f = 0; f < 3; f++) {
        int type = f == 2 ? SDPA_FLOAT32 : formats[f].type;
        for (int64_t n = 0; n <= LEN; n++)
            for (int so = 0; so < 4; so++)
                for (int d_o = 0; d_o < 4; d_o++) {
                    uint16_t hs[LEN + PAD], hd[LEN + PAD];
                    float fs[LEN + PAD], fd[LEN + PAD];
                    for (int i = 0; i < LEN + PAD; i++) {
                        hs[i] = all[(i * 4099 + n * 7) & 0xffff];
                        fs[i] = x[(size_t)(i * 613 + n * 31) % nx];
                        hd[i] = 0xdead, fd[i] = -12345.0f;
                    }
                    ks->widen(type == SDPA_FLOAT32 ? (void *)(fs + so)
                                                   : (void *)(hs + so),
                              type, fd + d_o, n);
                    ks->narrow(fs + so, type,
                               type == SDPA_FLOAT32 ? (void *)(fd + d_o)
                                                    : (void *)(hd + d_o),
                               n);
                    for (int i = 0; i < LEN + PAD; i++) {
                        bool in = i >= d_o && i < d_o + n;
                        int s = i - d_o + so;
                        if (type == SDPA_FLOAT32) {
                            /* widen, then narrow over it: both copies */
                            assert_int_equal(bits_of(fd[i]),
                                             in ? bits_of(fs[s])
                                                : bits_of(-12345.0f));
                            continue;
                        }
                        const half_format *fm = &formats[f];
                        assert_int_equal(bits_of(fd[i]),
                                         in ? bits_of(fm->widen(hs[s]))
                                            : bits_of(-12345.0f));
                        assert_int_equal(hd[i],
                                         in ? fm->narrow(fs[s]) : 0xdead);
                    }
                }
    }
    /* the double sets copy float64 */
    double ds[LEN + PAD], dd[LEN + PAD];
    for (int64_t n = 0; n <= LEN; n++) {
        for (int i = 0; i < LEN + PAD; i++)
            ds[i] = (double)x[(size_t)(i * 97 + n) % nx] / 3, dd[i] = -7.0;
        kernel_sets[k].f64->widen(ds + 1, SDPA_FLOAT64, dd + 3, n);
        for (int i = 0; i < LEN + PAD; i++)
            assert_memory_equal(
                &dd[i], i >= 3 && i < 3 + n ? &ds[i - 2] : &(double){-7.0},
                sizeof(double));
        kernel_sets[k].f64->narrow(ds, SDPA_FLOAT64, dd, n);
        assert_memory_equal(dd, ds, (size_t)n * sizeof(double));
    }
    free(x);
    free(all);
    free(h);
    free(w);
}

static void test_convert_kernels(void **state)
{
    (void)state;
    for (int k = 0; k < KERNEL_SETS; k++)
        if (runnable(k))
            convert_matches_scalar(k);
}

/* ---- dot_rows / acc_rows ------------------------------------------------ */

/* An array of `type` elements (K or V), written from values exact in it. */
typedef struct typed {
    int type;
    size_t es;
    unsigned char *data;
} typed;

static void typed_set(typed *t, int64_t i, double v)
{
    unsigned char *at = t->data + (size_t)i * t->es;
    switch (t->type) {
    case SDPA_FLOAT16: {
        uint16_t h = sdpa_f32_to_f16((float)v);
        memcpy(at, &h, 2);
        break;
    }
    case SDPA_BFLOAT16: {
        uint16_t h = sdpa_f32_to_bf16((float)v);
        memcpy(at, &h, 2);
        break;
    }
    case SDPA_FLOAT32: {
        float f = (float)v;
        memcpy(at, &f, 4);
        break;
    }
    default:
        memcpy(at, &v, 8);
    }
}

/* Element i's value, by the test's own decoders. */
static long double typed_get(const typed *t, int64_t i)
{
    const unsigned char *at = t->data + (size_t)i * t->es;
    uint16_t h;
    float f;
    double d;
    switch (t->type) {
    case SDPA_FLOAT16:
        memcpy(&h, at, 2);
        return decode_f16(h);
    case SDPA_BFLOAT16:
        memcpy(&h, at, 2);
        return decode_bf16(h);
    case SDPA_FLOAT32:
        memcpy(&f, at, 4);
        return f;
    default:
        memcpy(&d, at, 8);
        return d;
    }
}

enum { MAX_ROWS = 9, MAX_N = 1000, LD_EXTRA = 5, NS = 72 };
static const int64_t dims[] = {1, 2, 3, 64, 127, 128, 256};
enum { DIMS = sizeof dims / sizeof dims[0] };
/* n = 0..70, then 1000 */
static int64_t n_at(int i)
{
    return i < NS - 1 ? i : MAX_N;
}

/* The kernels of one T, called through one signature in the test. */
typedef struct stream_ops {
    size_t size; /* sizeof(T) */
    double eps;
    void (*dot)(const void *set, const void *q, int64_t ld_q, int64_t rows,
                const void *k, int64_t ld_k, int type, int64_t n, int64_t dim,
                double c, void *s, int64_t ld_s, const sdpa_row_prefetch *pf);
    void (*acc)(const void *set, const void *p, int64_t ld_p, int64_t rows,
                const void *v, int64_t ld_v, int type, int64_t n, int64_t dim,
                void *acc, int64_t ld_a, const sdpa_row_prefetch *pf);
} stream_ops;

/* The kernels take each K / V row's address: here those of rows ld
 * elements of `type` apart from `base` (a block type's ld counts values,
 * as the library's strides do). */
static const char **row_addresses(const void *base, int64_t ld, int type,
                                  int64_t n)
{
    const char **at = malloc(sizeof *at * (size_t)(n > 0 ? n : 1));
    assert_non_null(at);
    const int64_t bytes_per_ld =
        ld / sdpa_dtype_values(type) * (int64_t)sdpa_dtype_size(type);
    for (int64_t j = 0; j < n; j++)
        at[j] = (const char *)base + j * bytes_per_ld;
    return at;
}

#define DEFINE_OPS(SUF, T, EPS)                                                \
    static void dot_##SUF(const void *set, const void *q, int64_t ld_q,        \
                          int64_t rows, const void *k, int64_t ld_k, int type, \
                          int64_t n, int64_t dim, double c, void *s,           \
                          int64_t ld_s, const sdpa_row_prefetch *pf)           \
    {                                                                          \
        const char **at = row_addresses(k, ld_k, type, n);                     \
        ((const sdpa_row_kernels_##SUF *)set)                                  \
            ->dot_rows(q, ld_q, rows, at, type, n, dim, (T)c, s, ld_s, pf);    \
        free(at);                                                              \
    }                                                                          \
    static void acc_##SUF(const void *set, const void *p, int64_t ld_p,        \
                          int64_t rows, const void *v, int64_t ld_v, int type, \
                          int64_t n, int64_t dim, void *acc, int64_t ld_a,     \
                          const sdpa_row_prefetch *pf)                         \
    {                                                                          \
        const char **at = row_addresses(v, ld_v, type, n);                     \
        ((const sdpa_row_kernels_##SUF *)set)                                  \
            ->acc_rows(p, ld_p, rows, at, type, n, dim, acc, ld_a, pf);        \
        free(at);                                                              \
    }                                                                          \
    static const stream_ops ops_##SUF = {sizeof(T), EPS, dot_##SUF, acc_##SUF};
DEFINE_OPS(f32, float, FLT_EPSILON)
DEFINE_OPS(f64, double, DBL_EPSILON)

/* A T array's element i as long double, and setting it. */
static long double t_get(const stream_ops *o, const void *a, int64_t i)
{
    if (o->size == sizeof(float))
        return ((const float *)a)[i];
    return ((const double *)a)[i];
}
static void t_set(const stream_ops *o, void *a, int64_t i, double v)
{
    if (o->size == sizeof(float))
        ((float *)a)[i] = (float)v;
    else
        ((double *)a)[i] = v;
}

/* The kernels' type for the storage `type` (float's sets: f32/f16/bf16,
 * double's: f64) and the set's table. */
static const void *set_of(int k, const stream_ops *o)
{
    return o->size == sizeof(float) ? (const void *)kernel_sets[k].f32
                                    : (const void *)kernel_sets[k].f64;
}

static double worst_dot, worst_acc; /* measured error / bound, the largest */

/* Elements of s / acc that the kernels must not touch hold this. */
#define GUARD (-777.0)

/* A copy of the n_elem elements of size `size` at a, one element further
 * on in a fresh buffer (another alignment); free with free(copy - size). */
static unsigned char *shifted_copy(const void *a, int64_t n_elem, size_t size)
{
    unsigned char *b = malloc((size_t)(n_elem + 1) * size);
    assert_non_null(b);
    memcpy(b + size, a, (size_t)n_elem * size);
    return b + size;
}

/* Checks the elements [n, min(n + 16, ld)) and ld − 1 of each row of out,
 * and every element of the rows from `rows` on, hold GUARD. */
static void check_untouched(const stream_ops *o, const void *out, int64_t ld,
                            int rows, int64_t n)
{
    for (int row = 0; row < MAX_ROWS; row++)
        for (int64_t j = row < rows ? n : 0; j < ld; j++) {
            if (row < rows && j >= n + 16 && j != ld - 1)
                continue;
            assert_true(t_get(o, out, row * ld + j) == (long double)GUARD);
        }
}

/* dot_rows of every runnable set, `type` storage, all rows, n, dim. */
static void dot_cases(const stream_ops *o, int type)
{
    rng r = {(uint64_t)type * 1000 + o->size};
    const size_t es = sdpa_dtype_size(type);
    const double c = 0.3;
    for (int di = 0; di < DIMS; di++) {
        const int64_t dim = dims[di], ld_q = dim + 3, ld_k = dim + LD_EXTRA;
        const int64_t ld_s = MAX_N + 7;
        typed kt = {type, es, malloc((size_t)(MAX_N * ld_k) * es)};
        unsigned char *q = malloc((size_t)(MAX_ROWS * ld_q) * o->size);
        unsigned char *s = malloc((size_t)(MAX_ROWS * ld_s) * o->size);
        unsigned char *s2 = malloc((size_t)(MAX_ROWS * ld_s) * o->size);
        long double *ref = malloc(sizeof *ref * MAX_ROWS * MAX_N);
        long double *mag = malloc(sizeof *mag * MAX_ROWS * MAX_N);
        assert_true(kt.data && q && s && s2 && ref && mag);
        /* the gaps between rows hold values that would show if read */
        for (int64_t i = 0; i < MAX_ROWS * ld_q; i++)
            t_set(o, q, i, i % ld_q < dim ? 2 * rng_unit(&r) - 1 : 1e30);
        for (int64_t i = 0; i < MAX_N * ld_k; i++)
            typed_set(&kt, i, i % ld_k < dim ? 4 * rng_unit(&r) - 2 : 1e4);
        for (int row = 0; row < MAX_ROWS; row++)
            for (int64_t j = 0; j < MAX_N; j++) {
                long double sum = 0, abs = 0;
                for (int64_t d = 0; d < dim; d++) {
                    long double t = t_get(o, q, row * ld_q + d) *
                                    typed_get(&kt, j * ld_k + d);
                    sum += t, abs += fabsl(t);
                }
                ref[row * MAX_N + j] = c * sum;
                mag[row * MAX_N + j] = c * abs;
            }
        unsigned char *q2 = shifted_copy(q, MAX_ROWS * ld_q, o->size);
        unsigned char *k2 = shifted_copy(kt.data, MAX_N * ld_k, es);
        for (int k = 0; k < KERNEL_SETS; k++) {
            if (!runnable(k))
                continue;
            const void *set = set_of(k, o);
            for (int ni = 0; ni < NS; ni++)
                for (int rows = 1; rows <= MAX_ROWS; rows++) {
                    const int64_t n = n_at(ni);
                    for (int64_t i = 0; i < MAX_ROWS * ld_s; i++)
                        t_set(o, s, i, GUARD), t_set(o, s2, i, GUARD);
                    o->dot(set, q, ld_q, rows, kt.data, ld_k, type, n, dim, c,
                           s, ld_s, NULL);
                    check_untouched(o, s, ld_s, rows, n);
                    for (int row = 0; row < rows; row++)
                        for (int64_t j = 0; j < n; j++) {
                            long double got = t_get(o, s, row * ld_s + j);
                            long double want = ref[row * MAX_N + j];
                            long double bound = (long double)(dim + 2) *
                                                o->eps * mag[row * MAX_N + j];
                            long double err = fabsl(got - want);
                            if (!(err <= bound))
                                fail_msg("%s dot_rows type %d dim %lld n %lld "
                                         "rows %d: s[%d][%lld] = %Lg, want "
                                         "%Lg (bound %Lg)",
                                         kernel_sets[k].name, type,
                                         (long long)dim, (long long)n, rows,
                                         row, (long long)j, got, want, bound);
                            if (bound > 0 && (double)(err / bound) > worst_dot)
                                worst_dot = (double)(err / bound);
                        }
                    if (ni % 5 != 4 && n != MAX_N)
                        continue;
                    /* the same bits from the copies at other alignments,
                     * and again from the first pointers */
                    o->dot(set, q2, ld_q, rows, k2, ld_k, type, n, dim, c, s2,
                           ld_s, NULL);
                    assert_memory_equal(s, s2,
                                        (size_t)(MAX_ROWS * ld_s) * o->size);
                    /* a prefetch hint (other rows, more of them than n)
                     * changes no bit */
                    const sdpa_row_prefetch q_rows = {(const char *)q2,
                                                      ld_q * (int64_t)o->size,
                                                      MAX_ROWS,
                                                      dim * (int64_t)o->size,
                                                      NULL,
                                                      NULL};
                    const sdpa_row_prefetch hint = {(const char *)k2,
                                                    ld_k * (int64_t)es,
                                                    MAX_N,
                                                    dim * (int64_t)es,
                                                    &q_rows,
                                                    NULL};
                    o->dot(set, q, ld_q, rows, kt.data, ld_k, type, n, dim, c,
                           s2, ld_s, &hint);
                    assert_memory_equal(s, s2,
                                        (size_t)(MAX_ROWS * ld_s) * o->size);
                }
        }
        free(q2 - o->size), free(k2 - es);
        free(kt.data), free(q), free(s), free(s2), free(ref), free(mag);
    }
}

/* acc_rows likewise: acc starts at random values (it is added to), the
 * reference grows with n. */
static void acc_cases(const stream_ops *o, int type)
{
    rng r = {(uint64_t)type * 2000 + o->size};
    const size_t es = sdpa_dtype_size(type);
    for (int di = 0; di < DIMS; di++) {
        const int64_t dim = dims[di], ld_v = dim + LD_EXTRA, ld_a = dim + 9;
        const int64_t ld_p = MAX_N + 3;
        typed vt = {type, es, malloc((size_t)(MAX_N * ld_v) * es)};
        unsigned char *p = malloc((size_t)(MAX_ROWS * ld_p) * o->size);
        unsigned char *acc0 = malloc((size_t)(MAX_ROWS * ld_a) * o->size);
        unsigned char *acc = malloc((size_t)(MAX_ROWS * ld_a) * o->size);
        unsigned char *acc2 = malloc((size_t)(MAX_ROWS * ld_a) * o->size);
        long double *ref = malloc(sizeof *ref * MAX_ROWS * (size_t)dim);
        long double *mag = malloc(sizeof *mag * MAX_ROWS * (size_t)dim);
        assert_true(vt.data && p && acc0 && acc && acc2 && ref && mag);
        for (int64_t i = 0; i < MAX_ROWS * ld_p; i++) /* weights in [0, 1) */
            t_set(o, p, i, i % ld_p < MAX_N ? rng_unit(&r) : 1e30);
        for (int64_t i = 0; i < MAX_N * ld_v; i++)
            typed_set(&vt, i, i % ld_v < dim ? 4 * rng_unit(&r) - 2 : 1e4);
        for (int64_t i = 0; i < MAX_ROWS * ld_a; i++)
            t_set(o, acc0, i, i % ld_a < dim ? 8 * rng_unit(&r) - 4 : GUARD);
        for (int row = 0; row < MAX_ROWS; row++)
            for (int64_t d = 0; d < dim; d++) {
                ref[row * dim + d] = t_get(o, acc0, row * ld_a + d);
                mag[row * dim + d] = fabsl(ref[row * dim + d]);
            }
        unsigned char *p2 = shifted_copy(p, MAX_ROWS * ld_p, o->size);
        unsigned char *v2 = shifted_copy(vt.data, MAX_N * ld_v, es);
        for (int ni = 0; ni < NS; ni++) {
            const int64_t n = n_at(ni), from = ni == 0 ? 0 : n_at(ni - 1);
            for (int row = 0; row < MAX_ROWS; row++)
                for (int64_t j = from; j < n; j++)
                    for (int64_t d = 0; d < dim; d++) {
                        long double t = t_get(o, p, row * ld_p + j) *
                                        typed_get(&vt, j * ld_v + d);
                        ref[row * dim + d] += t;
                        mag[row * dim + d] += fabsl(t);
                    }
            for (int k = 0; k < KERNEL_SETS; k++) {
                if (!runnable(k))
                    continue;
                const void *set = set_of(k, o);
                for (int rows = 1; rows <= MAX_ROWS; rows++) {
                    memcpy(acc, acc0, (size_t)(MAX_ROWS * ld_a) * o->size);
                    for (int64_t i = rows * ld_a; i < MAX_ROWS * ld_a; i++)
                        t_set(o, acc, i, GUARD);
                    memcpy(acc2, acc, (size_t)(MAX_ROWS * ld_a) * o->size);
                    o->acc(set, p, ld_p, rows, vt.data, ld_v, type, n, dim, acc,
                           ld_a, NULL);
                    check_untouched(o, acc, ld_a, rows, dim);
                    for (int row = 0; row < rows; row++)
                        for (int64_t d = 0; d < dim; d++) {
                            long double got = t_get(o, acc, row * ld_a + d);
                            long double want = ref[row * dim + d];
                            long double bound = (long double)(n + 2) * o->eps *
                                                mag[row * dim + d];
                            long double err = fabsl(got - want);
                            if (!(err <= bound))
                                fail_msg("%s acc_rows type %d dim %lld n %lld "
                                         "rows %d: acc[%d][%lld] = %Lg, want "
                                         "%Lg (bound %Lg)",
                                         kernel_sets[k].name, type,
                                         (long long)dim, (long long)n, rows,
                                         row, (long long)d, got, want, bound);
                            if (bound > 0 && (double)(err / bound) > worst_acc)
                                worst_acc = (double)(err / bound);
                        }
                    if (ni % 5 != 4 && n != MAX_N)
                        continue;
                    unsigned char *a2 =
                        shifted_copy(acc2, MAX_ROWS * ld_a, o->size);
                    o->acc(set, p2, ld_p, rows, v2, ld_v, type, n, dim, a2,
                           ld_a, NULL);
                    assert_memory_equal(acc, a2,
                                        (size_t)(MAX_ROWS * ld_a) * o->size);
                    free(a2 - o->size);
                    /* a prefetch hint changes no bit, its rows named by
                     * stride or by address (here last to first) */
                    const char *by_address[MAX_N];
                    for (int64_t j = 0; j < MAX_N; j++)
                        by_address[j] = (const char *)v2 +
                                        (MAX_N - 1 - j) * ld_v * (int64_t)es;
                    const sdpa_row_prefetch listed = {
                        NULL, 0, MAX_N, dim * (int64_t)es, NULL, by_address};
                    const sdpa_row_prefetch hint = {(const char *)v2,
                                                    ld_v * (int64_t)es,
                                                    MAX_N,
                                                    dim * (int64_t)es,
                                                    &listed,
                                                    NULL};
                    o->acc(set, p, ld_p, rows, vt.data, ld_v, type, n, dim,
                           acc2, ld_a, &hint);
                    assert_memory_equal(acc, acc2,
                                        (size_t)(MAX_ROWS * ld_a) * o->size);
                }
            }
        }
        free(p2 - o->size), free(v2 - es);
        free(vt.data), free(p), free(acc0), free(acc), free(acc2), free(ref),
            free(mag);
    }
}

static void test_dot_rows(void **state)
{
    (void)state;
    dot_cases(&ops_f32, SDPA_FLOAT32);
    dot_cases(&ops_f32, SDPA_FLOAT16);
    dot_cases(&ops_f32, SDPA_BFLOAT16);
    dot_cases(&ops_f64, SDPA_FLOAT64);
    print_message("dot_rows: worst error %.3f of the bound\n", worst_dot);
}

static void test_acc_rows(void **state)
{
    (void)state;
    acc_cases(&ops_f32, SDPA_FLOAT32);
    acc_cases(&ops_f32, SDPA_FLOAT16);
    acc_cases(&ops_f32, SDPA_BFLOAT16);
    acc_cases(&ops_f64, SDPA_FLOAT64);
    print_message("acc_rows: worst error %.3f of the bound\n", worst_acc);
}

/* inf and NaN in K and V reach the results, in vector bodies and tails:
 * K_j[d] = inf with q > 0 gives s = +inf; a NaN gives NaN; V_j[d] = inf
 * gives inf where p > 0 and NaN where p = 0 (0·inf), and only in column d.
 * rows 3, n 37 (keys 0, 17 and 36 special), dim 127. */
static void nonfinite_case(const stream_ops *o, int k, int type)
{
    enum { ROWS = 3, N = 37, DIM = 127 };
    const size_t es = sdpa_dtype_size(type);
    const void *set = set_of(k, o);
    typed kv = {type, es, malloc((size_t)N * DIM * es)};
    unsigned char *q = malloc(ROWS * DIM * o->size);
    unsigned char *s = malloc(ROWS * N * o->size);
    unsigned char *acc = malloc(ROWS * DIM * o->size);
    assert_true(kv.data && q && s && acc);
    const int keys[3] = {0, 17, 36}, cols[3] = {0, 70, DIM - 1};
    for (int trial = 0; trial < 2; trial++) { /* inf, then NaN */
        const double bad = trial ? NAN : INFINITY;
        for (int64_t i = 0; i < N * DIM; i++)
            typed_set(&kv, i, 0.5);
        for (int i = 0; i < 3; i++)
            typed_set(&kv, keys[i] * DIM + cols[i], bad);
        for (int64_t i = 0; i < ROWS * DIM; i++)
            t_set(o, q, i, 0.25), t_set(o, acc, i, 1.0);
        for (int row = 0; row < ROWS; row++)
            for (int j = 0; j < N; j++) /* row 1 gives the bad keys weight 0 */
                t_set(o, s, row * N + j,
                      row == 1 && (j == 0 || j == 17 || j == 36) ? 0.0 : 0.5);
        o->acc(set, s, N, ROWS, kv.data, DIM, type, N, DIM, acc, DIM, NULL);
        for (int row = 0; row < ROWS; row++)
            for (int d = 0; d < DIM; d++) {
                long double got = t_get(o, acc, row * DIM + d);
                bool hit = d == 0 || d == 70 || d == DIM - 1;
                if (!hit)
                    assert_true(got == 1.0L + (row == 1 ? 34 : 37) * 0.25L);
                else if (trial || row == 1)
                    assert_true(got != got);
                else
                    assert_true(got == INFINITY);
            }
        o->dot(set, q, DIM, ROWS, kv.data, DIM, type, N, DIM, 2.0, s, N, NULL);
        for (int row = 0; row < ROWS; row++)
            for (int j = 0; j < N; j++) {
                long double got = t_get(o, s, row * N + j);
                bool hit = j == 0 || j == 17 || j == 36;
                if (!hit)
                    assert_true(got == 2 * DIM * 0.125L);
                else if (trial)
                    assert_true(got != got);
                else
                    assert_true(got == INFINITY);
            }
    }
    free(kv.data), free(q), free(s), free(acc);
}

static void test_nonfinite(void **state)
{
    (void)state;
    for (int k = 0; k < KERNEL_SETS; k++) {
        if (!runnable(k))
            continue;
        nonfinite_case(&ops_f32, k, SDPA_FLOAT32);
        nonfinite_case(&ops_f32, k, SDPA_FLOAT16);
        nonfinite_case(&ops_f32, k, SDPA_BFLOAT16);
        nonfinite_case(&ops_f64, k, SDPA_FLOAT64);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_widen_all_patterns),
        cmocka_unit_test(test_narrow_round_trip),
        cmocka_unit_test(test_narrow_midpoints),
        cmocka_unit_test(test_narrow_specials),
        cmocka_unit_test(test_narrow_sweep),
        cmocka_unit_test(test_convert_kernels),
        cmocka_unit_test(test_dot_rows),
        cmocka_unit_test(test_acc_rows),
        cmocka_unit_test(test_nonfinite),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
