/* The unit tests' problem builder and helpers; see problem.h. */
#include "problem.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int tp_float = SDPA_FLOAT32, tp_double = SDPA_FLOAT64;

void tp_init(test_problem *p, int dtype, int64_t N, int64_t Hq, int64_t Hkv,
             int64_t Tq, int64_t Tk, int64_t Dk, int64_t Dv)
{
    *p = (test_problem){.dtype = dtype,
                        .N = N,
                        .Hq = Hq,
                        .Hkv = Hkv,
                        .Tq = Tq,
                        .Tk = Tk,
                        .Dk = Dk,
                        .Dv = Dv};
}

void tp_make(test_problem *p, int dtype, rng *r, double amp, int64_t N,
             int64_t Hq, int64_t Hkv, int64_t Tq, int64_t Tk, int64_t Dk,
             int64_t Dv)
{
    tp_init(p, dtype, N, Hq, Hkv, Tq, Tk, Dk, Dv);
    tbuf_make(&p->q, dtype, N, Hq, Tq, Dk, LAYOUT_BHTD, 0);
    tbuf_make(&p->k, dtype, N, Hkv, Tk, Dk, LAYOUT_BHTD, 0);
    tbuf_make(&p->v, dtype, N, Hkv, Tk, Dv, LAYOUT_BHTD, 0);
    tbuf_fill_random(&p->q, r, amp);
    tbuf_fill_random(&p->k, r, amp);
    tbuf_fill_random(&p->v, r, 1.0);
    tbuf_make(&p->out, dtype, N, Hq, Tq, Dv, LAYOUT_BHTD, 0);
    sdpa_forward_args a = SDPA_FORWARD_ARGS_INIT;
    a.dtype = dtype;
    tp_bind(p, &a);
    p->a = a;
}

void tp_outputs(test_problem *p, int weights, int lse, int logits_stage)
{
    if (weights)
        tbuf_make(&p->w, p->dtype, p->N, p->Hq, p->Tq, p->Tk, LAYOUT_BHTD, 0);
    if (lse)
        tbuf_make(&p->lse, p->dtype, p->N, p->Hq, p->Tq, 1, LAYOUT_BHTD, 0);
    if (logits_stage) {
        tbuf_make(&p->lg, p->dtype, p->N, p->Hq, p->Tq, p->Tk, LAYOUT_BHTD, 0);
        p->a.logits_stage = logits_stage;
    }
    tp_bind(p, &p->a);
}

void tp_mask_random(test_problem *p, rng *r, double pr)
{
    tbuf_make(&p->mask, ELEM_U8, p->N, p->Hq, p->Tq, p->Tk, LAYOUT_BHTD, 0);
    for (size_t i = 0; i < p->mask.elems; ++i)
        ((unsigned char *)p->mask.mem)[i] = rng_unit(r) < pr ? 1 : 0;
    p->a.mask = p->mask.t;
}

void tp_window(test_problem *p, int64_t left, int64_t right)
{
    p->a.flags |= SDPA_FLAG_WINDOW;
    p->a.window_left = left;
    p->a.window_right = right;
}

void tp_alibi(test_problem *p, const double *slopes)
{
    memcpy(p->slopes, slopes, (size_t)p->Hq * sizeof(double));
    p->a.alibi_slopes = p->slopes;
}

void tp_sinks(test_problem *p, const double *sinks)
{
    memcpy(p->sinks, sinks, (size_t)p->Hq * sizeof(double));
    p->a.sinks = p->sinks;
}

void tp_kvlens(test_problem *p, const int64_t *lens)
{
    memcpy(p->kv_lens, lens, (size_t)p->N * sizeof(int64_t));
    p->a.kv_lens = p->kv_lens;
}

void tp_free(test_problem *p)
{
    tbuf *all[] = {&p->q,   &p->k, &p->v,   &p->mask, &p->bias,
                   &p->out, &p->w, &p->lse, &p->lg};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; ++i)
        tbuf_free(all[i]);
}

void tp_views(sdpa_forward_args *a, const tbuf *q, const tbuf *k, const tbuf *v,
              const tbuf *mask, const tbuf *bias, const tbuf *out,
              const tbuf *w, const tbuf *lse, const tbuf *lg)
{
    const tbuf *from[] = {q, k, v, mask, bias, out, w, lse, lg};
    sdpa_tensor *to[] = {&a->q,   &a->k,       &a->v,   &a->mask,  &a->bias,
                         &a->out, &a->weights, &a->lse, &a->logits};
    for (int i = 0; i < 9; ++i)
        if (from[i])
            *to[i] = from[i]->t;
}

/* An allocated buffer, or NULL. */
static const tbuf *held(const tbuf *x)
{
    return x->mem ? x : NULL;
}

void tp_bind(const test_problem *p, sdpa_forward_args *a)
{
    tp_views(a, &p->q, &p->k, &p->v, held(&p->mask), held(&p->bias), &p->out,
             held(&p->w), held(&p->lse), held(&p->lg));
}

void tp_apply(sdpa_forward_args *a, int dtype, const tp_call *x)
{
    a->dtype = dtype;
    a->causal = x->causal;
    a->flags = x->mask_inverted ? SDPA_FLAG_MASK_NONZERO_ALLOWS : 0u;
    a->scale = x->scale;
    a->softcap = x->softcap;
    a->kv_lens = x->use_kvlens ? x->kv_lens : NULL;
    if (x->use_window) {
        a->flags |= SDPA_FLAG_WINDOW;
        a->window_left = x->win_left;
        a->window_right = x->win_right;
    }
    if (x->use_alibi)
        a->alibi_slopes = x->slopes;
    if (x->use_sinks)
        a->sinks = x->sinks;
}

sdpa_mha_args tp_mha_args(int dtype, int positions, int64_t hq, int64_t hkv,
                          int64_t dk, int64_t dv, const sdpa_tensor *x_q,
                          const sdpa_tensor *x_kv, const sdpa_tensor *y,
                          void *const w[4], void *const b[4])
{
    sdpa_mha_args a = SDPA_MHA_ARGS_INIT;
    a.dtype = dtype;
    a.positions = positions;
    a.heads_q = hq;
    a.heads_kv = hkv;
    a.dim_k = dk;
    a.dim_v = dv;
    a.x_q = *x_q;
    if (x_kv)
        a.x_kv = *x_kv;
    a.y = *y;
    a.w_q = w[0], a.w_k = w[1], a.w_v = w[2], a.w_o = w[3];
    a.b_q = b[0], a.b_k = b[1], a.b_v = b[2], a.b_o = b[3];
    return a;
}

sdpa_backward_args tp_backward_of(const sdpa_forward_args *a)
{
    sdpa_backward_args g = SDPA_BACKWARD_ARGS_INIT;
    TP_COPY_SHARED(g, *a);
    /* the storage types too: a half K/V problem's backward reads them so
     * (a quantized one is refused, as it must be) */
    g.kv_dtype = a->kv_dtype;
    g.bias_dtype = a->bias_dtype;
    return g;
}

static sdpa_tensor seq_rows(sdpa_tensor t, size_t es, int64_t first,
                            int64_t count)
{
    if (t.data)
        t.data = (char *)t.data + (size_t)(first * t.stride[2]) * es;
    t.shape[2] = count;
    return t;
}

static sdpa_tensor seq_item(sdpa_tensor t, size_t es, int64_t item)
{
    if (t.data)
        t.data = (char *)t.data + (size_t)(item * t.stride[0]) * es;
    t.shape[0] = 1;
    return t;
}

sdpa_backward_args tp_ragged_sequence(const sdpa_backward_args *a, int64_t b)
{
    static const int64_t no_keys = 0;
    const size_t es = a->dtype == SDPA_FLOAT64 ? sizeof(double) : sizeof(float);
    const int64_t first = a->q_offsets[b];
    const int64_t rows = a->q_offsets[b + 1] - first;
    sdpa_backward_args s = *a;
    s.seqs = 0;
    s.q_offsets = s.kv_offsets = NULL;
    /* the header: sequence b draws its dropout mask as batch item b */
    s.dropout_offset =
        a->dropout_offset + (uint64_t)b * (uint64_t)a->q.shape[1];
    sdpa_tensor *per_row[5] = {&s.q, &s.out, &s.lse, &s.dout, &s.dq};
    for (int i = 0; i < 5; ++i)
        *per_row[i] = seq_rows(*per_row[i], es, first, rows);
    s.kv_lens = a->kv_lens ? a->kv_lens + b : NULL;
    sdpa_tensor *keys[4] = {&s.k, &s.v, &s.dk, &s.dv};
    for (int i = 0; i < 4; ++i) {
        if (!a->kv_offsets) {
            *keys[i] = seq_item(*keys[i], es, b);
            continue;
        }
        const int64_t at = a->kv_offsets[b];
        const int64_t n = a->kv_offsets[b + 1] - at;
        *keys[i] = seq_rows(*keys[i], es, n > 0 ? at : 0, n > 0 ? n : 1);
        if (n == 0)
            s.kv_lens = &no_keys;
    }
    return s;
}

void tp_make_bcast(tbuf *x, int kind, const int64_t *full, const int *bm,
                   int64_t key_step)
{
    int64_t ext[4];
    for (int d = 0; d < 4; ++d)
        ext[d] = bm[d] == 0 ? full[d] : bm[d] == 4 ? full[d] * key_step : 1;
    tbuf_make(x, kind, ext[0], ext[1], ext[2], ext[3], LAYOUT_BHTD, 0);
    for (int d = 0; d < 4; ++d)
        if (bm[d] == 3 || bm[d] == 4) {
            x->t.shape[d] = full[d];
            x->t.stride[d] = bm[d] == 3 ? 0 : key_step;
        }
}

void tp_fill_bcast(tbuf *x, rng *r, int is_mask, int inverted, double mask_p,
                   double ninf_p)
{
    const int64_t *e = x->t.shape;
    for (int64_t a = 0; a < (x->t.stride[0] ? e[0] : 1); ++a)
        for (int64_t b = 0; b < (x->t.stride[1] ? e[1] : 1); ++b)
            for (int64_t i = 0; i < (x->t.stride[2] ? e[2] : 1); ++i)
                for (int64_t j = 0; j < (x->t.stride[3] ? e[3] : 1); ++j) {
                    if (is_mask) {
                        int forbid = rng_unit(r) < mask_p;
                        int nz = (int)rng_int(r, 1, 255);
                        tset(x, a, b, i, j,
                             inverted ? (forbid ? 0 : nz) : (forbid ? nz : 0));
                    } else {
                        tset(x, a, b, i, j,
                             rng_unit(r) < ninf_p ? -INFINITY
                                                  : rng_sym(r, 1.5));
                    }
                }
}

void tp_every_option(tp_call *x, int64_t window_left)
{
    x->causal = SDPA_CAUSAL_BOTTOM_RIGHT;
    x->scale = 0.7;
    x->softcap = 2.0;
    x->use_window = 1;
    x->win_left = window_left;
    x->win_right = -1;
    x->use_alibi = 1;
    x->use_sinks = 1;
    for (int h = 0; h < TP_MAX_H; ++h) {
        x->slopes[h] = 0.1 * (h + 1);
        x->sinks[h] = 0.5 - 0.4 * h;
    }
}

void tp_permutation(int32_t *perm, int64_t n, rng *r)
{
    for (int64_t i = 0; i < n; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = rng_int(r, 0, i);
        int32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

int32_t *tp_page_table(int64_t n, int64_t tk, int64_t page, rng *r,
                       int64_t *pages_per_seq, int64_t *stride, int64_t *pages)
{
    *pages_per_seq = (tk + page - 1) / page;
    *stride = *pages_per_seq + 2;
    *pages = n * *pages_per_seq + 3; /* a few unused ones */
    int32_t *perm = malloc((size_t)*pages * sizeof *perm);
    int32_t *table = malloc((size_t)(n * *stride) * sizeof *table);
    if (!perm || !table)
        abort();
    tp_permutation(perm, *pages, r);
    for (int64_t b = 0; b < n; b++)
        for (int64_t c = 0; c < *stride; c++)
            table[b * *stride + c] =
                c < *pages_per_seq ? perm[b * *pages_per_seq + c] : -1;
    free(perm);
    return table;
}

void tp_pool_view(sdpa_tensor *t, int64_t pages, int64_t h, int64_t page,
                  int64_t d, int vllm)
{
    const int64_t shape[4] = {pages, h, page, d};
    memcpy(t->shape, shape, sizeof shape);
    t->stride[3] = 1;
    t->stride[1] = vllm ? d : page * d;
    t->stride[2] = vllm ? h * d : d;
    t->stride[0] = h * page * d;
}

int64_t tp_draw_hkv(rng *r, int64_t hq)
{
    int64_t divs[64], nd = 0;
    for (int64_t d = 1; d <= hq && nd < 64; ++d)
        if (hq % d == 0)
            divs[nd++] = d;
    return divs[rng_int(r, 0, nd - 1)];
}

void tp_draw_kvlens(tp_call *x, rng *r, int64_t n, int64_t tk)
{
    x->use_kvlens = rng_int(r, 0, 2) == 0;
    for (int64_t b = 0; b < n; ++b) {
        int64_t m = rng_int(r, 0, 5);
        x->kv_lens[b] = !x->use_kvlens ? tk
                        : m == 0       ? 0
                        : m == 1       ? tk
                                       : rng_int(r, 1, tk);
    }
}

void tp_draw_scale(tp_call *x, rng *r)
{
    int64_t sm = rng_int(r, 0, 3);
    x->scale = sm == 0 ? 0.0 : sm == 1 ? 1.0 : 0.05 + 1.5 * rng_unit(r);
}

void tp_draw_window(tp_call *x, rng *r, int64_t tk)
{
    x->use_window = rng_int(r, 0, 2) == 0;
    int64_t wm = rng_int(r, 0, 3);
    int64_t wv = rng_int(r, 1, tk);
    x->win_left = wm == 0 ? -1 : wm == 1 ? 0 : wv;
    wm = rng_int(r, 0, 3);
    wv = rng_int(r, 1, tk);
    x->win_right = wm == 0 ? -1 : wm == 1 ? 0 : wv;
}

long tp_poison_unseen(test_problem *p, const ref_result *r, int kv_bcast)
{
    const int64_t nkv = kv_bcast ? 1 : p->N, g = p->Hq / p->Hkv;
    long n = 0;
    for (int64_t bk = 0; bk < nkv; ++bk)
        for (int64_t hk = 0; hk < p->Hkv; ++hk)
            for (int64_t j = 0; j < p->Tk; ++j) {
                int seen = 0;
                for (int64_t b = 0; b < p->N && !seen; ++b) {
                    if (!kv_bcast && b != bk)
                        continue;
                    for (int64_t h = hk * g; h < (hk + 1) * g && !seen; ++h)
                        for (int64_t i = 0; i < p->Tq && !seen; ++i)
                            seen = r->allowed[(size_t)((b * p->Hq + h) * p->Tq +
                                                       i) *
                                                  (size_t)p->Tk +
                                              (size_t)j];
                }
                if (seen)
                    continue;
                for (int64_t d = 0; d < p->Dk; ++d)
                    tset(&p->k, bk, hk, j, d, NAN);
                for (int64_t d = 0; d < p->Dv; ++d)
                    tset(&p->v, bk, hk, j, d, NAN);
                n++;
            }
    return n;
}

void tp_clear(tbuf *x)
{
    if (x->mem)
        fill_sentinel(x->mem, x->elems * x->esize);
}

void tp_clear_outputs(test_problem *p)
{
    tbuf *o[] = {&p->out, &p->w, &p->lse, &p->lg};
    for (int i = 0; i < 4; ++i)
        tp_clear(o[i]);
}

int tp_outputs_untouched(const test_problem *p)
{
    const tbuf *o[] = {&p->out, &p->w, &p->lse, &p->lg};
    for (int i = 0; i < 4; ++i)
        if (o[i]->mem &&
            first_non_sentinel(o[i]->mem, o[i]->elems * o[i]->esize) >= 0)
            return 0;
    return 1;
}

long tp_untouched(const tbuf *x, const unsigned char *map, int all_bytes)
{
    if (!x->mem)
        return -1;
    const unsigned char *p = x->mem;
    for (size_t e = 0; e < x->elems; ++e) {
        if (!all_bytes && map[e])
            continue;
        for (size_t b = 0; b < x->esize; ++b)
            if (p[e * x->esize + b] != SENTINEL_BYTE)
                return (long)e;
    }
    return -1;
}

test_tol tp_forward_tol(double eps, const ref_result *r, int64_t tk, int64_t dk,
                        double softcap, int sinks, double e_s_extra,
                        double v_err)
{
    const double L = (double)r->logit_absmax;
    const double A = (double)r->alibi_absmax, S = (double)r->sink_absmax;
    const double Tk = (double)tk, Dk = (double)dk, Tk1 = Tk + (sinks ? 1 : 0);
    test_tol t;
    t.e_s = (Dk + 4) * eps * L + 4 * eps * (1 + L + A + S + softcap) +
            2 * eps * A + e_s_extra;
    t.e_p = 2 * t.e_s + (Tk1 + 16) * eps;
    t.w = 2 * t.e_p;
    t.logit = 2 * t.e_s;
    t.out =
        2 * (((double)r->v_absmax + 1e-300) * (t.e_p + (Tk + 4) * eps) + v_err);
    t.lse_abs = 2 * (t.e_s + (Tk1 + 16) * eps);
    t.lse_rel = 2 * eps;
    /* H = log l - Σ_j p_j (s_j - m): each p_j off by e_p p_j moves H by
     * e_p p_j (|log p_j| + 1), at most e_p (H + 1); the sums' roundings
     * are (Tk' + 8) eps of |log l| + Σ p |s - m| <= log Tk' + 2 (L + A + S)
     * + 1; each logit's own error e_s. The caller adds e_p H. */
    t.entropy =
        2 * (t.e_p + (Tk1 + 8) * eps * (log(Tk1 + 1) + 2 * (L + A + S) + 1) +
             t.e_s);
    return t;
}

double tp_eps(int dtype)
{
    return dtype == SDPA_FLOAT32 ? FLT_EPSILON : DBL_EPSILON;
}

const char *tp_path_name(int path)
{
    static const char *n[] = {"AUTO", "MATERIALISED", "TILED", "DECODE"};
    return path >= 0 && path < 4 ? n[path] : "?";
}

long double tp_freq(long double base, int64_t r, int64_t d)
{
    if (base == 0)
        base = 10000.0L;
    return powl(base, -(long double)(2 * r) / (long double)d);
}

long tp_training_allocs(sdpa_ctx *ctx, const counting_alloc *ca,
                        const sdpa_forward_args *fa,
                        const sdpa_backward_args *ba)
{
    long before = 0;
    for (int rep = 0; rep < 4; ++rep) {
        if (sdpa_forward(ctx, fa) != SDPA_OK ||
            sdpa_backward(ctx, ba) != SDPA_OK)
            return -1;
        if (rep == 0)
            before = ca->allocs;
    }
    return ca->allocs - before;
}

double tp_dot(const tbuf *x, const tbuf *y)
{
    double sum = 0;
    const int64_t *e = x->t.shape;
    for (int64_t b = 0; b < e[0]; ++b)
        for (int64_t h = 0; h < e[1]; ++h)
            for (int64_t i = 0; i < e[2]; ++i)
                for (int64_t d = 0; d < e[3]; ++d)
                    sum += tget(x, b, h, i, d) * tget(y, b, h, i, d);
    return sum;
}

double tp_fd_loss(void *point)
{
    const tp_fd_point *at = point;
    if (sdpa_forward(at->ctx, at->fa) != SDPA_OK)
        return NAN;
    return tp_dot(at->dout, at->out);
}

int tp_fd_check(double (*loss)(void *user), void *user, tbuf *x, double *p,
                int64_t a, int64_t b, int64_t c, int64_t d, double analytic,
                const char *what, double *worst)
{
    const double step = 1e-5;
    double x0 = p ? *p : tget(x, a, b, c, d);
    if (!isfinite(x0))
        return 0;
    if (p)
        *p = x0 + step;
    else
        tset(x, a, b, c, d, x0 + step);
    double up = loss(user);
    if (p)
        *p = x0 - step;
    else
        tset(x, a, b, c, d, x0 - step);
    double down = loss(user);
    if (p)
        *p = x0;
    else
        tset(x, a, b, c, d, x0);
    double fd = (up - down) / (2 * step);
    double err = fabs(fd - analytic);
    double tol = 1e-7 + 1e-6 * fabs(analytic);
    if (err / tol > *worst)
        *worst = err / tol;
    if (!(err <= tol)) {
        printf("  FD %s[%lld,%lld,%lld,%lld]: analytic %.12g, finite "
               "difference %.12g\n",
               what, (long long)a, (long long)b, (long long)c, (long long)d,
               analytic, fd);
        return 1;
    }
    return 0;
}
