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

#endif /* SDPA_CORE_CHECKED_H */
