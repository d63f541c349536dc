/*
 * libsdpa-mpi against single-process sdpa_forward, run by ctest under
 * mpirun with P = 1..4 ranks (mpi/tests/CMakeLists.txt). Every rank builds
 * the whole problem from the same seed, computes the reference with
 * sdpa_forward in its own process, runs its part through sdpa_mpi_prefill
 * or sdpa_mpi_decode, and compares its rows: bitwise on one rank with one
 * shard (the calls sdpa_forward makes, written straight into out), within float
 * / double tolerances otherwise (the balanced layout gives one rank two
 * stripes, merged); decode results are also compared bit for bit between the
 * ranks. Then the errors: agreed on every rank; outputs untouched after every
 * error found before the computation (in prefill, out is unspecified after
 * SDPA_ERR_NONFINITE, lse still untouched). Exit status 0 only if every rank
 * passed.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mpi_test_data.h"

/* One test problem: the whole of it, contiguous [N, H, T, D]. */
typedef struct cfg {
    const char *name;
    int dtype, causal, layout; /* layout 0: decode */
    int64_t n, hq, hkv, tq, tk, dk, dv;
    int kv_lens; /* 0 none, 1 random in [1, Tk], 2 with zeros */
    int mask;    /* [N, 1, Tq, Tk] random, ~1 in 5 forbidden */
    int bias;    /* [1, Hq, Tq, Tk] */
    double softcap;
    int policy; /* SDPA_EMPTY_ROWS_* */
    int uneven; /* contiguous / decode: random shard sizes */
    int poison; /* 1: a NaN in q; 2: every logit of one row -inf; 3: a
                   row's bias -inf for every key (head 0) */
} cfg;

typedef struct whole {
    void *q, *k, *v, *bias, *out, *lse;
    uint8_t *mask;
    int64_t kv_lens[4];
} whole;

static void whole_make(whole *w, const cfg *c, uint64_t seed)
{
    rng r = {seed};
    int dt = c->dtype;
    w->q = random_array(&r, dt, (size_t)(c->n * c->hq * c->tq * c->dk), 1.5);
    w->k = random_array(&r, dt, (size_t)(c->n * c->hkv * c->tk * c->dk), 1.5);
    w->v = random_array(&r, dt, (size_t)(c->n * c->hkv * c->tk * c->dv), 1.0);
    w->bias = c->bias
                  ? random_array(&r, dt, (size_t)(c->hq * c->tq * c->tk), 1.0)
                  : NULL;
    w->mask = NULL;
    if (c->mask) {
        size_t count = (size_t)(c->n * c->tq * c->tk);
        w->mask = malloc(count);
        for (size_t i = 0; i < count; i++)
            w->mask[i] = rng_int(&r, 0, 4) == 0;
    }
    for (int64_t b = 0; b < c->n; b++)
        w->kv_lens[b] = rng_int(&r, c->kv_lens == 2 ? 0 : 1, c->tk);
    if (c->kv_lens == 2)
        w->kv_lens[0] = 0; /* an item without keys: empty rows */
    /* Row Tq / 2 of item 0, head 0: a NaN logit for every key (q[0] NaN),
     * or -inf for every key (q = [-inf, 0, ...] against keys whose first
     * element is 1): SDPA_ERR_NONFINITE, found during the computation
     * (a zero row under the zero-row policy for -inf). */
    const size_t row = (size_t)(c->tq / 2 * c->dk);
    if (c->poison == 1)
        set(w->q, dt, row, NAN);
    if (c->poison == 2) {
        set(w->q, dt, row, -INFINITY);
        for (int64_t d = 1; d < c->dk; d++)
            set(w->q, dt, row + (size_t)d, 0);
        for (size_t i = 0; i < (size_t)(c->n * c->hkv * c->tk); i++)
            set(w->k, dt, i * (size_t)c->dk, 1);
    }
    for (int64_t j = 0; c->poison == 3 && j < c->tk; j++)
        set(w->bias, dt, (size_t)(c->tq / 2 * c->tk + j), -INFINITY);
    size_t rows = (size_t)(c->n * c->hq * c->tq);
    w->out = malloc(rows * (size_t)c->dv * esize(dt));
    w->lse = malloc(rows * esize(dt));
}

static void whole_free(whole *w)
{
    free(w->q);
    free(w->k);
    free(w->v);
    free(w->bias);
    free(w->mask);
    free(w->out);
    free(w->lse);
}

static sdpa_tensor bhtd(void *p, int64_t n, int64_t h, int64_t t, int64_t d)
{
    return sdpa_tensor_bhtd(p, n, h, t, d);
}

static sdpa_forward_args whole_args(const whole *w, const cfg *c)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.causal = c->causal;
    a.softcap = c->softcap;
    a.kv_lens = c->kv_lens ? w->kv_lens : NULL;
    a.q = bhtd(w->q, c->n, c->hq, c->tq, c->dk);
    a.k = bhtd(w->k, c->n, c->hkv, c->tk, c->dk);
    a.v = bhtd(w->v, c->n, c->hkv, c->tk, c->dv);
    if (w->mask)
        a.mask = (sdpa_tensor){
            w->mask, {c->n, 1, c->tq, c->tk}, {c->tq * c->tk, 0, c->tk, 1}};
    if (w->bias)
        a.bias = (sdpa_tensor){
            w->bias, {1, c->hq, c->tq, c->tk}, {0, c->tq * c->tk, c->tk, 1}};
    a.out = bhtd(w->out, c->n, c->hq, c->tq, c->dv);
    a.lse = bhtd(w->lse, c->n, c->hq, c->tq, 1);
    return a;
}

/* Shard sizes of `total` over the ranks, each >= 1: even, or uneven. */
static void split(int64_t total, int uneven, uint64_t seed, int64_t *len)
{
    rng r = {seed};
    int64_t left = total;
    for (int p = 0; p < g_ranks; p++) {
        int64_t rest = g_ranks - p - 1; /* ranks after this one */
        int64_t l = total / g_ranks + (p < total % g_ranks);
        if (uneven && rest > 0)
            l = rng_int(&r, 1, left - rest < 3 * l ? left - rest : 3 * l);
        if (rest == 0)
            l = left;
        len[p] = l;
        left -= l;
    }
}

/* ---- Comparison ---------------------------------------------------------- */

/* Rows local..local+len of the rank's out/lse ([N, Hq, rows, ...]) against
 * rows off..off+len of the whole problem's. */
static void compare_rows(const cfg *c, const whole *w, const void *out,
                         const void *lse, int64_t rows, int64_t off,
                         int64_t local, int64_t len, int bitwise)
{
    const double tol = c->dtype == SDPA_FLOAT32 ? 2e-5 : 1e-12;
    int reported = 0;
    for (int64_t b = 0; b < c->n; b++)
        for (int64_t h = 0; h < c->hq; h++)
            for (int64_t i = 0; i < len; i++) {
                size_t mine = (size_t)((b * c->hq + h) * rows + local + i);
                size_t ref = (size_t)((b * c->hq + h) * c->tq + off + i);
                double l0 = get(lse, c->dtype, mine);
                double l1 = get(w->lse, c->dtype, ref);
                int ok = bitwise ? memcmp(&l0, &l1, sizeof l0) == 0
                                 : (l0 == l1 ||
                                    fabs(l0 - l1) <= tol * (1 + fabs(l1)));
                for (int64_t d = 0; d < c->dv; d++) {
                    double o0 =
                        get(out, c->dtype, mine * (size_t)c->dv + (size_t)d);
                    double o1 =
                        get(w->out, c->dtype, ref * (size_t)c->dv + (size_t)d);
                    ok &= bitwise ? memcmp(&o0, &o1, sizeof o0) == 0
                                  : fabs(o0 - o1) <= tol;
                }
                if (!ok && reported++ < 3)
                    CHECK(0,
                          "%s: b %lld h %lld row %lld: lse %.17g, reference "
                          "%.17g%s",
                          c->name, (long long)b, (long long)h,
                          (long long)(off + i), l0, l1,
                          bitwise ? " (bitwise)" : "");
            }
}

/* ---- Prefill --------------------------------------------------------------
 */

/* run_prefill's expected status: whatever sdpa_forward gives the whole. */
enum { AS_REFERENCE = -1 };

static void run_prefill(const cfg *c, uint64_t seed, sdpa_ctx *ctx, int expect)
{
    g_cases++;
    whole w;
    whole_make(&w, c, seed);
    size_t es = esize(c->dtype);
    sdpa_forward_args ref = whole_args(&w, c);
    sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, c->policy);
    int ref_status = sdpa_forward(ctx, &ref);
    if (expect == AS_REFERENCE)
        expect = ref_status;
    CHECK(ref_status == expect, "%s: reference gave %s, expected %s", c->name,
          sdpa_status_string(ref_status), sdpa_status_string(expect));

    int64_t off[2], len[2];
    if (c->layout == SDPA_MPI_LAYOUT_BALANCED) {
        CHECK(sdpa_mpi_shard(c->layout, c->tq, g_rank, g_ranks, off, len) ==
                  SDPA_OK,
              "shard");
    } else {
        int64_t sizes[8];
        split(c->tq, c->uneven, seed + 7, sizes);
        off[0] = 0;
        for (int p = 0; p < g_rank; p++)
            off[0] += sizes[p];
        len[0] = sizes[g_rank];
        off[1] = off[0] + len[0];
        len[1] = 0;
    }
    int segs = len[1] > 0 ? 2 : 1;
    int64_t rows = len[0] + len[1];
    void *q = gather_rows(w.q, es, c->n, c->hq, c->tq, c->dk, off, len, segs);
    void *k = gather_rows(w.k, es, c->n, c->hkv, c->tk, c->dk, off, len, segs);
    void *v = gather_rows(w.v, es, c->n, c->hkv, c->tk, c->dv, off, len, segs);
    uint8_t *mask =
        w.mask ? gather_rows(w.mask, 1, c->n, 1, c->tq, c->tk, off, len, segs)
               : NULL;
    void *bias =
        w.bias ? gather_rows(w.bias, es, 1, c->hq, c->tq, c->tk, off, len, segs)
               : NULL;
    size_t out_bytes = (size_t)(c->n * c->hq * rows * c->dv) * es;
    size_t lse_bytes = (size_t)(c->n * c->hq * rows) * es;
    void *out = malloc(out_bytes), *lse = malloc(lse_bytes);
    memset(out, 0xA5, out_bytes);
    memset(lse, 0xA5, lse_bytes);

    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.causal = c->causal;
    a.softcap = c->softcap;
    a.kv_lens = c->kv_lens ? w.kv_lens : NULL;
    a.q = bhtd(q, c->n, c->hq, rows, c->dk);
    /* K and V as heads-interleaved views of a [N, rows, H, D] copy would
     * need another copy; strided views are tested through q's rows: */
    a.k = bhtd(k, c->n, c->hkv, rows, c->dk);
    a.v = bhtd(v, c->n, c->hkv, rows, c->dv);
    if (mask)
        a.mask = (sdpa_tensor){
            mask, {c->n, 1, rows, c->tk}, {rows * c->tk, 0, c->tk, 1}};
    if (bias)
        a.bias = (sdpa_tensor){
            bias, {1, c->hq, rows, c->tk}, {0, rows * c->tk, c->tk, 1}};
    a.out = bhtd(out, c->n, c->hq, rows, c->dv);
    a.lse = bhtd(lse, c->n, c->hq, rows, 1);
    sdpa_mpi_stats stats = {.struct_size = sizeof stats};
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.layout = c->layout;
    m.attn = &a;
    m.stats = &stats;
    int status = sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == expect, "%s: sdpa_mpi_prefill gave %s (%s), expected %s",
          c->name, sdpa_status_string(status), sdpa_mpi_last_error(),
          sdpa_status_string(expect));
    int64_t policy = -1;
    sdpa_ctx_get_int(ctx, SDPA_OPT_EMPTY_ROWS, &policy);
    CHECK(policy == c->policy, "%s: the context's policy was not restored",
          c->name);
    if (status == SDPA_OK && expect == SDPA_OK) {
        for (int s = 0; s < segs; s++)
            compare_rows(c, &w, out, lse, rows, off[s], s ? len[0] : 0, len[s],
                         g_ranks == 1 && segs == 1);
        CHECK(g_ranks == 1 || stats.bytes_sent > 0, "%s: no bytes sent",
              c->name);
    } else if (status != SDPA_OK) {
        /* out is unspecified after an error found during the computation
         * (sdpa_mpi.h); lse is written only on success. */
        unsigned char *o = out, *l = lse;
        int touched = 0;
        for (size_t i = 0; status != SDPA_ERR_NONFINITE && i < out_bytes; i++)
            touched |= o[i] != 0xA5;
        for (size_t i = 0; i < lse_bytes; i++)
            touched |= l[i] != 0xA5;
        CHECK(!touched, "%s: outputs written after an error", c->name);
    }
    free(q);
    free(k);
    free(v);
    free(mask);
    free(bias);
    free(out);
    free(lse);
    whole_free(&w);
}

/* ---- Decode ---------------------------------------------------------------
 */

static void run_decode(const cfg *c, uint64_t seed, sdpa_ctx *ctx, int expect)
{
    g_cases++;
    whole w;
    whole_make(&w, c, seed);
    size_t es = esize(c->dtype);
    sdpa_forward_args ref = whole_args(&w, c);
    sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, c->policy);
    int ref_status = sdpa_forward(ctx, &ref);
    CHECK(ref_status == expect, "%s: reference gave %s", c->name,
          sdpa_status_string(ref_status));
    int64_t sizes[8], first = 0;
    split(c->tk, c->uneven, seed + 11, sizes);
    for (int p = 0; p < g_rank; p++)
        first += sizes[p];
    int64_t keys = sizes[g_rank];
    /* This rank's keys: views into the whole cache (strided: rows of the
     * whole buffer), the mask's and bias's columns likewise. */
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->dtype;
    a.causal = c->causal;
    a.softcap = c->softcap;
    a.kv_lens = c->kv_lens ? w.kv_lens : NULL;
    a.q = bhtd(w.q, c->n, c->hq, c->tq, c->dk);
    a.k = bhtd((char *)w.k + (size_t)(first * c->dk) * es, c->n, c->hkv, keys,
               c->dk);
    a.k.stride[0] = c->hkv * c->tk * c->dk;
    a.k.stride[1] = c->tk * c->dk;
    a.v = bhtd((char *)w.v + (size_t)(first * c->dv) * es, c->n, c->hkv, keys,
               c->dv);
    a.v.stride[0] = c->hkv * c->tk * c->dv;
    a.v.stride[1] = c->tk * c->dv;
    if (w.mask)
        a.mask = (sdpa_tensor){w.mask + first,
                               {c->n, 1, c->tq, keys},
                               {c->tq * c->tk, 0, c->tk, 1}};
    if (w.bias)
        a.bias = (sdpa_tensor){(char *)w.bias + (size_t)first * es,
                               {1, c->hq, c->tq, keys},
                               {0, c->tq * c->tk, c->tk, 1}};
    size_t out_bytes = (size_t)(c->n * c->hq * c->tq * c->dv) * es;
    size_t lse_bytes = (size_t)(c->n * c->hq * c->tq) * es;
    void *out = malloc(out_bytes), *lse = malloc(lse_bytes);
    memset(out, 0xA5, out_bytes);
    memset(lse, 0xA5, lse_bytes);
    a.out = bhtd(out, c->n, c->hq, c->tq, c->dv);
    a.lse = bhtd(lse, c->n, c->hq, c->tq, 1);
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.attn = &a;
    int status = sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == expect, "%s: sdpa_mpi_decode gave %s (%s), expected %s",
          c->name, sdpa_status_string(status), sdpa_mpi_last_error(),
          sdpa_status_string(expect));
    if (status == SDPA_OK && expect == SDPA_OK) {
        compare_rows(c, &w, out, lse, c->tq, 0, 0, c->tq, g_ranks == 1);
        /* Every rank has the same bits as rank 0. */
        void *r0 = malloc(out_bytes + lse_bytes);
        if (g_rank == 0) {
            memcpy(r0, out, out_bytes);
            memcpy((char *)r0 + out_bytes, lse, lse_bytes);
        }
        MPI_Bcast(r0, (int)(out_bytes + lse_bytes), MPI_BYTE, 0,
                  MPI_COMM_WORLD);
        CHECK(memcmp(r0, out, out_bytes) == 0 &&
                  memcmp((char *)r0 + out_bytes, lse, lse_bytes) == 0,
              "%s: the ranks' results differ", c->name);
        free(r0);
    } else if (status != SDPA_OK) {
        unsigned char *o = out;
        int touched = 0;
        for (size_t i = 0; i < out_bytes; i++)
            touched |= o[i] != 0xA5;
        CHECK(!touched, "%s: outputs written after an error", c->name);
    }
    free(out);
    free(lse);
    whole_free(&w);
}

/* ---- Errors ---------------------------------------------------------------
 */

/* kv_lens that disagree between ranks are refused on every rank with the
 * values in the message, whatever they are: rank 0's {898, 435, 0} and
 * rank 1's {899, 435, 189225} have the same 64-bit FNV-1a hash, which is
 * all that 1.1 compared. Decode: one query row per item, the keys split. */
static void run_kv_lens_disagree(sdpa_ctx *ctx)
{
    g_cases++;
    enum { N = 3, D = 4 };
    const int64_t total = 189226;
    const int64_t mine = (total + g_ranks - 1) / g_ranks;
    float q[N * D], out[N * D];
    float *k = calloc((size_t)(N * mine * D), sizeof *k);
    float *v = calloc((size_t)(N * mine * D), sizeof *v);
    if (!k || !v)
        MPI_Abort(MPI_COMM_WORLD, 3);
    for (int i = 0; i < N * D; i++)
        q[i] = 0.25f * (float)(i % 5);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.q = bhtd(q, N, 1, 1, D);
    a.k = bhtd(k, N, 1, mine, D);
    a.v = bhtd(v, N, 1, mine, D);
    a.out = bhtd(out, N, 1, 1, D);
    static const int64_t lens[2][N] = {{898, 435, 0}, {899, 435, 189225}};
    a.kv_lens = lens[g_rank % 2];
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.attn = &a;
    sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    memset(out, 0xA5, sizeof out);
    int status = sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m);
    if (g_ranks > 1) {
        CHECK(status == SDPA_ERR_BAD_KV_LEN, "disagreeing kv_lens: %s",
              sdpa_status_string(status));
        CHECK(strstr(sdpa_mpi_last_error(), "kv_lens[0]") &&
                  strstr(sdpa_mpi_last_error(), "from 898 to 899"),
              "message '%s'", sdpa_mpi_last_error());
        int touched = 0;
        for (size_t i = 0; i < sizeof out; i++)
            touched |= ((unsigned char *)out)[i] != 0xA5;
        CHECK(!touched, "disagreeing kv_lens: out written");
    }
    /* the same values everywhere: accepted */
    a.kv_lens = lens[1];
    status = sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == SDPA_OK, "agreeing kv_lens: %s (%s)",
          sdpa_status_string(status), sdpa_mpi_last_error());
    free(k);
    free(v);
}

static void run_errors(sdpa_ctx *ctx)
{
    g_cases++;
    cfg c = {.name = "errors",
             .dtype = SDPA_FLOAT32,
             .n = 1,
             .hq = 2,
             .hkv = 1,
             .tq = 4 * g_ranks,
             .tk = 4 * g_ranks,
             .dk = 4,
             .dv = 3,
             .layout = SDPA_MPI_LAYOUT_CONTIGUOUS};
    whole w;
    whole_make(&w, &c, 5);
    float out[2 * 4 * 3];
    float weights[2 * 4 * 64];
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.q = bhtd((float *)w.q + 4 * 4 * g_rank, 1, 2, 4, 4);
    a.q.stride[1] = c.tq * 4;
    a.k = bhtd((float *)w.k + 4 * 4 * g_rank, 1, 1, 4, 4);
    a.v = bhtd((float *)w.v + 4 * 3 * g_rank, 1, 1, 4, 3);
    a.out = bhtd(out, 1, 2, 4, 3);
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.layout = SDPA_MPI_LAYOUT_CONTIGUOUS;
    m.attn = &a;
    memset(out, 0xA5, sizeof out);
    sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ERROR);
    CHECK(sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m) == SDPA_OK, "plain: %s",
          sdpa_mpi_last_error());
    /* The last rank alone asks for the weights: every rank refuses. */
    sdpa_forward_args bad = a;
    if (g_rank == g_ranks - 1)
        bad.weights = bhtd(weights, 1, 2, 4, 4 * g_ranks);
    m.attn = &bad;
    memset(out, 0xA5, sizeof out);
    int status = sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == SDPA_ERR_UNSUPPORTED, "weights: %s",
          sdpa_status_string(status));
    CHECK(strstr(sdpa_mpi_last_error(), "weights") != NULL, "message '%s'",
          sdpa_mpi_last_error());
    CHECK(((unsigned char *)out)[0] == 0xA5, "weights: out written");
    /* 1.1's storage types and paging, 1.2's dropout and ragged batches
     * stay local to sdpa_forward: the last rank alone sets one, every rank
     * refuses, out untouched. */
    const struct {
        const char *what;
        int status;
    } local_only[4] = {{"kv_dtype", SDPA_ERR_BAD_DTYPE},
                       {"block_table", SDPA_ERR_UNSUPPORTED},
                       {"dropout_p", SDPA_ERR_UNSUPPORTED},
                       {"seqs", SDPA_ERR_UNSUPPORTED}};
    int32_t table[1] = {0};
    int64_t offsets[2] = {0, 4};
    for (int which = 0; which < 4; which++) {
        bad = a;
        if (g_rank == g_ranks - 1 && which == 0)
            bad.kv_dtype = SDPA_FLOAT16;
        if (g_rank == g_ranks - 1 && which == 1) {
            bad.block_table = table;
            bad.pages_per_seq = 1;
        }
        /* dropout's mask and ragged batches follow positions within a
         * call: refused across ranks */
        if (g_rank == g_ranks - 1 && which == 2)
            bad.dropout_p = 0.25;
        if (g_rank == g_ranks - 1 && which == 3) {
            bad.seqs = 1;
            bad.q_offsets = offsets;
        }
        m.attn = &bad;
        memset(out, 0xA5, sizeof out);
        status = sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m);
        CHECK(status == local_only[which].status, "%s: %s",
              local_only[which].what, sdpa_status_string(status));
        CHECK(((unsigned char *)out)[0] == 0xA5, "%s: out written",
              local_only[which].what);
    }
    /* Found on one rank, before the computation: every rank fails and no
     * out is written. The last rank's bias (one value, broadcast) lies in
     * its out; rank 0's mask spans more than the address space. */
    float spare = 0;
    uint8_t allow[4 * 4 * 4] = {0};
    const struct {
        const char *what;
        int status;
    } early[2] = {{"bias over out", SDPA_ERR_OVERLAP},
                  {"mask extent", SDPA_ERR_OVERFLOW}};
    for (int e = 0; e < 2; e++) {
        bad = a;
        if (e == 0)
            bad.bias = (sdpa_tensor){g_rank == g_ranks - 1 ? (void *)(out + 5)
                                                           : (void *)&spare,
                                     {1, 1, 1, 1},
                                     {0, 0, 0, 0}};
        else
            bad.mask =
                (sdpa_tensor){allow,
                              {1, 1, 4, 4 * g_ranks},
                              {0, 0, g_rank == 0 ? INT64_MAX : 4 * g_ranks, 1}};
        m.attn = &bad;
        memset(out, 0xA5, sizeof out);
        status = sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m);
        CHECK(status == early[e].status, "%s: %s (%s)", early[e].what,
              sdpa_status_string(status), sdpa_mpi_last_error());
        int touched = 0;
        for (size_t i = 0; i < sizeof out; i++)
            touched |= ((unsigned char *)out)[i] != 0xA5;
        CHECK(!touched, "%s: out written", early[e].what);
    }
    /* Rank 0 alone has another Dv: a shape mismatch on every rank. */
    bad = a;
    if (g_rank == 0 && g_ranks > 1) {
        bad.v.shape[3] = 2;
        bad.out.shape[3] = 2;
    }
    status = sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == (g_ranks > 1 ? SDPA_ERR_SHAPE_MISMATCH : SDPA_OK),
          "Dv: %s: %s", sdpa_status_string(status), sdpa_mpi_last_error());
    /* A bad layout and a balanced layout the rows do not fit. */
    m.attn = &a;
    m.layout = 9;
    CHECK(sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m) ==
              SDPA_ERR_BAD_OPTION_VALUE,
          "layout 9");
    m.layout = SDPA_MPI_LAYOUT_BALANCED;
    bad = a;
    if (g_rank == 0) { /* fewer rows than the stripes give it */
        bad.q.shape[2] = bad.k.shape[2] = bad.v.shape[2] = 1;
        bad.out.shape[2] = 1;
    }
    m.attn = &bad;
    status = sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == (g_ranks > 1 ? SDPA_ERR_SHAPE_MISMATCH : SDPA_OK),
          "balanced rows: %s", sdpa_status_string(status));
    /* Decode: a layout is refused; kv_lens beyond all keys. */
    m.layout = 0;
    bad = a;
    int64_t lens[1] = {4 * g_ranks + 1};
    bad.kv_lens = lens;
    m.attn = &bad;
    status = sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == SDPA_ERR_BAD_KV_LEN, "decode kv_lens: %s",
          sdpa_status_string(status));
    m.layout = SDPA_MPI_LAYOUT_CONTIGUOUS;
    status = sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m);
    CHECK(status == SDPA_ERR_BAD_OPTION_VALUE, "decode layout: %s",
          sdpa_status_string(status));
    m.layout = 0;
    m.attn = NULL;
    CHECK(sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m) == SDPA_ERR_NULL_POINTER,
          "NULL attn");
    /* sdpa_mpi_shard. */
    int64_t o[2], l[2];
    CHECK(sdpa_mpi_shard(SDPA_MPI_LAYOUT_BALANCED, 10, 1, 2, o, l) == SDPA_OK &&
              o[0] == 3 && l[0] == 3 && o[1] == 6 && l[1] == 2,
          "shard 10/2 rank 1: %lld+%lld, %lld+%lld", (long long)o[0],
          (long long)l[0], (long long)o[1], (long long)l[1]);
    CHECK(sdpa_mpi_shard(SDPA_MPI_LAYOUT_BALANCED, 1, 0, 2, o, l) ==
              SDPA_ERR_BAD_DIM,
          "shard: too few tokens");
    CHECK(sdpa_mpi_shard(7, 10, 0, 2, o, l) == SDPA_ERR_BAD_OPTION_VALUE,
          "shard: layout");
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
    const cfg prefill[] = {
        {"plain f32", F, NONE, CONT, 2, 2, 2, 37, 37, 8, 8, 0, 0, 0, 0, ERR, 0, 0},
        {"top-left uneven f64", D, TL, CONT, 1, 4, 2, 41, 41, 8, 5, 0, 0, 0, 0, ERR, 1, 0},
        {"top-left balanced GQA", F, TL, BAL, 2, 4, 1, 45, 45, 16, 16, 0, 0, 0, 0, ERR, 0, 0},
        {"bottom-right kv_lens", D, BR, CONT, 3, 2, 1, 30, 30, 4, 6, 1, 0, 0, 0, ZERO, 1, 0},
        {"bottom-right kv_lens balanced", F, BR, BAL, 2, 2, 2, 33, 33, 8, 8, 1, 0, 0, 0, ZERO, 0, 0},
        {"top-left kv_lens uneven", D, TL, CONT, 3, 3, 3, 29, 29, 6, 6, 2, 0, 0, 0, ZERO, 1, 0},
        {"none kv_lens balanced", D, NONE, BAL, 2, 2, 1, 26, 26, 6, 6, 1, 0, 0, 0, ERR, 0, 0},
        {"mask bias softcap", F, TL, CONT, 2, 2, 1, 31, 31, 8, 8, 0, 1, 1, 3.0, ZERO, 1, 0},
        {"mask balanced BR", D, BR, BAL, 2, 4, 2, 40, 40, 8, 4, 0, 1, 0, 0, ZERO, 0, 0},
        {"long rows (pieces)", F, TL, CONT, 1, 1, 1, 5000, 5000, 16, 16, 0, 0, 0, 0, ERR, 0, 0},
        {"long rows balanced", F, BR, BAL, 1, 2, 1, 4500, 4500, 16, 16, 0, 0, 0, 0, ERR, 0, 0},
        {"long rows kv_lens f64", D, NONE, CONT, 2, 2, 1, 3000, 3000, 8, 8, 1, 0, 0, 0, ZERO, 1, 0},
    };
    const cfg decode[] = {
        {"decode f32", F, NONE, 0, 1, 4, 4, 1, 57, 16, 16, 0, 0, 0, 0, ERR, 0, 0},
        {"decode GQA BR kv_lens", D, BR, 0, 3, 8, 2, 3, 61, 8, 8, 1, 0, 0, 0, ZERO, 1, 0},
        {"decode TL uneven", F, TL, 0, 2, 2, 1, 2, 40, 8, 4, 0, 0, 0, 0, ERR, 1, 0},
        {"decode mask bias softcap", D, BR, 0, 2, 2, 2, 2, 50, 4, 4, 1, 1, 1, 2.0, ZERO, 1, 0},
        {"decode kv_lens zeros", F, BR, 0, 3, 2, 1, 1, 33, 8, 8, 2, 0, 0, 0, ZERO, 0, 0},
        {"decode BR shards shorter than Tq", F, BR, 0, 1, 2, 1, 4, 9, 4, 4, 0, 0, 0, 0, ERR, 1, 0},
    };
    /* clang-format on */
    for (size_t i = 0; i < sizeof prefill / sizeof prefill[0]; i++)
        run_prefill(&prefill[i], 100 + i, ctx, SDPA_OK);
    for (size_t i = 0; i < sizeof decode / sizeof decode[0]; i++)
        run_decode(&decode[i], 200 + i, ctx, SDPA_OK);
    /* Empty rows under the error policy: every rank fails, named. */
    cfg empty = prefill[3];
    empty.name = "empty rows, error policy";
    empty.policy = ERR;
    empty.kv_lens = 2;
    run_prefill(&empty, 300, ctx, SDPA_ERR_FULLY_MASKED_ROW);
    cfg dempty = decode[4];
    dempty.name = "decode empty rows, error policy";
    dempty.policy = ERR;
    run_decode(&dempty, 301, ctx, SDPA_ERR_FULLY_MASKED_ROW);
    /* Errors found during the computation: SDPA_ERR_NONFINITE on every
     * rank, as sdpa_forward gives it; a row whose logits are all -inf is a
     * zero row under the zero-row policy. */
    cfg nan = prefill[2];
    nan.name = "NaN in q";
    nan.poison = 1;
    run_prefill(&nan, 302, ctx, SDPA_ERR_NONFINITE);
    cfg ninf = prefill[1];
    ninf.name = "-inf logits, error policy";
    ninf.poison = 2;
    run_prefill(&ninf, 303, ctx, SDPA_ERR_NONFINITE);
    ninf.name = "-inf logits, zero rows";
    ninf.policy = ZERO;
    run_prefill(&ninf, 303, ctx, SDPA_OK);
    /* Rows without an allowed key under the error policy are found before
     * the computation, as sdpa_forward finds them: random masks (1 key in
     * 5 forbidden, so the first rows under top-left causality are often
     * empty), and a row whose bias is -inf for every key. */
    int masked_rows = 0;
    for (int i = 0; i < 8; i++) {
        cfg masked = prefill[i % 2 ? 8 : 7];
        masked.name = "mask, error policy";
        masked.policy = ERR;
        masked.causal = i % 4 < 2 ? TL : BR;
        masked.kv_lens = i >= 4;
        masked.bias = 0;
        masked.softcap = 0;
        whole probe;
        whole_make(&probe, &masked, 400 + (uint64_t)i);
        sdpa_forward_args whole_call = whole_args(&probe, &masked);
        sdpa_ctx_set_int(ctx, SDPA_OPT_EMPTY_ROWS, ERR);
        masked_rows +=
            sdpa_forward(ctx, &whole_call) == SDPA_ERR_FULLY_MASKED_ROW;
        whole_free(&probe);
        run_prefill(&masked, 400 + (uint64_t)i, ctx, AS_REFERENCE);
    }
    CHECK(masked_rows > 0 && masked_rows < 8,
          "random masks: %d of 8 calls had an empty row; want some of both",
          masked_rows);
    cfg biased = prefill[7];
    biased.name = "-inf bias row, error policy";
    biased.policy = ERR;
    biased.mask = 0;
    biased.poison = 3;
    run_prefill(&biased, 305, ctx, SDPA_ERR_FULLY_MASKED_ROW);
    biased.name = "-inf bias row, zero rows";
    biased.policy = ZERO;
    run_prefill(&biased, 305, ctx, SDPA_OK);
    cfg dnan = decode[0];
    dnan.name = "decode NaN in q";
    dnan.poison = 1;
    run_decode(&dnan, 304, ctx, SDPA_ERR_NONFINITE);
    run_errors(ctx);
    run_kv_lens_disagree(ctx);

    int total = 0;
    MPI_Allreduce(&g_failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (g_rank == 0)
        printf("sdpa_mpi: %d cases on %d ranks: %s (%d failures)\n", g_cases,
               g_ranks, total ? "FAILED" : "passed", total);
    sdpa_ctx_destroy(ctx);
    MPI_Finalize();
    return total ? 1 : 0;
}
