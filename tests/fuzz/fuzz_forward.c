/*
 * libFuzzer target for sdpa_forward and sdpa_forward_workspace.
 *
 * Every input is a fixed header of one-byte fields (fuzz_problem.h's, then
 * enum field below; bytes past the end of the input read as 0, so the
 * empty input is a small valid call). The fields choose: the mode (small
 * shapes that are computed, or
 * huge shapes that are only validated and planned), dtype (also the half
 * types the header declares, and invalid values), shapes, layouts and
 * padded / zero / negative / overlapping strides, optional mask / bias /
 * weights / lse / kv_lens (mask and bias broadcast over any dimension,
 * keys included, with any non-negative key stride), kv_lens in and out of
 * range, bias values with -inf / +inf / NaN, scale and soft-cap (0, NaN,
 * +-inf, subnormal, negative, beyond float32's range), flags, causal
 * values, the 1.1 fields (a sliding window on either side, ALiBi slopes,
 * attention sinks, the logits output at each stage, the max_weight and
 * entropy outputs, each also invalid), struct_size (also an older caller's
 * size, cut at a 1.1 field, whose fields past it the library must ignore),
 * up to four context options (also invalid ids and values, forced paths and
 * kernels, the empty-row policy, 1..3 threads), one deliberate argument
 * error, special values (NaN, inf, huge, subnormal) at chosen elements, an
 * allocator that fails, and a second call (another thread count, or the
 * same call again). Values come from a splitmix64 stream seeded by the
 * input.
 *
 * Checks (abort on the first violation, so libFuzzer reports it):
 *  - every status is a documented code, the one the arguments call for
 *    (an injected argument error gives one of the statuses it can cause; a
 *    valid call gives OK, FULLY_MASKED_ROW, UNSUPPORTED for a forced
 *    tiled/decode path with weights or logits, NONFINITE only when a
 *    NaN/inf reaches an allowed logit or a read V row, or a logit or a
 *    output sum can overflow, OUT_OF_MEMORY only when the allocator
 *    refused); a declared half type may give any documented status for now;
 *  - any status but OK / NONFINITE leaves every output byte untouched and
 *    sdpa_ctx_last_error() non-empty; OK leaves it "";
 *  - inputs are never written (byte snapshots, slopes and sinks included);
 *  - on OK with finite inputs and moderate logits, out / weights / lse /
 *    logits / max_weight / entropy agree with the long-double reference
 *    (tests/common/reference.c, window, ALiBi, sinks and logits included)
 * within the tolerance of tests/test_random.c (same formulas); forbidden
 *    weights are exactly 0 and forbidden logits exactly -inf; each row's
 *    weights plus the sink's share sum to 1; max_weight and entropy agree
 *    with the weights output; empty rows under SDPA_EMPTY_ROWS_ZERO are
 *    exactly 0 / -inf / 0 / 0; bytes outside the outputs' logical views
 *    (padding) are untouched, and so are the outputs an older struct_size
 *    hides;
 *  - K/V rows at j >= kv_lens[b] hold NaN and must not reach the outputs;
 *  - sdpa_forward_workspace allocates nothing, gives sdpa_forward's status
 *    for every error detected before the computation, and reports the same
 *    bytes before and after the call that grew the scratch;
 *  - results are bitwise identical for another SDPA_OPT_NUM_THREADS, and a
 *    repeated call with the same shape allocates nothing;
 *  - sdpa_ctx_set_int / get_int: documented statuses, a refused value
 *    leaves the option unchanged;
 *  - the allocator sees matching sizes, valid alignments, no leaks.
 *
 * Huge shapes (2^30 .. INT64_MAX) are never allocated: q/k/v/out/weights/
 * lse/logits/max_weight/entropy then point at distinct fake addresses that
 * are never dereferenced (mask and bias at a small real buffer with every
 * stride 0, kv_lens, slopes and sinks at real arrays), only
 * sdpa_forward_workspace runs, and sdpa_forward only when the workspace
 * call refused the arguments (it must refuse them the same way).
 *
 * Seed corpus: FUZZ_FORWARD_WRITE_CORPUS=<dir> ./fuzz_forward writes the
 * empty input's seed and the hand-made seeds of seeds[] to <dir> and
 * exits.
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

/* ------------------------------------------------------------------------ */
/* Input fields: one byte each, fuzz_problem.h's and then these, in this   */
/* order (new fields are appended, so that the committed seeds keep their   */
/* meaning).                                                                 */
/* ------------------------------------------------------------------------ */
enum field {
    F_PAD_Q = FZ_PROBLEM_FIELDS,
    F_PAD_KV,
    F_PAD_OUT,
    F_PAD_W,
    F_PAD_LSE,
    F_KV_BCAST,
    F_MASK,
    F_MASK_B,
    F_MASK_DENS,
    F_BIAS,
    F_BIAS_B,
    F_BIAS_NINF,
    F_CAUSAL,
    F_FLAGS,
    F_SCALE,
    F_SCALE_FRAC,
    F_SOFTCAP,
    F_SOFTCAP_FRAC,
    F_KVLENS,
    F_KV0,
    F_KV1,
    F_KV2,
    F_WEIGHTS,
    F_LSE,
    F_OPT0_ID, /* four (id, value) slots: fz_apply_options */
    F_OPT0_VAL,
    F_OPT1_ID,
    F_OPT1_VAL,
    F_OPT2_ID,
    F_OPT2_VAL,
    F_OPT3_ID,
    F_OPT3_VAL,
    F_BAD_KIND,
    F_BAD_TENSOR,
    F_BAD_DIM,
    F_BAD_VAL,
    F_STRUCT,
    F_OOM,
    F_SECOND,
    F_AMP,
    F_KVPAD,
    F_SP0_T,
    F_SP0_POS,
    F_SP0_KIND,
    F_SP1_T,
    F_SP1_POS,
    F_SP1_KIND,
    F_SP2_T,
    F_SP2_POS,
    F_SP2_KIND,
    F_HUGE_WHAT,
    F_HUGE_VAL,
    F_HUGE_WHAT2,
    F_HUGE_VAL2,
    F_HUGE_PTRS,
    F_SEED0, /* eight bytes */
    F_WINDOW = F_SEED0 + 8,
    F_WIN_L,
    F_WIN_R,
    F_ALIBI,
    F_ALIBI_VAL,
    F_SINKS,
    F_SINK_VAL,
    F_LOGITS,
    F_MAXW,
    F_ENTROPY,
    F_LAYOUT2,
    F_PAD_LG,
    F_PAD_DIAG,
    F_DROPOUT,   /* 1.2: dropout_p, see decode_dropout */
    F_DROP_SEED, /* its seed and offset */
    F_COUNT
};

static unsigned fld(int f)
{
    return fz(f);
}

/* ------------------------------------------------------------------------ */
/* Tensors.                                                                  */
/* ------------------------------------------------------------------------ */
enum {
    T_Q,
    T_K,
    T_V,
    T_MASK,
    T_BIAS,
    T_OUT,
    T_W,
    T_LSE,
    T_LG,
    T_MW,
    T_EN,
    T_COUNT
};
/* What the header's rules say of each tensor. */
static const struct tinfo {
    const char *name;
    int output;
    int inner1;    /* stride[3] must be 1 (when shape[3] > 1) */
    int blas_rows; /* stride[2] >= shape[3] (when shape[2] > 1) */
    int row_vec;   /* one value per row, stride[3] ignored */
} tinfo[T_COUNT] = {
    {"q", 0, 1, 1, 0},          {"k", 0, 1, 1, 0},       {"v", 0, 1, 1, 0},
    {"mask", 0, 0, 0, 0},       {"bias", 0, 0, 0, 0},    {"out", 1, 1, 1, 0},
    {"weights", 1, 1, 1, 0},    {"lse", 1, 0, 0, 1},     {"logits", 1, 1, 0, 0},
    {"max_weight", 1, 0, 0, 1}, {"entropy", 1, 0, 0, 1},
};

typedef struct cfg {
    int huge;
    fz_dtype dt;
    int64_t N, Hq, Hkv, Tq, Tk, Dk, Dv;
    int causal;
    uint32_t flags;
    double scale, softcap;
    int mask_allows; /* SDPA_FLAG_MASK_NONZERO_ALLOWS */
    int use_kvlens;
    int64_t kv_lens[64];
    /* 1.1, as the library sees them (an older struct_size hides some) */
    int window; /* SDPA_FLAG_WINDOW */
    int64_t win_l, win_r;
    const double *slopes, *sinks;
    int stage;
    int seen_t[T_COUNT]; /* the tensors the library sees */
} cfg;

static fz_tens g_t[T_COUNT];
static cfg g_c;

static size_t esize_of(int t, int compute)
{
    return t == T_MASK ? 1 : fz_esize(compute);
}

/* sdpa_forward_args as 1.0 froze it (the header: a smaller struct_size is
 * SDPA_ERR_STRUCT_SIZE). */
enum { ARGS_SIZE_V1 = 624 };

/* Byte boundaries of the 1.1 fields, for callers built against an older
 * header (fz_pack_struct). */
static const size_t g_cuts[] = {offsetof(sdpa_forward_args, window_left),
                                offsetof(sdpa_forward_args, alibi_slopes),
                                offsetof(sdpa_forward_args, sinks),
                                offsetof(sdpa_forward_args, logits),
                                offsetof(sdpa_forward_args, logits_stage),
                                offsetof(sdpa_forward_args, max_weight),
                                offsetof(sdpa_forward_args, entropy),
                                offsetof(sdpa_forward_args, entropy) +
                                    sizeof(sdpa_tensor)};

/* Does a struct_size of `seen` bytes include the field ending at `end`? */
static int visible(size_t seen, size_t offset, size_t size)
{
    return seen >= offset + size;
}
#define VISIBLE(seen, field)                                                   \
    visible(seen, offsetof(sdpa_forward_args, field),                          \
            sizeof(((sdpa_forward_args *)0)->field))

static void describe(const char *extra)
{
    const cfg *c = &g_c;
    fz_desc[0] = '\0';
    fz_describe("%s dtype=%d N=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld Dk=%lld "
                "Dv=%lld causal=%d flags=0x%x scale=%g softcap=%g",
                c->huge ? "HUGE" : "small", c->dt.dtype, (long long)c->N,
                (long long)c->Hq, (long long)c->Hkv, (long long)c->Tq,
                (long long)c->Tk, (long long)c->Dk, (long long)c->Dv, c->causal,
                c->flags, c->scale, c->softcap);
    if (c->use_kvlens) {
        fz_describe(" kv_lens=[");
        for (int64_t b = 0; b < c->N && b < 4; b++)
            fz_describe("%s%lld", b ? "," : "", (long long)c->kv_lens[b]);
        fz_describe("]");
    }
    if (c->window)
        fz_describe(" window=%lld,%lld", (long long)c->win_l,
                    (long long)c->win_r);
    if (c->slopes)
        fz_describe(" alibi[0]=%g", c->slopes[0]);
    if (c->sinks)
        fz_describe(" sinks[0]=%g", c->sinks[0]);
    if (c->stage)
        fz_describe(" stage=%d", c->stage);
    fz_describe(" path=%lld threads=%lld zero=%lld kernel=%lld %s",
                (long long)fz_opt.path, (long long)fz_opt.threads,
                (long long)fz_opt.empty_zero, (long long)fz_opt.kernel, extra);
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present)
            fz_describe(
                " %s{%lld,%lld,%lld,%lld|%lld,%lld,%lld,%lld}", tinfo[t].name,
                (long long)g_t[t].t.shape[0], (long long)g_t[t].t.shape[1],
                (long long)g_t[t].t.shape[2], (long long)g_t[t].t.shape[3],
                (long long)g_t[t].t.stride[0], (long long)g_t[t].t.stride[1],
                (long long)g_t[t].t.stride[2], (long long)g_t[t].t.stride[3]);
}

/* ------------------------------------------------------------------------ */
/* The common part of the arguments: dtype, causal, flags, scale, softcap.    */
/* ------------------------------------------------------------------------ */
static fz_sset decode_scalars(cfg *c)
{
    fz_sset errs = 0;
    c->dt = fz_decode_dtype(fld(F_DTYPE), fld(F_DTYPE_RAW));
    if (!c->dt.valid && !c->dt.pending)
        errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    const int f32 = c->dt.dtype == SDPA_FLOAT32;
    unsigned cv = fld(F_CAUSAL);
    switch (cv % 8) {
    case 3:
    case 4:
        c->causal = SDPA_CAUSAL_TOP_LEFT;
        break;
    case 5:
    case 6:
        c->causal = SDPA_CAUSAL_BOTTOM_RIGHT;
        break;
    case 7: {
        static const int bad[5] = {3, -1, INT_MAX, INT_MIN, 100};
        c->causal = bad[(cv >> 3) % 5];
        errs |= FZ_BIT(SDPA_ERR_BAD_CAUSAL);
        break;
    }
    default:
        c->causal = SDPA_CAUSAL_NONE;
        break;
    }
    c->mask_allows = (fld(F_MASK) & 0x40) != 0;
    c->flags = c->mask_allows ? (uint32_t)SDPA_FLAG_MASK_NONZERO_ALLOWS : 0u;
    unsigned fv = fld(F_FLAGS);
    if (fv % 8 == 7) {
        /* high bits only: low ones are taken by later releases' flags */
        static const uint32_t bad[4] = {1u << 30, 0x80000000u, 0xFFFF0000u,
                                        1u << 16};
        c->flags |= bad[(fv >> 3) % 4];
        errs |= FZ_BIT(SDPA_ERR_BAD_FLAGS);
    }
    c->scale = fz_decode_scale(fld(F_SCALE), fld(F_SCALE_FRAC), 0);
    c->softcap = fz_decode_scale(fld(F_SOFTCAP), fld(F_SOFTCAP_FRAC), 1);
    if (!(isfinite(c->scale) && c->scale >= 0))
        errs |= FZ_BIT(SDPA_ERR_BAD_SCALE);
    if (!(isfinite(c->softcap) && c->softcap >= 0))
        errs |= FZ_BIT(SDPA_ERR_BAD_SOFTCAP);
    /* float32: a scale or soft-cap beyond FLT_MAX, or a positive one that
     * rounds to 0 (the header) */
    if (f32 && isfinite(c->scale) &&
        (c->scale > FLT_MAX || (c->scale > 0 && (float)c->scale == 0.0f)))
        errs |= FZ_BIT(SDPA_ERR_BAD_SCALE);
    if (f32 && isfinite(c->softcap) &&
        (c->softcap > FLT_MAX || (c->softcap > 0 && (float)c->softcap == 0.0f)))
        errs |= FZ_BIT(SDPA_ERR_BAD_SOFTCAP);
    return errs;
}

/* The window fields: none, SDPA_FLAG_WINDOW with two sides (-1 unbounded,
 * 0.., wider than Tq + Tk, below -1: BAD_WINDOW), or sides without the
 * flag (BAD_WINDOW). Sets the flag in c->flags and the caller's values. */
static void decode_window(cfg *c, int64_t *wl, int64_t *wr)
{
    static const int64_t vals[12] = {-1, 0,  1,         2,   3,  5,
                                     8,  -1, INT64_MAX, 100, -2, INT64_MIN};
    unsigned m = fld(F_WINDOW) % 8;
    *wl = *wr = 0;
    if (m < 4)
        return;
    *wl = vals[fld(F_WIN_L) % 12];
    *wr = vals[fld(F_WIN_R) % 12];
    if (m < 7) {
        c->flags |= SDPA_FLAG_WINDOW;
    } else if (*wl == 0 && *wr == 0) {
        *wl = 1;
    }
}

/* dropout_p: mostly 0; 0.03, 0.1, 0.5 or 0.9; a refused value (negative,
 * 1, NaN, ±inf; BAD_DROPOUT), or one below 1 that rounds to 1 in float
 * (refused by a float32 call). Sets *bad when the library must refuse it
 * (for a call of dtype f32 or not). */
static double decode_dropout(int f32, int *bad)
{
    static const double good[4] = {0.03, 0.1, 0.5, 0.9};
    static const double refused[5] = {-0.25, 1.0, NAN, INFINITY, -INFINITY};
    unsigned v = fld(F_DROPOUT);
    *bad = 0;
    switch (v % 16) {
    case 10:
    case 11:
    case 12:
    case 13:
        return good[(v % 16) - 10];
    case 14:
        *bad = 1;
        return refused[(v >> 4) % 5];
    case 15:
        *bad = f32;
        return 1 - 1e-12;
    default:
        return 0;
    }
}

/* Hq slopes or sinks: none, typical, large, or with a special value at one
 * head; a real array registered as an input. */
static const double *decode_per_head(int field, int vfield, const char *name,
                                     int64_t hq, int sinks)
{
    unsigned m = fld(field) % 8;
    if (m < 5 || hq > 64)
        return NULL;
    fz_buf *b = fz_buf_new(name, 0, (size_t)hq * sizeof(double));
    double *p = (double *)(void *)b->mem;
    unsigned v = fld(vfield);
    if (m == 5 && !sinks) { /* the standard slopes */
        double max_bias = (double)(v % 17);
        CHECK(sdpa_alibi_slopes(hq, max_bias, p) == SDPA_OK,
              "sdpa_alibi_slopes(%lld, %g)", (long long)hq, max_bias);
        return p;
    }
    double amp = sinks ? (m == 5 ? 3.0 : 50.0) : 0.05 + (double)(v % 16) / 4;
    for (int64_t h = 0; h < hq; h++)
        p[h] = fz_sym(amp);
    if (m == 7)
        p[(v >> 4) % (unsigned)hq] = fz_special_reals[v % 16];
    return p;
}

/* A per-head array's status: BAD_ALIBI / BAD_SINK for a value that is not
 * finite, or beyond float32 in a float32 call. */
static int per_head_bad(const double *p, int64_t hq, int f32)
{
    for (int64_t h = 0; p && h < hq; h++)
        if (!isfinite(p[h]) || (f32 && fabs(p[h]) > FLT_MAX))
            return 1;
    return 0;
}

/* The logits field: absent, one of the three stages, or a stage that does
 * not match the tensor (BAD_LOGITS_STAGE). */
static void decode_logits(int *present, int *stage)
{
    unsigned v = fld(F_LOGITS);
    *present = 0;
    *stage = 0;
    switch (v % 8) {
    case 4:
    case 5:
    case 6:
        *present = 1;
        *stage = (int)(v % 8) - 3;
        break;
    case 7: {
        static const int bad[4] = {0, 4, SDPA_LOGITS_CAPPED, INT_MAX};
        int k = (int)((v >> 3) % 4);
        *present = k != 2;
        *stage = k == 1 && (v & 0x80) ? -1 : bad[k];
        break;
    }
    default:
        break;
    }
}

static fz_sset logits_errs(int present, int stage)
{
    int known = stage >= SDPA_LOGITS_SCALED && stage <= SDPA_LOGITS_MASKED;
    if (present != (stage != 0) || (stage != 0 && !known))
        return FZ_BIT(SDPA_ERR_BAD_LOGITS_STAGE);
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Huge shapes: validation and plan only.                                    */
/* ------------------------------------------------------------------------ */
static void run_huge(void)
{
    cfg *c = &g_c;
    static const int64_t table[8] = {INT64_C(1) << 30, INT64_C(2147483647),
                                     INT64_C(1) << 31, INT64_C(1) << 32,
                                     INT64_C(1) << 40, INT64_C(1) << 62,
                                     INT64_MAX,        INT64_C(2147483649)};
    c->N = 1 + (int64_t)(fld(F_N) % 3);
    c->Hkv = 1 + (int64_t)(fld(F_HKV) % 2);
    c->Hq = c->Hkv * (1 + (int64_t)(fld(F_GROUP) % 3));
    c->Tq = 1 + (int64_t)(fld(F_TQ) % 4);
    c->Tk = 1 + (int64_t)(fld(F_TK) % 4);
    c->Dk = 1 + (int64_t)(fld(F_DK) % 4);
    c->Dv = 1 + (int64_t)(fld(F_DV) % 4);
    int64_t *dims[7] = {&c->N, &c->Hq, &c->Tq, &c->Tk, &c->Dk, &c->Dv, &c->Hkv};
    for (int k = 0; k < 2; k++) {
        unsigned what = fld(k ? F_HUGE_WHAT2 : F_HUGE_WHAT);
        unsigned val = fld(k ? F_HUGE_VAL2 : F_HUGE_VAL);
        if (k == 1 && what % 2 == 0)
            break;
        unsigned w = (what >> 1) % 7;
        *dims[w] = table[val % 8];
        if (w == 6) /* Hkv huge: Hq a multiple (or not) */
            c->Hq = (val & 8) ? c->Hkv : c->Hkv - 1;
        if (w == 1 && (val & 8))
            c->Hkv = c->Hq;
    }
    (void)decode_scalars(c);
    int64_t wl, wr;
    decode_window(c, &wl, &wr);
    c->window = (c->flags & SDPA_FLAG_WINDOW) != 0;
    c->win_l = wl;
    c->win_r = wr;
    int dt = c->dt.compute;
    unsigned ptrs = fld(F_HUGE_PTRS);
    static double small_mem[8];
    memset(small_mem, 0, sizeof small_mem);
    int lg_present, stage;
    decode_logits(&lg_present, &stage);
    int64_t shp[T_COUNT][4] = {
        {c->N, c->Hq, c->Tq, c->Dk},  {c->N, c->Hkv, c->Tk, c->Dk},
        {c->N, c->Hkv, c->Tk, c->Dv}, {c->N, c->Hq, c->Tq, c->Tk},
        {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, c->Dv},
        {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, 1},
        {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, 1},
        {c->N, c->Hq, c->Tq, 1}};
    /* one tensor's dimension disagrees */
    if ((fld(F_HUGE_VAL) >> 3) % 4 == 1) {
        int t = (int)(fld(F_BAD_TENSOR) % T_COUNT);
        int d = (int)(fld(F_BAD_DIM) % 4);
        shp[t][d] = table[fld(F_BAD_VAL) % 8];
    }
    memset(g_t, 0, sizeof g_t);
    int present[T_COUNT] = {1,
                            1,
                            1,
                            fld(F_MASK) % 3 == 1,
                            fld(F_BIAS) % 3 == 1,
                            1,
                            fld(F_WEIGHTS) % 2 == 1,
                            fld(F_LSE) % 2 == 1,
                            lg_present,
                            fld(F_MAXW) % 2 == 1,
                            fld(F_ENTROPY) % 2 == 1};
    for (int t = 0; t < T_COUNT; t++) {
        fz_tens *x = &g_t[t];
        x->present = present[t];
        x->es = esize_of(t, dt);
        if (!present[t])
            continue;
        int64_t run = 1;
        for (int d = 3; d >= 0; d--) {
            x->t.shape[d] = shp[t][d];
            x->t.stride[d] = run;
            run = fz_sat_mul(run, shp[t][d] > 0 ? shp[t][d] : 1);
        }
        if (t == T_MASK || t == T_BIAS) {
            for (int d = 0; d < 4; d++) {
                x->t.stride[d] = 0;
                if ((ptrs >> (4 + d)) & 1)
                    x->t.shape[d] = 1;
            }
            x->t.data = small_mem;
            continue;
        }
        if (!tinfo[t].output && (ptrs & 2)) {
            x->t.stride[0] = 0;
            x->t.stride[1] = 0;
        }
        if (tinfo[t].row_vec && (ptrs & 4))
            x->t.stride[3] = -7; /* ignored */
        if (ptrs & 1)
            x->t.data = small_mem; /* real but small: overlaps, mostly */
        else /* distinct fake addresses, never dereferenced */
            x->t.data = (void *)(uintptr_t)(((uintptr_t)t + 1) << 52);
    }
    if ((ptrs & 8) && fld(F_BAD_KIND) % 4 == 0) /* a required pointer NULL */
        g_t[fld(F_BAD_TENSOR) % 3].t.data = NULL;
    static int64_t kvl[64];
    c->use_kvlens = fld(F_KVLENS) % 3 == 1 && c->N > 0 && c->N <= 64;
    for (int b = 0; b < 64; b++) {
        unsigned v = b < 3 ? fld(F_KV0 + b) : 0;
        kvl[b] = v % 4 == 0   ? c->Tk
                 : v % 4 == 1 ? 0
                 : v % 4 == 2 ? c->Tk / 2
                              : -1;
        c->kv_lens[b] = kvl[b];
    }
    /* slopes and sinks are read for every head: only with few heads */
    c->slopes = decode_per_head(F_ALIBI, F_ALIBI_VAL, "alibi_slopes", c->Hq, 0);
    c->sinks = decode_per_head(F_SINKS, F_SINK_VAL, "sinks", c->Hq, 1);
    c->stage = stage;
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dt.dtype;
    a.causal = c->causal;
    a.flags = c->flags;
    a.scale = c->scale;
    a.softcap = c->softcap;
    a.kv_lens = c->use_kvlens ? kvl : NULL;
    a.q = g_t[T_Q].t;
    a.k = g_t[T_K].t;
    a.v = g_t[T_V].t;
    a.mask = g_t[T_MASK].t;
    a.bias = g_t[T_BIAS].t;
    a.out = g_t[T_OUT].t;
    a.weights = g_t[T_W].t;
    a.lse = g_t[T_LSE].t;
    a.window_left = wl;
    a.window_right = wr;
    a.alibi_slopes = c->slopes;
    a.sinks = c->sinks;
    a.logits = g_t[T_LG].t;
    a.logits_stage = stage;
    a.max_weight = g_t[T_MW].t;
    a.entropy = g_t[T_EN].t;
    union {
        sdpa_forward_args a;
        unsigned char bytes[sizeof(sdpa_forward_args) + 64];
    } box;
    size_t seen;
    (void)fz_pack_struct(fld(F_STRUCT), &a, sizeof a, ARGS_SIZE_V1, g_cuts,
                         sizeof g_cuts / sizeof g_cuts[0], box.bytes,
                         sizeof box.bytes, &seen);

    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, F_OPT0_ID);
    /* keep validation's empty-row scan short: rows, times keys when a
     * mask or bias is scanned (every row's keys, if all are forbidden) */
    int64_t rows, scan;
    int scanned = present[T_MASK] || present[T_BIAS];
    if (__builtin_mul_overflow(c->N > 0 ? c->N : 1, c->Tq > 0 ? c->Tq : 1,
                               &rows) ||
        __builtin_mul_overflow(rows, scanned && c->Tk > 0 ? c->Tk : 1, &scan) ||
        scan > 65536)
        CHECK(sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS,
                               SDPA_EMPTY_ROWS_ZERO) == SDPA_OK,
              "set EMPTY_ROWS");
    describe("");
    long allocs = fz_alloc_count();
    size_t bytes = 0;
    int ws = sdpa_forward_workspace(ctx, &box.a, &bytes);
    if (fz_verbose)
        fprintf(stderr, "fuzz_forward: workspace status %d bytes %zu %s\n", ws,
                bytes, fz_desc);
    fz_check_status("sdpa_forward_workspace", ws,
                    FZ_ALL_DOCUMENTED & ~FZ_BIT(SDPA_ERR_NONFINITE) &
                        ~FZ_BIT(SDPA_ERR_OUT_OF_MEMORY),
                    ctx);
    CHECK(fz_alloc_count() == allocs, "sdpa_forward_workspace allocated");
    if (ws != SDPA_OK) {
        /* sdpa_forward must refuse the same way, before touching memory */
        int fs = sdpa_forward(ctx, &box.a);
        CHECK(fs == ws, "workspace status %d but forward %d: %s", ws, fs,
              sdpa_ctx_last_error(ctx));
        CHECK(fz_alloc_count() == allocs, "a refused sdpa_forward allocated");
        CHECK(sdpa_ctx_last_error(ctx)[0] != '\0', "empty message");
    }
    fz_ctx_end(ctx);
}

/* ------------------------------------------------------------------------ */
/* Small shapes: computed and compared.                                      */
/* ------------------------------------------------------------------------ */

/* The reasons key j is forbidden for row (b, h, i), computed here from the
 * header's rules. */
enum { R_LEN = 1, R_MASK = 2, R_CAUSAL = 4, R_BIAS = 8, R_WINDOW = 16 };

static int forbid_reasons(int64_t b, int64_t h, int64_t i, int64_t j)
{
    const cfg *c = &g_c;
    int r = 0;
    int64_t L = c->use_kvlens ? c->kv_lens[b] : c->Tk;
    if (j >= L)
        r |= R_LEN;
    if (g_t[T_MASK].present) {
        const sdpa_tensor *m = &g_t[T_MASK].t;
        unsigned char v =
            ((const unsigned char *)
                 m->data)[fz_off4(m, fz_bix(m, 0, b), fz_bix(m, 1, h),
                                  fz_bix(m, 2, i), fz_bix(m, 3, j))];
        if (c->mask_allows ? v == 0 : v != 0)
            r |= R_MASK;
    }
    if (!ref_causal_allows(c->causal, i, j, L, c->Tq))
        r |= R_CAUSAL;
    if (c->window) {
        int64_t d = c->causal == SDPA_CAUSAL_TOP_LEFT ? i : i + (L - c->Tq);
        if ((c->win_l != -1 && j - d < -c->win_l) ||
            (c->win_r != -1 && j - d > c->win_r))
            r |= R_WINDOW;
    }
    if (g_t[T_BIAS].present) {
        const sdpa_tensor *m = &g_t[T_BIAS].t;
        double v =
            fz_get(&g_t[T_BIAS], fz_off4(m, fz_bix(m, 0, b), fz_bix(m, 1, h),
                                         fz_bix(m, 2, i), fz_bix(m, 3, j)));
        if (v == -INFINITY)
            r |= R_BIAS;
    }
    return r;
}

static double bias_at(int64_t b, int64_t h, int64_t i, int64_t j)
{
    if (!g_t[T_BIAS].present)
        return 0.0;
    const sdpa_tensor *m = &g_t[T_BIAS].t;
    return fz_get(&g_t[T_BIAS], fz_off4(m, fz_bix(m, 0, b), fz_bix(m, 1, h),
                                        fz_bix(m, 2, i), fz_bix(m, 3, j)));
}

/* K and V shared by every batch item through extent 1 (which validation
 * accepts like stride 0), as the equivalent stride-0 view over N items: the
 * reference indexes K and V by the batch item. */
static sdpa_tensor norm_kv(const sdpa_tensor *t)
{
    sdpa_tensor x = *t;
    if (x.shape[0] == 1 && g_c.N > 1) {
        x.shape[0] = g_c.N;
        x.stride[0] = 0;
    }
    return x;
}

/* What the non-finite and huge inputs can do. */
typedef struct analysis {
    int nf_possible;       /* a NaN/inf may reach an allowed logit */
    int nf_certain;        /* a NaN reaches an allowed logit for sure */
    int overflow;          /* an allowed or computed logit may overflow */
    int v_allowed_nf;      /* non-finite V in an allowed row: out may be NaN */
    int v_partial_nf;      /* non-finite V in a key j < L forbidden for some
                              rows and allowed for others: those rows'
                              outputs may turn NaN (header, rule 5) */
    int v_never_nf;        /* non-finite V in a key no row of the group may
                              see: never read (rule 5) */
    int k_never_nf;        /* the same for K */
    int bias_forbidden_nf; /* NaN/+inf bias on a key forbidden otherwise */
    int q_empty_nf;        /* non-finite q in a row with no allowed key */
    double bound_all;      /* scale*sum|qk| + |bias| over all rows j < L */
} analysis;

static void analyse(const unsigned char *allowed, analysis *an)
{
    const cfg *c = &g_c;
    memset(an, 0, sizeof *an);
    const int64_t g = c->Hq / c->Hkv;
    const double se = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->Dk);
    const int f32 = c->dt.compute == SDPA_FLOAT32;
    const double big = f32 ? 1e37 : 1e300;
    if (f32 && se > 1e30)
        an->overflow = 1;
    const fz_tens *Q = &g_t[T_Q];
    fz_tens Kn = g_t[T_K], Vn = g_t[T_V];
    Kn.t = norm_kv(&g_t[T_K].t);
    Vn.t = norm_kv(&g_t[T_V].t);
    const fz_tens *K = &Kn, *V = &Vn;
    /* seen[(b * Hkv + hk) * Tk + j]: some row of the GQA group may see key j */
    unsigned char *seen = calloc((size_t)(c->N * c->Hkv * c->Tk), 1);
    if (!seen)
        abort();
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++)
                for (int64_t j = 0; j < c->Tk; j++)
                    seen[(size_t)((b * c->Hkv + h / g) * c->Tk + j)] |=
                        allowed[(size_t)(((b * c->Hq + h) * c->Tq + i) * c->Tk +
                                         j)];
    for (int64_t b = 0; b < c->N; b++) {
        int64_t L = c->use_kvlens ? c->kv_lens[b] : c->Tk;
        for (int64_t h = 0; h < c->Hq; h++) {
            int64_t hk = h / g;
            for (int64_t i = 0; i < c->Tq; i++) {
                size_t row = (size_t)((b * c->Hq + h) * c->Tq + i);
                const unsigned char *ok = allowed + row * (size_t)c->Tk;
                int any = 0, qnf = 0;
                for (int64_t j = 0; j < c->Tk; j++)
                    any |= ok[j];
                for (int64_t d = 0; d < c->Dk; d++) {
                    double qv = fz_get(Q, fz_off4(&Q->t, b, h, i, d));
                    if (!isfinite(qv))
                        qnf = isnan(qv) ? 2 : qnf > 0 ? qnf : 1;
                }
                if (qnf && any) {
                    an->nf_possible = 1;
                    if (qnf == 2)
                        an->nf_certain = 1;
                }
                if (qnf && !any)
                    an->q_empty_nf = 1;
                for (int64_t j = 0; j < c->Tk && j < L; j++) {
                    int knf = 0, vnf = 0;
                    double absdot = 0;
                    for (int64_t d = 0; d < c->Dk; d++) {
                        double kv = fz_get(K, fz_off4(&K->t, b, hk, j, d));
                        double qv = fz_get(Q, fz_off4(&Q->t, b, h, i, d));
                        if (!isfinite(kv))
                            knf = isnan(kv) ? 2 : knf > 0 ? knf : 1;
                        else if (isfinite(qv))
                            absdot += fabs(qv * kv);
                    }
                    for (int64_t d = 0; d < c->Dv; d++)
                        if (!isfinite(fz_get(V, fz_off4(&V->t, b, hk, j, d))))
                            vnf = 1;
                    double bv = bias_at(b, h, i, j);
                    double bound = se * absdot + (isfinite(bv) ? fabs(bv) : 0);
                    if (bound > an->bound_all)
                        an->bound_all = bound;
                    if (c->softcap > 0 && se * absdot / c->softcap > big)
                        an->overflow = 1;
                    if (absdot > big) /* the dot product itself */
                        an->overflow = 1;
                    int why = forbid_reasons(b, h, i, j);
                    if (ok[j]) {
                        if (knf) {
                            an->nf_possible = 1;
                            if (knf == 2)
                                an->nf_certain = 1;
                        }
                        if (isnan(bv) || bv == INFINITY) {
                            an->nf_possible = 1;
                            if (!knf && !qnf)
                                an->nf_certain = 1;
                        }
                        if (vnf)
                            an->v_allowed_nf = 1;
                    } else {
                        int read =
                            seen[(size_t)((b * c->Hkv + hk) * c->Tk + j)];
                        if (knf && !read)
                            an->k_never_nf = 1;
                        if (vnf && read)
                            an->v_partial_nf = 1;
                        if (vnf && !read)
                            an->v_never_nf = 1;
                        if ((isnan(bv) || bv == INFINITY) && !(why & R_BIAS))
                            an->bias_forbidden_nf = 1;
                    }
                }
            }
        }
    }
    if (an->bound_all > big)
        an->overflow = 1;
    free(seen);
}

static int call_forward(sdpa_ctx *ctx, const void *args)
{
    return sdpa_forward(ctx, args);
}

static void run_small(void)
{
    cfg *c = &g_c;
    c->N = 1 + (int64_t)(fld(F_N) % 3);
    c->Hkv = 1 + (int64_t)(fld(F_HKV) % 3);
    c->Hq = c->Hkv * (1 + (int64_t)(fld(F_GROUP) % 4));
    c->Tq = fz_small_dim(fld(F_TQ), 8, 16);
    c->Tk = fz_small_dim(fld(F_TK), 12, 32);
    c->Dk = fz_small_dim(fld(F_DK), 8, 16);
    c->Dv = fz_small_dim(fld(F_DV), 8, 16);
    fz_sset errs = decode_scalars(c);
    fz_sset amb = 0; /* statuses acceptable besides the expected ones */
    const int dt = c->dt.compute;
    const int f32 = c->dt.dtype == SDPA_FLOAT32;
    /* What an older struct_size hides: the library reads no byte past it,
     * so the 1.1 fields there are absent for it (and their outputs must
     * stay untouched). The caller's struct holds them all the same. */
    size_t seen;
    {
        sdpa_forward_args dummy = SDPA_FORWARD_ARGS_INIT;
        unsigned char tmp[sizeof dummy + 64];
        (void)fz_pack_struct(fld(F_STRUCT), &dummy, sizeof dummy, ARGS_SIZE_V1,
                             g_cuts, sizeof g_cuts / sizeof g_cuts[0], tmp,
                             sizeof tmp, &seen);
        if (seen == 0)
            seen = sizeof dummy; /* refused for its size: nothing is read */
    }

    /* kv_lens */
    c->use_kvlens = fld(F_KVLENS) % 3 == 1;
    for (int b = 0; b < 64; b++)
        c->kv_lens[b] = c->Tk;
    if (c->use_kvlens)
        for (int b = 0; b < c->N; b++) {
            unsigned v = fld(F_KV0 + b);
            int64_t L;
            switch (v % 8) {
            case 0:
                L = 0;
                break;
            case 1:
                L = c->Tk;
                break;
            case 6: {
                const int64_t bad[5] = {-1, c->Tk + 1, INT64_MIN, INT64_MAX,
                                        2 * c->Tk + 5};
                L = bad[(v >> 3) % 5];
                errs |= FZ_BIT(SDPA_ERR_BAD_KV_LEN);
                break;
            }
            case 7:
                L = c->Tk - 1;
                break;
            default:
                L = 1 + (int64_t)((v >> 3) % (unsigned)c->Tk);
                break;
            }
            c->kv_lens[b] = L;
        }
    const int64_t *kvlens_ptr = c->use_kvlens ? c->kv_lens : NULL;

    /* the 1.1 fields, as the caller sets them */
    int64_t wl, wr;
    decode_window(c, &wl, &wr);
    const double *slopes =
        decode_per_head(F_ALIBI, F_ALIBI_VAL, "alibi_slopes", c->Hq, 0);
    const double *sinks =
        decode_per_head(F_SINKS, F_SINK_VAL, "sinks", c->Hq, 1);
    int lg_present, stage;
    decode_logits(&lg_present, &stage);
    int drop_bad;
    const double drop_p = decode_dropout(f32, &drop_bad);
    if (drop_bad && VISIBLE(seen, dropout_p))
        errs |= FZ_BIT(SDPA_ERR_BAD_DROPOUT);
    /* ... and as the library sees them */
    c->window = (c->flags & SDPA_FLAG_WINDOW) != 0;
    c->win_l = VISIBLE(seen, window_left) ? wl : 0;
    c->win_r = VISIBLE(seen, window_right) ? wr : 0;
    c->slopes = VISIBLE(seen, alibi_slopes) ? slopes : NULL;
    c->sinks = VISIBLE(seen, sinks) ? sinks : NULL;
    c->stage = VISIBLE(seen, logits_stage) ? stage : 0;
    int lg_seen = lg_present && VISIBLE(seen, logits);
    int mw_seen = fld(F_MAXW) % 2 == 1 && VISIBLE(seen, max_weight);
    int en_seen = fld(F_ENTROPY) % 2 == 1 && VISIBLE(seen, entropy);
    if (c->window ? c->win_l < -1 || c->win_r < -1
                  : c->win_l != 0 || c->win_r != 0)
        errs |= FZ_BIT(SDPA_ERR_BAD_WINDOW);
    if (per_head_bad(c->slopes, c->Hq, f32))
        errs |= FZ_BIT(SDPA_ERR_BAD_ALIBI);
    if (per_head_bad(c->sinks, c->Hq, f32))
        errs |= FZ_BIT(SDPA_ERR_BAD_SINK);
    errs |= logits_errs(lg_seen, c->stage);

    /* layouts */
    unsigned lay = fld(F_LAYOUT), lay2 = fld(F_LAYOUT2);
    unsigned kvb = fld(F_KV_BCAST) % 4;
    int64_t pads[T_COUNT] = {0};
    const int pad_f[T_COUNT] = {F_PAD_Q,  F_PAD_KV,   F_PAD_KV,  -1,
                                -1,       F_PAD_OUT,  F_PAD_W,   F_PAD_LSE,
                                F_PAD_LG, F_PAD_DIAG, F_PAD_DIAG};
    for (int t = 0; t < T_COUNT; t++)
        if (pad_f[t] >= 0)
            pads[t] = fld(pad_f[t]) % 8 < 5 ? 0 : fld(pad_f[t]) % 8 - 4;
    memset(g_t, 0, sizeof g_t);
    for (int t = 0; t < T_COUNT; t++)
        g_t[t].es = esize_of(t, dt);
    int64_t nkv = kvb == 3 ? 1 : c->N;
    g_t[T_Q].present = g_t[T_K].present = g_t[T_V].present = 1;
    g_t[T_OUT].present = 1;
    g_t[T_W].present = fld(F_WEIGHTS) % 2 == 1;
    g_t[T_LSE].present = fld(F_LSE) % 2 == 1;
    g_t[T_MASK].present = fld(F_MASK) % 3 == 1;
    g_t[T_BIAS].present = fld(F_BIAS) % 3 == 1;
    g_t[T_LG].present = lg_present;
    g_t[T_MW].present = fld(F_MAXW) % 2 == 1;
    g_t[T_EN].present = fld(F_ENTROPY) % 2 == 1;
    fz_set_layout(&g_t[T_Q].t, c->N, c->Hq, c->Tq, c->Dk, lay & 1, pads[T_Q]);
    fz_set_layout(&g_t[T_K].t, nkv, c->Hkv, c->Tk, c->Dk, lay & 2, pads[T_K]);
    fz_set_layout(&g_t[T_V].t, nkv, c->Hkv, c->Tk, c->Dv, lay & 2, pads[T_V]);
    if (kvb == 2) { /* broadcast over N by stride 0 */
        g_t[T_K].t.stride[0] = 0;
        g_t[T_V].t.stride[0] = 0;
    }
    fz_set_layout(&g_t[T_OUT].t, c->N, c->Hq, c->Tq, c->Dv, lay & 4,
                  pads[T_OUT]);
    fz_set_layout(&g_t[T_W].t, c->N, c->Hq, c->Tq, c->Tk, lay & 8, pads[T_W]);
    fz_set_layout(&g_t[T_LSE].t, c->N, c->Hq, c->Tq, 1, lay & 32, pads[T_LSE]);
    if (lay & 16)
        g_t[T_LSE].t.stride[3] = (int64_t)(lay >> 6) - 2; /* ignored */
    fz_set_layout(&g_t[T_LG].t, c->N, c->Hq, c->Tq, c->Tk, lay2 & 1,
                  pads[T_LG]);
    fz_set_layout(&g_t[T_MW].t, c->N, c->Hq, c->Tq, 1, lay2 & 2, pads[T_MW]);
    fz_set_layout(&g_t[T_EN].t, c->N, c->Hq, c->Tq, 1, lay2 & 4, pads[T_EN]);
    if (lay2 & 8) { /* ignored */
        g_t[T_MW].t.stride[3] = -(int64_t)(lay2 >> 4);
        g_t[T_EN].t.stride[3] = 7;
    }
    /* mask and bias: per dimension full, extent 1, stride 0, or gaps */
    const int64_t full[4] = {c->N, c->Hq, c->Tq, c->Tk};
    for (int t = T_MASK, gaps = 1; t <= T_BIAS; gaps = 1, t++) {
    again:;
        unsigned modes = fld(t == T_MASK ? F_MASK_B : F_BIAS_B);
        int64_t run = 1;
        for (int d = 3; d >= 0; d--) {
            unsigned m = (modes >> (2 * d)) & 3;
            if (m == 3 && !gaps)
                m = 0;
            sdpa_tensor *x = &g_t[t].t;
            if (m == 1) {
                x->shape[d] = 1;
                x->stride[d] = d == 3 ? (int64_t)(modes >> 7) * 5 : run;
            } else if (m == 2) {
                x->shape[d] = full[d];
                x->stride[d] = 0;
            } else {
                x->shape[d] = full[d];
                x->stride[d] =
                    run * (m == 3 ? 2 + (int64_t)((modes >> 6) & 1) : 1);
                run = x->stride[d] * full[d];
            }
        }
        if (gaps && fz_small_span(&g_t[t].t) == 0) { /* too large: no gaps */
            gaps = 0;
            goto again;
        }
    }

    /* one deliberate argument error (or a legal oddity) */
    unsigned bad_kind = fld(F_BAD_KIND) % 16;
    int bt = (int)(fld(F_BAD_TENSOR) % T_COUNT);
    int bd = (int)(fld(F_BAD_DIM) % 4);
    unsigned bvv = fld(F_BAD_VAL);
    if (bad_kind >= 10 && bad_kind <= 13 && !g_t[bt].present)
        bt = T_OUT;
    int null_ctx = 0, null_args = 0, null_tensor = -1, alias = -1;
    size_t fallback[T_COUNT] = {0};
    /* the tensors the library sees (the 1.1 outputs an older struct_size
     * hides are not: their errors do not count) */
    int *seen_t = c->seen_t;
    for (int t = 0; t < T_COUNT; t++)
        seen_t[t] = g_t[t].present;
    seen_t[T_LG] = lg_seen;
    seen_t[T_MW] = mw_seen;
    seen_t[T_EN] = en_seen;
    switch (bad_kind) {
    case 10: /* a negative stride (stride[3] of a row vector is ignored) */
        if (tinfo[bt].row_vec && bd == 3)
            bd = 2;
        g_t[bt].t.stride[bd] = -1 - (int64_t)(bvv % 4);
        if (seen_t[bt])
            errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        break;
    case 11: /* a zero stride */
        g_t[bt].t.stride[bd] = 0;
        break;
    case 12: /* any small stride */
        g_t[bt].t.stride[bd] = (int64_t)(bvv % 48);
        break;
    case 13: { /* a shape that disagrees */
        int64_t was = g_t[bt].t.shape[bd];
        fallback[bt] = fz_small_span(&g_t[bt].t);
        const int64_t vals[10] = {0,
                                  -1,
                                  -(INT64_C(1) << 40),
                                  INT64_MIN,
                                  was + 1,
                                  was + 2,
                                  2 * was + 1,
                                  INT64_C(1) << 31,
                                  INT64_C(1) << 40,
                                  INT64_MAX};
        int64_t nv = vals[bvv % 10];
        /* the extent the header wants here (and 1 where it broadcasts) */
        const int64_t want[T_COUNT][4] = {
            {c->N, c->Hq, c->Tq, c->Dk},  {c->N, c->Hkv, c->Tk, c->Dk},
            {c->N, c->Hkv, c->Tk, c->Dv}, {c->N, c->Hq, c->Tq, c->Tk},
            {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, c->Dv},
            {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, 1},
            {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, 1},
            {c->N, c->Hq, c->Tq, 1}};
        int bcast = bt == T_MASK || bt == T_BIAS ||
                    ((bt == T_K || bt == T_V) && bd == 0);
        if (nv == want[bt][bd] || (bcast && nv == 1))
            nv = want[bt][bd] + 3;
        g_t[bt].t.shape[bd] = nv;
        if (seen_t[bt]) {
            errs |= FZ_BIT(SDPA_ERR_BAD_DIM) | FZ_BIT(SDPA_ERR_SHAPE_MISMATCH) |
                    FZ_BIT(SDPA_ERR_HEAD_GROUPING) |
                    FZ_BIT(SDPA_ERR_BAD_STRIDE) | FZ_BIT(SDPA_ERR_OVERLAP) |
                    FZ_BIT(SDPA_ERR_OVERFLOW);
            if (c->use_kvlens)
                errs |= FZ_BIT(SDPA_ERR_BAD_KV_LEN);
            /* Hq or Tq moved: the per-head arrays' length or the window's
             * rows with it */
            if (c->slopes || c->sinks)
                errs |= FZ_BIT(SDPA_ERR_BAD_ALIBI) | FZ_BIT(SDPA_ERR_BAD_SINK);
        }
        break;
    }
    case 14: /* a NULL pointer */
        if (bvv % 8 == 7) {
            null_args = 1;
        } else if (bvv % 8 == 6) {
            null_ctx = 1;
        } else {
            static const int req[4] = {T_Q, T_K, T_V, T_OUT};
            null_tensor = req[bt % 4];
        }
        errs |= FZ_BIT(SDPA_ERR_NULL_POINTER);
        break;
    case 15: /* an output overlapping another argument */
        alias = bt;
        errs |= FZ_BIT(SDPA_ERR_OVERLAP);
        break;
    default:
        break;
    }

    /* stride rules of the header, for every tensor the library sees */
    for (int t = 0; t < T_COUNT; t++) {
        const sdpa_tensor *x = &g_t[t].t;
        if (!seen_t[t] || (bad_kind == 13 && t == bt))
            continue;
        for (int d = 0; d < 4; d++)
            if (x->stride[d] < 0 && !(tinfo[t].row_vec && d == 3))
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        if (tinfo[t].inner1 && x->stride[3] != 1) {
            if (x->shape[3] > 1)
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            else
                amb |= FZ_BIT(SDPA_ERR_BAD_STRIDE); /* extent 1: moot */
        }
        if (tinfo[t].blas_rows) {
            if (x->shape[2] > 1 && x->stride[2] < x->shape[3])
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            else if (x->shape[2] == 1 && x->stride[2] < x->shape[3])
                amb |= FZ_BIT(SDPA_ERR_BAD_STRIDE); /* one row: moot */
        }
    }

    /* buffers */
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present) {
            int inj = fz_tens_alloc(&g_t[t], tinfo[t].name, tinfo[t].output,
                                    fallback[t]);
            if (!tinfo[t].output || (bad_kind == 13 && t == bt))
                continue;
            if (!seen_t[t]) { /* hidden by struct_size: never written */
                memset(g_t[t].b->map, 0, g_t[t].b->bytes);
                continue;
            }
            if (inj == 0 || !fz_sorted_rule(&g_t[t].t, tinfo[t].row_vec))
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
            if (inj < 0) /* a negative stride: already an error */
                CHECK(errs & FZ_BIT(SDPA_ERR_BAD_STRIDE), "harness: map");
        }

    /* values */
    int args_valid = errs == 0;
    double se = c->scale != 0 && isfinite(c->scale) && c->scale > 0
                    ? c->scale
                    : 1.0 / sqrt((double)c->Dk);
    if (se < 1e-6)
        se = 1e-6;
    if (se > 1e6)
        se = 1e6;
    double target = 0.5 + 20.0 * (double)fld(F_AMP) / 255.0;
    double amp = sqrt(target / (se * (double)c->Dk));
    int pad_finite = fld(F_KVPAD) % 4 == 3;
    if (args_valid) {
        fz_tens *Q = &g_t[T_Q], *K = &g_t[T_K], *V = &g_t[T_V];
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t h = 0; h < c->Hq; h++)
                for (int64_t i = 0; i < c->Tq; i++)
                    for (int64_t d = 0; d < c->Dk; d++)
                        fz_set(Q, fz_off4(&Q->t, b, h, i, d), fz_sym(amp));
        /* K/V rows past kv_lens[b] stay NaN (unless pad_finite), rows
         * below it get values: first the poison, then the values, so a
         * row shared between batch items gets values */
        for (int pass = 0; pass < 2; pass++)
            for (int64_t b = 0; b < c->N; b++) {
                int64_t bk = K->t.shape[0] == 1 ? 0 : b;
                int64_t L = c->kv_lens[b];
                for (int64_t h = 0; h < c->Hkv; h++)
                    for (int64_t j = 0; j < c->Tk; j++) {
                        int val = j < L || pad_finite;
                        if ((pass == 0) == val)
                            continue;
                        for (int64_t d = 0; d < c->Dk; d++)
                            fz_set(K, fz_off4(&K->t, bk, h, j, d),
                                   val ? fz_sym(amp) : NAN);
                        for (int64_t d = 0; d < c->Dv; d++)
                            fz_set(V, fz_off4(&V->t, bk, h, j, d),
                                   val ? fz_sym(1.0) : NAN);
                    }
            }
    }
    if (g_t[T_MASK].present) {
        static const double dens[8] = {0.05, 0.2, 0.5, 0.9, 0.0, 1.0, 0.1, 0.3};
        double p = dens[fld(F_MASK_DENS) % 8];
        fz_tens *M = &g_t[T_MASK];
        for (size_t i = 0; i < M->b->bytes; i++) {
            int forbid = fz_unit() < p;
            unsigned char nz = (unsigned char)(1 + fz_rnd() % 255);
            M->b->mem[i] = (unsigned char)(c->mask_allows ? (forbid ? 0 : nz)
                                                          : (forbid ? nz : 0));
        }
    }
    if (g_t[T_BIAS].present) {
        static const double ninf[4] = {0.0, 0.15, 0.5, 1.0};
        static const double bamp[4] = {1.5, 0.0, 10.0, 100.0};
        double p = ninf[fld(F_BIAS_NINF) % 4];
        double ba = bamp[(fld(F_BIAS_NINF) >> 2) % 4];
        fz_tens *B = &g_t[T_BIAS];
        size_t n = B->b->bytes / B->es;
        for (size_t i = 0; i < n; i++)
            fz_set(B, (int64_t)i, fz_unit() < p ? -INFINITY : fz_sym(ba));
    }
    /* special values at chosen elements */
    static const double sp[10] = {NAN,  INFINITY, -INFINITY, 1e30,  -1e30,
                                  3e38, 1e-40,    -0.0,      1e300, 65504};
    for (int s = 0; s < 3; s++) {
        unsigned tv = fld(F_SP0_T + 3 * s) % 8;
        if (tv < 4 || errs)
            continue;
        static const int tt[4] = {T_Q, T_K, T_V, T_BIAS};
        fz_tens *x = &g_t[tt[tv - 4]];
        if (!x->present)
            continue;
        int64_t cnt =
            x->t.shape[0] * x->t.shape[1] * x->t.shape[2] * x->t.shape[3];
        int64_t idx =
            (int64_t)((fld(F_SP0_POS + 3 * s) * 7919u) % (uint64_t)cnt);
        int64_t co[4];
        for (int d = 3; d >= 0; d--) {
            co[d] = idx % x->t.shape[d];
            idx /= x->t.shape[d];
        }
        fz_set(x, fz_off4(&x->t, co[0], co[1], co[2], co[3]),
               sp[fld(F_SP0_KIND + 3 * s) % 10]);
    }

    /* the call's arguments */
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dt.dtype;
    a.causal = c->causal;
    a.flags = c->flags;
    a.scale = c->scale;
    a.softcap = c->softcap;
    a.kv_lens = kvlens_ptr;
    a.q = g_t[T_Q].t;
    a.k = g_t[T_K].t;
    a.v = g_t[T_V].t;
    sdpa_tensor *slot[T_COUNT] = {&a.q,      &a.k,          &a.v,       &a.mask,
                                  &a.bias,   &a.out,        &a.weights, &a.lse,
                                  &a.logits, &a.max_weight, &a.entropy};
    for (int t = T_MASK; t < T_COUNT; t++)
        if (g_t[t].present)
            *slot[t] = g_t[t].t;
    a.window_left = wl;
    a.window_right = wr;
    a.alibi_slopes = slopes;
    a.sinks = sinks;
    a.logits_stage = stage;
    a.dropout_p = drop_p;
    a.dropout_seed = (uint64_t)fld(F_DROP_SEED) * 0x9E3779B97F4A7C15ull;
    a.dropout_offset = (uint64_t)(fld(F_DROP_SEED) >> 4) * 0x100000001ull;
    if (null_tensor >= 0)
        slot[null_tensor]->data = NULL;
    if (alias >= 0) {
        switch (alias) {
        case 0:
            a.out.data = a.q.data;
            break;
        case 1:
            a.out.data = a.k.data;
            break;
        case 2:
            a.out.data = a.v.data;
            break;
        case 3:
            if (a.weights.data)
                a.weights.data = a.out.data;
            else
                a.out.data = a.q.data;
            break;
        case 4:
            if (a.lse.data)
                a.lse.data = a.out.data;
            else
                a.out.data = a.k.data;
            break;
        case 5:
            if (a.lse.data && a.weights.data)
                a.lse.data = a.weights.data;
            else
                a.out.data = a.v.data;
            break;
        case 6:
            if (a.mask.data)
                a.mask.data = a.out.data;
            else if (a.bias.data)
                a.bias.data = a.out.data;
            else
                a.out.data = a.q.data;
            break;
        case T_LG:
            if (lg_seen)
                a.logits.data = a.weights.data ? a.weights.data : a.out.data;
            else
                a.out.data = a.v.data;
            break;
        case T_MW:
            if (mw_seen)
                a.max_weight.data = a.lse.data ? a.lse.data : a.out.data;
            else
                a.out.data = a.q.data;
            break;
        case T_EN:
            if (en_seen)
                a.entropy.data = a.max_weight.data && mw_seen
                                     ? a.max_weight.data
                                     : a.out.data;
            else
                a.out.data = a.k.data;
            break;
        default:
            if (a.kv_lens && g_t[T_OUT].b->bytes >= (size_t)c->N * 8) {
                a.kv_lens = (const int64_t *)(void *)g_t[T_OUT].b->mem;
                errs |= FZ_BIT(SDPA_ERR_BAD_KV_LEN); /* reads the sentinel */
            } else {
                a.out.data = a.q.data;
            }
            break;
        }
    }
    union {
        sdpa_forward_args a;
        unsigned char bytes[sizeof(sdpa_forward_args) + 64];
    } box;
    size_t seen2;
    errs |= fz_pack_struct(fld(F_STRUCT), &a, sizeof a, ARGS_SIZE_V1, g_cuts,
                           sizeof g_cuts / sizeof g_cuts[0], box.bytes,
                           sizeof box.bytes, &seen2);

    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, F_OPT0_ID);
    describe("");

    /* the reference and what the inputs can do (valid arguments only) */
    ref_result ref;
    memset(&ref, 0, sizeof ref);
    analysis an;
    memset(&an, 0, sizeof an);
    int have_ref = errs == 0 && c->dt.valid;
    fz_sset expect = errs;
    if (c->dt.pending) /* half types: any documented status here; their
                          values are checked by fuzz_storage */
        expect = FZ_ALL_DOCUMENTED;
    test_tol tol;
    memset(&tol, 0, sizeof tol);
    if (have_ref) {
        /* the library's view: the 1.1 fields it cannot see are 0 */
        sdpa_forward_args ra = box.a;
        memset((unsigned char *)&ra + seen2, 0, sizeof ra - seen2);
        ra.k = norm_kv(&ra.k);
        ra.v = norm_kv(&ra.v);
        CHECK(ref_forward(&ra, &ref) == 0, "reference out of memory");
        /* the harness's own rule evaluation agrees with the reference's */
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t h = 0; h < c->Hq; h++)
                for (int64_t i = 0; i < c->Tq; i++)
                    for (int64_t j = 0; j < c->Tk; j++) {
                        size_t k =
                            (size_t)(((b * c->Hq + h) * c->Tq + i) * c->Tk + j);
                        CHECK((forbid_reasons(b, h, i, j) == 0) ==
                                  (ref.allowed[k] != 0),
                              "harness and reference disagree on key %lld",
                              (long long)j);
                    }
        analyse(ref.allowed, &an);
        const double big = f32 ? 1e37 : 1e300;
        if (an.bound_all + (double)ref.alibi_absmax > big)
            an.overflow = 1;
        char extra[220];
        snprintf(extra, sizeof extra,
                 "an{nf_possible=%d nf_certain=%d overflow=%d v_allowed=%d "
                 "v_partial=%d v_never=%d k_never=%d bias_forbidden=%d "
                 "q_empty=%d bound=%g alibi=%Lg}",
                 an.nf_possible, an.nf_certain, an.overflow, an.v_allowed_nf,
                 an.v_partial_nf, an.v_never_nf, an.k_never_nf,
                 an.bias_forbidden_nf, an.q_empty_nf, an.bound_all,
                 ref.alibi_absmax);
        describe(extra);
        if (fz_verbose > 1)
            for (int t = T_Q; t <= T_BIAS; t++) {
                if (!g_t[t].present)
                    continue;
                fprintf(stderr, "  %s:", tinfo[t].name);
                for (size_t i = 0; i < g_t[t].b->bytes / g_t[t].es && i < 64;
                     i++)
                    fprintf(stderr, " %g", fz_get(&g_t[t], (int64_t)i));
                fprintf(stderr, "\n");
            }
        int empty_error = ref.any_empty && !fz_opt.empty_zero;
        int unsupported =
            (g_t[T_W].present || lg_seen) && fz_path_streams(fz_opt.path);
        if (empty_error)
            expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
        if (unsupported)
            expect |= FZ_BIT(SDPA_ERR_UNSUPPORTED);
        if (!empty_error && !unsupported) {
            int nf_ok = an.nf_possible || an.overflow;
            /* a non-finite V row that is read, or V values whose
             * unnormalised sums can overflow: SDPA_ERR_NONFINITE, never a
             * silent inf or NaN (the header) */
            if (an.v_allowed_nf || an.v_partial_nf)
                nf_ok = 1;
            if ((double)ref.v_absmax * (double)c->Tk >
                (f32 ? FLT_MAX : DBL_MAX) / 2)
                nf_ok = 1;
            if (!an.nf_certain)
                expect |= FZ_BIT(SDPA_OK);
            if (nf_ok || an.nf_certain)
                expect |= FZ_BIT(SDPA_ERR_NONFINITE);
        }
        tol = tp_forward_tol(f32 ? FLT_EPSILON : DBL_EPSILON, &ref, c->Tk,
                             c->Dk, c->softcap, c->sinks != NULL, 0, 0);
        if (ra.dropout_p > 0) {
            /* the kept weights and the output grow by c = 1/(1 - p) */
            const double cd = (double)ref_dropout_scale(dt, ra.dropout_p);
            tol.out *= cd * (1 + 4 * (f32 ? FLT_EPSILON : DBL_EPSILON));
            tol.w = tol.w * cd + 4 * (f32 ? FLT_EPSILON : DBL_EPSILON) * cd;
        }
    }
    expect |= amb;
    unsigned oomv = fld(F_OOM);
    int oom = oomv % 16 == 15;
    if (oom) {
        fz_as.fail_at = fz_as.allocs + (long)((oomv >> 4) % 4);
        if (expect & (FZ_BIT(SDPA_OK) | FZ_BIT(SDPA_ERR_NONFINITE)))
            expect |= FZ_BIT(SDPA_ERR_OUT_OF_MEMORY);
    }

    sdpa_ctx *call_ctx = null_ctx ? NULL : ctx;
    const sdpa_forward_args *call_args = null_args ? NULL : &box.a;

    /* 1. the workspace query */
    fz_snapshot();
    long allocs0 = fz_alloc_count();
    size_t ws_bytes = 0;
    int ws = sdpa_forward_workspace(call_ctx, call_args, &ws_bytes);
    CHECK(fz_documented(ws), "workspace status %d", ws);
    CHECK(fz_alloc_count() == allocs0, "sdpa_forward_workspace allocated");
    CHECK(ws != SDPA_ERR_NONFINITE && ws != SDPA_ERR_OUT_OF_MEMORY,
          "workspace status %d", ws);
    fz_check_bufs(1, 0, "workspace");
    if (!null_ctx) {
        const char *m = sdpa_ctx_last_error(ctx);
        CHECK((ws == SDPA_OK) == (m[0] == '\0'),
              "workspace status %d, message \"%s\"", ws, m);
    }

    /* 2. the call */
    int st = sdpa_forward(call_ctx, call_args);
    fz_check_status("sdpa_forward", st, expect, null_ctx ? NULL : ctx);
    /* the workspace query refused exactly what sdpa_forward refused */
    if (st == SDPA_OK || st == SDPA_ERR_NONFINITE ||
        st == SDPA_ERR_OUT_OF_MEMORY)
        CHECK(ws == SDPA_OK, "forward %d but workspace %d", st, ws);
    else
        CHECK(ws == st, "forward status %d, workspace status %d", st, ws);

    if (st != SDPA_OK && st != SDPA_ERR_NONFINITE)
        fz_check_bufs(1, 0, "failed call");
    else if (c->dt.valid)
        fz_check_bufs(0, st == SDPA_OK, "call");
    if (st == SDPA_OK && have_ref) {
        const double vals_max = 1e3;
        int check_vals =
            !an.nf_possible && !an.overflow &&
            an.bound_all + (double)ref.alibi_absmax + (double)ref.sink_absmax <=
                vals_max &&
            c->softcap <= vals_max && (double)ref.logit_absmax <= vals_max;
        /* rule 5: a non-finite V row that some row may see can turn the
         * outputs of the rows that do not see it to NaN (documented) */
        int check_out = !an.v_allowed_nf && !an.v_partial_nf;
        fz_att_views v = {c->seen_t[T_OUT] ? &g_t[T_OUT].t : NULL,
                          c->seen_t[T_W] ? &g_t[T_W].t : NULL,
                          c->seen_t[T_LSE] ? &g_t[T_LSE].t : NULL,
                          c->seen_t[T_LG] ? &g_t[T_LG].t : NULL,
                          c->seen_t[T_MW] ? &g_t[T_MW].t : NULL,
                          c->seen_t[T_EN] ? &g_t[T_EN].t : NULL,
                          fz_esize(dt),
                          c->stage,
                          c->sinks};
        fz_check_attention(&ref, &tol, &v, check_vals, check_out);
    }
    if (!null_ctx && (st == SDPA_OK || st == SDPA_ERR_NONFINITE)) {
        /* 3. the workspace again: the scratch it reported is now held */
        size_t again = 0;
        long a0 = fz_alloc_count();
        CHECK(sdpa_forward_workspace(ctx, call_args, &again) == SDPA_OK,
              "workspace after a successful call");
        CHECK(fz_alloc_count() == a0, "workspace allocated");
        CHECK(again == ws_bytes,
              "workspace said %zu bytes before the call, %zu after", ws_bytes,
              again);
    }

    /* 4. a second call: other thread count (bitwise equal results), or the
     * same call (allocates nothing) */
    if (!null_ctx && !null_args && !oom)
        fz_second_call(ctx, fld(F_SECOND), st, call_forward, &box.a, "outputs");
    if (have_ref)
        ref_free(&ref);
    fz_ctx_end(ctx);
}

/* ------------------------------------------------------------------------ */
/* Seeds.                                                                    */
/* ------------------------------------------------------------------------ */
/* Field values (see the decoders above): F_TQ/F_TK/F_DK/F_DV v -> 1 + v % 8
 * (12 for Tk) below 224; F_MASK/F_BIAS/F_KVLENS 1 = present; F_WEIGHTS /
 * F_LSE / F_MAXW / F_ENTROPY 1 = present; F_CAUSAL 3 = top-left, 5 =
 * bottom-right; option ids 1..7 = SDPA_OPT_*; F_BAD_KIND 10..15 = argument
 * errors; F_WINDOW 4 = SDPA_FLAG_WINDOW (F_WIN_L/R index {-1, 0, 1, 2, 3,
 * 5, 8, -1, INT64_MAX, 100, -2, INT64_MIN}); F_ALIBI 5 = standard slopes,
 * 6 random; F_SINKS 5 = sinks in [-3, 3]; F_LOGITS 4..6 = stages 1..3. */
static const fz_seed seeds[] = {
    {"materialised_weights_lse",
     {FZ_DIMS(5, 9, 3, 4), {F_WEIGHTS, 1}, {F_LSE, 1}, {F_SEED0, 7}, {-1, 0}}},
    {"tiled_forced_blocks",
     {FZ_DIMS(229, 235, 5, 6),
      FZ_OPTION(F_OPT0_ID, 4, 2),
      FZ_OPTION(F_OPT1_ID, 7, 3),
      FZ_OPTION(F_OPT2_ID, 6, 4),
      {F_SEED0 + 1, 3},
      {-1, 0}}},
    {"decode_gqa_chunks",
     {{F_N, 1},
      {F_HKV, 1},
      {F_GROUP, 3},
      {F_TQ, 0},
      {F_TK, 239},
      {F_DK, 7},
      FZ_OPTION(F_OPT0_ID, 4, 3),
      FZ_OPTION(F_OPT1_ID, 7, 6),
      {F_LSE, 1},
      {-1, 0}}},
    {"mask_broadcast_keys",
     {{F_MASK, 1},
      {F_MASK_B, (1 << 0) | (2 << 2) | (2 << 6)},
      {F_MASK_DENS, 1},
      {F_TQ, 6},
      {F_TK, 10},
      {F_DK, 2},
      {F_WEIGHTS, 1},
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {-1, 0}}},
    {"mask_allows_gaps_bias_ninf",
     {{F_MASK, 1 | 0x40},
      {F_MASK_B, (3 << 6)},
      {F_MASK_DENS, 0},
      {F_BIAS, 1},
      {F_BIAS_B, (2 << 0) | (1 << 4)},
      {F_BIAS_NINF, 1},
      {F_TK, 7},
      {F_LSE, 1},
      {-1, 0}}},
    {"causal_top_left_kvlens",
     {{F_N, 2},
      {F_CAUSAL, 3},
      {F_KVLENS, 1},
      {F_KV0, 0},
      {F_KV1, 1},
      {F_KV2, 2 | (5 << 3)},
      FZ_DIMS(4, 8, 3, 2),
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {F_WEIGHTS, 1},
      {-1, 0}}},
    {"causal_bottom_right_bthd_pad",
     {{F_CAUSAL, 5},
      {F_LAYOUT, 1 | 2 | 4},
      {F_PAD_Q, 6},
      {F_PAD_KV, 7},
      {F_PAD_OUT, 5},
      {F_TQ, 3},
      {F_TK, 11},
      {F_DK, 5},
      {F_DTYPE, 9},
      {-1, 0}}},
    {"kv_broadcast_softcap_threads",
     {{F_N, 2},
      {F_KV_BCAST, 2},
      {F_SOFTCAP, 9},
      {F_SCALE, 6},
      {F_SCALE_FRAC, 100},
      FZ_OPTION(F_OPT0_ID, 2, 2),
      {F_SECOND, 1},
      {F_TQ, 20},
      {F_DK, 4},
      {F_DV, 3},
      {-1, 0}}},
    {"kvlens_nan_padding_f64",
     {{F_DTYPE, 10},
      {F_N, 2},
      {F_KVLENS, 1},
      {F_KV0, 3 | (2 << 3)},
      {F_KV1, 7},
      {F_KV2, 0},
      {F_TK, 9},
      {F_DK, 6},
      {F_WEIGHTS, 1},
      {F_LSE, 1},
      {-1, 0}}},
    {"bias_key_extent1",
     {{F_BIAS, 1},
      {F_BIAS_B, (1 << 6)},
      {F_BIAS_NINF, 2 | (2 << 2)},
      {F_TK, 10},
      {F_TQ, 7},
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {F_LSE, 1},
      {-1, 0}}},
    {"empty_row_error", {{F_MASK, 1}, {F_MASK_DENS, 5}, {-1, 0}}},
    {"empty_row_zero",
     {{F_MASK, 1},
      {F_MASK_DENS, 3},
      FZ_OPTION(F_OPT0_ID, 1, 1),
      {F_WEIGHTS, 1},
      {F_LSE, 1},
      {-1, 0}}},
    {"nan_in_q", {{F_SP0_T, 4}, {F_SP0_KIND, 0}, {-1, 0}}},
    {"inf_bias",
     {{F_BIAS, 1}, {F_SP0_T, 7}, {F_SP0_KIND, 1}, {F_SP0_POS, 3}, {-1, 0}}},
    {"bad_dtype", {{F_DTYPE, 15}, {F_DTYPE_RAW, 1}, {-1, 0}}},
    {"bad_scale_nan", {{F_SCALE, 12 | (1 << 4)}, {-1, 0}}},
    {"bad_softcap_negative", {{F_SOFTCAP, 12 | (5 << 4)}, {-1, 0}}},
    {"bad_causal_flags", {{F_CAUSAL, 7}, {F_FLAGS, 7}, {-1, 0}}},
    {"bad_kvlen", {{F_KVLENS, 1}, {F_KV0, 6 | (1 << 3)}, {-1, 0}}},
    {"negative_stride",
     {{F_BAD_KIND, 10}, {F_BAD_TENSOR, 1}, {F_BAD_DIM, 2}, {-1, 0}}},
    {"output_overlaps_itself",
     {{F_BAD_KIND, 11}, {F_BAD_TENSOR, 5}, {F_BAD_DIM, 2}, {F_TQ, 3}, {-1, 0}}},
    {"shape_mismatch",
     {{F_BAD_KIND, 13},
      {F_BAD_TENSOR, 2},
      {F_BAD_DIM, 1},
      {F_BAD_VAL, 4},
      {-1, 0}}},
    {"output_aliases_input", {{F_BAD_KIND, 15}, {F_BAD_TENSOR, 0}, {-1, 0}}},
    {"struct_tail_and_options",
     {{F_STRUCT, 30},
      FZ_OPTION(F_OPT0_ID, 8, 1),
      FZ_OPTION(F_OPT1_ID, 2, 6),
      FZ_OPTION(F_OPT2_ID, 3, 7),
      {-1, 0}}},
    {"forced_path_with_weights",
     {{F_WEIGHTS, 1}, FZ_OPTION(F_OPT0_ID, 4, 2), {-1, 0}}},
    {"oom_injection", {{F_OOM, 15}, {F_TQ, 9}, {-1, 0}}},
    {"huge_tk_workspace",
     {{F_MODE, 7},
      {F_HUGE_WHAT, 3 << 1},
      {F_HUGE_VAL, 4},
      {F_HUGE_PTRS, 2},
      {-1, 0}}},
    {"huge_n_int64max",
     {{F_MODE, 7}, {F_HUGE_WHAT, 0}, {F_HUGE_VAL, 6}, {F_KVLENS, 1}, {-1, 0}}},
    {"huge_dk_2p31_mismatch",
     {{F_MODE, 7},
      {F_HUGE_WHAT, 4 << 1},
      {F_HUGE_VAL, 2 | (1 << 3)},
      {F_BAD_TENSOR, 5},
      {F_BAD_DIM, 3},
      {F_BAD_VAL, 5},
      {-1, 0}}},
    /* 1.1 fields */
    {"window_causal_diagnostics",
     {{F_WINDOW, 4},
      {F_WIN_L, 3},
      {F_WIN_R, 1},
      {F_CAUSAL, 5},
      {F_TQ, 6},
      {F_TK, 9},
      {F_MAXW, 1},
      {F_ENTROPY, 1},
      {F_WEIGHTS, 1},
      {F_LSE, 1},
      {-1, 0}}},
    {"alibi_standard_logits_masked",
     {{F_ALIBI, 5},
      {F_ALIBI_VAL, 8},
      {F_HKV, 1},
      {F_GROUP, 1},
      {F_TQ, 5},
      {F_TK, 7},
      {F_LOGITS, 6},
      {F_WEIGHTS, 1},
      {-1, 0}}},
    {"sinks_empty_rows_tiled",
     {{F_SINKS, 5},
      {F_MASK, 1},
      {F_MASK_DENS, 3},
      {F_LSE, 1},
      {F_MAXW, 1},
      {F_ENTROPY, 1},
      FZ_OPTION(F_OPT0_ID, 4, 2),
      {F_TK, 10},
      {-1, 0}}},
    {"logits_scaled_softcap_f64",
     {{F_LOGITS, 4},
      {F_SOFTCAP, 9},
      {F_DTYPE, 9},
      {F_WEIGHTS, 1},
      {F_LAYOUT2, 1},
      {F_PAD_LG, 6},
      {-1, 0}}},
    {"decode_alibi_sinks_diag",
     {{F_ALIBI, 6},
      {F_ALIBI_VAL, 3},
      {F_SINKS, 6},
      {F_TQ, 0},
      {F_TK, 237},
      FZ_OPTION(F_OPT0_ID, 4, 3),
      {F_MAXW, 1},
      {F_ENTROPY, 1},
      {F_LSE, 1},
      {-1, 0}}},
    {"older_struct_hides_logits",
     {{F_STRUCT, 24 | (3 << 5)}, {F_LOGITS, 5}, {F_MAXW, 1}, {-1, 0}}},
    {"bad_window_and_stage",
     {{F_WINDOW, 7}, {F_WIN_L, 2}, {F_LOGITS, 7}, {-1, 0}}},
    {"bad_alibi_nan", {{F_ALIBI, 7}, {F_ALIBI_VAL, 1}, {-1, 0}}},
    {"bad_sink_beyond_float", {{F_SINKS, 7}, {F_SINK_VAL, 6}, {-1, 0}}},
    {"half_dtype_pending",
     {{F_DTYPE, 14}, {F_WEIGHTS, 1}, {F_LSE, 1}, {-1, 0}}},
    {"huge_tq_window_diag",
     {{F_MODE, 7},
      {F_HUGE_WHAT, 2 << 1},
      {F_HUGE_VAL, 1},
      {F_WINDOW, 4},
      {F_WIN_L, 4},
      {F_MAXW, 1},
      {F_ENTROPY, 1},
      {F_SINKS, 5},
      {-1, 0}}},
    /* 1.2: dropout (F_DROPOUT 10..13 = 0.03, 0.1, 0.5, 0.9; 14 refused;
     * 15 = 1 - 1e-12, refused in float32) */
    {"dropout_weights_diagnostics",
     {FZ_DIMS(5, 9, 3, 4),
      {F_WEIGHTS, 1},
      {F_LSE, 1},
      {F_MAXW, 1},
      {F_ENTROPY, 1},
      {F_SINKS, 5},
      {F_DROPOUT, 12},
      {F_DROP_SEED, 42},
      {-1, 0}}},
    {"dropout_tiled_causal",
     {FZ_DIMS(229, 235, 5, 6),
      FZ_OPTION(F_OPT0_ID, 4, 2),
      FZ_OPTION(F_OPT1_ID, 7, 3),
      {F_CAUSAL, 5},
      {F_DROPOUT, 11},
      {F_DROP_SEED, 7},
      {-1, 0}}},
    {"dropout_refused", {{F_DROPOUT, 14 | 2 << 4}, {-1, 0}}},
    {"dropout_rounds_to_one", {{F_DROPOUT, 15}, {-1, 0}}},
};

static void reset(void)
{
    memset(&g_c, 0, sizeof g_c);
    memset(g_t, 0, sizeof g_t);
    g_c.huge = (fld(F_MODE) & 7) == 7;
}

FZ_TARGET("fuzz_forward", "FORWARD", "valid_default", F_SEED0, F_MODE, reset,
          run_small, run_huge);
