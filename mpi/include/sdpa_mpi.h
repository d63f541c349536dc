/*
 * libsdpa-mpi — libsdpa's attention over the ranks of an MPI communicator.
 *
 * Two ways to split one attention call over P ranks (one process each,
 * typically one per node or per socket), both exact: every rank computes
 * sdpa_forward on the part it holds and the partial results are combined
 * with their log-sum-exps (sdpa_merge, include/sdpa.h), so the result is
 * the one sdpa_forward gives for the whole problem in one process, to
 * within rounding (bitwise on one rank with one shard: prefill's
 * contiguous layout, decode).
 *
 *  - sdpa_mpi_prefill, context-parallel self-attention (ring attention):
 *    the sequence of T tokens is split into shards by position; each rank
 *    holds the query rows of its shard and the K/V rows of the same
 *    positions. The K/V shards travel round the ring (rank r sends to r+1,
 *    receives from r-1) with non-blocking sends and receives that overlap
 *    the compute on the shard in hand; P steps, P-1 transfers per rank.
 *    Blocks of (query shard, key shard) entirely above the causal diagonal
 *    are skipped. Causal self-attention with contiguous shards leaves rank
 *    P-1 with about 2P-1 times the work of rank 0, so a balanced layout is
 *    offered: the sequence is cut into 2P stripes and rank r holds stripes
 *    r and 2P-1-r (one early, one late), which gives every rank the same
 *    number of visible (query, key) pairs to within one stripe's diagonal.
 *  - sdpa_mpi_decode, sharded-KV decode: the KV cache is split by key range
 *    over the ranks (rank r holds the keys after those of ranks 0..r-1),
 *    the few query rows are replicated; each rank computes its partial
 *    result, the partials are gathered (MPI_Allgather) and merged in rank
 *    order on every rank: every rank ends with the same result, bit for
 *    bit.
 *
 * What each rank passes (sdpa_mpi_args.attn, an sdpa_forward_args):
 *
 *   prefill  q, out      [N, Hq, T_r, Dk|Dv]  this rank's query rows, in the
 *                        layout's order (balanced: stripe r's rows, then
 *                        stripe 2P-1-r's); T = Σ_r T_r
 *            k, v        [N|1, Hkv, T_r, D]   the K/V rows of the same
 *                        positions
 *            lse         [N, Hq, T_r, 1]      optional
 *            mask, bias  [N|1, Hq|1, T_r|1, T|1]  optional: this rank's
 *                        query rows against ALL T key positions (columns
 *                        are global positions)
 *            kv_lens     N values in [0, T], the same on every rank
 *   decode   q, out, lse [N, Hq, Tq, D]       replicated: the same on every
 *                        rank (the result is written on every rank)
 *            k, v        [N|1, Hkv, Tk_r, D]  this rank's key range;
 *                        Tk = Σ_r Tk_r keys, rank r's first key is Σ_{s<r}
 *                        Tk_s
 *            mask, bias  [N|1, Hq|1, Tq|1, Tk_r|1]: columns are this rank's
 *                        keys
 *            kv_lens     N values in [0, Tk] over the whole cache, the same
 *                        on every rank
 *
 * dtype, causal (both anchors, measured on the whole problem: Tq = T in
 * prefill, the Tq replicated rows in decode, L_b = kv_lens[b] or the whole
 * key count), scale, soft-cap, flags, GQA (Hq % Hkv == 0), N, the heads and
 * D must agree on every rank. The empty-row policy is the context's
 * (SDPA_OPT_EMPTY_ROWS; each rank's own, which must agree): a row without
 * an allowed key anywhere fails the call on every rank with
 * SDPA_ERR_FULLY_MASKED_ROW (naming batch item, head, row and, in prefill,
 * the row's global position), or gets zeros and lse -inf. Prefill finds
 * such rows before the computation, from kv_lens, causality, the mask and
 * -inf bias values, as sdpa_forward's validation does; a row that has
 * allowed keys whose logits are all -inf is then SDPA_ERR_NONFINITE, also
 * as in sdpa_forward. Decode finds both when it merges the partials and
 * reports both as SDPA_ERR_FULLY_MASKED_ROW.
 *
 * Refused with SDPA_ERR_UNSUPPORTED (and a message saying which field):
 * the weights, logits, max_weight and entropy outputs (they span all keys,
 * which no rank holds), sliding windows and ALiBi (their distances would
 * need the global positions; pass them as a bias instead), sinks, and
 * (1.1) dropout and ragged batches (seqs, q_offsets, kv_offsets), whose
 * mask and offsets follow positions within a call.
 *
 * Errors. The calls are collective: every rank of comm calls them, with
 * the same args except for the rank's own tensors. Arguments are checked
 * on each rank and the outcome is agreed on before any data moves, and
 * again after the compute: every rank returns the same status (the lowest
 * failing rank's; its message, prefixed with its rank, is copied to every
 * rank: sdpa_mpi_last_error()).
 *  - Errors found before the computation leave every rank's outputs
 *    untouched: any rank's arguments, their agreement between the ranks,
 *    an out or lse that overlaps an input (mask, bias and kv_lens
 *    included), and rows without an allowed key.
 *  - sdpa_mpi_prefill merges its partial results into out as it goes (see
 *    Memory), so after an error found during the computation out holds
 *    unspecified values on every rank, exactly like sdpa_forward's
 *    SDPA_ERR_NONFINITE exception (docs/ERRORS.md). Those errors are
 *    SDPA_ERR_NONFINITE from any rank's computation (a NaN or +inf logit,
 *    or, under the error policy, a row whose allowed logits are all
 *    -inf), SDPA_ERR_OUT_OF_MEMORY when libsdpa cannot get scratch or
 *    worker threads for one of a rank's sdpa_forward calls, and a failure
 *    of MPI. lse is written only on success.
 *  - sdpa_mpi_decode writes its outputs only when every rank succeeded:
 *    they are untouched after any error, SDPA_ERR_NONFINITE included.
 * A failure of MPI itself aborts by MPI's default error handler. These
 * calls do not check MPI's return codes: under a handler that returns,
 * the outputs of a call that MPI failed are unspecified.
 *
 * Memory. Besides the caller's tensors, sdpa_mpi_prefill holds two K/V
 * buffers of the largest rank's shard while P > 1 (the shard in hand,
 * which is being sent on, and the one arriving), each row's running lse
 * (N·Hq·T_r values), one piece's partial result (N·Hq·min(T_r, 2048)·(Dv
 * + 1) values) and the scratch libsdpa's context keeps for its calls: the
 * partial results are merged into out in place, in the call's dtype and in
 * a fixed order (ring steps, then the shard's stripes), so the result is
 * the same bits from run to run and for any SDPA_OPT_NUM_THREADS. For
 * shape L (N = Hq = 1, T = 131072, D = 64, float32) on 2 ranks that is
 * 0.75 MiB besides the ring buffers and libsdpa's scratch.
 * sdpa_mpi_decode holds its partial result (N·Hq·Tq·(Dv + 1) values) and
 * the P gathered ones.
 *
 * Backward (1.1). sdpa_mpi_backward is the prefill's gradient, on the same
 * shards and layouts: each rank passes an sdpa_backward_args
 * (sdpa_mpi_backward_args.grad) holding its part,
 *
 *            q, out, dout, lse, dq   [N, Hq, T_r, .]  this rank's rows in the
 *                        layout's order, lse required (the prefill's)
 *            k, v, dk, dv [N|1, Hkv, T_r, D]  the K/V rows of the same
 *                        positions (dk, dv broadcast over N as k and v are)
 *            mask, bias, kv_lens  as in prefill (columns global)
 *            dbias       optional, the bias's shape [N|1, Hq|1, T_r|1, T|1]
 *                        with extent 1 where the bias broadcasts (extent 1
 *                        or stride 0), as sdpa_backward's: this rank's rows
 *
 * and gets its rows of dq (and dbias) and its positions' dk and dv. For each
 * ring step the rank's query rows meet the visiting K/V shard in tiles of at
 * most 2048 query rows and 2048 keys, each an sdpa_backward of those sub-views
 * given the global lse (and D_i = <dout_i, out_i> of its whole rows): its
 * exact share of dq and of the visiting positions' dk and dv. The K/V
 * shards travel as in prefill; each shard's dK/dV accumulator starts on
 * the next rank, travels the same way one step behind (each rank adds its
 * share, computed while the accumulator is in flight) and arrives home
 * after P - 1 steps, while the home rank computes the second half of its
 * own diagonal block (the first half hides the first K/V transfer).
 * Blocks above the causal diagonal and past kv_lens are skipped. Every
 * sum runs in a fixed order (ring steps, stripes, tiles; dk and dv: the
 * home rank's own share, then the accumulator's, which adds the ranks in
 * ring order), in the call's dtype: the same bits from run to run and for
 * any SDPA_OPT_NUM_THREADS on the same rank count. Against single-process
 * sdpa_backward the sums are grouped differently: every element of dq, dk,
 * dv and dbias is within 1e-5 (float32; 1e-12 in float64) of sdpa_backward's
 * times max(1, the largest |element| of that tensor), as mpi/tests checks
 * on 1-4 ranks (measured: below 5e-7 and 4e-16); bitwise equal on one rank
 * in the contiguous layout when one tile covers the whole problem and
 * there is no kv_lens (one sdpa_backward call).
 * Refused: everything the prefill refuses (SDPA_ERR_UNSUPPORTED), dsinks
 * (sinks are refused: SDPA_ERR_UNSUPPORTED), ragged batches (seqs, q_offsets,
 * kv_offsets: SDPA_ERR_UNSUPPORTED; split a ragged batch into its
 * sequences), dropout (SDPA_ERR_UNSUPPORTED: its mask follows positions
 * within a call), half types and a grad_dtype other than 0 or dtype
 * (SDPA_ERR_BAD_DTYPE), k and v broadcast differently over N
 * (SDPA_ERR_UNSUPPORTED). The errors are the prefill's, agreed on every
 * rank the same way, plus the gradients' shapes and strides
 * (SDPA_ERR_SHAPE_MISMATCH, SDPA_ERR_BAD_STRIDE), a missing lse, dout,
 * dq, dk or dv, or a dbias without a bias (SDPA_ERR_NULL_POINTER) and outputs
 * that overlap each other or an input (SDPA_ERR_OVERLAP): found before the
 * computation, with every output untouched. dq, dk, dv (and dbias) are zeroed
 * and accumulated during the computation: after SDPA_ERR_NONFINITE (any
 * rank's), an out of memory in libsdpa or a failure of MPI they hold
 * unspecified values. Memory: besides the caller's tensors, two K/V buffers and
 * three dK/dV accumulators (two when P = 2) of the largest rank's packed shard
 * while P > 1 (in hand and arriving; in flight, arriving and being summed), and
 * one tile's
 * gradients (N·Hq·2048·Dk + Nk·Hkv·2048·(Dk + Dv) values, and with dbias
 * its tile, at most N·Hq·2048·2048 values; dbias itself is as large as
 * the bias the caller holds) besides
 * libsdpa's scratch: nothing T × T or T_r × T_r.
 *
 * Threads: the calls are made by one thread per rank, with a context used
 * by that thread only (its options, SDPA_OPT_NUM_THREADS included, apply
 * to the rank's computation; the call sets SDPA_OPT_EMPTY_ROWS to ZERO for
 * its partial results and restores it before returning).
 */
#ifndef SDPA_MPI_H
#define SDPA_MPI_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#include <sdpa.h>

#define SDPA_MPI_VERSION_MAJOR 1
#define SDPA_MPI_VERSION_MINOR 1
#define SDPA_MPI_VERSION_PATCH 0

#if defined(SDPA_MPI_STATIC_DEFINE)
#define SDPA_MPI_API
#elif defined(__GNUC__) && __GNUC__ >= 4
#define SDPA_MPI_API __attribute__((visibility("default")))
#else
#define SDPA_MPI_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Layouts of sdpa_mpi_prefill's shards. */
enum {
    SDPA_MPI_LAYOUT_CONTIGUOUS = 1, /* rank r holds positions [o_r, o_r +
                                       T_r), o_r = Σ_{s<r} T_s: any T_r >= 1 */
    SDPA_MPI_LAYOUT_BALANCED = 2    /* 2P stripes as sdpa_mpi_shard cuts
                                       them; rank r holds stripes r and
                                       2P-1-r (for causal calls) */
};

/* Optional per-call figures of this rank (zero-initialise, set
 * struct_size). */
typedef struct sdpa_mpi_stats {
    size_t struct_size;     /* sizeof(sdpa_mpi_stats) */
    uint64_t bytes_sent;    /* K/V (prefill) or partial (decode) bytes */
    double compute_seconds; /* in sdpa_forward and sdpa_merge */
    double wait_seconds;    /* blocked waiting for transfers after the
                               compute of a step (exposed communication) */
    int64_t forward_calls;  /* sdpa_forward calls made */
    int64_t blocks_skipped; /* (query, key) shard blocks with no visible
                               pair (above the diagonal, past kv_lens),
                               per batch item */
} sdpa_mpi_stats;

/* Arguments of both calls; zero-initialise and set struct_size
 * (SDPA_MPI_ARGS_INIT). */
typedef struct sdpa_mpi_args {
    size_t struct_size;            /* sizeof(sdpa_mpi_args) */
    int layout;                    /* prefill: SDPA_MPI_LAYOUT_*; decode: 0 */
    const sdpa_forward_args *attn; /* this rank's part, as described above */
    sdpa_mpi_stats *stats;         /* optional output */
} sdpa_mpi_args;

#define SDPA_MPI_ARGS_INIT                                                     \
    {                                                                          \
        .struct_size = sizeof(sdpa_mpi_args)                                   \
    }

/* The positions rank `rank` of `ranks` holds under `layout` for a sequence
 * of seq_len tokens: [offset[0], offset[0] + length[0]) and then
 * [offset[1], offset[1] + length[1]) (length[1] = 0 for CONTIGUOUS).
 * CONTIGUOUS: seq_len cut into `ranks` shards, the first seq_len % ranks
 * one longer. BALANCED: cut into 2·ranks stripes the same way; stripes
 * rank and 2·ranks-1-rank. SDPA_ERR_BAD_OPTION_VALUE for an unknown layout,
 * SDPA_ERR_BAD_DIM when rank is outside [0, ranks) or seq_len < ranks (a
 * rank would hold nothing), SDPA_ERR_NULL_POINTER; nothing written then.
 * Returns SDPA_OK on success. See sdpa_mpi_shard(3). */
SDPA_MPI_API int sdpa_mpi_shard(int layout, int64_t seq_len, int rank,
                                int ranks, int64_t offset[2],
                                int64_t length[2]);

/* Context-parallel self-attention (ring attention, described at the top):
 * each rank passes the query and K/V rows of its shard of the sequence;
 * collective over comm. Returns SDPA_OK or a status code, the same on
 * every rank (sdpa_mpi_last_error() has the failing rank's message). See
 * sdpa_mpi_prefill(3). */
SDPA_MPI_API int sdpa_mpi_prefill(sdpa_ctx *ctx, MPI_Comm comm,
                                  const sdpa_mpi_args *args);

/* Sharded-KV attention of replicated queries (decode, described at the
 * top): each rank passes its key range, the same queries, and gets the same
 * result; collective over comm. Returns SDPA_OK or a status code, the same
 * on every rank; the outputs are written only on success. See
 * sdpa_mpi_decode(3). */
SDPA_MPI_API int sdpa_mpi_decode(sdpa_ctx *ctx, MPI_Comm comm,
                                 const sdpa_mpi_args *args);

/* Arguments of sdpa_mpi_backward (1.1); zero-initialise and set
 * struct_size (SDPA_MPI_BACKWARD_ARGS_INIT). */
typedef struct sdpa_mpi_backward_args {
    size_t struct_size;             /* sizeof(sdpa_mpi_backward_args) */
    int layout;                     /* SDPA_MPI_LAYOUT_*, the prefill's */
    const sdpa_backward_args *grad; /* this rank's part, as described above */
    sdpa_mpi_stats *stats;          /* optional output (forward_calls counts
                                       the sdpa_backward calls) */
} sdpa_mpi_backward_args;

#define SDPA_MPI_BACKWARD_ARGS_INIT                                            \
    {                                                                          \
        .struct_size = sizeof(sdpa_mpi_backward_args)                          \
    }

/* The gradients of sdpa_mpi_prefill (1.1, described at the top): each
 * rank passes its shard of q, k, v, out, dout and lse and gets its rows of
 * dq and its positions' dk and dv; collective over comm. Returns SDPA_OK
 * or a status code, the same on every rank. See sdpa_mpi_backward(3). */
SDPA_MPI_API int sdpa_mpi_backward(sdpa_ctx *ctx, MPI_Comm comm,
                                   const sdpa_mpi_backward_args *args);

/* What the calling thread's last failed sdpa_mpi_* call said; "" after a
 * success. Never NULL. See sdpa_mpi_last_error(3). */
SDPA_MPI_API const char *sdpa_mpi_last_error(void);

/* The loaded library's version, SDPA_MPI_VERSION_* as MAJOR·10000 +
 * MINOR·100 + PATCH. See sdpa_mpi_version_number(3). */
SDPA_MPI_API unsigned sdpa_mpi_version_number(void);

#ifdef __cplusplus
}
#endif

#endif /* SDPA_MPI_H */
