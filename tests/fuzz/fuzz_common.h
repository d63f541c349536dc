/*
 * What the libFuzzer targets of tests/fuzz share (README.md here): reading
 * an input as one-byte fields, failure reports, a PRNG seeded by the input,
 * a counting allocator that can refuse, the context options, status sets
 * and their checks, struct_size games, buffers whose bytes are compared
 * before and after a call, strided views, and writing the hand-made seeds.
 *
 * Every target keeps its own decoding; what is here has one meaning for
 * all of them, so that a rule (an output stride rule, the documented
 * statuses, what "untouched" means) is written once.
 */
#ifndef SDPA_FUZZ_COMMON_H
#define SDPA_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "sdpa.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Library bugs these targets found that are not fixed yet (README.md,
 * "Open findings") are tolerated in branches marked FZ_TOLERATE_FINDINGS,
 * each naming its finding, so that the rest can be fuzzed; FUZZ_STRICT
 * (-DSDPA_FUZZ_STRICT=ON) makes them failures. Remove a branch when its
 * bug is fixed. */
#if !defined(FUZZ_STRICT) && !defined(FZ_TOLERATE_FINDINGS)
#define FZ_TOLERATE_FINDINGS 1
#endif
/* Inputs that met a tolerated finding, by finding; printed at exit with
 * FUZZ_<TARGET>_VERBOSE. */
extern long fz_tolerated[8];

/* ------------------------------------------------------------------------ */
/* The input: one byte per field; bytes past its end read as 0, so the      */
/* empty input is each target's smallest valid call.                        */
/* ------------------------------------------------------------------------ */
enum { FZ_MAX_FIELDS = 256 };
void fz_load(const uint8_t *data, size_t size);
unsigned fz(int field);
/* Eight fields from `first` as one big-endian number (a PRNG seed). */
uint64_t fz_seed64(int first);

/* ------------------------------------------------------------------------ */
/* Failure reports: a violated check prints what and the decoded call, and  */
/* aborts, which libFuzzer reports like a crash.                             */
/* ------------------------------------------------------------------------ */
extern const char *fz_target; /* e.g. "fuzz_forward" */
extern int fz_verbose;        /* FUZZ_<TARGET>_VERBOSE */
extern char fz_desc[2048];    /* the decoded call, printed on failure */

void fz_fail(int line, const char *cond, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 3, 4)));
#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond))                                                           \
            fz_fail(__LINE__, #cond, __VA_ARGS__);                             \
    } while (0)
/* Appends to fz_desc (cleared for every input by fz_load). */
void fz_describe(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ------------------------------------------------------------------------ */
/* PRNG: splitmix64.                                                         */
/* ------------------------------------------------------------------------ */
void fz_rng_seed(uint64_t seed);
uint64_t fz_rnd(void);
double fz_unit(void);        /* [0, 1) */
double fz_sym(double a);     /* [-a, a) */
int64_t fz_below(int64_t n); /* [0, n), n > 0 */

/* ------------------------------------------------------------------------ */
/* Counting allocator: sizes and alignments checked, leaks counted, and the */
/* allocation with index fail_at (counting refusals too) refused.           */
/* ------------------------------------------------------------------------ */
typedef struct fz_alloc_stats {
    long allocs, frees, bad_align, bad_free, refused, live;
    long fail_at; /* -1: never */
} fz_alloc_stats;
extern fz_alloc_stats fz_as;

/* A context on the counting allocator, with the option values below reset;
 * fz_ctx_end destroys it and checks that nothing leaked. */
sdpa_ctx *fz_ctx_new(void);
void fz_ctx_end(sdpa_ctx *ctx);
/* Allocations (granted or refused) so far: a call that must not allocate
 * leaves it as it was. */
long fz_alloc_count(void);

/* The options a context holds after fz_apply_options. */
typedef struct fz_options {
    int64_t empty_zero, threads, kernel, path, block_q, block_k;
} fz_options;
extern fz_options fz_opt;

/* Four option slots (id byte, value byte) at fields first .. first + 7: an
 * id byte of 0 skips the slot. Checks sdpa_ctx_set_int / get_int: the
 * documented statuses, a refused value leaves the option as it was, the
 * message. */
void fz_apply_options(sdpa_ctx *ctx, int first);
/* Paths that have no weights or logits output (SDPA_ERR_UNSUPPORTED). */
int fz_path_streams(int64_t path);

/* ------------------------------------------------------------------------ */
/* Statuses.                                                                 */
/* ------------------------------------------------------------------------ */
typedef uint64_t fz_sset; /* a set of statuses 0..63 */
#define FZ_BIT(s) ((fz_sset)1u << (s))
/* Every status of the header's list (SDPA_OK .. SDPA_ERR_BAD_KV_SCALE). */
#define FZ_ALL_DOCUMENTED (FZ_BIT(SDPA_ERR_BAD_KV_SCALE + 1) - 1u)
int fz_documented(int status);
/* The status of `what` is documented and in `expect`; with a context, its
 * message is "" exactly when the status is OK. */
void fz_check_status(const char *what, int status, fz_sset expect,
                     const sdpa_ctx *ctx);

/* Dtypes: SDPA_FLOAT32 / 64, the half types the header declares that the
 * library may or may not accept yet (any documented status, outputs
 * untouched on a refusal), and values no release will take. */
typedef struct fz_dtype {
    int dtype;   /* what the call gets */
    int valid;   /* float32 or float64 */
    int pending; /* a declared half type */
    int compute; /* the dtype the buffers hold: SDPA_FLOAT32 or 64 */
} fz_dtype;
fz_dtype fz_decode_dtype(unsigned v, unsigned raw);
size_t fz_esize(int compute_dtype);

/* ------------------------------------------------------------------------ */
/* struct_size games.                                                        */
/* ------------------------------------------------------------------------ */
/* Copies the struct `a` of `size` bytes into box (zero-filled, box_size >=
 * size + 16) and sets its struct_size (the first field) from the selector:
 * sizeof, a larger size with a zero tail, a larger one with a nonzero tail
 * (STRUCT_TAIL), below the first size v1 (STRUCT_SIZE), v1 itself or one
 * of the `cuts` (field boundaries: a caller built against an older header,
 * whose fields past its size the library must not read). Returns the
 * statuses the size calls for; *seen receives the bytes the library reads
 * (the rest of the struct counts as 0; 0 when the size is refused). */
fz_sset fz_pack_struct(unsigned sel, const void *a, size_t size, size_t v1,
                       const size_t *cuts, size_t ncuts, unsigned char *box,
                       size_t box_size, size_t *seen);

/* ------------------------------------------------------------------------ */
/* Buffers: every byte of every registered buffer is snapshot before a call */
/* and compared after it. Inputs must never change; outputs must keep every */
/* byte on a refusal and every byte outside their logical view (padding,    */
/* guards) on success.                                                      */
/* ------------------------------------------------------------------------ */
typedef struct fz_buf {
    const char *name;
    int output;
    unsigned char *mem;
    size_t bytes;
    unsigned char *snap;
    unsigned char *map; /* outputs: 1 for each byte a success may write */
} fz_buf;

/* A registered buffer of `bytes` (at least 1) plus 16 guard bytes after it:
 * outputs filled with the sentinel 0xA5, inputs with 0. Freed by
 * fz_free_bufs, which fz_load calls for every input. */
fz_buf *fz_buf_new(const char *name, int output, size_t bytes);
/* Marks [offset, offset + n) of an output as writable. */
void fz_buf_allow(fz_buf *b, size_t offset, size_t n);
void fz_snapshot(void);
void fz_restore(void);
/* Inputs unchanged; outputs all unchanged (outputs_all), or unchanged
 * outside their map (outputs_map), or not compared. */
void fz_check_bufs(int outputs_all, int outputs_map, const char *what);
/* The same for one buffer. */
void fz_check_buf(const fz_buf *b, int all_bytes, int outside_map,
                  const char *what);
/* Concatenated bytes of every output (for bitwise comparisons of two
 * calls); free() it. */
unsigned char *fz_outputs_copy(size_t *n);
void fz_free_bufs(void);

/* A target's call of the library (a wrapper of the entry point). */
typedef int (*fz_call_fn)(sdpa_ctx *ctx, const void *args);
/* The second call of an input, after a first that returned st (outputs
 * still registered), chosen by the field value v: v % 4 == 1 with another
 * thread count (1 + (v >> 2) % 3), v % 4 == 2 the same call again, else
 * none. It must return st; after OK a repeated call allocates nothing, and
 * (but after NONFINITE) its outputs are bitwise those of the first call. */
void fz_second_call(sdpa_ctx *ctx, unsigned v, int st, fz_call_fn call,
                    const void *args, const char *outputs);

/* ------------------------------------------------------------------------ */
/* Strided views.                                                            */
/* ------------------------------------------------------------------------ */
typedef struct fz_tens {
    int present;
    sdpa_tensor t;
    size_t es; /* element size: 1 for a mask */
    fz_buf *b;
} fz_tens;

int64_t fz_off4(const sdpa_tensor *t, int64_t a, int64_t b, int64_t c,
                int64_t d);
/* Index along a dimension that may be broadcast by extent 1. */
int64_t fz_bix(const sdpa_tensor *t, int d, int64_t i);
/* Elements a view spans from its data (negative strides by magnitude), or
 * 0 when that is not small (a tensor that must be refused). */
size_t fz_small_span(const sdpa_tensor *t);
/* a · b for non-negative extents, INT64_MAX when it overflows (0 for a
 * negative one): the strides of huge views, which must be refused. */
int64_t fz_sat_mul(int64_t a, int64_t b);
/* Contiguous [n, h, t, d] (heads outer) or [n, t, h, d] (bthd), rows
 * padded by `pad` elements (strides saturate at INT64_MAX). */
void fz_set_layout(sdpa_tensor *t, int64_t n, int64_t h, int64_t tt, int64_t d,
                   int bthd, int64_t pad);
/* A mask / bias view over the extents `full`: per dimension (2 bits of
 * modes each) 0 full, 1 extent 1, 2 stride 0, 3 full; the full ones
 * contiguous. */
void fz_broadcast_layout(sdpa_tensor *x, unsigned modes, const int64_t full[4]);
/* The causal anchor of a field value (1 top-left, 2 bottom-right, else
 * none) and a window (w % 4 == 1: each side -1..2 from two bits) in a. */
void fz_decode_causal_window(sdpa_forward_args *a, unsigned causal,
                             unsigned window);
/* The header's output rule: sorted by stride, each dimension of extent > 1
 * steps past everything the smaller ones cover (ignore_inner: stride[3] is
 * ignored, lse-like one-value-per-row views). */
int fz_sorted_rule(const sdpa_tensor *t, int ignore_inner);
/* Registers the buffer of a small view (fallback span when it is not
 * small): float inputs NaN (what the library must not read stays visibly
 * poisoned), masks 0xEE, outputs the sentinel; for an output, maps its
 * logical view. Returns 1 when the view writes no element twice, 0 when
 * it does, -1 when it leaves the buffer (negative strides). */
int fz_tens_alloc(fz_tens *x, const char *name, int output,
                  size_t fallback_span);
/* An input view that a call may write (in place): its buffer becomes an
 * output whose logical view may change. */
void fz_buf_as_output(fz_tens *x);
double fz_get(const fz_tens *x, int64_t off);
void fz_set(fz_tens *x, int64_t off, double v);
double fz_get_raw(const void *data, size_t es, int64_t off);
void fz_set_raw(void *data, size_t es, int64_t off, double v);

/* Fake address k for huge views, never dereferenced: (k + 1) * 16 MiB
 * below the top of the address space, so that a view spanning more than
 * that from it (the huge views span gigabytes; k <= 11 here) must be
 * refused (SDPA_ERR_OVERFLOW) before anything could read it. */
void *fz_top_ptr(int k);

/* ------------------------------------------------------------------------ */
/* Values.                                                                   */
/* ------------------------------------------------------------------------ */
extern const double fz_special_reals[16];
/* scale (is_cap 0) or soft-cap (1): 0, typical, and special values. */
double fz_decode_scale(unsigned v, unsigned frac, int is_cap);
/* 1 + v % lo below 224, 1 + v % hi above. */
int64_t fz_small_dim(unsigned v, int64_t lo, int64_t hi);
/* Random valid units of a quantized K/V type over `bytes` bytes (whole
 * units): finite FP8 codes; blocks of random quants whose float16 d is
 * random of a magnitude that keeps the values within a few units, 1 in 16
 * of them subnormal or zero. */
void fz_quant_units(unsigned char *u, int type, size_t bytes);

/* ------------------------------------------------------------------------ */
/* Seeds and start-up.                                                       */
/* ------------------------------------------------------------------------ */
/* In a seed's set: the option slot at field `slot` (fz_apply_options)
 * with option id `id` and the value byte `value`. */
/* (clang-format would break the last pair up as a block.) */
/* clang-format off */
#define FZ_OPTION(slot, id, value) {(slot), (id)}, {(slot) + 1, (value)}
/* clang-format on */

typedef struct fz_seed {
    const char *name;
    struct {
        int f;
        unsigned v;
    } set[28]; /* ends with {-1, 0} */
} fz_seed;

/* Reads FUZZ_<UPPER>_VERBOSE, and with FUZZ_<UPPER>_WRITE_CORPUS=<dir>
 * writes the seeds (each run through the target as it is written) and
 * exits: first the empty input (one zero byte, every target's smallest
 * valid call), named default_seed, then the table's. `upper` is the
 * target's name without fuzz_, in capitals ("FORWARD"). */
void fz_init(const char *target, const char *upper, const char *default_seed,
             const fz_seed *seeds, size_t count);

/* What a target defines (fz_this_target): LLVMFuzzerInitialize and
 * LLVMFuzzerTestOneInput are fuzz_common.c's, the same for all. An input
 * is loaded (fz_load), the PRNG seeded from the eight fields at
 * seed_field, reset() clears the target's state (NULL: none), and the
 * call runs: run_huge() when there is one and fz(huge_field) % 8 is 7 (the
 * huge mode: views never allocated), else run(); the buffers are freed
 * after it (fz_free_bufs). */
typedef struct fz_target_def {
    const char *name, *upper;
    const char *default_seed; /* the empty input's seed name */
    const fz_seed *seeds;
    size_t seed_count;
    int seed_field, huge_field;
    void (*reset)(void);
    void (*run)(void);
    void (*run_huge)(void);
} fz_target_def;
extern const fz_target_def fz_this_target;
/* Defines fz_this_target with the target's `seeds` table (the hand-made
 * seeds after the empty input's, which is named default_seed). */
#define FZ_TARGET(name, upper, default_seed, seed_field, huge_field, reset,    \
                  run, run_huge)                                               \
    const fz_target_def fz_this_target = {name,                                \
                                          upper,                               \
                                          default_seed,                        \
                                          seeds,                               \
                                          sizeof seeds / sizeof seeds[0],      \
                                          seed_field,                          \
                                          huge_field,                          \
                                          reset,                               \
                                          run,                                 \
                                          run_huge}

#endif
