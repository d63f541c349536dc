/*
 * libFuzzer target for sdpa_mha_forward.
 *
 * The input's first fields are a layer call (fuzz_layer.h): dtype (also
 * the declared half types and invalid values), N, Tq, Tk, d_model, heads
 * (GQA, defaults, not a divisor), dim_k / dim_v (defaults, explicit), every
 * positional encoding with bases, offsets (also where they overflow) and
 * explicit positions, self- or cross-attention, layouts of x_q, x_kv and y
 * (contiguous, padded rows, sequence-first; y = x_q in place), biases, the
 * attention options (causal, window, mask, bias, kv_lens, ALiBi, sinks,
 * soft-cap, scale) and outputs (weights, lse, max_weight, entropy), one
 * argument error (NULL pointers, shapes, strides, heads, the attention's own
 * errors and tensors the layer makes, overlaps of y or an attention output
 * with a parameter, x_q huge at a fake address near the top of the address
 * space), both struct sizes, the context's options, a failing allocator
 * and NaN in an input or a weight.
 *
 * Checks: documented statuses, the ones the arguments call for (the
 * attention's come back from it); y untouched on every error (the header:
 * found before y is written), the attention outputs too except after
 * NONFINITE, a message; inputs never written; no allocation on a refused
 * call or a repeated one; on success y within the bound of the long-double
 * reference of the layer (fuzz_layer_ref.c) and the attention outputs
 * within the forward's tolerance widened by the projections' errors, with
 * the exact rules (forbidden weights 0, empty rows); y's padding untouched;
 * bitwise equal results with another thread count.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_layer.h"

static void run(void)
{
    fz_layer_call *c = fz_layer_decode(0);
    sdpa_ctx *ctx = fz_ctx_new();
    fz_apply_options(ctx, L_OPT0);
    fz_layer_describe(c);
    const fz_sset errs_all = c->errs;
    fz_sset expect = c->errs | c->amb;
    if (c->dt.pending)
        expect |= FZ_ALL_DOCUMENTED;
    fz_layer_ref r;
    memset(&r, 0, sizeof r);
    int have_ref = !c->errs && c->dt.valid && !c->huge;
    int check_vals = 0;
    if (have_ref) {
        CHECK(fz_layer_ref_forward(c, &r) == 0, "reference out of memory");
        int empty = r.att.any_empty && !fz_opt.empty_zero;
        int unsupported = c->has_attn && c->out[A_WEIGHTS].present &&
                          fz_path_streams(fz_opt.path);
        if (empty)
            expect |= FZ_BIT(SDPA_ERR_FULLY_MASKED_ROW);
        if (unsupported)
            expect |= FZ_BIT(SDPA_ERR_UNSUPPORTED);
        if (!empty && !unsupported) {
            check_vals = fz_layer_expect_values(c, &r, &expect);
        }
    }
    const int oom = fz_layer_oom(c, have_ref, errs_all, &expect);
    const sdpa_mha_args *call = c->null_args ? NULL : &c->box.a;
    fz_snapshot();
    long allocs = fz_alloc_count();
    int st = sdpa_mha_forward(c->null_ctx ? NULL : ctx, call);
    fz_check_status("sdpa_mha_forward", st, expect, c->null_ctx ? NULL : ctx);
    /* (the layer reserves its scratch before the attention validates its
     * options: only its own checks come before any allocation) */
    if (c->huge)
        CHECK(fz_alloc_count() == allocs, "a refused huge call allocated");
    if (st == SDPA_ERR_NONFINITE) {
        /* y untouched; the attention's outputs hold unspecified values */
        fz_check_bufs(0, 0, "sdpa_mha_forward (NONFINITE)");
        if (c->y.present)
            fz_check_buf(c->y.b, 1, 0, "sdpa_mha_forward (NONFINITE)");
        if (c->box.a.y.data == c->x_q.t.data)
            fz_check_buf(c->x_q.b, 1, 0, "sdpa_mha_forward (NONFINITE)");
    } else if (st != SDPA_OK) {
        fz_check_bufs(1, 0, "refused sdpa_mha_forward");
    } else if (c->dt.valid) {
        fz_check_bufs(0, 1, "sdpa_mha_forward");
    }
    if (st == SDPA_OK && check_vals) {
        const sdpa_tensor *y = &c->box.a.y;
        const size_t es = fz_esize(c->dt.compute);
        for (int64_t b = 0; b < c->N; b++)
            for (int64_t t = 0; t < c->Tq; t++)
                for (int64_t m = 0; m < c->E; m++) {
                    size_t at = (size_t)((b * c->Tq + t) * c->E + m);
                    fz_check_close(
                        "y", fz_get_raw(y->data, es, fz_off4(y, b, 0, t, m)),
                        r.y[at], r.ty[at], r.eps, 1, b, 0, t, m);
                }
        if (c->has_attn) {
            const sdpa_forward_args *f = &c->attn_box.a;
            fz_att_views v = {NULL,
                              c->out[A_WEIGHTS].present ? &f->weights : NULL,
                              c->out[A_LSE].present ? &f->lse : NULL,
                              NULL,
                              c->out[A_MAXW].present ? &f->max_weight : NULL,
                              c->out[A_ENT].present ? &f->entropy : NULL,
                              es,
                              0,
                              f->sinks};
            fz_check_attention(&r.att, &r.att_tol, &v, 1, 0);
        }
    }
    /* a second call: another thread count (bitwise), or the same call
     * (allocates nothing) */
    if (st == SDPA_OK && !c->null_ctx && !oom &&
        c->box.a.y.data != c->x_q.t.data)
        fz_second_call(ctx, fz(L_SECOND), st, fz_layer_call_forward, call,
                       "outputs");
    fz_layer_end(ctx, have_ref ? &r : NULL);
}

static const fz_seed seeds[] = {
    {"cross_gqa_biases_f64",
     {FZ_LAYER_CROSS_GQA_F64, {L_DK, 2}, {L_DV, 3}, {L_BIASES, 15}, {-1, 0}}},
    {"rope_half_positions",
     {{L_SELF, 1},
      {L_POS, 4},
      {L_POS_ARR, 2},
      {L_E, 7},
      {L_HQ, 1},
      {L_TQ, 3},
      {-1, 0}}},
    {"rope_interleaved_cross_offset",
     {{L_SELF, 0},
      {L_POS, 5},
      {L_POS_OFF, 4},
      {L_POS_BASE, 5},
      {L_E, 3},
      {L_HQ, 1},
      {L_DK, 8 | 1},
      {L_TK, 4},
      {-1, 0}}},
    {"sinusoidal_seq_first_layouts",
     {{L_POS, 3}, {L_LAYOUT, 2 | (1 << 4)}, {L_N, 1}, {L_E, 5}, {-1, 0}}},
    {"attn_causal_mask_outputs",
     {{L_ATTN, 1},
      {L_CAUSAL, 2},
      {L_MASK, 1},
      {L_MASK_B, 1 | (1 << 2)},
      {L_ATTN_OUT, 15},
      {L_TQ, 3},
      {L_E, 3},
      FZ_OPTION(L_OPT0, 1, 1),
      {-1, 0}}},
    {"attn_window_bias_alibi_sinks_softcap",
     {{L_ATTN, 1},
      {L_WINDOW, 1 | (2 << 2)},
      {L_BIAS, 1},
      {L_BIAS_B, 2 << 6},
      {L_EXTRAS, 1 | 2 | 4 | 8},
      {L_ATTN_OUT, 2 | 4},
      {L_TQ, 3},
      {L_HQ, 1},
      {L_E, 3},
      {-1, 0}}},
    {"in_place_threads",
     {{L_LAYOUT, 0x40}, FZ_OPTION(L_OPT0, 2, 2), {L_TQ, 3}, {-1, 0}}},
    {"repeat_no_allocation", {{L_SECOND, 2}, {L_TQ, 2}, {L_E, 3}, {-1, 0}}},
    {"null_weight", {{L_BAD_KIND, 12}, {L_BAD_VAL, 5}, {-1, 0}}},
    {"bad_heads", {{L_BAD_KIND, 15}, {L_BAD_VAL, 0}, {-1, 0}}},
    {"y_over_weight", {{L_BAD_KIND, 17}, {L_BAD_VAL, 0}, {-1, 0}}},
    {"attn_gives_q", {{L_ATTN, 1}, {L_BAD_KIND, 16}, {L_BAD_VAL, 0}, {-1, 0}}},
    {"positions_none_with_base", {{L_POS_BASE, 4}, {-1, 0}}},
    {"forced_tiled_with_weights",
     {{L_ATTN, 1}, {L_ATTN_OUT, 1}, FZ_OPTION(L_OPT0, 4, 2), {-1, 0}}},
    {"struct_tail", {{L_STRUCT, 30}, {-1, 0}}},
    {"oom", {{L_OOM, 15}, {L_TQ, 3}, {-1, 0}}},
    {"nan_weight", {{L_SPECIAL, 7 | (1 << 4)}, {-1, 0}}},
    {"huge_x_q", {{L_BAD_KIND, 18}, {L_BAD_VAL, 1}, {-1, 0}}},
};

FZ_TARGET("fuzz_mha_forward", "MHA_FORWARD", "self_default", L_SEED0, 0, NULL,
          run, NULL);
