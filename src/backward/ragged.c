/*
 * sdpa_backward on a ragged batch. Every sequence with query rows is
 * validated and planned as the rectangular backward of its own views
 * (forward/ragged.c slices them: dout and dq like q, dk and dv like k),
 * and the items of all their plans run in one parallel phase, heaviest
 * sequences first, each with its own dQ turn counters (dq_order.h) in the
 * context's shared buffer. Each item is computed as in the sequence's own
 * call: its bits depend neither on the other sequences nor on the order
 * or the thread count (backward.c).
 *
 * Two kinds of sequence have no call of their own, yet every key of every
 * sequence gets its gradient: one with query rows but no packed keys
 * (Tk_b = 0) is validated as a call with one key that no row sees, and
 * its item only writes dq = 0 (the rows are empty; no dk or dv row is
 * its); one with keys but no query rows gets dk = dv = 0 for its keys.
 * dsinks, a sum over every sequence's rows, adds the sequences' own
 * values in sequence order on the caller's thread.
 */
#include "backward/backward.h"
#include "backward/dq_order.h"
#include "core/checked.h"
#include "core/tensor_check.h"
#include "forward/ragged.h"
#include "forward/validate.h"

#include <stdlib.h>
#include <string.h>

#define WHO SDPA_BACKWARD_WHO

enum { N_DIM, H_DIM, T_DIM, D_DIM };

/* What a sequence's items do. */
enum {
    PART_NONE,    /* neither rows nor keys: nothing */
    PART_CALL,    /* the rectangular backward of its views */
    PART_NO_KEYS, /* query rows, no keys: dq = 0 */
    PART_NO_ROWS  /* keys, no query rows: dk = dv = 0 */
};

/* One sequence: its own problem and plan (PART_NO_ROWS: only the dk and dv
 * views and their extents), and its items. */
typedef struct bwd_part {
    sdpa_bwd_problem problem;
    sdpa_bwd_plan plan;
    int64_t seq;
    int kind;
    int64_t items;
} bwd_part;

/* A part's place in the start order (heaviest first) and where its items
 * start. */
typedef struct bwd_slot {
    double cost; /* multiply-adds of one of the sequence's items */
    int64_t part, first;
} bwd_slot;

/* The call's plan: sdpa_run_items reads run; the items find their part
 * through the slots. */
typedef struct ragged_plan {
    sdpa_plan run;
    const bwd_part *parts; /* in sequence order */
    const bwd_slot *slots; /* in start order */
    int64_t count;
} ragged_plan;

/* What the whole call needs, summed or maximised over its parts. */
typedef struct ragged_totals {
    int64_t parts, with_rows; /* with_rows: calls of their own */
    int64_t items;
    size_t worker_bytes, shared_bytes; /* shared: the sum of the parts' */
    bool blas_owns_cores;
} ragged_totals;

/* The bytes of an element of the call's tensors, by their storage types
 * (the compute type's for lse: float32 unless everything is float64). */
typedef struct type_sizes {
    size_t q, kv, lse, dq, dkv;
} type_sizes;

static type_sizes sizes_of(const sdpa_backward_args *a)
{
    const int kv = a->kv_dtype ? a->kv_dtype : a->dtype;
    const int grad = a->grad_dtype;
    return (type_sizes){.q = sdpa_dtype_size(a->dtype),
                        .kv = sdpa_dtype_size(kv),
                        .lse = a->dtype == SDPA_FLOAT64 ? sizeof(double)
                                                        : sizeof(float),
                        .dq = sdpa_dtype_size(grad ? grad : a->dtype),
                        .dkv = sdpa_dtype_size(grad ? grad : kv)};
}

static int part_kind(const sdpa_ragged *r, const sdpa_forward_args *f,
                     int64_t b)
{
    const bool rows = sdpa_seq_rows(r, b) > 0;
    const bool keys = sdpa_seq_keys(r, f, b) > 0;
    return rows ? (keys ? PART_CALL : PART_NO_KEYS)
                : (keys ? PART_NO_ROWS : PART_NONE);
}

/* Sequence b's arguments as a rectangular backward of its own (ragged.h:
 * sdpa_ragged_slice, and the gradients like their inputs). */
static void slice_sequence(const sdpa_backward_args *a,
                           const sdpa_forward_args *f, const sdpa_ragged *r,
                           int64_t b, sdpa_backward_args *sub)
{
    sdpa_forward_args fs;
    sdpa_ragged_slice(f, r, b, &fs);
    const int kv = a->kv_dtype ? a->kv_dtype : a->dtype;
    const int dq = a->grad_dtype ? a->grad_dtype : a->dtype;
    const int dkv = a->grad_dtype ? a->grad_dtype : kv;
    const int64_t first = r->q_off[b], rows = sdpa_seq_rows(r, b);
    *sub = *a;
    sub->seqs = 0;
    sub->q_offsets = sub->kv_offsets = NULL;
    sub->kv_lens = fs.kv_lens;
    sub->q = fs.q;
    sub->k = fs.k;
    sub->v = fs.v;
    sub->out = fs.out;
    sub->lse = fs.lse;
    sub->dropout_offset = fs.dropout_offset;
    sub->dout = sdpa_slice_rows(a->dout, a->dtype, first, rows);
    sub->dq = sdpa_slice_rows(a->dq, dq, first, rows);
    sub->dk = sdpa_slice_keys(a->dk, dkv, r, b);
    sub->dv = sdpa_slice_keys(a->dv, dkv, r, b);
}

/* A sequence without query rows: its dk and dv, shaped like its k and v
 * (which it never reads), into the part. */
static int check_no_rows(sdpa_ctx *ctx, const char *who,
                         const sdpa_backward_args *sub, bwd_part *part)
{
    sdpa_bwd_problem *bp = &part->problem;
    const sdpa_tensor *grads[2] = {&sub->dk, &sub->dv};
    const sdpa_tensor *inputs[2] = {&sub->k, &sub->v};
    sdpa_view *views[2] = {&bp->dk, &bp->dv};
    for (int i = 0; i < 2; i++) {
        sdpa_tensor_rule rule = {.name = i ? "dv" : "dk",
                                 .tensor = grads[i],
                                 .view = views[i],
                                 .required = true,
                                 .is_output = true,
                                 .elem_size = sizes_of(sub).dkv};
        for (int d = 0; d < 4; d++)
            rule.expect[d] = (sdpa_extent){inputs[i]->shape[d], NULL};
        sdpa_byte_range range;
        int status = sdpa_check_present(ctx, who, &rule);
        if (status == SDPA_OK)
            status = sdpa_check_tensor(ctx, who, &rule, &range);
        if (status != SDPA_OK)
            return status;
    }
    sdpa_problem *p = &bp->p;
    p->dtype = sub->dtype == SDPA_FLOAT64 ? SDPA_FLOAT64 : SDPA_FLOAT32;
    p->elem_size = sizes_of(sub).lse; /* the compute type's */
    const int kv = sub->kv_dtype ? sub->kv_dtype : sub->dtype;
    bp->dkv_type = sub->grad_dtype ? sub->grad_dtype : kv;
    p->heads_kv = sub->dk.shape[H_DIM];
    p->len_k = sub->dk.shape[T_DIM];
    p->dim_k = sub->dk.shape[D_DIM];
    p->dim_v = sub->dv.shape[D_DIM];
    return SDPA_OK;
}

/* Sequence b checked (and planned) as its own call would be, into *part. */
static int make_part(sdpa_ctx *ctx, const sdpa_backward_args *a,
                     const sdpa_forward_args *f, const sdpa_ragged *r,
                     int64_t b, bwd_part *part)
{
    memset(part, 0, sizeof *part);
    part->seq = b;
    part->kind = part_kind(r, f, b);
    if (part->kind == PART_NONE)
        return SDPA_OK;
    char who[64];
    sdpa_seq_who(who, sizeof who, WHO, b);
    sdpa_backward_args sub;
    slice_sequence(a, f, r, b, &sub);
    if (part->kind == PART_NO_ROWS) {
        part->items = 1;
        return check_no_rows(ctx, who, &sub, part);
    }
    int status = sdpa_backward_validate(ctx, who, &sub, &part->problem);
    if (status != SDPA_OK || part->kind == PART_NO_KEYS) {
        part->items = 1;
        return status;
    }
    status = sdpa_backward_plan(ctx, who, &part->problem, &part->plan);
    part->items = part->plan.run.work_items;
    return status;
}

static bool add_part(ragged_totals *t, const bwd_part *part)
{
    if (part->kind == PART_NONE)
        return true;
    t->parts++;
    if (part->items > INT64_MAX - t->items)
        return false;
    t->items += part->items;
    t->with_rows += part->kind != PART_NO_ROWS;
    if (part->kind != PART_CALL)
        return true;
    const sdpa_bwd_plan *pl = &part->plan;
    if (!sdpa_add_size(t->shared_bytes, pl->shared_bytes, &t->shared_bytes))
        return false;
    t->worker_bytes =
        pl->worker_bytes > t->worker_bytes ? pl->worker_bytes : t->worker_bytes;
    t->blas_owns_cores |= sdpa_backward_blas_owns_cores(&part->problem, pl);
    return true;
}

/* dk and dv span what k and v do: [1, ., total_k, .] packed, [seqs, ...]
 * batched (a sequence's checks see only its own slice). */
static int check_key_gradients(sdpa_ctx *ctx, const sdpa_backward_args *a,
                               const sdpa_ragged *r)
{
    const struct {
        const char *name, *input;
        const sdpa_tensor *grad, *of;
    } pairs[2] = {{"dk", "k", &a->dk, &a->k}, {"dv", "v", &a->dv, &a->v}};
    for (int i = 0; i < 2; i++) {
        const sdpa_tensor *g = pairs[i].grad, *x = pairs[i].of;
        if (!g->data || (g->shape[N_DIM] == x->shape[N_DIM] &&
                         g->shape[T_DIM] == x->shape[T_DIM]))
            continue;
        return sdpa_fail(ctx, SDPA_ERR_SHAPE_MISMATCH,
                         "%s: %s is [%lld, ., %lld, .], but %s is [%lld, ., "
                         "%lld, .]: a ragged call's key gradients are shaped "
                         "like its %s keys",
                         WHO, pairs[i].name, (long long)g->shape[N_DIM],
                         (long long)g->shape[T_DIM], pairs[i].input,
                         (long long)x->shape[N_DIM], (long long)x->shape[T_DIM],
                         r->keys == SDPA_KEYS_PACKED ? "packed" : "batched");
    }
    return SDPA_OK;
}

/* The whole tensors (ragged.h: sdpa_ragged_check_whole, which passes
 * over views without elements), the per-head arrays as [1, 1, 1, Hq]
 * views. */
static int check_whole(sdpa_ctx *ctx, const sdpa_backward_args *a,
                       const sdpa_forward_args *f, const sdpa_ragged *r)
{
    const type_sizes es = sizes_of(a);
    const size_t ds = sizeof(double);
    const int64_t hq = a->q.shape[H_DIM];
    const sdpa_tensor heads = {NULL, {1, 1, 1, hq}, {hq, hq, hq, 1}};
    sdpa_tensor slopes = heads, sinks = heads, dsinks = heads;
    slopes.data = (void *)(uintptr_t)a->alibi_slopes;
    sinks.data = (void *)(uintptr_t)a->sinks;
    dsinks.data = a->dsinks;
    const sdpa_whole_tensor all[12] = {
        {"q", &a->q, es.q, false, false},
        {"k", &a->k, es.kv, false, false},
        {"v", &a->v, es.kv, false, false},
        {"out", &a->out, es.q, false, false},
        {"lse", &a->lse, es.lse, false, true},
        {"dout", &a->dout, es.q, false, false},
        {"dq", &a->dq, es.dq, true, false},
        {"dk", &a->dk, es.dkv, true, false},
        {"dv", &a->dv, es.dkv, true, false},
        {"alibi_slopes", &slopes, ds, false, false},
        {"sinks", &sinks, ds, false, false},
        {"dsinks", &dsinks, ds, true, false}};
    return sdpa_ragged_check_whole(ctx, WHO, f, r, all, 12);
}

/* A call of which no sequence has query rows computes no gradient of a
 * row, yet is held to the settings and the required tensors, as the
 * forward's (forward/validate.h). */
static int check_settings(sdpa_ctx *ctx, const sdpa_backward_args *a,
                          const sdpa_forward_args *f)
{
    int status = sdpa_validate_settings(ctx, WHO, f);
    if (status != SDPA_OK)
        return status;
    const struct {
        const char *name;
        const void *data;
    } required[4] = {{"dout", a->dout.data},
                     {"dq", a->dq.data},
                     {"dk", a->dk.data},
                     {"dv", a->dv.data}};
    for (int i = 0; i < 4; i++)
        if (!required[i].data)
            return sdpa_fail(ctx, SDPA_ERR_NULL_POINTER, "%s: %s.data is NULL",
                             WHO, required[i].name);
    return SDPA_OK;
}

/* Every check of the call, and its totals: nothing is allocated or
 * written. */
static int check_call(sdpa_ctx *ctx, const sdpa_backward_args *a,
                      const sdpa_forward_args *f, sdpa_ragged *r,
                      ragged_totals *t)
{
    const sdpa_named_tensor rows[5] = {{"q", &a->q},
                                       {"out", &a->out},
                                       {"lse", &a->lse},
                                       {"dout", &a->dout},
                                       {"dq", &a->dq}};
    const sdpa_named_tensor refused[3] = {
        {"mask", &a->mask}, {"bias", &a->bias}, {"dbias", &a->dbias}};
    int status = sdpa_ragged_check(ctx, WHO, f, rows, 5, refused, 3, r);
    if (status != SDPA_OK)
        return status;
    if (r->keys == SDPA_KEYS_SHARED)
        return sdpa_fail(ctx, SDPA_ERR_BAD_RAGGED,
                         "%s: k and v are [1, Hkv, Tk, D] without kv_offsets, "
                         "keys shared by the %lld sequences, whose gradient "
                         "would be a sum over them; a ragged backward takes "
                         "packed (kv_offsets) or batched ([seqs, Hkv, Tk, D]) "
                         "keys",
                         WHO, (long long)r->seqs);
    status = sdpa_backward_check_own(ctx, WHO, a);
    if (status == SDPA_OK)
        status = check_key_gradients(ctx, a, r);
    if (status != SDPA_OK)
        return status;
    *t = (ragged_totals){0};
    bwd_part part;
    for (int64_t b = 0; b < r->seqs; b++) {
        status = make_part(ctx, a, f, r, b, &part);
        if (status != SDPA_OK)
            return status;
        if (!add_part(t, &part))
            return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                             "%s: the work items of the sequences up to %lld "
                             "overflow a size",
                             WHO, (long long)b);
    }
    if (t->with_rows == 0)
        status = check_settings(ctx, a, f);
    return status == SDPA_OK ? check_whole(ctx, a, f, r) : status;
}

/* The bytes of the parts and their slots. */
static int parts_bytes(sdpa_ctx *ctx, const ragged_totals *t, size_t *bytes)
{
    if (!sdpa_mul_size((size_t)t->parts, sizeof(bwd_part) + sizeof(bwd_slot),
                       bytes))
        return sdpa_fail(ctx, SDPA_ERR_OVERFLOW,
                         "%s: the records of %lld sequences overflow a size",
                         WHO, (long long)t->parts);
    return SDPA_OK;
}

/* Heaviest items first; ties in sequence order (the order changes no
 * result, only how evenly the workers finish). */
static int by_cost(const void *x, const void *y)
{
    const bwd_slot *a = x, *b = y;
    if (a->cost != b->cost)
        return a->cost > b->cost ? -1 : 1;
    return a->part < b->part ? -1 : a->part > b->part;
}

/* The parts (sequence order) and their slots (start order) into `parts`
 * and `slots`, with their items, their turn counters and half dq sums
 * placed from `shared` on. */
static void fill_parts(sdpa_ctx *ctx, const sdpa_backward_args *a,
                       const sdpa_forward_args *f, const sdpa_ragged *r,
                       const ragged_totals *t, bwd_part *parts, bwd_slot *slots,
                       char *shared)
{
    int64_t count = 0;
    for (int64_t b = 0; b < r->seqs && count < t->parts; b++) {
        bwd_part *part = &parts[count];
        (void)make_part(ctx, a, f, r, b, part); /* checked */
        if (part->kind == PART_NONE)
            continue;
        const sdpa_problem *p = &part->problem.p;
        double cost = 0;
        if (part->kind == PART_CALL) {
            sdpa_backward_bind(&part->problem, &part->plan, shared);
            shared += part->plan.shared_bytes; /* aligned (plan.c) */
            cost = (double)(p->group * p->len_q) *
                   (double)(part->plan.item_blocks * part->plan.block_k) *
                   (double)(p->dim_k + p->dim_v);
        }
        slots[count] = (bwd_slot){.cost = cost, .part = count};
        count++;
    }
    qsort(slots, (size_t)count, sizeof *slots, by_cost);
    int64_t items = 0;
    for (int64_t i = 0; i < count; i++) {
        slots[i].first = items;
        items += parts[slots[i].part].items;
    }
}

/* The slot whose items [first, first + count) hold item n: the last one
 * starting at or before n. */
static const bwd_slot *slot_of(const ragged_plan *rp, int64_t n)
{
    int64_t lo = 0, hi = rp->count - 1;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo + 1) / 2;
        if (rp->slots[mid].first <= n)
            lo = mid;
        else
            hi = mid - 1;
    }
    return &rp->slots[lo];
}

/* Rows [0, rows) of heads [0, heads) of a [1, H, T, d] view set to +0. */
static void zero_rows(const sdpa_view *v, size_t es, int64_t heads,
                      int64_t rows, int64_t d)
{
    for (int64_t h = 0; h < heads; h++)
        for (int64_t i = 0; i < rows; i++)
            memset(sdpa_at(v, es, 0, h, i), 0, (size_t)d * es);
}

static int part_item(const bwd_part *part, int kernel, void *scratch,
                     int64_t item, sdpa_where *where)
{
    const sdpa_bwd_problem *bp = &part->problem;
    const sdpa_problem *p = &bp->p;
    switch (part->kind) {
    case PART_NO_KEYS:
        zero_rows(&bp->dq, sdpa_dtype_size(bp->dq_type), p->heads_q, p->len_q,
                  p->dim_k);
        return SDPA_OK;
    case PART_NO_ROWS:
        zero_rows(&bp->dk, sdpa_dtype_size(bp->dkv_type), p->heads_kv, p->len_k,
                  p->dim_k);
        zero_rows(&bp->dv, sdpa_dtype_size(bp->dkv_type), p->heads_kv, p->len_k,
                  p->dim_v);
        return SDPA_OK;
    default:
        return sdpa_backward_item(p, &part->plan.run, kernel, scratch, item,
                                  where);
    }
}

/* Item n of the call: an item of one sequence's own plan. Each
 * sequence's items are consecutive and in its own order, so a key block
 * is started after the blocks before it (dq_order.h). */
static int ragged_item(const sdpa_problem *problem, const sdpa_plan *plan,
                       int kernel, void *scratch, int64_t n, sdpa_where *where)
{
    (void)problem;
    const ragged_plan *rp = (const ragged_plan *)(const void *)plan;
    const bwd_slot *slot = slot_of(rp, n);
    const bwd_part *part = &rp->parts[slot->part];
    int status = part_item(part, kernel, scratch, n - slot->first, where);
    if (status != SDPA_OK)
        where->batch = part->seq;
    return status;
}

/* dsinks[h]: the sequences' own values added in sequence order (0 when no
 * sequence has query rows). */
static void sink_gradients(const ragged_plan *rp, double *dsinks, int64_t hq)
{
    for (int64_t h = 0; h < hq; h++) {
        double sum = 0;
        bool first = true;
        for (int64_t i = 0; i < rp->count; i++) {
            const bwd_part *part = &rp->parts[i];
            if (part->kind == PART_NO_ROWS)
                continue;
            double own = sdpa_backward_sink_gradient(&part->problem, h);
            sum = first ? own : sum + own;
            first = false;
        }
        dsinks[h] = sum;
    }
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The items on the reserved workers, then dsinks. */
static int run_items(sdpa_ctx *ctx, const sdpa_backward_args *a,
                     ragged_plan *rp, int64_t items, sdpa_where *where)
{
    const sdpa_problem *any = &rp->parts[0].problem.p; /* read by none */
    for (int64_t i = 0; i < rp->count; i++)
        if (rp->parts[i].kind == PART_CALL)
            sdpa_dq_reset(rp->parts[i].plan.turns,
                          rp->parts[i].plan.turn_count);
    int status =
        sdpa_run_items(ctx, WHO, any, &rp->run, items, 1, ragged_item, where);
    if (status == SDPA_OK && a->dsinks)
        sink_gradients(rp, a->dsinks, a->q.shape[H_DIM]);
    return status;
}

int sdpa_ragged_backward(sdpa_ctx *ctx, const sdpa_backward_args *a)
{
    const sdpa_forward_args f = sdpa_backward_forward_fields(a);
    sdpa_ragged r;
    ragged_totals t = {0};
    size_t bytes = 0;
    int status = check_call(ctx, a, &f, &r, &t);
    if (status == SDPA_OK)
        status = parts_bytes(ctx, &t, &bytes);
    if (status != SDPA_OK)
        return status;
    if (t.parts == 0) {
        for (int64_t h = 0; a->dsinks && h < a->q.shape[H_DIM]; h++)
            a->dsinks[h] = 0;
        ctx->message[0] = '\0';
        return SDPA_OK;
    }
    /* one call whose gemms want the BLAS's threads: all on one worker, as
     * its own call would run (its bits are the same either way) */
    const int64_t budget = t.blas_owns_cores ? 1 : sdpa_thread_budget(ctx);
    ragged_plan rp = {.count = t.parts};
    rp.run.threads = (int)min64(budget, t.items);
    rp.run.reserve_workers =
        ctx->parallel_for ? ctx->parallel_workers : rp.run.threads;
    status = sdpa_parts_reserve(ctx, WHO, bytes);
    if (status == SDPA_OK)
        status = sdpa_scratch_reserve(ctx, WHO, rp.run.reserve_workers,
                                      t.worker_bytes, t.shared_bytes);
    if (status == SDPA_OK)
        status = sdpa_pool_reserve(ctx, WHO, rp.run.reserve_workers, t.items);
    if (status != SDPA_OK)
        return status;
    bwd_part *parts = ctx->parts.ptr;
    bwd_slot *slots = (bwd_slot *)(void *)(parts + t.parts);
    fill_parts(ctx, a, &f, &r, &t, parts, slots, ctx->shared.ptr);
    rp.parts = parts;
    rp.slots = slots;
    sdpa_where where = {-1, -1, -1};
    status = run_items(ctx, a, &rp, t.items, &where);
    if (status == SDPA_ERR_NONFINITE)
        return sdpa_fail(ctx, status,
                         "%s: sequence %lld, head %lld, query row %lld "
                         "(packed row %lld) has a NaN or infinite logit, or "
                         "an lse that is NaN, +inf, or -inf while the row has "
                         "allowed keys; the outputs hold unspecified values",
                         WHO, (long long)where.batch, (long long)where.head,
                         (long long)where.row,
                         (long long)(r.q_off[where.batch] + where.row));
    if (status != SDPA_OK)
        return status;
    ctx->message[0] = '\0';
    return SDPA_OK;
}
