/*
 * sdpa-bench: libsdpa against the bare CBLAS gemms and a naive three-call
 * program, on a fixed suite of shapes, in one process.
 *
 * For each selected shape and each --threads value T:
 *   setup   every variant once, in order naive → bare → libsdpa paths:
 *           VmHWM is reset before it, so its peak RSS growth is its own;
 *           libsdpa output is compared with the naive output here.
 *   timing  `reps` rounds; each round runs every live variant once, in an
 *           order rotated by one per round (round-robin interleaving), so
 *           slow drifts and noise bursts hit all variants alike.
 *   report  median and minimum per variant, GFLOP/s, ratio to the bare
 *           gemms, scratch, peak RSS growth, max |diff|, K+V bandwidth.
 * Shapes with max_reps = 1 (L, 128k tokens) are run once per variant; that
 * single cold run is both the timed and the memory-measured one, and their
 * two baselines are measured in the first --threads block only and reported
 * again in the others (they do not depend on SDPA_OPT_NUM_THREADS).
 * Windowed shapes (W) have no bare gemms (a band has no square bound) and a
 * banded naive program; they add two variants timed in their own rounds:
 * "sdpa dense bias" (the window as a dense -inf bias instead) and "ref sdpa
 * auto" (the call of the shape named by `ref`, A), and report the ratios.
 * The ragged shapes (S, Tp) have variants of their own: ragged.c times
 * them, serving.c and packed.c make and check their calls.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cblas.h>

#include "bench.h"

enum { MAX_THREAD_COUNTS = 8, MAX_REPS = 1000 };

typedef struct options {
    int json;
    const char *only; /* comma-separated shape names, NULL = all */
    int reps;         /* 0 = adaptive */
    int threads[MAX_THREAD_COUNTS];
    int nthreads;
    size_t mem_budget; /* libsdpa workspace above this: n/a */
    size_t llc;        /* --llc-mib in bytes; 0: as the system reports */
    uint64_t seed;
    double block_seconds; /* adaptive reps: aim per (shape, threads) */
    int lib_blas_threads; /* OpenBLAS threads under libsdpa; 0 = T */
    /* SDPA_OPT_BLOCK_Q / _K on the path variants' contexts; 0 = default */
    int64_t block_q, block_k;
    unsigned timed; /* --variants: bit v set = variant v is run and timed */
    int backward;   /* --backward: the backward rows (backward.c) instead */
} options;

/* --lib-blas-threads, read by run_once. */
static int lib_blas_threads;
/* The bandwidth probe's best prefetch distance at 1 and 2 threads, which
 * the stream rows use too. */
static size_t stream_ahead[2];

/* One variant of one (shape, threads) block. */
typedef struct variant {
    bench_row row;
    int live;          /* still timed */
    int reused;        /* row copied from an earlier block, not run */
    sdpa_ctx *ctx;     /* libsdpa variants */
    bench_baseline bl; /* baselines */
    double cold_s;     /* the setup run */
    double warm_s;     /* the untimed warm-up round that sizes `reps` */
    double *times;
    double last_cpu;   /* libsdpa: process CPU time of the last run */
    double *cpu_times; /* libsdpa: process CPU time of each timed run */
    /* the inputs and outputs it uses, and (libsdpa variants) the call */
    bench_data *data; /* mutable: decode shapes rotate their K/V copies */
    const sdpa_forward_args *args;
} variant;

static const int lib_path[BENCH_VAR_COUNT] = {
    [BENCH_VAR_MATERIALISED] = SDPA_PATH_MATERIALISED,
    [BENCH_VAR_TILED] = SDPA_PATH_TILED,
    [BENCH_VAR_DECODE] = SDPA_PATH_DECODE,
    [BENCH_VAR_AUTO] = SDPA_PATH_AUTO,
};

/* Setup order: the naive run writes the reference the others are checked
 * against, so it goes first. */
static const int setup_order[BENCH_VAR_COUNT] = {
    BENCH_VAR_NAIVE,      BENCH_VAR_BARE,   BENCH_VAR_MATERIALISED,
    BENCH_VAR_TILED,      BENCH_VAR_DECODE, BENCH_VAR_AUTO,
    BENCH_VAR_DENSE_BIAS, BENCH_VAR_REF,    BENCH_VAR_STREAM};

static const size_t BASELINE_BUDGET = (size_t)1 << 30; /* 1 GiB */
/* The bandwidth probe's buffer: far beyond any last-level cache. */
static const size_t BANDWIDTH_BYTES = (size_t)1 << 30;
/* A decode shape's K/V copies, all of them (cold.c). */
static const size_t COLD_BUDGET = (size_t)2 << 30;

static int is_lib(int var)
{
    return var <= BENCH_VAR_AUTO || var == BENCH_VAR_DENSE_BIAS ||
           var == BENCH_VAR_REF;
}

/* Does the variant belong to the shape's table? The two comparison
 * variants exist for windowed shapes only. */
static int applies(const bench_shape *s, int var)
{
    if (var == BENCH_VAR_DENSE_BIAS)
        return s->dense_bias;
    if (var == BENCH_VAR_REF)
        return s->ref != NULL;
    if (var == BENCH_VAR_STREAM)
        return s->decode;
    return 1;
}

/* ---- command line ---------------------------------------------------------
 */

static void usage(FILE *f)
{
    size_t n;
    const bench_shape *s = bench_shapes(&n);
    fprintf(f,
            "usage: sdpa-bench [--json] [--only A,B,...] [--reps N] "
            "[--threads 1,2]\n"
            "                  [--mem-budget-mib M] [--seed S] "
            "[--block-seconds X]\n"
            "                  [--block-q N] [--block-k N] [--variants "
            "LIST] [--backward]\n"
            "                  [--huge-pages] [--llc-mib M]\n"
            "  --json            machine-readable output on stdout (progress "
            "stays on stderr)\n"
            "  --only LIST       shapes to run (default: all, in the order "
            "below)\n"
            "  --reps N          timed rounds per (shape, threads); default "
            "adaptive: about\n"
            "                    --block-seconds (2) per block, 5..200 "
            "rounds, sized by an\n"
            "                    untimed warm round. Shapes marked 'once' "
            "run a single cold run.\n"
            "  --threads LIST    SDPA_OPT_NUM_THREADS values (default 1,2);\n"
            "                    OpenBLAS gets as many threads per block\n"
            "  --lib-blas-threads N  OpenBLAS threads while libsdpa runs\n"
            "                    (default: as many as the block's T)\n"
            "  --mem-budget-mib  libsdpa paths whose workspace exceeds it are "
            "n/a (default 4096)\n"
            "  --seed S          input PRNG seed (default 20240607)\n"
            "  --block-q N, --block-k N  SDPA_OPT_BLOCK_Q / SDPA_OPT_BLOCK_K "
            "on the contexts\n"
            "                    of the libsdpa path variants (default 0: "
            "the library's);\n"
            "                    not on W's comparisons (dense bias, ref "
            "sdpa auto)\n"
            "  --variants LIST   variants to run and time (default all): "
            "materialised,tiled,\n"
            "                    decode,auto,bare,naive,dense,ref,stream; the "
            "naive program still runs\n"
            "                    once untimed, as the reference of the "
            "max|diff| check\n"
            "  --backward        instead of the forward table: per shape "
            "(default A,Ab,Ad,B,D,E,I;\n"
            "                    --only picks others) and --threads value, "
            "sdpa_backward, the\n"
            "                    forward with lse that feeds it (path auto) "
            "and the five bare\n"
            "                    gemms of a materialised backward (S=QK^T, "
            "dP=dO V^T, dV=P^T dO,\n"
            "                    dQ=dS K, dK=dS^T Q; full square), "
            "interleaved; prints\n"
            "                    backward/forward, backward/gemms, scratch "
            "against inputs +\n"
            "                    outputs, and E's bound (inputs + outputs + "
            "16 MiB) as PASS/FAIL.\n"
            "                    --threads, --lib-blas-threads, --reps, "
            "--block-seconds, --seed,\n"
            "                    --json apply; --block-q/--block-k set the "
            "backward's tiles only\n"
            "  --huge-pages      the tensors and page pools "
            "on transparent huge\n"
            "                    pages (2 MiB aligned, madvise "
            "MADV_HUGEPAGE), as an engine can\n"
            "                    place its KV cache; fewer TLB misses on "
            "the pages of Ph\n"
            "  --llc-mib M       the last-level cache the decode shapes' cold "
            "copies must\n"
            "                    exceed, twice over (default: what sysfs, "
            "else sysconf, reports;\n"
            "                    some hypervisors report the host's whole "
            "L3, which makes the\n"
            "                    copies large and their setup slow)\n");
    fprintf(f,
            "dRSS is each variant's own peak (VmHWM is reset through "
            "/proc/self/clear_refs);\n"
            "where the kernel refuses that, run '--only L' so the process "
            "peak is L's alone.\n"
            "L runs once per variant and dominates the time (about 10 of "
            "15 minutes on 2 cores);\n"
            "'--only A,B,C,D,E,F,G,G8,H' gives the rest in about 5.\n"
            "W (sliding window) adds 'sdpa dense bias' (a 1 GiB bias) and "
            "'ref sdpa auto'\n"
            "(A's call) in its own rounds and prints W/A and W/dense.\n"
            "S and Tp are ragged batches (seqs, q_offsets), each timed "
            "against the calls made\n"
            "without them, in the same rounds (--variants does not apply; "
            "--threads,\n"
            "--lib-blas-threads, --reps, --block-seconds, --seed, --json "
            "do):\n"
            "  S   a serving step over a paged float16 cache (16-key pages, "
            "shuffled; two\n"
            "      copies, read in turn): 30 sequences decoding 1 token "
            "against 128..8192 keys\n"
            "      and 2 prefill chunks of 512 rows against 2048 and 4096, "
            "bottom-right causal;\n"
            "      'sdpa ragged' (one call, seqs = 32), 'sdpa per-sequence' "
            "(32 calls, one\n"
            "      context) and 'sdpa padded' (N=32 Tq=512 Tk=8192, kv_lens, "
            "SDPA_EMPTY_ROWS_ZERO);\n"
            "      prints ragged/per-sequence (target <= 0.9), ragged/padded "
            "(<= 0.1) and whether\n"
            "      the ragged out equals the per-sequence outs bitwise.\n"
            "  Tp  8 documents (2048, 2048, 1536, 1024, 768, 384, 256, 128 "
            "tokens) packed into\n"
            "      8192, causal within each: the ragged call (q_offsets = "
            "kv_offsets) against one\n"
            "      call with a dense block-diagonal causal uint8 mask "
            "[1,1,8192,8192] (64 MiB),\n"
            "      forward (dense/ragged, target >= 5) and sdpa_backward "
            "(when the library\n"
            "      takes ragged backward calls; else 'backward: not "
            "available in this build').\n"
            "shapes:\n");
    for (size_t i = 0; i < n; i++)
        fprintf(f, "  %-3s %s [%s]%s\n", s[i].name, s[i].what,
                bench_dtype_name(s[i].dtype),
                s[i].max_reps == 1 ? " (once)" : "");
}

static int parse_int(const char *text, long lo, long hi, long *out)
{
    char *end;
    long v = strtol(text, &end, 10);
    if (end == text || *end != '\0' || v < lo || v > hi)
        return -1;
    *out = v;
    return 0;
}

static int parse_threads(const char *text, options *o)
{
    char buf[128];
    if (strlen(text) >= sizeof buf)
        return -1;
    strcpy(buf, text);
    o->nthreads = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        long v;
        if (o->nthreads == MAX_THREAD_COUNTS || parse_int(tok, 1, 256, &v))
            return -1;
        o->threads[o->nthreads++] = (int)v;
    }
    return o->nthreads > 0 ? 0 : -1;
}

/* Is shape `name` in the comma-separated list? */
static int selected(const char *list, const char *name)
{
    if (!list)
        return 1;
    size_t len = strlen(name);
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        size_t tok = comma ? (size_t)(comma - p) : strlen(p);
        if (tok == len && strncasecmp(p, name, len) == 0)
            return 1;
        p += tok + (comma ? 1 : 0);
    }
    return 0;
}

/* --variants names, in BENCH_VAR_* order. */
static const char *const variant_keys[BENCH_VAR_COUNT] = {
    "materialised", "tiled", "decode", "auto",  "bare",
    "naive",        "dense", "ref",    "stream"};

static int parse_variants(const char *list, options *o)
{
    char buf[256];
    if (strlen(list) >= sizeof buf)
        return -1;
    strcpy(buf, list);
    o->timed = 0;
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (int v = 0; v < BENCH_VAR_COUNT; v++)
            if (strcasecmp(tok, variant_keys[v]) == 0)
                o->timed |= 1u << v, found = 1;
        if (!found) {
            fprintf(stderr, "sdpa-bench: unknown variant '%s'\n", tok);
            return -1;
        }
    }
    return o->timed ? 0 : -1;
}

static int check_only(const char *list)
{
    size_t n;
    const bench_shape *s = bench_shapes(&n);
    char buf[256];
    if (strlen(list) >= sizeof buf)
        return -1;
    strcpy(buf, list);
    char *save = NULL;
    for (char *tok = strtok_r(buf, ",", &save); tok;
         tok = strtok_r(NULL, ",", &save)) {
        int found = 0;
        for (size_t i = 0; i < n; i++)
            found |= strcasecmp(tok, s[i].name) == 0;
        if (!found) {
            fprintf(stderr, "sdpa-bench: unknown shape '%s'\n", tok);
            return -1;
        }
    }
    return 0;
}

static int parse_args(int argc, char **argv, options *o)
{
    memset(o, 0, sizeof *o);
    o->threads[0] = 1;
    o->threads[1] = 2;
    o->nthreads = 2;
    o->mem_budget = (size_t)4096 << 20;
    o->seed = 20240607u;
    o->block_seconds = 2.0;
    o->timed = (1u << BENCH_VAR_COUNT) - 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = i + 1 < argc ? argv[i + 1] : NULL;
        long v;
        if (!strcmp(a, "--json")) {
            o->json = 1;
        } else if (!strcmp(a, "--backward")) {
            o->backward = 1;
        } else if (!strcmp(a, "--huge-pages")) {
            bench_use_huge_pages(1);
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            exit(0);
        } else if (!val) {
            fprintf(stderr, "sdpa-bench: unknown option or missing value: %s\n",
                    a);
            return -1;
        } else if (!strcmp(a, "--only")) {
            if (check_only(val))
                return -1;
            o->only = val, i++;
        } else if (!strcmp(a, "--reps")) {
            if (parse_int(val, 1, MAX_REPS, &v))
                return -1;
            o->reps = (int)v, i++;
        } else if (!strcmp(a, "--lib-blas-threads")) {
            if (parse_int(val, 1, 256, &v))
                return -1;
            o->lib_blas_threads = (int)v, i++;
        } else if (!strcmp(a, "--threads")) {
            if (parse_threads(val, o))
                return -1;
            i++;
        } else if (!strcmp(a, "--llc-mib")) {
            if (parse_int(val, 1, 1L << 20, &v))
                return -1;
            o->llc = (size_t)v << 20, i++;
        } else if (!strcmp(a, "--mem-budget-mib")) {
            if (parse_int(val, 1, 1L << 24, &v))
                return -1;
            o->mem_budget = (size_t)v << 20, i++;
        } else if (!strcmp(a, "--seed")) {
            if (parse_int(val, 0, 2147483647L, &v))
                return -1;
            o->seed = (uint64_t)v, i++;
        } else if (!strcmp(a, "--variants")) {
            if (parse_variants(val, o))
                return -1;
            i++;
        } else if (!strcmp(a, "--block-q") || !strcmp(a, "--block-k")) {
            if (parse_int(val, 0, 1L << 20, &v))
                return -1;
            *(strcmp(a, "--block-q") ? &o->block_k : &o->block_q) = v;
            i++;
        } else if (!strcmp(a, "--block-seconds")) {
            char *end;
            double x = strtod(val, &end);
            if (end == val || *end || !(x > 0.0 && x < 3600.0))
                return -1;
            o->block_seconds = x, i++;
        } else {
            fprintf(stderr, "sdpa-bench: unknown option %s\n", a);
            return -1;
        }
    }
    return 0;
}

/* ---- one variant ----------------------------------------------------------
 */

/* n/a for statuses that mean "this path cannot do this shape here". */
static void lib_fail(variant *v, int status, const char *where)
{
    const char *why = v->ctx ? sdpa_ctx_last_error(v->ctx) : "";
    if (status == SDPA_ERR_UNSUPPORTED || status == SDPA_ERR_OUT_OF_MEMORY)
        snprintf(v->row.note, sizeof v->row.note, "n/a (%s: %s%s%s)", where,
                 sdpa_status_string(status), why[0] ? ": " : "", why);
    else
        snprintf(v->row.note, sizeof v->row.note, "ERROR %s: %s: %s", where,
                 sdpa_status_string(status),
                 v->ctx ? sdpa_ctx_last_error(v->ctx) : "");
    v->live = 0;
}

/* What the stream rows sum: the bytes a decode run reads (cold.c), in
 * whole words. */
static void stream_bytes(const bench_data *d, size_t bytes[2])
{
    bench_cold_read_bytes(d, bytes);
    bytes[0] -= bytes[0] % 8;
    bytes[1] -= bytes[1] % 8;
}

/* Run the variant once; returns its time, or a negative value on failure
 * (the note then says why). */
static double run_once(variant *v)
{
    bench_cold_next(v->data); /* decode shapes: K/V no cache holds */
    const bench_data *d = v->data;
    /* T threads means T cores for every variant: the baselines get T
     * OpenBLAS threads; libsdpa runs T workers of its own with OpenBLAS at
     * T threads too, or at --lib-blas-threads. Only this harness sets
     * OpenBLAS's (process-wide) thread count; the library never does. */
    int lib = is_lib(v->row.variant);
    openblas_set_num_threads(lib && lib_blas_threads ? lib_blas_threads
                                                     : v->row.threads);
    double t0 = bench_now();
    if (lib) {
        double c0 = bench_cpu_now();
        int st = sdpa_forward(v->ctx, v->args);
        double t = bench_now() - t0;
        v->last_cpu = bench_cpu_now() - c0;
        if (st != SDPA_OK) {
            lib_fail(v, st, "sdpa_forward");
            return -1.0;
        }
        return t;
    }
    if (v->row.variant == BENCH_VAR_BARE) {
        bench_bare_gemms(d, &v->bl);
        return bench_now() - t0;
    }
    if (v->row.variant == BENCH_VAR_STREAM) {
        /* the copy the call would read now: as cold as the call's */
        const void *bufs[2] = {d->args.k.data, d->args.v.data};
        size_t bytes[2];
        stream_bytes(d, bytes);
        return bench_stream_sum(bufs, bytes, 2, v->row.threads,
                                stream_ahead[v->row.threads >= 2 ? 1 : 0]);
    }
    if (bench_naive(d, &v->bl) != 0) {
        snprintf(v->row.note, sizeof v->row.note, "ERROR: fully masked row");
        v->live = 0;
        return -1.0;
    }
    return bench_now() - t0;
}

/* Create, configure and size the libsdpa context; 0 when it may run. */
static int lib_prepare(variant *v, int threads, const options *o)
{
    int st = sdpa_ctx_create(&v->ctx);
    if (st != SDPA_OK) {
        lib_fail(v, st, "sdpa_ctx_create");
        return -1;
    }
    st = sdpa_ctx_set_int(v->ctx, SDPA_OPT_NUM_THREADS, threads);
    if (st != SDPA_OK) {
        lib_fail(v, st, "SDPA_OPT_NUM_THREADS");
        return -1;
    }
    st = sdpa_ctx_set_int(v->ctx, SDPA_OPT_PATH, lib_path[v->row.variant]);
    if (st != SDPA_OK) {
        lib_fail(v, st, "SDPA_OPT_PATH");
        return -1;
    }
    /* tile options: the path variants only; the comparison calls stand for
     * the calls the window is compared with, as the library ships them */
    const int64_t blocks[2][2] = {{SDPA_OPT_BLOCK_Q, o->block_q},
                                  {SDPA_OPT_BLOCK_K, o->block_k}};
    for (int k = 0; k < 2 && v->row.variant <= BENCH_VAR_AUTO; k++)
        if (blocks[k][1] && (st = sdpa_ctx_set_int(v->ctx, (int)blocks[k][0],
                                                   blocks[k][1])) != SDPA_OK) {
            lib_fail(v, st, k ? "SDPA_OPT_BLOCK_K" : "SDPA_OPT_BLOCK_Q");
            return -1;
        }
    size_t ws = 0;
    st = sdpa_forward_workspace(v->ctx, v->args, &ws);
    if (st != SDPA_OK) {
        lib_fail(v, st, "sdpa_forward_workspace");
        return -1;
    }
    v->row.workspace = (int64_t)ws;
    if (ws > o->mem_budget) {
        snprintf(v->row.note, sizeof v->row.note,
                 "n/a (workspace %.1f MiB > budget %.0f MiB)",
                 (double)ws / BENCH_MIB, (double)o->mem_budget / BENCH_MIB);
        v->live = 0;
        return -1;
    }
    return 0;
}

/* The setup run: allocation and first call under a fresh VmHWM, then the
 * correctness check of libsdpa variants against the naive output. */
static void setup(variant *v, int threads, const options *o, int reset_ok)
{
    const bench_data *d = v->data;
    const bench_shape *s = d->shape;
    if (v->row.variant == BENCH_VAR_BARE && s->window) {
        snprintf(v->row.note, sizeof v->row.note,
                 "n/a (a band: the full-square gemms bound nothing)");
        return;
    }
    if (reset_ok)
        bench_mem_reset_peak();
    int64_t rss0 = reset_ok ? bench_mem_rss() : bench_mem_hwm();
    v->live = 1;
    if (v->row.variant == BENCH_VAR_STREAM) {
        snprintf(v->row.note, sizeof v->row.note,
                 "%%bw: the decode rows' time against this one's");
    } else if (is_lib(v->row.variant)) {
        if (lib_prepare(v, threads, o))
            return;
        /* all-ones bytes are a NaN in both dtypes: an output the path
         * forgets to write cannot pass the check */
        memset(d->out_lib, 0xFF, d->out_count * bench_elem_size(s->dtype));
    } else if (bench_baseline_init(&v->bl, s, BASELINE_BUDGET)) {
        snprintf(v->row.note, sizeof v->row.note,
                 "n/a (score block allocation failed)");
        v->live = 0;
        return;
    } else {
        v->row.workspace = (int64_t)v->bl.s_bytes;
        if (s->window)
            snprintf(v->row.note, sizeof v->row.note,
                     "banded: blocks of %lld rows, each against its key "
                     "range only",
                     (long long)v->bl.row_block);
        else if (v->bl.row_block < s->tq)
            snprintf(v->row.note, sizeof v->row.note,
                     "query blocks of %lld rows", (long long)v->bl.row_block);
    }
    v->cold_s = run_once(v);
    int64_t hwm = bench_mem_hwm();
    if (v->cold_s < 0)
        return;
    if (rss0 >= 0 && hwm >= 0)
        v->row.peak_growth = hwm > rss0 ? hwm - rss0 : 0;

    if (is_lib(v->row.variant)) {
        double diff = bench_out_diff(d);
        v->row.max_diff = diff;
        if (!(diff <= bench_out_tolerance(s))) {
            v->row.diff_bad = 1;
            snprintf(v->row.note, sizeof v->row.note,
                     "WRONG: max|diff| vs naive %.3g > %.0e", diff,
                     bench_out_tolerance(s));
            fprintf(stderr,
                    "\n!!! WARNING: shape %s threads %d %s differs from the "
                    "naive baseline: max|diff| = %.3g !!!\n\n",
                    s->name, threads, bench_variant_name(v->row.variant), diff);
        }
    }
}

/* What the rows of a windowed shape's block measure. */
static void window_note(bench_row *row, const bench_data *d)
{
    const bench_shape *s = d->shape;
    if (row->variant == BENCH_VAR_DENSE_BIAS)
        snprintf(row->note, sizeof row->note,
                 "window as a [1,1,%lld,%lld] bias 0/-inf (%.0f MiB), no "
                 "window flag; default tiles",
                 (long long)s->tq, (long long)s->tk,
                 (double)d->bias_bytes / BENCH_MIB);
    else if (row->variant == BENCH_VAR_REF)
        snprintf(row->note, sizeof row->note,
                 "%s's sdpa auto in %s's rounds; default tiles", s->ref,
                 s->name);
}

/* Rounds to time: --reps, or adaptive from one untimed warm round (scratch
 * already held, caches and thread pools warm): about --block-seconds per
 * (shape, threads) block, at least 5 and at most 200 rounds. */
static int choose_reps(const bench_shape *s, variant *vars, const options *o)
{
    if (s->max_reps == 1)
        return 1;
    double round = 0.0;
    for (int i = 0; i < BENCH_VAR_COUNT; i++)
        if (vars[i].live && (vars[i].warm_s = run_once(&vars[i])) > 0)
            round += vars[i].warm_s;
    int reps = o->reps;
    if (reps == 0) {
        double r = round > 0 ? o->block_seconds / round : 200.0;
        reps = r < 5.0 ? 5 : r > 200.0 ? 200 : (int)r;
    }
    return s->max_reps > 0 && reps > s->max_reps ? s->max_reps : reps;
}

/* ---- one (shape, threads) block --------------------------------------------
 */

/* One (shape, threads) block. `ref`: the data of the shape's ref (its
 * output already checked against its naive program), or NULL. `prev`: the
 * `nprev` rows of this shape's previous block, or NULL. `done`: the
 * `ndone` rows of earlier blocks (the ref's own block, for the ratios).
 * Writes the block's rows to `out` (*nout of them) and, for windowed
 * shapes, *ratio (ratio->shape stays NULL otherwise). Returns the number
 * of warnings. */
static int run_block(bench_data *d, bench_data *ref, int threads,
                     const options *o, const bench_env *env,
                     const bench_row *prev, size_t nprev, const bench_row *done,
                     size_t ndone, bench_row *out, size_t *nout,
                     bench_ratio *ratio)
{
    const bench_shape *s = d->shape;
    variant vars[BENCH_VAR_COUNT];
    memset(vars, 0, sizeof vars);
    for (int i = 0; i < BENCH_VAR_COUNT; i++) {
        vars[i].data = i == BENCH_VAR_REF && ref ? ref : d;
        vars[i].args =
            i == BENCH_VAR_DENSE_BIAS ? &d->dense_args : &vars[i].data->args;
        vars[i].row.shape = vars[i].data->shape;
        vars[i].row.block = s;
        vars[i].row.threads = threads;
        vars[i].row.variant = i;
        vars[i].row.workspace = -1;
        vars[i].row.peak_growth = -1;
        vars[i].row.max_diff = -1.0;
    }

    fprintf(stderr, "[%s thr=%d] setup:", s->name, threads);
    for (int k = 0; k < BENCH_VAR_COUNT; k++) {
        variant *v = &vars[setup_order[k]];
        if (!applies(s, v->row.variant))
            continue;
        fprintf(stderr, " %s", bench_variant_name(v->row.variant));
        if (!(o->timed & (1u << v->row.variant)) &&
            v->row.variant != BENCH_VAR_NAIVE &&
            !(v->row.variant == BENCH_VAR_BARE && s->window)) {
            snprintf(v->row.note, sizeof v->row.note, "not run (--variants)");
            fprintf(stderr, " -;");
            continue;
        }
        if (v->row.variant == BENCH_VAR_REF && !ref) {
            snprintf(v->row.note, sizeof v->row.note,
                     "n/a (no inputs for shape %s)", s->ref);
            fprintf(stderr, " -;");
            continue;
        }
        if (prev && s->max_reps == 1 && !is_lib(v->row.variant)) {
            for (size_t j = 0; j < nprev; j++)
                if (prev[j].variant == v->row.variant)
                    v->row = prev[j];
            v->row.threads = threads;
            size_t len = strlen(v->row.note);
            snprintf(v->row.note + len, sizeof v->row.note - len,
                     "%sreused from the thr=%d block (baselines ignore "
                     "SDPA_OPT_NUM_THREADS)",
                     len ? "; " : "", prev[0].threads);
            v->reused = 1;
            fprintf(stderr, " reused;");
            continue;
        }
        setup(v, threads, o, env->peak_reset_ok);
        fprintf(stderr, v->live ? " %.3fs;" : " -;", v->cold_s);
        if (v->live && !(o->timed & (1u << v->row.variant))) {
            /* the naive reference, run once but not timed */
            v->live = 0;
            snprintf(v->row.note, sizeof v->row.note,
                     "reference only, not timed (--variants)");
        }
    }
    int reps = choose_reps(s, vars, o);
    fprintf(stderr, " -> %d timed round%s\n", reps, reps == 1 ? "" : "s");

    int warnings = 0;
    for (int i = 0; i < BENCH_VAR_COUNT; i++) {
        vars[i].times = calloc((size_t)reps, sizeof(double));
        vars[i].cpu_times = calloc((size_t)reps, sizeof(double));
        if (!vars[i].times || !vars[i].cpu_times)
            vars[i].live = 0;
    }

    if (s->max_reps == 1) { /* the cold setup run is the timed run */
        for (int i = 0; i < BENCH_VAR_COUNT; i++)
            if (vars[i].live) {
                vars[i].times[0] = vars[i].cold_s;
                vars[i].cpu_times[0] = vars[i].last_cpu;
                vars[i].row.reps = 1;
                vars[i].row.ok = 1;
            }
    } else {
        int live[BENCH_VAR_COUNT], nlive = 0;
        for (int i = 0; i < BENCH_VAR_COUNT; i++)
            if (vars[i].live)
                live[nlive++] = i;
        for (int r = 0; r < reps; r++)
            for (int k = 0; k < nlive; k++) {
                variant *v = &vars[live[(k + r) % nlive]];
                if (!v->live)
                    continue;
                double t = run_once(v);
                if (t >= 0) {
                    v->cpu_times[v->row.reps] = v->last_cpu;
                    v->times[v->row.reps++] = t;
                }
            }
        for (int i = 0; i < BENCH_VAR_COUNT; i++)
            if (!vars[i].reused)
                vars[i].row.ok = vars[i].live && vars[i].row.reps > 0;
    }

    /* statistics */
    for (int i = 0; i < BENCH_VAR_COUNT; i++) {
        bench_row *row = &vars[i].row;
        if (!row->ok || vars[i].reused)
            continue;
        row->median_s = bench_median(vars[i].times, row->reps);
        row->min_s = vars[i].times[0]; /* sorted by bench_median */
        row->gflops = bench_shape_flops(row->shape) / row->median_s / 1e9;
        if (is_lib(i))
            row->cpu_median_s = bench_median(vars[i].cpu_times, row->reps);
        if (s->decode && i == BENCH_VAR_STREAM) {
            size_t bytes[2];
            stream_bytes(d, bytes);
            row->kv_gbs = (double)(bytes[0] + bytes[1]) / row->median_s / 1e9;
        } else if (s->decode) {
            row->kv_gbs =
                bench_shape_kv_bytes(row->shape) / row->median_s / 1e9;
        }
    }
    /* %bw: against the streaming sum of the same bytes in the same rounds
     * (every variant of the block uses `threads` cores), else against the
     * 1 GiB probe of the start; a figure above 100 % is a measurement bug */
    const bench_row *stream = &vars[BENCH_VAR_STREAM].row;
    for (int i = 0; s->decode && i < BENCH_VAR_COUNT; i++) {
        bench_row *row = &vars[i].row;
        double bw =
            stream->ok ? stream->kv_gbs * 1e9 : env->bw[threads >= 2 ? 1 : 0];
        /* (the ref row reads another shape's copies: its own block says) */
        if (row->ok && !vars[i].reused && i != BENCH_VAR_REF)
            row->kv_bw_ratio = bw > 0 ? row->kv_gbs * 1e9 / bw : 0.0;
    }
    const bench_row *bare = &vars[BENCH_VAR_BARE].row;
    for (int i = 0; i < BENCH_VAR_COUNT; i++) {
        bench_row *row = &vars[i].row;
        if (row->ok && bare->ok && i != BENCH_VAR_BARE && i != BENCH_VAR_REF)
            row->ratio_bare = row->median_s / bare->median_s;
        if (row->ok && s->max_reps == 1 && is_lib(i) && !row->note[0])
            snprintf(row->note, sizeof row->note,
                     "single cold run (includes scratch allocation)");
        if (i == BENCH_VAR_BARE && row->ok && !vars[i].reused) {
            const char *extra[2] = {
                s->has_kv_lens ? "full Tk (kv_lens ignored)" : NULL,
                s->causal != SDPA_CAUSAL_NONE ? "full square (causal ignored)"
                                              : NULL};
            for (int e = 0; e < 2; e++) {
                size_t len = strlen(row->note);
                if (extra[e])
                    snprintf(row->note + len, sizeof row->note - len, "%s%s",
                             len ? "; " : "", extra[e]);
            }
        }
        if (row->ok && !row->note[0])
            window_note(row, d);
        warnings += row->diff_bad || strncmp(row->note, "ERROR", 5) == 0;
    }

    if (!o->json)
        bench_report_shape(s, threads, reps);
    static const int print_order[BENCH_VAR_COUNT] = {
        BENCH_VAR_MATERIALISED, BENCH_VAR_TILED, BENCH_VAR_DECODE,
        BENCH_VAR_AUTO,         BENCH_VAR_BARE,  BENCH_VAR_NAIVE,
        BENCH_VAR_DENSE_BIAS,   BENCH_VAR_REF,   BENCH_VAR_STREAM};
    *nout = 0;
    for (int k = 0; k < BENCH_VAR_COUNT; k++) {
        if (!applies(s, print_order[k]))
            continue;
        const bench_row *row = &vars[print_order[k]].row;
        out[(*nout)++] = *row;
        if (!o->json)
            bench_report_row(row);
    }

    if (s->ref || s->dense_bias) {
        const bench_row *auto_row = &vars[BENCH_VAR_AUTO].row;
        const bench_row *ref_row = &vars[BENCH_VAR_REF].row;
        const bench_row *dense_row = &vars[BENCH_VAR_DENSE_BIAS].row;
        memset(ratio, 0, sizeof *ratio);
        ratio->shape = s;
        ratio->ref = s->ref ? bench_shape_find(s->ref) : NULL;
        ratio->threads = threads;
        ratio->shape_s = auto_row->ok ? auto_row->median_s : 0.0;
        ratio->ref_s = s->ref && ref_row->ok ? ref_row->median_s : 0.0;
        ratio->dense_s =
            s->dense_bias && dense_row->ok ? dense_row->median_s : 0.0;
        ratio->shape_cpu_s = auto_row->ok ? auto_row->cpu_median_s : 0.0;
        ratio->ref_cpu_s = s->ref && ref_row->ok ? ref_row->cpu_median_s : 0.0;
        ratio->dense_cpu_s =
            s->dense_bias && dense_row->ok ? dense_row->cpu_median_s : 0.0;
        for (size_t j = 0; j < ndone && ratio->ref; j++)
            if (done[j].shape == ratio->ref && done[j].threads == threads &&
                done[j].variant == BENCH_VAR_AUTO && done[j].ok)
                ratio->ref_own_s = done[j].median_s;
        if (!o->json)
            bench_report_ratio(env, ratio);
    }
    if (!o->json)
        fflush(stdout);

    for (int i = 0; i < BENCH_VAR_COUNT; i++) {
        sdpa_ctx_destroy(vars[i].ctx);
        bench_baseline_free(&vars[i].bl);
        free(vars[i].times);
        free(vars[i].cpu_times);
    }
    return warnings;
}

/* ---- main -------------------------------------------------------------------
 */

/* Inputs of a windowed shape's ref (A) and their naive output, the reference
 * its "ref sdpa auto" runs are checked against. 1 when ready. */
static int prepare_ref(bench_data *ref, const bench_shape *rs, uint64_t seed)
{
    bench_baseline bl;
    if (!rs || bench_data_init(ref, rs, seed))
        return 0;
    if (bench_baseline_init(&bl, rs, BASELINE_BUDGET)) {
        bench_data_free(ref);
        return 0;
    }
    int st = bench_naive(ref, &bl);
    bench_baseline_free(&bl);
    if (st != 0) {
        bench_data_free(ref);
        return 0;
    }
    return 1;
}

/* Touch OpenBLAS once (its buffers and threads come up on the first call)
 * so that no variant's peak memory includes them. */
static void warm_up_blas(void)
{
    enum { W = 512 };
    float *a = calloc((size_t)W * W * 3, sizeof(float));
    double *b = calloc((size_t)W * W * 3, sizeof(double));
    if (a)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, W, W, W, 1.0f, a,
                    W, a + W * W, W, 0.0f, a + 2 * W * W, W);
    if (b)
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, W, W, W, 1.0, b,
                    W, b + W * W, W, 0.0, b + 2 * W * W, W);
    free(a);
    free(b);
}

/* OpenBLAS's threads spin for 2^28 cycles (~0.1 s) after each threaded
 * call (OPENBLAS_THREAD_TIMEOUT, default 28). Here that spin, left by a
 * baseline run with T OpenBLAS threads, took a core from the libsdpa run
 * that came next (shape A, 2 workers: 27 ms instead of 14). OpenBLAS reads
 * the setting when it loads, so the harness sets it and starts itself
 * again; a value the caller set is kept. */
static void shorten_openblas_spin(char **argv)
{
    if (getenv("OPENBLAS_THREAD_TIMEOUT"))
        return;
    if (setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1) == 0)
        execv("/proc/self/exe", argv);
    /* exec failed: carry on with the default spin */
}

int main(int argc, char **argv)
{
    shorten_openblas_spin(argv);
    options o;
    if (parse_args(argc, argv, &o)) {
        usage(stderr);
        return 2;
    }
    lib_blas_threads = o.lib_blas_threads;

    size_t nshapes;
    const bench_shape *shapes = bench_shapes(&nshapes);
    int any_decode = 0, env_window = 0, env_ragged = 0;
    size_t nsel = 0;
    for (size_t i = 0; i < nshapes; i++)
        if (selected(o.only, shapes[i].name)) {
            nsel++;
            any_decode |= shapes[i].decode;
            env_window |= shapes[i].window;
            env_ragged |= shapes[i].ragged != 0;
        }

    bench_env env;
    memset(&env, 0, sizeof env);
    env.openblas_threads = openblas_get_num_threads();
    env.lib_blas_threads = o.lib_blas_threads;
    env.openblas_config = openblas_get_config();
    env.openblas_core = openblas_get_corename();
    env.sdpa_version = sdpa_version_string();
    env.mem_budget = o.mem_budget;
    env.baseline_budget = BASELINE_BUDGET;
    env.seed = o.seed;
    env.block_q = o.block_q;
    env.block_k = o.block_k;
    env.any_window = env_window;
    env.any_ragged = env_ragged;
    env.kernel = -1;
    {
        sdpa_ctx *probe = NULL;
        if (sdpa_ctx_create(&probe) == SDPA_OK)
            sdpa_ctx_get_int(probe, SDPA_OPT_KERNEL, &env.kernel);
        sdpa_ctx_destroy(probe);
    }
    warm_up_blas();
    env.peak_reset_ok = bench_mem_reset_peak() == 0;
    if (o.backward) { /* its own table: no bandwidth, no forward suite */
        bench_backward_opts bo = {.only = o.only,
                                  .threads = o.threads,
                                  .nthreads = o.nthreads,
                                  .reps = o.reps,
                                  .block_seconds = o.block_seconds,
                                  .json = o.json};
        return bench_backward_run(&env, &bo) ? 1 : 0;
    }
    if (any_decode) {
        fprintf(stderr, "measuring read bandwidth (1 GiB)...\n");
        env.llc = o.llc ? o.llc : bench_llc_bytes();
        for (int t = 0; t < 2; t++)
            env.bw[t] = bench_read_bandwidth(BANDWIDTH_BYTES, t + 1, 7,
                                             &env.bw_ahead[t]);
        stream_ahead[0] = env.bw_ahead[0];
        stream_ahead[1] = env.bw_ahead[1];
    }

    if (!o.json) {
        bench_report_header(&env);
        fflush(stdout);
    }

    size_t cap = nsel * (size_t)o.nthreads * BENCH_VAR_COUNT;
    bench_row *rows = calloc(cap ? cap : 1, sizeof *rows);
    bench_ratio *ratios = calloc(cap ? cap : 1, sizeof *ratios);
    bench_ragged_summary *sums = calloc(cap ? cap : 1, sizeof *sums);
    if (!rows || !ratios || !sums)
        return 1;
    size_t nrows = 0, nratios = 0, nsums = 0;
    int warnings = 0;
    const bench_ragged_opts ro = {.threads = o.threads,
                                  .nthreads = o.nthreads,
                                  .reps = o.reps,
                                  .block_seconds = o.block_seconds,
                                  .json = o.json};
    for (size_t i = 0; i < nshapes; i++) {
        const bench_shape *s = &shapes[i];
        if (!selected(o.only, s->name))
            continue;
        if (s->ragged) { /* variants of their own (ragged.c) */
            warnings +=
                bench_ragged_run(&env, &ro, s, rows, &nrows, sums, &nsums);
            continue;
        }
        bench_data d, ref;
        int have_ref = 0;
        fprintf(stderr, "[%s] generating inputs\n", s->name);
        if (bench_data_init(&d, s, o.seed)) {
            fprintf(stderr, "sdpa-bench: out of memory for shape %s\n",
                    s->name);
            continue;
        }
        if (s->ref) {
            fprintf(stderr, "[%s] inputs and naive reference of %s\n", s->name,
                    s->ref);
            have_ref = prepare_ref(&ref, bench_shape_find(s->ref), o.seed);
        }
        bench_cold_init(&d, env.llc, COLD_BUDGET);
        if (have_ref)
            bench_cold_init(&ref, env.llc, COLD_BUDGET);
        if (s->decode && !o.json)
            printf("-- %s: K/V read cold: %d copies (%d for the ref), one per "
                   "run in turn (last-level cache %.1f MiB%s)\n",
                   s->name, d.cold_count, have_ref ? ref.cold_count : 0,
                   (double)(env.llc ? env.llc : 64u << 20) / BENCH_MIB,
                   o.llc     ? ", --llc-mib"
                   : env.llc ? ""
                             : ", unknown: 64 assumed");
        size_t block_start = 0, block_rows = 0;
        for (int t = 0; t < o.nthreads; t++) {
            const bench_row *prev = t ? rows + block_start : NULL;
            bench_ratio ratio = {0};
            block_start = nrows;
            warnings += run_block(&d, have_ref ? &ref : NULL, o.threads[t], &o,
                                  &env, prev, block_rows, rows, nrows,
                                  rows + nrows, &block_rows, &ratio);
            nrows += block_rows;
            if (ratio.shape)
                ratios[nratios++] = ratio;
        }
        if (have_ref)
            bench_data_free(&ref);
        bench_data_free(&d);
    }

    if (o.json)
        bench_report_json(&env, rows, nrows, ratios, nratios, sums, nsums);
    else
        bench_report_footer(&env, warnings);
    free(rows);
    free(ratios);
    free(sums);
    return warnings ? 1 : 0;
}
