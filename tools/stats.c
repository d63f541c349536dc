/*
 * sdpa stats — the experiment on the 1/sqrt(dk) scale of the blog post
 * "چطور توجه کار می‌کند: جذر d_k و هزینه‌ی n×n"
 * ("How attention works: the square root of d_k and the cost of n×n", Persian,
 * read 27 September 2026), rerun with the library (docs/TOOL.md,
 * docs/man/sdpa.1).
 *
 * For each seed s = 1..S and each dk: Q and K, n × dk, i.i.d. standard
 * normal from SplitMix64 seeded with s (Q's entries first, row by row, then
 * K's) through Box–Muller; V is zeros (dv = 1: the output is irrelevant).
 * One float64 sdpa_forward per (seed, dk, scaling), scale 0 (1/sqrt(dk)) or
 * 1 (unscaled), asking for the per-row max_weight and entropy outputs. Per
 * seed: the largest weight of the n × n matrix (the largest row max) and the
 * mean row entropy. Per (dk, scaling): their mean and sample standard
 * deviation over the seeds, the entropy's share of ln n, and the RMS logit
 * sqrt(mean of (scale · <q_i, k_j>)^2) over all pairs and seeds, computed
 * here from Q and K.
 */
#include "tool.h"

#include <sdpa.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MAX_DKS 16
#define MAX_N 4096
#define MAX_DK 65536
#define MAX_SEEDS 10000000
#define MAX_ELEMS (INT64_C(1) << 24) /* n · dk of Q (and of K) */
#define CHECK_TOL 1e-10

void tool_usage_stats(FILE *f)
{
    fprintf(
        f,
        "usage: sdpa stats [--n N] [--dk D1,D2,...] [--seeds S]\n"
        "                  [--scaled | --unscaled | --both] [--csv] "
        "[--check]\n\n"
        "Reruns the experiment on the 1/sqrt(dk) scale of the blog post "
        "\"How\nattention works: the square root of d_k and the cost of "
        "n\u00d7n\" (Persian;\ndocs/TOOL.md) with libsdpa: for each seed 1..S, "
        "Q and K (N x dk) i.i.d.\nstandard normal (SplitMix64 seeded with "
        "the seed number, Box-Muller), one\nfloat64 sdpa_forward per (seed, "
        "dk, scaling) asking for the library's\nper-row max_weight and "
        "entropy outputs.\nPer (dk, scaling) "
        "it prints the mean and sample standard deviation over the\nseeds "
        "of the largest weight of the N x N matrix and of the mean row "
        "entropy\n(nats), the entropy's share of ln N, and the RMS logit.\n\n"
        "  --n N          queries and keys per seed, 2..%d (default 8)\n"
        "  --dk LIST      comma-separated key widths, 1..%d (default "
        "16,64,256)\n"
        "  --seeds S      number of seeds, 1..%d (default 1000)\n"
        "  --scaled       scale 1/sqrt(dk) only (scale = 0)\n"
        "  --unscaled     scale 1 only\n"
        "  --both         both (default)\n"
        "  --csv          print CSV: dk,scaled,seeds,max_weight_mean,"
        "max_weight_sd,\n"
        "                 entropy_mean,entropy_sd,entropy_share,rms_logit\n"
        "  --check        also ask for the weights and check the diagnostics "
        "against\n"
        "                 max_j p_ij and -sum_j p_ij ln p_ij computed from "
        "them\n"
        "                 (exit status 1 on a difference above %g)\n"
        "  --help         this text\n",
        MAX_N, MAX_DK, MAX_SEEDS, CHECK_TOL);
}

/* SplitMix64 (Steele, Lea and Flood, 2014): the state advances by the
 * golden-ratio increment and each output is the state, mixed. */
static uint64_t splitmix64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* count standard normals: Box–Muller on pairs of uniforms u1 in (0, 1],
 * u2 in [0, 1), 53 bits each; both of a pair are used, in order. */
static void fill_normal(uint64_t *state, double *x, int64_t count)
{
    const double two_pi = 6.283185307179586476925286766559;
    for (int64_t i = 0; i < count; i += 2) {
        double u1 = (double)((splitmix64(state) >> 11) + 1) * 0x1p-53;
        double u2 = (double)(splitmix64(state) >> 11) * 0x1p-53;
        double r = sqrt(-2.0 * log(u1));
        x[i] = r * cos(two_pi * u2);
        if (i + 1 < count)
            x[i + 1] = r * sin(two_pi * u2);
    }
}

/* Welford's running mean and variance. */
typedef struct running {
    int64_t count;
    double mean, m2;
} running;

static void running_add(running *r, double x)
{
    r->count++;
    double delta = x - r->mean;
    r->mean += delta / (double)r->count;
    r->m2 += delta * (x - r->mean);
}

static double running_sd(const running *r)
{
    return r->count > 1 ? sqrt(r->m2 / (double)(r->count - 1)) : 0.0;
}

typedef struct cell {
    running max_weight, entropy;
    double sum_mean_square; /* Σ over seeds of the mean squared logit */
} cell;

typedef struct stats_opts {
    int64_t n, seeds;
    int64_t dks[MAX_DKS];
    int num_dks;
    bool scaled, unscaled, csv, check;
} stats_opts;

static int parse(int argc, char **argv, stats_opts *o)
{
    tool_args a;
    tool_args_init(&a, "stats", argc, argv);
    int status = TOOL_EXIT_OK;
    while (tool_args_next(&a, &status)) {
        if (tool_args_is(&a, "--help") || tool_args_is(&a, "-h")) {
            tool_usage_stats(stdout);
            return -1;
        } else if (tool_args_is(&a, "--n")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_int(&a, 2, MAX_N, &o->n, &status))
                return status;
        } else if (tool_args_is(&a, "--seeds")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_int(&a, 1, MAX_SEEDS, &o->seeds, &status))
                return status;
        } else if (tool_args_is(&a, "--dk")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_int_list(&a, 1, MAX_DK, o->dks, MAX_DKS,
                                     &o->num_dks, &status))
                return status;
        } else if (tool_args_is(&a, "--scaled") ||
                   tool_args_is(&a, "--unscaled") ||
                   tool_args_is(&a, "--both")) {
            if (!tool_args_flag(&a, &status))
                return status;
            o->scaled = !tool_args_is(&a, "--unscaled");
            o->unscaled = !tool_args_is(&a, "--scaled");
        } else if (tool_args_is(&a, "--csv")) {
            if (!tool_args_flag(&a, &status))
                return status;
            o->csv = true;
        } else if (tool_args_is(&a, "--check")) {
            if (!tool_args_flag(&a, &status))
                return status;
            o->check = true;
        } else {
            return tool_args_unknown(&a);
        }
    }
    if (status != TOOL_EXIT_OK)
        return status;
    for (int i = 0; i < o->num_dks; i++)
        if (o->n * o->dks[i] > MAX_ELEMS)
            return tool_bad_arg("stats",
                                "--n %lld with --dk %lld: Q would hold "
                                "%lld values, above the limit %lld",
                                (long long)o->n, (long long)o->dks[i],
                                (long long)(o->n * o->dks[i]),
                                (long long)MAX_ELEMS);
    return TOOL_EXIT_OK;
}

typedef struct buffers {
    double *q, *k, *v, *out, *max_weight, *entropy, *weights;
} buffers;

/* One library call; the per-seed statistics into *seed_max, *seed_entropy.
 * With o->check, the diagnostics are compared with the weights; the largest
 * difference goes to *worst. */
static int run_one(sdpa_ctx *ctx, const stats_opts *o, buffers *b, int64_t dk,
                   bool scaled, int64_t seed, double *seed_max,
                   double *seed_entropy, double *worst)
{
    const int64_t n = o->n;
    for (int64_t i = 0; i < n; i++)
        b->max_weight[i] = b->entropy[i] = NAN;
    sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
    args.dtype = SDPA_FLOAT64;
    args.scale = scaled ? 0.0 : 1.0;
    args.q = sdpa_tensor_bhtd(b->q, 1, 1, n, dk);
    args.k = sdpa_tensor_bhtd(b->k, 1, 1, n, dk);
    args.v = sdpa_tensor_bhtd(b->v, 1, 1, n, 1);
    args.out = sdpa_tensor_bhtd(b->out, 1, 1, n, 1);
    args.max_weight = sdpa_tensor_bhtd(b->max_weight, 1, 1, n, 1);
    args.entropy = sdpa_tensor_bhtd(b->entropy, 1, 1, n, 1);
    if (o->check)
        args.weights = sdpa_tensor_bhtd(b->weights, 1, 1, n, n);
    int status = sdpa_forward(ctx, &args);
    if (status != SDPA_OK) {
        fprintf(stderr, "sdpa stats: sdpa_forward failed: %s (%s)\n",
                sdpa_status_string(status), sdpa_ctx_last_error(ctx));
        return TOOL_EXIT_FAILURE;
    }
    double top = 0, sum_entropy = 0;
    for (int64_t i = 0; i < n; i++) {
        double mw = b->max_weight[i], h = b->entropy[i];
        if (isnan(mw) || isnan(h)) {
            fprintf(stderr,
                    "sdpa stats: libsdpa %s left the %s output unwritten "
                    "(a library without the 1.1 per-row diagnostics?)\n",
                    sdpa_version_string(),
                    isnan(mw) ? "max_weight" : "entropy");
            return TOOL_EXIT_FAILURE;
        }
        if (mw > top)
            top = mw;
        sum_entropy += h;
        if (!o->check)
            continue;
        const double *w = b->weights + i * n;
        double ref_max = 0, ref_h = 0;
        for (int64_t j = 0; j < n; j++) {
            if (w[j] > ref_max)
                ref_max = w[j];
            if (w[j] > 0)
                ref_h -= w[j] * log(w[j]);
        }
        double d = fmax(fabs(mw - ref_max), fabs(h - ref_h));
        if (!(d <= CHECK_TOL)) {
            fprintf(stderr,
                    "sdpa stats: --check: seed %lld, dk %lld, %s, row %lld: "
                    "max_weight %.17g and entropy %.17g, but the weights give "
                    "%.17g and %.17g\n",
                    (long long)seed, (long long)dk,
                    scaled ? "scaled" : "unscaled", (long long)i, mw, h,
                    ref_max, ref_h);
            return TOOL_EXIT_FAILURE;
        }
        if (d > *worst)
            *worst = d;
    }
    *seed_max = top;
    *seed_entropy = sum_entropy / (double)n;
    return TOOL_EXIT_OK;
}

/* The mean of the squared unscaled logits <q_i, k_j> over the n × n pairs. */
static double mean_square_logit(const double *q, const double *k, int64_t n,
                                int64_t dk)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++) {
            double s = 0;
            for (int64_t r = 0; r < dk; r++)
                s += q[i * dk + r] * k[j * dk + r];
            sum += s * s;
        }
    return sum / (double)(n * n);
}

static void print_table(const stats_opts *o, const cell *cells, double worst)
{
    const double ln_n = log((double)o->n);
    if (o->csv) {
        printf("dk,scaled,seeds,max_weight_mean,max_weight_sd,entropy_mean,"
               "entropy_sd,entropy_share,rms_logit\n");
    } else {
        printf("sdpa stats: n = %lld queries and keys, Q and K i.i.d. "
               "N(0, 1), seeds 1..%lld, float64\n",
               (long long)o->n, (long long)o->seeds);
        printf("per seed: the largest of the %lld x %lld weights and the "
               "mean row entropy;\n",
               (long long)o->n, (long long)o->n);
        printf("mean +- sample sd over the seeds; ln %lld = %.4f nats\n\n",
               (long long)o->n, ln_n);
        printf("    dk  scaled  max weight         entropy (nats)   "
               "share of ln n  RMS logit\n");
    }
    for (int d = 0; d < o->num_dks; d++)
        for (int s = 0; s < 2; s++) {
            if ((s == 0 && !o->unscaled) || (s == 1 && !o->scaled))
                continue;
            const cell *c = &cells[2 * d + s];
            double rms = sqrt(c->sum_mean_square / (double)o->seeds);
            double share = c->entropy.mean / ln_n;
            if (o->csv)
                printf("%lld,%d,%lld,%.6f,%.6f,%.6f,%.6f,%.6f,%.6f\n",
                       (long long)o->dks[d], s, (long long)o->seeds,
                       c->max_weight.mean, running_sd(&c->max_weight),
                       c->entropy.mean, running_sd(&c->entropy), share, rms);
            else
                printf("  %4lld  %-6s  %.4f +- %.4f   %.3f +- %.3f   "
                       "%5.1f %%       %6.3f\n",
                       (long long)o->dks[d], s ? "yes" : "no",
                       c->max_weight.mean, running_sd(&c->max_weight),
                       c->entropy.mean, running_sd(&c->entropy), 100 * share,
                       rms);
        }
    if (o->csv)
        return;
    printf("\nRMS logit: sqrt of the mean of (scale * <q_i, k_j>)^2 over all "
           "pairs and seeds\n(theory: sqrt(dk) unscaled, 1 scaled).\n");
    if (o->check)
        printf("--check: the library's max_weight and entropy match the "
               "weights to %.1e.\n",
               worst);
}

int tool_cmd_stats(int argc, char **argv)
{
    stats_opts o = {.n = 8,
                    .seeds = 1000,
                    .dks = {16, 64, 256},
                    .num_dks = 3,
                    .scaled = true,
                    .unscaled = true};
    int status = parse(argc, argv, &o);
    if (status != TOOL_EXIT_OK)
        return status < 0 ? TOOL_EXIT_OK : status;

    int64_t dk_max = 0;
    for (int d = 0; d < o.num_dks; d++)
        dk_max = o.dks[d] > dk_max ? o.dks[d] : dk_max;
    const size_t n = (size_t)o.n, qk = n * (size_t)dk_max;
    buffers b = {0};
    /* Q and K in one block so that Box–Muller fills them in order. */
    b.q = malloc(2 * qk * sizeof(double));
    b.v = calloc(n, sizeof(double));
    b.out = malloc(n * sizeof(double));
    b.max_weight = malloc(n * sizeof(double));
    b.entropy = malloc(n * sizeof(double));
    b.weights = o.check ? malloc(n * n * sizeof(double)) : NULL;
    cell *cells = calloc((size_t)o.num_dks * 2, sizeof(cell));
    sdpa_ctx *ctx = NULL;
    if (!b.q || !b.v || !b.out || !b.max_weight || !b.entropy ||
        (o.check && !b.weights) || !cells) {
        fprintf(stderr, "sdpa stats: out of memory\n");
        status = TOOL_EXIT_FAILURE;
        goto done;
    }
    int ctx_status = sdpa_ctx_create(&ctx);
    if (ctx_status != SDPA_OK) {
        fprintf(stderr, "sdpa stats: sdpa_ctx_create failed: %s\n",
                sdpa_status_string(ctx_status));
        status = TOOL_EXIT_FAILURE;
        goto done;
    }

    double worst = 0;
    for (int64_t seed = 1; seed <= o.seeds && status == TOOL_EXIT_OK; seed++) {
        for (int d = 0; d < o.num_dks && status == TOOL_EXIT_OK; d++) {
            const int64_t dk = o.dks[d];
            uint64_t state = (uint64_t)seed;
            b.k = b.q + n * (size_t)dk;
            fill_normal(&state, b.q, 2 * o.n * dk);
            double ms = mean_square_logit(b.q, b.k, o.n, dk);
            for (int s = 0; s < 2 && status == TOOL_EXIT_OK; s++) {
                if ((s == 0 && !o.unscaled) || (s == 1 && !o.scaled))
                    continue;
                double seed_max, seed_entropy;
                status = run_one(ctx, &o, &b, dk, s == 1, seed, &seed_max,
                                 &seed_entropy, &worst);
                if (status != TOOL_EXIT_OK)
                    break;
                cell *c = &cells[2 * d + s];
                /* the library's default scale, 1/sqrt(dk), squared */
                double scale = s ? 1.0 / sqrt((double)dk) : 1.0;
                running_add(&c->max_weight, seed_max);
                running_add(&c->entropy, seed_entropy);
                c->sum_mean_square += ms * scale * scale;
            }
        }
    }
    if (status == TOOL_EXIT_OK)
        print_table(&o, cells, worst);

done:
    sdpa_ctx_destroy(ctx);
    free(cells);
    free(b.q);
    free(b.v);
    free(b.out);
    free(b.max_weight);
    free(b.entropy);
    free(b.weights);
    return status;
}
