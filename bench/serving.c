/*
 * Shape S: one serving step, the batch an inference server holds (shapes.c
 * lists its sequences): 30 sequences decoding one token and 2 prefill
 * chunks, over a paged float16 cache, timed three ways in the same rounds:
 *   sdpa ragged        one ragged call: seqs = 32, q_offsets, a block
 *                      table row and a kv_len per sequence
 *   sdpa per-sequence  one rectangular call per sequence on its own views
 *                      (N = 1), all on one context
 *   sdpa padded        the rectangular batch an engine without ragged
 *                      calls makes: every sequence padded to 512 query
 *                      rows (N = 32, Tq = 512, Tk = 8192, kv_lens); the
 *                      bottom-right diagonal leaves a short sequence's
 *                      first rows without keys: SDPA_EMPTY_ROWS_ZERO.
 * Outside the timing: the ragged output against the per-sequence outputs
 * (bitwise, the library's promise), against a double-precision softmax on
 * sampled rows, and the padded output's real rows against it.
 *
 * The cache is held twice (two copies of every page, the pages of both
 * shuffled together in one pool) and each run reads the copy the run
 * before did not: a copy is 273 MB, eight times a 32 MiB L3, so little of
 * it could stay cached anyway, and no run starts on the pages its
 * predecessor left in the caches.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { COPIES = 2, MAX_SEQS = 64, PAD_ROWS = 512 };

static const double PER_SEQ_TARGET = 0.9; /* ragged / per-sequence, <= */
static const double PADDED_TARGET = 0.1;  /* ragged / padded, <= */

typedef struct serving {
    const bench_shape *s;
    int64_t seqs, total_q, pps, pages; /* pages: of one copy */
    int64_t q_off[MAX_SEQS + 1], kv_off[MAX_SEQS + 1];
    float *q;                /* [1, Hq, total_q, D] */
    float *out, *out_seq;    /* the ragged's and the per-sequence calls' */
    float *q_pad, *out_pad;  /* [seqs, Hq, 512, D] */
    uint16_t *kpool, *vpool; /* [COPIES * pages, Hkv, page, D] float16 */
    int32_t *table;          /* [COPIES][seqs][pps] */
    sdpa_forward_args ragged[COPIES], padded[COPIES];
    sdpa_forward_args *per_seq; /* [COPIES][seqs] */
} serving;

static void serving_free(serving *sv)
{
    void *bufs[] = {sv->q,     sv->out,   sv->out_seq, sv->q_pad,  sv->out_pad,
                    sv->kpool, sv->vpool, sv->table,   sv->per_seq};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    memset(sv, 0, sizeof *sv);
}

/* Elements of one page of a pool of rows of `dim` values. */
static size_t page_elems(const bench_shape *s, int64_t dim)
{
    return (size_t)(s->hkv * s->page * dim);
}

/* Sequence b's keys (k) or values, float16 from a seed of their own, into
 * its pages of every copy. 0 on success. */
static int fill_pages(serving *sv, int64_t b, uint16_t *pool, int64_t dim,
                      uint64_t seed)
{
    const bench_shape *s = sv->s;
    const int64_t len = s->seq_kv[b];
    const size_t count = (size_t)(s->hkv * len * dim);
    float *x = bench_alloc(count * sizeof *x);
    int failed = !x;
    if (x) {
        bench_fill_random(x, count, SDPA_FLOAT32, seed);
        void *half = bench_typed_copy(x, count, s->kv_type, &failed);
        for (int c = 0; c < COPIES && half; c++)
            bench_scatter_pages((char *)pool, half, sizeof(uint16_t), s->hkv,
                                len, dim, len, s->page,
                                sv->table + (c * sv->seqs + b) * sv->pps);
        free(half);
    }
    free(x);
    return failed ? -1 : 0;
}

/* The block table of both copies: every sequence's pages from one
 * shuffled list of the pool's pages; the columns past its keys -1. */
static void fill_table(serving *sv)
{
    const bench_shape *s = sv->s;
    int32_t *ids = sv->table + COPIES * sv->seqs * sv->pps; /* scratch tail */
    bench_shuffle_pages(ids, COPIES * sv->pages);
    int64_t next = 0;
    for (int64_t c = 0; c < COPIES; c++)
        for (int64_t b = 0; b < sv->seqs; b++) {
            int32_t *row = sv->table + (c * sv->seqs + b) * sv->pps;
            int64_t used = (s->seq_kv[b] + s->page - 1) / s->page;
            for (int64_t j = 0; j < sv->pps; j++)
                row[j] = j < used ? ids[next++] : -1;
        }
}

/* The fields every call of copy c shares: the cache, the table, kv_lens. */
static sdpa_forward_args cache_args(const serving *sv, int c)
{
    const bench_shape *s = sv->s;
    const int64_t pool = COPIES * sv->pages;
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.kv_dtype = s->kv_type;
    a.causal = s->causal;
    a.k = (sdpa_tensor){sv->kpool,
                        {pool, s->hkv, s->page, s->dk},
                        {s->hkv * s->page * s->dk, s->page * s->dk, s->dk, 1}};
    a.v = (sdpa_tensor){sv->vpool,
                        {pool, s->hkv, s->page, s->dv},
                        {s->hkv * s->page * s->dv, s->page * s->dv, s->dv, 1}};
    a.block_table = sv->table + c * sv->seqs * sv->pps;
    a.pages_per_seq = sv->pps;
    a.kv_lens = s->seq_kv;
    return a;
}

/* Rows [first, first + rows) of a [1, Hq, total_q, dim] tensor. */
static sdpa_tensor packed_rows(const serving *sv, float *x, int64_t dim,
                               int64_t first, int64_t rows)
{
    sdpa_tensor t = sdpa_tensor_bhtd(x, 1, sv->s->hq, sv->total_q, dim);
    t.data = x + first * dim;
    t.shape[2] = rows;
    return t;
}

static void make_calls(serving *sv)
{
    const bench_shape *s = sv->s;
    for (int c = 0; c < COPIES; c++) {
        sdpa_forward_args a = cache_args(sv, c);
        a.q = packed_rows(sv, sv->q, s->dk, 0, sv->total_q);
        a.out = packed_rows(sv, sv->out, s->dv, 0, sv->total_q);
        a.seqs = sv->seqs;
        a.q_offsets = sv->q_off;
        sv->ragged[c] = a;

        for (int64_t b = 0; b < sv->seqs; b++) {
            sdpa_forward_args one = cache_args(sv, c);
            one.q = packed_rows(sv, sv->q, s->dk, sv->q_off[b], s->seq_q[b]);
            one.out =
                packed_rows(sv, sv->out_seq, s->dv, sv->q_off[b], s->seq_q[b]);
            one.block_table += b * sv->pps;
            one.kv_lens += b;
            sv->per_seq[c * sv->seqs + b] = one;
        }

        sdpa_forward_args pad = cache_args(sv, c);
        pad.q = sdpa_tensor_bhtd(sv->q_pad, sv->seqs, s->hq, PAD_ROWS, s->dk);
        pad.out =
            sdpa_tensor_bhtd(sv->out_pad, sv->seqs, s->hq, PAD_ROWS, s->dv);
        sv->padded[c] = pad;
    }
}

/* The row of sequence b's row i, head h, in the packed and the padded
 * layouts (times D: its first element). */
static size_t packed_row(const serving *sv, int64_t b, int64_t h, int64_t i)
{
    return (size_t)(h * sv->total_q + sv->q_off[b] + i);
}
static size_t padded_row(const serving *sv, int64_t b, int64_t h, int64_t i)
{
    const bench_shape *s = sv->s;
    int64_t row = PAD_ROWS - s->seq_q[b] + i; /* the last rows: bottom-right */
    return (size_t)((b * s->hq + h) * PAD_ROWS + row);
}

static int serving_init(serving *sv, const bench_shape *s, uint64_t seed)
{
    memset(sv, 0, sizeof *sv);
    sv->s = s;
    sv->seqs = s->n;
    if (sv->seqs > MAX_SEQS)
        return -1;
    bench_seq_offsets(s, sv->q_off, sv->kv_off);
    sv->total_q = sv->q_off[sv->seqs];
    sv->pps = s->tk / s->page;
    for (int64_t b = 0; b < sv->seqs; b++)
        sv->pages += (s->seq_kv[b] + s->page - 1) / s->page;
    const size_t nq = (size_t)(s->hq * sv->total_q * s->dk);
    const size_t npad = (size_t)(sv->seqs * s->hq * PAD_ROWS * s->dk);
    const size_t kpool = (size_t)(COPIES * sv->pages) * page_elems(s, s->dk);
    const size_t vpool = (size_t)(COPIES * sv->pages) * page_elems(s, s->dv);
    sv->q = bench_alloc(nq * sizeof(float));
    sv->out = bench_alloc(nq * sizeof(float));
    sv->out_seq = bench_alloc(nq * sizeof(float));
    sv->q_pad = bench_alloc(npad * sizeof(float)); /* padding rows 0 */
    sv->out_pad = bench_alloc(npad * sizeof(float));
    sv->kpool = bench_alloc(kpool * sizeof(uint16_t));
    sv->vpool = bench_alloc(vpool * sizeof(uint16_t));
    sv->table = malloc((size_t)(COPIES * (sv->seqs * sv->pps + sv->pages)) *
                       sizeof(int32_t));
    sv->per_seq = calloc((size_t)(COPIES * sv->seqs), sizeof *sv->per_seq);
    if (!sv->q || !sv->out || !sv->out_seq || !sv->q_pad || !sv->out_pad ||
        !sv->kpool || !sv->vpool || !sv->table || !sv->per_seq)
        return -1;
    /* the slots past a sequence's keys hold NaN: never read */
    memset(sv->kpool, 0xff, kpool * sizeof(uint16_t));
    memset(sv->vpool, 0xff, vpool * sizeof(uint16_t));
    fill_table(sv);
    bench_fill_random(sv->q, nq, SDPA_FLOAT32, seed);
    for (int64_t b = 0; b < sv->seqs; b++)
        if (fill_pages(sv, b, sv->kpool, s->dk, seed + 2 * (uint64_t)b + 1) ||
            fill_pages(sv, b, sv->vpool, s->dv, seed + 2 * (uint64_t)b + 2))
            return -1;
    for (int64_t b = 0; b < sv->seqs; b++)
        for (int64_t h = 0; h < s->hq; h++)
            for (int64_t i = 0; i < s->seq_q[b]; i++)
                memcpy(sv->q_pad + padded_row(sv, b, h, i) * (size_t)s->dk,
                       sv->q + packed_row(sv, b, h, i) * (size_t)s->dk,
                       (size_t)s->dk * sizeof(float));
    make_calls(sv);
    return 0;
}

/* ---- checks, outside the timing ------------------------------------------ */

/* Key j of sequence b's KV head, from copy 0's pages. */
static void page_key(const void *data, int64_t b, int64_t kv_head, int64_t j,
                     float *k, float *v)
{
    const serving *sv = data;
    const bench_shape *s = sv->s;
    const size_t page = (size_t)sv->table[b * sv->pps + j / s->page];
    const size_t slot = (size_t)(kv_head * s->page + j % s->page);
    const uint16_t *kr =
        sv->kpool + page * page_elems(s, s->dk) + slot * (size_t)s->dk;
    const uint16_t *vr =
        sv->vpool + page * page_elems(s, s->dv) + slot * (size_t)s->dv;
    for (int64_t c = 0; c < s->dk; c++)
        k[c] = bench_half_value(kr[c], s->kv_type);
    for (int64_t c = 0; c < s->dv; c++)
        v[c] = bench_half_value(vr[c], s->kv_type);
}

/* The padded output's real rows against the ragged output. */
static double padded_diff(const serving *sv)
{
    const bench_shape *s = sv->s;
    double worst = 0.0;
    for (int64_t b = 0; b < sv->seqs; b++)
        for (int64_t h = 0; h < s->hq; h++)
            for (int64_t i = 0; i < s->seq_q[b]; i++) {
                double e = bench_max_abs_diff(
                    sv->out_pad + padded_row(sv, b, h, i) * (size_t)s->dv,
                    sv->out + packed_row(sv, b, h, i) * (size_t)s->dv,
                    (size_t)s->dv, SDPA_FLOAT32);
                worst = e > worst ? e : worst;
            }
    return worst;
}

/* The checks into the rows' max|diff| and the summary; the failures. */
static int check_rows(const serving *sv, bench_row *rows,
                      bench_ragged_summary *m)
{
    const bench_shape *s = sv->s;
    const size_t count = (size_t)(s->hq * sv->total_q * s->dv);
    int failures = 0;
    if (rows[0].ok && rows[1].ok) {
        m->bitwise = memcmp(sv->out, sv->out_seq, count * sizeof(float)) == 0;
        m->bitwise_what = "the ragged call's out against the 32 per-sequence "
                          "calls' outs";
        failures += !m->bitwise;
    }
    if (rows[0].ok)
        rows[0].max_diff =
            bench_ragged_reference_diff(s, sv->q, sv->out, page_key, sv);
    if (rows[0].ok && rows[1].ok)
        rows[1].max_diff =
            bench_max_abs_diff(sv->out_seq, sv->out, count, SDPA_FLOAT32);
    if (rows[0].ok && rows[2].ok)
        rows[2].max_diff = padded_diff(sv);
    static const char *const notes[3] = {
        "seqs=32, q_offsets, a block table row each; max|diff|: double "
        "softmax, decode rows, prefill rows 0/255/511",
        "32 calls (N=1, own views), one context; max|diff| against the "
        "ragged out",
        "N=32 Tq=512 Tk=8192, kv_lens, EMPTY_ROWS_ZERO; max|diff|: real rows "
        "against the ragged out"};
    return failures + bench_ragged_verdicts(rows, 3, notes);
}

int bench_serving_run(const bench_env *env, const bench_ragged_opts *o,
                      const bench_shape *s, bench_row *rows, size_t *nrows,
                      bench_ragged_summary *sums, size_t *nsums)
{
    serving sv;
    fprintf(stderr, "[%s] generating inputs and the paged cache (%d copies)\n",
            s->name, COPIES);
    if (serving_init(&sv, s, env->seed)) {
        fprintf(stderr, "sdpa-bench: out of memory for shape %s\n", s->name);
        serving_free(&sv);
        return 1;
    }
    const double flop = bench_shape_flops(s), kv = bench_shape_kv_bytes(s);
    const bench_calls calls[3] = {
        {"sdpa ragged", sv.ragged, NULL, 1, COPIES, 0, flop, kv},
        {"sdpa per-sequence", sv.per_seq, NULL, sv.seqs, COPIES, 0, flop, kv},
        {"sdpa padded", sv.padded, NULL, 1, COPIES, 1, flop, kv}};
    const size_t nq = (size_t)(s->hq * sv.total_q * s->dv);
    const size_t npad = (size_t)(sv.seqs * s->hq * PAD_ROWS * s->dv);
    int warnings = 0;
    for (int t = 0; t < o->nthreads; t++) {
        /* all-ones bytes are NaN: an output no call writes fails */
        memset(sv.out, 0xff, nq * sizeof(float));
        memset(sv.out_seq, 0xff, nq * sizeof(float));
        memset(sv.out_pad, 0xff, npad * sizeof(float));
        bench_row *r = rows + *nrows;
        bench_calls_time(env, o, s, o->threads[t], calls, 3, r);
        bench_ragged_summary *m = &sums[(*nsums)++];
        *m = (bench_ragged_summary){
            .shape = s, .threads = o->threads[t], .bitwise = -1};
        warnings += check_rows(&sv, r, m);
        m->ratio[0] = bench_ragged_ratio_of("ragged/per-sequence", &r[0], &r[1],
                                            PER_SEQ_TARGET, 1);
        m->ratio[1] = bench_ragged_ratio_of("ragged/padded", &r[0], &r[2],
                                            PADDED_TARGET, 1);
        m->nratio = 2;
        if (!o->json)
            bench_report_ragged(m, r, 3);
        *nrows += 3;
    }
    serving_free(&sv);
    return warnings;
}
