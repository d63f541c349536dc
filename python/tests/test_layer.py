"""sdpa.mha_forward / sdpa.mha_backward, the positions, ALiBi slopes and
sdpa.convert against reference.py."""

import numpy as np
import pytest

import reference as ref
import sdpa


def _layer_params(rng, d_model=8, heads=2, heads_kv=2, biases=True):
    dk = d_model // heads
    w = {
        "w_q": rng.standard_normal((d_model, heads * dk)) * 0.5,
        "w_k": rng.standard_normal((d_model, heads_kv * dk)) * 0.5,
        "w_v": rng.standard_normal((d_model, heads_kv * dk)) * 0.5,
        "w_o": rng.standard_normal((heads * dk, d_model)) * 0.5,
    }
    if biases:
        w.update({"b_" + n[2:]: rng.standard_normal(w[n].shape[1]) * 0.1 for n in list(w)})
    return w


@pytest.mark.parametrize("positions", [None, "sinusoidal", "rope"])
@pytest.mark.parametrize("cross", [False, True])
def test_layer_forward(rng, positions, cross):
    w = _layer_params(rng, heads_kv=1)
    x_q = rng.standard_normal((2, 5, 8))
    x_kv = rng.standard_normal((2, 6, 8)) if cross else None
    y = sdpa.mha_forward(x_q, heads=2, heads_kv=1, x_kv=x_kv, positions=positions, causal=not cross, **w)
    want = ref.mha(x_q, w, 2, heads_kv=1, x_kv=x_kv, positions=positions, causal=0 if cross else ref.TOP_LEFT)
    assert y.shape == (2, 5, 8)
    np.testing.assert_allclose(y, want, atol=1e-12)


def test_layer_outputs_and_errors(rng):
    w = _layer_params(rng)
    x = rng.standard_normal((4, 8))  # [T, d_model]: one sequence
    out = np.full((4, 8), 3.0)
    r = sdpa.mha_forward(x, heads=2, weights=True, lse=True, out=out, **w)
    assert r.y is out and r.weights.shape == (2, 4, 4) and r.lse.shape == (2, 4)
    np.testing.assert_allclose(out, ref.mha(x[None], w, 2)[0], atol=1e-12)
    np.testing.assert_allclose(r.weights.sum(axis=-1), 1, atol=1e-12)
    kept = out.copy()
    bad = dict(w, w_q=w["w_q"][:, :6])
    with pytest.raises(sdpa.Error) as e:
        sdpa.mha_forward(x, heads=2, out=out, **bad)
    assert e.value.name == "SDPA_ERR_SHAPE_MISMATCH" and "w_q" in e.value.message
    with pytest.raises(sdpa.Error) as e:
        sdpa.mha_forward(x, heads=3, out=out, **w)  # 8 is not a multiple of 3
    assert e.value.message.startswith("sdpa_mha_forward")
    with pytest.raises(sdpa.Error) as e:
        sdpa.mha_forward(x, heads=2, out=out, mask=np.ones((4, 4), dtype=bool), **w)
    assert e.value.name == "SDPA_ERR_FULLY_MASKED_ROW" and "attention" in e.value.message
    assert np.array_equal(out, kept)  # untouched by the three refused calls
    with pytest.raises(sdpa.Error) as e:
        sdpa.mha_forward(x, heads=2, positions="alibi", **w)
    assert e.value.name == "SDPA_ERR_BAD_OPTION_VALUE"


def test_layer_untouched_on_error(rng):
    w = _layer_params(rng)
    x = rng.standard_normal((4, 8))
    out = np.full((4, 8), 3.0)
    with pytest.raises(sdpa.Error):
        sdpa.mha_forward(x, heads=2, out=out, causal=7, **w)
    assert np.all(out == 3.0)


@pytest.mark.parametrize("cross", [False, True])
def test_layer_backward_by_finite_differences(rng, cross):
    w = _layer_params(rng, d_model=4, heads=2, heads_kv=2)
    x_q = rng.standard_normal((1, 3, 4))
    x_kv = rng.standard_normal((1, 4, 4)) if cross else None
    dy = rng.standard_normal((1, 3, 4))
    g = sdpa.mha_backward(dy, x_q, heads=2, x_kv=x_kv, causal=not cross, **w)

    def loss():
        return (ref.mha(x_q, w, 2, x_kv=x_kv, causal=0 if cross else ref.TOP_LEFT) * dy).sum()

    expected = ["dx_q"] + (["dx_kv"] if cross else []) + ["dw_q", "dw_k", "dw_v", "dw_o", "db_q", "db_k", "db_v", "db_o"]
    assert list(g._fields) == expected
    np.testing.assert_allclose(g.dx_q, ref.numeric_grad(loss, x_q), atol=1e-7)
    if cross:
        np.testing.assert_allclose(g.dx_kv, ref.numeric_grad(loss, x_kv), atol=1e-7)
    for name in ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o"):
        np.testing.assert_allclose(getattr(g, "d" + name), ref.numeric_grad(loss, w[name]), atol=1e-7, err_msg=name)


def test_layer_backward_some_gradients_without_biases(rng):
    w = _layer_params(rng, biases=False)
    x = rng.standard_normal((2, 3, 8))
    dy = rng.standard_normal((2, 3, 8))
    g = sdpa.mha_backward(dy, x, heads=2, grads=["dw_o", "db_o"], **w)
    assert g._fields == ("dw_o", "db_o")
    # At b = 0 the output bias's gradient is the sum of dy over the rows.
    np.testing.assert_allclose(g.db_o, dy.sum(axis=(0, 1)), atol=1e-12)


def _to_half(x, storage):
    """float32 values as the storage type's array, rounded to nearest even."""
    x = np.asarray(x, dtype=np.float32)
    return x.astype(np.float16) if storage == "float16" else ref.to_bfloat16_bits(x)


def _widened(h, storage):
    return h.astype(np.float32) if storage == "float16" else ref.from_bfloat16_bits(h)


@pytest.mark.parametrize("storage", ["float16", "bfloat16"])
@pytest.mark.parametrize("cross", [False, True])
def test_layer_half_is_the_float32_layer_rounded(rng, storage, cross):
    # The half layer is the float32 layer on the widened inputs, its y and
    # gradients rounded once; lse is float32, the float32 layer's bits.
    w32 = {k: v.astype(np.float32) for k, v in _layer_params(rng, heads_kv=1).items()}
    wh = {k: _to_half(v, storage) for k, v in w32.items()}
    x_q = _to_half(rng.standard_normal((2, 5, 8)), storage)
    x_kv = _to_half(rng.standard_normal((2, 6, 8)), storage) if cross else None
    dy = _to_half(rng.standard_normal((2, 5, 8)), storage)
    wide = {k: _widened(v, storage) for k, v in wh.items()}
    kv32 = None if x_kv is None else _widened(x_kv, storage)
    kw = dict(heads=2, heads_kv=1, positions="rope", causal=not cross)
    r32 = sdpa.mha_forward(_widened(x_q, storage), x_kv=kv32, lse=True, **kw, **wide)
    rh = sdpa.mha_forward(x_q, x_kv=x_kv, lse=True, storage=storage, **kw, **wh)
    assert rh.y.dtype == x_q.dtype and rh.lse.dtype == np.float32
    assert np.array_equal(rh.y.view(np.uint16), _to_half(r32.y, storage).view(np.uint16))
    assert np.array_equal(rh.lse, r32.lse)
    g32 = sdpa.mha_backward(_widened(dy, storage), _widened(x_q, storage), x_kv=kv32, **kw, **wide)
    gh = sdpa.mha_backward(dy, x_q, x_kv=x_kv, storage=storage, **kw, **wh)
    gf = sdpa.mha_backward(dy, x_q, x_kv=x_kv, storage=storage, grad_dtype="float32", **kw, **wh)
    assert gh._fields == g32._fields
    for name in g32._fields:
        want = getattr(g32, name)
        assert np.array_equal(getattr(gh, name).view(np.uint16), _to_half(want, storage).view(np.uint16)), name
        assert getattr(gf, name).dtype == np.float32 and np.array_equal(getattr(gf, name), want), name
    with pytest.raises(sdpa.Error) as e:
        sdpa.mha_backward(dy, x_q, x_kv=x_kv, storage=storage, grad_dtype="float64", **kw, **wh)
    assert e.value.name == "SDPA_ERR_BAD_DTYPE"


def test_sinusoidal_table():
    t = sdpa.sinusoidal_table(6, 7, offset=3)
    np.testing.assert_allclose(t, ref.sinusoidal(6, 7, offset=3), atol=1e-14)
    t32 = sdpa.sinusoidal_table(4, 8, base=100.0, dtype=np.float32)
    assert t32.dtype == np.float32
    np.testing.assert_allclose(t32, ref.sinusoidal(4, 8, base=100.0), atol=1e-6)
    out = np.empty((4, 8))
    assert sdpa.sinusoidal_table(4, 8, out=out) is out
    with pytest.raises(sdpa.Error) as e:
        sdpa.sinusoidal_table(4, 8, base=0.5)
    assert e.value.name == "SDPA_ERR_BAD_SCALE"
    with pytest.raises(sdpa.Error) as e:
        sdpa.sinusoidal_table(4, 0)
    assert e.value.name == "SDPA_ERR_BAD_DIM"


@pytest.mark.parametrize("style", ["half", "interleaved"])
def test_rope_in_place(rng, style):
    x = rng.standard_normal((2, 3, 5, 8))
    pos = rng.integers(0, 100, size=10)
    want = ref.rope(x, positions=pos, interleaved=style == "interleaved", rotary_dim=6)
    view = x[:, :, :, :]
    assert sdpa.rope(view, positions=pos, style=style, rotary_dim=6) is view
    np.testing.assert_allclose(x, want, atol=1e-12)
    # BTHD memory, float32.
    xb = rng.standard_normal((1, 5, 2, 4)).astype(np.float32)
    want = ref.rope(xb.transpose(0, 2, 1, 3), interleaved=style == "interleaved")
    sdpa.rope(xb, style=style, layout="bthd")
    np.testing.assert_allclose(xb.transpose(0, 2, 1, 3), want, atol=1e-5)
    before = xb.copy()
    with pytest.raises(sdpa.Error) as e:
        sdpa.rope(xb, rotary_dim=3, layout="bthd")
    assert e.value.name == "SDPA_ERR_BAD_OPTION_VALUE"
    assert np.array_equal(xb, before)


def test_alibi_slopes():
    for heads in (1, 4, 6, 12):
        np.testing.assert_allclose(sdpa.alibi_slopes(heads), ref.alibi_slopes(heads), rtol=1e-15)
    np.testing.assert_allclose(sdpa.alibi_slopes(6, 4.0), ref.alibi_slopes(6, 4.0), rtol=1e-15)
    with pytest.raises(sdpa.Error) as e:
        sdpa.alibi_slopes(0)
    assert e.value.name == "SDPA_ERR_BAD_DIM"
    with pytest.raises(sdpa.Error) as e:
        sdpa.alibi_slopes(4, float("inf"))
    assert e.value.name == "SDPA_ERR_BAD_ALIBI"


def test_convert(rng):
    x = np.concatenate([rng.standard_normal(1000).astype(np.float32) * 100, np.float32([0, -0.0, np.inf, -np.inf, 1e-8, 7e4])])
    h = sdpa.convert(x, "float16")
    assert h.dtype == np.float16
    with np.errstate(over="ignore"):  # 7e4 overflows float16 to inf, in both
        want = x.astype(np.float16)  # numpy rounds to nearest even too
    assert np.array_equal(h.view(np.uint16), want.view(np.uint16))
    b = sdpa.convert(x, "bfloat16")
    assert b.dtype == np.uint16 and np.array_equal(b, ref.to_bfloat16_bits(x))
    back = sdpa.convert(b, "float32", storage="bfloat16")
    assert np.array_equal(back, ref.from_bfloat16_bits(b))
    assert np.array_equal(sdpa.convert(h, "float32"), h.astype(np.float32))
    with pytest.raises(sdpa.Error) as e:
        sdpa.convert(x.astype(np.float64), "float16")
    assert e.value.name == "SDPA_ERR_BAD_DTYPE"
    out = np.zeros(x.size, dtype=np.float16)
    with pytest.raises(sdpa.Error) as e:
        sdpa.convert(x[:10], "float16", out=out)
    assert e.value.name == "SDPA_ERR_SHAPE_MISMATCH" and np.all(out == 0)
    with pytest.raises(sdpa.Error) as e:
        sdpa.convert(x[::2], "float16")
    assert e.value.name == "SDPA_ERR_BAD_STRIDE"
