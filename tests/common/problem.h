/*
 * The problem builder and checking helpers of the unit tests (test code
 * only, linked as sdpa_test_common): one attention problem (its tensors and
 * the sdpa_forward_args pointing at them), built contiguous or with the
 * layouts, paddings and broadcasts of the randomised tests; the forward's
 * tolerances; outputs reset to the sentinel and checked untouched; the
 * loops over the row kernels and paths. Nothing here is shared with the
 * library: like reference.c, it only includes the public header.
 */
#ifndef SDPA_TEST_PROBLEM_H
#define SDPA_TEST_PROBLEM_H

#include <stddef.h>
#include <stdint.h>

#include "reference.h"
#include "sdpa.h"
#include "testutil.h"

enum { TP_MAX_N = 4, TP_MAX_H = 8 };

/* The call's settings besides the tensors: what tp_apply copies into a
 * sdpa_forward_args (the randomised tests draw them). */
typedef struct tp_call {
    int causal, mask_inverted;
    double scale, softcap;
    int use_kvlens;
    int64_t kv_lens[TP_MAX_N];
    int use_window;
    int64_t win_left, win_right;
    int use_alibi;
    double slopes[TP_MAX_H];
    int use_sinks;
    double sinks[TP_MAX_H];
} tp_call;

typedef struct test_problem {
    int dtype;
    int64_t N, Hq, Hkv, Tq, Tk, Dk, Dv;
    int64_t kv_lens[TP_MAX_N];
    double slopes[TP_MAX_H], sinks[TP_MAX_H];
    tbuf q, k, v, mask, bias, out, w, lse, lg;
    sdpa_forward_args a;
} test_problem;

/* The dtypes a cmocka test runs for (its state points at one; checks.h:
 * TP_BOTH). */
extern int tp_float, tp_double;

/* The shape of p (everything else zero). */
void tp_init(test_problem *p, int dtype, int64_t N, int64_t Hq, int64_t Hkv,
             int64_t Tq, int64_t Tk, int64_t Dk, int64_t Dv);
/* tp_init, then contiguous BHTD q, k (uniform in [-amp, amp)), v (in
 * [-1, 1)), drawn in that order from r, and out; p->a holds them. */
void tp_make(test_problem *p, int dtype, rng *r, double amp, int64_t N,
             int64_t Hq, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t Dk,
             int64_t Dv);
/* Contiguous weights, lse and logits (at logits_stage; 0: none). */
void tp_outputs(test_problem *p, int weights, int lse, int logits_stage);
/* A full [N, Hq, Tq, Tk] mask, each key forbidden (1) with probability pr. */
void tp_mask_random(test_problem *p, rng *r, double pr);
void tp_window(test_problem *p, int64_t left, int64_t right);
void tp_alibi(test_problem *p, const double *slopes);
void tp_sinks(test_problem *p, const double *sinks);
void tp_kvlens(test_problem *p, const int64_t *lens);
void tp_free(test_problem *p);

/* The views of the given buffers (NULL: left as it is) in a: q, k, v, mask,
 * bias, out, weights, lse, logits. */
void tp_views(sdpa_forward_args *a, const tbuf *q, const tbuf *k, const tbuf *v,
              const tbuf *mask, const tbuf *bias, const tbuf *out,
              const tbuf *w, const tbuf *lse, const tbuf *lg);
/* The views of the buffers p holds (q, k, v and out always; mask, bias,
 * weights, lse and logits when allocated) in a, the rest of a untouched. */
void tp_bind(const test_problem *p, sdpa_forward_args *a);
/* dtype and the settings of x in a. */
void tp_apply(sdpa_forward_args *a, int dtype, const tp_call *x);
/* The fields sdpa_forward_args and sdpa_backward_args share (the call's
 * settings, q, k, v, mask, bias, out and lse), copied from the struct src
 * to the struct dst, either way. */
#define TP_COPY_SHARED(dst, src)                                               \
    do {                                                                       \
        (dst).dtype = (src).dtype;                                             \
        (dst).causal = (src).causal;                                           \
        (dst).flags = (src).flags;                                             \
        (dst).scale = (src).scale;                                             \
        (dst).softcap = (src).softcap;                                         \
        (dst).kv_lens = (src).kv_lens;                                         \
        (dst).q = (src).q;                                                     \
        (dst).k = (src).k;                                                     \
        (dst).v = (src).v;                                                     \
        (dst).mask = (src).mask;                                               \
        (dst).bias = (src).bias;                                               \
        (dst).out = (src).out;                                                 \
        (dst).lse = (src).lse;                                                 \
        (dst).window_left = (src).window_left;                                 \
        (dst).window_right = (src).window_right;                               \
        (dst).alibi_slopes = (src).alibi_slopes;                               \
        (dst).sinks = (src).sinks;                                             \
        (dst).dropout_p = (src).dropout_p;                                     \
        (dst).dropout_seed = (src).dropout_seed;                               \
        (dst).dropout_offset = (src).dropout_offset;                           \
    } while (0)
/* The sdpa_backward_args of the same problem (no gradient outputs yet). */
sdpa_backward_args tp_backward_of(const sdpa_forward_args *a);

/* Sequence b of a ragged backward call (a->seqs, q_offsets, kv_offsets)
 * as the rectangular call of its own views, cut by the header's rules:
 * q, out, lse, dout and dq its rows [q_offsets[b], q_offsets[b + 1]); k,
 * v, dk and dv its packed rows [kv_offsets[b], kv_offsets[b + 1]) or item
 * b (without kv_offsets); kv_lens its entry; the ragged fields 0;
 * dropout_offset moved by b·Hq (the sequence draws as batch item b). A
 * sequence without packed keys gets one key row and kv_lens 0 (the
 * nearest rectangular call: its rows see no key). */
sdpa_backward_args tp_ragged_sequence(const sdpa_backward_args *a, int64_t b);

/* The multi-head layer's arguments (sdpa_mha_forward, and the forward of
 * sdpa_mha_backward): dtype, positions, heads and head sizes, the views
 * x_q, x_kv (NULL: self-attention) and y, and the weights and biases in
 * the order q, k, v, o (biases may be NULL). The positions' base, offset
 * and arrays and attn are left to the caller. */
sdpa_mha_args tp_mha_args(int dtype, int positions, int64_t hq, int64_t hkv,
                          int64_t dk, int64_t dv, const sdpa_tensor *x_q,
                          const sdpa_tensor *x_kv, const sdpa_tensor *y,
                          void *const w[4], void *const b[4]);

/* A broadcastable [N|1, Hq|1, Tq|1, Tk|1] tensor over the extents `full`:
 * mode bm[d] 0 full, 2 extent 1, 3 stride 0 over the full extent, 4 (keys)
 * key_step elements apart. */
void tp_make_bcast(tbuf *x, int kind, const int64_t *full, const int *bm,
                   int64_t key_step);
/* Fills the distinct elements of such a tensor: a mask forbidding with
 * probability mask_p (nonzero values 1..255; inverted: 0 forbids), or a
 * bias in [-1.5, 1.5), -inf with probability ninf_p. */
void tp_fill_bcast(tbuf *x, rng *r, int is_mask, int inverted, double mask_p,
                   double ninf_p);

/* K / V rows that no query row of any head (or batch item, kv_bcast: K and
 * V shared by them) reading them may see, by the reference's allowed map,
 * filled with NaN; returns how many. */
long tp_poison_unseen(test_problem *p, const ref_result *r, int kv_bcast);

/* Every option of a gradient check at once in x: bottom-right causal, a
 * window window_left keys to the left, scale 0.7, soft-cap 2, ALiBi slopes
 * 0.1·(h + 1) and sinks 0.5 − 0.4·h. */
void tp_every_option(tp_call *x, int64_t window_left);

/* ---- Draws of the randomised tests (the order of their draws is part of
 * each test's configurations: these keep it). ----------------------------- */
/* perm[0, n) a uniformly shuffled permutation of 0 .. n-1 (a paged
 * cache's page numbers). */
void tp_permutation(int32_t *perm, int64_t n, rng *r);
/* A shuffled pool of pages for n items of tk keys in pages of `page`: the
 * block table (n rows of *stride = pages_per_seq + 2 entries, page
 * numbers drawn from a permutation of *pages = n · pages_per_seq + 3, a
 * few pages unused; -1 in the unused entries; malloc'ed), and the pool
 * views' layout: t gets shape [*pages, h, page, d] and the strides of
 * vLLM's [page, slot, head, dim] (vllm) or of [page, head, slot, dim]. */
int32_t *tp_page_table(int64_t n, int64_t tk, int64_t page, rng *r,
                       int64_t *pages_per_seq, int64_t *stride, int64_t *pages);
void tp_pool_view(sdpa_tensor *t, int64_t pages, int64_t h, int64_t page,
                  int64_t d, int vllm);
/* A divisor of hq (1 = MQA, hq = MHA, in between = GQA). */
int64_t tp_draw_hkv(rng *r, int64_t hq);
/* x->use_kvlens (one in three), then each of the n lengths: 0, tk, or in
 * 1..tk (tk without kv_lens). */
void tp_draw_kvlens(tp_call *x, rng *r, int64_t n, int64_t tk);
/* 0 (the default 1/sqrt(Dk)), 1, or in [0.05, 1.55). */
void tp_draw_scale(tp_call *x, rng *r);
/* x->use_window (one in three) and each side: -1 (unbounded), 0, or
 * 1..tk. */
void tp_draw_window(tp_call *x, rng *r, int64_t tk);

/* ---- Outputs: reset to the sentinel, checked untouched. --------------- */
void tp_clear(tbuf *x);
void tp_clear_outputs(test_problem *p);
/* 1 when every byte of every output buffer still holds the sentinel. */
int tp_outputs_untouched(const test_problem *p);
/* Bytes outside the logical view (map == 0) must keep the sentinel; with
 * all_bytes, every byte must. Returns the first bad element or -1. */
long tp_untouched(const tbuf *x, const unsigned char *map, int all_bytes);

/* ---- The forward's tolerances (tests/test_random.c's derivation). ----- */
typedef struct test_tol {
    double e_s, e_p; /* a logit's error, a weight's relative */
    double w, logit, out, lse_abs, lse_rel, entropy;
} test_tol;

/* eps of the arithmetic, the reference's bounds L, A, S and Vmax, and what
 * an upstream computation adds: e_s_extra to every logit (the layer's
 * projections), v_err to every V value. */
test_tol tp_forward_tol(double eps, const ref_result *r, int64_t tk, int64_t dk,
                        double softcap, int sinks, double e_s_extra,
                        double v_err);
double tp_eps(int dtype);

const char *tp_path_name(int path);

/* ---- Allocations. ---------------------------------------------------- */
/* A training loop on ctx, whose allocator counts into ca: a forward and a
 * backward call, then three more of each. Returns the allocations the
 * three made (0: a repeated call allocates nothing), or -1 when a call
 * failed. */
long tp_training_allocs(sdpa_ctx *ctx, const counting_alloc *ca,
                        const sdpa_forward_args *fa,
                        const sdpa_backward_args *ba);

/* ---- Finite differences (float64). ------------------------------------ */
/* The central difference of loss(user) in element (a, b, c, d) of x, or
 * in *p when p is not NULL (step 1e-5), against the analytic value:
 * within 1e-7 + 1e-6·|analytic| (truncation ~ step² times an O(1) third
 * derivative, rounding ~ eps·|loss| / step). A non-finite point is
 * skipped. Returns 1 (and prints both) on a mismatch, else 0; *worst
 * keeps the largest error / tolerance. */
/* Σ x ∘ y over the logical elements of two views of the same shape. */
double tp_dot(const tbuf *x, const tbuf *y);
/* The loss of a gradient check, Σ dout ∘ out (its gradient with respect
 * to out is dout) of the forward call fa, which writes out: tp_fd_loss
 * runs the call on ctx (NaN when it fails). */
typedef struct tp_fd_point {
    sdpa_ctx *ctx;
    const sdpa_forward_args *fa;
    const tbuf *dout, *out;
} tp_fd_point;
double tp_fd_loss(void *point);
int tp_fd_check(double (*loss)(void *user), void *user, tbuf *x, double *p,
                int64_t a, int64_t b, int64_t c, int64_t d, double analytic,
                const char *what, double *worst);

/* ---- Positional encodings' closed forms. ------------------------------ */
/* base^(-2r/d) (base 0 = 10000). */
long double tp_freq(long double base, int64_t r, int64_t d);

#endif
