/*
 * sdpa_mha_backward (public API): the gradients of the multi-head layer.
 *
 *  - against a long-double reference: the layer's loss L = Σ dy ⊙ y
 *    computed in long double from the parameters (written here, sharing
 *    nothing with the library), differentiated by central differences in
 *    long double (h = 2^-20: truncation ~1e-12, rounding ~1e-13), for
 *    float64 (tolerance 1e-8 of the largest gradient) and float32 (3e-4);
 *  - against central differences of sdpa_mha_forward itself in float64;
 *  - on small random shapes and named ones: self- and cross-attention,
 *    GQA, RoPE (both styles), sinusoidal positions with an offset, causal
 *    top-left and bottom-right, kv_lens with empty rows, biases or none,
 *    a scale of 1, padded and sequence-first row layouts;
 *  - outputs asked for alone equal the full call's, bitwise; two worker
 *    threads give the same bits; padding of dx is never written;
 *  - a repeated call allocates nothing; every error leaves every output
 *    untouched and names sdpa_mha_backward.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "sdpa.h"
#include "problem.h"
#include "testutil.h"

/* The parameters, one flat vector θ in segments. */
enum { S_XQ, S_XKV, S_WQ, S_WK, S_WV, S_WO, S_BQ, S_BK, S_BV, S_BO, SEGS };
static const char *const seg_name[SEGS] = {"dx_q", "dx_kv", "dw_q", "dw_k",
                                           "dw_v", "dw_o",  "db_q", "db_k",
                                           "db_v", "db_o"};

enum { ROWS_CONTIGUOUS, ROWS_PADDED, ROWS_SEQ_FIRST };

typedef struct bcase {
    int64_t n, tq, tk, e, hq, hkv, dk, dv;
    bool self, biases;
    int positions, causal, layout;
    int64_t offset;
    double scale;
    int64_t *kv_lens; /* cross-attention only, or NULL */
    size_t off[SEGS], cnt[SEGS], total;
    long double *theta; /* total */
    long double *dy;    /* n · tq · e */
} bcase;

static void case_layout(bcase *c)
{
    const int64_t wq = c->hq * c->dk, wk = c->hkv * c->dk;
    const int64_t wv = c->hkv * c->dv, wo = c->hq * c->dv;
    const size_t cnt[SEGS] = {(size_t)(c->n * c->tq * c->e),
                              c->self ? 0 : (size_t)(c->n * c->tk * c->e),
                              (size_t)(c->e * wq),
                              (size_t)(c->e * wk),
                              (size_t)(c->e * wv),
                              (size_t)(wo * c->e),
                              c->biases ? (size_t)wq : 0,
                              c->biases ? (size_t)wk : 0,
                              c->biases ? (size_t)wv : 0,
                              c->biases ? (size_t)c->e : 0};
    c->total = 0;
    for (int s = 0; s < SEGS; s++) {
        c->cnt[s] = cnt[s];
        c->off[s] = c->total;
        c->total += cnt[s];
    }
}

static void case_fill(bcase *c, rng *r)
{
    case_layout(c);
    c->theta = malloc(c->total * sizeof *c->theta);
    c->dy = malloc((size_t)(c->n * c->tq * c->e) * sizeof *c->dy);
    assert_true(c->theta && c->dy);
    for (int s = 0; s < SEGS; s++) {
        long double amp = s <= S_XKV ? 1.0L
                          : s == S_WO
                              ? 1.0L / sqrtl((long double)(c->hq * c->dv))
                          : s <= S_WO ? 1.5L / sqrtl((long double)c->e)
                                      : 0.3L;
        for (size_t i = 0; i < c->cnt[s]; i++)
            c->theta[c->off[s] + i] = (long double)rng_sym(r, (double)amp);
    }
    for (int64_t i = 0; i < c->n * c->tq * c->e; i++)
        c->dy[i] = (long double)rng_sym(r, 1.0);
    if (!c->self && c->kv_lens)
        for (int64_t b = 0; b < c->n; b++)
            c->kv_lens[b] = rng_int(r, b == 0 ? 1 : 0, c->tk);
}

static void case_free(bcase *c)
{
    free(c->theta);
    free(c->dy);
    free(c->kv_lens);
    memset(c, 0, sizeof *c);
}

/* ---- The long-double reference loss. ---------------------------------- */

/* out [n, t, width] = (x + PE) W (+ b). */
static void ld_project(const bcase *c, const long double *x, int64_t t,
                       const long double *w, const long double *bias,
                       int64_t width, long double *out)
{
    for (int64_t b = 0; b < c->n; b++)
        for (int64_t i = 0; i < t; i++) {
            const long double *row = x + (b * t + i) * c->e;
            long double p = (long double)(c->offset + i);
            for (int64_t j = 0; j < width; j++) {
                long double s = bias ? bias[j] : 0;
                for (int64_t k = 0; k < c->e; k++) {
                    long double xk = row[k];
                    if (c->positions == SDPA_POS_SINUSOIDAL) {
                        long double a = p * tp_freq(10000.0L, k / 2, c->e);
                        xk += k % 2 ? cosl(a) : sinl(a);
                    }
                    s += xk * w[k * width + j];
                }
                out[(b * t + i) * width + j] = s;
            }
        }
}

static void ld_rope(const bcase *c, long double *m, int64_t t, int64_t heads)
{
    const int64_t d = c->dk;
    for (int64_t b = 0; b < c->n; b++)
        for (int64_t i = 0; i < t; i++)
            for (int64_t h = 0; h < heads; h++) {
                long double *x = m + (b * t + i) * heads * d + h * d;
                long double p = (long double)(c->offset + i);
                for (int64_t r = 0; r < d / 2; r++) {
                    long double a = p * tp_freq(10000.0L, r, d);
                    bool half = c->positions == SDPA_POS_ROPE_HALF;
                    int64_t u = half ? r : 2 * r, v = half ? r + d / 2 : u + 1;
                    long double xu = x[u], xv = x[v];
                    x[u] = xu * cosl(a) - xv * sinl(a);
                    x[v] = xu * sinl(a) + xv * cosl(a);
                }
            }
}

/* L(θ) = Σ dy ⊙ y in long double; scratch holds the intermediates. */
static long double ld_loss(const bcase *c, const long double *th)
{
    const int64_t n = c->n, tq = c->tq, tk = c->tk, hq = c->hq;
    const int64_t dk = c->dk, dv = c->dv, g = c->hq / c->hkv;
    const int64_t wq = hq * dk, wk = c->hkv * dk, wv = c->hkv * dv;
    const int64_t wo = hq * dv;
    const long double *xq = th + c->off[S_XQ];
    const long double *xkv = c->self ? xq : th + c->off[S_XKV];
    const long double *bq = c->biases ? th + c->off[S_BQ] : NULL;
    const long double *bk = c->biases ? th + c->off[S_BK] : NULL;
    const long double *bv = c->biases ? th + c->off[S_BV] : NULL;
    long double *q = malloc((size_t)(n * tq * wq) * sizeof *q);
    long double *k = malloc((size_t)(n * tk * wk) * sizeof *k);
    long double *v = malloc((size_t)(n * tk * wv) * sizeof *v);
    long double *o = calloc((size_t)(n * tq * wo), sizeof *o);
    long double *s = malloc((size_t)tk * sizeof *s);
    assert_true(q && k && v && o && s);
    ld_project(c, xq, tq, th + c->off[S_WQ], bq, wq, q);
    ld_project(c, xkv, tk, th + c->off[S_WK], bk, wk, k);
    ld_project(c, xkv, tk, th + c->off[S_WV], bv, wv, v);
    if (c->positions >= SDPA_POS_ROPE_HALF) {
        ld_rope(c, q, tq, hq);
        ld_rope(c, k, tk, c->hkv);
    }
    const long double scale =
        c->scale != 0 ? c->scale : 1.0L / sqrtl((long double)dk);
    for (int64_t b = 0; b < n; b++)
        for (int64_t h = 0; h < hq; h++)
            for (int64_t i = 0; i < tq; i++) {
                const int64_t len = c->kv_lens ? c->kv_lens[b] : tk;
                long double m = -INFINITY;
                for (int64_t j = 0; j < tk; j++) {
                    bool ok = j < len;
                    if (!ref_causal_allows(c->causal, i, j, len, tq))
                        ok = false;
                    s[j] = -INFINITY;
                    if (!ok)
                        continue;
                    long double dot = 0;
                    for (int64_t d = 0; d < dk; d++)
                        dot += q[(b * tq + i) * wq + h * dk + d] *
                               k[(b * tk + j) * wk + (h / g) * dk + d];
                    s[j] = scale * dot;
                    m = s[j] > m ? s[j] : m;
                }
                if (m == -INFINITY)
                    continue; /* an empty row: output 0 */
                long double sum = 0;
                for (int64_t j = 0; j < tk; j++)
                    sum += s[j] == -INFINITY ? 0 : expl(s[j] - m);
                for (int64_t j = 0; j < tk; j++) {
                    if (s[j] == -INFINITY)
                        continue;
                    long double p = expl(s[j] - m) / sum;
                    for (int64_t d = 0; d < dv; d++)
                        o[(b * tq + i) * wo + h * dv + d] +=
                            p * v[(b * tk + j) * wv + (h / g) * dv + d];
                }
            }
    const long double *w_o = th + c->off[S_WO];
    long double loss = 0;
    for (int64_t r = 0; r < n * tq; r++)
        for (int64_t j = 0; j < c->e; j++) {
            long double y = c->biases ? th[c->off[S_BO] + (size_t)j] : 0;
            for (int64_t d = 0; d < wo; d++)
                y += o[r * wo + d] * w_o[d * c->e + j];
            loss += y * c->dy[r * c->e + j];
        }
    free(q), free(k), free(v), free(o), free(s);
    return loss;
}

/* The reference gradient: central differences in long double. */
static long double *ld_gradient(const bcase *c)
{
    long double *th = malloc(c->total * sizeof *th);
    long double *grad = malloc(c->total * sizeof *grad);
    assert_true(th && grad);
    memcpy(th, c->theta, c->total * sizeof *th);
    const long double h = 1.0L / 1048576.0L; /* 2^-20 */
    for (size_t i = 0; i < c->total; i++) {
        long double keep = th[i];
        th[i] = keep + h;
        long double up = ld_loss(c, th);
        th[i] = keep - h;
        long double down = ld_loss(c, th);
        th[i] = keep;
        grad[i] = (up - down) / (2 * h);
    }
    free(th);
    return grad;
}

/* ---- The library call. -------------------------------------------------- */

/* A [n, 1, t, e] view in the case's layout over fresh memory (NaN or the
 * sentinel outside the view). */
static tbuf rows_make(int dtype, int64_t n, int64_t t, int64_t e, int layout)
{
    tbuf x;
    if (layout != ROWS_SEQ_FIRST) {
        tbuf_make(&x, dtype, n, 1, t, e, LAYOUT_BHTD,
                  layout == ROWS_PADDED ? 3 : 0);
        return x;
    }
    tbuf_make(&x, dtype, n * t, 1, 1, e, LAYOUT_BHTD, 0);
    x.t.shape[0] = n;
    x.t.shape[2] = t;
    x.t.stride[0] = e;
    x.t.stride[1] = n * t * e;
    x.t.stride[2] = n * e;
    return x;
}

static void rows_set(tbuf *x, const long double *v)
{
    const int64_t *s = x->t.shape;
    for (int64_t b = 0; b < s[0]; b++)
        for (int64_t t = 0; t < s[2]; t++)
            for (int64_t j = 0; j < s[3]; j++)
                tset(x, b, 0, t, j, (double)v[(b * s[2] + t) * s[3] + j]);
}

static void rows_get(const tbuf *x, double *v)
{
    const int64_t *s = x->t.shape;
    for (int64_t b = 0; b < s[0]; b++)
        for (int64_t t = 0; t < s[2]; t++)
            for (int64_t j = 0; j < s[3]; j++)
                v[(b * s[2] + t) * s[3] + j] = tget(x, b, 0, t, j);
}

static void *flat_make(int dtype, const long double *v, size_t count)
{
    size_t es = kind_size(dtype);
    void *p = malloc(count ? count * es : 1);
    assert_non_null(p);
    for (size_t i = 0; i < count; i++) {
        if (dtype == SDPA_FLOAT32)
            ((float *)p)[i] = (float)v[i];
        else
            ((double *)p)[i] = (double)v[i];
    }
    return p;
}

/* Everything one library call needs, in the dtype. */
typedef struct lib_call {
    int dtype;
    tbuf x_q, x_kv, dy, dx_q, dx_kv, y;
    void *w[4], *b[4];   /* q, k, v, o */
    void *dw[4], *db[4]; /* outputs */
    size_t dw_n[4], db_n[4];
    sdpa_forward_args attn;
    sdpa_mha_args fwd;
    sdpa_mha_backward_args bwd;
} lib_call;

static void call_make(lib_call *L, const bcase *c, int dtype)
{
    memset(L, 0, sizeof *L);
    L->dtype = dtype;
    const size_t es = kind_size(dtype);
    L->x_q = rows_make(dtype, c->n, c->tq, c->e, c->layout);
    rows_set(&L->x_q, c->theta + c->off[S_XQ]);
    if (!c->self) {
        L->x_kv = rows_make(dtype, c->n, c->tk, c->e, c->layout);
        rows_set(&L->x_kv, c->theta + c->off[S_XKV]);
        L->dx_kv = rows_make(dtype, c->n, c->tk, c->e, c->layout);
        fill_sentinel(L->dx_kv.mem, L->dx_kv.elems * es);
    }
    L->dy = rows_make(dtype, c->n, c->tq, c->e, c->layout);
    rows_set(&L->dy, c->dy);
    L->dx_q = rows_make(dtype, c->n, c->tq, c->e, c->layout);
    fill_sentinel(L->dx_q.mem, L->dx_q.elems * es);
    L->y = rows_make(dtype, c->n, c->tq, c->e, ROWS_CONTIGUOUS);
    const size_t wq = (size_t)(c->hq * c->dk), wk = (size_t)(c->hkv * c->dk);
    const size_t wv = (size_t)(c->hkv * c->dv), wo = (size_t)(c->hq * c->dv);
    const size_t e = (size_t)c->e;
    const size_t wn[4] = {e * wq, e * wk, e * wv, wo * e};
    const size_t bn[4] = {wq, wk, wv, e};
    for (int i = 0; i < 4; i++) {
        L->w[i] = flat_make(dtype, c->theta + c->off[S_WQ + i], wn[i]);
        if (c->biases)
            L->b[i] = flat_make(dtype, c->theta + c->off[S_BQ + i], bn[i]);
        L->dw_n[i] = wn[i];
        L->db_n[i] = bn[i];
        L->dw[i] = malloc(wn[i] * es);
        L->db[i] = malloc(bn[i] * es);
        assert_true(L->dw[i] && L->db[i]);
        fill_sentinel(L->dw[i], wn[i] * es);
        fill_sentinel(L->db[i], bn[i] * es);
    }
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.causal = c->causal;
    f.scale = c->scale;
    f.kv_lens = c->self ? NULL : c->kv_lens;
    L->attn = f;
    sdpa_mha_args a =
        tp_mha_args(dtype, c->positions, c->hq, c->hkv, c->dk, c->dv, &L->x_q.t,
                    c->self ? NULL : &L->x_kv.t, &L->y.t, L->w, L->b);
    a.pos_offset = c->offset;
    a.attn = &L->attn;
    L->fwd = a;
    sdpa_mha_backward_args g = SDPA_MHA_BACKWARD_ARGS_INIT;
    g.forward = &L->fwd;
    g.dy = L->dy.t;
    g.dx_q = L->dx_q.t;
    if (!c->self)
        g.dx_kv = L->dx_kv.t;
    g.dw_q = L->dw[0], g.dw_k = L->dw[1], g.dw_v = L->dw[2], g.dw_o = L->dw[3];
    g.db_q = L->db[0], g.db_k = L->db[1], g.db_v = L->db[2], g.db_o = L->db[3];
    L->bwd = g;
}

static void call_free(lib_call *L)
{
    tbuf_free_all((tbuf *[]){&L->x_q, &L->x_kv, &L->dy, &L->dx_q, &L->dx_kv,
                             &L->y, NULL});
    for (int i = 0; i < 4; i++) {
        free(L->w[i]), free(L->b[i]), free(L->dw[i]), free(L->db[i]);
    }
}

static double flat_get(int dtype, const void *p, size_t i)
{
    return dtype == SDPA_FLOAT32 ? (double)((const float *)p)[i]
                                 : ((const double *)p)[i];
}

/* The library's gradient in θ's order (biases only when the case has
 * them: their gradients are checked at b = 0 separately). */
static double *call_gradient(const lib_call *L, const bcase *c)
{
    double *g = malloc(c->total * sizeof *g);
    assert_non_null(g);
    rows_get(&L->dx_q, g + c->off[S_XQ]);
    if (!c->self)
        rows_get(&L->dx_kv, g + c->off[S_XKV]);
    for (int i = 0; i < 4; i++) {
        for (size_t j = 0; j < c->cnt[S_WQ + i]; j++)
            g[c->off[S_WQ + i] + j] = flat_get(L->dtype, L->dw[i], j);
        for (size_t j = 0; j < c->cnt[S_BQ + i]; j++)
            g[c->off[S_BQ + i] + j] = flat_get(L->dtype, L->db[i], j);
    }
    return g;
}

/* Padding of dx (outside the view) still holds the sentinel. */
static void check_padding(const tbuf *x)
{
    if (!x->mem)
        return;
    unsigned char *map = tbuf_logical_map(x);
    const unsigned char *bytes = x->mem;
    for (size_t i = 0; i < x->elems; i++)
        if (!map[i])
            for (size_t k = 0; k < x->esize; k++)
                assert_int_equal(bytes[i * x->esize + k], SENTINEL_BYTE);
    free(map);
}

static sdpa_ctx *new_ctx(void)
{
    sdpa_ctx *ctx = tp_ctx(0);
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    return ctx;
}

static void run_backward(sdpa_ctx *ctx, lib_call *L)
{
    int status = sdpa_mha_backward(ctx, &L->bwd);
    if (status != SDPA_OK)
        fail_msg("sdpa_mha_backward: %s: %s", sdpa_status_string(status),
                 sdpa_ctx_last_error(ctx));
}

/* Compares a gradient with the reference, segment by segment: every
 * element within tol · (the segment's largest reference value + 1e-3). */
static void compare(const bcase *c, const double *got, const long double *ref,
                    double tol, const char *what)
{
    for (int s = 0; s < SEGS; s++) {
        long double big = 1e-3L;
        for (size_t i = 0; i < c->cnt[s]; i++)
            big = fabsl(ref[c->off[s] + i]) > big ? fabsl(ref[c->off[s] + i])
                                                  : big;
        for (size_t i = 0; i < c->cnt[s]; i++) {
            long double err =
                fabsl((long double)got[c->off[s] + i] - ref[c->off[s] + i]);
            if (!(err <= (long double)tol * big))
                fail_msg("%s: %s[%zu] = %.12g, reference %.12Lg (error "
                         "%.3Lg, allowed %.3Lg); case n %lld tq %lld tk %lld "
                         "e %lld hq %lld hkv %lld dk %lld dv %lld self %d "
                         "pos %d causal %d layout %d",
                         what, seg_name[s], i, got[c->off[s] + i],
                         ref[c->off[s] + i], err, (long double)tol * big,
                         (long long)c->n, (long long)c->tq, (long long)c->tk,
                         (long long)c->e, (long long)c->hq, (long long)c->hkv,
                         (long long)c->dk, (long long)c->dv, c->self,
                         c->positions, c->causal, c->layout);
        }
    }
}

/* Central differences of sdpa_mha_forward in float64. */
static double lib_loss(sdpa_ctx *ctx, lib_call *L, const bcase *c)
{
    int status = sdpa_mha_forward(ctx, &L->fwd);
    if (status != SDPA_OK)
        fail_msg("sdpa_mha_forward: %s", sdpa_ctx_last_error(ctx));
    double loss = 0;
    for (int64_t b = 0; b < c->n; b++)
        for (int64_t t = 0; t < c->tq; t++)
            for (int64_t j = 0; j < c->e; j++)
                loss += tget(&L->y, b, 0, t, j) *
                        (double)c->dy[(b * c->tq + t) * c->e + j];
    return loss;
}

static double *lib_fd_gradient(sdpa_ctx *ctx, lib_call *L, const bcase *c)
{
    double *g = malloc(c->total * sizeof *g);
    assert_non_null(g);
    const double h = 1e-5;
    for (int s = 0; s < SEGS; s++)
        for (size_t i = 0; i < c->cnt[s]; i++) {
            double *p;
            if (s <= S_XKV) {
                tbuf *x = s == S_XQ ? &L->x_q : &L->x_kv;
                int64_t len = x->t.shape[2], e = c->e, k = (int64_t)i;
                p = (double *)x->mem +
                    toff(&x->t, k / (len * e), 0, (k / e) % len, k % e);
            } else if (s <= S_WO) {
                p = (double *)L->w[s - S_WQ] + i;
            } else {
                p = (double *)L->b[s - S_BQ] + i;
            }
            double keep = *p;
            *p = keep + h;
            double up = lib_loss(ctx, L, c);
            *p = keep - h;
            double down = lib_loss(ctx, L, c);
            *p = keep;
            g[c->off[s] + i] = (up - down) / (2 * h);
        }
    return g;
}

/* One case through everything: both dtypes against the long-double
 * reference, float64 against the library's own differences, outputs
 * alone, two threads, padding, bias gradients at b = 0. */
static void check_case(bcase *c, bool with_lib_fd)
{
    long double *ref = ld_gradient(c);
    for (int dt = SDPA_FLOAT32; dt <= SDPA_FLOAT64; dt++) {
        sdpa_ctx *ctx = new_ctx();
        lib_call L;
        call_make(&L, c, dt);
        run_backward(ctx, &L);
        check_padding(&L.dx_q);
        check_padding(&L.dx_kv);
        double *got = call_gradient(&L, c);
        compare(c, got, ref, dt == SDPA_FLOAT64 ? 1e-8 : 3e-4,
                dt == SDPA_FLOAT64 ? "float64 vs long double"
                                   : "float32 vs long double");
        if (dt == SDPA_FLOAT64 && with_lib_fd) {
            double *fd = lib_fd_gradient(ctx, &L, c);
            long double *fdl = malloc(c->total * sizeof *fdl);
            assert_non_null(fdl);
            for (size_t i = 0; i < c->total; i++)
                fdl[i] = fd[i];
            compare(c, got, fdl, 1e-6, "float64 vs differences of forward");
            free(fd);
            free(fdl);
        }
        /* each output alone: the same bits; two threads: the same bits */
        const size_t es = kind_size(dt);
        for (int only = 0; only < 10; only++) {
            lib_call M;
            call_make(&M, c, dt);
            sdpa_mha_backward_args g = M.bwd;
            sdpa_tensor none = {NULL, {0, 0, 0, 0}, {0, 0, 0, 0}};
            g.dx_q = only == 0 ? g.dx_q : none;
            g.dx_kv = only == 1 ? g.dx_kv : none;
            void **dws[4] = {&g.dw_q, &g.dw_k, &g.dw_v, &g.dw_o};
            void **dbs[4] = {&g.db_q, &g.db_k, &g.db_v, &g.db_o};
            for (int i = 0; i < 4; i++) {
                if (only != 2 + i)
                    *dws[i] = NULL;
                if (only != 6 + i)
                    *dbs[i] = NULL;
            }
            M.bwd = g;
            if (only == 1 && c->self) {
                call_free(&M); /* no dx_kv in self-attention */
                continue;
            }
            if (only == 9)
                tp_set(ctx, SDPA_OPT_NUM_THREADS, 2);
            run_backward(ctx, &M);
            if (only == 0)
                assert_memory_equal(M.dx_q.mem, L.dx_q.mem, M.dx_q.elems * es);
            else if (only == 1)
                assert_memory_equal(M.dx_kv.mem, L.dx_kv.mem,
                                    M.dx_kv.elems * es);
            else if (only < 6)
                assert_memory_equal(M.dw[only - 2], L.dw[only - 2],
                                    L.dw_n[only - 2] * es);
            else
                assert_memory_equal(M.db[only - 6], L.db[only - 6],
                                    L.db_n[only - 6] * es);
            /* the others: untouched */
            if (only != 0)
                assert_int_equal(
                    first_non_sentinel(M.dx_q.mem, M.dx_q.elems * es), -1);
            call_free(&M);
        }
        /* without biases, db is the gradient at b = 0: db_o = Σ_rows dy */
        if (!c->biases) {
            double *sum = calloc((size_t)c->e, sizeof *sum);
            assert_non_null(sum);
            for (int64_t r = 0; r < c->n * c->tq; r++)
                for (int64_t j = 0; j < c->e; j++)
                    sum[j] += (double)c->dy[r * c->e + j];
            for (int64_t j = 0; j < c->e; j++)
                assert_true(fabs(flat_get(dt, L.db[3], (size_t)j) - sum[j]) <=
                            1e-5 * (1 + fabs(sum[j])));
            free(sum);
        }
        free(got);
        call_free(&L);
        sdpa_ctx_destroy(ctx);
    }
    free(ref);
}

/* ---- Tests. -------------------------------------------------------------- */

static bcase named(int64_t n, int64_t tq, int64_t tk, int64_t e, int64_t hq,
                   int64_t hkv, int64_t dk, int64_t dv, bool self, bool biases,
                   int positions, int causal, int64_t offset, double scale,
                   int layout)
{
    bcase c;
    memset(&c, 0, sizeof c);
    c.n = n, c.tq = tq, c.tk = self ? tq : tk, c.e = e, c.hq = hq;
    c.hkv = hkv, c.dk = dk, c.dv = dv, c.self = self, c.biases = biases;
    c.positions = positions, c.causal = causal, c.offset = offset;
    c.scale = scale, c.layout = layout;
    return c;
}

static void test_named_cases(void **state)
{
    (void)state;
    rng r = {2024};
    bcase cases[] = {
        named(2, 5, 5, 8, 2, 2, 4, 4, true, true, SDPA_POS_NONE,
              SDPA_CAUSAL_NONE, 0, 0, ROWS_CONTIGUOUS),
        named(2, 6, 6, 8, 4, 4, 2, 2, true, false, SDPA_POS_SINUSOIDAL,
              SDPA_CAUSAL_TOP_LEFT, 3, 0, ROWS_PADDED),
        named(1, 4, 7, 6, 4, 2, 4, 3, false, true, SDPA_POS_ROPE_HALF,
              SDPA_CAUSAL_NONE, 5, 0, ROWS_CONTIGUOUS),
        named(2, 3, 6, 5, 2, 1, 4, 2, false, true, SDPA_POS_ROPE_INTERLEAVED,
              SDPA_CAUSAL_BOTTOM_RIGHT, 0, 0, ROWS_SEQ_FIRST),
        named(2, 5, 5, 8, 4, 2, 2, 2, true, true, SDPA_POS_ROPE_HALF,
              SDPA_CAUSAL_TOP_LEFT, 0, 1.0, ROWS_PADDED),
        named(3, 4, 5, 7, 3, 3, 3, 5, false, false, SDPA_POS_SINUSOIDAL,
              SDPA_CAUSAL_TOP_LEFT, 2, 0.7, ROWS_SEQ_FIRST),
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        bcase *c = &cases[i];
        if (i == 3) { /* kv_lens, an empty row in item 1 maybe */
            c->kv_lens = malloc((size_t)c->n * sizeof *c->kv_lens);
            assert_non_null(c->kv_lens);
        }
        case_fill(c, &r);
        check_case(c, true);
        case_free(c);
    }
}

static void test_random_cases(void **state)
{
    (void)state;
    rng r = {99};
    for (int iter = 0; iter < 30; iter++) {
        bcase c;
        memset(&c, 0, sizeof c);
        c.positions =
            (int)rng_int(&r, SDPA_POS_NONE, SDPA_POS_ROPE_INTERLEAVED);
        bool rope = c.positions >= SDPA_POS_ROPE_HALF;
        c.n = rng_int(&r, 1, 3);
        c.tq = rng_int(&r, 1, 6);
        c.self = rng_int(&r, 0, 1) == 0;
        c.tk = c.self ? c.tq : rng_int(&r, 1, 7);
        c.hkv = rng_int(&r, 1, 2);
        c.hq = c.hkv * rng_int(&r, 1, 3);
        c.dk = rope ? 2 * rng_int(&r, 1, 3) : rng_int(&r, 1, 5);
        c.dv = rng_int(&r, 1, 4);
        c.e = rng_int(&r, 1, 9);
        c.biases = rng_int(&r, 0, 1) == 1;
        c.causal = (int)rng_int(&r, 0, 2);
        c.offset = rng_int(&r, 0, 1) ? rng_int(&r, -5, 50) : 0;
        if (c.positions == SDPA_POS_NONE)
            c.offset = 0;
        c.scale = rng_int(&r, 0, 2) == 0 ? 1.0 : 0.0;
        c.layout = (int)rng_int(&r, 0, 2);
        if (!c.self && rng_int(&r, 0, 1)) {
            c.kv_lens = malloc((size_t)c.n * sizeof *c.kv_lens);
            assert_non_null(c.kv_lens);
        }
        case_fill(&c, &r);
        check_case(&c, iter % 3 == 0);
        case_free(&c);
    }
}

/* A repeated call (and forward / backward alternating, as in training)
 * allocates nothing. */
static void test_zero_allocations(void **state)
{
    (void)state;
    rng r = {5};
    for (int pos = SDPA_POS_NONE; pos <= SDPA_POS_ROPE_INTERLEAVED; pos++)
        for (int dt = SDPA_FLOAT32; dt <= SDPA_FLOAT64; dt++) {
            bcase c = named(2, 6, 5, 8, 4, 2, 2, 2, pos % 2 == 0, true, pos,
                            SDPA_CAUSAL_NONE, pos ? 7 : 0, 0, ROWS_PADDED);
            case_fill(&c, &r);
            lib_call L;
            call_make(&L, &c, dt);
            counting_alloc ca;
            sdpa_allocator al = ca_start(&ca, -1);
            sdpa_ctx *ctx;
            assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al),
                             SDPA_OK);
            assert_int_equal(sdpa_mha_forward(ctx, &L.fwd), SDPA_OK);
            run_backward(ctx, &L);
            long allocs = ca.allocs;
            for (int again = 0; again < 3; again++) {
                assert_int_equal(sdpa_mha_forward(ctx, &L.fwd), SDPA_OK);
                run_backward(ctx, &L);
                assert_int_equal(ca.allocs, allocs);
            }
            sdpa_ctx_destroy(ctx);
            assert_int_equal(ca.live_bytes, 0);
            call_free(&L);
            case_free(&c);
        }
}

/* Every output still holds the sentinel. */
static void assert_untouched(const lib_call *L)
{
    const size_t es = kind_size(L->dtype);
    assert_int_equal(first_non_sentinel(L->dx_q.mem, L->dx_q.elems * es), -1);
    if (L->dx_kv.mem)
        assert_int_equal(first_non_sentinel(L->dx_kv.mem, L->dx_kv.elems * es),
                         -1);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(first_non_sentinel(L->dw[i], L->dw_n[i] * es), -1);
        assert_int_equal(first_non_sentinel(L->db[i], L->db_n[i] * es), -1);
    }
}

static void expect_error(sdpa_ctx *ctx, const lib_call *L,
                         const sdpa_mha_backward_args *g, int status,
                         const char *what)
{
    int got = sdpa_mha_backward(ctx, g);
    if (got != status)
        fail_msg("%s: got %s (%s), want %s", what, sdpa_status_string(got),
                 sdpa_ctx_last_error(ctx), sdpa_status_string(status));
    assert_non_null(strstr(sdpa_ctx_last_error(ctx), "sdpa_mha_backward"));
    assert_untouched(L);
}

static void test_errors(void **state)
{
    (void)state;
    rng r = {11};
    for (int dt = SDPA_FLOAT32; dt <= SDPA_FLOAT64; dt++) {
        bcase c = named(2, 4, 5, 8, 2, 2, 4, 4, false, true, SDPA_POS_NONE,
                        SDPA_CAUSAL_NONE, 0, 0, ROWS_CONTIGUOUS);
        case_fill(&c, &r);
        lib_call L;
        call_make(&L, &c, dt);
        sdpa_ctx *ctx = tp_ctx(0);
        assert_int_equal(sdpa_mha_backward(NULL, &L.bwd),
                         SDPA_ERR_NULL_POINTER);
        expect_error(ctx, &L, NULL, SDPA_ERR_NULL_POINTER, "args NULL");
        sdpa_mha_backward_args g = L.bwd;
        g.forward = NULL;
        expect_error(ctx, &L, &g, SDPA_ERR_NULL_POINTER, "forward NULL");
        g = L.bwd;
        g.struct_size = 100;
        expect_error(ctx, &L, &g, SDPA_ERR_STRUCT_SIZE, "struct_size");
        g = L.bwd;
        g.dy.data = NULL;
        expect_error(ctx, &L, &g, SDPA_ERR_NULL_POINTER, "dy NULL");
        g = L.bwd;
        g.dy.shape[2] = 3;
        expect_error(ctx, &L, &g, SDPA_ERR_SHAPE_MISMATCH, "dy's Tq");
        g = L.bwd;
        g.dx_kv.shape[2] = 4;
        expect_error(ctx, &L, &g, SDPA_ERR_SHAPE_MISMATCH, "dx_kv's Tk");
        g = L.bwd;
        g.dx_q.stride[2] = 2;
        expect_error(ctx, &L, &g, SDPA_ERR_BAD_STRIDE, "dx_q's rows");
        g = L.bwd;
        g.dw_k = g.dw_q;
        expect_error(ctx, &L, &g, SDPA_ERR_OVERLAP, "dw_k = dw_q");
        g = L.bwd;
        g.db_o = (char *)L.w[3] + kind_size(dt);
        expect_error(ctx, &L, &g, SDPA_ERR_OVERLAP, "db_o in w_o");
        g = L.bwd;
        g.dx_q = L.x_q.t;
        expect_error(ctx, &L, &g, SDPA_ERR_OVERLAP, "dx_q = x_q");
        g = L.bwd;
        g.dx_q = L.dy.t;
        expect_error(ctx, &L, &g, SDPA_ERR_OVERLAP, "dx_q = dy");

        sdpa_mha_args a = L.fwd;
        g = L.bwd;
        g.forward = &a;
        a.x_kv.data = NULL; /* self-attention, but dx_kv given */
        expect_error(ctx, &L, &g, SDPA_ERR_BAD_OPTION_VALUE, "dx_kv in self");
        a = L.fwd;
        a.heads_q = 3;
        expect_error(ctx, &L, &g, SDPA_ERR_HEAD_GROUPING, "heads");
        a = L.fwd;
        a.positions = 9;
        expect_error(ctx, &L, &g, SDPA_ERR_BAD_OPTION_VALUE, "positions");
        a = L.fwd;
        a.dtype = 7;
        expect_error(ctx, &L, &g, SDPA_ERR_BAD_DTYPE, "dtype");
        a = L.fwd;
        a.w_v = NULL;
        expect_error(ctx, &L, &g, SDPA_ERR_NULL_POINTER, "w_v NULL");
        a = L.fwd;
        sdpa_forward_args attn = L.attn;
        a.attn = &attn;
        attn.q = L.x_q.t;
        expect_error(ctx, &L, &g, SDPA_ERR_BAD_OPTION_VALUE, "attn->q set");
        attn = L.attn;
        attn.scale = -1;
        expect_error(ctx, &L, &g, SDPA_ERR_BAD_SCALE, "attention's scale");
        /* found while recomputing: a fully masked row (kv_lens 0 under the
         * default policy), a non-finite logit */
        attn = L.attn;
        int64_t lens[2] = {5, 0};
        attn.kv_lens = lens;
        expect_error(ctx, &L, &g, SDPA_ERR_FULLY_MASKED_ROW, "masked row");
        attn = L.attn;
        tbuf x = rows_make(dt, c.n, c.tq, c.e, ROWS_CONTIGUOUS);
        rows_set(&x, c.theta + c.off[S_XQ]);
        tset(&x, 1, 0, 2, 3, INFINITY);
        a.x_q = x.t;
        expect_error(ctx, &L, &g, SDPA_ERR_NONFINITE, "infinite input");
        tbuf_free(&x);
        /* and a good call still works afterwards */
        run_backward(ctx, &L);
        sdpa_ctx_destroy(ctx);
        call_free(&L);
        case_free(&c);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_named_cases),
        cmocka_unit_test(test_random_cases),
        cmocka_unit_test(test_zero_allocations),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
