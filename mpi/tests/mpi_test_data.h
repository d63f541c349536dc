/* What the mpirun tests of libsdpa-mpi share (test_mpi.c,
 * test_mpi_backward.c): the rank, the failure count and CHECK, typed
 * element access, random arrays from the tests' seeded generator (the
 * same on every rank) and the rows of a whole problem that one rank
 * holds. */
#ifndef MPI_TEST_DATA_H
#define MPI_TEST_DATA_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/testutil.h" /* the tests' seeded generator */
#include "sdpa_mpi.h"

static int g_rank, g_ranks, g_failures, g_cases;

#define CHECK(cond, ...)                                                       \
    do {                                                                       \
        if (!(cond)) {                                                         \
            g_failures++;                                                      \
            fprintf(stderr, "rank %d: %s:%d: ", g_rank, __FILE__, __LINE__);   \
            fprintf(stderr, __VA_ARGS__);                                      \
            fprintf(stderr, "\n");                                             \
        }                                                                      \
    } while (0)

/* ---- Data ---------------------------------------------------------------- */

static inline size_t esize(int dtype)
{
    return dtype == SDPA_FLOAT32 ? sizeof(float) : sizeof(double);
}

static inline double get(const void *p, int dtype, size_t i)
{
    return dtype == SDPA_FLOAT32 ? (double)((const float *)p)[i]
                                 : ((const double *)p)[i];
}

static inline void set(void *p, int dtype, size_t i, double v)
{
    if (dtype == SDPA_FLOAT32)
        ((float *)p)[i] = (float)v;
    else
        ((double *)p)[i] = v;
}

static inline void *random_array(rng *r, int dtype, size_t count, double amp)
{
    void *p = malloc(count * esize(dtype) + 1);
    if (!p)
        abort();
    for (size_t i = 0; i < count; i++)
        set(p, dtype, i, rng_sym(r, amp));
    return p;
}

/* Rows [off, off + len) of each segment of the [A, H, T, D] array src,
 * gathered (segment after segment) into a new [A, H, rows, D] array. */
static inline void *gather_rows(const void *src, size_t es, int64_t a,
                                int64_t h, int64_t t, int64_t d,
                                const int64_t *off, const int64_t *len,
                                int segs)
{
    int64_t rows = 0;
    for (int s = 0; s < segs; s++)
        rows += len[s];
    char *dst = malloc((size_t)(a * h * rows * d) * es + 1);
    char *p = dst;
    for (int64_t i = 0; i < a * h; i++)
        for (int s = 0; s < segs; s++) {
            size_t bytes = (size_t)(len[s] * d) * es;
            memcpy(p, (const char *)src + (size_t)((i * t + off[s]) * d) * es,
                   bytes);
            p += bytes;
        }
    return dst;
}

#endif
