/* The online softmax engine, instantiated for float and double. */
#include "online_softmax.h"
#include "rows.h"
#include "vexp.h"

#include <cblas.h>
#include <math.h>

/* Defines (greppable names of what NAME() pastes together):
 *   sdpa_online_softmax_f32  sdpa_online_softmax_f64
 *   sdpa_finish_row_f32      sdpa_finish_row_f64
 *   sdpa_store_diagnostics_f32  sdpa_store_diagnostics_f64
 *   gather_queries_f32       gather_queries_f64      (static)
 *   block_scores_f32         block_scores_f64        (static)
 *   block_values_f32         block_values_f64        (static)
 *   store_out_row_f32        store_out_row_f64       (static)
 *   store_values_f32         store_values_f64        (static, row_terms_impl.h)
 *   stage_kv_rows_f32        stage_kv_rows_f64       (static, row_terms_impl.h)
 *   blas_kv_rows_f32         blas_kv_rows_f64        (static, row_terms_impl.h)
 *   add_alibi_f32            add_alibi_f64           (static, row_terms_impl.h)
 *   entropy_sum_f32          entropy_sum_f64         (static, row_terms_impl.h)
 *   zero_dead_scores_f32     zero_dead_scores_f64    (static, row_terms_impl.h)
 */
#define SDPA_TEMPLATE "online_softmax_impl.h"
#include "instantiate.h"
