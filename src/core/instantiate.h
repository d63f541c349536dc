/*
 * Instantiates a type-generic template file for float and double:
 *
 *   #define SDPA_TEMPLATE "paths/path_tiled_impl.h"
 *   #include "core/instantiate.h"
 *
 * includes it once with T = float, SUF = f32, GEMM = cblas_sgemm,
 * GEMV = cblas_sgemv, and once with the double counterparts. NAME(x) in the
 * template (template.h) pastes the suffix: x_f32 / x_f64.
 */
#include "core/template.h"

#define T float
#define SUF f32
#define GEMM cblas_sgemm
#define GEMV cblas_sgemv
#include SDPA_TEMPLATE
#undef T
#undef SUF
#undef GEMM
#undef GEMV

#define T double
#define SUF f64
#define GEMM cblas_dgemm
#define GEMV cblas_dgemv
#include SDPA_TEMPLATE
#undef T
#undef SUF
#undef GEMM
#undef GEMV

#undef SDPA_TEMPLATE
