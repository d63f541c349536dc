"""sdpa.attention and sdpa.workspace against the float64 reference of
reference.py: the textbook's lab checks, every option, every storage type,
strided, broadcast and BTHD views, outputs written in place."""

import math

import numpy as np
import pytest

import reference as ref
import sdpa
from common import K2, Q2, V2, random_qkv

TOL = {np.float64: 1e-12, np.float32: 2e-6}


def test_textbook_lab_asserts():
    # The lab of the textbook unit "32.2 Scaled dot-product attention"
    # (docs/SEMANTICS.md, "Reference values"), its checks as written there.
    Q_test = np.array([[1, 0], [0, 1]], dtype=float)
    K_test = np.array([[1, 1], [2, 0]], dtype=float)
    V_test = np.array([[1, 0, 0], [0, 1, 0]], dtype=float)
    O_test, A_test = sdpa.attention(Q_test, K_test, V_test, weights=True)
    assert np.allclose(A_test, [[0.3302, 0.6698], [0.6698, 0.3302]], atol=1e-4)
    assert np.allclose(O_test, [[0.3302, 0.6698, 0], [0.6698, 0.3302, 0]], atol=1e-4)
    assert np.allclose(A_test.sum(axis=1), 1)
    M = np.array([[0, 1], [0, 0]])
    Om, Am = sdpa.attention(Q_test, K_test, V_test, mask=M, weights=True)
    assert np.allclose(Am, [[1, 0], [0.6698, 0.3302]], atol=1e-4)
    assert np.allclose(Om, [[1, 0, 0], [0.6698, 0.3302, 0]], atol=1e-4)
    assert Am[0, 1] == 0.0  # a forbidden key's weight is exactly 0
    Oc = sdpa.attention(Q_test, K_test, V_test, causal=True)
    assert np.allclose(Oc, Om, atol=1e-12)
    # The masked softmax: logits [[0, 2, -inf], [1, -1, 0]] at scale 1, as a
    # bias over zero scores.
    Z = np.array([[0, 2, -np.inf], [1, -1, 0]])
    _, A = sdpa.attention(np.zeros((2, 1)), np.zeros((3, 1)), np.eye(3), bias=Z, scale=1, weights=True)
    assert np.allclose(A[0], [0.1192, 0.8808, 0], atol=1e-4)
    assert np.allclose(A[1], [0.6652, 0.0900, 0.2447], atol=1e-4)
    # The post-softmax pitfall: zeroing after the softmax leaves a row sum
    # of 0.3302; masking before it gives exactly 1.
    assert abs(A_test[0, 0] - 0.3302) < 1e-4 and Am[0].sum() == 1.0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_two_token_example_in_both_types(dtype):
    out = sdpa.attention(Q2.astype(dtype), K2.astype(dtype), V2.astype(dtype), causal=True)
    assert out.dtype == dtype
    assert np.allclose(out, [[1, 0, 0], [0.6698, 0.3302, 0]], atol=1e-4)


def _check(got, want, dtype):
    tol = TOL[dtype]
    np.testing.assert_allclose(np.asarray(got, dtype=np.float64), want, rtol=tol * 10, atol=tol * 10)


OPTIONS = [
    {},
    {"causal": True},
    {"causal": "bottom_right", "kv_lens": [7, 5]},
    {"scale": 0.3, "softcap": 1.5},
    {"window": (2, 1)},
    {"window": (None, 0), "alibi": True},
    {"sinks": [0.5, -1.0, 2.0, 0.0]},
    {"kv_lens": [3, 6], "causal": "top_left"},
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("opts", OPTIONS, ids=lambda o: ",".join(o) or "plain")
def test_against_reference(rng, dtype, opts):
    q, k, v = random_qkv(rng, dtype=dtype)
    r = sdpa.attention(q, k, v, weights=True, lse=True, diagnostics=True, **opts)
    ref_opts = dict(opts)
    if ref_opts.get("causal") is True or ref_opts.get("causal") == "top_left":
        ref_opts["causal"] = ref.TOP_LEFT
    elif ref_opts.get("causal") == "bottom_right":
        ref_opts["causal"] = ref.BOTTOM_RIGHT
    if ref_opts.get("alibi") is True:
        ref_opts["alibi"] = ref.alibi_slopes(4)
    if "window" in ref_opts:
        ref_opts["window"] = tuple(-1 if x is None else x for x in ref_opts["window"])
    want = ref.attention(q, k, v, **ref_opts)
    assert r.out.dtype == dtype and r.out.shape == (2, 4, 5, 6)
    for name in ("out", "weights", "lse", "max_weight", "entropy"):
        _check(getattr(r, name), want[name], dtype)


def test_mask_bias_and_their_broadcasting(rng):
    q, k, v = random_qkv(rng)
    mask = rng.random((5, 7)) < 0.3
    mask[:, 0] = False  # every row keeps a key
    bias = rng.standard_normal((1, 4, 1, 7))
    bias[0, 1, 0, 3] = -np.inf
    out = sdpa.attention(q, k, v, mask=mask, bias=bias)
    _check(out, ref.attention(q, k, v, mask=mask, bias=bias)["out"], np.float64)
    allow = ~mask
    out2 = sdpa.attention(q, k, v, mask=allow.astype(np.uint8), mask_allows=True, bias=bias)
    assert np.array_equal(out, out2)
    # A bias broadcast by stride 0 (np.broadcast_to) over all four dims.
    row = rng.standard_normal(7)
    full = np.broadcast_to(row, (2, 4, 5, 7))
    _check(sdpa.attention(q, k, v, bias=full), ref.attention(q, k, v, bias=row)["out"], np.float64)


def test_logits_at_each_stage(rng):
    q, k, v = random_qkv(rng, n=1, hq=2, hkv=1)
    mask = np.zeros((5, 7), dtype=bool)
    mask[:, 2] = True
    want = ref.attention(q, k, v, softcap=0.8, mask=mask)
    for stage in ("scaled", "capped", "masked"):
        r = sdpa.attention(q, k, v, softcap=0.8, mask=mask, logits=stage)
        # Every stage shows the forbidden keys as -inf.
        _check(r.logits, np.where(mask, -np.inf, want[stage]), np.float64)
    assert np.all(np.isneginf(r.logits[..., 2]))


def test_ranks_and_bthd_layout(rng):
    q, k, v = random_qkv(rng, n=2, hq=4, hkv=4)
    want = ref.attention(q, k, v)["out"]
    # [H, T, D] and [T, D] inputs give outputs of the same rank.
    assert sdpa.attention(q[0], k[0], v[0]).shape == (4, 5, 6)
    _check(sdpa.attention(q[0, 1], k[0, 1], v[0, 1]), want[0, 1], np.float64)
    # [N, T, H, D] memory (a packed [N, T, H*D] buffer): layout="bthd".
    qb, kb, vb = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    out = sdpa.attention(qb, kb, vb, layout="bthd")
    assert out.shape == (2, 5, 4, 6) and out.flags.c_contiguous
    _check(out.transpose(0, 2, 1, 3), want, np.float64)
    # The same memory as bhtd views with BTHD strides, no copies.
    _check(sdpa.attention(qb.transpose(0, 2, 1, 3), kb.transpose(0, 2, 1, 3), vb.transpose(0, 2, 1, 3)), want, np.float64)


def test_strided_and_broadcast_views(rng):
    big_q = rng.standard_normal((3, 4, 9, 8))
    big_k = rng.standard_normal((2, 11, 8))
    big_v = rng.standard_normal((2, 11, 12))
    q = big_q[::2, :, 1::2, :]  # strided batch and rows
    k = np.broadcast_to(big_k[:, 2:9], (2, 2, 7, 8))  # stride 0 over N
    v = np.broadcast_to(big_v[:, 2:9, ::2], (2, 2, 7, 6))  # every other column: innermost stride 2
    with pytest.raises(sdpa.Error) as e:
        sdpa.attention(q, k, v)
    assert e.value.name == "SDPA_ERR_BAD_STRIDE" and "v" in e.value.message
    v = np.broadcast_to(big_v[:, 2:9, :6], (2, 2, 7, 6))
    out = sdpa.attention(q, k, v)
    assert not q.flags.c_contiguous and k.strides[0] == 0
    _check(out, ref.attention(q, k, v)["out"], np.float64)


def test_outputs_written_in_place(rng):
    q, k, v = random_qkv(rng)
    out = np.full((2, 4, 5, 6), 7.0)
    lse = np.empty((2, 4, 5))
    r = sdpa.attention(q, k, v, out=out, lse=lse)
    assert r.out is out and r.lse is lse
    want = ref.attention(q, k, v)
    _check(out, want["out"], np.float64)
    _check(lse, want["lse"], np.float64)
    # Into a strided view of a larger buffer: only the view's elements change.
    buf = np.full((2, 4, 5, 10), 3.0)
    view = buf[..., 2:8]
    assert sdpa.attention(q, k, v, out=view) is view
    _check(buf[..., 2:8], want["out"], np.float64)
    assert np.all(buf[..., :2] == 3.0) and np.all(buf[..., 8:] == 3.0)
    assert np.shares_memory(view, buf)


@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
def test_half_storage(rng, storage):
    q, k, v = random_qkv(rng, dtype=np.float32)
    if storage == "float16":
        qs, ks, vs = (x.astype(np.float16) for x in (q, k, v))
        widen = lambda a: a.astype(np.float64)  # noqa: E731
        r = sdpa.attention(qs, ks, vs, lse=True)
        assert r.out.dtype == np.float16
    else:
        qs, ks, vs = (ref.to_bfloat16_bits(x) for x in (q, k, v))
        widen = lambda a: ref.from_bfloat16_bits(a).astype(np.float64)  # noqa: E731
        with pytest.raises(sdpa.Error) as e:
            sdpa.attention(qs, ks, vs)
        assert e.value.name == "SDPA_ERR_BAD_DTYPE" and "storage='bfloat16'" in e.value.message
        r = sdpa.attention(qs, ks, vs, lse=True, storage="bfloat16")
        assert r.out.dtype == np.uint16
    assert r.lse.dtype == np.float32  # the compute type
    want = ref.attention(widen(qs), widen(ks), widen(vs))
    # out is rounded once to the storage type; lse is float32.
    np.testing.assert_allclose(widen(r.out), want["out"], atol=1e-2 if storage == "bfloat16" else 2e-3)
    np.testing.assert_allclose(r.lse, want["lse"], rtol=1e-5, atol=1e-5)
    # Half K/V with a float32 query: kv_dtype is set from k and v.
    out = sdpa.attention(q, ks, vs, storage="bfloat16")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, ref.attention(q, widen(ks), widen(vs))["out"], atol=1e-5)


def test_ragged_batch(rng):
    # Three sequences packed: query rows 0..2, 2..3, 3..7; keys packed too.
    q_off = [0, 2, 3, 7]
    kv_off = [0, 4, 9, 14]
    q = rng.standard_normal((2, 7, 8))  # [Hq, total_q, D]
    k = rng.standard_normal((1, 14, 8))
    v = rng.standard_normal((1, 14, 5))
    r = sdpa.attention(q, k, v, q_offsets=q_off, kv_offsets=kv_off, causal="bottom_right", lse=True)
    assert r.out.shape == (2, 7, 5)
    for b in range(3):
        qs = q[None, :, q_off[b] : q_off[b + 1]]
        ks, vs = k[None, :, kv_off[b] : kv_off[b + 1]], v[None, :, kv_off[b] : kv_off[b + 1]]
        want = ref.attention(qs, ks, vs, causal=ref.BOTTOM_RIGHT)
        _check(r.out[:, q_off[b] : q_off[b + 1]], want["out"][0], np.float64)
        _check(r.lse[:, q_off[b] : q_off[b + 1]], want["lse"][0], np.float64)


def test_paged_keys(rng):
    # Two batch items over a pool of 5 pages of 3 keys: item 0 reads pages
    # 4, 1; item 1 reads pages 0, 2 (6 keys each).
    pool_k = rng.standard_normal((5, 2, 3, 4))
    pool_v = rng.standard_normal((5, 2, 3, 4))
    table = np.array([[4, 1], [0, 2]], dtype=np.int32)
    q = rng.standard_normal((2, 2, 3, 4))
    out = sdpa.attention(q, pool_k, pool_v, block_table=table, kv_lens=[6, 5])
    k = np.concatenate([pool_k[table[:, 0]], pool_k[table[:, 1]]], axis=2)
    v = np.concatenate([pool_v[table[:, 0]], pool_v[table[:, 1]]], axis=2)
    _check(out, ref.attention(q, k, v, kv_lens=[6, 5])["out"], np.float64)


def test_workspace(rng):
    q, k, v = random_qkv(rng)
    with sdpa.Context(path="materialised") as ctx:
        need = sdpa.workspace(q, k, v, weights=True, ctx=ctx)
        assert isinstance(need, int) and need > 0
        sdpa.attention(q, k, v, weights=True, ctx=ctx)
        # After the call it holds exactly that, so asking again gives it.
        assert sdpa.workspace(q, k, v, weights=True, ctx=ctx) == need


def test_lists_are_converted(rng):
    out = sdpa.attention(Q2.tolist(), K2.tolist(), V2.tolist(), mask=[[0, 1], [0, 0]])
    assert out.dtype == np.float64
    assert np.allclose(out, [[1, 0, 0], [0.6698, 0.3302, 0]], atol=1e-4)


def test_entropy_of_the_two_token_rows():
    r = sdpa.attention(Q2, K2, V2, diagnostics=True)
    p = 1 / (1 + math.exp(1 / math.sqrt(2)))  # softmax of (1, 2) / sqrt(2)
    h = -(p * math.log(p) + (1 - p) * math.log(1 - p))
    assert np.allclose(r.entropy, [h, h], atol=1e-6)
    assert np.allclose(r.max_weight, [1 - p, 1 - p], atol=1e-6)
