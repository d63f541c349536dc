/* sdpa_forward and sdpa_forward_workspace on a ragged batch
 * (ragged_forward.c), and the workspace sum both kinds of call share
 * (api.c). */
#ifndef SDPA_FORWARD_RAGGED_FORWARD_H
#define SDPA_FORWARD_RAGGED_FORWARD_H

#include "core/context.h"
#include "forward/plan.h"

#include <stddef.h>

/* args is imported (this library's size) and ragged (sdpa_is_ragged). */
int sdpa_ragged_forward(sdpa_ctx *ctx, const sdpa_forward_args *args);
int sdpa_ragged_forward_workspace(sdpa_ctx *ctx, const sdpa_forward_args *args,
                                  size_t *bytes);

/* What the context will hold after a call of this plan: what it holds now,
 * grown where the plan needs more, and `other` bytes of its other records
 * (a ragged call's parts, as they will be held). */
int sdpa_workspace_total(sdpa_ctx *ctx, const sdpa_plan *plan, size_t other,
                         size_t *bytes);

#endif /* SDPA_FORWARD_RAGGED_FORWARD_H */
