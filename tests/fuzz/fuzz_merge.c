/*
 * libFuzzer target for sdpa_merge.
 *
 * An input (enum field below; missing bytes read as 0) decodes to one of
 * three modes:
 *  - split: an attention problem (float32/64, GQA, causal, window, ALiBi,
 *    soft-cap, sinks given to partial 0 only) whose keys are split into P
 *    disjoint sets, contiguous or interleaved; each partial is an
 *    sdpa_forward call (a key mask, SDPA_EMPTY_ROWS_ZERO) writing its out
 *    and lse into the fuzzed views; the merge of the partials must match
 *    the long-double reference of the whole problem (tests/common/reference.c)
 *    within the forward's tolerance plus the merge's roundings, and follow
 *    the empty-row policy where no partial saw a key;
 *  - direct: random partial outputs and lse values (-inf for partials that
 *    saw no key, whose out rows hold NaN and must never be read; NaN or
 *    +inf lse: SDPA_ERR_NONFINITE), inputs broadcast with stride 0 or
 *    sharing memory; the result must match the closed form in long double
 *    (lse = m + log Σ exp(lse_p - m), out = Σ exp(lse_p - lse) out_p), and
 *    be a bitwise copy where a single partial's lse is finite;
 *  - huge: parts up to INT64_MAX or extents up to 2^62 at fake addresses
 *    near the top of the address space: refused (SDPA_ERR_OVERFLOW, or the
 *    argument error decoded with it) before anything is read.
 * Every mode also decodes layouts (heads inner or outer, padded rows, any
 * lse stride[3], which is ignored), the optional lse output, in-place
 * accumulation (out = outs[0], lse = lses[0], the very same views: bitwise
 * the result into separate buffers), one argument error (negative, zero or
 * non-unit strides, shapes that disagree, NULL pointers, parts < 1, outputs
 * overlapping inputs or each other), struct_size and the context's
 * empty-row policy.
 *
 * Checks: documented statuses, the ones the arguments call for; outputs
 * untouched and a message after every refusal; inputs never written;
 * padding of out and lse never written; no allocation; a repeated call
 * bitwise equal.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_ref.h"

enum field {
    F_MODE,
    F_DTYPE,
    F_DTYPE_RAW,
    F_N,
    F_H,
    F_T,
    F_DV,
    F_PARTS,
    F_LAYOUT, /* bit p: partial p heads inner; bit 6: out; bit 7: lse */
    F_PAD,
    F_LSE_S3,
    F_LSE_OUT,
    F_INPLACE,
    F_NEG_LSE,
    F_SPECIAL,
    F_BCAST,
    F_BAD_KIND,
    F_BAD_WHICH,
    F_BAD_DIM,
    F_BAD_VAL,
    F_STRUCT,
    F_OPT0_ID, /* four (id, value) slots: fz_apply_options */
    F_SECOND = F_OPT0_ID + 8,
    /* split mode: the problem */
    F_HKV,
    F_TK,
    F_DK,
    F_SPLIT,
    F_CAUSAL,
    F_WINDOW,
    F_ALIBI,
    F_SINKS,
    F_SOFTCAP,
    F_AMP,
    /* huge mode */
    F_HUGE_WHAT,
    F_HUGE_VAL,
    F_SEED0, /* eight bytes */
    F_COUNT = F_SEED0 + 8
};

enum { MAX_PARTS = 6, MERGE_ARGS_V1 = 184 };

/* What a view is: partial out / lse p, or the result. */
enum { V_OUTS, V_LSES, V_OUT, V_LSE };

typedef struct merge_cfg {
    int mode; /* 0 direct, 1 split, 2 huge */
    fz_dtype dt;
    int64_t N, H, T, Dv, parts;
    int has_lse;
    fz_tens outs[MAX_PARTS], lses[MAX_PARTS], out, lse;
    sdpa_tensor outs_v[MAX_PARTS], lses_v[MAX_PARTS]; /* what the call gets */
} merge_cfg;

static merge_cfg g;

static const char *view_name(int kind, int p)
{
    static char names[4][MAX_PARTS][16];
    static const char *base[4] = {"outs", "lses", "out", "lse"};
    if (kind >= V_OUT)
        return base[kind];
    snprintf(names[kind][p], sizeof names[kind][p], "%s[%d]", base[kind], p);
    return names[kind][p];
}

static void describe(void)
{
    fz_desc[0] = '\0';
    fz_describe("mode=%d dtype=%d N=%lld H=%lld T=%lld Dv=%lld parts=%lld "
                "lse_out=%d zero=%lld",
                g.mode, g.dt.dtype, (long long)g.N, (long long)g.H,
                (long long)g.T, (long long)g.Dv, (long long)g.parts, g.has_lse,
                (long long)fz_opt.empty_zero);
    for (int64_t p = 0; p < g.parts && p < MAX_PARTS; p++) {
        const sdpa_tensor *o = &g.outs_v[p], *l = &g.lses_v[p];
        fz_describe(" outs[%lld]{%lld,%lld,%lld,%lld|%lld,%lld,%lld,%lld} "
                    "lses{..|%lld,%lld,%lld,%lld}",
                    (long long)p, (long long)o->shape[0],
                    (long long)o->shape[1], (long long)o->shape[2],
                    (long long)o->shape[3], (long long)o->stride[0],
                    (long long)o->stride[1], (long long)o->stride[2],
                    (long long)o->stride[3], (long long)l->stride[0],
                    (long long)l->stride[1], (long long)l->stride[2],
                    (long long)l->stride[3]);
    }
}

/* A [N, H, T, Dv] view, or an lse view [N, H, T, 1] whose stride[3] is
 * ignored (any value): heads outer or inner, rows padded. */
static void layout(fz_tens *x, int heads_inner, int64_t pad, int is_lse,
                   size_t es)
{
    memset(x, 0, sizeof *x);
    x->present = 1;
    x->es = es;
    fz_set_layout(&x->t, g.N, g.H, g.T, is_lse ? 1 : g.Dv, heads_inner, pad);
    if (is_lse)
        x->t.stride[3] = (int64_t)(fz(F_LSE_S3) % 7) - 3;
}

/* ------------------------------------------------------------------------ */
/* Split mode: the partials come from sdpa_forward over disjoint key sets.   */
/* ------------------------------------------------------------------------ */
typedef struct problem {
    int64_t Hkv, Tk, Dk;
    fz_tens q, k, v, mask;
    sdpa_forward_args a;  /* the whole problem (no mask) */
    unsigned char *owner; /* partial of each key */
    double slopes[8], sinks[8];
} problem;

static void make_problem(problem *pb)
{
    const int dt = g.dt.compute;
    const size_t es = fz_esize(dt);
    memset(pb, 0, sizeof *pb);
    pb->Hkv = g.H % 2 == 0 && fz(F_HKV) % 2 ? g.H / 2 : g.H;
    pb->Tk = 1 + (int64_t)(fz(F_TK) % 12);
    pb->Dk = 1 + (int64_t)(fz(F_DK) % 6);
    fz_tens *t[3] = {&pb->q, &pb->k, &pb->v};
    const int64_t hs[3] = {g.H, pb->Hkv, pb->Hkv};
    const int64_t ts[3] = {g.T, pb->Tk, pb->Tk};
    const int64_t ds[3] = {pb->Dk, pb->Dk, g.Dv};
    const char *names[3] = {"q", "k", "v"};
    double amp = sqrt((0.5 + 8.0 * (double)(fz(F_AMP) % 16) / 15.0) /
                      sqrt((double)pb->Dk));
    for (int i = 0; i < 3; i++) {
        t[i]->present = 1;
        t[i]->es = es;
        fz_set_layout(&t[i]->t, g.N, hs[i], ts[i], ds[i], 0, 0);
        (void)fz_tens_alloc(t[i], names[i], 0, 0);
        size_t n = t[i]->b->bytes / es;
        for (size_t e = 0; e < n; e++)
            fz_set(t[i], (int64_t)e, fz_sym(i == 2 ? 1.0 : amp));
    }
    /* keys to partials: contiguous chunks or interleaved */
    pb->owner = malloc((size_t)pb->Tk);
    if (!pb->owner)
        abort();
    unsigned split = fz(F_SPLIT);
    for (int64_t j = 0; j < pb->Tk; j++)
        pb->owner[j] =
            (unsigned char)(split % 2 == 0 ? j * g.parts / pb->Tk
                                           : (j + split / 2) % g.parts);
    /* the key masks: [1, 1, 1, Tk] per partial, nonzero = forbidden */
    pb->mask.present = 1;
    pb->mask.es = 1;
    fz_set_layout(&pb->mask.t, 1, 1, 1, pb->Tk * g.parts, 0, 0);
    (void)fz_tens_alloc(&pb->mask, "masks", 0, 0);
    for (int64_t p = 0; p < g.parts; p++)
        for (int64_t j = 0; j < pb->Tk; j++)
            pb->mask.b->mem[p * pb->Tk + j] = pb->owner[j] != p;
    sdpa_forward_args *a = &pb->a;
    *a = (sdpa_forward_args)SDPA_FORWARD_ARGS_INIT;
    a->dtype = dt;
    a->q = pb->q.t;
    a->k = pb->k.t;
    a->v = pb->v.t;
    fz_decode_causal_window(a, fz(F_CAUSAL), fz(F_WINDOW));
    if (fz(F_ALIBI) % 3 == 1 && g.H <= 8) {
        for (int64_t h = 0; h < g.H; h++)
            pb->slopes[h] = fz_sym(1.0);
        a->alibi_slopes = pb->slopes;
    }
    if (fz(F_SINKS) % 3 == 1 && g.H <= 8) {
        for (int64_t h = 0; h < g.H; h++)
            pb->sinks[h] = fz_sym(3.0);
        a->sinks = pb->sinks;
    }
    a->softcap =
        fz(F_SOFTCAP) % 4 == 1 ? 2.0 + (double)(fz(F_SOFTCAP) >> 2) : 0.0;
}

/* Runs the P partial forward calls into outs[p], lses[p]. */
static void run_partials(const problem *pb)
{
    sdpa_ctx *ctx = fz_ctx_new();
    CHECK(sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO) ==
              SDPA_OK,
          "empty rows");
    for (int64_t p = 0; p < g.parts; p++) {
        sdpa_forward_args f = pb->a;
        if (p > 0)
            f.sinks = NULL; /* sinks in one partial only (the header) */
        f.mask = pb->mask.t;
        f.mask.shape[3] = pb->Tk;
        f.mask.data = pb->mask.b->mem + p * pb->Tk;
        f.out = g.outs[p].t;
        f.lse = g.lses[p].t;
        int st = sdpa_forward(ctx, &f);
        CHECK(st == SDPA_OK, "partial %lld: sdpa_forward gave %d: %s",
              (long long)p, st, sdpa_ctx_last_error(ctx));
    }
    fz_ctx_end(ctx);
}

/* ------------------------------------------------------------------------ */
/* Direct mode: values.                                                      */
/* ------------------------------------------------------------------------ */
/* lse of partial p at one row: finite, or -inf for a partial without a
 * key; the out row of such a partial is NaN (never read). */
static void fill_direct(void)
{
    const double spread = fz(F_NEG_LSE) & 0x80 ? 1e3 : 8.0;
    unsigned neg = fz(F_NEG_LSE) % 8;
    for (int64_t p = 0; p < g.parts; p++) {
        fz_tens *o = &g.outs[p], *l = &g.lses[p];
        for (int64_t b = 0; b < g.N; b++)
            for (int64_t h = 0; h < g.H; h++)
                for (int64_t t = 0; t < g.T; t++) {
                    double lv = fz_sym(spread);
                    /* -inf: none, some, every partial of some rows */
                    int none = neg == 1   ? fz_unit() < 0.3
                               : neg == 2 ? p > 0
                               : neg == 3 ? t == 0
                               : neg == 4 ? fz_unit() < 0.7
                                          : 0;
                    int64_t lo =
                        fz_off4(&l->t, fz_bix(&l->t, 0, b), fz_bix(&l->t, 1, h),
                                fz_bix(&l->t, 2, t), 0);
                    fz_set(l, lo, none ? -INFINITY : lv);
                    for (int64_t d = 0; d < g.Dv; d++)
                        fz_set(o,
                               fz_off4(&o->t, fz_bix(&o->t, 0, b),
                                       fz_bix(&o->t, 1, h), fz_bix(&o->t, 2, t),
                                       d),
                               none ? NAN : fz_sym(2.0));
                }
    }
}

/* A shared element (a stride-0 broadcast, or views sharing memory) must
 * hold one value for every index that reaches it: the fill above wrote
 * the last one, so the -inf / NaN pairing of a row can break. Re-derive
 * it: NaN out rows only where the row's lse is -inf. */
static void repair_direct(void)
{
    for (int64_t p = 0; p < g.parts; p++) {
        fz_tens *o = &g.outs[p], *l = &g.lses[p];
        for (int64_t b = 0; b < g.N; b++)
            for (int64_t h = 0; h < g.H; h++)
                for (int64_t t = 0; t < g.T; t++) {
                    double lv = fz_get(l, fz_off4(&l->t, fz_bix(&l->t, 0, b),
                                                  fz_bix(&l->t, 1, h),
                                                  fz_bix(&l->t, 2, t), 0));
                    for (int64_t d = 0; d < g.Dv; d++) {
                        int64_t oo = fz_off4(&o->t, fz_bix(&o->t, 0, b),
                                             fz_bix(&o->t, 1, h),
                                             fz_bix(&o->t, 2, t), d);
                        if (lv != -INFINITY && isnan(fz_get(o, oo)))
                            fz_set(o, oo, 0.5);
                    }
                }
    }
}

/* Element `off` of a view of the call's dtype. */
static double view_get(const sdpa_tensor *v, int64_t b, int64_t h, int64_t t,
                       int64_t d)
{
    return fz_get_raw(
        v->data, fz_esize(g.dt.compute),
        fz_off4(v, fz_bix(v, 0, b), fz_bix(v, 1, h), fz_bix(v, 2, t), d));
}

/* The closed form at one row, from the views the call reads; returns 0
 * when every lse is -inf. *single is the partial whose lse alone is
 * finite, else -1; mag[d] = Σ_p w_p |out_p| bounds the roundings. */
static int closed_form(int64_t b, int64_t h, int64_t t, long double *out,
                       long double *lse, long double *mag, int *single)
{
    long double m = -INFINITY, sum = 0;
    int finite = 0;
    *single = -1;
    for (int64_t p = 0; p < g.parts; p++) {
        long double v = view_get(&g.lses_v[p], b, h, t, 0);
        if (v != -INFINITY) {
            finite++;
            *single = (int)p;
        }
        m = v > m ? v : m;
    }
    if (finite != 1)
        *single = -1;
    for (int64_t d = 0; d < g.Dv; d++)
        out[d] = mag[d] = 0;
    if (m == -INFINITY) {
        *lse = -INFINITY;
        return 0;
    }
    for (int64_t p = 0; p < g.parts; p++) {
        long double v = view_get(&g.lses_v[p], b, h, t, 0);
        if (v != -INFINITY)
            sum += expl(v - m);
    }
    *lse = m + logl(sum);
    for (int64_t p = 0; p < g.parts; p++) {
        long double v = view_get(&g.lses_v[p], b, h, t, 0);
        if (v == -INFINITY)
            continue; /* its out row is never read */
        long double w = expl(v - *lse);
        for (int64_t d = 0; d < g.Dv; d++) {
            long double x = view_get(&g.outs_v[p], b, h, t, d);
            out[d] += w * x;
            mag[d] += w * fabsl(x);
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------ */
/* One input.                                                                */
/* ------------------------------------------------------------------------ */
/* The merged out and lse against the closed form of the partials the call
 * read (and in split mode against the reference of the whole problem);
 * copies the results into res_out / res_lse. */
static void check_result(const ref_result *whole, const test_tol *wt,
                         const sdpa_tensor *out_v, const sdpa_tensor *lse_v,
                         double *res_out, double *res_lse)
{
    const int f32 = g.dt.compute == SDPA_FLOAT32;
    const long double eps = f32 ? FLT_EPSILON : DBL_EPSILON;
    const long double tiny = f32 ? FLT_MIN : DBL_MIN;
    const long double P = (long double)g.parts;
    long double out[64], mag[64], lse;
    for (int64_t b = 0; b < g.N; b++)
        for (int64_t h = 0; h < g.H; h++)
            for (int64_t t = 0; t < g.T; t++) {
                int single;
                int any = closed_form(b, h, t, out, &lse, mag, &single);
                size_t row = (size_t)((b * g.H + h) * g.T + t);
                for (int64_t d = 0; d < g.Dv; d++) {
                    double got = view_get(out_v, b, h, t, d);
                    res_out[row * (size_t)g.Dv + (size_t)d] = got;
                    if (!any) {
                        CHECK(got == 0.0,
                              "row (%lld,%lld,%lld) has no key: out[%lld] = "
                              "%g, not 0",
                              (long long)b, (long long)h, (long long)t,
                              (long long)d, got);
                        continue;
                    }
                    if (single >= 0) { /* copied exactly */
                        double x = view_get(&g.outs_v[single], b, h, t, d);
                        CHECK(memcmp(&got, &x, sizeof got) == 0,
                              "row (%lld,%lld,%lld): only partial %d has a "
                              "finite lse, but out[%lld] = %.17g, not its "
                              "%.17g",
                              (long long)b, (long long)h, (long long)t, single,
                              (long long)d, got, x);
                    }
                    /* weights rounded to the dtype, P products and sums
                     * (relative to Σ w |out_p|), weights below the
                     * smallest normal flushed */
                    long double tol = 2 * ((P + 6) * eps * mag[d] + P * tiny);
                    CHECK(fabsl((long double)got - out[d]) <= tol,
                          "out[%lld,%lld,%lld,%lld] = %.17g, closed form "
                          "%.17Lg, tolerance %.3Lg",
                          (long long)b, (long long)h, (long long)t,
                          (long long)d, got, out[d], tol);
                    if (whole) {
                        /* the partials' own errors, and their lse errors
                         * moving the weights */
                        long double r =
                            whole->out[row * (size_t)g.Dv + (size_t)d];
                        long double tw =
                            tol + wt->out +
                            4 * (wt->lse_abs + wt->lse_rel * fabsl(lse)) *
                                whole->v_absmax;
                        CHECK(fabsl((long double)got - r) <= tw,
                              "out[%lld,%lld,%lld,%lld] = %.17g, the whole "
                              "problem's reference %.17Lg, tolerance %.3Lg",
                              (long long)b, (long long)h, (long long)t,
                              (long long)d, got, r, tw);
                    }
                }
                if (!g.has_lse)
                    continue;
                double got_lse = view_get(lse_v, b, h, t, 0);
                res_lse[row] = got_lse;
                if (!any) {
                    CHECK(got_lse == -INFINITY,
                          "row (%lld,%lld,%lld) has no key: lse = %g",
                          (long long)b, (long long)h, (long long)t, got_lse);
                    continue;
                }
                /* m + log Σ in double, rounded once to the dtype; exactly
                 * m with a single finite lse (m + log 1) */
                long double tol =
                    2 * (eps * fabsl(lse) +
                         (P + 8) * DBL_EPSILON * (fabsl(lse) + logl(P) + 1));
                if (single >= 0)
                    tol = 0;
                CHECK(fabsl((long double)got_lse - lse) <= tol,
                      "lse[%lld,%lld,%lld] = %.17g, closed form %.17Lg, "
                      "tolerance %.3Lg",
                      (long long)b, (long long)h, (long long)t, got_lse, lse,
                      tol);
                if (whole) {
                    long double r = whole->lse[row];
                    long double tw = tol + wt->lse_abs + wt->lse_rel * fabsl(r);
                    CHECK(fabsl((long double)got_lse - r) <= tw,
                          "lse[%lld,%lld,%lld] = %.17g, the whole problem's "
                          "reference %.17Lg, tolerance %.3Lg",
                          (long long)b, (long long)h, (long long)t, got_lse, r,
                          tw);
                }
            }
}

/* The merge in place (out = outs[0], lse = lses[0], as the very same
 * views) gives, bitwise, what it gave into separate buffers. */
typedef union merge_box {
    sdpa_merge_args a;
    unsigned char bytes[sizeof(sdpa_merge_args) + 64]; /* struct_size games */
} merge_box;

static void check_in_place(sdpa_ctx *ctx, const merge_box *box, unsigned ip,
                           const double *res_out, const double *res_lse)
{
    merge_box copy = *box;
    sdpa_merge_args *b = &copy.a;
    if (ip & 1)
        b->out = g.outs_v[0];
    if ((ip & 2) && g.has_lse)
        b->lse = g.lses_v[0];
    /* in place, partial 0's views are outputs: a broadcast one would be
     * written twice */
    int writable =
        fz_sorted_rule(&g.outs_v[0], 0) && fz_sorted_rule(&g.lses_v[0], 1);
    int st = sdpa_merge(ctx, b);
    if (!writable) {
        CHECK(st == SDPA_OK || st == SDPA_ERR_BAD_STRIDE,
              "in-place merge over a broadcast view gave %d", st);
        return;
    }
    CHECK(st == SDPA_OK, "in-place merge gave %d: %s", st,
          sdpa_ctx_last_error(ctx));
    for (int64_t n = 0; n < g.N; n++)
        for (int64_t h = 0; h < g.H; h++)
            for (int64_t t = 0; t < g.T; t++) {
                size_t row = (size_t)((n * g.H + h) * g.T + t);
                for (int64_t d = 0; d < g.Dv; d++) {
                    double x = view_get(&b->out, n, h, t, d);
                    double y = res_out[row * (size_t)g.Dv + (size_t)d];
                    CHECK(memcmp(&x, &y, sizeof x) == 0,
                          "in place out[%lld,%lld,%lld,%lld] = %.17g, into a "
                          "separate buffer %.17g",
                          (long long)n, (long long)h, (long long)t,
                          (long long)d, x, y);
                }
                if (g.has_lse) {
                    double x = view_get(&b->lse, n, h, t, 0);
                    CHECK(memcmp(&x, &res_lse[row], sizeof x) == 0,
                          "in place lse[%lld,%lld,%lld] = %.17g, into a "
                          "separate buffer %.17g",
                          (long long)n, (long long)h, (long long)t, x,
                          res_lse[row]);
                }
            }
}

static void run(void)
{
    g.mode = fz(F_MODE) % 8 == 7 ? 2 : fz(F_MODE) % 2;
    g.dt = fz_decode_dtype(fz(F_DTYPE), fz(F_DTYPE_RAW));
    fz_sset errs = 0, amb = 0; /* amb: acceptable besides the expected */
    if (!g.dt.valid && !g.dt.pending)
        errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    const int dt = g.dt.compute;
    const size_t es = fz_esize(dt);
    g.N = 1 + (int64_t)(fz(F_N) % 3);
    g.H = 1 + (int64_t)(fz(F_H) % 4);
    g.T = 1 + (int64_t)(fz(F_T) % 5);
    g.Dv = 1 + (int64_t)(fz(F_DV) % 6);
    g.parts = 1 + (int64_t)(fz(F_PARTS) % (MAX_PARTS - 1));
    g.has_lse = fz(F_LSE_OUT) % 2 == 0;
    if (g.mode == 1 && !g.dt.valid)
        g.mode = 0; /* the forward needs a dtype it takes */

    /* views */
    unsigned lay = fz(F_LAYOUT), pad = fz(F_PAD);
    for (int64_t p = 0; p < g.parts; p++) {
        layout(&g.outs[p], (lay >> p) & 1, (int64_t)((pad >> p) & 1) * 3, 0,
               es);
        layout(&g.lses[p], (lay >> (p + 1)) & 1, (int64_t)((pad >> p) & 2), 1,
               es);
    }
    layout(&g.out, (lay >> 6) & 1, (int64_t)(pad >> 6), 0, es);
    layout(&g.lse, (lay >> 7) & 1, (int64_t)((pad >> 5) & 1), 1, es);
    g.lse.present = g.has_lse;
    /* direct mode: inputs broadcast over N, H or T by stride 0 */
    unsigned bc = fz(F_BCAST);
    if (g.mode == 0 && bc % 4 == 1)
        for (int64_t p = 0; p < g.parts; p++)
            for (int d = 0; d < 3; d++)
                if ((bc >> (2 + d)) & 1) {
                    g.outs[p].t.stride[d] = 0;
                    g.lses[p].t.stride[d] = 0;
                }

    /* one argument error */
    unsigned bad = fz(F_BAD_KIND) % 16, bw = fz(F_BAD_WHICH);
    int bdim = (int)(fz(F_BAD_DIM) % 4);
    unsigned bv = fz(F_BAD_VAL);
    int kind = (int)(bw % 4);
    int64_t bp = (int64_t)((bw >> 2) % (unsigned)g.parts);
    if (kind == V_LSE && !g.has_lse)
        kind = V_OUT;
    fz_tens *bt = kind == V_OUTS   ? &g.outs[bp]
                  : kind == V_LSES ? &g.lses[bp]
                  : kind == V_OUT  ? &g.out
                                   : &g.lse;
    int is_lse_view = kind == V_LSES || kind == V_LSE;
    int is_output = kind >= V_OUT;
    int null_ctx = 0, null_args = 0, null_outs = 0, null_lses = 0;
    int null_data = 0, overlap = -1;
    int64_t parts_call = g.parts;
    size_t fallback = 0;
    switch (bad) {
    case 8: /* negative stride (an lse's stride[3] is ignored) */
        bt->t.stride[bdim] = -1 - (int64_t)(bv % 3);
        if (!(is_lse_view && bdim == 3)) {
            if (bt->t.shape[bdim] > 1)
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            else /* an extent-1 dimension's stride is not used */
                amb |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        }
        break;
    case 9: /* a non-unit innermost stride */
        if (!is_lse_view && g.Dv > 1) {
            bt->t.stride[3] = 2;
            errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        }
        break;
    case 10: /* a zero stride: broadcast for an input, refused for an
                output that would write an element twice */
        if (bt->t.shape[bdim] > 1 && !(is_lse_view && bdim == 3)) {
            bt->t.stride[bdim] = 0;
            if (is_output || bdim == 3) /* or not innermost 1 */
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        }
        break;
    case 11: { /* a shape that disagrees */
        static const int64_t vals[6] = {0,        -1, 2, 7, INT64_C(1) << 40,
                                        INT64_MIN};
        int64_t nv = vals[bv % 6];
        if (nv == bt->t.shape[bdim])
            nv += 1;
        fallback = fz_small_span(&bt->t);
        bt->t.shape[bdim] = nv;
        errs |= FZ_BIT(nv <= 0 ? SDPA_ERR_BAD_DIM : SDPA_ERR_SHAPE_MISMATCH);
        if (kind == V_OUTS && bp == 0 && nv > 0) /* outs[0] fixes shapes:
                                                    the others disagree, or
                                                    its extent overflows */
            errs |= FZ_BIT(SDPA_ERR_OVERFLOW) | FZ_BIT(SDPA_ERR_BAD_STRIDE) |
                    FZ_BIT(SDPA_ERR_OVERLAP);
        if (nv > (INT64_C(1) << 30))
            errs |= FZ_BIT(SDPA_ERR_OVERFLOW);
        break;
    }
    case 12: /* NULL */
        switch (bv % 6) {
        case 0:
            null_ctx = 1;
            break;
        case 1:
            null_args = 1;
            break;
        case 2:
            null_outs = 1;
            break;
        case 3:
            null_lses = 1;
            break;
        default:
            null_data = 1;
            if (kind == V_LSE) /* lse.data NULL: simply absent */
                bt = &g.out;
            break;
        }
        errs |= FZ_BIT(SDPA_ERR_NULL_POINTER);
        break;
    case 13: { /* parts < 1 */
        static const int64_t vals[3] = {0, -1, INT64_MIN};
        parts_call = vals[bv % 3];
        errs |= FZ_BIT(SDPA_ERR_BAD_DIM);
        break;
    }
    case 14: /* an output over an input or the other output */
        overlap = (int)(bv % 6);
        errs |= FZ_BIT(SDPA_ERR_OVERLAP);
        break;
    default:
        break;
    }
    /* sdpa_forward cannot write a broadcast or negatively strided view:
     * such partials are filled directly */
    if (g.mode == 1 && (amb || bad == 10))
        g.mode = 0;
    for (int64_t p = 0; p < g.parts; p++)
        for (int d = 0; d < 4; d++) /* every tensor's other stride rules */
            for (int w = 0; w < 2; w++) {
                const sdpa_tensor *x = w ? &g.lses[p].t : &g.outs[p].t;
                if (x->stride[d] < 0 && !(w && d == 3) && x->shape[d] > 1)
                    errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            }

    /* buffers */
    for (int64_t p = 0; p < g.parts; p++) {
        (void)fz_tens_alloc(&g.outs[p], view_name(V_OUTS, (int)p), 0,
                            &g.outs[p] == bt ? fallback : 0);
        (void)fz_tens_alloc(&g.lses[p], view_name(V_LSES, (int)p), 0,
                            &g.lses[p] == bt ? fallback : 0);
    }
    int inj = fz_tens_alloc(&g.out, "out", 1, &g.out == bt ? fallback : 0);
    if (bad != 11 || bt != &g.out) {
        if (inj == 0 || !fz_sorted_rule(&g.out.t, 0))
            errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        if (inj < 0)
            CHECK(errs & FZ_BIT(SDPA_ERR_BAD_STRIDE), "harness: out map");
    }
    if (g.has_lse) {
        inj = fz_tens_alloc(&g.lse, "lse", 1, &g.lse == bt ? fallback : 0);
        if (bad != 11 || bt != &g.lse) {
            if (inj == 0 || !fz_sorted_rule(&g.lse.t, 1))
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            if (inj < 0)
                CHECK(errs & FZ_BIT(SDPA_ERR_BAD_STRIDE), "harness: lse map");
        }
    }
    /* inputs sharing memory: partial 1 reads partial 0's buffers */
    int shared = g.mode == 0 && g.parts > 1 && bc % 4 == 2 && bad < 8;
    if (shared) {
        g.outs[1].t = g.outs[0].t;
        g.lses[1].t = g.lses[0].t;
    }

    /* values */
    problem pb;
    memset(&pb, 0, sizeof pb);
    ref_result whole;
    memset(&whole, 0, sizeof whole);
    test_tol wt;
    memset(&wt, 0, sizeof wt);
    int have_whole = 0;
    if (g.mode == 1 && errs == 0) {
        make_problem(&pb);
        run_partials(&pb);
        CHECK(ref_forward(&pb.a, &whole) == 0, "reference out of memory");
        have_whole = 1;
        wt = tp_forward_tol(dt == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON,
                            &whole, pb.Tk, pb.Dk, pb.a.softcap,
                            pb.a.sinks != NULL, 0, 0);
    } else if (errs == 0 || bad == 10) {
        fill_direct();
        if (g.mode == 0)
            repair_direct();
    }
    /* special lse values: NaN or +inf (NONFINITE) at one element of a
     * partial's view */
    unsigned spv = fz(F_SPECIAL);
    int special = spv % 4 == 1 && errs == 0;
    if (special) {
        fz_tens *l = &g.lses[(spv >> 2) % (unsigned)g.parts];
        int64_t r = (int64_t)((spv >> 4) % (unsigned)(g.N * g.H * g.T));
        fz_set(l,
               fz_off4(&l->t, fz_bix(&l->t, 0, r / (g.H * g.T)),
                       fz_bix(&l->t, 1, r / g.T % g.H),
                       fz_bix(&l->t, 2, r % g.T), 0),
               spv & 0x80 ? NAN : INFINITY);
    }
    for (int64_t p = 0; p < g.parts; p++) {
        g.outs_v[p] = g.outs[p].t;
        g.lses_v[p] = g.lses[p].t;
    }

    /* the call */
    sdpa_merge_args a = SDPA_MERGE_ARGS_INIT;
    a.dtype = g.dt.dtype;
    a.parts = parts_call;
    a.outs = null_outs ? NULL : g.outs_v;
    a.lses = null_lses ? NULL : g.lses_v;
    a.out = g.out.t;
    if (g.has_lse)
        a.lse = g.lse.t;
    sdpa_tensor saved_view = {0};
    sdpa_tensor *nv = NULL;
    if (null_data) {
        nv = kind == V_OUTS   ? &g.outs_v[bp]
             : kind == V_LSES ? &g.lses_v[bp]
                              : &a.out;
        saved_view = *nv;
        nv->data = NULL;
    }
    switch (overlap) {
    case 0: /* out over outs[k], k >= 1, or a view of outs[0] that is not
               the same */
        if (g.parts > 1) {
            a.out.data = g.outs_v[g.parts - 1].data;
        } else {
            a.out.data = g.outs_v[0].data; /* not the very same view */
            a.out.stride[2] = g.outs_v[0].stride[2] + 1;
            errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            if (g.T == 1)
                a.out.data = g.lses_v[0].data;
        }
        break;
    case 1:
        a.out.data = g.lses_v[bp].data;
        break;
    case 2:
        if (g.has_lse)
            a.lse.data = g.outs_v[bp].data;
        else
            a.out.data = g.lses_v[0].data;
        break;
    case 3:
        if (g.has_lse)
            a.lse.data = a.out.data;
        else /* (outs[0]'s data could be the very same view: in place) */
            a.out.data = g.lses_v[bp].data;
        break;
    case 4:
        if (g.has_lse && g.parts > 1)
            a.lse.data = g.lses_v[1].data;
        else
            a.out.data = g.lses_v[bp].data;
        break;
    case 5: /* out = outs[0]'s data but lse = lses[0] with other strides */
        if (g.has_lse && g.T > 1 && g.lses_v[0].stride[2] > 0) {
            a.out.data = g.outs_v[0].data;
            a.out.stride[0] = g.outs_v[0].stride[0];
            a.out.stride[1] = g.outs_v[0].stride[1];
            a.out.stride[2] = g.outs_v[0].stride[2];
            a.lse.data = g.lses_v[0].data;
            a.lse.stride[2] = g.lses_v[0].stride[2] + 1;
            a.lse.stride[1] = g.lses_v[0].stride[1] * 2 + 64;
            a.lse.stride[0] = a.lse.stride[1] * (g.H + 1);
            errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        } else {
            a.out.data = g.lses_v[0].data;
        }
        break;
    default:
        break;
    }
    merge_box box;
    size_t seen;
    errs |= fz_pack_struct(fz(F_STRUCT), &a, sizeof a, MERGE_ARGS_V1, NULL, 0,
                           box.bytes, sizeof box.bytes, &seen);

    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, F_OPT0_ID);
    describe();
    fz_sset expect = errs | amb;
    if (g.dt.pending)
        expect |= FZ_ALL_DOCUMENTED;
    if (errs == 0 && g.dt.valid) {
        /* a row where every lse is -inf: the empty-row policy; a NaN or
         * +inf lse: NONFINITE (pass 1 meets whichever row comes first) */
        int empty = 0;
        long double o[64], m[64], l;
        int single;
        for (int64_t b = 0; b < g.N; b++)
            for (int64_t h = 0; h < g.H; h++)
                for (int64_t t = 0; t < g.T; t++)
                    empty |= !closed_form(b, h, t, o, &l, m, &single);
        if (empty && !fz_opt.empty_zero)
            expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
        else if (!special)
            expect |= FZ_BIT(SDPA_OK);
        if (special)
            expect |= FZ_BIT(SDPA_ERR_NONFINITE);
    }

    fz_snapshot();
    long allocs = fz_alloc_count();
    int st = sdpa_merge(null_ctx ? NULL : ctx, null_args ? NULL : &box.a);
    fz_check_status("sdpa_merge", st, expect, null_ctx ? NULL : ctx);
    CHECK(fz_alloc_count() == allocs, "sdpa_merge allocated");
    if (st != SDPA_OK) {
        /* every error, NONFINITE included, is found before any write */
        fz_check_bufs(1, 0, "refused merge");
    } else if (g.dt.valid) {
        fz_check_bufs(0, 1, "merge");
        size_t rows = (size_t)(g.N * g.H * g.T);
        double *res_out = calloc(rows * (size_t)g.Dv, sizeof(double));
        double *res_lse = calloc(rows, sizeof(double));
        if (!res_out || !res_lse)
            abort();
        check_result(have_whole ? &whole : NULL, &wt, &a.out, &a.lse, res_out,
                     res_lse);
        /* again: bitwise the same, nothing allocated */
        size_t n1, n2;
        unsigned char *first = fz_outputs_copy(&n1);
        fz_restore();
        CHECK(sdpa_merge(ctx, &box.a) == SDPA_OK, "second merge");
        unsigned char *again = fz_outputs_copy(&n2);
        CHECK(n1 == n2 && memcmp(first, again, n1) == 0,
              "a repeated merge differs");
        CHECK(fz_alloc_count() == allocs, "sdpa_merge allocated");
        free(first);
        free(again);
        unsigned ip = fz(F_INPLACE) % 4;
        if (ip && overlap < 0 && !shared) {
            fz_restore();
            check_in_place(ctx, &box, ip, res_out, res_lse);
        }
        free(res_out);
        free(res_lse);
    }
    if (nv)
        *nv = saved_view;
    if (have_whole)
        ref_free(&whole);
    free(pb.owner);
    fz_ctx_end(ctx);
}

/* Huge: parts or extents far beyond memory, at fake addresses near the top
 * of the address space; every call is refused before reading them. */
static void run_huge(void)
{
    /* at least 2^30 elements: far more than the 16 MiB steps between the
     * fake addresses and the top of the address space */
    static const int64_t big[8] = {
        INT64_C(1) << 30, INT64_C(1) << 31, INT64_C(1) << 40, INT64_C(1) << 56,
        INT64_C(1) << 58, INT64_C(1) << 62, INT64_MAX,        INT64_C(3) << 40};
    g.dt = fz_decode_dtype(fz(F_DTYPE), fz(F_DTYPE_RAW));
    fz_sset expect = FZ_BIT(SDPA_ERR_OVERFLOW);
    if (!g.dt.valid)
        expect |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    const size_t es = fz_esize(g.dt.compute);
    unsigned what = fz(F_HUGE_WHAT), val = fz(F_HUGE_VAL);
    static sdpa_tensor outs[4], lses[4];
    g.N = g.H = g.T = 1;
    g.Dv = 2;
    g.parts = 1 + (int64_t)(fz(F_PARTS) % 3);
    int64_t ext[4] = {1, 2, 3, 2};
    int huge_parts = what % 3 == 0;
    if (!huge_parts)
        ext[(what >> 2) % 4] = big[val % 8];
    for (int64_t p = 0; p < 4; p++) {
        fz_set_layout(&outs[p], ext[0], ext[1], ext[2], ext[3], 0, 0);
        fz_set_layout(&lses[p], ext[0], ext[1], ext[2], 1, 0, 0);
        /* an input may broadcast its huge dimension: only the outputs
         * then overflow */
        if (what & 0x40)
            for (int d = 0; d < 3; d++)
                if (ext[d] > 3) {
                    outs[p].stride[d] = 0;
                    lses[p].stride[d] = 0;
                }
        outs[p].data = fz_top_ptr((int)(2 * p));
        lses[p].data = fz_top_ptr((int)(2 * p + 1));
    }
    sdpa_merge_args a = SDPA_MERGE_ARGS_INIT;
    a.dtype = g.dt.dtype;
    a.parts = huge_parts ? big[val % 8] : g.parts;
    /* huge parts: the arrays themselves at fake addresses */
    a.outs = huge_parts ? (const sdpa_tensor *)fz_top_ptr(8) : outs;
    a.lses = huge_parts ? (const sdpa_tensor *)fz_top_ptr(9) : lses;
    fz_set_layout(&a.out, ext[0], ext[1], ext[2], ext[3], 0, 0);
    a.out.data = fz_top_ptr(10);
    if (what & 0x80) {
        fz_set_layout(&a.lse, ext[0], ext[1], ext[2], 1, 0, 0);
        a.lse.data = fz_top_ptr(11);
    }
    if (huge_parts && (what & 0x20)) { /* or a real out buffer */
        fz_buf *b = fz_buf_new("out", 1, 2 * es);
        a.out.data = b->mem;
    }
    fz_desc[0] = '\0';
    fz_describe("HUGE dtype=%d parts=%lld ext={%lld,%lld,%lld,%lld} "
                "what=0x%x",
                a.dtype, (long long)a.parts, (long long)ext[0],
                (long long)ext[1], (long long)ext[2], (long long)ext[3], what);
    sdpa_ctx *ctx = fz_ctx_new();
    fz_snapshot();
    long allocs = fz_alloc_count();
    int st = sdpa_merge(ctx, &a);
    fz_check_status("sdpa_merge", st, expect, ctx);
    CHECK(fz_alloc_count() == allocs, "a refused sdpa_merge allocated");
    fz_check_bufs(1, 0, "huge merge");
    fz_ctx_end(ctx);
}

static const fz_seed seeds[] = {
    {"direct_three_parts_lse",
     {{F_PARTS, 2}, {F_T, 3}, {F_DV, 3}, {F_NEG_LSE, 1}, {-1, 0}}},
    {"direct_all_empty_zero",
     {{F_PARTS, 1},
      {F_NEG_LSE, 3},
      {F_T, 2},
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {-1, 0}}},
    {"direct_empty_error", {{F_PARTS, 1}, {F_NEG_LSE, 3}, {-1, 0}}},
    {"direct_single_finite_copy",
     {{F_PARTS, 3}, {F_NEG_LSE, 2}, {F_DTYPE, 9}, {-1, 0}}},
    {"direct_broadcast_inputs",
     {{F_PARTS, 2}, {F_BCAST, 1 | (5 << 2)}, {F_N, 2}, {F_T, 4}, {-1, 0}}},
    {"direct_shared_inputs", {{F_PARTS, 1}, {F_BCAST, 2}, {-1, 0}}},
    {"direct_layouts_inplace",
     {{F_PARTS, 2},
      {F_H, 2},
      {F_T, 2},
      {F_LAYOUT, 0x55},
      {F_PAD, 0x3F},
      {F_LSE_S3, 1},
      {F_INPLACE, 3},
      {-1, 0}}},
    {"split_contiguous",
     {{F_MODE, 1}, {F_PARTS, 2}, {F_TK, 7}, {F_DK, 3}, {F_T, 3}, {-1, 0}}},
    {"split_interleaved_causal_sinks",
     {{F_MODE, 1},
      {F_PARTS, 1},
      {F_SPLIT, 3},
      {F_TK, 9},
      {F_CAUSAL, 2},
      {F_SINKS, 1},
      {F_H, 1},
      {F_T, 4},
      {F_DTYPE, 9},
      {-1, 0}}},
    {"split_window_alibi_softcap_gqa",
     {{F_MODE, 1},
      {F_PARTS, 3},
      {F_TK, 11},
      {F_WINDOW, 1 | (2 << 2) | (1 << 4)},
      {F_ALIBI, 1},
      {F_SOFTCAP, 1},
      {F_H, 3},
      {F_HKV, 1},
      {F_T, 4},
      {F_INPLACE, 1},
      {-1, 0}}},
    {"nonfinite_lse", {{F_SPECIAL, 1 | 0x80}, {F_PARTS, 1}, {-1, 0}}},
    {"bad_negative_stride",
     {{F_BAD_KIND, 8}, {F_BAD_WHICH, 0}, {F_BAD_DIM, 2}, {F_T, 2}, {-1, 0}}},
    {"bad_out_writes_twice",
     {{F_BAD_KIND, 10}, {F_BAD_WHICH, 2}, {F_BAD_DIM, 3}, {F_DV, 2}, {-1, 0}}},
    {"bad_shape",
     {{F_BAD_KIND, 11}, {F_BAD_WHICH, 1}, {F_BAD_VAL, 2}, {-1, 0}}},
    {"bad_null_outs", {{F_BAD_KIND, 12}, {F_BAD_VAL, 2}, {-1, 0}}},
    {"bad_parts", {{F_BAD_KIND, 13}, {-1, 0}}},
    {"overlap_out_input", {{F_BAD_KIND, 14}, {F_PARTS, 1}, {-1, 0}}},
    {"struct_size_small", {{F_STRUCT, 28}, {-1, 0}}},
    {"bad_dtype", {{F_DTYPE, 15}, {-1, 0}}},
    {"huge_parts", {{F_MODE, 7}, {F_HUGE_WHAT, 0}, {F_HUGE_VAL, 6}, {-1, 0}}},
    {"huge_extent_broadcast_inputs",
     {{F_MODE, 7}, {F_HUGE_WHAT, 1 | 0x40 | 0x80}, {F_HUGE_VAL, 2}, {-1, 0}}},
};

static void reset(void)
{
    memset(&g, 0, sizeof g);
}

FZ_TARGET("fuzz_merge", "MERGE", "direct_default", F_SEED0, F_MODE, reset, run,
          run_huge);
