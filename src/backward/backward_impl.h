/* The backward pass for one dtype (T/SUF, GEMM = cblas_?gemm); see
 * backward.c for the scheme. One work item is a key block (or all of
 * them) of a set of (batch item, KV head) pairs (sdpa_bwd_plan: one pair
 * unless a broadcast makes their outputs shared); every query tile of
 * every head of the group runs through NAME(backward_tile) against it. */
#include "paths/row_terms_impl.h"

/* Copies a key block's accumulated gradient (bk rows of d values, packed)
 * into rows kb.. of a dk or dv view of storage type `type` (rounded once
 * when it is a half type), and zeroes the accumulator. */
static void NAME(store_block)(const sdpa_view *view, int type,
                              const NAME(sdpa_row_kernels) * rk, int64_t b,
                              int64_t hk, int64_t kb, int64_t bk, int64_t d,
                              T *acc)
{
    const size_t es = sdpa_dtype_size(type);
    for (int64_t j = 0; j < bk; j++) {
        char *dst = sdpa_at(view, es, b, hk, kb + j);
        rk->narrow(acc + j * d, type, dst, d);
        for (int64_t c = 0; c < d; c++)
            acc[j * d + c] = 0;
    }
}

/* One tile's rows, keys and operands, as the steps of backward_tile
 * share them. */
typedef struct NAME(bwd_tile) {
    int64_t b, h, hk, i0, rows, kb, bk;
    int64_t a0, m;          /* the active rows [a0, a0 + m) of the tile */
    int64_t klo, nk;        /* the union of their keys [klo, klo + nk) */
    int64_t *start, *limit; /* each row's keys within the block */
    uint8_t *live;          /* which of the nk keys some row may see */
    int64_t live_count;
    T *s, *dp, *dvec, *dk_acc, *dv_acc, *dq;
    const T *q, *dout, *k, *v;
    int64_t q_ld, do_ld, dq_ld, k_ld, v_ld, ld;
} NAME(bwd_tile);

/* Each row's keys within the block, the tile's active rows and the union
 * of their keys, then the live ones among those; false when no row of the
 * tile sees a key of the block. */
static inline bool NAME(tile_keys)(const sdpa_bwd_problem *bp,
                                   const sdpa_bwd_plan *pl, char *scratch,
                                   NAME(bwd_tile) * t)
{
    const sdpa_problem *p = &bp->p;
    const int64_t b = t->b, i0 = t->i0, kb = t->kb, bk = t->bk;
    int64_t *start = (int64_t *)(void *)(scratch + pl->off_range);
    int64_t *limit = start + pl->block_q;
    int64_t a0 = -1, a1 = 0, klo = kb + bk, khi = kb;
    for (int64_t r = 0; r < t->rows; r++) {
        int64_t s0 = sdpa_key_start(p, b, i0 + r);
        int64_t l0 = sdpa_key_limit(p, b, i0 + r);
        start[r] = s0 > kb ? s0 : kb;
        limit[r] = l0 < kb + bk ? l0 : kb + bk;
        if (start[r] >= limit[r])
            continue;
        if (a0 < 0)
            a0 = r;
        a1 = r + 1;
        klo = start[r] < klo ? start[r] : klo;
        khi = limit[r] > khi ? limit[r] : khi;
    }
    if (a0 < 0)
        return false;
    t->start = start;
    t->limit = limit;
    t->a0 = a0;
    t->m = a1 - a0;
    t->klo = klo;
    t->nk = khi - klo;
    t->live = (uint8_t *)(scratch + pl->off_live);
    t->live_count = t->nk;
    if (p->mask.data || p->bias.data) {
        sdpa_row_block blk = {.batch = b,
                              .head_kv = t->hk,
                              .head_first = t->h,
                              .heads = 1,
                              .row_first = i0 + a0,
                              .rows = t->m,
                              .key_begin = klo,
                              .key_end = khi};
        t->live_count = sdpa_live_keys(p, &blk, klo, t->nk, t->live);
        if (t->live_count == 0)
            return false;
    }
    return true;
}

/* Rows [row, row + m) of head h of a [N, H, T, d] view of storage type
 * `type` as T rows the BLAS reads: the caller's own, or widened into dst
 * (d values a row). */
static inline const T *NAME(blas_rows)(const sdpa_view *view, int type,
                                       const NAME(sdpa_row_kernels) * rk,
                                       int64_t b, int64_t h, int64_t row,
                                       int64_t m, int64_t d, T *dst,
                                       int64_t *ld)
{
    if (type == SDPA_DTYPE_OF_T) {
        *ld = sdpa_row_stride(view, d);
        return AT(view, b, h, row);
    }
    const size_t es = sdpa_dtype_size(type);
    for (int64_t r = 0; r < m; r++)
        rk->widen(sdpa_at(view, es, b, h, row + r), type, dst + r * d, d);
    *ld = d;
    return dst;
}

/* The scratch regions and the operands' rows of the tile's active rows
 * and keys, widened where they are stored in another type (K and V only
 * on the live runs: the rows no row sees are never read). */
static inline void NAME(tile_operands)(const sdpa_bwd_problem *bp,
                                       const sdpa_bwd_plan *pl,
                                       const NAME(sdpa_row_kernels) * rk,
                                       char *scratch, NAME(bwd_tile) * t)
{
    const sdpa_problem *p = &bp->p;
    const int64_t dk = p->dim_k, dv = p->dim_v;
    const int64_t b = t->b, h = t->h, hk = t->hk, row = t->i0 + t->a0;
    t->ld = pl->score_ld;
    t->s = (T *)(void *)(scratch + pl->off_s);
    t->dp = (T *)(void *)(scratch + pl->off_dp);
    t->dvec = (T *)(void *)(scratch + pl->off_d);
    t->dk_acc = (T *)(void *)(scratch + pl->off_dk) + (t->klo - t->kb) * dk;
    t->dv_acc = (T *)(void *)(scratch + pl->off_dv) + (t->klo - t->kb) * dv;
    t->q = NAME(blas_rows)(&p->q, p->q_type, rk, b, h, row, t->m, dk,
                           (T *)(void *)(scratch + pl->off_q), &t->q_ld);
    t->dout = NAME(blas_rows)(&bp->dout, bp->dout_type, rk, b, h, row, t->m, dv,
                              (T *)(void *)(scratch + pl->off_do), &t->do_ld);
    t->dq = AT(&pl->dq_sum, b, h, row);
    t->dq_ld = sdpa_row_stride(&pl->dq_sum, dk);
    if (!sdpa_kv_staged(p)) {
        t->k = AT(&p->k, b, hk, t->klo);
        t->v = AT(&p->v, b, hk, t->klo);
        t->k_ld = sdpa_row_stride(&p->k, dk);
        t->v_ld = sdpa_row_stride(&p->v, dv);
        return;
    }
    T *k = (T *)(void *)(scratch + pl->off_k);
    T *v = (T *)(void *)(scratch + pl->off_v);
    for (int64_t j0 = 0, j1 = 0;
         sdpa_live_run(t->live, t->live_count, t->nk, &j0, &j1); j0 = j1) {
        NAME(stage_kv_rows)
        (p, &p->k, dk, b, hk, t->klo + j0, j1 - j0, k + j0 * dk, rk);
        NAME(stage_kv_rows)
        (p, &p->v, dv, b, hk, t->klo + j0, j1 - j0, v + j0 * dv, rk);
    }
    t->k = k;
    t->v = v;
    t->k_ld = dk;
    t->v_ld = dv;
}

/* S = scale · Q Kᵀ and dP = dO Vᵀ over the live runs. */
static inline void NAME(tile_scores)(const sdpa_problem *p,
                                     const NAME(bwd_tile) * t)
{
    const int64_t dk = p->dim_k, dv = p->dim_v, ld = t->ld, nk = t->nk;
    const T scale = (T)p->scale;
    T *s = t->s, *dp = t->dp;
    for (int64_t j0 = 0, j1 = 0;
         sdpa_live_run(t->live, t->live_count, nk, &j0, &j1); j0 = j1) {
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t->m, (int)(j1 - j0),
             (int)dk, scale, t->q, (int)t->q_ld, t->k + j0 * t->k_ld,
             (int)t->k_ld, (T)0, s + j0, (int)ld);
        GEMM(CblasRowMajor, CblasNoTrans, CblasTrans, (int)t->m, (int)(j1 - j0),
             (int)dv, (T)1, t->dout, (int)t->do_ld, t->v + j0 * t->v_ld,
             (int)t->v_ld, (T)0, dp + j0, (int)ld);
    }
    /* Dead keys' columns were not computed: any finite value does (they
     * are forbidden in every row, so P is 0 there). */
    if (t->live_count < nk)
        for (int64_t r = 0; r < t->m; r++)
            for (int64_t j = 0; j < nk; j++)
                if (!t->live[j])
                    s[r * ld + j] = dp[r * ld + j] = 0;
}

/* Row r of the tile's active rows: D_i = <dO_i, O_i>, P from S and the
 * forward's lse (soft-cap, ALiBi, bias and mask as in the forward), then
 * dS = P ∘ (dP − D) in dP's place (dbias += dS with BWD_KV), ∘ the
 * soft-cap's derivative; P and dS are 0 outside the row's keys.
 * SDPA_ERR_NONFINITE (with *where) for a NaN or infinite logit, or a bad
 * lse. */
static inline int NAME(tile_row)(const sdpa_bwd_problem *bp,
                                 const sdpa_bwd_plan *pl,
                                 const NAME(sdpa_row_kernels) * rk,
                                 char *scratch, const NAME(bwd_tile) * t,
                                 int64_t r, unsigned parts, sdpa_where *where)
{
    const sdpa_problem *p = &bp->p;
    const int64_t b = t->b, h = t->h, klo = t->klo, nk = t->nk;
    const int64_t i = t->i0 + t->a0 + r, dv = p->dim_v;
    const T cap = (T)p->softcap;
    T *capped = (T *)(void *)(scratch + pl->off_t);
    const T *do_row = t->dout + r * t->do_ld;
    T d_i = 0;
    if (p->out_type == SDPA_DTYPE_OF_T) {
        const T *o_row = AT(&p->out, b, h, i);
        for (int64_t c = 0; c < dv; c++)
            d_i += do_row[c] * o_row[c];
    } else { /* out widened exactly, in the same order */
        const char *o_row =
            sdpa_at(&p->out, sdpa_dtype_size(p->out_type), b, h, i);
        for (int64_t c = 0; c < dv; c++)
            d_i += do_row[c] * (T)sdpa_value_at(o_row, p->out_type, c);
    }
    t->dvec[r] = d_i;

    T *x = t->s + r * t->ld, *g = t->dp + r * t->ld;
    const int64_t row_start = t->start[t->a0 + r];
    const int64_t row_limit = t->limit[t->a0 + r];
    int64_t lo = row_start - klo;
    int64_t len = row_limit > row_start ? row_limit - row_start : 0;
    if (len == 0)
        lo = 0;
    const T lse = *AT(&p->lse, b, h, i);
    T *xr = x + lo;
    if (lse != lse || lse == (T)INFINITY) {
        *where = (sdpa_where){b, h, i};
        return SDPA_ERR_NONFINITE;
    }
    if (len > 0) {
        if (cap > 0) {
            rk->softcap(xr, len, cap);
            for (int64_t j = 0; j < len; j++)
                capped[j] = xr[j] / cap;
        }
        if (p->alibi_slopes)
            NAME(add_alibi)
        (xr, len, (T)p->alibi_slopes[h], klo + lo - sdpa_diagonal(p, b, i));
        const T *bias =
            p->bias.data ? sdpa_bias_keys(p, b, h, i, klo + lo, len,
                                          (T *)(void *)(scratch + pl->off_bias))
                         : NULL;
        const uint8_t *mask =
            p->mask.data ? sdpa_mask_keys(p, b, h, i, klo + lo, len,
                                          (uint8_t *)(scratch + pl->off_mask))
                         : NULL;
        T mx = rk->mask_max(xr, len, bias, mask, p->mask_nonzero_allows);
        if (mx != mx || mx == (T)INFINITY ||
            (lse == (T)-INFINITY && mx != (T)-INFINITY)) {
            *where = (sdpa_where){b, h, i};
            return SDPA_ERR_NONFINITE;
        }
        if (lse == (T)-INFINITY) /* an empty row: no gradient */
            len = 0;
        else
            (void)rk->exp_sum(xr, len, lse);
    }
    /* P is 0 outside the row's keys; dS = P ∘ (dP − D) there. */
    for (int64_t j = 0; j < lo; j++)
        x[j] = g[j] = 0;
    for (int64_t j = lo + len; j < nk; j++)
        x[j] = g[j] = 0;
    T *gr = g + lo;
    if (p->dropout && len > 0) {
        /* dS = P ∘ (Z̃ ∘ dP − D) and P ∘ Z̃ for dV, Z̃ = Z/(1 − p) drawn
         * again as the forward drew it */
        const sdpa_dropout_row d = sdpa_dropout_row_at(p, b, h, i);
        rk->dropout(xr, len, &d, klo + lo, NAME(dropout_scale)(p), gr, d_i);
        if (bp->dbias.data && (parts & BWD_KV)) {
            T *db = AT(&bp->dbias, b, h, i);
            const int64_t step = bp->dbias.stride[3];
            for (int64_t j = 0; j < len; j++)
                if (gr[j] != 0)
                    db[(klo + lo + j) * step] += gr[j];
        }
    } else if (bp->dbias.data && (parts & BWD_KV)) {
        T *db = AT(&bp->dbias, b, h, i);
        const int64_t step = bp->dbias.stride[3];
        for (int64_t j = 0; j < len; j++) {
            T dz = xr[j] * (gr[j] - d_i);
            gr[j] = dz;
            if (xr[j] != 0)
                db[(klo + lo + j) * step] += dz;
        }
    } else {
        for (int64_t j = 0; j < len; j++)
            gr[j] = xr[j] * (gr[j] - d_i);
    }
    if (cap > 0)
        for (int64_t j = 0; j < len; j++)
            gr[j] *= (1 - capped[j]) * (1 + capped[j]);
    return SDPA_OK;
}

/* dV_blk += Pᵀ dO and dK_blk += scale · dSᵀ Q (BWD_KV), dQ += scale ·
 * dS K_blk (BWD_Q), over the live runs. */
static inline void NAME(tile_products)(const sdpa_problem *p,
                                       const NAME(bwd_tile) * t, unsigned parts)
{
    const int64_t dk = p->dim_k, dv = p->dim_v, ld = t->ld;
    const T scale = (T)p->scale;
    for (int64_t j0 = 0, j1 = 0;
         sdpa_live_run(t->live, t->live_count, t->nk, &j0, &j1); j0 = j1) {
        const int n = (int)(j1 - j0);
        if (parts & BWD_KV) {
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, n, (int)dv, (int)t->m,
                 (T)1, t->s + j0, (int)ld, t->dout, (int)t->do_ld, (T)1,
                 t->dv_acc + j0 * dv, (int)dv);
            GEMM(CblasRowMajor, CblasTrans, CblasNoTrans, n, (int)dk, (int)t->m,
                 scale, t->dp + j0, (int)ld, t->q, (int)t->q_ld, (T)1,
                 t->dk_acc + j0 * dk, (int)dk);
        }
        if (parts & BWD_Q)
            GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)t->m, (int)dk,
                 n, scale, t->dp + j0, (int)ld, t->k + j0 * t->k_ld,
                 (int)t->k_ld, (T)1, t->dq, (int)t->dq_ld);
    }
}

/* Whether query tile i0 of batch item b sees key block [kb, kb + bk) at
 * all: the tiles whose rows all end before the block or start after it
 * are skipped. */
static bool NAME(tile_sees)(const sdpa_problem *p, int64_t b, int64_t i0,
                            int64_t rows, int64_t kb, int64_t bk)
{
    return sdpa_key_limit(p, b, i0 + rows - 1) > kb &&
           sdpa_key_start(p, b, i0) < kb + bk;
}

/* One query tile (rows i0 .. i0 + rows - 1 of head h) against the key block
 * [kb, kb + bk) of KV head hk, block number kbi: recompute S and P, then
 *   dV_blk += Pᵀ dO,  dP = dO V_blkᵀ,  dS = P ∘ (dP − D) (∘ the soft-cap's
 *   derivative),  dK_blk += scale · dSᵀ Q,
 * every product over the runs of live keys only (keys no row of the tile
 * may see are never read); then, on the tile's turn (dq_order.h),
 * dQ += scale · dS K_blk (block 0 first zeroes the tile's dq rows). When
 * the tile does not see the block, or after an error (*status not
 * SDPA_OK), it only takes and hands on the turn: the blocks after it
 * must not wait for it forever.
 * The first failure is kept in *status and *where. */
static void NAME(backward_tile)(const sdpa_bwd_problem *bp,
                                const sdpa_bwd_plan *pl,
                                const NAME(sdpa_row_kernels) * rk,
                                char *scratch, int64_t b, int64_t h, int64_t hk,
                                int64_t i0, int64_t rows, int64_t kbi,
                                int64_t bk, int *status, sdpa_where *where)
{
    const int64_t kb = kbi * pl->block_k;
    NAME(bwd_tile)
    t = {.b = b, .h = h, .hk = hk, .i0 = i0, .rows = rows, .kb = kb, .bk = bk};
    bool active = *status == SDPA_OK &&
                  NAME(tile_sees)(&bp->p, b, i0, rows, kb, bk) &&
                  NAME(tile_keys)(bp, pl, scratch, &t);
    if (active) {
        NAME(tile_operands)(bp, pl, rk, scratch, &t);
        NAME(tile_scores)(&bp->p, &t);
        for (int64_t r = 0; r < t.m && *status == SDPA_OK; r++)
            *status = NAME(tile_row)(bp, pl, rk, scratch, &t, r, BWD_KV | BWD_Q,
                                     where);
        active = *status == SDPA_OK;
        if (active)
            NAME(tile_products)(&bp->p, &t, BWD_KV);
    }
    atomic_llong *turn = &pl->turns[(b * bp->p.heads_q + h) * pl->query_tiles +
                                    i0 / pl->block_q];
    const int64_t dk = bp->p.dim_k;
    sdpa_dq_wait(turn, kbi);
    if (kbi == 0)
        for (int64_t i = i0; i < i0 + rows; i++) {
            T *row = AT(&pl->dq_sum, b, h, i);
            for (int64_t c = 0; c < dk; c++)
                row[c] = 0;
        }
    if (active)
        NAME(tile_products)(&bp->p, &t, BWD_Q);
    if (pl->dq_bytes && kbi == pl->key_blocks - 1) /* a half dq, summed */
        for (int64_t i = i0; i < i0 + rows; i++)
            rk->narrow(AT(&pl->dq_sum, b, h, i), bp->dq_type,
                       sdpa_at(&bp->dq, sdpa_dtype_size(bp->dq_type), b, h, i),
                       dk);
    sdpa_dq_pass(turn, kbi);
}

/* Work item (set · blocks per set + chunk): key blocks [chunk ·
 * item_blocks, + item_blocks) of the set's (batch item, KV head) pairs
 * (plan.c). For each block, dK and dV accumulate in scratch over every
 * query tile of every head of the group (and, with k or v broadcast over
 * N, every batch item: the batch loop runs inside the key loop), then are
 * stored; each tile adds its dQ on its turn. */
static int NAME(backward_item)(const sdpa_problem *problem,
                               const sdpa_plan *plan, int kernel, void *scratch,
                               int64_t item, sdpa_where *where)
{
    const sdpa_bwd_problem *bp =
        (const sdpa_bwd_problem *)(const void *)problem;
    const sdpa_bwd_plan *pl = (const sdpa_bwd_plan *)(const void *)plan;
    const sdpa_problem *p = &bp->p;
    const NAME(sdpa_row_kernels) *rk = NAME(sdpa_row_kernels_select)(kernel);
    const int64_t chunks = pl->key_blocks / pl->item_blocks;
    const int64_t set = item / chunks;
    const int64_t kb_first = item % chunks * pl->item_blocks;
    const int64_t head_sets = p->heads_kv / pl->item_heads;
    const int64_t hk0 = set % head_sets * pl->item_heads;
    const int64_t b0 = set / head_sets * pl->item_batches;
    const int64_t dk = p->dim_k, dv = p->dim_v;
    T *dk_acc = (T *)(void *)((char *)scratch + pl->off_dk);
    T *dv_acc = (T *)(void *)((char *)scratch + pl->off_dv);

    const bool shared = bp->k_bcast || bp->v_bcast;
    const int64_t outer = shared ? 1 : pl->item_batches;
    const int64_t inner = shared ? pl->item_batches : 1;
    int status = SDPA_OK;
    for (int64_t hk = hk0; hk < hk0 + pl->item_heads; hk++)
        for (int64_t bo = 0; bo < outer; bo++)
            for (int64_t kbi = kb_first; kbi < kb_first + pl->item_blocks;
                 kbi++) {
                const int64_t kb = kbi * pl->block_k;
                const int64_t left = p->len_k - kb;
                const int64_t bk = left < pl->block_k ? left : pl->block_k;
                for (int64_t x = 0; x < bk * dk; x++)
                    dk_acc[x] = 0;
                for (int64_t x = 0; x < bk * dv; x++)
                    dv_acc[x] = 0;
                for (int64_t bi = 0; bi < inner; bi++) {
                    int64_t b = b0 + bo + bi;
                    for (int64_t h = hk * p->group; h < (hk + 1) * p->group;
                         h++)
                        for (int64_t i0 = 0; i0 < p->len_q; i0 += pl->block_q) {
                            const int64_t rows = p->len_q - i0 < pl->block_q
                                                     ? p->len_q - i0
                                                     : pl->block_q;
                            NAME(backward_tile)
                            (bp, pl, rk, scratch, b, h, hk, i0, rows, kbi, bk,
                             &status, where);
                        }
                    if (shared && !bp->k_bcast)
                        NAME(store_block)
                    (&bp->dk, bp->dkv_type, rk, b, hk, kb, bk, dk, dk_acc);
                    if (shared && !bp->v_bcast)
                        NAME(store_block)
                    (&bp->dv, bp->dkv_type, rk, b, hk, kb, bk, dv, dv_acc);
                }
                int64_t b = b0 + bo; /* the item's batch (0 when shared) */
                if (!shared || bp->k_bcast)
                    NAME(store_block)
                (&bp->dk, bp->dkv_type, rk, b, hk, kb, bk, dk, dk_acc);
                if (!shared || bp->v_bcast)
                    NAME(store_block)
                (&bp->dv, bp->dkv_type, rk, b, hk, kb, bk, dv, dv_acc);
            }
    return status;
}
