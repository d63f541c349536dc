/* The half-precision, quantized and paged shapes (Gh, Gb, G8h, Ah, Ph, Ph64,
 * Gq8, Gq4, Gf8, Pq8, Aq8): what an inference engine hands libsdpa. Their
 * inputs are first rounded to values the storage type holds exactly
 * (quantized by ggml's reference method for Q8_0 and Q4_0), so that the float32
 * naive baseline, run on the same values, is the reference; libsdpa gets typed
 * copies (and a page pool with a shuffled block table). Pages are head-major,
 * [page][head][slot][dim] (vLLM's blocks keep a head's keys together
 * too): a head's page is one contiguous run of rows. The slot-major
 * layout [page][slot][head][dim] (FlashAttention's k_cache) is also
 * accepted by the library, but one head's rows are then Hkv · D apart. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

size_t bench_type_size(int type)
{
    switch (type) {
    case SDPA_FLOAT64:
        return 8;
    case SDPA_FLOAT16:
    case SDPA_BFLOAT16:
        return 2;
    default:
        return 4;
    }
}

size_t bench_type_bytes(int type, size_t count)
{
    switch (type) {
    case SDPA_Q8_0:
        return count / 32 * 34;
    case SDPA_Q4_0:
        return count / 32 * 18;
    case SDPA_FP8_E4M3:
    case SDPA_FP8_E5M2:
        return count;
    default:
        return count * bench_type_size(type);
    }
}

/* Significand bits a storage type keeps (the leading one included). */
static int kept_bits(int type)
{
    return type == SDPA_FLOAT16 ? 11 : type == SDPA_BFLOAT16 ? 8 : 24;
}

/* x rounded to `bits` significant bits (inputs are far from the half
 * types' range limits: |x| < 4). */
static float round_to(float x, int bits)
{
    if (x == 0 || bits >= 24)
        return x;
    int e;
    frexpf(x, &e);
    float unit = ldexpf(1.0f, e - bits);
    return nearbyintf(x / unit) * unit;
}

/* Bits of x in `type`: x is exactly representable and normal (or 0). */
static uint16_t half_bits(float x, int type)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if (type == SDPA_BFLOAT16)
        return (uint16_t)(u >> 16);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    if ((u & 0x7fffffffu) == 0)
        return sign;
    int e;
    float m = frexpf(fabsf(x), &e); /* |x| = m · 2^e, m in [0.5, 1) */
    unsigned mant = (unsigned)ldexpf(2 * m - 1, 10);
    return (uint16_t)(sign | (unsigned)(e + 14) << 10 | mant);
}

float bench_half_value(uint16_t h, int type)
{
    if (type == SDPA_BFLOAT16) {
        uint32_t u = (uint32_t)h << 16;
        float f;
        memcpy(&f, &u, sizeof f);
        return f;
    }
    int e = (h >> 10) & 31, mant = h & 1023;
    float v = e == 31  ? (mant ? NAN : INFINITY)
              : e == 0 ? ldexpf((float)mant, -24)
                       : ldexpf((float)(mant + 1024), e - 25);
    return h & 0x8000u ? -v : v;
}

/* The quantized types, written from their formats (include/sdpa.h), not
 * from the library's code. E4M3 (bias 7, 3 mantissa bits, subnormals
 * m · 2^-9; |x| < 4 here, far below its 448): x rounded to it, and its
 * code. */
static unsigned char e4m3_code(float *x)
{
    float a = fabsf(*x), v;
    unsigned field, mant;
    if (a < 0x1p-6f) {
        v = nearbyintf(a * 512) / 512;
        field = 0;
        mant = (unsigned)(v * 512);
    } else {
        v = round_to(a, 4);
        int e;
        float m = frexpf(v, &e); /* v = m · 2^e, m in [0.5, 1) */
        field = (unsigned)(e - 1 + 7);
        mant = (unsigned)((2 * m - 1) * 8);
    }
    if (field == 0 && mant == 8) /* rounded up into the normals */
        field = 1, mant = 0;
    *x = *x < 0 ? -v : v;
    return (unsigned char)((*x < 0 ? 0x80u : 0) | field << 3 | mant);
}

/* ggml's reference quantizers for 32 values (quantize_row_q8_0_ref,
 * quantize_row_q4_0_ref), writing the block and the values it decodes to
 * back into x (d rounded to float16, as stored). */
static void q8_0_block(float *x, unsigned char *block)
{
    float amax = 0;
    for (int i = 0; i < 32; i++)
        amax = fmaxf(amax, fabsf(x[i]));
    const float d = amax / 127, id = d != 0 ? 1 / d : 0;
    const float d16 = round_to(d, 11);
    const uint16_t bits = half_bits(d16, SDPA_FLOAT16);
    memcpy(block, &bits, 2);
    for (int i = 0; i < 32; i++) {
        const int q = (int)nearbyintf(x[i] * id);
        block[2 + i] = (unsigned char)(int8_t)q;
        x[i] = d16 * (float)q;
    }
}

static void q4_0_block(float *x, unsigned char *block)
{
    float amax = 0, max = 0;
    for (int i = 0; i < 32; i++)
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    const float d = max / -8, id = d != 0 ? 1 / d : 0;
    const float d16 = round_to(d, 11);
    const uint16_t bits = half_bits(d16, SDPA_FLOAT16);
    memcpy(block, &bits, 2);
    int q[32];
    for (int i = 0; i < 32; i++) {
        const int v = (int)(x[i] * id + 8.5f);
        q[i] = v < 15 ? v : 15;
        x[i] = d16 * (float)(q[i] - 8);
    }
    for (int i = 0; i < 16; i++)
        block[2 + i] = (unsigned char)(q[i] | q[i + 16] << 4);
}

static void *quant_copy(float *x, size_t count, int type, int *failed)
{
    unsigned char *c = bench_alloc(bench_type_bytes(type, count));
    if (!c) {
        *failed = 1;
        return NULL;
    }
    if (type == SDPA_FP8_E4M3)
        for (size_t i = 0; i < count; i++)
            c[i] = e4m3_code(&x[i]);
    else
        for (size_t b = 0; b < count / 32; b++)
            (type == SDPA_Q8_0 ? q8_0_block : q4_0_block)(
                x + 32 * b, c + bench_type_bytes(type, 32) * b);
    return c;
}

void *bench_typed_copy(float *x, size_t count, int type, int *failed)
{
    if (type == 0 || type == SDPA_FLOAT32)
        return NULL;
    if (type == SDPA_FP8_E4M3 || type == SDPA_Q8_0 || type == SDPA_Q4_0)
        return quant_copy(x, count, type, failed);
    uint16_t *c = bench_alloc(count * sizeof *c);
    if (!c) {
        *failed = 1;
        return NULL;
    }
    for (size_t i = 0; i < count; i++) {
        x[i] = isnan(x[i]) ? x[i] : round_to(x[i], kept_bits(type));
        if (type == SDPA_FLOAT16 && fabsf(x[i]) < 0x1p-14f)
            x[i] = 0; /* below float16's normals: not kept to 11 bits */
        c[i] = isnan(x[i]) ? (uint16_t)0x7e00u : half_bits(x[i], type);
    }
    return c;
}

void bench_scatter_pages(char *pool, const char *src, size_t es, int64_t hkv,
                         int64_t tk, int64_t dim, int64_t len, int64_t page,
                         const int32_t *table_row)
{
    size_t row = (size_t)dim * es;
    size_t page_bytes = (size_t)(hkv * page) * row;
    for (int64_t h = 0; h < hkv; h++)
        for (int64_t j = 0; j < len; j++) {
            size_t at = (size_t)table_row[j / page] * page_bytes +
                        (size_t)(h * page + j % page) * row;
            memcpy(pool + at, src + (size_t)(h * tk + j) * row, row);
        }
}

void bench_shuffle_pages(int32_t *ids, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        ids[i] = (int32_t)i;
    uint64_t state = 12345;
    for (int64_t i = count - 1; i > 0; i--) {
        state = state * 6364136223846793005ull + 1442695040888963407ull;
        int64_t j = (int64_t)((state >> 33) % (uint64_t)(i + 1));
        int32_t t = ids[i];
        ids[i] = ids[j];
        ids[j] = t;
    }
}

/* A pool of pages [page][head][slot][dim] holding the [N, Hkv, Tk, D]
 * tensor src (of `type`), pages assigned by the table. */
static void *page_pool(const void *src, int type, const bench_shape *s,
                       int64_t dim, const int32_t *table, int64_t per_seq,
                       int64_t pages)
{
    /* rows as bytes: a quantized row is blocks, not elements */
    const size_t row = bench_type_bytes(type, (size_t)dim);
    size_t page_bytes = (size_t)(s->hkv * s->page) * row;
    char *pool = bench_alloc((size_t)pages * page_bytes);
    if (!pool)
        return NULL;
    memset(pool, 0xff, (size_t)pages * page_bytes); /* NaN if read */
    for (int64_t b = 0; b < s->n; b++)
        bench_scatter_pages(
            pool, (const char *)src + (size_t)(b * s->hkv * s->tk) * row, 1,
            s->hkv, s->tk, (int64_t)row, s->tk, s->page, table + b * per_seq);
    return pool;
}

static int make_pages(bench_data *d)
{
    const bench_shape *s = d->shape;
    int kv = s->kv_type ? s->kv_type : SDPA_FLOAT32;
    int64_t per_seq = (s->tk + s->page - 1) / s->page;
    int64_t pages = s->n * per_seq;
    d->table = malloc((size_t)pages * sizeof *d->table);
    if (!d->table)
        return -1;
    bench_shuffle_pages(d->table, pages);
    void *k = page_pool(d->k_lib ? d->k_lib : d->k, kv, s, s->dk, d->table,
                        per_seq, pages);
    void *v = page_pool(d->v_lib ? d->v_lib : d->v, kv, s, s->dv, d->table,
                        per_seq, pages);
    free(d->k_lib);
    free(d->v_lib);
    d->k_lib = k;
    d->v_lib = v;
    d->k_lib_bytes =
        bench_type_bytes(kv, (size_t)(pages * s->hkv * s->page * s->dk));
    d->v_lib_bytes =
        bench_type_bytes(kv, (size_t)(pages * s->hkv * s->page * s->dv));
    if (!k || !v)
        return -1;
    sdpa_forward_args *a = &d->args;
    const int64_t kstride[4] = {s->hkv * s->page * s->dk, s->page * s->dk,
                                s->dk, 1};
    const int64_t vstride[4] = {s->hkv * s->page * s->dv, s->page * s->dv,
                                s->dv, 1};
    a->k = (sdpa_tensor){k, {pages, s->hkv, s->page, s->dk}, {0}};
    a->v = (sdpa_tensor){v, {pages, s->hkv, s->page, s->dv}, {0}};
    memcpy(a->k.stride, kstride, sizeof kstride);
    memcpy(a->v.stride, vstride, sizeof vstride);
    a->block_table = d->table;
    a->pages_per_seq = per_seq;
    return 0;
}

int bench_storage_init(bench_data *d)
{
    const bench_shape *s = d->shape;
    if (!s->io_type && !s->kv_type && !s->page)
        return 0;
    size_t nq = (size_t)(s->n * s->hq * s->tq * s->dk);
    size_t nk = (size_t)(s->n * s->hkv * s->tk * s->dk);
    size_t nv = (size_t)(s->n * s->hkv * s->tk * s->dv);
    int failed = 0;
    d->q_lib = bench_typed_copy(d->q, nq, s->io_type, &failed);
    d->k_lib = bench_typed_copy(d->k, nk, s->kv_type, &failed);
    d->v_lib = bench_typed_copy(d->v, nv, s->kv_type, &failed);
    d->k_lib_bytes = d->k_lib ? bench_type_bytes(s->kv_type, nk) : 0;
    d->v_lib_bytes = d->v_lib ? bench_type_bytes(s->kv_type, nv) : 0;
    if (failed)
        return -1;
    sdpa_forward_args *a = &d->args;
    if (s->io_type) {
        a->dtype = s->io_type;
        a->q.data = d->q_lib ? d->q_lib : d->q;
    }
    if (s->kv_type) {
        a->kv_dtype = s->kv_type;
        a->k.data = d->k_lib ? d->k_lib : d->k;
        a->v.data = d->v_lib ? d->v_lib : d->v;
    }
    return s->page ? make_pages(d) : 0;
}

void bench_storage_free(bench_data *d)
{
    free(d->q_lib);
    free(d->k_lib);
    free(d->v_lib);
    free(d->table);
    d->q_lib = d->k_lib = d->v_lib = NULL;
    d->table = NULL;
}

double bench_out_diff(const bench_data *d)
{
    const bench_shape *s = d->shape;
    if (!s->io_type || s->io_type == SDPA_FLOAT32)
        return bench_max_abs_diff(d->out_lib, d->out_ref, d->out_count,
                                  s->dtype);
    double worst = 0;
    for (size_t i = 0; i < d->out_count; i++) {
        double got =
            bench_half_value(((const uint16_t *)d->out_lib)[i], s->io_type);
        double want = ((const float *)d->out_ref)[i];
        double diff = fabs(got - want);
        if (!(diff <= worst)) /* NaN: +inf, never small */
            worst = isnan(diff) ? INFINITY : diff;
    }
    return worst;
}

double bench_out_tolerance(const bench_shape *s)
{
    /* outputs are convex combinations of |v| < 3.5: one rounding of out
     * adds at most 3.5 · 2^-11 (float16) or 3.5 · 2^-8 (bfloat16) */
    double base = bench_tolerance(s->dtype);
    return s->io_type == SDPA_FLOAT16    ? base + 3.5 * 0x1p-11
           : s->io_type == SDPA_BFLOAT16 ? base + 3.5 * 0x1p-8
                                         : base;
}
