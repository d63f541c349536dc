"""Output arrays of a call: the caller's own (written in place, never
replaced) or new ones, and the named tuples results come back in."""

import collections

import numpy as np

from . import _abi
from . import _arrays
from ._errors import Error

LAYOUTS = ("bhtd", "bthd")


def check_layout(layout, who):
    if layout not in LAYOUTS:
        raise ValueError("%s: layout %r is none of %s" % (who, layout, ", ".join(LAYOUTS)))


def logical(a, layout, who, name):
    """The (.., H, T, D) view of an array given in layout."""
    if a.ndim < 2:
        raise Error(
            _abi.SDPA_ERR_BAD_DIM,
            "%s: %s: %d dimension(s); at least 2 (T, D)" % (who, name, a.ndim),
        )
    if layout == "bhtd":
        return a
    if a.ndim < 3:
        raise Error(
            _abi.SDPA_ERR_BAD_DIM,
            "%s: %s: layout 'bthd' needs (.., T, H, D), got %d dimensions" % (who, name, a.ndim),
        )
    return a.swapaxes(-2, -3)


def _matches(a, code):
    if code == _arrays.BFLOAT16:
        return a.dtype == np.uint16 or a.dtype == np.int16 or a.dtype.name == "bfloat16"
    return a.dtype == _arrays.NUMPY_TYPES[code]


class Output:
    """One output: `array` is the ndarray the library writes (the caller's
    own memory when they gave one), `tensor` its sdpa_tensor in
    (.., H, T, D) order, with a trailing extent-1 axis for per-row outputs
    (lse, max_weight, entropy), and result() what the caller gets back:
    their own object when they gave one."""

    def __init__(self, given, shape, code, who, name, *, layout="bhtd", per_row=False, flat=False):
        dtype = _arrays.NUMPY_TYPES[code]
        if given is None or given is True:
            user_shape = shape
            if layout == "bthd":
                user_shape = shape[:-3] + (shape[-2], shape[-3], shape[-1])
            arr = _arrays.Array(np.empty(user_shape, dtype=dtype), code)
            self.value = arr.a
        else:
            if not isinstance(given, np.ndarray) and not hasattr(given, "__dlpack__"):
                raise TypeError("%s: %s: an array to write into, not %s" % (who, name, type(given).__name__))
            arr = _arrays.take(given, who, name, float_input=False)
            if not _matches(arr.a, code):
                raise Error(
                    _abi.SDPA_ERR_BAD_DTYPE,
                    "%s: %s: dtype %s; this call writes %s" % (who, name, arr.a.dtype, _arrays.TYPE_NAMES[code]),
                )
            self.value = given
        self.array = arr.a
        self.made = given is None or given is True
        if flat:  # read through a plain pointer (dsinks, layer gradients)
            if arr.a.shape != tuple(shape) or not arr.a.flags.c_contiguous:
                raise Error(
                    _abi.SDPA_ERR_SHAPE_MISMATCH,
                    "%s: %s: a contiguous array of shape %s expected" % (who, name, tuple(shape)),
                )
            if not arr.a.flags.writeable:
                raise ValueError("%s: %s: the array is read-only" % (who, name))
            self.tensor = None
            return
        view = arr.a[..., None] if per_row else logical(arr.a, layout, who, name)
        self.tensor = _arrays.tensor(view, who, name, output=True)

    def result(self, like_torch):
        return _arrays.deliver(self.array, like_torch) if self.made else self.value


_TUPLES = {}


def result_tuple(name, fields):
    """A named tuple class of the fields asked for, e.g. ("out", "lse")."""
    key = (name, tuple(fields))
    if key not in _TUPLES:
        _TUPLES[key] = collections.namedtuple(name, fields)
    return _TUPLES[key]
