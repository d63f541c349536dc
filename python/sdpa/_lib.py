"""Finding and loading libsdpa.so.1.

In this order: the file the environment variable SDPA_LIBRARY names; the
library the CMake build installed next to this package (its path is
written into sdpa/_install.py at install time); the system loader's
libsdpa.so.1. The library must be at least the release this package was
written for (_abi.HEADER_VERSION_NUMBER), else loading fails with
ImportError: its structures and functions would not be those of _abi.
"""

import ctypes
import os

from . import _abi

SONAME = "libsdpa.so.1"


def _installed_path():
    try:
        from . import _install  # written by the CMake install
    except ImportError:
        return None
    return getattr(_install, "LIBRARY", None)


def candidates():
    """The places tried, in order, as (how it was found, path or name)."""
    found = []
    env = os.environ.get("SDPA_LIBRARY")
    if env:
        found.append(("SDPA_LIBRARY", env))
    installed = _installed_path()
    if installed:
        found.append(("installed by CMake", installed))
    found.append(("system loader", SONAME))
    return found


def _version_text(number):
    return "%d.%d.%d" % (number // 10000, number // 100 % 100, number % 100)


def _bind(lib):
    # A function the library lacks (a 1.1.0 release has no sdpa_convert)
    # is recorded, and calling its wrapper raises sdpa.Error.
    lib.sdpa_missing = set()
    for name, (restype, argtypes) in _abi.PROTOTYPES.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            lib.sdpa_missing.add(name)
            continue
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


def load():
    """The loaded library (ctypes.CDLL) with its prototypes set."""
    tried = []
    for how, path in candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s): %s" % (path, how, e))
            continue
        lib.sdpa_version_number.restype = ctypes.c_uint
        version = lib.sdpa_version_number()
        if version < _abi.HEADER_VERSION_NUMBER:
            raise ImportError(
                "sdpa: %s (%s) is libsdpa %s; this package needs %s or later"
                % (
                    path,
                    how,
                    _version_text(version),
                    _version_text(_abi.HEADER_VERSION_NUMBER),
                )
            )
        lib.sdpa_path = path
        lib.sdpa_found_by = how
        return _bind(lib)
    raise ImportError(
        "sdpa: libsdpa not found; set SDPA_LIBRARY to the path of "
        "libsdpa.so.1. Tried: " + "; ".join(tried)
    )


lib = load()
