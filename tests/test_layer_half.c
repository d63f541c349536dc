/*
 * The multi-head layer in a half storage type (include/sdpa.h, "The
 * multi-head attention layer" and its backward; docs/LAYER.md): dtype
 * SDPA_FLOAT16 or SDPA_BFLOAT16 for x_q, x_kv, the weights, the biases, y,
 * dy and the gradients, computed in float32.
 *
 * The promise checked: a half sdpa_mha_forward's y is bitwise the float32
 * layer's y on the inputs widened exactly, rounded once to nearest even
 * (rounded here by the tests' own codec, tests/common/half_codec.h), and
 * its attention outputs (lse, weights: float32) are the float32 layer's
 * bits; a half sdpa_mha_backward's gradients are the float32 layer
 * backward's, rounded once (grad_dtype 0) or bitwise (grad_dtype
 * SDPA_FLOAT32). Over float16 and bfloat16, self- and cross-attention,
 * GQA, every SDPA_POS_*, with and without biases, an attention bias in the
 * half type or in float32, row-padded half tensors (whose padding is never
 * written), every kernel set and 1 to 3 threads. The float32 layer itself
 * is checked against a long-double reference by test_layer and
 * test_layer_backward. The inputs are multiples of 1/256 below 1/2 in
 * magnitude (of 1/64 for x and dy), exact in both half types, so that the
 * widened inputs are known here without the library. Also: a repeated
 * call allocates nothing, the older (1.1) size of sdpa_mha_backward_args,
 * a float32 layer's grad_dtype SDPA_FLOAT32 (the same bits as 0), a
 * float16 gradient that overflows (+inf, not an error), and every refusal
 * with its status, a message naming the call and the outputs untouched
 * (y that would round to infinity included).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_codec.h"
#include "sdpa.h"
#include "testutil.h"

/* The layer's sizes and options of one case. */
typedef struct lh_case {
    int type; /* SDPA_FLOAT16 or SDPA_BFLOAT16 */
    int positions, causal;
    bool self, biases, attn_bias, bias_f32, padded;
    int64_t n, tq, tk, e, hq, hkv, dk, dv;
} lh_case;

/* A tensor of the case: its values in float32 (contiguous) and in the half
 * type (rows of `pitch` elements, padding 0xA5A5). */
typedef struct lh_buf {
    int64_t rows, width, pitch;
    float *f;
    uint16_t *h;
} lh_buf;

enum { PAD_BITS = 0xA5A5 };

static void buf_make(lh_buf *b, int64_t rows, int64_t width, int64_t pitch)
{
    b->rows = rows, b->width = width, b->pitch = pitch;
    b->f = calloc((size_t)(rows * width) + 1, sizeof(float));
    b->h = malloc(((size_t)(rows * pitch) + 1) * sizeof(uint16_t));
    assert_non_null(b->f);
    assert_non_null(b->h);
    for (int64_t i = 0; i < rows * pitch + 1; i++)
        b->h[i] = PAD_BITS;
}

static void buf_free(lh_buf *b)
{
    free(b->f);
    free(b->h);
    memset(b, 0, sizeof *b);
}

/* Values k / scale, |k| < 128: exact in float16 and bfloat16. */
static void buf_random(lh_buf *b, int type, rng *r, double scale)
{
    for (int64_t i = 0; i < b->rows; i++)
        for (int64_t j = 0; j < b->width; j++) {
            double v = (double)((int64_t)(rng_next(r) % 255) - 127) / scale;
            bool exact = false;
            b->f[i * b->width + j] = (float)v;
            b->h[i * b->pitch + j] = half_codec_bits(v, type, &exact);
            assert_true(exact);
        }
}

/* The half bits of b's float32 values rounded once, compared with what
 * the library wrote into out (rows of out_pitch); the padding of out is
 * still PAD_BITS. */
static void expect_rounded(const float *f32, int64_t rows, int64_t width,
                           const uint16_t *out, int64_t out_pitch, int type,
                           const char *what)
{
    for (int64_t i = 0; i < rows; i++) {
        for (int64_t j = 0; j < width; j++) {
            double rounded = half_codec_round((double)f32[i * width + j], type);
            bool exact = false;
            uint16_t want = half_codec_bits(rounded, type, &exact);
            assert_true(exact);
            uint16_t got = out[i * out_pitch + j];
            if (got != want)
                fail_msg("%s[%lld, %lld]: 0x%04x, want 0x%04x (%.9g rounded)",
                         what, (long long)i, (long long)j, got, want,
                         (double)f32[i * width + j]);
        }
        for (int64_t j = width; j < out_pitch; j++)
            assert_int_equal(out[i * out_pitch + j], PAD_BITS);
    }
}

static void expect_bits(const float *want, const float *got, int64_t count,
                        const char *what)
{
    for (int64_t i = 0; i < count; i++)
        if (memcmp(&want[i], &got[i], sizeof(float)) != 0)
            fail_msg("%s[%lld]: %.9g, want %.9g", what, (long long)i,
                     (double)got[i], (double)want[i]);
}

/* ---- The data of a case. ----------------------------------------------- */

enum { P_WQ, P_WK, P_WV, P_WO, P_BQ, P_BK, P_BV, P_BO, PARAMS };
static const char *const grad_names[PARAMS] = {"dw_q", "dw_k", "dw_v", "dw_o",
                                               "db_q", "db_k", "db_v", "db_o"};

typedef struct lh_data {
    lh_case c;
    lh_buf x_q, x_kv, dy, params[PARAMS];
    lh_buf bias;   /* the attention's, [n, hq, tq, tk] */
    float *bias32; /* bias_f32: the float32 bias the half call takes */
} lh_data;

static int64_t param_rows(const lh_case *c, int i)
{
    const int64_t rows[PARAMS] = {c->e, c->e, c->e, c->hq * c->dv, 1, 1, 1, 1};
    return rows[i];
}

static int64_t param_width(const lh_case *c, int i)
{
    const int64_t wq = c->hq * c->dk, wk = c->hkv * c->dk;
    const int64_t wv = c->hkv * c->dv;
    const int64_t width[PARAMS] = {wq, wk, wv, c->e, wq, wk, wv, c->e};
    return width[i];
}

static void data_make(lh_data *d, const lh_case *c, rng *r)
{
    memset(d, 0, sizeof *d);
    d->c = *c;
    const int64_t pad = c->padded ? 3 : 0;
    buf_make(&d->x_q, c->n * c->tq, c->e, c->e + pad);
    buf_random(&d->x_q, c->type, r, 64);
    if (!c->self) {
        buf_make(&d->x_kv, c->n * c->tk, c->e, c->e + pad);
        buf_random(&d->x_kv, c->type, r, 64);
    }
    buf_make(&d->dy, c->n * c->tq, c->e, c->e + pad);
    buf_random(&d->dy, c->type, r, 64);
    for (int i = 0; i < PARAMS; i++) {
        if (i >= P_BQ && !c->biases)
            continue;
        int64_t rows = param_rows(c, i), width = param_width(c, i);
        buf_make(&d->params[i], rows, width, width);
        buf_random(&d->params[i], c->type, r, 256);
    }
    if (c->attn_bias) {
        int64_t cols = c->tk;
        buf_make(&d->bias, c->n * c->hq * c->tq, cols, cols);
        buf_random(&d->bias, c->type, r, 64);
        d->bias32 = d->bias.f;
    }
}

static void data_free(lh_data *d)
{
    buf_free(&d->x_q);
    buf_free(&d->x_kv);
    buf_free(&d->dy);
    for (int i = 0; i < PARAMS; i++)
        buf_free(&d->params[i]);
    buf_free(&d->bias);
}

/* A [n, 1, t, e] view of rows of `pitch` elements. */
static sdpa_tensor rows_view(void *data, int64_t n, int64_t t, int64_t e,
                             int64_t pitch)
{
    sdpa_tensor x = {data, {n, 1, t, e}, {t * pitch, t * pitch, pitch, 1}};
    return x;
}

/* The outputs of one layer call: y, the attention's lse and weights
 * (float32 in both calls), the gradients. In the float32 call everything
 * is in f32_*, in a half one the half outputs are in h_* and the float32
 * gradients (grad_dtype SDPA_FLOAT32) in f32_*. */
typedef struct lh_out {
    float *lse, *weights;
    float *y32;
    uint16_t *y_h;
    float *dx_q32, *dx_kv32, *grads32[PARAMS];
    uint16_t *dx_q_h, *dx_kv_h, *grads_h[PARAMS];
} lh_out;

static void *zalloc(size_t n, size_t size)
{
    void *p = calloc(n + 1, size);
    assert_non_null(p);
    return p;
}

static void *pad_alloc(size_t n)
{
    uint16_t *p = malloc((n + 1) * sizeof *p);
    assert_non_null(p);
    for (size_t i = 0; i <= n; i++)
        p[i] = PAD_BITS;
    return p;
}

static void out_make(lh_out *o, const lh_case *c)
{
    memset(o, 0, sizeof *o);
    const int64_t pitch = c->e + (c->padded ? 3 : 0);
    o->lse = zalloc((size_t)(c->n * c->hq * c->tq), sizeof(float));
    o->weights = zalloc((size_t)(c->n * c->hq * c->tq * c->tk), sizeof(float));
    o->y32 = zalloc((size_t)(c->n * c->tq * c->e), sizeof(float));
    o->y_h = pad_alloc((size_t)(c->n * c->tq * pitch));
    o->dx_q32 = zalloc((size_t)(c->n * c->tq * c->e), sizeof(float));
    o->dx_q_h = pad_alloc((size_t)(c->n * c->tq * pitch));
    if (!c->self) {
        o->dx_kv32 = zalloc((size_t)(c->n * c->tk * c->e), sizeof(float));
        o->dx_kv_h = pad_alloc((size_t)(c->n * c->tk * pitch));
    }
    for (int i = 0; i < PARAMS; i++) {
        size_t count = (size_t)(param_rows(c, i) * param_width(c, i));
        o->grads32[i] = zalloc(count, sizeof(float));
        o->grads_h[i] = pad_alloc(count);
    }
}

static void out_free(lh_out *o)
{
    free(o->lse);
    free(o->weights);
    free(o->y32);
    free(o->y_h);
    free(o->dx_q32);
    free(o->dx_kv32);
    free(o->dx_q_h);
    free(o->dx_kv_h);
    for (int i = 0; i < PARAMS; i++) {
        free(o->grads32[i]);
        free(o->grads_h[i]);
    }
}

/* The arguments of the case's layer call: half (the case's type, its
 * padded rows) or its float32 twin (contiguous); attn receives the
 * options, which write lse and the weights into o. */
static sdpa_mha_args layer_args(const lh_data *d, bool half,
                                sdpa_forward_args *attn, lh_out *o)
{
    const lh_case *c = &d->c;
    const int64_t pitch = half ? d->x_q.pitch : c->e;
    sdpa_mha_args a = SDPA_MHA_ARGS_INIT;
    a.dtype = half ? c->type : SDPA_FLOAT32;
    a.positions = c->positions;
    a.heads_q = c->hq;
    a.heads_kv = c->hkv;
    a.dim_k = c->dk;
    a.dim_v = c->dv;
    a.pos_offset = c->positions != SDPA_POS_NONE ? 3 : 0;
    a.x_q = rows_view(half ? (void *)d->x_q.h : (void *)d->x_q.f, c->n, c->tq,
                      c->e, pitch);
    if (!c->self)
        a.x_kv = rows_view(half ? (void *)d->x_kv.h : (void *)d->x_kv.f, c->n,
                           c->tk, c->e, pitch);
    a.y = rows_view(half ? (void *)o->y_h : (void *)o->y32, c->n, c->tq, c->e,
                    pitch);
    const void *params[PARAMS];
    for (int i = 0; i < PARAMS; i++)
        params[i] = d->params[i].f == NULL ? NULL
                    : half                 ? (const void *)d->params[i].h
                                           : (const void *)d->params[i].f;
    a.w_q = params[P_WQ], a.w_k = params[P_WK];
    a.w_v = params[P_WV], a.w_o = params[P_WO];
    a.b_q = params[P_BQ], a.b_k = params[P_BK];
    a.b_v = params[P_BV], a.b_o = params[P_BO];
    *attn = (sdpa_forward_args)SDPA_FORWARD_ARGS_INIT;
    attn->causal = c->causal;
    attn->lse = sdpa_tensor_bhtd(o->lse, c->n, c->hq, c->tq, 1);
    attn->weights = sdpa_tensor_bhtd(o->weights, c->n, c->hq, c->tq, c->tk);
    if (c->attn_bias) {
        bool f32 = !half || c->bias_f32;
        attn->bias =
            sdpa_tensor_bhtd(f32 ? (void *)d->bias32 : (void *)d->bias.h, c->n,
                             c->hq, c->tq, c->tk);
        if (half && c->bias_f32)
            attn->bias_dtype = SDPA_FLOAT32;
    }
    a.attn = attn;
    return a;
}

/* The backward's arguments: every gradient, into o (half: h_* unless
 * grad_dtype is SDPA_FLOAT32). */
static sdpa_mha_backward_args backward_args(const lh_data *d, bool half,
                                            int grad_dtype,
                                            const sdpa_mha_args *fwd, lh_out *o)
{
    const lh_case *c = &d->c;
    const bool h_out = half && grad_dtype == 0;
    const int64_t pitch = half ? d->x_q.pitch : c->e;
    const int64_t out_pitch = h_out ? pitch : c->e;
    sdpa_mha_backward_args b = SDPA_MHA_BACKWARD_ARGS_INIT;
    b.forward = fwd;
    b.grad_dtype = grad_dtype;
    b.dy = rows_view(half ? (void *)d->dy.h : (void *)d->dy.f, c->n, c->tq,
                     c->e, pitch);
    b.dx_q = rows_view(h_out ? (void *)o->dx_q_h : (void *)o->dx_q32, c->n,
                       c->tq, c->e, out_pitch);
    if (!c->self)
        b.dx_kv = rows_view(h_out ? (void *)o->dx_kv_h : (void *)o->dx_kv32,
                            c->n, c->tk, c->e, out_pitch);
    void *g[PARAMS];
    for (int i = 0; i < PARAMS; i++)
        g[i] = h_out ? (void *)o->grads_h[i] : (void *)o->grads32[i];
    b.dw_q = g[P_WQ], b.dw_k = g[P_WK], b.dw_v = g[P_WV], b.dw_o = g[P_WO];
    b.db_q = g[P_BQ], b.db_k = g[P_BK], b.db_v = g[P_BV], b.db_o = g[P_BO];
    return b;
}

/* ---- The promise. -------------------------------------------------------- */

static void describe(const lh_case *c, int kernel, int threads)
{
    print_message("  %s pos %d causal %d %s hq %lld hkv %lld biases %d "
                  "attn bias %d%s padded %d, kernel %s, %d threads\n",
                  c->type == SDPA_FLOAT16 ? "float16" : "bfloat16",
                  c->positions, c->causal, c->self ? "self" : "cross",
                  (long long)c->hq, (long long)c->hkv, c->biases, c->attn_bias,
                  c->bias_f32 ? " (float32)" : "", c->padded,
                  kernel_name(kernel), threads);
}

/* The case on ctx: the half forward and backward (both grad_dtypes)
 * against the float32 layer on the widened inputs. */
static void check_case(sdpa_ctx *ctx, const lh_data *d)
{
    const lh_case *c = &d->c;
    const int64_t pitch = d->x_q.pitch;
    lh_out ref, got, got32;
    out_make(&ref, c);
    out_make(&got, c);
    out_make(&got32, c);
    sdpa_forward_args attn_ref, attn_got, attn_got32;
    sdpa_mha_args a_ref = layer_args(d, false, &attn_ref, &ref);
    sdpa_mha_args a_got = layer_args(d, true, &attn_got, &got);
    sdpa_mha_args a_got32 = layer_args(d, true, &attn_got32, &got32);
    /* forward */
    assert_int_equal(sdpa_mha_forward(ctx, &a_ref), SDPA_OK);
    int status = sdpa_mha_forward(ctx, &a_got);
    if (status != SDPA_OK)
        fail_msg("half forward: %d %s", status, sdpa_ctx_last_error(ctx));
    const int64_t rows_q = c->n * c->tq, rows_k = c->n * c->tk;
    expect_rounded(ref.y32, rows_q, c->e, got.y_h, pitch, c->type, "y");
    expect_bits(ref.lse, got.lse, c->n * c->hq * c->tq, "lse");
    expect_bits(ref.weights, got.weights, c->n * c->hq * c->tq * c->tk,
                "weights");
    /* backward, the gradients rounded, then in float32 */
    sdpa_mha_backward_args b_ref = backward_args(d, false, 0, &a_ref, &ref);
    sdpa_mha_backward_args b_got = backward_args(d, true, 0, &a_got, &got);
    sdpa_mha_backward_args b_got32 =
        backward_args(d, true, SDPA_FLOAT32, &a_got32, &got32);
    assert_int_equal(sdpa_mha_backward(ctx, &b_ref), SDPA_OK);
    status = sdpa_mha_backward(ctx, &b_got);
    if (status != SDPA_OK)
        fail_msg("half backward: %d %s", status, sdpa_ctx_last_error(ctx));
    assert_int_equal(sdpa_mha_backward(ctx, &b_got32), SDPA_OK);
    expect_rounded(ref.dx_q32, rows_q, c->e, got.dx_q_h, pitch, c->type,
                   "dx_q");
    expect_bits(ref.dx_q32, got32.dx_q32, rows_q * c->e, "dx_q (float32)");
    if (!c->self) {
        expect_rounded(ref.dx_kv32, rows_k, c->e, got.dx_kv_h, pitch, c->type,
                       "dx_kv");
        expect_bits(ref.dx_kv32, got32.dx_kv32, rows_k * c->e,
                    "dx_kv (float32)");
    }
    for (int i = 0; i < PARAMS; i++) {
        int64_t count = param_rows(c, i) * param_width(c, i);
        expect_rounded(ref.grads32[i], 1, count, got.grads_h[i], count, c->type,
                       grad_names[i]);
        expect_bits(ref.grads32[i], got32.grads32[i], count, grad_names[i]);
        assert_int_equal(got.grads_h[i][count], PAD_BITS); /* no write past */
    }
    out_free(&ref);
    out_free(&got);
    out_free(&got32);
}

static lh_case case_of(int type, int index)
{
    lh_case c;
    memset(&c, 0, sizeof c);
    c.type = type;
    c.self = index & 1;
    const bool gqa = index & 2;
    c.positions = (index >> 2) & 3;
    c.biases = index & 16;
    c.attn_bias = (index % 3) == 0;
    c.bias_f32 = c.attn_bias && (index & 8);
    c.padded = (index % 5) < 2;
    c.causal = (index / 3) % 3;
    c.n = 2;
    c.tq = 5;
    c.tk = c.self ? c.tq : 7;
    c.hq = 4;
    c.hkv = gqa ? 2 : 4;
    c.dk = 4;
    c.dv = c.self ? 4 : 3;
    c.e = c.self ? 8 : 12;
    return c;
}

static void test_bitwise(void **state)
{
    const int type = **(int **)state;
    rng r = {0x1a7e4 + (uint64_t)type};
    for (int ki = 0; ki < TEST_KERNELS; ki++)
        for (int threads = 1; threads <= 3; threads++) {
            sdpa_ctx *ctx;
            assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
            int ks = sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, test_kernels[ki]);
            if (ks == SDPA_ERR_UNSUPPORTED) {
                if (threads == 1)
                    print_message("kernel %s: not supported by this CPU, "
                                  "not tested\n",
                                  kernel_name(test_kernels[ki]));
                sdpa_ctx_destroy(ctx);
                continue;
            }
            assert_int_equal(ks, SDPA_OK);
            assert_int_equal(
                sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, threads), SDPA_OK);
            for (int index = 0; index < 32; index++) {
                lh_case c = case_of(type, index);
                if (index == 0)
                    describe(&c, test_kernels[ki], threads);
                lh_data d;
                data_make(&d, &c, &r);
                check_case(ctx, &d);
                data_free(&d);
            }
            sdpa_ctx_destroy(ctx);
        }
}

/* ---- A repeated call allocates nothing. ---------------------------------- */

static void test_zero_allocations(void **state)
{
    const int type = **(int **)state;
    rng r = {77};
    for (int index = 0; index < 32; index += 5) {
        lh_case c = case_of(type, index);
        lh_data d;
        data_make(&d, &c, &r);
        lh_out o, o32;
        out_make(&o, &c);
        out_make(&o32, &c);
        counting_alloc ca;
        sdpa_allocator al = ca_start(&ca, -1);
        sdpa_ctx *ctx;
        assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
        assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, 2),
                         SDPA_OK);
        sdpa_forward_args attn, attn32;
        sdpa_mha_args a = layer_args(&d, true, &attn, &o);
        sdpa_mha_args a32 = layer_args(&d, true, &attn32, &o32);
        sdpa_mha_backward_args b = backward_args(&d, true, 0, &a, &o);
        sdpa_mha_backward_args b32 =
            backward_args(&d, true, SDPA_FLOAT32, &a32, &o32);
        long allocs = 0;
        for (int round = 0; round < 3; round++) {
            assert_int_equal(sdpa_mha_forward(ctx, &a), SDPA_OK);
            assert_int_equal(sdpa_mha_backward(ctx, &b), SDPA_OK);
            assert_int_equal(sdpa_mha_backward(ctx, &b32), SDPA_OK);
            if (round == 0)
                allocs = ca.allocs;
            assert_int_equal(ca.allocs, allocs);
        }
        assert_true(allocs > 1); /* the context and some scratch */
        sdpa_ctx_destroy(ctx);
        assert_int_equal(ca.live_bytes, 0);
        assert_int_equal(ca.bad_free, 0);
        assert_int_equal(ca.bad_alignment, 0);
        out_free(&o);
        out_free(&o32);
        data_free(&d);
    }
}

/* ---- A caller built against 1.1's header (no grad_dtype). --------------- */

static void test_backward_struct_v1(void **state)
{
    const int type = **(int **)state;
    rng r = {4242};
    lh_case c = case_of(type, 6);
    lh_data d;
    data_make(&d, &c, &r);
    lh_out full, old;
    out_make(&full, &c);
    out_make(&old, &c);
    sdpa_ctx *ctx;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    sdpa_forward_args attn, attn_old;
    sdpa_mha_args a = layer_args(&d, true, &attn, &full);
    sdpa_mha_args a_old = layer_args(&d, true, &attn_old, &old);
    sdpa_mha_backward_args b = backward_args(&d, true, 0, &a, &full);
    sdpa_mha_backward_args b_old = backward_args(&d, true, 0, &a_old, &old);
    b_old.struct_size = offsetof(sdpa_mha_backward_args, grad_dtype);
    assert_int_equal(b_old.struct_size, 296);
    b_old.grad_dtype = SDPA_FLOAT32; /* past its size: never read */
    assert_int_equal(sdpa_mha_backward(ctx, &b), SDPA_OK);
    assert_int_equal(sdpa_mha_backward(ctx, &b_old), SDPA_OK);
    const int64_t count = c.n * c.tq * (c.e + (c.padded ? 3 : 0));
    assert_memory_equal(full.dx_q_h, old.dx_q_h, (size_t)count * 2);
    for (int i = 0; i < PARAMS; i++)
        assert_memory_equal(full.grads_h[i], old.grads_h[i],
                            (size_t)(param_rows(&c, i) * param_width(&c, i)) *
                                2);
    sdpa_ctx_destroy(ctx);
    out_free(&full);
    out_free(&old);
    data_free(&d);
}

/* A float16 gradient past 65504 is +-inf, not an error: dy = 60000
 * everywhere makes db_o = 10 · 60000 (n · tq rows), which check_case
 * expects rounded to +inf, next to the float32 call's 600000. */
static void test_gradient_overflow(void **state)
{
    (void)state;
    rng r = {606};
    lh_case c = case_of(SDPA_FLOAT16, 17); /* self-attention, biases */
    lh_data d;
    data_make(&d, &c, &r);
    bool exact = false;
    for (int64_t i = 0; i < d.dy.rows; i++)
        for (int64_t j = 0; j < d.dy.width; j++) {
            d.dy.f[i * d.dy.width + j] = 60000.0f;
            d.dy.h[i * d.dy.pitch + j] =
                half_codec_bits(60000.0, SDPA_FLOAT16, &exact);
            assert_true(exact);
        }
    assert_int_equal(d.dy.rows, 10);
    sdpa_ctx *ctx;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    check_case(ctx, &d);
    sdpa_ctx_destroy(ctx);
    data_free(&d);
}

/* A float32 layer takes grad_dtype SDPA_FLOAT32 as 0: the same bits. */
static void test_float32_grad_dtype(void **state)
{
    (void)state;
    rng r = {515};
    lh_case c = case_of(SDPA_FLOAT16, 13); /* the data only: float32 used */
    lh_data d;
    data_make(&d, &c, &r);
    lh_out zero, f32;
    out_make(&zero, &c);
    out_make(&f32, &c);
    sdpa_ctx *ctx;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    sdpa_forward_args attn_zero, attn_f32;
    sdpa_mha_args a_zero = layer_args(&d, false, &attn_zero, &zero);
    sdpa_mha_args a_f32 = layer_args(&d, false, &attn_f32, &f32);
    sdpa_mha_backward_args b_zero = backward_args(&d, false, 0, &a_zero, &zero);
    sdpa_mha_backward_args b_f32 =
        backward_args(&d, false, SDPA_FLOAT32, &a_f32, &f32);
    assert_int_equal(sdpa_mha_backward(ctx, &b_zero), SDPA_OK);
    assert_int_equal(sdpa_mha_backward(ctx, &b_f32), SDPA_OK);
    expect_bits(zero.dx_q32, f32.dx_q32, c.n * c.tq * c.e, "dx_q");
    for (int i = 0; i < PARAMS; i++)
        expect_bits(zero.grads32[i], f32.grads32[i],
                    param_rows(&c, i) * param_width(&c, i), grad_names[i]);
    sdpa_ctx_destroy(ctx);
    out_free(&zero);
    out_free(&f32);
    data_free(&d);
}

/* ---- Refusals: the status, the message, outputs untouched. -------------- */

static void expect_forward_error(sdpa_ctx *ctx, const sdpa_mha_args *a,
                                 const lh_out *o, size_t y_count, int status,
                                 const char *fragment)
{
    uint16_t *before = malloc(y_count * 2 + 2);
    assert_non_null(before);
    memcpy(before, o->y_h, y_count * 2);
    float lse0 = o->lse[0];
    assert_int_equal(sdpa_mha_forward(ctx, a), status);
    const char *msg = sdpa_ctx_last_error(ctx);
    if (strncmp(msg, "sdpa_mha_forward: ", 18) != 0 || !strstr(msg, fragment))
        fail_msg("message \"%s\" lacks \"%s\"", msg, fragment);
    assert_memory_equal(before, o->y_h, y_count * 2);
    if (status != SDPA_ERR_NONFINITE) /* found after the attention wrote */
        assert_true(memcmp(&lse0, &o->lse[0], sizeof lse0) == 0);
    free(before);
}

static void expect_backward_error(sdpa_ctx *ctx,
                                  const sdpa_mha_backward_args *b,
                                  const lh_case *c, const lh_out *o, int status,
                                  const char *fragment)
{
    const size_t dx = (size_t)(c->n * c->tq * (c->e + (c->padded ? 3 : 0)));
    uint16_t *before = malloc(dx * 2);
    assert_non_null(before);
    memcpy(before, o->dx_q_h, dx * 2);
    float g0 = o->grads32[P_WQ][0];
    uint16_t h0 = o->grads_h[P_WO][0];
    assert_int_equal(sdpa_mha_backward(ctx, b), status);
    const char *msg = sdpa_ctx_last_error(ctx);
    if (strncmp(msg, "sdpa_mha_backward: ", 19) != 0 || !strstr(msg, fragment))
        fail_msg("message \"%s\" lacks \"%s\"", msg, fragment);
    assert_memory_equal(before, o->dx_q_h, dx * 2);
    assert_true(memcmp(&g0, &o->grads32[P_WQ][0], sizeof g0) == 0);
    assert_int_equal(h0, o->grads_h[P_WO][0]);
    free(before);
}

static void test_errors(void **state)
{
    const int type = **(int **)state;
    rng r = {999};
    lh_case c = case_of(type, 3); /* self-attention, GQA, biases, attn bias */
    c.padded = false;
    lh_data d;
    data_make(&d, &c, &r);
    lh_out o;
    out_make(&o, &c);
    sdpa_ctx *ctx;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    const int64_t y_elems = c.n * c.tq * c.e;
    const size_t y_count = (size_t)y_elems;
    sdpa_forward_args attn;
    sdpa_mha_args a = layer_args(&d, true, &attn, &o);
    /* types the layer does not take */
    const int bad_dtypes[] = {0, 5, -1};
    for (size_t i = 0; i < sizeof bad_dtypes / sizeof bad_dtypes[0]; i++) {
        sdpa_mha_args bad = a;
        bad.dtype = bad_dtypes[i];
        expect_forward_error(ctx, &bad, &o, y_count, SDPA_ERR_BAD_DTYPE,
                             "SDPA_FLOAT16 or SDPA_BFLOAT16");
    }
    sdpa_forward_args wrong = attn;
    wrong.dtype = SDPA_FLOAT32; /* not the layer's dtype */
    a.attn = &wrong;
    expect_forward_error(ctx, &a, &o, y_count, SDPA_ERR_BAD_DTYPE,
                         "attn->dtype");
    wrong = attn;
    wrong.kv_dtype = SDPA_FLOAT32; /* the layer makes k and v */
    expect_forward_error(ctx, &a, &o, y_count, SDPA_ERR_BAD_DTYPE,
                         "attn->kv_dtype");
    wrong = attn;
    wrong.bias_dtype = SDPA_FLOAT64;
    expect_forward_error(ctx, &a, &o, y_count, SDPA_ERR_BAD_DTYPE,
                         "attn->bias_dtype");
    wrong = attn;
    wrong.bias_dtype = type == SDPA_FLOAT16 ? SDPA_BFLOAT16 : SDPA_FLOAT16;
    expect_forward_error(ctx, &a, &o, y_count, SDPA_ERR_BAD_DTYPE,
                         "attn->bias_dtype");
    a.attn = &attn;
    /* overlaps measured in half elements: y over the last element of w_o */
    const int64_t wo_count = param_rows(&c, P_WO) * param_width(&c, P_WO);
    sdpa_mha_args overlap = a;
    overlap.y.data = d.params[P_WO].h + wo_count - 1;
    expect_forward_error(ctx, &overlap, &o, 0, SDPA_ERR_OVERLAP,
                         "overlaps the parameter w_o");
    /* ... and just past it: accepted */
    lh_buf wide;
    buf_make(&wide, 1, wo_count + y_elems, wo_count + y_elems);
    memcpy(wide.h, d.params[P_WO].h, (size_t)wo_count * 2);
    overlap.w_o = wide.h;
    overlap.y.data = wide.h + wo_count;
    assert_int_equal(sdpa_mha_forward(ctx, &overlap), SDPA_OK);
    buf_free(&wide);
    /* the float32 lse output overlapping y's half elements */
    sdpa_forward_args meet = attn;
    meet.lse.data = (char *)o.y_h + 2;
    a.attn = &meet;
    expect_forward_error(ctx, &a, &o, y_count, SDPA_ERR_OVERLAP,
                         "attn->lse overlaps output y");
    a.attn = &attn;
    /* a y that rounds to infinity: V's bias c makes every head's output
     * c, and column 1 of W_O (w in every row) sums it to 16 · c · w (plus
     * b_O's largest bfloat16): past 65504 in float16, past bfloat16's
     * largest value but below FLT_MAX in bfloat16 */
    {
        lh_case big = c;
        big.biases = true;
        lh_data bd;
        data_make(&bd, &big, &r);
        const bool h16 = type == SDPA_FLOAT16;
        const double cv = h16 ? 1024.0 : ldexp(1.0, 58);
        const double w = h16 ? 64.0 : 1.5 * ldexp(1.0, 57);
        const double top = h16 ? 0.0 : ldexp(2.0 - ldexp(1.0, -7), 127);
        bool exact = false;
        for (int64_t j = 0; j < param_width(&big, P_BV); j++)
            bd.params[P_BV].h[j] = half_codec_bits(cv, type, &exact);
        assert_true(exact);
        for (int64_t j = 0; j < param_rows(&big, P_WO); j++)
            bd.params[P_WO].h[j * big.e + 1] = half_codec_bits(w, type, &exact);
        assert_true(exact);
        bd.params[P_BO].h[1] = half_codec_bits(top, type, &exact);
        assert_true(exact);
        lh_out bo;
        out_make(&bo, &big);
        sdpa_forward_args battn;
        sdpa_mha_args ba = layer_args(&bd, true, &battn, &bo);
        expect_forward_error(ctx, &ba, &bo, y_count, SDPA_ERR_NONFINITE,
                             "rounds to infinity");
        out_free(&bo);
        data_free(&bd);
    }
    /* backward */
    sdpa_mha_backward_args b = backward_args(&d, true, 0, &a, &o);
    sdpa_mha_backward_args bad = b;
    bad.grad_dtype = type; /* only 0 or SDPA_FLOAT32 */
    expect_backward_error(ctx, &bad, &c, &o, SDPA_ERR_BAD_DTYPE, "grad_dtype");
    bad.grad_dtype = SDPA_FLOAT64;
    expect_backward_error(ctx, &bad, &c, &o, SDPA_ERR_BAD_DTYPE, "grad_dtype");
    sdpa_mha_args a_bad = a;
    a_bad.dtype = 7;
    bad = b;
    bad.forward = &a_bad;
    expect_backward_error(ctx, &bad, &c, &o, SDPA_ERR_BAD_DTYPE,
                          "forward->dtype 7");
    sdpa_forward_args battn = attn;
    battn.kv_dtype = SDPA_FLOAT32;
    a_bad = a;
    a_bad.attn = &battn;
    expect_backward_error(ctx, &bad, &c, &o, SDPA_ERR_BAD_DTYPE,
                          "forward->attn->kv_dtype");
    /* float32 gradients are 4 bytes wide: dx_q just past dy's half
     * elements is fine in half, meets them in float32 */
    bad = backward_args(&d, true, SDPA_FLOAT32, &a, &o);
    bad.dw_q = (char *)d.dy.h + y_count * 2 - 4; /* dw_q's first float
                                                     covers dy's last two */
    expect_backward_error(ctx, &bad, &c, &o, SDPA_ERR_OVERLAP,
                          "output dw_q overlaps the input dy");
    /* a float64 layer takes no grad_dtype */
    sdpa_mha_args a64 = a;
    a64.dtype = SDPA_FLOAT64;
    a64.attn = NULL;
    bad = b;
    bad.forward = &a64;
    bad.grad_dtype = SDPA_FLOAT32;
    expect_backward_error(ctx, &bad, &c, &o, SDPA_ERR_BAD_DTYPE, "grad_dtype");
    sdpa_ctx_destroy(ctx);
    out_free(&o);
    data_free(&d);
}

static int f16 = SDPA_FLOAT16, bf16 = SDPA_BFLOAT16;

/* clang-format off */
#define BOTH_TYPES(fn)                                                         \
    {#fn "_float16", fn, NULL, NULL, &f16},                                    \
    {#fn "_bfloat16", fn, NULL, NULL, &bf16}
/* clang-format on */

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH_TYPES(test_bitwise),
        BOTH_TYPES(test_zero_allocations),
        BOTH_TYPES(test_backward_struct_v1),
        BOTH_TYPES(test_errors),
        cmocka_unit_test(test_float32_grad_dtype),
        cmocka_unit_test(test_gradient_overflow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
