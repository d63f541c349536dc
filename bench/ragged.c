/*
 * The ragged shapes' variants (S in serving.c, Tp in packed.c): a variant
 * is a list of library calls, timed as the forward table times its
 * variants (main.c): each set up once (first call under a fresh VmHWM, on
 * a context of its own that allocates through a counting allocator), an
 * untimed warm round that sizes the rounds, then rounds that run every
 * variant once in an order rotated per round, so that drifts and the
 * bursts of a shared machine hit them all alike. Medians of the rounds.
 */
#define _POSIX_C_SOURCE 200809L

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "bench.h"

typedef struct calls_variant {
    bench_row row;
    const bench_calls *calls;
    int live;
    sdpa_ctx *ctx;
    bench_counter count;
    size_t live_before; /* context bytes before the first call */
    double cold_s, last_cpu;
    double *times, *cpu_times;
} calls_variant;

static void fail(calls_variant *v, int status, const char *where)
{
    const int na =
        status == SDPA_ERR_UNSUPPORTED || status == SDPA_ERR_OUT_OF_MEMORY;
    snprintf(v->row.note, sizeof v->row.note, "%s %s: %s: %s",
             na ? "n/a" : "ERROR", where, sdpa_status_string(status),
             v->ctx ? sdpa_ctx_last_error(v->ctx) : "");
    v->live = 0;
}

/* One run: the variant's calls on the copy after the block's last run's.
 * Its time, or a negative value on failure (the note says why). T threads
 * are T cores, as in main.c: T workers, OpenBLAS at T threads or at
 * --lib-blas-threads. */
static double run_once(calls_variant *v, const bench_env *env, int64_t *turn)
{
    const bench_calls *c = v->calls;
    openblas_set_num_threads(env->lib_blas_threads ? env->lib_blas_threads
                                                   : v->row.threads);
    const int64_t first = (*turn)++ % c->copies * c->count;
    double t0 = bench_now(), c0 = bench_cpu_now();
    int st = SDPA_OK;
    for (int64_t i = first; i < first + c->count && st == SDPA_OK; i++)
        st = c->fwd ? sdpa_forward(v->ctx, &c->fwd[i])
                    : sdpa_backward(v->ctx, &c->bwd[i]);
    double t = bench_now() - t0;
    v->last_cpu = bench_cpu_now() - c0;
    if (st != SDPA_OK) {
        fail(v, st, c->fwd ? "sdpa_forward" : "sdpa_backward");
        return -1.0;
    }
    return t;
}

/* The context, and the first run under a fresh VmHWM. */
static void setup(calls_variant *v, const bench_env *env, int64_t *turn)
{
    int64_t rss0 = bench_mem_peak_start(env->peak_reset_ok);
    v->live = 1;
    int st = bench_ctx_create_counted(&v->ctx, &v->count);
    if (st == SDPA_OK)
        st = sdpa_ctx_set_int(v->ctx, SDPA_OPT_NUM_THREADS, v->row.threads);
    if (st == SDPA_OK && v->calls->empty_rows_zero)
        st =
            sdpa_ctx_set_int(v->ctx, SDPA_OPT_EMPTY_ROWS, SDPA_EMPTY_ROWS_ZERO);
    if (st != SDPA_OK) {
        fail(v, st, "context");
        return;
    }
    v->live_before = atomic_load(&v->count.live);
    atomic_store(&v->count.peak, v->live_before);
    v->cold_s = run_once(v, env, turn);
    int64_t hwm = bench_mem_hwm();
    if (v->cold_s < 0)
        return;
    if (rss0 >= 0 && hwm >= 0)
        v->row.peak_growth = hwm > rss0 ? hwm - rss0 : 0;
    v->row.workspace = (int64_t)(atomic_load(&v->count.peak) - v->live_before);
}

static int choose_reps(calls_variant *vars, int n, const bench_env *env,
                       const bench_ragged_opts *o, int64_t *turn)
{
    double round = 0.0;
    for (int i = 0; i < n; i++) {
        double t = vars[i].live ? run_once(&vars[i], env, turn) : -1.0;
        round += t > 0 ? t : 0.0;
    }
    if (o->reps)
        return o->reps;
    double r = round > 0 ? o->block_seconds / round : 200.0;
    return r < 5.0 ? 5 : r > 200.0 ? 200 : (int)r;
}

void bench_calls_time(const bench_env *env, const bench_ragged_opts *o,
                      const bench_shape *s, int threads,
                      const bench_calls *calls, int n, bench_row *rows)
{
    calls_variant *vars = calloc((size_t)n, sizeof *vars);
    if (!vars) {
        for (int i = 0; i < n; i++)
            snprintf(rows[i].note, sizeof rows[i].note, "n/a (out of memory)");
        return;
    }
    int64_t turn = 0; /* the block's runs so far: the copy of the next */
    fprintf(stderr, "[%s thr=%d] setup:", s->name, threads);
    for (int i = 0; i < n; i++) {
        bench_row *r = &vars[i].row;
        memset(r, 0, sizeof *r);
        r->shape = r->block = s;
        r->threads = threads;
        r->variant = BENCH_VAR_AUTO;
        r->label = calls[i].label;
        r->flop = calls[i].flop;
        r->workspace = -1;
        r->peak_growth = -1;
        r->max_diff = -1.0;
        vars[i].calls = &calls[i];
        fprintf(stderr, " %s", calls[i].label);
        setup(&vars[i], env, &turn);
        fprintf(stderr, vars[i].live ? " %.3fs;" : " -;", vars[i].cold_s);
    }
    int reps = choose_reps(vars, n, env, o, &turn);
    fprintf(stderr, " -> %d timed round%s\n", reps, reps == 1 ? "" : "s");

    for (int i = 0; i < n; i++) {
        vars[i].times = calloc((size_t)reps, sizeof(double));
        vars[i].cpu_times = calloc((size_t)reps, sizeof(double));
        if (!vars[i].times || !vars[i].cpu_times)
            vars[i].live = 0;
    }
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < n; k++) {
            calls_variant *v = &vars[(k + r) % n];
            if (!v->live)
                continue;
            double t = run_once(v, env, &turn);
            if (t >= 0) {
                v->cpu_times[v->row.reps] = v->last_cpu;
                v->times[v->row.reps++] = t;
            }
        }

    const double bw = env->bw[threads >= 2 ? 1 : 0];
    for (int i = 0; i < n; i++) {
        bench_row *r = &vars[i].row;
        r->ok = vars[i].live && r->reps > 0;
        if (r->ok) {
            r->median_s = bench_median(vars[i].times, r->reps);
            r->min_s = vars[i].times[0]; /* sorted by bench_median */
            r->cpu_median_s = bench_median(vars[i].cpu_times, r->reps);
            r->gflops = calls[i].flop / r->median_s / 1e9;
            if (calls[i].kv_bytes > 0) {
                r->kv_gbs = calls[i].kv_bytes / r->median_s / 1e9;
                r->kv_bw_ratio = bw > 0 ? r->kv_gbs * 1e9 / bw : 0.0;
            }
        }
        rows[i] = *r;
        sdpa_ctx_destroy(vars[i].ctx);
        free(vars[i].times);
        free(vars[i].cpu_times);
    }
    free(vars);
}

/* Row `row` of q and out (Dk, Dv floats) against the double-precision
 * softmax over keys [0, keys) of sequence b's KV head kv_head. */
static double row_diff(const float *q, const float *out, int64_t dk, int64_t dv,
                       int64_t keys, bench_key_fn *key, const void *data,
                       int64_t b, int64_t kv_head)
{
    float *k = malloc((size_t)(dk + dv) * sizeof *k);
    double *score = malloc((size_t)(keys > 0 ? keys : 1) * sizeof *score);
    double *acc = calloc((size_t)dv, sizeof *acc);
    double worst = INFINITY;
    if (!k || !score || !acc || keys <= 0)
        goto done;
    float *v = k + dk;
    const double scale = 1.0 / sqrt((double)dk);
    double m = -INFINITY, sum = 0.0;
    for (int64_t j = 0; j < keys; j++) {
        key(data, b, kv_head, j, k, v);
        double dot = 0.0;
        for (int64_t c = 0; c < dk; c++)
            dot += (double)q[c] * (double)k[c];
        score[j] = dot * scale;
        m = fmax(m, score[j]);
    }
    for (int64_t j = 0; j < keys; j++) {
        key(data, b, kv_head, j, k, v);
        double p = exp(score[j] - m);
        sum += p;
        for (int64_t c = 0; c < dv; c++)
            acc[c] += p * (double)v[c];
    }
    worst = 0.0;
    for (int64_t c = 0; c < dv; c++) {
        double e = fabs((double)out[c] - acc[c] / sum);
        if (!(e <= worst)) /* NaN: +inf, never small */
            worst = isnan(e) ? INFINITY : e;
    }
done:
    free(k);
    free(score);
    free(acc);
    return worst;
}

double bench_ragged_reference_diff(const bench_shape *s, const float *q,
                                   const float *out, bench_key_fn *key,
                                   const void *data)
{
    int64_t first = 0, total = 0; /* the sequence's first packed row */
    for (int64_t b = 0; b < s->n; b++)
        total += s->seq_q[b];
    double worst = 0.0;
    for (int64_t b = 0; b < s->n; first += s->seq_q[b++]) {
        const int64_t rows = s->seq_q[b];
        const int64_t sample[3] = {0, rows / 2 - 1, rows - 1};
        for (int r = 0; r < (rows > 2 ? 3 : rows); r++) {
            int64_t i = rows > 2 ? sample[r] : r, lo, hi;
            bench_shape_allowed(s, b, i, &lo, &hi);
            for (int64_t h = 0; h < s->hq; h++) {
                size_t at = (size_t)(h * total + first + i);
                double e = row_diff(q + at * (size_t)s->dk,
                                    out + at * (size_t)s->dv, s->dk, s->dv, hi,
                                    key, data, b, h / (s->hq / s->hkv));
                worst = e > worst || isnan(e) ? e : worst;
            }
        }
    }
    return worst;
}

bench_ragged_ratio bench_ragged_ratio_of(const char *name, const bench_row *num,
                                         const bench_row *den, double target,
                                         int at_most)
{
    return (bench_ragged_ratio){name,
                                num->label,
                                den->label,
                                num->ok ? num->median_s : 0.0,
                                den->ok ? den->median_s : 0.0,
                                num->ok ? num->cpu_median_s : 0.0,
                                den->ok ? den->cpu_median_s : 0.0,
                                target,
                                at_most};
}

int bench_ragged_verdicts(bench_row *rows, int n, const char *const *notes)
{
    const double tol = bench_tolerance(SDPA_FLOAT32);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        bench_row *r = &rows[i];
        if (!r->ok) {
            bad += strncmp(r->note, "ERROR", 5) == 0;
            continue;
        }
        r->diff_bad = r->max_diff >= 0 && !(r->max_diff <= tol);
        bad += r->diff_bad;
        if (r->diff_bad)
            snprintf(r->note, sizeof r->note, "WRONG: max|diff| %.3g > %.0e",
                     r->max_diff, tol);
        else
            snprintf(r->note, sizeof r->note, "%s", notes[i]);
    }
    return bad;
}

void bench_seq_offsets(const bench_shape *s, int64_t *q_off, int64_t *kv_off)
{
    q_off[0] = kv_off[0] = 0;
    for (int64_t b = 0; b < s->n; b++) {
        q_off[b + 1] = q_off[b] + s->seq_q[b];
        kv_off[b + 1] = kv_off[b] + s->seq_kv[b];
    }
}

int bench_ragged_run(const bench_env *env, const bench_ragged_opts *o,
                     const bench_shape *s, bench_row *rows, size_t *nrows,
                     bench_ragged_summary *sums, size_t *nsums)
{
    return s->ragged == BENCH_RAGGED_SERVING
               ? bench_serving_run(env, o, s, rows, nrows, sums, nsums)
               : bench_packed_run(env, o, s, rows, nrows, sums, nsums);
}
