/*
 * The multi-head attention layer's backward pass (include/sdpa.h, 1.1):
 * the gradients of sdpa_mha_forward's
 *
 *   y = Concat(head_1 .. head_Hq) W_O + b_O,  Q = X~_q W_Q + b_Q, ...
 *
 * for the weights, the biases and the inputs, given dy.
 *
 * What is recomputed. Nothing is kept from the forward call (the context
 * holds no state between calls): the pass reruns the forward's pieces into
 * the context's layer scratch — X~ = X + the sinusoidal table, Q, K, V (one
 * gemm each, the very code of layer.c: layer_impl.h is instantiated here
 * too, so the recomputation is bitwise the forward's), RoPE on Q and K,
 * and sdpa_forward with the lse output that sdpa_backward needs. Only the
 * last gemm of the forward (y) is not rerun. Then
 *
 *   dW_O = Oᵀ dy, db_O = column sums of dy       gemm
 *   dO = dy W_Oᵀ                                 gemm
 *   dQ, dK, dV = sdpa_backward(Q, K, V, O, lse, dO)
 *   dQ, dK rotated back: RoPE is a rotation R(p) per pair, and its
 *     transpose is R(-p) — sdpa_rope_apply at the negated positions,
 *     exactly (the angle (-p)·f is -(p·f), sin is odd, cos even)
 *   dW_Q = X~_qᵀ dQ, dW_K = X~_kvᵀ dK, dW_V = X~_kvᵀ dV   gemm
 *   db_Q, db_K, db_V = column sums of dQ, dK, dV
 *   dx_q = dQ W_Qᵀ (+ dK W_Kᵀ + dV W_Vᵀ in self-attention)   gemm
 *   dx_kv = dK W_Kᵀ + dV W_Vᵀ                                  gemm
 *
 * The sinusoidal table is added to the input: its Jacobian is the
 * identity, and dx passes through. Both attention calls run before the
 * first write to an output of the caller, so every error — validation, a
 * fully masked row, SDPA_ERR_NONFINITE — leaves the outputs untouched.
 *
 * Scratch: ctx->layer (grown on demand, shared with sdpa_mha_forward,
 * which lays it out its own way) holds X~ (sinusoidal), Q, K, V, O, lse,
 * dO, dQ, dK, dV and the positions RoPE needs; sdpa_forward and
 * sdpa_backward keep theirs in the workers' scratch. A repeated call of
 * the same shape allocates nothing.
 *
 * A half dtype (1.2) runs the float32 pass on copies of the inputs and dy
 * widened into ctx->layer, its gradients into the caller's float32 outputs
 * (grad_dtype SDPA_FLOAT32) or into float32 scratch, then rounded once
 * into the caller's half outputs (layer_half.h).
 *
 * The validation of the forward's arguments follows layer.c's rules and
 * messages, through the helpers both share (layer_common.h). The
 * pipeline: validate (→ layer_bwd_problem) → plan (→ the scratch layout)
 * → reserve → run (layer_backward_impl.h).
 */
#include "layer/layer_common.h"
#include "layer/layer_half.h"
#include "backward/backward.h"
#include "forward/forward.h"
#include "core/struct_import.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

/* The frozen version-1 size of this call's args (1.1's sizeof on LP64);
 * sdpa_mha_args's is SDPA_MHA_ARGS_SIZE_V1 (layer_common.h). */
#define SDPA_MHA_BACKWARD_ARGS_SIZE_V1 ((size_t)296)
_Static_assert(sizeof(sdpa_mha_backward_args) >= SDPA_MHA_BACKWARD_ARGS_SIZE_V1,
               "sdpa_mha_backward_args only grows");

#define WHO "sdpa_mha_backward: "

/* layer_impl.h's static gemm_rows_f32/_f64, add_sinusoidal_* and
 * add_positions_*. */
#define SDPA_TEMPLATE "layer/layer_impl.h"
#include "core/instantiate.h"

/* The call, validated and resolved. */
typedef struct layer_bwd_problem {
    layer_problem p; /* the forward's arguments */
    int grad_type;   /* the gradients' type: p.storage or SDPA_FLOAT32 */
    size_t gsize;    /* its bytes */
    layer_rows dy, dx_q, dx_kv;
    bool has_dx_q, has_dx_kv;
    void *dw_q, *dw_k, *dw_v, *dw_o, *db_q, *db_k, *db_v, *db_o;
} layer_bwd_problem;

/* Where each piece of scratch goes (SIZE_MAX: not used), and how much
 * there is. */
typedef struct layer_bwd_plan {
    layer_pos_offsets pos;
    size_t off_q, off_k, off_v, off_o, off_lse, off_do, off_dq, off_dk, off_dv;
    /* a half layer: the float32 copies of the inputs and dy, and (half
     * gradients) the float32 gradients before they are rounded */
    layer_half_offsets half;
    size_t off_dy, off_dx_q, off_dx_kv, off_grads[8];
    size_t bytes;
} layer_bwd_plan;

/* out[i] = -pos[i] (validated: no pos[i] is INT64_MIN). */
static int64_t *negate_positions(char *scratch, size_t at, int64_t n,
                                 int64_t len, const int64_t *pos)
{
    int64_t *p = (int64_t *)(void *)(scratch + at);
    for (int64_t i = 0; i < n * len; i++)
        p[i] = -pos[i];
    return p;
}

/* What the steps of the pass (layer_backward_impl.h) share: the inputs
 * (with the sinusoidal table), the projections, their gradients and
 * views in the scratch, and the inverse rotation's positions. */
typedef struct layer_bwd_work {
    int64_t wq, wk, wv, wo; /* widths: Hq·dk, Hkv·dk, Hkv·dv, Hq·dv */
    layer_rows xq, xkv, q, k, v, o, d_o, dq, dk, dv;
    sdpa_tensor q_view, k_view, dq_view, dk_view;
    bool rope;
    int style;
    const int64_t *nq, *nk;
} layer_bwd_work;

static layer_bwd_work layer_bwd_work_layout(const layer_problem *p,
                                            const layer_bwd_plan *lp, char *s)
{
    const int64_t n = p->n;
    layer_bwd_work w = {.xq = p->x_q,
                        .xkv = p->x_kv,
                        .wq = p->hq * p->dk,
                        .wk = p->hkv * p->dk,
                        .wv = p->hkv * p->dv,
                        .wo = p->hq * p->dv};
    w.q = sdpa_layer_scratch_rows(s, lp->off_q, n, p->tq, w.wq);
    w.k = sdpa_layer_scratch_rows(s, lp->off_k, n, p->tk, w.wk);
    w.v = sdpa_layer_scratch_rows(s, lp->off_v, n, p->tk, w.wv);
    w.o = sdpa_layer_scratch_rows(s, lp->off_o, n, p->tq, w.wo);
    w.d_o = sdpa_layer_scratch_rows(s, lp->off_do, n, p->tq, w.wo);
    w.dq = sdpa_layer_scratch_rows(s, lp->off_dq, n, p->tq, w.wq);
    w.dk = sdpa_layer_scratch_rows(s, lp->off_dk, n, p->tk, w.wk);
    w.dv = sdpa_layer_scratch_rows(s, lp->off_dv, n, p->tk, w.wv);
    w.q_view = sdpa_tensor_bthd(w.q.data, n, p->hq, p->tq, p->dk);
    w.k_view = sdpa_tensor_bthd(w.k.data, n, p->hkv, p->tk, p->dk);
    w.dq_view = sdpa_tensor_bthd(w.dq.data, n, p->hq, p->tq, p->dk);
    w.dk_view = sdpa_tensor_bthd(w.dk.data, n, p->hkv, p->tk, p->dk);
    w.rope = p->positions == SDPA_POS_ROPE_HALF ||
             p->positions == SDPA_POS_ROPE_INTERLEAVED;
    w.style = p->positions == SDPA_POS_ROPE_HALF ? SDPA_ROPE_HALF
                                                 : SDPA_ROPE_INTERLEAVED;
    return w;
}

/* The static layer_backward_f32/_f64 and its transposed products and
 * column sums (HACKING.md's naming rule). */
#define SDPA_TEMPLATE "layer/layer_backward_impl.h"
#include "core/instantiate.h"

/* ---- validate ---------------------------------------------------------- */

/* The attention options: a zero-filled copy of *attn as this library
 * knows it, without any tensor the layer makes or an output of it. */
static int check_attn(sdpa_ctx *ctx, const sdpa_mha_args *a, layer_problem *p)
{
    sdpa_forward_args *f = &p->attn;
    int status =
        sdpa_layer_import_attn(ctx, WHO, "forward->attn", a->attn, p, "", f);
    if (status != SDPA_OK)
        return status;
    /* the forward's outputs: not written by the backward */
    const sdpa_tensor none = {NULL, {0, 0, 0, 0}, {0, 0, 0, 0}};
    f->weights = f->lse = f->max_weight = f->entropy = none;
    return SDPA_OK;
}

/* The outputs meet neither each other nor what is read while they are
 * written (x_q, x_kv, dy, the weights and the biases): rows[0,
 * n_rows_in) are inputs, the rest outputs. */
static int check_overlaps(sdpa_ctx *ctx, const layer_bwd_problem *lb,
                          const layer_range *rows, int n_rows_in, int n_rows)
{
    const layer_problem *p = &lb->p;
    const void *const params[8] = {p->w_q, p->w_k, p->w_v, p->w_o,
                                   p->b_q, p->b_k, p->b_v, p->b_o};
    const void *const grads[8] = {lb->dw_q, lb->dw_k, lb->dw_v, lb->dw_o,
                                  lb->db_q, lb->db_k, lb->db_v, lb->db_o};
    static const char *const param_names[8] = {"w_q", "w_k", "w_v", "w_o",
                                               "b_q", "b_k", "b_v", "b_o"};
    static const char *const grad_names[8] = {"dw_q", "dw_k", "dw_v", "dw_o",
                                              "db_q", "db_k", "db_v", "db_o"};
    layer_range in[8 + 3], out[8 + 2];
    int n_in = 0, n_out = 0;
    for (int i = 0; i < n_rows; i++)
        if (i < n_rows_in)
            in[n_in++] = rows[i];
        else
            out[n_out++] = rows[i];
    int status = sdpa_layer_param_ranges(ctx, WHO, p, params, param_names,
                                         p->ssize, in, &n_in);
    if (status == SDPA_OK)
        status = sdpa_layer_param_ranges(ctx, WHO, p, grads, grad_names,
                                         lb->gsize, out, &n_out);
    if (status != SDPA_OK)
        return status;
    for (int o = 0; o < n_out; o++) {
        for (int i = 0; i < n_in; i++)
            if (sdpa_layer_ranges_meet(&out[o], &in[i]))
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 WHO "output %s overlaps the input %s",
                                 out[o].name, in[i].name);
        for (int q = 0; q < o; q++)
            if (sdpa_layer_ranges_meet(&out[o], &out[q]))
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 WHO "output %s overlaps output %s",
                                 out[o].name, out[q].name);
    }
    return SDPA_OK;
}

/* dy, dx_q and dx_kv ([N, 1, T, d_model] of Tq, Tq and Tk tokens); their
 * bytes into rows[*count]. */
static int check_gradient_rows(sdpa_ctx *ctx, const sdpa_mha_backward_args *b,
                               layer_bwd_problem *lb, layer_range *rows,
                               int *count, int *n_in)
{
    const layer_problem *p = &lb->p;
    int status =
        sdpa_layer_check_rows(ctx, WHO, true, "dy", &b->dy, p->n, p->tq, p->e,
                              false, p->ssize, &lb->dy, &rows[(*count)++]);
    if (status != SDPA_OK)
        return status;
    *n_in = *count;
    lb->has_dx_q = b->dx_q.data != NULL;
    lb->has_dx_kv = b->dx_kv.data != NULL;
    if (lb->has_dx_kv && p->self)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         WHO "dx_kv is set in self-attention (forward->x_kv "
                             "absent): dx_q receives the whole gradient");
    if (lb->has_dx_q)
        status = sdpa_layer_check_rows(ctx, WHO, true, "dx_q", &b->dx_q, p->n,
                                       p->tq, p->e, true, lb->gsize, &lb->dx_q,
                                       &rows[(*count)++]);
    if (status == SDPA_OK && lb->has_dx_kv)
        status = sdpa_layer_check_rows(ctx, WHO, true, "dx_kv", &b->dx_kv, p->n,
                                       p->tk, p->e, true, lb->gsize, &lb->dx_kv,
                                       &rows[(*count)++]);
    return status;
}

/* grad_dtype: 0 (the gradients in the layer's dtype) or, in a layer
 * computed in float32, SDPA_FLOAT32. */
static int check_grad_dtype(sdpa_ctx *ctx, const sdpa_mha_backward_args *b,
                            layer_bwd_problem *lb)
{
    const layer_problem *p = &lb->p;
    if (b->grad_dtype != 0 &&
        (b->grad_dtype != SDPA_FLOAT32 || p->dtype != SDPA_FLOAT32))
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         WHO "grad_dtype %d is neither 0 (the gradients in "
                             "forward->dtype %d) nor SDPA_FLOAT32 with a "
                             "layer computed in float32",
                         b->grad_dtype, p->storage);
    lb->grad_type = b->grad_dtype ? b->grad_dtype : p->storage;
    lb->gsize = sdpa_dtype_size(lb->grad_type);
    return SDPA_OK;
}

static int validate(sdpa_ctx *ctx, const sdpa_mha_backward_args *caller,
                    layer_bwd_problem *lb)
{
    sdpa_mha_backward_args b;
    int status = sdpa_import_args(ctx, "sdpa_mha_backward", caller,
                                  SDPA_MHA_BACKWARD_ARGS_SIZE_V1, &b, sizeof b);
    if (status != SDPA_OK)
        return status;
    if (!b.forward)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, WHO "forward is NULL");
    sdpa_mha_args a;
    status = sdpa_struct_import(ctx, WHO "forward", b.forward,
                                SDPA_MHA_ARGS_SIZE_V1, &a, sizeof a);
    if (status != SDPA_OK)
        return status;
    memset(lb, 0, sizeof *lb);
    layer_problem *p = &lb->p;
    status = sdpa_layer_check_dtype(ctx, WHO, "forward->", &a, p);
    if (status == SDPA_OK)
        status = check_grad_dtype(ctx, &b, lb);
    if (status != SDPA_OK)
        return status;
    const layer_required required[] = {
        {"forward->x_q.data", a.x_q.data}, {"forward->w_q", a.w_q},
        {"forward->w_k", a.w_k},           {"forward->w_v", a.w_v},
        {"forward->w_o", a.w_o},           {"dy.data", b.dy.data}};
    status = sdpa_layer_check_required(ctx, WHO, required,
                                       sizeof required / sizeof required[0]);
    if (status != SDPA_OK)
        return status;
    layer_range rows[5];
    int n_rows = 0, n_rows_in = 0;
    status = sdpa_layer_check_inputs(ctx, WHO, true, "forward->", &a, p, rows,
                                     &n_rows);
    if (status == SDPA_OK)
        status = check_gradient_rows(ctx, &b, lb, rows, &n_rows, &n_rows_in);
    if (status == SDPA_OK)
        status = sdpa_layer_check_positions(ctx, WHO, true, "forward->", &a, p);
    if (status == SDPA_OK)
        status = check_attn(ctx, &a, p);
    if (status != SDPA_OK)
        return status;
    lb->dw_q = b.dw_q, lb->dw_k = b.dw_k, lb->dw_v = b.dw_v, lb->dw_o = b.dw_o;
    lb->db_q = b.db_q, lb->db_k = b.db_k, lb->db_v = b.db_v, lb->db_o = b.db_o;
    return check_overlaps(ctx, lb, rows, n_rows_in, n_rows);
}

/* ---- plan -------------------------------------------------------------- */

/* A half layer's regions: the float32 copies of the inputs and dy, and
 * with half gradients their float32 values. */
static void place_half(const layer_bwd_problem *lb, layer_bwd_plan *lp,
                       size_t *total, bool *ok)
{
    const layer_problem *p = &lb->p;
    const size_t e = (size_t)p->e, fs = sizeof(float);
    const size_t rows_q = (size_t)(p->n * p->tq);
    const size_t rows_k = (size_t)(p->n * p->tk);
    sdpa_layer_half_place(p, &lp->half, total, ok);
    lp->off_dy = lp->off_dx_q = lp->off_dx_kv = SIZE_MAX;
    for (int i = 0; i < 8; i++)
        lp->off_grads[i] = SIZE_MAX;
    if (!sdpa_layer_is_half(p))
        return;
    lp->off_dy = sdpa_layer_take(total, rows_q * e, fs, ok);
    if (lb->grad_type == SDPA_FLOAT32)
        return; /* the float32 gradients go to the caller's outputs */
    if (lb->has_dx_q)
        lp->off_dx_q = sdpa_layer_take(total, rows_q * e, fs, ok);
    if (lb->has_dx_kv)
        lp->off_dx_kv = sdpa_layer_take(total, rows_k * e, fs, ok);
    const void *const grads[8] = {lb->dw_q, lb->dw_k, lb->dw_v, lb->dw_o,
                                  lb->db_q, lb->db_k, lb->db_v, lb->db_o};
    size_t elems[8], times[8];
    sdpa_layer_param_shapes(p, elems, times);
    for (int i = 0; i < 8; i++)
        if (grads[i])
            lp->off_grads[i] =
                sdpa_layer_take(total, elems[i] * times[i], fs, ok);
}

static int plan(sdpa_ctx *ctx, const layer_bwd_problem *lb, layer_bwd_plan *lp)
{
    const layer_problem *p = &lb->p;
    const size_t rows_q = (size_t)(p->n * p->tq);
    const size_t rows_k = (size_t)(p->n * p->tk);
    size_t total = 0;
    bool ok = true;
    sdpa_layer_place_positions(p, true, &lp->pos, &total, &ok);
    const size_t wq = (size_t)(p->hq * p->dk), wk = (size_t)(p->hkv * p->dk);
    const size_t wv = (size_t)(p->hkv * p->dv), wo = (size_t)(p->hq * p->dv);
    const layer_region regions[] = {{&lp->off_q, rows_q, wq},
                                    {&lp->off_k, rows_k, wk},
                                    {&lp->off_v, rows_k, wv},
                                    {&lp->off_o, rows_q, wo},
                                    {&lp->off_lse, rows_q, (size_t)p->hq},
                                    {&lp->off_do, rows_q, wo},
                                    {&lp->off_dq, rows_q, wq},
                                    {&lp->off_dk, rows_k, wk},
                                    {&lp->off_dv, rows_k, wv}};
    sdpa_layer_place(regions, sizeof regions / sizeof regions[0], p->esize,
                     &total, &ok);
    place_half(lb, lp, &total, &ok);
    if (!ok || total > PTRDIFF_MAX)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         WHO "the scratch (projections of %lld and %lld "
                             "rows) overflows size_t",
                         (long long)p->n * p->tq, (long long)p->n * p->tk);
    lp->bytes = total;
    return SDPA_OK;
}

/* ---- run: layer_backward_f32 / _f64 ------------------------------------ */

/* A half layer: the float32 pass on float32 copies of the inputs and dy,
 * its gradients into the caller's outputs (grad_dtype SDPA_FLOAT32) or
 * into the scratch, then rounded once into them. */
static int layer_backward_half(sdpa_ctx *ctx, const layer_bwd_problem *lb,
                               const layer_bwd_plan *lp, char *s)
{
    const layer_problem *p = &lb->p;
    const sdpa_row_kernels_f32 *rk = sdpa_row_kernels_select_f32(ctx->kernel);
    layer_bwd_problem wide = *lb;
    sdpa_layer_half_widen(rk, &wide.p, &lp->half, s);
    float *dy = (float *)(void *)(s + lp->off_dy);
    sdpa_layer_widen_rows(rk, p->storage, &lb->dy, p->e, dy);
    wide.dy = sdpa_layer_scratch_rows(s, lp->off_dy, p->n, p->tq, p->e);
    const bool rounded = lb->grad_type != SDPA_FLOAT32;
    void **grads[8] = {&wide.dw_q, &wide.dw_k, &wide.dw_v, &wide.dw_o,
                       &wide.db_q, &wide.db_k, &wide.db_v, &wide.db_o};
    if (rounded) {
        if (lb->has_dx_q)
            wide.dx_q =
                sdpa_layer_scratch_rows(s, lp->off_dx_q, p->n, p->tq, p->e);
        if (lb->has_dx_kv)
            wide.dx_kv =
                sdpa_layer_scratch_rows(s, lp->off_dx_kv, p->n, p->tk, p->e);
        for (int i = 0; i < 8; i++)
            if (*grads[i])
                *grads[i] = s + lp->off_grads[i];
    }
    int status = layer_backward_f32(ctx, &wide, lp, s);
    if (status != SDPA_OK || !rounded)
        return status;
    const int type = lb->grad_type;
    if (lb->has_dx_q)
        sdpa_layer_narrow_rows(rk, type,
                               (const float *)(const void *)wide.dx_q.data,
                               p->e, &lb->dx_q);
    if (lb->has_dx_kv)
        sdpa_layer_narrow_rows(rk, type,
                               (const float *)(const void *)wide.dx_kv.data,
                               p->e, &lb->dx_kv);
    void *const outs[8] = {lb->dw_q, lb->dw_k, lb->dw_v, lb->dw_o,
                           lb->db_q, lb->db_k, lb->db_v, lb->db_o};
    size_t elems[8], times[8];
    sdpa_layer_param_shapes(p, elems, times);
    for (int i = 0; i < 8; i++)
        if (outs[i])
            rk->narrow((const float *)*grads[i], type, outs[i],
                       (int64_t)(elems[i] * times[i]));
    return SDPA_OK;
}

static int mha_backward_call(sdpa_ctx *ctx, const sdpa_mha_backward_args *args)
{
    layer_bwd_problem lb;
    layer_bwd_plan lp;
    int status = validate(ctx, args, &lb);
    if (status == SDPA_OK)
        status = plan(ctx, &lb, &lp);
    if (status != SDPA_OK)
        return status;
    status = sdpa_layer_reserve(ctx, "sdpa_mha_backward", lp.bytes);
    if (status != SDPA_OK)
        return sdpa_fail(ctx, status,
                         WHO "cannot allocate %zu bytes of scratch for the "
                             "projections and their gradients",
                         lp.bytes);
    char *scratch = ctx->layer.ptr;
    if (sdpa_layer_is_half(&lb.p))
        return layer_backward_half(ctx, &lb, &lp, scratch);
    if (lb.p.dtype == SDPA_FLOAT32)
        return layer_backward_f32(ctx, &lb, &lp, scratch);
    return layer_backward_f64(ctx, &lb, &lp, scratch);
}

int sdpa_mha_backward(sdpa_ctx *ctx, const sdpa_mha_backward_args *args)
{
    int status = sdpa_enter(ctx);
    return status != SDPA_OK ? status
                             : sdpa_leave(ctx, mha_backward_call(ctx, args));
}
