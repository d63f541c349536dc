/* The multi-head layer's backward pass for one dtype (T/SUF, GEMM),
 * included by layer_backward.c through instantiate.h: the transposed
 * products, the bias sums and the whole pass. */

/* C[b, t, :] = A[b, t, :] · Wᵀ + beta · C[b, t, :]: A's rows are ka wide,
 * C's kc wide, W is [kc, ka] row-major. One gemm over all rows when both
 * are evenly spaced, else one per batch item. */
static void NAME(gemm_rows_nt)(const layer_rows *a, int64_t ka, const T *w,
                               int64_t kc, const layer_rows *c, T beta)
{
    int64_t items, m, lda, ldc;
    sdpa_layer_gemm_layout(a, ka, c, kc, &items, &m, &lda, &ldc);
    for (int64_t b = 0; b < items; b++)
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)m, (int)kc, (int)ka,
             (T)1, (const T *)(const void *)a->data + b * a->s0, (int)lda, w,
             (int)ka, beta, (T *)(void *)c->data + b * c->s0, (int)ldc);
}

/* dW = Aᵀ G over all rows: A's rows are ka wide, G's kg wide, dW is
 * [ka, kg] row-major (written, then accumulated per batch item when the
 * rows are not evenly spaced). */
static void NAME(gemm_rows_tn)(const layer_rows *a, int64_t ka,
                               const layer_rows *g, int64_t kg, T *dw)
{
    int64_t items, m, lda, ldg;
    sdpa_layer_gemm_layout(a, ka, g, kg, &items, &m, &lda, &ldg);
    for (int64_t b = 0; b < items; b++)
        GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, (int)ka, (int)kg, (int)m,
             (T)1, (const T *)(const void *)a->data + b * a->s0, (int)lda,
             (const T *)(const void *)g->data + b * g->s0, (int)ldg,
             b > 0 ? (T)1 : (T)0, dw, (int)kg);
}

/* db[j] = Σ over every row of G[row, j] (cols wide), in row order. */
static void NAME(col_sums)(const layer_rows *g, int64_t cols, T *db)
{
    for (int64_t j = 0; j < cols; j++)
        db[j] = 0;
    for (int64_t b = 0; b < g->n; b++)
        for (int64_t t = 0; t < g->len; t++) {
            const T *row =
                (const T *)(const void *)g->data + b * g->s0 + t * g->s2;
            for (int64_t j = 0; j < cols; j++)
                db[j] += row[j];
        }
}

/* The whole pass on validated arguments and reserved scratch s. Returns
 * SDPA_OK or the status of the recomputed attention (forward or
 * backward), before anything of the caller's is written. */
static int NAME(layer_backward)(sdpa_ctx *ctx, const bwd_plan *lp, char *s)
{
    const int64_t n = lp->n, e = lp->e;
    const int64_t wq = lp->hq * lp->dk, wk = lp->hkv * lp->dk;
    const int64_t wv = lp->hkv * lp->dv, wo = lp->hq * lp->dv;
    const T *w_q = lp->w_q, *w_k = lp->w_k, *w_v = lp->w_v, *w_o = lp->w_o;

    /* the forward, recomputed: X~, Q, K, V, RoPE, attention with lse */
    layer_rows xq = lp->x_q, xkv = lp->x_kv;
    if (lp->positions == SDPA_POS_SINUSOIDAL) {
        T *table = (T *)(void *)(s + lp->off_table);
        layer_rows sq = sdpa_layer_scratch_rows(s, lp->off_xq, n, lp->tq, e);
        NAME(add_sinusoidal)
        (&xq, e, lp->pos_q, lp->offset, lp->base, table, (T *)(void *)sq.data);
        xq = sq;
        if (lp->self) {
            xkv = sq;
        } else {
            layer_rows sk =
                sdpa_layer_scratch_rows(s, lp->off_xkv, n, lp->tk, e);
            NAME(add_sinusoidal)
            (&xkv, e, lp->pos_kv, lp->offset, lp->base, table,
             (T *)(void *)sk.data);
            xkv = sk;
        }
    }
    layer_rows q = sdpa_layer_scratch_rows(s, lp->off_q, n, lp->tq, wq);
    layer_rows k = sdpa_layer_scratch_rows(s, lp->off_k, n, lp->tk, wk);
    layer_rows v = sdpa_layer_scratch_rows(s, lp->off_v, n, lp->tk, wv);
    layer_rows o = sdpa_layer_scratch_rows(s, lp->off_o, n, lp->tq, wo);
    layer_rows d_o = sdpa_layer_scratch_rows(s, lp->off_do, n, lp->tq, wo);
    layer_rows dq = sdpa_layer_scratch_rows(s, lp->off_dq, n, lp->tq, wq);
    layer_rows dk = sdpa_layer_scratch_rows(s, lp->off_dk, n, lp->tk, wk);
    layer_rows dv = sdpa_layer_scratch_rows(s, lp->off_dv, n, lp->tk, wv);
    NAME(gemm_rows)(&xq, e, w_q, wq, lp->b_q, &q);
    NAME(gemm_rows)(&xkv, e, w_k, wk, lp->b_k, &k);
    NAME(gemm_rows)(&xkv, e, w_v, wv, lp->b_v, &v);
    sdpa_tensor q_view = sdpa_tensor_bthd(q.data, n, lp->hq, lp->tq, lp->dk);
    sdpa_tensor k_view = sdpa_tensor_bthd(k.data, n, lp->hkv, lp->tk, lp->dk);
    sdpa_tensor dq_view = sdpa_tensor_bthd(dq.data, n, lp->hq, lp->tq, lp->dk);
    sdpa_tensor dk_view = sdpa_tensor_bthd(dk.data, n, lp->hkv, lp->tk, lp->dk);
    const bool rope = lp->positions == SDPA_POS_ROPE_HALF ||
                      lp->positions == SDPA_POS_ROPE_INTERLEAVED;
    const int style = lp->positions == SDPA_POS_ROPE_HALF
                          ? SDPA_ROPE_HALF
                          : SDPA_ROPE_INTERLEAVED;
    const int64_t *pq = NULL, *pk = NULL, *nq = NULL, *nk = NULL;
    if (rope) {
        pq = lp->pos_q;
        if (lp->off_pq != SIZE_MAX)
            pq = sdpa_layer_fill_positions(s, lp->off_pq, n, lp->tq, lp->offset,
                                           1);
        nq = lp->pos_q ? negate_positions(s, lp->off_nq, n, lp->tq, lp->pos_q)
                       : sdpa_layer_fill_positions(s, lp->off_nq, n, lp->tq,
                                                   lp->offset, -1);
        if (lp->self) {
            pk = pq;
            nk = nq;
        } else {
            pk = lp->pos_kv;
            if (lp->off_pk != SIZE_MAX)
                pk = sdpa_layer_fill_positions(s, lp->off_pk, n, lp->tk,
                                               lp->offset, 1);
            nk = lp->pos_kv
                     ? negate_positions(s, lp->off_nk, n, lp->tk, lp->pos_kv)
                     : sdpa_layer_fill_positions(s, lp->off_nk, n, lp->tk,
                                                 lp->offset, -1);
        }
        (void)sdpa_rope_apply(lp->dtype, q_view, pq, style, lp->base, 0);
        (void)sdpa_rope_apply(lp->dtype, k_view, pk, style, lp->base, 0);
    }
    sdpa_forward_args f = lp->attn;
    f.q = q_view;
    f.k = k_view;
    f.v = sdpa_tensor_bthd(v.data, n, lp->hkv, lp->tk, lp->dv);
    f.out = sdpa_tensor_bthd(o.data, n, lp->hq, lp->tq, lp->dv);
    f.lse = sdpa_tensor_bhtd(s + lp->off_lse, n, lp->hq, lp->tq, 1);
    int status = sdpa_forward(ctx, &f);
    if (status != SDPA_OK)
        return sdpa_layer_attention_failed(ctx, WHO, status);

    /* dO = dy W_Oᵀ, then the attention's gradients */
    NAME(gemm_rows_nt)(&lp->dy, e, w_o, wo, &d_o, (T)0);
    sdpa_backward_args g = SDPA_BACKWARD_ARGS_INIT;
    g.dtype = lp->dtype;
    g.causal = f.causal;
    g.flags = f.flags;
    g.scale = f.scale;
    g.softcap = f.softcap;
    g.kv_lens = f.kv_lens;
    g.q = f.q;
    g.k = f.k;
    g.v = f.v;
    g.mask = f.mask;
    g.bias = f.bias;
    g.out = f.out;
    g.lse = f.lse;
    g.dout = sdpa_tensor_bthd(d_o.data, n, lp->hq, lp->tq, lp->dv);
    g.dq = dq_view;
    g.dk = dk_view;
    g.dv = sdpa_tensor_bthd(dv.data, n, lp->hkv, lp->tk, lp->dv);
    g.window_left = f.window_left;
    g.window_right = f.window_right;
    g.alibi_slopes = f.alibi_slopes;
    g.sinks = f.sinks;
    status = sdpa_backward(ctx, &g);
    if (status != SDPA_OK)
        return sdpa_layer_attention_failed(ctx, WHO, status);

    /* Nothing can fail from here on: the caller's outputs. */
    if (lp->dw_o)
        NAME(gemm_rows_tn)(&o, wo, &lp->dy, e, lp->dw_o);
    if (lp->db_o)
        NAME(col_sums)(&lp->dy, e, lp->db_o);
    if (rope) { /* the transpose of a rotation is the opposite rotation */
        (void)sdpa_rope_apply(lp->dtype, dq_view, nq, style, lp->base, 0);
        (void)sdpa_rope_apply(lp->dtype, dk_view, nk, style, lp->base, 0);
    }
    if (lp->dw_q)
        NAME(gemm_rows_tn)(&xq, e, &dq, wq, lp->dw_q);
    if (lp->dw_k)
        NAME(gemm_rows_tn)(&xkv, e, &dk, wk, lp->dw_k);
    if (lp->dw_v)
        NAME(gemm_rows_tn)(&xkv, e, &dv, wv, lp->dw_v);
    if (lp->db_q)
        NAME(col_sums)(&dq, wq, lp->db_q);
    if (lp->db_k)
        NAME(col_sums)(&dk, wk, lp->db_k);
    if (lp->db_v)
        NAME(col_sums)(&dv, wv, lp->db_v);
    if (lp->has_dx_q) {
        NAME(gemm_rows_nt)(&dq, wq, w_q, e, &lp->dx_q, (T)0);
        if (lp->self) {
            NAME(gemm_rows_nt)(&dk, wk, w_k, e, &lp->dx_q, (T)1);
            NAME(gemm_rows_nt)(&dv, wv, w_v, e, &lp->dx_q, (T)1);
        }
    }
    if (lp->has_dx_kv) {
        NAME(gemm_rows_nt)(&dk, wk, w_k, e, &lp->dx_kv, (T)0);
        NAME(gemm_rows_nt)(&dv, wv, w_v, e, &lp->dx_kv, (T)1);
    }
    return SDPA_OK;
}
