/* The helpers every fuzz target shares; see fuzz_common.h. */
#include "fuzz_common.h"
#include "quant_codec.h"

#include <cpuid.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Input and reports.                                                        */
/* ------------------------------------------------------------------------ */
static uint8_t g_in[FZ_MAX_FIELDS];
long fz_tolerated[8];
const char *fz_target = "fuzz";
int fz_verbose;
char fz_desc[2048];

void fz_load(const uint8_t *data, size_t size)
{
    fz_free_bufs();
    memset(g_in, 0, sizeof g_in);
    memcpy(g_in, data, size < sizeof g_in ? size : sizeof g_in);
    fz_desc[0] = '\0';
}

unsigned fz(int field)
{
    return field >= 0 && field < FZ_MAX_FIELDS ? g_in[field] : 0u;
}

uint64_t fz_seed64(int first)
{
    uint64_t s = 0;
    for (int i = 0; i < 8; i++)
        s = s << 8 | fz(first + i);
    return s;
}

void fz_fail(int line, const char *cond, const char *fmt, ...)
{
    fprintf(stderr, "\n%s: CHECK FAILED (line %d): %s\n  ", fz_target, line,
            cond);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  call: %s\n", fz_desc);
    abort();
}

void fz_describe(const char *fmt, ...)
{
    size_t at = strlen(fz_desc);
    if (at + 1 >= sizeof fz_desc)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(fz_desc + at, sizeof fz_desc - at, fmt, ap);
    va_end(ap);
}

/* ------------------------------------------------------------------------ */
/* PRNG.                                                                     */
/* ------------------------------------------------------------------------ */
static uint64_t g_rng;

void fz_rng_seed(uint64_t seed)
{
    g_rng = seed;
}

uint64_t fz_rnd(void)
{
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

double fz_unit(void)
{
    return (double)(fz_rnd() >> 11) * 0x1p-53;
}

double fz_sym(double a)
{
    return a * (2.0 * fz_unit() - 1.0);
}

int64_t fz_below(int64_t n)
{
    return (int64_t)(fz_rnd() % (uint64_t)n);
}

/* ------------------------------------------------------------------------ */
/* Counting allocator and contexts.                                          */
/* ------------------------------------------------------------------------ */
fz_alloc_stats fz_as;
fz_options fz_opt;

/* A header before each block holds its size and alignment. */
static void *ca_alloc(void *opaque, size_t size, size_t alignment)
{
    fz_alloc_stats *s = opaque;
    if (alignment == 0 || (alignment & (alignment - 1)) != 0 ||
        alignment > 4096) {
        s->bad_align++;
        return NULL;
    }
    if (s->fail_at >= 0 && s->allocs + s->refused >= s->fail_at) {
        s->refused++;
        return NULL;
    }
    size_t al = alignment < 16 ? 16 : alignment;
    if (size > ((size_t)1 << 40)) { /* a terabyte: refused like malloc */
        s->refused++;
        return NULL;
    }
    size_t total = (size + al + al - 1) / al * al;
    unsigned char *base = aligned_alloc(al, total);
    if (!base)
        return NULL;
    memcpy(base + al - sizeof(size_t), &size, sizeof size);
    memcpy(base + al - 2 * sizeof(size_t), &al, sizeof al);
    s->allocs++;
    s->live++;
    return base + al;
}

static void ca_free(void *opaque, void *ptr, size_t size)
{
    fz_alloc_stats *s = opaque;
    if (!ptr)
        return;
    unsigned char *p = ptr;
    size_t got, al;
    memcpy(&got, p - sizeof(size_t), sizeof got);
    memcpy(&al, p - 2 * sizeof(size_t), sizeof al);
    if (got != size)
        s->bad_free++;
    s->frees++;
    s->live--;
    free(p - al);
}

sdpa_ctx *fz_ctx_new(void)
{
    memset(&fz_as, 0, sizeof fz_as);
    fz_as.fail_at = -1;
    sdpa_allocator al;
    memset(&al, 0, sizeof al);
    al.struct_size = sizeof al;
    al.alloc = ca_alloc;
    al.free = ca_free;
    al.opaque = &fz_as;
    sdpa_ctx *ctx = NULL;
    int st = sdpa_ctx_create_with_allocator(&ctx, &al);
    CHECK(st == SDPA_OK && ctx, "ctx create: %d", st);
    CHECK(sdpa_ctx_last_error(ctx)[0] == '\0', "fresh context has a message");
    memset(&fz_opt, 0, sizeof fz_opt);
    fz_opt.threads = 1;
    return ctx;
}

void fz_ctx_end(sdpa_ctx *ctx)
{
    sdpa_ctx_destroy(ctx);
    CHECK(fz_as.live == 0, "%ld allocations leaked by the context", fz_as.live);
    CHECK(fz_as.bad_free == 0, "free with a wrong size");
    CHECK(fz_as.bad_align == 0, "bad alignment requested");
}

long fz_alloc_count(void)
{
    return fz_as.allocs + fz_as.refused;
}

/* F16C from CPUID leaf 1 (ECX bit 29): clang 14 does not know "f16c" in
 * __builtin_cpu_supports. Both vector kernel sets need it (sdpa.h). */
static int fz_cpu_has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}

static int fz_kernel_supported(int64_t k)
{
    __builtin_cpu_init();
    if (k == SDPA_KERNEL_AVX2)
        return __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && fz_cpu_has_f16c();
    if (k == SDPA_KERNEL_AVX512)
        return __builtin_cpu_supports("avx2") &&
               __builtin_cpu_supports("fma") && fz_cpu_has_f16c() &&
               __builtin_cpu_supports("avx512f") &&
               __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
    return 1;
}

/* Values of each option: its range, and values outside it. -1 threads and
 * path 4 are outside the ranges below but named values
 * (SDPA_NUM_THREADS_ALL, SDPA_PATH_DECODE_BLAS): always accepted. */
static int64_t opt_value(int id, unsigned v)
{
    static const int64_t scratch[10] = {
        0, 1, 64, 1024, 4096, 65536, 2 << 20, INT64_MAX, -1, INT64_MIN};
    static const int64_t blocks[16] = {
        0,  1,         2, 3,  4,  5, 8, 16, 64, 1 << 20, (1 << 20) + 1,
        -1, INT64_MAX, 7, 13, 100};
    unsigned m = v % 8, hi = v >> 3;
    switch (id) {
    case SDPA_OPT_EMPTY_ROWS: {
        static const int64_t bad[3] = {2, -1, INT64_MAX};
        return m < 4 ? (int64_t)(v & 1) : m < 7 ? 1 : bad[hi % 3];
    }
    case SDPA_OPT_NUM_THREADS: {
        static const int64_t bad[4] = {0, -1, 257, INT64_MIN};
        return m < 6    ? 1 + (int64_t)(v % 3)
               : m == 6 ? bad[hi % 4]
                        : 1 + (int64_t)(hi % 3);
    }
    case SDPA_OPT_KERNEL: {
        static const int64_t bad[4] = {4, -1, 1000, INT64_MAX};
        return m < 4 ? (int64_t)m : m < 7 ? (int64_t)(hi % 4) : bad[hi % 4];
    }
    case SDPA_OPT_PATH: {
        static const int64_t bad[3] = {4, -1, INT64_MIN};
        return m < 4 ? (int64_t)m : m < 7 ? 1 + (int64_t)(hi % 3) : bad[hi % 3];
    }
    case SDPA_OPT_SCRATCH_LIMIT:
        return scratch[v % 10];
    case SDPA_OPT_BLOCK_Q:
    case SDPA_OPT_BLOCK_K:
        return blocks[v % 16];
    default:
        return (int64_t)v - 128;
    }
}

static int opt_id(unsigned v)
{
    static const int ids[16] = {0,
                                1,
                                2,
                                3,
                                4,
                                5,
                                6,
                                7,
                                0,
                                8,
                                999,
                                1000,
                                -1,
                                INT_MAX,
                                SDPA_OPT_PATH,
                                SDPA_OPT_BLOCK_K};
    return ids[v % 16];
}

int fz_path_streams(int64_t path)
{
    return path == SDPA_PATH_TILED || path >= SDPA_PATH_DECODE;
}

/* The range each known option takes; hi_documented 0 where the header
 * states no maximum. */
static void opt_range(int id, int64_t *lo, int64_t *hi, int *hi_documented)
{
    *lo = 0;
    *hi = INT64_MAX;
    *hi_documented = 1;
    switch (id) {
    case SDPA_OPT_EMPTY_ROWS:
        *hi = 1;
        break;
    case SDPA_OPT_NUM_THREADS:
        *lo = 1;
        *hi = 256;
        break;
    case SDPA_OPT_KERNEL:
    case SDPA_OPT_PATH:
        *hi = 3;
        break;
    default:
        *hi_documented = 0; /* 0 = auto, no stated maximum */
        break;
    }
}

static void remember_option(int id, int64_t value)
{
    switch (id) {
    case SDPA_OPT_EMPTY_ROWS:
        fz_opt.empty_zero = value;
        break;
    case SDPA_OPT_NUM_THREADS:
        fz_opt.threads = value;
        break;
    case SDPA_OPT_KERNEL:
        fz_opt.kernel = value;
        break;
    case SDPA_OPT_PATH:
        fz_opt.path = value;
        break;
    case SDPA_OPT_BLOCK_Q:
        fz_opt.block_q = value;
        break;
    case SDPA_OPT_BLOCK_K:
        fz_opt.block_k = value;
        break;
    default:
        break;
    }
}

void fz_apply_options(sdpa_ctx *ctx, int first)
{
    for (int s = 0; s < 4; s++) {
        unsigned idb = fz(first + 2 * s), vb = fz(first + 2 * s + 1);
        if (idb == 0)
            continue;
        int id = opt_id(idb);
        int64_t value = opt_value(id, vb);
        int known = id >= 1 && id <= 7;
        int64_t before = 0;
        if (known)
            CHECK(sdpa_ctx_get_int(ctx, id, &before) == SDPA_OK, "get_int %d",
                  id);
        int st = sdpa_ctx_set_int(ctx, id, value);
        const char *msg = sdpa_ctx_last_error(ctx);
        CHECK(fz_documented(st), "set_int status %d", st);
        if (!known) {
            CHECK(st == SDPA_ERR_UNKNOWN_OPTION,
                  "set_int(id %d) gave %d, not UNKNOWN_OPTION", id, st);
            int64_t dummy = 12345;
            CHECK(sdpa_ctx_get_int(ctx, id, &dummy) == SDPA_ERR_UNKNOWN_OPTION,
                  "get_int(id %d) accepted an unknown id", id);
            CHECK(dummy == 12345, "a refused get_int wrote its value");
        } else {
            int64_t lo, hi;
            int hi_documented;
            opt_range(id, &lo, &hi, &hi_documented);
            int named =
                (id == SDPA_OPT_NUM_THREADS && value == SDPA_NUM_THREADS_ALL) ||
                (id == SDPA_OPT_PATH && value == SDPA_PATH_DECODE_BLAS);
            if (named)
                CHECK(st == SDPA_OK, "set_int(%d, %lld) gave %d: %s", id,
                      (long long)value, st, msg);
            else if (value < lo || value > hi)
                CHECK(st == SDPA_ERR_BAD_OPTION_VALUE,
                      "set_int(%d, %lld) gave %d, not BAD_OPTION_VALUE", id,
                      (long long)value, st);
            else if (id == SDPA_OPT_KERNEL && !fz_kernel_supported(value))
                CHECK(st == SDPA_ERR_UNSUPPORTED,
                      "forcing kernel %lld the CPU lacks gave %d",
                      (long long)value, st);
            else if (hi_documented || value == 0)
                CHECK(st == SDPA_OK, "set_int(%d, %lld) gave %d: %s", id,
                      (long long)value, st, msg);
            else
                CHECK(st == SDPA_OK || st == SDPA_ERR_BAD_OPTION_VALUE,
                      "set_int(%d, %lld) gave %d", id, (long long)value, st);
            int64_t after = 0;
            CHECK(sdpa_ctx_get_int(ctx, id, &after) == SDPA_OK, "get_int");
            if (st != SDPA_OK)
                CHECK(after == before,
                      "refused set_int(%d, %lld) changed the option %lld -> "
                      "%lld",
                      id, (long long)value, (long long)before,
                      (long long)after);
            else if (id == SDPA_OPT_KERNEL && value == SDPA_KERNEL_AUTO)
                CHECK(after >= 1 && fz_kernel_supported(after),
                      "KERNEL AUTO resolves to %lld", (long long)after);
            else
                CHECK(after == value, "get_int(%d) = %lld after set %lld", id,
                      (long long)after, (long long)value);
            if (st == SDPA_OK)
                remember_option(id, value);
        }
        if (st == SDPA_OK)
            CHECK(msg[0] == '\0', "message after a successful set_int: %s",
                  msg);
        else
            CHECK(msg[0] != '\0', "empty message after set_int status %d", st);
    }
}

/* ------------------------------------------------------------------------ */
/* Statuses and dtypes.                                                      */
/* ------------------------------------------------------------------------ */
int fz_documented(int st)
{
    return st >= 0 && st <= SDPA_ERR_BAD_KV_SCALE;
}

/* "1,5,7" */
static void fz_sset_str(fz_sset s, char *buf, size_t n)
{
    size_t at = 0;
    buf[0] = '\0';
    for (int i = 0; i < 64 && at + 4 < n; i++)
        if (s & FZ_BIT(i))
            at += (size_t)snprintf(buf + at, n - at, "%s%d", at ? "," : "", i);
}

void fz_check_status(const char *what, int st, fz_sset expect,
                     const sdpa_ctx *ctx)
{
    char es[160];
    fz_sset_str(expect, es, sizeof es);
    if (fz_verbose)
        fprintf(stderr, "%s: %s status %d (expected {%s}) %s\n", fz_target,
                what, st, es, fz_desc);
    const char *msg = ctx ? sdpa_ctx_last_error(ctx) : "";
    CHECK(fz_documented(st), "%s gave the undocumented status %d", what, st);
    CHECK((expect & FZ_BIT(st)) != 0,
          "%s gave %d (%s: %s), expected one of {%s}", what, st,
          sdpa_status_string(st), msg, es);
    if (ctx) {
        if (st == SDPA_OK)
            CHECK(msg[0] == '\0', "%s: OK with a message: %s", what, msg);
        else
            CHECK(msg[0] != '\0', "%s: status %d with an empty message", what,
                  st);
    }
}

fz_dtype fz_decode_dtype(unsigned v, unsigned raw)
{
    fz_dtype d = {SDPA_FLOAT32, 1, 0, SDPA_FLOAT32};
    unsigned m = v % 16;
    if (m < 8)
        return d;
    if (m < 14) {
        d.dtype = d.compute = SDPA_FLOAT64;
        return d;
    }
    d.valid = 0;
    if (m == 14) { /* half types on float32 buffers (larger): fuzz_forward
                      takes any documented status; fuzz_storage decodes
                      them fully */
        d.pending = 1;
        d.dtype = raw & 1 ? SDPA_BFLOAT16 : SDPA_FLOAT16;
        return d;
    }
    static const int bad[6] = {0, 5, -1, 255, INT_MAX, INT_MIN};
    d.dtype = bad[raw % 6];
    return d;
}

size_t fz_esize(int compute_dtype)
{
    return compute_dtype == SDPA_FLOAT64 ? sizeof(double) : sizeof(float);
}

/* ------------------------------------------------------------------------ */
/* struct_size.                                                              */
/* ------------------------------------------------------------------------ */
fz_sset fz_pack_struct(unsigned sel, const void *a, size_t size, size_t v1,
                       const size_t *cuts, size_t ncuts, unsigned char *box,
                       size_t box_size, size_t *seen)
{
    if (box_size < size + 16)
        abort();
    memset(box, 0, box_size);
    memcpy(box, a, size);
    size_t ss = size;
    fz_sset errs = 0;
    switch (sel % 32) {
    case 24: /* an older header: its size ends at a field boundary */
        ss = ncuts ? cuts[(sel >> 5) % ncuts] : size;
        break;
    case 25:
        ss = v1;
        break;
    case 26:
        ss = size + 1;
        box[size] = 0x80;
        errs = FZ_BIT(SDPA_ERR_STRUCT_TAIL);
        break;
    case 27:
        ss = 0;
        errs = FZ_BIT(SDPA_ERR_STRUCT_SIZE);
        break;
    case 28:
        ss = v1 - 1;
        errs = FZ_BIT(SDPA_ERR_STRUCT_SIZE);
        break;
    case 29:
        ss = size + 8; /* a zero tail: fine */
        break;
    case 30:
        ss = size + 16;
        box[size + 9] = 1;
        errs = FZ_BIT(SDPA_ERR_STRUCT_TAIL);
        break;
    case 31:
        ss = 1;
        errs = FZ_BIT(SDPA_ERR_STRUCT_SIZE);
        break;
    default:
        break;
    }
    memcpy(box, &ss, sizeof ss);
    *seen = errs ? 0 : ss < size ? ss : size;
    return errs;
}

/* ------------------------------------------------------------------------ */
/* Buffers.                                                                  */
/* ------------------------------------------------------------------------ */
enum { MAX_BUFS = 96, GUARD = 16 };
static int map_view(fz_buf *b, const sdpa_tensor *t, size_t es,
                    int ignore_inner);
static fz_buf g_bufs[MAX_BUFS];
static int g_nbufs;

fz_buf *fz_buf_new(const char *name, int output, size_t bytes)
{
    if (g_nbufs == MAX_BUFS)
        abort();
    fz_buf *b = &g_bufs[g_nbufs++];
    memset(b, 0, sizeof *b);
    b->name = name;
    b->output = output;
    b->bytes = bytes ? bytes : 1;
    size_t all = b->bytes + GUARD;
    b->mem = malloc(all);
    b->snap = malloc(all);
    if (!b->mem || !b->snap)
        abort();
    memset(b->mem, output ? 0xA5 : 0, all);
    if (output) {
        b->map = calloc(all, 1);
        if (!b->map)
            abort();
    }
    return b;
}

void fz_buf_allow(fz_buf *b, size_t offset, size_t n)
{
    if (offset + n > b->bytes)
        abort();
    memset(b->map + offset, 1, n);
}

void fz_snapshot(void)
{
    for (int i = 0; i < g_nbufs; i++)
        memcpy(g_bufs[i].snap, g_bufs[i].mem, g_bufs[i].bytes + GUARD);
}

void fz_restore(void)
{
    for (int i = 0; i < g_nbufs; i++)
        memcpy(g_bufs[i].mem, g_bufs[i].snap, g_bufs[i].bytes + GUARD);
}

void fz_check_buf(const fz_buf *b, int all_bytes, int outside_map,
                  const char *what)
{
    size_t all = b->bytes + GUARD;
    if (!b->output) {
        CHECK(memcmp(b->mem, b->snap, all) == 0, "%s: input %s was written",
              what, b->name);
    } else if (all_bytes) {
        for (size_t k = 0; k < all; k++)
            CHECK(b->mem[k] == b->snap[k],
                  "%s: output %s byte %zu (of %zu) written on a refused call",
                  what, b->name, k, b->bytes);
    } else if (outside_map) {
        for (size_t k = 0; k < all; k++)
            CHECK(b->map[k] || b->mem[k] == b->snap[k],
                  "%s: output %s byte %zu (of %zu) outside its view written",
                  what, b->name, k, b->bytes);
    }
}

void fz_check_bufs(int outputs_all, int outputs_map, const char *what)
{
    for (int i = 0; i < g_nbufs; i++)
        fz_check_buf(&g_bufs[i], outputs_all, outputs_map, what);
}

void fz_buf_as_output(fz_tens *x)
{
    fz_buf *b = x->b;
    if (b->output)
        return;
    b->output = 1;
    b->map = calloc(b->bytes + GUARD, 1);
    if (!b->map)
        abort();
    (void)map_view(b, &x->t, x->es, x->t.shape[3] == 1);
}

unsigned char *fz_outputs_copy(size_t *n)
{
    size_t total = 0;
    for (int i = 0; i < g_nbufs; i++)
        if (g_bufs[i].output)
            total += g_bufs[i].bytes;
    unsigned char *p = malloc(total ? total : 1);
    if (!p)
        abort();
    size_t at = 0;
    for (int i = 0; i < g_nbufs; i++)
        if (g_bufs[i].output) {
            memcpy(p + at, g_bufs[i].mem, g_bufs[i].bytes);
            at += g_bufs[i].bytes;
        }
    *n = total;
    return p;
}

void fz_second_call(sdpa_ctx *ctx, unsigned v, int st, fz_call_fn call,
                    const void *args, const char *outputs)
{
    const unsigned second = v % 4;
    if (second != 1 && second != 2)
        return;
    size_t n1;
    unsigned char *first = fz_outputs_copy(&n1);
    fz_restore();
    int64_t th = fz_opt.threads;
    if (second == 1) {
        th = 1 + (int64_t)((v >> 2) % 3);
        CHECK(sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, th) == SDPA_OK,
              "threads");
    }
    long a0 = fz_alloc_count();
    int st2 = call(ctx, args);
    CHECK(st2 == st, "status %d with %lld threads, %d with %lld", st,
          (long long)fz_opt.threads, st2, (long long)th);
    if (st == SDPA_OK && second == 2)
        CHECK(fz_alloc_count() == a0, "a repeated call allocated");
    if (st != SDPA_ERR_NONFINITE) {
        size_t n2;
        unsigned char *again = fz_outputs_copy(&n2);
        CHECK(n1 == n2 && memcmp(first, again, n1) == 0,
              "%s differ between %lld and %lld threads", outputs,
              (long long)fz_opt.threads, (long long)th);
        free(again);
    }
    free(first);
}

void fz_free_bufs(void)
{
    for (int i = 0; i < g_nbufs; i++) {
        free(g_bufs[i].mem);
        free(g_bufs[i].snap);
        free(g_bufs[i].map);
    }
    memset(g_bufs, 0, sizeof g_bufs);
    g_nbufs = 0;
}

/* ------------------------------------------------------------------------ */
/* Views.                                                                    */
/* ------------------------------------------------------------------------ */
int64_t fz_off4(const sdpa_tensor *t, int64_t a, int64_t b, int64_t c,
                int64_t d)
{
    return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] +
           d * t->stride[3];
}

int64_t fz_bix(const sdpa_tensor *t, int d, int64_t i)
{
    return t->shape[d] == 1 ? 0 : i;
}

size_t fz_small_span(const sdpa_tensor *t)
{
    uint64_t span = 1;
    for (int d = 0; d < 4; d++) {
        if (t->shape[d] <= 0 || t->shape[d] > (1 << 20))
            return 0;
        if (t->shape[d] == 1)
            continue;
        uint64_t s = (uint64_t)(t->stride[d] < 0 ? -(t->stride[d] + 1) + 1
                                                 : t->stride[d]);
        if (s > (1u << 24))
            return 0;
        span += (uint64_t)(t->shape[d] - 1) * s;
        if (span > (1u << 24))
            return 0;
    }
    return (size_t)span;
}

int64_t fz_sat_mul(int64_t a, int64_t b)
{
    int64_t r;
    if (a < 0 || b < 0)
        return 0;
    if (__builtin_mul_overflow(a, b, &r))
        return INT64_MAX;
    return r;
}

void fz_set_layout(sdpa_tensor *t, int64_t n, int64_t h, int64_t tt, int64_t d,
                   int bthd, int64_t pad)
{
    t->shape[0] = n;
    t->shape[1] = h;
    t->shape[2] = tt;
    t->shape[3] = d;
    t->stride[3] = 1;
    if (!bthd) {
        int64_t row = d + pad;
        t->stride[2] = row;
        t->stride[1] = fz_sat_mul(tt, row);
        t->stride[0] = fz_sat_mul(h, t->stride[1]);
    } else {
        int64_t row = fz_sat_mul(h, d) + pad;
        t->stride[1] = d;
        t->stride[2] = row;
        t->stride[0] = fz_sat_mul(tt, row);
    }
}

void fz_broadcast_layout(sdpa_tensor *x, unsigned modes, const int64_t full[4])
{
    int64_t run = 1;
    for (int d = 3; d >= 0; d--) {
        unsigned m = (modes >> (2 * d)) & 3;
        x->shape[d] = m == 1 ? 1 : full[d];
        x->stride[d] = m == 1 || m == 2 ? 0 : run;
        if (m == 0 || m == 3)
            run *= full[d];
    }
}

void fz_decode_causal_window(sdpa_forward_args *a, unsigned causal,
                             unsigned window)
{
    unsigned cv = causal % 4;
    a->causal = cv == 1   ? SDPA_CAUSAL_TOP_LEFT
                : cv == 2 ? SDPA_CAUSAL_BOTTOM_RIGHT
                          : SDPA_CAUSAL_NONE;
    if (window % 4 == 1) {
        a->flags |= SDPA_FLAG_WINDOW;
        a->window_left = (int64_t)(window >> 2 & 3) - 1;
        a->window_right = (int64_t)(window >> 4 & 3) - 1;
    }
}

int fz_sorted_rule(const sdpa_tensor *t, int ignore_inner)
{
    int order[4], n = 0;
    for (int d = 0; d < 4; d++)
        if (t->shape[d] > 1 && !(ignore_inner && d == 3))
            order[n++] = d;
    for (int a = 1; a < n; a++)
        for (int b = a; b > 0 && t->stride[order[b]] < t->stride[order[b - 1]];
             b--) {
            int x = order[b];
            order[b] = order[b - 1];
            order[b - 1] = x;
        }
    int64_t covered = 0;
    for (int a = 0; a < n; a++) {
        int64_t s = t->stride[order[a]];
        if (s <= covered)
            return 0;
        covered += (t->shape[order[a]] - 1) * s;
    }
    return 1;
}

double fz_get_raw(const void *data, size_t es, int64_t off)
{
    if (es == 1)
        return (double)((const unsigned char *)data)[off];
    if (es == sizeof(float))
        return (double)((const float *)data)[off];
    return ((const double *)data)[off];
}

void fz_set_raw(void *data, size_t es, int64_t off, double v)
{
    if (es == 1)
        ((unsigned char *)data)[off] = (unsigned char)v;
    else if (es == sizeof(float)) /* beyond float: inf, not UB */
        ((float *)data)[off] = isfinite(v) && fabs(v) > FLT_MAX
                                   ? (float)copysign(INFINITY, v)
                                   : (float)v;
    else
        ((double *)data)[off] = v;
}

double fz_get(const fz_tens *x, int64_t off)
{
    return fz_get_raw(x->t.data, x->es, off);
}

void fz_set(fz_tens *x, int64_t off, double v)
{
    fz_set_raw(x->t.data, x->es, off, v);
}

/* Maps the bytes of an output's logical view; 1 when no element is
 * reached twice, 0 when one is, -1 when the view leaves the buffer. */
static int map_view(fz_buf *b, const sdpa_tensor *t, size_t es,
                    int ignore_inner)
{
    int injective = 1;
    const int64_t *s = t->shape;
    for (int64_t a = 0; a < s[0]; a++)
        for (int64_t c = 0; c < s[1]; c++)
            for (int64_t r = 0; r < s[2]; r++)
                for (int64_t d = 0; d < (ignore_inner ? 1 : s[3]); d++) {
                    int64_t o = fz_off4(t, a, c, r, d);
                    if (o < 0 || (size_t)(o + 1) * es > b->bytes)
                        return -1;
                    if (b->map[(size_t)o * es])
                        injective = 0;
                    memset(b->map + (size_t)o * es, 1, es);
                }
    return injective;
}

int fz_tens_alloc(fz_tens *x, const char *name, int output,
                  size_t fallback_span)
{
    size_t span = fz_small_span(&x->t);
    int small = span != 0;
    if (!small)
        span = fallback_span ? fallback_span : 1;
    x->b = fz_buf_new(name, output, span * x->es);
    x->t.data = x->b->mem;
    if (output) {
        if (!small)
            return -1;
        int row_vec = x->t.shape[3] == 1;
        return map_view(x->b, &x->t, x->es, row_vec);
    }
    if (x->es == 1)
        memset(x->b->mem, 0xEE, x->b->bytes);
    else
        for (size_t i = 0; i < span; i++)
            fz_set_raw(x->b->mem, x->es, (int64_t)i, NAN);
    return 1;
}

void *fz_top_ptr(int k)
{
    uintptr_t p = UINTPTR_MAX - ((uintptr_t)(k + 1) << 24) + 1;
    return (void *)(p & ~(uintptr_t)63);
}

/* ------------------------------------------------------------------------ */
/* Values.                                                                   */
/* ------------------------------------------------------------------------ */
const double fz_special_reals[16] = {
    -0.0,    NAN,   INFINITY, -INFINITY, 1e-310, -1.0,    1e39,     DBL_MAX,
    FLT_MAX, 1e-45, 3.4e38,   1e-30,     1e30,   DBL_MIN, -DBL_MIN, 5e-324};

double fz_decode_scale(unsigned v, unsigned frac, int is_cap)
{
    unsigned m = v % 16;
    if (!is_cap) {
        if (m < 4)
            return 0.0;
        if (m < 6)
            return 1.0;
        if (m < 12)
            return 0.05 + 1.5 * (double)frac / 255.0;
    } else {
        if (m < 8)
            return 0.0;
        if (m < 9)
            return 1.0;
        if (m < 10)
            return 5.0;
        if (m < 11)
            return 30.0;
        if (m < 12)
            return 0.5 + 50.0 * (double)frac / 255.0;
    }
    return fz_special_reals[(v >> 4) % 16];
}

void fz_quant_units(unsigned char *u, int type, size_t bytes)
{
    /* d of exponent field in [lo, lo + 3]: values up to about 2 */
    const int lo = type == SDPA_Q4_0 ? 10 : 6;
    const size_t ub = quant_codec_unit_bytes(type);
    for (size_t k = 0; k + ub <= bytes; k += ub) {
        if (!quant_codec_is_block(type)) {
            uint8_t code;
            do
                code = (uint8_t)fz_rnd();
            while (!quant_codec_fp8_finite(code, type));
            u[k] = code;
            continue;
        }
        uint16_t d = (uint16_t)((fz_rnd() & 1) << 15 |
                                (uint64_t)(lo + (int)fz_below(4)) << 10 |
                                fz_rnd() % 1024);
        if (fz_below(16) == 0)
            d &= 0x83ff; /* a subnormal or zero d */
        u[k] = (unsigned char)(d & 0xff);
        u[k + 1] = (unsigned char)(d >> 8);
        for (size_t i = 2; i < ub; i++)
            u[k + i] = (unsigned char)fz_rnd();
    }
}

int64_t fz_small_dim(unsigned v, int64_t lo, int64_t hi)
{
    return v < 224 ? 1 + (int64_t)(v % (unsigned)lo)
                   : 1 + (int64_t)(v % (unsigned)hi);
}

/* ------------------------------------------------------------------------ */
/* Seeds and start-up.                                                       */
/* ------------------------------------------------------------------------ */
static int write_seed(const char *dir, size_t index, const char *name,
                      const uint8_t *bytes, size_t len)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/%02zu_%s", dir, index, name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(bytes, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "cannot write %s\n", path);
        return 1;
    }
    LLVMFuzzerTestOneInput(bytes, len); /* each seed passes the checks */
    return 0;
}

static int write_seeds(const char *dir, const char *default_seed,
                       const fz_seed *seeds, size_t count)
{
    const uint8_t empty[1] = {0};
    if (write_seed(dir, 0, default_seed, empty, sizeof empty))
        return 1;
    for (size_t s = 0; s < count; s++) {
        uint8_t bytes[FZ_MAX_FIELDS];
        memset(bytes, 0, sizeof bytes);
        size_t len = 0;
        for (int i = 0; i < 28 && seeds[s].set[i].f >= 0; i++) {
            bytes[seeds[s].set[i].f] = (uint8_t)seeds[s].set[i].v;
            if ((size_t)seeds[s].set[i].f + 1 > len)
                len = (size_t)seeds[s].set[i].f + 1;
        }
        if (len == 0)
            len = 1;
        if (write_seed(dir, s + 1, seeds[s].name, bytes, len))
            return 1;
    }
    fprintf(stderr, "%s: wrote %zu seeds to %s\n", fz_target, count + 1, dir);
    return 0;
}

static void print_tolerated(void)
{
    fprintf(stderr, "%s: inputs that met a tolerated finding:", fz_target);
    for (int i = 1; i < 8; i++)
        fprintf(stderr, " %d: %ld", i, fz_tolerated[i]);
    fprintf(stderr, "\n");
}

void fz_init(const char *target, const char *upper, const char *default_seed,
             const fz_seed *seeds, size_t count)
{
    fz_target = target;
    char name[128];
    snprintf(name, sizeof name, "FUZZ_%s_VERBOSE", upper);
    const char *verbose = getenv(name);
    fz_verbose = verbose ? atoi(verbose) : 0;
    if (fz_verbose)
        atexit(print_tolerated);
    snprintf(name, sizeof name, "FUZZ_%s_WRITE_CORPUS", upper);
    const char *dir = getenv(name);
    if (dir && *dir)
        exit(write_seeds(dir, default_seed, seeds, count));
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const fz_target_def *t = &fz_this_target;
    fz_init(t->name, t->upper, t->default_seed, t->seeds, t->seed_count);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const fz_target_def *t = &fz_this_target;
    fz_load(data, size);
    fz_rng_seed(fz_seed64(t->seed_field));
    if (t->reset)
        t->reset();
    if (t->run_huge && fz(t->huge_field) % 8 == 7)
        t->run_huge();
    else
        t->run();
    fz_free_bufs();
    return 0;
}
