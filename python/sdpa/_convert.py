"""sdpa.convert: float32 to and from float16 / bfloat16 with the library's
own bits (sdpa_convert)."""

import numpy as np

from . import _abi
from . import _arrays
from ._errors import Error, status_string
from ._lib import lib


def convert(src, to, *, storage=None, out=None):
    """src (a contiguous float32, float16 or bfloat16 array; bfloat16 as
    uint16 with storage="bfloat16") converted to `to` ("float32",
    "float16" or "bfloat16"), rounding to nearest even as the library
    computes. bfloat16 results are uint16 arrays. Into out if given (a
    contiguous array of src's size)."""
    who = "sdpa.convert"
    if "sdpa_convert" in lib.sdpa_missing:
        raise Error(_abi.SDPA_ERR_UNSUPPORTED, "%s: this libsdpa has no sdpa_convert (1.2)" % who)
    arr = _arrays.take(src, who, "src", storage=storage)
    if not arr.a.flags.c_contiguous:
        raise Error(_abi.SDPA_ERR_BAD_STRIDE, "%s: src: a contiguous array expected" % who)
    dst_code = _arrays.TYPE_CODES.get(to, to)
    if isinstance(dst_code, str):
        raise Error(_abi.SDPA_ERR_BAD_DTYPE, "%s: to %r is none of float32, float16, bfloat16" % (who, to))
    if out is None:
        dtype = _arrays.NUMPY_TYPES.get(dst_code, np.uint8)
        out = np.empty(arr.a.shape, dtype=dtype)
    elif not isinstance(out, np.ndarray) or out.size != arr.a.size or not out.flags.c_contiguous:
        raise Error(_abi.SDPA_ERR_SHAPE_MISMATCH, "%s: out: a contiguous array of %d values expected" % (who, arr.a.size))
    elif out.dtype.itemsize != np.dtype(_arrays.NUMPY_TYPES.get(dst_code, np.uint8)).itemsize:
        raise Error(_abi.SDPA_ERR_BAD_DTYPE, "%s: out: dtype %s does not hold %s" % (who, out.dtype, to))
    status = lib.sdpa_convert(int(dst_code), _arrays.pointer(out), arr.storage, _arrays.pointer(arr.a), arr.a.size)
    if status != _abi.SDPA_OK:
        raise Error(
            status,
            "%s: %s (%s to %s, %d values)"
            % (who, status_string(status), _arrays.TYPE_NAMES[arr.storage], to, arr.a.size),
        )
    return out
