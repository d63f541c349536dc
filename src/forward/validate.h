/* Validation of sdpa_forward's arguments (validate.c). */
#ifndef SDPA_FORWARD_VALIDATE_H
#define SDPA_FORWARD_VALIDATE_H

#include "core/context.h"
#include "core/problem.h"

/* Checks every argument and every size of sdpa_forward; writes nothing but
 * *problem and, on failure, ctx's message. */
int sdpa_validate(sdpa_ctx *ctx, const sdpa_forward_args *args,
                  sdpa_problem *problem);

/* The same checks of an already imported struct (this library's size) on
 * behalf of the entry point `who` (sdpa_backward validates its forward
 * fields so): every message starts "who: ". */
int sdpa_validate_call(sdpa_ctx *ctx, const char *who,
                       const sdpa_forward_args *args, sdpa_problem *problem);

#endif /* SDPA_FORWARD_VALIDATE_H */
