/* The fixed benchmark suite (docs/PERFORMANCE.md) and its cost model. */
#include <strings.h>

#include "bench.h"

/* Square self-attention, one dtype: Hq = Hkv, Tq = Tk, Dk = Dv. */
#define SQUARE(nm, desc, dt, N, H, T, D, caus)                                 \
    {                                                                          \
        .name = nm, .what = desc, .dtype = dt, .n = N, .hq = H, .hkv = H,      \
        .tq = T, .tk = T, .dk = D, .dv = D, .causal = caus                     \
    }

/* Shape G's decode (Hq = 32, Tq = 1, Tk = 4096, D = 128) with Hkv KV
 * heads stored in kv_type, paged when page > 0, timed beside `ref`. */
#define DECODE_G(nm, desc, Hkv, kv, pg, reference, target)                     \
    {                                                                          \
        .name = nm, .what = desc, .dtype = SDPA_FLOAT32, .n = 1, .hq = 32,     \
        .hkv = Hkv, .tq = 1, .tk = 4096, .dk = 128, .dv = 128, .decode = 1,    \
        .kv_type = kv, .page = pg, .ref = reference, .ref_target = target      \
    }

/* 1.2's ragged batches. S, one serving step of a Llama-3-8B-shaped layer:
 * 30 sequences decoding one token against 128..8192 keys, spread
 * geometrically (round(128 * 64^(i/29)), i = 0..29), then two prefill
 * chunks of 512 rows against 2048 and 4096 keys. */
static const int64_t serving_q[32] = {1, 1, 1, 1, 1, 1, 1, 1, 1,   1,  1,
                                      1, 1, 1, 1, 1, 1, 1, 1, 1,   1,  1,
                                      1, 1, 1, 1, 1, 1, 1, 1, 512, 512};
static const int64_t serving_kv[32] = {
    128,  148,  171,  197,  227,  262,  303,  349,  403,  465,  537,
    620,  715,  826,  953,  1100, 1270, 1466, 1692, 1952, 2253, 2601,
    3002, 3465, 3999, 4616, 5328, 6149, 7098, 8192, 2048, 4096};
/* Tp, a training step's 8192 tokens: 8 documents, each attending to
 * itself alone (Tq_b = Tk_b). */
static const int64_t packed_docs[8] = {2048, 2048, 1536, 1024,
                                       768,  384,  256,  128};

static const bench_shape suite[] = {
    SQUARE("A", "N=1 H=8 T=1024 D=64", SDPA_FLOAT32, 1, 8, 1024, 64,
           SDPA_CAUSAL_NONE),
    SQUARE("B", "A, causal top-left", SDPA_FLOAT32, 1, 8, 1024, 64,
           SDPA_CAUSAL_TOP_LEFT),
    {.name = "C",
     .what = "N=4 H=8 T=512 D=64, kv_lens 512/400/300/200",
     .dtype = SDPA_FLOAT32,
     .n = 4,
     .hq = 8,
     .hkv = 8,
     .tq = 512,
     .tk = 512,
     .dk = 64,
     .dv = 64,
     .causal = SDPA_CAUSAL_NONE,
     .has_kv_lens = 1,
     .kv_lens = {512, 400, 300, 200}},
    SQUARE("D", "N=1 H=1 T=4096 D=64", SDPA_FLOAT32, 1, 1, 4096, 64,
           SDPA_CAUSAL_NONE),
    SQUARE("E", "N=1 H=1 T=16384 D=64", SDPA_FLOAT32, 1, 1, 16384, 64,
           SDPA_CAUSAL_NONE),
    SQUARE("F", "A in float64", SDPA_FLOAT64, 1, 8, 1024, 64, SDPA_CAUSAL_NONE),
    {.name = "G",
     .what = "decode N=1 Hq=32 Hkv=32 Tq=1 Tk=4096 D=128",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 32,
     .hkv = 32,
     .tq = 1,
     .tk = 4096,
     .dk = 128,
     .dv = 128,
     .causal = SDPA_CAUSAL_NONE,
     .decode = 1},
    {.name = "G8",
     .what = "decode N=1 Hq=32 Hkv=8 Tq=1 Tk=4096 D=128",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 32,
     .hkv = 8,
     .tq = 1,
     .tk = 4096,
     .dk = 128,
     .dv = 128,
     .causal = SDPA_CAUSAL_NONE,
     .decode = 1},
    {.name = "H",
     .what = "N=2 H=4 Tq=256 Tk=2048 Dk=64 Dv=32",
     .dtype = SDPA_FLOAT32,
     .n = 2,
     .hq = 4,
     .hkv = 4,
     .tq = 256,
     .tk = 2048,
     .dk = 64,
     .dv = 32,
     .causal = SDPA_CAUSAL_NONE},
    /* added after 1.0's A-H and L: a Llama-style GQA prefill */
    {.name = "I",
     .what = "GQA prefill N=1 Hq=32 Hkv=8 T=1024 D=128 causal",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 32,
     .hkv = 8,
     .tq = 1024,
     .tk = 1024,
     .dk = 128,
     .dv = 128,
     .causal = SDPA_CAUSAL_TOP_LEFT},
    /* 1.1's sliding window (Mistral-style): row i sees keys i-1024..i, i.e.
     * min(i, 1024) + 1 of them; 15.5x A's allowed scores. Compared in the
     * same rounds with A's call (target W/A <= 18) and with the window
     * given as a dense -inf bias (target: the window >= 10x faster). */
    {.name = "W",
     .what = "N=1 H=8 T=16384 D=64 causal top-left, window left 1024 right 0",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 8,
     .hkv = 8,
     .tq = 16384,
     .tk = 16384,
     .dk = 64,
     .dv = 64,
     .causal = SDPA_CAUSAL_TOP_LEFT,
     .window = 1,
     .window_left = 1024,
     .window_right = 0,
     .ref = "A",
     .ref_target = 18.0,
     .dense_bias = 1,
     .dense_target = 10.0},
    /* 1.1: what an inference engine holds. Each runs its reference
     * shape's sdpa auto call in its own rounds ("ref sdpa auto"): the
     * targets are time ratios measured side by side. */
    DECODE_G("Gh", "G with float16 K/V (q, out float32)", 32, SDPA_FLOAT16, 0,
             "G", 0.55),
    DECODE_G("Gb", "G with bfloat16 K/V (q, out float32)", 32, SDPA_BFLOAT16, 0,
             "G", 0.55),
    DECODE_G("G8h", "G8 with float16 K/V (q, out float32)", 8, SDPA_FLOAT16, 0,
             "G8", 0.55),
    DECODE_G("Ph", "Gh over a paged float16 cache, 16-key pages, shuffled", 32,
             SDPA_FLOAT16, 16, "Gh", 1.1),
    /* 1.2: Ph with a block's 64 keys in one page: what larger pages buy */
    DECODE_G("Ph64", "Gh over a paged float16 cache, 64-key pages, shuffled",
             32, SDPA_FLOAT16, 64, "Gh", 1.1),
    /* 1.2: quantized caches (storage.c quantizes the inputs), against Gh
     * in their rounds: the bytes read are 34/64, 1/2 and 18/64 of Gh's */
    DECODE_G("Gq8", "G with ggml Q8_0 K/V blocks (q, out float32)", 32,
             SDPA_Q8_0, 0, "Gh", 0.6),
    DECODE_G("Gq4", "G with ggml Q4_0 K/V blocks (q, out float32)", 32,
             SDPA_Q4_0, 0, "Gh", 0.35),
    DECODE_G("Gf8", "G with FP8 E4M3 K/V (q, out float32)", 32, SDPA_FP8_E4M3,
             0, "Gh", 0.55),
    DECODE_G("Pq8", "Gq8 over a paged Q8_0 cache, 16-key pages, shuffled", 32,
             SDPA_Q8_0, 16, "Gq8", 1.1),
    {.name = "Aq8",
     .what = "A with ggml Q8_0 K/V blocks (q, out float32)",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 8,
     .hkv = 8,
     .tq = 1024,
     .tk = 1024,
     .dk = 64,
     .dv = 64,
     .kv_type = SDPA_Q8_0,
     .ref = "A",
     .ref_target = 1.2},
    /* 1.2: a training step's attention with dropout 0.1, in A's rounds */
    {.name = "Ad",
     .what = "A with dropout_p 0.1 (Philox mask, weights scaled by 1/0.9)",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 8,
     .hkv = 8,
     .tq = 1024,
     .tk = 1024,
     .dk = 64,
     .dv = 64,
     .dropout_p = 0.1,
     .ref = "A",
     .ref_target = 1.15},
    {.name = "Ah",
     .what = "A with q, k, v and out in float16",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 8,
     .hkv = 8,
     .tq = 1024,
     .tk = 1024,
     .dk = 64,
     .dv = 64,
     .io_type = SDPA_FLOAT16,
     .kv_type = SDPA_FLOAT16,
     .ref = "A",
     .ref_target = 1.15},
    /* 1.2: a bfloat16 training step: q, k, v, out, dout and the gradients
     * in bfloat16 (lse float32), against A's float32 call in its rounds */
    {.name = "Ab",
     .what = "A with q, k, v, out (and dout, dq, dk, dv) in bfloat16",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 8,
     .hkv = 8,
     .tq = 1024,
     .tk = 1024,
     .dk = 64,
     .dv = 64,
     .io_type = SDPA_BFLOAT16,
     .kv_type = SDPA_BFLOAT16,
     .ref = "A",
     .ref_target = 1.15,
     .backward_ref_target = 1.1},
    /* 1.2: ragged batches (serving.c, packed.c), each against the calls
     * an engine or a trainer makes without them */
    {.name = "S",
     .what = "serving step: 30 decodes (128..8192 keys) + 2 prefills (512 "
             "rows; 2048, 4096 keys), Hq=32 Hkv=8 D=128, paged f16 K/V",
     .dtype = SDPA_FLOAT32,
     .n = 32,
     .hq = 32,
     .hkv = 8,
     .tq = 512,
     .tk = 8192,
     .dk = 128,
     .dv = 128,
     .causal = SDPA_CAUSAL_BOTTOM_RIGHT,
     .kv_type = SDPA_FLOAT16,
     .page = 16,
     .ragged = BENCH_RAGGED_SERVING,
     .seq_q = serving_q,
     .seq_kv = serving_kv},
    {.name = "Tp",
     .what = "packed training: 8 documents (128..2048 tokens) in 8192, H=8 "
             "D=64, causal",
     .dtype = SDPA_FLOAT32,
     .n = 8,
     .hq = 8,
     .hkv = 8,
     .tq = 8192,
     .tk = 8192,
     .dk = 64,
     .dv = 64,
     .causal = SDPA_CAUSAL_BOTTOM_RIGHT,
     .ragged = BENCH_RAGGED_PACKED,
     .seq_q = packed_docs,
     .seq_kv = packed_docs},
    {.name = "L",
     .what = "N=1 H=1 T=131072 D=64 causal top-left",
     .dtype = SDPA_FLOAT32,
     .n = 1,
     .hq = 1,
     .hkv = 1,
     .tq = 131072,
     .tk = 131072,
     .dk = 64,
     .dv = 64,
     .causal = SDPA_CAUSAL_TOP_LEFT,
     .max_reps = 1},
};

const bench_shape *bench_shapes(size_t *count)
{
    *count = sizeof suite / sizeof suite[0];
    return suite;
}

const bench_shape *bench_shape_find(const char *name)
{
    for (size_t i = 0; i < sizeof suite / sizeof suite[0]; i++)
        if (strcasecmp(suite[i].name, name) == 0)
            return &suite[i];
    return NULL;
}

int64_t bench_shape_kv_len(const bench_shape *s, int64_t b)
{
    if (s->ragged)
        return s->seq_kv[b];
    return s->has_kv_lens ? s->kv_lens[b] : s->tk;
}

/* Query rows of batch item (or sequence) b. */
static int64_t rows_of(const bench_shape *s, int64_t b)
{
    return s->ragged ? s->seq_q[b] : s->tq;
}

static int64_t min_i64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

void bench_shape_allowed(const bench_shape *s, int64_t b, int64_t i,
                         int64_t *start, int64_t *limit)
{
    const int64_t len = bench_shape_kv_len(s, b);
    /* the diagonal causality and the window measure from */
    const int64_t diag =
        s->causal == SDPA_CAUSAL_TOP_LEFT ? i : i + (len - rows_of(s, b));
    int64_t lo = 0, hi = len;
    if (s->causal != SDPA_CAUSAL_NONE)
        hi = min_i64(hi, diag + 1);
    if (s->window && s->window_right >= 0)
        hi = min_i64(hi, diag + s->window_right + 1);
    if (s->window && s->window_left >= 0 && diag - s->window_left > 0)
        lo = diag - s->window_left;
    *start = lo;
    *limit = hi;
}

double bench_shape_allowed_scores(const bench_shape *s)
{
    double pairs = 0.0;
    for (int64_t b = 0; b < s->n; b++)
        for (int64_t i = 0; i < rows_of(s, b); i++) {
            int64_t lo, hi;
            bench_shape_allowed(s, b, i, &lo, &hi);
            pairs += hi > lo ? (double)(hi - lo) : 0.0;
        }
    return pairs;
}

static double sum_kv_len(const bench_shape *s)
{
    double keys = 0.0;
    for (int64_t b = 0; b < s->n; b++)
        keys += (double)bench_shape_kv_len(s, b);
    return keys;
}

double bench_shape_flops(const bench_shape *s)
{
    if (s->window || s->ragged)
        return 2.0 * (double)s->hq * (double)(s->dk + s->dv) *
               bench_shape_allowed_scores(s);
    double f = 2.0 * (double)s->hq * (double)s->tq * (double)(s->dk + s->dv) *
               sum_kv_len(s);
    return s->causal != SDPA_CAUSAL_NONE ? f / 2.0 : f;
}

double bench_shape_kv_bytes(const bench_shape *s)
{
    int kv = s->kv_type ? s->kv_type : s->dtype; /* bytes as stored */
    return (double)s->hkv *
           (double)bench_type_bytes(kv, (size_t)(s->dk + s->dv)) *
           sum_kv_len(s);
}

size_t bench_elem_size(int dtype)
{
    return dtype == SDPA_FLOAT64 ? sizeof(double) : sizeof(float);
}

const char *bench_dtype_name(int dtype)
{
    return dtype == SDPA_FLOAT64 ? "f64" : "f32";
}

const char *bench_causal_name(int causal)
{
    switch (causal) {
    case SDPA_CAUSAL_TOP_LEFT:
        return "top_left";
    case SDPA_CAUSAL_BOTTOM_RIGHT:
        return "bottom_right";
    default:
        return "none";
    }
}
