/* Ragged calls as the tests judge them; see ragged.h. */
#include "ragged.h"

#include <float.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half_codec.h"
#include "quant_codec.h"

const char *const rg_key_names[4] = {"packed", "batched", "shared", "paged"};

/* kv_lens of a packed sequence without keys */
static const int64_t no_keys_len = 0;

size_t rg_type_size(int type)
{
    return type == SDPA_FLOAT64                            ? 8
           : type == SDPA_FLOAT16 || type == SDPA_BFLOAT16 ? 2
                                                           : 4;
}

bool rg_is_quantized(int type)
{
    return type >= SDPA_FP8_E4M3 && type <= SDPA_Q4_0;
}

size_t rg_offset_bytes(int type, int64_t off)
{
    return rg_is_quantized(type) ? quant_codec_unit_at(type, off)
                                 : (size_t)off * rg_type_size(type);
}

size_t rg_bytes(int type, int64_t count)
{
    const size_t unit = rg_is_quantized(type) ? quant_codec_unit_bytes(type)
                                              : rg_type_size(type);
    return count > 0 ? rg_offset_bytes(type, count - 1) + unit : 0;
}

int rg_compute_type(int dtype)
{
    return dtype == SDPA_FLOAT64 ? SDPA_FLOAT64 : SDPA_FLOAT32;
}

double rg_value(const void *data, int type, int64_t off)
{
    switch (type) {
    case SDPA_FLOAT64:
        return ((const double *)data)[off];
    case SDPA_FLOAT16:
    case SDPA_BFLOAT16:
        return half_codec_value(((const uint16_t *)data)[off], type);
    case SDPA_FP8_E4M3:
    case SDPA_FP8_E5M2:
    case SDPA_Q8_0:
    case SDPA_Q4_0:
        return quant_codec_value(data, type, off);
    default:
        return (double)((const float *)data)[off];
    }
}

void rg_store(void *data, int type, int64_t off, double v)
{
    if (rg_is_quantized(type))
        abort();
    bool exact = true;
    switch (type) {
    case SDPA_FLOAT64:
        ((double *)data)[off] = v;
        break;
    case SDPA_FLOAT16:
    case SDPA_BFLOAT16:
        ((uint16_t *)data)[off] = half_codec_bits(v, type, &exact);
        break;
    default:
        ((float *)data)[off] = (float)v;
        exact = (double)(float)v == v || isnan(v);
        break;
    }
    if (!exact)
        abort(); /* the tests store values of the type only */
}

void rg_poison(void *data, int type, int64_t off)
{
    unsigned char *unit = (unsigned char *)data + rg_offset_bytes(type, off);
    if (type == SDPA_FP8_E4M3 || type == SDPA_FP8_E5M2)
        *unit = 0x7f; /* E4M3's NaN, and one of E5M2's */
    else if (quant_codec_is_block(type))
        unit[0] = 0x00, unit[1] = 0x7e; /* d: a float16 NaN, little-endian */
    else
        rg_store(data, type, off, NAN);
}

int rg_key_form(const sdpa_forward_args *a)
{
    if (a->kv_offsets)
        return RG_PACKED;
    if (a->block_table)
        return RG_PAGED;
    return a->k.shape[0] == 1 && a->seqs > 1 ? RG_SHARED : RG_BATCHED;
}

int64_t rg_seq_rows(const sdpa_forward_args *a, int64_t b)
{
    return a->q_offsets[b + 1] - a->q_offsets[b];
}

int64_t rg_seq_keys(const sdpa_forward_args *a, int64_t b)
{
    switch (rg_key_form(a)) {
    case RG_PACKED:
        return a->kv_offsets[b + 1] - a->kv_offsets[b];
    case RG_PAGED:
        return a->pages_per_seq * a->k.shape[2];
    default:
        return a->k.shape[2];
    }
}

/* Rows [first, first + count) of a [1, H, T, D] view (absent stays
 * absent). */
static sdpa_tensor rows_of(sdpa_tensor t, int type, int64_t first,
                           int64_t count)
{
    if (!t.data)
        return t;
    t.data = (char *)t.data + rg_offset_bytes(type, first * t.stride[2]);
    t.shape[2] = count;
    return t;
}

void rg_seq_args(const sdpa_forward_args *a, int64_t b,
                 const sdpa_tensor *no_keys_k, const sdpa_tensor *no_keys_v,
                 sdpa_forward_args *sub)
{
    *sub = *a;
    sub->seqs = 0;
    sub->q_offsets = NULL;
    sub->kv_offsets = NULL;
    const int qt = a->dtype, ct = rg_compute_type(a->dtype);
    const int kvt = a->kv_dtype ? a->kv_dtype : a->dtype;
    const int64_t first = a->q_offsets[b], rows = rg_seq_rows(a, b);
    sub->q = rows_of(a->q, qt, first, rows);
    sub->out = rows_of(a->out, qt, first, rows);
    sub->lse = rows_of(a->lse, ct, first, rows);
    sub->max_weight = rows_of(a->max_weight, ct, first, rows);
    sub->entropy = rows_of(a->entropy, ct, first, rows);
    if (a->kv_lens)
        sub->kv_lens = &a->kv_lens[b];
    switch (rg_key_form(a)) {
    case RG_PACKED: {
        const int64_t keys = rg_seq_keys(a, b);
        if (keys == 0) {
            sub->k = *no_keys_k;
            sub->v = *no_keys_v;
            sub->kv_lens = &no_keys_len;
        } else {
            sub->k = rows_of(a->k, kvt, a->kv_offsets[b], keys);
            sub->v = rows_of(a->v, kvt, a->kv_offsets[b], keys);
        }
        break;
    }
    case RG_BATCHED:
        sub->k.data =
            (char *)a->k.data + rg_offset_bytes(kvt, b * a->k.stride[0]);
        sub->v.data =
            (char *)a->v.data + rg_offset_bytes(kvt, b * a->v.stride[0]);
        sub->k.shape[0] = sub->v.shape[0] = 1;
        break;
    case RG_PAGED:
        sub->block_table =
            a->block_table + b * (a->block_table_stride ? a->block_table_stride
                                                        : a->pages_per_seq);
        break;
    default: /* shared: the one item as it is */
        break;
    }
}

/* ---- The reference on widened inputs. --------------------------------- */

/* A contiguous float64 [n, h, t, d] copy of a view: widened is element
 * (b, h, j, c) of x; keys j >= lens[b] of a key tensor are NaN. */
typedef struct widened {
    double *mem;
    sdpa_tensor t;
} widened;

static int widen_alloc(widened *w, int64_t n, int64_t h, int64_t t, int64_t d)
{
    w->t = sdpa_tensor_bhtd(NULL, n, h, t, d);
    w->mem = malloc((size_t)(n * h * t * d) * sizeof(double));
    w->t.data = w->mem;
    return w->mem ? 0 : -1;
}

static int64_t off4(const sdpa_tensor *t, int64_t a, int64_t b, int64_t c,
                    int64_t d)
{
    return a * t->stride[0] + b * t->stride[1] + c * t->stride[2] +
           d * t->stride[3];
}

/* Key j of item b: its element (b, h, j, c) of k or v, paged or not. */
static int64_t key_at(const sdpa_forward_args *a, const sdpa_tensor *x,
                      int64_t b, int64_t h, int64_t j, int64_t c)
{
    if (!a->block_table)
        return off4(x, x->shape[0] == 1 ? 0 : b, h, j, c);
    const int64_t page = x->shape[2];
    const int64_t stride =
        a->block_table_stride ? a->block_table_stride : a->pages_per_seq;
    const int64_t id = a->block_table[b * stride + j / page];
    return off4(x, id, h, j % page, c);
}

/* A quantized type's values times their head's scale (NULL: 1), exact
 * in float64 (a float times an FP8 value). */
static void widen_keys(const sdpa_forward_args *a, const sdpa_tensor *x,
                       int type, const float *scale, widened *w)
{
    const int64_t *s = w->t.shape;
    for (int64_t b = 0; b < s[0]; b++) {
        const int64_t len = a->kv_lens ? a->kv_lens[b] : s[2];
        for (int64_t h = 0; h < s[1]; h++)
            for (int64_t j = 0; j < s[2]; j++)
                for (int64_t c = 0; c < s[3]; c++)
                    w->mem[off4(&w->t, b, h, j, c)] =
                        j < len ? (scale ? (double)scale[h] : 1.0) *
                                      rg_value(x->data, type,
                                               key_at(a, x, b, h, j, c))
                                : NAN;
    }
}

int rg_reference(const sdpa_forward_args *a, ref_result *r)
{
    const int kvt = a->kv_dtype ? a->kv_dtype : a->dtype;
    const int64_t n = a->q.shape[0], hq = a->q.shape[1], tq = a->q.shape[2];
    const int64_t dk = a->q.shape[3], hkv = a->k.shape[1], dv = a->v.shape[3];
    const int64_t tk =
        a->block_table ? a->pages_per_seq * a->k.shape[2] : a->k.shape[2];
    widened q = {0}, k = {0}, v = {0};
    int status = -1;
    if (widen_alloc(&q, n, hq, tq, dk) || widen_alloc(&k, n, hkv, tk, dk) ||
        widen_alloc(&v, n, hkv, tk, dv))
        goto done;
    for (int64_t b = 0; b < n; b++)
        for (int64_t h = 0; h < hq; h++)
            for (int64_t i = 0; i < tq; i++)
                for (int64_t c = 0; c < dk; c++)
                    q.mem[off4(&q.t, b, h, i, c)] =
                        rg_value(a->q.data, a->dtype, off4(&a->q, b, h, i, c));
    widen_keys(a, &a->k, kvt, a->k_scale, &k);
    widen_keys(a, &a->v, kvt, a->v_scale, &v);
    sdpa_forward_args w = *a;
    w.dtype = SDPA_FLOAT64;
    w.kv_dtype = w.bias_dtype = 0;
    w.k_scale = w.v_scale = NULL;
    w.block_table = NULL;
    w.pages_per_seq = w.block_table_stride = 0;
    w.q = q.t;
    w.k = k.t;
    w.v = v.t;
    status = ref_forward(&w, r);
done:
    free(q.mem);
    free(k.mem);
    free(v.mem);
    return status;
}

/* ---- The outputs against it. ------------------------------------------ */

int rg_check(const sdpa_forward_args *a, const ref_result *r, const char *where,
             char *msg, size_t size)
{
    const int ct = rg_compute_type(a->dtype);
    const double eps = ct == SDPA_FLOAT64 ? DBL_EPSILON : FLT_EPSILON;
    const test_tol t = tp_forward_tol(eps, r, r->tk, a->q.shape[3], a->softcap,
                                      a->sinks != NULL, 0, 0);
    const double rel = a->dtype == SDPA_FLOAT16    ? 0x1p-11
                       : a->dtype == SDPA_BFLOAT16 ? 0x1p-8
                                                   : 0;
    const double abs_half = a->dtype == SDPA_FLOAT16 ? 0x1p-24 : 0;
    /* the v_scale's one product in float32 */
    const double v_scaled = a->v_scale ? 2 * FLT_EPSILON : 0;
    for (int64_t b = 0; b < r->n; b++)
        for (int64_t h = 0; h < r->hq; h++)
            for (int64_t i = 0; i < r->tq; i++) {
                const size_t row = (size_t)((b * r->hq + h) * r->tq + i);
                int empty = !a->sinks;
                for (int64_t j = 0; empty && j < r->tk; j++)
                    empty = !r->allowed[row * (size_t)r->tk + (size_t)j];
                for (int64_t d = 0; d < r->dv; d++) {
                    double want =
                        (double)r->out[row * (size_t)r->dv + (size_t)d];
                    double got = rg_value(a->out.data, a->dtype,
                                          off4(&a->out, b, h, i, d));
                    double bound =
                        t.out + (rel + v_scaled) * fabs(want) + abs_half;
                    if (empty ? got != 0 : !(fabs(got - want) <= bound)) {
                        snprintf(msg, size,
                                 "%s: out[%lld,%lld,%lld,%lld] = %.9g, "
                                 "reference %.9g (bound %.3g%s)",
                                 where, (long long)b, (long long)h,
                                 (long long)i, (long long)d, got, want, bound,
                                 empty ? ", an empty row: exactly 0" : "");
                        return 1;
                    }
                }
                long double top, ent;
                ref_diagnostics(r, a->sinks, h, row, &top, &ent);
                const struct {
                    const char *name;
                    const sdpa_tensor *x;
                    double want, bound, if_empty;
                } per_row[3] = {
                    {"lse", &a->lse, (double)r->lse[row],
                     t.lse_abs + t.lse_rel * fabs((double)r->lse[row]),
                     -INFINITY},
                    {"max_weight", &a->max_weight, (double)top, t.w, 0},
                    {"entropy", &a->entropy, (double)ent,
                     t.entropy + 2 * t.e_p * (double)ent, 0}};
                for (int k = 0; k < 3; k++) {
                    if (!per_row[k].x->data)
                        continue;
                    double got = rg_value(per_row[k].x->data, ct,
                                          off4(per_row[k].x, b, h, i, 0));
                    double want = per_row[k].want;
                    if (empty ? got != per_row[k].if_empty
                              : !(fabs(got - want) <= per_row[k].bound)) {
                        snprintf(msg, size,
                                 "%s: %s[%lld,%lld,%lld] = %.9g, reference "
                                 "%.9g (bound %.3g%s)",
                                 where, per_row[k].name, (long long)b,
                                 (long long)h, (long long)i, got,
                                 empty ? per_row[k].if_empty : want,
                                 per_row[k].bound,
                                 empty ? ", an empty row" : "");
                        return 1;
                    }
                }
            }
    return 0;
}
