/*
 * sdpa — the libsdpa command-line tool (man page: docs/man/sdpa.1).
 *
 *   sdpa demo        the two-token reference example of docs/SEMANTICS.md,
 *                    unmasked and causal
 *   sdpa stats       the scaling experiment of the blog post "How attention
 *                    works: the square root of d_k and the cost of n×n"
 *                    (Persian; docs/SEMANTICS.md, "Sources"), rerun with
 *                    the library's per-row diagnostics (stats.c)
 *   sdpa plan        flops, T×T bytes and libsdpa's workspace of a call,
 *                    and the path AUTO takes (plan.c); of a ragged call,
 *                    per sequence and in all (plan_ragged.c)
 *   sdpa experiment scale  the training experiment on the scale of the
 *                    textbook unit "32.2 Scaled dot-product attention"
 *                    (exercise F5), with sdpa_mha_forward / _backward
 *                    (experiment.c)
 *   sdpa --version   tool, header and library versions; the row kernel
 *                    (AUTO's pick, or what SDPA_KERNEL forces)
 *   sdpa --help      this list; sdpa help CMD or sdpa CMD --help: CMD's
 *
 * Subcommands live in one table (`commands` below): a new one is a function
 * with the signature of `command_fn` (declared in tool.h, in a file of its
 * own), its usage printer and one table row. Every subcommand answers
 * --help on stdout with status 0, and reports a bad argument in one line on
 * stderr with status 2 (tool.h).
 */
#include "experiment.h"
#include "tool.h"

#include <sdpa.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int (*command_fn)(int argc, char **argv);

struct command {
    const char *name;
    const char *summary;
    command_fn run;
    void (*usage)(FILE *f);
};

static void usage_demo(FILE *f);
static void usage_version(FILE *f);
static void usage_help(FILE *f);

static const struct command commands[] = {
    {"demo", "compute and print the two-token example (docs/SEMANTICS.md)",
     tool_cmd_demo, usage_demo},
    {"stats", "rerun \"How attention works\"'s scale experiment over seeds",
     tool_cmd_stats, tool_usage_stats},
    {"plan", "flops, T x T bytes, libsdpa's workspace and path of a call",
     tool_cmd_plan, tool_usage_plan},
    {"experiment", "train one attention layer with scale 1/sqrt(dk) and 1",
     tool_cmd_experiment, tool_usage_experiment},
    {"version", "print the versions and the row kernel in use",
     tool_cmd_version, usage_version},
    {"help", "print this help, or a command's (sdpa help CMD)", tool_cmd_help,
     usage_help},
};

#define NUM_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *f)
{
    fprintf(f,
            "usage: sdpa <command> [options]\n"
            "       sdpa --version | --help\n"
            "       sdpa <command> --help\n\n"
            "libsdpa %s: exact scaled dot-product attention on CPUs.\n\n"
            "commands:\n",
            sdpa_version_string());
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nExit status: 0 success, 1 failure, 2 bad arguments. "
               "Manual: man sdpa.\n");
}

static void usage_demo(FILE *f)
{
    fprintf(f, "usage: sdpa demo\n\n"
               "Computes the two-token example of docs/SEMANTICS.md (T = 2, "
               "dk = 2, dv = 3,\nscale 1/sqrt(dk)) in float32 and prints "
               "its weights and outputs, unmasked\nand causal "
               "(SDPA_CAUSAL_TOP_LEFT). Takes no options.\n");
}

static void usage_version(FILE *f)
{
    fprintf(f, "usage: sdpa version | sdpa --version\n\n"
               "Prints the tool, header and library versions and the row "
               "kernel a new\ncontext runs on this CPU (what AUTO picks, or "
               "what SDPA_KERNEL forces;\nexit status 1 if SDPA_KERNEL is "
               "refused). Takes no options.\n");
}

static void usage_help(FILE *f)
{
    fprintf(f, "usage: sdpa help [COMMAND]\n\n"
               "Without COMMAND, the list of commands; with one, its usage "
               "(as sdpa COMMAND --help).\n");
}

/* A command that takes no options: --help, or one line naming the first
 * argument. Returns -1 when there are no arguments. */
static int no_options(int argc, char **argv, const char *name,
                      void (*usage_fn)(FILE *f))
{
    if (argc < 2)
        return -1;
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage_fn(stdout);
        return TOOL_EXIT_OK;
    }
    char shown[TOOL_ESCAPED];
    return tool_bad_arg(name,
                        "unexpected argument \"%s\" (takes no "
                        "options; see sdpa %s --help)",
                        tool_escape(argv[1], SIZE_MAX, shown, sizeof shown),
                        name);
}

/* ------------------------------------------------------------------------ */
/* sdpa demo                                                                 */
/* ------------------------------------------------------------------------ */

enum { T = 2, DK = 2, DV = 3 };

/* Prints two row-major matrices side by side: A (rows × a_cols) and
 * O (rows × o_cols). */
static void print_pair(const float *a, int a_cols, const float *o, int o_cols,
                       int rows)
{
    printf("    %-20s %s\n", "weights A", "output O");
    for (int i = 0; i < rows; i++) {
        int width = 0;
        width += printf("    [");
        for (int j = 0; j < a_cols; j++)
            width += printf(j ? "  %.4f" : "%.4f", (double)a[i * a_cols + j]);
        width += printf("]");
        printf("%*s[", 25 - width, "");
        for (int j = 0; j < o_cols; j++)
            printf(j ? "  %.4f" : "%.4f", (double)o[i * o_cols + j]);
        printf("]\n");
    }
}

static int run_example(sdpa_ctx *ctx, int causal, float *q, float *k, float *v,
                       float *weights, float *out)
{
    sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
    args.dtype = SDPA_FLOAT32;
    args.causal = causal;
    args.q = sdpa_tensor_bhtd(q, 1, 1, T, DK);
    args.k = sdpa_tensor_bhtd(k, 1, 1, T, DK);
    args.v = sdpa_tensor_bhtd(v, 1, 1, T, DV);
    args.out = sdpa_tensor_bhtd(out, 1, 1, T, DV);
    args.weights = sdpa_tensor_bhtd(weights, 1, 1, T, T);
    int status = sdpa_forward(ctx, &args);
    if (status != SDPA_OK)
        fprintf(stderr, "sdpa: sdpa_forward failed: %s (%s)\n",
                sdpa_status_string(status), sdpa_ctx_last_error(ctx));
    return status;
}

int tool_cmd_demo(int argc, char **argv)
{
    int early = no_options(argc, argv, "demo", usage_demo);
    if (early >= 0)
        return early;
    float q[T * DK] = {1, 0, 0, 1};
    float k[T * DK] = {1, 1, 2, 0};
    float v[T * DV] = {1, 0, 0, 0, 1, 0};
    float weights[T * T], out[T * DV];

    sdpa_ctx *ctx = NULL;
    int status = sdpa_ctx_create(&ctx);
    if (status != SDPA_OK) {
        fprintf(stderr, "sdpa: sdpa_ctx_create failed: %s\n",
                sdpa_status_string(status));
        return 1;
    }

    printf("libsdpa %s: the two-token example of docs/SEMANTICS.md\n\n",
           sdpa_version_string());
    printf("  Q = [[1, 0], [0, 1]]   K = [[1, 1], [2, 0]]   "
           "V = [[1, 0, 0], [0, 1, 0]]\n");
    printf("  dk = %d, dv = %d, T = %d, scale = 1/sqrt(dk) = %.4f\n", DK, DV, T,
           0.70710678);
    printf("  O = softmax(Q K^T * scale + mask) V\n\n");

    printf("  unmasked (SDPA_CAUSAL_NONE):\n");
    status = run_example(ctx, SDPA_CAUSAL_NONE, q, k, v, weights, out);
    if (status == SDPA_OK) {
        print_pair(weights, T, out, DV, T);
        printf("\n  causal (SDPA_CAUSAL_TOP_LEFT, i.e. mask M = [[0, 1], "
               "[0, 0]]):\n");
        status = run_example(ctx, SDPA_CAUSAL_TOP_LEFT, q, k, v, weights, out);
    }
    if (status == SDPA_OK) {
        print_pair(weights, T, out, DV, T);
        printf("\n  Every row of A sums to 1; forbidden keys get weight "
               "exactly 0.\n");
    }
    sdpa_ctx_destroy(ctx);
    return status == SDPA_OK ? 0 : 1;
}

/* ------------------------------------------------------------------------ */
/* sdpa version / help                                                       */
/* ------------------------------------------------------------------------ */

int tool_cmd_version(int argc, char **argv)
{
    int early = no_options(argc, argv, "version", usage_version);
    if (early >= 0)
        return early;
    printf("sdpa %s\n", SDPA_VERSION_STRING);
    printf("header  %s (%d)\n", SDPA_VERSION_STRING, SDPA_VERSION_NUMBER);
    printf("library %s (%u)\n", sdpa_version_string(), sdpa_version_number());
    /* The row kernel a new context runs here — what AUTO picks, or what the
     * SDPA_KERNEL environment variable forces: worth a line in a bug
     * report, as speed and the last bits of results depend on it. */
    const char *forced = getenv("SDPA_KERNEL");
    sdpa_ctx *ctx = NULL;
    int64_t kernel = -1;
    int status = sdpa_ctx_create(&ctx);
    if (status == SDPA_OK)
        status = sdpa_ctx_get_int(ctx, SDPA_OPT_KERNEL, &kernel);
    sdpa_ctx_destroy(ctx);
    if (status != SDPA_OK) {
        printf("row kernel: none, SDPA_KERNEL=%s is refused: %s\n",
               forced ? forced : "", sdpa_status_string(status));
        return 1;
    }
    printf("row kernel %s", kernel == SDPA_KERNEL_AVX512     ? "avx512"
                            : kernel == SDPA_KERNEL_AVX2     ? "avx2"
                            : kernel == SDPA_KERNEL_PORTABLE ? "portable"
                                                             : "other");
    if (forced && *forced)
        printf(" (SDPA_KERNEL=%s)", forced);
    printf("\n");
    return 0;
}

int tool_cmd_help(int argc, char **argv)
{
    if (argc < 2) {
        usage(stdout);
        return TOOL_EXIT_OK;
    }
    char shown[TOOL_ESCAPED];
    if (argc > 2)
        return tool_bad_arg(
            "help",
            "unexpected argument \"%s\" (sdpa help "
            "takes one command name)",
            tool_escape(argv[2], SIZE_MAX, shown, sizeof shown));
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage_help(stdout);
        return TOOL_EXIT_OK;
    }
    for (size_t i = 0; i < NUM_COMMANDS; i++)
        if (strcmp(argv[1], commands[i].name) == 0) {
            commands[i].usage(stdout);
            return TOOL_EXIT_OK;
        }
    return tool_bad_arg("help",
                        "unknown command \"%s\" (sdpa --help lists "
                        "them)",
                        tool_escape(argv[1], SIZE_MAX, shown, sizeof shown));
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return TOOL_EXIT_USAGE;
    }
    const char *name = argv[1];
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0)
        name = "version";
    else if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0)
        name = "help";

    for (size_t i = 0; i < NUM_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);

    char shown[TOOL_ESCAPED];
    fprintf(stderr,
            "sdpa: unknown command \"%s\" (sdpa --help lists the commands)\n",
            tool_escape(argv[1], SIZE_MAX, shown, sizeof shown));
    return TOOL_EXIT_USAGE;
}
