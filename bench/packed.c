/*
 * Shape Tp: a training step's documents packed into one 8192-token
 * sequence (shapes.c lists them), each attending causally to itself only.
 * Timed two ways in the same rounds, forward and backward:
 *   ragged      one call with seqs = 8 and q_offsets = kv_offsets over
 *               the packed q, k and v (Tq_b = Tk_b: bottom-right causal is
 *               top-left causal within each document)
 *   dense mask  one rectangular call over the 8192 tokens with a uint8
 *               mask [1, 1, 8192, 8192] that allows key j to row i only
 *               inside one document and for j <= i (with
 *               SDPA_FLAG_MASK_NONZERO_ALLOWS and causal off: PyTorch's
 *               attn_mask, which its is_causal cannot join)
 * Each backward starts from its own forward's out and lse. A library
 * whose backward refuses ragged calls (SDPA_ERR_BAD_RAGGED) gets the
 * forwards only. Outside the timing: the ragged out against a
 * double-precision softmax on sampled rows, the dense out against the
 * ragged, and the ragged gradients against the dense ones.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

enum { MAX_DOCS = 64, BUFFERS = 14 };

static const double FORWARD_TARGET = 5.0; /* dense / ragged forward, >= */

/* The float tensors, all [1, H, tokens, D]: inputs, then ragged outputs,
 * then the dense call's. */
enum {
    Q,
    K,
    V,
    DOUT, /* inputs */
    OUT,
    LSE,
    DQ,
    DK,
    DV, /* ragged: forward, backward */
    OUT_D,
    LSE_D,
    DQ_D,
    DK_D,
    DV_D /* dense mask */
};

typedef struct packed {
    const bench_shape *s;
    int64_t tokens;
    int64_t off[MAX_DOCS + 1]; /* q_offsets = kv_offsets */
    float *buf[BUFFERS];
    size_t count[BUFFERS]; /* their elements */
    uint8_t *mask;         /* [tokens, tokens] */
    sdpa_forward_args fwd, fwd_dense;
    sdpa_backward_args bwd, bwd_dense;
} packed;

static void packed_free(packed *p)
{
    for (int i = 0; i < BUFFERS; i++)
        free(p->buf[i]);
    free(p->mask);
    memset(p, 0, sizeof *p);
}

static sdpa_tensor rows(const packed *p, int which, int64_t dim)
{
    return sdpa_tensor_bhtd(p->buf[which], 1, p->s->hq, p->tokens, dim);
}

/* The backward of forward call f: dout, and the gradients at `grads` (DQ
 * or DQ_D, then their dk and dv). */
static sdpa_backward_args backward_of(const packed *p,
                                      const sdpa_forward_args *f, int grads)
{
    const bench_shape *s = p->s;
    sdpa_backward_args g = bench_backward_of(f);
    g.dout = rows(p, DOUT, s->dv);
    g.dq = rows(p, grads, s->dk);
    g.dk = sdpa_tensor_bhtd(p->buf[grads + 1], 1, s->hkv, p->tokens, s->dk);
    g.dv = sdpa_tensor_bhtd(p->buf[grads + 2], 1, s->hkv, p->tokens, s->dv);
    return g;
}

static int packed_init(packed *p, const bench_shape *s, uint64_t seed)
{
    memset(p, 0, sizeof *p);
    p->s = s;
    if (s->n > MAX_DOCS)
        return -1;
    int64_t kv_off[MAX_DOCS + 1];
    bench_seq_offsets(s, p->off, kv_off); /* the same: Tq_b = Tk_b */
    p->tokens = p->off[s->n];
    const int64_t dims[BUFFERS] = {s->dk, s->dk, s->dv, s->dv, s->dv,
                                   1,     s->dk, s->dk, s->dv, s->dv,
                                   1,     s->dk, s->dk, s->dv};
    const int64_t heads[BUFFERS] = {s->hq, s->hkv, s->hkv, s->hq,  s->hq,
                                    s->hq, s->hq,  s->hkv, s->hkv, s->hq,
                                    s->hq, s->hq,  s->hkv, s->hkv};
    for (int i = 0; i < BUFFERS; i++) {
        p->count[i] = (size_t)(heads[i] * p->tokens * dims[i]);
        if (!(p->buf[i] = bench_alloc(p->count[i] * sizeof(float))))
            return -1;
    }
    p->mask = bench_alloc((size_t)(p->tokens * p->tokens));
    if (!p->mask)
        return -1;
    for (int i = Q; i <= DOUT; i++)
        bench_fill_random(p->buf[i], p->count[i], SDPA_FLOAT32,
                          seed + (uint64_t)i);
    for (int64_t b = 0; b < s->n; b++)
        for (int64_t i = p->off[b]; i < p->off[b + 1]; i++)
            memset(p->mask + i * p->tokens + p->off[b], 1,
                   (size_t)(i - p->off[b] + 1));

    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.q = rows(p, Q, s->dk);
    a.k = sdpa_tensor_bhtd(p->buf[K], 1, s->hkv, p->tokens, s->dk);
    a.v = sdpa_tensor_bhtd(p->buf[V], 1, s->hkv, p->tokens, s->dv);
    sdpa_forward_args dense = a;
    a.causal = s->causal;
    a.out = rows(p, OUT, s->dv);
    a.lse = rows(p, LSE, 1);
    a.seqs = s->n;
    a.q_offsets = p->off;
    a.kv_offsets = p->off;
    p->fwd = a;
    dense.flags = SDPA_FLAG_MASK_NONZERO_ALLOWS;
    dense.mask = (sdpa_tensor){
        p->mask, {1, 1, p->tokens, p->tokens}, {0, 0, p->tokens, 1}};
    dense.out = rows(p, OUT_D, s->dv);
    dense.lse = rows(p, LSE_D, 1);
    p->fwd_dense = dense;
    p->bwd = backward_of(p, &p->fwd, DQ);
    p->bwd_dense = backward_of(p, &p->fwd_dense, DQ_D);
    return 0;
}

/* Does the library take ragged backward calls? A forward and a backward on
 * a context of their own; "" when it does, else what to print. */
static void probe_backward(const packed *p, char *note, size_t size)
{
    sdpa_ctx *ctx = NULL;
    int st = sdpa_ctx_create(&ctx);
    if (st == SDPA_OK)
        st = sdpa_forward(ctx, &p->fwd);
    if (st == SDPA_OK)
        st = sdpa_backward(ctx, &p->bwd);
    if (st == SDPA_ERR_BAD_RAGGED)
        snprintf(note, size, "backward: not available in this build");
    else if (st != SDPA_OK)
        snprintf(note, size, "backward: ERROR %s: %s", sdpa_status_string(st),
                 ctx ? sdpa_ctx_last_error(ctx) : "");
    else
        note[0] = '\0';
    sdpa_ctx_destroy(ctx);
}

/* ---- checks, outside the timing ------------------------------------------ */

/* Key j of document b's KV head, from the packed k and v. */
static void packed_key(const void *data, int64_t b, int64_t kv_head, int64_t j,
                       float *k, float *v)
{
    const packed *p = data;
    const bench_shape *s = p->s;
    size_t row = (size_t)(kv_head * p->tokens + p->off[b] + j);
    memcpy(k, p->buf[K] + row * (size_t)s->dk, (size_t)s->dk * sizeof *k);
    memcpy(v, p->buf[V] + row * (size_t)s->dv, (size_t)s->dv * sizeof *v);
}

/* Largest difference of the gradients of the two backwards. */
static double gradient_diff(const packed *p)
{
    double worst = 0.0;
    for (int i = 0; i < 3; i++) {
        double e = bench_max_abs_diff(p->buf[DQ + i], p->buf[DQ_D + i],
                                      p->count[DQ + i], SDPA_FLOAT32);
        worst = e > worst || isnan(e) ? e : worst;
    }
    return worst;
}

/* The checks into the rows' max|diff| (forward ragged, forward dense,
 * then the backwards when there are); the failures. */
static int check_rows(const packed *p, bench_row *r, int n)
{
    const bench_shape *s = p->s;
    static const char *const notes[4] = {
        "seqs=8, q_offsets = kv_offsets; max|diff|: double softmax, rows "
        "first/middle/last of each document",
        "uint8 mask [1,1,8192,8192], causal off; max|diff| against the "
        "ragged out",
        "sdpa_backward, the ragged fields; max|diff|: dq, dk, dv against "
        "the dense mask's",
        "sdpa_backward with the mask, from the dense forward's out, lse"};
    if (r[0].ok)
        r[0].max_diff = bench_ragged_reference_diff(s, p->buf[Q], p->buf[OUT],
                                                    packed_key, p);
    if (r[0].ok && r[1].ok)
        r[1].max_diff = bench_max_abs_diff(p->buf[OUT_D], p->buf[OUT],
                                           p->count[OUT], SDPA_FLOAT32);
    if (n > 2 && r[2].ok && r[3].ok)
        r[2].max_diff = gradient_diff(p);
    return bench_ragged_verdicts(r, n, notes);
}

int bench_packed_run(const bench_env *env, const bench_ragged_opts *o,
                     const bench_shape *s, bench_row *rows, size_t *nrows,
                     bench_ragged_summary *sums, size_t *nsums)
{
    packed p;
    fprintf(stderr, "[%s] generating inputs and the dense mask\n", s->name);
    if (packed_init(&p, s, env->seed)) {
        fprintf(stderr, "sdpa-bench: out of memory for shape %s\n", s->name);
        packed_free(&p);
        return 1;
    }
    char backward_note[160];
    probe_backward(&p, backward_note, sizeof backward_note);
    const double flop = bench_shape_flops(s);
    /* the five gemms of a backward against the forward's two */
    const double bwd_flop =
        flop * (double)(3 * s->dk + 2 * s->dv) / (double)(s->dk + s->dv);
    const bench_calls calls[4] = {
        {"fwd ragged", &p.fwd, NULL, 1, 1, 0, flop, 0},
        {"fwd dense mask", &p.fwd_dense, NULL, 1, 1, 0, flop, 0},
        {"bwd ragged", NULL, &p.bwd, 1, 1, 0, bwd_flop, 0},
        {"bwd dense mask", NULL, &p.bwd_dense, 1, 1, 0, bwd_flop, 0}};
    const int n = backward_note[0] ? 2 : 4;
    int warnings = strncmp(backward_note, "backward: ERROR", 15) == 0;
    for (int t = 0; t < o->nthreads; t++) {
        /* all-ones bytes are NaN: an output no call writes fails */
        for (int i = OUT; i < BUFFERS; i++)
            memset(p.buf[i], 0xff, p.count[i] * sizeof(float));
        bench_row *r = rows + *nrows;
        bench_calls_time(env, o, s, o->threads[t], calls, n, r);
        bench_ragged_summary *m = &sums[(*nsums)++];
        *m = (bench_ragged_summary){
            .shape = s, .threads = o->threads[t], .bitwise = -1};
        snprintf(m->note, sizeof m->note, "%s", backward_note);
        warnings += check_rows(&p, r, n);
        m->ratio[0] = bench_ragged_ratio_of("forward dense/ragged", &r[1],
                                            &r[0], FORWARD_TARGET, 0);
        if (n == 4)
            m->ratio[1] = bench_ragged_ratio_of("backward dense/ragged", &r[3],
                                                &r[2], 0.0, 0);
        m->nratio = n / 2;
        if (!o->json)
            bench_report_ragged(m, r, n);
        *nrows += (size_t)n;
    }
    packed_free(&p);
    return warnings;
}
