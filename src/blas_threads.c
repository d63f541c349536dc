/*
 * What the linked CBLAS does with threads, as far as the plan must know.
 *
 * OpenBLAS (pthreads build, 0.3.21 here) runs a gemm on its own threads when
 * M·N·K exceeds 65536 · GEMM_MULTITHREAD_THRESHOLD (4) = 262,144, and then
 * takes a process-wide lock: gemms that several of our workers issue at once
 * queue behind each other. Gemms at or below the threshold run on the
 * calling thread with no lock, so they run side by side (gemv: M·N from
 * 2304 · 4 = 9,216 up is threaded). It offers no
 * per-call thread count in this version, and openblas_set_num_threads is
 * process-global: we only read the setting (OPENBLAS_NUM_THREADS).
 * Other CBLAS libraries (BLIS, the reference CBLAS) are taken as
 * single-threaded.
 */
#include "internal.h"

#if defined(SDPA_HAVE_OPENBLAS)
#include <cblas.h>
#endif

int sdpa_blas_threads(void)
{
#if defined(SDPA_HAVE_OPENBLAS)
    int threads = openblas_get_num_threads();
    return threads > 1 ? threads : 1;
#else
    return 1;
#endif
}
