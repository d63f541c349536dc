/*
 * ctest abi_frozen_values: the numbers of the public header that the ABI
 * freezes, checked at compile time. abidiff cannot see them (the enums are
 * anonymous and travel as int), so they are written down here once.
 *
 * A 1.x release may only append: new enumerators after the last ones, new
 * struct members after the last ones (so sizeof may grow, offsets may not
 * change). Editing a line below is an ABI break — see docs/ABI.md.
 */
#include <sdpa.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#define FROZEN(name, value)                                                    \
    _Static_assert((name) == (value), #name " is frozen")

/* Status codes. */
FROZEN(SDPA_OK, 0);
FROZEN(SDPA_ERR_NULL_POINTER, 1);
FROZEN(SDPA_ERR_STRUCT_SIZE, 2);
FROZEN(SDPA_ERR_STRUCT_TAIL, 3);
FROZEN(SDPA_ERR_BAD_DTYPE, 4);
FROZEN(SDPA_ERR_BAD_DIM, 5);
FROZEN(SDPA_ERR_SHAPE_MISMATCH, 6);
FROZEN(SDPA_ERR_BAD_STRIDE, 7);
FROZEN(SDPA_ERR_OVERLAP, 8);
FROZEN(SDPA_ERR_OVERFLOW, 9);
FROZEN(SDPA_ERR_BAD_SCALE, 10);
FROZEN(SDPA_ERR_BAD_SOFTCAP, 11);
FROZEN(SDPA_ERR_HEAD_GROUPING, 12);
FROZEN(SDPA_ERR_BAD_KV_LEN, 13);
FROZEN(SDPA_ERR_BAD_CAUSAL, 14);
FROZEN(SDPA_ERR_BAD_FLAGS, 15);
FROZEN(SDPA_ERR_UNKNOWN_OPTION, 16);
FROZEN(SDPA_ERR_BAD_OPTION_VALUE, 17);
FROZEN(SDPA_ERR_FULLY_MASKED_ROW, 18);
FROZEN(SDPA_ERR_NONFINITE, 19);
FROZEN(SDPA_ERR_OUT_OF_MEMORY, 20);
FROZEN(SDPA_ERR_UNSUPPORTED, 21);
/* 1.1 */
FROZEN(SDPA_ERR_BAD_WINDOW, 22);
FROZEN(SDPA_ERR_BAD_ALIBI, 23);
FROZEN(SDPA_ERR_BAD_SINK, 24);
FROZEN(SDPA_ERR_BAD_LOGITS_STAGE, 25);
FROZEN(SDPA_ERR_BAD_PAGE, 26);
FROZEN(SDPA_ERR_PARALLEL_FOR, 27);
FROZEN(SDPA_ERR_BAD_RAGGED, 28);
FROZEN(SDPA_ERR_OFFSETS_START, 29);
FROZEN(SDPA_ERR_OFFSETS_ORDER, 30);
FROZEN(SDPA_ERR_OFFSETS_END, 31);
FROZEN(SDPA_ERR_BUSY, 32);
FROZEN(SDPA_ERR_BAD_DROPOUT, 33);

/* Option ids and their values. */
FROZEN(SDPA_OPT_EMPTY_ROWS, 1);
FROZEN(SDPA_OPT_NUM_THREADS, 2);
FROZEN(SDPA_OPT_KERNEL, 3);
FROZEN(SDPA_OPT_PATH, 4);
FROZEN(SDPA_OPT_SCRATCH_LIMIT, 5);
FROZEN(SDPA_OPT_BLOCK_Q, 6);
FROZEN(SDPA_OPT_BLOCK_K, 7);
FROZEN(SDPA_EMPTY_ROWS_ERROR, 0);
FROZEN(SDPA_EMPTY_ROWS_ZERO, 1);
FROZEN(SDPA_KERNEL_AUTO, 0);
FROZEN(SDPA_KERNEL_PORTABLE, 1);
FROZEN(SDPA_KERNEL_AVX2, 2);
FROZEN(SDPA_KERNEL_AVX512, 3);
FROZEN(SDPA_PATH_AUTO, 0);
FROZEN(SDPA_PATH_MATERIALISED, 1);
FROZEN(SDPA_PATH_TILED, 2);
FROZEN(SDPA_PATH_DECODE, 3);
FROZEN(SDPA_PATH_DECODE_BLAS, 4);
FROZEN(SDPA_NUM_THREADS_ALL, -1);

/* Tensors and the forward call. */
FROZEN(SDPA_FLOAT32, 1);
FROZEN(SDPA_FLOAT64, 2);
FROZEN(SDPA_FLOAT16, 3);
FROZEN(SDPA_BFLOAT16, 4);
FROZEN(SDPA_CAUSAL_NONE, 0);
FROZEN(SDPA_CAUSAL_TOP_LEFT, 1);
FROZEN(SDPA_CAUSAL_BOTTOM_RIGHT, 2);
FROZEN(SDPA_FLAG_MASK_NONZERO_ALLOWS, 1u);
/* 1.1 */
FROZEN(SDPA_FLAG_WINDOW, 2u);
FROZEN(SDPA_LOGITS_SCALED, 1);
FROZEN(SDPA_LOGITS_CAPPED, 2);
FROZEN(SDPA_LOGITS_MASKED, 3);

/* Struct layouts of version 1 on LP64 targets (x86-64, aarch64, ...). */
#if UINTPTR_MAX == UINT64_MAX && SIZE_MAX == UINT64_MAX
#define OFFSET(type, member, value)                                            \
    _Static_assert(offsetof(type, member) == (value),                          \
                   "offset of " #type "." #member " is frozen")
#define MIN_SIZE(type, value)                                                  \
    _Static_assert(sizeof(type) >= (value), "sizeof " #type " only grows")

OFFSET(sdpa_tensor, data, 0);
OFFSET(sdpa_tensor, shape, 8);
OFFSET(sdpa_tensor, stride, 40);
_Static_assert(sizeof(sdpa_tensor) == 72, "sdpa_tensor is embedded: frozen");

OFFSET(sdpa_allocator, struct_size, 0);
OFFSET(sdpa_allocator, alloc, 8);
OFFSET(sdpa_allocator, free, 16);
OFFSET(sdpa_allocator, opaque, 24);
MIN_SIZE(sdpa_allocator, 32);

OFFSET(sdpa_forward_args, struct_size, 0);
OFFSET(sdpa_forward_args, dtype, 8);
OFFSET(sdpa_forward_args, causal, 12);
OFFSET(sdpa_forward_args, flags, 16);
OFFSET(sdpa_forward_args, scale, 24);
OFFSET(sdpa_forward_args, softcap, 32);
OFFSET(sdpa_forward_args, kv_lens, 40);
OFFSET(sdpa_forward_args, q, 48);
OFFSET(sdpa_forward_args, k, 120);
OFFSET(sdpa_forward_args, v, 192);
OFFSET(sdpa_forward_args, mask, 264);
OFFSET(sdpa_forward_args, bias, 336);
OFFSET(sdpa_forward_args, out, 408);
OFFSET(sdpa_forward_args, weights, 480);
OFFSET(sdpa_forward_args, lse, 552);
MIN_SIZE(sdpa_forward_args, 624);
/* appended in 1.1 */
OFFSET(sdpa_forward_args, window_left, 624);
OFFSET(sdpa_forward_args, window_right, 632);
OFFSET(sdpa_forward_args, alibi_slopes, 640);
OFFSET(sdpa_forward_args, sinks, 648);
OFFSET(sdpa_forward_args, logits, 656);
OFFSET(sdpa_forward_args, logits_stage, 728);
OFFSET(sdpa_forward_args, max_weight, 736);
OFFSET(sdpa_forward_args, entropy, 808);
OFFSET(sdpa_forward_args, kv_dtype, 880);
OFFSET(sdpa_forward_args, bias_dtype, 884);
OFFSET(sdpa_forward_args, block_table, 888);
OFFSET(sdpa_forward_args, pages_per_seq, 896);
OFFSET(sdpa_forward_args, block_table_stride, 904);
MIN_SIZE(sdpa_forward_args, 912);
/* appended in 1.2 */
OFFSET(sdpa_forward_args, seqs, 912);
OFFSET(sdpa_forward_args, q_offsets, 920);
OFFSET(sdpa_forward_args, kv_offsets, 928);
MIN_SIZE(sdpa_forward_args, 936);
/* appended in 1.2: dropout */
OFFSET(sdpa_forward_args, dropout_p, 936);
OFFSET(sdpa_forward_args, dropout_seed, 944);
OFFSET(sdpa_forward_args, dropout_offset, 952);
/* appended in 1.2: the FP8 K/V scales */
OFFSET(sdpa_forward_args, k_scale, 960);
OFFSET(sdpa_forward_args, v_scale, 968);
MIN_SIZE(sdpa_forward_args, 976);
/* new in 1.1 */
OFFSET(sdpa_backward_args, struct_size, 0);
MIN_SIZE(sdpa_backward_args, 952);
/* appended in 1.2 */
OFFSET(sdpa_backward_args, seqs, 952);
OFFSET(sdpa_backward_args, q_offsets, 960);
OFFSET(sdpa_backward_args, kv_offsets, 968);
MIN_SIZE(sdpa_backward_args, 976);
/* appended in 1.2: half-precision storage */
OFFSET(sdpa_backward_args, kv_dtype, 976);
OFFSET(sdpa_backward_args, bias_dtype, 980);
OFFSET(sdpa_backward_args, grad_dtype, 984);
MIN_SIZE(sdpa_backward_args, 992);
/* appended in 1.2: dropout */
OFFSET(sdpa_backward_args, dropout_p, 992);
OFFSET(sdpa_backward_args, dropout_seed, 1000);
OFFSET(sdpa_backward_args, dropout_offset, 1008);
MIN_SIZE(sdpa_backward_args, 1016);
OFFSET(sdpa_merge_args, struct_size, 0);
MIN_SIZE(sdpa_merge_args, 184);
OFFSET(sdpa_mha_args, struct_size, 0);
MIN_SIZE(sdpa_mha_args, 368);
OFFSET(sdpa_mha_backward_args, struct_size, 0);
MIN_SIZE(sdpa_mha_backward_args, 296);
/* appended in 1.2: half-precision storage */
OFFSET(sdpa_mha_backward_args, grad_dtype, 296);
MIN_SIZE(sdpa_mha_backward_args, 304);
#endif

int main(void)
{
    printf("frozen values of sdpa.h %s: OK\n", SDPA_VERSION_STRING);
    return 0;
}
