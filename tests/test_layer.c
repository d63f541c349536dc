/*
 * The multi-head attention layer, sdpa_mha_forward (include/sdpa.h, 1.1),
 * against a long-double reference of the same mathematics written here
 * from the header (it shares nothing with the library, and not even
 * reference.c: attention is re-derived below in a few lines):
 *
 *   X~ = X + PE (sinusoidal), Q = X~_q W_Q + b_Q, K = X~_kv W_K + b_K,
 *   V = X~_kv W_V + b_V, RoPE on each head of Q and K, head h of Q =
 *   columns h·dk.., attention per head (GQA: KV head h / (Hq/Hkv)), the
 *   heads' outputs concatenated (head h at columns h·dv..), Y = O W_O + b_O.
 *
 * Random shapes in float and double: self- and cross-attention, GQA, dk ≠ dv,
 * d_model not a multiple of the heads (explicit dk), the defaults (dk =
 * d_model / Hq, dv = dk), biases or not, every SDPA_POS_* with offsets and
 * explicit positions, masks, kv_lens, both causal anchors and the weights
 * output through attn, inputs and outputs contiguous, row-padded or
 * sequence-first ([T, N, d_model], PyTorch's batch_first=False), 1 to 3
 * threads. Tolerances are derived per case from the dtype's epsilon, the
 * sizes and the magnitudes (see tolerance()). Also: inputs never written,
 * y's padding never written, y = x_q in place, zero allocations on a
 * repeated call (a counting allocator), and every error with y untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checks.h"
#include "sdpa.h"
#include "problem.h"
#include "testutil.h"

static const char *dt_name(int dtype)
{
    return dtype == SDPA_FLOAT32 ? "float" : "double";
}

/* ---- Flat arrays of the dtype. ---------------------------------------- */

static void *array_make(int dtype, size_t n, rng *r, double amp)
{
    size_t es = kind_size(dtype);
    void *p = malloc(n ? n * es : 1);
    assert_non_null(p);
    for (size_t i = 0; i < n; i++) {
        double v = rng_sym(r, amp);
        if (dtype == SDPA_FLOAT32)
            ((float *)p)[i] = (float)v;
        else
            ((double *)p)[i] = v;
    }
    return p;
}

static long double aget(const void *p, int dtype, size_t i)
{
    return dtype == SDPA_FLOAT32 ? (long double)((const float *)p)[i]
                                 : (long double)((const double *)p)[i];
}

/* A [n, 1, t, e] tensor: contiguous, rows padded, or sequence-first
 * (memory [t, n, e]); memory outside the view holds NaN. */
enum { ROWS_CONTIGUOUS, ROWS_PADDED, ROWS_SEQ_FIRST, ROWS_LAYOUTS };

static void rows_make(tbuf *x, int dtype, int64_t n, int64_t t, int64_t e,
                      int layout)
{
    if (layout != ROWS_SEQ_FIRST) {
        tbuf_make(x, dtype, n, 1, t, e, LAYOUT_BHTD,
                  layout == ROWS_PADDED ? 3 : 0);
        return;
    }
    tbuf_make(x, dtype, n * t, 1, 1, e, LAYOUT_BHTD, 0); /* the memory */
    x->t.shape[0] = n;
    x->t.shape[2] = t;
    x->t.stride[0] = e;
    x->t.stride[1] = n * t * e;
    x->t.stride[2] = n * e;
}

/* ---- One case. --------------------------------------------------------- */

typedef struct layer_case {
    int dtype, positions, causal, threads;
    int64_t n, tq, tk, e, hq, hkv, dk, dv; /* resolved */
    int64_t arg_dk, arg_dv, arg_hkv;       /* as passed (0 = default) */
    double base, scale;
    int64_t offset;
    bool self, biases, explicit_pos, use_mask, use_kv_lens, want_weights;
    int layout_x, layout_y;
    /* data */
    tbuf x_q, x_kv, y;
    void *w_q, *w_k, *w_v, *w_o, *b_q, *b_k, *b_v, *b_o;
    int64_t *pos_q, *pos_kv, *kv_lens;
    tbuf mask, weights;
} layer_case;

static void case_make(layer_case *c, int dtype, rng *r)
{
    memset(c, 0, sizeof *c);
    c->dtype = dtype;
    c->positions = (int)rng_int(r, SDPA_POS_NONE, SDPA_POS_ROPE_INTERLEAVED);
    bool rope = c->positions >= SDPA_POS_ROPE_HALF;
    c->n = rng_int(r, 1, 3);
    c->tq = rng_int(r, 1, 9);
    c->self = rng_int(r, 0, 2) == 0;
    c->tk = c->self ? c->tq : rng_int(r, 1, 11);
    c->hkv = rng_int(r, 1, 3);
    c->hq = c->hkv * rng_int(r, 1, 3);
    c->arg_hkv = c->hkv == c->hq && rng_int(r, 0, 1) ? 0 : c->hkv;
    if (rng_int(r, 0, 3) == 0) { /* the defaults: dk = e / hq, dv = dk */
        c->dk = 2 * rng_int(r, 1, 4);
        c->dv = c->dk;
        c->e = c->hq * c->dk;
    } else {
        c->dk = rope ? 2 * rng_int(r, 1, 4) : rng_int(r, 1, 8);
        c->dv = rng_int(r, 1, 7);
        c->e = rng_int(r, 1, 24);
        c->arg_dk = c->dk;
        c->arg_dv = c->dv == c->dk && rng_int(r, 0, 1) ? 0 : c->dv;
    }
    const double bases[] = {0, 10000, 500, 1e6};
    if (c->positions != SDPA_POS_NONE) {
        c->base = bases[rng_int(r, 0, 3)];
        c->offset = rng_int(r, 0, 2) ? 0 : rng_int(r, -5, 1000);
        c->explicit_pos = rng_int(r, 0, 2) == 0;
    }
    c->biases = rng_int(r, 0, 1);
    c->causal = (int)rng_int(r, 0, 2);
    c->use_mask = rng_int(r, 0, 2) == 0;
    c->use_kv_lens = rng_int(r, 0, 2) == 0;
    c->want_weights = rng_int(r, 0, 3) == 0;
    c->scale = rng_int(r, 0, 1) ? 0 : 0.3;
    c->threads = (int)rng_int(r, 1, 3);
    c->layout_x = (int)rng_int(r, 0, ROWS_LAYOUTS - 1);
    c->layout_y = (int)rng_int(r, 0, ROWS_LAYOUTS - 1);

    rows_make(&c->x_q, dtype, c->n, c->tq, c->e, c->layout_x);
    tbuf_fill_random(&c->x_q, r, 1.0);
    if (!c->self) {
        rows_make(&c->x_kv, dtype, c->n, c->tk, c->e, c->layout_x);
        tbuf_fill_random(&c->x_kv, r, 1.0);
    }
    rows_make(&c->y, dtype, c->n, c->tq, c->e, c->layout_y);
    const size_t e = (size_t)c->e;
    const double amp = 1.0 / sqrt((double)c->e);
    const size_t wq = (size_t)(c->hq * c->dk), wk = (size_t)(c->hkv * c->dk);
    const size_t wv = (size_t)(c->hkv * c->dv), wo = (size_t)(c->hq * c->dv);
    c->w_q = array_make(dtype, e * wq, r, 2 * amp);
    c->w_k = array_make(dtype, e * wk, r, 2 * amp);
    c->w_v = array_make(dtype, e * wv, r, 2 * amp);
    c->w_o = array_make(dtype, wo * e, r, 1.0 / sqrt((double)wo));
    if (c->biases) {
        c->b_q = array_make(dtype, wq, r, 0.5);
        c->b_k = array_make(dtype, wk, r, 0.5);
        c->b_v = array_make(dtype, wv, r, 0.5);
        c->b_o = array_make(dtype, e, r, 0.5);
    }
    if (c->explicit_pos) {
        c->pos_q = malloc((size_t)(c->n * c->tq) * sizeof(int64_t));
        assert_non_null(c->pos_q);
        for (int64_t i = 0; i < c->n * c->tq; i++)
            c->pos_q[i] = rng_int(r, 0, 3000);
        if (!c->self) {
            c->pos_kv = malloc((size_t)(c->n * c->tk) * sizeof(int64_t));
            assert_non_null(c->pos_kv);
            for (int64_t i = 0; i < c->n * c->tk; i++)
                c->pos_kv[i] = rng_int(r, 0, 3000);
        }
    }
    if (c->use_kv_lens) {
        c->kv_lens = malloc((size_t)c->n * sizeof(int64_t));
        assert_non_null(c->kv_lens);
        for (int64_t b = 0; b < c->n; b++)
            c->kv_lens[b] = rng_int(r, 0, c->tk);
    }
    if (c->use_mask) {
        tbuf_make(&c->mask, ELEM_U8, c->n, 1, c->tq, c->tk, LAYOUT_BHTD, 0);
        for (int64_t b = 0; b < c->n; b++)
            for (int64_t i = 0; i < c->tq; i++)
                for (int64_t j = 0; j < c->tk; j++)
                    tset(&c->mask, b, 0, i, j, rng_int(r, 0, 3) == 0);
    }
    if (c->want_weights)
        tbuf_make(&c->weights, dtype, c->n, c->hq, c->tq, c->tk, LAYOUT_BHTD,
                  0);
}

static void case_free(layer_case *c)
{
    tbuf_free_all(
        (tbuf *[]){&c->x_q, &c->x_kv, &c->y, &c->mask, &c->weights, NULL});
    void *arrays[] = {c->w_q, c->w_k, c->w_v,   c->w_o,    c->b_q,    c->b_k,
                      c->b_v, c->b_o, c->pos_q, c->pos_kv, c->kv_lens};
    for (size_t i = 0; i < sizeof arrays / sizeof arrays[0]; i++)
        free(arrays[i]);
}

/* The arguments of a case; attn (filled here) must outlive the call. */
static sdpa_mha_args case_args(const layer_case *c, sdpa_forward_args *attn)
{
    void *const w[4] = {c->w_q, c->w_k, c->w_v, c->w_o};
    void *const b[4] = {c->b_q, c->b_k, c->b_v, c->b_o};
    sdpa_mha_args a = tp_mha_args(c->dtype, c->positions, c->hq, c->arg_hkv,
                                  c->arg_dk, c->arg_dv, &c->x_q.t,
                                  c->self ? NULL : &c->x_kv.t, &c->y.t, w, b);
    a.pos_base = c->base;
    a.pos_offset = c->offset;
    a.pos_q = c->pos_q;
    a.pos_kv = c->pos_kv;
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.causal = c->causal;
    f.scale = c->scale;
    f.kv_lens = c->kv_lens;
    if (c->use_mask) {
        f.mask = c->mask.t;
        f.mask.shape[1] = 1;
        f.mask.stride[1] = 0;
    }
    if (c->want_weights)
        f.weights = c->weights.t;
    *attn = f;
    a.attn = attn;
    return a;
}

/* ---- The long-double reference. --------------------------------------- */

typedef struct ref_layer {
    long double *y;    /* [n, tq, e] */
    long double *p;    /* [n, hq, tq, tk] the weights */
    long double tol_y; /* per element of y */
    long double tol_p; /* per weight */
} ref_layer;

/* rows [n, t, width] = (x + PE) W + b, and their largest Σ|terms|. */
static long double *project(const layer_case *c, const tbuf *x, int64_t t,
                            const int64_t *pos, const void *w, const void *bias,
                            int64_t width, long double *sum_abs)
{
    const int dt = c->dtype;
    const long double base = c->base == 0 ? 10000 : c->base;
    long double *out = calloc((size_t)(c->n * t * width), sizeof *out);
    long double *row = malloc((size_t)c->e * sizeof *row);
    assert_true(out && row);
    for (int64_t b = 0; b < c->n; b++)
        for (int64_t i = 0; i < t; i++) {
            long double p = pos ? (long double)pos[b * t + i]
                                : (long double)(c->offset + i);
            for (int64_t k = 0; k < c->e; k++) {
                row[k] = (long double)tget(x, b, 0, i, k);
                if (c->positions == SDPA_POS_SINUSOIDAL) {
                    long double a = p * tp_freq(base, k / 2, c->e);
                    row[k] += k % 2 ? cosl(a) : sinl(a);
                }
            }
            for (int64_t j = 0; j < width; j++) {
                long double s = bias ? aget(bias, dt, (size_t)j) : 0;
                long double sa = fabsl(s);
                for (int64_t k = 0; k < c->e; k++) {
                    long double term =
                        row[k] * aget(w, dt, (size_t)(k * width + j));
                    s += term;
                    sa += fabsl(term);
                }
                out[(b * t + i) * width + j] = s;
                *sum_abs = sa > *sum_abs ? sa : *sum_abs;
            }
        }
    free(row);
    return out;
}

/* RoPE on every head of rows [n, t, heads · d]. */
static void rope(const layer_case *c, long double *m, int64_t t,
                 const int64_t *pos, int64_t heads, int64_t d)
{
    const long double base = c->base == 0 ? 10000 : c->base;
    for (int64_t b = 0; b < c->n; b++)
        for (int64_t i = 0; i < t; i++) {
            long double p = pos ? (long double)pos[b * t + i]
                                : (long double)(c->offset + i);
            for (int64_t h = 0; h < heads; h++) {
                long double *x = m + (b * t + i) * heads * d + h * d;
                for (int64_t r = 0; r < d / 2; r++) {
                    long double a = p * tp_freq(base, r, d);
                    int64_t u = c->positions == SDPA_POS_ROPE_HALF ? r : 2 * r;
                    int64_t v = c->positions == SDPA_POS_ROPE_HALF ? r + d / 2
                                                                   : 2 * r + 1;
                    long double xu = x[u], xv = x[v];
                    x[u] = xu * cosl(a) - xv * sinl(a);
                    x[v] = xu * sinl(a) + xv * cosl(a);
                }
            }
        }
}

static long double absmax(const long double *x, size_t n)
{
    long double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabsl(x[i]) > m ? fabsl(x[i]) : m;
    return m;
}

static void reference(const layer_case *c, ref_layer *ref)
{
    const int dt = c->dtype;
    const int64_t n = c->n, tq = c->tq, tk = c->tk, hq = c->hq;
    const int64_t dk = c->dk, dv = c->dv, g = c->hq / c->hkv;
    const int64_t wq = hq * dk, wk = c->hkv * dk, wv = c->hkv * dv;
    const int64_t wo = hq * dv;
    const tbuf *xkv = c->self ? &c->x_q : &c->x_kv;
    const int64_t *pkv = c->self ? c->pos_q : c->pos_kv;
    long double sq = 0, sk = 0, sv = 0, so = 0;
    long double *q = project(c, &c->x_q, tq, c->pos_q, c->w_q, c->b_q, wq, &sq);
    long double *k = project(c, xkv, tk, pkv, c->w_k, c->b_k, wk, &sk);
    long double *v = project(c, xkv, tk, pkv, c->w_v, c->b_v, wv, &sv);
    if (c->positions >= SDPA_POS_ROPE_HALF) {
        rope(c, q, tq, c->pos_q, hq, dk);
        rope(c, k, tk, pkv, c->hkv, dk);
    }
    const long double scale =
        c->scale != 0 ? c->scale : 1.0L / sqrtl((long double)dk);
    long double *o = calloc((size_t)(n * tq * wo), sizeof *o);
    ref->p = calloc((size_t)(n * hq * tq * tk), sizeof *ref->p);
    long double *s = malloc((size_t)tk * sizeof *s);
    assert_true(o && ref->p && s);
    for (int64_t b = 0; b < n; b++)
        for (int64_t h = 0; h < hq; h++)
            for (int64_t i = 0; i < tq; i++) {
                const int64_t len = c->kv_lens ? c->kv_lens[b] : tk;
                const long double *qi = q + (b * tq + i) * wq + h * dk;
                long double m = -INFINITY;
                for (int64_t j = 0; j < tk; j++) {
                    bool allowed = j < len;
                    if (c->use_mask && tget(&c->mask, b, 0, i, j) != 0)
                        allowed = false;
                    if (!ref_causal_allows(c->causal, i, j, len, tq))
                        allowed = false;
                    s[j] = -INFINITY;
                    if (!allowed)
                        continue;
                    const long double *kj =
                        k + (b * tk + j) * wk + (h / g) * dk;
                    long double dot = 0;
                    for (int64_t d = 0; d < dk; d++)
                        dot += qi[d] * kj[d];
                    s[j] = scale * dot;
                    m = s[j] > m ? s[j] : m;
                }
                if (m == -INFINITY)
                    continue; /* no allowed key: a zero row */
                long double sum = 0;
                for (int64_t j = 0; j < tk; j++)
                    sum += s[j] == -INFINITY ? 0 : expl(s[j] - m);
                long double *pi = ref->p + ((b * hq + h) * tq + i) * tk;
                for (int64_t j = 0; j < tk; j++) {
                    pi[j] = s[j] == -INFINITY ? 0 : expl(s[j] - m) / sum;
                    if (pi[j] == 0)
                        continue;
                    const long double *vj =
                        v + (b * tk + j) * wv + (h / g) * dv;
                    for (int64_t d = 0; d < dv; d++)
                        o[(b * tq + i) * wo + h * dv + d] += pi[j] * vj[d];
                }
            }
    /* y = O W_O + b_O */
    ref->y = calloc((size_t)(n * tq * c->e), sizeof *ref->y);
    assert_non_null(ref->y);
    so = 0;
    for (int64_t r = 0; r < n * tq; r++)
        for (int64_t j = 0; j < c->e; j++) {
            long double acc = c->b_o ? aget(c->b_o, dt, (size_t)j) : 0;
            long double sa = fabsl(acc);
            for (int64_t d = 0; d < wo; d++) {
                long double term =
                    o[r * wo + d] * aget(c->w_o, dt, (size_t)(d * c->e + j));
                acc += term;
                sa += fabsl(term);
            }
            ref->y[r * c->e + j] = acc;
            so = sa > so ? sa : so;
        }

    /* Tolerances, step by step, from the dtype's eps: a projection loses
     * (e + 2)·eps of its Σ|terms| (the table's rounding and the rotation
     * add a few eps of its size); a logit scale·Σ_d (|q_d| δk + |k_d| δq)
     * plus (dk + 2)·eps of its own Σ|terms|; a softmax turns a logit error
     * δs into weights off by at most 2·δs relative (Σ_j δp_j |v_j| ≤
     * 2 δs |v|max), plus (tk + 4)·eps; the output row adds δv; y its own
     * (hq·dv + 2)·eps·Σ|terms| and δo times the largest column sum of
     * |W_O|. Twice that is asserted. */
    const long double eps = dt == SDPA_FLOAT32 ? (long double)FLT_EPSILON
                                               : (long double)DBL_EPSILON;
    const long double aq = absmax(q, (size_t)(n * tq * wq));
    const long double ak = absmax(k, (size_t)(n * tk * wk));
    const long double av = absmax(v, (size_t)(n * tk * wv));
    long double wo_abs = 0; /* largest column sum of |W_O| */
    for (int64_t j = 0; j < c->e; j++) {
        long double col = 0;
        for (int64_t d = 0; d < wo; d++)
            col += fabsl(aget(c->w_o, dt, (size_t)(d * c->e + j)));
        wo_abs = col > wo_abs ? col : wo_abs;
    }
    const long double e_steps = (long double)c->e + 2;
    const long double dq = e_steps * eps * sq + 4 * eps * aq;
    const long double dkk = e_steps * eps * sk + 4 * eps * ak;
    const long double dvv = e_steps * eps * sv;
    const long double ds =
        scale * (long double)dk * (aq * dkk + ak * dq) +
        ((long double)dk + 2) * eps * scale * (long double)dk * aq * ak;
    const long double dp = 2 * ds + ((long double)tk + 4) * eps;
    const long double d_o = dp * av + dvv;
    ref->tol_y = 2 * (d_o * wo_abs + ((long double)wo + 2) * eps * so);
    ref->tol_p = 2 * dp;
    free(s);
    free(o);
    free(q);
    free(k);
    free(v);
}

/* ---- The random cases. ------------------------------------------------- */

static unsigned char *copy_of(const void *p, size_t bytes)
{
    unsigned char *c = malloc(bytes ? bytes : 1);
    assert_non_null(c);
    memcpy(c, p, bytes);
    return c;
}

static void test_random(void **state)
{
    const int dtype = **(int **)state;
    rng r = {2024 + (uint64_t)dtype};
    sdpa_ctx *ctx = tp_ctx(0);
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    long double worst_y = 0, worst_p = 0;
    int counts[4] = {0, 0, 0, 0}, cross = 0, gqa = 0;
    for (int iter = 0; iter < 300; iter++) {
        layer_case c;
        case_make(&c, dtype, &r);
        counts[c.positions]++;
        cross += !c.self;
        gqa += c.hkv < c.hq;
        tp_set(ctx, SDPA_OPT_NUM_THREADS, c.threads);
        sdpa_forward_args attn;
        sdpa_mha_args a = case_args(&c, &attn);
        /* inputs, and y's memory outside its view, before the call */
        size_t xq_bytes = c.x_q.elems * c.x_q.esize;
        unsigned char *xq0 = copy_of(c.x_q.mem, xq_bytes);
        unsigned char *w0 =
            copy_of(c.w_o, (size_t)(c.hq * c.dv * c.e) * kind_size(dtype));
        unsigned char *y0 = copy_of(c.y.mem, c.y.elems * c.y.esize);
        unsigned char *y_logical = tbuf_logical_map(&c.y);

        int status = sdpa_mha_forward(ctx, &a);
        if (status != SDPA_OK)
            fail_msg("case %d: %s: %s", iter, sdpa_status_string(status),
                     sdpa_ctx_last_error(ctx));
        assert_string_equal(sdpa_ctx_last_error(ctx), "");
        assert_memory_equal(c.x_q.mem, xq0, xq_bytes);
        assert_memory_equal(c.w_o, w0,
                            (size_t)(c.hq * c.dv * c.e) * kind_size(dtype));
        for (size_t i = 0; i < c.y.elems; i++)
            if (!y_logical[i])
                assert_memory_equal((char *)c.y.mem + i * c.y.esize,
                                    y0 + i * c.y.esize, c.y.esize);

        ref_layer ref;
        reference(&c, &ref);
        for (int64_t b = 0; b < c.n; b++)
            for (int64_t i = 0; i < c.tq; i++)
                for (int64_t j = 0; j < c.e; j++) {
                    long double want = ref.y[(b * c.tq + i) * c.e + j];
                    long double got = (long double)tget(&c.y, b, 0, i, j);
                    long double err = fabsl(got - want);
                    if (!(err <= ref.tol_y))
                        fail_msg(
                            "case %d (%s, pos %d, self %d, n %lld tq "
                            "%lld tk %lld e %lld hq %lld hkv %lld dk "
                            "%lld dv %lld): y[%lld, %lld, %lld] = "
                            "%.12Lg, want %.12Lg (tolerance %.3Lg)",
                            iter, dt_name(dtype), c.positions, c.self,
                            (long long)c.n, (long long)c.tq, (long long)c.tk,
                            (long long)c.e, (long long)c.hq, (long long)c.hkv,
                            (long long)c.dk, (long long)c.dv, (long long)b,
                            (long long)i, (long long)j, got, want, ref.tol_y);
                    worst_y =
                        err / ref.tol_y > worst_y ? err / ref.tol_y : worst_y;
                }
        if (c.want_weights)
            for (int64_t b = 0; b < c.n; b++)
                for (int64_t h = 0; h < c.hq; h++)
                    for (int64_t i = 0; i < c.tq; i++)
                        for (int64_t j = 0; j < c.tk; j++) {
                            long double want =
                                ref.p[((b * c.hq + h) * c.tq + i) * c.tk + j];
                            long double err = fabsl(
                                (long double)tget(&c.weights, b, h, i, j) -
                                want);
                            assert_true(err <= ref.tol_p);
                            worst_p = err / ref.tol_p > worst_p
                                          ? err / ref.tol_p
                                          : worst_p;
                        }
        free(ref.y);
        free(ref.p);
        free(xq0);
        free(w0);
        free(y0);
        free(y_logical);
        case_free(&c);
    }
    print_message("  %s: 300 cases (positions none/sin/half/interleaved "
                  "%d/%d/%d/%d, cross %d, GQA %d); largest error / "
                  "tolerance: y %.3Lg, weights %.3Lg\n",
                  dt_name(dtype), counts[0], counts[1], counts[2], counts[3],
                  cross, gqa, worst_y, worst_p);
    sdpa_ctx_destroy(ctx);
}

/* y = x_q in place gives the out-of-place result, bit for bit. */
static void test_in_place(void **state)
{
    const int dtype = **(int **)state;
    rng r = {77};
    for (int pos = SDPA_POS_NONE; pos <= SDPA_POS_ROPE_INTERLEAVED; pos++) {
        layer_case c;
        do
            case_make(&c, dtype, &r);
        while ((c.positions != pos || !c.self || c.want_weights ||
                c.layout_x != c.layout_y) &&
               (case_free(&c), 1));
        sdpa_ctx *ctx = tp_ctx(0);
        tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
        sdpa_forward_args attn;
        sdpa_mha_args a = case_args(&c, &attn);
        assert_int_equal(sdpa_mha_forward(ctx, &a), SDPA_OK);
        a.y = a.x_q;
        assert_int_equal(sdpa_mha_forward(ctx, &a), SDPA_OK);
        for (int64_t b = 0; b < c.n; b++)
            for (int64_t i = 0; i < c.tq; i++)
                for (int64_t j = 0; j < c.e; j++)
                    assert_true(tget(&c.x_q, b, 0, i, j) ==
                                tget(&c.y, b, 0, i, j));
        sdpa_ctx_destroy(ctx);
        case_free(&c);
    }
}

/* A repeated call of the same shape allocates nothing (the layer's
 * scratch and sdpa_forward's are kept), whatever the positions, with and
 * without the weights output. */
static void test_zero_allocations(void **state)
{
    const int dtype = **(int **)state;
    rng r = {31337};
    for (int iter = 0; iter < 24; iter++) {
        layer_case c;
        case_make(&c, dtype, &r);
        counting_alloc ca;
        sdpa_allocator al = ca_start(&ca, -1);
        sdpa_ctx *ctx;
        assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
        tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
        tp_set(ctx, SDPA_OPT_NUM_THREADS, c.threads);
        sdpa_forward_args attn;
        sdpa_mha_args a = case_args(&c, &attn);
        assert_int_equal(sdpa_mha_forward(ctx, &a), SDPA_OK);
        long double first = tget(&c.y, 0, 0, 0, 0);
        long allocs = ca.allocs;
        assert_true(allocs > 1); /* the context and some scratch */
        for (int again = 0; again < 3; again++) {
            assert_int_equal(sdpa_mha_forward(ctx, &a), SDPA_OK);
            assert_int_equal(ca.allocs, allocs);
        }
        assert_true(tget(&c.y, 0, 0, 0, 0) == first); /* deterministic */
        sdpa_ctx_destroy(ctx);
        assert_int_equal(ca.live_bytes, 0);
        assert_int_equal(ca.bad_free, 0);
        assert_int_equal(ca.bad_alignment, 0);
        case_free(&c);
    }
}

/* ---- Errors: the status, a message naming the layer, y untouched. ----- */

static void expect_error(sdpa_ctx *ctx, const sdpa_mha_args *a,
                         const layer_case *c, int status, const char *what)
{
    fill_sentinel(c->y.mem, c->y.elems * c->y.esize);
    int got = sdpa_mha_forward(ctx, a);
    if (got != status)
        fail_msg("%s: got %s (%s), want %s", what, sdpa_status_string(got),
                 sdpa_ctx_last_error(ctx), sdpa_status_string(status));
    assert_int_equal(first_non_sentinel(c->y.mem, c->y.elems * c->y.esize), -1);
    if (ctx)
        assert_non_null(strstr(sdpa_ctx_last_error(ctx), "sdpa_mha_forward"));
}

static void test_errors(void **state)
{
    const int dtype = **(int **)state;
    rng r = {5};
    layer_case c;
    do /* cross-attention, RoPE, biases, no options */
        case_make(&c, dtype, &r);
    while ((c.self || c.positions != SDPA_POS_ROPE_HALF || !c.biases ||
            c.want_weights || c.use_mask || c.use_kv_lens || c.n < 2 ||
            c.tq < 2 || c.dk < 2 || c.hq < 2 || c.causal) &&
           (case_free(&c), 1));
    counting_alloc ca;
    sdpa_allocator al = ca_start(&ca, -1);
    sdpa_ctx *ctx;
    assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
    sdpa_forward_args attn;
    const sdpa_mha_args good = case_args(&c, &attn);
    sdpa_mha_args a = good;
    assert_int_equal(sdpa_mha_forward(ctx, &a), SDPA_OK);

    assert_int_equal(sdpa_mha_forward(NULL, &a), SDPA_ERR_NULL_POINTER);
    expect_error(ctx, NULL, &c, SDPA_ERR_NULL_POINTER, "args NULL");
#define EXPECT(status, edit)                                                   \
    do {                                                                       \
        a = good;                                                              \
        attn = (sdpa_forward_args)SDPA_FORWARD_ARGS_INIT;                      \
        edit;                                                                  \
        expect_error(ctx, &a, &c, status, #edit);                              \
    } while (0)
    EXPECT(SDPA_ERR_STRUCT_SIZE, a.struct_size = 367);
    EXPECT(SDPA_ERR_BAD_DTYPE, a.dtype = 0);
    EXPECT(SDPA_ERR_BAD_DTYPE, a.dtype = 7);
    EXPECT(SDPA_ERR_NULL_POINTER, a.x_q.data = NULL);
    EXPECT(SDPA_ERR_NULL_POINTER, a.y.data = NULL);
    EXPECT(SDPA_ERR_NULL_POINTER, a.w_q = NULL);
    EXPECT(SDPA_ERR_NULL_POINTER, a.w_k = NULL);
    EXPECT(SDPA_ERR_NULL_POINTER, a.w_v = NULL);
    EXPECT(SDPA_ERR_NULL_POINTER, a.w_o = NULL);
    EXPECT(SDPA_ERR_BAD_DIM, a.heads_q = 0);
    EXPECT(SDPA_ERR_BAD_DIM, a.heads_kv = -1);
    EXPECT(SDPA_ERR_BAD_DIM, a.dim_k = -2);
    EXPECT(SDPA_ERR_BAD_DIM, a.dim_v = -1);
    EXPECT(SDPA_ERR_BAD_DIM, a.x_q.shape[2] = 0);
    EXPECT(SDPA_ERR_BAD_DIM, a.x_kv.shape[3] = -1);
    EXPECT(SDPA_ERR_HEAD_GROUPING, a.heads_kv = c.hq + 1);
    EXPECT(SDPA_ERR_SHAPE_MISMATCH,
           (a.dim_k = 0, a.heads_q = c.e + 1, a.heads_kv = 1));
    EXPECT(SDPA_ERR_SHAPE_MISMATCH, a.x_q.shape[1] = 2);
    EXPECT(SDPA_ERR_SHAPE_MISMATCH, a.x_kv.shape[0] = c.n + 1);
    EXPECT(SDPA_ERR_SHAPE_MISMATCH, a.y.shape[2] = c.tq - 1);
    EXPECT(SDPA_ERR_SHAPE_MISMATCH, a.y.shape[3] = c.e + 1);
    EXPECT(SDPA_ERR_BAD_STRIDE, a.x_q.stride[2] = -1);
    EXPECT(SDPA_ERR_BAD_STRIDE, a.x_kv.stride[2] = c.e - 1);
    EXPECT(SDPA_ERR_BAD_STRIDE, a.y.stride[3] = 2);
    EXPECT(SDPA_ERR_BAD_STRIDE, a.y.stride[0] = 0); /* items share rows */
    EXPECT(SDPA_ERR_OVERFLOW, a.x_q.stride[2] = INT64_MAX / 4);
    EXPECT(SDPA_ERR_OVERLAP, a.y.data = (void *)(uintptr_t)a.w_o);
    EXPECT(SDPA_ERR_OVERLAP, a.y.data = (void *)(uintptr_t)a.b_q);
    EXPECT(SDPA_ERR_OVERLAP, (a.attn = &attn, attn.lse = c.y.t));
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE, a.positions = 4);
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE, a.positions = -1);
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE,
           (a.positions = SDPA_POS_NONE, a.pos_offset = 3, a.pos_base = 0));
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE,
           (a.positions = SDPA_POS_NONE, a.pos_base = 10000, a.pos_offset = 0));
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE, (a.dim_k = 3, a.dim_v = 2));
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE,
           (a.x_kv.data = NULL, a.pos_kv = (const int64_t *)&c.n));
    EXPECT(SDPA_ERR_BAD_SCALE, a.pos_base = -1);
    EXPECT(SDPA_ERR_BAD_SCALE, a.pos_base = NAN);
    EXPECT(SDPA_ERR_BAD_SCALE, a.pos_base = 0.5); /* below 1 */
    EXPECT(SDPA_ERR_OVERFLOW,
           (a.pos_q = NULL, a.pos_kv = NULL, a.pos_offset = INT64_MAX));
    /* attn: the tensors the layer makes, and its own struct rules */
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE, (a.attn = &attn, attn.q = c.y.t));
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE, (a.attn = &attn, attn.out = c.y.t));
    EXPECT(SDPA_ERR_BAD_OPTION_VALUE, (a.attn = &attn, attn.logits = c.y.t));
    EXPECT(SDPA_ERR_BAD_DTYPE, (a.attn = &attn, attn.dtype = 3 - dtype));
    EXPECT(SDPA_ERR_STRUCT_SIZE, (a.attn = &attn, attn.struct_size = 100));
    /* errors of sdpa_forward itself, found before y is written */
    EXPECT(SDPA_ERR_BAD_CAUSAL, (a.attn = &attn, attn.causal = 9));
    EXPECT(SDPA_ERR_BAD_SCALE, (a.attn = &attn, attn.scale = -1));
    int64_t lens[3] = {0, 0, 0};
    EXPECT(SDPA_ERR_FULLY_MASKED_ROW, (a.attn = &attn, attn.kv_lens = lens));
    lens[0] = c.tk + 1;
    EXPECT(SDPA_ERR_BAD_KV_LEN, (a.attn = &attn, attn.kv_lens = lens));
    attn = (sdpa_forward_args)SDPA_FORWARD_ARGS_INIT;
    /* a struct_size beyond this library's with a non-zero tail */
    TP_GROWN(sdpa_mha_args, grown, good);
    expect_error(ctx, &grown.args, &c, SDPA_ERR_STRUCT_TAIL, "tail");
    grown.tail = 0; /* a zero tail is fine */
    assert_int_equal(sdpa_mha_forward(ctx, &grown.args), SDPA_OK);
    /* the frozen version-1 size */
    a = good;
    a.struct_size = 368;
    assert_int_equal(sdpa_mha_forward(ctx, &a), SDPA_OK);
    sdpa_ctx_destroy(ctx);

    /* allocation failure, at each allocation a first call makes */
    for (long k = 1;; k++) {
        ca_reset(&ca, -1);
        ca.fail_at = -1;
        al = ca_allocator(&ca);
        assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
        ca.fail_at = k; /* request number k (0 was the context) */
        a = good;
        fill_sentinel(c.y.mem, c.y.elems * c.y.esize);
        int status = sdpa_mha_forward(ctx, &a);
        sdpa_ctx_destroy(ctx);
        assert_int_equal(ca.live_bytes, 0);
        if (status == SDPA_OK)
            break; /* every allocation has been refused once */
        assert_int_equal(status, SDPA_ERR_OUT_OF_MEMORY);
        assert_int_equal(first_non_sentinel(c.y.mem, c.y.elems * c.y.esize),
                         -1);
    }
    case_free(&c);
#undef EXPECT
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TP_BOTH(test_random),
        TP_BOTH(test_in_place),
        TP_BOTH(test_zero_allocations),
        TP_BOTH(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
