/*
 * The tiled and decode paths at their edges, against the long-double
 * reference and the materialised path: key and query blocks that do not
 * divide the lengths, key blocks fully closed by the mask before open ones,
 * causal alignments with Tq != Tk, key lengths 0 and 1 (with NaN in the
 * padding), GQA groups stacked by the decode path across several chunks.
 * Every case runs on every path, several block sizes and 1, 2 and 3
 * threads; results must be bitwise identical across thread counts. Last,
 * the tiled path's workspace must not grow with Tk.
 *
 * Tolerance (absolute, on out and lse):
 *   tol = 16 · eps · (logit_absmax + 8) · (v_absmax + 1)
 * eps the dtype's epsilon: a logit with absolute error eps·|s| moves
 * exp(s − m) by that relative amount, and out is a convex combination of
 * V rows. A wrong mask, block boundary or rescale is off by far more.
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

#include "checks.h"
#include "reference.h"
#include "problem.h"
#include "testutil.h"

typedef struct scenario {
    const char *name;
    int dtype;
    int64_t n, hq, hkv, tq, tk, dk, dv;
    int causal;
    bool mask, bias;
    int64_t lens[3]; /* used when use_lens */
    bool use_lens;
    int closed_keys; /* the mask forbids keys [0, closed_keys) for all rows */
    double softcap;
} scenario;

typedef struct buffers {
    tbuf q, k, v, mask, bias, out, lse;
    sdpa_forward_args args;
} buffers;

static void make_buffers(const scenario *sc, buffers *b, rng *r)
{
    memset(b, 0, sizeof *b);
    tbuf_make(&b->q, sc->dtype, sc->n, sc->hq, sc->tq, sc->dk, LAYOUT_BHTD, 0);
    tbuf_make(&b->k, sc->dtype, sc->n, sc->hkv, sc->tk, sc->dk, LAYOUT_BTHD, 3);
    tbuf_make(&b->v, sc->dtype, sc->n, sc->hkv, sc->tk, sc->dv, LAYOUT_BHTD, 1);
    tbuf_make(&b->out, sc->dtype, sc->n, sc->hq, sc->tq, sc->dv, LAYOUT_BHTD,
              0);
    tbuf_make(&b->lse, sc->dtype, sc->n, sc->hq, sc->tq, 1, LAYOUT_BHTD, 0);
    tbuf_fill_random(&b->q, r, 1.5);
    tbuf_fill_random(&b->k, r, 1.5);
    tbuf_fill_random(&b->v, r, 2.0);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = sc->dtype;
    a.causal = sc->causal;
    a.softcap = sc->softcap;
    tp_views(&a, &b->q, &b->k, &b->v, NULL, NULL, &b->out, NULL, &b->lse, NULL);
    if (sc->use_lens) {
        a.kv_lens = sc->lens;
        /* K and V rows past the length are NaN: they must never be read. */
        for (int64_t n = 0; n < sc->n; n++)
            for (int64_t h = 0; h < sc->hkv; h++)
                for (int64_t j = sc->lens[n]; j < sc->tk; j++) {
                    for (int64_t d = 0; d < sc->dk; d++)
                        tset(&b->k, n, h, j, d, NAN);
                    for (int64_t d = 0; d < sc->dv; d++)
                        tset(&b->v, n, h, j, d, NAN);
                }
    }
    if (sc->mask) {
        /* broadcast over heads: extent 1 */
        tbuf_make(&b->mask, ELEM_U8, sc->n, 1, sc->tq, sc->tk, LAYOUT_BHTD, 0);
        for (int64_t n = 0; n < sc->n; n++)
            for (int64_t i = 0; i < sc->tq; i++)
                for (int64_t j = 0; j < sc->tk; j++)
                    tset(&b->mask, n, 0, i, j,
                         j < sc->closed_keys || rng_unit(r) < 0.2);
        a.mask = b->mask.t;
    }
    if (sc->bias) {
        tbuf_make(&b->bias, sc->dtype, 1, sc->hq, sc->tq, sc->tk, LAYOUT_BHTD,
                  0);
        tbuf_fill_random(&b->bias, r, 1.0);
        for (int64_t h = 0; h < sc->hq; h++)
            for (int64_t i = 0; i < sc->tq; i++)
                for (int64_t j = 0; j < sc->tk; j++)
                    if (rng_unit(r) < 0.1)
                        tset(&b->bias, 0, h, i, j, -INFINITY);
        a.bias = b->bias.t;
    }
    b->args = a;
}

static void free_buffers(buffers *b)
{
    tbuf_free_all((tbuf *[]){&b->q, &b->k, &b->v, &b->out, &b->lse, NULL});
    if (b->mask.mem)
        tbuf_free(&b->mask);
    if (b->bias.mem)
        tbuf_free(&b->bias);
}

static void check_against_reference(const scenario *sc, const buffers *b,
                                    const ref_result *ref, const char *where)
{
    double eps = sc->dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    double tol = 16 * eps * ((double)ref->logit_absmax + 8) *
                 ((double)ref->v_absmax + 1);
    for (int64_t n = 0; n < sc->n; n++)
        for (int64_t h = 0; h < sc->hq; h++)
            for (int64_t i = 0; i < sc->tq; i++) {
                int64_t row = (n * sc->hq + h) * sc->tq + i;
                for (int64_t d = 0; d < sc->dv; d++) {
                    double got = tget(&b->out, n, h, i, d);
                    double want = (double)ref->out[row * sc->dv + d];
                    if (!(fabs(got - want) <= tol))
                        fail_msg("%s %s: out[%lld,%lld,%lld,%lld] = %.9g, "
                                 "reference %.9g (tol %.3g)",
                                 sc->name, where, (long long)n, (long long)h,
                                 (long long)i, (long long)d, got, want, tol);
                }
                double got = tget(&b->lse, n, h, i, 0);
                double want = (double)ref->lse[row];
                bool same_inf = isinf(want) && got == want;
                if (!same_inf && !(fabs(got - want) <= tol))
                    fail_msg("%s %s: lse[%lld,%lld,%lld] = %.9g, reference "
                             "%.9g",
                             sc->name, where, (long long)n, (long long)h,
                             (long long)i, got, want);
            }
}

/* Runs the scenario on every path, block setting and thread count. */
static void run_scenario(const scenario *sc)
{
    rng r = {0x5eed0000u + (uint64_t)sc->tk * 131u + (uint64_t)sc->tq};
    buffers b;
    make_buffers(sc, &b, &r);
    ref_result ref;
    assert_int_equal(ref_forward(&b.args, &ref), 0);

    sdpa_ctx *ctx = tp_ctx(0);
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    const int paths[] = {SDPA_PATH_MATERIALISED, SDPA_PATH_TILED,
                         SDPA_PATH_DECODE};
    const int64_t blocks[][2] = {{0, 0}, {3, 5}, {7, 4}, {1, 1}, {64, 16}};
    size_t out_bytes = b.out.elems * b.out.esize;
    unsigned char *first = malloc(out_bytes);
    assert_non_null(first);
    for (size_t pi = 0; pi < sizeof paths / sizeof paths[0]; pi++)
        for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++)
            for (int threads = 1; threads <= 3; threads++) {
                tp_set(ctx, SDPA_OPT_PATH, paths[pi]);
                tp_set(ctx, SDPA_OPT_BLOCK_Q, blocks[bi][0]);
                tp_set(ctx, SDPA_OPT_BLOCK_K, blocks[bi][1]);
                tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
                int status = sdpa_forward(ctx, &b.args);
                char where[96];
                snprintf(where, sizeof where,
                         "path %d blocks %lldx%lld threads %d", paths[pi],
                         (long long)blocks[bi][0], (long long)blocks[bi][1],
                         threads);
                if (status != SDPA_OK)
                    fail_msg("%s %s: status %d: %s", sc->name, where, status,
                             sdpa_ctx_last_error(ctx));
                check_against_reference(sc, &b, &ref, where);
                if (threads == 1)
                    memcpy(first, b.out.mem, out_bytes);
                else if (memcmp(first, b.out.mem, out_bytes) != 0)
                    fail_msg("%s %s: not bitwise equal to 1 thread", sc->name,
                             where);
            }
    free(first);
    sdpa_ctx_destroy(ctx);
    ref_free(&ref);
    free_buffers(&b);
}

static void test_tails(void **state)
{
    (void)state;
    scenario sc = {.name = "tails",
                   .dtype = SDPA_FLOAT32,
                   .n = 2,
                   .hq = 2,
                   .hkv = 2,
                   .tq = 13,
                   .tk = 29,
                   .dk = 6,
                   .dv = 5};
    run_scenario(&sc);
    sc.dtype = SDPA_FLOAT64;
    sc.bias = true;
    run_scenario(&sc);
}

static void test_closed_first_blocks(void **state)
{
    (void)state;
    scenario sc = {.name = "closed first key blocks",
                   .dtype = SDPA_FLOAT32,
                   .n = 2,
                   .hq = 2,
                   .hkv = 1,
                   .tq = 9,
                   .tk = 40,
                   .dk = 4,
                   .dv = 3,
                   .mask = true,
                   .closed_keys = 17};
    run_scenario(&sc);
}

static void test_causal_alignments(void **state)
{
    (void)state;
    const int64_t sizes[][2] = {{5, 17}, {17, 5}, {16, 16}, {1, 33}};
    for (int c = SDPA_CAUSAL_TOP_LEFT; c <= SDPA_CAUSAL_BOTTOM_RIGHT; c++)
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
            scenario sc = {.name = c == SDPA_CAUSAL_TOP_LEFT ? "top-left"
                                                             : "bottom-right",
                           .dtype = s % 2 ? SDPA_FLOAT64 : SDPA_FLOAT32,
                           .n = 2,
                           .hq = 4,
                           .hkv = 2,
                           .tq = sizes[s][0],
                           .tk = sizes[s][1],
                           .dk = 8,
                           .dv = 8,
                           .causal = c,
                           .use_lens = true,
                           .lens = {sizes[s][1], sizes[s][1] / 2}};
            run_scenario(&sc);
        }
}

static void test_short_lengths(void **state)
{
    (void)state;
    scenario sc = {.name = "kv_lens 0, 1, Tk",
                   .dtype = SDPA_FLOAT32,
                   .n = 3,
                   .hq = 2,
                   .hkv = 1,
                   .tq = 6,
                   .tk = 23,
                   .dk = 5,
                   .dv = 7,
                   .use_lens = true,
                   .lens = {0, 1, 23},
                   .bias = true};
    run_scenario(&sc);
    sc.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    sc.name = "kv_lens 0, 1, Tk bottom-right";
    run_scenario(&sc);
}

static void test_decode_groups(void **state)
{
    (void)state;
    /* Tk beyond one 512-key chunk, with a tail; groups of 4 stacked. */
    scenario sc = {.name = "decode GQA",
                   .dtype = SDPA_FLOAT32,
                   .n = 2,
                   .hq = 8,
                   .hkv = 2,
                   .tq = 1,
                   .tk = 1100,
                   .dk = 16,
                   .dv = 8,
                   .use_lens = true,
                   .lens = {1100, 700},
                   .softcap = 5.0};
    run_scenario(&sc);
    sc.tq = 3;
    sc.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    sc.mask = true;
    sc.name = "decode GQA, 3 queries, causal, mask";
    run_scenario(&sc);
}

static void test_random_shapes(void **state)
{
    (void)state;
    rng r = {2026};
    for (int it = 0; it < 40; it++) {
        int64_t hkv = rng_int(&r, 1, 3);
        scenario sc = {.name = "random",
                       .dtype = it % 2 ? SDPA_FLOAT64 : SDPA_FLOAT32,
                       .n = rng_int(&r, 1, 3),
                       .hkv = hkv,
                       .hq = hkv * rng_int(&r, 1, 3),
                       .tq = rng_int(&r, 1, 20),
                       .tk = rng_int(&r, 1, 45),
                       .dk = rng_int(&r, 1, 9),
                       .dv = rng_int(&r, 1, 9),
                       .causal = (int)rng_int(&r, 0, 2),
                       .mask = rng_unit(&r) < 0.5,
                       .bias = rng_unit(&r) < 0.5,
                       .softcap = rng_unit(&r) < 0.3 ? 3.0 : 0.0};
        if (rng_unit(&r) < 0.5) {
            sc.use_lens = true;
            for (int i = 0; i < 3; i++)
                sc.lens[i] = rng_int(&r, 0, sc.tk);
        }
        run_scenario(&sc);
    }
}

/* The tiled path's scratch depends on the block sizes and the head
 * dimensions, never on Tk. */
static void test_tiled_workspace_independent_of_keys(void **state)
{
    (void)state;
    size_t bytes[2] = {0, 0};
    const int64_t keys[2] = {1024, 65536};
    for (int c = 0; c < 2; c++) {
        tbuf q, k, v, out;
        tbuf_make(&q, SDPA_FLOAT32, 1, 2, 512, 64, LAYOUT_BHTD, 0);
        tbuf_make(&k, SDPA_FLOAT32, 1, 2, keys[c], 64, LAYOUT_BHTD, 0);
        tbuf_make(&v, SDPA_FLOAT32, 1, 2, keys[c], 64, LAYOUT_BHTD, 0);
        tbuf_make(&out, SDPA_FLOAT32, 1, 2, 512, 64, LAYOUT_BHTD, 0);
        sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
        a.dtype = SDPA_FLOAT32;
        tp_views(&a, &q, &k, &v, NULL, NULL, &out, NULL, NULL, NULL);
        sdpa_ctx *ctx = tp_ctx(0);
        tp_set(ctx, SDPA_OPT_PATH, SDPA_PATH_TILED);
        assert_int_equal(sdpa_forward_workspace(ctx, &a, &bytes[c]), SDPA_OK);
        sdpa_ctx_destroy(ctx);
        tbuf_free_all((tbuf *[]){&q, &k, &v, &out, NULL});
    }
    print_message("tiled workspace: %zu bytes at Tk=1024, %zu at Tk=65536\n",
                  bytes[0], bytes[1]);
    assert_true(bytes[0] > 0);
    assert_int_equal(bytes[0], bytes[1]);
    assert_true(bytes[1] <= 4u << 20); /* far below 512·65536·4 = 128 MiB */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tails),
        cmocka_unit_test(test_closed_first_blocks),
        cmocka_unit_test(test_causal_alignments),
        cmocka_unit_test(test_short_lengths),
        cmocka_unit_test(test_decode_groups),
        cmocka_unit_test(test_random_shapes),
        cmocka_unit_test(test_tiled_workspace_independent_of_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
