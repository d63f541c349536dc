/* The human-readable table and the --json output. */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"

const char *bench_variant_name(int variant)
{
    static const char *const names[BENCH_VAR_COUNT] = {
        "sdpa materialised", "sdpa tiled",    "sdpa decode",
        "sdpa auto",         "bare gemms",    "naive 3-call",
        "sdpa dense bias",   "ref sdpa auto", "stream K+V"};
    return variant >= 0 && variant < BENCH_VAR_COUNT ? names[variant] : "?";
}

/* Largest acceptable max |libsdpa - naive|: both sides round differently
 * (vector exp, blocked sums), so this is a "clearly wrong" line, not an
 * accuracy claim. */
double bench_tolerance(int dtype)
{
    return dtype == SDPA_FLOAT64 ? 1e-9 : 1e-3;
}

static double mib(int64_t bytes)
{
    return (double)bytes / BENCH_MIB;
}

void bench_report_header(const bench_env *env)
{
    printf("sdpa-bench: libsdpa %s, row kernel %s\n", env->sdpa_version,
           env->kernel == SDPA_KERNEL_AVX512     ? "avx512"
           : env->kernel == SDPA_KERNEL_AVX2     ? "avx2"
           : env->kernel == SDPA_KERNEL_PORTABLE ? "portable"
                                                 : "?");
    char cpu[256];
    printf("CPU: %s, %ld online\n", bench_cpu_model(cpu, sizeof cpu),
           sysconf(_SC_NPROCESSORS_ONLN));
    printf("OpenBLAS: %s (core %s), openblas_get_num_threads() = %d at "
           "start\n",
           env->openblas_config, env->openblas_core, env->openblas_threads);
    printf("  'thr' T = T cores for every variant: the harness sets OpenBLAS "
           "to T threads before each\n"
           "  baseline run, and to T (or --lib-blas-threads) before each "
           "libsdpa run, which uses\n"
           "  SDPA_OPT_NUM_THREADS = T.\n");
    printf("  OPENBLAS_THREAD_TIMEOUT=%s (the harness sets 4, so that "
           "OpenBLAS threads left\n"
           "  spinning by one run do not take cores from the next).\n",
           getenv("OPENBLAS_THREAD_TIMEOUT") ? getenv("OPENBLAS_THREAD_TIMEOUT")
                                             : "unset");
    if (env->lib_blas_threads)
        printf("  This run: OpenBLAS at %d thread(s) under libsdpa.\n",
               env->lib_blas_threads);
    if (env->bw[0] > 0)
        printf("Read bandwidth (1 GiB cold streaming sum, the fastest of "
               "plain and prefetching 1-16 KiB\n"
               "  ahead, median of 7): %.1f GB/s with 1 thread (prefetch "
               "%zu B), %.1f GB/s with 2 (%zu B).\n"
               "  Decode rows read K/V copies in turn, so that no cache "
               "holds them, and are set against\n"
               "  'stream K+V', the same sum over the same copies in the "
               "same rounds.\n",
               env->bw[0] / 1e9, env->bw_ahead[0], env->bw[1] / 1e9,
               env->bw_ahead[1]);
    if (bench_huge_pages()) {
        /* the kernel's THP mode: "never" makes the advice moot */
        char mode[128] = "unknown";
        FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
        if (f) {
            if (!fgets(mode, sizeof mode, f))
                strcpy(mode, "unknown");
            mode[strcspn(mode, "\n")] = '\0';
            fclose(f);
        }
        printf("Tensors and page pools on transparent huge pages "
               "(--huge-pages: madvise MADV_HUGEPAGE; THP %s)\n",
               mode);
    }
    printf("Peak memory: %s\n",
           env->peak_reset_ok
               ? "VmHWM reset (clear_refs) before each variant's setup + "
                 "first call; dRSS = peak - RSS before"
               : "clear_refs unavailable: dRSS is growth of the process "
                 "peak, only attributable for the first/largest run (use "
                 "--only L)");
    printf("libsdpa workspace budget %.0f MiB (paths needing more are "
           "n/a); baseline score block <= %.0f MiB (query-row blocks)\n",
           (double)env->mem_budget / BENCH_MIB,
           (double)env->baseline_budget / BENCH_MIB);
    printf("flop = 2*Hq*Tq*(Dk+Dv)*sum_b(kv_len_b), halved when causal; the "
           "same count for every variant.\n"
           "x bare = median / median of the bare gemms (full Tk, full "
           "square) at the same row of the suite.\n");
    if (env->any_window)
        printf("Windowed shapes (W): flop = 2*Hq*(Dk+Dv)*(allowed scores: "
               "per row the keys the window\n"
               "  and causality allow), not halved. No bare gemms (a band); "
               "the naive program is banded.\n"
               "  'sdpa dense bias' = the same call with the window given as "
               "a dense -inf bias, no window\n"
               "  flag; 'ref sdpa auto' = the ref shape's (A's) call, timed "
               "in W's rounds. Both at the\n"
               "  library's default tiles; W/A and W/dense below each W "
               "block are ratios of sdpa auto medians,\n"
               "  wall clock, then process CPU time (no waiting for the cores "
               "of a busy machine; it sums\n"
               "  all threads, so it stands for wall time only at 1 worker "
               "with OpenBLAS at 1 thread).\n");
    if (env->any_ragged)
        printf("Ragged shapes (S, Tp): flop = 2*Hq*(Dk+Dv)*(allowed scores of "
               "every sequence), the same for\n"
               "  each variant (a backward: 2*Hq*(3Dk+2Dv)*scores); scrt_MiB = "
               "what the first run grew its\n"
               "  context by (a counting allocator); the variants run in the "
               "same interleaved rounds at the\n"
               "  library's default tiles, OpenBLAS as for the libsdpa rows; "
               "ratios of medians below each\n"
               "  block, wall clock, then process CPU time (all threads: wall "
               "time's stand-in at 1 worker).\n");
    if (env->block_q || env->block_k)
        printf("This run: SDPA_OPT_BLOCK_Q = %lld, SDPA_OPT_BLOCK_K = %lld "
               "(0 = library default) on the\n"
               "  libsdpa path variants (not on 'sdpa dense bias' and 'ref "
               "sdpa auto').\n",
               (long long)env->block_q, (long long)env->block_k);
    printf("\n");
    printf("%-5s %3s %-17s %4s %10s %10s %8s %7s %9s %9s %9s %7s %5s  %s\n",
           "shape", "thr", "variant", "reps", "median_ms", "min_ms", "GFLOP/s",
           "x bare", "scrt_MiB", "dRSS_MiB", "max|diff|", "KV_GB/s", "%bw",
           "note");
}

void bench_report_shape(const bench_shape *s, int threads, int reps)
{
    printf("-- %s: %s [%s], %.4g GFLOP/call, %d timed rep%s, "
           "SDPA_OPT_NUM_THREADS=%d\n",
           s->name, s->what, bench_dtype_name(s->dtype),
           bench_shape_flops(s) / 1e9, reps,
           s->max_reps == 1 ? " (cold)"
           : reps == 1      ? ""
                            : "s",
           threads);
}

/* The variant column of a row. */
static const char *row_label(const bench_row *r)
{
    return r->label ? r->label : bench_variant_name(r->variant);
}

void bench_report_row(const bench_row *r)
{
    printf("%-5s %3d %-17s ", r->shape->name, r->threads, row_label(r));
    if (!r->ok) {
        printf("%4s %10s %10s %8s %7s %9s %9s %9s %7s %5s  %s\n", "-", "n/a",
               "-", "-", "-", "-", "-", "-", "-", "-", r->note);
        return;
    }
    printf("%4d %10.3f %10.3f %8.1f ", r->reps, r->median_s * 1e3,
           r->min_s * 1e3, r->gflops);
    if (r->ratio_bare > 0)
        printf("%7.2f ", r->ratio_bare);
    else
        printf("%7s ", "-");
    if (r->workspace >= 0)
        printf("%9.1f ", mib(r->workspace));
    else
        printf("%9s ", "-");
    if (r->peak_growth >= 0)
        printf("%9.1f ", mib(r->peak_growth));
    else
        printf("%9s ", "-");
    if (r->max_diff >= 0)
        printf("%9.2e ", r->max_diff);
    else
        printf("%9s ", "-");
    if (r->kv_gbs > 0 && r->kv_bw_ratio > 0)
        printf("%7.1f %5.0f", r->kv_gbs, r->kv_bw_ratio * 100.0);
    else if (r->kv_gbs > 0)
        printf("%7.1f %5s", r->kv_gbs, "-");
    else
        printf("%7s %5s", "-", "-");
    printf("  %s\n", r->note);
}

/* "met" / "NOT met" for a measured ratio against its target. */
static const char *verdict(int met)
{
    return met ? "met" : "NOT met";
}

void bench_report_ratio(const bench_env *env, const bench_ratio *r)
{
    const bench_shape *s = r->shape;
    char tiles[64] = "default tiles";
    if (env->block_q || env->block_k)
        snprintf(tiles, sizeof tiles, "BLOCK_Q %lld, BLOCK_K %lld",
                 (long long)env->block_q, (long long)env->block_k);
    if (r->ref) {
        double scores = bench_shape_allowed_scores(s) * (double)s->hq;
        double ref_scores =
            bench_shape_allowed_scores(r->ref) * (double)r->ref->hq;
        printf("   %s/%s = ", s->name, r->ref->name);
        if (r->shape_s > 0 && r->ref_s > 0) {
            double x = r->shape_s / r->ref_s;
            printf("%.2f  (sdpa auto %.3f ms / ref sdpa auto %.3f ms, same "
                   "rounds, %s; target <= %.3g: %s)\n",
                   x, r->shape_s * 1e3, r->ref_s * 1e3, tiles, s->ref_target,
                   verdict(x <= s->ref_target));
        } else {
            printf("n/a (not measured)\n");
        }
        printf("        allowed scores %s/%s = %.2f", s->name, r->ref->name,
               scores / ref_scores);
        if (r->shape_s > 0 && r->ref_own_s > 0)
            printf("; against %s's own block (%.3f ms): %.2f", r->ref->name,
                   r->ref_own_s * 1e3, r->shape_s / r->ref_own_s);
        printf("\n");
    }
    if (s->dense_bias) {
        printf("   %s/dense = ", s->name);
        if (r->shape_s > 0 && r->dense_s > 0) {
            double x = r->dense_s / r->shape_s;
            printf("%.4f  (dense bias %.1f ms: the window %.1fx faster; "
                   "target >= %.0fx: %s)\n",
                   r->shape_s / r->dense_s, r->dense_s * 1e3, x,
                   s->dense_target, verdict(x >= s->dense_target));
        } else {
            printf("n/a (not measured)\n");
        }
    }
    if (r->shape_cpu_s > 0 && (r->ref_cpu_s > 0 || r->dense_cpu_s > 0)) {
        printf("   process CPU time: %s %.3f ms", s->name,
               r->shape_cpu_s * 1e3);
        if (r->ref && r->ref_cpu_s > 0)
            printf(", %s/%s = %.2f (%s: %.3f ms; %s)", s->name, r->ref->name,
                   r->shape_cpu_s / r->ref_cpu_s, r->ref->name,
                   r->ref_cpu_s * 1e3,
                   verdict(r->shape_cpu_s / r->ref_cpu_s <= s->ref_target));
        if (s->dense_bias && r->dense_cpu_s > 0)
            printf(", %s/dense = %.4f (%.1fx; %s)", s->name,
                   r->shape_cpu_s / r->dense_cpu_s,
                   r->dense_cpu_s / r->shape_cpu_s,
                   verdict(r->dense_cpu_s / r->shape_cpu_s >= s->dense_target));
        printf("\n");
    }
}

void bench_report_ragged(const bench_ragged_summary *m, const bench_row *rows,
                         int n)
{
    const char *name = m->shape->name;
    bench_report_shape(m->shape, m->threads, n > 0 ? rows[0].reps : 0);
    for (int i = 0; i < n; i++)
        bench_report_row(&rows[i]);
    for (int i = 0; i < m->nratio; i++) {
        const bench_ragged_ratio *r = &m->ratio[i];
        printf("   %s thr=%d: %s = ", name, m->threads, r->name);
        if (!(r->num_s > 0 && r->den_s > 0)) {
            printf("n/a (not measured)\n");
            continue;
        }
        double x = r->num_s / r->den_s;
        printf("%.3f  (%s %.3f ms / %s %.3f ms, medians of the same rounds", x,
               r->num, r->num_s * 1e3, r->den, r->den_s * 1e3);
        if (r->target > 0)
            printf("; target %s %.3g: %s)", r->at_most ? "<=" : ">=", r->target,
                   verdict(r->at_most ? x <= r->target : x >= r->target));
        else
            printf("; no target)");
        if (r->num_cpu_s > 0 && r->den_cpu_s > 0)
            printf("; process CPU time %.3f", r->num_cpu_s / r->den_cpu_s);
        printf("\n");
    }
    if (m->bitwise >= 0)
        printf("   %s thr=%d: bitwise equal: %s (%s)\n", name, m->threads,
               m->bitwise ? "yes" : "no", m->bitwise_what);
    if (m->note[0])
        printf("   %s thr=%d: %s\n", name, m->threads, m->note);
    fflush(stdout);
}

void bench_report_footer(const bench_env *env, int warnings)
{
    if (warnings)
        printf("\n!!! %d row(s) WRONG (libsdpa differs from the naive "
               "baseline beyond f32 1e-3 / f64 1e-9;\n"
               "    S, Tp: from the references their notes name, or not "
               "bitwise equal) or ERROR: see the notes above !!!\n",
               warnings);
    else
        printf("\nAll measured libsdpa results match the naive baseline "
               "(f32 1e-3, f64 1e-9)%s.\n",
               env->any_ragged ? "; S and Tp their references" : "");
    printf("KV_GB/s: decode shapes, K+V bytes read per call / median; %%bw: "
           "against 'stream K+V', a streaming sum of\n"
           "  the same K/V copies timed in the same rounds with as many "
           "threads (the header's 1 GiB figure\n"
           "  where that row is not run); above 100 %% is a measurement "
           "bug.\n");
}

/* ---- JSON ---------------------------------------------------------------- */

static void json_string(const char *s)
{
    putchar('"');
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static void json_number(double x)
{
    if (isfinite(x))
        printf("%.6g", x);
    else
        printf("null");
}

/* "window_ratios": one object per windowed (shape, threads) block. */
static void json_ratios(const bench_env *env, const bench_ratio *ratios,
                        size_t n)
{
    printf(",\n  \"window_ratios\": [");
    for (size_t i = 0; i < n; i++) {
        const bench_ratio *r = &ratios[i];
        const bench_shape *s = r->shape;
        printf("%s\n    {\"shape\": ", i ? "," : "");
        json_string(s->name);
        printf(", \"threads\": %d, \"block_q\": %lld, \"block_k\": %lld, "
               "\"median_ms\": ",
               r->threads, (long long)env->block_q, (long long)env->block_k);
        json_number(r->shape_s > 0 ? r->shape_s * 1e3 : NAN);
        if (r->ref) {
            int ok = r->shape_s > 0 && r->ref_s > 0;
            double x = ok ? r->shape_s / r->ref_s : NAN;
            printf(", \"ref\": ");
            json_string(r->ref->name);
            printf(", \"ref_median_ms\": ");
            json_number(r->ref_s > 0 ? r->ref_s * 1e3 : NAN);
            printf(", \"allowed_scores_ratio\": ");
            json_number(
                bench_shape_allowed_scores(s) * (double)s->hq /
                (bench_shape_allowed_scores(r->ref) * (double)r->ref->hq));
            printf(", \"ratio_to_ref\": ");
            json_number(x);
            printf(", \"ratio_to_ref_target_max\": ");
            json_number(s->ref_target);
            printf(", \"ratio_to_ref_met\": %s",
                   ok ? (x <= s->ref_target ? "true" : "false") : "null");
            printf(", \"ref_own_block_median_ms\": ");
            json_number(r->ref_own_s > 0 ? r->ref_own_s * 1e3 : NAN);
            printf(", \"ratio_to_ref_own_block\": ");
            json_number(r->shape_s > 0 && r->ref_own_s > 0
                            ? r->shape_s / r->ref_own_s
                            : NAN);
        }
        if (s->dense_bias) {
            int ok = r->shape_s > 0 && r->dense_s > 0;
            double x = ok ? r->dense_s / r->shape_s : NAN;
            printf(", \"dense_median_ms\": ");
            json_number(r->dense_s > 0 ? r->dense_s * 1e3 : NAN);
            printf(", \"ratio_to_dense\": ");
            json_number(ok ? r->shape_s / r->dense_s : NAN);
            printf(", \"dense_speedup\": ");
            json_number(x);
            printf(", \"dense_speedup_target_min\": ");
            json_number(s->dense_target);
            printf(", \"dense_speedup_met\": %s",
                   ok ? (x >= s->dense_target ? "true" : "false") : "null");
        }
        /* the same medians in process CPU time */
        printf(", \"cpu_median_ms\": ");
        json_number(r->shape_cpu_s > 0 ? r->shape_cpu_s * 1e3 : NAN);
        if (r->ref) {
            printf(", \"cpu_ref_median_ms\": ");
            json_number(r->ref_cpu_s > 0 ? r->ref_cpu_s * 1e3 : NAN);
            printf(", \"cpu_ratio_to_ref\": ");
            json_number(r->shape_cpu_s > 0 && r->ref_cpu_s > 0
                            ? r->shape_cpu_s / r->ref_cpu_s
                            : NAN);
        }
        if (s->dense_bias) {
            printf(", \"cpu_dense_median_ms\": ");
            json_number(r->dense_cpu_s > 0 ? r->dense_cpu_s * 1e3 : NAN);
            printf(", \"cpu_ratio_to_dense\": ");
            json_number(r->shape_cpu_s > 0 && r->dense_cpu_s > 0
                            ? r->shape_cpu_s / r->dense_cpu_s
                            : NAN);
        }
        putchar('}');
    }
    printf("\n  ]");
}

/* "ragged": one object per ragged (shape, threads) block. */
static void json_ragged(const bench_ragged_summary *sums, size_t n)
{
    printf(",\n  \"ragged\": [");
    for (size_t i = 0; i < n; i++) {
        const bench_ragged_summary *m = &sums[i];
        printf("%s\n    {\"shape\": ", i ? "," : "");
        json_string(m->shape->name);
        printf(", \"threads\": %d, \"ratios\": [", m->threads);
        for (int k = 0; k < m->nratio; k++) {
            const bench_ragged_ratio *r = &m->ratio[k];
            int ok = r->num_s > 0 && r->den_s > 0;
            double x = ok ? r->num_s / r->den_s : NAN;
            printf("%s{\"name\": ", k ? ", " : "");
            json_string(r->name);
            printf(", \"value\": ");
            json_number(x);
            printf(", \"num_median_ms\": ");
            json_number(ok ? r->num_s * 1e3 : NAN);
            printf(", \"den_median_ms\": ");
            json_number(ok ? r->den_s * 1e3 : NAN);
            printf(", \"cpu_value\": ");
            json_number(r->num_cpu_s > 0 && r->den_cpu_s > 0
                            ? r->num_cpu_s / r->den_cpu_s
                            : NAN);
            if (r->target > 0) {
                printf(", \"%s\": ", r->at_most ? "target_max" : "target_min");
                json_number(r->target);
                printf(", \"met\": %s",
                       !ok ? "null"
                       : (r->at_most ? x <= r->target : x >= r->target)
                           ? "true"
                           : "false");
            }
            putchar('}');
        }
        printf("], \"bitwise_equal\": %s, \"note\": ", m->bitwise < 0 ? "null"
                                                       : m->bitwise   ? "true"
                                                                    : "false");
        json_string(m->note);
        putchar('}');
    }
    printf("\n  ]");
}

void bench_report_json(const bench_env *env, const bench_row *rows,
                       size_t count, const bench_ratio *ratios, size_t nratios,
                       const bench_ragged_summary *ragged, size_t nragged)
{
    char cpu[256];
    printf("{\n  \"sdpa_version\": ");
    json_string(env->sdpa_version);
    printf(",\n  \"cpu\": ");
    json_string(bench_cpu_model(cpu, sizeof cpu));
    printf(",\n  \"row_kernel\": %lld,\n  \"openblas_config\": ",
           (long long)env->kernel);
    json_string(env->openblas_config);
    printf(",\n  \"openblas_num_threads\": %d,\n", env->openblas_threads);
    printf("  \"lib_blas_threads\": %d,\n", env->lib_blas_threads);
    printf("  \"read_bandwidth_Bps\": {\"1\": ");
    json_number(env->bw[0]);
    printf(", \"2\": ");
    json_number(env->bw[1]);
    printf("},\n  \"read_bandwidth_prefetching\": {\"1\": %s, \"2\": %s},\n"
           "  \"read_bandwidth_prefetch_bytes\": {\"1\": %zu, \"2\": %zu},\n"
           "  \"last_level_cache_bytes\": %zu,\n",
           env->bw_ahead[0] ? "true" : "false",
           env->bw_ahead[1] ? "true" : "false", env->bw_ahead[0],
           env->bw_ahead[1], env->llc);
    printf("  \"peak_reset\": %s,\n", env->peak_reset_ok ? "true" : "false");
    printf("  \"workspace_budget_bytes\": %zu,\n  \"seed\": %llu,\n",
           env->mem_budget, (unsigned long long)env->seed);
    if (env->block_q || env->block_k)
        printf("  \"block_q\": %lld,\n  \"block_k\": %lld,\n",
               (long long)env->block_q, (long long)env->block_k);
    printf("  \"rows\": [");
    for (size_t i = 0; i < count; i++) {
        const bench_row *r = &rows[i];
        const bench_shape *s = r->shape;
        printf("%s\n    {\"shape\": ", i ? "," : "");
        json_string(s->name);
        printf(", \"dtype\": \"%s\", \"causal\": \"%s\", \"N\": %lld, "
               "\"Hq\": %lld, \"Hkv\": %lld, \"Tq\": %lld, \"Tk\": %lld, "
               "\"Dk\": %lld, \"Dv\": %lld, \"kv_lens\": ",
               bench_dtype_name(s->dtype), bench_causal_name(s->causal),
               (long long)s->n, (long long)s->hq, (long long)s->hkv,
               (long long)s->tq, (long long)s->tk, (long long)s->dk,
               (long long)s->dv);
        if (s->has_kv_lens || s->ragged) {
            for (int64_t b = 0; b < s->n; b++)
                printf("%s%lld", b ? ", " : "[",
                       (long long)bench_shape_kv_len(s, b));
            printf("], ");
        } else {
            printf("null, ");
        }
        if (s->ragged) {
            printf("\"seq_q\": ");
            for (int64_t b = 0; b < s->n; b++)
                printf("%s%lld", b ? ", " : "[", (long long)s->seq_q[b]);
            printf("], ");
        }
        if (s->window)
            printf("\"window_left\": %lld, \"window_right\": %lld, ",
                   (long long)s->window_left, (long long)s->window_right);
        if (r->block && r->block != s) {
            printf("\"in_block_of\": ");
            json_string(r->block->name);
            printf(", ");
        }
        printf("\"threads\": %d, \"variant\": ", r->threads);
        json_string(row_label(r));
        printf(", \"ok\": %s, \"reps\": %d, \"median_ms\": ",
               r->ok ? "true" : "false", r->reps);
        json_number(r->ok ? r->median_s * 1e3 : NAN);
        printf(", \"min_ms\": ");
        json_number(r->ok ? r->min_s * 1e3 : NAN);
        printf(", \"flop\": %.0f",
               r->flop > 0 ? r->flop : bench_shape_flops(s));
        printf(", \"gflops\": ");
        json_number(r->ok ? r->gflops : NAN);
        printf(", \"ratio_bare\": ");
        json_number(r->ratio_bare > 0 ? r->ratio_bare : NAN);
        printf(", \"workspace_bytes\": %lld, \"peak_rss_growth_bytes\": %lld",
               (long long)r->workspace, (long long)r->peak_growth);
        printf(", \"max_abs_diff\": ");
        json_number(r->max_diff >= 0 ? r->max_diff : NAN);
        printf(", \"diff_bad\": %s, \"kv_GBps\": ",
               r->diff_bad ? "true" : "false");
        json_number(r->kv_gbs > 0 ? r->kv_gbs : NAN);
        printf(", \"kv_bw_ratio\": ");
        json_number(r->kv_gbs > 0 && r->kv_bw_ratio > 0 ? r->kv_bw_ratio : NAN);
        printf(", \"note\": ");
        json_string(r->note);
        putchar('}');
    }
    printf("\n  ]");
    if (nratios)
        json_ratios(env, ratios, nratios);
    if (nragged)
        json_ragged(ragged, nragged);
    printf("\n}\n");
}

void bench_json_string(const char *s)
{
    json_string(s);
}

void bench_json_number(double x)
{
    json_number(x);
}
