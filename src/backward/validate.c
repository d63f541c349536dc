/*
 * sdpa_backward's validation: the forward's rules through
 * sdpa_validate_call (on a forward call made of the same fields, on behalf
 * of sdpa_backward), then the gradients' tensors and the overlap of the
 * outputs with every input. Nothing is allocated or written.
 */
#include "backward/backward.h"
#include "core/struct_import.h"
#include "core/tensor_check.h"
#include "forward/validate.h"
#include "kernels/quant.h"

#include <string.h>

#define WHO SDPA_BACKWARD_WHO

/* The frozen version-1 size of sdpa_backward_args (1.1's sizeof on LP64). */
#define SDPA_BACKWARD_ARGS_SIZE_V1 ((size_t)952)
_Static_assert(sizeof(sdpa_backward_args) >= SDPA_BACKWARD_ARGS_SIZE_V1,
               "sdpa_backward_args only grows");

/* What sdpa_forward does not check: grad_dtype, the inputs only the
 * backward needs, and the gradients that need an input. The storage types
 * follow the forward's rules (sdpa_validate_call). */
int sdpa_backward_check_own(sdpa_ctx *ctx, const char *who,
                            const sdpa_backward_args *a)
{
    const bool f64 = a->dtype == SDPA_FLOAT64;
    if (a->grad_dtype != 0 && (a->grad_dtype != SDPA_FLOAT32 || f64))
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "%s: grad_dtype %d is neither 0 (the gradients in "
                         "their inputs' storage types) nor SDPA_FLOAT32 with "
                         "a call computed in float32",
                         who, a->grad_dtype);
    if (sdpa_is_quant_type(a->kv_dtype))
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "%s: kv_dtype %d is a quantized K/V type; the "
                         "backward takes k and v as float32, float64 or a "
                         "half type (sdpa_convert decodes them)",
                         who, a->kv_dtype);
    if (!a->lse.data)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "%s: lse.data is NULL (the forward's lse is "
                         "required)",
                         who);
    if (a->dbias.data && !a->bias.data)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "%s: dbias is set but bias.data is NULL", who);
    if (a->dsinks && !a->sinks)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "%s: dsinks is set but sinks is NULL", who);
    return SDPA_OK;
}

sdpa_forward_args sdpa_backward_forward_fields(const sdpa_backward_args *a)
{
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.dtype = a->dtype;
    f.kv_dtype = a->kv_dtype;
    f.bias_dtype = a->bias_dtype;
    f.causal = a->causal;
    f.flags = a->flags;
    f.scale = a->scale;
    f.softcap = a->softcap;
    f.kv_lens = a->kv_lens;
    f.q = a->q;
    f.k = a->k;
    f.v = a->v;
    f.mask = a->mask;
    f.bias = a->bias;
    f.out = a->out;
    f.lse = a->lse;
    f.window_left = a->window_left;
    f.window_right = a->window_right;
    f.alibi_slopes = a->alibi_slopes;
    f.sinks = a->sinks;
    f.seqs = a->seqs;
    f.q_offsets = a->q_offsets;
    f.kv_offsets = a->kv_offsets;
    f.dropout_p = a->dropout_p;
    f.dropout_seed = a->dropout_seed;
    f.dropout_offset = a->dropout_offset;
    return f;
}

/* The bytes a validated view spans, first to last element (strides >= 0),
 * and the view itself for the element-wise rule of sdpa_check_disjoint. */
static sdpa_byte_range span_of(const char *name, bool is_output,
                               const void *data, const int64_t shape[4],
                               const int64_t stride[4], size_t esize)
{
    size_t last = 0;
    for (int d = 0; d < 4; d++)
        last += (size_t)(shape[d] - 1) * (size_t)stride[d];
    sdpa_byte_range r = {.name = name,
                         .is_output = is_output,
                         .begin = (uintptr_t)data,
                         .end = (uintptr_t)data + (last + 1) * esize,
                         .elem_size = esize};
    memcpy(r.shape, shape, sizeof r.shape);
    memcpy(r.stride, stride, sizeof r.stride);
    return r;
}

/* dout, dq, dk, dv and dbias: present (dbias optional), the shapes the
 * forward's fixed (dk, dv of k's and v's batch extent, dbias the bias's
 * shape where it does not broadcast). Their bytes into r[*count]. */
static int check_gradients(sdpa_ctx *ctx, const char *who,
                           const sdpa_backward_args *a, sdpa_bwd_problem *bp,
                           sdpa_byte_range *r, int *count)
{
    const sdpa_problem *p = &bp->p;
    const size_t es = p->elem_size;
    bp->dout_type = p->out_type;
    bp->dq_type = a->grad_dtype ? a->grad_dtype : p->q_type;
    bp->dkv_type = a->grad_dtype ? a->grad_dtype : p->kv_type;
    const size_t dout_es = sdpa_dtype_size(bp->dout_type);
    const size_t dq_es = sdpa_dtype_size(bp->dq_type);
    const size_t dkv_es = sdpa_dtype_size(bp->dkv_type);
    const int64_t n = p->batch, hq = p->heads_q, hkv = p->heads_kv;
    const int64_t tq = p->len_q, tk = p->len_k, dk = p->dim_k, dv = p->dim_v;
    bp->k_bcast = n > 1 && p->k.stride[0] == 0;
    bp->v_bcast = n > 1 && p->v.stride[0] == 0;
    const int64_t full[4] = {n, hq, tq, tk};
    for (int d = 0; d < 4; d++)
        bp->dbias_shape[d] =
            p->bias.data && p->bias.stride[d] != 0 ? full[d] : 1;
    const int64_t *e = bp->dbias_shape;
#define EXTENTS(a, b, c, d)                                                    \
    {                                                                          \
        {(a), NULL}, {(b), NULL}, {(c), NULL},                                 \
        {                                                                      \
            (d), NULL                                                          \
        }                                                                      \
    }
    const sdpa_tensor_rule rules[] = {
        {.name = "dout",
         .tensor = &a->dout,
         .view = &bp->dout,
         .required = true,
         .rows_for_blas = true,
         .elem_size = dout_es,
         .expect = EXTENTS(n, hq, tq, dv)},
        {.name = "dq",
         .tensor = &a->dq,
         .view = &bp->dq,
         .required = true,
         .is_output = true,
         .rows_for_blas = true,
         .elem_size = dq_es,
         .expect = EXTENTS(n, hq, tq, dk)},
        {.name = "dk",
         .tensor = &a->dk,
         .view = &bp->dk,
         .required = true,
         .is_output = true,
         .elem_size = dkv_es,
         .expect = EXTENTS(bp->k_bcast ? 1 : n, hkv, tk, dk)},
        {.name = "dv",
         .tensor = &a->dv,
         .view = &bp->dv,
         .required = true,
         .is_output = true,
         .elem_size = dkv_es,
         .expect = EXTENTS(bp->v_bcast ? 1 : n, hkv, tk, dv)},
        {.name = "dbias",
         .tensor = &a->dbias,
         .view = &bp->dbias,
         .is_output = true,
         .any_inner = true,
         .elem_size = es,
         .expect = EXTENTS(e[0], e[1], e[2], e[3])},
    };
#undef EXTENTS
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        if (!rules[i].required && !rules[i].tensor->data)
            continue;
        int status = sdpa_check_present(ctx, who, &rules[i]);
        if (status == SDPA_OK)
            status = sdpa_check_tensor(ctx, who, &rules[i], &r[(*count)++]);
        if (status != SDPA_OK)
            return status;
    }
    return SDPA_OK;
}

/* The inputs' bytes, from the views the forward's rules made, into
 * r[*count]. */
static void input_ranges(const sdpa_backward_args *a,
                         const sdpa_bwd_problem *bp, sdpa_byte_range *r,
                         int *count)
{
    const sdpa_problem *p = &bp->p;
    const size_t es = p->elem_size;
    const size_t q_es = sdpa_dtype_size(p->q_type);
    const size_t kv_es = sdpa_dtype_size(p->kv_type);
    const size_t out_es = sdpa_dtype_size(p->out_type);
    const int64_t n = p->batch, hq = p->heads_q;
    int c = *count;
    r[c++] = span_of("q", false, p->q.data, a->q.shape, p->q.stride, q_es);
    r[c++] = span_of("k", false, p->k.data, a->k.shape, p->k.stride, kv_es);
    r[c++] = span_of("v", false, p->v.data, a->v.shape, p->v.stride, kv_es);
    r[c++] =
        span_of("out", false, p->out.data, a->out.shape, p->out.stride, out_es);
    r[c++] =
        span_of("lse", false, p->lse.data, a->lse.shape, p->lse.stride, es);
    if (p->mask.data)
        r[c++] = span_of("mask", false, p->mask.data, a->mask.shape,
                         p->mask.stride, 1);
    if (p->bias.data)
        r[c++] = span_of("bias", false, p->bias.data, a->bias.shape,
                         p->bias.stride, sdpa_dtype_size(p->bias_type));
    if (a->kv_lens)
        r[c++] = (sdpa_byte_range){.name = "kv_lens",
                                   .is_output = false,
                                   .begin = (uintptr_t)a->kv_lens,
                                   .end = (uintptr_t)(a->kv_lens + n)};
    if (a->alibi_slopes)
        r[c++] = (sdpa_byte_range){.name = "alibi_slopes",
                                   .is_output = false,
                                   .begin = (uintptr_t)a->alibi_slopes,
                                   .end = (uintptr_t)(a->alibi_slopes + hq)};
    if (a->sinks)
        r[c++] = (sdpa_byte_range){.name = "sinks",
                                   .is_output = false,
                                   .begin = (uintptr_t)a->sinks,
                                   .end = (uintptr_t)(a->sinks + hq)};
    if (a->dsinks)
        r[c++] = (sdpa_byte_range){.name = "dsinks",
                                   .is_output = true,
                                   .begin = (uintptr_t)a->dsinks,
                                   .end = (uintptr_t)(a->dsinks + hq)};
    *count = c;
}

int sdpa_backward_import(sdpa_ctx *ctx, const sdpa_backward_args *args,
                         sdpa_backward_args *known)
{
    return sdpa_import_args(ctx, WHO, args, SDPA_BACKWARD_ARGS_SIZE_V1, known,
                            sizeof *known);
}

int sdpa_backward_validate(sdpa_ctx *ctx, const char *who,
                           const sdpa_backward_args *a, sdpa_bwd_problem *bp)
{
    int status = sdpa_backward_check_own(ctx, who, a);
    if (status != SDPA_OK)
        return status;
    const sdpa_forward_args f = sdpa_backward_forward_fields(a);
    memset(bp, 0, sizeof *bp);
    status = sdpa_validate_call(ctx, who, &f, &bp->p);
    if (status != SDPA_OK)
        return status;
    enum { RANGES = 17 };
    sdpa_byte_range r[RANGES];
    int count = 0;
    status = check_gradients(ctx, who, a, bp, r, &count);
    if (status != SDPA_OK)
        return status;
    input_ranges(a, bp, r, &count);
    status = sdpa_check_disjoint(ctx, who, r, count);
    if (status != SDPA_OK)
        return status;
    bp->dsinks = a->dsinks;
    return SDPA_OK;
}
