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
 * The backward's bound: the five gemms a materialised backward needs, per
 * (b, h) and query block of `rows` rows, on two score blocks of the same
 * size (S and dP; a materialised backward holds both for dS = P ∘ (dP − D),
 * the elementwise step left out here):
 *   S = Q_blk · Kᵀ          (rows, Dk) @ (Dk, Tk) -> (rows, Tk)
 *   dP = dO_blk · Vᵀ        (rows, Dv) @ (Dv, Tk) -> (rows, Tk)
 *   dV += Sᵀ · dO_blk       (Tk, rows) @ (rows, Dv) -> (Tk, Dv)
 *   dQ_blk = dP · K         (rows, Tk) @ (Tk, Dk) -> (rows, Dk)
 *   dK += dPᵀ · Q_blk       (Tk, rows) @ (rows, Dk) -> (Tk, Dk)
 * dK and dV belong to KV head h / g and sum over the query blocks and the
 * group's heads (beta 1 after the first contribution, so repeated runs do
 * not grow the values). Full Tk and full square, as bare_.
 */
static void BFN(bare_backward_)(const bench_data *d, const void *dout, void *dq,
                                void *dk, void *dv, bench_baseline *bl,
                                bench_baseline *bl_dp)
{
    const bench_shape *s = d->shape;
    const int64_t g = s->hq / s->hkv;
    BT *sc = (BT *)bl->s, *dp = (BT *)bl_dp->s;
    for (int64_t b = 0; b < s->n; b++)
        for (int64_t h = 0; h < s->hq; h++)
            for (int64_t r0 = 0; r0 < s->tq; r0 += bl->row_block) {
                int64_t rows =
                    s->tq - r0 < bl->row_block ? s->tq - r0 : bl->row_block;
                const BT beta = h % g == 0 && r0 == 0 ? (BT)0 : (BT)1;
                const BT *q =
                    BFN(row_ptr_)(d->q, b, h, r0, s->hq, s->tq, s->dk);
                const BT *k =
                    BFN(row_ptr_)(d->k, b, h / g, 0, s->hkv, s->tk, s->dk);
                const BT *v =
                    BFN(row_ptr_)(d->v, b, h / g, 0, s->hkv, s->tk, s->dv);
                const BT *go =
                    (const BT *)dout + ((b * s->hq + h) * s->tq + r0) * s->dv;
                BT *gq = BFN(row_ptr_)(dq, b, h, r0, s->hq, s->tq, s->dk);
                BT *gk = BFN(row_ptr_)(dk, b, h / g, 0, s->hkv, s->tk, s->dk);
                BT *gv = BFN(row_ptr_)(dv, b, h / g, 0, s->hkv, s->tk, s->dv);
                BGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows),
                      blas_int(s->tk), blas_int(s->dk), (BT)1, q,
                      blas_int(s->dk), k, blas_int(s->dk), (BT)0, sc,
                      blas_int(s->tk));
                BGEMM(CblasRowMajor, CblasNoTrans, CblasTrans, blas_int(rows),
                      blas_int(s->tk), blas_int(s->dv), (BT)1, go,
                      blas_int(s->dv), v, blas_int(s->dv), (BT)0, dp,
                      blas_int(s->tk));
                BGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(s->tk),
                      blas_int(s->dv), blas_int(rows), (BT)1, sc,
                      blas_int(s->tk), go, blas_int(s->dv), beta, gv,
                      blas_int(s->dv));
                BGEMM(CblasRowMajor, CblasNoTrans, CblasNoTrans, blas_int(rows),
                      blas_int(s->dk), blas_int(s->tk), (BT)1, dp,
                      blas_int(s->tk), k, blas_int(s->dk), (BT)0, gq,
                      blas_int(s->dk));
                BGEMM(CblasRowMajor, CblasTrans, CblasNoTrans, blas_int(s->tk),
                      blas_int(s->dk), blas_int(rows), (BT)1, dp,
                      blas_int(s->tk), q, blas_int(s->dk), beta, gk,
                      blas_int(s->dk));
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
/* Dropout as include/sdpa.h defines it, on row i's weights row[0, w)
 * (keys k0 .. k0 + w − 1) of batch item b, head h. */
static void BFN(drop_)(const bench_shape *s, int64_t b, int64_t h, int64_t i,
                       int64_t k0, BT *row, int64_t w)
{
    const uint64_t seed = BENCH_DROPOUT_SEED;
    const uint64_t stream = BENCH_DROPOUT_OFFSET + (uint64_t)(b * s->hq + h);
    const sdpa_dropout_row d = {{(uint32_t)seed, (uint32_t)(seed >> 32)},
                                (uint32_t)i,
                                {(uint32_t)stream, (uint32_t)(stream >> 32)},
                                (uint32_t)ldexp(s->dropout_p, 32)};
    const BT c = (BT)1 / ((BT)1 - (BT)s->dropout_p);
    uint32_t words[4];
    for (int64_t j = 0; j < w; j++) {
        const int64_t key = k0 + j;
        if (j == 0 || key % 4 == 0)
            sdpa_dropout_block(&d, (uint32_t)(key / 4), words);
        row[j] = words[key % 4] >= d.threshold ? row[j] * c : (BT)0;
    }
}

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
                    if (s->dropout_p > 0)
                        BFN(drop_)(s, b, h, r0 + i, k0, row, w);
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
