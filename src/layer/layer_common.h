/*
 * What the multi-head attention layer's forward pass (layer.c,
 * sdpa_mha_forward) and its backward pass (layer_backward.c,
 * sdpa_mha_backward) share: the rows of a layer tensor as a matrix, the
 * layout of the scratch, and the checks whose rules and messages are the
 * same in both. `who` is the prefix of every message, the calling
 * function's name: "sdpa_mha_forward: " or "sdpa_mha_backward: ".
 */
#ifndef SDPA_LAYER_COMMON_H
#define SDPA_LAYER_COMMON_H

#include "core/checked.h"
#include "core/context.h"
#include "core/struct_import.h"
#include "layer/positions.h"

/* The frozen version-1 size of sdpa_mha_args (1.1's sizeof on LP64). */
#define SDPA_MHA_ARGS_SIZE_V1 ((size_t)368)

/* N · len rows of a matrix: row (b, t) starts at element b·s0 + t·s2. */
typedef struct layer_rows {
    char *data;
    int64_t n, len, s0, s2;
} layer_rows;

/* A byte range [begin, end) of an argument, for the overlap rules. */
typedef struct layer_range {
    const char *name;
    uintptr_t begin, end;
} layer_range;

/* How a gemm over the rows of a (ka elements each) and c (kc each) runs:
 * one gemm of *m = n · len rows (*items = 1) when both are evenly spaced
 * with leading dimensions BLAS takes, else one gemm of *m = len rows per
 * batch item (*items = n). Sets the leading dimensions *lda and *ldc
 * (validated rows: within BLAS's int either way). */
void sdpa_layer_gemm_layout(const layer_rows *a, int64_t ka,
                            const layer_rows *c, int64_t kc, int64_t *items,
                            int64_t *m, int64_t *lda, int64_t *ldc);

/* A contiguous [N, len, width] buffer of the scratch, at byte offset
 * `offset`, as layer rows. */
layer_rows sdpa_layer_scratch_rows(char *scratch, size_t offset, int64_t n,
                                   int64_t len, int64_t width);

/* Writes positions[b · len + t] = sign · (offset + t) for b < n, t < len
 * at byte offset `at` of the scratch and returns them (validated: no
 * overflow). */
int64_t *sdpa_layer_fill_positions(char *scratch, size_t at, int64_t n,
                                   int64_t len, int64_t offset, int64_t sign);

/* Reserves `count` elements of `size` bytes at *total (64-byte aligned)
 * and returns their offset; SIZE_MAX with *ok = false on overflow, or when
 * *ok is already false. */
size_t sdpa_layer_take(size_t *total, size_t count, size_t size, bool *ok);

/* Do the byte ranges share a byte? */
bool sdpa_layer_ranges_meet(const layer_range *a, const layer_range *b);

/* The first checks of a [N, 1, T, d_model] layer tensor `name`: positive
 * extents, and shape[1] == 1. SDPA_OK or the failure's status. */
int sdpa_layer_check_shape(sdpa_ctx *ctx, const char *who, const char *name,
                           const sdpa_tensor *t);

/* The stride checks of a layer tensor `name` of n items and d_model e
 * whose shape is checked: strides >= 0 with the innermost 1, rows no
 * closer than their length, an output that writes no element twice, and
 * an extent within the address space. Fills *rows and *r (its bytes);
 * leaves BLAS's int limit on the strides to the caller. */
int sdpa_layer_check_strides(sdpa_ctx *ctx, const char *who, const char *name,
                             const sdpa_tensor *t, int64_t n, int64_t e,
                             bool output, size_t esize, layer_rows *rows,
                             layer_range *r);

/* The head counts and widths of *a for x_q's n items of d_model e:
 * heads_q > 0, heads_kv, dim_k, dim_v >= 0 (0: the default), heads_q a
 * multiple of heads_kv, d_model a multiple of heads_q when dim_k is 0,
 * and every gemm dimension within BLAS's int. Sets the resolved *hq, *hkv,
 * *dk and *dv. `field` prefixes the count's name in its message ("" or
 * "forward->"). */
int sdpa_layer_check_heads(sdpa_ctx *ctx, const char *who, const char *field,
                           const sdpa_mha_args *a, int64_t n, int64_t e,
                           int64_t *hq, int64_t *hkv, int64_t *dk, int64_t *dv);

/* The rules of the positional settings of *a that need no shapes: nothing
 * set with SDPA_POS_NONE, and pos_base finite and >= 0. */
int sdpa_layer_check_pos_values(sdpa_ctx *ctx, const char *who,
                                const sdpa_mha_args *a);

/* pos_offset + the longer of tq and tk tokens must not overflow int64. */
int sdpa_layer_check_pos_offset(sdpa_ctx *ctx, const char *who, int64_t offset,
                                int64_t tq, int64_t tk);

/* Copies the attention options `attn` (NULL: all zero) into *f as this
 * library knows them, refuses the tensors the layer makes itself (q, k, v,
 * out) and logits, and an attn->dtype other than 0 and the layer's dtype;
 * then sets f->struct_size and f->dtype. `field` names attn in the
 * messages ("attn" or "forward->attn"); `dtype_hint` ends the dtype
 * message ("" for none). */
int sdpa_layer_import_attn(sdpa_ctx *ctx, const char *who, const char *field,
                           const sdpa_forward_args *attn, int dtype,
                           const char *dtype_hint, sdpa_forward_args *f);

/* The range of a weight or bias `name` of elems · times elements at p
 * (not NULL) into *r; SDPA_ERR_OVERFLOW when it passes the address
 * space. */
int sdpa_layer_param_range(sdpa_ctx *ctx, const char *who, const char *name,
                           const void *p, size_t elems, size_t times,
                           size_t esize, layer_range *r);

/* Prefixes the message of a failed attention call (status) with who and
 * returns status. */
int sdpa_layer_attention_failed(sdpa_ctx *ctx, const char *who, int status);

#endif
