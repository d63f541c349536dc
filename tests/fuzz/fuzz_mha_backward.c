/*
 * libFuzzer target for sdpa_mha_backward.
 *
 * The input's first fields are the forward call (fuzz_layer.h, the same
 * decoder as fuzz_mha_forward: shapes, heads, positions, layouts, biases,
 * attention options, one argument error, struct sizes, options, a failing
 * allocator, NaN inputs); the fields after them choose dy's layout, which
 * of the ten gradient outputs are requested (dx_q, dx_kv, dw_q .. dw_o,
 * db_q .. db_o; none is fine: nothing computed), their layouts, and one
 * error of the backward's own: dy or forward NULL, dy or a dx that
 * disagrees in shape or stride, dx_kv in self-attention, a gradient output
 * over an input, a weight or another output, a position INT64_MIN with
 * RoPE (its rotation cannot be inverted), struct_size of the backward's
 * args; and grad_dtype (1.2): 0, SDPA_FLOAT32 (on a float32 layer the
 * same call, values compared) or a refused one (float32 on a float64
 * layer, float64, float16, 99), read only by a caller of the 1.2 size.
 *
 * Checks: documented statuses, the ones the arguments call for (the
 * recomputed attention's included); every output untouched on every error
 * (the header: all found before any write, NONFINITE included), the
 * forward's attention outputs never written, a message; inputs never
 * written; no allocation on a refused call or a repeated one; on success
 * every requested gradient within the bound of the long-double chain rule
 * (fuzz_layer_ref.c: the attention's gradients of tests/common/oracle.c, RoPE's
 * transpose, the projections' products), padding untouched; bitwise equal
 * gradients with another thread count.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_layer.h"

enum field {
    F_DY_LAYOUT = L_COUNT, /* and dx_q's, dx_kv's */
    F_GRADS,  /* bits clear: dx_q, dx_kv, dw_q, dw_k, dw_v, dw_o, db_q, db_k */
    F_GRADS2, /* db_v, db_o */
    F_BBAD_KIND,
    F_BBAD_VAL,
    F_BSTRUCT,
    F_BGRAD, /* grad_dtype */
    F_COUNT
};

enum { MHA_BACKWARD_ARGS_V1 = 296 };

static void run(void)
{
    fz_layer_call *c = fz_layer_decode(1);
    const size_t es = fz_esize(c->dt.compute);
    fz_sset errs = c->errs, amb = c->amb;
    sdpa_mha_backward_args b = SDPA_MHA_BACKWARD_ARGS_INIT;
    b.forward = &c->box.a;

    /* dy, dx_q, dx_kv: [N, 1, T, d_model], contiguous or padded rows */
    unsigned lay = fz(F_DY_LAYOUT);
    fz_tens dy = {0}, dxq = {0}, dxkv = {0};
    fz_tens *rows[3] = {&dy, &dxq, &dxkv};
    const int64_t lens[3] = {c->Tq, c->Tq, c->Tk};
    const char *names[3] = {"dy", "dx_q", "dx_kv"};
    /* a set bit leaves a gradient out: short inputs ask for all ten */
    unsigned grads = ~(fz(F_GRADS) | fz(F_GRADS2) << 8) & 0x3FFu;
    int want[3] = {1, (int)(grads & 1), (int)(grads >> 1 & 1) && !c->self};
    for (int i = 0; i < 3; i++) {
        rows[i]->present = want[i];
        rows[i]->es = es;
        fz_set_layout(&rows[i]->t, c->N, 1, lens[i], c->E, 0,
                      (int64_t)(lay >> (2 * i) & 3));
    }
    /* the backward's own errors */
    unsigned bk = fz(F_BBAD_KIND) % 16, bv = fz(F_BBAD_VAL);
    int null_forward = 0, null_dy = 0, overlap = -1;
    switch (bk) {
    case 8:
        if (bv & 1)
            null_forward = 1;
        else
            null_dy = 1;
        errs |= FZ_BIT(SDPA_ERR_NULL_POINTER);
        break;
    case 9: { /* dy, dx_q or dx_kv: a shape or a stride */
        fz_tens *x = rows[bv % 3];
        if (!x->present)
            x = &dy;
        if (bv & 4) {
            x->t.shape[2] += 1; /* T disagrees */
            errs |= FZ_BIT(SDPA_ERR_SHAPE_MISMATCH);
        } else {
            x->t.stride[3] = 3;
            if (c->E > 1)
                errs |= FZ_BIT(SDPA_ERR_BAD_STRIDE);
        }
        break;
    }
    case 10: /* dx_kv in self-attention */
        if (c->self) {
            dxkv.present = 1;
            fz_set_layout(&dxkv.t, c->N, 1, c->Tq, c->E, 0, 0);
            errs |= FZ_BIT(SDPA_ERR_BAD_OPTION_VALUE);
        }
        break;
    case 11: /* an output over an input or another output */
        overlap = (int)(bv % 4);
        errs |= FZ_BIT(SDPA_ERR_OVERLAP);
        break;
    case 12: /* a position RoPE's inverse cannot negate */
        if ((c->positions == SDPA_POS_ROPE_HALF ||
             c->positions == SDPA_POS_ROPE_INTERLEAVED) &&
            c->pos_q) {
            c->pos_q[0] = INT64_MIN;
            errs |= FZ_BIT(SDPA_ERR_OVERFLOW);
        }
        break;
    default:
        break;
    }
    for (int i = 0; i < 3; i++)
        if (rows[i]->present) {
            int inj = fz_tens_alloc(rows[i], names[i], i > 0, 0);
            (void)inj;
            if (i == 0)
                for (int64_t n = 0; n < c->N; n++)
                    for (int64_t t = 0; t < c->Tq && t < dy.t.shape[2]; t++)
                        for (int64_t m = 0; m < c->E; m++)
                            fz_set(&dy, fz_off4(&dy.t, n, 0, t, m),
                                   fz_sym(1.0));
        }
    b.dy = dy.t;
    if (want[1] || dxq.present)
        b.dx_q = dxq.t;
    if (dxkv.present)
        b.dx_kv = dxkv.t;
    /* the weights' and biases' gradients, flat arrays */
    fz_buf *gb[G_COUNT] = {0};
    void **slot[G_COUNT] = {NULL,    NULL,    &b.dw_q, &b.dw_k, &b.dw_v,
                            &b.dw_o, &b.db_q, &b.db_k, &b.db_v, &b.db_o};
    static const char *gn[G_COUNT] = {"dx_q", "dx_kv", "dw_q", "dw_k", "dw_v",
                                      "dw_o", "db_q",  "db_k", "db_v", "db_o"};
    for (int i = G_DWQ; i < G_COUNT; i++)
        if (grads >> i & 1) {
            size_t bytes = fz_layer_grad_count(c, i) * es;
            gb[i] = fz_buf_new(gn[i], 1, bytes);
            fz_buf_allow(gb[i], 0, bytes);
            *slot[i] = gb[i]->mem;
        }
    switch (overlap) {
    case 0:
        if (b.dx_q.data)
            b.dx_q.data = c->x_q.t.data;
        else
            b.dw_o = (void *)(uintptr_t)c->a.w_o;
        break;
    case 1:
        b.dw_q = (void *)(uintptr_t)c->a.w_q;
        break;
    case 2:
        if (b.dw_k && b.dw_v)
            b.dw_v = b.dw_k;
        else
            b.db_o = b.dy.data;
        break;
    case 3:
        b.dw_k = b.dy.data;
        break;
    default:
        break;
    }
    if (null_forward)
        b.forward = NULL;
    if (null_dy)
        b.dy.data = NULL;
    static const int grad_types[8] = {
        0, 0, 0, 0, SDPA_FLOAT32, SDPA_FLOAT64, SDPA_FLOAT16, 99};
    b.grad_dtype = grad_types[fz(F_BGRAD) % 8];
    union {
        sdpa_mha_backward_args a;
        unsigned char bytes[sizeof(sdpa_mha_backward_args) + 64];
    } box;
    size_t seen;
    errs |= fz_pack_struct(fz(F_BSTRUCT), &b, sizeof b, MHA_BACKWARD_ARGS_V1,
                           NULL, 0, box.bytes, sizeof box.bytes, &seen);
    /* a 1.1-sized caller's grad_dtype is 0; float32 gradients are those
     * of a float32 layer (and of a half one); nothing else is a type */
    const int grad_dtype = seen > MHA_BACKWARD_ARGS_V1 ? b.grad_dtype : 0;
    if (grad_dtype != 0 &&
        (grad_dtype != SDPA_FLOAT32 || c->dt.dtype == SDPA_FLOAT64))
        errs |= FZ_BIT(SDPA_ERR_BAD_DTYPE);

    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, L_OPT0);
    fz_layer_describe(c);
    fz_describe(" grads=0x%x dy{..|%lld,%lld,%lld,%lld} bbad=%u grad_dtype=%d",
                grads, (long long)dy.t.stride[0], (long long)dy.t.stride[1],
                (long long)dy.t.stride[2], (long long)dy.t.stride[3], bk,
                grad_dtype);
    const fz_sset errs_all = errs;
    fz_sset expect = errs | amb;
    if (c->dt.pending)
        expect |= FZ_ALL_DOCUMENTED;
    fz_layer_ref r;
    memset(&r, 0, sizeof r);
    int have_ref = !errs && c->dt.valid && !c->huge;
    int check_vals = 0;
    if (have_ref) {
        CHECK(fz_layer_ref_backward(c, &dy.t, &r) == 0,
              "reference out of memory");
        if (r.att.any_empty && !fz_opt.empty_zero) {
            expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
        } else {
            check_vals = fz_layer_expect_values(c, &r, &expect);
        }
    }
    const int oom = fz_layer_oom(c, have_ref, errs_all, &expect);
    const sdpa_mha_backward_args *call = c->null_args ? NULL : &box.a;
    fz_snapshot();
    long allocs = fz_alloc_count();
    int st = sdpa_mha_backward(c->null_ctx ? NULL : ctx, call);
    fz_check_status("sdpa_mha_backward", st, expect, c->null_ctx ? NULL : ctx);
    if (st != SDPA_OK) {
        /* every error, NONFINITE included, before any output is written */
        fz_check_bufs(1, 0, "refused sdpa_mha_backward");
        if (c->huge) /* refused by the layer's own checks */
            CHECK(fz_alloc_count() == allocs, "a refused huge call allocated");
    } else if (c->dt.valid) {
        fz_check_bufs(0, 1, "sdpa_mha_backward");
    }
    if (st == SDPA_OK && check_vals) {
        const sdpa_tensor *dx[2] = {&box.a.dx_q, &box.a.dx_kv};
        for (int i = 0; i < 2; i++) {
            if (!dx[i]->data)
                continue;
            int64_t len = i ? c->Tk : c->Tq;
            for (int64_t n = 0; n < c->N; n++)
                for (int64_t t = 0; t < len; t++)
                    for (int64_t m = 0; m < c->E; m++) {
                        size_t at = (size_t)((n * len + t) * c->E + m);
                        fz_check_close(gn[i],
                                       fz_get_raw(dx[i]->data, es,
                                                  fz_off4(dx[i], n, 0, t, m)),
                                       r.g[i][at], r.tg[i][at], r.eps, 1, n, 0,
                                       t, m);
                    }
        }
        for (int i = G_DWQ; i < G_COUNT; i++) {
            if (!gb[i])
                continue;
            size_t cnt = fz_layer_grad_count(c, i);
            for (size_t k = 0; k < cnt; k++)
                fz_check_close(gn[i], fz_get_raw(gb[i]->mem, es, (int64_t)k),
                               r.g[i][k], r.tg[i][k], r.eps, 1, 0, 0, 0,
                               (int64_t)k);
        }
    }
    if (st == SDPA_OK && !c->null_ctx && !oom)
        fz_second_call(ctx, fz(L_SECOND), st, fz_layer_call_backward, call,
                       "gradients");
    fz_layer_end(ctx, have_ref ? &r : NULL);
}

static const fz_seed seeds[] = {
    {"cross_gqa_rope_f64",
     {FZ_LAYER_CROSS_GQA_F64,
      {L_DK, 8 | 1},
      {L_POS, 4},
      {L_BIASES, 15},
      {-1, 0}}},
    {"sinusoidal_attn_mask_padded",
     {{L_POS, 3},
      {L_ATTN, 1},
      {L_CAUSAL, 1},
      {L_MASK, 1},
      {L_TQ, 3},
      {L_E, 5},
      {F_DY_LAYOUT, 1 | (2 << 2)},
      {F_GRADS, 0xDA}, /* only dx_q, dw_q, dw_o */
      {F_GRADS2, 3},
      FZ_OPTION(L_OPT0, 1, 1),
      {-1, 0}}},
    {"interleaved_offset_threads",
     {{L_POS, 5},
      {L_POS_OFF, 4},
      {L_E, 3},
      {L_HQ, 1},
      {L_DK, 8 | 1},
      {F_GRADS, 0xC0},
      FZ_OPTION(L_OPT0, 2, 2),
      {L_SECOND, 1},
      {-1, 0}}},
    {"no_outputs", {{L_TQ, 2}, {F_GRADS, 0xFF}, {F_GRADS2, 3}, {-1, 0}}},
    {"null_dy", {{F_BBAD_KIND, 8}, {-1, 0}}},
    {"dx_kv_in_self", {{F_BBAD_KIND, 10}, {-1, 0}}},
    {"dw_q_over_w_q", {{F_BBAD_KIND, 11}, {F_BBAD_VAL, 1}, {-1, 0}}},
    {"rope_position_int64_min",
     {{L_POS, 4},
      {L_POS_ARR, 2},
      {F_BBAD_KIND, 12},
      {L_E, 3},
      {L_HQ, 1},
      {L_DK, 8 | 1},
      {-1, 0}}},
    {"struct_small", {{F_BSTRUCT, 28}, {-1, 0}}},
    {"oom", {{L_OOM, 15}, {-1, 0}}},
    /* grad_dtype: float32 on a float32 layer (values compared), float32
     * on a float64 layer (refused), a value no release takes */
    {"grad_dtype_float32", {{F_BGRAD, 4}, {-1, 0}}},
    {"grad_dtype_float32_on_f64",
     {FZ_LAYER_CROSS_GQA_F64, {F_BGRAD, 4}, {-1, 0}}},
    {"grad_dtype_99", {{F_BGRAD, 7}, {-1, 0}}},
};

FZ_TARGET("fuzz_mha_backward", "MHA_BACKWARD", "self_all_gradients", L_SEED0, 0,
          NULL, run, NULL);
