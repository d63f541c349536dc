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
 */
#include "layer/layer_common.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#define WHO "sdpa_mha_forward: "

/* The static gemm_rows_f32/_f64 and add_sinusoidal_*, by HACKING.md's
 * naming rule. */
#define SDPA_TEMPLATE "layer/layer_impl.h"
#include "core/instantiate.h"

/* The call, validated and resolved, and where each piece of scratch goes. */
typedef struct layer_plan {
    int dtype;
    size_t esize;
    int positions;
    double base;
    int64_t offset;
    const int64_t *pos_q, *pos_kv;
    int64_t n, tq, tk, e, hq, hkv, dk, dv;
    layer_rows x_q, x_kv, y; /* x_kv is x_q in self-attention */
    layer_range y_bytes;
    bool self;
    const void *w_q, *w_k, *w_v, *w_o, *b_q, *b_k, *b_v, *b_o;
    sdpa_forward_args attn; /* the caller's options; q, k, v, out unset */
    /* byte offsets into the scratch (SIZE_MAX: not used) */
    size_t off_pq, off_pk, off_table, off_xq, off_xkv;
    size_t off_q, off_k, off_v, off_o;
    size_t bytes;
} layer_plan;

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

/* Checks one of x_q, x_kv, y ([N, 1, T, d_model]) and fills *rows and
 * *r (its bytes). The rules of sdpa_forward's tensors: positive extents,
 * strides >= 0 with the innermost 1 and rows no closer than their length,
 * and an output that writes no element twice. */
static int check_rows(sdpa_ctx *ctx, const char *name, const sdpa_tensor *t,
                      int64_t n, int64_t e, bool output, size_t esize,
                      layer_rows *rows, layer_range *r)
{
    int status = sdpa_layer_check_shape(ctx, WHO, name, t);
    if (status != SDPA_OK)
        return status;
    if (t->shape[0] != n || t->shape[3] != e)
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         WHO "%s is [%lld, 1, %lld, %lld], but x_q has N = "
                             "%lld and d_model = %lld: they must agree",
                         name, (long long)t->shape[0], (long long)t->shape[2],
                         (long long)t->shape[3], (long long)n, (long long)e);
    layer_rows checked;
    status = sdpa_layer_check_strides(ctx, WHO, name, t, n, e, output, esize,
                                      &checked, r);
    if (status != SDPA_OK)
        return status;
    if (checked.s2 > INT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         WHO "%s.stride[2] is above the BLAS int limit %d",
                         name, INT_MAX);
    *rows = checked;
    return SDPA_OK;
}

static const char *pos_name(int positions)
{
    static const char *const names[] = {"SDPA_POS_NONE", "SDPA_POS_SINUSOIDAL",
                                        "SDPA_POS_ROPE_HALF",
                                        "SDPA_POS_ROPE_INTERLEAVED"};
    return names[positions];
}

/* Everything about the positional encoding. */
static int check_positions(sdpa_ctx *ctx, const sdpa_mha_args *a,
                           layer_plan *lp)
{
    if (a->positions < SDPA_POS_NONE ||
        a->positions > SDPA_POS_ROPE_INTERLEAVED)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "sdpa_mha_forward: positions is %d, not an "
                         "SDPA_POS_* value",
                         a->positions);
    int status = sdpa_layer_check_pos_values(ctx, WHO, a);
    if (status != SDPA_OK)
        return status;
    if (lp->self && a->pos_kv)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "sdpa_mha_forward: pos_kv is set in self-attention "
                         "(x_kv absent): the keys are x_q's tokens, at "
                         "pos_q's positions");
    bool rope = a->positions == SDPA_POS_ROPE_HALF ||
                a->positions == SDPA_POS_ROPE_INTERLEAVED;
    if (rope && lp->dk % 2 != 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "sdpa_mha_forward: %s rotates pairs, but dim_k is "
                         "%lld, odd",
                         pos_name(a->positions), (long long)lp->dk);
    status =
        sdpa_layer_check_pos_offset(ctx, WHO, a->pos_offset, lp->tq, lp->tk);
    if (status != SDPA_OK)
        return status;
    lp->positions = a->positions;
    lp->base = a->pos_base;
    lp->offset = a->pos_offset;
    lp->pos_q = a->pos_q;
    lp->pos_kv = lp->self ? a->pos_q : a->pos_kv;
    return SDPA_OK;
}

/* The attention options: a zero-filled copy of *attn as this library
 * knows it, without the tensors the layer makes. */
static int check_attn(sdpa_ctx *ctx, const sdpa_mha_args *a, layer_plan *lp)
{
    return sdpa_layer_import_attn(ctx, WHO, "attn", a->attn, lp->dtype,
                                  " (leave attn->dtype 0 or the same)",
                                  &lp->attn);
}

/* No output may meet a weight or a bias, and y may not meet an output of
 * the attention. The inputs x_q and x_kv are read in full before y is
 * written: y may be one of them. */
static int check_overlaps(sdpa_ctx *ctx, const layer_plan *lp)
{
    const size_t es = lp->esize;
    size_t wq = (size_t)(lp->hq * lp->dk), wk = (size_t)(lp->hkv * lp->dk);
    size_t wv = (size_t)(lp->hkv * lp->dv), wo = (size_t)(lp->hq * lp->dv);
    size_t e = (size_t)lp->e;
    const struct {
        const char *name;
        const void *p;
        size_t elems; /* first factor; times the second, below */
        size_t times;
    } params[] = {{"w_q", lp->w_q, e, wq}, {"w_k", lp->w_k, e, wk},
                  {"w_v", lp->w_v, e, wv}, {"w_o", lp->w_o, wo, e},
                  {"b_q", lp->b_q, wq, 1}, {"b_k", lp->b_k, wk, 1},
                  {"b_v", lp->b_v, wv, 1}, {"b_o", lp->b_o, e, 1}};
    enum { PARAMS = sizeof params / sizeof params[0] };
    layer_range in[PARAMS];
    int n_in = 0;
    for (int i = 0; i < PARAMS; i++) {
        if (!params[i].p)
            continue;
        int status = sdpa_layer_param_range(ctx, WHO, params[i].name,
                                            params[i].p, params[i].elems,
                                            params[i].times, es, &in[n_in++]);
        if (status != SDPA_OK)
            return status;
    }
    layer_range out[5];
    int n_out = 0;
    out[n_out++] = lp->y_bytes;
    const sdpa_forward_args *f = &lp->attn;
    n_out += tensor_range("attn->weights", &f->weights, es, &out[n_out]);
    n_out += tensor_range("attn->lse", &f->lse, es, &out[n_out]);
    n_out += tensor_range("attn->max_weight", &f->max_weight, es, &out[n_out]);
    n_out += tensor_range("attn->entropy", &f->entropy, es, &out[n_out]);
    for (int o = 0; o < n_out; o++) {
        for (int i = 0; i < n_in; i++)
            if (sdpa_layer_ranges_meet(&out[o], &in[i]))
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 "sdpa_mha_forward: output %s overlaps the "
                                 "parameter %s",
                                 out[o].name, in[i].name);
        if (o > 0 && sdpa_layer_ranges_meet(&out[o], &out[0]))
            return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                             "sdpa_mha_forward: output %s overlaps output y",
                             out[o].name);
    }
    return SDPA_OK;
}

/* Where each piece of scratch goes, and how much there is. */
static int place_scratch(sdpa_ctx *ctx, layer_plan *lp)
{
    const size_t es = lp->esize;
    const size_t rows_q = (size_t)(lp->n * lp->tq);
    const size_t rows_k = (size_t)(lp->n * lp->tk);
    const bool sinusoidal = lp->positions == SDPA_POS_SINUSOIDAL;
    const bool rope = lp->positions == SDPA_POS_ROPE_HALF ||
                      lp->positions == SDPA_POS_ROPE_INTERLEAVED;
    size_t total = 0;
    bool ok = true;
    lp->off_pq = lp->off_pk = lp->off_table = SIZE_MAX;
    lp->off_xq = lp->off_xkv = SIZE_MAX;
    /* RoPE at pos_offset + t: the positions written out */
    if (rope && !lp->pos_q && lp->offset != 0)
        lp->off_pq = sdpa_layer_take(&total, rows_q, sizeof(int64_t), &ok);
    if (rope && !lp->self && !lp->pos_kv && lp->offset != 0)
        lp->off_pk = sdpa_layer_take(&total, rows_k, sizeof(int64_t), &ok);
    if (sinusoidal) {
        size_t longest = (size_t)(lp->tq > lp->tk ? lp->tq : lp->tk);
        size_t e = (size_t)lp->e, table = 0;
        ok = ok && sdpa_mul_size(longest, e, &table);
        lp->off_table = sdpa_layer_take(&total, table, es, &ok);
        ok = ok && sdpa_mul_size(rows_q, e, &table);
        lp->off_xq = sdpa_layer_take(&total, table, es, &ok);
        if (!lp->self) {
            ok = ok && sdpa_mul_size(rows_k, e, &table);
            lp->off_xkv = sdpa_layer_take(&total, table, es, &ok);
        }
    }
    size_t wq = (size_t)(lp->hq * lp->dk), wk = (size_t)(lp->hkv * lp->dk);
    size_t wv = (size_t)(lp->hkv * lp->dv), wo = (size_t)(lp->hq * lp->dv);
    size_t count[4] = {0, 0, 0, 0};
    ok = ok && sdpa_mul_size(rows_q, wq, &count[0]) &&
         sdpa_mul_size(rows_k, wk, &count[1]) &&
         sdpa_mul_size(rows_k, wv, &count[2]) &&
         sdpa_mul_size(rows_q, wo, &count[3]);
    lp->off_q = sdpa_layer_take(&total, ok ? count[0] : 0, es, &ok);
    lp->off_k = sdpa_layer_take(&total, ok ? count[1] : 0, es, &ok);
    lp->off_v = sdpa_layer_take(&total, ok ? count[2] : 0, es, &ok);
    lp->off_o = sdpa_layer_take(&total, ok ? count[3] : 0, es, &ok);
    if (!ok || total > PTRDIFF_MAX)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_mha_forward: the layer's scratch (projections "
                         "of %lld and %lld rows) overflows size_t",
                         (long long)lp->n * lp->tq, (long long)lp->n * lp->tk);
    lp->bytes = total;
    return SDPA_OK;
}

static int validate(sdpa_ctx *ctx, const sdpa_mha_args *caller, layer_plan *lp)
{
    sdpa_mha_args a;
    int status = sdpa_struct_import(ctx, "sdpa_mha_forward: args", caller,
                                    SDPA_MHA_ARGS_SIZE_V1, &a, sizeof a);
    if (status != SDPA_OK)
        return status;
    memset(lp, 0, sizeof *lp);
    if (a.dtype != SDPA_FLOAT32 && a.dtype != SDPA_FLOAT64)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         "sdpa_mha_forward: dtype %d is neither SDPA_FLOAT32 "
                         "nor SDPA_FLOAT64",
                         a.dtype);
    lp->dtype = a.dtype;
    lp->esize = a.dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
    const struct {
        const char *name;
        const void *p;
    } required[] = {{"x_q.data", a.x_q.data}, {"y.data", a.y.data},
                    {"w_q", a.w_q},           {"w_k", a.w_k},
                    {"w_v", a.w_v},           {"w_o", a.w_o}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!required[i].p)
            return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                             "sdpa_mha_forward: %s is NULL", required[i].name);

    /* x_q fixes N, Tq and d_model; the heads fix the widths. */
    const int64_t n = a.x_q.shape[0], e = a.x_q.shape[3];
    layer_range in_bytes; /* of x_q and x_kv: not needed */
    status = check_rows(ctx, "x_q", &a.x_q, n, e, false, lp->esize, &lp->x_q,
                        &in_bytes);
    if (status != SDPA_OK)
        return status;
    int64_t hq, hkv, dk, dv;
    status =
        sdpa_layer_check_heads(ctx, WHO, "", &a, n, e, &hq, &hkv, &dk, &dv);
    if (status != SDPA_OK)
        return status;
    const int64_t limit = INT_MAX;
    lp->n = n;
    lp->e = e;
    lp->hq = hq;
    lp->hkv = hkv;
    lp->dk = dk;
    lp->dv = dv;
    lp->tq = a.x_q.shape[2];
    lp->self = a.x_kv.data == NULL;
    if (lp->self) {
        lp->x_kv = lp->x_q;
    } else {
        status = check_rows(ctx, "x_kv", &a.x_kv, n, e, false, lp->esize,
                            &lp->x_kv, &in_bytes);
        if (status != SDPA_OK)
            return status;
    }
    lp->tk = lp->x_kv.len;
    if (lp->tq > limit / n || lp->tk > limit / n)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "sdpa_mha_forward: N · Tq or N · Tk is above the "
                         "BLAS int limit %d",
                         INT_MAX);
    status =
        check_rows(ctx, "y", &a.y, n, e, true, lp->esize, &lp->y, &lp->y_bytes);
    if (status == SDPA_OK && a.y.shape[2] != lp->tq)
        status = sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                           "sdpa_mha_forward: y.shape[2] is %lld, but "
                           "x_q.shape[2] (Tq) is %lld: they must agree",
                           (long long)a.y.shape[2], (long long)lp->tq);
    if (status == SDPA_OK)
        status = check_positions(ctx, &a, lp);
    if (status == SDPA_OK)
        status = check_attn(ctx, &a, lp);
    if (status != SDPA_OK)
        return status;
    lp->w_q = a.w_q, lp->w_k = a.w_k, lp->w_v = a.w_v, lp->w_o = a.w_o;
    lp->b_q = a.b_q, lp->b_k = a.b_k, lp->b_v = a.b_v, lp->b_o = a.b_o;
    status = check_overlaps(ctx, lp);
    if (status != SDPA_OK)
        return status;
    return place_scratch(ctx, lp);
}

int sdpa_mha_forward(sdpa_ctx *ctx, const sdpa_mha_args *args)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    ctx->message[0] = '\0';
    if (!args)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER,
                         "sdpa_mha_forward: args is NULL");
    layer_plan lp;
    int status = validate(ctx, args, &lp);
    if (status != SDPA_OK)
        return status;
    status = sdpa_layer_reserve(ctx, lp.bytes);
    if (status != SDPA_OK)
        return sdpa_fail(ctx, status,
                         "sdpa_mha_forward: cannot allocate %zu bytes of "
                         "scratch for the projections",
                         lp.bytes);
    char *scratch = ctx->layer.ptr;
    const bool f32 = lp.dtype == SDPA_FLOAT32;

    /* 1. the sinusoidal table added to the inputs */
    layer_rows xq = lp.x_q, xkv = lp.x_kv;
    if (lp.positions == SDPA_POS_SINUSOIDAL) {
        void *table = scratch + lp.off_table;
        layer_rows sq =
            sdpa_layer_scratch_rows(scratch, lp.off_xq, lp.n, lp.tq, lp.e);
        if (f32)
            add_sinusoidal_f32(&xq, lp.e, lp.pos_q, lp.offset, lp.base, table,
                               (float *)(void *)sq.data);
        else
            add_sinusoidal_f64(&xq, lp.e, lp.pos_q, lp.offset, lp.base, table,
                               (double *)(void *)sq.data);
        xq = sq;
        if (lp.self) {
            xkv = sq;
        } else {
            layer_rows sk =
                sdpa_layer_scratch_rows(scratch, lp.off_xkv, lp.n, lp.tk, lp.e);
            if (f32)
                add_sinusoidal_f32(&xkv, lp.e, lp.pos_kv, lp.offset, lp.base,
                                   table, (float *)(void *)sk.data);
            else
                add_sinusoidal_f64(&xkv, lp.e, lp.pos_kv, lp.offset, lp.base,
                                   table, (double *)(void *)sk.data);
            xkv = sk;
        }
    }

    /* 2. the projections, [N, T, H·d] each */
    const int64_t wq = lp.hq * lp.dk, wk = lp.hkv * lp.dk;
    const int64_t wv = lp.hkv * lp.dv, wo = lp.hq * lp.dv;
    layer_rows q = sdpa_layer_scratch_rows(scratch, lp.off_q, lp.n, lp.tq, wq);
    layer_rows k = sdpa_layer_scratch_rows(scratch, lp.off_k, lp.n, lp.tk, wk);
    layer_rows v = sdpa_layer_scratch_rows(scratch, lp.off_v, lp.n, lp.tk, wv);
    layer_rows o = sdpa_layer_scratch_rows(scratch, lp.off_o, lp.n, lp.tq, wo);
    if (f32) {
        gemm_rows_f32(&xq, lp.e, lp.w_q, wq, lp.b_q, &q);
        gemm_rows_f32(&xkv, lp.e, lp.w_k, wk, lp.b_k, &k);
        gemm_rows_f32(&xkv, lp.e, lp.w_v, wv, lp.b_v, &v);
    } else {
        gemm_rows_f64(&xq, lp.e, lp.w_q, wq, lp.b_q, &q);
        gemm_rows_f64(&xkv, lp.e, lp.w_k, wk, lp.b_k, &k);
        gemm_rows_f64(&xkv, lp.e, lp.w_v, wv, lp.b_v, &v);
    }
    sdpa_tensor q_view = sdpa_tensor_bthd(q.data, lp.n, lp.hq, lp.tq, lp.dk);
    sdpa_tensor k_view = sdpa_tensor_bthd(k.data, lp.n, lp.hkv, lp.tk, lp.dk);

    /* 3. rotary embeddings on Q and K (validated: cannot fail) */
    if (lp.positions == SDPA_POS_ROPE_HALF ||
        lp.positions == SDPA_POS_ROPE_INTERLEAVED) {
        int style = lp.positions == SDPA_POS_ROPE_HALF ? SDPA_ROPE_HALF
                                                       : SDPA_ROPE_INTERLEAVED;
        const int64_t *pq = lp.pos_q, *pk = lp.pos_kv;
        if (lp.off_pq != SIZE_MAX)
            pq = sdpa_layer_fill_positions(scratch, lp.off_pq, lp.n, lp.tq,
                                           lp.offset, 1);
        if (lp.self)
            pk = pq;
        else if (lp.off_pk != SIZE_MAX)
            pk = sdpa_layer_fill_positions(scratch, lp.off_pk, lp.n, lp.tk,
                                           lp.offset, 1);
        (void)sdpa_rope_apply(lp.dtype, q_view, pq, style, lp.base, 0);
        (void)sdpa_rope_apply(lp.dtype, k_view, pk, style, lp.base, 0);
    }

    /* 4. attention, every head at once, into O = [N, Tq, Hq·dv] */
    sdpa_forward_args *f = &lp.attn;
    f->q = q_view;
    f->k = k_view;
    f->v = sdpa_tensor_bthd(v.data, lp.n, lp.hkv, lp.tk, lp.dv);
    f->out = sdpa_tensor_bthd(o.data, lp.n, lp.hq, lp.tq, lp.dv);
    status = sdpa_forward(ctx, f);
    if (status != SDPA_OK)
        return sdpa_layer_attention_failed(ctx, WHO, status);

    /* 5. y = O W_O (+ b_O): the first and only write to y */
    if (f32)
        gemm_rows_f32(&o, wo, lp.w_o, lp.e, lp.b_o, &lp.y);
    else
        gemm_rows_f64(&o, wo, lp.w_o, lp.e, lp.b_o, &lp.y);
    return SDPA_OK;
}
