/*
 * libFuzzer target for sdpa_backward.
 *
 * An input (fuzz_problem.h's fields, then enum field below; missing bytes
 * read as 0) decodes to a small attention problem and its backward call:
 * dtype (also the declared half types and invalid values), N, Hq / Hkv
 * (GQA), Tq, Tk, Dk, Dv, layouts (heads inner or outer, padded rows) of q,
 * k, v, out, lse, dout and of the gradients dq, dk, dv; K and V broadcast
 * over N (extent 1 or stride 0: dk / dv then have extent 1 and sum over the
 * batch); mask and bias broadcast over any dimension (bias with -inf) and
 * the optional dbias (extent 1 exactly where the bias broadcasts); causal,
 * a window, scale,
 * soft-cap, kv_lens (the K/V rows past them hold NaN), ALiBi slopes, sinks
 * and the optional dsinks; the context's options (empty-row policy,
 * threads, blocks, kernel), struct_size, a failing allocator, special
 * values (NaN / +-inf in lse, q, dout or v), one argument error (the
 * forward's rules; the gradients' shapes, strides, NULL pointers and
 * overlaps), and a huge mode whose extents reach 2^62 at fake addresses
 * near the top of the address space (refused before anything is read).
 * out and lse are the long-double reference's (tests/common/reference.c),
 * rounded to the dtype, as the forward call would have written them.
 *
 * Checks: documented statuses, the ones the arguments call for (a fully
 * masked row under the default policy, NONFINITE for a NaN / +inf logit or
 * lse, or a -inf lse where the row has keys); outputs untouched and a
 * message after every refusal (NONFINITE included: the header finds every
 * error before writing, except NONFINITE, whose outputs are unspecified);
 * inputs never written; on success dq, dk, dv, dbias and dsinks within the
 * bounds of the long-double reference of the header's formulas
 * (tests/common/oracle.c, tests/test_backward.c's derivation), exactly 0 where
 * no term reaches them (keys no row sees, empty rows, forbidden dbias entries);
 * padding untouched; bitwise identical results for another thread count;
 * a repeated call allocates nothing.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_problem.h"
#include "fuzz_ref.h"

/* After fuzz_problem.h's fields (F_LAYOUT: a bit per tensor, heads inner). */
enum field {
    F_PAD = FZ_PROBLEM_FIELDS,
    F_KV_BCAST,
    F_MASK,
    F_MASK_B,
    F_MASK_DENS,
    F_BIAS,
    F_BIAS_B,
    F_BIAS_NINF,
    F_CAUSAL,
    F_WINDOW,
    F_SCALE,
    F_SOFTCAP,
    F_KVLENS,
    F_KV0,
    F_KV1,
    F_ALIBI,
    F_SINKS,
    F_DBIAS,
    F_DSINKS,
    F_OPT0_ID, /* four (id, value) slots: fz_apply_options */
    F_BAD_KIND = F_OPT0_ID + 8,
    F_BAD_WHICH,
    F_BAD_DIM,
    F_BAD_VAL,
    F_STRUCT,
    F_OOM,
    F_SECOND,
    F_SPECIAL,
    F_SP_POS,
    F_AMP,
    F_HUGE_WHAT,
    F_HUGE_VAL,
    F_SEED0, /* eight bytes */
    F_COUNT = F_SEED0 + 8
};

enum { BWD_ARGS_V1 = 952 };

enum {
    T_Q,
    T_K,
    T_V,
    T_MASK,
    T_BIAS,
    T_OUT,
    T_LSE,
    T_DOUT,
    T_DQ,
    T_DK,
    T_DV,
    T_DBIAS,
    T_COUNT
};
static const struct {
    const char *name;
    int output, inner1, blas_rows, row_vec;
} tinfo[T_COUNT] = {
    {"q", 0, 1, 1, 0},    {"k", 0, 1, 1, 0},    {"v", 0, 1, 1, 0},
    {"mask", 0, 0, 0, 0}, {"bias", 0, 0, 0, 0}, {"out", 0, 1, 1, 0},
    {"lse", 0, 0, 0, 1},  {"dout", 0, 1, 1, 0}, {"dq", 1, 1, 1, 0},
    {"dk", 1, 1, 0, 0},   {"dv", 1, 1, 0, 0},   {"dbias", 1, 0, 0, 0},
};

typedef struct bcfg {
    fz_dtype dt;
    int64_t N, Hq, Hkv, Tq, Tk, Dk, Dv, nk, nv;
    int64_t kv_lens[4];
    int use_kvlens;
    double slopes[8], sinks[8], dsinks[9]; /* dsinks[0], [Hq+1]: guards */
} bcfg;

static bcfg g;
static fz_tens g_t[T_COUNT];

static void describe(const sdpa_backward_args *a)
{
    fz_desc[0] = '\0';
    fz_describe("dtype=%d N=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld Dk=%lld "
                "Dv=%lld causal=%d flags=0x%x window=%lld,%lld scale=%g "
                "softcap=%g kv_lens=%s alibi=%d sinks=%d dsinks=%d zero=%lld "
                "threads=%lld",
                g.dt.dtype, (long long)g.N, (long long)g.Hq, (long long)g.Hkv,
                (long long)g.Tq, (long long)g.Tk, (long long)g.Dk,
                (long long)g.Dv, a->causal, a->flags, (long long)a->window_left,
                (long long)a->window_right, a->scale, a->softcap,
                g.use_kvlens ? "yes" : "no", a->alibi_slopes != NULL,
                a->sinks != NULL, a->dsinks != NULL,
                (long long)fz_opt.empty_zero, (long long)fz_opt.threads);
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present)
            fz_describe(
                " %s{%lld,%lld,%lld,%lld|%lld,%lld,%lld,%lld}", tinfo[t].name,
                (long long)g_t[t].t.shape[0], (long long)g_t[t].t.shape[1],
                (long long)g_t[t].t.shape[2], (long long)g_t[t].t.shape[3],
                (long long)g_t[t].t.stride[0], (long long)g_t[t].t.stride[1],
                (long long)g_t[t].t.stride[2], (long long)g_t[t].t.stride[3]);
}

/* Each tensor's extents (0: mask, bias and dbias, laid out apart), K and
 * dk over nk batch items, V and dv over nv. */
static void tensor_shapes(int64_t nk, int64_t nv, int64_t shp[T_COUNT][4])
{
    const int64_t s[T_COUNT][4] = {{g.N, g.Hq, g.Tq, g.Dk},
                                   {nk, g.Hkv, g.Tk, g.Dk},
                                   {nv, g.Hkv, g.Tk, g.Dv},
                                   {0, 0, 0, 0},
                                   {0, 0, 0, 0},
                                   {g.N, g.Hq, g.Tq, g.Dv},
                                   {g.N, g.Hq, g.Tq, 1},
                                   {g.N, g.Hq, g.Tq, g.Dv},
                                   {g.N, g.Hq, g.Tq, g.Dk},
                                   {nk, g.Hkv, g.Tk, g.Dk},
                                   {nv, g.Hkv, g.Tk, g.Dv},
                                   {0, 0, 0, 0}};
    memcpy(shp, s, sizeof s);
}

/* mask / bias: per dimension full, extent 1 or stride 0 (2 bits each). */
static void broadcast_layout(sdpa_tensor *x, unsigned modes)
{
    const int64_t full[4] = {g.N, g.Hq, g.Tq, g.Tk};
    fz_broadcast_layout(x, modes, full);
}

/* The valid call's tensors and options (before any argument error). */
static void decode_problem(sdpa_backward_args *a)
{
    g.dt = fz_decode_dtype(fz(F_DTYPE), fz(F_DTYPE_RAW));
    const size_t es = fz_esize(g.dt.compute);
    g.N = 1 + (int64_t)(fz(F_N) % 2);
    g.Hkv = 1 + (int64_t)(fz(F_HKV) % 2);
    g.Hq = g.Hkv * (1 + (int64_t)(fz(F_GROUP) % 2));
    g.Tq = 1 + (int64_t)(fz(F_TQ) % 5);
    g.Tk = 1 + (int64_t)(fz(F_TK) % 7);
    g.Dk = 1 + (int64_t)(fz(F_DK) % 5);
    g.Dv = 1 + (int64_t)(fz(F_DV) % 5);
    unsigned kvb = fz(F_KV_BCAST) % 4;
    g.nk = kvb == 1 || kvb == 3 ? 1 : g.N;
    g.nv = kvb == 1 ? 1 : g.N;
    unsigned lay = fz(F_LAYOUT), pad = fz(F_PAD);
    int64_t shp[T_COUNT][4];
    tensor_shapes(g.nk, g.nv, shp);
    memset(g_t, 0, sizeof g_t);
    for (int t = 0; t < T_COUNT; t++) {
        g_t[t].es = t == T_MASK ? 1 : es;
        if (t == T_MASK || t == T_BIAS || t == T_DBIAS)
            continue;
        g_t[t].present = 1;
        fz_set_layout(&g_t[t].t, shp[t][0], shp[t][1], shp[t][2], shp[t][3],
                      (lay >> (t % 8)) & 1, (int64_t)((pad >> (t % 8)) & 1));
    }
    if (kvb == 2) { /* shared by the batch through stride 0 */
        g_t[T_K].t.stride[0] = 0;
        g_t[T_V].t.stride[0] = 0;
        g.nk = g.nv = 1;
        for (int t = T_DK; t <= T_DV; t++)
            fz_set_layout(&g_t[t].t, 1, g.Hkv, g.Tk, t == T_DK ? g.Dk : g.Dv,
                          (lay >> (t % 8)) & 1, 0);
    }
    if (g.N == 1)
        g.nk = g.nv = 1;
    g_t[T_MASK].present = fz(F_MASK) % 3 == 1;
    g_t[T_BIAS].present = fz(F_BIAS) % 3 == 1;
    broadcast_layout(&g_t[T_MASK].t, fz(F_MASK_B));
    broadcast_layout(&g_t[T_BIAS].t, fz(F_BIAS_B));
    /* dbias: extent 1 exactly where the bias broadcasts */
    g_t[T_DBIAS].present = g_t[T_BIAS].present && fz(F_DBIAS) % 2 == 1;
    {
        const sdpa_tensor *b = &g_t[T_BIAS].t;
        int64_t e[4];
        for (int d = 0; d < 4; d++)
            e[d] = b->shape[d] > 1 && b->stride[d] != 0 ? b->shape[d] : 1;
        fz_set_layout(&g_t[T_DBIAS].t, e[0], e[1], e[2], e[3], 0,
                      (int64_t)(fz(F_DBIAS) >> 1 & 3));
    }

    a->dtype = g.dt.dtype;
    unsigned cv = fz(F_CAUSAL) % 4;
    a->causal = cv == 1   ? SDPA_CAUSAL_TOP_LEFT
                : cv == 2 ? SDPA_CAUSAL_BOTTOM_RIGHT
                          : SDPA_CAUSAL_NONE;
    if (fz(F_MASK) & 0x40)
        a->flags |= SDPA_FLAG_MASK_NONZERO_ALLOWS;
    if (fz(F_WINDOW) % 4 == 1) {
        a->flags |= SDPA_FLAG_WINDOW;
        a->window_left = (int64_t)(fz(F_WINDOW) >> 2 & 3) - 1;
        a->window_right = (int64_t)(fz(F_WINDOW) >> 4 & 3) - 1;
    }
    a->scale =
        fz(F_SCALE) % 4 == 1 ? 0.1 + (double)(fz(F_SCALE) >> 2) / 20 : 0.0;
    a->softcap =
        fz(F_SOFTCAP) % 4 == 1 ? 0.5 + (double)(fz(F_SOFTCAP) >> 2) / 4 : 0.0;
    g.use_kvlens = fz(F_KVLENS) % 3 == 1;
    for (int64_t b = 0; b < g.N; b++)
        g.kv_lens[b] =
            g.use_kvlens ? (int64_t)(fz(F_KV0 + (int)b) % (unsigned)(g.Tk + 1))
                         : g.Tk;
    if (fz(F_ALIBI) % 3 == 1) {
        for (int64_t h = 0; h < g.Hq; h++)
            g.slopes[h] = fz_sym(1.0);
        a->alibi_slopes = g.slopes;
    }
    if (fz(F_SINKS) % 3 == 1) {
        for (int64_t h = 0; h < g.Hq; h++)
            g.sinks[h] = fz_sym(3.0);
        a->sinks = g.sinks;
        if (fz(F_DSINKS) % 2)
            a->dsinks = g.dsinks + 1;
    }
    a->kv_lens = g.use_kvlens ? g.kv_lens : NULL;
}

/* Fills q, k, v (K/V rows past kv_lens NaN: never read), mask, bias,
 * dout; out and lse from the reference. Returns the reference. */
static void fill_values(sdpa_backward_args *a, ref_result *ref)
{
    double amp = sqrt((0.3 + 6.0 * (double)(fz(F_AMP) % 16) / 15.0) /
                      sqrt((double)g.Dk));
    fz_tens *Q = &g_t[T_Q], *K = &g_t[T_K], *V = &g_t[T_V];
    for (int64_t b = 0; b < g.N; b++)
        for (int64_t h = 0; h < g.Hq; h++)
            for (int64_t i = 0; i < g.Tq; i++) {
                for (int64_t d = 0; d < g.Dk; d++)
                    fz_set(Q, fz_off4(&Q->t, b, h, i, d), fz_sym(amp));
                for (int64_t d = 0; d < g.Dv; d++)
                    fz_set(&g_t[T_DOUT], fz_off4(&g_t[T_DOUT].t, b, h, i, d),
                           fz_sym(1.0));
            }
    /* poison first, then values: a row shared by the batch gets values */
    for (int pass = 0; pass < 2; pass++)
        for (int64_t b = 0; b < g.N; b++)
            for (int64_t hk = 0; hk < g.Hkv; hk++)
                for (int64_t j = 0; j < g.Tk; j++) {
                    int val = j < g.kv_lens[b];
                    if ((pass == 0) == val)
                        continue;
                    int64_t bk = K->t.shape[0] == 1 ? 0 : b;
                    int64_t bv = V->t.shape[0] == 1 ? 0 : b;
                    for (int64_t d = 0; d < g.Dk; d++)
                        fz_set(K, fz_off4(&K->t, bk, hk, j, d),
                               val ? fz_sym(amp) : NAN);
                    for (int64_t d = 0; d < g.Dv; d++)
                        fz_set(V, fz_off4(&V->t, bv, hk, j, d),
                               val ? fz_sym(1.0) : NAN);
                }
    if (g_t[T_MASK].present) {
        static const double dens[4] = {0.1, 0.3, 0.6, 0.0};
        double p = dens[fz(F_MASK_DENS) % 4];
        int allows = (a->flags & SDPA_FLAG_MASK_NONZERO_ALLOWS) != 0;
        fz_buf *m = g_t[T_MASK].b;
        for (size_t i = 0; i < m->bytes; i++) {
            int forbid = fz_unit() < p;
            m->mem[i] = (unsigned char)(allows ? !forbid : forbid);
        }
    }
    if (g_t[T_BIAS].present) {
        static const double ninf[4] = {0.0, 0.2, 0.5, 0.0};
        double p = ninf[fz(F_BIAS_NINF) % 4];
        fz_tens *B = &g_t[T_BIAS];
        size_t n = B->b->bytes / B->es;
        for (size_t i = 0; i < n; i++)
            fz_set(B, (int64_t)i, fz_unit() < p ? -INFINITY : fz_sym(2.0));
    }
    /* out and lse as the forward writes them (the zero-row convention) */
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.dtype = g.dt.compute;
    f.causal = a->causal;
    f.flags = a->flags;
    f.scale = a->scale;
    f.softcap = a->softcap;
    f.kv_lens = a->kv_lens;
    f.q = a->q;
    f.k = a->k;
    f.v = a->v;
    if (f.k.shape[0] == 1) {
        f.k.shape[0] = g.N;
        f.k.stride[0] = 0;
    }
    if (f.v.shape[0] == 1) {
        f.v.shape[0] = g.N;
        f.v.stride[0] = 0;
    }
    f.mask = a->mask;
    f.bias = a->bias;
    f.window_left = a->window_left;
    f.window_right = a->window_right;
    f.alibi_slopes = a->alibi_slopes;
    f.sinks = a->sinks;
    CHECK(ref_forward(&f, ref) == 0, "reference out of memory");
    fz_tens *O = &g_t[T_OUT], *L = &g_t[T_LSE];
    for (int64_t b = 0; b < g.N; b++)
        for (int64_t h = 0; h < g.Hq; h++)
            for (int64_t i = 0; i < g.Tq; i++) {
                size_t row = (size_t)((b * g.Hq + h) * g.Tq + i);
                for (int64_t d = 0; d < g.Dv; d++)
                    fz_set(O, fz_off4(&O->t, b, h, i, d),
                           (double)ref->out[row * (size_t)g.Dv + (size_t)d]);
                fz_set(L, fz_off4(&L->t, b, h, i, 0), (double)ref->lse[row]);
            }
}

/* A special value at a row or element the fields choose. Returns what it
 * does: 2 NONFINITE for sure, 1 NONFINITE or OK without comparable
 * values, 0 nothing. */
static int special_values(const ref_result *ref)
{
    unsigned sv = fz(F_SPECIAL) % 16, sp = fz(F_SP_POS);
    if (sv < 10)
        return 0;
    int64_t rows = g.N * g.Hq * g.Tq;
    int64_t r = (int64_t)(sp % (unsigned)rows);
    int64_t b = r / (g.Hq * g.Tq), h = r / g.Tq % g.Hq, i = r % g.Tq;
    int any = 0;
    for (int64_t j = 0; j < g.Tk; j++)
        any |= ref->allowed[(size_t)r * (size_t)g.Tk + (size_t)j];
    switch (sv) {
    case 10: /* lse NaN / +inf / -inf at a row: NONFINITE where it has keys */
    case 11:
    case 12: {
        double v = sv == 10 ? NAN : sv == 11 ? INFINITY : -INFINITY;
        fz_set(&g_t[T_LSE], fz_off4(&g_t[T_LSE].t, b, h, i, 0), v);
        return any ? 2 : 1;
    }
    case 13: /* NaN in q: a NaN logit where the row has keys */
        fz_set(&g_t[T_Q],
               fz_off4(&g_t[T_Q].t, b, h, i, (int64_t)(sp >> 4) % g.Dk), NAN);
        return any ? 2 : 1;
    case 14: /* NaN in dout: no logit, NaN gradients */
        fz_set(&g_t[T_DOUT],
               fz_off4(&g_t[T_DOUT].t, b, h, i, (int64_t)(sp >> 4) % g.Dv),
               NAN);
        return 1;
    default: /* +inf in q */
        fz_set(&g_t[T_Q],
               fz_off4(&g_t[T_Q].t, b, h, i, (int64_t)(sp >> 4) % g.Dk),
               INFINITY);
        return 1;
    }
}

static sdpa_tensor *slot_of(sdpa_backward_args *a, int t)
{
    sdpa_tensor *s[T_COUNT] = {&a->q,    &a->k,   &a->v,   &a->mask,
                               &a->bias, &a->out, &a->lse, &a->dout,
                               &a->dq,   &a->dk,  &a->dv,  &a->dbias};
    return s[t];
}

/* One gradient, whose reference arrays are contiguous over `ext`, against
 * the call's view of it (tensor t). */
static void compare_grad(const char *what, int t, const sdpa_tensor *view,
                         const int64_t ext[4], const long double *ref,
                         const long double *bound, const unsigned char *support,
                         double eps)
{
    size_t x = 0;
    for (int64_t i0 = 0; i0 < ext[0]; i0++)
        for (int64_t i1 = 0; i1 < ext[1]; i1++)
            for (int64_t i2 = 0; i2 < ext[2]; i2++)
                for (int64_t i3 = 0; i3 < ext[3]; i3++, x++)
                    fz_check_close(
                        what, fz_get(&g_t[t], fz_off4(view, i0, i1, i2, i3)),
                        ref[x], bound[x], eps, support[x], i0, i1, i2, i3);
}

/* Compares every gradient with the reference. */
static void compare(const sdpa_backward_args *a, const bwd_ref *r)
{
    const double eps = g.dt.compute == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    const int64_t eq[4] = {g.N, g.Hq, g.Tq, g.Dk};
    const int64_t ek[4] = {r->nk, g.Hkv, g.Tk, g.Dk};
    const int64_t ev[4] = {r->nv, g.Hkv, g.Tk, g.Dv};
    compare_grad("dq", T_DQ, &a->dq, eq, r->dq, r->tq, r->sq, eps);
    compare_grad("dk", T_DK, &a->dk, ek, r->dk, r->tk, r->sk, eps);
    compare_grad("dv", T_DV, &a->dv, ev, r->dv, r->tv, r->sv, eps);
    if (a->dbias.data)
        compare_grad("dbias", T_DBIAS, &a->dbias, r->dbias_shape, r->dbias,
                     r->tb, r->sb, eps);
    for (int64_t h = 0; a->dsinks && h < g.Hq; h++)
        fz_check_close("dsinks", a->dsinks[h], r->dsinks[h], r->ts[h],
                       DBL_EPSILON, 1, 0, h, 0, 0);
}

static int call_backward(sdpa_ctx *ctx, const void *args)
{
    return sdpa_backward(ctx, args);
}

static void run(void)
{
    sdpa_backward_args a = SDPA_BACKWARD_ARGS_INIT;
    decode_problem(&a);
    fz_sset errs = 0, amb = 0;
    if (!g.dt.valid && !g.dt.pending)
        errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);

    /* one argument error */
    unsigned bk = fz(F_BAD_KIND) % 24, bw = fz(F_BAD_WHICH);
    unsigned bv = fz(F_BAD_VAL);
    int bd = (int)(fz(F_BAD_DIM) % 4);
    int bt = (int)(bw % T_COUNT);
    if (!g_t[bt].present)
        bt = T_DQ;
    int null_ctx = 0, null_args = 0, null_t = -1, overlap = -1;
    size_t fallback[T_COUNT] = {0};
    switch (bk) {
    case 12: /* negative stride (lse's stride[3] is ignored) */
        if (tinfo[bt].row_vec && bd == 3)
            bd = 2;
        g_t[bt].t.stride[bd] = -1 - (int64_t)(bv % 3);
        errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        break;
    case 13: /* a zero or small stride */
        g_t[bt].t.stride[bd] = bv % 2 ? 0 : (int64_t)(bv % 24);
        break;
    case 14: { /* a shape that disagrees (dk / dv: the other broadcast) */
        if (bt == T_MASK || bt == T_BIAS) /* (extent 1 would broadcast) */
            bt = T_DQ;
        fallback[bt] = fz_small_span(&g_t[bt].t);
        static const int64_t vals[5] = {0, -1, 7, INT64_C(1) << 40, 1};
        int64_t nv = vals[bv % 5];
        if (nv == g_t[bt].t.shape[bd] ||
            (nv == 1 && bd == 0 && bt >= T_K && bt <= T_DV && bt != T_DQ &&
             bt != T_OUT && bt != T_LSE && bt != T_DOUT))
            nv += 2; /* (extent 1 over N shares k, v: legal) */
        g_t[bt].t.shape[bd] = nv;
        errs |= FZ_BIT(SDPA_ERR_BAD_DIM) | FZ_BIT(SDPA_ERR_SHAPE_MISMATCH) |
                FZ_BIT(SDPA_ERR_HEAD_GROUPING) | FZ_BIT(SDPA_ERR_OVERFLOW) |
                FZ_BIT(SDPA_ERR_BAD_STRIDE) | FZ_BIT(SDPA_ERR_OVERLAP);
        if (g.use_kvlens || a.alibi_slopes || a.sinks)
            errs |= FZ_BIT(SDPA_ERR_BAD_KV_LEN);
        break;
    }
    case 15: /* NULL pointers */
        switch (bv % 8) {
        case 0:
            null_ctx = 1;
            break;
        case 1:
            null_args = 1;
            break;
        case 2: /* dbias without a bias */
            if (!g_t[T_BIAS].present) {
                g_t[T_DBIAS].present = 1;
                fz_set_layout(&g_t[T_DBIAS].t, 1, 1, 1, 1, 0, 0);
            } else {
                null_t = T_LSE;
            }
            break;
        case 3: /* dsinks without sinks */
            if (!a.sinks)
                a.dsinks = g.dsinks + 1;
            else
                null_t = T_DOUT;
            break;
        default: {
            static const int req[4] = {T_Q, T_LSE, T_DOUT, T_DQ};
            null_t = bv % 8 == 7 ? T_DV : req[(bv >> 3) % 4];
            break;
        }
        }
        errs |= FZ_BIT(SDPA_ERR_NULL_POINTER);
        break;
    case 16: /* an output over an input or another output */
        overlap = (int)(bv % 6);
        errs |= FZ_BIT(SDPA_ERR_OVERLAP);
        break;
    case 17: /* the forward's own rules */
        switch (bv % 7) {
        case 0:
            a.causal = 3;
            errs |= FZ_BIT(SDPA_ERR_BAD_CAUSAL);
            break;
        case 1:
            a.flags |= 1u << 20;
            errs |= FZ_BIT(SDPA_ERR_BAD_FLAGS);
            break;
        case 2:
            a.scale = NAN;
            errs |= FZ_BIT(SDPA_ERR_BAD_SCALE);
            break;
        case 3:
            a.softcap = -1;
            errs |= FZ_BIT(SDPA_ERR_BAD_SOFTCAP);
            break;
        case 4:
            a.flags |= SDPA_FLAG_WINDOW;
            a.window_left = -5;
            errs |= FZ_BIT(SDPA_ERR_BAD_WINDOW);
            break;
        case 5:
            for (int64_t h = 0; h < g.Hq; h++)
                g.slopes[h] = h == 0 ? NAN : 0.5;
            a.alibi_slopes = g.slopes;
            errs |= FZ_BIT(SDPA_ERR_BAD_ALIBI);
            break;
        default:
            if (g.use_kvlens) {
                g.kv_lens[0] = g.Tk + 1;
                errs |= FZ_BIT(SDPA_ERR_BAD_KV_LEN);
            } else {
                for (int64_t h = 0; h < g.Hq; h++)
                    g.sinks[h] = h == 0 ? INFINITY : 0.5;
                a.sinks = g.sinks;
                errs |= FZ_BIT(SDPA_ERR_BAD_SINK);
            }
            break;
        }
        break;
    default:
        break;
    }
    /* dk / dv have extent 1 over N exactly when k / v is shared by the
     * batch (extent 1 or stride 0), dbias exactly where the bias
     * broadcasts: a stride changed above can break that */
    if (!(bk == 14 && (bt == T_DK || bt == T_DV || bt == T_DBIAS))) {
        for (int t = T_K; t <= T_V; t++) {
            const sdpa_tensor *x = &g_t[t].t;
            int shared = g.N > 1 && (x->shape[0] == 1 || x->stride[0] == 0);
            if ((g_t[t + T_DK - T_K].t.shape[0] == 1) != (shared || g.N == 1))
                errs |= FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
        }
        const sdpa_tensor *b = &g_t[T_BIAS].t;
        for (int d = 0; g_t[T_DBIAS].present && d < 4; d++) {
            int bc = b->shape[d] == 1 || b->stride[d] == 0;
            if ((g_t[T_DBIAS].t.shape[d] == 1) != (bc || b->shape[d] == 1))
                errs |= FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
        }
    }
    /* every view's stride rules (the header's, the forward's for the
     * forward's tensors) */
    for (int t = 0; t < T_COUNT; t++) {
        const sdpa_tensor *x = &g_t[t].t;
        if (!g_t[t].present || (bk == 14 && t == bt))
            continue;
        for (int d = 0; d < 4; d++)
            if (x->stride[d] < 0 && !(tinfo[t].row_vec && d == 3))
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        if (tinfo[t].inner1 && x->stride[3] != 1) {
            if (x->shape[3] > 1)
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            else
                amb |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        }
        if (tinfo[t].blas_rows && x->stride[2] < x->shape[3]) {
            if (x->shape[2] > 1)
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            else
                amb |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        }
        if ((tinfo[t].output || t == T_OUT || t == T_LSE) &&
            !fz_sorted_rule(x, tinfo[t].row_vec))
            errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
    }

    /* buffers */
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present) {
            int inj = fz_tens_alloc(&g_t[t], tinfo[t].name, tinfo[t].output,
                                    fallback[t]);
            if (inj < 0 && !(bk == 14 && t == bt))
                CHECK(errs & FZ_BIT(SDPA_ERR_BAD_STRIDE), "harness: %s map",
                      tinfo[t].name);
        }
    fz_buf *ds = fz_buf_new("dsinks", 1, sizeof g.dsinks);
    if (a.dsinks) {
        a.dsinks = (double *)(void *)ds->mem + 1;
        fz_buf_allow(ds, sizeof(double), (size_t)g.Hq * sizeof(double));
    }
    fz_buf *arrays = fz_buf_new("slopes, sinks", 0, 16 * sizeof(double));
    memcpy(arrays->mem, g.slopes, 8 * sizeof(double));
    memcpy(arrays->mem + 8 * sizeof(double), g.sinks, 8 * sizeof(double));
    if (a.alibi_slopes)
        a.alibi_slopes = (const double *)(void *)arrays->mem;
    if (a.sinks)
        a.sinks = (const double *)(void *)arrays->mem + 8;
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present)
            *slot_of(&a, t) = g_t[t].t;

    /* values and the reference */
    ref_result ref;
    memset(&ref, 0, sizeof ref);
    int valid = errs == 0 && g.dt.valid;
    int special = 0;
    if (valid) {
        fill_values(&a, &ref);
        special = special_values(&ref);
    }
    if (null_t >= 0)
        slot_of(&a, null_t)->data = NULL;
    switch (overlap) {
    case 0:
        a.dq.data = a.q.data;
        break;
    case 1:
        a.dk.data = a.dq.data;
        break;
    case 2:
        a.dv.data = a.out.data;
        break;
    case 3:
        if (a.dsinks && a.sinks)
            a.dsinks = (double *)(uintptr_t)a.sinks;
        else
            a.dq.data = a.lse.data;
        break;
    case 4:
        if (a.dbias.data)
            a.dbias.data = a.bias.data;
        else
            a.dv.data = a.dout.data;
        break;
    case 5:
        if (a.kv_lens)
            a.dk.data = (void *)(uintptr_t)a.kv_lens;
        else
            a.dv.data = a.dk.data;
        break;
    default:
        break;
    }
    union {
        sdpa_backward_args a;
        unsigned char bytes[sizeof(sdpa_backward_args) + 64];
    } box;
    size_t seen;
    errs |= fz_pack_struct(fz(F_STRUCT), &a, sizeof a, BWD_ARGS_V1, NULL, 0,
                           box.bytes, sizeof box.bytes, &seen);

    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, F_OPT0_ID);
    describe(&a);
    fz_sset expect = errs | amb;
    if (g.dt.pending)
        expect |= FZ_ALL_DOCUMENTED;
    /* sdpa_backward runs the forward's validation, whose last check is the
     * empty-row rule, before its own tensors' checks: an error there can
     * come second (the rows are not known when values were not drawn) */
    const int own = (1 << T_DOUT) | (1 << T_DQ) | (1 << T_DK) | (1 << T_DV) |
                    (1 << T_DBIAS);
    if (errs && !fz_opt.empty_zero &&
        (overlap >= 0 || bk == 12 || bk == 13 || bk == 14 ||
         (null_t >= 0 && ((own >> null_t) & 1))))
        expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
    int check_vals = 0;
    if (valid && !errs) {
        int empty_error = ref.any_empty && !fz_opt.empty_zero;
        if (empty_error)
            expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
        if (special == 2) {
            expect |= FZ_BIT(SDPA_ERR_NONFINITE);
        } else if (!empty_error) {
            expect |= FZ_BIT(SDPA_OK);
            /* logits too large for the bounds: an overflow may be
             * reported */
            check_vals =
                !special &&
                ref.logit_absmax + ref.alibi_absmax + ref.sink_absmax <= 1e3;
            if (special || !check_vals)
                expect |= FZ_BIT(SDPA_ERR_NONFINITE);
        }
    }
    unsigned oomv = fz(F_OOM);
    int oom = oomv % 16 == 15;
    if (oom) {
        fz_as.fail_at = fz_as.allocs + (long)((oomv >> 4) % 4);
        if (expect & (FZ_BIT(SDPA_OK) | FZ_BIT(SDPA_ERR_NONFINITE)))
            expect |= FZ_BIT(SDPA_ERR_OUT_OF_MEMORY);
    }

    fz_snapshot();
    int st = sdpa_backward(null_ctx ? NULL : ctx, null_args ? NULL : &box.a);
    fz_check_status("sdpa_backward", st, expect, null_ctx ? NULL : ctx);
    if (st != SDPA_OK && st != SDPA_ERR_NONFINITE)
        fz_check_bufs(1, 0, "refused backward");
    else if (g.dt.valid)
        fz_check_bufs(0, st == SDPA_OK, "backward");
    if (st == SDPA_OK && check_vals) {
        bwd_ref r;
        bwd_extra none = {0, 0, 0, 0, 0, 0};
        CHECK(ref_backward(&box.a,
                           g.dt.compute == SDPA_FLOAT32 ? FLT_EPSILON
                                                        : DBL_EPSILON,
                           &none, &r) == 0,
              "reference out of memory");
        compare(&box.a, &r);
        bwd_ref_free(&r);
    }
    /* a second call: another thread count (bitwise), or the same call
     * (allocates nothing) */
    if (!null_ctx && !null_args && !oom && st == SDPA_OK)
        fz_second_call(ctx, fz(F_SECOND), st, call_backward, &box.a,
                       "gradients");
    if (valid)
        ref_free(&ref);
    fz_ctx_end(ctx);
}

/* Huge: one extent far beyond memory in every tensor that has it, at fake
 * addresses near the top of the address space; refused before anything
 * is read or allocated. */
static void run_huge(void)
{
    static const int64_t big[6] = {INT64_C(1) << 30, INT64_C(1) << 31,
                                   INT64_C(1) << 40, INT64_C(1) << 62,
                                   INT64_MAX,        INT64_C(3) << 31};
    sdpa_backward_args a = SDPA_BACKWARD_ARGS_INIT;
    g.dt = fz_decode_dtype(fz(F_DTYPE), fz(F_DTYPE_RAW));
    g.N = g.Hq = g.Hkv = 1;
    g.Tq = 2;
    g.Tk = 3;
    g.Dk = g.Dv = 2;
    int64_t *dims[6] = {&g.N, &g.Hq, &g.Tq, &g.Tk, &g.Dk, &g.Dv};
    int w = (int)(fz(F_HUGE_WHAT) % 6);
    *dims[w] = big[fz(F_HUGE_VAL) % 6];
    if (w == 1)
        g.Hkv = g.Hq;
    int64_t shp[T_COUNT][4];
    tensor_shapes(g.N, g.N, shp);
    a.dtype = g.dt.dtype;
    a.causal = fz(F_CAUSAL) % 3;
    memset(g_t, 0, sizeof g_t);
    for (int t = 0; t < T_COUNT; t++) {
        if (shp[t][0] == 0)
            continue;
        g_t[t].present = 1;
        fz_set_layout(&g_t[t].t, shp[t][0], shp[t][1], shp[t][2], shp[t][3],
                      (fz(F_LAYOUT) >> (t % 8)) & 1, 0);
        /* inputs may broadcast over N and the heads: only the outputs'
         * extents then overflow */
        if (!tinfo[t].output && (fz(F_KV_BCAST) & 1)) {
            g_t[t].t.stride[0] = 0;
            g_t[t].t.stride[1] = 0;
        }
        g_t[t].t.data = fz_top_ptr(t);
        *slot_of(&a, t) = g_t[t].t;
    }
    fz_desc[0] = '\0';
    fz_describe("HUGE dtype=%d N=%lld Hq=%lld Tq=%lld Tk=%lld Dk=%lld "
                "Dv=%lld",
                a.dtype, (long long)g.N, (long long)g.Hq, (long long)g.Tq,
                (long long)g.Tk, (long long)g.Dk, (long long)g.Dv);
    /* strides saturated at INT64_MAX may also look overlapping */
    fz_sset expect = FZ_BIT(SDPA_ERR_OVERFLOW) | FZ_BIT(SDPA_ERR_BAD_STRIDE);
    if (!g.dt.valid)
        expect |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    sdpa_ctx *ctx = fz_ctx_new();
    long allocs = fz_alloc_count();
    int st = sdpa_backward(ctx, &a);
    fz_check_status("sdpa_backward", st, expect, ctx);
    CHECK(fz_alloc_count() == allocs, "a refused sdpa_backward allocated");
    fz_ctx_end(ctx);
}

static const fz_seed seeds[] = {
    {"gqa_causal_softcap_f64",
     {{F_DTYPE, 9},
      {F_HKV, 1},
      {F_GROUP, 1},
      FZ_DIMS(3, 5, 3, 2),
      {F_CAUSAL, 2},
      {F_SOFTCAP, 1 | (8 << 2)},
      {-1, 0}}},
    {"kv_broadcast_extent1_layouts",
     {{F_N, 1},
      {F_KV_BCAST, 1},
      {F_LAYOUT, 0xA5},
      {F_PAD, 0x5A},
      {F_TQ, 4},
      {F_TK, 6},
      {-1, 0}}},
    {"kv_broadcast_stride0_threads",
     {{F_N, 1},
      {F_KV_BCAST, 2},
      FZ_OPTION(F_OPT0_ID, 2, 2),
      {F_SECOND, 1 | (1 << 2)},
      {F_TK, 4},
      {-1, 0}}},
    {"mask_bias_dbias_broadcast",
     {{F_MASK, 1},
      {F_MASK_B, 1 << 2},
      {F_MASK_DENS, 1},
      {F_BIAS, 1},
      {F_BIAS_B, (1 << 0) | (2 << 4)},
      {F_BIAS_NINF, 1},
      {F_DBIAS, 1},
      {F_TQ, 3},
      {F_TK, 5},
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {-1, 0}}},
    {"kvlens_window_alibi",
     {{F_N, 1},
      {F_KVLENS, 1},
      {F_KV0, 3},
      {F_KV1, 0},
      {F_WINDOW, 1 | (2 << 2) | (1 << 4)},
      {F_ALIBI, 1},
      {F_TQ, 4},
      {F_TK, 6},
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {-1, 0}}},
    {"sinks_dsinks_blocks",
     {{F_SINKS, 1},
      {F_DSINKS, 1},
      FZ_OPTION(F_OPT0_ID, 6, 2),
      FZ_OPTION(F_OPT0_ID + 2, 7, 2),
      {-1, 0}}},
    {"empty_rows_error", {{F_MASK, 1}, {F_MASK_DENS, 2}, {F_TK, 1}, {-1, 0}}},
    {"nan_lse", {{F_SPECIAL, 10}, {F_TK, 3}, {-1, 0}}},
    {"bad_dk_shape", {{F_BAD_KIND, 14}, {F_BAD_WHICH, T_DK}, {-1, 0}}},
    {"dsinks_without_sinks", {{F_BAD_KIND, 15}, {F_BAD_VAL, 3}, {-1, 0}}},
    {"dq_over_q", {{F_BAD_KIND, 16}, {F_BAD_VAL, 0}, {-1, 0}}},
    {"bad_window", {{F_BAD_KIND, 17}, {F_BAD_VAL, 4}, {-1, 0}}},
    {"struct_too_small", {{F_STRUCT, 28}, {-1, 0}}},
    {"oom", {{F_OOM, 15}, {F_TQ, 4}, {F_TK, 6}, {-1, 0}}},
    {"huge_tk", {{F_MODE, 7}, {F_HUGE_WHAT, 3}, {F_HUGE_VAL, 3}, {-1, 0}}},
    {"huge_n_broadcast_inputs",
     {{F_MODE, 7}, {F_HUGE_WHAT, 0}, {F_KV_BCAST, 1}, {-1, 0}}},
};

static void reset(void)
{
    memset(&g, 0, sizeof g);
}

FZ_TARGET("fuzz_backward", "BACKWARD", "default", F_SEED0, F_MODE, reset, run,
          run_huge);
