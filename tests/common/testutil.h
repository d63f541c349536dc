/*
 * Small helpers shared by the CMocka tests (header-only, test code only):
 * a PRNG, strided tensor buffers, a counting allocator, sentinel checks.
 * Nothing here is shared with the library.
 */
#ifndef SDPA_TESTUTIL_H
#define SDPA_TESTUTIL_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sdpa.h"

/* ---- PRNG: splitmix64, fixed seeds, identical on every platform. ------ */
typedef struct rng {
    uint64_t s;
} rng;

static inline uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi]. */
static inline int64_t rng_int(rng *r, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(rng_next(r) % (uint64_t)(hi - lo + 1));
}

/* Uniform double in [0, 1). */
static inline double rng_unit(rng *r)
{
    return (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform double in [-a, a). */
static inline double rng_sym(rng *r, double a)
{
    return a * (2.0 * rng_unit(r) - 1.0);
}

/* ---- The row kernels a test runs through (each where the CPU has it:
 * setting one it lacks gives SDPA_ERR_UNSUPPORTED). ---------------------- */
static const int test_kernels[] = {SDPA_KERNEL_PORTABLE, SDPA_KERNEL_AVX2,
                                   SDPA_KERNEL_AVX512};
enum { TEST_KERNELS = sizeof test_kernels / sizeof test_kernels[0] };

static inline const char *kernel_name(int kernel)
{
    return kernel == SDPA_KERNEL_AVX512 ? "AVX512"
           : kernel == SDPA_KERNEL_AVX2 ? "AVX2"
                                        : "PORTABLE";
}

/* ---- Strided tensor buffers. ------------------------------------------ */
enum { LAYOUT_BHTD = 0, LAYOUT_BTHD = 1 };
enum { ELEM_U8 = 0 }; /* element kind besides SDPA_FLOAT32 / SDPA_FLOAT64 */

typedef struct tbuf {
    sdpa_tensor t;
    void *mem;
    size_t elems; /* elements in mem */
    size_t esize; /* bytes per element */
    int kind;     /* SDPA_FLOAT32, SDPA_FLOAT64 or ELEM_U8 */
} tbuf;

static inline size_t kind_size(int kind)
{
    return kind == SDPA_FLOAT32   ? sizeof(float)
           : kind == SDPA_FLOAT64 ? sizeof(double)
                                  : 1u;
}

/* Number of elements a view spans (all strides >= 0). */
static inline size_t tensor_span(const sdpa_tensor *t)
{
    int64_t last = 0;
    for (int d = 0; d < 4; ++d)
        last += (t->shape[d] - 1) * t->stride[d];
    return (size_t)(last + 1);
}

/* Allocate a [n,h,t,d] view in the given layout with `pad` extra elements
 * after each row (padding between rows). Memory is filled with NaN for
 * floating kinds (so reading padding poisons results) and 0xEE for u8. */
static inline void tbuf_make(tbuf *x, int kind, int64_t n, int64_t h, int64_t t,
                             int64_t d, int layout, int64_t pad)
{
    memset(x, 0, sizeof *x);
    x->kind = kind;
    x->esize = kind_size(kind);
    x->t.shape[0] = n;
    x->t.shape[1] = h;
    x->t.shape[2] = t;
    x->t.shape[3] = d;
    if (layout == LAYOUT_BHTD) {
        int64_t row = d + pad;
        x->t.stride[3] = 1;
        x->t.stride[2] = row;
        x->t.stride[1] = t * row;
        x->t.stride[0] = h * t * row;
    } else {
        int64_t row = h * d + pad;
        x->t.stride[3] = 1;
        x->t.stride[1] = d;
        x->t.stride[2] = row;
        x->t.stride[0] = t * row;
    }
    x->elems = tensor_span(&x->t);
    x->mem = malloc(x->elems * x->esize);
    if (!x->mem)
        abort();
    x->t.data = x->mem;
    if (kind == SDPA_FLOAT32) {
        for (size_t i = 0; i < x->elems; ++i)
            ((float *)x->mem)[i] = NAN;
    } else if (kind == SDPA_FLOAT64) {
        for (size_t i = 0; i < x->elems; ++i)
            ((double *)x->mem)[i] = NAN;
    } else {
        memset(x->mem, 0xEE, x->elems);
    }
}

static inline void tbuf_free(tbuf *x)
{
    free(x->mem);
    memset(x, 0, sizeof *x);
}

/* free() on each of n pointers (NULL ones included). */
static inline void free_n(void *const *p, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        free(p[i]);
}
#define FREE_ALL(...)                                                          \
    free_n((void *[]){__VA_ARGS__},                                            \
           sizeof((void *[]){__VA_ARGS__}) / sizeof(void *))

/* tbuf_free on each buffer of a NULL-terminated list. */
static inline void tbuf_free_all(tbuf *const *list)
{
    for (; *list; ++list)
        tbuf_free(*list);
}

static inline int64_t toff(const sdpa_tensor *t, int64_t a, int64_t b,
                           int64_t c, int64_t d)
{
    return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] +
           d * t->stride[3];
}

static inline void tset(tbuf *x, int64_t a, int64_t b, int64_t c, int64_t d,
                        double v)
{
    int64_t o = toff(&x->t, a, b, c, d);
    if (x->kind == SDPA_FLOAT32)
        ((float *)x->mem)[o] = (float)v;
    else if (x->kind == SDPA_FLOAT64)
        ((double *)x->mem)[o] = v;
    else
        ((unsigned char *)x->mem)[o] = (unsigned char)v;
}

static inline double tget(const tbuf *x, int64_t a, int64_t b, int64_t c,
                          int64_t d)
{
    int64_t o = toff(&x->t, a, b, c, d);
    if (x->kind == SDPA_FLOAT32)
        return (double)((const float *)x->mem)[o];
    if (x->kind == SDPA_FLOAT64)
        return ((const double *)x->mem)[o];
    return (double)((const unsigned char *)x->mem)[o];
}

/* Fill every logical element with uniform values in [-amp, amp). */
static inline void tbuf_fill_random(tbuf *x, rng *r, double amp)
{
    const int64_t *s = x->t.shape;
    for (int64_t a = 0; a < s[0]; ++a)
        for (int64_t b = 0; b < s[1]; ++b)
            for (int64_t c = 0; c < s[2]; ++c)
                for (int64_t d = 0; d < s[3]; ++d)
                    tset(x, a, b, c, d, rng_sym(r, amp));
}

/* 1 where the element at flat index i belongs to the view, else 0. */
static inline unsigned char *tbuf_logical_map(const tbuf *x)
{
    unsigned char *m = calloc(x->elems, 1);
    if (!m)
        abort();
    const int64_t *s = x->t.shape;
    for (int64_t a = 0; a < s[0]; ++a)
        for (int64_t b = 0; b < s[1]; ++b)
            for (int64_t c = 0; c < s[2]; ++c)
                for (int64_t d = 0; d < s[3]; ++d)
                    m[toff(&x->t, a, b, c, d)] = 1;
    return m;
}

/* ---- Sentinels. -------------------------------------------------------- */
#define SENTINEL_BYTE 0xA5

static inline void fill_sentinel(void *p, size_t bytes)
{
    memset(p, SENTINEL_BYTE, bytes);
}

/* Index of the first byte that is not the sentinel, or -1. */
static inline long first_non_sentinel(const void *p, size_t bytes)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; ++i)
        if (c[i] != SENTINEL_BYTE)
            return (long)i;
    return -1;
}

/* ---- Counting allocator. ----------------------------------------------- */
#define CA_MAX_LIVE 1024

typedef struct counting_alloc {
    long allocs;        /* successful allocations */
    long frees;         /* calls to free with a non-NULL pointer */
    long failures;      /* allocations refused on purpose */
    long fail_after;    /* refuse allocation number >= this; -1 = never */
    long fail_at;       /* refuse allocation number == this only; -1 */
    long bad_alignment; /* alignment argument not a power of two <= 4096 */
    long bad_free;      /* free of an unknown pointer or with a wrong size */
    size_t live_bytes;
    void *ptr[CA_MAX_LIVE];
    size_t size[CA_MAX_LIVE];
} counting_alloc;

static inline void *ca_alloc(void *opaque, size_t size, size_t alignment)
{
    counting_alloc *ca = opaque;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
        alignment > 4096)
        ca->bad_alignment++;
    long number = ca->allocs + ca->failures; /* this request's number */
    if ((ca->fail_after >= 0 && ca->allocs >= ca->fail_after) ||
        number == ca->fail_at) {
        ca->failures++;
        return NULL;
    }
    size_t al = alignment < sizeof(void *) ? sizeof(void *) : alignment;
    size_t rounded = (size + al - 1) / al * al;
    if (rounded == 0)
        rounded = al;
    void *p = aligned_alloc(al, rounded);
    if (!p)
        return NULL;
    if ((uintptr_t)p % al != 0)
        ca->bad_alignment++;
    for (int i = 0; i < CA_MAX_LIVE; ++i) {
        if (ca->ptr[i] == NULL) {
            ca->ptr[i] = p;
            ca->size[i] = size;
            break;
        }
    }
    ca->allocs++;
    ca->live_bytes += size;
    return p;
}

static inline void ca_free(void *opaque, void *p, size_t size)
{
    counting_alloc *ca = opaque;
    if (!p)
        return;
    ca->frees++;
    int found = 0;
    for (int i = 0; i < CA_MAX_LIVE; ++i) {
        if (ca->ptr[i] == p) {
            if (ca->size[i] != size)
                ca->bad_free++;
            ca->live_bytes -= ca->size[i];
            ca->ptr[i] = NULL;
            found = 1;
            break;
        }
    }
    if (!found)
        ca->bad_free++;
    free(p);
}

static inline sdpa_allocator ca_allocator(counting_alloc *ca)
{
    sdpa_allocator a;
    memset(&a, 0, sizeof a);
    a.struct_size = sizeof(sdpa_allocator);
    a.alloc = ca_alloc;
    a.free = ca_free;
    a.opaque = ca;
    return a;
}

/* Zeroes the counters; the allocator then refuses every allocation after
 * fail_after successful ones (-1: never refuses). */
static inline void ca_reset(counting_alloc *ca, long fail_after)
{
    memset(ca, 0, sizeof *ca);
    ca->fail_after = fail_after;
    ca->fail_at = -1;
}

/* ca_reset, then the allocator that counts into ca. */
static inline sdpa_allocator ca_start(counting_alloc *ca, long fail_after)
{
    ca_reset(ca, fail_after);
    return ca_allocator(ca);
}

#endif
