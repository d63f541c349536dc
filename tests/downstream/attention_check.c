/*
 * A downstream program: it sees only the installed sdpa.h and libsdpa, and
 * is built three ways by tests/downstream (pkg-config shared, pkg-config
 * static, CMake find_package). It runs the two-token example of SPEC.md,
 * unmasked and causal, in float32 and float64, checks every number to 1e-4,
 * and checks that header, library and (if given) package versions agree.
 *
 *   attention_check              run the checks; exit 0 when all pass
 *   attention_check --version    print "header X runtime Y number N"
 *
 * Compile with -DSDPA_EXPECTED_VERSION="\"1.0.0\"" to also compare the
 * packaging's version (pkg-config --modversion, CMake sdpa_VERSION).
 */
#include <sdpa.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { T = 2, DK = 2, DV = 3 };

static int failures;

static void check(const char *what, int i, double got, double want)
{
    if (!(fabs(got - want) <= 1e-4)) {
        printf("FAIL %s[%d] = %.6f, expected %.4f\n", what, i, got, want);
        failures++;
    }
}

static void run_float(sdpa_ctx *ctx, int causal, const double *want_a,
                      const double *want_o)
{
    float q[T * DK] = {1, 0, 0, 1};
    float k[T * DK] = {1, 1, 2, 0};
    float v[T * DV] = {1, 0, 0, 0, 1, 0};
    float a[T * T], o[T * DV];

    sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
    args.dtype = SDPA_FLOAT32;
    args.causal = causal;
    args.q = sdpa_tensor_bhtd(q, 1, 1, T, DK);
    args.k = sdpa_tensor_bhtd(k, 1, 1, T, DK);
    args.v = sdpa_tensor_bhtd(v, 1, 1, T, DV);
    args.out = sdpa_tensor_bhtd(o, 1, 1, T, DV);
    args.weights = sdpa_tensor_bhtd(a, 1, 1, T, T);
    int status = sdpa_forward(ctx, &args);
    if (status != SDPA_OK) {
        printf("FAIL float32 causal=%d: %s (%s)\n", causal,
               sdpa_status_string(status), sdpa_ctx_last_error(ctx));
        failures++;
        return;
    }
    for (int i = 0; i < T * T; i++)
        check(causal ? "float32 causal A" : "float32 A", i, (double)a[i],
              want_a[i]);
    for (int i = 0; i < T * DV; i++)
        check(causal ? "float32 causal O" : "float32 O", i, (double)o[i],
              want_o[i]);
}

static void run_double(sdpa_ctx *ctx, int causal, const double *want_a,
                       const double *want_o)
{
    double q[T * DK] = {1, 0, 0, 1};
    double k[T * DK] = {1, 1, 2, 0};
    double v[T * DV] = {1, 0, 0, 0, 1, 0};
    double a[T * T], o[T * DV];

    sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
    args.dtype = SDPA_FLOAT64;
    args.causal = causal;
    args.q = sdpa_tensor_bhtd(q, 1, 1, T, DK);
    args.k = sdpa_tensor_bhtd(k, 1, 1, T, DK);
    args.v = sdpa_tensor_bhtd(v, 1, 1, T, DV);
    args.out = sdpa_tensor_bhtd(o, 1, 1, T, DV);
    args.weights = sdpa_tensor_bhtd(a, 1, 1, T, T);
    int status = sdpa_forward(ctx, &args);
    if (status != SDPA_OK) {
        printf("FAIL float64 causal=%d: %s (%s)\n", causal,
               sdpa_status_string(status), sdpa_ctx_last_error(ctx));
        failures++;
        return;
    }
    for (int i = 0; i < T * T; i++)
        check(causal ? "float64 causal A" : "float64 A", i, a[i], want_a[i]);
    for (int i = 0; i < T * DV; i++)
        check(causal ? "float64 causal O" : "float64 O", i, o[i], want_o[i]);
}

static void check_versions(void)
{
    unsigned header_number = SDPA_VERSION_NUMBER;
    if (strcmp(sdpa_version_string(), SDPA_VERSION_STRING) != 0 ||
        sdpa_version_number() != header_number) {
        printf("FAIL version: header %s (%u), library %s (%u)\n",
               SDPA_VERSION_STRING, header_number, sdpa_version_string(),
               sdpa_version_number());
        failures++;
    }
#ifdef SDPA_EXPECTED_VERSION
    if (strcmp(SDPA_EXPECTED_VERSION, SDPA_VERSION_STRING) != 0) {
        printf("FAIL version: package says %s, header %s\n",
               SDPA_EXPECTED_VERSION, SDPA_VERSION_STRING);
        failures++;
    }
#endif
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "--version") == 0) {
        printf("header %s runtime %s number %u\n", SDPA_VERSION_STRING,
               sdpa_version_string(), sdpa_version_number());
        return 0;
    }

    static const double a_full[T * T] = {0.3302, 0.6698, 0.6698, 0.3302};
    static const double o_full[T * DV] = {0.3302, 0.6698, 0, 0.6698, 0.3302, 0};
    static const double a_causal[T * T] = {1, 0, 0.6698, 0.3302};
    static const double o_causal[T * DV] = {1, 0, 0, 0.6698, 0.3302, 0};

    check_versions();

    sdpa_ctx *ctx = NULL;
    int status = sdpa_ctx_create(&ctx);
    if (status != SDPA_OK) {
        printf("FAIL sdpa_ctx_create: %s\n", sdpa_status_string(status));
        return 1;
    }
    run_float(ctx, SDPA_CAUSAL_NONE, a_full, o_full);
    run_float(ctx, SDPA_CAUSAL_TOP_LEFT, a_causal, o_causal);
    run_double(ctx, SDPA_CAUSAL_NONE, a_full, o_full);
    run_double(ctx, SDPA_CAUSAL_TOP_LEFT, a_causal, o_causal);
    sdpa_ctx_destroy(ctx);

    if (failures) {
        printf("%d check(s) failed\n", failures);
        return 1;
    }
    printf("libsdpa %s: two-token example OK (float32, float64; unmasked, "
           "causal)\n",
           sdpa_version_string());
    return 0;
}
