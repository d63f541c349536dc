/* What the forward's front door (api.c) offers the library's other code:
 * sdpa_forward inside a call in progress, and the workspace sum. */
#ifndef SDPA_FORWARD_FORWARD_H
#define SDPA_FORWARD_FORWARD_H

#include "core/context.h"
#include "forward/plan.h"

#include <stddef.h>

/* sdpa_forward inside a call already in progress on ctx (sdpa_enter): the
 * layer's attention. */
int sdpa_forward_call(sdpa_ctx *ctx, const sdpa_forward_args *args);

/* What the context will hold after a call of this plan: what it holds now,
 * grown where the plan needs more, and `other` bytes of its other records
 * (a ragged call's parts, as they will be held). */
int sdpa_workspace_total(sdpa_ctx *ctx, const sdpa_plan *plan, size_t other,
                         size_t *bytes);

#endif /* SDPA_FORWARD_FORWARD_H */
