/*
 * sdpa_merge: P partial results (out_p, lse_p) of the same query rows over
 * disjoint key sets combined into the result over their union, exactly, in
 * partial order 0..P-1 (include/sdpa.h states the identity). Everything is
 * validated before anything is written; no memory is allocated.
 */
#include "core/context.h"
#include "core/struct_import.h"
#include "core/checked.h"
#include "core/tensor_check.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#define WHO "sdpa_merge"

/* sdpa_merge_args as 1.1 introduced it: a frozen number, never sizeof. */
#define SDPA_MERGE_ARGS_SIZE_V1 ((size_t)184)
#if UINTPTR_MAX == UINT64_MAX
_Static_assert(sizeof(sdpa_merge_args) >= SDPA_MERGE_ARGS_SIZE_V1,
               "sdpa_merge_args may only grow");
#endif

/* The static merge_rows_f32/_f64 and its helpers, by HACKING.md's naming
 * rule. */
#define SDPA_TEMPLATE "merge/merge_impl.h"
#include "core/instantiate.h"

/* A checked tensor argument: its label for messages and its bytes. */
typedef struct merge_view {
    char label[40];
    const sdpa_tensor *x;
    bool output;
    sdpa_byte_range range;
} merge_view;

/* Shape (against want, whose extents `source` fixed), strides and extent
 * of one view; fills v's range. */
static int merge_check_view(sdpa_ctx *ctx, merge_view *v, const int64_t want[4],
                            const char *source, bool is_lse, size_t esize)
{
    sdpa_tensor_rule rule = {
        .name = v->label,
        .tensor = v->x,
        .is_output = v->output,
        .inner_unused = is_lse,
        .elem_size = esize,
        .expect = {{want[0], source},
                   {want[1], source},
                   {want[2], source},
                   {want[3],
                    is_lse ? "its extent (one value per row)" : source}},
        .last_dim = "Dv"};
    return sdpa_check_tensor(ctx, WHO, &rule, &v->range);
}

/* The same elements: equal data and equal strides where the extent is
 * above 1 (the shapes agree already). */
static bool merge_same_view(const sdpa_tensor *a, const sdpa_tensor *b,
                            bool is_lse)
{
    if (a->data != b->data)
        return false;
    for (int d = 0; d < (is_lse ? 3 : 4); d++)
        if (a->shape[d] > 1 && a->stride[d] != b->stride[d])
            return false;
    return true;
}

/* An output against one input: disjoint, or (partial 0 only) the same
 * view: in-place accumulation. */
static int merge_check_output(sdpa_ctx *ctx, const merge_view *output,
                              const merge_view *input, bool may_alias,
                              bool is_lse)
{
    if (may_alias && merge_same_view(output->x, input->x, is_lse))
        return SDPA_OK;
    if (!sdpa_ranges_meet(&output->range, &input->range))
        return SDPA_OK;
    return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                     WHO
                     ": output %s overlaps input %s (only out = "
                     "outs[0] and lse = lses[0], as the very same views, may "
                     "share memory)",
                     output->label, input->label);
}

/* The call, validated: the arguments as this library knows them. */
typedef struct merge_problem {
    sdpa_merge_args a;
    size_t esize;
    bool empty_rows_zero;
} merge_problem;

/* The dtype, the partials' count and arrays, every data pointer. */
static int merge_check_arrays(sdpa_ctx *ctx, const sdpa_merge_args *a)
{
    if (a->dtype != SDPA_FLOAT32 && a->dtype != SDPA_FLOAT64)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         WHO ": dtype %d is neither SDPA_FLOAT32 nor "
                             "SDPA_FLOAT64",
                         a->dtype);
    if (a->parts <= 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                         WHO ": parts is %lld, must be positive",
                         (long long)a->parts);
    if (!a->outs || !a->lses)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         WHO ": %s is NULL (parts is %lld)",
                         a->outs ? "lses" : "outs", (long long)a->parts);
    size_t array_bytes;
    if (!sdpa_mul_size((size_t)a->parts, sizeof(sdpa_tensor), &array_bytes) ||
        (uintptr_t)a->outs > UINTPTR_MAX - array_bytes ||
        (uintptr_t)a->lses > UINTPTR_MAX - array_bytes)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         WHO ": parts %lld: the arrays outs and lses "
                             "overflow the address space",
                         (long long)a->parts);
    for (int64_t p = 0; p < a->parts; p++)
        if (!a->outs[p].data || !a->lses[p].data)
            return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                             WHO ": %s[%lld].data is NULL",
                             a->outs[p].data ? "lses" : "outs", (long long)p);
    if (!a->out.data)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, WHO ": out.data is NULL");

    return SDPA_OK;
}

/* Every view's shape, strides and extent; the outputs against every
 * input and each other. */
static int merge_check_views(sdpa_ctx *ctx, const sdpa_merge_args *a,
                             size_t esize)
{
    /* outs[0] fixes N, H, T and Dv. */
    const int64_t *s0 = a->outs[0].shape;
    const int64_t want_out[4] = {s0[0], s0[1], s0[2], s0[3]};
    const int64_t want_lse[4] = {s0[0], s0[1], s0[2], 1};
    merge_view out = {.x = &a->out, .output = true};
    merge_view lse = {.x = &a->lse, .output = true};
    snprintf(out.label, sizeof out.label, "out");
    snprintf(lse.label, sizeof lse.label, "lse");
    merge_view first = {.x = &a->outs[0]};
    snprintf(first.label, sizeof first.label, "outs[0]");
    int status = merge_check_view(ctx, &first, want_out, "", false, esize);
    if (status != SDPA_OK)
        return status;
    status = merge_check_view(ctx, &out, want_out, "outs[0]'s", false, esize);
    if (status == SDPA_OK && a->lse.data)
        status =
            merge_check_view(ctx, &lse, want_lse, "outs[0]'s", true, esize);
    for (int64_t p = 0; status == SDPA_OK && p < a->parts; p++) {
        merge_view in[2] = {{.x = &a->outs[p]}, {.x = &a->lses[p]}};
        snprintf(in[0].label, sizeof in[0].label, "outs[%lld]", (long long)p);
        snprintf(in[1].label, sizeof in[1].label, "lses[%lld]", (long long)p);
        status =
            merge_check_view(ctx, &in[0], want_out, "outs[0]'s", false, esize);
        if (status == SDPA_OK)
            status = merge_check_view(ctx, &in[1], want_lse, "outs[0]'s", true,
                                      esize);
        for (int k = 0; status == SDPA_OK && k < 2; k++) {
            status =
                merge_check_output(ctx, &out, &in[k], p == 0 && k == 0, false);
            if (status == SDPA_OK && a->lse.data)
                status = merge_check_output(ctx, &lse, &in[k], p == 0 && k == 1,
                                            true);
        }
    }
    if (status == SDPA_OK && a->lse.data &&
        sdpa_ranges_meet(&out.range, &lse.range))
        return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                         WHO ": output out overlaps output lse");
    return status;
}

/* Validates everything into *m; writes nothing else but, on failure,
 * ctx's message. */
static int merge_validate(sdpa_ctx *ctx, const sdpa_merge_args *args,
                          merge_problem *m)
{
    int status = sdpa_import_args(ctx, WHO, args, SDPA_MERGE_ARGS_SIZE_V1,
                                  &m->a, sizeof m->a);
    if (status == SDPA_OK)
        status = merge_check_arrays(ctx, &m->a);
    if (status != SDPA_OK)
        return status;
    m->esize = m->a.dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
    m->empty_rows_zero =
        ctx->options[SDPA_OPT_EMPTY_ROWS] == SDPA_EMPTY_ROWS_ZERO;
    return merge_check_views(ctx, &m->a, m->esize);
}

/* The two passes (merge_impl.h): the partial lses checked, then the rows
 * merged. Nothing to plan: no scratch, no workers. */
static int merge_run(sdpa_ctx *ctx, const merge_problem *m)
{
    int status;
    if (m->a.dtype == SDPA_FLOAT32) {
        status = merge_check_f32(ctx, &m->a, m->empty_rows_zero);
        if (status == SDPA_OK)
            merge_rows_f32(&m->a);
    } else {
        status = merge_check_f64(ctx, &m->a, m->empty_rows_zero);
        if (status == SDPA_OK)
            merge_rows_f64(&m->a);
    }
    return status;
}

static int merge_call(sdpa_ctx *ctx, const sdpa_merge_args *args)
{
    merge_problem m;
    int status = merge_validate(ctx, args, &m);
    if (status != SDPA_OK)
        return status;
    return merge_run(ctx, &m);
}

int sdpa_merge(sdpa_ctx *ctx, const sdpa_merge_args *args)
{
    int status = sdpa_enter(ctx);
    return status != SDPA_OK ? status : sdpa_leave(ctx, merge_call(ctx, args));
}
