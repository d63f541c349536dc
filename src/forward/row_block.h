/* A work item's slice of rows and keys, and which of its keys are live
 * (live_keys.c). */
#ifndef SDPA_FORWARD_ROW_BLOCK_H
#define SDPA_FORWARD_ROW_BLOCK_H

#include "core/problem.h"

#include <stdbool.h>
#include <stdint.h>

/* A set of query rows that read the same KV head, and a range of keys:
 * a work item's slice. Stacked row r is query row row_first + r / heads of
 * query head head_first + r % heads: rows first, so that the rows' causal
 * key limits never decrease down the stack. */
typedef struct sdpa_row_block {
    int64_t batch, head_kv;
    int64_t head_first, heads; /* query heads head_first .. + heads - 1 */
    int64_t row_first, rows;   /* query rows row_first .. + rows - 1 */
    int64_t key_begin, key_end;
    /* K rows [next_key, next_end) of (next_batch, next_head_kv), valid
     * keys its worker likely reads next (the streaming decode prefetches
     * them in its last block; none when next_end <= next_key) */
    int64_t next_batch, next_head_kv, next_key, next_end;
} sdpa_row_block;

/* live[j - kb] = 1 for each key j of [kb, kb + bk) that some row of the
 * block may see (below its key limit, not forbidden by the mask, no −inf
 * bias), else 0; returns how many are live (live_keys.c). */
int64_t sdpa_live_keys(const sdpa_problem *p, const sdpa_row_block *blk,
                       int64_t kb, int64_t bk, uint8_t *live);
/* The runs of live keys of a block of n keys (live_count of them, as
 * sdpa_live_keys counts; when live_count >= n, live is not read and the
 * block is one run):
 *   for (j0 = 0, j1 = 0; sdpa_live_run(live, count, n, &j0, &j1); j0 = j1)
 * visits each run [j0, j1) in order. */
bool sdpa_live_run(const uint8_t *live, int64_t live_count, int64_t n,
                   int64_t *j0, int64_t *j1);
/* The step beneath it: the first run of live keys at or after `from`;
 * returns its start (bk when there is none), *run_end past its end. */
int64_t sdpa_next_run(const uint8_t *live, int64_t from, int64_t bk,
                      int64_t *run_end);

#endif /* SDPA_FORWARD_ROW_BLOCK_H */
