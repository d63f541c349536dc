/* The materialised path: whole score rows per block of query rows, between
 * two CBLAS gemms. The algorithm is in path_materialised_impl.h, written once
 * for float and double. */
#include "internal.h"
#include "rows.h"

#include <cblas.h>
#include <math.h>

#define SDPA_TEMPLATE "path_materialised_impl.h"
#include "instantiate.h"

int sdpa_materialised_item(const sdpa_problem *p, const sdpa_plan *plan,
                           int kernel, void *scratch, int64_t item,
                           sdpa_where *where)
{
    return SDPA_BY_DTYPE(p, materialised_item, p, plan, kernel, scratch, item,
                         where);
}
