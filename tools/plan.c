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
 */
#include "tool.h"

#include <sdpa.h>

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#define MAX_EXTENT INT64_C(2147483647) /* the BLAS int */
#define DECODE_MAX_ROWS 16 /* src/forward/plan.c, docs/CONTEXTS.md */

void tool_usage_plan(FILE *f)
{
    fprintf(
        f, "usage: sdpa plan --tq T --dk D [--tk T] [--dv D] [--n N] [--hq H]\n"
           "                 [--hkv H] [--dtype f32|f64]\n"
           "                 [--causal none|top-left|bottom-right] [--threads "
           "T]\n"
           "                 [--weights]\n\n"
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
           "The tile sizes, hence the workspace, follow the BLAS's thread "
           "count\n"
           "(OPENBLAS_NUM_THREADS) as this process sees it.\n");
}

typedef struct plan_opts {
    int64_t n, hq, hkv, tq, tk, dk, dv, threads;
    int dtype; /* 0 f32, 1 f64 */
    int causal;
    bool weights;
} plan_opts;

static const char *const dtype_names[] = {"f32", "f64", NULL};
static const char *const causal_names[] = {"none", "top-left", "bottom-right",
                                           NULL};
static const char *const path_names[] = {"AUTO", "materialised", "tiled",
                                         "decode"};

static int parse(int argc, char **argv, plan_opts *o)
{
    static const struct {
        const char *name;
        size_t offset;
        int64_t max;
    } ints[] = {
        {"--n", offsetof(plan_opts, n), MAX_EXTENT},
        {"--hq", offsetof(plan_opts, hq), MAX_EXTENT},
        {"--hkv", offsetof(plan_opts, hkv), MAX_EXTENT},
        {"--tq", offsetof(plan_opts, tq), MAX_EXTENT},
        {"--tk", offsetof(plan_opts, tk), MAX_EXTENT},
        {"--dk", offsetof(plan_opts, dk), MAX_EXTENT},
        {"--dv", offsetof(plan_opts, dv), MAX_EXTENT},
        {"--threads", offsetof(plan_opts, threads), 256},
    };
    tool_args a;
    tool_args_init(&a, "plan", argc, argv);
    int status = TOOL_EXIT_OK;
    while (tool_args_next(&a, &status)) {
        size_t i = 0;
        while (i < sizeof ints / sizeof ints[0] &&
               !tool_args_is(&a, ints[i].name))
            i++;
        if (i < sizeof ints / sizeof ints[0]) {
            int64_t *field = (int64_t *)((char *)o + ints[i].offset);
            if (!tool_args_value(&a, &status) ||
                !tool_parse_int(&a, 1, ints[i].max, field, &status))
                return status;
        } else if (tool_args_is(&a, "--help") || tool_args_is(&a, "-h")) {
            tool_usage_plan(stdout);
            return -1;
        } else if (tool_args_is(&a, "--dtype")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_choice(&a, dtype_names, &o->dtype, &status))
                return status;
        } else if (tool_args_is(&a, "--causal")) {
            if (!tool_args_value(&a, &status) ||
                !tool_parse_choice(&a, causal_names, &o->causal, &status))
                return status;
        } else if (tool_args_is(&a, "--weights")) {
            if (!tool_args_flag(&a, &status))
                return status;
            o->weights = true;
        } else {
            return tool_args_unknown(&a);
        }
    }
    if (status != TOOL_EXIT_OK)
        return status;
    if (!o->tq)
        return tool_bad_arg("plan", "--tq is required (see sdpa plan --help)");
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

static bool mul_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (b != 0 && a > UINT64_MAX / b)
        return false;
    *out = a * b;
    return true;
}

static bool add_u64(uint64_t a, uint64_t b, uint64_t *out)
{
    if (a > UINT64_MAX - b)
        return false;
    *out = a + b;
    return true;
}

/* The allowed (query row, key) pairs of one batch item and head. Row i
 * sees keys j < Tk with j <= i (top-left) or j <= i + Tk - Tq
 * (bottom-right); with Tk - Tq < 0 the first Tq - Tk bottom-right rows see
 * nothing (the library then refuses the call: empty rows). Tq, Tk <=
 * 2^31 - 1, so no product here overflows. */
static uint64_t allowed_scores(const plan_opts *o)
{
    const uint64_t tq = (uint64_t)o->tq, tk = (uint64_t)o->tk;
    if (o->causal == SDPA_CAUSAL_NONE)
        return tq * tk;
    /* row i sees min(Tk, max(0, i + 1 + offset)) keys */
    int64_t offset = o->causal == SDPA_CAUSAL_TOP_LEFT ? 0 : o->tk - o->tq;
    /* rows with i + 1 + offset in [1, Tk]: a triangle, then full rows */
    int64_t first = offset < 0 ? -offset : 0; /* first row seeing a key */
    if (first >= o->tq)
        return 0;
    int64_t last_partial = o->tk - 1 - offset; /* last row below Tk keys */
    if (last_partial > o->tq - 1)
        last_partial = o->tq - 1;
    uint64_t total = 0;
    if (last_partial >= first) {
        uint64_t lo = (uint64_t)(first + 1 + offset);
        uint64_t hi = (uint64_t)(last_partial + 1 + offset);
        /* Σ lo..hi, lo + hi <= 2^32 and hi - lo + 1 <= 2^31 */
        total = (lo + hi) * (hi - lo + 1) / 2;
    }
    int64_t full_from = last_partial >= first ? last_partial + 1 : first;
    if (full_from < o->tq)
        total += (uint64_t)(o->tq - full_from) * tk;
    return total;
}

static void format_count(double x, const char *unit, char *buf, size_t size)
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

/* Fake addresses: disjoint, 4096-aligned ranges from 1 MiB up, one per
 * tensor; never dereferenced. */
static bool place(uintptr_t *at, uint64_t bytes, void **data)
{
    uint64_t end;
    if (!add_u64((uint64_t)*at, bytes, &end) || !add_u64(end, 8191, &end) ||
        end > (uint64_t)UINTPTR_MAX)
        return false;
    *data = (void *)*at;
    *at = (uintptr_t)(end / 4096 * 4096);
    return true;
}

/* An input broadcast over N and H: rows · cols elements. */
static bool place_rows(uintptr_t *at, int64_t rows, int64_t cols, uint64_t elem,
                       void **data)
{
    uint64_t bytes;
    return mul_u64((uint64_t)rows, (uint64_t)cols, &bytes) &&
           mul_u64(bytes, elem, &bytes) && place(at, bytes, data);
}

static sdpa_tensor broadcast_input(void *data, const plan_opts *o, int64_t h,
                                   int64_t t, int64_t d)
{
    sdpa_tensor x = {data, {o->n, h, t, d}, {0, 0, d, 1}};
    return x;
}

/* Workspace of the call under each SDPA_OPT_PATH; ok[p] false (and the
 * library's message in why[p]) where the library refuses. */
static int workspaces(const plan_opts *o, const sdpa_forward_args *args,
                      size_t bytes[4], bool ok[4], char why[4][256])
{
    sdpa_ctx *ctx = NULL;
    int status = sdpa_ctx_create(&ctx);
    if (status == SDPA_OK)
        status = sdpa_ctx_set_int(ctx, SDPA_OPT_NUM_THREADS, o->threads);
    if (status != SDPA_OK) {
        fprintf(stderr, "sdpa plan: %s: %s\n",
                ctx ? "sdpa_ctx_set_int" : "sdpa_ctx_create",
                sdpa_status_string(status));
        sdpa_ctx_destroy(ctx);
        return TOOL_EXIT_FAILURE;
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
    if (!ok[SDPA_PATH_AUTO]) {
        fprintf(stderr, "sdpa plan: the library refuses this call: %s\n",
                why[SDPA_PATH_AUTO]);
        return TOOL_EXIT_FAILURE;
    }
    return TOOL_EXIT_OK;
}

int tool_cmd_plan(int argc, char **argv)
{
    plan_opts o = {.n = 1, .hq = 1, .threads = 1};
    int status = parse(argc, argv, &o);
    if (status != TOOL_EXIT_OK)
        return status < 0 ? TOOL_EXIT_OK : status;
    const uint64_t elem = o.dtype ? sizeof(double) : sizeof(float);

    /* flops and the T × T bytes, exactly when they fit 64 bits */
    uint64_t heads = 0, allowed = allowed_scores(&o), flops = 0, scores = 0,
             tt = 0;
    bool flops_ok = mul_u64((uint64_t)o.n, (uint64_t)o.hq, &heads) &&
                    mul_u64(heads, allowed, &flops) &&
                    mul_u64(flops, 2 * (uint64_t)(o.dk + o.dv), &flops);
    bool tt_ok = mul_u64(heads, (uint64_t)o.tq, &tt) &&
                 mul_u64(tt, (uint64_t)o.tk, &scores) &&
                 mul_u64(scores, elem, &tt);
    double flops_d = 2.0 * (double)o.n * (double)o.hq * (double)allowed *
                     (double)(o.dk + o.dv);
    double tt_d =
        (double)o.n * (double)o.hq * (double)o.tq * (double)o.tk * (double)elem;

    /* the call, on fake addresses */
    sdpa_forward_args args = SDPA_FORWARD_ARGS_INIT;
    args.dtype = o.dtype ? SDPA_FLOAT64 : SDPA_FLOAT32;
    args.causal = o.causal;
    uintptr_t at = (uintptr_t)1 << 20;
    uint64_t out_elems, w_elems = 0;
    void *q, *k, *v, *out, *w = NULL;
    bool placed =
        mul_u64(heads, (uint64_t)o.tq, &out_elems) &&
        (!o.weights || mul_u64(out_elems, (uint64_t)o.tk, &w_elems)) &&
        mul_u64(out_elems, (uint64_t)o.dv, &out_elems) &&
        place_rows(&at, o.tq, o.dk, elem, &q) &&
        place_rows(&at, o.tk, o.dk, elem, &k) &&
        place_rows(&at, o.tk, o.dv, elem, &v) &&
        mul_u64(out_elems, elem, &out_elems) && place(&at, out_elems, &out) &&
        (!o.weights ||
         (mul_u64(w_elems, elem, &w_elems) && place(&at, w_elems, &w)));
    if (!placed) {
        fprintf(stderr, "sdpa plan: the call's tensors do not fit this "
                        "address space\n");
        return TOOL_EXIT_FAILURE;
    }
    args.q = broadcast_input(q, &o, o.hq, o.tq, o.dk);
    args.k = broadcast_input(k, &o, o.hkv, o.tk, o.dk);
    args.v = broadcast_input(v, &o, o.hkv, o.tk, o.dv);
    args.out = sdpa_tensor_bhtd(out, o.n, o.hq, o.tq, o.dv);
    if (o.weights)
        args.weights = sdpa_tensor_bhtd(w, o.n, o.hq, o.tq, o.tk);

    size_t bytes[4] = {0};
    bool ok[4];
    char why[4][256];
    status = workspaces(&o, &args, bytes, ok, why);
    if (status != TOOL_EXIT_OK)
        return status;

    /* AUTO's path: the forced one with the same workspace; the rule
     * breaks ties. */
    int rule = o.weights                                ? SDPA_PATH_MATERIALISED
               : o.hq / o.hkv * o.tq <= DECODE_MAX_ROWS ? SDPA_PATH_DECODE
                                                        : SDPA_PATH_TILED;
    int auto_path = 0, matches = 0;
    for (int p = SDPA_PATH_MATERIALISED; p <= SDPA_PATH_DECODE; p++)
        if (ok[p] && bytes[p] == bytes[SDPA_PATH_AUTO]) {
            matches++;
            if (!auto_path || p == rule)
                auto_path = p;
        }

    char buf[64];
    printf("sdpa plan: N=%lld Hq=%lld Hkv=%lld Tq=%lld Tk=%lld Dk=%lld "
           "Dv=%lld, %s, causal %s, %lld thread%s%s\n\n",
           (long long)o.n, (long long)o.hq, (long long)o.hkv, (long long)o.tq,
           (long long)o.tk, (long long)o.dk, (long long)o.dv,
           o.dtype ? "float64" : "float32", causal_names[o.causal],
           (long long)o.threads, o.threads > 1 ? "s" : "",
           o.weights ? ", weights out" : "");
    format_count(flops_d, "flop", buf, sizeof buf);
    if (flops_ok)
        printf("flops            %llu  (%s; %llu allowed scores per head)\n",
               (unsigned long long)flops, buf, (unsigned long long)allowed);
    else
        printf("flops            %.4g  (%s; %llu allowed scores per head)\n",
               flops_d, buf, (unsigned long long)allowed);
    tool_format_bytes(tt_d, buf, sizeof buf);
    if (tt_ok)
        printf("scores T x T     %llu bytes  (%s, materialised)\n",
               (unsigned long long)tt, buf);
    else
        printf("scores T x T     %.4g bytes  (%s, materialised)\n", tt_d, buf);
    tool_format_bytes((double)bytes[SDPA_PATH_AUTO], buf, sizeof buf);
    printf("libsdpa scratch  %zu bytes  (%s, %s path: AUTO's choice%s)\n",
           bytes[SDPA_PATH_AUTO], buf,
           auto_path ? path_names[auto_path] : "unknown",
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
            printf("  %-13s  %zu bytes  (%s)%s\n", path_names[p], bytes[p], buf,
                   p == auto_path ? "  <- AUTO" : "");
        } else {
            printf("  %-13s  refused: %s\n", path_names[p], why[p]);
        }
    }
    const char *blas = getenv("OPENBLAS_NUM_THREADS");
    printf("\nThe tile sizes, hence the scratch, follow the BLAS's thread "
           "count\n(docs/THREADS.md): here OPENBLAS_NUM_THREADS %s%s.\n",
           blas && *blas ? "= " : "is unset (one per core)",
           blas && *blas ? blas : "");
    return TOOL_EXIT_OK;
}
