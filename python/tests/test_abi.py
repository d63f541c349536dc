"""The ctypes declarations of sdpa._abi against include/sdpa.h itself: a C
program generated from the declarations (every field's offsetof, every
struct's sizeof, every constant's value) is compiled against the header
and its output compared. A field the header gains, loses, renames or moves
fails here, so does a status code added without its name."""

import ctypes
import os
import re
import subprocess

import pytest

import sdpa
from sdpa import _abi

SOURCE_DIR = os.environ.get("SDPA_TEST_SOURCE_DIR") or os.path.join(os.path.dirname(__file__), "..", "..")
HEADER = os.path.join(SOURCE_DIR, "include", "sdpa.h")


def _header_text():
    with open(HEADER) as f:
        return f.read()


def _program():
    lines = ["#include <sdpa.h>", "#include <stddef.h>", "#include <stdio.h>", "int main(void)", "{"]
    for struct in _abi.ALL_STRUCTS:
        name = struct.__name__
        lines.append('    printf("%s sizeof %%zu\\n", sizeof(%s));' % (name, name))
        for field, _ in struct._fields_:
            lines.append('    printf("%s.%s %%zu\\n", offsetof(%s, %s));' % (name, field, name, field))
    for name in list(_abi.STATUS_NAMES.values()) + list(_abi.CONSTANTS):
        lines.append('    printf("%s %%lld\\n", (long long)(%s));' % (name, name))
    lines.append('    printf("SDPA_VERSION_NUMBER %lld\\n", (long long)SDPA_VERSION_NUMBER);')
    lines += ["    return 0;", "}"]
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def c_values(tmp_path_factory):
    cc = os.environ.get("SDPA_TEST_CC", "cc")
    work = tmp_path_factory.mktemp("abi")
    src = work / "layout.c"
    exe = work / "layout"
    src.write_text(_program())
    try:
        subprocess.run(
            [cc, "-std=c11", "-I", os.path.dirname(HEADER), str(src), "-o", str(exe)],
            check=True,
            capture_output=True,
            text=True,
        )
    except FileNotFoundError:
        pytest.skip("no C compiler %r (ctest sets SDPA_TEST_CC)" % cc)
    except subprocess.CalledProcessError as e:
        pytest.fail("the header does not have what sdpa._abi declares:\n" + e.stderr)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    values = {}
    for line in out.splitlines():
        key, value = line.rsplit(" ", 1)
        values[key] = int(value)
    return values


@pytest.mark.parametrize("struct", _abi.ALL_STRUCTS, ids=lambda s: s.__name__)
def test_struct_layout_is_the_headers(c_values, struct):
    name = struct.__name__
    assert ctypes.sizeof(struct) == c_values[name + " sizeof"]
    for field, _ in struct._fields_:
        assert getattr(struct, field).offset == c_values["%s.%s" % (name, field)], field


def test_struct_sizes_of_docs_abi():
    # docs/ABI.md's numbers: 976 and 1016 bytes since 1.2, the merge's 184
    # and the backward layer's 304 (1.2; 296 in 1.1) (LP64).
    assert ctypes.sizeof(_abi.sdpa_forward_args) == 976
    assert ctypes.sizeof(_abi.sdpa_backward_args) == 1016
    assert ctypes.sizeof(_abi.sdpa_merge_args) == 184
    assert ctypes.sizeof(_abi.sdpa_mha_backward_args) == 304
    assert _abi.sdpa_mha_backward_args.grad_dtype.offset == 296
    assert ctypes.sizeof(_abi.sdpa_tensor) == 72
    assert ctypes.sizeof(_abi.sdpa_allocator) == 32
    assert _abi.sdpa_forward_args.seqs.offset == 912
    assert _abi.sdpa_backward_args.seqs.offset == 952
    assert _abi.sdpa_backward_args.kv_dtype.offset == 976
    assert _abi.sdpa_backward_args.grad_dtype.offset == 984


def test_constants_are_the_headers(c_values):
    for name in list(_abi.STATUS_NAMES.values()) + list(_abi.CONSTANTS):
        assert getattr(_abi, name) == c_values[name], name
        assert getattr(sdpa, name) == c_values[name], name


def test_every_status_of_the_header_has_its_name():
    header = set(re.findall(r"\b(SDPA_(?:OK|ERR_[A-Z_]+))\s*=", _header_text()))
    assert header == set(_abi.STATUS_NAMES.values())


def test_every_exported_function_is_bound():
    declared = set(re.findall(r"SDPA_API\s[^;(]*?\b(sdpa_[a-z_0-9]+)\s*\(", _header_text()))
    assert declared == set(_abi.PROTOTYPES)


def test_written_for_the_headers_version(c_values):
    assert _abi.HEADER_VERSION_NUMBER == c_values["SDPA_VERSION_NUMBER"]
    number, text = sdpa.library_version()
    assert number >= _abi.HEADER_VERSION_NUMBER
    assert text == "%d.%d.%d" % (number // 10000, number // 100 % 100, number % 100)


def test_status_names_and_strings():
    assert sdpa.status_name(5) == "SDPA_ERR_BAD_DIM"
    assert sdpa.status_string(0) == "success"
    assert sdpa.status_string(-3) == "unknown status"
