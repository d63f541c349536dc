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
 * The validation of the forward's arguments follows layer.c's rules and
 * messages, through the helpers both share (layer_common.h).
 */
#include "layer/layer_common.h"

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

/* layer_impl.h's static gemm_rows_f32/_f64 and add_sinusoidal_*. */
#define SDPA_TEMPLATE "layer/layer_impl.h"
#include "core/instantiate.h"

/* The call, validated and resolved, and where each piece of scratch goes. */
typedef struct bwd_plan {
    int dtype;
    size_t esize;
    int positions;
    double base;
    int64_t offset;
    const int64_t *pos_q, *pos_kv;
    int64_t n, tq, tk, e, hq, hkv, dk, dv;
    layer_rows x_q, x_kv; /* x_kv is x_q in self-attention */
    layer_rows dy, dx_q, dx_kv;
    bool self, has_dx_q, has_dx_kv;
    const void *w_q, *w_k, *w_v, *w_o, *b_q, *b_k, *b_v, *b_o;
    void *dw_q, *dw_k, *dw_v, *dw_o, *db_q, *db_k, *db_v, *db_o;
    sdpa_forward_args attn; /* the caller's options; no tensors set */
    /* byte offsets into the scratch (SIZE_MAX: not used) */
    size_t off_pq, off_pk, off_nq, off_nk, off_table, off_xq, off_xkv;
    size_t off_q, off_k, off_v, off_o, off_lse, off_do, off_dq, off_dk, off_dv;
    size_t bytes;
} bwd_plan;

/* out[i] = -pos[i] (validated: no pos[i] is INT64_MIN). */
static int64_t *negate_positions(char *scratch, size_t at, int64_t n,
                                 int64_t len, const int64_t *pos)
{
    int64_t *p = (int64_t *)(void *)(scratch + at);
    for (int64_t i = 0; i < n * len; i++)
        p[i] = -pos[i];
    return p;
}

/* The static layer_backward_f32/_f64 and its transposed products and
 * column sums (HACKING.md's naming rule). */
#define SDPA_TEMPLATE "layer/layer_backward_impl.h"
#include "core/instantiate.h"

/* ---- validation ---------------------------------------------------------
 */

/* Checks a [N, 1, len, d_model] layer tensor (x_q, x_kv, dy, dx_q, dx_kv)
 * by sdpa_mha_forward's rules: positive extents, N and d_model as given,
 * len as given unless it is negative, strides >= 0 with the innermost 1,
 * rows no closer than their length, an output that writes no element
 * twice, no overflow. Fills *rows and *r (its bytes). */
static int check_rows(sdpa_ctx *ctx, const char *name, const sdpa_tensor *t,
                      int64_t n, int64_t len_expected, int64_t e, bool output,
                      size_t esize, layer_rows *rows, layer_range *r)
{
    int status = sdpa_layer_check_shape(ctx, WHO, name, t);
    if (status != SDPA_OK)
        return status;
    if (t->shape[0] != n || t->shape[3] != e ||
        (len_expected >= 0 && t->shape[2] != len_expected))
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         WHO "%s is [%lld, 1, %lld, %lld], but the layer has "
                             "N = %lld, d_model = %lld%s",
                         name, (long long)t->shape[0], (long long)t->shape[2],
                         (long long)t->shape[3], (long long)n, (long long)e,
                         len_expected >= 0 ? " and that many tokens" : "");
    layer_rows checked;
    layer_range bytes;
    status = sdpa_layer_check_strides(ctx, WHO, name, t, n, e, output, esize,
                                      &checked, &bytes);
    if (status != SDPA_OK)
        return status;
    if (checked.s2 > INT_MAX || checked.s0 > INT_MAX)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         WHO "a stride of %s is above the BLAS int limit %d",
                         name, INT_MAX);
    *rows = checked;
    *r = bytes;
    return SDPA_OK;
}

/* A position that cannot be negated (the inverse rotation's). */
static bool has_int64_min(const int64_t *pos, int64_t count)
{
    for (int64_t i = 0; pos && i < count; i++)
        if (pos[i] == INT64_MIN)
            return true;
    return false;
}

/* Everything about the positional encoding (layer.c's rules). */
static int check_positions(sdpa_ctx *ctx, const sdpa_mha_args *a, bwd_plan *lp)
{
    if (a->positions < SDPA_POS_NONE ||
        a->positions > SDPA_POS_ROPE_INTERLEAVED)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         WHO "forward->positions is %d, not an SDPA_POS_* "
                             "value",
                         a->positions);
    int status = sdpa_layer_check_pos_values(ctx, WHO, a);
    if (status != SDPA_OK)
        return status;
    if (lp->self && a->pos_kv)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         WHO "pos_kv is set in self-attention (x_kv "
                             "absent)");
    bool rope = a->positions == SDPA_POS_ROPE_HALF ||
                a->positions == SDPA_POS_ROPE_INTERLEAVED;
    if (rope && lp->dk % 2 != 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         WHO "RoPE rotates pairs, but dim_k is %lld, odd",
                         (long long)lp->dk);
    status =
        sdpa_layer_check_pos_offset(ctx, WHO, a->pos_offset, lp->tq, lp->tk);
    if (status != SDPA_OK)
        return status;
    if (rope && (a->pos_offset == INT64_MIN ||
                 has_int64_min(a->pos_q, lp->n * lp->tq) ||
                 has_int64_min(a->pos_kv, lp->n * lp->tk)))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         WHO "a position is INT64_MIN, whose rotation the "
                             "backward cannot invert (it negates positions)");
    lp->positions = a->positions;
    lp->base = a->pos_base;
    lp->offset = a->pos_offset;
    lp->pos_q = a->pos_q;
    lp->pos_kv = lp->self ? a->pos_q : a->pos_kv;
    return SDPA_OK;
}

/* The attention options: a zero-filled copy of *attn as this library
 * knows it, without any tensor the layer makes or an output of it. */
static int check_attn(sdpa_ctx *ctx, const sdpa_mha_args *a, bwd_plan *lp)
{
    sdpa_forward_args *f = &lp->attn;
    int status = sdpa_layer_import_attn(ctx, WHO, "forward->attn", a->attn,
                                        lp->dtype, "", f);
    if (status != SDPA_OK)
        return status;
    /* the forward's outputs: not written by the backward */
    const sdpa_tensor none = {NULL, {0, 0, 0, 0}, {0, 0, 0, 0}};
    f->weights = f->lse = f->max_weight = f->entropy = none;
    return SDPA_OK;
}

/* The outputs meet neither each other nor what is read while they are
 * written (x_q, x_kv, dy, the weights and the biases). */
static int check_overlaps(sdpa_ctx *ctx, const bwd_plan *lp,
                          const layer_range *rows, int n_rows_in, int n_rows)
{
    const size_t es = lp->esize, e = (size_t)lp->e;
    size_t wq = (size_t)(lp->hq * lp->dk), wk = (size_t)(lp->hkv * lp->dk);
    size_t wv = (size_t)(lp->hkv * lp->dv), wo = (size_t)(lp->hq * lp->dv);
    const struct {
        const char *name;
        const void *p;
        size_t elems, times; /* their product, the element count */
        bool output;
    } params[] = {
        {"w_q", lp->w_q, e, wq, false},  {"w_k", lp->w_k, e, wk, false},
        {"w_v", lp->w_v, e, wv, false},  {"w_o", lp->w_o, wo, e, false},
        {"b_q", lp->b_q, wq, 1, false},  {"b_k", lp->b_k, wk, 1, false},
        {"b_v", lp->b_v, wv, 1, false},  {"b_o", lp->b_o, e, 1, false},
        {"dw_q", lp->dw_q, e, wq, true}, {"dw_k", lp->dw_k, e, wk, true},
        {"dw_v", lp->dw_v, e, wv, true}, {"dw_o", lp->dw_o, wo, e, true},
        {"db_q", lp->db_q, wq, 1, true}, {"db_k", lp->db_k, wk, 1, true},
        {"db_v", lp->db_v, wv, 1, true}, {"db_o", lp->db_o, e, 1, true}};
    enum { PARAMS = sizeof params / sizeof params[0] };
    layer_range in[PARAMS + 3], out[PARAMS + 2];
    int n_in = 0, n_out = 0;
    for (int i = 0; i < n_rows; i++)
        if (i < n_rows_in)
            in[n_in++] = rows[i];
        else
            out[n_out++] = rows[i];
    for (int i = 0; i < PARAMS; i++) {
        layer_range r;
        if (!params[i].p)
            continue;
        int status =
            sdpa_layer_param_range(ctx, WHO, params[i].name, params[i].p,
                                   params[i].elems, params[i].times, es, &r);
        if (status != SDPA_OK)
            return status;
        if (params[i].output)
            out[n_out++] = r;
        else
            in[n_in++] = r;
    }
    for (int o = 0; o < n_out; o++) {
        for (int i = 0; i < n_in; i++)
            if (sdpa_layer_ranges_meet(&out[o], &in[i]))
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 WHO "output %s overlaps the input %s",
                                 out[o].name, in[i].name);
        for (int p = 0; p < o; p++)
            if (sdpa_layer_ranges_meet(&out[o], &out[p]))
                return sdpa_fail(ctx, SDPA_ERR_OVERLAP,
                                 WHO "output %s overlaps output %s",
                                 out[o].name, out[p].name);
    }
    return SDPA_OK;
}

/* Where each piece of scratch goes, and how much there is. */
static int place_scratch(sdpa_ctx *ctx, bwd_plan *lp)
{
    const size_t es = lp->esize, e = (size_t)lp->e;
    const size_t rows_q = (size_t)(lp->n * lp->tq);
    const size_t rows_k = (size_t)(lp->n * lp->tk);
    const bool rope = lp->positions == SDPA_POS_ROPE_HALF ||
                      lp->positions == SDPA_POS_ROPE_INTERLEAVED;
    size_t total = 0, count;
    bool ok = true;
    lp->off_pq = lp->off_pk = lp->off_nq = lp->off_nk = SIZE_MAX;
    lp->off_table = lp->off_xq = lp->off_xkv = SIZE_MAX;
    if (rope) {
        if (!lp->pos_q && lp->offset != 0)
            lp->off_pq = sdpa_layer_take(&total, rows_q, sizeof(int64_t), &ok);
        lp->off_nq = sdpa_layer_take(&total, rows_q, sizeof(int64_t), &ok);
        if (!lp->self) {
            if (!lp->pos_kv && lp->offset != 0)
                lp->off_pk =
                    sdpa_layer_take(&total, rows_k, sizeof(int64_t), &ok);
            lp->off_nk = sdpa_layer_take(&total, rows_k, sizeof(int64_t), &ok);
        }
    }
    if (lp->positions == SDPA_POS_SINUSOIDAL) {
        size_t longest = (size_t)(lp->tq > lp->tk ? lp->tq : lp->tk);
        ok = ok && sdpa_mul_size(longest, e, &count);
        lp->off_table = sdpa_layer_take(&total, ok ? count : 0, es, &ok);
        ok = ok && sdpa_mul_size(rows_q, e, &count);
        lp->off_xq = sdpa_layer_take(&total, ok ? count : 0, es, &ok);
        if (!lp->self) {
            ok = ok && sdpa_mul_size(rows_k, e, &count);
            lp->off_xkv = sdpa_layer_take(&total, ok ? count : 0, es, &ok);
        }
    }
    const size_t wq = (size_t)(lp->hq * lp->dk),
                 wk = (size_t)(lp->hkv * lp->dk);
    const size_t wv = (size_t)(lp->hkv * lp->dv),
                 wo = (size_t)(lp->hq * lp->dv);
    const struct {
        size_t *off, rows, width;
    } parts[] = {{&lp->off_q, rows_q, wq},
                 {&lp->off_k, rows_k, wk},
                 {&lp->off_v, rows_k, wv},
                 {&lp->off_o, rows_q, wo},
                 {&lp->off_lse, rows_q, (size_t)lp->hq},
                 {&lp->off_do, rows_q, wo},
                 {&lp->off_dq, rows_q, wq},
                 {&lp->off_dk, rows_k, wk},
                 {&lp->off_dv, rows_k, wv}};
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        ok = ok && sdpa_mul_size(parts[i].rows, parts[i].width, &count);
        *parts[i].off = sdpa_layer_take(&total, ok ? count : 0, es, &ok);
    }
    if (!ok || total > PTRDIFF_MAX)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         WHO "the scratch (projections of %lld and %lld "
                             "rows) overflows size_t",
                         (long long)lp->n * lp->tq, (long long)lp->n * lp->tk);
    lp->bytes = total;
    return SDPA_OK;
}

static int validate(sdpa_ctx *ctx, const sdpa_mha_backward_args *caller,
                    bwd_plan *lp)
{
    sdpa_mha_backward_args b;
    int status = sdpa_struct_import(
        ctx, WHO "args", caller, SDPA_MHA_BACKWARD_ARGS_SIZE_V1, &b, sizeof b);
    if (status != SDPA_OK)
        return status;
    if (!b.forward)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, WHO "forward is NULL");
    sdpa_mha_args a;
    status = sdpa_struct_import(ctx, WHO "forward", b.forward,
                                SDPA_MHA_ARGS_SIZE_V1, &a, sizeof a);
    if (status != SDPA_OK)
        return status;
    memset(lp, 0, sizeof *lp);
    if (a.dtype != SDPA_FLOAT32 && a.dtype != SDPA_FLOAT64)
        return sdpa_fail(ctx, SDPA_ERR_BAD_DTYPE,
                         WHO "forward->dtype %d is neither SDPA_FLOAT32 nor "
                             "SDPA_FLOAT64",
                         a.dtype);
    lp->dtype = a.dtype;
    lp->esize = a.dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
    const struct {
        const char *name;
        const void *p;
    } required[] = {{"forward->x_q.data", a.x_q.data}, {"forward->w_q", a.w_q},
                    {"forward->w_k", a.w_k},           {"forward->w_v", a.w_v},
                    {"forward->w_o", a.w_o},           {"dy.data", b.dy.data}};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++)
        if (!required[i].p)
            return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, WHO "%s is NULL",
                             required[i].name);

    /* x_q fixes N, Tq and d_model; the heads fix the widths. */
    const int64_t n = a.x_q.shape[0], e = a.x_q.shape[3];
    layer_range rows[5];
    int n_rows = 0;
    status = check_rows(ctx, "x_q", &a.x_q, n, -1, e, false, lp->esize,
                        &lp->x_q, &rows[n_rows++]);
    if (status != SDPA_OK)
        return status;
    int64_t hq, hkv, dk, dv;
    status = sdpa_layer_check_heads(ctx, WHO, "forward->", &a, n, e, &hq, &hkv,
                                    &dk, &dv);
    if (status != SDPA_OK)
        return status;
    const int64_t limit = INT_MAX;
    lp->n = n, lp->e = e, lp->hq = hq, lp->hkv = hkv, lp->dk = dk, lp->dv = dv;
    lp->tq = a.x_q.shape[2];
    lp->self = a.x_kv.data == NULL;
    if (lp->self) {
        lp->x_kv = lp->x_q;
    } else {
        status = check_rows(ctx, "x_kv", &a.x_kv, n, -1, e, false, lp->esize,
                            &lp->x_kv, &rows[n_rows++]);
        if (status != SDPA_OK)
            return status;
    }
    lp->tk = lp->x_kv.len;
    if (lp->tq > limit / n || lp->tk > limit / n)
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         WHO "N · Tq or N · Tk is above the BLAS int limit "
                             "%d",
                         INT_MAX);
    status = check_rows(ctx, "dy", &b.dy, n, lp->tq, e, false, lp->esize,
                        &lp->dy, &rows[n_rows++]);
    if (status != SDPA_OK)
        return status;
    const int n_rows_in = n_rows;
    lp->has_dx_q = b.dx_q.data != NULL;
    lp->has_dx_kv = b.dx_kv.data != NULL;
    if (lp->has_dx_kv && lp->self)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         WHO "dx_kv is set in self-attention (forward->x_kv "
                             "absent): dx_q receives the whole gradient");
    if (lp->has_dx_q)
        status = check_rows(ctx, "dx_q", &b.dx_q, n, lp->tq, e, true, lp->esize,
                            &lp->dx_q, &rows[n_rows++]);
    if (status == SDPA_OK && lp->has_dx_kv)
        status = check_rows(ctx, "dx_kv", &b.dx_kv, n, lp->tk, e, true,
                            lp->esize, &lp->dx_kv, &rows[n_rows++]);
    if (status == SDPA_OK)
        status = check_positions(ctx, &a, lp);
    if (status == SDPA_OK)
        status = check_attn(ctx, &a, lp);
    if (status != SDPA_OK)
        return status;
    lp->w_q = a.w_q, lp->w_k = a.w_k, lp->w_v = a.w_v, lp->w_o = a.w_o;
    lp->b_q = a.b_q, lp->b_k = a.b_k, lp->b_v = a.b_v, lp->b_o = a.b_o;
    lp->dw_q = b.dw_q, lp->dw_k = b.dw_k, lp->dw_v = b.dw_v, lp->dw_o = b.dw_o;
    lp->db_q = b.db_q, lp->db_k = b.db_k, lp->db_v = b.db_v, lp->db_o = b.db_o;
    status = check_overlaps(ctx, lp, rows, n_rows_in, n_rows);
    if (status != SDPA_OK)
        return status;
    return place_scratch(ctx, lp);
}

int sdpa_mha_backward(sdpa_ctx *ctx, const sdpa_mha_backward_args *args)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    ctx->message[0] = '\0';
    if (!args)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, WHO "args is NULL");
    bwd_plan lp;
    int status = validate(ctx, args, &lp);
    if (status != SDPA_OK)
        return status;
    status = sdpa_layer_reserve(ctx, lp.bytes);
    if (status != SDPA_OK)
        return sdpa_fail(ctx, status,
                         WHO "cannot allocate %zu bytes of scratch for the "
                             "projections and their gradients",
                         lp.bytes);
    char *scratch = ctx->layer.ptr;
    if (lp.dtype == SDPA_FLOAT32)
        return layer_backward_f32(ctx, &lp, scratch);
    return layer_backward_f64(ctx, &lp, scratch);
}
