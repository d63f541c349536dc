/*
 * The layer in a half storage type (SDPA_FLOAT16, SDPA_BFLOAT16): the
 * caller's x_q, x_kv, weights and biases (and the backward's dy) widened
 * exactly into float32 copies in the layer's scratch, the float32 layer
 * run on the copies, and its float32 results rounded once, to nearest
 * even, into the caller's outputs. Widening and rounding are the row
 * kernels' widen and narrow (kernels/rows.h), whose bits are the same in
 * every kernel set, so a half call gives the float32 layer's bits on the
 * widened inputs, rounded.
 */
#ifndef SDPA_LAYER_HALF_H
#define SDPA_LAYER_HALF_H

#include "layer/layer_common.h"
#include "kernels/rows.h"

/* Is the layer's storage type a half type (computed in float32)? */
static inline bool sdpa_layer_is_half(const layer_problem *p)
{
    return p->storage != p->dtype;
}

/* Scratch offsets of the float32 copies (SIZE_MAX: not used): x_q, x_kv
 * (cross-attention) and the weights and biases present (in
 * sdpa_layer_param_shapes' order). */
typedef struct layer_half_offsets {
    size_t x_q, x_kv, params[8];
} layer_half_offsets;

/* Places those copies at *total (sdpa_layer_take); all SIZE_MAX when the
 * layer is not a half one. */
void sdpa_layer_half_place(const layer_problem *p, layer_half_offsets *o,
                           size_t *total, bool *ok);

/* Widens x_q, x_kv, the weights and the biases into the copies of o and
 * points *p at them: afterwards *p is a float32 layer's problem (storage
 * SDPA_FLOAT32). */
void sdpa_layer_half_widen(const sdpa_row_kernels_f32 *rk, layer_problem *p,
                           const layer_half_offsets *o, char *scratch);

/* The rows of src (of `type`, e wide) widened into the contiguous
 * [n · len, e] float32 matrix dst. */
void sdpa_layer_widen_rows(const sdpa_row_kernels_f32 *rk, int type,
                           const layer_rows *src, int64_t e, float *dst);

/* The contiguous [n · len, e] float32 matrix src rounded into the rows of
 * dst (of `type`). */
void sdpa_layer_narrow_rows(const sdpa_row_kernels_f32 *rk, int type,
                            const float *src, int64_t e, const layer_rows *dst);

/* The first of count finite float32 values that rounds to ±inf in `type`
 * (a half type), or -1. */
int64_t sdpa_layer_half_overflow(int type, const float *src, int64_t count);

#endif
