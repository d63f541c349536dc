/*
 * libsdpa — exact scaled dot-product attention for C programs, on CPUs.
 *
 *   O = softmax(Q Kᵀ · scale + bias, forbidden keys removed) V
 *
 * for a whole batch in one call. Q Kᵀ and P·V run as CBLAS sgemm/dgemm calls;
 * a vectorised masked softmax pass sits between them. This header is the whole
 * public API, and its version macros are the single source of the version.
 *
 * Semantics. docs/SEMANTICS.md is the contract of sdpa_forward, rule by rule:
 * the logit (scale, soft-cap, bias, ALiBi), which keys are forbidden (key
 * lengths, mask, causal anchors, -inf bias, windows), the softmax over the
 * allowed keys, rows with no allowed key, which K and V rows are never read,
 * broadcasting and grouped-query heads, with the reference values the tests
 * assert. The comments below describe each argument.
 *
 * Errors. Every function returns an int status (SDPA_OK = 0). All arguments
 * are validated before anything is written: on any error detected before the
 * computation starts, the caller's output buffers are untouched. The one
 * status that can only be detected during the computation is
 * SDPA_ERR_NONFINITE (a logit that is NaN or +inf, i.e. NaN/inf input or
 * overflow; a row whose allowed logits all overflow to -inf, which under
 * SDPA_EMPTY_ROWS_ZERO is a zero row instead; or an output that is not
 * finite: a NaN/inf in a V row that is read, or V values so near the
 * dtype's maximum that Σ_j e^{s_j - m} v_j overflows before the division
 * by the row sum); after it the output buffers hold unspecified values. A
 * call never returns SDPA_OK with a NaN or infinite output.
 * sdpa_ctx_last_error() says what went wrong and where.
 *
 * Threads. A context is used by one thread at a time, one call at a time
 * (a call on a context that is inside a call returns SDPA_ERR_BUSY); any
 * number of contexts may run in parallel. SDPA_OPT_NUM_THREADS splits one call
 * over workers of the context's own; results are bitwise identical for every
 * value. The library never changes BLAS threading settings (docs/THREADS.md).
 */
#ifndef SDPA_H
#define SDPA_H

#include <stddef.h>
#include <stdint.h>

#define SDPA_VERSION_MAJOR 1
#define SDPA_VERSION_MINOR 1
#define SDPA_VERSION_PATCH 0

#define SDPA_VERSION_NUMBER                                                    \
    (SDPA_VERSION_MAJOR * 10000 + SDPA_VERSION_MINOR * 100 + SDPA_VERSION_PATCH)
#define SDPA_STRINGIFY_(x) #x
#define SDPA_STRINGIFY(x) SDPA_STRINGIFY_(x)
/* clang-format off */
#define SDPA_VERSION_STRING                                                    \
    SDPA_STRINGIFY(SDPA_VERSION_MAJOR) "."                                     \
    SDPA_STRINGIFY(SDPA_VERSION_MINOR) "."                                     \
    SDPA_STRINGIFY(SDPA_VERSION_PATCH)
/* clang-format on */

#if defined(SDPA_STATIC_DEFINE)
#define SDPA_API
#elif defined(_WIN32)
#if defined(SDPA_BUILDING_LIBRARY)
#define SDPA_API __declspec(dllexport)
#else
#define SDPA_API __declspec(dllimport)
#endif
#elif defined(__GNUC__) && __GNUC__ >= 4
#define SDPA_API __attribute__((visibility("default")))
#else
#define SDPA_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Status codes. Values are frozen forever; new codes are only appended.     */
/* ------------------------------------------------------------------------ */
enum {
    SDPA_OK = 0,
    SDPA_ERR_NULL_POINTER = 1,      /* a required pointer is NULL */
    SDPA_ERR_STRUCT_SIZE = 2,       /* struct_size smaller than version 1 */
    SDPA_ERR_STRUCT_TAIL = 3,       /* struct_size larger, unknown tail not 0 */
    SDPA_ERR_BAD_DTYPE = 4,         /* dtype, kv_dtype or bias_dtype not
                                       an SDPA_FLOAT* type, or float64
                                       mixed with another type */
    SDPA_ERR_BAD_DIM = 5,           /* a dimension is zero or negative (or,
                                       1.2, Dk / Dv of block-quantized K/V
                                       not a multiple of 32) */
    SDPA_ERR_SHAPE_MISMATCH = 6,    /* dimensions disagree between tensors */
    SDPA_ERR_BAD_STRIDE = 7,        /* negative stride, innermost stride != 1
                                       (q, k, v, out, weights), an output
                                       whose sorted strides do not each
                                       step past the smaller ones (the rule
                                       is conservative),
                                       row stride below the row length, an
                                       output that overlaps itself, or (1.2)
                                       a stride of block-quantized K/V not
                                       a multiple of 32 */
    SDPA_ERR_OVERLAP = 8,           /* an output shares an element with
                                       another output or an input; views
                                       of one buffer with the same strides
                                       and element size are told apart
                                       element by element (1.2), others
                                       by their address ranges (first to
                                       last element): conservative */
    SDPA_ERR_OVERFLOW = 9,          /* an extent overflows size_t or BLAS int */
    SDPA_ERR_BAD_SCALE = 10,        /* scale negative, NaN or infinite, or
                                       above FLT_MAX in a float32 call */
    SDPA_ERR_BAD_SOFTCAP = 11,      /* soft-cap negative, NaN or infinite,
                                       or above FLT_MAX in float32 */
    SDPA_ERR_HEAD_GROUPING = 12,    /* Hq is not a multiple of Hkv */
    SDPA_ERR_BAD_KV_LEN = 13,       /* kv_lens[b] outside [0, Tk] */
    SDPA_ERR_BAD_CAUSAL = 14,       /* causal is not an SDPA_CAUSAL_* value */
    SDPA_ERR_BAD_FLAGS = 15,        /* unknown flag bits */
    SDPA_ERR_UNKNOWN_OPTION = 16,   /* option id not an SDPA_OPT_* value */
    SDPA_ERR_BAD_OPTION_VALUE = 17, /* option value outside its range */
    SDPA_ERR_FULLY_MASKED_ROW = 18, /* a query row has no allowed key */
    SDPA_ERR_NONFINITE = 19,     /* a logit is NaN or +inf (during compute) */
    SDPA_ERR_OUT_OF_MEMORY = 20, /* the allocator returned NULL */
    SDPA_ERR_UNSUPPORTED = 21,   /* forced kernel/path not usable here */
    /* 1.1 */
    SDPA_ERR_BAD_WINDOW = 22,       /* window extents below -1, or set
                                       without SDPA_FLAG_WINDOW */
    SDPA_ERR_BAD_ALIBI = 23,        /* an ALiBi slope (or max_bias) NaN or
                                       infinite */
    SDPA_ERR_BAD_SINK = 24,         /* a sink logit NaN or infinite */
    SDPA_ERR_BAD_LOGITS_STAGE = 25, /* logits_stage not an SDPA_LOGITS_*
                                       value, or set without the logits
                                       tensor (or the tensor without it) */
    /* 1.1 */
    SDPA_ERR_BAD_PAGE = 26,     /* paged K/V: a block_table entry outside
                                   the pool, pages_per_seq or
                                   block_table_stride out of range, or set
                                   without block_table */
    SDPA_ERR_PARALLEL_FOR = 27, /* the caller's parallel-for broke its
                                   contract (during compute) */
    /* 1.2: ragged batches (seqs, q_offsets, kv_offsets) */
    SDPA_ERR_BAD_RAGGED = 28,    /* the ragged fields disagree (seqs without
                                    q_offsets or the reverse, seqs < 0,
                                    packed tensors whose N is not 1) or
                                    meet an argument a ragged call does
                                    not take */
    SDPA_ERR_OFFSETS_START = 29, /* q_offsets[0] or kv_offsets[0] is not 0 */
    SDPA_ERR_OFFSETS_ORDER = 30, /* an offset is below the one before it */
    SDPA_ERR_OFFSETS_END = 31,   /* the last offset (entry seqs) is not the
                                    packed tensor's T extent */
    SDPA_ERR_BUSY = 32,          /* 1.2: the context is inside a call (a
                                    call on it from its parallel-for or a
                                    task, or from a second thread) */
    SDPA_ERR_BAD_DROPOUT = 33,   /* 1.2: dropout_p NaN, infinite, negative
                                    or not below 1 */
    SDPA_ERR_BAD_KV_SCALE = 34   /* 1.2: a k_scale / v_scale value NaN,
                                    infinite or not above 0 (k_scale: or
                                    0 in float32 times the scale), or
                                    scales given for K/V that are not
                                    FP8 */
};

/* A short fixed description of a status code: "success" for SDPA_OK, a
 * fixed text for every SDPA_ERR_* value and "unknown status" for any other
 * int, negative ones included. Returns a static string, never NULL. See
 * sdpa_status_string(3). */
SDPA_API const char *sdpa_status_string(int status);

/* Run-time version: SDPA_VERSION_NUMBER and SDPA_VERSION_STRING of the
 * library actually loaded, which may be newer than this header. Return
 * MAJOR * 10000 + MINOR * 100 + PATCH, and a static "MAJOR.MINOR.PATCH".
 * See sdpa_version_number(3). */
SDPA_API unsigned sdpa_version_number(void);
SDPA_API const char *sdpa_version_string(void);

/* ------------------------------------------------------------------------ */
/* Context: options that persist between calls, and the scratch buffers.     */
/* ------------------------------------------------------------------------ */
typedef struct sdpa_ctx sdpa_ctx;

/* Caller allocator. alloc must return memory aligned to at least `alignment`
 * (a power of two, at most 4096) or NULL; free receives the same size. */
typedef struct sdpa_allocator {
    size_t struct_size; /* sizeof(sdpa_allocator); at least 32 (1.0) */
    void *(*alloc)(void *opaque, size_t size, size_t alignment);
    void (*free)(void *opaque, void *ptr, size_t size);
    void *opaque;
#ifdef SDPA_ABI_TEST_APPENDED_FIELD
    uint64_t abi_test_appended; /* never defined outside libsdpa's ABI test */
#endif
} sdpa_allocator;

/* Create a context with the C library allocator. *out is set to NULL on
 * failure. The SDPA_KERNEL environment variable is read here (see the row
 * kernels below). Returns SDPA_OK, SDPA_ERR_NULL_POINTER (out is NULL),
 * SDPA_ERR_OUT_OF_MEMORY, or SDPA_ERR_BAD_OPTION_VALUE / SDPA_ERR_UNSUPPORTED
 * for an SDPA_KERNEL that names no kernel / one this CPU lacks. See
 * sdpa_ctx_create(3). */
SDPA_API int sdpa_ctx_create(sdpa_ctx **out);
/* Create a context whose every allocation (itself included) goes through
 * `allocator`, which is copied. Returns what sdpa_ctx_create returns, and
 * SDPA_ERR_NULL_POINTER for a NULL allocator, alloc or free,
 * SDPA_ERR_STRUCT_SIZE / SDPA_ERR_STRUCT_TAIL for its struct_size. See
 * sdpa_ctx_create_with_allocator(3). */
SDPA_API int sdpa_ctx_create_with_allocator(sdpa_ctx **out,
                                            const sdpa_allocator *allocator);
/* Free the context, its scratch and its worker threads. NULL is accepted.
 * See sdpa_ctx_destroy(3). */
SDPA_API void sdpa_ctx_destroy(sdpa_ctx *ctx);

/* The message of the last failed call on this context (sdpa_forward,
 * sdpa_forward_workspace, sdpa_ctx_set_int and the other functions that
 * take a non-const context): what and where; "" after a successful one
 * (sdpa_ctx_get_int, which takes a const context, leaves it as it is).
 * Never NULL (for a NULL ctx, a fixed message). See
 * sdpa_ctx_last_error(3). */
SDPA_API const char *sdpa_ctx_last_error(const sdpa_ctx *ctx);

/* Option ids: explicitly numbered and frozen. 0 is never an option. Every
 * option's default is value 0 or the value stated. */
enum {
    SDPA_OPT_EMPTY_ROWS = 1,    /* SDPA_EMPTY_ROWS_*; default ERROR */
    SDPA_OPT_NUM_THREADS = 2,   /* worker threads, 1..256, or
                                   SDPA_NUM_THREADS_ALL; default 1 */
    SDPA_OPT_KERNEL = 3,        /* SDPA_KERNEL_*; default AUTO */
    SDPA_OPT_PATH = 4,          /* SDPA_PATH_*; default AUTO */
    SDPA_OPT_SCRATCH_LIMIT = 5, /* score bytes per worker the materialised
                                   path aims for; 0 = auto (2 MiB) */
    SDPA_OPT_BLOCK_Q = 6,       /* query rows per work item (materialised,
                                   tiled); 0 = auto, at most 2^20 */
    SDPA_OPT_BLOCK_K = 7        /* keys per block (tiled) or per chunk
                                   (decode); 0 = auto, at most 2^20 */
    /* 8..999 reserved for stable options; 1000.. for experimental ones. */
};

enum { SDPA_EMPTY_ROWS_ERROR = 0, SDPA_EMPTY_ROWS_ZERO = 1 };
/* Row kernels (the softmax pass). AUTO picks the widest the CPU runs:
 * AVX512 (F, DQ, BW, VL), then AVX2 (with FMA), then PORTABLE C.
 *
 * The environment variable SDPA_KERNEL chooses the kernel a new context
 * starts with, without recompiling (as BLIS_ARCH_TYPE does for BLIS):
 * "portable", "avx2", "avx512" or "auto", in any case; read by
 * sdpa_ctx_create*, shown by `sdpa --version`. SDPA_OPT_KERNEL set through
 * the API still wins. A name it does not know makes sdpa_ctx_create* fail
 * with SDPA_ERR_BAD_OPTION_VALUE, a kernel this CPU lacks with
 * SDPA_ERR_UNSUPPORTED: a forced kernel is never silently replaced. */
enum {
    SDPA_KERNEL_AUTO = 0,
    SDPA_KERNEL_PORTABLE = 1,
    SDPA_KERNEL_AVX2 = 2,
    SDPA_KERNEL_AVX512 = 3
};
enum {
    SDPA_PATH_AUTO = 0,
    SDPA_PATH_MATERIALISED = 1, /* whole Tq×Tk score rows per slice */
    SDPA_PATH_TILED = 2,        /* key blocks with an online softmax */
    SDPA_PATH_DECODE = 3,       /* few queries per KV head, split keys;
                                   1.1: read by the library's own
                                   streaming kernels */
    SDPA_PATH_DECODE_BLAS = 4   /* 1.1: the decode path with CBLAS gemv /
                                   gemm products (1.0's decode path) */
};

/* Set / get an option. Unknown ids give SDPA_ERR_UNKNOWN_OPTION, values out
 * of range SDPA_ERR_BAD_OPTION_VALUE (the option keeps its value). Setting
 * SDPA_OPT_KERNEL to AVX2 on a CPU without AVX2+FMA+F16C, or to AVX512 on
 * one without AVX-512 F/DQ/BW/VL and F16C, gives SDPA_ERR_UNSUPPORTED.
 * Getting SDPA_OPT_KERNEL returns the kernel that AUTO resolves to; later
 * 1.x releases may add kernels (new values), so a program should accept a
 * value it does not know there. Both return SDPA_OK or the status; get
 * writes *value only on success and stores no message. See
 * sdpa_ctx_set_int(3). */
SDPA_API int sdpa_ctx_set_int(sdpa_ctx *ctx, int option, int64_t value);
SDPA_API int sdpa_ctx_get_int(const sdpa_ctx *ctx, int option, int64_t *value);

/* SDPA_OPT_NUM_THREADS value (1.1): as many workers as the CPUs this
 * process may run on (sched_getaffinity, read at each call; at most 256).
 * sdpa_ctx_get_int returns it as set. */
enum { SDPA_NUM_THREADS_ALL = -1 };

/* The caller's own threads (1.1). An engine with a thread pool of its own
 * (XNNPACK's pthreadpool, ggml's threadpool) hands libsdpa a parallel-for,
 * which a context then uses instead of starting workers of its own:
 *
 *   parallel_for(user, items, task, task_arg) must call
 *   task(task_arg, i, worker) exactly once for every i in [0, items), from
 *   any of its threads, where worker in [0, workers) names the thread
 *   making the call (no two calls with the same worker at the same time:
 *   each worker has its own scratch), and return after the last call has
 *   returned. It may run everything on the calling thread (worker 0).
 *
 * Items are computed alike whichever worker takes them: results are
 * bitwise identical to those of the context's own workers. A call whose
 * plan has one item, or whose work is better left on one thread, does not
 * call it. SDPA_OPT_NUM_THREADS is ignored while a parallel-for is set;
 * scratch is held for `workers` workers. A parallel-for that breaks the
 * contract (an item called twice or never, a worker index outside
 * [0, workers)) makes the call fail with SDPA_ERR_PARALLEL_FOR, outputs
 * unspecified: the context records which items ran (one bit per item,
 * kept and grown like its scratch). Setting parallel_for NULL returns to the
 * context's own workers. SDPA_ERR_BAD_OPTION_VALUE for workers outside [1,
 * 256]. (1.2) The parallel-for and its tasks must not call into the
 * context: such a call (forward, workspace, backward, merge, the layer,
 * the setters) is refused with SDPA_ERR_BUSY and changes nothing, and the
 * call in progress goes on. A task call made after the parallel-for
 * returned is ignored (nothing is read or written through it; the call
 * that handed out the task returns only when no task call of its own is
 * running); task_arg stays valid until the context is destroyed, and
 * names its own parallel-for for the next 255 it makes (a call later
 * still counts as one of the parallel-for in progress). */
typedef void (*sdpa_task_fn)(void *task_arg, int64_t item, int worker);
typedef void (*sdpa_parallel_for_fn)(void *user, int64_t items,
                                     sdpa_task_fn task, void *task_arg);
/* Hand ctx the caller's parallel-for and its `workers` worker indices, as
 * above (NULL: back to the context's own workers). Returns SDPA_OK,
 * SDPA_ERR_NULL_POINTER (ctx) or SDPA_ERR_BAD_OPTION_VALUE; the context
 * keeps what it had on an error. See sdpa_ctx_set_parallel_for(3). */
SDPA_API int sdpa_ctx_set_parallel_for(sdpa_ctx *ctx,
                                       sdpa_parallel_for_fn parallel_for,
                                       void *user, int workers);

/* ------------------------------------------------------------------------ */
/* Tensors and the forward call.                                             */
/* ------------------------------------------------------------------------ */
/* Element types. The half types (1.1) are storage types of sdpa_forward's
 * tensors, computed in float32 (see sdpa_forward_args.kv_dtype); the
 * quantized types (1.2) are storage types of its k and v only, computed in
 * float32 on their exactly decoded values (docs/STORAGE.md):
 *   SDPA_FP8_E4M3  OCP 8-bit float E4M3 (sign, 4 exponent bits of bias 7,
 *                  3 mantissa bits; subnormals; no infinities; S.1111.111
 *                  is NaN; largest 448), one byte a value; each KV head's
 *                  values times its k_scale / v_scale (vLLM's scales);
 *   SDPA_FP8_E5M2  OCP E5M2 (bias 15: the top byte of a float16, with its
 *                  infinities and NaNs; largest 57344), likewise;
 *   SDPA_Q8_0      ggml's block_q8_0, bit for bit: 32 values in 34 bytes,
 *                  a float16 d then 32 int8 q: value i = d · q[i];
 *   SDPA_Q4_0      ggml's block_q4_0: 32 values in 18 bytes, a float16 d
 *                  then 16 bytes b: value i = d · ((b[i] & 15) − 8) and
 *                  value i + 16 = d · ((b[i] >> 4) − 8) for i < 16.
 * A block type's row (Dk or Dv values) is whole blocks: D a multiple of
 * 32; its strides still count values (multiples of 32: element
 * n·s0 + h·s1 + t·s2 is the first value of block (n·s0 + h·s1 + t·s2) / 32
 * of the array), so a llama.cpp cache [Tk, Hkv, D] of blocks is
 * sdpa_tensor_bthd(data, 1, Hkv, Tk, D) as for any type. */
enum {
    SDPA_FLOAT32 = 1,
    SDPA_FLOAT64 = 2,
    SDPA_FLOAT16 = 3,  /* 1.1: IEEE 754 binary16 */
    SDPA_BFLOAT16 = 4, /* 1.1: bfloat16 (the top half of a float32) */
    SDPA_FP8_E4M3 = 5, /* 1.2: K/V only, see above */
    SDPA_FP8_E5M2 = 6, /* 1.2: K/V only */
    SDPA_Q8_0 = 7,     /* 1.2: K/V only, blocks of 32 values */
    SDPA_Q4_0 = 8      /* 1.2: K/V only, blocks of 32 values */
};
enum {
    SDPA_CAUSAL_NONE = 0,
    SDPA_CAUSAL_TOP_LEFT = 1,
    SDPA_CAUSAL_BOTTOM_RIGHT = 2
};
/* Flags of sdpa_forward_args.flags; unknown bits are an error. */
enum {
    SDPA_FLAG_MASK_NONZERO_ALLOWS = 1u << 0,
    SDPA_FLAG_WINDOW = 1u << 1 /* 1.1: window_left / window_right apply */
};
/* The stage whose scores the optional logits output holds (1.1); ONNX
 * Attention's qk_matmul_output_mode 0, 1 and 2 (its mode 3, the softmax,
 * is the weights output). */
enum {
    SDPA_LOGITS_SCALED = 1, /* scale · <q, k>                    (ONNX 0) */
    SDPA_LOGITS_CAPPED = 2, /* after the soft-cap                (ONNX 1) */
    SDPA_LOGITS_MASKED = 3  /* after bias and ALiBi, forbidden
                               keys -inf: what the softmax takes (ONNX 2) */
};

/* Converts count values from src (of src_type) to dst (of dst_type), 1.2:
 * SDPA_FLOAT32 to SDPA_FLOAT16 or SDPA_BFLOAT16 rounds to nearest even
 * (float16 overflows to infinity, NaNs stay NaNs), either half type to
 * SDPA_FLOAT32 is exact, float32 to float32 copies; (1.2) any quantized
 * type to SDPA_FLOAT32 decodes exactly (FP8 codes without a scale; count
 * a multiple of 32 for Q8_0 and Q4_0, whose src is count / 32 blocks),
 * the values the library computes with. The bits are those the
 * library computes with on every CPU (F16C or AVX-512 where present), so
 * an engine can convert its caches and outputs without compiler
 * extensions. SDPA_ERR_BAD_DIM (count < 0, or not whole blocks),
 * SDPA_ERR_BAD_DTYPE (any other
 * pair of types), SDPA_ERR_NULL_POINTER (dst or src NULL with count > 0),
 * SDPA_ERR_OVERFLOW (the bytes pass the address space) or
 * SDPA_ERR_OVERLAP (dst and src share a byte), checked in this order;
 * nothing is written then. No context: any thread may call it. See
 * sdpa_convert(3). */
SDPA_API int sdpa_convert(int dst_type, void *dst, int src_type,
                          const void *src, int64_t count);

/* A rank-4 strided view in logical order (N, H, T, D); strides count
 * elements, not bytes. data == NULL marks an optional tensor as absent.
 * Inputs are never written through data. */
typedef struct sdpa_tensor {
    void *data;
    int64_t shape[4];
    int64_t stride[4];
} sdpa_tensor;

/* Arguments of one forward call. Zero-initialise, then set struct_size
 * (SDPA_FORWARD_ARGS_INIT does both); a zero field means "absent"/"default".
 *
 * Growth (docs/ABI.md): later 1.x releases only append fields, whose zero
 * value means "as before". A struct_size below 624 (1.0's size) is
 * SDPA_ERR_STRUCT_SIZE; a program built against an older header passes its
 * smaller size and the library reads no byte past it; a program built
 * against a newer header runs on an older library as long as the fields that
 * library does not know are zero (else SDPA_ERR_STRUCT_TAIL).
 *
 *   q       [N, Hq,  Tq, Dk]   dtype
 *   k       [N, Hkv, Tk, Dk]   dtype
 *   v       [N, Hkv, Tk, Dv]   dtype
 *   mask    [N|1, Hq|1, Tq|1, Tk|1] uint8, optional
 *   bias    [N|1, Hq|1, Tq|1, Tk|1] dtype, optional, may hold -inf
 *   out     [N, Hq,  Tq, Dv]   dtype, written
 *   weights [N, Hq,  Tq, Tk]   dtype, optional output: the probabilities
 *   lse     [N, Hq,  Tq, 1]    dtype, optional output: natural log-sum-exp
 *
 *   logits  [N, Hq,  Tq, Tk]   dtype, optional output (1.1): the scores
 *                              at logits_stage; -inf at forbidden keys
 *
 * Innermost strides of q, k, v, out, weights and logits must be 1; mask and
 * bias take any non-negative stride[3]; stride[3] of lse is ignored. K and V
 * may be broadcast over N with stride 0.
 *
 * Fields appended in 1.1 (struct_size 912; zero = as in 1.0). Each row i of
 * batch item b has a diagonal d_i = i under SDPA_CAUSAL_TOP_LEFT and
 * d_i = i + (L_b - Tq) otherwise (bottom-right, FlashAttention's anchor; the
 * two agree when Tq = L_b):
 *   window   with SDPA_FLAG_WINDOW, key j is forbidden when j - d_i <
 *            -window_left or j - d_i > window_right; -1 = unbounded on that
 *            side (left -1, right 0 is causal). Keys and tiles outside the
 *            band are never computed: a call costs O(Tq · window).
 *   alibi    alibi_slopes: Hq finite slopes; -slope_h · |j - d_i| is added
 *            to each logit after the soft-cap, with the bias
 *            (sdpa_alibi_slopes fills the standard ones).
 *   sinks    Hq finite sink logits sigma_h: a key with no value that joins
 *            every row's softmax: the denominator gains exp(sigma_h - m), m
 *            the max over the row's logits and sigma_h; lse includes it;
 *            the weights of a row sum to 1 minus the sink's share. A row
 *            whose keys are all forbidden has output 0, lse sigma_h and
 *            weights 0: it is not an empty row.
 *   logits   the scores of the allowed keys at logits_stage (SDPA_LOGITS_*),
 *            -inf at forbidden ones; like the weights, it needs the
 *            materialised path.
 *   max_weight, entropy  per-row diagnostics of the softmax without T×T
 *            memory, on every path ([N, Hq, Tq, 1] of the dtype, stride[3]
 *            ignored, like lse): the largest weight max_j p_ij and the
 *            entropy H_i = -Σ_j p_ij log p_ij = lse_i - Σ_j p_ij s_ij in
 *            nats. A sink counts as one more outcome of the distribution,
 *            of weight p_s = exp(sigma_h - lse_i): max_weight is the
 *            larger of max_j p_ij and p_s, H_i = lse_i - Σ_j p_ij s_ij -
 *            p_s sigma_h; a sink row whose keys are all forbidden reports
 *            1 and 0. A row with no allowed key and no sink (zero-row
 *            policy) reports 0 and 0.
 *
 * Storage types and paged K/V (also 1.1; struct_size 912):
 *   types    dtype is the storage type of q and out; kv_dtype (0: dtype)
 *            that of k and v, bias_dtype (0: dtype) that of the bias. Any
 *            mixture of SDPA_FLOAT32, SDPA_FLOAT16 and SDPA_BFLOAT16 is
 *            computed in float32 (half values are widened exactly; out is
 *            rounded to nearest even once); SDPA_FLOAT64 mixes with nothing.
 *            The optional outputs (weights, lse, logits, max_weight,
 *            entropy) are in the compute type: float32 as soon as one
 *            tensor is a half type, as FlashAttention's lse. An output that
 *            rounds to infinity in its half type (|x| >= 65520 in float16;
 *            up to that it rounds to 65504) is SDPA_ERR_NONFINITE.
 *   paging   with block_table, k and v are pools of pages (vLLM's and
 *            FlashAttention's block_table convention): k is
 *            [P, Hkv, page, Dk] and v [P, Hkv, page, Dv] with P pages of
 *            `page` keys, any strides (a page may be [page, Hkv, D] in
 *            memory as in vLLM, or [Hkv, page, D]); page
 *            block_table[b * stride + c] holds keys [c * page, (c + 1) *
 *            page) of batch item b. The logical key length is
 *            Tk = pages_per_seq * page (mask, bias, weights and logits are
 *            [.., Tk]); only the pages that hold the item's valid keys
 *            (kv_lens[b], else Tk) are read, and their numbers must lie in
 *            [0, P) (SDPA_ERR_BAD_PAGE); the others may hold anything
 *            (-1 for unused slots is fine).
 *
 * Ragged batches (1.2; struct_size 936): seqs sequences of their own
 * lengths in one call, in FlashAttention's varlen convention
 * (docs/RAGGED.md maps FlashAttention's, FlashInfer's and vLLM's
 * arguments). q_offsets holds seqs + 1 non-decreasing values from 0 to
 * total_q: sequence b owns the packed query rows [q_offsets[b],
 * q_offsets[b + 1]) of q, out, lse, max_weight and entropy, which are
 * [1, Hq, total_q, .] views with any strides ([total_q, Hq, D] memory is
 * sdpa_tensor_bthd(data, 1, Hq, total_q, D)); its Tq_b may be 0 (nothing
 * is read or written for it). Its keys, one of three ways:
 *   packed   with kv_offsets (the same rules, to total_k): k and v are
 *            [1, Hkv, total_k, D] and the sequence's keys are their rows
 *            [kv_offsets[b], kv_offsets[b + 1]), Tk_b of them (may be 0);
 *   batched  without: k and v are [seqs, Hkv, Tk, D] (or [1, ...] shared
 *            by every sequence) and sequence b reads item b; Tk_b = Tk;
 *   paged    with block_table: row b of the table, as for batch item b.
 * kv_lens (optional, seqs values) gives each sequence's valid keys L_b in
 * [0, Tk_b]. Every rule above applies to each sequence with its own
 * Tq_b, Tk_b and L_b (the bottom-right diagonal, windows, ALiBi): its
 * results are bitwise those of a call on its own views alone (N = 1,
 * q_offsets NULL) on the same context, each sequence on the path such a
 * call takes (few query rows per KV head: decode, else tiled), all of
 * them in one parallel run whose items are spread over the workers.
 * mask, bias, weights and logits are refused (SDPA_ERR_BAD_RAGGED), so
 * is kv_offsets with block_table. A message about a sequence names it
 * ("sequence 3") and its rows relative to it. With dropout, sequence b
 * draws its mask as batch item b would (b the sequence index, rows and
 * keys relative to the sequence): each sequence's results are bitwise
 * those of its own call made with dropout_offset + b·Hq.
 *
 * Dropout (1.2; struct_size 960): dropout_p in [0, 1) (0 = none; NaN,
 * infinite, negative or >= 1 is SDPA_ERR_BAD_DROPOUT) drops each weight
 * with probability dropout_p and scales the kept ones by 1/(1 − dropout_p),
 * as torch.nn.functional.scaled_dot_product_attention does in training:
 *   out_i = Σ_j Z_ij·c·P_ij v_j,  c = 1/(1 − dropout_p)
 * computed in the compute type (float: 1.0f / (1.0f − (float)dropout_p);
 * double for float64), Z_ij in {0, 1} the mask. P is the softmax without
 * dropout: lse, max_weight and entropy are those of the undropped softmax,
 * the logits output is unchanged, the weights output holds the dropped
 * and scaled weights Z_ij·c·P_ij (what multiplies V, as
 * torch.nn.MultiheadAttention returns them); a sink is never dropped (it
 * has no value). The mask is a function of (dropout_seed, dropout_offset)
 * and the element's index, the same on every path, kernel set and thread
 * count (the paths differ in rounding only, as without dropout), and
 * sdpa_backward regenerates it (it is never stored). Element (b, h, i, j)
 * (batch item, query head, query row in [0, Tq), logical key in [0, Tk))
 * is kept iff
 *   r >= floor(dropout_p · 2^32),  r = word (j mod 4) of
 *   Philox4x32-10(key = (lo32(dropout_seed), hi32(dropout_seed)),
 *                 counter = (j / 4, i, lo32(s), hi32(s)))
 * with s = dropout_offset + b·Hq + h (mod 2^64), Random123's Philox (10
 * rounds, multipliers 0xD2511F53 and 0xCD9E8D57, key bumps 0x9E3779B9 and
 * 0xBB67AE85). Successive calls with one seed should advance
 * dropout_offset by at least N·Hq (PyTorch's Philox offset) so that their
 * masks are independent. Dropout needs Tq < 2^32 and Tk < 2^34. sdpa_merge
 * combines dropped partial outputs unchanged (they are linear in the
 * weights).
 *
 * Quantized K/V (1.2; struct_size 976): kv_dtype may be SDPA_FP8_E4M3,
 * SDPA_FP8_E5M2, SDPA_Q8_0 or SDPA_Q4_0 (see the element types above) with
 * dtype SDPA_FLOAT32, SDPA_FLOAT16 or SDPA_BFLOAT16; the call computes in
 * float32 over the decoded values (exact for every code: Q8_0 and Q4_0's
 * d·q is exact in float32), as on the half types, paged or not, on every
 * path. With an FP8 kv_dtype, k_scale and v_scale (each optional: NULL
 * means 1) hold one finite scale > 0 per KV head (a per-tensor scale is
 * Hkv equal values; scale · k_scale[h] must not round to 0 in float32):
 * key row j of KV head h is k_scale[h] times its decoded values, exactly
 * (the product is never rounded: the scale multiplies the head's scores
 * and outputs in float32 instead). Other kv_dtypes take no scales
 * (SDPA_ERR_BAD_KV_SCALE). A NaN code or NaN d at a key a row reads makes
 * its logit or output NaN: SDPA_ERR_NONFINITE with the row, as for any
 * type; so does an infinity (E5M2's, an infinite d) in V, while one in K
 * gives a +inf or NaN logit (that error) or a -inf one, which gives the
 * key no weight as for any type. sdpa_backward and libsdpa-mpi do not take
 * quantized K/V (SDPA_ERR_BAD_DTYPE). */
typedef struct sdpa_forward_args {
    size_t struct_size;     /* sizeof(sdpa_forward_args) */
    int dtype;              /* SDPA_FLOAT*: the storage type of q and out
                               (see "Storage types" above) */
    int causal;             /* SDPA_CAUSAL_* */
    uint32_t flags;         /* SDPA_FLAG_* */
    double scale;           /* 0 = 1/sqrt(Dk); else finite and > 0 */
    double softcap;         /* 0 = off; else finite and > 0 */
    const int64_t *kv_lens; /* optional, N valid key lengths in [0, Tk] */
    sdpa_tensor q, k, v;
    sdpa_tensor mask, bias;
    sdpa_tensor out, weights, lse;
    /* 1.1 (see above) */
    int64_t window_left;        /* SDPA_FLAG_WINDOW: keys left of the
                                   diagonal; -1 = unbounded */
    int64_t window_right;       /* SDPA_FLAG_WINDOW: keys right of it */
    const double *alibi_slopes; /* optional, Hq ALiBi slopes */
    const double *sinks;        /* optional, Hq sink logits */
    sdpa_tensor logits;         /* optional output: scores at a stage */
    int logits_stage;           /* SDPA_LOGITS_*, with logits only */
    sdpa_tensor max_weight;     /* optional output [N, Hq, Tq, 1]: the
                                   largest weight of each row */
    sdpa_tensor entropy;        /* optional output [N, Hq, Tq, 1]: each
                                   row's entropy in nats */
    /* 1.1, storage types and paging (see above) */
    int kv_dtype;               /* storage type of k and v; 0 = dtype */
    int bias_dtype;             /* storage type of bias; 0 = dtype */
    const int32_t *block_table; /* optional: paged k and v, [N, pages_per_seq]
                                   page numbers */
    int64_t pages_per_seq;      /* with block_table: its columns */
    int64_t block_table_stride; /* with block_table: entries from one row to
                                   the next; 0 = pages_per_seq */
    /* 1.2, ragged batches (see above) */
    int64_t seqs;              /* ragged: the sequence count; 0 = a
                                  rectangular batch */
    const int64_t *q_offsets;  /* ragged: seqs + 1 offsets of the sequences'
                                  query rows (cu_seqlens_q) */
    const int64_t *kv_offsets; /* ragged, optional: seqs + 1 offsets of
                                  their keys in packed k and v
                                  (cu_seqlens_k) */
    /* 1.2, dropout on the weights (see above) */
    double dropout_p;        /* probability of dropping a weight, in
                                [0, 1); 0 = no dropout */
    uint64_t dropout_seed;   /* Philox key: the generator's seed */
    uint64_t dropout_offset; /* Philox stream of batch item 0, head 0;
                                advance it by N·Hq or more per call */
    /* 1.2, quantized K/V (see "Quantized K/V" above) */
    const float *k_scale; /* FP8 k: Hkv scales, one per KV head; NULL = 1 */
    const float *v_scale; /* FP8 v: likewise */
#ifdef SDPA_ABI_TEST_APPENDED_FIELD
    uint64_t abi_test_appended; /* never defined outside libsdpa's ABI test */
#endif
} sdpa_forward_args;

#define SDPA_FORWARD_ARGS_INIT                                                 \
    {                                                                          \
        .struct_size = sizeof(sdpa_forward_args)                               \
    }

/* Compute attention for the whole batch: out, and the optional outputs
 * args asks for, from q, k, v and the options of args, as the contract at
 * the top of this header states. Returns SDPA_OK, or a status code with
 * the outputs untouched, except SDPA_ERR_NONFINITE and
 * SDPA_ERR_PARALLEL_FOR (found during the computation: the outputs then
 * hold unspecified values); sdpa_ctx_last_error() says what and where. See
 * sdpa_forward(3). */
SDPA_API int sdpa_forward(sdpa_ctx *ctx, const sdpa_forward_args *args);

/* The standard ALiBi slopes for `heads` heads (1.1): 2^(-max_bias·(h+1)/n)
 * for the first n heads, n the largest power of two <= heads, then the odd
 * ones of the 2n-head sequence, 2^(-max_bias·(2(h-n)+1)/(2n)), for the rest
 * (Press et al.; ggml's max_bias). max_bias = 0 means 8, the paper's value.
 * SDPA_ERR_BAD_DIM for heads <= 0, SDPA_ERR_NULL_POINTER for a NULL
 * slopes, SDPA_ERR_BAD_ALIBI for a negative or non-finite max_bias; nothing
 * is written then. Returns SDPA_OK on success. See sdpa_alibi_slopes(3). */
SDPA_API int sdpa_alibi_slopes(int64_t heads, double max_bias, double *slopes);

/* ------------------------------------------------------------------------ */
/* Positional encodings (1.1).                                               */
/* ------------------------------------------------------------------------ */

/* The sinusoidal table of "Attention Is All You Need" as the textbook unit
 * "32.2 Scaled dot-product attention" defines it: for t = 0..tokens-1 at
 * position pos = offset + t, row t holds dim values, table[t·dim + 2r] =
 * sin(pos / base^(2r/dim)) and table[t·dim + 2r + 1] = cos(pos / base^(2r/dim))
 * (an odd dim ends with a sin). base 0 = 10000, else finite and >= 1
 * (SDPA_ERR_BAD_SCALE). dtype SDPA_FLOAT32 or SDPA_FLOAT64; the table is
 * computed in double, then rounded. Add it to the token embeddings
 * (X~_t = X_t + p_t): attention alone is permutation-equivariant. Returns
 * SDPA_OK, or SDPA_ERR_BAD_DTYPE, _BAD_DIM, _NULL_POINTER, _BAD_SCALE or
 * _OVERFLOW with nothing written. See sdpa_sinusoidal_table(3). */
SDPA_API int sdpa_sinusoidal_table(int dtype, int64_t tokens, int64_t dim,
                                   int64_t offset, double base, void *table);

/* Rotary embeddings (RoPE), in place on x, a [N, H, T, D] view of the dtype
 * (q or k of a call, before it). Row t of batch item n is rotated by the
 * angles pos·base^(-2r/rotary_dim), r = 0..rotary_dim/2-1, pos =
 * positions ? positions[n·T + t] : t (a KV-cache step passes its own
 * positions). Each pair (a, b) becomes (a·cos θ − b·sin θ, a·sin θ +
 * b·cos θ); the pairs are (r, r + rotary_dim/2) in the half-split style of
 * GPT-NeoX and Llama (SDPA_ROPE_HALF), (2r, 2r + 1) in the interleaved
 * style of GPT-J (SDPA_ROPE_INTERLEAVED). base 0 = 10000, else finite
 * and >= 1 (SDPA_ERR_BAD_SCALE): every angle is then at most |pos|; rotary_dim
 * 0 = D, else even and at most D (the rest is left as is). Strides of x: non-
 * negative, innermost 1, no element reached twice. Angles are computed in
 * double. Returns SDPA_OK, or SDPA_ERR_BAD_DTYPE, _NULL_POINTER, _BAD_DIM,
 * _BAD_OPTION_VALUE (style, rotary_dim), _BAD_SCALE, _BAD_STRIDE or
 * _OVERFLOW with x untouched. See sdpa_rope_apply(3). */
enum { SDPA_ROPE_HALF = 1, SDPA_ROPE_INTERLEAVED = 2 };
SDPA_API int sdpa_rope_apply(int dtype, sdpa_tensor x, const int64_t *positions,
                             int style, double base, int64_t rotary_dim);

/* ------------------------------------------------------------------------ */
/* The multi-head attention layer (1.1).                                     */
/* ------------------------------------------------------------------------ */

/* Positional encoding the layer applies. */
enum {
    SDPA_POS_NONE = 0,
    SDPA_POS_SINUSOIDAL = 1,      /* table added to x_q and x_kv */
    SDPA_POS_ROPE_HALF = 2,       /* RoPE on the projected Q and K */
    SDPA_POS_ROPE_INTERLEAVED = 3 /* RoPE, GPT-J's pairs */
};

/* Arguments of one layer call; zero-initialise and set struct_size
 * (SDPA_MHA_ARGS_INIT). Weights are row-major matrices of the dtype, applied
 * as X W (so a PyTorch nn.Linear weight, [out, in], is passed transposed:
 * docs/LAYER.md):
 *
 *   x_q  [N, 1, Tq, d_model]   x_kv [N, 1, Tk, d_model] (x_kv.data NULL:
 *                              self-attention on x_q)
 *   w_q  [d_model, Hq·dk]      w_k  [d_model, Hkv·dk]
 *   w_v  [d_model, Hkv·dv]     w_o  [Hq·dv, d_model]
 *   b_q, b_k, b_v, b_o         optional biases of Hq·dk, Hkv·dk, Hkv·dv,
 *                              d_model values
 *   y    [N, 1, Tq, d_model]   written: Concat(head_1..head_Hq) W_O + b_o
 *
 * Head h of Q is columns h·dk..(h+1)·dk-1 of X W_Q (likewise K, V); the
 * concatenation puts head h's output at columns h·dv.. of the W_O input.
 * attn, when not NULL, carries the options of the attention call (causal,
 * flags, scale, soft-cap, kv_lens, mask, bias, window, ALiBi, sinks and
 * the optional weights, lse, max_weight, entropy outputs); its q, k, v, out
 * and logits must be absent (the layer makes them). The projected Q, K, V
 * and the heads' outputs live in the context's scratch: a repeated call
 * allocates nothing.
 *
 * Half-precision storage (1.2): dtype SDPA_FLOAT16 or SDPA_BFLOAT16 is the
 * type of x_q, x_kv, the weights, the biases and y, computed in float32:
 * each call widens them exactly into float32 copies in the layer's scratch
 * (a repeated call still allocates nothing), runs the float32 layer on the
 * copies and rounds y once to nearest even. Promise: y is bitwise the
 * float32 layer's y (same context) on the widened inputs, rounded once.
 * attn follows sdpa_forward's rules for a half dtype: its dtype and
 * kv_dtype are 0 or the layer's dtype, the bias is of bias_dtype (0: the
 * layer's dtype; SDPA_FLOAT32 also accepted), the mask is uint8, and the
 * optional outputs weights, lse, max_weight and entropy are float32, the
 * compute type (bitwise the float32 layer's). A finite y that rounds to
 * infinity (|y| >= 65520 in float16) is SDPA_ERR_NONFINITE with y
 * untouched; the attention's outputs are written by then. */
typedef struct sdpa_mha_args {
    size_t struct_size; /* sizeof(sdpa_mha_args) */
    int dtype;          /* SDPA_FLOAT32 or SDPA_FLOAT64, or (1.2) a half
                           type computed in float32 (see above) */
    int positions;      /* SDPA_POS_* */
    int64_t heads_q;    /* Hq, required */
    int64_t heads_kv;   /* Hkv; 0 = Hq */
    int64_t dim_k;      /* dk; 0 = d_model / Hq */
    int64_t dim_v;      /* dv; 0 = dk */
    double pos_base;    /* sinusoidal / RoPE base; 0 = 10000, else >= 1 */
    int64_t pos_offset; /* position of token 0 (continued sequences) */
    const int64_t *pos_q, *pos_kv; /* token positions (RoPE, sinusoidal):
                                      N·Tq / N·Tk values, or NULL:
                                      pos_offset + t; all 0/NULL with
                                      SDPA_POS_NONE, pos_kv NULL in
                                      self-attention */
    sdpa_tensor x_q, x_kv, y;
    const void *w_q, *w_k, *w_v, *w_o;
    const void *b_q, *b_k, *b_v, *b_o;
    const sdpa_forward_args *attn; /* optional: options of the attention */
} sdpa_mha_args;

#define SDPA_MHA_ARGS_INIT                                                     \
    {                                                                          \
        .struct_size = sizeof(sdpa_mha_args)                                   \
    }

/* y = MultiHead(x_q, x_kv) for the whole batch: projections as CBLAS gemms,
 * the positional encoding, sdpa_forward, the output projection. Returns
 * SDPA_OK, or a status code with y untouched (the attention's errors come
 * back with its status, the message prefixed "sdpa_mha_forward:
 * attention:"). See sdpa_mha_forward(3). */
SDPA_API int sdpa_mha_forward(sdpa_ctx *ctx, const sdpa_mha_args *args);

/* Validate args and plan the call without computing: *bytes receives the
 * memory the context will hold after the call: the workers' scratch, the
 * shared partials, a ragged call's sequence records, the caller's
 * parallel-for's item records and the layer's buffer, as sdpa_forward
 * would grow them (already-held memory counts; the thread pool's own
 * bookkeeping does not). Nothing is allocated or written.
 *
 * Scratch is kept between calls: a call allocates nothing after an earlier
 * one on the same context that took the same path with the same dtype,
 * options, optional tensors, Dk, Dv and Hq/Hkv, under the same BLAS thread
 * count and worker count (SDPA_NUM_THREADS_ALL counts as the CPUs it finds
 * at each call: a process whose affinity grows may allocate once more),
 * when none of N, Hkv, Tq, Tk is larger. Returns SDPA_OK, or the
 * status sdpa_forward would return for an error found before computing
 * (never SDPA_ERR_OUT_OF_MEMORY or SDPA_ERR_NONFINITE); *bytes is written
 * only on success. See sdpa_forward_workspace(3). */
SDPA_API int sdpa_forward_workspace(sdpa_ctx *ctx,
                                    const sdpa_forward_args *args,
                                    size_t *bytes);

/* Convenience constructors for contiguous views (no symbols exported). */
static inline sdpa_tensor sdpa_tensor_bhtd(void *data, int64_t n, int64_t h,
                                           int64_t t, int64_t d)
{
    sdpa_tensor x = {data, {n, h, t, d}, {h * t * d, t * d, d, 1}};
    return x;
}

/* Heads interleaved: memory order [N, T, H, D], e.g. a packed [N, T, H·D]
 * buffer, viewed in logical (N, H, T, D) order without a copy. */
static inline sdpa_tensor sdpa_tensor_bthd(void *data, int64_t n, int64_t h,
                                           int64_t t, int64_t d)
{
    sdpa_tensor x = {data, {n, h, t, d}, {t * h * d, d, h * d, 1}};
    return x;
}

/* The first t rows of a cache that holds `capacity` rows per batch item
 * (1.2): a KV cache allocated for its longest length and filled up to its
 * current one, in memory order [N, H, capacity, D] (bhtd) or
 * [N, capacity, H, D] (bthd). With capacity = t they are the two above. */
static inline sdpa_tensor sdpa_tensor_bhtd_cap(void *data, int64_t n, int64_t h,
                                               int64_t t, int64_t capacity,
                                               int64_t d)
{
    sdpa_tensor x = {
        data, {n, h, t, d}, {h * capacity * d, capacity * d, d, 1}};
    return x;
}
static inline sdpa_tensor sdpa_tensor_bthd_cap(void *data, int64_t n, int64_t h,
                                               int64_t t, int64_t capacity,
                                               int64_t d)
{
    sdpa_tensor x = {data, {n, h, t, d}, {capacity * h * d, d, h * d, 1}};
    return x;
}

/* ------------------------------------------------------------------------ */
/* The backward pass (1.1).                                                  */
/* ------------------------------------------------------------------------ */

/* Arguments of one backward call: the inputs and options of a forward call,
 * its out and lse, the gradient dout of the loss with respect to out, and
 * where the gradients go. Zero-initialise, then set struct_size
 * (SDPA_BACKWARD_ARGS_INIT); grows like sdpa_forward_args (docs/ABI.md):
 * a struct_size below 952 (1.1's size) is SDPA_ERR_STRUCT_SIZE.
 *
 * The options (dtype, causal, flags, scale, softcap, kv_lens, mask, bias,
 * window, alibi_slopes, sinks) and q, k, v must be those of the forward
 * call, whose rules they follow; out and lse are what it wrote (lse is
 * required here), and the context's SDPA_OPT_EMPTY_ROWS must be the same.
 *
 *   dout  [N, Hq, Tq, Dv]   dtype, input
 *   dq    [N, Hq, Tq, Dk]   dtype (or grad_dtype), written
 *   dk    [N|1, Hkv, Tk, Dk] kv_dtype (or grad_dtype), written; extent 1
 *                           over N exactly when
 *                           k is broadcast over N (extent 1 or stride 0):
 *                           then the sum over the batch items
 *   dv    [N|1, Hkv, Tk, Dv] kv_dtype (or grad_dtype), written; likewise
 *                           for v
 *   dbias optional, written, in the compute type, only with a bias: the bias's
 * shape with extent 1 exactly on the dimensions the bias broadcasts (extent 1
 * or stride 0), which hold the sum over what they broadcast to; any
 *         non-negative strides
 *   dsinks optional, Hq doubles, written, only with sinks
 *
 * Innermost strides of dout, dq, dk and dv must be 1. The outputs must not
 * overlap each other or any input (SDPA_ERR_OVERLAP).
 *
 * With P_ij = exp(z_ij - lse_i) the forward's weights (z the final logit),
 * D_i = Σ_d dout_id·out_id and u_ij = scale·<q_i, k_j> the logit before
 * the soft-cap:
 *   dv_j     = Σ_i P_ij dout_i
 *   dz_ij    = P_ij (<dout_i, v_j> - D_i)          (0 at forbidden keys)
 *   dbias    = dz, summed over the broadcast dimensions
 *   ds_ij    = dz_ij · (1 - tanh²(u_ij / c)) with a soft-cap c, else dz_ij
 *   dq_i     = scale · Σ_j ds_ij k_j,  dk_j = scale · Σ_i ds_ij q_i
 *              (GQA: dk and dv sum over the query heads of the group)
 *   dsinks_h = -Σ_{b,i} exp(sigma_h - lse_i) D_i   (the sink is a key
 *              whose value is 0: its dz is P_sink·(0 - D_i))
 * ALiBi slopes are constants (no gradient). A row with lse = -inf (no
 * allowed key, SDPA_EMPTY_ROWS_ZERO) contributes nothing and gets dq = 0.
 * Keys no row may see get dk = dv = 0 and their K and V rows are never
 * read, as in the forward. Scratch is O(blocks) in the context: a repeated
 * call allocates nothing. Errors are found before anything is written,
 * except SDPA_ERR_NONFINITE (a NaN or +inf recomputed logit, or an lse
 * that is NaN, +inf, or -inf for a row that has allowed keys), after which
 * the outputs hold unspecified values. Results are bitwise identical for
 * every SDPA_OPT_NUM_THREADS and the caller's parallel-for: a work item is
 * one key block of a (batch item, KV head) pair (of every batch item when
 * k or v is broadcast over N or dbias over N, of every KV head when dbias
 * is broadcast over the heads; all key blocks when dbias sums over the
 * keys), and the key blocks add to each query tile's dq in their order,
 * whichever worker computes them. So a single head spreads over the
 * workers too, each product computed once. Scratch: O(blocks) per worker
 * and one 8-byte counter per query tile of each (batch item, head); no
 * partial dq.
 *
 * Ragged batches (1.2; struct_size 976): seqs, q_offsets and kv_offsets
 * as in sdpa_forward_args, FlashAttention's varlen backward. q, out, lse,
 * dout and dq are [1, Hq, total_q, .] views (any strides) of which
 * sequence b owns the rows [q_offsets[b], q_offsets[b + 1]); its keys are
 * packed (with kv_offsets: k, v, dk and dv are [1, Hkv, total_k, D] and
 * its keys their rows [kv_offsets[b], kv_offsets[b + 1])) or batched
 * (without: k, v, dk and dv are [seqs, Hkv, Tk, D] and it reads and
 * writes item b); kv_lens, optional, holds seqs values in [0, Tk_b].
 * Refused (SDPA_ERR_BAD_RAGGED): keys shared by every sequence ([1, ...]
 * with seqs > 1, whose gradient would be a sum over the sequences), mask,
 * bias and dbias. Promise: each sequence's dq, dk and dv are bitwise those
 * of an sdpa_backward on its own views alone (N = 1, the ragged fields 0)
 * on the same context, and dsinks[h] is the sum, in sequence order, of the
 * dsinks[h] those calls write (0 when no sequence has query rows), for
 * every SDPA_OPT_NUM_THREADS and the caller's parallel-for. Every key of
 * every sequence gets its gradient: a sequence without query rows gets
 * dk = dv = +0 for its keys; one without keys (packed, Tk_b = 0) has
 * empty rows, as in the forward (refused under SDPA_EMPTY_ROWS_ERROR
 * unless sinks), and gets dq = +0, its sink terms counted in dsinks.
 * Every sequence is checked as its own call would be (a message about one
 * starts "sdpa_backward: sequence 3: ") and the packed tensors as wholes,
 * before anything is written; then the items of every sequence run in one
 * parallel phase, heaviest first. A non-finite value is reported by sequence,
 * head, row of the sequence and packed row.
 *
 * Half-precision storage (1.2; struct_size 992), as a bf16 or f16 trainer
 * holds its activations: dtype may be SDPA_FLOAT16 or SDPA_BFLOAT16, the
 * storage type of q, out and dout, with kv_dtype (0: dtype) that of k and
 * v and bias_dtype (0: dtype) that of the bias, under the forward's rules
 * (any mixture of float32 and the half types, computed in float32; lse is
 * float32, the compute type, as the forward wrote it). grad_dtype says
 * where the gradients go: 0 writes dq in q's storage type and dk, dv in
 * k's, each rounded once to nearest even from its float32 sum (a float16
 * gradient past 65504 is ±inf, as in a framework's half autograd: what
 * dynamic loss scaling looks for; not an error); SDPA_FLOAT32 writes all
 * three in float32. dbias, an optional output, is in the compute type,
 * as the forward's optional outputs are. The values are those of the
 * float32 backward on the inputs widened exactly: dq, dk and dv in float32
 * are the bits of that call (same context), and in a half type those bits
 * rounded. A half dq sums in float32 in the context first (N · Hq · Tq ·
 * Dk floats beside the turn counters), a half dk or dv in the workers'
 * block scratch; q, k, v, out and dout are widened a block at a time.
 *
 * Dropout (1.2; struct_size 1016): dropout_p, dropout_seed and
 * dropout_offset as in the forward call (the same rules, the same mask Z,
 * regenerated, never stored; a ragged sequence b as its own call with
 * dropout_offset + b·Hq). With c = 1/(1 − dropout_p) and out the forward's
 * dropped output:
 *   dv_j  = Σ_i Z_ij·c·P_ij dout_i
 *   dz_ij = P_ij (Z_ij·c·<dout_i, v_j> - D_i),  D_i = <dout_i, out_i>
 * and dq, dk, dbias and dsinks from dz as above. */
typedef struct sdpa_backward_args {
    size_t struct_size; /* sizeof(sdpa_backward_args) */
    int dtype;          /* SDPA_FLOAT32 or SDPA_FLOAT64, or (1.2) a half
                           type: the storage of q, out and dout */
    int causal;         /* SDPA_CAUSAL_* */
    uint32_t flags;     /* SDPA_FLAG_* */
    double scale;       /* 0 = 1/sqrt(Dk) */
    double softcap;     /* 0 = off */
    const int64_t *kv_lens;
    sdpa_tensor q, k, v;
    sdpa_tensor mask, bias;
    sdpa_tensor out, dout, lse; /* the forward's out and lse; dout */
    sdpa_tensor dq, dk, dv;     /* written */
    sdpa_tensor dbias;          /* optional output */
    int64_t window_left, window_right;
    const double *alibi_slopes;
    const double *sinks;
    double *dsinks; /* optional output, Hq values */
    /* 1.2: a ragged batch (see above) */
    int64_t seqs;              /* the sequence count; 0 = rectangular */
    const int64_t *q_offsets;  /* seqs + 1 offsets of the query rows of q,
                                  out, lse, dout and dq (cu_seqlens_q) */
    const int64_t *kv_offsets; /* optional: seqs + 1 offsets of the keys of
                                  packed k, v, dk and dv (cu_seqlens_k) */
    /* 1.2: half-precision storage (see above) */
    int kv_dtype;   /* storage type of k and v; 0 = dtype */
    int bias_dtype; /* storage type of bias; 0 = dtype */
    int grad_dtype; /* 0: dq, dk, dv in the types of q, k, v; SDPA_FLOAT32:
                       in float32 */
    /* 1.2: dropout (see above), as in the forward call */
    double dropout_p;
    uint64_t dropout_seed;
    uint64_t dropout_offset;
#ifdef SDPA_ABI_TEST_APPENDED_FIELD
    uint64_t abi_test_appended; /* never defined outside libsdpa's ABI test */
#endif
} sdpa_backward_args;

#define SDPA_BACKWARD_ARGS_INIT                                                \
    {                                                                          \
        .struct_size = sizeof(sdpa_backward_args)                              \
    }

/* The gradients of attention for the whole batch (FlashAttention-2's
 * scheme: the weights are recomputed per block from lse, never stored).
 * Returns SDPA_OK, or a status code: the outputs are untouched except after
 * SDPA_ERR_NONFINITE and SDPA_ERR_PARALLEL_FOR (see above). See
 * sdpa_backward(3). */
SDPA_API int sdpa_backward(sdpa_ctx *ctx, const sdpa_backward_args *args);

/* ------------------------------------------------------------------------ */
/* Merging partial results (1.1).                                            */
/* ------------------------------------------------------------------------ */

/* Arguments of sdpa_merge; zero-initialise and set struct_size
 * (SDPA_MERGE_ARGS_INIT). struct_size below 184 (its first size, LP64) is
 * SDPA_ERR_STRUCT_SIZE; later releases append fields as for
 * sdpa_forward_args.
 *
 *   outs[p] [N, H, T, Dv] dtype, p = 0..parts-1: partial outputs
 *   lses[p] [N, H, T, 1]  dtype: their log-sum-exps (stride[3] ignored)
 *   out     [N, H, T, Dv] dtype, written
 *   lse     [N, H, T, 1]  dtype, optional output
 *
 * Strided views as in sdpa_forward (innermost stride 1 for outs and out;
 * any non-negative strides elsewhere; an extent-1 dimension's stride is
 * not used). outs[0] fixes N, H, T and Dv; every other view must agree. */
typedef struct sdpa_merge_args {
    size_t struct_size;      /* sizeof(sdpa_merge_args) */
    int dtype;               /* SDPA_FLOAT32 or SDPA_FLOAT64 */
    int64_t parts;           /* P >= 1 */
    const sdpa_tensor *outs; /* P partial outputs */
    const sdpa_tensor *lses; /* P partial lse views */
    sdpa_tensor out, lse;    /* the merged result (lse optional) */
} sdpa_merge_args;

#define SDPA_MERGE_ARGS_INIT                                                   \
    {                                                                          \
        .struct_size = sizeof(sdpa_merge_args)                                 \
    }

/* Combine P partial results of the same query rows, each computed by
 * sdpa_forward (with its lse output) over one of P disjoint sets of keys,
 * into the result over their union (1.1). Per row, with m = max_p lse_p:
 *
 *   lse = m + log Σ_p exp(lse_p − m)      out = Σ_p exp(lse_p − lse) out_p
 *
 * which is exactly the softmax over all the keys: each partial's weights
 * are rescaled by exp(lse_p − lse). The weights are computed in double;
 * partials are taken in the order 0..P-1, so a call is bitwise
 * reproducible, and a single partial (or one whose lse is the only finite
 * one) is copied exactly. A partial whose lse is −inf (no allowed key: a
 * zero row of SDPA_EMPTY_ROWS_ZERO) contributes nothing and its out row is
 * never read. A row whose lses are all −inf follows the context's empty-row
 * policy: SDPA_ERR_FULLY_MASKED_ROW naming batch item, head and row by
 * default; out 0 and lse −inf under SDPA_EMPTY_ROWS_ZERO. An lse that is
 * NaN or +inf is SDPA_ERR_NONFINITE. Sinks: give them to one partial only
 * (its lse then includes the sink, as the whole call's would).
 *
 * Errors (all detected before anything is written; sdpa_ctx_last_error
 * says what and where): SDPA_ERR_NULL_POINTER (args, outs, lses, a data
 * pointer), STRUCT_SIZE / STRUCT_TAIL, BAD_DTYPE, BAD_DIM (parts < 1, an
 * extent < 1), SHAPE_MISMATCH, BAD_STRIDE, OVERFLOW, OVERLAP,
 * FULLY_MASKED_ROW, NONFINITE.
 *
 * In place: out may be outs[0] and lse may be lses[0] — the very same views
 * (data and strides) — to accumulate into partial 0; the result is bitwise
 * the same as into separate buffers. Any other overlap of an output with
 * an input or with the other output is SDPA_ERR_OVERLAP. Allocates
 * nothing. Returns SDPA_OK on success. See sdpa_merge(3). */
SDPA_API int sdpa_merge(sdpa_ctx *ctx, const sdpa_merge_args *args);

/* ------------------------------------------------------------------------ */
/* The multi-head layer's backward pass (1.1).                               */
/* ------------------------------------------------------------------------ */

/* Arguments of sdpa_mha_backward; zero-initialise and set struct_size
 * (SDPA_MHA_BACKWARD_ARGS_INIT). A struct_size below 296 (its first size,
 * LP64) is SDPA_ERR_STRUCT_SIZE; later releases append fields as for
 * sdpa_forward_args.
 *
 *   forward  the arguments of the forward call (sdpa_mha_args, every rule
 *            of sdpa_mha_forward): inputs, weights, biases, positions and
 *            attention options. Its y is not read and its attn outputs
 *            (weights, lse, max_weight, entropy) are not written.
 *   dy     [N, 1, Tq, d_model]   input: the gradient of the loss for y
 *   dx_q   [N, 1, Tq, d_model]   optional output: for x_q; in
 *                                self-attention (x_kv absent) the whole
 *                                gradient of x_q, through Q, K and V
 *   dx_kv  [N, 1, Tk, d_model]   optional output, cross-attention only:
 *                                for x_kv (through K and V)
 *   dw_q, dw_k, dw_v, dw_o       optional outputs of the shapes of w_q ..
 *   db_q, db_k, db_v, db_o       optional outputs of the shapes of b_q ..
 *                                (also when the forward has no such
 *                                bias: the gradient at b = 0)
 *
 * A NULL (or data NULL) output is not computed: frozen parameters cost
 * nothing. Every output is overwritten, not accumulated. dy, dx_q and
 * dx_kv take any row stride (innermost 1), as x_q does. Outputs must not
 * overlap each other, x_q, x_kv, dy, a weight or a bias
 * (SDPA_ERR_OVERLAP).
 *
 * Half-precision storage (1.2; struct_size 304): with forward->dtype
 * SDPA_FLOAT16 or SDPA_BFLOAT16, dy is of that type, and the inputs and dy
 * are widened exactly into float32 copies in the layer's scratch, where
 * the float32 layer's backward runs. grad_dtype 0 writes every gradient in
 * the layer's dtype, each rounded once to nearest even from its float32
 * value (a float16 gradient past 65504 is ±inf, as sdpa_backward's: not
 * an error); SDPA_FLOAT32 writes them in float32 (also accepted, and the
 * same as 0, for a float32 layer; refused for float64). Promise: the
 * gradients are bitwise those of the float32 layer's backward (same
 * context) on the widened inputs, in float32 or rounded once. A 1.1
 * caller's struct_size 296 means grad_dtype 0. */
typedef struct sdpa_mha_backward_args {
    size_t struct_size;           /* sizeof(sdpa_mha_backward_args) */
    const sdpa_mha_args *forward; /* the forward call's arguments */
    sdpa_tensor dy;               /* input */
    sdpa_tensor dx_q, dx_kv;      /* optional outputs */
    void *dw_q, *dw_k, *dw_v, *dw_o;
    void *db_q, *db_k, *db_v, *db_o;
    /* 1.2: half-precision storage (see above) */
    int grad_dtype; /* 0: the gradients in forward->dtype; SDPA_FLOAT32:
                       in float32 (a layer computed in float32) */
} sdpa_mha_backward_args;

#define SDPA_MHA_BACKWARD_ARGS_INIT                                            \
    {                                                                          \
        .struct_size = sizeof(sdpa_mha_backward_args)                          \
    }

/* The gradients of sdpa_mha_forward (1.1). The forward's pieces are
 * recomputed in the context's layer scratch (the positional table added to
 * the inputs, Q, K, V, RoPE, the attention's out and lse; nothing is kept
 * from the forward call), then, with G = dy:
 *
 *   dW_O = Oᵀ G, db_O = Σ_rows G, dO = G W_Oᵀ
 *   dQ, dK, dV = sdpa_backward(Q, K, V, O, lse, dO)  (the attention's
 *                options; its bias and sinks get no gradient here)
 *   dQ, dK rotated back by the inverse RoPE rotation (the transpose)
 *   dW_Q = X~_qᵀ dQ, dW_K = X~_kvᵀ dK, dW_V = X~_kvᵀ dV, db_* = Σ_rows
 *   dx_q = dQ W_Qᵀ (+ dK W_Kᵀ + dV W_Vᵀ in self-attention),
 *   dx_kv = dK W_Kᵀ + dV W_Vᵀ
 *
 * X~ = X plus the sinusoidal table, whose Jacobian is the identity: the
 * gradient of x passes through it. Every product is a CBLAS gemm. Every
 * error, those of the recomputed attention included (a fully masked row,
 * SDPA_ERR_NONFINITE), is found before any output is written: outputs are
 * untouched on any error. A repeated call of the same shape allocates
 * nothing. Returns SDPA_OK or a status code. See sdpa_mha_backward(3). */
SDPA_API int sdpa_mha_backward(sdpa_ctx *ctx,
                               const sdpa_mha_backward_args *args);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_H */
