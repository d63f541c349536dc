/* The materialised path: whole score rows per block of query rows, between
 * two CBLAS gemms. The algorithm is in path_materialised_impl.h, written once
 * for float and double. */
#include "forward/key_range.h"
#include "paths/paths.h"
#include "paths/online_softmax.h"
#include "kernels/rows.h"
#include "kernels/vexp.h"

#include <cblas.h>
#include <math.h>

/* The static materialised_item_f32/_f64 and its helpers (HACKING.md's
 * naming rule), and sdpa_materialised_item, which calls one of them by
 * dtype. */
#define SDPA_TEMPLATE "paths/path_materialised_impl.h"
#include "core/instantiate.h"

SDPA_DEFINE_PATH_FN(materialised_item)
