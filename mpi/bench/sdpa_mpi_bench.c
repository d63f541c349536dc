/*
 * sdpa-mpi-bench: libsdpa-mpi on the benchmark's shapes (bench/shapes.c).
 *
 *   mpirun -np P sdpa-mpi-bench prefill [--layout contiguous|balanced]
 *                                       [--tokens T] [--reps R]
 *   mpirun -np P sdpa-mpi-bench decode  [--reps R]
 *   mpirun -np P sdpa-mpi-bench backward [--tokens T] [--reps R]
 *
 * prefill: shape L (N=1, H=1, T=131072, D=64, float32, causal top-left),
 *   each rank holding its shard; reports the call's time (slowest rank),
 *   the bytes each rank sent, its compute and exposed-wait seconds, and
 *   the fraction of the communication hidden behind compute: 1 - wait /
 *   (the same ring transfers timed alone, without compute).
 * decode: shape G (N=1, Hq=Hkv=32, Tq=1, Tk=4096, D=128, float32), the
 *   cache split by key range; reports the median time of R calls and the
 *   largest difference from single-process sdpa_forward of the whole
 *   (computed on rank 0) and between ranks.
 * backward: shape E (N=1, H=1, T=16384, D=64, float32, causal top-left),
 *   balanced; out and lse from sdpa_mpi_prefill, then R calls of
 *   sdpa_mpi_backward: the median and best time (slowest rank), each
 *   rank's compute, CPU, exposed wait (mean over the calls) and hidden
 *   fraction of its transfers, and its memory against shards + 16 MiB.
 * prefill also reports each rank's memory against its target,
 *   "memory per rank <= its shards + 16 MiB": the shards are the rank's Q,
 *   K, V and out slices (the caller's) and the two K/V ring buffers the
 *   library holds while P > 1 (the shard in hand, being sent, and the one
 *   arriving); the measured figure is the peak resident growth over the
 *   call(s), VmHWM after them minus VmRSS before the shards were
 *   allocated, with the high-water mark reset there (/proc/self/clear_refs)
 *   so that MPI_Init's own peak is not counted. Where the reset is
 *   refused, the process's lifetime peak stands in (VmHWM, or getrusage's
 *   ru_maxrss without /proc): an upper bound, said so in the report.
 * One core per rank: run with OPENBLAS_NUM_THREADS=1 (SDPA_OPT_NUM_THREADS
 * stays 1) and mpirun --bind-to core. Each rank also reports the CPU time
 * of its process during the call (CLOCK_PROCESS_CPUTIME_ID): on a shared,
 * loaded machine, where the wall time measures the neighbours too, the
 * slowest rank's CPU time plus its exposed wait is the time on idle cores.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "sdpa_mpi.h"

static int rank, ranks;

/* The value of element i of a tensor, the same whichever rank makes it. */
static float value(uint64_t tensor, uint64_t i)
{
    uint64_t z = tensor * 0x9E3779B97F4A7C15ull + i;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    return (float)((double)(z >> 11) / 9007199254740992.0 * 2.0 - 1.0);
}

static double cpu_seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* A "Name:   N kB" line of /proc/self/status in bytes, -1 without it. */
static long long status_bytes(const char *name)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    long long kb = -1;
    size_t n = strlen(name);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, name, n) && line[n] == ':') {
            kb = atoll(line + n + 1);
            break;
        }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* Resets VmHWM to the current VmRSS (Linux >= 4.0), so that the next
 * reading of it is the peak from here on; false where that is refused. */
static int reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return 0;
    int ok = fputs("5", f) >= 0;
    return fclose(f) == 0 && ok;
}

/* The process's peak resident bytes: VmHWM, or ru_maxrss (kB on Linux)
 * where /proc is missing. */
static long long peak_bytes(void)
{
    long long hwm = status_bytes("VmHWM");
    if (hwm >= 0)
        return hwm;
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (long long)u.ru_maxrss * 1024;
}

static double mib(long long bytes)
{
    return (double)bytes / (1024.0 * 1024.0);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double max_over_ranks(double v)
{
    double m;
    MPI_Allreduce(&v, &m, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return m;
}

/* The ring's transfers alone: `rounds` times P-1 steps, each rank sending
 * its current packed K/V shard (of `layout` over T tokens, D = dk = dv) to
 * the next and receiving the previous one's (prefill: 1 round, the K/V
 * shards; backward: 2, the K/V shards and the dK/dV accumulators). Sets
 * *most to the largest shard's floats. */
static double ring_alone(int layout, int64_t T, int64_t D, int rounds,
                         int64_t *most_out)
{
    int64_t *elems = malloc((size_t)ranks * sizeof *elems), most = 0;
    for (int r = 0; r < ranks; r++) {
        int64_t o[2], l[2];
        sdpa_mpi_shard(layout, T, r, ranks, o, l);
        elems[r] = (l[0] + l[1]) * 2 * D;
        most = elems[r] > most ? elems[r] : most;
    }
    *most_out = most;
    if (ranks == 1) {
        free(elems);
        return 0;
    }
    float *buf[2] = {calloc((size_t)most, 4), calloc((size_t)most, 4)};
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int cur = 0;
    for (int s = 0; s < rounds * (ranks - 1); s++) {
        int step = s % (ranks - 1);
        int src = (rank - step + ranks) % ranks;
        int from = (rank - step - 1 + ranks) % ranks;
        MPI_Request req[2];
        MPI_Irecv(buf[1 - cur], (int)elems[from], MPI_FLOAT,
                  (rank - 1 + ranks) % ranks, s, MPI_COMM_WORLD, &req[0]);
        MPI_Isend(buf[cur], (int)elems[src], MPI_FLOAT, (rank + 1) % ranks, s,
                  MPI_COMM_WORLD, &req[1]);
        MPI_Waitall(2, req, MPI_STATUSES_IGNORE);
        cur = 1 - cur;
    }
    double t = MPI_Wtime() - t0;
    free(buf[0]);
    free(buf[1]);
    free(elems);
    return max_over_ranks(t);
}

static int prefill(sdpa_ctx *ctx, int layout, int64_t T, int reps)
{
    const int64_t D = 64;
    int64_t off[2], len[2];
    if (sdpa_mpi_shard(layout, T, rank, ranks, off, len) != SDPA_OK)
        return 1;
    int64_t rows = len[0] + len[1];
    /* The baseline: what MPI_Init and the context left resident. Without a
     * reset, the peak below is the lifetime one and the growth an upper
     * bound (from the same baseline). */
    long long rss0 = status_bytes("VmRSS");
    int exact_peak = rss0 >= 0 && reset_peak();
    if (rss0 < 0)
        rss0 = 0;
    float *q = malloc((size_t)(rows * D) * 4),
          *k = malloc((size_t)(rows * D) * 4);
    float *v = malloc((size_t)(rows * D) * 4),
          *out = malloc((size_t)(rows * D) * 4);
    for (int s = 0, local = 0; s < 2; s++)
        for (int64_t i = 0; i < len[s]; i++, local++)
            for (int64_t d = 0; d < D; d++) {
                uint64_t at = (uint64_t)((off[s] + i) * D + d);
                q[local * D + d] = value(1, at);
                k[local * D + d] = value(2, at);
                v[local * D + d] = value(3, at);
            }
    /* out is a shard like the others: resident before the call, as a
     * caller's would be, so that the growth beyond the shards is the
     * library's. */
    memset(out, 0, (size_t)(rows * D) * 4);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.causal = SDPA_CAUSAL_TOP_LEFT;
    a.q = sdpa_tensor_bhtd(q, 1, 1, rows, D);
    a.k = sdpa_tensor_bhtd(k, 1, 1, rows, D);
    a.v = sdpa_tensor_bhtd(v, 1, 1, rows, D);
    a.out = sdpa_tensor_bhtd(out, 1, 1, rows, D);
    sdpa_mpi_stats st = {.struct_size = sizeof st};
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.layout = layout;
    m.attn = &a;
    m.stats = &st;
    double best = INFINITY, cpu = 0;
    sdpa_mpi_stats kept = st;
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime(), c0 = cpu_seconds();
        int status = sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &m);
        double c = cpu_seconds() - c0;
        double t = max_over_ranks(MPI_Wtime() - t0);
        if (status != SDPA_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, sdpa_mpi_last_error());
            return 1;
        }
        if (t < best) {
            best = t;
            kept = st;
            cpu = c;
        }
    }
    /* Before ring_alone's buffers: the peak of the call(s) only. */
    long long growth = peak_bytes() - rss0;
    long long shm_after = status_bytes("RssShmem");
    /* The transfers alone, for the hidden fraction. */
    int64_t most;
    double alone = ring_alone(layout, T, D, 1, &most);
    /* The shards: Q, K, V, out here, and sdpa_mpi_prefill's two ring
     * buffers of the largest K/V shard (prefill.c) when there is a ring. */
    const long long slices = 4 * (long long)rows * D * 4;
    const long long ring = ranks > 1 ? 2 * (long long)most * 4 : 0;
    const long long budget = slices + ring + 16 * 1024 * 1024;
    int pass = growth <= budget, all_pass;
    MPI_Allreduce(&pass, &all_pass, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    long long worst_over = growth - budget, worst;
    MPI_Allreduce(&worst_over, &worst, 1, MPI_LONG_LONG, MPI_MAX,
                  MPI_COMM_WORLD);
    double checksum = 0, all;
    for (int64_t i = 0; i < rows * D; i++)
        checksum += out[i];
    MPI_Reduce(&checksum, &all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    for (int r = 0; r < ranks; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (r == rank) {
            double hidden = alone > 0 ? 1.0 - kept.wait_seconds / alone : 1.0;
            hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
            printf("prefill L T=%lld %s P=%d rank %d: rows %lld, sent %.1f "
                   "MB, compute %.3f s, CPU %.3f s, exposed wait %.4f s, "
                   "transfers alone %.4f s, hidden %.1f %%, calls %lld, blocks "
                   "skipped %lld\n",
                   (long long)T,
                   layout == SDPA_MPI_LAYOUT_BALANCED ? "balanced"
                                                      : "contiguous",
                   ranks, rank, (long long)rows, (double)kept.bytes_sent / 1e6,
                   kept.compute_seconds, cpu, kept.wait_seconds, alone,
                   100 * hidden, (long long)kept.forward_calls,
                   (long long)kept.blocks_skipped);
            printf("prefill L T=%lld P=%d rank %d memory: shards %.1f MiB (Q, "
                   "K, V, out %.1f MiB + %d K/V ring buffers %.1f MiB), peak "
                   "growth %.1f MiB (%s), beyond the shards %.1f MiB "
                   "(MPI shared memory resident after: %.1f MiB): %s against "
                   "shards + 16 MiB = %.1f MiB\n",
                   (long long)T, ranks, rank, mib(slices + ring), mib(slices),
                   ranks > 1 ? 2 : 0, mib(ring), mib(growth),
                   exact_peak ? "VmHWM reset before the shards"
                              : "lifetime peak, an upper bound",
                   mib(growth - slices - ring),
                   shm_after >= 0 ? mib(shm_after) : 0.0,
                   pass ? "PASS" : "FAIL", mib(budget));
            fflush(stdout);
        }
    }
    if (rank == 0)
        printf("prefill L T=%lld P=%d: %.3f s (best of %d; checksum %.6g); "
               "memory per rank <= shards + 16 MiB: %s (worst rank %+.1f "
               "MiB against it)\n",
               (long long)T, ranks, best, reps, all, all_pass ? "PASS" : "FAIL",
               mib(worst));
    free(q);
    free(k);
    free(v);
    free(out);
    return 0;
}

/* The backward of shape E (N = Hq = 1, T = 16384, D = 64, float32, causal
 * top-left) in the balanced layout: out and lse from sdpa_mpi_prefill,
 * then R timed calls of sdpa_mpi_backward (median and best), the hidden
 * fraction of its transfers (the K/V shards and the dK/dV accumulators,
 * timed alone) and the memory against shards + 16 MiB, where the shards
 * are the rank's q, k, v, out, dout, lse, dq, dk and dv and the library's
 * ring buffers (two K/V, three dK/dV of the largest packed shard, two on
 * 2 ranks). */
static int backward(sdpa_ctx *ctx, int64_t T, int reps)
{
    const int64_t D = 64;
    const int layout = SDPA_MPI_LAYOUT_BALANCED;
    int64_t off[2], len[2];
    if (sdpa_mpi_shard(layout, T, rank, ranks, off, len) != SDPA_OK)
        return 1;
    const int64_t rows = len[0] + len[1];
    long long rss0 = status_bytes("VmRSS");
    if (rss0 < 0)
        rss0 = 0;
    const size_t bytes = (size_t)(rows * D) * 4;
    float *t[8];
    for (int i = 0; i < 8; i++)
        t[i] = calloc(1, bytes); /* q, k, v, out, dout, dq, dk, dv */
    float *lse = calloc(1, (size_t)rows * 4);
    for (int s = 0, local = 0; s < 2; s++)
        for (int64_t i = 0; i < len[s]; i++, local++)
            for (int64_t d = 0; d < D; d++) {
                uint64_t at = (uint64_t)((off[s] + i) * D + d);
                for (int w = 0; w < 3; w++)
                    t[w][local * D + d] = value(1 + (uint64_t)w, at);
                t[4][local * D + d] = value(7, at);
            }
    for (int i = 5; i < 8; i++) /* resident, as a caller's would be */
        memset(t[i], 0, bytes);
    sdpa_forward_args f = SDPA_FORWARD_ARGS_INIT;
    f.dtype = SDPA_FLOAT32;
    f.causal = SDPA_CAUSAL_TOP_LEFT;
    f.q = sdpa_tensor_bhtd(t[0], 1, 1, rows, D);
    f.k = sdpa_tensor_bhtd(t[1], 1, 1, rows, D);
    f.v = sdpa_tensor_bhtd(t[2], 1, 1, rows, D);
    f.out = sdpa_tensor_bhtd(t[3], 1, 1, rows, D);
    f.lse = sdpa_tensor_bhtd(lse, 1, 1, rows, 1);
    sdpa_mpi_args fm = SDPA_MPI_ARGS_INIT;
    fm.layout = layout;
    fm.attn = &f;
    if (sdpa_mpi_prefill(ctx, MPI_COMM_WORLD, &fm) != SDPA_OK) {
        fprintf(stderr, "rank %d: %s\n", rank, sdpa_mpi_last_error());
        return 1;
    }
    /* The peak from here on: the backward's (the prefill's ring buffers
     * are freed). */
    int exact_peak = reset_peak();
    sdpa_backward_args g = SDPA_BACKWARD_ARGS_INIT;
    g.dtype = SDPA_FLOAT32;
    g.causal = SDPA_CAUSAL_TOP_LEFT;
    g.q = f.q;
    g.k = f.k;
    g.v = f.v;
    g.out = f.out;
    g.lse = f.lse;
    g.dout = sdpa_tensor_bhtd(t[4], 1, 1, rows, D);
    g.dq = sdpa_tensor_bhtd(t[5], 1, 1, rows, D);
    g.dk = sdpa_tensor_bhtd(t[6], 1, 1, rows, D);
    g.dv = sdpa_tensor_bhtd(t[7], 1, 1, rows, D);
    sdpa_mpi_stats st = {.struct_size = sizeof st};
    sdpa_mpi_backward_args m = SDPA_MPI_BACKWARD_ARGS_INIT;
    m.layout = layout;
    m.grad = &g;
    m.stats = &st;
    double *times = malloc((size_t)reps * sizeof *times);
    double cpu_sum = 0, wait_sum = 0;
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime(), c0 = cpu_seconds();
        int status = sdpa_mpi_backward(ctx, MPI_COMM_WORLD, &m);
        cpu_sum += cpu_seconds() - c0;
        times[r] = max_over_ranks(MPI_Wtime() - t0);
        wait_sum += st.wait_seconds;
        if (status != SDPA_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, sdpa_mpi_last_error());
            return 1;
        }
    }
    long long growth = peak_bytes() - rss0;
    qsort(times, (size_t)reps, sizeof *times, cmp_double);
    int64_t most;
    double alone = ring_alone(layout, T, D, 2, &most);
    const long long slices = 8 * (long long)bytes + (long long)rows * 4;
    const int buffers = ranks > 2 ? 5 : ranks > 1 ? 4 : 0;
    const long long ring = buffers * (long long)most * 4;
    const long long budget = slices + ring + 16 * 1024 * 1024;
    int pass = growth <= budget, all_pass;
    MPI_Allreduce(&pass, &all_pass, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    double wait = wait_sum / reps;
    double hidden = alone > 0 ? 1.0 - wait / alone : 1.0;
    hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
    double worst_hidden;
    MPI_Allreduce(&hidden, &worst_hidden, 1, MPI_DOUBLE, MPI_MIN,
                  MPI_COMM_WORLD);
    double checksum = 0, all;
    for (int64_t i = 0; i < rows * D; i++)
        checksum += (double)t[5][i] + t[6][i] + t[7][i];
    MPI_Reduce(&checksum, &all, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    for (int r = 0; r < ranks; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        if (r != rank)
            continue;
        printf("backward E T=%lld balanced P=%d rank %d: rows %lld, sent %.1f "
               "MB, compute %.3f s, CPU %.3f s (mean of %d), exposed wait "
               "%.4f s, transfers alone %.4f s, hidden %.1f %%, calls %lld, "
               "blocks skipped %lld\n",
               (long long)T, ranks, rank, (long long)rows,
               (double)st.bytes_sent / 1e6, st.compute_seconds, cpu_sum / reps,
               reps, wait, alone, 100 * hidden, (long long)st.forward_calls,
               (long long)st.blocks_skipped);
        printf("backward E T=%lld P=%d rank %d memory: shards %.1f MiB "
               "(tensors %.1f MiB + %d ring buffers %.1f MiB), peak growth "
               "%.1f MiB (%s), beyond the shards %.1f MiB: %s against "
               "shards + 16 MiB = %.1f MiB\n",
               (long long)T, ranks, rank, mib(slices + ring), mib(slices),
               buffers, mib(ring), mib(growth),
               exact_peak ? "VmHWM reset after the shards"
                          : "lifetime peak, an upper bound",
               mib(growth - slices - ring), pass ? "PASS" : "FAIL",
               mib(budget));
        fflush(stdout);
    }
    if (rank == 0)
        printf("backward E T=%lld P=%d: median %.3f s, best %.3f s (%d calls; "
               "checksum %.6g); hidden >= %.1f %% on every rank; memory per "
               "rank <= shards + 16 MiB: %s\n",
               (long long)T, ranks, times[reps / 2], times[0], reps, all,
               100 * worst_hidden, all_pass ? "PASS" : "FAIL");
    free(times);
    for (int i = 0; i < 8; i++)
        free(t[i]);
    free(lse);
    return 0;
}

static int decode(sdpa_ctx *ctx, int reps)
{
    const int64_t H = 32, T = 4096, D = 128;
    size_t cache = (size_t)(H * T * D);
    float *q = malloc((size_t)(H * D) * 4), *k = malloc(cache * 4),
          *v = malloc(cache * 4), *out = malloc((size_t)(H * D) * 4),
          *ref = malloc((size_t)(H * D) * 4);
    for (size_t i = 0; i < (size_t)(H * D); i++)
        q[i] = value(4, i);
    for (size_t i = 0; i < cache; i++) {
        k[i] = value(5, i);
        v[i] = value(6, i);
    }
    int64_t first = T * rank / ranks, keys = T * (rank + 1) / ranks - first;
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = SDPA_FLOAT32;
    a.q = sdpa_tensor_bhtd(q, 1, H, 1, D);
    a.k = sdpa_tensor_bhtd(k + first * D, 1, H, keys, D);
    a.k.stride[1] = T * D;
    a.k.stride[0] = H * T * D;
    a.v = a.k;
    a.v.data = v + first * D;
    a.out = sdpa_tensor_bhtd(out, 1, H, 1, D);
    sdpa_mpi_args m = SDPA_MPI_ARGS_INIT;
    m.attn = &a;
    double *times = malloc((size_t)reps * sizeof *times);
    for (int r = 0; r < reps; r++) {
        MPI_Barrier(MPI_COMM_WORLD);
        double t0 = MPI_Wtime();
        int status = sdpa_mpi_decode(ctx, MPI_COMM_WORLD, &m);
        times[r] = max_over_ranks(MPI_Wtime() - t0);
        if (status != SDPA_OK) {
            fprintf(stderr, "rank %d: %s\n", rank, sdpa_mpi_last_error());
            return 1;
        }
    }
    qsort(times, (size_t)reps, sizeof *times, cmp_double);
    /* Against single-process sdpa_forward of the whole cache, and the
     * ranks against rank 0. */
    double diff = 0, between = 0;
    float *r0 = malloc((size_t)(H * D) * 4);
    memcpy(r0, out, (size_t)(H * D) * 4);
    MPI_Bcast(r0, (int)(H * D), MPI_FLOAT, 0, MPI_COMM_WORLD);
    for (int64_t i = 0; i < H * D; i++)
        between = fmax(between, fabs((double)r0[i] - out[i]));
    between = max_over_ranks(between);
    if (rank == 0) {
        sdpa_forward_args w = a;
        w.k = sdpa_tensor_bhtd(k, 1, H, T, D);
        w.v = sdpa_tensor_bhtd(v, 1, H, T, D);
        w.out = sdpa_tensor_bhtd(ref, 1, H, 1, D);
        if (sdpa_forward(ctx, &w) != SDPA_OK)
            return 1;
        for (int64_t i = 0; i < H * D; i++)
            diff = fmax(diff, fabs((double)ref[i] - out[i]));
        printf("decode G P=%d: median %.3f ms, min %.3f ms (%d calls); max "
               "|diff| vs sdpa_forward %.3g, between ranks %.3g\n",
               ranks, 1e3 * times[reps / 2], 1e3 * times[0], reps, diff,
               between);
    }
    free(r0);
    free(times);
    free(q);
    free(k);
    free(v);
    free(out);
    free(ref);
    return 0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    const char *mode = argc > 1 ? argv[1] : "prefill";
    int layout = SDPA_MPI_LAYOUT_BALANCED, reps = -1;
    int64_t tokens = 131072;
    int tokens_set = 0;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--layout"))
            layout = !strcmp(argv[i + 1], "contiguous")
                         ? SDPA_MPI_LAYOUT_CONTIGUOUS
                         : SDPA_MPI_LAYOUT_BALANCED;
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens")) {
            tokens = atoll(argv[i + 1]);
            tokens_set = 1;
        }
    }
    sdpa_ctx *ctx;
    if (sdpa_ctx_create(&ctx) != SDPA_OK)
        MPI_Abort(MPI_COMM_WORLD, 2);
    int status;
    if (!strcmp(mode, "decode"))
        status = decode(ctx, reps > 0 ? reps : 200);
    else if (!strcmp(mode, "backward"))
        status =
            backward(ctx, tokens_set ? tokens : 16384, reps > 0 ? reps : 5);
    else
        status = prefill(ctx, layout, tokens, reps > 0 ? reps : 1);
    sdpa_ctx_destroy(ctx);
    MPI_Finalize();
    return status;
}
