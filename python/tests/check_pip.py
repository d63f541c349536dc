"""ctest python_pip: `pip install ./python` offline.

A venv that sees this interpreter's own packages (Debian's python3-numpy)
gets the package from a pip install with no index at all: the wheel is
built by python/build_backend/ from the standard library alone. Then the
installed copy, not the sources, computes the two-token example on the
library SDPA_LIBRARY names. Exits 77 (ctest: skipped) where this
interpreter cannot make a venv with pip (Debian: apt-get install
python3-venv).

Usage: check_pip.py PYTHON_SOURCE_DIR WORK_DIR"""

import os
import shutil
import subprocess
import sys

CHECK = r"""
import os, sys
import sdpa
assert os.path.realpath(sdpa.__file__).startswith(os.path.realpath(sys.argv[1])), sdpa.__file__
out, A = sdpa.attention([[1, 0], [0, 1]], [[1, 1], [2, 0]], [[1, 0, 0], [0, 1, 0]], weights=True)
assert abs(A[0, 1] - 0.6698) < 1e-4, A
print("pip-installed sdpa", sdpa.__version__, "at", sdpa.__file__)
"""


def main(source, work):
    shutil.rmtree(work, ignore_errors=True)
    venv = os.path.join(work, "venv")
    made = subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", venv], capture_output=True, text=True)
    pip = os.path.join(venv, "bin", "pip")
    if made.returncode != 0 or not os.path.exists(pip):
        print("python_pip skipped: %s -m venv failed: %s" % (sys.executable, made.stderr.strip()))
        return 77
    subprocess.run(
        [pip, "install", "--no-index", "--no-cache-dir", "--disable-pip-version-check", source],
        cwd=work,
        check=True,
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    subprocess.run([os.path.join(venv, "bin", "python"), "-c", CHECK, venv], cwd=work, env=env, check=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
