"""sdpa.Error: the one exception every refused or failed call raises."""

from . import _abi
from ._lib import lib


def status_string(status):
    """The library's short fixed description of a status code."""
    return lib.sdpa_status_string(int(status)).decode()


def status_name(status):
    """The header's name of a status code ("SDPA_ERR_BAD_DIM")."""
    return _abi.STATUS_NAMES.get(int(status), "unknown status %d" % status)


class Error(Exception):
    """A status code of libsdpa, with what and where.

    status       the int the C function returned (sdpa.SDPA_ERR_*)
    name         its name in include/sdpa.h, e.g. "SDPA_ERR_BAD_DIM"
    description  sdpa_status_string(status), e.g. "dimension is zero..."
    message      the located message: sdpa_ctx_last_error() of the call's
                 context, or, for what this package checks before calling
                 (a stride numpy cannot express in elements, a dtype the
                 library has no code for), this package's own, in the
                 same style ("sdpa.attention: q: ...")
    """

    def __init__(self, status, message):
        self.status = int(status)
        self.name = status_name(status)
        self.description = status_string(status)
        self.message = message
        super().__init__("%s (%d): %s" % (self.name, self.status, message))


def check(status, message_fn):
    """Raise Error for a status other than SDPA_OK; message_fn() gives the
    message (read only on failure)."""
    if status != _abi.SDPA_OK:
        raise Error(status, message_fn())
