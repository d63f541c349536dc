/* Decoding a layer call for the fuzz targets; see fuzz_layer.h. */
#include "fuzz_layer.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { MHA_ARGS_V1 = 368, FORWARD_ARGS_V1 = 624 };

int64_t fz_layer_pos(const fz_layer_call *c, int kv, int64_t b, int64_t t)
{
    const int64_t *p = kv && !c->self ? c->pos_kv : c->pos_q;
    int64_t len = kv ? c->Tk : c->Tq;
    return p ? p[b * len + t] : c->offset + t;
}

void fz_layer_describe(const fz_layer_call *c)
{
    fz_desc[0] = '\0';
    fz_describe("%sdtype=%d N=%lld Tq=%lld Tk=%lld E=%lld heads=%lld/%lld "
                "dim=%lld/%lld (args %lld/%lld/%lld/%lld) self=%d "
                "positions=%d base=%g offset=%lld pos_q=%d pos_kv=%d "
                "attn=%d zero=%lld path=%lld threads=%lld special=%d",
                c->huge ? "HUGE " : "", c->dt.dtype, (long long)c->N,
                (long long)c->Tq, (long long)c->Tk, (long long)c->E,
                (long long)c->Hq, (long long)c->Hkv, (long long)c->dk,
                (long long)c->dv, (long long)c->a.heads_q,
                (long long)c->a.heads_kv, (long long)c->a.dim_k,
                (long long)c->a.dim_v, c->self, c->a.positions, c->a.pos_base,
                (long long)c->a.pos_offset, c->a.pos_q != NULL,
                c->a.pos_kv != NULL, c->has_attn, (long long)fz_opt.empty_zero,
                (long long)fz_opt.path, (long long)fz_opt.threads, c->special);
    const fz_tens *t[3] = {&c->x_q, &c->x_kv, &c->y};
    const char *n[3] = {"x_q", "x_kv", "y"};
    for (int i = 0; i < 3; i++)
        if (t[i]->present)
            fz_describe(
                " %s{%lld,%lld,%lld,%lld|%lld,%lld,%lld,%lld}", n[i],
                (long long)t[i]->t.shape[0], (long long)t[i]->t.shape[1],
                (long long)t[i]->t.shape[2], (long long)t[i]->t.shape[3],
                (long long)t[i]->t.stride[0], (long long)t[i]->t.stride[1],
                (long long)t[i]->t.stride[2], (long long)t[i]->t.stride[3]);
    if (c->has_attn)
        fz_describe(" attn{causal=%d flags=0x%x window=%lld,%lld scale=%g "
                    "softcap=%g kv_lens=%d mask=%d bias=%d alibi=%d sinks=%d "
                    "outs=%d%d%d%d}",
                    c->attn.causal, c->attn.flags,
                    (long long)c->attn.window_left,
                    (long long)c->attn.window_right, c->attn.scale,
                    c->attn.softcap, c->attn.kv_lens != NULL, c->mask.present,
                    c->bias.present, c->attn.alibi_slopes != NULL,
                    c->attn.sinks != NULL, c->out[0].present, c->out[1].present,
                    c->out[2].present, c->out[3].present);
}

/* A [N, 1, T, E] layer tensor: contiguous, padded rows, sequence-first
 * (memory [T, N, E]), or contiguous with a stride[1] that is not used. */
static void rows_layout(fz_tens *x, int64_t n, int64_t t, int64_t e,
                        unsigned mode, size_t es)
{
    x->present = 1;
    x->es = es;
    fz_set_layout(&x->t, n, 1, t, e, 0, mode == 1 ? 3 : 0);
    if (mode == 2) {
        x->t.stride[0] = e;
        x->t.stride[2] = fz_sat_mul(n, e);
        x->t.stride[1] = 0;
    } else if (mode == 3) {
        x->t.stride[1] = 12345; /* extent 1: never used */
    }
}

static fz_buf *param(const char *name, size_t n, size_t es, double amp)
{
    fz_buf *b = fz_buf_new(name, 0, n * es);
    for (size_t i = 0; i < n; i++)
        fz_set_raw(b->mem, es, (int64_t)i, fz_sym(amp));
    return b;
}

/* The attention options and outputs (attn != NULL). */
static void decode_attn(fz_layer_call *c, size_t es)
{
    sdpa_forward_args *f = &c->attn;
    *f = (sdpa_forward_args)SDPA_FORWARD_ARGS_INIT;
    fz_decode_causal_window(f, fz(L_CAUSAL), fz(L_WINDOW));
    const int64_t full[4] = {c->N, c->Hq, c->Tq, c->Tk};
    c->mask.present = fz(L_MASK) % 3 == 1;
    c->mask.es = 1;
    fz_broadcast_layout(&c->mask.t, fz(L_MASK_B), full);
    c->bias.present = fz(L_BIAS) % 3 == 1;
    c->bias.es = es;
    fz_broadcast_layout(&c->bias.t, fz(L_BIAS_B), full);
    if (fz(L_MASK) & 0x40)
        f->flags |= SDPA_FLAG_MASK_NONZERO_ALLOWS;
    if (fz(L_KVLENS) % 3 == 1) {
        for (int64_t b = 0; b < c->N; b++)
            c->kv_lens[b] = (int64_t)((fz(L_KVLENS) >> (2 + 3 * b)) %
                                      (unsigned)(c->Tk + 1));
        f->kv_lens = c->kv_lens;
    }
    unsigned ex = fz(L_EXTRAS);
    if (ex & 1 && c->Hq <= 8) {
        c->slopes = (double *)(void *)fz_buf_new("alibi_slopes", 0, 64)->mem;
        for (int64_t h = 0; h < c->Hq; h++)
            c->slopes[h] = fz_sym(1.0);
        f->alibi_slopes = c->slopes;
    }
    if (ex & 2 && c->Hq <= 8) {
        c->sinks = (double *)(void *)fz_buf_new("sinks", 0, 64)->mem;
        for (int64_t h = 0; h < c->Hq; h++)
            c->sinks[h] = fz_sym(3.0);
        f->sinks = c->sinks;
    }
    if (ex & 4)
        f->softcap = 1.0 + (double)(ex >> 4);
    if (ex & 8)
        f->scale = 0.2 + (double)(ex >> 5) / 8;
    for (int i = 0; i < A_COUNT; i++) {
        fz_tens *o = &c->out[i];
        o->present = (fz(L_ATTN_OUT) >> i) & 1;
        o->es = es;
        fz_set_layout(&o->t, c->N, c->Hq, c->Tq, i == A_WEIGHTS ? c->Tk : 1, 0,
                      0);
    }
}

/* The statuses the heads, widths and positions call for. */
static void check_heads(fz_layer_call *c)
{
    const sdpa_mha_args *a = &c->a;
    fz_sset *e = &c->errs;
    if (a->heads_q <= 0 || a->heads_kv < 0 || a->dim_k < 0 || a->dim_v < 0) {
        *e |= FZ_BIT(SDPA_ERR_BAD_DIM);
        return;
    }
    int64_t kv = a->heads_kv ? a->heads_kv : a->heads_q;
    if (a->heads_q % kv != 0)
        *e |= FZ_BIT(SDPA_ERR_HEAD_GROUPING);
    else if (a->dim_k == 0 && c->E % a->heads_q != 0)
        *e |= FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
}

int fz_layer_call_forward(sdpa_ctx *ctx, const void *args)
{
    return sdpa_mha_forward(ctx, args);
}

int fz_layer_call_backward(sdpa_ctx *ctx, const void *args)
{
    return sdpa_mha_backward(ctx, args);
}

void fz_layer_end(sdpa_ctx *ctx, struct fz_layer_ref *r)
{
    if (r)
        fz_layer_ref_free(r);
    fz_ctx_end(ctx);
}

/* The input's call (its views point into it). */
static fz_layer_call g_call;

fz_layer_call *fz_layer_decode(int backward)
{
    fz_layer_call *c = &g_call;
    memset(c, 0, sizeof *c);
    c->backward = backward;
    c->dt = fz_decode_dtype(fz(L_DTYPE), fz(L_DTYPE_RAW));
    if (!c->dt.valid)
        c->errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    const size_t es = fz_esize(c->dt.compute);
    c->N = 1 + (int64_t)(fz(L_N) % 2);
    c->Tq = 1 + (int64_t)(fz(L_TQ) % 4);
    c->self = fz(L_SELF) % 3 != 0;
    c->Tk = c->self ? c->Tq : 1 + (int64_t)(fz(L_TK) % 5);
    c->E = 1 + (int64_t)(fz(L_E) % 8);
    sdpa_mha_args *a = &c->a;
    *a = (sdpa_mha_args)SDPA_MHA_ARGS_INIT;
    a->dtype = c->dt.dtype;
    a->heads_q = 1 + (int64_t)(fz(L_HQ) % 4);
    unsigned hv = fz(L_HKV) % 4;
    a->heads_kv = hv == 0 ? 0 : hv == 1 ? a->heads_q : hv == 2 ? 1 : 0;
    if (hv == 3 && fz(L_HKV) & 4)
        a->heads_kv = a->heads_q + 1; /* not a divisor */
    a->dim_k = fz(L_DK) % 4 == 0 ? 0 : (int64_t)(fz(L_DK) % 4);
    a->dim_v = fz(L_DV) % 4 == 0 ? 0 : (int64_t)(fz(L_DV) % 4);
    if (fz(L_DK) & 8)
        a->dim_k *= 2; /* even: what RoPE needs */
    /* positions */
    unsigned pv = fz(L_POS) % 8;
    static const int pos_of[7] = {SDPA_POS_NONE,      SDPA_POS_NONE,
                                  SDPA_POS_NONE,      SDPA_POS_SINUSOIDAL,
                                  SDPA_POS_ROPE_HALF, SDPA_POS_ROPE_INTERLEAVED,
                                  SDPA_POS_SINUSOIDAL};
    if (pv < 7) {
        a->positions = pos_of[pv];
    } else {
        static const int bad[3] = {4, -1, INT_MAX};
        a->positions = bad[(fz(L_POS) >> 3) % 3];
        c->errs |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
    }
    int rope = a->positions == SDPA_POS_ROPE_HALF ||
               a->positions == SDPA_POS_ROPE_INTERLEAVED;
    int none = a->positions == SDPA_POS_NONE;
    /* base and offset: set only with a positional encoding (else
     * BAD_OPTION_VALUE); a base below 1 is BAD_SCALE (finding 1) */
    unsigned bv = fz(L_POS_BASE) % 8;
    static const double bases[4] = {10000, 500, 2, 1e6};
    a->pos_base = bv < 4 ? 0 : bv < 7 ? bases[bv - 4] : 0;
    if (bv == 7) { /* bases below 1: finding 1, refused since */
        static const double bad[4] = {NAN, 0.5, INFINITY, 1e-310};
        a->pos_base = bad[(fz(L_POS_BASE) >> 3) % 4];
        c->errs |= FZ_BIT(SDPA_ERR_BAD_SCALE);
    }
    unsigned ov = fz(L_POS_OFF) % 8;
    static const int64_t offs[4] = {3, -7, INT64_C(1) << 40, INT64_MAX};
    a->pos_offset = ov < 4 ? 0 : offs[ov - 4];
    int64_t longest = c->Tq > c->Tk ? c->Tq : c->Tk;
    if (a->pos_offset > 0 && longest - 1 > INT64_MAX - a->pos_offset)
        c->errs |= FZ_BIT(SDPA_ERR_OVERFLOW); /* offset + tokens */
    unsigned pa = fz(L_POS_ARR) % 4;
    if (pa >= 2) {
        fz_buf *pq = fz_buf_new("pos_q", 0, (size_t)(c->N * c->Tq) * 8);
        c->pos_q = (int64_t *)(void *)pq->mem;
        for (int64_t i = 0; i < c->N * c->Tq; i++)
            c->pos_q[i] = fz_below(101) - 50;
        a->pos_q = c->pos_q;
    }
    if (pa == 3) { /* in self-attention: BAD_OPTION_VALUE */
        fz_buf *pk = fz_buf_new("pos_kv", 0, (size_t)(c->N * c->Tk) * 8);
        c->pos_kv = (int64_t *)(void *)pk->mem;
        for (int64_t i = 0; i < c->N * c->Tk; i++)
            c->pos_kv[i] = fz_below(101) - 50;
        a->pos_kv = c->pos_kv;
        if (c->self)
            c->errs |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
    }
    if (none &&
        (a->pos_base != 0 || a->pos_offset != 0 || a->pos_q || a->pos_kv))
        c->errs |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
    c->positions = a->positions;
    c->base = a->pos_base;
    c->offset = a->pos_offset;
    check_heads(c);
    /* the resolved widths (sizes for the buffers even when refused) */
    c->Hq = a->heads_q > 0 ? a->heads_q : 1;
    c->Hkv = a->heads_kv > 0 ? a->heads_kv : c->Hq;
    c->dk = a->dim_k > 0 ? a->dim_k : c->E / c->Hq > 0 ? c->E / c->Hq : 1;
    c->dv = a->dim_v > 0 ? a->dim_v : c->dk;
    if (rope && c->dk % 2 != 0 && !(c->errs & FZ_BIT(SDPA_ERR_BAD_DIM)))
        c->errs |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
    if (c->backward && rope && a->pos_offset == INT64_MIN)
        c->errs |= FZ_BIT(SDPA_ERR_OVERFLOW);

    /* tensors */
    unsigned lay = fz(L_LAYOUT);
    rows_layout(&c->x_q, c->N, c->Tq, c->E, lay & 3, es);
    if (!c->self)
        rows_layout(&c->x_kv, c->N, c->Tk, c->E, (lay >> 2) & 3, es);
    if (!backward)
        rows_layout(&c->y, c->N, c->Tq, c->E, (lay >> 4) & 3, es);
    c->has_attn = fz(L_ATTN) % 4 != 0;
    if (c->has_attn)
        decode_attn(c, es);

    /* one argument error */
    unsigned bk = fz(L_BAD_KIND) % 24, bw = fz(L_BAD_WHICH);
    unsigned bval = fz(L_BAD_VAL);
    fz_tens *rows[3] = {&c->x_q, c->self ? &c->x_q : &c->x_kv,
                        backward ? &c->x_q : &c->y};
    fz_tens *rt = rows[bw % 3];
    int rd = (int)((bw >> 2) % 4);
    int null_which = -1, overlap = -1, attn_err = -1;
    size_t fallback = 0;
    fz_sset *e = &c->errs;
    switch (bk) {
    case 12:
        null_which = (int)(bval % 8);
        *e |= FZ_BIT(SDPA_ERR_NULL_POINTER);
        break;
    case 13: { /* a shape: <= 0, shape[1] != 1, N / E / T disagree */
        static const int64_t vals[4] = {0, -1, 2, 9};
        fallback = fz_small_span(&rt->t);
        int64_t nv = vals[bval % 4];
        if (nv == rt->t.shape[rd])
            nv = 9;
        if (rt == &c->x_kv && rd == 2 && nv > 0)
            nv = -1; /* x_kv's T is free (Tk) */
        rt->t.shape[rd] = nv;
        *e |= FZ_BIT(nv <= 0 ? SDPA_ERR_BAD_DIM : SDPA_ERR_SHAPE_MISMATCH);
        if (rt == &c->x_q) /* x_q fixes N, Tq, d_model */
            *e |= FZ_BIT(SDPA_ERR_SHAPE_MISMATCH) | FZ_BIT(SDPA_ERR_BAD_DIM) |
                  FZ_BIT(SDPA_ERR_BAD_STRIDE) | FZ_BIT(SDPA_ERR_HEAD_GROUPING) |
                  FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE) | FZ_BIT(SDPA_ERR_OVERFLOW);
        break;
    }
    case 14: { /* strides: negative, innermost != 1, rows too close */
        unsigned k = bval % 4;
        if (k == 0) {
            rt->t.stride[rd == 1 ? 2 : rd] = -1;
            if (rt->t.shape[rd == 1 ? 2 : rd] > 1)
                *e |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            else
                c->amb |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        } else if (k == 1) {
            rt->t.stride[3] = 2;
            if (c->E > 1)
                *e |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        } else { /* rows closer than their length (that meet, for y) */
            rt->t.stride[2] = c->E - 1;
            if (rt->t.shape[2] > 1)
                *e |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        }
        break;
    }
    case 15: { /* heads and widths */
        switch (bval % 4) {
        case 0:
            a->heads_q = bval & 4 ? 0 : -2;
            break;
        case 1:
            a->heads_kv = -1;
            break;
        case 2:
            a->dim_k = -3;
            break;
        default:
            a->dim_v = INT64_MIN;
            break;
        }
        *e |= FZ_BIT(SDPA_ERR_BAD_DIM);
        break;
    }
    case 16: /* attn's own errors (or attn given q / out) */
        if (c->has_attn)
            attn_err = (int)(bval % 8);
        break;
    case 17: { /* overlaps (of the forward's outputs only) */
        overlap = (int)(bval % 4);
        int can = !backward &&
                  (overlap < 2 ||
                   (overlap == 2 && c->has_attn &&
                    (c->out[A_LSE].present || c->out[A_WEIGHTS].present)) ||
                   (overlap == 3 && c->has_attn && c->out[A_MAXW].present &&
                    c->out[A_ENT].present));
        if (can)
            *e |= FZ_BIT(SDPA_ERR_OVERLAP);
        else
            overlap = -1;
        if (overlap == 3)
            c->errs_attn |= FZ_BIT(SDPA_ERR_OVERLAP);
        break;
    }
    case 18: { /* x_q huge at a fake address near the top: refused first */
        static const int64_t big[4] = {INT64_C(1) << 30, INT64_C(1) << 40,
                                       INT64_MAX, INT64_C(3) << 31};
        static const int dims[3] = {0, 2, 3};
        c->huge = 1;
        c->x_q.t.shape[dims[bval % 3]] = big[(bval >> 2) % 4];
        fz_set_layout(&c->x_q.t, c->x_q.t.shape[0], 1, c->x_q.t.shape[2],
                      c->x_q.t.shape[3], 0, 0);
        /* (strides saturated at INT64_MAX may look too close) */
        *e |= FZ_BIT(SDPA_ERR_OVERFLOW) | FZ_BIT(SDPA_ERR_BAD_STRIDE);
        break;
    }
    default:
        break;
    }
    if (c->has_attn && attn_err >= 0) {
        sdpa_forward_args *f = &c->attn;
        fz_sset before = *e;
        switch (attn_err) {
        case 0: /* (set below, once x_q has its data) */
            *e |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
            break;
        case 1:
            f->dtype =
                c->dt.dtype == SDPA_FLOAT32 ? SDPA_FLOAT64 : SDPA_FLOAT32;
            *e |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
            break;
        case 2:
            f->causal = 7;
            *e |= FZ_BIT(SDPA_ERR_BAD_CAUSAL);
            break;
        case 3:
            f->flags |= SDPA_FLAG_WINDOW;
            f->window_right = -4;
            *e |= FZ_BIT(SDPA_ERR_BAD_WINDOW);
            break;
        case 4:
            f->kv_lens = c->kv_lens;
            c->kv_lens[0] = c->Tk + 2;
            *e |= FZ_BIT(SDPA_ERR_BAD_KV_LEN);
            break;
        case 5:
            f->scale = -1;
            *e |= FZ_BIT(SDPA_ERR_BAD_SCALE);
            break;
        case 6:
            f->logits_stage = SDPA_LOGITS_MASKED; /* without logits */
            *e |= FZ_BIT(SDPA_ERR_BAD_LOGITS_STAGE);
            break;
        default: /* (set below) */
            *e |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
            break;
        }
        if (attn_err >= 2 && attn_err <= 6)
            c->errs_attn |= *e & ~before;
    }
    /* y: writes no element twice */
    if (!backward && c->y.present && !fz_sorted_rule(&c->y.t, 0) &&
        c->y.t.shape[0] > 0 && c->y.t.shape[2] > 0)
        *e |= FZ_BIT(SDPA_ERR_BAD_STRIDE);

    /* buffers and values */
    const double amp = 0.3 + 3.0 * (double)(fz(L_AMP) % 8) / 7.0;
    fz_tens *xs[3] = {&c->x_q, &c->x_kv, &c->y};
    const char *xn[3] = {"x_q", "x_kv", "y"};
    for (int i = 0; i < 3; i++) {
        if (!xs[i]->present)
            continue;
        if (i == 0 && c->huge) {
            c->x_q.t.data = fz_top_ptr(0); /* never read */
            continue;
        }
        int inj =
            fz_tens_alloc(xs[i], xn[i], i == 2, xs[i] == rt ? fallback : 0);
        if (inj < 0 && xs[i] == &c->y && !(bk == 13 && rt == &c->y))
            CHECK(*e & FZ_BIT(SDPA_ERR_BAD_STRIDE), "harness: y map");
        if (i == 2)
            continue;
        /* values for calls that get that far (a refused view may point
         * anywhere: the rest stays NaN) */
        sdpa_tensor *t = &xs[i]->t;
        for (int64_t b = 0; b < t->shape[0] && !(*e & ~c->errs_attn); b++)
            for (int64_t r = 0; r < t->shape[2]; r++)
                for (int64_t d = 0; d < t->shape[3]; d++)
                    fz_set(xs[i], fz_off4(t, b, 0, r, d), fz_sym(1.0));
    }
    const int64_t wq = c->Hq * c->dk, wk = c->Hkv * c->dk;
    const int64_t wv = c->Hkv * c->dv, wo = c->Hq * c->dv;
    const double ws = 1 / sqrt((double)c->E);
    c->w[0] = param("w_q", (size_t)(c->E * wq), es, ws * amp);
    c->w[1] = param("w_k", (size_t)(c->E * wk), es, ws);
    c->w[2] = param("w_v", (size_t)(c->E * wv), es, ws);
    c->w[3] = param("w_o", (size_t)(wo * c->E), es, 1 / sqrt((double)wo));
    const int64_t bn[4] = {wq, wk, wv, c->E};
    const char *bnames[4] = {"b_q", "b_k", "b_v", "b_o"};
    for (int i = 0; i < 4; i++)
        if ((fz(L_BIASES) >> i) & 1)
            c->b[i] = param(bnames[i], (size_t)bn[i], es, 0.5);
    a->x_q = c->x_q.t;
    if (!c->self)
        a->x_kv = c->x_kv.t;
    if (!backward)
        a->y = c->y.t;
    a->w_q = c->w[0]->mem;
    a->w_k = c->w[1]->mem;
    a->w_v = c->w[2]->mem;
    a->w_o = c->w[3]->mem;
    const void **bp[4] = {&a->b_q, &a->b_k, &a->b_v, &a->b_o};
    for (int i = 0; i < 4; i++)
        *bp[i] = c->b[i] ? c->b[i]->mem : NULL;
    if (!backward && (lay & 0x40) && !(*e) && (lay & 3) == ((lay >> 4) & 3)) {
        a->y = c->x_q.t; /* in place: y may be x_q */
        fz_buf_as_output(&c->x_q);
    }
    if (c->has_attn) {
        sdpa_forward_args *f = &c->attn;
        if (attn_err == 0) /* the layer makes q and out itself */
            f->q = c->x_q.t;
        else if (attn_err == 7)
            f->out = c->x_q.t;
        if (c->mask.present) {
            (void)fz_tens_alloc(&c->mask, "attn->mask", 0, 0);
            for (size_t i = 0; i < c->mask.b->bytes; i++)
                c->mask.b->mem[i] = (unsigned char)(fz_unit() < 0.3);
            f->mask = c->mask.t;
        }
        if (c->bias.present) {
            (void)fz_tens_alloc(&c->bias, "attn->bias", 0, 0);
            size_t n = c->bias.b->bytes / es;
            for (size_t i = 0; i < n; i++)
                fz_set(&c->bias, (int64_t)i,
                       fz_unit() < 0.2 ? -INFINITY : fz_sym(1.0));
            f->bias = c->bias.t;
        }
        sdpa_tensor *slot[A_COUNT] = {&f->weights, &f->lse, &f->max_weight,
                                      &f->entropy};
        const char *on[A_COUNT] = {"attn->weights", "attn->lse",
                                   "attn->max_weight", "attn->entropy"};
        for (int i = 0; i < A_COUNT; i++)
            if (c->out[i].present) {
                (void)fz_tens_alloc(&c->out[i], on[i], 1, 0);
                *slot[i] = c->out[i].t;
                if (backward) /* not written by the backward */
                    memset(c->out[i].b->map, 0, c->out[i].b->bytes);
            }
    }
    /* the attention's empty rows are known from the reference only */
    switch (overlap) {
    case 0:
        a->y.data = c->w[(bval >> 2) % 4]->mem;
        break;
    case 1:
        a->y.data = c->b[3] ? c->b[3]->mem : c->w[3]->mem;
        break;
    case 2: /* an attention output over y or a weight */
        if (c->out[A_LSE].present)
            c->attn.lse.data = a->y.data;
        else
            c->attn.weights.data = c->w[1]->mem;
        break;
    case 3: /* two attention outputs over each other: the attention's */
        c->attn.entropy.data = c->attn.max_weight.data;
        break;
    default:
        break;
    }
    switch (null_which) {
    case 0:
        c->null_ctx = 1;
        break;
    case 1:
        c->null_args = 1;
        break;
    case 2:
        a->x_q.data = NULL;
        break;
    case 3:
        if (!backward)
            a->y.data = NULL;
        else
            a->w_o = NULL;
        break;
    case 4:
    case 5:
    case 6:
    case 7: { /* w_q, w_k, w_v, w_o */
        const void **w[4] = {&a->w_q, &a->w_k, &a->w_v, &a->w_o};
        *w[null_which - 4] = NULL;
        break;
    }
    default:
        break;
    }
    /* special values: NaN in x_q, a weight or a bias */
    if (fz(L_SPECIAL) % 8 == 7 && !*e) {
        c->special = 1;
        fz_buf *b =
            fz(L_SPECIAL) & 8 ? c->x_q.b : c->w[(fz(L_SPECIAL) >> 4) % 4];
        fz_set_raw(b->mem, es,
                   (int64_t)((fz(L_SPECIAL) >> 6) % (b->bytes / es)), NAN);
    }
    /* struct sizes: the layer's args and its attention options (an older
     * attention struct would hide fields: not decoded here) */
    size_t seen;
    if (c->has_attn) {
        unsigned sel = fz(L_ATTN_STRUCT);
        if (sel % 32 == 24 || sel % 32 == 25)
            sel = 0;
        *e |= fz_pack_struct(sel, &c->attn, sizeof c->attn, FORWARD_ARGS_V1,
                             NULL, 0, c->attn_box.bytes,
                             sizeof c->attn_box.bytes, &seen);
        a->attn = &c->attn_box.a;
    }
    *e |= fz_pack_struct(fz(L_STRUCT), a, sizeof *a, MHA_ARGS_V1, NULL, 0,
                         c->box.bytes, sizeof c->box.bytes, &seen);
    return c;
}

int fz_layer_expect_values(const fz_layer_call *c, const fz_layer_ref *r,
                           fz_sset *expect)
{
    *expect |= FZ_BIT(SDPA_OK);
    const int check_vals =
        !c->special &&
        r->att.logit_absmax + r->att.alibi_absmax + r->att.sink_absmax <= 1e3;
    if (!check_vals)
        *expect |= FZ_BIT(SDPA_ERR_NONFINITE);
    return check_vals;
}

int fz_layer_oom(const fz_layer_call *c, int have_ref, fz_sset errs_all,
                 fz_sset *expect)
{
    unsigned oomv = fz(L_OOM);
    if (oomv % 16 != 15)
        return 0;
    fz_as.fail_at = fz_as.allocs + (long)((oomv >> 4) % 4);
    if ((*expect & (FZ_BIT(SDPA_OK) | FZ_BIT(SDPA_ERR_NONFINITE))) ||
        (have_ref && !c->special) || (errs_all & ~c->errs_attn) == 0)
        *expect |= FZ_BIT(SDPA_ERR_OUT_OF_MEMORY);
    return 1;
}
