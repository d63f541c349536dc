/* sdpa_forward and sdpa_forward_workspace on a ragged batch
 * (ragged_forward.c). */
#ifndef SDPA_FORWARD_RAGGED_FORWARD_H
#define SDPA_FORWARD_RAGGED_FORWARD_H

#include "core/context.h"
#include "forward/plan.h"

#include <stddef.h>

/* args is imported (this library's size) and ragged (sdpa_is_ragged). */
int sdpa_ragged_forward(sdpa_ctx *ctx, const sdpa_forward_args *args);
int sdpa_ragged_forward_workspace(sdpa_ctx *ctx, const sdpa_forward_args *args,
                                  size_t *bytes);

#endif /* SDPA_FORWARD_RAGGED_FORWARD_H */
