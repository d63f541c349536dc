/* The multi-head layer's dense steps for one dtype (T/SUF, GEMM), included
 * by layer.c and layer_backward.c through instantiate.h: the positional
 * table added to the inputs, and the four projections as gemms. */

/* C[b, t, :] = A[b, t, :] · W (+ bias) for b < n, t < len: A's rows are
 * k wide, C's cols wide, W is [k, cols] row-major. The rows of A and C are
 * strided matrices (m.s0 per batch item, m.s2 per token): one gemm over
 * all n · len rows when both are evenly spaced, else one per batch item. */
static void NAME(gemm_rows)(const layer_rows *a, int64_t k, const T *w,
                            int64_t cols, const T *bias, const layer_rows *c)
{
    int64_t items, m, lda, ldc;
    sdpa_layer_gemm_layout(a, k, c, cols, &items, &m, &lda, &ldc);
    for (int64_t b = 0; b < items; b++) {
        const T *x = (const T *)(const void *)a->data + b * a->s0;
        T *y = (T *)(void *)c->data + b * c->s0;
        if (bias)
            for (int64_t r = 0; r < m; r++)
                for (int64_t j = 0; j < cols; j++)
                    y[r * ldc + j] = ((const T *)bias)[j];
        GEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)cols,
             (int)k, (T)1, x, (int)lda, w, (int)cols, bias ? (T)1 : (T)0, y,
             (int)ldc);
    }
}

/* dst[b, t, :] = x[b, t, :] + the sinusoidal encoding of the row's
 * position (dst contiguous, len rows of e per item). With positions, each
 * row's encoding is computed on its own into row (e values); without, the
 * table of positions offset .. offset + len - 1 is computed once into
 * table (len · e values). */
static void NAME(add_sinusoidal)(const layer_rows *x, int64_t e,
                                 const int64_t *positions, int64_t offset,
                                 double base, T *table, T *dst)
{
    const int dtype = sizeof(T) == sizeof(float) ? SDPA_FLOAT32 : SDPA_FLOAT64;
    if (!positions)
        (void)sdpa_sinusoidal_table(dtype, x->len, e, offset, base, table);
    for (int64_t b = 0; b < x->n; b++)
        for (int64_t t = 0; t < x->len; t++) {
            const T *p = table + t * e;
            if (positions) {
                (void)sdpa_sinusoidal_table(
                    dtype, 1, e, positions[b * x->len + t], base, table);
                p = table;
            }
            const T *src =
                (const T *)(const void *)x->data + b * x->s0 + t * x->s2;
            T *out = dst + (b * x->len + t) * e;
            for (int64_t j = 0; j < e; j++)
                out[j] = src[j] + p[j];
        }
}

/* X~ = X + the sinusoidal table, into the scratch regions o->table, o->xq
 * and o->xkv: *xq and *xkv (x_q's and x_kv's rows on entry) become those
 * copies (one in self-attention). */
static void NAME(add_positions)(const layer_problem *p,
                                const layer_pos_offsets *o, char *s,
                                layer_rows *xq, layer_rows *xkv)
{
    T *table = (T *)(void *)(s + o->table);
    layer_rows sq = sdpa_layer_scratch_rows(s, o->xq, p->n, p->tq, p->e);
    NAME(add_sinusoidal)
    (xq, p->e, p->pos_q, p->offset, p->base, table, (T *)(void *)sq.data);
    *xq = sq;
    if (p->self) {
        *xkv = sq;
        return;
    }
    layer_rows sk = sdpa_layer_scratch_rows(s, o->xkv, p->n, p->tk, p->e);
    NAME(add_sinusoidal)
    (xkv, p->e, p->pos_kv, p->offset, p->base, table, (T *)(void *)sk.data);
    *xkv = sk;
}
