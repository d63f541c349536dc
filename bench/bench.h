/*
 * sdpa-bench — shared declarations of the benchmark program.
 *
 * One concern per file:
 *   shapes.c    the fixed suite of shapes and their flop / byte counts
 *   tensors.c   input generation (fixed-seed PRNG), output comparison
 *   baseline.c  the two reference programs: bare CBLAS gemms and the naive
 *               gemm → scalar softmax → gemm (float and double instantiated
 *               from baseline_tmpl.h)
 *   sysinfo.c   clock, process memory (VmRSS / VmHWM), read bandwidth,
 *               the last-level cache's size
 *   cold.c      decode shapes' K/V copies, rotated so each run reads cold
 *   report.c    the human table and the --json output
 *   main.c      options and the interleaved measurement loop
 *   backward.c  --backward: sdpa_backward against the forward and the five
 *               bare gemms of a materialised backward
 *   ragged.c    the ragged shapes' variants: calls timed in interleaved
 *               rounds, and a double-precision check of output rows
 *   serving.c   shape S: a serving step, ragged against one call per
 *               sequence and against the padded rectangular batch
 *   packed.c    shape Tp: packed documents, ragged against a dense
 *               block-diagonal mask, forward and backward
 */
#ifndef SDPA_BENCH_H
#define SDPA_BENCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

#define BENCH_MAX_BATCH 8
#define BENCH_MIB (1024.0 * 1024.0)

/* ---------------------------------------------------------------- shapes */

typedef struct bench_shape {
    const char *name; /* "A", "G8", ... selected with --only */
    const char *what; /* one-line description for the table header */
    int dtype;        /* SDPA_FLOAT32 / SDPA_FLOAT64 */
    int64_t n, hq, hkv, tq, tk, dk, dv;
    int causal;                       /* SDPA_CAUSAL_* */
    int has_kv_lens;                  /* kv_lens below are used */
    int64_t kv_lens[BENCH_MAX_BATCH]; /* valid key count per batch item */
    int max_reps; /* 0 = adaptive; 1 = one cold timed run (huge shapes) */
    int decode;   /* report K+V read bandwidth for this shape */
    /* 1.1 sliding window (SDPA_FLAG_WINDOW) and what it is compared with */
    int window;                        /* the call sets SDPA_FLAG_WINDOW */
    int64_t window_left, window_right; /* -1 = unbounded side */
    const char *ref;   /* a shape whose sdpa auto call runs in this shape's
                          rounds ("ref sdpa auto"); NULL = none */
    double ref_target; /* reported: median / ref median <= this */
    double backward_ref_target; /* --backward's: 0 = ref_target */
    int dense_bias;      /* variant "sdpa dense bias": the window as a dense
                            [1, 1, Tq, Tk] bias (0 / -inf), no window flag */
    double dense_target; /* reported: dense median / median >= this */
    /* 1.1 storage (storage.c): q and out in io_type, k and v in kv_type
     * (0: dtype), k and v in a pool of pages of `page` keys (0: not
     * paged). The naive and bare baselines run in float32 on the same
     * values, which are rounded to be exact in the storage types. */
    int io_type, kv_type;
    int64_t page;
    /* 1.2 ragged batches (ragged.c): n sequences, sequence b with
     * seq_q[b] query rows and seq_kv[b] keys (its kv_len), bottom-right
     * causal when causal is set; tq and tk are the extents of the
     * rectangular call it is compared with (S: the batch padded to 512
     * rows and 8192 keys; Tp: the 8192 packed tokens as one sequence). */
    int ragged; /* BENCH_RAGGED_*; 0 = a rectangular shape */
    const int64_t *seq_q, *seq_kv;
    /* 1.2 dropout on the weights (0: none), drawn with the seed and
     * offset below; the naive baseline applies the same mask */
    double dropout_p;
} bench_shape;

#define BENCH_DROPOUT_SEED 0x5eed0123456789abull
#define BENCH_DROPOUT_OFFSET 0ull

enum { BENCH_RAGGED_SERVING = 1, BENCH_RAGGED_PACKED = 2 };

/* The fixed suite, in run order. */
const bench_shape *bench_shapes(size_t *count);

/* Shape by name (case-insensitive), or NULL. */
const bench_shape *bench_shape_find(const char *name);

/* Valid keys of batch item b (kv_lens[b] or Tk; seq_kv[b] when ragged). */
int64_t bench_shape_kv_len(const bench_shape *s, int64_t b);

/* The keys row i of batch item b may see are [*start, *limit) (none when
 * limit <= start): the key length, causality and, for windowed shapes,
 * the window as include/sdpa.h defines it. Both never decrease with i. */
void bench_shape_allowed(const bench_shape *s, int64_t b, int64_t i,
                         int64_t *start, int64_t *limit);

/* Allowed (query row, key) pairs of one head, summed over the batch. */
double bench_shape_allowed_scores(const bench_shape *s);

/* Useful flops of one forward call: 2·Hq·Tq·(Dk+Dv)·Σ_b L_b, halved when
 * causal; for windowed and ragged shapes exactly 2·Hq·(Dk+Dv)·(allowed
 * scores). The
 * same count is used for every variant of a shape, so GFLOP/s compare like
 * time does. */
double bench_shape_flops(const bench_shape *s);

/* Bytes of K and V an attention call must read: Σ_b Hkv·L_b·(Dk+Dv)·elem. */
double bench_shape_kv_bytes(const bench_shape *s);

size_t bench_elem_size(int dtype);
const char *bench_dtype_name(int dtype);
const char *bench_causal_name(int causal);

/* --------------------------------------------------------------- tensors */

/* Copies of a decode shape's K/V at most (cold.c). */
#define BENCH_COLD_MAX 64

/* Inputs and outputs of one shape, contiguous in (N, H, T, D) order. */
typedef struct bench_data {
    const bench_shape *shape;
    void *q, *k, *v;        /* inputs; K/V rows at j >= kv_len hold NaN */
    void *out_lib;          /* written by libsdpa */
    void *out_ref;          /* written by the naive baseline: the reference */
    void *out_bare;         /* written by the bare gemms (meaningless values) */
    size_t out_count;       /* elements of each output */
    sdpa_forward_args args; /* q, k, v, out_lib, causal, kv_lens, window */
    /* shapes with dense_bias: the window as a [1, 1, Tq, Tk] bias, 0 in the
     * band and -inf outside (stride 0 over N and H), and the call that
     * passes it instead of the window (same q, k, v, out_lib, causal) */
    void *bias;
    size_t bias_bytes;
    sdpa_forward_args dense_args;
    /* storage.c: q, k and v in the shape's storage types (NULL: the
     * float32 buffers above serve), the page table; out_lib then holds
     * out in io_type */
    void *q_lib, *k_lib, *v_lib;
    size_t k_lib_bytes, v_lib_bytes; /* their sizes (page pools included) */
    int32_t *table;
    /* cold.c: decode shapes rotate over cold_count copies of k, v (and
     * k_lib, v_lib); set 0 is the buffers above as allocated, and k, v,
     * k_lib, v_lib and args point at set cold_next - 1 */
    int cold_count, cold_next;
    void *cold_k[BENCH_COLD_MAX], *cold_v[BENCH_COLD_MAX];
    void *cold_k_lib[BENCH_COLD_MAX], *cold_v_lib[BENCH_COLD_MAX];
} bench_data;

/* The bench's tensors: `bytes` (rounded up to 64), 64-byte aligned and
 * zeroed (resident); after bench_use_huge_pages(1) (--huge-pages) 2 MiB
 * aligned and advised onto transparent huge pages (madvise
 * MADV_HUGEPAGE) before they are touched, as an engine can place its KV
 * cache. Freed with free(). */
void bench_use_huge_pages(int on);
int bench_huge_pages(void);
void *bench_alloc(size_t bytes);

/* Allocate and fill with normal-ish values from a fixed seed. 0 on success. */
int bench_data_init(bench_data *d, const bench_shape *s, uint64_t seed);
void bench_data_free(bench_data *d);

/* Shapes with storage types or pages (storage.c): rounds d's float32
 * inputs to be exact in the storage types, makes the typed copies (and
 * the page pool) and points d->args at them. 0 on success. */
int bench_storage_init(bench_data *d);
void bench_storage_free(bench_data *d);
/* Bytes of one element of a storage type (SDPA_FLOAT*). */
size_t bench_type_size(int type);
/* Bytes of count values of a storage type: count / 32 blocks of 34 or 18
 * bytes for SDPA_Q8_0 / SDPA_Q4_0 (count a multiple of 32), one byte a
 * value for FP8, else count · bench_type_size(type). */
size_t bench_type_bytes(int type, size_t count);
/* The float32 values x (count of them) rounded in place to be exact in
 * `type`, and their copy in `type` (bench_alloc'd; NULL for float32, when
 * x itself serves, or with *failed set when out of memory). */
void *bench_typed_copy(float *x, size_t count, int type, int *failed);
/* The value of a float16 / bfloat16 element. */
float bench_half_value(uint16_t h, int type);
/* ids[0..count) = 0..count-1 in a fixed shuffled order (a cache that has
 * seen traffic). */
void bench_shuffle_pages(int32_t *ids, int64_t count);
/* Keys [0, len) of one [Hkv, tk, dim] item `src` (elements of es bytes)
 * into the head-major pages [page][head][slot][dim] of `pool` that
 * table_row names, `page` keys a page. */
void bench_scatter_pages(char *pool, const char *src, size_t es, int64_t hkv,
                         int64_t tk, int64_t dim, int64_t len, int64_t page,
                         const int32_t *table_row);
/* out_lib (in io_type) against out_ref: max |difference|, and the bound it
 * must stay under (the float32 tolerance plus one rounding of out). */
double bench_out_diff(const bench_data *d);
double bench_out_tolerance(const bench_shape *s);

/* Fill `count` elements of `dtype` with the inputs' distribution from a
 * seed of their own (the backward's dout). */
void bench_fill_random(void *x, size_t count, int dtype, uint64_t seed);

/* max |a_i - b_i| over n elements of `dtype`; +inf when either holds a NaN
 * where the other does not, so a wrong result can never look small. */
double bench_max_abs_diff(const void *a, const void *b, size_t n, int dtype);

/* -------------------------------------------------------------- baseline */

/* Scratch of one baseline: a score block of row_block × Tk elements. Blocks
 * of query rows keep it under a byte budget (only the 128k shape needs
 * more than one block); the flop count is unchanged by the blocking.
 * Windowed shapes: blocks of max(64, window_left) rows, each against the
 * key range its rows may see (the naive program is banded). */
typedef struct bench_baseline {
    void *s;
    size_t s_bytes;
    int64_t row_block;
} bench_baseline;

/* Allocate (and touch) the score block. 0 on success. */
int bench_baseline_init(bench_baseline *b, const bench_shape *s,
                        size_t budget_bytes);
void bench_baseline_free(bench_baseline *b);

/* The bound: per (batch, query head) S = Q·Kᵀ (Tq×Tk×Dk) and O = S·V
 * (Tq×Tk×Dv) as two CBLAS gemms, full Tk (kv_lens ignored) and full square
 * (causal ignored). Writes d->out_bare. */
void bench_bare_gemms(const bench_data *d, bench_baseline *b);

/* The backward's bound (--backward): per (batch, query head) the five
 * gemms S = Q·Kᵀ, dP = dO·Vᵀ, dV = Pᵀ·dO, dQ = dS·K, dK = dSᵀ·Q (the S
 * block standing for P, the dP block for dS), full Tk and full square, on
 * two score blocks of the same row_block. dout is [N, Hq, Tq, Dv]; dq, dk,
 * dv are written (meaningless values) in the layouts of q, k, v. */
void bench_bare_backward_gemms(const bench_data *d, const void *dout, void *dq,
                               void *dk, void *dv, bench_baseline *s_block,
                               bench_baseline *dp_block);

/* The naive three-call program: gemm, scalar softmax with exp and the masks
 * (causal, kv_lens, window) applied as -inf before the max, gemm. Windowed
 * shapes: per query block, the gemms cover only the block's key range.
 * Writes d->out_ref. Returns 0, or -1 if a row has no allowed key. */
int bench_naive(const bench_data *d, bench_baseline *b);

/* --------------------------------------------------------------- sysinfo */

double bench_now(void);     /* seconds, CLOCK_MONOTONIC */
double bench_cpu_now(void); /* seconds, CLOCK_PROCESS_CPUTIME_ID */

/* Process memory from /proc/self/status, in bytes; -1 when unavailable. */
int64_t bench_mem_rss(void);
int64_t bench_mem_hwm(void);
/* Reset VmHWM to the current RSS (writes 5 to /proc/self/clear_refs).
 * 0 on success; -1 when the kernel refuses, in which case peak growth is
 * only attributable for the first, largest run (see --only). */
int bench_mem_reset_peak(void);
/* Before a measured first call: free heap pages returned to the kernel
 * (glibc's malloc_trim; resident, they would take the call's allocations
 * without any RSS growth: E's backward measured 0.00 MiB so), VmHWM reset
 * when reset_ok. Returns what the peak growth counts from: VmRSS, or
 * VmHWM without the reset; -1 when unavailable. */
int64_t bench_mem_peak_start(int reset_ok);

/* The median of n values (sorts them: x[0] is then the least). */
double bench_median(double *x, int n);

/* Bytes a context holds now and at most: what a call grew it by is the
 * scratch it used, whatever the path, with no workspace query needed. */
typedef struct bench_counter {
    atomic_size_t live, peak;
} bench_counter;
/* sdpa_ctx_create_with_allocator through c, which starts at 0. */
int bench_ctx_create_counted(sdpa_ctx **ctx, bench_counter *c);

/* The "model name" of /proc/cpuinfo in buf (size bytes), or "unknown". */
const char *bench_cpu_model(char *buf, size_t size);

/* Streaming read bandwidth in bytes/s: sum of a `bytes` buffer split over
 * `threads` POSIX threads, median of `reps` passes, the fastest of a plain
 * sum and sums that prefetch 1 to 16 KiB ahead (*ahead_bytes: the
 * distance that won, 0 for none; may be NULL). Each pass reads the buffer
 * cold: it is far larger than any cache. <= 0 on failure. */
double bench_read_bandwidth(size_t bytes, int threads, int reps,
                            size_t *ahead_bytes);
/* Seconds of one streaming sum over the n buffers (bytes[i] each, a
 * multiple of 8), each split over `threads`, prefetching ahead_bytes
 * ahead (the probe's best): the read a decode call cannot beat, timed
 * beside it (BENCH_VAR_STREAM). */
double bench_stream_sum(const void *const *bufs, const size_t *bytes, int n,
                        int threads, size_t ahead_bytes);

/* The last-level cache in bytes (sysfs, else sysconf; 0 when unknown). */
size_t bench_llc_bytes(void);

/* ------------------------------------------------------------------ cold */

/* The bytes of K and V a decode run reads whole: the storage-type copies
 * (or page pools) where there are, else the float32 buffers. */
void bench_cold_read_bytes(const bench_data *d, size_t bytes[2]);
/* Decode shapes only: enough copies of K/V (and their storage-type copies
 * or page pools) that the other copies read between two uses of one
 * exceed twice the last-level cache (llc 0: 64 MiB assumed), at most
 * BENCH_COLD_MAX and `budget` bytes in all: what an engine's many layers
 * do to a layer's cache. 0 on success (one copy when the shape is not a
 * decode shape or memory runs out: the rows then say so). */
int bench_cold_init(bench_data *d, size_t llc, size_t budget);
/* Point d's K/V (and args) at the next copy: called before every run. */
void bench_cold_next(bench_data *d);
/* Frees the copies and points d back at set 0 (bench_data_free calls it). */
void bench_cold_free(bench_data *d);

/* ---------------------------------------------------------------- report */

enum {
    BENCH_VAR_MATERIALISED = 0,
    BENCH_VAR_TILED,
    BENCH_VAR_DECODE,
    BENCH_VAR_AUTO,
    BENCH_VAR_BARE,
    BENCH_VAR_NAIVE,
    BENCH_VAR_DENSE_BIAS, /* shapes with dense_bias only */
    BENCH_VAR_REF,        /* shapes with a ref only: the ref's sdpa auto */
    BENCH_VAR_STREAM,     /* decode shapes only: a streaming sum of the
                             K/V bytes the call reads, in its rounds */
    BENCH_VAR_COUNT
};

/* One row of the table: (shape, threads, variant). */
typedef struct bench_row {
    const bench_shape *shape;
    int threads;    /* SDPA_OPT_NUM_THREADS (libsdpa rows) */
    int variant;    /* BENCH_VAR_* */
    int ok;         /* measured; otherwise `note` says why */
    char note[160]; /* "n/a (...)", error text, or a warning */
    int reps;       /* timed runs */
    double median_s, min_s;
    double gflops;       /* bench_shape_flops / median */
    double ratio_bare;   /* median / bare median (0 if unknown) */
    double kv_gbs;       /* decode shapes: K+V bytes / median, 1e9 B/s */
    double kv_bw_ratio;  /* kv_gbs / machine read bandwidth */
    int64_t workspace;   /* libsdpa: sdpa_forward_workspace; baselines:
                            their score block; -1 unknown */
    int64_t peak_growth; /* VmHWM growth over setup + first run; -1 */
    double max_diff;     /* libsdpa vs naive, -1 when not checked */
    int diff_bad;        /* max_diff above the dtype's tolerance */
    /* the shape whose block it ran in (W's "ref sdpa auto" row: W) */
    const bench_shape *block;
    /* libsdpa rows: median process CPU time of the timed runs (all the
     * process's threads; with one worker and OpenBLAS at one thread, the
     * call's own time without the waits for a busy machine's cores) */
    double cpu_median_s;
    /* ragged shapes' rows: the variant column, and the flops of one run
     * (a backward's); NULL / 0: bench_variant_name, bench_shape_flops */
    const char *label;
    double flop;
} bench_row;

typedef struct bench_env {
    int openblas_threads;
    int lib_blas_threads; /* OpenBLAS threads under libsdpa; 0 = T */
    const char *openblas_config;
    const char *openblas_core;
    const char *sdpa_version;
    int64_t kernel;         /* SDPA_OPT_KERNEL as AUTO resolves it */
    int peak_reset_ok;      /* clear_refs worked */
    double bw[2];           /* read bandwidth with [0] 1, [1] 2 threads (B/s) */
    size_t bw_ahead[2];     /* its best prefetch distance (0: none) */
    size_t llc;             /* last-level cache bytes (0: unknown) */
    size_t mem_budget;      /* libsdpa workspace budget (bytes) */
    size_t baseline_budget; /* baseline score block budget (bytes) */
    uint64_t seed;
    int64_t block_q, block_k; /* --block-q / --block-k; 0 = library's */
    int any_window;           /* a windowed shape is selected */
    int any_ragged;           /* a ragged shape is selected */
} bench_env;

/* A windowed shape against its two comparisons, from one (shape, threads)
 * block: all three measured in the same interleaved rounds. Times are
 * medians in seconds, 0 when not measured. */
typedef struct bench_ratio {
    const bench_shape *shape; /* W */
    const bench_shape *ref;   /* A, or NULL */
    int threads;
    double shape_s;   /* sdpa auto on the shape */
    double ref_s;     /* ref sdpa auto, same rounds */
    double dense_s;   /* sdpa dense bias, same rounds */
    double ref_own_s; /* the ref's own block at the same threads (sdpa
                         auto), when it ran in this process; 0 otherwise */
    /* the same three medians in process CPU time (bench_row.cpu_median_s) */
    double shape_cpu_s, ref_cpu_s, dense_cpu_s;
} bench_ratio;

/* A ragged shape's comparisons in one (shape, threads) block: ratios of
 * medians measured in the same rounds, and S's bitwise check. */
typedef struct bench_ragged_ratio {
    const char *name;            /* "ragged/per-sequence" */
    const char *num, *den;       /* the rows divided: their labels */
    double num_s, den_s;         /* their medians; 0 = not measured */
    double num_cpu_s, den_cpu_s; /* the same in process CPU time */
    double target;               /* 0 = none */
    int at_most;                 /* met when the ratio <= target; else >= */
} bench_ragged_ratio;

typedef struct bench_ragged_summary {
    const bench_shape *shape;
    int threads;
    bench_ragged_ratio ratio[3];
    int nratio;
    int bitwise;              /* -1 not checked, 0 no, 1 yes */
    const char *bitwise_what; /* what was compared with what */
    char note[160];           /* e.g. the backward's absence */
} bench_ragged_summary;

const char *bench_variant_name(int variant);
double bench_tolerance(int dtype);

void bench_report_header(const bench_env *env);
void bench_report_shape(const bench_shape *s, int threads, int reps);
void bench_report_row(const bench_row *r);
void bench_report_ratio(const bench_env *env, const bench_ratio *r);
/* A ragged (shape, threads) block: its header line, its n rows, then the
 * summary's ratios and checks. */
void bench_report_ragged(const bench_ragged_summary *m, const bench_row *rows,
                         int n);
void bench_report_footer(const bench_env *env, int warnings);
void bench_report_json(const bench_env *env, const bench_row *rows,
                       size_t count, const bench_ratio *ratios, size_t nratios,
                       const bench_ragged_summary *ragged, size_t nragged);

/* The JSON scalars of report.c, for backward.c's output. */
void bench_json_string(const char *s);
void bench_json_number(double x);

/* -------------------------------------------------------------- backward */

/* What --backward takes from the command line (the rest is in bench_env). */
typedef struct bench_backward_opts {
    const char *only; /* comma-separated shape names; NULL = A,B,D,E,I */
    const int *threads;
    int nthreads;
    int reps; /* 0 = adaptive */
    double block_seconds;
    int json;
} bench_backward_opts;

/* The backward of forward call a: its options, inputs, out, lse and
 * ragged fields; dout and the gradients are left for the caller. */
sdpa_backward_args bench_backward_of(const sdpa_forward_args *a);

/* --backward: per selected shape and thread count, sdpa_backward, the
 * forward that feeds it (with lse) and the five bare gemms, interleaved;
 * ratios, scratch, and the memory bound of shape E. Prints the table (or
 * JSON); returns the number of warnings. */
int bench_backward_run(const bench_env *env, const bench_backward_opts *o);

/* ---------------------------------------------------------------- ragged */

/* What the ragged shapes take from the command line. */
typedef struct bench_ragged_opts {
    const int *threads;
    int nthreads;
    int reps; /* 0 = adaptive */
    double block_seconds;
    int json;
} bench_ragged_opts;

/* One variant of a ragged shape: `count` calls a run (one per sequence,
 * or one), in `copies` copies of their inputs: copy c's calls are
 * [c * count, (c + 1) * count) of fwd or bwd. Each run takes the copy
 * after the one the block's previous run (of any variant) took. */
typedef struct bench_calls {
    const char *label;
    const sdpa_forward_args *fwd;  /* forward calls, or */
    const sdpa_backward_args *bwd; /* backward calls */
    int64_t count;
    int copies;
    int empty_rows_zero; /* SDPA_OPT_EMPTY_ROWS = SDPA_EMPTY_ROWS_ZERO */
    double flop;         /* useful flops of one run */
} bench_calls;

/* One (shape, threads) block of n variants: each set up once in order
 * (its own context through a counting allocator, VmHWM reset before its
 * first run: scrt_MiB and dRSS), an untimed warm round that sizes the
 * rounds, then the rounds, each running every variant once in an order
 * rotated per round. rows[i] is variant i's row (a failed variant's note
 * says why). The outputs hold the calls' results afterwards. */
void bench_calls_time(const bench_env *env, const bench_ragged_opts *o,
                      const bench_shape *s, int threads,
                      const bench_calls *calls, int n, bench_row *rows);

/* A ragged call's out against a double-precision softmax, on each
 * sequence's first, middle and last query rows (its one row when it has
 * one), every head: q and out are [1, Hq, total_q, D] (contiguous), keys
 * [0, limit) of the row as bench_shape_allowed gives them, key(data, b,
 * kv_head, j, k, v) writes key j's rows of sequence b (Dk and Dv floats).
 * Returns the largest |out - reference|, +inf on a NaN. */
typedef void bench_key_fn(const void *data, int64_t b, int64_t kv_head,
                          int64_t j, float *k, float *v);
double bench_ragged_reference_diff(const bench_shape *s, const float *q,
                                   const float *out, bench_key_fn *key,
                                   const void *data);

/* The ratio num / den of two rows' medians (0 where not measured). */
bench_ragged_ratio bench_ragged_ratio_of(const char *name, const bench_row *num,
                                         const bench_row *den, double target,
                                         int at_most);
/* Each measured row's verdict in its note: WRONG when its max|diff| is
 * above float32's tolerance, else notes[i]. Returns the rows that are
 * WRONG or ERROR. */
int bench_ragged_verdicts(bench_row *rows, int n, const char *const *notes);

/* Query rows before each sequence (seqs + 1 values from 0) of a ragged
 * shape, and its sequences' keys likewise. */
void bench_seq_offsets(const bench_shape *s, int64_t *q_off, int64_t *kv_off);

/* The ragged shape's blocks, one per --threads value (serving.c or
 * packed.c): rows appended at rows + *nrows, summaries at sums + *nsums;
 * the table printed unless --json. Returns the number of warnings. */
int bench_ragged_run(const bench_env *env, const bench_ragged_opts *o,
                     const bench_shape *s, bench_row *rows, size_t *nrows,
                     bench_ragged_summary *sums, size_t *nsums);
int bench_serving_run(const bench_env *env, const bench_ragged_opts *o,
                      const bench_shape *s, bench_row *rows, size_t *nrows,
                      bench_ragged_summary *sums, size_t *nsums);
int bench_packed_run(const bench_env *env, const bench_ragged_opts *o,
                     const bench_shape *s, bench_row *rows, size_t *nrows,
                     bench_ragged_summary *sums, size_t *nsums);

#endif /* SDPA_BENCH_H */
