/*
 * What the CBLAS that libsdpa's gemms reach does with threads, asked at run
 * time of the library that provides cblas_sgemm in this process (the one
 * libsdpa was built against, or another put in its place through Debian's
 * alternatives or LD_LIBRARY_PATH).
 *
 * Threads one gemm may use, as the library reports them:
 *   OpenBLAS  openblas_get_num_threads (process-wide);
 *   BLIS      bli_thread_get_num_threads (below 1 when unset: 1);
 *   MKL       MKL_Get_Max_Threads.
 * Others (the reference CBLAS, ATLAS) count as one thread.
 *
 * Thread-local control: a limit one thread sets on its own gemms, which no
 * other thread sees. With it, the threads that run a call's items (its
 * workers, or the caller's thread alone) run their gemms on one thread
 * each and restore the thread's setting after, whatever the BLAS's own
 * count, so plans are made as for a one-thread BLAS, workers run side by
 * side, and one worker gives the bits of several (BLIS's results change
 * with its thread count):
 *   MKL       MKL_Set_Num_Threads_Local (returns the previous value);
 *   BLIS      bli_thread_set_num_threads, where the runtime settings are
 *             per thread: BLIS 1.0 and later built with thread-local
 *             storage (bli_info_get_enable_tls). In BLIS 0.9 (Debian 12's)
 *             the setting is process-wide, so it is not used.
 *   OpenBLAS  none. openblas_set_num_threads_local (0.3.26) sets the
 *             process-wide count in the pthreads builds (0.3.28's
 *             driver/others/openblas_set_num_threads.c calls
 *             openblas_set_num_threads; a second thread then reads the new
 *             count from openblas_get_num_threads), so it is never called.
 *
 * Without thread-local control the plan adapts to the BLAS's count instead:
 * OpenBLAS (pthreads build, 0.3.21 here) runs a gemm on its own threads
 * when M·N·K exceeds 65536 · GEMM_MULTITHREAD_THRESHOLD (4) = 262,144, and
 * then takes a process-wide lock: gemms that several of our workers issue
 * at once queue behind each other. Gemms at or below the threshold run on
 * the calling thread with no lock, so they run side by side (gemv: M·N from
 * 2304 · 4 = 9,216 up is threaded). libsdpa never changes a process-wide
 * setting.
 */
#define _GNU_SOURCE /* dladdr, RTLD_NOLOAD, RTLD_DEFAULT */
#include "runtime/blas_threads.h"

#include <cblas.h>
#include <dlfcn.h>
#include <pthread.h>
#include <string.h>

/* The functions below, where the BLAS has them. BLIS's dim_t is 32 or 64
 * bits depending on its build: its getters are read through a 32-bit int
 * (the low half of a 64-bit return register on x86-64 and AArch64 alike,
 * exact for thread counts), its setter is given a 64-bit argument (of
 * which a 32-bit dim_t reads the low half). */
typedef struct blas_api {
    int (*openblas_threads)(void);
    int32_t (*bli_threads)(void);
    void (*bli_set_threads)(int64_t);
    /* BLIS's per-loop ways (BLIS_JC_NT ...), restored where a thread's
     * setting was given as ways rather than a thread count */
    int32_t (*bli_ways[5])(void);
    void (*bli_set_ways)(int64_t, int64_t, int64_t, int64_t, int64_t);
    int (*mkl_threads)(void);
    int (*mkl_set_local)(int);
} blas_api;

static blas_api api;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

/* dlsym's object pointer as a function pointer, the way POSIX allows. */
#define LOOK_UP(handle, name, fn)                                              \
    do {                                                                       \
        void *sym_ = dlsym(handle, name);                                      \
        memcpy(&(fn), &sym_, sizeof sym_);                                     \
    } while (0)

static void api_resolve(void)
{
    /* the object that provides cblas_sgemm, and the objects it needs */
    void (*gemm)(void) = (void (*)(void))cblas_sgemm;
    void *address = NULL, *handle = NULL;
    memcpy(&address, &gemm, sizeof address);
    Dl_info info;
    if (dladdr(address, &info) && info.dli_fname)
        handle = dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD);
    void *scope = handle ? handle : RTLD_DEFAULT;

    LOOK_UP(scope, "openblas_get_num_threads", api.openblas_threads);
    LOOK_UP(scope, "bli_thread_get_num_threads", api.bli_threads);
    int32_t (*bli_tls)(void) = NULL;
    LOOK_UP(scope, "bli_info_get_enable_tls", bli_tls);
    if (api.bli_threads && bli_tls && bli_tls() != 0) {
        static const char *const ways[5] = {
            "bli_thread_get_jc_nt", "bli_thread_get_pc_nt",
            "bli_thread_get_ic_nt", "bli_thread_get_jr_nt",
            "bli_thread_get_ir_nt"};
        bool all = true;
        for (int w = 0; w < 5; w++) {
            LOOK_UP(scope, ways[w], api.bli_ways[w]);
            all = all && api.bli_ways[w];
        }
        LOOK_UP(scope, "bli_thread_set_ways", api.bli_set_ways);
        if (all && api.bli_set_ways)
            LOOK_UP(scope, "bli_thread_set_num_threads", api.bli_set_threads);
    }
    LOOK_UP(scope, "MKL_Get_Max_Threads", api.mkl_threads);
    LOOK_UP(scope, "MKL_Set_Num_Threads_Local", api.mkl_set_local);
#if defined(SDPA_HAVE_OPENBLAS)
    /* a static libsdpa.a in a program that exports no symbols: the
     * OpenBLAS it was built for */
    if (!api.openblas_threads && !api.bli_threads && !api.mkl_threads)
        api.openblas_threads = openblas_get_num_threads;
#endif
    /* the handle stays open: the library stays loaded while libsdpa is */
}

static const blas_api *blas(void)
{
    pthread_once(&api_once, api_resolve);
    return &api;
}

static int at_least_one(int threads)
{
    return threads > 1 ? threads : 1;
}

int sdpa_blas_own_threads(void)
{
    const blas_api *b = blas();
    if (b->mkl_threads)
        return at_least_one(b->mkl_threads());
    if (b->bli_threads)
        return at_least_one((int)b->bli_threads());
    if (b->openblas_threads)
        return at_least_one(b->openblas_threads());
    return 1;
}

bool sdpa_blas_local_control(void)
{
    const blas_api *b = blas();
    return b->mkl_set_local || b->bli_set_threads;
}

int sdpa_blas_threads(void)
{
    return sdpa_blas_local_control() ? 1 : sdpa_blas_own_threads();
}

sdpa_blas_serial sdpa_blas_serial_begin(void)
{
    const blas_api *b = blas();
    sdpa_blas_serial was = {0};
    if (b->mkl_set_local) {
        was.threads = b->mkl_set_local(1);
        was.set = true;
    } else if (b->bli_set_threads) {
        was.threads = (int)b->bli_threads();
        for (int w = 0; w < 5; w++)
            was.ways[w] = (int)b->bli_ways[w]();
        b->bli_set_threads(1);
        was.set = true;
    }
    return was;
}

void sdpa_blas_serial_end(const sdpa_blas_serial *was)
{
    if (!was->set)
        return;
    const blas_api *b = blas();
    if (b->mkl_set_local)
        b->mkl_set_local(was->threads);
    else if (was->threads >= 1)
        b->bli_set_threads(was->threads);
    else /* a thread count unset: the ways (all 1 if none were set) */
        b->bli_set_ways(was->ways[0], was->ways[1], was->ways[2], was->ways[3],
                        was->ways[4]);
}
