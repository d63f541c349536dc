/*
 * Naive long-double reference for sdpa_forward. See reference.h.
 *
 * Everything here follows the numbered semantics of include/sdpa.h literally,
 * one query row at a time, with no blocking, no vectorisation and no BLAS:
 *
 *   s_ij = scale * <q[b,h,i,:], k[b,h/g,j,:]>     (scale 0 -> 1/sqrt(Dk))
 *   s_ij = c * tanh(s_ij / c)                      (softcap c > 0)
 *   s_ij += bias[b,h,i,j]                          (broadcast by extent 1)
 *   forbidden: j >= L_b, mask != 0 (or == 0 with NONZERO_ALLOWS),
 *              TOP_LEFT j > i, BOTTOM_RIGHT j > i + L_b - Tq, bias == -inf
 *   p_ij = exp(s_ij - m_i) / sum_j' exp(s_ij' - m_i)   over allowed keys
 *   out_i = sum_j p_ij v[b,h/g,j,:];  lse_i = m_i + log(sum)
 *
 * and the 1.1 fields, with d_i = i (TOP_LEFT) or i + L_b - Tq (otherwise):
 *
 *   window (SDPA_FLAG_WINDOW): forbidden also when j - d_i < -window_left
 *              (window_left != -1) or j - d_i > window_right (!= -1)
 *   ALiBi:     s_ij += -slope_h * |j - d_i|   (after softcap, with the bias)
 *   sinks:     m_i = max(max_j s_ij, sigma_h);
 *              p_ij = exp(s_ij - m_i) / (sum_j' exp(s_ij' - m_i)
 *                                        + exp(sigma_h - m_i));
 *              lse_i = m_i + log(that denominator); a row with no allowed
 *              key is not empty: out 0, weights 0, lse sigma_h
 *   logits:    SCALED scale * <q, k>, CAPPED after the softcap, MASKED after
 *              bias and ALiBi; -inf at forbidden keys
 *
 * and 1.2's dropout (dropout_p > 0): w_ij = Z_ij * c * p_ij, out_i = sum_j
 * w_ij v_j, c = 1/(1 - p) rounded as the header says (float arithmetic in a
 * float32 call), Z_ij = ref_dropout_keep (this file's own Philox4x32-10);
 * lse from the undropped p.
 */
#include "reference.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

long double ref_get(const sdpa_tensor *t, int dtype, int64_t i0, int64_t i1,
                    int64_t i2, int64_t i3)
{
    int64_t off = i0 * t->stride[0] + i1 * t->stride[1] + i2 * t->stride[2] +
                  i3 * t->stride[3];
    if (dtype == SDPA_FLOAT32)
        return (long double)((const float *)t->data)[off];
    return (long double)((const double *)t->data)[off];
}

/* Philox4x32-10 as Random123 defines it: ten rounds of the two products'
 * high and low halves, xored with the other words and the key, the key
 * bumped by the Weyl constants between rounds. */
static void mulhilo32(uint32_t a, uint32_t b, uint32_t *hi, uint32_t *lo)
{
    uint64_t product = (uint64_t)a * (uint64_t)b;
    *hi = (uint32_t)(product >> 32);
    *lo = (uint32_t)(product & 0xffffffffu);
}

void ref_philox4x32_10(const uint32_t counter[4], const uint32_t key[2],
                       uint32_t out[4])
{
    uint32_t x[4] = {counter[0], counter[1], counter[2], counter[3]};
    uint32_t k[2] = {key[0], key[1]};
    for (int round = 0; round < 10; ++round) {
        if (round > 0) {
            k[0] += 0x9E3779B9u;
            k[1] += 0xBB67AE85u;
        }
        uint32_t hi0, lo0, hi1, lo1;
        mulhilo32(0xD2511F53u, x[0], &hi0, &lo0);
        mulhilo32(0xCD9E8D57u, x[2], &hi1, &lo1);
        const uint32_t y[4] = {hi1 ^ x[1] ^ k[0], lo1, hi0 ^ x[3] ^ k[1], lo0};
        memcpy(x, y, sizeof x);
    }
    memcpy(out, x, sizeof x);
}

int ref_dropout_keep(const sdpa_forward_args *a, int64_t b, int64_t h,
                     int64_t i, int64_t j)
{
    if (a->dropout_p <= 0)
        return 1;
    const uint64_t stream =
        a->dropout_offset + (uint64_t)b * (uint64_t)a->q.shape[1] + (uint64_t)h;
    const uint32_t counter[4] = {(uint32_t)(j / 4), (uint32_t)i,
                                 (uint32_t)stream, (uint32_t)(stream >> 32)};
    const uint32_t key[2] = {(uint32_t)a->dropout_seed,
                             (uint32_t)(a->dropout_seed >> 32)};
    uint32_t words[4];
    ref_philox4x32_10(counter, key, words);
    const uint32_t threshold = (uint32_t)ldexp(a->dropout_p, 32);
    return words[j % 4] >= threshold;
}

long double ref_dropout_scale(int dtype, double p)
{
    if (dtype == SDPA_FLOAT64)
        return (long double)(1.0 / (1.0 - p));
    volatile float one_minus = 1.0f - (float)p; /* float arithmetic */
    return (long double)(1.0f / one_minus);
}

/* Index of a possibly broadcast dimension: extent 1 means "always 0". A
 * stride of 0 needs no special case: any index lands on the same element. */
static int64_t bidx(const sdpa_tensor *t, int dim, int64_t i)
{
    return t->shape[dim] == 1 ? 0 : i;
}

static unsigned char mask_get(const sdpa_tensor *m, int64_t b, int64_t h,
                              int64_t i, int64_t j)
{
    int64_t off = bidx(m, 0, b) * m->stride[0] + bidx(m, 1, h) * m->stride[1] +
                  bidx(m, 2, i) * m->stride[2] + bidx(m, 3, j) * m->stride[3];
    return ((const unsigned char *)m->data)[off];
}

void ref_free(ref_result *r)
{
    free(r->out);
    free(r->weights);
    free(r->lse);
    free(r->logits);
    free(r->allowed);
    free(r->probs);
    memset(r, 0, sizeof *r);
}

void ref_diagnostics(const ref_result *r, const double *sinks, int64_t h,
                     size_t row, long double *top, long double *entropy)
{
    long double m = 0, e = 0;
    const long double *p = r->probs ? r->probs : r->weights;
    for (int64_t j = 0; j < r->tk; j++) {
        long double w = p[row * (size_t)r->tk + (size_t)j];
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

int ref_causal_allows(int causal, int64_t i, int64_t j, int64_t len, int64_t tq)
{
    if (causal == SDPA_CAUSAL_TOP_LEFT)
        return j <= i;
    if (causal == SDPA_CAUSAL_BOTTOM_RIGHT)
        return j <= i + (len - tq);
    return 1;
}

int ref_forward(const sdpa_forward_args *a, ref_result *r)
{
    const int dt = a->dtype;
    const int64_t N = a->q.shape[0], Hq = a->q.shape[1], Tq = a->q.shape[2],
                  Dk = a->q.shape[3];
    const int64_t Hkv = a->k.shape[1], Tk = a->k.shape[2], Dv = a->v.shape[3];
    const int64_t g = Hq / Hkv;
    const long double scale =
        a->scale == 0.0 ? 1.0L / sqrtl((long double)Dk) : (long double)a->scale;
    const long double cap = (long double)a->softcap;
    const int inverted = (a->flags & SDPA_FLAG_MASK_NONZERO_ALLOWS) != 0;
    const int window = (a->flags & SDPA_FLAG_WINDOW) != 0;
    const int stage =
        a->logits_stage == 0 ? SDPA_LOGITS_MASKED : a->logits_stage;
    const long double drop_c =
        a->dropout_p > 0 ? ref_dropout_scale(dt, a->dropout_p) : 1.0L;

    memset(r, 0, sizeof *r);
    r->n = N;
    r->hq = Hq;
    r->tq = Tq;
    r->tk = Tk;
    r->dv = Dv;
    r->empty_b = r->empty_h = r->empty_i = -1;
    size_t rows = (size_t)(N * Hq * Tq);
    r->out = calloc(rows * (size_t)Dv, sizeof(long double));
    r->weights = calloc(rows * (size_t)Tk, sizeof(long double));
    r->lse = calloc(rows, sizeof(long double));
    r->logits = calloc(rows * (size_t)Tk, sizeof(long double));
    r->allowed = calloc(rows * (size_t)Tk, 1);
    if (a->dropout_p > 0)
        r->probs = calloc(rows * (size_t)Tk, sizeof(long double));
    long double *s = calloc((size_t)Tk, sizeof(long double));
    if (!r->out || !r->weights || !r->lse || !r->logits || !r->allowed || !s ||
        (a->dropout_p > 0 && !r->probs)) {
        free(s);
        ref_free(r);
        return -1;
    }
    if (a->sinks)
        for (int64_t h = 0; h < Hq; ++h)
            if (fabsl((long double)a->sinks[h]) > r->sink_absmax)
                r->sink_absmax = fabsl((long double)a->sinks[h]);

    for (int64_t b = 0; b < N; ++b) {
        const int64_t L = a->kv_lens ? a->kv_lens[b] : Tk;
        for (int64_t h = 0; h < Hq; ++h) {
            const int64_t hk = h / g;
            for (int64_t i = 0; i < Tq; ++i) {
                const size_t row = (size_t)((b * Hq + h) * Tq + i);
                /* The row's diagonal (1.1): top-left, else bottom-right. */
                const int64_t d =
                    a->causal == SDPA_CAUSAL_TOP_LEFT ? i : i + (L - Tq);
                unsigned char *ok = r->allowed + row * (size_t)Tk;
                long double *lg = r->logits + row * (size_t)Tk;
                long double m = -INFINITY;
                int any = 0;
                for (int64_t j = 0; j < Tk; ++j) {
                    int allowed = 1;
                    lg[j] = -INFINITY;
                    if (j >= L)
                        allowed = 0;
                    if (a->mask.data) {
                        unsigned char mv = mask_get(&a->mask, b, h, i, j);
                        if (inverted ? mv == 0 : mv != 0)
                            allowed = 0;
                    }
                    if (!ref_causal_allows(a->causal, i, j, L, Tq))
                        allowed = 0;
                    if (window && a->window_left != -1 &&
                        j - d < -a->window_left)
                        allowed = 0;
                    if (window && a->window_right != -1 &&
                        j - d > a->window_right)
                        allowed = 0;
                    long double bv = 0.0L;
                    if (a->bias.data) {
                        bv = ref_get(&a->bias, dt, bidx(&a->bias, 0, b),
                                     bidx(&a->bias, 1, h), bidx(&a->bias, 2, i),
                                     bidx(&a->bias, 3, j));
                        if (isinf(bv) && bv < 0)
                            allowed = 0;
                    }
                    ok[j] = (unsigned char)allowed;
                    if (!allowed)
                        continue; /* K row j is never read (rule 5) */
                    long double dot = 0.0L, absdot = 0.0L;
                    for (int64_t c = 0; c < Dk; ++c) {
                        long double t = ref_get(&a->q, dt, b, h, i, c) *
                                        ref_get(&a->k, dt, b, hk, j, c);
                        dot += t;
                        absdot += fabsl(t);
                    }
                    long double x = scale * dot;
                    if (stage == SDPA_LOGITS_SCALED)
                        lg[j] = x;
                    if (cap > 0.0L)
                        x = cap * tanhl(x / cap);
                    if (stage == SDPA_LOGITS_CAPPED)
                        lg[j] = x;
                    x += bv;
                    if (a->alibi_slopes) {
                        long double dist = (long double)llabs(
                            (long long)(j - d)); /* |j - d_i| */
                        long double al =
                            -(long double)a->alibi_slopes[h] * dist;
                        x += al;
                        if (fabsl(al) > r->alibi_absmax)
                            r->alibi_absmax = fabsl(al);
                    }
                    if (stage == SDPA_LOGITS_MASKED)
                        lg[j] = x;
                    s[j] = x;
                    long double bound = scale * absdot + fabsl(bv);
                    if (bound > r->logit_absmax)
                        r->logit_absmax = bound;
                    if (!any || x > m)
                        m = x;
                    any = 1;
                }
                long double *w = r->weights + row * (size_t)Tk;
                long double *o = r->out + row * (size_t)Dv;
                const long double sigma =
                    a->sinks ? (long double)a->sinks[h] : 0.0L;
                if (!any && a->sinks) {
                    /* Only the sink: out 0, weights 0 (calloc), lse sigma. */
                    r->lse[row] = sigma;
                    continue;
                }
                if (!any) {
                    /* ZERO policy: out 0, weights 0 (calloc), lse -inf. */
                    r->lse[row] = -INFINITY;
                    if (!r->any_empty) {
                        r->any_empty = 1;
                        r->empty_b = b;
                        r->empty_h = h;
                        r->empty_i = i;
                    }
                    continue;
                }
                if (a->sinks && sigma > m)
                    m = sigma;
                long double sum = 0.0L;
                for (int64_t j = 0; j < Tk; ++j)
                    if (ok[j])
                        sum += expl(s[j] - m);
                if (a->sinks)
                    sum += expl(sigma - m); /* the sink: no value row */
                for (int64_t j = 0; j < Tk; ++j) {
                    if (!ok[j])
                        continue;
                    long double p = expl(s[j] - m) / sum;
                    if (r->probs)
                        r->probs[row * (size_t)Tk + (size_t)j] = p;
                    if (a->dropout_p > 0)
                        p *= ref_dropout_keep(a, b, h, i, j) ? drop_c : 0.0L;
                    w[j] = p;
                    for (int64_t c = 0; c < Dv; ++c) {
                        long double vv = ref_get(&a->v, dt, b, hk, j, c);
                        if (fabsl(vv) > r->v_absmax)
                            r->v_absmax = fabsl(vv);
                        o[c] += p * vv;
                    }
                }
                r->lse[row] = m + logl(sum);
            }
        }
    }
    free(s);
    return 0;
}
