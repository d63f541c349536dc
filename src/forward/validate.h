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

/* A block type's (SDPA_Q8_0, SDPA_Q4_0) tensor t: every stride along an
 * extent above 1 a multiple of 32 values, where blocks start; other types
 * pass. A ragged call holds its whole k and v to it, whose sequences'
 * own views may not step along the strides its offsets do (one key a
 * sequence, one batch item each). */
int sdpa_check_block_strides(sdpa_ctx *ctx, const char *who, const char *name,
                             const sdpa_tensor *t, int type);

#endif /* SDPA_FORWARD_VALIDATE_H */
