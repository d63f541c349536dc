/* The validator of tensor arguments (tensor_check.c) that sdpa_forward,
 * sdpa_backward and sdpa_merge share. `who` is the calling function's name
 * ("sdpa_backward"): every message starts "who: ". */
#ifndef SDPA_CORE_TENSOR_CHECK_H
#define SDPA_CORE_TENSOR_CHECK_H

#include "core/context.h"
#include "core/problem.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An extent a tensor must have, and the argument that fixed it (e.g.
 * "q.shape[2] (Tq)"). Without a source a mismatch names the dimension and
 * the value instead ("dq.shape[1] (H) is 3, must be 4"). */
typedef struct sdpa_extent {
    int64_t value;
    const char *source;
} sdpa_extent;

/* How one tensor argument is checked. */
typedef struct sdpa_tensor_rule {
    const char *name;
    const sdpa_tensor *tensor;
    sdpa_view *view; /* filled in (broadcast strides 0); may be NULL */
    bool required;
    bool is_output;
    bool broadcastable; /* mask, bias: any dimension may have extent 1 */
    bool rows_for_blas; /* row stride is a BLAS leading dimension */
    bool any_inner;     /* any non-negative stride[3] (never a BLAS
                           operand: rows are gathered) */
    bool inner_unused;  /* one value per row: stride[3] ignored */
    size_t elem_size;
    sdpa_extent expect[4]; /* exact extents; broadcastable dims may be 1 */
    const char *last_dim;  /* dimension 3's name in messages; NULL: "D" */
} sdpa_tensor_rule;

/* A byte range [begin, end) of an argument, for the overlap rules, and
 * when it is a tensor's, the view (elem_size 0: no view), so that two
 * views whose ranges meet can be told apart element by element. */
typedef struct sdpa_byte_range {
    const char *name;
    bool is_output;
    uintptr_t begin, end;
    int64_t shape[4], stride[4]; /* the view's: broadcast strides 0 */
    size_t elem_size;
} sdpa_byte_range;

/* Can two views share a byte? Exact when both have the same element size
 * and strides and, sorted, each stride is more than half what the
 * differences of the smaller dimensions' indices can span (any layout an
 * output may have does so): the difference of the two bases is then
 * decomposed digit by digit, at most two candidates a digit. Interleaved views
 * of one buffer (q, k and v of a fused [T, 3, H, D] buffer; their gradients)
 * share none. Any other pair of ranges that meet: true (conservative). */
bool sdpa_views_may_share(const sdpa_byte_range *a, const sdpa_byte_range *b);

/* Could an output view write one element twice? (Conservative: sorted by
 * stride, each dimension must step past all that the inner ones cover;
 * strides non-negative, broadcast ones already 0.) */
bool sdpa_overlaps_itself(const int64_t shape[4], const int64_t stride[4]);

/* Do two byte ranges share a byte? */
static inline bool sdpa_ranges_meet(const sdpa_byte_range *a,
                                    const sdpa_byte_range *b)
{
    return a->begin < b->end && b->begin < a->end;
}

/* A view of a block type (SDPA_Q8_0, SDPA_Q4_0) in its units, blocks of
 * 32 values: D and the strides over 32 (the validator checks that they
 * are whole blocks first); any other type's view as it is. */
static inline sdpa_tensor sdpa_tensor_in_units(sdpa_tensor t, int type)
{
    const int64_t values = sdpa_dtype_values(type);
    t.shape[3] /= values;
    for (int d = 0; d < 3; d++)
        t.stride[d] /= values;
    return t;
}

/* A required tensor must have data: "who: name.data is NULL". */
int sdpa_check_present(sdpa_ctx *ctx, const char *who,
                       const sdpa_tensor_rule *r);

/* Checks a present tensor by its rule: positive extents that match
 * r->expect, non-negative strides (the innermost 1 unless any_inner, rows
 * no closer than their length when rows_for_blas), an output that writes
 * no element twice, an extent within the address space and, for BLAS
 * rows, within BLAS's int. Fills *r->view and *range (its bytes). */
int sdpa_check_tensor(sdpa_ctx *ctx, const char *who, const sdpa_tensor_rule *r,
                      sdpa_byte_range *range);

/* Outputs must not meet each other or any input: the first pair of
 * ranges[0, count) that does is SDPA_ERR_OVERLAP. */
int sdpa_check_disjoint(sdpa_ctx *ctx, const char *who,
                        const sdpa_byte_range *ranges, int count);

#endif /* SDPA_CORE_TENSOR_CHECK_H */
