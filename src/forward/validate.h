/* Validation of sdpa_forward's arguments (validate.c). */
#ifndef SDPA_FORWARD_VALIDATE_H
#define SDPA_FORWARD_VALIDATE_H

#include "core/context.h"
#include "core/problem.h"

/* Checks every argument and every size of a rectangular call, an already
 * imported struct (this library's size), on behalf of the entry point
 * `who` ("sdpa_forward"; sdpa_backward validates its forward fields so, a
 * ragged call each sequence's slice): every message starts "who: ". Writes
 * nothing but *problem and, on failure, ctx's message. */
int sdpa_validate_call(sdpa_ctx *ctx, const char *who,
                       const sdpa_forward_args *args, sdpa_problem *problem);

/* The checks that need no tensor extent: the types, flags, causality,
 * scale and soft-cap, and the required tensors present. A ragged call
 * whose sequences have no query row is held to them (it computes
 * nothing, so its tensors are not checked further). */
int sdpa_validate_settings(sdpa_ctx *ctx, const char *who,
                           const sdpa_forward_args *args);

#endif /* SDPA_FORWARD_VALIDATE_H */
