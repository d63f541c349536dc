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

/* What both passes validate and resolve of sdpa_mha_args (the forward's
 * arguments): the dtype, the positional encoding, the sizes, the inputs
 * and the parameters, and the attention's options. storage is the
 * caller's dtype, the type of x_q, x_kv, y, the weights and the biases
 * (ssize bytes an element); dtype the type the layer computes in (esize
 * bytes), float32 for a half storage type (layer_half.h), else storage. */
typedef struct layer_problem {
    int storage;
    size_t ssize;
    int dtype;
    size_t esize;
    int positions;
    double base;
    int64_t offset;
    const int64_t *pos_q, *pos_kv;
    int64_t n, tq, tk, e, hq, hkv, dk, dv;
    layer_rows x_q, x_kv; /* x_kv is x_q in self-attention */
    bool self;
    const void *w_q, *w_k, *w_v, *w_o, *b_q, *b_k, *b_v, *b_o;
    sdpa_forward_args attn; /* the caller's options; q, k, v, out unset */
} layer_problem;

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

/* Checks a [N, 1, len, d_model] layer tensor `name` (x_q, x_kv, y, dy,
 * dx_q, dx_kv): positive extents, shape[1] 1, N and d_model as given
 * (len too unless len_expected is negative), strides >= 0 with the
 * innermost 1, rows no closer than their length, an output that writes
 * no element twice, an extent within the address space, and the row
 * stride within BLAS's int. `backward`: sdpa_mha_backward's wording, and
 * its rule that the item stride, too, is within BLAS's int. Fills *rows
 * and *r (its bytes). */
int sdpa_layer_check_rows(sdpa_ctx *ctx, const char *who, bool backward,
                          const char *name, const sdpa_tensor *t, int64_t n,
                          int64_t len_expected, int64_t e, bool output,
                          size_t esize, layer_rows *rows, layer_range *r);

/* A pointer a call requires, and its name in the message. */
typedef struct layer_required {
    const char *name;
    const void *ptr;
} layer_required;

/* The first of the count pointers that is NULL fails: "who name is
 * NULL". */
int sdpa_layer_check_required(sdpa_ctx *ctx, const char *who,
                              const layer_required *required, size_t count);

/* dtype (`field` prefixes its name: "" or "forward->"): one of the four
 * SDPA_FLOAT* types, into p->storage, and the compute type into
 * p->dtype. */
int sdpa_layer_check_dtype(sdpa_ctx *ctx, const char *who, const char *field,
                           const sdpa_mha_args *a, layer_problem *p);

/* The inputs of *a whose pointers are checked: x_q (which fixes N, Tq and
 * d_model), the heads, x_kv (absent: self-attention) and N · T within
 * BLAS's int, into *p; x_q's and x_kv's bytes into r[*count]. */
int sdpa_layer_check_inputs(sdpa_ctx *ctx, const char *who, bool backward,
                            const char *field, const sdpa_mha_args *a,
                            layer_problem *p, layer_range *r, int *count);

/* Everything about the positional encoding, into *p (whose sizes are
 * resolved); `backward` adds the rule that no position is INT64_MIN. */
int sdpa_layer_check_positions(sdpa_ctx *ctx, const char *who, bool backward,
                               const char *field, const sdpa_mha_args *a,
                               layer_problem *p);

/* The element counts of the weights and biases (w_q, w_k, w_v, w_o, b_q,
 * b_k, b_v, b_o in that order) for the widths of *p: elems[i] · times[i]
 * (validated by sdpa_layer_param_ranges not to overflow). */
void sdpa_layer_param_shapes(const layer_problem *p, size_t elems[8],
                             size_t times[8]);

/* The bytes of the weights and biases (in the order above: ptrs and names)
 * that are present, in elements of esize bytes, for the widths of *p, into
 * r[*count]; SDPA_ERR_OVERFLOW when one passes the address space. */
int sdpa_layer_param_ranges(sdpa_ctx *ctx, const char *who,
                            const layer_problem *p, const void *const ptrs[8],
                            const char *const names[8], size_t esize,
                            layer_range *r, int *count);

/* Scratch offsets of the positional encoding's regions (SIZE_MAX: not
 * used): RoPE's positions written out (pq, pk), their negations for the
 * backward's inverse rotation (nq, nk: `negated`), the sinusoidal table
 * and the inputs with it added (table, xq, xkv). */
typedef struct layer_pos_offsets {
    size_t pq, pk, nq, nk, table, xq, xkv;
} layer_pos_offsets;

/* Places those regions at *total (sdpa_layer_take). */
void sdpa_layer_place_positions(const layer_problem *p, bool negated,
                                layer_pos_offsets *o, size_t *total, bool *ok);

/* RoPE's positions of the queries and the keys: pos_q / pos_kv, or
 * pos_offset + t written out into the regions o->pq, o->pk (self-attention:
 * the queries'). */
void sdpa_layer_rope_positions(const layer_problem *p,
                               const layer_pos_offsets *o, char *scratch,
                               const int64_t **pq, const int64_t **pk);

/* A region of rows · width elements of esize bytes at *off. */
typedef struct layer_region {
    size_t *off, rows, width;
} layer_region;

/* Places regions in order at *total (sdpa_layer_take). */
void sdpa_layer_place(const layer_region *regions, size_t count, size_t esize,
                      size_t *total, bool *ok);

/* The head counts and widths of *a for x_q's n items of d_model e:
 * heads_q > 0, heads_kv, dim_k, dim_v >= 0 (0: the default), heads_q a
 * multiple of heads_kv, d_model a multiple of heads_q when dim_k is 0,
 * and every gemm dimension within BLAS's int. Sets the resolved *hq, *hkv,
 * *dk and *dv. `field` prefixes the count's name in its message ("" or
 * "forward->"). */
int sdpa_layer_check_heads(sdpa_ctx *ctx, const char *who, const char *field,
                           const sdpa_mha_args *a, int64_t n, int64_t e,
                           int64_t *hq, int64_t *hkv, int64_t *dk, int64_t *dv);

/* Copies the attention options `attn` (NULL: all zero) into *f as this
 * library knows them, refuses the tensors the layer makes itself (q, k, v,
 * out) and logits, an attn->dtype or kv_dtype other than 0 and the layer's
 * storage type, and a bias_dtype other than 0, that type and (a half
 * layer) SDPA_FLOAT32; then sets f->struct_size, f->dtype (p->dtype, the
 * compute type of the layer's own q, k, v and out), f->kv_dtype (0) and,
 * in a half layer, f->bias_dtype (the bias's storage type). `field` names
 * attn in the
 * messages ("attn" or "forward->attn"); `dtype_hint` ends the dtype
 * message ("" for none). */
int sdpa_layer_import_attn(sdpa_ctx *ctx, const char *who, const char *field,
                           const sdpa_forward_args *attn,
                           const layer_problem *p, const char *dtype_hint,
                           sdpa_forward_args *f);

/* Prefixes the message of a failed attention call (status) with who and
 * returns status. */
int sdpa_layer_attention_failed(sdpa_ctx *ctx, const char *who, int status);

#endif
