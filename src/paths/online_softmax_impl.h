/* The online softmax engine for one dtype (T/SUF, GEMM, GEMV); see
 * online_softmax.h for the algorithm. */
#include "paths/row_terms_impl.h"

/* The block's query rows, stacked (and widened from q's storage type). */
static void NAME(gather_queries)(const sdpa_problem *p,
                                 const sdpa_row_block *blk, T *dst,
                                 const NAME(sdpa_row_kernels) * rk)
{
    const size_t es = sdpa_dtype_size(p->q_type);
    int64_t r = 0;
    for (int64_t i = 0; i < blk->rows; i++)
        for (int64_t hh = 0; hh < blk->heads; hh++, r++)
            rk->widen(sdpa_at(&p->q, es, blk->batch, blk->head_first + hh,
                              blk->row_first + i),
                      p->q_type, dst + r * p->dim_k, p->dim_k);
}

/* S[:, j0:j1) = scale · Q Kᵀ over keys kb + [j0, j1) of the block, for
 * m_rows stacked rows: the own streaming kernel, or the BLAS on K rows
 * where they are or staged into kt. `first`: the first block of the
 * work item. */
static void NAME(block_scores)(const sdpa_problem *p, const sdpa_plan *plan,
                               const NAME(sdpa_row_kernels) * rk,
                               const sdpa_row_block *blk, const T *q,
                               int64_t q_ld, int64_t m_rows, int64_t kb,
                               int64_t j0, int64_t j1, bool first, T *s_rows,
                               int64_t ld, T *kt)
{
    const int64_t dk = p->dim_k;
    int64_t k_ld = sdpa_row_stride(&p->k, sdpa_kv_units(p, dk));
    /* an FP8 head's k_scale multiplies its scores (problem.h) */
    const T scale = (T)(p->scale * sdpa_k_scale(p, blk->head_kv));
    if (plan->fused) { /* the whole block in one call */
        const int64_t n = j1 - j0, kj = kb + j0;
        const char *k_rows[SDPA_FUSED_BLOCK_K], *v_rows[SDPA_FUSED_BLOCK_K];
        kv_rows(p, &p->k, blk->batch, blk->head_kv, kj, n, k_rows);
        /* V of the same keys, read next, the pages in turn */
        sdpa_row_prefetch next = kv_hint(p, &p->v, blk->batch, blk->head_kv, kj,
                                         n, p->dim_v, v_rows);
        /* in the first block, whose K no V pass before it prefetched, also
         * K a page ahead */
        const int64_t page = sdpa_kv_span(p, kj, n);
        const int64_t es = (int64_t)sdpa_dtype_size(p->kv_type);
        const sdpa_row_prefetch own = {
            NULL, 0, n - page, sdpa_kv_units(p, dk) * es, NULL, k_rows + page};
        if (first)
            next.also = &own;
        rk->dot_rows(q, q_ld, m_rows, k_rows, p->kv_type, n, dk, scale,
                     s_rows + j0, ld, &next);
        return;
    }
    const T *k_run =
        NAME(blas_kv_rows)(p, rk, &p->k, dk, blk->batch, blk->head_kv, kb + j0,
                           j1 - j0, kt, &k_ld);
    if (m_rows <= GEMV_MAX_ROWS)
        for (int64_t r = 0; r < m_rows; r++)
            GEMV(CblasRowMajor, CblasNoTrans, (int)(j1 - j0), (int)dk, scale,
                 k_run, (int)k_ld, q + r * q_ld, 1, (T)0, s_rows + r * ld + j0,
                 1);
    else
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m_rows,
             (int)(j1 - j0), (int)dk, scale, q, (int)q_ld, k_run, (int)k_ld,
             (T)0, s_rows + j0, (int)ld);
}

/* acc += P[:, j0:j1) V over keys kb + [j0, j1), likewise. */
static void NAME(block_values)(const sdpa_problem *p, const sdpa_plan *plan,
                               const NAME(sdpa_row_kernels) * rk,
                               const sdpa_row_block *blk, int64_t m_rows,
                               int64_t kb, int64_t j0, int64_t j1,
                               int64_t key_end, const T *s_rows, int64_t ld,
                               T *acc_rows, T *vt)
{
    const int64_t dv = p->dim_v;
    int64_t v_ld = sdpa_row_stride(&p->v, sdpa_kv_units(p, dv));
    if (plan->fused) {
        /* K of the next block's keys, read next (up to key_end); in the
         * last block, of the block the worker likely runs next, in
         * another item (blk->next_*) */
        const bool last = kb + plan->block_k >= key_end;
        int64_t kn = kb + plan->block_k + j0, end = key_end;
        int64_t b = blk->batch, hk = blk->head_kv;
        if (last) {
            kn = blk->next_key + j0;
            end = blk->next_end;
            b = blk->next_batch;
            hk = blk->next_head_kv;
        }
        int64_t ahead = kn < end ? end - kn : 0;
        const char *v_rows[SDPA_FUSED_BLOCK_K], *k_rows[SDPA_FUSED_BLOCK_K];
        kv_rows(p, &p->v, blk->batch, blk->head_kv, kb + j0, j1 - j0, v_rows);
        const sdpa_row_prefetch next =
            kv_hint(p, &p->k, b, hk, kn, ahead < j1 - j0 ? ahead : j1 - j0,
                    p->dim_k, k_rows);
        rk->acc_rows(s_rows + j0, ld, m_rows, v_rows, p->kv_type, j1 - j0, dv,
                     acc_rows, dv, &next);
        return;
    }
    const T *v_run =
        NAME(blas_kv_rows)(p, rk, &p->v, dv, blk->batch, blk->head_kv, kb + j0,
                           j1 - j0, vt, &v_ld);
    GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m_rows, (int)dv,
         (int)(j1 - j0), (T)1, s_rows + j0, (int)ld, v_run, (int)v_ld, (T)1,
         acc_rows, (int)dv);
}

/* The state of one call: the worker's scratch regions and each stacked
 * row's keys. */
typedef struct {
    T *s, *acc; /* scores (ld per row) and unnormalised outputs (dv) */
    T *m, *l;   /* each row's running max and sum */
    /* diagnostics: e[r] = Σ_j exp(s_j − m[r])·(s_j − m[r]) (the entropy's
     * sum, relative to the running max like l), t a row's final logits */
    T *e, *t;
    int64_t *limit, *start; /* each row's keys: [start, limit) */
    int64_t ld, dv;
} NAME(online_state);

/* Each stacked row sees keys [start, limit) of the block's range (its key
 * range, kv_lens, causality, window); both never decrease down the stack.
 * The block starting at key 0 carries the sink, if any: a key with logit
 * sigma_h and no value, so m = sigma_h, l = 1, O = 0. Sets the keys some
 * row sees, [*key_first, *key_end). */
static void NAME(online_start)(const sdpa_problem *p, const sdpa_row_block *blk,
                               int64_t n, const NAME(online_state) * st,
                               int64_t *key_first, int64_t *key_end)
{
    *key_first = blk->key_end;
    *key_end = blk->key_begin;
    for (int64_t r = 0; r < n; r++) {
        int64_t i = blk->row_first + r / blk->heads;
        int64_t lim = sdpa_key_limit(p, blk->batch, i);
        int64_t first = sdpa_key_start(p, blk->batch, i);
        st->limit[r] = lim < blk->key_end ? lim : blk->key_end;
        st->start[r] = first > blk->key_begin ? first : blk->key_begin;
        if (st->start[r] < st->limit[r]) {
            *key_first = st->start[r] < *key_first ? st->start[r] : *key_first;
            *key_end = st->limit[r] > *key_end ? st->limit[r] : *key_end;
        }
        bool sink = p->sinks && blk->key_begin == 0;
        st->m[r] =
            sink ? (T)p->sinks[blk->head_first + r % blk->heads] : (T)-INFINITY;
        st->l[r] = sink ? 1 : 0;
        if (st->e)
            st->e[r] = 0; /* the sink's own term: exp(0)·0 */
    }
    for (int64_t x = 0; x < n * st->dv; x++)
        st->acc[x] = 0;
}

/* Stacked row r over the block of bk keys at kb: its logits' terms, the
 * block's max, P = exp(S − m') in place, and m, ℓ, O (and e) moved to the
 * new max. */
static int NAME(online_row)(const sdpa_problem *p, const sdpa_plan *plan,
                            const NAME(sdpa_row_kernels) * rk, void *scratch,
                            const sdpa_row_block *blk,
                            const NAME(online_state) * st, int64_t r,
                            int64_t kb, int64_t bk, sdpa_where *where)
{
    int64_t h = blk->head_first + r % blk->heads;
    int64_t i = blk->row_first + r / blk->heads;
    T *row = st->s + r * st->ld;
    /* this row's keys in the block: row[lo, lim) */
    int64_t lo = st->start[r] - kb, lim = st->limit[r] - kb;
    lo = lo < 0 ? 0 : lo;
    lim = lim > bk ? bk : lim;
    T *x = row + lo;
    int64_t len = lim > lo ? lim - lo : 0;
    T block_max = (T)-INFINITY;
    if (len > 0) {
        if (p->softcap > 0)
            rk->softcap(x, len, (T)p->softcap);
        if (p->alibi_slopes)
            NAME(add_alibi)
        (x, len, (T)p->alibi_slopes[h],
         kb + lo - sdpa_diagonal(p, blk->batch, i));
        const T *bias =
            p->bias.data ? sdpa_bias_keys(p, blk->batch, h, i, kb + lo, len,
                                          SDPA_REGION(T, plan, scratch, bias))
                         : NULL;
        const uint8_t *mask =
            p->mask.data
                ? sdpa_mask_keys(p, blk->batch, h, i, kb + lo, len,
                                 SDPA_REGION(uint8_t, plan, scratch, mask))
                : NULL;
        block_max = rk->mask_max(x, len, bias, mask, p->mask_nonzero_allows);
    }
    if (block_max != block_max || block_max == (T)INFINITY) {
        *where = (sdpa_where){blk->batch, h, i};
        return SDPA_ERR_NONFINITE;
    }
    T m_new = block_max > st->m[r] ? block_max : st->m[r];
    if (m_new == (T)-INFINITY) {
        len = 0; /* nothing allowed yet: P row is 0 */
    } else {
        if (st->t)
            for (int64_t j = 0; j < len; j++)
                st->t[j] = x[j];
        T sum = len > 0 ? rk->exp_sum(x, len, m_new) : 0;
        if (!(sum >= 0) || sum == (T)INFINITY) {
            *where = (sdpa_where){blk->batch, h, i};
            return SDPA_ERR_NONFINITE;
        }
        if (m_new > st->m[r]) {
            /* e^{m − m'}: the old O and ℓ shrink as the max grows;
             * the entropy's sum moves to the new max too:
             * Σ e^{s−m'}(s−m') = e^{m−m'}(Σ e^{s−m}(s−m) + (m−m')ℓ) */
            T shrink = NAME(sdpa_exp_neg)(st->m[r] - m_new);
            if (st->e)
                st->e[r] =
                    st->l[r] > 0
                        ? shrink * (st->e[r] + (st->m[r] - m_new) * st->l[r])
                        : 0;
            st->l[r] *= shrink;
            rk->scale(st->acc + r * st->dv, st->dv, shrink);
        }
        if (st->e)
            st->e[r] += NAME(entropy_sum)(x, st->t, len, m_new);
        st->l[r] += sum;
        st->m[r] = m_new;
        /* after ℓ and e: the sum and diagnostics of the undropped softmax;
         * only P·V sees the mask */
        if (p->dropout && len > 0) {
            const sdpa_dropout_row d = sdpa_dropout_row_at(p, blk->batch, h, i);
            rk->dropout(x, len, &d, kb + lo, NAME(dropout_scale)(p), NULL, 0);
        }
    }
    /* P is 0 outside the row's keys, for the P·V gemm */
    for (int64_t j = 0; j < lo; j++)
        row[j] = 0;
    for (int64_t j = lo + len; j < bk; j++)
        row[j] = 0;
    return SDPA_OK;
}

int NAME(sdpa_online_softmax)(const sdpa_problem *p, const sdpa_plan *plan,
                              int kernel, void *scratch,
                              const sdpa_row_block *blk, sdpa_where *where)
{
    const NAME(sdpa_row_kernels) *rk = NAME(sdpa_row_kernels_select)(kernel);
    const int64_t n = blk->heads * blk->rows, dv = p->dim_v;
    const int64_t ld = (int64_t)plan->score_ld;
    int64_t *limit = SDPA_REGION(int64_t, plan, scratch, a);
    const NAME(online_state) st = {
        .s = SDPA_REGION(T, plan, scratch, s),
        .acc = SDPA_REGION(T, plan, scratch, o),
        .m = SDPA_REGION(T, plan, scratch, m),
        .l = SDPA_REGION(T, plan, scratch, l),
        .e = p->diagnostics ? SDPA_REGION(T, plan, scratch, e) : NULL,
        .t = p->diagnostics ? SDPA_REGION(T, plan, scratch, t) : NULL,
        .limit = limit,
        .start = limit + n,
        .ld = ld,
        .dv = dv,
    };

    /* One head's rows are already a strided matrix; a stack of heads is
     * gathered (g·Tq·Dk values, nothing next to the Tk·Dk of K). */
    const T *q;
    int64_t q_ld;
    if (blk->heads == 1 && !sdpa_q_staged(p)) {
        q = AT(&p->q, blk->batch, blk->head_first, blk->row_first);
        q_ld = sdpa_row_stride(&p->q, p->dim_k);
    } else {
        T *gathered = SDPA_REGION(T, plan, scratch, q);
        NAME(gather_queries)(p, blk, gathered, rk);
        q = gathered;
        q_ld = p->dim_k;
    }
    int64_t key_first, key_end;
    NAME(online_start)(p, blk, n, &st, &key_first, &key_end);

    /* Rows [active, active_end) see keys of the block at kb: those above
     * `active` end before it, those from `active_end` on start after it
     * (causal masks and windows), and both products skip them. */
    int64_t active = 0, active_end = 0;
    T *kt = SDPA_REGION(T, plan, scratch, kt);
    T *vt = SDPA_REGION(T, plan, scratch, vt);
    const bool filtered = p->mask.data || p->bias.data;
    uint8_t *live = SDPA_REGION(uint8_t, plan, scratch, live);
    for (int64_t kb = key_first; kb < key_end; kb += plan->block_k) {
        int64_t bk =
            key_end - kb < plan->block_k ? key_end - kb : plan->block_k;
        /* Keys no row may see (a mask, a −inf bias) are never read: both
         * products run over the runs of live keys (live_keys.c). */
        int64_t live_count = bk;
        if (filtered) {
            live_count = sdpa_live_keys(p, blk, kb, bk, live);
            if (live_count == 0)
                continue; /* nothing to see here: skip both products */
        }
        while (active < n && st.limit[active] <= kb)
            active++;
        while (active_end < n && st.start[active_end] < kb + bk)
            active_end++;
        if (active_end <= active)
            continue;
        const int64_t m_rows = active_end - active;
        T *s_rows = st.s + active * ld, *acc_rows = st.acc + active * dv;

        for (int64_t j0 = 0, j1 = 0;
             sdpa_live_run(live, live_count, bk, &j0, &j1); j0 = j1)
            NAME(block_scores)
        (p, plan, rk, blk, q + active * q_ld, q_ld, m_rows, kb, j0, j1,
         kb == key_first, s_rows, ld, kt);
        if (live_count < bk)
            NAME(zero_dead_scores)(s_rows, ld, m_rows, live, bk);

        for (int64_t r = active; r < active_end; r++) {
            int status = NAME(online_row)(p, plan, rk, scratch, blk, &st, r, kb,
                                          bk, where);
            if (status != SDPA_OK)
                return status;
        }

        for (int64_t j0 = 0, j1 = 0;
             sdpa_live_run(live, live_count, bk, &j0, &j1); j0 = j1)
            NAME(block_values)
        (p, plan, rk, blk, m_rows, kb, j0, j1, key_end, s_rows, ld, acc_rows,
         vt);
    }
    return SDPA_OK;
}

void NAME(sdpa_store_diagnostics)(const sdpa_problem *p, int64_t b, int64_t h,
                                  int64_t i, T l, T e)
{
    /* p_j = e^{s_j − m}/ℓ: the largest is 1/ℓ (m is the row's max), and
     * H = −Σ p_j log p_j = log ℓ − Σ_j e^{s_j − m}(s_j − m)/ℓ. A row with
     * no allowed key (ℓ = 0) reports 0 and 0. */
    if (p->max_weight.data)
        *AT(&p->max_weight, b, h, i) = l > 0 ? 1 / l : 0;
    if (p->entropy.data)
        *AT(&p->entropy, b, h, i) = l > 0 ? (T)log((double)l) - e / l : 0;
}

/* Output row (b, h, i) = acc · c, in out's storage type, a few values at
 * a time; false when a value is not finite there. */
static bool NAME(store_out_row)(const sdpa_problem *p, int64_t b, int64_t h,
                                int64_t i, const T *acc, T c)
{
    enum { CHUNK = 64 };
    const size_t es = sdpa_dtype_size(p->out_type);
    char *out = sdpa_at(&p->out, es, b, h, i);
    bool finite = true;
    for (int64_t d0 = 0; d0 < p->dim_v; d0 += CHUNK) {
        T values[CHUNK];
        int64_t n = p->dim_v - d0 < CHUNK ? p->dim_v - d0 : CHUNK;
        for (int64_t d = 0; d < n; d++)
            values[d] = c == 0 ? 0 : acc[d0 + d] * c; /* 0: an empty row,
                                                          whatever acc holds */
        finite &=
            NAME(store_values)(out + (size_t)d0 * es, p->out_type, values, n);
    }
    return finite;
}

int NAME(sdpa_finish_row)(const sdpa_problem *p, int64_t b, int64_t h,
                          int64_t i, const T *acc, T m, T l, T e,
                          sdpa_where *where)
{
    T lse = (T)-INFINITY;
    NAME(sdpa_store_diagnostics)(p, b, h, i, l, e);
    if (l > 0) {
        /* an FP8 head's v_scale multiplies its outputs (problem.h) */
        const T c = p->v_scale ? (T)sdpa_v_scale(p, h / p->group) / l : 1 / l;
        bool finite = NAME(store_out_row)(p, b, h, i, acc, c);
        /* a non-finite value in a V row read (at an allowed key, or beside
         * one), or sums of values near the dtype's maximum that overflow
         * before the division by l: an error, never a silent inf or NaN */
        if (!finite) {
            *where = (sdpa_where){b, h, i};
            return SDPA_ERR_NONFINITE;
        }
        if (p->lse.data) /* a log per row costs about 1 % on shape C */
            lse = m + (T)log((double)l);
    } else {
        /* No allowed key: validation let it through only under the zero
         * convention, unless finite logits overflowed to -inf. */
        if (!p->empty_rows_zero) {
            *where = (sdpa_where){b, h, i};
            return SDPA_ERR_NONFINITE;
        }
        NAME(store_out_row)(p, b, h, i, acc, 0);
    }
    if (p->lse.data)
        *AT(&p->lse, b, h, i) = lse;
    return SDPA_OK;
}
