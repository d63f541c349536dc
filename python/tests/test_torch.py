"""PyTorch CPU tensors in and out, zero-copy, against
torch.nn.functional.scaled_dot_product_attention. Skipped where torch is
not installed: the package never needs it."""

import numpy as np
import pytest

import sdpa

torch = pytest.importorskip("torch")


def test_tensors_in_and_out_and_pytorchs_result():
    g = torch.Generator().manual_seed(7)
    q = torch.randn(2, 4, 5, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 4, 7, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 4, 7, 6, generator=g, dtype=torch.float64)
    out = sdpa.attention(q, k, v, causal="bottom_right")
    assert isinstance(out, torch.Tensor)
    mask = torch.ones(5, 7, dtype=torch.bool).tril(diagonal=2)
    want = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert torch.allclose(out, want, atol=1e-12)
    # PyTorch's sense of a boolean mask (True = may attend).
    assert torch.allclose(sdpa.attention(q, k, v, mask=mask, mask_allows=True), want, atol=1e-12)


def test_zero_copy_out_and_requires_grad():
    q = torch.randn(1, 2, 3, 4, requires_grad=True)
    out = torch.empty(1, 2, 3, 4)
    r = sdpa.attention(q, q, q, out=out)
    assert r is out
    assert np.shares_memory(np.from_dlpack(out), np.from_dlpack(r))
    want = torch.nn.functional.scaled_dot_product_attention(q.detach(), q.detach(), q.detach())
    assert torch.allclose(out, want, atol=1e-6)


def test_bfloat16_tensors():
    q = torch.randn(1, 2, 3, 8).to(torch.bfloat16)
    out = sdpa.attention(q, q, q)
    assert out.dtype == torch.bfloat16
    want = torch.nn.functional.scaled_dot_product_attention(q.float(), q.float(), q.float())
    assert torch.allclose(out.float(), want, atol=2e-2)
