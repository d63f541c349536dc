/*
 * A multi-head attention layer on a sentence-sized input: 9 tokens,
 * d_model 16, 4 heads of 4, sinusoidal positions, causal, in float64.
 *
 *   y = Concat(head_1..head_4) W_O,  head_h = Attention(X~ W_Q, X~ W_K,
 *   X~ W_V) restricted to columns 4h..4h+3,  X~ = X + PE
 *
 * Weights are row-major [in, out] matrices applied as X W (a PyTorch
 * nn.Linear weight, [out, in], is passed transposed). The program prints
 * the output's norm, then checks the layer against the same layer fed
 * X + sdpa_sinusoidal_table() by hand with SDPA_POS_NONE.
 */
#include <math.h>
#include <sdpa.h>
#include <stdio.h>

enum { T = 9, E = 16, HEADS = 4 };

/* Deterministic "trained" values in [-scale, scale). */
static void fill(double *x, int n, unsigned seed, double scale)
{
    unsigned s = seed;
    for (int i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u; /* a linear congruential generator */
        x[i] = scale * ((double)(s >> 8) / 8388608.0 - 1.0);
    }
}

int main(void)
{
    static double x[T * E], w_q[E * E], w_k[E * E], w_v[E * E], w_o[E * E];
    static double y[T * E], x_pe[T * E], y_check[T * E];
    fill(x, T * E, 1, 1.0); /* the 9 token embeddings */
    fill(w_q, E * E, 2, 0.25);
    fill(w_k, E * E, 3, 0.25);
    fill(w_v, E * E, 4, 0.25);
    fill(w_o, E * E, 5, 0.25);

    sdpa_ctx *ctx;
    if (sdpa_ctx_create(&ctx) != SDPA_OK)
        return 1;
    sdpa_forward_args attn = SDPA_FORWARD_ARGS_INIT;
    attn.causal = SDPA_CAUSAL_TOP_LEFT; /* each token sees its past */

    sdpa_mha_args args = SDPA_MHA_ARGS_INIT;
    args.dtype = SDPA_FLOAT64;
    args.positions = SDPA_POS_SINUSOIDAL;       /* X~ = X + PE, base 10000 */
    args.heads_q = HEADS;                       /* dk = dv = E / HEADS = 4 */
    args.x_q = sdpa_tensor_bhtd(x, 1, 1, T, E); /* [N, 1, T, d_model] */
    args.y = sdpa_tensor_bhtd(y, 1, 1, T, E);   /* x_kv absent: self */
    args.w_q = w_q, args.w_k = w_k, args.w_v = w_v, args.w_o = w_o;
    args.attn = &attn;
    if (sdpa_mha_forward(ctx, &args) != SDPA_OK) {
        fprintf(stderr, "sdpa_mha_forward: %s\n", sdpa_ctx_last_error(ctx));
        return 1;
    }
    double norm = 0;
    for (int i = 0; i < T * E; i++)
        norm += y[i] * y[i];
    printf("%d tokens, d_model %d, %d heads: |y| = %.6f\n", T, E, HEADS,
           sqrt(norm));

    /* The same layer, the table added by hand: identical up to rounding. */
    if (sdpa_sinusoidal_table(SDPA_FLOAT64, T, E, 0, 0, x_pe) != SDPA_OK)
        return 1;
    for (int i = 0; i < T * E; i++)
        x_pe[i] += x[i];
    args.positions = SDPA_POS_NONE;
    args.x_q = sdpa_tensor_bhtd(x_pe, 1, 1, T, E);
    args.y = sdpa_tensor_bhtd(y_check, 1, 1, T, E);
    if (sdpa_mha_forward(ctx, &args) != SDPA_OK) {
        fprintf(stderr, "sdpa_mha_forward: %s\n", sdpa_ctx_last_error(ctx));
        return 1;
    }
    sdpa_ctx_destroy(ctx);
    double worst = 0;
    for (int i = 0; i < T * E; i++)
        worst = fmax(worst, fabs(y[i] - y_check[i]));
    printf("against X + sdpa_sinusoidal_table by hand: max |difference| "
           "%.2g\n",
           worst);
    return isfinite(norm) && norm > 0 && worst <= 1e-12 ? 0 : 1;
}
