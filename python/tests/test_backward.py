"""sdpa.attention_backward and sdpa.merge against reference.py; the
reference's gradients are themselves checked by central differences."""

import numpy as np
import pytest

import reference as ref
import sdpa
from common import random_qkv


def test_reference_gradients_by_finite_differences(rng):
    q, k, v = random_qkv(rng, n=1, hq=2, hkv=1, tq=3, tk=4, dk=3, dv=2)
    dout = rng.standard_normal((1, 2, 3, 2))
    sinks = np.array([0.3, -0.2])
    g = ref.attention_grads(q, k, v, dout, softcap=1.2, sinks=sinks)

    def loss():
        return (ref.attention(q, k, v, softcap=1.2, sinks=sinks)["out"] * dout).sum()

    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        np.testing.assert_allclose(g[name], ref.numeric_grad(loss, x), atol=1e-7)
    np.testing.assert_allclose(g["dsinks"], ref.numeric_grad(loss, sinks), atol=1e-7)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 2e-4)])
@pytest.mark.parametrize(
    "opts",
    [{}, {"causal": True}, {"softcap": 2.0, "scale": 0.4}, {"kv_lens": [7, 3]}],
    ids=lambda o: ",".join(o) or "plain",
)
def test_backward_against_reference(rng, dtype, tol, opts):
    q, k, v = random_qkv(rng, dtype=dtype)
    dout = rng.standard_normal((2, 4, 5, 6)).astype(dtype)
    fwd = sdpa.attention(q, k, v, lse=True, **opts)
    g = sdpa.attention_backward(dout, q, k, v, fwd.out, fwd.lse, **opts)
    ropts = dict(opts)
    if ropts.get("causal"):
        ropts["causal"] = ref.TOP_LEFT
    want = ref.attention_grads(q, k, v, dout, **ropts)
    for name in ("dq", "dk", "dv"):
        got = getattr(g, name)
        assert got.dtype == dtype and got.shape == want[name].shape
        np.testing.assert_allclose(got, want[name], rtol=tol, atol=tol)


def test_backward_bias_sinks_and_broadcast_kv(rng):
    q = rng.standard_normal((3, 2, 4, 5))
    k1 = rng.standard_normal((1, 1, 6, 5))
    v1 = rng.standard_normal((1, 1, 6, 3))
    k = np.broadcast_to(k1, (3, 1, 6, 5))  # one cache shared by the batch
    v = np.broadcast_to(v1, (3, 1, 6, 3))
    bias = rng.standard_normal((1, 2, 1, 6))
    sinks = np.array([0.1, -0.4])
    dout = rng.standard_normal((3, 2, 4, 3))
    fwd = sdpa.attention(q, k, v, bias=bias, sinks=sinks, lse=True)
    g = sdpa.attention_backward(dout, q, k, v, fwd.out, fwd.lse, bias=bias, sinks=sinks, dbias=True, dsinks=True)
    want = ref.attention_grads(q, k1, v1, dout, bias=bias, sinks=sinks)
    assert g.dk.shape == (1, 1, 6, 5) and g.dv.shape == (1, 1, 6, 3)
    np.testing.assert_allclose(g.dq, want["dq"], atol=1e-10)
    np.testing.assert_allclose(g.dk, want["dk"], atol=1e-10)
    np.testing.assert_allclose(g.dv, want["dv"], atol=1e-10)
    assert g.dbias.shape == (1, 2, 1, 6)
    np.testing.assert_allclose(g.dbias, want["dbias"].sum(axis=(0, 2), keepdims=True), atol=1e-10)
    np.testing.assert_allclose(g.dsinks, want["dsinks"], atol=1e-10)


def test_backward_into_given_arrays_and_bthd(rng):
    q, k, v = random_qkv(rng, n=1, hq=2, hkv=2)
    qb, kb, vb = (np.ascontiguousarray(x.transpose(0, 2, 1, 3)) for x in (q, k, v))
    dout = rng.standard_normal((1, 5, 2, 6))
    fwd = sdpa.attention(qb, kb, vb, lse=True, layout="bthd")
    dq = np.full(qb.shape, 9.0)
    g = sdpa.attention_backward(dout, qb, kb, vb, fwd.out, fwd.lse, layout="bthd", dq=dq)
    assert g.dq is dq
    want = ref.attention_grads(q, k, v, dout.transpose(0, 2, 1, 3))
    np.testing.assert_allclose(dq.transpose(0, 2, 1, 3), want["dq"], atol=1e-10)
    np.testing.assert_allclose(g.dk.transpose(0, 2, 1, 3), want["dk"], atol=1e-10)


def test_backward_errors_leave_gradients_untouched(rng):
    q, k, v = random_qkv(rng, n=1, hq=2, hkv=2)
    fwd = sdpa.attention(q, k, v, lse=True)
    dq = np.full(q.shape, 9.0)
    with pytest.raises(sdpa.Error) as e:
        sdpa.attention_backward(fwd.out[..., :3], q, k, v, fwd.out, fwd.lse, dq=dq)
    assert e.value.name == "SDPA_ERR_SHAPE_MISMATCH" and e.value.message.startswith("sdpa_backward")
    assert np.all(dq == 9.0)
    with pytest.raises(sdpa.Error) as e:
        sdpa.attention_backward(fwd.out, q, k, v, fwd.out, fwd.lse, dbias=True)
    assert e.value.name == "SDPA_ERR_NULL_POINTER" and "bias" in e.value.message


def test_ragged_backward(rng):
    q_off = [0, 2, 5]
    q = rng.standard_normal((1, 2, 5, 4))
    k = rng.standard_normal((2, 2, 6, 4))  # batched keys: sequence b reads item b
    v = rng.standard_normal((2, 2, 6, 3))
    dout = rng.standard_normal((1, 2, 5, 3))
    fwd = sdpa.attention(q, k, v, q_offsets=q_off, lse=True)
    g = sdpa.attention_backward(dout, q, k, v, fwd.out, fwd.lse, q_offsets=q_off)
    for b in range(2):
        rows = slice(q_off[b], q_off[b + 1])
        want = ref.attention_grads(q[:, :, rows], k[b : b + 1], v[b : b + 1], dout[:, :, rows])
        np.testing.assert_allclose(g.dq[:, :, rows], want["dq"], atol=1e-10)
        np.testing.assert_allclose(g.dk[b : b + 1], want["dk"], atol=1e-10)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-12), (np.float32, 1e-5)])
def test_merge_of_key_chunks_is_the_whole_call(rng, dtype, tol):
    q, k, v = random_qkv(rng, tk=12, dtype=dtype)
    whole = sdpa.attention(q, k, v, lse=True)
    parts = [sdpa.attention(q, k[:, :, s], v[:, :, s], lse=True) for s in (slice(0, 5), slice(5, 12))]
    m = sdpa.merge([p.out for p in parts], [p.lse for p in parts], lse=True)
    want_out, want_lse = ref.merge([p.out for p in parts], [p.lse for p in parts])
    np.testing.assert_allclose(m.out, want_out, rtol=tol, atol=tol)
    np.testing.assert_allclose(m.lse, want_lse, rtol=tol, atol=tol)
    np.testing.assert_allclose(m.out, whole.out, rtol=tol * 10, atol=tol * 10)
    # In place into partial 0.
    acc_out, acc_lse = parts[0].out, parts[0].lse
    r = sdpa.merge([acc_out, parts[1].out], [acc_lse, parts[1].lse], out=acc_out, lse=acc_lse)
    assert r.out is acc_out
    assert np.array_equal(acc_out, m.out) and np.array_equal(acc_lse, m.lse)


def test_merge_errors(rng):
    q, k, v = random_qkv(rng)
    p = sdpa.attention(q, k, v, lse=True)
    out = np.full(p.out.shape, 5.0)
    with pytest.raises(sdpa.Error) as e:
        sdpa.merge([p.out, p.out[:1]], [p.lse, p.lse[:1]], out=out)
    assert e.value.name == "SDPA_ERR_SHAPE_MISMATCH" and e.value.message.startswith("sdpa_merge")
    lse = p.lse.copy()
    lse[0, 0, 0] = np.nan
    with pytest.raises(sdpa.Error) as e:
        sdpa.merge([p.out], [lse], out=out)
    assert e.value.name == "SDPA_ERR_NONFINITE"
    with pytest.raises(sdpa.Error) as e:
        sdpa.merge([], [])
    assert e.value.name == "SDPA_ERR_BAD_DIM"
    assert np.all(out == 5.0)


@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
def test_half_storage_backward(rng, storage):
    q, k, v = random_qkv(rng, dtype=np.float32)
    dout = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    # The half inputs and their exact float32 values.
    qh, kh, vh, douth = (sdpa.convert(x, storage) for x in (q, k, v, dout))
    q32, k32, v32, dout32 = (sdpa.convert(x, "float32", storage="bfloat16") for x in (qh, kh, vh, douth))
    with sdpa.Context() as ctx:
        fwd = sdpa.attention(qh, kh, vh, lse=True, causal=True, storage="bfloat16", ctx=ctx)
        out32 = sdpa.convert(fwd.out, "float32", storage="bfloat16")
        g32 = sdpa.attention_backward(
            douth, qh, kh, vh, fwd.out, fwd.lse, causal=True, storage="bfloat16", grad_dtype="float32", ctx=ctx
        )
        want = sdpa.attention_backward(dout32, q32, k32, v32, out32, fwd.lse, causal=True, ctx=ctx)
        gh = sdpa.attention_backward(douth, qh, kh, vh, fwd.out, fwd.lse, causal=True, storage="bfloat16", ctx=ctx)
    # float32 gradients: the bits of the float32 backward on the widened inputs.
    for name in ("dq", "dk", "dv"):
        assert getattr(g32, name).dtype == np.float32
        assert np.array_equal(getattr(g32, name), getattr(want, name)), name
        # In the storage type: those bits rounded once.
        half = getattr(gh, name)
        assert half.dtype == (np.float16 if storage == "float16" else np.uint16)
        assert np.array_equal(half.view(np.uint16), sdpa.convert(getattr(want, name), storage).view(np.uint16)), name
    ref_g = ref.attention_grads(q32, k32, v32, dout32, causal=ref.TOP_LEFT)
    np.testing.assert_allclose(g32.dq, ref_g["dq"], atol=5e-2 if storage == "bfloat16" else 5e-3)
