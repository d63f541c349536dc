/* The portable C row kernels: built everywhere, the reference the AVX2
 * kernels are tested against. */
#include "rows.h"
#include "vexp.h"

#include <math.h>

#define SDPA_TEMPLATE "rows_portable_impl.h"
#include "instantiate.h"
