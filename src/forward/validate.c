/*
 * Validation: every argument, every size and every promise of sdpa_forward is
 * checked here, before anything is allocated or written. The result is a
 * resolved sdpa_problem (defaults applied, broadcast strides zeroed).
 */
#include "core/context.h"
#include "core/struct_import.h"
#include "core/checked.h"
#include "core/problem.h"
#include "forward/validate.h"
#include "forward/key_range.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define KNOWN_FLAGS                                                            \
    ((uint32_t)(SDPA_FLAG_MASK_NONZERO_ALLOWS | SDPA_FLAG_WINDOW))

enum { N_DIM, H_DIM, T_DIM, D_DIM };

/* An extent a tensor must have, and the argument that fixed it. */
typedef struct extent {
    int64_t value;
    const char *source; /* e.g. "q.shape[2] (Tq)" */
} extent;

/* How each tensor argument is checked. */
typedef struct tensor_rule {
    const char *name;
    const sdpa_tensor *tensor;
    sdpa_view *view;
    bool required;
    bool is_output;
    bool broadcastable; /* mask, bias: any dimension may have extent 1 */
    bool rows_for_blas; /* row stride is a BLAS leading dimension */
    bool any_inner;     /* mask, bias: any non-negative stride[3] (they are
                           never BLAS operands: rows are gathered) */
    bool inner_unused;  /* lse: one value per row, stride[3] ignored */
    size_t elem_size;
    extent expect[4]; /* exact extents; broadcastable dims may also be 1 */
} tensor_rule;

static const char *const dim_names[4] = {"N", "H", "T", "D"};

static int check_shape(sdpa_ctx *ctx, const tensor_rule *r)
{
    for (int d = 0; d < 4; d++) {
        int64_t got = r->tensor->shape[d];
        if (got <= 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                             "sdpa_forward: %s.shape[%d] (%s) is %lld, must "
                             "be positive",
                             r->name, d, dim_names[d], (long long)got);
    }
    for (int d = 0; d < 4; d++) {
        int64_t got = r->tensor->shape[d];
        const extent *want = &r->expect[d];
        if (got != want->value && !(r->broadcastable && got == 1))
            return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                             "sdpa_forward: %s.shape[%d] is %lld, but %s is "
                             "%lld: they must agree%s",
                             r->name, d, (long long)got, want->source,
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

/* An output must not write one element twice: sorted by stride, every
 * dimension must step over everything the inner dimensions cover. */
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

static int check_strides(sdpa_ctx *ctx, const tensor_rule *r, size_t *bytes)
{
    const sdpa_tensor *t = r->tensor;
    int64_t stride[4];
    for (int d = 0; d < 4; d++) {
        stride[d] = d == D_DIM && r->inner_unused ? 0 : t->stride[d];
        if (stride[d] < 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                             "sdpa_forward: %s.stride[%d] is %lld, strides "
                             "must not be negative",
                             r->name, d, (long long)stride[d]);
        if (t->shape[d] == 1)
            stride[d] = 0; /* a single index never moves: broadcast */
    }
    if (!r->any_inner && t->stride[D_DIM] != 1 && t->shape[D_DIM] > 1)
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "sdpa_forward: %s.stride[3] is %lld, the innermost "
                         "stride must be 1",
                         r->name, (long long)t->stride[D_DIM]);
    if (r->rows_for_blas && t->shape[T_DIM] > 1 &&
        stride[T_DIM] < t->shape[D_DIM])
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "sdpa_forward: %s.stride[2] is %lld, below the row "
                         "length %lld",
                         r->name, (long long)stride[T_DIM],
                         (long long)t->shape[D_DIM]);
    if (r->is_output && sdpa_overlaps_itself(t->shape, stride))
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "sdpa_forward: output %s has strides {%lld, %lld, "
                         "%lld, %lld}: sorted, each must step past all the "
                         "smaller ones cover (the layouts libsdpa can prove "
                         "write no element twice)",
                         r->name, (long long)t->stride[0],
                         (long long)t->stride[1], (long long)t->stride[2],
                         (long long)t->stride[3]);
    size_t span;
    if (!span_elements(t, stride, &span) ||
        !sdpa_mul_size(span, r->elem_size, bytes) ||
        (uintptr_t)t->data > UINTPTR_MAX - *bytes)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward: the extent of %s overflows the "
                         "address space",
                         r->name);
    if (r->rows_for_blas &&
        (t->shape[T_DIM] > INT_MAX || t->shape[D_DIM] > INT_MAX ||
         stride[T_DIM] > INT_MAX))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward: %s has a row count, row length or "
                         "row stride above the BLAS int limit %d",
                         r->name, INT_MAX);
    r->view->data = t->data;
    memcpy(r->view->stride, stride, sizeof stride);
    return SDPA_OK;
}

typedef struct byte_range {
    const char *name;
    bool is_output;
    uintptr_t begin, end;
} byte_range;

static bool ranges_meet(const byte_range *a, const byte_range *b)
{
    return a->begin < b->end && b->begin < a->end;
}

/* Is any key allowed for this row by the mask and the bias (keys below
 * limit only)? Stops at the first allowed key. */
static bool row_has_allowed_key(const sdpa_problem *p, int64_t b, int64_t h,
                                int64_t i, int64_t start, int64_t limit)
{
    const uint8_t *mask = NULL;
    const char *bias = NULL;
    if (p->mask.data)
        mask = (const uint8_t *)sdpa_at(&p->mask, 1, b, h, i);
    if (p->bias.data)
        bias = sdpa_at(&p->bias, sdpa_dtype_size(p->bias_type), b, h, i);
    const int64_t mask_step = p->mask.stride[D_DIM];
    const int64_t bias_step = p->bias.stride[D_DIM];
    for (int64_t j = start; j < limit; j++) {
        if (mask && (mask[j * mask_step] != 0) != p->mask_nonzero_allows)
            continue;
        if (bias &&
            sdpa_value_at(bias, p->bias_type, j * bias_step) == -INFINITY)
            continue;
        return true;
    }
    return false;
}

/* The fully-masked-row rule (docs/SEMANTICS.md): a row with no allowed key
 * is an error (unless the context chose the zero-row convention). Found
 * here, before any write. */
static int check_rows_have_keys(sdpa_ctx *ctx, const sdpa_problem *p)
{
    /* Only the dimensions along which a row's allowed keys can change are
     * walked, so the check costs what the mask and bias hold (a shape of
     * stride-0 broadcasts can be huge): items when kv_lens or a mask/bias
     * differs per item; heads when a mask/bias differs per head; rows when
     * a window, or causality or a mask/bias, differs per row. Without a
     * window rows see more keys further down (the causal limits never
     * decrease), so without mask or bias row 0 stands for all. */
    bool scan = p->mask.data || p->bias.data;
    bool window = p->window_left >= 0 || p->window_right >= 0;
    bool varies[3] = {p->kv_lens != NULL, false,
                      window || (scan && p->causal != SDPA_CAUSAL_NONE)};
    for (int d = 0; d < 3; d++) {
        varies[d] |= p->mask.data && p->mask.stride[d] != 0;
        varies[d] |= p->bias.data && p->bias.stride[d] != 0;
    }
    int64_t items = varies[0] ? p->batch : 1;
    int64_t heads = varies[1] ? p->heads_q : 1;
    int64_t rows = varies[2] ? p->len_q : 1;
    for (int64_t b = 0; b < items; b++)
        for (int64_t h = 0; h < heads; h++)
            for (int64_t i = 0; i < rows; i++) {
                int64_t start = sdpa_key_start(p, b, i);
                int64_t limit = sdpa_key_limit(p, b, i);
                if (limit > start &&
                    (!scan || row_has_allowed_key(p, b, h, i, start, limit)))
                    continue;
                return sdpa_fail(
                    ctx, SDPA_ERR_FULLY_MASKED_ROW,
                    "sdpa_forward: batch %lld%s, head %lld%s, query row "
                    "%lld%s has no allowed key (%s); set SDPA_OPT_EMPTY_ROWS "
                    "to SDPA_EMPTY_ROWS_ZERO to get a zero row instead",
                    (long long)b,
                    items == 1 && p->batch > 1 ? " (and every item)" : "",
                    (long long)h,
                    heads == 1 && p->heads_q > 1 ? " (and every head)" : "",
                    (long long)i,
                    rows == 1 && p->len_q > 1 && scan ? " (and every row)" : "",
                    limit <= start
                        ? "key length, causal mask and window exclude all"
                        : "mask/bias forbid every key");
            }
    return SDPA_OK;
}

/* Hq values of a per-head array (ALiBi slopes, sinks): finite, and in a
 * float32 call within float's range. */
static int check_per_head(sdpa_ctx *ctx, const double *values, int64_t heads,
                          int dtype, int status, const char *what)
{
    for (int64_t h = 0; h < heads; h++) {
        double v = values[h];
        if (!isfinite(v) || (dtype == SDPA_FLOAT32 && fabs(v) > FLT_MAX))
            return sdpa_fail(
                ctx, status, "sdpa_forward: %s[%lld] is %g, must be finite%s",
                what, (long long)h, v,
                dtype == SDPA_FLOAT32 ? " and within float32" : "");
    }
    return SDPA_OK;
}

/* The fields appended in 1.1: window, ALiBi slopes, sinks, logits stage
 * (the logits tensor itself is checked with the others). Resolves them into
 * p; a window side wider than Tq + Tk is unbounded. */
static int check_appended(sdpa_ctx *ctx, const sdpa_forward_args *args,
                          sdpa_problem *p)
{
    p->window_left = p->window_right = -1;
    if (args->flags & SDPA_FLAG_WINDOW) {
        const int64_t side[2] = {args->window_left, args->window_right};
        for (int s = 0; s < 2; s++)
            if (side[s] < -1)
                return sdpa_fail(ctx, SDPA_ERR_BAD_WINDOW,
                                 "sdpa_forward: window_%s is %lld, must be "
                                 "-1 (unbounded) or at least 0",
                                 s ? "right" : "left", (long long)side[s]);
        int64_t wide = p->len_q + p->len_k;
        p->window_left = args->window_left > wide ? -1 : args->window_left;
        p->window_right = args->window_right > wide ? -1 : args->window_right;
    } else if (args->window_left != 0 || args->window_right != 0) {
        return sdpa_fail(ctx, SDPA_ERR_BAD_WINDOW,
                         "sdpa_forward: window_left %lld and window_right "
                         "%lld are set but flags lack SDPA_FLAG_WINDOW",
                         (long long)args->window_left,
                         (long long)args->window_right);
    }
    int status = SDPA_OK;
    if (args->alibi_slopes)
        status = check_per_head(ctx, args->alibi_slopes, p->heads_q, p->dtype,
                                SDPA_ERR_BAD_ALIBI, "alibi_slopes");
    if (status == SDPA_OK && args->sinks)
        status = check_per_head(ctx, args->sinks, p->heads_q, p->dtype,
                                SDPA_ERR_BAD_SINK, "sinks");
    if (status != SDPA_OK)
        return status;
    p->alibi_slopes = args->alibi_slopes;
    p->sinks = args->sinks;
    bool has_logits = args->logits.data != NULL;
    int stage = args->logits_stage;
    bool known = stage == SDPA_LOGITS_SCALED || stage == SDPA_LOGITS_CAPPED ||
                 stage == SDPA_LOGITS_MASKED;
    if (has_logits != (stage != 0) || (stage != 0 && !known))
        return sdpa_fail(ctx, SDPA_ERR_BAD_LOGITS_STAGE,
                         "sdpa_forward: logits_stage is %d %s the logits "
                         "output; it must be an SDPA_LOGITS_* value exactly "
                         "when logits.data is set",
                         stage, has_logits ? "with" : "without");
    p->logits_stage = stage;
    return SDPA_OK;
}

static const char *type_name(int type)
{
    static const char *const names[] = {"", "SDPA_FLOAT32", "SDPA_FLOAT64",
                                        "SDPA_FLOAT16", "SDPA_BFLOAT16"};
    return type >= SDPA_FLOAT32 && type <= SDPA_BFLOAT16 ? names[type]
                                                         : "unknown";
}

/* The storage types (1.1): dtype, and kv_dtype / bias_dtype (0: dtype).
 * float32 and the half types mix freely and compute in float32; float64
 * computes in float64 and mixes with nothing. */
static int check_types(sdpa_ctx *ctx, const sdpa_forward_args *args,
                       int *compute)
{
    const struct {
        const char *name;
        int type;
        bool zero_means_dtype;
    } types[3] = {{"dtype", args->dtype, false},
                  {"kv_dtype", args->kv_dtype, true},
                  {"bias_dtype", args->bias_dtype, true}};
    bool f64 = false, other = false;
    for (int i = 0; i < 3; i++) {
        int t = types[i].type;
        if (t == 0 && types[i].zero_means_dtype)
            continue;
        if (t < SDPA_FLOAT32 || t > SDPA_BFLOAT16)
            return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                             "sdpa_forward: %s %d is not SDPA_FLOAT32, "
                             "SDPA_FLOAT64, SDPA_FLOAT16 or SDPA_BFLOAT16%s",
                             types[i].name, t,
                             types[i].zero_means_dtype ? " (or 0: dtype's)"
                                                       : "");
        f64 |= t == SDPA_FLOAT64;
        other |= t != SDPA_FLOAT64;
    }
    if (f64 && other)
        return sdpa_fail(
            ctx, SDPA_ERR_BAD_DTYPE,
            "sdpa_forward: dtype %s, kv_dtype %s and bias_dtype "
            "%s mix SDPA_FLOAT64 with a float32 or half type; "
            "float64 calls are float64 throughout",
            type_name(args->dtype),
            type_name(args->kv_dtype ? args->kv_dtype : args->dtype),
            type_name(args->bias_dtype ? args->bias_dtype : args->dtype));
    *compute = f64 ? SDPA_FLOAT64 : SDPA_FLOAT32;
    return SDPA_OK;
}

/* Paged K/V (1.1): *paged says whether there is a block table (then *tk
 * becomes the logical key length pages_per_seq · page). A bad field is
 * SDPA_ERR_BAD_PAGE, a key count beyond the BLAS int SDPA_ERR_OVERFLOW
 * (the message is set). The table's entries are checked by
 * check_block_table once kv_lens is known. */
static int check_paging(sdpa_ctx *ctx, const sdpa_forward_args *args,
                        int64_t *tk, bool *paged)
{
    *paged = false;
    if (!args->block_table) {
        if (args->pages_per_seq == 0 && args->block_table_stride == 0)
            return SDPA_OK;
        return sdpa_fail(
            ctx, SDPA_ERR_BAD_PAGE,
            "sdpa_forward: pages_per_seq %lld and block_table_stride "
            "%lld are set but block_table is NULL",
            (long long)args->pages_per_seq,
            (long long)args->block_table_stride);
    }
    int64_t cols = args->pages_per_seq, page = args->k.shape[T_DIM];
    if (cols < 1 || cols > INT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                         "sdpa_forward: pages_per_seq is %lld, must be in "
                         "[1, %d] with a block_table",
                         (long long)cols, INT_MAX);
    if (args->block_table_stride != 0 && args->block_table_stride < cols)
        return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                         "sdpa_forward: block_table_stride is %lld, below "
                         "pages_per_seq %lld (0 means pages_per_seq)",
                         (long long)args->block_table_stride, (long long)cols);
    /* page > 0 is checked with k's shape; the product must fit the BLAS
     * int like any key count */
    if (page > 0 && cols > INT_MAX / page)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward: pages_per_seq %lld times the page "
                         "length %lld (k.shape[2]) overflows the key count",
                         (long long)cols, (long long)page);
    *tk = cols * (page > 0 ? page : 1);
    *paged = true;
    return SDPA_OK;
}

/* Every block table entry of a page that holds valid keys (kv_lens[b],
 * else Tk) must name a page of the pool; *range is the table's bytes. */
static int check_block_table(sdpa_ctx *ctx, const sdpa_forward_args *args,
                             int64_t n, int64_t tk, byte_range *range)
{
    int64_t cols = args->pages_per_seq, page = args->k.shape[T_DIM];
    int64_t stride = args->block_table_stride ? args->block_table_stride : cols;
    int64_t pool = args->k.shape[N_DIM];
    size_t entries, bytes;
    if (!sdpa_mul_size((size_t)(n - 1), (size_t)stride, &entries) ||
        !sdpa_add_size(entries, (size_t)cols, &entries) ||
        !sdpa_mul_size(entries, sizeof(int32_t), &bytes) ||
        (uintptr_t)args->block_table > UINTPTR_MAX - bytes)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_forward: the block table (%lld rows of stride "
                         "%lld) overflows the address space",
                         (long long)n, (long long)stride);
    for (int64_t b = 0; b < n; b++) {
        int64_t valid = args->kv_lens ? args->kv_lens[b] : tk;
        int64_t used = (valid + page - 1) / page;
        for (int64_t c = 0; c < used; c++) {
            int32_t entry = args->block_table[b * stride + c];
            if (entry < 0 || entry >= pool)
                return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                                 "sdpa_forward: block_table[%lld][%lld] is "
                                 "%d, outside the pool's %lld pages "
                                 "(k.shape[0]); it holds keys [%lld, %lld) "
                                 "of batch item %lld",
                                 (long long)b, (long long)c, entry,
                                 (long long)pool, (long long)(c * page),
                                 (long long)((c + 1) * page), (long long)b);
        }
    }
    *range = (byte_range){"block_table", false, (uintptr_t)args->block_table,
                          (uintptr_t)args->block_table + bytes};
    return SDPA_OK;
}

int sdpa_validate(sdpa_ctx *ctx, const sdpa_forward_args *args, sdpa_problem *p)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    ctx->message[0] = '\0';
    if (!args)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_forward: args is NULL");
    /* From here on, the caller's struct is read through a zero-filled copy
     * of this library's size: a 1.0 caller's 624 bytes are all it has. */
    sdpa_forward_args known;
    int imported = sdpa_struct_import(ctx, "sdpa_forward: args", args,
                                      SDPA_ARGS_SIZE_V1, &known, sizeof known);
    if (imported != SDPA_OK)
        return imported;
    args = &known;
    int compute = SDPA_FLOAT32;
    int typed = check_types(ctx, args, &compute);
    if (typed != SDPA_OK)
        return typed;
    if (args->flags & ~KNOWN_FLAGS)
        return sdpa_fail(ctx, SDPA_ERR_BAD_FLAGS,
                         "sdpa_forward: unknown flag bits 0x%x",
                         (unsigned)(args->flags & ~KNOWN_FLAGS));
    if (args->causal != SDPA_CAUSAL_NONE &&
        args->causal != SDPA_CAUSAL_TOP_LEFT &&
        args->causal != SDPA_CAUSAL_BOTTOM_RIGHT)
        return sdpa_fail(ctx, SDPA_ERR_BAD_CAUSAL,
                         "sdpa_forward: causal is %d, not an SDPA_CAUSAL_* "
                         "value",
                         args->causal);
    if (!(isfinite(args->scale) && args->scale >= 0))
        return sdpa_fail(ctx, SDPA_ERR_BAD_SCALE,
                         "sdpa_forward: scale %g must be finite and positive "
                         "(0 selects 1/sqrt(Dk))",
                         args->scale);
    if (!(isfinite(args->softcap) && args->softcap >= 0))
        return sdpa_fail(ctx, SDPA_ERR_BAD_SOFTCAP,
                         "sdpa_forward: softcap %g must be finite and "
                         "positive (0 turns it off)",
                         args->softcap);
    /* The kernels compute in the dtype: a float32 call rounds scale and
     * soft-cap to float, where a value above FLT_MAX would be infinite and
     * every logit NaN or infinite. */
    if (compute == SDPA_FLOAT32 && args->scale > FLT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_BAD_SCALE,
                         "sdpa_forward: scale %g is beyond the float32 range "
                         "(FLT_MAX = %g) of this float32 call",
                         args->scale, (double)FLT_MAX);
    /* ... and a positive value that rounds to 0 in float would be no scale
     * (a BLAS alpha of 0 reads neither q nor k) or a division by 0. */
    if (compute == SDPA_FLOAT32 && args->scale > 0 &&
        (float)args->scale == 0.0f)
        return sdpa_fail(ctx, SDPA_ERR_BAD_SCALE,
                         "sdpa_forward: scale %g rounds to 0 in this float32 "
                         "call",
                         args->scale);
    if (compute == SDPA_FLOAT32 && args->softcap > 0 &&
        (float)args->softcap == 0.0f)
        return sdpa_fail(ctx, SDPA_ERR_BAD_SOFTCAP,
                         "sdpa_forward: softcap %g rounds to 0 in this float32 "
                         "call",
                         args->softcap);
    if (compute == SDPA_FLOAT32 && args->softcap > FLT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_BAD_SOFTCAP,
                         "sdpa_forward: softcap %g is beyond the float32 "
                         "range (FLT_MAX = %g) of this float32 call",
                         args->softcap, (double)FLT_MAX);

    memset(p, 0, sizeof *p);
    p->dtype = compute;
    p->elem_size = sdpa_dtype_size(compute);
    p->q_type = p->out_type = args->dtype;
    p->kv_type = args->kv_dtype ? args->kv_dtype : args->dtype;
    p->bias_type = args->bias_dtype ? args->bias_dtype : args->dtype;
    p->causal = args->causal;
    p->mask_nonzero_allows = (args->flags & SDPA_FLAG_MASK_NONZERO_ALLOWS) != 0;
    p->empty_rows_zero =
        ctx->options[SDPA_OPT_EMPTY_ROWS] == SDPA_EMPTY_ROWS_ZERO;
    p->softcap = args->softcap;

    int64_t n = args->q.shape[N_DIM], hq = args->q.shape[H_DIM];
    int64_t tq = args->q.shape[T_DIM], dk = args->q.shape[D_DIM];
    int64_t hkv = args->k.shape[H_DIM], tk = args->k.shape[T_DIM];
    int64_t dv = args->v.shape[D_DIM];
    const size_t es = p->elem_size, q_es = sdpa_dtype_size(p->q_type);
    const size_t kv_es = sdpa_dtype_size(p->kv_type);
    const size_t bias_es = sdpa_dtype_size(p->bias_type);
    /* q fixes N, Hq, Tq and Dk; k fixes Hkv and Tk; v fixes Dv. Paged, k
     * fixes the pool's pages and the page length, and Tk is the block
     * table's keys. */
    const extent N = {n, "q.shape[0] (N)"}, HQ = {hq, "q.shape[1] (Hq)"};
    const extent TQ = {tq, "q.shape[2] (Tq)"}, DK = {dk, "q.shape[3] (Dk)"};
    const extent HKV = {hkv, "k.shape[1] (Hkv)"};
    extent TK = {tk, "k.shape[2] (Tk)"}, KV_N = N, KV_T = TK;
    const extent DV = {dv, "v.shape[3] (Dv)"};
    const extent ONE = {1, "its extent (one value per row)"};
    bool paged;
    int paging = check_paging(ctx, args, &tk, &paged);
    if (paging != SDPA_OK)
        return paging; /* BAD_PAGE, or OVERFLOW for the key count */
    if (paged) {
        TK = (extent){tk, "pages_per_seq * k.shape[2] (Tk)"};
        KV_N = (extent){args->k.shape[N_DIM], "k.shape[0] (pages)"};
        KV_T = (extent){args->k.shape[T_DIM], "k.shape[2] (page)"};
    }
    /* clang-format off */
    /* Inputs, then outputs; what each may do is spelled out per tensor
     * (every flag not named is false). */
    tensor_rule rules[] = {
        {.name = "q", .tensor = &args->q, .view = &p->q, .required = true,
         .rows_for_blas = true, .elem_size = q_es, .expect = {N, HQ, TQ, DK}},
        {.name = "k", .tensor = &args->k, .view = &p->k, .required = true,
         .rows_for_blas = true, .elem_size = kv_es,
         .expect = {KV_N, HKV, KV_T, DK}},
        {.name = "v", .tensor = &args->v, .view = &p->v, .required = true,
         .rows_for_blas = true, .elem_size = kv_es,
         .expect = {KV_N, HKV, KV_T, DV}},
        {.name = "mask", .tensor = &args->mask, .view = &p->mask,
         .broadcastable = true, .any_inner = true, .elem_size = 1,
         .expect = {N, HQ, TQ, TK}},
        {.name = "bias", .tensor = &args->bias, .view = &p->bias,
         .broadcastable = true, .any_inner = true, .elem_size = bias_es,
         .expect = {N, HQ, TQ, TK}},
        {.name = "out", .tensor = &args->out, .view = &p->out,
         .required = true, .is_output = true, .rows_for_blas = true,
         .elem_size = sdpa_dtype_size(p->out_type),
         .expect = {N, HQ, TQ, DV}},
        {.name = "weights", .tensor = &args->weights, .view = &p->weights,
         .is_output = true, .rows_for_blas = true, .elem_size = es,
         .expect = {N, HQ, TQ, TK}},
        {.name = "lse", .tensor = &args->lse, .view = &p->lse,
         .is_output = true, .inner_unused = true, .elem_size = es,
         .expect = {N, HQ, TQ, ONE}},
        {.name = "logits", .tensor = &args->logits, .view = &p->logits,
         .is_output = true, .elem_size = es, .expect = {N, HQ, TQ, TK}},
        {.name = "max_weight", .tensor = &args->max_weight,
         .view = &p->max_weight, .is_output = true, .inner_unused = true,
         .elem_size = es, .expect = {N, HQ, TQ, ONE}},
        {.name = "entropy", .tensor = &args->entropy, .view = &p->entropy,
         .is_output = true, .inner_unused = true, .elem_size = es,
         .expect = {N, HQ, TQ, ONE}},
    };
    /* clang-format on */
    enum { RULES = sizeof rules / sizeof rules[0] };
    for (int i = 0; i < RULES; i++)
        if (rules[i].required && !rules[i].tensor->data)
            return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                             "sdpa_forward: %s.data is NULL", rules[i].name);
    if (hq > 0 && hkv > 0 && hq % hkv != 0)
        return sdpa_fail(ctx, SDPA_ERR_HEAD_GROUPING,
                         "sdpa_forward: q has %lld heads, not a multiple of "
                         "the %lld heads of k",
                         (long long)hq, (long long)hkv);

    byte_range ranges[RULES + 2];
    int nranges = 0;
    for (int i = 0; i < RULES; i++) {
        tensor_rule *r = &rules[i];
        if (!r->tensor->data)
            continue;
        /* K and V may be shared by every batch item (extent 1). */
        if ((r->view == &p->k || r->view == &p->v) && !paged &&
            r->tensor->shape[N_DIM] == 1)
            r->expect[N_DIM].value = 1;
        int status = check_shape(ctx, r);
        if (status == SDPA_OK) {
            size_t bytes = 0;
            status = check_strides(ctx, r, &bytes);
            ranges[nranges++] =
                (byte_range){r->name, r->is_output, (uintptr_t)r->tensor->data,
                             (uintptr_t)r->tensor->data + bytes};
        }
        if (status != SDPA_OK)
            return status;
    }

    if (args->kv_lens) {
        for (int64_t b = 0; b < n; b++)
            if (args->kv_lens[b] < 0 || args->kv_lens[b] > tk)
                return sdpa_fail(ctx, SDPA_ERR_BAD_KV_LEN,
                                 "sdpa_forward: kv_lens[%lld] is %lld, "
                                 "outside [0, Tk = %lld]",
                                 (long long)b, (long long)args->kv_lens[b],
                                 (long long)tk);
        ranges[nranges++] =
            (byte_range){"kv_lens", false, (uintptr_t)args->kv_lens,
                         (uintptr_t)(args->kv_lens + n)};
    }

    if (paged) {
        int status = check_block_table(ctx, args, n, tk, &ranges[nranges++]);
        if (status != SDPA_OK)
            return status;
        p->block_table = args->block_table;
        p->table_stride = args->block_table_stride ? args->block_table_stride
                                                   : args->pages_per_seq;
        p->page_len = args->k.shape[T_DIM];
    }

    /* Outputs must not meet each other or any input. */
    for (int a = 0; a < nranges; a++)
        for (int b = a + 1; b < nranges; b++) {
            bool a_out = ranges[a].is_output, b_out = ranges[b].is_output;
            if ((a_out || b_out) && ranges_meet(&ranges[a], &ranges[b]))
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 "sdpa_forward: output %s overlaps %s %s (the "
                                 "address ranges from first to last element "
                                 "must be disjoint, interleaved or not)",
                                 b_out ? ranges[b].name : ranges[a].name,
                                 a_out && b_out ? "output" : "input",
                                 b_out ? ranges[a].name : ranges[b].name);
        }

    p->batch = n;
    p->heads_q = hq;
    p->heads_kv = hkv;
    p->group = hq / hkv;
    p->len_q = tq;
    p->len_k = tk;
    p->dim_k = dk;
    p->dim_v = dv;
    p->scale = args->scale != 0 ? args->scale : 1.0 / sqrt((double)dk);
    p->kv_lens = args->kv_lens;
    p->diagnostics = p->max_weight.data || p->entropy.data;
    int appended = check_appended(ctx, args, p);
    if (appended != SDPA_OK)
        return appended;

    /* With a sink no row is empty: it always has the sink. */
    if (!p->empty_rows_zero && !p->sinks)
        return check_rows_have_keys(ctx, p);
    return SDPA_OK;
}
