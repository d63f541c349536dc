/*
 * The multi-head layer in long double, from include/sdpa.h (sdpa_mha_args,
 * sdpa_mha_backward_args): X~ = X (+ the sinusoidal table), Q = X~ W_Q +
 * b_Q (likewise K, V), RoPE on each head of Q and K, attention per head
 * (tests/common/reference.c on Q, K, V rounded to double), y = O W_O + b_O; and
 * the chain rule back through every step (the attention's gradients from
 * tests/common/oracle.c). Every quantity carries a bound of the error the
 * library may make computing it in its dtype: a product of k terms adds (k + 2)
 * eps of the sum of |terms|, errors of the factors propagate through their
 * magnitudes, a rotation adds the angle's error (ref_angle_bound) and a
 * rounding; the attention's own bounds are oracle.c's, widened by the
 * errors of the Q, K, V, O and dO the library computes on the way.
 */
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_layer.h"

static long double *ld_alloc(size_t n)
{
    long double *p = calloc(n ? n : 1, sizeof(long double));
    if (!p)
        abort();
    return p;
}

/* C = A B (accumulate: C += A B): A(i, l) = A[i as0 + l as1], B(l, j) =
 * B[l bs0 + j bs1]; eA, eB their error bounds (NULL: exact), eC that of
 * C. */
static void mm(long double *C, long double *eC, int64_t m, int64_t n, int64_t k,
               const long double *A, const long double *eA, int64_t as0,
               int64_t as1, const long double *B, const long double *eB,
               int64_t bs0, int64_t bs1, long double eps, int accumulate)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            long double s = 0, mag = 0, err = 0;
            for (int64_t l = 0; l < k; l++) {
                long double a = A[i * as0 + l * as1], b = B[l * bs0 + j * bs1];
                long double ea = eA ? eA[i * as0 + l * as1] : 0;
                long double eb = eB ? eB[l * bs0 + j * bs1] : 0;
                s += a * b;
                mag += fabsl(a * b);
                err += ea * fabsl(b) + fabsl(a) * eb + ea * eb;
            }
            err += ((long double)k + 2) * eps * mag;
            if (accumulate) {
                C[i * n + j] += s;
                eC[i * n + j] += err + eps * fabsl(C[i * n + j]);
            } else {
                C[i * n + j] = s;
                eC[i * n + j] = err;
            }
        }
}

/* A dtype buffer as long double. */
static long double *from_dtype(const void *p, size_t n, size_t es)
{
    long double *x = ld_alloc(n);
    for (size_t i = 0; p && i < n; i++)
        x[i] = fz_get_raw(p, es, (int64_t)i);
    return x;
}

/* Adds a bias (NULL: none) to the rows of C, with its rounding. */
static void add_bias(long double *C, long double *eC, int64_t rows,
                     int64_t cols, const void *b, size_t es, long double eps)
{
    for (int64_t r = 0; b && r < rows; r++)
        for (int64_t j = 0; j < cols; j++) {
            long double v = fz_get_raw(b, es, j);
            C[r * cols + j] += v;
            eC[r * cols + j] += eps * (fabsl(v) + fabsl(C[r * cols + j]));
        }
}

/* X~ for x_q (kv 0) or x_kv (kv 1): rows (b, t), E columns. */
static void x_tilde(const fz_layer_call *c, int kv, long double **x,
                    long double **ex, long double eps)
{
    const sdpa_tensor *t = kv && !c->self ? &c->a.x_kv : &c->a.x_q;
    const size_t es = fz_esize(c->dt.compute);
    const int64_t len = kv ? c->Tk : c->Tq;
    *x = ld_alloc((size_t)(c->N * len * c->E));
    *ex = ld_alloc((size_t)(c->N * len * c->E));
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t r = 0; r < len; r++) {
            int64_t p = fz_layer_pos(c, kv, b, r);
            for (int64_t m = 0; m < c->E; m++) {
                size_t at = (size_t)((b * len + r) * c->E + m);
                long double v = fz_get_raw(t->data, es, fz_off4(t, b, 0, r, m));
                (*x)[at] = v;
                if (c->positions == SDPA_POS_SINUSOIDAL) {
                    long double pe = ref_sinusoid(c->base, p, m, c->E);
                    (*x)[at] = v + pe;
                    (*ex)[at] = ref_angle_bound(c->base, p, m / 2, c->E) +
                                eps * (fabsl(v) + 2);
                }
            }
        }
}

/* RoPE (sign 1) or its inverse (sign -1) on every head of rows (b, t) of
 * width heads * d, with the errors. */
static void rope_rows(const fz_layer_call *c, int kv, long double *x,
                      long double *ex, int64_t heads, int64_t d, int sign,
                      long double eps)
{
    if (c->positions != SDPA_POS_ROPE_HALF &&
        c->positions != SDPA_POS_ROPE_INTERLEAVED)
        return;
    const int style = c->positions == SDPA_POS_ROPE_HALF
                          ? SDPA_ROPE_HALF
                          : SDPA_ROPE_INTERLEAVED;
    const int64_t len = kv ? c->Tk : c->Tq;
    long double row[64], err[64];
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t r = 0; r < len; r++) {
            int64_t p = fz_layer_pos(c, kv, b, r);
            for (int64_t h = 0; h < heads; h++) {
                long double *v = x + (b * len + r) * heads * d + h * d;
                long double *e = ex + (b * len + r) * heads * d + h * d;
                memcpy(row, v, sizeof(long double) * (size_t)d);
                ref_rope_row(row, d, d, style, c->base, sign * p);
                for (int64_t j = 0; j < d; j++) {
                    int64_t pr, q = ref_rope_partner(j, d, style, &pr);
                    long double norm = hypotl(v[j], v[q]);
                    err[j] = e[j] + e[q] +
                             norm * (ref_angle_bound(c->base, p, pr, d) + eps);
                }
                memcpy(v, row, sizeof(long double) * (size_t)d);
                memcpy(e, err, sizeof(long double) * (size_t)d);
            }
        }
}

static long double max_of(const long double *x, size_t n)
{
    long double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsl(x[i]) > m ? fabsl(x[i]) : m;
    return m;
}

/* Rows (b, t) of heads * d as a bhtd double array [N, heads, T, d]. */
static double *to_bhtd(const long double *x, int64_t n, int64_t len,
                       int64_t heads, int64_t d)
{
    double *o = malloc(sizeof(double) * (size_t)(n * heads * len * d + 1));
    if (!o)
        abort();
    for (int64_t b = 0; b < n; b++)
        for (int64_t r = 0; r < len; r++)
            for (int64_t h = 0; h < heads; h++)
                for (int64_t j = 0; j < d; j++)
                    o[((b * heads + h) * len + r) * d + j] =
                        (double)x[((b * len + r) * heads + h) * d + j];
    return o;
}

/* The attention's options on double copies (the bias converted). */
static sdpa_forward_args attention_args(const fz_layer_call *c, fz_layer_ref *r)
{
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    if (c->has_attn) {
        const sdpa_forward_args *a = &c->attn;
        f.causal = a->causal;
        f.flags = a->flags;
        f.scale = a->scale;
        f.softcap = a->softcap;
        f.kv_lens = a->kv_lens;
        f.mask = a->mask;
        f.window_left = a->window_left;
        f.window_right = a->window_right;
        f.alibi_slopes = a->alibi_slopes;
        f.sinks = a->sinks;
        if (a->bias.data) {
            const sdpa_tensor *b = &a->bias;
            size_t n =
                (size_t)(b->shape[0] * b->shape[1] * b->shape[2] * b->shape[3]);
            free(r->biasd);
            r->biasd = malloc(sizeof(double) * (n + 1));
            if (!r->biasd)
                abort();
            f.bias = sdpa_tensor_bhtd(r->biasd, b->shape[0], b->shape[1],
                                      b->shape[2], b->shape[3]);
            for (int64_t i0 = 0; i0 < b->shape[0]; i0++)
                for (int64_t i1 = 0; i1 < b->shape[1]; i1++)
                    for (int64_t i2 = 0; i2 < b->shape[2]; i2++)
                        for (int64_t i3 = 0; i3 < b->shape[3]; i3++)
                            r->biasd[fz_off4(&f.bias, i0, i1, i2, i3)] =
                                fz_get_raw(b->data, fz_esize(c->dt.compute),
                                           fz_off4(b, i0, i1, i2, i3));
        }
    }
    f.dtype = SDPA_FLOAT64;
    f.q = sdpa_tensor_bhtd(r->qd, c->N, c->Hq, c->Tq, c->dk);
    f.k = sdpa_tensor_bhtd(r->kd, c->N, c->Hkv, c->Tk, c->dk);
    f.v = sdpa_tensor_bhtd(r->vd, c->N, c->Hkv, c->Tk, c->dv);
    return f;
}

/* W_Q, W_K, W_V, W_O in long double. */
static void weights_ld(const fz_layer_call *c, long double *W[4])
{
    const size_t es = fz_esize(c->dt.compute);
    const int64_t E = c->E, wq = c->Hq * c->dk, wk = c->Hkv * c->dk;
    const int64_t wv = c->Hkv * c->dv, wo = c->Hq * c->dv;
    const size_t wn[4] = {(size_t)(E * wq), (size_t)(E * wk), (size_t)(E * wv),
                          (size_t)(wo * E)};
    const void *wp[4] = {c->a.w_q, c->a.w_k, c->a.w_v, c->a.w_o};
    for (int i = 0; i < 4; i++)
        W[i] = from_dtype(wp[i], wn[i], es);
}

int fz_layer_ref_forward(const fz_layer_call *c, fz_layer_ref *r)
{
    memset(r, 0, sizeof *r);
    const size_t es = fz_esize(c->dt.compute);
    const long double eps =
        c->dt.compute == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    r->eps = (double)eps;
    const int64_t rq = c->N * c->Tq, rk = c->N * c->Tk, E = c->E;
    const int64_t wq = c->Hq * c->dk, wk = c->Hkv * c->dk;
    const int64_t wv = c->Hkv * c->dv, wo = c->Hq * c->dv;
    x_tilde(c, 0, &r->xq, &r->exq, eps);
    x_tilde(c, 1, &r->xkv, &r->exkv, eps);
    long double *W[4];
    weights_ld(c, W);
    r->q = ld_alloc((size_t)(rq * wq)), r->eq = ld_alloc((size_t)(rq * wq));
    r->k = ld_alloc((size_t)(rk * wk)), r->ek = ld_alloc((size_t)(rk * wk));
    r->v = ld_alloc((size_t)(rk * wv)), r->ev = ld_alloc((size_t)(rk * wv));
    mm(r->q, r->eq, rq, wq, E, r->xq, r->exq, E, 1, W[0], NULL, wq, 1, eps, 0);
    mm(r->k, r->ek, rk, wk, E, r->xkv, r->exkv, E, 1, W[1], NULL, wk, 1, eps,
       0);
    mm(r->v, r->ev, rk, wv, E, r->xkv, r->exkv, E, 1, W[2], NULL, wv, 1, eps,
       0);
    add_bias(r->q, r->eq, rq, wq, c->a.b_q, es, eps);
    add_bias(r->k, r->ek, rk, wk, c->a.b_k, es, eps);
    add_bias(r->v, r->ev, rk, wv, c->a.b_v, es, eps);
    rope_rows(c, 0, r->q, r->eq, c->Hq, c->dk, 1, eps);
    rope_rows(c, 1, r->k, r->ek, c->Hkv, c->dk, 1, eps);
    r->qd = to_bhtd(r->q, c->N, c->Tq, c->Hq, c->dk);
    r->kd = to_bhtd(r->k, c->N, c->Tk, c->Hkv, c->dk);
    r->vd = to_bhtd(r->v, c->N, c->Tk, c->Hkv, c->dv);
    sdpa_forward_args f = attention_args(c, r);
    if (ref_forward(&f, &r->att) != 0)
        return -1;
    /* the logits' error from Q's and K's: scale Σ_d (eq |k| + |q| ek) */
    const long double EQ = max_of(r->eq, (size_t)(rq * wq)),
                      EK = max_of(r->ek, (size_t)(rk * wk)),
                      EV = max_of(r->ev, (size_t)(rk * wv));
    const long double QM = max_of(r->q, (size_t)(rq * wq)),
                      KM = max_of(r->k, (size_t)(rk * wk));
    const long double scale =
        f.scale != 0 ? f.scale : 1 / sqrtl((long double)c->dk);
    r->e_s =
        (double)(scale * (long double)c->dk * (EQ * KM + QM * EK + EQ * EK));
    r->att_tol = tp_forward_tol((double)eps, &r->att, c->Tk, c->dk, f.softcap,
                                f.sinks != NULL, r->e_s, (double)EV);
    /* O = the heads' outputs side by side, y = O W_O + b_O */
    r->o = ld_alloc((size_t)(rq * wo)), r->eo = ld_alloc((size_t)(rq * wo));
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t t = 0; t < c->Tq; t++)
            for (int64_t h = 0; h < c->Hq; h++)
                for (int64_t j = 0; j < c->dv; j++) {
                    size_t at = (size_t)((b * c->Tq + t) * wo + h * c->dv + j);
                    r->o[at] = r->att.out[(
                        size_t)(((b * c->Hq + h) * c->Tq + t) * c->dv + j)];
                    r->eo[at] = r->att_tol.out;
                }
    r->y = ld_alloc((size_t)(rq * E)), r->ty = ld_alloc((size_t)(rq * E));
    mm(r->y, r->ty, rq, E, wo, r->o, r->eo, wo, 1, W[3], NULL, E, 1, eps, 0);
    add_bias(r->y, r->ty, rq, E, c->a.b_o, es, eps);
    for (int i = 0; i < 4; i++)
        free(W[i]);
    return 0;
}

size_t fz_layer_grad_count(const fz_layer_call *c, int i)
{
    const int64_t wq = c->Hq * c->dk, wk = c->Hkv * c->dk;
    const int64_t wv = c->Hkv * c->dv, wo = c->Hq * c->dv;
    const int64_t n[G_COUNT] = {c->N * c->Tq * c->E,
                                c->N * c->Tk * c->E,
                                c->E * wq,
                                c->E * wk,
                                c->E * wv,
                                wo * c->E,
                                wq,
                                wk,
                                wv,
                                c->E};
    return (size_t)n[i];
}

/* Column sums of rows x cols, with errors. */
static void col_sums(long double *s, long double *es_, const long double *x,
                     const long double *ex, int64_t rows, int64_t cols,
                     long double eps)
{
    for (int64_t j = 0; j < cols; j++) {
        long double v = 0, mag = 0, err = 0;
        for (int64_t r = 0; r < rows; r++) {
            v += x[r * cols + j];
            mag += fabsl(x[r * cols + j]);
            err += ex ? ex[r * cols + j] : 0;
        }
        s[j] = v;
        es_[j] = err + ((long double)rows + 2) * eps * mag;
    }
}

int fz_layer_ref_backward(const fz_layer_call *c, const sdpa_tensor *dy,
                          fz_layer_ref *r)
{
    if (fz_layer_ref_forward(c, r) != 0)
        return -1;
    const size_t es = fz_esize(c->dt.compute);
    const long double eps = r->eps;
    const int64_t rq = c->N * c->Tq, rk = c->N * c->Tk, E = c->E;
    const int64_t wq = c->Hq * c->dk, wk = c->Hkv * c->dk;
    const int64_t wv = c->Hkv * c->dv, wo = c->Hq * c->dv;
    long double *G = ld_alloc((size_t)(rq * E));
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t t = 0; t < c->Tq; t++)
            for (int64_t m = 0; m < E; m++)
                G[(b * c->Tq + t) * E + m] =
                    fz_get_raw(dy->data, es, fz_off4(dy, b, 0, t, m));
    long double *W[4];
    weights_ld(c, W);
    for (int i = 0; i < G_COUNT; i++) {
        r->g[i] = ld_alloc(fz_layer_grad_count(c, i));
        r->tg[i] = ld_alloc(fz_layer_grad_count(c, i));
    }
    /* dW_O = Oᵀ G, db_O = Σ_rows G, dO = G W_Oᵀ */
    mm(r->g[G_DWO], r->tg[G_DWO], wo, E, rq, r->o, r->eo, 1, wo, G, NULL, E, 1,
       eps, 0);
    col_sums(r->g[G_DBO], r->tg[G_DBO], G, NULL, rq, E, eps);
    long double *dO = ld_alloc((size_t)(rq * wo)),
                *edO = ld_alloc((size_t)(rq * wo));
    mm(dO, edO, rq, wo, E, G, NULL, E, 1, W[3], NULL, 1, E, eps, 0);

    /* the attention's gradients, on double copies of O, lse and dO */
    double *od = to_bhtd(r->o, c->N, c->Tq, c->Hq, c->dv);
    double *dod = to_bhtd(dO, c->N, c->Tq, c->Hq, c->dv);
    double *lsed = malloc(sizeof(double) * (size_t)(rq * c->Hq + 1));
    if (!lsed)
        abort();
    for (size_t i = 0; i < (size_t)(rq * c->Hq); i++)
        lsed[i] = (double)r->att.lse[i];
    sdpa_forward_args f = attention_args(c, r);
    sdpa_backward_args ba = tp_backward_of(&f);
    ba.dtype = SDPA_FLOAT64;
    ba.out = sdpa_tensor_bhtd(od, c->N, c->Hq, c->Tq, c->dv);
    ba.lse = sdpa_tensor_bhtd(lsed, c->N, c->Hq, c->Tq, 1);
    ba.dout = sdpa_tensor_bhtd(dod, c->N, c->Hq, c->Tq, c->dv);
    bwd_extra x = {r->e_s,
                   max_of(r->eq, (size_t)(rq * wq)),
                   max_of(r->ek, (size_t)(rk * wk)),
                   max_of(r->ev, (size_t)(rk * wv)),
                   (long double)r->att_tol.out,
                   max_of(edO, (size_t)(rq * wo))};
    bwd_ref br;
    if (ref_backward(&ba, (double)eps, &x, &br) != 0)
        return -1;
    /* back to rows (b, t) of heads * d, the bounds as absolute errors */
    long double *dQ = ld_alloc((size_t)(rq * wq)),
                *edQ = ld_alloc((size_t)(rq * wq));
    long double *dK = ld_alloc((size_t)(rk * wk)),
                *edK = ld_alloc((size_t)(rk * wk));
    long double *dV = ld_alloc((size_t)(rk * wv)),
                *edV = ld_alloc((size_t)(rk * wv));
    for (int64_t b = 0; b < c->N; b++) {
        for (int64_t t = 0; t < c->Tq; t++)
            for (int64_t h = 0; h < c->Hq; h++)
                for (int64_t j = 0; j < c->dk; j++) {
                    size_t s = bwd_dq_at(&br, b, h, t) + (size_t)j;
                    size_t at = (size_t)((b * c->Tq + t) * wq + h * c->dk + j);
                    dQ[at] = br.dq[s];
                    edQ[at] = 2 * (br.tq[s] + 2 * eps * fabsl(br.dq[s]));
                }
        for (int64_t t = 0; t < c->Tk; t++)
            for (int64_t h = 0; h < c->Hkv; h++) {
                for (int64_t j = 0; j < c->dk; j++) {
                    size_t s = bwd_dk_at(&br, b, h, t) + (size_t)j;
                    size_t at = (size_t)((b * c->Tk + t) * wk + h * c->dk + j);
                    dK[at] = br.dk[s];
                    edK[at] = 2 * (br.tk[s] + 2 * eps * fabsl(br.dk[s]));
                }
                for (int64_t j = 0; j < c->dv; j++) {
                    size_t s = bwd_dv_at(&br, b, h, t) + (size_t)j;
                    size_t at = (size_t)((b * c->Tk + t) * wv + h * c->dv + j);
                    dV[at] = br.dv[s];
                    edV[at] = 2 * (br.tv[s] + 2 * eps * fabsl(br.dv[s]));
                }
            }
    }
    bwd_ref_free(&br);
    /* the inverse rotation (the transpose: RoPE at -p) */
    rope_rows(c, 0, dQ, edQ, c->Hq, c->dk, -1, eps);
    rope_rows(c, 1, dK, edK, c->Hkv, c->dk, -1, eps);
    /* weights and biases: X~ᵀ dQ, column sums */
    mm(r->g[G_DWQ], r->tg[G_DWQ], E, wq, rq, r->xq, r->exq, 1, E, dQ, edQ, wq,
       1, eps, 0);
    mm(r->g[G_DWK], r->tg[G_DWK], E, wk, rk, r->xkv, r->exkv, 1, E, dK, edK, wk,
       1, eps, 0);
    mm(r->g[G_DWV], r->tg[G_DWV], E, wv, rk, r->xkv, r->exkv, 1, E, dV, edV, wv,
       1, eps, 0);
    col_sums(r->g[G_DBQ], r->tg[G_DBQ], dQ, edQ, rq, wq, eps);
    col_sums(r->g[G_DBK], r->tg[G_DBK], dK, edK, rk, wk, eps);
    col_sums(r->g[G_DBV], r->tg[G_DBV], dV, edV, rk, wv, eps);
    /* inputs: dQ W_Qᵀ (+ dK W_Kᵀ + dV W_Vᵀ in self-attention), and dK W_Kᵀ
     * + dV W_Vᵀ for x_kv; the table's Jacobian is the identity */
    mm(r->g[G_DXQ], r->tg[G_DXQ], rq, E, wq, dQ, edQ, wq, 1, W[0], NULL, 1, wq,
       eps, 0);
    long double *kvg = c->self ? r->g[G_DXQ] : r->g[G_DXKV];
    long double *kvt = c->self ? r->tg[G_DXQ] : r->tg[G_DXKV];
    mm(kvg, kvt, rk, E, wk, dK, edK, wk, 1, W[1], NULL, 1, wk, eps, c->self);
    mm(kvg, kvt, rk, E, wv, dV, edV, wv, 1, W[2], NULL, 1, wv, eps, 1);
    free(G);
    free(dO);
    free(edO);
    free(od);
    free(dod);
    free(lsed);
    free(dQ);
    free(edQ);
    free(dK);
    free(edK);
    free(dV);
    free(edV);
    for (int i = 0; i < 4; i++)
        free(W[i]);
    return 0;
}

void fz_layer_ref_free(fz_layer_ref *r)
{
    FREE_ALL(r->y, r->ty, r->xq, r->exq, r->xkv, r->exkv, r->q, r->eq, r->k,
             r->ek, r->v, r->ev, r->o, r->eo, r->qd, r->kd, r->vd, r->biasd);
    for (int i = 0; i < G_COUNT; i++) {
        free(r->g[i]);
        free(r->tg[i]);
    }
    ref_free(&r->att);
    memset(r, 0, sizeof *r);
}
