"""sdpa.attention, sdpa.workspace and sdpa.attention_backward: sdpa_forward,
sdpa_forward_workspace and sdpa_backward over numpy arrays."""

import ctypes

import numpy as np

from . import _abi
from . import _arrays
from ._context import resolve
from ._errors import Error
from ._lib import lib
from ._options import Options
from ._outputs import Output, check_layout, logical, result_tuple

_LOGITS = {
    "scaled": _abi.SDPA_LOGITS_SCALED,
    "capped": _abi.SDPA_LOGITS_CAPPED,
    "masked": _abi.SDPA_LOGITS_MASKED,
}


class _Inputs:
    """q, k, v of a call as (.., H, T, D) views and their storage types."""

    def __init__(self, who, q, k, v, storage, layout):
        check_layout(layout, who)
        self.q = _arrays.take(q, who, "q", storage=storage)
        self.k = _arrays.take(k, who, "k", storage=storage)
        self.v = _arrays.take(v, who, "v", storage=storage)
        if self.k.storage != self.v.storage:
            raise Error(
                _abi.SDPA_ERR_BAD_DTYPE,
                "%s: k is %s and v %s; they share one storage type (kv_dtype)"
                % (who, _arrays.TYPE_NAMES[self.k.storage], _arrays.TYPE_NAMES[self.v.storage]),
            )
        self.torch = self.q.torch
        self.rank = self.q.a.ndim
        self.qv = logical(self.q.a, layout, who, "q")
        self.kv = logical(self.k.a, layout, who, "k")
        self.vv = logical(self.v.a, layout, who, "v")
        self.q4 = _arrays.as_rank4(self.qv)
        self.k4 = _arrays.as_rank4(self.kv)
        self.v4 = _arrays.as_rank4(self.vv)
        self.dtype = self.q.storage
        half = self.dtype in (_arrays.FLOAT16, _arrays.BFLOAT16) or self.k.storage in (
            _arrays.FLOAT16,
            _arrays.BFLOAT16,
        )
        # The optional outputs are in the compute type (float32 with halves).
        self.compute = _arrays.FLOAT32 if half else self.dtype

    def shape(self, n, h, t, d, rank=None):
        """(n, h, t, d) cut to the rank of q (rank: of a per-row output)."""
        rank = self.rank if rank is None else rank
        full = (n, h, t, d)
        return full[4 - rank :]


def _extras(weights, lse, diagnostics, logits):
    asked = []
    if weights is not False and weights is not None:
        asked.append("weights")
    if lse is not False and lse is not None:
        asked.append("lse")
    if logits is not None:
        asked.append("logits")
    if diagnostics is not False and diagnostics is not None:
        asked += ["max_weight", "entropy"]
    return asked


def _forward_args(who, q, k, v, kw, *, block_table, storage, layout):
    inputs = _Inputs(who, q, k, v, storage, layout)
    opts = Options(who, storage=storage, **kw)
    args = _abi.new(_abi.sdpa_forward_args)
    args.dtype = inputs.dtype
    if inputs.k.storage != inputs.dtype:
        args.kv_dtype = inputs.k.storage
    if opts.bias is not None and opts.bias.storage != inputs.dtype:
        args.bias_dtype = opts.bias.storage
    args.q = _arrays.tensor(inputs.qv, who, "q")
    args.k = _arrays.tensor(inputs.kv, who, "k")
    args.v = _arrays.tensor(inputs.vv, who, "v")
    n, hq, tq, _ = inputs.q4.shape
    tk = inputs.k4.shape[2]
    if block_table is not None:
        table = _arrays.take(block_table, who, "block_table", float_input=False).a
        if table.dtype != np.int32 or table.ndim != 2 or table.strides[1] != 4:
            raise Error(
                _abi.SDPA_ERR_BAD_PAGE,
                "%s: block_table: an int32 array [N, pages_per_seq] with contiguous rows" % who,
            )
        rows = opts.seqs() if opts.q_offsets_in is not None else n
        if table.shape[0] != rows:
            raise Error(
                _abi.SDPA_ERR_SHAPE_MISMATCH,
                "%s: block_table: %d rows, expected %d" % (who, table.shape[0], rows),
            )
        opts.keep.append(table)
        args.block_table = _arrays.pointer(table)
        args.pages_per_seq = table.shape[1]
        args.block_table_stride = table.strides[0] // 4
        tk = table.shape[1] * inputs.k4.shape[2]
    opts.fill(args, n, hq)
    return args, inputs, opts, (n, hq, tq, tk)


def _forward_outputs(who, args, inputs, dims, out, weights, lse, diagnostics, logits, layout):
    n, hq, tq, tk = dims
    dv = inputs.v4.shape[3]
    r = inputs.rank
    outs = {"out": Output(out, inputs.shape(n, hq, tq, dv), inputs.dtype, who, "out", layout=layout)}
    args.out = outs["out"].tensor
    c = inputs.compute
    if "weights" in _extras(weights, None, None, None):
        outs["weights"] = Output(weights, inputs.shape(n, hq, tq, tk), c, who, "weights")
        args.weights = outs["weights"].tensor
    if "lse" in _extras(None, lse, None, None):
        outs["lse"] = Output(lse, inputs.shape(n, hq, tq, 1, r)[:-1], c, who, "lse", per_row=True)
        args.lse = outs["lse"].tensor
    if logits is not None:
        stage = _LOGITS.get(logits, logits) if isinstance(logits, str) else logits
        if isinstance(stage, str):
            raise Error(
                _abi.SDPA_ERR_BAD_LOGITS_STAGE,
                "%s: logits: %r is none of %s" % (who, logits, ", ".join(_LOGITS)),
            )
        args.logits_stage = int(stage)
        outs["logits"] = Output(None, inputs.shape(n, hq, tq, tk), c, who, "logits")
        args.logits = outs["logits"].tensor
    if diagnostics is not False and diagnostics is not None:
        given = (None, None) if diagnostics is True else diagnostics
        for name, arr in zip(("max_weight", "entropy"), given):
            outs[name] = Output(arr, inputs.shape(n, hq, tq, 1, r)[:-1], c, who, name, per_row=True)
            setattr(args, name, outs[name].tensor)
    return outs


def attention(
    q,
    k,
    v,
    *,
    mask=None,
    mask_allows=False,
    bias=None,
    causal=False,
    scale=None,
    softcap=None,
    kv_lens=None,
    window=None,
    alibi=None,
    sinks=None,
    weights=False,
    lse=False,
    diagnostics=False,
    logits=None,
    q_offsets=None,
    kv_offsets=None,
    block_table=None,
    storage=None,
    layout="bhtd",
    flags=0,
    dropout_p=0.0,
    dropout_seed=0,
    dropout_offset=0,
    out=None,
    ctx=None,
):
    """out = softmax(q kᵀ · scale + bias, forbidden keys removed) v.

    q, k, v   arrays (.., H, T, D) (layout="bhtd") or (.., T, H, D)
              ("bthd"): [T, D], [H, T, D] or [N, H, T, D]; float32,
              float64, float16, or uint16 holding bfloat16 with
              storage="bfloat16". Any strides (innermost 1); k and v may be
              broadcast (stride 0) over N. Never copied.
    mask      bool/uint8, broadcastable (extent 1) to [N, Hq, Tq, Tk]:
              nonzero forbids a key (mask_allows=True: nonzero allows, the
              PyTorch and ONNX sense)
    bias      float, broadcastable like mask, may hold -inf
    causal    False, True / "top_left", "bottom_right"
    scale     None = 1/sqrt(Dk); softcap None = off
    kv_lens   N valid key lengths; window (left, right), None = unbounded
    alibi     True (the standard slopes) or Hq slopes; sinks: Hq logits
    weights, lse, diagnostics   True (or arrays to write into) to get the
              weights [.., Tq, Tk], the log-sum-exp [.., Tq] and the
              per-row (max_weight, entropy); logits: "scaled", "capped"
              or "masked" for the scores at that stage
    q_offsets, kv_offsets, block_table   a ragged batch / paged K and V
              (docs/RAGGED.md, docs/ENGINES.md)
    dropout_p, dropout_seed, dropout_offset   dropout on the weights: each
              kept with probability 1 - dropout_p and scaled by
              1/(1 - dropout_p), the mask drawn from Philox4x32-10 keyed
              by the seed and offset (docs/SEMANTICS.md); pass the same
              three to attention_backward
    out       an array to write the result into (else a new one)
    ctx       an sdpa.Context (else this thread's default one)

    Returns out, or a named tuple (out, weights, lse, logits, max_weight,
    entropy: those asked for). On an error, sdpa.Error is raised and out is
    untouched (except SDPA_ERR_NONFINITE, as in C).
    """
    who = "sdpa.attention"
    kw = dict(
        mask=mask,
        mask_allows=mask_allows,
        bias=bias,
        causal=causal,
        scale=scale,
        softcap=softcap,
        kv_lens=kv_lens,
        window=window,
        alibi=alibi,
        sinks=sinks,
        q_offsets=q_offsets,
        kv_offsets=kv_offsets,
        flags=flags,
        dropout_p=dropout_p,
        dropout_seed=dropout_seed,
        dropout_offset=dropout_offset,
    )
    args, inputs, opts, dims = _forward_args(who, q, k, v, kw, block_table=block_table, storage=storage, layout=layout)
    outs = _forward_outputs(who, args, inputs, dims, out, weights, lse, diagnostics, logits, layout)
    resolve(ctx).call(lib.sdpa_forward, ctypes.byref(args))
    if len(outs) == 1:
        return outs["out"].result(inputs.torch)
    fields = [f for f in ("out", "weights", "lse", "logits", "max_weight", "entropy") if f in outs]
    Result = result_tuple("Attention", fields)
    return Result(*(outs[f].result(inputs.torch) for f in fields))


def workspace(q, k, v, *, weights=False, lse=False, diagnostics=False, logits=None, ctx=None, **kw):
    """The bytes ctx will hold after sdpa.attention(q, k, v, ...) with the
    same arguments (sdpa_forward_workspace): nothing is computed and no
    scratch is allocated."""
    who = "sdpa.workspace"
    block_table = kw.pop("block_table", None)
    storage = kw.pop("storage", None)
    layout = kw.pop("layout", "bhtd")
    out = kw.pop("out", None)
    args, inputs, opts, dims = _forward_args(who, q, k, v, kw, block_table=block_table, storage=storage, layout=layout)
    # The outputs must exist (and stay alive) while the library plans with them.
    outs = _forward_outputs(who, args, inputs, dims, out, weights, lse, diagnostics, logits, layout)
    size = ctypes.c_size_t()
    resolve(ctx).call(lib.sdpa_forward_workspace, ctypes.byref(args), ctypes.byref(size))
    del outs, opts
    return size.value


def _broadcast_extent(a4, dim):
    """1 where a view repeats itself along dim (extent 1 or stride 0)."""
    return 1 if a4.shape[dim] == 1 or a4.strides[dim] == 0 else a4.shape[dim]


def attention_backward(
    dout,
    q,
    k,
    v,
    out,
    lse,
    *,
    dbias=False,
    dsinks=False,
    dq=None,
    dk=None,
    dv=None,
    grad_dtype=None,
    storage=None,
    layout="bhtd",
    ctx=None,
    **options
):
    """The gradients of sdpa.attention (sdpa_backward).

    dout is the gradient of the loss for out; q, k, v, the options (mask,
    mask_allows, bias, causal, scale, softcap, kv_lens, window, alibi,
    sinks, q_offsets, kv_offsets, dropout_p, dropout_seed, dropout_offset:
    the keywords of sdpa.attention), out and
    lse (lse=True of the forward call) are those of the forward call.
    Returns the named tuple (dq, dk, dv[, dbias][, dsinks]): dk and dv have
    extent 1 over N where k and v are broadcast over N (the sum over the
    batch), dbias the bias's shape with extent 1 where the bias broadcasts
    (dbias=True, or an array), dsinks Hq values (dsinks=True). dq, dk, dv
    may be arrays to write into. With float16 or bfloat16 storage (1.2;
    storage="bfloat16" for uint16 arrays) dq is in q's storage type and dk,
    dv in k's, or all three float32 with grad_dtype="float32"; lse and
    dbias are in the compute type (float32), as the forward wrote lse.
    """
    who = "sdpa.attention_backward"
    inputs = _Inputs(who, q, k, v, storage, layout)
    opts = Options(who, storage=storage, **options)
    code = inputs.dtype
    args = _abi.new(_abi.sdpa_backward_args)
    args.dtype = code
    if inputs.k.storage != code:
        args.kv_dtype = inputs.k.storage
    if opts.bias is not None and opts.bias.storage != code:
        args.bias_dtype = opts.bias.storage
    grad_code = _arrays.TYPE_CODES.get(grad_dtype, grad_dtype) if grad_dtype is not None else 0
    if isinstance(grad_code, str):
        raise Error(_abi.SDPA_ERR_BAD_DTYPE, "%s: grad_dtype %r is neither None nor 'float32'" % (who, grad_dtype))
    args.grad_dtype = int(grad_code)
    args.q = _arrays.tensor(inputs.qv, who, "q")
    args.k = _arrays.tensor(inputs.kv, who, "k")
    args.v = _arrays.tensor(inputs.vv, who, "v")
    dout_a = _arrays.take(dout, who, "dout", storage=storage)
    out_a = _arrays.take(out, who, "out", storage=storage)
    lse_a = _arrays.take(lse, who, "lse")
    for name, arr, want in (("dout", dout_a, code), ("out", out_a, code), ("lse", lse_a, inputs.compute)):
        if arr.storage != want:
            raise Error(
                _abi.SDPA_ERR_BAD_DTYPE,
                "%s: %s is %s; this call reads it as %s (q is %s)"
                % (who, name, _arrays.TYPE_NAMES[arr.storage], _arrays.TYPE_NAMES[want], _arrays.TYPE_NAMES[code]),
            )
    args.dout = _arrays.tensor(logical(dout_a.a, layout, who, "dout"), who, "dout")
    args.out = _arrays.tensor(logical(out_a.a, layout, who, "out"), who, "out")
    args.lse = _arrays.tensor(lse_a.a[..., None], who, "lse")
    n, hq, tq, dk_ = inputs.q4.shape
    nk, hkv, tk, _ = inputs.k4.shape
    dv_ = inputs.v4.shape[3]
    opts.fill(args, n, hq)
    grads = {}
    q_grad = grad_code or code
    kv_grad = grad_code or inputs.k.storage
    grads["dq"] = Output(dq, inputs.shape(n, hq, tq, dk_), q_grad, who, "dq", layout=layout)
    k_rank = inputs.kv.ndim
    nk = _broadcast_extent(inputs.k4, 0)
    nv = _broadcast_extent(inputs.v4, 0)
    grads["dk"] = Output(dk, (nk, hkv, tk, dk_)[4 - k_rank :], kv_grad, who, "dk", layout=layout)
    grads["dv"] = Output(dv, (nv, hkv, tk, dv_)[4 - inputs.vv.ndim :], kv_grad, who, "dv", layout=layout)
    args.dq = grads["dq"].tensor
    args.dk = grads["dk"].tensor
    args.dv = grads["dv"].tensor
    if dbias is not False and dbias is not None:
        if opts.bias is None:
            raise Error(_abi.SDPA_ERR_NULL_POINTER, "%s: dbias asked for without a bias" % who)
        b = opts.bias.a
        b4 = _arrays.as_rank4(b)
        shape = tuple(_broadcast_extent(b4, d) for d in range(4))[4 - b.ndim :]
        grads["dbias"] = Output(dbias, shape, inputs.compute, who, "dbias")
        args.dbias = grads["dbias"].tensor
    if dsinks is not False and dsinks is not None:
        given = None if dsinks is True else dsinks
        grads["dsinks"] = Output(given, (hq,), _arrays.FLOAT64, who, "dsinks", flat=True)
        args.dsinks = _arrays.pointer(grads["dsinks"].array)
    resolve(ctx).call(lib.sdpa_backward, ctypes.byref(args))
    fields = list(grads)
    Result = result_tuple("Gradients", fields)
    return Result(*(grads[f].result(inputs.torch) for f in fields))
