/*
 * sdpa_merge: P partial results (out_p, lse_p) of the same query rows over
 * disjoint key sets combined into the result over their union, exactly, in
 * partial order 0..P-1 (include/sdpa.h states the identity). Everything is
 * validated before anything is written; no memory is allocated.
 */
#include "core/context.h"
#include "core/struct_import.h"
#include "core/checked.h"
#include "forward/validate.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

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

static const char *const merge_dim_names[4] = {"N", "H", "T", "Dv"};

/* A checked tensor argument: its label for messages and its byte range. */
typedef struct merge_view {
    char label[40];
    const sdpa_tensor *x;
    bool output;
    uintptr_t begin, end;
} merge_view;

/* Shape (against want), strides and extent of one view; fills v's range. */
static int merge_check_view(sdpa_ctx *ctx, merge_view *v, const int64_t want[4],
                            const char *want_label, bool is_lse, size_t esize)
{
    const sdpa_tensor *x = v->x;
    for (int d = 0; d < 4; d++)
        if (x->shape[d] <= 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                             "sdpa_merge: %s.shape[%d] (%s) is %lld, must be "
                             "positive",
                             v->label, d, merge_dim_names[d],
                             (long long)x->shape[d]);
    for (int d = 0; d < 4; d++)
        if (x->shape[d] != want[d])
            return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                             "sdpa_merge: %s.shape[%d] is %lld, but %s is "
                             "%lld: they must agree",
                             v->label, d, (long long)x->shape[d],
                             d == 3 && is_lse ? "its extent (one value per "
                                                "row)"
                                              : want_label,
                             (long long)want[d]);
    int64_t stride[4];
    for (int d = 0; d < 4; d++) {
        if (x->stride[d] < 0 && !(is_lse && d == 3))
            return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                             "sdpa_merge: %s.stride[%d] is %lld, strides "
                             "must not be negative",
                             v->label, d, (long long)x->stride[d]);
        stride[d] = x->shape[d] == 1 ? 0 : x->stride[d];
    }
    if (!is_lse && x->shape[3] > 1 && x->stride[3] != 1)
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "sdpa_merge: %s.stride[3] is %lld, the innermost "
                         "stride must be 1",
                         v->label, (long long)x->stride[3]);
    if (v->output && sdpa_overlaps_itself(x->shape, stride))
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "sdpa_merge: output %s has strides {%lld, %lld, "
                         "%lld, %lld}: sorted, each must step past all the "
                         "smaller ones cover",
                         v->label, (long long)x->stride[0],
                         (long long)x->stride[1], (long long)x->stride[2],
                         (long long)x->stride[3]);
    size_t span = 1, step, bytes;
    for (int d = 0; d < 4; d++)
        if (!sdpa_mul_size((size_t)(x->shape[d] - 1), (size_t)stride[d],
                           &step) ||
            !sdpa_add_size(span, step, &span))
            goto overflow;
    if (!sdpa_mul_size(span, esize, &bytes) ||
        (uintptr_t)x->data > UINTPTR_MAX - bytes)
        goto overflow;
    v->begin = (uintptr_t)x->data;
    v->end = v->begin + bytes;
    return SDPA_OK;
overflow:
    return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                     "sdpa_merge: the extent of %s overflows the address "
                     "space",
                     v->label);
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

static bool merge_meet(const merge_view *a, const merge_view *b)
{
    return a->begin < b->end && b->begin < a->end;
}

/* An output against one input: disjoint, or (partial 0 only) the same
 * view: in-place accumulation. */
static int merge_check_output(sdpa_ctx *ctx, const merge_view *output,
                              const merge_view *input, bool may_alias,
                              bool is_lse)
{
    if (may_alias && merge_same_view(output->x, input->x, is_lse))
        return SDPA_OK;
    if (!merge_meet(output, input))
        return SDPA_OK;
    return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                     "sdpa_merge: output %s overlaps input %s (only out = "
                     "outs[0] and lse = lses[0], as the very same views, may "
                     "share memory)",
                     output->label, input->label);
}

static int merge_validate(sdpa_ctx *ctx, const sdpa_merge_args *a)
{
    if (a->dtype != SDPA_FLOAT32 && a->dtype != SDPA_FLOAT64)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "sdpa_merge: dtype %d is neither SDPA_FLOAT32 nor "
                         "SDPA_FLOAT64",
                         a->dtype);
    if (a->parts <= 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                         "sdpa_merge: parts is %lld, must be positive",
                         (long long)a->parts);
    if (!a->outs || !a->lses)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_merge: %s is NULL (parts is %lld)",
                         a->outs ? "lses" : "outs", (long long)a->parts);
    size_t array_bytes;
    if (!sdpa_mul_size((size_t)a->parts, sizeof(sdpa_tensor), &array_bytes) ||
        (uintptr_t)a->outs > UINTPTR_MAX - array_bytes ||
        (uintptr_t)a->lses > UINTPTR_MAX - array_bytes)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_merge: parts %lld: the arrays outs and lses "
                         "overflow the address space",
                         (long long)a->parts);
    for (int64_t p = 0; p < a->parts; p++)
        if (!a->outs[p].data || !a->lses[p].data)
            return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                             "sdpa_merge: %s[%lld].data is NULL",
                             a->outs[p].data ? "lses" : "outs", (long long)p);
    if (!a->out.data)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_merge: out.data is NULL");

    const size_t esize =
        a->dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
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
    if (status == SDPA_OK && a->lse.data && merge_meet(&out, &lse))
        return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                         "sdpa_merge: output out overlaps output lse");
    return status;
}

int sdpa_merge(sdpa_ctx *ctx, const sdpa_merge_args *args)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    ctx->message[0] = '\0';
    if (!args)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_merge: args is NULL");
    sdpa_merge_args a;
    int status = sdpa_struct_import(ctx, "sdpa_merge: args", args,
                                    SDPA_MERGE_ARGS_SIZE_V1, &a, sizeof a);
    if (status == SDPA_OK)
        status = merge_validate(ctx, &a);
    if (status != SDPA_OK)
        return status;
    bool zero = ctx->options[SDPA_OPT_EMPTY_ROWS] == SDPA_EMPTY_ROWS_ZERO;
    if (a.dtype == SDPA_FLOAT32) {
        status = merge_check_f32(ctx, &a, zero);
        if (status == SDPA_OK)
            merge_rows_f32(&a);
    } else {
        status = merge_check_f64(ctx, &a, zero);
        if (status == SDPA_OK)
            merge_rows_f64(&a);
    }
    return status;
}
