"""Positions and ALiBi: sdpa_sinusoidal_table, sdpa_rope_apply and
sdpa_alibi_slopes (no context: their errors carry this package's message)."""

import numpy as np

from . import _abi
from . import _arrays
from ._errors import Error, status_string
from ._lib import lib

_ROPE = {"half": _abi.SDPA_ROPE_HALF, "interleaved": _abi.SDPA_ROPE_INTERLEAVED}


def _check(status, who, what):
    if status != _abi.SDPA_OK:
        raise Error(status, "%s: %s (%s)" % (who, status_string(status), what))


def alibi_slopes(heads, max_bias=0.0):
    """The standard ALiBi slopes of `heads` heads (Press et al.; max_bias 0
    means 8) as a float64 array."""
    heads = int(heads)
    slopes = np.zeros(max(heads, 0), dtype=np.float64)
    status = lib.sdpa_alibi_slopes(heads, float(max_bias), _arrays.pointer(slopes) if heads > 0 else None)
    _check(status, "sdpa.alibi_slopes", "heads %d, max_bias %r" % (heads, max_bias))
    return slopes


def sinusoidal_table(tokens, dim, *, offset=0, base=0.0, dtype=np.float64, out=None):
    """The sinusoidal positional table [tokens, dim] of "Attention Is All You
    Need": row t at position offset + t holds sin(pos / base^(2r/dim)) at
    2r and cos at 2r + 1 (base 0 = 10000). Into out (C-contiguous) if given."""
    who = "sdpa.sinusoidal_table"
    code = _arrays.TYPE_CODES.get(np.dtype(dtype).name)
    if out is None:
        out = np.empty((max(int(tokens), 0), max(int(dim), 0)), dtype=dtype)
    elif not isinstance(out, np.ndarray) or out.shape != (tokens, dim) or not out.flags.c_contiguous:
        raise Error(_abi.SDPA_ERR_SHAPE_MISMATCH, "%s: out: a C-contiguous array [%d, %d] expected" % (who, tokens, dim))
    else:
        code = _arrays.TYPE_CODES.get(out.dtype.name)
    status = lib.sdpa_sinusoidal_table(code or 0, int(tokens), int(dim), int(offset), float(base), _arrays.pointer(out))
    _check(status, who, "tokens %d, dim %d, base %r, dtype %s" % (tokens, dim, base, np.dtype(dtype).name))
    return out


def rope(x, *, positions=None, style="half", base=0.0, rotary_dim=0, layout="bhtd"):
    """Rotary embeddings applied in place to x, an (.., H, T, D) array (q or
    k; "bthd": (.., T, H, D)) of float32 or float64; returns x. positions:
    N·T positions (else t); style "half" (GPT-NeoX, Llama) or
    "interleaved" (GPT-J); rotary_dim 0 = D."""
    who = "sdpa.rope"
    from ._outputs import check_layout, logical

    check_layout(layout, who)
    arr = _arrays.take(x, who, "x")
    view = logical(arr.a, layout, who, "x")
    t = _arrays.tensor(view, who, "x", output=True)
    pos = None
    if positions is not None:
        n, _, tokens, _ = _arrays.as_rank4(view).shape
        pos = _arrays.index_array(positions, who, "positions", np.int64, n * tokens)
    style_code = _ROPE.get(style, style) if isinstance(style, str) else style
    if isinstance(style_code, str):
        raise Error(_abi.SDPA_ERR_BAD_OPTION_VALUE, "%s: style %r is none of half, interleaved" % (who, style))
    status = lib.sdpa_rope_apply(arr.storage, t, _arrays.pointer(pos), int(style_code), float(base), int(rotary_dim))
    _check(status, who, "style %r, base %r, rotary_dim %r, x %s %s" % (style, base, rotary_dim, arr.a.dtype, arr.a.shape))
    return x
