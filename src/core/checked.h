/* Checked size arithmetic: every size is computed through these before
 * anything is allocated. */
#ifndef SDPA_CORE_CHECKED_H
#define SDPA_CORE_CHECKED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Checked size arithmetic: false on overflow. */
static inline bool sdpa_mul_size(size_t a, size_t b, size_t *r)
{
    if (a != 0 && b > SIZE_MAX / a)
        return false;
    *r = a * b;
    return true;
}
static inline bool sdpa_add_size(size_t a, size_t b, size_t *r)
{
    if (b > SIZE_MAX - a)
        return false;
    *r = a + b;
    return true;
}
/* a rounded up to a multiple of align (a power of two) */
static inline bool sdpa_round_up_size(size_t a, size_t align, size_t *r)
{
    if (a > SIZE_MAX - (align - 1))
        return false;
    *r = (a + align - 1) & ~(align - 1);
    return true;
}

/* Lays out `count` regions of counts[i] elements of sizes[i] bytes one
 * after the other, each at a multiple of `align`, from offset 0: sets
 * *offsets[i] and *total (the end, aligned); false on overflow. */
static inline bool sdpa_place_regions(int count, const size_t counts[],
                                      const size_t sizes[],
                                      size_t *const offsets[], size_t align,
                                      size_t *total)
{
    size_t at = 0;
    for (int i = 0; i < count; i++) {
        size_t bytes;
        *offsets[i] = at;
        if (!sdpa_mul_size(counts[i], sizes[i], &bytes) ||
            !sdpa_add_size(at, bytes, &at) ||
            !sdpa_add_size(at, align - 1, &at))
            return false;
        at = at / align * align;
    }
    *total = at;
    return true;
}

#endif /* SDPA_CORE_CHECKED_H */
