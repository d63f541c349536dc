/*
 * sdpa_backward's execution: dbias zeroed and the dQ turns reset, the
 * plan's work items on the workers, then dsinks on the caller's thread.
 * The tiles are backward_impl.h's, for float and double.
 */
#include "backward/backward.h"
#include "backward/dq_order.h"
#include "core/checked.h"
#include "forward/key_range.h"
#include "forward/row_block.h"
#include "kernels/rows.h"
#include "kernels/vexp.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

/* The static backward_item_f32/_f64 and its helpers, by HACKING.md's
 * naming rule (NAME(x) is x_f32, x_f64). */
#define SDPA_TEMPLATE "backward/backward_impl.h"
#include "core/instantiate.h"

int sdpa_backward_item(const sdpa_problem *p, const sdpa_plan *plan, int kernel,
                       void *scratch, int64_t item, sdpa_where *where)
{
    return SDPA_BY_DTYPE(p, backward_item, p, plan, kernel, scratch, item,
                         where);
}

/* dbias is a sum: zeroed first (its logical elements only), then the work
 * items add into the elements they own. */
static void zero_dbias(const sdpa_bwd_problem *bp)
{
    const int64_t *e = bp->dbias_shape;
    const sdpa_view *v = &bp->dbias;
    const size_t es = bp->p.elem_size;
    for (int64_t b = 0; b < e[0]; b++)
        for (int64_t h = 0; h < e[1]; h++)
            for (int64_t i = 0; i < e[2]; i++) {
                char *row = sdpa_at(v, es, b, h, i);
                for (int64_t j = 0; j < e[3]; j++)
                    memset(row + (size_t)(j * v->stride[3]) * es, 0, es);
            }
}

/* dsinks_h = −Σ_{b,i} exp(σ_h − lse_i)·D_i: the sink is one more key, with
 * value 0, so its dS is P_sink·(0 − D_i) (see include/sdpa.h). In double,
 * in a fixed order, on the caller's thread. */
double sdpa_backward_sink_gradient(const sdpa_bwd_problem *bp, int64_t h)
{
    const sdpa_problem *p = &bp->p;
    const size_t out_es = sdpa_dtype_size(p->out_type);
    const size_t dout_es = sdpa_dtype_size(bp->dout_type);
    double sum = 0;
    for (int64_t b = 0; b < p->batch; b++)
        for (int64_t i = 0; i < p->len_q; i++) {
            const char *o = sdpa_at(&p->out, out_es, b, h, i);
            const char *g = sdpa_at(&bp->dout, dout_es, b, h, i);
            const double lse = sdpa_value_at(
                sdpa_at(&p->lse, p->elem_size, b, h, i), p->dtype, 0);
            double d = 0;
            for (int64_t c = 0; c < p->dim_v; c++)
                d += sdpa_value_at(o, p->out_type, c) *
                     sdpa_value_at(g, bp->dout_type, c);
            if (lse > -INFINITY)
                sum += exp(p->sinks[h] - lse) * d;
        }
    return -sum;
}

void sdpa_backward_bind(const sdpa_bwd_problem *bp, sdpa_bwd_plan *pl,
                        void *shared)
{
    pl->turns = shared;
    pl->dq_sum = bp->dq;
    if (pl->dq_bytes == 0)
        return;
    const sdpa_problem *p = &bp->p;
    const int64_t row = p->dim_k, head = p->len_q * row;
    pl->dq_sum = (sdpa_view){.data = (char *)shared + pl->dq_offset,
                             .stride = {p->heads_q * head, head, row, 1}};
}

int sdpa_backward_run(sdpa_ctx *ctx, const sdpa_bwd_problem *bp,
                      sdpa_bwd_plan *pl, sdpa_where *where)
{
    if (bp->dbias.data)
        zero_dbias(bp);
    sdpa_dq_reset(pl->turns, pl->turn_count);
    /* a key block's items after the set's earlier blocks (dq_order.h):
     * the sets as the grid's rows, each set's first block started first */
    int status = sdpa_run_items(ctx, SDPA_BACKWARD_WHO, &bp->p, &pl->run,
                                pl->run.work_items, pl->groups,
                                sdpa_backward_item, where);
    for (int64_t h = 0; status == SDPA_OK && bp->dsinks && h < bp->p.heads_q;
         h++)
        bp->dsinks[h] = sdpa_backward_sink_gradient(bp, h);
    return status;
}
