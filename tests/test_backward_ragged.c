/*
 * sdpa_backward on ragged batches (seqs, q_offsets, kv_offsets; include/
 * sdpa.h at sdpa_backward_args), against what the header promises:
 *
 *   - each sequence's dq, dk and dv are bitwise those of a rectangular
 *     sdpa_backward on its own views (N = 1, the ragged fields 0, on a
 *     context with the same options), dsinks the sum of those calls'
 *     dsinks in sequence order, for 1, 2 and 3 threads and the caller's
 *     parallel-for; the views are cut here from the packed tensors by
 *     the header's rules, independently of the library's slicing;
 *   - within the bounds of the long-double gradient oracle
 *     (tests/common/oracle.c) per sequence, exactly 0 where no term
 *     reaches (keys no row of their sequence sees, empty rows), and
 *     against central differences of the ragged forward in float64;
 *   - a sequence without query rows gets dk = dv = +0 for its keys
 *     (packed rows or batched item), one without keys dq = +0, and every
 *     K and V row that no row of its sequence may see holds NaN: it must
 *     never be read;
 *   - every bad ragged input has its status, a message naming it (and the
 *     sequence), and leaves every byte of the outputs as it was, padding
 *     and guard rows included; so does running out of memory at any
 *     allocation; a repeated call allocates nothing.
 *
 * Random configurations (fixed seeds) mix 1..5 sequences of 0, 1 or more
 * query rows and keys, packed and batched keys with kv_lens, both causal
 * anchors, windows, ALiBi, sinks with dsinks, soft-cap, GQA, layouts with
 * padded rows, small tiles (many key blocks per sequence) and both
 * empty-row policies; float and double.
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
#include "oracle.h"
#include "problem.h"
#include "testutil.h"

enum { MAX_SEQS = 6, MAX_H = TP_MAX_H };

/* One ragged problem. */
typedef struct rcfg {
    uint64_t seed;
    int dtype;
    int64_t seqs, Hq, Hkv, Dk, Dv;
    int64_t tq[MAX_SEQS], tk[MAX_SEQS]; /* batched: every tk is the Tk */
    int packed;
    int use_kvlens;
    int64_t kv_lens[MAX_SEQS];
    int lay_q, lay_kv;
    int64_t pad;
    tp_call x; /* causal, scale, soft-cap, window, ALiBi, sinks */
    int want_dsinks, empty_zero;
    int64_t block_q, block_k;
    double amp;
} rcfg;

/* Its tensors (each with a guard row after every head: never written)
 * and the ragged calls. */
typedef struct rinst {
    int64_t q_off[MAX_SEQS + 1], kv_off[MAX_SEQS + 1];
    tbuf q, k, v, out, lse, dout, dq, dk, dv;
    double dsinks[MAX_H + 2]; /* [0] and [Hq + 1]: guards */
    sdpa_forward_args fa;
    sdpa_backward_args ba;
} rinst;

static void cfg_print(const rcfg *c)
{
    print_message(
        "  cfg seed=%llu %s seqs=%lld Hq=%lld Hkv=%lld Dk=%lld "
        "Dv=%lld %s causal=%d kv_lens=%d window=%d(%lld,%lld) "
        "cap=%g scale=%g alibi=%d sinks=%d dsinks=%d zero=%d "
        "blocks=%lld,%lld lengths",
        (unsigned long long)c->seed, c->dtype == SDPA_FLOAT32 ? "f32" : "f64",
        (long long)c->seqs, (long long)c->Hq, (long long)c->Hkv,
        (long long)c->Dk, (long long)c->Dv, c->packed ? "packed" : "batched",
        c->x.causal, c->use_kvlens, c->x.use_window, (long long)c->x.win_left,
        (long long)c->x.win_right, c->x.softcap, c->x.scale, c->x.use_alibi,
        c->x.use_sinks, c->want_dsinks, c->empty_zero, (long long)c->block_q,
        (long long)c->block_k);
    for (int64_t b = 0; b < c->seqs; ++b)
        print_message(" %lldx%lld(%lld)", (long long)c->tq[b],
                      (long long)c->tk[b], (long long)c->kv_lens[b]);
    print_message("\n");
}

/* 0, 1 or up to `most` (rows or keys of a sequence). */
static int64_t draw_length(rng *r, int64_t most, int allow_zero)
{
    int64_t m = rng_int(r, 0, 5);
    return m == 0 && allow_zero ? 0 : m <= 1 ? 1 : rng_int(r, 1, most);
}

static void cfg_random(rcfg *c, uint64_t seed, int dtype)
{
    rng r = {seed * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)dtype};
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->dtype = dtype;
    static const int64_t hq_choices[] = {1, 2, 3, 4, 6, 8};
    c->seqs = rng_int(&r, 1, MAX_SEQS - 1);
    c->Hq = hq_choices[rng_int(&r, 0, 5)];
    c->Hkv = tp_draw_hkv(&r, c->Hq);
    c->Dk = rng_int(&r, 1, 16);
    c->Dv = rng_int(&r, 0, 2) == 0 ? c->Dk : rng_int(&r, 1, 16);
    c->packed = rng_int(&r, 0, 2) != 0;
    const int64_t batched_tk = draw_length(&r, 24, 0);
    int64_t most_tk = 1;
    for (int64_t b = 0; b < c->seqs; ++b) {
        c->tq[b] = draw_length(&r, 20, 1);
        c->tk[b] = c->packed ? draw_length(&r, 24, 1) : batched_tk;
        most_tk = c->tk[b] > most_tk ? c->tk[b] : most_tk;
    }
    c->use_kvlens = rng_int(&r, 0, 2) == 0;
    for (int64_t b = 0; b < c->seqs; ++b) {
        int64_t m = rng_int(&r, 0, 4);
        c->kv_lens[b] = !c->use_kvlens || m == 1 ? c->tk[b]
                        : m == 0                 ? 0
                                                 : rng_int(&r, 0, c->tk[b]);
    }
    c->lay_q = (int)rng_int(&r, 0, 1);
    c->lay_kv = (int)rng_int(&r, 0, 1);
    c->pad = rng_int(&r, 0, 2);
    c->x.causal = (int)rng_int(&r, 0, 2);
    tp_draw_scale(&c->x, &r);
    int64_t cm = rng_int(&r, 0, 4);
    c->x.softcap = cm == 0 ? 1.0 : cm == 1 ? 5.0 : 0.0;
    tp_draw_window(&c->x, &r, most_tk);
    c->x.use_alibi = rng_int(&r, 0, 2) == 0;
    c->x.use_sinks = rng_int(&r, 0, 2) == 0;
    c->want_dsinks = c->x.use_sinks && rng_int(&r, 0, 3) != 0;
    for (int h = 0; h < MAX_H; ++h) {
        c->x.slopes[h] = rng_sym(&r, 0.3);
        c->x.sinks[h] = rng_sym(&r, 3.0);
    }
    c->empty_zero = rng_int(&r, 0, 3) != 0;
    static const int64_t blocks[] = {0, 0, 1, 3, 8};
    c->block_q = blocks[rng_int(&r, 0, 4)];
    c->block_k = blocks[rng_int(&r, 0, 4)];
    double se = c->x.scale == 0.0 ? 1.0 / sqrt((double)c->Dk) : c->x.scale;
    c->amp = sqrt((1.0 + 7.0 * rng_unit(&r)) / (se * (double)c->Dk));
}

/* ---- Tensors. ----------------------------------------------------------- */

/* A [n, h, t, d] view with a guard row after each head's t rows. */
static void make_guarded(tbuf *x, int dtype, int64_t n, int64_t h, int64_t t,
                         int64_t d, int layout, int64_t pad)
{
    tbuf_make(x, dtype, n, h, t + 1, d, layout, pad);
    x->t.shape[2] = t;
}

/* Key extents: packed [1, Hkv, total_k, D], batched [seqs, Hkv, Tk, D]. */
static int64_t key_items(const rcfg *c)
{
    return c->packed ? 1 : c->seqs;
}

static int64_t key_rows(const rcfg *c, const rinst *s)
{
    return c->packed ? s->kv_off[c->seqs] : c->tk[0];
}

/* Where key j of sequence b lives in the packed or batched tensors. */
static void key_at(const rcfg *c, const rinst *s, int64_t b, int64_t j,
                   int64_t *item, int64_t *row)
{
    *item = c->packed ? 0 : b;
    *row = c->packed ? s->kv_off[b] + j : j;
}

static void inst_make(rinst *s, const rcfg *c)
{
    rng r = {c->seed ^ UINT64_C(0x5DEECE66DA5A5A5A)};
    memset(s, 0, sizeof *s);
    for (int64_t b = 0; b < c->seqs; ++b) {
        s->q_off[b + 1] = s->q_off[b] + c->tq[b];
        s->kv_off[b + 1] = s->kv_off[b] + c->tk[b];
    }
    const int dt = c->dtype;
    const int64_t tq = s->q_off[c->seqs], nk = key_items(c);
    const int64_t tk = key_rows(c, s);
    make_guarded(&s->q, dt, 1, c->Hq, tq, c->Dk, c->lay_q, c->pad);
    make_guarded(&s->out, dt, 1, c->Hq, tq, c->Dv, c->lay_q, c->pad);
    make_guarded(&s->lse, dt, 1, c->Hq, tq, 1, LAYOUT_BHTD, 0);
    make_guarded(&s->dout, dt, 1, c->Hq, tq, c->Dv, c->lay_q, c->pad);
    make_guarded(&s->dq, dt, 1, c->Hq, tq, c->Dk, 1 - c->lay_q, c->pad);
    make_guarded(&s->k, dt, nk, c->Hkv, tk, c->Dk, c->lay_kv, c->pad);
    make_guarded(&s->v, dt, nk, c->Hkv, tk, c->Dv, c->lay_kv, c->pad);
    make_guarded(&s->dk, dt, nk, c->Hkv, tk, c->Dk, c->lay_kv, c->pad);
    make_guarded(&s->dv, dt, nk, c->Hkv, tk, c->Dv, 1 - c->lay_kv, c->pad);
    tbuf_fill_random(&s->q, &r, c->amp);
    tbuf_fill_random(&s->k, &r, c->amp);
    tbuf_fill_random(&s->v, &r, 1.0);
    tbuf_fill_random(&s->dout, &r, 1.0);

    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    tp_call x = c->x;
    x.use_kvlens = 0;
    tp_apply(&a, dt, &x);
    a.alibi_slopes = c->x.use_alibi ? c->x.slopes : NULL;
    a.sinks = c->x.use_sinks ? c->x.sinks : NULL;
    a.kv_lens = c->use_kvlens ? c->kv_lens : NULL;
    tp_views(&a, &s->q, &s->k, &s->v, NULL, NULL, &s->out, NULL, &s->lse, NULL);
    a.seqs = c->seqs;
    a.q_offsets = s->q_off;
    a.kv_offsets = c->packed ? s->kv_off : NULL;
    s->fa = a;

    sdpa_backward_args g = tp_backward_of(&a);
    g.seqs = a.seqs;
    g.q_offsets = a.q_offsets;
    g.kv_offsets = a.kv_offsets;
    g.dout = s->dout.t;
    g.dq = s->dq.t;
    g.dk = s->dk.t;
    g.dv = s->dv.t;
    if (c->want_dsinks)
        g.dsinks = s->dsinks + 1;
    s->ba = g;
}

static void inst_free(rinst *s)
{
    tbuf *all[] = {&s->q,    &s->k,  &s->v,  &s->out, &s->lse,
                   &s->dout, &s->dq, &s->dk, &s->dv,  NULL};
    tbuf_free_all(all);
}

static void reset_grads(rinst *s)
{
    tbuf *g[] = {&s->dq, &s->dk, &s->dv};
    for (int i = 0; i < 3; ++i)
        fill_sentinel(g[i]->mem, g[i]->elems * g[i]->esize);
    fill_sentinel(s->dsinks, sizeof s->dsinks);
}

/* Every byte of the outputs still the sentinel (all), or those outside
 * their logical views (!all). */
static int grads_untouched(const rinst *s, int all)
{
    const tbuf *g[] = {&s->dq, &s->dk, &s->dv};
    for (int i = 0; i < 3; ++i) {
        unsigned char *map = all ? NULL : tbuf_logical_map(g[i]);
        long bad = tp_untouched(g[i], map, all);
        free(map);
        if (bad >= 0)
            return 0;
    }
    const unsigned char *d = (const unsigned char *)s->dsinks;
    const size_t logical_end =
        s->ba.dsinks ? sizeof(double) * (size_t)(s->ba.q.shape[1] + 1) : 0;
    for (size_t b = 0; b < sizeof s->dsinks; ++b) {
        int logical = b >= sizeof(double) && b < logical_end;
        if ((all || !logical) && d[b] != SENTINEL_BYTE)
            return 0;
    }
    return 1;
}

/* ---- Sequence b as a rectangular call (tests/common/problem.c cuts it
 * by the header's rules). -------------------------------------------------
 */
static sdpa_backward_args seq_args(const rinst *s, int64_t b)
{
    sdpa_backward_args a = tp_ragged_sequence(&s->ba, b);
    a.dq = a.dk = a.dv = (sdpa_tensor){0};
    a.dsinks = NULL;
    return a;
}

static sdpa_forward_args forward_of(const sdpa_backward_args *a)
{
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    TP_COPY_SHARED(f, *a);
    return f;
}

/* One sequence's own call: its outputs, contiguous. */
typedef struct own {
    tbuf dq, dk, dv;
    double dsinks[MAX_H];
    int status;
} own;

static void own_call(sdpa_ctx *ctx, const rcfg *c, const rinst *s, int64_t b,
                     own *o)
{
    memset(o, 0, sizeof *o);
    sdpa_backward_args a = seq_args(s, b);
    tbuf_make(&o->dq, c->dtype, 1, c->Hq, c->tq[b], c->Dk, LAYOUT_BHTD, 0);
    tbuf_make(&o->dk, c->dtype, 1, c->Hkv, a.k.shape[2], c->Dk, LAYOUT_BHTD, 0);
    tbuf_make(&o->dv, c->dtype, 1, c->Hkv, a.v.shape[2], c->Dv, LAYOUT_BHTD, 0);
    a.dq = o->dq.t;
    a.dk = o->dk.t;
    a.dv = o->dv.t;
    a.dsinks = c->want_dsinks ? o->dsinks : NULL;
    o->status = sdpa_backward(ctx, &a);
}

static void own_free(own *o)
{
    tbuf *all[] = {&o->dq, &o->dk, &o->dv, NULL};
    tbuf_free_all(all);
}

/* The K and V rows no row of their sequence may see (all of a sequence
 * without rows) filled with NaN; whether some row has no allowed key. */
static int poison_unseen(const rcfg *c, rinst *s)
{
    int any_empty = 0;
    const int64_t g = c->Hq / c->Hkv;
    for (int64_t b = 0; b < c->seqs; ++b) {
        const int64_t keys = c->tk[b];
        unsigned char *seen = calloc((size_t)(c->Hkv * keys) + 1, 1);
        assert_non_null(seen);
        if (c->tq[b] > 0) {
            sdpa_backward_args a = seq_args(s, b);
            sdpa_forward_args f = forward_of(&a);
            ref_result ref;
            assert_int_equal(ref_forward(&f, &ref), 0);
            any_empty |= ref.any_empty;
            for (int64_t h = 0; h < c->Hq && keys > 0; ++h)
                for (int64_t i = 0; i < c->tq[b]; ++i)
                    for (int64_t j = 0; j < keys; ++j)
                        if (ref.allowed[(size_t)((h * c->tq[b] + i) * keys +
                                                 j)])
                            seen[(h / g) * keys + j] = 1;
            ref_free(&ref);
        }
        for (int64_t hk = 0; hk < c->Hkv; ++hk)
            for (int64_t j = 0; j < keys; ++j) {
                if (seen[hk * keys + j])
                    continue;
                int64_t item, row;
                key_at(c, s, b, j, &item, &row);
                for (int64_t d = 0; d < c->Dk; ++d)
                    tset(&s->k, item, hk, row, d, NAN);
                for (int64_t d = 0; d < c->Dv; ++d)
                    tset(&s->v, item, hk, row, d, NAN);
            }
        free(seen);
    }
    return any_empty;
}

/* ---- Checks. ------------------------------------------------------------ */

static int same_bits(const tbuf *x, int64_t a, int64_t b, int64_t c, int64_t d,
                     const tbuf *y, int64_t ya, int64_t yb, int64_t yc,
                     int64_t yd)
{
    const char *p =
        (const char *)x->mem + (size_t)toff(&x->t, a, b, c, d) * x->esize;
    const char *q =
        (const char *)y->mem + (size_t)toff(&y->t, ya, yb, yc, yd) * y->esize;
    return memcmp(p, q, x->esize) == 0;
}

static int is_plus_zero(const tbuf *x, int64_t a, int64_t b, int64_t c,
                        int64_t d)
{
    const unsigned char *p = (const unsigned char *)x->mem +
                             (size_t)toff(&x->t, a, b, c, d) * x->esize;
    for (size_t i = 0; i < x->esize; ++i)
        if (p[i] != 0)
            return 0;
    return 1;
}

/* The ragged outputs against the sequences' own calls, bitwise. */
static int matches_own(const rcfg *c, const rinst *s, const own *o)
{
    for (int64_t b = 0; b < c->seqs; ++b) {
        for (int64_t h = 0; h < c->Hq; ++h)
            for (int64_t i = 0; i < c->tq[b]; ++i)
                for (int64_t d = 0; d < c->Dk; ++d)
                    if (!same_bits(&s->dq, 0, h, s->q_off[b] + i, d, &o[b].dq,
                                   0, h, i, d)) {
                        print_message("  dq of sequence %lld, head %lld, row "
                                      "%lld differs from its own call\n",
                                      (long long)b, (long long)h, (long long)i);
                        return 0;
                    }
        for (int64_t hk = 0; hk < c->Hkv; ++hk)
            for (int64_t j = 0; j < c->tk[b]; ++j) {
                int64_t item, row;
                key_at(c, s, b, j, &item, &row);
                int ok = 1;
                for (int64_t d = 0; d < c->Dk && ok; ++d)
                    ok = c->tq[b] > 0 ? same_bits(&s->dk, item, hk, row, d,
                                                  &o[b].dk, 0, hk, j, d)
                                      : is_plus_zero(&s->dk, item, hk, row, d);
                for (int64_t d = 0; d < c->Dv && ok; ++d)
                    ok = c->tq[b] > 0 ? same_bits(&s->dv, item, hk, row, d,
                                                  &o[b].dv, 0, hk, j, d)
                                      : is_plus_zero(&s->dv, item, hk, row, d);
                if (!ok) {
                    print_message("  dk/dv of sequence %lld, KV head %lld, key "
                                  "%lld differs from %s\n",
                                  (long long)b, (long long)hk, (long long)j,
                                  c->tq[b] > 0 ? "its own call" : "+0");
                    return 0;
                }
            }
    }
    for (int64_t h = 0; c->want_dsinks && h < c->Hq; ++h) {
        double sum = 0;
        int first = 1;
        for (int64_t b = 0; b < c->seqs; ++b) {
            if (c->tq[b] == 0)
                continue;
            sum = first ? o[b].dsinks[h] : sum + o[b].dsinks[h];
            first = 0;
        }
        if (memcmp(&sum, &s->dsinks[1 + h], sizeof sum) != 0) {
            print_message("  dsinks[%lld] = %.17g, the sequences' sum %.17g\n",
                          (long long)h, s->dsinks[1 + h], sum);
            return 0;
        }
    }
    if (!grads_untouched(s, 0)) {
        print_message("  a guard or padding byte of an output was written\n");
        return 0;
    }
    return 1;
}

static double g_ratio[4]; /* largest error / tolerance: dq dk dv dsinks */

static int close_to(const char *what, int which, double got, long double ref,
                    long double bound, int support, long double eps)
{
    if (!support) {
        if (got == 0)
            return 1;
        print_message("  %s = %.17g where no term reaches: must be 0\n", what,
                      got);
        return 0;
    }
    long double tol = 2 * (bound + 2 * eps * fabsl(ref));
    long double e = fabsl((long double)got - ref);
    if (!(e <= tol)) {
        print_message("  %s = %.17g, oracle %.17Lg, tolerance %.3Lg\n", what,
                      got, ref, tol);
        return 0;
    }
    if (tol > 0 && (double)(e / tol) > g_ratio[which])
        g_ratio[which] = (double)(e / tol);
    return 1;
}

/* The ragged outputs against the oracle, sequence by sequence. */
static int matches_oracle(const rcfg *c, const rinst *s)
{
    const long double eps =
        c->dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    long double dsinks[MAX_H] = {0}, bounds[MAX_H] = {0};
    const bwd_extra none = {0, 0, 0, 0, 0, 0};
    for (int64_t b = 0; b < c->seqs; ++b) {
        if (c->tq[b] == 0)
            continue;
        sdpa_backward_args a = seq_args(s, b);
        bwd_ref r;
        assert_int_equal(ref_backward(&a, (double)eps, &none, &r), 0);
        int ok = 1;
        for (int64_t h = 0; h < c->Hq && ok; ++h) {
            dsinks[h] += r.dsinks[h];
            bounds[h] += r.ts[h];
            for (int64_t i = 0; i < c->tq[b] && ok; ++i)
                for (int64_t d = 0; d < c->Dk && ok; ++d) {
                    size_t x = bwd_dq_at(&r, 0, h, i) + (size_t)d;
                    ok = close_to("dq", 0,
                                  tget(&s->dq, 0, h, s->q_off[b] + i, d),
                                  r.dq[x], r.tq[x], r.sq[x], eps);
                }
        }
        for (int64_t hk = 0; hk < c->Hkv && ok; ++hk)
            for (int64_t j = 0; j < c->tk[b] && ok; ++j) {
                int64_t item, row;
                key_at(c, s, b, j, &item, &row);
                for (int64_t d = 0; d < c->Dk && ok; ++d) {
                    size_t x = bwd_dk_at(&r, 0, hk, j) + (size_t)d;
                    ok = close_to("dk", 1, tget(&s->dk, item, hk, row, d),
                                  r.dk[x], r.tk[x], r.sk[x], eps);
                }
                for (int64_t d = 0; d < c->Dv && ok; ++d) {
                    size_t x = bwd_dv_at(&r, 0, hk, j) + (size_t)d;
                    ok = close_to("dv", 2, tget(&s->dv, item, hk, row, d),
                                  r.dv[x], r.tv[x], r.sv[x], eps);
                }
            }
        bwd_ref_free(&r);
        if (!ok) {
            print_message("  (sequence %lld)\n", (long long)b);
            return 0;
        }
    }
    for (int64_t h = 0; c->want_dsinks && h < c->Hq; ++h)
        if (!close_to("dsinks", 3, s->dsinks[1 + h], dsinks[h], bounds[h], 1,
                      DBL_EPSILON))
            return 0;
    return 1;
}

/* ---- Running a configuration. ------------------------------------------ */

static void set_common(sdpa_ctx *ctx, const rcfg *c)
{
    tp_set_empty_rows(ctx, c->empty_zero);
    tp_set(ctx, SDPA_OPT_NUM_THREADS, 1);
    tp_set(ctx, SDPA_OPT_BLOCK_Q, c->block_q);
    tp_set(ctx, SDPA_OPT_BLOCK_K, c->block_k);
}

/* The ragged call on 1, 2 and 3 threads and the caller's parallel-for
 * (run 3): SDPA_OK and every output as the sequences' own calls wrote it. */
enum { RUNS = 4 };
static int ragged_run(sdpa_ctx *ctx, const rcfg *c, rinst *s, const own *o,
                      int run)
{
    test_pool tp = {.workers = 3};
    if (run == 3)
        assert_int_equal(
            sdpa_ctx_set_parallel_for(ctx, test_parallel_for, &tp, 3), SDPA_OK);
    else
        tp_set(ctx, SDPA_OPT_NUM_THREADS, run + 1);
    reset_grads(s);
    int rc = sdpa_backward(ctx, &s->ba);
    if (run == 3)
        assert_int_equal(sdpa_ctx_set_parallel_for(ctx, NULL, NULL, 0),
                         SDPA_OK);
    tp_set(ctx, SDPA_OPT_NUM_THREADS, 1);
    if (rc != SDPA_OK) {
        print_message("  ragged backward (run %d): %s: %s\n", run,
                      sdpa_status_string(rc), sdpa_ctx_last_error(ctx));
        return 0;
    }
    assert_string_equal(sdpa_ctx_last_error(ctx), "");
    if (!matches_own(c, s, o)) {
        print_message("  (run %d: %s)\n", run,
                      run == 3 ? "the caller's parallel-for" : "threads");
        return 0;
    }
    return 1;
}

typedef struct stats {
    long configs, refused, no_rows, no_keys, packed, batched, causal, window,
        alibi, sinks, softcap, gqa, failures;
} stats;

static void count(stats *st, const rcfg *c)
{
    st->configs++;
    for (int64_t b = 0; b < c->seqs; ++b) {
        st->no_rows += c->tq[b] == 0 && c->tk[b] > 0;
        st->no_keys += c->tq[b] > 0 && c->tk[b] == 0;
    }
    st->packed += c->packed;
    st->batched += !c->packed;
    st->causal += c->x.causal != SDPA_CAUSAL_NONE;
    st->window += c->x.use_window;
    st->alibi += c->x.use_alibi;
    st->sinks += c->x.use_sinks;
    st->softcap += c->x.softcap > 0;
    st->gqa += c->Hkv < c->Hq;
}

/* Runs c: returns 1 when everything held. */
static int run_config(sdpa_ctx *ctx, const rcfg *c, stats *st)
{
    rinst s;
    inst_make(&s, c);
    set_common(ctx, c);
    int empty = poison_unseen(c, &s);
    int rc = sdpa_forward(ctx, &s.fa);
    int good = 1;
    if (empty && !c->empty_zero) {
        /* refused by the forward, and by the backward, untouched */
        assert_int_equal(rc, SDPA_ERR_FULLY_MASKED_ROW);
        reset_grads(&s);
        rc = sdpa_backward(ctx, &s.ba);
        good = rc == SDPA_ERR_FULLY_MASKED_ROW && grads_untouched(&s, 1) &&
               strstr(sdpa_ctx_last_error(ctx), "sdpa_backward: sequence ");
        if (st)
            st->refused++;
        inst_free(&s);
        return good;
    }
    if (rc != SDPA_OK) {
        print_message("  ragged forward: %s\n", sdpa_ctx_last_error(ctx));
        inst_free(&s);
        return 0;
    }
    own o[MAX_SEQS];
    memset(o, 0, sizeof o);
    for (int64_t b = 0; b < c->seqs; ++b) {
        if (c->tq[b] == 0)
            continue; /* no call of its own: dk = dv = +0 */
        own_call(ctx, c, &s, b, &o[b]);
        if (o[b].status != SDPA_OK) {
            print_message("  own call of sequence %lld: %s\n", (long long)b,
                          sdpa_ctx_last_error(ctx));
            good = 0;
        }
    }
    for (int run = 0; run < RUNS && good; ++run)
        good = ragged_run(ctx, c, &s, o, run);
    if (good)
        good = matches_oracle(c, &s);
    for (int64_t b = 0; b < c->seqs; ++b)
        own_free(&o[b]);
    inst_free(&s);
    return good;
}

static void test_matches_sequences(void **state)
{
    const int dtype = *(int *)*state;
    sdpa_ctx *ctx = tp_ctx(0);
    stats st = {0};
    memset(g_ratio, 0, sizeof g_ratio);
    for (uint64_t seed = 1; seed <= 200; ++seed) {
        rcfg c;
        cfg_random(&c, seed, dtype);
        count(&st, &c);
        if (!run_config(ctx, &c, &st)) {
            if (st.failures < 10)
                cfg_print(&c);
            st.failures++;
        }
    }
    print_message("  %s: %ld configs (%ld refused as fully masked), %ld "
                  "packed, %ld batched; sequences without rows %ld, without "
                  "keys %ld; causal %ld, window %ld, ALiBi %ld, sinks %ld, "
                  "soft-cap %ld, GQA %ld; failures %ld\n",
                  dtype == SDPA_FLOAT32 ? "float" : "double", st.configs,
                  st.refused, st.packed, st.batched, st.no_rows, st.no_keys,
                  st.causal, st.window, st.alibi, st.sinks, st.softcap, st.gqa,
                  st.failures);
    print_message("  largest error/tolerance: dq %.3g dk %.3g dv %.3g dsinks "
                  "%.3g\n",
                  g_ratio[0], g_ratio[1], g_ratio[2], g_ratio[3]);
    sdpa_ctx_destroy(ctx);
    assert_int_equal(st.failures, 0);
    /* the draws reach every kind of sequence */
    assert_true(st.no_rows > 0 && st.no_keys > 0 && st.refused > 0);
}

/* ---- Hand-made configurations. ------------------------------------------ */

/* Four sequences of tq[b] rows and tk[b] packed keys (tk NULL: batched,
 * `keys` each), kv_lens their keys; everything else zero. */
static void cfg_shape(rcfg *c, uint64_t seed, int dtype, int64_t hq,
                      int64_t hkv, int64_t dk, int64_t dv, int packed,
                      const int64_t tq[4], const int64_t *tk, int64_t keys)
{
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->dtype = dtype;
    c->seqs = 4;
    c->Hq = hq;
    c->Hkv = hkv;
    c->Dk = dk;
    c->Dv = dv;
    c->packed = packed;
    for (int b = 0; b < 4; ++b) {
        c->tq[b] = tq[b];
        c->tk[b] = tk ? tk[b] : keys;
        c->kv_lens[b] = c->tk[b];
    }
}

/* Every feature at once (float64, GQA 4/2): bottom-right causal with a
 * window, kv_lens, soft-cap, ALiBi, sinks with dsinks; a sequence without
 * rows and (packed) one without keys. */
static void small_case(rcfg *c, int packed)
{
    const int64_t tq[4] = {4, 0, 3, 2}, tk[4] = {5, 3, 0, 6};
    cfg_shape(c, 31 + (uint64_t)packed, SDPA_FLOAT64, 4, 2, 3, 4, packed, tq,
              packed ? tk : NULL, 6);
    c->use_kvlens = 1;
    c->kv_lens[3] = 4;
    c->lay_kv = 1;
    c->pad = 1;
    tp_every_option(&c->x, 3);
    c->want_dsinks = 1;
    c->empty_zero = 1;
    c->amp = 0.9;
}

static void test_finite_differences(void **state)
{
    (void)state;
    for (int packed = 0; packed <= 1; ++packed) {
        rcfg c;
        small_case(&c, packed);
        rinst s;
        inst_make(&s, &c);
        sdpa_ctx *ctx = tp_ctx(0);
        set_common(ctx, &c);
        tp_fd_point at = {ctx, &s.fa, &s.dout, &s.out};
        assert_true(isfinite(tp_fd_loss(&at)) != 0);
        reset_grads(&s);
        assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
        tbuf dq = s.dq, dk = s.dk, dv = s.dv;
        double dsinks[MAX_H];
        memcpy(dsinks, s.dsinks + 1, sizeof(double) * (size_t)c.Hq);
        int bad = 0;
        double worst = 0;
        long checked = 0;
        const int64_t *qe = s.q.t.shape, *ke = s.k.t.shape;
        for (int64_t h = 0; h < qe[1]; ++h)
            for (int64_t i = 0; i < qe[2]; ++i)
                for (int64_t d = 0; d < qe[3]; ++d, ++checked)
                    bad |= tp_fd_check(tp_fd_loss, &at, &s.q, NULL, 0, h, i, d,
                                       tget(&dq, 0, h, i, d), "q", &worst);
        for (int64_t n = 0; n < ke[0]; ++n)
            for (int64_t h = 0; h < ke[1]; ++h)
                for (int64_t j = 0; j < ke[2]; ++j) {
                    for (int64_t d = 0; d < c.Dk; ++d, ++checked)
                        bad |=
                            tp_fd_check(tp_fd_loss, &at, &s.k, NULL, n, h, j, d,
                                        tget(&dk, n, h, j, d), "k", &worst);
                    for (int64_t d = 0; d < c.Dv; ++d, ++checked)
                        bad |=
                            tp_fd_check(tp_fd_loss, &at, &s.v, NULL, n, h, j, d,
                                        tget(&dv, n, h, j, d), "v", &worst);
                }
        for (int64_t h = 0; h < c.Hq; ++h, ++checked)
            bad |= tp_fd_check(tp_fd_loss, &at, NULL, &c.x.sinks[h], 0, h, 0, 0,
                               dsinks[h], "sinks", &worst);
        print_message("  %s keys: %ld partial derivatives, largest "
                      "error/tolerance %.3g\n",
                      packed ? "packed" : "batched", checked, worst);
        sdpa_ctx_destroy(ctx);
        inst_free(&s);
        assert_false(bad);
    }
}

/* One long sequence of a single KV head beside short ones, small tiles:
 * the long one's key blocks spread over 2 and 3 workers, adding to its dq
 * in turn, beside the short ones' items. */
static void split_case(rcfg *c, int dtype, int packed)
{
    const int64_t tq[4] = {1, 40, 0, 2}, tk[4] = {3, 45, 7, 1};
    cfg_shape(c, 77 + (uint64_t)packed, dtype, 2, 1, 6, 5, packed, tq,
              packed ? tk : NULL, 45);
    c->x.causal = SDPA_CAUSAL_TOP_LEFT;
    c->x.use_sinks = c->want_dsinks = 1;
    c->x.sinks[0] = 0.3;
    c->x.sinks[1] = -1.1;
    c->empty_zero = 1;
    c->block_q = 8;
    c->block_k = 16;
    c->amp = sqrt(4.0 / sqrt(6.0));
}

static void test_threads_bitwise(void **state)
{
    (void)state;
    sdpa_ctx *ctx = tp_ctx(0);
    for (int dtype = SDPA_FLOAT32; dtype <= SDPA_FLOAT64; ++dtype)
        for (int packed = 0; packed <= 1; ++packed) {
            rcfg c;
            split_case(&c, dtype, packed);
            int good = run_config(ctx, &c, NULL);
            if (!good)
                cfg_print(&c);
            assert_true(good);
            /* of two failures, every thread count reports the same one,
             * with its sequence and packed row */
            rinst s;
            inst_make(&s, &c);
            set_common(ctx, &c);
            assert_int_equal(sdpa_forward(ctx, &s.fa), SDPA_OK);
            tset(&s.lse, 0, 1, s.q_off[1] + 33, 0, NAN);
            tset(&s.lse, 0, 0, s.q_off[3] + 1, 0, NAN);
            char once[256] = "";
            for (int threads = 1; threads <= 3; ++threads) {
                tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
                assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_ERR_NONFINITE);
                if (threads == 1)
                    snprintf(once, sizeof once, "%s", sdpa_ctx_last_error(ctx));
                else
                    assert_string_equal(once, sdpa_ctx_last_error(ctx));
            }
            assert_non_null(strstr(once, "sdpa_backward: sequence 1, head 1, "
                                         "query row 33 (packed row 34)"));
            inst_free(&s);
        }
    sdpa_ctx_destroy(ctx);
}

/* The zero-row policy: sequences without rows get dk = dv = +0 for their
 * keys; without keys dq = +0 (an error under SDPA_EMPTY_ROWS_ERROR, unless
 * sinks); with no query row at all every key gets +0 and dsinks 0. */
static void test_empty_sequences(void **state)
{
    (void)state;
    sdpa_ctx *ctx = tp_ctx(0);
    for (int packed = 0; packed <= 1; ++packed)
        for (int sinks = 0; sinks <= 1; ++sinks) {
            rcfg c;
            small_case(&c, packed);
            c.dtype = SDPA_FLOAT32;
            c.x.use_sinks = c.want_dsinks = sinks;
            assert_true(run_config(ctx, &c, NULL));
            /* no row at all */
            for (int b = 0; b < 4; ++b)
                c.tq[b] = 0;
            rinst s;
            inst_make(&s, &c);
            set_common(ctx, &c);
            reset_grads(&s);
            assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
            assert_string_equal(sdpa_ctx_last_error(ctx), "");
            for (int64_t n = 0; n < s.dk.t.shape[0]; ++n)
                for (int64_t hk = 0; hk < c.Hkv; ++hk)
                    for (int64_t j = 0; j < s.dk.t.shape[2]; ++j) {
                        for (int64_t d = 0; d < c.Dk; ++d)
                            assert_true(is_plus_zero(&s.dk, n, hk, j, d));
                        for (int64_t d = 0; d < c.Dv; ++d)
                            assert_true(is_plus_zero(&s.dv, n, hk, j, d));
                    }
            for (int64_t h = 0; sinks && h < c.Hq; ++h)
                assert_true(s.dsinks[1 + h] == 0);
            assert_true(grads_untouched(&s, 0));
            inst_free(&s);
        }
    /* a sequence without keys and no sink: empty rows, refused under the
     * error policy, as the forward refuses them */
    rcfg c;
    small_case(&c, 1);
    c.x.use_sinks = c.want_dsinks = 0;
    rinst s;
    inst_make(&s, &c);
    set_common(ctx, &c);
    assert_int_equal(sdpa_forward(ctx, &s.fa), SDPA_OK);
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ERROR);
    assert_int_equal(sdpa_forward(ctx, &s.fa), SDPA_ERR_FULLY_MASKED_ROW);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_ERR_FULLY_MASKED_ROW);
    assert_non_null(strstr(sdpa_ctx_last_error(ctx), "sdpa_backward: "
                                                     "sequence 2: "));
    assert_true(grads_untouched(&s, 1));
    inst_free(&s);
    sdpa_ctx_destroy(ctx);
}

/* ---- Errors: status, message, outputs untouched. ------------------------ */
static void expect_error(sdpa_ctx *ctx, rinst *s, const sdpa_backward_args *a,
                         int status, const char *label, const char *says)
{
    reset_grads(s);
    int rc = sdpa_backward(ctx, a);
    const char *msg = sdpa_ctx_last_error(ctx);
    if (rc != status || strncmp(msg, "sdpa_backward: ", 15) != 0 ||
        (says && !strstr(msg, says)))
        print_message("  %s: expected %s (\"%s\"), got %s: %s\n", label,
                      sdpa_status_string(status), says ? says : "",
                      sdpa_status_string(rc), msg);
    assert_int_equal(rc, status);
    assert_true(strncmp(msg, "sdpa_backward: ", 15) == 0);
    if (says)
        assert_non_null(strstr(msg, says));
    if (!grads_untouched(s, 1))
        print_message("  %s: outputs written\n", label);
    assert_true(grads_untouched(s, 1));
}

static void test_errors(void **state)
{
    (void)state;
    sdpa_ctx *ctx = tp_ctx(0);
    rcfg c;
    small_case(&c, 1); /* tq 4 0 3 2, tk 5 3 0 6 */
    rinst s;
    inst_make(&s, &c);
    set_common(ctx, &c);
    assert_int_equal(sdpa_forward(ctx, &s.fa), SDPA_OK);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
    const sdpa_backward_args ok = s.ba;
    sdpa_backward_args a;
    const int64_t bad_start[5] = {1, 4, 4, 7, 9};
    const int64_t bad_order[5] = {0, 4, 3, 7, 9};
    const int64_t bad_end[5] = {0, 4, 4, 7, 8};
    const int64_t kv_start[5] = {2, 5, 8, 8, 14};
    const int64_t kv_order[5] = {0, 5, 4, 8, 14};
    const int64_t kv_end[5] = {0, 5, 8, 8, 15};
    const int64_t far_lens[4] = {5, 3, 1, 6};
    const double nan_sinks[4] = {0, NAN, 0, 0};
#define CASE(status, says, ...)                                                \
    do {                                                                       \
        a = ok;                                                                \
        __VA_ARGS__;                                                           \
        expect_error(ctx, &s, &a, status, #__VA_ARGS__, says);                 \
    } while (0)
    /* the ragged fields */
    CASE(SDPA_ERR_BAD_RAGGED, "seqs is -1", a.seqs = -1);
    CASE(SDPA_ERR_BAD_RAGGED, "q_offsets is NULL", a.q_offsets = NULL);
    CASE(SDPA_ERR_BAD_RAGGED, "seqs is 0", a.seqs = 0);
    CASE(SDPA_ERR_BAD_RAGGED, "kv_offsets is set",
         (a.seqs = 0, a.q_offsets = NULL));
    CASE(SDPA_ERR_BAD_RAGGED, "does not take mask", a.mask = a.q);
    CASE(SDPA_ERR_BAD_RAGGED, "does not take bias", a.bias = a.q);
    CASE(SDPA_ERR_BAD_RAGGED, "does not take dbias", a.dbias = a.dq);
    CASE(SDPA_ERR_BAD_RAGGED, "q.shape[0] is 2", a.q.shape[0] = 2);
    CASE(SDPA_ERR_BAD_RAGGED, "with kv_offsets k and v are packed",
         a.k.shape[0] = 2);
    CASE(SDPA_ERR_OFFSETS_START, "q_offsets[0] is 1", a.q_offsets = bad_start);
    CASE(SDPA_ERR_OFFSETS_ORDER, "q_offsets[2] is 3", a.q_offsets = bad_order);
    CASE(SDPA_ERR_OFFSETS_END, "q_offsets[4] (seqs) is 8",
         a.q_offsets = bad_end);
    CASE(SDPA_ERR_OFFSETS_START, "kv_offsets[0] is 2", a.kv_offsets = kv_start);
    CASE(SDPA_ERR_OFFSETS_ORDER, "kv_offsets[2] is 4", a.kv_offsets = kv_order);
    CASE(SDPA_ERR_OFFSETS_END, "kv_offsets[4] (seqs) is 15",
         a.kv_offsets = kv_end);
    CASE(SDPA_ERR_BAD_KV_LEN, "kv_lens[2] is 1", a.kv_lens = far_lens);
    /* the packed extents */
    CASE(SDPA_ERR_SHAPE_MISMATCH, "dq is [1, ., 8, .]", a.dq.shape[2] = 8);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "dout is [2, ., 9, .]", a.dout.shape[0] = 2);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "lse is [1, ., 3, .]", a.lse.shape[2] = 3);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "dk is [1, ., 13, .], but k is [1, ., 14",
         a.dk.shape[2] = 13);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "dv is [2, ., 14, .]", a.dv.shape[0] = 2);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "v.shape[2] is 13", a.v.shape[2] = 13);
    /* each sequence as its own call */
    CASE(SDPA_ERR_BAD_DTYPE, "grad_dtype 3 is neither",
         a.grad_dtype = SDPA_FLOAT16);
    CASE(SDPA_ERR_NULL_POINTER, "lse.data is NULL", a.lse.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "dsinks is set but sinks", a.sinks = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "sequence 0: dq.data is NULL",
         a.dq.data = NULL);
    CASE(SDPA_ERR_NULL_POINTER, "sequence 0: dk.data is NULL",
         a.dk.data = NULL);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "sequence 0: dk.shape[3]", a.dk.shape[3] = 4);
    CASE(SDPA_ERR_SHAPE_MISMATCH, "sequence 0: dout.shape[3]",
         a.dout.shape[3] = 3);
    CASE(SDPA_ERR_BAD_STRIDE, "sequence 0: dq", a.dq.stride[3] = 2);
    CASE(SDPA_ERR_BAD_STRIDE, "sequence 0: output dk", a.dk.stride[2] = 0);
    CASE(SDPA_ERR_BAD_SINK, "sequence 0: sinks[1]", a.sinks = nan_sinks);
    CASE(SDPA_ERR_BAD_WINDOW, "sequence 0: ", a.window_left = -3);
    CASE(SDPA_ERR_OVERLAP, "sequence 0: output dq overlaps input q",
         a.dq.data = a.q.data);
    CASE(SDPA_ERR_OVERLAP, "sequence 0: output dv overlaps output dk",
         a.dv.data = a.dk.data);
    /* the whole tensors */
    CASE(SDPA_ERR_OVERLAP, "output dsinks overlaps input q_offsets",
         a.dsinks = (double *)(uintptr_t)a.q_offsets);
    {
        /* dk over kv_lens[3], which only sequence 3 reads (its own call would
         * not see it) */
        int64_t *box = malloc(s.dk.elems * s.dk.esize + 64);
        assert_non_null(box);
        memcpy(box, c.kv_lens, 4 * sizeof *box);
        a = ok;
        a.kv_lens = box;
        a.dk.data = box + 3;
        expect_error(ctx, &s, &a, SDPA_ERR_OVERLAP, "dk over kv_lens",
                     "sdpa_backward: output dk overlaps input kv_lens");
        free(box);
    }
    /* heads 4 rows apart: each sequence's rows (4 at most) are apart, the
     * whole call's 9 are not: only the whole sees it */
    CASE(SDPA_ERR_BAD_STRIDE, "sdpa_backward: output dq has strides",
         (a.dq.stride[3] = 1, a.dq.stride[2] = c.Dk, a.dq.stride[1] = 4 * c.Dk,
          a.dq.stride[0] = 4 * c.Hq * c.Dk));
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ERROR);
    CASE(SDPA_ERR_FULLY_MASKED_ROW,
         "sequence 2: ", (a.sinks = NULL, a.dsinks = NULL));
    tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    {
        TP_GROWN(sdpa_backward_args, grown, ok);
        expect_error(ctx, &s, &grown.args, SDPA_ERR_STRUCT_TAIL, "tail", NULL);
    }
#undef CASE
    /* A NaN lse in a sequence is found during the computation, named by
     * the sequence and its own row. */
    tset(&s.lse, 0, 3, s.q_off[3] + 1, 0, NAN);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_ERR_NONFINITE);
    assert_non_null(strstr(sdpa_ctx_last_error(ctx),
                           "sequence 3, head 3, query row 1 (packed row 8)"));
    inst_free(&s);

    /* batched keys */
    small_case(&c, 0);
    inst_make(&s, &c);
    set_common(ctx, &c);
    assert_int_equal(sdpa_forward(ctx, &s.fa), SDPA_OK);
    const sdpa_backward_args batched = s.ba;
    a = batched;
    a.k.shape[0] = a.v.shape[0] = 1;
    expect_error(ctx, &s, &a, SDPA_ERR_BAD_RAGGED, "shared K/V",
                 "keys shared by the 4 sequences");
    a = batched;
    a.k.shape[0] = a.v.shape[0] = 2;
    expect_error(ctx, &s, &a, SDPA_ERR_SHAPE_MISMATCH, "k over 2",
                 "k.shape[0]");
    a = batched;
    a.dk.shape[0] = 3;
    expect_error(ctx, &s, &a, SDPA_ERR_SHAPE_MISMATCH, "dk over 3",
                 "dk is [3, ., 6, .], but k is [4, ., 6, .]");
    a = batched;
    a.dv.stride[0] = 0;
    expect_error(ctx, &s, &a, SDPA_ERR_BAD_STRIDE, "dv items shared", "dv");
    a = batched;
    a.dk.shape[3] = 2;
    expect_error(ctx, &s, &a, SDPA_ERR_SHAPE_MISMATCH, "dk width",
                 "sequence 0: dk.shape[3]");
    /* a first sequence without rows: its keys' gradients are checked */
    const int64_t first_empty[5] = {0, 0, 4, 7, 9};
    a.q_offsets = first_empty;
    expect_error(ctx, &s, &a, SDPA_ERR_SHAPE_MISMATCH, "dk width, no rows",
                 "sequence 0: dk.shape[3] (D) is 2, must be 3");
    a = batched;
    a.q_offsets = first_empty;
    a.dv.stride[3] = 2;
    expect_error(ctx, &s, &a, SDPA_ERR_BAD_STRIDE, "dv inner, no rows",
                 "sequence 0: dv");
    inst_free(&s);

    /* no query row at all: the settings and required tensors still */
    small_case(&c, 1);
    for (int b = 0; b < 4; ++b)
        c.tq[b] = 0;
    inst_make(&s, &c);
    set_common(ctx, &c);
    reset_grads(&s);
    assert_int_equal(sdpa_backward(ctx, &s.ba), SDPA_OK);
    a = s.ba;
    a.scale = -1;
    expect_error(ctx, &s, &a, SDPA_ERR_BAD_SCALE, "no rows: scale", "scale");
    a = s.ba;
    a.causal = 9;
    expect_error(ctx, &s, &a, SDPA_ERR_BAD_CAUSAL, "no rows: causal", NULL);
    a = s.ba;
    a.dq.data = NULL;
    expect_error(ctx, &s, &a, SDPA_ERR_NULL_POINTER, "no rows: dq",
                 "sdpa_backward: dq.data is NULL");
    a = s.ba;
    a.dout.data = NULL;
    expect_error(ctx, &s, &a, SDPA_ERR_NULL_POINTER, "no rows: dout",
                 "sdpa_backward: dout.data is NULL");
    inst_free(&s);
    sdpa_ctx_destroy(ctx);
}

/* ---- Memory. ------------------------------------------------------------ */

/* Every allocation of a first call refused in turn (threads, then the
 * caller's parallel-for, with its claims, and the dq turn counters):
 * SDPA_ERR_OUT_OF_MEMORY with every output untouched, until the call
 * succeeds with the bits of the sequences' own calls. */
static void test_out_of_memory(void **state)
{
    (void)state;
    static counting_alloc ca;
    rcfg c;
    split_case(&c, SDPA_FLOAT32, 1);
    c.block_q = 1; /* 80 dQ items in the second phase, 6 in the first */
    rinst s;
    inst_make(&s, &c);
    sdpa_ctx *plain = tp_ctx(0);
    set_common(plain, &c);
    assert_int_equal(sdpa_forward(plain, &s.fa), SDPA_OK);
    own o[MAX_SEQS];
    memset(o, 0, sizeof o);
    for (int64_t b = 0; b < c.seqs; ++b)
        if (c.tq[b] > 0)
            own_call(plain, &c, &s, b, &o[b]);
    sdpa_ctx_destroy(plain);
    for (int caller = 0; caller <= 1; ++caller) {
        long refused = 0;
        for (long at = 0;; ++at) {
            sdpa_allocator al = ca_start(&ca, -1);
            sdpa_ctx *ctx = NULL;
            assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al),
                             SDPA_OK);
            set_common(ctx, &c);
            test_pool tp = {.workers = 3};
            if (caller)
                assert_int_equal(
                    sdpa_ctx_set_parallel_for(ctx, test_parallel_for, &tp, 3),
                    SDPA_OK);
            else
                tp_set(ctx, SDPA_OPT_NUM_THREADS, 3);
            ca.fail_at = ca.allocs + ca.failures + at;
            reset_grads(&s);
            int rc = sdpa_backward(ctx, &s.ba);
            if (rc == SDPA_OK) {
                assert_true(matches_own(&c, &s, o));
                sdpa_ctx_destroy(ctx);
                break;
            }
            assert_int_equal(rc, SDPA_ERR_OUT_OF_MEMORY);
            assert_true(grads_untouched(&s, 1));
            refused++;
            sdpa_ctx_destroy(ctx);
            assert_int_equal(ca.live_bytes, 0);
        }
        print_message("  %s: %ld allocations refused in turn\n",
                      caller ? "caller's parallel-for" : "3 threads", refused);
        assert_true(refused >= 3); /* parts, scratch, claims or workers */
    }
    for (int64_t b = 0; b < c.seqs; ++b)
        own_free(&o[b]);
    inst_free(&s);
}

/* A training loop of ragged forward and backward calls allocates nothing
 * after the first. */
static void test_no_allocation_when_repeated(void **state)
{
    (void)state;
    static counting_alloc ca;
    for (int threads = 1; threads <= 3; threads += 2) {
        sdpa_allocator al = ca_start(&ca, -1);
        sdpa_ctx *ctx = NULL;
        assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al), SDPA_OK);
        rcfg c;
        split_case(&c, SDPA_FLOAT64, threads == 1);
        rinst s;
        inst_make(&s, &c);
        set_common(ctx, &c);
        tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
        assert_int_equal(tp_training_allocs(ctx, &ca, &s.fa, &s.ba), 0);
        inst_free(&s);
        sdpa_ctx_destroy(ctx);
        assert_int_equal(ca.live_bytes, 0);
        assert_int_equal(ca.bad_free, 0);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        TP_BOTH_NAMED(test_matches_sequences, NULL, NULL),
        cmocka_unit_test(test_finite_differences),
        cmocka_unit_test(test_threads_bitwise),
        cmocka_unit_test(test_empty_sequences),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_out_of_memory),
        cmocka_unit_test(test_no_allocation_when_repeated),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
