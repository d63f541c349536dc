/*
 * Validation: every argument, every size and every promise of sdpa_forward is
 * checked here, before anything is allocated or written. The result is a
 * resolved sdpa_problem (defaults applied, broadcast strides zeroed).
 */
#include "core/context.h"
#include "core/checked.h"
#include "core/problem.h"
#include "forward/validate.h"
#include "forward/key_range.h"
#include "core/tensor_check.h"
#include "kernels/quant.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define KNOWN_FLAGS                                                            \
    ((uint32_t)(SDPA_FLAG_MASK_NONZERO_ALLOWS | SDPA_FLAG_WINDOW))

enum { N_DIM, H_DIM, T_DIM, D_DIM };

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
static int check_rows_have_keys(sdpa_ctx *ctx, const char *who,
                                const sdpa_problem *p)
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
                    "%s: batch %lld%s, head %lld%s, query row "
                    "%lld%s has no allowed key (%s); set SDPA_OPT_EMPTY_ROWS "
                    "to SDPA_EMPTY_ROWS_ZERO to get a zero row instead",
                    who, (long long)b,
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
static int check_per_head(sdpa_ctx *ctx, const char *who, const double *values,
                          int64_t heads, int dtype, int status,
                          const char *what)
{
    for (int64_t h = 0; h < heads; h++) {
        double v = values[h];
        if (!isfinite(v) || (dtype == SDPA_FLOAT32 && fabs(v) > FLT_MAX))
            return sdpa_fail(
                ctx, status, "%s: %s[%lld] is %g, must be finite%s", who, what,
                (long long)h, v,
                dtype == SDPA_FLOAT32 ? " and within float32" : "");
    }
    return SDPA_OK;
}

/* The fields appended in 1.1: window, ALiBi slopes, sinks, logits stage
 * (the logits tensor itself is checked with the others). Resolves them into
 * p; a window side wider than Tq + Tk is unbounded. */
static int check_appended(sdpa_ctx *ctx, const char *who,
                          const sdpa_forward_args *args, sdpa_problem *p)
{
    p->window_left = p->window_right = -1;
    if (args->flags & SDPA_FLAG_WINDOW) {
        const int64_t side[2] = {args->window_left, args->window_right};
        for (int s = 0; s < 2; s++)
            if (side[s] < -1)
                return sdpa_fail(ctx, SDPA_ERR_BAD_WINDOW,
                                 "%s: window_%s is %lld, must be "
                                 "-1 (unbounded) or at least 0",
                                 who, s ? "right" : "left", (long long)side[s]);
        int64_t wide = p->len_q + p->len_k;
        p->window_left = args->window_left > wide ? -1 : args->window_left;
        p->window_right = args->window_right > wide ? -1 : args->window_right;
    } else if (args->window_left != 0 || args->window_right != 0) {
        return sdpa_fail(ctx, SDPA_ERR_BAD_WINDOW,
                         "%s: window_left %lld and window_right "
                         "%lld are set but flags lack SDPA_FLAG_WINDOW",
                         who, (long long)args->window_left,
                         (long long)args->window_right);
    }
    int status = SDPA_OK;
    if (args->alibi_slopes)
        status = check_per_head(ctx, who, args->alibi_slopes, p->heads_q,
                                p->dtype, SDPA_ERR_BAD_ALIBI, "alibi_slopes");
    if (status == SDPA_OK && args->sinks)
        status = check_per_head(ctx, who, args->sinks, p->heads_q, p->dtype,
                                SDPA_ERR_BAD_SINK, "sinks");
    if (status != SDPA_OK)
        return status;
    p->alibi_slopes = args->alibi_slopes;
    p->sinks = args->sinks;
    /* The row and the key's block are 32-bit counter words. */
    if (args->dropout_p > 0 &&
        (p->len_q > (int64_t)UINT32_MAX || p->len_k / 4 > (int64_t)UINT32_MAX))
        return sdpa_fail(ctx, SDPA_ERR_BAD_DROPOUT,
                         "%s: dropout needs Tq below 2^32 and Tk below 2^34, "
                         "but Tq is %lld and Tk %lld",
                         who, (long long)p->len_q, (long long)p->len_k);
    p->dropout = args->dropout_p > 0;
    p->dropout_p = args->dropout_p;
    /* exact: p · 2^32 only moves the exponent, and is below 2^32 */
    p->dropout_threshold = (uint32_t)floor(args->dropout_p * 4294967296.0);
    p->dropout_seed = args->dropout_seed;
    p->dropout_offset = args->dropout_offset;
    bool has_logits = args->logits.data != NULL;
    int stage = args->logits_stage;
    bool known = stage == SDPA_LOGITS_SCALED || stage == SDPA_LOGITS_CAPPED ||
                 stage == SDPA_LOGITS_MASKED;
    if (has_logits != (stage != 0) || (stage != 0 && !known))
        return sdpa_fail(ctx, SDPA_ERR_BAD_LOGITS_STAGE,
                         "%s: logits_stage is %d %s the logits "
                         "output; it must be an SDPA_LOGITS_* value exactly "
                         "when logits.data is set",
                         who, stage, has_logits ? "with" : "without");
    p->logits_stage = stage;
    return SDPA_OK;
}

static const char *type_name(int type)
{
    static const char *const names[] = {"",
                                        "SDPA_FLOAT32",
                                        "SDPA_FLOAT64",
                                        "SDPA_FLOAT16",
                                        "SDPA_BFLOAT16",
                                        "SDPA_FP8_E4M3",
                                        "SDPA_FP8_E5M2",
                                        "SDPA_Q8_0",
                                        "SDPA_Q4_0"};
    return type >= SDPA_FLOAT32 && type <= SDPA_Q4_0 ? names[type] : "unknown";
}

/* The storage types (1.1): dtype, and kv_dtype / bias_dtype (0: dtype).
 * float32 and the half types mix freely and compute in float32, as do the
 * quantized types of k and v (1.2); float64 computes in float64 and mixes
 * with nothing. */
static int check_types(sdpa_ctx *ctx, const char *who,
                       const sdpa_forward_args *args, int *compute)
{
    const struct {
        const char *name;
        int type;
        bool zero_means_dtype, quantized;
    } types[3] = {{"dtype", args->dtype, false, false},
                  {"kv_dtype", args->kv_dtype, true, true},
                  {"bias_dtype", args->bias_dtype, true, false}};
    bool f64 = false, other = false;
    for (int i = 0; i < 3; i++) {
        int t = types[i].type;
        if (t == 0 && types[i].zero_means_dtype)
            continue;
        if (t < SDPA_FLOAT32 ||
            t > (types[i].quantized ? SDPA_Q4_0 : SDPA_BFLOAT16))
            return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                             "%s: %s %d is not SDPA_FLOAT32, "
                             "SDPA_FLOAT64, SDPA_FLOAT16 or SDPA_BFLOAT16%s%s",
                             who, types[i].name, t,
                             types[i].quantized
                                 ? ", or a quantized K/V type (SDPA_FP8_E4M3, "
                                   "SDPA_FP8_E5M2, SDPA_Q8_0, SDPA_Q4_0)"
                                 : "",
                             types[i].zero_means_dtype ? " (or 0: dtype's)"
                                                       : "");
        f64 |= t == SDPA_FLOAT64;
        other |= t != SDPA_FLOAT64;
    }
    if (f64 && other)
        return sdpa_fail(
            ctx, SDPA_ERR_BAD_DTYPE,
            "%s: dtype %s, kv_dtype %s and bias_dtype "
            "%s mix SDPA_FLOAT64 with a float32, half or quantized type; "
            "float64 calls are float64 throughout",
            who, type_name(args->dtype),
            type_name(args->kv_dtype ? args->kv_dtype : args->dtype),
            type_name(args->bias_dtype ? args->bias_dtype : args->dtype));
    *compute = f64 ? SDPA_FLOAT64 : SDPA_FLOAT32;
    return SDPA_OK;
}

/* k_scale and v_scale (1.2): FP8 K/V only, Hkv finite values above 0;
 * k_scale's times the call's scale not 0 in float32. */
static int check_kv_scales(sdpa_ctx *ctx, const char *who,
                           const sdpa_forward_args *args, sdpa_problem *p)
{
    const struct {
        const char *name;
        const float *values;
    } scales[2] = {{"k_scale", args->k_scale}, {"v_scale", args->v_scale}};
    for (int s = 0; s < 2; s++) {
        const float *v = scales[s].values;
        if (!v)
            continue;
        if (!sdpa_is_fp8_type(p->kv_type))
            return sdpa_fail(ctx, SDPA_ERR_BAD_KV_SCALE,
                             "%s: %s is set but kv_dtype is %s; only the FP8 "
                             "types (SDPA_FP8_E4M3, SDPA_FP8_E5M2) take "
                             "scales",
                             who, scales[s].name, type_name(p->kv_type));
        for (int64_t h = 0; h < p->heads_kv; h++) {
            if (!(v[h] > 0) || v[h] == INFINITY)
                return sdpa_fail(ctx, SDPA_ERR_BAD_KV_SCALE,
                                 "%s: %s[%lld] (KV head %lld) is %g, must be "
                                 "finite and above 0",
                                 who, scales[s].name, (long long)h,
                                 (long long)h, (double)v[h]);
            /* the head's scores are multiplied by scale · k_scale[h] in
             * float32: 0 there would be no scale (a BLAS alpha of 0 reads
             * neither q nor k, and a NaN code would go unseen), as for
             * scale itself */
            if (s == 0 && (float)(p->scale * (double)v[h]) == 0.0f)
                return sdpa_fail(ctx, SDPA_ERR_BAD_KV_SCALE,
                                 "%s: k_scale[%lld] (KV head %lld) is %g: "
                                 "times the scale %g it rounds to 0 in "
                                 "float32",
                                 who, (long long)h, (long long)h, (double)v[h],
                                 p->scale);
        }
    }
    p->k_scale = args->k_scale;
    p->v_scale = args->v_scale;
    return SDPA_OK;
}

/* k and v of a block type (1.2) are whole blocks: Dk (= q's) and Dv
 * multiples of 32, strides multiples of 32 values (block starts), the
 * innermost 1. *units gets them in blocks (shape[3] and strides over 32),
 * the units the rules and the paths address them in. */
static int check_blocks(sdpa_ctx *ctx, const char *who,
                        const sdpa_forward_args *args, int type,
                        const char *name, const sdpa_tensor *t,
                        sdpa_tensor *units)
{
    const int64_t dk = args->q.shape[D_DIM];
    if (t == &args->k && t->shape[D_DIM] != dk)
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         "%s: k.shape[3] is %lld, must be q.shape[3] (Dk) "
                         "%lld",
                         who, (long long)t->shape[D_DIM], (long long)dk);
    if (t->shape[D_DIM] % SDPA_QUANT_BLOCK != 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                         "%s: %s.shape[3] is %lld, not a multiple of 32: %s "
                         "rows are whole blocks of 32 values",
                         who, name, (long long)t->shape[D_DIM],
                         type_name(type));
    if (t->stride[D_DIM] != 1)
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "%s: %s.stride[3] is %lld, the innermost stride must "
                         "be 1",
                         who, name, (long long)t->stride[D_DIM]);
    int status = sdpa_check_block_strides(ctx, who, name, t, type);
    if (status != SDPA_OK)
        return status;
    *units = sdpa_tensor_in_units(*t, type);
    return SDPA_OK;
}

int sdpa_check_block_strides(sdpa_ctx *ctx, const char *who, const char *name,
                             const sdpa_tensor *t, int type)
{
    if (sdpa_dtype_values(type) == 1)
        return SDPA_OK;
    for (int d = 0; d < D_DIM; d++)
        if (t->shape[d] > 1 && t->stride[d] % SDPA_QUANT_BLOCK != 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                             "%s: %s.stride[%d] is %lld, not a multiple of "
                             "32: %s blocks start every 32 values",
                             who, name, d, (long long)t->stride[d],
                             type_name(type));
    return SDPA_OK;
}

/* Paged K/V (1.1): *paged says whether there is a block table (then *tk
 * becomes the logical key length pages_per_seq · page). A bad field is
 * SDPA_ERR_BAD_PAGE, a key count beyond the BLAS int SDPA_ERR_OVERFLOW
 * (the message is set). The table's entries are checked by
 * check_block_table once kv_lens is known. */
static int check_paging(sdpa_ctx *ctx, const char *who,
                        const sdpa_forward_args *args, int64_t *tk, bool *paged)
{
    *paged = false;
    if (!args->block_table) {
        if (args->pages_per_seq == 0 && args->block_table_stride == 0)
            return SDPA_OK;
        return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                         "%s: pages_per_seq %lld and block_table_stride "
                         "%lld are set but block_table is NULL",
                         who, (long long)args->pages_per_seq,
                         (long long)args->block_table_stride);
    }
    int64_t cols = args->pages_per_seq, page = args->k.shape[T_DIM];
    if (cols < 1 || cols > INT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                         "%s: pages_per_seq is %lld, must be in "
                         "[1, %d] with a block_table",
                         who, (long long)cols, INT_MAX);
    if (args->block_table_stride != 0 && args->block_table_stride < cols)
        return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                         "%s: block_table_stride is %lld, below "
                         "pages_per_seq %lld (0 means pages_per_seq)",
                         who, (long long)args->block_table_stride,
                         (long long)cols);
    /* page > 0 is checked with k's shape; the product must fit the BLAS
     * int like any key count */
    if (page > 0 && cols > INT_MAX / page)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%s: pages_per_seq %lld times the page "
                         "length %lld (k.shape[2]) overflows the key count",
                         who, (long long)cols, (long long)page);
    *tk = cols * (page > 0 ? page : 1);
    *paged = true;
    return SDPA_OK;
}

/* Every block table entry of a page that holds valid keys (kv_lens[b],
 * else Tk) must name a page of the pool; *range is the table's bytes. */
static int check_block_table(sdpa_ctx *ctx, const char *who,
                             const sdpa_forward_args *args, int64_t n,
                             int64_t tk, sdpa_byte_range *range)
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
                         "%s: the block table (%lld rows of stride "
                         "%lld) overflows the address space",
                         who, (long long)n, (long long)stride);
    for (int64_t b = 0; b < n; b++) {
        int64_t valid = args->kv_lens ? args->kv_lens[b] : tk;
        int64_t used = (valid + page - 1) / page;
        for (int64_t c = 0; c < used; c++) {
            int32_t entry = args->block_table[b * stride + c];
            if (entry < 0 || entry >= pool)
                return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                                 "%s: block_table[%lld][%lld] is "
                                 "%d, outside the pool's %lld pages "
                                 "(k.shape[0]); it holds keys [%lld, %lld) "
                                 "of batch item %lld",
                                 who, (long long)b, (long long)c, entry,
                                 (long long)pool, (long long)(c * page),
                                 (long long)((c + 1) * page), (long long)b);
        }
    }
    *range = (sdpa_byte_range){.name = "block_table",
                               .is_output = false,
                               .begin = (uintptr_t)args->block_table,
                               .end = (uintptr_t)args->block_table + bytes};
    return SDPA_OK;
}

/* The scalar arguments: flags, causality, scale and soft-cap (in a
 * float32 call within float's range and not rounding to 0). */
static int check_scalars(sdpa_ctx *ctx, const char *who,
                         const sdpa_forward_args *args, int compute)
{
    if (args->flags & ~KNOWN_FLAGS)
        return sdpa_fail(ctx, SDPA_ERR_BAD_FLAGS, "%s: unknown flag bits 0x%x",
                         who, (unsigned)(args->flags & ~KNOWN_FLAGS));
    if (args->causal != SDPA_CAUSAL_NONE &&
        args->causal != SDPA_CAUSAL_TOP_LEFT &&
        args->causal != SDPA_CAUSAL_BOTTOM_RIGHT)
        return sdpa_fail(ctx, SDPA_ERR_BAD_CAUSAL,
                         "%s: causal is %d, not an SDPA_CAUSAL_* value", who,
                         args->causal);
    if (!(isfinite(args->scale) && args->scale >= 0))
        return sdpa_fail(ctx, SDPA_ERR_BAD_SCALE,
                         "%s: scale %g must be finite and positive (0 selects "
                         "1/sqrt(Dk))",
                         who, args->scale);
    if (!(isfinite(args->softcap) && args->softcap >= 0))
        return sdpa_fail(ctx, SDPA_ERR_BAD_SOFTCAP,
                         "%s: softcap %g must be finite and positive (0 turns "
                         "it off)",
                         who, args->softcap);
    if (!(isfinite(args->dropout_p) && args->dropout_p >= 0 &&
          args->dropout_p < 1))
        return sdpa_fail(ctx, SDPA_ERR_BAD_DROPOUT,
                         "%s: dropout_p is %g, must be finite and in [0, 1) "
                         "(0 turns dropout off)",
                         who, args->dropout_p);
    if (compute != SDPA_FLOAT32)
        return SDPA_OK;
    /* The kernels compute in the dtype: a float32 call rounds scale and
     * soft-cap to float, where a value above FLT_MAX would be infinite and
     * every logit NaN or infinite. */
    if (args->scale > FLT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_BAD_SCALE,
                         "%s: scale %g is beyond the float32 range (FLT_MAX = "
                         "%g) of this float32 call",
                         who, args->scale, (double)FLT_MAX);
    /* ... and a positive value that rounds to 0 in float would be no scale
     * (a BLAS alpha of 0 reads neither q nor k) or a division by 0. */
    if (args->scale > 0 && (float)args->scale == 0.0f)
        return sdpa_fail(ctx, SDPA_ERR_BAD_SCALE,
                         "%s: scale %g rounds to 0 in this float32 call", who,
                         args->scale);
    if (args->softcap > 0 && (float)args->softcap == 0.0f)
        return sdpa_fail(ctx, SDPA_ERR_BAD_SOFTCAP,
                         "%s: softcap %g rounds to 0 in this float32 call", who,
                         args->softcap);
    /* c = 1/(1 − p) is computed in float: p must stay below 1 there */
    if ((float)args->dropout_p >= 1.0f)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DROPOUT,
                         "%s: dropout_p %.17g rounds to 1 in this float32 "
                         "call",
                         who, args->dropout_p);
    if (args->softcap > FLT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_BAD_SOFTCAP,
                         "%s: softcap %g is beyond the float32 range (FLT_MAX "
                         "= %g) of this float32 call",
                         who, args->softcap, (double)FLT_MAX);
    return SDPA_OK;
}

/* What the arguments say before any tensor is checked: types, causality,
 * the mask's sense, the empty-row policy, the soft-cap. */
static void resolve_settings(const sdpa_ctx *ctx, const sdpa_forward_args *args,
                             int compute, sdpa_problem *p)
{
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
}

/* Every tensor's rule: inputs, then outputs. q fixes N, Hq, Tq and Dk; k
 * fixes Hkv and Tk; v fixes Dv. Paged, k fixes the pool's pages and the
 * page length, and Tk (tk) is the block table's keys. Returns the count. */
enum { RULES = 11 };
static int make_rules(const sdpa_forward_args *args, sdpa_problem *p,
                      int64_t tk, bool paged, sdpa_tensor_rule rules[RULES])
{
    int64_t n = args->q.shape[N_DIM], hq = args->q.shape[H_DIM];
    int64_t tq = args->q.shape[T_DIM], dk = args->q.shape[D_DIM];
    int64_t hkv = args->k.shape[H_DIM], dv = args->v.shape[D_DIM];
    const size_t es = p->elem_size, q_es = sdpa_dtype_size(p->q_type);
    const size_t kv_es = sdpa_dtype_size(p->kv_type);
    const size_t bias_es = sdpa_dtype_size(p->bias_type);
    const sdpa_extent N = {n, "q.shape[0] (N)"}, HQ = {hq, "q.shape[1] (Hq)"};
    const sdpa_extent TQ = {tq, "q.shape[2] (Tq)"};
    const sdpa_extent DK = {dk, "q.shape[3] (Dk)"};
    const sdpa_extent HKV = {hkv, "k.shape[1] (Hkv)"};
    sdpa_extent TK = {tk, "k.shape[2] (Tk)"}, KV_N = N, KV_T = TK;
    const sdpa_extent DV = {dv, "v.shape[3] (Dv)"};
    const sdpa_extent ONE = {1, "its extent (one value per row)"};
    if (paged) {
        TK = (sdpa_extent){tk, "pages_per_seq * k.shape[2] (Tk)"};
        KV_N = (sdpa_extent){args->k.shape[N_DIM], "k.shape[0] (pages)"};
        KV_T = (sdpa_extent){args->k.shape[T_DIM], "k.shape[2] (page)"};
    }
    /* clang-format off */
    /* What each may do is spelled out per tensor (every flag not named is
     * false). */
    const sdpa_tensor_rule all[RULES] = {
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
    memcpy(rules, all, sizeof all);
    /* K and V may be shared by every batch item (extent 1). */
    for (int i = 1; i <= 2; i++)
        if (!paged && rules[i].tensor->shape[N_DIM] == 1)
            rules[i].expect[N_DIM].value = 1;
    return RULES;
}

/* The tensors: the required ones present, the heads grouped, then each
 * present one by its rule (its bytes into ranges[*count]). */
static int check_tensors(sdpa_ctx *ctx, const char *who,
                         const sdpa_forward_args *args, sdpa_problem *p,
                         int64_t tk, bool paged, sdpa_byte_range *ranges,
                         int *count)
{
    sdpa_tensor_rule rules[RULES];
    const int n_rules = make_rules(args, p, tk, paged, rules);
    for (int i = 0; i < n_rules; i++) {
        int status = sdpa_check_present(ctx, who, &rules[i]);
        if (status != SDPA_OK)
            return status;
    }
    int64_t hq = args->q.shape[H_DIM], hkv = args->k.shape[H_DIM];
    if (hq > 0 && hkv > 0 && hq % hkv != 0)
        return sdpa_fail(ctx, SDPA_ERR_HEAD_GROUPING,
                         "%s: q has %lld heads, not a multiple of the %lld "
                         "heads of k",
                         who, (long long)hq, (long long)hkv);
    sdpa_tensor units[2];
    if (sdpa_is_block_type(p->kv_type))
        for (int i = 1; i <= 2; i++) {
            int status = check_blocks(ctx, who, args, p->kv_type, rules[i].name,
                                      rules[i].tensor, &units[i - 1]);
            if (status != SDPA_OK)
                return status;
            rules[i].tensor = &units[i - 1];
            rules[i].expect[D_DIM].value /= SDPA_QUANT_BLOCK;
        }
    for (int i = 0; i < n_rules; i++) {
        if (!rules[i].tensor->data)
            continue;
        int status = sdpa_check_tensor(ctx, who, &rules[i], &ranges[*count]);
        ++*count;
        if (status != SDPA_OK)
            return status;
    }
    return SDPA_OK;
}

/* kv_lens within [0, Tk] (its bytes into ranges[*count]), and the block
 * table of a paged cache resolved into p. */
static int check_keys(sdpa_ctx *ctx, const char *who,
                      const sdpa_forward_args *args, sdpa_problem *p,
                      int64_t tk, bool paged, sdpa_byte_range *ranges,
                      int *count)
{
    const int64_t n = args->q.shape[N_DIM];
    if (args->kv_lens) {
        for (int64_t b = 0; b < n; b++)
            if (args->kv_lens[b] < 0 || args->kv_lens[b] > tk)
                return sdpa_fail(ctx, SDPA_ERR_BAD_KV_LEN,
                                 "%s: kv_lens[%lld] is %lld, outside [0, Tk = "
                                 "%lld]",
                                 who, (long long)b, (long long)args->kv_lens[b],
                                 (long long)tk);
        ranges[(*count)++] =
            (sdpa_byte_range){.name = "kv_lens",
                              .is_output = false,
                              .begin = (uintptr_t)args->kv_lens,
                              .end = (uintptr_t)(args->kv_lens + n)};
    }
    if (paged) {
        int status =
            check_block_table(ctx, who, args, n, tk, &ranges[(*count)++]);
        if (status != SDPA_OK)
            return status;
        p->block_table = args->block_table;
        p->table_stride = args->block_table_stride ? args->block_table_stride
                                                   : args->pages_per_seq;
        p->page_len = args->k.shape[T_DIM];
    }
    return SDPA_OK;
}

/* The extents, the scale's default and the per-row outputs into p. */
static void resolve_sizes(const sdpa_forward_args *args, int64_t tk,
                          sdpa_problem *p)
{
    p->batch = args->q.shape[N_DIM];
    p->heads_q = args->q.shape[H_DIM];
    p->heads_kv = args->k.shape[H_DIM];
    p->group = p->heads_q / p->heads_kv;
    p->len_q = args->q.shape[T_DIM];
    p->len_k = tk;
    p->dim_k = args->q.shape[D_DIM];
    p->dim_v = args->v.shape[D_DIM];
    p->scale = args->scale != 0 ? args->scale : 1.0 / sqrt((double)p->dim_k);
    p->kv_lens = args->kv_lens;
    p->diagnostics = p->max_weight.data || p->entropy.data;
}

int sdpa_validate_call(sdpa_ctx *ctx, const char *who,
                       const sdpa_forward_args *args, sdpa_problem *p)
{
    /* a ragged call comes here one sequence at a time, its fields 0; an
     * entry point that takes none must not ignore them */
    if (args->seqs != 0 || args->q_offsets || args->kv_offsets)
        return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                         "%s: takes rectangular batches only, but seqs, "
                         "q_offsets or kv_offsets is set",
                         who);
    int compute = SDPA_FLOAT32;
    int status = check_types(ctx, who, args, &compute);
    if (status == SDPA_OK)
        status = check_scalars(ctx, who, args, compute);
    if (status != SDPA_OK)
        return status;
    resolve_settings(ctx, args, compute, p);
    int64_t tk = args->k.shape[T_DIM];
    bool paged;
    status = check_paging(ctx, who, args, &tk, &paged);
    if (status != SDPA_OK)
        return status; /* BAD_PAGE, or OVERFLOW for the key count */
    sdpa_byte_range ranges[RULES + 2];
    int count = 0;
    status = check_tensors(ctx, who, args, p, tk, paged, ranges, &count);
    if (status == SDPA_OK)
        status = check_keys(ctx, who, args, p, tk, paged, ranges, &count);
    if (status == SDPA_OK)
        status = sdpa_check_disjoint(ctx, who, ranges, count);
    if (status != SDPA_OK)
        return status;
    resolve_sizes(args, tk, p);
    status = check_appended(ctx, who, args, p);
    if (status == SDPA_OK)
        status = check_kv_scales(ctx, who, args, p);
    if (status != SDPA_OK)
        return status;
    /* With a sink no row is empty: it always has the sink. */
    if (!p->empty_rows_zero && !p->sinks)
        return check_rows_have_keys(ctx, who, p);
    return SDPA_OK;
}

int sdpa_validate_settings(sdpa_ctx *ctx, const char *who,
                           const sdpa_forward_args *args)
{
    int compute = SDPA_FLOAT32;
    int status = check_types(ctx, who, args, &compute);
    if (status == SDPA_OK)
        status = check_scalars(ctx, who, args, compute);
    if (status != SDPA_OK)
        return status;
    const struct {
        const char *name;
        const void *data;
    } required[4] = {{"q", args->q.data},
                     {"k", args->k.data},
                     {"v", args->v.data},
                     {"out", args->out.data}};
    for (int i = 0; i < 4; i++)
        if (!required[i].data)
            return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, "%s: %s.data is NULL",
                             who, required[i].name);
    return SDPA_OK;
}
