/*
 * sdpa_backward with half-precision storage (include/sdpa.h, "Half-precision
 * storage"): q, out and dout in float16 or bfloat16 (dtype), k and v in
 * their own type (kv_dtype), the gradients in the inputs' types or in
 * float32 (grad_dtype).
 *
 * The promise checked: the half call's dq, dk, dv (grad_dtype =
 * SDPA_FLOAT32), dbias and dsinks are bitwise those of the float32 backward
 * on the same inputs widened exactly, and with grad_dtype = 0 dq, dk and dv
 * are those bits rounded once to nearest even (rounded here by the tests'
 * own codec, tests/common/half_codec.h); for 1, 2 and 3 threads, every
 * kernel set and a caller's parallel-for; on rectangular and ragged calls.
 * The float32 backward itself is checked against the long-double oracle
 * by test_backward. The inputs are exact in both half types (multiples of
 * 1/64 below 2 in magnitude), so widening them is exact by construction.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "caller_pool.h"
#include "half_codec.h"
#include "sdpa.h"
#include "testutil.h"

enum { MAX_ELEMS = 1 << 16 };

/* One tensor in a storage type and its exact float32 widening. */
typedef struct held {
    int type;
    int64_t n;
    void *mem; /* in `type` */
    float *f32;
} held;

static void held_make(held *h, int type, int64_t n)
{
    h->type = type;
    h->n = n;
    h->mem = calloc((size_t)n, type == SDPA_FLOAT32 ? 4 : 2);
    h->f32 = calloc((size_t)n, sizeof(float));
    assert_non_null(h->mem);
    assert_non_null(h->f32);
}

static void held_free(held *h)
{
    free(h->mem);
    free(h->f32);
}

/* Element i set to v, which the type holds exactly. */
static void held_set(held *h, int64_t i, double v)
{
    h->f32[i] = (float)v;
    if (h->type == SDPA_FLOAT32) {
        ((float *)h->mem)[i] = (float)v;
        return;
    }
    bool exact = false;
    ((uint16_t *)h->mem)[i] = half_codec_bits(v, h->type, &exact);
    assert_true(exact);
}

/* f32 from mem (after the library wrote mem). */
static void held_widen(held *h)
{
    for (int64_t i = 0; i < h->n; i++)
        h->f32[i] =
            h->type == SDPA_FLOAT32
                ? ((float *)h->mem)[i]
                : (float)half_codec_value(((uint16_t *)h->mem)[i], h->type);
}

static void held_random(held *h, rng *r)
{
    for (int64_t i = 0; i < h->n; i++)
        held_set(h, i, (double)((int64_t)(rng_next(r) % 255) - 127) / 64.0);
}

typedef struct hcase {
    int64_t seqs; /* 0: rectangular */
    int64_t n, hq, hkv, tq, tk, d;
    int qt, kvt, causal;
    bool bias, sinks, softcap, kv_lens;
    int64_t q_off[5], kv_off[5], lens[4];
} hcase;

/* Everything one case holds: inputs in their storage types, the forward's
 * out and lse, dout, and three sets of gradients: the float32 call's, the
 * half call's in float32, the half call's in the storage types. */
typedef struct hrun {
    hcase c;
    held q, k, v, out, dout;
    float *lse, *bias, *dbias32, *dbias_h;
    double sinks[8], dsinks32[8], dsinks_h[8];
    float *dq32, *dk32, *dv32;
    held dq, dk, dv; /* grad_dtype 0 (or SDPA_FLOAT32 when f32) */
} hrun;

static sdpa_tensor view(void *data, const hcase *c, int64_t h, int64_t t,
                        int64_t d)
{
    return sdpa_tensor_bhtd(data, c->seqs ? 1 : c->n, h, t, d);
}

/* The fields every call of the case shares. */
static void common_fields(const hrun *r, sdpa_backward_args *a)
{
    const hcase *c = &r->c;
    a->causal = c->causal;
    a->softcap = c->softcap ? 2.5 : 0;
    a->kv_lens = c->kv_lens ? c->lens : NULL;
    a->sinks = c->sinks ? r->sinks : NULL;
    a->seqs = c->seqs;
    a->q_offsets = c->seqs ? c->q_off : NULL;
    a->kv_offsets = c->seqs ? c->kv_off : NULL;
    if (c->bias)
        a->bias = sdpa_tensor_bhtd(r->bias, c->n, c->hq, c->tq, c->tk);
}

static void run_forward(sdpa_ctx *ctx, hrun *r)
{
    const hcase *c = &r->c;
    sdpa_backward_args b = SDPA_BACKWARD_ARGS_INIT;
    common_fields(r, &b);
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.dtype = c->qt;
    f.kv_dtype = c->kvt;
    f.bias_dtype = SDPA_FLOAT32;
    f.causal = b.causal;
    f.softcap = b.softcap;
    f.kv_lens = b.kv_lens;
    f.sinks = b.sinks;
    f.bias = b.bias;
    f.seqs = b.seqs;
    f.q_offsets = b.q_offsets;
    f.kv_offsets = b.kv_offsets;
    f.q = view(r->q.mem, c, c->hq, c->tq, c->d);
    f.k = view(r->k.mem, c, c->hkv, c->tk, c->d);
    f.v = view(r->v.mem, c, c->hkv, c->tk, c->d);
    f.out = view(r->out.mem, c, c->hq, c->tq, c->d);
    f.lse = view(r->lse, c, c->hq, c->tq, 1);
    int rc = sdpa_forward(ctx, &f);
    if (rc != SDPA_OK)
        print_message("  forward: %s\n", sdpa_ctx_last_error(ctx));
    assert_int_equal(rc, SDPA_OK);
    held_widen(&r->out);
}

/* The float32 backward on the widened inputs. */
static void run_f32(sdpa_ctx *ctx, hrun *r)
{
    const hcase *c = &r->c;
    sdpa_backward_args a = SDPA_BACKWARD_ARGS_INIT;
    common_fields(r, &a);
    a.dtype = SDPA_FLOAT32;
    a.q = view(r->q.f32, c, c->hq, c->tq, c->d);
    a.k = view(r->k.f32, c, c->hkv, c->tk, c->d);
    a.v = view(r->v.f32, c, c->hkv, c->tk, c->d);
    a.out = view(r->out.f32, c, c->hq, c->tq, c->d);
    a.dout = view(r->dout.f32, c, c->hq, c->tq, c->d);
    a.lse = view(r->lse, c, c->hq, c->tq, 1);
    a.dq = view(r->dq32, c, c->hq, c->tq, c->d);
    a.dk = view(r->dk32, c, c->hkv, c->tk, c->d);
    a.dv = view(r->dv32, c, c->hkv, c->tk, c->d);
    if (c->bias)
        a.dbias = sdpa_tensor_bhtd(r->dbias32, c->n, c->hq, c->tq, c->tk);
    a.dsinks = c->sinks ? r->dsinks32 : NULL;
    assert_int_equal(sdpa_backward(ctx, &a), SDPA_OK);
}

/* The half call, gradients into r->dq/dk/dv of grad type `grad`. */
static int run_half(sdpa_ctx *ctx, hrun *r, int grad)
{
    const hcase *c = &r->c;
    sdpa_backward_args a = SDPA_BACKWARD_ARGS_INIT;
    common_fields(r, &a);
    a.dtype = c->qt;
    a.kv_dtype = c->kvt;
    a.bias_dtype = SDPA_FLOAT32;
    a.grad_dtype = grad;
    a.q = view(r->q.mem, c, c->hq, c->tq, c->d);
    a.k = view(r->k.mem, c, c->hkv, c->tk, c->d);
    a.v = view(r->v.mem, c, c->hkv, c->tk, c->d);
    a.out = view(r->out.mem, c, c->hq, c->tq, c->d);
    a.dout = view(r->dout.mem, c, c->hq, c->tq, c->d);
    a.lse = view(r->lse, c, c->hq, c->tq, 1);
    a.dq = view(r->dq.mem, c, c->hq, c->tq, c->d);
    a.dk = view(r->dk.mem, c, c->hkv, c->tk, c->d);
    a.dv = view(r->dv.mem, c, c->hkv, c->tk, c->d);
    if (c->bias)
        a.dbias = sdpa_tensor_bhtd(r->dbias_h, c->n, c->hq, c->tq, c->tk);
    a.dsinks = c->sinks ? r->dsinks_h : NULL;
    return sdpa_backward(ctx, &a);
}

static void hrun_make(hrun *r, const hcase *c, uint64_t seed, int grad)
{
    memset(r, 0, sizeof *r);
    r->c = *c;
    rng g = {seed};
    const int64_t nb = c->seqs ? 1 : c->n;
    const int64_t qe = nb * c->hq * c->tq * c->d;
    const int64_t ke = nb * c->hkv * c->tk * c->d;
    assert_true(qe <= MAX_ELEMS && ke <= MAX_ELEMS);
    held_make(&r->q, c->qt, qe);
    held_make(&r->out, c->qt, qe);
    held_make(&r->dout, c->qt, qe);
    held_make(&r->k, c->kvt, ke);
    held_make(&r->v, c->kvt, ke);
    const int gq = grad ? grad : c->qt, gkv = grad ? grad : c->kvt;
    held_make(&r->dq, gq, qe);
    held_make(&r->dk, gkv, ke);
    held_make(&r->dv, gkv, ke);
    held_random(&r->q, &g);
    held_random(&r->k, &g);
    held_random(&r->v, &g);
    held_random(&r->dout, &g);
    r->lse = calloc((size_t)(nb * c->hq * c->tq), sizeof(float));
    r->dq32 = calloc((size_t)qe, sizeof(float));
    r->dk32 = calloc((size_t)ke, sizeof(float));
    r->dv32 = calloc((size_t)ke, sizeof(float));
    const size_t be = (size_t)(c->n * c->hq * c->tq * c->tk);
    r->bias = calloc(be ? be : 1, sizeof(float));
    r->dbias32 = calloc(be ? be : 1, sizeof(float));
    r->dbias_h = calloc(be ? be : 1, sizeof(float));
    assert_true(r->lse && r->dq32 && r->dk32 && r->dv32 && r->bias &&
                r->dbias32 && r->dbias_h);
    for (size_t i = 0; c->bias && i < be; i++)
        r->bias[i] = (float)((int64_t)(rng_next(&g) % 17) - 8) / 8.0f;
    for (int64_t h = 0; h < c->hq; h++)
        r->sinks[h] = (double)h / 4.0 - 0.5;
}

static void hrun_free(hrun *r)
{
    held *all[8] = {&r->q,    &r->k,  &r->v,  &r->out,
                    &r->dout, &r->dq, &r->dk, &r->dv};
    for (int i = 0; i < 8; i++)
        held_free(all[i]);
    free(r->lse);
    free(r->bias);
    free(r->dbias32);
    free(r->dbias_h);
    free(r->dq32);
    free(r->dk32);
    free(r->dv32);
}

/* The half call's gradients are the float32 call's, rounded to their
 * types (counted into *half_values when the type is a half one). */
static void expect_rounded(const held *got, const float *want,
                           long *half_values)
{
    for (int64_t i = 0; i < got->n; i++) {
        if (got->type == SDPA_FLOAT32) {
            assert_memory_equal(&((float *)got->mem)[i], &want[i],
                                sizeof(float));
            continue;
        }
        bool exact = false;
        uint16_t bits = half_codec_bits(
            half_codec_round((double)want[i], got->type), got->type, &exact);
        assert_true(exact);
        uint16_t have = ((uint16_t *)got->mem)[i];
        if (have != bits)
            print_message("element %lld: %04x, want %04x (%.9g)\n",
                          (long long)i, have, bits, (double)want[i]);
        assert_int_equal(have, bits);
        ++*half_values;
    }
}

static void expect_same_as_f32(const hrun *r, long *half_values)
{
    expect_rounded(&r->dq, r->dq32, half_values);
    expect_rounded(&r->dk, r->dk32, half_values);
    expect_rounded(&r->dv, r->dv32, half_values);
    if (r->c.bias)
        assert_memory_equal(r->dbias_h, r->dbias32,
                            sizeof(float) *
                                (size_t)(r->c.n * r->c.hq * r->c.tq * r->c.tk));
    if (r->c.sinks)
        assert_memory_equal(r->dsinks_h, r->dsinks32,
                            sizeof(double) * (size_t)r->c.hq);
}

/* A context whose empty rows (causal rows before the first key) are
 * zeros, with small tiles: many key blocks adding to dq in turn. */
static sdpa_ctx *make_ctx(int64_t block_q, int64_t block_k)
{
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    assert_int_equal(
        sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO),
        SDPA_OK);
    assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_BLOCK_Q, block_q), SDPA_OK);
    assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_BLOCK_K, block_k), SDPA_OK);
    return ctx;
}

static const int types[5][2] = {{SDPA_BFLOAT16, SDPA_BFLOAT16},
                                {SDPA_FLOAT16, SDPA_FLOAT16},
                                {SDPA_FLOAT32, SDPA_BFLOAT16},
                                {SDPA_BFLOAT16, SDPA_FLOAT32},
                                {SDPA_FLOAT16, SDPA_BFLOAT16}};

/* Random rectangular cases: both grad types, then every thread count and
 * kernel set and a caller's parallel-for, each bitwise the float32 call's
 * (rounded). */
static void test_rectangular(void **state)
{
    (void)state;
    sdpa_ctx *ctx = make_ctx(8, 16);
    rng g = {9001};
    long cases = 0, half_values = 0, runs = 0;
    for (int it = 0; it < 40; it++) {
        hcase c = {0};
        c.n = 1 + (int64_t)(rng_next(&g) % 2);
        c.hkv = 1 + (int64_t)(rng_next(&g) % 2);
        c.hq = c.hkv * (1 + (int64_t)(rng_next(&g) % 2));
        c.tq = 1 + (int64_t)(rng_next(&g) % 40);
        c.tk = 1 + (int64_t)(rng_next(&g) % 60);
        c.d = 8 << (rng_next(&g) % 3);
        c.qt = types[it % 5][0];
        c.kvt = types[it % 5][1];
        c.causal = (int)(rng_next(&g) % 3);
        c.bias = rng_next(&g) % 3 == 0;
        c.sinks = rng_next(&g) % 2 == 0;
        c.softcap = rng_next(&g) % 4 == 0;
        c.kv_lens = rng_next(&g) % 3 == 0;
        for (int64_t b = 0; b < c.n; b++)
            c.lens[b] = 1 + (int64_t)(rng_next(&g) % (uint64_t)c.tk);
        for (int grad = 0; grad <= SDPA_FLOAT32; grad += SDPA_FLOAT32) {
            hrun r;
            hrun_make(&r, &c, 77 + (uint64_t)it, grad);
            assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, 1),
                             SDPA_OK);
            run_forward(ctx, &r);
            run_f32(ctx, &r);
            for (int threads = 1; threads <= 3; threads++)
                for (int kernel = SDPA_KERNEL_PORTABLE;
                     kernel <= SDPA_KERNEL_AVX512; kernel++) {
                    if (sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, kernel) !=
                        SDPA_OK)
                        continue; /* not on this CPU */
                    assert_int_equal(
                        sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, threads),
                        SDPA_OK);
                    /* the float32 reference on the same kernel set */
                    run_f32(ctx, &r);
                    assert_int_equal(run_half(ctx, &r, grad), SDPA_OK);
                    expect_same_as_f32(&r, &half_values);
                    runs++;
                }
            assert_int_equal(
                sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, SDPA_KERNEL_AUTO),
                SDPA_OK);
            sdpa_ctx *pf = make_ctx(8, 16);
            test_pool tp = {.workers = 2, .reverse = it % 2 == 1};
            assert_int_equal(
                sdpa_ctx_set_parallel_for(pf, test_parallel_for, &tp, 2),
                SDPA_OK);
            run_f32(ctx, &r);
            assert_int_equal(run_half(pf, &r, grad), SDPA_OK);
            expect_same_as_f32(&r, &half_values);
            sdpa_ctx_destroy(pf);
            hrun_free(&r);
            cases++;
        }
    }
    print_message("  %ld cases, %ld runs, %ld half gradient values checked\n",
                  cases, runs, half_values);
    assert_true(half_values > 10000);
    sdpa_ctx_destroy(ctx);
}

/* A ragged call, packed keys of three sequences (one without query rows):
 * bitwise the float32 ragged call's, rounded. */
static void test_ragged(void **state)
{
    (void)state;
    sdpa_ctx *ctx = make_ctx(0, 16);
    long half_values = 0;
    for (int t = 0; t < 5; t++)
        for (int grad = 0; grad <= SDPA_FLOAT32; grad += SDPA_FLOAT32) {
            hcase c = {.seqs = 3,
                       .n = 3,
                       .hq = 4,
                       .hkv = 2,
                       .tq = 41,
                       .tk = 70,
                       .d = 16,
                       .qt = types[t][0],
                       .kvt = types[t][1],
                       .causal = SDPA_CAUSAL_BOTTOM_RIGHT,
                       .sinks = t % 2 == 0,
                       .q_off = {0, 1, 1, 41},
                       .kv_off = {0, 30, 33, 70}};
            hrun r;
            hrun_make(&r, &c, 500 + (uint64_t)t, grad);
            for (int threads = 1; threads <= 2; threads++) {
                assert_int_equal(
                    sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, threads),
                    SDPA_OK);
                run_forward(ctx, &r);
                run_f32(ctx, &r);
                assert_int_equal(run_half(ctx, &r, grad), SDPA_OK);
                expect_same_as_f32(&r, &half_values);
            }
            hrun_free(&r);
        }
    assert_true(half_values > 1000);
    sdpa_ctx_destroy(ctx);
}

/* Storage-type errors: a status, a message naming the field, the
 * gradients untouched. */
static void test_errors(void **state)
{
    (void)state;
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    hcase c = {.n = 1,
               .hq = 2,
               .hkv = 1,
               .tq = 5,
               .tk = 7,
               .d = 8,
               .qt = SDPA_BFLOAT16,
               .kvt = SDPA_BFLOAT16};
    hrun r;
    hrun_make(&r, &c, 3, 0);
    run_forward(ctx, &r);
    memset(r.dq.mem, 0x5a, (size_t)r.dq.n * 2);
    const struct {
        int kv, grad, dtype;
        const char *says;
    } bad[4] = {{SDPA_FLOAT64, 0, SDPA_BFLOAT16, "kv_dtype"},
                {0, SDPA_FLOAT16, SDPA_BFLOAT16, "grad_dtype 3"},
                {0, SDPA_FLOAT64, SDPA_BFLOAT16, "grad_dtype 2"},
                {0, SDPA_FLOAT32, SDPA_FLOAT64, "grad_dtype 1"}};
    for (int i = 0; i < 4; i++) {
        r.c.kvt = bad[i].kv ? bad[i].kv : SDPA_BFLOAT16;
        r.c.qt = bad[i].dtype;
        int rc = run_half(ctx, &r, bad[i].grad);
        const char *msg = sdpa_ctx_last_error(ctx);
        if (rc != SDPA_ERR_BAD_DTYPE || !strstr(msg, bad[i].says))
            print_message("  case %d: %d %s\n", i, rc, msg);
        assert_int_equal(rc, SDPA_ERR_BAD_DTYPE);
        assert_non_null(strstr(msg, bad[i].says));
        for (int64_t x = 0; x < r.dq.n; x++)
            assert_int_equal(((uint16_t *)r.dq.mem)[x], 0x5a5a);
    }
    hrun_free(&r);
    sdpa_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rectangular),
        cmocka_unit_test(test_ragged),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
