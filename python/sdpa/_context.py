"""sdpa.Context: a libsdpa context (options, worker threads, scratch).

A context is used by one thread at a time (the C rule); the functions of
this package that are given no ctx= use one context per Python thread,
made on first use (default_context()).
"""

import ctypes
import threading

from . import _abi
from ._errors import Error, check
from ._lib import lib

_OPTIONS = {
    "empty_rows": _abi.SDPA_OPT_EMPTY_ROWS,
    "threads": _abi.SDPA_OPT_NUM_THREADS,
    "kernel": _abi.SDPA_OPT_KERNEL,
    "path": _abi.SDPA_OPT_PATH,
    "scratch_limit": _abi.SDPA_OPT_SCRATCH_LIMIT,
    "block_q": _abi.SDPA_OPT_BLOCK_Q,
    "block_k": _abi.SDPA_OPT_BLOCK_K,
}

# The values an option takes by name (get returns the name when it has one).
_NAMED_VALUES = {
    "empty_rows": {"error": 0, "zero": 1},
    "threads": {"all": _abi.SDPA_NUM_THREADS_ALL},
    "kernel": {"auto": 0, "portable": 1, "avx2": 2, "avx512": 3},
    "path": {
        "auto": 0,
        "materialised": 1,
        "tiled": 2,
        "decode": 3,
        "decode_blas": 4,
    },
}


class Context:
    """A libsdpa context; a context manager that destroys it on exit.

    Context(threads=2, kernel="portable", path="tiled", empty_rows="zero",
            scratch_limit=..., block_q=..., block_k=..., allocator=None)

    Options may be given by name (the SDPA_OPT_* without the prefix, as
    above) or set later: ctx.set("threads", 4), ctx.get("kernel"). String
    values are the SDPA_* names in lower case ("avx2", "materialised",
    "zero", threads "all"). allocator, if given, is an object with
    alloc(size, alignment) -> address (0 for failure) and free(address,
    size): every allocation of the context goes through it
    (sdpa_ctx_create_with_allocator).
    """

    def __init__(self, allocator=None, **options):
        self._handle = ctypes.c_void_p()
        self._parallel_for = None
        self._allocator = None
        if allocator is None:
            status = lib.sdpa_ctx_create(ctypes.byref(self._handle))
        else:
            self._allocator = _Allocator(allocator)
            status = lib.sdpa_ctx_create_with_allocator(
                ctypes.byref(self._handle), ctypes.byref(self._allocator.struct)
            )
        check(status, lambda: "sdpa.Context: sdpa_ctx_create failed")
        for name, value in options.items():
            self.set(name, value)

    @property
    def handle(self):
        """The sdpa_ctx pointer (an int), for other ctypes code."""
        if not self._handle:
            raise Error(_abi.SDPA_ERR_NULL_POINTER, "sdpa.Context: closed")
        return self._handle.value

    def close(self):
        """Destroy the context (sdpa_ctx_destroy); later calls refuse it."""
        if self._handle:
            lib.sdpa_ctx_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        if getattr(self, "_handle", None):
            self.close()

    @property
    def last_error(self):
        """sdpa_ctx_last_error(): the message of the last failed call."""
        return lib.sdpa_ctx_last_error(self._handle).decode()

    def fail(self, status):
        """Raise sdpa.Error for status with this context's message."""
        check(status, lambda: self.last_error)

    def set(self, option, value):
        """sdpa_ctx_set_int(option, value); option by name or SDPA_OPT_*."""
        name, ident = _option_id(option)
        if isinstance(value, str):
            named = _NAMED_VALUES.get(name, {})
            if value.lower() not in named:
                raise Error(
                    _abi.SDPA_ERR_BAD_OPTION_VALUE,
                    "sdpa.Context: %s: %r is none of %s"
                    % (name, value, ", ".join(named) or "(numbers only)"),
                )
            value = named[value.lower()]
        self.fail(lib.sdpa_ctx_set_int(self.handle, ident, int(value)))

    def get(self, option):
        """sdpa_ctx_get_int(option): the name of the value where it has
        one ("avx512", "tiled"), else the number."""
        name, ident = _option_id(option)
        value = ctypes.c_int64()
        status = lib.sdpa_ctx_get_int(self.handle, ident, ctypes.byref(value))
        check(status, lambda: "sdpa.Context.get: option %r" % (option,))
        for text, number in _NAMED_VALUES.get(name, {}).items():
            if number == value.value:
                return text
        return value.value

    def set_parallel_for(self, parallel_for, workers):
        """Run this context's work items on the caller's threads
        (sdpa_ctx_set_parallel_for). parallel_for(items, task) must call
        task(item, worker) once for every item in range(items), worker in
        range(workers), no two calls with the same worker at once, and
        return when all have returned. None: back to the context's own
        workers. An exception it raises makes the call fail
        (SDPA_ERR_PARALLEL_FOR) and is chained to the sdpa.Error."""
        if parallel_for is None:
            self._parallel_for = None
            self.fail(
                lib.sdpa_ctx_set_parallel_for(
                    self.handle, _abi.parallel_for_fn(), None, int(workers)
                )
            )
            return
        bridge = _ParallelFor(parallel_for)
        self.fail(
            lib.sdpa_ctx_set_parallel_for(
                self.handle, bridge.c_function, None, int(workers)
            )
        )
        self._parallel_for = bridge

    def call(self, fn, *args):
        """Call a C entry point on this context; raise sdpa.Error on
        failure (chained to an exception of the caller's parallel-for)."""
        bridge = self._parallel_for
        if bridge is not None:
            bridge.exception = None
        status = fn(self.handle, *args)
        if status != _abi.SDPA_OK:
            error = Error(status, self.last_error)
            if bridge is not None and bridge.exception is not None:
                raise error from bridge.exception
            raise error


def _option_id(option):
    if isinstance(option, str):
        if option not in _OPTIONS:
            raise Error(
                _abi.SDPA_ERR_UNKNOWN_OPTION,
                "sdpa.Context: unknown option %r (options: %s)"
                % (option, ", ".join(_OPTIONS)),
            )
        return option, _OPTIONS[option]
    for name, ident in _OPTIONS.items():
        if ident == option:
            return name, ident
    return None, int(option)


class _ParallelFor:
    """The C parallel-for that calls the caller's Python one."""

    def __init__(self, fn):
        self.fn = fn
        self.exception = None

        def c_parallel_for(user, items, task, task_arg):
            try:
                fn(int(items), lambda item, worker: task(task_arg, item, worker))
            except BaseException as e:  # reported through the C call
                self.exception = e

        self.c_function = _abi.parallel_for_fn(c_parallel_for)


class _Allocator:
    """The sdpa_allocator that calls the caller's Python allocator."""

    def __init__(self, allocator):
        self.allocator = allocator

        def c_alloc(opaque, size, alignment):
            try:
                return allocator.alloc(int(size), int(alignment)) or None
            except BaseException:
                return None

        def c_free(opaque, ptr, size):
            allocator.free(ptr, int(size))

        self.c_alloc = _abi.alloc_fn(c_alloc)
        self.c_free = _abi.free_fn(c_free)
        self.struct = _abi.new(_abi.sdpa_allocator)
        self.struct.alloc = self.c_alloc
        self.struct.free = self.c_free


_local = threading.local()


def default_context():
    """This thread's context, made on first use, with default options."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = Context()
    return ctx


def resolve(ctx):
    """ctx if given, else this thread's default context."""
    return default_context() if ctx is None else ctx
