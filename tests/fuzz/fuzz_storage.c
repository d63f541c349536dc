/*
 * libFuzzer target for what an inference engine hands sdpa_forward (1.1):
 * the half storage types, paged K/V caches and the caller's own threads,
 * on every path and row kernel.
 *
 * Every input is a fixed header of one-byte fields (enum field below; bytes
 * past the end read as 0, so the empty input is a small valid call). The
 * fields choose:
 *  - storage types: dtype (q and out), kv_dtype and bias_dtype (0 = dtype)
 *    among float32, float16, bfloat16 and float64, every mixture, and the
 *    refused ones (float64 mixed with another type, unknown values);
 *  - shapes (N, Hkv, GQA group, Tq, page length 1.., pages per sequence,
 *    Dk, Dv), kv_lens (ragged, 0, Tk, out of range), causal, a mask and a
 *    bias broadcast over any dimension, window, sinks, ALiBi, scale,
 *    soft-cap, the optional outputs (weights, lse, logits at a stage,
 *    max_weight, entropy: the compute type), padded layouts;
 *  - paged K/V: k and v as [P, Hkv, page, D] pools with any order of the
 *    three outer dimensions, padded rows, stride-0 pages or heads, gaps;
 *    the block table with shuffled page ids, pages shared between
 *    sequences (prefix sharing, random reuse, one page for everything), a
 *    row stride above pages_per_seq (or 0), unused pages in the pool, and
 *    garbage (-1, P, INT32_MIN/MAX, random) in every entry that holds no
 *    valid key (past kv_lens, the row's padding);
 *  - one injected refusal: paging fields without a table, pages_per_seq
 *    out of range, a table stride below pages_per_seq, an entry of a page
 *    with valid keys outside the pool (and the same past kv_lens, which is
 *    no error), pages_per_seq · page beyond the BLAS int, a table row
 *    stride whose rows pass the address space (no error with one row),
 *    shapes that disagree with the pool or the logical Tk; an output
 *    placed right after an input (q, the pool, the table, the bias: no
 *    overlap) or one element into it (SDPA_ERR_OVERLAP), which checks the
 *    byte ranges of 2-byte, 4-byte and int32 elements;
 *  - the context: SDPA_OPT_PATH (every value, SDPA_PATH_DECODE_BLAS and
 *    bad ones), SDPA_OPT_KERNEL (portable, AVX2, AVX-512, bad ones),
 *    blocks, the score budget, the empty-row policy, 1..3 threads or
 *    SDPA_NUM_THREADS_ALL, or a parallel-for of the harness
 *    (sdpa_ctx_set_parallel_for) with 1..256 workers that runs the items
 *    serially on the calling thread in a chosen order with chosen worker
 *    indices, or on threads of its own; a refused workers value, a
 *    replaced or unset parallel-for; and a breach of its contract on a
 *    chosen item of a chosen invocation (an item skipped, repeated, called
 *    with a worker index or an item out of range, one item called in
 *    place of another, two threads on one worker);
 *  - values: amplitudes, tiny values (float16 subnormals), V near and
 *    beyond float16's range, NaN in q, K, V or the bias at a read element,
 *    +inf in the bias.
 *
 * Checks (abort on the first violation, so libFuzzer reports it):
 *  - every status is documented and the one the arguments call for
 *    (BAD_DTYPE, BAD_PAGE, SHAPE_MISMATCH, OVERFLOW, OVERLAP, BAD_KV_LEN,
 *    FULLY_MASKED_ROW, UNSUPPORTED for weights/logits on a forced
 *    streaming path, NONFINITE exactly when a NaN/inf reaches a read
 *    element or out overflows its half type, PARALLEL_FOR exactly when the
 *    harness's parallel-for broke its contract), with a message on error
 *    (naming the bad table entry, the paging field, "parallel-for") and
 *    none on success; sdpa_ctx_set_int / sdpa_ctx_set_parallel_for answer
 *    as documented and a refused value changes nothing;
 *  - after a refusal every output byte (guards included) is untouched;
 *    inputs (pools, table, kv_lens, sinks, slopes) are never written;
 *    bytes outside the outputs' views are never written, whatever the
 *    status;
 *  - on success: out, weights, lse, logits, max_weight and entropy against
 *    the long-double reference (tests/common/reference.c) run on the exactly
 *    widened inputs, with fuzz_forward's float32 tolerance plus, for a
 *    half out, one rounding (2^-11 · |out| for float16 plus its subnormal
 *    spacing, 2^-8 for bfloat16); out finite; forbidden weights exactly 0
 *    and forbidden logits -inf (fz_check_attention);
 *  - K and V rows that no row of the GQA group may see (past kv_lens,
 *    masked, outside the window or causality), the pool's unused pages and
 *    the slots of partly used pages hold NaN and never reach anything;
 *  - the parallel-for is never called for fewer than two items, always
 *    called by the streaming decode path for N · Hkv >= 2 with two or more
 *    workers, and never once unset; its results (status, outputs, the
 *    NONFINITE message) are bitwise those of the context's own workers at
 *    another thread count, and the context works after a breach;
 *  - paged K/V gives bitwise the outputs (and status) of the same call on
 *    a contiguous copy of the pages, on the same path and kernel;
 *  - sdpa_forward_workspace allocates nothing and gives sdpa_forward's
 *    status for every error found before the computation; a repeated call
 *    allocates nothing and gives the same bits.
 *
 * The half encodings here are written from the formats' definitions (frexp,
 * ldexp, nearbyint) and share nothing with src/kernels/half.h.
 *
 * Seed corpus: FUZZ_STORAGE_WRITE_CORPUS=<dir> ./fuzz_storage writes the
 * empty input's seed and the hand-made seeds of seeds[] to <dir> and
 * exits.
 */
#define _POSIX_C_SOURCE 200809L

#include <float.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#include <cpuid.h>
#endif

#include "fuzz_common.h"
#include "fuzz_ref.h"
#include "half_codec.h"

/* ------------------------------------------------------------------------ */
/* Input fields: one byte each (new fields are appended, so that the        */
/* committed seeds keep their meaning).                                      */
/* ------------------------------------------------------------------------ */
enum field {
    F_QTYPE,
    F_KVTYPE,
    F_BIASTYPE,
    F_N,
    F_HKV,
    F_GROUP,
    F_TQ,
    F_PAGE,
    F_PPS,
    F_DK,
    F_DV,
    F_PAGED, /* 0 mod 4: contiguous K/V (its broadcast in bits 2-3) */
    F_KLAYOUT,
    F_VLAYOUT,
    F_TABLE, /* table stride, sharing, garbage */
    F_POOL,  /* unused pages, shuffling */
    F_KVLENS,
    F_KV0,
    F_KV1,
    F_KV2,
    F_CAUSAL,
    F_MASK,
    F_MASK_B,
    F_MASK_DENS,
    F_BIAS,
    F_BIAS_B,
    F_BIAS_VAL,
    F_WINDOW,
    F_WIN_L,
    F_WIN_R,
    F_SINKS,
    F_ALIBI,
    F_SOFTCAP,
    F_SCALE,
    F_WEIGHTS,
    F_LSE,
    F_LOGITS,
    F_MAXW,
    F_ENTROPY,
    F_LAYOUT, /* bthd bits of q, out, weights, logits */
    F_PADS,
    F_PATH,
    F_KERNEL,
    F_BLOCK_Q,
    F_BLOCK_K,
    F_SCRATCH,
    F_EMPTY,
    F_THREADS, /* own workers, or the harness's parallel-for */
    F_WORKERS,
    F_ORDER,
    F_BREACH,
    F_BREACH_AT,
    F_ERR,
    F_ERR_VAL,
    F_ARENA,
    F_AMP,
    F_VAMP,
    F_SPREAD,
    F_SPECIAL,
    F_SP_POS,
    F_SECOND,
    F_SEED0, /* eight bytes */
    F_COUNT = F_SEED0 + 8
};

static unsigned fld(int f)
{
    return fz(f);
}

/* ------------------------------------------------------------------------ */
/* Storage types: rounding and encodings from the formats' definitions.     */
/* ------------------------------------------------------------------------ */
static int is_half(int type)
{
    return type == SDPA_FLOAT16 || type == SDPA_BFLOAT16;
}

/* Bytes of an element; 0 stands for the uint8 mask. */
static size_t ty_size(int type)
{
    switch (type) {
    case 0:
        return 1;
    case SDPA_FLOAT64:
        return 8;
    case SDPA_FLOAT16:
    case SDPA_BFLOAT16:
        return 2;
    default:
        return 4;
    }
}

/* The bits of v (representable in the half type, or inf / NaN). */
static uint16_t half_bits(double v, int type)
{
    bool exact;
    uint16_t h = half_codec_bits(v, type, &exact);
    if (!exact)
        abort(); /* the harness rounds before it stores */
    return h;
}

static double ty_load(const void *mem, int type, int64_t off)
{
    switch (type) {
    case 0:
        return (double)((const unsigned char *)mem)[off];
    case SDPA_FLOAT64:
        return ((const double *)mem)[off];
    case SDPA_FLOAT16:
    case SDPA_BFLOAT16:
        return half_codec_value(((const uint16_t *)mem)[off], type);
    default:
        return (double)((const float *)mem)[off];
    }
}

/* v must be representable in the type (half_codec_round), or inf / NaN. */
static void ty_store(void *mem, int type, int64_t off, double v)
{
    switch (type) {
    case SDPA_FLOAT64:
        ((double *)mem)[off] = v;
        break;
    case SDPA_FLOAT16:
    case SDPA_BFLOAT16:
        ((uint16_t *)mem)[off] = half_bits(v, type);
        break;
    default:
        ((float *)mem)[off] = (float)v;
        break;
    }
}

/* A NaN of the type: quiet or signalling, either sign, some payload. */
static void ty_poison(void *mem, int type, int64_t off, uint64_t k)
{
    int quiet = (k & 1) != 0;
    uint64_t sign = (k >> 1) & 1;
    uint64_t pay = (k >> 2) | 1; /* never 0: that is inf */
    switch (type) {
    case SDPA_FLOAT64: {
        uint64_t u = sign << 63 | UINT64_C(0x7ff) << 52 |
                     (quiet ? UINT64_C(1) << 51 : 0) |
                     (pay & ((UINT64_C(1) << 51) - 1));
        memcpy((char *)mem + off * 8, &u, 8);
        break;
    }
    case SDPA_FLOAT16:
        ((uint16_t *)mem)[off] =
            (uint16_t)(sign << 15 | 0x7c00u | (quiet ? 0x200u : 0u) |
                       (pay & 0x1ffu));
        break;
    case SDPA_BFLOAT16:
        ((uint16_t *)mem)[off] =
            (uint16_t)(sign << 15 | 0x7f80u | (quiet ? 0x40u : 0u) |
                       (pay & 0x3fu));
        break;
    default: {
        uint32_t u = (uint32_t)(sign << 31 | 0x7f800000u |
                                (quiet ? 0x400000u : 0u) | (pay & 0x3fffffu));
        memcpy((char *)mem + off * 4, &u, 4);
        break;
    }
    }
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
    T_KC, /* contiguous copies of the paged K and V */
    T_VC,
    T_COUNT
};
static const char *const tname[T_COUNT] = {
    "q",           "k",   "v",      "mask",       "bias",    "out",
    "weights",     "lse", "logits", "max_weight", "entropy", "k_contiguous",
    "v_contiguous"};
static const int toutput[T_COUNT] = {0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0};

typedef struct st_tens {
    int present;
    int type; /* storage type; 0 for the mask */
    sdpa_tensor t;
    fz_buf *b;
} st_tens;

typedef struct cfg {
    /* types: the fields the call gets, and the types of the buffers */
    int dtype, kv_field, bias_field;
    int qt, kvt, bt, ct; /* buffers (float32 stands in for a bad type) */
    int types_ok;
    int64_t N, Hq, Hkv, g, Tq, Tk, Dk, Dv, page, pps;
    int paged;
    int kv_bcast; /* contiguous: 1 stride 0 over N, 2 extent 1 */
    int64_t P, tstride, arg_pps, arg_stride;
    int table_null;
    int32_t *tvals; /* the valid table (N x tstride) */
    int use_kvlens;
    int64_t kv_lens[3], len[3], used[3];
    int causal;
    uint32_t flags;
    int mask_allows;
    int window;
    int64_t wl, wr;
    double scale, softcap;
    const double *sinks, *slopes;
    int stage;
    /* context */
    int64_t path, kernel;
    int empty_zero;
    int pool_mode; /* 0 own workers, 1 serial, 2 threaded */
    int pool_unset;
    int workers;
    int64_t threads;
} cfg;

static cfg g_c;
static st_tens g_t[T_COUNT];
static unsigned char *g_allowed; /* [N, Hq, Tq, Tk] */
static unsigned char *g_seen;    /* [N, Hkv, Tk] */

static size_t view_span(const sdpa_tensor *t)
{
    size_t span = 1;
    for (int d = 0; d < 4; d++)
        if (t->shape[d] > 1)
            span += (size_t)((t->shape[d] - 1) * t->stride[d]);
    return span;
}

static size_t tens_bytes(int t)
{
    return view_span(&g_t[t].t) * ty_size(g_t[t].type);
}

static void map_output(st_tens *x, size_t base)
{
    const int64_t *s = x->t.shape;
    size_t es = ty_size(x->type);
    for (int64_t a = 0; a < s[0]; a++)
        for (int64_t c = 0; c < s[1]; c++)
            for (int64_t r = 0; r < s[2]; r++)
                for (int64_t d = 0; d < s[3]; d++)
                    fz_buf_allow(x->b,
                                 base + (size_t)fz_off4(&x->t, a, c, r, d) * es,
                                 es);
}

static void poison_input(st_tens *x)
{
    size_t n = view_span(&x->t);
    if (x->type == 0) {
        memset(x->t.data, 0xEE, n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        ty_poison(x->t.data, x->type, (int64_t)i, fz_rnd());
}

/* [e0, e1, e2, D] with the three outer dimensions in one of six orders,
 * rows padded, and oddities: stride 0 over dimension 0 or 1, a gap. */
static void set_kv_layout(sdpa_tensor *t, const int64_t ext[4], unsigned code)
{
    static const int perms[6][3] = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2},
                                    {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
    static const int64_t pads[4] = {0, 0, 1, 3};
    const int *perm = perms[code % 6];
    int64_t row = ext[3] + pads[(code / 6) % 4];
    memcpy(t->shape, ext, sizeof t->shape);
    t->stride[3] = 1;
    int64_t run = row;
    for (int k = 2; k >= 0; k--) {
        t->stride[perm[k]] = run;
        run *= ext[perm[k]];
    }
    switch ((code / 24) % 8) {
    case 5:
        t->stride[0] = 0; /* every page (item) the same memory */
        break;
    case 6:
        t->stride[1] = 0; /* every head the same memory */
        break;
    case 7:
        t->stride[0] += 3;
        break;
    default:
        break;
    }
}

/* mask and bias: per dimension full, extent 1, stride 0, or gaps (as
 * fuzz_forward decodes them) */
static void mask_bias_layout(int t, unsigned modes, const int64_t full[4])
{
    sdpa_tensor *x = &g_t[t].t;
    for (int gaps = 1; gaps >= 0; gaps--) {
        int64_t run = 1;
        for (int d = 3; d >= 0; d--) {
            unsigned m = (modes >> (2 * d)) & 3u;
            if (m == 3 && !gaps)
                m = 0;
            if (m == 1) {
                x->shape[d] = 1;
                x->stride[d] = d == 3 ? (int64_t)(modes >> 7) * 5 : run;
            } else if (m == 2) {
                x->shape[d] = full[d];
                x->stride[d] = 0;
            } else {
                x->shape[d] = full[d];
                x->stride[d] =
                    run * (m == 3 ? 2 + (int64_t)((modes >> 6) & 1u) : 1);
                run = x->stride[d] * full[d];
            }
        }
        if (view_span(x) <= 65536)
            break;
    }
}

/* ------------------------------------------------------------------------ */
/* The harness's parallel-for.                                               */
/* ------------------------------------------------------------------------ */
enum {
    BR_NONE,
    BR_SKIP,           /* an item never called */
    BR_REPEAT,         /* an item called twice */
    BR_WORKER_REPLACE, /* an item called only with a bad worker index */
    BR_WORKER_EXTRA,   /* one more call with a bad worker index */
    BR_ITEM_EXTRA,     /* one more call with an item out of range */
    BR_SWAP,           /* item k called in place of item k + 1 */
    BR_BUSY,           /* threads: every call on worker 0 */
    /* not breaches of the items' contract, refused or ignored: */
    BR_REENTER, /* after the first call, calls into the context itself */
    BR_LATE     /* first, the previous invocation's task called again */
};
static const char *const breach_name[10] = {
    "none",       "skip", "repeat", "worker-replace", "worker-extra",
    "item-extra", "swap", "busy",   "reenter",        "late"};

typedef struct hpool {
    int workers, threaded;
    unsigned order, wmode;
    int breach;
    uint64_t breach_sel;
    int breach_inv; /* -1: every invocation */
    unsigned bad_sel;
    uint64_t rng;
    /* what happened */
    int invocations;
    int breached; /* a breach other than BR_BUSY was made */
    int busy;     /* two threads ran calls on worker 0 */
    int64_t last_items;
    /* the calls of the current invocation */
    int64_t ncalls;
    int64_t *seq;
    int *wk;
    unsigned char *wk_forced;
    sdpa_task_fn task;
    void *arg;
    atomic_llong next;
    sdpa_ctx *ctx; /* BR_REENTER's target */
} hpool;
static hpool g_pool;

static uint64_t pool_rnd(hpool *p)
{
    uint64_t z = (p->rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct pool_thread {
    hpool *p;
    int index;
} pool_thread;

static void pool_drain(hpool *p, int index)
{
    for (;;) {
        int64_t c = atomic_fetch_add(&p->next, 1);
        if (c >= p->ncalls)
            return;
        int w = p->wk_forced[c] ? p->wk[c] : p->breach == BR_BUSY ? 0 : index;
        p->task(p->arg, p->seq[c], w);
    }
}

static void *pool_thread_main(void *opaque)
{
    pool_thread *pt = opaque;
    pool_drain(pt->p, pt->index);
    return NULL;
}

static void reenter(hpool *p);
static void harness_parallel_for(void *user, int64_t items, sdpa_task_fn task,
                                 void *task_arg)
{
    hpool *p = user;
    /* a task of an invocation that returned: must be ignored (the item
     * bits of this one are untouched, so its own calls all count) */
    if (p->breach == BR_LATE && p->task)
        for (int64_t i = 0; i < 2 && i < p->last_items; i++)
            p->task(p->arg, i, (int)i % p->workers);
    int inv = p->invocations++;
    p->last_items = items;
    CHECK(items >= 2, "the parallel-for was called for %lld items",
          (long long)items);
    CHECK(items <= (INT64_C(1) << 24), "the parallel-for got %lld items",
          (long long)items);
    CHECK(task != NULL, "the parallel-for got no task");
    const int64_t cap = items + 2;
    p->seq = malloc((size_t)cap * sizeof *p->seq);
    p->wk = malloc((size_t)cap * sizeof *p->wk);
    p->wk_forced = calloc((size_t)cap, 1);
    if (!p->seq || !p->wk || !p->wk_forced)
        abort();
    int64_t n = items;
    for (int64_t c = 0; c < items; c++)
        p->seq[c] = c;
    switch (p->order % 4) {
    case 1: /* descending */
        for (int64_t c = 0; c < items; c++)
            p->seq[c] = items - 1 - c;
        break;
    case 2: /* shuffled */
        for (int64_t c = items - 1; c > 0; c--) {
            int64_t k = (int64_t)(pool_rnd(p) % (uint64_t)(c + 1));
            int64_t x = p->seq[c];
            p->seq[c] = p->seq[k];
            p->seq[k] = x;
        }
        break;
    case 3: /* odd items first */
        for (int64_t c = 0, at = 0; c < 2; c++)
            for (int64_t i = 1 - c; i < items; i += 2)
                p->seq[at++] = i;
        break;
    default:
        break;
    }
    for (int64_t c = 0; c < cap; c++) {
        int64_t item = c < items ? p->seq[c] : 0;
        switch (p->wmode % 4) {
        case 1:
            p->wk[c] = (int)(item % p->workers);
            break;
        case 2:
            p->wk[c] = (int)(pool_rnd(p) % (uint64_t)p->workers);
            break;
        case 3:
            p->wk[c] = p->workers - 1 - (int)(item % p->workers);
            break;
        default:
            p->wk[c] = 0;
            break;
        }
    }
    if (p->breach != BR_NONE && p->breach != BR_BUSY &&
        p->breach != BR_REENTER && p->breach != BR_LATE &&
        (p->breach_inv < 0 || p->breach_inv == inv)) {
        int64_t k = (int64_t)(p->breach_sel % (uint64_t)items);
        int64_t at = 0; /* position of item k */
        while (p->seq[at] != k)
            at++;
        static const int64_t bad_items_tail[3] = {-1, INT64_MAX, INT64_MIN};
        int bad_workers[5] = {p->workers, -1, INT_MAX, INT_MIN, p->workers + 1};
        switch (p->breach) {
        case BR_SKIP:
            memmove(p->seq + at, p->seq + at + 1,
                    (size_t)(n - at - 1) * sizeof *p->seq);
            n--;
            break;
        case BR_REPEAT:
            p->seq[n++] = k;
            break;
        case BR_SWAP:
            p->seq[at] = (k + 1) % items;
            break;
        case BR_WORKER_REPLACE:
            p->wk[at] = bad_workers[p->bad_sel % 5];
            p->wk_forced[at] = 1;
            break;
        case BR_WORKER_EXTRA:
            p->seq[n] = k;
            p->wk[n] = bad_workers[p->bad_sel % 5];
            p->wk_forced[n] = 1;
            n++;
            break;
        case BR_ITEM_EXTRA:
            p->seq[n] =
                p->bad_sel % 4 == 0 ? items : bad_items_tail[p->bad_sel % 3];
            n++;
            break;
        default:
            break;
        }
        p->breached = 1;
    }
    p->ncalls = n;
    p->task = task;
    p->arg = task_arg;
    atomic_store(&p->next, 0);
    if (!p->threaded) {
        for (int64_t c = 0; c < n; c++) {
            task(task_arg, p->seq[c], p->wk[c]);
            if (c == 0 && p->breach == BR_REENTER)
                reenter(p);
        }
    } else {
        int threads = p->workers < 3 ? p->workers : 3;
        pthread_t th[3];
        pool_thread pt[3];
        for (int i = 0; i < threads; i++)
            pt[i] = (pool_thread){p, i};
        for (int i = 1; i < threads; i++)
            CHECK(pthread_create(&th[i], NULL, pool_thread_main, &pt[i]) == 0,
                  "pthread_create");
        pool_drain(p, 0);
        for (int i = 1; i < threads; i++)
            pthread_join(th[i], NULL);
        if (p->breach == BR_BUSY && threads > 1)
            p->busy = 1;
    }
    free(p->seq);
    free(p->wk);
    free(p->wk_forced);
    p->seq = NULL;
    p->wk = NULL;
    p->wk_forced = NULL;
}

/* Calls into the context from inside its parallel-for: each one refused
 * with SDPA_ERR_BUSY, whatever its arguments. */
static void reenter(hpool *p)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    sdpa_backward_args b = SDPA_BACKWARD_ARGS_INIT;
    size_t bytes = 0;
    const int got[5] = {
        sdpa_forward(p->ctx, &a), sdpa_forward_workspace(p->ctx, &a, &bytes),
        sdpa_backward(p->ctx, &b),
        sdpa_ctx_set_int(p->ctx, SDPA_OPT_NUM_THREADS, 2),
        sdpa_ctx_set_parallel_for(p->ctx, harness_parallel_for, p, 256)};
    for (int i = 0; i < 5; i++)
        CHECK(got[i] == SDPA_ERR_BUSY, "re-entry %d returned %d, not BUSY", i,
              got[i]);
}

/* A parallel-for the context must never call (refused or replaced). */
static void poison_parallel_for(void *user, int64_t items, sdpa_task_fn task,
                                void *task_arg)
{
    (void)user;
    (void)items;
    (void)task;
    (void)task_arg;
    CHECK(0, "a refused, replaced or unset parallel-for was called");
}

/* ------------------------------------------------------------------------ */
/* Context options.                                                          */
/* ------------------------------------------------------------------------ */
/* The header: AVX2 needs AVX2, FMA and F16C; AVX-512 also F, DQ, BW, VL. */
static int kernel_supported(int64_t k)
{
    if (k == SDPA_KERNEL_AUTO || k == SDPA_KERNEL_PORTABLE)
        return 1;
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
    unsigned a, b, c, d;
    int f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
    __builtin_cpu_init();
    int avx2 =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
    if (k == SDPA_KERNEL_AVX2)
        return avx2;
    if (k == SDPA_KERNEL_AVX512)
        return avx2 && __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
#endif
    return 0;
}

/* sdpa_ctx_set_int against its documented answer; returns the value the
 * option holds after it (the kernel AUTO resolves to for the kernel). */
static int64_t set_option(sdpa_ctx *ctx, int id, int64_t value)
{
    int64_t before = 0, after = 0;
    CHECK(sdpa_ctx_get_int(ctx, id, &before) == SDPA_OK, "get_int(%d)", id);
    int64_t lo = 0, hi = INT64_MAX;
    int extra_ok = 0;
    switch (id) {
    case SDPA_OPT_EMPTY_ROWS:
        hi = 1;
        break;
    case SDPA_OPT_NUM_THREADS:
        lo = 1, hi = 256;
        extra_ok = value == SDPA_NUM_THREADS_ALL;
        break;
    case SDPA_OPT_KERNEL:
        hi = SDPA_KERNEL_AVX512;
        break;
    case SDPA_OPT_PATH:
        hi = SDPA_PATH_DECODE_BLAS;
        break;
    case SDPA_OPT_BLOCK_Q:
    case SDPA_OPT_BLOCK_K:
        hi = INT64_C(1) << 20;
        break;
    default:
        break;
    }
    int want = (value < lo || value > hi) && !extra_ok
                   ? SDPA_ERR_BAD_OPTION_VALUE
               : id == SDPA_OPT_KERNEL && !kernel_supported(value)
                   ? SDPA_ERR_UNSUPPORTED
                   : SDPA_OK;
    int st = sdpa_ctx_set_int(ctx, id, value);
    const char *msg = sdpa_ctx_last_error(ctx);
    CHECK(st == want, "set_int(%d, %lld) gave %d (%s), expected %d", id,
          (long long)value, st, msg, want);
    if (st == SDPA_OK)
        CHECK(msg[0] == '\0', "message after a successful set_int: %s", msg);
    else
        CHECK(msg[0] != '\0', "set_int status %d without a message", st);
    CHECK(sdpa_ctx_get_int(ctx, id, &after) == SDPA_OK, "get_int(%d)", id);
    if (st != SDPA_OK)
        CHECK(after == before, "refused set_int(%d, %lld) changed %lld to %lld",
              id, (long long)value, (long long)before, (long long)after);
    else if (id == SDPA_OPT_KERNEL && value == SDPA_KERNEL_AUTO)
        CHECK(after >= SDPA_KERNEL_PORTABLE && kernel_supported(after),
              "KERNEL AUTO resolves to %lld", (long long)after);
    else
        CHECK(after == value, "get_int(%d) = %lld after set %lld", id,
              (long long)after, (long long)value);
    return after;
}

/* ------------------------------------------------------------------------ */
/* Decoding.                                                                 */
/* ------------------------------------------------------------------------ */
static void describe(const char *extra)
{
    const cfg *c = &g_c;
    fz_desc[0] = '\0';
    fz_describe(
        "dtype=%d kv_dtype=%d bias_dtype=%d (buffers q %d kv %d bias %d "
        "compute %d) N=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld Dk=%lld "
        "Dv=%lld causal=%d flags=0x%x scale=%g softcap=%g",
        c->dtype, c->kv_field, c->bias_field, c->qt, c->kvt, c->bt, c->ct,
        (long long)c->N, (long long)c->Hq, (long long)c->Hkv, (long long)c->Tq,
        (long long)c->Tk, (long long)c->Dk, (long long)c->Dv, c->causal,
        c->flags, c->scale, c->softcap);
    if (c->paged) {
        fz_describe(" PAGED page=%lld pps=%lld P=%lld tstride=%lld (args "
                    "pps %lld stride %lld%s) table=[",
                    (long long)c->page, (long long)c->pps, (long long)c->P,
                    (long long)c->tstride, (long long)c->arg_pps,
                    (long long)c->arg_stride, c->table_null ? " NULL" : "");
        for (int64_t e = 0; e < c->N * c->tstride && e < 24; e++)
            fz_describe("%s%d", e ? "," : "", c->tvals[e]);
        fz_describe("]");
    } else if (c->kv_bcast) {
        fz_describe(" kv_broadcast=%d", c->kv_bcast);
    }
    if (c->use_kvlens)
        fz_describe(" kv_lens=[%lld,%lld,%lld]", (long long)c->kv_lens[0],
                    (long long)c->kv_lens[1], (long long)c->kv_lens[2]);
    if (c->window)
        fz_describe(" window=%lld,%lld", (long long)c->wl, (long long)c->wr);
    if (c->sinks)
        fz_describe(" sinks[0]=%g", c->sinks[0]);
    if (c->slopes)
        fz_describe(" alibi[0]=%g", c->slopes[0]);
    if (c->stage)
        fz_describe(" stage=%d", c->stage);
    fz_describe(" path=%lld kernel=%lld zero=%d threads=%lld",
                (long long)c->path, (long long)c->kernel, c->empty_zero,
                (long long)c->threads);
    if (c->pool_mode)
        fz_describe(" pool{%s workers=%d order=%u wmode=%u breach=%s sel=%llu "
                    "inv=%d%s}",
                    c->pool_mode == 2 ? "threads" : "serial", c->workers,
                    g_pool.order % 4, g_pool.wmode % 4,
                    breach_name[g_pool.breach],
                    (unsigned long long)g_pool.breach_sel, g_pool.breach_inv,
                    c->pool_unset ? " unset" : "");
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present)
            fz_describe(
                " %s{%lld,%lld,%lld,%lld|%lld,%lld,%lld,%lld}", tname[t],
                (long long)g_t[t].t.shape[0], (long long)g_t[t].t.shape[1],
                (long long)g_t[t].t.shape[2], (long long)g_t[t].t.shape[3],
                (long long)g_t[t].t.stride[0], (long long)g_t[t].t.stride[1],
                (long long)g_t[t].t.stride[2], (long long)g_t[t].t.stride[3]);
    fz_describe(" %s", extra);
}

/* dtype: float32, float16, bfloat16, float64, or a bad value */
static int decode_dtype(unsigned v, fz_sset *errs)
{
    static const int bad[6] = {0, 5, -1, 255, INT_MAX, INT_MIN};
    switch (v % 16) {
    case 4:
    case 5:
    case 6:
    case 7:
    case 15:
        return SDPA_FLOAT16;
    case 8:
    case 9:
    case 10:
    case 11:
        return SDPA_BFLOAT16;
    case 12:
    case 13:
        return SDPA_FLOAT64;
    case 14:
        *errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
        return bad[(v >> 4) % 6];
    default:
        return SDPA_FLOAT32;
    }
}

/* kv_dtype / bias_dtype: 0 (dtype's), a type, dtype itself, a bad value */
static int decode_sub_dtype(unsigned v, int dtype, fz_sset *errs)
{
    static const int bad[6] = {9, -1, 99, INT_MAX, INT_MIN, 100};
    switch (v % 8) {
    case 2:
        return SDPA_FLOAT32;
    case 3:
        return SDPA_FLOAT16;
    case 4:
        return SDPA_BFLOAT16;
    case 5:
        return SDPA_FLOAT64;
    case 6:
        *errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
        return bad[(v >> 3) % 6];
    case 7:
        return dtype;
    default:
        return 0;
    }
}

static int known_type(int t)
{
    return t >= SDPA_FLOAT32 && t <= SDPA_BFLOAT16;
}

static void decode_types(cfg *c, fz_sset *errs)
{
    c->dtype = decode_dtype(fld(F_QTYPE), errs);
    c->kv_field = decode_sub_dtype(fld(F_KVTYPE), c->dtype, errs);
    c->bias_field = decode_sub_dtype(fld(F_BIASTYPE), c->dtype, errs);
    int kv = c->kv_field ? c->kv_field : c->dtype;
    int bias = c->bias_field ? c->bias_field : c->dtype;
    c->qt = known_type(c->dtype) ? c->dtype : SDPA_FLOAT32;
    c->kvt = known_type(kv) ? kv : SDPA_FLOAT32;
    c->bt = known_type(bias) ? bias : SDPA_FLOAT32;
    int f64 = 0, other = 0;
    const int all[3] = {c->dtype, kv, bias};
    for (int i = 0; i < 3; i++) {
        f64 |= all[i] == SDPA_FLOAT64;
        other |= all[i] != SDPA_FLOAT64;
    }
    if (f64 && other)
        *errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);
    c->types_ok = (*errs & FZ_BIT(SDPA_ERR_BAD_DTYPE)) == 0;
    c->ct = c->types_ok && f64 ? SDPA_FLOAT64 : SDPA_FLOAT32;
    if (!c->types_ok) /* refused: buffers of the types that exist */
        c->qt = c->qt == SDPA_FLOAT64 ? SDPA_FLOAT32 : c->qt;
    if (!c->types_ok) {
        c->kvt = c->kvt == SDPA_FLOAT64 ? SDPA_FLOAT32 : c->kvt;
        c->bt = c->bt == SDPA_FLOAT64 ? SDPA_FLOAT32 : c->bt;
    }
}

static void decode_shapes(cfg *c)
{
    c->N = 1 + (int64_t)(fld(F_N) % 3);
    c->Hkv = fld(F_HKV) < 224 ? 1 + (int64_t)(fld(F_HKV) % 2) : 3;
    c->g = 1 + (int64_t)(fld(F_GROUP) % 4);
    c->Hq = c->Hkv * c->g;
    c->Tq = fz_small_dim(fld(F_TQ), 6, 16);
    c->page = fz_small_dim(fld(F_PAGE), 6, 16);
    c->pps = fz_small_dim(fld(F_PPS), 5, 8);
    c->Tk = c->page * c->pps;
    c->Dk = fz_small_dim(fld(F_DK), 8, 40);
    c->Dv = fz_small_dim(fld(F_DV), 8, 40);
    /* at most about 24k products (the reference's work): fewer query rows,
     * heads per group and items first; the pages and the head dimensions
     * (the vector kernels' main loops and tails) are what this target is
     * about */
    for (;;) {
        int64_t work = c->N * c->Hq * c->Tq * c->Tk * (c->Dk + c->Dv);
        if (work <= 24576)
            break;
        if (c->Tq > 2)
            c->Tq = (c->Tq + 1) / 2;
        else if (c->g > 1)
            c->g--, c->Hq = c->Hkv * c->g;
        else if (c->N > 1)
            c->N--;
        else if (c->Dv > 8)
            c->Dv = (c->Dv + 1) / 2;
        else if (c->Tq > 1)
            c->Tq = 1;
        else
            break;
    }
    c->paged = fld(F_PAGED) % 4 != 0;
    c->kv_bcast = 0;
    if (!c->paged && c->N > 1) {
        unsigned m = (fld(F_PAGED) >> 2) % 4;
        c->kv_bcast = m == 2 ? 1 : m == 3 ? 2 : 0;
    }
}

static void decode_lens(cfg *c, fz_sset *errs)
{
    c->use_kvlens = fld(F_KVLENS) % 3 == 1;
    for (int64_t b = 0; b < 3; b++) {
        unsigned v = fld(F_KV0 + (int)b);
        int64_t L = c->Tk;
        if (c->use_kvlens && b < c->N) {
            switch (v % 8) {
            case 0:
                L = 0;
                break;
            case 1:
                L = c->Tk;
                break;
            case 6: {
                const int64_t bad[4] = {-1, c->Tk + 1, INT64_MAX, INT64_MIN};
                L = bad[(v >> 3) % 4];
                *errs |= FZ_BIT(SDPA_ERR_BAD_KV_LEN);
                break;
            }
            case 7:
                L = c->Tk - 1;
                break;
            default:
                L = 1 + (int64_t)((v >> 3) % (unsigned)c->Tk);
                break;
            }
        }
        c->kv_lens[b] = L;
        /* what the harness fills: a bad length is refused anyway */
        c->len[b] = L < 0 ? 0 : L > c->Tk ? c->Tk : L;
        c->used[b] = (c->len[b] + c->page - 1) / c->page;
    }
}

/* The block table: page ids for the pages that hold valid keys (shared or
 * not, shuffled), garbage everywhere else. */
static void decode_paging(cfg *c)
{
    unsigned tv = fld(F_TABLE), pv = fld(F_POOL);
    static const int64_t extra[4] = {0, 0, 1, 3};
    c->tstride = c->pps + extra[tv % 4];
    c->arg_stride = extra[tv % 4] == 0 && (tv & 4) ? 0 : c->tstride;
    c->arg_pps = c->pps;
    int64_t entries = c->N * c->tstride;
    c->tvals = malloc((size_t)entries * sizeof *c->tvals);
    if (!c->tvals)
        abort();
    unsigned share = (tv >> 3) % 4, garbage = (tv >> 5) % 8;
    int64_t next = 0;
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t col = 0; col < c->pps; col++) {
            int32_t *e = &c->tvals[b * c->tstride + col];
            *e = -1;
            if (col >= c->used[b])
                continue;
            if ((share == 1 || share == 3) && b > 0 && col < c->used[0])
                *e = c->tvals[col]; /* item 0's prefix */
            else if (share == 2 && next > 0 && fz_below(3) == 0)
                *e = (int32_t)fz_below(next); /* any page again */
            else if (share == 3 && next > 0)
                *e = 0; /* one page for everything */
            else
                *e = (int32_t)next++;
        }
    c->P = next + (int64_t)(pv % 4);
    if (c->P == 0)
        c->P = 1;
    int32_t *perm = malloc((size_t)c->P * sizeof *perm);
    if (!perm)
        abort();
    for (int64_t i = 0; i < c->P; i++)
        perm[i] = (int32_t)i;
    if (!(pv & 4))
        for (int64_t i = c->P - 1; i > 0; i--) {
            int64_t k = fz_below(i + 1);
            int32_t x = perm[i];
            perm[i] = perm[k];
            perm[k] = x;
        }
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t col = 0; col < c->tstride; col++) {
            int32_t *e = &c->tvals[b * c->tstride + col];
            if (col < c->used[b]) {
                *e = perm[*e];
                continue;
            }
            unsigned kind = garbage == 6 ? (unsigned)fz_below(6) : garbage;
            switch (kind) {
            case 0:
                *e = -1;
                break;
            case 1:
                *e = (int32_t)fz_below(c->P);
                break;
            case 2:
                *e = (int32_t)c->P;
                break;
            case 3:
                *e = INT32_MAX;
                break;
            case 4:
                *e = INT32_MIN;
                break;
            case 5:
                *e = (int32_t)(uint32_t)fz_rnd();
                break;
            default:
                *e = (int32_t)c->P + 1000;
                break;
            }
        }
    free(perm);
}

static void decode_per_head(cfg *c)
{
    c->sinks = c->slopes = NULL;
    if (fld(F_SINKS) % 8 >= 6) {
        fz_buf *b = fz_buf_new("sinks", 0, (size_t)c->Hq * sizeof(double));
        double *s = (double *)(void *)b->mem;
        for (int64_t h = 0; h < c->Hq; h++)
            s[h] = fz_sym(3.0);
        c->sinks = s;
    }
    unsigned av = fld(F_ALIBI);
    if (av % 8 >= 6) {
        fz_buf *b =
            fz_buf_new("alibi_slopes", 0, (size_t)c->Hq * sizeof(double));
        double *s = (double *)(void *)b->mem;
        if (av % 8 == 6)
            CHECK(sdpa_alibi_slopes(c->Hq, (double)((av >> 3) % 17), s) ==
                      SDPA_OK,
                  "sdpa_alibi_slopes");
        else
            for (int64_t h = 0; h < c->Hq; h++)
                s[h] = fz_sym(0.05 + (double)((av >> 3) % 16) / 8);
        c->slopes = s;
    }
}

static void decode_options(cfg *c)
{
    static const int causal[4] = {SDPA_CAUSAL_NONE, SDPA_CAUSAL_TOP_LEFT,
                                  SDPA_CAUSAL_BOTTOM_RIGHT, SDPA_CAUSAL_NONE};
    c->causal = causal[fld(F_CAUSAL) % 4];
    c->mask_allows = (fld(F_MASK) & 0x40) != 0;
    c->flags = c->mask_allows ? (uint32_t)SDPA_FLAG_MASK_NONZERO_ALLOWS : 0u;
    static const int64_t wvals[8] = {-1, 0, 1, 2, 3, 5, 8, -1};
    c->window = fld(F_WINDOW) % 8 >= 5;
    c->wl = c->wr = 0;
    if (c->window) {
        c->flags |= SDPA_FLAG_WINDOW;
        c->wl = wvals[fld(F_WIN_L) % 8];
        c->wr = wvals[fld(F_WIN_R) % 8];
    }
    unsigned sc = fld(F_SCALE);
    c->scale = sc % 4 < 2    ? 0.0
               : sc % 4 == 2 ? 1.0
                             : 0.05 + 1.5 * (sc >> 2) / 63.0;
    unsigned cap = fld(F_SOFTCAP);
    c->softcap = cap % 8 < 6    ? 0.0
                 : cap % 8 == 6 ? 5.0
                                : 1.0 + (cap >> 3) / 3.0;
    decode_per_head(c);
    c->stage = (int)(fld(F_LOGITS) % 4); /* 0: no logits */
}

/* ------------------------------------------------------------------------ */
/* Layouts and buffers.                                                      */
/* ------------------------------------------------------------------------ */
static void set_layouts(cfg *c)
{
    unsigned lay = fld(F_LAYOUT), pads = fld(F_PADS);
    static const int64_t pv[4] = {0, 0, 1, 3};
    memset(g_t, 0, sizeof g_t);
    const int types[T_COUNT] = {c->qt, c->kvt, c->kvt, 0,     c->bt,
                                c->qt, c->ct,  c->ct,  c->ct, c->ct,
                                c->ct, c->kvt, c->kvt};
    for (int t = 0; t < T_COUNT; t++)
        g_t[t].type = types[t];
    g_t[T_Q].present = g_t[T_K].present = g_t[T_V].present = 1;
    g_t[T_OUT].present = 1;
    g_t[T_MASK].present = fld(F_MASK) % 3 == 1;
    g_t[T_BIAS].present = fld(F_BIAS) % 3 == 1;
    g_t[T_W].present = fld(F_WEIGHTS) % 2 == 1;
    g_t[T_LSE].present = fld(F_LSE) % 2 == 1;
    g_t[T_LG].present = c->stage != 0;
    g_t[T_MW].present = fld(F_MAXW) % 2 == 1;
    g_t[T_EN].present = fld(F_ENTROPY) % 2 == 1;
    g_t[T_KC].present = g_t[T_VC].present = c->paged;
    fz_set_layout(&g_t[T_Q].t, c->N, c->Hq, c->Tq, c->Dk, lay & 1,
                  pv[pads % 4]);
    fz_set_layout(&g_t[T_OUT].t, c->N, c->Hq, c->Tq, c->Dv, lay & 2,
                  pv[(pads >> 2) % 4]);
    fz_set_layout(&g_t[T_W].t, c->N, c->Hq, c->Tq, c->Tk, lay & 4,
                  pv[(pads >> 4) % 4]);
    fz_set_layout(&g_t[T_LG].t, c->N, c->Hq, c->Tq, c->Tk, lay & 8,
                  pv[(pads >> 6) % 4]);
    fz_set_layout(&g_t[T_LSE].t, c->N, c->Hq, c->Tq, 1, lay & 16, pv[lay >> 6]);
    fz_set_layout(&g_t[T_MW].t, c->N, c->Hq, c->Tq, 1, lay & 32, 0);
    fz_set_layout(&g_t[T_EN].t, c->N, c->Hq, c->Tq, 1, 0, pv[(lay >> 5) % 4]);
    if (c->paged) {
        const int64_t ek[4] = {c->P, c->Hkv, c->page, c->Dk};
        const int64_t ev[4] = {c->P, c->Hkv, c->page, c->Dv};
        set_kv_layout(&g_t[T_K].t, ek, fld(F_KLAYOUT));
        set_kv_layout(&g_t[T_V].t, ev, fld(F_VLAYOUT));
        fz_set_layout(&g_t[T_KC].t, c->N, c->Hkv, c->Tk, c->Dk, 0, 0);
        fz_set_layout(&g_t[T_VC].t, c->N, c->Hkv, c->Tk, c->Dv, 0, 0);
    } else {
        int64_t nkv = c->kv_bcast == 2 ? 1 : c->N;
        const int64_t ek[4] = {nkv, c->Hkv, c->Tk, c->Dk};
        const int64_t ev[4] = {nkv, c->Hkv, c->Tk, c->Dv};
        set_kv_layout(&g_t[T_K].t, ek, fld(F_KLAYOUT));
        set_kv_layout(&g_t[T_V].t, ev, fld(F_VLAYOUT));
        if (c->kv_bcast == 1) {
            g_t[T_K].t.stride[0] = 0;
            g_t[T_V].t.stride[0] = 0;
        }
    }
    const int64_t full[4] = {c->N, c->Hq, c->Tq, c->Tk};
    mask_bias_layout(T_MASK, fld(F_MASK_B), full);
    mask_bias_layout(T_BIAS, fld(F_BIAS_B), full);
}

/* The arena: an input X placed at the start of an output Y's buffer, Y
 * right after X's last byte (rounded up to Y's element) or gap elements
 * further, or one element into it (SDPA_ERR_OVERLAP). */
typedef struct arena {
    int x;       /* T_Q, T_K, T_BIAS, or -1 for the block table */
    int y;       /* T_OUT or T_LSE; -1: no arena */
    int overlap; /* Y meets X */
} arena;

static int32_t *g_table; /* the table the call gets */
static int64_t *g_kvlens;

static void alloc_all(cfg *c, arena *ar)
{
    unsigned av = fld(F_ARENA);
    ar->x = -2;
    ar->y = -1;
    ar->overlap = 0;
    switch (av % 8) {
    case 5:
        ar->x = T_Q, ar->y = T_OUT;
        break;
    case 6:
        ar->x = T_K, ar->y = g_t[T_LSE].present ? T_LSE : T_OUT;
        break;
    case 7:
        ar->x = c->paged ? -1 : g_t[T_BIAS].present ? T_BIAS : T_Q;
        ar->y = T_OUT;
        break;
    default:
        break;
    }
    unsigned gap = (av >> 3) % 4;
    ar->overlap = ar->y >= 0 && gap == 3;
    size_t table_bytes = (size_t)(c->N * c->tstride) * sizeof(int32_t);
    for (int t = 0; t < T_COUNT; t++) {
        st_tens *x = &g_t[t];
        if (!x->present || t == ar->x || t == ar->y)
            continue;
        x->b = fz_buf_new(tname[t], toutput[t], tens_bytes(t));
        x->t.data = x->b->mem;
        if (toutput[t])
            map_output(x, 0);
    }
    if (ar->y >= 0) {
        /* X's bytes as the library counts them, and all of its buffer */
        size_t xb, xend;
        if (ar->x < 0) {
            xb = table_bytes;
            xend = (size_t)((c->N - 1) * c->tstride + c->pps) * sizeof(int32_t);
        } else {
            xb = xend = tens_bytes(ar->x);
        }
        size_t ey = ty_size(g_t[ar->y].type);
        size_t yoff = ar->overlap ? (xend - 1) / ey * ey
                                  : (xend + ey - 1) / ey * ey + gap * ey;
        size_t total = yoff + tens_bytes(ar->y);
        total = total > xb ? total : xb;
        fz_buf *b = fz_buf_new(tname[ar->y], 1, total);
        g_t[ar->y].b = b;
        g_t[ar->y].t.data = b->mem + yoff;
        map_output(&g_t[ar->y], yoff);
        if (ar->x < 0) {
            g_table = (int32_t *)(void *)b->mem;
        } else {
            g_t[ar->x].b = b;
            g_t[ar->x].t.data = b->mem;
        }
    }
    if (c->paged && ar->x != -1) {
        fz_buf *b = fz_buf_new("block_table", 0, table_bytes);
        g_table = (int32_t *)(void *)b->mem;
    }
    fz_buf *kb = fz_buf_new("kv_lens", 0, 3 * sizeof(int64_t));
    g_kvlens = (int64_t *)(void *)kb->mem;
    memcpy(g_kvlens, c->kv_lens, 3 * sizeof(int64_t));
    for (int t = 0; t < T_COUNT; t++)
        if (g_t[t].present && !toutput[t])
            poison_input(&g_t[t]);
}

/* ------------------------------------------------------------------------ */
/* The header's rules, evaluated here.                                       */
/* ------------------------------------------------------------------------ */
static double bias_at(int64_t b, int64_t h, int64_t i, int64_t j)
{
    const st_tens *x = &g_t[T_BIAS];
    return ty_load(x->t.data, x->type,
                   fz_off4(&x->t, fz_bix(&x->t, 0, b), fz_bix(&x->t, 1, h),
                           fz_bix(&x->t, 2, i), fz_bix(&x->t, 3, j)));
}

static int64_t bias_off(int64_t b, int64_t h, int64_t i, int64_t j)
{
    const sdpa_tensor *t = &g_t[T_BIAS].t;
    return fz_off4(t, fz_bix(t, 0, b), fz_bix(t, 1, h), fz_bix(t, 2, i),
                   fz_bix(t, 3, j));
}

static int forbidden(const cfg *c, int64_t b, int64_t h, int64_t i, int64_t j)
{
    int64_t L = c->len[b];
    if (j >= L)
        return 1;
    if (g_t[T_MASK].present) {
        const sdpa_tensor *m = &g_t[T_MASK].t;
        unsigned char v =
            ((const unsigned char *)
                 m->data)[fz_off4(m, fz_bix(m, 0, b), fz_bix(m, 1, h),
                                  fz_bix(m, 2, i), fz_bix(m, 3, j))];
        if (c->mask_allows ? v == 0 : v != 0)
            return 1;
    }
    if (!ref_causal_allows(c->causal, i, j, L, c->Tq))
        return 1;
    if (c->window) {
        int64_t d = c->causal == SDPA_CAUSAL_TOP_LEFT ? i : i + (L - c->Tq);
        if ((c->wl != -1 && j - d < -c->wl) || (c->wr != -1 && j - d > c->wr))
            return 1;
    }
    if (g_t[T_BIAS].present && bias_at(b, h, i, j) == -INFINITY)
        return 1;
    return 0;
}

static size_t row_at(const cfg *c, int64_t b, int64_t h, int64_t i)
{
    return (size_t)((b * c->Hq + h) * c->Tq + i);
}

static size_t seen_at(const cfg *c, int64_t b, int64_t hk, int64_t j)
{
    return (size_t)((b * c->Hkv + hk) * c->Tk + j);
}

/* 1 when row (b, h, i) has an allowed key */
static int row_any(const cfg *c, size_t row)
{
    for (int64_t j = 0; j < c->Tk; j++)
        if (g_allowed[row * (size_t)c->Tk + (size_t)j])
            return 1;
    return 0;
}

static void compute_allowed(cfg *c, int *any_empty)
{
    g_allowed = calloc((size_t)(c->N * c->Hq * c->Tq * c->Tk), 1);
    g_seen = calloc((size_t)(c->N * c->Hkv * c->Tk), 1);
    if (!g_allowed || !g_seen)
        abort();
    *any_empty = 0;
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++) {
                size_t row = row_at(c, b, h, i);
                for (int64_t j = 0; j < c->Tk; j++) {
                    int ok = !forbidden(c, b, h, i, j);
                    g_allowed[row * (size_t)c->Tk + (size_t)j] =
                        (unsigned char)ok;
                    if (ok)
                        g_seen[seen_at(c, b, h / c->g, j)] = 1;
                }
                if (!row_any(c, row))
                    *any_empty = 1;
            }
}

/* Offset of logical K/V element (b, hk, j, d) in view t (the pool through
 * the valid table when paged). j must lie in a used page. */
static int64_t kv_off(const cfg *c, const sdpa_tensor *t, int64_t b, int64_t hk,
                      int64_t j, int64_t d)
{
    if (c->paged)
        return fz_off4(t, c->tvals[b * c->tstride + j / c->page], hk,
                       j % c->page, d);
    return fz_off4(t, fz_bix(t, 0, b), hk, j, d);
}

/* ------------------------------------------------------------------------ */
/* Values.                                                                   */
/* ------------------------------------------------------------------------ */
static double spread(void)
{
    return fld(F_SPREAD) % 4 == 3 ? ldexp(1.0, -(int)fz_below(24)) : 1.0;
}

static void fill_values(cfg *c)
{
    double se = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->Dk);
    double target = 0.5 + 20.0 * (double)fld(F_AMP) / 255.0;
    double amp = sqrt(target / (se * (double)c->Dk));
    st_tens *Q = &g_t[T_Q];
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++)
                for (int64_t d = 0; d < c->Dk; d++)
                    ty_store(Q->t.data, Q->type, fz_off4(&Q->t, b, h, i, d),
                             half_codec_round(fz_sym(amp) * spread(), Q->type));
    if (g_t[T_MASK].present) {
        static const double dens[8] = {0.05, 0.2, 0.5, 0.9, 0.0, 1.0, 0.1, 0.3};
        double p = dens[fld(F_MASK_DENS) % 8];
        st_tens *M = &g_t[T_MASK];
        size_t n = view_span(&M->t);
        unsigned char *m = M->t.data;
        for (size_t i = 0; i < n; i++) {
            int forbid = fz_unit() < p;
            unsigned char nz = (unsigned char)(1 + fz_rnd() % 255);
            m[i] = (unsigned char)(c->mask_allows ? (forbid ? 0 : nz)
                                                  : (forbid ? nz : 0));
        }
    }
    if (g_t[T_BIAS].present) {
        static const double ninf[4] = {0.0, 0.15, 0.5, 1.0};
        static const double bamp[4] = {1.5, 0.0, 10.0, 100.0};
        unsigned bv = fld(F_BIAS_VAL);
        double p = ninf[bv % 4], ba = bamp[(bv >> 2) % 4];
        st_tens *B = &g_t[T_BIAS];
        size_t n = view_span(&B->t);
        for (size_t i = 0; i < n; i++)
            ty_store(B->t.data, B->type, (int64_t)i,
                     fz_unit() < p ? -INFINITY
                                   : half_codec_round(fz_sym(ba), B->type));
    }
}

/* K and V values where a row of the group may see the key; everything
 * else stays NaN. */
static void fill_kv(cfg *c)
{
    unsigned vv = fld(F_VAMP);
    double vamp = 1.0;
    if (vv % 8 == 6)
        vamp = ldexp(1.0, -14 - (int)((vv >> 3) % 12)); /* float16 subnormals */
    else if (vv % 8 == 7)
        vamp = 40000.0 * (double)(1 + (vv >> 3) % 8); /* float16's range */
    double se = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->Dk);
    double target = 0.5 + 20.0 * (double)fld(F_AMP) / 255.0;
    double amp = sqrt(target / (se * (double)c->Dk));
    st_tens *K = &g_t[T_K], *V = &g_t[T_V];
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t hk = 0; hk < c->Hkv; hk++)
            for (int64_t j = 0; j < c->len[b]; j++) {
                if (!g_seen[seen_at(c, b, hk, j)])
                    continue;
                for (int64_t d = 0; d < c->Dk; d++)
                    ty_store(K->t.data, K->type, kv_off(c, &K->t, b, hk, j, d),
                             half_codec_round(fz_sym(amp) * spread(), K->type));
                for (int64_t d = 0; d < c->Dv; d++)
                    ty_store(V->t.data, V->type, kv_off(c, &V->t, b, hk, j, d),
                             half_codec_round(fz_sym(vamp), V->type));
            }
}

/* The contiguous copies of the pages: the raw elements of every used
 * page, NaN past them. */
static void fill_contiguous(cfg *c)
{
    const int src[2] = {T_K, T_V}, dst[2] = {T_KC, T_VC};
    for (int x = 0; x < 2; x++) {
        st_tens *S = &g_t[src[x]], *D = &g_t[dst[x]];
        size_t es = ty_size(S->type);
        int64_t dim = S->t.shape[3];
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t hk = 0; hk < c->Hkv; hk++)
                for (int64_t j = 0; j < c->used[b] * c->page; j++)
                    for (int64_t d = 0; d < dim; d++)
                        memcpy((char *)D->t.data +
                                   (size_t)fz_off4(&D->t, b, hk, j, d) * es,
                               (const char *)S->t.data +
                                   (size_t)kv_off(c, &S->t, b, hk, j, d) * es,
                               es);
    }
}

/* A copy of x's span in type ct, same strides (NaN stays NaN). */
static void *widen_copy(const st_tens *x, int ct)
{
    size_t n = view_span(&x->t);
    void *w = malloc(n * ty_size(ct));
    if (!w)
        abort();
    for (size_t i = 0; i < n; i++)
        ty_store(w, ct, (int64_t)i, ty_load(x->t.data, x->type, (int64_t)i));
    return w;
}

/* Logical [N, Hkv, Tk, D] K or V in type ct for the reference: NaN past
 * the used pages. */
static void *logical_kv(const cfg *c, int t, sdpa_tensor *view)
{
    const st_tens *S = &g_t[t];
    int64_t dim = S->t.shape[3];
    size_t n = (size_t)(c->N * c->Hkv * c->Tk * dim);
    void *w = malloc(n * ty_size(c->ct));
    if (!w)
        abort();
    *view = sdpa_tensor_bhtd(w, c->N, c->Hkv, c->Tk, dim);
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t hk = 0; hk < c->Hkv; hk++)
            for (int64_t j = 0; j < c->Tk; j++)
                for (int64_t d = 0; d < dim; d++) {
                    int in = c->paged ? j < c->used[b] * c->page : 1;
                    double v = in ? ty_load(S->t.data, S->type,
                                            kv_off(c, &S->t, b, hk, j, d))
                                  : NAN;
                    ty_store(w, c->ct, fz_off4(view, b, hk, j, d), v);
                }
    return w;
}

/* ------------------------------------------------------------------------ */
/* Special values.                                                           */
/* ------------------------------------------------------------------------ */
typedef struct specials {
    int nf_certain, nf_possible;
    int v_key; /* a V element made non-finite: key (b, hk, j), or -1 */
    int64_t vb, vhk, vj;
    int large_v; /* V near or beyond float16's range */
} specials;

/* A random key some row sees: (b, hk, j); 0 when there is none. */
static int pick_seen(const cfg *c, int64_t *b, int64_t *hk, int64_t *j)
{
    size_t n = (size_t)(c->N * c->Hkv * c->Tk), count = 0;
    for (size_t k = 0; k < n; k++)
        count += g_seen[k];
    if (!count)
        return 0;
    size_t want = (size_t)(fld(F_SP_POS) * 7919u) % count;
    for (size_t k = 0; k < n; k++)
        if (g_seen[k] && want-- == 0) {
            *j = (int64_t)(k % (size_t)c->Tk);
            *hk = (int64_t)(k / (size_t)c->Tk % (size_t)c->Hkv);
            *b = (int64_t)(k / (size_t)(c->Tk * c->Hkv));
            return 1;
        }
    return 0;
}

/* A random allowed (row, key): 0 when there is none. */
static int pick_allowed(const cfg *c, int64_t *b, int64_t *h, int64_t *i,
                        int64_t *j)
{
    size_t n = (size_t)(c->N * c->Hq * c->Tq * c->Tk), count = 0;
    for (size_t k = 0; k < n; k++)
        count += g_allowed[k];
    if (!count)
        return 0;
    size_t want = (size_t)(fld(F_SP_POS) * 7919u) % count;
    for (size_t k = 0; k < n; k++)
        if (g_allowed[k] && want-- == 0) {
            size_t row = k / (size_t)c->Tk;
            *j = (int64_t)(k % (size_t)c->Tk);
            *i = (int64_t)(row % (size_t)c->Tq);
            *h = (int64_t)(row / (size_t)c->Tq % (size_t)c->Hq);
            *b = (int64_t)(row / (size_t)(c->Tq * c->Hq));
            return 1;
        }
    return 0;
}

static void inject_special(cfg *c, specials *s)
{
    memset(s, 0, sizeof *s);
    s->v_key = -1;
    s->large_v = fld(F_VAMP) % 8 == 7;
    unsigned kind = fld(F_SPECIAL) % 8;
    int64_t b, h, i, j, hk;
    switch (kind) {
    case 4: /* NaN in q, in a row with an allowed key */
        if (pick_allowed(c, &b, &h, &i, &j)) {
            st_tens *Q = &g_t[T_Q];
            ty_store(Q->t.data, Q->type,
                     fz_off4(&Q->t, b, h, i, fz_below(c->Dk)), NAN);
            s->nf_certain = 1;
        }
        break;
    case 5: /* NaN in a K row that some row sees */
        if (pick_seen(c, &b, &hk, &j)) {
            st_tens *K = &g_t[T_K];
            ty_store(K->t.data, K->type,
                     kv_off(c, &K->t, b, hk, j, fz_below(c->Dk)), NAN);
            s->nf_certain = 1;
        }
        break;
    case 6: /* NaN in a V row that some row sees */
        if (pick_seen(c, &b, &hk, &j)) {
            st_tens *V = &g_t[T_V];
            ty_store(V->t.data, V->type,
                     kv_off(c, &V->t, b, hk, j, fz_below(c->Dv)), NAN);
            s->v_key = 1, s->vb = b, s->vhk = hk, s->vj = j;
        }
        break;
    case 7: /* +inf or NaN in the bias at an allowed key */
        if (g_t[T_BIAS].present && pick_allowed(c, &b, &h, &i, &j)) {
            st_tens *B = &g_t[T_BIAS];
            ty_store(B->t.data, B->type, bias_off(b, h, i, j),
                     fld(F_SPECIAL) & 8 ? NAN : INFINITY);
            s->nf_certain = 1;
        }
        break;
    default:
        break;
    }
    /* float16 V beyond 65504 rounded to inf: a non-finite V row read */
    if (s->large_v && s->v_key < 0) {
        const st_tens *V = &g_t[T_V];
        for (int64_t bb = 0; bb < c->N && s->v_key < 0; bb++)
            for (int64_t k = 0; k < c->Hkv && s->v_key < 0; k++)
                for (int64_t jj = 0; jj < c->len[bb] && s->v_key < 0; jj++)
                    for (int64_t d = 0;
                         d < c->Dv && g_seen[seen_at(c, bb, k, jj)]; d++)
                        if (!isfinite(
                                ty_load(V->t.data, V->type,
                                        kv_off(c, &V->t, bb, k, jj, d)))) {
                            s->v_key = 1, s->vb = bb, s->vhk = k, s->vj = jj;
                            break;
                        }
    }
}

/* ------------------------------------------------------------------------ */
/* Injected refusals.                                                        */
/* ------------------------------------------------------------------------ */
typedef struct injected {
    fz_sset errs;
    char words[160]; /* what the message must hold when it is the only error */
} injected;

static void inject_error(cfg *c, injected *in)
{
    unsigned v = fld(F_ERR), val = fld(F_ERR_VAL);
    in->words[0] = '\0';
    switch (v % 16) {
    case 8: /* paging fields without a table */
        if (c->paged) {
            c->table_null = 1;
            snprintf(in->words, sizeof in->words, "block_table is NULL");
        } else if (val & 1) {
            c->arg_pps = 1 + (int64_t)(val % 3);
            c->arg_stride = 0;
        } else {
            c->arg_pps = 0;
            c->arg_stride = 1 + (int64_t)(val % 5);
        }
        if (!c->paged)
            snprintf(in->words, sizeof in->words,
                     "pages_per_seq %lld and block_table_stride %lld are set "
                     "but block_table is NULL",
                     (long long)c->arg_pps, (long long)c->arg_stride);
        in->errs |= FZ_BIT(SDPA_ERR_BAD_PAGE);
        break;
    case 9: /* pages_per_seq out of range */
        if (c->paged) {
            static const int64_t bad[5] = {0, -1, INT64_MIN,
                                           (int64_t)INT_MAX + 1, INT64_MAX};
            c->arg_pps = bad[val % 5];
            if (c->arg_stride != 0 && c->arg_pps > c->arg_stride)
                c->arg_stride = 0;
            snprintf(in->words, sizeof in->words, "pages_per_seq is %lld",
                     (long long)c->arg_pps);
            in->errs |= FZ_BIT(SDPA_ERR_BAD_PAGE);
        }
        break;
    case 10: /* a table stride below pages_per_seq */
        if (c->paged) {
            static const int64_t neg[3] = {-1, -7, INT64_MIN};
            c->arg_stride = c->pps >= 2
                                ? 1 + (int64_t)(val % (unsigned)(c->pps - 1))
                                : neg[val % 3];
            snprintf(in->words, sizeof in->words,
                     "block_table_stride is %lld, below pages_per_seq %lld",
                     (long long)c->arg_stride, (long long)c->pps);
            in->errs |= FZ_BIT(SDPA_ERR_BAD_PAGE);
        }
        break;
    case 11:   /* an entry of a page with valid keys outside the pool */
    case 12: { /* ... and of a page past them: no error */
        if (!c->paged)
            break;
        int used = v % 16 == 11;
        int64_t count = 0;
        for (int64_t b = 0; b < c->N; b++)
            count += used ? c->used[b] : c->tstride - c->used[b];
        if (!count)
            break;
        int64_t want = (int64_t)((val * 7919u) % (uint64_t)count), b = 0,
                col = 0;
        for (b = 0; b < c->N; b++) {
            int64_t n = used ? c->used[b] : c->tstride - c->used[b];
            if (want < n) {
                col = used ? want : c->used[b] + want;
                break;
            }
            want -= n;
        }
        const int64_t bad[5] = {-1, c->P, c->P + 7, INT32_MAX, INT32_MIN};
        int32_t e = (int32_t)bad[(val >> 4) % 5];
        g_table[b * c->tstride + col] = e;
        if (used) {
            /* the first bad entry in (b, col) order is named */
            snprintf(in->words, sizeof in->words,
                     "block_table[%lld][%lld] is %d, outside the pool's %lld "
                     "pages",
                     (long long)b, (long long)col, e, (long long)c->P);
            in->errs |= FZ_BIT(SDPA_ERR_BAD_PAGE);
        }
        break;
    }
    case 13: /* pages_per_seq times the page length beyond the BLAS int */
        if (c->paged && c->page >= 2) {
            c->arg_pps = INT_MAX / c->page + 1;
            c->arg_stride = 0;
            snprintf(in->words, sizeof in->words, "overflows the key count");
            in->errs |= FZ_BIT(SDPA_ERR_OVERFLOW);
        }
        break;
    case 14: { /* shapes that disagree with the pool or the logical Tk */
        int sub = (int)(val % 4);
        if (sub == 0) { /* v's pages */
            if (!c->paged)
                break;
            g_t[T_V].t.shape[0] = c->P + 1;
        } else if (sub == 1) { /* v's page length (Tk unpaged) */
            g_t[T_V].t.shape[2] += 1;
        } else { /* a [.., Tk] tensor given the page length */
            int t = sub == 2 ? T_BIAS : T_W;
            if (!g_t[t].present || c->pps < 2)
                break;
            /* (an extent of 1 broadcasts: then one key too many) */
            g_t[t].t.shape[3] = c->page == 1 ? c->Tk + 1 : c->page;
        }
        in->errs |= FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
        break;
    }
    case 15: /* a table row stride whose rows pass the address space: one
              * row never uses it */
        if (c->paged) {
            static const int64_t huge[3] = {INT64_C(1) << 62, INT64_MAX,
                                            INT64_C(3) << 61};
            c->arg_stride = huge[val % 3];
            if (c->N > 1) {
                snprintf(in->words, sizeof in->words,
                         "the block table (%lld rows of stride %lld) "
                         "overflows the address space",
                         (long long)c->N, (long long)c->arg_stride);
                in->errs |= FZ_BIT(SDPA_ERR_OVERFLOW);
            }
        }
        break;
    default:
        break;
    }
}

/* ------------------------------------------------------------------------ */
/* Checks of a computed call.                                                */
/* ------------------------------------------------------------------------ */
static void check_finite_out(const cfg *c, const char *what)
{
    const st_tens *O = &g_t[T_OUT];
    for (int64_t b = 0; b < c->N; b++)
        for (int64_t h = 0; h < c->Hq; h++)
            for (int64_t i = 0; i < c->Tq; i++)
                for (int64_t d = 0; d < c->Dv; d++) {
                    double v =
                        ty_load(O->t.data, O->type, fz_off4(&O->t, b, h, i, d));
                    CHECK(isfinite(v),
                          "%s: SDPA_OK with out[%lld,%lld,%lld,%lld] "
                          "= %g",
                          what, (long long)b, (long long)h, (long long)i,
                          (long long)d, v);
                }
}

static void check_values(const cfg *c, const ref_result *ref,
                         const test_tol *tol, int check_vals)
{
    const int half_out = is_half(c->qt);
    sdpa_tensor ov = g_t[T_OUT].t;
    void *wide = NULL;
    if (half_out) {
        wide = widen_copy(&g_t[T_OUT], c->ct);
        ov.data = wide;
    }
    fz_att_views v = {&ov,
                      g_t[T_W].present ? &g_t[T_W].t : NULL,
                      g_t[T_LSE].present ? &g_t[T_LSE].t : NULL,
                      g_t[T_LG].present ? &g_t[T_LG].t : NULL,
                      g_t[T_MW].present ? &g_t[T_MW].t : NULL,
                      g_t[T_EN].present ? &g_t[T_EN].t : NULL,
                      ty_size(c->ct),
                      c->stage,
                      c->sinks};
    fz_check_attention(ref, tol, &v, check_vals, !half_out);
    if (half_out && check_vals) {
        /* one more rounding, to the half type: half an ulp relative, and
         * float16's subnormal spacing 2^-24 near 0 */
        const double u = c->qt == SDPA_FLOAT16 ? 0x1p-11 : 0x1p-8;
        const double sub = c->qt == SDPA_FLOAT16 ? 0x1p-24 : 0x1p-133;
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t h = 0; h < c->Hq; h++)
                for (int64_t i = 0; i < c->Tq; i++) {
                    size_t row = row_at(c, b, h, i);
                    for (int64_t d = 0; d < c->Dv; d++) {
                        double got =
                            ty_load(wide, c->ct, fz_off4(&ov, b, h, i, d));
                        double want =
                            (double)ref->out[row * (size_t)c->Dv + (size_t)d];
                        double bound =
                            tol->out + u * (fabs(want) + tol->out) + sub;
                        CHECK(fabs(got - want) <= bound,
                              "half out[%lld,%lld,%lld,%lld] = %.9g, reference "
                              "%.9g, bound %.3g (float32 part %.3g)",
                              (long long)b, (long long)h, (long long)i,
                              (long long)d, got, want, bound, tol->out);
                    }
                }
    }
    free(wide);
}

static int computed(int st)
{
    return st == SDPA_OK || st == SDPA_ERR_NONFINITE ||
           st == SDPA_ERR_PARALLEL_FOR;
}

static unsigned char *outputs_now(size_t *n)
{
    return fz_outputs_copy(n);
}

static void check_same_bits(const unsigned char *a, size_t na, const char *what)
{
    size_t nb;
    unsigned char *b = outputs_now(&nb);
    CHECK(na == nb && memcmp(a, b, na) == 0, "%s: outputs differ", what);
    free(b);
}

/* ------------------------------------------------------------------------ */
/* One input.                                                                */
/* ------------------------------------------------------------------------ */
static void setup_pool(cfg *c, sdpa_ctx *ctx)
{
    unsigned tm = fld(F_THREADS), wv = fld(F_WORKERS);
    static const int wtab[8] = {1, 2, 3, 4, 5, 8, 256, 2};
    memset(&g_pool, 0, sizeof g_pool);
    c->pool_mode = tm % 8 == 7 ? 2 : tm % 8 >= 5 ? 1 : 0;
    if (c->pool_mode == 0) {
        static const int64_t th[5] = {1, 1, 2, 3, SDPA_NUM_THREADS_ALL};
        c->threads = set_option(ctx, SDPA_OPT_NUM_THREADS, th[tm % 8]);
        return;
    }
    c->threads = set_option(ctx, SDPA_OPT_NUM_THREADS, 1 + (tm >> 3) % 3);
    c->workers = wtab[wv % 8];
    c->pool_unset = (tm & 0x40) != 0;
    hpool *p = &g_pool;
    p->workers = c->workers;
    p->threaded = c->pool_mode == 2;
    p->order = fld(F_ORDER);
    p->wmode = fld(F_ORDER) >> 2;
    static const int breaches[16] = {
        BR_NONE,       BR_NONE,   BR_NONE,           BR_NONE,
        BR_NONE,       BR_NONE,   BR_REENTER,        BR_LATE,
        BR_SKIP,       BR_REPEAT, BR_WORKER_REPLACE, BR_WORKER_EXTRA,
        BR_ITEM_EXTRA, BR_SWAP,   BR_BUSY,           BR_SKIP};
    p->breach = breaches[fld(F_BREACH) % 16];
    p->ctx = ctx;
    if (p->breach == BR_BUSY && !p->threaded)
        p->breach = BR_NONE;
    p->bad_sel = fld(F_BREACH) >> 4;
    p->breach_sel = fld(F_BREACH_AT) >> 2;
    p->breach_inv = (int)(fld(F_BREACH_AT) % 4) - 1; /* -1, 0, 1, 2 */
    if (p->breach_inv == 2)
        p->breach_inv = 0;
    p->rng = fz_seed64(F_SEED0) ^ 0x5eed;
    if (wv & 0x08) { /* a refused workers value: the context keeps none */
        static const int bad[4] = {0, 257, -1, INT_MIN};
        int st = sdpa_ctx_set_parallel_for(ctx, poison_parallel_for, NULL,
                                           bad[(wv >> 6) % 4]);
        CHECK(st == SDPA_ERR_BAD_OPTION_VALUE,
              "set_parallel_for with workers %d gave %d", bad[(wv >> 6) % 4],
              st);
        CHECK(sdpa_ctx_last_error(ctx)[0] != '\0',
              "refused set_parallel_for without a message");
    }
    if (wv & 0x10) /* set, then replaced */
        CHECK(sdpa_ctx_set_parallel_for(ctx, poison_parallel_for, NULL, 2) ==
                  SDPA_OK,
              "set_parallel_for");
    if (wv & 0x20)
        CHECK(sdpa_ctx_set_parallel_for(NULL, harness_parallel_for, p, 2) ==
                  SDPA_ERR_NULL_POINTER,
              "set_parallel_for(NULL ctx)");
    int st =
        sdpa_ctx_set_parallel_for(ctx, harness_parallel_for, p, c->workers);
    CHECK(st == SDPA_OK, "set_parallel_for(%d workers) gave %d: %s", c->workers,
          st, sdpa_ctx_last_error(ctx));
    CHECK(sdpa_ctx_last_error(ctx)[0] == '\0',
          "message after a successful set_parallel_for");
    if (c->pool_unset)
        CHECK(sdpa_ctx_set_parallel_for(ctx, NULL, NULL, (int)(wv >> 5)) ==
                  SDPA_OK,
              "unsetting the parallel-for");
}

static void setup_ctx(cfg *c, sdpa_ctx *ctx)
{
    unsigned kv = fld(F_KERNEL), pv = fld(F_PATH);
    static const int64_t kernels[6] = {
        SDPA_KERNEL_AUTO,   SDPA_KERNEL_PORTABLE, SDPA_KERNEL_AVX2,
        SDPA_KERNEL_AVX512, SDPA_KERNEL_PORTABLE, SDPA_KERNEL_AVX512};
    static const int64_t bad_kernels[4] = {4, -1, 1000, INT64_MAX};
    if (kv % 8 < 6)
        (void)set_option(ctx, SDPA_OPT_KERNEL, kernels[kv % 8]);
    else if (kv % 8 == 6)
        (void)set_option(ctx, SDPA_OPT_KERNEL, bad_kernels[(kv >> 3) % 4]);
    CHECK(sdpa_ctx_get_int(ctx, SDPA_OPT_KERNEL, &c->kernel) == SDPA_OK,
          "get kernel");
    static const int64_t paths[8] = {-1,
                                     SDPA_PATH_MATERIALISED,
                                     SDPA_PATH_TILED,
                                     SDPA_PATH_DECODE,
                                     SDPA_PATH_DECODE_BLAS,
                                     SDPA_PATH_AUTO,
                                     -2,
                                     SDPA_PATH_DECODE};
    static const int64_t bad_paths[4] = {5, -1, INT64_MIN, 100};
    int64_t path = paths[pv % 8];
    if (path == -2)
        path = bad_paths[(pv >> 3) % 4];
    c->path =
        path == -1 ? SDPA_PATH_AUTO : set_option(ctx, SDPA_OPT_PATH, path);
    unsigned bq = fld(F_BLOCK_Q), bk = fld(F_BLOCK_K), sl = fld(F_SCRATCH);
    if (bq % 8 >= 4)
        (void)set_option(ctx, SDPA_OPT_BLOCK_Q,
                         bq >= 248 ? (INT64_C(1) << 20) + 1
                                   : 1 + (int64_t)((bq >> 3) % 8));
    if (bk % 8 >= 4)
        (void)set_option(ctx, SDPA_OPT_BLOCK_K,
                         bk >= 248 ? -1 : 1 + (int64_t)((bk >> 3) % 16));
    if (sl % 4 == 3) {
        static const int64_t lim[4] = {64, 256, 1024, 4096};
        (void)set_option(ctx, SDPA_OPT_SCRATCH_LIMIT, lim[(sl >> 2) % 4]);
    }
    c->empty_zero =
        (int)set_option(ctx, SDPA_OPT_EMPTY_ROWS, (int64_t)(fld(F_EMPTY) & 1));
    setup_pool(c, ctx);
}

static void run_one(void)
{
    cfg *c = &g_c;
    injected in;
    memset(&in, 0, sizeof in);
    decode_types(c, &in.errs);
    decode_shapes(c);
    decode_lens(c, &in.errs);
    if (c->paged)
        decode_paging(c);
    decode_options(c);
    set_layouts(c);
    arena ar;
    alloc_all(c, &ar);
    if (ar.overlap)
        in.errs |= FZ_BIT(SDPA_ERR_OVERLAP);
    fill_values(c);
    int any_empty;
    compute_allowed(c, &any_empty);
    fill_kv(c);
    specials sp;
    inject_special(c, &sp);
    if (c->paged) { /* the copies hold the special values too */
        memcpy(g_table, c->tvals,
               (size_t)(c->N * c->tstride) * sizeof(int32_t));
        fill_contiguous(c);
    }
    inject_error(c, &in);
    const int single_err = (in.errs & (in.errs - 1)) == 0 && in.words[0];

    /* the arguments */
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.kv_dtype = c->kv_field;
    a.bias_dtype = c->bias_field;
    a.causal = c->causal;
    a.flags = c->flags;
    a.scale = c->scale;
    a.softcap = c->softcap;
    a.kv_lens = c->use_kvlens ? g_kvlens : NULL;
    a.q = g_t[T_Q].t;
    a.k = g_t[T_K].t;
    a.v = g_t[T_V].t;
    a.out = g_t[T_OUT].t;
    if (g_t[T_MASK].present)
        a.mask = g_t[T_MASK].t;
    if (g_t[T_BIAS].present)
        a.bias = g_t[T_BIAS].t;
    if (g_t[T_W].present)
        a.weights = g_t[T_W].t;
    if (g_t[T_LSE].present)
        a.lse = g_t[T_LSE].t;
    if (g_t[T_LG].present)
        a.logits = g_t[T_LG].t;
    a.logits_stage = c->stage;
    if (g_t[T_MW].present)
        a.max_weight = g_t[T_MW].t;
    if (g_t[T_EN].present)
        a.entropy = g_t[T_EN].t;
    a.window_left = c->wl;
    a.window_right = c->wr;
    a.alibi_slopes = c->slopes;
    a.sinks = c->sinks;
    if (c->paged) {
        a.block_table = c->table_null ? NULL : g_table;
        a.pages_per_seq = c->arg_pps;
        a.block_table_stride = c->arg_stride;
    } else {
        a.pages_per_seq = c->arg_pps;
        a.block_table_stride = c->arg_stride;
    }

    sdpa_ctx *ctx = fz_ctx_new();
    setup_ctx(c, ctx);
    describe("");

    /* the reference and the statuses the call may give */
    ref_result ref;
    memset(&ref, 0, sizeof ref);
    test_tol tol;
    memset(&tol, 0, sizeof tol);
    int have_ref = in.errs == 0;
    int check_vals = 0;
    fz_sset expect = in.errs;
    if (have_ref) {
        sdpa_forward_args ra = a;
        ra.dtype = c->ct;
        ra.kv_dtype = ra.bias_dtype = 0;
        ra.block_table = NULL;
        ra.pages_per_seq = ra.block_table_stride = 0;
        void *rq = widen_copy(&g_t[T_Q], c->ct);
        void *rk = logical_kv(c, T_K, &ra.k);
        void *rv = logical_kv(c, T_V, &ra.v);
        void *rb = g_t[T_BIAS].present ? widen_copy(&g_t[T_BIAS], c->ct) : NULL;
        ra.q.data = rq;
        if (rb)
            ra.bias.data = rb;
        CHECK(ref_forward(&ra, &ref) == 0, "reference out of memory");
        free(rq);
        free(rk);
        free(rv);
        free(rb);
        size_t cells = (size_t)(c->N * c->Hq * c->Tq * c->Tk);
        for (size_t k = 0; k < cells; k++)
            CHECK(ref.allowed[k] == g_allowed[k],
                  "harness and reference disagree on cell %zu", k);
        const double eps = c->ct == SDPA_FLOAT64 ? DBL_EPSILON : FLT_EPSILON;
        tol = tp_forward_tol(eps, &ref, c->Tk, c->Dk, c->softcap,
                             c->sinks != NULL, 0, 0);
        /* a non-finite V element some row sees: NaN for sure where a row
         * gives it a weight that is not 0 */
        if (sp.v_key >= 0) {
            int weight = 0;
            for (int64_t h = sp.vhk * c->g; h < (sp.vhk + 1) * c->g; h++)
                for (int64_t i = 0; i < c->Tq; i++) {
                    size_t row = row_at(c, sp.vb, h, i);
                    if (ref.weights[row * (size_t)c->Tk + (size_t)sp.vj] >
                        1e-30L)
                        weight = 1;
                }
            if (weight)
                sp.nf_certain = 1;
            else
                sp.nf_possible = 1;
        }
        /* out that rounds to infinity in float16 (|x| >= 65520; below,
         * it rounds to 65504 and is no error) */
        if (c->qt == SDPA_FLOAT16 && sp.v_key < 0 && !sp.nf_certain) {
            size_t n = (size_t)(c->N * c->Hq * c->Tq * c->Dv);
            for (size_t k = 0; k < n; k++) {
                double r = fabs((double)ref.out[k]);
                if (r - tol.out >= 65520.0)
                    sp.nf_certain = 1;
                else if (r + tol.out >= 65520.0)
                    sp.nf_possible = 1;
            }
        }
        int empty_err = any_empty && !c->empty_zero && !c->sinks;
        int unsupported =
            (g_t[T_W].present || g_t[T_LG].present) &&
            (c->path == SDPA_PATH_TILED || c->path == SDPA_PATH_DECODE ||
             c->path == SDPA_PATH_DECODE_BLAS);
        if (empty_err)
            expect = FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
        else if (unsupported)
            expect = FZ_BIT(SDPA_ERR_UNSUPPORTED);
        else {
            if (!sp.nf_certain)
                expect |= FZ_BIT(SDPA_OK);
            if (sp.nf_certain || sp.nf_possible)
                expect |= FZ_BIT(SDPA_ERR_NONFINITE);
        }
        const double vals_max = 1e3;
        check_vals = !sp.nf_certain && !sp.nf_possible && sp.v_key < 0 &&
                     (double)(ref.logit_absmax + ref.alibi_absmax +
                              ref.sink_absmax) <= vals_max &&
                     c->softcap <= vals_max;
    }
    char extra[160];
    snprintf(extra, sizeof extra,
             "expect=0x%llx specials{certain=%d possible=%d v_key=%d "
             "large_v=%d} "
             "arena{x=%d y=%d overlap=%d}",
             (unsigned long long)expect, sp.nf_certain, sp.nf_possible,
             sp.v_key, sp.large_v, ar.x, ar.y, ar.overlap);
    describe(extra);

    /* 1. the workspace query */
    fz_snapshot();
    long allocs0 = fz_alloc_count();
    size_t ws_bytes = 0;
    int ws = sdpa_forward_workspace(ctx, &a, &ws_bytes);
    CHECK(fz_documented(ws), "workspace status %d", ws);
    CHECK(fz_alloc_count() == allocs0, "sdpa_forward_workspace allocated");
    fz_check_bufs(1, 0, "workspace");
    CHECK(g_pool.invocations == 0, "the workspace query ran the parallel-for");
    CHECK((ws == SDPA_OK) == (sdpa_ctx_last_error(ctx)[0] == '\0'),
          "workspace status %d with the message \"%s\"", ws,
          sdpa_ctx_last_error(ctx));

    /* 2. the call */
    int st = sdpa_forward(ctx, &a);
    const char *msg = sdpa_ctx_last_error(ctx);
    char main_msg[256]; /* the workspace query below clears the message */
    snprintf(main_msg, sizeof main_msg, "%s", msg);
    const int pool_on = c->pool_mode && !c->pool_unset;
    fz_sset expect_main = expect;
    if (pool_on && g_pool.breached) {
        expect_main = FZ_BIT(SDPA_ERR_PARALLEL_FOR);
    }
    if (pool_on && g_pool.busy)
        expect_main |= FZ_BIT(SDPA_ERR_PARALLEL_FOR);
    fz_check_status("sdpa_forward", st, expect_main, ctx);
    CHECK(strcmp(sdpa_status_string(st), "unknown status") != 0,
          "status %d has no text", st);
    if (computed(st))
        CHECK(ws == SDPA_OK, "forward %d but workspace %d", st, ws);
    else
        CHECK(ws == st, "forward status %d, workspace status %d", st, ws);
    if (st == SDPA_ERR_PARALLEL_FOR)
        CHECK(strstr(msg, "parallel-for") != NULL,
              "PARALLEL_FOR message lacks \"parallel-for\": %s", msg);
    if (single_err && st != SDPA_OK)
        CHECK(strstr(msg, in.words) != NULL, "message \"%s\" lacks \"%s\"", msg,
              in.words);
    if (!c->pool_mode || c->pool_unset)
        CHECK(g_pool.invocations == 0, "an unset parallel-for was called");
    if (pool_on && computed(st) && c->path == SDPA_PATH_DECODE &&
        c->workers >= 2 && c->N * c->Hkv >= 2)
        CHECK(g_pool.invocations >= 1,
              "the streaming decode left the parallel-for uncalled");
    if (!computed(st))
        fz_check_bufs(1, 0, "refused call");
    else
        fz_check_bufs(0, 1, "call");
    if (st == SDPA_OK) {
        check_finite_out(c, "call");
        if (have_ref)
            check_values(c, &ref, &tol, check_vals);
    }
    size_t ws_after = 0;
    if (computed(st)) {
        long a0 = fz_alloc_count();
        CHECK(sdpa_forward_workspace(ctx, &a, &ws_after) == SDPA_OK,
              "workspace after the call");
        CHECK(fz_alloc_count() == a0, "workspace allocated");
        CHECK(ws_after == ws_bytes,
              "workspace said %zu bytes before the call, "
              "%zu after",
              ws_bytes, ws_after);
    }
    if (!computed(st)) {
        if (have_ref)
            ref_free(&ref);
        fz_ctx_end(ctx);
        return;
    }
    size_t n_main;
    unsigned char *main_bits = outputs_now(&n_main);

    /* 3. the context's own workers, another thread count: the same bits */
    unsigned sv = fld(F_SECOND);
    static const int64_t th2[4] = {1, 2, 3, SDPA_NUM_THREADS_ALL};
    if (pool_on) {
        CHECK(sdpa_ctx_set_parallel_for(ctx, NULL, NULL, 0) == SDPA_OK,
              "unset the parallel-for");
        CHECK(sdpa_ctx_last_error(ctx)[0] == '\0', "message after unsetting");
    }
    c->threads = set_option(ctx, SDPA_OPT_NUM_THREADS, th2[sv % 4]);
    int inv = g_pool.invocations;
    fz_restore();
    int st2 = sdpa_forward(ctx, &a);
    CHECK(g_pool.invocations == inv, "the parallel-for ran after it was unset");
    if (st == SDPA_OK) {
        CHECK(st2 == SDPA_OK, "status %d, then %d with %lld own workers", st,
              st2, (long long)c->threads);
        fz_check_bufs(0, 1, "own workers");
        check_same_bits(main_bits, n_main,
                        "own workers against the first call");
    } else if (st == SDPA_ERR_NONFINITE) {
        CHECK(st2 == st, "status %d, then %d with %lld own workers", st, st2,
              (long long)c->threads);
        CHECK(strcmp(main_msg, sdpa_ctx_last_error(ctx)) == 0,
              "NONFINITE messages differ: \"%s\" and \"%s\"", main_msg,
              sdpa_ctx_last_error(ctx));
    } else { /* after a breach: the context works as before */
        fz_check_status("sdpa_forward after a breach", st2, expect, ctx);
        fz_check_bufs(0, st2 == SDPA_OK, "after a breach");
        if (st2 == SDPA_OK) {
            check_finite_out(c, "after a breach");
            if (have_ref)
                check_values(c, &ref, &tol, check_vals);
        }
    }
    free(main_bits);
    size_t n_two;
    unsigned char *two_bits = outputs_now(&n_two);
    char two_msg[256];
    snprintf(two_msg, sizeof two_msg, "%s", sdpa_ctx_last_error(ctx));

    /* 4. paged: the same call on contiguous copies of the pages */
    if (c->paged && computed(st2)) {
        sdpa_forward_args b = a;
        b.k = g_t[T_KC].t;
        b.v = g_t[T_VC].t;
        b.block_table = NULL;
        b.pages_per_seq = b.block_table_stride = 0;
        fz_restore();
        int st3 = sdpa_forward(ctx, &b);
        CHECK(st3 == st2, "paged status %d, contiguous %d (%s)", st2, st3,
              sdpa_ctx_last_error(ctx));
        if (st3 == SDPA_OK)
            check_same_bits(two_bits, n_two, "contiguous copy against paged");
        else
            CHECK(strcmp(two_msg, sdpa_ctx_last_error(ctx)) == 0,
                  "messages differ: \"%s\" and \"%s\"", two_msg,
                  sdpa_ctx_last_error(ctx));
    }

    /* 5. the same call again: nothing allocated, the same bits */
    if (sv & 4) {
        fz_restore();
        long a0 = fz_alloc_count();
        int st4 = sdpa_forward(ctx, &a);
        CHECK(st4 == st2, "status %d, then %d", st2, st4);
        CHECK(fz_alloc_count() == a0, "a repeated call allocated");
        if (st4 == SDPA_OK)
            check_same_bits(two_bits, n_two, "a repeated call");
    }
    free(two_bits);
    if (have_ref)
        ref_free(&ref);
    fz_ctx_end(ctx);
}

/* ------------------------------------------------------------------------ */
/* Seeds.                                                                    */
/* ------------------------------------------------------------------------ */
/* Field values (see the decoders above): F_QTYPE 0 float32, 4 float16, 8
 * bfloat16, 12 float64, 14 bad; F_KVTYPE / F_BIASTYPE 0 dtype's, 2
 * float32, 3 float16, 4 bfloat16, 5 float64, 6 bad; F_PAGED 0 contiguous,
 * 1 paged; F_TQ / F_PAGE / F_DK / F_DV v -> 1 + v % 6 (8 for D) below 224;
 * F_PPS v -> 1 + v % 5; F_N v -> 1 + v % 3; F_PATH 1 materialised, 2 tiled, 3
 * decode, 4 decode_blas; F_KERNEL 1 portable, 2 AVX2, 3 AVX-512; F_THREADS 5
 * serial pool, 7 threaded pool, 2 / 3 own threads, 4 NUM_THREADS_ALL; F_BREACH
 * 8 skip, 9 repeat, 10 worker replaced, 11 extra bad worker, 12 extra bad item,
 * 13 swap, 14 busy; F_ERR 8..14 refusals; F_ARENA 5..7 (+ 3 << 3: overlapping).
 */
/* The findings' inputs (README.md) are the regress_* files beside the
 * seeds this table writes. */
static const fz_seed seeds[] = {
    {"f16_all_materialised_weights",
     {{F_QTYPE, 4},
      {F_TQ, 3},
      {F_PAGE, 4},
      {F_PPS, 1},
      {F_DK, 5},
      {F_DV, 3},
      {F_WEIGHTS, 1},
      {F_LSE, 1},
      {F_PATH, 1},
      {F_SEED0, 1},
      {-1, 0}}},
    {"bf16_q_f16_kv_f32_bias_tiled",
     {{F_QTYPE, 8},
      {F_KVTYPE, 3},
      {F_BIASTYPE, 2},
      {F_BIAS, 1},
      {F_BIAS_VAL, 1},
      {F_TQ, 5},
      {F_PAGE, 3},
      {F_PPS, 2},
      {F_PATH, 2},
      {F_BLOCK_K, 4 | (2 << 3)},
      {F_SEED0, 2},
      {-1, 0}}},
    {"paged_f16_decode_gqa_kvlens",
     {{F_QTYPE, 4},
      {F_PAGED, 1},
      {F_N, 2},
      {F_HKV, 1},
      {F_GROUP, 3},
      {F_TQ, 0},
      {F_PAGE, 2},
      {F_PPS, 4},
      {F_DK, 7},
      {F_KVLENS, 1},
      {F_KV0, 2 | (5 << 3)},
      {F_KV1, 7},
      {F_KV2, 2 | (9 << 3)},
      {F_PATH, 3},
      {F_TABLE, 2 | (2 << 5)},
      {F_POOL, 2},
      {F_LSE, 1},
      {F_SEED0, 3},
      {-1, 0}}},
    {"paged_bf16_decode_blas_vllm_layout",
     {{F_QTYPE, 8},
      {F_PAGED, 1},
      {F_N, 1},
      {F_HKV, 1},
      {F_TQ, 1},
      {F_PAGE, 0},
      {F_PPS, 4},
      {F_KLAYOUT, 1 | (2 << 0)},
      {F_VLAYOUT, 1 | (1 * 6)},
      {F_PATH, 4},
      {F_BLOCK_K, 4 | (1 << 3)},
      {F_SEED0, 4},
      {-1, 0}}},
    {"paged_page1_shared_prefix_causal",
     {{F_PAGED, 2},
      {F_N, 2},
      {F_PAGE, 0},
      {F_PPS, 4},
      {F_TQ, 3},
      {F_CAUSAL, 2},
      {F_TABLE, 1 << 3},
      {F_POOL, 3},
      {F_WEIGHTS, 1},
      {F_LOGITS, 3},
      {F_SEED0, 5},
      {-1, 0}}},
    {"paged_one_page_everything_mask",
     {{F_PAGED, 3},
      {F_N, 2},
      {F_PAGE, 3},
      {F_PPS, 3},
      {F_TABLE, 3 << 3},
      {F_MASK, 1},
      {F_MASK_B, 2 << 2},
      {F_MASK_DENS, 2},
      {F_EMPTY, 1},
      {F_MAXW, 1},
      {F_ENTROPY, 1},
      {F_SEED0, 6},
      {-1, 0}}},
    {"f64_paged_window_sinks",
     {{F_QTYPE, 12},
      {F_PAGED, 1},
      {F_PAGE, 2},
      {F_PPS, 3},
      {F_TQ, 4},
      {F_WINDOW, 5},
      {F_WIN_L, 2},
      {F_WIN_R, 1},
      {F_SINKS, 6},
      {F_LSE, 1},
      {F_SEED0, 7},
      {-1, 0}}},
    {"f16_alibi_softcap_portable",
     {{F_QTYPE, 4},
      {F_KVTYPE, 3},
      {F_ALIBI, 6 | (8 << 3)},
      {F_SOFTCAP, 6},
      {F_KERNEL, 1},
      {F_TQ, 4},
      {F_PPS, 2},
      {F_PAGE, 3},
      {F_SEED0, 8},
      {-1, 0}}},
    {"bf16_avx2_tiny_values",
     {{F_QTYPE, 8},
      {F_KVTYPE, 4},
      {F_KERNEL, 2},
      {F_SPREAD, 3},
      {F_VAMP, 6},
      {F_DK, 20},
      {F_DV, 19},
      {F_SEED0, 9},
      {-1, 0}}},
    {"pool_serial_shuffled_workers",
     {{F_THREADS, 5},
      {F_WORKERS, 5},
      {F_ORDER, 2 | (2 << 2)},
      {F_N, 2},
      {F_HKV, 1},
      {F_PATH, 3},
      {F_PAGED, 1},
      {F_QTYPE, 4},
      {F_SEED0, 10},
      {-1, 0}}},
    {"pool_threads_materialised",
     {{F_THREADS, 7},
      {F_WORKERS, 3},
      {F_TQ, 5},
      {F_PATH, 1},
      {F_BLOCK_Q, 4 | (0 << 3)},
      {F_N, 2},
      {F_SEED0, 11},
      {-1, 0}}},
    {"pool_breach_skip",
     {{F_THREADS, 5},
      {F_WORKERS, 1},
      {F_BREACH, 8},
      {F_N, 2},
      {F_PATH, 3},
      {-1, 0}}},
    {"pool_breach_repeat_merge",
     {{F_THREADS, 5},
      {F_WORKERS, 2},
      {F_BREACH, 9},
      {F_BREACH_AT, 2 | (1 << 2)},
      {F_N, 2},
      {F_HKV, 1},
      {F_PATH, 3},
      {-1, 0}}},
    {"pool_breach_bad_worker",
     {{F_THREADS, 6},
      {F_WORKERS, 3},
      {F_BREACH, 10 | (2 << 4)},
      {F_N, 2},
      {F_PATH, 2},
      {F_BLOCK_Q, 4},
      {F_TQ, 5},
      {-1, 0}}},
    {"pool_breach_extra_item",
     {{F_THREADS, 5},
      {F_WORKERS, 6},
      {F_BREACH, 12 | (1 << 4)},
      {F_N, 2},
      {F_PATH, 3},
      {-1, 0}}},
    {"pool_unset_and_refused_workers",
     {{F_THREADS, 5 | 0x40},
      {F_WORKERS, 1 | 0x08 | 0x10 | 0x20},
      {F_N, 2},
      {F_PATH, 3},
      {-1, 0}}},
    {"threads_all_avx512",
     {{F_THREADS, 4}, {F_KERNEL, 3}, {F_N, 2}, {F_SECOND, 1 | 4}, {-1, 0}}},
    {"refuse_f64_with_f16_kv", {{F_QTYPE, 12}, {F_KVTYPE, 3}, {-1, 0}}},
    {"refuse_bad_bias_dtype", {{F_BIASTYPE, 6 | (1 << 3)}, {-1, 0}}},
    {"refuse_page_a_no_table", {{F_PAGED, 1}, {F_ERR, 8}, {-1, 0}}},
    {"refuse_page_b_pps", {{F_PAGED, 1}, {F_ERR, 9}, {F_ERR_VAL, 3}, {-1, 0}}},
    {"refuse_page_b_stride", {{F_PAGED, 1}, {F_PPS, 3}, {F_ERR, 10}, {-1, 0}}},
    {"refuse_page_c_entry",
     {{F_PAGED, 1},
      {F_N, 2},
      {F_PPS, 2},
      {F_ERR, 11},
      {F_ERR_VAL, 3 | (1 << 4)},
      {-1, 0}}},
    {"unread_entry_garbage_kvlens",
     {{F_PAGED, 1},
      {F_N, 2},
      {F_PPS, 3},
      {F_PAGE, 2},
      {F_KVLENS, 1},
      {F_KV0, 2},
      {F_KV1, 2 | (2 << 3)},
      {F_KV2, 7},
      {F_ERR, 12},
      {F_TABLE, 5 << 5},
      {-1, 0}}},
    {"refuse_v_pool_mismatch",
     {{F_PAGED, 1}, {F_ERR, 14}, {F_ERR_VAL, 0}, {-1, 0}}},
    {"arena_table_out_adjacent",
     {{F_PAGED, 1}, {F_QTYPE, 4}, {F_N, 2}, {F_ARENA, 7}, {-1, 0}}},
    {"arena_q_out_overlap", {{F_QTYPE, 4}, {F_ARENA, 5 | (3 << 3)}, {-1, 0}}},
    {"f16_out_overflow",
     {{F_QTYPE, 4}, {F_KVTYPE, 2}, {F_VAMP, 7 | (7 << 3)}, {F_TQ, 2}, {-1, 0}}},
    {"nan_in_seen_k_paged",
     {{F_PAGED, 1}, {F_KVTYPE, 4}, {F_SPECIAL, 5}, {F_PPS, 2}, {-1, 0}}},
    {"inf_bias_half",
     {{F_QTYPE, 8}, {F_BIAS, 1}, {F_BIASTYPE, 4}, {F_SPECIAL, 7}, {-1, 0}}},
    {"pool_threads_busy_worker",
     {{F_THREADS, 7},
      {F_WORKERS, 2},
      {F_BREACH, 14},
      {F_N, 2},
      {F_PATH, 3},
      {F_PAGED, 1},
      {-1, 0}}},
    {"pool_breach_extra_bad_worker",
     {{F_THREADS, 5},
      {F_WORKERS, 4},
      {F_ORDER, 3 | (1 << 2)},
      {F_BREACH, 11 | (3 << 4)},
      {F_N, 2},
      {F_HKV, 1},
      {F_PATH, 3},
      {-1, 0}}},
    {"kv_broadcast_stride0_f16",
     {{F_PAGED, 2 << 2},
      {F_N, 2},
      {F_KVTYPE, 3},
      {F_TQ, 3},
      {F_PAGE, 5},
      {F_MASK, 1},
      {F_MASK_DENS, 1},
      {F_THREADS, 2},
      {-1, 0}}},
    {"forced_decode_with_weights_unsupported",
     {{F_QTYPE, 4}, {F_WEIGHTS, 1}, {F_PATH, 3}, {-1, 0}}},
    {"refuse_table_stride_overflow",
     {{F_PAGED, 1}, {F_N, 1}, {F_ERR, 15}, {-1, 0}}},
    {"one_row_huge_table_stride",
     {{F_PAGED, 1}, {F_QTYPE, 8}, {F_ERR, 15}, {F_ERR_VAL, 1}, {-1, 0}}},
};

static void reset(void)
{
    memset(&g_c, 0, sizeof g_c);
    memset(g_t, 0, sizeof g_t);
    memset(&g_pool, 0, sizeof g_pool);
    g_table = NULL;
    g_kvlens = NULL;
}

static void run_and_free(void)
{
    run_one();
    free(g_c.tvals);
    free(g_allowed);
    free(g_seen);
    g_c.tvals = NULL;
    g_allowed = g_seen = NULL;
}

FZ_TARGET("fuzz_storage", "STORAGE", "f32_contiguous_default", F_SEED0, 0,
          reset, run_and_free, NULL);
