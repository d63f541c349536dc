/* The tiled path's work item for one dtype; see path_tiled.c. */

static int NAME(tiled_item)(const sdpa_problem *p, const sdpa_plan *plan,
                            int kernel, void *scratch, int64_t item,
                            sdpa_where *where)
{
    int64_t q_block = item % plan->q_blocks;
    int64_t hk = (item / plan->q_blocks) % p->heads_kv;
    int64_t b = item / plan->q_blocks / p->heads_kv;
    int64_t i0 = q_block * plan->block_q;
    int64_t rows =
        p->len_q - i0 < plan->block_q ? p->len_q - i0 : plan->block_q;
    sdpa_row_block blk = {.batch = b,
                          .head_kv = hk,
                          .head_first = hk * p->group,
                          .heads = p->group,
                          .row_first = i0,
                          .rows = rows,
                          .key_begin = 0,
                          .key_end = p->len_k};
    int status =
        NAME(sdpa_online_softmax)(p, plan, kernel, scratch, &blk, where);
    const T *acc = SDPA_REGION(T, plan, scratch, o);
    const T *m = SDPA_REGION(T, plan, scratch, m);
    const T *l = SDPA_REGION(T, plan, scratch, l);
    const T *e = p->diagnostics ? SDPA_REGION(T, plan, scratch, e) : NULL;
    for (int64_t r = 0; status == SDPA_OK && r < rows * p->group; r++)
        status = NAME(sdpa_finish_row)(p, b, blk.head_first + r % p->group,
                                       i0 + r / p->group, acc + r * p->dim_v,
                                       m[r], l[r], e ? e[r] : 0, where);
    return status;
}
