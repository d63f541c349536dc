/*
 * libFuzzer target for sdpa_forward and sdpa_forward_workspace.
 *
 * Every input is a fixed header of one-byte fields (enum field below; bytes
 * past the end of the input read as 0, so the empty input is a small valid
 * call). The fields choose: the mode (small shapes that are computed, or
 * huge shapes that are only validated and planned), dtype (also invalid
 * values), shapes, layouts and padded / zero / negative / overlapping
 * strides, optional mask / bias / weights / lse / kv_lens (mask and bias
 * broadcast over any dimension, keys included, with any non-negative key
 * stride), kv_lens in and out of range, bias values with -inf / +inf / NaN,
 * scale and soft-cap (0, NaN, +-inf, subnormal, negative, beyond float32's
 * range), flags, causal values, struct_size, up to four context options
 * (also invalid ids and values, forced paths and kernels, the empty-row
 * policy, 1..3 threads), one deliberate argument error, special values
 * (NaN, inf, huge, subnormal) at chosen elements, an allocator that fails,
 * and a second call (another thread count, or the same call again). Values
 * come from a splitmix64 stream seeded by the input.
 *
 * Checks (abort on the first violation, so libFuzzer reports it):
 *  - every status is a documented code, the one the arguments call for
 *    (an injected argument error gives one of the statuses it can cause; a
 *    valid call gives OK, FULLY_MASKED_ROW, UNSUPPORTED for a forced
 *    tiled/decode path with weights, NONFINITE only when a NaN/inf reaches
 *    an allowed logit or a logit can overflow, OUT_OF_MEMORY only when the
 *    allocator refused);
 *  - any status but OK / NONFINITE leaves every output byte untouched and
 *    sdpa_ctx_last_error() non-empty; OK leaves it "";
 *  - inputs are never written (byte snapshots);
 *  - on OK with finite inputs and moderate logits, out / weights / lse agree
 *    with the long-double reference (tests/reference.c) within the
 *    tolerance of tests/test_random.c (same formulas); forbidden weights are
 *    exactly 0, empty rows under SDPA_EMPTY_ROWS_ZERO are exactly 0 / -inf,
 *    and bytes outside the outputs' logical views (padding) are untouched;
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
 * Huge shapes (2^30 .. INT64_MAX) are never allocated: q/k/v/out/weights/lse
 * then point at distinct fake addresses that are never dereferenced (mask
 * and bias at a small real buffer with every stride 0, kv_lens at a real
 * array), only sdpa_forward_workspace runs, and sdpa_forward only when the
 * workspace call refused the arguments (it must refuse them the same way).
 *
 * Known open library issues (see tests/fuzz/README.md) are tolerated in the
 * branches marked FUZZ_TOLERATE_KNOWN_ISSUES, defined unless FUZZ_STRICT is.
 *
 * Seed corpus: FUZZ_FORWARD_WRITE_CORPUS=<dir> ./fuzz_forward writes the
 * hand-made seeds of make_seeds() to <dir> and exits.
 */
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reference.h"
#include "sdpa.h"

#if !defined(FUZZ_STRICT) && !defined(FUZZ_TOLERATE_KNOWN_ISSUES)
#define FUZZ_TOLERATE_KNOWN_ISSUES 1
#endif
/* Library bugs this fuzzer found (README.md, "Findings"), tolerated like the
 * known issues so that the rest can be fuzzed; each branch names its id. */
#if !defined(FUZZ_STRICT) && !defined(FUZZ_TOLERATE_FINDINGS)
#define FUZZ_TOLERATE_FINDINGS 1
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* ------------------------------------------------------------------------ */
/* Input fields: one byte each, in this order.                               */
/* ------------------------------------------------------------------------ */
enum field {
    F_MODE,
    F_DTYPE,
    F_DTYPE_RAW,
    F_N,
    F_HKV,
    F_GROUP,
    F_TQ,
    F_TK,
    F_DK,
    F_DV,
    F_LAYOUT,
    F_PAD_Q,
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
    F_OPT0_ID,
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
    F_SEED0,
    F_SEED1,
    F_SEED2,
    F_SEED3,
    F_SEED4,
    F_SEED5,
    F_SEED6,
    F_SEED7,
    F_COUNT
};

static uint8_t g_in[F_COUNT];
static unsigned fld(int f)
{
    return g_in[f];
}

/* ------------------------------------------------------------------------ */
/* Failure reporting.                                                        */
/* ------------------------------------------------------------------------ */
static char g_desc[1024]; /* the decoded configuration, printed on failure */
static int g_verbose;     /* FUZZ_FORWARD_VERBOSE=1: one line per input */

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "\nfuzz_forward: CHECK FAILED (line %d): %s\n  ",  \
                    __LINE__, #cond);                                          \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n  config: %s\n", g_desc);                       \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* ------------------------------------------------------------------------ */
/* PRNG: splitmix64.                                                         */
/* ------------------------------------------------------------------------ */
static uint64_t g_rng;
static uint64_t rnd(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
static double rnd_unit(void)
{
    return (double)(rnd() >> 11) * 0x1p-53;
}
static double rnd_sym(double a)
{
    return a * (2.0 * rnd_unit() - 1.0);
}

/* ------------------------------------------------------------------------ */
/* Counting allocator: a header before each block holds its size.            */
/* ------------------------------------------------------------------------ */
typedef struct alloc_stats {
    long allocs, frees, bad_align, bad_free, refused;
    long fail_at; /* refuse the allocation with this index; -1 = never */
    long live;
} alloc_stats;

static alloc_stats g_as;

static void *ca_alloc(void *opaque, size_t size, size_t alignment)
{
    alloc_stats *s = opaque;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
        alignment > 4096) {
        s->bad_align++;
        return NULL;
    }
    if (s->fail_at >= 0 && s->allocs + s->refused >= s->fail_at) {
        s->refused++;
        return NULL;
    }
    size_t al = alignment < 16 ? 16 : alignment;
    if (size > ((size_t)1 << 40))
        return NULL; /* never reached by this target: report as refused */
    size_t total = (size + al + al - 1) / al * al;
    unsigned char *base = aligned_alloc(al, total);
    if (!base)
        return NULL;
    memcpy(base + al - sizeof(size_t), &size, sizeof size);
    memcpy(base + al - 2 * sizeof(size_t), &al, sizeof al);
    s->allocs++;
    s->live++;
    return base + al;
}

static void ca_free(void *opaque, void *ptr, size_t size)
{
    alloc_stats *s = opaque;
    if (!ptr)
        return;
    unsigned char *p = ptr;
    size_t got, al;
    memcpy(&got, p - sizeof(size_t), sizeof got);
    memcpy(&al, p - 2 * sizeof(size_t), sizeof al);
    if (got != size)
        s->bad_free++;
    s->frees++;
    s->live--;
    free(p - al);
}

/* ------------------------------------------------------------------------ */
/* Tensors.                                                                  */
/* ------------------------------------------------------------------------ */
enum { T_Q, T_K, T_V, T_MASK, T_BIAS, T_OUT, T_W, T_LSE, T_COUNT };
static const char *const tname[T_COUNT] = {"q",    "k",   "v",       "mask",
                                           "bias", "out", "weights", "lse"};
static int is_output(int t)
{
    return t == T_OUT || t == T_W || t == T_LSE;
}
/* innermost stride must be 1 and rows are BLAS rows */
static int is_blas(int t)
{
    return t <= T_V || t == T_OUT || t == T_W;
}

typedef struct buf {
    unsigned char *mem; /* our allocation */
    size_t bytes;
    unsigned char *snap; /* copy taken before a call */
    unsigned char *map;  /* output: 1 per byte inside the logical view */
} buf;

typedef struct tens {
    int present;
    sdpa_tensor t;
    size_t es; /* element size */
    buf b;
} tens;

typedef struct cfg {
    int huge;
    int dtype_valid, dtype;
    int64_t N, Hq, Hkv, Tq, Tk, Dk, Dv;
    int causal, causal_valid;
    uint32_t flags;
    int flags_valid;
    double scale, softcap;
    int mask_allows; /* SDPA_FLAG_MASK_NONZERO_ALLOWS */
    int use_kvlens;
    int64_t kv_lens[64];
    /* options as the context holds them after the option slots */
    int64_t opt_path, opt_threads, opt_empty_zero, opt_kernel;
} cfg;

static tens g_t[T_COUNT];
static cfg g_c;
static int64_t *g_kvlens_ptr; /* what args.kv_lens points at */

/* Expected statuses: a bit set over 0..31. */
typedef uint32_t sset;
#define BIT(s) ((sset)1u << (s))

static size_t esize_of(int t, int dtype)
{
    if (t == T_MASK)
        return 1;
    return dtype == SDPA_FLOAT64 ? sizeof(double) : sizeof(float);
}

/* Offset of element (a, b, c, d) of a view, in elements. */
static int64_t off4(const sdpa_tensor *t, int64_t a, int64_t b, int64_t c,
                    int64_t d)
{
    return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] +
           d * t->stride[3];
}

/* Elements a view spans from data (negative strides counted by magnitude:
 * data then points at the buffer's start and a library that accepted the
 * view would read before it, which AddressSanitizer reports). 0 when the
 * span is not small. */
static size_t small_span(const sdpa_tensor *t)
{
    uint64_t span = 1;
    for (int d = 0; d < 4; d++) {
        if (t->shape[d] <= 0 || t->shape[d] > (1 << 20))
            return 0;
        if (t->shape[d] == 1)
            continue;
        uint64_t s = (uint64_t)(t->stride[d] < 0 ? -(t->stride[d] + 1) + 1
                                                 : t->stride[d]);
        if (s > (1u << 24))
            return 0;
        span += (uint64_t)(t->shape[d] - 1) * s;
        if (span > (1u << 24))
            return 0;
    }
    return (size_t)span;
}

static void set_layout(sdpa_tensor *t, int64_t n, int64_t h, int64_t tt,
                       int64_t d, int bthd, int64_t pad)
{
    t->shape[0] = n;
    t->shape[1] = h;
    t->shape[2] = tt;
    t->shape[3] = d;
    if (!bthd) {
        int64_t row = d + pad;
        t->stride[3] = 1;
        t->stride[2] = row;
        t->stride[1] = tt * row;
        t->stride[0] = h * tt * row;
    } else {
        int64_t row = h * d + pad;
        t->stride[3] = 1;
        t->stride[1] = d;
        t->stride[2] = row;
        t->stride[0] = tt * row;
    }
}

static double elem_get(const tens *x, int64_t off)
{
    if (x->es == 1)
        return (double)((const unsigned char *)x->t.data)[off];
    if (x->es == sizeof(float))
        return (double)((const float *)x->t.data)[off];
    return ((const double *)x->t.data)[off];
}

static void elem_set(tens *x, int64_t off, double v)
{
    if (x->es == 1)
        ((unsigned char *)x->t.data)[off] = (unsigned char)v;
    else if (x->es == sizeof(float)) /* beyond float: inf, not UB */
        ((float *)x->t.data)[off] = isfinite(v) && fabs(v) > FLT_MAX
                                        ? (float)copysign(INFINITY, v)
                                        : (float)v;
    else
        ((double *)x->t.data)[off] = v;
}

/* Allocate the buffer of a small view; `fill` NaN for float inputs. */
static void alloc_view(tens *x, int t, size_t fallback_span)
{
    size_t span = small_span(&x->t);
    if (span == 0)
        span = fallback_span ? fallback_span : 1;
    x->b.bytes = span * x->es;
    x->b.mem = malloc(x->b.bytes);
    if (!x->b.mem)
        abort();
    if (is_output(t)) {
        memset(x->b.mem, 0xA5, x->b.bytes);
    } else if (x->es == 1) {
        memset(x->b.mem, 0xEE, x->b.bytes);
    } else {
        for (size_t i = 0; i < span; i++)
            if (x->es == sizeof(float))
                ((float *)(void *)x->b.mem)[i] = NAN;
            else
                ((double *)(void *)x->b.mem)[i] = NAN;
    }
    x->t.data = x->b.mem;
}

static void free_all(void)
{
    for (int t = 0; t < T_COUNT; t++) {
        free(g_t[t].b.mem);
        free(g_t[t].b.snap);
        free(g_t[t].b.map);
    }
    memset(g_t, 0, sizeof g_t);
}

/* ------------------------------------------------------------------------ */
/* Decoding helpers.                                                         */
/* ------------------------------------------------------------------------ */
static const double special_reals[16] = {
    -0.0,    NAN,   INFINITY, -INFINITY, 1e-310, -1.0,    1e39,     DBL_MAX,
    FLT_MAX, 1e-45, 3.4e38,   1e-30,     1e30,   DBL_MIN, -DBL_MIN, 5e-324};

static double decode_scale(unsigned v, unsigned frac, int is_cap)
{
    unsigned m = v % 16;
    if (!is_cap) {
        if (m < 4)
            return 0.0;
        if (m < 6)
            return 1.0;
        if (m < 12)
            return 0.05 + 1.5 * (double)frac / 255.0;
    } else {
        if (m < 8)
            return 0.0;
        if (m < 9)
            return 1.0;
        if (m < 10)
            return 5.0;
        if (m < 11)
            return 30.0;
        if (m < 12)
            return 0.5 + 50.0 * (double)frac / 255.0;
    }
    return special_reals[(v >> 4) % 16];
}

static int64_t small_dim(unsigned v, int64_t lo_max, int64_t hi_max)
{
    return v < 224 ? 1 + (int64_t)(v % (unsigned)lo_max)
                   : 1 + (int64_t)(v % (unsigned)hi_max);
}

static int64_t opt_value(int id, unsigned v)
{
    static const int64_t scratch[10] = {
        0, 1, 64, 1024, 4096, 65536, 2 << 20, INT64_MAX, -1, INT64_MIN};
    static const int64_t blocks[16] = {
        0,  1,         2, 3,  4,  5, 8, 16, 64, 1 << 20, (1 << 20) + 1,
        -1, INT64_MAX, 7, 13, 100};
    unsigned m = v % 8, hi = v >> 3;
    switch (id) {
    case SDPA_OPT_EMPTY_ROWS: {
        static const int64_t bad[3] = {2, -1, INT64_MAX};
        return m < 4 ? (int64_t)(v & 1) : m < 7 ? 1 : bad[hi % 3];
    }
    case SDPA_OPT_NUM_THREADS: {
        static const int64_t bad[4] = {0, -1, 257, INT64_MIN};
        return m < 6    ? 1 + (int64_t)(v % 3)
               : m == 6 ? bad[hi % 4]
                        : 1 + (int64_t)(hi % 3);
    }
    case SDPA_OPT_KERNEL: {
        static const int64_t bad[4] = {4, -1, 1000, INT64_MAX};
        return m < 4 ? (int64_t)m : m < 7 ? (int64_t)(hi % 4) : bad[hi % 4];
    }
    case SDPA_OPT_PATH: {
        static const int64_t bad[3] = {4, -1, INT64_MIN};
        return m < 4 ? (int64_t)m : m < 7 ? 1 + (int64_t)(hi % 3) : bad[hi % 3];
    }
    case SDPA_OPT_SCRATCH_LIMIT:
        return scratch[v % 10];
    case SDPA_OPT_BLOCK_Q:
    case SDPA_OPT_BLOCK_K:
        return blocks[v % 16];
    default:
        return (int64_t)v - 128;
    }
}

static int opt_id(unsigned v)
{
    static const int ids[16] = {0,
                                1,
                                2,
                                3,
                                4,
                                5,
                                6,
                                7,
                                0,
                                8,
                                999,
                                1000,
                                -1,
                                INT_MAX,
                                SDPA_OPT_PATH,
                                SDPA_OPT_BLOCK_K};
    return ids[v % 16];
}

static int kernel_supported(int64_t k)
{
    __builtin_cpu_init();
    if (k == SDPA_KERNEL_AVX2)
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (k == SDPA_KERNEL_AVX512)
        return __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    return 1;
}

/* Apply the four option slots, checking set_int / get_int. */
static void apply_options(sdpa_ctx *ctx)
{
    for (int s = 0; s < 4; s++) {
        unsigned idb = fld(F_OPT0_ID + 2 * s), vb = fld(F_OPT0_VAL + 2 * s);
        if (idb == 0)
            continue;
        int id = opt_id(idb);
        int64_t value = opt_value(id, vb);
        int known = id >= 1 && id <= 7;
        int64_t before = 0;
        if (known)
            CHECK(sdpa_ctx_get_int(ctx, id, &before) == SDPA_OK, "get_int %d",
                  id);
        int st = sdpa_ctx_set_int(ctx, id, value);
        const char *msg = sdpa_ctx_last_error(ctx);
        CHECK(st >= 0 && st <= SDPA_ERR_UNSUPPORTED, "set_int status %d", st);
        if (!known) {
            CHECK(st == SDPA_ERR_UNKNOWN_OPTION,
                  "set_int(id %d) gave %d, not UNKNOWN_OPTION", id, st);
            int64_t dummy;
            CHECK(sdpa_ctx_get_int(ctx, id, &dummy) == SDPA_ERR_UNKNOWN_OPTION,
                  "get_int(id %d) accepted an unknown id", id);
        } else {
            int64_t lo = 0, hi = INT64_MAX;
            int hi_documented = 1;
            switch (id) {
            case SDPA_OPT_EMPTY_ROWS:
                hi = 1;
                break;
            case SDPA_OPT_NUM_THREADS:
                lo = 1;
                hi = 256;
                break;
            case SDPA_OPT_KERNEL:
                hi = 3;
                break;
            case SDPA_OPT_PATH:
                hi = SDPA_PATH_DECODE_BLAS;
                break;
            default:
                hi_documented = 0;
                break; /* 0 = auto, no stated max */
            }
            int in_range =
                (value >= lo && value <= hi) ||
                (id == SDPA_OPT_NUM_THREADS && value == SDPA_NUM_THREADS_ALL);
            if (!in_range)
                CHECK(st == SDPA_ERR_BAD_OPTION_VALUE,
                      "set_int(%d, %lld) gave %d, not BAD_OPTION_VALUE", id,
                      (long long)value, st);
            else if (id == SDPA_OPT_KERNEL && !kernel_supported(value))
                CHECK(st == SDPA_ERR_UNSUPPORTED,
                      "forcing kernel %lld the CPU lacks gave %d",
                      (long long)value, st);
            else if (hi_documented || value == 0)
                CHECK(st == SDPA_OK, "set_int(%d, %lld) gave %d: %s", id,
                      (long long)value, st, msg);
            else
                CHECK(st == SDPA_OK || st == SDPA_ERR_BAD_OPTION_VALUE,
                      "set_int(%d, %lld) gave %d", id, (long long)value, st);
            int64_t after = 0;
            CHECK(sdpa_ctx_get_int(ctx, id, &after) == SDPA_OK, "get_int");
            if (st != SDPA_OK) {
                CHECK(after == before,
                      "refused set_int(%d, %lld) changed the option %lld -> "
                      "%lld",
                      id, (long long)value, (long long)before,
                      (long long)after);
            } else if (id == SDPA_OPT_KERNEL && value == SDPA_KERNEL_AUTO) {
                CHECK(after >= 1 && kernel_supported(after),
                      "KERNEL AUTO resolves to %lld", (long long)after);
            } else {
                CHECK(after == value, "get_int(%d) = %lld after set %lld", id,
                      (long long)after, (long long)value);
            }
            if (st == SDPA_OK) {
                switch (id) {
                case SDPA_OPT_PATH:
                    g_c.opt_path = value;
                    break;
                case SDPA_OPT_NUM_THREADS:
                    g_c.opt_threads = value;
                    break;
                case SDPA_OPT_EMPTY_ROWS:
                    g_c.opt_empty_zero = value;
                    break;
                case SDPA_OPT_KERNEL:
                    g_c.opt_kernel = value;
                    break;
                default:
                    break;
                }
            }
        }
        if (st == SDPA_OK)
            CHECK(msg[0] == '\0', "message after a successful set_int: %s",
                  msg);
        else
            CHECK(msg[0] != '\0', "empty message after set_int status %d", st);
    }
}

/* ------------------------------------------------------------------------ */
/* The common part of the arguments: dtype, causal, flags, scale, softcap.    */
/* ------------------------------------------------------------------------ */
static sset decode_scalars(cfg *c)
{
    sset errs = 0;
    unsigned dv = fld(F_DTYPE) % 16;
    if (dv < 8) {
        c->dtype = SDPA_FLOAT32;
    } else if (dv < 15) {
        c->dtype = SDPA_FLOAT64;
    } else {
        /* 3 and 4 are the half types since 1.1: not bad dtypes */
        static const int bad[6] = {0, 5, -1, 255, INT_MAX, INT_MIN};
        c->dtype = bad[fld(F_DTYPE_RAW) % 6];
        errs |= BIT(SDPA_ERR_BAD_DTYPE);
    }
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
        errs |= BIT(SDPA_ERR_BAD_CAUSAL);
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
        errs |= BIT(SDPA_ERR_BAD_FLAGS);
    }
    c->scale = decode_scale(fld(F_SCALE), fld(F_SCALE_FRAC), 0);
    c->softcap = decode_scale(fld(F_SOFTCAP), fld(F_SOFTCAP_FRAC), 1);
    if (!(isfinite(c->scale) && c->scale >= 0))
        errs |= BIT(SDPA_ERR_BAD_SCALE);
    if (!(isfinite(c->softcap) && c->softcap >= 0))
        errs |= BIT(SDPA_ERR_BAD_SOFTCAP);
    /* float32 scale / soft-cap above FLT_MAX: SDPA_ERR_BAD_SCALE / _SOFTCAP
     * (the header; formerly a known issue: NONFINITE) */
    if (c->dtype == SDPA_FLOAT32 && isfinite(c->scale) && c->scale > FLT_MAX)
        errs |= BIT(SDPA_ERR_BAD_SCALE);
    if (c->dtype == SDPA_FLOAT32 && isfinite(c->softcap) &&
        c->softcap > FLT_MAX)
        errs |= BIT(SDPA_ERR_BAD_SOFTCAP);
    /* ... and positive values that round to 0 in float32 (finding F1,
     * fixed: the library refuses them) */
    if (c->dtype == SDPA_FLOAT32 && c->scale > 0 && (float)c->scale == 0.0f)
        errs |= BIT(SDPA_ERR_BAD_SCALE);
    if (c->dtype == SDPA_FLOAT32 && c->softcap > 0 && (float)c->softcap == 0.0f)
        errs |= BIT(SDPA_ERR_BAD_SOFTCAP);
    return errs;
}

/* struct_size games; returns the statuses they call for (0 = none). */
static sset pack_args(const sdpa_forward_args *a, unsigned char *box,
                      size_t box_size)
{
    memset(box, 0, box_size);
    memcpy(box, a, sizeof *a);
    size_t size = sizeof *a;
    sset errs = 0;
    switch (fld(F_STRUCT) % 32) {
    case 26:
        size = sizeof *a + 1;
        box[sizeof *a] = 0x80;
        errs = BIT(SDPA_ERR_STRUCT_TAIL);
        break;
    case 27:
        size = 0;
        errs = BIT(SDPA_ERR_STRUCT_SIZE);
        break;
    case 28:
        size = 623;
        errs = BIT(SDPA_ERR_STRUCT_SIZE);
        break;
    case 29:
        size = sizeof *a + 8;
        break; /* zero tail: fine */
    case 30:
        size = sizeof *a + 16;
        box[sizeof *a + 9] = 1;
        errs = BIT(SDPA_ERR_STRUCT_TAIL);
        break;
    case 31:
        size = 1;
        errs = BIT(SDPA_ERR_STRUCT_SIZE);
        break;
    case 25:
        size = 624;
        break; /* a 1.0 caller: fine */
    default:
        break;
    }
    memcpy(box, &size, sizeof size);
    return errs;
}

static void describe(const char *extra)
{
    const cfg *c = &g_c;
    int n = snprintf(
        g_desc, sizeof g_desc,
        "%s dtype=%d N=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld Dk=%lld "
        "Dv=%lld causal=%d flags=0x%x scale=%g softcap=%g kv_lens=%s",
        c->huge ? "HUGE" : "small", c->dtype, (long long)c->N, (long long)c->Hq,
        (long long)c->Hkv, (long long)c->Tq, (long long)c->Tk, (long long)c->Dk,
        (long long)c->Dv, c->causal, c->flags, c->scale, c->softcap,
        c->use_kvlens ? "[" : "none");
    if (c->use_kvlens)
        for (int64_t b = 0;
             b < c->N && b < 4 && n > 0 && (size_t)n < sizeof g_desc; b++)
            n += snprintf(g_desc + n, sizeof g_desc - (size_t)n, "%s%lld",
                          b ? "," : "", (long long)c->kv_lens[b]);
    if (n > 0 && (size_t)n < sizeof g_desc)
        n += snprintf(g_desc + n, sizeof g_desc - (size_t)n,
                      "%s path=%lld threads=%lld zero=%lld kernel=%lld %s",
                      c->use_kvlens ? "]" : "", (long long)c->opt_path,
                      (long long)c->opt_threads, (long long)c->opt_empty_zero,
                      (long long)c->opt_kernel, extra);
    for (int t = 0; t < T_COUNT && n > 0 && (size_t)n < sizeof g_desc; t++)
        if (g_t[t].present)
            n += snprintf(
                g_desc + n, sizeof g_desc - (size_t)n,
                " %s{%lld,%lld,%lld,%lld|%lld,%lld,%lld,%lld}", tname[t],
                (long long)g_t[t].t.shape[0], (long long)g_t[t].t.shape[1],
                (long long)g_t[t].t.shape[2], (long long)g_t[t].t.shape[3],
                (long long)g_t[t].t.stride[0], (long long)g_t[t].t.stride[1],
                (long long)g_t[t].t.stride[2], (long long)g_t[t].t.stride[3]);
}

static int documented(int st)
{
    return st >= 0 && st <= SDPA_ERR_UNSUPPORTED;
}

static sdpa_ctx *make_ctx(void)
{
    memset(&g_as, 0, sizeof g_as);
    g_as.fail_at = -1;
    sdpa_allocator al;
    memset(&al, 0, sizeof al);
    al.struct_size = sizeof al;
    al.alloc = ca_alloc;
    al.free = ca_free;
    al.opaque = &g_as;
    sdpa_ctx *ctx = NULL;
    int st = sdpa_ctx_create_with_allocator(&ctx, &al);
    CHECK(st == SDPA_OK && ctx, "ctx create: %d", st);
    CHECK(sdpa_ctx_last_error(ctx)[0] == '\0', "fresh context has a message");
    g_c.opt_threads = 1;
    g_c.opt_path = 0;
    g_c.opt_empty_zero = 0;
    g_c.opt_kernel = 0;
    return ctx;
}

static void end_ctx(sdpa_ctx *ctx)
{
    sdpa_ctx_destroy(ctx);
    CHECK(g_as.live == 0, "%ld allocations leaked by the context", g_as.live);
    CHECK(g_as.bad_free == 0, "free with a wrong size");
    CHECK(g_as.bad_align == 0, "bad alignment requested");
}

/* ------------------------------------------------------------------------ */
/* Huge shapes: validation and plan only.                                    */
/* ------------------------------------------------------------------------ */
static int64_t sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0)
        return 0;
    if (__builtin_mul_overflow(a, b, &r))
        return INT64_MAX;
    return r;
}

#ifdef FUZZ_TOLERATE_KNOWN_ISSUES
/* Would the plan's products of extents overflow int64? (Known issue: the
 * plan multiplies extents in int64 unchecked; see README.) Conservative. */
static int plan_products_overflow(const cfg *c)
{
    int64_t r = 1;
    const int64_t big = INT64_C(1) << 61;
    const int64_t f[] = {c->N,
                         c->Hq,
                         c->Tq < big ? c->Tq + 64 : INT64_MAX,
                         c->Tk < big ? c->Tk + 64 : INT64_MAX,
                         c->Dk < big && c->Dv < big ? c->Dk + c->Dv + 64
                                                    : INT64_MAX,
                         64};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if (f[i] <= 0)
            continue;
        if (__builtin_mul_overflow(r, f[i], &r))
            return 1;
    }
    return 0;
}

#endif

/* Inputs that met a tolerated issue: [0] huge extents skipped (plan.c
 * overflow), [1] NaN K behind a -inf bias, [3] F1, [4] F2. Printed at exit with
 * FUZZ_FORWARD_STATS=1. */
static long g_huge_skipped;
static long g_known_hits[5];

static void print_hits(void)
{
    fprintf(stderr,
            "fuzz_forward: tolerated: plan-overflow skips %ld, NaN K behind "
            "-inf bias %ld, F1 %ld, F2 %ld\n",
            g_huge_skipped, g_known_hits[1], g_known_hits[3], g_known_hits[4]);
}

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
    /* errs: statuses validation must give; only used to know that the plan
     * is not reached */
    sset errs = decode_scalars(c);
    (void)errs;
    int dt = c->dtype == SDPA_FLOAT64 ? SDPA_FLOAT64 : SDPA_FLOAT32;
    unsigned ptrs = fld(F_HUGE_PTRS);
    static double small_mem[8];
    memset(small_mem, 0, sizeof small_mem);
    int64_t shp[T_COUNT][4] = {
        {c->N, c->Hq, c->Tq, c->Dk},  {c->N, c->Hkv, c->Tk, c->Dk},
        {c->N, c->Hkv, c->Tk, c->Dv}, {c->N, c->Hq, c->Tq, c->Tk},
        {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, c->Dv},
        {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, 1}};
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
                            fld(F_LSE) % 2 == 1};
    for (int t = 0; t < T_COUNT; t++) {
        tens *x = &g_t[t];
        x->present = present[t];
        x->es = esize_of(t, dt);
        if (!present[t])
            continue;
        int64_t run = 1;
        for (int d = 3; d >= 0; d--) {
            x->t.shape[d] = shp[t][d];
            x->t.stride[d] = run;
            run = sat_mul(run, shp[t][d] > 0 ? shp[t][d] : 1);
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
        if (!is_output(t) && (ptrs & 2)) {
            x->t.stride[0] = 0;
            x->t.stride[1] = 0;
        }
        if (t == T_LSE && (ptrs & 4))
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
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.causal = c->causal;
    a.flags = c->flags;
    a.scale = c->scale;
    a.softcap = c->softcap;
    a.kv_lens = c->use_kvlens ? kvl : NULL;
    a.q = g_t[T_Q].t;
    a.k = g_t[T_K].t;
    a.v = g_t[T_V].t;
    if (present[T_MASK])
        a.mask = g_t[T_MASK].t;
    if (present[T_BIAS])
        a.bias = g_t[T_BIAS].t;
    a.out = g_t[T_OUT].t;
    if (present[T_W])
        a.weights = g_t[T_W].t;
    if (present[T_LSE])
        a.lse = g_t[T_LSE].t;
    union {
        sdpa_forward_args a;
        unsigned char bytes[1024];
    } box;
    (void)pack_args(&a, box.bytes, sizeof box.bytes);

    sdpa_ctx *ctx = make_ctx();
    apply_options(ctx);
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
#ifdef FUZZ_TOLERATE_KNOWN_ISSUES
    /* Known issue: signed overflow in src/plan.c for huge extents reached
     * through sdpa_forward_workspace. Skip calls whose extents multiply
     * beyond int64, unless a tensor's own byte span overflows (validation
     * then refuses before the plan). */
    if (plan_products_overflow(c) && errs == 0) {
        int span_overflow = 0;
        for (int t = 0; t < T_COUNT; t++) {
            if (!present[t] || t == T_MASK || t == T_BIAS || !g_t[t].t.data)
                continue;
            size_t span = 1, step;
            for (int d = 0; d < 4; d++)
                if (g_t[t].t.shape[d] > 1 && g_t[t].t.stride[d] > 0 &&
                    (__builtin_mul_overflow((size_t)(g_t[t].t.shape[d] - 1),
                                            (size_t)g_t[t].t.stride[d],
                                            &step) ||
                     __builtin_add_overflow(span, step, &span)))
                    span_overflow = 1;
            if (__builtin_mul_overflow(span, g_t[t].es, &step))
                span_overflow = 1;
        }
        int null_required = !g_t[T_Q].t.data || !g_t[T_K].t.data ||
                            !g_t[T_V].t.data || !g_t[T_OUT].t.data;
        if (!span_overflow && !null_required &&
            (fld(F_STRUCT) % 32 < 26 || fld(F_STRUCT) % 32 == 29)) {
            g_huge_skipped++;
            if (g_verbose)
                fprintf(stderr, "fuzz_forward: skipped (plan overflow) %s\n",
                        g_desc);
            end_ctx(ctx);
            return;
        }
    }
#endif
    long allocs = g_as.allocs;
    size_t bytes = 0;
    int ws = sdpa_forward_workspace(ctx, &box.a, &bytes);
    const char *msg = sdpa_ctx_last_error(ctx);
    if (g_verbose)
        fprintf(stderr, "fuzz_forward: workspace status %d bytes %zu %s\n", ws,
                bytes, g_desc);
    CHECK(documented(ws), "workspace status %d", ws);
    CHECK(ws != SDPA_ERR_NONFINITE && ws != SDPA_ERR_OUT_OF_MEMORY,
          "workspace gave %d (%s)", ws, sdpa_status_string(ws));
    CHECK(g_as.allocs == allocs, "sdpa_forward_workspace allocated");
    if (ws == SDPA_OK) {
        CHECK(msg[0] == '\0', "OK with a message: %s", msg);
    } else {
        CHECK(msg[0] != '\0', "status %d with an empty message", ws);
        /* sdpa_forward must refuse the same way, before touching memory */
        int fs = sdpa_forward(ctx, &box.a);
        CHECK(fs == ws, "workspace status %d but forward %d: %s", ws, fs,
              sdpa_ctx_last_error(ctx));
        CHECK(g_as.allocs == allocs, "a refused sdpa_forward allocated");
        CHECK(sdpa_ctx_last_error(ctx)[0] != '\0', "empty message");
    }
    end_ctx(ctx);
}

/* ------------------------------------------------------------------------ */
/* Small shapes: computed and compared.                                      */
/* ------------------------------------------------------------------------ */

/* The reasons key j is forbidden for row (b, h, i): bits L, mask, causal,
 * bias (-inf), computed here from the header's rules. */
enum { R_LEN = 1, R_MASK = 2, R_CAUSAL = 4, R_BIAS = 8 };

static int64_t bix(const sdpa_tensor *t, int d, int64_t i)
{
    return t->shape[d] == 1 ? 0 : i;
}

static int forbid_reasons(int64_t b, int64_t h, int64_t i, int64_t j)
{
    const cfg *c = &g_c;
    int r = 0;
    int64_t L = c->use_kvlens ? c->kv_lens[b] : c->Tk;
    if (j >= L)
        r |= R_LEN;
    if (g_t[T_MASK].present) {
        const sdpa_tensor *m = &g_t[T_MASK].t;
        unsigned char v = ((const unsigned char *)m->data)[off4(
            m, bix(m, 0, b), bix(m, 1, h), bix(m, 2, i), bix(m, 3, j))];
        if (c->mask_allows ? v == 0 : v != 0)
            r |= R_MASK;
    }
    if (c->causal == SDPA_CAUSAL_TOP_LEFT && j > i)
        r |= R_CAUSAL;
    if (c->causal == SDPA_CAUSAL_BOTTOM_RIGHT && j > i + (L - c->Tq))
        r |= R_CAUSAL;
    if (g_t[T_BIAS].present) {
        const sdpa_tensor *m = &g_t[T_BIAS].t;
        double v = elem_get(&g_t[T_BIAS], off4(m, bix(m, 0, b), bix(m, 1, h),
                                               bix(m, 2, i), bix(m, 3, j)));
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
    return elem_get(&g_t[T_BIAS], off4(m, bix(m, 0, b), bix(m, 1, h),
                                       bix(m, 2, i), bix(m, 3, j)));
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
    int nf_possible;    /* a NaN/inf may reach an allowed logit */
    int nf_certain;     /* a NaN reaches an allowed logit for sure */
    int overflow;       /* an allowed or computed logit may overflow */
    int v_allowed_nf;   /* non-finite V in an allowed row: out may be NaN */
    int v_partial_nf;   /* non-finite V in a key j < L forbidden for some
                           rows and allowed for others: those rows' outputs
                           may turn NaN (header, rule 5) */
    int v_never_nf;     /* non-finite V in a key no row of the group may see:
                           never read (rule 5) */
    int k_never_nf;     /* the same for K */
    int k_bias_only_nf; /* ... where some row forbids it by a -inf bias only */
    int bias_forbidden_nf; /* NaN/+inf bias on a key forbidden otherwise */
    int q_empty_nf;        /* non-finite q in a row with no allowed key */
    int f32_range;         /* float32 and scale or softcap above FLT_MAX */
    double bound_all;      /* scale*sum|qk| + |bias| over all rows j < L */
} analysis;

static void analyse(const unsigned char *allowed, analysis *an)
{
    const cfg *c = &g_c;
    memset(an, 0, sizeof *an);
    const int64_t g = c->Hq / c->Hkv;
    const double se = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->Dk);
    const double big = c->dtype == SDPA_FLOAT32 ? 1e37 : 1e300;
    an->f32_range = c->dtype == SDPA_FLOAT32 &&
                    (c->scale > FLT_MAX || c->softcap > FLT_MAX);
    if (c->dtype == SDPA_FLOAT32 && se * 1.0 > 1e30)
        an->overflow = 1;
    const tens *Q = &g_t[T_Q];
    tens Kn = g_t[T_K], Vn = g_t[T_V];
    Kn.t = norm_kv(&g_t[T_K].t);
    Vn.t = norm_kv(&g_t[T_V].t);
    const tens *K = &Kn, *V = &Vn;
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
                    double qv = elem_get(Q, off4(&Q->t, b, h, i, d));
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
                        double kv = elem_get(K, off4(&K->t, b, hk, j, d));
                        double qv = elem_get(Q, off4(&Q->t, b, h, i, d));
                        if (!isfinite(kv))
                            knf = isnan(kv) ? 2 : knf > 0 ? knf : 1;
                        else if (isfinite(qv))
                            absdot += fabs(qv * kv);
                    }
                    for (int64_t d = 0; d < c->Dv; d++)
                        if (!isfinite(elem_get(V, off4(&V->t, b, hk, j, d))))
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
                        if (knf && !read) {
                            an->k_never_nf = 1;
                            if (why == R_BIAS)
                                an->k_bias_only_nf = 1;
                        }
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

/* Snapshots of every buffer before a call. */
static void snapshot(void)
{
    for (int t = 0; t < T_COUNT; t++) {
        buf *b = &g_t[t].b;
        if (!b->mem)
            continue;
        if (!b->snap)
            b->snap = malloc(b->bytes);
        if (!b->snap)
            abort();
        memcpy(b->snap, b->mem, b->bytes);
    }
}

static void restore(void)
{
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].b.mem)
            memcpy(g_t[t].b.mem, g_t[t].b.snap, g_t[t].b.bytes);
}

/* Inputs never change; outputs (all bytes, or those outside the logical
 * view) keep their snapshot. */
static void check_buffers(int outputs_all, int outputs_padding,
                          const char *what)
{
    for (int t = 0; t < T_COUNT; t++) {
        const buf *b = &g_t[t].b;
        if (!b->mem)
            continue;
        if (!is_output(t)) {
            CHECK(memcmp(b->mem, b->snap, b->bytes) == 0,
                  "%s: input %s was written", what, tname[t]);
            continue;
        }
        if (outputs_all) {
            for (size_t i = 0; i < b->bytes; i++)
                CHECK(b->mem[i] == b->snap[i],
                      "%s: output %s byte %zu written on a failed call", what,
                      tname[t], i);
        } else if (outputs_padding && b->map) {
            for (size_t i = 0; i < b->bytes; i++)
                CHECK(b->map[i] || b->mem[i] == b->snap[i],
                      "%s: output %s padding byte %zu written", what, tname[t],
                      i);
        }
    }
}

/* Map of the bytes inside an output's logical view; 0 if it overlaps itself
 * (an element written twice). */
static int make_map(tens *x)
{
    x->b.map = calloc(x->b.bytes, 1);
    if (!x->b.map)
        abort();
    int injective = 1;
    const int64_t *s = x->t.shape;
    for (int64_t a = 0; a < s[0]; a++)
        for (int64_t b = 0; b < s[1]; b++)
            for (int64_t c = 0; c < s[2]; c++)
                for (int64_t d = 0; d < s[3]; d++) {
                    int64_t o = off4(&x->t, a, b, c, x == &g_t[T_LSE] ? 0 : d);
                    if (o < 0 || (size_t)(o + 1) * x->es > x->b.bytes)
                        return -1; /* outside our buffer: not a valid view */
                    if (x->b.map[(size_t)o * x->es])
                        injective = 0;
                    memset(x->b.map + (size_t)o * x->es, 1, x->es);
                }
    return injective;
}

/* The header's output stride rule (SDPA_ERR_BAD_STRIDE): sorted by stride,
 * each dimension of extent > 1 must step past everything the smaller ones
 * cover. lse's stride[3] is ignored (its extent is 1). */
static int sorted_rule(const sdpa_tensor *t, int is_lse)
{
    int order[4], n = 0;
    for (int d = 0; d < 4; d++)
        if (t->shape[d] > 1 && !(is_lse && d == 3))
            order[n++] = d;
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && t->stride[order[b]] < t->stride[order[b - 1]];
             b--) {
            int x = order[b];
            order[b] = order[b - 1];
            order[b - 1] = x;
        }
    int64_t covered = 0;
    for (int a = 0; a < n; a++) {
        int64_t s = t->stride[order[a]];
        if (s <= covered)
            return 0;
        covered += (t->shape[order[a]] - 1) * s;
    }
    return 1;
}

typedef struct tol {
    double w, out, lse_abs, lse_rel;
} tol;

/* The tolerances of tests/test_random.c (same formulas, see there). */
static tol tolerance(const ref_result *r)
{
    const cfg *c = &g_c;
    const double eps = c->dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
    const double L = (double)r->logit_absmax;
    const double Tk = (double)c->Tk, Dk = (double)c->Dk;
    const double e_s = (Dk + 4) * eps * L + 4 * eps * (1 + L + c->softcap);
    const double e_p = 2 * e_s + (Tk + 16) * eps;
    tol t;
    t.w = 2 * e_p;
    t.out = 2 * ((double)r->v_absmax + 1e-300) * (e_p + (Tk + 4) * eps);
    t.lse_abs = 2 * (e_s + (Tk + 16) * eps);
    t.lse_rel = 2 * eps;
    return t;
}

static void compare(const ref_result *r, int check_vals, int check_out)
{
    const cfg *c = &g_c;
    const tol t = tolerance(r);
    const tens *O = &g_t[T_OUT], *W = &g_t[T_W], *S = &g_t[T_LSE];
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                size_t row = (size_t)((b * c->Hq + h) * c->Tq + i);
                const unsigned char *ok = r->allowed + row * (size_t)c->Tk;
                int empty = 1;
                for (int64_t j = 0; j < c->Tk; j++)
                    empty &= !ok[j];
                for (int64_t d = 0; d < c->Dv; d++) {
                    double got = elem_get(O, off4(&O->t, b, h, i, d));
                    double ref =
                        (double)r->out[row * (size_t)c->Dv + (size_t)d];
                    if (empty)
                        CHECK(got == 0.0,
                              "empty row out[%lld,%lld,%lld,%lld] = %g, not 0",
                              (long long)b, (long long)h, (long long)i,
                              (long long)d, got);
                    else if (check_vals && check_out)
                        CHECK(fabs(got - ref) <= t.out,
                              "out[%lld,%lld,%lld,%lld] = %.10g, reference "
                              "%.10g, tolerance %.3g",
                              (long long)b, (long long)h, (long long)i,
                              (long long)d, got, ref, t.out);
                }
                if (W->present)
                    for (int64_t j = 0; j < c->Tk; j++) {
                        double got = elem_get(W, off4(&W->t, b, h, i, j));
                        double ref =
                            (double)r->weights[row * (size_t)c->Tk + (size_t)j];
                        if (!ok[j])
                            CHECK(got == 0.0,
                                  "forbidden weight[%lld,%lld,%lld,%lld] = %g",
                                  (long long)b, (long long)h, (long long)i,
                                  (long long)j, got);
                        else if (check_vals)
                            CHECK(fabs(got - ref) <= t.w,
                                  "weights[%lld,%lld,%lld,%lld] = %.10g, "
                                  "reference %.10g, tolerance %.3g",
                                  (long long)b, (long long)h, (long long)i,
                                  (long long)j, got, ref, t.w);
                    }
                if (S->present) {
                    double got = elem_get(S, off4(&S->t, b, h, i, 0));
                    double ref = (double)r->lse[row];
                    if (empty)
                        CHECK(got == -INFINITY, "empty row lse = %g", got);
                    else if (check_vals)
                        CHECK(fabs(got - ref) <=
                                  t.lse_abs + t.lse_rel * fabs(ref),
                              "lse[%lld,%lld,%lld] = %.10g, reference %.10g",
                              (long long)b, (long long)h, (long long)i, got,
                              ref);
                }
            }
}

static size_t out_bytes_total(void)
{
    size_t n = 0;
    for (int t = T_OUT; t <= T_LSE; t++)
        n += g_t[t].b.bytes;
    return n;
}

static void status_str(sset s, char *buf_, size_t n)
{
    size_t at = 0;
    buf_[0] = '\0';
    for (int i = 0; i < 32 && at + 4 < n; i++)
        if (s & BIT(i))
            at += (size_t)snprintf(buf_ + at, n - at, "%d,", i);
}

static void run_small(void)
{
    cfg *c = &g_c;
    c->N = 1 + (int64_t)(fld(F_N) % 3);
    c->Hkv = 1 + (int64_t)(fld(F_HKV) % 3);
    c->Hq = c->Hkv * (1 + (int64_t)(fld(F_GROUP) % 4));
    c->Tq = small_dim(fld(F_TQ), 8, 16);
    c->Tk = small_dim(fld(F_TK), 12, 32);
    c->Dk = small_dim(fld(F_DK), 8, 16);
    c->Dv = small_dim(fld(F_DV), 8, 16);
    sset errs = decode_scalars(c);
    sset amb = 0; /* statuses that are acceptable besides the expected ones */

    const int dt = c->dtype == SDPA_FLOAT64 ? SDPA_FLOAT64 : SDPA_FLOAT32;

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
                errs |= BIT(SDPA_ERR_BAD_KV_LEN);
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
    g_kvlens_ptr = c->use_kvlens ? c->kv_lens : NULL;

    /* layouts */
    unsigned lay = fld(F_LAYOUT);
    unsigned kvb = fld(F_KV_BCAST) % 4;
    int64_t pads[T_COUNT] = {0};
    const int pad_f[T_COUNT] = {F_PAD_Q, F_PAD_KV,  F_PAD_KV, -1,
                                -1,      F_PAD_OUT, F_PAD_W,  F_PAD_LSE};
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
    set_layout(&g_t[T_Q].t, c->N, c->Hq, c->Tq, c->Dk, lay & 1, pads[T_Q]);
    set_layout(&g_t[T_K].t, nkv, c->Hkv, c->Tk, c->Dk, lay & 2, pads[T_K]);
    set_layout(&g_t[T_V].t, nkv, c->Hkv, c->Tk, c->Dv, lay & 2, pads[T_V]);
    if (kvb == 2) { /* broadcast over N by stride 0 */
        g_t[T_K].t.stride[0] = 0;
        g_t[T_V].t.stride[0] = 0;
    }
    set_layout(&g_t[T_OUT].t, c->N, c->Hq, c->Tq, c->Dv, lay & 4, pads[T_OUT]);
    set_layout(&g_t[T_W].t, c->N, c->Hq, c->Tq, c->Tk, lay & 8, pads[T_W]);
    set_layout(&g_t[T_LSE].t, c->N, c->Hq, c->Tq, 1, lay & 32, pads[T_LSE]);
    if (lay & 16)
        g_t[T_LSE].t.stride[3] = (int64_t)(lay >> 6) - 2; /* ignored */
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
        if (gaps && small_span(&g_t[t].t) == 0) { /* too large: no gaps */
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
    switch (bad_kind) {
    case 10: /* a negative stride (lse's stride[3] is ignored) */
        if (bt == T_LSE && bd == 3)
            bd = 2;
        g_t[bt].t.stride[bd] = -1 - (int64_t)(bvv % 4);
        errs |= BIT(SDPA_ERR_BAD_STRIDE);
        break;
    case 11: /* a zero stride */
        g_t[bt].t.stride[bd] = 0;
        break;
    case 12: /* any small stride */
        g_t[bt].t.stride[bd] = (int64_t)(bvv % 48);
        break;
    case 13: { /* a shape that disagrees */
        int64_t was = g_t[bt].t.shape[bd];
        fallback[bt] = small_span(&g_t[bt].t);
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
            {c->N, c->Hq, c->Tq, c->Tk},  {c->N, c->Hq, c->Tq, 1}};
        int bcast = bt == T_MASK || bt == T_BIAS ||
                    ((bt == T_K || bt == T_V) && bd == 0);
        if (nv == want[bt][bd] || (bcast && nv == 1))
            nv = want[bt][bd] + 3;
        g_t[bt].t.shape[bd] = nv;
        errs |= BIT(SDPA_ERR_BAD_DIM) | BIT(SDPA_ERR_SHAPE_MISMATCH) |
                BIT(SDPA_ERR_HEAD_GROUPING) | BIT(SDPA_ERR_BAD_STRIDE) |
                BIT(SDPA_ERR_OVERLAP) | BIT(SDPA_ERR_OVERFLOW);
        if (c->use_kvlens)
            errs |= BIT(SDPA_ERR_BAD_KV_LEN);
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
        errs |= BIT(SDPA_ERR_NULL_POINTER);
        break;
    case 15: /* an output overlapping another argument */
        alias = bt;
        errs |= BIT(SDPA_ERR_OVERLAP);
        break;
    default:
        break;
    }

    /* stride rules of the header, for every present tensor */
    for (int t = 0; t < T_COUNT; t++) {
        const sdpa_tensor *x = &g_t[t].t;
        if (!g_t[t].present || (bad_kind == 13 && t == bt))
            continue;
        for (int d = 0; d < 4; d++)
            if (x->stride[d] < 0 && !(t == T_LSE && d == 3))
                errs |= BIT(SDPA_ERR_BAD_STRIDE);
        if (is_blas(t)) {
            if (x->stride[3] != 1) {
                if (x->shape[3] > 1)
                    errs |= BIT(SDPA_ERR_BAD_STRIDE);
                else
                    amb |= BIT(SDPA_ERR_BAD_STRIDE); /* extent 1: moot */
            }
            if (x->shape[2] > 1 && x->stride[2] < x->shape[3])
                errs |= BIT(SDPA_ERR_BAD_STRIDE);
            else if (x->shape[2] == 1 && x->stride[2] < x->shape[3])
                amb |= BIT(SDPA_ERR_BAD_STRIDE); /* one row: moot */
        }
    }

    /* buffers */
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present)
            alloc_view(&g_t[t], t, fallback[t]);
    for (int t = T_OUT; t <= T_LSE; t++) {
        if (!g_t[t].present || (bad_kind == 13 && t == bt))
            continue;
        int inj = make_map(&g_t[t]);
        if (inj == 0 || !sorted_rule(&g_t[t].t, t == T_LSE))
            errs |= BIT(SDPA_ERR_BAD_STRIDE);
        if (inj < 0) /* a negative stride: already an error */
            CHECK(errs & BIT(SDPA_ERR_BAD_STRIDE), "harness: map");
    }

    /* values */
    uint64_t seed = 0;
    for (int i = 0; i < 8; i++)
        seed = seed << 8 | fld(F_SEED0 + i);
    g_rng = seed;
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
    if (args_valid || bad_kind == 11 || bad_kind == 12) {
        tens *Q = &g_t[T_Q], *K = &g_t[T_K], *V = &g_t[T_V];
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t h = 0; h < c->Hq; h++)
                for (int64_t i = 0; i < c->Tq; i++)
                    for (int64_t d = 0; d < c->Dk; d++)
                        if (errs == 0)
                            elem_set(Q, off4(&Q->t, b, h, i, d), rnd_sym(amp));
        if (errs == 0) {
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
                                elem_set(K, off4(&K->t, bk, h, j, d),
                                         val ? rnd_sym(amp) : NAN);
                            for (int64_t d = 0; d < c->Dv; d++)
                                elem_set(V, off4(&V->t, bk, h, j, d),
                                         val ? rnd_sym(1.0) : NAN);
                        }
                }
        }
    }
    if (g_t[T_MASK].present) {
        static const double dens[8] = {0.05, 0.2, 0.5, 0.9, 0.0, 1.0, 0.1, 0.3};
        double p = dens[fld(F_MASK_DENS) % 8];
        tens *M = &g_t[T_MASK];
        for (size_t i = 0; i < M->b.bytes; i++) {
            int forbid = rnd_unit() < p;
            unsigned char nz = (unsigned char)(1 + rnd() % 255);
            M->b.mem[i] = (unsigned char)(c->mask_allows ? (forbid ? 0 : nz)
                                                         : (forbid ? nz : 0));
        }
    }
    if (g_t[T_BIAS].present) {
        static const double ninf[4] = {0.0, 0.15, 0.5, 1.0};
        static const double bamp[4] = {1.5, 0.0, 10.0, 100.0};
        double p = ninf[fld(F_BIAS_NINF) % 4];
        double ba = bamp[(fld(F_BIAS_NINF) >> 2) % 4];
        tens *B = &g_t[T_BIAS];
        size_t n = B->b.bytes / B->es;
        for (size_t i = 0; i < n; i++)
            elem_set(B, (int64_t)i, rnd_unit() < p ? -INFINITY : rnd_sym(ba));
    }
    /* special values at chosen elements */
    static const double sp[10] = {NAN,  INFINITY, -INFINITY, 1e30,  -1e30,
                                  3e38, 1e-40,    -0.0,      1e300, 65504};
    for (int s = 0; s < 3; s++) {
        unsigned tv = fld(F_SP0_T + 3 * s) % 8;
        if (tv < 4 || errs)
            continue;
        static const int tt[4] = {T_Q, T_K, T_V, T_BIAS};
        tens *x = &g_t[tt[tv - 4]];
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
        elem_set(x, off4(&x->t, co[0], co[1], co[2], co[3]),
                 sp[fld(F_SP0_KIND + 3 * s) % 10]);
    }

    /* the call's arguments */
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.causal = c->causal;
    a.flags = c->flags;
    a.scale = c->scale;
    a.softcap = c->softcap;
    a.kv_lens = g_kvlens_ptr;
    a.q = g_t[T_Q].t;
    a.k = g_t[T_K].t;
    a.v = g_t[T_V].t;
    if (g_t[T_MASK].present)
        a.mask = g_t[T_MASK].t;
    if (g_t[T_BIAS].present)
        a.bias = g_t[T_BIAS].t;
    a.out = g_t[T_OUT].t;
    if (g_t[T_W].present)
        a.weights = g_t[T_W].t;
    if (g_t[T_LSE].present)
        a.lse = g_t[T_LSE].t;
    if (null_tensor >= 0) {
        sdpa_tensor *p = null_tensor == T_Q   ? &a.q
                         : null_tensor == T_K ? &a.k
                         : null_tensor == T_V ? &a.v
                                              : &a.out;
        p->data = NULL;
    }
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
        default:
            if (a.kv_lens &&
                g_t[T_OUT].b.bytes >= (size_t)c->N * sizeof(int64_t)) {
                a.kv_lens = (const int64_t *)(void *)g_t[T_OUT].b.mem;
                errs |= BIT(SDPA_ERR_BAD_KV_LEN); /* reads the sentinel */
            } else {
                a.out.data = a.q.data;
            }
            break;
        }
    }
    union {
        sdpa_forward_args a;
        unsigned char bytes[1024];
    } box;
    errs |= pack_args(&a, box.bytes, sizeof box.bytes);

    sdpa_ctx *ctx = make_ctx();
    apply_options(ctx);
    describe("");

    /* the reference and what the inputs can do (valid arguments only) */
    ref_result ref;
    memset(&ref, 0, sizeof ref);
    analysis an;
    memset(&an, 0, sizeof an);
    int have_ref = errs == 0;
    sset expect = errs;
    if (have_ref) {
        if (g_verbose)
            fprintf(stderr, "fuzz_forward: config %s\n", g_desc);
        sdpa_forward_args ra = box.a;
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
        char extra[200];
        snprintf(extra, sizeof extra,
                 "an{nf_possible=%d nf_certain=%d overflow=%d v_allowed=%d "
                 "v_partial=%d v_never=%d k_never=%d k_bias_only=%d "
                 "bias_forbidden=%d q_empty=%d bound=%g}",
                 an.nf_possible, an.nf_certain, an.overflow, an.v_allowed_nf,
                 an.v_partial_nf, an.v_never_nf, an.k_never_nf,
                 an.k_bias_only_nf, an.bias_forbidden_nf, an.q_empty_nf,
                 an.bound_all);
        describe(extra);
        if (g_verbose > 1)
            for (int t = T_Q; t <= T_BIAS; t++) {
                if (!g_t[t].present)
                    continue;
                fprintf(stderr, "  %s:", tname[t]);
                for (size_t i = 0; i < g_t[t].b.bytes / g_t[t].es && i < 64;
                     i++)
                    fprintf(stderr, " %g", elem_get(&g_t[t], (int64_t)i));
                fprintf(stderr, "\n");
            }
        int empty_error = ref.any_empty && !c->opt_empty_zero;
        int unsupported =
            g_t[T_W].present && (c->opt_path == SDPA_PATH_TILED ||
                                 c->opt_path == SDPA_PATH_DECODE ||
                                 c->opt_path == SDPA_PATH_DECODE_BLAS);
        if (empty_error)
            expect |= BIT(SDPA_ERR_FULLY_MASKED_ROW);
        if (unsupported)
            expect |= BIT(SDPA_ERR_UNSUPPORTED);
        if (!empty_error && !unsupported) {
            int nf_ok = an.nf_possible || an.overflow;
            /* a non-finite V row that is read, or V values whose unnormalised
             * sums can overflow (finding F2, fixed: the library reports
             * SDPA_ERR_NONFINITE instead of a silent inf or NaN) */
            if (an.v_allowed_nf || an.v_partial_nf)
                nf_ok = 1;
            if (have_ref &&
                (double)ref.v_absmax * (double)c->Tk >
                    (c->dtype == SDPA_FLOAT32 ? FLT_MAX : DBL_MAX) / 2)
                nf_ok = 1;
#ifdef FUZZ_TOLERATE_KNOWN_ISSUES
            if (an.k_bias_only_nf) { /* known: NaN K behind a -inf bias */
                nf_ok = 1;
                g_known_hits[1]++;
            }
#endif
            int nf_certain = an.nf_certain;
#ifdef FUZZ_TOLERATE_FINDINGS
            /* F1: a float32 scale that rounds to 0.0f becomes a BLAS alpha
             * of 0, and Q·Kᵀ is never computed: NaN in q or k is ignored */
            if (c->dtype == SDPA_FLOAT32 && c->scale > 0 &&
                (float)c->scale == 0.0f && nf_certain) {
                nf_certain = 0;
                g_known_hits[3]++;
            }
#endif
            if (!nf_certain)
                expect |= BIT(SDPA_OK);
            if (nf_ok || an.nf_certain)
                expect |= BIT(SDPA_ERR_NONFINITE);
        }
    }
    expect |= amb;
    unsigned oomv = fld(F_OOM);
    int oom = oomv % 16 == 15;
    if (oom) {
        g_as.fail_at = g_as.allocs + (long)((oomv >> 4) % 4);
        if (expect & BIT(SDPA_OK))
            expect |= BIT(SDPA_ERR_OUT_OF_MEMORY);
        if (expect & BIT(SDPA_ERR_NONFINITE))
            expect |= BIT(SDPA_ERR_OUT_OF_MEMORY);
    }

    sdpa_ctx *call_ctx = null_ctx ? NULL : ctx;
    const sdpa_forward_args *call_args = null_args ? NULL : &box.a;

    /* 1. the workspace query */
    snapshot();
    long allocs0 = g_as.allocs + g_as.refused;
    size_t ws_bytes = 0;
    int ws = sdpa_forward_workspace(call_ctx, call_args, &ws_bytes);
    CHECK(documented(ws), "workspace status %d", ws);
    CHECK(g_as.allocs + g_as.refused == allocs0,
          "sdpa_forward_workspace allocated");
    CHECK(ws != SDPA_ERR_NONFINITE && ws != SDPA_ERR_OUT_OF_MEMORY,
          "workspace status %d", ws);
    check_buffers(1, 0, "workspace");
    if (!null_ctx) {
        const char *m = sdpa_ctx_last_error(ctx);
        CHECK((ws == SDPA_OK) == (m[0] == '\0'),
              "workspace status %d, message \"%s\"", ws, m);
    }

    /* 2. the call */
    int st = sdpa_forward(call_ctx, call_args);
    char es[128];
    status_str(expect, es, sizeof es);
    if (g_verbose)
        fprintf(stderr, "fuzz_forward: status %d (expected {%s}) %s%s\n", st,
                es, g_desc, oom ? " oom" : "");
    CHECK(documented(st), "sdpa_forward status %d", st);
    CHECK(expect & BIT(st),
          "sdpa_forward gave %d (%s: %s), expected one of "
          "{%s}",
          st, sdpa_status_string(st), null_ctx ? "" : sdpa_ctx_last_error(ctx),
          es);
    if (!null_ctx) {
        const char *m = sdpa_ctx_last_error(ctx);
        if (st == SDPA_OK)
            CHECK(m[0] == '\0', "OK with a message: %s", m);
        else
            CHECK(m[0] != '\0', "status %d with an empty message", st);
    }
    /* the workspace query refused exactly what sdpa_forward refused */
    if (st == SDPA_OK || st == SDPA_ERR_NONFINITE ||
        st == SDPA_ERR_OUT_OF_MEMORY)
        CHECK(ws == SDPA_OK, "forward %d but workspace %d", st, ws);
    else
        CHECK(ws == st, "forward status %d, workspace status %d", st, ws);

    if (st != SDPA_OK && st != SDPA_ERR_NONFINITE) {
        check_buffers(1, 0, "failed call");
    } else {
        check_buffers(0, st == SDPA_OK, "call");
    }
    if (st == SDPA_OK) {
        int check_vals = have_ref && !an.nf_possible && !an.overflow &&
                         an.bound_all <= 1e3 && c->softcap <= 1e3 &&
                         (double)ref.logit_absmax <= 1e3;
        /* rule 5: a non-finite V row that some row may see can turn the
         * outputs of the rows that do not see it to NaN (documented) */
        int check_out = !an.v_allowed_nf && !an.v_partial_nf;
#ifdef FUZZ_TOLERATE_FINDINGS
        /* F2: P·V runs on the unnormalised exp(s - m) and divides by the
         * row sum afterwards, so V values near the dtype's maximum overflow
         * to inf although the output is finite */
        if (have_ref &&
            (double)ref.v_absmax * (double)c->Tk >
                (c->dtype == SDPA_FLOAT32 ? FLT_MAX : DBL_MAX) / 2) {
            check_out = 0;
            g_known_hits[4]++;
        }
#endif
        if (have_ref)
            compare(&ref, check_vals, check_out);
    }
    if (!null_ctx && (st == SDPA_OK || st == SDPA_ERR_NONFINITE)) {
        /* 3. the workspace again: the scratch it reported is now held */
        size_t again = 0;
        long a0 = g_as.allocs;
        CHECK(sdpa_forward_workspace(ctx, call_args, &again) == SDPA_OK,
              "workspace after a successful call");
        CHECK(g_as.allocs == a0, "workspace allocated");
        CHECK(again == ws_bytes,
              "workspace said %zu bytes before the call, %zu after", ws_bytes,
              again);
    }

    /* 4. a second call: other thread count (bitwise equal results), or the
     * same call (allocates nothing) */
    unsigned second = fld(F_SECOND) % 4;
    if (!null_ctx && !null_args && !oom && (second == 1 || second == 2) &&
        (st == SDPA_OK || st == SDPA_ERR_NONFINITE || st >= 1)) {
        size_t nb = out_bytes_total();
        unsigned char *first = malloc(nb ? nb : 1);
        if (!first)
            abort();
        size_t at = 0;
        for (int t = T_OUT; t <= T_LSE; t++) {
            if (g_t[t].b.mem)
                memcpy(first + at, g_t[t].b.mem, g_t[t].b.bytes);
            at += g_t[t].b.bytes;
        }
        restore();
        int64_t th = c->opt_threads;
        if (second == 1) {
            th = 1 + (int64_t)((fld(F_SECOND) >> 2) % 3);
            CHECK(sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, th) == SDPA_OK,
                  "threads");
        }
        long a0 = g_as.allocs;
        int st2 = sdpa_forward(ctx, &box.a);
        CHECK(st2 == st, "status %d with %lld threads, %d with %lld", st,
              (long long)c->opt_threads, st2, (long long)th);
        if (st == SDPA_OK && second == 2)
            CHECK(g_as.allocs == a0,
                  "a second call with the same shape allocated");
        if (st != SDPA_ERR_NONFINITE) {
            at = 0;
            for (int t = T_OUT; t <= T_LSE; t++) {
                if (g_t[t].b.mem)
                    CHECK(memcmp(first + at, g_t[t].b.mem, g_t[t].b.bytes) == 0,
                          "%s differs between %lld and %lld threads", tname[t],
                          (long long)c->opt_threads, (long long)th);
                at += g_t[t].b.bytes;
            }
        }
        free(first);
    }
    if (have_ref)
        ref_free(&ref);
    end_ctx(ctx);
}

/* ------------------------------------------------------------------------ */
/* Seeds.                                                                    */
/* ------------------------------------------------------------------------ */
typedef struct seed {
    const char *name;
    struct {
        int f;
        unsigned v;
    } set[24];
} seed;

/* Field values (see the decoders above): F_TQ/F_TK/F_DK/F_DV v -> 1 + v % 8
 * (12 for Tk) below 224; F_MASK/F_BIAS/F_KVLENS 1 = present; F_WEIGHTS /
 * F_LSE 1 = present; F_CAUSAL 3 = top-left, 5 = bottom-right; option ids
 * 1..7 = SDPA_OPT_*; F_BAD_KIND 10..15 = argument errors. */
static const seed seeds[] = {
    {"valid_default", {{-1, 0}}},
    {"materialised_weights_lse",
     {{F_TQ, 5},
      {F_TK, 9},
      {F_DK, 3},
      {F_DV, 4},
      {F_WEIGHTS, 1},
      {F_LSE, 1},
      {F_SEED0, 7},
      {-1, 0}}},
    {"tiled_forced_blocks",
     {{F_TQ, 229},
      {F_TK, 235},
      {F_DK, 5},
      {F_DV, 6},
      {F_OPT0_ID, 4},
      {F_OPT0_VAL, 2},
      {F_OPT1_ID, 7},
      {F_OPT1_VAL, 3},
      {F_OPT2_ID, 6},
      {F_OPT2_VAL, 4},
      {F_SEED1, 3},
      {-1, 0}}},
    {"decode_gqa_chunks",
     {{F_N, 1},
      {F_HKV, 1},
      {F_GROUP, 3},
      {F_TQ, 0},
      {F_TK, 239},
      {F_DK, 7},
      {F_OPT0_ID, 4},
      {F_OPT0_VAL, 3},
      {F_OPT1_ID, 7},
      {F_OPT1_VAL, 6},
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
      {F_OPT0_ID, 1},
      {F_OPT0_VAL, 1},
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
      {F_TQ, 4},
      {F_TK, 8},
      {F_DK, 3},
      {F_DV, 2},
      {F_OPT0_ID, 1},
      {F_OPT0_VAL, 1},
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
      {F_OPT0_ID, 2},
      {F_OPT0_VAL, 2},
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
      {F_OPT0_ID, 1},
      {F_OPT0_VAL, 1},
      {F_LSE, 1},
      {-1, 0}}},
    {"empty_row_error", {{F_MASK, 1}, {F_MASK_DENS, 5}, {-1, 0}}},
    {"empty_row_zero",
     {{F_MASK, 1},
      {F_MASK_DENS, 3},
      {F_OPT0_ID, 1},
      {F_OPT0_VAL, 1},
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
      {F_OPT0_ID, 8},
      {F_OPT0_VAL, 1},
      {F_OPT1_ID, 2},
      {F_OPT1_VAL, 6},
      {F_OPT2_ID, 3},
      {F_OPT2_VAL, 7},
      {-1, 0}}},
    {"forced_path_with_weights",
     {{F_WEIGHTS, 1}, {F_OPT0_ID, 4}, {F_OPT0_VAL, 2}, {-1, 0}}},
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
};

static int write_seeds(const char *dir)
{
    for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
        uint8_t bytes[F_COUNT];
        memset(bytes, 0, sizeof bytes);
        size_t len = 0;
        for (int i = 0; i < 24 && seeds[s].set[i].f >= 0; i++) {
            bytes[seeds[s].set[i].f] = (uint8_t)seeds[s].set[i].v;
            if ((size_t)seeds[s].set[i].f + 1 > len)
                len = (size_t)seeds[s].set[i].f + 1;
        }
        if (len == 0)
            len = 1;
        char path[4096];
        snprintf(path, sizeof path, "%s/%02zu_%s", dir, s, seeds[s].name);
        FILE *f = fopen(path, "wb");
        if (!f || fwrite(bytes, 1, len, f) != len || fclose(f) != 0) {
            fprintf(stderr, "cannot write %s\n", path);
            return 1;
        }
        /* each seed must pass the target */
        LLVMFuzzerTestOneInput(bytes, len);
    }
    fprintf(stderr, "wrote %zu seeds to %s\n", sizeof seeds / sizeof seeds[0],
            dir);
    return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *verbose = getenv("FUZZ_FORWARD_VERBOSE");
    g_verbose = verbose ? atoi(verbose) : 0;
    const char *stats = getenv("FUZZ_FORWARD_STATS");
    if ((stats && *stats && *stats != '0') || g_verbose)
        atexit(print_hits);
    const char *dir = getenv("FUZZ_FORWARD_WRITE_CORPUS");
    if (dir && *dir)
        exit(write_seeds(dir));
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    memset(g_in, 0, sizeof g_in);
    memcpy(g_in, data, size < sizeof g_in ? size : sizeof g_in);
    memset(&g_c, 0, sizeof g_c);
    g_desc[0] = '\0';
    g_c.huge = (fld(F_MODE) & 7) == 7;
    if (g_c.huge)
        run_huge();
    else
        run_small();
    free_all();
    return 0;
}
