/*
 * The validator of tensor arguments (tensor_check.h): one tensor at a time,
 * by a rule that says what it may be, with messages that start with the
 * calling function's name.
 */
#include "core/tensor_check.h"
#include "core/checked.h"

#include <limits.h>
#include <string.h>

enum { N_DIM, H_DIM, T_DIM, D_DIM };

int sdpa_check_present(sdpa_ctx *ctx, const char *who,
                       const sdpa_tensor_rule *r)
{
    if (r->required && !r->tensor->data)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, "%s: %s.data is NULL", who,
                         r->name);
    return SDPA_OK;
}

static int check_shape(sdpa_ctx *ctx, const char *who,
                       const sdpa_tensor_rule *r)
{
    const char *const dims[4] = {"N", "H", "T",
                                 r->last_dim ? r->last_dim : "D"};
    for (int d = 0; d < 4; d++) {
        int64_t got = r->tensor->shape[d];
        if (got <= 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                             "%s: %s.shape[%d] (%s) is %lld, must be positive",
                             who, r->name, d, dims[d], (long long)got);
    }
    for (int d = 0; d < 4; d++) {
        int64_t got = r->tensor->shape[d];
        const sdpa_extent *want = &r->expect[d];
        if (got == want->value || (r->broadcastable && got == 1))
            continue;
        if (!want->source)
            return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                             "%s: %s.shape[%d] (%s) is %lld, must be %lld", who,
                             r->name, d, dims[d], (long long)got,
                             (long long)want->value);
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         "%s: %s.shape[%d] is %lld, but %s is %lld: they must "
                         "agree%s",
                         who, r->name, d, (long long)got, want->source,
                         (long long)want->value,
                         r->broadcastable ? " (or be 1 to broadcast)" : "");
    }
    return SDPA_OK;
}

/* Span of a view in elements: the largest offset + 1 (all strides >= 0). */
static bool span_elements(const sdpa_tensor *t, const int64_t stride[4],
                          size_t *span)
{
    size_t total = 1;
    for (int d = 0; d < 4; d++) {
        size_t step;
        if (!sdpa_mul_size((size_t)(t->shape[d] - 1), (size_t)stride[d],
                           &step) ||
            !sdpa_add_size(total, step, &total))
            return false;
    }
    *span = total;
    return true;
}

bool sdpa_overlaps_itself(const int64_t shape[4], const int64_t stride[4])
{
    int order[4] = {0, 1, 2, 3};
    for (int a = 1; a < 4; a++) /* insertion sort by stride */
        for (int b = a; b > 0 && stride[order[b]] < stride[order[b - 1]]; b--) {
            int t = order[b];
            order[b] = order[b - 1];
            order[b - 1] = t;
        }
    int64_t covered = 0; /* largest offset reached by the inner dims */
    for (int i = 0; i < 4; i++) {
        int d = order[i];
        if (shape[d] == 1)
            continue;
        if (stride[d] <= covered)
            return true;
        if (shape[d] - 1 > (INT64_MAX - covered) / stride[d])
            return false; /* too large to overlap: caught as overflow */
        covered += (shape[d] - 1) * stride[d];
    }
    return false;
}

/* The layout rules of a tensor whose shape is checked: sets stride (the
 * view's: extent-1 dimensions 0, and stride[3] with inner_unused). */
static int check_layout(sdpa_ctx *ctx, const char *who,
                        const sdpa_tensor_rule *r, int64_t stride[4])
{
    const sdpa_tensor *t = r->tensor;
    for (int d = 0; d < 4; d++) {
        stride[d] = d == D_DIM && r->inner_unused ? 0 : t->stride[d];
        if (stride[d] < 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                             "%s: %s.stride[%d] is %lld, strides must not be "
                             "negative",
                             who, r->name, d, (long long)stride[d]);
        if (t->shape[d] == 1)
            stride[d] = 0; /* a single index never moves: broadcast */
    }
    if (!r->any_inner && t->stride[D_DIM] != 1 && t->shape[D_DIM] > 1)
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "%s: %s.stride[3] is %lld, the innermost stride must "
                         "be 1",
                         who, r->name, (long long)t->stride[D_DIM]);
    if (r->rows_for_blas && t->shape[T_DIM] > 1 &&
        stride[T_DIM] < t->shape[D_DIM])
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "%s: %s.stride[2] is %lld, below the row length %lld",
                         who, r->name, (long long)stride[T_DIM],
                         (long long)t->shape[D_DIM]);
    if (r->is_output && sdpa_overlaps_itself(t->shape, stride))
        return sdpa_fail(
            ctx, SDPA_ERR_BAD_STRIDE,
            "%s: output %s has strides {%lld, %lld, %lld, %lld}: "
            "sorted, each must step past all the smaller ones cover (the "
            "layouts libsdpa can prove write no element twice)",
            who, r->name, (long long)t->stride[0], (long long)t->stride[1],
            (long long)t->stride[2], (long long)t->stride[3]);
    return SDPA_OK;
}

/* The bytes of a tensor of these view strides, within the address space
 * and, for BLAS rows, BLAS's int. */
static int check_extent(sdpa_ctx *ctx, const char *who,
                        const sdpa_tensor_rule *r, const int64_t stride[4],
                        size_t *bytes)
{
    const sdpa_tensor *t = r->tensor;
    size_t span;
    bool beyond = !span_elements(t, stride, &span) ||
                  !sdpa_mul_size(span, r->elem_size, bytes) ||
                  (uintptr_t)t->data > UINTPTR_MAX - *bytes;
    bool blas = r->rows_for_blas &&
                (t->shape[T_DIM] > INT_MAX || t->shape[D_DIM] > INT_MAX ||
                 stride[T_DIM] > INT_MAX);
    if (beyond)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%s: the extent of %s overflows the address space",
                         who, r->name);
    if (blas)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%s: %s has a row count, row length or row stride "
                         "above the BLAS int limit %d",
                         who, r->name, INT_MAX);
    return SDPA_OK;
}

int sdpa_check_tensor(sdpa_ctx *ctx, const char *who, const sdpa_tensor_rule *r,
                      sdpa_byte_range *range)
{
    const sdpa_tensor *t = r->tensor;
    int64_t stride[4];
    size_t bytes = 0;
    int status = check_shape(ctx, who, r);
    if (status == SDPA_OK)
        status = check_layout(ctx, who, r, stride);
    if (status == SDPA_OK)
        status = check_extent(ctx, who, r, stride, &bytes);
    *range = (sdpa_byte_range){.name = r->name,
                               .is_output = r->is_output,
                               .begin = (uintptr_t)t->data,
                               .end = (uintptr_t)t->data + bytes};
    if (status != SDPA_OK)
        return status;
    memcpy(range->shape, t->shape, sizeof range->shape);
    memcpy(range->stride, stride, sizeof range->stride);
    range->elem_size = r->elem_size;
    if (r->view) {
        r->view->data = t->data;
        memcpy(r->view->stride, stride, sizeof stride);
    }
    return SDPA_OK;
}

/* The digits of the sorted dimensions (largest stride first) of two views
 * with the same strides: can Σ i_d·stride_d equal t with each i_d in
 * [lo_d, hi_d] (i_d = x_d - y_d, x_d an index of one view, y_d of the
 * other)? lo_rest / hi_rest[k]: the least and the most the dimensions
 * below k can add. */
typedef struct digits {
    int count;
    int64_t stride[4], lo[4], hi[4], lo_rest[4], hi_rest[4];
} digits;

static bool reachable(const digits *g, int k, int64_t t)
{
    if (k >= g->count || k >= 4)
        return t == 0;
    const int64_t s = g->stride[k];
    /* i with t - i·s in [lo_rest, hi_rest]: ceil((t - hi_rest) / s) to
     * floor((t - lo_rest) / s); at most two, as 2·s exceeds hi_rest -
     * lo_rest (the nesting checked by the caller) */
    int64_t num_lo = t - g->hi_rest[k], num_hi = t - g->lo_rest[k];
    int64_t first = num_lo / s + (num_lo % s > 0);
    int64_t last = num_hi / s - (num_hi % s < 0);
    if (first < g->lo[k])
        first = g->lo[k];
    if (last > g->hi[k])
        last = g->hi[k];
    for (int64_t i = first; i <= last; i++)
        if (reachable(g, k + 1, t - i * s))
            return true;
    return false;
}

bool sdpa_views_may_share(const sdpa_byte_range *a, const sdpa_byte_range *b)
{
    const size_t es = a->elem_size;
    if (es == 0 || b->elem_size != es ||
        memcmp(a->stride, b->stride, sizeof a->stride) != 0)
        return true;
    /* element x of a and y of b share a byte when their offsets from a's
     * base, in elements, differ by less than one: X - Y = t for t the
     * floor or the ceiling of (b - a) / es */
    const uintptr_t lo_base = a->begin < b->begin ? a->begin : b->begin;
    const uintptr_t gap = (a->begin < b->begin ? b->begin : a->begin) - lo_base;
    if (gap / es > (uintptr_t)INT64_MAX)
        return true;
    const int64_t sign = a->begin <= b->begin ? 1 : -1;
    digits g = {0};
    int order[4] = {0, 1, 2, 3};
    for (int x = 1; x < 4; x++) /* by stride, largest first */
        for (int y = x; y > 0 && a->stride[order[y]] > a->stride[order[y - 1]];
             y--) {
            int tmp = order[y];
            order[y] = order[y - 1];
            order[y - 1] = tmp;
        }
    for (int x = 0; x < 4; x++) {
        int d = order[x];
        int64_t na = a->shape[d] - 1, nb = b->shape[d] - 1;
        if (na == 0 && nb == 0)
            continue;
        if (a->stride[d] == 0)
            return true; /* a broadcast dimension: not a number system */
        g.stride[g.count] = a->stride[d];
        g.lo[g.count] = -nb;
        g.hi[g.count] = na;
        g.count++;
    }
    /* what the dimensions below each one can add, and the nesting */
    int64_t lo = 0, hi = 0;
    for (int k = g.count - 1; k >= 0; k--) {
        g.lo_rest[k] = lo;
        g.hi_rest[k] = hi;
        if ((hi - lo) / 2 >= g.stride[k])
            return true; /* more than two digits to try */
        if (g.hi[k] > (INT64_MAX - hi) / g.stride[k] ||
            -g.lo[k] > (INT64_MAX + lo) / g.stride[k])
            return true;
        hi += g.hi[k] * g.stride[k];
        lo += g.lo[k] * g.stride[k];
    }
    const int64_t whole = (int64_t)(gap / es);
    const bool exact = gap % es == 0;
    for (int c = 0; c < (exact ? 1 : 2); c++) {
        int64_t t = sign * (whole + c);
        if (reachable(&g, 0, t))
            return true;
    }
    return false;
}

/* Outputs must not meet each other or any input. */
int sdpa_check_disjoint(sdpa_ctx *ctx, const char *who,
                        const sdpa_byte_range *ranges, int count)
{
    for (int a = 0; a < count; a++)
        for (int b = a + 1; b < count; b++) {
            bool a_out = ranges[a].is_output, b_out = ranges[b].is_output;
            if ((a_out || b_out) && sdpa_ranges_meet(&ranges[a], &ranges[b]) &&
                sdpa_views_may_share(&ranges[a], &ranges[b]))
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 "%s: output %s overlaps %s %s (they share "
                                 "an element, or views of different strides "
                                 "or element sizes share address ranges)",
                                 who, b_out ? ranges[b].name : ranges[a].name,
                                 a_out && b_out ? "output" : "input",
                                 b_out ? ranges[a].name : ranges[b].name);
        }
    return SDPA_OK;
}
