/*
 * The tiled path: one work item is a block of query rows of one (batch item,
 * KV head), for every query head of the head's GQA group at once, run
 * through the online softmax over all of its keys in blocks of
 * plan->block_k. Scratch is O(rows · (block_k + Dk + Dv)) per worker,
 * independent of Tk; causal masks and kv_lens end the key loop early
 * (blocks no row can see are never computed).
 */
#include "paths/online_softmax.h"
#include "paths/paths.h"

/* The static tiled_item_f32/_f64 (HACKING.md's naming rule), and
 * sdpa_tiled_item, which calls one of them by dtype. */
#define SDPA_TEMPLATE "paths/path_tiled_impl.h"
#include "core/instantiate.h"

SDPA_DEFINE_PATH_FN(tiled_item)
