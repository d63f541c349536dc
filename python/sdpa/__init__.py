"""sdpa: libsdpa's exact scaled dot-product attention from Python.

    import numpy as np, sdpa
    out = sdpa.attention(q, k, v, causal=True)          # numpy in and out
    out, A = sdpa.attention(q, k, v, weights=True)

A pure-Python package over the installed libsdpa.so.1 (ctypes): numpy
arrays and PyTorch CPU tensors are read and written where they are, with
their strides, never copied. Every failure raises sdpa.Error, with the
library's status code, its name and the message saying what and where.
The manual page is docs/PYTHON.md of the libsdpa sources.
"""

from . import _abi
from ._abi import *  # noqa: F401,F403  (SDPA_* constants)
from ._attention import attention, attention_backward, workspace
from ._context import Context, default_context
from ._convert import convert
from ._errors import Error, status_name, status_string
from ._layer import mha_backward, mha_forward
from ._lib import lib as _lib
from ._merge import merge
from ._positions import alibi_slopes, rope, sinusoidal_table

__all__ = [
    "Context",
    "Error",
    "alibi_slopes",
    "attention",
    "attention_backward",
    "convert",
    "default_context",
    "library_found_by",
    "library_path",
    "library_version",
    "merge",
    "mha_backward",
    "mha_forward",
    "rope",
    "sinusoidal_table",
    "status_name",
    "status_string",
    "workspace",
]

__version__ = "%d.%d.%d" % (
    _abi.HEADER_VERSION_NUMBER // 10000,
    _abi.HEADER_VERSION_NUMBER // 100 % 100,
    _abi.HEADER_VERSION_NUMBER % 100,
)

#: The file the library was loaded from, and how it was found.
library_path = _lib.sdpa_path
library_found_by = _lib.sdpa_found_by


def library_version():
    """(sdpa_version_number(), sdpa_version_string()) of the loaded library."""
    return _lib.sdpa_version_number(), _lib.sdpa_version_string().decode()
