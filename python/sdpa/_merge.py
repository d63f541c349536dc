"""sdpa.merge: partial results over disjoint key sets combined (sdpa_merge)."""

import ctypes

from . import _abi
from . import _arrays
from ._context import resolve
from ._errors import Error
from ._lib import lib
from ._outputs import Output, check_layout, logical, result_tuple


def merge(outs, lses, *, lse=False, layout="bhtd", out=None, ctx=None):
    """The attention over the union of P key sets from the P partial results
    (outs[p], lses[p]) of sdpa.attention(..., lse=True) over each:
    lse = m + log Σ exp(lse_p − m), out = Σ exp(lse_p − lse) out_p.

    outs: P arrays (.., H, T, Dv); lses: P arrays (.., H, T), all of one
    dtype (float32 or float64). Returns out, or (out, lse) with lse=True (or
    an array to write into). out may be outs[0] and lse lses[0]: the merge
    then accumulates into partial 0.
    """
    who = "sdpa.merge"
    check_layout(layout, who)
    outs = [_arrays.take(o, who, "outs[%d]" % p) for p, o in enumerate(outs)]
    lses = [_arrays.take(s, who, "lses[%d]" % p) for p, s in enumerate(lses)]
    if not outs or len(outs) != len(lses):
        raise Error(
            _abi.SDPA_ERR_BAD_DIM,
            "%s: %d partial outputs and %d lses; at least one of each, as many lses as outputs"
            % (who, len(outs), len(lses)),
        )
    code = outs[0].storage
    args = _abi.new(_abi.sdpa_merge_args)
    args.dtype = code
    args.parts = len(outs)
    views = [logical(o.a, layout, who, "outs[%d]" % p) for p, o in enumerate(outs)]
    c_outs = (_abi.sdpa_tensor * len(outs))(*(_arrays.tensor(v, who, "outs") for v in views))
    c_lses = (_abi.sdpa_tensor * len(lses))(*(_arrays.tensor(s.a[..., None], who, "lses") for s in lses))
    args.outs = c_outs
    args.lses = c_lses
    first = _arrays.as_rank4(views[0])
    shape = first.shape[4 - views[0].ndim :]
    results = {"out": Output(out, shape, code, who, "out", layout=layout)}
    args.out = results["out"].tensor
    if lse is not False and lse is not None:
        results["lse"] = Output(lse, shape[:-1], code, who, "lse", per_row=True)
        args.lse = results["lse"].tensor
    resolve(ctx).call(lib.sdpa_merge, ctypes.byref(args))
    like_torch = outs[0].torch
    if len(results) == 1:
        return results["out"].result(like_torch)
    return result_tuple("Merged", ["out", "lse"])(*(r.result(like_torch) for r in results.values()))
