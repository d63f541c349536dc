/*
 * sdpa plan — what one call costs and holds, without running it
 * (docs/man/sdpa.1).
 *
 * flops: 2 · N · Hq · (allowed scores) · (Dk + Dv), the allowed scores of
 * one (batch item, head) counted exactly for the causal modes (no kv_lens,
 * mask or window). The T × T bytes: N · Hq · Tq · Tk · sizeof(elem), what a
 * materialised score (or weight) matrix holds. libsdpa's workspace:
 * sdpa_forward_workspace on a fresh context, once with SDPA_OPT_PATH AUTO
 * and once with each path forced. The tensors' data pointers are fake,
 * never dereferenced addresses in disjoint ranges (outputs must not meet
 * inputs); the inputs are broadcast over N and H with stride 0, the outputs
 * contiguous, so the ranges stay small. Nothing is allocated: the workspace
 * query only validates and plans.
 *
 * AUTO's path is the forced path whose workspace equals AUTO's; when
 * several do, the rule of src/forward/plan.c (docs/CONTEXTS.md states it) picks
 * among them: materialised when the weights are asked for, decode when a KV
 * head serves at most 16 query rows (Hq/Hkv · Tq), tiled otherwise.
 *
 * With --q-lens the call is a ragged one (plan_ragged.c); this file parses
 * the options of both and holds the pieces they share (plan.h).
 */
#include "plan.h"
#include "tool.h"

#include <sdpa.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

void tool_usage_plan(FILE *f)
{
    fprintf(
        f, "usage: sdpa plan --tq T --dk D [--tk T] [--dv D] [--n N] [--hq H]\n"
           "                 [--hkv H] [--dtype f32|f64]\n"
           "                 [--causal none|top-left|bottom-right] [--threads "
           "T]\n"
           "                 [--weights]\n"
           "       sdpa plan --q-lens LIST --dk D [--kv-lens LIST]\n"
           "                 [--keys packed|paged|batched] [--page P] [--tk "
           "T] [...]\n\n"
           "Prints, for one sdpa_forward call of this shape, without running "
           "it:\n"
           "  flops        2 * N * Hq * (allowed scores) * (Dk + Dv); causal "
           "masks count\n"
           "               only the allowed scores, exactly\n"
           "  scores TxT   N * Hq * Tq * Tk * sizeof(dtype): what a "
           "materialised score\n"
           "               matrix holds\n"
           "  libsdpa      the scratch sdpa_forward_workspace reports (fake "
           "data\n"
           "               pointers, nothing allocated) and the path AUTO "
           "takes,\n"
           "               found by forcing each path with SDPA_OPT_PATH\n\n"
           "  --tq T       query rows (required)      --tk T   keys (default "
           "Tq)\n"
           "  --dk D       key width (required)       --dv D   value width "
           "(default Dk)\n"
           "  --n N        batch items (default 1)    --hq H   query heads "
           "(default 1)\n"
           "  --hkv H      KV heads (default Hq; Hq must be a multiple)\n"
           "  --dtype      f32 (default) or f64\n"
           "  --causal     none (default), top-left or bottom-right\n"
           "  --threads T  SDPA_OPT_NUM_THREADS, 1..256 (default 1)\n"
           "  --weights    the call also asks for the weights output\n"
           "  --help       this text\n\n"
           "A ragged call (seqs, q_offsets; docs/RAGGED.md), per sequence "
           "its path,\n"
           "work items, scratch and flops, then the call's totals:\n"
           "  --q-lens L   each sequence's query rows, in place of --tq; L is "
           "a\n"
           "               comma-separated list of VALUE or COUNTxVALUE "
           "(31x1,512:\n"
           "               31 decoding sequences and a 512-row chunk)\n"
           "  --kv-lens L  each sequence's keys, L_b (default: its query "
           "rows)\n"
           "  --keys K     packed (default: kv_offsets), paged (a block table) "
           "or\n"
           "               batched ([seqs, Hkv, Tk, D])\n"
           "  --page P     paged: keys per page (default 16)\n"
           "  --tk T       paged or batched: the keys each sequence has room "
           "for\n"
           "               (default the longest --kv-lens)\n\n"
           "The tile sizes, hence the workspace, follow the BLAS's thread "
           "count\n"
           "(OPENBLAS_NUM_THREADS) as this process sees it.\n");
}

static const char *const dtype_names[] = {"f32", "f64", NULL};
const char *const plan_causal_names[] = {"none", "top-left", "bottom-right",
                                         NULL};
const char *const plan_path_names[] = {"AUTO", "materialised", "tiled",
                                       "decode"};
const char *const plan_keys_names[] = {"packed", "paged", "batched", NULL};

/* Which options the command line gave, for the checks between them. */
typedef struct plan_given {
    bool n, tq, tk, keys, page;
    int kv_lens; /* values --kv-lens gave; -1: none */
} plan_given;

static int parse_option(tool_args *a, plan_opts *o, plan_given *given,
                        int *status)
{
    static const struct {
        const char *name;
        size_t offset;
        int64_t max;
    } ints[] = {
        {"--n", offsetof(plan_opts, n), PLAN_MAX_EXTENT},
        {"--hq", offsetof(plan_opts, hq), PLAN_MAX_EXTENT},
        {"--hkv", offsetof(plan_opts, hkv), PLAN_MAX_EXTENT},
        {"--tq", offsetof(plan_opts, tq), PLAN_MAX_EXTENT},
        {"--tk", offsetof(plan_opts, tk), PLAN_MAX_EXTENT},
        {"--dk", offsetof(plan_opts, dk), PLAN_MAX_EXTENT},
        {"--dv", offsetof(plan_opts, dv), PLAN_MAX_EXTENT},
        {"--threads", offsetof(plan_opts, threads), 256},
        {"--page", offsetof(plan_opts, page), PLAN_MAX_EXTENT},
    };
    size_t i = 0;
    while (i < sizeof ints / sizeof ints[0] && !tool_args_is(a, ints[i].name))
        i++;
    if (i < sizeof ints / sizeof ints[0]) {
        int64_t *field = (int64_t *)((char *)o + ints[i].offset);
        given->n |= field == &o->n;
        given->tq |= field == &o->tq;
        given->tk |= field == &o->tk;
        given->page |= field == &o->page;
        return tool_args_value(a, status) &&
               tool_parse_int(a, 1, ints[i].max, field, status);
    }
    if (tool_args_is(a, "--q-lens") || tool_args_is(a, "--kv-lens")) {
        const bool q = tool_args_is(a, "--q-lens");
        return tool_args_value(a, status) &&
               tool_parse_repeat_list(a, 0, PLAN_MAX_EXTENT,
                                      q ? o->q_lens : o->kv_lens, PLAN_MAX_SEQS,
                                      q ? &o->seqs : &given->kv_lens, status);
    }
    if (tool_args_is(a, "--dtype"))
        return tool_args_value(a, status) &&
               tool_parse_choice(a, dtype_names, &o->dtype, status);
    if (tool_args_is(a, "--causal"))
        return tool_args_value(a, status) &&
               tool_parse_choice(a, plan_causal_names, &o->causal, status);
    if (tool_args_is(a, "--keys")) {
        given->keys = true;
        return tool_args_value(a, status) &&
               tool_parse_choice(a, plan_keys_names, &o->keys, status);
    }
    if (tool_args_is(a, "--weights")) {
        o->weights = true;
        return tool_args_flag(a, status);
    }
    *status = tool_args_unknown(a);
    return false;
}

/* The checks between options, and the defaults they leave. */
static int finish_ragged(plan_opts *o, const plan_given *given)
{
    if (given->tq || given->n)
        return tool_bad_arg("plan",
                            "--%s and --q-lens exclude each other: a "
                            "ragged call's query rows are --q-lens, "
                            "its N is 1",
                            given->tq ? "tq" : "n");
    if (o->weights)
        return tool_bad_arg("plan", "--weights and --q-lens exclude each "
                                    "other: a ragged call does not take the "
                                    "weights output");
    if (given->kv_lens >= 0 && given->kv_lens != o->seqs)
        return tool_bad_arg("plan",
                            "--kv-lens lists %d sequence%s but --q-lens %d: "
                            "one length per sequence",
                            given->kv_lens, given->kv_lens == 1 ? "" : "s",
                            o->seqs);
    if (given->page && o->keys != PLAN_KEYS_PAGED)
        return tool_bad_arg("plan", "--page is for --keys paged");
    if (given->tk && o->keys == PLAN_KEYS_PACKED)
        return tool_bad_arg("plan", "--tk is for --keys paged or batched "
                                    "(packed keys are --kv-lens long)");
    if (given->kv_lens < 0)
        memcpy(o->kv_lens, o->q_lens, (size_t)o->seqs * sizeof o->kv_lens[0]);
    if (!given->page)
        o->page = 16;
    return TOOL_EXIT_OK;
}

static int parse(int argc, char **argv, plan_opts *o)
{
    plan_given given = {.kv_lens = -1};
    tool_args a;
    tool_args_init(&a, "plan", argc, argv);
    int status = TOOL_EXIT_OK;
    while (tool_args_next(&a, &status)) {
        if (tool_args_is(&a, "--help") || tool_args_is(&a, "-h")) {
            tool_usage_plan(stdout);
            return -1;
        }
        if (!parse_option(&a, o, &given, &status))
            return status;
    }
    if (status != TOOL_EXIT_OK)
        return status;
    if (o->seqs > 0) {
        status = finish_ragged(o, &given);
        if (status != TOOL_EXIT_OK)
            return status;
    } else if (given.kv_lens >= 0 || given.keys || given.page) {
        return tool_bad_arg("plan",
                            "--%s describes a ragged call: give "
                            "--q-lens too (see sdpa plan --help)",
                            given.kv_lens >= 0 ? "kv-lens"
                            : given.keys       ? "keys"
                                               : "page");
    } else if (!o->tq) {
        return tool_bad_arg("plan", "--tq is required (see sdpa plan --help)");
    }
    if (!o->dk)
        return tool_bad_arg("plan", "--dk is required (see sdpa plan --help)");
    if (!o->tk)
        o->tk = o->tq;
    if (!o->dv)
        o->dv = o->dk;
    if (!o->hkv)
        o->hkv = o->hq;
    if (o->hq % o->hkv != 0)
        return tool_bad_arg("plan", "--hq %lld is not a multiple of --hkv %lld",
                            (long long)o->hq, (long long)o->hkv);
    return TOOL_EXIT_OK;
}

bool plan_mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b != 0 && a > UINT64_MAX / b)
        return false;
    *out = a * b;
    return true;
}

bool plan_add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a > UINT64_MAX - b)
        return false;
    *out = a + b;
    return true;
}

/* Row i sees keys j < Tk with j <= i (top-left) or j <= i + Tk - Tq
 * (bottom-right); with Tk - Tq < 0 the first Tq - Tk bottom-right rows see
 * nothing (the library then refuses the call: empty rows). Tq, Tk <=
 * 2^31 - 1, so no product here overflows. */
uint64_t plan_allowed_scores(int64_t tq, int64_t tk, int causal)
{
    if (causal == SDPA_CAUSAL_NONE)
        return (uint64_t)tq * (uint64_t)tk;
    /* row i sees min(Tk, max(0, i + 1 + offset)) keys */
    int64_t offset = causal == SDPA_CAUSAL_TOP_LEFT ? 0 : tk - tq;
    /* rows with i + 1 + offset in [1, Tk]: a triangle, then full rows */
    int64_t first = offset < 0 ? -offset : 0; /* first row seeing a key */
    if (first >= tq)
        return 0;
    int64_t last_partial = tk - 1 - offset; /* last row below Tk keys */
    if (last_partial > tq - 1)
        last_partial = tq - 1;
    uint64_t total = 0;
    if (last_partial >= first) {
        uint64_t lo = (uint64_t)(first + 1 + offset);
        uint64_t hi = (uint64_t)(last_partial + 1 + offset);
        /* Σ lo..hi, lo + hi <= 2^32 and hi - lo + 1 <= 2^31 */
        total = (lo + hi) * (hi - lo + 1) / 2;
    }
    int64_t full_from = last_partial >= first ? last_partial + 1 : first;
    if (full_from < tq)
        total += (uint64_t)(tq - full_from) * (uint64_t)tk;
    return total;
}

void plan_format_count(double x, const char *unit, char *buf, size_t size)
{
    static const char *const prefixes[] = {"", "k", "M", "G", "T", "P", "E"};
    int p = 0;
    while (x >= 1000 && p < 6) {
        x /= 1000;
        p++;
    }
    snprintf(buf, size,
             p == 0 || x >= 100 ? "%.0f %s%s"
             : x >= 10          ? "%.1f %s%s"
                                : "%.2f %s%s",
             x, prefixes[p], unit);
}

bool plan_place(uintptr_t *at, uint64_t bytes, void **data)
{
    uint64_t end;
    if (!plan_add_u64((uint64_t)*at, bytes, &end) ||
        !plan_add_u64(end, 8191, &end) || end > (uint64_t)UINTPTR_MAX)
        return false;
    *data = (void *)*at;
    *at = (uintptr_t)(end / 4096 * 4096);
    return true;
}

bool plan_place_rows(uintptr_t *at, int64_t rows, int64_t cols, uint64_t elem,
                     void **data)
{
    uint64_t bytes;
    return plan_mul_u64((uint64_t)rows, (uint64_t)cols, &bytes) &&
           plan_mul_u64(bytes, elem, &bytes) && plan_place(at, bytes, data);
}

/* An input broadcast over N and H: rows · cols elements. */
static sdpa_tensor broadcast_input(void *data, const plan_opts *o, int64_t h,
                                   int64_t t, int64_t d)
{
    sdpa_tensor x = {data, {o->n, h, t, d}, {0, 0, d, 1}};
    return x;
}

bool plan_workspaces(int64_t threads, const sdpa_forward_args *args,
                     size_t bytes[4], bool ok[4], char why[4][256])
{
    sdpa_ctx *ctx = NULL;
    int status = sdpa_ctx_create(&ctx);
    if (status == SDPA_OK)
        status = sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, threads);
    if (status != SDPA_OK) {
        fprintf(stderr, "sdpa plan: %s: %s\n",
                ctx ? "sdpa_ctx_set_int" : "sdpa_ctx_create",
                sdpa_status_string(status));
        sdpa_ctx_destroy(ctx);
        return false;
    }
    for (int p = SDPA_PATH_AUTO; p <= SDPA_PATH_DECODE; p++) {
        status = sdpa_ctx_set_int(ctx, SDPA_OPT_PATH, p);
        if (status == SDPA_OK)
            status = sdpa_forward_workspace(ctx, args, &bytes[p]);
        ok[p] = status == SDPA_OK;
        if (!ok[p])
            snprintf(why[p], 256, "%s: %s", sdpa_status_string(status),
                     sdpa_ctx_last_error(ctx));
    }
    sdpa_ctx_destroy(ctx);
    return true;
}

int plan_auto_path(const size_t bytes[4], const bool ok[4], int rule,
                   int *matches)
{
    int auto_path = 0;
    *matches = 0;
    for (int p = SDPA_PATH_MATERIALISED; p <= SDPA_PATH_DECODE; p++)
        if (ok[p] && bytes[p] == bytes[SDPA_PATH_AUTO]) {
            ++*matches;
            if (!auto_path || p == rule)
                auto_path = p;
        }
    return auto_path;
}

/* The keys the first and the last query row see (docs/SEMANTICS.md, the
 * causal anchors), and a warning for the case that catches ports: a few
 * query rows against a longer cache, anchored top-left, see only the
 * first keys (PyTorch's is_causal=True is top-left; a decoder wants
 * bottom-right). */
static void print_keys_seen(const plan_opts *o)
{
    const int64_t rows[2] = {0, o->tq - 1};
    printf("keys seen        ");
    for (int r = 0; r < (o->tq > 1 ? 2 : 1); r++) {
        int64_t i = rows[r], last = o->tk - 1;
        if (o->causal == SDPA_CAUSAL_TOP_LEFT)
            last = i < last ? i : last;
        else if (o->causal == SDPA_CAUSAL_BOTTOM_RIGHT)
            last = i + o->tk - o->tq;
        if (last < 0)
            printf("%squery row %lld: none", r ? "; " : "", (long long)i);
        else
            printf("%squery row %lld: keys 0..%lld", r ? "; " : "",
                   (long long)i, (long long)last);
    }
    printf("\n");
    if (o->causal == SDPA_CAUSAL_TOP_LEFT && o->tq < o->tk)
        printf("                 top-left with Tq < Tk: query row 0 sees key "
               "0 only; new tokens\n"
               "                 against a cache want --causal "
               "bottom-right\n");
}

static int plan_rectangular(const plan_opts *o)
{
    const uint64_t elem = o->dtype ? sizeof(double) : sizeof(float);

    /* flops and the T × T bytes, exactly when they fit 64 bits */
    uint64_t heads = 0, allowed = plan_allowed_scores(o->tq, o->tk, o->causal),
             flops = 0, scores = 0, tt = 0;
    bool flops_ok = plan_mul_u64((uint64_t)o->n, (uint64_t)o->hq, &heads) &&
                    plan_mul_u64(heads, allowed, &flops) &&
                    plan_mul_u64(flops, 2 * (uint64_t)(o->dk + o->dv), &flops);
    bool tt_ok = plan_mul_u64(heads, (uint64_t)o->tq, &tt) &&
                 plan_mul_u64(tt, (uint64_t)o->tk, &scores) &&
                 plan_mul_u64(scores, elem, &tt);
    double flops_d = 2.0 * (double)o->n * (double)o->hq * (double)allowed *
                     (double)(o->dk + o->dv);
    double tt_d = (double)o->n * (double)o->hq * (double)o->tq * (double)o->tk *
                  (double)elem;

    /* the call, on fake addresses */
    sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
    args.dtype = o->dtype ? SDPA_FLOAT64 : SDPA_FLOAT32;
    args.causal = o->causal;
    uintptr_t at = (uintptr_t)1 << 20;
    uint64_t out_elems, w_elems = 0;
    void *q, *k, *v, *out, *w = NULL;
    bool placed =
        plan_mul_u64(heads, (uint64_t)o->tq, &out_elems) &&
        (!o->weights || plan_mul_u64(out_elems, (uint64_t)o->tk, &w_elems)) &&
        plan_mul_u64(out_elems, (uint64_t)o->dv, &out_elems) &&
        plan_place_rows(&at, o->tq, o->dk, elem, &q) &&
        plan_place_rows(&at, o->tk, o->dk, elem, &k) &&
        plan_place_rows(&at, o->tk, o->dv, elem, &v) &&
        plan_mul_u64(out_elems, elem, &out_elems) &&
        plan_place(&at, out_elems, &out) &&
        (!o->weights || (plan_mul_u64(w_elems, elem, &w_elems) &&
                         plan_place(&at, w_elems, &w)));
    if (!placed) {
        fprintf(stderr, "sdpa plan: the call's tensors do not fit this "
                        "address space\n");
        return TOOL_EXIT_FAILURE;
    }
    args.q = broadcast_input(q, o, o->hq, o->tq, o->dk);
    args.k = broadcast_input(k, o, o->hkv, o->tk, o->dk);
    args.v = broadcast_input(v, o, o->hkv, o->tk, o->dv);
    args.out = sdpa_tensor_bhtd(out, o->n, o->hq, o->tq, o->dv);
    if (o->weights)
        args.weights = sdpa_tensor_bhtd(w, o->n, o->hq, o->tq, o->tk);

    size_t bytes[4] = {0};
    bool ok[4];
    char why[4][256];
    if (!plan_workspaces(o->threads, &args, bytes, ok, why))
        return TOOL_EXIT_FAILURE;
    if (!ok[SDPA_PATH_AUTO]) {
        fprintf(stderr, "sdpa plan: the library refuses this call: %s\n",
                why[SDPA_PATH_AUTO]);
        return TOOL_EXIT_FAILURE;
    }

    /* AUTO's path: the forced one with the same workspace; the rule
     * breaks ties. */
    int rule = o->weights ? SDPA_PATH_MATERIALISED
               : o->hq / o->hkv * o->tq <= PLAN_DECODE_MAX_ROWS
                   ? SDPA_PATH_DECODE
                   : SDPA_PATH_TILED;
    int matches;
    int auto_path = plan_auto_path(bytes, ok, rule, &matches);

    char buf[64];
    printf("sdpa plan: N=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld Dk=%lld "
           "Dv=%lld, %s, causal %s, %lld thread%s%s\n\n",
           (long long)o->n, (long long)o->hq, (long long)o->hkv,
           (long long)o->tq, (long long)o->tk, (long long)o->dk,
           (long long)o->dv, o->dtype ? "float64" : "float32",
           plan_causal_names[o->causal], (long long)o->threads,
           o->threads > 1 ? "s" : "", o->weights ? ", weights out" : "");
    plan_format_count(flops_d, "flop", buf, sizeof buf);
    if (flops_ok)
        printf("flops            %llu  (%s; %llu allowed scores per head)\n",
               (unsigned long long)flops, buf, (unsigned long long)allowed);
    else
        printf("flops            %.4g  (%s; %llu allowed scores per head)\n",
               flops_d, buf, (unsigned long long)allowed);
    print_keys_seen(o);
    tool_format_bytes(tt_d, buf, sizeof buf);
    if (tt_ok)
        printf("scores T x T     %llu bytes  (%s, materialised)\n",
               (unsigned long long)tt, buf);
    else
        printf("scores T x T     %.4g bytes  (%s, materialised)\n", tt_d, buf);
    tool_format_bytes((double)bytes[SDPA_PATH_AUTO], buf, sizeof buf);
    printf("libsdpa scratch  %zu bytes  (%s, %s path: AUTO's choice%s)\n",
           bytes[SDPA_PATH_AUTO], buf,
           auto_path ? plan_path_names[auto_path] : "unknown",
           matches > 1 ? ", by the rule among equal workspaces" : "");
    if (bytes[SDPA_PATH_AUTO] > 0) {
        double ratio = tt_d / (double)bytes[SDPA_PATH_AUTO];
        printf(ratio >= 100 ? "                 T x T / scratch = %.0f\n"
                            : "                 T x T / scratch = %.3g\n",
               ratio);
    }
    printf("\nsdpa_forward_workspace with SDPA_OPT_PATH forced:\n");
    for (int p = SDPA_PATH_MATERIALISED; p <= SDPA_PATH_DECODE; p++) {
        if (ok[p]) {
            tool_format_bytes((double)bytes[p], buf, sizeof buf);
            printf("  %-13s  %zu bytes  (%s)%s\n", plan_path_names[p], bytes[p],
                   buf, p == auto_path ? "  <- AUTO" : "");
        } else {
            printf("  %-13s  refused: %s\n", plan_path_names[p], why[p]);
        }
    }
    return TOOL_EXIT_OK;
}

int tool_cmd_plan(int argc, char **argv)
{
    static plan_opts o; /* its lists are large for a stack */
    memset(&o, 0, sizeof o);
    o.n = o.hq = o.threads = 1;
    int status = parse(argc, argv, &o);
    if (status != TOOL_EXIT_OK)
        return status < 0 ? TOOL_EXIT_OK : status;
    status = o.seqs > 0 ? plan_ragged(&o) : plan_rectangular(&o);
    if (status != TOOL_EXIT_OK)
        return status;
    const char *blas = getenv("OPENBLAS_NUM_THREADS");
    printf("\nThe tile sizes, hence the scratch, follow the BLAS's thread "
           "count\n(docs/THREADS.md): here OPENBLAS_NUM_THREADS %s%s.\n",
           blas && *blas ? "= " : "is unset (one per core)",
           blas && *blas ? blas : "");
    return TOOL_EXIT_OK;
}
