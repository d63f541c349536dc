/*
 * libFuzzer target for sdpa_forward over quantized K/V (1.2): FP8 E4M3 and
 * E5M2 with k_scale / v_scale, ggml's Q8_0 and Q4_0 blocks.
 *
 * Every input is a fixed header of one-byte fields (enum field below; bytes
 * past the end read as 0, so the empty input is a small valid call). The
 * fields choose:
 *  - kv_dtype among the four types (and values no release takes), dtype of
 *    q and out among float32, float16 and bfloat16 (and the refused
 *    float64 and quantized ones);
 *  - shapes (N, Hkv, GQA group, Tq, Tk up to 600, Dk and Dv: any for FP8,
 *    whole blocks of 32 for the block types or not), K and V each in
 *    llama.cpp's [T, H, D] or [H, T, D] layout with padded rows (a whole
 *    block, or half of one: a stride that splits a block);
 *  - paged K/V: shuffled pools of pages of 1..16 keys in vLLM's or a
 *    head-major layout, blocks copied byte for byte;
 *  - kv_lens, causal anchors, the per-KV-head scales (absent, present,
 *    NaN, infinite, zero, negative, tiny (the least normal float, 2^-60),
 *    a k_scale that times the scale is 0 in float32, or given with a
 *    block type);
 *  - one injected non-finite: a NaN code (E4M3 0x7f, an E5M2 NaN, a NaN
 *    block d) or an infinity (E5M2, a block d) at a key some row reads,
 *    or at one no row reads (past kv_lens);
 *  - one injected refusal (kv_lens out of range, a bad page, a K stride[3]
 *    of 2); the context's options (paths, kernels, threads, blocks).
 * Checks (abort on the first violation):
 *  - the status is documented and one of those the arguments call for;
 *    a NaN at a read key is SDPA_ERR_NONFINITE; a message exactly on
 *    error; after a refusal every output byte untouched; inputs never
 *    written; sdpa_forward_workspace gives the status of every refusal
 *    found before the computation, and allocates nothing;
 *  - on success: out (in its type) and lse against the long-double
 *    reference (tests/common/reference.c) run in float64 on the values the
 *    tests' own decoders give (tests/common/quant_codec.h: scale · code),
 *    within the float32 tolerance of tests/common/problem.c plus one
 *    rounding of out; out finite;
 *  - paged K/V gives bitwise the status and outputs of the contiguous call;
 *    a second call (another thread count, or the same again) bitwise the
 *    first's, and a repeated one allocates nothing.
 *
 * Seed corpus: FUZZ_QUANT_WRITE_CORPUS=<dir> ./fuzz_quant writes the empty
 * input's seed and the hand-made seeds of seeds[] to <dir> and exits.
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
#include "half_codec.h"
#include "quant_codec.h"

enum field {
    F_KVTYPE,
    F_QTYPE,
    F_N,
    F_HKV,
    F_GROUP,
    F_TQ,
    F_TK,
    F_DK,
    F_DV,
    F_LAYOUT,
    F_PAGE,
    F_LENS,
    F_CAUSAL,
    F_SCALES,
    F_SPECIAL,
    F_ERR,
    F_AMP,
    F_SECOND,
    F_OPT, /* eight bytes: fz_apply_options */
    F_SEED0 = F_OPT + 8,
    F_COUNT = F_SEED0 + 8
};

enum { MAXN = 3, MAXH = 3 };

typedef struct cfg {
    int kv_field, kvt; /* what the call gets; the buffers' type */
    int dtype, qt;
    int64_t n, hkv, hq, tq, tk, dk, dv;
    int k_bthd, v_bthd;
    int64_t k_pad, v_pad;
    int64_t page; /* 0: contiguous */
    int vllm;
    int64_t lens[MAXN];
    int with_lens, causal;
    float k_scale[MAXH], v_scale[MAXH];
    int with_k_scale, with_v_scale;
    fz_sset errs;
} cfg;

static cfg g_c;

static int is_fp8(int type)
{
    return type == SDPA_FP8_E4M3 || type == SDPA_FP8_E5M2;
}

/* ---- Decoding ----------------------------------------------------------- */

static void decode_types(cfg *c)
{
    static const int kv[8] = {
        SDPA_FP8_E4M3, SDPA_FP8_E5M2, SDPA_Q8_0, SDPA_Q4_0,
        SDPA_FP8_E4M3, SDPA_Q8_0,     SDPA_Q4_0, 0};
    static const int bad[4] = {SDPA_Q4_0 + 1, -1, 99, INT_MAX};
    const unsigned v = fz(F_KVTYPE), q = fz(F_QTYPE);
    c->kv_field = kv[v % 8];
    c->kvt = c->kv_field;
    if (v % 8 == 7) {
        c->kv_field = bad[(v >> 3) % 4];
        c->kvt = SDPA_FP8_E4M3; /* buffers of a type that exists */
        c->errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    }
    static const int qs[8] = {
        SDPA_FLOAT32,  SDPA_FLOAT32, SDPA_FLOAT32, SDPA_FLOAT16,
        SDPA_BFLOAT16, SDPA_FLOAT16, SDPA_FLOAT64, 0};
    c->dtype = qs[q % 8];
    c->qt = c->dtype;
    if (q % 8 == 7) /* a quantized type as q's */
        c->dtype = c->kvt;
    if (q % 8 >= 6) {
        c->qt = SDPA_FLOAT32;
        c->errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    }
}

/* A head dimension: any for FP8, whole blocks for the block types, or
 * (v % 8 == 7) not. */
static int64_t decode_dim(cfg *c, unsigned v, const char *name)
{
    if (!quant_codec_is_block(c->kvt))
        return fz_small_dim(v, 40, 80);
    if (v % 8 == 7) {
        c->errs |= FZ_BIT(SDPA_ERR_BAD_DIM);
        fz_describe("%s not whole blocks; ", name);
        return 16 + 32 * (int64_t)((v >> 3) % 2);
    }
    return 32 * (1 + (int64_t)(v % 3));
}

static void decode_shapes(cfg *c)
{
    c->n = 1 + (int64_t)(fz(F_N) % MAXN);
    c->hkv = 1 + (int64_t)(fz(F_HKV) % MAXH);
    c->hq = c->hkv * (1 + (int64_t)(fz(F_GROUP) % 4));
    const unsigned tq = fz(F_TQ), tk = fz(F_TK);
    c->tq = tq % 4 == 0 ? 1 : 1 + (int64_t)((tq >> 2) % 9);
    c->tk = tk % 16 == 15 ? 513 + (int64_t)((tk >> 4) % 88)
                          : 1 + (int64_t)(tk % 64);
    c->dk = decode_dim(c, fz(F_DK), "Dk");
    c->dv = decode_dim(c, fz(F_DV), "Dv");
    /* the reference's work: at most about 300k products */
    while (c->n * c->hq * c->tq * c->tk * (c->dk + c->dv) > 300000) {
        if (c->tq > 1)
            c->tq = (c->tq + 1) / 2;
        else if (c->hq > c->hkv)
            c->hq -= c->hkv;
        else if (c->n > 1)
            c->n--;
        else if (c->hkv > 1)
            c->hkv--, c->hq = c->hkv;
        else
            break;
    }
    const unsigned l = fz(F_LAYOUT);
    c->k_bthd = (int)(l & 1);
    c->v_bthd = (int)((l >> 1) & 1);
    /* row padding: none, one unit, or (block types) half a block */
    const int64_t unit = quant_codec_unit_values(c->kvt);
    const int64_t pads[4] = {0, 0, unit, quant_codec_is_block(c->kvt) ? 16 : 3};
    c->k_pad = pads[(l >> 2) % 4];
    c->v_pad = pads[(l >> 4) % 4];
    const unsigned pg = fz(F_PAGE);
    c->page = pg % 4 >= 2 ? 1 + (int64_t)((pg >> 2) % 16) : 0;
    c->vllm = (int)((pg >> 6) & 1);
    if (c->page)
        c->k_pad = c->v_pad = 0; /* the pools have their own layout */
}

static void decode_lens_causal(cfg *c)
{
    const unsigned v = fz(F_LENS);
    /* a pool's logical Tk is pages_per_seq · page, past tk where the last
     * page is partly used: a paged call names the items' lengths, and its
     * contiguous twin the same */
    c->with_lens = v % 3 != 0 || c->page != 0;
    /* v % 3 == 2: Tk or Tk - 1; else (with kv_lens) any of 0..Tk */
    for (int64_t b = 0; b < c->n; b++)
        c->lens[b] = !c->with_lens ? c->tk
                     : v % 3 == 2  ? c->tk - (int64_t)(fz_rnd() % 3 == 2)
                                  : (int64_t)(fz_rnd() % (uint64_t)(c->tk + 1));
    c->causal = (int)(fz(F_CAUSAL) % 3);
}

static void decode_scales(cfg *c)
{
    const unsigned v = fz(F_SCALES);
    const int mode = (int)(v % 8);
    c->with_k_scale =
        mode == 1 || mode == 3 || mode == 4 || mode == 5 || mode == 7;
    c->with_v_scale =
        mode == 2 || mode == 3 || mode == 4 || mode == 6 || mode == 7;
    for (int64_t h = 0; h < MAXH; h++) {
        /* 2^-e · (1 + m/8): E4M3's values up to 448, E5M2's to 57344 */
        const int e = c->kvt == SDPA_FP8_E5M2 ? 10 + (int)fz_below(6)
                                              : 4 + (int)fz_below(6);
        c->k_scale[h] = ldexpf(1.0f + (float)fz_below(8) / 8, -e);
        c->v_scale[h] = ldexpf(1.0f + (float)fz_below(8) / 8, -e);
    }
    if (mode == 7) { /* tiny: the least normal float, 2^-60 */
        c->k_scale[0] = FLT_MIN;
        c->v_scale[0] = 0x1p-60f;
    }
    if (mode == 5 || mode == 6) {
        /* the last: positive, but 0 in float32 times the scale, which
         * only k_scale must not be */
        static const float bad[6] = {NAN,   INFINITY, 0.0f,
                                     -1.0f, -0.0f,    FLT_TRUE_MIN};
        float *s = mode == 5 ? c->k_scale : c->v_scale;
        s[(v >> 3) % (unsigned)c->hkv] = bad[(v >> 5) % (mode == 5 ? 6 : 5)];
    }
    /* the least positive float is bad only where scale · k_scale is 0 in
     * float32 (the library's product: the scale in double, 1/sqrt(Dk)) */
    const float k0 = c->k_scale[(v >> 3) % (unsigned)c->hkv];
    const int bad_value =
        (mode == 5 && (k0 != FLT_TRUE_MIN ||
                       (float)((double)k0 / sqrt((double)c->dk)) == 0.0f)) ||
        mode == 6;
    if ((c->with_k_scale || c->with_v_scale) &&
        (!is_fp8(c->kv_field) || bad_value))
        c->errs |= FZ_BIT(SDPA_ERR_BAD_KV_SCALE);
}

/* ---- Buffers ------------------------------------------------------------ */

typedef struct qbuf {
    sdpa_tensor t; /* strides in values */
    fz_buf *b;
} qbuf;

static void set_layout(sdpa_tensor *t, const cfg *c, int64_t d, int bthd,
                       int64_t pad)
{
    fz_set_layout(t, c->n, c->hkv, c->tk, d, bthd, pad);
}

/* A quantized tensor's bytes: whole units up to its last value. */
static size_t q_bytes(int type, const sdpa_tensor *t)
{
    int64_t last = 0;
    for (int d = 0; d < 4; d++)
        last += (t->shape[d] - 1) * t->stride[d];
    return quant_codec_unit_at(type, last) + quant_codec_unit_bytes(type);
}

/* The dequantized values of x (scale per head or 1) as a contiguous
 * float64 [N, Hkv, Tk, D] tensor for the reference. */
static double *dequantize(const cfg *c, const qbuf *x, const float *scale,
                          sdpa_tensor *view)
{
    const int64_t d = x->t.shape[3];
    double *w = malloc((size_t)(c->n * c->hkv * c->tk * d) * sizeof *w);
    if (!w)
        abort();
    *view = sdpa_tensor_bhtd(w, c->n, c->hkv, c->tk, d);
    for (int64_t b = 0; b < c->n; b++)
        for (int64_t h = 0; h < c->hkv; h++)
            for (int64_t j = 0; j < c->tk; j++)
                for (int64_t e = 0; e < d; e++)
                    w[fz_off4(view, b, h, j, e)] =
                        (scale ? (double)scale[h] : 1.0) *
                        quant_codec_value(x->b->mem, c->kvt,
                                          fz_off4(&x->t, b, h, j, e));
    return w;
}

typedef struct pool {
    qbuf k, v;
    fz_buf *table;
    int64_t pps;
} pool;

/* K and V copied row by row into a shuffled pool of pages; unused pages
 * and slots 0xff (NaN codes, NaN block scales). */
static void make_pool(const cfg *c, const qbuf *k, const qbuf *v, pool *p)
{
    p->pps = (c->tk + c->page - 1) / c->page;
    const int64_t pages = c->n * p->pps + (int64_t)fz_below(3);
    p->table =
        fz_buf_new("block_table", 0, (size_t)(c->n * p->pps) * sizeof(int32_t));
    int32_t *tab = (int32_t *)(void *)p->table->mem;
    for (int64_t i = 0; i < c->n * p->pps; i++)
        tab[i] = (int32_t)i;
    for (int64_t i = c->n * p->pps - 1; i > 0; i--) { /* shuffle */
        const int64_t j = (int64_t)fz_below(i + 1);
        const int32_t t = tab[i];
        tab[i] = tab[j], tab[j] = t;
    }
    const qbuf *src[2] = {k, v};
    qbuf *dst[2] = {&p->k, &p->v};
    for (int x = 0; x < 2; x++) {
        const int64_t d = src[x]->t.shape[3], h = c->hkv;
        sdpa_tensor *t = &dst[x]->t;
        tp_pool_view(t, pages, h, c->page, d, c->vllm);
        const size_t bytes = q_bytes(c->kvt, t);
        dst[x]->b = fz_buf_new(x ? "v pool" : "k pool", 0, bytes);
        memset(dst[x]->b->mem, 0xff, bytes);
        t->data = dst[x]->b->mem;
        const size_t row = quant_codec_unit_at(c->kvt, d);
        for (int64_t b = 0; b < c->n; b++)
            for (int64_t hh = 0; hh < h; hh++)
                for (int64_t j = 0; j < c->tk; j++) {
                    const int64_t at =
                        tab[b * p->pps + j / c->page] * t->stride[0] +
                        hh * t->stride[1] + (j % c->page) * t->stride[2];
                    memcpy(dst[x]->b->mem + quant_codec_unit_at(c->kvt, at),
                           src[x]->b->mem +
                               quant_codec_unit_at(
                                   c->kvt, fz_off4(&src[x]->t, b, hh, j, 0)),
                           row);
                }
    }
}

/* ---- Non-finite values -------------------------------------------------- */

/* Make value (b, h, j, 0) of x non-finite: a NaN (nan) or an infinity
 * where the type has one (E4M3 has none: a NaN then). Returns whether it
 * is a NaN. */
static int poison(const cfg *c, qbuf *x, int64_t b, int64_t h, int64_t j,
                  int nan)
{
    unsigned char *u =
        x->b->mem + quant_codec_unit_at(c->kvt, fz_off4(&x->t, b, h, j, 0));
    const unsigned char sign = (unsigned char)(fz_rnd() & 0x80);
    switch (c->kvt) {
    case SDPA_FP8_E4M3:
        *u = (unsigned char)(sign | 0x7f);
        return 1;
    case SDPA_FP8_E5M2:
        *u = (unsigned char)(sign | (nan ? 0x7d + fz_below(3) : 0x7c));
        return nan;
    default:
        u[0] = nan ? 0x01 : 0x00;
        u[1] = (unsigned char)(sign | 0x7c);
        return nan;
    }
}

/* ---- The call ----------------------------------------------------------- */

static int call(sdpa_ctx *ctx, const void *args)
{
    return sdpa_forward(ctx, args);
}

static size_t q_esize(int type)
{
    return type == SDPA_FLOAT32 ? 4 : 2;
}

static double load(const void *mem, int type, size_t i)
{
    return type == SDPA_FLOAT32
               ? (double)((const float *)mem)[i]
               : half_codec_value(((const uint16_t *)mem)[i], type);
}

/* out (of type qt) and lse against the reference. */
static void check_values(const cfg *c, const ref_result *r, const void *out,
                         const float *lse)
{
    const test_tol tol =
        tp_forward_tol(FLT_EPSILON, r, c->tk, c->dk, 0, 0, 0, 0);
    const double round_out = c->qt == SDPA_FLOAT16    ? 0x1p-11
                             : c->qt == SDPA_BFLOAT16 ? 0x1p-8
                                                      : 0;
    const double sub = c->qt == SDPA_FLOAT16 ? 0x1p-24 : 0;
    const size_t rows = (size_t)(c->n * c->hq * c->tq);
    for (size_t row = 0; row < rows; row++) {
        for (int64_t d = 0; d < c->dv; d++) {
            const size_t i = row * (size_t)c->dv + (size_t)d;
            const double want = (double)r->out[i], got = load(out, c->qt, i);
            const double bound =
                tol.out + (round_out + 2 * FLT_EPSILON) * fabs(want) + sub;
            CHECK(isfinite(got), "out[%zu] = %g", i, got);
            CHECK(fabs(got - want) <= bound,
                  "out row %zu, element %lld: %.9g, reference %.9g (bound "
                  "%.3g)",
                  row, (long long)d, got, want, bound);
        }
        const double want = (double)r->lse[row];
        if (isinf(want)) { /* an empty row under the zero convention */
            CHECK(lse[row] == -INFINITY, "lse row %zu = %g, not -inf", row,
                  (double)lse[row]);
            continue;
        }
        CHECK(fabs((double)lse[row] - want) <=
                  tol.lse_abs + tol.lse_rel * fabs(want),
              "lse row %zu = %.9g, reference %.9g", row, (double)lse[row],
              want);
    }
}

static void run(void)
{
    cfg *c = &g_c;
    memset(c, 0, sizeof *c);
    decode_types(c);
    decode_shapes(c);
    decode_lens_causal(c);
    decode_scales(c);
    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, F_OPT);

    /* q, out, lse */
    const size_t qn = (size_t)(c->n * c->hq * c->tq * c->dk);
    const size_t on = (size_t)(c->n * c->hq * c->tq * c->dv);
    const size_t rows = (size_t)(c->n * c->hq * c->tq);
    fz_buf *qb = fz_buf_new("q", 0, qn * q_esize(c->qt));
    fz_buf *ob = fz_buf_new("out", 1, on * q_esize(c->qt));
    fz_buf *lb = fz_buf_new("lse", 1, rows * sizeof(float));
    fz_buf_allow(ob, 0, on * q_esize(c->qt));
    fz_buf_allow(lb, 0, rows * sizeof(float));
    double *q64 = malloc(qn * sizeof *q64);
    if (!q64)
        abort();
    const double se = 1.0 / sqrt((double)c->dk);
    const double amp =
        sqrt((0.5 + 12.0 * (double)fz(F_AMP) / 255.0) / (se * (double)c->dk));
    for (size_t i = 0; i < qn; i++) {
        /* 8 significant bits, no float16 subnormal: exact in each type */
        double x = half_codec_round(fz_sym(amp), SDPA_BFLOAT16);
        if (fabs(x) < 0x1p-14)
            x = 0;
        q64[i] = x;
        if (c->qt == SDPA_FLOAT32)
            ((float *)(void *)qb->mem)[i] = (float)x;
        else {
            bool exact;
            ((uint16_t *)(void *)qb->mem)[i] =
                half_codec_bits(x, c->qt, &exact);
            CHECK(exact, "q not exact in its type");
        }
    }

    /* K and V */
    qbuf k, v;
    memset(&k, 0, sizeof k);
    memset(&v, 0, sizeof v);
    set_layout(&k.t, c, c->dk, c->k_bthd, c->k_pad);
    set_layout(&v.t, c, c->dv, c->v_bthd, c->v_pad);
    k.b = fz_buf_new("k", 0, q_bytes(c->kvt, &k.t));
    v.b = fz_buf_new("v", 0, q_bytes(c->kvt, &v.t));
    /* all of their bytes: padding too, never read */
    fz_quant_units(k.b->mem, c->kvt, k.b->bytes);
    fz_quant_units(v.b->mem, c->kvt, v.b->bytes);
    k.t.data = k.b->mem;
    v.t.data = v.b->mem;
    if (quant_codec_is_block(c->kv_field) &&
        (quant_codec_splits_blocks(&k.t) || quant_codec_splits_blocks(&v.t)))
        c->errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);

    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.kv_dtype = c->kv_field;
    a.causal = c->causal;
    a.q = sdpa_tensor_bhtd(qb->mem, c->n, c->hq, c->tq, c->dk);
    a.k = k.t;
    a.v = v.t;
    a.out = sdpa_tensor_bhtd(ob->mem, c->n, c->hq, c->tq, c->dv);
    a.lse = sdpa_tensor_bhtd(lb->mem, c->n, c->hq, c->tq, 1);
    fz_buf *lens = NULL;
    if (c->with_lens) {
        lens = fz_buf_new("kv_lens", 0, (size_t)c->n * sizeof(int64_t));
        memcpy(lens->mem, c->lens, (size_t)c->n * sizeof(int64_t));
        a.kv_lens = (const int64_t *)(void *)lens->mem;
    }
    fz_buf *ks = NULL, *vs = NULL;
    if (c->with_k_scale) {
        ks = fz_buf_new("k_scale", 0, (size_t)c->hkv * sizeof(float));
        memcpy(ks->mem, c->k_scale, (size_t)c->hkv * sizeof(float));
        a.k_scale = (const float *)(void *)ks->mem;
    }
    if (c->with_v_scale) {
        vs = fz_buf_new("v_scale", 0, (size_t)c->hkv * sizeof(float));
        memcpy(vs->mem, c->v_scale, (size_t)c->hkv * sizeof(float));
        a.v_scale = (const float *)(void *)vs->mem;
    }

    /* the reference, on the values before any poison */
    const int valid = c->errs == 0;
    ref_result ref;
    memset(&ref, 0, sizeof ref);
    int have_ref = 0, ref_made = 0; /* values to check; to free */
    fz_sset expect = c->errs;
    if (valid) {
        sdpa_tensor kv64[2];
        double *kd = dequantize(c, &k, a.k_scale, &kv64[0]);
        double *vd = dequantize(c, &v, a.v_scale, &kv64[1]);
        sdpa_forward_args r = SDPA_FORWARD_ARGS_INIT;
        r.dtype = SDPA_FLOAT64;
        r.causal = c->causal;
        r.q = sdpa_tensor_bhtd(q64, c->n, c->hq, c->tq, c->dk);
        r.k = kv64[0];
        r.v = kv64[1];
        r.kv_lens = a.kv_lens;
        CHECK(ref_forward(&r, &ref) == 0, "reference out of memory");
        have_ref = ref_made = 1;
        free(kd);
        free(vd);
        expect = FZ_BIT(SDPA_OK);
        if (ref.any_empty && !fz_opt.empty_zero)
            expect = FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
    }

    /* one injected non-finite: at a key some row reads, or at one none
     * reads (past a kv_len) */
    const unsigned sp = fz(F_SPECIAL);
    if (have_ref && sp % 8 >= 5) {
        const int in_v = sp % 8 == 6 || (sp % 8 == 7 && (sp & 8));
        qbuf *x = in_v ? &v : &k;
        if (sp % 8 == 7) {
            for (int64_t b = 0; b < c->n; b++)
                if (c->lens[b] < c->tk) {
                    for (int64_t h = 0; h < c->hkv; h++)
                        (void)poison(c, x, b, h, c->tk - 1, 1);
                    fz_describe("non-finite past kv_lens[%lld]; ",
                                (long long)b);
                    break;
                }
        } else {
            /* the first key a row of the group reads, from a random row */
            const int64_t start = (int64_t)fz_below((int64_t)rows);
            for (int64_t s = 0; s < (int64_t)rows; s++) {
                const int64_t row = (start + s) % (int64_t)rows;
                const int64_t b = row / (c->hq * c->tq);
                const int64_t h = row / c->tq % c->hq;
                const unsigned char *ok =
                    ref.allowed + (size_t)row * (size_t)c->tk;
                int64_t j = 0;
                while (j < c->tk && !ok[j])
                    j++;
                if (j == c->tk)
                    continue;
                const int nan =
                    poison(c, x, b, h / (c->hq / c->hkv), j, (sp & 16) == 0);
                fz_describe("%s at %s[%lld, %lld, %lld]; ", nan ? "NaN" : "inf",
                            in_v ? "v" : "k", (long long)b,
                            (long long)(h / (c->hq / c->hkv)), (long long)j);
                /* a NaN reaches the row's logit or output; an infinity
                 * may give its key a -inf logit (no weight) instead */
                expect |= FZ_BIT(SDPA_ERR_NONFINITE);
                if (nan && !(ref.any_empty && !fz_opt.empty_zero))
                    expect = FZ_BIT(SDPA_ERR_NONFINITE);
                have_ref = 0; /* the values are the reference's no more */
                break;
            }
        }
    }

    /* one injected refusal */
    const unsigned e = fz(F_ERR);
    if (e % 16 == 13) {
        /* past Tk, and past a pool's whole pages */
        const int64_t pages_tk =
            c->page ? (c->tk + c->page - 1) / c->page * c->page : c->tk;
        c->lens[(e >> 4) % (unsigned)c->n] = pages_tk + 1;
        if (!lens) {
            lens = fz_buf_new("kv_lens", 0, (size_t)c->n * sizeof(int64_t));
            a.kv_lens = (const int64_t *)(void *)lens->mem;
            for (int64_t b = 0; b < c->n; b++)
                if (c->lens[b] <= c->tk)
                    c->lens[b] = c->tk;
        }
        memcpy(lens->mem, c->lens, (size_t)c->n * sizeof(int64_t));
        expect = c->errs | FZ_BIT(SDPA_ERR_BAD_KV_LEN);
        fz_describe("kv_lens out of range; ");
    } else if (e % 16 == 14 && c->dk > 1) { /* (an extent 1 has no step) */
        a.k.stride[3] = 2;
        expect = c->errs | FZ_BIT(SDPA_ERR_BAD_STRIDE);
        fz_describe("k.stride[3] 2; ");
    }
    const int refused_before =
        (expect & ~(FZ_BIT(SDPA_OK) | FZ_BIT(SDPA_ERR_NONFINITE) |
                    FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW))) != 0;

    pool pl;
    memset(&pl, 0, sizeof pl);
    fz_sset expect_paged = expect;
    if (c->page) {
        make_pool(c, &k, &v, &pl);
        if (e % 16 == 15 && c->lens[0] > 0) {
            int32_t *tab = (int32_t *)(void *)pl.table->mem;
            tab[0] = (int32_t)(pl.k.t.shape[0] + (int64_t)fz_below(3));
            expect_paged = c->errs | FZ_BIT(SDPA_ERR_BAD_PAGE);
            fz_describe("a bad page; ");
        }
    }
    fz_describe("kv_dtype %d (buffers %d) dtype %d N %lld Hq %lld Hkv %lld "
                "Tq %lld Tk %lld Dk %lld Dv %lld bthd %d/%d pad %lld/%lld "
                "page %lld%s lens %d causal %d scales %d/%d path %lld kernel "
                "%lld threads %lld",
                c->kv_field, c->kvt, c->dtype, (long long)c->n,
                (long long)c->hq, (long long)c->hkv, (long long)c->tq,
                (long long)c->tk, (long long)c->dk, (long long)c->dv, c->k_bthd,
                c->v_bthd, (long long)c->k_pad, (long long)c->v_pad,
                (long long)c->page, c->vllm ? " vLLM" : "", c->with_lens,
                c->causal, c->with_k_scale, c->with_v_scale,
                (long long)fz_opt.path, (long long)fz_opt.kernel,
                (long long)fz_opt.threads);

    /* the contiguous call */
    fz_snapshot();
    long allocs = fz_alloc_count();
    size_t ws = 0;
    const int wst = sdpa_forward_workspace(ctx, &a, &ws);
    CHECK(fz_alloc_count() == allocs, "sdpa_forward_workspace allocated");
    int st = sdpa_forward(ctx, &a);
    fz_check_status("sdpa_forward", st, expect, ctx);
    if (refused_before)
        CHECK(wst == st, "sdpa_forward_workspace gave %d, sdpa_forward %d", wst,
              st);
    fz_check_bufs(st != SDPA_OK && st != SDPA_ERR_NONFINITE, st == SDPA_OK,
                  "sdpa_forward");
    if (st == SDPA_OK && have_ref)
        check_values(c, &ref, ob->mem, (const float *)(void *)lb->mem);

    if (c->page) {
        /* the same call on the pool: its status and bits */
        size_t n1;
        unsigned char *first = fz_outputs_copy(&n1);
        fz_restore();
        a.k = pl.k.t;
        a.v = pl.v.t;
        if (e % 16 == 14 && c->dk > 1)
            a.k.stride[3] = 2;
        a.block_table = (const int32_t *)(void *)pl.table->mem;
        a.pages_per_seq = pl.pps;
        a.block_table_stride = pl.pps;
        fz_snapshot();
        const int st2 = sdpa_forward(ctx, &a);
        if (expect_paged != expect) {
            fz_check_status("sdpa_forward (paged)", st2, expect_paged, ctx);
        } else {
            CHECK(st2 == st, "paged status %d, contiguous %d (%s)", st2, st,
                  sdpa_ctx_last_error(ctx));
            if (st != SDPA_ERR_NONFINITE) {
                size_t n2;
                unsigned char *paged = fz_outputs_copy(&n2);
                CHECK(n1 == n2 && memcmp(first, paged, n1) == 0,
                      "paged outputs differ from contiguous");
                free(paged);
            }
        }
        st = st2;
        fz_check_bufs(st != SDPA_OK && st != SDPA_ERR_NONFINITE, st == SDPA_OK,
                      "sdpa_forward (paged)");
        free(first);
    }
    fz_second_call(ctx, fz(F_SECOND), st, call, &a, "out and lse");
    if (ref_made)
        ref_free(&ref);
    free(q64);
    fz_ctx_end(ctx);
}

static const fz_seed seeds[] = {
    {"decode_q8_0_gqa_lens",
     {{F_KVTYPE, 2},
      {F_HKV, 1},
      {F_GROUP, 3},
      {F_TK, 60},
      {F_DK, 1},
      {F_LENS, 1},
      {-1, 0}}},
    {"decode_q4_0_paged_vllm",
     {{F_KVTYPE, 3}, {F_PAGE, 2 + 4 * 3 + 64}, {F_TK, 40}, {F_N, 2}, {-1, 0}}},
    {"prefill_e4m3_scales_f16",
     {{F_KVTYPE, 0},
      {F_QTYPE, 3},
      {F_SCALES, 3},
      {F_TQ, 1 + 4 * 6},
      {F_TK, 33},
      {F_CAUSAL, 2},
      {-1, 0}}},
    {"e5m2_bf16_long_keys",
     {{F_KVTYPE, 1}, {F_QTYPE, 4}, {F_SCALES, 4}, {F_TK, 15}, {-1, 0}}},
    {"nan_code_in_k",
     {{F_KVTYPE, 0}, {F_SPECIAL, 5}, {F_TK, 20}, {F_TQ, 5}, {-1, 0}}},
    {"inf_d_in_v_q8_0",
     {{F_KVTYPE, 2}, {F_SPECIAL, 6 + 16}, {F_TK, 9}, {-1, 0}}},
    {"nan_past_kv_lens",
     {{F_KVTYPE, 3}, {F_SPECIAL, 7}, {F_LENS, 2}, {F_TK, 12}, {-1, 0}}},
    {"bad_scale_nan_head", {{F_KVTYPE, 0}, {F_SCALES, 5}, {-1, 0}}},
    {"scale_with_block_type", {{F_KVTYPE, 2}, {F_SCALES, 1}, {-1, 0}}},
    /* k_scale[0] the least positive float: 0 in float32 times the scale
     * (BLAS paths read no K then; SDPA_ERR_BAD_KV_SCALE) */
    {"k_scale_rounds_to_zero",
     {{F_KVTYPE, 0}, {F_SCALES, 5 + (5 << 5)}, {F_DK, 20}, {-1, 0}}},
    {"block_type_half_block_dim", {{F_KVTYPE, 3}, {F_DV, 7}, {-1, 0}}},
    {"block_type_split_stride",
     {{F_KVTYPE, 2}, {F_LAYOUT, 3 << 2}, {F_TK, 5}, {-1, 0}}},
    {"quant_as_q_dtype", {{F_KVTYPE, 1}, {F_QTYPE, 7}, {-1, 0}}},
    {"bad_page_q8_0", {{F_KVTYPE, 2}, {F_PAGE, 3}, {F_ERR, 15}, {-1, 0}}},
    {"forced_paths_threads",
     {{F_KVTYPE, 4},
      {F_OPT, SDPA_OPT_PATH},
      {F_OPT + 1, 3},
      {F_OPT + 2, SDPA_OPT_NUM_THREADS},
      {F_OPT + 3, 2},
      {F_SECOND, 1},
      {F_TK, 31},
      {-1, 0}}},
};

FZ_TARGET("fuzz_quant", "QUANT", "e4m3_default", F_SEED0, 0, NULL, run, NULL);
