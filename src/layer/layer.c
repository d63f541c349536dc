/*
 * The multi-head attention layer (include/sdpa.h, 1.1):
 *
 *   y = Concat(head_1 .. head_Hq) W_O + b_O,
 *   head_h = Attention(Q_h, K_{h/g}, V_{h/g}),  Q = X~_q W_Q + b_Q, ...
 *
 * for the whole batch, in five steps on the context's layer scratch:
 *
 *  1. SDPA_POS_SINUSOIDAL: X~ = X + the table (into scratch: inputs are
 *     never written); otherwise X~ is X itself.
 *  2. Q, K, V as one gemm each over all N · T rows, into [N, T, H·d]
 *     buffers: head h is columns h·d .. (h+1)·d - 1 of a row, so a head is
 *     the strided view sdpa_tensor_bthd() makes, without a copy.
 *  3. SDPA_POS_ROPE_*: sdpa_rope_apply on Q and K.
 *  4. sdpa_forward on a copy of *attn with q, k, v and out set to those
 *     views; out is the [N, Tq, Hq·dv] buffer whose row is the
 *     concatenation of the heads.
 *  5. y = O W_O (+ b_O), one gemm: the only write to y. Every error,
 *     sdpa_forward's included, is found before it, so y is untouched on
 *     any error; the inputs are read in full before it, so y may be x_q.
 *
 * Scratch is one buffer (ctx->layer) that only grows: a repeated call of
 * the same shape allocates nothing, and neither does sdpa_forward then.
 *
 * A half dtype (1.2) runs the same five steps in float32 on copies of the
 * inputs widened into that buffer, into a float32 y there, which is then
 * checked (a finite value that would round to infinity is refused, y
 * untouched) and rounded once into the caller's y (layer_half.h).
 *
 * The pipeline: validate (→ layer_fwd_problem) → plan (→ the scratch
 * layout) → reserve → run (the five steps).
 */
#include "layer/layer_common.h"
#include "layer/layer_half.h"
#include "forward/forward.h"
#include "core/struct_import.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define WHO "sdpa_mha_forward: "

/* The static gemm_rows_f32/_f64, add_sinusoidal_* and add_positions_*, by
 * HACKING.md's naming rule. */
#define SDPA_TEMPLATE "layer/layer_impl.h"
#include "core/instantiate.h"

/* The call, validated and resolved. */
typedef struct layer_fwd_problem {
    layer_problem p;
    layer_rows y;
    layer_range y_bytes;
} layer_fwd_problem;

/* Where each piece of scratch goes (SIZE_MAX: not used), and how much
 * there is. */
typedef struct layer_fwd_plan {
    layer_pos_offsets pos;
    size_t off_q, off_k, off_v, off_o;
    layer_half_offsets half; /* a half layer's float32 inputs */
    size_t off_y;            /* and its float32 y */
    size_t bytes;
} layer_fwd_plan;

/* ---- validate ---------------------------------------------------------- */

/* The range of an optional output of attn, when it is well formed (one
 * that is not is refused by sdpa_forward before anything is written). */
static bool tensor_range(const char *name, const sdpa_tensor *t, size_t esize,
                         layer_range *r)
{
    if (!t->data)
        return false;
    size_t span = 1, step;
    for (int d = 0; d < 4; d++)
        if (t->shape[d] <= 0 || t->stride[d] < 0 ||
            !sdpa_mul_size((size_t)(t->shape[d] - 1), (size_t)t->stride[d],
                           &step) ||
            !sdpa_add_size(span, step, &span))
            return false;
    if (!sdpa_mul_size(span, esize, &span) ||
        (uintptr_t)t->data > UINTPTR_MAX - span)
        return false;
    *r = (layer_range){name, (uintptr_t)t->data, (uintptr_t)t->data + span};
    return true;
}

/* No output may meet a weight or a bias, and y may not meet an output of
 * the attention. The inputs x_q and x_kv are read in full before y is
 * written: y may be one of them. */
static int check_overlaps(sdpa_ctx *ctx, const layer_fwd_problem *lf)
{
    const layer_problem *p = &lf->p;
    const void *const params[8] = {p->w_q, p->w_k, p->w_v, p->w_o,
                                   p->b_q, p->b_k, p->b_v, p->b_o};
    static const char *const names[8] = {"w_q", "w_k", "w_v", "w_o",
                                         "b_q", "b_k", "b_v", "b_o"};
    layer_range in[8];
    int n_in = 0;
    int status = sdpa_layer_param_ranges(ctx, WHO, p, params, names, p->ssize,
                                         in, &n_in);
    if (status != SDPA_OK)
        return status;
    const size_t es = p->esize;
    layer_range out[5];
    int n_out = 0;
    out[n_out++] = lf->y_bytes;
    const sdpa_forward_args *f = &p->attn;
    n_out += tensor_range("attn->weights", &f->weights, es, &out[n_out]);
    n_out += tensor_range("attn->lse", &f->lse, es, &out[n_out]);
    n_out += tensor_range("attn->max_weight", &f->max_weight, es, &out[n_out]);
    n_out += tensor_range("attn->entropy", &f->entropy, es, &out[n_out]);
    for (int o = 0; o < n_out; o++) {
        for (int i = 0; i < n_in; i++)
            if (sdpa_layer_ranges_meet(&out[o], &in[i]))
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 WHO "output %s overlaps the parameter %s",
                                 out[o].name, in[i].name);
        if (o > 0 && sdpa_layer_ranges_meet(&out[o], &out[0]))
            return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                             WHO "output %s overlaps output y", out[o].name);
    }
    return SDPA_OK;
}

/* y: [N, 1, Tq, d_model], an output. */
static int check_y(sdpa_ctx *ctx, const sdpa_mha_args *a, layer_fwd_problem *lf)
{
    const layer_problem *p = &lf->p;
    int status =
        sdpa_layer_check_rows(ctx, WHO, false, "y", &a->y, p->n, -1, p->e, true,
                              p->ssize, &lf->y, &lf->y_bytes);
    if (status == SDPA_OK && a->y.shape[2] != p->tq)
        status = sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                           WHO "y.shape[2] is %lld, but x_q.shape[2] (Tq) is "
                               "%lld: they must agree",
                           (long long)a->y.shape[2], (long long)p->tq);
    return status;
}

static int validate(sdpa_ctx *ctx, const sdpa_mha_args *caller,
                    layer_fwd_problem *lf)
{
    sdpa_mha_args a;
    int status = sdpa_import_args(ctx, "sdpa_mha_forward", caller,
                                  SDPA_MHA_ARGS_SIZE_V1, &a, sizeof a);
    if (status != SDPA_OK)
        return status;
    memset(lf, 0, sizeof *lf);
    layer_problem *p = &lf->p;
    status = sdpa_layer_check_dtype(ctx, WHO, "", &a, p);
    if (status != SDPA_OK)
        return status;
    const layer_required required[] = {
        {"x_q.data", a.x_q.data}, {"y.data", a.y.data}, {"w_q", a.w_q},
        {"w_k", a.w_k},           {"w_v", a.w_v},       {"w_o", a.w_o}};
    status = sdpa_layer_check_required(ctx, WHO, required,
                                       sizeof required / sizeof required[0]);
    if (status != SDPA_OK)
        return status;
    layer_range in_bytes[2]; /* of x_q and x_kv: not needed */
    int n_in = 0;
    status =
        sdpa_layer_check_inputs(ctx, WHO, false, "", &a, p, in_bytes, &n_in);
    if (status == SDPA_OK)
        status = check_y(ctx, &a, lf);
    if (status == SDPA_OK)
        status = sdpa_layer_check_positions(ctx, WHO, false, "", &a, p);
    if (status == SDPA_OK)
        status = sdpa_layer_import_attn(ctx, WHO, "attn", a.attn, p,
                                        " (leave attn->dtype 0 or the same)",
                                        &p->attn);
    if (status != SDPA_OK)
        return status;
    return check_overlaps(ctx, lf);
}

/* ---- plan -------------------------------------------------------------- */

static int plan(sdpa_ctx *ctx, const layer_problem *p, layer_fwd_plan *lp)
{
    const size_t rows_q = (size_t)(p->n * p->tq);
    const size_t rows_k = (size_t)(p->n * p->tk);
    size_t total = 0;
    bool ok = true;
    sdpa_layer_place_positions(p, false, &lp->pos, &total, &ok);
    const layer_region regions[] = {
        {&lp->off_q, rows_q, (size_t)(p->hq * p->dk)},
        {&lp->off_k, rows_k, (size_t)(p->hkv * p->dk)},
        {&lp->off_v, rows_k, (size_t)(p->hkv * p->dv)},
        {&lp->off_o, rows_q, (size_t)(p->hq * p->dv)}};
    sdpa_layer_place(regions, sizeof regions / sizeof regions[0], p->esize,
                     &total, &ok);
    sdpa_layer_half_place(p, &lp->half, &total, &ok);
    lp->off_y = SIZE_MAX;
    if (sdpa_layer_is_half(p))
        lp->off_y =
            sdpa_layer_take(&total, rows_q * (size_t)p->e, sizeof(float), &ok);
    if (!ok || total > PTRDIFF_MAX)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         WHO "the layer's scratch (projections of %lld and "
                             "%lld rows) overflows size_t",
                         (long long)p->n * p->tq, (long long)p->n * p->tk);
    lp->bytes = total;
    return SDPA_OK;
}

/* ---- run --------------------------------------------------------------- */

/* 3. rotary embeddings on Q and K (validated: cannot fail) */
static void rotate(const layer_problem *p, const layer_fwd_plan *lp,
                   char *scratch, sdpa_tensor q_view, sdpa_tensor k_view)
{
    int style = p->positions == SDPA_POS_ROPE_HALF ? SDPA_ROPE_HALF
                                                   : SDPA_ROPE_INTERLEAVED;
    const int64_t *pq, *pk;
    sdpa_layer_rope_positions(p, &lp->pos, scratch, &pq, &pk);
    (void)sdpa_rope_apply(p->dtype, q_view, pq, style, p->base, 0);
    (void)sdpa_rope_apply(p->dtype, k_view, pk, style, p->base, 0);
}

/* The five steps in the compute type, from p's inputs into lf->y. */
static int run_steps(sdpa_ctx *ctx, const layer_fwd_problem *lf,
                     const layer_fwd_plan *lp, char *scratch)
{
    const layer_problem *p = &lf->p;
    const bool f32 = p->dtype == SDPA_FLOAT32;
    layer_rows xq = p->x_q, xkv = p->x_kv;
    /* 1. the sinusoidal table added to the inputs */
    if (p->positions == SDPA_POS_SINUSOIDAL && f32)
        add_positions_f32(p, &lp->pos, scratch, &xq, &xkv);
    else if (p->positions == SDPA_POS_SINUSOIDAL)
        add_positions_f64(p, &lp->pos, scratch, &xq, &xkv);

    /* 2. the projections, [N, T, H·d] each */
    const int64_t wq = p->hq * p->dk, wk = p->hkv * p->dk;
    const int64_t wv = p->hkv * p->dv, wo = p->hq * p->dv;
    layer_rows q = sdpa_layer_scratch_rows(scratch, lp->off_q, p->n, p->tq, wq);
    layer_rows k = sdpa_layer_scratch_rows(scratch, lp->off_k, p->n, p->tk, wk);
    layer_rows v = sdpa_layer_scratch_rows(scratch, lp->off_v, p->n, p->tk, wv);
    layer_rows o = sdpa_layer_scratch_rows(scratch, lp->off_o, p->n, p->tq, wo);
    if (f32) {
        gemm_rows_f32(&xq, p->e, p->w_q, wq, p->b_q, &q);
        gemm_rows_f32(&xkv, p->e, p->w_k, wk, p->b_k, &k);
        gemm_rows_f32(&xkv, p->e, p->w_v, wv, p->b_v, &v);
    } else {
        gemm_rows_f64(&xq, p->e, p->w_q, wq, p->b_q, &q);
        gemm_rows_f64(&xkv, p->e, p->w_k, wk, p->b_k, &k);
        gemm_rows_f64(&xkv, p->e, p->w_v, wv, p->b_v, &v);
    }
    sdpa_tensor q_view = sdpa_tensor_bthd(q.data, p->n, p->hq, p->tq, p->dk);
    sdpa_tensor k_view = sdpa_tensor_bthd(k.data, p->n, p->hkv, p->tk, p->dk);
    if (p->positions == SDPA_POS_ROPE_HALF ||
        p->positions == SDPA_POS_ROPE_INTERLEAVED)
        rotate(p, lp, scratch, q_view, k_view);

    /* 4. attention, every head at once, into O = [N, Tq, Hq·dv] */
    sdpa_forward_args f = p->attn;
    f.q = q_view;
    f.k = k_view;
    f.v = sdpa_tensor_bthd(v.data, p->n, p->hkv, p->tk, p->dv);
    f.out = sdpa_tensor_bthd(o.data, p->n, p->hq, p->tq, p->dv);
    int status = sdpa_forward_call(ctx, &f);
    if (status != SDPA_OK)
        return sdpa_layer_attention_failed(ctx, WHO, status);

    /* 5. y = O W_O (+ b_O): the first and only write to y */
    if (f32)
        gemm_rows_f32(&o, wo, p->w_o, p->e, p->b_o, &lf->y);
    else
        gemm_rows_f64(&o, wo, p->w_o, p->e, p->b_o, &lf->y);
    return SDPA_OK;
}

/* A half layer: the five steps on float32 copies of the inputs into a
 * float32 y in the scratch, then y rounded once into the caller's y
 * (refused, y untouched, when a finite value would round to infinity). */
static int run(sdpa_ctx *ctx, const layer_fwd_problem *lf,
               const layer_fwd_plan *lp, char *scratch)
{
    const layer_problem *p = &lf->p;
    if (!sdpa_layer_is_half(p))
        return run_steps(ctx, lf, lp, scratch);
    const sdpa_row_kernels_f32 *rk = sdpa_row_kernels_select_f32(ctx->kernel);
    layer_fwd_problem wide = *lf;
    sdpa_layer_half_widen(rk, &wide.p, &lp->half, scratch);
    wide.y = sdpa_layer_scratch_rows(scratch, lp->off_y, p->n, p->tq, p->e);
    int status = run_steps(ctx, &wide, lp, scratch);
    if (status != SDPA_OK)
        return status;
    const float *y = (const float *)(const void *)wide.y.data;
    int64_t at = sdpa_layer_half_overflow(p->storage, y, p->n * p->tq * p->e);
    if (at >= 0)
        return sdpa_fail(ctx, SDPA_ERR_NONFINITE,
                         WHO "y[%lld, 0, %lld, %lld] = %g rounds to infinity "
                             "in %s (y left untouched)",
                         (long long)(at / (p->tq * p->e)),
                         (long long)(at / p->e % p->tq), (long long)(at % p->e),
                         (double)y[at],
                         p->storage == SDPA_FLOAT16 ? "float16" : "bfloat16");
    sdpa_layer_narrow_rows(rk, p->storage, y, p->e, &lf->y);
    return SDPA_OK;
}

static int mha_forward_call(sdpa_ctx *ctx, const sdpa_mha_args *args)
{
    layer_fwd_problem lf;
    layer_fwd_plan lp;
    int status = validate(ctx, args, &lf);
    if (status == SDPA_OK)
        status = plan(ctx, &lf.p, &lp);
    if (status != SDPA_OK)
        return status;
    status = sdpa_layer_reserve(ctx, "sdpa_mha_forward", lp.bytes);
    if (status != SDPA_OK)
        return sdpa_fail(ctx, status,
                         WHO "cannot allocate %zu bytes of scratch for the "
                             "projections",
                         lp.bytes);
    return run(ctx, &lf, &lp, ctx->layer.ptr);
}

int sdpa_mha_forward(sdpa_ctx *ctx, const sdpa_mha_args *args)
{
    int status = sdpa_enter(ctx);
    return status != SDPA_OK ? status
                             : sdpa_leave(ctx, mha_forward_call(ctx, args));
}
