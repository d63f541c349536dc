/*
 * The materialised path for one dtype (T/SUF, GEMM = cblas_?gemm). One work
 * item is a block of query rows of one (batch item, query head):
 *
 *   S = scale · Q_blk Kᵀ           (rows × ncols) @ gemm, scale as alpha
 *   per row: soft-cap, + bias, mask/causal/lengths → -inf, max, exp, sum
 *   O_blk = P V                    (rows × ncols) @ (ncols × Dv) gemm
 *   O_blk row r *= 1 / sum_r       (Dv per row, cheaper than Tk per row)
 *
 * ncols is the number of keys the block's last row may see (causal and
 * kv_lens bound it), so forbidden key columns beyond it cost nothing and K/V
 * rows past kv_lens[b] are never read. When the caller asks for the weights,
 * S lives in the caller's weights buffer and P is normalised in place, so the
 * weights are exactly the probabilities that produced the output.
 */

#include "paths/row_terms_impl.h"

/* The logits output of row x (its keys [lo, lo + len) at columns c0 + lo
 * on), at a stage: the stage's values at the row's keys, -inf elsewhere;
 * after the mask (stage < MASKED) keys the mask or bias forbade become
 * -inf too (fix_forbidden). */
static void NAME(logits_store)(T *logits, int64_t len_k, const T *x,
                               int64_t first, int64_t len)
{
    for (int64_t j = 0; j < len_k; j++)
        logits[j] = j >= first && j < first + len ? x[j - first] : (T)-INFINITY;
}

static void NAME(logits_fix_forbidden)(T *logits, const T *x, int64_t first,
                                       int64_t len)
{
    for (int64_t j = 0; j < len; j++)
        if (x[j] == (T)-INFINITY)
            logits[first + j] = (T)-INFINITY;
}

/* One work item's block: its rows and keys, and where its scores, Q and
 * output are. */
typedef struct {
    int64_t b, h, hk, i0, rows;
    /* The block's keys: c0 (the first row's start, the smallest) up to the
     * last row's limit (the largest); column j of S is key c0 + j. */
    int64_t c0, ncols;
    bool want_weights;
    T *s; /* the scores, in the caller's weights or in scratch */
    int64_t ld;
    T *inv_sum; /* one per row */
    T *out;     /* the caller's out, or scratch when out is staged */
    int64_t out_ld;
    const T *q; /* the caller's q, or its rows widened */
    int64_t q_ld;
    uint8_t *live; /* the block's live keys (live_keys.c) */
    int64_t live_count;
} NAME(mat_block);

static void NAME(mat_setup)(const sdpa_problem *p, const sdpa_plan *plan,
                            const NAME(sdpa_row_kernels) * rk, void *scratch,
                            int64_t item, NAME(mat_block) * m)
{
    int64_t q_block = item % plan->q_blocks;
    m->h = (item / plan->q_blocks) % p->heads_q;
    m->b = item / plan->q_blocks / p->heads_q;
    m->hk = m->h / p->group;
    m->i0 = q_block * plan->block_q;
    m->rows =
        p->len_q - m->i0 < plan->block_q ? p->len_q - m->i0 : plan->block_q;
    const int64_t b = m->b, h = m->h, i0 = m->i0, rows = m->rows;
    m->c0 = sdpa_key_start(p, b, i0);
    int64_t last_limit = sdpa_key_limit(p, b, i0 + rows - 1);
    m->ncols = last_limit > m->c0 ? last_limit - m->c0 : 0;

    m->want_weights = p->weights.data != NULL;
    if (m->want_weights) {
        m->s = AT(&p->weights, b, h, i0) + m->c0;
        m->ld = sdpa_row_stride(&p->weights, p->len_k);
    } else {
        m->s = SDPA_REGION(T, plan, scratch, s);
        m->ld = (int64_t)plan->score_ld;
    }
    m->inv_sum = SDPA_REGION(T, plan, scratch, m);
    /* O goes to the caller's out, or to scratch when out is stored in
     * another type (rounded into out at the end) */
    if (sdpa_out_staged(p)) {
        m->out = SDPA_REGION(T, plan, scratch, o);
        m->out_ld = p->dim_v;
    } else {
        m->out = AT(&p->out, b, h, i0);
        m->out_ld = sdpa_row_stride(&p->out, p->dim_v);
    }
    /* Q, widened when stored in another type */
    if (sdpa_q_staged(p)) {
        T *widened = SDPA_REGION(T, plan, scratch, q);
        const size_t es = sdpa_dtype_size(p->q_type);
        for (int64_t r = 0; r < rows; r++)
            rk->widen(sdpa_at(&p->q, es, b, h, i0 + r), p->q_type,
                      widened + r * p->dim_k, p->dim_k);
        m->q = widened;
        m->q_ld = p->dim_k;
    } else {
        m->q = AT(&p->q, b, h, i0);
        m->q_ld = sdpa_row_stride(&p->q, p->dim_k);
    }
    /* Keys no row of the block may see (a mask, a −inf bias) are never
     * read: both products run over the runs of live keys (live_keys.c). */
    m->live = SDPA_REGION(uint8_t, plan, scratch, live);
    m->live_count = m->ncols;
    if (m->ncols > 0 && (p->mask.data || p->bias.data)) {
        sdpa_row_block blk = {.batch = b,
                              .head_kv = m->hk,
                              .head_first = h,
                              .heads = 1,
                              .row_first = i0,
                              .rows = rows,
                              .key_begin = m->c0,
                              .key_end = m->c0 + m->ncols};
        m->live_count = sdpa_live_keys(p, &blk, m->c0, m->ncols, m->live);
    }
}

/* S = scale · Q Kᵀ over the live runs (dead columns are zeroed). */
static void NAME(mat_scores)(const sdpa_problem *p, const sdpa_plan *plan,
                             const NAME(sdpa_row_kernels) * rk, void *scratch,
                             const NAME(mat_block) * m)
{
    T *kt = SDPA_REGION(T, plan, scratch, kt);
    if (m->live_count < m->ncols)
        NAME(zero_dead_scores)(m->s, m->ld, m->rows, m->live, m->ncols);
    for (int64_t j0 = 0, j1 = 0;
         sdpa_live_run(m->live, m->live_count, m->ncols, &j0, &j1); j0 = j1)
        for (int64_t a = j0, e; a < j1; a = e) {
            e = sdpa_stage_end(plan, a, j1);
            int64_t k_ld;
            const T *k = NAME(blas_kv_rows)(p, rk, &p->k, p->dim_k, m->b, m->hk,
                                            m->c0 + a, e - a, kt, &k_ld);
            GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m->rows,
                 (int)(e - a), (int)p->dim_k,
                 (T)(p->scale * sdpa_k_scale(p, m->hk)), m->q, (int)m->q_ld, k,
                 (int)k_ld, (T)0, m->s + a, (int)m->ld);
        }
}

/* Row r of the block: its logits' terms, the softmax in place (normalised
 * when the scores are the caller's weights), inv_sum[r], lse and the
 * diagnostics. */
static int NAME(mat_row)(const sdpa_problem *p, const sdpa_plan *plan,
                         const NAME(sdpa_row_kernels) * rk, void *scratch,
                         const NAME(mat_block) * mb, int64_t r,
                         sdpa_where *where)
{
    const int64_t b = mb->b, h = mb->h, c0 = mb->c0, ncols = mb->ncols;
    int64_t i = mb->i0 + r;
    T *row = mb->s + r * mb->ld;
    /* this row's keys: columns [lo, lo + len) */
    int64_t lo = sdpa_key_start(p, b, i) - c0;
    int64_t hi = sdpa_key_limit(p, b, i) - c0;
    hi = hi > ncols ? ncols : hi;
    int64_t len = hi > lo ? hi - lo : 0;
    T *x = row + lo;
    T *logits = p->logits_stage ? AT(&p->logits, b, h, i) : NULL;
    if (logits && p->logits_stage == SDPA_LOGITS_SCALED)
        NAME(logits_store)(logits, p->len_k, x, c0 + lo, len);
    if (len > 0 && p->softcap > 0)
        rk->softcap(x, len, (T)p->softcap);
    if (logits && p->logits_stage == SDPA_LOGITS_CAPPED)
        NAME(logits_store)(logits, p->len_k, x, c0 + lo, len);
    if (len > 0 && p->alibi_slopes)
        NAME(add_alibi)
    (x, len, (T)p->alibi_slopes[h], c0 + lo - sdpa_diagonal(p, b, i));
    const T *bias = p->bias.data && len > 0
                        ? sdpa_bias_keys(p, b, h, i, c0 + lo, len,
                                         SDPA_REGION(T, plan, scratch, bias))
                        : NULL;
    const uint8_t *mask =
        p->mask.data && len > 0
            ? sdpa_mask_keys(p, b, h, i, c0 + lo, len,
                             SDPA_REGION(uint8_t, plan, scratch, mask))
            : NULL;
    T m = len > 0 ? rk->mask_max(x, len, bias, mask, p->mask_nonzero_allows)
                  : (T)-INFINITY;
    if (m != m || m == (T)INFINITY) {
        *where = (sdpa_where){b, h, i};
        return SDPA_ERR_NONFINITE;
    }
    if (logits && p->logits_stage == SDPA_LOGITS_MASKED)
        NAME(logits_store)(logits, p->len_k, x, c0 + lo, len);
    else if (logits)
        NAME(logits_fix_forbidden)(logits, x, c0 + lo, len);
    /* The sink joins the softmax as one more logit with no value. */
    T sink = p->sinks ? (T)p->sinks[h] : (T)-INFINITY;
    T m_all = m > sink ? m : sink;
    T sum = 0, lse = (T)-INFINITY;
    if (m_all == (T)-INFINITY) {
        /* No allowed key: validation let it through only under the zero
         * convention, unless finite logits overflowed to -inf. */
        if (!p->empty_rows_zero) {
            *where = (sdpa_where){b, h, i};
            return SDPA_ERR_NONFINITE;
        }
        len = 0;
        if (p->diagnostics)
            NAME(sdpa_store_diagnostics)(p, b, h, i, 0, 0);
    } else {
        T *t = p->diagnostics ? SDPA_REGION(T, plan, scratch, t) : NULL;
        if (t)
            for (int64_t j = 0; j < len; j++)
                t[j] = x[j];
        sum = m != (T)-INFINITY ? rk->exp_sum(x, len, m_all) : 0;
        T entropy_terms =
            t && m != (T)-INFINITY ? NAME(entropy_sum)(x, t, len, m_all) : 0;
        if (p->sinks) {
            T e_sink = NAME(sdpa_exp_neg)(sink - m_all);
            sum += e_sink;
            entropy_terms += e_sink * (sink - m_all);
        }
        if (p->diagnostics)
            NAME(sdpa_store_diagnostics)(p, b, h, i, sum, entropy_terms);
        if (!(sum >= 1) || sum == (T)INFINITY) { /* exp(m - m) = 1 */
            /* a NaN logit beside the max, or overflow */
            *where = (sdpa_where){b, h, i};
            return SDPA_ERR_NONFINITE;
        }
        if (p->lse.data)
            lse = m_all + (T)log((double)sum);
        if (m == (T)-INFINITY)
            len = 0; /* only the sink: P row is 0 */
    }
    /* P is 0 outside the row's keys: the columns the gemm reads, and
     * in the caller's weights the whole row. */
    if (mb->want_weights) {
        T *w_row = row - c0;
        for (int64_t j = 0; j < c0 + lo; j++)
            w_row[j] = 0;
        for (int64_t j = c0 + lo + len; j < p->len_k; j++)
            w_row[j] = 0;
    } else {
        for (int64_t j = 0; j < lo; j++)
            row[j] = 0;
        for (int64_t j = lo + len; j < ncols; j++)
            row[j] = 0;
    }
    if (mb->want_weights && sum > 0)
        rk->scale(x, len, 1 / sum);
    /* after the sum, lse and diagnostics: those of the undropped softmax;
     * the weights output gets the dropped, scaled weights */
    if (p->dropout && len > 0) {
        const sdpa_dropout_row d = sdpa_dropout_row_at(p, b, h, i);
        rk->dropout(x, len, &d, c0 + lo, NAME(dropout_scale)(p), NULL, 0);
    }
    /* what the output row is multiplied by after the P·V gemm */
    if (sum == 0)
        mb->inv_sum[r] = 0;
    else
        mb->inv_sum[r] = mb->want_weights ? 1 : 1 / sum;
    if (p->lse.data)
        *AT(&p->lse, b, h, i) = lse;
    return SDPA_OK;
}

/* O = P V over the live runs, each row divided by its sum (unless P is
 * already normalised), checked finite and stored. */
static int NAME(mat_values)(const sdpa_problem *p, const sdpa_plan *plan,
                            const NAME(sdpa_row_kernels) * rk, void *scratch,
                            const NAME(mat_block) * m, sdpa_where *where)
{
    T *vt = SDPA_REGION(T, plan, scratch, vt);
    T *const out = m->out;
    const int64_t out_ld = m->out_ld;
    /* O = Σ over runs of P[:, run] V[run]: the first run sets O, the
     * others add to it. */
    T beta = 0;
    for (int64_t j0 = 0, j1 = 0;
         sdpa_live_run(m->live, m->live_count, m->ncols, &j0, &j1); j0 = j1)
        for (int64_t a = j0, e; a < j1; a = e) {
            e = sdpa_stage_end(plan, a, j1);
            int64_t v_ld;
            const T *v = NAME(blas_kv_rows)(p, rk, &p->v, p->dim_v, m->b, m->hk,
                                            m->c0 + a, e - a, vt, &v_ld);
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m->rows,
                 (int)p->dim_v, (int)(e - a), (T)sdpa_v_scale(p, m->hk),
                 m->s + a, (int)m->ld, v, (int)v_ld, beta, out, (int)out_ld);
            beta = 1;
        }
    for (int64_t r = 0; r < m->rows; r++) {
        T *o = out + r * out_ld;
        if (m->live_count == 0 || m->inv_sum[r] == 0)
            for (int64_t d = 0; d < p->dim_v; d++)
                o[d] = 0; /* an empty row, without reading P or V */
        else if (m->inv_sum[r] != 1)
            rk->scale(o, p->dim_v, m->inv_sum[r]);
        /* a non-finite value in a V row read, or sums of values near the
         * dtype's maximum that overflow before the division (or beyond
         * out's half type when rounded): an error, never a silent inf or
         * NaN */
        bool finite = true;
        if (sdpa_out_staged(p))
            finite = NAME(store_values)(sdpa_at(&p->out,
                                                sdpa_dtype_size(p->out_type),
                                                m->b, m->h, m->i0 + r),
                                        p->out_type, o, p->dim_v);
        else
            for (int64_t d = 0; d < p->dim_v; d++)
                finite &= isfinite(o[d]) != 0;
        if (!finite) {
            *where = (sdpa_where){m->b, m->h, m->i0 + r};
            return SDPA_ERR_NONFINITE;
        }
    }
    return SDPA_OK;
}

static int NAME(materialised_item)(const sdpa_problem *p, const sdpa_plan *plan,
                                   int kernel, void *scratch, int64_t item,
                                   sdpa_where *where)
{
    const NAME(sdpa_row_kernels) *rk = NAME(sdpa_row_kernels_select)(kernel);
    NAME(mat_block) m;
    NAME(mat_setup)(p, plan, rk, scratch, item, &m);
    NAME(mat_scores)(p, plan, rk, scratch, &m);
    for (int64_t r = 0; r < m.rows; r++) {
        int status = NAME(mat_row)(p, plan, rk, scratch, &m, r, where);
        if (status != SDPA_OK)
            return status;
    }
    return NAME(mat_values)(p, plan, rk, scratch, &m, where);
}
