/*
 * Type-generic body of the two baselines, instantiated twice by baseline.c.
 * Before including, define:
 *   BT     the element type (float / double)
 *   BSUF   the name suffix (f / d)
 *   BGEMM  cblas_sgemm / cblas_dgemm
 *   BEXP   expf / exp
 * Everything is undefined again at the end of this file.
 */
#define BCAT2_(a, b) a##b
#define BCAT2(a, b) BCAT2_(a, b)
#define BFN(name) BCAT2(name, BSUF)

/* Pointer to row t of head h of batch item b in a contiguous [N,H,T,D]. */
static BT *BFN(row_ptr_)(void *base, int64_t b, int64_t h, int64_t t,
                         int64_t nh, int64_t nt, int64_t dim)
{
    return (BT *)base + ((b * nh + h) * nt + t) * dim;
}

/*
 * The bound. Per (b, h) and query block of `rows` rows:
 *   S = Q_blk · Kᵀ     (rows, Dk) @ (Dk, Tk) -> (rows, Tk)
 *   O_blk = S · V      (rows, Tk) @ (Tk, Dv) -> (rows, Dv)
 * over the full Tk and the full square, whatever kv_lens and causal say.
 */
static void BFN(bare_)(const bench_data *d, bench_baseline *bl)
{
    const bench_shape *s = d->shape;
    const int64_t g = s->hq / s->hkv;
    BT *sc = (BT *)bl->s;
    for (int64_t b = 0; b < s->n; b++)
        for (int64_t h = 0; h < s->hq; h++)
            for (int64_t r0 = 0; r0 < s->tq; r0 += bl->row_block) {
                int64_t rows =
                    s->tq - r0 < bl->row_block ? s->tq - r0 : bl->row_block;
                const BT *q =
                    BFN(row_ptr_)(d->q, b, h, r0, s->hq, s->tq, s->dk);
                const BT *k =
                    BFN(row_ptr_)(d->k, b, h / g, 0, s->hkv, s->tk, s->dk);
                const BT *v =
                    BFN(row_ptr_)(d->v, b, h / g, 0, s->hkv, s->tk, s->dv);
                BT *o =
                    BFN(row_ptr_)(d->out_bare, b, h, r0, s->hq, s->tq, s->dv);
                BGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows),
                      blas_int(s->tk), blas_int(s->dk), (BT)1, q,
                      blas_int(s->dk), k, blas_int(s->dk), (BT)0, sc,
                      blas_int(s->tk));
                BGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(rows),
                      blas_int(s->dv), blas_int(s->tk), (BT)1, sc,
                      blas_int(s->tk), v, blas_int(s->dv), (BT)0, o,
                      blas_int(s->dv));
            }
}

/*
 * The naive program. Per (b, h) and query block, with L = kv_len(b):
 *   S = scale · Q_blk · K[k0:k1]ᵀ               (rows, k1 - k0)
 *   forbidden s_ij := -inf (j outside row i's allowed keys)
 *   p_ij = exp(s_ij - max_j s_ij) / Σ_j exp(..)  one scalar exp per entry
 *   O_blk = P · V[k0:k1]                        (rows, Dv)
 * [k0, k1) is [0, L) for shapes without a window (causal or not); for
 * windowed shapes the keys the block's rows may see (a band).
 */
static int BFN(naive_)(const bench_data *d, bench_baseline *bl)
{
    const bench_shape *s = d->shape;
    const int64_t g = s->hq / s->hkv;
    const BT scale = (BT)(1.0 / sqrt((double)s->dk));
    BT *sc = (BT *)bl->s;
    for (int64_t b = 0; b < s->n; b++) {
        const int64_t len = bench_shape_kv_len(s, b);
        for (int64_t h = 0; h < s->hq; h++)
            for (int64_t r0 = 0; r0 < s->tq; r0 += bl->row_block) {
                int64_t rows =
                    s->tq - r0 < bl->row_block ? s->tq - r0 : bl->row_block;
                int64_t k0 = 0, k1 = len, unused;
                if (s->window) { /* starts and limits grow with the row */
                    bench_shape_allowed(s, b, r0, &k0, &unused);
                    bench_shape_allowed(s, b, r0 + rows - 1, &unused, &k1);
                    if (k1 <= k0)
                        return -1; /* the whole block is masked */
                }
                const int64_t w = k1 - k0;
                const BT *q =
                    BFN(row_ptr_)(d->q, b, h, r0, s->hq, s->tq, s->dk);
                const BT *k =
                    BFN(row_ptr_)(d->k, b, h / g, k0, s->hkv, s->tk, s->dk);
                const BT *v =
                    BFN(row_ptr_)(d->v, b, h / g, k0, s->hkv, s->tk, s->dv);
                BT *o =
                    BFN(row_ptr_)(d->out_ref, b, h, r0, s->hq, s->tq, s->dv);
                BGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows),
                      blas_int(w), blas_int(s->dk), scale, q, blas_int(s->dk),
                      k, blas_int(s->dk), (BT)0, sc, blas_int(w));
                for (int64_t i = 0; i < rows; i++) {
                    BT *row = sc + i * w;
                    int64_t lo = 0, allowed = allowed_keys(s, r0 + i, len);
                    if (s->window) {
                        bench_shape_allowed(s, b, r0 + i, &lo, &allowed);
                        lo -= k0;
                        allowed -= k0;
                    }
                    for (int64_t j = 0; j < lo && j < w; j++)
                        row[j] = (BT)-INFINITY;
                    for (int64_t j = allowed < 0 ? 0 : allowed; j < w; j++)
                        row[j] = (BT)-INFINITY;
                    BT m = (BT)-INFINITY;
                    for (int64_t j = 0; j < w; j++)
                        m = row[j] > m ? row[j] : m;
                    if (m == (BT)-INFINITY)
                        return -1; /* fully masked row */
                    BT sum = 0;
                    for (int64_t j = 0; j < w; j++) {
                        row[j] = BEXP(row[j] - m);
                        sum += row[j];
                    }
                    for (int64_t j = 0; j < w; j++)
                        row[j] /= sum;
                }
                BGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(rows),
                      blas_int(s->dv), blas_int(w), (BT)1, sc, blas_int(w), v,
                      blas_int(s->dv), (BT)0, o, blas_int(s->dv));
            }
    }
    return 0;
}

#undef BFN
#undef BCAT2
#undef BCAT2_
#undef BT
#undef BSUF
#undef BGEMM
#undef BEXP
