/* The portable C row kernels: built everywhere, the reference the vector
 * kernels (AVX2, AVX-512) are tested against. */
#include "kernels/rows.h"
#include "kernels/vexp.h"

#include <math.h>

/* The kernel tables sdpa_rows_portable_f32/_f64 over the static
 * portable_* kernels, which run rows_scalar_impl.h's scalar_* helpers over
 * whole rows; and the streaming decode kernels and half conversions
 * (rows.h) in C over half.h. Names by HACKING.md's naming rule. */
#define SDPA_TEMPLATE "kernels/rows_portable_impl.h"
#include "core/instantiate.h"
