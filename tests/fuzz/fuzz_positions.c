/*
 * libFuzzer target for the functions without a context: sdpa_rope_apply,
 * sdpa_sinusoidal_table and sdpa_alibi_slopes (field F_FUNC selects one).
 *
 * RoPE decodes dtype (also the declared half types and invalid values), a
 * [N, H, T, D] view (heads outer or inner, padded rows; negative, zero,
 * non-unit innermost or arbitrary strides; extents <= 0; huge extents at a
 * fake address near the top of the address space), NULL data, the style
 * (also invalid), rotary_dim (0, even, odd, beyond D, negative), base (0,
 * typical, below 1, subnormal, huge; NaN, inf, negative), positions (NULL,
 * small, large, INT64_MIN / MAX) and the values' magnitude. The sinusoidal
 * table decodes dtype, tokens and dim (small, <= 0, huge), offset (also
 * where offset + tokens overflows), base, and the table (NULL, real, a
 * fake address near the top). ALiBi decodes heads (1..300, <= 0), max_bias
 * (0 = 8, typical, tiny, huge, -0; NaN, inf, negative) and slopes (NULL or
 * real).
 *
 * Checks: every status documented and one the arguments call for; on a
 * refusal nothing written (guard bytes after each buffer included); inputs
 * never written; on success every value against the closed form in long
 * double: RoPE's rotated pairs within the bound src/layer/positions.c states,
 * (2.5 |p| + 8) 2^-53 of the pair's norm, generalised to any base (the
 * angle's error |p| f (3 + |ln base| 2r/d) 2^-53; float32 adds its
 * rounding), and where the angle is too large for any bound, a finite value
 * within the pair's norm; elements beyond rotary_dim and padding
 * untouched; the table's values likewise; the slopes 2^(-max_bias (h+1)/n)
 * and the odd terms of the 2n sequence within a few ulp.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_ref.h"

enum field {
    F_FUNC,
    F_DTYPE,
    F_DTYPE_RAW,
    F_N,
    F_H,
    F_T,
    F_D,
    F_LAYOUT,
    F_PAD,
    F_BAD_KIND,
    F_BAD_DIM,
    F_BAD_VAL,
    F_STYLE,
    F_ROT,
    F_BASE,
    F_BASE_FRAC,
    F_POS,
    F_POS_VAL,
    F_AMP,
    F_HUGE,
    F_TOKENS,
    F_DIM,
    F_OFFSET,
    F_TABLE,
    F_HEADS,
    F_MAXBIAS,
    F_MB_FRAC,
    F_SEED0, /* eight bytes */
    F_COUNT = F_SEED0 + 8
};

static const double u53 = 0x1p-53;

/* base: 0 (= 10000), typical, below 1, subnormal, huge; bad values
 * (BAD_SCALE) */
static double decode_base(int *bad)
{
    static const double vals[16] = {0,   10000,    500000, 1.5,      2,    0.5,
                                    1,   1e-300,   5e-324, 1e300,    -0.0, 100,
                                    NAN, INFINITY, -1,     -INFINITY};
    unsigned v = fz(F_BASE);
    double b = v % 4 == 3 ? 1.0 + 1e5 * (double)fz(F_BASE_FRAC) / 255.0
                          : vals[(v >> 2) % 16];
    /* 0 or finite and at least 1: a base below 1 overflowed the
     * frequencies (subnormal) or the angles of large positions (finding
     * 1, fixed: now BAD_SCALE) */
    *bad = !(isfinite(b) && (b == 0 || b >= 1));
    return b;
}

/* ------------------------------------------------------------------------ */
/* RoPE.                                                                     */
/* ------------------------------------------------------------------------ */
static void run_rope(void)
{
    fz_dtype dt = fz_decode_dtype(fz(F_DTYPE), fz(F_DTYPE_RAW));
    const int f32 = dt.compute == SDPA_FLOAT32;
    const size_t es = fz_esize(dt.compute);
    fz_sset errs = 0, amb = 0;
    if (!dt.valid)
        errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    int64_t N = 1 + (int64_t)(fz(F_N) % 3), H = 1 + (int64_t)(fz(F_H) % 3);
    int64_t T = 1 + (int64_t)(fz(F_T) % 6);
    /* up to 12, or even up to 80: the highest frequencies of a base far
     * below 1 need 2r/d near 1 (finding 1) */
    int64_t D = fz(F_D) < 200 ? 1 + (int64_t)(fz(F_D) % 12)
                              : 2 * (1 + (int64_t)((fz(F_D) - 200) % 40));
    int style = fz(F_STYLE) % 8 < 4 ? SDPA_ROPE_HALF : SDPA_ROPE_INTERLEAVED;
    if (fz(F_STYLE) % 8 == 7) {
        static const int bad[4] = {0, 3, -1, INT_MAX};
        style = bad[(fz(F_STYLE) >> 3) % 4];
        errs |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
    }
    unsigned rv = fz(F_ROT);
    int64_t rot = 0;
    switch (rv % 8) {
    case 4:
    case 5:
        rot = 2 * (1 + (int64_t)((rv >> 3) % (unsigned)(D / 2 + 1)));
        break;
    case 6:
        rot = 1 + 2 * (int64_t)((rv >> 3) % 4); /* odd */
        break;
    case 7: {
        const int64_t bad[4] = {D + 2, -2, INT64_MIN, INT64_MAX};
        rot = bad[(rv >> 3) % 4];
        break;
    }
    default:
        break;
    }
    const int64_t rd = rot == 0 ? D : rot;
    if (rot < 0 || rd > D || rd % 2 != 0)
        errs |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
    int bad_base;
    double base = decode_base(&bad_base);
    if (bad_base)
        errs |= FZ_BIT(SDPA_ERR_BAD_SCALE);

    fz_tens x;
    memset(&x, 0, sizeof x);
    x.present = 1;
    x.es = es;
    fz_set_layout(&x.t, N, H, T, D, fz(F_LAYOUT) & 1,
                  (int64_t)(fz(F_PAD) % 4 == 3 ? fz(F_PAD) >> 2 & 7 : 0));
    unsigned bk = fz(F_BAD_KIND) % 16, bv = fz(F_BAD_VAL);
    int bd = (int)(fz(F_BAD_DIM) % 4);
    int null_data = 0, huge = 0;
    size_t fallback = 0;
    switch (bk) {
    case 9: /* negative stride */
        x.t.stride[bd] = -1 - (int64_t)(bv % 3);
        errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        break;
    case 10: /* zero or any small stride: the no-element-twice rule */
    case 11:
        x.t.stride[bd] = bk == 10 ? 0 : (int64_t)(bv % 40);
        break;
    case 12: { /* extent <= 0 */
        static const int64_t vals[3] = {0, -1, INT64_MIN};
        fallback = 1;
        x.t.shape[bd] = vals[bv % 3];
        errs |= FZ_BIT(SDPA_ERR_BAD_DIM);
        break;
    }
    case 13:
        null_data = 1;
        errs |= FZ_BIT(SDPA_ERR_NULL_POINTER);
        break;
    case 14: { /* huge, at a fake address: refused */
        static const int64_t vals[5] = {INT64_C(1) << 30, INT64_C(1) << 40,
                                        INT64_C(1) << 62, INT64_MAX,
                                        INT64_C(3) << 31};
        huge = 1;
        x.t.shape[bd] = vals[bv % 5];
        if (bd == 3 && rot == 0 && x.t.shape[3] % 2 != 0)
            errs |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
        fz_set_layout(&x.t, x.t.shape[0], x.t.shape[1], x.t.shape[2],
                      x.t.shape[3], fz(F_LAYOUT) & 1, 0);
        /* (strides saturated at INT64_MAX may also look overlapping) */
        errs |= FZ_BIT(SDPA_ERR_OVERFLOW) | FZ_BIT(SDPA_ERR_BAD_STRIDE);
        break;
    }
    default:
        break;
    }
    if (x.t.stride[3] != 1 && !(errs & FZ_BIT(SDPA_ERR_BAD_DIM))) {
        if (x.t.shape[3] > 1)
            errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        else /* the header: innermost 1, even for one element */
            amb |= FZ_BIT(SDPA_ERR_BAD_STRIDE) | FZ_BIT(SDPA_OK);
    }
    if (!huge && !(errs & FZ_BIT(SDPA_ERR_BAD_DIM)) && !fz_sorted_rule(&x.t, 0))
        errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
    /* BAD_STRIDE for an innermost stride != 1 of one element is taken,
     * and so is success: drop it from errs then */
    if (amb && !(errs & ~FZ_BIT(SDPA_ERR_BAD_STRIDE)) && x.t.shape[3] == 1 &&
        fz_sorted_rule(&x.t, 0) && x.t.stride[0] >= 0 && x.t.stride[1] >= 0 &&
        x.t.stride[2] >= 0)
        errs &= ~FZ_BIT(SDPA_ERR_BAD_STRIDE);
    if (huge) {
        x.t.data = fz_top_ptr(0);
    } else {
        int inj = fz_tens_alloc(&x, "x", 1, fallback);
        if (inj < 0 && !(errs & FZ_BIT(SDPA_ERR_BAD_DIM)))
            CHECK(errs & FZ_BIT(SDPA_ERR_BAD_STRIDE), "harness: x map");
    }
    /* values: x within its view (the rest stays the sentinel) */
    static const double amps[8] = {1, 1, 1, 3, 1e-30, 1e30, 1e300, 1e-310};
    double amp = amps[fz(F_AMP) % 8];
    if (f32 && amp > 1e37)
        amp = 1e37;
    int64_t cnt = 0;
    if (!huge && !(errs & FZ_BIT(SDPA_ERR_BAD_DIM)) && !errs)
        for (int64_t b = 0; b < N; b++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = 0; t < T; t++)
                    for (int64_t c = 0; c < D; c++, cnt++)
                        fz_set(&x, fz_off4(&x.t, b, h, t, c), fz_sym(amp));
    /* positions */
    int64_t *pos = NULL;
    unsigned pm = fz(F_POS) % 8;
    if (pm >= 3 && !huge) {
        fz_buf *pb =
            fz_buf_new("positions", 0, (size_t)(N * T) * sizeof(int64_t));
        pos = (int64_t *)(void *)pb->mem;
        static const int64_t ext[6] = {INT64_MAX,        INT64_MIN,
                                       INT64_C(1) << 40, -(INT64_C(1) << 40),
                                       INT64_C(1) << 53, 1000000};
        for (int64_t i = 0; i < N * T; i++)
            pos[i] = pm == 3   ? fz_below(201) - 100
                     : pm == 4 ? fz_below(2000001) - 1000000
                     : pm == 5 ? (int64_t)(fz_rnd() >> (fz_rnd() % 64))
                     : pm == 6 ? fz_below(64)
                               : ext[(size_t)fz_below(6)];
    }
    fz_desc[0] = '\0';
    fz_describe("rope dtype=%d x{%lld,%lld,%lld,%lld|%lld,%lld,%lld,%lld} "
                "style=%d rot=%lld base=%g pos=%u amp=%g",
                dt.dtype, (long long)x.t.shape[0], (long long)x.t.shape[1],
                (long long)x.t.shape[2], (long long)x.t.shape[3],
                (long long)x.t.stride[0], (long long)x.t.stride[1],
                (long long)x.t.stride[2], (long long)x.t.stride[3], style,
                (long long)rot, base, pm, amp);
    fz_sset expect = errs | amb;
    if (!errs)
        expect |= FZ_BIT(SDPA_OK);
    if (dt.pending)
        expect |= FZ_ALL_DOCUMENTED;
    sdpa_tensor call = x.t;
    if (null_data)
        call.data = NULL;
    fz_snapshot();
    int st = sdpa_rope_apply(dt.dtype, call, pos, style, base, rot);
    fz_check_status("sdpa_rope_apply", st, expect, NULL);
    if (st != SDPA_OK) {
        fz_check_bufs(1, 0, "refused rope");
        return;
    }
    if (!dt.valid)
        return;
    fz_check_bufs(0, 1, "rope");
    /* every row against the rotation in long double */
    long double row[96], norm[96];
    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t t = 0; t < T; t++) {
                const int64_t p = pos ? pos[b * T + t] : t;
                const unsigned char *snap = x.b->snap;
                for (int64_t c = 0; c < D; c++)
                    row[c] = fz_get_raw(snap, es, fz_off4(&x.t, b, h, t, c));
                for (int64_t c = 0; c < D; c++) {
                    int64_t r, q = ref_rope_partner(c, rd, style, &r);
                    norm[c] = q < 0 ? 0 : hypotl(row[c], row[q]);
                }
                long double orig[96];
                memcpy(orig, row, sizeof(long double) * (size_t)D);
                ref_rope_row(row, D, rd, style, base, p);
                for (int64_t c = 0; c < D; c++) {
                    int64_t off = fz_off4(&x.t, b, h, t, c);
                    double got = fz_get(&x, off);
                    int64_t r, q = ref_rope_partner(c, rd, style, &r);
                    if (q < 0) { /* beyond rotary_dim: left as is */
                        double was = (double)orig[c];
                        CHECK(memcmp(&got, &was, sizeof got) == 0,
                              "x[%lld,%lld,%lld,%lld] beyond rotary_dim %lld "
                              "changed: %.17g -> %.17g",
                              (long long)b, (long long)h, (long long)t,
                              (long long)c, (long long)rd, was, got);
                        continue;
                    }
                    long double ab = ref_angle_bound(base, p, r, rd);
                    long double tol = 2 * norm[c] * (ab + (f32 ? 0x1p-24L : 0));
                    long double ref = row[c];
                    if (ab >= 1) { /* any angle: a value within the norm */
                        CHECK(isfinite(got) &&
                                  fabsl((long double)got) <=
                                      norm[c] * (1 + 0x1p-20L) +
                                          (long double)DBL_TRUE_MIN,
                              "x[%lld,%lld,%lld,%lld] = %.17g at position "
                              "%lld: beyond the pair's norm %.17Lg",
                              (long long)b, (long long)h, (long long)t,
                              (long long)c, got, (long long)p, norm[c]);
                        continue;
                    }
                    if (f32 && !isfinite(got) &&
                        fabsl(ref) + tol >= (long double)FLT_MAX &&
                        signbit(got) == signbit((double)ref))
                        continue; /* overflows float, as rounding must */
                    CHECK(fabsl((long double)got - ref) <=
                              tol + (f32 ? (long double)FLT_TRUE_MIN
                                         : (long double)DBL_TRUE_MIN),
                          "x[%lld,%lld,%lld,%lld] = %.17g, rotated to "
                          "position %lld the reference is %.17Lg, tolerance "
                          "%.3Lg (style %d, rotary_dim %lld, base %g)",
                          (long long)b, (long long)h, (long long)t,
                          (long long)c, got, (long long)p, ref, tol, style,
                          (long long)rd, base);
                }
            }
}

/* ------------------------------------------------------------------------ */
/* The sinusoidal table.                                                     */
/* ------------------------------------------------------------------------ */
static void run_table(void)
{
    fz_dtype dt = fz_decode_dtype(fz(F_DTYPE), fz(F_DTYPE_RAW));
    const int f32 = dt.compute == SDPA_FLOAT32;
    const size_t es = fz_esize(dt.compute);
    fz_sset errs = 0;
    if (!dt.valid)
        errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    static const int64_t odd[8] = {0,
                                   -1,
                                   INT64_MIN,
                                   INT64_C(1) << 30,
                                   INT64_C(1) << 40,
                                   INT64_MAX,
                                   INT64_C(1) << 61,
                                   INT64_C(3) << 31};
    unsigned tv = fz(F_TOKENS), dv = fz(F_DIM);
    int64_t tokens = tv % 8 == 7 ? odd[(tv >> 3) % 8] : 1 + (int64_t)(tv % 40);
    int64_t dim = dv % 8 == 7   ? odd[(dv >> 3) % 8]
                  : dv % 8 == 6 ? 44 + (int64_t)((dv >> 3) % 37)
                                : 1 + (int64_t)(dv % 20);
    if (tokens <= 0 || dim <= 0)
        errs |= FZ_BIT(SDPA_ERR_BAD_DIM);
    static const int64_t offs[8] = {
        0,         7,     -5,           INT64_C(1) << 40, -(INT64_C(1) << 40),
        INT64_MAX, 10000, INT64_MIN + 3};
    unsigned ov = fz(F_OFFSET);
    int64_t offset = ov % 2 ? offs[(ov >> 1) % 8] : 0;
    if (offset == INT64_MAX && ov & 0x80)
        offset = INT64_MAX - (int64_t)(ov >> 4 & 7);
    int bad_base;
    double base = decode_base(&bad_base);
    if (bad_base)
        errs |= FZ_BIT(SDPA_ERR_BAD_SCALE);
    /* a table of 2^30 values or more: at a fake address near the top of
     * the address space, refused before anything is written */
    int big = tokens > 0 && dim > 0 &&
              (tokens >= (INT64_C(1) << 30) || dim >= (INT64_C(1) << 30));
    if (!(errs & FZ_BIT(SDPA_ERR_BAD_DIM)) &&
        (big || (offset > 0 && tokens - 1 > INT64_MAX - offset)))
        errs |= FZ_BIT(SDPA_ERR_OVERFLOW);
    void *table;
    fz_buf *buf = NULL;
    if (fz(F_TABLE) % 8 == 7) {
        table = NULL;
        errs |= FZ_BIT(SDPA_ERR_NULL_POINTER);
    } else if (big) {
        table = fz_top_ptr(1);
    } else {
        size_t n = !(errs & FZ_BIT(SDPA_ERR_BAD_DIM))
                       ? (size_t)tokens * (size_t)dim
                       : 1;
        buf = fz_buf_new("table", 1, n * es);
        fz_buf_allow(buf, 0, n * es);
        table = buf->mem;
    }
    fz_desc[0] = '\0';
    fz_describe("table dtype=%d tokens=%lld dim=%lld offset=%lld base=%g "
                "table=%p",
                dt.dtype, (long long)tokens, (long long)dim, (long long)offset,
                base, table);
    fz_sset expect = errs;
    if (!errs)
        expect |= FZ_BIT(SDPA_OK);
    if (dt.pending)
        expect |= FZ_ALL_DOCUMENTED;
    fz_snapshot();
    int st = sdpa_sinusoidal_table(dt.dtype, tokens, dim, offset, base, table);
    fz_check_status("sdpa_sinusoidal_table", st, expect, NULL);
    if (st != SDPA_OK || !dt.valid) {
        if (st != SDPA_OK)
            fz_check_bufs(1, 0, "refused table");
        return;
    }
    fz_check_bufs(0, 1, "table");
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t c = 0; c < dim; c++) {
            double got = fz_get_raw(buf->mem, es, t * dim + c);
            int64_t p = offset + t;
            long double ref = ref_sinusoid(base, p, c, dim);
            long double ab = ref_angle_bound(base, p, c / 2, dim);
            if (ab >= 1) {
                CHECK(isfinite(got) && fabs(got) <= 1.0,
                      "table[%lld][%lld] = %.17g at position %lld (base %g)",
                      (long long)t, (long long)c, got, (long long)p, base);
                continue;
            }
            long double tol = 2 * (ab + (f32 ? 0x1p-24L : 0));
            CHECK(fabsl((long double)got - ref) <= tol,
                  "table[%lld][%lld] = %.17g, reference %.17Lg at position "
                  "%lld, tolerance %.3Lg (dim %lld, base %g)",
                  (long long)t, (long long)c, got, ref, (long long)p, tol,
                  (long long)dim, base);
        }
}

/* ------------------------------------------------------------------------ */
/* ALiBi slopes.                                                             */
/* ------------------------------------------------------------------------ */
static void run_alibi(void)
{
    fz_sset errs = 0;
    unsigned hv = fz(F_HEADS);
    static const int64_t bad_heads[3] = {0, -1, INT64_MIN};
    int64_t heads = hv % 16 == 15 ? bad_heads[(hv >> 4) % 3]
                    : hv % 16 < 8 ? 1 + (int64_t)(hv % 16)
                                  : 1 + (int64_t)hv;
    if (heads <= 0)
        errs |= FZ_BIT(SDPA_ERR_BAD_DIM);
    static const double mbs[16] = {
        0,       8,    1,   16, 0.5, 1e-300,   5e-324, 1e300,
        DBL_MAX, -0.0, 1e6, 3,  NAN, INFINITY, -1,     -INFINITY};
    unsigned mv = fz(F_MAXBIAS);
    double max_bias = mv % 4 == 3 ? 32.0 * (double)fz(F_MB_FRAC) / 255.0
                                  : mbs[(mv >> 2) % 16];
    if (!(isfinite(max_bias) && max_bias >= 0))
        errs |= FZ_BIT(SDPA_ERR_BAD_ALIBI);
    double *slopes = NULL;
    if (fz(F_TABLE) % 8 == 7) {
        errs |= FZ_BIT(SDPA_ERR_NULL_POINTER);
    } else {
        size_t bytes = (size_t)(heads > 0 ? heads : 1) * sizeof(double);
        fz_buf *b = fz_buf_new("slopes", 1, bytes);
        fz_buf_allow(b, 0, bytes);
        slopes = (double *)(void *)b->mem;
    }
    fz_desc[0] = '\0';
    fz_describe("alibi heads=%lld max_bias=%g slopes=%p", (long long)heads,
                max_bias, (void *)slopes);
    fz_sset expect = errs ? errs : FZ_BIT(SDPA_OK);
    fz_snapshot();
    int st = sdpa_alibi_slopes(heads, max_bias, slopes);
    fz_check_status("sdpa_alibi_slopes", st, expect, NULL);
    if (st != SDPA_OK) {
        fz_check_bufs(1, 0, "refused alibi_slopes");
        return;
    }
    fz_check_bufs(0, 1, "alibi_slopes"); /* the guard after the last */
    const long double bias = max_bias == 0 ? 8.0L : (long double)max_bias;
    int64_t n = 1;
    while (n <= heads / 2)
        n *= 2;
    for (int64_t h = 0; h < heads; h++) {
        long double e = h < n ? -bias * (long double)(h + 1) / (long double)n
                              : -bias * (long double)(2 * (h - n) + 1) /
                                    (long double)(2 * n);
        long double ref = exp2l(e);
        /* the exponent's rounding moves 2^e by |e| ln 2 2^-53 relatively;
         * exp2 and the division a few ulp */
        long double tol =
            2 * ((fabsl(e) * 0.6931471805599453L + 4) * u53 * ref +
                 (long double)DBL_TRUE_MIN);
        CHECK(fabsl((long double)slopes[h] - ref) <= tol,
              "slopes[%lld] = %.17g, reference %.17Lg, tolerance %.3Lg "
              "(heads %lld, max_bias %g)",
              (long long)h, slopes[h], ref, tol, (long long)heads, max_bias);
    }
}

static const fz_seed seeds[] = {
    {"rope_interleaved_positions_f64",
     {{F_STYLE, 4},
      {F_DTYPE, 9},
      {F_POS, 3},
      {F_D, 7},
      {F_T, 4},
      {F_N, 1},
      {-1, 0}}},
    {"rope_partial_rotary_bthd_pad",
     {{F_ROT, 4 | (1 << 3)},
      {F_D, 9},
      {F_LAYOUT, 1},
      {F_PAD, 3 | (2 << 2)},
      {F_H, 2},
      {-1, 0}}},
    {"rope_large_positions_base",
     {{F_POS, 5}, {F_BASE, 3}, {F_BASE_FRAC, 200}, {F_D, 5}, {-1, 0}}},
    {"rope_odd_dim_refused", {{F_D, 2}, {-1, 0}}},
    {"rope_bad_style", {{F_STYLE, 7}, {F_D, 3}, {-1, 0}}},
    {"rope_writes_twice",
     {{F_BAD_KIND, 10}, {F_BAD_DIM, 2}, {F_T, 3}, {-1, 0}}},
    {"rope_huge_refused",
     {{F_BAD_KIND, 14}, {F_BAD_DIM, 0}, {F_BAD_VAL, 1}, {F_D, 3}, {-1, 0}}},
    {"rope_tiny_base", {{F_BASE, 7 << 2}, {F_D, 11}, {F_POS, 6}, {-1, 0}}},
    {"table_default", {{F_FUNC, 1}, {F_TOKENS, 9}, {F_DIM, 6}, {-1, 0}}},
    {"table_odd_dim_offset_f64",
     {{F_FUNC, 1},
      {F_DTYPE, 9},
      {F_TOKENS, 5},
      {F_DIM, 4},
      {F_OFFSET, 1 | (3 << 1)},
      {-1, 0}}},
    {"table_offset_overflow",
     {{F_FUNC, 1}, {F_TOKENS, 3}, {F_OFFSET, 1 | (5 << 1)}, {-1, 0}}},
    {"table_huge_refused",
     {{F_FUNC, 1}, {F_TOKENS, 7 | (4 << 3)}, {F_DIM, 9}, {-1, 0}}},
    {"table_null", {{F_FUNC, 1}, {F_TABLE, 7}, {-1, 0}}},
    {"alibi_default", {{F_FUNC, 2}, {F_HEADS, 5}, {-1, 0}}},
    {"alibi_not_power_of_two",
     {{F_FUNC, 2}, {F_HEADS, 11}, {F_MAXBIAS, 3}, {F_MB_FRAC, 77}, {-1, 0}}},
    {"alibi_bad_bias", {{F_FUNC, 2}, {F_MAXBIAS, 12 << 2}, {-1, 0}}},
    {"alibi_bad_heads", {{F_FUNC, 2}, {F_HEADS, 15}, {-1, 0}}},
};

static void run_one(void)
{
    switch (fz(F_FUNC) % 3) {
    case 0:
        run_rope();
        break;
    case 1:
        run_table();
        break;
    default:
        run_alibi();
        break;
    }
}

FZ_TARGET("fuzz_positions", "POSITIONS", "rope_half_default", F_SEED0, 0, NULL,
          run_one, NULL);
