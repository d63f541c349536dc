/*
 * A downstream program: it sees only the installed sdpa.h and libsdpa, and
 * is built three ways by tests/downstream (pkg-config shared, pkg-config
 * static, CMake find_package). It runs the two-token example of
 * docs/SEMANTICS.md ("Reference values"), unmasked and causal, in float32
 * and float64, checks every number to 1e-4, and checks that header, library
 * and (if given) package versions agree.
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

/* One run in either dtype: the inputs are written in double and converted,
 * the outputs read back as double. */
static void run(sdpa_ctx *ctx, int dtype, int causal, const double *want_a,
                const double *want_o)
{
    static const double q0[T * DK] = {1, 0, 0, 1};
    static const double k0[T * DK] = {1, 1, 2, 0};
    static const double v0[T * DV] = {1, 0, 0, 0, 1, 0};
    const int f32 = dtype == SDPA_FLOAT32;
    float qf[T * DK], kf[T * DK], vf[T * DV], af[T * T], of[T * DV];
    double qd[T * DK], kd[T * DK], vd[T * DV], ad[T * T], od[T * DV];
    for (int i = 0; i < T * DK; i++) {
        qf[i] = (float)(qd[i] = q0[i]);
        kf[i] = (float)(kd[i] = k0[i]);
    }
    for (int i = 0; i < T * DV; i++)
        vf[i] = (float)(vd[i] = v0[i]);

    sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
    args.dtype = dtype;
    args.causal = causal;
    args.q = sdpa_tensor_bhtd(f32 ? (void *)qf : qd, 1, 1, T, DK);
    args.k = sdpa_tensor_bhtd(f32 ? (void *)kf : kd, 1, 1, T, DK);
    args.v = sdpa_tensor_bhtd(f32 ? (void *)vf : vd, 1, 1, T, DV);
    args.out = sdpa_tensor_bhtd(f32 ? (void *)of : od, 1, 1, T, DV);
    args.weights = sdpa_tensor_bhtd(f32 ? (void *)af : ad, 1, 1, T, T);
    const char *name = f32 ? "float32" : "float64";
    int status = sdpa_forward(ctx, &args);
    if (status != SDPA_OK) {
        printf("FAIL %s causal=%d: %s (%s)\n", name, causal,
               sdpa_status_string(status), sdpa_ctx_last_error(ctx));
        failures++;
        return;
    }
    char what[32];
    snprintf(what, sizeof what, "%s%s A", name, causal ? " causal" : "");
    for (int i = 0; i < T * T; i++)
        check(what, i, f32 ? (double)af[i] : ad[i], want_a[i]);
    snprintf(what, sizeof what, "%s%s O", name, causal ? " causal" : "");
    for (int i = 0; i < T * DV; i++)
        check(what, i, f32 ? (double)of[i] : od[i], want_o[i]);
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
    run(ctx, SDPA_FLOAT32, SDPA_CAUSAL_NONE, a_full, o_full);
    run(ctx, SDPA_FLOAT32, SDPA_CAUSAL_TOP_LEFT, a_causal, o_causal);
    run(ctx, SDPA_FLOAT64, SDPA_CAUSAL_NONE, a_full, o_full);
    run(ctx, SDPA_FLOAT64, SDPA_CAUSAL_TOP_LEFT, a_causal, o_causal);
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
