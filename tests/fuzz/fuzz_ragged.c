/*
 * libFuzzer target for sdpa_forward's ragged batches (1.2: seqs,
 * q_offsets, kv_offsets) and sdpa_forward_workspace on them.
 *
 * Every input is a fixed header of one-byte fields (enum field below; bytes
 * past the end read as 0, so the empty input is a small valid call: one
 * sequence of one query row and one key). The fields choose:
 *  - up to 12 sequences, each with its Tq_b (0, 1, a decode step of a few
 *    rows, a prefill chunk) and Tk_b (0, 1, up to 64);
 *  - the key form: packed (kv_offsets, [1, Hkv, total_k, D]), batched
 *    ([seqs, Hkv, Tk, D], Tk the longest Tk_b), shared ([1, Hkv, Tk, D]) or
 *    paged (a block table over a [P, Hkv, page, D] pool in vLLM's or the
 *    head-major layout, shuffled pages, prefixes shared between sequences,
 *    unused pages, a row stride above pages_per_seq, garbage in every
 *    entry that holds no valid key);
 *  - storage types: q/out and k/v in float32, float64, float16, bfloat16,
 *    mixed, and the refused ones (float64 with another, unknown values);
 *    k/v also in the quantized types (FP8 E4M3 / E5M2, with k_scale /
 *    v_scale per KV head or not; ggml's Q8_0 / Q4_0 blocks, whose Dk and
 *    Dv are whole blocks of 32, or in 1 of 8 inputs not: BAD_DIM, and
 *    whose rows are padded by a block, or in 1 of 4 inputs by half of
 *    one: BAD_STRIDE, README's fixed finding 4), filled with random valid
 *    codes (tests/common/quant_codec.h decodes them for the reference);
 *  - GQA, Dk, Dv, kv_lens (0..Tk_b), causal, window, ALiBi, sinks,
 *    soft-cap, scale, lse / max_weight / entropy, q, out, k/v and the
 *    per-row outputs in head-major or [total, H, D] memory, padded rows;
 *  - the context: four option slots (fz_apply_options: path, kernel,
 *    threads, blocks, empty-row policy, bad values too) and a caller's
 *    parallel-for of the harness that runs every item on the calling
 *    thread in a chosen order with chosen worker indices;
 *  - one injected ragged error: seqs < 0, seqs without q_offsets and the
 *    reverse, kv_offsets alone, q of N != 1, a mask / bias / weights /
 *    logits tensor, kv_offsets with a block table, an offset array that
 *    does not start at 0, decreases, or ends off its packed extent, a
 *    per-row tensor (q, out, lse, max_weight, entropy) whose T is not
 *    total_q, k and v of another N, packed v of another T, kv_lens[b]
 *    outside [0, Tk_b], a page outside the pool in sequence b, out rows
 *    that two sequences share (stride 0), an output laid over q_offsets,
 *    kv_offsets, kv_lens or the block table, out placed right after q or
 *    into it, a bad k_scale / v_scale (NaN, infinite, 0, -0, negative, or
 *    any given with a kv_dtype other than FP8); or a NaN in q, k or v of
 *    one sequence (quantized: a NaN code or block d; or an infinity where
 *    the type has one, E5M2 or a block's d);
 *  - huge mode (F_MODE % 8 == 7): offsets with a total of 2^31 .. 2^62
 *    rows at fake addresses near the top of memory, which must be
 *    refused before anything is read (the workspace query first,
 *    sdpa_forward only after it refused).
 *
 * Checks (abort on the first violation, so libFuzzer reports it):
 *  - every status is documented and the one the input calls for: an
 *    injected ragged error its status (BAD_RAGGED, OFFSETS_START /
 *    _ORDER / _END, SHAPE_MISMATCH, BAD_KV_LEN, BAD_STRIDE, OVERLAP);
 *    else the first failure of the sequences' own calls (each a
 *    rectangular call on its own views, made by tests/common/ragged.c
 *    from the header's description, on the same context) with its
 *    message prefixed "sdpa_forward: sequence <b>: "; else NONFINITE
 *    exactly when a sequence's own call gave it, naming such a sequence,
 *    its head and query row (and the packed row); else OK. Own calls
 *    themselves: BAD_DTYPE for refused types, BAD_DIM for a block type's
 *    dimension not whole blocks, BAD_PAGE for a bad page of a sequence
 *    with rows, BAD_KV_SCALE for a bad scale, FULLY_MASKED_ROW exactly
 *    when the reference has a row without keys under the default policy;
 *  - messages name what the input broke (the offset array and its
 *    index, kv_lens[b], the sequence); "" after OK;
 *  - after a refusal every output byte (guards included) is untouched;
 *    inputs (q, k, v, pools, tables, offsets, kv_lens, sinks, slopes, the
 *    sequences' own outputs) are never written; bytes outside the
 *    outputs' views are never written, whatever the status;
 *  - on success each sequence's out, lse, max_weight and entropy are
 *    bitwise those of its own call, and within tests/test_random.c's
 *    tolerances (plus one rounding of a half out, and of v_scale's
 *    product) of the long-double reference on the exactly widened inputs
 *    (rg_check; quantized codes decoded and times their scales);
 *  - sdpa_forward_workspace allocates nothing and gives sdpa_forward's
 *    status for every error found before the computation; a second call
 *    (fz_second_call: another thread count, or the same call, which
 *    allocates nothing) gives the same bits.
 *
 * Seed corpus: FUZZ_RAGGED_WRITE_CORPUS=<dir> ./fuzz_ragged writes the
 * empty input's seed and the hand-made seeds of seeds[] to <dir> and
 * exits.
 */
#include <float.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "fuzz_ref.h"
#include "quant_codec.h"
#include "ragged.h"

enum { MAXS = 12, MAXH = 3 };

/* ------------------------------------------------------------------------ */
/* Input fields: one byte each (new fields are appended, so that the        */
/* committed seeds keep their meaning).                                      */
/* ------------------------------------------------------------------------ */
enum field {
    F_MODE, /* % 8 == 7: huge offsets */
    F_QTYPE,
    F_KVTYPE,
    F_SEQS,
    F_HKV,
    F_GROUP,
    F_DK,
    F_DV,
    F_KEYS, /* % 4: packed, batched, shared, paged */
    F_PAGE,
    F_PPS,
    F_TABLE,  /* table stride, prefix sharing, garbage */
    F_LAYOUT, /* bthd bits: q, out, k/v, per-row outputs; bit 4 vLLM pool */
    F_PADS,
    F_LENS,
    F_CAUSAL,
    F_WINDOW,
    F_SINKS,
    F_ALIBI,
    F_SOFTCAP,
    F_SCALE,
    F_OUTS, /* bits: lse, max_weight, entropy */
    F_POOL, /* % 4 == 0: none; else a parallel-for of 2..4 workers */
    F_ERR,
    F_ERR_AT,
    F_ERR_VAL,
    F_NAN, /* % 4: none, q, k, v */
    F_NAN_AT,
    F_AMP,
    F_SECOND,
    F_OPT,             /* four option slots: eight fields */
    F_LEN = F_OPT + 8, /* Tq_b and Tk_b of sequence b: 2 · MAXS fields */
    F_SEED0 = F_LEN + 2 * MAXS,
    F_QUANT = F_SEED0 + 8, /* bits: k_scale, v_scale (FP8); an infinity for
                              the NaN, its sign */
    F_COUNT
};

/* Injected errors (F_ERR % 32; 0 and values from E_COUNT on: none). */
enum err {
    E_NONE,
    E_SEQS_NEG,
    E_NO_QOFF,
    E_SEQS_ZERO,
    E_KVOFF_ALONE,
    E_Q_N,
    E_REFUSED_TENSOR,
    E_OFF_AND_TABLE,
    E_QOFF_START,
    E_KVOFF_START,
    E_QOFF_ORDER,
    E_KVOFF_ORDER,
    E_QOFF_END,
    E_KVOFF_END,
    E_ROWS_T,
    E_KEYS_N,
    E_V_T,
    E_KV_LEN,
    E_BAD_PAGE,
    E_OUT_SHARED,
    E_OUT_OVER_ARRAY,
    E_ARENA,
    E_KV_SCALE,
    E_COUNT
};
static const char *const err_names[E_COUNT] = {"none",
                                               "seqs<0",
                                               "no q_offsets",
                                               "seqs 0",
                                               "kv_offsets alone",
                                               "q N",
                                               "refused tensor",
                                               "offsets+table",
                                               "q start",
                                               "kv start",
                                               "q order",
                                               "kv order",
                                               "q end",
                                               "kv end",
                                               "rows T",
                                               "keys N",
                                               "v T",
                                               "kv_lens",
                                               "bad page",
                                               "out shared",
                                               "output over array",
                                               "arena",
                                               "kv scale"};

/* ------------------------------------------------------------------------ */
/* The decoded call.                                                         */
/* ------------------------------------------------------------------------ */
typedef struct cfg {
    int dtype, kv_field; /* what the call gets */
    int qt, kvt, ct;     /* buffer types (float32 stands in for bad ones) */
    int types_ok;
    int keys; /* RG_* */
    int64_t seqs, hq, hkv, dk, dv;
    int64_t tq[MAXS], tk[MAXS], len[MAXS];
    int64_t q_off[MAXS + 1], kv_off[MAXS + 1], total_q, total_k, tk_max;
    int64_t page, pps, tstride, pages;
    int use_lens;
    int err, nan;
    double scale, softcap, amp;
    int bad_dims;          /* a block type's Dk or Dv not whole blocks */
    int bad_strides;       /* a block type's k or v splits blocks */
    int infinite;          /* an infinity injected in place of the NaN */
    int scaled[2];         /* FP8: k_scale, v_scale given */
    float scales[2][MAXH]; /* their values */
} cfg;

static cfg g_c;
static int32_t *g_table;
static fz_buf *g_table_buf;

static int64_t bits(unsigned v, int at, int n)
{
    return (int64_t)((v >> at) & ((1u << n) - 1u));
}

static void decode_types(cfg *c)
{
    static const int q_types[8] = {
        SDPA_FLOAT32, SDPA_FLOAT32,  SDPA_FLOAT32, SDPA_FLOAT64,
        SDPA_FLOAT16, SDPA_BFLOAT16, SDPA_FLOAT16, 0};
    static const int bad[4] = {0, 5, -1, 99};
    unsigned qv = fz(F_QTYPE), kv = fz(F_KVTYPE);
    c->dtype = q_types[qv % 8];
    if (qv % 8 == 7)
        c->dtype = bad[(qv >> 3) % 4];
    /* the last: the first value past the known types */
    enum { PAST = SDPA_Q4_0 + 1 };
    static const int kv_types[8] = {
        0, 0, 0, SDPA_FLOAT32, SDPA_FLOAT16, SDPA_BFLOAT16, SDPA_FLOAT64, PAST};
    c->kv_field = kv_types[kv % 8];
    /* two of the three "dtype's" values above 7 are the quantized types
     * (QUANT_KV; the older seeds keep their meaning) */
    if (kv >= 8 && (kv % 8 == 1 || kv % 8 == 2))
        c->kv_field = SDPA_FP8_E4M3 + (int)((kv >> 3) % 4);
    const int kv_eff = c->kv_field ? c->kv_field : c->dtype;
    const int q_ok = c->dtype >= SDPA_FLOAT32 && c->dtype <= SDPA_BFLOAT16;
    const int kv_ok = kv_eff >= SDPA_FLOAT32 && kv_eff <= SDPA_Q4_0;
    c->types_ok =
        q_ok && kv_ok && (c->dtype == SDPA_FLOAT64) == (kv_eff == SDPA_FLOAT64);
    c->qt = q_ok ? c->dtype : SDPA_FLOAT32;
    c->kvt = kv_ok ? kv_eff : SDPA_FLOAT32;
    c->ct = rg_compute_type(c->qt);
}

static void decode_lengths(cfg *c)
{
    c->seqs = 1 + (int64_t)(fz(F_SEQS) % MAXS);
    c->total_q = c->total_k = c->tk_max = 0;
    for (int64_t b = 0; b < c->seqs; b++) {
        unsigned qv = fz(F_LEN + 2 * (int)b), kv = fz(F_LEN + 2 * (int)b + 1);
        switch (qv % 4) {
        case 0:
            c->tq[b] = 1;
            break;
        case 1:
            c->tq[b] = 0;
            break;
        case 2:
            c->tq[b] = 2 + bits(qv, 2, 2);
            break;
        default:
            c->tq[b] = 4 + bits(qv, 2, 5);
            break;
        }
        c->tk[b] = kv % 8 == 1 ? 0 : 1 + (int64_t)((kv * 7u) % 64u);
        c->q_off[b + 1] = c->q_off[b] + c->tq[b];
    }
    c->total_q = c->q_off[c->seqs];
    c->keys = (int)(fz(F_KEYS) % 4);
    if (c->keys == RG_SHARED && c->seqs == 1)
        c->keys = RG_BATCHED;
    for (int64_t b = 0; b < c->seqs; b++)
        c->tk_max = c->tk[b] > c->tk_max ? c->tk[b] : c->tk_max;
    if (c->tk_max == 0) /* a rectangular key tensor needs a key */
        c->tk_max = c->tk[0] = 1;
    if (c->keys == RG_PAGED) {
        static const int64_t pages[4] = {1, 2, 5, 16};
        c->page = pages[fz(F_PAGE) % 4];
        c->pps = 1 + (int64_t)(fz(F_PPS) % (c->page == 1 ? 24 : 64 / c->page));
        c->tstride = c->pps + bits(fz(F_TABLE), 0, 2);
    }
    for (int64_t b = 0; b < c->seqs; b++) {
        if (c->keys == RG_PAGED)
            c->tk[b] = c->pps * c->page;
        else if (c->keys != RG_PACKED)
            c->tk[b] = c->tk_max;
        c->kv_off[b + 1] = c->kv_off[b] + (c->keys == RG_PACKED ? c->tk[b] : 0);
    }
    c->total_k = c->kv_off[c->seqs];
    if (c->keys == RG_PACKED && c->total_k == 0) {
        c->tk[0] = 1; /* a zero T extent is BAD_DIM */
        for (int64_t b = 0; b < c->seqs; b++)
            c->kv_off[b + 1] = c->kv_off[b] + c->tk[b];
        c->total_k = c->kv_off[c->seqs];
    }
    unsigned lv = fz(F_LENS);
    c->use_lens = lv % 4 != 0;
    for (int64_t b = 0; b < c->seqs; b++) {
        unsigned m = (lv >> 2) + (unsigned)b * 37u;
        int64_t t = c->tk[b];
        c->len[b] = !c->use_lens || m % 4 == 0 ? t
                    : m % 4 == 1               ? 0
                    : t == 0                   ? 0
                                               : 1 + (int64_t)(m % (unsigned)t);
    }
}

/* ------------------------------------------------------------------------ */
/* Buffers.                                                                  */
/* ------------------------------------------------------------------------ */
typedef struct view {
    sdpa_tensor t;
    int type;
    fz_buf *b;
} view;

static size_t span_of(const sdpa_tensor *t)
{
    for (int d = 0; d < 4; d++)
        if (t->shape[d] <= 0)
            return 1;
    size_t span = 1;
    for (int d = 0; d < 4; d++)
        span += (size_t)((t->shape[d] - 1) * t->stride[d]);
    return span;
}

static void layout(sdpa_tensor *t, int64_t n, int64_t h, int64_t tt, int64_t d,
                   int bthd, int64_t pad)
{
    fz_set_layout(t, n, h, tt, d, bthd, pad);
}

/* Marks the bytes of an output view (at `base` bytes into its buffer). */
static void map_view(fz_buf *b, const sdpa_tensor *t, int type, size_t base)
{
    const size_t es = rg_type_size(type);
    const int64_t *s = t->shape;
    for (int64_t a = 0; a < s[0]; a++)
        for (int64_t h = 0; h < s[1]; h++)
            for (int64_t r = 0; r < s[2]; r++)
                for (int64_t d = 0; d < s[3]; d++)
                    fz_buf_allow(b, base + (size_t)fz_off4(t, a, h, r, d) * es,
                                 es);
}

/* A random element at `off`: a multiple of 1/256 below amp (exact in
 * every float storage type); of a quantized type, a random valid unit
 * (fz_quant_units, whose magnitudes are its own) where one starts. */
static void random_element(void *data, int type, int64_t off, double amp)
{
    if (!rg_is_quantized(type)) {
        rg_store(data, type, off, amp * (double)(fz_below(511) - 255) / 256.0);
        return;
    }
    if (off % quant_codec_unit_values(type) == 0)
        fz_quant_units((unsigned char *)data + rg_offset_bytes(type, off), type,
                       quant_codec_unit_bytes(type));
}

/* An input view: NaN everywhere but its logical elements, filled with
 * random elements. */
static void input_view(view *x, const char *name, int type, int64_t n,
                       int64_t h, int64_t t, int64_t d, int bthd, int64_t pad,
                       double amp)
{
    layout(&x->t, n, h, t, d, bthd, pad);
    x->type = type;
    const size_t span = span_of(&x->t);
    x->b = fz_buf_new(name, 0, rg_bytes(type, (int64_t)span));
    x->t.data = x->b->mem;
    for (size_t i = 0; i < span; i++)
        rg_poison(x->b->mem, type, (int64_t)i);
    for (int64_t a = 0; a < n; a++)
        for (int64_t hh = 0; hh < h; hh++)
            for (int64_t r = 0; r < t; r++)
                for (int64_t e = 0; e < d; e++)
                    random_element(x->b->mem, type, fz_off4(&x->t, a, hh, r, e),
                                   amp);
}

/* An output view (sentinel): `own` ones hold the sequences' own results,
 * registered as inputs of the ragged call (which must not write them). */
static void output_view(view *x, const char *name, int type, int64_t h,
                        int64_t t, int64_t d, int bthd, int64_t pad, int own)
{
    layout(&x->t, 1, h, t, d, bthd, pad);
    x->type = type;
    const size_t bytes = span_of(&x->t) * rg_type_size(type);
    x->b = fz_buf_new(name, !own, bytes);
    memset(x->b->mem, 0xA5, x->b->bytes + 16);
    x->t.data = x->b->mem;
    if (!own && t > 0)
        map_view(x->b, &x->t, type, 0);
}

/* Rows [from, to) of item a of a key view: NaN (never read). */
static void poison_rows(view *x, int64_t a, int64_t from, int64_t to)
{
    for (int64_t h = 0; h < x->t.shape[1]; h++)
        for (int64_t j = from; j < to; j++)
            for (int64_t e = 0; e < x->t.shape[3]; e++)
                rg_poison(x->t.data, x->type, fz_off4(&x->t, a, h, j, e));
}

/* The paged pool: every slot NaN, then the slots some sequence reads. */
static void make_pool(view *x, const char *name, int64_t d, int vllm,
                      double amp)
{
    const cfg *c = &g_c;
    layout(&x->t, c->pages, c->hkv, c->page, d, vllm, 0);
    x->type = c->kvt;
    const size_t span = span_of(&x->t);
    x->b = fz_buf_new(name, 0, rg_bytes(c->kvt, (int64_t)span));
    x->t.data = x->b->mem;
    for (size_t i = 0; i < span; i++)
        rg_poison(x->b->mem, c->kvt, (int64_t)i);
    /* a slot once (shared prefixes); a block at its first value, which
     * holds NaN until then */
    for (int64_t b = 0; b < c->seqs; b++)
        for (int64_t j = 0; j < c->len[b]; j++) {
            int64_t id = g_table[b * c->tstride + j / c->page];
            for (int64_t h = 0; h < c->hkv; h++)
                for (int64_t e = 0; e < d; e++) {
                    int64_t o = fz_off4(&x->t, id, h, j % c->page, e);
                    if (isnan(rg_value(x->b->mem, c->kvt, o)))
                        random_element(x->b->mem, c->kvt, o, amp);
                }
        }
}

/* Shuffled pages; with sharing, sequence b's first pages are sequence
 * 0's (a common prefix); entries past the valid keys hold garbage. */
static void make_table(void)
{
    cfg *c = &g_c;
    const unsigned tv = fz(F_TABLE);
    const int64_t share = bits(tv, 2, 2); /* pages shared with sequence 0 */
    c->pages = c->seqs * c->pps + bits(tv, 4, 2);
    int32_t *perm = malloc((size_t)c->pages * sizeof *perm);
    if (!perm)
        abort();
    for (int64_t i = 0; i < c->pages; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = c->pages - 1; i > 0; i--) {
        int64_t j = fz_below(i + 1);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    g_table_buf = fz_buf_new("block_table", 0,
                             (size_t)(c->seqs * c->tstride) * sizeof(int32_t));
    g_table = (int32_t *)(void *)g_table_buf->mem;
    static const int32_t garbage[4] = {-1, INT32_MIN, INT32_MAX, 1 << 20};
    for (int64_t b = 0; b < c->seqs; b++) {
        const int64_t used = (c->len[b] + c->page - 1) / c->page;
        for (int64_t s = 0; s < c->tstride; s++) {
            int32_t id = perm[b * c->pps + (s < c->pps ? s : 0)];
            if (s < share && b > 0 && s < c->pps)
                id = perm[s];
            g_table[b * c->tstride + s] =
                s < used ? id : garbage[(size_t)(b + s) % 4];
        }
    }
    free(perm);
}

/* ------------------------------------------------------------------------ */
/* The harness's parallel-for: every item on the calling thread.            */
/* ------------------------------------------------------------------------ */
typedef struct hpool {
    int workers;
    unsigned order;
    long calls;
} hpool;
static hpool g_pool;

static int64_t gcd(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

static void pool_for(void *user, int64_t items, sdpa_task_fn task, void *arg)
{
    hpool *p = user;
    p->calls++;
    CHECK(items >= 2, "the parallel-for called for %lld items",
          (long long)items);
    /* a permutation: forward, backward, or a stride prime to items */
    int64_t step = 1;
    if (p->order % 3 == 2)
        for (step = 7; gcd(step, items) != 1; step++)
            ;
    for (int64_t n = 0; n < items; n++) {
        int64_t i = p->order % 3 == 1 ? items - 1 - n : (n * step) % items;
        task(arg, i, (int)((n * (int64_t)(p->order / 3 + 1)) % p->workers));
    }
}

/* ------------------------------------------------------------------------ */
/* The call.                                                                 */
/* ------------------------------------------------------------------------ */
enum { O_OUT, O_LSE, O_MW, O_EN, OUTS };
static const char *const out_names[2][OUTS] = {
    {"out", "lse", "max_weight", "entropy"},
    {"own out", "own lse", "own max_weight", "own entropy"}};

typedef struct problem {
    view q, k, v, nk, nv;
    view out[2][OUTS];
    fz_buf *arena;                  /* E_ARENA: q and out in one buffer */
    float *scales[2];               /* k_scale, v_scale, or NULL */
    int64_t *q_off, *kv_off, *lens; /* the ragged call's */
    int64_t *own_q_off, *own_kv_off, *own_lens; /* untouched by inject */
    double sinks[8], slopes[8];
    sdpa_forward_args a[2]; /* the ragged call over out[0], over out[1] */
} problem;

static int call_forward(sdpa_ctx *ctx, const void *args)
{
    return sdpa_forward(ctx, args);
}

static int64_t *int64_array(const char *name, const int64_t *v, int64_t n)
{
    fz_buf *b = fz_buf_new(name, 0, (size_t)n * sizeof(int64_t));
    memcpy(b->mem, v, (size_t)n * sizeof(int64_t));
    return (int64_t *)(void *)b->mem;
}

/* k_scale (s 0) or v_scale (1): Hkv values, an input of both calls. */
static float *scale_array(int s, const float *values)
{
    fz_buf *b = fz_buf_new(s ? "v_scale" : "k_scale", 0,
                           (size_t)g_c.hkv * sizeof(float));
    memcpy(b->mem, values, (size_t)g_c.hkv * sizeof(float));
    return (float *)(void *)b->mem;
}

static void make_keys(problem *p, unsigned lay, int64_t pad)
{
    const cfg *c = &g_c;
    const int bthd = (int)bits(lay, 2, 1);
    if (c->keys == RG_PAGED) {
        make_table();
        make_pool(&p->k, "k_pool", c->dk, (int)bits(lay, 4, 1), c->amp);
        make_pool(&p->v, "v_pool", c->dv, (int)bits(lay, 4, 1), 1.0);
        return;
    }
    const int64_t n = c->keys == RG_BATCHED ? c->seqs : 1;
    const int64_t t = c->keys == RG_PACKED ? c->total_k : c->tk_max;
    input_view(&p->k, "k", c->kvt, n, c->hkv, t, c->dk, bthd, pad, c->amp);
    input_view(&p->v, "v", c->kvt, n, c->hkv, t, c->dv, bthd, pad, 1.0);
    for (int64_t b = 0; b < c->seqs; b++) {
        /* K and V rows past kv_lens are never read */
        int64_t item = c->keys == RG_BATCHED ? b : 0;
        int64_t from = c->keys == RG_PACKED ? c->kv_off[b] : 0;
        int64_t to = c->keys == RG_PACKED ? c->kv_off[b + 1] : t;
        if (c->keys == RG_SHARED)
            continue;
        poison_rows(&p->k, item, from + c->len[b], to);
        poison_rows(&p->v, item, from + c->len[b], to);
    }
    if (c->keys == RG_SHARED) {
        int64_t longest = 0;
        for (int64_t b = 0; b < c->seqs; b++)
            longest = c->len[b] > longest ? c->len[b] : longest;
        poison_rows(&p->k, 0, longest, t);
        poison_rows(&p->v, 0, longest, t);
    }
}

static void make_problem(problem *p)
{
    cfg *c = &g_c;
    const unsigned lay = fz(F_LAYOUT), pads = fz(F_PADS);
    const int64_t pad = bits(pads, 0, 2);
    /* a block type's strides are whole blocks (multiples of 32 values),
     * or in 1 of 4 inputs half a block more (BAD_STRIDE where an extent
     * above 1 steps by one) */
    static const int64_t block_pads[4] = {0, 0, 32, 16};
    const int64_t kv_pad = quant_codec_is_block(c->kvt)
                               ? block_pads[bits(pads, 2, 2)]
                               : bits(pads, 2, 2);
    const int arena = c->err == E_ARENA;
    /* q (in the arena before out, for E_ARENA) */
    layout(&p->q.t, 1, c->hq, c->total_q, c->dk, (int)bits(lay, 0, 1), pad);
    p->q.type = c->qt;
    view *out0 = &p->out[0][O_OUT];
    layout(&out0->t, 1, c->hq, c->total_q, c->dv, (int)bits(lay, 1, 1), pad);
    out0->type = c->qt;
    const size_t qes = rg_type_size(c->qt);
    const size_t q_bytes = span_of(&p->q.t) * qes;
    const size_t out_bytes = span_of(&out0->t) * qes;
    size_t shift = 0;
    if (arena) {
        /* out right after q (0: no overlap), or that many elements into
         * it */
        shift = (size_t)bits(fz(F_ERR_VAL), 0, 2);
        shift = shift * qes > q_bytes ? q_bytes / qes : shift;
        p->arena = fz_buf_new("q+out", 1, q_bytes - shift * qes + out_bytes);
        p->q.b = p->arena;
    } else {
        p->q.b = fz_buf_new("q", 0, q_bytes);
    }
    p->q.t.data = p->q.b->mem;
    for (size_t i = 0; i < q_bytes / qes; i++)
        rg_poison(p->q.b->mem, c->qt, (int64_t)i);
    for (int64_t h = 0; h < c->hq; h++)
        for (int64_t r = 0; r < c->total_q; r++)
            for (int64_t e = 0; e < c->dk; e++)
                rg_store(p->q.t.data, c->qt, fz_off4(&p->q.t, 0, h, r, e),
                         c->amp * (double)(fz_below(511) - 255) / 256.0);
    make_keys(p, lay, kv_pad);
    c->bad_strides =
        quant_codec_is_block(c->kvt) && (quant_codec_splits_blocks(&p->k.t) ||
                                         quant_codec_splits_blocks(&p->v.t));
    input_view(&p->nk, "no_keys_k", c->kvt, 1, c->hkv, 1, c->dk, 0, 0, 0);
    input_view(&p->nv, "no_keys_v", c->kvt, 1, c->hkv, 1, c->dv, 0, 0, 0);
    poison_rows(&p->nk, 0, 0, 1);
    poison_rows(&p->nv, 0, 0, 1);
    const unsigned wanted = fz(F_OUTS);
    for (int s = 0; s < 2; s++) {
        if (s == 0 && arena) {
            out0->b = p->arena;
            out0->t.data = p->arena->mem + q_bytes - shift * qes;
            if (c->total_q > 0)
                map_view(p->arena, &out0->t, c->qt, q_bytes - shift * qes);
        } else {
            output_view(&p->out[s][O_OUT], out_names[s][O_OUT], c->qt, c->hq,
                        c->total_q, c->dv, (int)bits(lay, 1, 1), pad, s);
        }
        for (int o = O_LSE; o < OUTS; o++)
            if (bits(wanted, o - 1, 1))
                output_view(&p->out[s][o], out_names[s][o], c->ct, c->hq,
                            c->total_q, 1, (int)bits(lay, 3, 1), 0, s);
    }
    (void)out_bytes;
    p->q_off = int64_array("q_offsets", c->q_off, c->seqs + 1);
    p->kv_off = int64_array("kv_offsets", c->kv_off, c->seqs + 1);
    p->lens = int64_array("kv_lens", c->len, c->seqs);
    p->own_q_off = int64_array("own q_offsets", c->q_off, c->seqs + 1);
    p->own_kv_off = int64_array("own kv_offsets", c->kv_off, c->seqs + 1);
    p->own_lens = int64_array("own kv_lens", c->len, c->seqs);
    for (int h = 0; h < 8; h++) {
        p->sinks[h] = (double)(fz_below(17) - 8) / 4.0;
        p->slopes[h] = (double)fz_below(9) / 16.0;
    }
    for (int s = 0; s < 2; s++)
        if (c->scaled[s])
            p->scales[s] = scale_array(s, c->scales[s]);
    for (int s = 0; s < 2; s++) {
        sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
        a.dtype = c->dtype;
        a.kv_dtype = c->kv_field;
        fz_decode_causal_window(&a, fz(F_CAUSAL), fz(F_WINDOW));
        a.scale = c->scale;
        a.softcap = c->softcap;
        a.kv_lens = c->use_lens ? (s ? p->own_lens : p->lens) : NULL;
        a.k_scale = p->scales[0];
        a.v_scale = p->scales[1];
        a.sinks = fz(F_SINKS) % 3 == 1 ? p->sinks : NULL;
        a.alibi_slopes = fz(F_ALIBI) % 3 == 1 ? p->slopes : NULL;
        a.q = p->q.t;
        a.k = p->k.t;
        a.v = p->v.t;
        sdpa_tensor *outs[OUTS] = {&a.out, &a.lse, &a.max_weight, &a.entropy};
        for (int o = 0; o < OUTS; o++)
            *outs[o] = p->out[s][o].t;
        a.seqs = c->seqs;
        a.q_offsets = s ? p->own_q_off : p->q_off;
        if (c->keys == RG_PACKED)
            a.kv_offsets = s ? p->own_kv_off : p->kv_off;
        if (c->keys == RG_PAGED) {
            a.block_table = g_table;
            a.pages_per_seq = c->pps;
            a.block_table_stride = c->tstride;
        }
        p->a[s] = a;
    }
}

/* ------------------------------------------------------------------------ */
/* Injections.                                                               */
/* ------------------------------------------------------------------------ */
/* The statuses an injected whole-call error calls for (0: none injected,
 * or one whose refusal comes from a sequence's own call); *word a piece
 * of the message. */
typedef struct injected {
    fz_sset expect;
    char word[96];
    int after_sequences; /* found in a sequence or in the whole call */
    int64_t page_seq;    /* E_BAD_PAGE: the sequence; -1 */
} injected;

/* An aligned place for an int64 / int32 array inside an output's view. */
static void *inside_output(view *x, size_t bytes)
{
    if (!x->b || x->t.shape[2] == 0)
        return NULL;
    const size_t es = rg_type_size(x->type);
    size_t first = 0, last = (span_of(&x->t) - 1) * es;
    size_t at = (first + last) / 2 / 8 * 8;
    if (at + bytes > x->b->bytes)
        return NULL;
    return (char *)x->t.data + at;
}

/* out placed in q's buffer: OVERLAP when their ranges meet and their
 * strides (those of extents above 1) differ or an element is both q's
 * and out's; with the same strides and no shared element the library may
 * tell them apart (OK) or not (its rule is conservative). */
static fz_sset arena_expect(const sdpa_forward_args *a)
{
    const cfg *c = &g_c;
    const int64_t es = (int64_t)rg_type_size(c->qt);
    const int64_t base =
        ((const char *)a->out.data - (const char *)a->q.data) / es;
    const int64_t span = (int64_t)span_of(&a->q);
    if (base >= span)
        return 0;
    int same = 1;
    for (int d = 0; d < 4; d++)
        same &= (a->q.shape[d] == 1 ? 0 : a->q.stride[d]) ==
                (a->out.shape[d] == 1 ? 0 : a->out.stride[d]);
    if (!same)
        return FZ_BIT(SDPA_ERR_OVERLAP);
    unsigned char *is_q = calloc((size_t)span, 1);
    if (!is_q)
        abort();
    const int64_t *s = a->q.shape;
    for (int64_t h = 0; h < s[1]; h++)
        for (int64_t r = 0; r < s[2]; r++)
            for (int64_t d = 0; d < s[3]; d++)
                is_q[fz_off4(&a->q, 0, h, r, d)] = 1;
    int shared = 0;
    const int64_t *o = a->out.shape;
    for (int64_t h = 0; h < o[1] && !shared; h++)
        for (int64_t r = 0; r < o[2] && !shared; r++)
            for (int64_t d = 0; d < o[3] && !shared; d++) {
                int64_t at = base + fz_off4(&a->out, 0, h, r, d);
                shared = at < span && is_q[at];
            }
    free(is_q);
    return FZ_BIT(SDPA_ERR_OVERLAP) | (shared ? 0 : FZ_BIT(SDPA_OK));
}

static injected inject(problem *p)
{
    cfg *c = &g_c;
    sdpa_forward_args *a = &p->a[0];
    injected in = {0, "", 0, -1};
    const unsigned at = fz(F_ERR_AT), val = fz(F_ERR_VAL);
    const int64_t s = c->seqs;
    switch (c->err) {
    case E_SEQS_NEG:
        a->seqs = val % 2 ? -1 : INT64_MIN;
        in.expect = FZ_BIT(SDPA_ERR_BAD_RAGGED);
        snprintf(in.word, sizeof in.word, "seqs is %lld", (long long)a->seqs);
        break;
    case E_NO_QOFF:
        a->q_offsets = NULL;
        in.expect = FZ_BIT(SDPA_ERR_BAD_RAGGED);
        snprintf(in.word, sizeof in.word, "q_offsets is NULL");
        break;
    case E_SEQS_ZERO:
        a->seqs = 0;
        in.expect = FZ_BIT(SDPA_ERR_BAD_RAGGED);
        snprintf(in.word, sizeof in.word, "seqs is 0");
        break;
    case E_KVOFF_ALONE:
        a->seqs = 0;
        a->q_offsets = NULL;
        a->kv_offsets = p->kv_off;
        in.expect = FZ_BIT(SDPA_ERR_BAD_RAGGED);
        snprintf(in.word, sizeof in.word, "kv_offsets is set");
        break;
    case E_Q_N:
        a->q.shape[0] = 2 + (int64_t)(val % 3);
        in.expect = FZ_BIT(SDPA_ERR_BAD_RAGGED);
        snprintf(in.word, sizeof in.word, "q.shape[0] is %lld",
                 (long long)a->q.shape[0]);
        break;
    case E_REFUSED_TENSOR: {
        /* a one-element view at q's data: refused before it is read */
        static const char *names[4] = {"mask", "bias", "weights", "logits"};
        sdpa_tensor *slot[4] = {&a->mask, &a->bias, &a->weights, &a->logits};
        const int i = (int)(val % 4);
        *slot[i] = (sdpa_tensor){p->q.t.data, {1, 1, 1, 1}, {1, 1, 1, 1}};
        if (i == 3)
            a->logits_stage = SDPA_LOGITS_SCALED;
        in.expect = FZ_BIT(SDPA_ERR_BAD_RAGGED);
        snprintf(in.word, sizeof in.word, "does not take %s", names[i]);
        break;
    }
    case E_OFF_AND_TABLE:
        if (c->keys != RG_PACKED)
            a->kv_offsets = p->kv_off;
        if (c->keys != RG_PAGED)
            a->block_table = (const int32_t *)(const void *)p->lens;
        in.expect = FZ_BIT(SDPA_ERR_BAD_RAGGED);
        snprintf(in.word, sizeof in.word, "kv_offsets and block_table");
        break;
    case E_QOFF_START:
    case E_KVOFF_START: {
        const int kv = c->err == E_KVOFF_START;
        if (kv && c->keys != RG_PACKED)
            break;
        int64_t *off = kv ? p->kv_off : p->q_off;
        static const int64_t starts[4] = {1, -1, INT64_MIN, INT64_MAX};
        off[0] = starts[val % 4];
        in.expect = FZ_BIT(SDPA_ERR_OFFSETS_START);
        snprintf(in.word, sizeof in.word, "%s[0] is %lld",
                 kv ? "kv_offsets" : "q_offsets", (long long)off[0]);
        break;
    }
    case E_QOFF_ORDER:
    case E_KVOFF_ORDER: {
        const int kv = c->err == E_KVOFF_ORDER;
        if (kv && c->keys != RG_PACKED)
            break;
        int64_t *off = kv ? p->kv_off : p->q_off;
        const int64_t i = 1 + (int64_t)(at % (unsigned)s);
        off[i] = off[i - 1] - 1 - (int64_t)(val % 3);
        in.expect = FZ_BIT(SDPA_ERR_OFFSETS_ORDER);
        snprintf(in.word, sizeof in.word, "%s[%lld] is %lld, below",
                 kv ? "kv_offsets" : "q_offsets", (long long)i,
                 (long long)off[i]);
        break;
    }
    case E_QOFF_END:
    case E_KVOFF_END: {
        const int kv = c->err == E_KVOFF_END;
        if (kv && c->keys != RG_PACKED)
            break;
        int64_t *off = kv ? p->kv_off : p->q_off;
        static const int64_t deltas[4] = {1, -1, 1000, INT64_MAX / 2};
        off[s] += deltas[val % 4];
        const char *name = kv ? "kv_offsets" : "q_offsets";
        if (off[s] < off[s - 1]) {
            in.expect = FZ_BIT(SDPA_ERR_OFFSETS_ORDER);
            snprintf(in.word, sizeof in.word, "%s[%lld] is %lld, below", name,
                     (long long)s, (long long)off[s]);
        } else {
            in.expect = FZ_BIT(SDPA_ERR_OFFSETS_END);
            snprintf(in.word, sizeof in.word, "%s[%lld] (seqs) is %lld", name,
                     (long long)s, (long long)off[s]);
        }
        break;
    }
    case E_ROWS_T: {
        /* one of q, out and the per-row outputs present */
        sdpa_tensor *rows[5] = {&a->q, &a->out, &a->lse, &a->max_weight,
                                &a->entropy};
        static const char *names[5] = {"q", "out", "lse", "max_weight",
                                       "entropy"};
        int i = (int)(val % 5);
        while (!rows[i]->data)
            i = (i + 1) % 5;
        rows[i]->shape[2] += rows[i]->shape[2] > 0 && val & 8 ? -1 : 1;
        if (i == 0) {
            /* q's T is total_q, which q_offsets must end at */
            in.expect = FZ_BIT(SDPA_ERR_OFFSETS_END);
            snprintf(in.word, sizeof in.word, "q_offsets[%lld] (seqs)",
                     (long long)s);
        } else {
            in.expect = FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
            snprintf(in.word, sizeof in.word, "%s is [1, ., %lld, .]", names[i],
                     (long long)rows[i]->shape[2]);
        }
        break;
    }
    case E_KEYS_N:
        if (c->keys == RG_PAGED)
            break;
        if (c->keys == RG_PACKED) {
            a->k.shape[0] = a->v.shape[0] = 2;
            in.expect = FZ_BIT(SDPA_ERR_BAD_RAGGED);
            snprintf(in.word, sizeof in.word, "k.shape[0] is 2");
        } else if (val % 2 && s > 1) {
            a->v.shape[0] = a->k.shape[0] == 1 ? s : 1; /* k and v differ */
            in.expect = FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
            snprintf(in.word, sizeof in.word, "(seqs = %lld)", (long long)s);
        } else {
            a->k.shape[0] = a->v.shape[0] = s + 1;
            in.expect = FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
            snprintf(in.word, sizeof in.word, "k.shape[0] is %lld",
                     (long long)(s + 1));
        }
        break;
    case E_V_T:
        if (c->keys != RG_PACKED)
            break;
        a->v.shape[2] += 1 + (int64_t)(val % 3);
        in.expect = FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
        snprintf(in.word, sizeof in.word, "v.shape[2] is %lld",
                 (long long)a->v.shape[2]);
        break;
    case E_KV_LEN: {
        const int64_t b = (int64_t)(at % (unsigned)s);
        a->kv_lens = p->lens;
        p->lens[b] = val % 2 ? -1 - (int64_t)(val % 5) : c->tk[b] + 1;
        in.expect = FZ_BIT(SDPA_ERR_BAD_KV_LEN);
        snprintf(in.word, sizeof in.word, "kv_lens[%lld] is %lld", (long long)b,
                 (long long)p->lens[b]);
        break;
    }
    case E_BAD_PAGE: {
        if (c->keys != RG_PAGED)
            break;
        const int64_t b = (int64_t)(at % (unsigned)s);
        const int64_t used = (c->len[b] + c->page - 1) / c->page;
        if (used == 0)
            break;
        g_table[b * c->tstride + (int64_t)(val % (unsigned)used)] =
            val & 64 ? -1 : (int32_t)c->pages;
        in.page_seq = b;
        break;
    }
    case E_OUT_SHARED:
        a->out.stride[2] = 0;
        in.expect = FZ_BIT(SDPA_ERR_BAD_STRIDE) | FZ_BIT(SDPA_ERR_OVERLAP);
        in.after_sequences = 1;
        snprintf(in.word, sizeof in.word, "out");
        break;
    case E_OUT_OVER_ARRAY: {
        /* one of the arrays, copied into one of the outputs */
        const int which = (int)(val % 4);
        view *x = &p->out[0][(at % 4)];
        if (!x->b)
            x = &p->out[0][O_OUT];
        const int64_t *src = which == 0   ? p->q_off
                             : which == 1 ? p->kv_off
                                          : p->lens;
        if (which == 3) {
            if (c->keys != RG_PAGED)
                break;
            const size_t bytes =
                (size_t)(c->seqs * c->tstride) * sizeof(int32_t);
            void *place = inside_output(x, bytes);
            if (!place)
                break;
            memcpy(place, g_table, bytes);
            a->block_table = place;
            snprintf(in.word, sizeof in.word, "block_table");
        } else {
            if ((which == 1 && c->keys != RG_PACKED) ||
                (which == 2 && !a->kv_lens))
                break;
            const size_t bytes =
                (size_t)(which == 2 ? s : s + 1) * sizeof(int64_t);
            int64_t *place = inside_output(x, bytes);
            if (!place)
                break;
            memcpy(place, src, bytes);
            if (which == 0)
                a->q_offsets = place;
            else if (which == 1)
                a->kv_offsets = place;
            else
                a->kv_lens = place;
            snprintf(in.word, sizeof in.word, "%s",
                     which == 0   ? "q_offsets"
                     : which == 1 ? "kv_offsets"
                                  : "kv_lens");
        }
        in.expect = FZ_BIT(SDPA_ERR_OVERLAP);
        in.after_sequences = 1;
        break;
    }
    case E_ARENA:
        in.expect = arena_expect(a);
        in.after_sequences = 1;
        snprintf(in.word, sizeof in.word, "overlaps");
        break;
    case E_KV_SCALE: {
        /* an FP8 scale that is no scale, or any scale with another type:
         * each sequence's own call refuses it (the arrays are both
         * calls') */
        const int which = (int)(val % 2);
        static const float one[MAXH] = {1, 1, 1};
        if (!p->scales[which])
            p->scales[which] = scale_array(which, one);
        static const float bad[5] = {NAN, INFINITY, 0.0f, -0.0f, -1.0f};
        if (c->kvt == SDPA_FP8_E4M3 || c->kvt == SDPA_FP8_E5M2)
            p->scales[which][at % (unsigned)c->hkv] = bad[(val >> 1) % 5];
        for (int call = 0; call < 2; call++)
            *(which ? &p->a[call].v_scale : &p->a[call].k_scale) =
                p->scales[which];
        break;
    }
    default:
        break;
    }
    return in;
}

/* An infinity at element `off` of a quantized k or v where the type has
 * one (E5M2's code, a block's d); 0 where it has none (E4M3). */
static int quant_infinity(void *data, int type, int64_t off, int negative)
{
    unsigned char *unit = (unsigned char *)data + rg_offset_bytes(type, off);
    const unsigned char sign = negative ? 0x80 : 0;
    if (type == SDPA_FP8_E5M2)
        *unit = (unsigned char)(sign | 0x7c);
    else if (quant_codec_is_block(type))
        unit[0] = 0x00, unit[1] = (unsigned char)(sign | 0x7c); /* d */
    else
        return 0;
    return 1;
}

/* A NaN in one sequence's q, k or v (or, quantized, an infinity); the
 * sequence or -1. */
static int64_t inject_nan(problem *p)
{
    cfg *c = &g_c;
    const unsigned kind = fz(F_NAN) % 4, at = fz(F_NAN_AT);
    if (kind == 0)
        return -1;
    const int64_t b = (int64_t)(at % (unsigned)c->seqs);
    const int64_t h =
        (int64_t)((at >> 4) % (unsigned)(kind == 1 ? c->hq : c->hkv));
    if (kind == 1) {
        if (c->tq[b] == 0)
            return -1;
        const int64_t r = c->q_off[b] + (int64_t)(fz(F_NAN) >> 2) % c->tq[b];
        rg_poison(p->q.t.data, c->qt,
                  fz_off4(&p->q.t, 0, h, r, (int64_t)(at % c->dk)));
        return b;
    }
    if (c->len[b] == 0)
        return -1;
    const int64_t j = (int64_t)(fz(F_NAN) >> 2) % c->len[b];
    view *x = kind == 2 ? &p->k : &p->v;
    const int64_t d = (int64_t)at % x->t.shape[3];
    int64_t o;
    if (c->keys == RG_PAGED)
        o = fz_off4(&x->t, g_table[b * c->tstride + j / c->page], h,
                    j % c->page, d);
    else
        o = fz_off4(&x->t, c->keys == RG_BATCHED ? b : 0, h,
                    (c->keys == RG_PACKED ? c->kv_off[b] : 0) + j, d);
    const unsigned qv = fz(F_QUANT);
    c->infinite = rg_is_quantized(c->kvt) && bits(qv, 2, 1) &&
                  quant_infinity(x->t.data, c->kvt, o, (int)bits(qv, 3, 1));
    if (!c->infinite)
        rg_poison(x->t.data, c->kvt, o);
    return b;
}

/* ------------------------------------------------------------------------ */
/* The sequences' own calls.                                                 */
/* ------------------------------------------------------------------------ */
typedef struct own {
    int status[MAXS];
    char first_message[512];
    int64_t first; /* the first sequence whose validation failed, or -1 */
    int nonfinite; /* some sequence's call gave NONFINITE */
    char nan_message[MAXS][256];
} own;

static void own_calls(sdpa_ctx *ctx, problem *p, own *o)
{
    const cfg *c = &g_c;
    o->first = -1;
    o->nonfinite = 0;
    for (int64_t b = 0; b < c->seqs; b++) {
        o->status[b] = SDPA_OK;
        if (c->tq[b] == 0)
            continue;
        sdpa_forward_args sub;
        rg_seq_args(&p->a[1], b, &p->nk.t, &p->nv.t, &sub);
        int st = sdpa_forward(ctx, &sub);
        fz_check_status("own call", st, FZ_ALL_DOCUMENTED, ctx);
        o->status[b] = st;
        if (st == SDPA_ERR_NONFINITE) {
            o->nonfinite = 1;
            snprintf(o->nan_message[b], sizeof o->nan_message[b], "%s",
                     sdpa_ctx_last_error(ctx));
        } else if (st != SDPA_OK && o->first < 0) {
            o->first = b;
            snprintf(o->first_message, sizeof o->first_message, "%s",
                     sdpa_ctx_last_error(ctx));
        }
    }
}

/* ------------------------------------------------------------------------ */
/* Checks of a successful call.                                              */
/* ------------------------------------------------------------------------ */
static void check_bitwise(const problem *p)
{
    const cfg *c = &g_c;
    for (int o = 0; o < OUTS; o++) {
        const view *x = &p->out[0][o], *y = &p->out[1][o];
        if (!x->b)
            continue;
        const size_t es = rg_type_size(x->type);
        for (int64_t h = 0; h < c->hq; h++)
            for (int64_t r = 0; r < c->total_q; r++)
                for (int64_t d = 0; d < x->t.shape[3]; d++) {
                    const char *gx = (const char *)x->t.data +
                                     (size_t)fz_off4(&x->t, 0, h, r, d) * es;
                    const char *gy = (const char *)y->t.data +
                                     (size_t)fz_off4(&y->t, 0, h, r, d) * es;
                    CHECK(memcmp(gx, gy, es) == 0,
                          "%s[0,%lld,%lld,%lld] (packed row) differs from "
                          "its sequence's own call: %.9g, own %.9g",
                          out_names[0][o], (long long)h, (long long)r,
                          (long long)d,
                          rg_value(x->t.data, x->type,
                                   fz_off4(&x->t, 0, h, r, d)),
                          rg_value(y->t.data, y->type,
                                   fz_off4(&y->t, 0, h, r, d)));
                }
    }
}

/* Is the reference cheap enough for this input? */
static int reference_affordable(void)
{
    const cfg *c = &g_c;
    double work = 0;
    for (int64_t b = 0; b < c->seqs; b++)
        work +=
            (double)(c->tq[b] * c->tk[b]) * (double)(c->hq * (c->dk + c->dv));
    return work <= 4e6;
}

static void check_reference(problem *p)
{
    const cfg *c = &g_c;
    if (!reference_affordable())
        return;
    for (int64_t b = 0; b < c->seqs; b++) {
        if (c->tq[b] == 0)
            continue;
        sdpa_forward_args sub;
        rg_seq_args(&p->a[0], b, &p->nk.t, &p->nv.t, &sub);
        ref_result r;
        CHECK(rg_reference(&sub, &r) == 0, "reference: out of memory");
        char where[64], msg[512];
        snprintf(where, sizeof where, "sequence %lld", (long long)b);
        int bad = rg_check(&sub, &r, where, msg, sizeof msg);
        ref_free(&r);
        CHECK(!bad, "%s", msg);
    }
}

/* The reference's verdict on empty rows of sequence b's own call. */
static int has_empty_row(problem *p, int64_t b)
{
    sdpa_forward_args sub;
    rg_seq_args(&p->a[1], b, &p->nk.t, &p->nv.t, &sub);
    ref_result r;
    CHECK(rg_reference(&sub, &r) == 0, "reference: out of memory");
    int empty = r.any_empty;
    ref_free(&r);
    return empty;
}

/* ------------------------------------------------------------------------ */
/* One input.                                                                */
/* ------------------------------------------------------------------------ */
static void describe(void)
{
    const cfg *c = &g_c;
    fz_describe("types %d/%d keys %s seqs %lld Hq %lld Hkv %lld Dk %lld Dv "
                "%lld err %s nan %d lens %d scales %d/%d (Tq, Tk, L):",
                c->dtype, c->kv_field, rg_key_names[c->keys],
                (long long)c->seqs, (long long)c->hq, (long long)c->hkv,
                (long long)c->dk, (long long)c->dv, err_names[c->err], c->nan,
                c->use_lens, c->scaled[0], c->scaled[1]);
    for (int64_t b = 0; b < c->seqs; b++)
        fz_describe(" (%lld,%lld,%lld)", (long long)c->tq[b],
                    (long long)c->tk[b], (long long)c->len[b]);
    if (c->keys == RG_PAGED)
        fz_describe(" page %lld pps %lld stride %lld pool %lld",
                    (long long)c->page, (long long)c->pps,
                    (long long)c->tstride, (long long)c->pages);
}

/* A head dimension: a block type's whole blocks (one, or two in 1 of 8),
 * or in 1 of 8 not (16 or 48: BAD_DIM); else small. */
static int64_t decode_dim(cfg *c, unsigned v)
{
    if (!quant_codec_is_block(c->kvt))
        return fz_small_dim(v, 16, 40);
    if (v % 8 == 7) {
        c->bad_dims = 1;
        return 16 + 32 * (int64_t)bits(v, 3, 1);
    }
    return 32 * (1 + (int64_t)(v % 8 == 6));
}

/* FP8 K/V: k_scale and v_scale, each given or not, 2^-e · (1 + m/8) with
 * e such that E4M3's 448 and E5M2's 57344 scale to tens at most. */
static void decode_scales(cfg *c)
{
    if (c->kvt != SDPA_FP8_E4M3 && c->kvt != SDPA_FP8_E5M2)
        return;
    const int least = c->kvt == SDPA_FP8_E5M2 ? 11 : 4;
    for (int s = 0; s < 2; s++) {
        c->scaled[s] = (int)bits(fz(F_QUANT), s, 1);
        for (int64_t h = 0; h < c->hkv; h++)
            c->scales[s][h] = ldexpf(1.0f + (float)fz_below(8) / 8,
                                     -least - (int)fz_below(6));
    }
}

static void decode(void)
{
    cfg *c = &g_c;
    memset(c, 0, sizeof *c);
    decode_types(c);
    c->hkv = 1 + (int64_t)(fz(F_HKV) % 3);
    c->hq = c->hkv * (1 + (int64_t)(fz(F_GROUP) % 4));
    c->dk = decode_dim(c, fz(F_DK));
    c->dv = decode_dim(c, fz(F_DV));
    decode_scales(c);
    decode_lengths(c);
    unsigned e = fz(F_ERR) % 32;
    c->err = e < E_COUNT ? (int)e : E_NONE;
    c->nan = (int)(fz(F_NAN) % 4);
    c->scale = fz_decode_scale(fz(F_SCALE) % 12, fz(F_SCALE) >> 4, 0);
    c->softcap = fz_decode_scale(fz(F_SOFTCAP) % 12, fz(F_SOFTCAP) >> 4, 1);
    static const double targets[4] = {2.0, 8.0, 0.5, 16.0};
    const double se = c->scale != 0 ? c->scale : 1.0 / sqrt((double)c->dk);
    c->amp =
        exp2(round(log2(sqrt(targets[fz(F_AMP) % 4] / (se * (double)c->dk)))));
}

static void run(void)
{
    decode();
    cfg *c = &g_c;
    problem p;
    memset(&p, 0, sizeof p);
    make_problem(&p);
    describe();
    /* the NaN first: it finds its key through the valid table */
    (void)inject_nan(&p);
    const injected in = inject(&p);
    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, F_OPT);
    const unsigned pv = fz(F_POOL);
    if (pv % 4 != 0) {
        g_pool = (hpool){.workers = 1 + (int)(pv % 4), .order = pv >> 2};
        CHECK(sdpa_ctx_set_parallel_for(ctx, pool_for, &g_pool,
                                        g_pool.workers) == SDPA_OK,
              "set_parallel_for");
    }
    own o;
    own_calls(ctx, &p, &o);
    /* the own calls against what the input calls for */
    int64_t rows = 0;
    for (int64_t b = 0; b < c->seqs; b++) {
        rows += c->tq[b];
        if (c->tq[b] == 0)
            continue;
        const int st = o.status[b];
        if (!c->types_ok)
            CHECK(st == SDPA_ERR_BAD_DTYPE,
                  "sequence %lld: own call %d with "
                  "types %d/%d",
                  (long long)b, st, c->dtype, c->kv_field);
        else if (c->bad_dims) /* k's dimension and strides, then v's */
            CHECK(st == SDPA_ERR_BAD_DIM ||
                      (c->bad_strides && st == SDPA_ERR_BAD_STRIDE),
                  "sequence %lld: own call %d with Dk %lld, Dv %lld of "
                  "a block type",
                  (long long)b, st, (long long)c->dk, (long long)c->dv);
        else if (in.page_seq == b)
            CHECK(st == SDPA_ERR_BAD_PAGE,
                  "sequence %lld: own call %d with a "
                  "bad page",
                  (long long)b, st);
        else if (c->err == E_KV_SCALE) /* the tensors are checked first */
            CHECK(st == SDPA_ERR_BAD_KV_SCALE ||
                      (c->bad_strides && st == SDPA_ERR_BAD_STRIDE),
                  "sequence %lld: own call %d with a bad scale", (long long)b,
                  st);
        else if ((st == SDPA_OK || st == SDPA_ERR_FULLY_MASKED_ROW) &&
                 reference_affordable())
            CHECK((st == SDPA_ERR_FULLY_MASKED_ROW) ==
                      (!fz_opt.empty_zero && !p.a[1].sinks &&
                       has_empty_row(&p, b)),
                  "sequence %lld: own call %d, but the reference %s an "
                  "empty row",
                  (long long)b, st, st ? "has no" : "has");
    }
    /* the ragged call's expected statuses */
    fz_sset expect;
    if (in.expect && !in.after_sequences)
        expect = in.expect;
    else if (rows == 0)
        /* nothing to do: only the settings and the required tensors'
         * presence are checked (a bad type, flag, causal mode, scale or
         * soft-cap; a NULL q, k, v or out) */
        expect = FZ_BIT(SDPA_OK) | FZ_BIT(SDPA_ERR_BAD_DTYPE) |
                 FZ_BIT(SDPA_ERR_BAD_FLAGS) | FZ_BIT(SDPA_ERR_BAD_CAUSAL) |
                 FZ_BIT(SDPA_ERR_BAD_SCALE) | FZ_BIT(SDPA_ERR_BAD_SOFTCAP) |
                 FZ_BIT(SDPA_ERR_NULL_POINTER);
    else if (o.first >= 0)
        /* the ragged call may see the injection in a sequence before */
        expect = FZ_BIT(o.status[o.first]) | (in.expect & ~FZ_BIT(SDPA_OK));
    else if (in.expect && (c->err != E_OUT_SHARED || rows >= 2)) {
        expect = in.expect;
        if ((expect & FZ_BIT(SDPA_OK)) && o.nonfinite)
            expect ^= FZ_BIT(SDPA_OK) | FZ_BIT(SDPA_ERR_NONFINITE);
    } else if (o.nonfinite)
        expect = FZ_BIT(SDPA_ERR_NONFINITE);
    else
        expect = FZ_BIT(SDPA_OK);
    /* k or v of a block type that split blocks: a sequence's own views
     * may not (one key has no row step; a sequence without keys gets other
     * views here), but the call's tensors do, which include/sdpa.h refuses
     * (SDPA_ERR_BAD_STRIDE), in a sequence or as a whole */
    const int splits = c->bad_strides && c->types_ok && rows > 0 &&
                       !(in.expect && !in.after_sequences);
    if (splits) {
        expect |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        expect &= ~(FZ_BIT(SDPA_OK) | FZ_BIT(SDPA_ERR_NONFINITE));
    }
    fz_describe(" expect %#llx", (unsigned long long)expect);
    fz_snapshot();
    size_t bytes = 0;
    long a0 = fz_alloc_count();
    int ws = sdpa_forward_workspace(ctx, &p.a[0], &bytes);
    CHECK(fz_alloc_count() == a0, "the workspace query allocated");
    fz_check_bufs(1, 0, "sdpa_forward_workspace");
    fz_check_status(
        "sdpa_forward_workspace", ws,
        (expect & ~FZ_BIT(SDPA_ERR_NONFINITE)) |
            (expect & FZ_BIT(SDPA_ERR_NONFINITE) ? FZ_BIT(SDPA_OK) : 0),
        ctx);
    int st = sdpa_forward(ctx, &p.a[0]);
    fz_check_status("sdpa_forward", st, expect, ctx);
    const char *msg = sdpa_ctx_last_error(ctx);
    if (st != SDPA_ERR_NONFINITE)
        CHECK(ws == st, "workspace %d, sdpa_forward %d", ws, st);
    if (splits && st == SDPA_ERR_BAD_STRIDE &&
        strstr(msg, "not a multiple of 32")) {
        /* any sequence's k or v, or the whole k's or v's */
        fz_check_bufs(1, 0, "a refused ragged call");
    } else if (st != SDPA_OK && st != SDPA_ERR_NONFINITE) {
        fz_check_bufs(1, 0, "a refused ragged call");
        CHECK(strncmp(msg, "sdpa_forward: ", 14) == 0, "message \"%s\"", msg);
        if (in.expect & FZ_BIT(st))
            CHECK(strstr(msg, in.word), "message \"%s\" lacks \"%s\"", msg,
                  in.word);
        if (o.first >= 0 && st == o.status[o.first] &&
            st == SDPA_ERR_BAD_PAGE) {
            /* checked for the whole table, with its own row index */
            char row[48], seq[48];
            snprintf(row, sizeof row, "sdpa_forward: block_table[%lld][",
                     (long long)o.first);
            snprintf(seq, sizeof seq, "of sequence %lld", (long long)o.first);
            CHECK(strncmp(msg, row, strlen(row)) == 0 && strstr(msg, seq),
                  "message \"%s\" lacks \"%s\" or \"%s\"", msg, row, seq);
        } else if (o.first >= 0 && st == o.status[o.first] &&
                   !(in.expect & FZ_BIT(st))) {
            char want[640];
            snprintf(want, sizeof want, "sdpa_forward: sequence %lld: %s",
                     (long long)o.first, o.first_message + 14);
            CHECK(strcmp(msg, want) == 0, "message \"%s\", expected \"%s\"",
                  msg, want);
        }
        if (c->err == E_KV_LEN || c->err == E_BAD_PAGE) {
            const int64_t b = c->err == E_BAD_PAGE
                                  ? in.page_seq
                                  : (int64_t)(fz(F_ERR_AT) % (unsigned)c->seqs);
            char seq[48];
            snprintf(seq, sizeof seq, "sequence %lld", (long long)b);
            if (st == SDPA_ERR_BAD_KV_LEN || st == SDPA_ERR_BAD_PAGE)
                CHECK(strstr(msg, seq), "message \"%s\" lacks \"%s\"", msg,
                      seq);
        }
    } else if (st == SDPA_ERR_NONFINITE) {
        fz_check_bufs(0, 1, "a non-finite ragged call");
        long long b, h, r, packed;
        CHECK(sscanf(msg,
                     "sdpa_forward: sequence %lld, head %lld, query row %lld "
                     "(packed row %lld)",
                     &b, &h, &r, &packed) == 4,
              "message \"%s\"", msg);
        CHECK(b >= 0 && b < c->seqs && o.status[b] == SDPA_ERR_NONFINITE,
              "NONFINITE names sequence %lld, whose own call gave %d", b,
              b >= 0 && b < c->seqs ? o.status[b] : -1);
        CHECK(packed == c->q_off[b] + r && r < c->tq[b],
              "row %lld of sequence %lld is packed row %lld, not %lld", r, b,
              (long long)(c->q_off[b] + r), packed);
        long long ob, oh, orow;
        CHECK(sscanf(o.nan_message[b],
                     "sdpa_forward: batch %lld, head %lld, query row %lld", &ob,
                     &oh, &orow) == 3,
              "own message \"%s\"", o.nan_message[b]);
        CHECK(oh == h && orow == r,
              "NONFINITE at head %lld row %lld, its own call at %lld, %lld", h,
              r, oh, orow);
    } else {
        fz_check_bufs(0, 1, "a ragged call");
        check_bitwise(&p);
        /* an infinity in K that gave its key a -inf logit (no weight)
         * makes the reference's bounds, taken from the magnitudes, not
         * finite */
        if (!c->infinite)
            check_reference(&p);
        fz_second_call(ctx, fz(F_SECOND), st, call_forward, &p.a[0], "outputs");
    }
    sdpa_ctx_set_parallel_for(ctx, NULL, NULL, 0);
    g_pool = (hpool){0};
    fz_ctx_end(ctx);
}

/* ------------------------------------------------------------------------ */
/* Huge mode: offsets of 2^31 .. 2^62 rows at fake addresses.               */
/* ------------------------------------------------------------------------ */
static void run_huge(void)
{
    const unsigned hv = fz(F_MODE) >> 3;
    const int64_t seqs = 1 + (int64_t)(fz(F_SEQS) % 4);
    const int64_t total = INT64_C(1) << (31 + (int)(fz(F_ERR_VAL) % 32));
    int64_t qo[5] = {0}, ko[5] = {0};
    for (int64_t b = 1; b <= seqs; b++) {
        qo[b] =
            b == seqs ? total : qo[b - 1] + (int64_t)(fz(F_LEN + (int)b) % 8);
        ko[b] = hv & 1 ? (b == seqs ? total : b) : b;
    }
    const int64_t hq = 1 + (int64_t)(fz(F_GROUP) % 4), d = 1 + fz(F_DK) % 8;
    const int64_t tk = hv & 1 ? total : seqs;
    fz_describe("huge: seqs %lld total_q %lld total_k %lld Hq %lld D %lld",
                (long long)seqs, (long long)total, (long long)tk, (long long)hq,
                (long long)d);
    float k[8 * 4], v[8 * 4];
    memset(k, 0, sizeof k);
    memset(v, 0, sizeof v);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    fz_set_layout(&a.q, 1, hq, total, d, (int)(hv >> 1 & 1), 0);
    fz_set_layout(&a.out, 1, hq, total, d, (int)(hv >> 2 & 1), 0);
    a.q.data = fz_top_ptr(0);
    a.out.data = fz_top_ptr(1);
    fz_set_layout(&a.k, 1, 1, tk, d, 0, 0);
    fz_set_layout(&a.v, 1, 1, tk, d, 0, 0);
    a.k.data = hv & 1 ? fz_top_ptr(2) : (void *)k;
    a.v.data = hv & 1 ? fz_top_ptr(3) : (void *)v;
    if (hv & 8) {
        fz_set_layout(&a.lse, 1, hq, total, 1, 0, 0);
        a.lse.data = fz_top_ptr(4);
    }
    a.seqs = seqs;
    a.q_offsets = qo;
    a.kv_offsets = ko;
    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, F_OPT);
    const fz_sset refused =
        FZ_BIT(SDPA_ERR_OVERFLOW) | FZ_BIT(SDPA_ERR_BAD_STRIDE) |
        FZ_BIT(SDPA_ERR_OVERLAP) | FZ_BIT(SDPA_ERR_SHAPE_MISMATCH) |
        FZ_BIT(SDPA_ERR_OFFSETS_ORDER) | FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
    size_t bytes = 0;
    long a0 = fz_alloc_count();
    int ws = sdpa_forward_workspace(ctx, &a, &bytes);
    CHECK(fz_alloc_count() == a0, "the workspace query allocated");
    fz_check_status("huge sdpa_forward_workspace", ws, refused, ctx);
    int st = sdpa_forward(ctx, &a);
    CHECK(st == ws, "huge: workspace %d, sdpa_forward %d", ws, st);
    fz_ctx_end(ctx);
}

/* ------------------------------------------------------------------------ */
/* Seeds.                                                                    */
/* ------------------------------------------------------------------------ */
/* F_KVTYPE's value for a quantized type. */
#define QUANT_KV(type) (1 | (4 + (type)-SDPA_FP8_E4M3) << 3)
/* Sequence b's Tq and Tk fields. */
/* clang-format off */
#define SEQ(b, q, k) {F_LEN + 2 * (b), (q)}, {F_LEN + 2 * (b) + 1, (k)}
/* clang-format on */

static const fz_seed seeds[] = {
    {"decode_and_prefill_packed",
     {{F_SEQS, 3},
      {F_HKV, 1},
      {F_GROUP, 3},
      {F_DK, 15},
      {F_DV, 7},
      SEQ(0, 0, 20),
      SEQ(1, 1, 0),
      SEQ(2, 3 | (20 << 2), 9),
      SEQ(3, 2, 2),
      {F_CAUSAL, 2},
      {F_OUTS, 7},
      FZ_OPTION(F_OPT, SDPA_OPT_EMPTY_ROWS, 1),
      {F_SEED0, 1},
      {-1, 0}}},
    {"paged_f16_shared_prefix_decode",
     {{F_QTYPE, 4},
      {F_SEQS, 5},
      {F_KEYS, 3},
      {F_PAGE, 2},
      {F_PPS, 3},
      {F_TABLE, 1 | (2 << 2) | (1 << 4)},
      {F_LAYOUT, 16},
      {F_LENS, 1 | (5 << 2)},
      {F_GROUP, 3},
      SEQ(0, 0, 0),
      SEQ(1, 2, 0),
      SEQ(2, 1, 0),
      SEQ(3, 3 | (9 << 2), 0),
      FZ_OPTION(F_OPT, SDPA_OPT_PATH, SDPA_PATH_DECODE),
      FZ_OPTION(F_OPT + 2, SDPA_OPT_EMPTY_ROWS, 1),
      {F_SEED0, 2},
      {-1, 0}}},
    {"batched_bf16_window_sinks_threads",
     {{F_QTYPE, 5},
      {F_SEQS, 3},
      {F_KEYS, 1},
      {F_WINDOW, 1 | (2 << 2) | (1 << 4)},
      {F_SINKS, 1},
      {F_ALIBI, 1},
      SEQ(0, 3 | (5 << 2), 40),
      SEQ(1, 0, 3),
      SEQ(2, 1, 10),
      FZ_OPTION(F_OPT, SDPA_OPT_NUM_THREADS, 2),
      {F_SECOND, 1},
      {F_SEED0, 3},
      {-1, 0}}},
    {"shared_f64_tiled_empty_zero",
     {{F_QTYPE, 3},
      {F_SEQS, 4},
      {F_KEYS, 2},
      {F_LENS, 1 | (1 << 2)},
      {F_CAUSAL, 1},
      SEQ(0, 3, 12),
      SEQ(1, 2, 12),
      SEQ(3, 3 | (30 << 2), 12),
      FZ_OPTION(F_OPT, SDPA_OPT_PATH, SDPA_PATH_TILED),
      FZ_OPTION(F_OPT + 2, SDPA_OPT_EMPTY_ROWS, 1),
      FZ_OPTION(F_OPT + 4, SDPA_OPT_BLOCK_K, 4),
      {F_SEED0, 4},
      {-1, 0}}},
    {"pool_decode_blas_f16_kv",
     {{F_KVTYPE, 4},
      {F_SEQS, 6},
      {F_POOL, 3 | (2 << 2)},
      {F_HKV, 2},
      {F_GROUP, 1},
      SEQ(0, 0, 50),
      SEQ(1, 0, 30),
      SEQ(2, 1, 2),
      SEQ(3, 0, 7),
      SEQ(4, 2, 60),
      SEQ(5, 0, 1),
      SEQ(6, 1, 9),
      /* value 7 of the path slot is SDPA_PATH_DECODE_BLAS */
      FZ_OPTION(F_OPT, SDPA_OPT_PATH, 7),
      FZ_OPTION(F_OPT + 2, SDPA_OPT_EMPTY_ROWS, 1),
      {F_SEED0, 5},
      {-1, 0}}},
    {"empty_rows_error_sequence_2",
     {{F_SEQS, 2},
      {F_LENS, 1 | (1 << 2)},
      SEQ(0, 0, 5),
      SEQ(1, 0, 5),
      SEQ(2, 0, 5),
      {F_SEED0, 6},
      {-1, 0}}},
    {"refuse_seqs_negative", {{F_ERR, E_SEQS_NEG}, {-1, 0}}},
    {"refuse_no_q_offsets", {{F_ERR, E_NO_QOFF}, {F_SEQS, 2}, {-1, 0}}},
    {"refuse_kv_offsets_alone", {{F_ERR, E_KVOFF_ALONE}, {F_SEQS, 1}, {-1, 0}}},
    {"refuse_mask", {{F_ERR, E_REFUSED_TENSOR}, {-1, 0}}},
    {"refuse_logits", {{F_ERR, E_REFUSED_TENSOR}, {F_ERR_VAL, 3}, {-1, 0}}},
    {"refuse_offsets_and_table",
     {{F_ERR, E_OFF_AND_TABLE}, {F_KEYS, 3}, {-1, 0}}},
    {"refuse_q_start", {{F_ERR, E_QOFF_START}, {-1, 0}}},
    {"refuse_kv_order",
     {{F_ERR, E_KVOFF_ORDER}, {F_SEQS, 3}, {F_ERR_AT, 1}, {-1, 0}}},
    {"refuse_q_end_beyond", {{F_ERR, E_QOFF_END}, {F_SEQS, 2}, {-1, 0}}},
    {"refuse_kv_end_below",
     {{F_ERR, E_KVOFF_END}, {F_ERR_VAL, 1}, SEQ(0, 0, 9), {-1, 0}}},
    {"refuse_lse_rows",
     {{F_ERR, E_ROWS_T}, {F_OUTS, 1}, {F_ERR_VAL, 2}, {-1, 0}}},
    {"refuse_keys_n_batched",
     {{F_ERR, E_KEYS_N}, {F_KEYS, 1}, {F_SEQS, 2}, {-1, 0}}},
    {"refuse_kv_len_sequence_1",
     {{F_ERR, E_KV_LEN}, {F_SEQS, 2}, {F_ERR_AT, 1}, {-1, 0}}},
    {"refuse_bad_page_sequence_1",
     {{F_ERR, E_BAD_PAGE},
      {F_KEYS, 3},
      {F_SEQS, 1},
      {F_ERR_AT, 1},
      {F_PAGE, 1},
      {F_PPS, 1},
      {-1, 0}}},
    {"refuse_out_rows_shared", {{F_ERR, E_OUT_SHARED}, {F_SEQS, 2}, {-1, 0}}},
    {"refuse_out_over_q_offsets",
     {{F_ERR, E_OUT_OVER_ARRAY},
      {F_SEQS, 2},
      SEQ(0, 3 | (8 << 2), 4),
      {-1, 0}}},
    {"arena_out_into_q",
     {{F_ERR, E_ARENA}, {F_ERR_VAL, 1}, {F_SEQS, 1}, SEQ(0, 2, 4), {-1, 0}}},
    {"arena_out_after_q", {{F_ERR, E_ARENA}, {F_SEQS, 1}, {-1, 0}}},
    {"nan_in_q_sequence_1",
     {{F_NAN, 1 | (1 << 2)},
      {F_NAN_AT, 1},
      {F_SEQS, 2},
      SEQ(1, 2, 6),
      {-1, 0}}},
    {"nan_in_shared_v",
     {{F_NAN, 3}, {F_KEYS, 2}, {F_SEQS, 2}, SEQ(1, 1, 6), {-1, 0}}},
    {"refuse_types_f64_with_f16",
     {{F_QTYPE, 3}, {F_KVTYPE, 4}, {F_SEQS, 1}, {-1, 0}}},
    {"huge_offsets_packed",
     {{F_MODE, 7}, {F_SEQS, 2}, {F_ERR_VAL, 9}, {-1, 0}}},
    {"huge_offsets_keys_too",
     {{F_MODE, 7 | (1 << 3) | (8 << 3)},
      {F_SEQS, 3},
      {F_ERR_VAL, 31},
      {-1, 0}}},
    {"packed_q8_0_decode_and_prefill",
     {{F_KVTYPE, QUANT_KV(SDPA_Q8_0)},
      {F_SEQS, 3},
      {F_HKV, 1},
      {F_GROUP, 3},
      SEQ(0, 0, 20),
      SEQ(1, 1, 0),
      SEQ(2, 3 | (6 << 2), 9),
      SEQ(3, 2, 2),
      {F_CAUSAL, 2},
      {F_OUTS, 7},
      FZ_OPTION(F_OPT, SDPA_OPT_EMPTY_ROWS, 1),
      {-1, 0}}},
    {"paged_q4_0_shared_prefix_f16",
     {{F_KVTYPE, QUANT_KV(SDPA_Q4_0)},
      {F_QTYPE, 4},
      {F_SEQS, 4},
      {F_KEYS, 3},
      {F_PAGE, 2},
      {F_PPS, 3},
      {F_TABLE, 1 | (2 << 2) | (1 << 4)},
      {F_LAYOUT, 16},
      {F_LENS, 1 | (5 << 2)},
      SEQ(0, 0, 0),
      SEQ(1, 2, 0),
      SEQ(2, 1, 0),
      SEQ(3, 3 | (5 << 2), 0),
      FZ_OPTION(F_OPT, SDPA_OPT_EMPTY_ROWS, 1),
      {-1, 0}}},
    {"batched_e4m3_scales_bf16_window_sinks",
     {{F_KVTYPE, QUANT_KV(SDPA_FP8_E4M3)},
      {F_QTYPE, 5},
      {F_QUANT, 3},
      {F_SEQS, 2},
      {F_KEYS, 1},
      {F_HKV, 2},
      {F_WINDOW, 1 | (2 << 2) | (1 << 4)},
      {F_SINKS, 1},
      SEQ(0, 3 | (5 << 2), 40),
      SEQ(1, 0, 3),
      SEQ(2, 1, 10),
      {-1, 0}}},
    {"shared_e5m2_v_scale_alibi_threads",
     {{F_KVTYPE, QUANT_KV(SDPA_FP8_E5M2)},
      {F_QUANT, 2},
      {F_SEQS, 3},
      {F_KEYS, 2},
      {F_ALIBI, 1},
      {F_PADS, 3 << 2},
      SEQ(0, 2, 30),
      SEQ(1, 1, 30),
      SEQ(2, 0, 30),
      FZ_OPTION(F_OPT, SDPA_OPT_NUM_THREADS, 2),
      {F_SECOND, 1},
      {-1, 0}}},
    {"pool_decode_q8_0_padded_bthd",
     {{F_KVTYPE, QUANT_KV(SDPA_Q8_0)},
      {F_SEQS, 5},
      {F_POOL, 3 | (2 << 2)},
      {F_HKV, 2},
      {F_GROUP, 1},
      {F_DV, 6},
      {F_LAYOUT, 4},
      {F_PADS, 1 << 2},
      SEQ(0, 0, 50),
      SEQ(1, 0, 30),
      SEQ(2, 1, 2),
      SEQ(3, 0, 7),
      SEQ(4, 2, 60),
      SEQ(5, 0, 1),
      FZ_OPTION(F_OPT, SDPA_OPT_PATH, SDPA_PATH_DECODE),
      FZ_OPTION(F_OPT + 2, SDPA_OPT_EMPTY_ROWS, 1),
      {-1, 0}}},
    {"refuse_q4_0_dk_not_blocks",
     {{F_KVTYPE, QUANT_KV(SDPA_Q4_0)},
      {F_DK, 7},
      {F_SEQS, 1},
      SEQ(1, 2, 5),
      {-1, 0}}},
    {"refuse_k_scale_nan_e4m3",
     {{F_KVTYPE, QUANT_KV(SDPA_FP8_E4M3)},
      {F_ERR, E_KV_SCALE},
      {F_SEQS, 1},
      {-1, 0}}},
    {"refuse_v_scale_negative_e5m2",
     {{F_KVTYPE, QUANT_KV(SDPA_FP8_E5M2)},
      {F_QUANT, 3},
      {F_HKV, 2},
      {F_ERR, E_KV_SCALE},
      {F_ERR_VAL, 1 | (4 << 1)},
      {F_ERR_AT, 1},
      {-1, 0}}},
    {"refuse_scale_with_q8_0",
     {{F_KVTYPE, QUANT_KV(SDPA_Q8_0)},
      {F_ERR, E_KV_SCALE},
      {F_ERR_VAL, 1},
      {-1, 0}}},
    {"refuse_types_f64_with_q8_0",
     {{F_QTYPE, 3}, {F_KVTYPE, QUANT_KV(SDPA_Q8_0)}, {F_SEQS, 1}, {-1, 0}}},
    {"nan_code_in_packed_e4m3_k",
     {{F_KVTYPE, QUANT_KV(SDPA_FP8_E4M3)},
      {F_NAN, 2 | (1 << 2)},
      {F_NAN_AT, 1},
      {F_SEQS, 2},
      SEQ(1, 2, 6),
      {-1, 0}}},
    {"inf_d_in_q8_0_v",
     {{F_KVTYPE, QUANT_KV(SDPA_Q8_0)},
      {F_NAN, 3},
      {F_QUANT, 4},
      {F_KEYS, 1},
      {F_SEQS, 2},
      SEQ(1, 1, 6),
      {-1, 0}}},
    {"inf_e5m2_in_k_paged",
     {{F_KVTYPE, QUANT_KV(SDPA_FP8_E5M2)},
      {F_NAN, 2},
      {F_QUANT, 4 | 8},
      {F_KEYS, 3},
      {F_PAGE, 1},
      {F_PPS, 2},
      {F_SEQS, 1},
      SEQ(0, 2, 0),
      {-1, 0}}},
    /* rows padded by half a block: a sequence with keys steps by it */
    {"refuse_packed_q4_0_split_stride",
     {{F_KVTYPE, QUANT_KV(SDPA_Q4_0)},
      {F_PADS, 3 << 2},
      {F_SEQS, 1},
      SEQ(0, 0, 20),
      {-1, 0}}},
    /* one key a sequence, batched: no own view steps by it, the whole k
     * does (README's finding 4, fixed) */
    {"batched_q8_0_split_stride_one_key",
     {{F_KVTYPE, QUANT_KV(SDPA_Q8_0)},
      {F_KEYS, 1},
      {F_PADS, 3 << 2},
      {F_SEQS, 2},
      {-1, 0}}},
};

FZ_TARGET("fuzz_ragged", "RAGGED", "one_sequence_default", F_SEED0, F_MODE,
          NULL, run, run_huge);
