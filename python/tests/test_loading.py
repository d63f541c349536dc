"""Finding the library: SDPA_LIBRARY, and the refusal of a library older
than the package (a stand-in compiled here that reports 1.0.0)."""

import os
import subprocess
import sys

import pytest

import sdpa

PYTHON_DIR = os.path.join(os.path.dirname(__file__), "..")


def _import_with(library):
    env = dict(os.environ, SDPA_LIBRARY=library, PYTHONPATH=PYTHON_DIR)
    return subprocess.run([sys.executable, "-c", "import sdpa; print(sdpa.library_path)"], env=env, capture_output=True, text=True)


def test_found_through_sdpa_library():
    if "SDPA_LIBRARY" in os.environ:
        assert sdpa.library_found_by == "SDPA_LIBRARY"
        assert sdpa.library_path == os.environ["SDPA_LIBRARY"]


def test_a_missing_library_is_an_import_error(tmp_path):
    r = _import_with(str(tmp_path / "libsdpa.so.1"))
    assert r.returncode != 0
    assert "ImportError" in r.stderr and "SDPA_LIBRARY" in r.stderr and str(tmp_path) in r.stderr


def test_an_older_library_is_refused(tmp_path):
    cc = os.environ.get("SDPA_TEST_CC", "cc")
    src = tmp_path / "old.c"
    src.write_text("unsigned sdpa_version_number(void) { return 10000; }\n")
    lib = tmp_path / "libold.so"
    try:
        subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(lib)], check=True, capture_output=True)
    except (FileNotFoundError, subprocess.CalledProcessError):
        pytest.skip("no C compiler %r (ctest sets SDPA_TEST_CC)" % cc)
    r = _import_with(str(lib))
    assert r.returncode != 0
    assert "is libsdpa 1.0.0; this package needs %s or later" % sdpa.__version__ in r.stderr
