/* The portable C row kernels: built everywhere, the reference the AVX2
 * kernels are tested against. */
#include "rows.h"
#include "template.h"
#include "vexp.h"

#include <math.h>

#define T float
#define SUF f32
#include "rows_portable_impl.h"
#undef T
#undef SUF

#define T double
#define SUF f64
#include "rows_portable_impl.h"
#undef T
#undef SUF
