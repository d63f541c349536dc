/* A validated call: tensor views, the resolved problem every path reads,
 * and the addressing of q, k, v (their storage types and the paged cache). */
#ifndef SDPA_CORE_PROBLEM_H
#define SDPA_CORE_PROBLEM_H

#include "kernels/half.h"
#include "kernels/philox.h"
#include "sdpa.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A validated tensor: base pointer and element strides, with broadcast
 * dimensions' strides set to 0. data is NULL for an absent optional tensor. */
typedef struct sdpa_view {
    char *data;
    int64_t stride[4];
} sdpa_view;

/* Address of element [n, h, t, 0] of a view of esize-byte elements. */
static inline char *sdpa_at(const sdpa_view *view, size_t esize, int64_t n,
                            int64_t h, int64_t t)
{
    int64_t offset =
        n * view->stride[0] + h * view->stride[1] + t * view->stride[2];
    return view->data + (size_t)offset * esize;
}

/* The row stride to hand BLAS as a leading dimension: a single-row view
 * has stride 0 after validation, and BLAS wants at least the row length. */
static inline int64_t sdpa_row_stride(const sdpa_view *view, int64_t row_len)
{
    return view->stride[2] > row_len ? view->stride[2] : row_len;
}

/* Everything a path needs, validated and resolved (defaults applied). */
typedef struct sdpa_problem {
    int dtype;
    size_t elem_size;
    int64_t batch, heads_q, heads_kv, group; /* group = Hq / Hkv */
    int64_t len_q, len_k, dim_k, dim_v;
    double scale;   /* resolved: never 0 */
    double softcap; /* 0 = off */
    int causal;
    bool mask_nonzero_allows;
    bool empty_rows_zero;
    const int64_t *kv_lens;
    /* 1.1: a window's extents (-1 = unbounded side, both -1 without a
     * window), ALiBi slopes and sinks (Hq each, or NULL), the logits
     * output's stage (0 without it) */
    int64_t window_left, window_right;
    const double *alibi_slopes, *sinks;
    int logits_stage;
    sdpa_view q, k, v, mask, bias, out, weights, lse, logits;
    sdpa_view max_weight, entropy; /* 1.1 per-row diagnostics */
    bool diagnostics;              /* either of them is asked for */
    /* 1.1 storage types (SDPA_FLOAT*) of q, k and v, the bias, and out;
     * dtype above is the compute type, which every other output has */
    int q_type, kv_type, bias_type, out_type;
    /* 1.1 paged K/V: the block table (NULL: k and v are [N|1, Hkv, Tk,
     * D]), the entries from one row to the next, keys per page */
    const int32_t *block_table;
    int64_t table_stride, page_len;
    /* 1.2 dropout (include/sdpa.h): on when dropout_p > 0; a key is kept
     * when its Philox word reaches the threshold floor(p · 2^32) */
    bool dropout;
    double dropout_p;
    uint32_t dropout_threshold;
    uint64_t dropout_seed, dropout_offset;
    /* 1.2 FP8 K/V: each KV head's scales (Hkv each, or NULL: 1) */
    const float *k_scale, *v_scale;
} sdpa_problem;

/* A K or V row of dim values in the units its view counts: blocks of 32
 * for a block type (the validator divides their strides), else values. */
static inline int64_t sdpa_kv_units(const sdpa_problem *p, int64_t dim)
{
    return dim / sdpa_dtype_values(p->kv_type);
}

/* The factors of KV head hk's FP8 scales (1 without them): k_scale
 * multiplies the head's scores, v_scale its outputs, so that no decoded
 * value is rounded by its scale. */
static inline double sdpa_k_scale(const sdpa_problem *p, int64_t hk)
{
    return p->k_scale ? (double)p->k_scale[hk] : 1.0;
}
static inline double sdpa_v_scale(const sdpa_problem *p, int64_t hk)
{
    return p->v_scale ? (double)p->v_scale[hk] : 1.0;
}

/* The mask of query row i of batch item b, head h (philox.h): key =
 * the seed, counter words 1..3 = (i, the stream offset + b·Hq + h). */
static inline sdpa_dropout_row
sdpa_dropout_row_at(const sdpa_problem *p, int64_t b, int64_t h, int64_t i)
{
    uint64_t stream =
        p->dropout_offset + (uint64_t)b * (uint64_t)p->heads_q + (uint64_t)h;
    sdpa_dropout_row row = {
        .key = {(uint32_t)p->dropout_seed, (uint32_t)(p->dropout_seed >> 32)},
        .row = (uint32_t)i,
        .stream = {(uint32_t)stream, (uint32_t)(stream >> 32)},
        .threshold = p->dropout_threshold};
    return row;
}

/* Element i of an array of storage type `type` (SDPA_FLOAT*), as a double
 * (exact for every type). */
static inline double sdpa_value_at(const void *base, int type, int64_t i)
{
    switch (type) {
    case SDPA_FLOAT32:
        return ((const float *)base)[i];
    case SDPA_FLOAT64:
        return ((const double *)base)[i];
    case SDPA_FLOAT16:
        return sdpa_f16_to_f32(((const uint16_t *)base)[i]);
    default:
        return sdpa_bf16_to_f32(((const uint16_t *)base)[i]);
    }
}

/* Are q / k and v / out stored in another type than the compute type, or
 * k and v in pages? Then the BLAS cannot read (or write) them where they
 * are: the paths widen or gather them into scratch, a block at a time. */
static inline bool sdpa_q_staged(const sdpa_problem *p)
{
    return p->q_type != p->dtype;
}
static inline bool sdpa_kv_staged(const sdpa_problem *p)
{
    return p->kv_type != p->dtype || p->block_table != NULL;
}
static inline bool sdpa_out_staged(const sdpa_problem *p)
{
    return p->out_type != p->dtype;
}

/* Row j (a key) of batch item b, KV head h of the K or V view, in its
 * storage type: through the block table when K and V are paged. */
static inline const char *sdpa_kv_row(const sdpa_problem *p,
                                      const sdpa_view *view, int64_t b,
                                      int64_t h, int64_t j)
{
    size_t es = sdpa_dtype_size(p->kv_type);
    if (!p->block_table)
        return sdpa_at(view, es, b, h, j);
    int64_t page = p->block_table[b * p->table_stride + j / p->page_len];
    return sdpa_at(view, es, page, h, j % p->page_len);
}

/* How many of the n keys from key j on are consecutive rows of one page
 * (all n without paging): a run read with one row stride. */
static inline int64_t sdpa_kv_span(const sdpa_problem *p, int64_t j, int64_t n)
{
    if (!p->block_table)
        return n;
    int64_t left = p->page_len - j % p->page_len;
    return left < n ? left : n;
}

#endif /* SDPA_CORE_PROBLEM_H */
