/* The online softmax engine, instantiated for float and double. */
#include "forward/key_range.h"
#include "paths/online_softmax.h"
#include "kernels/rows.h"
#include "kernels/vexp.h"

#include <cblas.h>
#include <math.h>

/* sdpa_online_softmax_f32/_f64, sdpa_finish_row_* and
 * sdpa_store_diagnostics_* with their static helpers, by HACKING.md's
 * naming rule (NAME(x) is x_f32, x_f64). */
#define SDPA_TEMPLATE "paths/online_softmax_impl.h"
#include "core/instantiate.h"
