/*
 * Decoding with a KV cache, one token per step, and RoPE positions.
 *
 * Each step s produces the new token's q, k and v (here a fixed function
 * of the token; in a model, its projections). It
 *   1. writes k and v into row s of the cache (capacity CAP tokens),
 *   2. rotates q and the cached k row with RoPE at position s (the cache
 *      holds keys already rotated, so each key is rotated once),
 *   3. calls sdpa_forward with the one query row against the cache:
 *      kv_lens = s + 1 (rows past it are never read) and
 *      SDPA_CAUSAL_BOTTOM_RIGHT, which anchors the query at the last key.
 *
 * Then it checks every step against one causal call over the whole
 * sequence (SDPA_CAUSAL_TOP_LEFT, RoPE at positions 0..T-1): row s of that
 * call is what step s computed.
 */
#include <math.h>
#include <sdpa.h>
#include <stdio.h>
#include <string.h>

enum { H = 2, D = 8, T = 12, CAP = 16 }; /* heads, head size, steps, cache */

/* The token stream: element d of head h of token t's q, k or v. */
static float token(int which, int t, int h, int d)
{
    return sinf(0.7f * (float)t + 1.3f * (float)h + 0.37f * (float)d +
                2.1f * (float)which);
}

int main(void)
{
    /* caches [1, H, CAP, D] (logical N, H, T, D), and each step's output */
    static float cache_k[H * CAP * D], cache_v[H * CAP * D];
    static float steps[T][H * D];
    sdpa_ctx *ctx;
    if (sdpa_ctx_create(&ctx) != SDPA_OK)
        return 1;

    for (int s = 0; s < T; s++) {
        const int64_t position = s;
        float q[H * D];
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) {
                q[h * D + d] = token(0, s, h, d);
                cache_k[(h * CAP + s) * D + d] = token(1, s, h, d); /* 1. */
                cache_v[(h * CAP + s) * D + d] = token(2, s, h, d);
            }
        /* 2. RoPE (Llama's half-split pairs) on q, [1, H, 1, D], and on
         * row s of the cache: a [1, H, 1, D] view with the cache's strides */
        sdpa_tensor k_row = sdpa_tensor_bhtd(cache_k + s * D, 1, H, 1, D);
        k_row.stride[1] = CAP * D; /* the next head's row s */
        if (sdpa_rope_apply(SDPA_FLOAT32, sdpa_tensor_bhtd(q, 1, H, 1, D),
                            &position, SDPA_ROPE_HALF, 0, 0) != SDPA_OK ||
            sdpa_rope_apply(SDPA_FLOAT32, k_row, &position, SDPA_ROPE_HALF, 0,
                            0) != SDPA_OK)
            return 1;

        /* 3. one query row against the s + 1 cached keys */
        const int64_t kv_lens[1] = {s + 1};
        sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
        args.dtype = SDPA_FLOAT32;
        args.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
        args.kv_lens = kv_lens;
        args.q = sdpa_tensor_bhtd(q, 1, H, 1, D);
        args.k = sdpa_tensor_bhtd(cache_k, 1, H, CAP, D);
        args.v = sdpa_tensor_bhtd(cache_v, 1, H, CAP, D);
        args.out = sdpa_tensor_bhtd(steps[s], 1, H, 1, D);
        if (sdpa_forward(ctx, &args) != SDPA_OK) {
            fprintf(stderr, "step %d: %s\n", s, sdpa_ctx_last_error(ctx));
            return 1;
        }
    }

    /* The whole sequence at once: [1, H, T, D], RoPE at positions 0..T-1
     * (positions NULL), causal top-left. */
    static float q_all[H * T * D], k_all[H * T * D], v_all[H * T * D];
    static float out_all[H * T * D];
    for (int h = 0; h < H; h++)
        for (int t = 0; t < T; t++)
            for (int d = 0; d < D; d++) {
                q_all[(h * T + t) * D + d] = token(0, t, h, d);
                k_all[(h * T + t) * D + d] = token(1, t, h, d);
                v_all[(h * T + t) * D + d] = token(2, t, h, d);
            }
    sdpa_forward_args full = SDPA_FORWARD_ARGS_INIT;
    full.dtype = SDPA_FLOAT32;
    full.causal = SDPA_CAUSAL_TOP_LEFT;
    full.q = sdpa_tensor_bhtd(q_all, 1, H, T, D);
    full.k = sdpa_tensor_bhtd(k_all, 1, H, T, D);
    full.v = sdpa_tensor_bhtd(v_all, 1, H, T, D);
    full.out = sdpa_tensor_bhtd(out_all, 1, H, T, D);
    if (sdpa_rope_apply(SDPA_FLOAT32, full.q, NULL, SDPA_ROPE_HALF, 0, 0) ||
        sdpa_rope_apply(SDPA_FLOAT32, full.k, NULL, SDPA_ROPE_HALF, 0, 0) ||
        sdpa_forward(ctx, &full) != SDPA_OK) {
        fprintf(stderr, "full call: %s\n", sdpa_ctx_last_error(ctx));
        return 1;
    }
    sdpa_ctx_destroy(ctx);

    /* Every step against row s of the full call. */
    double worst = 0;
    for (int s = 0; s < T; s++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < D; d++) {
                double diff = fabs((double)steps[s][h * D + d] -
                                   (double)out_all[(h * T + s) * D + d]);
                worst = diff > worst ? diff : worst;
            }
    printf("last step, head 0: %.5f %.5f %.5f ...\n", steps[T - 1][0],
           steps[T - 1][1], steps[T - 1][2]);
    printf("%d decode steps vs one causal call: max |difference| %.2g\n", T,
           worst);
    return worst <= 1e-5 ? 0 : 1;
}
