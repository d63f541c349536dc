/* Clock, process memory and the machine's streaming read bandwidth. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"

double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

double bench_cpu_now(void)
{
    struct timespec ts;
    if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) != 0)
        return 0.0;
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* A "Key:   1234 kB" line of /proc/self/status, in bytes. */
static int64_t status_field(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return -1;
    char line[256];
    size_t klen = strlen(key);
    int64_t bytes = -1;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, key, klen) == 0 && line[klen] == ':') {
            bytes = (int64_t)strtoll(line + klen + 1, NULL, 10) * 1024;
            break;
        }
    }
    fclose(f);
    return bytes;
}

int64_t bench_mem_rss(void)
{
    return status_field("VmRSS");
}
int64_t bench_mem_hwm(void)
{
    return status_field("VmHWM");
}

int bench_mem_reset_peak(void)
{
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f)
        return -1;
    int ok = fputs("5", f) >= 0;
    return (fclose(f) == 0 && ok) ? 0 : -1;
}

const char *bench_cpu_model(char *buf, size_t size)
{
    snprintf(buf, size, "unknown");
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f)
        return buf;
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || !colon)
            continue;
        colon += colon[1] == ' ' ? 2 : 1;
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, size, "%s", colon);
        break;
    }
    fclose(f);
    return buf;
}

/* ---- read bandwidth ---------------------------------------------------- */

typedef struct sum_job {
    const uint64_t *p;
    size_t n;
    uint64_t result;
} sum_job;

/* Eight independent accumulators so the loop is bound by loads, not by
 * the add latency; integer sums vectorise without reassociation concerns. */
static void *sum_words(void *arg)
{
    sum_job *job = arg;
    uint64_t acc[8] = {0};
    size_t i = 0;
    for (; i + 8 <= job->n; i += 8)
        for (size_t l = 0; l < 8; l++)
            acc[l] += job->p[i + l];
    for (; i < job->n; i++)
        acc[0] += job->p[i];
    uint64_t total = 0;
    for (size_t l = 0; l < 8; l++)
        total += acc[l];
    job->result = total;
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The result is kept in a volatile sink so the sums cannot be elided. */
static volatile uint64_t bandwidth_sink;

double bench_read_bandwidth(size_t bytes, int threads, int reps)
{
    enum { MAX_THREADS = 16, MAX_REPS = 32 };
    if (threads < 1 || threads > MAX_THREADS || reps < 1 || reps > MAX_REPS)
        return -1.0;
    size_t words = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(words * sizeof(uint64_t));
    if (!buf)
        return -1.0;
    for (size_t i = 0; i < words; i++)
        buf[i] = i;

    double times[MAX_REPS];
    sum_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS];
    size_t per = words / (size_t)threads;
    for (int r = 0; r < reps; r++) {
        double t0 = bench_now();
        for (int t = 0; t < threads; t++) {
            jobs[t].p = buf + (size_t)t * per;
            jobs[t].n = t == threads - 1 ? words - (size_t)t * per : per;
            started[t] = t > 0 && pthread_create(&tid[t], NULL, sum_words,
                                                 &jobs[t]) == 0;
        }
        for (int t = 0; t < threads; t++)
            if (!started[t])
                sum_words(&jobs[t]); /* caller's share, or a failed create */
        for (int t = 1; t < threads; t++)
            if (started[t])
                pthread_join(tid[t], NULL);
        times[r] = bench_now() - t0;
        for (int t = 0; t < threads; t++)
            bandwidth_sink += jobs[t].result;
    }
    free(buf);
    qsort(times, (size_t)reps, sizeof times[0], cmp_double);
    return (double)(words * sizeof(uint64_t)) / times[reps / 2];
}
