/*
 * The helpers the multi-head attention layer's forward and backward passes
 * share (layer_common.h).
 */
#include "layer/layer_common.h"
#include "core/tensor_check.h"
#include "kernels/half.h"

#include <limits.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

_Static_assert(sizeof(sdpa_mha_args) >= SDPA_MHA_ARGS_SIZE_V1,
               "sdpa_mha_args only grows");

/* Are the rows evenly spaced, as one matrix of n · len rows of `width`
 * elements with a leading dimension BLAS takes? Sets *ld. */
static bool layer_uniform(const layer_rows *m, int64_t width, int64_t *ld)
{
    int64_t step;
    if (m->n == 1)
        step = m->len > 1 ? m->s2 : width;
    else if (m->len == 1)
        step = m->s0;
    else if (m->s0 == m->len * m->s2)
        step = m->s2;
    else
        return false;
    if (step < width || step > INT_MAX || m->n * m->len > INT_MAX)
        return false;
    *ld = step;
    return true;
}

/* The leading dimension of one batch item's rows (validated: <= INT_MAX,
 * and >= width when there is more than one row). */
static int64_t layer_item_ld(const layer_rows *m, int64_t width)
{
    return m->len > 1 ? m->s2 : width;
}

void sdpa_layer_gemm_layout(const layer_rows *a, int64_t ka,
                            const layer_rows *c, int64_t kc, int64_t *items,
                            int64_t *m, int64_t *lda, int64_t *ldc)
{
    *items = 1;
    *m = a->n * a->len;
    if (!layer_uniform(a, ka, lda) || !layer_uniform(c, kc, ldc)) {
        *items = a->n;
        *m = a->len;
        *lda = layer_item_ld(a, ka);
        *ldc = layer_item_ld(c, kc);
    }
}

layer_rows sdpa_layer_scratch_rows(char *scratch, size_t offset, int64_t n,
                                   int64_t len, int64_t width)
{
    return (layer_rows){scratch + offset, n, len, len * width, width};
}

int64_t *sdpa_layer_fill_positions(char *scratch, size_t at, int64_t n,
                                   int64_t len, int64_t offset, int64_t sign)
{
    int64_t *p = (int64_t *)(void *)(scratch + at);
    for (int64_t b = 0; b < n; b++)
        for (int64_t t = 0; t < len; t++)
            p[b * len + t] = sign * (offset + t);
    return p;
}

size_t sdpa_layer_take(size_t *total, size_t count, size_t size, bool *ok)
{
    size_t bytes, at = *total;
    if (!*ok || !sdpa_mul_size(count, size, &bytes) ||
        !sdpa_add_size(bytes, SDPA_ALIGN - 1, &bytes) ||
        !sdpa_add_size(at, bytes / SDPA_ALIGN * SDPA_ALIGN, total)) {
        *ok = false;
        return SIZE_MAX;
    }
    return at;
}

bool sdpa_layer_ranges_meet(const layer_range *a, const layer_range *b)
{
    return a->begin < b->end && b->begin < a->end;
}

/* The first checks of a [N, 1, T, d_model] layer tensor `name`: positive
 * extents, and shape[1] == 1. */
static int check_shape(sdpa_ctx *ctx, const char *who, const char *name,
                       const sdpa_tensor *t)
{
    for (int d = 0; d < 4; d++)
        if (t->shape[d] <= 0)
            return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                             "%s%s.shape[%d] is %lld, must be positive", who,
                             name, d, (long long)t->shape[d]);
    if (t->shape[1] != 1)
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         "%s%s.shape[1] is %lld, must be 1 (the layer's "
                         "tensors are [N, 1, T, d_model])",
                         who, name, (long long)t->shape[1]);
    return SDPA_OK;
}

/* The stride checks of a layer tensor `name` of n items and d_model e
 * whose shape is checked: strides >= 0 with the innermost 1, rows no
 * closer than their length, an output that writes no element twice (by
 * sdpa_forward's rule for its outputs), and an extent within the address
 * space. Fills *rows and *r (its bytes). */
static int check_strides(sdpa_ctx *ctx, const char *who, const char *name,
                         const sdpa_tensor *t, int64_t n, int64_t e,
                         bool output, size_t esize, layer_rows *rows,
                         layer_range *r)
{
    const int64_t len = t->shape[2];
    int64_t s0 = n > 1 ? t->stride[0] : 0, s2 = len > 1 ? t->stride[2] : 0;
    if (s0 < 0 || s2 < 0 || t->stride[3] < 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE, "%s%s has a negative stride",
                         who, name);
    if (e > 1 && t->stride[3] != 1)
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "%s%s.stride[3] is %lld, the innermost stride must "
                         "be 1",
                         who, name, (long long)t->stride[3]);
    if (len > 1 && s2 < e)
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "%s%s.stride[2] is %lld, below the row length "
                         "d_model = %lld",
                         who, name, (long long)s2, (long long)e);
    const int64_t shape[4] = {n, 1, len, e}, stride[4] = {s0, 0, s2, 1};
    if (output && sdpa_overlaps_itself(shape, stride))
        return sdpa_fail(ctx, SDPA_ERR_BAD_STRIDE,
                         "%soutput %s has strides {%lld, %lld} over items "
                         "and tokens: its rows overlap",
                         who, name, (long long)t->stride[0],
                         (long long)t->stride[2]);
    size_t span, step;
    if (!sdpa_mul_size((size_t)(n - 1), (size_t)s0, &span) ||
        !sdpa_mul_size((size_t)(len - 1), (size_t)s2, &step) ||
        !sdpa_add_size(span, step, &span) ||
        !sdpa_add_size(span, (size_t)e, &span) ||
        !sdpa_mul_size(span, esize, &span) || span > PTRDIFF_MAX ||
        (uintptr_t)t->data > UINTPTR_MAX - span)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%sthe extent of %s overflows the address space", who,
                         name);
    *rows = (layer_rows){t->data, n, len, s0, s2};
    *r = (layer_range){name, (uintptr_t)t->data, (uintptr_t)t->data + span};
    return SDPA_OK;
}

int sdpa_layer_check_heads(sdpa_ctx *ctx, const char *who, const char *field,
                           const sdpa_mha_args *a, int64_t n, int64_t e,
                           int64_t *hq, int64_t *hkv, int64_t *dk, int64_t *dv)
{
    const struct {
        const char *name;
        int64_t value;
    } counts[] = {{"heads_q", a->heads_q},
                  {"heads_kv", a->heads_kv},
                  {"dim_k", a->dim_k},
                  {"dim_v", a->dim_v}};
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++)
        if (counts[i].value < 0 || (i == 0 && counts[i].value == 0))
            return sdpa_fail(ctx, SDPA_ERR_BAD_DIM,
                             "%s%s%s is %lld, must be %s", who, field,
                             counts[i].name, (long long)counts[i].value,
                             i == 0 ? "positive" : "positive (or 0: default)");
    const int64_t q = a->heads_q, kv = a->heads_kv ? a->heads_kv : q;
    if (q % kv != 0)
        return sdpa_fail(ctx, SDPA_ERR_HEAD_GROUPING,
                         "%sheads_q %lld is not a multiple of heads_kv %lld",
                         who, (long long)q, (long long)kv);
    if (a->dim_k == 0 && e % q != 0)
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         "%sdim_k is 0 (d_model / heads_q), but d_model %lld "
                         "is not a multiple of heads_q %lld",
                         who, (long long)e, (long long)q);
    const int64_t k = a->dim_k ? a->dim_k : e / q;
    const int64_t v = a->dim_v ? a->dim_v : k;
    /* every gemm dimension and row count within BLAS's int */
    const int64_t limit = INT_MAX;
    if (e > limit || q > limit / k || q > limit / v || n > limit)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%sd_model, heads_q · dim_k or heads_q · dim_v is "
                         "above the BLAS int limit %d",
                         who, INT_MAX);
    *hq = q, *hkv = kv, *dk = k, *dv = v;
    return SDPA_OK;
}

/* The rules of the positional settings of *a that need no shapes: nothing
 * set with SDPA_POS_NONE, and pos_base finite and >= 0. */
static int check_pos_values(sdpa_ctx *ctx, const char *who,
                            const sdpa_mha_args *a)
{
    if (a->positions == SDPA_POS_NONE &&
        (a->pos_base != 0 || a->pos_offset != 0 || a->pos_q || a->pos_kv))
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "%spos_base, pos_offset, pos_q or pos_kv is set, "
                         "but positions is SDPA_POS_NONE",
                         who);
    if (!sdpa_position_base_ok(a->pos_base))
        return sdpa_fail(ctx, SDPA_ERR_BAD_SCALE,
                         "%spos_base %g must be 0 (selects 10000) or finite "
                         "and at least 1",
                         who, a->pos_base);
    return SDPA_OK;
}

/* pos_offset + the longer of tq and tk tokens must not overflow int64. */
static int check_pos_offset(sdpa_ctx *ctx, const char *who, int64_t offset,
                            int64_t tq, int64_t tk)
{
    int64_t longest = tq > tk ? tq : tk;
    if (offset > 0 && longest - 1 > INT64_MAX - offset)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%spos_offset %lld + %lld tokens overflows int64", who,
                         (long long)offset, (long long)longest);
    return SDPA_OK;
}

int sdpa_layer_import_attn(sdpa_ctx *ctx, const char *who, const char *field,
                           const sdpa_forward_args *attn,
                           const layer_problem *p, const char *dtype_hint,
                           sdpa_forward_args *f)
{
    if (attn) {
        char what[64];
        (void)snprintf(what, sizeof what, "%s%s", who, field);
        int imported = sdpa_struct_import(ctx, what, attn, SDPA_ARGS_SIZE_V1, f,
                                          sizeof *f);
        if (imported != SDPA_OK)
            return imported;
    } else {
        memset(f, 0, sizeof *f);
    }
    const struct {
        const char *name;
        const sdpa_tensor *t;
    } made[] = {{"q", &f->q},
                {"k", &f->k},
                {"v", &f->v},
                {"out", &f->out},
                {"logits", &f->logits}};
    for (size_t i = 0; i < sizeof made / sizeof made[0]; i++)
        if (made[i].t->data)
            return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                             "%s%s->%s is set, but the layer makes q, k, v "
                             "and out itself (and has no logits output): "
                             "leave them absent",
                             who, field, made[i].name);
    /* the layer's q, k and v are its own buffers of the compute type, made
     * from the storage type's values: no other storage type, no pages;
     * the bias is the caller's, of the layer's storage type or, in a half
     * layer, float32 (the compute type) */
    const int storage = p->storage;
    const bool half = storage != p->dtype;
    if (f->kv_dtype != 0 && f->kv_dtype != storage)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "%s%s->kv_dtype is %d, but the layer makes k and v "
                         "itself from inputs of dtype %d%s",
                         who, field, f->kv_dtype, storage, dtype_hint);
    if (f->bias_dtype != 0 && f->bias_dtype != storage &&
        !(half && f->bias_dtype == SDPA_FLOAT32))
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "%s%s->bias_dtype is %d, but the layer's bias is of "
                         "dtype %d%s%s",
                         who, field, f->bias_dtype, storage,
                         half ? " or SDPA_FLOAT32" : "", dtype_hint);
    if (f->block_table || f->pages_per_seq || f->block_table_stride)
        return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                         "%s%s->block_table is set, but the layer makes k "
                         "and v itself, unpaged: leave the paging fields 0",
                         who, field);
    if (f->seqs || f->q_offsets || f->kv_offsets)
        return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                         "%s%s->seqs, q_offsets or kv_offsets is set, but "
                         "the layer takes rectangular batches: leave them 0",
                         who, field);
    if (f->dtype != 0 && f->dtype != storage)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "%s%s->dtype is %d, but dtype is %d%s", who, field,
                         f->dtype, storage, dtype_hint);
    f->struct_size = sizeof *f;
    f->dtype = p->dtype;
    f->kv_dtype = 0;
    if (half) /* the compute type is no longer the bias's default */
        f->bias_dtype = f->bias_dtype ? f->bias_dtype : storage;
    return SDPA_OK;
}

/* The range of a weight or bias `name` of elems · times elements at p
 * (not NULL) into *r; SDPA_ERR_OVERFLOW when it passes the address
 * space. */
static int param_range(sdpa_ctx *ctx, const char *who, const char *name,
                       const void *p, size_t elems, size_t times, size_t esize,
                       layer_range *r)
{
    size_t bytes;
    if (!sdpa_mul_size(elems, times, &bytes) ||
        !sdpa_mul_size(bytes, esize, &bytes) ||
        (uintptr_t)p > UINTPTR_MAX - bytes)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%sthe extent of %s overflows the address space", who,
                         name);
    *r = (layer_range){name, (uintptr_t)p, (uintptr_t)p + bytes};
    return SDPA_OK;
}

int sdpa_layer_attention_failed(sdpa_ctx *ctx, const char *who, int status)
{
    char why[sizeof ctx->message];
    memcpy(why, ctx->message, sizeof why);
    return sdpa_fail(ctx, status, "%sattention: %s", who, why);
}

int sdpa_layer_check_rows(sdpa_ctx *ctx, const char *who, bool backward,
                          const char *name, const sdpa_tensor *t, int64_t n,
                          int64_t len_expected, int64_t e, bool output,
                          size_t esize, layer_rows *rows, layer_range *r)
{
    int status = check_shape(ctx, who, name, t);
    if (status != SDPA_OK)
        return status;
    if (t->shape[0] != n || t->shape[3] != e ||
        (len_expected >= 0 && t->shape[2] != len_expected)) {
        if (!backward)
            return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                             "%s%s is [%lld, 1, %lld, %lld], but x_q has N = "
                             "%lld and d_model = %lld: they must agree",
                             who, name, (long long)t->shape[0],
                             (long long)t->shape[2], (long long)t->shape[3],
                             (long long)n, (long long)e);
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         "%s%s is [%lld, 1, %lld, %lld], but the layer has N "
                         "= %lld, d_model = %lld%s",
                         who, name, (long long)t->shape[0],
                         (long long)t->shape[2], (long long)t->shape[3],
                         (long long)n, (long long)e,
                         len_expected >= 0 ? " and that many tokens" : "");
    }
    layer_rows checked;
    layer_range bytes;
    status =
        check_strides(ctx, who, name, t, n, e, output, esize, &checked, &bytes);
    if (status != SDPA_OK)
        return status;
    if (!backward && checked.s2 > INT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%s%s.stride[2] is above the BLAS int limit %d", who,
                         name, INT_MAX);
    if (backward && (checked.s2 > INT_MAX || checked.s0 > INT_MAX))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%sa stride of %s is above the BLAS int limit %d", who,
                         name, INT_MAX);
    *rows = checked;
    *r = bytes;
    return SDPA_OK;
}

int sdpa_layer_check_required(sdpa_ctx *ctx, const char *who,
                              const layer_required *required, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!required[i].ptr)
            return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, "%s%s is NULL", who,
                             required[i].name);
    return SDPA_OK;
}

int sdpa_layer_check_dtype(sdpa_ctx *ctx, const char *who, const char *field,
                           const sdpa_mha_args *a, layer_problem *p)
{
    if (a->dtype != SDPA_FLOAT32 && a->dtype != SDPA_FLOAT64 &&
        a->dtype != SDPA_FLOAT16 && a->dtype != SDPA_BFLOAT16)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "%s%sdtype %d is not SDPA_FLOAT32, SDPA_FLOAT64, "
                         "SDPA_FLOAT16 or SDPA_BFLOAT16",
                         who, field, a->dtype);
    p->storage = a->dtype;
    p->ssize = sdpa_dtype_size(a->dtype);
    p->dtype = a->dtype == SDPA_FLOAT64 ? SDPA_FLOAT64 : SDPA_FLOAT32;
    p->esize = sdpa_dtype_size(p->dtype);
    return SDPA_OK;
}

int sdpa_layer_check_inputs(sdpa_ctx *ctx, const char *who, bool backward,
                            const char *field, const sdpa_mha_args *a,
                            layer_problem *p, layer_range *r, int *count)
{
    const int64_t n = a->x_q.shape[0], e = a->x_q.shape[3];
    int status =
        sdpa_layer_check_rows(ctx, who, backward, "x_q", &a->x_q, n, -1, e,
                              false, p->ssize, &p->x_q, &r[(*count)++]);
    if (status == SDPA_OK)
        status = sdpa_layer_check_heads(ctx, who, field, a, n, e, &p->hq,
                                        &p->hkv, &p->dk, &p->dv);
    if (status != SDPA_OK)
        return status;
    p->n = n;
    p->e = e;
    p->tq = a->x_q.shape[2];
    p->self = a->x_kv.data == NULL;
    if (p->self) {
        p->x_kv = p->x_q;
    } else {
        status =
            sdpa_layer_check_rows(ctx, who, backward, "x_kv", &a->x_kv, n, -1,
                                  e, false, p->ssize, &p->x_kv, &r[(*count)++]);
        if (status != SDPA_OK)
            return status;
    }
    p->tk = p->x_kv.len;
    const int64_t limit = INT_MAX;
    if (p->tq > limit / n || p->tk > limit / n)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%sN · Tq or N · Tk is above the BLAS int limit %d",
                         who, INT_MAX);
    p->w_q = a->w_q, p->w_k = a->w_k, p->w_v = a->w_v, p->w_o = a->w_o;
    p->b_q = a->b_q, p->b_k = a->b_k, p->b_v = a->b_v, p->b_o = a->b_o;
    return SDPA_OK;
}

static const char *pos_name(int positions)
{
    static const char *const names[] = {"SDPA_POS_NONE", "SDPA_POS_SINUSOIDAL",
                                        "SDPA_POS_ROPE_HALF",
                                        "SDPA_POS_ROPE_INTERLEAVED"};
    return names[positions];
}

/* A position that cannot be negated (the inverse rotation's). */
static bool has_int64_min(const int64_t *pos, int64_t count)
{
    for (int64_t i = 0; pos && i < count; i++)
        if (pos[i] == INT64_MIN)
            return true;
    return false;
}

int sdpa_layer_check_positions(sdpa_ctx *ctx, const char *who, bool backward,
                               const char *field, const sdpa_mha_args *a,
                               layer_problem *p)
{
    if (a->positions < SDPA_POS_NONE ||
        a->positions > SDPA_POS_ROPE_INTERLEAVED)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "%s%spositions is %d, not an SDPA_POS_* value", who,
                         field, a->positions);
    int status = check_pos_values(ctx, who, a);
    if (status != SDPA_OK)
        return status;
    if (p->self && a->pos_kv)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "%spos_kv is set in self-attention (x_kv absent)%s",
                         who,
                         backward ? ""
                                  : ": the keys are x_q's tokens, at pos_q's "
                                    "positions");
    bool rope = a->positions == SDPA_POS_ROPE_HALF ||
                a->positions == SDPA_POS_ROPE_INTERLEAVED;
    if (rope && p->dk % 2 != 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "%s%s rotates pairs, but dim_k is %lld, odd", who,
                         backward ? "RoPE" : pos_name(a->positions),
                         (long long)p->dk);
    status = check_pos_offset(ctx, who, a->pos_offset, p->tq, p->tk);
    if (status != SDPA_OK)
        return status;
    if (backward && rope &&
        (a->pos_offset == INT64_MIN || has_int64_min(a->pos_q, p->n * p->tq) ||
         has_int64_min(a->pos_kv, p->n * p->tk)))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%sa position is INT64_MIN, whose rotation the "
                         "backward cannot invert (it negates positions)",
                         who);
    p->positions = a->positions;
    p->base = a->pos_base;
    p->offset = a->pos_offset;
    p->pos_q = a->pos_q;
    p->pos_kv = p->self ? a->pos_q : a->pos_kv;
    return SDPA_OK;
}

void sdpa_layer_param_shapes(const layer_problem *p, size_t elems[8],
                             size_t times[8])
{
    const size_t e = (size_t)p->e;
    const size_t wq = (size_t)(p->hq * p->dk), wk = (size_t)(p->hkv * p->dk);
    const size_t wv = (size_t)(p->hkv * p->dv), wo = (size_t)(p->hq * p->dv);
    /* elements: the first factor times the second */
    const size_t first[8] = {e, e, e, wo, wq, wk, wv, e};
    const size_t second[8] = {wq, wk, wv, e, 1, 1, 1, 1};
    for (int i = 0; i < 8; i++) {
        elems[i] = first[i];
        times[i] = second[i];
    }
}

int sdpa_layer_param_ranges(sdpa_ctx *ctx, const char *who,
                            const layer_problem *p, const void *const ptrs[8],
                            const char *const names[8], size_t esize,
                            layer_range *r, int *count)
{
    size_t elems[8], times[8];
    sdpa_layer_param_shapes(p, elems, times);
    for (int i = 0; i < 8; i++) {
        if (!ptrs[i])
            continue;
        int status = param_range(ctx, who, names[i], ptrs[i], elems[i],
                                 times[i], esize, &r[(*count)++]);
        if (status != SDPA_OK)
            return status;
    }
    return SDPA_OK;
}

void sdpa_layer_place_positions(const layer_problem *p, bool negated,
                                layer_pos_offsets *o, size_t *total, bool *ok)
{
    const size_t es = p->esize, e = (size_t)p->e;
    const size_t rows_q = (size_t)(p->n * p->tq);
    const size_t rows_k = (size_t)(p->n * p->tk);
    const bool rope = p->positions == SDPA_POS_ROPE_HALF ||
                      p->positions == SDPA_POS_ROPE_INTERLEAVED;
    size_t count;
    *o = (layer_pos_offsets){SIZE_MAX, SIZE_MAX, SIZE_MAX, SIZE_MAX,
                             SIZE_MAX, SIZE_MAX, SIZE_MAX};
    /* RoPE at pos_offset + t: the positions written out (and negated) */
    if (rope) {
        if (!p->pos_q && p->offset != 0)
            o->pq = sdpa_layer_take(total, rows_q, sizeof(int64_t), ok);
        if (negated)
            o->nq = sdpa_layer_take(total, rows_q, sizeof(int64_t), ok);
        if (!p->self) {
            if (!p->pos_kv && p->offset != 0)
                o->pk = sdpa_layer_take(total, rows_k, sizeof(int64_t), ok);
            if (negated)
                o->nk = sdpa_layer_take(total, rows_k, sizeof(int64_t), ok);
        }
    }
    if (p->positions == SDPA_POS_SINUSOIDAL) {
        size_t longest = (size_t)(p->tq > p->tk ? p->tq : p->tk);
        *ok = *ok && sdpa_mul_size(longest, e, &count);
        o->table = sdpa_layer_take(total, *ok ? count : 0, es, ok);
        *ok = *ok && sdpa_mul_size(rows_q, e, &count);
        o->xq = sdpa_layer_take(total, *ok ? count : 0, es, ok);
        if (!p->self) {
            *ok = *ok && sdpa_mul_size(rows_k, e, &count);
            o->xkv = sdpa_layer_take(total, *ok ? count : 0, es, ok);
        }
    }
}

void sdpa_layer_place(const layer_region *regions, size_t count, size_t esize,
                      size_t *total, bool *ok)
{
    for (size_t i = 0; i < count; i++) {
        size_t elems = 0;
        *ok = *ok && sdpa_mul_size(regions[i].rows, regions[i].width, &elems);
        *regions[i].off = sdpa_layer_take(total, *ok ? elems : 0, esize, ok);
    }
}

void sdpa_layer_rope_positions(const layer_problem *p,
                               const layer_pos_offsets *o, char *scratch,
                               const int64_t **pq, const int64_t **pk)
{
    *pq = p->pos_q;
    if (o->pq != SIZE_MAX)
        *pq = sdpa_layer_fill_positions(scratch, o->pq, p->n, p->tq, p->offset,
                                        1);
    *pk = p->pos_kv;
    if (p->self)
        *pk = *pq;
    else if (o->pk != SIZE_MAX)
        *pk = sdpa_layer_fill_positions(scratch, o->pk, p->n, p->tk, p->offset,
                                        1);
}
