/*
 * libFuzzer target for sdpa_backward.
 *
 * An input (fuzz_problem.h's fields, then enum field below; missing bytes
 * read as 0) decodes to a small attention problem and its backward call:
 * dtype (also the declared half types and invalid values), kv_dtype,
 * bias_dtype and grad_dtype (spelled out, or refused), N, Hq / Hkv
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
 *
 * With F_RAGGED a ragged call instead (run_ragged: up to four sequences
 * of 0..4 query rows and 0..5 packed or Tk batched keys, kv_lens, one
 * error of the ragged description): the same checks, and on success
 * every gradient bitwise that of the sequence's own rectangular call,
 * dsinks their sum in sequence order, dk = dv = +0 for a sequence
 * without rows.
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
    /* a ragged call (run_ragged) when F_RAGGED % 4 == 1 */
    F_RAGGED = F_SEED0 + 8,
    F_RG_SEQS,  /* 1 + v % 4 sequences */
    F_RG_KEYS,  /* bit 0: batched keys (else packed), bit 1: kv_lens */
    F_RG_KVLEN, /* two bits per sequence: L_b = Tk_b, 0, Tk_b / 2, Tk_b - 1 */
    F_RG_LEN0, /* a byte per sequence: Tq_b = v % 5, packed Tk_b = v / 16 % 6 */
    F_RG_BAD = F_RG_LEN0 + 4, /* one error of a ragged call (rg_inject) */
    F_RG_BAD_VAL,
    F_DROPOUT,   /* 1.2: dropout_p (decode_options) */
    F_DROP_SEED, /* its seed and offset */
    F_TYPES,     /* 1.2: kv_dtype, bias_dtype, grad_dtype (decode_options) */
    F_COUNT
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
    int drop_bad; /* dropout_p is one the library refuses */
    int type_bad; /* kv_dtype or bias_dtype is one the library refuses */
    int grad_bad; /* grad_dtype is one the library refuses */
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
    if (a->kv_dtype || a->bias_dtype || a->grad_dtype)
        fz_describe(" kv_dtype=%d bias_dtype=%d grad_dtype=%d", a->kv_dtype,
                    a->bias_dtype, a->grad_dtype);
    if (a->dropout_p != 0)
        fz_describe(" dropout=%g seed=%llu offset=%llu", a->dropout_p,
                    (unsigned long long)a->dropout_seed,
                    (unsigned long long)a->dropout_offset);
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

static void decode_options(sdpa_backward_args *a);

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
    decode_options(a);
    g.use_kvlens = fz(F_KVLENS) % 3 == 1;
    for (int64_t b = 0; b < g.N; b++)
        g.kv_lens[b] =
            g.use_kvlens ? (int64_t)(fz(F_KV0 + (int)b) % (unsigned)(g.Tk + 1))
                         : g.Tk;
    a->kv_lens = g.use_kvlens ? g.kv_lens : NULL;
}

/* A caller built against the 1.1 header (struct_size BWD_ARGS_V1,
 * fz_pack_struct's selector 25): the 1.2 fields are not its to set. */
static int caller_of_1_1(void)
{
    return fz(F_STRUCT) % 32 == 25;
}

/* 1.2's type fields: mostly 0 (the inputs' own types); those types spelled
 * out (the same call), or one the library refuses. */
static void decode_types(sdpa_backward_args *a)
{
    static const int bad_grad[4] = {SDPA_FLOAT64, SDPA_FLOAT16, -1, 99};
    static const int bad_type[4] = {0, 5, -1, INT_MIN};
    const unsigned tv = caller_of_1_1() ? 0 : fz(F_TYPES);
    const int dt = g.dt.dtype, f64 = dt == SDPA_FLOAT64;
    g.type_bad = g.grad_bad = 0;
    switch (tv % 8) {
    case 5:
        a->kv_dtype = a->bias_dtype = dt;
        if (dt == SDPA_FLOAT32)
            a->grad_dtype = SDPA_FLOAT32;
        break;
    case 6: /* float32 gradients of a float64 call, or a type not offered */
        a->grad_dtype = f64 ? SDPA_FLOAT32 : bad_grad[(tv >> 3) % 4];
        g.grad_bad = 1;
        break;
    case 7: { /* float64 beside float32 (or the reverse), or no type at all */
        const int t = (tv >> 3) % 4 ? bad_type[(tv >> 3) % 4]
                      : f64         ? SDPA_FLOAT32
                                    : SDPA_FLOAT64;
        if ((tv >> 5) % 2)
            a->bias_dtype = t;
        else
            a->kv_dtype = t;
        g.type_bad = 1;
        break;
    }
    default:
        break;
    }
}

/* causal, the mask convention, a window, scale, soft-cap, ALiBi slopes,
 * sinks and dsinks (g.Hq of each); dropout and the type fields. */
static void decode_options(sdpa_backward_args *a)
{
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
    /* 1.2 dropout: mostly none, 0.2 or 0.6 (the forward's out and the
     * oracle draw the same mask), or a refused value */
    static const double refused[4] = {-0.5, 1.0, NAN, INFINITY};
    const unsigned dv = caller_of_1_1() ? 0 : fz(F_DROPOUT);
    g.drop_bad = dv % 8 == 7;
    a->dropout_p = dv % 8 == 5   ? 0.2
                   : dv % 8 == 6 ? 0.6
                   : g.drop_bad  ? refused[(dv >> 3) % 4]
                                 : 0.0;
    a->dropout_seed = (uint64_t)fz(F_DROP_SEED) * 0x9E3779B97F4A7C15ull;
    a->dropout_offset = (uint64_t)(fz(F_DROP_SEED) >> 3);
    decode_types(a);
}

/* The statuses the values decode_options drew call for. */
static fz_sset option_errors(void)
{
    fz_sset errs = 0;
    if (g.drop_bad)
        errs |= FZ_BIT(SDPA_ERR_BAD_DROPOUT);
    if (g.type_bad || g.grad_bad)
        errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    return errs;
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
    f.dropout_p = g.drop_bad ? 0 : a->dropout_p;
    f.dropout_seed = a->dropout_seed;
    f.dropout_offset = a->dropout_offset;
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

/* What a call with valid arguments and rows that all have keys may
 * return: NONFINITE for sure (special 2: a NaN lse or logit where a row
 * has keys), else OK, and NONFINITE too with special values or logits too
 * large for the bounds (an overflow may be reported). */
static fz_sset valid_outcomes(int special, int check_vals)
{
    if (special == 2)
        return FZ_BIT(SDPA_ERR_NONFINITE);
    return FZ_BIT(SDPA_OK) |
           (special || !check_vals ? FZ_BIT(SDPA_ERR_NONFINITE) : 0);
}

/* One allocation refused (F_OOM, one input in 16), where the call gets
 * that far (it would return OK or NONFINITE): 1 when armed. */
static int arm_oom(fz_sset *expect)
{
    const unsigned oomv = fz(F_OOM);
    if (oomv % 16 != 15)
        return 0;
    fz_as.fail_at = fz_as.allocs + (long)((oomv >> 4) % 4);
    if (*expect & (FZ_BIT(SDPA_OK) | FZ_BIT(SDPA_ERR_NONFINITE)))
        *expect |= FZ_BIT(SDPA_ERR_OUT_OF_MEMORY);
    return 1;
}

/* After a call that returned st: every output byte as it was after a
 * refusal; inputs never written, nor (after OK) anything outside the
 * outputs' views. */
static void check_buffers(int st, const char *what)
{
    if (st != SDPA_OK && st != SDPA_ERR_NONFINITE)
        fz_check_bufs(1, 0, what);
    else if (g.dt.valid)
        fz_check_bufs(0, st == SDPA_OK, what);
}

/* ---- Ragged batches (seqs, q_offsets, kv_offsets). ---------------------- */
/* Up to four sequences of 0..4 query rows and 0..5 packed keys (or Tk
 * batched keys each), kv_lens; q, out, lse, dout, dq [1, Hq, total_q, .]
 * and k, v, dk, dv [1, Hkv, total_k, .] or [seqs, Hkv, Tk, .], each head's
 * rows followed by a guard row. out and lse are the reference's per
 * sequence; the K and V rows past kv_lens, and every key of a sequence
 * without query rows, hold NaN. One error of the ragged description may
 * be injected (rg_inject). On success: every gradient within the
 * oracle's bounds, sequence by sequence; bitwise those of each sequence's
 * own rectangular call (tests/common/problem.c cuts it) and dsinks their
 * sum in sequence order; dk = dv = +0 for the keys of a sequence without
 * rows; another thread count gives the same bits. */
enum { RG_SEQS = 4 };

typedef struct rg_state {
    int64_t seqs, Tk, total_q, key_rows;
    int64_t tq[RG_SEQS], tk[RG_SEQS];
    int packed, use_kvlens;
    int64_t *q_off, *kv_off, *kv_lens; /* in a registered input buffer */
} rg_state;

static rg_state rg;

static void rg_describe(const sdpa_backward_args *a)
{
    describe(a);
    fz_describe(" RAGGED seqs=%lld %s kv_lens=%s lengths", (long long)rg.seqs,
                rg.packed ? "packed" : "batched", rg.use_kvlens ? "yes" : "no");
    for (int64_t b = 0; b < rg.seqs; b++)
        fz_describe(" %lldx%lld(%lld)", (long long)rg.tq[b],
                    (long long)rg.tk[b], (long long)rg.kv_lens[b]);
}

/* A tensor's view with a guard row after each head's rows, allocated. */
static void rg_tensor(int t, int64_t n, int64_t h, int64_t rows, int64_t d,
                      size_t es)
{
    fz_tens *x = &g_t[t];
    x->present = 1;
    x->es = es;
    const unsigned lay = fz(F_LAYOUT), pad = fz(F_PAD);
    fz_set_layout(&x->t, n, h, rows + 1, d, (lay >> (t % 8)) & 1,
                  (int64_t)((pad >> (t % 8)) & 1));
    size_t span = fz_small_span(&x->t);
    x->t.shape[2] = rows;
    (void)fz_tens_alloc(x, tinfo[t].name, tinfo[t].output, span);
}

/* The valid ragged call. */
static void rg_decode(sdpa_backward_args *a)
{
    g.dt = fz_decode_dtype(fz(F_DTYPE), fz(F_DTYPE_RAW));
    const size_t es = fz_esize(g.dt.compute);
    g.Hkv = 1 + (int64_t)(fz(F_HKV) % 2);
    g.Hq = g.Hkv * (1 + (int64_t)(fz(F_GROUP) % 2));
    g.Dk = 1 + (int64_t)(fz(F_DK) % 5);
    g.Dv = 1 + (int64_t)(fz(F_DV) % 5);
    rg.seqs = 1 + (int64_t)(fz(F_RG_SEQS) % RG_SEQS);
    rg.packed = !(fz(F_RG_KEYS) & 1);
    rg.use_kvlens = (fz(F_RG_KEYS) >> 1) & 1;
    rg.Tk = 1 + (int64_t)(fz(F_TK) % 7);
    fz_buf *meta =
        fz_buf_new("offsets, kv_lens", 0, 3 * (RG_SEQS + 1) * sizeof(int64_t));
    rg.q_off = (int64_t *)(void *)meta->mem;
    rg.kv_off = rg.q_off + RG_SEQS + 1;
    rg.kv_lens = rg.kv_off + RG_SEQS + 1;
    for (int64_t b = 0; b < rg.seqs; b++) {
        unsigned v = fz(F_RG_LEN0 + (int)b);
        rg.tq[b] = (int64_t)(v % 5);
        rg.tk[b] = rg.packed ? (int64_t)(v / 16 % 6) : rg.Tk;
        rg.q_off[b + 1] = rg.q_off[b] + rg.tq[b];
        rg.kv_off[b + 1] = rg.kv_off[b] + rg.tk[b];
        unsigned m = fz(F_RG_KVLEN) >> (2 * b) & 3;
        const int64_t tk = rg.tk[b];
        rg.kv_lens[b] = !rg.use_kvlens || m == 0 ? tk
                        : m == 1                 ? 0
                        : m == 2                 ? tk / 2
                                                 : (tk > 0 ? tk - 1 : 0);
    }
    rg.total_q = rg.q_off[rg.seqs];
    rg.key_rows = rg.packed ? rg.kv_off[rg.seqs] : rg.Tk;
    const int64_t nk = rg.packed ? 1 : rg.seqs;
    g.N = 1;
    g.Tq = rg.total_q;
    g.Tk = rg.key_rows;
    memset(g_t, 0, sizeof g_t);
    rg_tensor(T_Q, 1, g.Hq, rg.total_q, g.Dk, es);
    rg_tensor(T_OUT, 1, g.Hq, rg.total_q, g.Dv, es);
    rg_tensor(T_LSE, 1, g.Hq, rg.total_q, 1, es);
    rg_tensor(T_DOUT, 1, g.Hq, rg.total_q, g.Dv, es);
    rg_tensor(T_DQ, 1, g.Hq, rg.total_q, g.Dk, es);
    rg_tensor(T_K, nk, g.Hkv, rg.key_rows, g.Dk, es);
    rg_tensor(T_V, nk, g.Hkv, rg.key_rows, g.Dv, es);
    rg_tensor(T_DK, nk, g.Hkv, rg.key_rows, g.Dk, es);
    rg_tensor(T_DV, nk, g.Hkv, rg.key_rows, g.Dv, es);
    a->dtype = g.dt.dtype;
    decode_options(a);
    a->kv_lens = rg.use_kvlens ? rg.kv_lens : NULL;
    a->seqs = rg.seqs;
    a->q_offsets = rg.q_off;
    a->kv_offsets = rg.packed ? rg.kv_off : NULL;
    fz_buf *ds = fz_buf_new("dsinks", 1, sizeof g.dsinks);
    fz_buf_allow(ds, sizeof(double), (size_t)g.Hq * sizeof(double));
    if (a->dsinks)
        a->dsinks = (double *)(void *)ds->mem + 1;
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present)
            *slot_of(a, t) = g_t[t].t;
}

/* Where key j of sequence b lives: its item and row. */
static void rg_key_at(int64_t b, int64_t j, int64_t *item, int64_t *row)
{
    *item = rg.packed ? 0 : b;
    *row = rg.packed ? rg.kv_off[b] + j : j;
}

/* q, k, v, dout drawn (the K / V rows no sequence may read NaN), then out
 * and lse of each sequence's reference; any_empty: some row has no
 * allowed key. Returns the largest logit bound of the references. */
static long double rg_fill(const sdpa_backward_args *a, int *any_empty)
{
    double amp = sqrt((0.3 + 6.0 * (double)(fz(F_AMP) % 16) / 15.0) /
                      sqrt((double)g.Dk));
    fz_tens *Q = &g_t[T_Q], *K = &g_t[T_K], *V = &g_t[T_V];
    fz_tens *D = &g_t[T_DOUT], *O = &g_t[T_OUT], *L = &g_t[T_LSE];
    for (int64_t h = 0; h < g.Hq; h++)
        for (int64_t i = 0; i < rg.total_q; i++) {
            for (int64_t d = 0; d < g.Dk; d++)
                fz_set(Q, fz_off4(&Q->t, 0, h, i, d), fz_sym(amp));
            for (int64_t d = 0; d < g.Dv; d++)
                fz_set(D, fz_off4(&D->t, 0, h, i, d), fz_sym(1.0));
        }
    for (int64_t b = 0; b < rg.seqs; b++)
        for (int64_t hk = 0; hk < g.Hkv; hk++)
            for (int64_t j = 0; j < rg.tk[b]; j++) {
                int read = rg.tq[b] > 0 && j < rg.kv_lens[b];
                int64_t item, row;
                rg_key_at(b, j, &item, &row);
                for (int64_t d = 0; d < g.Dk; d++)
                    fz_set(K, fz_off4(&K->t, item, hk, row, d),
                           read ? fz_sym(amp) : NAN);
                for (int64_t d = 0; d < g.Dv; d++)
                    fz_set(V, fz_off4(&V->t, item, hk, row, d),
                           read ? fz_sym(1.0) : NAN);
            }
    long double most = 0;
    *any_empty = 0;
    for (int64_t b = 0; b < rg.seqs; b++) {
        if (rg.tq[b] == 0)
            continue;
        sdpa_backward_args sub = tp_ragged_sequence(a, b);
        sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
        TP_COPY_SHARED(f, sub);
        f.dtype = g.dt.compute;
        if (g.drop_bad) /* a refused call: the reference of no dropout */
            f.dropout_p = 0;
        ref_result ref;
        CHECK(ref_forward(&f, &ref) == 0, "reference out of memory");
        *any_empty |= ref.any_empty;
        long double bound =
            ref.logit_absmax + ref.alibi_absmax + ref.sink_absmax;
        most = bound > most ? bound : most;
        for (int64_t h = 0; h < g.Hq; h++)
            for (int64_t i = 0; i < rg.tq[b]; i++) {
                size_t r = (size_t)(h * rg.tq[b] + i);
                int64_t row = rg.q_off[b] + i;
                for (int64_t d = 0; d < g.Dv; d++)
                    fz_set(O, fz_off4(&O->t, 0, h, row, d),
                           (double)ref.out[r * (size_t)g.Dv + (size_t)d]);
                fz_set(L, fz_off4(&L->t, 0, h, row, 0), (double)ref.lse[r]);
            }
        ref_free(&ref);
    }
    return most;
}

/* A NaN lse at a packed row the fields choose: 2 when the row has allowed
 * keys (NONFINITE for sure), 1 when not (no gradient reads it), 0 none. */
static int rg_special(const sdpa_backward_args *a)
{
    if (fz(F_SPECIAL) % 16 != 10 || rg.total_q == 0)
        return 0;
    const int64_t row = (int64_t)(fz(F_SP_POS) % (unsigned)rg.total_q);
    int64_t b = 0;
    while (rg.q_off[b + 1] <= row)
        b++;
    sdpa_backward_args sub = tp_ragged_sequence(a, b);
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    TP_COPY_SHARED(f, sub);
    f.dtype = g.dt.compute;
    if (g.drop_bad) /* a refused call: the reference of no dropout */
        f.dropout_p = 0;
    ref_result ref;
    CHECK(ref_forward(&f, &ref) == 0, "reference out of memory");
    const int64_t keys = ref.tk, i = row - rg.q_off[b];
    int any = 0;
    for (int64_t j = 0; j < keys; j++)
        any |= ref.allowed[(size_t)i * (size_t)keys + (size_t)j];
    ref_free(&ref);
    fz_set(&g_t[T_LSE], fz_off4(&g_t[T_LSE].t, 0, 0, row, 0), NAN);
    return any ? 2 : 1;
}

/* One error of the ragged description, into a (the offsets and kv_lens
 * are the registered buffer's). Returns the statuses it may cause; *late:
 * found only after each sequence's checks (which may fail first). */
static fz_sset rg_inject(sdpa_backward_args *a, int *late)
{
    const unsigned v = fz(F_RG_BAD_VAL);
    const int64_t b = (int64_t)(v % (unsigned)rg.seqs);
    *late = 0;
    switch (fz(F_RG_BAD) % 24) {
    case 1:
        a->seqs = -1 - (int64_t)(v % 3);
        return FZ_BIT(SDPA_ERR_BAD_RAGGED);
    case 2:
        a->q_offsets = NULL;
        return FZ_BIT(SDPA_ERR_BAD_RAGGED);
    case 3: /* q_offsets (and kv_offsets) without seqs */
        a->seqs = 0;
        return FZ_BIT(SDPA_ERR_BAD_RAGGED);
    case 4: /* refused tensors: any data pointer */
        a->mask = a->q;
        return FZ_BIT(SDPA_ERR_BAD_RAGGED);
    case 5:
        a->bias = a->q;
        return FZ_BIT(SDPA_ERR_BAD_RAGGED);
    case 6:
        a->dbias = a->dq;
        return FZ_BIT(SDPA_ERR_BAD_RAGGED);
    case 7:
        a->q.shape[0] = 2;
        return FZ_BIT(SDPA_ERR_BAD_RAGGED);
    case 8: /* keys shared by the sequences; packed: not [1, ...] */
        if (!rg.packed && rg.seqs == 1)
            return 0;
        a->k.shape[0] = a->v.shape[0] = rg.packed ? 2 : 1;
        return FZ_BIT(SDPA_ERR_BAD_RAGGED);
    case 9:
        rg.q_off[0] = 1 + (int64_t)(v % 2);
        return FZ_BIT(SDPA_ERR_OFFSETS_START);
    case 10:
        rg.q_off[b + 1] = rg.q_off[b] - 1 - (int64_t)(v / 4 % 2);
        return FZ_BIT(SDPA_ERR_OFFSETS_ORDER);
    case 11:
        rg.q_off[rg.seqs] += v % 2 ? 1 : -1;
        if (rg.q_off[rg.seqs] < rg.q_off[rg.seqs - 1])
            return FZ_BIT(SDPA_ERR_OFFSETS_ORDER);
        return FZ_BIT(SDPA_ERR_OFFSETS_END);
    case 12: /* kv_offsets: a bad start, or with batched keys */
        if (!rg.packed) {
            if (rg.seqs == 1)
                return 0;
            a->kv_offsets = rg.kv_off;
            return FZ_BIT(SDPA_ERR_BAD_RAGGED);
        }
        rg.kv_off[0] = 1;
        return FZ_BIT(SDPA_ERR_OFFSETS_START);
    case 13:
        if (!rg.packed)
            return 0;
        rg.kv_off[b + 1] = rg.kv_off[b] - 1;
        return FZ_BIT(SDPA_ERR_OFFSETS_ORDER);
    case 14:
        if (!rg.packed)
            return 0;
        rg.kv_off[rg.seqs] += 1;
        return FZ_BIT(SDPA_ERR_OFFSETS_END);
    case 15: { /* a per-row tensor's extents */
        static const int rows[4] = {T_DQ, T_DOUT, T_LSE, T_OUT};
        sdpa_tensor *x = slot_of(a, rows[v % 4]);
        if (v & 4)
            x->shape[0] = 2;
        else
            x->shape[2] += 1;
        return FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
    }
    case 16: { /* a key gradient's extents */
        sdpa_tensor *x = v % 2 ? &a->dv : &a->dk;
        if (v & 2)
            x->shape[0] += 1;
        else
            x->shape[2] += 1;
        return FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
    }
    case 17:
        if (!a->kv_lens)
            return 0;
        rg.kv_lens[b] = v & 2 ? -1 : rg.tk[b] + 1;
        return FZ_BIT(SDPA_ERR_BAD_KV_LEN);
    case 18: /* dsinks over the offsets */
        if (!a->dsinks)
            return 0;
        a->dsinks = (double *)(void *)(rg.q_off + v % 2);
        *late = 1;
        return FZ_BIT(SDPA_ERR_OVERLAP);
    case 19: /* a gradient over another output or an input, both with
              * rows (a view without rows has no byte to overlap) */
        if (v % 2 && rg.total_q > 0 && rg.key_rows > 0)
            a->dq.data = a->dk.data;
        else if (rg.key_rows > 0)
            a->dv.data = rg.total_q > 0 ? a->q.data : a->k.data;
        else
            return 0;
        *late = 1;
        return FZ_BIT(SDPA_ERR_OVERLAP);
    case 20: /* rows written twice: within a sequence, or across them */
        a->dq.stride[2] = 0;
        *late = 1;
        return FZ_BIT(SDPA_ERR_BAD_STRIDE) |
               (rg.total_q <= 1 ? FZ_BIT(SDPA_OK) : 0);
    default:
        return 0;
    }
}

/* The ragged gradients against the oracle, sequence by sequence. */
static void rg_compare_oracle(const sdpa_backward_args *a)
{
    const double eps = g.dt.compute == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    const bwd_extra none = {0, 0, 0, 0, 0, 0};
    long double dsinks[8] = {0}, bounds[8] = {0};
    for (int64_t b = 0; b < rg.seqs; b++) {
        if (rg.tq[b] == 0)
            continue;
        sdpa_backward_args sub = tp_ragged_sequence(a, b);
        bwd_ref r;
        CHECK(ref_backward(&sub, eps, &none, &r) == 0,
              "reference out of memory");
        for (int64_t h = 0; h < g.Hq; h++) {
            dsinks[h] += r.dsinks[h];
            bounds[h] += r.ts[h];
            for (int64_t i = 0; i < rg.tq[b]; i++)
                for (int64_t d = 0; d < g.Dk; d++) {
                    size_t x = bwd_dq_at(&r, 0, h, i) + (size_t)d;
                    fz_check_close(
                        "dq",
                        fz_get(&g_t[T_DQ],
                               fz_off4(&a->dq, 0, h, rg.q_off[b] + i, d)),
                        r.dq[x], r.tq[x], eps, r.sq[x], b, h, i, d);
                }
        }
        for (int64_t hk = 0; hk < g.Hkv; hk++)
            for (int64_t j = 0; j < rg.tk[b]; j++) {
                int64_t item, row;
                rg_key_at(b, j, &item, &row);
                for (int64_t d = 0; d < g.Dk; d++) {
                    size_t x = bwd_dk_at(&r, 0, hk, j) + (size_t)d;
                    fz_check_close(
                        "dk",
                        fz_get(&g_t[T_DK], fz_off4(&a->dk, item, hk, row, d)),
                        r.dk[x], r.tk[x], eps, r.sk[x], b, hk, j, d);
                }
                for (int64_t d = 0; d < g.Dv; d++) {
                    size_t x = bwd_dv_at(&r, 0, hk, j) + (size_t)d;
                    fz_check_close(
                        "dv",
                        fz_get(&g_t[T_DV], fz_off4(&a->dv, item, hk, row, d)),
                        r.dv[x], r.tv[x], eps, r.sv[x], b, hk, j, d);
                }
            }
        bwd_ref_free(&r);
    }
    for (int64_t h = 0; a->dsinks && h < g.Hq; h++)
        fz_check_close("dsinks", a->dsinks[h], dsinks[h], bounds[h],
                       DBL_EPSILON, 1, 0, h, 0, 0);
}

/* Element (n, h, t, d) of tensor t's view and of a contiguous
 * [1, H, T, D] copy hold the same bits (y NULL: +0). */
static int rg_same(int t, const sdpa_tensor *view, int64_t n, int64_t h,
                   int64_t row, int64_t d, const void *y, int64_t yrow,
                   int64_t ytq, int64_t ydim)
{
    const size_t es = g_t[t].es;
    const char *p =
        (const char *)view->data + (size_t)fz_off4(view, n, h, row, d) * es;
    if (!y) {
        static const char zero[8];
        return memcmp(p, zero, es) == 0;
    }
    const char *q =
        (const char *)y + (size_t)((h * ytq + yrow) * ydim + d) * es;
    return memcmp(p, q, es) == 0;
}

/* The ragged gradients against each sequence's own rectangular call on
 * the same context: bitwise; +0 for the keys of a sequence without rows;
 * dsinks their sum in sequence order. */
static void rg_compare_sequences(sdpa_ctx *ctx, const sdpa_backward_args *a)
{
    const size_t es = fz_esize(g.dt.compute);
    double sum[8] = {0};
    int first = 1;
    for (int64_t b = 0; b < rg.seqs; b++) {
        const int64_t tq = rg.tq[b];
        sdpa_backward_args sub = tp_ragged_sequence(a, b);
        const int64_t kr = sub.k.shape[2];
        void *dq = NULL, *dk = NULL, *dv = NULL;
        double own[8];
        if (tq > 0) {
            dq = calloc((size_t)(g.Hq * tq * g.Dk), es);
            dk = calloc((size_t)(g.Hkv * kr * g.Dk), es);
            dv = calloc((size_t)(g.Hkv * kr * g.Dv), es);
            CHECK(dq && dk && dv, "out of memory");
            sub.dq = sdpa_tensor_bhtd(dq, 1, g.Hq, tq, g.Dk);
            sub.dk = sdpa_tensor_bhtd(dk, 1, g.Hkv, kr, g.Dk);
            sub.dv = sdpa_tensor_bhtd(dv, 1, g.Hkv, kr, g.Dv);
            sub.dsinks = a->dsinks ? own : NULL;
            int st = sdpa_backward(ctx, &sub);
            CHECK(st == SDPA_OK, "sequence %lld's own call: %s", (long long)b,
                  sdpa_ctx_last_error(ctx));
            for (int64_t h = 0; h < g.Hq; h++)
                for (int64_t i = 0; i < tq; i++)
                    for (int64_t d = 0; d < g.Dk; d++)
                        CHECK(rg_same(T_DQ, &a->dq, 0, h, rg.q_off[b] + i, d,
                                      dq, i, tq, g.Dk),
                              "dq of sequence %lld, head %lld, row %lld is not "
                              "its own call's",
                              (long long)b, (long long)h, (long long)i);
            for (int64_t h = 0; a->dsinks && h < g.Hq; h++)
                sum[h] = first ? own[h] : sum[h] + own[h];
            first = 0;
        }
        for (int64_t hk = 0; hk < g.Hkv; hk++)
            for (int64_t j = 0; j < rg.tk[b]; j++) {
                int64_t item, row;
                rg_key_at(b, j, &item, &row);
                for (int64_t d = 0; d < g.Dk; d++)
                    CHECK(rg_same(T_DK, &a->dk, item, hk, row, d, dk, j, kr,
                                  g.Dk),
                          "dk of sequence %lld, key %lld is not %s",
                          (long long)b, (long long)j,
                          tq > 0 ? "its own call's" : "+0");
                for (int64_t d = 0; d < g.Dv; d++)
                    CHECK(rg_same(T_DV, &a->dv, item, hk, row, d, dv, j, kr,
                                  g.Dv),
                          "dv of sequence %lld, key %lld is not %s",
                          (long long)b, (long long)j,
                          tq > 0 ? "its own call's" : "+0");
            }
        free(dq);
        free(dk);
        free(dv);
    }
    for (int64_t h = 0; a->dsinks && h < g.Hq; h++)
        CHECK(memcmp(&sum[h], &a->dsinks[h], sizeof(double)) == 0,
              "dsinks[%lld] = %.17g, the sequences' sum %.17g", (long long)h,
              a->dsinks[h], sum[h]);
}

static void run_ragged(void)
{
    sdpa_backward_args a = SDPA_BACKWARD_ARGS_INIT;
    rg_decode(&a);
    int any_empty = 0, special = 0;
    long double logits = 0;
    if (g.dt.valid) {
        logits = rg_fill(&a, &any_empty);
        special = rg_special(&a);
    }
    int late = 0;
    fz_sset errs = rg_inject(&a, &late);
    errs |= option_errors();
    const fz_sset moot = errs & FZ_BIT(SDPA_OK);
    errs &= ~FZ_BIT(SDPA_OK);
    const int bad_dtype = !g.dt.valid && !g.dt.pending;
    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, F_OPT0_ID);
    rg_describe(&a);
    const int empty_error = any_empty && !fz_opt.empty_zero;
    const int check_vals = !special && logits <= 1e3;
    fz_sset expect = errs;
    if (bad_dtype)
        expect |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    if (g.dt.pending)
        expect |= FZ_ALL_DOCUMENTED;
    if ((!errs || late || g.grad_bad) && !bad_dtype && empty_error)
        expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
    if ((!errs || moot) && !bad_dtype && g.dt.valid && !empty_error)
        expect |= valid_outcomes(special, check_vals);
    (void)arm_oom(&expect);
    fz_snapshot();
    int st = sdpa_backward(ctx, &a);
    fz_check_status("sdpa_backward", st, expect, ctx);
    check_buffers(st, "ragged backward");
    if (st == SDPA_ERR_NONFINITE && special == 2)
        CHECK(strncmp(sdpa_ctx_last_error(ctx), "sdpa_backward: sequence ",
                      24) == 0,
              "NONFINITE does not name the sequence: %s",
              sdpa_ctx_last_error(ctx));
    /* half types on the harness's float32 buffers: any documented status,
     * no values to compare */
    if (st == SDPA_OK && !errs && !moot && g.dt.valid) {
        fz_as.fail_at = -1;
        if (check_vals)
            rg_compare_oracle(&a);
        fz_second_call(ctx, fz(F_SECOND), st, call_backward, &a, "gradients");
        if (!special)
            rg_compare_sequences(ctx, &a);
    }
    fz_ctx_end(ctx);
}

static void run(void)
{
    if (fz(F_RAGGED) % 4 == 1) {
        run_ragged();
        return;
    }
    sdpa_backward_args a = SDPA_BACKWARD_ARGS_INIT;
    decode_problem(&a);
    fz_sset errs = 0, amb = 0;
    if (!g.dt.valid && !g.dt.pending)
        errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    errs |= option_errors();

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
        (overlap >= 0 || bk == 12 || bk == 13 || bk == 14 || g.grad_bad ||
         (null_t >= 0 && ((own >> null_t) & 1))))
        expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
    int check_vals = 0;
    if (valid && !errs) {
        int empty_error = ref.any_empty && !fz_opt.empty_zero;
        if (empty_error)
            expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
        check_vals =
            !special &&
            ref.logit_absmax + ref.alibi_absmax + ref.sink_absmax <= 1e3;
        if (special == 2 || !empty_error)
            expect |= valid_outcomes(special, check_vals);
    }
    const int oom = arm_oom(&expect);

    fz_snapshot();
    int st = sdpa_backward(null_ctx ? NULL : ctx, null_args ? NULL : &box.a);
    fz_check_status("sdpa_backward", st, expect, null_ctx ? NULL : ctx);
    check_buffers(st, "backward");
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
    /* ragged calls: lengths Tq_b | packed Tk_b << 4 */
    {"ragged_packed_gqa_causal_empty",
     {{F_RAGGED, 1},
      {F_RG_SEQS, 2},
      {F_HKV, 1},
      {F_GROUP, 1},
      {F_DK, 2},
      {F_DV, 1},
      {F_RG_LEN0, 3 | 4 << 4},
      {F_RG_LEN0 + 1, 0 | 2 << 4},
      {F_RG_LEN0 + 2, 4 | 0 << 4},
      {F_CAUSAL, 2},
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {-1, 0}}},
    {"ragged_batched_kvlens_window_sinks",
     {{F_RAGGED, 1},
      {F_RG_SEQS, 3},
      {F_RG_KEYS, 3},
      {F_RG_KVLEN, 0x1B},
      {F_RG_LEN0, 2},
      {F_RG_LEN0 + 1, 0},
      {F_RG_LEN0 + 2, 4},
      {F_RG_LEN0 + 3, 1},
      {F_TK, 5},
      {F_WINDOW, 1 | (2 << 2) | (1 << 4)},
      {F_ALIBI, 1},
      {F_SINKS, 1},
      {F_DSINKS, 1},
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {-1, 0}}},
    {"ragged_blocks_threads_softcap",
     {{F_RAGGED, 1},
      {F_RG_SEQS, 1},
      {F_GROUP, 1},
      {F_RG_LEN0, 4 | 5 << 4},
      {F_RG_LEN0 + 1, 1 | 3 << 4},
      {F_SOFTCAP, 1 | (4 << 2)},
      {F_CAUSAL, 1},
      FZ_OPTION(F_OPT0_ID, 6, 1),
      FZ_OPTION(F_OPT0_ID + 2, 7, 1),
      FZ_OPTION(F_OPT0_ID + 4, 2, 2),
      {F_SECOND, 1 | (1 << 2)},
      {-1, 0}}},
    {"ragged_no_rows_at_all",
     {{F_RAGGED, 1},
      {F_RG_SEQS, 1},
      {F_RG_LEN0, 0 | 3 << 4},
      {F_RG_LEN0 + 1, 0 | 1 << 4},
      {-1, 0}}},
    {"ragged_shared_kv",
     {{F_RAGGED, 1},
      {F_RG_SEQS, 1},
      {F_RG_KEYS, 1},
      {F_RG_LEN0, 2},
      {F_RG_LEN0 + 1, 3},
      {F_RG_BAD, 8},
      {-1, 0}}},
    {"ragged_offsets_order",
     {{F_RAGGED, 1},
      {F_RG_SEQS, 2},
      {F_RG_LEN0, 2 | 2 << 4},
      {F_RG_LEN0 + 1, 1 | 1 << 4},
      {F_RG_LEN0 + 2, 3 | 2 << 4},
      {F_RG_BAD, 10},
      {F_RG_BAD_VAL, 1},
      {-1, 0}}},
    {"ragged_dsinks_over_offsets",
     {{F_RAGGED, 1},
      {F_RG_LEN0, 2 | 3 << 4},
      {F_SINKS, 1},
      {F_DSINKS, 1},
      {F_RG_BAD, 18},
      {-1, 0}}},
    {"ragged_nan_lse",
     {{F_RAGGED, 1},
      {F_RG_SEQS, 1},
      {F_RG_LEN0, 2 | 3 << 4},
      {F_RG_LEN0 + 1, 3 | 4 << 4},
      {F_SPECIAL, 10},
      {F_SP_POS, 3},
      {-1, 0}}},
    /* 1.2: dropout (F_DROPOUT 5 = 0.2, 6 = 0.6, 7 refused) */
    {"dropout_gqa_sinks",
     {{F_HKV, 1},
      {F_GROUP, 1},
      FZ_DIMS(3, 5, 3, 2),
      {F_SINKS, 1},
      {F_DSINKS, 1},
      {F_DROPOUT, 5},
      {F_DROP_SEED, 9},
      {-1, 0}}},
    {"dropout_refused", {{F_DROPOUT, 7 | 2 << 3}, {-1, 0}}},
    {"ragged_dropout",
     {{F_RAGGED, 1},
      {F_RG_SEQS, 1},
      {F_RG_LEN0, 2 | 3 << 4},
      {F_RG_LEN0 + 1, 3 | 4 << 4},
      {F_DROPOUT, 6},
      {F_DROP_SEED, 3},
      {-1, 0}}},
    /* a caller with the 1.1 struct size: no dropout for it to ask for */
    {"v1_struct_no_dropout", {{F_STRUCT, 25}, {F_DROPOUT, 6}, {-1, 0}}},
    /* 1.2 type fields (F_TYPES 5 spelled out, 6 grad_dtype refused, 7
     * kv_dtype or bias_dtype refused) */
    {"types_spelled_out", {{F_TYPES, 5}, {F_MASK, 1}, {-1, 0}}},
    {"grad_dtype_refused", {{F_TYPES, 6 | 1 << 3}, {-1, 0}}},
    {"kv_dtype_mixes_f64", {{F_TYPES, 7}, {F_DTYPE, 9}, {-1, 0}}},
    {"bias_dtype_refused", {{F_TYPES, 7 | 2 << 3 | 1 << 5}, {-1, 0}}},
    {"ragged_grad_f32",
     {{F_RAGGED, 1},
      {F_TYPES, 5},
      {F_RG_SEQS, 1},
      {F_RG_LEN0, 2 | 3 << 4},
      {F_RG_LEN0 + 1, 3 | 4 << 4},
      {-1, 0}}},
    /* a ragged call in float16 whose second sequence has keys, no rows */
    {"ragged_half_no_rows",
     {{F_RAGGED, 1},
      {F_DTYPE, 14},
      {F_RG_SEQS, 1},
      {F_RG_LEN0, 2 | 3 << 4},
      {F_RG_LEN0 + 1, 0 | 2 << 4},
      {-1, 0}}},
};

static void reset(void)
{
    memset(&g, 0, sizeof g);
    memset(&rg, 0, sizeof rg);
}

FZ_TARGET("fuzz_backward", "BACKWARD", "default", F_SEED0, F_MODE, reset, run,
          run_huge);
