/* The keys a query row may see (include/sdpa.h, rules 2 and 5): its
 * diagonal, the key range that kv_lens, causality and the window leave, and
 * its mask and bias over a run of keys. */
#ifndef SDPA_FORWARD_KEY_RANGE_H
#define SDPA_FORWARD_KEY_RANGE_H

#include "core/problem.h"

#include <stdint.h>

/* Row `row`'s diagonal d_i (include/sdpa.h): the key that the causal mask,
 * the window and ALiBi measure distances from. Top-left: i; otherwise
 * bottom-right, i + (L_b - Tq). */
static inline int64_t sdpa_diagonal(const sdpa_problem *p, int64_t b,
                                    int64_t row)
{
    int64_t valid = p->kv_lens ? p->kv_lens[b] : p->len_k;
    return p->causal == SDPA_CAUSAL_TOP_LEFT ? row : row + valid - p->len_q;
}

/* Keys row `row` of batch item `b` may see before the mask and the bias
 * are applied: [sdpa_key_start, sdpa_key_limit) — kv_lens, causality and
 * the window; none when limit <= start. Both never decrease with the row.
 * (Window extents are at most Tq + Tk after validation: no overflow.) */
static inline int64_t sdpa_key_limit(const sdpa_problem *p, int64_t b,
                                     int64_t row)
{
    int64_t valid = p->kv_lens ? p->kv_lens[b] : p->len_k;
    int64_t limit = valid, diagonal = sdpa_diagonal(p, b, row);
    if (p->causal != SDPA_CAUSAL_NONE)
        limit = diagonal + 1;
    if (p->window_right >= 0 && diagonal + p->window_right + 1 < limit)
        limit = diagonal + p->window_right + 1;
    return limit < valid ? limit : valid;
}

static inline int64_t sdpa_key_start(const sdpa_problem *p, int64_t b,
                                     int64_t row)
{
    if (p->window_left < 0)
        return 0;
    int64_t valid = p->kv_lens ? p->kv_lens[b] : p->len_k;
    int64_t start = sdpa_diagonal(p, b, row) - p->window_left;
    start = start < valid ? start : valid; /* past every key: none left */
    return start > 0 ? start : 0;
}

/* Row i's mask over keys [j0, j0 + n) as n contiguous bytes: the caller's
 * own when the mask's key stride is 1, else gathered into buf (n bytes; a
 * key-broadcast mask has stride 0). */
static inline const uint8_t *sdpa_mask_keys(const sdpa_problem *p, int64_t b,
                                            int64_t h, int64_t i, int64_t j0,
                                            int64_t n, uint8_t *buf)
{
    const uint8_t *row = (const uint8_t *)sdpa_at(&p->mask, 1, b, h, i);
    const int64_t step = p->mask.stride[3];
    if (step == 1)
        return row + j0;
    for (int64_t j = 0; j < n; j++)
        buf[j] = row[(j0 + j) * step];
    return buf;
}

/* The same for the bias, in the compute type: the caller's row when its
 * key stride is 1 and it is stored in the compute type, else gathered and
 * widened into buf (n values). */
static inline const void *sdpa_bias_keys(const sdpa_problem *p, int64_t b,
                                         int64_t h, int64_t i, int64_t j0,
                                         int64_t n, void *buf)
{
    const size_t size = sdpa_dtype_size(p->bias_type);
    const char *row = sdpa_at(&p->bias, size, b, h, i);
    const int64_t step = p->bias.stride[3];
    if (step == 1 && p->bias_type == p->dtype)
        return row + (size_t)j0 * size;
    if (p->dtype == SDPA_FLOAT32)
        for (int64_t j = 0; j < n; j++)
            ((float *)buf)[j] =
                (float)sdpa_value_at(row, p->bias_type, (j0 + j) * step);
    else
        for (int64_t j = 0; j < n; j++)
            ((double *)buf)[j] =
                sdpa_value_at(row, p->bias_type, (j0 + j) * step);
    return buf;
}

#endif /* SDPA_FORWARD_KEY_RANGE_H */
