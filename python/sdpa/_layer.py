"""sdpa.mha_forward and sdpa.mha_backward: the multi-head attention layer
(sdpa_mha_forward, sdpa_mha_backward; docs/LAYER.md).

The weights are row-major matrices applied as x W (a PyTorch nn.Linear
weight, [out, in], is passed transposed: weight.T, a view). The library
reads them through plain pointers, so their shapes are checked here."""

import ctypes

import numpy as np

from . import _abi
from . import _arrays
from ._context import resolve
from ._errors import Error
from ._lib import lib
from ._options import Options
from ._outputs import Output, result_tuple

_POSITIONS = {
    None: _abi.SDPA_POS_NONE,
    "none": _abi.SDPA_POS_NONE,
    "sinusoidal": _abi.SDPA_POS_SINUSOIDAL,
    "rope": _abi.SDPA_POS_ROPE_HALF,
    "rope_interleaved": _abi.SDPA_POS_ROPE_INTERLEAVED,
}
_PARAMS = ("w_q", "w_k", "w_v", "w_o", "b_q", "b_k", "b_v", "b_o")


def _rows(a):
    """A layer tensor [T, d] or [N, T, d] as the [N, 1, T, d] view."""
    return np.expand_dims(a, -3)


class _Layer:
    """The arguments of one layer call, checked and held alive."""

    def __init__(self, who, x_q, params, *, heads, x_kv, heads_kv, dim_k, dim_v, positions, pos_base, pos_offset, pos_q, pos_kv, storage, attn_kw):
        self.who = who
        self.storage = storage
        xq = _arrays.take(x_q, who, "x_q", storage=storage)
        if xq.a.ndim not in (2, 3):
            raise Error(_abi.SDPA_ERR_BAD_DIM, "%s: x_q: [T, d_model] or [N, T, d_model] expected" % who)
        self.torch = xq.torch
        self.code = xq.storage
        # a half layer computes in float32: the attention's outputs' type
        self.compute = _arrays.FLOAT32 if self.code in (_arrays.FLOAT16, _arrays.BFLOAT16) else self.code
        self.rank = xq.a.ndim
        self.x_q = xq.a
        n = 1 if xq.a.ndim == 2 else xq.a.shape[0]
        tq, d_model = xq.a.shape[-2:]
        self.n, self.tq, self.d_model = n, tq, d_model
        self.args = args = _abi.new(_abi.sdpa_mha_args)
        args.dtype = self.code
        if positions not in _POSITIONS:
            raise Error(
                _abi.SDPA_ERR_BAD_OPTION_VALUE,
                "%s: positions %r is none of %s" % (who, positions, ", ".join(p for p in _POSITIONS if p)),
            )
        args.positions = _POSITIONS[positions]
        hq = int(heads)
        hkv = hq if heads_kv is None else int(heads_kv)
        dk = int(dim_k) if dim_k else (d_model // hq if hq > 0 and d_model % hq == 0 else 0)
        dv = int(dim_v) if dim_v else dk
        args.heads_q, args.heads_kv = hq, hkv
        args.dim_k = 0 if dim_k is None else int(dim_k)
        args.dim_v = 0 if dim_v is None else int(dim_v)
        self.hq, self.hkv, self.dk, self.dv = hq, hkv, dk, dv
        args.pos_base = 0.0 if pos_base is None else float(pos_base)
        args.pos_offset = int(pos_offset)
        args.x_q = _arrays.tensor(_rows(xq.a), who, "x_q")
        self.tk = tq
        self.x_kv = None
        if x_kv is not None:
            xkv = _arrays.take(x_kv, who, "x_kv", storage=storage)
            if xkv.storage != self.code:
                raise Error(_abi.SDPA_ERR_BAD_DTYPE, "%s: x_kv is not of x_q's dtype" % who)
            self.x_kv = xkv.a
            self.tk = xkv.a.shape[-2]
            args.x_kv = _arrays.tensor(_rows(xkv.a), who, "x_kv")
        self.keep = []
        if pos_q is not None:
            args.pos_q = self._index(pos_q, "pos_q", n * tq)
        if pos_kv is not None:
            args.pos_kv = self._index(pos_kv, "pos_kv", n * self.tk)
        self.params = {}
        for name in _PARAMS:
            value = params.get(name)
            if value is None:
                continue
            if dk == 0 or dv == 0:
                continue  # the library refuses the heads before any read
            taken = _arrays.take(value, who, name, storage=storage)
            arr = taken.a
            shape = self.param_shape(name)
            if arr.shape != shape and not (name[0] == "b" and arr.size == shape[0] and arr.ndim == 1):
                raise Error(
                    _abi.SDPA_ERR_SHAPE_MISMATCH,
                    "%s: %s: shape %s, expected %s" % (who, name, arr.shape, shape),
                )
            if not arr.flags.c_contiguous:
                raise Error(_abi.SDPA_ERR_BAD_STRIDE, "%s: %s: a C-contiguous (row-major) array expected" % (who, name))
            if taken.storage != self.code:
                raise Error(_abi.SDPA_ERR_BAD_DTYPE, "%s: %s: dtype %s, x_q is %s" % (who, name, arr.dtype, self.x_q.dtype))
            self.params[name] = arr
            setattr(args, name, _arrays.pointer(arr))
        self.opts = Options(who, storage=storage, **attn_kw)
        self.attn = _abi.new(_abi.sdpa_forward_args)
        self.opts.fill(self.attn, n, hq)
        if self.opts.bias is not None and self.opts.bias.storage != self.code:
            self.attn.bias_dtype = self.opts.bias.storage
        args.attn = ctypes.pointer(self.attn)

    def _index(self, x, name, count):
        a = _arrays.index_array(x, self.who, name, np.int64, count)
        self.keep.append(a)
        return _arrays.pointer(a)

    def param_shape(self, name):
        d, hq, hkv, dk, dv = self.d_model, self.hq, self.hkv, self.dk, self.dv
        return {
            "w_q": (d, hq * dk),
            "w_k": (d, hkv * dk),
            "w_v": (d, hkv * dv),
            "w_o": (hq * dv, d),
            "b_q": (hq * dk,),
            "b_k": (hkv * dk,),
            "b_v": (hkv * dv,),
            "b_o": (d,),
        }[name]

    def rows_shape(self, t):
        return (t, self.d_model) if self.rank == 2 else (self.n, t, self.d_model)

    def head_shape(self, last):
        return (self.n, self.hq, self.tq, last)[4 - (self.rank + 1) :]


_ATTENTION_OPTIONS = (
    "mask",
    "mask_allows",
    "bias",
    "causal",
    "scale",
    "softcap",
    "kv_lens",
    "window",
    "alibi",
    "sinks",
    "flags",
    "dropout_p",
    "dropout_seed",
    "dropout_offset",
)


def _layer(
    who,
    x_q,
    w_q,
    w_k,
    w_v,
    w_o,
    *,
    heads,
    x_kv=None,
    heads_kv=None,
    dim_k=None,
    dim_v=None,
    b_q=None,
    b_k=None,
    b_v=None,
    b_o=None,
    positions=None,
    pos_base=None,
    pos_offset=0,
    pos_q=None,
    pos_kv=None,
    storage=None,
    **attention_options
):
    """The layer's arguments, shared by mha_forward and mha_backward."""
    unknown = set(attention_options) - set(_ATTENTION_OPTIONS)
    if unknown:
        raise TypeError("%s: unexpected keyword argument(s): %s" % (who, ", ".join(sorted(unknown))))
    params = dict(w_q=w_q, w_k=w_k, w_v=w_v, w_o=w_o, b_q=b_q, b_k=b_k, b_v=b_v, b_o=b_o)
    return _Layer(
        who, x_q, params, heads=heads, x_kv=x_kv, heads_kv=heads_kv, dim_k=dim_k, dim_v=dim_v,
        positions=positions, pos_base=pos_base, pos_offset=pos_offset, pos_q=pos_q, pos_kv=pos_kv,
        storage=storage, attn_kw=attention_options,
    )


def mha_forward(x_q, w_q, w_k, w_v, w_o, *, weights=False, lse=False, diagnostics=False, out=None, ctx=None, **layer):
    """y = Concat(head_1..head_H) W_O + b_o, head_h = attention of the
    projected x_q W_Q, x_kv W_K, x_kv W_V (x_kv None: self-attention).

    x_q [T, d_model] or [N, T, d_model] (float32 or float64, or float16
    or bfloat16 (a uint16 array with storage="bfloat16"), computed in
    float32: y is the float32 layer's on the widened inputs, rounded
    once); the weights and biases of x_q's type, as x W ([d_model,
    heads·dk] ...). Keywords of the layer: heads
    (required), x_kv, heads_kv, dim_k, dim_v, b_q, b_k, b_v, b_o,
    positions (None, "sinusoidal", "rope", "rope_interleaved"), pos_base,
    pos_offset, pos_q, pos_kv; and the attention options of
    sdpa.attention: mask, mask_allows, bias, causal, scale, softcap,
    kv_lens, window, alibi, sinks, dropout_p, dropout_seed, dropout_offset.
    weights, lse, diagnostics ask for the attention's outputs as in
    sdpa.attention (float32 for a half layer). Returns y, or a named tuple
    (y, weights, lse, max_weight, entropy: those asked for).
    """
    who = "sdpa.mha_forward"
    layer = _layer(who, x_q, w_q, w_k, w_v, w_o, **layer)
    outs = {"y": Output(out, layer.rows_shape(layer.tq), layer.code, who, "out")}
    layer.args.y = _arrays.tensor(_rows(outs["y"].array), who, "out", output=True)
    if weights is not False and weights is not None:
        outs["weights"] = Output(weights, layer.head_shape(layer.tk), layer.compute, who, "weights")
        layer.attn.weights = outs["weights"].tensor
    per_row = []
    if lse is not False and lse is not None:
        per_row.append(("lse", None if lse is True else lse))
    if diagnostics is not False and diagnostics is not None:
        given = (None, None) if diagnostics is True else diagnostics
        per_row += list(zip(("max_weight", "entropy"), given))
    for name, given in per_row:
        outs[name] = Output(given, layer.head_shape(1)[:-1], layer.compute, who, name, per_row=True)
        setattr(layer.attn, name, outs[name].tensor)
    resolve(ctx).call(lib.sdpa_mha_forward, ctypes.byref(layer.args))
    if len(outs) == 1:
        return outs["y"].result(layer.torch)
    return result_tuple("Layer", list(outs))(*(o.result(layer.torch) for o in outs.values()))


GRADIENTS = ("dx_q", "dx_kv", "dw_q", "dw_k", "dw_v", "dw_o", "db_q", "db_k", "db_v", "db_o")


def mha_backward(dy, x_q, w_q, w_k, w_v, w_o, *, grads=None, grad_dtype=None, ctx=None, **layer):
    """The gradients of sdpa.mha_forward with the same arguments (and
    keywords), for dy the gradient of the loss for y. grads names the ones
    wanted (default: all of dx_q, dx_kv (cross-attention only), dw_q ..
    dw_o, db_q .. db_o; frozen parameters cost nothing); returns them as a
    named tuple in that order. db_* is the gradient at b = 0 when the layer
    has no such bias. dy is of x_q's type; in a half layer the gradients
    are too (rounded once from the float32 layer's), or float32 with
    grad_dtype="float32"."""
    who = "sdpa.mha_backward"
    layer = _layer(who, x_q, w_q, w_k, w_v, w_o, **layer)
    if grads is None:
        grads = [g for g in GRADIENTS if g != "dx_kv" or layer.x_kv is not None]
    unknown = [g for g in grads if g not in GRADIENTS]
    if unknown:
        raise ValueError("%s: unknown gradient(s) %s; known: %s" % (who, ", ".join(unknown), ", ".join(GRADIENTS)))
    bargs = _abi.new(_abi.sdpa_mha_backward_args)
    bargs.forward = ctypes.pointer(layer.args)
    grad_code = _arrays.TYPE_CODES.get(grad_dtype, grad_dtype) if grad_dtype is not None else 0
    if grad_code not in (0, _arrays.FLOAT32):
        raise Error(_abi.SDPA_ERR_BAD_DTYPE, "%s: grad_dtype %r is neither None nor 'float32'" % (who, grad_dtype))
    bargs.grad_dtype = int(grad_code)
    out_code = grad_code or layer.code
    dy_a = _arrays.take(dy, who, "dy", storage=layer.storage)
    if dy_a.storage != layer.code:
        raise Error(_abi.SDPA_ERR_BAD_DTYPE, "%s: dy is not of x_q's dtype" % who)
    bargs.dy = _arrays.tensor(_rows(dy_a.a), who, "dy")
    outs = {}
    for g in GRADIENTS:
        if g not in grads:
            continue
        if g in ("dx_q", "dx_kv"):
            rows = layer.tq if g == "dx_q" else layer.tk
            outs[g] = Output(None, layer.rows_shape(rows), out_code, who, g)
            setattr(bargs, g, _arrays.tensor(_rows(outs[g].array), who, g, output=True))
        else:
            outs[g] = Output(None, layer.param_shape(g[1:]), out_code, who, g, flat=True)
            setattr(bargs, g, _arrays.pointer(outs[g].array))
    resolve(ctx).call(lib.sdpa_mha_backward, ctypes.byref(bargs))
    return result_tuple("LayerGradients", list(outs))(*(o.result(layer.torch) for o in outs.values()))
