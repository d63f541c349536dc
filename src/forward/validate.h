/* Validation of sdpa_forward's arguments (validate.c). */
#ifndef SDPA_FORWARD_VALIDATE_H
#define SDPA_FORWARD_VALIDATE_H

#include "core/context.h"
#include "core/problem.h"

#include <stdbool.h>
#include <stdint.h>

/* Could an output view write one element twice? (validate.c's rule,
 * conservative: sorted by stride, each dimension must step past all that
 * the inner ones cover; strides non-negative, broadcast ones already 0.) */
bool sdpa_overlaps_itself(const int64_t shape[4], const int64_t stride[4]);

/* Checks every argument and every size; writes nothing but *problem and, on
 * failure, ctx's message. */
int sdpa_validate(sdpa_ctx *ctx, const sdpa_forward_args *args,
                  sdpa_problem *problem);

#endif /* SDPA_FORWARD_VALIDATE_H */
