"""PyTorch CPU tensors in and out, zero-copy, against
torch.nn.functional.scaled_dot_product_attention (PyTorch 2), or against
the same softmax written with torch's own operations where that function
is absent (Debian 12's PyTorch 1.13). Skipped where torch is not
installed: the package never needs it."""

import numpy as np
import pytest

import sdpa

torch = pytest.importorskip("torch")


def torch_attention(q, k, v, attn_mask=None):
    """PyTorch's attention: its own function where it has one."""
    functional = torch.nn.functional
    if hasattr(functional, "scaled_dot_product_attention"):
        return functional.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    s = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if attn_mask is not None:  # True = may attend, as PyTorch's bool mask
        s = s.masked_fill(~attn_mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def test_tensors_in_and_out_and_pytorchs_result():
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 4, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 4, 7, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 4, 7, 6, generator=g, dtype=torch.float64)
    out = sdpa.attention(q, k, v, causal="bottom_right")
    assert isinstance(out, torch.Tensor)
    mask = torch.ones(5, 7, dtype=torch.bool).tril(diagonal=2)
    want = torch_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(out, want, atol=1e-12)
    # PyTorch's sense of a boolean mask (True = may attend).
    assert torch.allclose(sdpa.attention(q, k, v, mask=mask, mask_allows=True), want, atol=1e-12)


def test_zero_copy_out_and_requires_grad():
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    out = torch.empty(1, 2, 3, 4)
    r = sdpa.attention(q, q, q, out=out)
    assert r is out
    assert np.shares_memory(np.from_dlpack(out), np.from_dlpack(r))
    want = torch_attention(q.detach(), q.detach(), q.detach())
    assert torch.allclose(out, want, atol=1e-6)


def test_bfloat16_tensors():
    q = torch.randn(1, 2, 3, 8).to(torch.bfloat16)
    out = sdpa.attention(q, q, q)
    assert out.dtype == torch.bfloat16
    want = torch_attention(q.float(), q.float(), q.float())
    assert torch.allclose(out.float(), want, atol=2e-2)


def test_backward_against_torch_autograd():
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 4, 5, 8, generator=g, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 2, 7, 8, generator=g, dtype=torch.float64, requires_grad=True)
    v = torch.randn(2, 2, 7, 6, generator=g, dtype=torch.float64, requires_grad=True)
    dout = torch.randn(2, 4, 5, 6, generator=g, dtype=torch.float64)
    mask = torch.ones(5, 7, dtype=torch.bool).tril(diagonal=2)
    # GQA: each KV head serves two query heads, as repeat_interleave does
    want = torch_attention(q, k.repeat_interleave(2, dim=1), v.repeat_interleave(2, dim=1), attn_mask=mask)
    want.backward(dout)
    fwd = sdpa.attention(q, k, v, causal="bottom_right", lse=True)
    assert torch.allclose(fwd.out, want.detach(), atol=1e-12)
    grads = sdpa.attention_backward(dout, q, k, v, fwd.out, fwd.lse, causal="bottom_right")
    assert all(isinstance(x, torch.Tensor) for x in grads)
    for got, ref in zip(grads, (q.grad, k.grad, v.grad)):
        assert torch.allclose(got, ref, atol=1e-12)
