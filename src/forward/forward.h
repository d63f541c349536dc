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

/* What the context will hold after a call of this plan: every buffer it
 * holds now (workers' scratch, shared partials, a ragged call's records,
 * the caller's parallel-for's records, the layer's buffer), grown where
 * the plan needs more; `parts` the bytes of the ragged records the call
 * needs (0 for a rectangular call). */
int sdpa_workspace_total(sdpa_ctx *ctx, const sdpa_plan *plan, size_t parts,
                         size_t *bytes);

#endif /* SDPA_FORWARD_FORWARD_H */
