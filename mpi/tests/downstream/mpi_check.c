/*
 * A downstream MPI program: it sees only the installed sdpa_mpi.h and
 * sdpa.h and the two shared libraries, and is built by
 * mpi/tests/downstream/run.sh as a user would build it (mpicc with
 * pkg-config sdpa-mpi, cc with pkg-config alone, a CMake project with
 * find_package(sdpa_mpi 1 CONFIG REQUIRED)). Run it under mpirun; every
 * rank checks its own results and the exit status is 0 only if all passed:
 *
 *  - sdpa_mpi_decode on the two-token example of docs/SEMANTICS.md
 *    ("Reference values"), the query rows replicated and the two keys
 *    split over the ranks (1 or 2 ranks), unmasked and causal, float32 and
 *    float64, against the published values to 1e-4;
 *  - sdpa_mpi_decode with GQA, bottom-right causality and uneven key
 *    shards, and sdpa_mpi_prefill in the balanced layout, causal, against
 *    single-process sdpa_forward of the whole problem (float64, 1e-12:
 *    they differ by the merge's rounding only);
 *  - the versions: header, library and (if given) package agree.
 *
 * Compile with -DSDPA_MPI_EXPECTED_VERSION="\"1.0.0\"" to compare the
 * packaging's version (pkg-config --modversion sdpa-mpi, sdpa_mpi_VERSION).
 */
#include <sdpa_mpi.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int rank, ranks, failures;
static char version[32]; /* sdpa_mpi.h's, "1.0.0" */

static void check(const char *what, size_t i, double got, double want,
                  double tol)
{
    if (!(fabs(got - want) <= tol)) {
        printf("FAIL rank %d: %s[%zu] = %.17g, expected %.17g (tolerance "
               "%g)\n",
               rank, what, i, got, want, tol);
        failures++;
    }
}

static void check_status(const char *what, int status)
{
    if (status != SDPA_OK) {
        printf("FAIL rank %d: %s: %s (%s)\n", rank, what,
               sdpa_status_string(status), sdpa_mpi_last_error());
        failures++;
    }
}

/* Element i of tensor `which` of the whole problem: the same on every rank,
 * so that each can build the reference without communication. */
static double value(unsigned which, size_t i)
{
    uint64_t z = (uint64_t)which * 0x9E3779B97F4A7C15ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0;
}

/* The two-token example: queries replicated, rank r holds keys [r·2/P,
 * (r+1)·2/P); causal is top-left over the whole problem, so row 0 sees
 * key 0 only, wherever key 1 lives. */
static void two_tokens(sdpa_ctx *ctx, int dtype, int causal, const double *want)
{
    enum { T = 2, DK = 2, DV = 3 };
    static const double q0[T * DK] = {1, 0, 0, 1};
    static const double k0[T * DK] = {1, 1, 2, 0};
    static const double v0[T * DV] = {1, 0, 0, 0, 1, 0};
    const int f32 = dtype == SDPA_FLOAT32;
    float qf[T * DK], kf[T * DK], vf[T * DV], of[T * DV];
    double qd[T * DK], kd[T * DK], vd[T * DV], od[T * DV];
    for (int i = 0; i < T * DK; i++) {
        qf[i] = (float)(qd[i] = q0[i]);
        kf[i] = (float)(kd[i] = k0[i]);
    }
    for (int i = 0; i < T * DV; i++)
        vf[i] = (float)(vd[i] = v0[i]);
    const int64_t first = T * rank / ranks, keys = T * (rank + 1) / ranks;
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    a.causal = causal;
    a.q = sdpa_tensor_bhtd(f32 ? (void *)qf : qd, 1, 1, T, DK);
    a.k = sdpa_tensor_bhtd(f32 ? (void *)(kf + first * DK)
                               : (void *)(kd + first * DK),
                           1, 1, keys - first, DK);
    a.v = sdpa_tensor_bhtd(f32 ? (void *)(vf + first * DV)
                               : (void *)(vd + first * DV),
                           1, 1, keys - first, DV);
    a.out = sdpa_tensor_bhtd(f32 ? (void *)of : od, 1, 1, T, DV);
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.attn = &a;
    char what[48];
    snprintf(what, sizeof what, "two-token decode %s%s",
             f32 ? "float32" : "float64", causal ? " causal" : "");
    int status = sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m);
    check_status(what, status);
    if (status != SDPA_OK)
        return;
    for (int i = 0; i < T * DV; i++)
        check(what, (size_t)i, f32 ? (double)of[i] : od[i], want[i], 1e-4);
}

/* sdpa_mpi_decode of Tq = 3 replicated rows with Hq = 4 query heads on 2
 * K/V heads, 37 keys split unevenly, bottom-right causal. */
static void gqa_decode(sdpa_ctx *ctx)
{
    enum { HQ = 4, HKV = 2, TQ = 3, TK = 37, D = 8 };
    static double q[HQ * TQ * D], k[HKV * TK * D], v[HKV * TK * D];
    static double out[HQ * TQ * D], ref[HQ * TQ * D];
    for (size_t i = 0; i < sizeof q / sizeof *q; i++)
        q[i] = value(1, i);
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) {
        k[i] = value(2, i);
        v[i] = value(3, i);
    }
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT64;
    a.causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    a.q = sdpa_tensor_bhtd(q, 1, HQ, TQ, D);
    a.k = sdpa_tensor_bhtd(k, 1, HKV, TK, D);
    a.v = sdpa_tensor_bhtd(v, 1, HKV, TK, D);
    a.out = sdpa_tensor_bhtd(ref, 1, HQ, TQ, D);
    check_status("gqa reference sdpa_forward", sdpa_forward(ctx, &a));

    /* This rank's key range, a view into the whole cache: uneven shards
     * (the first ranks one key longer when TK % ranks != 0). */
    int64_t first = TK * rank / ranks, keys = TK * (rank + 1) / ranks - first;
    a.k.data = k + first * D;
    a.k.shape[2] = keys;
    a.v.data = v + first * D;
    a.v.shape[2] = keys;
    a.out.data = out;
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.attn = &a;
    int status = sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m);
    check_status("gqa sdpa_mpi_decode", status);
    if (status == SDPA_OK)
        for (size_t i = 0; i < sizeof out / sizeof *out; i++)
            check("gqa decode", i, out[i], ref[i], 1e-12);
}

/* sdpa_mpi_prefill, balanced layout, causal top-left, T = 23 tokens: each
 * rank's rows against the same rows of sdpa_forward on the whole. */
static void balanced_prefill(sdpa_ctx *ctx)
{
    enum { T = 23, D = 8 };
    static double q[T * D], k[T * D], v[T * D], ref[T * D];
    static double mq[T * D], mk[T * D], mv[T * D], mout[T * D];
    for (size_t i = 0; i < T * D; i++) {
        q[i] = value(4, i);
        k[i] = value(5, i);
        v[i] = value(6, i);
    }
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT64;
    a.causal = SDPA_CAUSAL_TOP_LEFT;
    a.q = sdpa_tensor_bhtd(q, 1, 1, T, D);
    a.k = sdpa_tensor_bhtd(k, 1, 1, T, D);
    a.v = sdpa_tensor_bhtd(v, 1, 1, T, D);
    a.out = sdpa_tensor_bhtd(ref, 1, 1, T, D);
    check_status("prefill reference sdpa_forward", sdpa_forward(ctx, &a));

    int64_t off[2], len[2];
    int status =
        sdpa_mpi_shard(SDPA_MPI_LAYOUT_BALANCED, T, rank, ranks, off, len);
    check_status("sdpa_mpi_shard", status);
    if (status != SDPA_OK)
        return;
    /* The rank's two stripes, gathered in the layout's order. */
    int64_t rows = 0;
    for (int s = 0; s < 2; s++)
        for (int64_t i = off[s]; i < off[s] + len[s]; i++, rows++) {
            memcpy(mq + rows * D, q + i * D, D * sizeof *q);
            memcpy(mk + rows * D, k + i * D, D * sizeof *k);
            memcpy(mv + rows * D, v + i * D, D * sizeof *v);
        }
    a.q = sdpa_tensor_bhtd(mq, 1, 1, rows, D);
    a.k = sdpa_tensor_bhtd(mk, 1, 1, rows, D);
    a.v = sdpa_tensor_bhtd(mv, 1, 1, rows, D);
    a.out = sdpa_tensor_bhtd(mout, 1, 1, rows, D);
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.layout = SDPA_MPI_LAYOUT_BALANCED;
    m.attn = &a;
    status = sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m);
    check_status("balanced sdpa_mpi_prefill", status);
    if (status != SDPA_OK)
        return;
    rows = 0;
    for (int s = 0; s < 2; s++)
        for (int64_t i = off[s]; i < off[s] + len[s]; i++, rows++)
            for (int d = 0; d < D; d++)
                check("balanced prefill", (size_t)(i * D + d),
                      mout[rows * D + d], ref[i * D + d], 1e-12);
}

static void check_versions(void)
{
    snprintf(version, sizeof version, "%d.%d.%d", SDPA_MPI_VERSION_MAJOR,
             SDPA_MPI_VERSION_MINOR, SDPA_MPI_VERSION_PATCH);
    unsigned number = SDPA_MPI_VERSION_MAJOR * 10000 +
                      SDPA_MPI_VERSION_MINOR * 100 + SDPA_MPI_VERSION_PATCH;
    if (sdpa_mpi_version_number() != number) {
        printf("FAIL rank %d: sdpa_mpi.h says %s (%u), the library %u\n", rank,
               version, number, sdpa_mpi_version_number());
        failures++;
    }
#ifdef SDPA_MPI_EXPECTED_VERSION
    if (strcmp(SDPA_MPI_EXPECTED_VERSION, version) != 0) {
        printf("FAIL rank %d: the package says %s, sdpa_mpi.h %s\n", rank,
               SDPA_MPI_EXPECTED_VERSION, version);
        failures++;
    }
#endif
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    check_versions();
    sdpa_ctx *ctx = NULL;
    int status = sdpa_ctx_create(&ctx);
    if (status != SDPA_OK) {
        printf("FAIL rank %d: sdpa_ctx_create: %s\n", rank,
               sdpa_status_string(status));
        MPI_Abort(MPI_COMM_WORLD, 1); /* the others would wait forever */
    }
    static const double o_full[6] = {0.3302, 0.6698, 0, 0.6698, 0.3302, 0};
    static const double o_causal[6] = {1, 0, 0, 0.6698, 0.3302, 0};
    if (ranks <= 2) /* two keys: no rank may be left without one */
        for (int f = 0; f < 2; f++) {
            int dtype = f ? SDPA_FLOAT64 : SDPA_FLOAT32;
            two_tokens(ctx, dtype, SDPA_CAUSAL_NONE, o_full);
            two_tokens(ctx, dtype, SDPA_CAUSAL_TOP_LEFT, o_causal);
        }
    gqa_decode(ctx);
    balanced_prefill(ctx);
    sdpa_ctx_destroy(ctx);

    int all = 0;
    MPI_Allreduce(&failures, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0) {
        if (all)
            printf("%d check(s) failed\n", all);
        else
            printf("libsdpa-mpi %s on libsdpa %s, %d rank(s): two-token "
                   "decode, GQA decode and balanced causal prefill OK\n",
                   version, sdpa_version_string(), ranks);
    }
    MPI_Finalize();
    return all ? 1 : 0;
}
