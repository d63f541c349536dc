/*
 * Cold K/V for the decode shapes. An engine's decode step reads each
 * layer's KV cache once, and dozens of other layers' caches come between
 * two reads of the same one: none of it is in any cache when it is read.
 * A benchmark that calls one shape back to back instead finds K/V partly
 * in the last-level cache (a 16 MiB G8h fits in many L3s) and reports
 * more than the memory can deliver. So a decode shape gets copies of its
 * K/V, each run reads the next one, and between two reads of one copy the
 * others read at least twice the last-level cache.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const size_t LLC_UNKNOWN = (size_t)64 << 20;

static void *copy_of(const void *src, size_t bytes, int *failed)
{
    if (!src || *failed)
        return NULL;
    void *c = bench_alloc(bytes);
    if (!c)
        *failed = 1;
    else
        memcpy(c, src, bytes);
    return c;
}

void bench_cold_read_bytes(const bench_data *d, size_t bytes[2])
{
    const bench_shape *s = d->shape;
    const size_t el = bench_elem_size(s->dtype);
    /* the storage-type copies (or page pools) where there are, else the
     * float32 buffers */
    bytes[0] = d->k_lib ? d->k_lib_bytes
                        : (size_t)(s->n * s->hkv * s->tk * s->dk) * el;
    bytes[1] = d->v_lib ? d->v_lib_bytes
                        : (size_t)(s->n * s->hkv * s->tk * s->dv) * el;
}

int bench_cold_init(bench_data *d, size_t llc, size_t budget)
{
    const bench_shape *s = d->shape;
    d->cold_count = 1;
    d->cold_next = 1;
    d->cold_k[0] = d->k;
    d->cold_v[0] = d->v;
    d->cold_k_lib[0] = d->k_lib;
    d->cold_v_lib[0] = d->v_lib;
    if (!s->decode)
        return 0;
    const size_t el = bench_elem_size(s->dtype);
    const size_t kb = (size_t)(s->n * s->hkv * s->tk * s->dk) * el;
    const size_t vb = (size_t)(s->n * s->hkv * s->tk * s->dv) * el;
    size_t reads[2]; /* what the library reads per run */
    bench_cold_read_bytes(d, reads);
    const size_t read = reads[0] + reads[1];
    const size_t set = kb + vb + (d->k_lib ? d->k_lib_bytes : 0) +
                       (d->v_lib ? d->v_lib_bytes : 0);
    size_t want = 1 + (2 * (llc ? llc : LLC_UNKNOWN) + read - 1) / read;
    if (want < 2)
        want = 2;
    if (want > BENCH_COLD_MAX)
        want = BENCH_COLD_MAX;
    if (want * set > budget)
        want = budget / set > 1 ? budget / set : 1;
    for (size_t c = 1; c < want; c++) {
        int failed = 0;
        d->cold_k[c] = copy_of(d->cold_k[0], kb, &failed);
        d->cold_v[c] = copy_of(d->cold_v[0], vb, &failed);
        d->cold_k_lib[c] = copy_of(d->cold_k_lib[0], d->k_lib_bytes, &failed);
        d->cold_v_lib[c] = copy_of(d->cold_v_lib[0], d->v_lib_bytes, &failed);
        if (failed) {
            free(d->cold_k[c]);
            free(d->cold_v[c]);
            free(d->cold_k_lib[c]);
            free(d->cold_v_lib[c]);
            break;
        }
        d->cold_count = (int)c + 1;
    }
    return 0;
}

void bench_cold_next(bench_data *d)
{
    if (d->cold_count <= 1)
        return;
    int c = d->cold_next;
    d->cold_next = (c + 1) % d->cold_count;
    d->k = d->cold_k[c];
    d->v = d->cold_v[c];
    d->k_lib = d->cold_k_lib[c];
    d->v_lib = d->cold_v_lib[c];
    /* the call reads the storage-type copy (or page pool) when there is
     * one, else the float32 buffers; the dense-bias call the same K/V */
    d->args.k.data = d->k_lib ? d->k_lib : d->k;
    d->args.v.data = d->v_lib ? d->v_lib : d->v;
    d->dense_args.k.data = d->args.k.data;
    d->dense_args.v.data = d->args.v.data;
}

void bench_cold_free(bench_data *d)
{
    for (int c = 1; c < d->cold_count; c++) {
        free(d->cold_k[c]);
        free(d->cold_v[c]);
        free(d->cold_k_lib[c]);
        free(d->cold_v_lib[c]);
    }
    if (d->cold_count > 1) { /* set 0 is the one bench_data_free frees */
        d->cold_next = 0;
        bench_cold_next(d);
    }
    d->cold_count = 0;
}
