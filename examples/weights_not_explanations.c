/*
 * Attention weights are not explanations: the example of the university
 * textbook unit "32.2 Scaled dot-product attention" (docs/SEMANTICS.md,
 * "Sources").
 *
 * Two keys get the weights A = (0.1, 0.9); their values are v1 = (10, 0)
 * and v2 = (-1, 0). The output is 0.1·v1 + 0.9·v2 = (0.1, 0): the token
 * with the small weight contributes +1.0 to it, the one with the large
 * weight -0.9. A weight says how much of a value is taken, not how much
 * that value matters to the result.
 *
 * To get exactly these weights, take Dk = 1, q = 1, scale 1 and the keys
 * k1 = log 0.1, k2 = log 0.9: the logits are log 0.1 and log 0.9, and
 * softmax(log a, log b) = (a, b) / (a + b) = (0.1, 0.9).
 */
#include <math.h>
#include <sdpa.h>
#include <stdio.h>

int main(void)
{
    double q[1] = {1.0};
    double k[2] = {log(0.1), log(0.9)}; /* one key per row, Dk = 1 */
    double v[2 * 2] = {10, 0, -1, 0};   /* v1 = (10, 0), v2 = (-1, 0) */
    double out[2], weights[2];

    sdpa_ctx *ctx;
    if (sdpa_ctx_create(&ctx) != SDPA_OK)
        return 1;
    sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
    args.dtype = SDPA_FLOAT64;
    args.scale = 1.0; /* no 1/sqrt(Dk) here: the logits are the dot products */
    args.q = sdpa_tensor_bhtd(q, 1, 1, 1, 1);             /* [N, H, Tq, Dk] */
    args.k = sdpa_tensor_bhtd(k, 1, 1, 2, 1);             /* [N, H, Tk, Dk] */
    args.v = sdpa_tensor_bhtd(v, 1, 1, 2, 2);             /* [N, H, Tk, Dv] */
    args.out = sdpa_tensor_bhtd(out, 1, 1, 1, 2);         /* [N, H, Tq, Dv] */
    args.weights = sdpa_tensor_bhtd(weights, 1, 1, 1, 2); /* the softmax */
    int status = sdpa_forward(ctx, &args);
    if (status != SDPA_OK) {
        fprintf(stderr, "sdpa_forward: %s\n", sdpa_ctx_last_error(ctx));
        sdpa_ctx_destroy(ctx);
        return 1;
    }
    sdpa_ctx_destroy(ctx);

    printf("weights A = (%.6f, %.6f)\n", weights[0], weights[1]);
    printf("output  O = (%.6f, %.6f)\n", out[0], out[1]);
    printf("contributions to O[0]: token 1 (weight %.1f) %+.2f, "
           "token 2 (weight %.1f) %+.2f\n",
           weights[0], weights[0] * v[0], weights[1], weights[1] * v[2]);

    /* check: A = (0.1, 0.9) and O = (0.1, 0) to 1e-6 */
    int ok = fabs(weights[0] - 0.1) <= 1e-6 && fabs(weights[1] - 0.9) <= 1e-6 &&
             fabs(out[0] - 0.1) <= 1e-6 && fabs(out[1]) <= 1e-6;
    if (!ok)
        fprintf(stderr, "wrong: expected A = (0.1, 0.9), O = (0.1, 0)\n");
    return ok ? 0 : 1;
}
