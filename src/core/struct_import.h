/* Structs that carry their own size (docs/ABI.md): the frozen version-1
 * sizes and the import that reads an older or newer caller's struct. */
#ifndef SDPA_CORE_STRUCT_IMPORT_H
#define SDPA_CORE_STRUCT_IMPORT_H

#include "core/context.h"

#include <stddef.h>

/* The frozen version-1 sizes of the structs that carry struct_size (never
 * sizeof: that grows with every appended field). */
#define SDPA_ARGS_SIZE_V1 ((size_t)624)
#define SDPA_ALLOCATOR_SIZE_V1 ((size_t)32)

/* Copies a caller's struct that starts with size_t struct_size into *local
 * (local_size = this library's sizeof), zero-filling the fields an older,
 * shorter caller lacks and reading none of its bytes past struct_size.
 * SDPA_ERR_STRUCT_SIZE below v1_size, SDPA_ERR_STRUCT_TAIL when a byte this
 * library does not know is not zero; `what` names the struct in the message
 * (ctx may be NULL). */
int sdpa_struct_import(sdpa_ctx *ctx, const char *what, const void *caller,
                       size_t v1_size, void *local, size_t local_size);

/* The start of an entry point: ctx NULL is SDPA_ERR_NULL_POINTER without a
 * message, ctx's message is cleared, args NULL fails ("who: args is NULL"),
 * and *args is read into *local by sdpa_struct_import above ("who: args"). */
int sdpa_import_args(sdpa_ctx *ctx, const char *who, const void *args,
                     size_t v1_size, void *local, size_t local_size);

#endif /* SDPA_CORE_STRUCT_IMPORT_H */
