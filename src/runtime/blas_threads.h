/* What the CBLAS does with threads, and how a worker runs its gemms
 * serially (blas_threads.c). */
#ifndef SDPA_RUNTIME_BLAS_THREADS_H
#define SDPA_RUNTIME_BLAS_THREADS_H

#include <stdbool.h>

/* The CBLAS's threads (blas_threads.c). sdpa_blas_own_threads: threads it
 * may use inside one gemm, as it reports them (1 if unknown).
 * sdpa_blas_local_control: whether a thread can limit its own gemms
 * without changing other threads' (MKL, BLIS 1.0+ with thread-local
 * storage). sdpa_blas_threads: the threads a plan must assume for the
 * gemms of its items: 1 with local control (the threads that run a call's
 * items run theirs serially, between sdpa_blas_serial_begin and _end,
 * which restores the thread's own setting), else the BLAS's own. Also the
 * largest M·N·K that OpenBLAS runs on the calling thread alone. */
typedef struct sdpa_blas_serial {
    bool set;    /* a setting was changed, to restore */
    int threads; /* the thread's previous setting */
    int ways[5]; /* and BLIS's per-loop ways */
} sdpa_blas_serial;
int sdpa_blas_own_threads(void);
bool sdpa_blas_local_control(void);
int sdpa_blas_threads(void);
sdpa_blas_serial sdpa_blas_serial_begin(void);
void sdpa_blas_serial_end(const sdpa_blas_serial *was);
#define SDPA_BLAS_SERIAL_MNK 262144 /* gemm: 65536 · 4 */
#define SDPA_BLAS_SERIAL_MN 9216    /* gemv: M·N below 2304 · 4 */

#endif /* SDPA_RUNTIME_BLAS_THREADS_H */
