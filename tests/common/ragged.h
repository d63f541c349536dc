/*
 * Ragged calls of sdpa_forward (seqs, q_offsets, kv_offsets) as the tests
 * judge them, shared by tests/test_ragged.c and tests/fuzz/fuzz_ragged.c
 * (test code only: like reference.c it includes the public header alone
 * and shares nothing with src/forward/ragged.c):
 *  - sequence b's own rectangular call, read from include/sdpa.h's
 *    description of the ragged fields: its query rows of q, out, lse,
 *    max_weight and entropy, its keys (packed rows, batched item, the
 *    shared item, or its row of the block table), its kv_lens entry;
 *  - the long-double reference of a rectangular call whatever its storage
 *    types and paging: the inputs widened exactly into contiguous float64
 *    (reference.c reads float32 and float64 only);
 *  - its outputs against that reference within tp_forward_tol, plus one
 *    rounding of a half out.
 */
#ifndef SDPA_TEST_RAGGED_H
#define SDPA_TEST_RAGGED_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "problem.h"
#include "reference.h"
#include "sdpa.h"

/* Where a ragged call's sequences find their keys (include/sdpa.h). */
enum { RG_PACKED, RG_BATCHED, RG_SHARED, RG_PAGED };
extern const char *const rg_key_names[4];

/* Bytes of an element of a storage type (SDPA_FLOAT32, _FLOAT64,
 * _FLOAT16, _BFLOAT16); 4 for anything else. */
size_t rg_type_size(int type);
/* Is it a quantized K/V type (SDPA_FP8_E4M3 .. SDPA_Q4_0)? */
bool rg_is_quantized(int type);
/* The bytes from an array of any storage type, the quantized K/V ones
 * included (include/sdpa.h: their offsets count values), to its element
 * `off`: a quantized type's to the unit (FP8 byte, block) that holds it. */
size_t rg_offset_bytes(int type, int64_t off);
/* The bytes of `count` elements: whole units for a quantized type. */
size_t rg_bytes(int type, int64_t count);
/* The type a call computes in, which lse, max_weight and entropy hold:
 * float64 for a float64 call, else float32. */
int rg_compute_type(int dtype);
/* Element `off` of data in a storage type, as a double (exact; a
 * quantized type's code decoded by tests/common/quant_codec.h, without
 * k_scale / v_scale). */
double rg_value(const void *data, int type, int64_t off);
/* v, which must be a value of the type, stored at element `off` (float
 * types only: a quantized type's values are codes). */
void rg_store(void *data, int type, int64_t off, double v);
/* A quiet NaN of the type at element `off`; of a block type, its block's
 * d NaN, which makes all 32 values of the block NaN. */
void rg_poison(void *data, int type, int64_t off);

/* The key form of a ragged call: kv_offsets packed, block_table paged,
 * else k.shape[0] 1 with several sequences shared, else batched. */
int rg_key_form(const sdpa_forward_args *a);
/* Sequence b's query rows Tq_b and keys Tk_b. */
int64_t rg_seq_rows(const sdpa_forward_args *a, int64_t b);
int64_t rg_seq_keys(const sdpa_forward_args *a, int64_t b);

/* Sequence b's own call, N = 1 and the ragged fields 0: its rows of q,
 * out, lse, max_weight and entropy (which stay absent when absent), its
 * keys, &kv_lens[b], row b of the block table. A packed sequence without
 * keys (Tk_b = 0) gets the one-row views no_keys_k and no_keys_v and
 * kv_lens 0, as a rectangular call must have a key: nothing of them is
 * read. */
void rg_seq_args(const sdpa_forward_args *a, int64_t b,
                 const sdpa_tensor *no_keys_k, const sdpa_tensor *no_keys_v,
                 sdpa_forward_args *sub);

/* The reference of a rectangular call the library accepts (any storage
 * types, paged or not): q, k and v widened into contiguous float64 (a
 * quantized k or v decoded, times its head's k_scale / v_scale), the
 * pages gathered (only the keys below kv_lens are read, the rest are
 * NaN), then ref_forward. Returns 0, or -1 when out of memory. */
int rg_reference(const sdpa_forward_args *a, ref_result *r);

/* The outputs of a rectangular call that returned SDPA_OK (out in its
 * storage type; lse, max_weight and entropy when present) against its
 * reference: tp_forward_tol of the compute type, out also one rounding
 * of a half type (2^-11 |out| + 2^-24 for float16, 2^-8 |out| for
 * bfloat16) and, with v_scale, 2 FLT_EPSILON |out| for its product in
 * float32; a row without an allowed key (and no sink) exactly out 0,
 * lse -inf, max_weight 0, entropy 0. Returns 0, else 1 with what
 * differed in msg (prefixed by `where`). */
int rg_check(const sdpa_forward_args *a, const ref_result *r, const char *where,
             char *msg, size_t size);

#endif
