/* The order in which key blocks add to a query tile's dQ (backward_impl.h).
 *
 * dQ_tile = scale · Σ_blocks dS_blk K_blk is summed in place in the
 * caller's dq, block after block: floating-point addition is not
 * associative, so for the same bits on every thread count the blocks must
 * add in the same order, 0, 1, 2, ..., whichever worker computes which
 * block. Each query tile has a turn counter: the number of key blocks that
 * have added to it (or passed it by). The worker of block kb computes its
 * tile's S, P, dS, dK and dV contributions at once, then waits for turn kb
 * before its dQ product, and hands the turn on (kb + 1) after it.
 *
 * No wait can last forever: a work item is one key block (or all of them)
 * of a KV head, items are started in an order where block kb - 1 of a head
 * comes before block kb (runtime/pool.h: claims in visiting order, the
 * caller's parallel-for included), and every item hands on the turn of
 * every tile it may touch, also when it met an error and computes no more.
 * Memory: one counter per query tile of each (batch item, head), in the
 * context's shared buffer. */
#ifndef SDPA_BACKWARD_DQ_ORDER_H
#define SDPA_BACKWARD_DQ_ORDER_H

#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>

/* Waits until key block `turn` may add to the tile. A worker runs the
 * block before this one, so the wait is short, unless the machine is
 * oversubscribed: then the waiter gives its core away. */
static inline void sdpa_dq_wait(atomic_llong *counter, int64_t turn)
{
    while (atomic_load_explicit(counter, memory_order_acquire) != turn)
        sched_yield();
}

/* The tile's dQ now holds block turn's product: the next block may add. */
static inline void sdpa_dq_pass(atomic_llong *counter, int64_t turn)
{
    atomic_store_explicit(counter, turn + 1, memory_order_release);
}

/* Every tile back to turn 0, before a call's items run. */
static inline void sdpa_dq_reset(atomic_llong *counters, int64_t count)
{
    for (int64_t i = 0; i < count; i++)
        atomic_init(&counters[i], 0);
}

#endif /* SDPA_BACKWARD_DQ_ORDER_H */
