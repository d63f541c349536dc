/* The context (include/sdpa.h's opaque sdpa_ctx): its allocator, options,
 * per-worker scratch and last error; allocation through it and the
 * failures recorded on it. */
#ifndef SDPA_CORE_CONTEXT_H
#define SDPA_CORE_CONTEXT_H

#include "sdpa.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The scratch alignment: one cache line, and a whole AVX-512 register. */
#define SDPA_ALIGN 64

/* Most worker threads a context may use (SDPA_OPT_NUM_THREADS). */
#define SDPA_MAX_THREADS 256

/* One worker's scratch buffer, grown on demand and kept between calls. */
typedef struct sdpa_buffer {
    void *ptr;
    size_t size;
} sdpa_buffer;

typedef struct sdpa_pool sdpa_pool;

struct sdpa_ctx {
    sdpa_allocator allocator;
    int64_t options[8]; /* indexed by SDPA_OPT_*; [0] unused */
    int kernel;         /* resolved SDPA_KERNEL_* (never AUTO) */
    sdpa_buffer scratch[SDPA_MAX_THREADS]; /* one per worker */
    sdpa_buffer shared;                    /* read by every worker */
    sdpa_buffer layer;  /* sdpa_mha_forward's projections (layer.c) */
    sdpa_buffer claims; /* the caller's parallel-for: one bit per item,
                           set when the item is taken (pool.c) */
    sdpa_buffer parts;  /* a ragged call's sequences, each with its own
                           problem and plan (forward/ragged_forward.c,
                           backward/ragged.c) */
    sdpa_pool *pool;
    struct sdpa_caller_job *caller_job; /* the caller's parallel-for's job,
                                           kept so that a late task call
                                           finds it (pool.c) */
    atomic_bool in_call;                /* a call is in progress (sdpa_enter) */
    /* the caller's parallel-for (sdpa_ctx_set_parallel_for), or NULL */
    sdpa_parallel_for_fn parallel_for;
    void *parallel_user;
    int parallel_workers;
    char message[256];
};

/* The workers a call may use: the caller's parallel-for's, else
 * SDPA_OPT_NUM_THREADS (SDPA_NUM_THREADS_ALL: the CPUs this process may
 * run on, at most SDPA_MAX_THREADS). */
int sdpa_thread_budget(const sdpa_ctx *ctx);

/* The guard of every entry point that may change the context: a call made
 * while another is in progress on it (from the caller's parallel-for or a
 * task it runs, or from a second thread) is refused with SDPA_ERR_BUSY,
 * the context and the outputs untouched (its message is the call in
 * progress's). sdpa_enter: SDPA_ERR_NULL_POINTER for ctx NULL, else
 * SDPA_OK (the call is now in progress) or SDPA_ERR_BUSY. sdpa_leave ends
 * the call and returns status. */
int sdpa_enter(sdpa_ctx *ctx);
int sdpa_leave(sdpa_ctx *ctx, int status);

/* Records a failure on ctx (printf-style message: what and where) and returns
 * status, so that callers can write `return sdpa_fail(ctx, ...)`. */
int sdpa_fail(sdpa_ctx *ctx, int status, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 3, 4)))
#endif
    ;

/* Allocation through the context's allocator. */
void *sdpa_alloc(const sdpa_ctx *ctx, size_t size);
void sdpa_free(const sdpa_ctx *ctx, void *ptr, size_t size);

/* Makes the scratch of workers [0, workers) at least worker_bytes large and
 * the shared buffer at least shared_bytes, allocating only what is missing
 * (a second call with the same shape allocates nothing). `who`, the entry
 * point, starts the message of a failure (also below). */
int sdpa_scratch_reserve(sdpa_ctx *ctx, const char *who, int workers,
                         size_t worker_bytes, size_t shared_bytes);
/* Makes ctx->layer at least bytes large (allocating only when it is
 * smaller). */
int sdpa_layer_reserve(sdpa_ctx *ctx, const char *who, size_t bytes);
/* Likewise ctx->claims and ctx->parts. */
int sdpa_claims_reserve(sdpa_ctx *ctx, const char *who, size_t bytes);
int sdpa_parts_reserve(sdpa_ctx *ctx, const char *who, size_t bytes);

#endif /* SDPA_CORE_CONTEXT_H */
