/* Ragged batches (ragged.c): the checks of seqs, q_offsets and kv_offsets
 * that hold for the whole call, and each sequence's own arguments, which
 * the entry point then validates and plans as a call of its own. Shared by
 * sdpa_forward and sdpa_backward. */
#ifndef SDPA_FORWARD_RAGGED_H
#define SDPA_FORWARD_RAGGED_H

#include "core/context.h"
#include "sdpa.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Where a ragged call's sequences find their keys. */
enum {
    SDPA_KEYS_PACKED = 1,  /* kv_offsets: rows of [1, Hkv, total_k, D] */
    SDPA_KEYS_BATCHED = 2, /* item b of [seqs, Hkv, Tk, D] */
    SDPA_KEYS_SHARED = 3,  /* the one item of [1, Hkv, Tk, D] */
    SDPA_KEYS_PAGED = 4    /* row b of the block table */
};

/* A checked ragged description. */
typedef struct sdpa_ragged {
    int64_t seqs;
    const int64_t *q_off, *kv_off; /* kv_off NULL unless packed */
    int keys;                      /* SDPA_KEYS_* */
} sdpa_ragged;

/* Is this an imported (this library's size) call with ragged fields? */
static inline bool sdpa_is_ragged(const sdpa_forward_args *args)
{
    return args->seqs != 0 || args->q_offsets || args->kv_offsets;
}

/* The checks of a ragged call that concern the whole of it, in this order:
 * the ragged fields agree (SDPA_ERR_BAD_RAGGED), q_offsets and kv_offsets
 * start at 0, never decrease and end at the packed T extent (q's, k's)
 * (SDPA_ERR_OFFSETS_*), the packed per-row tensors have N = 1 and that T
 * extent, packed k and v the same T, batched k and v seqs or 1 items
 * (SDPA_ERR_SHAPE_MISMATCH), and kv_lens[b] lies in [0, Tk_b]
 * (SDPA_ERR_BAD_KV_LEN). Tensors are otherwise checked per sequence,
 * through sdpa_ragged_slice, and as wholes by sdpa_ragged_check_whole.
 * `outputs` names the per-row outputs besides out (forward: lse,
 * max_weight, entropy), `refused` the tensors a ragged call of `who` does
 * not take (each with its name). */
typedef struct sdpa_named_tensor {
    const char *name;
    const sdpa_tensor *tensor;
} sdpa_named_tensor;
int sdpa_ragged_check(sdpa_ctx *ctx, const char *who,
                      const sdpa_forward_args *args,
                      const sdpa_named_tensor *rows, int row_count,
                      const sdpa_named_tensor *refused, int refused_count,
                      sdpa_ragged *r);

/* Query rows [first, first + count) of a [1, H, T, D] view of storage type
 * `type`: its T extent becomes count. And the same for keys: item b of a
 * batched view. */
sdpa_tensor sdpa_slice_rows(sdpa_tensor t, int type, int64_t first,
                            int64_t count);
sdpa_tensor sdpa_slice_item(sdpa_tensor t, int type, int64_t item);

/* Sequence b's query rows (Tq_b) and keys (Tk_b, the batched T for batched,
 * shared and paged keys). */
static inline int64_t sdpa_seq_rows(const sdpa_ragged *r, int64_t b)
{
    return r->q_off[b + 1] - r->q_off[b];
}
int64_t sdpa_seq_keys(const sdpa_ragged *r, const sdpa_forward_args *args,
                      int64_t b);

/* Sequence b's keys in a view shaped like k (k, v, and the backward's
 * dk, dv): rows [kv_offsets[b], kv_offsets[b + 1]) of a packed view (a
 * sequence without keys gets one row, never read or written), item b of
 * a batched one, the view as it is for shared or paged keys. */
sdpa_tensor sdpa_slice_keys(sdpa_tensor t, int type, const sdpa_ragged *r,
                            int64_t b);

/* Sequence b's arguments as a rectangular call of its own: q, out and the
 * per-row outputs (lse, max_weight, entropy) sliced to its rows, k and v
 * to its keys (a sequence without keys gets one key row of the packed
 * tensor and kv_lens 0: nothing of it is read), kv_lens and block_table
 * to its entry, the ragged fields 0. Sizes from the storage types of the
 * (validated or not) dtype fields; an invalid type slices as float32 and
 * is refused by the validation of the slice. */
void sdpa_ragged_slice(const sdpa_forward_args *args, const sdpa_ragged *r,
                       int64_t b, sdpa_forward_args *sub);

/* Sequence b's own checks refused its block-table row (SDPA_ERR_BAD_PAGE,
 * with the indices of its one-row table): the message again, with the
 * table's own indices. */
int sdpa_ragged_page_error(sdpa_ctx *ctx, const char *who,
                           const sdpa_forward_args *args, const sdpa_ragged *r,
                           int64_t b);

/* "who: sequence b" into buf (for the messages of a sequence's checks). */
const char *sdpa_seq_who(char *buf, size_t size, const char *who, int64_t b);

/* The whole packed tensors after every sequence passed: each output
 * writes no element twice across sequences and meets no input, kv_lens,
 * the offsets or the block table (SDPA_ERR_BAD_STRIDE, SDPA_ERR_OVERLAP).
 * `tensors` lists every tensor of the call with its element size and
 * whether it is an output. */
typedef struct sdpa_whole_tensor {
    const char *name;
    const sdpa_tensor *tensor;
    size_t elem_size;
    bool is_output;
    bool inner_unused; /* one value per row: stride[3] ignored */
} sdpa_whole_tensor;
int sdpa_ragged_check_whole(sdpa_ctx *ctx, const char *who,
                            const sdpa_forward_args *args, const sdpa_ragged *r,
                            const sdpa_whole_tensor *tensors, int count);

#endif /* SDPA_FORWARD_RAGGED_H */
