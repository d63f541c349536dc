/*
 * Ragged batches (ragged.h): a ragged call is checked as a whole for what
 * only the whole can get wrong (the offsets, the packed extents, outputs
 * that two sequences would share), and otherwise as one rectangular call
 * per sequence, on that sequence's own views: so every rule of a
 * rectangular call holds for each sequence with its own lengths, and its
 * results are those of that call.
 */
#include "forward/ragged.h"
#include "core/checked.h"
#include "core/tensor_check.h"
#include "kernels/half.h"

#include <stdint.h>
#include <stdio.h>

enum { N_DIM, H_DIM, T_DIM, D_DIM };

/* kv_lens of a sequence without keys (its key view is one row it never
 * reads) */
static const int64_t no_keys = 0;

static size_t size_or_f32(int type)
{
    size_t size = sdpa_dtype_size(type);
    return size ? size : sizeof(float);
}

/* The bytes from an array of `type` to its element `offset`: whole units
 * (a block type's offsets are multiples of 32 once valid; an invalid one
 * is refused by the sequence's own validation). */
static size_t offset_bytes(int type, int64_t offset)
{
    return (size_t)(offset / sdpa_dtype_values(type)) * size_or_f32(type);
}

sdpa_tensor sdpa_slice_rows(sdpa_tensor t, int type, int64_t first,
                            int64_t count)
{
    if (t.data)
        t.data = (char *)t.data + offset_bytes(type, first * t.stride[T_DIM]);
    t.shape[T_DIM] = count;
    return t;
}

sdpa_tensor sdpa_slice_item(sdpa_tensor t, int type, int64_t item)
{
    if (t.data)
        t.data = (char *)t.data + offset_bytes(type, item * t.stride[N_DIM]);
    t.shape[N_DIM] = 1;
    return t;
}

int64_t sdpa_seq_keys(const sdpa_ragged *r, const sdpa_forward_args *args,
                      int64_t b)
{
    if (r->keys == SDPA_KEYS_PACKED)
        return r->kv_off[b + 1] - r->kv_off[b];
    if (r->keys == SDPA_KEYS_PAGED)
        return args->pages_per_seq * args->k.shape[T_DIM];
    return args->k.shape[T_DIM];
}

sdpa_tensor sdpa_slice_keys(sdpa_tensor t, int type, const sdpa_ragged *r,
                            int64_t b)
{
    switch (r->keys) {
    case SDPA_KEYS_PACKED: {
        int64_t keys = r->kv_off[b + 1] - r->kv_off[b];
        return sdpa_slice_rows(t, type, keys > 0 ? r->kv_off[b] : 0,
                               keys > 0 ? keys : 1);
    }
    case SDPA_KEYS_BATCHED:
        return sdpa_slice_item(t, type, b);
    default: /* shared or paged: the view as it is */
        return t;
    }
}

const char *sdpa_seq_who(char *buf, size_t size, const char *who, int64_t b)
{
    snprintf(buf, size, "%s: sequence %lld", who, (long long)b);
    return buf;
}

/* offsets[0, seqs] start at 0, never decrease and end at total. */
static int check_offsets(sdpa_ctx *ctx, const char *who, const char *name,
                         const int64_t *off, int64_t seqs, int64_t total,
                         const char *total_name)
{
    if (off[0] != 0)
        return sdpa_fail(ctx, SDPA_ERR_OFFSETS_START,
                         "%s: %s[0] is %lld, must be 0", who, name,
                         (long long)off[0]);
    for (int64_t b = 0; b < seqs; b++)
        if (off[b + 1] < off[b])
            return sdpa_fail(ctx, SDPA_ERR_OFFSETS_ORDER,
                             "%s: %s[%lld] is %lld, below %s[%lld] = %lld "
                             "(sequence %lld would have a negative length)",
                             who, name, (long long)(b + 1),
                             (long long)off[b + 1], name, (long long)b,
                             (long long)off[b], (long long)b);
    if (off[seqs] != total)
        return sdpa_fail(ctx, SDPA_ERR_OFFSETS_END,
                         "%s: %s[%lld] (seqs) is %lld, but %s is %lld: the "
                         "last offset must be the packed extent",
                         who, name, (long long)seqs, (long long)off[seqs],
                         total_name, (long long)total);
    return SDPA_OK;
}

static int check_fields(sdpa_ctx *ctx, const char *who,
                        const sdpa_forward_args *args,
                        const sdpa_named_tensor *refused, int refused_count)
{
    if (args->seqs < 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                         "%s: seqs is %lld, must be at least 0", who,
                         (long long)args->seqs);
    if (!args->q_offsets)
        return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                         "%s: %s but q_offsets is NULL (a ragged call needs "
                         "seqs and q_offsets)",
                         who, args->seqs ? "seqs is set" : "kv_offsets is set");
    if (args->seqs == 0)
        return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                         "%s: q_offsets is set but seqs is 0 (a ragged call "
                         "needs seqs and q_offsets)",
                         who);
    for (int i = 0; i < refused_count; i++)
        if (refused[i].tensor->data)
            return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                             "%s: a ragged call does not take %s", who,
                             refused[i].name);
    if (args->kv_offsets && args->block_table)
        return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                         "%s: kv_offsets and block_table are both set: a "
                         "ragged call's keys are packed or paged, not both",
                         who);
    if (args->q.shape[N_DIM] != 1)
        return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                         "%s: q.shape[0] is %lld; a ragged call's q is "
                         "packed, [1, Hq, total_q, Dk]",
                         who, (long long)args->q.shape[N_DIM]);
    return SDPA_OK;
}

/* The per-row tensors (q, out, lse, ...) are [1, ., total_q, .]. */
static int check_rows(sdpa_ctx *ctx, const char *who,
                      const sdpa_named_tensor *rows, int row_count,
                      int64_t total_q)
{
    for (int i = 0; i < row_count; i++) {
        const sdpa_tensor *t = rows[i].tensor;
        if (!t->data)
            continue;
        if (t->shape[N_DIM] != 1 || t->shape[T_DIM] != total_q)
            return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                             "%s: %s is [%lld, ., %lld, .]; a ragged call's "
                             "per-row tensors are [1, ., total_q = %lld, .] "
                             "like q",
                             who, rows[i].name, (long long)t->shape[N_DIM],
                             (long long)t->shape[T_DIM], (long long)total_q);
    }
    return SDPA_OK;
}

/* Packed, batched, shared or paged keys, and their extents. */
static int check_keys(sdpa_ctx *ctx, const char *who,
                      const sdpa_forward_args *args, sdpa_ragged *r)
{
    const int64_t kn = args->k.shape[N_DIM], vn = args->v.shape[N_DIM];
    if (args->block_table) {
        r->keys = SDPA_KEYS_PAGED;
        return SDPA_OK;
    }
    if (args->kv_offsets) {
        r->keys = SDPA_KEYS_PACKED;
        if (kn != 1 || vn != 1)
            return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                             "%s: k.shape[0] is %lld and v.shape[0] %lld; "
                             "with kv_offsets k and v are packed, "
                             "[1, Hkv, total_k, D]",
                             who, (long long)kn, (long long)vn);
        if (args->v.shape[T_DIM] != args->k.shape[T_DIM])
            return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                             "%s: v.shape[2] is %lld, but k.shape[2] "
                             "(total_k) is %lld: they must agree",
                             who, (long long)args->v.shape[T_DIM],
                             (long long)args->k.shape[T_DIM]);
        return check_offsets(ctx, who, "kv_offsets", args->kv_offsets,
                             args->seqs, args->k.shape[T_DIM],
                             "k.shape[2] (total_k)");
    }
    if (kn != vn || (kn != 1 && kn != args->seqs))
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         "%s: k.shape[0] is %lld and v.shape[0] %lld; without "
                         "kv_offsets or block_table they hold one item per "
                         "sequence (seqs = %lld) or one for all (1)",
                         who, (long long)kn, (long long)vn,
                         (long long)args->seqs);
    r->keys = kn == 1 && args->seqs > 1 ? SDPA_KEYS_SHARED : SDPA_KEYS_BATCHED;
    return SDPA_OK;
}

int sdpa_ragged_page_error(sdpa_ctx *ctx, const char *who,
                           const sdpa_forward_args *args, const sdpa_ragged *r,
                           int64_t b)
{
    const int64_t cols = args->pages_per_seq, page = args->k.shape[T_DIM];
    const int64_t pool = args->k.shape[N_DIM];
    const int64_t stride =
        args->block_table_stride ? args->block_table_stride : cols;
    /* the sequence's own checks passed the table's shape and kv_lens */
    const int64_t valid = args->kv_lens ? args->kv_lens[b] : cols * page;
    for (int64_t c = 0; c < (valid + page - 1) / page; c++) {
        int32_t entry = args->block_table[b * stride + c];
        if (entry < 0 || entry >= pool)
            return sdpa_fail(ctx, SDPA_ERR_BAD_PAGE,
                             "%s: block_table[%lld][%lld] is %d, outside the "
                             "pool's %lld pages (k.shape[0]); it holds keys "
                             "[%lld, %lld) of sequence %lld",
                             who, (long long)b, (long long)c, entry,
                             (long long)pool, (long long)(c * page),
                             (long long)((c + 1) * page), (long long)b);
    }
    (void)r;
    return SDPA_ERR_BAD_PAGE; /* another page field: its message stands */
}

int sdpa_ragged_check(sdpa_ctx *ctx, const char *who,
                      const sdpa_forward_args *args,
                      const sdpa_named_tensor *rows, int row_count,
                      const sdpa_named_tensor *refused, int refused_count,
                      sdpa_ragged *r)
{
    int status = check_fields(ctx, who, args, refused, refused_count);
    if (status != SDPA_OK)
        return status;
    *r = (sdpa_ragged){.seqs = args->seqs,
                       .q_off = args->q_offsets,
                       .kv_off = args->kv_offsets};
    const int64_t total_q = args->q.shape[T_DIM];
    status = check_offsets(ctx, who, "q_offsets", args->q_offsets, args->seqs,
                           total_q, "q.shape[2] (total_q)");
    if (status == SDPA_OK)
        status = check_rows(ctx, who, rows, row_count, total_q);
    if (status == SDPA_OK)
        status = check_keys(ctx, who, args, r);
    if (status != SDPA_OK || !args->kv_lens)
        return status;
    for (int64_t b = 0; b < r->seqs; b++) {
        int64_t keys = sdpa_seq_keys(r, args, b);
        if (args->kv_lens[b] < 0 || args->kv_lens[b] > keys)
            return sdpa_fail(ctx, SDPA_ERR_BAD_KV_LEN,
                             "%s: kv_lens[%lld] is %lld, outside [0, %lld], "
                             "the keys of sequence %lld",
                             who, (long long)b, (long long)args->kv_lens[b],
                             (long long)keys, (long long)b);
    }
    return SDPA_OK;
}

void sdpa_ragged_slice(const sdpa_forward_args *args, const sdpa_ragged *r,
                       int64_t b, sdpa_forward_args *sub)
{
    *sub = *args;
    sub->seqs = 0;
    sub->q_offsets = sub->kv_offsets = NULL;
    /* sequence b draws its dropout mask as batch item b would */
    sub->dropout_offset =
        args->dropout_offset + (uint64_t)b * (uint64_t)args->q.shape[1];
    const int io = args->dtype;
    const int kv = args->kv_dtype ? args->kv_dtype : args->dtype;
    const int compute =
        args->dtype == SDPA_FLOAT64 ? SDPA_FLOAT64 : SDPA_FLOAT32;
    const int64_t first = r->q_off[b], rows = sdpa_seq_rows(r, b);
    sub->q = sdpa_slice_rows(args->q, io, first, rows);
    sub->out = sdpa_slice_rows(args->out, io, first, rows);
    sub->lse = sdpa_slice_rows(args->lse, compute, first, rows);
    sub->max_weight = sdpa_slice_rows(args->max_weight, compute, first, rows);
    sub->entropy = sdpa_slice_rows(args->entropy, compute, first, rows);
    if (args->kv_lens)
        sub->kv_lens = args->kv_lens + b;
    sub->k = sdpa_slice_keys(args->k, kv, r, b);
    sub->v = sdpa_slice_keys(args->v, kv, r, b);
    if (r->keys == SDPA_KEYS_PACKED && sdpa_seq_keys(r, args, b) == 0)
        sub->kv_lens = &no_keys;
    if (r->keys == SDPA_KEYS_PAGED) {
        int64_t stride = args->block_table_stride ? args->block_table_stride
                                                  : args->pages_per_seq;
        sub->block_table = args->block_table + b * stride;
    }
}

int sdpa_ragged_check_whole(sdpa_ctx *ctx, const char *who,
                            const sdpa_forward_args *args, const sdpa_ragged *r,
                            const sdpa_whole_tensor *tensors, int count)
{
    enum { MOST = 24 };
    sdpa_byte_range ranges[MOST];
    int used = 0;
    for (int i = 0; i < count && used < MOST - 4; i++) {
        const sdpa_tensor *t = tensors[i].tensor;
        bool empty = false; /* packed keys of no sequence: no element */
        for (int d = 0; d < 4; d++)
            empty |= t->shape[d] == 0;
        if (!t->data || empty)
            continue;
        sdpa_tensor_rule rule = {.name = tensors[i].name,
                                 .tensor = t,
                                 .is_output = tensors[i].is_output,
                                 .any_inner = true,
                                 .inner_unused = tensors[i].inner_unused,
                                 .elem_size = tensors[i].elem_size};
        for (int d = 0; d < 4; d++)
            rule.expect[d] = (sdpa_extent){t->shape[d], NULL};
        int status = sdpa_check_tensor(ctx, who, &rule, &ranges[used++]);
        if (status != SDPA_OK)
            return status;
    }
    const uintptr_t n = (uintptr_t)r->seqs;
    ranges[used++] = (sdpa_byte_range){.name = "q_offsets",
                                       .is_output = false,
                                       .begin = (uintptr_t)r->q_off,
                                       .end = (uintptr_t)(r->q_off + n + 1)};
    if (r->kv_off)
        ranges[used++] =
            (sdpa_byte_range){.name = "kv_offsets",
                              .is_output = false,
                              .begin = (uintptr_t)r->kv_off,
                              .end = (uintptr_t)(r->kv_off + n + 1)};
    if (args->kv_lens)
        ranges[used++] =
            (sdpa_byte_range){.name = "kv_lens",
                              .is_output = false,
                              .begin = (uintptr_t)args->kv_lens,
                              .end = (uintptr_t)(args->kv_lens + n)};
    if (args->block_table) {
        int64_t stride = args->block_table_stride ? args->block_table_stride
                                                  : args->pages_per_seq;
        size_t entries, bytes;
        if (!sdpa_mul_size((size_t)(r->seqs - 1), (size_t)stride, &entries) ||
            !sdpa_add_size(entries, (size_t)args->pages_per_seq, &entries) ||
            !sdpa_mul_size(entries, sizeof(int32_t), &bytes) ||
            (uintptr_t)args->block_table > UINTPTR_MAX - bytes)
            return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                             "%s: the block table (%lld rows of stride %lld) "
                             "overflows the address space",
                             who, (long long)r->seqs, (long long)stride);
        ranges[used++] =
            (sdpa_byte_range){.name = "block_table",
                              .is_output = false,
                              .begin = (uintptr_t)args->block_table,
                              .end = (uintptr_t)args->block_table + bytes};
    }
    return sdpa_check_disjoint(ctx, who, ranges, used);
}
