/* The context: its allocator, persistent options, scratch and last error. */
#include "core/context.h"
#include "core/struct_import.h"
#include "runtime/pool.h"
#include "kernels/cpu.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *default_alloc(void *opaque, size_t size, size_t alignment)
{
    (void)opaque;
    void *ptr = NULL;
    if (posix_memalign(&ptr,
                       alignment < sizeof(void *) ? sizeof(void *) : alignment,
                       size ? size : 1) != 0)
        return NULL;
    return ptr;
}

static void default_free(void *opaque, void *ptr, size_t size)
{
    (void)opaque;
    (void)size;
    free(ptr);
}

void *sdpa_alloc(const sdpa_ctx *ctx, size_t size)
{
    return ctx->allocator.alloc(ctx->allocator.opaque, size, SDPA_ALIGN);
}

void sdpa_free(const sdpa_ctx *ctx, void *ptr, size_t size)
{
    if (ptr)
        ctx->allocator.free(ctx->allocator.opaque, ptr, size);
}

int sdpa_fail(sdpa_ctx *ctx, int status, const char *format, ...)
{
    if (ctx) {
        va_list ap;
        va_start(ap, format);
        vsnprintf(ctx->message, sizeof ctx->message, format, ap);
        va_end(ap);
    }
    return status;
}

int sdpa_ctx_create(sdpa_ctx **out)
{
    sdpa_allocator std = {.struct_size = sizeof std,
                          .alloc = default_alloc,
                          .free = default_free};
    return sdpa_ctx_create_with_allocator(out, &std);
}

int sdpa_ctx_create_with_allocator(sdpa_ctx **out,
                                   const sdpa_allocator *allocator)
{
    if (!out)
        return SDPA_ERR_NULL_POINTER;
    *out = NULL;
    if (!allocator)
        return SDPA_ERR_NULL_POINTER;
    sdpa_allocator known;
    int imported =
        sdpa_struct_import(NULL, "allocator", allocator, SDPA_ALLOCATOR_SIZE_V1,
                           &known, sizeof known);
    if (imported != SDPA_OK)
        return imported;
    allocator = &known;

    if (!allocator->alloc || !allocator->free)
        return SDPA_ERR_NULL_POINTER;
    int kernel;
    int chosen = sdpa_kernel_from_environment(&kernel);
    if (chosen != SDPA_OK)
        return chosen;
    sdpa_ctx *ctx =
        allocator->alloc(allocator->opaque, sizeof *ctx, _Alignof(sdpa_ctx));
    if (!ctx)
        return SDPA_ERR_OUT_OF_MEMORY;
    memset(ctx, 0, sizeof *ctx);
    atomic_init(&ctx->in_call, false);
    ctx->allocator = *allocator;
    ctx->allocator.struct_size = sizeof(sdpa_allocator);
    ctx->options[SDPA_OPT_NUM_THREADS] = 1;
    ctx->kernel = kernel;
    if (kernel != sdpa_kernel_best()) /* forced by SDPA_KERNEL */
        ctx->options[SDPA_OPT_KERNEL] = kernel;
    *out = ctx;
    return SDPA_OK;
}

void sdpa_ctx_destroy(sdpa_ctx *ctx)
{
    if (!ctx)
        return;
    sdpa_pool_destroy(ctx);
    for (int i = 0; i < SDPA_MAX_THREADS; i++)
        sdpa_free(ctx, ctx->scratch[i].ptr, ctx->scratch[i].size);
    sdpa_free(ctx, ctx->shared.ptr, ctx->shared.size);
    sdpa_free(ctx, ctx->layer.ptr, ctx->layer.size);
    sdpa_free(ctx, ctx->claims.ptr, ctx->claims.size);
    sdpa_free(ctx, ctx->parts.ptr, ctx->parts.size);
    sdpa_allocator allocator = ctx->allocator;
    allocator.free(allocator.opaque, ctx, sizeof *ctx);
}

const char *sdpa_ctx_last_error(const sdpa_ctx *ctx)
{
    return ctx ? ctx->message : "no context (ctx is NULL)";
}

static int grow(sdpa_ctx *ctx, const char *who, sdpa_buffer *buf, size_t bytes)
{
    if (buf->size >= bytes)
        return SDPA_OK;
    void *grown = sdpa_alloc(ctx, bytes);
    if (!grown)
        return sdpa_fail(ctx, SDPA_ERR_OUT_OF_MEMORY,
                         "%s: cannot allocate %zu bytes of scratch", who,
                         bytes);
    sdpa_free(ctx, buf->ptr, buf->size);
    buf->ptr = grown;
    buf->size = bytes;
    return SDPA_OK;
}

int sdpa_scratch_reserve(sdpa_ctx *ctx, const char *who, int workers,
                         size_t worker_bytes, size_t shared_bytes)
{
    int status = grow(ctx, who, &ctx->shared, shared_bytes);
    for (int i = 0; status == SDPA_OK && i < workers; i++)
        status = grow(ctx, who, &ctx->scratch[i], worker_bytes);
    return status;
}

int sdpa_layer_reserve(sdpa_ctx *ctx, const char *who, size_t bytes)
{
    return grow(ctx, who, &ctx->layer, bytes);
}

int sdpa_claims_reserve(sdpa_ctx *ctx, const char *who, size_t bytes)
{
    return grow(ctx, who, &ctx->claims, bytes);
}

int sdpa_parts_reserve(sdpa_ctx *ctx, const char *who, size_t bytes)
{
    return grow(ctx, who, &ctx->parts, bytes);
}

/* The name of an option id as the header spells it, for messages. */
static const char *option_name(int option)
{
    static const char *const names[] = {
        [SDPA_OPT_EMPTY_ROWS] = "SDPA_OPT_EMPTY_ROWS",
        [SDPA_OPT_NUM_THREADS] = "SDPA_OPT_NUM_THREADS",
        [SDPA_OPT_KERNEL] = "SDPA_OPT_KERNEL",
        [SDPA_OPT_PATH] = "SDPA_OPT_PATH",
        [SDPA_OPT_SCRATCH_LIMIT] = "SDPA_OPT_SCRATCH_LIMIT",
        [SDPA_OPT_BLOCK_Q] = "SDPA_OPT_BLOCK_Q",
        [SDPA_OPT_BLOCK_K] = "SDPA_OPT_BLOCK_K",
    };
    if (option > 0 && option < (int)(sizeof names / sizeof names[0]) &&
        names[option])
        return names[option];
    return "unknown option";
}

/* Inclusive range of every option's values. */
static bool option_range(int option, int64_t *lo, int64_t *hi)
{
    switch (option) {
    case SDPA_OPT_EMPTY_ROWS:
        *lo = SDPA_EMPTY_ROWS_ERROR, *hi = SDPA_EMPTY_ROWS_ZERO;
        return true;
    case SDPA_OPT_NUM_THREADS:
        *lo = 1, *hi = SDPA_MAX_THREADS;
        return true;
    case SDPA_OPT_KERNEL:
        *lo = SDPA_KERNEL_AUTO, *hi = SDPA_KERNEL_AVX512;
        return true;
    case SDPA_OPT_PATH:
        *lo = SDPA_PATH_AUTO, *hi = SDPA_PATH_DECODE_BLAS;
        return true;
    case SDPA_OPT_SCRATCH_LIMIT:
        *lo = 0, *hi = INT64_MAX;
        return true;
    case SDPA_OPT_BLOCK_Q:
    case SDPA_OPT_BLOCK_K:
        *lo = 0, *hi = 1 << 20;
        return true;
    default:
        return false;
    }
}

static int set_int(sdpa_ctx *ctx, int option, int64_t value)
{
    int64_t lo, hi;
    if (!option_range(option, &lo, &hi))
        return sdpa_fail(ctx, SDPA_ERR_UNKNOWN_OPTION,
                         "sdpa_ctx_set_int: unknown option id %d", option);
    bool all_cores =
        option == SDPA_OPT_NUM_THREADS && value == SDPA_NUM_THREADS_ALL;
    if ((value < lo || value > hi) && !all_cores)
        return sdpa_fail(ctx, SDPA_ERR_BAD_OPTION_VALUE,
                         "sdpa_ctx_set_int: %s takes values in "
                         "[%lld, %lld]%s, got %lld",
                         option_name(option), (long long)lo, (long long)hi,
                         option == SDPA_OPT_NUM_THREADS
                             ? " or SDPA_NUM_THREADS_ALL (-1)"
                             : "",
                         (long long)value);
    if (option == SDPA_OPT_KERNEL) {
        /* what each vector kernel needs from the CPU (portable: nothing) */
        static const struct {
            const char *name, *needs;
        } vector[] = {
            [SDPA_KERNEL_AVX2] = {"AVX2", "AVX2+FMA+F16C"},
            [SDPA_KERNEL_AVX512] = {"AVX512",
                                    "AVX-512 (F, DQ, BW and VL) and F16C"},
        };
        if (value != SDPA_KERNEL_AUTO && !sdpa_kernel_supported((int)value))
            return sdpa_fail(ctx, SDPA_ERR_UNSUPPORTED,
                             "sdpa_ctx_set_int: this CPU lacks %s, the %s "
                             "kernel cannot run",
                             vector[value].needs, vector[value].name);
        ctx->kernel =
            value == SDPA_KERNEL_AUTO ? sdpa_kernel_best() : (int)value;
    }
    ctx->options[option] = value;
    ctx->message[0] = '\0';
    return SDPA_OK;
}

int sdpa_ctx_set_int(sdpa_ctx *ctx, int option, int64_t value)
{
    int status = sdpa_enter(ctx);
    return status != SDPA_OK ? status
                             : sdpa_leave(ctx, set_int(ctx, option, value));
}

int sdpa_ctx_get_int(const sdpa_ctx *ctx, int option, int64_t *value)
{
    if (!ctx || !value)
        return SDPA_ERR_NULL_POINTER;
    int64_t lo, hi;
    if (!option_range(option, &lo, &hi))
        return SDPA_ERR_UNKNOWN_OPTION;
    *value = option == SDPA_OPT_KERNEL ? ctx->kernel : ctx->options[option];
    return SDPA_OK;
}

int sdpa_enter(sdpa_ctx *ctx)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    return atomic_exchange(&ctx->in_call, true) ? SDPA_ERR_BUSY : SDPA_OK;
}

int sdpa_leave(sdpa_ctx *ctx, int status)
{
    atomic_store(&ctx->in_call, false);
    return status;
}
