/*
 * The online softmax over key blocks (FlashAttention's Theorem 1 on a CPU):
 * the engine of the tiled and decode paths. A row block is a set of query
 * rows that read the same KV head — the rows of every query head of a GQA
 * group stacked together (one head's rows without GQA): a block of query
 * rows on the tiled path, all Tq rows on the decode path — and a range of
 * keys. For each key block:
 *
 *   S = scale · Q Kᵀ_blk                       gemm (gemv per row for few rows)
 *   m' = max(m, max_j s_j);  P = exp(S − m')   the row kernels of rows.h
 *   ℓ  = ℓ·e^{m−m'} + Σ_j P_j
 *   O  = O·e^{m−m'} + P V_blk                  gemm with beta = 1; the rows
 *                                              are rescaled only when m grows
 *
 * leaving the unnormalised O, the running max m and the sum ℓ in the
 * worker's scratch; out = O/ℓ and lse = m + log ℓ are written by
 * sdpa_finish_row_*. Partial results over disjoint key ranges merge exactly:
 * m = max m_c, ℓ = Σ ℓ_c e^{m_c−m}, O = Σ O_c e^{m_c−m}.
 */
#ifndef SDPA_ONLINE_SOFTMAX_H
#define SDPA_ONLINE_SOFTMAX_H

#include "core/problem.h"
#include "forward/row_block.h"
#include "forward/plan.h"
#include "runtime/pool.h"

/* The row block, sdpa_row_block, is declared in forward/row_block.h
 * (live_keys.c reads it too). */

#define SDPA_DECLARE_ONLINE(T, SUF)                                            \
    int sdpa_online_softmax_##SUF(                                             \
        const sdpa_problem *p, const sdpa_plan *plan, int kernel,              \
        void *scratch, const sdpa_row_block *blk, sdpa_where *where);          \
    void sdpa_store_diagnostics_##SUF(const sdpa_problem *p, int64_t b,        \
                                      int64_t h, int64_t i, T l, T e);         \
    int sdpa_finish_row_##SUF(const sdpa_problem *p, int64_t b, int64_t h,     \
                              int64_t i, const T *acc, T m, T l, T e,          \
                              sdpa_where *where);

SDPA_DECLARE_ONLINE(float, f32)
SDPA_DECLARE_ONLINE(double, f64)

/* Up to this many stacked rows, S = Q Kᵀ is one gemv per row: the key
 * block, read from memory by the first, stays in cache for the others,
 * where a gemm with so few rows would first copy (pack) the whole block.
 * P V is a gemm for any number of rows: OpenBLAS 0.3.21's row-major Trans
 * sgemv (Vᵀ p) is the slow one. Measured on 512-key blocks of D = 128, one
 * thread, GB/s of K or V read (standalone loop, 8 heads × 4096 keys):
 *   rows   K q: gemv per row  gemm    Vᵀ p: gemv per row  gemm
 *   1          14.6           15.8          14.0          29.1
 *   4           8.4            4.5           6.9          17.0
 *   16          3.4            3.9           3.3           6.0 */
#define GEMV_MAX_ROWS 4

#endif /* SDPA_ONLINE_SOFTMAX_H */
