/*
 * Bad input: one test per status code of sdpa.h, each with many variants.
 *
 * Every failing sdpa_forward call runs with out / weights / lse (and a spare
 * arena used for aliasing cases) pre-filled with a sentinel byte pattern
 * that must survive byte for byte -- except after SDPA_ERR_NONFINITE, whose
 * outputs the header documents as unspecified -- with the inputs unchanged,
 * with sdpa_ctx_last_error() non-empty and naming the culprit (checked
 * loosely with strstr), and, for errors found by validation, with
 * sdpa_forward_workspace() giving the same status for the same arguments.
 */
#define _POSIX_C_SOURCE 200809L /* setenv, for SDPA_KERNEL */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "sdpa.h"
#include "problem.h"
#include "testutil.h"

/* Baseline: N=2, Hq=4, Hkv=2, Tq=3, Tk=5, Dk=4, Dv=6, mask, bias,
 * kv_lens {5, 3}, weights, lse: a valid call. */
enum { N_ = 2, HQ = 4, HKV = 2, TQ = 3, TK = 5, DK = 4, DV = 6 };

typedef struct fx {
    int dtype;
    sdpa_ctx *ctx;
    tbuf q, k, v, mask, bias, out, w, lse;
    unsigned char *in_copy[5]; /* q, k, v, mask, bias */
    int64_t kv_lens[N_];
    sdpa_forward_args base, a;
    /* Spare memory for overlap cases: big enough for any tensor above. */
    void *arena;
    size_t arena_bytes;
} fx;

static tbuf *inputs(fx *f, int i)
{
    tbuf *t[5] = {&f->q, &f->k, &f->v, &f->mask, &f->bias};
    return t[i];
}

static int fx_setup(void **state)
{
    int dtype = *(int *)*state;
    fx *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->dtype = dtype;
    assert_int_equal(sdpa_ctx_create(&f->ctx), SDPA_OK);
    rng r = {42};
    tbuf_make(&f->q, dtype, N_, HQ, TQ, DK, LAYOUT_BHTD, 0);
    tbuf_make(&f->k, dtype, N_, HKV, TK, DK, LAYOUT_BHTD, 0);
    tbuf_make(&f->v, dtype, N_, HKV, TK, DV, LAYOUT_BHTD, 0);
    tbuf_make(&f->mask, ELEM_U8, N_, HQ, TQ, TK, LAYOUT_BHTD, 0);
    tbuf_make(&f->bias, dtype, 1, HQ, TQ, TK, LAYOUT_BHTD, 0);
    tbuf_make(&f->out, dtype, N_, HQ, TQ, DV, LAYOUT_BHTD, 0);
    tbuf_make(&f->w, dtype, N_, HQ, TQ, TK, LAYOUT_BHTD, 0);
    tbuf_make(&f->lse, dtype, N_, HQ, TQ, 1, LAYOUT_BHTD, 0);
    tbuf_fill_random(&f->q, &r, 1.0);
    tbuf_fill_random(&f->k, &r, 1.0);
    tbuf_fill_random(&f->v, &r, 1.0);
    tbuf_fill_random(&f->bias, &r, 1.0);
    memset(f->mask.mem, 0, f->mask.elems);
    tset(&f->mask, 0, 1, 2, 3, 1); /* a few forbidden keys */
    tset(&f->mask, 1, 0, 0, 0, 7);
    for (int i = 0; i < 5; ++i) {
        tbuf *t = inputs(f, i);
        f->in_copy[i] = malloc(t->elems * t->esize);
        assert_non_null(f->in_copy[i]);
        memcpy(f->in_copy[i], t->mem, t->elems * t->esize);
    }
    f->kv_lens[0] = TK;
    f->kv_lens[1] = 3;
    f->arena_bytes = 1 << 16;
    f->arena = calloc(1, f->arena_bytes);
    assert_non_null(f->arena);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    tp_views(&a, &f->q, &f->k, &f->v, &f->mask, &f->bias, &f->out, &f->w,
             &f->lse, NULL);
    a.kv_lens = f->kv_lens;
    f->base = a;
    f->a = a;
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    fx *f = *state;
    sdpa_ctx_destroy(f->ctx);
    tbuf_free_all((tbuf *[]){&f->q, &f->k, &f->v, &f->mask, &f->bias, &f->out,
                             &f->w, &f->lse, NULL});
    for (int i = 0; i < 5; ++i)
        free(f->in_copy[i]);
    free(f->arena);
    free(f);
    return 0;
}

/* Back to the valid baseline (arguments and the context's options). */
static void fx_reset(fx *f)
{
    f->a = f->base;
    f->kv_lens[0] = TK;
    f->kv_lens[1] = 3;
    assert_int_equal(
        sdpa_ctx_set_int(f->ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ERROR),
        SDPA_OK);
    assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_PATH, SDPA_PATH_AUTO),
                     SDPA_OK);
}

/* The baseline with only q, k, v, out (no optional tensor). */
static void fx_minimal(fx *f)
{
    fx_reset(f);
    memset(&f->a.mask, 0, sizeof f->a.mask);
    memset(&f->a.bias, 0, sizeof f->a.bias);
    memset(&f->a.weights, 0, sizeof f->a.weights);
    memset(&f->a.lse, 0, sizeof f->a.lse);
    f->a.kv_lens = NULL;
}

static void fill_outputs(fx *f)
{
    fill_sentinel(f->out.mem, f->out.elems * f->out.esize);
    fill_sentinel(f->w.mem, f->w.elems * f->w.esize);
    fill_sentinel(f->lse.mem, f->lse.elems * f->lse.esize);
    fill_sentinel(f->arena, f->arena_bytes);
}

static void check_untouched(fx *f, const char *what)
{
    long e[4] = {first_non_sentinel(f->out.mem, f->out.elems * f->out.esize),
                 first_non_sentinel(f->w.mem, f->w.elems * f->w.esize),
                 first_non_sentinel(f->lse.mem, f->lse.elems * f->lse.esize),
                 first_non_sentinel(f->arena, f->arena_bytes)};
    if (e[0] >= 0 || e[1] >= 0 || e[2] >= 0 || e[3] >= 0)
        print_error("%s: output written (first changed byte: out %ld, weights "
                    "%ld, lse %ld, arena %ld)\n",
                    what, e[0], e[1], e[2], e[3]);
    assert_true(e[0] < 0 && e[1] < 0 && e[2] < 0 && e[3] < 0);
    for (int i = 0; i < 5; ++i) {
        tbuf *t = inputs(f, i);
        assert_memory_equal(f->in_copy[i], t->mem, t->elems * t->esize);
    }
}

/* The message is non-empty and contains one of the needles (NULL-ended). */
static void check_message_any(const char *msg, const char *what,
                              const char *const *needles)
{
    assert_non_null(msg);
    if (strlen(msg) == 0)
        print_error("%s: empty last_error\n", what);
    assert_true(strlen(msg) > 0);
    if (!needles || !needles[0])
        return;
    for (int i = 0; needles[i]; ++i)
        if (strstr(msg, needles[i]))
            return;
    print_error("%s: last_error \"%s\" does not name \"%s\"\n", what, msg,
                needles[0]);
    fail();
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

/* Run f->a, expect `status`, untouched outputs and a message naming one of
 * the needles; the workspace query must agree. */
static void expect_status(fx *f, int status, const char *what,
                          const char *const *needles)
{
    fill_outputs(f);
    int st = sdpa_forward(f->ctx, &f->a);
    if (st != status)
        print_error("%s: got %d (%s: %s), want %d (%s)\n", what, st,
                    sdpa_status_string(st), sdpa_ctx_last_error(f->ctx), status,
                    sdpa_status_string(status));
    assert_int_equal(st, status);
    if (status == SDPA_OK) {
        assert_string_equal(sdpa_ctx_last_error(f->ctx), "");
        return;
    }
    check_message_any(sdpa_ctx_last_error(f->ctx), what, needles);
    if (status != SDPA_ERR_NONFINITE)
        check_untouched(f, what);
    if (status != SDPA_ERR_NONFINITE && status != SDPA_ERR_OUT_OF_MEMORY) {
        size_t bytes = 0;
        fill_outputs(f);
        int ws = sdpa_forward_workspace(f->ctx, &f->a, &bytes);
        if (ws != status)
            print_error("%s: workspace gave %d (%s), forward %d\n", what, ws,
                        sdpa_ctx_last_error(f->ctx), status);
        assert_int_equal(ws, status);
        check_untouched(f, what);
    }
}

/* The fixture reset by `init` (fx_reset: the full call, fx_minimal: the
 * smallest), the statements, then the expected status and message. */
#define CASE_FROM(init, status, needles, ...)                                  \
    do {                                                                       \
        init(f);                                                               \
        {                                                                      \
            __VA_ARGS__;                                                       \
        }                                                                      \
        expect_status(f, status, #__VA_ARGS__, needles);                       \
    } while (0)
#define CASE(status, needles, ...)                                             \
    CASE_FROM(fx_reset, status, needles, __VA_ARGS__)
#define CASE_MIN(status, needles, ...)                                         \
    CASE_FROM(fx_minimal, status, needles, __VA_ARGS__)

/* ------------------------------------------------------------------------ */

static void test_baseline_ok(void **state)
{
    fx *f = *state;
    CASE(SDPA_OK, NULL, (void)0);
    CASE_MIN(SDPA_OK, NULL, (void)0);
    /* After an error, a successful call clears the message. */
    CASE(SDPA_ERR_BAD_SCALE, NEEDLES("scale"), f->a.scale = -1.0);
    CASE(SDPA_OK, NULL, (void)0);
}

static void test_null_pointer(void **state)
{
    fx *f = *state;
    fx_reset(f);
    fill_outputs(f);
    assert_int_equal(sdpa_forward(NULL, &f->a), SDPA_ERR_NULL_POINTER);
    check_untouched(f, "sdpa_forward(NULL, args)");
    const char *m = sdpa_ctx_last_error(NULL);
    assert_non_null(m);
    assert_true(strlen(m) > 0);
    assert_int_equal(sdpa_forward(f->ctx, NULL), SDPA_ERR_NULL_POINTER);
    check_message_any(sdpa_ctx_last_error(f->ctx), "args NULL",
                      NEEDLES("args", "NULL", "null"));
    CASE(SDPA_ERR_NULL_POINTER, NEEDLES("q"), f->a.q.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, NEEDLES("k"), f->a.k.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, NEEDLES("v"), f->a.v.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, NEEDLES("out"), f->a.out.data = NULL);
    CASE_MIN(SDPA_ERR_NULL_POINTER, NEEDLES("out"), f->a.out.data = NULL);

    size_t bytes = 7;
    fx_reset(f);
    assert_int_equal(sdpa_forward_workspace(f->ctx, &f->a, NULL),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(sdpa_forward_workspace(NULL, &f->a, &bytes),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(sdpa_forward_workspace(f->ctx, NULL, &bytes),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(bytes, 7);

    assert_int_equal(sdpa_ctx_create(NULL), SDPA_ERR_NULL_POINTER);
    counting_alloc ca;
    sdpa_allocator al = ca_start(&ca, -1);
    assert_int_equal(sdpa_ctx_create_with_allocator(NULL, &al),
                     SDPA_ERR_NULL_POINTER);
    sdpa_ctx *c = (sdpa_ctx *)&ca; /* must be reset to NULL */
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, NULL),
                     SDPA_ERR_NULL_POINTER);
    assert_null(c);
    al.alloc = NULL;
    c = (sdpa_ctx *)&ca;
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al),
                     SDPA_ERR_NULL_POINTER);
    assert_null(c);
    al = ca_allocator(&ca);
    al.free = NULL;
    c = (sdpa_ctx *)&ca;
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al),
                     SDPA_ERR_NULL_POINTER);
    assert_null(c);
    assert_int_equal(ca.allocs, 0);

    int64_t v = 99;
    assert_int_equal(sdpa_ctx_set_int(NULL, SDPA_OPT_NUM_THREADS, 1),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(sdpa_ctx_get_int(NULL, SDPA_OPT_NUM_THREADS, &v),
                     SDPA_ERR_NULL_POINTER);
    assert_int_equal(v, 99);
    assert_int_equal(sdpa_ctx_get_int(f->ctx, SDPA_OPT_NUM_THREADS, NULL),
                     SDPA_ERR_NULL_POINTER);
    sdpa_ctx_destroy(NULL); /* accepted */
}

static void test_struct_size(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_STRUCT_SIZE, NEEDLES("struct_size", "size"),
         f->a.struct_size = 0);
    CASE(SDPA_ERR_STRUCT_SIZE, NEEDLES("struct_size", "size"),
         f->a.struct_size = 624 - 8); /* below 1.0's frozen size */
    CASE(SDPA_ERR_STRUCT_SIZE, NEEDLES("struct_size", "size"),
         f->a.struct_size = 1);

    counting_alloc ca;
    sdpa_allocator al = ca_start(&ca, -1);
    al.struct_size = 0;
    sdpa_ctx *c = (sdpa_ctx *)&ca;
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al),
                     SDPA_ERR_STRUCT_SIZE);
    assert_null(c);
    assert_int_equal(ca.allocs, 0);
}

/* A newer caller's larger struct: accepted only when the tail is zero. */
typedef struct args_v2 {
    sdpa_forward_args a;
    unsigned char tail[24];
} args_v2;

static void test_struct_tail(void **state)
{
    fx *f = *state;
    for (int pos = 0; pos < 24; pos += 23) {
        fx_reset(f);
        args_v2 big;
        memset(&big, 0, sizeof big);
        big.a = f->base;
        big.a.struct_size = sizeof(sdpa_forward_args) + 24;
        big.tail[pos] = 1;
        fill_outputs(f);
        assert_int_equal(sdpa_forward(f->ctx, &big.a), SDPA_ERR_STRUCT_TAIL);
        check_message_any(sdpa_ctx_last_error(f->ctx), "tail",
                          NEEDLES("struct_size", "tail", "size"));
        check_untouched(f, "nonzero tail");
        size_t bytes = 0;
        assert_int_equal(sdpa_forward_workspace(f->ctx, &big.a, &bytes),
                         SDPA_ERR_STRUCT_TAIL);
        /* The same, zero tail: OK. */
        big.tail[pos] = 0;
        assert_int_equal(sdpa_forward(f->ctx, &big.a), SDPA_OK);
        assert_string_equal(sdpa_ctx_last_error(f->ctx), "");
    }
    /* An allocator struct with a nonzero tail. */
    struct {
        sdpa_allocator a;
        unsigned char tail[8];
    } al;
    counting_alloc ca;
    memset(&al, 0, sizeof al);
    al.a = ca_start(&ca, -1);
    al.a.struct_size = sizeof(sdpa_allocator) + 8;
    al.tail[3] = 9;
    sdpa_ctx *c = (sdpa_ctx *)&ca;
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al.a),
                     SDPA_ERR_STRUCT_TAIL);
    assert_null(c);
    al.tail[3] = 0;
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al.a), SDPA_OK);
    assert_non_null(c);
    sdpa_ctx_destroy(c);
    assert_int_equal(ca.allocs, ca.frees);
}

static void test_bad_dtype(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_BAD_DTYPE, NEEDLES("dtype"), f->a.dtype = 0);
    CASE(SDPA_ERR_BAD_DTYPE, NEEDLES("dtype"), f->a.dtype = 5);
    CASE(SDPA_ERR_BAD_DTYPE, NEEDLES("dtype"), f->a.dtype = -1);
    /* 1.1: the storage types of k/v and bias; float64 mixes with nothing */
    CASE(SDPA_ERR_BAD_DTYPE, NEEDLES("kv_dtype 9"), f->a.kv_dtype = 9);
    CASE(SDPA_ERR_BAD_DTYPE, NEEDLES("bias_dtype -3"), f->a.bias_dtype = -3);
    CASE(SDPA_ERR_BAD_DTYPE, NEEDLES("mix SDPA_FLOAT64"),
         f->a.kv_dtype =
             f->a.dtype == SDPA_FLOAT64 ? SDPA_FLOAT16 : SDPA_FLOAT64);
}

static void test_bad_dim(void **state)
{
    fx *f = *state;
    /* Consistent non-positive extents (so no mismatch is involved). */
    CASE_MIN(SDPA_ERR_BAD_DIM, NEEDLES("Tq", "q", "out", "dim"),
             f->a.q.shape[2] = 0;
             f->a.out.shape[2] = 0);
    CASE_MIN(SDPA_ERR_BAD_DIM, NEEDLES("Dk", "q", "k", "dim"),
             f->a.q.shape[3] = 0;
             f->a.k.shape[3] = 0);
    CASE_MIN(SDPA_ERR_BAD_DIM, NEEDLES("Tk", "k", "v", "dim"),
             f->a.k.shape[2] = 0;
             f->a.v.shape[2] = 0);
    CASE_MIN(SDPA_ERR_BAD_DIM, NEEDLES("Dv", "v", "out", "dim"),
             f->a.v.shape[3] = 0;
             f->a.out.shape[3] = 0);
    CASE_MIN(SDPA_ERR_BAD_DIM, NEEDLES("Hq", "q", "out", "dim", "head"),
             f->a.q.shape[1] = -4;
             f->a.out.shape[1] = -4);
    CASE_MIN(SDPA_ERR_BAD_DIM, NEEDLES("Hkv", "k", "v", "dim", "head"),
             f->a.k.shape[1] = 0;
             f->a.v.shape[1] = 0);
    CASE_MIN(
        SDPA_ERR_BAD_DIM, NEEDLES("N", "q", "k", "v", "out", "dim", "batch"),
        f->a.q.shape[0] = -1;
        f->a.k.shape[0] = -1; f->a.v.shape[0] = -1; f->a.out.shape[0] = -1);
    CASE_MIN(SDPA_ERR_BAD_DIM,
             NEEDLES("N", "q", "k", "v", "out", "dim", "batch"),
             f->a.q.shape[0] = 0;
             f->a.k.shape[0] = 0; f->a.v.shape[0] = 0; f->a.out.shape[0] = 0);
    CASE_MIN(SDPA_ERR_BAD_DIM, NEEDLES("Dk", "dim", "q", "k"),
             f->a.q.shape[3] = INT64_MIN;
             f->a.k.shape[3] = INT64_MIN);
}

/* A mask that allows every key, for any shape the fixture's mask has. */
static const uint8_t all_allowed[N_ * HQ * TQ * TK];

static void test_shape_mismatch(void **state)
{
    fx *f = *state;
    /* Every case keeps strides valid (a smaller extent), so that only the
     * disagreement between tensors is wrong. */
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("k", "q"), f->a.k.shape[3] = DK - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("q", "k"), f->a.q.shape[3] = DK - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("v", "k"), f->a.v.shape[2] = TK - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("v", "k"), f->a.v.shape[1] = 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("out"), f->a.out.shape[3] = DV - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("out"), f->a.out.shape[2] = TQ - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("out"), f->a.out.shape[1] = HQ - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("out"), f->a.out.shape[0] = 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("mask"), f->a.mask.shape[3] = TK - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("mask"), f->a.mask.shape[1] = 3);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("mask"), f->a.mask.shape[2] = 2);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("bias"), f->a.bias.shape[1] = 2);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("bias"), f->a.bias.shape[3] = TK - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("weights"),
         f->a.weights.shape[3] = TK - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("weights"),
         f->a.weights.shape[2] = TQ - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("weights"),
         f->a.weights.shape[0] = 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("lse"), f->a.lse.shape[2] = TQ - 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, NEEDLES("lse"), f->a.lse.shape[1] = 1);
    /* Mask and bias broadcast over keys too (extent 1). */
    CASE(SDPA_OK, NULL, f->a.mask.shape[3] = 1;
         f->a.mask.data = (void *)(uintptr_t)all_allowed);
    CASE(SDPA_OK, NULL, f->a.bias.shape[3] = 1);
    /* N disagrees: q and out say 1, k and v say 2 (no stride 0). */
    CASE_MIN(SDPA_ERR_SHAPE_MISMATCH,
             NEEDLES("q", "k", "v", "out", "N", "batch"), f->a.q.shape[0] = 1;
             f->a.out.shape[0] = 1);
}

static void test_bad_stride(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("q"), f->a.q.stride[3] = 2);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("k"), f->a.k.stride[3] = 0);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("v"), f->a.v.stride[3] = -1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("q"), f->a.q.stride[0] = -1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("v"), f->a.v.stride[1] = -DV);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("k"), f->a.k.stride[2] = -DK);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("q"), f->a.q.stride[2] = DK - 1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("v"), f->a.v.stride[2] = DV - 1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("out"), f->a.out.stride[2] = DV - 1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("out"), f->a.out.stride[3] = 2);
    /* Outputs that overlap themselves. */
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("out"), f->a.out.stride[1] = 0);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("out"), f->a.out.stride[0] = 0);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("weights"), f->a.weights.stride[2] = 0);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("weights"),
         f->a.weights.stride[2] = TK - 1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("lse"), f->a.lse.stride[2] = 0);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("lse"), f->a.lse.stride[1] = -1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("mask"), f->a.mask.stride[3] = -1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("mask"), f->a.mask.stride[0] = -1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("bias"), f->a.bias.stride[3] = -1);
    CASE(SDPA_ERR_BAD_STRIDE, NEEDLES("bias"), f->a.bias.stride[2] = -TK);
    /* Mask and bias are never BLAS operands: any non-negative key stride,
     * 0 included (a key-broadcast mask; test_properties checks values). */
    CASE(SDPA_OK, NULL, f->a.mask.stride[3] = 0;
         f->a.mask.data = (void *)(uintptr_t)all_allowed);
    CASE(SDPA_OK, NULL, f->a.bias.stride[3] = 0);
    /* The one stride that is ignored: lse's innermost, whatever its sign. */
    CASE(SDPA_OK, NULL, f->a.lse.stride[3] = 12345);
    CASE(SDPA_OK, NULL, f->a.lse.stride[3] = -1);
}

static void test_overlap(void **state)
{
    fx *f = *state;
    const size_t es = f->q.esize;
    char *ar = f->arena;
    /* q lives in the arena; out starts inside it. */
    CASE(SDPA_ERR_OVERLAP, NEEDLES("out"),
         memcpy(ar, f->q.mem, f->q.elems * es);
         f->a.q.data = ar; f->a.out.data = ar + 10 * es);
    CASE(SDPA_ERR_OVERLAP, NEEDLES("out"),
         memcpy(ar, f->q.mem, f->q.elems * es);
         f->a.q.data = ar; f->a.out.data = ar);
    /* out overlapping k, v, bias, mask. */
    CASE(SDPA_ERR_OVERLAP, NEEDLES("out"),
         memcpy(ar, f->k.mem, f->k.elems * es);
         f->a.k.data = ar; f->a.out.data = ar + 3 * es);
    CASE(SDPA_ERR_OVERLAP, NEEDLES("out"),
         memcpy(ar + 64 * es, f->v.mem, f->v.elems * es);
         f->a.v.data = ar + 64 * es; f->a.out.data = ar);
    CASE(SDPA_ERR_OVERLAP, NEEDLES("out", "bias"),
         memcpy(ar, f->bias.mem, f->bias.elems * es);
         f->a.bias.data = ar; f->a.out.data = ar + es);
    CASE(SDPA_ERR_OVERLAP, NEEDLES("out", "mask"),
         memcpy(ar + 8, f->mask.mem, f->mask.elems);
         f->a.mask.data = ar + 8; f->a.out.data = ar);
    /* Outputs overlapping each other. */
    CASE(SDPA_ERR_OVERLAP, NEEDLES("weights"),
         f->a.weights.data = (char *)f->out.mem + 5 * es);
    CASE(SDPA_ERR_OVERLAP, NEEDLES("lse"),
         f->a.lse.data = (char *)f->w.mem + 7 * es);
    CASE(SDPA_ERR_OVERLAP, NEEDLES("lse"), f->a.lse.data = f->out.mem);
    CASE(SDPA_ERR_OVERLAP, NEEDLES("weights", "q"),
         memcpy(ar, f->q.mem, f->q.elems * es);
         f->a.q.data = ar; f->a.weights.data = ar + es);
    /* Control: disjoint outputs in one buffer are fine. */
    fx_reset(f);
    f->a.out.data = ar;
    f->a.weights.data = ar + (size_t)(N_ * HQ * TQ * DV) * es;
    f->a.lse.data = ar + (size_t)(N_ * HQ * TQ * (DV + TK)) * es;
    assert_int_equal(sdpa_forward(f->ctx, &f->a), SDPA_OK);
}

static void test_overflow(void **state)
{
    fx *f = *state;
    const int64_t BIG = (int64_t)1 << 40;
    /* Element spans that overflow int64 / size_t: tiny buffers, huge views;
     * the call must fail before touching memory. */
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("q", "overflow"),
             f->a.q.stride[0] = INT64_MAX / 2);
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("q", "overflow"),
             f->a.q.stride[1] = INT64_MAX / 2);
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("k", "overflow"),
             f->a.k.stride[0] = INT64_MAX);
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("out", "overflow"),
             f->a.out.stride[0] = INT64_MAX / 2);
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("v", "overflow"),
             f->a.v.stride[1] = (int64_t)1 << 62);
    /* Tq = Tk = 2^40 rows of Dk = 2^40: spans overflow. */
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("q", "overflow", "Tq"),
             f->a.q.shape[2] = BIG;
             f->a.out.shape[2] = BIG; f->a.q.shape[3] = BIG;
             f->a.k.shape[3] = BIG; f->a.q.stride[2] = BIG;
             f->a.q.stride[1] = (int64_t)1 << 62;
             f->a.q.stride[0] = (int64_t)1 << 62; f->a.k.stride[2] = BIG;
             f->a.k.stride[1] = BIG * 8; f->a.k.stride[0] = BIG * 16);
    /* Extents that fit size_t but not the BLAS int: Dk = 2^40 (gemm K and
     * leading dimensions), a row stride of 2^31, Tq = 2^40 (gemm M). */
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("Dk", "q", "k", "overflow", "int"),
             f->a.q.shape[3] = BIG;
             f->a.k.shape[3] = BIG; f->a.q.stride[2] = BIG;
             f->a.q.stride[1] = BIG * 4; f->a.q.stride[0] = BIG * 16;
             f->a.k.stride[2] = BIG; f->a.k.stride[1] = BIG * 8;
             f->a.k.stride[0] = BIG * 16);
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("q", "stride", "overflow", "int"),
             f->a.q.stride[2] = (int64_t)1 << 31;
             f->a.q.stride[1] = ((int64_t)1 << 31) * 4;
             f->a.q.stride[0] = ((int64_t)1 << 31) * 16);
    CASE_MIN(SDPA_ERR_OVERFLOW, NEEDLES("q", "Tq", "overflow", "int"),
             f->a.q.shape[2] = BIG;
             f->a.out.shape[2] = BIG; f->a.q.stride[1] = BIG * DK;
             f->a.q.stride[0] = BIG * DK * HQ; f->a.out.stride[1] = BIG * DV;
             f->a.out.stride[0] = BIG * DV * HQ);
}

/* A view of shape {n, h, t, d} at a made-up address, never dereferenced:
 * the calls below must refuse before touching memory. */
static sdpa_tensor fake_view(uintptr_t at, int64_t n, int64_t h, int64_t t,
                             int64_t d, int64_t sn, int64_t sh, int64_t st)
{
    sdpa_tensor x = {(void *)at, {n, h, t, d}, {sn, sh, st, 1}};
    return x;
}

/* Shapes that pass validation (stride-0 inputs, huge N or heads) but whose
 * work or scratch does not fit: sdpa_forward_workspace and sdpa_forward
 * report SDPA_ERR_OVERFLOW (the plan once wrapped around, undefined
 * behaviour that UBSan reports, giving "0 bytes" or a wrong size). */
static void test_work_overflow(void **state)
{
    fx *f = *state;
    const int64_t P29 = (int64_t)1 << 29, P30 = (int64_t)1 << 30;
    const int64_t P33 = (int64_t)1 << 33, P40 = (int64_t)1 << 40;
    const uintptr_t in = (uintptr_t)1 << 40, outp = (uintptr_t)1 << 62;
    struct {
        const char *what;
        int64_t n, hq, hkv, tk, dk, block_k;
        int path;
    } cases[] = {
        /* tiled: 2^40 query heads per KV head stacked into one gemm */
        {"GQA group 2^40, Dk 2^30", 1, P40, 1, 64, P30, 0, SDPA_PATH_AUTO},
        /* decode: N · Hkv · chunks = 2^29 · 2^29 · 2^11 work items */
        {"decode N = H = 2^29", P29, P29, P29, (int64_t)1 << 20, 1, 0,
         SDPA_PATH_AUTO},
        /* forced decode, 1-key chunks: 2^33 · (2^31 − 1) work items */
        {"decode H 2^33, 1-key chunks", 1, P33, P33, INT32_MAX, 1, 1,
         SDPA_PATH_DECODE},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
        a.dtype = f->a.dtype;
        int64_t n = cases[c].n, hq = cases[c].hq, hkv = cases[c].hkv;
        int64_t tk = cases[c].tk, dk = cases[c].dk;
        a.q = fake_view(in, n, hq, 1, dk, 0, 0, 0);
        a.k = fake_view(in, n, hkv, tk, dk, 0, 0, dk);
        a.v = fake_view(in, n, hkv, tk, 1, 0, 0, 1);
        a.out = fake_view(outp, n, hq, 1, 1, hq, 1, 1);
        assert_int_equal(
            sdpa_ctx_set_int(f->ctx, SDPA_OPT_BLOCK_K, cases[c].block_k),
            SDPA_OK);
        assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_PATH, cases[c].path),
                         SDPA_OK);
        size_t bytes = 12345;
        int ws = sdpa_forward_workspace(f->ctx, &a, &bytes);
        if (ws != SDPA_ERR_OVERFLOW)
            print_error("%s: workspace gave %d (%s), %zu bytes\n",
                        cases[c].what, ws, sdpa_ctx_last_error(f->ctx), bytes);
        assert_int_equal(ws, SDPA_ERR_OVERFLOW);
        assert_int_equal(bytes, 12345);
        check_message_any(sdpa_ctx_last_error(f->ctx), cases[c].what,
                          NEEDLES("overflow"));
        assert_int_equal(sdpa_forward(f->ctx, &a), SDPA_ERR_OVERFLOW);
    }
    assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_BLOCK_K, 0), SDPA_OK);
    assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_PATH, SDPA_PATH_AUTO),
                     SDPA_OK);
}

static void test_bad_scale(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_BAD_SCALE, NEEDLES("scale"), f->a.scale = -1.0);
    CASE(SDPA_ERR_BAD_SCALE, NEEDLES("scale"), f->a.scale = NAN);
    CASE(SDPA_ERR_BAD_SCALE, NEEDLES("scale"), f->a.scale = INFINITY);
    CASE(SDPA_ERR_BAD_SCALE, NEEDLES("scale"), f->a.scale = -INFINITY);
    CASE(SDPA_ERR_BAD_SCALE, NEEDLES("scale"), f->a.scale = -1e-300);
    CASE(SDPA_OK, NULL, f->a.scale = 1.0);
    /* Positive but below what float32 holds: rounds to 0 there (the fuzzer's
     * finding F1: a BLAS alpha of 0 never read q and k). */
    CASE(f->a.dtype == SDPA_FLOAT32 ? SDPA_ERR_BAD_SCALE : SDPA_OK,
         NEEDLES("scale", "float32"), f->a.scale = 1e-300);
    CASE(SDPA_OK, NULL, f->a.scale = 1e-40); /* a float subnormal */
    /* Finite doubles beyond the compute type: float32 cannot hold them. */
    CASE(f->a.dtype == SDPA_FLOAT32 ? SDPA_ERR_BAD_SCALE : SDPA_OK,
         NEEDLES("scale", "float32"), f->a.scale = 1e39);
}

static void test_bad_softcap(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_BAD_SOFTCAP, NEEDLES("cap"), f->a.softcap = -1.0);
    CASE(SDPA_ERR_BAD_SOFTCAP, NEEDLES("cap"), f->a.softcap = NAN);
    CASE(SDPA_ERR_BAD_SOFTCAP, NEEDLES("cap"), f->a.softcap = INFINITY);
    CASE(SDPA_ERR_BAD_SOFTCAP, NEEDLES("cap"), f->a.softcap = -INFINITY);
    CASE(SDPA_OK, NULL, f->a.softcap = 30.0);
    CASE(f->a.dtype == SDPA_FLOAT32 ? SDPA_ERR_BAD_SOFTCAP : SDPA_OK,
         NEEDLES("softcap", "float32"), f->a.softcap = 1e300);
    CASE(SDPA_OK, NULL, f->a.softcap = FLT_MAX);
    CASE(f->a.dtype == SDPA_FLOAT32 ? SDPA_ERR_BAD_SOFTCAP : SDPA_OK,
         NEEDLES("softcap", "float32"), f->a.softcap = 1e-300);
}

static void test_bad_dropout(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_BAD_DROPOUT, NEEDLES("dropout_p", "[0, 1)"),
         f->a.dropout_p = -0.5);
    CASE(SDPA_ERR_BAD_DROPOUT, NEEDLES("dropout_p", "[0, 1)"),
         f->a.dropout_p = 1.0);
    CASE(SDPA_ERR_BAD_DROPOUT, NEEDLES("dropout_p"), f->a.dropout_p = NAN);
    CASE(SDPA_ERR_BAD_DROPOUT, NEEDLES("dropout_p"), f->a.dropout_p = INFINITY);
    CASE(SDPA_OK, NULL, f->a.dropout_p = 0.5; f->a.dropout_seed = 7);
    CASE(f->a.dtype == SDPA_FLOAT32 ? SDPA_ERR_BAD_DROPOUT : SDPA_OK,
         NEEDLES("dropout_p", "rounds to 1"), f->a.dropout_p = 1 - 1e-12);
}

/* The FP8 scales (1.2): only with an FP8 kv_dtype, finite and above 0;
 * a block type's rows are whole blocks of 32 (this fixture's Dk is 4). */
static void test_bad_kv_scale(void **state)
{
    fx *f = *state;
    static const float one[HKV] = {1, 1}, nan1[HKV] = {1, NAN};
    static const float zero0[HKV] = {0, 1}, inf1[HKV] = {2, INFINITY};
    const bool f32 = f->a.dtype == SDPA_FLOAT32;
    CASE(SDPA_ERR_BAD_KV_SCALE, NEEDLES("k_scale", "FP8"), f->a.k_scale = one);
    CASE(SDPA_ERR_BAD_KV_SCALE, NEEDLES("v_scale", "FP8"), f->a.v_scale = one);
    CASE(f32 ? SDPA_ERR_BAD_KV_SCALE : SDPA_ERR_BAD_DTYPE,
         NEEDLES("k_scale[1] (KV head 1) is nan", "mix SDPA_FLOAT64"),
         f->a.kv_dtype = SDPA_FP8_E4M3;
         f->a.k_scale = nan1);
    CASE(f32 ? SDPA_ERR_BAD_KV_SCALE : SDPA_ERR_BAD_DTYPE,
         NEEDLES("v_scale[0] (KV head 0) is 0", "mix SDPA_FLOAT64"),
         f->a.kv_dtype = SDPA_FP8_E5M2;
         f->a.v_scale = zero0);
    CASE(f32 ? SDPA_ERR_BAD_KV_SCALE : SDPA_ERR_BAD_DTYPE,
         NEEDLES("k_scale[1] (KV head 1) is inf", "mix SDPA_FLOAT64"),
         f->a.kv_dtype = SDPA_FP8_E5M2;
         f->a.k_scale = inf1);
    CASE(f32 ? SDPA_ERR_BAD_DIM : SDPA_ERR_BAD_DTYPE,
         NEEDLES("k.shape[3] is 4, not a multiple of 32", "mix SDPA_FLOAT64"),
         f->a.kv_dtype = SDPA_Q4_0);
}

static void test_head_grouping(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_HEAD_GROUPING, NEEDLES("Hq", "Hkv", "head"),
         f->a.k.shape[1] = 3;
         f->a.v.shape[1] = 3);
    CASE(SDPA_ERR_HEAD_GROUPING, NEEDLES("Hq", "Hkv", "head"),
         f->a.k.shape[1] = 8;
         f->a.v.shape[1] = 8);
    CASE_MIN(SDPA_ERR_HEAD_GROUPING, NEEDLES("Hq", "Hkv", "head"),
             f->a.q.shape[1] = 3;
             f->a.out.shape[1] = 3);
}

static void test_bad_kv_len(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_BAD_KV_LEN, NEEDLES("kv_lens[1]"), f->kv_lens[1] = -1);
    CASE(SDPA_ERR_BAD_KV_LEN, NEEDLES("kv_lens[1]"), f->kv_lens[1] = TK + 1);
    CASE(SDPA_ERR_BAD_KV_LEN, NEEDLES("kv_lens[0]"), f->kv_lens[0] = INT64_MAX);
    CASE(SDPA_ERR_BAD_KV_LEN, NEEDLES("kv_lens[0]"), f->kv_lens[0] = INT64_MIN);
    /* Bounds themselves are fine (0 needs the ZERO policy). */
    CASE(SDPA_OK, NULL, f->kv_lens[1] = TK);
    CASE(SDPA_OK, NULL, f->kv_lens[1] = 0;
         assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_EMPTY_ROWS,
                                           SDPA_EMPTY_ROWS_ZERO),
                          SDPA_OK));
}

static void test_bad_causal(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_BAD_CAUSAL, NEEDLES("causal"), f->a.causal = 3);
    CASE(SDPA_ERR_BAD_CAUSAL, NEEDLES("causal"), f->a.causal = -1);
    CASE(SDPA_ERR_BAD_CAUSAL, NEEDLES("causal"), f->a.causal = 99);
}

static void test_bad_flags(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_BAD_FLAGS, NEEDLES("flag"), f->a.flags = 1u << 5);
    CASE(SDPA_ERR_BAD_FLAGS, NEEDLES("flag"), f->a.flags = 1u << 2);
    CASE(SDPA_ERR_BAD_FLAGS, NEEDLES("flag"), f->a.flags = 1u << 31);
    CASE(SDPA_ERR_BAD_FLAGS, NEEDLES("flag"),
         f->a.flags = SDPA_FLAG_MASK_NONZERO_ALLOWS | (1u << 7));
}

static void test_unknown_option(void **state)
{
    fx *f = *state;
    static const int ids[] = {0, 999, 8, 1000, -1, 12345};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; ++i) {
        char num[32];
        snprintf(num, sizeof num, "%d", ids[i]);
        assert_int_equal(sdpa_ctx_set_int(f->ctx, ids[i], 1),
                         SDPA_ERR_UNKNOWN_OPTION);
        check_message_any(sdpa_ctx_last_error(f->ctx), "set unknown option",
                          NEEDLES(num, "option"));
        int64_t v = 77;
        assert_int_equal(sdpa_ctx_get_int(f->ctx, ids[i], &v),
                         SDPA_ERR_UNKNOWN_OPTION);
        assert_int_equal(v, 77);
        check_message_any(sdpa_ctx_last_error(f->ctx), "get unknown option",
                          NEEDLES(num, "option"));
    }
}

static void test_bad_option_value(void **state)
{
    fx *f = *state;
    struct {
        int opt;
        int64_t good, bad;
    } cases[] = {
        {SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO, 2},
        {SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO, -1},
        {SDPA_OPT_NUM_THREADS, 2, 0},
        {SDPA_OPT_NUM_THREADS, 2, 257},
        {SDPA_OPT_NUM_THREADS, 2, -2}, /* -1 is SDPA_NUM_THREADS_ALL */
        {SDPA_OPT_KERNEL, SDPA_KERNEL_PORTABLE, 7},
        {SDPA_OPT_KERNEL, SDPA_KERNEL_PORTABLE, -1},
        {SDPA_OPT_PATH, SDPA_PATH_MATERIALISED, 9},
        {SDPA_OPT_PATH, SDPA_PATH_MATERIALISED, -1},
        {SDPA_OPT_SCRATCH_LIMIT, 1 << 20, -1},
        {SDPA_OPT_BLOCK_Q, 0, -1},
        {SDPA_OPT_BLOCK_K, 0, -1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        assert_int_equal(sdpa_ctx_set_int(f->ctx, cases[i].opt, cases[i].good),
                         SDPA_OK);
        assert_int_equal(sdpa_ctx_set_int(f->ctx, cases[i].opt, cases[i].bad),
                         SDPA_ERR_BAD_OPTION_VALUE);
        check_message_any(sdpa_ctx_last_error(f->ctx), "bad option value",
                          NEEDLES(NULL));
        int64_t v = -99;
        assert_int_equal(sdpa_ctx_get_int(f->ctx, cases[i].opt, &v), SDPA_OK);
        /* The option keeps its value. */
        assert_int_equal(v, cases[i].good);
    }
    /* Back to defaults for the other tests. */
    assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_NUM_THREADS, 1),
                     SDPA_OK);
    assert_int_equal(
        sdpa_ctx_set_int(f->ctx, SDPA_OPT_KERNEL, SDPA_KERNEL_AUTO), SDPA_OK);
    assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_SCRATCH_LIMIT, 0),
                     SDPA_OK);
}

/* Messages name what disagrees and what is wrong by the names the header
 * uses; checked word for word for one case of each kind. */
static void test_message_text(void **state)
{
    fx *f = *state;
    fx_reset(f);
    f->a.mask.data = NULL;
    f->a.bias.data = NULL;
    f->a.weights.data = NULL;
    f->a.q.shape[2] = TQ - 1; /* q says Tq = 2, out still has 3 rows */
    fill_outputs(f);
    assert_int_equal(sdpa_forward(f->ctx, &f->a), SDPA_ERR_SHAPE_MISMATCH);
    assert_string_equal(sdpa_ctx_last_error(f->ctx),
                        "sdpa_forward: out.shape[2] is 3, but q.shape[2] "
                        "(Tq) is 2: they must agree");
    check_untouched(f, "q with a wrong Tq");

    assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_NUM_THREADS, 0),
                     SDPA_ERR_BAD_OPTION_VALUE);
    assert_string_equal(sdpa_ctx_last_error(f->ctx),
                        "sdpa_ctx_set_int: SDPA_OPT_NUM_THREADS takes values "
                        "in [1, 256] or SDPA_NUM_THREADS_ALL (-1), got 0");
    /* The overlap rules are conservative and say so: an output whose
     * elements are distinct but whose sorted strides do not step past each
     * other; views of one buffer with the same strides are told apart
     * element by element (out and lse interleaved: accepted; lse one row
     * further: it shares elements), others by their address ranges. */
    double buf[32] = {0}, qkv[6] = {1, 2, 3, 4, 5, 6};
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT64;
    a.q = sdpa_tensor_bhtd(qkv, 1, 2, 3, 1);
    a.k = sdpa_tensor_bhtd(qkv, 1, 2, 3, 1);
    a.v = sdpa_tensor_bhtd(qkv, 1, 2, 3, 1);
    a.out = (sdpa_tensor){buf, {1, 2, 3, 1}, {16, 3, 2, 1}};
    assert_int_equal(sdpa_forward(f->ctx, &a), SDPA_ERR_BAD_STRIDE);
    assert_string_equal(sdpa_ctx_last_error(f->ctx),
                        "sdpa_forward: output out has strides {16, 3, 2, 1}: "
                        "sorted, each must step past all the smaller ones "
                        "cover (the layouts libsdpa can prove write no "
                        "element twice)");
    a.out = (sdpa_tensor){buf, {1, 2, 3, 1}, {12, 6, 2, 1}};
    a.lse = (sdpa_tensor){buf + 1, {1, 2, 3, 1}, {12, 6, 2, 1}};
    assert_int_equal(sdpa_forward(f->ctx, &a), SDPA_OK);
    a.lse = (sdpa_tensor){buf + 2, {1, 2, 3, 1}, {12, 6, 2, 1}};
    assert_int_equal(sdpa_forward(f->ctx, &a), SDPA_ERR_OVERLAP);
    assert_string_equal(sdpa_ctx_last_error(f->ctx),
                        "sdpa_forward: output lse overlaps output out (they "
                        "share an element, or views of different strides or "
                        "element sizes share address ranges)");
    /* odd elements as well, but another head stride: not proven */
    a.lse = (sdpa_tensor){buf + 1, {1, 2, 3, 1}, {12, 8, 2, 1}};
    assert_int_equal(sdpa_forward(f->ctx, &a), SDPA_ERR_OVERLAP);
    a.lse = (sdpa_tensor){buf + 12, {1, 2, 3, 1}, {6, 3, 1, 1}};
    assert_int_equal(sdpa_forward(f->ctx, &a), SDPA_OK);

    assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_BLOCK_K, -3),
                     SDPA_ERR_BAD_OPTION_VALUE);
    assert_string_equal(sdpa_ctx_last_error(f->ctx),
                        "sdpa_ctx_set_int: SDPA_OPT_BLOCK_K takes values in "
                        "[0, 1048576], got -3");
}

static void test_option_defaults(void **state)
{
    sdpa_ctx *c = NULL;
    (void)state;
    assert_int_equal(sdpa_ctx_create(&c), SDPA_OK);
    int64_t v = -1;
    assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_EMPTY_ROWS, &v), SDPA_OK);
    assert_int_equal(v, SDPA_EMPTY_ROWS_ERROR);
    assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_NUM_THREADS, &v), SDPA_OK);
    assert_int_equal(v, 1);
    assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_PATH, &v), SDPA_OK);
    assert_int_equal(v, SDPA_PATH_AUTO);
    assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_SCRATCH_LIMIT, &v), SDPA_OK);
    assert_int_equal(v, 0);
    /* KERNEL reports what AUTO resolves to: a concrete kernel. */
    assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_KERNEL, &v), SDPA_OK);
    assert_true(v == SDPA_KERNEL_PORTABLE || v == SDPA_KERNEL_AVX2 ||
                v == SDPA_KERNEL_AVX512);
    assert_string_equal(sdpa_ctx_last_error(c), "");
    sdpa_ctx_destroy(c);
}

/* Every key of (batch 1, head 3, row 2) forbidden, four different ways. */
static void test_fully_masked_row(void **state)
{
    fx *f = *state;
    CASE(SDPA_ERR_FULLY_MASKED_ROW, NEEDLES("row"),
         for (int j = 0; j < TK; ++j) tset(&f->mask, 1, 3, 2, j, 1);
         memcpy(f->in_copy[3], f->mask.mem, f->mask.elems));
    const char *m = sdpa_ctx_last_error(f->ctx);
    assert_non_null(strstr(m, "1"));
    assert_non_null(strstr(m, "3"));
    assert_non_null(strstr(m, "2"));
    assert_non_null(strstr(m, "batch"));
    assert_non_null(strstr(m, "head"));
    /* With the ZERO policy the same call succeeds. */
    fx_reset(f);
    assert_int_equal(
        sdpa_ctx_set_int(f->ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO),
        SDPA_OK);
    assert_int_equal(sdpa_forward(f->ctx, &f->a), SDPA_OK);
    for (int j = 0; j < TK; ++j)
        tset(&f->mask, 1, 3, 2, j, 0);
    memcpy(f->in_copy[3], f->mask.mem, f->mask.elems);

    /* kv_lens[1] = 0: every row of batch 1. */
    CASE(SDPA_ERR_FULLY_MASKED_ROW, NEEDLES("batch 1", "b=1", "batch=1", "1"),
         f->kv_lens[1] = 0);
    /* bias -inf over a whole row (bias broadcast over N: batch 0 first). */
    tbuf nb;
    tbuf_make(&nb, f->dtype, 1, HQ, TQ, TK, LAYOUT_BHTD, 0);
    for (int h = 0; h < HQ; ++h)
        for (int i = 0; i < TQ; ++i)
            for (int j = 0; j < TK; ++j)
                tset(&nb, 0, h, i, j, (h == 1 && i == 2) ? -INFINITY : 0.5);
    CASE(SDPA_ERR_FULLY_MASKED_ROW, NEEDLES("row"), f->a.bias = nb.t);
    tbuf_free(&nb);
    /* BOTTOM_RIGHT with L_1 = 1 < Tq = 3: rows 0 and 1 of batch 1 see no
     * key (j > i + 1 - 3). */
    CASE(SDPA_ERR_FULLY_MASKED_ROW, NEEDLES("row"),
         f->a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
         f->kv_lens[1] = 1);
    /* Mask inverted with an all-zero mask: nothing may be attended. */
    CASE(SDPA_ERR_FULLY_MASKED_ROW, NEEDLES("row"),
         f->a.flags = SDPA_FLAG_MASK_NONZERO_ALLOWS);
}

static void test_nonfinite(void **state)
{
    fx *f = *state;
    const double big = f->dtype == SDPA_FLOAT32 ? 1e30 : 1e200;
    double saved;
    saved = tget(&f->q, 0, 0, 0, 0);
    CASE(SDPA_ERR_NONFINITE, NULL, tset(&f->q, 0, 0, 0, 0, INFINITY));
    tset(&f->q, 0, 0, 0, 0, saved);
    saved = tget(&f->q, 1, 2, 1, 3);
    CASE(SDPA_ERR_NONFINITE, NULL, tset(&f->q, 1, 2, 1, 3, NAN));
    tset(&f->q, 1, 2, 1, 3, saved);
    /* NaN in a K row that is read (j < kv_lens[0]). */
    saved = tget(&f->k, 0, 1, 2, 1);
    CASE(SDPA_ERR_NONFINITE, NULL, tset(&f->k, 0, 1, 2, 1, NAN));
    tset(&f->k, 0, 1, 2, 1, saved);
    /* Overflow of the dot product to +inf. */
    double sq[DK], sk[DK];
    for (int d = 0; d < DK; ++d) {
        sq[d] = tget(&f->q, 0, 0, 0, d);
        sk[d] = tget(&f->k, 0, 0, 0, d);
    }
    CASE_MIN(
        SDPA_ERR_NONFINITE, NULL, for (int d = 0; d < DK; ++d) {
            tset(&f->q, 0, 0, 0, d, big);
            tset(&f->k, 0, 0, 0, d, big);
        });
    for (int d = 0; d < DK; ++d) {
        tset(&f->q, 0, 0, 0, d, sq[d]);
        tset(&f->k, 0, 0, 0, d, sk[d]);
    }
    /* Inputs restored: the baseline succeeds and is untouched. */
    CASE(SDPA_OK, NULL, (void)0);
    for (int i = 0; i < 5; ++i) {
        tbuf *t = inputs(f, i);
        assert_memory_equal(f->in_copy[i], t->mem, t->elems * t->esize);
    }
}

/* Outputs that would not be finite are an error, never a silent inf or
 * NaN (the fuzzer's finding F2): V values near the dtype's maximum whose
 * unnormalised sums overflow before the division by the row sum, and a NaN
 * in a V row that is read; on every path. Values at max / (2·Tk) are
 * fine. */
static void test_nonfinite_outputs(void **state)
{
    fx *f = *state;
    const int dt = f->dtype;
    const double huge = dt == SDPA_FLOAT32 ? 3e38 : 1.7e308;
    enum { TQ4 = 4, TK12 = 12 };
    double q[TQ4], k[TK12];
    for (int i = 0; i < TQ4; ++i)
        q[i] = 0.1 * i;
    for (int j = 0; j < TK12; ++j)
        k[j] = 0.05 * j;
    for (int variant = 0; variant < 3; ++variant)
        for (int path = SDPA_PATH_MATERIALISED; path <= SDPA_PATH_DECODE;
             ++path) {
            tbuf tq, tk, tv, to;
            tbuf_make(&tq, dt, 1, 1, TQ4, 1, LAYOUT_BHTD, 0);
            tbuf_make(&tk, dt, 1, 1, TK12, 1, LAYOUT_BHTD, 0);
            tbuf_make(&tv, dt, 1, 1, TK12, 1, LAYOUT_BHTD, 0);
            tbuf_make(&to, dt, 1, 1, TQ4, 1, LAYOUT_BHTD, 0);
            for (int i = 0; i < TQ4; ++i)
                tset(&tq, 0, 0, i, 0, q[i]);
            for (int j = 0; j < TK12; ++j) {
                tset(&tk, 0, 0, j, 0, k[j]);
                tset(&tv, 0, 0, j, 0, variant == 2 ? huge / (2 * TK12) : 1.0);
            }
            if (variant == 0) { /* two values near the maximum */
                tset(&tv, 0, 0, 3, 0, huge);
                tset(&tv, 0, 0, 7, 0, huge);
            } else if (variant == 1) { /* NaN at a key every row sees */
                tset(&tv, 0, 0, 5, 0, NAN);
            }
            sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
            a.dtype = dt;
            tp_views(&a, &tq, &tk, &tv, NULL, NULL, &to, NULL, NULL, NULL);
            assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_PATH, path),
                             SDPA_OK);
            int st = sdpa_forward(f->ctx, &a);
            if (variant < 2) {
                assert_int_equal(st, SDPA_ERR_NONFINITE);
                check_message_any(sdpa_ctx_last_error(f->ctx), "nonfinite",
                                  NEEDLES("NaN or infinite"));
            } else {
                assert_int_equal(st, SDPA_OK);
                for (int i = 0; i < TQ4; ++i) {
                    double o = tget(&to, 0, 0, i, 0);
                    assert_true(isfinite(o));
                    assert_true(fabs(o - huge / (2 * TK12)) <=
                                1e-5 * huge / (2 * TK12));
                }
            }
            tbuf_free_all((tbuf *[]){&tq, &tk, &tv, &to, NULL});
        }
    assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_PATH, SDPA_PATH_AUTO),
                     SDPA_OK);
}

static void test_out_of_memory(void **state)
{
    fx *f = *state;
    counting_alloc ca;
    sdpa_allocator al = ca_start(&ca, 0);
    sdpa_ctx *c = (sdpa_ctx *)&ca;
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al),
                     SDPA_ERR_OUT_OF_MEMORY);
    assert_null(c);
    assert_true(ca.failures >= 1);

    /* A context that got its own memory, then nothing more. */
    ca_reset(&ca, -1);
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al), SDPA_OK);
    ca.fail_after = ca.allocs;
    tp_set(c, SDPA_OPT_PATH, SDPA_PATH_MATERIALISED);
    /* A shape whose materialised scores need scratch (Tq x Tk per slice). */
    tbuf q, k, v, o;
    const int dt = f->dtype;
    rng r = {3};
    tbuf_make(&q, dt, 2, 2, 64, 8, LAYOUT_BHTD, 0);
    tbuf_make(&k, dt, 2, 2, 512, 8, LAYOUT_BHTD, 0);
    tbuf_make(&v, dt, 2, 2, 512, 8, LAYOUT_BHTD, 0);
    tbuf_make(&o, dt, 2, 2, 64, 8, LAYOUT_BHTD, 0);
    tbuf_fill_random(&q, &r, 1.0);
    tbuf_fill_random(&k, &r, 1.0);
    tbuf_fill_random(&v, &r, 1.0);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dt;
    tp_views(&a, &q, &k, &v, NULL, NULL, &o, NULL, NULL, NULL);
    fill_sentinel(o.mem, o.elems * o.esize);
    assert_int_equal(sdpa_forward(c, &a), SDPA_ERR_OUT_OF_MEMORY);
    assert_true(ca.failures >= 1);
    check_message_any(sdpa_ctx_last_error(c), "out of memory", NEEDLES(NULL));
    assert_int_equal(first_non_sentinel(o.mem, o.elems * o.esize), -1);
    /* The context stays usable once memory is available again. */
    ca.fail_after = -1;
    assert_int_equal(sdpa_forward(c, &a), SDPA_OK);
    assert_string_equal(sdpa_ctx_last_error(c), "");
    sdpa_ctx_destroy(c);
    assert_int_equal(ca.live_bytes, 0);
    assert_int_equal(ca.bad_free, 0);
    tbuf_free_all((tbuf *[]){&q, &k, &v, &o, NULL});
}

/* One call's inputs and output, for the allocation-failure test. */
typedef struct oom_call {
    tbuf q, k, v, o;
    sdpa_forward_args a;
} oom_call;

static void oom_call_make(oom_call *c, int dtype, int64_t hq, int64_t tq,
                          int64_t tk, uint64_t seed)
{
    rng r = {seed};
    tbuf_make(&c->q, dtype, 2, hq, tq, 8, LAYOUT_BHTD, 0);
    tbuf_make(&c->k, dtype, 2, 2, tk, 8, LAYOUT_BHTD, 0);
    tbuf_make(&c->v, dtype, 2, 2, tk, 8, LAYOUT_BHTD, 0);
    tbuf_make(&c->o, dtype, 2, hq, tq, 8, LAYOUT_BHTD, 0);
    tbuf_fill_random(&c->q, &r, 1.0);
    tbuf_fill_random(&c->k, &r, 1.0);
    tbuf_fill_random(&c->v, &r, 1.0);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    tp_views(&a, &c->q, &c->k, &c->v, NULL, NULL, &c->o, NULL, NULL, NULL);
    c->a = a;
}

static void oom_call_free(oom_call *c)
{
    tbuf_free_all((tbuf *[]){&c->q, &c->k, &c->v, &c->o, NULL});
}

/* Fail the k-th allocation, for every k, of a first call and of a call
 * that grows the scratch, on every path with 1 and 3 workers: the call
 * reports SDPA_ERR_OUT_OF_MEMORY with its output untouched, nothing leaks,
 * and the same context then computes the same output, bit for bit, as a
 * context that never failed. */
static void test_out_of_memory_every_allocation(void **state)
{
    fx *f = *state;
    const int dt = f->dtype;
    oom_call small, big;
    oom_call_make(&small, dt, 4, 8, 40, 11);
    oom_call_make(&big, dt, 4, 96, 700, 12);
    size_t out_bytes = big.o.elems * big.o.esize;
    unsigned char *expect = malloc(out_bytes);
    assert_non_null(expect);
    long cases = 0;
    for (int path = SDPA_PATH_MATERIALISED; path <= SDPA_PATH_DECODE; ++path)
        for (int threads = 1; threads <= 3; threads += 2)
            for (int grow = 0; grow <= 1; ++grow) {
                /* The reference run, and how many allocations it makes. */
                counting_alloc ca;
                sdpa_allocator al = ca_start(&ca, -1);
                sdpa_ctx *c = NULL;
                assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al),
                                 SDPA_OK);
                tp_set(c, SDPA_OPT_PATH, path);
                tp_set(c, SDPA_OPT_NUM_THREADS, threads);
                if (grow)
                    assert_int_equal(sdpa_forward(c, &small.a), SDPA_OK);
                long before = ca.allocs;
                assert_int_equal(sdpa_forward(c, &big.a), SDPA_OK);
                long needed = ca.allocs - before;
                memcpy(expect, big.o.mem, out_bytes);
                sdpa_ctx_destroy(c);
                assert_int_equal(ca.live_bytes, 0);
                assert_true(needed >= 1);
                for (long k = 0; k < needed; ++k) {
                    al = ca_start(&ca, -1);
                    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al),
                                     SDPA_OK);
                    tp_set(c, SDPA_OPT_PATH, path);
                    tp_set(c, SDPA_OPT_NUM_THREADS, threads);
                    if (grow)
                        assert_int_equal(sdpa_forward(c, &small.a), SDPA_OK);
                    ca.fail_at = ca.allocs + ca.failures + k;
                    fill_sentinel(big.o.mem, out_bytes);
                    int st = sdpa_forward(c, &big.a);
                    if (st != SDPA_ERR_OUT_OF_MEMORY)
                        print_error("path %d threads %d grow %d: failing "
                                    "allocation %ld of %ld gave %d\n",
                                    path, threads, grow, k, needed, st);
                    assert_int_equal(st, SDPA_ERR_OUT_OF_MEMORY);
                    check_message_any(sdpa_ctx_last_error(c), "out of memory",
                                      NEEDLES("allocate"));
                    assert_int_equal(first_non_sentinel(big.o.mem, out_bytes),
                                     -1);
                    /* usable again, with the same result */
                    assert_int_equal(sdpa_forward(c, &big.a), SDPA_OK);
                    assert_memory_equal(big.o.mem, expect, out_bytes);
                    sdpa_ctx_destroy(c);
                    assert_int_equal(ca.live_bytes, 0);
                    assert_int_equal(ca.bad_free, 0);
                    assert_int_equal(ca.bad_alignment, 0);
                    cases++;
                }
            }
    assert_true(cases >= 12);
    free(expect);
    oom_call_free(&small);
    oom_call_free(&big);
}

/* Where the test knows which kernels the CPU runs: x86 with GCC's or
 * clang's CPU detection, or any other architecture, which has no vector
 * set (they are x86's). */
#if defined(__x86_64__) || defined(__i386__)
#if defined(__GNUC__)
#define KNOWS_CPU_KERNELS
#endif
#else
#define KNOWS_CPU_KERNELS
#endif

#ifdef KNOWS_CPU_KERNELS
/* Forcing a kernel works exactly when the CPU has it (asked here, apart
 * from the library); otherwise UNSUPPORTED with a message naming it. */
static void expect_kernel(fx *f, int kernel, int have, const char *what,
                          const char *const *needles)
{
    int st = sdpa_ctx_set_int(f->ctx, SDPA_OPT_KERNEL, kernel);
    if (have) {
        assert_int_equal(st, SDPA_OK);
    } else {
        assert_int_equal(st, SDPA_ERR_UNSUPPORTED);
        check_message_any(sdpa_ctx_last_error(f->ctx), what, needles);
    }
}
#endif

static void test_unsupported(void **state)
{
    fx *f = *state;
    int checked = 0;
#ifdef KNOWS_CPU_KERNELS
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    int have = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    int have512 = have && __builtin_cpu_supports("avx512f") &&
                  __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl");
#else
    int have = 0, have512 = 0;
#endif
    expect_kernel(f, SDPA_KERNEL_AVX2, have, "avx2", NEEDLES("AVX2", "avx2"));
    expect_kernel(f, SDPA_KERNEL_AVX512, have512, "avx512",
                  NEEDLES("AVX-512", "AVX512"));
    assert_int_equal(
        sdpa_ctx_set_int(f->ctx, SDPA_OPT_KERNEL, SDPA_KERNEL_AUTO), SDPA_OK);
    /* AUTO resolves to the widest kernel the CPU runs. */
    int64_t v = -1;
    assert_int_equal(sdpa_ctx_get_int(f->ctx, SDPA_OPT_KERNEL, &v), SDPA_OK);
    assert_int_equal(v, have512 ? SDPA_KERNEL_AVX512
                        : have  ? SDPA_KERNEL_AVX2
                                : SDPA_KERNEL_PORTABLE);
    checked++;
#endif
    /* Weights need the whole row: a forced tiled / decode path may refuse
     * them with UNSUPPORTED (outputs untouched) or compute them. */
    for (int path = SDPA_PATH_TILED; path <= SDPA_PATH_DECODE; ++path) {
        fx_reset(f);
        assert_int_equal(sdpa_ctx_set_int(f->ctx, SDPA_OPT_PATH, path),
                         SDPA_OK);
        fill_outputs(f);
        int rc = sdpa_forward(f->ctx, &f->a);
        assert_true(rc == SDPA_OK || rc == SDPA_ERR_UNSUPPORTED);
        if (rc == SDPA_ERR_UNSUPPORTED) {
            check_message_any(sdpa_ctx_last_error(f->ctx), "unsupported path",
                              NEEDLES(NULL));
            check_untouched(f, "unsupported path");
            checked++;
        }
    }
    fx_reset(f);
    assert_true(checked > 0);
}

/* The kernel a context starts with, from the SDPA_KERNEL environment
 * variable; the API option still wins; a bad value is an error of create. */
static void test_kernel_environment(void **state)
{
    (void)state;
    sdpa_ctx *c = NULL;
    int64_t v = -1;
    assert_int_equal(setenv("SDPA_KERNEL", "Portable", 1), 0);
    assert_int_equal(sdpa_ctx_create(&c), SDPA_OK);
    assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_KERNEL, &v), SDPA_OK);
    assert_int_equal(v, SDPA_KERNEL_PORTABLE);
    tp_set(c, SDPA_OPT_KERNEL, SDPA_KERNEL_AUTO);
    int64_t best = -1;
    assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_KERNEL, &best), SDPA_OK);
    sdpa_ctx_destroy(c);

    assert_int_equal(setenv("SDPA_KERNEL", "auto", 1), 0);
    assert_int_equal(sdpa_ctx_create(&c), SDPA_OK);
    assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_KERNEL, &v), SDPA_OK);
    assert_int_equal(v, best);
    sdpa_ctx_destroy(c);

    /* A name it does not know: no context, nothing allocated. */
    assert_int_equal(setenv("SDPA_KERNEL", "avx9", 1), 0);
    c = (sdpa_ctx *)&v;
    assert_int_equal(sdpa_ctx_create(&c), SDPA_ERR_BAD_OPTION_VALUE);
    assert_null(c);
    counting_alloc ca;
    sdpa_allocator al = ca_start(&ca, -1);
    assert_int_equal(sdpa_ctx_create_with_allocator(&c, &al),
                     SDPA_ERR_BAD_OPTION_VALUE);
    assert_int_equal(ca.allocs, 0);

    /* Each kernel: accepted where the CPU has it, else UNSUPPORTED. */
    static const char *const names[] = {"portable", "AVX2", "avx512"};
    for (int i = 0; i < 3; i++) {
        int kernel = test_kernels[i];
        assert_int_equal(setenv("SDPA_KERNEL", names[i], 1), 0);
        int rc = sdpa_ctx_create(&c);
        if (rc == SDPA_ERR_UNSUPPORTED) {
            assert_null(c);
            /* the API agrees that this CPU lacks it */
            sdpa_ctx *plain;
            assert_int_equal(unsetenv("SDPA_KERNEL"), 0);
            assert_int_equal(sdpa_ctx_create(&plain), SDPA_OK);
            assert_int_equal(sdpa_ctx_set_int(plain, SDPA_OPT_KERNEL, kernel),
                             SDPA_ERR_UNSUPPORTED);
            sdpa_ctx_destroy(plain);
            continue;
        }
        assert_int_equal(rc, SDPA_OK);
        assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_KERNEL, &v), SDPA_OK);
        assert_int_equal(v, kernel);
        /* The API option wins over the environment. */
        tp_set(c, SDPA_OPT_KERNEL, SDPA_KERNEL_PORTABLE);
        assert_int_equal(sdpa_ctx_get_int(c, SDPA_OPT_KERNEL, &v), SDPA_OK);
        assert_int_equal(v, SDPA_KERNEL_PORTABLE);
        sdpa_ctx_destroy(c);
    }
    assert_int_equal(unsetenv("SDPA_KERNEL"), 0);
}

static void test_status_strings(void **state)
{
    (void)state;
    const char *s[SDPA_ERR_BAD_KV_SCALE + 1];
    for (int i = 0; i <= SDPA_ERR_BAD_KV_SCALE; ++i) {
        s[i] = sdpa_status_string(i);
        assert_non_null(s[i]);
        assert_true(strlen(s[i]) > 0);
        for (int j = 0; j < i; ++j)
            if (strcmp(s[i], s[j]) == 0) {
                print_error("status %d and %d share \"%s\"\n", i, j, s[i]);
                fail();
            }
    }
    static const int unknown[] = {12345, -1, SDPA_ERR_BAD_KV_SCALE + 1, INT_MAX,
                                  INT_MIN};
    for (size_t i = 0; i < sizeof unknown / sizeof unknown[0]; ++i) {
        const char *u = sdpa_status_string(unknown[i]);
        assert_non_null(u);
        assert_non_null(strstr(u, "unknown"));
        for (int j = 0; j <= SDPA_ERR_BAD_KV_SCALE; ++j)
            assert_true(strcmp(u, s[j]) != 0);
    }
    const char *m = sdpa_ctx_last_error(NULL);
    assert_non_null(m);
    assert_true(strlen(m) > 0);
}

static void test_version(void **state)
{
    (void)state;
    assert_int_equal(sdpa_version_number(), SDPA_VERSION_NUMBER);
    assert_int_equal(SDPA_VERSION_NUMBER, SDPA_VERSION_MAJOR * 10000 +
                                              SDPA_VERSION_MINOR * 100 +
                                              SDPA_VERSION_PATCH);
    assert_non_null(sdpa_version_string());
    assert_string_equal(sdpa_version_string(), SDPA_VERSION_STRING);
    char buf[64];
    snprintf(buf, sizeof buf, "%d.%d.%d", SDPA_VERSION_MAJOR,
             SDPA_VERSION_MINOR, SDPA_VERSION_PATCH);
    assert_string_equal(SDPA_VERSION_STRING, buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TP_BOTH_NAMED(test_baseline_ok, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_null_pointer, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_struct_size, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_struct_tail, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_dtype, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_dim, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_shape_mismatch, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_stride, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_overlap, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_overflow, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_work_overflow, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_scale, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_softcap, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_dropout, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_kv_scale, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_head_grouping, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_kv_len, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_causal, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_flags, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_unknown_option, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_bad_option_value, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_message_text, fx_setup, fx_teardown),
        cmocka_unit_test(test_option_defaults),
        TP_BOTH_NAMED(test_fully_masked_row, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_nonfinite, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_nonfinite_outputs, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_out_of_memory, fx_setup, fx_teardown),
        TP_BOTH_NAMED(test_out_of_memory_every_allocation, fx_setup,
                      fx_teardown),
        TP_BOTH_NAMED(test_unsupported, fx_setup, fx_teardown),
        cmocka_unit_test(test_kernel_environment),
        cmocka_unit_test(test_status_strings),
        cmocka_unit_test(test_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
