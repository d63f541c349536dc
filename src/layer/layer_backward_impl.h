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

/* Step 2 of the recomputed forward: Q, K, V as the forward computes them, and
 * RoPE on Q and K (the negated positions kept for the inverse rotation, w->nq,
 * w->nk). */
static void NAME(recompute_projections)(const layer_problem *p,
                                        const layer_bwd_plan *lp, char *s,
                                        layer_bwd_work *w)
{
    const int64_t n = p->n, e = p->e;
    NAME(gemm_rows)(&w->xq, e, p->w_q, w->wq, p->b_q, &w->q);
    NAME(gemm_rows)(&w->xkv, e, p->w_k, w->wk, p->b_k, &w->k);
    NAME(gemm_rows)(&w->xkv, e, p->w_v, w->wv, p->b_v, &w->v);
    if (!w->rope)
        return;
    const int64_t *pq, *pk, *nq, *nk;
    sdpa_layer_rope_positions(p, &lp->pos, s, &pq, &pk);
    nq = p->pos_q ? negate_positions(s, lp->pos.nq, n, p->tq, p->pos_q)
                  : sdpa_layer_fill_positions(s, lp->pos.nq, n, p->tq,
                                              p->offset, -1);
    if (p->self)
        nk = nq;
    else
        nk = p->pos_kv ? negate_positions(s, lp->pos.nk, n, p->tk, p->pos_kv)
                       : sdpa_layer_fill_positions(s, lp->pos.nk, n, p->tk,
                                                   p->offset, -1);
    (void)sdpa_rope_apply(p->dtype, w->q_view, pq, w->style, p->base, 0);
    (void)sdpa_rope_apply(p->dtype, w->k_view, pk, w->style, p->base, 0);
    w->nq = nq;
    w->nk = nk;
}

/* Steps 3 and 4: the attention with the lse output into O, dO = dy W_Oᵀ,
 * then the attention's gradients dQ, dK, dV. */
static int NAME(attention_gradients)(sdpa_ctx *ctx, const layer_bwd_problem *lb,
                                     const layer_bwd_plan *lp, char *s,
                                     const layer_bwd_work *w)
{
    const layer_problem *p = &lb->p;
    const int64_t n = p->n;
    sdpa_forward_args f = p->attn;
    f.q = w->q_view;
    f.k = w->k_view;
    f.v = sdpa_tensor_bthd(w->v.data, n, p->hkv, p->tk, p->dv);
    f.out = sdpa_tensor_bthd(w->o.data, n, p->hq, p->tq, p->dv);
    f.lse = sdpa_tensor_bhtd(s + lp->off_lse, n, p->hq, p->tq, 1);
    int status = sdpa_forward_call(ctx, &f);
    if (status != SDPA_OK)
        return sdpa_layer_attention_failed(ctx, WHO, status);

    NAME(gemm_rows_nt)(&lb->dy, p->e, p->w_o, w->wo, &w->d_o, (T)0);
    sdpa_backward_args g = SDPA_BACKWARD_ARGS_INIT;
    g.dtype = p->dtype;
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
    g.bias_dtype = f.bias_dtype;
    g.out = f.out;
    g.lse = f.lse;
    g.dout = sdpa_tensor_bthd(w->d_o.data, n, p->hq, p->tq, p->dv);
    g.dq = w->dq_view;
    g.dk = w->dk_view;
    g.dv = sdpa_tensor_bthd(w->dv.data, n, p->hkv, p->tk, p->dv);
    g.window_left = f.window_left;
    g.window_right = f.window_right;
    g.alibi_slopes = f.alibi_slopes;
    g.sinks = f.sinks;
    g.dropout_p = f.dropout_p;
    g.dropout_seed = f.dropout_seed;
    g.dropout_offset = f.dropout_offset;
    status = sdpa_backward_call(ctx, &g);
    if (status != SDPA_OK)
        return sdpa_layer_attention_failed(ctx, WHO, status);
    return SDPA_OK;
}

/* Step 5, the caller's outputs: the parameters' gradients (dQ and dK
 * rotated back first: the transpose of a rotation is the opposite one),
 * then the inputs'. */
static void NAME(write_gradients)(const layer_bwd_problem *lb,
                                  const layer_bwd_work *w)
{
    const layer_problem *p = &lb->p;
    const int64_t e = p->e, wq = w->wq, wk = w->wk, wv = w->wv, wo = w->wo;
    const T *w_q = p->w_q, *w_k = p->w_k, *w_v = p->w_v;
    if (lb->dw_o)
        NAME(gemm_rows_tn)(&w->o, wo, &lb->dy, e, lb->dw_o);
    if (lb->db_o)
        NAME(col_sums)(&lb->dy, e, lb->db_o);
    if (w->rope) {
        (void)sdpa_rope_apply(p->dtype, w->dq_view, w->nq, w->style, p->base,
                              0);
        (void)sdpa_rope_apply(p->dtype, w->dk_view, w->nk, w->style, p->base,
                              0);
    }
    if (lb->dw_q)
        NAME(gemm_rows_tn)(&w->xq, e, &w->dq, wq, lb->dw_q);
    if (lb->dw_k)
        NAME(gemm_rows_tn)(&w->xkv, e, &w->dk, wk, lb->dw_k);
    if (lb->dw_v)
        NAME(gemm_rows_tn)(&w->xkv, e, &w->dv, wv, lb->dw_v);
    if (lb->db_q)
        NAME(col_sums)(&w->dq, wq, lb->db_q);
    if (lb->db_k)
        NAME(col_sums)(&w->dk, wk, lb->db_k);
    if (lb->db_v)
        NAME(col_sums)(&w->dv, wv, lb->db_v);
    if (lb->has_dx_q) {
        NAME(gemm_rows_nt)(&w->dq, wq, w_q, e, &lb->dx_q, (T)0);
        if (p->self) {
            NAME(gemm_rows_nt)(&w->dk, wk, w_k, e, &lb->dx_q, (T)1);
            NAME(gemm_rows_nt)(&w->dv, wv, w_v, e, &lb->dx_q, (T)1);
        }
    }
    if (lb->has_dx_kv) {
        NAME(gemm_rows_nt)(&w->dk, wk, w_k, e, &lb->dx_kv, (T)0);
        NAME(gemm_rows_nt)(&w->dv, wv, w_v, e, &lb->dx_kv, (T)1);
    }
}

/* The whole pass on validated arguments and reserved scratch s. Returns
 * SDPA_OK or the status of the recomputed attention (forward or
 * backward), before anything of the caller's is written. */
static int NAME(layer_backward)(sdpa_ctx *ctx, const layer_bwd_problem *lb,
                                const layer_bwd_plan *lp, char *s)
{
    const layer_problem *p = &lb->p;
    layer_bwd_work w = layer_bwd_work_layout(p, lp, s);
    /* the forward, recomputed: X~ (step 1), Q, K, V and RoPE (2), the
     * attention with lse (3) */
    if (p->positions == SDPA_POS_SINUSOIDAL)
        NAME(add_positions)(p, &lp->pos, s, &w.xq, &w.xkv);
    NAME(recompute_projections)(p, lp, s, &w);
    int status = NAME(attention_gradients)(ctx, lb, lp, s, &w);
    if (status != SDPA_OK)
        return status;
    /* Nothing can fail from here on. */
    NAME(write_gradients)(lb, &w);
    return SDPA_OK;
}
