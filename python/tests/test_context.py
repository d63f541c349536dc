"""sdpa.Context: options, the context manager, a caller's allocator and
parallel-for, and the zero-copy promise checked through the parallel-for:
what the library reads and writes is the arrays' own memory."""

import threading

import numpy as np
import pytest

import reference as ref
import sdpa
from common import NumpyAllocator, random_qkv


def test_options_by_name():
    with sdpa.Context(threads=2, path="tiled", empty_rows="zero", block_q=16) as ctx:
        assert ctx.get("threads") == 2
        assert ctx.get("path") == "tiled"
        assert ctx.get("empty_rows") == "zero"
        assert ctx.get("block_q") == 16
        assert ctx.get("kernel") in ("portable", "avx2", "avx512")
        ctx.set("threads", "all")
        assert ctx.get("threads") == "all"
        ctx.set(sdpa.SDPA_OPT_SCRATCH_LIMIT, 1 << 20)
        assert ctx.get("scratch_limit") == 1 << 20
    with pytest.raises(sdpa.Error) as e:
        ctx.handle
    assert e.value.name == "SDPA_ERR_NULL_POINTER"


def test_empty_rows_zero(rng):
    q, k, v = random_qkv(rng, n=1, hq=2, hkv=2)
    mask = np.zeros((5, 7), dtype=bool)
    mask[1] = True
    with sdpa.Context(empty_rows="zero") as ctx:
        r = sdpa.attention(q, k, v, mask=mask, lse=True, ctx=ctx)
    want = ref.attention(q, k, v, mask=mask, empty_rows_zero=True)
    np.testing.assert_allclose(r.out, want["out"], atol=1e-12)
    assert np.all(r.out[:, :, 1] == 0) and np.all(np.isneginf(r.lse[:, :, 1]))


@pytest.mark.parametrize("kernel", ["portable", "auto"])
def test_results_bitwise_the_same_for_every_thread_count(rng, kernel):
    q, k, v = random_qkv(rng, n=2, hq=4, hkv=2, tq=40, tk=50)
    outs = []
    for threads in (1, 2, 3):
        with sdpa.Context(threads=threads, kernel=kernel) as ctx:
            outs.append(sdpa.attention(q, k, v, causal=True, ctx=ctx))
    assert all(np.array_equal(outs[0], o) for o in outs[1:])


def test_zero_copy_reads_and_writes_the_arrays_own_memory(rng):
    # The caller's parallel-for runs after the arguments were taken and
    # before any work item: it changes q in place and checks that out is
    # not written yet; after the items ran, out (the caller's array) holds
    # the result already, before sdpa.attention returns. A package that
    # copied q would compute with the old values; one that wrote into a
    # temporary and copied would leave out empty inside the parallel-for.
    q, k, v = random_qkv(rng, n=2, hq=4, hkv=2, tq=64, tk=64)
    q_new = rng.standard_normal(q.shape)
    out = np.zeros((2, 4, 64, 6))
    seen = {}
    with sdpa.Context() as ctx:

        def run(items, task):
            seen["untouched"] = bool(np.all(out == 0))
            q[...] = q_new
            for i in range(items):
                task(i, i % 2)
            seen["written"] = out.copy()

        ctx.set_parallel_for(run, 2)
        result = sdpa.attention(q, k, v, out=out, ctx=ctx)
    assert result is out and seen["untouched"]
    want = ref.attention(q_new, k, v)["out"]
    np.testing.assert_allclose(out, want, atol=1e-12)
    assert np.array_equal(seen["written"], out)


def test_a_thread_pool_as_parallel_for(rng):
    q, k, v = random_qkv(rng, n=2, hq=4, hkv=2, tq=64, tk=64)
    want = sdpa.attention(q, k, v)

    def threaded(items, task):
        def worker(w):
            for i in range(w, items, 2):
                task(i, w)

        threads = [threading.Thread(target=worker, args=(w,)) for w in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    with sdpa.Context() as ctx:
        ctx.set_parallel_for(threaded, 2)
        assert np.array_equal(sdpa.attention(q, k, v, ctx=ctx), want)
        ctx.set_parallel_for(None, 1)
        assert np.array_equal(sdpa.attention(q, k, v, ctx=ctx), want)


def test_allocator_and_the_scratch_promise(rng):
    q, k, v = random_qkv(rng, tq=30, tk=40)
    allocator = NumpyAllocator()
    with sdpa.Context(allocator=allocator) as ctx:
        sdpa.attention(q, k, v, ctx=ctx)
        calls = allocator.calls
        assert calls >= 1
        for _ in range(3):  # a repeated call of the same shape allocates nothing
            sdpa.attention(q, k, v, ctx=ctx)
        assert allocator.calls == calls
    assert allocator.live == {}


def test_default_context_is_per_thread():
    mine = sdpa.default_context()
    assert sdpa.default_context() is mine
    other = []
    t = threading.Thread(target=lambda: other.append(sdpa.default_context()))
    t.start()
    t.join()
    assert other[0] is not mine
