/* libsdpa-mpi's internals: shared by prefill.c, decode.c and backward.c. */
#ifndef SDPA_MPI_INTERNAL_H
#define SDPA_MPI_INTERNAL_H

#include "sdpa_mpi.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Frozen first sizes of the structs (LP64), never sizeof. */
#define SDPA_MPI_ARGS_SIZE_V1 ((size_t)32)
#define SDPA_MPI_STATS_SIZE_V1 ((size_t)48)
#define SDPA_FORWARD_ARGS_SIZE_V1 ((size_t)624)
#define SDPA_MPI_BACKWARD_ARGS_SIZE_V1 ((size_t)32)
#define SDPA_BACKWARD_ARGS_SIZE_V1 ((size_t)952)

/* Records the calling thread's message (printf-style) and returns status. */
int mpi_fail(int status, const char *format, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;
/* The thread's message buffer (sdpa_mpi_last_error). */
char *mpi_message(void);
enum { MPI_MESSAGE_SIZE = 320 };

/* A run of positions: global rows [off, off + len) are local rows
 * [local, local + len) of the rank's tensors. */
typedef struct mpi_seg {
    int64_t off, len, local;
} mpi_seg;

typedef struct mpi_job mpi_job;

/* One call of the block procedure (mpi_block): items [b0, b0 + nb), global
 * query rows [r0, r1) of segment qs, local key rows [krow, krow + klen) of
 * kt / vt (mask/bias column col0), causal mode `causal`, key lengths kvl
 * (NULL or nb values, shifted to the call's keys). */
typedef struct mpi_call {
    const mpi_seg *qs;
    int64_t b0, nb, r0, r1;
    const sdpa_tensor *kt, *vt;
    int64_t krow, klen, col0;
    int causal;
    const int64_t *kvl;
} mpi_call;

/* One call's state on this rank. */
struct mpi_job {
    const char *fn; /* "sdpa_mpi_prefill" / "sdpa_mpi_decode" */
    sdpa_ctx *ctx;
    MPI_Comm comm;
    int rank, ranks;
    sdpa_forward_args a; /* the caller's, in this library's size */
    size_t es;
    int64_t n, hq, hkv, dk, dv, nk;
    int64_t rows;     /* local query rows (Tq_r or Tq) */
    int64_t tq_total; /* the whole problem's query rows */
    int64_t tk_total; /* the whole problem's keys */
    bool mask_global; /* mask/bias columns are global positions */
    int64_t policy;   /* the caller's SDPA_OPT_EMPTY_ROWS */
    bool policy_set;  /* ctx's option was changed and must be restored */
    /* Where the partial results are merged: acc [N, Hq, rows, Dv] is the
     * caller's out in prefill (no copy of the rank's rows: issue 12's
     * memory target) and a private buffer in decode (it is sent);
     * acc_lse [N, Hq, rows, 1], contiguous, is each row's running lse (-inf
     * while the row has seen no key; acc's row is not read then). */
    sdpa_tensor acc;
    void *acc_lse;
    /* One merging sdpa_forward call's result, [nb, Hq, r, Dv] then [nb,
     * Hq, r, 1] contiguous, for nb <= N items of r <= part_rows rows. */
    void *part_out, *part_lse;
    int64_t part_rows;
    void *scratch; /* the allocation behind the buffers above */
    sdpa_mpi_stats stats;
    /* What the block procedure's calls do: NULL for the forward's
     * sdpa_forward and merge; sdpa_mpi_backward's own, with its state. */
    int (*call)(mpi_job *j, const mpi_call *call);
    void *user;
};

/* Imports args (struct sizes, attn, stats), checks the features this
 * library refuses, sets up j (but not the row counts). */
int mpi_job_start(mpi_job *j, const char *fn, sdpa_ctx *ctx, MPI_Comm comm,
                  const sdpa_mpi_args *args);
/* mpi_job_start's parts: the job's communicator and context (NULL ctx:
 * SDPA_ERR_NULL_POINTER), then the rank's attention arguments u. */
int mpi_job_open(mpi_job *j, const char *fn, sdpa_ctx *ctx, MPI_Comm comm);
int mpi_job_import(mpi_job *j, const sdpa_forward_args *u);
/* mask / bias (name) against [N|1, Hq|1, rows|1, cols|1]: shapes and
 * non-negative strides (the rest is checked by each sdpa_forward call). */
int mpi_check_side(const mpi_job *j, const char *name, const sdpa_tensor *t,
                   int64_t cols);
/* Sets up the accumulator (the caller's out, or a private zeroed buffer
 * when private_acc), the running lse (-inf) and the part buffer for calls
 * of up to part_rows rows, and sets ctx's empty-row option to ZERO
 * (restored by mpi_job_end). Nothing of the caller's is written. */
int mpi_job_buffers(mpi_job *j, bool private_acc, int64_t part_rows);
/* Frees what mpi_job_buffers made, restores the option, copies the stats
 * to the caller's (if any), and clears the message after a success. */
int mpi_job_end(mpi_job *j, const sdpa_mpi_args *args, int status);

/* Agrees on a status over comm: the lowest failing rank's (with its
 * message, prefixed with its rank, on every other rank), or SDPA_OK. */
int mpi_agree(mpi_job *j, int status);

/* Computes, for global query rows [a, e) of segment qs (local tensors of
 * the caller), the keys [k0, k1) that are local key rows [krow, krow +
 * k1 - k0) of kt / vt (and mask/bias column `col0` for key k0), and merges
 * the result into the accumulator. Skips what no row can see; splits the
 * call where the causal diagonal crosses the block. A call whose rows have
 * seen no key yet writes into the accumulator directly; any other must
 * have at most j->part_rows rows. */
int mpi_block(mpi_job *j, const mpi_seg *qs, int64_t a, int64_t e,
              const sdpa_tensor *kt, const sdpa_tensor *vt, int64_t krow,
              int64_t k0, int64_t k1, int64_t col0);

/* The ring's shards (shards.c), of prefill and backward. */

/* The shards: segs[2r], segs[2r + 1] of rank r (length 0 if unused), from
 * the ranks' row counts in table; *total is T. */
int mpi_layout_segments(mpi_job *j, int layout, const int64_t *table,
                        mpi_seg *segs, int64_t *total);
/* Elements of a packed K/V shard of `rows` rows ([Nk, Hkv, rows, Dk] then
 * [Nk, Hkv, rows, Dv]), 0 on overflow. */
size_t mpi_shard_elems(const mpi_job *j, int64_t rows);
/* Packs k and v (any strides, j->rows rows) contiguous into buf. */
void mpi_pack_shard(const mpi_job *j, const sdpa_tensor *k,
                    const sdpa_tensor *v, char *buf);
/* The packed shard of `rows` rows at buf as K and V views. */
void mpi_shard_views(const mpi_job *j, char *buf, int64_t rows, sdpa_tensor *kt,
                     sdpa_tensor *vt);
/* The checks of both ring calls against the whole problem, after
 * mpi_exchange: the layout's segments, the largest shard (*most
 * elements, within an MPI count), kv_lens within [0, T], mask and bias
 * shapes. Sets j->tq_total and j->tk_total. */
int mpi_ring_checks(mpi_job *j, int layout, const int64_t *table, mpi_seg *segs,
                    size_t *most);

/* The start of both ring calls, after each rank's own checks gave
 * status: the layout and the K/V row count, the ranks' description table and
 * segments (freed by the caller), the agreement, mpi_exchange and
 * mpi_ring_checks. *exchanged: every rank took part in the exchange (then every
 * rank must reach the next mpi_agree). */
int mpi_ring_begin(mpi_job *j, int status, int layout, int64_t **table,
                   mpi_seg **segs, size_t *most, bool *exchanged);

/* Prefill, before the computation: out and lse must not overlap the
 * inputs the computation reads after it has started writing out (mask,
 * bias, kv_lens; q, k and v are checked by mpi_job_start). */
int mpi_check_outputs(mpi_job *j);

/* Prefill, before the computation, under the error policy: the first row
 * (batch item, head, local row) that kv_lens, causality, the mask and -inf
 * bias values leave without an allowed key among all T keys, as
 * SDPA_ERR_FULLY_MASKED_ROW (segments name global positions). */
int mpi_check_rows(mpi_job *j, const mpi_seg *segs, int nsegs);

/* After the computation, under the error policy: a row whose allowed
 * logits were all -inf (its lse stayed -inf) is SDPA_ERR_NONFINITE, as in
 * sdpa_forward. */
int mpi_check_lse(mpi_job *j, const mpi_seg *segs, int nsegs);

/* Completes the caller's out (zeros for rows without a key, under the
 * zero-row policy) and writes its lse. */
void mpi_write_result(mpi_job *j);

/* A view of batch items [b0, b0 + nb), rows [row, row + rows) and
 * columns [col, col + cols) of t (extent-1 dimensions stay broadcast). */
sdpa_tensor mpi_sub_view(const sdpa_tensor *t, size_t es, int64_t b0,
                         int64_t nb, int64_t row, int64_t rows, int64_t col,
                         int64_t cols);
/* The bytes [*begin, *end) a view spans (non-negative strides; extent-1
 * dimensions do not move); false when that overflows the address space. */
bool mpi_view_bytes(const sdpa_tensor *t, size_t es, uintptr_t *begin,
                    uintptr_t *end);

double mpi_now(void);

/* Checked size product: false on overflow. */
static inline bool mpi_mul_size(size_t a, size_t b, size_t *r)
{
    if (a != 0 && b > SIZE_MAX / a)
        return false;
    *r = a * b;
    return true;
}

/* What each rank tells the others (mpi_exchange): one row of int64. */
enum {
    DESC_DTYPE,
    DESC_CAUSAL,
    DESC_FLAGS,
    DESC_N,
    DESC_HQ,
    DESC_HKV,
    DESC_DK,
    DESC_DV,
    DESC_NK,
    DESC_KVLENS, /* 0 without kv_lens, else a hash of the values */
    DESC_MASK,
    DESC_BIAS,
    DESC_SCALE, /* bits of the double */
    DESC_SOFTCAP,
    DESC_LAYOUT,
    DESC_POLICY,
    DESC_ROWS,  /* query rows of the rank */
    DESC_KROWS, /* key rows of the rank */
    DESC_COUNT
};

/* Gathers every rank's description into table (ranks x DESC_COUNT) and
 * checks that the fields before DESC_ROWS agree (and DESC_ROWS too when
 * same_rows). Every rank decides the same from the same table. */
int mpi_exchange(mpi_job *j, int layout, bool same_rows, int64_t *table);

#endif
