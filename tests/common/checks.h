/*
 * The unit tests' loops over the row kernels and paths (cmocka-asserted,
 * header-only like kernel_sets.h): include after cmocka.h.
 */
#ifndef SDPA_TEST_CHECKS_H
#define SDPA_TEST_CHECKS_H

#include "problem.h"

/* A test for float and for double, cmocka names fn_float and fn_double
 * (setup and teardown may be NULL), or name_float and name_double with
 * TP_BOTH_AS... */
/* clang-format off */
#define TP_BOTH_AS(name, fn, setup, teardown)                                  \
    {name "_float", fn, setup, teardown, &tp_float},                           \
    {name "_double", fn, setup, teardown, &tp_double}
/* clang-format on */
#define TP_BOTH_NAMED(fn, setup, teardown) TP_BOTH_AS(#fn, fn, setup, teardown)
/* ... or both named fn. */
#define TP_BOTH(fn)                                                            \
    cmocka_unit_test_prestate(fn, &tp_float),                                  \
        cmocka_unit_test_prestate(fn, &tp_double)

/* Sets test_kernels[ki]; 0 (and a note, once per kernel) when the CPU
 * lacks it. */
static inline int tp_use_kernel(sdpa_ctx *ctx, int ki)
{
    static int noted[TEST_KERNELS];
    int ks = sdpa_ctx_set_int(ctx, SDPA_OPT_KERNEL, test_kernels[ki]);
    if (ks == SDPA_ERR_UNSUPPORTED) {
        if (!noted[ki]++)
            print_message("  kernel %s: not supported by this CPU, skipped\n",
                          kernel_name(test_kernels[ki]));
        return 0;
    }
    assert_int_equal(ks, SDPA_OK);
    return 1;
}

static inline void tp_use_path(sdpa_ctx *ctx, int path)
{
    assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_PATH, path), SDPA_OK);
}

/* Declares `name`: a copy of the args struct `value` (of `type`, whose
 * first field is struct_size) grown by a nonzero 8-byte tail, as a caller
 * built against a later header passes it: the library must refuse it
 * (SDPA_ERR_STRUCT_TAIL). The copy is name.args. */
#define TP_GROWN(type, name, value)                                            \
    struct {                                                                   \
        type args;                                                             \
        uint64_t tail;                                                         \
    } name;                                                                    \
    memset(&name, 0, sizeof name);                                             \
    name.args = (value);                                                       \
    name.args.struct_size = sizeof name;                                       \
    name.tail = 1

/* An option value the context must accept. */
static inline void tp_set(sdpa_ctx *ctx, int option, int64_t value)
{
    assert_int_equal(sdpa_ctx_set_int(ctx, option, value), SDPA_OK);
}

/* SDPA_OPT_EMPTY_ROWS: ZERO when empty_zero, else ERROR. */
static inline void tp_set_empty_rows(sdpa_ctx *ctx, int empty_zero)
{
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS,
           empty_zero ? SDPA_EMPTY_ROWS_ZERO : SDPA_EMPTY_ROWS_ERROR);
}

/* A context, with SDPA_EMPTY_ROWS_ZERO when empty_zero. */
static inline sdpa_ctx *tp_ctx(int empty_zero)
{
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    assert_non_null(ctx);
    if (empty_zero)
        assert_int_equal(
            sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO),
            SDPA_OK);
    return ctx;
}

#endif
