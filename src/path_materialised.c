/* The materialised path: whole score rows per block of query rows, between
 * two CBLAS gemms. The algorithm is in path_materialised_impl.h, written once
 * for float and double. */
#include "internal.h"
#include "online_softmax.h"
#include "rows.h"
#include "vexp.h"

#include <cblas.h>
#include <math.h>

/* Defines materialised_item_f32 and materialised_item_f64 (static, with
 * logits_store_f32, logits_store_f64, logits_fix_forbidden_f32,
 * logits_fix_forbidden_f64 and row_terms_impl.h's add_alibi_f32, add_alibi_f64,
 * entropy_sum_f32, entropy_sum_f64, zero_dead_scores_f32,
 * zero_dead_scores_f64),
 * and sdpa_materialised_item, which calls one of them by dtype. */
#define SDPA_TEMPLATE "path_materialised_impl.h"
#include "instantiate.h"

SDPA_DEFINE_PATH_FN(materialised_item)
