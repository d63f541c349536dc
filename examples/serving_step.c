/*
 * Two serving steps of an inference engine with continuous batching and
 * chunked prefill (docs/RAGGED.md): every sequence the engine holds, at
 * whatever stage, in one ragged sdpa_forward per step.
 *
 * The KV cache is a pool of POOL pages of PAGE tokens in float16, laid out
 * as vLLM's and FlashAttention's paged caches are: page p holds
 * [PAGE][HKV][D] (slot-major). Row b of the block table lists the pages of
 * sequence b, in a scattered order as an allocator hands them out. The
 * heads are a small Llama's: HQ query heads sharing HKV key/value heads
 * (grouped-query attention), D = 64.
 *
 * Each step
 *   1. writes the step's new K/V rows into the pages (slot position % PAGE
 *      of page table[b][position / PAGE]),
 *   2. computes attention for all of them in one call (attend_step, the
 *      part docs/RAGGED.md shows): sequences 0, 1 and 2 decode one token
 *      each against their caches, sequence 3 prefills the next CHUNK rows
 *      of its prompt against everything cached so far; the query rows are
 *      packed, q_offsets says whose they are, kv_lens how many tokens each
 *      sequence has, and the bottom-right causal anchor puts row i of
 *      sequence b at position kv_lens[b] - Tq_b + i,
 *   3. checks it: the same attention as four rectangular calls, one per
 *      sequence on its own views, must give the same bits.
 * The second step has the same query rows per sequence and the same
 * pages_per_seq, so the context's scratch fits it: a counting allocator
 * checks that its ragged call allocates nothing.
 */
#include <sdpa.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    HQ = 8,             /* query heads */
    HKV = 2,            /* key/value heads: 4 query heads share each */
    D = 64,             /* head size */
    PAGE = 16,          /* tokens per page */
    PAGES_PER_SEQ = 8,  /* block table columns: 128 tokens at most */
    POOL = 32,          /* pages in the pool */
    SEQS = 4,           /* sequences in the batch */
    CHUNK = 32,         /* prefill chunk of sequence 3 */
    TOTAL_Q = 3 + CHUNK /* query rows of a step */
};

/* ragged-step */
/* The cache: page p, slot s, head h at [((p * PAGE + s) * HKV + h) * D]. */
static uint16_t k_pool[POOL * PAGE * HKV * D], v_pool[POOL * PAGE * HKV * D];

/* The pool as a [POOL, HKV, PAGE, D] view: logical order, slot-major
 * strides. */
static sdpa_tensor paged(uint16_t *pool)
{
    sdpa_tensor t = {
        pool, {POOL, HKV, PAGE, D}, {PAGE * HKV * D, D, HKV * D, 1}};
    return t;
}

/* One serving step's attention: every sequence's query rows, packed in q
 * ([TOTAL_Q, HQ, D] in memory), against its own pages of the cache, in
 * one call. Rows q_offsets[b] .. q_offsets[b + 1] - 1 are sequence b's,
 * kv_lens[b] is its token count (this step's included) and row b of table
 * its pages. */
static int attend_step(sdpa_ctx *ctx, const int64_t q_offsets[SEQS + 1],
                       const int64_t kv_lens[SEQS],
                       const int32_t table[SEQS * PAGES_PER_SEQ], float *q,
                       float *out, float *lse)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;    /* q, out and lse */
    a.kv_dtype = SDPA_FLOAT16; /* the cache */
    a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    a.seqs = SEQS;
    a.q_offsets = q_offsets; /* FlashAttention's cu_seqlens_q */
    a.kv_lens = kv_lens;     /* its seqused_k */
    a.block_table = table;   /* its block_table */
    a.pages_per_seq = PAGES_PER_SEQ;
    a.q = sdpa_tensor_bthd(q, 1, HQ, TOTAL_Q, D);
    a.k = paged(k_pool);
    a.v = paged(v_pool);
    a.out = sdpa_tensor_bthd(out, 1, HQ, TOTAL_Q, D);
    a.lse = sdpa_tensor_bhtd(lse, 1, HQ, TOTAL_Q, 1);
    return sdpa_forward(ctx, &a);
}
/* /ragged-step */

/* The same attention as one rectangular call per sequence: its own rows
 * of q, out and lse (views, no copies), its row of the table, its length.
 * The promise is that each gives the bits of the ragged call. */
static int attend_each(sdpa_ctx *ctx, const int64_t q_offsets[SEQS + 1],
                       const int64_t kv_lens[SEQS],
                       const int32_t table[SEQS * PAGES_PER_SEQ], float *q,
                       float *out, float *lse)
{
    for (int b = 0; b < SEQS; b++) {
        const int64_t first = q_offsets[b], rows = q_offsets[b + 1] - first;
        sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
        a.dtype = SDPA_FLOAT32;
        a.kv_dtype = SDPA_FLOAT16;
        a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
        a.kv_lens = &kv_lens[b];
        a.block_table = &table[b * PAGES_PER_SEQ];
        a.pages_per_seq = PAGES_PER_SEQ;
        /* rows of the packed layouts: the strides of the whole */
        a.q = sdpa_tensor_bthd(q + first * HQ * D, 1, HQ, rows, D);
        a.k = paged(k_pool);
        a.v = paged(v_pool);
        a.out = sdpa_tensor_bthd(out + first * HQ * D, 1, HQ, rows, D);
        a.lse =
            (sdpa_tensor){lse + first, {1, HQ, rows, 1}, {0, TOTAL_Q, 1, 1}};
        int status = sdpa_forward(ctx, &a);
        if (status != SDPA_OK)
            return status;
    }
    return SDPA_OK;
}

/* Element i of token `position` of sequence seq's q, k or v (which 0, 1,
 * 2): a multiple of 1/128 in [-1, 1), exact in float16. */
static float token(int seq, int64_t position, int i, unsigned which)
{
    unsigned h = (unsigned)seq * 2654435761u ^ (unsigned)position * 40503u ^
                 (unsigned)i * 2246822519u ^ which * 3266489917u;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    return (float)((int)(h % 256u) - 128) / 128.0f;
}

/* Token `position` of sequence b: its K and V rows into the cache, made
 * in float32 and stored as float16 (sdpa_convert rounds as the library
 * does; these values are exact in float16 anyway). */
static int cache_write(const int32_t *table, int b, int64_t position)
{
    const int32_t page = table[b * PAGES_PER_SEQ + position / PAGE];
    const size_t at = (size_t)((page * PAGE + position % PAGE) * HKV * D);
    float k[HKV * D], v[HKV * D];
    for (int i = 0; i < HKV * D; i++) {
        k[i] = token(b, position, i, 1);
        v[i] = token(b, position, i, 2);
    }
    int status =
        sdpa_convert(SDPA_FLOAT16, &k_pool[at], SDPA_FLOAT32, k, HKV * D);
    return status != SDPA_OK ? status
                             : sdpa_convert(SDPA_FLOAT16, &v_pool[at],
                                            SDPA_FLOAT32, v, HKV * D);
}

/* Counting allocator: the context's every allocation goes through it. */
static long allocations;
static void *count_alloc(void *opaque, size_t size, size_t alignment)
{
    (void)opaque;
    allocations++;
    return aligned_alloc(alignment,
                         (size + alignment - 1) / alignment * alignment);
}
static void count_free(void *opaque, void *ptr, size_t size)
{
    (void)opaque;
    (void)size;
    free(ptr);
}

int main(void)
{
    /* Before the first step: the decoding sequences hold 40, 77 and 100
     * tokens; sequence 3 has 96 prompt tokens and computed its first
     * chunk in an earlier step. */
    int64_t kv_lens[SEQS] = {40, 77, 100, CHUNK};
    const int64_t q_offsets[SEQS + 1] = {0, 1, 2, 3, 3 + CHUNK};
    int32_t table[SEQS * PAGES_PER_SEQ];
    for (int i = 0; i < SEQS * PAGES_PER_SEQ; i++)
        table[i] = -1; /* unused slots: never read */
    int next = 0;      /* pages from the pool, scattered: 7 * n mod POOL */
    const int64_t final_len[SEQS] = {42, 79, 102, 3 * CHUNK};
    for (int b = 0; b < SEQS; b++)
        for (int64_t c = 0; c * PAGE < final_len[b]; c++)
            table[b * PAGES_PER_SEQ + c] = (int32_t)(7 * next++ % POOL);
    for (int b = 0; b < SEQS; b++)
        for (int64_t t = 0; t < kv_lens[b]; t++)
            if (cache_write(table, b, t) != SDPA_OK)
                return 1;

    sdpa_allocator counting = {sizeof counting, count_alloc, count_free, NULL};
    sdpa_ctx *ctx;
    if (sdpa_ctx_create_with_allocator(&ctx, &counting) != SDPA_OK ||
        sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, 2) != SDPA_OK)
        return 1;
    static float q[TOTAL_Q * HQ * D], out[TOTAL_Q * HQ * D];
    static float out_each[TOTAL_Q * HQ * D];
    static float lse[HQ * TOTAL_Q], lse_each[HQ * TOTAL_Q];
    long step_allocations = 0;
    for (int step = 0; step < 2; step++) {
        /* 1. the step's tokens: decodes append one, the prefill a chunk */
        for (int b = 0; b < SEQS; b++) {
            const int64_t rows = q_offsets[b + 1] - q_offsets[b];
            kv_lens[b] += b < 3 ? 1 : CHUNK;
            for (int64_t r = 0; r < rows; r++) {
                const int64_t position = kv_lens[b] - rows + r;
                if (cache_write(table, b, position) != SDPA_OK)
                    return 1;
                for (int i = 0; i < HQ * D; i++)
                    q[(q_offsets[b] + r) * HQ * D + i] =
                        token(b, position, i, 0);
            }
        }
        /* 2. one call for the whole batch */
        const long before = allocations;
        int status = attend_step(ctx, q_offsets, kv_lens, table, q, out, lse);
        step_allocations = allocations - before;
        /* 3. one call per sequence, the same bits */
        if (status == SDPA_OK)
            status = attend_each(ctx, q_offsets, kv_lens, table, q, out_each,
                                 lse_each);
        if (status != SDPA_OK) {
            fprintf(stderr, "step %d: %s\n", step + 1,
                    sdpa_ctx_last_error(ctx));
            sdpa_ctx_destroy(ctx);
            return 1;
        }
        const int same = memcmp(out, out_each, sizeof out) == 0 &&
                         memcmp(lse, lse_each, sizeof lse) == 0;
        printf("step %d: %lld query rows of %d sequences (kv_lens %lld %lld "
               "%lld %lld), %ld allocations: %s per-sequence calls\n",
               step + 1, (long long)TOTAL_Q, SEQS, (long long)kv_lens[0],
               (long long)kv_lens[1], (long long)kv_lens[2],
               (long long)kv_lens[3], step_allocations,
               same ? "bitwise equal to" : "DIFFERENT from");
        if (!same) {
            sdpa_ctx_destroy(ctx);
            return 1;
        }
    }
    sdpa_ctx_destroy(ctx);
    printf("prefill row 31, head 0: %.5f %.5f %.5f ...\n",
           out[(TOTAL_Q - 1) * HQ * D], out[(TOTAL_Q - 1) * HQ * D + 1],
           out[(TOTAL_Q - 1) * HQ * D + 2]);
    if (step_allocations != 0)
        return 1;
    printf("2 serving steps: the ragged call equals the per-sequence calls "
           "bit for bit; the second allocated nothing\n");
    return 0;
}
