/*
 * The layer's half storage types: the float32 copies of its inputs and
 * the rounding of its results (layer_half.h).
 */
#include "layer/layer_half.h"
#include "kernels/half.h"

#include <math.h>

void sdpa_layer_half_place(const layer_problem *p, layer_half_offsets *o,
                           size_t *total, bool *ok)
{
    o->x_q = o->x_kv = SIZE_MAX;
    for (int i = 0; i < 8; i++)
        o->params[i] = SIZE_MAX;
    if (!sdpa_layer_is_half(p))
        return;
    const size_t e = (size_t)p->e, fs = sizeof(float);
    o->x_q = sdpa_layer_take(total, (size_t)(p->n * p->tq) * e, fs, ok);
    if (!p->self)
        o->x_kv = sdpa_layer_take(total, (size_t)(p->n * p->tk) * e, fs, ok);
    const void *const params[8] = {p->w_q, p->w_k, p->w_v, p->w_o,
                                   p->b_q, p->b_k, p->b_v, p->b_o};
    size_t elems[8], times[8];
    sdpa_layer_param_shapes(p, elems, times);
    for (int i = 0; i < 8; i++)
        if (params[i])
            o->params[i] = sdpa_layer_take(total, elems[i] * times[i], fs, ok);
}

void sdpa_layer_widen_rows(const sdpa_row_kernels_f32 *rk, int type,
                           const layer_rows *src, int64_t e, float *dst)
{
    const size_t es = sdpa_dtype_size(type);
    for (int64_t b = 0; b < src->n; b++)
        for (int64_t t = 0; t < src->len; t++)
            rk->widen(src->data + (size_t)(b * src->s0 + t * src->s2) * es,
                      type, dst + (b * src->len + t) * e, e);
}

void sdpa_layer_narrow_rows(const sdpa_row_kernels_f32 *rk, int type,
                            const float *src, int64_t e, const layer_rows *dst)
{
    const size_t es = sdpa_dtype_size(type);
    for (int64_t b = 0; b < dst->n; b++)
        for (int64_t t = 0; t < dst->len; t++)
            rk->narrow(src + (b * dst->len + t) * e, type,
                       dst->data + (size_t)(b * dst->s0 + t * dst->s2) * es, e);
}

void sdpa_layer_half_widen(const sdpa_row_kernels_f32 *rk, layer_problem *p,
                           const layer_half_offsets *o, char *scratch)
{
    const int type = p->storage;
    float *xq = (float *)(void *)(scratch + o->x_q);
    sdpa_layer_widen_rows(rk, type, &p->x_q, p->e, xq);
    p->x_q = sdpa_layer_scratch_rows(scratch, o->x_q, p->n, p->tq, p->e);
    if (p->self) {
        p->x_kv = p->x_q;
    } else {
        float *xkv = (float *)(void *)(scratch + o->x_kv);
        sdpa_layer_widen_rows(rk, type, &p->x_kv, p->e, xkv);
        p->x_kv = sdpa_layer_scratch_rows(scratch, o->x_kv, p->n, p->tk, p->e);
    }
    const void **params[8] = {&p->w_q, &p->w_k, &p->w_v, &p->w_o,
                              &p->b_q, &p->b_k, &p->b_v, &p->b_o};
    size_t elems[8], times[8];
    sdpa_layer_param_shapes(p, elems, times);
    for (int i = 0; i < 8; i++) {
        if (!*params[i])
            continue;
        float *copy = (float *)(void *)(scratch + o->params[i]);
        rk->widen(*params[i], type, copy, (int64_t)(elems[i] * times[i]));
        *params[i] = copy;
    }
    p->storage = SDPA_FLOAT32;
    p->ssize = sizeof(float);
}

int64_t sdpa_layer_half_overflow(int type, const float *src, int64_t count)
{
    for (int64_t i = 0; i < count; i++) {
        if (!isfinite(src[i]))
            continue;
        uint16_t h = type == SDPA_FLOAT16 ? sdpa_f32_to_f16(src[i])
                                          : sdpa_f32_to_bf16(src[i]);
        uint16_t inf = type == SDPA_FLOAT16 ? 0x7c00u : 0x7f80u;
        if ((h & 0x7fffu) == inf)
            return i;
    }
    return -1;
}
