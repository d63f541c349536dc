"""numpy arrays (and PyTorch CPU tensors) as sdpa_tensor views, no copies.

A view's data pointer is the array's own, its strides are numpy's byte
strides divided by the element size; an array of fewer than 4 dimensions
gets leading dimensions of extent 1. What cannot be expressed so (a byte
stride that is not a multiple of the element size, a non-native byte
order, an unaligned buffer) is refused with sdpa.Error; negative strides
are passed on and the library refuses them with its own message.

A PyTorch CPU tensor is taken through Tensor.numpy(), which shares its
memory, stays writable (an output) and covers bool masks (PyTorch 1.13's
DLPack has no bool); any other object with __dlpack__ through
numpy.from_dlpack (read-only in numpy: an input). Results for tensor
inputs are returned as tensors of the same memory (torch.from_numpy).
PyTorch is never imported unless such a tensor is passed.
"""

import numpy as np

from . import _abi
from ._errors import Error

FLOAT32 = _abi.SDPA_FLOAT32
FLOAT64 = _abi.SDPA_FLOAT64
FLOAT16 = _abi.SDPA_FLOAT16
BFLOAT16 = _abi.SDPA_BFLOAT16

TYPE_NAMES = {FLOAT32: "float32", FLOAT64: "float64", FLOAT16: "float16", BFLOAT16: "bfloat16"}
TYPE_CODES = {name: code for code, name in TYPE_NAMES.items()}
NUMPY_TYPES = {FLOAT32: np.float32, FLOAT64: np.float64, FLOAT16: np.float16, BFLOAT16: np.uint16}


class Array:
    """An input or output as the library sees it: the numpy array (shared
    memory), its storage type (an SDPA_FLOAT* code or None for masks and
    index arrays) and whether it came from torch."""

    __slots__ = ("a", "storage", "torch")

    def __init__(self, a, storage=None, torch=False):
        self.a = a
        self.storage = storage
        self.torch = torch


def _is_torch(x):
    return type(x).__module__.split(".")[0] == "torch"


def _from_torch(x, who, name):
    if x.device.type != "cpu":
        raise Error(
            _abi.SDPA_ERR_BAD_DTYPE,
            "%s: %s: a tensor on %s; libsdpa reads CPU memory" % (who, name, x.device),
        )
    import torch

    x = x.detach()
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16).numpy().view(np.uint16), BFLOAT16
    return x.numpy(), None


def take(x, who, name, *, storage=None, float_input=True):
    """x as an Array. ndarrays and tensors share memory; any other object
    (a list, a scalar) is converted, to float64 for float tensors (a list
    has no memory to share)."""
    torch_in = False
    forced = None
    if isinstance(x, np.ndarray):
        a = x
    elif _is_torch(x):
        a, forced = _from_torch(x, who, name)
        torch_in = True
    elif hasattr(x, "__dlpack__"):
        a = np.from_dlpack(x)
    else:
        a = np.asarray(x, dtype=np.float64 if float_input else None)
    if not float_input:
        return Array(a, None, torch_in)
    return Array(a, forced or storage_type(a, who, name, storage), torch_in)


def storage_type(a, who, name, storage):
    """The SDPA_FLOAT* code of a float array; uint16 is bfloat16 only when
    storage says so (or numpy knows a bfloat16 dtype, as ml_dtypes adds)."""
    dt = a.dtype
    if dt.byteorder == ">" or (dt.byteorder == "=" and not dt.isnative):
        raise Error(_abi.SDPA_ERR_BAD_DTYPE, "%s: %s: byte order %r is not the machine's" % (who, name, dt.str))
    if dt.name == "bfloat16":
        return BFLOAT16
    if dt == np.uint16 or dt == np.int16:
        if storage == "bfloat16" or storage == BFLOAT16:
            return BFLOAT16
        raise Error(
            _abi.SDPA_ERR_BAD_DTYPE,
            "%s: %s: a %s array holds bfloat16 only with storage='bfloat16'" % (who, name, dt.name),
        )
    for code in (FLOAT32, FLOAT64, FLOAT16):
        if dt == NUMPY_TYPES[code]:
            return code
    raise Error(
        _abi.SDPA_ERR_BAD_DTYPE,
        "%s: %s: dtype %s is not float32, float64, float16 or bfloat16 "
        "(a uint16 array with storage='bfloat16')" % (who, name, dt),
    )


def byte_mask(x, who, name):
    """A mask as an Array of 1-byte elements: bool, uint8 and int8 arrays are
    read where they are (nonzero is what the library tests); any other
    (an int array such as np.array([[0, 1], [0, 0]]), a list) becomes the
    bool array x != 0, the one copy this package makes of a tensor."""
    arr = take(x, who, name, float_input=False)
    if arr.a.dtype not in (np.bool_, np.uint8, np.int8):
        if arr.a.dtype.kind not in "biuf":
            raise Error(
                _abi.SDPA_ERR_BAD_DTYPE,
                "%s: %s: dtype %s; a mask is a bool or uint8 array" % (who, name, arr.a.dtype),
            )
        arr.a = arr.a != 0
    return arr


def index_array(x, who, name, dtype, count):
    """A small array of indices or parameters (kv_lens, offsets, slopes,
    positions) as a contiguous array of dtype holding exactly count values:
    the library reads count values through the pointer, so a wrong length
    is refused here. Such arrays are copied when their dtype or layout
    differs (they are not tensors)."""
    a = np.ascontiguousarray(x.detach().numpy() if _is_torch(x) else x, dtype=dtype).reshape(-1)
    if count is not None and a.size != count:
        raise Error(
            _abi.SDPA_ERR_SHAPE_MISMATCH,
            "%s: %s: %d values, expected %d" % (who, name, a.size, count),
        )
    return a


def pointer(a):
    """The address of a's first element (None for an absent array)."""
    if a is None:
        return None
    return a.__array_interface__["data"][0]


def tensor(a, who, name, *, output=False):
    """The sdpa_tensor view of ndarray a (rank <= 4, leading dims added)."""
    if a.ndim > 4:
        raise Error(
            _abi.SDPA_ERR_BAD_DIM,
            "%s: %s: %d dimensions; at most 4 (N, H, T, D)" % (who, name, a.ndim),
        )
    if output and not a.flags.writeable:
        raise ValueError("%s: %s: the array is read-only" % (who, name))
    size = a.dtype.itemsize
    shape = (1,) * (4 - a.ndim) + tuple(a.shape)
    byte_strides = (0,) * (4 - a.ndim) + tuple(a.strides)
    strides = [0, 0, 0, 0]
    # An extent-1 dimension's stride is never used: give it the value of a
    # contiguous array, whatever numpy says.
    following = 1
    for d in (3, 2, 1, 0):
        if shape[d] == 1:
            strides[d] = following
        elif byte_strides[d] % size:
            raise Error(
                _abi.SDPA_ERR_BAD_STRIDE,
                "%s: %s: byte stride %d of dimension %d is not a multiple of the %d-byte element"
                % (who, name, byte_strides[d], d - (4 - a.ndim), size),
            )
        else:
            strides[d] = byte_strides[d] // size
        following = max(following, abs(strides[d]) * shape[d])
    if a.size and not a.flags.aligned:
        raise Error(
            _abi.SDPA_ERR_BAD_STRIDE,
            "%s: %s: the data is not aligned to its %d-byte elements" % (who, name, size),
        )
    t = _abi.sdpa_tensor()
    t.data = pointer(a)
    t.shape[:] = shape
    t.stride[:] = strides
    return t


def as_rank4(a):
    """a viewed with leading extent-1 dimensions up to rank 4."""
    return a.reshape((1,) * (4 - a.ndim) + a.shape) if a.ndim < 4 else a


def deliver(a, like_torch):
    """An output array as the caller gets it: numpy, or a torch tensor of the
    same memory when the inputs were tensors."""
    if not like_torch or a is None:
        return a
    import torch

    if a.dtype == np.uint16:
        return torch.from_numpy(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(a)

