/* The long-double oracles of the tests beside reference.c's forward; see
 * oracle.h. */
#include "oracle.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "problem.h"
#include "testutil.h"

/* ------------------------------------------------------------------------ */
/* Backward.                                                                 */
/* ------------------------------------------------------------------------ */
static int bcast_n(const sdpa_tensor *t, int64_t n)
{
    return n > 1 && (t->shape[0] == 1 || t->stride[0] == 0);
}

size_t bwd_dq_at(const bwd_ref *r, int64_t b, int64_t h, int64_t i)
{
    return (size_t)(((b * r->Hq + h) * r->Tq + i) * r->Dk);
}

size_t bwd_dk_at(const bwd_ref *r, int64_t b, int64_t hk, int64_t j)
{
    return (size_t)((((r->nk == 1 ? 0 : b) * r->Hkv + hk) * r->Tk + j) * r->Dk);
}

size_t bwd_dv_at(const bwd_ref *r, int64_t b, int64_t hk, int64_t j)
{
    return (size_t)((((r->nv == 1 ? 0 : b) * r->Hkv + hk) * r->Tk + j) * r->Dv);
}

size_t bwd_db_at(const bwd_ref *r, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const int64_t *e = r->dbias_shape;
    b = e[0] == 1 ? 0 : b;
    h = e[1] == 1 ? 0 : h;
    i = e[2] == 1 ? 0 : i;
    j = e[3] == 1 ? 0 : j;
    return (size_t)(((b * e[1] + h) * e[2] + i) * e[3] + j);
}

void bwd_ref_free(bwd_ref *r)
{
    FREE_ALL(r->dq, r->dk, r->dv, r->dbias, r->dsinks, r->tq, r->tk, r->tv,
             r->tb, r->ts, r->sq, r->sk, r->sv, r->sb);
    ref_free(&r->fwd);
    memset(r, 0, sizeof *r);
}

/* The forward problem of a backward call, with K and V shared through
 * extent 1 seen as the equivalent stride-0 views (reference.c indexes them
 * by batch item). */
static sdpa_forward_args forward_of(const sdpa_backward_args *a)
{
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    TP_COPY_SHARED(f, *a);
    const int64_t n = a->q.shape[0];
    if (f.k.shape[0] == 1 && n > 1) {
        f.k.shape[0] = n;
        f.k.stride[0] = 0;
    }
    if (f.v.shape[0] == 1 && n > 1) {
        f.v.shape[0] = n;
        f.v.stride[0] = 0;
    }
    return f;
}

static long double *ld_zeros(size_t n)
{
    return calloc(n ? n : 1, sizeof(long double));
}

/* Row i's share of the gradients (the header's formulas), with the bound
 * of each term (tests/test_backward.c's derivation, for the given out and
 * lse: D_i is <dout_i, out_i> of the out the call receives). */
typedef struct bwd_row {
    int64_t b, h, i, hk;
    long double lse;
} bwd_row;

int ref_backward(const sdpa_backward_args *a, double eps_d, const bwd_extra *x,
                 bwd_ref *r)
{
    memset(r, 0, sizeof *r);
    const int dt = a->dtype;
    const long double eps = eps_d;
    const int64_t N = a->q.shape[0], Hq = a->q.shape[1], Tq = a->q.shape[2],
                  Dk = a->q.shape[3], Hkv = a->k.shape[1], Tk = a->k.shape[2],
                  Dv = a->v.shape[3], g = Hq / Hkv;
    r->N = N, r->Hq = Hq, r->Hkv = Hkv, r->Tq = Tq, r->Tk = Tk, r->Dk = Dk;
    r->Dv = Dv;
    r->nk = bcast_n(&a->k, N) ? 1 : N;
    r->nv = bcast_n(&a->v, N) ? 1 : N;
    const int64_t full[4] = {N, Hq, Tq, Tk};
    for (int d = 0; d < 4; d++)
        r->dbias_shape[d] =
            a->bias.data && a->bias.shape[d] > 1 && a->bias.stride[d] != 0
                ? full[d]
                : 1;
    sdpa_forward_args f = forward_of(a);
    if (ref_forward(&f, &r->fwd) != 0)
        return -1;
    const size_t nq = (size_t)(N * Hq * Tq * Dk);
    const size_t nk = (size_t)(r->nk * Hkv * Tk * Dk);
    const size_t nv = (size_t)(r->nv * Hkv * Tk * Dv);
    const int64_t *e = r->dbias_shape;
    const size_t nb = (size_t)(e[0] * e[1] * e[2] * e[3]);
    r->dq = ld_zeros(nq), r->tq = ld_zeros(nq), r->sq = calloc(nq + 1, 1);
    r->dk = ld_zeros(nk), r->tk = ld_zeros(nk), r->sk = calloc(nk + 1, 1);
    r->dv = ld_zeros(nv), r->tv = ld_zeros(nv), r->sv = calloc(nv + 1, 1);
    r->dbias = ld_zeros(nb), r->tb = ld_zeros(nb), r->sb = calloc(nb + 1, 1);
    r->dsinks = ld_zeros((size_t)Hq), r->ts = ld_zeros((size_t)Hq);
    long double *P = ld_zeros((size_t)Tk);
    if (!r->dq || !r->tq || !r->sq || !r->dk || !r->tk || !r->sk || !r->dv ||
        !r->tv || !r->sv || !r->dbias || !r->tb || !r->sb || !r->dsinks ||
        !r->ts || !P) {
        free(P);
        bwd_ref_free(r);
        return -1;
    }
    const long double scale =
        a->scale == 0 ? 1.0L / sqrtl((long double)Dk) : (long double)a->scale;
    const long double cap = (long double)a->softcap;
    const long double drop_c =
        a->dropout_p > 0 ? ref_dropout_scale(dt, a->dropout_p) : 1.0L;
    const ref_result *rf = &r->fwd;
    const long double L = rf->logit_absmax, A = rf->alibi_absmax,
                      S = rf->sink_absmax;
    const long double tiny = dt == SDPA_FLOAT32 ? FLT_MIN : DBL_MIN;
    const long double Tk1 = (long double)Tk + (a->sinks ? 1 : 0);
    const long double e_s = ((long double)Dk + 4) * eps * L +
                            4 * eps * (1 + L + A + S + cap) + 2 * eps * A +
                            x->e_s;
    /* rows that may touch one key (GQA, K/V shared by the batch) and
     * terms summed into one dbias element */
    const long double R_kv = (long double)(Tq * g * (r->nk == 1 ? N : 1));
    const long double R_b = (long double)(full[0] / e[0] * full[1] / e[1] *
                                          full[2] / e[2] * full[3] / e[3]);
    long double vmax = 0;
    for (int64_t b = 0; b < N; b++)
        for (int64_t hk = 0; hk < Hkv; hk++)
            for (int64_t j = 0; j < Tk; j++)
                for (int64_t d = 0; d < Dv; d++) {
                    int seen = 0;
                    for (int64_t hh = hk * g; hh < (hk + 1) * g && !seen; hh++)
                        for (int64_t i = 0; i < Tq && !seen; i++)
                            seen = rf->allowed[(
                                size_t)(((b * Hq + hh) * Tq + i) * Tk + j)];
                    if (seen)
                        vmax =
                            fmaxl(vmax, fabsl(ref_get(&f.v, dt, b, hk, j, d)));
                }
    vmax += x->e_v;

    for (int64_t b = 0; b < N; b++)
        for (int64_t h = 0; h < Hq; h++)
            for (int64_t i = 0; i < Tq; i++) {
                const int64_t hk = h / g;
                const size_t row = (size_t)((b * Hq + h) * Tq + i);
                const unsigned char *ok = rf->allowed + row * (size_t)Tk;
                const long double lse = ref_get(&a->lse, dt, b, h, i, 0);
                long double D = 0, G = 0, DA = 0, OA = 0;
                for (int64_t d = 0; d < Dv; d++) {
                    long double go = ref_get(&a->dout, dt, b, h, i, d);
                    long double o = ref_get(&a->out, dt, b, h, i, d);
                    D += go * o;
                    DA += fabsl(go * o);
                    G += fabsl(go);
                    OA += fabsl(o);
                }
                if (a->sinks && lse > -INFINITY) {
                    /* computed in double from the given values */
                    long double ps = expl((long double)a->sinks[h] - lse);
                    r->dsinks[h] -= ps * D;
                    r->ts[h] += ps * (((long double)Dv + 8) * DBL_EPSILON * DA +
                                      ((long double)(N * Tq) + 8) *
                                          DBL_EPSILON * fabsl(D) +
                                      x->e_dout * OA + G * x->e_o);
                }
                int any = 0;
                for (int64_t j = 0; j < Tk; j++)
                    any |= ok[j];
                if (!any || lse == -INFINITY)
                    continue; /* contributes nothing, dq = 0 */
                /* dropout scales dP's terms by c <= 1/(1 - p) */
                const long double B = drop_c * G * vmax + DA;
                const long double e_l =
                    e_s + (Tk1 + 16) * eps + eps * fabsl(lse);
                const long double e_p = e_s + e_l + 16 * eps;
                const long double e_D = ((long double)Dv + 4) * eps * DA +
                                        x->e_dout * OA + G * x->e_o;
                const long double e_dP =
                    ((long double)Dv + 4) * eps * G * vmax +
                    x->e_dout * (long double)Dv * vmax + G * x->e_v;
                const long double E =
                    e_p * B + drop_c * e_dP + e_D + 5 * eps * B;
                const long double E2 =
                    E + (cap > 0 ? (21 * eps + e_s / cap) * B : 0);
                for (int64_t j = 0; j < Tk; j++)
                    P[j] = ok[j]
                               ? expl(rf->logits[row * (size_t)Tk + (size_t)j] -
                                      lse)
                               : 0;
                const size_t qa = bwd_dq_at(r, b, h, i);
                for (int64_t d = 0; d < Dk; d++)
                    r->sq[qa + (size_t)d] = 1;
                for (int64_t j = 0; j < Tk; j++) {
                    if (!ok[j])
                        continue;
                    /* dropout: Z̃ = Z·c on the weights that multiply V */
                    const long double zt =
                        ref_dropout_keep(&f, b, h, i, j) ? drop_c : 0.0L;
                    long double dp = 0, u = 0;
                    for (int64_t d = 0; d < Dv; d++)
                        dp += ref_get(&a->dout, dt, b, h, i, d) *
                              ref_get(&f.v, dt, b, hk, j, d);
                    for (int64_t d = 0; d < Dk; d++)
                        u += ref_get(&a->q, dt, b, h, i, d) *
                             ref_get(&f.k, dt, b, hk, j, d);
                    u *= scale;
                    const long double dz = P[j] * (zt * dp - D);
                    long double fac = 1;
                    if (cap > 0) {
                        long double t = tanhl(u / cap);
                        fac = 1 - t * t;
                    }
                    const long double ds = dz * fac;
                    const long double err_ds = P[j] * E2 + tiny * B;
                    const size_t ka = bwd_dk_at(r, b, hk, j);
                    const size_t va = bwd_dv_at(r, b, hk, j);
                    for (int64_t d = 0; d < Dk; d++) {
                        long double kd = ref_get(&f.k, dt, b, hk, j, d);
                        long double qd = ref_get(&a->q, dt, b, h, i, d);
                        r->dq[qa + (size_t)d] += scale * ds * kd;
                        r->tq[qa + (size_t)d] +=
                            scale * (err_ds * fabsl(kd) + fabsl(ds) * x->e_k) +
                            ((long double)Tk + 4) * eps * scale *
                                fabsl(ds * kd);
                        r->dk[ka + (size_t)d] += scale * ds * qd;
                        r->tk[ka + (size_t)d] +=
                            scale * (err_ds * fabsl(qd) + fabsl(ds) * x->e_q) +
                            (R_kv + 4) * eps * scale * fabsl(ds * qd);
                        r->sk[ka + (size_t)d] = 1;
                    }
                    for (int64_t d = 0; d < Dv; d++) {
                        long double gd = ref_get(&a->dout, dt, b, h, i, d);
                        r->dv[va + (size_t)d] += zt * P[j] * gd;
                        r->tv[va + (size_t)d] +=
                            drop_c *
                            ((P[j] * (e_p + 2 * eps) + tiny) * fabsl(gd) +
                             P[j] * x->e_dout +
                             (R_kv + 4) * eps * P[j] * fabsl(gd));
                        r->sv[va + (size_t)d] = 1;
                    }
                    if (a->bias.data) {
                        size_t ba = bwd_db_at(r, b, h, i, j);
                        r->dbias[ba] += dz;
                        r->tb[ba] +=
                            P[j] * E + tiny * B + (R_b + 4) * eps * fabsl(dz);
                        r->sb[ba] = 1;
                    }
                }
            }
    free(P);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Positional encodings.                                                     */
/* ------------------------------------------------------------------------ */
long double ref_angle_bound(double base, int64_t p, int64_t r, int64_t d)
{
    const long double u = 0x1p-53L;
    long double b = base == 0 ? 10000.0L : (long double)base;
    long double f = tp_freq(base, r, d);
    long double ang = fabsl((long double)p) * f;
    long double ln = fabsl(logl(b)) * (long double)(2 * r) / (long double)d;
    /* (double)p, pow, the product: 3 roundings of the angle; the
     * exponent's rounding moves f by f·|ln base|·(2r/d)·u; subnormal
     * frequencies are off by up to DBL_TRUE_MIN */
    return ang * (3 + ln) * u +
           fabsl((long double)p) * (long double)DBL_TRUE_MIN * 2 + 8 * u;
}

long double ref_sinusoid(double base, int64_t pos, int64_t col, int64_t dim)
{
    long double angle = (long double)pos * tp_freq(base, col / 2, dim);
    return col % 2 == 0 ? sinl(angle) : cosl(angle);
}

int64_t ref_rope_partner(int64_t c, int64_t rd, int style, int64_t *pair)
{
    if (c >= rd)
        return -1;
    if (style == SDPA_ROPE_HALF) {
        int64_t half = rd / 2;
        *pair = c < half ? c : c - half;
        return c < half ? c + half : c - half;
    }
    *pair = c / 2;
    return c ^ 1;
}

void ref_rope_row(long double *row, int64_t d, int64_t rd, int style,
                  double base, int64_t pos)
{
    (void)d;
    for (int64_t r = 0; r < rd / 2; r++) {
        long double angle = (long double)pos * tp_freq(base, r, rd);
        long double c = cosl(angle), s = sinl(angle);
        int64_t i0 = style == SDPA_ROPE_HALF ? r : 2 * r;
        int64_t i1 = style == SDPA_ROPE_HALF ? r + rd / 2 : 2 * r + 1;
        long double x0 = row[i0], x1 = row[i1];
        row[i0] = x0 * c - x1 * s;
        row[i1] = x0 * s + x1 * c;
    }
}
