/*
 * Philox4x32-10, the counter-based generator of Random123 (Salmon et al.,
 * "Parallel random numbers: as easy as 1, 2, 3", SC11), and the dropout
 * mask drawn from it (include/sdpa.h, "Dropout"). A word of the mask is a
 * pure function of the key and the counter: every path, kernel set and
 * thread count draws the same one, and the backward regenerates it. The
 * vector kernels compute the same rounds on many counters at once
 * (rows_avx2.c, rows_avx512.c); this scalar form is their reference.
 */
#ifndef SDPA_KERNELS_PHILOX_H
#define SDPA_KERNELS_PHILOX_H

#include <stdint.h>

#define SDPA_PHILOX_M0 0xD2511F53u
#define SDPA_PHILOX_M1 0xCD9E8D57u
#define SDPA_PHILOX_W0 0x9E3779B9u
#define SDPA_PHILOX_W1 0xBB67AE85u
#define SDPA_PHILOX_ROUNDS 10

/* The mask of one query row: Philox's key (the seed), counter words 1
 * (the row) and 2, 3 (the stream: dropout_offset + b·Hq + h), and the
 * threshold: the key j is kept iff word j mod 4 of the block j / 4 is at
 * least `threshold`. */
typedef struct sdpa_dropout_row {
    uint32_t key[2];
    uint32_t row;
    uint32_t stream[2];
    uint32_t threshold;
} sdpa_dropout_row;

/* out = Philox4x32-10(ctr, key). */
static inline void sdpa_philox4x32_10(const uint32_t ctr[4],
                                      const uint32_t key[2], uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int r = 0; r < SDPA_PHILOX_ROUNDS; r++) {
        uint64_t p0 = (uint64_t)SDPA_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)SDPA_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += SDPA_PHILOX_W0;
        k1 += SDPA_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

/* The 4 words of block `block` (keys 4·block .. 4·block + 3) of a row. */
static inline void sdpa_dropout_block(const sdpa_dropout_row *d, uint32_t block,
                                      uint32_t words[4])
{
    const uint32_t ctr[4] = {block, d->row, d->stream[0], d->stream[1]};
    sdpa_philox4x32_10(ctr, d->key, words);
}

#endif /* SDPA_KERNELS_PHILOX_H */
