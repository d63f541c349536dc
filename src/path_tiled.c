/*
 * The tiled path: one work item is a block of query rows of one (batch item,
 * KV head), for every query head of the head's GQA group at once, run
 * through the online softmax over all of its keys in blocks of
 * plan->block_k. Scratch is O(rows · (block_k + Dk + Dv)) per worker,
 * independent of Tk; causal masks and kv_lens end the key loop early
 * (blocks no row can see are never computed).
 */
#include "online_softmax.h"

/* Defines tiled_item_f32 and tiled_item_f64 (static), and sdpa_tiled_item,
 * which calls one of them by dtype. */
#define SDPA_TEMPLATE "path_tiled_impl.h"
#include "instantiate.h"

SDPA_DEFINE_PATH_FN(tiled_item)
