/*
 * sdpa plan for a ragged call (--q-lens; docs/RAGGED.md): per sequence
 * the path, the work items and the scratch of its own rectangular call
 * (a ragged call plans each sequence as that call would be planned), then
 * the whole call's workspace and its parts.
 *
 * Everything is read from sdpa_forward_workspace on fake pointers, as in
 * plan.c. On a fresh context with T threads a call's workspace is
 *
 *   W(T) = partials + records + min(T, items) · per-worker scratch
 *
 * (scratch for as many workers as its items can keep busy; partials are a
 * decode sequence's, records the ragged call's one per sequence:
 * docs/RAGGED.md, "Memory"). So the per-worker scratch is W(2) - W(1) of
 * a call with at least two items, and the items are (W(256) - W(1)) /
 * per-worker + 1, exact below 256. A sequence's calls at one and two KV
 * heads (the same group of query heads) give its per-worker scratch and
 * its items per KV head: neither the blocks nor the per-worker scratch
 * depend on the number of KV heads, and the items are a multiple of it.
 */
#include "plan.h"
#include "tool.h"

#include <sdpa.h>

#include <stdlib.h>
#include <string.h>

/* src/core/context.h: each decode sequence's partials start on a line of
 * this many bytes. */
#define PARTIALS_ALIGN 64
#define MOST_WORKERS 256 /* SDPA_OPT_NUM_THREADS's largest value */

/* The fake tensors and real index arrays of the call. */
typedef struct ragged_call {
    const plan_opts *o;
    int64_t q_off[PLAN_MAX_SEQS + 1], kv_off[PLAN_MAX_SEQS + 1];
    int64_t tk;            /* paged or batched: each sequence's keys */
    int64_t pages_per_seq; /* paged */
    int32_t *table;        /* paged: [seqs, pages_per_seq] */
    void *q, *k, *v, *out;
    uint64_t elem;
} ragged_call;

/* What the workspace queries tell of one sequence. */
typedef struct seq_plan {
    int path;              /* SDPA_PATH_*, 0 without query rows */
    int64_t items;         /* of the parallel phase */
    bool items_capped;     /* at least `items` */
    size_t worker_bytes;   /* scratch per worker */
    size_t partials_bytes; /* decode: partial results of the chunks */
} seq_plan;

static sdpa_tensor input(void *data, int64_t n, int64_t h, int64_t t, int64_t d)
{
    sdpa_tensor x = {data, {n, h, t, d}, {0, 0, d, 1}};
    return x;
}

/* Rows [first, first + rows) of an input broadcast over N and H. */
static void *rows_of(void *data, int64_t first, int64_t d, uint64_t elem)
{
    return (char *)data + (uint64_t)first * (uint64_t)d * elem;
}

static sdpa_forward_args common_args(const ragged_call *c)
{
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = c->o->dtype ? SDPA_FLOAT64 : SDPA_FLOAT32;
    a.causal = c->o->causal;
    if (c->table) {
        a.block_table = c->table;
        a.pages_per_seq = c->pages_per_seq;
    }
    return a;
}

/* The keys of sequence b (or of the whole call, b < 0) with hkv heads. */
static void keys_of(const ragged_call *c, int64_t b, int64_t hkv,
                    sdpa_forward_args *a)
{
    const plan_opts *o = c->o;
    if (o->keys == PLAN_KEYS_PAGED) {
        a->k = input(c->k, c->pages_per_seq, hkv, o->page, o->dk);
        a->v = input(c->v, c->pages_per_seq, hkv, o->page, o->dv);
        a->k.stride[0] = o->page * o->dk; /* pages side by side */
        a->v.stride[0] = o->page * o->dv;
        a->kv_lens = b < 0 ? o->kv_lens : &o->kv_lens[b];
        if (b >= 0)
            a->block_table = c->table + b * c->pages_per_seq;
    } else if (o->keys == PLAN_KEYS_BATCHED) {
        a->k = input(c->k, b < 0 ? o->seqs : 1, hkv, c->tk, o->dk);
        a->v = input(c->v, b < 0 ? o->seqs : 1, hkv, c->tk, o->dv);
        a->kv_lens = b < 0 ? o->kv_lens : &o->kv_lens[b];
    } else if (b < 0) {
        const int64_t total_k = c->kv_off[o->seqs];
        a->k = input(c->k, 1, hkv, total_k, o->dk);
        a->v = input(c->v, 1, hkv, total_k, o->dv);
        a->kv_offsets = c->kv_off;
    } else { /* its own rows; none: one row it never reads (kv_lens 0) */
        static const int64_t no_keys = 0;
        const int64_t len = o->kv_lens[b];
        a->k = input(rows_of(c->k, c->kv_off[b], o->dk, c->elem), 1, hkv,
                     len ? len : 1, o->dk);
        a->v = input(rows_of(c->v, c->kv_off[b], o->dv, c->elem), 1, hkv,
                     len ? len : 1, o->dv);
        if (!len)
            a->kv_lens = &no_keys;
    }
}

static sdpa_forward_args whole_args(const ragged_call *c)
{
    const plan_opts *o = c->o;
    const int64_t total_q = c->q_off[o->seqs];
    sdpa_forward_args a = common_args(c);
    a.seqs = o->seqs;
    a.q_offsets = c->q_off;
    a.q = input(c->q, 1, o->hq, total_q, o->dk);
    a.out = sdpa_tensor_bthd(c->out, 1, o->hq, total_q, o->dv);
    keys_of(c, -1, o->hkv, &a);
    return a;
}

/* Sequence b as a rectangular call of its own with hq and hkv heads. */
static sdpa_forward_args seq_args(const ragged_call *c, int64_t b, int64_t hq,
                                  int64_t hkv)
{
    const plan_opts *o = c->o;
    const int64_t first = c->q_off[b], rows = o->q_lens[b];
    sdpa_forward_args a = common_args(c);
    a.q = input(rows_of(c->q, first, o->dk, c->elem), 1, hq, rows, o->dk);
    a.out = sdpa_tensor_bthd(
        (char *)c->out + (uint64_t)first * (uint64_t)(o->hq * o->dv) * c->elem,
        1, hq, rows, o->dv);
    /* rows of the packed out (room for the probes' 2 · group heads) */
    a.out.stride[2] = (hq > o->hq ? hq : o->hq) * o->dv;
    keys_of(c, b, hkv, &a);
    return a;
}

/* sdpa_forward_workspace of a at `threads` on a fresh context. */
static bool workspace_at(const sdpa_forward_args *a, int64_t threads,
                         size_t *bytes, char why[256])
{
    sdpa_ctx *ctx = NULL;
    int status = sdpa_ctx_create(&ctx);
    if (status == SDPA_OK)
        status = sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, threads);
    if (status == SDPA_OK)
        status = sdpa_forward_workspace(ctx, a, bytes);
    if (status != SDPA_OK)
        snprintf(why, 256, "%s: %s", sdpa_status_string(status),
                 ctx ? sdpa_ctx_last_error(ctx) : "no context");
    sdpa_ctx_destroy(ctx);
    return status == SDPA_OK;
}

/* The path, items and scratch of sequence b (see the top of the file). */
static bool plan_seq(const ragged_call *c, int64_t b, seq_plan *s,
                     char why[256])
{
    const plan_opts *o = c->o;
    const int64_t group = o->hq / o->hkv;
    *s = (seq_plan){0};
    if (o->q_lens[b] == 0)
        return true;
    sdpa_forward_args full = seq_args(c, b, o->hq, o->hkv);
    size_t bytes[4] = {0}, one, two, one_head, most;
    bool ok[4];
    char whys[4][256];
    if (!plan_workspaces(1, &full, bytes, ok, whys))
        return false;
    if (!ok[SDPA_PATH_AUTO]) {
        memcpy(why, whys[SDPA_PATH_AUTO], 256);
        return false;
    }
    const int rule = group * o->q_lens[b] <= PLAN_DECODE_MAX_ROWS
                         ? SDPA_PATH_DECODE
                         : SDPA_PATH_TILED;
    int matches;
    s->path = plan_auto_path(bytes, ok, rule, &matches);
    sdpa_forward_args heads1 = seq_args(c, b, group, 1);
    sdpa_forward_args heads2 = seq_args(c, b, 2 * group, 2);
    if (!workspace_at(&heads2, 1, &one, why) ||
        !workspace_at(&heads2, 2, &two, why) ||
        !workspace_at(&heads1, 1, &one_head, why) ||
        !workspace_at(&heads1, MOST_WORKERS, &most, why))
        return false;
    s->worker_bytes = two - one;
    s->partials_bytes = bytes[SDPA_PATH_AUTO] - s->worker_bytes;
    const int64_t per_head =
        s->worker_bytes ? (int64_t)((most - one_head) / s->worker_bytes) + 1
                        : 1;
    s->items_capped = per_head >= MOST_WORKERS;
    s->items = per_head * o->hkv;
    return true;
}

/* The offsets, the block table and the fake tensors. */
static bool build_call(const plan_opts *o, ragged_call *c)
{
    memset(c, 0, sizeof *c);
    c->o = o;
    c->elem = o->dtype ? sizeof(double) : sizeof(float);
    int64_t longest = 0;
    for (int b = 0; b < o->seqs; b++) {
        c->q_off[b + 1] = c->q_off[b] + o->q_lens[b];
        c->kv_off[b + 1] = c->kv_off[b] + o->kv_lens[b];
        longest = o->kv_lens[b] > longest ? o->kv_lens[b] : longest;
    }
    c->tk = o->tk ? o->tk : longest ? longest : 1;
    int64_t key_rows = c->kv_off[o->seqs] ? c->kv_off[o->seqs] : 1;
    if (o->keys == PLAN_KEYS_PAGED) {
        /* every row names pages 0 .. pages_per_seq - 1 of one pool: the
         * library reads no data, only the table */
        c->pages_per_seq = (c->tk + o->page - 1) / o->page;
        uint64_t entries;
        if (!plan_mul_u64((uint64_t)o->seqs, (uint64_t)c->pages_per_seq,
                          &entries) ||
            entries > SIZE_MAX / sizeof(int32_t) ||
            !(c->table = malloc((size_t)entries * sizeof(int32_t)))) {
            fprintf(stderr,
                    "sdpa plan: no memory for a block table of %d "
                    "rows of %lld pages\n",
                    o->seqs, (long long)c->pages_per_seq);
            return false;
        }
        for (uint64_t i = 0; i < entries; i++)
            c->table[i] = (int32_t)(i % (uint64_t)c->pages_per_seq);
        key_rows = c->pages_per_seq * o->page;
    } else if (o->keys == PLAN_KEYS_BATCHED) {
        key_rows = c->tk;
    }
    uintptr_t at = (uintptr_t)1 << 20;
    uint64_t out_bytes;
    const int64_t total_q = c->q_off[o->seqs] ? c->q_off[o->seqs] : 1;
    /* out: room for the probes' 2 · group heads a row (seq_args) */
    bool placed =
        plan_place_rows(&at, total_q, o->dk, c->elem, &c->q) &&
        plan_place_rows(&at, key_rows, o->dk, c->elem, &c->k) &&
        plan_place_rows(&at, key_rows, o->dv, c->elem, &c->v) &&
        plan_mul_u64((uint64_t)total_q, 2 * (uint64_t)o->hq, &out_bytes) &&
        plan_mul_u64(out_bytes, (uint64_t)o->dv, &out_bytes) &&
        plan_mul_u64(out_bytes, c->elem, &out_bytes) &&
        plan_place(&at, out_bytes, &c->out);
    if (!placed)
        fprintf(stderr, "sdpa plan: the call's tensors do not fit this "
                        "address space\n");
    return placed;
}

static void print_header(const ragged_call *c)
{
    const plan_opts *o = c->o;
    char keys[96];
    if (o->keys == PLAN_KEYS_PAGED)
        snprintf(keys, sizeof keys, "paged keys (%lld pages of %lld a row)",
                 (long long)c->pages_per_seq, (long long)o->page);
    else if (o->keys == PLAN_KEYS_BATCHED)
        snprintf(keys, sizeof keys, "batched keys (Tk=%lld)", (long long)c->tk);
    else
        snprintf(keys, sizeof keys, "packed keys");
    printf("sdpa plan: ragged, %d sequence%s, %s, Hq=%lld Hkv=%lld Dk=%lld "
           "Dv=%lld, %s, causal %s, %lld thread%s\n\n",
           o->seqs, o->seqs > 1 ? "s" : "", keys, (long long)o->hq,
           (long long)o->hkv, (long long)o->dk, (long long)o->dv,
           o->dtype ? "float64" : "float32", plan_causal_names[o->causal],
           (long long)o->threads, o->threads > 1 ? "s" : "");
    printf(" seq        Tq        Tk         L  path     items   per worker  "
           "   partials  flops\n");
}

/* The call's totals over its sequences. */
typedef struct ragged_totals {
    int parts;
    int64_t items, merges;
    bool items_capped;
    size_t worker_bytes, partials_bytes;
    uint64_t allowed; /* (row, key) pairs, per head */
    double flops;
} ragged_totals;

static void print_seq(const ragged_call *c, int b, const seq_plan *s,
                      ragged_totals *t)
{
    const plan_opts *o = c->o;
    const int64_t tk =
        o->keys == PLAN_KEYS_PACKED
            ? o->kv_lens[b]
            : (o->keys == PLAN_KEYS_PAGED ? c->pages_per_seq * o->page : c->tk);
    const uint64_t allowed =
        plan_allowed_scores(o->q_lens[b], o->kv_lens[b], o->causal);
    const double flops =
        2.0 * (double)o->hq * (double)allowed * (double)(o->dk + o->dv);
    char items[32], buf[32];
    t->allowed += allowed;
    t->flops += flops;
    if (!s->path) {
        printf("%4d %9lld %9lld %9lld  -        (no query rows: skipped)\n", b,
               (long long)o->q_lens[b], (long long)tk,
               (long long)o->kv_lens[b]);
        return;
    }
    t->parts++;
    t->items += s->items;
    t->items_capped |= s->items_capped;
    t->worker_bytes =
        s->worker_bytes > t->worker_bytes ? s->worker_bytes : t->worker_bytes;
    if (s->path == SDPA_PATH_DECODE) {
        t->merges += o->hkv; /* one merge item per KV head */
        t->partials_bytes += (s->partials_bytes + PARTIALS_ALIGN - 1) /
                             PARTIALS_ALIGN * PARTIALS_ALIGN;
    }
    snprintf(items, sizeof items, "%s%lld", s->items_capped ? ">=" : "",
             (long long)s->items);
    plan_format_count(flops, "flop", buf, sizeof buf);
    printf("%4d %9lld %9lld %9lld  %-7s %6s %12zu %12zu  %s\n", b,
           (long long)o->q_lens[b], (long long)tk, (long long)o->kv_lens[b],
           plan_path_names[s->path], items, s->worker_bytes, s->partials_bytes,
           buf);
}

static void print_totals(const ragged_call *c, const ragged_totals *t,
                         size_t total, size_t one_thread)
{
    const plan_opts *o = c->o;
    const int64_t total_q = c->q_off[o->seqs], total_l = c->kv_off[o->seqs];
    char buf[64];
    printf("\nsequences        %d with query rows of %d; %lld query rows, "
           "%lld keys in all\n",
           t->parts, o->seqs, (long long)total_q, (long long)total_l);
    plan_format_count(t->flops, "flop", buf, sizeof buf);
    printf("flops            %.0f  (%s; each sequence's allowed scores)\n",
           t->flops, buf);
    const double dense = (double)total_q * (double)total_l;
    printf("dense mask       %lld x %lld = %.0f (row, key) pairs per head, "
           "%.3g%% allowed:\n"
           "                 what one rectangular call with a mask spans\n",
           (long long)total_q, (long long)total_l, dense,
           dense > 0 ? 100.0 * (double)t->allowed / dense : 0.0);
    printf("work items       %s%lld in the parallel phase (heaviest first), "
           "then %lld merge item%s\n",
           t->items_capped ? ">=" : "", (long long)t->items,
           (long long)t->merges, t->merges == 1 ? "" : "s");
    tool_format_bytes((double)total, buf, sizeof buf);
    printf("libsdpa scratch  %zu bytes  (%s, %lld thread%s)\n", total, buf,
           (long long)o->threads, o->threads > 1 ? "s" : "");
    const size_t workers =
        t->worker_bytes ? (total - one_thread) / t->worker_bytes + 1 : 0;
    const size_t records = one_thread - t->worker_bytes - t->partials_bytes;
    printf("  per worker     %zu bytes x %zu worker%s  (the largest "
           "sequence's)\n",
           t->worker_bytes, workers, workers == 1 ? "" : "s");
    printf("  partials       %zu bytes  (the decode sequences', each from a "
           "64-byte line)\n",
           t->partials_bytes);
    printf("  records        %zu bytes  (%d sequences, %zu each)\n", records,
           t->parts, t->parts ? records / (size_t)t->parts : 0);
}

int plan_ragged(const plan_opts *o)
{
    static ragged_call c; /* its offsets are large for a stack */
    if (!build_call(o, &c))
        return TOOL_EXIT_FAILURE;
    int status = TOOL_EXIT_FAILURE;
    char why[256];
    size_t total, one_thread;
    sdpa_forward_args whole = whole_args(&c);
    if (!workspace_at(&whole, o->threads, &total, why) ||
        !workspace_at(&whole, 1, &one_thread, why)) {
        fprintf(stderr, "sdpa plan: the library refuses this call: %s\n", why);
        goto done;
    }
    print_header(&c);
    ragged_totals t = {0};
    for (int b = 0; b < o->seqs; b++) {
        seq_plan s;
        if (!plan_seq(&c, b, &s, why)) {
            fprintf(stderr, "sdpa plan: sequence %d: %s\n", b, why);
            goto done;
        }
        print_seq(&c, b, &s, &t);
    }
    print_totals(&c, &t, total, one_thread);
    status = TOOL_EXIT_OK;
done:
    free(c.table);
    return status;
}
