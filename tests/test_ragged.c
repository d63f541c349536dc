/*
 * Ragged batches in sdpa_forward (1.2: seqs, q_offsets, kv_offsets), as
 * include/sdpa.h promises them: each sequence's out, lse, max_weight and
 * entropy are bitwise those of a rectangular call on its own views on the
 * same context, for every thread count and the caller's parallel-for.
 *
 *  - test_ragged_packed_keys, test_ragged_batched_keys,
 *    test_ragged_shared_keys, test_ragged_paged_keys: random
 *    configurations from fixed seeds, one test per key form (kv_offsets;
 *    k and v of [seqs, ...]; of [1, ...]; a block table over a shuffled
 *    pool in vLLM's or the head-major layout), each a mix of sequence
 *    lengths with Tq_b = 0 and 1, Tk_b = 0 (packed, under
 *    SDPA_EMPTY_ROWS_ZERO or with sinks) and 1, decode-shaped (few rows
 *    per KV head) and prefill-shaped sequences in one call; every storage
 *    type combination (float32, float64, float16 and bfloat16 K/V,
 *    float16 and bfloat16 q/out) in turn; GQA, kv_lens, causal none /
 *    top-left / bottom-right, windows, ALiBi, sinks, soft-cap, scales;
 *    q/out in the packed [total_q, Hq, D] memory or head-major with padded
 *    rows; lse, max_weight and entropy in either layout; block sizes. Each
 *    runs on every path (SDPA_OPT_PATH AUTO, MATERIALISED, TILED, DECODE,
 *    DECODE_BLAS) and row kernel the CPU has, on 1, 2 and 3 workers and a
 *    caller's parallel-for of 3 threads (tests/common/caller_pool.h): the
 *    outputs, padding and guard bytes included, must be bitwise those of
 *    the sequences' own calls (tests/common/ragged.c makes their views
 *    from the header's description), and within tests/test_random.c's
 *    tolerances (plus one rounding of a half out) of the long-double
 *    reference of each sequence. A call whose sequence's own call fails
 *    (a row without keys under SDPA_EMPTY_ROWS_ERROR) must fail with the
 *    first such sequence's status and its message prefixed
 *    "sdpa_forward: sequence <b>: ", outputs untouched;
 *    sdpa_forward_workspace gives the same status. Inputs are never
 *    written; K and V rows past kv_lens and unused pages hold NaN.
 *  - test_ragged_packed_layout: FlashAttention's varlen memory, q, out, k
 *    and v as [total, H, D] rows (sdpa_tensor_bthd(data, 1, H, total,
 *    D)): each sequence's rows against the reference and against a
 *    rectangular call on contiguous copies of its own (same values, other
 *    memory) within the reference's tolerance.
 *  - test_ragged_refusals: every bad ragged argument with its status, a
 *    message naming the argument, the sequence or the offset, and out and
 *    lse (with guard bytes) untouched; sdpa_forward_workspace agrees.
 *  - test_ragged_nonfinite: a NaN in one sequence's q is
 *    SDPA_ERR_NONFINITE naming that sequence, its head, its row and the
 *    packed row, on every path and thread count.
 *  - test_ragged_workspace: the workspace query on a ragged call allocates
 *    nothing and announces what the call then holds; a repeated call, and
 *    a smaller one, allocate nothing.
 *  - test_ragged_layer_and_merge: sdpa_mha_forward is what it was with
 *    the 1.2 fields zero; it and sdpa_mha_backward refuse attention
 *    arguments with any ragged field (batches of two and of one) with
 *    SDPA_ERR_BAD_RAGGED, y and the gradients untouched; sdpa_merge of a
 *    sequence's key halves gives what the ragged call gave.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the three headers above first */
#include <cmocka.h>

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "caller_pool.h"
#include "checks.h"
#include "ragged.h"
#include "reference.h"
#include "testutil.h"

enum { MAX_SEQS = 8, GUARD = 16, RUNNERS = 4 };

/* ---- Buffers: a view over memory with guard bytes after it. ----------- */

typedef struct rbuf {
    sdpa_tensor t;
    int type; /* storage type */
    unsigned char *mem;
    size_t bytes; /* of the view's span; GUARD more are allocated */
} rbuf;

static size_t span_elems(const sdpa_tensor *t)
{
    for (int d = 0; d < 4; d++)
        if (t->shape[d] <= 0)
            return 1;
    return tensor_span(t);
}

/* [n, h, t, d] heads outer, or T outer (bthd: [n, t, h, d] memory), rows
 * padded by pad elements; an output holds the sentinel, an input NaN (its
 * logical elements are then written by rb_fill). */
static void rb_make(rbuf *x, int type, int64_t n, int64_t h, int64_t t,
                    int64_t d, int bthd, int64_t pad, int output)
{
    memset(x, 0, sizeof *x);
    x->type = type;
    int64_t shape[4] = {n, h, t, d};
    memcpy(x->t.shape, shape, sizeof shape);
    x->t.stride[3] = 1;
    if (!bthd) {
        x->t.stride[2] = d + pad;
        x->t.stride[1] = t * (d + pad);
        x->t.stride[0] = h * t * (d + pad);
    } else {
        x->t.stride[1] = d;
        x->t.stride[2] = h * d + pad;
        x->t.stride[0] = t * (h * d + pad);
    }
    const size_t elems = span_elems(&x->t);
    x->bytes = elems * rg_type_size(type);
    x->mem = malloc(x->bytes + GUARD);
    assert_non_null(x->mem);
    x->t.data = x->mem;
    fill_sentinel(x->mem, x->bytes + GUARD);
    if (!output)
        for (size_t i = 0; i < elems; i++)
            rg_poison(x->mem, type, (int64_t)i);
}

static void rb_free(rbuf *x)
{
    free(x->mem);
    memset(x, 0, sizeof *x);
}

static int64_t at4(const sdpa_tensor *t, int64_t a, int64_t b, int64_t c,
                   int64_t d)
{
    return toff(t, a, b, c, d);
}

/* A multiple of 1/256 in (-1, 1) times amp (a power of two): exact in
 * every storage type. */
static double grid(rng *r, double amp)
{
    return amp * (double)rng_int(r, -255, 255) / 256.0;
}

static void rb_fill(rbuf *x, rng *r, double amp)
{
    const int64_t *s = x->t.shape;
    for (int64_t a = 0; a < s[0]; a++)
        for (int64_t b = 0; b < s[1]; b++)
            for (int64_t c = 0; c < s[2]; c++)
                for (int64_t d = 0; d < s[3]; d++)
                    rg_store(x->mem, x->type, at4(&x->t, a, b, c, d),
                             grid(r, amp));
}

/* Rows [from, to) of item a of a key tensor: NaN (never read). */
static void rb_poison_rows(rbuf *x, int64_t a, int64_t from, int64_t to)
{
    for (int64_t h = 0; h < x->t.shape[1]; h++)
        for (int64_t j = from; j < to; j++)
            for (int64_t d = 0; d < x->t.shape[3]; d++)
                rg_poison(x->mem, x->type, at4(&x->t, a, h, j, d));
}

static void rb_clear(rbuf *x)
{
    if (x->mem)
        fill_sentinel(x->mem, x->bytes + GUARD);
}

static int rb_untouched(const rbuf *x)
{
    return !x->mem || first_non_sentinel(x->mem, x->bytes + GUARD) < 0;
}

/* ---- A configuration. -------------------------------------------------- */

typedef struct combo {
    int q, kv; /* out is q's type */
} combo;

static const combo combos[] = {
    {SDPA_FLOAT32, SDPA_FLOAT32},  {SDPA_FLOAT64, SDPA_FLOAT64},
    {SDPA_FLOAT16, SDPA_FLOAT16},  {SDPA_BFLOAT16, SDPA_BFLOAT16},
    {SDPA_FLOAT32, SDPA_FLOAT16},  {SDPA_FLOAT32, SDPA_BFLOAT16},
    {SDPA_FLOAT16, SDPA_BFLOAT16}, {SDPA_BFLOAT16, SDPA_FLOAT32},
};
enum { COMBOS = sizeof combos / sizeof combos[0] };

typedef struct rcfg {
    uint64_t seed;
    combo types;
    int keys; /* RG_* */
    int64_t seqs, hq, hkv, dk, dv;
    int64_t tq[MAX_SEQS], tk[MAX_SEQS]; /* tk: every sequence's Tk_b */
    int64_t page, pps, tstride;         /* paged */
    int vllm;
    int use_lens;
    int64_t lens[MAX_SEQS];
    int causal;
    int window;
    int64_t wl, wr;
    int alibi, sinks;
    double slopes[TP_MAX_H], sink[TP_MAX_H];
    double scale, softcap, amp;
    int q_bthd, out_bthd, kv_bthd, row_bthd;
    int64_t pad;
    int want_lse, want_mw, want_en;
    int empty_zero;
    int64_t block_q, block_k;
} rcfg;

static void cfg_print(const rcfg *c)
{
    print_message("  cfg seed=%llu keys=%s q=%d kv=%d seqs=%lld Hq=%lld "
                  "Hkv=%lld Dk=%lld Dv=%lld causal=%d window=%d(%lld,%lld) "
                  "alibi=%d sinks=%d scale=%g softcap=%g zero=%d block=%lld,"
                  "%lld layouts q%d out%d kv%d rows%d pad=%lld lse%d mw%d "
                  "en%d page=%lld pps=%lld vllm=%d\n    (Tq, Tk, len):",
                  (unsigned long long)c->seed, rg_key_names[c->keys],
                  c->types.q, c->types.kv, (long long)c->seqs, (long long)c->hq,
                  (long long)c->hkv, (long long)c->dk, (long long)c->dv,
                  c->causal, c->window, (long long)c->wl, (long long)c->wr,
                  c->alibi, c->sinks, c->scale, c->softcap, c->empty_zero,
                  (long long)c->block_q, (long long)c->block_k, c->q_bthd,
                  c->out_bthd, c->kv_bthd, c->row_bthd, (long long)c->pad,
                  c->want_lse, c->want_mw, c->want_en, (long long)c->page,
                  (long long)c->pps, c->vllm);
    for (int64_t b = 0; b < c->seqs; b++)
        print_message(" (%lld, %lld, %lld)", (long long)c->tq[b],
                      (long long)c->tk[b],
                      c->use_lens ? (long long)c->lens[b] : -1LL);
    print_message("\n");
}

/* Tq_b: none, one row, a decode step of a few, or a prefill chunk. */
static int64_t draw_rows(rng *r)
{
    int64_t m = rng_int(r, 0, 19);
    return m < 3    ? 0
           : m < 8  ? 1
           : m < 11 ? rng_int(r, 2, 3)
                    : rng_int(r, 4, 40);
}

static void cfg_draw(rcfg *c, int keys, uint64_t seed, int index)
{
    rng r = {seed * UINT64_C(0x9E3779B97F4A7C15) + (uint64_t)keys};
    memset(c, 0, sizeof *c);
    c->seed = seed;
    c->keys = keys;
    c->types = combos[index % COMBOS];
    c->seqs = rng_int(&r, 1, 6);
    c->hkv = rng_int(&r, 1, 2);
    c->hq = c->hkv * rng_int(&r, 1, 4);
    c->dk = rng_int(&r, 0, 3) == 0 ? 32 : rng_int(&r, 1, 20);
    c->dv = rng_int(&r, 0, 2) == 0 ? c->dk : rng_int(&r, 1, 20);
    c->empty_zero = rng_int(&r, 0, 2) != 0;
    c->sinks = rng_int(&r, 0, 2) == 0;
    for (int h = 0; h < TP_MAX_H; h++)
        c->sink[h] = grid(&r, 4.0);
    const int keyless_ok = c->empty_zero || c->sinks;
    int64_t any_rows = 0;
    for (int64_t b = 0; b < c->seqs; b++) {
        c->tq[b] = draw_rows(&r);
        any_rows += c->tq[b];
    }
    if (any_rows == 0)
        c->tq[rng_int(&r, 0, c->seqs - 1)] = rng_int(&r, 1, 5);
    if (keys == RG_PAGED) {
        static const int64_t pages[] = {1, 3, 8, 16};
        c->page = pages[rng_int(&r, 0, 3)];
        c->pps = rng_int(&r, 1, c->page == 1 ? 40 : 80 / c->page);
        c->tstride = c->pps + rng_int(&r, 0, 2);
        c->vllm = (int)rng_int(&r, 0, 1);
    }
    int64_t common = rng_int(&r, 0, 3) == 0 ? 1 : rng_int(&r, 2, 80);
    for (int64_t b = 0; b < c->seqs; b++) {
        int64_t m = rng_int(&r, 0, 9);
        if (keys == RG_PAGED)
            c->tk[b] = c->pps * c->page;
        else if (keys != RG_PACKED)
            c->tk[b] = common;
        else
            c->tk[b] = m == 0 && keyless_ok ? 0
                       : m < 3              ? 1
                                            : rng_int(&r, 2, 80);
    }
    if (keys == RG_PACKED && c->tk[0] == 0)
        c->tk[0] = 1; /* total_k >= 1 (a zero extent is BAD_DIM) */
    c->use_lens = rng_int(&r, 0, 2) != 0;
    for (int64_t b = 0; b < c->seqs; b++) {
        int64_t m = rng_int(&r, 0, 9);
        c->lens[b] = !c->use_lens || m < 3 ? c->tk[b]
                     : m == 3              ? (keyless_ok ? 0 : c->tk[b])
                     : c->tk[b] == 0       ? 0
                                           : rng_int(&r, 1, c->tk[b]);
    }
    c->causal = (int)rng_int(&r, 0, 2);
    c->window = rng_int(&r, 0, 3) == 0;
    int64_t w = rng_int(&r, 0, 3);
    c->wl = w == 0 ? -1 : w == 1 ? 0 : rng_int(&r, 1, 30);
    w = rng_int(&r, 0, 3);
    c->wr = w == 0 ? -1 : w == 1 ? 0 : rng_int(&r, 1, 30);
    c->alibi = rng_int(&r, 0, 2) == 0;
    for (int h = 0; h < TP_MAX_H; h++)
        c->slopes[h] = 0.5 * rng_unit(&r);
    int64_t s = rng_int(&r, 0, 5);
    c->softcap = s == 0 ? 5.0 : s == 1 ? 30.0 : 0.0;
    s = rng_int(&r, 0, 3);
    c->scale = s == 0   ? 0.0
               : s == 1 ? 1.0
                        : 0.0625 * (double)rng_int(&r, 1, 16);
    double se = c->scale == 0.0 ? 1.0 / sqrt((double)c->dk) : c->scale;
    /* |logit| <= scale · Dk · amp² about 2..8: amp a power of two */
    c->amp = exp2(round(log2(sqrt(4.0 / (se * (double)c->dk)))));
    c->q_bthd = (int)rng_int(&r, 0, 1);
    c->out_bthd = (int)rng_int(&r, 0, 1);
    c->kv_bthd = (int)rng_int(&r, 0, 1);
    c->row_bthd = (int)rng_int(&r, 0, 1);
    c->pad = rng_int(&r, 0, 2) == 0 ? rng_int(&r, 1, 3) : 0;
    c->want_lse = rng_int(&r, 0, 3) != 0;
    c->want_mw = rng_int(&r, 0, 2) == 0;
    c->want_en = rng_int(&r, 0, 2) == 0;
    static const int64_t blocks[] = {0, 0, 0, 1, 3, 8, 16};
    c->block_q = blocks[rng_int(&r, 0, 6)];
    c->block_k = blocks[rng_int(&r, 0, 6)];
}

/* ---- A ragged problem: its packed tensors, twice the outputs. --------- */

enum { O_OUT, O_LSE, O_MW, O_EN, OUTS };

typedef struct rprob {
    rcfg c;
    int64_t total_q, total_k;
    int64_t q_off[MAX_SEQS + 1], kv_off[MAX_SEQS + 1];
    int32_t *table;
    rbuf q, k, v, nk, nv;
    rbuf out[2][OUTS]; /* the ragged call's, the sequences' own calls' */
    unsigned char *inputs;
    size_t input_bytes;
    sdpa_forward_args a[2]; /* the ragged call, over out[0] / out[1] */
} rprob;

static void make_pool(rprob *p, rng *r, rbuf *x, int64_t d, double amp)
{
    const rcfg *c = &p->c;
    const int64_t pages = c->seqs * c->pps + 2; /* two never used */
    rb_make(x, c->types.kv, pages, c->hkv, c->page, d, c->vllm, 0, 0);
    for (int64_t b = 0; b < c->seqs; b++) {
        const int64_t len = c->lens[b];
        for (int64_t h = 0; h < c->hkv; h++)
            for (int64_t j = 0; j < len; j++)
                for (int64_t e = 0; e < d; e++) {
                    int64_t id = p->table[b * c->tstride + j / c->page];
                    rg_store(x->mem, x->type, at4(&x->t, id, h, j % c->page, e),
                             grid(r, amp));
                }
    }
}

static void make_table(rprob *p, rng *r)
{
    const rcfg *c = &p->c;
    const int64_t pages = c->seqs * c->pps + 2;
    int32_t perm[MAX_SEQS * 80 + 2];
    tp_permutation(perm, pages, r);
    p->table = malloc((size_t)(c->seqs * c->tstride) * sizeof *p->table);
    assert_non_null(p->table);
    for (int64_t b = 0; b < c->seqs; b++) {
        /* pages holding no valid key may hold anything */
        const int64_t used = (c->lens[b] + c->page - 1) / c->page;
        for (int64_t s = 0; s < c->tstride; s++)
            p->table[b * c->tstride + s] = s < used ? perm[b * c->pps + s]
                                           : s % 2  ? -1
                                                    : INT32_MAX;
    }
}

static void make_keys(rprob *p, rng *r)
{
    const rcfg *c = &p->c;
    const int kvt = c->types.kv;
    switch (c->keys) {
    case RG_PACKED:
        rb_make(&p->k, kvt, 1, c->hkv, p->total_k, c->dk, c->kv_bthd, c->pad,
                0);
        rb_make(&p->v, kvt, 1, c->hkv, p->total_k, c->dv, c->kv_bthd, c->pad,
                0);
        rb_fill(&p->k, r, c->amp);
        rb_fill(&p->v, r, 1.0);
        for (int64_t b = 0; b < c->seqs; b++) {
            rb_poison_rows(&p->k, 0, p->kv_off[b] + c->lens[b],
                           p->kv_off[b + 1]);
            rb_poison_rows(&p->v, 0, p->kv_off[b] + c->lens[b],
                           p->kv_off[b + 1]);
        }
        break;
    case RG_BATCHED:
    case RG_SHARED: {
        const int64_t n = c->keys == RG_SHARED ? 1 : c->seqs;
        rb_make(&p->k, kvt, n, c->hkv, c->tk[0], c->dk, c->kv_bthd, c->pad, 0);
        rb_make(&p->v, kvt, n, c->hkv, c->tk[0], c->dv, c->kv_bthd, c->pad, 0);
        rb_fill(&p->k, r, c->amp);
        rb_fill(&p->v, r, 1.0);
        for (int64_t b = 0; b < n; b++) {
            int64_t len = c->lens[b];
            for (int64_t o = 0; n == 1 && o < c->seqs; o++)
                len = c->lens[o] > len ? c->lens[o] : len;
            rb_poison_rows(&p->k, b, len, c->tk[0]);
            rb_poison_rows(&p->v, b, len, c->tk[0]);
        }
        break;
    }
    default:
        make_table(p, r);
        make_pool(p, r, &p->k, c->dk, c->amp);
        make_pool(p, r, &p->v, c->dv, 1.0);
        break;
    }
}

static void prob_make(rprob *p, const rcfg *c)
{
    memset(p, 0, sizeof *p);
    p->c = *c;
    rng r = {c->seed ^ UINT64_C(0xA5A5A5A5DEADBEEF)};
    for (int64_t b = 0; b < c->seqs; b++) {
        p->q_off[b + 1] = p->q_off[b] + c->tq[b];
        p->kv_off[b + 1] = p->kv_off[b] + (c->keys == RG_PACKED ? c->tk[b] : 0);
    }
    p->total_q = p->q_off[c->seqs];
    p->total_k = p->kv_off[c->seqs];
    const int qt = c->types.q, ct = rg_compute_type(qt);
    rb_make(&p->q, qt, 1, c->hq, p->total_q, c->dk, c->q_bthd, c->pad, 0);
    rb_fill(&p->q, &r, c->amp);
    make_keys(p, &r);
    rb_make(&p->nk, c->types.kv, 1, c->hkv, 1, c->dk, 0, 0, 0);
    rb_make(&p->nv, c->types.kv, 1, c->hkv, 1, c->dv, 0, 0, 0);
    for (int s = 0; s < 2; s++) {
        rb_make(&p->out[s][O_OUT], qt, 1, c->hq, p->total_q, c->dv, c->out_bthd,
                c->pad, 1);
        const int want[3] = {c->want_lse, c->want_mw, c->want_en};
        for (int o = 0; o < 3; o++)
            if (want[o])
                rb_make(&p->out[s][O_LSE + o], ct, 1, c->hq, p->total_q, 1,
                        c->row_bthd, 0, 1);
        sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
        a.dtype = qt;
        a.kv_dtype = c->types.kv;
        a.causal = c->causal;
        a.scale = c->scale;
        a.softcap = c->softcap;
        a.kv_lens = c->use_lens ? p->c.lens : NULL;
        if (c->window) {
            a.flags |= SDPA_FLAG_WINDOW;
            a.window_left = c->wl;
            a.window_right = c->wr;
        }
        a.alibi_slopes = c->alibi ? p->c.slopes : NULL;
        a.sinks = c->sinks ? p->c.sink : NULL;
        a.q = p->q.t;
        a.k = p->k.t;
        a.v = p->v.t;
        sdpa_tensor *outs[OUTS] = {&a.out, &a.lse, &a.max_weight, &a.entropy};
        for (int o = 0; o < OUTS; o++)
            *outs[o] = p->out[s][o].t;
        a.seqs = c->seqs;
        a.q_offsets = p->q_off;
        if (c->keys == RG_PACKED)
            a.kv_offsets = p->kv_off;
        if (c->keys == RG_PAGED) {
            a.block_table = p->table;
            a.pages_per_seq = c->pps;
            a.block_table_stride = c->tstride;
        }
        p->a[s] = a;
    }
    /* a copy of every input, to check that none is written */
    const rbuf *in[3] = {&p->q, &p->k, &p->v};
    for (int i = 0; i < 3; i++)
        p->input_bytes += in[i]->bytes + GUARD;
    p->inputs = malloc(p->input_bytes);
    assert_non_null(p->inputs);
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        memcpy(p->inputs + at, in[i]->mem, in[i]->bytes + GUARD);
        at += in[i]->bytes + GUARD;
    }
}

static void inputs_unchanged(const rprob *p)
{
    const rbuf *in[3] = {&p->q, &p->k, &p->v};
    size_t at = 0;
    for (int i = 0; i < 3; i++) {
        if (memcmp(p->inputs + at, in[i]->mem, in[i]->bytes + GUARD) != 0) {
            cfg_print(&p->c);
            fail_msg("input %d was written", i);
        }
        at += in[i]->bytes + GUARD;
    }
}

static void prob_free(rprob *p)
{
    rb_free(&p->q);
    rb_free(&p->k);
    rb_free(&p->v);
    rb_free(&p->nk);
    rb_free(&p->nv);
    for (int s = 0; s < 2; s++)
        for (int o = 0; o < OUTS; o++)
            rb_free(&p->out[s][o]);
    free(p->table);
    free(p->inputs);
}

static void clear_outputs(rprob *p, int set)
{
    for (int o = 0; o < OUTS; o++)
        rb_clear(&p->out[set][o]);
}

static int outputs_untouched(const rprob *p, int set)
{
    for (int o = 0; o < OUTS; o++)
        if (!rb_untouched(&p->out[set][o]))
            return 0;
    return 1;
}

static int outputs_equal(const rprob *p)
{
    for (int o = 0; o < OUTS; o++)
        if (p->out[0][o].mem && memcmp(p->out[0][o].mem, p->out[1][o].mem,
                                       p->out[0][o].bytes + GUARD) != 0)
            return 0;
    return 1;
}

/* ---- The sequences' own calls, and the ragged call against them. ------ */

/* The first failure of the sequences' own calls (into the second set of
 * outputs): its sequence (-1: none), status and message. */
typedef struct expected {
    int64_t seq;
    int status;
    char message[512];
} expected;

static expected own_calls(sdpa_ctx *ctx, rprob *p)
{
    expected e = {-1, SDPA_OK, ""};
    clear_outputs(p, 1);
    for (int64_t b = 0; b < p->c.seqs; b++) {
        if (p->c.tq[b] == 0)
            continue;
        sdpa_forward_args sub;
        rg_seq_args(&p->a[1], b, &p->nk.t, &p->nv.t, &sub);
        int status = sdpa_forward(ctx, &sub);
        if (status != SDPA_OK && e.seq < 0) {
            e.seq = b;
            e.status = status;
            snprintf(e.message, sizeof e.message, "%s",
                     sdpa_ctx_last_error(ctx));
        }
    }
    return e;
}

/* The ragged call's message: the sequence's own, prefixed. */
static void check_message(const rprob *p, const sdpa_ctx *ctx,
                          const expected *e, const char *where)
{
    const char *own = "sdpa_forward: ";
    assert_true(strncmp(e->message, own, strlen(own)) == 0);
    char want[640];
    snprintf(want, sizeof want, "sdpa_forward: sequence %lld: %s",
             (long long)e->seq, e->message + strlen(own));
    if (strcmp(sdpa_ctx_last_error(ctx), want) != 0) {
        cfg_print(&p->c);
        fail_msg("%s: message \"%s\", expected \"%s\"", where,
                 sdpa_ctx_last_error(ctx), want);
    }
}

static const int paths[] = {SDPA_PATH_AUTO, SDPA_PATH_MATERIALISED,
                            SDPA_PATH_TILED, SDPA_PATH_DECODE,
                            SDPA_PATH_DECODE_BLAS};
static const char *const path_names[] = {"AUTO", "MATERIALISED", "TILED",
                                         "DECODE", "DECODE_BLAS"};
enum { PATHS = sizeof paths / sizeof paths[0] };

/* Runner r: 1, 2 or 3 workers of the context's own, or a caller's
 * parallel-for of three threads. */
static void use_runner(sdpa_ctx *ctx, int r, test_pool *pool)
{
    assert_int_equal(sdpa_ctx_set_parallel_for(ctx, NULL, NULL, 0), SDPA_OK);
    if (r < 3) {
        tp_set(ctx, SDPA_OPT_NUM_THREADS, r + 1);
        return;
    }
    *pool = (test_pool){.workers = 3};
    assert_int_equal(sdpa_ctx_set_parallel_for(ctx, test_parallel_for, pool, 3),
                     SDPA_OK);
}

/* The reference of every sequence with rows, once per problem. */
static void check_reference(rprob *p, const ref_result *refs, const char *where)
{
    for (int64_t b = 0; b < p->c.seqs; b++) {
        if (p->c.tq[b] == 0)
            continue;
        sdpa_forward_args sub;
        rg_seq_args(&p->a[0], b, &p->nk.t, &p->nv.t, &sub);
        char at[160], msg[512];
        snprintf(at, sizeof at, "%s, sequence %lld", where, (long long)b);
        if (rg_check(&sub, &refs[b], at, msg, sizeof msg)) {
            cfg_print(&p->c);
            fail_msg("%s", msg);
        }
    }
}

/* Counts of what the configurations exercised (printed per test). */
typedef struct tally {
    long ok, refused, sequences, decode_shaped, pool_calls;
} tally;

static void run_problem(rprob *p, tally *t)
{
    const rcfg *c = &p->c;
    ref_result refs[MAX_SEQS];
    memset(refs, 0, sizeof refs);
    for (int64_t b = 0; b < c->seqs; b++) {
        if (c->tq[b] == 0)
            continue;
        sdpa_forward_args sub;
        rg_seq_args(&p->a[0], b, &p->nk.t, &p->nv.t, &sub);
        assert_int_equal(rg_reference(&sub, &refs[b]), 0);
        t->sequences++;
        t->decode_shaped += c->tq[b] * (c->hq / c->hkv) <= 16;
    }
    sdpa_ctx *ctx = tp_ctx(c->empty_zero);
    tp_set(ctx, SDPA_OPT_BLOCK_Q, c->block_q);
    tp_set(ctx, SDPA_OPT_BLOCK_K, c->block_k);
    for (int ki = 0; ki < TEST_KERNELS; ki++) {
        if (!tp_use_kernel(ctx, ki))
            continue;
        for (int pi = 0; pi < PATHS; pi++) {
            char where[96];
            snprintf(where, sizeof where, "kernel %s, path %s",
                     kernel_name(test_kernels[ki]), path_names[pi]);
            tp_set(ctx, SDPA_OPT_PATH, paths[pi]);
            use_runner(ctx, 0, NULL);
            const expected e = own_calls(ctx, p);
            size_t bytes = 0;
            int ws = sdpa_forward_workspace(ctx, &p->a[0], &bytes);
            if (ws != e.status) {
                cfg_print(c);
                fail_msg("%s: workspace %d (%s), own calls %d", where, ws,
                         sdpa_ctx_last_error(ctx), e.status);
            }
            for (int r = 0; r < RUNNERS; r++) {
                test_pool pool;
                use_runner(ctx, r, &pool);
                clear_outputs(p, 0);
                int status = sdpa_forward(ctx, &p->a[0]);
                if (status != e.status) {
                    cfg_print(c);
                    fail_msg("%s, runner %d: status %d (%s), the sequences' "
                             "own calls %d (%s)",
                             where, r, status, sdpa_ctx_last_error(ctx),
                             e.status, e.message);
                }
                if (status != SDPA_OK) {
                    check_message(p, ctx, &e, where);
                    if (!outputs_untouched(p, 0)) {
                        cfg_print(c);
                        fail_msg("%s: outputs written on a refusal", where);
                    }
                    t->refused++;
                    continue;
                }
                assert_string_equal(sdpa_ctx_last_error(ctx), "");
                if (!outputs_equal(p)) {
                    cfg_print(c);
                    fail_msg("%s, runner %d: not bitwise the sequences' own "
                             "calls",
                             where, r);
                }
                if (r == 0)
                    check_reference(p, refs, where);
                t->ok++;
                t->pool_calls += r == 3 ? atomic_load(&pool.calls) : 0;
            }
            use_runner(ctx, 0, NULL);
        }
    }
    sdpa_ctx_destroy(ctx);
    inputs_unchanged(p);
    for (int64_t b = 0; b < c->seqs; b++)
        ref_free(&refs[b]);
}

static void run_key_form(int keys, int configs)
{
    tally t = {0};
    for (int i = 0; i < configs; i++) {
        rcfg c;
        cfg_draw(&c, keys, 1000 + (uint64_t)i, i);
        rprob p;
        prob_make(&p, &c);
        run_problem(&p, &t);
        prob_free(&p);
    }
    print_message("  %s keys: %d configurations, %ld sequences (%ld "
                  "decode-shaped), %ld calls bitwise and within the "
                  "reference (the caller's parallel-for called %ld times), "
                  "%ld refused as their sequence's own call\n",
                  rg_key_names[keys], configs, t.sequences, t.decode_shaped,
                  t.ok, t.pool_calls, t.refused);
    /* a test that checks nothing is a defect */
    assert_true(t.ok > 0 && t.refused > 0 && t.pool_calls > 0);
}

static void test_ragged_packed_keys(void **state)
{
    (void)state;
    run_key_form(RG_PACKED, 6 * COMBOS);
}

static void test_ragged_batched_keys(void **state)
{
    (void)state;
    run_key_form(RG_BATCHED, 4 * COMBOS);
}

static void test_ragged_shared_keys(void **state)
{
    (void)state;
    run_key_form(RG_SHARED, 4 * COMBOS);
}

static void test_ragged_paged_keys(void **state)
{
    (void)state;
    run_key_form(RG_PAGED, 4 * COMBOS);
}

/* ---- FlashAttention's varlen memory. ------------------------------------ */

/* cu_seqlens_q {0, 1, 1, 6, 38}, cu_seqlens_k {0, 9, 11, 17, 49}: a decode
 * step, an empty sequence, a short and a long prefill; q, out, k and v
 * as [total, H, D] rows. Each sequence's rows against a rectangular call
 * on contiguous copies of its own (the reference's tolerance: the memory
 * differs, so the bits may), and the ragged lse against it. */
static void test_ragged_packed_layout(void **state)
{
    (void)state;
    enum { HQ = 4, HKV = 2, D = 16, SEQS = 4 };
    const int64_t qo[SEQS + 1] = {0, 1, 1, 6, 38};
    const int64_t ko[SEQS + 1] = {0, 9, 11, 17, 49};
    const int64_t tq = qo[SEQS], tk = ko[SEQS];
    rng r = {77};
    float *q = malloc(sizeof(float) * (size_t)(tq * HQ * D));
    float *k = malloc(sizeof(float) * (size_t)(tk * HKV * D));
    float *v = malloc(sizeof(float) * (size_t)(tk * HKV * D));
    float *out = malloc(sizeof(float) * (size_t)(tq * HQ * D));
    float *lse = malloc(sizeof(float) * (size_t)(tq * HQ));
    assert_true(q && k && v && out && lse);
    for (int64_t i = 0; i < tq * HQ * D; i++)
        q[i] = (float)grid(&r, 0.5);
    for (int64_t i = 0; i < tk * HKV * D; i++) {
        k[i] = (float)grid(&r, 0.5);
        v[i] = (float)grid(&r, 1.0);
    }
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    a.q = sdpa_tensor_bthd(q, 1, HQ, tq, D);
    a.k = sdpa_tensor_bthd(k, 1, HKV, tk, D);
    a.v = sdpa_tensor_bthd(v, 1, HKV, tk, D);
    a.out = sdpa_tensor_bthd(out, 1, HQ, tq, D);
    /* lse [Hq, total_q] as FlashAttention's varlen lse */
    a.lse = sdpa_tensor_bhtd(lse, 1, HQ, tq, 1);
    a.seqs = SEQS;
    a.q_offsets = qo;
    a.kv_offsets = ko;
    for (int ki = 0; ki < TEST_KERNELS; ki++) {
        sdpa_ctx *ctx = tp_ctx(0);
        if (!tp_use_kernel(ctx, ki)) {
            sdpa_ctx_destroy(ctx);
            continue;
        }
        tp_set(ctx, SDPA_OPT_NUM_THREADS, 2);
        fill_sentinel(out, sizeof(float) * (size_t)(tq * HQ * D));
        fill_sentinel(lse, sizeof(float) * (size_t)(tq * HQ));
        assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
        for (int64_t b = 0; b < SEQS; b++) {
            const int64_t rows = qo[b + 1] - qo[b], keys = ko[b + 1] - ko[b];
            if (rows == 0)
                continue;
            /* the sequence alone, [1, H, T, D] head-major copies */
            test_problem own;
            tp_init(&own, SDPA_FLOAT32, 1, HQ, HKV, rows, keys, D, D);
            tbuf_make(&own.q, SDPA_FLOAT32, 1, HQ, rows, D, LAYOUT_BHTD, 0);
            tbuf_make(&own.k, SDPA_FLOAT32, 1, HKV, keys, D, LAYOUT_BHTD, 0);
            tbuf_make(&own.v, SDPA_FLOAT32, 1, HKV, keys, D, LAYOUT_BHTD, 0);
            tbuf_make(&own.out, SDPA_FLOAT32, 1, HQ, rows, D, LAYOUT_BHTD, 0);
            tbuf_make(&own.lse, SDPA_FLOAT32, 1, HQ, rows, 1, LAYOUT_BHTD, 0);
            for (int64_t h = 0; h < HQ; h++)
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t d = 0; d < D; d++)
                        tset(&own.q, 0, h, i, d,
                             q[((qo[b] + i) * HQ + h) * D + d]);
            for (int64_t h = 0; h < HKV; h++)
                for (int64_t j = 0; j < keys; j++)
                    for (int64_t d = 0; d < D; d++) {
                        tset(&own.k, 0, h, j, d,
                             k[((ko[b] + j) * HKV + h) * D + d]);
                        tset(&own.v, 0, h, j, d,
                             v[((ko[b] + j) * HKV + h) * D + d]);
                    }
            own.a = (sdpa_forward_args)SDPA_FORWARD_ARGS_INIT;
            own.a.dtype = SDPA_FLOAT32;
            own.a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
            tp_bind(&own, &own.a);
            assert_int_equal(sdpa_forward(ctx, &own.a), SDPA_OK);
            ref_result ref;
            assert_int_equal(ref_forward(&own.a, &ref), 0);
            const test_tol t =
                tp_forward_tol(FLT_EPSILON, &ref, keys, D, 0, 0, 0, 0);
            for (int64_t h = 0; h < HQ; h++)
                for (int64_t i = 0; i < rows; i++) {
                    const size_t row = (size_t)(h * rows + i);
                    for (int64_t d = 0; d < D; d++) {
                        double got = out[((qo[b] + i) * HQ + h) * D + d];
                        double want = (double)ref.out[row * D + (size_t)d];
                        assert_true(fabs(got - want) <= t.out);
                        assert_true(fabs(got - tget(&own.out, 0, h, i, d)) <=
                                    2 * t.out);
                    }
                    double got = lse[h * tq + qo[b] + i];
                    double want = (double)ref.lse[row];
                    assert_true(fabs(got - want) <=
                                t.lse_abs + t.lse_rel * fabs(want));
                }
            ref_free(&ref);
            tp_free(&own);
        }
        sdpa_ctx_destroy(ctx);
    }
    FREE_ALL(q, k, v, out, lse);
}

/* ---- Refusals. ---------------------------------------------------------- */

/* A valid ragged call to break: three sequences (Tq 2, 0, 3; Tk 4, 2, 3),
 * packed keys, float32, out and lse in buffers with guard bytes. */
enum { RF_SEQS = 3, RF_HQ = 2, RF_D = 4, RF_TQ = 5, RF_TK = 9 };

typedef struct refusal {
    sdpa_ctx *ctx;
    int64_t q_off[RF_SEQS + 1], kv_off[RF_SEQS + 1], lens[RF_SEQS];
    float q[2 * RF_HQ * RF_TQ * RF_D], k[2 * RF_TK * RF_D], v[2 * RF_TK * RF_D];
    _Alignas(
        64) unsigned char out[RF_HQ * RF_TQ * RF_D * sizeof(float) + GUARD];
    _Alignas(64) unsigned char lse[RF_HQ * RF_TQ * sizeof(float) + GUARD];
    sdpa_forward_args a;
} refusal;

static void refusal_make(refusal *f)
{
    memset(f, 0, sizeof *f);
    f->ctx = tp_ctx(0);
    const int64_t qo[] = {0, 2, 2, 5}, ko[] = {0, 4, 6, 9}, lens[] = {4, 2, 3};
    memcpy(f->q_off, qo, sizeof qo);
    memcpy(f->kv_off, ko, sizeof ko);
    memcpy(f->lens, lens, sizeof lens);
    rng r = {5};
    for (size_t i = 0; i < sizeof f->q / sizeof f->q[0]; i++)
        f->q[i] = (float)grid(&r, 1.0);
    for (size_t i = 0; i < sizeof f->k / sizeof f->k[0]; i++) {
        f->k[i] = (float)grid(&r, 1.0);
        f->v[i] = (float)grid(&r, 1.0);
    }
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.q = sdpa_tensor_bhtd(f->q, 1, RF_HQ, RF_TQ, RF_D);
    a.k = sdpa_tensor_bhtd(f->k, 1, 1, RF_TK, RF_D);
    a.v = sdpa_tensor_bhtd(f->v, 1, 1, RF_TK, RF_D);
    a.out = sdpa_tensor_bhtd(f->out, 1, RF_HQ, RF_TQ, RF_D);
    a.lse = sdpa_tensor_bhtd(f->lse, 1, RF_HQ, RF_TQ, 1);
    a.kv_lens = f->lens;
    a.seqs = RF_SEQS;
    a.q_offsets = f->q_off;
    a.kv_offsets = f->kv_off;
    f->a = a;
}

/* a's call must fail with status, its message holding each of the words
 * (NULL-terminated), out and lse untouched, and the workspace query must
 * agree. */
static void refused(refusal *f, const sdpa_forward_args *a, int status,
                    const char *const *words)
{
    fill_sentinel(f->out, sizeof f->out);
    fill_sentinel(f->lse, sizeof f->lse);
    int got = sdpa_forward(f->ctx, a);
    const char *msg = sdpa_ctx_last_error(f->ctx);
    if (got != status)
        fail_msg("status %d (%s), expected %d", got, msg, status);
    for (; *words; words++)
        if (!strstr(msg, *words))
            fail_msg("message \"%s\" lacks \"%s\"", msg, *words);
    assert_int_equal(first_non_sentinel(f->out, sizeof f->out), -1);
    assert_int_equal(first_non_sentinel(f->lse, sizeof f->lse), -1);
    size_t bytes = 12345;
    assert_int_equal(sdpa_forward_workspace(f->ctx, a, &bytes), status);
    assert_int_equal(bytes, 12345);
}

#define REFUSED(f, a, status, ...)                                             \
    refused((f), (a), (status), (const char *const[]){__VA_ARGS__, NULL})

static void test_ragged_refusals(void **state)
{
    (void)state;
    refusal f;
    refusal_make(&f);
    assert_int_equal(sdpa_forward(f.ctx, &f.a), SDPA_OK); /* the base */
    sdpa_forward_args a;

    /* the ragged fields together */
    a = f.a;
    a.seqs = -1;
    REFUSED(&f, &a, SDPA_ERR_BAD_RAGGED, "seqs is -1");
    a = f.a;
    a.q_offsets = NULL;
    REFUSED(&f, &a, SDPA_ERR_BAD_RAGGED, "seqs is set", "q_offsets is NULL");
    a = f.a;
    a.seqs = 0;
    REFUSED(&f, &a, SDPA_ERR_BAD_RAGGED, "q_offsets is set", "seqs is 0");
    a = f.a;
    a.seqs = 0;
    a.q_offsets = NULL;
    REFUSED(&f, &a, SDPA_ERR_BAD_RAGGED, "kv_offsets is set",
            "q_offsets is NULL");
    a = f.a;
    a.q.shape[0] = 2;
    REFUSED(&f, &a, SDPA_ERR_BAD_RAGGED, "q.shape[0] is 2");
    a = f.a;
    a.k.shape[0] = a.v.shape[0] = 2;
    REFUSED(&f, &a, SDPA_ERR_BAD_RAGGED, "k.shape[0] is 2", "kv_offsets");

    /* what a ragged call does not take */
    unsigned char mask[RF_TK] = {0};
    float bias[RF_TK] = {0}, weights[RF_HQ * RF_TQ * RF_TK];
    const struct {
        const char *name;
        sdpa_tensor t;
    } refused_tensors[] = {
        {"mask", {mask, {1, 1, 1, RF_TK}, {0, 0, 0, 1}}},
        {"bias", {bias, {1, 1, 1, RF_TK}, {0, 0, 0, 1}}},
        {"weights", sdpa_tensor_bhtd(weights, 1, RF_HQ, RF_TQ, RF_TK)},
        {"logits", sdpa_tensor_bhtd(weights, 1, RF_HQ, RF_TQ, RF_TK)}};
    for (int i = 0; i < 4; i++) {
        a = f.a;
        sdpa_tensor *slot[4] = {&a.mask, &a.bias, &a.weights, &a.logits};
        *slot[i] = refused_tensors[i].t;
        if (i == 3)
            a.logits_stage = SDPA_LOGITS_MASKED;
        char words[64];
        snprintf(words, sizeof words, "does not take %s",
                 refused_tensors[i].name);
        REFUSED(&f, &a, SDPA_ERR_BAD_RAGGED, words);
    }
    int32_t table[RF_SEQS] = {0, 0, 0};
    a = f.a;
    a.block_table = table;
    a.pages_per_seq = 1;
    REFUSED(&f, &a, SDPA_ERR_BAD_RAGGED, "kv_offsets and block_table");

    /* the offsets: start, order, end */
    a = f.a;
    int64_t qo[RF_SEQS + 1], ko[RF_SEQS + 1];
    memcpy(qo, f.q_off, sizeof qo);
    memcpy(ko, f.kv_off, sizeof ko);
    a.q_offsets = qo;
    a.kv_offsets = ko;
    qo[0] = 1;
    REFUSED(&f, &a, SDPA_ERR_OFFSETS_START, "q_offsets[0] is 1");
    qo[0] = 0;
    ko[0] = 2;
    REFUSED(&f, &a, SDPA_ERR_OFFSETS_START, "kv_offsets[0] is 2");
    ko[0] = 0;
    qo[2] = 1; /* {0, 2, 1, 5} */
    REFUSED(&f, &a, SDPA_ERR_OFFSETS_ORDER, "q_offsets[2] is 1",
            "below q_offsets[1] = 2", "sequence 1");
    qo[2] = 2;
    ko[3] = 5; /* {0, 4, 6, 5} */
    REFUSED(&f, &a, SDPA_ERR_OFFSETS_ORDER, "kv_offsets[3] is 5",
            "below kv_offsets[2] = 6", "sequence 2");
    ko[3] = 9;
    qo[3] = 6;
    REFUSED(&f, &a, SDPA_ERR_OFFSETS_END, "q_offsets[3] (seqs) is 6",
            "q.shape[2] (total_q) is 5");
    qo[3] = 4;
    REFUSED(&f, &a, SDPA_ERR_OFFSETS_END, "q_offsets[3] (seqs) is 4");
    qo[3] = 5;
    ko[3] = 10;
    REFUSED(&f, &a, SDPA_ERR_OFFSETS_END, "kv_offsets[3] (seqs) is 10",
            "total_k");
    ko[3] = 8;
    REFUSED(&f, &a, SDPA_ERR_OFFSETS_END, "kv_offsets[3] (seqs) is 8");
    ko[3] = 9;

    /* the packed per-row tensors' T extent is total_q */
    a = f.a;
    a.out.shape[2] = RF_TQ - 1;
    REFUSED(&f, &a, SDPA_ERR_SHAPE_MISMATCH, "out is [1, ., 4, .]",
            "total_q = 5");
    a = f.a;
    a.lse.shape[2] = RF_TQ + 1;
    REFUSED(&f, &a, SDPA_ERR_SHAPE_MISMATCH, "lse is [1, ., 6, .]");
    a = f.a;
    a.v.shape[2] = RF_TK - 1;
    REFUSED(&f, &a, SDPA_ERR_SHAPE_MISMATCH, "v.shape[2] is 8");

    /* batched keys: seqs items or one */
    a = f.a;
    a.kv_offsets = NULL;
    a.kv_lens = NULL;
    a.k = (sdpa_tensor){f.k, {2, 1, 4, RF_D}, {4 * RF_D, 4 * RF_D, RF_D, 1}};
    a.v = (sdpa_tensor){f.v, {2, 1, 4, RF_D}, {4 * RF_D, 4 * RF_D, RF_D, 1}};
    REFUSED(&f, &a, SDPA_ERR_SHAPE_MISMATCH, "k.shape[0] is 2", "(seqs = 3)");
    a.k.shape[0] = a.v.shape[0] = 3;
    a.k.stride[0] = a.v.stride[0] = 3 * RF_D;
    a.k.shape[2] = a.v.shape[2] = 3;
    assert_int_equal(sdpa_forward(f.ctx, &a), SDPA_OK); /* three items */
    a.k.shape[0] = a.v.shape[0] = 1;
    assert_int_equal(sdpa_forward(f.ctx, &a), SDPA_OK); /* one, shared */

    /* kv_lens per sequence */
    a = f.a;
    int64_t lens[RF_SEQS] = {4, 3, 3};
    a.kv_lens = lens;
    REFUSED(&f, &a, SDPA_ERR_BAD_KV_LEN, "kv_lens[1] is 3", "[0, 2]",
            "sequence 1");
    lens[1] = -1;
    REFUSED(&f, &a, SDPA_ERR_BAD_KV_LEN, "kv_lens[1] is -1", "sequence 1");
    lens[1] = 0;
    lens[2] = 4;
    REFUSED(&f, &a, SDPA_ERR_BAD_KV_LEN, "kv_lens[2] is 4", "sequence 2");

    /* a sequence's own error: a page outside the pool in row 2 */
    a = f.a;
    a.kv_offsets = NULL;
    a.kv_lens = NULL;
    int32_t pages[RF_SEQS * 2] = {0, 1, 1, 0, 2, 3};
    a.k = sdpa_tensor_bhtd(f.k, 2, 1, 2, RF_D); /* 2 pages of 2 keys */
    a.v = sdpa_tensor_bhtd(f.v, 2, 1, 2, RF_D);
    a.block_table = pages;
    a.pages_per_seq = 2;
    REFUSED(&f, &a, SDPA_ERR_BAD_PAGE, "block_table[2][0] is 2",
            "keys [0, 2) of sequence 2");
    pages[4] = 1;
    pages[5] = 0;
    assert_int_equal(sdpa_forward(f.ctx, &a), SDPA_OK);

    /* a sequence whose row has no key (the default policy) */
    a = f.a;
    memcpy(lens, f.lens, sizeof lens);
    lens[2] = 0;
    a.kv_lens = lens;
    REFUSED(&f, &a, SDPA_ERR_FULLY_MASKED_ROW, "batch 0", "no allowed key");
    assert_true(strncmp(sdpa_ctx_last_error(f.ctx),
                        "sdpa_forward: sequence 2: ", 26) == 0);
    lens[2] = 3;

    /* outputs two sequences share: one row each, out's rows the same */
    a = f.a;
    const int64_t one_each[RF_SEQS + 1] = {0, 1, 2, 3};
    a.q_offsets = one_each;
    a.q.shape[2] = a.out.shape[2] = a.lse.shape[2] = 3;
    a.kv_lens = NULL;
    a.out.stride[2] = 0;
    a.out.stride[1] = RF_D;
    fill_sentinel(f.out, sizeof f.out);
    int st = sdpa_forward(f.ctx, &a);
    assert_true(st == SDPA_ERR_BAD_STRIDE || st == SDPA_ERR_OVERLAP);
    assert_non_null(strstr(sdpa_ctx_last_error(f.ctx), "out"));
    assert_int_equal(first_non_sentinel(f.out, sizeof f.out), -1);
    /* lse: head 1 of a row is head 0 of the next sequence's row */
    a.out = f.a.out;
    a.out.shape[2] = 3;
    a.lse.stride[1] = 1;
    a.lse.stride[2] = 1;
    st = sdpa_forward(f.ctx, &a);
    assert_true(st == SDPA_ERR_BAD_STRIDE || st == SDPA_ERR_OVERLAP);
    assert_non_null(strstr(sdpa_ctx_last_error(f.ctx), "lse"));
    assert_int_equal(first_non_sentinel(f.out, sizeof f.out), -1);

    /* an output over the offsets, kv_lens or the block table */
    const size_t out_bytes = RF_HQ * RF_TQ * RF_D * sizeof(float);
    int64_t *inside = (int64_t *)(void *)(f.out + out_bytes - 64);
    const char *names[3] = {"q_offsets", "kv_offsets", "kv_lens"};
    for (int i = 0; i < 3; i++) {
        fill_sentinel(f.out, sizeof f.out);
        fill_sentinel(f.lse, sizeof f.lse);
        a = f.a;
        const int64_t *src = i == 0 ? f.q_off : i == 1 ? f.kv_off : f.lens;
        memcpy(inside, src, sizeof f.q_off);
        if (i == 0)
            a.q_offsets = inside;
        else if (i == 1)
            a.kv_offsets = inside;
        else
            a.kv_lens = inside;
        unsigned char before[sizeof f.out];
        memcpy(before, f.out, sizeof f.out);
        assert_int_equal(sdpa_forward(f.ctx, &a), SDPA_ERR_OVERLAP);
        assert_non_null(strstr(sdpa_ctx_last_error(f.ctx), names[i]));
        assert_memory_equal(before, f.out, sizeof f.out);
        assert_int_equal(first_non_sentinel(f.lse, sizeof f.lse), -1);
    }
    /* sizes that overflow: a sequence of 2^50 rows at the top of memory */
    a = f.a;
    const int64_t huge = INT64_C(1) << 50;
    const int64_t hq[RF_SEQS + 1] = {0, 2, 2, huge};
    void *top = (void *)(~(uintptr_t)0 - ((uintptr_t)1 << 24) + 1);
    a.q_offsets = hq;
    a.q = sdpa_tensor_bhtd(top, 1, RF_HQ, huge, RF_D);
    a.out.shape[2] = a.lse.shape[2] = huge;
    a.out.stride[1] = huge * RF_D;
    a.lse.stride[1] = huge;
    a.kv_lens = NULL;
    REFUSED(&f, &a, SDPA_ERR_OVERFLOW, "sdpa_forward: sequence ");
    sdpa_ctx_destroy(f.ctx);
}

/* ---- A NaN in one sequence. --------------------------------------------- */

/* Packed keys of which no sequence has any: k and v with T = 0. Under
 * the zero-row policy every row is a zero row with lse -inf (what each
 * sequence alone gives); under the default it is the located error. */
static void test_ragged_no_keys_at_all(void **state)
{
    (void)state;
    refusal f;
    refusal_make(&f);
    sdpa_forward_args a = f.a;
    const int64_t none[RF_SEQS + 1] = {0, 0, 0, 0};
    a.kv_offsets = none;
    a.kv_lens = NULL;
    a.k.shape[2] = a.v.shape[2] = 0;
    REFUSED(&f, &a, SDPA_ERR_FULLY_MASKED_ROW, "sequence 0", "no allowed key");
    tp_set(f.ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    fill_sentinel(f.out, sizeof f.out);
    fill_sentinel(f.lse, sizeof f.lse);
    int status = sdpa_forward(f.ctx, &a);
    if (status != SDPA_OK)
        fail_msg("no keys: %d (%s)", status, sdpa_ctx_last_error(f.ctx));
    const float *out = (const float *)(void *)f.out;
    const float *lse = (const float *)(void *)f.lse;
    for (size_t i = 0; i < RF_HQ * RF_TQ * RF_D; i++)
        assert_true(out[i] == 0.0f);
    for (size_t i = 0; i < RF_HQ * RF_TQ; i++)
        assert_true(lse[i] == -INFINITY);
    sdpa_ctx_destroy(f.ctx);
}

static void test_ragged_nonfinite(void **state)
{
    (void)state;
    refusal f;
    refusal_make(&f);
    /* sequence 2, head 1, its row 1: packed row 3 */
    f.q[(1 * RF_TQ + 3) * RF_D + 2] = NAN;
    for (int pi = 0; pi < PATHS; pi++) {
        tp_set(f.ctx, SDPA_OPT_PATH, paths[pi]);
        for (int threads = 1; threads <= 3; threads++) {
            tp_set(f.ctx, SDPA_OPT_NUM_THREADS, threads);
            assert_int_equal(sdpa_forward(f.ctx, &f.a), SDPA_ERR_NONFINITE);
            const char *msg = sdpa_ctx_last_error(f.ctx);
            if (!strstr(msg, "sequence 2, head 1, query row 1 (packed row 3)"))
                fail_msg("path %s: \"%s\"", path_names[pi], msg);
            size_t bytes = 0;
            assert_int_equal(sdpa_forward_workspace(f.ctx, &f.a, &bytes),
                             SDPA_OK);
        }
    }
    /* sequence 0 alone is fine: its own call succeeds */
    sdpa_forward_args a = f.a;
    const int64_t first_only[RF_SEQS + 1] = {0, 2, 2, 2};
    const int64_t keys_first[RF_SEQS + 1] = {0, 4, 4, 4};
    a.q_offsets = first_only;
    a.kv_offsets = keys_first;
    a.q.shape[2] = a.out.shape[2] = a.lse.shape[2] = 2;
    a.k.shape[2] = a.v.shape[2] = 4;
    const int64_t lens[RF_SEQS] = {4, 0, 0};
    a.kv_lens = lens;
    assert_int_equal(sdpa_forward(f.ctx, &a), SDPA_OK);
    sdpa_ctx_destroy(f.ctx);
}

/* ---- The workspace and allocations. ------------------------------------ */

static void test_ragged_workspace(void **state)
{
    (void)state;
    counting_alloc ca;
    sdpa_allocator al = ca_start(&ca, -1);
    rcfg c;
    cfg_draw(&c, RG_PACKED, 7, 0);
    /* decode-shaped and prefill-shaped sequences, a long one */
    c.seqs = 4;
    const int64_t tq[4] = {1, 0, 40, 2}, tk[4] = {300, 5, 60, 1};
    memcpy(c.tq, tq, sizeof tq);
    memcpy(c.tk, tk, sizeof tk);
    memcpy(c.lens, tk, sizeof tk);
    c.empty_zero = 1;
    rprob p;
    prob_make(&p, &c);
    for (int pi = 0; pi < PATHS; pi++)
        for (int threads = 1; threads <= 3; threads += 2) {
            sdpa_ctx *ctx = NULL;
            assert_int_equal(sdpa_ctx_create_with_allocator(&ctx, &al),
                             SDPA_OK);
            tp_set(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
            tp_set(ctx, SDPA_OPT_PATH, paths[pi]);
            tp_set(ctx, SDPA_OPT_NUM_THREADS, threads);
            clear_outputs(&p, 0);
            long before = ca.allocs;
            size_t bytes = 0;
            assert_int_equal(sdpa_forward_workspace(ctx, &p.a[0], &bytes),
                             SDPA_OK);
            assert_int_equal(ca.allocs, before);
            assert_true(bytes > 0);
            assert_true(outputs_untouched(&p, 0));
            assert_int_equal(sdpa_forward(ctx, &p.a[0]), SDPA_OK);
            size_t held = 0;
            assert_int_equal(sdpa_forward_workspace(ctx, &p.a[0], &held),
                             SDPA_OK);
            if (held != bytes)
                fail_msg("path %s, %d threads: workspace %zu before the "
                         "call, %zu after it",
                         path_names[pi], threads, bytes, held);
            long after_first = ca.allocs;
            assert_int_equal(sdpa_forward(ctx, &p.a[0]), SDPA_OK);
            if (ca.allocs != after_first)
                fail_msg("path %s, %d threads: a repeated ragged call "
                         "allocated %ld times",
                         path_names[pi], threads, ca.allocs - after_first);
            /* a smaller ragged call fits in what is held */
            sdpa_forward_args small = p.a[0];
            const int64_t qo[5] = {0, 1, 1, 1, 1};
            small.q_offsets = qo;
            small.q.shape[2] = small.out.shape[2] = 1;
            small.lse.shape[2] = small.max_weight.shape[2] = 1;
            small.entropy.shape[2] = 1;
            size_t small_bytes = 0;
            assert_int_equal(sdpa_forward_workspace(ctx, &small, &small_bytes),
                             SDPA_OK);
            assert_int_equal(small_bytes, held);
            assert_int_equal(sdpa_forward(ctx, &small), SDPA_OK);
            assert_int_equal(ca.allocs, after_first);
            sdpa_ctx_destroy(ctx);
            assert_int_equal(ca.allocs, ca.frees);
            assert_int_equal(ca.live_bytes, 0);
        }
    prob_free(&p);
}

/* ---- The layer and merge. ----------------------------------------------- */

static void test_ragged_layer_and_merge(void **state)
{
    (void)state;
    enum { N = 2, T = 3, E = 8, H = 2 };
    rng r = {9};
    float x[N * T * E], w[4][E * E], y[N * T * E], y0[N * T * E];
    for (int i = 0; i < N * T * E; i++)
        x[i] = (float)grid(&r, 1.0);
    for (int m = 0; m < 4; m++)
        for (int i = 0; i < E * E; i++)
            w[m][i] = (float)grid(&r, 0.5);
    const sdpa_tensor xt = {x, {N, 1, T, E}, {T * E, T * E, E, 1}};
    sdpa_tensor yt = xt;
    yt.data = y;
    void *ws[4] = {w[0], w[1], w[2], w[3]}, *bs[4] = {NULL, NULL, NULL, NULL};
    sdpa_mha_args m = tp_mha_args(SDPA_FLOAT32, SDPA_POS_NONE, H, H, 0, 0, &xt,
                                  NULL, &yt, ws, bs);
    sdpa_forward_args attn = SDPA_FORWARD_ARGS_INIT;
    attn.causal = SDPA_CAUSAL_TOP_LEFT;
    m.attn = &attn;
    sdpa_ctx *ctx = tp_ctx(0);
    /* the layer as it was: the same bits with the 1.2 fields zero */
    assert_int_equal(sdpa_mha_forward(ctx, &m), SDPA_OK);
    memcpy(y0, y, sizeof y);
    memset(y, 0, sizeof y);
    assert_int_equal(sdpa_mha_forward(ctx, &m), SDPA_OK);
    assert_memory_equal(y0, y, sizeof y);
    /* ragged attention arguments: the layer takes rectangular batches,
     * a batch of two or one (which a ragged call could take) alike, in
     * the forward and in the backward, y and the gradients untouched */
    const int64_t qo[3] = {0, 1, 3}, ko[3] = {0, 2, 3};
    float dy[N * T * E], dx[N * T * E];
    for (int i = 0; i < N * T * E; i++)
        dy[i] = (float)grid(&r, 1.0);
    sdpa_mha_backward_args g = SDPA_MHA_BACKWARD_ARGS_INIT;
    g.forward = &m;
    g.dy = xt;
    g.dy.data = dy;
    g.dx_q = xt;
    g.dx_q.data = dx;
    for (int n = N; n >= 1; n--)
        for (int field = 0; field < 3; field++) {
            m.x_q.shape[0] = m.y.shape[0] = g.dy.shape[0] = n;
            g.dx_q.shape[0] = n;
            attn.seqs = field == 0 ? 2 : 0;
            attn.q_offsets = field == 1 ? qo : NULL;
            attn.kv_offsets = field == 2 ? ko : NULL;
            fill_sentinel(y, sizeof y);
            fill_sentinel(dx, sizeof dx);
            assert_int_equal(sdpa_mha_forward(ctx, &m), SDPA_ERR_BAD_RAGGED);
            const char *msg = sdpa_ctx_last_error(ctx);
            if (!strstr(msg, "sdpa_mha_forward: attn->seqs, q_offsets or "
                             "kv_offsets is set"))
                fail_msg("batch %d, field %d: \"%s\"", n, field, msg);
            assert_int_equal(sdpa_mha_backward(ctx, &g), SDPA_ERR_BAD_RAGGED);
            assert_non_null(
                strstr(sdpa_ctx_last_error(ctx), "sdpa_mha_backward"));
            assert_int_equal(first_non_sentinel(y, sizeof y), -1);
            assert_int_equal(first_non_sentinel(dx, sizeof dx), -1);
        }
    m.x_q.shape[0] = m.y.shape[0] = N;
    attn.seqs = 0;
    attn.q_offsets = attn.kv_offsets = NULL;
    memset(y, 0, sizeof y);
    assert_int_equal(sdpa_mha_forward(ctx, &m), SDPA_OK);
    assert_memory_equal(y0, y, sizeof y);

    /* merge: two key halves of a ragged call's sequence merge into the
     * whole sequence's output, which the ragged call gave */
    refusal f;
    refusal_make(&f);
    f.a.kv_lens = NULL;
    float whole[RF_HQ * RF_TQ * RF_D], whole_lse[RF_HQ * RF_TQ];
    f.a.out.data = whole;
    f.a.lse.data = whole_lse;
    assert_int_equal(sdpa_forward(f.ctx, &f.a), SDPA_OK);
    /* sequence 0 (rows 0..1, keys 0..3) in two parts of two keys */
    float part_out[2][RF_HQ * 2 * RF_D], part_lse[2][RF_HQ * 2];
    sdpa_tensor outs[2], lses[2];
    for (int h = 0; h < 2; h++) {
        sdpa_forward_args pa = SDPA_FORWARD_ARGS_INIT;
        pa.dtype = SDPA_FLOAT32;
        pa.q = f.a.q;
        pa.q.shape[2] = 2;
        pa.k = f.a.k;
        pa.k.data = f.k + 2 * h * RF_D;
        pa.k.shape[2] = 2;
        pa.v = f.a.v;
        pa.v.data = f.v + 2 * h * RF_D;
        pa.v.shape[2] = 2;
        outs[h] = pa.out = sdpa_tensor_bhtd(part_out[h], 1, RF_HQ, 2, RF_D);
        lses[h] = pa.lse = sdpa_tensor_bhtd(part_lse[h], 1, RF_HQ, 2, 1);
        assert_int_equal(sdpa_forward(f.ctx, &pa), SDPA_OK);
    }
    float merged[RF_HQ * 2 * RF_D];
    sdpa_merge_args mg = SDPA_MERGE_ARGS_INIT;
    mg.dtype = SDPA_FLOAT32;
    mg.parts = 2;
    mg.outs = outs;
    mg.lses = lses;
    mg.out = sdpa_tensor_bhtd(merged, 1, RF_HQ, 2, RF_D);
    assert_int_equal(sdpa_merge(f.ctx, &mg), SDPA_OK);
    for (int h = 0; h < RF_HQ; h++)
        for (int i = 0; i < 2; i++)
            for (int d = 0; d < RF_D; d++) {
                float got = merged[(h * 2 + i) * RF_D + d];
                float want = whole[(h * RF_TQ + i) * RF_D + d];
                assert_true(fabsf(got - want) <= 64 * FLT_EPSILON);
            }
    /* merge refuses nothing new: a ragged call's lse views merge as any */
    sdpa_ctx_destroy(f.ctx);
    sdpa_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ragged_packed_keys),
        cmocka_unit_test(test_ragged_batched_keys),
        cmocka_unit_test(test_ragged_shared_keys),
        cmocka_unit_test(test_ragged_paged_keys),
        cmocka_unit_test(test_ragged_packed_layout),
        cmocka_unit_test(test_ragged_refusals),
        cmocka_unit_test(test_ragged_no_keys_at_all),
        cmocka_unit_test(test_ragged_nonfinite),
        cmocka_unit_test(test_ragged_workspace),
        cmocka_unit_test(test_ragged_layer_and_merge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
