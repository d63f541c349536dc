/*
 * Randomised comparison against the long-double reference (reference.c).
 *
 * Hundreds of configurations from fixed seeds (splitmix64, testutil.h), in
 * float and double, each covering a random mix of: BHTD / BTHD layouts and
 * padded row strides for q, k, v, out, weights; GQA and MQA; Tq != Tk;
 * Dk != Dv; a uint8 mask (either convention); a bias with some -inf;
 * mask/bias broadcast by extent 1 or stride 0; causal TOP_LEFT and
 * BOTTOM_RIGHT; kv_lens including 0 and Tk; K/V broadcast over N by stride
 * 0; soft-cap; default, unit and custom scale; optional weights and lse;
 * both empty-row policies; 1..4 threads; tiled block sizes; and the 1.1
 * features: a sliding window (SDPA_FLAG_WINDOW, each side -1, 0 or 1..Tk),
 * ALiBi (the standard slopes of Hq heads, or random ones, some negative),
 * attention sinks (sigma_h in [-3, 3]) and, with the weights, the logits
 * output at a random stage (SCALED, CAPPED or MASKED).
 *
 * Every configuration runs on every kernel the context accepts
 * (PORTABLE, AVX2, AVX512; SDPA_ERR_UNSUPPORTED from
 * sdpa_ctx_set_int skips a kernel) and every path (AUTO, MATERIALISED, TILED,
 * DECODE; SDPA_ERR_UNSUPPORTED from sdpa_forward skips TILED/DECODE for that
 * configuration, but AUTO and MATERIALISED must always work).
 *
 * Also checked on every run: forbidden weights are exactly 0, the empty-row
 * policy (ERROR: SDPA_ERR_FULLY_MASKED_ROW with outputs untouched; ZERO:
 * zero rows and lse = -inf exactly), K/V rows at j >= kv_lens[b] are never
 * read (they hold NaN), every byte of out/weights/lse outside the logical
 * view (row padding) is never written, and every failed call leaves the
 * outputs untouched. With a window, the K/V rows that no query row of any
 * head sharing them may see (window, mask, causality, -inf bias, kv_lens:
 * the reference's union) hold NaN too. Logits are -inf exactly at
 * forbidden keys. With the logits (as with the weights) a forced TILED or
 * DECODE path may refuse with SDPA_ERR_UNSUPPORTED, outputs untouched.
 *
 * Tolerances (derived per configuration from the dtype; eps = FLT_EPSILON or
 * DBL_EPSILON, i.e. 2u):
 *   L     = max over allowed (i,j) of scale * sum_r |q_ir k_jr| + |bias_ij|
 *           (computed by the reference), an upper bound of |logit| without
 *           ALiBi;
 *   A     = max over allowed (i,j) of |slope_h * (j - d_i)| (0 without
 *           ALiBi): ALiBi adds at most A to |logit|, so L + A bounds the
 *           logit; A enters no dot product, so not the gemm term;
 *   S     = max_h |sigma_h| (0 without sinks): the sink is one more logit;
 *   e_s   = (Dk + 4) * eps * L + 4 * eps * (1 + L + A + S + softcap)
 *           + 2 * eps * A
 *           the classic gemm bound gamma_Dk * sum|terms| plus the roundings
 *           of scale, tanh, bias and ALiBi additions (on a value of at most
 *           L + A + S + softcap), the rounding of the slope and of the
 *           product slope * distance (2 eps A), and of the sink;
 *   Tk'   = Tk + 1 with sinks (the sink is a term of the row's sums), else
 *           Tk;
 *   e_p   = 2 * e_s + (Tk' + 16) * eps
 *           relative error of each probability: the shift by the row max
 *           (2 e_s), a vector exp accurate to a few ulp (16 eps budget), and
 *           the Tk'-term normalising sum;
 *   weights:  |w - ref| <= 2 * e_p                     (w <= 1)
 *   logits:   |s - ref| <= 2 * e_s                     (allowed keys; e_s
 *             bounds every stage: SCALED and CAPPED carry fewer roundings)
 *   out:      |o - ref| <= 2 * Vmax * (e_p + (Tk + 4) * eps)
 *             (the P·V dot of Tk terms adds gamma_Tk * sum p|v|)
 *   lse:      |l - ref| <= 2 * (e_s + (Tk' + 16) * eps + eps * |ref|)
 * with a safety factor 2. The inputs are drawn so that L stays around 1..16,
 * so in float the weight tolerance is at most a few 1e-4 and typically
 * ~1e-5, in double ~1e-13. A wrong mask, a missing normalisation, a wrong
 * GQA head, a wrong broadcast or a wrong causal offset moves weights and
 * outputs by O(1/Tk) >> these bounds; forbidden weights are in addition
 * compared for exact 0.
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

#include "reference.h"
#include "sdpa.h"
#include "checks.h"
#include "problem.h"
#include "testutil.h"

#define MAX_N TP_MAX_N

typedef struct cfg {
    uint64_t seed;
    int dtype;
    int64_t N, Hq, Hkv, Tq, Tk, Dk, Dv;
    int lay_q, lay_kv, lay_out, lay_w;
    int64_t pad_q, pad_kv, pad_out, pad_w;
    int kv_bcast;
    int use_mask, mask_b[4];
    double mask_p;
    int use_bias, bias_b[4];
    double bias_ninf_p;
    tp_call x; /* causal, mask convention, scale, soft-cap, kv_lens, window,
                  ALiBi slopes, sinks */
    double amp;
    int want_w, want_lse;
    int empty_zero;
    int threads;
    int64_t block_q, block_k;
    /* 1.1 */
    int alibi_mode; /* 0 none, 1 standard slopes, 2 random [0, 0.5),
                       3 random [-0.1, 0.1) */
    int want_logits, logits_stage;
    int64_t pad_l;
} cfg;

static void cfg_print(const cfg *c)
{
    print_message(
        "  cfg seed=%llu dtype=%s N=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld "
        "Dk=%lld Dv=%lld lay(q,kv,out,w)=%d,%d,%d,%d pad=%lld,%lld,%lld,%lld "
        "kv_bcast=%d mask=%d(inv=%d b=%d%d%d%d) bias=%d(b=%d%d%d%d) causal=%d "
        "kvlens=%d[",
        (unsigned long long)c->seed, c->dtype == SDPA_FLOAT32 ? "f32" : "f64",
        (long long)c->N, (long long)c->Hq, (long long)c->Hkv, (long long)c->Tq,
        (long long)c->Tk, (long long)c->Dk, (long long)c->Dv, c->lay_q,
        c->lay_kv, c->lay_out, c->lay_w, (long long)c->pad_q,
        (long long)c->pad_kv, (long long)c->pad_out, (long long)c->pad_w,
        c->kv_bcast, c->use_mask, c->x.mask_inverted, c->mask_b[0],
        c->mask_b[1], c->mask_b[2], c->mask_b[3], c->use_bias, c->bias_b[0],
        c->bias_b[1], c->bias_b[2], c->bias_b[3], c->x.causal, c->x.use_kvlens);
    for (int64_t b = 0; b < c->N; ++b)
        print_message("%s%lld", b ? "," : "", (long long)c->x.kv_lens[b]);
    print_message("] scale=%g softcap=%g w=%d lse=%d zero=%d threads=%d "
                  "block=%lld,%lld\n",
                  c->x.scale, c->x.softcap, c->want_w, c->want_lse,
                  c->empty_zero, c->threads, (long long)c->block_q,
                  (long long)c->block_k);
    print_message("      window=%d(%lld,%lld) alibi=%d[", c->x.use_window,
                  (long long)c->x.win_left, (long long)c->x.win_right,
                  c->alibi_mode);
    for (int64_t h = 0; c->alibi_mode && h < c->Hq; ++h)
        print_message("%s%.17g", h ? "," : "", c->x.slopes[h]);
    print_message("] sinks=%d[", c->x.use_sinks);
    for (int64_t h = 0; c->x.use_sinks && h < c->Hq; ++h)
        print_message("%s%.17g", h ? "," : "", c->x.sinks[h]);
    print_message("] logits=%d(stage %d, pad %lld)\n", c->want_logits,
                  c->logits_stage, (long long)c->pad_l);
}

/* The standard ALiBi slopes (Press et al.), from the closed form in
 * include/sdpa.h, computed here (not by sdpa_alibi_slopes). */
static void standard_slopes(int64_t heads, double max_bias, double *slopes)
{
    int64_t n = 1;
    while (n * 2 <= heads)
        n *= 2;
    for (int64_t h = 0; h < heads; ++h)
        slopes[h] =
            h < n
                ? exp2(-max_bias * (double)(h + 1) / (double)n)
                : exp2(-max_bias * (double)(2 * (h - n) + 1) / (double)(2 * n));
}

static int64_t pick_dim(rng *r, int64_t lo, int64_t hi)
{
    return rng_int(r, lo, hi);
}

static void cfg_random(cfg *c, uint64_t seed, int dtype, int big)
{
    rng r;
    r.s = seed * UINT64_C(0x2545F4914F6CDD1D);
    r.s += dtype == SDPA_FLOAT32 ? 1u : 2u;
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->dtype = dtype;
    static const int64_t hq_choices[] = {1, 2, 3, 4, 6, 8};
    c->N = pick_dim(&r, 1, big ? 2 : MAX_N);
    c->Hq = hq_choices[rng_int(&r, 0, big ? 3 : 5)];
    c->Hkv = tp_draw_hkv(&r, c->Hq);
    if (big) {
        c->Tq =
            rng_int(&r, 0, 3) == 0 ? rng_int(&r, 1, 4) : pick_dim(&r, 1, 150);
        c->Tk = pick_dim(&r, 60, 400);
    } else {
        int64_t m = rng_int(&r, 0, 4);
        c->Tq = m == 0 ? 1 : m == 1 ? rng_int(&r, 1, 3) : pick_dim(&r, 1, 24);
        c->Tk = pick_dim(&r, 1, 40);
    }
    c->Dk = pick_dim(&r, 1, 24);
    c->Dv = rng_int(&r, 0, 2) == 0 ? c->Dk : pick_dim(&r, 1, 24);
    c->lay_q = (int)rng_int(&r, 0, 1);
    c->lay_kv = (int)rng_int(&r, 0, 1);
    c->lay_out = (int)rng_int(&r, 0, 1);
    c->lay_w = LAYOUT_BHTD;
    c->pad_q = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 5) : 0;
    c->pad_kv = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 5) : 0;
    c->pad_out = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 5) : 0;
    c->pad_w = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 5) : 0;
    c->kv_bcast = rng_int(&r, 0, 4) == 0;

    c->use_mask = rng_int(&r, 0, 2) == 0;
    c->x.mask_inverted = rng_int(&r, 0, 1) == 0;
    for (int d = 0; d < 3; ++d) {
        c->mask_b[d] =
            (int)rng_int(&r, 0, 3); /* 0,1 full; 2 ext 1; 3 stride 0 */
        if (c->mask_b[d] == 1)
            c->mask_b[d] = 0;
        c->bias_b[d] = (int)rng_int(&r, 0, 3);
        if (c->bias_b[d] == 1)
            c->bias_b[d] = 0;
    }
    static const double mp[] = {0.05, 0.2, 0.5};
    c->mask_p = mp[rng_int(&r, 0, 2)];
    c->use_bias = rng_int(&r, 0, 2) == 0;
    c->bias_ninf_p = rng_int(&r, 0, 1) ? 0.15 : 0.0;
    c->x.causal = (int)rng_int(&r, 0, 2);
    tp_draw_kvlens(&c->x, &r, c->N, c->Tk);
    tp_draw_scale(&c->x, &r);
    int64_t cm = rng_int(&r, 0, 5);
    c->x.softcap = cm == 0 ? 1.0 : cm == 1 ? 5.0 : cm == 2 ? 30.0 : 0.0;
    /* Keep the logit bound L = scale * Dk * amp^2 in [1, 16]. */
    double se = c->x.scale == 0.0 ? 1.0 / sqrt((double)c->Dk) : c->x.scale;
    double target = 1.0 + 15.0 * rng_unit(&r);
    c->amp = sqrt(target / (se * (double)c->Dk));
    c->want_w = rng_int(&r, 0, 1) == 0;
    c->want_lse = rng_int(&r, 0, 1) == 0;
    c->empty_zero = rng_int(&r, 0, 1) == 0;
    c->threads = (int)rng_int(&r, 1, 4);
    static const int64_t blocks[] = {0, 0, 1, 3, 8, 16, 64};
    c->block_q = blocks[rng_int(&r, 0, 6)];
    c->block_k = blocks[rng_int(&r, 0, 6)];
    /* The key dimension of mask and bias (drawn last, so that the draws
     * above stay those of earlier versions): 0 contiguous, 2 extent 1,
     * 3 stride 0 over Tk keys, 4 a stride of 2 or 3 (gaps between keys). */
    static const int key_modes[] = {0, 0, 0, 0, 2, 3, 4, 4};
    c->mask_b[3] = key_modes[rng_int(&r, 0, 7)];
    c->bias_b[3] = key_modes[rng_int(&r, 0, 7)];
    /* The 1.1 features, drawn after everything above (the configurations
     * of 1.0 stay what they were). Every draw happens whether the feature
     * is on or not. A window side: -1 (unbounded), 0, or 1..Tk. */
    tp_draw_window(&c->x, &r, c->Tk);
    int64_t am = rng_int(&r, 0, 5);
    c->alibi_mode = am <= 2 ? 0 : (int)(am - 2);
    for (int h = 0; h < 8; ++h) {
        double u = rng_unit(&r);
        c->x.slopes[h] = c->alibi_mode == 2 ? 0.5 * u : 0.2 * u - 0.1;
    }
    if (c->alibi_mode == 1)
        standard_slopes(c->Hq, 8.0, c->x.slopes);
    c->x.use_alibi = c->alibi_mode != 0;
    c->x.use_sinks = rng_int(&r, 0, 2) == 0;
    for (int h = 0; h < 8; ++h)
        c->x.sinks[h] = rng_sym(&r, 3.0);
    c->want_logits = rng_int(&r, 0, 1) == 0 && c->want_w;
    c->logits_stage = (int)rng_int(&r, SDPA_LOGITS_SCALED, SDPA_LOGITS_MASKED);
    c->pad_l = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 5) : 0;
    if (!c->want_logits)
        c->logits_stage = 0;
}

typedef struct inst {
    test_problem p;
    unsigned char *map_out, *map_w, *map_lse, *map_lg;
} inst;

static void inst_make(inst *s, const cfg *c)
{
    rng r = {c->seed ^ 0xA5A5A5A5DEADBEEFull};
    memset(s, 0, sizeof *s);
    const int dt = c->dtype;
    test_problem *p = &s->p;
    tp_init(p, dt, c->N, c->Hq, c->Hkv, c->Tq, c->Tk, c->Dk, c->Dv);
    tbuf_make(&p->q, dt, c->N, c->Hq, c->Tq, c->Dk, c->lay_q, c->pad_q);
    tbuf_fill_random(&p->q, &r, c->amp);
    int64_t nkv = c->kv_bcast ? 1 : c->N;
    tbuf_make(&p->k, dt, nkv, c->Hkv, c->Tk, c->Dk, c->lay_kv, c->pad_kv);
    tbuf_make(&p->v, dt, nkv, c->Hkv, c->Tk, c->Dv, c->lay_kv, c->pad_kv);
    tbuf_fill_random(&p->k, &r, c->amp);
    tbuf_fill_random(&p->v, &r, 1.0);
    /* K/V rows at j >= kv_lens[b] are never read: poison them with NaN. */
    for (int64_t b = 0; b < nkv; ++b) {
        int64_t L = c->x.kv_lens[b];
        if (c->kv_bcast)
            for (int64_t bb = 0; bb < c->N; ++bb)
                L = c->x.kv_lens[bb] > L ? c->x.kv_lens[bb] : L;
        for (int64_t h = 0; h < c->Hkv; ++h)
            for (int64_t j = L; j < c->Tk; ++j) {
                for (int64_t d = 0; d < c->Dk; ++d)
                    tset(&p->k, b, h, j, d, NAN);
                for (int64_t d = 0; d < c->Dv; ++d)
                    tset(&p->v, b, h, j, d, NAN);
            }
    }
    if (c->kv_bcast) {
        p->k.t.shape[0] = p->v.t.shape[0] = c->N;
        p->k.t.stride[0] = p->v.t.stride[0] = 0;
    }
    /* Broadcast mask and bias; mode 4 puts keys 2 or 3 apart. */
    const int64_t full[4] = {c->N, c->Hq, c->Tq, c->Tk};
    const int64_t key_step = 2 + (int64_t)(c->seed & 1);
    if (c->use_mask) {
        tp_make_bcast(&p->mask, ELEM_U8, full, c->mask_b, key_step);
        tp_fill_bcast(&p->mask, &r, 1, c->x.mask_inverted, c->mask_p, 0);
    }
    if (c->use_bias) {
        tp_make_bcast(&p->bias, dt, full, c->bias_b, key_step);
        tp_fill_bcast(&p->bias, &r, 0, 0, 0, c->bias_ninf_p);
    }
    tbuf_make(&p->out, dt, c->N, c->Hq, c->Tq, c->Dv, c->lay_out, c->pad_out);
    s->map_out = tbuf_logical_map(&p->out);
    if (c->want_w) {
        tbuf_make(&p->w, dt, c->N, c->Hq, c->Tq, c->Tk, c->lay_w, c->pad_w);
        s->map_w = tbuf_logical_map(&p->w);
    }
    if (c->want_lse) {
        tbuf_make(&p->lse, dt, c->N, c->Hq, c->Tq, 1, LAYOUT_BHTD,
                  c->pad_out ? 1 : 0);
        s->map_lse = tbuf_logical_map(&p->lse);
    }
    if (c->want_logits) {
        tbuf_make(&p->lg, dt, c->N, c->Hq, c->Tq, c->Tk, LAYOUT_BHTD, c->pad_l);
        s->map_lg = tbuf_logical_map(&p->lg);
    }
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    tp_apply(&a, dt, &c->x);
    tp_bind(p, &a);
    a.logits_stage = c->want_logits ? c->logits_stage : 0;
    p->a = a;
}

static void inst_free(inst *s)
{
    tp_free(&s->p);
    free(s->map_out);
    free(s->map_w);
    free(s->map_lse);
    free(s->map_lg);
}

typedef test_tol tol;

static tol tolerance(const cfg *c, const ref_result *r)
{
    return tp_forward_tol(tp_eps(c->dtype), r, c->Tk, c->Dk, c->x.softcap,
                          c->x.use_sinks, 0, 0);
}

/* Largest observed error / tolerance, per output (out, weights, lse,
 * logits). */
static double g_ratio[4];

static void note_ratio(int k, double e, double t)
{
    if (t > 0 && e / t > g_ratio[k])
        g_ratio[k] = e / t;
}

/* One row of a per-key output (weights, logits) against the reference:
 * a key the row may not see holds exactly `forbidden` (and is then compared
 * with the reference too when compare_forbidden), every other one is
 * within bound of it. Returns 0 when it matches, else prints and returns 1. */
static int compare_keys(const char *name, const char *forbidden_name,
                        const tbuf *x, const long double *ref_keys,
                        const unsigned char *allowed, size_t row, int64_t b,
                        int64_t h, int64_t i, int64_t Tk, double forbidden,
                        int compare_forbidden, double bound, int ratio,
                        const char *where)
{
    for (int64_t j = 0; j < Tk; ++j) {
        size_t k = row * (size_t)Tk + (size_t)j;
        double ref = (double)ref_keys[k];
        double got = tget(x, b, h, i, j);
        if (!allowed[k]) {
            if (got != forbidden) {
                print_message("  forbidden %s[%lld,%lld,%lld,%lld] = %.10g, "
                              "not %s (%s)\n",
                              name, (long long)b, (long long)h, (long long)i,
                              (long long)j, got, forbidden_name, where);
                return 1;
            }
            if (!compare_forbidden)
                continue;
        }
        double e = fabs(got - ref);
        if (!(e <= bound)) {
            print_message("  MISMATCH %ss[%lld,%lld,%lld,%lld] got %.10g ref "
                          "%.10g tol %.3g (%s)\n",
                          name, (long long)b, (long long)h, (long long)i,
                          (long long)j, got, ref, bound, where);
            return 1;
        }
        note_ratio(ratio, e, bound);
    }
    return 0;
}

/* Compare one run; returns 0 when it matches, else prints and returns 1. */
static int compare(const cfg *c, const inst *s, const ref_result *r,
                   const tol *t, int path, int kernel)
{
    char where[128];
    snprintf(where, sizeof where, "path=%s kernel=%s", tp_path_name(path),
             kernel_name(kernel));
    char where_lg[160];
    snprintf(where_lg, sizeof where_lg, "stage %d, %s", c->logits_stage, where);
    for (int64_t b = 0; b < c->N; ++b)
        for (int64_t h = 0; h < c->Hq; ++h)
            for (int64_t i = 0; i < c->Tq; ++i) {
                size_t row = (size_t)((b * c->Hq + h) * c->Tq + i);
                for (int64_t d = 0; d < c->Dv; ++d) {
                    double ref =
                        (double)r->out[row * (size_t)c->Dv + (size_t)d];
                    double got = tget(&s->p.out, b, h, i, d);
                    double e = fabs(got - ref);
                    if (!(e <= t->out)) {
                        print_message("  MISMATCH out[%lld,%lld,%lld,%lld] got "
                                      "%.10g ref %.10g tol %.3g (%s)\n",
                                      (long long)b, (long long)h, (long long)i,
                                      (long long)d, got, ref, t->out, where);
                        return 1;
                    }
                    note_ratio(0, e, t->out);
                }
                if (s->p.w.mem &&
                    compare_keys("weight", "exactly 0", &s->p.w, r->weights,
                                 r->allowed, row, b, h, i, c->Tk, 0.0, 1, t->w,
                                 1, where))
                    return 1;
                if (s->p.lg.mem &&
                    compare_keys("logit", "-inf", &s->p.lg, r->logits,
                                 r->allowed, row, b, h, i, c->Tk, -INFINITY, 0,
                                 t->logit, 3, where_lg))
                    return 1;
                if (s->p.lse.mem) {
                    double ref = (double)r->lse[row];
                    double got = tget(&s->p.lse, b, h, i, 0);
                    int ok;
                    if (isinf(ref))
                        ok = isinf(got) && got < 0;
                    else
                        ok = fabs(got - ref) <=
                             t->lse_abs + t->lse_rel * fabs(ref);
                    if (!ok) {
                        print_message(
                            "  MISMATCH lse[%lld,%lld,%lld] got %.10g "
                            "ref %.10g (%s)\n",
                            (long long)b, (long long)h, (long long)i, got, ref,
                            where);
                        return 1;
                    }
                    if (!isinf(ref))
                        note_ratio(2, fabs(got - ref),
                                   t->lse_abs + t->lse_rel * fabs(ref));
                }
            }
    /* Padding between rows is never written. */
    long e1 = tp_untouched(&s->p.out, s->map_out, 0);
    long e2 = tp_untouched(&s->p.w, s->map_w, 0);
    long e3 = tp_untouched(&s->p.lse, s->map_lse, 0);
    long e4 = tp_untouched(&s->p.lg, s->map_lg, 0);
    if (e1 >= 0 || e2 >= 0 || e3 >= 0 || e4 >= 0) {
        print_message("  padding written: out elem %ld, weights elem %ld, lse "
                      "elem %ld, logits elem %ld (%s)\n",
                      e1, e2, e3, e4, where);
        return 1;
    }
    return 0;
}

typedef struct stats {
    long configs, runs[4], skipped[4], errors_expected, failures;
    long kernels_skipped;
    /* configurations per 1.1 feature: window, ALiBi (standard, random),
     * sinks, logits (per stage), several at once, none */
    long window, alibi_std, alibi_rnd, sinks, logits[4], combined, none;
} stats;

static void run_config(sdpa_ctx *ctx, const cfg *c, stats *st)
{
    inst s;
    inst_make(&s, c);
    ref_result r;
    assert_int_equal(ref_forward(&s.p.a, &r), 0);
    if (c->x.use_window)
        tp_poison_unseen(&s.p, &r, c->kv_bcast);
    const tol t = tolerance(c, &r);
    const int expect_error = r.any_empty && !c->empty_zero;
    if (expect_error)
        st->errors_expected++;
    st->configs++;
    const int features = c->x.use_window + (c->alibi_mode != 0) +
                         c->x.use_sinks + c->want_logits;
    st->window += c->x.use_window;
    st->alibi_std += c->alibi_mode == 1;
    st->alibi_rnd += c->alibi_mode >= 2;
    st->sinks += c->x.use_sinks;
    st->logits[c->logits_stage]++;
    st->combined += features >= 2;
    st->none += features == 0;

    tp_set_empty_rows(ctx, c->empty_zero);
    tp_set(ctx, SDPA_OPT_NUM_THREADS, c->threads);
    /* Block sizes have no documented range beyond "0 = auto": accept a
     * refusal of a particular size, and fall back to auto. */
    int bs = sdpa_ctx_set_int(ctx, SDPA_OPT_BLOCK_Q, c->block_q);
    assert_true(bs == SDPA_OK || bs == SDPA_ERR_BAD_OPTION_VALUE);
    if (bs != SDPA_OK)
        tp_set(ctx, SDPA_OPT_BLOCK_Q, 0);
    bs = sdpa_ctx_set_int(ctx, SDPA_OPT_BLOCK_K, c->block_k);
    assert_true(bs == SDPA_OK || bs == SDPA_ERR_BAD_OPTION_VALUE);
    if (bs != SDPA_OK)
        tp_set(ctx, SDPA_OPT_BLOCK_K, 0);

    for (int ki = 0; ki < TEST_KERNELS; ++ki) {
        if (!tp_use_kernel(ctx, ki)) {
            st->kernels_skipped++;
            continue;
        }
        for (int path = SDPA_PATH_AUTO; path <= SDPA_PATH_DECODE; ++path) {
            tp_use_path(ctx, path);
            tp_clear_outputs(&s.p);
            int rc = sdpa_forward(ctx, &s.p.a);
            int bad = 0;
            if (rc == SDPA_ERR_UNSUPPORTED &&
                (path == SDPA_PATH_TILED || path == SDPA_PATH_DECODE)) {
                st->skipped[path]++;
                bad = tp_untouched(&s.p.out, s.map_out, 1) >= 0 ||
                      tp_untouched(&s.p.w, s.map_w, 1) >= 0 ||
                      tp_untouched(&s.p.lse, s.map_lse, 1) >= 0 ||
                      tp_untouched(&s.p.lg, s.map_lg, 1) >= 0;
                if (bad)
                    print_message("  UNSUPPORTED but outputs were written "
                                  "(path %s)\n",
                                  tp_path_name(path));
            } else if (expect_error) {
                if (rc != SDPA_ERR_FULLY_MASKED_ROW) {
                    print_message("  expected FULLY_MASKED_ROW (b%lld h%lld "
                                  "i%lld), got %s: %s (path %s)\n",
                                  (long long)r.empty_b, (long long)r.empty_h,
                                  (long long)r.empty_i, sdpa_status_string(rc),
                                  sdpa_ctx_last_error(ctx), tp_path_name(path));
                    bad = 1;
                } else if (tp_untouched(&s.p.out, s.map_out, 1) >= 0 ||
                           tp_untouched(&s.p.w, s.map_w, 1) >= 0 ||
                           tp_untouched(&s.p.lse, s.map_lse, 1) >= 0 ||
                           tp_untouched(&s.p.lg, s.map_lg, 1) >= 0) {
                    print_message("  FULLY_MASKED_ROW but outputs were "
                                  "written (path %s)\n",
                                  tp_path_name(path));
                    bad = 1;
                }
                st->runs[path]++;
            } else if (rc != SDPA_OK) {
                print_message("  sdpa_forward failed: %s: %s (path %s kernel "
                              "%d)\n",
                              sdpa_status_string(rc), sdpa_ctx_last_error(ctx),
                              tp_path_name(path), test_kernels[ki]);
                bad = 1;
            } else {
                st->runs[path]++;
                bad = compare(c, &s, &r, &t, path, test_kernels[ki]);
            }
            if (bad) {
                if (st->failures < 25)
                    cfg_print(c);
                st->failures++;
            }
        }
    }
    ref_free(&r);
    inst_free(&s);
}

static void run_many(int dtype, uint64_t first, long count, int big)
{
    sdpa_ctx *ctx = tp_ctx(0);
    stats st;
    memset(&st, 0, sizeof st);
    memset(g_ratio, 0, sizeof g_ratio);
    for (long i = 0; i < count; ++i) {
        cfg c;
        cfg_random(&c, first + (uint64_t)i, dtype, big);
        run_config(ctx, &c, &st);
    }
    print_message("  %s: %ld configs (%ld expecting FULLY_MASKED_ROW); runs "
                  "AUTO %ld, MATERIALISED %ld, TILED %ld (+%ld unsupported), "
                  "DECODE %ld (+%ld unsupported); kernel skips %ld; "
                  "failures %ld\n",
                  dtype == SDPA_FLOAT32 ? "float" : "double", st.configs,
                  st.errors_expected, st.runs[0], st.runs[1], st.runs[2],
                  st.skipped[2], st.runs[3], st.skipped[3], st.kernels_skipped,
                  st.failures);
    print_message("  1.1 features: window %ld, ALiBi %ld (standard %ld, "
                  "random %ld), sinks %ld, logits %ld (SCALED %ld, CAPPED "
                  "%ld, MASKED %ld); two or more %ld, none %ld\n",
                  st.window, st.alibi_std + st.alibi_rnd, st.alibi_std,
                  st.alibi_rnd, st.sinks,
                  st.logits[1] + st.logits[2] + st.logits[3], st.logits[1],
                  st.logits[2], st.logits[3], st.combined, st.none);
    print_message("  largest error/tolerance: out %.3g, weights %.3g, lse "
                  "%.3g, logits %.3g\n",
                  g_ratio[0], g_ratio[1], g_ratio[2], g_ratio[3]);
    sdpa_ctx_destroy(ctx);
    assert_int_equal(st.failures, 0);
    assert_int_equal(st.configs, count);
    /* AUTO and MATERIALISED ran every configuration on every kernel. */
    assert_int_equal(st.runs[0], st.runs[1]);
    assert_true(st.runs[0] >= count);
}

/* One run of run_many: dtype, first seed, configurations, long keys. */
typedef struct run_spec {
    int dtype;
    uint64_t first;
    long count;
    int big;
} run_spec;

static void test_random(void **state)
{
    const run_spec *r = *state;
    run_many(r->dtype, r->first, r->count, r->big);
}

static run_spec g_runs[] = {{SDPA_FLOAT32, 1000, 300, 0},
                            {SDPA_FLOAT64, 1000, 300, 0},
                            {SDPA_FLOAT32, 50000, 40, 1},
                            {SDPA_FLOAT64, 50000, 40, 1}};

int main(void)
{
    const struct CMUnitTest tests[] = {
        {"test_random_float", test_random, NULL, NULL, &g_runs[0]},
        {"test_random_double", test_random, NULL, NULL, &g_runs[1]},
        {"test_random_float_long_keys", test_random, NULL, NULL, &g_runs[2]},
        {"test_random_double_long_keys", test_random, NULL, NULL, &g_runs[3]},
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
