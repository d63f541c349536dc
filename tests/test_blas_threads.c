/*
 * What libsdpa learns of the CBLAS's threads (src/runtime/blas_threads.c),
 * internal API linked from the static library, run by ctest with the BLAS's
 * thread variables (OPENBLAS_NUM_THREADS, BLIS_NUM_THREADS, MKL_NUM_THREADS) at
 * 2, SDPA_TEST_BLAS_THREADS = 2 where the linked BLAS reads one of them (at
 * most the CPUs there are, for OpenBLAS), 1 where it has no threads (the
 * reference CBLAS):
 *   - the count read from the BLAS is that number, on any thread;
 *   - without thread-local control (OpenBLAS, BLIS 0.9) a worker's serial
 *     scope changes nothing (no process-wide setting is ever touched) and
 *     plans assume the BLAS's count;
 *   - with it (BLIS 1.0+ with TLS, MKL) plans assume one thread, a
 *     worker's scope makes its own gemms serial while another thread keeps
 *     the BLAS's count, and leaving the scope restores the thread's
 *     setting; nested scopes restore in order.
 * Which case this build is in is printed; CI's OpenBLAS 0.3.21 is the
 * first.
 */
/* pthread barriers are POSIX 2001 (the tests build as C11) */
#define _POSIX_C_SOURCE 200809L
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
/* cmocka.h needs the three headers above first */
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <unistd.h>

#include "runtime/blas_threads.h"
#include "sdpa.h"

#ifndef SDPA_TEST_BLAS_THREADS
#error "tests/CMakeLists.txt sets SDPA_TEST_BLAS_THREADS"
#endif

/* The count the BLAS reports under ctest's environment. */
static int expected_threads(void)
{
#ifdef SDPA_TEST_BLAS_AT_MOST_CPUS
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    if (cpus >= 1 && cpus < SDPA_TEST_BLAS_THREADS)
        return (int)cpus;
#endif
    return SDPA_TEST_BLAS_THREADS;
}

static void test_reads_the_blas_count(void **state)
{
    (void)state;
    assert_int_equal(sdpa_blas_own_threads(), expected_threads());
    assert_int_equal(sdpa_blas_threads(),
                     sdpa_blas_local_control() ? 1 : expected_threads());
    print_message("thread-local BLAS control: %s\n",
                  sdpa_blas_local_control() ? "yes" : "no");
}

/* A second thread's view while the first is inside a serial scope. */
typedef struct other_view {
    pthread_barrier_t inside, seen;
    int threads;
} other_view;

static void *look_from_another_thread(void *arg)
{
    other_view *v = arg;
    pthread_barrier_wait(&v->inside);
    v->threads = sdpa_blas_own_threads();
    pthread_barrier_wait(&v->seen);
    return NULL;
}

static void test_serial_scope_is_local_and_restored(void **state)
{
    (void)state;
    other_view v;
    assert_int_equal(pthread_barrier_init(&v.inside, NULL, 2), 0);
    assert_int_equal(pthread_barrier_init(&v.seen, NULL, 2), 0);
    pthread_t other;
    assert_int_equal(pthread_create(&other, NULL, look_from_another_thread, &v),
                     0);

    sdpa_blas_serial outer = sdpa_blas_serial_begin();
    assert_int_equal(outer.set, sdpa_blas_local_control());
    const int inside = sdpa_blas_own_threads();
    pthread_barrier_wait(&v.inside);
    pthread_barrier_wait(&v.seen);
    assert_int_equal(pthread_join(other, NULL), 0);

    /* the other thread never sees this one's limit */
    assert_int_equal(v.threads, expected_threads());
    assert_int_equal(inside,
                     sdpa_blas_local_control() ? 1 : expected_threads());

    sdpa_blas_serial inner = sdpa_blas_serial_begin(); /* nested */
    assert_int_equal(sdpa_blas_own_threads(), inside);
    sdpa_blas_serial_end(&inner);
    assert_int_equal(sdpa_blas_own_threads(), inside);
    sdpa_blas_serial_end(&outer);
    assert_int_equal(sdpa_blas_own_threads(), expected_threads());
    pthread_barrier_destroy(&v.inside);
    pthread_barrier_destroy(&v.seen);
}

/* A full call, on one worker or several, leaves the calling thread's
 * setting as it was, whichever case this is. */
static void test_call_leaves_the_setting(void **state)
{
    (void)state;
    sdpa_ctx *ctx = NULL;
    assert_int_equal(sdpa_ctx_create(&ctx), SDPA_OK);
    enum { T = 96, D = 16 };
    static float q[T * D], k[T * D], v[T * D], o[T * D];
    for (int i = 0; i < T * D; i++) {
        q[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
        k[i] = (float)((i * 5) % 11) / 11.0f - 0.5f;
        v[i] = (float)((i * 3) % 17) / 17.0f;
    }
    sdpa_forward_args a = {.struct_size = sizeof a, .dtype = SDPA_FLOAT32};
    const sdpa_tensor t = {NULL, {1, 1, T, D}, {T * D, T * D, D, 1}};
    a.q = t, a.k = t, a.v = t, a.out = t;
    a.q.data = q, a.k.data = k, a.v.data = v, a.out.data = o;
    for (int workers = 1; workers <= 2; workers++)
        for (int path = SDPA_PATH_MATERIALISED; path <= SDPA_PATH_TILED;
             path++) {
            assert_int_equal(
                sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, workers), SDPA_OK);
            assert_int_equal(sdpa_ctx_set_int(ctx, SDPA_OPT_PATH, path),
                             SDPA_OK);
            assert_int_equal(sdpa_forward(ctx, &a), SDPA_OK);
            assert_int_equal(sdpa_blas_own_threads(), expected_threads());
        }
    /* each output row is a convex combination of V's rows */
    for (int i = 0; i < T; i++)
        for (int d = 0; d < D; d++) {
            float lo = 1.0f, hi = 0.0f;
            for (int j = 0; j < T; j++) {
                lo = v[j * D + d] < lo ? v[j * D + d] : lo;
                hi = v[j * D + d] > hi ? v[j * D + d] : hi;
            }
            assert_true(o[i * D + d] >= lo - 1e-6f);
            assert_true(o[i * D + d] <= hi + 1e-6f);
        }
    sdpa_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reads_the_blas_count),
        cmocka_unit_test(test_serial_scope_is_local_and_restored),
        cmocka_unit_test(test_call_leaves_the_setting),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
