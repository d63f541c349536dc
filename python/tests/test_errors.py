"""Every status code raised as sdpa.Error with its number, its name, the
library's located message, and the caller's out untouched."""

import ctypes

import numpy as np
import pytest

import sdpa
from common import NumpyAllocator
from sdpa import _abi

SENTINEL = 12345.0


@pytest.fixture
def qkv(rng):
    q = rng.standard_normal((1, 2, 3, 4))
    k = rng.standard_normal((1, 2, 5, 4))
    v = rng.standard_normal((1, 2, 5, 4))
    return q, k, v


def _expect(name, fn, *words):
    with pytest.raises(sdpa.Error) as e:
        fn()
    err = e.value
    assert err.name == name, err
    assert err.status == getattr(sdpa, name)
    assert err.description == sdpa.status_string(err.status)
    for w in words:
        assert w in err.message, (w, err.message)
    assert str(err).startswith("%s (%d): " % (name, err.status))
    return err


def _nan_row(q):
    q = q.copy()
    q[0, 1, 2, 0] = np.nan
    return q


# (status, keywords of sdpa.attention or a function of (q, k, v) that
# returns (q, k, v, keywords), words of the message)
FORWARD_CASES = [
    ("SDPA_ERR_BAD_DTYPE", lambda q, k, v: (q, k.astype(np.float32), v.astype(np.float32), {}), ["sdpa_forward"]),
    ("SDPA_ERR_BAD_DIM", lambda q, k, v: (q, k[:, :, :0], v[:, :, :0], {}), ["sdpa_forward"]),
    ("SDPA_ERR_SHAPE_MISMATCH", lambda q, k, v: (q, k, v[:, :, :4], {}), ["sdpa_forward"]),
    ("SDPA_ERR_BAD_STRIDE", lambda q, k, v: (q, np.repeat(k, 2, axis=3)[..., ::2], v, {}), ["sdpa_forward", "k"]),
    ("SDPA_ERR_BAD_SCALE", {"scale": -1.0}, ["sdpa_forward", "scale"]),
    ("SDPA_ERR_BAD_SOFTCAP", {"softcap": float("nan")}, ["sdpa_forward", "soft"]),
    ("SDPA_ERR_HEAD_GROUPING", lambda q, k, v: (np.concatenate([q, q[:, :1]], axis=1), k, v, {}), ["sdpa_forward"]),
    ("SDPA_ERR_BAD_KV_LEN", {"kv_lens": [9]}, ["sdpa_forward", "kv_lens"]),
    ("SDPA_ERR_BAD_CAUSAL", {"causal": 5}, ["sdpa_forward", "causal"]),
    ("SDPA_ERR_BAD_FLAGS", {"flags": 1 << 9}, ["sdpa_forward", "flag bits"]),
    ("SDPA_ERR_FULLY_MASKED_ROW", {"mask": np.ones((3, 5), dtype=bool)}, ["sdpa_forward", "row 0"]),
    ("SDPA_ERR_BAD_WINDOW", {"window": (-3, 0)}, ["sdpa_forward", "window"]),
    ("SDPA_ERR_BAD_ALIBI", {"alibi": [np.nan, 0.5]}, ["sdpa_forward"]),
    ("SDPA_ERR_BAD_SINK", {"sinks": [np.inf, 0.0]}, ["sdpa_forward", "sink"]),
    ("SDPA_ERR_BAD_LOGITS_STAGE", {"logits": 9}, ["sdpa_forward", "logits"]),
    ("SDPA_ERR_BAD_PAGE", lambda q, k, v: (q, k, v, {"block_table": np.array([[7]], dtype=np.int32)}), ["sdpa_forward"]),
    ("SDPA_ERR_BAD_RAGGED", {"q_offsets": [0, 3], "mask": np.zeros((3, 5), dtype=bool)}, ["sdpa_forward", "mask"]),
    ("SDPA_ERR_BAD_RAGGED", {"kv_offsets": [0, 5]}, ["sdpa_forward", "q_offsets"]),
    ("SDPA_ERR_OFFSETS_START", {"q_offsets": [1, 3]}, ["sdpa_forward", "q_offsets"]),
    ("SDPA_ERR_OFFSETS_ORDER", {"q_offsets": [0, 2, 1, 3]}, ["sdpa_forward", "q_offsets"]),
    ("SDPA_ERR_OFFSETS_END", {"q_offsets": [0, 2]}, ["sdpa_forward", "q_offsets"]),
]


@pytest.mark.parametrize("name,case,words", FORWARD_CASES, ids=[c[0][9:] for c in FORWARD_CASES])
def test_forward_status_and_out_untouched(qkv, name, case, words):
    q, k, v = qkv
    if callable(case):
        q, k, v, kw = case(q, k, v)
    else:
        kw = dict(case)
    out = np.full(q.shape[:3] + (v.shape[3],), SENTINEL)
    before = [x.copy() for x in (q, k, v)]
    _expect(name, lambda: sdpa.attention(q, k, v, out=out, **kw), *words)
    assert np.all(out == SENTINEL)
    assert all(np.array_equal(a, b, equal_nan=True) for a, b in zip((q, k, v), before))


def test_overlap_of_out_and_an_input(qkv):
    q, k, v = qkv
    before = q.copy()
    _expect("SDPA_ERR_OVERLAP", lambda: sdpa.attention(q, k, v, out=q), "sdpa_forward")
    assert np.array_equal(q, before)


def test_nonfinite_is_found_while_computing(qkv):
    q, k, v = qkv
    _expect("SDPA_ERR_NONFINITE", lambda: sdpa.attention(_nan_row(q), k, v), "sdpa_forward", "head 1")


def test_unsupported_forced_path(qkv):
    q, k, v = qkv
    with sdpa.Context(path="decode") as ctx:
        out = np.full((1, 2, 3, 4), SENTINEL)
        _expect("SDPA_ERR_UNSUPPORTED", lambda: sdpa.attention(q, k, v, weights=True, out=out, ctx=ctx), "sdpa_forward")
        assert np.all(out == SENTINEL)


def test_options_statuses():
    with sdpa.Context() as ctx:
        _expect("SDPA_ERR_UNKNOWN_OPTION", lambda: ctx.set(999, 1), "999")
        _expect("SDPA_ERR_UNKNOWN_OPTION", lambda: ctx.set("speed", 1), "speed")
        _expect("SDPA_ERR_BAD_OPTION_VALUE", lambda: ctx.set("threads", 100000), "sdpa_ctx_set_int")
        _expect("SDPA_ERR_BAD_OPTION_VALUE", lambda: ctx.set("kernel", "sse"), "kernel")
        assert ctx.get("threads") == 1  # kept


def test_out_of_memory(qkv):
    q, k, v = qkv
    allocator = NumpyAllocator()
    with sdpa.Context(allocator=allocator) as ctx:
        allocator.refuse = True  # the context itself was served
        out = np.full((1, 2, 3, 4), SENTINEL)
        _expect("SDPA_ERR_OUT_OF_MEMORY", lambda: sdpa.attention(q, k, v, out=out, ctx=ctx), "sdpa_forward")
        assert np.all(out == SENTINEL)
    assert allocator.live == {}  # every allocation was given back


def test_parallel_for_that_skips_an_item(rng):
    q = rng.standard_normal((4, 4, 64, 16))
    with sdpa.Context() as ctx:

        def lazy(items, task):
            for i in range(items - 1):
                task(i, 0)

        ctx.set_parallel_for(lazy, 2)
        _expect("SDPA_ERR_PARALLEL_FOR", lambda: sdpa.attention(q, q, q, ctx=ctx), "parallel-for", "items")

        def broken(items, task):
            raise RuntimeError("the pool is down")

        ctx.set_parallel_for(broken, 2)
        err = _expect("SDPA_ERR_PARALLEL_FOR", lambda: sdpa.attention(q, q, q, ctx=ctx))
        assert isinstance(err.__cause__, RuntimeError)


def test_busy_context(rng):
    q = rng.standard_normal((4, 4, 64, 16))
    seen = []
    with sdpa.Context() as ctx:

        def reentrant(items, task):
            try:
                sdpa.attention(q, q, q, ctx=ctx)
            except sdpa.Error as e:
                seen.append(e)
            for i in range(items):
                task(i, 0)

        ctx.set_parallel_for(reentrant, 2)
        sdpa.attention(q, q, q, ctx=ctx)  # the outer call goes on
    assert seen and seen[0].name == "SDPA_ERR_BUSY"


def _raw_args(q, k, v, out):
    from sdpa import _arrays

    args = _abi.new(_abi.sdpa_forward_args)
    args.dtype = _abi.SDPA_FLOAT64
    args.q, args.k, args.v = (_arrays.tensor(x, "test", "x") for x in (q, k, v))
    args.out = _arrays.tensor(out, "test", "out", output=True)
    return args


def test_struct_statuses_through_the_raw_binding(qkv):
    # What the package's own calls cannot get wrong, through ctx.call.
    q, k, v = qkv
    out = np.full((1, 2, 3, 4), SENTINEL)
    fwd = sdpa._lib.sdpa_forward
    with sdpa.Context() as ctx:
        _expect("SDPA_ERR_NULL_POINTER", lambda: ctx.call(fwd, None), "sdpa_forward")
        args = _raw_args(q, k, v, out)
        args.struct_size = 100
        _expect("SDPA_ERR_STRUCT_SIZE", lambda: ctx.call(fwd, ctypes.byref(args)), "struct_size")
        # A larger struct whose unknown tail is not zero.
        big = (ctypes.c_uint8 * (ctypes.sizeof(args) + 8))()
        ctypes.memmove(big, ctypes.byref(args), ctypes.sizeof(args))
        big_args = ctypes.cast(big, ctypes.POINTER(_abi.sdpa_forward_args))
        big_args.contents.struct_size = ctypes.sizeof(big)
        big[ctypes.sizeof(args)] = 1
        _expect("SDPA_ERR_STRUCT_TAIL", lambda: ctx.call(fwd, big_args), "sdpa_forward")
        args = _raw_args(q, k, v, out)
        args.q.shape[0] = 1 << 62  # extents whose product passes size_t
        args.out.shape[0] = 1 << 62
        _expect("SDPA_ERR_OVERFLOW", lambda: ctx.call(fwd, ctypes.byref(args)), "sdpa_forward")
        args = _raw_args(q, k, v, out)
        args.dropout_p = 1.0  # must lie in [0, 1)
        _expect("SDPA_ERR_BAD_DROPOUT", lambda: ctx.call(fwd, ctypes.byref(args)), "dropout_p")
        args = _raw_args(q, k, v, out)
        scales = (ctypes.c_float * 2)(1.0, 1.0)
        args.k_scale = ctypes.cast(scales, ctypes.c_void_p)  # FP8 K/V only
        _expect("SDPA_ERR_BAD_KV_SCALE", lambda: ctx.call(fwd, ctypes.byref(args)), "k_scale")
    assert np.all(out == SENTINEL)


def test_every_status_is_tested_here():
    # Each status of the header has a case above or in another file's test.
    import os
    import re

    here = os.path.dirname(__file__)
    text = "".join(open(os.path.join(here, f)).read() for f in os.listdir(here) if f.endswith(".py"))
    tested = set(re.findall(r"SDPA_ERR_[A-Z_]+", text))
    assert set(n for n in _abi.STATUS_NAMES.values() if n != "SDPA_OK") <= tested


def test_package_checks_in_the_same_style(qkv):
    q, k, v = qkv
    out = np.full((1, 2, 3, 4), SENTINEL)
    # A byte stride that is not a multiple of the element size.
    raw = np.zeros(1 * 2 * 3 * 4 * 8 + 64, dtype=np.uint8)
    odd = np.lib.stride_tricks.as_strided(raw[4:].view(np.float32)[:1], shape=(1, 2, 3, 4), strides=(96, 48, 18, 4))
    _expect("SDPA_ERR_BAD_STRIDE", lambda: sdpa.attention(odd, k.astype(np.float32), v.astype(np.float32)), "q", "18", "multiple")
    # Unaligned data.
    unaligned = raw[1 : 1 + 8 * 24].view(np.float64).reshape(1, 2, 3, 4)
    _expect("SDPA_ERR_BAD_STRIDE", lambda: sdpa.attention(unaligned, k, v), "aligned")
    _expect("SDPA_ERR_BAD_DTYPE", lambda: sdpa.attention(q.astype(">f8"), k, v), "byte order")
    _expect("SDPA_ERR_BAD_DTYPE", lambda: sdpa.attention(q.astype(np.int32), k, v), "int32")
    _expect("SDPA_ERR_BAD_DTYPE", lambda: sdpa.attention(q, k, v, out=out.astype(np.float32)), "out", "float64")
    _expect("SDPA_ERR_BAD_DIM", lambda: sdpa.attention(q[None], k, v), "5 dimensions")
    _expect("SDPA_ERR_SHAPE_MISMATCH", lambda: sdpa.attention(q, k, v, kv_lens=[1, 2], out=out), "kv_lens", "2 values")
    _expect("SDPA_ERR_SHAPE_MISMATCH", lambda: sdpa.attention(q, k, v, sinks=[0.0], out=out), "sinks")
    _expect("SDPA_ERR_BAD_DTYPE", lambda: sdpa.attention(q, k, v.astype(np.float32)), "k is float64 and v float32")
    assert np.all(out == SENTINEL)
    with pytest.raises(ValueError):
        sdpa.attention(q, k, v, out=np.broadcast_to(out, out.shape))  # read-only
    with pytest.raises(TypeError):
        sdpa.attention(q, k, v, out=[[0.0]])
