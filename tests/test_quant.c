/*
 * The quantized K/V storage types (1.2): FP8 E4M3 and E5M2 with per-KV-head
 * scales, ggml's Q8_0 and Q4_0 blocks.
 *
 * The decoders here are written from the formats' descriptions (the OCP
 * 8-bit floating point specification; ggml's block_q8_0 and block_q4_0)
 * with ldexp and integer arithmetic, and share nothing with the library's
 * (src/kernels/quant.h):
 *   - all 256 codes of each 8-bit float through sdpa_convert: value and
 *     sign exact, NaN exactly at the format's NaN codes, E5M2's two
 *     infinities, E4M3's none; the largest values 448 and 57344;
 *   - Q8_0 and Q4_0 blocks with random quants and scales d (normal,
 *     subnormal, ±0, the largest float16, ±inf, NaN), bit for bit as ggml
 *     lays them out, through sdpa_convert;
 *   - every kernel set this CPU runs (widen, internal API) bitwise equal
 *     to sdpa_convert on those inputs, at every length and misalignment;
 *     whole blocks or SDPA_ERR_BAD_DIM.
 * Attention over quantized K/V, every storage type, every path
 * (materialised, tiled, decode with the streaming kernels, decode through
 * BLAS) and every kernel set, q/out in float32, float16 and bfloat16, GQA,
 * kv_lens, causal rows, per-head scales that differ: against the
 * long-double reference on the dequantized values (scale · decoded value,
 * exact in float64), within the float32 tolerance of tests/test_random.c
 * plus one rounding of out. Paged pools of every type (pages of 1, 3 and
 * 16 keys, shuffled, vLLM's and head-major layouts) bitwise equal to the
 * contiguous call. A NaN code, an E5M2 infinity or a non-finite block
 * scale at a key a row reads is SDPA_ERR_NONFINITE naming that row; the
 * same at a key no row reads changes nothing. Refusals, outputs untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the three headers above first */
#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "half_codec.h"
#include "quant_codec.h"
#include "kernels/cpu.h"
#include "kernels/rows.h"
#include "reference.h"
#include "testutil.h"

#include "kernel_sets.h"

static const int quant_types[] = {SDPA_FP8_E4M3, SDPA_FP8_E5M2, SDPA_Q8_0,
                                  SDPA_Q4_0};
enum { QUANT_TYPES = sizeof quant_types / sizeof quant_types[0] };

static const char *type_name(int type)
{
    switch (type) {
    case SDPA_FP8_E4M3:
        return "E4M3";
    case SDPA_FP8_E5M2:
        return "E5M2";
    case SDPA_Q8_0:
        return "Q8_0";
    case SDPA_Q4_0:
        return "Q4_0";
    case SDPA_FLOAT16:
        return "float16";
    case SDPA_BFLOAT16:
        return "bfloat16";
    default:
        return "float32";
    }
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Does the float f stand for v (sign of zero included; NaN for NaN)? */
static bool float_is(float f, double v)
{
    if (isnan(v))
        return isnan(f);
    return (double)f == v && (signbit(f) != 0) == (signbit(v) != 0);
}

/* ---- Random codes and blocks ------------------------------------------- */

/* A float16 pattern for a block's d: a normal of exponent field in [lo,
 * hi] and either sign, now and then a subnormal or a zero. */
static uint16_t random_d(rng *r, int lo, int hi)
{
    const uint16_t sign = (uint16_t)(rng_next(r) & 1 ? 0x8000 : 0);
    const int pick = (int)rng_int(r, 0, 31);
    if (pick == 0)
        return sign; /* ±0 */
    if (pick == 1)
        return (uint16_t)(sign | rng_int(r, 1, 0x3ff)); /* subnormal */
    return (uint16_t)(sign | rng_int(r, lo, hi) << 10 | rng_int(r, 0, 0x3ff));
}

/* `units` random units of `type`: FP8 codes (finite ones unless
 * `specials`), or blocks whose d has an exponent field in [lo, hi]. */
static void fill_random(unsigned char *u, int type, size_t units, rng *r,
                        int lo, int hi)
{
    for (size_t k = 0; k < units; k++) {
        unsigned char *p = u + k * quant_codec_unit_bytes(type);
        if (!quant_codec_is_block(type)) {
            uint8_t c;
            do
                c = (uint8_t)rng_next(r);
            while (!quant_codec_fp8_finite(c, type));
            p[0] = c;
            continue;
        }
        const uint16_t d = random_d(r, lo, hi);
        p[0] = (unsigned char)(d & 0xff);
        p[1] = (unsigned char)(d >> 8);
        for (size_t i = 2; i < quant_codec_unit_bytes(type); i++)
            p[i] = (unsigned char)rng_next(r);
    }
}

/* ---- Decoding: sdpa_convert and the kernel sets ------------------------ */

static void test_fp8_all_codes(void **state)
{
    (void)state;
    unsigned char codes[256];
    for (int c = 0; c < 256; c++)
        codes[c] = (unsigned char)c;
    for (int t = 0; t < 2; t++) {
        const int type = quant_types[t];
        float got[256];
        assert_int_equal(sdpa_convert(SDPA_FLOAT32, got, type, codes, 256),
                         SDPA_OK);
        int nans = 0, infs = 0;
        for (int c = 0; c < 256; c++) {
            const double want = quant_codec_fp8((uint8_t)c, type);
            if (!float_is(got[c], want))
                fail_msg("%s code 0x%02x: %a, expected %a", type_name(type), c,
                         (double)got[c], want);
            nans += isnan(got[c]) != 0;
            infs += isinf(got[c]) != 0;
            if (isnan(got[c])) /* of the code's sign */
                assert_int_equal(bits_of(got[c]) >> 31, (unsigned)c >> 7);
        }
        /* E4M3: 0x7f and 0xff only; E5M2: 0x7d-0x7f and 0xfd-0xff */
        assert_int_equal(nans, type == SDPA_FP8_E4M3 ? 2 : 6);
        assert_int_equal(infs, type == SDPA_FP8_E4M3 ? 0 : 2);
    }
    float x[8];
    const unsigned char e4[] = {0x7e, 0xfe, 0x01, 0x08, 0x38, 0x80, 0x00, 0x77};
    assert_int_equal(sdpa_convert(SDPA_FLOAT32, x, SDPA_FP8_E4M3, e4, 8),
                     SDPA_OK);
    assert_true(x[0] == 448.0f && x[1] == -448.0f);
    assert_true(x[2] == 0x1p-9f && x[3] == 0x1p-6f && x[4] == 1.0f);
    assert_true(x[5] == 0.0f && signbit(x[5]) && x[6] == 0.0f &&
                !signbit(x[6]));
    assert_true(x[7] == 240.0f); /* 0.1110.111: 1.875 · 2^7 */
    const unsigned char e5[] = {0x7b, 0xfb, 0x7c, 0xfc, 0x01, 0x04, 0x3c, 0x80};
    assert_int_equal(sdpa_convert(SDPA_FLOAT32, x, SDPA_FP8_E5M2, e5, 8),
                     SDPA_OK);
    assert_true(x[0] == 57344.0f && x[1] == -57344.0f);
    assert_true(isinf(x[2]) && x[2] > 0 && isinf(x[3]) && x[3] < 0);
    assert_true(x[4] == 0x1p-16f && x[5] == 0x1p-14f && x[6] == 1.0f);
    assert_true(x[7] == 0.0f && signbit(x[7]));
}

/* Blocks with d drawn over every exponent, and d's specials. */
static unsigned char *special_blocks(int type, size_t *blocks)
{
    static const uint16_t ds[] = {0x0000, 0x8000, 0x0001, 0x83ff, 0x0400,
                                  0x3c00, 0xbc00, 0x7bff, 0xfbff, 0x7c00,
                                  0xfc00, 0x7e00, 0x7c01, 0xfe00};
    const size_t nd = sizeof ds / sizeof ds[0];
    const size_t n = nd + 200;
    unsigned char *u = malloc(n * quant_codec_unit_bytes(type));
    assert_non_null(u);
    rng r = {(uint64_t)type * 977};
    fill_random(u, type, n, &r, 1, 30);
    for (size_t k = 0; k < nd; k++) {
        u[k * quant_codec_unit_bytes(type)] = (unsigned char)(ds[k] & 0xff);
        u[k * quant_codec_unit_bytes(type) + 1] = (unsigned char)(ds[k] >> 8);
    }
    /* the extreme quants: -128 and 127, the nibbles 0 and 15 */
    unsigned char *last = u + (n - 1) * quant_codec_unit_bytes(type);
    for (size_t i = 2; i < quant_codec_unit_bytes(type); i++)
        last[i] = type == SDPA_Q8_0 ? (i % 2 ? 0x80 : 0x7f) : 0xf0;
    *blocks = n;
    return u;
}

static void test_blocks_decode(void **state)
{
    (void)state;
    for (int t = 2; t < 4; t++) {
        const int type = quant_types[t];
        size_t blocks;
        unsigned char *u = special_blocks(type, &blocks);
        const size_t n = blocks * 32;
        float *got = malloc(n * sizeof *got);
        assert_non_null(got);
        assert_int_equal(sdpa_convert(SDPA_FLOAT32, got, type, u, (int64_t)n),
                         SDPA_OK);
        for (size_t i = 0; i < n; i++) {
            const double want = quant_codec_value(u, type, (int64_t)i);
            /* 0 · inf is NaN: any NaN; a zero's sign is d's times q's */
            if (!float_is(got[i], want))
                fail_msg("%s block %zu value %zu: %a, expected %a",
                         type_name(type), i / 32, i % 32, (double)got[i], want);
        }
        /* ggml's layout spelled out on the block of extreme quants */
        const unsigned char *last =
            u + (blocks - 1) * quant_codec_unit_bytes(type);
        const float *lv = got + (blocks - 1) * 32;
        const double d =
            half_codec_value((uint16_t)(last[0] | last[1] << 8), SDPA_FLOAT16);
        if (type == SDPA_Q8_0) {
            assert_true((double)lv[0] == 127 * d && (double)lv[1] == -128 * d);
        } else {
            assert_true((double)lv[0] == -8 * d && (double)lv[15] == -8 * d);
            assert_true((double)lv[16] == 7 * d && (double)lv[31] == 7 * d);
        }
        /* whole blocks only */
        assert_int_equal(sdpa_convert(SDPA_FLOAT32, got, type, u, 31),
                         SDPA_ERR_BAD_DIM);
        assert_int_equal(sdpa_convert(SDPA_FLOAT32, got, type, u, 33),
                         SDPA_ERR_BAD_DIM);
        assert_int_equal(sdpa_convert(SDPA_FLOAT32, got, type, u, 0), SDPA_OK);
        /* no conversion into a quantized type */
        assert_int_equal(sdpa_convert(type, u, SDPA_FLOAT32, got, 32),
                         SDPA_ERR_BAD_DTYPE);
        free(u);
        free(got);
    }
    unsigned char c[4] = {0};
    float f[4];
    assert_int_equal(sdpa_convert(SDPA_FP8_E4M3, c, SDPA_FLOAT32, f, 4),
                     SDPA_ERR_BAD_DTYPE);
    assert_int_equal(sdpa_convert(SDPA_FLOAT16, c, SDPA_FP8_E5M2, f, 2),
                     SDPA_ERR_BAD_DTYPE);
}

/* Each kernel set's widen bitwise equal to sdpa_convert: whole arrays,
 * then every length (whole blocks for the block types) at source offsets
 * of a unit and destination offsets 0..3, nothing written past the end. */
static void test_kernel_sets_decode(void **state)
{
    (void)state;
    for (int t = 0; t < QUANT_TYPES; t++) {
        const int type = quant_types[t];
        size_t units;
        unsigned char *u;
        if (quant_codec_is_block(type)) {
            u = special_blocks(type, &units);
        } else {
            units = 1024;
            u = malloc(units);
            assert_non_null(u);
            for (size_t i = 0; i < units; i++)
                u[i] = (unsigned char)(i * 7 + i / 256);
        }
        const size_t n = units * (size_t)quant_codec_unit_values(type);
        float *want = malloc(n * sizeof *want);
        float *got = malloc((n + 8) * sizeof *got);
        assert_non_null(want);
        assert_non_null(got);
        assert_int_equal(sdpa_convert(SDPA_FLOAT32, want, type, u, (int64_t)n),
                         SDPA_OK);
        for (int k = 0; k < KERNEL_SETS; k++) {
            if (!runnable(k))
                continue;
            const sdpa_row_kernels_f32 *ks = kernel_sets[k].f32;
            ks->widen(u, type, got, (int64_t)n);
            for (size_t i = 0; i < n; i++)
                if (bits_of(got[i]) != bits_of(want[i]))
                    fail_msg("%s, set %s: value %zu is 0x%08x, sdpa_convert "
                             "gives 0x%08x",
                             type_name(type), kernel_sets[k].name, i,
                             (unsigned)bits_of(got[i]),
                             (unsigned)bits_of(want[i]));
            const int step = quant_codec_unit_values(type);
            for (int len = 0; len <= 4 * 32 + 7; len += step)
                for (int so = 0; so < 3; so++)
                    for (int d_o = 0; d_o < 4; d_o++) {
                        for (size_t i = 0; i < (size_t)len + 8; i++)
                            got[i] = -12345.0f;
                        ks->widen(u + (size_t)so * quant_codec_unit_bytes(type),
                                  type, got + d_o, len);
                        for (int i = 0; i < len + 8; i++) {
                            const bool in = i >= d_o && i < d_o + len;
                            const float w =
                                in ? want[(size_t)so * (size_t)step +
                                          (size_t)(i - d_o)]
                                   : -12345.0f;
                            if (bits_of(got[i]) != bits_of(w))
                                fail_msg("%s, set %s: length %d, offsets "
                                         "%d/%d, element %d",
                                         type_name(type), kernel_sets[k].name,
                                         len, so, d_o, i);
                        }
                    }
        }
        free(u);
        free(want);
        free(got);
    }
}

/* ---- Attention over quantized K/V --------------------------------------- */

/* K or V in a storage type: the bytes, the view (strides in values), the
 * scale of each KV head (FP8), and the dequantized values in float64 (the
 * reference's tensor, BHTD). */
typedef struct qtensor {
    int type;
    sdpa_tensor t;
    unsigned char *mem;
    size_t bytes;
    float scale[8];
    tbuf value;
} qtensor;

/* A [n, h, t, d] tensor of `type` in llama.cpp's layout ([t, h, d] per
 * item: BTHD) or BHTD, random units (block scales with exponent fields in
 * [lo, hi]), FP8 scales 2^-s with s per head. */
static void qtensor_make(qtensor *x, int type, int64_t n, int64_t h, int64_t t,
                         int64_t d, bool bthd, rng *r, int lo, int hi)
{
    memset(x, 0, sizeof *x);
    x->type = type;
    x->t.shape[0] = n, x->t.shape[1] = h, x->t.shape[2] = t, x->t.shape[3] = d;
    x->t.stride[3] = 1;
    x->t.stride[bthd ? 1 : 2] = d;
    x->t.stride[bthd ? 2 : 1] = bthd ? h * d : t * d;
    x->t.stride[0] = h * t * d;
    const size_t values = (size_t)(n * h * t * d);
    x->bytes = values / (size_t)quant_codec_unit_values(type) *
               quant_codec_unit_bytes(type);
    x->mem = malloc(x->bytes);
    assert_non_null(x->mem);
    fill_random(x->mem, type, x->bytes / quant_codec_unit_bytes(type), r, lo,
                hi);
    x->t.data = x->mem;
    for (int64_t hh = 0; hh < h; hh++)
        x->scale[hh] = quant_codec_is_block(type)
                           ? 1.0f
                           : ldexpf(1.0f + (float)hh / 8,
                                    type == SDPA_FP8_E4M3 ? -7 : -13);
    tbuf_make(&x->value, SDPA_FLOAT64, n, h, t, d, LAYOUT_BHTD, 0);
    for (int64_t a = 0; a < n; a++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t j = 0; j < t; j++)
                for (int64_t e = 0; e < d; e++)
                    tset(&x->value, a, hh, j, e,
                         (double)x->scale[hh] *
                             quant_codec_value(x->mem, type,
                                               toff(&x->t, a, hh, j, e)));
}

static void qtensor_free(qtensor *x)
{
    free(x->mem);
    tbuf_free(&x->value);
}

/* A problem: q in float32 on a grid exact in both half types, K and V of
 * one storage type, float64 copies for the reference. */
typedef struct problem {
    int64_t n, hq, hkv, tq, tk, dk, dv;
    int causal;
    bool with_lens;
    int64_t lens[4];
    tbuf q, q64;
    qtensor k, v;
} problem;

static void problem_make(problem *p, int type, uint64_t seed)
{
    rng r = {seed};
    tbuf_make(&p->q, SDPA_FLOAT32, p->n, p->hq, p->tq, p->dk, LAYOUT_BHTD, 0);
    tbuf_make(&p->q64, SDPA_FLOAT64, p->n, p->hq, p->tq, p->dk, LAYOUT_BHTD, 0);
    for (int64_t a = 0; a < p->n; a++)
        for (int64_t h = 0; h < p->hq; h++)
            for (int64_t i = 0; i < p->tq; i++)
                for (int64_t e = 0; e < p->dk; e++) {
                    /* multiples of 1/64 in (-4, 4): 8 significant bits */
                    const double x = (double)rng_int(&r, -255, 255) / 64;
                    tset(&p->q, a, h, i, e, x);
                    tset(&p->q64, a, h, i, e, x);
                }
    /* block scales: Q8_0's d near 2^-7 (values up to ~1), Q4_0's near 2^-3 */
    const int lo = type == SDPA_Q4_0 ? 10 : 6, hi = lo + 3;
    qtensor_make(&p->k, type, p->n, p->hkv, p->tk, p->dk, true, &r, lo, hi);
    qtensor_make(&p->v, type, p->n, p->hkv, p->tk, p->dv, false, &r, lo, hi);
    for (int64_t b = 0; b < p->n; b++)
        p->lens[b] = p->with_lens ? p->tk - 1 - b % 3 : p->tk;
}

static void problem_free(problem *p)
{
    tbuf_free(&p->q);
    tbuf_free(&p->q64);
    qtensor_free(&p->k);
    qtensor_free(&p->v);
}

/* q, lse and out views of `dtype` (out's memory the caller's). */
static sdpa_forward_args problem_args(const problem *p, int dtype, void *q,
                                      void *out, float *lse)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    a.kv_dtype = p->k.type;
    a.causal = p->causal;
    a.q = p->q.t;
    a.q.data = q;
    a.k = p->k.t;
    a.v = p->v.t;
    a.out = (sdpa_tensor){out,
                          {p->n, p->hq, p->tq, p->dv},
                          {p->hq * p->tq * p->dv, p->tq * p->dv, p->dv, 1}};
    if (lse)
        a.lse = (sdpa_tensor){
            lse, {p->n, p->hq, p->tq, 1}, {p->hq * p->tq, p->tq, 1, 1}};
    a.kv_lens = p->with_lens ? p->lens : NULL;
    if (!quant_codec_is_block(p->k.type)) {
        a.k_scale = p->k.scale;
        a.v_scale = p->v.scale;
    }
    return a;
}

static size_t out_elems(const problem *p)
{
    return (size_t)(p->n * p->hq * p->tq * p->dv);
}

/* q in `dtype` (its values are exact in each). */
static void *q_in(const problem *p, int dtype)
{
    const size_t n = p->q.elems;
    const float *f = p->q.mem;
    if (dtype == SDPA_FLOAT32) {
        float *c = malloc(n * sizeof *c);
        assert_non_null(c);
        memcpy(c, f, n * sizeof *c);
        return c;
    }
    uint16_t *h = malloc(n * sizeof *h);
    assert_non_null(h);
    for (size_t i = 0; i < n; i++) {
        bool exact;
        h[i] = half_codec_bits((double)f[i], dtype, &exact);
        assert_true(exact);
    }
    return h;
}

static double out_get(const void *out, int dtype, size_t i)
{
    return dtype == SDPA_FLOAT32
               ? (double)((const float *)out)[i]
               : half_codec_value(((const uint16_t *)out)[i], dtype);
}

static sdpa_ctx *make_ctx(int kernel, int path, int threads)
{
    sdpa_ctx *ctx = tp_ctx(0);
    if (sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, kernel) != SDPA_OK) {
        sdpa_ctx_destroy(ctx);
        return NULL; /* the CPU lacks it */
    }
    tp_set(ctx, SDPA_OPT_PATH, path);
    tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
    return ctx;
}

static const int all_paths[] = {SDPA_PATH_MATERIALISED, SDPA_PATH_TILED,
                                SDPA_PATH_DECODE, SDPA_PATH_DECODE_BLAS};
static const char *const path_names[] = {"materialised", "tiled", "decode",
                                         "decode-blas"};

/* The reference on the dequantized values, in float64 arguments. */
static void reference_of(const problem *p, ref_result *ref)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT64;
    a.causal = p->causal;
    a.q = p->q64.t;
    a.k = p->k.value.t;
    a.v = p->v.value.t;
    a.kv_lens = p->with_lens ? p->lens : NULL;
    a.scale = 1 / sqrt((double)p->dk);
    assert_int_equal(ref_forward(&a, ref), 0);
    assert_false(ref->any_empty);
}

static void check_call(const problem *p, const ref_result *ref, int dtype,
                       int kernel, int pi)
{
    sdpa_ctx *ctx = make_ctx(kernel, all_paths[pi], 2);
    if (!ctx)
        return;
    void *q = q_in(p, dtype);
    const size_t n = out_elems(p), es = dtype == SDPA_FLOAT32 ? 4 : 2;
    void *out = malloc(n * es);
    float *lse = malloc((size_t)(p->n * p->hq * p->tq) * sizeof *lse);
    assert_non_null(out);
    assert_non_null(lse);
    sdpa_forward_args a = problem_args(p, dtype, q, out, lse);
    const int st = sdpa_forward(ctx, &a);
    if (st != SDPA_OK)
        fail_msg("%s K/V, q %s, %s path, kernel %s: status %d (%s)",
                 type_name(p->k.type), type_name(dtype), path_names[pi],
                 kernel_name(kernel), st, sdpa_ctx_last_error(ctx));
    const test_tol tol =
        tp_forward_tol(FLT_EPSILON, ref, p->tk, p->dk, 0, 0, 0, 0);
    const double round_out = dtype == SDPA_FLOAT16    ? 0x1p-11
                             : dtype == SDPA_BFLOAT16 ? 0x1p-8
                                                      : 0;
    for (size_t i = 0; i < n; i++) {
        const double want = (double)ref->out[i], got = out_get(out, dtype, i);
        /* and the v_scale's one product in float32 */
        const double bound =
            tol.out + (round_out + 2 * FLT_EPSILON) * fabs(want);
        if (!(fabs(got - want) <= bound))
            fail_msg("%s K/V, q %s, %s path, kernel %s: out[%zu] = %.9g, "
                     "reference %.9g (bound %.3g)",
                     type_name(p->k.type), type_name(dtype), path_names[pi],
                     kernel_name(kernel), i, got, want, bound);
    }
    for (size_t row = 0; row < (size_t)(p->n * p->hq * p->tq); row++) {
        const double want = (double)ref->lse[row];
        const double bound = tol.lse_abs + tol.lse_rel * fabs(want);
        if (!(fabs((double)lse[row] - want) <= bound))
            fail_msg("%s K/V, %s path, kernel %s: lse[%zu] = %.9g, reference "
                     "%.9g",
                     type_name(p->k.type), path_names[pi], kernel_name(kernel),
                     row, (double)lse[row], want);
    }
    free(q);
    free(out);
    free(lse);
    sdpa_ctx_destroy(ctx);
}

static void against_reference(problem shape)
{
    static const int dtypes[] = {SDPA_FLOAT32, SDPA_FLOAT16, SDPA_BFLOAT16};
    for (int t = 0; t < QUANT_TYPES; t++) {
        problem p = shape;
        problem_make(&p, quant_types[t], 100 + (uint64_t)t);
        ref_result ref;
        reference_of(&p, &ref);
        for (int d = 0; d < 3; d++)
            for (int k = 0; k < TEST_KERNELS; k++)
                for (int pi = 0; pi < 4; pi++)
                    check_call(&p, &ref, dtypes[d], test_kernels[k], pi);
        ref_free(&ref);
        problem_free(&p);
    }
}

static void test_decode_shapes(void **state)
{
    (void)state;
    /* one query row per head, GQA 4:1, keys past the decode path's
     * 128-key blocks, Dk = 128 (four blocks) and Dv = 64 */
    against_reference((problem){.n = 2,
                                .hq = 8,
                                .hkv = 2,
                                .tq = 1,
                                .tk = 301,
                                .dk = 128,
                                .dv = 64,
                                .with_lens = true});
    /* one block per row, a single key, four query rows per head */
    against_reference((problem){
        .n = 1, .hq = 3, .hkv = 3, .tq = 4, .tk = 1, .dk = 32, .dv = 32});
}

static void test_prefill_shapes(void **state)
{
    (void)state;
    against_reference((problem){.n = 2,
                                .hq = 4,
                                .hkv = 2,
                                .tq = 37,
                                .tk = 77,
                                .dk = 64,
                                .dv = 96,
                                .causal = SDPA_CAUSAL_BOTTOM_RIGHT,
                                .with_lens = true});
    /* longer than the materialised path's staged keys (512) */
    against_reference((problem){
        .n = 1, .hq = 2, .hkv = 1, .tq = 9, .tk = 600, .dk = 32, .dv = 32});
}

/* ---- Paged pools -------------------------------------------------------- */

typedef struct pool {
    sdpa_tensor k, v;
    unsigned char *kmem, *vmem;
    int32_t *table;
    int64_t pages_per_seq, stride;
} pool;

/* K and V of p copied unit by unit into a shuffled pool of pages of
 * `page` keys, [page, slot, head, dim] (vLLM) or [page, head, slot, dim];
 * unused pages and slots hold 0xff bytes (NaN codes, NaN block scales). */
static pool make_pool(const problem *p, int64_t page, bool vllm, rng *r)
{
    pool pl = {0};
    const int type = p->k.type;
    int64_t pages;
    pl.table = tp_page_table(p->n, p->tk, page, r, &pl.pages_per_seq,
                             &pl.stride, &pages);
    const qtensor *src[2] = {&p->k, &p->v};
    sdpa_tensor *dst[2] = {&pl.k, &pl.v};
    unsigned char **mem[2] = {&pl.kmem, &pl.vmem};
    for (int x = 0; x < 2; x++) {
        const int64_t d = src[x]->t.shape[3], h = p->hkv;
        sdpa_tensor *t = dst[x];
        tp_pool_view(t, pages, h, page, d, vllm);
        const size_t bytes = quant_codec_unit_at(type, pages * h * page * d);
        *mem[x] = malloc(bytes);
        assert_non_null(*mem[x]);
        memset(*mem[x], 0xff, bytes);
        t->data = *mem[x];
        const size_t row = quant_codec_unit_at(type, d);
        for (int64_t b = 0; b < p->n; b++)
            for (int64_t hh = 0; hh < h; hh++)
                for (int64_t j = 0; j < p->tk; j++) {
                    const int64_t at =
                        pl.table[b * pl.stride + j / page] * t->stride[0] +
                        hh * t->stride[1] + (j % page) * t->stride[2];
                    memcpy(*mem[x] + quant_codec_unit_at(type, at),
                           src[x]->mem +
                               quant_codec_unit_at(
                                   type, toff(&src[x]->t, b, hh, j, 0)),
                           row);
                }
    }
    return pl;
}

static void test_paged_equals_contiguous(void **state)
{
    (void)state;
    static const int64_t pages[] = {1, 3, 16};
    problem shapes[2] = {
        {.n = 2,
         .hq = 4,
         .hkv = 2,
         .tq = 1,
         .tk = 77,
         .dk = 64,
         .dv = 32,
         .with_lens = true},
        {.n = 2,
         .hq = 2,
         .hkv = 1,
         .tq = 21,
         .tk = 45,
         .dk = 32,
         .dv = 64,
         .causal = SDPA_CAUSAL_BOTTOM_RIGHT,
         .with_lens = true},
    };
    rng r = {61};
    for (int s = 0; s < 2; s++)
        for (int t = 0; t < QUANT_TYPES; t++) {
            problem p = shapes[s];
            problem_make(&p, quant_types[t], 70 + (uint64_t)(s * 4 + t));
            const size_t n = out_elems(&p);
            float *want = malloc(n * sizeof *want), *got = malloc(n * 4);
            assert_non_null(want);
            assert_non_null(got);
            for (int pi = 0; pi < 4; pi++) {
                sdpa_ctx *ctx = make_ctx(SDPA_KERNEL_AUTO, all_paths[pi], 2);
                sdpa_forward_args a =
                    problem_args(&p, SDPA_FLOAT32, p.q.mem, want, NULL);
                assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
                for (int pg = 0; pg < 3; pg++)
                    for (int vllm = 0; vllm < 2; vllm++) {
                        pool pl = make_pool(&p, pages[pg], vllm, &r);
                        a.out.data = got;
                        a.k = pl.k;
                        a.v = pl.v;
                        a.block_table = pl.table;
                        a.pages_per_seq = pl.pages_per_seq;
                        a.block_table_stride = pl.stride;
                        memset(got, 0, n * sizeof *got);
                        const int st = sdpa_forward(ctx, &a);
                        if (st != SDPA_OK)
                            fail_msg("%s, page %lld: status %d (%s)",
                                     type_name(p.k.type), (long long)pages[pg],
                                     st, sdpa_ctx_last_error(ctx));
                        if (memcmp(want, got, n * sizeof *got) != 0)
                            fail_msg("shape %d, %s K/V, %s path, page %lld, "
                                     "%s layout: paged output differs from "
                                     "contiguous",
                                     s, type_name(p.k.type), path_names[pi],
                                     (long long)pages[pg],
                                     vllm ? "vLLM" : "head-major");
                        free(pl.kmem);
                        free(pl.vmem);
                        free(pl.table);
                        a = problem_args(&p, SDPA_FLOAT32, p.q.mem, want, NULL);
                    }
                sdpa_ctx_destroy(ctx);
            }
            free(want);
            free(got);
            problem_free(&p);
        }
}

/* ---- Non-finite codes and scales ---------------------------------------- */

/* Overwrite value (b, h, j, e) of x with a non-finite one: a NaN code for
 * E4M3, an infinity for E5M2, the block's d a NaN. */
static void poison(qtensor *x, int64_t b, int64_t h, int64_t j, int64_t e)
{
    unsigned char *u =
        x->mem + quant_codec_unit_at(x->type, toff(&x->t, b, h, j, e));
    if (x->type == SDPA_FP8_E4M3)
        *u = 0x7f;
    else if (x->type == SDPA_FP8_E5M2)
        *u = 0xfc;
    else
        u[0] = 0x00, u[1] = 0x7e;
}

static void test_nonfinite(void **state)
{
    (void)state;
    for (int t = 0; t < QUANT_TYPES; t++)
        for (int pi = 0; pi < 4; pi++)
            for (int which = 0; which < 2; which++) {
                problem p = {.n = 2,
                             .hq = 4,
                             .hkv = 2,
                             .tq = 3,
                             .tk = 40,
                             .dk = 32,
                             .dv = 32,
                             .with_lens = true};
                problem_make(&p, quant_types[t], 90 + (uint64_t)t);
                sdpa_ctx *ctx = make_ctx(SDPA_KERNEL_AUTO, all_paths[pi], 1);
                const size_t n = out_elems(&p);
                float *out = malloc(n * sizeof *out);
                assert_non_null(out);
                sdpa_forward_args a =
                    problem_args(&p, SDPA_FLOAT32, p.q.mem, out, NULL);
                /* past item 1's length (tk - 2): no row reads it */
                poison(which ? &p.v : &p.k, 1, 1, p.tk - 1, 0);
                assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
                for (size_t i = 0; i < n; i++)
                    assert_true(isfinite(out[i]));
                /* key 5 of item 1, KV head 1: query heads 2 and 3 read it
                 * (a row whose logit is -inf gives it no weight: the
                 * other head reports) */
                poison(which ? &p.v : &p.k, 1, 1, 5, 0);
                fill_sentinel(out, n * sizeof *out);
                const int st = sdpa_forward(ctx, &a);
                if (st != SDPA_ERR_NONFINITE)
                    fail_msg("%s %s non-finite, %s path: status %d (%s)",
                             type_name(p.k.type), which ? "V" : "K",
                             path_names[pi], st, sdpa_ctx_last_error(ctx));
                const char *m = sdpa_ctx_last_error(ctx);
                if (!strstr(m, "batch 1,") ||
                    (!strstr(m, "head 2,") && !strstr(m, "head 3,")))
                    fail_msg("%s: the message \"%s\" does not name item 1, "
                             "head 2 or 3",
                             type_name(p.k.type), m);
                free(out);
                sdpa_ctx_destroy(ctx);
                problem_free(&p);
            }
}

/* ---- Refusals ----------------------------------------------------------- */

static void expect(sdpa_ctx *ctx, const sdpa_forward_args *a, int status,
                   const char *words, float *out, size_t n)
{
    fill_sentinel(out, n * sizeof *out);
    const int got = sdpa_forward(ctx, a);
    if (got != status)
        fail_msg("expected status %d, got %d (%s)", status, got,
                 sdpa_ctx_last_error(ctx));
    assert_int_equal(first_non_sentinel(out, n * sizeof *out), -1);
    if (!strstr(sdpa_ctx_last_error(ctx), words))
        fail_msg("message \"%s\" lacks \"%s\"", sdpa_ctx_last_error(ctx),
                 words);
    size_t bytes = 1;
    assert_int_equal(sdpa_forward_workspace(ctx, a, &bytes), status);
}

static void test_refusals(void **state)
{
    (void)state;
    problem p = {
        .n = 1, .hq = 2, .hkv = 2, .tq = 2, .tk = 5, .dk = 64, .dv = 32};
    sdpa_ctx *ctx = tp_ctx(0);
    const size_t n = out_elems(&p);
    float *out = malloc(n * sizeof *out), lse[4];
    assert_non_null(out);
    for (int t = 0; t < QUANT_TYPES; t++) {
        problem_make(&p, quant_types[t], 5);
        sdpa_forward_args a = problem_args(&p, SDPA_FLOAT32, p.q.mem, out, lse);
        sdpa_forward_args b = a;
        /* K/V only, and computed in float32 */
        b.dtype = quant_types[t];
        expect(ctx, &b, SDPA_ERR_BAD_DTYPE, "dtype", out, n);
        b = a;
        b.dtype = SDPA_FLOAT64;
        expect(ctx, &b, SDPA_ERR_BAD_DTYPE, "mix SDPA_FLOAT64", out, n);
        /* scales: FP8 only, finite, above 0; the head named */
        static const float neg[2] = {1, -0.5f}, one[2] = {1, 1};
        b = a;
        if (quant_codec_is_block(p.k.type)) {
            b.v_scale = one;
            expect(ctx, &b, SDPA_ERR_BAD_KV_SCALE, "v_scale", out, n);
            /* rows are whole blocks; strides count values, whole blocks */
            b = a;
            b.v.shape[3] = 16;
            b.out.shape[3] = 16;
            expect(ctx, &b, SDPA_ERR_BAD_DIM,
                   "v.shape[3] is 16, not a multiple of 32", out, n);
            b = a;
            b.k.stride[2] += 16;
            b.k.stride[0] += 16 * p.tk;
            expect(ctx, &b, SDPA_ERR_BAD_STRIDE, "k.stride", out, n);
            /* in a ragged call too, where no sequence's own view steps
             * along that stride: two sequences of one key each, packed */
            static const int64_t offsets[3] = {0, 1, 2};
            b = a;
            b.seqs = 2;
            b.q_offsets = offsets;
            b.kv_offsets = offsets;
            b.k.shape[2] = b.v.shape[2] = 2;
            b.k.stride[2] += 16;
            char words[64];
            snprintf(words, sizeof words,
                     "k.stride[2] is %lld, not a multiple of 32",
                     (long long)b.k.stride[2]);
            expect(ctx, &b, SDPA_ERR_BAD_STRIDE, words, out, n);
        } else {
            b.v_scale = neg;
            expect(ctx, &b, SDPA_ERR_BAD_KV_SCALE, "v_scale[1] (KV head 1)",
                   out, n);
            /* positive, but 0 in float32 times the scale 1/8: no scale */
            static const float tiny[2] = {1, FLT_TRUE_MIN};
            b = a;
            b.k_scale = tiny;
            expect(ctx, &b, SDPA_ERR_BAD_KV_SCALE,
                   "k_scale[1] (KV head 1) is 1.4013e-45: times the scale "
                   "0.125 it rounds to 0 in float32",
                   out, n);
            /* the same on v_scale only scales outputs: accepted */
            b = a;
            b.v_scale = tiny;
            assert_int_equal(sdpa_forward(ctx, &b), SDPA_OK);
        }
        /* the backward takes no quantized K/V */
        sdpa_backward_args g = tp_backward_of(&a);
        g.kv_dtype = a.kv_dtype;
        float *grads =
            calloc(4 * (n + p.q.elems + p.k.value.elems + p.v.value.elems),
                   sizeof(float));
        assert_non_null(grads);
        g.dout = a.out;
        g.dout.data = grads;
        g.dq = a.q;
        g.dq.data = grads + n;
        g.dk = a.k;
        g.dk.data = grads + n + p.q.elems;
        g.dv = a.v;
        g.dv.data = grads + n + p.q.elems + p.k.value.elems;
        const int st = sdpa_backward(ctx, &g);
        if (st != SDPA_ERR_BAD_DTYPE)
            fail_msg("%s: sdpa_backward gave %d (%s)", type_name(p.k.type), st,
                     sdpa_ctx_last_error(ctx));
        free(grads);
        problem_free(&p);
    }
    free(out);
    sdpa_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_all_codes),
        cmocka_unit_test(test_blocks_decode),
        cmocka_unit_test(test_kernel_sets_decode),
        cmocka_unit_test(test_decode_shapes),
        cmocka_unit_test(test_prefill_shapes),
        cmocka_unit_test(test_paged_equals_contiguous),
        cmocka_unit_test(test_nonfinite),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
