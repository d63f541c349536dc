/* The decode path's two phases for one dtype; see path_decode.c. */

/* Partial results of chunk c of (b, KV head): rows × (Dv + 3) values,
 * O then m, ℓ and the entropy's sum e (0 without diagnostics) per stacked
 * row. */
static T *NAME(partial)(const sdpa_problem *p, const sdpa_plan *plan,
                        int64_t group_item, int64_t chunk)
{
    size_t per_row = (size_t)p->dim_v + 3;
    size_t index = (size_t)(group_item * plan->chunks + chunk);
    return (T *)plan->shared + index * (size_t)plan->rows * per_row;
}

static int NAME(decode_chunk_item)(const sdpa_problem *p, const sdpa_plan *plan,
                                   int kernel, void *scratch, int64_t item,
                                   sdpa_where *where)
{
    int64_t chunk = item % plan->chunks;
    int64_t group_item = item / plan->chunks; /* b · Hkv + KV head */
    int64_t hk = group_item % p->heads_kv, b = group_item / p->heads_kv;
    int64_t begin = chunk * plan->chunk_len;
    int64_t end =
        begin + plan->chunk_len < p->len_k ? begin + plan->chunk_len : p->len_k;
    sdpa_row_block blk = {.batch = b,
                          .head_kv = hk,
                          .head_first = hk * p->group,
                          .heads = p->group,
                          .row_first = 0,
                          .rows = p->len_q,
                          .key_begin = begin,
                          .key_end = end};
    /* The item this worker likely starts next: its first block's valid
     * keys. The workers claim items in visiting order, so that is about
     * plan->threads places on (Ph on 2 workers, A/B: 1.38-1.43 ms against
     * 1.58-1.67 with the very next item). */
    const int64_t workers = plan->threads > 1 ? plan->threads : 1;
    const int64_t after =
        sdpa_visit_position(item, plan->work_items, plan->visit_rows) + workers;
    if (after < plan->work_items) {
        int64_t next =
            sdpa_visited_item(after, plan->work_items, plan->visit_rows);
        int64_t next_group = next / plan->chunks;
        blk.next_batch = next_group / p->heads_kv;
        blk.next_head_kv = next_group % p->heads_kv;
        blk.next_key = next % plan->chunks * plan->chunk_len;
        int64_t valid = p->kv_lens ? p->kv_lens[blk.next_batch] : p->len_k;
        blk.next_end = blk.next_key + plan->block_k;
        blk.next_end = blk.next_end < valid ? blk.next_end : valid;
    }
    int status =
        NAME(sdpa_online_softmax)(p, plan, kernel, scratch, &blk, where);
    if (status != SDPA_OK)
        return status;
    const T *acc = SDPA_REGION(T, plan, scratch, o);
    const T *m = SDPA_REGION(T, plan, scratch, m);
    const T *l = SDPA_REGION(T, plan, scratch, l);
    const T *e = p->diagnostics ? SDPA_REGION(T, plan, scratch, e) : NULL;
    T *dst = NAME(partial)(p, plan, group_item, chunk);
    for (int64_t r = 0; r < plan->rows; r++, dst += p->dim_v + 3) {
        for (int64_t d = 0; d < p->dim_v; d++)
            dst[d] = acc[r * p->dim_v + d];
        dst[p->dim_v] = m[r];
        dst[p->dim_v + 1] = l[r];
        dst[p->dim_v + 2] = e ? e[r] : 0;
    }
    return SDPA_OK;
}

/* Merges the chunks of one (b, KV head) in chunk order — the same order for
 * every thread count — and writes the outputs. */
static int NAME(decode_merge_item)(const sdpa_problem *p, const sdpa_plan *plan,
                                   int kernel, void *scratch,
                                   int64_t group_item, sdpa_where *where)
{
    (void)kernel;
    int64_t hk = group_item % p->heads_kv, b = group_item / p->heads_kv;
    const int64_t dv = p->dim_v, stride = (dv + 3) * plan->rows;
    T *acc = SDPA_REGION(T, plan, scratch, o);
    for (int64_t r = 0; r < plan->rows; r++) {
        const T *first = NAME(partial)(p, plan, group_item, 0) + r * (dv + 3);
        T m = (T)-INFINITY, l = 0, e = 0;
        for (int64_t c = 0; c < plan->chunks; c++)
            m = first[c * stride + dv] > m ? first[c * stride + dv] : m;
        for (int64_t d = 0; d < dv; d++)
            acc[d] = 0;
        if (m != (T)-INFINITY)
            for (int64_t c = 0; c < plan->chunks; c++) {
                const T *part = first + c * stride;
                if (part[dv] == (T)-INFINITY)
                    continue; /* the chunk saw no allowed key */
                T w = NAME(sdpa_exp_neg)(part[dv] - m);
                l += part[dv + 1] * w;
                /* Σ e^{s−m}(s−m) = w·(e_c + (m_c − m)·ℓ_c), as in
                 * online_softmax_impl.h */
                e += w * (part[dv + 2] + (part[dv] - m) * part[dv + 1]);
                for (int64_t d = 0; d < dv; d++)
                    acc[d] += part[d] * w;
            }
        int64_t h = hk * p->group + r % p->group, i = r / p->group;
        int status = NAME(sdpa_finish_row)(p, b, h, i, acc, m, l, e, where);
        if (status != SDPA_OK)
            return status;
    }
    return SDPA_OK;
}
