/* Long-double references of the fuzz targets; see fuzz_ref.h. */
#include "fuzz_ref.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"

/* ------------------------------------------------------------------------ */
/* Forward.                                                                  */
/* ------------------------------------------------------------------------ */
fz_tol fz_forward_tol(double eps, const ref_result *r, int64_t tk, int64_t dk,
                      double softcap, int sinks, double e_s_extra, double v_err)
{
    const double L = (double)r->logit_absmax;
    const double A = (double)r->alibi_absmax, S = (double)r->sink_absmax;
    const double Tk = (double)tk, Dk = (double)dk, Tk1 = Tk + (sinks ? 1 : 0);
    fz_tol t;
    t.e_s = (Dk + 4) * eps * L + 4 * eps * (1 + L + A + S + softcap) +
            2 * eps * A + e_s_extra;
    t.e_p = 2 * t.e_s + (Tk1 + 16) * eps;
    t.w = 2 * t.e_p;
    t.logit = 2 * t.e_s;
    t.out =
        2 * (((double)r->v_absmax + 1e-300) * (t.e_p + (Tk + 4) * eps) + v_err);
    t.lse_abs = 2 * (t.e_s + (Tk1 + 16) * eps);
    t.lse_rel = 2 * eps;
    /* H = log l - Σ_j p_j (s_j - m): each p_j off by e_p p_j moves H by
     * e_p p_j (|log p_j| + 1), at most e_p (H + 1); the sums' roundings
     * are (Tk' + 8) eps of |log l| + Σ p |s - m| <= log Tk' + 2 (L + A + S)
     * + 1; each logit's own error e_s. The caller adds e_p H. */
    t.entropy =
        2 * (t.e_p + (Tk1 + 8) * eps * (log(Tk1 + 1) + 2 * (L + A + S) + 1) +
             t.e_s);
    return t;
}

void fz_ref_diagnostics(const ref_result *r, const double *sinks, int64_t h,
                        size_t row, long double *top, long double *entropy)
{
    long double m = 0, e = 0;
    for (int64_t j = 0; j < r->tk; j++) {
        long double w = r->weights[row * (size_t)r->tk + (size_t)j];
        m = w > m ? w : m;
        if (w > 0)
            e -= w * logl(w);
    }
    if (sinks && r->lse[row] != -INFINITY) {
        long double ws = expl((long double)sinks[h] - r->lse[row]);
        m = ws > m ? ws : m;
        if (ws > 0)
            e -= ws * logl(ws);
    }
    *top = m;
    *entropy = e;
}

void fz_check_attention(const ref_result *r, const fz_tol *t,
                        const fz_att_views *v, int check_vals, int check_out)
{
    const sdpa_tensor *O = v->out, *W = v->weights, *S = v->lse;
    const sdpa_tensor *LG = v->logits, *MW = v->max_weight, *EN = v->entropy;
    const size_t es = v->es;
    const double *sinks = v->sinks;
    const int64_t Tk = r->tk, Dv = r->dv;
    for (int64_t b = 0; b < r->n; b++)
        for (int64_t h = 0; h < r->hq; h++)
            for (int64_t i = 0; i < r->tq; i++) {
                size_t row = (size_t)((b * r->hq + h) * r->tq + i);
                const unsigned char *ok = r->allowed + row * (size_t)Tk;
                int empty = 1;
                for (int64_t j = 0; j < Tk; j++)
                    empty &= !ok[j];
                for (int64_t d = 0; O && d < Dv; d++) {
                    double got =
                        fz_get_raw(O->data, es, fz_off4(O, b, h, i, d));
                    double ref = (double)r->out[row * (size_t)Dv + (size_t)d];
                    if (empty)
                        CHECK(got == 0.0,
                              "empty row out[%lld,%lld,%lld,%lld] = %g, not 0",
                              (long long)b, (long long)h, (long long)i,
                              (long long)d, got);
                    else if (check_vals && check_out)
                        CHECK(fabs(got - ref) <= t->out,
                              "out[%lld,%lld,%lld,%lld] = %.10g, reference "
                              "%.10g, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i,
                              (long long)d, got, ref, t->out);
                }
                double wsum = 0, wmax = 0, went = 0;
                for (int64_t j = 0; W && j < Tk; j++) {
                    double got =
                        fz_get_raw(W->data, es, fz_off4(W, b, h, i, j));
                    double ref =
                        (double)r->weights[row * (size_t)Tk + (size_t)j];
                    wsum += got;
                    wmax = got > wmax ? got : wmax;
                    if (got > 0)
                        went -= got * log(got);
                    if (!ok[j])
                        CHECK(got == 0.0,
                              "forbidden weight[%lld,%lld,%lld,%lld] = %g",
                              (long long)b, (long long)h, (long long)i,
                              (long long)j, got);
                    else if (check_vals)
                        CHECK(fabs(got - ref) <= t->w,
                              "weights[%lld,%lld,%lld,%lld] = %.10g, "
                              "reference %.10g, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i,
                              (long long)j, got, ref, t->w);
                }
                for (int64_t j = 0; LG && j < Tk; j++) {
                    double got =
                        fz_get_raw(LG->data, es, fz_off4(LG, b, h, i, j));
                    double ref =
                        (double)r->logits[row * (size_t)Tk + (size_t)j];
                    if (!ok[j])
                        CHECK(got == -INFINITY,
                              "forbidden logit[%lld,%lld,%lld,%lld] = %g, "
                              "not -inf",
                              (long long)b, (long long)h, (long long)i,
                              (long long)j, got);
                    else if (check_vals)
                        CHECK(fabs(got - ref) <= t->logit,
                              "logits[%lld,%lld,%lld,%lld] = %.10g (stage "
                              "%d), reference %.10g, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i,
                              (long long)j, got, v->stage, ref, t->logit);
                }
                double lse = 0;
                if (S) {
                    lse = fz_get_raw(S->data, es, fz_off4(S, b, h, i, 0));
                    double ref = (double)r->lse[row];
                    if (empty && !sinks)
                        CHECK(lse == -INFINITY, "empty row lse = %g", lse);
                    else if (check_vals)
                        CHECK(fabs(lse - ref) <=
                                  t->lse_abs + t->lse_rel * fabs(ref),
                              "lse[%lld,%lld,%lld] = %.10g, reference %.10g",
                              (long long)b, (long long)h, (long long)i, lse,
                              ref);
                }
                long double top, ent;
                fz_ref_diagnostics(r, sinks, h, row, &top, &ent);
                double tol_h = t->entropy + 2 * t->e_p * (double)ent;
                double mw = 0, en = 0;
                if (MW) {
                    mw = fz_get_raw(MW->data, es, fz_off4(MW, b, h, i, 0));
                    if (empty && !sinks)
                        CHECK(mw == 0.0, "empty row max_weight = %g", mw);
                    else if (check_vals)
                        CHECK(fabs(mw - (double)top) <= t->w,
                              "max_weight[%lld,%lld,%lld] = %.10g, reference "
                              "%.10Lg, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i, mw, top,
                              t->w);
                }
                if (EN) {
                    en = fz_get_raw(EN->data, es, fz_off4(EN, b, h, i, 0));
                    if (empty && !sinks)
                        CHECK(en == 0.0, "empty row entropy = %g", en);
                    else if (check_vals)
                        CHECK(fabs(en - (double)ent) <= tol_h,
                              "entropy[%lld,%lld,%lld] = %.10g, reference "
                              "%.10Lg, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i, en, ent,
                              tol_h);
                }
                if (!check_vals || !W || (empty && !sinks))
                    continue;
                /* the weights output against the library's own lse,
                 * max_weight and entropy: the sink's share from its lse */
                if (sinks && !S)
                    continue;
                double ps = sinks ? exp(sinks[h] - lse) : 0;
                double tol_ps =
                    sinks ? 2 * (t->lse_abs + t->lse_rel * fabs(lse)) + t->w
                          : 0;
                CHECK(fabs(wsum + ps - 1) <= ((double)Tk + 2) * t->w + tol_ps,
                      "row (%lld,%lld,%lld): weights sum to %.10g, the sink's "
                      "share is %.10g: not 1",
                      (long long)b, (long long)h, (long long)i, wsum, ps);
                if (ps > 0)
                    went -= ps * log(ps);
                if (MW)
                    CHECK(fabs(mw - fmax(wmax, ps)) <= 2 * t->w + tol_ps,
                          "row (%lld,%lld,%lld): max_weight %.10g but the "
                          "largest weight is %.10g",
                          (long long)b, (long long)h, (long long)i, mw,
                          fmax(wmax, ps));
                if (EN)
                    CHECK(fabs(en - went) <=
                              2 * tol_h + 2 * t->e_p * ((double)Tk + 2) +
                                  tol_ps * (1 + fabs(log(ps + 1e-300))),
                          "row (%lld,%lld,%lld): entropy %.10g but the "
                          "weights' is %.10g",
                          (long long)b, (long long)h, (long long)i, en, went);
            }
}

/* ------------------------------------------------------------------------ */
/* Backward.                                                                 */
/* ------------------------------------------------------------------------ */
static int bcast_n(const sdpa_tensor *t, int64_t n)
{
    return n > 1 && (t->shape[0] == 1 || t->stride[0] == 0);
}

size_t fz_bwd_dq_at(const fz_bwd_ref *r, int64_t b, int64_t h, int64_t i)
{
    return (size_t)(((b * r->Hq + h) * r->Tq + i) * r->Dk);
}

size_t fz_bwd_dk_at(const fz_bwd_ref *r, int64_t b, int64_t hk, int64_t j)
{
    return (size_t)((((r->nk == 1 ? 0 : b) * r->Hkv + hk) * r->Tk + j) * r->Dk);
}

size_t fz_bwd_dv_at(const fz_bwd_ref *r, int64_t b, int64_t hk, int64_t j)
{
    return (size_t)((((r->nv == 1 ? 0 : b) * r->Hkv + hk) * r->Tk + j) * r->Dv);
}

size_t fz_bwd_db_at(const fz_bwd_ref *r, int64_t b, int64_t h, int64_t i,
                    int64_t j)
{
    const int64_t *e = r->dbias_shape;
    b = e[0] == 1 ? 0 : b;
    h = e[1] == 1 ? 0 : h;
    i = e[2] == 1 ? 0 : i;
    j = e[3] == 1 ? 0 : j;
    return (size_t)(((b * e[1] + h) * e[2] + i) * e[3] + j);
}

void fz_bwd_ref_free(fz_bwd_ref *r)
{
    long double *ld[] = {r->dq, r->dk, r->dv, r->dbias, r->dsinks,
                         r->tq, r->tk, r->tv, r->tb,    r->ts};
    for (size_t i = 0; i < sizeof ld / sizeof ld[0]; i++)
        free(ld[i]);
    free(r->sq);
    free(r->sk);
    free(r->sv);
    free(r->sb);
    ref_free(&r->fwd);
    memset(r, 0, sizeof *r);
}

/* The forward problem of a backward call, with K and V shared through
 * extent 1 seen as the equivalent stride-0 views (reference.c indexes them
 * by batch item). */
static sdpa_forward_args forward_of(const sdpa_backward_args *a)
{
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.dtype = a->dtype;
    f.causal = a->causal;
    f.flags = a->flags;
    f.scale = a->scale;
    f.softcap = a->softcap;
    f.kv_lens = a->kv_lens;
    f.q = a->q;
    f.k = a->k;
    f.v = a->v;
    const int64_t n = a->q.shape[0];
    if (f.k.shape[0] == 1 && n > 1) {
        f.k.shape[0] = n;
        f.k.stride[0] = 0;
    }
    if (f.v.shape[0] == 1 && n > 1) {
        f.v.shape[0] = n;
        f.v.stride[0] = 0;
    }
    f.mask = a->mask;
    f.bias = a->bias;
    f.out = a->out;
    f.window_left = a->window_left;
    f.window_right = a->window_right;
    f.alibi_slopes = a->alibi_slopes;
    f.sinks = a->sinks;
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

int fz_ref_backward(const sdpa_backward_args *a, double eps_d,
                    const fz_bwd_extra *x, fz_bwd_ref *r)
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
        fz_bwd_ref_free(r);
        return -1;
    }
    const long double scale =
        a->scale == 0 ? 1.0L / sqrtl((long double)Dk) : (long double)a->scale;
    const long double cap = (long double)a->softcap;
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
                const long double B = G * vmax + DA;
                const long double e_l =
                    e_s + (Tk1 + 16) * eps + eps * fabsl(lse);
                const long double e_p = e_s + e_l + 16 * eps;
                const long double e_D = ((long double)Dv + 4) * eps * DA +
                                        x->e_dout * OA + G * x->e_o;
                const long double e_dP =
                    ((long double)Dv + 4) * eps * G * vmax +
                    x->e_dout * (long double)Dv * vmax + G * x->e_v;
                const long double E = e_p * B + e_dP + e_D + 3 * eps * B;
                const long double E2 =
                    E + (cap > 0 ? (21 * eps + e_s / cap) * B : 0);
                for (int64_t j = 0; j < Tk; j++)
                    P[j] = ok[j]
                               ? expl(rf->logits[row * (size_t)Tk + (size_t)j] -
                                      lse)
                               : 0;
                const size_t qa = fz_bwd_dq_at(r, b, h, i);
                for (int64_t d = 0; d < Dk; d++)
                    r->sq[qa + (size_t)d] = 1;
                for (int64_t j = 0; j < Tk; j++) {
                    if (!ok[j])
                        continue;
                    long double dp = 0, u = 0;
                    for (int64_t d = 0; d < Dv; d++)
                        dp += ref_get(&a->dout, dt, b, h, i, d) *
                              ref_get(&f.v, dt, b, hk, j, d);
                    for (int64_t d = 0; d < Dk; d++)
                        u += ref_get(&a->q, dt, b, h, i, d) *
                             ref_get(&f.k, dt, b, hk, j, d);
                    u *= scale;
                    const long double dz = P[j] * (dp - D);
                    long double fac = 1;
                    if (cap > 0) {
                        long double t = tanhl(u / cap);
                        fac = 1 - t * t;
                    }
                    const long double ds = dz * fac;
                    const long double err_ds = P[j] * E2 + tiny * B;
                    const size_t ka = fz_bwd_dk_at(r, b, hk, j);
                    const size_t va = fz_bwd_dv_at(r, b, hk, j);
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
                        r->dv[va + (size_t)d] += P[j] * gd;
                        r->tv[va + (size_t)d] +=
                            (P[j] * e_p + tiny) * fabsl(gd) + P[j] * x->e_dout +
                            (R_kv + 4) * eps * P[j] * fabsl(gd);
                        r->sv[va + (size_t)d] = 1;
                    }
                    if (a->bias.data) {
                        size_t ba = fz_bwd_db_at(r, b, h, i, j);
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

void fz_check_close(const char *what, double got, long double ref,
                    long double bound, double eps, int support, int64_t i0,
                    int64_t i1, int64_t i2, int64_t i3)
{
    if (!support) {
        CHECK(got == 0.0,
              "%s[%lld,%lld,%lld,%lld] = %.17g, must be exactly 0 (no term "
              "reaches it)",
              what, (long long)i0, (long long)i1, (long long)i2, (long long)i3,
              got);
        return;
    }
    long double tol = 2 * (bound + 2 * (long double)eps * fabsl(ref));
    CHECK(fabsl((long double)got - ref) <= tol,
          "%s[%lld,%lld,%lld,%lld] = %.17g, reference %.17Lg, tolerance %.3Lg",
          what, (long long)i0, (long long)i1, (long long)i2, (long long)i3, got,
          ref, tol);
}

/* ------------------------------------------------------------------------ */
/* Positional encodings.                                                     */
/* ------------------------------------------------------------------------ */
long double fz_freq(double base, int64_t r, int64_t d)
{
    long double b = base == 0 ? 10000.0L : (long double)base;
    return powl(b, -(long double)(2 * r) / (long double)d);
}

long double fz_angle_bound(double base, int64_t p, int64_t r, int64_t d)
{
    const long double u = 0x1p-53L;
    long double b = base == 0 ? 10000.0L : (long double)base;
    long double f = fz_freq(base, r, d);
    long double ang = fabsl((long double)p) * f;
    long double ln = fabsl(logl(b)) * (long double)(2 * r) / (long double)d;
    /* (double)p, pow, the product: 3 roundings of the angle; the
     * exponent's rounding moves f by f·|ln base|·(2r/d)·u; subnormal
     * frequencies are off by up to DBL_TRUE_MIN */
    return ang * (3 + ln) * u +
           fabsl((long double)p) * (long double)DBL_TRUE_MIN * 2 + 8 * u;
}

long double fz_sinusoid(double base, int64_t pos, int64_t col, int64_t dim)
{
    long double angle = (long double)pos * fz_freq(base, col / 2, dim);
    return col % 2 == 0 ? sinl(angle) : cosl(angle);
}

int64_t fz_rope_partner(int64_t c, int64_t rd, int style, int64_t *pair)
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

void fz_rope_row(long double *row, int64_t d, int64_t rd, int style,
                 double base, int64_t pos)
{
    (void)d;
    for (int64_t r = 0; r < rd / 2; r++) {
        long double angle = (long double)pos * fz_freq(base, r, rd);
        long double c = cosl(angle), s = sinl(angle);
        int64_t i0 = style == SDPA_ROPE_HALF ? r : 2 * r;
        int64_t i1 = style == SDPA_ROPE_HALF ? r + rd / 2 : 2 * r + 1;
        long double x0 = row[i0], x1 = row[i1];
        row[i0] = x0 * c - x1 * s;
        row[i1] = x0 * s + x1 * c;
    }
}
