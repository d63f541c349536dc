/* The materialised path: whole score rows per block of query rows, between
 * two CBLAS gemms. The algorithm is in path_materialised_impl.h, written once
 * for float and double. */
#include "internal.h"
#include "rows.h"
#include "template.h"

#include <cblas.h>
#include <math.h>

#define T float
#define SUF f32
#define GEMM cblas_sgemm
#include "path_materialised_impl.h"
#undef T
#undef SUF
#undef GEMM

#define T double
#define SUF f64
#define GEMM cblas_dgemm
#include "path_materialised_impl.h"
#undef T
#undef SUF
#undef GEMM

int sdpa_materialised_item(const sdpa_problem *p, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where)
{
    return SDPA_BY_DTYPE(p, materialised_item, p, plan, kernel, scratch, item,
                         where);
}
