/* The online softmax engine, instantiated for float and double. */
#include "online_softmax.h"
#include "rows.h"
#include "template.h"
#include "vexp.h"

#include <cblas.h>
#include <math.h>

#define T float
#define SUF f32
#define GEMM cblas_sgemm
#define GEMV cblas_sgemv
#include "online_softmax_impl.h"
#undef T
#undef SUF
#undef GEMM
#undef GEMV

#define T double
#define SUF f64
#define GEMM cblas_dgemm
#define GEMV cblas_dgemv
#include "online_softmax_impl.h"
#undef T
#undef SUF
#undef GEMM
#undef GEMV
