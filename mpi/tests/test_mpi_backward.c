/*
 * sdpa_mpi_backward against single-process sdpa_backward, run by ctest
 * under mpirun with P = 1..4 ranks (mpi/tests/CMakeLists.txt). Every rank
 * builds the whole problem from the same seed, runs sdpa_forward and
 * sdpa_backward on it in its own process (the reference), then its shard
 * through sdpa_mpi_backward, and compares its rows of dq and its
 * positions' dk and dv within the tolerance sdpa_mpi.h states (relative
 * to the largest element of the reference tensor). Each call is repeated
 * with SDPA_OPT_NUM_THREADS 2: the same bits. Then the errors: bad or
 * disagreeing arguments on one rank are the same status on every rank,
 * with every output untouched (after SDPA_ERR_NONFINITE the gradients are
 * unspecified). Exit status 0 only if every rank passed.
 */
#include "mpi_test_data.h"

typedef struct bcase {
    const char *name;
    int dtype, causal, layout;
    int64_t n, hq, hkv, t, dk, dv;
    int kv_lens; /* 0 none, 1 random in [1, T], 2 with a zero */
    int mask;    /* [N, 1, T, T], ~1 in 5 forbidden */
    int bias;    /* [1, Hq, T, T] */
    int shared;  /* k and v [1, Hkv, T, D], broadcast over N */
    int policy;  /* SDPA_EMPTY_ROWS_* of the backward */
    int poison;  /* 1: a NaN in q */
    double softcap;
} bcase;

/* The whole problem, contiguous, and the reference's gradients. */
typedef struct bwhole {
    void *q, *k, *v, *bias, *out, *lse, *dout, *dq, *dk, *dv, *dbias;
    uint8_t *mask;
    int64_t kv_lens[4], nk;
    int status; /* of the reference sdpa_backward */
} bwhole;

static sdpa_tensor bhtd(void *p, int64_t n, int64_t h, int64_t t, int64_t d)
{
    return sdpa_tensor_bhtd(p, n, h, t, d);
}

static void *zeros(size_t bytes)
{
    void *p = calloc(bytes + 1, 1);
    if (!p)
        MPI_Abort(MPI_COMM_WORLD, 3);
    return p;
}

static sdpa_backward_args whole_args(bwhole *w, const bcase *c)
{
    sdpa_backward_args a = SDPA_BACKWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.causal = c->causal;
    a.softcap = c->softcap;
    a.kv_lens = c->kv_lens ? w->kv_lens : NULL;
    a.q = bhtd(w->q, c->n, c->hq, c->t, c->dk);
    a.k = bhtd(w->k, w->nk, c->hkv, c->t, c->dk);
    a.v = bhtd(w->v, w->nk, c->hkv, c->t, c->dv);
    if (w->mask)
        a.mask = (sdpa_tensor){
            w->mask, {c->n, 1, c->t, c->t}, {c->t * c->t, 0, c->t, 1}};
    if (w->bias)
        a.bias = (sdpa_tensor){
            w->bias, {1, c->hq, c->t, c->t}, {0, c->t * c->t, c->t, 1}};
    a.out = bhtd(w->out, c->n, c->hq, c->t, c->dv);
    a.lse = bhtd(w->lse, c->n, c->hq, c->t, 1);
    a.dout = bhtd(w->dout, c->n, c->hq, c->t, c->dv);
    a.dq = bhtd(w->dq, c->n, c->hq, c->t, c->dk);
    a.dk = bhtd(w->dk, w->nk, c->hkv, c->t, c->dk);
    a.dv = bhtd(w->dv, w->nk, c->hkv, c->t, c->dv);
    if (w->dbias)
        a.dbias = (sdpa_tensor){
            w->dbias, {1, c->hq, c->t, c->t}, {0, c->t * c->t, c->t, 1}};
    return a;
}

static void whole_make(bwhole *w, const bcase *c, uint64_t seed, sdpa_ctx *ctx)
{
    rng r = {seed};
    const int dt = c->dtype;
    const size_t es = esize(dt);
    w->nk = c->shared ? 1 : c->n;
    const size_t qn = (size_t)(c->n * c->hq * c->t);
    const size_t kn = (size_t)(w->nk * c->hkv * c->t);
    w->q = random_array(&r, dt, qn * (size_t)c->dk, 1.5);
    w->k = random_array(&r, dt, kn * (size_t)c->dk, 1.5);
    w->v = random_array(&r, dt, kn * (size_t)c->dv, 1.0);
    w->dout = random_array(&r, dt, qn * (size_t)c->dv, 1.0);
    w->bias =
        c->bias ? random_array(&r, dt, (size_t)(c->hq * c->t * c->t), 1) : NULL;
    w->mask = NULL;
    if (c->mask) {
        size_t count = (size_t)(c->n * c->t * c->t);
        w->mask = malloc(count);
        for (size_t i = 0; i < count; i++)
            w->mask[i] = rng_int(&r, 0, 4) == 0;
    }
    for (int64_t b = 0; b < c->n; b++)
        w->kv_lens[b] = rng_int(&r, c->kv_lens == 2 ? 0 : 1, c->t);
    if (c->kv_lens == 2)
        w->kv_lens[0] = 0;
    if (c->poison == 1)
        set(w->q, dt, (size_t)(c->t / 2 * c->dk), NAN);
    w->out = zeros(qn * (size_t)c->dv * es);
    w->lse = zeros(qn * es);
    w->dq = zeros(qn * (size_t)c->dk * es);
    w->dk = zeros(kn * (size_t)c->dk * es);
    w->dv = zeros(kn * (size_t)c->dv * es);
    w->dbias = c->bias ? zeros((size_t)(c->hq * c->t * c->t) * es) : NULL;
    /* The forward under the zero-row policy (a NaN in q makes its row
     * NaN), then the backward under the case's. */
    sdpa_backward_args b = whole_args(w, c);
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.dtype = dt;
    f.causal = c->causal;
    f.softcap = c->softcap;
    f.kv_lens = b.kv_lens;
    f.q = b.q;
    f.k = b.k;
    f.v = b.v;
    f.mask = b.mask;
    f.bias = b.bias;
    f.out = b.out;
    f.lse = b.lse;
    sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    int fs = sdpa_forward(ctx, &f);
    CHECK(fs == SDPA_OK || (c->poison && fs == SDPA_ERR_NONFINITE),
          "%s: reference forward: %s", c->name, sdpa_status_string(fs));
    sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, c->policy);
    b = whole_args(w, c);
    w->status = sdpa_backward(ctx, &b);
}

static void whole_free(bwhole *w)
{
    void *p[] = {w->q,    w->k,  w->v,  w->bias, w->out,  w->lse,
                 w->dout, w->dq, w->dk, w->dv,   w->mask, w->dbias};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
}

/* This rank's shard of a whole problem: its rows, gathered. */
typedef struct bshard {
    int64_t off[2], len[2], rows;
    int segs;
    void *q, *k, *v, *out, *lse, *dout, *bias, *dq, *dk, *dv, *dbias;
    uint8_t *mask;
    size_t dq_bytes, dk_bytes, dv_bytes, dbias_bytes;
} bshard;

static void shard_make(bshard *s, const bwhole *w, const bcase *c)
{
    const size_t es = esize(c->dtype);
    if (c->layout == SDPA_MPI_LAYOUT_BALANCED) {
        CHECK(sdpa_mpi_shard(c->layout, c->t, g_rank, g_ranks, s->off,
                             s->len) == SDPA_OK,
              "shard");
    } else { /* uneven contiguous shards: rank r holds about (r + 1) parts */
        int64_t parts = (int64_t)g_ranks * (g_ranks + 1) / 2, before = 0;
        for (int r = 0; r < g_rank; r++)
            before += r + 1;
        s->off[0] = c->t * before / parts;
        s->len[0] = c->t * (before + g_rank + 1) / parts - s->off[0];
        s->off[1] = s->off[0] + s->len[0];
        s->len[1] = 0;
    }
    s->segs = s->len[1] > 0 ? 2 : 1;
    s->rows = s->len[0] + s->len[1];
    const int64_t *o = s->off, *l = s->len;
    const int n = s->segs;
    s->q = gather_rows(w->q, es, c->n, c->hq, c->t, c->dk, o, l, n);
    s->k = gather_rows(w->k, es, w->nk, c->hkv, c->t, c->dk, o, l, n);
    s->v = gather_rows(w->v, es, w->nk, c->hkv, c->t, c->dv, o, l, n);
    s->out = gather_rows(w->out, es, c->n, c->hq, c->t, c->dv, o, l, n);
    s->dout = gather_rows(w->dout, es, c->n, c->hq, c->t, c->dv, o, l, n);
    s->lse = gather_rows(w->lse, es, c->n, c->hq, c->t, 1, o, l, n);
    s->mask =
        w->mask ? gather_rows(w->mask, 1, c->n, 1, c->t, c->t, o, l, n) : NULL;
    s->bias = w->bias ? gather_rows(w->bias, es, 1, c->hq, c->t, c->t, o, l, n)
                      : NULL;
    s->dq_bytes = (size_t)(c->n * c->hq * s->rows * c->dk) * es;
    s->dk_bytes = (size_t)(w->nk * c->hkv * s->rows * c->dk) * es;
    s->dv_bytes = (size_t)(w->nk * c->hkv * s->rows * c->dv) * es;
    s->dq = malloc(s->dq_bytes);
    s->dk = malloc(s->dk_bytes);
    s->dv = malloc(s->dv_bytes);
    s->dbias_bytes = w->bias ? (size_t)(c->hq * s->rows * c->t) * es : 0;
    s->dbias = w->bias ? malloc(s->dbias_bytes) : NULL;
}

static void shard_free(bshard *s)
{
    void *p[] = {s->q,    s->k,  s->v,  s->out, s->lse,  s->dout,
                 s->bias, s->dq, s->dk, s->dv,  s->mask, s->dbias};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++)
        free(p[i]);
}

static void poison_outputs(bshard *s)
{
    memset(s->dq, 0xA5, s->dq_bytes);
    memset(s->dk, 0xA5, s->dk_bytes);
    memset(s->dv, 0xA5, s->dv_bytes);
    if (s->dbias)
        memset(s->dbias, 0xA5, s->dbias_bytes);
}

static int outputs_untouched(const bshard *s)
{
    const unsigned char *p[4] = {s->dq, s->dk, s->dv, s->dbias};
    const size_t n[4] = {s->dq_bytes, s->dk_bytes, s->dv_bytes, s->dbias_bytes};
    for (int t = 0; t < 4; t++)
        for (size_t i = 0; i < n[t]; i++)
            if (p[t][i] != 0xA5)
                return 0;
    return 1;
}

static sdpa_backward_args shard_args(const bshard *s, const bcase *c,
                                     int64_t nk, int64_t *kv_lens)
{
    const int64_t rows = s->rows, t = c->t;
    sdpa_backward_args a = SDPA_BACKWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.causal = c->causal;
    a.softcap = c->softcap;
    a.kv_lens = c->kv_lens ? kv_lens : NULL;
    a.q = bhtd(s->q, c->n, c->hq, rows, c->dk);
    a.k = bhtd(s->k, nk, c->hkv, rows, c->dk);
    a.v = bhtd(s->v, nk, c->hkv, rows, c->dv);
    if (s->mask)
        a.mask =
            (sdpa_tensor){s->mask, {c->n, 1, rows, t}, {rows * t, 0, t, 1}};
    if (s->bias)
        a.bias =
            (sdpa_tensor){s->bias, {1, c->hq, rows, t}, {0, rows * t, t, 1}};
    a.out = bhtd(s->out, c->n, c->hq, rows, c->dv);
    a.lse = bhtd(s->lse, c->n, c->hq, rows, 1);
    a.dout = bhtd(s->dout, c->n, c->hq, rows, c->dv);
    a.dq = bhtd(s->dq, c->n, c->hq, rows, c->dk);
    a.dk = bhtd(s->dk, nk, c->hkv, rows, c->dk);
    a.dv = bhtd(s->dv, nk, c->hkv, rows, c->dv);
    if (s->dbias)
        a.dbias =
            (sdpa_tensor){s->dbias, {1, c->hq, rows, t}, {0, rows * t, t, 1}};
    return a;
}

/* The largest |difference| of the rank's rows of one gradient ([A, H,
 * rows, D], the layout's order) from the whole's, over the largest
 * |element| of the whole's (at least 1). */
static double rel_error(const bcase *c, const bshard *s, const void *mine,
                        const void *whole, int64_t a, int64_t h, int64_t d)
{
    double worst = 0, big = 1;
    for (size_t i = 0; i < (size_t)(a * h * c->t * d); i++)
        big = fmax(big, fabs(get(whole, c->dtype, i)));
    for (int64_t ah = 0; ah < a * h; ah++)
        for (int seg = 0, local = 0; seg < s->segs; seg++)
            for (int64_t i = 0; i < s->len[seg]; i++, local++)
                for (int64_t x = 0; x < d; x++) {
                    size_t m = (size_t)((ah * s->rows + local) * d + x);
                    size_t w = (size_t)((ah * c->t + s->off[seg] + i) * d + x);
                    double e =
                        fabs(get(mine, c->dtype, m) - get(whole, c->dtype, w));
                    worst = e == e ? fmax(worst, e) : INFINITY;
                }
    return worst / big;
}

/* Over every case, float32 and float64, for the summary. */
static double worst_error[2];

/* A case: the reference, the distributed call on 1 and 2 threads (the
 * same bits), and the comparison; or the expected status. */
static void run_case(const bcase *c, uint64_t seed, sdpa_ctx *ctx)
{
    g_cases++;
    bwhole w;
    whole_make(&w, c, seed, ctx);
    bshard s;
    shard_make(&s, &w, c);
    sdpa_backward_args a = shard_args(&s, c, w.nk, w.kv_lens);
    sdpa_mpi_stats stats = {.struct_size = sizeof stats};
    sdpa_mpi_backward_args m = SDPA_MPI_BACKWARD_ARGS_INIT;
    m.layout = c->layout;
    m.grad = &a;
    m.stats = &stats;
    poison_outputs(&s);
    sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, c->policy);
    int status = sdpa_mpi_backward(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == w.status,
          "%s: sdpa_mpi_backward gave %s (%s), "
          "sdpa_backward %s",
          c->name, sdpa_status_string(status), sdpa_mpi_last_error(),
          sdpa_status_string(w.status));
    int64_t policy = -1;
    sdpa_ctx_get_int(ctx, SDPA_OPT_EMPTY_ROWS, &policy);
    CHECK(policy == c->policy, "%s: the context's policy was not restored",
          c->name);
    if (status == SDPA_OK && w.status == SDPA_OK) {
        const double tol = c->dtype == SDPA_FLOAT32 ? 1e-5 : 1e-12;
        double e[4] = {
            rel_error(c, &s, s.dq, w.dq, c->n, c->hq, c->dk),
            rel_error(c, &s, s.dk, w.dk, w.nk, c->hkv, c->dk),
            rel_error(c, &s, s.dv, w.dv, w.nk, c->hkv, c->dv),
            s.dbias ? rel_error(c, &s, s.dbias, w.dbias, 1, c->hq, c->t) : 0};
        static const char *const name[4] = {"dq", "dk", "dv", "dbias"};
        for (int t = 0; t < 4; t++) {
            CHECK(e[t] <= tol,
                  "%s: %s differs from sdpa_backward's by "
                  "%.3g of its largest element (tolerance %.0e)",
                  c->name, name[t], e[t], tol);
            /* One rank, one contiguous shard, one tile, no kv_lens:
             * sdpa_backward's own call. */
            CHECK(g_ranks > 1 || c->layout != SDPA_MPI_LAYOUT_CONTIGUOUS ||
                      c->t > 2048 || c->kv_lens || e[t] == 0,
                  "%s: %s not bitwise sdpa_backward's on one rank and one "
                  "tile (%.3g)",
                  c->name, name[t], e[t]);
            int f64 = c->dtype == SDPA_FLOAT64;
            worst_error[f64] = fmax(worst_error[f64], e[t]);
        }
        CHECK(g_ranks == 1 || stats.bytes_sent > 0, "%s: no bytes sent",
              c->name);
        CHECK(stats.forward_calls + stats.blocks_skipped > 0,
              "%s: no sdpa_backward call or skipped block counted", c->name);
        /* Again on two threads: the same bits. */
        const unsigned char *got[4] = {s.dq, s.dk, s.dv, s.dbias};
        const size_t bytes[4] = {s.dq_bytes, s.dk_bytes, s.dv_bytes,
                                 s.dbias_bytes};
        unsigned char *first[4];
        for (int t = 0; t < 4; t++) {
            first[t] = malloc(bytes[t] + 1);
            if (bytes[t])
                memcpy(first[t], got[t], bytes[t]);
        }
        sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, 2);
        poison_outputs(&s);
        status = sdpa_mpi_backward(ctx, MPI_COMM_WORLD, &m);
        sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, 1);
        int same = status == SDPA_OK;
        for (int t = 0; t < 4; t++) {
            same &= bytes[t] == 0 || !memcmp(first[t], got[t], bytes[t]);
            free(first[t]);
        }
        CHECK(same, "%s: not the same bits on 2 threads (%s)", c->name,
              sdpa_status_string(status));
    } else if (status != SDPA_OK && status != SDPA_ERR_NONFINITE) {
        CHECK(outputs_untouched(&s), "%s: outputs written after %s", c->name,
              sdpa_status_string(status));
    }
    shard_free(&s);
    whole_free(&w);
}

/* One rank's bad argument (or one that disagrees): the same status on
 * every rank, every output untouched. */
enum {
    BAD_DOUT_SHAPE,
    BAD_DQ_STRIDE,
    BAD_DBIAS,
    BAD_DROPOUT,
    BAD_RAGGED,
    BAD_NO_LSE,
    BAD_OVERLAP,
    BAD_CAUSAL_DISAGREES,
    BAD_GRAD_DTYPE,
    BAD_LAYOUT,
    BAD_STRUCT_SIZE,
    BAD_WINDOW,
    BAD_COUNT
};

static void run_errors(sdpa_ctx *ctx)
{
    static const struct {
        const char *what;
        int status;
        int solo; /* also an error on one rank */
    } bad[BAD_COUNT] = {
        [BAD_DOUT_SHAPE] = {"dout shape", SDPA_ERR_SHAPE_MISMATCH, 1},
        [BAD_DQ_STRIDE] = {"dq innermost stride", SDPA_ERR_BAD_STRIDE, 1},
        [BAD_DBIAS] = {"dbias without bias", SDPA_ERR_NULL_POINTER, 1},
        [BAD_DROPOUT] = {"dropout", SDPA_ERR_UNSUPPORTED, 1},
        [BAD_RAGGED] = {"ragged", SDPA_ERR_UNSUPPORTED, 1},
        [BAD_NO_LSE] = {"no lse", SDPA_ERR_NULL_POINTER, 1},
        [BAD_OVERLAP] = {"dq over dout", SDPA_ERR_OVERLAP, 1},
        [BAD_CAUSAL_DISAGREES] = {"causal disagrees", SDPA_ERR_BAD_CAUSAL, 0},
        [BAD_GRAD_DTYPE] = {"grad_dtype", SDPA_ERR_BAD_DTYPE, 1},
        [BAD_LAYOUT] = {"layout", SDPA_ERR_BAD_OPTION_VALUE, 1},
        [BAD_STRUCT_SIZE] = {"grad struct_size", SDPA_ERR_STRUCT_SIZE, 1},
        [BAD_WINDOW] = {"window", SDPA_ERR_UNSUPPORTED, 1},
    };
    const bcase c = {"errors",
                     SDPA_FLOAT32,
                     SDPA_CAUSAL_TOP_LEFT,
                     SDPA_MPI_LAYOUT_BALANCED,
                     1,
                     2,
                     1,
                     8 * g_ranks,
                     4,
                     4,
                     0,
                     0,
                     0,
                     0,
                     SDPA_EMPTY_ROWS_ERROR,
                     0,
                     0};
    bwhole w;
    whole_make(&w, &c, 77, ctx);
    bshard s;
    shard_make(&s, &w, &c);
    float dbias = 0;
    int64_t offsets[2] = {0, s.rows};
    for (int e = 0; e < BAD_COUNT; e++) {
        g_cases++;
        /* the last rank alone (all ranks for a disagreement on one rank) */
        const int me = g_rank == g_ranks - 1;
        sdpa_backward_args a = shard_args(&s, &c, w.nk, w.kv_lens);
        sdpa_mpi_backward_args m = SDPA_MPI_BACKWARD_ARGS_INIT;
        m.layout = c.layout;
        m.grad = &a;
        if (me) {
            switch (e) {
            case BAD_DOUT_SHAPE:
                a.dout.shape[3] = c.dv - 1;
                break;
            case BAD_DQ_STRIDE:
                a.dq.stride[3] = 2;
                break;
            case BAD_DBIAS:
                a.dbias = (sdpa_tensor){&dbias, {1, 1, 1, 1}, {0, 0, 0, 0}};
                break;
            case BAD_DROPOUT:
                a.dropout_p = 0.1;
                break;
            case BAD_RAGGED:
                a.seqs = 1;
                a.q_offsets = offsets;
                break;
            case BAD_NO_LSE:
                a.lse.data = NULL;
                break;
            case BAD_OVERLAP:
                a.dq = a.dout; /* Dk == Dv here */
                break;
            case BAD_CAUSAL_DISAGREES:
                a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
                break;
            case BAD_GRAD_DTYPE:
                a.grad_dtype = SDPA_FLOAT64;
                break;
            case BAD_LAYOUT:
                m.layout = 7;
                break;
            case BAD_STRUCT_SIZE:
                a.struct_size = 100;
                break;
            case BAD_WINDOW:
                a.window_left = 3;
                break;
            }
        }
        const int expect = bad[e].solo || g_ranks > 1 ? bad[e].status : SDPA_OK;
        poison_outputs(&s);
        int status = sdpa_mpi_backward(ctx, MPI_COMM_WORLD, &m);
        CHECK(status == expect, "%s: %s (%s), expected %s", bad[e].what,
              sdpa_status_string(status), sdpa_mpi_last_error(),
              sdpa_status_string(expect));
        if (expect != SDPA_OK) {
            CHECK(outputs_untouched(&s), "%s: outputs written", bad[e].what);
            CHECK(g_ranks == 1 || me || !bad[e].solo ||
                      strncmp(sdpa_mpi_last_error(), "rank ", 5) == 0,
                  "%s: message '%s' does not name the rank", bad[e].what,
                  sdpa_mpi_last_error());
        }
    }
    /* NULL arguments. */
    g_cases++;
    CHECK(sdpa_mpi_backward(ctx, MPI_COMM_WORLD, NULL) == SDPA_ERR_NULL_POINTER,
          "NULL args");
    sdpa_mpi_backward_args m = SDPA_MPI_BACKWARD_ARGS_INIT;
    CHECK(sdpa_mpi_backward(ctx, MPI_COMM_WORLD, &m) == SDPA_ERR_NULL_POINTER,
          "NULL grad");
    CHECK(sdpa_mpi_backward(NULL, MPI_COMM_WORLD, &m) == SDPA_ERR_NULL_POINTER,
          "NULL ctx");
    shard_free(&s);
    whole_free(&w);
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g_ranks);
    sdpa_ctx *ctx;
    if (sdpa_ctx_create(&ctx) != SDPA_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    const int F = SDPA_FLOAT32, D = SDPA_FLOAT64;
    const int NONE = SDPA_CAUSAL_NONE, TL = SDPA_CAUSAL_TOP_LEFT,
              BR = SDPA_CAUSAL_BOTTOM_RIGHT;
    const int CONT = SDPA_MPI_LAYOUT_CONTIGUOUS, BAL = SDPA_MPI_LAYOUT_BALANCED;
    const int ZERO = SDPA_EMPTY_ROWS_ZERO, ERR = SDPA_EMPTY_ROWS_ERROR;
    /* clang-format off */
    const bcase cases[] = {
        /* name                       dtype causal layout n hq hkv t dk dv kvl mask bias shared policy poison softcap */
        {"plain f32",                   F, NONE, CONT, 2, 2, 2, 37, 8, 8, 0, 0, 0, 0, ERR, 0, 0},
        {"top-left balanced GQA",       F, TL,   BAL,  2, 4, 1, 45, 16, 16, 0, 0, 0, 0, ERR, 0, 0},
        {"top-left uneven f64 Dk!=Dv",  D, TL,   CONT, 1, 4, 2, 41, 8, 5, 0, 0, 0, 0, ERR, 0, 0},
        {"bottom-right kv_lens",        D, BR,   BAL,  3, 2, 1, 30, 4, 6, 1, 0, 0, 0, ZERO, 0, 0},
        {"kv_lens zeros, zero rows",    F, TL,   CONT, 3, 2, 2, 29, 6, 6, 2, 0, 0, 0, ZERO, 0, 0},
        {"kv_lens zeros, error policy", F, TL,   CONT, 3, 2, 2, 29, 6, 6, 2, 0, 0, 0, ERR, 0, 0},
        {"mask bias softcap",           F, TL,   BAL,  2, 2, 1, 31, 8, 8, 0, 1, 1, 0, ZERO, 0, 3.0},
        {"mask BR f64",                 D, BR,   BAL,  2, 4, 2, 40, 8, 4, 0, 1, 0, 0, ZERO, 0, 0},
        {"k, v shared over N",          F, TL,   BAL,  3, 2, 1, 26, 8, 8, 0, 0, 0, 1, ERR, 0, 0},
        {"shared, kv_lens",             D, NONE, CONT, 2, 2, 2, 24, 4, 4, 1, 0, 0, 1, ZERO, 0, 0},
        {"long rows (tiles) TL",        F, TL,   BAL,  1, 1, 1, 5000, 16, 16, 0, 0, 0, 0, ERR, 0, 0},
        {"long rows (tiles) BR kv_lens",F, BR,   CONT, 2, 2, 1, 4500, 8, 8, 1, 0, 0, 0, ZERO, 0, 0},
        {"bias kv_lens BR f64 (dbias per item)", D, BR, CONT, 2, 2, 1, 27, 4, 4, 1, 0, 1, 0, ZERO, 0, 0},
        {"bias over tiles (dbias)",     F, TL,   CONT, 1, 1, 1, 2100, 8, 8, 0, 0, 1, 0, ERR, 0, 0},
        {"NaN in q",                    F, TL,   BAL,  1, 2, 1, 33, 8, 8, 0, 0, 0, 0, ZERO, 1, 0},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        run_case(&cases[i], 500 + i, ctx);
    run_errors(ctx);
    int total = 0;
    double worst[2];
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(worst_error, worst, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("sdpa_mpi_backward: %d cases on %d ranks: %s (%d failures; "
               "gradients within %.2g (float32), %.2g (float64) of their "
               "largest element)\n",
               g_cases, g_ranks, total ? "FAILED" : "passed", total, worst[0],
               worst[1]);
    sdpa_ctx_destroy(ctx);
    MPI_Finalize();
    return total ? 1 : 0;
}
