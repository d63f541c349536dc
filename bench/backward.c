/*
 * sdpa-bench --backward: sdpa_backward against what it is judged by, in one
 * process, interleaved as the forward table is (main.c).
 *
 * For each selected shape (default A, Ab, Ad, B, D, E, I) and each --threads T:
 *   sdpa backward  sdpa_backward: dq, dk, dv from q, k, v, out, dout, lse
 *   sdpa fwd+lse   sdpa_forward (path auto) with the lse output, the call
 *                  whose out and lse the backward reads
 *   five gemms     the five CBLAS gemms of a materialised backward
 *                  (baseline.c), full square, per (batch, head)
 * setup   each once, backward first: VmHWM is reset before each, so its
 *         peak RSS growth is its own, and the libsdpa contexts allocate
 *         through a counting allocator, so the scratch a call grew its
 *         context by is known (there is no sdpa_backward_workspace);
 *         the gradients are checked against two identities.
 * timing  `reps` rounds, each running the three once in an order rotated
 *         per round, so drifts and bursts of a shared machine hit all alike.
 * report  medians, backward / forward and backward / five gemms (wall and
 *         process CPU time), scratch against inputs + outputs, and shape
 *         E's bound: the backward runs within inputs + outputs + 16 MiB.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cblas.h>

#include "bench.h"

/* A shape with a ref (Ab, Ad: A with something) also runs the ref shape's
 * backward and forward in its own rounds, as the forward table does, so
 * that its ratios to A are measured side by side. */
enum {
    BWD_BACKWARD = 0,
    BWD_FORWARD,
    BWD_GEMMS,
    BWD_COUNT, /* the variants of every shape, its table rows */
    BWD_REF_BACKWARD = BWD_COUNT,
    BWD_REF_FORWARD,
    BWD_ALL
};

static const char *const bwd_names[BWD_ALL] = {"sdpa backward", "sdpa fwd+lse",
                                               "five gemms", "ref backward",
                                               "ref fwd+lse"};

/* The backward's targets (docs/PERFORMANCE.md): at most 3x the forward on
 * one core for A and D, and E within inputs + outputs + 16 MiB of scratch. */
static const double FWD_RATIO_TARGET = 3.0; /* A and D, at one core */
static const char *const FWD_RATIO_SHAPES[] = {"A", "D"};
static const double MEM_EXTRA_BOUND = 16.0 * BENCH_MIB; /* shape E */
static const char *const MEM_BOUND_SHAPES[] = {"E"};

/* Each of the gemms' two score blocks; together the forward table's 1 GiB
 * (E: 8192-row blocks, so its bound is two passes per head). */
static const size_t GEMMS_BLOCK_BUDGET = (size_t)512 << 20;

static const char DEFAULT_SHAPES[] = "A,Ab,Ad,B,D,E,I";

/* ---- tensors ------------------------------------------------------------- */

/* One shape's tensors: bench_data's q, k, v and forward call, the forward's
 * out (d.out_lib) and lse that the backward reads, dout, the gradients,
 * the timed forward's own outputs and the five gemms' outputs. */
typedef struct bwd_data {
    bench_data d;
    void *lse, *dout, *dq, *dk, *dv;
    void *dout_lib; /* dout in io_type for the library (NULL: dout) */
    int io_type;    /* q, out, dout and dq: dtype or a half type */
    int kv_type;    /* k, v, dk and dv */
    void *out_fwd, *lse_fwd;
    void *dq_bare, *dk_bare, *dv_bare;
    size_t nq, nk, nv, nlse; /* element counts (out and dout: d.out_count) */
    sdpa_forward_args fwd;   /* the timed forward: out_fwd, lse_fwd */
    sdpa_backward_args bwd;
    double io_bwd, io_fwd, io_gemms; /* bytes of inputs + outputs */
    struct bwd_data *ref;            /* the ref shape's, or NULL */
} bwd_data;

static void bwd_data_free(bwd_data *b)
{
    void *bufs[] = {b->lse,     b->dout,    b->dq,      b->dk,
                    b->dv,      b->out_fwd, b->lse_fwd, b->dq_bare,
                    b->dk_bare, b->dv_bare, b->dout_lib};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
    bench_data_free(&b->d);
    if (b->ref) {
        bwd_data_free(b->ref);
        free(b->ref);
    }
    memset(b, 0, sizeof *b);
}

sdpa_backward_args bench_backward_of(const sdpa_forward_args *a)
{
    sdpa_backward_args g = SDPA_BACKWARD_ARGS_INIT;
    g.dtype = a->dtype;
    g.kv_dtype = a->kv_dtype;
    g.bias_dtype = a->bias_dtype;
    g.causal = a->causal;
    g.flags = a->flags;
    g.scale = a->scale;
    g.softcap = a->softcap;
    g.kv_lens = a->kv_lens;
    g.q = a->q;
    g.k = a->k;
    g.v = a->v;
    g.mask = a->mask;
    g.bias = a->bias;
    g.window_left = a->window_left;
    g.window_right = a->window_right;
    g.alibi_slopes = a->alibi_slopes;
    g.sinks = a->sinks;
    g.dropout_p = a->dropout_p;
    g.dropout_seed = a->dropout_seed;
    g.dropout_offset = a->dropout_offset;
    g.out = a->out;
    g.lse = a->lse;
    g.seqs = a->seqs;
    g.q_offsets = a->q_offsets;
    g.kv_offsets = a->kv_offsets;
    return g;
}

/* Inputs, buffers and the two calls; then the forward whose out and lse the
 * backward reads, on a context of its own. 0 on success, else the note. */
static int bwd_data_init(bwd_data *b, const bench_shape *s, uint64_t seed,
                         char *note, size_t note_size)
{
    memset(b, 0, sizeof *b);
    if (bench_data_init(&b->d, s, seed)) {
        snprintf(note, note_size, "n/a (out of memory for the inputs)");
        return -1;
    }
    /* the storage shapes (Ab: bfloat16) hand the backward q, k, v, out and
     * dout in their storage types and take the gradients in io_type; lse
     * stays in the compute type, and the five gemms run in float32 on the
     * same (exactly representable) values */
    const size_t el = bench_elem_size(s->dtype);
    b->io_type = s->io_type ? s->io_type : s->dtype;
    const size_t io_el = bench_type_size(b->io_type);
    b->kv_type = s->kv_type ? s->kv_type : s->dtype;
    const size_t kv_el = bench_type_size(b->kv_type);
    const size_t no = b->d.out_count;
    b->nq = (size_t)(s->n * s->hq * s->tq * s->dk);
    b->nk = (size_t)(s->n * s->hkv * s->tk * s->dk);
    b->nv = (size_t)(s->n * s->hkv * s->tk * s->dv);
    b->nlse = (size_t)(s->n * s->hq * s->tq);
    void **bufs[] = {&b->lse,     &b->dout,    &b->dq,      &b->dk,
                     &b->dv,      &b->out_fwd, &b->lse_fwd, &b->dq_bare,
                     &b->dk_bare, &b->dv_bare};
    const size_t counts[] = {b->nlse, no,      b->nq, b->nk, b->nv,
                             no,      b->nlse, b->nq, b->nk, b->nv};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        /* zeroed, so resident before any measurement; the library's
         * gradients and out in io_type take at most el per element */
        if (!(*bufs[i] = bench_alloc(counts[i] * el))) {
            snprintf(note, note_size, "n/a (out of memory for the tensors)");
            bwd_data_free(b);
            return -1;
        }
    /* dout from a seed of its own: not correlated with q, k, v */
    bench_fill_random(b->dout, no, s->dtype, seed ^ 0x5DEECE66Dull);
    int failed = 0;
    b->dout_lib = s->dtype == SDPA_FLOAT32
                      ? bench_typed_copy(b->dout, no, b->io_type, &failed)
                      : NULL;
    if (failed) {
        snprintf(note, note_size, "n/a (out of memory for the tensors)");
        bwd_data_free(b);
        return -1;
    }

    const sdpa_forward_args *a = &b->d.args;
    sdpa_tensor lse = sdpa_tensor_bhtd(b->lse, s->n, s->hq, s->tq, 1);
    b->fwd = *a;
    b->fwd.out = sdpa_tensor_bhtd(b->out_fwd, s->n, s->hq, s->tq, s->dv);
    b->fwd.lse = sdpa_tensor_bhtd(b->lse_fwd, s->n, s->hq, s->tq, 1);

    sdpa_backward_args g = bench_backward_of(a);
    g.lse = lse;
    g.dout = sdpa_tensor_bhtd(b->dout_lib ? b->dout_lib : b->dout, s->n, s->hq,
                              s->tq, s->dv);
    g.dq = sdpa_tensor_bhtd(b->dq, s->n, s->hq, s->tq, s->dk);
    g.dk = sdpa_tensor_bhtd(b->dk, s->n, s->hkv, s->tk, s->dk);
    g.dv = sdpa_tensor_bhtd(b->dv, s->n, s->hkv, s->tk, s->dv);
    b->bwd = g;

    /* q, k, v, out, dout, lse in; dq, dk, dv out */
    b->io_bwd = (double)((b->nq + no) * 2 * io_el +
                         (b->nk + b->nv) * 2 * kv_el + b->nlse * el);
    /* the gemms: q, k, v, dout in and dq, dk, dv out, in the compute type */
    b->io_gemms = (double)((b->nq + b->nk + b->nv) * 2 + no) * (double)el;
    b->io_fwd =
        (double)((b->nq + no) * io_el + (b->nk + b->nv) * kv_el + b->nlse * el);

    sdpa_forward_args ref = *a;
    ref.lse = lse;
    sdpa_ctx *ctx = NULL;
    int st = sdpa_ctx_create(&ctx);
    if (st == SDPA_OK)
        st = sdpa_forward(ctx, &ref);
    if (st != SDPA_OK) {
        snprintf(note, note_size, "ERROR sdpa_forward (for out, lse): %s: %s",
                 sdpa_status_string(st), sdpa_ctx_last_error(ctx));
        sdpa_ctx_destroy(ctx);
        bwd_data_free(b);
        return -1;
    }
    sdpa_ctx_destroy(ctx);
    return 0;
}

/* ---- checks -------------------------------------------------------------- */

/* Element i of a buffer of any type the table hands over. */
static double load(const void *base, size_t i, int type)
{
    switch (type) {
    case SDPA_FLOAT64:
        return ((const double *)base)[i];
    case SDPA_FLOAT16:
    case SDPA_BFLOAT16:
        return (double)bench_half_value(((const uint16_t *)base)[i], type);
    default:
        return (double)((const float *)base)[i];
    }
}

/* max |a_i - b_i| over n elements of `type`; +inf on a NaN. */
static double max_abs_diff(const void *a, const void *b, size_t n, int type)
{
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        double diff = fabs(load(a, i, type) - load(b, i, type));
        if (!(diff <= worst))
            worst = isnan(diff) ? INFINITY : diff;
    }
    return worst;
}

/* The identities' limit for gradients stored in `type`: each value rounded
 * once moves a column's sum by at most half an ulp of its magnitude sum
 * (Σ_j |dv_j| <= Σ_i |dout_i|), on top of the compute type's limit. */
static double gradient_tolerance(int dtype, int type)
{
    return bench_tolerance(dtype) + (type == SDPA_BFLOAT16  ? 0x1p-8
                                     : type == SDPA_FLOAT16 ? 0x1p-10
                                                            : 0.0);
}

/* The gradients against two identities that hold whatever the inputs when
 * every row has a key and there is no soft-cap and no sink: Σ_j P_ij = 1
 * gives Σ_j dv_j = Σ_i dout_i (over the group's query heads), and
 * Σ_j dS_ij = <dout_i, out_i> − D_i = 0 gives Σ_j dk_j = 0. Per (batch, KV
 * head, column): |error| / Σ|terms|, the largest; +inf on a NaN (the
 * outputs start as NaN, so an unwritten one fails); -1 when the identities
 * do not hold for the call. Cheap next to the call, and a wrong kernel or
 * tile edge cannot pass it; tests/test_backward.c checks every value. */
static double check_identities(const bwd_data *b)
{
    const bench_shape *s = b->d.shape;
    const sdpa_forward_args *a = &b->d.args;
    /* Σ_j dV_j = Σ_i dO_i needs Σ_j P_ij = 1: no sink, no dropout */
    if (a->softcap > 0 || a->sinks || a->dropout_p > 0)
        return -1.0;
    for (int64_t n = 0; n < s->n; n++)
        for (int64_t i = 0; i < s->tq; i++) {
            int64_t lo, hi;
            bench_shape_allowed(s, n, i, &lo, &hi);
            if (hi <= lo)
                return -1.0; /* an empty row: Σ_j P_ij = 0 there */
        }
    const int64_t g = s->hq / s->hkv;
    double worst = 0.0;
    for (int64_t n = 0; n < s->n; n++)
        for (int64_t kh = 0; kh < s->hkv; kh++) {
            const int64_t len = bench_shape_kv_len(s, n);
            for (int64_t c = 0; c < s->dv; c++) {
                double sum = 0, mag = 0;
                for (int64_t j = 0; j < s->tk; j++) {
                    double x = load(
                        b->dv,
                        (size_t)(((n * s->hkv + kh) * s->tk + j) * s->dv + c),
                        b->kv_type);
                    if (j >= len && x != 0.0)
                        return INFINITY; /* keys no row sees: dv = 0 */
                    sum += x;
                }
                for (int64_t h = kh * g; h < (kh + 1) * g; h++)
                    for (int64_t i = 0; i < s->tq; i++) {
                        double y = load(
                            b->dout_lib ? b->dout_lib : b->dout,
                            (size_t)(((n * s->hq + h) * s->tq + i) * s->dv + c),
                            b->io_type);
                        sum -= y;
                        mag += fabs(y);
                    }
                if (isnan(sum))
                    return INFINITY;
                worst = fmax(worst, fabs(sum) / (mag > 0 ? mag : 1.0));
            }
            for (int64_t c = 0; c < s->dk; c++) {
                double sum = 0, mag = 0;
                for (int64_t j = 0; j < s->tk; j++) {
                    double x = load(
                        b->dk,
                        (size_t)(((n * s->hkv + kh) * s->tk + j) * s->dk + c),
                        b->kv_type);
                    if (j >= len && x != 0.0)
                        return INFINITY; /* keys no row sees: dk = 0 */
                    sum += x;
                    mag += fabs(x);
                }
                if (isnan(sum))
                    return INFINITY;
                worst = fmax(worst, fabs(sum) / (mag > 0 ? mag : 1.0));
            }
        }
    /* dq: no identity, but every value must have been written */
    for (size_t i = 0; i < b->nq; i++)
        if (isnan(load(b->dq, i, b->io_type)))
            return INFINITY;
    return worst;
}

/* FNV-1a over the gradients' bytes: the same value for every thread count
 * is the library's promise (bitwise identical results). */
static uint64_t gradient_hash(const bwd_data *b)
{
    const void *bufs[3] = {b->dq, b->dk, b->dv};
    const size_t counts[3] = {b->nq, b->nk, b->nv};
    const size_t el[3] = {bench_type_size(b->io_type),
                          bench_type_size(b->kv_type),
                          bench_type_size(b->kv_type)};
    uint64_t h = 0xcbf29ce484222325ull;
    for (int k = 0; k < 3; k++) {
        const unsigned char *p = bufs[k];
        for (size_t i = 0; i < counts[k] * el[k]; i++)
            h = (h ^ p[i]) * 0x100000001b3ull;
    }
    return h;
}

/* ---- one variant --------------------------------------------------------- */

typedef struct bwd_row {
    const bench_shape *shape;
    int threads, variant, ok, reps;
    double median_s, min_s, cpu_median_s, gflops;
    double ratio_fwd, ratio_gemms; /* median / the forward's, the gemms' */
    int64_t scratch;     /* context growth (libsdpa), score blocks (gemms) */
    int64_t workspace;   /* the forward: sdpa_forward_workspace; else -1 */
    int64_t peak_growth; /* VmHWM growth over setup + first run; -1 */
    double io;           /* inputs + outputs, bytes */
    double check;        /* identities / max|diff|; -1 not checked */
    int check_bad;
    char note[160];
} bwd_row;

typedef struct bwd_variant {
    bwd_row row;
    int live;
    sdpa_ctx *ctx;
    bench_counter count;
    size_t live_before; /* context bytes before the first call */
    bench_baseline s_block, dp_block;
    double cold_s, last_cpu;
    double *times, *cpu_times;
} bwd_variant;

/* Flops of the five gemms: S and dQ, dK over Dk, dP and dV over Dv, i.e.
 * the forward's count with (Dk + Dv) → (3·Dk + 2·Dv); 2.5x when Dk = Dv. */
static double backward_flops(const bench_shape *s)
{
    return bench_shape_flops(s) * (double)(3 * s->dk + 2 * s->dv) /
           (double)(s->dk + s->dv);
}

static void fail(bwd_variant *v, int status, const char *where)
{
    snprintf(v->row.note, sizeof v->row.note, "%s %s: %s: %s",
             status == SDPA_ERR_UNSUPPORTED || status == SDPA_ERR_OUT_OF_MEMORY
                 ? "n/a"
                 : "ERROR",
             where, sdpa_status_string(status),
             v->ctx ? sdpa_ctx_last_error(v->ctx) : "");
    v->live = 0;
}

/* One run; its time, or a negative value on failure (the note says why).
 * T threads are T cores for every variant, as in main.c's run_once: the
 * gemms on T OpenBLAS threads, libsdpa on T workers with OpenBLAS at T or
 * --lib-blas-threads. */
static double run_once(bwd_variant *v, const bwd_data *b, const bench_env *env)
{
    int var = v->row.variant;
    if (var >= BWD_COUNT) { /* the ref shape's call of the same kind */
        var -= BWD_COUNT;
        b = b->ref;
    }
    openblas_set_num_threads(var != BWD_GEMMS && env->lib_blas_threads
                                 ? env->lib_blas_threads
                                 : v->row.threads);
    double t0 = bench_now(), c0 = bench_cpu_now();
    int st = SDPA_OK;
    if (var == BWD_BACKWARD)
        st = sdpa_backward(v->ctx, &b->bwd);
    else if (var == BWD_FORWARD)
        st = sdpa_forward(v->ctx, &b->fwd);
    else
        bench_bare_backward_gemms(&b->d, b->dout, b->dq_bare, b->dk_bare,
                                  b->dv_bare, &v->s_block, &v->dp_block);
    double t = bench_now() - t0;
    v->last_cpu = bench_cpu_now() - c0;
    if (st != SDPA_OK) {
        fail(v, st, var == BWD_BACKWARD ? "sdpa_backward" : "sdpa_forward");
        return -1.0;
    }
    return t;
}

static int lib_prepare(bwd_variant *v, const bwd_data *b, const bench_env *env)
{
    int st = bench_ctx_create_counted(&v->ctx, &v->count);
    if (st == SDPA_OK)
        st = sdpa_ctx_set_int(v->ctx, SDPA_OPT_NUM_THREADS, v->row.threads);
    /* the backward's tiles only: the forward stays as the library ships */
    const bool backward =
        v->row.variant == BWD_BACKWARD || v->row.variant == BWD_REF_BACKWARD;
    if (st == SDPA_OK && backward && env->block_q)
        st = sdpa_ctx_set_int(v->ctx, SDPA_OPT_BLOCK_Q, env->block_q);
    if (st == SDPA_OK && backward && env->block_k)
        st = sdpa_ctx_set_int(v->ctx, SDPA_OPT_BLOCK_K, env->block_k);
    if (st != SDPA_OK) {
        fail(v, st, "context");
        return -1;
    }
    if (v->row.variant == BWD_FORWARD) {
        size_t ws = 0;
        if (sdpa_forward_workspace(v->ctx, &b->fwd, &ws) == SDPA_OK)
            v->row.workspace = (int64_t)ws;
    }
    v->live_before = atomic_load(&v->count.live);
    atomic_store(&v->count.peak, v->live_before);
    return 0;
}

/* Allocation and first call under a fresh VmHWM, then the checks. */
static void setup(bwd_variant *v, bwd_data *b, const bench_env *env)
{
    const bench_shape *s = b->d.shape;
    const size_t el = bench_elem_size(s->dtype);
    if (v->row.variant == BWD_GEMMS && s->window) {
        snprintf(v->row.note, sizeof v->row.note,
                 "n/a (a band: the full-square gemms bound nothing)");
        return;
    }
    int64_t rss0 = bench_mem_peak_start(env->peak_reset_ok);
    v->live = 1;
    if (v->row.variant >= BWD_COUNT) { /* timed only: checked in its block */
        if (lib_prepare(v, b->ref, env) == 0)
            v->cold_s = run_once(v, b, env);
        return;
    }
    if (v->row.variant == BWD_GEMMS) {
        if (bench_baseline_init(&v->s_block, s, GEMMS_BLOCK_BUDGET) ||
            bench_baseline_init(&v->dp_block, s, GEMMS_BLOCK_BUDGET)) {
            snprintf(v->row.note, sizeof v->row.note,
                     "n/a (score block allocation failed)");
            v->live = 0;
            return;
        }
        v->row.scratch = (int64_t)(v->s_block.s_bytes + v->dp_block.s_bytes);
        if (v->s_block.row_block < s->tq)
            snprintf(v->row.note, sizeof v->row.note,
                     "query blocks of %lld rows",
                     (long long)v->s_block.row_block);
    } else if (lib_prepare(v, b, env)) {
        return;
    }
    /* all-ones bytes are a NaN in both dtypes: an output the call forgets
     * to write cannot pass the checks */
    if (v->row.variant == BWD_BACKWARD) {
        memset(b->dq, 0xFF, b->nq * el);
        memset(b->dk, 0xFF, b->nk * el);
        memset(b->dv, 0xFF, b->nv * el);
    } else if (v->row.variant == BWD_FORWARD) {
        memset(b->out_fwd, 0xFF, b->d.out_count * el);
    }
    v->cold_s = run_once(v, b, env);
    int64_t hwm = bench_mem_hwm();
    if (v->cold_s < 0)
        return;
    if (rss0 >= 0 && hwm >= 0)
        v->row.peak_growth = hwm > rss0 ? hwm - rss0 : 0;
    if (v->row.variant != BWD_GEMMS)
        v->row.scratch =
            (int64_t)(atomic_load(&v->count.peak) - v->live_before);

    double tol = v->row.variant == BWD_BACKWARD
                     ? gradient_tolerance(s->dtype, b->kv_type) /* dk, dv */
                     : bench_tolerance(s->dtype);
    if (v->row.variant == BWD_BACKWARD)
        v->row.check = check_identities(b);
    else if (v->row.variant == BWD_FORWARD) /* against the feeding forward */
        v->row.check =
            max_abs_diff(b->out_fwd, b->d.out_lib, b->d.out_count, b->io_type);
    if (v->row.variant != BWD_GEMMS && v->row.check >= 0 &&
        !(v->row.check <= tol)) {
        v->row.check_bad = 1;
        snprintf(v->row.note, sizeof v->row.note, "WRONG: check %.3g > %.0e",
                 v->row.check, tol);
        fprintf(stderr,
                "\n!!! WARNING: shape %s threads %d %s fails its check: "
                "%.3g !!!\n\n",
                s->name, v->row.threads, bwd_names[v->row.variant],
                v->row.check);
    }
}

/* ---- one (shape, threads) block ------------------------------------------ */

/* A block's figures beyond its rows, for the summary lines and JSON. */
typedef struct bwd_summary {
    const bench_shape *shape;
    int threads;
    double ratio_fwd, ratio_gemms, cpu_ratio_fwd; /* 0 = not measured */
    int fwd_target;      /* the 3.0x target applies (A, D at one core) */
    int mem_bound;       /* E's bound applies */
    double extra;        /* max(peak RSS growth, scratch) of the backward */
    int mem_pass;        /* -1 not measurable */
    const char *bitwise; /* "", or identical to / DIFFER from block 1 */
    double ref_ratio[2]; /* [0] backward, [1] forward over the ref shape's,
                            in the same rounds (0: none) */
} bwd_summary;

static int listed(const char *const *names, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(names[i], name) == 0)
            return 1;
    return 0;
}

static int choose_reps(const bench_shape *s, bwd_variant *vars, int nvar,
                       const bwd_data *b, const bench_env *env,
                       const bench_backward_opts *o)
{
    if (s->max_reps == 1)
        return 1;
    double round = 0.0;
    for (int i = 0; i < nvar; i++) {
        double t = vars[i].live ? run_once(&vars[i], b, env) : -1.0;
        round += t > 0 ? t : 0.0;
    }
    int reps = o->reps;
    if (reps == 0) {
        double r = round > 0 ? o->block_seconds / round : 200.0;
        reps = r < 5.0 ? 5 : r > 200.0 ? 200 : (int)r;
    }
    return s->max_reps > 0 && reps > s->max_reps ? s->max_reps : reps;
}

static double mib(double bytes)
{
    return bytes / BENCH_MIB;
}

static void print_row(const bwd_row *r)
{
    printf("%-5s %3d %-13s ", r->shape->name, r->threads,
           bwd_names[r->variant]);
    if (!r->ok) {
        printf("%4s %10s %10s %8s %6s %7s %8s %7s %8s %8s  %s\n", "-", "n/a",
               "-", "-", "-", "-", "-", "-", "-", "-", r->note);
        return;
    }
    printf("%4d %10.3f %10.3f %8.1f ", r->reps, r->median_s * 1e3,
           r->min_s * 1e3, r->gflops);
    if (r->ratio_fwd > 0)
        printf("%6.2f ", r->ratio_fwd);
    else
        printf("%6s ", "-");
    if (r->ratio_gemms > 0)
        printf("%7.2f ", r->ratio_gemms);
    else
        printf("%7s ", "-");
    printf("%8.2f %7.1f ", mib((double)r->scratch), mib(r->io));
    if (r->peak_growth >= 0)
        printf("%8.1f ", mib((double)r->peak_growth));
    else
        printf("%8s ", "-");
    if (r->check >= 0)
        printf("%8.1e ", r->check);
    else
        printf("%8s ", "-");
    printf(" %s\n", r->note);
}

static void print_summary(const bwd_summary *m, const bwd_row *bwd,
                          const bwd_data *b)
{
    const char *name = m->shape->name;
    printf("   %s thr=%d: backward/forward = ", name, m->threads);
    if (m->ratio_fwd > 0) {
        printf("%.2f", m->ratio_fwd);
        if (m->cpu_ratio_fwd > 0)
            printf(" (process CPU time %.2f)", m->cpu_ratio_fwd);
        if (m->fwd_target)
            printf(" [target <= %.1f at 1 core: %s]", FWD_RATIO_TARGET,
                   m->ratio_fwd <= FWD_RATIO_TARGET ? "met" : "NOT met");
    } else {
        printf("n/a");
    }
    printf("; backward/five gemms = ");
    if (m->ratio_gemms > 0)
        printf("%.2f%s\n", m->ratio_gemms,
               m->shape->causal != SDPA_CAUSAL_NONE
                   ? " (the gemms do the full square, the backward half)"
                   : "");
    else
        printf("n/a\n");
    if (bwd->ok || bwd->scratch > 0)
        printf("   %s thr=%d: backward scratch %.2f MiB = %.1f%% of its "
               "%.1f MiB of inputs + outputs%s%s\n",
               name, m->threads, mib((double)bwd->scratch),
               100.0 * (double)bwd->scratch / b->io_bwd, mib(b->io_bwd),
               m->bitwise[0] ? "; gradients bitwise " : "", m->bitwise);
    if (m->mem_bound) {
        printf("   %s thr=%d memory: the backward within inputs + outputs + "
               "%.0f MiB: %s\n",
               name, m->threads, mib(MEM_EXTRA_BOUND),
               m->mem_pass > 0    ? "PASS"
               : m->mem_pass == 0 ? "FAIL"
                                  : "n/a (not measured)");
        printf("      inputs + outputs %.1f MiB (resident before the call); "
               "the first call's peak RSS growth ",
               mib(b->io_bwd));
        if (bwd->peak_growth >= 0)
            printf("%.2f MiB", mib((double)bwd->peak_growth));
        else
            printf("n/a");
        printf(", library scratch %.2f MiB: %.1f of %.1f MiB\n",
               mib((double)bwd->scratch), mib(b->io_bwd + m->extra),
               mib(b->io_bwd + MEM_EXTRA_BOUND));
    }
}

/* Runs one (shape, threads) block; writes its three rows to out and its
 * summary. `*first_hash` / `*first_threads`: the gradients' hash of the
 * shape's first block (0 threads: none yet). Returns the warnings. */
static int run_block(bwd_data *b, int threads, const bench_env *env,
                     const bench_backward_opts *o, uint64_t *first_hash,
                     int *first_threads, bwd_row *out, bwd_summary *m)
{
    const bench_shape *s = b->d.shape;
    const int nvar = b->ref ? BWD_ALL : BWD_COUNT;
    bwd_variant vars[BWD_ALL];
    memset(vars, 0, sizeof vars);
    for (int i = 0; i < nvar; i++) {
        bwd_row *r = &vars[i].row;
        r->shape = i < BWD_COUNT ? s : b->ref->d.shape;
        r->threads = threads;
        r->variant = i;
        r->scratch = -1;
        r->workspace = -1;
        r->peak_growth = -1;
        r->check = -1.0;
        const bwd_data *data = i < BWD_COUNT ? b : b->ref;
        r->io = i % BWD_COUNT == BWD_FORWARD ? data->io_fwd
                : i == BWD_GEMMS             ? data->io_gemms
                                             : data->io_bwd;
    }
    memset(m, 0, sizeof *m);
    m->shape = s;
    m->threads = threads;
    m->bitwise = "";
    m->mem_pass = -1;

    /* the backward first: its peak is the one the bound is about */
    fprintf(stderr, "[%s thr=%d backward] setup:", s->name, threads);
    int warnings = 0;
    for (int i = 0; i < nvar; i++) {
        fprintf(stderr, " %s", bwd_names[i]);
        setup(&vars[i], b, env);
        fprintf(stderr, vars[i].live ? " %.3fs;" : " -;", vars[i].cold_s);
        if (i == BWD_BACKWARD && vars[i].live) {
            uint64_t h = gradient_hash(b);
            if (!*first_threads) {
                *first_hash = h;
                *first_threads = threads;
            } else {
                int same = h == *first_hash;
                snprintf(vars[i].row.note, sizeof vars[i].row.note,
                         "gradients bitwise %s thr=%d's",
                         same ? "identical to" : "DIFFER from", *first_threads);
                /* the promise is for SDPA_OPT_NUM_THREADS under one BLAS
                 * setting; OpenBLAS at T threads may sum differently */
                warnings += !same && env->lib_blas_threads;
                m->bitwise = same ? "identical to the first block's"
                                  : "DIFFER from the first block's";
            }
        }
    }
    int reps = choose_reps(s, vars, nvar, b, env, o);
    fprintf(stderr, " -> %d timed round%s\n", reps, reps == 1 ? "" : "s");

    for (int i = 0; i < nvar; i++) {
        vars[i].times = calloc((size_t)reps, sizeof(double));
        vars[i].cpu_times = calloc((size_t)reps, sizeof(double));
        if (!vars[i].times || !vars[i].cpu_times)
            vars[i].live = 0;
    }
    if (s->max_reps == 1) { /* the cold setup run is the timed run */
        for (int i = 0; i < nvar; i++)
            if (vars[i].live) {
                vars[i].times[0] = vars[i].cold_s;
                vars[i].cpu_times[0] = vars[i].last_cpu;
                vars[i].row.reps = 1;
            }
    } else {
        int live[BWD_ALL], nlive = 0;
        for (int i = 0; i < nvar; i++)
            if (vars[i].live)
                live[nlive++] = i;
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < nlive; k++) {
                bwd_variant *v = &vars[live[(k + r) % nlive]];
                if (!v->live)
                    continue;
                double t = run_once(v, b, env);
                if (t >= 0) {
                    v->cpu_times[v->row.reps] = v->last_cpu;
                    v->times[v->row.reps++] = t;
                }
            }
    }

    for (int i = 0; i < nvar; i++) {
        bwd_row *r = &vars[i].row;
        r->ok = vars[i].live && r->reps > 0;
        if (!r->ok)
            continue;
        r->median_s = bench_median(vars[i].times, r->reps);
        r->min_s = vars[i].times[0]; /* sorted by bench_median */
        r->cpu_median_s = bench_median(vars[i].cpu_times, r->reps);
        r->gflops = (i % BWD_COUNT == BWD_FORWARD ? bench_shape_flops(r->shape)
                                                  : backward_flops(r->shape)) /
                    r->median_s / 1e9;
    }
    const bwd_row *fwd = &vars[BWD_FORWARD].row;
    const bwd_row *gem = &vars[BWD_GEMMS].row;
    for (int i = 0; i < BWD_COUNT; i++) {
        bwd_row *r = &vars[i].row;
        if (r->ok && fwd->ok && i != BWD_FORWARD)
            r->ratio_fwd = r->median_s / fwd->median_s;
        if (r->ok && gem->ok && i == BWD_BACKWARD)
            r->ratio_gemms = r->median_s / gem->median_s;
        if (i == BWD_FORWARD && r->ok && !r->note[0] && r->workspace >= 0)
            snprintf(r->note, sizeof r->note, "sdpa_forward_workspace %.2f MiB",
                     mib((double)r->workspace));
        if (i == BWD_GEMMS && r->ok) {
            const char *extra[2] = {
                s->has_kv_lens ? "full Tk (kv_lens ignored)" : NULL,
                s->causal != SDPA_CAUSAL_NONE ? "full square" : NULL};
            for (int e = 0; e < 2; e++) {
                size_t len = strlen(r->note);
                if (extra[e])
                    snprintf(r->note + len, sizeof r->note - len, "%s%s",
                             len ? "; " : "", extra[e]);
            }
        }
        if (r->ok && s->max_reps == 1 && i != BWD_GEMMS && !r->note[0])
            snprintf(r->note, sizeof r->note,
                     "single cold run (includes scratch allocation)");
        warnings += r->check_bad || strncmp(r->note, "ERROR", 5) == 0;
        out[i] = *r;
    }

    /* the ref shape's calls, in these rounds */
    for (int i = BWD_COUNT; i < nvar; i++) {
        const bwd_row *mine = &vars[i - BWD_COUNT].row, *ref = &vars[i].row;
        if (mine->ok && ref->ok)
            m->ref_ratio[i - BWD_COUNT] = mine->median_s / ref->median_s;
        snprintf(vars[i].row.note, sizeof vars[i].row.note,
                 "%s's, in %s's rounds", ref->shape->name, s->name);
    }
    const bwd_row *bwd = &vars[BWD_BACKWARD].row;
    m->ratio_fwd = bwd->ratio_fwd;
    m->ratio_gemms = bwd->ratio_gemms;
    if (bwd->ok && fwd->ok && fwd->cpu_median_s > 0)
        m->cpu_ratio_fwd = bwd->cpu_median_s / fwd->cpu_median_s;
    m->fwd_target =
        threads == 1 &&
        listed(FWD_RATIO_SHAPES,
               sizeof FWD_RATIO_SHAPES / sizeof FWD_RATIO_SHAPES[0], s->name);
    m->mem_bound =
        listed(MEM_BOUND_SHAPES,
               sizeof MEM_BOUND_SHAPES / sizeof MEM_BOUND_SHAPES[0], s->name);
    if (bwd->scratch >= 0 && bwd->peak_growth >= 0 && env->peak_reset_ok) {
        m->extra = (double)(bwd->peak_growth > bwd->scratch ? bwd->peak_growth
                                                            : bwd->scratch);
        m->mem_pass = m->extra <= MEM_EXTRA_BOUND;
    }
    if (m->mem_bound)
        warnings += m->mem_pass == 0;

    if (!o->json) {
        printf("-- %s: %s [%s], backward %.4g GFLOP/call, forward %.4g, "
               "%d timed rep%s, SDPA_OPT_NUM_THREADS=%d\n",
               s->name, s->what, bench_dtype_name(s->dtype),
               backward_flops(s) / 1e9, bench_shape_flops(s) / 1e9, reps,
               s->max_reps == 1 ? " (cold)"
               : reps == 1      ? ""
                                : "s",
               threads);
        for (int i = 0; i < BWD_COUNT; i++)
            print_row(&out[i]);
        for (int i = BWD_COUNT; i < nvar; i++)
            print_row(&vars[i].row);
        print_summary(m, bwd, b);
        fflush(stdout);
    }

    for (int i = 0; i < nvar; i++) {
        sdpa_ctx_destroy(vars[i].ctx);
        bench_baseline_free(&vars[i].s_block);
        bench_baseline_free(&vars[i].dp_block);
        free(vars[i].times);
        free(vars[i].cpu_times);
    }
    return warnings;
}

/* ---- output -------------------------------------------------------------- */

static void print_header(const bench_env *env)
{
    char cpu[256];
    printf("sdpa-bench --backward: libsdpa %s, row kernel %s\n",
           env->sdpa_version,
           env->kernel == SDPA_KERNEL_AVX512     ? "avx512"
           : env->kernel == SDPA_KERNEL_AVX2     ? "avx2"
           : env->kernel == SDPA_KERNEL_PORTABLE ? "portable"
                                                 : "?");
    printf("CPU: %s, %ld online\n", bench_cpu_model(cpu, sizeof cpu),
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("OpenBLAS: %s (core %s), openblas_get_num_threads() = %d at "
           "start\n",
           env->openblas_config, env->openblas_core, env->openblas_threads);
    printf("  'thr' T = T cores for every variant: OpenBLAS at T threads for "
           "the five gemms; libsdpa\n"
           "  with SDPA_OPT_NUM_THREADS = T and OpenBLAS at T threads (or "
           "--lib-blas-threads).\n"
           "  OPENBLAS_THREAD_TIMEOUT=%s (set by the harness, as for the "
           "forward table).\n",
           getenv("OPENBLAS_THREAD_TIMEOUT") ? getenv("OPENBLAS_THREAD_TIMEOUT")
                                             : "unset");
    if (env->lib_blas_threads)
        printf("  This run: OpenBLAS at %d thread(s) under libsdpa.\n",
               env->lib_blas_threads);
    if (env->block_q || env->block_k)
        printf("  This run: the backward's SDPA_OPT_BLOCK_Q = %lld, "
               "SDPA_OPT_BLOCK_K = %lld (0 = default).\n",
               (long long)env->block_q, (long long)env->block_k);
    printf(
        "sdpa backward = sdpa_backward (dq, dk, dv) from q, k, v, out, dout, "
        "lse; sdpa fwd+lse = sdpa_forward\n"
        "  (path auto, default tiles) with the lse output, the call that "
        "feeds it; five gemms = S = Q K^T,\n"
        "  dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q as CBLAS gemms "
        "per (batch, head), full Tk and\n"
        "  full square (causal ignored), on two score blocks.\n"
        "GFLOP/s: backward and gemms 2*Hq*Tq*(3Dk+2Dv)*sum_b(kv_len_b), "
        "forward 2*Hq*Tq*(Dk+Dv)*sum_b(kv_len_b),\n"
        "  halved when causal. x fwd, x gemms = median / the forward's, the "
        "gemms' median in the same rounds.\n"
        "scrt_MiB: libsdpa: what the call grew its context by (peak, through "
        "a counting allocator);\n"
        "  gemms: their two score blocks. io_MiB: the call's inputs + "
        "outputs. dRSS_MiB: %s.\n"
        "check: backward: identities sum_j dv_j = sum_i dout_i and sum_j "
        "dk_j = 0 (relative error, NaN = inf);\n"
        "  forward: max|diff| against the forward that made out and lse. "
        "Limit f32 1e-3, f64 1e-9.\n\n",
        env->peak_reset_ok
            ? "peak RSS growth over setup + first call (VmHWM reset first)"
            : "growth of the process peak (clear_refs unavailable)");
    printf("%-5s %3s %-13s %4s %10s %10s %8s %6s %7s %8s %7s %8s %8s  %s\n",
           "shape", "thr", "variant", "reps", "median_ms", "min_ms", "GFLOP/s",
           "x fwd", "x gemms", "scrt_MiB", "io_MiB", "dRSS_MiB", "check",
           "note");
}

static void json_rows(const bwd_row *rows, size_t n)
{
    printf("  \"rows\": [");
    for (size_t i = 0; i < n; i++) {
        const bwd_row *r = &rows[i];
        const bench_shape *s = r->shape;
        printf("%s\n    {\"shape\": ", i ? "," : "");
        bench_json_string(s->name);
        printf(", \"dtype\": \"%s\", \"causal\": \"%s\", \"N\": %lld, "
               "\"Hq\": %lld, \"Hkv\": %lld, \"Tq\": %lld, \"Tk\": %lld, "
               "\"Dk\": %lld, \"Dv\": %lld, \"threads\": %d, \"variant\": ",
               bench_dtype_name(s->dtype), bench_causal_name(s->causal),
               (long long)s->n, (long long)s->hq, (long long)s->hkv,
               (long long)s->tq, (long long)s->tk, (long long)s->dk,
               (long long)s->dv, r->threads);
        bench_json_string(bwd_names[r->variant]);
        printf(", \"ok\": %s, \"reps\": %d, \"median_ms\": ",
               r->ok ? "true" : "false", r->reps);
        bench_json_number(r->ok ? r->median_s * 1e3 : NAN);
        printf(", \"min_ms\": ");
        bench_json_number(r->ok ? r->min_s * 1e3 : NAN);
        printf(", \"cpu_median_ms\": ");
        bench_json_number(r->ok ? r->cpu_median_s * 1e3 : NAN);
        printf(", \"gflops\": ");
        bench_json_number(r->ok ? r->gflops : NAN);
        printf(", \"ratio_forward\": ");
        bench_json_number(r->ratio_fwd > 0 ? r->ratio_fwd : NAN);
        printf(", \"ratio_five_gemms\": ");
        bench_json_number(r->ratio_gemms > 0 ? r->ratio_gemms : NAN);
        printf(", \"scratch_bytes\": %lld, \"forward_workspace_bytes\": "
               "%lld, \"io_bytes\": %.0f, \"peak_rss_growth_bytes\": %lld, "
               "\"check\": ",
               (long long)r->scratch, (long long)r->workspace, r->io,
               (long long)r->peak_growth);
        bench_json_number(r->check >= 0 ? r->check : NAN);
        printf(", \"check_bad\": %s, \"note\": ",
               r->check_bad ? "true" : "false");
        bench_json_string(r->note);
        putchar('}');
    }
    printf("\n  ]");
}

/* The target of a shape's ratio to its ref: part 0 the backward, 1 the
 * forward. */
static double ref_target(const bench_shape *s, int part)
{
    return part == 0 && s->backward_ref_target > 0 ? s->backward_ref_target
                                                   : s->ref_target;
}

static void json_summaries(const bwd_summary *m, size_t n)
{
    printf(",\n  \"summaries\": [");
    for (size_t i = 0; i < n; i++) {
        printf("%s\n    {\"shape\": ", i ? "," : "");
        bench_json_string(m[i].shape->name);
        printf(", \"threads\": %d, \"backward_over_forward\": ", m[i].threads);
        bench_json_number(m[i].ratio_fwd > 0 ? m[i].ratio_fwd : NAN);
        printf(", \"cpu_backward_over_forward\": ");
        bench_json_number(m[i].cpu_ratio_fwd > 0 ? m[i].cpu_ratio_fwd : NAN);
        printf(", \"backward_over_five_gemms\": ");
        bench_json_number(m[i].ratio_gemms > 0 ? m[i].ratio_gemms : NAN);
        if (m[i].fwd_target)
            printf(", \"forward_ratio_target_max\": %.1f, "
                   "\"forward_ratio_met\": %s",
                   FWD_RATIO_TARGET,
                   m[i].ratio_fwd > 0 && m[i].ratio_fwd <= FWD_RATIO_TARGET
                       ? "true"
                       : "false");
        if (m[i].mem_bound)
            printf(", \"memory_extra_bound_bytes\": %.0f, "
                   "\"memory_extra_bytes\": %.0f, \"memory_pass\": %s",
                   MEM_EXTRA_BOUND, m[i].extra,
                   m[i].mem_pass < 0 ? "null"
                   : m[i].mem_pass   ? "true"
                                     : "false");
        printf(", \"bitwise\": ");
        bench_json_string(m[i].bitwise);
        if (m[i].shape->ref) {
            printf(", \"ref\": ");
            bench_json_string(m[i].shape->ref);
            printf(", \"backward_over_ref\": ");
            bench_json_number(m[i].ref_ratio[0] > 0 ? m[i].ref_ratio[0] : NAN);
            printf(", \"forward_over_ref\": ");
            bench_json_number(m[i].ref_ratio[1] > 0 ? m[i].ref_ratio[1] : NAN);
            printf(", \"backward_ref_target_max\": %.2f, "
                   "\"forward_ref_target_max\": %.2f",
                   ref_target(m[i].shape, 0), ref_target(m[i].shape, 1));
        }
        putchar('}');
    }
    printf("\n  ]");
}

/* A shape with a ref (Ab, Ad) against that shape's calls in its rounds:
 * backward and forward medians. */
static void print_ref_ratios(const bwd_summary *sums, size_t nsums)
{
    for (size_t i = 0; i < nsums; i++) {
        const bench_shape *s = sums[i].shape;
        if (!s->ref)
            continue;
        printf("   %s/%s thr=%d, same rounds:", s->name, s->ref,
               sums[i].threads);
        for (int k = 0; k < 2; k++) {
            const char *what = bwd_names[k == 0 ? BWD_BACKWARD : BWD_FORWARD];
            double x = sums[i].ref_ratio[k], target = ref_target(s, k);
            if (x > 0)
                printf(" %s %.3f [target <= %.2f: %s]", what, x, target,
                       x <= target ? "met" : "NOT met");
            else
                printf(" %s n/a", what);
            printf("%s", k == 0 ? ";" : "\n");
        }
    }
}

/* ---- the mode ------------------------------------------------------------ */

int bench_backward_run(const bench_env *env, const bench_backward_opts *o)
{
    const char *list = o->only ? o->only : DEFAULT_SHAPES;
    size_t nshapes;
    const bench_shape *shapes = bench_shapes(&nshapes);
    /* suite order, as the forward table */
    const bench_shape *sel[64];
    size_t nsel = 0;
    for (size_t i = 0; i < nshapes && nsel < 64; i++) {
        size_t len = strlen(shapes[i].name);
        for (const char *p = list; *p;) {
            const char *comma = strchr(p, ',');
            size_t tok = comma ? (size_t)(comma - p) : strlen(p);
            /* the backward reads contiguous K/V: no paged shape (Ph);
             * decode shapes (Gh, ...) are no training step; quantized
             * K/V (Aq8) is no training input */
            const int kv = shapes[i].kv_type;
            const bool quantized = kv >= SDPA_FP8_E4M3 && kv <= SDPA_Q4_0;
            bool skipped = shapes[i].page || shapes[i].decode || quantized;
            if (tok == len && strncasecmp(p, shapes[i].name, len) == 0) {
                if (shapes[i].ragged)
                    fprintf(stderr,
                            "sdpa-bench --backward: shape %s skipped (a "
                            "ragged shape: the forward table times its "
                            "backward, if it has one)\n",
                            shapes[i].name);
                else if (skipped)
                    fprintf(stderr,
                            "sdpa-bench --backward: shape %s skipped (%s)\n",
                            shapes[i].name,
                            shapes[i].page ? "paged K/V: sdpa_backward "
                                             "reads contiguous K/V"
                            : quantized    ? "quantized K/V: sdpa_backward "
                                             "takes float and half types"
                                           : "a decode shape");
                else
                    sel[nsel++] = &shapes[i];
                break;
            }
            p += tok + (comma ? 1 : 0);
        }
    }
    size_t cap = nsel * (size_t)o->nthreads;
    bwd_row *rows = calloc(cap * BWD_COUNT + 1, sizeof *rows);
    bwd_summary *sums = calloc(cap + 1, sizeof *sums);
    if (!rows || !sums) {
        free(rows);
        free(sums);
        return 1;
    }
    if (!o->json) {
        print_header(env);
        fflush(stdout);
    }
    size_t nrows = 0, nsums = 0;
    int warnings = 0;
    for (size_t i = 0; i < nsel; i++) {
        const bench_shape *s = sel[i];
        bwd_data b;
        char note[160] = "";
        fprintf(stderr, "[%s backward] inputs, and the forward's out, lse\n",
                s->name);
        if (bwd_data_init(&b, s, env->seed, note, sizeof note)) {
            fprintf(stderr, "sdpa-bench: shape %s: %s\n", s->name, note);
            if (!o->json)
                printf("-- %s: %s\n", s->name, note);
            warnings += strncmp(note, "ERROR", 5) == 0;
            continue;
        }
        const bench_shape *ref = s->ref ? bench_shape_find(s->ref) : NULL;
        if (ref && (b.ref = malloc(sizeof *b.ref)) != NULL &&
            bwd_data_init(b.ref, ref, env->seed, note, sizeof note)) {
            fprintf(stderr, "sdpa-bench: shape %s's ref %s: %s\n", s->name,
                    ref->name, note);
            free(b.ref);
            b.ref = NULL;
        }
        uint64_t first_hash = 0;
        int first_threads = 0;
        for (int t = 0; t < o->nthreads; t++) {
            warnings += run_block(&b, o->threads[t], env, o, &first_hash,
                                  &first_threads, rows + nrows, &sums[nsums]);
            nrows += BWD_COUNT;
            nsums++;
        }
        bwd_data_free(&b);
    }

    if (o->json) {
        char cpu[256];
        printf("{\n  \"mode\": \"backward\",\n  \"sdpa_version\": ");
        bench_json_string(env->sdpa_version);
        printf(",\n  \"cpu\": ");
        bench_json_string(bench_cpu_model(cpu, sizeof cpu));
        printf(",\n  \"row_kernel\": %lld,\n  \"openblas_config\": ",
               (long long)env->kernel);
        bench_json_string(env->openblas_config);
        printf(",\n  \"lib_blas_threads\": %d,\n  \"peak_reset\": %s,\n"
               "  \"seed\": %llu,\n",
               env->lib_blas_threads, env->peak_reset_ok ? "true" : "false",
               (unsigned long long)env->seed);
        json_rows(rows, nrows);
        json_summaries(sums, nsums);
        printf("\n}\n");
    } else {
        print_ref_ratios(sums, nsums);
        if (warnings)
            printf("\n!!! %d warning(s): a failed check, an ERROR or a FAIL "
                   "above !!!\n",
                   warnings);
        else
            printf("\nAll backward checks passed.\n");
    }
    free(rows);
    free(sums);
    return warnings;
}
