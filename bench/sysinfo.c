/* Clock and timing medians, process memory (and a context's, through a
 * counting allocator) and the machine's streaming read bandwidth. */
#define _POSIX_C_SOURCE 200809L

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h> /* malloc_trim */
#endif
#if (defined(__x86_64__) || defined(__i386__)) && defined(__GNUC__)
#define SUM_AVX2 1
#include <immintrin.h>
#endif

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

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_median(double *x, int n)
{
    qsort(x, (size_t)n, sizeof *x, cmp_double);
    return n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]);
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

static void *count_alloc(void *opaque, size_t size, size_t alignment)
{
    bench_counter *c = opaque;
    size_t a = alignment < sizeof(void *) ? sizeof(void *) : alignment;
    size_t rounded = (size + a - 1) / a * a; /* aligned_alloc's rule */
    void *p = aligned_alloc(a, rounded ? rounded : a);
    if (!p)
        return NULL;
    size_t now = atomic_fetch_add(&c->live, size) + size;
    size_t peak = atomic_load(&c->peak);
    while (now > peak && !atomic_compare_exchange_weak(&c->peak, &peak, now))
        ;
    return p;
}

static void count_free(void *opaque, void *ptr, size_t size)
{
    bench_counter *c = opaque;
    if (!ptr)
        return;
    atomic_fetch_sub(&c->live, size);
    free(ptr);
}

int bench_ctx_create_counted(sdpa_ctx **ctx, bench_counter *c)
{
    atomic_init(&c->live, 0);
    atomic_init(&c->peak, 0);
    sdpa_allocator al = {sizeof al, count_alloc, count_free, c};
    return sdpa_ctx_create_with_allocator(ctx, &al);
}

int64_t bench_mem_peak_start(int reset_ok)
{
#ifdef __GLIBC__
    malloc_trim(0);
#endif
    if (reset_ok)
        bench_mem_reset_peak();
    return reset_ok ? bench_mem_rss() : bench_mem_hwm();
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

/* A pass over a buffer: the threads claim it 1 MiB at a time (in order,
 * so that memory sees one stream per thread), and each sums what it
 * claimed; with a static split, a core the hypervisor or another process
 * slows keeps the others waiting, where the decode's own workers claim
 * their items and go on: the stream then read less than the decode. */
typedef struct sum_job {
    const uint64_t *p;   /* the whole buffer */
    size_t n;            /* its words */
    size_t ahead;        /* words: one line requested this far ahead per 64
                            bytes summed (0: the hardware prefetchers alone) */
    atomic_size_t *next; /* the next 1 MiB chunk to claim */
    uint64_t result;
} sum_job;

enum { CHUNK_WORDS = (1 << 20) / sizeof(uint64_t) };

/* The prefetch distances the probe tries besides none: around the
 * ~2 KiB that cover DRAM latency at streaming speed (~100 ns at ~20
 * GB/s), halved and doubled twice, so that the figure is the best
 * streaming read this core reaches whatever suits it. */
static const size_t PROBE_AHEAD[] = {0, 1024, 2048, 4096, 8192, 16384};
enum { PROBE_STRATEGIES = sizeof PROBE_AHEAD / sizeof PROBE_AHEAD[0] };

#ifdef SUM_AVX2
/* Whole lines in few loads, as the decode kernels read them: the scalar
 * loop below issues 8 loads per line, which fill the core's load queue
 * with few lines in flight and read memory slower than a vector kernel
 * can. Four independent sums of 32 bytes; prefetches to L1 (T0), as the
 * decode kernels'. */
__attribute__((target("avx2"))) static uint64_t sum_avx2(const uint64_t *p,
                                                         size_t n, size_t ahead)
{
    __m256i acc[4] = {_mm256_setzero_si256(), _mm256_setzero_si256(),
                      _mm256_setzero_si256(), _mm256_setzero_si256()};
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (ahead && i + ahead + 16 <= n)
            for (int l = 0; l < 2; l++)
                _mm_prefetch((const char *)(p + i + ahead + 8 * l),
                             _MM_HINT_T0);
        for (int l = 0; l < 4; l++)
            acc[l] = _mm256_add_epi64(
                acc[l], _mm256_loadu_si256(
                            (const __m256i *)(const void *)(p + i + 4 * l)));
    }
    uint64_t lanes[4], total = 0;
    _mm256_storeu_si256((__m256i *)(void *)lanes,
                        _mm256_add_epi64(_mm256_add_epi64(acc[0], acc[1]),
                                         _mm256_add_epi64(acc[2], acc[3])));
    for (int l = 0; l < 4; l++)
        total += lanes[l];
    for (; i < n; i++)
        total += p[i];
    return total;
}
#endif

/* Eight independent accumulators so the loop is bound by loads, not by
 * the add latency; integer sums vectorise without reassociation concerns.
 * Prefetches go to L1 (T0), as the decode kernels' do. */
static uint64_t sum_range(const uint64_t *p, size_t n, size_t ahead)
{
#ifdef SUM_AVX2
    if (__builtin_cpu_supports("avx2"))
        return sum_avx2(p, n, ahead);
#endif
    uint64_t acc[8] = {0};
    size_t i = 0;
    if (ahead)
        for (; i + 8 + ahead <= n; i += 8) {
            __builtin_prefetch(p + i + ahead, 0, 3);
            for (size_t l = 0; l < 8; l++)
                acc[l] += p[i + l];
        }
    for (; i + 8 <= n; i += 8)
        for (size_t l = 0; l < 8; l++)
            acc[l] += p[i + l];
    for (; i < n; i++)
        acc[0] += p[i];
    uint64_t total = 0;
    for (size_t l = 0; l < 8; l++)
        total += acc[l];
    return total;
}

static void *sum_words(void *arg)
{
    sum_job *job = arg;
    uint64_t total = 0;
    for (;;) {
        const size_t first = atomic_fetch_add(job->next, 1) * CHUNK_WORDS;
        if (first >= job->n)
            break;
        const size_t len =
            job->n - first < CHUNK_WORDS ? job->n - first : CHUNK_WORDS;
        total += sum_range(job->p + first, len, job->ahead);
    }
    job->result = total;
    return NULL;
}

/* The result is kept in a volatile sink so the sums cannot be elided. */
static volatile uint64_t bandwidth_sink;

enum { MAX_THREADS = 16, MAX_REPS = 32 };

/* Seconds of one pass over buf, split over `threads`, prefetching
 * ahead_bytes ahead (0: not). */
static double one_pass(const uint64_t *buf, size_t words, int threads,
                       size_t ahead_bytes)
{
    sum_job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    int started[MAX_THREADS];
    atomic_size_t next = 0;
    double t0 = bench_now();
    for (int t = 0; t < threads; t++) {
        jobs[t].p = buf;
        jobs[t].n = words;
        jobs[t].ahead = ahead_bytes / sizeof(uint64_t);
        jobs[t].next = &next;
        started[t] =
            t > 0 && pthread_create(&tid[t], NULL, sum_words, &jobs[t]) == 0;
    }
    for (int t = 0; t < threads; t++)
        if (!started[t])
            sum_words(&jobs[t]); /* the caller's claims (a failed create's) */
    for (int t = 1; t < threads; t++)
        if (started[t])
            pthread_join(tid[t], NULL);
    double seconds = bench_now() - t0;
    for (int t = 0; t < threads; t++)
        bandwidth_sink += jobs[t].result;
    return seconds;
}

double bench_read_bandwidth(size_t bytes, int threads, int reps,
                            size_t *ahead_bytes)
{
    if (threads < 1 || threads > MAX_THREADS || reps < 1 || reps > MAX_REPS)
        return -1.0;
    size_t words = bytes / sizeof(uint64_t);
    uint64_t *buf = bench_alloc(words * sizeof(uint64_t));
    if (!buf)
        return -1.0;
    for (size_t i = 0; i < words; i++)
        buf[i] = i;
    /* the strategies alternated, so that drifts of a shared machine hit
     * all of them */
    double times[PROBE_STRATEGIES][MAX_REPS];
    for (int r = 0; r < reps; r++)
        for (int k = 0; k < PROBE_STRATEGIES; k++)
            times[k][r] = one_pass(buf, words, threads, PROBE_AHEAD[k]);
    free(buf);
    int best = 0;
    double best_s = 0;
    for (int k = 0; k < PROBE_STRATEGIES; k++) {
        double m = bench_median(times[k], reps);
        if (k == 0 || m < best_s)
            best = k, best_s = m;
    }
    if (ahead_bytes)
        *ahead_bytes = PROBE_AHEAD[best];
    return (double)(words * sizeof(uint64_t)) / best_s;
}

double bench_stream_sum(const void *const *bufs, const size_t *bytes, int n,
                        int threads, size_t ahead_bytes)
{
    if (threads < 1 || threads > MAX_THREADS)
        return -1.0;
    double seconds = 0.0;
    for (int i = 0; i < n; i++)
        seconds += one_pass(bufs[i], bytes[i] / sizeof(uint64_t), threads,
                            ahead_bytes);
    return seconds;
}

static size_t sysfs_size(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    unsigned long long v = 0;
    char unit = 0;
    int got = fscanf(f, "%llu%c", &v, &unit);
    fclose(f);
    if (got < 1)
        return 0;
    return (size_t)v * (unit == 'K' ? 1024u : unit == 'M' ? 1048576u : 1u);
}

size_t bench_llc_bytes(void)
{
    /* sysfs first: what the kernel found; glibc's sysconf computes L3
     * from cpuid leaves that some hypervisors fill with the host's
     * (320 MiB for the 32 MiB L3 of a 2-core EPYC guest) */
    size_t best = 0;
    char path[96];
    for (int i = 0; i < 8; i++) { /* the largest cache cpu0 reports */
        snprintf(path, sizeof path,
                 "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        size_t b = sysfs_size(path);
        best = b > best ? b : best;
    }
#ifdef _SC_LEVEL3_CACHE_SIZE
    long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
    if (best == 0 && l3 > 0)
        best = (size_t)l3;
#endif
    return best;
}
