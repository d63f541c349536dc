/*
 * sdpa experiment scale — the controlled experiment on the attention scale
 * of exercise F5 of the university textbook unit "32.2 Scaled dot-product
 * attention" (Hungarian), run with the library (docs/man/sdpa.1, docs/TOOL.md).
 *
 * Task: a lag copy. An instance is T = 16 tokens drawn uniformly from a
 * vocabulary of 16; the target at position t is the token at t - k (k = 2
 * by default, --lag); positions t < k have no target and are not scored
 * (no padding: every sequence is full). One causal attention layer solves
 * it: query t attends to key t - k, which it can locate through the
 * sinusoidal positions, and the value carries the token.
 *
 * Model (float64): token embedding E [V, d] + sinusoidal positions (the
 * layer's SDPA_POS_SINUSOIDAL) -> sdpa_mha_forward (d = 32, 4 heads of
 * dk = dv = 8, biases, causal top-left) -> linear read-out W_r [d, V] + b_r
 * -> softmax cross-entropy, averaged over the scored positions of the
 * batch. Gradients: the read-out by hand, the layer by sdpa_mha_backward,
 * the embedding by scattering dx. Adam (lr 1e-3, beta 0.9 / 0.999, eps
 * 1e-8, bias-corrected), batch 64.
 *
 * Data: 4000 training and 1000 validation instances from SplitMix64 seeded
 * with DATA_SEED, the same for every run. A run is (seed, scale): the seed
 * draws the initial parameters and the order of the batches (an epoch is a
 * shuffle of the 4000), so the two scales of a seed start from the same
 * weights and see the same batches: a paired comparison. The one variable
 * is attn->scale: 1/sqrt(dk) of the heads or 1.
 *
 * Validation (the whole 1000 instances, one forward call): at step 0
 * (before any update) and after each of the first 200 steps, then every
 * 100 steps and after the last. Per run: the standard deviation of the
 * validation cross-entropy over steps 0..200 (201 values), the standard
 * deviation of its step-to-step changes over the same steps (the noise
 * without the downward trend), the mean gradient norm (the L2 norm of all
 * parameters' gradients, over every step), the final validation
 * cross-entropy and accuracy, and the mean row entropy of the attention
 * (every head and validation row; the library's entropy output) at step 0
 * and at the end. Per scale: the mean and sample standard deviation of
 * each over the seeds.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, isatty */

#include "experiment.h"
#include "tool.h"

#include <sdpa.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define DATA_SEED UINT64_C(20240613)
#define VOCAB 16
#define TOKENS 16
#define D_MODEL 32
#define N_TRAIN 4000
#define N_VALID 1000
#define BATCH 64
#define EARLY 200 /* steps whose validation loss is followed one by one */
#define EVAL_EVERY 100
#define LR 1e-3
#define BETA1 0.9
#define BETA2 0.999
#define ADAM_EPS 1e-8
#define MAX_SEEDS 1000
#define MAX_STEPS 1000000

void tool_usage_experiment(FILE *f)
{
    fprintf(
        f,
        "usage: sdpa experiment scale [--seeds S] [--steps N] [--heads H] "
        "[--lag K]\n"
        "                             [--csv]\n"
        "       sdpa experiment scale --gradcheck\n\n"
        "Exercise F5 of the textbook unit \"32.2 Scaled dot-product "
        "attention\"\n(docs/TOOL.md), the experiment on the attention scale, "
        "trained with libsdpa:\na lag-copy task (target at position t: the "
        "token at t - "
        "K; T = %d tokens,\nvocabulary %d, %d / %d train / validation "
        "instances from a fixed seed), one\ncausal attention layer "
        "(sdpa_mha_forward / sdpa_mha_backward, d_model %d,\nsinusoidal "
        "positions) between a token embedding and a linear read-out,\n"
        "cross-entropy, Adam (lr 1e-3, betas 0.9 / 0.999), batch %d. The one "
        "variable:\nattn->scale, 1/sqrt(dk) of the heads versus 1. Per scale, "
        "mean +- sd over\nthe seeds: the sd of the validation cross-entropy "
        "over steps 0..%d (and of\nits step-to-step changes), the mean "
        "gradient norm, the final validation\ncross-entropy and accuracy, the "
        "mean attention row entropy at the start\nand at the end. Validation: "
        "after every one of the first %d steps, then\nevery %d steps and at "
        "the end. Progress goes to stderr when it is a terminal.\n\n"
        "  --seeds S     seeds 1..S, 1..%d (default 10)\n"
        "  --steps N     training steps per run, %d..%d (default 2000)\n"
        "  --heads H     heads, a divisor of %d (default 4: dk = 8)\n"
        "  --lag K       the copy's lag, 1..%d (default 2)\n"
        "  --csv         print CSV: scale,dk,seeds,steps, then mean and sd "
        "of\n"
        "                sd_val_ce_200, sd_val_ce_step, grad_norm, "
        "val_ce_start,\n"
        "                val_ce_final, val_acc_final, entropy_start, "
        "entropy_end\n"
        "  --gradcheck   check the training step's gradients against "
        "central\n"
        "                differences on a tiny model (both scales); exit "
        "status 1\n"
        "                on a relative error above 1e-6\n"
        "  --help        this text\n",
        TOKENS, VOCAB, N_TRAIN, N_VALID, D_MODEL, BATCH, EARLY, EARLY,
        EVAL_EVERY, MAX_SEEDS, 1, MAX_STEPS, D_MODEL, TOKENS - 1);
}

/* ---- Random numbers --------------------------------------------------- */

static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

static double uniform(uint64_t *state) /* [0, 1) */
{
    return (double)(splitmix64(state) >> 11) * 0x1.0p-53;
}

static double normal(uint64_t *state) /* Box-Muller, one of the pair */
{
    double u1 = 1.0 - uniform(state), u2 = uniform(state);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* ---- The model -------------------------------------------------------- */

/* Sizes of one configuration (the experiment's or the gradient check's). */
typedef struct shape {
    int64_t vocab, tokens, d, heads, lag;
} shape;

/* Offsets of the parameters in one flat vector. */
enum { P_E, P_WQ, P_WK, P_WV, P_WO, P_BQ, P_BK, P_BV, P_BO, P_WR, P_BR, P_N };

typedef struct model {
    shape s;
    double scale; /* attn->scale */
    size_t off[P_N + 1];
    double *theta, *grad, *m, *v; /* off[P_N] each */
    /* work buffers for up to max_n instances */
    int64_t max_n;
    double *x, *y, *logits, *dx, *dy, *entropy;
    sdpa_ctx *ctx;
} model;

static int model_init(model *mdl, shape s, int64_t max_n)
{
    memset(mdl, 0, sizeof *mdl);
    mdl->s = s;
    mdl->max_n = max_n;
    const size_t d = (size_t)s.d, v = (size_t)s.vocab;
    const size_t sizes[P_N] = {v * d, d * d, d * d, d * d, d * d, d,
                               d,     d,     d,     d * v, v};
    mdl->off[0] = 0;
    for (int i = 0; i < P_N; i++)
        mdl->off[i + 1] = mdl->off[i] + sizes[i];
    const size_t np = mdl->off[P_N];
    const size_t rows = (size_t)(max_n * s.tokens);
    mdl->theta = calloc(np, sizeof(double));
    mdl->grad = calloc(np, sizeof(double));
    mdl->m = calloc(np, sizeof(double));
    mdl->v = calloc(np, sizeof(double));
    mdl->x = calloc(rows * d, sizeof(double));
    mdl->y = calloc(rows * d, sizeof(double));
    mdl->dx = calloc(rows * d, sizeof(double));
    mdl->dy = calloc(rows * d, sizeof(double));
    mdl->logits = calloc(rows * v, sizeof(double));
    mdl->entropy = calloc(rows * (size_t)s.heads, sizeof(double));
    if (!mdl->theta || !mdl->grad || !mdl->m || !mdl->v || !mdl->x || !mdl->y ||
        !mdl->dx || !mdl->dy || !mdl->logits || !mdl->entropy) {
        fprintf(stderr, "sdpa experiment: out of memory\n");
        return TOOL_EXIT_FAILURE;
    }
    int status = sdpa_ctx_create(&mdl->ctx);
    if (status != SDPA_OK) {
        fprintf(stderr, "sdpa experiment: sdpa_ctx_create: %s\n",
                sdpa_status_string(status));
        return TOOL_EXIT_FAILURE;
    }
    return TOOL_EXIT_OK;
}

static void model_free(model *mdl)
{
    free(mdl->theta), free(mdl->grad), free(mdl->m), free(mdl->v);
    free(mdl->x), free(mdl->y), free(mdl->dx), free(mdl->dy);
    free(mdl->logits), free(mdl->entropy);
    sdpa_ctx_destroy(mdl->ctx);
}

/* Initial parameters from the seed: embedding N(0, 1) (the size of the
 * sinusoidal table's entries), weights N(0, 1/fan_in), biases 0; Adam's
 * moments 0. */
static void model_reset(model *mdl, uint64_t seed)
{
    uint64_t st = seed * UINT64_C(0x2545F4914F6CDD1D) + 1;
    const double d = (double)mdl->s.d;
    for (int p = 0; p < P_N; p++) {
        double sd =
            p == P_E ? 1.0
            : p == P_BQ || p == P_BK || p == P_BV || p == P_BO || p == P_BR
                ? 0.0
                : 1.0 / sqrt(d);
        for (size_t i = mdl->off[p]; i < mdl->off[p + 1]; i++)
            mdl->theta[i] = sd * normal(&st);
    }
    memset(mdl->m, 0, mdl->off[P_N] * sizeof(double));
    memset(mdl->v, 0, mdl->off[P_N] * sizeof(double));
}

static int library_failed(const model *mdl, const char *what, int status)
{
    fprintf(stderr, "sdpa experiment: %s: %s: %s\n", what,
            sdpa_status_string(status), sdpa_ctx_last_error(mdl->ctx));
    return TOOL_EXIT_FAILURE;
}

/* Results of one pass over n instances. */
typedef struct pass {
    double loss;     /* mean cross-entropy over the scored positions */
    double accuracy; /* share of scored positions predicted right */
    double entropy;  /* mean attention row entropy (when asked) */
} pass;

/* The layer's arguments over n instances (x, y buffers of the model). */
static void layer_args(model *mdl, int64_t n, sdpa_mha_args *a,
                       sdpa_forward_args *attn)
{
    const shape *s = &mdl->s;
    const double *th = mdl->theta;
    *attn = (sdpa_forward_args)SDPA_FORWARD_ARGS_INIT;
    attn->causal = SDPA_CAUSAL_TOP_LEFT;
    attn->scale = mdl->scale;
    *a = (sdpa_mha_args)SDPA_MHA_ARGS_INIT;
    a->dtype = SDPA_FLOAT64;
    a->positions = SDPA_POS_SINUSOIDAL;
    a->heads_q = s->heads;
    a->x_q = sdpa_tensor_bhtd(mdl->x, n, 1, s->tokens, s->d);
    a->y = sdpa_tensor_bhtd(mdl->y, n, 1, s->tokens, s->d);
    a->w_q = th + mdl->off[P_WQ], a->w_k = th + mdl->off[P_WK];
    a->w_v = th + mdl->off[P_WV], a->w_o = th + mdl->off[P_WO];
    a->b_q = th + mdl->off[P_BQ], a->b_k = th + mdl->off[P_BK];
    a->b_v = th + mdl->off[P_BV], a->b_o = th + mdl->off[P_BO];
    a->attn = attn;
}

/* Forward over n instances (tokens [n, T]); with grad, the gradient of the
 * mean cross-entropy into mdl->grad; with want_entropy, the mean row
 * entropy of the attention. */
static int model_pass(model *mdl, const uint8_t *tokens, int64_t n, bool grad,
                      bool want_entropy, pass *out)
{
    const shape *s = &mdl->s;
    const int64_t t_len = s->tokens, d = s->d, vs = s->vocab;
    const int64_t rows = n * t_len;
    const double *th = mdl->theta;
    const double *emb = th + mdl->off[P_E];
    for (int64_t r = 0; r < rows; r++)
        memcpy(mdl->x + r * d, emb + tokens[r] * d, (size_t)d * sizeof(double));
    sdpa_mha_args a;
    sdpa_forward_args attn;
    layer_args(mdl, n, &a, &attn);
    if (want_entropy)
        attn.entropy = sdpa_tensor_bhtd(mdl->entropy, n, s->heads, t_len, 1);
    int status = sdpa_mha_forward(mdl->ctx, &a);
    if (status != SDPA_OK)
        return library_failed(mdl, "sdpa_mha_forward", status);

    /* read-out, softmax cross-entropy over positions t >= lag */
    const double *wr = th + mdl->off[P_WR], *br = th + mdl->off[P_BR];
    const double scored = (double)(n * (t_len - s->lag));
    double loss = 0, right = 0;
    for (int64_t b = 0; b < n; b++)
        for (int64_t t = 0; t < t_len; t++) {
            const int64_t r = b * t_len + t;
            double *z = mdl->logits + r * vs;
            const double *y = mdl->y + r * d;
            for (int64_t c = 0; c < vs; c++)
                z[c] = br[c];
            for (int64_t k = 0; k < d; k++)
                for (int64_t c = 0; c < vs; c++)
                    z[c] += y[k] * wr[k * vs + c];
            if (t < s->lag) {
                for (int64_t c = 0; c < vs; c++)
                    z[c] = 0; /* no target: no gradient */
                continue;
            }
            const int64_t target = tokens[r - s->lag];
            double mx = z[0];
            int64_t arg = 0;
            for (int64_t c = 1; c < vs; c++)
                if (z[c] > mx)
                    mx = z[c], arg = c;
            double sum = 0;
            for (int64_t c = 0; c < vs; c++)
                sum += exp(z[c] - mx);
            loss += mx + log(sum) - z[target];
            right += arg == target;
            if (grad) { /* z becomes dL/dz */
                for (int64_t c = 0; c < vs; c++)
                    z[c] = exp(z[c] - mx) / sum / scored;
                z[target] -= 1.0 / scored;
            }
        }
    out->loss = loss / scored;
    out->accuracy = right / scored;
    out->entropy = 0;
    if (want_entropy) {
        double e = 0;
        for (int64_t i = 0; i < rows * s->heads; i++)
            e += mdl->entropy[i];
        out->entropy = e / (double)(rows * s->heads);
    }
    if (!grad)
        return TOOL_EXIT_OK;

    /* the read-out's gradients and dy = dz W_rᵀ */
    double *g = mdl->grad;
    memset(g, 0, mdl->off[P_N] * sizeof(double));
    double *gwr = g + mdl->off[P_WR], *gbr = g + mdl->off[P_BR];
    for (int64_t r = 0; r < rows; r++) {
        const double *z = mdl->logits + r * vs, *y = mdl->y + r * d;
        double *dy = mdl->dy + r * d;
        for (int64_t c = 0; c < vs; c++)
            gbr[c] += z[c];
        for (int64_t k = 0; k < d; k++) {
            double acc = 0;
            for (int64_t c = 0; c < vs; c++) {
                gwr[k * vs + c] += y[k] * z[c];
                acc += z[c] * wr[k * vs + c];
            }
            dy[k] = acc;
        }
    }
    /* the layer */
    sdpa_mha_backward_args ba = SDPA_MHA_BACKWARD_ARGS_INIT;
    ba.forward = &a;
    ba.dy = sdpa_tensor_bhtd(mdl->dy, n, 1, t_len, d);
    ba.dx_q = sdpa_tensor_bhtd(mdl->dx, n, 1, t_len, d);
    ba.dw_q = g + mdl->off[P_WQ], ba.dw_k = g + mdl->off[P_WK];
    ba.dw_v = g + mdl->off[P_WV], ba.dw_o = g + mdl->off[P_WO];
    ba.db_q = g + mdl->off[P_BQ], ba.db_k = g + mdl->off[P_BK];
    ba.db_v = g + mdl->off[P_BV], ba.db_o = g + mdl->off[P_BO];
    status = sdpa_mha_backward(mdl->ctx, &ba);
    if (status != SDPA_OK)
        return library_failed(mdl, "sdpa_mha_backward", status);
    /* the embedding: dx scattered to the rows of the tokens */
    double *ge = g + mdl->off[P_E];
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < d; k++)
            ge[tokens[r] * d + k] += mdl->dx[r * d + k];
    return TOOL_EXIT_OK;
}

/* One Adam update (step counts from 1); returns the gradient's norm. */
static double adam_step(model *mdl, int64_t step)
{
    const size_t np = mdl->off[P_N];
    const double c1 = 1.0 - pow(BETA1, (double)step);
    const double c2 = 1.0 - pow(BETA2, (double)step);
    double norm = 0;
    for (size_t i = 0; i < np; i++) {
        const double g = mdl->grad[i];
        norm += g * g;
        mdl->m[i] = BETA1 * mdl->m[i] + (1 - BETA1) * g;
        mdl->v[i] = BETA2 * mdl->v[i] + (1 - BETA2) * g * g;
        mdl->theta[i] -=
            LR * (mdl->m[i] / c1) / (sqrt(mdl->v[i] / c2) + ADAM_EPS);
    }
    return sqrt(norm);
}

static void make_tokens(uint64_t *st, uint8_t *tok, int64_t count,
                        int64_t vocab)
{
    for (int64_t i = 0; i < count; i++)
        tok[i] = (uint8_t)(splitmix64(st) % (uint64_t)vocab);
}

/* ---- The gradient check ----------------------------------------------- */

static int gradcheck(void)
{
    const shape s = {5, 6, 8, 2, 2};
    const int64_t n = 3;
    int rc = TOOL_EXIT_OK;
    for (int which = 0; which < 2; which++) {
        model mdl;
        if (model_init(&mdl, s, n) != TOOL_EXIT_OK) {
            model_free(&mdl);
            return TOOL_EXIT_FAILURE;
        }
        mdl.scale = which == 0 ? 1.0 / sqrt((double)(s.d / s.heads)) : 1.0;
        model_reset(&mdl, 7);
        uint64_t st = 99;
        for (size_t i = mdl.off[P_BQ]; i < mdl.off[P_N]; i++)
            mdl.theta[i] += 0.3 * normal(&st); /* biases not 0 */
        uint8_t tok[3 * 6];
        make_tokens(&st, tok, n * s.tokens, s.vocab);
        pass p;
        if (model_pass(&mdl, tok, n, true, false, &p) != TOOL_EXIT_OK) {
            model_free(&mdl);
            return TOOL_EXIT_FAILURE;
        }
        const size_t np = mdl.off[P_N];
        double *analytic = malloc(np * sizeof(double));
        if (!analytic) {
            model_free(&mdl);
            return TOOL_EXIT_FAILURE;
        }
        memcpy(analytic, mdl.grad, np * sizeof(double));
        double worst = 0, big = 0;
        for (size_t i = 0; i < np; i++)
            big = fabs(analytic[i]) > big ? fabs(analytic[i]) : big;
        const double h = 1e-5;
        for (size_t i = 0; i < np && rc == TOOL_EXIT_OK; i++) {
            const double keep = mdl.theta[i];
            pass up, down;
            mdl.theta[i] = keep + h;
            int a = model_pass(&mdl, tok, n, false, false, &up);
            mdl.theta[i] = keep - h;
            int b = model_pass(&mdl, tok, n, false, false, &down);
            mdl.theta[i] = keep;
            if (a != TOOL_EXIT_OK || b != TOOL_EXIT_OK) {
                rc = TOOL_EXIT_FAILURE;
                break;
            }
            double fd = (up.loss - down.loss) / (2 * h);
            double err = fabs(fd - analytic[i]) / big;
            worst = err > worst ? err : worst;
        }
        printf("gradcheck, scale %s: %zu parameters, largest |analytic - "
               "central difference| / max |gradient| = %.2e\n",
               which == 0 ? "1/sqrt(dk)" : "1", np, worst);
        if (!(worst <= 1e-6))
            rc = TOOL_EXIT_FAILURE;
        free(analytic);
        model_free(&mdl);
    }
    printf(rc == TOOL_EXIT_OK ? "gradcheck: ok\n" : "gradcheck: FAILED\n");
    return rc;
}

/* ---- The experiment --------------------------------------------------- */

/* The metrics of one run. */
enum {
    M_SD_CE,     /* sd of the validation CE over steps 0..EARLY */
    M_SD_STEP,   /* sd of its step-to-step changes */
    M_GRAD_NORM, /* mean gradient norm */
    M_CE_START,  /* validation CE at step 0 */
    M_CE_FINAL,  /* after the last step */
    M_ACC_FINAL, /* validation accuracy after the last step */
    M_ENT_START, /* mean attention row entropy at step 0 */
    M_ENT_END,   /* and after the last step */
    METRICS
};
static const char *const metric_csv[METRICS] = {
    "sd_val_ce_200", "sd_val_ce_step", "grad_norm",     "val_ce_start",
    "val_ce_final",  "val_acc_final",  "entropy_start", "entropy_end"};

static double sample_sd(const double *x, int64_t n, double *mean)
{
    double m = 0, s = 0;
    for (int64_t i = 0; i < n; i++)
        m += x[i];
    m /= (double)n;
    for (int64_t i = 0; i < n; i++)
        s += (x[i] - m) * (x[i] - m);
    *mean = m;
    return n > 1 ? sqrt(s / (double)(n - 1)) : 0;
}

typedef struct data {
    uint8_t *train, *valid; /* [N_TRAIN, T], [N_VALID, T] */
} data;

typedef struct progress {
    bool on;
    int run, runs;
    time_t started;
} progress;

static void show_progress(const progress *pr, int64_t step, int64_t steps,
                          const char *scale, int64_t seed, double ce)
{
    if (!pr->on)
        return;
    double done =
        ((double)pr->run + (double)step / (double)steps) / (double)pr->runs;
    fprintf(stderr,
            "\r  run %d/%d: scale %-10s seed %-3lld step %6lld/%lld  val CE "
            "%.3f  %3.0f%%  %lds ",
            pr->run + 1, pr->runs, scale, (long long)seed, (long long)step,
            (long long)steps, ce, 100 * done, (long)(time(NULL) - pr->started));
    fflush(stderr);
}

/* One training run; metrics into m[METRICS]. */
static int run_one(model *mdl, const data *dt, uint64_t seed, int64_t steps,
                   const char *scale_name, const progress *pr, double *m)
{
    const shape *s = &mdl->s;
    const int64_t t_len = s->tokens;
    model_reset(mdl, seed);
    uint64_t order_state = seed ^ UINT64_C(0x5DEECE66D);
    int order[N_TRAIN];
    for (int i = 0; i < N_TRAIN; i++)
        order[i] = i;
    int cursor = N_TRAIN; /* reshuffle at the first step */
    uint8_t *batch = malloc((size_t)(BATCH * t_len));
    double *early = malloc((EARLY + 1) * sizeof(double));
    if (!batch || !early) {
        free(batch), free(early);
        fprintf(stderr, "sdpa experiment: out of memory\n");
        return TOOL_EXIT_FAILURE;
    }
    int rc;
    pass p;
    rc = model_pass(mdl, dt->valid, N_VALID, false, true, &p);
    early[0] = p.loss;
    m[M_CE_START] = p.loss;
    m[M_ENT_START] = p.entropy;
    double norm_sum = 0;
    for (int64_t step = 1; step <= steps && rc == TOOL_EXIT_OK; step++) {
        if (cursor + BATCH > N_TRAIN) { /* a new epoch: Fisher-Yates */
            for (int i = N_TRAIN - 1; i > 0; i--) {
                int j = (int)(splitmix64(&order_state) % (uint64_t)(i + 1));
                int t = order[i];
                order[i] = order[j];
                order[j] = t;
            }
            cursor = 0;
        }
        for (int b = 0; b < BATCH; b++)
            memcpy(batch + b * t_len, dt->train + order[cursor + b] * t_len,
                   (size_t)t_len);
        cursor += BATCH;
        rc = model_pass(mdl, batch, BATCH, true, false, &p);
        if (rc != TOOL_EXIT_OK)
            break;
        norm_sum += adam_step(mdl, step);
        bool last = step == steps;
        if (step <= EARLY || step % EVAL_EVERY == 0 || last) {
            rc = model_pass(mdl, dt->valid, N_VALID, false, last, &p);
            if (step <= EARLY)
                early[step] = p.loss;
            if (step <= EARLY || step % EVAL_EVERY == 0)
                show_progress(pr, step, steps, scale_name, (int64_t)seed,
                              p.loss);
        }
    }
    if (rc == TOOL_EXIT_OK) {
        int64_t count = steps < EARLY ? steps + 1 : EARLY + 1;
        double mean;
        m[M_SD_CE] = sample_sd(early, count, &mean);
        for (int64_t i = 0; i + 1 < count; i++)
            early[i] = early[i + 1] - early[i];
        m[M_SD_STEP] = count > 1 ? sample_sd(early, count - 1, &mean) : 0;
        m[M_GRAD_NORM] = norm_sum / (double)steps;
        m[M_CE_FINAL] = p.loss;
        m[M_ACC_FINAL] = p.accuracy;
        m[M_ENT_END] = p.entropy;
    }
    free(batch);
    free(early);
    return rc;
}

int tool_cmd_experiment(int argc, char **argv)
{
    if (argc >= 2 &&
        (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        tool_usage_experiment(stdout);
        return TOOL_EXIT_OK;
    }
    if (argc < 2)
        return tool_bad_arg("experiment", "needs the experiment's name: "
                                          "scale (see sdpa experiment "
                                          "--help)");
    char shown[TOOL_ESCAPED];
    if (strcmp(argv[1], "scale") != 0)
        return tool_bad_arg(
            "experiment",
            "unknown experiment \"%s\" (the one there is: "
            "scale)",
            tool_escape(argv[1], SIZE_MAX, shown, sizeof shown));
    int64_t seeds = 10, steps = 2000, heads = 4, lag = 2;
    bool csv = false, check = false;
    tool_args a;
    tool_args_init(&a, "experiment scale", argc - 1, argv + 1);
    int status = TOOL_EXIT_OK;
    while (tool_args_next(&a, &status)) {
        if (tool_args_is(&a, "--help") || tool_args_is(&a, "-h")) {
            tool_usage_experiment(stdout);
            return TOOL_EXIT_OK;
        } else if (tool_args_is(&a, "--seeds")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_int(&a, 1, MAX_SEEDS, &seeds, &status))
                return status;
        } else if (tool_args_is(&a, "--steps")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_int(&a, 1, MAX_STEPS, &steps, &status))
                return status;
        } else if (tool_args_is(&a, "--heads")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_int(&a, 1, D_MODEL, &heads, &status))
                return status;
            if (D_MODEL % heads != 0)
                return tool_bad_arg("experiment scale",
                                    "--heads: %lld does not divide d_model "
                                    "%d",
                                    (long long)heads, D_MODEL);
        } else if (tool_args_is(&a, "--lag")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_int(&a, 1, TOKENS - 1, &lag, &status))
                return status;
        } else if (tool_args_is(&a, "--csv")) {
            if (!tool_args_flag(&a, &status))
                return status;
            csv = true;
        } else if (tool_args_is(&a, "--gradcheck")) {
            if (!tool_args_flag(&a, &status))
                return status;
            check = true;
        } else {
            return tool_args_unknown(&a);
        }
    }
    if (status != TOOL_EXIT_OK)
        return status;
    if (check)
        return gradcheck();

    const shape s = {VOCAB, TOKENS, D_MODEL, heads, lag};
    const int64_t dk = D_MODEL / heads;
    data dt;
    dt.train = malloc(N_TRAIN * TOKENS);
    dt.valid = malloc(N_VALID * TOKENS);
    model mdl;
    int rc = model_init(&mdl, s, N_VALID);
    if (!dt.train || !dt.valid)
        rc = TOOL_EXIT_FAILURE;
    if (rc == TOOL_EXIT_OK) {
        uint64_t st = DATA_SEED;
        make_tokens(&st, dt.train, N_TRAIN * TOKENS, VOCAB);
        make_tokens(&st, dt.valid, N_VALID * TOKENS, VOCAB);
    }
    const double scales[2] = {1.0 / sqrt((double)dk), 1.0};
    char names[2][32];
    snprintf(names[0], sizeof names[0], "1/sqrt(%lld)", (long long)dk);
    snprintf(names[1], sizeof names[1], "1");
    double *metrics = malloc((size_t)(2 * seeds * METRICS) * sizeof(double));
    if (!metrics)
        rc = TOOL_EXIT_FAILURE;
    progress pr = {isatty(2) == 1, 0, (int)(2 * seeds), time(NULL)};
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int64_t seed = 1; seed <= seeds && rc == TOOL_EXIT_OK; seed++)
        for (int k = 0; k < 2 && rc == TOOL_EXIT_OK; k++) {
            mdl.scale = scales[k];
            rc = run_one(&mdl, &dt, (uint64_t)seed, steps, names[k], &pr,
                         metrics + ((int64_t)k * seeds + seed - 1) * METRICS);
            pr.run++;
        }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (pr.on)
        fprintf(stderr, "\r%*s\r", 100, "");
    if (rc == TOOL_EXIT_OK) {
        double secs = (double)(t1.tv_sec - t0.tv_sec) +
                      1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        double mean[2][METRICS], sd[2][METRICS], col[MAX_SEEDS];
        for (int k = 0; k < 2; k++)
            for (int j = 0; j < METRICS; j++) {
                for (int64_t i = 0; i < seeds; i++)
                    col[i] = metrics[(k * seeds + i) * METRICS + j];
                sd[k][j] = sample_sd(col, seeds, &mean[k][j]);
            }
        if (csv) {
            printf("scale,dk,seeds,steps");
            for (int j = 0; j < METRICS; j++)
                printf(",%s_mean,%s_sd", metric_csv[j], metric_csv[j]);
            printf("\n");
            for (int k = 0; k < 2; k++) {
                printf("%.6f,%lld,%lld,%lld", scales[k], (long long)dk,
                       (long long)seeds, (long long)steps);
                for (int j = 0; j < METRICS; j++)
                    printf(",%.6f,%.6f", mean[k][j], sd[k][j]);
                printf("\n");
            }
        } else {
            printf("sdpa experiment scale: lag-%lld copy (target at t: the "
                   "token at t - %lld), T = %d,\n",
                   (long long)lag, (long long)lag, TOKENS);
            printf("vocabulary %d; embedding + sinusoidal positions -> one "
                   "causal attention layer\n(d_model %d, %lld heads of dk = "
                   "%lld) -> linear read-out; float64\n",
                   VOCAB, D_MODEL, (long long)heads, (long long)dk);
            printf("train %d / validation %d instances (fixed data seed), "
                   "batch %d, Adam lr 1e-3\n(0.9, 0.999), %lld steps, "
                   "seeds 1..%lld; mean +- sd over the seeds\n\n",
                   N_TRAIN, N_VALID, BATCH, (long long)steps, (long long)seeds);
            printf("%-24s", "");
            for (int k = 0; k < 2; k++) {
                char head[48];
                snprintf(head, sizeof head, "scale %s", names[k]);
                printf("  %-20s", head);
            }
            printf("\n");
            static const char *const label[METRICS] = {
                "sd val CE, steps 0-200", "sd of its step changes",
                "mean gradient norm",     "val CE at step 0",
                "final val CE",           "final val accuracy",
                "entropy at step 0",      "entropy at the end"};
            for (int j = 0; j < METRICS; j++) {
                printf("%-24s", label[j]);
                for (int k = 0; k < 2; k++) {
                    char cell[48];
                    snprintf(cell, sizeof cell, "%.4f +- %.4f", mean[k][j],
                             sd[k][j]);
                    printf("  %-20s", cell);
                }
                printf("\n");
            }
            printf("\nValidation (all %d instances) after each of the first "
                   "%d steps, every %d\nsteps and at the end; entropy: the "
                   "mean attention row entropy (nats) over\nevery head and "
                   "validation row (row t of a causal layer: at most "
                   "ln(t + 1)).\n%lld runs in %.1f s.\n",
                   N_VALID, EARLY, EVAL_EVERY, (long long)(2 * seeds), secs);
        }
    }
    free(metrics);
    free(dt.train);
    free(dt.valid);
    model_free(&mdl);
    return rc;
}
