/*
 * The multi-head layer's calls for fuzz_mha_forward and fuzz_mha_backward:
 * one decoder of an input's first fields into an sdpa_mha_args (shapes,
 * heads, positional encodings, layouts, weights and biases, the attention
 * options and outputs, one argument error), and the long-double reference
 * of the layer (fuzz_layer_ref.c) with the bound the library must meet.
 */
#ifndef SDPA_FUZZ_LAYER_H
#define SDPA_FUZZ_LAYER_H

#include <stdint.h>

#include "fuzz_common.h"
#include "fuzz_ref.h"
#include "sdpa.h"

/* The fields of a layer call; each target's own fields follow L_COUNT. */
enum fz_layer_field {
    L_MODE,
    L_DTYPE,
    L_DTYPE_RAW,
    L_N,
    L_TQ,
    L_TK,
    L_E,
    L_HQ,
    L_HKV,
    L_DK,
    L_DV,
    L_POS,
    L_POS_BASE,
    L_POS_OFF,
    L_POS_ARR,
    L_SELF,
    L_LAYOUT,
    L_BIASES,
    L_ATTN,
    L_CAUSAL,
    L_WINDOW,
    L_MASK,
    L_MASK_B,
    L_BIAS,
    L_BIAS_B,
    L_KVLENS,
    L_EXTRAS, /* ALiBi, sinks, soft-cap, scale */
    L_ATTN_OUT,
    L_BAD_KIND,
    L_BAD_WHICH,
    L_BAD_VAL,
    L_STRUCT,
    L_ATTN_STRUCT,
    L_OPT0, /* four (id, value) slots: fz_apply_options */
    L_OOM = L_OPT0 + 8,
    L_SECOND,
    L_SPECIAL,
    L_AMP,
    L_SEED0, /* eight bytes */
    L_COUNT = L_SEED0 + 8
};

/* The problem of both layer targets' cross-attention seeds: float64, Tk
 * from 3, d_model from 7, Hq from 3 and Hkv from 2 (grouped-query). */
/* (clang-format would break the last pair up as a block.) */
/* clang-format off */
#define FZ_LAYER_CROSS_GQA_F64                                                 \
    {L_DTYPE, 9}, {L_SELF, 0}, {L_TK, 3}, {L_E, 7}, {L_HQ, 3}, {L_HKV, 2}
/* clang-format on */

/* The attention outputs a layer call may request through attn. */
enum { A_WEIGHTS, A_LSE, A_MAXW, A_ENT, A_COUNT };

typedef struct fz_layer_call {
    int backward; /* decoding for sdpa_mha_backward */
    int huge;
    fz_dtype dt;
    int64_t N, Tq, Tk, E, Hq, Hkv, dk, dv; /* resolved (valid calls) */
    int self, positions;
    double base;
    int64_t offset;
    fz_tens x_q, x_kv, y;
    fz_buf *w[4], *b[4]; /* w_q, w_k, w_v, w_o; b_q .. b_o (b: NULL) */
    int64_t *pos_q, *pos_kv;
    int has_attn;
    fz_tens mask, bias, out[A_COUNT];
    int64_t kv_lens[2];
    double *slopes, *sinks;
    sdpa_forward_args attn;
    union {
        sdpa_forward_args a;
        unsigned char bytes[sizeof(sdpa_forward_args) + 64];
    } attn_box;
    sdpa_mha_args a;
    union {
        sdpa_mha_args a;
        unsigned char bytes[sizeof(sdpa_mha_args) + 64];
    } box;
    fz_sset errs, amb;
    fz_sset errs_attn; /* those the attention call finds, after the layer
                          reserved its scratch */
    int null_ctx, null_args;
    int special; /* a NaN somewhere: OK or NONFINITE, no comparison */
} fz_layer_call;

/* Decodes the layer call of the current input (fields L_*) into the
 * input's one fz_layer_call, which it returns: registers its buffers,
 * draws the values (valid calls) and packs the args. */
fz_layer_call *fz_layer_decode(int backward);
/* sdpa_mha_forward and sdpa_mha_backward as fz_call_fn (fz_second_call). */
int fz_layer_call_forward(sdpa_ctx *ctx, const void *args);
int fz_layer_call_backward(sdpa_ctx *ctx, const void *args);
/* The call's positions of token t of item b (pos array, or offset + t). */
int64_t fz_layer_pos(const fz_layer_call *c, int kv, int64_t b, int64_t t);
void fz_layer_describe(const fz_layer_call *c);

/* After the reference r of a valid call: OK is expected, with the values
 * checked (returns 1) unless a NaN was injected or the logits may
 * overflow, when NONFINITE is expected too (returns 0). */
struct fz_layer_ref;
int fz_layer_expect_values(const fz_layer_call *c, const struct fz_layer_ref *r,
                           fz_sset *expect);
/* The allocation refused at field L_OOM's choice (returns 1; 0: none), and
 * OUT_OF_MEMORY expected where the call reaches it: the layer reserves
 * its scratch before the attention validates its options and rows. */
int fz_layer_oom(const fz_layer_call *c, int have_ref, fz_sset errs_all,
                 fz_sset *expect);
/* The end of an input: frees the reference r (NULL: none) and ends ctx
 * (fz_ctx_end). */
void fz_layer_end(sdpa_ctx *ctx, struct fz_layer_ref *r);

/* ------------------------------------------------------------------------ */
/* The reference (fuzz_layer_ref.c).                                         */
/* ------------------------------------------------------------------------ */
typedef struct fz_layer_ref {
    /* y [N, Tq, E] and its bound; the attention's reference on Q, K, V
     * rounded to double, with the tolerance of the attention outputs */
    long double *y, *ty;
    ref_result att;
    test_tol att_tol;
    double eps;
    /* the gradients (fz_layer_ref_backward) and their bounds: dx_q
     * [N, Tq, E], dx_kv [N, Tk, E], dw_*, db_* row-major as the weights */
    long double *g[10], *tg[10];
    /* internals (fuzz_layer_ref.c) */
    long double *xq, *exq, *xkv, *exkv;    /* X~ and its errors */
    long double *q, *eq, *k, *ek, *v, *ev; /* projections after RoPE */
    long double *o, *eo;                   /* the heads' outputs [N,Tq,Hq dv] */
    double *qd, *kd, *vd, *biasd;          /* double copies for reference.c */
    double e_s;                            /* upstream logit error */
} fz_layer_ref;

/* Which gradient g[i] is: dx_q, dx_kv, dw_q, dw_k, dw_v, dw_o, db_q, db_k,
 * db_v, db_o. */
enum {
    G_DXQ,
    G_DXKV,
    G_DWQ,
    G_DWK,
    G_DWV,
    G_DWO,
    G_DBQ,
    G_DBK,
    G_DBV,
    G_DBO,
    G_COUNT
};

int fz_layer_ref_forward(const fz_layer_call *c, fz_layer_ref *r);
/* dy [N, 1, Tq, E] of the call's dtype. */
int fz_layer_ref_backward(const fz_layer_call *c, const sdpa_tensor *dy,
                          fz_layer_ref *r);
void fz_layer_ref_free(fz_layer_ref *r);
/* Elements of gradient i. */
size_t fz_layer_grad_count(const fz_layer_call *c, int i);

#endif
