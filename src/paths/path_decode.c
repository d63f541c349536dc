/*
 * The decode path, for few queries per KV head (the LLM token step): the
 * query rows of every head of a GQA group are stacked into one matrix (one
 * row for MHA with Tq = 1), so K and V are read once per group; the engine
 * makes Q Kᵀ gemvs and P V a gemm for so few rows (online_softmax.h).
 * The keys are split into chunks of plan->chunk_len — a length that depends
 * on the shape and the BLAS's own thread count, never on
 * SDPA_OPT_NUM_THREADS — so that even one (batch, KV head) spreads over the
 * workers. Phase 1 runs the online softmax per (b, KV head, chunk) into a
 * shared partial buffer; phase 2 merges each (b, KV head)'s chunks exactly,
 * in chunk order.
 */
#include "paths/online_softmax.h"
#include "paths/paths.h"
#include "kernels/vexp.h"

#include <math.h>

/* The static decode_chunk_item_f32/_f64, decode_merge_item_* and
 * partial_* (HACKING.md's naming rule); and sdpa_decode_chunk_item,
 * sdpa_decode_merge_item by dtype. */
#define SDPA_TEMPLATE "paths/path_decode_impl.h"
#include "core/instantiate.h"

SDPA_DEFINE_PATH_FN(decode_chunk_item)
SDPA_DEFINE_PATH_FN(decode_merge_item)
