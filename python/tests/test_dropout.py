"""Dropout through the package (dropout_p, dropout_seed, dropout_offset)
against reference.py's own Philox4x32-10 mask: the forward, its weights,
the backward and the layer, and the refusals."""

import numpy as np
import pytest

import reference as ref
import sdpa
from common import random_qkv

SEED = 0x0123456789ABCDEF


def test_reference_philox_known_answers():
    # Random123's published philox4x32_10 vectors (kat_vectors).
    cases = [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ]
    for counter, key, want in cases:
        assert [int(w) for w in ref.philox4x32_10(counter, key)] == list(want)


@pytest.mark.parametrize("dtype,tol", [(np.float64, 1e-10), (np.float32, 2e-4)])
@pytest.mark.parametrize("p", [0.1, 0.6])
def test_dropout_forward_and_backward_against_reference(rng, dtype, tol, p):
    q, k, v = random_qkv(rng, dtype=dtype, tk=11)
    dout = rng.standard_normal((2, 4, 5, 6)).astype(dtype)
    kw = dict(dropout_p=p, dropout_seed=SEED, dropout_offset=3, causal="bottom_right")
    fwd = sdpa.attention(q, k, v, lse=True, weights=True, **kw)
    z = ref.dropout_scale(2, 4, 5, 11, p, SEED, 3, compute=dtype)
    want = ref.attention_grads(q, k, v, dout, causal=ref.BOTTOM_RIGHT, dropout=z)
    np.testing.assert_allclose(fwd.out, want["fwd"]["out"], rtol=tol, atol=tol)
    # weights are the dropped, scaled ones: exact zeros where the mask drops
    np.testing.assert_allclose(fwd.weights, want["fwd"]["weights"], rtol=tol, atol=tol)
    assert np.array_equal(fwd.weights == 0, want["fwd"]["weights"] == 0)
    # lse is the undropped softmax's
    np.testing.assert_allclose(fwd.lse, want["fwd"]["lse"], rtol=tol, atol=tol)
    g = sdpa.attention_backward(dout, q, k, v, fwd.out, fwd.lse, **kw)
    for name in ("dq", "dk", "dv"):
        np.testing.assert_allclose(getattr(g, name), want[name], rtol=tol, atol=tol)


def test_dropout_reference_gradients_by_finite_differences(rng):
    q, k, v = random_qkv(rng, n=1, hq=2, hkv=1, tq=3, tk=6, dk=3, dv=2)
    dout = rng.standard_normal((1, 2, 3, 2))
    z = ref.dropout_scale(1, 2, 3, 6, 0.4, SEED)
    g = ref.attention_grads(q, k, v, dout, dropout=z)

    def loss():
        return (ref.attention(q, k, v, dropout=z)["out"] * dout).sum()

    for name, x in (("dq", q), ("dk", k), ("dv", v)):
        np.testing.assert_allclose(g[name], ref.numeric_grad(loss, x), atol=1e-7)


def test_same_seed_same_mask_other_offset_other_mask(rng):
    q, k, v = random_qkv(rng, tk=64)
    a = sdpa.attention(q, k, v, dropout_p=0.5, dropout_seed=7)
    b = sdpa.attention(q, k, v, dropout_p=0.5, dropout_seed=7)
    c = sdpa.attention(q, k, v, dropout_p=0.5, dropout_seed=7, dropout_offset=4)
    assert np.array_equal(a, b)
    # offset Hq = 4: batch item 0 of c draws the streams of a's item 1
    za = ref.dropout_scale(2, 4, 5, 64, 0.5, 7, compute=np.float64)
    zc = ref.dropout_scale(2, 4, 5, 64, 0.5, 7, 4, compute=np.float64)
    assert np.array_equal(za[1], zc[0]) and not np.array_equal(za[0], zc[0])
    want_c = ref.attention(q, k, v, dropout=zc)["out"]
    np.testing.assert_allclose(c, want_c, atol=1e-12)
    assert not np.allclose(a, c)


def test_layer_passes_dropout_through(rng):
    d_model, heads = 8, 2
    w = {
        "w_q": rng.standard_normal((d_model, d_model)) * 0.5,
        "w_k": rng.standard_normal((d_model, d_model)) * 0.5,
        "w_v": rng.standard_normal((d_model, d_model)) * 0.5,
        "w_o": rng.standard_normal((d_model, d_model)) * 0.5,
    }
    x = rng.standard_normal((2, 5, d_model))
    y = sdpa.mha_forward(x, heads=heads, causal=True, dropout_p=0.3, dropout_seed=SEED, **w)
    z = ref.dropout_scale(2, heads, 5, 5, 0.3, SEED, compute=np.float64)
    want = ref.mha(x, w, heads, causal=ref.TOP_LEFT, dropout=z)
    np.testing.assert_allclose(y, want, atol=1e-12)


@pytest.mark.parametrize(
    "kw,text",
    [
        (dict(dropout_p=1.0), "dropout_p"),
        (dict(dropout_p=-0.1), "dropout_p"),
        (dict(dropout_p=float("nan")), "dropout_p"),
        (dict(dropout_p=0.1, dropout_seed=-1), "dropout_seed: -1 is outside [0, 2**64)"),
        (dict(dropout_p=0.1, dropout_offset=1 << 64), "dropout_offset: 18446744073709551616 is outside"),
    ],
)
def test_dropout_refusals_leave_out_untouched(rng, kw, text):
    q, k, v = random_qkv(rng)
    out = np.full((2, 4, 5, 6), 7.0)
    with pytest.raises(sdpa.Error) as e:
        sdpa.attention(q, k, v, out=out, **kw)
    assert e.value.name == "SDPA_ERR_BAD_DROPOUT" and e.value.status == 33
    assert text in str(e.value)
    assert (out == 7.0).all()
