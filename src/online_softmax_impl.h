/* The online softmax engine for one dtype (T/SUF, GEMM, GEMV); see
 * online_softmax.h for the algorithm. */
static void NAME(gather_queries)(const sdpa_problem *p,
                                 const sdpa_row_block *blk, T *dst)
{
    int64_t r = 0;
    for (int64_t i = 0; i < blk->rows; i++)
        for (int64_t hh = 0; hh < blk->heads; hh++, r++) {
            const T *src =
                AT(&p->q, blk->batch, blk->head_first + hh, blk->row_first + i);
            for (int64_t d = 0; d < p->dim_k; d++)
                dst[r * p->dim_k + d] = src[d];
        }
}

int NAME(sdpa_online_softmax)(const sdpa_problem *p, const sdpa_plan *plan,
                              int kernel, void *scratch,
                              const sdpa_row_block *blk, sdpa_where *where)
{
    const NAME(sdpa_row_kernels) *rk = NAME(sdpa_row_kernels_select)(kernel);
    const int64_t n = blk->heads * blk->rows, dv = p->dim_v;
    const int64_t ld = (int64_t)plan->score_ld;
    T *s = SDPA_REGION(T, plan, scratch, s);
    T *acc = SDPA_REGION(T, plan, scratch, o);
    T *m = SDPA_REGION(T, plan, scratch, m);
    T *l = SDPA_REGION(T, plan, scratch, l);
    int64_t *limit = SDPA_REGION(int64_t, plan, scratch, a);

    /* One head's rows are already a strided matrix; a stack of heads is
     * gathered (g·Tq·Dk values, nothing next to the Tk·Dk of K). */
    const T *q;
    int64_t q_ld;
    if (blk->heads == 1) {
        q = AT(&p->q, blk->batch, blk->head_first, blk->row_first);
        q_ld = sdpa_row_stride(&p->q, p->dim_k);
    } else {
        T *gathered = SDPA_REGION(T, plan, scratch, q);
        NAME(gather_queries)(p, blk, gathered);
        q = gathered;
        q_ld = p->dim_k;
    }

    int64_t key_end = blk->key_begin;
    for (int64_t r = 0; r < n; r++) {
        int64_t lim =
            sdpa_key_limit(p, blk->batch, blk->row_first + r / blk->heads);
        limit[r] = lim < blk->key_end ? lim : blk->key_end;
        key_end = limit[r] > key_end ? limit[r] : key_end;
        m[r] = (T)-INFINITY;
        l[r] = 0;
    }

    for (int64_t e = 0; e < n * dv; e++)
        acc[e] = 0;
    /* Rows below `active` see none of the keys from kb on: the limits never
     * decrease down the stack, so the rows a key block needs are a suffix
     * and both products skip the rows above it (causal masks). */
    int64_t active = 0;
    const T *k = AT(&p->k, blk->batch, blk->head_kv, 0);
    const T *v = AT(&p->v, blk->batch, blk->head_kv, 0);
    const int64_t k_ld = sdpa_row_stride(&p->k, p->dim_k);
    const int64_t v_ld = sdpa_row_stride(&p->v, dv);
    const bool filtered = p->mask.data || p->bias.data;
    uint8_t *live = SDPA_REGION(uint8_t, plan, scratch, live);
    for (int64_t kb = blk->key_begin; kb < key_end; kb += plan->block_k) {
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
        while (active < n && limit[active] <= kb)
            active++;
        const int64_t m_rows = n - active;
        T *s_rows = s + active * ld, *acc_rows = acc + active * dv;

        for (int64_t j0 = 0, j1; j0 < bk; j0 = j1) {
            if (live_count < bk) {
                j0 = sdpa_next_run(live, j0, bk, &j1);
                if (j0 == bk)
                    break;
            } else {
                j1 = bk;
            }
            const T *k_run = k + (kb + j0) * k_ld;
            if (m_rows <= GEMV_MAX_ROWS)
                for (int64_t r = 0; r < m_rows; r++)
                    GEMV(CblasRowMajor, CblasNoTrans, (int)(j1 - j0),
                         (int)p->dim_k, (T)p->scale, k_run, (int)k_ld,
                         q + (active + r) * q_ld, 1, (T)0, s_rows + r * ld + j0,
                         1);
            else
                GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m_rows,
                     (int)(j1 - j0), (int)p->dim_k, (T)p->scale,
                     q + active * q_ld, (int)q_ld, k_run, (int)k_ld, (T)0,
                     s_rows + j0, (int)ld);
        }
        /* The scores of dead keys were not computed: any finite value does,
         * as the mask or bias forbids them in every row. */
        if (live_count < bk)
            for (int64_t r = active; r < n; r++)
                for (int64_t j = 0; j < bk; j++)
                    if (!live[j])
                        s[r * ld + j] = 0;

        for (int64_t r = active; r < n; r++) {
            int64_t h = blk->head_first + r % blk->heads;
            int64_t i = blk->row_first + r / blk->heads;
            T *x = s + r * ld;
            int64_t lim = limit[r] - kb;
            lim = lim < 0 ? 0 : lim > bk ? bk : lim;
            T block_max = (T)-INFINITY;
            if (lim > 0) {
                if (p->softcap > 0)
                    rk->softcap(x, lim, (T)p->softcap);
                const T *bias =
                    p->bias.data
                        ? sdpa_bias_keys(p, blk->batch, h, i, kb, lim,
                                         SDPA_REGION(T, plan, scratch, bias))
                        : NULL;
                const uint8_t *mask =
                    p->mask.data ? sdpa_mask_keys(p, blk->batch, h, i, kb, lim,
                                                  SDPA_REGION(uint8_t, plan,
                                                              scratch, mask))
                                 : NULL;
                block_max =
                    rk->mask_max(x, lim, bias, mask, p->mask_nonzero_allows);
            }
            if (block_max != block_max || block_max == (T)INFINITY) {
                *where = (sdpa_where){blk->batch, h, i};
                return SDPA_ERR_NONFINITE;
            }
            T m_new = block_max > m[r] ? block_max : m[r];
            if (m_new == (T)-INFINITY) {
                lim = 0; /* nothing allowed yet: P row is 0 */
            } else {
                T sum = rk->exp_sum(x, lim, m_new);
                if (!(sum >= 0) || sum == (T)INFINITY) {
                    *where = (sdpa_where){blk->batch, h, i};
                    return SDPA_ERR_NONFINITE;
                }
                if (m_new > m[r]) {
                    /* e^{m − m'}: the old O and ℓ shrink as the max grows */
                    T shrink = NAME(sdpa_exp_neg)(m[r] - m_new);
                    l[r] *= shrink;
                    rk->scale(acc + r * dv, dv, shrink);
                }
                l[r] += sum;
                m[r] = m_new;
            }
            for (int64_t j = lim; j < bk; j++)
                x[j] = 0;
        }

        for (int64_t j0 = 0, j1; j0 < bk; j0 = j1) {
            if (live_count < bk) {
                j0 = sdpa_next_run(live, j0, bk, &j1);
                if (j0 == bk)
                    break;
            } else {
                j1 = bk;
            }
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m_rows,
                 (int)dv, (int)(j1 - j0), (T)1, s_rows + j0, (int)ld,
                 v + (kb + j0) * v_ld, (int)v_ld, (T)1, acc_rows, (int)dv);
        }
    }
    return SDPA_OK;
}

int NAME(sdpa_finish_row)(const sdpa_problem *p, int64_t b, int64_t h,
                          int64_t i, const T *acc, T m, T l, sdpa_where *where)
{
    T *out = AT(&p->out, b, h, i);
    T lse = (T)-INFINITY;
    if (l > 0) {
        T inv = 1 / l;
        for (int64_t d = 0; d < p->dim_v; d++)
            out[d] = acc[d] * inv;
        if (p->lse.data) /* a log per row costs about 1 % on shape C */
            lse = m + (T)log((double)l);
    } else {
        /* No allowed key: validation let it through only under the zero
         * convention, unless finite logits overflowed to -inf. */
        if (!p->empty_rows_zero) {
            *where = (sdpa_where){b, h, i};
            return SDPA_ERR_NONFINITE;
        }
        for (int64_t d = 0; d < p->dim_v; d++)
            out[d] = 0;
    }
    if (p->lse.data)
        *AT(&p->lse, b, h, i) = lse;
    return SDPA_OK;
}
