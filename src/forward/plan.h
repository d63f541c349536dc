/* The plan of one call (plan.c): path, work split and scratch layout. */
#ifndef SDPA_FORWARD_PLAN_H
#define SDPA_FORWARD_PLAN_H

#include "core/context.h"
#include "core/problem.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The plan of one call: which path, how the work is split, what scratch
 * each worker needs. */
typedef struct sdpa_plan {
    int path;            /* resolved SDPA_PATH_* */
    int threads;         /* workers that will run */
    int reserve_workers; /* workers whose scratch (and threads) are held:
                            >= threads, so that smaller calls, which may
                            run more of them, allocate nothing */
    int64_t block_q;     /* query rows of one head per work item */
    int64_t block_k;     /* keys per block (tiled and decode paths) */
    int64_t q_blocks;    /* ceil(Tq / block_q) */
    int64_t chunk_len;   /* decode: keys per chunk (never depends on threads) */
    int64_t chunks;      /* decode: ceil(Tk / chunk_len) */
    int64_t rows;        /* most stacked query rows one item handles */
    int64_t work_items;  /* items of the parallel phase */
    int64_t merge_items; /* decode: items of the merge phase (N · Hkv) */
    int64_t visit_rows;  /* decode: the chunk items' visiting order
                            (sdpa_run_items): merge_items for a paged
                            cache (a chunk of every head, then the next
                            chunk), else 1 (a head's chunks in turn) */
    size_t score_ld;     /* leading dimension of the score scratch */
    /* byte offsets of the regions of one worker's scratch (tiled/decode) */
    size_t off_q, off_s, off_o, off_m, off_l, off_a;
    size_t off_mask, off_bias; /* a row's gathered mask / bias keys */
    size_t off_live;           /* which keys of a block some row may see */
    size_t off_t, off_e;       /* diagnostics: a row's final logits (t)
                                  and each row's Σ e·(s − m) (e) */
    size_t off_kt, off_vt;     /* K and V rows widened or gathered for the
                                  BLAS (sdpa_kv_staged), a block at a time */
    int64_t stage_keys;        /* keys of those regions */
    int64_t piece_keys;        /* materialised: the keys one gemm takes at
                                  most, staged or not, so that staged
                                  (paged, half) K/V give the bits of
                                  contiguous ones; 0: all */
    bool fused;                /* decode: the library's own streaming
                                  kernels (rows.h dot_rows, acc_rows) read
                                  K and V, instead of BLAS gemv/gemm */
    size_t worker_bytes;       /* scratch per worker, as reserved: at least what
                                  the plan uses, and never more for a call that is
                                  no larger (docs/CONTEXTS.md) */
    size_t shared_bytes;       /* decode: partial results of every chunk, as
                                  reserved likewise */
    void *shared;              /* set at execution: the shared buffer */
    /* a ragged call (forward/ragged_forward.c): its sequences' own
     * problems and plans, whose items this plan's items are */
    const struct sdpa_part *parts;
    int64_t part_count;
    bool blas_owns_cores; /* threads was set to 1 so that the BLAS's
                             threads run the gemms (plan_workers) */
} sdpa_plan;

int sdpa_make_plan(sdpa_ctx *ctx, const sdpa_problem *problem, sdpa_plan *plan);

/* The decode path's own streaming kernels (plan->fused) take the keys of a
 * chunk in blocks of at most this many (plan->block_k): a block of K (then
 * V) rows stays in L1/L2 between the query rows that read it (32 KiB of
 * f32 K at D = 128). Measured (sdpa-bench, 1 core, AVX-512, interleaved):
 * 64 against 128 keys, shape G 3.87 / 3.77 ms (noise), G8 1.19 / 1.23, Gh
 * (float16 K/V) 2.35 / 2.68: the widened halves favour the shorter
 * block. */
#define SDPA_FUSED_BLOCK_K 64

/* The end of the piece of keys [a, end) one gemm takes at once: all of
 * them, or plan->piece_keys (at most stage_keys, the keys staged into
 * scratch at once). */
static inline int64_t sdpa_stage_end(const sdpa_plan *plan, int64_t a,
                                     int64_t end)
{
    return plan->piece_keys && end - a > plan->piece_keys ? a + plan->piece_keys
                                                          : end;
}

/* Region `name` (q, s, o, m, l, a, mask, bias, live, t, e, kt, vt) of a
 * worker's scratch, as a T*. */
#define SDPA_REGION(T, plan, scratch, name)                                    \
    ((T *)(void *)((char *)(scratch) + (plan)->off_##name))

#endif /* SDPA_FORWARD_PLAN_H */
