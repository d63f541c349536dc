/*
 * Structs that travel by pointer and carry their own size (docs/ABI.md, the
 * rule of Linux's perf_event_attr): a caller compiled against an older, shorter
 * struct keeps working with a newer library, and a newer caller works with
 * an older library as long as it leaves the fields the library does not
 * know at zero.
 */
#include "core/context.h"
#include "core/struct_import.h"

#include <stdio.h>
#include <string.h>

int sdpa_struct_import(sdpa_ctx *ctx, const char *what, const void *caller,
                       size_t v1_size, void *local, size_t local_size)
{
    size_t size = *(const size_t *)caller; /* struct_size is always first */
    if (size < v1_size)
        return sdpa_fail(ctx, SDPA_ERR_STRUCT_SIZE,
                         "%s->struct_size is %zu, below %zu, the size of "
                         "version 1 (set it to sizeof the struct)",
                         what, size, v1_size);
    const unsigned char *bytes = caller;
    for (size_t i = local_size; i < size; i++)
        if (bytes[i] != 0)
            return sdpa_fail(ctx, SDPA_ERR_STRUCT_TAIL,
                             "%s->struct_size is %zu and byte %zu of the tail "
                             "this library does not know (past its %zu "
                             "bytes) is not zero",
                             what, size, i, local_size);
    /* Read no byte beyond what the caller has; fields it lacks are 0. */
    memset(local, 0, local_size);
    memcpy(local, caller, size < local_size ? size : local_size);
    return SDPA_OK;
}

int sdpa_import_args(sdpa_ctx *ctx, const char *who, const void *args,
                     size_t v1_size, void *local, size_t local_size)
{
    if (!ctx)
        return SDPA_ERR_NULL_POINTER;
    ctx->message[0] = '\0';
    if (!args)
        return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, "%s: args is NULL", who);
    char what[64];
    (void)snprintf(what, sizeof what, "%s: args", who);
    return sdpa_struct_import(ctx, what, args, v1_size, local, local_size);
}
