/*
 * sdpa_backward against a long-double reference of the same math, written
 * here from include/sdpa.h (it shares no code with the library):
 *
 *   u_ij = scale·<q_i, k_j>,  x = c·tanh(u/c) (soft-cap) or u,
 *   z_ij = x + bias + ALiBi,  P_ij = exp(z_ij − lse_i) (lse with the sink),
 *   D_i = <dout_i, out_i>,  dP_ij = <dout_i, v_j>,  dz = P ∘ (dP − D),
 *   dS = dz ∘ (1 − tanh²(u/c)),  dq = scale·dS K,  dk = scale·dSᵀ Q,
 *   dv = Pᵀ dout,  dbias = dz summed over its broadcast dimensions,
 *   dsinks_h = −Σ_{b,i} exp(σ_h − lse_i)·D_i;
 *
 * GQA and K/V broadcast over N sum dk, dv over the heads and batch items
 * that share them. Random configurations (fixed seeds) mix every feature:
 * layouts and padded rows, GQA/MQA, K/V broadcast over N, both causal
 * anchors, kv_lens (the K/V rows past them, and every key no row may see,
 * hold NaN), masks (both conventions, broadcast), biases with −inf
 * (broadcast: dbias sums), soft-cap, windows, ALiBi, sinks (dsinks), both
 * empty-row policies, 1..4 threads, small tiles; float and double; every
 * kernel the CPU has. Also: central finite differences in float64, bitwise
 * identity across thread counts and a caller's parallel-for in any task
 * order (the key blocks of a single (batch item, KV head) pair spread over
 * the workers included), no allocation on a repeated call, running out of
 * memory at any allocation (on the caller's parallel-for included), and
 * errors leaving the outputs untouched.
 *
 * Tolerances, derived from the dtype as tests/test_random.c does (eps =
 * FLT_EPSILON or DBL_EPSILON; L, A, S the logit, ALiBi and sink bounds,
 * Tk' = Tk + 1 with sinks):
 *   e_s    = (Dk + 4)·eps·L + 4·eps·(1 + L + A + S + cap) + 2·eps·A
 *            (a recomputed logit, as in test_random.c)
 *   e_l,i  = e_s + (Tk' + 16)·eps + eps·|lse_i|   (the forward's lse)
 *   e_p,i  = e_s + e_l,i + 16·eps                 relative error of P_ij
 *   δo     = Vmax·(2·e_s + (Tk' + 16)·eps + (Tk + 4)·eps)  (forward's out)
 *   G_i    = Σ_d |dout_id|;  B_i = 2·G_i·Vmax bounds |dP_ij − D_i|
 *   e_D,i  = (Dv + 4)·eps·G_i·Vmax + G_i·δo       error of D_i
 *   E_i    = e_p,i·B_i + (Dv + 4)·eps·G_i·Vmax + e_D,i + 3·eps·B_i
 *            so that |dz_ij error| <= P_ij·E_i + tiny·B_i (tiny: exp
 *            flushes results below the smallest normal to 0)
 *   E'_i   = E_i + (21·eps + e_s/cap)·B_i with a soft-cap (the
 *            derivative 1 − t², t = x/c within 9 eps, and u's error), else E_i
 * and each output sums its terms' errors plus the summation's:
 *   dq_id  : scale·Σ_j (P_ij·E'_i + tiny·B_i)·|k_jd| + (Tk + 4)·eps·scale·
 *            Σ_j |dS_ij k_jd|
 *   dk_jd  : the same over the rows i sharing key j, (R + 4)·eps, R the
 *            number of those rows
 *   dv_jd  : Σ_i (P_ij·e_p,i + tiny)·|dout_id| + (R + 4)·eps·Σ_i P_ij|dout_id|
 *   dbias  : Σ (P_ij·E_i + tiny·B_i) + (R_b + 4)·eps·Σ |dz_ij|
 *   dsinks : Σ_{b,i} P_sink,i·(e_l,i·|D_i| + e_D,i) + (R + 4)·eps·Σ|P_sink D|
 * and a final rounding 2·eps·|value|; the check allows twice that (the
 * safety factor of test_random.c). Elements whose terms are all zero (keys
 * no row sees, empty rows) must be exactly 0.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpa.h"
#include "caller_pool.h"
#include "checks.h"
#include "problem.h"
#include "testutil.h"

#define MAX_N 3
#define MAX_H TP_MAX_H

typedef struct cfg {
    uint64_t seed;
    int dtype;
    int64_t N, Hq, Hkv, Tq, Tk, Dk, Dv;
    int lay_q, lay_kv, lay_o;
    int64_t pad_q, pad_kv, pad_o;
    int kv_bcast;
    int use_mask, mask_b[4];
    double mask_p;
    int use_bias, bias_b[4], want_dbias;
    double bias_ninf_p;
    tp_call x; /* causal, mask convention, scale, soft-cap, kv_lens, window,
                  ALiBi slopes, sinks */
    double amp;
    int empty_zero, threads;
    int64_t block_q, block_k;
    int want_dsinks;
} cfg;

static void cfg_print(const cfg *c)
{
    print_message(
        "  cfg seed=%llu %s N=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld Dk=%lld "
        "Dv=%lld kv_bcast=%d mask=%d(inv %d, b %d%d%d%d) bias=%d(b %d%d%d%d, "
        "dbias %d) causal=%d kvlens=%d scale=%g cap=%g zero=%d threads=%d "
        "blocks=%lld,%lld window=%d(%lld,%lld) alibi=%d sinks=%d\n",
        (unsigned long long)c->seed, c->dtype == SDPA_FLOAT32 ? "f32" : "f64",
        (long long)c->N, (long long)c->Hq, (long long)c->Hkv, (long long)c->Tq,
        (long long)c->Tk, (long long)c->Dk, (long long)c->Dv, c->kv_bcast,
        c->use_mask, c->x.mask_inverted, c->mask_b[0], c->mask_b[1],
        c->mask_b[2], c->mask_b[3], c->use_bias, c->bias_b[0], c->bias_b[1],
        c->bias_b[2], c->bias_b[3], c->want_dbias, c->x.causal, c->x.use_kvlens,
        c->x.scale, c->x.softcap, c->empty_zero, c->threads,
        (long long)c->block_q, (long long)c->block_k, c->x.use_window,
        (long long)c->x.win_left, (long long)c->x.win_right, c->x.use_alibi,
        c->x.use_sinks);
}

static void cfg_random(cfg *c, uint64_t seed, int dtype)
{
    rng r = {seed * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)dtype};
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->dtype = dtype;
    static const int64_t hq_choices[] = {1, 2, 3, 4, 6, 8};
    c->N = rng_int(&r, 1, MAX_N);
    c->Hq = hq_choices[rng_int(&r, 0, 5)];
    c->Hkv = tp_draw_hkv(&r, c->Hq);
    c->Tq = rng_int(&r, 0, 4) == 0 ? rng_int(&r, 1, 3) : rng_int(&r, 1, 40);
    c->Tk = rng_int(&r, 1, 48);
    c->Dk = rng_int(&r, 1, 20);
    c->Dv = rng_int(&r, 0, 2) == 0 ? c->Dk : rng_int(&r, 1, 20);
    c->lay_q = (int)rng_int(&r, 0, 1);
    c->lay_kv = (int)rng_int(&r, 0, 1);
    c->lay_o = (int)rng_int(&r, 0, 1);
    c->pad_q = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 4) : 0;
    c->pad_kv = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 4) : 0;
    c->pad_o = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 4) : 0;
    c->kv_bcast = rng_int(&r, 0, 4) == 0;
    c->use_mask = rng_int(&r, 0, 2) == 0;
    c->x.mask_inverted = rng_int(&r, 0, 1) == 0;
    static const int modes[] = {0, 0, 0, 2, 3};
    static const int key_modes[] = {0, 0, 0, 2, 3, 4};
    for (int d = 0; d < 3; ++d) {
        c->mask_b[d] = modes[rng_int(&r, 0, 4)];
        c->bias_b[d] = modes[rng_int(&r, 0, 4)];
    }
    c->mask_b[3] = key_modes[rng_int(&r, 0, 5)];
    c->bias_b[3] = key_modes[rng_int(&r, 0, 5)];
    static const double mp[] = {0.05, 0.2, 0.5};
    c->mask_p = mp[rng_int(&r, 0, 2)];
    c->use_bias = rng_int(&r, 0, 1) == 0;
    c->want_dbias = c->use_bias && rng_int(&r, 0, 3) != 0;
    c->bias_ninf_p = rng_int(&r, 0, 1) ? 0.15 : 0.0;
    c->x.causal = (int)rng_int(&r, 0, 2);
    tp_draw_kvlens(&c->x, &r, c->N, c->Tk);
    tp_draw_scale(&c->x, &r);
    int64_t cm = rng_int(&r, 0, 4);
    c->x.softcap = cm == 0 ? 1.0 : cm == 1 ? 5.0 : 0.0;
    double se = c->x.scale == 0.0 ? 1.0 / sqrt((double)c->Dk) : c->x.scale;
    c->amp = sqrt((1.0 + 11.0 * rng_unit(&r)) / (se * (double)c->Dk));
    c->empty_zero = rng_int(&r, 0, 3) != 0;
    c->threads = (int)rng_int(&r, 1, 4);
    static const int64_t blocks[] = {0, 0, 1, 3, 8, 16};
    c->block_q = blocks[rng_int(&r, 0, 5)];
    c->block_k = blocks[rng_int(&r, 0, 5)];
    tp_draw_window(&c->x, &r, c->Tk);
    c->x.use_alibi = rng_int(&r, 0, 2) == 0;
    for (int h = 0; h < MAX_H; ++h)
        c->x.slopes[h] = rng_sym(&r, 0.3);
    c->x.use_sinks = rng_int(&r, 0, 2) == 0;
    c->want_dsinks = c->x.use_sinks && rng_int(&r, 0, 3) != 0;
    for (int h = 0; h < MAX_H; ++h)
        c->x.sinks[h] = rng_sym(&r, 3.0);
}

/* ---- Tensors of one configuration. ------------------------------------ */
typedef struct inst {
    tbuf q, k, v, mask, bias, out, lse, dout, dq, dk, dv, dbias;
    double dsinks[MAX_H + 2]; /* [0] and [Hq + 1]: sentinels */
    int64_t dbias_shape[4];
    sdpa_forward_args fa;
    sdpa_backward_args ba;
} inst;

static void inst_make(inst *s, const cfg *c)
{
    rng r = {c->seed ^ 0x5DEECE66DA5A5A5Aull};
    memset(s, 0, sizeof *s);
    const int dt = c->dtype;
    const int64_t nkv = c->kv_bcast ? 1 : c->N;
    tbuf_make(&s->q, dt, c->N, c->Hq, c->Tq, c->Dk, c->lay_q, c->pad_q);
    tbuf_make(&s->k, dt, nkv, c->Hkv, c->Tk, c->Dk, c->lay_kv, c->pad_kv);
    tbuf_make(&s->v, dt, nkv, c->Hkv, c->Tk, c->Dv, c->lay_kv, c->pad_kv);
    tbuf_fill_random(&s->q, &r, c->amp);
    tbuf_fill_random(&s->k, &r, c->amp);
    tbuf_fill_random(&s->v, &r, 1.0);
    if (c->kv_bcast) { /* extent N, stride 0: half the time */
        if (c->seed & 2) {
            s->k.t.shape[0] = s->v.t.shape[0] = c->N;
            s->k.t.stride[0] = s->v.t.stride[0] = 0;
        }
    }
    const int64_t full[4] = {c->N, c->Hq, c->Tq, c->Tk};
    if (c->use_mask) {
        tp_make_bcast(&s->mask, ELEM_U8, full, c->mask_b, 2);
        tp_fill_bcast(&s->mask, &r, 1, c->x.mask_inverted, c->mask_p, 0);
    }
    if (c->use_bias) {
        tp_make_bcast(&s->bias, dt, full, c->bias_b, 2);
        tp_fill_bcast(&s->bias, &r, 0, 0, 0, c->bias_ninf_p);
    }
    tbuf_make(&s->out, dt, c->N, c->Hq, c->Tq, c->Dv, c->lay_o, c->pad_o);
    tbuf_make(&s->lse, dt, c->N, c->Hq, c->Tq, 1, LAYOUT_BHTD, c->pad_o);
    tbuf_make(&s->dout, dt, c->N, c->Hq, c->Tq, c->Dv, c->lay_q, c->pad_o);
    tbuf_fill_random(&s->dout, &r, 1.0);
    tbuf_make(&s->dq, dt, c->N, c->Hq, c->Tq, c->Dk, c->lay_o, c->pad_q);
    tbuf_make(&s->dk, dt, nkv, c->Hkv, c->Tk, c->Dk, c->lay_kv, c->pad_kv);
    tbuf_make(&s->dv, dt, nkv, c->Hkv, c->Tk, c->Dv, c->lay_kv, c->pad_kv);
    for (int d = 0; d < 4; ++d)
        s->dbias_shape[d] =
            c->bias_b[d] == 2 || c->bias_b[d] == 3 ? 1 : full[d];
    if (c->want_dbias)
        tbuf_make(&s->dbias, dt, s->dbias_shape[0], s->dbias_shape[1],
                  s->dbias_shape[2], s->dbias_shape[3], LAYOUT_BHTD, c->pad_o);

    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    tp_apply(&a, dt, &c->x);
    tp_views(&a, &s->q, &s->k, &s->v, &s->mask, &s->bias, &s->out, NULL,
             &s->lse, NULL);
    s->fa = a;

    sdpa_backward_args g = tp_backward_of(&a);
    g.dout = s->dout.t;
    g.dq = s->dq.t;
    g.dk = s->dk.t;
    g.dv = s->dv.t;
    if (c->want_dbias)
        g.dbias = s->dbias.t;
    if (c->want_dsinks)
        g.dsinks = s->dsinks + 1;
    s->ba = g;
}

static void inst_free(inst *s)
{
    tbuf *all[] = {&s->q,   &s->k,    &s->v,  &s->mask, &s->bias, &s->out,
                   &s->lse, &s->dout, &s->dq, &s->dk,   &s->dv,   &s->dbias};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        tbuf_free(all[i]);
}

static void reset_grads(inst *s)
{
    tbuf *g[] = {&s->dq, &s->dk, &s->dv, &s->dbias};
    for (int i = 0; i < 4; ++i)
        if (g[i]->mem)
            fill_sentinel(g[i]->mem, g[i]->elems * g[i]->esize);
    fill_sentinel(s->dsinks, sizeof s->dsinks);
}

/* Are the gradient outputs all sentinel (every byte), or outside their
 * logical views (padding) when !all? */
static int grads_untouched(const inst *s, int all)
{
    const tbuf *g[] = {&s->dq, &s->dk, &s->dv, &s->dbias};
    for (int i = 0; i < 4; ++i) {
        if (!g[i]->mem)
            continue;
        unsigned char *map = all ? NULL : tbuf_logical_map(g[i]);
        const unsigned char *p = g[i]->mem;
        for (size_t e = 0; e < g[i]->elems; ++e) {
            if (map && map[e])
                continue;
            for (size_t b = 0; b < g[i]->esize; ++b)
                if (p[e * g[i]->esize + b] != SENTINEL_BYTE) {
                    free(map);
                    return 0;
                }
        }
        free(map);
    }
    const unsigned char *d = (const unsigned char *)s->dsinks;
    for (size_t b = 0; b < sizeof s->dsinks; ++b) {
        int logical = b >= sizeof(double) &&
                      b < sizeof(double) * (size_t)(s->fa.q.shape[1] + 1) &&
                      s->ba.dsinks;
        if ((all || !logical) && d[b] != SENTINEL_BYTE)
            return 0;
    }
    return 1;
}

/* ---- The reference. ---------------------------------------------------- */
typedef struct bref {
    int64_t nkv, g, R_kv, R_bias;
    long double *dq, *dk, *dv, *dbias, *dsinks; /* contiguous, logical */
    long double *tq, *tk, *tv, *tb, *ts;        /* error bounds */
    unsigned char *seen;                        /* [nkv, Hkv, Tk] */
    int any_empty;
} bref;

static long double *zalloc(size_t n)
{
    long double *p = calloc(n ? n : 1, sizeof *p);
    if (!p)
        abort();
    return p;
}

static void bref_free(bref *r)
{
    long double *all[] = {r->dq, r->dk, r->dv, r->dbias, r->dsinks,
                          r->tq, r->tk, r->tv, r->tb,    r->ts};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        free(all[i]);
    free(r->seen);
}

static int64_t bidx(const sdpa_tensor *t, int d, int64_t i)
{
    return t->shape[d] == 1 ? 0 : i;
}

static long double getl(const sdpa_tensor *t, int dt, int64_t a, int64_t b,
                        int64_t c, int64_t d)
{
    int64_t o = bidx(t, 0, a) * t->stride[0] + bidx(t, 1, b) * t->stride[1] +
                bidx(t, 2, c) * t->stride[2] + bidx(t, 3, d) * t->stride[3];
    return dt == SDPA_FLOAT32 ? (long double)((const float *)t->data)[o]
                              : (long double)((const double *)t->data)[o];
}

/* <x[b, h, i, :], y[b, hy, j, :]> over n elements, in long double. */
static long double row_dot(const sdpa_tensor *x, const sdpa_tensor *y, int dt,
                           int64_t b, int64_t h, int64_t i, int64_t hy,
                           int64_t j, int64_t n)
{
    long double sum = 0;
    for (int64_t d = 0; d < n; ++d)
        sum += getl(x, dt, b, h, i, d) * getl(y, dt, b, hy, j, d);
    return sum;
}

/* Is key j allowed for row (b, h, i) (include/sdpa.h rule 2 and the
 * window)? */
static int allowed(const cfg *c, const inst *s, int64_t b, int64_t h, int64_t i,
                   int64_t j)
{
    const int64_t L = c->x.use_kvlens ? c->x.kv_lens[b] : c->Tk;
    const int64_t d = c->x.causal == SDPA_CAUSAL_TOP_LEFT ? i : i + L - c->Tq;
    if (j >= L)
        return 0;
    if (c->x.causal != SDPA_CAUSAL_NONE && j > d)
        return 0;
    if (c->x.use_window && c->x.win_left >= 0 && j - d < -c->x.win_left)
        return 0;
    if (c->x.use_window && c->x.win_right >= 0 && j - d > c->x.win_right)
        return 0;
    if (c->use_mask) {
        const sdpa_tensor *m = &s->mask.t;
        int64_t o = bidx(m, 0, b) * m->stride[0] +
                    bidx(m, 1, h) * m->stride[1] +
                    bidx(m, 2, i) * m->stride[2] + bidx(m, 3, j) * m->stride[3];
        int nz = ((const unsigned char *)m->data)[o] != 0;
        if (nz != c->x.mask_inverted)
            return 0;
    }
    if (c->use_bias) {
        long double bv = getl(&s->bias.t, c->dtype, b, h, i, j);
        if (isinf(bv) && bv < 0)
            return 0;
    }
    return 1;
}

static size_t kv_at(const cfg *c, const bref *r, int64_t b, int64_t hk,
                    int64_t j)
{
    return (size_t)(((r->nkv == 1 ? 0 : b) * c->Hkv + hk) * c->Tk + j);
}

/* Which K/V rows some row may see; the others are filled with NaN. */
static void mark_seen(const cfg *c, inst *s, bref *r)
{
    r->nkv = c->kv_bcast ? 1 : c->N;
    r->g = c->Hq / c->Hkv;
    r->seen = calloc((size_t)(r->nkv * c->Hkv * c->Tk), 1);
    if (!r->seen)
        abort();
    for (int64_t b = 0; b < c->N; ++b)
        for (int64_t h = 0; h < c->Hq; ++h)
            for (int64_t i = 0; i < c->Tq; ++i)
                for (int64_t j = 0; j < c->Tk; ++j)
                    if (allowed(c, s, b, h, i, j))
                        r->seen[kv_at(c, r, b, h / r->g, j)] = 1;
    for (int64_t b = 0; b < r->nkv; ++b)
        for (int64_t hk = 0; hk < c->Hkv; ++hk)
            for (int64_t j = 0; j < c->Tk; ++j) {
                if (r->seen[kv_at(c, r, b, hk, j)])
                    continue;
                for (int64_t d = 0; d < c->Dk; ++d)
                    tset(&s->k, b, hk, j, d, NAN);
                for (int64_t d = 0; d < c->Dv; ++d)
                    tset(&s->v, b, hk, j, d, NAN);
            }
}

static size_t dbias_at(const inst *s, int64_t b, int64_t h, int64_t i,
                       int64_t j)
{
    const int64_t *e = s->dbias_shape;
    int64_t x[4] = {b, h, i, j};
    size_t o = 0;
    for (int d = 0; d < 4; ++d)
        o = o * (size_t)e[d] + (size_t)(e[d] == 1 ? 0 : x[d]);
    return o;
}

static void bref_compute(const cfg *c, const inst *s, bref *r)
{
    const int dt = c->dtype;
    const long double eps = dt == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    const long double tiny = 2.0L * (dt == SDPA_FLOAT32 ? FLT_MIN : DBL_MIN);
    const int64_t N = c->N, Hq = c->Hq, Tq = c->Tq, Tk = c->Tk, Dk = c->Dk,
                  Dv = c->Dv, g = r->g, nkv = r->nkv;
    const long double scale = c->x.scale == 0 ? 1.0L / sqrtl((long double)Dk)
                                              : (long double)c->x.scale;
    const long double cap = (long double)c->x.softcap;
    const size_t nb = (size_t)(s->dbias_shape[0] * s->dbias_shape[1] *
                               s->dbias_shape[2] * s->dbias_shape[3]);
    r->dq = zalloc((size_t)(N * Hq * Tq * Dk));
    r->tq = zalloc((size_t)(N * Hq * Tq * Dk));
    r->dk = zalloc((size_t)(nkv * c->Hkv * Tk * Dk));
    r->tk = zalloc((size_t)(nkv * c->Hkv * Tk * Dk));
    r->dv = zalloc((size_t)(nkv * c->Hkv * Tk * Dv));
    r->tv = zalloc((size_t)(nkv * c->Hkv * Tk * Dv));
    r->dbias = zalloc(nb);
    r->tb = zalloc(nb);
    r->dsinks = zalloc((size_t)Hq);
    r->ts = zalloc((size_t)Hq);
    r->R_kv = g * Tq * (nkv == 1 ? N : 1);
    r->R_bias = (int64_t)((size_t)(N * Hq * Tq * Tk) / nb);

    /* Pass 1: the bounds L, A, S and Vmax. */
    long double L = 0, A = 0, S = 0, Vmax = 0;
    for (int64_t h = 0; c->x.use_sinks && h < Hq; ++h)
        S = fmaxl(S, fabsl((long double)c->x.sinks[h]));
    for (int64_t b = 0; b < N; ++b)
        for (int64_t h = 0; h < Hq; ++h)
            for (int64_t i = 0; i < Tq; ++i)
                for (int64_t j = 0; j < Tk; ++j) {
                    if (!allowed(c, s, b, h, i, j))
                        continue;
                    long double ab = 0;
                    for (int64_t d = 0; d < Dk; ++d)
                        ab += fabsl(getl(&s->q.t, dt, b, h, i, d) *
                                    getl(&s->k.t, dt, b, h / g, j, d));
                    long double bv =
                        c->use_bias ? getl(&s->bias.t, dt, b, h, i, j) : 0;
                    L = fmaxl(L, scale * ab + fabsl(bv));
                    if (c->x.use_alibi) {
                        int64_t Lb = c->x.use_kvlens ? c->x.kv_lens[b] : Tk;
                        int64_t dd = c->x.causal == SDPA_CAUSAL_TOP_LEFT
                                         ? i
                                         : i + Lb - Tq;
                        A = fmaxl(A, fabsl((long double)c->x.slopes[h] *
                                           (long double)(j - dd)));
                    }
                    for (int64_t d = 0; d < Dv; ++d)
                        Vmax = fmaxl(Vmax,
                                     fabsl(getl(&s->v.t, dt, b, h / g, j, d)));
                }
    const long double Tk1 = (long double)Tk + (c->x.use_sinks ? 1 : 0);
    const long double e_s = ((long double)Dk + 4) * eps * L +
                            4 * eps * (1 + L + A + S + cap) + 2 * eps * A;
    const long double d_o =
        Vmax * (2 * e_s + (Tk1 + 16) * eps + ((long double)Tk + 4) * eps);

    long double *u = zalloc((size_t)Tk), *z = zalloc((size_t)Tk);
    long double *P = zalloc((size_t)Tk), *dP = zalloc((size_t)Tk);
    long double *o = zalloc((size_t)Dv);
    unsigned char *ok = calloc((size_t)Tk, 1);
    if (!ok)
        abort();
    for (int64_t b = 0; b < N; ++b) {
        const int64_t Lb = c->x.use_kvlens ? c->x.kv_lens[b] : Tk;
        for (int64_t h = 0; h < Hq; ++h) {
            const int64_t hk = h / g;
            for (int64_t i = 0; i < Tq; ++i) {
                const int64_t dd =
                    c->x.causal == SDPA_CAUSAL_TOP_LEFT ? i : i + Lb - Tq;
                long double m = -INFINITY;
                int any = 0;
                for (int64_t j = 0; j < Tk; ++j) {
                    ok[j] = (unsigned char)allowed(c, s, b, h, i, j);
                    if (!ok[j])
                        continue;
                    long double dot =
                        row_dot(&s->q.t, &s->k.t, dt, b, h, i, hk, j, Dk);
                    u[j] = scale * dot;
                    long double x = cap > 0 ? cap * tanhl(u[j] / cap) : u[j];
                    if (c->use_bias)
                        x += getl(&s->bias.t, dt, b, h, i, j);
                    if (c->x.use_alibi)
                        x -= (long double)c->x.slopes[h] *
                             (long double)llabs((long long)(j - dd));
                    z[j] = x;
                    m = any ? fmaxl(m, x) : x;
                    any = 1;
                }
                const long double sigma =
                    c->x.use_sinks ? (long double)c->x.sinks[h] : 0;
                if (!any && !c->x.use_sinks) {
                    r->any_empty = 1;
                    continue; /* an empty row: no gradient */
                }
                if (c->x.use_sinks)
                    m = any ? fmaxl(m, sigma) : sigma;
                long double sum = c->x.use_sinks ? expl(sigma - m) : 0;
                for (int64_t j = 0; j < Tk; ++j)
                    if (ok[j])
                        sum += expl(z[j] - m);
                const long double lse = m + logl(sum);
                for (int64_t d = 0; d < Dv; ++d)
                    o[d] = 0;
                for (int64_t j = 0; j < Tk; ++j) {
                    P[j] = ok[j] ? expl(z[j] - lse) : 0;
                    for (int64_t d = 0; ok[j] && d < Dv; ++d)
                        o[d] += P[j] * getl(&s->v.t, dt, b, hk, j, d);
                }
                long double D = 0, G = 0;
                for (int64_t d = 0; d < Dv; ++d) {
                    long double gd = getl(&s->dout.t, dt, b, h, i, d);
                    D += gd * o[d];
                    G += fabsl(gd);
                }
                const long double B = 2 * G * Vmax;
                const long double e_l =
                    e_s + (Tk1 + 16) * eps + eps * fabsl(lse);
                const long double e_p = e_s + e_l + 16 * eps;
                const long double e_D =
                    ((long double)Dv + 4) * eps * G * Vmax + G * d_o;
                const long double E = e_p * B +
                                      ((long double)Dv + 4) * eps * G * Vmax +
                                      e_D + 3 * eps * B;
                const long double E2 =
                    E + (cap > 0 ? (21 * eps + e_s / cap) * B : 0);
                if (c->x.use_sinks) {
                    long double ps = expl(sigma - lse);
                    r->dsinks[h] -= ps * D;
                    r->ts[h] +=
                        ps * (e_l * fabsl(D) + e_D) +
                        ((long double)(N * Tq) + 4) * eps * fabsl(ps * D);
                }
                for (int64_t j = 0; j < Tk; ++j) {
                    if (!ok[j])
                        continue;
                    long double dpj =
                        row_dot(&s->dout.t, &s->v.t, dt, b, h, i, hk, j, Dv);
                    dP[j] = dpj;
                    const long double dz = P[j] * (dpj - D);
                    long double f = 1;
                    if (cap > 0) {
                        long double t = tanhl(u[j] / cap);
                        f = 1 - t * t;
                    }
                    const long double ds = dz * f;
                    const long double err_ds = P[j] * E2 + tiny * B;
                    size_t qa = (size_t)(((b * Hq + h) * Tq + i) * Dk);
                    size_t ka = kv_at(c, r, b, hk, j);
                    for (int64_t d = 0; d < Dk; ++d) {
                        long double kd = getl(&s->k.t, dt, b, hk, j, d);
                        long double qd = getl(&s->q.t, dt, b, h, i, d);
                        r->dq[qa + (size_t)d] += scale * ds * kd;
                        r->tq[qa + (size_t)d] += scale * err_ds * fabsl(kd) +
                                                 ((long double)Tk + 4) * eps *
                                                     scale * fabsl(ds * kd);
                        r->dk[ka * (size_t)Dk + (size_t)d] += scale * ds * qd;
                        r->tk[ka * (size_t)Dk + (size_t)d] +=
                            scale * err_ds * fabsl(qd) +
                            ((long double)r->R_kv + 4) * eps * scale *
                                fabsl(ds * qd);
                    }
                    for (int64_t d = 0; d < Dv; ++d) {
                        long double gd = getl(&s->dout.t, dt, b, h, i, d);
                        r->dv[ka * (size_t)Dv + (size_t)d] += P[j] * gd;
                        r->tv[ka * (size_t)Dv + (size_t)d] +=
                            (P[j] * e_p + tiny) * fabsl(gd) +
                            ((long double)r->R_kv + 4) * eps * P[j] * fabsl(gd);
                    }
                    if (c->use_bias) {
                        size_t ba = dbias_at(s, b, h, i, j);
                        r->dbias[ba] += dz;
                        r->tb[ba] +=
                            P[j] * E + tiny * B +
                            ((long double)r->R_bias + 4) * eps * fabsl(dz);
                    }
                }
            }
        }
    }
    free(u);
    free(z);
    free(P);
    free(dP);
    free(o);
    free(ok);
}

/* ---- Comparison. ------------------------------------------------------- */
static double g_ratio[5]; /* largest error / tolerance: dq dk dv dbias dsinks */

static int check_one(const char *what, int which, double got, long double ref,
                     long double bound, long double eps, int64_t a, int64_t b,
                     int64_t c, int64_t d)
{
    long double tol = 2 * (bound + 2 * eps * fabsl(ref));
    long double e = fabsl((long double)got - ref);
    if (!(e <= tol)) {
        print_message("  MISMATCH %s[%lld,%lld,%lld,%lld] got %.17g ref "
                      "%.17Lg tol %.3Lg\n",
                      what, (long long)a, (long long)b, (long long)c,
                      (long long)d, got, ref, tol);
        return 1;
    }
    if (tol > 0 && (double)(e / tol) > g_ratio[which])
        g_ratio[which] = (double)(e / tol);
    return 0;
}

static int compare(const cfg *c, const inst *s, const bref *r)
{
    const long double eps =
        c->dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    int bad = 0;
    for (int64_t b = 0; b < c->N && !bad; ++b)
        for (int64_t h = 0; h < c->Hq && !bad; ++h)
            for (int64_t i = 0; i < c->Tq && !bad; ++i)
                for (int64_t d = 0; d < c->Dk && !bad; ++d) {
                    size_t x =
                        (size_t)(((b * c->Hq + h) * c->Tq + i) * c->Dk + d);
                    bad = check_one("dq", 0, tget(&s->dq, b, h, i, d), r->dq[x],
                                    r->tq[x], eps, b, h, i, d);
                }
    for (int64_t b = 0; b < r->nkv && !bad; ++b)
        for (int64_t hk = 0; hk < c->Hkv && !bad; ++hk)
            for (int64_t j = 0; j < c->Tk && !bad; ++j) {
                size_t ka = kv_at(c, r, b, hk, j);
                for (int64_t d = 0; d < c->Dk && !bad; ++d)
                    bad = check_one("dk", 1, tget(&s->dk, b, hk, j, d),
                                    r->dk[ka * (size_t)c->Dk + (size_t)d],
                                    r->tk[ka * (size_t)c->Dk + (size_t)d], eps,
                                    b, hk, j, d);
                for (int64_t d = 0; d < c->Dv && !bad; ++d)
                    bad = check_one("dv", 2, tget(&s->dv, b, hk, j, d),
                                    r->dv[ka * (size_t)c->Dv + (size_t)d],
                                    r->tv[ka * (size_t)c->Dv + (size_t)d], eps,
                                    b, hk, j, d);
            }
    if (c->want_dbias) {
        const int64_t *e = s->dbias_shape;
        for (int64_t b = 0; b < e[0] && !bad; ++b)
            for (int64_t h = 0; h < e[1] && !bad; ++h)
                for (int64_t i = 0; i < e[2] && !bad; ++i)
                    for (int64_t j = 0; j < e[3] && !bad; ++j) {
                        size_t x = dbias_at(s, b, h, i, j);
                        bad = check_one("dbias", 3, tget(&s->dbias, b, h, i, j),
                                        r->dbias[x], r->tb[x], eps, b, h, i, j);
                    }
    }
    for (int64_t h = 0; c->want_dsinks && h < c->Hq && !bad; ++h)
        bad = check_one("dsinks", 4, s->dsinks[1 + h], r->dsinks[h], r->ts[h],
                        eps, 0, h, 0, 0);
    if (!bad && !grads_untouched(s, 0)) {
        print_message("  padding of a gradient output was written\n");
        bad = 1;
    }
    return bad;
}

static void set_common(sdpa_ctx *ctx, const cfg *c)
{
    tp_set_empty_rows(ctx, c->empty_zero);
    tp_set(ctx, SDPA_OPT_NUM_THREADS, c->threads);
    tp_set(ctx, SDPA_OPT_BLOCK_Q, c->block_q);
    tp_set(ctx, SDPA_OPT_BLOCK_K, c->block_k);
}

typedef struct stats {
    long configs, runs, errors_expected, failures, kernel_skips;
    long causal[3], kvlens, mask, bias, dbias_bcast, softcap, window, alibi,
        sinks, gqa, kv_bcast, empty_rows;
} stats;

static void run_config(sdpa_ctx *ctx, const cfg *c, stats *st)
{
    inst s;
    inst_make(&s, c);
    bref r;
    memset(&r, 0, sizeof r);
    mark_seen(c, &s, &r);
    bref_compute(c, &s, &r);
    const int expect_error = r.any_empty && !c->empty_zero;
    st->configs++;
    st->errors_expected += expect_error;
    st->causal[c->x.causal]++;
    st->kvlens += c->x.use_kvlens;
    st->mask += c->use_mask;
    st->bias += c->use_bias;
    st->dbias_bcast +=
        c->want_dbias && (s.dbias_shape[0] * s.dbias_shape[1] *
                              s.dbias_shape[2] * s.dbias_shape[3] <
                          c->N * c->Hq * c->Tq * c->Tk);
    st->softcap += c->x.softcap > 0;
    st->window += c->x.use_window;
    st->alibi += c->x.use_alibi;
    st->sinks += c->x.use_sinks;
    st->gqa += c->Hkv < c->Hq;
    st->kv_bcast += c->kv_bcast;
    st->empty_rows += r.any_empty && c->empty_zero;
    set_common(ctx, c);

    int failed = 0;
    for (int ki = 0; ki < TEST_KERNELS && !failed; ++ki) {
        if (!tp_use_kernel(ctx, ki)) {
            st->kernel_skips++;
            continue;
        }
        int rc = sdpa_forward(ctx, &s.fa);
        if (expect_error) {
            assert_int_equal(rc, SDPA_ERR_FULLY_MASKED_ROW);
            /* the backward refuses likewise, before writing anything */
            memset(s.out.mem, 0, s.out.elems * s.out.esize);
            memset(s.lse.mem, 0, s.lse.elems * s.lse.esize);
        } else if (rc != SDPA_OK) {
            print_message("  forward failed: %s\n", sdpa_ctx_last_error(ctx));
            failed = 1;
            break;
        }
        reset_grads(&s);
        rc = sdpa_backward(ctx, &s.ba);
        st->runs++;
        if (expect_error) {
            if (rc != SDPA_ERR_FULLY_MASKED_ROW || !grads_untouched(&s, 1)) {
                print_message("  expected FULLY_MASKED_ROW, untouched: got "
                              "%s (%s)\n",
                              sdpa_status_string(rc), sdpa_ctx_last_error(ctx));
                failed = 1;
            }
            continue;
        }
        if (rc != SDPA_OK) {
            print_message("  backward failed: %s: %s (kernel %s)\n",
                          sdpa_status_string(rc), sdpa_ctx_last_error(ctx),
                          kernel_name(test_kernels[ki]));
            failed = 1;
            continue;
        }
        if (compare(c, &s, &r)) {
            print_message("  (kernel %s)\n", kernel_name(test_kernels[ki]));
            failed = 1;
        }
    }
    if (failed) {
        if (st->failures < 20)
            cfg_print(c);
        st->failures++;
    }
    bref_free(&r);
    inst_free(&s);
}

static void run_many(int dtype, uint64_t first, long count)
{
    sdpa_ctx *ctx = tp_ctx(0);
    stats st;
    memset(&st, 0, sizeof st);
    memset(g_ratio, 0, sizeof g_ratio);
    for (long i = 0; i < count; ++i) {
        cfg c;
        cfg_random(&c, first + (uint64_t)i, dtype);
        run_config(ctx, &c, &st);
    }
    print_message("  %s: %ld configs, %ld runs (%ld expecting "
                  "FULLY_MASKED_ROW, %ld with empty rows as zeros), kernel "
                  "skips %ld, failures %ld\n",
                  dtype == SDPA_FLOAT32 ? "float" : "double", st.configs,
                  st.runs, st.errors_expected, st.empty_rows, st.kernel_skips,
                  st.failures);
    print_message("  features: causal none/top-left/bottom-right "
                  "%ld/%ld/%ld, kv_lens %ld, mask %ld, bias %ld (dbias "
                  "broadcast %ld), soft-cap %ld, window %ld, ALiBi %ld, "
                  "sinks %ld, GQA %ld, K/V broadcast %ld\n",
                  st.causal[0], st.causal[1], st.causal[2], st.kvlens, st.mask,
                  st.bias, st.dbias_bcast, st.softcap, st.window, st.alibi,
                  st.sinks, st.gqa, st.kv_bcast);
    print_message("  largest error/tolerance: dq %.3g dk %.3g dv %.3g dbias "
                  "%.3g dsinks %.3g\n",
                  g_ratio[0], g_ratio[1], g_ratio[2], g_ratio[3], g_ratio[4]);
    sdpa_ctx_destroy(ctx);
    assert_int_equal(st.failures, 0);
}

static void test_random(void **state)
{
    run_many(*(int *)*state, 1, 250);
}

/* The shape of a hand-made configuration. */
static void cfg_shape(cfg *c, int64_t N, int64_t Hq, int64_t Hkv, int64_t Tq,
                      int64_t Tk, int64_t Dk, int64_t Dv)
{
    c->N = N;
    c->Hq = Hq;
    c->Hkv = Hkv;
    c->Tq = Tq;
    c->Tk = Tk;
    c->Dk = Dk;
    c->Dv = Dv;
}

/* ---- Finite differences (float64). ------------------------------------- */

/* A fixed small case with every feature at once: GQA, K and V shared by
 * the batch (extent 1), bottom-right causal with a window, kv_lens, a mask,
 * a bias broadcast over N and the heads (so dbias sums), soft-cap, ALiBi,
 * sinks. */
static void fd_case(cfg *c)
{
    memset(c, 0, sizeof *c);
    c->seed = 777;
    c->dtype = SDPA_FLOAT64;
    cfg_shape(c, 2, 4, 2, 5, 8, 3, 4);
    c->kv_bcast = 1; /* seed & 2 == 0: extent 1 */
    c->use_mask = 1;
    c->mask_p = 0.15;
    c->use_bias = 1;
    c->want_dbias = 1;
    c->bias_b[0] = 2;
    c->bias_b[1] = 3;
    tp_every_option(&c->x, 4);
    c->x.use_kvlens = 1;
    c->x.kv_lens[0] = 8;
    c->x.kv_lens[1] = 6;
    c->amp = 0.9;
    c->empty_zero = 1;
    c->threads = 1;
    c->want_dsinks = 1;
}

static void test_finite_differences(void **state)
{
    (void)state;
    cfg c;
    fd_case(&c);
    inst s;
    inst_make(&s, &c);
    sdpa_ctx *ctx = tp_ctx(0);
    set_common(ctx, &c);
    tp_fd_point at = {ctx, &s.fa, &s.dout, &s.out};
    /* the analytic gradients at the point */
    assert_true(isfinite(tp_fd_loss(&at)) != 0);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
    tbuf dq = s.dq, dk = s.dk, dv = s.dv, db = s.dbias;
    double dsinks[MAX_H];
    memcpy(dsinks, s.dsinks + 1, sizeof(double) * (size_t)c.Hq);
    int bad = 0;
    double worst = 0;
    long checked = 0;
    for (int64_t b = 0; b < c.N; ++b)
        for (int64_t h = 0; h < c.Hq; ++h)
            for (int64_t i = 0; i < c.Tq; ++i)
                for (int64_t d = 0; d < c.Dk; ++d, ++checked)
                    bad |= tp_fd_check(tp_fd_loss, &at, &s.q, NULL, b, h, i, d,
                                       tget(&dq, b, h, i, d), "q", &worst);
    for (int64_t h = 0; h < c.Hkv; ++h)
        for (int64_t j = 0; j < c.Tk; ++j) {
            for (int64_t d = 0; d < c.Dk; ++d, ++checked)
                bad |= tp_fd_check(tp_fd_loss, &at, &s.k, NULL, 0, h, j, d,
                                   tget(&dk, 0, h, j, d), "k", &worst);
            for (int64_t d = 0; d < c.Dv; ++d, ++checked)
                bad |= tp_fd_check(tp_fd_loss, &at, &s.v, NULL, 0, h, j, d,
                                   tget(&dv, 0, h, j, d), "v", &worst);
        }
    for (int64_t i = 0; i < c.Tq; ++i)
        for (int64_t j = 0; j < c.Tk; ++j, ++checked)
            bad |= tp_fd_check(tp_fd_loss, &at, &s.bias, NULL, 0, 0, i, j,
                               tget(&db, 0, 0, i, j), "bias", &worst);
    for (int64_t h = 0; h < c.Hq; ++h, ++checked)
        bad |= tp_fd_check(tp_fd_loss, &at, NULL, &c.x.sinks[h], 0, h, 0, 0,
                           dsinks[h], "sinks", &worst);
    print_message("  %ld partial derivatives, largest error/tolerance %.3g\n",
                  checked, worst);
    sdpa_ctx_destroy(ctx);
    inst_free(&s);
    assert_false(bad);
}

/* ---- Threads: bitwise identical results. ------------------------------- */
static void threads_case(cfg *c, uint64_t seed, int dtype, int variant)
{
    cfg_random(c, seed, dtype);
    cfg_shape(c, 3, 6, 3, 37, 45, 6, 5);
    double se = c->x.scale == 0.0 ? 1.0 / sqrt(6.0) : c->x.scale;
    c->amp = sqrt(4.0 / (se * 6.0));
    c->x.use_kvlens = 1;
    c->x.kv_lens[0] = 45;
    c->x.kv_lens[1] = 30;
    c->x.kv_lens[2] = 41;
    c->empty_zero = 1;
    c->block_q = 8;
    c->block_k = 16;
    c->use_bias = c->want_dbias = 1;
    c->kv_bcast = variant == 1;
    for (int d = 0; d < 4; ++d)
        c->bias_b[d] = 0;
    if (variant == 2) /* dbias summed over heads and rows */
        c->bias_b[1] = c->bias_b[2] = 3;
    if (variant >= 3) {
        /* One (batch item, KV head) pair, a GQA group of 2: its key
         * blocks spread over the workers and add to dq in turn
         * (src/backward/dq_order.h); dbias full (3), summed over the rows
         * (4), summed over the keys (5: one item takes every block) */
        c->N = 1;
        c->Hq = 2;
        c->Hkv = 1;
        c->x.kv_lens[0] = 40;
        if (variant == 4)
            c->bias_b[2] = 3;
        if (variant == 5)
            c->bias_b[3] = 3;
    }
    c->x.use_sinks = c->want_dsinks = 1;
}

static void test_threads_bitwise(void **state)
{
    (void)state;
    sdpa_ctx *ctx = tp_ctx(0);
    for (int dtype = SDPA_FLOAT32; dtype <= SDPA_FLOAT64; ++dtype)
        for (int variant = 0; variant < 6; ++variant) {
            cfg c;
            threads_case(&c, 4242 + (uint64_t)variant, dtype, variant);
            inst s;
            inst_make(&s, &c);
            c.threads = 1;
            set_common(ctx, &c);
            assert_int_equal(sdpa_forward(ctx, &s.fa), SDPA_OK);
            void *first[4] = {NULL};
            tbuf *g[4] = {&s.dq, &s.dk, &s.dv, &s.dbias};
            double sinks1[MAX_H];
            for (int threads = 1; threads <= 3; ++threads) {
                tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
                reset_grads(&s);
                assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
                for (int x = 0; x < 4; ++x) {
                    size_t bytes = g[x]->elems * g[x]->esize;
                    if (threads == 1) {
                        first[x] = malloc(bytes);
                        assert_non_null(first[x]);
                        memcpy(first[x], g[x]->mem, bytes);
                    } else {
                        assert_memory_equal(first[x], g[x]->mem, bytes);
                    }
                }
                if (threads == 1)
                    memcpy(sinks1, s.dsinks + 1, sizeof(double) * 6);
                else
                    assert_memory_equal(sinks1, s.dsinks + 1,
                                        sizeof(double) * 6);
            }
            /* a caller's parallel-for: 3 threads, and one thread calling
             * the tasks last to first (the key blocks' turns must not
             * depend on the order of the task calls) */
            for (int order = 0; order < 2; ++order) {
                sdpa_ctx *pf = tp_ctx(0);
                set_common(pf, &c);
                test_pool tp = {.workers = order ? 1 : 3, .reverse = order};
                assert_int_equal(
                    sdpa_ctx_set_parallel_for(pf, test_parallel_for, &tp, 3),
                    SDPA_OK);
                reset_grads(&s);
                assert_int_equal(sdpa_backward(pf, &s.ba), SDPA_OK);
                /* variant 5 is one item: run on the caller's thread */
                assert_int_equal(atomic_load(&tp.calls), variant != 5);
                for (int x = 0; x < 4; ++x)
                    assert_memory_equal(first[x], g[x]->mem,
                                        g[x]->elems * g[x]->esize);
                sdpa_ctx_destroy(pf);
            }
            for (int x = 0; x < 4; ++x)
                free(first[x]);
            if (variant >= 3) {
                /* of two failures, every thread count reports the same
                 * one (the lowest item's first) */
                tset(&s.lse, 0, 1, 3, 0, NAN);
                tset(&s.lse, 0, 0, 33, 0, NAN);
                char once[256] = "";
                for (int threads = 1; threads <= 3; ++threads) {
                    tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
                    assert_int_equal(sdpa_backward(ctx, &s.ba),
                                     SDPA_ERR_NONFINITE);
                    if (threads == 1)
                        snprintf(once, sizeof once, "%s",
                                 sdpa_ctx_last_error(ctx));
                    else
                        assert_string_equal(once, sdpa_ctx_last_error(ctx));
                }
                assert_non_null(strstr(once, "batch 0, head "));
            }
            inst_free(&s);
        }
    sdpa_ctx_destroy(ctx);
}

/* ---- A repeated call allocates nothing. -------------------------------- */
static void test_no_allocation_when_repeated(void **state)
{
    (void)state;
    static counting_alloc ca;
    for (int threads = 1; threads <= 3; threads += 2) {
        sdpa_allocator al = ca_start(&ca, -1);
        sdpa_ctx *ctx = NULL;
        assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
        cfg c;
        threads_case(&c, 99, SDPA_FLOAT32, 0);
        c.threads = threads;
        c.x.softcap = 5;
        c.use_mask = 1;
        c.block_q = c.block_k = 0;
        inst s;
        inst_make(&s, &c);
        set_common(ctx, &c);
        /* a training loop: forward and backward share the scratch */
        assert_int_equal(tp_training_allocs(ctx, &ca, &s.fa, &s.ba), 0);
        inst_free(&s);
        sdpa_ctx_destroy(ctx);
        assert_int_equal(ca.live_bytes, 0);
        assert_int_equal(ca.bad_free, 0);
    }
}

/* ---- Out of memory: the outputs untouched. ---------------------------- */
/* On the caller's parallel-for, one pair's key blocks over 74 query tiles
 * (their turn counters and the claims reserved before anything is
 * written): every allocation refused in turn gives SDPA_ERR_OUT_OF_MEMORY
 * with the outputs as they were, until the call succeeds with the bits of
 * a plain context. */
static void test_out_of_memory_caller_threads(void **state)
{
    (void)state;
    static counting_alloc ca;
    cfg c;
    threads_case(&c, 4245, SDPA_FLOAT32, 3);
    c.block_q = 1;
    inst s;
    inst_make(&s, &c);
    sdpa_ctx *plain = tp_ctx(0);
    set_common(plain, &c);
    assert_int_equal(sdpa_forward(plain, &s.fa), SDPA_OK);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(plain, &s.ba), SDPA_OK);
    sdpa_ctx_destroy(plain);
    const size_t bytes = s.dk.elems * s.dk.esize;
    void *want = malloc(bytes);
    assert_non_null(want);
    memcpy(want, s.dk.mem, bytes);
    long refused = 0;
    for (long at = 0;; ++at) {
        sdpa_allocator al = ca_start(&ca, -1);
        sdpa_ctx *ctx = NULL;
        assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
        set_common(ctx, &c);
        test_pool tp = {.workers = 3};
        assert_int_equal(
            sdpa_ctx_set_parallel_for(ctx, test_parallel_for, &tp, 3), SDPA_OK);
        ca.fail_at = ca.allocs + ca.failures + at;
        reset_grads(&s);
        int rc = sdpa_backward(ctx, &s.ba);
        sdpa_ctx_destroy(ctx);
        if (rc == SDPA_OK) {
            assert_memory_equal(want, s.dk.mem, bytes);
            break;
        }
        assert_int_equal(rc, SDPA_ERR_OUT_OF_MEMORY);
        assert_true(grads_untouched(&s, 1));
        refused++;
    }
    assert_true(refused >= 4); /* scratch of 3 workers, the claims */
    free(want);
    inst_free(&s);
}

/* ---- Errors: the status, the message, the outputs untouched. ----------- */
static void expect_error(sdpa_ctx *ctx, inst *s, const sdpa_backward_args *a,
                         int status, const char *label)
{
    reset_grads(s);
    int rc = sdpa_backward(ctx, a);
    if (rc != status)
        print_message("  %s: expected %s, got %s (%s)\n", label,
                      sdpa_status_string(status), sdpa_status_string(rc),
                      sdpa_ctx_last_error(ctx));
    assert_int_equal(rc, status);
    assert_true(strncmp(sdpa_ctx_last_error(ctx), "sdpa_backward", 13) == 0);
    if (!grads_untouched(s, 1))
        print_message("  %s: outputs written\n", label);
    assert_true(grads_untouched(s, 1));
}

static void test_errors(void **state)
{
    (void)state;
    cfg c;
    threads_case(&c, 7, SDPA_FLOAT64, 0);
    c.use_mask = 0;
    c.x.use_window = 0;
    c.kv_bcast = 0;
    inst s;
    inst_make(&s, &c);
    sdpa_ctx *ctx = tp_ctx(0);
    set_common(ctx, &c);
    assert_int_equal(sdpa_forward(ctx, &s.fa), SDPA_OK);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
    assert_string_equal(sdpa_ctx_last_error(ctx), "");

    assert_int_equal(sdpa_backward(NULL, &s.ba), SDPA_ERR_NULL_POINTER);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(ctx, NULL), SDPA_ERR_NULL_POINTER);
    assert_true(grads_untouched(&s, 1));

    sdpa_backward_args a;
    const sdpa_backward_args ok = s.ba;
#define CASE(status, label, ...)                                               \
    do {                                                                       \
        a = ok;                                                                \
        __VA_ARGS__;                                                           \
        expect_error(ctx, &s, &a, status, label);                              \
    } while (0)
    CASE(SDPA_ERR_STRUCT_SIZE, "struct_size", a.struct_size = 951);
    CASE(SDPA_ERR_NULL_POINTER, "lse", a.lse.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "dout", a.dout.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "dq", a.dq.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "dk", a.dk.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "dv", a.dv.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "q", a.q.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "dbias without bias", a.bias.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "dsinks without sinks", a.sinks = NULL);
    CASE(SDPA_ERR_BAD_DTYPE, "dtype", a.dtype = 9);
    CASE(SDPA_ERR_BAD_DTYPE, "kv_dtype", a.kv_dtype = 9);
    CASE(SDPA_ERR_BAD_DTYPE, "grad_dtype half",
         a.grad_dtype = SDPA_FLOAT16); /* 0 or SDPA_FLOAT32 only */
    CASE(SDPA_ERR_BAD_DTYPE, "grad_dtype float64", a.grad_dtype = SDPA_FLOAT64);
    CASE(SDPA_ERR_BAD_SCALE, "scale", a.scale = -1);
    CASE(SDPA_ERR_BAD_SOFTCAP, "softcap", a.softcap = NAN);
    CASE(SDPA_ERR_BAD_CAUSAL, "causal", a.causal = 7);
    CASE(SDPA_ERR_BAD_WINDOW, "window", a.window_left = 3);
    CASE(SDPA_ERR_BAD_SINK, "sink", a.sinks = (const double[6]){0, NAN});
    CASE(SDPA_ERR_SHAPE_MISMATCH, "dq shape", a.dq.shape[2] = 36);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "dk shape", a.dk.shape[3] = 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "dout shape", a.dout.shape[3] += 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "dv over N", a.dv.shape[0] = 1);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "lse shape", a.lse.shape[2] = 2);
    CASE(SDPA_ERR_BAD_DIM, "dk dim", a.dk.shape[1] = 0);
    CASE(SDPA_ERR_BAD_STRIDE, "dq inner", a.dq.stride[3] = 2);
    CASE(SDPA_ERR_BAD_STRIDE, "dq rows", a.dq.stride[2] = 1);
    CASE(SDPA_ERR_BAD_STRIDE, "dk negative", a.dk.stride[0] = -1);
    CASE(SDPA_ERR_BAD_STRIDE, "dv overlaps itself", a.dv.stride[1] = 0);
    CASE(SDPA_ERR_OVERLAP, "dq on q", a.dq.data = a.q.data);
    CASE(SDPA_ERR_OVERLAP, "dk on dv", a.dk.data = a.dv.data);
    CASE(SDPA_ERR_OVERLAP, "dbias on bias", a.dbias.data = a.bias.data);
    CASE(SDPA_ERR_OVERLAP, "dsinks on sinks",
         a.dsinks = (double *)(uintptr_t)a.sinks);
    CASE(SDPA_ERR_OVERLAP, "dv on dout", a.dv.data = a.dout.data);
    CASE(SDPA_ERR_BAD_KV_LEN, "kv_lens",
         a.kv_lens = (const int64_t[3]){1, 2, 99});
    {
        /* dbias must sum over what the bias broadcasts: a full-size dbias
         * for a head-broadcast bias is refused */
        tbuf full;
        tbuf_make(&full, SDPA_FLOAT64, c.N, c.Hq, c.Tq, c.Tk, LAYOUT_BHTD, 0);
        a = ok;
        a.bias.shape[1] = 1;
        a.dbias = full.t;
        expect_error(ctx, &s, &a, SDPA_ERR_SHAPE_MISMATCH, "dbias broadcast");
        tbuf_free(&full);
    }
    {
        /* a tail this library does not know, not zero */
        TP_GROWN(sdpa_backward_args, grown, ok);
        expect_error(ctx, &s, &grown.args, SDPA_ERR_STRUCT_TAIL, "tail");
        grown.tail = 0;
        reset_grads(&s);
        assert_int_equal(sdpa_backward(ctx, &grown.args), SDPA_OK);
    }
    /* an empty row under the error policy */
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ERROR);
    CASE(SDPA_ERR_FULLY_MASKED_ROW, "empty row",
         (a.kv_lens = (const int64_t[3]){0, 2, 3}, a.sinks = NULL,
          a.dsinks = NULL));
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
#undef CASE
    /* A NaN lse is found during the computation. */
    tset(&s.lse, 1, 2, 36, 0, NAN);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_ERR_NONFINITE);
    assert_non_null(
        strstr(sdpa_ctx_last_error(ctx), "batch 1, head 2, query row 36"));
    sdpa_ctx_destroy(ctx);
    inst_free(&s);
}

/* A GPT-2-style trainer's fused buffers: q, k and v interleaved in one
 * [N, T, 3, H, D] buffer, and dq, dk and dv in another of the same layout.
 * They share no element, so the backward takes them (the element-wise
 * overlap rule), with the bits of three separate gradient buffers. */
static void test_fused_qkv_gradients(void **state)
{
    (void)state;
    enum { N = 2, T = 7, H = 2, D = 4, C = H * D, ROW = 3 * C };
    float qkv[N * T * ROW], out[N * T * C], lse[N * H * T], dout[N * T * C];
    float dqkv[N * T * ROW], dq[N * H * T * D], dk[N * H * T * D],
        dv[N * H * T * D];
    rng r = {99};
    for (size_t i = 0; i < sizeof qkv / sizeof qkv[0]; i++)
        qkv[i] = (float)rng_sym(&r, 1);
    for (size_t i = 0; i < sizeof dout / sizeof dout[0]; i++)
        dout[i] = (float)rng_sym(&r, 1);
    /* head h of token t of part p (0 q, 1 k, 2 v) at t·ROW + p·C + h·D */
    const int64_t strides[4] = {T * ROW, D, ROW, 1};
    sdpa_tensor part[3], grad[3];
    for (int p = 0; p < 3; p++) {
        part[p] = (sdpa_tensor){qkv + p * C, {N, H, T, D}, {0}};
        grad[p] = (sdpa_tensor){dqkv + p * C, {N, H, T, D}, {0}};
        memcpy(part[p].stride, strides, sizeof strides);
        memcpy(grad[p].stride, strides, sizeof strides);
    }
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.dtype = SDPA_FLOAT32;
    f.causal = SDPA_CAUSAL_TOP_LEFT;
    f.q = part[0];
    f.k = part[1];
    f.v = part[2];
    f.out = sdpa_tensor_bthd(out, N, H, T, D);
    f.lse = sdpa_tensor_bhtd(lse, N, H, T, 1);
    assert_int_equal(sdpa_forward(ctx, &f), SDPA_OK);
    sdpa_backward_args b = tp_backward_of(&f);
    b.dout = sdpa_tensor_bthd(dout, N, H, T, D);
    b.dq = sdpa_tensor_bhtd(dq, N, H, T, D);
    b.dk = sdpa_tensor_bhtd(dk, N, H, T, D);
    b.dv = sdpa_tensor_bhtd(dv, N, H, T, D);
    assert_int_equal(sdpa_backward(ctx, &b), SDPA_OK);
    b.dq = grad[0];
    b.dk = grad[1];
    b.dv = grad[2];
    memset(dqkv, 0, sizeof dqkv);
    int status = sdpa_backward(ctx, &b);
    if (status != SDPA_OK)
        fail_msg("fused gradients: %d (%s)", status, sdpa_ctx_last_error(ctx));
    const float *sep[3] = {dq, dk, dv};
    for (int p = 0; p < 3; p++)
        for (int64_t n = 0; n < N; n++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t t = 0; t < T; t++)
                    assert_memory_equal(
                        dqkv + n * T * ROW + t * ROW + p * C + h * D,
                        sep[p] + ((n * H + h) * T + t) * D, D * sizeof(float));
    /* one row further, dk would meet dq's elements: refused */
    b.dk.data = dqkv + C - D;
    assert_int_equal(sdpa_backward(ctx, &b), SDPA_ERR_OVERLAP);
    sdpa_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TP_BOTH_NAMED(test_random, NULL, NULL),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_no_allocation_when_repeated),
        cmocka_unit_test(test_out_of_memory_caller_threads),
        cmocka_unit_test(test_fused_qkv_gradients),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
